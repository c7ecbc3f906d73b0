/* libFuzzer target for spark-router's policy parser (router/policy.c, with
 * common/cfg's cfg_locate for error positions). Invariants that abort: a
 * refused policy yields no policy and a message "fuzz.yaml:LINE:COL: ..."; an
 * accepted one has at least one target and route, every index in range, and
 * every service target has an owner (a URL target none), and "" is nobody
 * unless the owner is "*"; a decision for each of its routes names a target of the policy (for a
 * classifier route, after a failed judge: its default). */
#include "decide.h"
#include "policy.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_err(const char *err)
{
	static const char name[] = "fuzz.yaml:";
	if (strncmp(err, name, sizeof name - 1) != 0)
		abort();
	const char *p = err + sizeof name - 1;
	for (int field = 0; field < 2; field++) {
		if (!isdigit((unsigned char)*p))
			abort();
		while (isdigit((unsigned char)*p))
			p++;
		if (*p++ != ':')
			abort();
	}
	if (*p != ' ')
		abort();
}

static const char *hdr(void *ctx, const char *name)
{
	(void)ctx;
	return strcasecmp(name, "x-tier") == 0 ? "gold" : NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int env_set;
	if (!env_set) {
		setenv("FUZZ_KEY", "0123456789abcdef-fuzz", 1);
		env_set = 1;
	}
	struct policy *p = (struct policy *)1;
	char err[600] = "";
	int r = policy_parse("fuzz.yaml", (const char *)data, size, &p, err, sizeof err);
	if (r < 0) {
		if (p || (r != -EINVAL && r != -ENOMEM))
			abort();
		if (r == -EINVAL)
			check_err(err);
		return 0;
	}
	if (!p || p->n_targets == 0 || p->n_routes == 0 || !p->listen)
		abort();
	/* a service target has an owner (root unless set), a URL target none */
	for (size_t i = 0; i < p->n_targets; i++) {
		const struct target *tg = &p->targets[i];
		if ((tg->kind == TARGET_SERVICE) != !!tg->owner || (tg->owner && !*tg->owner) ||
		    (tg->owner && policy_owner_ok(tg, "") != !strcmp(tg->owner, "*")))
			abort();
	}
	const char *body = "{\"model\":\"m\",\"tools\":[{}],\"messages\":[{\"role\":\"system\","
			   "\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"prove it\"}]}";
	struct req_info ri;
	json_t *j;
	if (req_parse(body, strlen(body), REQ_CHAT, &ri, &j, err, sizeof err) != 0)
		abort();
	for (size_t i = 0; i < p->n_routes; i++) {
		ri.model = p->routes[i].name;
		struct decision d;
		uint64_t rng = i;
		if (route_decide(p, &ri, hdr, NULL, &rng, &d) != 0 || d.route != &p->routes[i])
			abort();
		if (d.target < 0 || (size_t)d.target >= p->n_targets || d.n_chain == 0)
			abort();
		for (size_t k = 0; k < d.n_chain; k++)
			if (d.chain[k] < 0 || (size_t)d.chain[k] >= p->n_targets)
				abort();
		if (d.pending) { /* a classifier route: its prompt, then a failed judge */
			free(classifier_body(p, d.route, &ri));
			if (classifier_pick(p, NULL, 0, 0, "fuzz", &d) != -EINVAL || d.pending ||
			    d.target != d.route->target)
				abort();
		}
		json_decref(decision_json(p, &d, NULL));
	}
	req_info_free(&ri);
	json_decref(j);
	policy_free(p);
	return 0;
}

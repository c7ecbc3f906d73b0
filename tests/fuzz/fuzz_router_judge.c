/* libFuzzer target for spark-router's reading of a classifier's answer
 * (router/decide.c classifier_pick): arbitrary bytes as the judge's HTTP body,
 * for a route answering with a target and one answering with p_solve (the
 * first byte picks). Invariants that abort: the decision is settled, on a
 * candidate target when the answer was used (0) and on the route's default
 * otherwise (-EINVAL), with the target first in its chain. */
#include "decide.h"
#include "policy.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char POLICY[] =
	"targets:\n"
	"  big: {url: 'http://127.0.0.1:9/v1'}\n"
	"  small: {url: 'http://127.0.0.1:9/v1'}\n"
	"  mid: {url: 'http://127.0.0.1:9/v1'}\n"
	"  judge: {url: 'http://127.0.0.1:9/v1'}\n"
	"routes:\n"
	"  t: {type: classifier, classifier: judge, targets: [small, mid], default: big, fallbacks: [mid]}\n"
	"  p: {type: classifier, classifier: judge, answer: p_solve, strong: big, weak: small, default: mid}\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct policy *p;
	static struct req_info ri;
	static json_t *j;
	char err[512];
	if (!p) {
		const char *b = "{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
		if (policy_parse("fuzz", POLICY, sizeof POLICY - 1, &p, err, sizeof err) != 0 ||
		    req_parse(b, strlen(b), REQ_CHAT, &ri, &j, err, sizeof err) != 0)
			abort();
	}
	if (size == 0)
		return 0;
	ri.model = data[0] & 1 ? "p" : "t";
	struct decision d;
	uint64_t rng = 0;
	if (route_decide(p, &ri, NULL, NULL, &rng, &d) != 0 || !d.pending)
		abort();
	const struct route *rt = d.route;
	int rc = classifier_pick(p, (const char *)data + 1, size - 1, 200, NULL, &d);
	if (d.pending || d.n_chain == 0 || d.chain[0] != d.target)
		abort();
	if (rc == 0) {
		bool cand = rt->answer == ANSWER_TARGET
				    ? d.target == rt->wtargets[0] || d.target == rt->wtargets[1]
				    : d.target == rt->strong || d.target == rt->weak;
		if (!cand)
			abort();
	} else if (rc != -EINVAL || d.target != rt->target) {
		abort();
	}
	return 0;
}

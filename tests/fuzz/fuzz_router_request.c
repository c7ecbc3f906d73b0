/* libFuzzer target for spark-router's request body reader (router/decide.c
 * req_parse) and the decisions made on what it read, against a fixed policy
 * with every condition type. The first byte picks chat or completions.
 * Invariants that abort: a refused body yields no JSON and a message; an
 * accepted one has a model, tokens = ceil(chars / 4), and its decision (when
 * its model has a route) names a target of the policy. */
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
	"  small: {url: 'http://127.0.0.1:9/v1', weight: 2}\n"
	"  svc: {service: pool-a}\n"
	"default_route: auto\n"
	"routes:\n"
	"  auto:\n"
	"    type: rules\n"
	"    default: small\n"
	"    fallbacks: [big]\n"
	"    rules:\n"
	"      - {when: {min_tokens: 50}, target: big}\n"
	"      - {when: {max_chars: 3, tools: false, images: false}, target: small}\n"
	"      - {when: {tools: true}, target: big}\n"
	"      - {when: {images: true}, target: svc}\n"
	"      - {when: {keywords: [prove, 'step by step'], in: any}, target: big}\n"
	"      - {when: {regex: '^(a|b)+c$', in: system}, target: big}\n"
	"      - {when: {model: [x, y]}, target: svc}\n"
	"      - {when: {header: {name: x-tier}}, target: big}\n"
	"  w: {type: weighted, seed: 7, targets: [big, small, {target: svc, weight: 5}]}\n"
	"  p: {type: passthrough, target: big}\n";

static const char *hdr(void *ctx, const char *name)
{
	(void)ctx;
	(void)name;
	return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct policy *p;
	char err[512];
	if (!p && policy_parse("fuzz", POLICY, sizeof POLICY - 1, &p, err, sizeof err) != 0)
		abort();
	if (size == 0)
		return 0;
	enum req_kind kind = data[0] & 1 ? REQ_COMPLETIONS : REQ_CHAT;
	struct req_info ri;
	json_t *j = (json_t *)1;
	err[0] = 0;
	int r = req_parse((const char *)data + 1, size - 1, kind, &ri, &j, err, sizeof err);
	if (r < 0) {
		if (j || !err[0] || (r != -EINVAL && r != -ENOMEM))
			abort();
		return 0;
	}
	if (!j || !ri.model || !ri.last_user || !ri.system || ri.tokens != (ri.chars + 3) / 4)
		abort();
	struct decision d;
	uint64_t rng = 1;
	r = route_decide(p, &ri, hdr, NULL, &rng, &d);
	if (r != 0 || d.target < 0 || (size_t)d.target >= p->n_targets)
		abort();
	json_decref(decision_json(p, &d, NULL));
	req_info_free(&ri);
	json_decref(j);
	return 0;
}

/* libFuzzer target for the frames spark-router reads from sparkd's svc_watch
 * stream: arbitrary bytes through the framing (common/proto.c, fed in pieces
 * whose sizes the first byte picks) and each frame through svc_frame
 * (router/services.c), then the table through the lookups a request makes.
 * Invariants that abort: a refused frame leaves the table as it was; a table
 * holds at most SVC_MAX services of distinct, non-empty names, each with at
 * most SVC_MAX_MODELS models; a usable service has an http:// base URL
 * ending in /v1; a usable service target's service belongs to its owner. */
#include "decide.h"
#include "policy.h"
#include "proto.h"
#include "services.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char POLICY[] =
	"targets:\n"
	"  a: {service: qwen}\n"
	"  b: {service: small, network: management, max_context: 4096}\n"
	"routes:\n"
	"  r: {type: passthrough, target: a, fallbacks: [b]}\n";

static void check_table(const struct svc_table *t, const struct policy *p)
{
	if (t->n > SVC_MAX)
		abort();
	for (size_t i = 0; i < t->n; i++) {
		const struct svc_info *s = &t->v[i];
		if (!s->name[0] || svc_find(t, s->name) != s || s->n_models > SVC_MAX_MODELS)
			abort();
		for (int m = 0; m < 2; m++) {
			char b[SVC_URL_MAX + 8];
			if (svc_usable(s, m) &&
			    (!svc_base_url(s, m, b, sizeof b) || strncmp(b, "http://", 7) ||
			     strcmp(b + strlen(b) - 3, "/v1")))
				abort();
		}
	}
	for (size_t i = 0; i < p->n_targets; i++) {
		struct resolved rv;
		target_resolve(p, (int)i, t, &rv);
		if (rv.usable && strncmp(rv.base, "http://", 7))
			abort();
		/* a usable service target follows a service of its owner only */
		const struct target *tg = &p->targets[i];
		const struct svc_info *sv = target_service(tg, t);
		if (tg->kind == TARGET_SERVICE && rv.usable && (!sv || strcmp(sv->owner, tg->owner)))
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct policy *p;
	if (!p) {
		char err[256];
		if (policy_parse("fuzz.yaml", POLICY, strlen(POLICY), &p, err, sizeof err) < 0)
			abort();
	}
	if (size < 1)
		return 0;
	size_t piece = (size_t)data[0] % 64 + 1;
	data++;
	size--;
	proto_decoder d;
	proto_decoder_init(&d);
	struct svc_table t = {0};
	for (size_t off = 0; off < size;) {
		size_t n = size - off < piece ? size - off : piece;
		if (proto_decoder_feed(&d, data + off, n) < 0)
			break;
		off += n;
		int r;
		json_t *m;
		char err[200];
		while ((r = proto_decoder_next(&d, &m, err, sizeof err)) == 1) {
			size_t before = t.n;
			struct svc_info *vbefore = t.v;
			int fr = svc_frame(m, &t, err, sizeof err);
			json_decref(m);
			if (fr < 0 && (t.n != before || t.v != vbefore))
				abort();
			if (fr == 1 && !t.connected)
				abort();
			check_table(&t, p);
		}
		if (r < 0)
			goto out;
	}
out:
	svc_table_clear(&t);
	proto_decoder_free(&d);
	return 0;
}

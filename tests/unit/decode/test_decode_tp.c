/* Tensor parallelism on synthetic weights: 2, 4 and 8 ranks (over loopback)
 * give the same 32 greedy tokens as 1 rank and every step's logits within
 * 1e-3; one-shot and ring all-reduce give the same tokens. */
#include <criterion/criterion.h>

#include "dec_test_util.h"

#define TOKENS 32

typedef struct {
	json_t *tokens;
	float *logits;
	size_t n;
} run_out_t;

static run_out_t run(const char *dir, const char *args)
{
	char path[700], *err, *dump;
	json_error_t je;
	json_t *j;
	run_out_t o;
	size_t len;
	int rc = tu_sh(dir, "%s %s --tokens %d --prompt 7,3 --dump-logits %s/dump -o json",
	               tu_decode_bin(), args, TOKENS, dir);
	snprintf(path, sizeof(path), "%s/err", dir);
	err = tu_slurp(path, NULL);
	cr_assert_eq(rc, 0, "spark-decode %s: exit %d: %s", args, rc, err ? err : "");
	free(err);
	snprintf(path, sizeof(path), "%s/out", dir);
	j = json_load_file(path, 0, &je);
	cr_assert(j, "%s: %s", args, je.text);
	o.tokens = json_incref(json_object_get(j, "generated"));
	cr_assert_eq(json_array_size(o.tokens), TOKENS);
	json_decref(j);
	snprintf(path, sizeof(path), "%s/dump", dir);
	dump = tu_slurp(path, &len);
	cr_assert(dump && len % 4 == 0);
	o.logits = (float *)dump;
	o.n = len / 4;
	return o;
}

static void same(const run_out_t *a, const run_out_t *b, const char *what, double tol)
{
	double worst = 0;
	cr_assert(json_equal(a->tokens, b->tokens), "%s: tokens differ: %s vs %s", what,
	          json_dumps(a->tokens, JSON_COMPACT), json_dumps(b->tokens, JSON_COMPACT));
	cr_assert_eq(a->n, b->n, "%s: %zu vs %zu logits", what, a->n, b->n);
	for (size_t i = 0; i < a->n; i++) {
		double d = fabs((double)a->logits[i] - (double)b->logits[i]);
		if (d > worst || d != d)
			worst = d;
	}
	cr_assert_lt(worst, tol, "%s: logits differ by %g", what, worst);
}

static void drop(run_out_t *o)
{
	json_decref(o->tokens);
	free(o->logits);
}

static void sweep(const char *shape, const int *worlds, int nw)
{
	char *dir = tu_mkdtemp(), args[256];
	run_out_t base, o;
	cr_assert(dir);
	snprintf(args, sizeof(args), "--synthetic %s", shape);
	base = run(dir, args);
	/* 1 rank, 32 steps (+1 prompt step) of vocab-size logits */
	for (int i = 0; i < nw; i++) {
		snprintf(args, sizeof(args), "--synthetic %s --local %d", shape, worlds[i]);
		o = run(dir, args);
		same(&base, &o, args, 1e-3);
		drop(&o);
	}
	drop(&base);
	tu_rmrf(dir);
	free(dir);
}

Test(decode_tp, tiny_2_4_8_match_1)
{
	static const int w[] = {2, 4, 8};
	sweep("tiny", w, 3);
}

Test(decode_tp, tiny_qwen_2_4_match_1)
{
	static const int w[] = {2, 4};
	sweep("tiny-qwen", w, 2);
}

Test(decode_tp, oneshot_and_ring_agree)
{
	char *dir = tu_mkdtemp();
	run_out_t a, b, f;
	cr_assert(dir);
	a = run(dir, "--synthetic tiny --local 4 --algo oneshot");
	b = run(dir, "--synthetic tiny --local 4 --algo ring");
	same(&a, &b, "oneshot vs ring", 1e-3);
	/* f32 weights go through BLAS: the same tokens over 2 ranks */
	drop(&b);
	f = run(dir, "--synthetic tiny --dtype f32");
	b = run(dir, "--synthetic tiny --dtype f32 --local 2 --algo ring");
	same(&f, &b, "f32 weights, 2 ranks", 1e-3);
	drop(&a);
	drop(&b);
	drop(&f);
	tu_rmrf(dir);
	free(dir);
}

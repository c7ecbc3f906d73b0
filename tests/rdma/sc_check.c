/* sc_check.c - one rank of a libsparkcoll correctness or fault run (tests/rdma/).
 *
 *   sc-check --rank R --peers A0:P0,A1:P1,... [--topology ring|switch]
 *            [--transport auto|tcp|verbs] [--timeout-ms N] [--connect-timeout-ms N]
 *            [--mode check|loop] [--count N] [--iters N] [--big N] [--deadline S]
 *
 * check: every dtype x op x algorithm (one-shot only where enabled) at awkward counts,
 *        in place and not, against the exact expected values (integers small enough to be
 *        exact in f16/bf16; i64 values above 2^32), then allgather, broadcast, barrier.
 * loop:  all-reduce `count` f32 elements `iters` times (0 = until an error); prints
 *        "progress N" every 20 calls so a harness can kill or stop a peer mid-run.
 * Options start from SPARK_COLL_* (sc_options_from_env); flags override them.
 * Prints "info key=value..." from sc_comm_info first, then "result ok|fail ..." last.
 * --deadline S: SIGALRM kills the process after S seconds (exit status 142 = it hung).
 * Exit 0 ok, 1 wrong data, 2 a call failed (the error is printed), 3 init failed, 4 usage.
 */
#include "sparkcoll.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* rank r's value at element i (small integers, exact in every type) */
static int64_t val(int r, size_t i, sc_dtype_t dt)
{
	int64_t v = (int64_t)((i * 7 + (size_t)r * 13 + i / 97) % 23) - 11;
	if (dt == SC_I64)
		v = v * ((int64_t)1 << 36) + (int64_t)(i % 1000) - 500 + r;
	else if (dt == SC_I32)
		v = v * 65536 + (int64_t)(i % 1000) + r;
	return v;
}

static int64_t expect(int world, size_t i, sc_dtype_t dt, sc_op_t op)
{
	int64_t acc = val(0, i, dt);
	for (int r = 1; r < world; r++) {
		int64_t v = val(r, i, dt);
		if (op == SC_SUM)
			acc += v;
		else if (op == SC_MAX)
			acc = v > acc ? v : acc;
		else
			acc = v < acc ? v : acc;
	}
	return acc;
}

static sc_comm_t *comm;
static int rank, world;
static long calls;
static size_t bytes_moved;

static int fail_call(const char *what, int rc)
{
	printf("result fail call=%s rank=%d code=%d error=\"%s\" detail=\"%s\"\n", what, rank, rc,
	       sc_strerror(rc), sc_comm_last_error(comm));
	return 2;
}

static int one(size_t count, sc_dtype_t dt, sc_op_t op, sc_algo_t algo, int inplace, void *a,
               void *b)
{
	size_t es = sc_dtype_size(dt);
	for (size_t i = 0; i < count; i++)
		sc_dtype_set(a, i, dt, val(rank, i, dt));
	memset(b, 0xa5, count * es);
	int rc = inplace ? sc_allreduce_algo(comm, a, a, count, dt, op, algo)
	                 : sc_allreduce_algo(comm, a, b, count, dt, op, algo);
	char what[96];
	snprintf(what, sizeof what, "allreduce/%s/%s/%s/%zu%s", sc_dtype_name(dt), sc_op_name(op),
	         sc_algo_name(algo), count, inplace ? "/inplace" : "");
	calls++;
	bytes_moved += count * es;
	if (rc < 0)
		return fail_call(what, rc);
	const void *out = inplace ? a : b;
	for (size_t i = 0; i < count; i++) {
		int64_t got = (int64_t)sc_dtype_get(out, i, dt), want = expect(world, i, dt, op);
		if (got != want) {
			printf("result fail call=%s rank=%d wrong at element %zu: got %lld want %lld\n",
			       what, rank, i, (long long)got, (long long)want);
			return 1;
		}
	}
	return 0;
}

static int run_check(size_t big)
{
	static const size_t counts[] = {1, 3, 17, 255, 1023, 16411};
	sc_info_t info;
	sc_comm_info(comm, &info);
	size_t maxc = big > 70001 ? big : 70001;
	void *a = malloc(maxc * 8), *b = malloc(maxc * 8);
	if (!a || !b)
		return 2;
	double t0 = now_s();
	int rc = 0;
	for (int dt = 0; dt < SC_DTYPE_COUNT && !rc; dt++)
		for (int op = 0; op < SC_OP_COUNT && !rc; op++)
			for (size_t k = 0; k < sizeof counts / sizeof counts[0] && !rc; k++)
				for (int al = 0; al < 3 && !rc; al++) {
					sc_algo_t algo = al == 0 ? SC_ALGO_AUTO
					                 : al == 1 ? SC_ALGO_RING : SC_ALGO_ONESHOT;
					if (algo == SC_ALGO_ONESHOT && !info.oneshot_enabled)
						continue;
					rc = one(counts[k], (sc_dtype_t)dt, (sc_op_t)op, algo,
					         (int)((k + (size_t)op) & 1), a, b);
				}
	/* large: many bounce slots, pipelined ring chunks */
	for (int dt = 0; dt < SC_DTYPE_COUNT && !rc && big; dt++)
		rc = one(big, (sc_dtype_t)dt, SC_SUM, SC_ALGO_AUTO, dt & 1, a, b);
	if (!rc) { /* allgather: rank r's block is val(r, i) */
		size_t n = 1001;
		int64_t *g = malloc(n * 8 * (size_t)world);
		for (size_t i = 0; i < n; i++)
			((int64_t *)a)[i] = val(rank, i, SC_I64);
		int r2 = g ? sc_allgather(comm, a, g, n, SC_I64) : -12;
		calls++;
		if (r2 < 0)
			rc = fail_call("allgather/i64/1001", r2);
		for (int r = 0; !rc && r < world; r++)
			for (size_t i = 0; i < n; i++)
				if (g[(size_t)r * n + i] != val(r, i, SC_I64)) {
					printf("result fail call=allgather rank=%d block %d element %zu wrong\n",
					       rank, r, i);
					rc = 1;
					break;
				}
		free(g);
	}
	for (int root = 0; !rc && root < world; root++) { /* broadcast from every root */
		size_t n = 70001;
		for (size_t i = 0; i < n; i++)
			((int32_t *)a)[i] = rank == root ? (int32_t)(i * 3 + (size_t)root) : -1;
		int r2 = sc_broadcast(comm, a, n, SC_I32, root);
		calls++;
		if (r2 < 0)
			rc = fail_call("broadcast/i32/70001", r2);
		for (size_t i = 0; !rc && i < n; i++)
			if (((int32_t *)a)[i] != (int32_t)(i * 3 + (size_t)root)) {
				printf("result fail call=broadcast root=%d rank=%d element %zu wrong\n", root,
				       rank, i);
				rc = 1;
			}
	}
	if (!rc) {
		int r2 = sc_barrier(comm);
		calls++;
		if (r2 < 0)
			rc = fail_call("barrier", r2);
	}
	if (!rc)
		printf("result ok rank=%d calls=%ld bytes=%zu seconds=%.2f\n", rank, calls, bytes_moved,
		       now_s() - t0);
	free(a);
	free(b);
	return rc;
}

static int run_loop(size_t count, long iters)
{
	float *a = malloc(count * sizeof(float));
	if (!a)
		return 2;
	double t0 = now_s();
	for (long it = 0; iters == 0 || it < iters; it++) {
		for (size_t i = 0; i < count; i++)
			a[i] = (float)val(rank, i, SC_F32);
		int rc = sc_allreduce(comm, a, a, count, SC_F32, SC_SUM);
		if (rc < 0) {
			printf("result fail call=allreduce iter=%ld rank=%d code=%d error=\"%s\" "
			       "detail=\"%s\" after=%.2fs\n",
			       it, rank, rc, sc_strerror(rc), sc_comm_last_error(comm), now_s() - t0);
			free(a);
			return 2;
		}
		for (size_t i = 0; i < count; i++)
			if ((int64_t)a[i] != expect(world, i, SC_F32, SC_SUM)) {
				printf("result fail call=allreduce iter=%ld rank=%d wrong at %zu\n", it, rank, i);
				free(a);
				return 1;
			}
		if (it % 20 == 19) {
			printf("progress %ld\n", it + 1);
			fflush(stdout);
		}
	}
	printf("result ok rank=%d iters=%ld seconds=%.2f\n", rank, iters, now_s() - t0);
	free(a);
	return 0;
}

static int usage(void)
{
	fprintf(stderr, "usage: sc-check --rank R --peers A:P,B:P,... [--topology ring|switch]\n"
	                "  [--transport auto|tcp|verbs] [--timeout-ms N] [--connect-timeout-ms N]\n"
	                "  [--mode check|loop] [--count N] [--iters N] [--big N] [--deadline S]\n");
	return 4;
}

int main(int argc, char **argv)
{
	sc_options_t o;
	const char *peers_s = NULL, *mode = "check";
	size_t count = 4096, big = 0;
	long iters = 0;
	char *peers[64];

	setvbuf(stdout, NULL, _IOLBF, 0);
	sc_options_default(&o);
	o.timeout_ms = 20000;
	o.connect_timeout_ms = 20000;
	if (sc_options_from_env(&o) < 0) { /* SPARK_COLL_*, then the flags below */
		fprintf(stderr, "sc-check: bad SPARK_COLL_* value\n");
		return 4;
	}
	rank = -1;
	for (int i = 1; i < argc; i++) {
		const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v)
			return usage();
		i++;
		if (!strcmp(k, "--rank"))
			rank = atoi(v);
		else if (!strcmp(k, "--peers"))
			peers_s = v;
		else if (!strcmp(k, "--topology"))
			o.topology = !strcmp(v, "ring") ? SC_TOPO_RING : SC_TOPO_SWITCH;
		else if (!strcmp(k, "--transport"))
			o.transport = !strcmp(v, "tcp")     ? SC_TRANSPORT_TCP
			              : !strcmp(v, "verbs") ? SC_TRANSPORT_VERBS
			                                    : SC_TRANSPORT_AUTO;
		else if (!strcmp(k, "--timeout-ms"))
			o.timeout_ms = atoi(v);
		else if (!strcmp(k, "--connect-timeout-ms"))
			o.connect_timeout_ms = atoi(v);
		else if (!strcmp(k, "--mode"))
			mode = v;
		else if (!strcmp(k, "--count"))
			count = strtoull(v, NULL, 10);
		else if (!strcmp(k, "--iters"))
			iters = atol(v);
		else if (!strcmp(k, "--big"))
			big = strtoull(v, NULL, 10);
		else if (!strcmp(k, "--deadline"))
			alarm((unsigned)atoi(v));
		else
			return usage();
	}
	if (!peers_s || rank < 0)
		return usage();
	char *dup = strdup(peers_s);
	world = 0;
	for (char *s = strtok(dup, ","); s && world < 64; s = strtok(NULL, ","))
		peers[world++] = s;
	if (rank >= world)
		return usage();
	double t0 = now_s();
	int rc = sc_comm_init(&comm, rank, world, (const char *const *)peers, &o);
	if (rc < 0) {
		printf("result fail call=init rank=%d code=%d error=\"%s\" after=%.2fs\n", rank, rc,
		       sc_strerror(rc), now_s() - t0);
		return 3;
	}
	sc_info_t info;
	sc_comm_info(comm, &info);
	printf("info rank=%d world=%d transport=%s links=%d/%d oneshot=%d oneshot_max=%zu "
	       "init=%.2fs reason=\"%s\"\n",
	       info.rank, info.world_size, info.transport, info.links_connected, world - 1,
	       info.oneshot_enabled, info.oneshot_max, now_s() - t0, info.transport_reason);
	rc = !strcmp(mode, "loop") ? run_loop(count, iters) : run_check(big);
	sc_comm_destroy(comm);
	free(dup);
	return rc;
}

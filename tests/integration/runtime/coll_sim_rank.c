/* coll_sim_rank: one rank of the libsparkcoll simulator tests (test_coll_sim.c).
 *
 *   coll_sim_rank RANK PEER0 PEER1 ...      (PEERi = "addr:port" of rank i as
 *                                            seen from this rank's node)
 *
 * Joins with sc_comm_init (explicit peers, options from SPARK_COLL_* and
 * SPARK_TOPOLOGY), then checks results against values computed locally:
 * all-reduce for every algorithm (relay included), type and op at awkward counts (1, odd, not
 * divisible by the world size, larger than the crossover), in place and not;
 * all-gather; broadcast from every root; barrier. Prints one line
 *   RESULT {"rank":R,"world":N,"oneshot_enabled":0|1,"decision":"...",...}
 * on stdout and exits 0 when every check passed, 1 otherwise. Uses only the
 * public API (sparkcoll.h). */
#include "sparkcoll.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t val(int rank, size_t i)
{
	return (int64_t)((i * 13u + (size_t)rank * 7u) % 31u) - 15;
}

static int64_t expect(size_t i, sc_op_t op, int n)
{
	int64_t e = val(0, i);
	for (int r = 1; r < n; r++) {
		int64_t v = val(r, i);
		e = op == SC_SUM ? e + v : op == SC_MAX ? (v > e ? v : e) : (v < e ? v : e);
	}
	return e;
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int checks, failures;
static char first_failure[256];

static void fail(const char *what, int rc, const sc_comm_t *c)
{
	failures++;
	if (!first_failure[0])
		snprintf(first_failure, sizeof(first_failure), "%s: %s (%s)", what,
		         rc < 0 ? sc_strerror(rc) : "wrong values", rc < 0 ? sc_comm_last_error(c) : "");
}

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", (unsigned char)*s);
		else
			putchar(*s);
	}
	putchar('"');
}

int main(int argc, char **argv)
{
	static const size_t counts[] = {1, 3, 1023, 4099, 65537, 300001};
	static const sc_algo_t algos[] = {SC_ALGO_AUTO, SC_ALGO_ONESHOT, SC_ALGO_RING, SC_ALGO_RELAY,
	                                  SC_ALGO_DOUBLING};
	enum { NA = sizeof(algos) / sizeof(algos[0]) };
	enum { NC = sizeof(counts) / sizeof(counts[0]), MAXC = 300001 };
	sc_options_t o;
	sc_comm_t *c = NULL;
	sc_info_t info;
	int rank, n, rc, k = 0;
	double t0, init_ms;
	uint8_t *sb, *rb;
	char what[160];

	if (argc < 3) {
		fprintf(stderr, "usage: coll_sim_rank RANK PEER0 PEER1 ...\n");
		return 2;
	}
	rank = atoi(argv[1]);
	n = argc - 2;
	sc_options_default(&o);
	if (sc_options_from_env(&o) < 0) {
		fprintf(stderr, "coll_sim_rank: bad SPARK_COLL_* value\n");
		return 2;
	}
	t0 = now_ms();
	rc = sc_comm_init(&c, rank, n, (const char *const *)(argv + 2), &o);
	init_ms = now_ms() - t0;
	if (rc < 0) {
		printf("RESULT {\"rank\":%d,\"world\":%d,\"init_rc\":%d,\"init_error\":", rank, n, rc);
		json_str(sc_strerror(rc));
		printf("}\n");
		return 1;
	}
	sc_comm_info(c, &info);
	sb = malloc((size_t)MAXC * 8 * (size_t)n);
	rb = malloc((size_t)MAXC * 8 * (size_t)n);
	if (!sb || !rb)
		return 1;

	/* all-reduce: algorithm x type x op x count, in place every other call */
	for (size_t a = 0; a < NA; a++)
		for (int dt = 0; dt < SC_DTYPE_COUNT; dt++)
			for (int op = 0; op < SC_OP_COUNT; op++)
				for (size_t ci = 0; ci < NC; ci++, k++) {
					size_t cnt = counts[ci];
					int inplace = k & 1;
					uint8_t *out = inplace ? sb : rb;
					long wrong = 0;
					if (cnt > 4099 && op == SC_MIN)
						continue; /* keep the big sizes to sum and max */
					for (size_t i = 0; i < cnt; i++)
						sc_dtype_set(sb, i, (sc_dtype_t)dt, val(rank, i));
					snprintf(what, sizeof(what), "allreduce %s %s %s count %zu%s",
					         sc_algo_name(algos[a]), sc_dtype_name((sc_dtype_t)dt),
					         sc_op_name((sc_op_t)op), cnt, inplace ? " in place" : "");
					checks++;
					rc = sc_allreduce_algo(c, sb, out, cnt, (sc_dtype_t)dt, (sc_op_t)op,
					                       algos[a]);
					if (rc < 0) {
						fail(what, rc, c);
						goto done;
					}
					for (size_t i = 0; i < cnt; i++)
						wrong += sc_dtype_get(out, i, (sc_dtype_t)dt) !=
						         (double)expect(i, (sc_op_t)op, n);
					if (wrong)
						fail(what, 0, c);
				}

	/* all-gather: rank r's block at r * count */
	for (size_t ci = 0; ci < 2; ci++) {
		size_t cnt = ci ? 10001 : 5;
		long wrong = 0;
		for (size_t i = 0; i < cnt; i++)
			sc_dtype_set(sb, i, SC_I32, val(rank, i));
		snprintf(what, sizeof(what), "allgather i32 count %zu", cnt);
		checks++;
		if ((rc = sc_allgather(c, sb, rb, cnt, SC_I32)) < 0) {
			fail(what, rc, c);
			goto done;
		}
		for (int r = 0; r < n; r++)
			for (size_t i = 0; i < cnt; i++)
				wrong += ((int32_t *)rb)[(size_t)r * cnt + i] != val(r, i);
		if (wrong)
			fail(what, 0, c);
	}

	/* broadcast from every root (non-neighbours included) */
	for (int root = 0; root < n; root++)
		for (size_t ci = 0; ci < 2; ci++) {
			size_t cnt = ci ? 70001 : 7;
			long wrong = 0;
			for (size_t i = 0; i < cnt; i++)
				sc_dtype_set(sb, i, SC_F32, rank == root ? val(root, i) : 99);
			snprintf(what, sizeof(what), "broadcast f32 count %zu root %d", cnt, root);
			checks++;
			if ((rc = sc_broadcast(c, sb, cnt, SC_F32, root)) < 0) {
				fail(what, rc, c);
				goto done;
			}
			for (size_t i = 0; i < cnt; i++)
				wrong += sc_dtype_get(sb, i, SC_F32) != (double)val(root, i);
			if (wrong)
				fail(what, 0, c);
		}

	checks++;
	if ((rc = sc_barrier(c)) < 0)
		fail("barrier", rc, c);
done:
	printf("RESULT {\"rank\":%d,\"world\":%d,\"init_rc\":0,\"init_ms\":%.0f,"
	       "\"oneshot_enabled\":%d,\"oneshot_max\":%zu,\"calibrated\":%d,"
	       "\"links_connected\":%d,\"pick_4k\":\"%s\",\"pick_1m\":\"%s\","
	       "\"small_algo\":\"%s\",\"transport\":",
	       rank, n, init_ms, info.oneshot_enabled, info.oneshot_max, info.calibrated,
	       info.links_connected, sc_algo_name(sc_comm_pick_algo(c, 4096)),
	       sc_algo_name(sc_comm_pick_algo(c, 1 << 20)), sc_algo_name(info.small_algo));
	json_str(info.transport);
	printf(",\"decision\":");
	json_str(info.decision);
	printf(",\"checks\":%d,\"failures\":%d,\"first_failure\":", checks, failures);
	json_str(first_failure);
	printf("}\n");
	fflush(stdout);
	sc_comm_destroy(c);
	free(sb);
	free(rb);
	return failures ? 1 : 0;
}

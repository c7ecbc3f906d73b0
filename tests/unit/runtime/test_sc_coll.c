/* Collectives over forked loopback ranks: every type, op and algorithm at
 * awkward sizes, in and out of place, 2..8 ranks; one-shot and relay bitwise
 * equal on all ranks (the rank-order fold); relay on a ring topology (auto
 * picks it for small calls, forced one-shot runs it, only neighbour links);
 * allgather, broadcast, barrier; single rank; comm info. */
#include <criterion/criterion.h>
#include <stdio.h>

#include "sc_test_util.h"

#define FAILR(sh, r, ...)                                                      \
	do {                                                                   \
		snprintf((sh)->msg[r], sizeof((sh)->msg[r]), __VA_ARGS__);     \
		(sh)->rc[r] = 1;                                               \
		return 1;                                                      \
	} while (0)

static int init_rank(tu_shared_t *sh, int rank, int n, const char *const *peers, int lfd,
                     sc_comm_t **c)
{
	sc_options_t o;
	int rc;
	tu_opts(&o, lfd);
	rc = sc_comm_init(c, rank, n, peers, &o);
	if (rc < 0) {
		snprintf(sh->msg[rank], sizeof(sh->msg[rank]), "init: %s", sc_strerror(rc));
		sh->rc[rank] = 1;
	}
	return rc;
}

static int rank_allreduce_matrix(int rank, int n, const char *const *peers, int lfd, void *arg)
{
	tu_shared_t *sh = arg;
	sc_comm_t *c;
	const size_t counts[] = {1, 2, 3, 7, (size_t)n - 1 ? (size_t)n - 1 : 5, (size_t)n + 1, 1017,
	                         100003};
	const size_t maxc = 100003;
	uint8_t *sb, *rb;
	int salt = 0;

	if (init_rank(sh, rank, n, peers, lfd, &c) < 0)
		return 1;
	sb = malloc(maxc * 8);
	rb = malloc(maxc * 8);
	for (int dt = 0; dt < SC_DTYPE_COUNT; dt++)
		for (int op = 0; op < SC_OP_COUNT; op++)
			for (int algo = 0; algo < SC_ALGO_COUNT; algo++)
				for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
					for (int inplace = 0; inplace < 2; inplace++) {
						size_t cnt = counts[ci];
						uint8_t *out = inplace ? sb : rb;
						int rc;
						if (cnt == maxc && (op != SC_SUM || inplace))
							continue; /* the big count once per type */
						salt++;
						for (size_t i = 0; i < cnt; i++)
							sc_dtype_set(sb, i, (sc_dtype_t)dt, tu_val(rank, i, salt));
						if (!inplace)
							memset(rb, 0xab, cnt * 8);
						rc = sc_allreduce_algo(c, sb, out, cnt, (sc_dtype_t)dt, (sc_op_t)op,
						                       (sc_algo_t)algo);
						if (rc < 0)
							FAILR(sh, rank, "%s %s %s count %zu inplace %d: %s: %s",
							      sc_dtype_name(dt), sc_op_name(op), sc_algo_name(algo), cnt,
							      inplace, sc_strerror(rc), sc_comm_last_error(c));
						for (size_t i = 0; i < cnt; i++) {
							double got = sc_dtype_get(out, i, (sc_dtype_t)dt);
							int64_t want = tu_expect(n, i, salt, (sc_op_t)op);
							if (got != (double)want)
								FAILR(sh, rank,
								      "%s %s %s count %zu inplace %d: [%zu] got %g want %lld",
								      sc_dtype_name(dt), sc_op_name(op), sc_algo_name(algo),
								      cnt, inplace, i, got, (long long)want);
						}
					}
	/* zero elements is a valid (empty) collective */
	if (sc_allreduce(c, sb, rb, 0, SC_F32, SC_SUM) < 0)
		FAILR(sh, rank, "count 0 failed");
	free(sb);
	free(rb);
	sc_comm_destroy(c);
	return 0;
}

static void run_matrix(int n)
{
	tu_run_ok(n, rank_allreduce_matrix, 50000);
}

Test(coll, allreduce_matrix_2, .timeout = 60) { run_matrix(2); }
Test(coll, allreduce_matrix_3, .timeout = 60) { run_matrix(3); }
Test(coll, allreduce_matrix_4, .timeout = 60) { run_matrix(4); }
Test(coll, allreduce_matrix_5, .timeout = 60) { run_matrix(5); }
Test(coll, allreduce_matrix_6, .timeout = 60) { run_matrix(6); }
Test(coll, allreduce_matrix_7, .timeout = 60) { run_matrix(7); }
Test(coll, allreduce_matrix_8, .timeout = 60) { run_matrix(8); }

/* one-shot and relay: every rank gets bitwise the rank-order fold of all
 * inputs; doubling and ring: every rank gets the same bits */
static int rank_bitwise(int rank, int n, const char *const *peers, int lfd, void *arg)
{
	tu_shared_t *sh = arg;
	sc_comm_t *c;
	const size_t cnt = 4099;
	const sc_dtype_t types[] = {SC_F32, SC_F16, SC_BF16};

	if (init_rank(sh, rank, n, peers, lfd, &c) < 0)
		return 1;
	for (int t = 0; t < 3; t++)
		for (int algo = SC_ALGO_ONESHOT; algo < SC_ALGO_COUNT; algo++) {
			sc_dtype_t dt = types[t];
			size_t es = sc_dtype_size(dt);
			uint8_t *in = malloc(cnt * es), *out = malloc(cnt * es), *all = malloc(cnt * es * (size_t)n);
			uint64_t h[1], hs[TU_MAXR];
			const void *srcs[TU_MAXR];
			for (int r = 0; r < n; r++) {
				for (size_t i = 0; i < cnt; i++) {
					float f = tu_rand(r, i) * (float)(1 + (i % 5) * 1000);
					if (dt == SC_F32)
						((float *)(all + (size_t)r * cnt * es))[i] = f;
					else if (dt == SC_F16)
						((uint16_t *)(all + (size_t)r * cnt * es))[i] = sc_f32_to_f16(f);
					else
						((uint16_t *)(all + (size_t)r * cnt * es))[i] = sc_f32_to_bf16(f);
				}
				srcs[r] = all + (size_t)r * cnt * es;
			}
			memcpy(in, srcs[rank], cnt * es);
			if (sc_allreduce_algo(c, in, out, cnt, dt, SC_SUM, (sc_algo_t)algo) < 0)
				FAILR(sh, rank, "allreduce: %s", sc_comm_last_error(c));
			if (algo == SC_ALGO_ONESHOT || algo == SC_ALGO_RELAY) {
				uint8_t *ref = malloc(cnt * es);
				sc_reduce(ref, srcs, n, cnt, dt, SC_SUM);
				if (memcmp(ref, out, cnt * es) != 0)
					FAILR(sh, rank, "%s %s differs from the rank-order fold",
					      sc_dtype_name(dt), sc_algo_name(algo));
				free(ref);
			}
			h[0] = tu_hash(out, cnt * es);
			if (sc_allgather(c, h, hs, 1, SC_I64) < 0)
				FAILR(sh, rank, "allgather: %s", sc_comm_last_error(c));
			for (int r = 0; r < n; r++)
				if (hs[r] != h[0])
					FAILR(sh, rank, "%s %s: rank %d has other bits than rank %d",
					      sc_dtype_name(dt), sc_algo_name(algo), r, rank);
			free(in);
			free(out);
			free(all);
		}
	sc_comm_destroy(c);
	return 0;
}

static void run_bitwise(int n)
{
	tu_run_ok(n, rank_bitwise, 30000);
}

Test(coll, bitwise_equal_2, .timeout = 30) { run_bitwise(2); }
Test(coll, bitwise_equal_3, .timeout = 30) { run_bitwise(3); }
Test(coll, bitwise_equal_4, .timeout = 30) { run_bitwise(4); }
Test(coll, bitwise_equal_8, .timeout = 30) { run_bitwise(8); }

/* Relay on a ring topology (neighbour links only, one-shot off): auto picks
 * relay up to the crossover and ring above, info says so, forced one-shot
 * runs relay; every type and op at awkward counts (1, odd, not divisible by
 * n, several 4 MiB segments), in place and not, equal to the reference and
 * bitwise to the rank-order fold on every rank; all-gather over relay. */
static int rank_relay_ring(int rank, int n, const char *const *peers, int lfd, void *arg)
{
	tu_shared_t *sh = arg;
	sc_options_t o;
	sc_comm_t *c;
	sc_info_t info;
	const size_t counts[] = {1, 2, 3, 5, 7, (size_t)n + 1, 2 * (size_t)n - 1, 1017, 16383,
	                         (5u << 20) / 4 + 3};
	const size_t maxc = (5u << 20) / 4 + 3;
	const sc_algo_t algos[] = {SC_ALGO_AUTO, SC_ALGO_RELAY, SC_ALGO_ONESHOT};
	uint8_t *sb, *rb, *all, *ref;
	const void *srcs[TU_MAXR];
	int salt = 0, rc;

	tu_opts(&o, lfd);
	o.topology = SC_TOPO_RING;
	o.oneshot_max = 16384;
	if ((rc = sc_comm_init(&c, rank, n, peers, &o)) < 0)
		FAILR(sh, rank, "init: %s", sc_strerror(rc));
	sc_comm_info(c, &info);
	if (info.oneshot_enabled || info.small_algo != SC_ALGO_RELAY || info.oneshot_max != 16384)
		FAILR(sh, rank, "info: oneshot %d small %s max %zu", info.oneshot_enabled,
		      sc_algo_name(info.small_algo), info.oneshot_max);
	if (info.links_connected != (n == 2 ? 1 : 2))
		FAILR(sh, rank, "%d links on a ring of %d", info.links_connected, n);
	if (sc_comm_pick_algo(c, 8) != SC_ALGO_RELAY || sc_comm_pick_algo(c, 16384) != SC_ALGO_RELAY ||
	    sc_comm_pick_algo(c, 16385) != SC_ALGO_RING)
		FAILR(sh, rank, "auto picks %s/%s/%s", sc_algo_name(sc_comm_pick_algo(c, 8)),
		      sc_algo_name(sc_comm_pick_algo(c, 16384)),
		      sc_algo_name(sc_comm_pick_algo(c, 16385)));
	sb = malloc(maxc * 8);
	rb = malloc(maxc * 8);
	ref = malloc(maxc * 8);
	all = malloc(maxc * 8 * (size_t)n);
	for (int dt = 0; dt < SC_DTYPE_COUNT; dt++)
		for (int op = 0; op < SC_OP_COUNT; op++)
			for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
				for (int inplace = 0; inplace < 2; inplace++) {
					size_t cnt = counts[ci], es = sc_dtype_size((sc_dtype_t)dt);
					sc_algo_t algo = algos[(ci + (size_t)inplace) % 3];
					uint8_t *out = inplace ? sb : rb;
					if (cnt == maxc && (op != SC_SUM || inplace || dt > SC_F16))
						continue; /* segments: twice */
					salt++;
					for (int r = 0; r < n; r++) {
						for (size_t i = 0; i < cnt; i++)
							sc_dtype_set(all + (size_t)r * cnt * es, i, (sc_dtype_t)dt,
							         tu_val(r, i, salt));
						srcs[r] = all + (size_t)r * cnt * es;
					}
					memcpy(sb, srcs[rank], cnt * es);
					if (!inplace)
						memset(rb, 0xab, cnt * es);
					rc = sc_allreduce_algo(c, sb, out, cnt, (sc_dtype_t)dt, (sc_op_t)op, algo);
					if (rc < 0)
						FAILR(sh, rank, "%s %s %s count %zu inplace %d: %s: %s",
						      sc_dtype_name(dt), sc_op_name(op), sc_algo_name(algo), cnt,
						      inplace, sc_strerror(rc), sc_comm_last_error(c));
					for (size_t i = 0; i < cnt; i++) {
						double got = sc_dtype_get(out, i, (sc_dtype_t)dt);
						int64_t want = tu_expect(n, i, salt, (sc_op_t)op);
						if (got != (double)want)
							FAILR(sh, rank, "%s %s %s count %zu inplace %d: [%zu] got %g want %lld",
							      sc_dtype_name(dt), sc_op_name(op), sc_algo_name(algo), cnt,
							      inplace, i, got, (long long)want);
					}
					/* relay (auto below the crossover) folds in rank order */
					if (algo != SC_ALGO_AUTO || cnt * es <= 16384) {
						sc_reduce(ref, srcs, n, cnt, (sc_dtype_t)dt, (sc_op_t)op);
						if (memcmp(ref, out, cnt * es) != 0)
							FAILR(sh, rank, "%s %s %s count %zu: not the rank-order fold",
							      sc_dtype_name(dt), sc_op_name(op), sc_algo_name(algo), cnt);
					}
				}
	/* floats with rounding: every rank must hold the same bits */
	{
		const size_t cnt = 4099;
		float *in = (float *)sb, *res = (float *)rb;
		uint64_t h[1], hs[TU_MAXR];
		for (size_t i = 0; i < cnt; i++)
			in[i] = tu_rand(rank, i) * (float)(1 + (i % 5) * 1000);
		if ((rc = sc_allreduce_algo(c, in, res, cnt, SC_F32, SC_SUM, SC_ALGO_RELAY)) < 0)
			FAILR(sh, rank, "relay f32 random: %s", sc_comm_last_error(c));
		h[0] = tu_hash(res, cnt * 4);
		if ((rc = sc_allgather(c, h, hs, 1, SC_I64)) < 0)
			FAILR(sh, rank, "allgather hash: %s", sc_comm_last_error(c));
		for (int r = 0; r < n; r++)
			if (hs[r] != h[0])
				FAILR(sh, rank, "rank %d has other bits than rank %d", r, rank);
	}
	/* all-gather: small ones go by relay (auto), in place and not */
	{
		const size_t gc[] = {1, 3, 1001};
		for (size_t ci = 0; ci < 3; ci++)
			for (int inplace = 0; inplace < 2; inplace++) {
				size_t cnt = gc[ci];
				int32_t *out = (int32_t *)rb, *src = (int32_t *)sb;
				if (inplace)
					src = out + (size_t)rank * cnt;
				for (size_t i = 0; i < cnt; i++)
					src[i] = (int32_t)(rank * 100000 + (int)i);
				if ((rc = sc_allgather(c, src, out, cnt, SC_I32)) < 0)
					FAILR(sh, rank, "allgather %zu: %s", cnt, sc_comm_last_error(c));
				for (int r = 0; r < n; r++)
					for (size_t i = 0; i < cnt; i++)
						if (out[(size_t)r * cnt + i] != (int32_t)(r * 100000 + (int)i))
							FAILR(sh, rank, "allgather %zu inplace %d: block %d [%zu]",
							      cnt, inplace, r, i);
			}
	}
	if (sc_barrier(c) < 0)
		FAILR(sh, rank, "barrier: %s", sc_comm_last_error(c));
	free(sb);
	free(rb);
	free(ref);
	free(all);
	sc_comm_destroy(c);
	return 0;
}

static void run_relay_ring(int n)
{
	tu_run_ok(n, rank_relay_ring, 50000);
}

/* Recursive doubling runs in a power-of-two world with every pair connected,
 * or with neighbour links only at 2 and 4 ranks (its partners are ring
 * neighbours there); elsewhere a forced doubling runs one-shot (relay on a
 * ring). Results are checked by the matrix and bitwise tests above, and here
 * on a ring. */
static int g_dbl_ring;

static int rank_doubling_where(int rank, int n, const char *const *peers, int lfd, void *arg)
{
	tu_shared_t *sh = arg;
	sc_options_t o;
	sc_comm_t *c;
	int pow2 = (n & (n - 1)) == 0;
	sc_algo_t want = pow2 && (!g_dbl_ring || n <= 4) ? SC_ALGO_DOUBLING
	                 : g_dbl_ring                   ? SC_ALGO_RELAY
	                                                : SC_ALGO_ONESHOT;
	float v[37], out[37];
	uint16_t hv[1001], hout[1001];
	uint64_t h[1], hs[TU_MAXR];
	int rc;

	tu_opts(&o, lfd);
	o.algo = SC_ALGO_DOUBLING;
	if (g_dbl_ring)
		o.topology = SC_TOPO_RING;
	if ((rc = sc_comm_init(&c, rank, n, peers, &o)) < 0)
		FAILR(sh, rank, "init: %s", sc_strerror(rc));
	if (sc_comm_pick_algo(c, 8) != want || sc_comm_pick_algo(c, 1 << 24) != want)
		FAILR(sh, rank, "n=%d: doubling runs as %s, want %s", n,
		      sc_algo_name(sc_comm_pick_algo(c, 8)), sc_algo_name(want));
	for (int i = 0; i < 37; i++)
		v[i] = (float)(rank * 3 + i);
	if ((rc = sc_allreduce(c, v, out, 37, SC_F32, SC_SUM)) < 0)
		FAILR(sh, rank, "allreduce: %s", sc_comm_last_error(c));
	for (int i = 0; i < 37; i++)
		if (out[i] != (float)(3 * n * (n - 1) / 2 + n * i))
			FAILR(sh, rank, "[%d] = %g", i, out[i]);
	/* bf16 with rounding at every step: the same bits on every rank */
	for (int i = 0; i < 1001; i++)
		hv[i] = sc_f32_to_bf16(tu_rand(rank, (size_t)i) * 1000.0f);
	if ((rc = sc_allreduce(c, hv, hout, 1001, SC_BF16, SC_SUM)) < 0)
		FAILR(sh, rank, "bf16 allreduce: %s", sc_comm_last_error(c));
	h[0] = tu_hash(hout, sizeof(hout));
	if ((rc = sc_allgather(c, h, hs, 1, SC_I64)) < 0)
		FAILR(sh, rank, "allgather: %s", sc_comm_last_error(c));
	for (int r = 0; r < n; r++)
		if (hs[r] != h[0])
			FAILR(sh, rank, "rank %d has other bits than rank %d", r, rank);
	sc_comm_destroy(c);
	return 0;
}

static void run_doubling_where(int n, int ring)
{
	g_dbl_ring = ring;
	tu_run_ok(n, rank_doubling_where, 20000);
}

Test(coll, doubling_where_it_runs, .timeout = 60)
{
	run_doubling_where(2, 0);
	run_doubling_where(3, 0);
	run_doubling_where(4, 0);
	run_doubling_where(6, 0);
	run_doubling_where(8, 0);
	run_doubling_where(2, 1);
	run_doubling_where(4, 1);
	run_doubling_where(8, 1);
}

Test(coll, relay_ring_2, .timeout = 60) { run_relay_ring(2); }
Test(coll, relay_ring_3, .timeout = 60) { run_relay_ring(3); }
Test(coll, relay_ring_4, .timeout = 60) { run_relay_ring(4); }
Test(coll, relay_ring_5, .timeout = 60) { run_relay_ring(5); }
Test(coll, relay_ring_6, .timeout = 60) { run_relay_ring(6); }
Test(coll, relay_ring_7, .timeout = 60) { run_relay_ring(7); }
Test(coll, relay_ring_8, .timeout = 60) { run_relay_ring(8); }

static int rank_other_colls(int rank, int n, const char *const *peers, int lfd, void *arg)
{
	tu_shared_t *sh = arg;
	sc_comm_t *c;
	const size_t counts[] = {1, 5, 1000, 20000};

	if (init_rank(sh, rank, n, peers, lfd, &c) < 0)
		return 1;
	for (size_t ci = 0; ci < 4; ci++)
		for (int inplace = 0; inplace < 2; inplace++) {
			size_t cnt = counts[ci];
			int32_t *in = malloc(cnt * 4), *out = malloc(cnt * 4 * (size_t)n);
			const int32_t *src = in;
			for (size_t i = 0; i < cnt; i++)
				in[i] = (int32_t)(rank * 100000 + (int)i);
			if (inplace) {
				memcpy(out + (size_t)rank * cnt, in, cnt * 4);
				src = out + (size_t)rank * cnt;
			}
			if (sc_allgather(c, src, out, cnt, SC_I32) < 0)
				FAILR(sh, rank, "allgather %zu: %s", cnt, sc_comm_last_error(c));
			for (int r = 0; r < n; r++)
				for (size_t i = 0; i < cnt; i++)
					if (out[(size_t)r * cnt + i] != (int32_t)(r * 100000 + (int)i))
						FAILR(sh, rank, "allgather %zu inplace %d: block %d [%zu] wrong", cnt,
						      inplace, r, i);
			free(in);
			free(out);
		}
	{
		const size_t bc[] = {1, 1000, 300001};
		for (size_t ci = 0; ci < 3; ci++)
			for (int root = 0; root < n; root += n - 1) {
				size_t cnt = bc[ci];
				uint16_t *b = malloc(cnt * 2);
				for (size_t i = 0; i < cnt; i++)
					b[i] = rank == root ? (uint16_t)(i * 7 + (size_t)root) : 0xffff;
				if (sc_broadcast(c, b, cnt, SC_F16, root) < 0)
					FAILR(sh, rank, "broadcast %zu root %d: %s", cnt, root,
					      sc_comm_last_error(c));
				for (size_t i = 0; i < cnt; i++)
					if (b[i] != (uint16_t)(i * 7 + (size_t)root))
						FAILR(sh, rank, "broadcast %zu root %d: [%zu] wrong", cnt, root, i);
				free(b);
				if (n == 1)
					break;
			}
	}
	for (int i = 0; i < 5; i++)
		if (sc_barrier(c) < 0)
			FAILR(sh, rank, "barrier: %s", sc_comm_last_error(c));
	sc_comm_destroy(c);
	return 0;
}

static void run_other(int n)
{
	tu_run_ok(n, rank_other_colls, 30000);
}

Test(coll, allgather_broadcast_barrier_2, .timeout = 30) { run_other(2); }
Test(coll, allgather_broadcast_barrier_5, .timeout = 30) { run_other(5); }
Test(coll, allgather_broadcast_barrier_8, .timeout = 30) { run_other(8); }

Test(coll, single_rank)
{
	sc_comm_t *c = NULL;
	const char *peers[] = {"127.0.0.1:1"};
	float in[3] = {1, 2, 3}, out[3] = {0};
	sc_info_t info;
	cr_assert_eq(sc_comm_init(&c, 0, 1, peers, NULL), 0);
	cr_assert_eq(sc_allreduce(c, in, out, 3, SC_F32, SC_SUM), 0);
	cr_assert(out[0] == 1 && out[1] == 2 && out[2] == 3);
	cr_assert_eq(sc_allreduce(c, in, in, 3, SC_F32, SC_MAX), 0);
	cr_assert_eq(sc_barrier(c), 0);
	cr_assert_eq(sc_comm_info(c, &info), 0);
	cr_assert_eq(info.world_size, 1);
	sc_comm_destroy(c);
}

Test(coll, bad_arguments)
{
	sc_comm_t *c = NULL;
	const char *peers[] = {"127.0.0.1:1", "127.0.0.1:2"};
	const char *bad[] = {"127.0.0.1:1", "nonsense"};
	float x = 0;
	cr_assert_eq(sc_comm_init(&c, 2, 2, peers, NULL), -EINVAL);
	cr_assert_eq(sc_comm_init(&c, 0, 0, peers, NULL), -EINVAL);
	cr_assert_eq(sc_comm_init(&c, 0, 2, bad, NULL), -EINVAL);
	cr_assert_eq(sc_comm_init(&c, 0, 1, peers, NULL), 0);
	cr_assert_eq(sc_allreduce(c, &x, &x, 1, (sc_dtype_t)9, SC_SUM), -EINVAL);
	cr_assert_eq(sc_allreduce(c, &x, &x, 1, SC_F32, (sc_op_t)7), -EINVAL);
	cr_assert_eq(sc_allreduce(c, NULL, &x, 1, SC_F32, SC_SUM), -EINVAL);
	cr_assert_eq(sc_allreduce(NULL, &x, &x, 1, SC_F32, SC_SUM), -EINVAL);
	cr_assert_eq(sc_broadcast(c, &x, 1, SC_F32, 3), -EINVAL);
	sc_comm_destroy(c);
}

static int rank_info(int rank, int n, const char *const *peers, int lfd, void *arg)
{
	tu_shared_t *sh = arg;
	sc_comm_t *c;
	sc_info_t info;
	if (init_rank(sh, rank, n, peers, lfd, &c) < 0)
		return 1;
	sc_comm_info(c, &info);
	if (info.rank != rank || info.world_size != n || !info.oneshot_enabled ||
	    info.links_connected != n - 1 || info.oneshot_max != 64 * 1024)
		FAILR(sh, rank, "info fields wrong");
	if (strcmp(info.transport, "tcp") == 0 && !info.transport_reason[0])
		FAILR(sh, rank, "tcp without a reason");
	snprintf(sh->msg[rank], sizeof(sh->msg[rank]), "%s|%s", info.transport, info.transport_reason);
	if (sc_comm_pick_algo(c, 100) != SC_ALGO_ONESHOT || sc_comm_pick_algo(c, 1 << 20) != SC_ALGO_RING)
		FAILR(sh, rank, "auto picks wrong algorithm");
	if (info.small_algo != SC_ALGO_ONESHOT)
		FAILR(sh, rank, "small algorithm %s with one-shot on", sc_algo_name(info.small_algo));
	sc_comm_destroy(c);
	return 0;
}

Test(coll, info_reports_transport_and_reason, .timeout = 20)
{
	tu_shared_t *sh = tu_shared_new();
	int st = sc_local_run(3, rank_info, sh, 15000);
	cr_assert(st == 0, "%s", sh->msg[0]);
	/* this machine has no RDMA device: TCP, and the reason says so */
	if (strncmp(sh->msg[0], "tcp|", 4) == 0)
		cr_expect(strstr(sh->msg[0], "RDMA") || strstr(sh->msg[0], "GID"), "%s", sh->msg[0]);
	tu_shared_free(sh);
}

/* calibration at init: every rank derives the same crossover */
static int rank_calibrate(int rank, int n, const char *const *peers, int lfd, void *arg)
{
	tu_shared_t *sh = arg;
	sc_options_t o;
	sc_comm_t *c;
	sc_info_t info;
	int64_t mine[1], all[TU_MAXR];
	tu_opts(&o, lfd);
	o.oneshot_max = SC_ONESHOT_CALIBRATE;
	if (sc_comm_init(&c, rank, n, peers, &o) < 0)
		FAILR(sh, rank, "init failed");
	sc_comm_info(c, &info);
	if (!info.calibrated)
		FAILR(sh, rank, "not calibrated");
	mine[0] = (int64_t)info.oneshot_max;
	if (sc_allgather(c, mine, all, 1, SC_I64) < 0)
		FAILR(sh, rank, "allgather: %s", sc_comm_last_error(c));
	for (int r = 0; r < n; r++)
		if (all[r] != mine[0])
			FAILR(sh, rank, "rank %d crossover %lld, mine %lld", r, (long long)all[r],
			      (long long)mine[0]);
	sh->val[rank][0] = mine[0];
	sc_comm_destroy(c);
	return 0;
}

Test(coll, calibration_agrees_on_every_rank, .timeout = 30)
{
	tu_shared_t *sh = tu_shared_new();
	int st = sc_local_run(3, rank_calibrate, sh, 25000);
	for (int r = 0; r < 3; r++)
		cr_expect(sh->rc[r] == 0, "rank %d: %s", r, sh->msg[r]);
	cr_assert(st == 0);
	tu_shared_free(sh);
}

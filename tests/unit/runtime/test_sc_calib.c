/* Crossover calibration (the decision on synthetic curves, and a live run that
 * every rank must agree on, within bounds and time) and the spin policy (host
 * identity, ranks per host against cores, with fake host ids). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <unistd.h>

#include "sc_test_util.h"

#define FAILR(sh, r, ...)                                                      \
	do {                                                                   \
		snprintf((sh)->msg[r], sizeof((sh)->msg[r]), __VA_ARGS__);     \
		(sh)->rc[r] = 1;                                               \
		return 1;                                                      \
	} while (0)

static const size_t k_sizes[] = {4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288,
                                 1048576};
#define NSZ ((int)(sizeof(k_sizes) / sizeof(k_sizes[0])))

/* alpha-beta curves: one-shot 1 step of n-1 messages, ring 2(n-1) steps of m/n */
static void curves(int n, double alpha_ns, double ns_per_byte, int64_t *os, int64_t *rg)
{
	for (int k = 0; k < NSZ; k++) {
		double m = (double)k_sizes[k];
		os[k] = (int64_t)(alpha_ns + (n - 1) * m * ns_per_byte);
		rg[k] = (int64_t)(2 * (n - 1) * (alpha_ns + m / n * ns_per_byte));
	}
}

Test(calib, crossover_of_clean_curves)
{
	int64_t os[NSZ], rg[NSZ];
	/* n = 4, alpha 10 us, 1 GB/s: one-shot 10 + 3m, ring 60 + 1.5m (us, m in KB)
	 * -> equal at 1.5m = 50, m = 33.3 KB */
	curves(4, 10000, 1.0, os, rg);
	size_t x = sc_calib_crossover(k_sizes, os, rg, NSZ, NSZ);
	cr_assert(x >= 24000 && x <= 40000, "crossover %zu, want about 33 KB", x);
}

Test(calib, crossover_ignores_one_wild_size)
{
	int64_t os[NSZ], rg[NSZ];
	curves(4, 10000, 1.0, os, rg);
	size_t clean = sc_calib_crossover(k_sizes, os, rg, NSZ, NSZ);
	/* a load burst made ring at 1 MiB three times slower, and one-shot at
	 * 8 KiB twice as slow: neither may move the split */
	rg[8] *= 3;
	os[1] *= 2;
	size_t x = sc_calib_crossover(k_sizes, os, rg, NSZ, NSZ);
	cr_assert(x >= clean / 2 && x <= clean * 2, "crossover %zu, clean %zu", x, clean);
	/* +-10% jitter at every size: still near */
	curves(4, 10000, 1.0, os, rg);
	for (int k = 0; k < NSZ; k++) {
		os[k] = os[k] * (k % 2 ? 110 : 90) / 100;
		rg[k] = rg[k] * (k % 3 ? 90 : 110) / 100;
	}
	x = sc_calib_crossover(k_sizes, os, rg, NSZ, NSZ);
	cr_assert(x >= clean / 2 && x <= clean * 2, "crossover %zu, clean %zu", x, clean);
}

Test(calib, crossover_edges)
{
	int64_t os[NSZ], rg[NSZ];
	for (int k = 0; k < NSZ; k++) {
		os[k] = 1000 + k;
		rg[k] = 3000 + k; /* one-shot always 3x faster */
	}
	cr_assert_eq(sc_calib_crossover(k_sizes, os, rg, NSZ, NSZ), 2 * k_sizes[NSZ - 1]);
	/* stopped early (budget) with one-shot still ahead: up to the last size */
	cr_assert_eq(sc_calib_crossover(k_sizes, os, rg, 5, NSZ), k_sizes[4]);
	for (int k = 0; k < NSZ; k++)
		os[k] = 9000; /* ring always 3x faster */
	cr_assert_eq(sc_calib_crossover(k_sizes, os, rg, NSZ, NSZ), 0);
	cr_assert_eq(sc_calib_crossover(k_sizes, os, rg, 0, NSZ), 0);
	/* level (2 ranks over a wide range): within 5% counts for ring */
	for (int k = 0; k < NSZ; k++) {
		os[k] = k < 3 ? 1000 : 2000;
		rg[k] = k < 3 ? 2000 : 2040;
	}
	size_t x = sc_calib_crossover(k_sizes, os, rg, NSZ, NSZ);
	cr_assert(x >= k_sizes[2] && x <= k_sizes[3], "crossover %zu", x);
}

/* live calibration at init: same crossover on every rank, within the range
 * the calibration can give, and fast; on a ring topology (g_ring) it weighs
 * relay against ring */
static int g_ring;

static int rank_calibrate(int rank, int n, const char *const *peers, int lfd, void *arg)
{
	tu_shared_t *sh = arg;
	sc_options_t o;
	sc_comm_t *c;
	sc_info_t info;
	int64_t mine[1], all[TU_MAXR];
	uint64_t t0 = sc_now_ns();
	tu_opts(&o, lfd);
	o.oneshot_max = SC_ONESHOT_CALIBRATE;
	if (g_ring)
		o.topology = SC_TOPO_RING;
	if (sc_comm_init(&c, rank, n, peers, &o) < 0)
		FAILR(sh, rank, "init failed");
	sh->val[rank][1] = (int64_t)(sc_now_ns() - t0);
	sh->val[rank][2] = (int64_t)c->calib_ns;
	sc_comm_info(c, &info);
	if (!info.calibrated || info.oneshot_enabled == g_ring)
		FAILR(sh, rank, "not calibrated (%s)", info.decision);
	/* one-shot (relay on a ring), or doubling if it can run (a power of two
	 * >= 4; on a ring only 4) and won */
	if ((g_ring ? info.small_algo != SC_ALGO_RELAY : info.small_algo != SC_ALGO_ONESHOT) &&
	    !(info.small_algo == SC_ALGO_DOUBLING && n >= 4 && (n & (n - 1)) == 0 &&
	      (!g_ring || n == 4)))
		FAILR(sh, rank, "small algorithm %s", sc_algo_name(info.small_algo));
	sh->val[rank][3] = info.small_algo;
	if ((info.oneshot_max && sc_comm_pick_algo(c, info.oneshot_max) != info.small_algo) ||
	    sc_comm_pick_algo(c, info.oneshot_max + 1) != SC_ALGO_RING)
		FAILR(sh, rank, "auto does not follow the crossover %zu", info.oneshot_max);
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

static void run_calibrate(int n, int ring)
{
	tu_shared_t *sh = tu_shared_new();
	g_ring = ring;
	int st = sc_local_run(n, rank_calibrate, sh, 25000);
	for (int r = 0; r < n; r++)
		cr_expect(sh->rc[r] == 0, "rank %d: %s", r, sh->msg[r]);
	cr_assert(st == 0);
	/* 0 (ring everywhere) or between the smallest measured size and twice the
	 * largest; on an idle loopback one-shot wins at 4 KiB, but a sanitizer
	 * build (its reductions cost more than its messages) or a loaded machine
	 * may say otherwise, so that is only reported */
	int64_t x = sh->val[0][0];
	cr_expect(x == 0 || (x >= 4096 && x <= 2 * 1048576), "n=%d crossover %lld out of bounds",
	          n, (long long)x);
	if (x < 4096)
		cr_log_info("n=%d%s: ring faster at 4 KiB (crossover %lld)", n, ring ? " ring" : "",
		            (long long)x);
	/* budget 50 ms; generous for a loaded machine or a sanitizer build */
	cr_expect(sh->val[0][2] < 400 * 1000000ll, "n=%d calibration took %.1f ms", n,
	          (double)sh->val[0][2] / 1e6);
	cr_log_info("n=%d %s/ring crossover %lld B, calibration %.1f ms, init %.1f ms", n,
	            sc_algo_name((sc_algo_t)sh->val[0][3]), (long long)x,
	            (double)sh->val[0][2] / 1e6, (double)sh->val[0][1] / 1e6);
	tu_shared_free(sh);
}

Test(calib, live_agrees_and_bounded_2, .timeout = 30) { run_calibrate(2, 0); }
Test(calib, live_agrees_and_bounded_4, .timeout = 30) { run_calibrate(4, 0); }
Test(calib, live_relay_on_ring_3, .timeout = 30) { run_calibrate(3, 1); }
Test(calib, live_relay_on_ring_4, .timeout = 30) { run_calibrate(4, 1); }

/* ---- spin policy -------------------------------------------------------- */

Test(spin, ranks_per_host_against_cores)
{
	const uint64_t one_host[4] = {7, 7, 7, 7}, two_hosts[4] = {7, 7, 9, 9},
	               all_apart[4] = {1, 2, 3, 4}, unknown[4] = {0, 0, 0, 0};
	int spin, yield;

	/* the simulator: 4 ranks in 4 namespaces of one 2-core machine */
	cr_assert_eq(sc_spin_decide(one_host, 4, 2, 2, -1, NULL, &spin, &yield), 4);
	cr_assert(spin == 0 && yield == 1);
	/* 2 ranks per host: one per core on 2-core hosts spins, 1-core hosts are
	 * oversubscribed */
	cr_assert_eq(sc_spin_decide(two_hosts, 4, 3, 2, -1, NULL, &spin, &yield), 2);
	cr_assert(spin == 50 && yield == 0);
	cr_assert_eq(sc_spin_decide(two_hosts, 4, 3, 1, -1, NULL, &spin, &yield), 2);
	cr_assert(spin == 0 && yield == 1);
	cr_assert_eq(sc_spin_decide(two_hosts, 4, 0, 4, -1, NULL, &spin, &yield), 2);
	cr_assert(spin == 50 && yield == 0);
	/* one rank per host (real nodes) spins whatever the core count */
	cr_assert_eq(sc_spin_decide(all_apart, 4, 1, 1, -1, NULL, &spin, &yield), 1);
	cr_assert(spin == 50 && yield == 0);
	/* an unknown host is a host of its own */
	cr_assert_eq(sc_spin_decide(unknown, 4, 0, 2, -1, NULL, &spin, &yield), 1);
	cr_assert(spin == 50);
	/* 8 ranks: one per core spins (as Open MPI does), on 7 cores they sleep */
	{
		uint64_t h[8] = {5, 5, 5, 5, 5, 5, 5, 5};
		cr_assert_eq(sc_spin_decide(h, 8, 5, 8, -1, NULL, &spin, &yield), 8);
		cr_assert(spin == 50 && yield == 0);
		cr_assert_eq(sc_spin_decide(h, 8, 5, 7, -1, NULL, &spin, &yield), 8);
		cr_assert(spin == 0 && yield == 1);
		cr_assert_eq(sc_spin_decide(h, 8, 5, 16, -1, NULL, &spin, &yield), 8);
		cr_assert(spin == 50);
	}
	/* unknown core count: spin */
	cr_assert_eq(sc_spin_decide(one_host, 4, 0, -1, -1, NULL, &spin, &yield), 4);
	cr_assert(spin == 50 && yield == 0);
	/* SPARK_COLL_SPIN_US / SPARK_COLL_SPIN_YIELD win */
	sc_spin_decide(one_host, 4, 0, 2, 20, "0", &spin, &yield);
	cr_assert(spin == 20 && yield == 0);
	sc_spin_decide(all_apart, 4, 0, 2, 0, "1", &spin, &yield);
	cr_assert(spin == 0 && yield == 1);
	sc_spin_decide(all_apart, 4, 0, 2, -1, "", &spin, &yield);
	cr_assert(spin == 50 && yield == 0);
}

Test(spin, host_id_stable_and_overridable)
{
	uint64_t a, b;
	unsetenv("SPARK_COLL_HOST_ID");
	a = sc_host_id();
	cr_assert_neq(a, 0);
	cr_assert_eq(sc_host_id(), a);
	setenv("SPARK_COLL_HOST_ID", "node-a", 1);
	b = sc_host_id();
	cr_assert_neq(b, a);
	cr_assert_eq(sc_host_id(), b);
	setenv("SPARK_COLL_HOST_ID", "node-b", 1);
	cr_assert_neq(sc_host_id(), b);
	unsetenv("SPARK_COLL_HOST_ID");
	cr_assert_eq(sc_host_id(), a);
}

/* Live: every rank learns every rank's host at init. Fake ids a,a,b,c (the
 * arg) or none (all on this machine, whatever addresses they use). */
static const char *g_fake[4];

static int rank_spin(int rank, int n, const char *const *peers, int lfd, void *arg)
{
	tu_shared_t *sh = arg;
	sc_options_t o;
	sc_comm_t *c;
	if (g_fake[rank])
		setenv("SPARK_COLL_HOST_ID", g_fake[rank], 1);
	else
		unsetenv("SPARK_COLL_HOST_ID");
	unsetenv("SPARK_COLL_SPIN_YIELD");
	tu_opts(&o, lfd);
	if (sc_comm_init(&c, rank, n, peers, &o) < 0)
		FAILR(sh, rank, "init failed");
	sh->val[rank][0] = c->host_ranks;
	sh->val[rank][1] = c->spin_us;
	sh->val[rank][2] = c->spin_yield;
	sh->val[rank][3] = c->host_cpus;
	sc_comm_destroy(c);
	return 0;
}

static void run_spin(const int64_t *want_local)
{
	tu_shared_t *sh = tu_shared_new();
	int st = sc_local_run(4, rank_spin, sh, 15000);
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	for (int r = 0; r < 4; r++)
		cr_expect(sh->rc[r] == 0, "rank %d: %s", r, sh->msg[r]);
	cr_assert(st == 0);
	for (int r = 0; r < 4; r++) {
		int over = want_local[r] > 1 && want_local[r] > ncpu;
		cr_expect_eq(sh->val[r][0], want_local[r], "rank %d: %lld ranks on its host", r,
		             (long long)sh->val[r][0]);
		cr_expect_eq(sh->val[r][3], ncpu);
		cr_expect_eq(sh->val[r][1], over ? 0 : 50, "rank %d spin %lld", r,
		             (long long)sh->val[r][1]);
		cr_expect_eq(sh->val[r][2], over, "rank %d yield", r);
	}
	tu_shared_free(sh);
}

Test(spin, live_fake_hosts, .timeout = 20)
{
	const int64_t want[4] = {2, 2, 1, 1};
	g_fake[0] = g_fake[1] = "host-a";
	g_fake[2] = "host-b";
	g_fake[3] = "host-c";
	run_spin(want);
}

Test(spin, live_one_machine, .timeout = 20)
{
	const int64_t want[4] = {4, 4, 4, 4};
	for (int r = 0; r < 4; r++)
		g_fake[r] = NULL;
	run_spin(want);
}

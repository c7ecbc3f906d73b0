/* sc_comm.c - communicator life cycle: options and environment, connection,
 * self-test (one-shot only if every pair connected and a checksum all-reduce
 * agrees on every rank; relay, over neighbours only, otherwise), calibration
 * of the crossover between that small-message algorithm and ring, info and
 * errors. */
#include "sc_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define DEFAULT_ONESHOT_MAX (64u << 10)

void sc_options_default(sc_options_t *o)
{
	memset(o, 0, sizeof(*o));
	o->topology = SC_TOPO_UNKNOWN;
	o->algo = SC_ALGO_AUTO;
	o->oneshot_max = SC_ONESHOT_CALIBRATE;
	o->timeout_ms = 60000;
	o->connect_timeout_ms = 60000;
	o->pair_timeout_ms = 5000;
	o->spin_us = -1;
	o->transport = SC_TRANSPORT_AUTO;
	o->listen_fd = -1;
	o->selftest = 1;
}

static int env_int(const char *name, int lo, int hi, int *out)
{
	const char *s = getenv(name);
	char *end;
	long v;
	if (!s || !*s)
		return 0;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return -EINVAL;
	*out = (int)v;
	return 1;
}

static uint64_t hash_str(const char *s)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	for (; *s; s++) {
		h ^= (uint8_t)*s;
		h *= 1099511628211ull;
	}
	return h ? h : 1;
}

int sc_options_from_env(sc_options_t *o)
{
	const char *s;

	if ((s = getenv("SPARK_COLL_ALGO")) && *s && sc_algo_parse(s, &o->algo) < 0)
		return -EINVAL;
	if ((s = getenv("SPARK_COLL_ONESHOT_MAX")) && *s) {
		size_t b;
		if (sc_parse_size(s, &b) < 0)
			return -EINVAL;
		o->oneshot_max = b;
	}
	if (env_int("SPARK_COLL_TIMEOUT_MS", 0, INT_MAX, &o->timeout_ms) < 0 ||
	    env_int("SPARK_COLL_CONNECT_TIMEOUT_MS", 1, INT_MAX, &o->connect_timeout_ms) < 0 ||
	    env_int("SPARK_COLL_PAIR_TIMEOUT_MS", 0, INT_MAX, &o->pair_timeout_ms) < 0 ||
	    env_int("SPARK_COLL_SPIN_US", -1, 10000000, &o->spin_us) < 0 ||
	    env_int("SPARK_COLL_SELFTEST", 0, 1, &o->selftest) < 0)
		return -EINVAL;
	if ((s = getenv("SPARK_COLL_TRANSPORT")) && *s) {
		if (strcasecmp(s, "auto") == 0)
			o->transport = SC_TRANSPORT_AUTO;
		else if (strcasecmp(s, "tcp") == 0)
			o->transport = SC_TRANSPORT_TCP;
		else if (strcasecmp(s, "verbs") == 0 || strcasecmp(s, "rdma") == 0)
			o->transport = SC_TRANSPORT_VERBS;
		else
			return -EINVAL;
	}
	if ((s = getenv("SPARK_TOPOLOGY")) && *s) {
		if (strcasecmp(s, "ring") == 0)
			o->topology = SC_TOPO_RING;
		else if (strcasecmp(s, "switch") == 0)
			o->topology = SC_TOPO_SWITCH;
		else if (strcasecmp(s, "2-node") == 0 || strcasecmp(s, "direct") == 0 ||
		         strcasecmp(s, "unknown") == 0)
			o->topology = SC_TOPO_UNKNOWN;
		else
			return -EINVAL;
	}
	if ((s = getenv("SPARK_COLL_BIND_ADDR")) && *s)
		o->bind_addr = s;
	if ((s = getenv("SPARK_JOB_ID")) && *s)
		o->job_id = hash_str(s);
	return 0;
}

const char *sc_strerror(int code)
{
	switch (code) {
	case 0: return "success";
	case -SC_EMISMATCH: return "ranks called the collective with different count, type, op or collective";
	case -SC_EABORTED: return "a peer aborted the collective";
	case -SC_EPEER: return "a peer sent a malformed or unexpected message";
	case -SC_EBROKEN: return "communicator failed earlier; destroy it";
	case -ETIMEDOUT: return "timed out waiting for a peer";
	case -ECONNRESET: return "a peer closed its connection (died or aborted)";
	case -EINVAL: return "invalid argument";
	default: break;
	}
	if (code < 0 && code > -4096)
		return strerror(-code);
	return "unknown error";
}

const char *sc_comm_last_error(const sc_comm_t *c)
{
	if (!c)
		return "no communicator";
	return c->errmsg[0] ? c->errmsg : "no error";
}

int sc_comm_rank(const sc_comm_t *c) { return c ? c->rank : -1; }
int sc_comm_size(const sc_comm_t *c) { return c ? c->world : -1; }

int sc_comm_info(const sc_comm_t *c, sc_info_t *info)
{
	if (!c || !info)
		return -EINVAL;
	memset(info, 0, sizeof(*info));
	info->rank = c->rank;
	info->world_size = c->world;
	info->topology = c->opt.topology;
	info->algo = c->opt.algo;
	info->oneshot_enabled = c->oneshot_ok;
	info->oneshot_max = c->oneshot_max;
	info->small_algo = c->small_algo;
	info->calibrated = c->calibrated;
	snprintf(info->decision, sizeof(info->decision), "%s", c->decision);
	snprintf(info->transport, sizeof(info->transport), "%s", c->transport);
	snprintf(info->transport_reason, sizeof(info->transport_reason), "%s", c->transport_reason);
	info->links_connected = c->links_connected;
	info->timeout_ms = c->opt.timeout_ms;
	return 0;
}

void sc_comm_destroy(sc_comm_t *c)
{
	if (!c)
		return;
	if (c->links)
		for (int i = 0; i < c->world; i++)
			if (c->links[i])
				c->links[i]->ops->destroy(c->links[i]);
	free(c->links);
	sc_free_peers(c->peers, c->world);
	if (c->listen_fd >= 0)
		close(c->listen_fd);
	sc_verbs_close(c);
	free(c->tmp);
	free(c->ops);
	free(c);
}

/* Every rank agrees on `*v` (the minimum) using the ring only. */
static int agree_min(sc_comm_t *c, int64_t *v, int n)
{
	return sc_allreduce_impl(c, SC_COLL_SELFTEST, v, v, (size_t)n, SC_I64, SC_MIN, SC_ALGO_RING);
}

static int selftest(sc_comm_t *c)
{
	int64_t ok[1];
	int rc, allowed = 0;

	for (int j = 0; j < c->world; j++)
		if (j != c->rank && c->links[j])
			allowed++;
	if (c->opt.topology == SC_TOPO_RING) {
		c->oneshot_ok = 0;
		snprintf(c->decision, sizeof(c->decision),
		         "ring: topology is ring (neighbour links only), one-shot off");
		return 0;
	}
	ok[0] = allowed == c->world - 1;
	if ((rc = agree_min(c, ok, 1)) < 0)
		return rc;
	if (!ok[0]) {
		c->oneshot_ok = 0;
		if (!c->decision[0])
			snprintf(c->decision, sizeof(c->decision),
			         "some pair of ranks cannot connect (a ring?)");
		{
			char d[256];
			snprintf(d, sizeof(d), "ring: one-shot off: %s", c->decision);
			snprintf(c->decision, sizeof(c->decision), "%s", d);
		}
		return 0;
	}
	c->oneshot_ok = 1;
	if (c->opt.selftest) {
		/* checksum all-reduce over one-shot: every rank must get the known sum */
		enum { N = 37 };
		int64_t v[N], want[N], flag[1];
		int64_t n = c->world;
		for (int i = 0; i < N; i++) {
			v[i] = (int64_t)(c->rank + 1) * (i + 1) + ((int64_t)c->rank << 32);
			want[i] = (int64_t)(i + 1) * n * (n + 1) / 2 + ((n * (n - 1) / 2) << 32);
		}
		rc = sc_allreduce_impl(c, SC_COLL_SELFTEST, v, v, N, SC_I64, SC_SUM,
		                       SC_ALGO_ONESHOT);
		if (rc < 0)
			return rc;
		flag[0] = memcmp(v, want, sizeof(v)) == 0;
		if ((rc = agree_min(c, flag, 1)) < 0)
			return rc;
		if (!flag[0]) {
			c->oneshot_ok = 0;
			snprintf(c->decision, sizeof(c->decision),
			         "ring: one-shot off: the checksum all-reduce disagreed on some rank");
			return 0;
		}
	}
	snprintf(c->decision, sizeof(c->decision), "one-shot on: all %d pairs connected%s",
	         c->world * (c->world - 1) / 2, c->opt.selftest ? ", checksum agreed" : "");
	return 0;
}

/* ---- crossover calibration ------------------------------------------------ */

/* Calibration of the crossover between the small algorithm (c->small_algo:
 * one-shot, or relay when one-shot is off; "one-shot" below stands for it)
 * and ring, bounded by about CAL_BUDGET_NS of wall time:
 * 0. a sample is a burst of CAL_BURST back-to-back calls of one algorithm,
 *    timed without its first call (the steady state an application and
 *    spark-bench see: single calls flatter one-shot, since a rank that
 *    arrives late finds every input there, and under load by up to 2x);
 * 1. sweep: from 4 KiB up, one sample of each algorithm per size; the slowest
 *    rank's figures are agreed after each size, and from 32 KiB on the sweep
 *    stops once ring is clearly ahead at two sizes in a row, or after half
 *    the budget (cut short with one-shot still ahead, the crossover is taken
 *    as at least the default, 64 KiB);
 * 2. rounds over the swept sizes: one sample of each algorithm per size per
 *    round, the order alternating by round and size (neither always runs on
 *    the cache and scheduler state the other left), sizes up, then down. A
 *    load burst on the machine then hits every size and both algorithms
 *    alike instead of one size. CAL_MIN_ROUNDS rounds (3 samples), then up
 *    to CAL_MAX_ROUNDS while the budget allows; the slowest rank's elapsed
 *    time is agreed after each round, so every rank runs the same number;
 * 3. each rank takes the median of its samples per size and algorithm (a
 *    preempted burst cannot move it), every rank the slowest rank's medians,
 *    and rank 0 derives the crossover and broadcasts it, so floating point
 *    differences between machines cannot make ranks disagree.
 * Only agreed integers steer the loops. */
#define CAL_BUDGET_NS (50ll * 1000000ll)
enum { CAL_BURST = 3, CAL_MIN_ROUNDS = 2, CAL_MAX_ROUNDS = 14,
       CAL_MAX_SAMPLES = 1 + CAL_MAX_ROUNDS };

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

static int64_t median_i64(int64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_i64);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The split that loses least time (relative, summed over the measured sizes,
 * each size's loss capped at CAL_REGRET_CAP) against the better algorithm at
 * each size, so one noisy size cannot move it far, however bad it looks (a
 * 1 MiB ring call that a load burst made twice as slow once gave one-shot
 * every size). One-shot must be CAL_ONESHOT_MARGIN faster to count as the winner
 * (it moves more bytes, and at 2 ranks the two are level over a wide range,
 * where a coin toss per size would make the crossover wander), and ties go
 * to the smaller split. Interpolated between the last one-shot size and the
 * first ring size where the two lines (one-shot with its margin) cross. */
#define CAL_ONESHOT_MARGIN 1.05
#define CAL_REGRET_CAP 0.2
size_t sc_calib_crossover(const size_t *sizes, const int64_t *os, const int64_t *rg, int measured,
                          int nsizes)
{
	int split = 0;
	double best_regret = 1e300;

	if (measured <= 0)
		return 0;
	/* ring ahead at three sizes in a row, or clearly at two: it is ring from
	 * there on, whatever a noisy larger size says */
	for (int k = 1; k < measured; k++) {
		int ahead2 = os[k] > rg[k] && os[k - 1] > rg[k - 1];
		if (ahead2 && (os[k] * 10 > rg[k] * 13 || (k >= 2 && os[k - 2] > rg[k - 2]))) {
			measured = k + 1;
			break;
		}
	}
	for (int sp = 0; sp <= measured; sp++) {
		double regret = 0;
		for (int k = 0; k < measured; k++) {
			double o = (double)os[k] * CAL_ONESHOT_MARGIN, r = (double)rg[k];
			double m = o < r ? o : r;
			if (m <= 0)
				m = 1;
			double loss = ((k < sp ? o : r) - m) / m;
			regret += loss < CAL_REGRET_CAP ? loss : CAL_REGRET_CAP;
		}
		if (regret < best_regret - 0.02) {
			best_regret = regret;
			split = sp;
		}
	}
	if (split == 0)
		return 0;
	if (split == nsizes)
		return sizes[nsizes - 1] * 2;
	if (split == measured)
		return sizes[split - 1];
	{
		/* between sizes[split-1] (one-shot wins) and sizes[split] (ring wins) */
		double d0 = (double)os[split - 1] * CAL_ONESHOT_MARGIN - (double)rg[split - 1];
		double d1 = (double)os[split] * CAL_ONESHOT_MARGIN - (double)rg[split];
		double f = d1 - d0 > 0 ? -d0 / (d1 - d0) : 0.5;
		if (f < 0)
			f = 0;
		if (f > 1)
			f = 1;
		return (size_t)((double)sizes[split - 1] *
		                pow((double)sizes[split] / (double)sizes[split - 1], f));
	}
}

/* One sample: CAL_BURST back-to-back calls of one algorithm (0 = the small
 * algorithm, one-shot or relay; 1 = ring), the mean time of all but the first
 * (which absorbs the switch from the other algorithm and the ranks' skew)
 * into *ns. */
static int cal_sample_algo(sc_comm_t *c, float *buf, size_t bytes, sc_algo_t algo, int64_t *ns)
{
	uint64_t t0 = 0;
	for (int b = 0; b < CAL_BURST; b++) {
		int rc;
		if (b == 1)
			t0 = sc_now_ns();
		rc = sc_allreduce_impl(c, SC_COLL_SELFTEST, buf, buf, bytes / sizeof(float), SC_F32,
		                       SC_MAX, algo);
		if (rc < 0)
			return rc;
	}
	*ns = (int64_t)(sc_now_ns() - t0) / (CAL_BURST - 1);
	return 0;
}

static int cal_sample(sc_comm_t *c, float *buf, size_t bytes, int algo, int64_t *ns)
{
	return cal_sample_algo(c, buf, bytes, algo == 0 ? c->small_algo : SC_ALGO_RING, ns);
}

/* Before the crossover: the small algorithm (one-shot, or relay when
 * one-shot is off) or recursive doubling, where doubling can run (a
 * power-of-two world of at least 4; at 2 the two are the same exchange).
 * Both are timed at 4 and 16 KiB, CAL_PICK_ROUNDS interleaved samples each,
 * order alternating; each rank's medians, the slowest rank's; doubling must
 * be CAL_ONESHOT_MARGIN faster at both sizes (fewer messages pay where a
 * message costs CPU: TCP, ranks sharing cores; one step pays where latency
 * is the wire's). Rank 0 decides, every rank takes its answer. */
enum { CAL_PICK_ROUNDS = 5 };
static int pick_small(sc_comm_t *c, float *buf)
{
	static const size_t sz[2] = {4096, 16384};
	const sc_algo_t al[2] = {c->small_algo, SC_ALGO_DOUBLING};
	int64_t smp[2][2][CAL_PICK_ROUNDS], v[4];
	int rc;

	if (!sc_doubling_ok(c) || c->world < 4)
		return 0;
	for (int r = 0; r < CAL_PICK_ROUNDS; r++)
		for (int k = 0; k < 2; k++)
			for (int i = 0; i < 2; i++) {
				int a = i ^ ((r + k) & 1);
				if ((rc = cal_sample_algo(c, buf, sz[k], al[a], &smp[k][a][r])) < 0)
					return rc;
			}
	for (int k = 0; k < 2; k++)
		for (int a = 0; a < 2; a++)
			v[2 * k + a] = -median_i64(smp[k][a], CAL_PICK_ROUNDS);
	if ((rc = agree_min(c, v, 4)) < 0)
		return rc;
	if (getenv("SPARK_COLL_DEBUG") && c->rank == 0)
		for (int k = 0; k < 2; k++)
			fprintf(stderr, "sparkcoll: calibrate size=%zu %s_us=%.1f doubling_us=%.1f\n",
			        sz[k], sc_algo_name(al[0]), (double)-v[2 * k] / 1e3,
			        (double)-v[2 * k + 1] / 1e3);
	if (c->rank == 0) {
		int dbl = 1;
		for (int k = 0; k < 2; k++)
			if ((double)-v[2 * k + 1] * CAL_ONESHOT_MARGIN >= (double)-v[2 * k])
				dbl = 0;
		v[0] = dbl;
	} else {
		v[0] = INT64_MAX;
	}
	if ((rc = agree_min(c, v, 1)) < 0)
		return rc;
	if (v[0] == 1)
		c->small_algo = SC_ALGO_DOUBLING;
	return 0;
}

static int calibrate(sc_comm_t *c)
{
	static const size_t sizes[] = {4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288,
	                               1048576};
	enum { NS = sizeof(sizes) / sizeof(sizes[0]) };
	int64_t smp[NS][2][CAL_MAX_SAMPLES], os[NS], rg[NS], v[2 * NS];
	int64_t elapsed = 0, round_cost = 0;
	uint64_t t_start = sc_now_ns(), t_all = t_start;
	float *buf;
	int rc = 0, measured = 0, nsmp = 1, rounds = 0, cut = 0;
	int dbg = getenv("SPARK_COLL_DEBUG") && c->rank == 0;

	buf = calloc(sizes[NS - 1] / sizeof(float), sizeof(float));
	if (!buf)
		return -ENOMEM;
	/* 0. the small algorithm, where there is a choice */
	if ((rc = pick_small(c, buf)) < 0)
		goto out;
	t_start = sc_now_ns(); /* the crossover gets its own budget */
	/* 1. sweep (min of negatives = max over ranks) */
	for (int k = 0; k < NS; k++) {
		for (int a = 0; a < 2; a++)
			if ((rc = cal_sample(c, buf, sizes[k], a, &smp[k][a][0])) < 0)
				goto out;
		v[0] = -smp[k][0][0];
		v[1] = -smp[k][1][0];
		v[2] = -(int64_t)(sc_now_ns() - t_start);
		if ((rc = agree_min(c, v, 3)) < 0)
			goto out;
		os[k] = -v[0];
		rg[k] = -v[1];
		elapsed = -v[2];
		round_cost += os[k] + rg[k];
		measured = k + 1;
		/* ring clearly ahead at two sizes in a row (30%, 15%: one sample
		 * each, so not too eager): larger sizes only widen it; the sweep
		 * may take half the budget; 4-32 KiB are always measured */
		if (k >= 3 && os[k] * 100 > rg[k] * 130 && os[k - 1] * 100 > rg[k - 1] * 115)
			break;
		if (k >= 3 && elapsed > CAL_BUDGET_NS / 2) {
			cut = 1;
			break;
		}
	}
	round_cost *= CAL_BURST;
	/* 2. interleaved rounds while the budget allows */
	while (rounds < CAL_MAX_ROUNDS &&
	       (rounds < CAL_MIN_ROUNDS || elapsed + round_cost <= CAL_BUDGET_NS)) {
		for (int j = 0; j < measured; j++) {
			int k = rounds & 1 ? measured - 1 - j : j;
			for (int i = 0; i < 2; i++) {
				int a = i ^ ((rounds + k) & 1);
				if ((rc = cal_sample(c, buf, sizes[k], a, &smp[k][a][nsmp])) < 0)
					goto out;
			}
		}
		nsmp++;
		rounds++;
		v[0] = -(int64_t)(sc_now_ns() - t_start);
		if ((rc = agree_min(c, v, 1)) < 0)
			goto out;
		round_cost = -v[0] - elapsed;
		elapsed = -v[0];
	}
	/* 3. the slowest rank's medians; rank 0 decides, the others take its
	 * figure (min with INT64_MAX) */
	for (int k = 0; k < measured; k++) {
		v[2 * k] = -median_i64(smp[k][0], nsmp);
		v[2 * k + 1] = -median_i64(smp[k][1], nsmp);
	}
	if ((rc = agree_min(c, v, 2 * measured)) < 0)
		goto out;
	for (int k = 0; k < measured; k++) {
		os[k] = -v[2 * k];
		rg[k] = -v[2 * k + 1];
		if (dbg)
			fprintf(stderr, "sparkcoll: calibrate size=%zu %s_us=%.1f ring_us=%.1f\n",
			        sizes[k], sc_algo_name(c->small_algo), (double)os[k] / 1e3,
			        (double)rg[k] / 1e3);
	}
	if (c->rank == 0) {
		size_t x = sc_calib_crossover(sizes, os, rg, measured, NS);
		/* out of time with one-shot still ahead (a starved machine): the
		 * crossover lies beyond what was measured; assume the default */
		if (cut && x == sizes[measured - 1] && x < DEFAULT_ONESHOT_MAX)
			x = DEFAULT_ONESHOT_MAX;
		v[0] = (int64_t)x;
	} else {
		v[0] = INT64_MAX;
	}
	if ((rc = agree_min(c, v, 1)) < 0)
		goto out;
	c->oneshot_max = (size_t)v[0];
	c->calibrated = 1;
	c->calib_ns = sc_now_ns() - t_all;
	if (dbg)
		fprintf(stderr, "sparkcoll: calibrate sizes=%d samples=%d ms=%.1f small=%s small_max=%zu\n",
		        measured, nsmp, (double)c->calib_ns / 1e6, sc_algo_name(c->small_algo),
		        c->oneshot_max);
out:
	free(buf);
	return rc;
}

/* ---- host identity and the spin policy ------------------------------------ */

uint64_t sc_host_id(void)
{
	char buf[300];
	const char *s = getenv("SPARK_COLL_HOST_ID");
	FILE *f;

	if (s && *s) {
		snprintf(buf, sizeof(buf), "id:%s", s);
		return hash_str(buf);
	}
	/* one per running kernel: network namespaces and containers share it, a VM
	 * or another machine has its own */
	f = fopen("/proc/sys/kernel/random/boot_id", "re");
	if (f) {
		char id[64];
		size_t n = fread(id, 1, sizeof(id) - 1, f);
		fclose(f);
		while (n && (id[n - 1] == '\n' || id[n - 1] == ' '))
			n--;
		id[n] = '\0';
		if (n >= 16) {
			snprintf(buf, sizeof(buf), "boot:%s", id);
			return hash_str(buf);
		}
	}
	memcpy(buf, "host:", 5);
	if (gethostname(buf + 5, sizeof(buf) - 6) == 0) {
		buf[sizeof(buf) - 1] = '\0';
		return hash_str(buf);
	}
	return 0;
}

int sc_spin_decide(const uint64_t *host_ids, int world, int rank, long ncpu, int spin_opt,
                   const char *yield_env, int *spin_us, int *spin_yield)
{
	int local = 1, oversubscribed;
	uint64_t me = host_ids ? host_ids[rank] : 0;

	if (me)
		for (int i = 0; i < world; i++)
			if (i != rank && host_ids[i] == me)
				local++;
	/* more ranks on this host than it has cores: spinning steals the cores
	 * the peers need, so sleep in poll() at once (a woken sleeper also
	 * preempts spinners). One rank per core still spins, as Open MPI and
	 * MPICH do: at 2 ranks on 2 cores an 8-byte all-reduce took 5 us
	 * spinning against 12 us sleeping (docs/runtime.md). */
	oversubscribed = local > 1 && ncpu > 0 && local > ncpu;
	*spin_yield = oversubscribed;
	if (yield_env && *yield_env)
		*spin_yield = atoi(yield_env) != 0;
	*spin_us = spin_opt >= 0 ? spin_opt : oversubscribed ? 0 : 50;
	return local;
}

/* Learn every rank's host (a ring all-gather, so it works on a physical ring
 * too) and set the spin policy from the ranks sharing this host. */
static int host_spin(sc_comm_t *c)
{
	uint64_t *ids = calloc((size_t)c->world, sizeof(*ids));
	int rc = 0;

	if (!ids)
		return -ENOMEM;
	ids[c->rank] = sc_host_id();
	if (c->world > 1)
		rc = sc_allgather_impl(c, SC_COLL_SELFTEST, &ids[c->rank], ids, 1, SC_I64,
		                       SC_ALGO_RING);
	if (rc == 0) {
		c->host_cpus = sysconf(_SC_NPROCESSORS_ONLN);
		c->host_ranks = sc_spin_decide(ids, c->world, c->rank, c->host_cpus, c->opt.spin_us,
		                               getenv("SPARK_COLL_SPIN_YIELD"), &c->spin_us,
		                               &c->spin_yield);
	}
	free(ids);
	return rc;
}

static void log_decision(sc_comm_t *c)
{
	const char *s = getenv("SPARK_COLL_LOG");
	char cal[48] = "";
	if (s && strcmp(s, "0") == 0)
		return;
	if (c->rank != 0 && !(s && strcmp(s, "all") == 0))
		return;
	if (c->calibrated)
		snprintf(cal, sizeof(cal), " calibrated=1 calib_ms=%.1f", (double)c->calib_ns / 1e6);
	fprintf(stderr,
	        "sparkcoll: rank=%d world=%d transport=%s algo=%s oneshot=%s small=%s small_max=%zu%s "
	        "host_ranks=%d cpus=%ld spin_us=%d decision=\"%s\" transport_reason=\"%s\"\n",
	        c->rank, c->world, c->transport, sc_algo_name(c->opt.algo),
	        c->oneshot_ok ? "on" : "off", sc_algo_name(c->small_algo), c->oneshot_max,
	        cal, c->host_ranks, c->host_cpus, c->spin_us,
	        c->decision, c->transport_reason);
}

int sc_comm_init(sc_comm_t **out, int rank, int world, const char *const *peers,
                 const sc_options_t *opts)
{
	sc_comm_t *c;
	int rc;
	char why[200];

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (world < 1 || world > SC_MAX_WORLD || rank < 0 || rank >= world || !peers)
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->listen_fd = -1;
	if (opts)
		c->opt = *opts;
	else
		sc_options_default(&c->opt);
	c->rank = rank;
	c->world = world;
	c->small_algo = SC_ALGO_RELAY; /* until the self-test allows one-shot */
	c->left = (rank - 1 + world) % world;
	c->right = (rank + 1) % world;
	c->peers = calloc((size_t)world, sizeof(char *));
	c->links = calloc((size_t)world, sizeof(sc_link_t *));
	if (!c->peers || !c->links) {
		rc = -ENOMEM;
		goto fail;
	}
	for (int i = 0; i < world; i++) {
		char host[256];
		uint16_t port;
		if (!peers[i] || sc_split_hostport(peers[i], host, sizeof(host), &port) < 0) {
			snprintf(c->errmsg, sizeof(c->errmsg), "bad peer address for rank %d: '%s'", i,
			         peers[i] ? peers[i] : "(null)");
			rc = -EINVAL;
			goto fail_msg;
		}
		c->peers[i] = strdup(peers[i]);
		if (!c->peers[i]) {
			rc = -ENOMEM;
			goto fail;
		}
	}
	/* until the hosts are known (host_spin), sleep in poll() while waiting */
	c->spin_us = c->opt.spin_us >= 0 ? c->opt.spin_us : 0;
	if (world == 1) {
		host_spin(c);
		snprintf(c->transport, sizeof(c->transport), "none");
		snprintf(c->decision, sizeof(c->decision), "single rank");
		if (c->opt.listen_fd >= 0)
			close(c->opt.listen_fd);
		*out = c;
		return 0;
	}
	if (c->opt.listen_fd >= 0) {
		c->listen_fd = c->opt.listen_fd;
		sc_set_nonblock(c->listen_fd);
	} else {
		c->listen_fd = sc_listen_on(peers[rank], c->opt.bind_addr, why, sizeof(why));
		if (c->listen_fd < 0) {
			rc = c->listen_fd;
			c->listen_fd = -1;
			snprintf(c->errmsg, sizeof(c->errmsg), "%s", why);
			goto fail_msg;
		}
	}
	if (!sc_verbs_open(c) && c->opt.transport == SC_TRANSPORT_VERBS) {
		snprintf(c->errmsg, sizeof(c->errmsg), "verbs requested but %s", c->verbs_why);
		rc = -ENODEV;
		goto fail_msg;
	}
	rc = sc_net_setup(c);
	close(c->listen_fd);
	c->listen_fd = -1;
	if (rc < 0)
		goto fail_msg;
	if (c->links_verbs == c->links_connected) {
		snprintf(c->transport, sizeof(c->transport), "verbs");
		snprintf(c->transport_reason, sizeof(c->transport_reason),
		         "RoCE v2 GID found for every connection");
	} else if (c->links_verbs == 0) {
		snprintf(c->transport, sizeof(c->transport), "tcp");
		if (!c->vctx)
			snprintf(c->transport_reason, sizeof(c->transport_reason), "%s", c->verbs_why);
		else if (!c->transport_reason[0])
			snprintf(c->transport_reason, sizeof(c->transport_reason),
			         "no verbs endpoint for these connections");
	} else {
		snprintf(c->transport, sizeof(c->transport), "mixed");
	}
	if (c->opt.transport == SC_TRANSPORT_VERBS && c->links_verbs != c->links_connected) {
		snprintf(c->errmsg, sizeof(c->errmsg), "verbs requested but some links are TCP: %s",
		         c->transport_reason);
		rc = -ENODEV;
		goto fail_msg;
	}
	if ((rc = host_spin(c)) < 0 || (rc = selftest(c)) < 0)
		goto fail_msg;
	/* auto's small-message algorithm: one-shot, or relay (neighbours only)
	 * when the self-test turned one-shot off; the crossover to ring is set,
	 * measured, or the default */
	c->small_algo = c->oneshot_ok ? SC_ALGO_ONESHOT : SC_ALGO_RELAY;
	if (c->opt.oneshot_max != SC_ONESHOT_CALIBRATE)
		c->oneshot_max = c->opt.oneshot_max;
	else if (c->opt.algo == SC_ALGO_AUTO) {
		if ((rc = calibrate(c)) < 0)
			goto fail_msg;
	} else
		c->oneshot_max = DEFAULT_ONESHOT_MAX;
	log_decision(c);
	*out = c;
	return 0;
fail_msg:
	if (getenv("SPARK_COLL_LOG") == NULL || strcmp(getenv("SPARK_COLL_LOG"), "0") != 0)
		fprintf(stderr, "sparkcoll: rank=%d init failed: %s: %s\n", rank, sc_strerror(rc),
		        c->errmsg);
fail:
	sc_comm_destroy(c);
	return rc;
}

/* ---- environment --------------------------------------------------------- */

static int env_rank_world(int *rank, int *world)
{
	int r = -1, w = -1;
	if (env_int("SPARK_RANK", 0, SC_MAX_WORLD - 1, &r) < 0 ||
	    env_int("SPARK_WORLD_SIZE", 1, SC_MAX_WORLD, &w) < 0)
		return -EINVAL;
	if (r < 0 && env_int("RANK", 0, SC_MAX_WORLD - 1, &r) < 0)
		return -EINVAL;
	if (w < 0 && env_int("WORLD_SIZE", 1, SC_MAX_WORLD, &w) < 0)
		return -EINVAL;
	if (r < 0 && env_int("OMPI_COMM_WORLD_RANK", 0, SC_MAX_WORLD - 1, &r) < 0)
		return -EINVAL;
	if (w < 0 && env_int("OMPI_COMM_WORLD_SIZE", 1, SC_MAX_WORLD, &w) < 0)
		return -EINVAL;
	if (r < 0 || w < 0 || r >= w)
		return -EINVAL;
	*rank = r;
	*world = w;
	return 0;
}

/* MASTER_ADDR rendezvous: rank 0 listens on MASTER_ADDR:MASTER_PORT; every
 * other rank listens on an ephemeral port, tells rank 0 the port (rank 0 sees
 * the address the connection came from) and gets the full table back. Rank 0
 * keeps its rendezvous socket as its data listener. */
static int rendezvous(int rank, int world, const char *maddr, const char *mport,
                      const sc_options_t *o, char ***peers_out, int *listen_fd)
{
	char **peers = calloc((size_t)world, sizeof(char *));
	int rc = 0, lfd = -1;
	int tmo = o->connect_timeout_ms;
	char hp[300];

	*peers_out = NULL;
	*listen_fd = -1;
	if (!peers)
		return -ENOMEM;
	snprintf(hp, sizeof(hp), strchr(maddr, ':') ? "[%s]:%s" : "%s:%s", maddr, mport);
	if (rank == 0) {
		char why[200];
		uint64_t dl = sc_now_ns() + (uint64_t)tmo * 1000000ull;
		int fds[SC_MAX_WORLD];
		lfd = sc_listen_on(hp, o->bind_addr, why, sizeof(why));
		if (lfd < 0) {
			fprintf(stderr, "sparkcoll: rendezvous: %s\n", why);
			free(peers);
			return lfd;
		}
		peers[0] = strdup(hp);
		for (int i = 0; i < world; i++)
			fds[i] = -1;
		for (int got = 1; got < world && rc == 0;) {
			struct sockaddr_storage sa;
			socklen_t sl = sizeof(sa);
			int fd;
			uint8_t b[SC_HDR_LEN + 2];
			sc_hdr_t h;
			struct pollfd pf = {.fd = lfd, .events = POLLIN};
			uint64_t now = sc_now_ns();
			if (now > dl) {
				rc = -ETIMEDOUT;
				break;
			}
			if (poll(&pf, 1, (int)((dl - now) / 1000000ull) + 1) <= 0)
				continue;
			fd = accept4(lfd, (struct sockaddr *)&sa, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
			if (fd < 0)
				continue;
			if (sc_io_full(fd, b, sizeof(b), 0, 5000) < 0 ||
			    sc_hdr_decode(b, SC_HDR_LEN, &h, NULL) < 0 || h.kind != SC_MSG_RDV ||
			    h.src == 0 || h.src >= world || fds[h.src] >= 0) {
				close(fd);
				continue;
			}
			{
				char host[INET6_ADDRSTRLEN + 2], port[8], addr[INET6_ADDRSTRLEN + 12];
				unsigned p = ((unsigned)b[SC_HDR_LEN] << 8) | b[SC_HDR_LEN + 1];
				if (getnameinfo((struct sockaddr *)&sa, sl, host, sizeof(host), port,
				                sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
					close(fd);
					continue;
				}
				if (strncmp(host, "::ffff:", 7) == 0 && strchr(host + 7, '.'))
					memmove(host, host + 7, strlen(host + 7) + 1);
				snprintf(addr, sizeof(addr), strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, p);
				peers[h.src] = strdup(addr);
				fds[h.src] = fd;
				got++;
			}
		}
		if (rc == 0) {
			uint8_t tbl[64 * SC_MAX_WORLD + SC_HDR_LEN];
			size_t len = 0;
			sc_hdr_t h = {0};
			for (int i = 0; i < world; i++) {
				size_t l = strlen(peers[i]) + 1;
				if (len + l > 64u * SC_MAX_WORLD) {
					rc = -E2BIG;
					break;
				}
				memcpy(tbl + SC_HDR_LEN + len, peers[i], l);
				len += l;
			}
			h.kind = SC_MSG_TABLE;
			h.len = len;
			h.count = (uint64_t)world;
			sc_hdr_encode(&h, tbl);
			for (int i = 1; i < world && rc == 0; i++)
				rc = sc_io_full(fds[i], tbl, SC_HDR_LEN + len, 1, 5000);
		}
		for (int i = 1; i < world; i++)
			if (fds[i] >= 0)
				close(fds[i]);
	} else {
		struct sockaddr_storage sa;
		socklen_t sl = sizeof(sa);
		uint16_t myport;
		struct addrinfo hints = {0}, *res = NULL;
		uint64_t dl = sc_now_ns() + (uint64_t)tmo * 1000000ull;
		int fd = -1;

		/* ephemeral port on the wildcard address */
		lfd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (lfd >= 0) {
			struct sockaddr_in6 a6 = {.sin6_family = AF_INET6};
			int zero = 0;
			setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
			if (bind(lfd, (struct sockaddr *)&a6, sizeof(a6)) < 0) {
				close(lfd);
				lfd = -1;
			}
		}
		if (lfd < 0) {
			struct sockaddr_in a4 = {.sin_family = AF_INET};
			lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (lfd < 0 || bind(lfd, (struct sockaddr *)&a4, sizeof(a4)) < 0) {
				rc = -errno;
				goto done;
			}
		}
		if (listen(lfd, SC_MAX_WORLD) < 0 || getsockname(lfd, (struct sockaddr *)&sa, &sl) < 0) {
			rc = -errno;
			goto done;
		}
		myport = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
		                                        : ((struct sockaddr_in *)&sa)->sin_port);
		hints.ai_socktype = SOCK_STREAM;
		hints.ai_flags = AI_NUMERICSERV;
		if (getaddrinfo(maddr, mport, &hints, &res) != 0) {
			rc = -EHOSTUNREACH;
			goto done;
		}
		for (;;) { /* rank 0 may not be up yet */
			fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0)
				break;
			if (fd >= 0)
				close(fd);
			fd = -1;
			if (sc_now_ns() > dl) {
				rc = -ETIMEDOUT;
				break;
			}
			usleep(20000);
		}
		freeaddrinfo(res);
		if (rc < 0)
			goto done;
		sc_set_nonblock(fd);
		{
			uint8_t b[SC_HDR_LEN + 2];
			sc_hdr_t h = {0};
			h.kind = SC_MSG_RDV;
			h.src = (uint16_t)rank;
			h.len = 2;
			sc_hdr_encode(&h, b);
			b[SC_HDR_LEN] = (uint8_t)(myport >> 8);
			b[SC_HDR_LEN + 1] = (uint8_t)myport;
			rc = sc_io_full(fd, b, sizeof(b), 1, 5000);
		}
		if (rc == 0) {
			uint8_t hb[SC_HDR_LEN];
			sc_hdr_t h;
			char *tbl = NULL;
			rc = sc_io_full(fd, hb, sizeof(hb), 0, tmo);
			if (rc == 0 && (sc_hdr_decode(hb, SC_HDR_LEN, &h, NULL) < 0 ||
			                h.kind != SC_MSG_TABLE || h.count != (uint64_t)world || h.len == 0))
				rc = -EPROTO;
			if (rc == 0 && !(tbl = malloc(h.len + 1)))
				rc = -ENOMEM;
			if (rc == 0)
				rc = sc_io_full(fd, tbl, h.len, 0, 5000);
			if (rc == 0) {
				size_t off = 0;
				tbl[h.len] = '\0';
				for (int i = 0; i < world && rc == 0; i++) {
					if (off >= h.len) {
						rc = -EPROTO;
						break;
					}
					peers[i] = strdup(tbl + off);
					off += strlen(tbl + off) + 1;
				}
			}
			free(tbl);
		}
		close(fd);
	}
done:
	if (rc < 0) {
		if (lfd >= 0)
			close(lfd);
		sc_free_peers(peers, world);
		return rc;
	}
	*peers_out = peers;
	*listen_fd = lfd;
	return 0;
}

int sc_comm_init_from_env(sc_comm_t **out)
{
	sc_options_t o;
	int rank, world, rc, lfd = -1;
	char **peers = NULL;
	const char *sp = getenv("SPARK_PEERS");

	if (!out)
		return -EINVAL;
	*out = NULL;
	sc_options_default(&o);
	if ((rc = sc_options_from_env(&o)) < 0) {
		fprintf(stderr, "sparkcoll: bad SPARK_COLL_* or SPARK_TOPOLOGY value\n");
		return rc;
	}
	if ((rc = env_rank_world(&rank, &world)) < 0) {
		fprintf(stderr, "sparkcoll: set SPARK_RANK/SPARK_WORLD_SIZE (or RANK/WORLD_SIZE)\n");
		return rc;
	}
	if (sp && *sp) {
		if ((rc = sc_parse_peers(sp, world, &peers)) < 0) {
			fprintf(stderr, "sparkcoll: SPARK_PEERS must list rank=addr:port for ranks 0..%d\n",
			        world - 1);
			return rc;
		}
	} else if (world == 1) {
		peers = calloc(1, sizeof(char *));
		if (!peers || !(peers[0] = strdup("127.0.0.1:1"))) {
			free(peers);
			return -ENOMEM;
		}
	} else {
		const char *ma = getenv("MASTER_ADDR"), *mp = getenv("SPARK_COLL_MASTER_PORT");
		if (!mp || !*mp)
			mp = getenv("MASTER_PORT");
		if (!ma || !*ma || !mp || !*mp) {
			fprintf(stderr, "sparkcoll: set SPARK_PEERS, or MASTER_ADDR and MASTER_PORT\n");
			return -EINVAL;
		}
		if ((rc = rendezvous(rank, world, ma, mp, &o, &peers, &lfd)) < 0) {
			fprintf(stderr, "sparkcoll: rendezvous through %s:%s failed: %s\n", ma, mp,
			        sc_strerror(rc));
			return rc;
		}
		o.listen_fd = lfd;
	}
	rc = sc_comm_init(out, rank, world, (const char *const *)peers, &o);
	sc_free_peers(peers, world);
	return rc;
}

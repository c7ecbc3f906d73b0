/* Failure behaviour: mismatched calls (relay included) fail on every rank, a
 * killed or stopped rank gives the others an error within the timeout (also
 * mid-relay on a ring), a pair that cannot connect turns one-shot off (relay
 * and ring fallback), a topology of "ring" never uses one-shot, an
 * unreachable neighbour fails init. */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <sys/time.h>
#include <unistd.h>

#include "sc_test_util.h"

static int g_case;
static int g_timeout_ms = 5000;

static int closed_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t al = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	bind(fd, (struct sockaddr *)&a, sizeof(a));
	getsockname(fd, (struct sockaddr *)&a, &al);
	port = ntohs(a.sin_port);
	close(fd); /* nothing listens there now: connect is refused */
	return port;
}

static int init_opts(tu_shared_t *sh, int rank, int n, const char *const *peers, sc_options_t *o,
                     sc_comm_t **c)
{
	int rc = sc_comm_init(c, rank, n, peers, o);
	sh->rc[rank] = rc;
	if (rc < 0)
		snprintf(sh->msg[rank], sizeof(sh->msg[rank]), "init: %s", sc_strerror(rc));
	return rc;
}

/* ---- mismatches ---------------------------------------------------------- */

enum { MM_COUNT_ONESHOT, MM_COUNT_RING, MM_TYPE, MM_OP, MM_ALGO_SPLIT, MM_COLL,
       MM_RELAY_VS_ONESHOT, MM_RING_RELAY_VS_RING, MM_RING_COUNT_RELAY, MM_RING_ALGO_SPLIT,
       MM_RING_TYPE_RELAY, MM_DOUBLING_VS_ONESHOT, MM_N };

static int rank_mismatch(int rank, int n, const char *const *peers, int lfd, void *arg)
{
	tu_shared_t *sh = arg;
	sc_options_t o;
	sc_comm_t *c;
	size_t cnt = 1000;
	sc_dtype_t dt = SC_F32;
	sc_op_t op = SC_SUM;
	sc_algo_t algo = SC_ALGO_AUTO;
	float *buf = calloc(200000, sizeof(float));
	uint64_t t0;
	int rc;

	tu_opts(&o, lfd);
	o.timeout_ms = g_timeout_ms;
	if (g_case >= MM_RING_RELAY_VS_RING && g_case <= MM_RING_TYPE_RELAY)
		o.topology = SC_TOPO_RING; /* neighbour links only: relay, not one-shot */
	if (init_opts(sh, rank, n, peers, &o, &c) < 0)
		return 1;
	/* one good call first */
	if (sc_allreduce(c, buf, buf, 10, SC_F32, SC_SUM) < 0) {
		sh->rc[rank] = 99;
		return 1;
	}
	switch (g_case) {
	case MM_COUNT_ONESHOT: algo = SC_ALGO_ONESHOT; if (rank == 2) cnt++; break;
	case MM_COUNT_RING: algo = SC_ALGO_RING; if (rank == 2) cnt = 999; break;
	case MM_TYPE: if (rank == 1) dt = SC_I32; break;
	case MM_OP: if (rank == 0) op = SC_MAX; break;
	case MM_ALGO_SPLIT: cnt = rank == 1 ? 100000 : 100; break; /* crossover 64 KiB */
	case MM_RELAY_VS_ONESHOT: algo = rank == 1 ? SC_ALGO_RELAY : SC_ALGO_ONESHOT; break;
	case MM_RING_RELAY_VS_RING: algo = rank == 2 ? SC_ALGO_RELAY : SC_ALGO_RING; break;
	case MM_RING_COUNT_RELAY: algo = SC_ALGO_RELAY; if (rank == 3) cnt = 1001; break;
	case MM_RING_ALGO_SPLIT: cnt = rank == 1 ? 100000 : 100; break; /* relay vs ring */
	case MM_RING_TYPE_RELAY: if (rank == 0) dt = SC_I32; break; /* auto: relay */
	case MM_DOUBLING_VS_ONESHOT: algo = rank == 3 ? SC_ALGO_DOUBLING : SC_ALGO_ONESHOT; break;
	}
	t0 = sc_now_ns();
	if (g_case == MM_COLL && rank == 3)
		rc = sc_allgather(c, buf, buf + 1000, 1000 / 4, SC_F32);
	else
		rc = sc_allreduce_algo(c, buf, buf, cnt, dt, op, algo);
	sh->val[rank][0] = (int64_t)((sc_now_ns() - t0) / 1000000);
	sh->rc[rank] = rc;
	snprintf(sh->msg[rank], sizeof(sh->msg[rank]), "%s", sc_comm_last_error(c));
	/* a failed communicator stays failed */
	sh->val[rank][1] = sc_allreduce(c, buf, buf, 10, SC_F32, SC_SUM);
	sc_comm_destroy(c);
	free(buf);
	return 0;
}

static void run_mismatch(int which)
{
	tu_shared_t *sh = tu_shared_new();
	int n = 4, st;
	g_case = which;
	st = sc_local_run(n, rank_mismatch, sh, 20000);
	cr_assert(st == 0, "case %d: status %d", which, st);
	for (int r = 0; r < n; r++) {
		cr_expect(sh->rc[r] == -SC_EMISMATCH, "case %d rank %d: rc %d (%s) %s", which, r,
		          sh->rc[r], sc_strerror(sh->rc[r]), sh->msg[r]);
		cr_expect(sh->val[r][0] < g_timeout_ms / 2, "case %d rank %d: took %lld ms (timeout?)",
		          which, r, (long long)sh->val[r][0]);
		cr_expect(sh->val[r][1] == -SC_EBROKEN, "case %d rank %d: next call gave %lld", which,
		          r, (long long)sh->val[r][1]);
	}
	tu_shared_free(sh);
}

Test(fault, mismatch_count_oneshot, .timeout = 30) { run_mismatch(MM_COUNT_ONESHOT); }
Test(fault, mismatch_count_ring, .timeout = 30) { run_mismatch(MM_COUNT_RING); }
Test(fault, mismatch_type, .timeout = 30) { run_mismatch(MM_TYPE); }
Test(fault, mismatch_op, .timeout = 30) { run_mismatch(MM_OP); }
Test(fault, mismatch_count_across_crossover, .timeout = 30) { run_mismatch(MM_ALGO_SPLIT); }
Test(fault, mismatch_collective, .timeout = 30) { run_mismatch(MM_COLL); }
Test(fault, mismatch_relay_vs_oneshot, .timeout = 30) { run_mismatch(MM_RELAY_VS_ONESHOT); }
Test(fault, mismatch_ring_relay_vs_ring, .timeout = 30) { run_mismatch(MM_RING_RELAY_VS_RING); }
Test(fault, mismatch_ring_count_relay, .timeout = 30) { run_mismatch(MM_RING_COUNT_RELAY); }
Test(fault, mismatch_ring_across_crossover, .timeout = 30) { run_mismatch(MM_RING_ALGO_SPLIT); }
Test(fault, mismatch_ring_type_relay, .timeout = 30) { run_mismatch(MM_RING_TYPE_RELAY); }
Test(fault, mismatch_doubling_vs_oneshot, .timeout = 30) { run_mismatch(MM_DOUBLING_VS_ONESHOT); }

/* ---- a rank dies or stops ------------------------------------------------ */

static void die_now(int sig)
{
	(void)sig;
	raise(SIGKILL);
}

static int g_relay;

static int rank_killed(int rank, int n, const char *const *peers, int lfd, void *arg)
{
	tu_shared_t *sh = arg;
	sc_options_t o;
	sc_comm_t *c;
	/* 8 MiB of f32: several ms per call; relay: 16 KiB (a decode all-reduce) */
	size_t cnt = g_relay ? 4096 : 2u << 20;
	float *buf = calloc(cnt, sizeof(float));
	int rc = 0;
	uint64_t t0 = 0;

	tu_opts(&o, lfd);
	o.timeout_ms = g_timeout_ms;
	if (g_relay == 1)
		o.topology = SC_TOPO_RING; /* auto: relay for 16 KiB */
	if (g_relay == 2)
		o.algo = SC_ALGO_DOUBLING;
	sh->pid[rank] = getpid();
	if (init_opts(sh, rank, n, peers, &o, &c) < 0)
		return 1;
	if (rank == n - 1) {
		if (g_case == 1) {
			raise(SIGSTOP); /* silent: alive, connected, never answers */
		} else {
			struct itimerval it = {.it_value = {0, 30000}};
			signal(SIGALRM, die_now);
			setitimer(ITIMER_REAL, &it, NULL);
		}
	}
	for (int i = 0; i < 100000 && rc == 0; i++) {
		t0 = sc_now_ns();
		rc = sc_allreduce(c, buf, buf, cnt, SC_F32, SC_SUM);
		if (g_relay && rc == 0 &&
		    sc_comm_pick_algo(c, cnt * 4) != (g_relay == 1 ? SC_ALGO_RELAY : SC_ALGO_DOUBLING)) {
			rc = 99;
			break;
		}
	}
	sh->val[rank][0] = (int64_t)((sc_now_ns() - t0) / 1000000);
	sh->rc[rank] = rc;
	snprintf(sh->msg[rank], sizeof(sh->msg[rank]), "%s", sc_comm_last_error(c));
	if (rank == 0 && g_case == 1) {
		usleep(200000);
		kill(sh->pid[n - 1], SIGKILL);
	}
	sc_comm_destroy(c);
	free(buf);
	return 0;
}

static void run_killed(int stopped, int relay)
{
	tu_shared_t *sh = tu_shared_new();
	int n = relay == 1 ? 5 : 4, st;
	g_case = stopped;
	g_relay = relay;
	g_timeout_ms = stopped ? 700 : 3000;
	st = sc_local_run(n, rank_killed, sh, 25000);
	cr_expect(st == 128 + SIGKILL, "the victim should die by SIGKILL, status %d", st);
	for (int r = 0; r < n - 1; r++) {
		cr_expect(sh->rc[r] < 0, "rank %d got no error (rc %d)", r, sh->rc[r]);
		cr_expect(sh->val[r][0] <= g_timeout_ms + 1500, "rank %d: error after %lld ms", r,
		          (long long)sh->val[r][0]);
		if (!stopped)
			cr_expect(sh->rc[r] != -ETIMEDOUT, "rank %d: a dead peer should be seen at once: %s",
			          r, sh->msg[r]);
	}
	tu_shared_free(sh);
	g_timeout_ms = 5000;
}

Test(fault, killed_rank_errors_everyone, .timeout = 40) { run_killed(0, 0); }
Test(fault, stopped_rank_times_out, .timeout = 40) { run_killed(1, 0); }
/* a ring of 5: ranks 1 and 2 are not neighbours of the victim (4) */
Test(fault, killed_rank_mid_relay_errors_everyone, .timeout = 40) { run_killed(0, 1); }
Test(fault, stopped_rank_mid_relay_times_out, .timeout = 40) { run_killed(1, 1); }
Test(fault, killed_rank_mid_doubling_errors_everyone, .timeout = 40) { run_killed(0, 2); }

/* ---- self-test fallback -------------------------------------------------- */

static int rank_fallback(int rank, int n, const char *const *peers, int lfd, void *arg)
{
	tu_shared_t *sh = arg;
	sc_options_t o;
	sc_comm_t *c;
	sc_info_t info;
	char bad[32];
	const char *mine[TU_MAXR];
	float v[101], out[101];
	uint64_t t0 = sc_now_ns();

	for (int i = 0; i < n; i++)
		mine[i] = peers[i];
	if (g_case == 0 && rank == 2) {
		/* rank 2 cannot reach rank 0 (not a ring neighbour when n = 4) */
		snprintf(bad, sizeof(bad), "127.0.0.1:%d", closed_port());
		mine[0] = bad;
	}
	if (g_case == 1 && rank == 1) {
		/* rank 1 cannot reach its neighbour rank 0 */
		snprintf(bad, sizeof(bad), "127.0.0.1:%d", closed_port());
		mine[0] = bad;
	}
	tu_opts(&o, lfd);
	o.pair_timeout_ms = 300;
	if (g_case == 1)
		o.connect_timeout_ms = 600;
	if (g_case == 2)
		o.topology = SC_TOPO_RING;
	if (init_opts(sh, rank, n, mine, &o, &c) < 0) {
		sh->val[rank][0] = (int64_t)((sc_now_ns() - t0) / 1000000);
		return 0;
	}
	sh->val[rank][0] = (int64_t)((sc_now_ns() - t0) / 1000000);
	sc_comm_info(c, &info);
	sh->val[rank][1] = info.oneshot_enabled;
	sh->val[rank][2] = info.links_connected;
	snprintf(sh->msg[rank], sizeof(sh->msg[rank]), "%s", info.decision);
	for (int algo = 0; algo < SC_ALGO_COUNT; algo++) {
		for (int i = 0; i < 101; i++)
			v[i] = (float)(rank + i);
		sh->rc[rank] = sc_allreduce_algo(c, v, out, 101, SC_F32, SC_SUM, (sc_algo_t)algo);
		for (int i = 0; i < 101 && sh->rc[rank] == 0; i++)
			if (out[i] != (float)(n * i + n * (n - 1) / 2))
				sh->rc[rank] = 77;
		if (sh->rc[rank])
			break;
	}
	sh->val[rank][3] = sc_comm_pick_algo(c, 8);
	sh->val[rank][4] = sc_comm_pick_algo(c, 1 << 20);
	sc_comm_destroy(c);
	return 0;
}

Test(fault, unreachable_pair_falls_back_to_ring, .timeout = 30)
{
	tu_shared_t *sh = tu_shared_new();
	int n = 4, st;
	g_case = 0;
	st = sc_local_run(n, rank_fallback, sh, 20000);
	cr_assert(st == 0);
	for (int r = 0; r < n; r++) {
		cr_expect(sh->rc[r] == 0, "rank %d: rc %d %s", r, sh->rc[r], sh->msg[r]);
		cr_expect(sh->val[r][1] == 0, "rank %d kept one-shot on: %s", r, sh->msg[r]);
		cr_expect(sh->val[r][3] == SC_ALGO_RELAY, "rank %d: auto must pick relay for 8 B, got %s",
		          r, sc_algo_name((sc_algo_t)sh->val[r][3]));
		cr_expect(sh->val[r][4] == SC_ALGO_RING, "rank %d: auto must pick ring for 1 MiB", r);
		cr_expect(strstr(sh->msg[r], "ring") != NULL, "rank %d decision: %s", r, sh->msg[r]);
		cr_expect(sh->val[r][0] < 3000, "rank %d: init took %lld ms", r, (long long)sh->val[r][0]);
	}
	/* the ranks that saw the failure name it */
	cr_expect(strstr(sh->msg[2], "could not connect to rank 0") != NULL, "%s", sh->msg[2]);
	cr_expect(strstr(sh->msg[0], "could not connect to rank 2") != NULL, "%s", sh->msg[0]);
	tu_shared_free(sh);
}

Test(fault, unreachable_neighbour_fails_init, .timeout = 30)
{
	tu_shared_t *sh = tu_shared_new();
	int n = 3, st;
	g_case = 1;
	st = sc_local_run(n, rank_fallback, sh, 20000);
	cr_assert(st == 0);
	cr_expect(sh->rc[1] < 0, "rank 1 must fail: it cannot reach its neighbour");
	cr_expect(sh->rc[0] < 0, "rank 0 must fail: its neighbour never connects");
	for (int r = 0; r < n; r++)
		cr_expect(sh->val[r][0] < 5000, "rank %d: took %lld ms", r, (long long)sh->val[r][0]);
	tu_shared_free(sh);
}

Test(fault, ring_topology_uses_neighbours_only, .timeout = 30)
{
	tu_shared_t *sh = tu_shared_new();
	int n = 5, st;
	g_case = 2;
	st = sc_local_run(n, rank_fallback, sh, 20000);
	cr_assert(st == 0);
	for (int r = 0; r < n; r++) {
		cr_expect(sh->rc[r] == 0, "rank %d: rc %d", r, sh->rc[r]);
		cr_expect(sh->val[r][1] == 0, "rank %d: one-shot must be off on a ring", r);
		cr_expect(sh->val[r][2] == 2, "rank %d: %lld links, want 2", r, (long long)sh->val[r][2]);
		cr_expect(strstr(sh->msg[r], "topology is ring") != NULL, "%s", sh->msg[r]);
	}
	tu_shared_free(sh);
}

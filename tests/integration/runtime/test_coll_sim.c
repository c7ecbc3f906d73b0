/* libsparkcoll in simulated clusters (issue 8): the start-up self-test on a
 * physical ring and through a switch. Needs root (skips otherwise).
 *
 * The sim's fabric netdevs have no IPv4 addresses yet, so each test gives
 * them some, the way the fabric address plan does: one 169.254.S.0/24 per
 * twin per cable on a ring, one per twin rail on a switch; host number = node
 * index. The sim's management net (enP7s7, 169.254.100.K/16) spans the whole
 * link-local range, so without more a node would reach a non-neighbour's
 * fabric address through it (and the other node would answer ARP for it
 * there). A real ring has no such path: on a ring the test also adds, in each
 * node, an `unreachable` route for every fabric subnet the node has no cable
 * on. Everything the test adds lives in the node namespaces, which sh_down
 * deletes.
 *
 * Each rank (coll_sim_rank, one per node, started as `sparkctl sim exec`
 * would) is given explicit peers: its ring neighbours by their address on the
 * shared cable, non-neighbours by an address on a cable it does not have. */
#include "sim_harness.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define PORT 7411
#define MAXN SIM_MAX_NODES

static const char *const ifn[2][2] = {{"enp1s0f0np0", "enP2p1s0f0np0"},
				      {"enp1s0f1np1", "enP2p1s0f1np1"}};

/* ---- addresses ---------------------------------------------------------- */

/* Ring: cable c (1..n) joins node c port 0 and node c%n+1 port 1. */
static int ring_subnet(int cable, int twin)
{
	return 10 + 2 * (cable - 1) + twin;
}

/* Give every cable end its address and every node unreachable routes to the
 * subnets of the cables it does not have. */
static void ring_addresses(struct sh_sim *s)
{
	int n = s->nodes;
	for (int k = 1; k <= n; k++) {
		char cmd[2048];
		size_t len = 0;
		len += (size_t)snprintf(cmd + len, sizeof cmd - len, "set -e;");
		for (int c = 1; c <= n; c++) {
			int far = c % n + 1;
			for (int t = 0; t < 2; t++) {
				int sub = ring_subnet(c, t);
				if (c == k || far == k)
					len += (size_t)snprintf(cmd + len, sizeof cmd - len,
								" ip addr add 169.254.%d.%d/24 dev %s;", sub,
								k, ifn[c == k ? 0 : 1][t]);
				else
					len += (size_t)snprintf(cmd + len, sizeof cmd - len,
								" ip route add unreachable 169.254.%d.0/24;",
								sub);
			}
		}
		cr_assert_lt(len, sizeof cmd);
		char *out = NULL;
		int rc = sh_sh(s, k, cmd, &out);
		cr_assert_eq(rc, 0, "addresses in %s: %s", sh_ns(s, k), out);
		free(out);
	}
}

/* Peers of rank r (node r+1) on a ring of n: right neighbour over twin 0 of
 * the cable to it, left neighbour over twin 1 of the cable from it, others by
 * an address on a cable this node does not have. */
static void ring_peers(int n, int r, char peers[MAXN][40])
{
	int k = r + 1;
	for (int j = 0; j < n; j++) {
		int kj = j + 1;
		if (j == (r + 1) % n && j != r)
			snprintf(peers[j], 40, "169.254.%d.%d:%d", ring_subnet(k, 0), kj, PORT);
		else if (j == (r - 1 + n) % n && j != r)
			snprintf(peers[j], 40, "169.254.%d.%d:%d", ring_subnet(kj, 1), kj, PORT);
		else /* self, or a non-neighbour: its own port-0 cable */
			snprintf(peers[j], 40, "169.254.%d.%d:%d", ring_subnet(kj, 0), kj, PORT);
	}
}

/* Switch: port 1 of every node on one bridge; twin t of every node in
 * 169.254.(20+t).0/24 (a rail). */
static void switch_addresses(struct sh_sim *s)
{
	for (int k = 1; k <= s->nodes; k++) {
		char cmd[512], *out = NULL;
		snprintf(cmd, sizeof cmd,
			 "set -e; ip addr add 169.254.20.%d/24 dev %s; ip addr add 169.254.21.%d/24 dev %s",
			 k, ifn[1][0], k, ifn[1][1]);
		int rc = sh_sh(s, k, cmd, &out);
		cr_assert_eq(rc, 0, "addresses in %s: %s", sh_ns(s, k), out);
		free(out);
	}
}

/* Rank r reaches rank j on rail (r+j)%2, so both rails carry traffic. */
static void switch_peers(int n, int r, char peers[MAXN][40])
{
	for (int j = 0; j < n; j++)
		snprintf(peers[j], 40, "169.254.%d.%d:%d", 20 + (r + j) % 2, j + 1, PORT);
}

/* ---- running ranks ------------------------------------------------------- */

/* coll_sim_rank, built next to this test binary. */
static const char *rank_prog(void)
{
	static char path[4096];
	ssize_t l = readlink("/proc/self/exe", path, sizeof path - 32);
	if (l <= 0)
		return NULL;
	path[l] = 0;
	char *slash = strrchr(path, '/');
	if (!slash)
		return NULL;
	strcpy(slash + 1, "coll_sim_rank");
	return access(path, X_OK) == 0 ? path : NULL;
}

struct rank_out {
	char *text;  /* all output of the rank (stdout + stderr) */
	int status;  /* exit code, 128+N on a signal */
	json_t *res; /* its RESULT line, or NULL */
};

/* Start rank r in node r+1 for every rank at once, with `env` (NAME=VALUE,
 * NULL-terminated) added; collect output until all exit or timeout_ms. */
static void run_ranks(struct sh_sim *s, int n, void (*peers_of)(int, int, char[MAXN][40]),
		      const char *const *env, int timeout_ms, struct rank_out *ro)
{
	pid_t pid[MAXN];
	int fd[MAXN];
	size_t len[MAXN] = {0}, cap[MAXN];
	const char *prog = rank_prog();
	cr_assert_not_null(prog, "coll_sim_rank is not built next to this test");
	fflush(NULL);
	for (int r = 0; r < n; r++) {
		int p[2];
		cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
		pid[r] = fork();
		cr_assert_geq(pid[r], 0);
		if (pid[r] == 0) {
			char peers[MAXN][40], rs[8], err[512];
			char *argv[MAXN + 3];
			close(p[0]);
			dup2(p[1], 1);
			dup2(p[1], 2);
			close(p[1]);
			peers_of(n, r, peers);
			snprintf(rs, sizeof rs, "%d", r);
			argv[0] = (char *)prog;
			argv[1] = rs;
			for (int j = 0; j < n; j++)
				argv[2 + j] = peers[j];
			argv[2 + n] = NULL;
			for (int e = 0; env && env[e]; e++)
				putenv((char *)env[e]);
			sim_exec(s->prefix, sh_ns(s, r + 1), argv, err, sizeof err);
			fprintf(stderr, "%s\n", err);
			_exit(127);
		}
		close(p[1]);
		fd[r] = p[0];
		cap[r] = 4096;
		ro[r].text = malloc(cap[r]);
		ro[r].res = NULL;
	}
	uint64_t deadline = sh_now_us() + (uint64_t)timeout_ms * 1000;
	int open = n;
	while (open > 0) {
		struct pollfd pf[MAXN];
		int who[MAXN], np = 0;
		for (int r = 0; r < n; r++)
			if (fd[r] >= 0) {
				pf[np].fd = fd[r];
				pf[np].events = POLLIN;
				who[np++] = r;
			}
		uint64_t now = sh_now_us();
		if (now >= deadline)
			break;
		if (poll(pf, (nfds_t)np, (int)((deadline - now) / 1000) + 1) < 0 && errno != EINTR)
			break;
		for (int i = 0; i < np; i++) {
			int r = who[i];
			if (!pf[i].revents)
				continue;
			if (len[r] + 1024 > cap[r])
				ro[r].text = realloc(ro[r].text, cap[r] *= 2);
			ssize_t got = read(fd[r], ro[r].text + len[r], cap[r] - len[r] - 1);
			if (got < 0 && errno == EINTR)
				continue;
			if (got <= 0) {
				close(fd[r]);
				fd[r] = -1;
				open--;
			} else {
				len[r] += (size_t)got;
			}
		}
	}
	for (int r = 0; r < n; r++) {
		int st = 0;
		if (fd[r] >= 0) { /* timed out */
			kill(pid[r], SIGKILL);
			close(fd[r]);
		}
		while (waitpid(pid[r], &st, 0) < 0 && errno == EINTR)
			;
		ro[r].status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		ro[r].text[len[r]] = 0;
		char *line = strstr(ro[r].text, "RESULT {");
		if (line) {
			char *end = strchr(line, '\n');
			json_error_t je;
			ro[r].res = json_loadb(line + 7, end ? (size_t)(end - line - 7) : strlen(line + 7),
					       0, &je);
		}
	}
}

static void free_ranks(struct rank_out *ro, int n)
{
	for (int r = 0; r < n; r++) {
		free(ro[r].text);
		json_decref(ro[r].res);
	}
}

static long long ji(json_t *o, const char *k)
{
	return json_integer_value(json_object_get(o, k));
}

static const char *js(json_t *o, const char *k)
{
	const char *v = json_string_value(json_object_get(o, k));
	return v ? v : "";
}

/* Every rank ran every check, with correct results. */
static void expect_all_correct(struct rank_out *ro, int n)
{
	for (int r = 0; r < n; r++) {
		if (ro[r].res)
			cr_log_info("rank %d: init %lld ms, %lld checks, one-shot %s: %s", r,
				    ji(ro[r].res, "init_ms"), ji(ro[r].res, "checks"),
				    ji(ro[r].res, "oneshot_enabled") ? "on" : "off",
				    js(ro[r].res, "decision"));
		cr_assert_not_null(ro[r].res, "rank %d gave no result (exit %d):\n%s", r, ro[r].status,
				   ro[r].text);
		cr_expect_eq(ji(ro[r].res, "init_rc"), 0, "rank %d init: %s", r, ro[r].text);
		cr_expect_gt(ji(ro[r].res, "checks"), 200, "rank %d: %s", r, ro[r].text);
		cr_expect_eq(ji(ro[r].res, "failures"), 0, "rank %d: %s", r,
			     js(ro[r].res, "first_failure"));
		cr_expect_eq(ro[r].status, 0, "rank %d exit %d:\n%s", r, ro[r].status, ro[r].text);
		cr_expect_str_eq(js(ro[r].res, "transport"), "tcp", "rank %d", r);
	}
}

/* Bytes sent by node k on its fabric netdevs and on enP7s7. */
static void tx_bytes(struct sh_sim *s, int k, long long *fabric, long long *mgmt)
{
	char *out = NULL;
	int rc = sh_sh(s, k,
		       "cd /sys/class/net && cat enp1s0f0np0/statistics/tx_bytes "
		       "enP2p1s0f0np0/statistics/tx_bytes enp1s0f1np1/statistics/tx_bytes "
		       "enP2p1s0f1np1/statistics/tx_bytes enP7s7/statistics/tx_bytes",
		       &out);
	cr_assert_eq(rc, 0, "%s", out);
	long long v[5] = {0};
	cr_assert_eq(sscanf(out, "%lld %lld %lld %lld %lld", &v[0], &v[1], &v[2], &v[3], &v[4]), 5,
		     "%s", out);
	free(out);
	*fabric = v[0] + v[1] + v[2] + v[3];
	*mgmt = v[4];
}

static const char *const base_env[] = {
	"SPARK_COLL_LOG=all",
	"SPARK_COLL_TIMEOUT_MS=20000",
	"SPARK_COLL_CONNECT_TIMEOUT_MS=15000",
	NULL,
};

TestSuite(coll_sim, .timeout = 90);

/* A 4-ring, nothing told about the topology: the non-neighbour pairs cannot
 * connect, so the self-test turns one-shot off on every rank, says why, auto
 * uses relay for small calls (up to the calibrated crossover) and ring above,
 * and every collective (one-shot and relay requested included) still gives
 * the right values over the neighbour cables only. */
Test(coll_sim, ring_falls_back_to_ring)
{
	sh_require_root();
	struct sh_sim s;
	struct sim_opts o = {.nodes = 4, .topo = SIM_RING, .port = -1, .no_agents = true};
	cr_assert_eq(sh_up(&s, "cr", &o), 0, "%s", s.err);
	ring_addresses(&s);

	long long f0[MAXN + 1], m0[MAXN + 1], f1, m1;
	for (int k = 1; k <= 4; k++)
		tx_bytes(&s, k, &f0[k], &m0[k]);
	struct rank_out ro[MAXN];
	uint64_t t0 = sh_now_us();
	run_ranks(&s, 4, ring_peers, base_env, 60000, ro);
	double secs = (double)(sh_now_us() - t0) / 1e6;
	expect_all_correct(ro, 4);
	int said_unreachable = 0;
	for (int r = 0; r < 4; r++) {
		json_t *j = ro[r].res;
		if (!j)
			continue;
		cr_expect_eq(ji(j, "oneshot_enabled"), 0, "rank %d kept one-shot on a ring: %s", r,
			     js(j, "decision"));
		cr_expect_eq(ji(j, "links_connected"), 2, "rank %d: %s", r, ro[r].text);
		/* relay, measured against ring at init (2 dependent steps against
		 * 6: relay should win at 4 KiB, but timing is the machine's, so
		 * only that auto follows the crossover is asserted) */
		cr_expect_eq(ji(j, "calibrated"), 1, "rank %d", r);
		/* relay, or recursive doubling (at 4 ranks its partners are
		 * neighbours) if the calibration found it faster */
		const char *small = js(j, "small_algo");
		cr_expect(strcmp(small, "relay") == 0 || strcmp(small, "doubling") == 0, "rank %d: %s",
			  r, small);
		long long x = ji(j, "oneshot_max");
		cr_expect_str_eq(js(j, "pick_4k"), x >= 4096 ? small : "ring", "rank %d (crossover %lld)",
				 r, x);
		cr_expect_str_eq(js(j, "pick_1m"), x >= (1 << 20) ? small : "ring",
				 "rank %d (crossover %lld)", r, x);
		if (r == 0)
			cr_log_info("calibrated on the 4-ring: %s up to %lld B, ring above", small, x);
		const char *d = js(j, "decision");
		cr_expect(strncmp(d, "ring: one-shot off: ", 20) == 0, "rank %d decision: %s", r, d);
		cr_expect(strstr(d, "could not connect to rank") != NULL, "rank %d decision: %s", r, d);
		/* rank r's unreachable peer is (r + 2) % 4 */
		char want[64];
		snprintf(want, sizeof want, "rank %d could not connect to rank %d", r, (r + 2) % 4);
		cr_expect(strstr(d, want) != NULL, "rank %d decision: %s (want '%s')", r, d, want);
		said_unreachable += strstr(d, "No route to host") != NULL;
	}
	/* the ranks that dialled a non-neighbour (the higher of each pair) saw why */
	cr_expect_geq(said_unreachable, 2, "no decision names the routing error");
	cr_expect_lt(secs, 40.0, "ring run took %.1f s", secs);
	/* the data went over the cables, not the management net */
	for (int k = 1; k <= 4; k++) {
		tx_bytes(&s, k, &f1, &m1);
		cr_expect_gt(f1 - f0[k], 4ll << 20, "node %d sent only %lld bytes on its cables", k,
			     f1 - f0[k]);
		cr_expect_lt(m1 - m0[k], 256ll << 10, "node %d sent %lld bytes on enP7s7", k,
			     m1 - m0[k]);
	}
	free_ranks(ro, 4);

	/* told it is a ring (SPARK_TOPOLOGY=ring, as a job on a ring group is):
	 * no non-neighbour is dialled at all, and the decision says so */
	const char *const ring_env[] = {"SPARK_COLL_LOG=all", "SPARK_COLL_TIMEOUT_MS=20000",
					"SPARK_COLL_CONNECT_TIMEOUT_MS=15000", "SPARK_TOPOLOGY=ring",
					"SPARK_COLL_ONESHOT_MAX=64K", NULL};
	for (int k = 1; k <= 4; k++)
		tx_bytes(&s, k, &f0[k], &m0[k]);
	run_ranks(&s, 4, ring_peers, ring_env, 60000, ro);
	expect_all_correct(ro, 4);
	for (int r = 0; r < 4; r++) {
		json_t *j = ro[r].res;
		if (!j)
			continue;
		cr_expect_eq(ji(j, "oneshot_enabled"), 0, "rank %d", r);
		/* SPARK_COLL_ONESHOT_MAX sets the relay/ring crossover */
		cr_expect_eq(ji(j, "calibrated"), 0, "rank %d", r);
		cr_expect_eq(ji(j, "oneshot_max"), 65536, "rank %d", r);
		cr_expect_str_eq(js(j, "small_algo"), "relay", "rank %d", r);
		cr_expect_str_eq(js(j, "pick_4k"), "relay", "rank %d", r);
		cr_expect_str_eq(js(j, "pick_1m"), "ring", "rank %d", r);
		cr_expect(strstr(js(j, "decision"), "topology is ring") != NULL, "rank %d decision: %s",
			  r, js(j, "decision"));
		cr_expect_lt(ji(j, "init_ms"), 3000, "rank %d waited %lld ms for non-neighbours", r,
			     ji(j, "init_ms"));
	}
	for (int k = 1; k <= 4; k++) {
		tx_bytes(&s, k, &f1, &m1);
		cr_expect_gt(f1 - f0[k], 4ll << 20, "node %d sent only %lld bytes on its cables", k,
			     f1 - f0[k]);
		cr_expect_lt(m1 - m0[k], 256ll << 10, "node %d sent %lld bytes on enP7s7", k,
			     m1 - m0[k]);
	}
	free_ranks(ro, 4);
	cr_expect_eq(sh_down(&s), 0);
}

/* A 4-node switch: every pair connects, the checksum agrees, one-shot stays
 * on; results are right for every algorithm. */
Test(coll_sim, switch_keeps_oneshot)
{
	sh_require_root();
	struct sh_sim s;
	struct sim_opts o = {.nodes = 4, .topo = SIM_SWITCH, .port = -1, .no_agents = true};
	cr_assert_eq(sh_up(&s, "cs", &o), 0, "%s", s.err);
	switch_addresses(&s);

	struct rank_out ro[MAXN];
	run_ranks(&s, 4, switch_peers, base_env, 60000, ro);
	expect_all_correct(ro, 4);
	for (int r = 0; r < 4; r++) {
		json_t *j = ro[r].res;
		if (!j)
			continue;
		cr_expect_eq(ji(j, "oneshot_enabled"), 1, "rank %d turned one-shot off: %s", r,
			     js(j, "decision"));
		cr_expect_eq(ji(j, "links_connected"), 3, "rank %d", r);
		cr_expect_str_eq(js(j, "decision"), "one-shot on: all 6 pairs connected, checksum agreed",
				 "rank %d", r);
		cr_expect_eq(ji(j, "calibrated"), 1, "rank %d", r);
		/* one-shot, or recursive doubling if the calibration found it faster */
		cr_expect(strcmp(js(j, "small_algo"), "oneshot") == 0 ||
			  strcmp(js(j, "small_algo"), "doubling") == 0, "rank %d: %s", r,
			  js(j, "small_algo"));
		if (r == 0)
			cr_log_info("switch: small algorithm %s up to %lld B", js(j, "small_algo"),
				    ji(j, "oneshot_max"));
		cr_expect_str_eq(js(j, "pick_1m"), "ring", "rank %d", r);
	}
	free_ranks(ro, 4);
	cr_expect_eq(sh_down(&s), 0);
}

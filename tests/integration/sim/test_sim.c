/* Integration tests of the simulator: cabling, faults, isolation, cleanup.
 * Needs root (skips otherwise). Every test uses its own sim prefix. */
#include "sim_harness.h"

#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NE (4 * SIM_MAX_NODES)

static const char *const ifn[2][2] = {{"enp1s0f0np0", "enP2p1s0f0np0"},
				      {"enp1s0f1np1", "enP2p1s0f1np1"}};

static struct sim_opts bare(int nodes, enum sim_topo t)
{
	return (struct sim_opts){.nodes = nodes, .topo = t, .port = -1, .no_agents = true};
}

/* Exactly a Spark's netdevs, plus enP7s7 and lo. */
static void check_netdevs(struct sh_sim *s)
{
	for (int k = 1; k <= s->nodes; k++) {
		json_t *names = NULL;
		cr_assert_eq(sim_link_names(sh_ns(s, k), &names), 0);
		char *got = json_dumps(names, JSON_COMPACT);
		cr_expect_str_eq(got, "[\"enP2p1s0f0np0\",\"enP2p1s0f1np1\",\"enP7s7\",\"enp1s0f0np0\","
				      "\"enp1s0f1np1\",\"lo\"]",
				 "netdevs of %s", sh_ns(s, k));
		free(got);
		json_decref(names);
		/* Fabric ports up, without IPv4; enP7s7 holds 169.254.100.K/16. */
		int saved;
		cr_assert_eq(sim_enter_ns(sh_ns(s, k), &saved), 0);
		struct ifaddrs *ifa = NULL;
		cr_assert_eq(getifaddrs(&ifa), 0);
		bool mgmt_ok = false;
		for (struct ifaddrs *a = ifa; a; a = a->ifa_next) {
			if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET)
				continue;
			char ip[INET_ADDRSTRLEN];
			inet_ntop(AF_INET, &((struct sockaddr_in *)a->ifa_addr)->sin_addr, ip, sizeof ip);
			if (strcmp(a->ifa_name, "enP7s7") == 0) {
				char want[32];
				snprintf(want, sizeof want, "169.254.100.%d", k);
				struct sockaddr_in *m = (struct sockaddr_in *)a->ifa_netmask;
				mgmt_ok = strcmp(ip, want) == 0 && m &&
					  ntohl(m->sin_addr.s_addr) == 0xffff0000u;
			} else {
				cr_expect(strcmp(a->ifa_name, "lo") == 0, "%s has IPv4 %s on %s",
					  sh_ns(s, k), ip, a->ifa_name);
			}
		}
		freeifaddrs(ifa);
		sim_leave_ns(saved);
		cr_expect(mgmt_ok, "%s: enP7s7 lacks 169.254.100.%d/16", sh_ns(s, k), k);
		for (int p = 0; p < 2; p++)
			for (int t = 0; t < 2; t++) {
				struct sim_link_info li;
				cr_assert_eq(sim_link_query(sh_ns(s, k), ifn[p][t], &li), 0);
				cr_expect(li.admin_up, "%s:%s is down", sh_ns(s, k), ifn[p][t]);
			}
	}
}

static void expect_map(struct sh_sim *s, bool want[NE][NE])
{
	static bool heard[NE][NE];
	cr_assert_eq(sh_frame_map(s, heard), 0);
	int bad = 0;
	for (int i = 0; i < 4 * s->nodes; i++)
		for (int j = 0; j < 4 * s->nodes; j++)
			if (heard[i][j] != want[i][j] && bad++ < 8)
				cr_log_error("frame from %s %s at %s", sh_ep_name(s, i),
					     heard[i][j] ? "unexpectedly arrived" : "did not arrive",
					     sh_ep_name(s, j));
	cr_expect_eq(bad, 0, "%d wrong frame deliveries", bad);
}

static void ring_map(int n, bool want[NE][NE])
{
	memset(want, 0, sizeof(bool) * NE * NE);
	for (int k = 1; k <= n; k++)
		for (int t = 0; t < 2; t++) {
			int a = SH_EP(k, 0, t), b = SH_EP(k % n + 1, 1, t);
			want[a][b] = want[b][a] = true;
		}
}

static void check_down(struct sh_sim *s)
{
	char prefix[sizeof s->prefix], root[sizeof s->root];
	snprintf(prefix, sizeof prefix, "%s", s->prefix);
	snprintf(root, sizeof root, "%s", s->root);
	uint64_t t0 = sh_now_us();
	cr_assert_eq(sh_down(s), 0, "sim_down: %s", s->err);
	cr_log_info("%s: down in %.1f ms", prefix, (double)(sh_now_us() - t0) / 1000.0);
	const char *left = sh_leftovers(prefix, root);
	cr_expect_str_empty(left, "left behind: %s", left);
	/* Twice is fine. */
	cr_expect_eq(sim_down(prefix, NULL, NULL, 0), 0);
}

static void up_timed(struct sh_sim *s, const char *tag, struct sim_opts *o)
{
	uint64_t t0 = sh_now_us();
	int r = sh_up(s, tag, o);
	cr_assert_eq(r, 0, "sim_up: %s (%d)", s->err, r);
	cr_log_info("%s: up (%d nodes, %s) in %.1f ms", s->prefix, o->nodes + o->bare,
		    sim_topo_name(o->topo), (double)(sh_now_us() - t0) / 1000.0);
}

Test(sim, sim_pair_up_down, .timeout = 60)
{
	sh_require_root();
	struct sh_sim s;
	struct sim_opts o = bare(2, SIM_PAIR);
	up_timed(&s, "pair", &o);
	check_netdevs(&s);
	static bool want[NE][NE];
	memset(want, 0, sizeof want);
	for (int t = 0; t < 2; t++)
		want[SH_EP(1, 0, t)][SH_EP(2, 0, t)] = want[SH_EP(2, 0, t)][SH_EP(1, 0, t)] = true;
	expect_map(&s, want);
	/* Port 1 is unplugged: admin up, no carrier. */
	struct sim_link_info li;
	cr_assert_eq(sim_link_query(sh_ns(&s, 1), "enp1s0f1np1", &li), 0);
	cr_expect(li.admin_up && !li.carrier);
	cr_assert_eq(sim_link_query(sh_ns(&s, 2), "enp1s0f0np0", &li), 0);
	cr_expect(li.admin_up && li.carrier);
	check_down(&s);
}

Test(sim, sim_ring4_up_down, .timeout = 60)
{
	sh_require_root();
	struct sh_sim s;
	struct sim_opts o = bare(4, SIM_RING);
	up_timed(&s, "ring4", &o);
	check_netdevs(&s);
	static bool want[NE][NE];
	ring_map(4, want);
	expect_map(&s, want);
	check_down(&s);
}

Test(sim, sim_ring8_up_down, .timeout = 60)
{
	sh_require_root();
	struct sh_sim s;
	struct sim_opts o = bare(8, SIM_RING);
	o.mtu = 9000;
	up_timed(&s, "ring8", &o);
	check_netdevs(&s);
	struct sim_link_info li;
	cr_assert_eq(sim_link_query(sh_ns(&s, 5), "enP2p1s0f1np1", &li), 0);
	cr_expect_eq(li.mtu, 9000);
	static bool want[NE][NE];
	ring_map(8, want);
	expect_map(&s, want);
	check_down(&s);
}

Test(sim, sim_switch8_up_down, .timeout = 60)
{
	sh_require_root();
	struct sh_sim s;
	struct sim_opts o = bare(8, SIM_SWITCH);
	up_timed(&s, "sw8", &o);
	check_netdevs(&s);
	static bool want[NE][NE];
	memset(want, 0, sizeof want);
	for (int k = 1; k <= 8; k++)
		for (int t = 0; t < 2; t++)
			for (int j = 1; j <= 8; j++)
				for (int u = 0; u < 2; u++)
					if (j != k || u != t)
						want[SH_EP(k, 1, t)][SH_EP(j, 1, u)] = true;
	expect_map(&s, want);
	struct sim_link_info li;
	cr_assert_eq(sim_link_query(sh_ns(&s, 3), "enP2p1s0f0np0", &li), 0);
	cr_expect(li.admin_up && !li.carrier, "port 0 is unplugged on a switch");
	char sw[64];
	snprintf(sw, sizeof sw, "%s-switch", s.prefix);
	cr_assert_eq(sim_link_query(sw, "swp5", &li), 0);
	cr_expect_str_eq(li.master, "br-fabric");
	check_down(&s);
}

Test(sim, sim_fault_cut_restore, .timeout = 60)
{
	sh_require_root();
	struct sh_sim s;
	struct sim_opts o = bare(3, SIM_RING);
	up_timed(&s, "cut", &o);
	char err[512] = "", a[64], b[64];
	snprintf(a, sizeof a, "%s:0", sh_ns(&s, 1));
	char *args[] = {a};
	cr_assert_eq(sim_fault("cut", 1, args, NULL, err, sizeof err), 0, "%s", err);
	/* Both twins, both ends: carrier gone. */
	struct sim_link_info li;
	for (int t = 0; t < 2; t++) {
		cr_assert_eq(sim_link_query(sh_ns(&s, 1), ifn[0][t], &li), 0);
		cr_expect(!li.carrier, "node 1 %s still has carrier", ifn[0][t]);
		cr_assert_eq(sim_link_query(sh_ns(&s, 2), ifn[1][t], &li), 0);
		cr_expect(!li.carrier, "node 2 %s still has carrier", ifn[1][t]);
	}
	static bool want[NE][NE];
	ring_map(3, want);
	for (int t = 0; t < 2; t++)
		want[SH_EP(1, 0, t)][SH_EP(2, 1, t)] = want[SH_EP(2, 1, t)][SH_EP(1, 0, t)] = false;
	expect_map(&s, want);
	json_t *d = sh_describe(&s);
	cr_assert(d);
	cr_expect_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(d, "links"), 0),
							   "state")),
			 "cut");
	json_decref(d);

	cr_assert_eq(sim_fault("restore", 1, args, NULL, err, sizeof err), 0, "%s", err);
	for (int t = 0; t < 2; t++) {
		cr_assert_eq(sim_link_query(sh_ns(&s, 2), ifn[1][t], &li), 0);
		cr_expect(li.admin_up && li.carrier);
	}
	ring_map(3, want);
	expect_map(&s, want);

	/* One twin only, named by netdev, from the far end. */
	snprintf(b, sizeof b, "%s:enP2p1s0f1np1", sh_ns(&s, 2));
	args[0] = b;
	cr_assert_eq(sim_fault("cut", 1, args, NULL, err, sizeof err), 0, "%s", err);
	cr_assert_eq(sim_link_query(sh_ns(&s, 1), "enP2p1s0f0np0", &li), 0);
	cr_expect(!li.carrier);
	cr_assert_eq(sim_link_query(sh_ns(&s, 1), "enp1s0f0np0", &li), 0);
	cr_expect(li.carrier, "the other twin keeps its carrier");
	cr_assert_eq(sim_fault("restore", 1, args, NULL, err, sizeof err), 0, "%s", err);
	cr_assert_eq(sim_link_query(sh_ns(&s, 1), "enP2p1s0f0np0", &li), 0);
	cr_expect(li.carrier);

	/* Bad targets are refused with a reason. */
	snprintf(b, sizeof b, "%s:eth0", sh_ns(&s, 2));
	cr_expect_eq(sim_fault("cut", 1, args, NULL, err, sizeof err), -ENODEV);
	snprintf(b, sizeof b, "%s-9:0", s.prefix);
	cr_expect_eq(sim_fault("cut", 1, args, NULL, err, sizeof err), -EINVAL);
	check_down(&s);
}

/* down/up: one end only (issue 16). The peer stays admin up and loses its
 * carrier; sim.json records the end's admin state. */
Test(sim, sim_fault_down_up_one_end, .timeout = 60)
{
	sh_require_root();
	struct sh_sim s;
	struct sim_opts o = bare(3, SIM_RING);
	up_timed(&s, "dnup", &o);
	char err[512] = "", a[64];
	snprintf(a, sizeof a, "%s:enp1s0f1np1", sh_ns(&s, 2));
	char *args[] = {a};
	cr_assert_eq(sim_fault("down", 1, args, NULL, err, sizeof err), 0, "%s", err);
	struct sim_link_info li;
	cr_assert_eq(sim_link_query(sh_ns(&s, 2), "enp1s0f1np1", &li), 0);
	cr_expect(!li.admin_up && !li.carrier, "node 2's end is admin down");
	cr_assert_eq(sim_link_query(sh_ns(&s, 1), "enp1s0f0np0", &li), 0);
	cr_expect(li.admin_up, "the far end stays admin up");
	cr_expect(!li.carrier, "the far end loses carrier");
	cr_assert_eq(sim_link_query(sh_ns(&s, 1), "enP2p1s0f0np0", &li), 0);
	cr_expect(li.carrier, "the other twin keeps its carrier");
	cr_assert_eq(sim_fault("up", 1, args, NULL, err, sizeof err), 0, "%s", err);
	cr_assert_eq(sim_link_query(sh_ns(&s, 1), "enp1s0f0np0", &li), 0);
	cr_expect(li.admin_up && li.carrier);
	/* a whole port, then restore brings it back too */
	snprintf(a, sizeof a, "%s:1", sh_ns(&s, 2));
	cr_assert_eq(sim_fault("down", 1, args, NULL, err, sizeof err), 0, "%s", err);
	for (int t = 0; t < 2; t++) {
		cr_assert_eq(sim_link_query(sh_ns(&s, 2), ifn[1][t], &li), 0);
		cr_expect(!li.admin_up);
		cr_assert_eq(sim_link_query(sh_ns(&s, 1), ifn[0][t], &li), 0);
		cr_expect(li.admin_up && !li.carrier);
	}
	cr_assert_eq(sim_fault("restore", 1, args, NULL, err, sizeof err), 0, "%s", err);
	cr_assert_eq(sim_link_query(sh_ns(&s, 2), ifn[1][0], &li), 0);
	cr_expect(li.admin_up && li.carrier);
	check_down(&s);
}

Test(sim, sim_fault_swap, .timeout = 60)
{
	sh_require_root();
	struct sh_sim s;
	struct sim_opts o = bare(4, SIM_RING);
	up_timed(&s, "swap", &o);
	char err[512] = "", a[64], b[64];
	snprintf(a, sizeof a, "%s:0", sh_ns(&s, 1));
	snprintf(b, sizeof b, "%s:0", sh_ns(&s, 3));
	char *args[] = {a, b};
	cr_assert_eq(sim_fault("swap", 2, args, NULL, err, sizeof err), 0, "%s", err);
	/* Was 1:0-2:1 and 3:0-4:1; now 1:0-4:1 and 3:0-2:1. */
	static bool want[NE][NE];
	ring_map(4, want);
	for (int t = 0; t < 2; t++) {
		int e10 = SH_EP(1, 0, t), e21 = SH_EP(2, 1, t), e30 = SH_EP(3, 0, t),
		    e41 = SH_EP(4, 1, t);
		want[e10][e21] = want[e21][e10] = want[e30][e41] = want[e41][e30] = false;
		want[e10][e41] = want[e41][e10] = want[e30][e21] = want[e21][e30] = true;
	}
	expect_map(&s, want);
	/* MACs survive the re-cabling (a real port keeps its MAC). */
	struct sim_link_info li;
	cr_assert_eq(sim_link_query(sh_ns(&s, 1), "enp1s0f0np0", &li), 0);
	cr_expect_str_eq(li.mac + 8, ":01:00:00");
	/* Swapping a switch port with an unplugged one moves the cable. */
	check_down(&s);

	struct sim_opts o2 = bare(3, SIM_SWITCH);
	up_timed(&s, "swsw", &o2);
	snprintf(a, sizeof a, "%s:1", sh_ns(&s, 2));
	snprintf(b, sizeof b, "%s:0", sh_ns(&s, 2));
	cr_assert_eq(sim_fault("swap", 2, args, NULL, err, sizeof err), 0, "%s", err);
	cr_assert_eq(sim_link_query(sh_ns(&s, 2), "enp1s0f1np1", &li), 0);
	cr_expect(!li.carrier, "port 1 is now unplugged");
	cr_assert_eq(sim_link_query(sh_ns(&s, 2), "enp1s0f0np0", &li), 0);
	cr_expect(li.carrier, "port 0 is now on the switch");
	memset(want, 0, sizeof want);
	int on[6] = {SH_EP(1, 1, 0), SH_EP(1, 1, 1), SH_EP(2, 0, 0),
		     SH_EP(2, 0, 1), SH_EP(3, 1, 0), SH_EP(3, 1, 1)};
	for (int i = 0; i < 6; i++)
		for (int j = 0; j < 6; j++)
			if (i != j)
				want[on[i]][on[j]] = true;
	expect_map(&s, want);
	check_down(&s);
}

Test(sim, sim_fault_mtu, .timeout = 60)
{
	sh_require_root();
	struct sh_sim s;
	struct sim_opts o = bare(2, SIM_PAIR);
	up_timed(&s, "mtu", &o);
	char err[512] = "", a[64], b[64];
	snprintf(a, sizeof a, "%s:enp1s0f0np0", sh_ns(&s, 1));
	char *args[] = {a, "9000"};
	cr_assert_eq(sim_fault("mtu", 2, args, NULL, err, sizeof err), 0, "%s", err);
	struct sim_link_info li;
	cr_assert_eq(sim_link_query(sh_ns(&s, 1), "enp1s0f0np0", &li), 0);
	cr_expect_eq(li.mtu, 9000);
	cr_assert_eq(sim_link_query(sh_ns(&s, 2), "enp1s0f0np0", &li), 0);
	cr_expect_eq(li.mtu, 1500, "the peer keeps its MTU: a mismatch");
	/* A 4000-byte frame leaves node 1 but the 1500-byte peer drops it. */
	int tx = sh_raw_open(sh_ns(&s, 1), "enp1s0f0np0", SH_ETHERTYPE);
	int rx = sh_raw_open(sh_ns(&s, 2), "enp1s0f0np0", SH_ETHERTYPE);
	cr_assert(tx >= 0 && rx >= 0);
	static char big[4000], got[4000];
	memset(big, 'j', sizeof big);
	/* veth reports the drop to the sender as ENOBUFS. */
	int r = sh_raw_send(tx, big, sizeof big);
	cr_assert(r == 0 || r == -ENOBUFS, "send: %s", strerror(-r));
	cr_expect_eq(sh_raw_recv(rx, got, sizeof got, 200), 0, "jumbo frame crossed a 1500 MTU");
	snprintf(b, sizeof b, "%s:enp1s0f0np0", sh_ns(&s, 2));
	args[0] = b;
	cr_assert_eq(sim_fault("mtu", 2, args, NULL, err, sizeof err), 0, "%s", err);
	cr_assert_eq(sh_raw_send(tx, big, sizeof big), 0);
	cr_expect_eq(sh_raw_recv(rx, got, sizeof got, 1000), (ssize_t)sizeof big);
	close(tx);
	close(rx);
	json_t *d = sh_describe(&s);
	cr_assert(d);
	json_t *l0 = json_array_get(json_object_get(d, "links"), 0);
	cr_expect_eq(json_integer_value(json_object_get(json_object_get(l0, "a"), "mtu")), 9000);
	json_decref(d);
	args[1] = "12";
	cr_expect_eq(sim_fault("mtu", 2, args, NULL, err, sizeof err), -EINVAL);
	check_down(&s);
}

/* One-way latency of a frame from tx to rx, in ms (-1: lost). Median of 5. */
static double one_way_ms(int tx, int rx)
{
	double v[5];
	for (int i = 0; i < 5; i++) {
		char msg[32], buf[64];
		int l = snprintf(msg, sizeof msg, "PING %d", i);
		uint64_t t0 = sh_now_us();
		if (sh_raw_send(tx, msg, (size_t)l + 1) < 0)
			return -1;
		ssize_t n;
		do {
			n = sh_raw_recv(rx, buf, sizeof buf - 1, 2000);
			if (n > 0)
				buf[n] = 0;
		} while (n > 0 && strcmp(buf, msg) != 0);
		if (n <= 0)
			return -1;
		v[i] = (double)(sh_now_us() - t0) / 1000.0;
	}
	for (int i = 0; i < 5; i++)
		for (int j = i + 1; j < 5; j++)
			if (v[j] < v[i]) {
				double x = v[i];
				v[i] = v[j];
				v[j] = x;
			}
	return v[2];
}

Test(sim, sim_fault_delay, .timeout = 60)
{
	sh_require_root();
	struct sh_sim s;
	struct sim_opts o = bare(2, SIM_PAIR);
	up_timed(&s, "delay", &o);
	int tx = sh_raw_open(sh_ns(&s, 1), "enp1s0f0np0", SH_ETHERTYPE);
	int rx = sh_raw_open(sh_ns(&s, 2), "enp1s0f0np0", SH_ETHERTYPE);
	cr_assert(tx >= 0 && rx >= 0);
	double base = one_way_ms(tx, rx);
	cr_expect(base >= 0 && base < 20, "baseline one-way %.2f ms", base);
	char err[512] = "", a[64];
	snprintf(a, sizeof a, "%s:enp1s0f0np0", sh_ns(&s, 1));
	char *args[] = {a, "60"};
	int r = sim_fault("delay", 2, args, NULL, err, sizeof err);
	cr_assert_eq(r, 0, "%s", err);
	double d = one_way_ms(tx, rx);
	cr_log_info("one-way: %.2f ms without delay, %.2f ms with 60 ms", base, d);
	cr_expect(d >= 59 && d < 160, "delayed one-way %.2f ms", d);
	/* The reverse direction is not delayed. */
	double back = one_way_ms(rx, tx);
	cr_expect(back >= 0 && back < 20, "reverse one-way %.2f ms", back);
	args[1] = "0";
	cr_assert_eq(sim_fault("delay", 2, args, NULL, err, sizeof err), 0, "%s", err);
	d = one_way_ms(tx, rx);
	cr_expect(d >= 0 && d < 20, "after delay 0: %.2f ms", d);
	close(tx);
	close(rx);
	check_down(&s);
}

Test(sim, sim_fault_kill_start, .timeout = 60)
{
	sh_require_root();
	const char *sparkd = sh_bin("sparkd");
	if (!sparkd)
		cr_skip_test("sparkd is not built");
	struct sh_sim s;
	struct sim_opts o = {.nodes = 2, .topo = SIM_PAIR, .port = -1, .sparkd = sparkd};
	up_timed(&s, "agents", &o);
	json_t *d = sh_describe(&s);
	cr_assert(d);
	json_t *n2 = json_array_get(json_object_get(d, "nodes"), 1);
	cr_expect_str_eq(json_string_value(json_object_get(n2, "agent_state")), "running");
	pid_t pid = (pid_t)json_integer_value(json_object_get(n2, "agent_pid"));
	cr_expect(pid > 0 && kill(pid, 0) == 0);
	json_decref(d);
	/* sim exec reaches that node's sparkd through SPARKCTL_SOCKET. */
	const char *ctl = sh_bin("sparkctl");
	if (ctl) {
		char *out = NULL;
		char *argv[] = {(char *)ctl, "version", NULL};
		int rc = sh_exec(&s, 2, argv, &out);
		cr_expect_eq(rc, 0, "sparkctl version in node 2: %s", out);
		free(out);
	}
	char err[512] = "", a[64];
	snprintf(a, sizeof a, "%s", sh_ns(&s, 2));
	char *args[] = {a};
	cr_assert_eq(sim_fault("kill", 1, args, NULL, err, sizeof err), 0, "%s", err);
	d = sh_describe(&s);
	n2 = json_array_get(json_object_get(d, "nodes"), 1);
	cr_expect_str_eq(json_string_value(json_object_get(n2, "agent_state")), "stopped");
	cr_expect(json_is_null(json_object_get(n2, "agent_pid")));
	json_decref(d);
	cr_expect(kill(pid, 0) < 0, "sparkd %d still exists", (int)pid);
	cr_assert_eq(sim_fault("start", 1, args, NULL, err, sizeof err), 0, "%s", err);
	d = sh_describe(&s);
	n2 = json_array_get(json_object_get(d, "nodes"), 1);
	cr_expect_str_eq(json_string_value(json_object_get(n2, "agent_state")), "running");
	json_decref(d);
	cr_expect_eq(sim_fault("start", 1, args, NULL, err, sizeof err), -EALREADY);
	check_down(&s);
}

/* Processes whose network namespace is ns. */
static int procs_in_ns(const char *ns)
{
	char p[300];
	snprintf(p, sizeof p, "/run/netns/%s", ns);
	struct stat want;
	if (stat(p, &want) < 0)
		return -1;
	int n = 0;
	DIR *d = opendir("/proc");
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		struct stat st;
		snprintf(p, sizeof p, "/proc/%s/ns/net", e->d_name);
		if (stat(p, &st) == 0 && st.st_ino == want.st_ino && st.st_dev == want.st_dev)
			n++;
	}
	if (d)
		closedir(d);
	return n;
}

/* --bare K: K more nodes wired like the others, with no sparkd until started. */
Test(sim, sim_bare_nodes, .timeout = 60)
{
	sh_require_root();
	const char *sparkd = sh_bin("sparkd");
	if (!sparkd)
		cr_skip_test("sparkd is not built");
	struct sh_sim s;
	struct sim_opts o = {.nodes = 2, .bare = 1, .topo = SIM_RING, .port = -1, .sparkd = sparkd};
	up_timed(&s, "bare", &o);
	cr_assert_eq(s.nodes, 3);
	check_netdevs(&s);
	static bool want[NE][NE];
	ring_map(3, want);
	expect_map(&s, want);
	json_t *d = sh_describe(&s);
	cr_assert(d);
	cr_expect_eq(json_integer_value(json_object_get(d, "size")), 3);
	cr_expect_eq(json_integer_value(json_object_get(d, "bare")), 1);
	for (int k = 1; k <= 3; k++) {
		json_t *n = json_array_get(json_object_get(d, "nodes"), (size_t)k - 1);
		const char *st = json_string_value(json_object_get(n, "agent_state"));
		cr_expect_str_eq(st, k == 3 ? "bare" : "running", "node %d", k);
		cr_expect_eq(json_is_true(json_object_get(n, "bare")), k == 3, "node %d", k);
		if (k == 3)
			cr_expect(json_is_null(json_object_get(n, "agent_pid")));
	}
	json_decref(d);
	/* Nothing runs in the bare node, it has no sim socket, and it reaches
	 * node 1 over the management net, as a fresh machine on the LAN would. */
	cr_expect_eq(procs_in_ns(sh_ns(&s, 3)), 0, "a process runs in the bare node");
	cr_expect_gt(procs_in_ns(sh_ns(&s, 1)), 0, "no sparkd in node 1");
	char *out = NULL;
	int rc = sh_sh(&s, 3, "echo SOCK=${SPARKCTL_SOCKET-unset}", &out);
	cr_expect_eq(rc, 0);
	cr_expect(out && strstr(out, "SOCK=unset"), "a bare node has no sim socket: %s", out);
	free(out);
	int saved;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(7399)};
	inet_pton(AF_INET, "169.254.100.1", &sa.sin_addr);
	cr_assert_eq(sim_enter_ns(sh_ns(&s, 1), &saved), 0);
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_eq(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0, "%s", strerror(errno));
	cr_assert_eq(listen(lfd, 1), 0);
	sim_leave_ns(saved);
	cr_assert_eq(sim_enter_ns(sh_ns(&s, 3), &saved), 0);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_expect_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0,
		     "the bare node cannot reach node 1 over enP7s7: %s", strerror(errno));
	close(fd);
	close(lfd);
	sim_leave_ns(saved);
	const char *ctl = sh_bin("sparkctl");
	if (ctl) {
		char cmd[512];
		snprintf(cmd, sizeof cmd, "%s sim ls --name %s", ctl, s.prefix);
		FILE *p = popen(cmd, "r");
		cr_assert(p);
		char line[256];
		bool seen = false;
		while (fgets(line, sizeof line, p))
			if (strstr(line, sh_ns(&s, 3)) && strstr(line, "bare"))
				seen = true;
		cr_expect_eq(pclose(p), 0);
		cr_expect(seen, "sim ls does not show %s as bare", sh_ns(&s, 3));
	}
	/* sim fault start gives it a sparkd after all. */
	char err[512] = "", a[64];
	snprintf(a, sizeof a, "%s", sh_ns(&s, 3));
	char *args[] = {a};
	cr_assert_eq(sim_fault("start", 1, args, NULL, err, sizeof err), 0, "%s", err);
	d = sh_describe(&s);
	json_t *n3 = json_array_get(json_object_get(d, "nodes"), 2);
	cr_expect_str_eq(json_string_value(json_object_get(n3, "agent_state")), "running");
	cr_expect(json_is_false(json_object_get(n3, "bare")));
	json_decref(d);
	check_down(&s);

	/* Limits: at least one node with an agent, at most 8 in all. */
	char prefix[32];
	sh_unique_prefix(prefix, sizeof prefix, "bad");
	struct sim_opts b = {.prefix = prefix, .nodes = 0, .bare = 2, .port = -1, .no_agents = true};
	cr_expect_eq(sim_up(&b, err, sizeof err), -EINVAL);
	b.nodes = 7;
	cr_expect_eq(sim_up(&b, err, sizeof err), -EINVAL);
	cr_expect(strstr(err, "--bare"), "%s", err);
	cr_expect_str_empty(sh_leftovers(prefix, NULL));
}

Test(sim, sim_two_sims_isolated, .timeout = 60)
{
	sh_require_root();
	struct sh_sim a, b;
	struct sim_opts o = bare(2, SIM_PAIR);
	up_timed(&a, "isoa", &o);
	up_timed(&b, "isob", &o);
	/* Listen on every netdev of b, send on every netdev of a. */
	int fds[10], nf = 0;
	for (int k = 1; k <= 2; k++) {
		for (int p = 0; p < 2; p++)
			for (int t = 0; t < 2; t++)
				fds[nf++] = sh_raw_open(sh_ns(&b, k), ifn[p][t], SH_ETHERTYPE);
		fds[nf++] = sh_raw_open(sh_ns(&b, k), "enP7s7", SH_ETHERTYPE);
	}
	for (int i = 0; i < nf; i++)
		cr_assert(fds[i] >= 0);
	int m1 = sh_raw_open(sh_ns(&a, 1), "enP7s7", SH_ETHERTYPE);
	int m2 = sh_raw_open(sh_ns(&a, 2), "enP7s7", SH_ETHERTYPE);
	cr_assert(m1 >= 0 && m2 >= 0);
	cr_assert_eq(sh_raw_send(m1, "MGMT", 5), 0);
	char buf[64];
	cr_expect_gt(sh_raw_recv(m2, buf, sizeof buf, 1000), 0, "management net of a works");
	cr_expect_str_eq(buf, "MGMT");
	static bool want[NE][NE];
	memset(want, 0, sizeof want);
	for (int t = 0; t < 2; t++)
		want[SH_EP(1, 0, t)][SH_EP(2, 0, t)] = want[SH_EP(2, 0, t)][SH_EP(1, 0, t)] = true;
	expect_map(&a, want);
	for (int i = 0; i < nf; i++) {
		cr_expect_eq(sh_raw_recv(fds[i], buf, sizeof buf, 0), 0, "sim b heard sim a");
		close(fds[i]);
	}
	close(m1);
	close(m2);
	/* Same management addresses in both, no conflict: each has its own bridge. */
	check_down(&a);
	check_down(&b);
}

Test(sim, sim_refusals_and_failed_up, .timeout = 60)
{
	sh_require_root();
	struct sh_sim s;
	struct sim_opts o = bare(2, SIM_RING);
	up_timed(&s, "ref", &o);
	char err[512] = "";
	struct sim_opts dup = o;
	dup.prefix = s.prefix;
	cr_expect_eq(sim_up(&dup, err, sizeof err), -EEXIST);
	cr_expect(strstr(err, "sim down"), "the refusal says what to do: %s", err);
	json_t *d = sh_describe(&s);
	cr_expect(d != NULL, "the existing sim is intact");
	json_decref(d);
	check_down(&s);

	/* Agents that die at start: sim_up fails and leaves nothing. */
	char prefix[32];
	sh_unique_prefix(prefix, sizeof prefix, "fail");
	struct sim_opts f = {.prefix = prefix, .nodes = 3, .topo = SIM_SWITCH, .port = -1,
			     .sparkd = "/bin/false"};
	int r = sim_up(&f, err, sizeof err);
	cr_expect_lt(r, 0);
	cr_log_info("failed up said: %s", err);
	cr_expect(strstr(err, "sparkd"), "%s", err);
	cr_expect(sh_wait_clean(prefix, NULL, 3000), "left behind: %s", sh_leftovers(prefix, NULL));

	f.nodes = 9;
	cr_expect_eq(sim_up(&f, err, sizeof err), -EINVAL);
	f.nodes = 2;
	f.prefix = "Bad_Name";
	cr_expect_eq(sim_up(&f, err, sizeof err), -EINVAL);
}

Test(sim, sim_exec_and_root, .timeout = 60)
{
	sh_require_root();
	char root[] = "/tmp/sparkctl-simtest-XXXXXX";
	cr_assert(mkdtemp(root));
	struct sh_sim s;
	struct sim_opts o = bare(2, SIM_PAIR);
	o.root = root;
	up_timed(&s, "exec", &o);
	char *out = NULL;
	int rc = sh_sh(&s, 2,
		       "ls /sys/class/net | tr '\\n' ' '; echo; echo SOCK=$SPARKCTL_SOCKET; exit 7",
		       &out);
	cr_expect_eq(rc, 7);
	cr_assert(out);
	cr_expect(strstr(out, "enP2p1s0f0np0 enP2p1s0f1np1 enP7s7 enp1s0f0np0 enp1s0f1np1 lo"),
		  "sysfs shows the node's netdevs: %s", out);
	char want[512];
	snprintf(want, sizeof want, "SOCK=%s/%s-2/sparkd.sock", root, s.prefix);
	cr_expect(strstr(out, want), "%s not in %s", want, out);
	free(out);
	char *bad[] = {"/nonexistent/cmd", NULL};
	cr_expect_eq(sh_exec(&s, 1, bad, NULL), 127);
	/* The registration points at the custom root. */
	char reg[256], tgt[256] = "";
	snprintf(reg, sizeof reg, "%s/%s", SIM_RUN_DIR, s.prefix);
	cr_expect_gt(readlink(reg, tgt, sizeof tgt - 1), 0);
	cr_expect_str_eq(tgt, root);
	/* A damaged sim.json does not stop down. */
	char sj[512];
	snprintf(sj, sizeof sj, "%s/sim.json", root);
	FILE *f = fopen(sj, "w");
	cr_assert(f);
	fputs("{\"prefix\":", f);
	fclose(f);
	check_down(&s);
	cr_expect(access(root, F_OK) < 0, "root %s removed", root);
}

/* The harness cleans up when the test process dies without sh_down. */
static void die_after_up(int how, char *prefix_out, size_t len)
{
	int p[2];
	cr_assert_eq(pipe(p), 0);
	fflush(NULL);
	pid_t child = fork();
	cr_assert(child >= 0);
	if (child == 0) {
		close(p[0]);
		struct sh_sim s;
		struct sim_opts o = bare(2, SIM_RING);
		if (sh_up(&s, "die", &o) < 0)
			_exit(3);
		if (write(p[1], s.prefix, strlen(s.prefix) + 1) < 0)
			_exit(4);
		close(p[1]);
		if (how == SIGKILL)
			raise(SIGKILL);
		if (how == 0)
			_exit(1); /* like a failed assertion ending the test */
		pause();      /* SIGTERM from the parent */
		_exit(5);
	}
	close(p[1]);
	ssize_t n = read(p[0], prefix_out, len - 1);
	close(p[0]);
	cr_assert_gt(n, 0, "child did not bring its sim up");
	prefix_out[n] = 0;
	if (how == SIGTERM)
		kill(child, SIGTERM);
	waitpid(child, NULL, 0);
}

Test(sim, sim_harness_cleans_on_death, .timeout = 60)
{
	sh_require_root();
	int hows[] = {SIGTERM, SIGKILL, 0};
	for (int i = 0; i < 3; i++) {
		char prefix[64];
		die_after_up(hows[i], prefix, sizeof prefix);
		cr_expect(sh_wait_clean(prefix, NULL, 5000), "after %s: left behind: %s",
			  hows[i] == SIGTERM ? "SIGTERM" : hows[i] ? "SIGKILL" : "exit",
			  sh_leftovers(prefix, NULL));
	}
}

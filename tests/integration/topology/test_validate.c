/* Topology validation in simulated clusters (issue 5): `sparkctl topo validate`
 * gives the right class and PASS on a pair, 3-, 4- and 8-node rings and 4- and
 * 8-node switches; in a 4-ring a cut cable is a FAIL naming it, one cut twin a
 * WARN (half bandwidth), an MTU mismatch a FAIL naming both ends, a swap that
 * cables port 0 to port 0 a FAIL naming it; addresses apply once and a second
 * run changes nothing. A second cluster on the same switch is ignored and a
 * forged frame (bad HMAC) is dropped and counted: the sim has no command for
 * two clusters on one switch, so that test builds them itself, from one
 * 6-node switch sim: nodes 1-4 form cluster A, nodes 5-6 cluster B.
 * Needs root (skips otherwise); every test has its own sim prefix. */
#include "sim_harness.h"

#include "l2frame.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* sparkctl ARGS (NULL-terminated) in node k; output in *out (caller frees). */
static int ctlv(struct sh_sim *s, int k, char **out, const char *const *args)
{
	const char *argv[16] = {sh_bin("sparkctl")};
	size_t n = 1;
	for (; args[n - 1] && n < 15; n++)
		argv[n] = args[n - 1];
	argv[n] = NULL;
	return sh_exec(s, k, (char *const *)argv, out);
}

#define CTL(s, k, out, ...) ctlv((s), (k), (out), (const char *const[]){__VA_ARGS__, NULL})

/* Parse the JSON part of out (sparkctl may add a line on stderr after it). */
static json_t *parse_out(const char *out)
{
	const char *start = out ? strchr(out, '{') : NULL;
	if (!start)
		return NULL;
	json_error_t e;
	return json_loadb(start, strlen(start), JSON_DISABLE_EOF_CHECK, &e);
}

static int sim_cli(const char *a1, const char *a2, const char *a3, const char *a4)
{
	const char *argv[] = {sh_bin("sparkctl"), "sim", a1, a2, a3, a4, NULL};
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		int dn = open("/dev/null", O_WRONLY);
		if (dn >= 0)
			dup2(dn, 1);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Node `head` inits a cluster; nodes first..last join it. */
static void form(struct sh_sim *s, int head, int first, int last, const char *name)
{
	char *out = NULL;
	cr_assert_eq(CTL(s, head, &out, "init", "--name", name, "-o", "json"), 0, "init: %s", out);
	json_t *init = parse_out(out);
	free(out);
	cr_assert(init, "init gave no JSON");
	char token[256], head_addr[64];
	snprintf(token, sizeof token, "%s", json_string_value(json_object_get(init, "token")));
	json_decref(init);
	snprintf(head_addr, sizeof head_addr, "169.254.100.%d:7300", head);
	for (int k = first; k <= last; k++) {
		if (k == head)
			continue;
		int rc = CTL(s, k, &out, "join", head_addr, "--token", token);
		cr_assert_eq(rc, 0, "join of node %d: %s", k, out);
		free(out);
	}
}

struct vres {
	int rc;
	json_t *v; /* the verdict (NULL if the output was not JSON) */
	char *out;
};

/* topo validate from node k; mode "" (full) or "--quick"; expect may be NULL. */
static struct vres validate(struct sh_sim *s, int k, const char *mode, const char *expect)
{
	struct vres r = {0};
	const char *args[8] = {"topo", "validate", "-o", "json"};
	int n = 4;
	if (mode && *mode)
		args[n++] = mode;
	if (expect) {
		args[n++] = "--expect";
		args[n++] = expect;
	}
	args[n] = NULL;
	r.rc = ctlv(s, k, &r.out, args);
	r.v = parse_out(r.out);
	return r;
}

static void vres_free(struct vres *r)
{
	json_decref(r->v);
	free(r->out);
	memset(r, 0, sizeof *r);
}

static const char *vstr(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "";
}

/* The first finding with this code (borrowed), or NULL. */
static json_t *finding(json_t *v, const char *code)
{
	size_t i;
	json_t *f;
	json_array_foreach(json_object_get(v, "findings"), i, f)
		if (strcmp(vstr(f, "code"), code) == 0)
			return f;
	return NULL;
}

/* Does finding f name (node, port[, netdev]) among its ends? */
static bool names_end(json_t *f, const char *node, const char *port, const char *netdev)
{
	size_t i;
	json_t *e;
	json_array_foreach(json_object_get(f, "ends"), i, e)
		if (strcmp(vstr(e, "node"), node) == 0 && (!port || strcmp(vstr(e, "port"), port) == 0) &&
		    (!netdev || strcmp(vstr(e, "netdev"), netdev) == 0))
			return true;
	return false;
}

/* Validate (quick) from node k until want_result and, if given, the finding
 * code appear, for up to timeout_ms (links come back, neighbour tables settle). */
static struct vres validate_until(struct sh_sim *s, int k, const char *want_result,
				  const char *code, int timeout_ms)
{
	uint64_t t0 = sh_now_us();
	for (;;) {
		struct vres r = validate(s, k, "--quick", NULL);
		if (r.v && strcmp(vstr(r.v, "result"), want_result) == 0 && (!code || finding(r.v, code)))
			return r;
		if (sh_now_us() - t0 > (uint64_t)timeout_ms * 1000) {
			cr_log_info("last verdict: %s", r.out ? r.out : "(none)");
			return r;
		}
		vres_free(&r);
		sleep_ms(300);
	}
}

/* A passing verdict of the expected class: no fail/warn finding, probes over TCP. */
static void expect_pass(struct vres *r, const char *cls, int nodes, const char *what)
{
	cr_assert(r->v, "%s: no JSON: %s", what, r->out);
	cr_expect_eq(r->rc, 0, "%s: exit %d", what, r->rc);
	cr_expect_str_eq(vstr(r->v, "result"), "pass", "%s: %s", what, r->out);
	cr_expect_str_eq(vstr(r->v, "class"), cls, "%s", what);
	cr_expect_eq(json_integer_value(json_object_get(r->v, "nodes")), nodes, "%s", what);
	json_t *ps = json_object_get(r->v, "probe_summary");
	cr_expect_gt(json_integer_value(json_object_get(ps, "count")), 0, "%s: no probes", what);
	cr_expect_str_eq(vstr(ps, "transport"), "tcp", "%s: the sim has no RDMA device", what);
	size_t i;
	json_t *p;
	json_array_foreach(json_object_get(r->v, "probes"), i, p) {
		cr_expect_str_eq(vstr(p, "transport"), "tcp");
		cr_expect_str_eq(vstr(p, "result"), "pass", "%s: probe %zu", what, i);
	}
}

static double run_ms(json_t *v)
{
	return (double)json_integer_value(json_object_get(json_object_get(v, "run"), "duration_ms"));
}

Test(topo, topo_pair, .timeout = 120)
{
	struct sh_sim s;
	sh_agents_up(&s, "vpair", 2, SIM_PAIR);
	form(&s, 1, 1, 2, "vpair");
	struct vres r = validate(&s, 2, "", "pair"); /* full, from the worker */
	expect_pass(&r, "pair", 2, "pair");
	cr_expect_eq(json_array_size(json_object_get(r.v, "probes")), 2, "one cable, two twins");
	cr_expect_eq(json_array_size(json_object_get(r.v, "ring_order")), 2);
	vres_free(&r);
	/* status carries the stored run: JSON and the table line. */
	char *out = NULL;
	cr_assert_eq(CTL(&s, 1, &out, "status", "-o", "json"), 0);
	json_t *st = parse_out(out);
	free(out);
	json_t *topo = json_object_get(st, "topology");
	cr_expect_str_eq(vstr(topo, "summary"), "pair(2) PASS");
	cr_expect_str_eq(vstr(topo, "class"), "pair");
	cr_expect(json_is_integer(json_object_get(topo, "age_s")));
	json_decref(st);
	cr_assert_eq(CTL(&s, 2, &out, "status"), 0);
	cr_expect(strstr(out, "Topology: pair(2) PASS"), "%s", out);
	free(out);

	/* Node 2's management netdev gets an address in a subnet the plan gave a
	 * cable: after the next validation the plan keeps clear of it. */
	cr_assert_eq(CTL(&s, 1, &out, "topo", "addresses", "-o", "json"), 0, "%s", out);
	json_t *ad = parse_out(out);
	free(out);
	char sub[40], cmd[128];
	snprintf(sub, sizeof sub, "%s",
		 vstr(json_array_get(json_object_get(json_object_get(ad, "plan"), "subnets"), 0), "subnet"));
	json_decref(ad);
	cr_assert(strncmp(sub, "169.254.", 8) == 0, "%s", sub);
	snprintf(cmd, sizeof cmd, "ip addr add %.*s77/24 dev enP7s7", (int)(strrchr(sub, '.') - sub + 1), sub);
	char *const sh[] = {"/bin/sh", "-c", cmd, NULL};
	cr_assert_eq(sh_exec(&s, 2, sh, &out), 0, "%s: %s", cmd, out);
	free(out);
	r = validate(&s, 1, "--quick", "pair");
	expect_pass(&r, "pair", 2, "pair with a management address in a fabric subnet");
	vres_free(&r);
	cr_assert_eq(CTL(&s, 1, &out, "topo", "addresses", "-o", "json"), 0, "%s", out);
	ad = parse_out(out);
	free(out);
	size_t i;
	json_t *e, *plan = json_object_get(ad, "plan");
	json_array_foreach(json_object_get(plan, "subnets"), i, e)
		cr_expect_str_neq(vstr(e, "subnet"), sub, "the plan still uses %s", sub);
	bool kept = false;
	json_array_foreach(json_object_get(plan, "avoided"), i, e)
		kept |= vstr(e, "blocked") && strcmp(vstr(e, "blocked"), sub) == 0 &&
			strcmp(vstr(e, "node"), sh_ns(&s, 2)) == 0 && strcmp(vstr(e, "netdev"), "enP7s7") == 0;
	cr_expect(kept, "%s not listed in the plan's \"avoided\"", sub);
	json_decref(ad);
	cr_assert_eq(CTL(&s, 1, &out, "topo", "addresses"), 0, "%s", out);
	char line[96];
	snprintf(line, sizeof line, "Kept clear of %s: ", sub);
	cr_expect(strstr(out, line), "%s", out);
	free(out);
	sh_down(&s);
}

Test(topo, topo_ring3, .timeout = 120)
{
	struct sh_sim s;
	sh_agents_up(&s, "vring3", 3, SIM_RING);
	form(&s, 1, 1, 3, "vring3");
	struct vres r = validate(&s, 3, "", "ring"); /* full */
	expect_pass(&r, "ring", 3, "3-ring");
	cr_expect_eq(json_array_size(json_object_get(r.v, "ring_order")), 3);
	cr_expect_eq(json_array_size(json_object_get(r.v, "cables")), 3);
	cr_expect_eq(json_array_size(json_object_get(r.v, "probes")), 6);
	vres_free(&r);
	sh_down(&s);
}

Test(topo, topo_ring4_faults, .timeout = 240)
{
	struct sh_sim s;
	sh_agents_up(&s, "vring4", 4, SIM_RING);
	form(&s, 1, 1, 4, "vring4");
	char n[5][48];
	for (int k = 1; k <= 4; k++)
		snprintf(n[k], sizeof n[k], "%s", sh_ns(&s, k));
	struct vres r = validate(&s, 2, "", NULL); /* full */
	expect_pass(&r, "ring", 4, "4-ring");
	cr_log_info("4-ring full validation: %.0f ms", run_ms(r.v));
	vres_free(&r);

	/* --expect switch on a ring: FAIL expect_mismatch, exit 1. */
	r = validate(&s, 1, "--quick", "switch");
	cr_expect_eq(r.rc, 1);
	cr_expect(finding(r.v, "expect_mismatch"), "%s", r.out);
	vres_free(&r);

	/* The table output: the cable map, the picture, the verdict. */
	char *out = NULL;
	cr_expect_eq(CTL(&s, 3, &out, "topo", "validate", "--quick"), 0, "%s", out);
	cr_expect(strstr(out, "Topology: ring, 4 nodes: PASS") && strstr(out, "(closes the ring)") &&
			  strstr(out, "No findings."),
		  "%s", out);
	free(out);
	cr_expect_eq(CTL(&s, 4, &out, "topo", "show"), 0, "%s", out);
	cr_expect(strstr(out, "Ring of 4"), "%s", out);
	free(out);

	/* Addresses: applied once, a second run changes nothing. */
	cr_assert_eq(CTL(&s, 2, &out, "topo", "addresses", "--apply", "-o", "json"), 0, "%s", out);
	json_t *ad = parse_out(out);
	free(out);
	size_t i;
	json_t *rep;
	int changed = 0;
	json_array_foreach(json_object_get(ad, "reports"), i, rep)
		changed += json_is_true(json_object_get(json_object_get(rep, "report"), "changed"));
	cr_expect_eq(changed, 4, "every node got its addresses");
	json_decref(ad);
	cr_assert_eq(CTL(&s, 2, &out, "topo", "addresses", "--apply", "-o", "json"), 0, "%s", out);
	ad = parse_out(out);
	free(out);
	changed = 0;
	json_array_foreach(json_object_get(ad, "reports"), i, rep)
		changed += !json_is_false(json_object_get(json_object_get(rep, "report"), "changed"));
	cr_expect_eq(changed, 0, "the second apply changed something");
	json_decref(ad);

	/* A cut cable (node 2 port 0 - node 3 port 1): FAIL naming it. */
	char tgt[64];
	snprintf(tgt, sizeof tgt, "%s:0", n[2]);
	cr_assert_eq(sim_cli("fault", "cut", tgt, NULL), 0);
	r = validate_until(&s, 1, "fail", "missing_cable", 10000);
	json_t *f = finding(r.v, "missing_cable");
	cr_assert(f, "no missing_cable after the cut: %s", r.out);
	cr_expect_eq(r.rc, 1);
	cr_expect(names_end(f, n[2], "0", NULL) && names_end(f, n[3], "1", NULL), "ends: %s", r.out);
	char fix[160];
	snprintf(fix, sizeof fix, "connect %s port 0 to %s port 1", n[2], n[3]);
	cr_expect_str_eq(vstr(f, "fix"), fix);
	vres_free(&r);
	cr_assert_eq(sim_cli("fault", "restore", tgt, NULL), 0);
	r = validate_until(&s, 1, "pass", NULL, 10000);
	cr_expect_str_eq(vstr(r.v, "result"), "pass", "after restore: %s", r.out);
	vres_free(&r);

	/* One twin cut (node 3 enP2p1s0f0np0): WARN, half bandwidth on that cable. */
	snprintf(tgt, sizeof tgt, "%s:enP2p1s0f0np0", n[3]);
	cr_assert_eq(sim_cli("fault", "cut", tgt, NULL), 0);
	r = validate_until(&s, 1, "warn", "twin_silent", 10000);
	f = finding(r.v, "twin_silent");
	cr_assert(f, "no twin_silent: %s", r.out);
	cr_expect_str_eq(vstr(f, "severity"), "warn");
	cr_expect_eq(r.rc, 1, "exit 0 only on pass");
	cr_expect(strstr(vstr(f, "message"), "half bandwidth"), "%s", vstr(f, "message"));
	cr_expect(names_end(f, n[3], "0", "enP2p1s0f0np0"), "%s", r.out);
	vres_free(&r);
	cr_assert_eq(sim_cli("fault", "restore", tgt, NULL), 0);
	r = validate_until(&s, 1, "pass", NULL, 10000);
	cr_expect_str_eq(vstr(r.v, "result"), "pass", "after restore: %s", r.out);
	vres_free(&r);

	/* MTU 9000 on node 4's end of the node 3 - node 4 cable: FAIL naming both ends. */
	snprintf(tgt, sizeof tgt, "%s:enp1s0f1np1", n[4]);
	cr_assert_eq(sim_cli("fault", "mtu", tgt, "9000"), 0);
	r = validate_until(&s, 1, "fail", "mtu_mismatch", 10000);
	f = finding(r.v, "mtu_mismatch");
	cr_assert(f, "no mtu_mismatch: %s", r.out);
	cr_expect(names_end(f, n[3], "0", "enp1s0f0np0") && names_end(f, n[4], "1", "enp1s0f1np1"),
		  "%s", r.out);
	cr_expect(strstr(vstr(f, "message"), n[3]) && strstr(vstr(f, "message"), n[4]), "%s",
		  vstr(f, "message"));
	vres_free(&r);
	cr_assert_eq(sim_cli("fault", "mtu", tgt, "1500"), 0);
	r = validate_until(&s, 1, "pass", NULL, 10000);
	cr_expect_str_eq(vstr(r.v, "result"), "pass", "after the MTU is back: %s", r.out);
	vres_free(&r);

	/* Swap node 2's cables: port 0 now meets node 1's port 0 (and port 1 node 3's
	 * port 1): FAIL same_port_cable naming them and the swap to make. */
	char p0[64], p1[64];
	snprintf(p0, sizeof p0, "%s:0", n[2]);
	snprintf(p1, sizeof p1, "%s:1", n[2]);
	cr_assert_eq(sim_cli("fault", "swap", p0, p1), 0);
	r = validate_until(&s, 1, "fail", "same_port_cable", 15000);
	f = finding(r.v, "same_port_cable");
	cr_assert(f, "no same_port_cable after the swap: %s", r.out);
	cr_expect(names_end(f, n[1], "0", NULL) && names_end(f, n[2], "0", NULL), "%s", r.out);
	snprintf(fix, sizeof fix, "on %s swap the cables of port 0 and port 1", n[2]);
	cr_expect_str_eq(vstr(f, "fix"), fix);
	vres_free(&r);
	sh_down(&s);
}

Test(topo, topo_ring8, .timeout = 180)
{
	struct sh_sim s;
	sh_agents_up(&s, "vring8", 8, SIM_RING);
	form(&s, 1, 1, 8, "vring8");
	struct vres r = validate(&s, 5, "--quick", NULL);
	vres_free(&r);
	r = validate(&s, 5, "", "ring");
	expect_pass(&r, "ring", 8, "8-ring full");
	cr_expect_eq(json_array_size(json_object_get(r.v, "probes")), 16);
	cr_log_info("8-ring full validation: %.0f ms", run_ms(r.v));
	fprintf(stderr, "topo_validate ring8_full_ms=%.0f\n", run_ms(r.v));
	vres_free(&r);
	r = validate(&s, 1, "--quick", NULL);
	expect_pass(&r, "ring", 8, "8-ring quick");
	fprintf(stderr, "topo_validate ring8_quick_ms=%.0f\n", run_ms(r.v));
	vres_free(&r);
	sh_down(&s);
}

/* A frame of cluster cid from node k's netdev, keyed with the wrong secret. */
static void forge(struct sh_sim *s, int k, const char *netdev, const char *cid)
{
	struct sim_link_info li;
	cr_assert_eq(sim_link_query(sh_ns(s, k), netdev, &li), 0);
	struct topo_l2frame f;
	memset(&f, 0, sizeof f);
	unsigned m[6];
	cr_assert_eq(sscanf(li.mac, "%x:%x:%x:%x:%x:%x", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5]), 6);
	for (int i = 0; i < 6; i++)
		f.src_mac[i] = (uint8_t)m[i];
	f.seq = 1;
	snprintf(f.cluster_id, sizeof f.cluster_id, "%s", cid);
	snprintf(f.node_id, sizeof f.node_id, "mallory");
	snprintf(f.node_name, sizeof f.node_name, "mallory");
	snprintf(f.port, sizeof f.port, "1");
	snprintf(f.netdev, sizeof f.netdev, "%s", netdev);
	f.mtu = 1500;
	struct topo_l2key key;
	cr_assert_eq(topo_l2key_init(&key, "not-the-cluster-secret"), 0);
	uint8_t buf[TOPO_L2_MAX_FRAME];
	size_t len = 0;
	cr_assert_eq(topo_l2frame_encode(&f, &key, buf, sizeof buf, &len), 0);
	int fd = sh_raw_open(sh_ns(s, k), netdev, TOPO_L2_ETHERTYPE);
	cr_assert_geq(fd, 0, "raw socket on %s", netdev);
	for (int i = 0; i < 3; i++)
		cr_expect_eq(sh_raw_send(fd, buf + TOPO_L2_ETH_HLEN, len - TOPO_L2_ETH_HLEN), 0);
	close(fd);
}

Test(topo, topo_switch4_second_cluster_forged_frame, .timeout = 180)
{
	struct sh_sim s;
	sh_agents_up(&s, "vsw2c", 6, SIM_SWITCH);
	form(&s, 1, 1, 4, "clusa");
	form(&s, 5, 5, 6, "clusb");
	struct vres r = validate(&s, 3, "", "switch"); /* full */
	expect_pass(&r, "switch", 4, "4-switch beside another cluster");
	cr_expect(json_is_true(json_object_get(r.v, "any_to_any")));
	/* Cluster B's nodes are not in A's map: it heard them and ignored them. */
	json_t *dom = json_array_get(json_object_get(r.v, "l2_domains"), 0);
	cr_expect_eq(json_array_size(json_object_get(dom, "nodes")), 4, "%s", r.out);
	cr_expect(!strstr(r.out, sh_ns(&s, 5)) && !strstr(r.out, sh_ns(&s, 6)),
		  "cluster B's nodes appear in cluster A's verdict");
	json_t *oc = finding(r.v, "other_cluster_frames");
	cr_expect(oc, "no other_cluster_frames note");
	cr_expect_str_eq(vstr(oc, "severity"), "info");
	/* every probe pair: 4 nodes -> 6 pairs per rail */
	cr_expect_eq(json_array_size(json_object_get(r.v, "probes")), 12);
	vres_free(&r);
	/* Cluster B validates as its own pair of switch ports, ignoring A. */
	r = validate(&s, 6, "--quick", NULL);
	cr_expect_str_eq(vstr(r.v, "result"), "pass", "cluster B: %s", r.out);
	cr_expect_eq(json_integer_value(json_object_get(r.v, "nodes")), 2);
	vres_free(&r);

	/* A forged frame: A's cluster id, a wrong key, sent on node 2's switch port. */
	char *out = NULL;
	cr_assert_eq(CTL(&s, 1, &out, "status", "-o", "json"), 0);
	json_t *st = parse_out(out);
	free(out);
	char cid[80];
	snprintf(cid, sizeof cid, "%s", vstr(json_object_get(st, "cluster"), "id"));
	json_decref(st);
	forge(&s, 2, "enp1s0f1np1", cid);
	r = validate(&s, 1, "--quick", NULL);
	cr_assert(r.v, "%s", r.out);
	cr_expect_str_eq(vstr(r.v, "result"), "pass", "a forged frame changes nothing: %s", r.out);
	json_t *bh = finding(r.v, "bad_hmac_frames");
	cr_expect(bh, "no bad_hmac_frames finding: %s", r.out);
	cr_expect_str_eq(vstr(bh, "severity"), "info");
	json_int_t dropped = 0;
	const char *key;
	json_t *fr;
	json_object_foreach(json_object_get(r.v, "frames"), key, fr)
		dropped += json_integer_value(
			json_object_get(json_object_get(fr, "dropped"), "bad_hmac"));
	cr_expect_geq(dropped, 3, "3 forged frames to 3 nodes: %lld counted", (long long)dropped);
	json_int_t on_head = json_integer_value(json_object_get(
		json_object_get(json_object_get(json_object_get(r.v, "frames"), sh_ns(&s, 1)),
				"dropped"),
		"bad_hmac"));
	cr_expect_geq(on_head, 1, "the head dropped and counted none");
	vres_free(&r);
	sh_down(&s);
}

Test(topo, topo_switch8, .timeout = 180)
{
	struct sh_sim s;
	sh_agents_up(&s, "vsw8", 8, SIM_SWITCH);
	form(&s, 1, 1, 8, "vsw8");
	struct vres r = validate(&s, 1, "--quick", NULL);
	vres_free(&r);
	r = validate(&s, 8, "", "switch");
	expect_pass(&r, "switch", 8, "8-switch full");
	cr_expect_eq(json_array_size(json_object_get(r.v, "probes")), 56, "28 pairs x 2 rails");
	fprintf(stderr, "topo_validate switch8_full_ms=%.0f\n", run_ms(r.v));
	vres_free(&r);
	r = validate(&s, 4, "--quick", NULL);
	expect_pass(&r, "switch", 8, "8-switch quick");
	cr_expect_eq(json_array_size(json_object_get(r.v, "probes")), 16, "each node with the next, 2 rails");
	fprintf(stderr, "topo_validate switch8_quick_ms=%.0f\n", run_ms(r.v));
	vres_free(&r);

	/* Addresses applied: node 1 then reaches each of node 2's twins at that
	 * twin's own MAC (both twins hear every ARP broadcast on the switch;
	 * without the ARP settings one twin answered for both). */
	char *out = NULL;
	cr_assert_eq(CTL(&s, 1, &out, "topo", "addresses", "--apply", "-o", "json"), 0, "%s", out);
	json_t *ad = parse_out(out);
	cr_assert(ad, "%s", out);
	free(out);
	json_t *mine = json_object_get(json_object_get(json_object_get(ad, "plan"), "nodes"),
				       sh_ns(&s, 2));
	cr_assert_eq(json_array_size(mine), 2, "node 2's twins in the plan");
	for (size_t t = 0; t < 2; t++) {
		json_t *e = json_array_get(mine, t);
		char addr[48], cmd[256];
		snprintf(addr, sizeof addr, "%s", vstr(e, "address"));
		*strchr(addr, '/') = '\0';
		snprintf(cmd, sizeof cmd, "cat /sys/class/net/%s/address", vstr(e, "netdev"));
		char *const mac_sh[] = {"/bin/sh", "-c", cmd, NULL};
		char *mac = NULL, *seen = NULL;
		cr_assert_eq(sh_exec(&s, 2, mac_sh, &mac), 0, "%s", mac);
		mac[strcspn(mac, "\n")] = '\0';
		snprintf(cmd, sizeof cmd,
			 "ping -c 1 -W 2 %s >/dev/null && ip neigh show %s | awk '{print $5}'", addr,
			 addr);
		char *const arp_sh[] = {"/bin/sh", "-c", cmd, NULL};
		cr_assert_eq(sh_exec(&s, 1, arp_sh, &seen), 0, "%s", seen);
		seen[strcspn(seen, "\n")] = '\0';
		cr_expect_str_eq(seen, mac, "node 1 reaches %s (node 2's %s) at %s, not at its MAC %s",
				 addr, vstr(e, "netdev"), seen, mac);
		free(mac);
		free(seen);
	}
	json_decref(ad);
	sh_down(&s);
}

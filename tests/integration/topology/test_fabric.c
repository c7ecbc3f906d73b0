/* Fabric discovery in a simulated cluster (issue 4): every sparkd discovers
 * its four twins as two ports (the sim gives it a fabric.ports config), the
 * head stores the reports, `sim fault cut` shows on the head within 2 s and
 * `restore` brings it back, status carries a summary, and a restarted head
 * still has the reports. Needs root (skips otherwise); every test has its own
 * sim prefix. */
#include "sim_harness.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define LATENCY_LIMIT_US 2000000 /* the bound: the head shows it within 2 s */

/* `sparkctl sim ARGS` from the host, as a user would type it. */
static int sim_cli(const char *a1, const char *a2, const char *a3, const char *a4)
{
	const char *argv[] = {sh_bin("sparkctl"), "sim", a1, a2, a3, a4, NULL};
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static json_t *node_show(struct sh_sim *s, int k)
{
	return sh_ctl_json(s, 1, "node", "show", sh_ns(s, k), NULL);
}

/* The stored twin of node k (as the head has it), borrowed from show. */
static json_t *twin_of(json_t *show, int port, int twin)
{
	json_t *ports = json_object_get(json_object_get(json_object_get(show, "fabric_report"),
							"discovery"),
					"ports");
	char pname[4];
	snprintf(pname, sizeof pname, "%d", port);
	size_t i;
	json_t *p;
	json_array_foreach(ports, i, p)
		if (strcmp(json_string_value(json_object_get(p, "name")) ?: "", pname) == 0)
			return json_array_get(json_object_get(p, "twins"), (size_t)twin);
	return NULL;
}

/* Poll node show of node k on the head until both twins of port show carrier
 * == want; returns the time it took in microseconds, or -1 after timeout_ms. */
static int64_t wait_port(struct sh_sim *s, int k, int port, bool want, uint64_t t0,
			 int timeout_ms)
{
	for (;;) {
		json_t *show = node_show(s, k);
		int ok = 0;
		for (int t = 0; t < 2; t++)
			ok += json_is_boolean(json_object_get(twin_of(show, port, t), "carrier")) &&
			      json_is_true(json_object_get(twin_of(show, port, t), "carrier")) == want;
		json_decref(show);
		uint64_t dt = sh_now_us() - t0;
		if (ok == 2)
			return (int64_t)dt;
		if (dt > (uint64_t)timeout_ms * 1000)
			return -1;
		sh_sleep_ms(25);
	}
}

static int count_events(json_t *show, const char *detail)
{
	int n = 0;
	size_t i;
	json_t *e;
	json_array_foreach(json_object_get(show, "events"), i, e)
		n += strcmp(json_string_value(json_object_get(e, "kind")) ?: "", "fabric") == 0 &&
		     strcmp(json_string_value(json_object_get(e, "detail")) ?: "", detail) == 0;
	return n;
}

static bool has_finding(json_t *show, const char *code, const char *netdev)
{
	size_t i;
	json_t *f;
	json_array_foreach(json_object_get(json_object_get(show, "fabric_report"), "findings"), i, f)
		if (strcmp(json_string_value(json_object_get(f, "code")) ?: "", code) == 0 &&
		    (!netdev ||
		     strcmp(json_string_value(json_object_get(f, "netdev")) ?: "", netdev) == 0))
			return true;
	return false;
}

Test(topology, fabric_ring4_twins_cut_restore, .timeout = 150)
{
	struct sh_sim s;
	sh_cluster_up(&s, "fring", 4, SIM_RING, "fab");
	sh_wait_reports(&s, 4, false);

	/* node show (JSON): four twins grouped into two ports, by the fabric.ports map. */
	json_t *show = node_show(&s, 3);
	cr_assert(show);
	json_t *disc = json_object_get(json_object_get(show, "fabric_report"), "discovery");
	cr_assert(json_is_object(disc), "node show has no fabric_report.discovery");
	cr_expect_str_eq(json_string_value(json_object_get(json_object_get(disc, "selection"), "by")),
			 "ports");
	json_t *ports = json_object_get(disc, "ports");
	cr_assert_eq(json_array_size(ports), 2);
	for (int p = 0; p < 2; p++) {
		json_t *tw = json_object_get(json_array_get(ports, (size_t)p), "twins");
		cr_assert_eq(json_array_size(tw), 2);
		for (int t = 0; t < 2; t++) {
			json_t *x = json_array_get(tw, (size_t)t);
			cr_expect_str_eq(json_string_value(json_object_get(x, "netdev")), sh_twin_name[p][t]);
			cr_expect(json_is_true(json_object_get(x, "present")));
			cr_expect(json_is_true(json_object_get(x, "carrier")), "ring: %s is cabled",
				  sh_twin_name[p][t]);
			cr_expect_eq(json_integer_value(json_object_get(x, "mtu")), 1500);
		}
	}
	cr_expect(json_is_array(json_object_get(json_object_get(show, "fabric_report"), "findings")));
	/* The summary in show and status. */
	json_t *f = json_object_get(show, "fabric");
	cr_expect_eq(json_integer_value(json_object_get(f, "ports_up")), 2);
	cr_expect_eq(json_integer_value(json_object_get(f, "ports_total")), 2);
	cr_expect_eq(json_integer_value(json_object_get(f, "twins_up")), 4);
	cr_expect_eq(json_integer_value(json_object_get(f, "mtu")), 1500);
	cr_expect_eq(json_integer_value(json_object_get(f, "speed_mbps")), 10000, "veth speed");
	cr_expect(json_is_integer(json_object_get(f, "findings")));
	json_decref(show);

	/* The table output of node show, from another node (forwarded to the head). */
	char *out = NULL;
	cr_assert_eq(sh_ctl(&s, 2, &out, "node", "show", sh_ns(&s, 3), NULL), 0, "%s", out);
	cr_expect(strstr(out, "Fabric:      2/2 up 10G mtu1500"), "%s", out);
	const char *p0 = strstr(out, "\n0      enp1s0f0np0 "), *t1 = strstr(out, "\n       enP2p1s0f0np0 ");
	const char *p1 = strstr(out, "\n1      enp1s0f1np1 "), *t3 = strstr(out, "\n       enP2p1s0f1np1 ");
	cr_expect(p0 && t1 && p1 && t3 && p0 < t1 && t1 < p1 && p1 < t3, "twins not grouped:\n%s", out);
	free(out);

	/* status -o json: a summary per node; the table has FABRIC and FINDINGS. */
	json_t *st = sh_ctl_json(&s, 4, "status", NULL);
	cr_assert(st);
	size_t i;
	json_t *n;
	json_array_foreach(json_object_get(st, "nodes"), i, n) {
		json_t *fs = json_object_get(n, "fabric");
		cr_expect(json_is_object(fs), "node %zu has no fabric summary", i);
		cr_expect_eq(json_integer_value(json_object_get(fs, "ports_total")), 2);
		cr_expect_eq(json_integer_value(json_object_get(fs, "ports_up")), 2);
		cr_expect(json_is_integer(json_object_get(fs, "updated_at")));
	}
	json_decref(st);
	cr_assert_eq(sh_ctl(&s, 1, &out, "status", NULL), 0);
	cr_expect(strstr(out, "FABRIC") && strstr(out, "FINDINGS") && strstr(out, "2/2 up 10G mtu1500"),
		  "%s", out);
	free(out);

	/* Cut node 2's port 0 (to node 3's port 1): the head shows it within 2 s. */
	char tgt[64];
	snprintf(tgt, sizeof tgt, "%s:0", sh_ns(&s, 2));
	uint64_t t0 = sh_now_us();
	cr_assert_eq(sim_cli("fault", "cut", tgt, NULL), 0);
	int64_t down_us = wait_port(&s, 2, 0, false, t0, 5000);
	cr_assert(down_us >= 0, "the head never showed %s port 0 down", sh_ns(&s, 2));
	cr_log_info("fabric: cut -> head shows port down in %.0f ms", (double)down_us / 1000.0);
	fprintf(stderr, "fabric_latency cut_to_head_ms=%.0f\n", (double)down_us / 1000.0);
	cr_expect_lt(down_us, LATENCY_LIMIT_US, "took %.0f ms", (double)down_us / 1000.0);
	cr_expect_geq(wait_port(&s, 3, 1, false, t0, 3000), 0, "the far end (node 3 port 1)");
	show = node_show(&s, 2);
	cr_expect_eq(json_integer_value(json_object_get(json_object_get(show, "fabric"), "ports_up")), 1);
	cr_expect_eq(count_events(show, "port 0 enp1s0f0np0 carrier down"), 1);
	cr_expect_eq(count_events(show, "port 0 enP2p1s0f0np0 carrier down"), 1);
	json_decref(show);

	t0 = sh_now_us();
	cr_assert_eq(sim_cli("fault", "restore", tgt, NULL), 0);
	int64_t up_us = wait_port(&s, 2, 0, true, t0, 5000);
	cr_assert(up_us >= 0, "the head never showed %s port 0 up again", sh_ns(&s, 2));
	fprintf(stderr, "fabric_latency restore_to_head_ms=%.0f\n", (double)up_us / 1000.0);
	cr_expect_lt(up_us, LATENCY_LIMIT_US, "took %.0f ms", (double)up_us / 1000.0);
	show = node_show(&s, 2);
	cr_expect_eq(count_events(show, "port 0 enp1s0f0np0 carrier up"), 1);
	json_decref(show);

	/* One twin cut: its sibling stays up, and the head finds twin_down. */
	snprintf(tgt, sizeof tgt, "%s:enP2p1s0f1np1", sh_ns(&s, 4));
	t0 = sh_now_us();
	cr_assert_eq(sim_cli("fault", "cut", tgt, NULL), 0);
	bool found = false;
	while (!found && sh_now_us() - t0 < 3000000) {
		show = node_show(&s, 4);
		found = has_finding(show, "twin_down", "enP2p1s0f1np1");
		json_decref(show);
		if (!found)
			sh_sleep_ms(50);
	}
	cr_expect(found, "no twin_down finding for %s", tgt);
	cr_assert_eq(sim_cli("fault", "restore", tgt, NULL), 0);
	sh_down(&s);
}

Test(topology, fabric_pair_head_restart_and_mtu, .timeout = 150)
{
	struct sh_sim s;
	sh_cluster_up(&s, "fpair", 2, SIM_PAIR, "fab");
	sh_wait_reports(&s, 2, false);

	/* MTU 9000 on one twin of node 2: the head (cluster MTU 1500 from the sim's
	 * fabric.mtu) finds both mismatches and logs the change. */
	char tgt[64];
	snprintf(tgt, sizeof tgt, "%s:enP2p1s0f0np0", sh_ns(&s, 2));
	cr_assert_eq(sim_cli("fault", "mtu", tgt, "9000"), 0);
	json_t *show = NULL;
	bool found = false;
	uint64_t t0 = sh_now_us();
	while (!found && sh_now_us() - t0 < 3000000) {
		json_decref(show);
		show = node_show(&s, 2);
		found = has_finding(show, "mtu_twin_mismatch", NULL) &&
			has_finding(show, "mtu_cluster_mismatch", "enP2p1s0f0np0");
		if (!found)
			sh_sleep_ms(50);
	}
	cr_expect(found, "no MTU findings on the head");
	cr_expect_eq(count_events(show, "port 0 enP2p1s0f0np0 mtu 1500 -> 9000"), 1);
	json_t *f = json_object_get(show, "fabric");
	cr_expect_eq(json_integer_value(json_object_get(f, "mtu")), 1500);
	cr_expect_eq(json_integer_value(json_object_get(f, "mtu_max")), 9000);
	cr_expect_geq(json_integer_value(json_object_get(f, "findings")), 2);
	json_int_t updated = json_integer_value(json_object_get(f, "updated_at"));
	json_decref(show);

	/* Stop the worker, restart the head: the report comes from cluster.db. */
	char node[64];
	snprintf(node, sizeof node, "%s", sh_ns(&s, 2));
	cr_assert_eq(sim_cli("fault", "kill", node, NULL), 0);
	snprintf(node, sizeof node, "%s", sh_ns(&s, 1));
	cr_assert_eq(sim_cli("fault", "kill", node, NULL), 0);
	cr_assert_eq(sim_cli("fault", "start", node, NULL), 0);
	show = node_show(&s, 2);
	cr_assert(show, "node show after the head restart");
	f = json_object_get(show, "fabric");
	cr_expect(json_is_object(f), "the restarted head lost the report");
	cr_expect_eq(json_integer_value(json_object_get(f, "updated_at")), updated);
	cr_expect_eq(json_integer_value(json_object_get(f, "ports_total")), 2);
	cr_expect(has_finding(show, "mtu_twin_mismatch", NULL));
	cr_expect_eq(count_events(show, "port 0 enP2p1s0f0np0 mtu 1500 -> 9000"), 1);
	json_decref(show);
	/* And the head's own report, refreshed at its start. */
	json_t *st = sh_ctl_json(&s, 1, "status", NULL);
	cr_assert(st);
	json_t *h = json_array_get(json_object_get(st, "nodes"), 0);
	cr_expect_str_eq(json_string_value(json_object_get(h, "role")), "head");
	cr_expect_eq(json_integer_value(json_object_get(json_object_get(h, "fabric"), "ports_up")), 1,
		     "pair: port 0 cabled, port 1 not");
	json_decref(st);

	/* The worker comes back and reports again (updated_at is in seconds). */
	sh_sleep_ms(1100);
	snprintf(node, sizeof node, "%s", sh_ns(&s, 2));
	cr_assert_eq(sim_cli("fault", "start", node, NULL), 0);
	json_int_t now_upd = updated;
	for (int tries = 0; tries < 100 && now_upd == updated; tries++) {
		sh_sleep_ms(100);
		show = node_show(&s, 2);
		now_upd = json_integer_value(json_object_get(json_object_get(show, "fabric"), "updated_at"));
		json_decref(show);
	}
	cr_expect_neq(now_upd, updated, "the restarted worker sent no new report");
	sh_down(&s);
}

/* The group planner (topology/partition.c) on synthetic ring and switch maps. */
#include "partition.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define N8 {{"s1", NULL}, {"s2", NULL}, {"s3", NULL}, {"s4", NULL}, \
	    {"s5", NULL}, {"s6", NULL}, {"s7", NULL}, {"s8", NULL}}

static struct plan_result plan(enum plan_topo t, struct plan_node *nodes, size_t n, size_t size,
			       const char *const *names, size_t nn)
{
	struct plan_input in = {.topo = t, .nodes = nodes, .n = n, .size = size, .names = names,
				.n_names = nn};
	struct plan_result r;
	plan_group(&in, &r);
	return r;
}

/* "s3,s4,s5" of a result */
static const char *chosen(struct plan_node *nodes, const struct plan_result *r)
{
	static char buf[256];
	buf[0] = '\0';
	for (size_t i = 0; i < r->n; i++)
		snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", i ? "," : "",
			 nodes[r->idx[i]].name);
	return buf;
}

Test(plan, ring_whole_ring)
{
	struct plan_node n[] = N8;
	struct plan_result r = plan(PLAN_RING, n, 8, 8, NULL, 0);
	cr_assert_eq(r.code, 0, "%s", r.err);
	cr_expect_str_eq(chosen(n, &r), "s1,s2,s3,s4,s5,s6,s7,s8");
	cr_expect_str_eq(r.shape, "ring");
}

Test(plan, ring_size_from_empty_ring_is_an_arc_from_the_start)
{
	struct plan_node n[] = N8;
	struct plan_result r = plan(PLAN_RING, n, 8, 3, NULL, 0);
	cr_assert_eq(r.code, 0, "%s", r.err);
	cr_expect_str_eq(chosen(n, &r), "s1,s2,s3");
	cr_expect_str_eq(r.shape, "chain");
	cr_expect(strstr(r.note, "one-shot") != NULL, "the note says what a chain costs: %s", r.note);
	cr_expect(strstr(r.note, "its ends s1 and s3 have no cable") != NULL, "%s", r.note);
}

Test(plan, ring_two_neighbours_are_a_pair)
{
	struct plan_node n[] = N8;
	struct plan_result r = plan(PLAN_RING, n, 8, 2, NULL, 0);
	cr_assert_eq(r.code, 0);
	cr_expect_str_eq(r.shape, "pair");
}

Test(plan, ring_best_fit_run)
{
	/* free runs: s1-s2 (2), s4-s7 (4), busy s3 and s8 */
	struct plan_node n[] = N8;
	n[2].busy = "in group a";
	n[7].busy = "in group b";
	struct plan_result r = plan(PLAN_RING, n, 8, 2, NULL, 0);
	cr_assert_eq(r.code, 0, "%s", r.err);
	cr_expect_str_eq(chosen(n, &r), "s1,s2", "the smallest run that fits");
	r = plan(PLAN_RING, n, 8, 3, NULL, 0);
	cr_assert_eq(r.code, 0, "%s", r.err);
	cr_expect_str_eq(chosen(n, &r), "s4,s5,s6");
	r = plan(PLAN_RING, n, 8, 5, NULL, 0);
	cr_expect_eq(r.code, -ENOSPC, "no run of 5 although 6 are free");
	cr_expect(strstr(r.err, "neighbouring") != NULL, "%s", r.err);
}

Test(plan, ring_run_wraps_around)
{
	/* free: s7 s8 s1 (wrapping), busy s2..s6 */
	struct plan_node n[] = N8;
	for (int i = 1; i <= 5; i++)
		n[i].busy = "in group a";
	struct plan_result r = plan(PLAN_RING, n, 8, 3, NULL, 0);
	cr_assert_eq(r.code, 0, "%s", r.err);
	cr_expect_str_eq(chosen(n, &r), "s7,s8,s1", "ranks follow the arc across the wrap");
	cr_expect_str_eq(r.shape, "chain");
}

Test(plan, size_larger_than_free)
{
	struct plan_node n[] = N8;
	n[0].busy = "drained";
	struct plan_result r = plan(PLAN_RING, n, 8, 8, NULL, 0);
	cr_expect_eq(r.code, -ENOSPC);
	cr_expect(strstr(r.err, "7 free nodes") != NULL, "%s", r.err);
	cr_expect(strstr(r.err, "s1 (drained)") != NULL, "%s", r.err);
	r = plan(PLAN_SWITCH, n, 8, 9, NULL, 0);
	cr_expect_eq(r.code, -ENOSPC);
	r = plan(PLAN_SWITCH, n, 8, 0, NULL, 0);
	cr_expect_eq(r.code, -EINVAL);
}

Test(plan, switch_any_free_nodes)
{
	struct plan_node n[] = N8;
	n[0].busy = "in group a";
	n[2].busy = "in group a";
	struct plan_result r = plan(PLAN_SWITCH, n, 8, 4, NULL, 0);
	cr_assert_eq(r.code, 0, "%s", r.err);
	cr_expect_str_eq(chosen(n, &r), "s2,s4,s5,s6");
	cr_expect_str_eq(r.shape, "switch");
	cr_expect(strstr(r.note, "any-to-any") != NULL);
}

Test(plan, names_on_a_ring_follow_ring_order)
{
	struct plan_node n[] = N8;
	const char *names[] = {"s2", "s8", "s1"};
	struct plan_result r = plan(PLAN_RING, n, 8, 0, names, 3);
	cr_assert_eq(r.code, 0, "%s", r.err);
	cr_expect_str_eq(chosen(n, &r), "s8,s1,s2", "one arc, starting after the gap");
	cr_expect_str_eq(r.shape, "chain");
	const char *scattered[] = {"s1", "s3", "s5"};
	r = plan(PLAN_RING, n, 8, 0, scattered, 3);
	cr_assert_eq(r.code, 0);
	cr_expect_str_eq(r.shape, "scattered");
	cr_expect(strstr(r.note, "management") != NULL, "%s", r.note);
}

Test(plan, names_on_a_switch_keep_their_order)
{
	struct plan_node n[] = N8;
	const char *names[] = {"s5", "s2"};
	struct plan_result r = plan(PLAN_SWITCH, n, 8, 0, names, 2);
	cr_assert_eq(r.code, 0);
	cr_expect_str_eq(chosen(n, &r), "s5,s2");
}

Test(plan, bad_names)
{
	struct plan_node n[] = N8;
	n[3].busy = "in group x";
	const char *unknown[] = {"s1", "nope"};
	struct plan_result r = plan(PLAN_RING, n, 8, 0, unknown, 2);
	cr_expect_eq(r.code, -ENOENT);
	cr_expect(strstr(r.err, "'nope'") != NULL, "%s", r.err);
	const char *twice[] = {"s1", "s1"};
	r = plan(PLAN_RING, n, 8, 0, twice, 2);
	cr_expect_eq(r.code, -EINVAL);
	const char *busy[] = {"s4"};
	r = plan(PLAN_RING, n, 8, 0, busy, 1);
	cr_expect_eq(r.code, -EBUSY);
	cr_expect(strstr(r.err, "in group x") != NULL, "%s", r.err);
}

Test(plan, small_clusters)
{
	struct plan_node n[] = {{"a", NULL}, {"b", NULL}};
	struct plan_result r = plan(PLAN_RING, n, 2, 2, NULL, 0);
	cr_assert_eq(r.code, 0);
	cr_expect_str_eq(r.shape, "pair");
	r = plan(PLAN_RING, n, 2, 1, NULL, 0);
	cr_expect_str_eq(r.shape, "single");
	struct plan_node three[] = {{"a", NULL}, {"b", NULL}, {"c", NULL}};
	r = plan(PLAN_RING, three, 3, 3, NULL, 0);
	cr_expect_str_eq(r.shape, "ring");
	r = plan(PLAN_UNKNOWN, three, 3, 2, NULL, 0);
	cr_expect_str_eq(r.shape, "unknown");
	cr_expect_str_eq(chosen(three, &r), "a,b");
}

Test(plan, deterministic)
{
	struct plan_node n[] = N8;
	n[4].busy = "in group a";
	struct plan_result r1 = plan(PLAN_RING, n, 8, 3, NULL, 0);
	struct plan_result r2 = plan(PLAN_RING, n, 8, 3, NULL, 0);
	cr_expect_eq(memcmp(&r1, &r2, sizeof r1), 0);
}

/* ---- the topology from a stored validation run (plan_topo_from_run) ---- */

static const char *const JOIN4[] = {"s1", "s2", "s3", "s4"};

Test(plan_run, passed_ring_gives_its_ring_order)
{
	const char *const ring[] = {"s3", "s1", "s4", "s2"};
	enum plan_topo t = PLAN_UNKNOWN;
	size_t order[4];
	cr_assert_eq(plan_topo_from_run("ring", "pass", ring, 4, 4, JOIN4, 4, &t, order), 0);
	cr_expect_eq(t, PLAN_RING);
	cr_expect(order[0] == 2 && order[1] == 0 && order[2] == 3 && order[3] == 1);
	/* and the planner's arcs then follow that order */
	struct plan_node n[4];
	for (size_t i = 0; i < 4; i++)
		n[i] = (struct plan_node){JOIN4[order[i]], NULL};
	struct plan_result r = plan(t, n, 4, 2, NULL, 0);
	cr_assert_eq(r.code, 0, "%s", r.err);
	cr_expect_str_eq(chosen(n, &r), "s3,s1");
	cr_expect_str_eq(r.shape, "pair");
}

Test(plan_run, warned_pair_and_switch_are_used)
{
	const char *const pair[] = {"s2", "s1"};
	enum plan_topo t = PLAN_UNKNOWN;
	size_t order[4];
	cr_assert_eq(plan_topo_from_run("pair", "warn", pair, 2, 2, JOIN4, 2, &t, order), 0);
	cr_expect_eq(t, PLAN_RING);
	cr_expect(order[0] == 1 && order[1] == 0);
	cr_assert_eq(plan_topo_from_run("switch", "pass", NULL, 0, 4, JOIN4, 4, &t, order), 0);
	cr_expect_eq(t, PLAN_SWITCH);
	cr_expect(order[0] == 0 && order[3] == 3, "a switch keeps join order");
}

Test(plan_run, unusable_runs_fall_back)
{
	const char *const ring[] = {"s1", "s2", "s3", "s4"};
	const char *const stale[] = {"s1", "s2", "s3", "s9"};
	const char *const dup[] = {"s1", "s2", "s2", "s4"};
	enum plan_topo t = PLAN_UNKNOWN;
	size_t order[4];
	cr_expect_eq(plan_topo_from_run("ring", "fail", ring, 4, 4, JOIN4, 4, &t, order), -1);
	cr_expect_eq(plan_topo_from_run("unknown", "pass", NULL, 0, 4, JOIN4, 4, &t, order), -1);
	cr_expect_eq(plan_topo_from_run("ring", "pass", ring, 3, 4, JOIN4, 4, &t, order), -1,
		     "a broken ring has no full ring_order");
	cr_expect_eq(plan_topo_from_run("ring", "pass", stale, 4, 4, JOIN4, 4, &t, order), -1,
		     "a node that left since the run");
	cr_expect_eq(plan_topo_from_run("ring", "pass", dup, 4, 4, JOIN4, 4, &t, order), -1);
	cr_expect_eq(plan_topo_from_run("switch", "pass", NULL, 0, 3, JOIN4, 4, &t, order), -1,
		     "a node joined since the run");
	cr_expect_eq(t, PLAN_UNKNOWN, "nothing set on fallback");
}

/* Issue 16: a 3-node ring is a full mesh; its whole-ring group says that
 * one-shot and tree work, and any two of its nodes are a pair. */
Test(plan, triangle_is_a_full_mesh)
{
	struct plan_node n[] = {{"a", NULL}, {"b", NULL}, {"c", NULL}};
	struct plan_result r = plan(PLAN_RING, n, 3, 3, NULL, 0);
	cr_assert_eq(r.code, 0, "%s", r.err);
	cr_expect_str_eq(r.shape, "ring");
	cr_expect(strstr(r.note, "full mesh") && strstr(r.note, "one-shot all-reduce all run"),
		  "%s", r.note);
	cr_expect(strstr(r.note, "needs any-to-any") == NULL, "%s", r.note);
	const char *ac[] = {"a", "c"};
	r = plan(PLAN_RING, n, 3, 0, ac, 2);
	cr_assert_eq(r.code, 0, "%s", r.err);
	cr_expect_str_eq(r.shape, "pair");
}

/* Issue 16: no note or error is cut off, even with 63-byte names: the chain
 * note is whole (and fits the group's stored note), long node lists end in
 * "and N more" rather than in half a word. */
Test(plan, long_names_are_never_cut_off)
{
	static char names[64][64];
	struct plan_node n[64];
	for (int i = 0; i < 64; i++) {
		snprintf(names[i], sizeof names[i], "%s-%02d",
			 "a-rather-long-node-name-for-a-spark-in-rack-seven-row-b", i);
		memset(names[i] + strlen(names[i]), 'x', 63 - strlen(names[i]));
		names[i][63] = '\0';
		n[i] = (struct plan_node){names[i], i % 2 ? "in group some-other-group-of-people" : NULL};
	}
	for (int i = 0; i < 8; i++)
		n[i].busy = NULL;
	struct plan_result r = plan(PLAN_RING, n, 8, 3, NULL, 0);
	cr_assert_eq(r.code, 0, "%s", r.err);
	cr_expect_str_eq(r.shape, "chain");
	size_t l = strlen(r.note);
	cr_expect_lt(l, (size_t)PLAN_NOTE_MAX - 1, "%zu: %s", l, r.note);
	cr_expect(l > 20 && strcmp(r.note + l - strlen("one-shot needs a switch"),
				   "one-shot needs a switch") == 0, "cut off: %s", r.note);
	cr_expect(strstr(r.note, names[0]) && strstr(r.note, names[2]), "%s", r.note);
	/* 64 nodes, half busy, asking for more than are free: the list ends whole */
	r = plan(PLAN_SWITCH, n, 64, 60, NULL, 0);
	cr_assert_eq(r.code, -ENOSPC);
	l = strlen(r.err);
	cr_expect_lt(l, sizeof r.err - 1, "%s", r.err);
	cr_expect(strstr(r.err, " more)") != NULL, "%s", r.err);
}

/* Issue 16: a failed validation that names a group's nodes (or no node) is
 * what group create warns about and run refuses. */
Test(plan_run, cabling_failed_names_the_failure)
{
	const char *verdict =
	    "{\"findings\":[{\"code\":\"same_port_cable\",\"severity\":\"fail\","
	    "\"message\":\"cable s1 port 0 <-> s2 port 0 joins the same port\","
	    "\"fix\":\"on s2 swap the cables of port 0 and port 1\","
	    "\"ends\":[{\"node\":\"s1\",\"port\":\"0\"},{\"node\":\"s2\",\"port\":\"0\"}]},"
	    "{\"code\":\"pair_ports_differ\",\"severity\":\"info\",\"message\":\"m\",\"fix\":\"f\","
	    "\"ends\":[{\"node\":\"s3\"}]}]}";
	const char *g12[] = {"s1", "s2"}, *g34[] = {"s3", "s4"};
	char why[512];
	cr_expect_eq(plan_cabling_failed("fail", verdict, 12, g12, 2, why, sizeof why), 1);
	cr_expect(strstr(why, "12 s ago, FAILed: cable s1 port 0 <-> s2 port 0") &&
		  strstr(why, "fix: on s2 swap the cables"), "%s", why);
	cr_expect_eq(plan_cabling_failed("fail", verdict, 12, g34, 2, why, sizeof why), 0,
		     "an info finding about s3 is no failure of s3, s4");
	cr_expect_eq(plan_cabling_failed("warn", verdict, 12, g12, 2, why, sizeof why), 0);
	cr_expect_eq(plan_cabling_failed("pass", NULL, 12, g12, 2, why, sizeof why), 0);
	/* a failure naming no node concerns every group */
	const char *nonode = "{\"findings\":[{\"code\":\"no_nodes\",\"severity\":\"fail\","
			     "\"message\":\"no node\",\"fix\":\"join nodes\",\"ends\":[]}]}";
	cr_expect_eq(plan_cabling_failed("fail", nonode, 3, g34, 2, why, sizeof why), 1);
	/* but a --expect the cabling was not is no failure of the cabling (issue 28) */
	const char *expect = "{\"findings\":[{\"code\":\"expect_mismatch\",\"severity\":\"fail\","
			     "\"message\":\"expected a switch, found a ring\",\"fix\":\"recable\",\"ends\":[]}]}";
	cr_expect_eq(plan_cabling_failed("fail", expect, 3, g34, 2, why, sizeof why), 0,
		     "an expectation alone blocks no run: %s", why);
	/* too small a buffer: ends in "..." */
	char small[40];
	cr_expect_eq(plan_cabling_failed("fail", verdict, 12, g12, 2, small, sizeof small), 1);
	cr_expect_str_eq(small + strlen(small) - 3, "...");
}

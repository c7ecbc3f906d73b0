/* topo_classify() on synthetic cable maps: every class, every diagnostic. */
#include "topology/classify.h"

#include "mapgen.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static json_t *classify_expect(json_t *m, const char *expect)
{
	struct topo_classify_opts o = {.expect = expect};
	json_t *v = NULL;
	char err[256];
	int r = topo_classify(m, &o, &v, err, sizeof err);
	cr_assert_eq(r, 0, "classify failed: %s", err);
	cr_assert_not_null(v);
	return v;
}

static json_t *classify(json_t *m) { return classify_expect(m, NULL); }

static const char *vs(json_t *v, const char *key) { return json_string_value(json_object_get(v, key)); }

static void dump(json_t *v)
{
	char *s = json_dumps(v, JSON_INDENT(1));
	fprintf(stderr, "%s\n", s);
	free(s);
}

/* The finding with this code (the n-th), or NULL. */
static json_t *finding_n(json_t *v, const char *code, int n)
{
	size_t i;
	json_t *f;
	json_array_foreach(json_object_get(v, "findings"), i, f)
		if (strcmp(vs(f, "code"), code) == 0 && n-- == 0)
			return f;
	return NULL;
}

static json_t *finding(json_t *v, const char *code) { return finding_n(v, code, 0); }

static int count_findings(json_t *v, const char *code)
{
	int n = 0;
	while (finding_n(v, code, n))
		n++;
	return n;
}

static bool has_advice(json_t *v, const char *code)
{
	size_t i;
	json_t *a;
	json_array_foreach(json_object_get(v, "advice"), i, a)
		if (strcmp(vs(a, "code"), code) == 0)
			return true;
	return false;
}

#define assert_verdict(v, cls, res)                                                                 \
	do {                                                                                        \
		if (strcmp(vs(v, "class"), cls) || strcmp(vs(v, "result"), res))                   \
			dump(v);                                                                    \
		cr_assert_str_eq(vs(v, "class"), cls);                                              \
		cr_assert_str_eq(vs(v, "result"), res);                                             \
	} while (0)

#define assert_contains(s, sub)                                                                     \
	do {                                                                                        \
		const char *s_ = (s);                                                               \
		cr_assert(s_ && strstr(s_, sub), "'%s' does not contain '%s'", s_ ? s_ : "(null)", sub); \
	} while (0)

static json_t *need(json_t *v, const char *code)
{
	json_t *f = finding(v, code);
	if (!f)
		dump(v);
	cr_assert_not_null(f, "no finding %s", code);
	cr_assert(vs(f, "message") && *vs(f, "message"));
	cr_assert(vs(f, "fix") && *vs(f, "fix"));
	return f;
}

static void ring_order_is(json_t *v, const char *const *names, size_t n)
{
	json_t *ro = json_object_get(v, "ring_order");
	cr_assert_eq(json_array_size(ro), n);
	for (size_t i = 0; i < n; i++)
		cr_assert_str_eq(json_string_value(json_array_get(ro, i)), names[i]);
}

/* ---------------- pair ---------------- */

Test(classify, pair_same_port_passes)
{
	json_t *m = mg_map(2);
	mg_cable(m, 0, 0, 1, 0);
	json_t *v = classify(m);
	assert_verdict(v, "pair", "pass");
	cr_assert_eq(json_integer_value(json_object_get(v, "nodes")), 2);
	cr_assert(json_is_true(json_object_get(v, "any_to_any")));
	static const char *const ro[] = {"spark-1", "spark-2"};
	ring_order_is(v, ro, 2);
	json_t *cab = json_array_get(json_object_get(v, "cables"), 0);
	cr_assert_eq(json_array_size(json_object_get(v, "cables")), 1);
	cr_assert_eq(json_integer_value(json_object_get(cab, "twins_ok")), 2);
	cr_assert_str_eq(vs(json_object_get(cab, "a"), "node"), "spark-1");
	cr_assert_str_eq(vs(json_object_get(cab, "b"), "port"), "0");
	cr_assert_eq(json_array_size(json_object_get(v, "findings")), 0);
	cr_assert(has_advice(v, "pair_any_to_any"));
	json_decref(v);
	json_decref(m);
}

Test(classify, pair_different_ports_is_info)
{
	json_t *m = mg_map(2);
	mg_cable(m, 0, 0, 1, 1);
	json_t *v = classify(m);
	assert_verdict(v, "pair", "pass");
	json_t *f = need(v, "pair_ports_differ");
	cr_assert_str_eq(vs(f, "severity"), "info");
	assert_contains(vs(f, "message"), "spark-1 port 0 to spark-2 port 1");
	json_decref(v);
	json_decref(m);
}

Test(classify, pair_second_cable_adds_nothing)
{
	json_t *m = mg_map(2);
	mg_cable(m, 0, 0, 1, 0);
	mg_cable(m, 0, 1, 1, 1);
	json_t *v = classify(m);
	assert_verdict(v, "pair", "pass");
	json_t *f = need(v, "pair_extra_cable");
	cr_assert_str_eq(vs(f, "severity"), "info");
	assert_contains(vs(f, "message"), "spark-1 port 1 <-> spark-2 port 1");
	json_decref(v);
	json_decref(m);
}

Test(classify, pair_mtu_mismatch_names_both_ends)
{
	json_t *m = mg_map(2);
	mg_set(m, 1, 1, 0, "mtu", json_integer(1500));
	mg_cable(m, 0, 0, 1, 1);
	json_t *v = classify(m);
	assert_verdict(v, "pair", "fail");
	json_t *f = need(v, "mtu_mismatch");
	assert_contains(vs(f, "message"), "spark-1 enp1s0f0np0 has 9000");
	assert_contains(vs(f, "message"), "spark-2 enp1s0f1np1 has 1500");
	assert_contains(vs(f, "fix"), "set the MTU of spark-2 enp1s0f1np1 to 9000");
	cr_assert_eq(json_array_size(json_object_get(f, "ends")), 2);
	cr_assert_eq(count_findings(v, "mtu_mismatch"), 1);
	json_t *cab = json_array_get(json_object_get(v, "cables"), 0);
	cr_assert(json_is_false(json_object_get(cab, "mtu_ok")));
	json_decref(v);
	json_decref(m);
}

Test(classify, mtu_from_frames_when_map_lacks_it)
{
	json_t *m = mg_map(2);
	mg_set(m, 1, 0, 0, "mtu", json_integer(1500));
	mg_cable(m, 0, 0, 1, 0);
	mg_set(m, 1, 0, 0, "mtu", json_null()); /* known only from spark-2's frames */
	json_t *v = classify(m);
	assert_verdict(v, "pair", "fail");
	need(v, "mtu_mismatch");
	json_decref(v);
	json_decref(m);
}

Test(classify, one_way_cable_fails)
{
	json_t *m = mg_map(2);
	for (int t = 0; t < 2; t++)
		mg_hear(m, 0, 0, t, 1, 0, t); /* spark-1 hears spark-2, not back */
	json_t *v = classify(m);
	assert_verdict(v, "pair", "fail");
	json_t *f = need(v, "cable_one_way");
	assert_contains(vs(f, "message"), "spark-1 port 0 hears spark-2 port 0 but spark-2 port 0 hears nothing");
	json_decref(v);
	json_decref(m);
}

Test(classify, cross_hearing_twins_are_fine)
{
	/* Hardware may hand a frame to both PCIe functions of the port. */
	json_t *m = mg_map(2);
	for (int a = 0; a < 2; a++)
		for (int b = 0; b < 2; b++) {
			mg_hear(m, 0, 0, a, 1, 0, b);
			mg_hear(m, 1, 0, a, 0, 0, b);
		}
	json_t *v = classify(m);
	assert_verdict(v, "pair", "pass");
	cr_assert_eq(json_integer_value(json_object_get(json_array_get(json_object_get(v, "cables"), 0),
							"twins_ok")), 2);
	json_decref(v);
	json_decref(m);
}

/* ---------------- ring ---------------- */

static void ring_passes(int n)
{
	json_t *m = mg_map(n);
	mg_ring(m, 0, n);
	json_t *v = classify(m);
	assert_verdict(v, "ring", "pass");
	/* a 3-ring is a full mesh: every pair has its own cable */
	cr_assert_eq(json_is_true(json_object_get(v, "any_to_any")), n == 3);
	cr_assert_eq(json_is_true(json_object_get(v, "mesh")), n == 3);
	cr_assert_eq(json_array_size(json_object_get(v, "cables")), (size_t)n);
	json_t *ro = json_object_get(v, "ring_order");
	cr_assert_eq(json_array_size(ro), (size_t)n);
	for (int i = 0; i < n; i++) {
		char name[16];
		snprintf(name, sizeof name, "spark-%d", i + 1);
		cr_assert_str_eq(json_string_value(json_array_get(ro, (size_t)i)), name);
		json_t *cab = json_array_get(json_object_get(v, "cables"), (size_t)i);
		cr_assert_str_eq(vs(json_object_get(cab, "a"), "node"), name);
		cr_assert_str_eq(vs(json_object_get(cab, "a"), "port"), "0");
		cr_assert_str_eq(vs(json_object_get(cab, "b"), "port"), "1");
		cr_assert_eq(json_integer_value(json_object_get(cab, "twins_ok")), 2);
	}
	cr_assert_eq(has_advice(v, "ring_neighbours_only"), n > 3);
	cr_assert_eq(has_advice(v, "ring_no_any_to_any"), n > 3);
	cr_assert_eq(has_advice(v, "ring3_full_mesh"), n == 3);
	cr_assert_eq(has_advice(v, "ring_wants_switch"), n >= 8);
	json_decref(v);
	json_decref(m);
}

Test(classify, ring_3_passes) { ring_passes(3); }
Test(classify, ring_4_passes) { ring_passes(4); }
Test(classify, ring_5_passes) { ring_passes(5); }
Test(classify, ring_8_passes_and_wants_a_switch) { ring_passes(8); }

Test(classify, ring_with_a_cut_cable_is_a_chain)
{
	json_t *m = mg_map(4);
	mg_cable(m, 0, 0, 1, 1);
	mg_cable(m, 2, 0, 3, 1);
	mg_cable(m, 3, 0, 0, 1); /* spark-2 port 0 <-> spark-3 port 1 cut */
	mg_unplug(m, 1, 0);
	mg_unplug(m, 2, 1);
	json_t *v = classify(m);
	assert_verdict(v, "ring", "fail");
	json_t *f = need(v, "missing_cable");
	cr_assert_eq(count_findings(v, "missing_cable"), 1);
	assert_contains(vs(f, "message"), "chain (spark-3 - spark-4 - spark-1 - spark-2)");
	cr_assert_str_eq(vs(f, "fix"), "connect spark-2 port 0 to spark-3 port 1");
	json_t *e = json_object_get(f, "ends");
	cr_assert_str_eq(vs(json_array_get(e, 0), "node"), "spark-2");
	cr_assert_str_eq(vs(json_array_get(e, 0), "port"), "0");
	cr_assert_str_eq(vs(json_array_get(e, 1), "node"), "spark-3");
	cr_assert_str_eq(vs(json_array_get(e, 1), "port"), "1");
	cr_assert_null(json_object_get(v, "ring_order"));
	cr_assert_eq(json_array_size(json_object_get(v, "proposed_ring_order")), 4);
	json_decref(v);
	json_decref(m);
}

Test(classify, ring_with_two_gaps_names_each_missing_cable)
{
	json_t *m = mg_map(5);
	mg_cable(m, 0, 0, 1, 1);
	mg_cable(m, 2, 0, 3, 1);
	mg_cable(m, 3, 0, 4, 1);
	mg_unplug(m, 1, 0);
	mg_unplug(m, 2, 1);
	mg_unplug(m, 4, 0);
	mg_unplug(m, 0, 1);
	json_t *v = classify(m);
	assert_verdict(v, "ring", "fail");
	cr_assert_eq(count_findings(v, "missing_cable"), 2);
	cr_assert_str_eq(vs(finding_n(v, "missing_cable", 0), "fix"),
			 "connect spark-2 port 0 to spark-3 port 1");
	cr_assert_str_eq(vs(finding_n(v, "missing_cable", 1), "fix"),
			 "connect spark-5 port 0 to spark-1 port 1");
	json_decref(v);
	json_decref(m);
}

Test(classify, ring_port_to_same_port_names_the_swap)
{
	json_t *m = mg_map(4);
	mg_cable(m, 0, 0, 1, 0); /* spark-2's two cables swapped */
	mg_cable(m, 1, 1, 2, 1);
	mg_cable(m, 2, 0, 3, 1);
	mg_cable(m, 3, 0, 0, 1);
	json_t *v = classify(m);
	assert_verdict(v, "ring", "fail");
	json_t *f = need(v, "same_port_cable");
	cr_assert_eq(count_findings(v, "same_port_cable"), 1);
	assert_contains(vs(f, "message"), "spark-1 port 0 <-> spark-2 port 0");
	assert_contains(vs(f, "message"), "spark-2 port 1 <-> spark-3 port 1");
	cr_assert_str_eq(vs(f, "fix"), "on spark-2 swap the cables of port 0 and port 1");
	cr_assert_eq(json_array_size(json_object_get(f, "ends")), 4);
	/* Still one cycle: the order is known. */
	static const char *const ro[] = {"spark-1", "spark-2", "spark-3", "spark-4"};
	ring_order_is(v, ro, 4);
	json_t *cab = json_array_get(json_object_get(v, "cables"), 0);
	cr_assert(json_is_true(json_object_get(cab, "same_port")));
	json_decref(v);
	json_decref(m);
}

Test(classify, all_same_port_ring)
{
	/* 0-0, 1-1, 0-0, 1-1 around four nodes: two nodes to swap. */
	json_t *m = mg_map(4);
	mg_cable(m, 0, 0, 1, 0);
	mg_cable(m, 1, 1, 2, 1);
	mg_cable(m, 2, 0, 3, 0);
	mg_cable(m, 3, 1, 0, 1);
	json_t *v = classify(m);
	assert_verdict(v, "ring", "fail");
	cr_assert_eq(count_findings(v, "same_port_cable"), 2);
	json_decref(v);
	json_decref(m);
}

Test(classify, chain_end_on_the_wrong_port)
{
	/* 3 nodes, one cable missing, and spark-3's only cable on port 0. */
	json_t *m = mg_map(3);
	mg_cable(m, 0, 0, 1, 1);
	mg_cable(m, 1, 0, 2, 0);
	mg_unplug(m, 2, 1);
	mg_unplug(m, 0, 1);
	json_t *v = classify(m);
	assert_verdict(v, "ring", "fail");
	json_t *f = need(v, "same_port_cable");
	cr_assert_str_eq(vs(f, "fix"), "on spark-3 move the cable from port 0 to port 1");
	json_t *mc = need(v, "missing_cable");
	cr_assert_str_eq(vs(mc, "fix"), "connect spark-3 port 0 to spark-1 port 1");
	json_decref(v);
	json_decref(m);
}

Test(classify, two_rings_instead_of_one)
{
	json_t *m = mg_map(6);
	mg_ring(m, 0, 3);
	mg_ring(m, 3, 3);
	json_t *v = classify(m);
	assert_verdict(v, "ring", "fail");
	json_t *f = need(v, "two_rings");
	assert_contains(vs(f, "message"), "2 separate rings (spark-1 - spark-2 - spark-3), (spark-4 - spark-5 - spark-6)");
	cr_assert_str_eq(vs(f, "fix"),
			 "unplug spark-3 port 0 <-> spark-1 port 1 and spark-6 port 0 <-> spark-4 port 1; "
			 "connect spark-3 port 0 to spark-4 port 1 and spark-6 port 0 to spark-1 port 1");
	cr_assert_eq(json_array_size(json_object_get(f, "ends")), 8);
	json_decref(v);
	json_decref(m);
}

Test(classify, double_cabled_pairs_in_a_four_node_cluster)
{
	json_t *m = mg_map(4);
	mg_ring(m, 0, 2); /* spark-1 <-> spark-2 twice */
	mg_ring(m, 2, 2);
	json_t *v = classify(m);
	assert_verdict(v, "ring", "fail");
	need(v, "two_rings");
	json_decref(v);
	json_decref(m);
}

Test(classify, ring_leaving_out_a_node)
{
	json_t *m = mg_map(4);
	mg_ring(m, 0, 3);
	for (int p = 0; p < 2; p++)
		for (int t = 0; t < 2; t++)
			mg_set(m, 3, p, t, "carrier", json_false());
	json_t *v = classify(m);
	assert_verdict(v, "ring", "fail");
	json_t *f = need(v, "ring_missing_nodes");
	assert_contains(vs(f, "message"), "(spark-1 - spark-2 - spark-3), (spark-4)");
	cr_assert_str_eq(vs(f, "fix"), "unplug spark-3 port 0 <-> spark-1 port 1; connect spark-3 port 0 "
				       "to spark-4 port 1 and spark-4 port 0 to spark-1 port 1");
	json_t *iso = need(v, "node_isolated");
	assert_contains(vs(iso, "message"), "spark-4 has no fabric link up");
	assert_contains(vs(iso, "fix"), "cable spark-4 port 0 to port 1 of the next node");
	json_decref(v);
	json_decref(m);
}

Test(classify, cable_back_to_the_same_node)
{
	json_t *m = mg_map(3);
	mg_cable(m, 0, 0, 0, 1);
	mg_cable(m, 1, 0, 2, 1);
	mg_cable(m, 2, 0, 1, 1);
	json_t *v = classify(m);
	cr_assert_str_eq(vs(v, "result"), "fail");
	json_t *f = need(v, "cable_to_self");
	cr_assert_str_eq(vs(f, "message"), "spark-1 port 0 is cabled to port 1 of the same node");
	cr_assert_str_eq(vs(f, "fix"), "move one end of that cable from spark-1 to the next node");
	json_t *cabs = json_object_get(v, "cables");
	bool self = false;
	for (size_t i = 0; i < json_array_size(cabs); i++)
		self |= strcmp(vs(json_array_get(cabs, i), "kind"), "self") == 0;
	cr_assert(self);
	json_decref(v);
	json_decref(m);
}

Test(classify, one_silent_twin_is_half_bandwidth)
{
	json_t *m = mg_map(4);
	mg_ring(m, 0, 4);
	/* Cut twin 1 of the spark-2 port 0 <-> spark-3 port 1 cable. */
	mg_unhear(m, 1, 0, 1, 2);
	mg_unhear(m, 2, 1, 1, 1);
	mg_set(m, 2, 1, 1, "carrier", json_false());
	json_t *v = classify(m);
	assert_verdict(v, "ring", "warn");
	json_t *f = need(v, "twin_silent");
	cr_assert_eq(count_findings(v, "twin_silent"), 1);
	assert_contains(vs(f, "message"), "twin 1 of cable spark-2 port 0 <-> spark-3 port 1");
	assert_contains(vs(f, "message"), "spark-2 enP2p1s0f0np0");
	assert_contains(vs(f, "message"), "spark-3 enP2p1s0f1np1");
	assert_contains(vs(f, "message"), "half bandwidth");
	assert_contains(vs(f, "fix"), "bring enP2p1s0f1np1 up on spark-3");
	json_t *cab = json_array_get(json_object_get(v, "cables"), 1);
	cr_assert_eq(json_integer_value(json_object_get(cab, "twins_ok")), 1);
	json_decref(v);
	json_decref(m);
}

Test(classify, twin_missing_on_one_end)
{
	json_t *m = mg_map(2);
	mg_cable(m, 0, 0, 1, 0);
	json_array_remove(json_object_get(json_array_get(json_object_get(
		json_array_get(json_object_get(m, "nodes"), 1), "ports"), 0), "twins"), 1);
	json_t *v = classify(m);
	assert_verdict(v, "pair", "warn");
	json_t *f = need(v, "twin_silent");
	assert_contains(vs(f, "message"), "exists only on spark-1");
	json_decref(v);
	json_decref(m);
}

Test(classify, ring_mtu_mismatch)
{
	json_t *m = mg_map(3);
	mg_set(m, 2, 1, 0, "mtu", json_integer(1500));
	mg_set(m, 2, 1, 1, "mtu", json_integer(1500));
	mg_ring(m, 0, 3);
	json_t *v = classify(m);
	assert_verdict(v, "ring", "fail");
	cr_assert_eq(count_findings(v, "mtu_mismatch"), 2);
	assert_contains(vs(finding(v, "mtu_mismatch"), "message"),
			"MTU differs across cable spark-2 port 0 <-> spark-3 port 1");
	json_decref(v);
	json_decref(m);
}

Test(classify, ring_node_with_three_cables)
{
	json_t *m = mg_map(4);
	/* Give spark-1 a third port. */
	json_t *ports = json_object_get(json_array_get(json_object_get(m, "nodes"), 0), "ports");
	json_array_append_new(ports, json_pack("{s:s, s:[{s:s, s:b, s:i, s:[]}]}", "port", "2", "twins",
					       "netdev", "eth9", "carrier", 1, "mtu", 9000, "heard"));
	mg_cable(m, 0, 0, 1, 1);
	mg_cable(m, 0, 1, 2, 0);
	/* spark-1 port 2 <-> spark-4 port 0 */
	json_array_append_new(json_object_get(json_array_get(json_object_get(json_array_get(ports, 2),
									     "twins"), 0), "heard"),
			      json_pack("{s:s, s:s, s:i, s:s, s:i}", "node_id", "id-4", "port", "0",
					"twin", 0, "netdev", "enp1s0f0np0", "mtu", 9000));
	json_array_append_new(json_object_get(mg_twin(m, 3, 0, 0), "heard"),
			      json_pack("{s:s, s:s, s:i, s:s, s:i}", "node_id", "id-1", "port", "2",
					"twin", 0, "netdev", "eth9", "mtu", 9000));
	json_t *v = classify(m);
	assert_verdict(v, "ring", "fail");
	json_t *f = need(v, "ring_shape");
	assert_contains(vs(f, "message"), "spark-1 has 3 direct cables");
	json_decref(v);
	json_decref(m);
}

/* ---------------- switch ---------------- */

static void switch_passes(int n)
{
	json_t *m = mg_map(n);
	int nodes[8], ports[8];
	for (int i = 0; i < n; i++) {
		nodes[i] = i;
		ports[i] = 0;
	}
	mg_switch(m, nodes, ports, n);
	json_t *v = classify(m);
	assert_verdict(v, "switch", "pass");
	cr_assert(json_is_true(json_object_get(v, "any_to_any")));
	json_t *doms = json_object_get(v, "l2_domains");
	cr_assert_eq(json_array_size(doms), 1);
	cr_assert_eq(json_array_size(json_object_get(json_array_get(doms, 0), "nodes")), (size_t)n);
	json_t *cabs = json_object_get(v, "cables");
	cr_assert_eq(json_array_size(cabs), (size_t)n);
	for (int i = 0; i < n; i++) {
		json_t *cab = json_array_get(cabs, (size_t)i);
		cr_assert_str_eq(vs(cab, "kind"), "switch");
		cr_assert_str_eq(vs(json_object_get(cab, "b"), "switch"), "l2-1");
		cr_assert_eq(json_integer_value(json_object_get(cab, "twins_ok")), 2);
	}
	cr_assert(has_advice(v, "switch_any_to_any"));
	cr_assert_eq(has_advice(v, "switch_beyond_nvidia"), n > 4);
	cr_assert_null(json_object_get(v, "ring_order"));
	json_decref(v);
	json_decref(m);
}

Test(classify, switch_3_passes) { switch_passes(3); }
Test(classify, switch_4_passes) { switch_passes(4); }
Test(classify, switch_8_passes) { switch_passes(8); }

Test(classify, switch_with_a_direct_cable_alongside)
{
	json_t *m = mg_map(4);
	static const int nodes[] = {0, 1, 2, 3}, ports[] = {0, 0, 0, 0};
	mg_switch(m, nodes, ports, 4);
	mg_cable(m, 0, 1, 1, 1);
	json_t *v = classify(m);
	assert_verdict(v, "switch", "warn");
	json_t *f = need(v, "mixed_switch_direct");
	cr_assert_str_eq(vs(f, "severity"), "warn");
	assert_contains(vs(f, "message"), "direct cable spark-1 port 1 <-> spark-2 port 1 alongside the switch");
	json_decref(v);
	json_decref(m);
}

Test(classify, node_reached_only_by_a_direct_cable)
{
	json_t *m = mg_map(4);
	static const int nodes[] = {0, 1, 2}, ports[] = {0, 0, 0};
	mg_switch(m, nodes, ports, 3);
	mg_cable(m, 0, 1, 3, 0);
	json_t *v = classify(m);
	assert_verdict(v, "switch", "fail");
	json_t *f = need(v, "mixed_switch_direct");
	cr_assert_str_eq(vs(f, "severity"), "fail");
	assert_contains(vs(f, "message"), "spark-4 is joined by a direct cable");
	cr_assert_str_eq(vs(f, "fix"), "cable spark-4 port 0 to the switch and unplug the direct cable");
	cr_assert(json_is_false(json_object_get(v, "any_to_any")));
	json_decref(v);
	json_decref(m);
}

Test(classify, nodes_on_two_l2_domains)
{
	json_t *m = mg_map(6);
	static const int n1[] = {0, 1, 2}, n2[] = {3, 4, 5}, ports[] = {0, 0, 0};
	mg_switch(m, n1, ports, 3);
	mg_switch(m, n2, ports, 3);
	json_t *v = classify(m);
	assert_verdict(v, "switch", "fail");
	json_t *f = need(v, "l2_split");
	assert_contains(vs(f, "message"), "2 separate L2 domains (spark-1, spark-2, spark-3), (spark-4, spark-5, spark-6)");
	cr_assert_eq(json_array_size(json_object_get(v, "l2_domains")), 2);
	cr_assert_eq(json_array_size(json_object_get(f, "ends")), 3);
	json_decref(v);
	json_decref(m);
}

Test(classify, switch_port_not_hearing_a_node)
{
	json_t *m = mg_map(4);
	static const int nodes[] = {0, 1, 2, 3}, ports[] = {0, 0, 0, 0};
	mg_switch(m, nodes, ports, 4);
	for (int t = 0; t < 2; t++) {
		mg_unhear(m, 0, 0, t, 3);
		mg_unhear(m, 3, 0, t, 0);
	}
	json_t *v = classify(m);
	assert_verdict(v, "switch", "fail");
	cr_assert_eq(count_findings(v, "switch_partial"), 2);
	assert_contains(vs(finding(v, "switch_partial"), "message"),
			"spark-1 port 0 does not hear spark-4");
	json_decref(v);
	json_decref(m);
}

Test(classify, switch_node_that_hears_nothing)
{
	json_t *m = mg_map(4);
	static const int nodes[] = {0, 1, 2}, ports[] = {0, 0, 0};
	mg_switch(m, nodes, ports, 3);
	json_t *v = classify(m);
	assert_verdict(v, "switch", "fail");
	json_t *f = need(v, "node_isolated");
	cr_assert_str_eq(vs(f, "message"), "spark-4 has link but hears nothing and no node hears it");
	assert_contains(vs(f, "fix"), "check that sparkd runs on spark-4");
	cr_assert(json_is_false(json_object_get(v, "any_to_any")));
	json_decref(v);
	json_decref(m);
}

Test(classify, switch_unplugged_node)
{
	json_t *m = mg_map(3);
	/* Two ports alone look like a pair: spark-2 puts both its ports on the switch. */
	static const int nodes3[] = {0, 1, 1}, ports3[] = {0, 0, 1};
	mg_switch(m, nodes3, ports3, 3);
	for (int p = 0; p < 2; p++)
		for (int t = 0; t < 2; t++)
			mg_set(m, 2, p, t, "carrier", json_false());
	json_t *v = classify(m);
	assert_verdict(v, "switch", "fail");
	cr_assert_str_eq(vs(need(v, "node_isolated"), "fix"), "cable spark-3 port 0 to the switch");
	json_t *two = need(v, "switch_two_ports");
	cr_assert_str_eq(vs(two, "severity"), "info");
	cr_assert_str_eq(vs(two, "message"), "spark-2 has both fabric ports on the switch");
	json_decref(v);
	json_decref(m);
}

Test(classify, switch_mtu_mismatch)
{
	json_t *m = mg_map(4);
	mg_set(m, 2, 0, 0, "mtu", json_integer(1500));
	static const int nodes[] = {0, 1, 2, 3}, ports[] = {0, 0, 0, 0};
	mg_switch(m, nodes, ports, 4);
	json_t *v = classify(m);
	assert_verdict(v, "switch", "fail");
	json_t *f = need(v, "mtu_mismatch");
	cr_assert_str_eq(vs(f, "message"),
			 "spark-3 enp1s0f0np0 has MTU 1500; the other ports on this switch use 9000");
	assert_contains(vs(f, "fix"), "set the MTU of spark-3 enp1s0f0np0 to 9000");
	json_decref(v);
	json_decref(m);
}

Test(classify, switch_ports_differ_is_info)
{
	json_t *m = mg_map(3);
	static const int nodes[] = {0, 1, 2}, ports[] = {0, 1, 0};
	mg_switch(m, nodes, ports, 3);
	json_t *v = classify(m);
	assert_verdict(v, "switch", "pass");
	json_t *f = need(v, "switch_ports_differ");
	cr_assert_str_eq(vs(f, "severity"), "info");
	assert_contains(vs(f, "message"), "spark-2 port 1");
	json_decref(v);
	json_decref(m);
}

Test(classify, switch_silent_twin)
{
	json_t *m = mg_map(3);
	static const int nodes[] = {0, 1, 2}, ports[] = {0, 0, 0};
	mg_switch(m, nodes, ports, 3);
	/* spark-2's twin 1 neither hears nor is heard. */
	mg_unhear(m, 1, 0, 1, 0);
	mg_unhear(m, 1, 0, 1, 2);
	for (int n = 0; n < 3; n += 2)
		for (int t = 0; t < 2; t++) {
			json_t *h = json_object_get(mg_twin(m, n, 0, t), "heard");
			for (size_t i = json_array_size(h); i-- > 0;)
				if (strcmp(json_string_value(json_object_get(json_array_get(h, i), "netdev")),
					   "enP2p1s0f0np0") == 0 &&
				    strcmp(json_string_value(json_object_get(json_array_get(h, i), "node_id")),
					   "id-2") == 0)
					json_array_remove(h, i);
		}
	json_t *v = classify(m);
	assert_verdict(v, "switch", "warn");
	json_t *f = need(v, "twin_silent");
	assert_contains(vs(f, "message"), "twin 1 of spark-2 port 0 (enP2p1s0f0np0)");
	json_decref(v);
	json_decref(m);
}

/* ---------------- frames, membership, degenerate maps ---------------- */

Test(classify, unknown_neighbour_and_dropped_frames)
{
	json_t *m = mg_map(2);
	mg_cable(m, 0, 0, 1, 0);
	json_array_append_new(json_object_get(mg_twin(m, 0, 0, 0), "heard"),
			      json_pack("{s:s, s:s, s:s, s:i, s:s, s:i}", "node_id", "id-x", "node_name",
					"stray", "port", "0", "twin", 0, "netdev", "enp1s0f0np0", "mtu",
					9000));
	mg_set(m, 1, 0, 1, "dropped", json_pack("{s:i, s:i}", "bad_hmac", 7, "other_cluster", 0));
	mg_set(m, 1, 0, 1, "bad_hmac_from", json_pack("{s:s, s:s}", "node_name", "evil", "mac",
						      "02:00:00:00:00:01"));
	mg_set(m, 0, 0, 1, "dropped", json_pack("{s:i, s:i}", "bad_hmac", 0, "other_cluster", 12));
	mg_set(m, 0, 0, 1, "other_clusters", json_pack("[s]", "c-other"));
	json_t *v = classify(m);
	assert_verdict(v, "pair", "warn");
	json_t *u = need(v, "unknown_neighbour");
	assert_contains(vs(u, "message"), "spark-1 enp1s0f0np0 hears node id-x (stray)");
	json_t *b = need(v, "bad_hmac_frames");
	cr_assert_str_eq(vs(b, "severity"), "info"); /* that twin still hears spark-1 */
	assert_contains(vs(b, "message"), "spark-2 enP2p1s0f0np0 dropped 7 discovery frames with a bad HMAC from evil (02:00:00:00:00:01)");
	json_t *o = need(v, "other_cluster_frames");
	cr_assert_str_eq(vs(o, "severity"), "info");
	assert_contains(vs(o, "message"), "another cluster c-other");
	json_decref(v);
	json_decref(m);
}

Test(classify, single_node_warns)
{
	json_t *m = mg_map(1);
	json_t *v = classify(m);
	assert_verdict(v, "unknown", "warn");
	need(v, "single_node");
	json_decref(v);
	json_decref(m);
}

Test(classify, no_nodes_fails)
{
	json_t *m = mg_map(0);
	json_t *v = classify(m);
	assert_verdict(v, "unknown", "fail");
	need(v, "no_nodes");
	json_decref(v);
	json_decref(m);
}

Test(classify, nothing_heard_is_unknown)
{
	json_t *m = mg_map(3);
	json_t *v = classify(m);
	assert_verdict(v, "unknown", "fail");
	cr_assert_eq(count_findings(v, "node_isolated"), 3);
	cr_assert_eq(json_array_size(json_object_get(v, "advice")), 0);
	json_decref(v);
	json_decref(m);
}

Test(classify, no_fabric_netdev)
{
	json_t *m = mg_map(3);
	mg_ring(m, 0, 2);
	json_object_set_new(json_array_get(json_object_get(m, "nodes"), 2), "ports", json_array());
	json_t *v = classify(m);
	cr_assert_str_eq(vs(v, "result"), "fail");
	json_t *f = need(v, "node_isolated");
	cr_assert_str_eq(vs(f, "message"), "spark-3 reports no fabric netdev");
	json_decref(v);
	json_decref(m);
}

Test(classify, nine_nodes_are_too_many)
{
	json_t *m = mg_map(9);
	mg_ring(m, 0, 9);
	json_t *v = classify(m);
	assert_verdict(v, "ring", "warn");
	need(v, "too_many_nodes");
	json_decref(v);
	json_decref(m);
}

Test(classify, expect_mismatch_fails)
{
	json_t *m = mg_map(4);
	mg_ring(m, 0, 4);
	json_t *v = classify_expect(m, "switch");
	assert_verdict(v, "ring", "fail");
	json_t *f = need(v, "expect_mismatch");
	cr_assert_str_eq(vs(f, "message"), "expected a switch, found a ring (4 nodes)");
	json_decref(v);
	v = classify_expect(m, "ring");
	assert_verdict(v, "ring", "pass");
	json_decref(v);
	json_decref(m);
	m = mg_map(3);
	for (int n = 0; n < 3; n++)
		for (int p = 0; p < 2; p++)
			for (int t = 0; t < 2; t++)
				mg_set(m, n, p, t, "carrier", json_false());
	v = classify_expect(m, "switch");
	assert_verdict(v, "unknown", "fail");
	cr_assert_str_eq(vs(need(v, "expect_mismatch"), "message"),
			 "expected a switch, found no topology (3 nodes)");
	cr_assert_str_eq(vs(need(v, "node_isolated"), "fix"), "cable spark-1 port 0 to the switch");
	json_decref(v);
	json_decref(m);
}

Test(classify, input_order_does_not_matter)
{
	json_t *m = mg_map(5);
	mg_ring(m, 0, 5);
	mg_unhear(m, 1, 0, 1, 2);
	json_t *v1 = classify(m);
	/* Reverse the node list and each twin's heard list. */
	json_t *nodes = json_object_get(m, "nodes");
	json_t *rev = json_array();
	for (size_t i = json_array_size(nodes); i-- > 0;)
		json_array_append(rev, json_array_get(nodes, i));
	json_object_set_new(m, "nodes", rev);
	json_t *v2 = classify(m);
	char *a = json_dumps(v1, JSON_SORT_KEYS), *b = json_dumps(v2, JSON_SORT_KEYS);
	cr_assert_str_eq(a, b);
	free(a);
	free(b);
	json_decref(v1);
	json_decref(v2);
	json_decref(m);
}

Test(classify, bad_maps_are_rejected)
{
	char err[256];
	json_t *v = NULL;
	json_t *m = json_pack("{s:i}", "x", 1);
	cr_assert_eq(topo_classify(m, NULL, &v, err, sizeof err), -EINVAL);
	assert_contains(err, "nodes");
	json_decref(m);
	m = mg_map(2);
	json_object_set_new(json_array_get(json_object_get(m, "nodes"), 1), "id", json_string("id-1"));
	cr_assert_eq(topo_classify(m, NULL, &v, err, sizeof err), -EINVAL);
	assert_contains(err, "twice");
	json_decref(m);
	m = mg_map(17);
	cr_assert_eq(topo_classify(m, NULL, &v, err, sizeof err), -EINVAL);
	json_decref(m);
	m = mg_map(2);
	struct topo_classify_opts o = {.expect = "mesh"};
	cr_assert_eq(topo_classify(m, &o, &v, err, sizeof err), -EINVAL);
	json_decref(m);
	cr_assert_null(v);
}

Test(classify, cablemap_from_discovery_and_snapshots)
{
	/* What the head receives from two nodes cabled port 0 <-> port 1. */
	json_t *disc = json_pack(
	    "{s:[{s:s, s:[{s:s, s:b, s:i}, {s:s, s:b, s:i}]}, {s:s, s:[{s:s, s:b, s:i}, {s:s, s:b, s:i}]}]}",
	    "ports", "name", "0", "twins", "netdev", "enp1s0f0np0", "carrier", 1, "mtu", 9000, "netdev",
	    "enP2p1s0f0np0", "carrier", 1, "mtu", 9000, "name", "1", "twins", "netdev", "enp1s0f1np1",
	    "carrier", 0, "mtu", 9000, "netdev", "enP2p1s0f1np1", "carrier", 0, "mtu", 9000);
	json_t *snap_a = json_pack(
	    "{s:[{s:s, s:s, s:i, s:i, s:[{s:s, s:s, s:s, s:i, s:s, s:i}], s:{s:i, s:i}},"
	    "    {s:s, s:s, s:i, s:i, s:[{s:s, s:s, s:s, s:i, s:s, s:i}]}]}",
	    "interfaces", "netdev", "enp1s0f0np0", "port", "0", "twin", 0, "mtu", 9000, "neighbours",
	    "node_id", "id-2", "node_name", "spark-2", "port", "1", "twin", 0, "netdev", "enp1s0f1np1",
	    "mtu", 9000, "dropped", "bad_hmac", 0, "other_cluster", 0, "netdev", "enP2p1s0f0np0", "port",
	    "0", "twin", 1, "mtu", 9000, "neighbours", "node_id", "id-2", "node_name", "spark-2", "port",
	    "1", "twin", 1, "netdev", "enP2p1s0f1np1", "mtu", 9000);
	json_t *snap_b = json_pack(
	    "{s:[{s:s, s:s, s:i, s:i, s:[{s:s, s:s, s:s, s:i, s:s, s:i}]},"
	    "    {s:s, s:s, s:i, s:i, s:[{s:s, s:s, s:s, s:i, s:s, s:i}]}]}",
	    "interfaces", "netdev", "enp1s0f1np1", "port", "1", "twin", 0, "mtu", 9000, "neighbours",
	    "node_id", "id-1", "node_name", "spark-1", "port", "0", "twin", 0, "netdev", "enp1s0f0np0",
	    "mtu", 9000, "netdev", "enP2p1s0f1np1", "port", "1", "twin", 1, "mtu", 9000, "neighbours",
	    "node_id", "id-1", "node_name", "spark-1", "port", "0", "twin", 1, "netdev", "enP2p1s0f0np0",
	    "mtu", 9000);
	json_t *in = json_pack("[{s:s, s:s, s:O, s:o}, {s:s, s:s, s:n, s:o}]", "id", "id-1", "name",
			       "spark-1", "discovery", disc, "l2disc", snap_a, "id", "id-2", "name",
			       "spark-2", "discovery", "l2disc", snap_b);
	json_t *map = NULL;
	cr_assert_eq(topo_cablemap_build(in, &map), 0);
	json_t *n1 = json_array_get(json_object_get(map, "nodes"), 0);
	cr_assert_eq(json_array_size(json_object_get(n1, "ports")), 2);
	json_t *t0 = json_array_get(json_object_get(json_array_get(json_object_get(n1, "ports"), 0),
						    "twins"), 0);
	cr_assert_str_eq(vs(json_array_get(json_object_get(t0, "heard"), 0), "node_id"), "id-2");
	cr_assert(json_is_object(json_object_get(t0, "dropped")));
	json_t *n2 = json_array_get(json_object_get(map, "nodes"), 1);
	cr_assert_eq(json_array_size(json_object_get(n2, "ports")), 1); /* from its snapshot only */
	json_t *v = classify(map);
	assert_verdict(v, "pair", "pass");
	need(v, "pair_ports_differ");
	json_decref(v);
	json_decref(map);
	json_decref(in);
	json_decref(disc);
}

Test(classify, node_with_another_secret)
{
	json_t *m = mg_map(3);
	mg_cable(m, 0, 0, 1, 1);
	for (int p = 0; p < 2; p++)
		for (int t = 0; t < 2; t++)
			mg_set(m, 2, p, t, "dropped", json_pack("{s:i, s:i}", "bad_hmac", 5, "other_cluster", 0));
	json_t *v = classify(m);
	assert_verdict(v, "ring", "fail");
	json_t *iso = need(v, "node_isolated");
	cr_assert_str_eq(vs(iso, "message"),
			 "spark-3 hears only frames with a bad HMAC and no node hears it");
	assert_contains(vs(iso, "fix"), "re-join spark-3");
	cr_assert_str_eq(vs(need(v, "bad_hmac_frames"), "severity"), "warn");
	cr_assert_eq(count_findings(v, "bad_hmac_frames"), 4);
	json_decref(v);
	json_decref(m);
}

/* ---------------- issue 16 ---------------- */

static json_t *classify_opts(json_t *m, const struct topo_classify_opts *o)
{
	json_t *v = NULL;
	char err[256];
	cr_assert_eq(topo_classify(m, o, &v, err, sizeof err), 0, "classify failed: %s", err);
	return v;
}

/* Two nodes cabled with both ports (a ring of 2): --expect ring accepts it. */
Test(classify, ring_of_two_is_a_ring)
{
	json_t *m = mg_map(2);
	mg_cable(m, 0, 0, 1, 1);
	mg_cable(m, 1, 0, 0, 1);
	json_t *v = classify_expect(m, "ring");
	assert_verdict(v, "pair", "pass");
	cr_assert_null(finding(v, "expect_mismatch"));
	json_decref(v);
	v = classify_expect(m, "switch");
	assert_verdict(v, "pair", "fail");
	need(v, "expect_mismatch");
	json_decref(v);
	json_decref(m);
}

/* One twin admin-down on spark-3 only (end b of the spark-2 -> spark-3
 * cable): both ends lose carrier; the fix names spark-3's netdev, not
 * spark-2's, which is up. */
Test(classify, twin_silent_names_the_end_that_is_down)
{
	json_t *m = mg_map(4);
	mg_ring(m, 0, 4);
	mg_unhear(m, 1, 0, 0, 2);
	mg_unhear(m, 2, 1, 0, 1);
	mg_set(m, 1, 0, 0, "carrier", json_false());
	mg_set(m, 1, 0, 0, "admin_up", json_true());
	mg_set(m, 2, 1, 0, "carrier", json_false());
	mg_set(m, 2, 1, 0, "admin_up", json_false());
	json_t *v = classify(m);
	assert_verdict(v, "ring", "warn");
	json_t *f = need(v, "twin_silent");
	cr_assert_str_eq(vs(f, "fix"),
			 "bring enp1s0f1np1 up on spark-3 (`ip link set enp1s0f1np1 up`; netplan must list it)");
	assert_contains(vs(f, "message"), "enp1s0f1np1 is administratively down on spark-3");
	json_decref(v);
	/* both ends down: both named */
	mg_set(m, 1, 0, 0, "admin_up", json_false());
	v = classify(m);
	f = need(v, "twin_silent");
	assert_contains(vs(f, "fix"), "bring enp1s0f0np0 up on spark-2 and enp1s0f1np1 up on spark-3");
	json_decref(v);
	/* admin state unknown on both, no carrier on both: it says it cannot tell */
	mg_set(m, 1, 0, 0, "admin_up", json_null());
	mg_set(m, 2, 1, 0, "admin_up", json_null());
	v = classify(m);
	f = need(v, "twin_silent");
	assert_contains(vs(f, "fix"), "cannot tell which end is down");
	assert_contains(vs(f, "fix"), "`ip link show enp1s0f0np0` on spark-2");
	assert_contains(vs(f, "fix"), "`ip link show enp1s0f1np1` on spark-3");
	json_decref(v);
	json_decref(m);
}

/* A cluster at MTU 1500 (fabric.mtu) where one end went to 9000: the fix
 * puts the 9000 end back to 1500; once a whole cable is at 9000 the ends
 * agree, and the cluster's mixed MTU is reported (warn). */
static json_t *ring4_mtu(int a_mtu, int b_mtu)
{
	json_t *m = mg_map(4);
	for (int n = 0; n < 4; n++)
		for (int p = 0; p < 2; p++)
			for (int t = 0; t < 2; t++)
				mg_set(m, n, p, t, "mtu", json_integer(1500));
	/* cable spark-3 port 0 <-> spark-4 port 1 */
	for (int t = 0; t < 2; t++) {
		mg_set(m, 2, 0, t, "mtu", json_integer(a_mtu));
		mg_set(m, 3, 1, t, "mtu", json_integer(b_mtu));
	}
	mg_ring(m, 0, 4);
	return m;
}

Test(classify, mtu_fix_follows_the_cluster_mtu)
{
	json_t *m = ring4_mtu(1500, 9000);
	struct topo_classify_opts o = {.mtu = 1500};
	json_t *v = classify_opts(m, &o);
	assert_verdict(v, "ring", "fail");
	json_t *f = need(v, "mtu_mismatch");
	assert_contains(vs(f, "fix"), "set the MTU of spark-4 enp1s0f1np1 to 1500");
	cr_assert_eq(json_integer_value(json_object_get(v, "cluster_mtu")), 1500);
	json_decref(v);
	/* without fabric.mtu: the MTU most twins have (1500), not the larger */
	v = classify(m);
	assert_contains(vs(need(v, "mtu_mismatch"), "fix"), "set the MTU of spark-4 enp1s0f1np1 to 1500");
	json_decref(v);
	json_decref(m);
	/* both ends at 9000: the cable agrees, the cluster does not */
	m = ring4_mtu(9000, 9000);
	v = classify_opts(m, &o);
	assert_verdict(v, "ring", "warn");
	cr_assert_null(finding(v, "mtu_mismatch"));
	f = need(v, "mtu_mixed");
	assert_contains(vs(f, "message"), "spark-3 port 0 <-> spark-4 port 1 (9000)");
	assert_contains(vs(f, "message"), "the others at 1500 (fabric.mtu)");
	assert_contains(vs(f, "fix"), "to 1500");
	json_decref(v);
	/* fabric.mtu 9000 while only that cable has it: the other three are named */
	o.mtu = 9000;
	v = classify_opts(m, &o);
	f = need(v, "mtu_mixed");
	assert_contains(vs(f, "message"), "spark-1 port 0 <-> spark-2 port 1 (1500)");
	cr_assert_eq(json_array_size(json_object_get(f, "ends")), 6);
	json_decref(v);
	json_decref(m);
}

/* A triangle: one-shot works, tree works; the verdict and advice say so. */
Test(classify, triangle_is_a_full_mesh)
{
	json_t *m = mg_map(3);
	mg_ring(m, 0, 3);
	json_t *v = classify_expect(m, "ring");
	assert_verdict(v, "ring", "pass");
	cr_assert(json_is_true(json_object_get(v, "any_to_any")));
	cr_assert(json_is_true(json_object_get(v, "mesh")));
	cr_assert(has_advice(v, "ring3_full_mesh"));
	cr_assert_not(has_advice(v, "ring_no_any_to_any"));
	json_decref(v);
	/* a 3-node chain is not */
	mg_unhear(m, 2, 0, 0, 0);
	mg_unhear(m, 2, 0, 1, 0);
	mg_unhear(m, 0, 1, 0, 2);
	mg_unhear(m, 0, 1, 1, 2);
	v = classify(m);
	cr_assert(json_is_false(json_object_get(v, "mesh")));
	cr_assert(json_is_false(json_object_get(v, "any_to_any")));
	json_decref(v);
	json_decref(m);
}

/* Nodes 1-3 joined, cabled in a 4-ring with a machine that has not joined
 * (the map holds only members): the chain's ends have link and hear no
 * member. Not a missing cable: a machine to join. */
Test(classify, unjoined_machine_on_a_ring)
{
	json_t *m = mg_map(3);
	mg_cable(m, 0, 0, 1, 1);
	mg_cable(m, 1, 0, 2, 1);
	json_t *v = classify_expect(m, "ring");
	assert_verdict(v, "ring", "warn");
	cr_assert_null(finding(v, "missing_cable"));
	json_t *f = need(v, "unjoined_node");
	assert_contains(vs(f, "message"), "spark-3 port 0 and spark-1 port 1 have link");
	assert_contains(vs(f, "fix"), "sparkctl join");
	assert_contains(vs(f, "fix"), "the cabling is right");
	cr_assert_null(json_object_get(v, "proposed_ring_order"), "no recabling to propose");
	json_decref(v);
	/* the frames it sent carried a MAC: the message gives it */
	mg_set(m, 0, 1, 0, "bad_hmac_from", json_pack("{s:s, s:s}", "node_name", "x", "mac",
						       "02:00:00:00:00:09"));
	v = classify(m);
	assert_contains(vs(need(v, "unjoined_node"), "message"), "MAC 02:00:00:00:00:09");
	json_decref(v);
	/* spark-1 port 1 without link: only one end has a machine; the fix says
	 * to join it and cable its other port to spark-1 port 1 */
	for (int t = 0; t < 2; t++)
		mg_set(m, 0, 1, t, "carrier", json_false());
	v = classify(m);
	assert_verdict(v, "ring", "fail");
	f = need(v, "unjoined_node");
	assert_contains(vs(f, "fix"), "join the machine on spark-3 port 0");
	assert_contains(vs(f, "fix"), "cable its other port to spark-1 port 1");
	json_decref(v);
	/* neither end has link: a missing cable, as before */
	for (int t = 0; t < 2; t++)
		mg_set(m, 2, 0, t, "carrier", json_false());
	v = classify(m);
	need(v, "missing_cable");
	cr_assert_null(finding(v, "unjoined_node"));
	json_decref(v);
	json_decref(m);
}

/* A node heard after `sparkctl leave` is known: it left (info), not an
 * unknown neighbour to join or unplug (warn). */
Test(classify, node_that_left_is_known)
{
	json_t *m = mg_map(3);
	mg_ring(m, 0, 3);
	json_t *h = json_object_get(mg_twin(m, 0, 0, 0), "heard");
	json_array_append_new(h, json_pack("{s:s, s:s, s:s, s:i, s:s}", "node_id", "id-9", "node_name",
					   "spark-9", "port", "1", "twin", 0, "netdev", "enp1s0f1np1"));
	json_t *v = classify(m);
	need(v, "unknown_neighbour");
	json_decref(v);
	json_object_set_new(m, "former", json_pack("[{s:s, s:s, s:i}]", "name", "spark-9", "how",
						   "left", "ago_s", 3));
	v = classify(m);
	assert_verdict(v, "ring", "pass");
	cr_assert_null(finding(v, "unknown_neighbour"));
	json_t *f = need(v, "node_left");
	cr_assert_str_eq(vs(f, "severity"), "info");
	assert_contains(vs(f, "message"), "spark-9 on port 1, which left (sparkctl leave) the cluster 3s ago");
	json_decref(v);
	json_decref(m);
}

/* NVIDIA's detection script on the wire: an info finding with its MAC. */
Test(classify, foreign_discovery_tool)
{
	json_t *m = mg_map(2);
	mg_cable(m, 0, 0, 1, 0);
	mg_set(m, 1, 0, 0, "foreign", json_pack("{s:s, s:s, s:i}", "mac", "02:aa:bb:cc:dd:ee",
						  "tool", "nvidia_topo_discover", "frames", 7));
	json_t *v = classify(m);
	assert_verdict(v, "pair", "pass");
	json_t *f = need(v, "foreign_discovery");
	cr_assert_str_eq(vs(f, "severity"), "info");
	assert_contains(vs(f, "message"), "NVIDIA's detection script");
	assert_contains(vs(f, "message"), "02:aa:bb:cc:dd:ee");
	assert_contains(vs(f, "fix"), "netplan");
	json_decref(v);
	json_decref(m);
}

/* Issue 16: no message is cut off, even for 16 nodes with 63-byte names. */
Test(classify, long_names_are_never_cut_off)
{
	json_t *m = mg_map(16);
	char names[16][64];
	for (int i = 0; i < 16; i++) {
		snprintf(names[i], sizeof names[i], "rack-seven-row-b-a-rather-long-spark-node-name-%02d", i);
		memset(names[i] + strlen(names[i]), 'x', 63 - strlen(names[i]));
		names[i][63] = '\0';
		json_object_set_new(json_array_get(json_object_get(m, "nodes"), (size_t)i), "name",
				    json_string(names[i]));
	}
	for (int i = 0; i + 1 < 16; i++)
		mg_cable(m, i, 0, i + 1, 1);
	mg_unplug(m, 15, 0);
	mg_unplug(m, 0, 1);
	json_t *v = classify(m);
	json_t *f = need(v, "missing_cable");
	const char *msg = vs(f, "message");
	for (int i = 0; i < 16; i++)
		cr_assert(strstr(msg, names[i]), "%s lacks %s", msg, names[i]);
	size_t l = strlen(msg);
	cr_assert(l > 20 && strcmp(msg + l - strlen("is missing"), "is missing") == 0, "cut off: %s", msg);
	json_decref(v);
	json_decref(m);
}

/* Addressing plans (pure) and netplan rendering. */
#include "topology/addrplan.h"
#include "topology/classify.h"

#include "mapgen.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static json_t *verdict_of(json_t *m)
{
	json_t *v = NULL;
	char err[256];
	cr_assert_eq(topo_classify(m, NULL, &v, err, sizeof err), 0, "%s", err);
	return v;
}

static json_t *plan_of(json_t *v, const char *pool, int prefix)
{
	struct topo_addrplan_opts o = {pool, prefix};
	json_t *p = NULL;
	char err[256];
	int r = topo_addrplan_make(v, &o, &p, err, sizeof err);
	cr_assert_eq(r, 0, "plan: %s", err);
	return p;
}

static const char *js(json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }

/* The subnet holding this node's netdev. */
static const char *subnet_of(json_t *plan, const char *node, const char *netdev)
{
	size_t i;
	json_t *e;
	json_array_foreach(json_object_get(json_object_get(plan, "nodes"), node), i, e)
		if (strcmp(js(e, "netdev"), netdev) == 0)
			return js(e, "subnet");
	return NULL;
}

static const char *addr_of(json_t *plan, const char *node, const char *netdev)
{
	size_t i;
	json_t *e;
	json_array_foreach(json_object_get(json_object_get(plan, "nodes"), node), i, e)
		if (strcmp(js(e, "netdev"), netdev) == 0)
			return js(e, "address");
	return NULL;
}

Test(addrplan, ring_one_subnet_per_twin_per_cable)
{
	json_t *m = mg_map(4);
	mg_ring(m, 0, 4);
	json_t *v = verdict_of(m);
	json_t *p = plan_of(v, TOPO_ADDR_SIM_POOL, 0);
	cr_assert_str_eq(js(p, "pool"), "169.254.0.0/16");
	cr_assert_eq(json_integer_value(json_object_get(p, "prefix")), 24);
	json_t *subs = json_object_get(p, "subnets");
	cr_assert_eq(json_array_size(subs), 8);
	for (size_t i = 0; i < 8; i++) {
		const char *s = js(json_array_get(subs, i), "subnet");
		cr_assert(strncmp(s, "169.254.", 8) == 0, "%s", s);
		cr_assert(strcmp(s, "169.254.0.0/24") != 0 && strcmp(s, "169.254.255.0/24") != 0);
		for (size_t j = 0; j < i; j++)
			cr_assert_str_neq(s, js(json_array_get(subs, j), "subnet"));
		json_t *mem = json_object_get(json_array_get(subs, i), "members");
		cr_assert_eq(json_array_size(mem), 2);
		const char *a = js(json_array_get(mem, 0), "address"), *b = js(json_array_get(mem, 1), "address");
		cr_assert(strstr(a, ".1/24") && strstr(b, ".2/24"), "%s %s", a, b);
	}
	/* spark-1 port 0 twin 0 <-> spark-2 port 1 twin 0 share a subnet; twins differ. */
	const char *s1 = subnet_of(p, "spark-1", "enp1s0f0np0");
	cr_assert_str_eq(s1, subnet_of(p, "spark-2", "enp1s0f1np1"));
	cr_assert_str_neq(s1, subnet_of(p, "spark-1", "enP2p1s0f0np0"));
	cr_assert_str_neq(s1, subnet_of(p, "spark-1", "enp1s0f1np1"));
	cr_assert_eq(json_array_size(json_object_get(json_object_get(p, "nodes"), "spark-3")), 4);
	/* Peers: the other end, without prefix. */
	json_t *e = json_array_get(json_object_get(json_object_get(p, "nodes"), "spark-1"), 0);
	cr_assert_eq(json_array_size(json_object_get(e, "peers")), 1);
	cr_assert_null(strchr(json_string_value(json_array_get(json_object_get(e, "peers"), 0)), '/'));
	json_decref(p);
	json_decref(v);
	json_decref(m);
}

Test(addrplan, same_cabling_same_plan_and_other_cables_keep_theirs)
{
	json_t *m = mg_map(4);
	mg_ring(m, 0, 4);
	json_t *v = verdict_of(m);
	json_t *p1 = plan_of(v, TOPO_ADDR_SIM_POOL, 0), *p2 = plan_of(v, TOPO_ADDR_SIM_POOL, 0);
	char *a = json_dumps(p1, JSON_SORT_KEYS), *b = json_dumps(p2, JSON_SORT_KEYS);
	cr_assert_str_eq(a, b);
	free(a);
	free(b);
	/* Cut spark-2 port 0 <-> spark-3 port 1: the other cables keep their subnets. */
	json_t *m2 = mg_map(4);
	mg_cable(m2, 0, 0, 1, 1);
	mg_cable(m2, 2, 0, 3, 1);
	mg_cable(m2, 3, 0, 0, 1);
	json_t *v2 = verdict_of(m2);
	json_t *p3 = plan_of(v2, TOPO_ADDR_SIM_POOL, 0);
	cr_assert_eq(json_array_size(json_object_get(p3, "subnets")), 6);
	static const char *const keep[][2] = {{"spark-1", "enp1s0f0np0"}, {"spark-3", "enP2p1s0f0np0"},
					      {"spark-4", "enp1s0f0np0"}, {"spark-1", "enP2p1s0f1np1"}};
	for (size_t i = 0; i < 4; i++)
		cr_assert_str_eq(addr_of(p1, keep[i][0], keep[i][1]), addr_of(p3, keep[i][0], keep[i][1]));
	cr_assert_null(addr_of(p3, "spark-2", "enp1s0f0np0"));
	json_decref(p1);
	json_decref(p2);
	json_decref(p3);
	json_decref(v);
	json_decref(v2);
	json_decref(m);
	json_decref(m2);
}

Test(addrplan, pair_and_default_pool)
{
	json_t *m = mg_map(2);
	mg_cable(m, 0, 0, 1, 0);
	json_t *v = verdict_of(m);
	json_t *p = plan_of(v, NULL, 0);
	cr_assert_str_eq(js(p, "pool"), TOPO_ADDR_DEFAULT_POOL);
	cr_assert_eq(json_array_size(json_object_get(p, "subnets")), 2);
	cr_assert(strncmp(addr_of(p, "spark-2", "enP2p1s0f0np0"), "10.77.", 6) == 0);
	json_decref(p);
	json_decref(v);
	json_decref(m);
}

Test(addrplan, switch_one_subnet_per_rail)
{
	json_t *m = mg_map(4);
	static const int nodes[] = {0, 1, 2, 3, 3}, ports[] = {0, 0, 0, 0, 1};
	mg_switch(m, nodes, ports, 5); /* spark-4 has both ports on the switch */
	json_t *v = verdict_of(m);
	cr_assert_str_eq(js(v, "class"), "switch");
	json_t *p = plan_of(v, "169.254.0.0/16", 24);
	json_t *subs = json_object_get(p, "subnets");
	cr_assert_eq(json_array_size(subs), 2);
	for (size_t i = 0; i < 2; i++) {
		json_t *s = json_array_get(subs, i);
		cr_assert_eq(json_integer_value(json_object_get(s, "rail")), (json_int_t)i);
		cr_assert_eq(json_array_size(json_object_get(s, "members")), 4);
	}
	/* Twin 0 of every node in one subnet, twin 1 in the other. */
	cr_assert_str_eq(subnet_of(p, "spark-1", "enp1s0f0np0"), subnet_of(p, "spark-3", "enp1s0f0np0"));
	cr_assert_str_neq(subnet_of(p, "spark-1", "enp1s0f0np0"), subnet_of(p, "spark-1", "enP2p1s0f0np0"));
	/* Only one port of spark-4 gets addresses. */
	cr_assert_eq(json_array_size(json_object_get(json_object_get(p, "nodes"), "spark-4")), 2);
	cr_assert_not_null(addr_of(p, "spark-4", "enp1s0f0np0"));
	/* Each node keeps its host number on both rails; peers are the 3 others. */
	const char *a0 = addr_of(p, "spark-2", "enp1s0f0np0"), *a1 = addr_of(p, "spark-2", "enP2p1s0f0np0");
	cr_assert_str_eq(strrchr(a0, '.'), strrchr(a1, '.'));
	json_t *e = json_array_get(json_object_get(json_object_get(p, "nodes"), "spark-2"), 0);
	cr_assert_eq(json_array_size(json_object_get(e, "peers")), 3);
	json_decref(p);
	json_decref(v);
	json_decref(m);
}

Test(addrplan, bad_pools_and_verdicts)
{
	json_t *m = mg_map(4);
	mg_ring(m, 0, 4);
	json_t *v = verdict_of(m);
	char err[256];
	json_t *p = NULL;
	static const char *const bad[] = {"169.254.0.0", "169.254.0.1/16", "fe80::/10", "10.0.0.0/33",
					  "x/16", "169.254.0.0/"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct topo_addrplan_opts o = {bad[i], 0};
		cr_assert_eq(topo_addrplan_make(v, &o, &p, err, sizeof err), -EINVAL, "%s", bad[i]);
	}
	struct topo_addrplan_opts small = {"169.254.0.0/16", 18}; /* 2 usable subnets, 8 needed */
	cr_assert_eq(topo_addrplan_make(v, &small, &p, err, sizeof err), -EINVAL);
	cr_assert(strstr(err, "too few"), "%s", err);
	struct topo_addrplan_opts tiny = {"169.254.0.0/16", 17};
	cr_assert_eq(topo_addrplan_make(v, &tiny, &p, err, sizeof err), -EINVAL);
	cr_assert_null(p);
	json_t *u = json_pack("{s:s, s:[]}", "class", "unknown", "cables");
	cr_assert_eq(topo_addrplan_make(u, NULL, &p, err, sizeof err), -EINVAL);
	cr_assert(strstr(err, "fix the cabling"));
	json_decref(u);
	json_decref(v);
	json_decref(m);
}

Test(addrplan, netplan_for_one_node)
{
	json_t *m = mg_map(2);
	mg_cable(m, 0, 0, 1, 0);
	json_t *v = verdict_of(m);
	json_t *p = plan_of(v, TOPO_ADDR_SIM_POOL, 24);
	char *y = NULL, err[256];
	cr_assert_eq(topo_addrplan_netplan(p, "spark-1", 9000, &y, err, sizeof err), 0);
	char want[2048];
	snprintf(want, sizeof want,
		 "# /etc/netplan/40-sparkctl.yaml: fabric addresses of spark-1, written by sparkctl\n"
		 "# (pair plan from pool 169.254.0.0/16). Apply with `netplan apply`. After recabling,\n"
		 "# run `sparkctl topo validate` and write this file again. Remove other files\n"
		 "# that configure these netdevs (NVIDIA's 40-cx7.yaml): netplan merges them.\n"
		 "network:\n"
		 "  version: 2\n"
		 "  ethernets:\n"
		 "    enP2p1s0f0np0:\n"
		 "      dhcp4: false\n"
		 "      dhcp6: false\n"
		 "      optional: true\n"
		 "      mtu: 9000\n"
		 "      addresses:\n"
		 "        - %s\n"
		 "    enp1s0f0np0:\n"
		 "      dhcp4: false\n"
		 "      dhcp6: false\n"
		 "      optional: true\n"
		 "      mtu: 9000\n"
		 "      addresses:\n"
		 "        - %s\n",
		 addr_of(p, "spark-1", "enP2p1s0f0np0"), addr_of(p, "spark-1", "enp1s0f0np0"));
	cr_assert_str_eq(y, want);
	char dir[] = "/tmp/sparkplanXXXXXX";
	cr_assert_not_null(mkdtemp(dir));
	char path[256];
	snprintf(path, sizeof path, "%s/40-sparkctl.yaml", dir);
	cr_assert_eq(topo_addrplan_write_netplan(path, y), 0);
	struct stat st;
	cr_assert_eq(stat(path, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0600);
	unlink(path);
	rmdir(dir);
	free(y);
	cr_assert_eq(topo_addrplan_netplan(p, "spark-9", 0, &y, err, sizeof err), -EINVAL);
	json_decref(p);
	json_decref(v);
	json_decref(m);
}

/* ---- the members' own networks (verdict "host_addresses") ---- */

/* The verdict with one address of one member's non-fabric netdev added. */
static void add_host_addr(json_t *v, const char *node, const char *netdev, const char *addr)
{
	json_t *h = json_object_get(v, "host_addresses");
	if (!h) {
		h = json_object();
		json_object_set_new(v, "host_addresses", h);
	}
	json_t *l = json_object_get(h, node);
	if (!l) {
		l = json_array();
		json_object_set_new(h, node, l);
	}
	json_array_append_new(l, addr ? json_pack("{s:s, s:s}", "netdev", netdev, "address", addr)
				       : json_pack("{s:s}", "netdev", netdev));
}

static bool plan_uses(json_t *plan, const char *subnet)
{
	size_t i;
	json_t *s;
	json_array_foreach(json_object_get(plan, "subnets"), i, s)
		if (strcmp(js(s, "subnet"), subnet) == 0)
			return true;
	return false;
}

Test(addrplan, a_members_lan_inside_the_pool_is_never_planned_over)
{
	json_t *m = mg_map(4);
	mg_ring(m, 0, 4);
	json_t *v = verdict_of(m);
	json_t *p1 = plan_of(v, NULL, 0);
	cr_assert_eq(json_array_size(json_object_get(p1, "avoided")), 0);
	/* spark-3's office LAN happens to be the subnet the plan gave a cable. */
	char lan_net[40], lan_addr[40];
	snprintf(lan_net, sizeof lan_net, "%s", subnet_of(p1, "spark-1", "enp1s0f0np0"));
	snprintf(lan_addr, sizeof lan_addr, "%.*s23/24", (int)(strrchr(lan_net, '.') - lan_net + 1), lan_net);
	add_host_addr(v, "spark-3", "enP7s7", lan_addr);
	json_t *p2 = plan_of(v, NULL, 0);
	cr_assert(!plan_uses(p2, lan_net), "%s still planned", lan_net);
	cr_assert_eq(json_array_size(json_object_get(p2, "subnets")), 8);
	json_t *av = json_array_get(json_object_get(p2, "avoided"), 0);
	cr_assert_str_eq(js(av, "node"), "spark-3");
	cr_assert_str_eq(js(av, "netdev"), "enP7s7");
	cr_assert_str_eq(js(av, "address"), lan_addr);
	cr_assert_str_eq(js(av, "blocked"), lan_net);
	cr_assert(json_is_false(json_object_get(av, "contains_pool")));
	/* Only that cable moved. */
	static const char *const ends[][2] = {{"spark-1", "enP2p1s0f0np0"}, {"spark-2", "enp1s0f0np0"},
					      {"spark-3", "enp1s0f0np0"}, {"spark-4", "enP2p1s0f0np0"}};
	for (size_t i = 0; i < 4; i++)
		if (strcmp(subnet_of(p1, ends[i][0], ends[i][1]), lan_net) != 0)
			cr_assert_str_eq(addr_of(p1, ends[i][0], ends[i][1]), addr_of(p2, ends[i][0], ends[i][1]));
	json_decref(p1);
	json_decref(p2);
	json_decref(v);
	json_decref(m);
}

Test(addrplan, a_wide_lan_inside_the_pool_blocks_every_subnet_it_covers)
{
	json_t *m = mg_map(4);
	mg_ring(m, 0, 4);
	json_t *v = verdict_of(m);
	add_host_addr(v, "spark-2", "enP7s7", "10.77.64.9/17"); /* 10.77.0.0/17: half the pool */
	json_t *p = plan_of(v, NULL, 0);
	size_t i;
	json_t *s;
	json_array_foreach(json_object_get(p, "subnets"), i, s) {
		int third = -1;
		sscanf(js(s, "subnet"), "10.77.%d.", &third);
		cr_assert(third >= 128, "%s is inside spark-2's 10.77.0.0/17", js(s, "subnet"));
	}
	cr_assert_str_eq(js(json_array_get(json_object_get(p, "avoided"), 0), "blocked"), "10.77.0.0/17");
	json_decref(p);
	json_decref(v);
	json_decref(m);
}

Test(addrplan, a_network_holding_the_pool_blocks_only_the_members_own_subnet)
{
	json_t *m = mg_map(2);
	mg_cable(m, 0, 0, 1, 0);
	json_t *v = verdict_of(m);
	json_t *p1 = plan_of(v, NULL, 0);
	char sub[40], addr[40];
	snprintf(sub, sizeof sub, "%s", js(json_array_get(json_object_get(p1, "subnets"), 0), "subnet"));
	snprintf(addr, sizeof addr, "%.*s7/8", (int)(strrchr(sub, '.') - sub + 1), sub);
	add_host_addr(v, "spark-1", "enP7s7", addr);          /* a 10.0.0.0/8 LAN around the pool */
	add_host_addr(v, "spark-2", "wlP9s9", "10.1.2.3/8");  /* the same LAN, address outside the pool */
	json_t *p2 = plan_of(v, NULL, 0);
	cr_assert(!plan_uses(p2, sub));
	cr_assert_eq(json_array_size(json_object_get(p2, "subnets")), 2);
	json_t *av = json_object_get(p2, "avoided");
	cr_assert_eq(json_array_size(av), 2);
	cr_assert_str_eq(js(json_array_get(av, 0), "blocked"), sub);
	cr_assert(json_is_true(json_object_get(json_array_get(av, 0), "contains_pool")));
	cr_assert(json_is_null(json_object_get(json_array_get(av, 1), "blocked")) ||
		  !json_object_get(json_array_get(av, 1), "blocked"));
	cr_assert(json_is_true(json_object_get(json_array_get(av, 1), "contains_pool")));
	json_decref(p1);
	json_decref(p2);
	json_decref(v);
	json_decref(m);
}

Test(addrplan, unrelated_or_malformed_host_addresses_change_nothing)
{
	json_t *m = mg_map(4);
	mg_ring(m, 0, 4);
	json_t *v = verdict_of(m);
	json_t *p1 = plan_of(v, NULL, 0);
	add_host_addr(v, "spark-1", "enP7s7", "192.0.2.10/24");
	add_host_addr(v, "spark-1", "enP7s7", "169.254.3.3/16");
	add_host_addr(v, "spark-2", "x", "nonsense");
	add_host_addr(v, "spark-2", "x", "10.77.9.9/40");
	add_host_addr(v, "spark-2", "x", "10.77.9.9");
	add_host_addr(v, "spark-2", "x", NULL);
	json_object_set_new(json_object_get(v, "host_addresses"), "spark-3", json_string("not a list"));
	json_t *p2 = plan_of(v, NULL, 0);
	cr_assert(json_equal(json_object_get(p1, "nodes"), json_object_get(p2, "nodes")));
	cr_assert_eq(json_array_size(json_object_get(p2, "avoided")), 0);
	json_decref(p1);
	json_decref(p2);
	json_decref(v);
	json_decref(m);
}

Test(addrplan, a_pool_the_members_networks_fill_up_is_refused_with_the_reason)
{
	json_t *m = mg_map(2);
	mg_cable(m, 0, 0, 1, 0);
	json_t *v = verdict_of(m);
	add_host_addr(v, "spark-1", "enP7s7", "10.77.1.5/24"); /* of 10.77.0.0/22: .1 and .2 usable */
	struct topo_addrplan_opts o = {"10.77.0.0/22", 24};
	json_t *p = NULL;
	char err[256];
	cr_assert_eq(topo_addrplan_make(v, &o, &p, err, sizeof err), -EINVAL);
	cr_assert_null(p);
	cr_assert(strstr(err, "too few") && strstr(err, "keeping clear of 1 network"), "%s", err);
	json_decref(v);
	json_decref(m);
}

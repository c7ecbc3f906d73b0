/* topo_addrplan_apply() in a network namespace: adds, removes stale pool
 * addresses, leaves others, and a second run changes nothing. Pool
 * 169.254.0.0/17; the "foreign" address is 169.254.200.1 (outside the pool,
 * still link-local) and fd00::1. */
#include "topology/addrplan.h"
#include "topology/classify.h"

#include "mapgen.h"
#include "nsharness.h"

#include <criterion/criterion.h>

static json_t *g_plan;

static json_t *ip_addrs(void)
{
	json_t *a = json_array();
	FILE *f = popen("ip -o addr show 2>/dev/null | awk '{print $2\" \"$4}'", "r");
	char line[256];
	while (f && fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = '\0';
		if (strncmp(line, "lo ", 3) != 0 && !strstr(line, " fe80:"))
			json_array_append_new(a, json_string(line));
	}
	if (f)
		pclose(f);
	return a;
}

/* "NETDEV arp_ignore arp_announce" for the fabric netdevs and c0. */
static json_t *arp_values(void)
{
	json_t *a = json_array();
	FILE *f = popen("for d in enp1s0f0np0 enP2p1s0f0np0 enp1s0f1np1 enP2p1s0f1np1 c0; do "
			"echo $d $(cat /proc/sys/net/ipv4/conf/$d/arp_ignore) "
			"$(cat /proc/sys/net/ipv4/conf/$d/arp_announce); done",
			"r");
	char line[256];
	while (f && fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = '\0';
		json_array_append_new(a, json_string(line));
	}
	if (f)
		pclose(f);
	return a;
}

static json_t *apply_run(void *arg)
{
	(void)arg;
	static const char *const devs[] = {"enp1s0f0np0", "enP2p1s0f0np0", "enp1s0f1np1",
					   "enP2p1s0f1np1"};
	struct topo_addrplan_apply_opts o = {"spark-1", devs, 4, true};
	json_t *out = json_object();
	char err[256];
	json_t *r = NULL;
	int rc = topo_addrplan_apply(g_plan, &o, &r, err, sizeof err);
	json_object_set_new(out, "dry_rc", json_integer(rc));
	json_object_set_new(out, "dry", r ? r : json_string(err));
	json_object_set_new(out, "after_dry", ip_addrs());
	json_object_set_new(out, "arp_after_dry", arp_values());
	o.dry_run = false;
	rc = topo_addrplan_apply(g_plan, &o, &r, err, sizeof err);
	json_object_set_new(out, "rc1", json_integer(rc));
	json_object_set_new(out, "first", r ? r : json_string(err));
	json_object_set_new(out, "after_first", ip_addrs());
	json_object_set_new(out, "arp_after_first", arp_values());
	rc = topo_addrplan_apply(g_plan, &o, &r, err, sizeof err);
	json_object_set_new(out, "rc2", json_integer(rc));
	json_object_set_new(out, "second", r ? r : json_string(err));
	json_object_set_new(out, "after_second", ip_addrs());
	return out;
}

static bool has(json_t *arr, const char *s)
{
	size_t i;
	json_t *x;
	json_array_foreach(arr, i, x)
		if (strcmp(json_string_value(x), s) == 0)
			return true;
	return false;
}

static const char *addr_of(json_t *plan, const char *netdev)
{
	size_t i;
	json_t *e;
	json_array_foreach(json_object_get(json_object_get(plan, "nodes"), "spark-1"), i, e)
		if (strcmp(json_string_value(json_object_get(e, "netdev")), netdev) == 0)
			return json_string_value(json_object_get(e, "address"));
	return NULL;
}

Test(addrplan_netns, apply_is_idempotent, .timeout = 60)
{
	json_t *m = mg_map(3);
	mg_ring(m, 0, 3);
	json_t *v = NULL;
	char err[256];
	cr_assert_eq(topo_classify(m, NULL, &v, err, sizeof err), 0);
	struct topo_addrplan_opts po = {"169.254.0.0/17", 24};
	cr_assert_eq(topo_addrplan_make(v, &po, &g_plan, err, sizeof err), 0, "%s", err);
	/* Only the plan goes into the namespaces (whatever else is live in
	 * this process is copied into them and would show as their leaks). */
	json_decref(v);
	json_decref(m);
	const struct ns_node nodes[] = {{
	    "spark-1",
	    "ip link add enp1s0f0np0 type veth peer name c0 && "
	    "ip link add enP2p1s0f0np0 type veth peer name c1 && "
	    "ip link add enp1s0f1np1 type veth peer name c2 && "
	    "ip link add enP2p1s0f1np1 type veth peer name c3 && "
	    "ip addr add 169.254.100.1/24 dev enp1s0f0np0 && "  /* stale: in the pool */
	    "ip addr add 169.254.200.1/24 dev enp1s0f0np0 && "  /* outside the pool */
	    "ip addr add fd00::1/64 dev enp1s0f1np1 && "
	    "ip addr add 169.254.101.1/24 dev c0",              /* not a fabric netdev */
	    apply_run, NULL}};
	struct ns_scene s = {nodes, 1, NULL, 0, NULL, 30};
	bool skip;
	json_t *res = ns_run(&s, &skip);
	if (skip)
		cr_skip_test("needs root and network namespaces");
	cr_assert_not_null(res);
	json_t *r = json_object_get(res, "spark-1");
	char *dump = json_dumps(r, JSON_INDENT(1));
	const char *want[4] = {addr_of(g_plan, "enp1s0f0np0"), addr_of(g_plan, "enP2p1s0f0np0"),
			       addr_of(g_plan, "enp1s0f1np1"), addr_of(g_plan, "enP2p1s0f1np1")};
	const char *devs[4] = {"enp1s0f0np0", "enP2p1s0f0np0", "enp1s0f1np1", "enP2p1s0f1np1"};

	/* Dry run: says what it would do, does nothing. */
	cr_assert_eq(json_integer_value(json_object_get(r, "dry_rc")), 0, "%s", dump);
	json_t *dry = json_object_get(r, "dry");
	cr_assert(json_is_false(json_object_get(dry, "changed")));
	cr_assert_eq(json_array_size(json_object_get(dry, "added")), 4, "%s", dump);
	cr_assert_eq(json_array_size(json_object_get(dry, "removed")), 1);
	cr_assert(has(json_object_get(r, "after_dry"), "enp1s0f0np0 169.254.100.1/24"));
	/* ARP: 2 settings on each of the 4 planned netdevs would change; none did */
	cr_assert_eq(json_array_size(json_object_get(dry, "sysctls")), 8, "%s", dump);
	cr_assert(has(json_object_get(r, "arp_after_dry"), "enp1s0f0np0 0 0"), "%s", dump);

	/* First run: 4 added, the stale one removed, the rest left alone. */
	cr_assert_eq(json_integer_value(json_object_get(r, "rc1")), 0, "%s", dump);
	json_t *first = json_object_get(r, "first");
	cr_assert(json_is_true(json_object_get(first, "changed")));
	cr_assert_eq(json_array_size(json_object_get(first, "added")), 4);
	json_t *rm = json_array_get(json_object_get(first, "removed"), 0);
	cr_assert_str_eq(json_string_value(json_object_get(rm, "address")), "169.254.100.1/24");
	json_t *after = json_object_get(r, "after_first");
	for (int i = 0; i < 4; i++) {
		char line[128];
		snprintf(line, sizeof line, "%s %s", devs[i], want[i]);
		cr_assert(has(after, line), "missing '%s': %s", line, dump);
	}
	cr_assert(!has(after, "enp1s0f0np0 169.254.100.1/24"), "%s", dump);
	cr_assert(has(after, "enp1s0f0np0 169.254.200.1/24"), "%s", dump);
	cr_assert(has(after, "enp1s0f1np1 fd00::1/64"), "%s", dump);
	cr_assert(has(after, "c0 169.254.101.1/24"), "%s", dump);
	/* ARP answered and announced per netdev on the fabric; c0 left alone */
	json_t *arp = json_object_get(r, "arp_after_first");
	for (int i = 0; i < 4; i++) {
		char line[128];
		snprintf(line, sizeof line, "%s 1 2", devs[i]);
		cr_assert(has(arp, line), "missing '%s': %s", line, dump);
	}
	cr_assert(has(arp, "c0 0 0"), "%s", dump);
	json_t *sc = json_array_get(json_object_get(first, "sysctls"), 0);
	cr_assert_eq(json_array_size(json_object_get(first, "sysctls")), 8, "%s", dump);
	cr_assert_eq(json_integer_value(json_object_get(sc, "was")), 0, "%s", dump);

	/* Second run: nothing to do, and it says so. */
	cr_assert_eq(json_integer_value(json_object_get(r, "rc2")), 0);
	json_t *second = json_object_get(r, "second");
	cr_assert(json_is_false(json_object_get(second, "changed")));
	cr_assert_eq(json_array_size(json_object_get(second, "added")), 0);
	cr_assert_eq(json_array_size(json_object_get(second, "removed")), 0);
	cr_assert_eq(json_array_size(json_object_get(second, "kept")), 4);
	cr_assert_eq(json_array_size(json_object_get(second, "sysctls")), 0, "%s", dump);
	cr_assert_str_eq(json_string_value(json_object_get(second, "message")),
			 "addresses and ARP settings already match the plan: nothing changed");
	cr_assert(json_equal(json_object_get(r, "after_first"), json_object_get(r, "after_second")));
	free(dump);
	json_decref(res);
	json_decref(g_plan);
}

static json_t *host_run(void *arg)
{
	(void)arg;
	json_t *disc = json_pack("{s:[{s:s, s:[{s:s}, {s:s}]}]}", "ports", "name", "0", "twins", "netdev",
				 "enp1s0f0np0", "netdev", "enP2p1s0f0np0");
	json_t *out = NULL;
	char err[256] = "";
	int rc = topo_host_addresses(disc, &out, err, sizeof err);
	json_decref(disc);
	return json_pack("{s:i, s:s, s:o}", "rc", rc, "err", err, "list", out ? out : json_null());
}

Test(addrplan_netns, host_addresses_are_the_non_fabric_ipv4_ones, .timeout = 60)
{
	const struct ns_node nodes[] = {{
	    "spark-1",
	    "ip link set lo up && "
	    "ip link add enp1s0f0np0 type veth peer name enP7s7 && "
	    "ip link add enP2p1s0f0np0 type veth peer name c1 && "
	    "ip addr add 169.254.7.1/24 dev enp1s0f0np0 && "   /* fabric */
	    "ip addr add 169.254.8.1/24 dev enP2p1s0f0np0 && " /* fabric */
	    "ip addr add 169.254.100.5/16 dev enP7s7 && "      /* management */
	    "ip addr add fd00::5/64 dev enP7s7",               /* IPv6: not planned */
	    host_run, NULL}};
	struct ns_scene s = {nodes, 1, NULL, 0, NULL, 30};
	bool skip;
	json_t *res = ns_run(&s, &skip);
	if (skip)
		cr_skip_test("needs root and network namespaces");
	cr_assert_not_null(res);
	json_t *r = json_object_get(res, "spark-1");
	char *dump = json_dumps(r, 0);
	cr_assert_eq(json_integer_value(json_object_get(r, "rc")), 0, "%s", dump);
	json_t *want = json_pack("[{s:s, s:s}]", "netdev", "enP7s7", "address", "169.254.100.5/16");
	cr_assert(json_equal(json_object_get(r, "list"), want), "%s", dump);
	json_decref(want);
	free(dump);
	json_decref(res);
}

/* Discovery over the fake sysfs trees of tests/fixtures/sysfs/: the JSON must
 * equal NAME.expected.json exactly, and the findings must be the listed ones.
 * Regenerate the expected files (then review them by eye):
 *   SPARK_REGEN_FIXTURES=1 meson test -C BUILD topology_fixtures */
#include "topology/discover.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef TOPO_FIXTURES
#error "TOPO_FIXTURES must name tests/fixtures/sysfs"
#endif

static const char *const spark_ports[][2] = {{"enp1s0f0np0", "enP2p1s0f0np0"},
					     {"enp1s0f1np1", "enP2p1s0f1np1"}};

/* Run discovery on a fixture; compare with its expected JSON (file name
 * NAME[SUFFIX].expected.json) or write it in regen mode. */
static json_t *discover_fixture(const char *name, const char *suffix, struct topo_opts *o)
{
	char root[1024], exp[1200], rel[256];
	snprintf(root, sizeof root, "%s/%s", TOPO_FIXTURES, name);
	snprintf(exp, sizeof exp, "%s/%s%s.expected.json", TOPO_FIXTURES, name, suffix);
	snprintf(rel, sizeof rel, "tests/fixtures/sysfs/%s", name);
	struct topo_opts def;
	if (!o) {
		topo_opts_init(&def);
		o = &def;
	}
	o->sysfs_root = root;
	o->use_netlink = false;
	o->use_verbs = false;
	json_t *d = NULL;
	char err[256] = "";
	cr_assert_eq(topo_discover(o, &d, err, sizeof err), 0, "%s: %s", name, err);
	/* The tree's absolute path differs per checkout. */
	json_object_set_new(d, "sysfs_root", json_string(rel));
	char *got = json_dumps(d, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	if (getenv("SPARK_REGEN_FIXTURES")) {
		FILE *f = fopen(exp, "w");
		cr_assert(f, "cannot write %s", exp);
		fprintf(f, "%s\n", got);
		fclose(f);
	}
	json_error_t je;
	json_t *want = json_load_file(exp, 0, &je);
	cr_assert(want, "%s: %s (run with SPARK_REGEN_FIXTURES=1 to create it)", exp, je.text);
	if (!json_equal(want, d)) {
		char *w = json_dumps(want, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		cr_log_error("%s differs.\n--- expected\n%s\n--- got\n%s", exp, w, got);
		free(w);
		cr_assert_fail("%s: discovery JSON differs from %s", name, exp);
	}
	free(got);
	json_decref(want);
	return d;
}

/* The findings as "code:netdev" lines, to compare with a list. */
static void expect_findings(json_t *d, int mtu, const char *const *want, size_t n)
{
	json_t *f = NULL;
	int k = topo_findings(d, mtu, &f);
	cr_assert_geq(k, 0);
	char got[2048] = "", exp[2048] = "";
	size_t i;
	json_t *x;
	json_array_foreach(f, i, x) {
		const char *nd = json_string_value(json_object_get(x, "netdev"));
		size_t l = strlen(got);
		snprintf(got + l, sizeof got - l, "%s:%s\n", json_string_value(json_object_get(x, "code")),
			 nd ? nd : "-");
		/* Every finding is complete. */
		cr_assert(json_is_string(json_object_get(x, "message")));
		cr_assert(json_is_string(json_object_get(x, "fix")));
		const char *sev = json_string_value(json_object_get(x, "severity"));
		cr_assert(sev && (!strcmp(sev, "warn") || !strcmp(sev, "error")));
		cr_assert_null(strchr(json_string_value(json_object_get(x, "message")), '\n'));
	}
	for (size_t j = 0; j < n; j++) {
		size_t l = strlen(exp);
		snprintf(exp + l, sizeof exp - l, "%s\n", want[j]);
	}
	cr_assert_str_eq(got, exp, "findings differ:\n%s\nexpected:\n%s", got, exp);
	json_decref(f);
}

static json_t *twin(json_t *d, size_t port, size_t t)
{
	return json_array_get(json_object_get(json_array_get(json_object_get(d, "ports"), port), "twins"),
			      t);
}

static void assert_spark_ports(json_t *d, long gid_index)
{
	json_t *ports = json_object_get(d, "ports");
	cr_assert_eq(json_array_size(ports), 2);
	for (size_t p = 0; p < 2; p++) {
		char pn[4];
		snprintf(pn, sizeof pn, "%zu", p);
		cr_assert_str_eq(json_string_value(json_object_get(json_array_get(ports, p), "name")), pn);
		for (size_t t = 0; t < 2; t++) {
			json_t *x = twin(d, p, t);
			cr_assert_str_eq(json_string_value(json_object_get(x, "netdev")), spark_ports[p][t]);
			json_t *rdma = json_object_get(x, "rdma");
			cr_assert_eq(json_integer_value(json_object_get(rdma, "rocev2_gid_index")), gid_index,
				     "%s", spark_ports[p][t]);
			cr_assert_str_eq(json_string_value(json_object_get(rdma, "source")), "sysfs");
		}
	}
}

Test(fixtures, healthy)
{
	json_t *d = discover_fixture("spark-healthy", "", NULL);
	assert_spark_ports(d, 3);
	json_t *t = twin(d, 0, 1);
	cr_assert_str_eq(json_string_value(json_object_get(json_object_get(t, "rdma"), "device")),
			 "roceP2p1s0f0");
	cr_assert_eq(json_integer_value(json_object_get(t, "speed_mbps")), 200000);
	cr_assert_str_eq(json_string_value(json_object_get(json_object_get(t, "sources"), "mtu")),
			 "sysfs");
	cr_assert_str_eq(
	    json_string_value(json_object_get(json_object_get(t, "sources"), "addresses")),
	    "netlink_dump");
	cr_assert_eq(json_array_size(json_object_get(d, "other_nics")), 2); /* enP7s7, wlP9s9 */
	expect_findings(d, 0, NULL, 0);
	expect_findings(d, 9000, NULL, 0);
	json_decref(d);
}

Test(fixtures, port1_unplugged)
{
	json_t *d = discover_fixture("spark-port1-unplugged", "", NULL);
	assert_spark_ports(d, 3);
	for (size_t t = 0; t < 2; t++) {
		json_t *x = twin(d, 1, t);
		json_t *rdma = json_object_get(x, "rdma");
		cr_assert(json_is_false(json_object_get(x, "carrier")));
		cr_assert(json_is_null(json_object_get(x, "speed_mbps")));
		cr_assert_str_eq(json_string_value(json_object_get(rdma, "state")), "down");
		cr_assert_str_eq(json_string_value(json_object_get(rdma, "phys_state")), "disabled");
		cr_assert_eq(json_integer_value(json_object_get(rdma, "rate_gbps")), 40);
	}
	/* A port without a cable is not a fault (two nodes need one cable). */
	expect_findings(d, 9000, NULL, 0);
	json_decref(d);
}

Test(fixtures, pcie_x2)
{
	json_t *d = discover_fixture("spark-pcie-x2", "", NULL);
	assert_spark_ports(d, 3);
	static const char *const want[] = {"pcie_width_low:enP2p1s0f0np0",
					   "pcie_width_low:enP2p1s0f1np1"};
	expect_findings(d, 0, want, 2);
	json_decref(d);
}

Test(fixtures, gid_shifted)
{
	json_t *d = discover_fixture("spark-gid-shifted", "", NULL);
	/* Index 3 is now RoCE v1 IPv4: the pick must follow the type, not the number. */
	assert_spark_ports(d, 4);
	json_t *rdma = json_object_get(twin(d, 0, 0), "rdma");
	cr_assert_str_eq(json_string_value(json_object_get(rdma, "rocev2_gid")), "::ffff:169.254.10.1");
	expect_findings(d, 0, NULL, 0);
	json_decref(d);
}

Test(fixtures, mtu_mismatch)
{
	json_t *d = discover_fixture("spark-mtu-mismatch", "", NULL);
	assert_spark_ports(d, 3);
	static const char *const want[] = {"mtu_twin_mismatch:enP2p1s0f0np0"};
	expect_findings(d, 0, want, 1);
	static const char *const want2[] = {"mtu_twin_mismatch:enP2p1s0f0np0",
					    "mtu_cluster_mismatch:enP2p1s0f0np0"};
	expect_findings(d, 9000, want2, 2);
	json_decref(d);
}

Test(fixtures, no_cx7)
{
	json_t *d = discover_fixture("no-cx7", "", NULL);
	cr_assert_eq(json_array_size(json_object_get(d, "ports")), 0);
	static const char *const want[] = {"no_fabric_port:-"};
	expect_findings(d, 0, want, 1);
	json_t *f;
	topo_findings(d, 0, &f);
	const char *msg = json_string_value(json_object_get(json_array_get(f, 0), "message"));
	cr_assert(strstr(msg, "15b3:1021"), "%s", msg);
	cr_assert(strstr(msg, "enp1s0f0 (8086:1593 ice)"), "%s", msg);
	cr_assert(strstr(msg, "enP7s7 (10ec:8127 r8169)"), "%s", msg);
	json_decref(f);
	json_decref(d);
}

Test(fixtures, other_mellanox)
{
	json_t *d = discover_fixture("other-mellanox", "", NULL);
	cr_assert_eq(json_array_size(json_object_get(d, "ports")), 0);
	static const char *const want[] = {"no_fabric_port:-"};
	expect_findings(d, 0, want, 1);
	json_t *f;
	topo_findings(d, 0, &f);
	const char *msg = json_string_value(json_object_get(json_array_get(f, 0), "message"));
	cr_assert(strstr(msg, "enp1s0f0np0 (15b3:101d mlx5_core)"), "%s", msg);
	json_decref(f);
	json_decref(d);
}

Test(fixtures, other_mellanox_by_interfaces)
{
	/* fabric.interfaces makes any NIC the fabric; a single-path NIC has no twins. */
	static const char *const globs[] = {"enp1s0f*np*"};
	struct topo_opts o;
	topo_opts_init(&o);
	o.interfaces = globs;
	o.n_interfaces = 1;
	json_t *d = discover_fixture("other-mellanox", "-interfaces", &o);
	json_t *ports = json_object_get(d, "ports");
	cr_assert_eq(json_array_size(ports), 2);
	cr_assert_eq(json_array_size(json_object_get(json_array_get(ports, 0), "twins")), 1);
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(ports, 1), "name")), "1");
	cr_assert_str_eq(
	    json_string_value(json_object_get(json_object_get(twin(d, 0, 0), "rdma"), "device")),
	    "mlx5_0");
	static const char *const want[] = {"speed_low:enp1s0f0np0", "speed_low:enp1s0f1np1"};
	expect_findings(d, 0, want, 2);
	json_decref(d);
}

Test(fixtures, explicit_ports_with_absent_twin)
{
	/* The simulator's way: fabric.ports names the twins; a missing one is absent. */
	static const char *const p0[] = {"enp1s0f0np0", "enP2p1s0f0np0"};
	static const char *const p1[] = {"enp1s0f1np1", "enP3p1s0f1np1"};
	static const struct topo_port_spec ports[] = {{"0", p0, 2}, {"1", p1, 2}};
	struct topo_opts o;
	topo_opts_init(&o);
	o.ports = ports;
	o.n_ports = 2;
	json_t *d = discover_fixture("spark-healthy", "-ports-absent", &o);
	cr_assert(json_is_false(json_object_get(twin(d, 1, 1), "present")));
	static const char *const want[] = {"twin_down:enP3p1s0f1np1"};
	expect_findings(d, 0, want, 1);
	json_decref(d);
}

Test(fixtures, link_local_16_on_every_twin)
{
	/* NVIDIA's link-local netplan puts all twins in 169.254.0.0/16. */
	struct topo_opts o;
	topo_opts_init(&o);
	o.addr_dump = TOPO_FIXTURES "/spark-link-local-16.ip-addr.json";
	json_t *d = discover_fixture("spark-healthy", "-link-local-16", &o);
	static const char *const want[] = {"twins_same_subnet:enp1s0f0np0"};
	expect_findings(d, 0, want, 1);
	json_t *f;
	topo_findings(d, 0, &f);
	const char *msg = json_string_value(json_object_get(json_array_get(f, 0), "message"));
	cr_assert(strstr(msg, "enP2p1s0f1np1"), "%s", msg);
	cr_assert(strstr(msg, "169.254.0.0/16"), "%s", msg);
	json_decref(f);
	json_decref(d);
}

Test(fixtures, rxe_on_veth)
{
	/* RDMA devices without a PCI function (Soft-RoCE on veths, as in tests/rdma):
	 * each netdev gets the device whose GIDs name it, whatever the device's name. */
	static const char *const globs[] = {"enp1s0f*np*", "enP2p1s0f*np*"};
	static const char *const want_dev[2][2] = {{"rxe1", "rxe2"}, {"rxe3", "rxe0"}};
	static const char *const want_gid[2][2] = {{"::ffff:169.254.10.1", "::ffff:169.254.11.1"},
						   {"::ffff:169.254.12.1", "::ffff:169.254.13.1"}};
	struct topo_opts o;
	topo_opts_init(&o);
	o.interfaces = globs;
	o.n_interfaces = 2;
	json_t *d = discover_fixture("rxe-veth", "", &o);
	cr_assert_eq(json_array_size(json_object_get(d, "ports")), 2);
	for (size_t p = 0; p < 2; p++)
		for (size_t t = 0; t < 2; t++) {
			json_t *x = twin(d, p, t);
			json_t *rdma = json_object_get(x, "rdma");
			cr_assert_str_eq(json_string_value(json_object_get(x, "netdev")), spark_ports[p][t]);
			cr_assert(json_is_null(json_object_get(x, "pci")));
			cr_assert(json_is_true(json_object_get(x, "virtual")));
			cr_assert(json_is_object(rdma), "%s: no rdma object", spark_ports[p][t]);
			cr_assert_str_eq(json_string_value(json_object_get(rdma, "device")), want_dev[p][t]);
			cr_assert_str_eq(json_string_value(json_object_get(rdma, "state")), "active");
			cr_assert_str_eq(json_string_value(json_object_get(rdma, "source")), "sysfs");
			cr_assert_eq(json_integer_value(json_object_get(rdma, "rocev2_gid_index")), 1);
			cr_assert_str_eq(json_string_value(json_object_get(rdma, "rocev2_gid")),
					 want_gid[p][t]);
			cr_assert_eq(json_array_size(json_object_get(rdma, "gids")), 2);
		}
	expect_findings(d, 9000, NULL, 0);
	json_decref(d);
}

Test(fixtures, rxe_first_gid_slot_empty)
{
	/* A device whose slot 0 is empty names no netdev there: its GID table is read
	 * to find the netdev (the fallback of the cheap first-GID match). */
	char tmp[] = "/tmp/topo-rxe-XXXXXX", cmd[1200], p[600];
	cr_assert_not_null(mkdtemp(tmp));
	snprintf(cmd, sizeof cmd, "cp -a '%s/rxe-veth/.' '%s/'", TOPO_FIXTURES, tmp);
	cr_assert_eq(system(cmd), 0);
	const char *port = "sys/devices/virtual/infiniband/rxe1/ports/1";
	snprintf(p, sizeof p, "%s/%s/gid_attrs/ndevs/0", tmp, port);
	cr_assert_eq(unlink(p), 0);
	snprintf(p, sizeof p, "%s/%s/gid_attrs/types/0", tmp, port);
	cr_assert_eq(unlink(p), 0);
	snprintf(p, sizeof p, "%s/%s/gids/0", tmp, port);
	FILE *f = fopen(p, "w");
	cr_assert_not_null(f);
	fputs("0000:0000:0000:0000:0000:0000:0000:0000\n", f);
	fclose(f);
	static const char *const globs[] = {"enp1s0f0np0"};
	struct topo_opts o;
	topo_opts_init(&o);
	o.interfaces = globs;
	o.n_interfaces = 1;
	o.sysfs_root = tmp;
	o.use_netlink = o.use_verbs = false;
	json_t *d = NULL;
	char err[256] = "";
	cr_assert_eq(topo_discover(&o, &d, err, sizeof err), 0, "%s", err);
	json_t *rdma = json_object_get(twin(d, 0, 0), "rdma");
	cr_assert_str_eq(json_string_value(json_object_get(rdma, "device")), "rxe1");
	cr_assert_eq(json_integer_value(json_object_get(rdma, "rocev2_gid_index")), 1);
	cr_assert_eq(json_array_size(json_object_get(rdma, "gids")), 1);
	json_decref(d);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
	cr_assert_eq(system(cmd), 0);
}

Test(fixtures, missing_tree_fails)
{
	struct topo_opts o;
	topo_opts_init(&o);
	o.sysfs_root = TOPO_FIXTURES "/does-not-exist";
	o.use_netlink = o.use_verbs = false;
	json_t *d = NULL;
	char err[512] = "";
	cr_assert_lt(topo_discover(&o, &d, err, sizeof err), 0);
	cr_assert(strstr(err, "does-not-exist/sys/class/net"), "%s", err);
	cr_assert_null(d);
}

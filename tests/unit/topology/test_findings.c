/* topo_findings over edited discovery JSON (every code, each trigger and its
 * absence), and topo_opts_from_config. */
#include "common/cfg.h"
#include "topology/discover.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *healthy(void)
{
	struct topo_opts o;
	topo_opts_init(&o);
	o.sysfs_root = TOPO_FIXTURES "/spark-healthy";
	o.use_netlink = o.use_verbs = false;
	json_t *d = NULL;
	char err[256];
	cr_assert_eq(topo_discover(&o, &d, err, sizeof err), 0, "%s", err);
	return d;
}

static json_t *twin(json_t *d, size_t port, size_t t)
{
	return json_array_get(json_object_get(json_array_get(json_object_get(d, "ports"), port), "twins"),
			      t);
}

static char *codes(json_t *d, int mtu)
{
	static char buf[2048];
	json_t *f = NULL;
	cr_assert_geq(topo_findings(d, mtu, &f), 0);
	buf[0] = '\0';
	size_t i;
	json_t *x;
	json_array_foreach(f, i, x) {
		const char *nd = json_string_value(json_object_get(x, "netdev"));
		const char *port = json_string_value(json_object_get(x, "port"));
		size_t l = strlen(buf);
		snprintf(buf + l, sizeof buf - l, "%s%s/%s/%s/%s", i ? " " : "",
			 json_string_value(json_object_get(x, "code")),
			 json_string_value(json_object_get(x, "severity")), port ? port : "-",
			 nd ? nd : "-");
	}
	json_decref(f);
	return buf;
}

Test(findings, twin_down_only_when_sibling_up)
{
	json_t *d = healthy();
	json_t *t = twin(d, 1, 1);
	json_object_set_new(t, "carrier", json_false());
	json_object_set_new(t, "operstate", json_string("down"));
	cr_assert_str_eq(codes(d, 0), "twin_down/warn/1/enP2p1s0f1np1");
	/* Both down: an unplugged port, not a fault. */
	json_object_set_new(twin(d, 1, 0), "carrier", json_false());
	cr_assert_str_eq(codes(d, 0), "");
	json_decref(d);
}

Test(findings, speed_low_skips_virtual_and_down)
{
	json_t *d = healthy();
	json_object_set_new(twin(d, 0, 0), "speed_mbps", json_integer(100000));
	cr_assert_str_eq(codes(d, 0), "speed_low/warn/0/enp1s0f0np0");
	json_object_set_new(twin(d, 0, 0), "virtual", json_true());
	cr_assert_str_eq(codes(d, 0), "");
	json_object_set_new(twin(d, 0, 0), "virtual", json_false());
	json_object_set_new(twin(d, 0, 0), "carrier", json_false());
	cr_assert_str_eq(codes(d, 0), "twin_down/warn/0/enp1s0f0np0");
	json_decref(d);
}

Test(findings, rdma_inactive_and_no_gid)
{
	json_t *d = healthy();
	json_t *rdma = json_object_get(twin(d, 0, 1), "rdma");
	json_object_set_new(rdma, "state", json_string("init"));
	cr_assert_str_eq(codes(d, 0), "rdma_port_inactive/error/0/enP2p1s0f0np0");
	json_object_set_new(rdma, "state", json_string("active"));
	json_object_set_new(rdma, "rocev2_gid_index", json_null());
	cr_assert_str_eq(codes(d, 0), "no_rocev2_gid/error/0/enP2p1s0f0np0");
	/* A ConnectX function with no RDMA device at all (mlx5_ib not loaded). */
	json_object_set_new(twin(d, 0, 1), "rdma", json_null());
	cr_assert_str_eq(codes(d, 0), "no_rocev2_gid/error/0/enP2p1s0f0np0");
	json_t *f;
	topo_findings(d, 0, &f);
	cr_assert(strstr(json_string_value(json_object_get(json_array_get(f, 0), "fix")), "mlx5_ib"));
	json_decref(f);
	json_decref(d);
}

Test(findings, cluster_mtu)
{
	json_t *d = healthy();
	cr_assert_str_eq(codes(d, 9000), "");
	cr_assert_str_eq(codes(d, 4200),
			 "mtu_cluster_mismatch/error/0/enp1s0f0np0 mtu_cluster_mismatch/error/0/enP2p1s0f0np0 "
			 "mtu_cluster_mismatch/error/1/enp1s0f1np1 mtu_cluster_mismatch/error/1/enP2p1s0f1np1");
	json_decref(d);
}

Test(findings, same_subnet_across_twins)
{
	json_t *d = healthy();
	json_array_set_new(json_object_get(twin(d, 0, 1), "ipv4"), 0, json_string("169.254.10.2/24"));
	cr_assert_str_eq(codes(d, 0), "twins_same_subnet/error/0/enp1s0f0np0");
	json_t *f;
	topo_findings(d, 0, &f);
	const char *m = json_string_value(json_object_get(json_array_get(f, 0), "message"));
	cr_assert(strstr(m, "enp1s0f0np0 (169.254.10.1/24), enP2p1s0f0np0 (169.254.10.2/24) share subnet 169.254.10.0/24"),
		  "%s", m);
	json_decref(f);
	json_decref(d);
}

Test(findings, no_fabric_and_bad_input)
{
	json_t *d = healthy();
	json_object_set_new(d, "ports", json_array());
	cr_assert_str_eq(codes(d, 0), "no_fabric_port/error/-/-");
	json_t *f = NULL;
	json_t *empty = json_object();
	cr_assert_eq(topo_findings(empty, 0, &f), -EINVAL);
	json_decref(empty);
	json_t *junk = json_pack("{s:[i,{s:i},{s:[i,s]}]}", "ports", 1, "twins", 2, "twins", 3, "x");
	cr_assert_geq(topo_findings(junk, 1500, &f), 0); /* odd shapes: no crash */
	json_decref(f);
	json_decref(junk);
	json_decref(d);
}

Test(findings, config_to_opts)
{
	const char *yaml = "fabric:\n"
			   "  interfaces: [\"enp1s0f*np*\", \"enP2p1s0f*np*\"]\n"
			   "  ports:\n"
			   "    0: [enp1s0f0np0, enP2p1s0f0np0]\n"
			   "    1: [enp1s0f1np1, enP2p1s0f1np1]\n"
			   "  mtu: 9000\n"
			   "discovery:\n"
			   "  sysfs_root: /tmp/fake\n";
	json_t *cfg = NULL;
	char err[256];
	cr_assert_eq(cfg_parse("t.yaml", yaml, strlen(yaml), &cfg, err, sizeof err), 0, "%s", err);
	struct topo_opts o;
	topo_opts_init(&o);
	cr_assert_eq(topo_opts_from_config(&o, cfg, err, sizeof err), 0, "%s", err);
	json_decref(cfg); /* o keeps its own reference */
	cr_assert_str_eq(o.sysfs_root, "/tmp/fake");
	cr_assert(!o.use_netlink && !o.use_verbs);
	cr_assert_eq(o.cluster_mtu, 9000);
	cr_assert_eq(o.n_interfaces, 2);
	cr_assert_str_eq(o.interfaces[1], "enP2p1s0f*np*");
	cr_assert_eq(o.n_ports, 2);
	cr_assert_str_eq(o.ports[1].name, "1");
	cr_assert_eq(o.ports[1].n_netdevs, 2);
	cr_assert_str_eq(o.ports[1].netdevs[1], "enP2p1s0f1np1");
	topo_opts_free(&o);

	static const struct {
		const char *yaml, *key;
	} bad[] = {
	    {"fabric:\n  ports: [a, b]\n", "fabric.ports"},
	    {"fabric:\n  ports:\n    0: enp1s0f0np0\n", "fabric.ports.0"},
	    {"fabric:\n  ports:\n    0: [\"a/b\"]\n", "fabric.ports.0[0]"},
	    {"fabric:\n  interfaces: enp*\n", "fabric.interfaces"},
	    {"fabric:\n  mtu: big\n", "fabric.mtu"},
	    {"discovery:\n  sysfs_root: [x]\n", "discovery.sysfs_root"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		cr_assert_eq(cfg_parse("t.yaml", bad[i].yaml, strlen(bad[i].yaml), &cfg, err, sizeof err),
			     0);
		topo_opts_init(&o);
		err[0] = '\0';
		cr_assert_eq(topo_opts_from_config(&o, cfg, err, sizeof err), -EINVAL, "%s", bad[i].yaml);
		cr_assert(strstr(err, bad[i].key), "'%s' does not name %s", err, bad[i].key);
		cr_assert_null(o.owned);
		json_decref(cfg);
	}
}

/* TCP probes between two namespaces over veth "cables" with link-local
 * addresses (169.254.10.0/24 and .11.0/24, fd00:10::/64): latency, bandwidth,
 * MTU (one cable with 9000 on one end and 1500 on the other), a refused
 * token, a stopped server. The verbs path: no device here, so it must say so. */
#include "topology/probe.h"

#include "nsharness.h"

#include <criterion/criterion.h>
#include <pthread.h>

#define TOKEN "tok-0123456789"

static struct topo_probe_params quick_params(void)
{
	struct topo_probe_params p;
	topo_probe_params_init(&p, true);
	p.timeout_ms = 8000;
	return p;
}

static json_t *run_or_error(int rc, json_t *res, const char *err)
{
	json_t *o = json_pack("{s:i, s:s}", "rc", rc, "err", err);
	json_object_set_new(o, "result", res ? res : json_null());
	return o;
}

static json_t *client_one(const char *netdev, const char *peer, int port, const char *token)
{
	struct topo_probe_client_opts o;
	memset(&o, 0, sizeof o);
	o.netdev = netdev;
	o.peer_address = peer;
	o.peer_port = port;
	o.token = token;
	o.params = quick_params();
	topo_probe_thresholds_default(&o.thresholds);
	json_t *res = NULL;
	char err[256] = "";
	int rc = topo_probe_client_run(&o, &res, err, sizeof err);
	return run_or_error(rc, res, err);
}

static json_t *node_client(void *arg)
{
	(void)arg;
	json_t *out = json_object();
	json_object_set_new(out, "bad_token", client_one("enp1s0f0np0", "169.254.10.2", 7311, "wrong"));
	json_object_set_new(out, "twin0", client_one("enp1s0f0np0", "169.254.10.2", 7311, TOKEN));
	json_object_set_new(out, "twin1", client_one("enP2p1s0f0np0", "169.254.11.2", 7312, TOKEN));
	json_object_set_new(out, "v6", client_one("enp1s0f0np0", "fd00:10::2", 7313, TOKEN));
	return out;
}

static json_t *serve_one(const char *netdev, const char *addr, int port)
{
	struct topo_probe_server_opts so = {netdev, addr, port, TOKEN, 10000};
	struct topo_probe_server *s = NULL;
	char err[256] = "";
	int rc = topo_probe_server_start(&so, &s, err, sizeof err);
	if (rc < 0)
		return run_or_error(rc, NULL, err);
	if (topo_probe_server_port(s) != port)
		return run_or_error(-1, NULL, "wrong port");
	json_t *res = NULL;
	rc = topo_probe_server_run(s, &res, err, sizeof err);
	topo_probe_server_free(s);
	return run_or_error(rc, res, err);
}

struct bg {
	struct topo_probe_server *s;
	int rc;
};

static void *bg_run(void *arg)
{
	struct bg *b = arg;
	json_t *res = NULL;
	char err[128];
	b->rc = topo_probe_server_run(b->s, &res, err, sizeof err);
	json_decref(res);
	return NULL;
}

static json_t *node_server(void *arg)
{
	(void)arg;
	json_t *out = json_object();
	/* Twin 0: the first client has a wrong token, the second is served. */
	struct topo_probe_server_opts so = {"enp1s0f1np1", "169.254.10.2", 7311, TOKEN, 10000};
	struct topo_probe_server *s = NULL;
	char err[256] = "";
	int rc = topo_probe_server_start(&so, &s, err, sizeof err);
	if (rc < 0)
		return run_or_error(rc, NULL, err);
	json_t *res = NULL;
	rc = topo_probe_server_run(s, &res, err, sizeof err);
	json_object_set_new(out, "bad_token", run_or_error(rc, res, err));
	res = NULL;
	err[0] = '\0';
	rc = topo_probe_server_run(s, &res, err, sizeof err);
	json_object_set_new(out, "twin0", run_or_error(rc, res, err));
	topo_probe_server_free(s);
	json_object_set_new(out, "twin1", serve_one("enP2p1s0f1np1", "169.254.11.2", 7312));
	json_object_set_new(out, "v6", serve_one("enp1s0f1np1", "fd00:10::2", 7313));
	/* A server nobody talks to, stopped from another thread. */
	struct topo_probe_server_opts so2 = {"enp1s0f1np1", "169.254.10.2", 0, NULL, 10000};
	struct bg b = {NULL, 0};
	if (topo_probe_server_start(&so2, &b.s, err, sizeof err) == 0) {
		pthread_t th;
		pthread_create(&th, NULL, bg_run, &b);
		usleep(100000);
		topo_probe_server_stop(b.s);
		pthread_join(th, NULL);
		topo_probe_server_free(b.s);
		json_object_set_new(out, "stopped_rc", json_integer(b.rc));
		json_object_set_new(out, "ephemeral_ok", json_true());
	}
	return out;
}

static json_t *get(json_t *o, const char *path)
{
	char buf[256];
	snprintf(buf, sizeof buf, "%s", path);
	for (char *save = NULL, *k = strtok_r(buf, ".", &save); k && o; k = strtok_r(NULL, ".", &save))
		o = json_object_get(o, k);
	return o;
}

static long long geti(json_t *o, const char *path) { return json_integer_value(get(o, path)); }
static double getn(json_t *o, const char *path) { return json_number_value(get(o, path)); }
static const char *gets_(json_t *o, const char *path) { return json_string_value(get(o, path)); }

Test(probe_netns, tcp_latency_bandwidth_mtu, .timeout = 90)
{
	const struct ns_node nodes[] = {
	    {"a",
	     "ip addr add 169.254.10.1/24 dev enp1s0f0np0 && "
	     "ip addr add 169.254.11.1/24 dev enP2p1s0f0np0 && "
	     "ip -6 addr add fd00:10::1/64 dev enp1s0f0np0 nodad && "
	     "ip link set enp1s0f0np0 up && ip link set enP2p1s0f0np0 up",
	     node_client, NULL},
	    {"b",
	     "ip link set enP2p1s0f1np1 mtu 1500 && "
	     "ip addr add 169.254.10.2/24 dev enp1s0f1np1 && "
	     "ip addr add 169.254.11.2/24 dev enP2p1s0f1np1 && "
	     "ip -6 addr add fd00:10::2/64 dev enp1s0f1np1 nodad && "
	     "ip link set enp1s0f1np1 up && ip link set enP2p1s0f1np1 up",
	     node_server, NULL},
	};
	const struct ns_link links[] = {
	    {0, "enp1s0f0np0", 1, "enp1s0f1np1", 9000},
	    {0, "enP2p1s0f0np0", 1, "enP2p1s0f1np1", 9000},
	};
	struct ns_scene s = {nodes, 2, links, 2, NULL, 80};
	bool skip;
	json_t *res = ns_run(&s, &skip);
	if (skip)
		cr_skip_test("needs root and network namespaces");
	cr_assert_not_null(res);
	json_t *A = json_object_get(res, "a"), *B = json_object_get(res, "b");
	char *dump = json_dumps(res, JSON_INDENT(1));

	/* A wrong token is refused on both ends. */
	cr_assert_eq(geti(A, "bad_token.rc"), -EACCES, "%s", dump);
	cr_assert_eq(geti(B, "bad_token.rc"), -EACCES, "%s", dump);
	cr_assert_str_eq(gets_(A, "bad_token.result.result"), "fail");

	/* Twin 0: MTU 9000 both ends, passes; TCP is what ran and what it says. */
	cr_assert_eq(geti(A, "twin0.rc"), 0, "%s", dump);
	cr_assert_str_eq(gets_(A, "twin0.result.transport"), "tcp");
	cr_assert_str_eq(gets_(A, "twin0.result.result"), "pass", "%s", dump);
	cr_assert_gt(getn(A, "twin0.result.latency.p50_us"), 0);
	cr_assert_geq(getn(A, "twin0.result.latency.p99_us"), getn(A, "twin0.result.latency.p50_us"));
	cr_assert_eq(geti(A, "twin0.result.latency.iterations"), 200);
	cr_assert_gt(getn(A, "twin0.result.bandwidth.to_peer_gbps"), 0.1);
	cr_assert_gt(getn(A, "twin0.result.bandwidth.from_peer_gbps"), 0.1);
	cr_assert_eq(geti(A, "twin0.result.mtu.local_mtu"), 9000);
	cr_assert_eq(geti(A, "twin0.result.mtu.largest_ok"), 9000);
	cr_assert(json_is_true(get(A, "twin0.result.mtu.ok")));
	cr_assert_eq(getn(A, "twin0.result.thresholds.min_gbps"), 1.0); /* TCP's, not RDMA's */
	cr_assert_str_eq(gets_(A, "twin0.result.peer"), "169.254.10.2:7311");
	cr_assert_eq(geti(B, "twin0.rc"), 0, "%s", dump);
	cr_assert_eq(geti(B, "twin0.result.pings"), 220);
	cr_assert_gt(geti(B, "twin0.result.bytes_in"), 0);
	cr_assert_gt(geti(B, "twin0.result.udp_echoed"), 0);

	/* Twin 1: 9000 here, 1500 there: the MTU check finds 1500 and fails. */
	cr_assert_eq(geti(A, "twin1.rc"), 0, "%s", dump);
	cr_assert_eq(geti(A, "twin1.result.mtu.largest_ok"), 1500, "%s", dump);
	cr_assert(json_is_false(get(A, "twin1.result.mtu.ok")));
	cr_assert_str_eq(gets_(A, "twin1.result.result"), "fail");
	cr_assert_str_eq(gets_(json_array_get(get(A, "twin1.result.findings"), 0), "code"), "probe_mtu_low");

	/* IPv6 (fd00::/8) works the same way. */
	cr_assert_eq(geti(A, "v6.rc"), 0, "%s", dump);
	cr_assert_eq(geti(A, "v6.result.mtu.largest_ok"), 9000);
	cr_assert_str_eq(gets_(A, "v6.result.result"), "pass");

	cr_assert_eq(geti(B, "stopped_rc"), -ECANCELED, "%s", dump);
	free(dump);
	json_decref(res);
}

static int no_exchange(const struct topo_rdma_endpoint *l, struct topo_rdma_endpoint *r, void *a)
{
	(void)l;
	(void)r;
	(void)a;
	return -EIO;
}

Test(probe, rdma_path_says_why_it_cannot_run)
{
	char why[256];
	int rc = topo_probe_rdma_usable("rocep1s0f0", 1, 3, why, sizeof why);
	if (rc == 0)
		cr_skip_test("this machine has rocep1s0f0: the VM harness tests verbs");
	cr_assert(rc == -ENODEV || rc == -ENOENT || rc == -ENETDOWN || rc == -EINVAL);
	cr_assert(why[0], "no reason given");
	struct topo_probe_rdma_opts o;
	memset(&o, 0, sizeof o);
	o.ibdev = "rocep1s0f0";
	o.ib_port = 1;
	o.gid_index = 3;
	o.exchange = no_exchange;
	topo_probe_params_init(&o.params, true);
	topo_probe_thresholds_default(&o.thresholds);
	json_t *res = NULL;
	char err[256];
	cr_assert_lt(topo_probe_rdma_run(&o, &res, err, sizeof err), 0);
	cr_assert_null(res); /* nothing measured, nothing claimed */
}

Test(probe, endpoint_json_round_trip)
{
	struct topo_rdma_endpoint e = {0x12345, 0xabcdef, 0xdeadbeef, 0x7f0012345678ull, 4194304, 4096, {0}};
	for (int i = 0; i < 16; i++)
		e.gid[i] = (uint8_t)(0xf0 + i);
	json_t *j = topo_rdma_endpoint_to_json(&e);
	struct topo_rdma_endpoint f;
	cr_assert_eq(topo_rdma_endpoint_from_json(j, &f), 0);
	cr_assert(f.qpn == e.qpn && f.psn == e.psn && f.rkey == e.rkey && f.addr == e.addr &&
		  f.buf_len == e.buf_len && f.mtu == e.mtu && memcmp(f.gid, e.gid, 16) == 0);
	json_object_set_new(j, "gid", json_string("zz"));
	cr_assert_eq(topo_rdma_endpoint_from_json(j, &f), -EINVAL);
	json_decref(j);
	json_t *bad = json_pack("{s:i}", "qpn", -1);
	cr_assert_eq(topo_rdma_endpoint_from_json(bad, &f), -EINVAL);
	json_decref(bad);
}

Test(probe, transport_pick_and_judging)
{
	json_t *rd = json_pack("{s:{s:s, s:i, s:s}}", "rdma", "device", "rocep1s0f0", "rocev2_gid_index",
			       3, "state", "active");
	json_t *none = json_pack("{s:n}", "rdma");
	cr_assert_str_eq(topo_probe_pick_transport(rd, rd), "rdma");
	cr_assert_str_eq(topo_probe_pick_transport(rd, none), "tcp");
	cr_assert_str_eq(topo_probe_pick_transport(none, rd), "tcp");
	json_decref(rd);
	json_decref(none);

	struct topo_probe_thresholds t;
	topo_probe_thresholds_default(&t);
	cr_assert_eq(t.rdma_min_gbps, 85);
	cr_assert_eq(t.rdma_max_p50_us, 5);
	json_t *cfg = json_pack("{s:{s:s, s:s}, s:{s:s}}", "probes", "tcp_min_gbps", "2.5", "rdma_max_p50_us",
				"3", "fabric", "mtu", "9000");
	char err[128];
	cr_assert_eq(topo_probe_thresholds_from_config(cfg, &t, err, sizeof err), 0, "%s", err);
	cr_assert_eq(t.tcp_min_gbps, 2.5);
	cr_assert_eq(t.rdma_max_p50_us, 3);
	cr_assert_eq(t.mtu, 9000);
	json_decref(cfg);
	cfg = json_pack("{s:{s:s}}", "probes", "tcp_min_gbps", "fast");
	cr_assert_eq(topo_probe_thresholds_from_config(cfg, &t, err, sizeof err), -EINVAL);
	cr_assert(strstr(err, "probes.tcp_min_gbps"));
	json_decref(cfg);
}

/* l2disc in network namespaces: veth "cables" named like a Spark's netdevs,
 * a bridge as a switch, forged and foreign frames. Each node runs its own
 * libuv loop in its own namespace (nsharness.h: nothing is left behind). */
#include "topology/l2disc.h"
#include "topology/l2frame.h"

#include "nsharness.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <uv.h>

#define CLUSTER "c-test-1"
#define SECRET "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

static const char *const spark_if[2][2] = {{"enp1s0f0np0", "enP2p1s0f0np0"},
					   {"enp1s0f1np1", "enP2p1s0f1np1"}};

struct l2node {
	const char *cluster, *secret, *id, *name;
	unsigned run_ms;
	const char *forge_on;  /* send forged/foreign/broken frames on this netdev */
	const char *late_cmd;  /* shell run 300 ms after start (netdevs appearing) */
	const char *cut_cmd;   /* shell run 1000 ms after start (a link going away) */
	unsigned expiry_ms;    /* 0 = default */
};

struct l2run {
	uv_loop_t loop;
	uv_timer_t stop, forge, late, cut;
	const struct l2node *cfg;
	int forged;
};

static void on_stop(uv_timer_t *t) { uv_stop(t->loop); }

static int raw_send(const char *netdev, const uint8_t *buf, size_t len)
{
	int fd = socket(AF_PACKET, SOCK_RAW, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_ll sll;
	memset(&sll, 0, sizeof sll);
	sll.sll_family = AF_PACKET;
	sll.sll_protocol = htons(TOPO_L2_ETHERTYPE);
	sll.sll_ifindex = (int)if_nametoindex(netdev);
	int r = (int)sendto(fd, buf, len, 0, (struct sockaddr *)&sll, sizeof sll);
	close(fd);
	return r;
}

static void netdev_mac(const char *netdev, uint8_t mac[6])
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct ifreq ifr;
	memset(&ifr, 0, sizeof ifr);
	snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", netdev);
	if (fd >= 0 && ioctl(fd, SIOCGIFHWADDR, &ifr) == 0)
		memcpy(mac, ifr.ifr_hwaddr.sa_data, 6);
	if (fd >= 0)
		close(fd);
}

/* One of each: wrong key, another cluster, truncated, not ours. */
static void on_forge(uv_timer_t *t)
{
	struct l2run *r = t->data;
	const char *nd = r->cfg->forge_on;
	struct topo_l2frame f;
	memset(&f, 0, sizeof f);
	netdev_mac(nd, f.src_mac);
	f.seq = 1;
	snprintf(f.cluster_id, sizeof f.cluster_id, "%s", CLUSTER);
	snprintf(f.node_id, sizeof f.node_id, "id-evil");
	snprintf(f.node_name, sizeof f.node_name, "evil");
	snprintf(f.port, sizeof f.port, "0");
	snprintf(f.netdev, sizeof f.netdev, "%s", nd);
	f.mtu = 1500;
	struct topo_l2key wrong, other;
	topo_l2key_init(&wrong, "not-the-secret");
	topo_l2key_init(&other, "other-secret");
	uint8_t buf[TOPO_L2_MAX_FRAME];
	size_t len;
	topo_l2frame_encode(&f, &wrong, buf, sizeof buf, &len);
	raw_send(nd, buf, len);
	snprintf(f.cluster_id, sizeof f.cluster_id, "c-other");
	snprintf(f.node_id, sizeof f.node_id, "id-other");
	topo_l2frame_encode(&f, &other, buf, sizeof buf, &len);
	raw_send(nd, buf, len);
	snprintf(f.cluster_id, sizeof f.cluster_id, "%s", CLUSTER);
	struct topo_l2key right;
	topo_l2key_init(&right, SECRET);
	topo_l2frame_encode(&f, &right, buf, sizeof buf, &len);
	buf[TOPO_L2_ETH_HLEN + 7] = (uint8_t)(len - TOPO_L2_ETH_HLEN + 40); /* claims more than sent */
	raw_send(nd, buf, len);
	memcpy(buf + TOPO_L2_ETH_HLEN, "LLDP", 4);
	raw_send(nd, buf, len);
	if (++r->forged >= 3)
		uv_timer_stop(t);
}

static void on_late(uv_timer_t *t)
{
	struct l2run *r = t->data;
	if (system(r->cfg->late_cmd) != 0)
		fprintf(stderr, "late command failed\n");
}

static void on_cut(uv_timer_t *t)
{
	struct l2run *r = t->data;
	if (system(r->cfg->cut_cmd) != 0)
		fprintf(stderr, "cut command failed\n");
}

static json_t *run_l2(void *arg)
{
	const struct l2node *cfg = arg;
	struct l2run r;
	memset(&r, 0, sizeof r);
	r.cfg = cfg;
	uv_loop_init(&r.loop);
	struct topo_l2disc_if ifs[4];
	for (int p = 0; p < 2; p++)
		for (int t = 0; t < 2; t++) {
			ifs[p * 2 + t].netdev = spark_if[p][t];
			ifs[p * 2 + t].port = p ? "1" : "0";
			ifs[p * 2 + t].twin = (unsigned)t;
		}
	struct topo_l2disc_opts o;
	topo_l2disc_opts_init(&o);
	o.cluster_id = cfg->cluster;
	o.secret = cfg->secret;
	o.node_id = cfg->id;
	o.node_name = cfg->name;
	o.ifs = ifs;
	o.n_ifs = 4;
	o.fast_interval_ms = 100;
	if (cfg->expiry_ms)
		o.expiry_ms = cfg->expiry_ms;
	struct topo_l2disc *d = NULL;
	char err[256];
	if (topo_l2disc_start(&r.loop, &o, &d, err, sizeof err) < 0)
		return json_pack("{s:s}", "error", err);
	uv_timer_init(&r.loop, &r.stop);
	uv_timer_start(&r.stop, on_stop, cfg->run_ms, 0);
	uv_timer_init(&r.loop, &r.forge);
	r.forge.data = &r;
	if (cfg->forge_on)
		uv_timer_start(&r.forge, on_forge, 300, 250);
	uv_timer_init(&r.loop, &r.late);
	r.late.data = &r;
	if (cfg->late_cmd)
		uv_timer_start(&r.late, on_late, 300, 0);
	uv_timer_init(&r.loop, &r.cut);
	r.cut.data = &r;
	if (cfg->cut_cmd)
		uv_timer_start(&r.cut, on_cut, 1000, 0);
	uv_run(&r.loop, UV_RUN_DEFAULT);
	json_t *snap = topo_l2disc_snapshot(d);
	topo_l2disc_stop(d);
	uv_close((uv_handle_t *)&r.stop, NULL);
	uv_close((uv_handle_t *)&r.forge, NULL);
	uv_close((uv_handle_t *)&r.late, NULL);
	uv_close((uv_handle_t *)&r.cut, NULL);
	uv_run(&r.loop, UV_RUN_DEFAULT);
	if (uv_loop_close(&r.loop) != 0)
		json_object_set_new(snap, "loop_not_closed", json_true());
	return snap;
}

static json_t *iface(json_t *snap, const char *netdev)
{
	size_t i;
	json_t *f;
	json_array_foreach(json_object_get(snap, "interfaces"), i, f)
		if (strcmp(json_string_value(json_object_get(f, "netdev")), netdev) == 0)
			return f;
	cr_assert_fail("no interface %s in %s", netdev, json_dumps(snap, JSON_COMPACT));
	return NULL;
}

static long cnt(json_t *f, const char *group, const char *key)
{
	return (long)json_integer_value(json_object_get(json_object_get(f, group), key));
}

/* netdev of snap heard exactly these (node name, port, twin, netdev). */
static void hears_exactly(json_t *snap, const char *netdev, const char *const *want, size_t n)
{
	json_t *nb = json_object_get(iface(snap, netdev), "neighbours");
	char got[1024] = "";
	size_t i;
	json_t *x;
	json_array_foreach(nb, i, x) {
		size_t l = strlen(got);
		snprintf(got + l, sizeof got - l, "%s%s:%s:%lld:%s", i ? " " : "",
			 json_string_value(json_object_get(x, "node_name")),
			 json_string_value(json_object_get(x, "port")),
			 (long long)json_integer_value(json_object_get(x, "twin")),
			 json_string_value(json_object_get(x, "netdev")));
	}
	char exp[1024] = "";
	for (size_t k = 0; k < n; k++) {
		size_t l = strlen(exp);
		snprintf(exp + l, sizeof exp - l, "%s%s", k ? " " : "", want[k]);
	}
	cr_assert_str_eq(got, exp, "%s heard '%s', want '%s'", netdev, got, exp);
}

Test(l2disc_netns, two_nodes_crossed_cable_forged_frames_and_a_self_cable, .timeout = 60)
{
	/* A port 0 <-> B port 1 (one veth per twin); A port 1 and B port 0 are
	 * veths whose far ends stay down (unplugged). C: its port 0 twin 0 is
	 * cabled to its own port 1 twin 0; its twin-1 netdevs appear 300 ms
	 * after start and that cable is cut at 1000 ms (expiry 300 ms). */
	static const struct l2node a = {CLUSTER, SECRET, "id-a", "spark-a", 1500, NULL, NULL, NULL, 0};
	static const struct l2node b = {CLUSTER, SECRET, "id-b", "spark-b", 1500, "enp1s0f1np1", NULL,
					NULL, 0};
	static const struct l2node c = {
	    CLUSTER, SECRET, "id-c", "spark-c", 1500, NULL,
	    "ip link add enP2p1s0f0np0 type veth peer name enP2p1s0f1np1 && "
	    "ip link set enP2p1s0f0np0 up && ip link set enP2p1s0f1np1 up",
	    "ip link set enP2p1s0f1np1 down", 300};
	const struct ns_node nodes[] = {
	    {"a",
	     "ip link add enp1s0f1np1 type veth peer name nc0 && ip link add enP2p1s0f1np1 type veth peer name nc1 && "
	     "for i in enp1s0f0np0 enP2p1s0f0np0 enp1s0f1np1 enP2p1s0f1np1; do ip link set $i up; done",
	     run_l2, (void *)&a},
	    {"b",
	     "ip link add enp1s0f0np0 type veth peer name nc0 && ip link add enP2p1s0f0np0 type veth peer name nc1 && "
	     "for i in enp1s0f0np0 enP2p1s0f0np0 enp1s0f1np1 enP2p1s0f1np1; do ip link set $i up; done",
	     run_l2, (void *)&b},
	    {"c",
	     "ip link add enp1s0f0np0 mtu 9000 type veth peer name enp1s0f1np1 mtu 9000 && "
	     "ip link set enp1s0f0np0 up && ip link set enp1s0f1np1 up",
	     run_l2, (void *)&c},
	};
	const struct ns_link links[] = {
	    {0, "enp1s0f0np0", 1, "enp1s0f1np1", 9000},
	    {0, "enP2p1s0f0np0", 1, "enP2p1s0f1np1", 9000},
	};
	struct ns_scene s = {nodes, 3, links, 2, NULL, 40};
	bool skip;
	json_t *res = ns_run(&s, &skip);
	if (skip)
		cr_skip_test("needs root and network namespaces");
	cr_assert_not_null(res, "scene failed");
	json_t *A = json_object_get(res, "a"), *B = json_object_get(res, "b"), *C = json_object_get(res, "c");
	cr_assert_null(json_object_get(A, "error"), "%s", json_dumps(A, 0));
	cr_assert_null(json_object_get(C, "loop_not_closed"));

	static const char *const a0[] = {"spark-b:1:0:enp1s0f1np1"};
	static const char *const a1[] = {"spark-b:1:1:enP2p1s0f1np1"};
	static const char *const b0[] = {"spark-a:0:0:enp1s0f0np0"};
	static const char *const b1[] = {"spark-a:0:1:enP2p1s0f0np0"};
	hears_exactly(A, "enp1s0f0np0", a0, 1);
	hears_exactly(A, "enP2p1s0f0np0", a1, 1);
	hears_exactly(A, "enp1s0f1np1", NULL, 0);
	hears_exactly(A, "enP2p1s0f1np1", NULL, 0);
	hears_exactly(B, "enp1s0f1np1", b0, 1);
	hears_exactly(B, "enP2p1s0f1np1", b1, 1);
	hears_exactly(B, "enp1s0f0np0", NULL, 0);
	json_t *nb = json_array_get(json_object_get(iface(A, "enp1s0f0np0"), "neighbours"), 0);
	cr_assert_eq(json_integer_value(json_object_get(nb, "mtu")), 9000);
	cr_assert(json_is_false(json_object_get(nb, "self")));
	cr_assert_geq(json_integer_value(json_object_get(nb, "frames")), 5);

	/* B forged on its enp1s0f1np1: A's enp1s0f0np0 dropped and counted them. */
	json_t *fa = iface(A, "enp1s0f0np0");
	cr_assert_geq(cnt(fa, "dropped", "bad_hmac"), 1, "%s", json_dumps(fa, 0));
	cr_assert_geq(cnt(fa, "dropped", "other_cluster"), 1);
	cr_assert_geq(cnt(fa, "dropped", "malformed"), 1);
	cr_assert_geq(cnt(fa, "dropped", "not_ours"), 1);
	cr_assert_str_eq(json_string_value(json_array_get(json_object_get(fa, "other_clusters"), 0)),
			 "c-other");
	cr_assert_str_eq(json_string_value(json_object_get(json_object_get(fa, "bad_hmac_from"),
							   "node_name")), "evil");
	cr_assert_geq(cnt(A, "dropped", "bad_hmac"), 1);
	cr_assert_eq(cnt(iface(A, "enP2p1s0f0np0"), "dropped", "bad_hmac"), 0);
	/* B's own socket never counts what B itself sent. */
	cr_assert_eq(cnt(iface(B, "enp1s0f1np1"), "dropped", "bad_hmac"), 0);

	/* C: the self cable shows as a neighbour of C itself. The twin whose
	 * netdevs appeared late was opened and heard itself, then its cable was
	 * cut and the neighbour expired. */
	static const char *const c0[] = {"spark-c:1:0:enp1s0f1np1"};
	hears_exactly(C, "enp1s0f0np0", c0, 1);
	cr_assert(json_is_true(json_object_get(
	    json_array_get(json_object_get(iface(C, "enp1s0f0np0"), "neighbours"), 0), "self")));
	json_t *late = iface(C, "enP2p1s0f0np0");
	cr_assert(json_is_true(json_object_get(late, "open")), "%s", json_dumps(late, 0));
	cr_assert_gt(json_integer_value(json_object_get(late, "rx_frames")), 0, "%s", json_dumps(late, 0));
	hears_exactly(C, "enP2p1s0f0np0", NULL, 0);
	json_decref(res);
}

Test(l2disc_netns, bridge_three_nodes_and_a_foreign_cluster, .timeout = 60)
{
	/* Port 0 twins of n1..n3 and of a node of another cluster on one bridge
	 * (STP off); port 1 netdevs are unplugged veths. */
	static const struct l2node n[4] = {
	    {CLUSTER, SECRET, "id-1", "spark-1", 1500, NULL, NULL, NULL, 0},
	    {CLUSTER, SECRET, "id-2", "spark-2", 1500, NULL, NULL, NULL, 0},
	    {CLUSTER, SECRET, "id-3", "spark-3", 1500, NULL, NULL, NULL, 0},
	    {"c-other", "another-secret", "id-x", "other-1", 1500, NULL, NULL, NULL, 0},
	};
	const char *setup = "ip link add enp1s0f1np1 type veth peer name nc0 && ip link add enP2p1s0f1np1 type veth peer name nc1 && "
			    "for i in enp1s0f0np0 enP2p1s0f0np0 enp1s0f1np1 enP2p1s0f1np1; do ip link set $i up; done";
	const struct ns_node nodes[] = {
	    {"n1", setup, run_l2, (void *)&n[0]},
	    {"n2", setup, run_l2, (void *)&n[1]},
	    {"n3", setup, run_l2, (void *)&n[2]},
	    {"x", setup, run_l2, (void *)&n[3]},
	};
	const struct ns_link links[] = {
	    {0, "enp1s0f0np0", -1, "sw1a", 0}, {0, "enP2p1s0f0np0", -1, "sw1b", 0},
	    {1, "enp1s0f0np0", -1, "sw2a", 0}, {1, "enP2p1s0f0np0", -1, "sw2b", 0},
	    {2, "enp1s0f0np0", -1, "sw3a", 0}, {2, "enP2p1s0f0np0", -1, "sw3b", 0},
	    {3, "enp1s0f0np0", -1, "sw4a", 0}, {3, "enP2p1s0f0np0", -1, "sw4b", 0},
	};
	struct ns_scene s = {nodes, 4, links, 8,
			     "ip link add br0 type bridge stp_state 0 && ip link set br0 up && "
			     "for i in sw1a sw1b sw2a sw2b sw3a sw3b sw4a sw4b; do "
			     "ip link set $i master br0 && ip link set $i up || exit 1; done",
			     40};
	bool skip;
	json_t *res = ns_run(&s, &skip);
	if (skip)
		cr_skip_test("needs root and network namespaces");
	cr_assert_not_null(res, "scene failed");
	const char *names[] = {"n1", "n2", "n3"};
	for (int i = 0; i < 3; i++) {
		json_t *S = json_object_get(res, names[i]);
		char want[4][64];
		const char *wp[4];
		int k = 0;
		for (int j = 0; j < 3; j++) {
			if (j == i)
				continue;
			for (int t = 0; t < 2; t++) {
				snprintf(want[k], sizeof want[k], "spark-%d:0:%d:%s", j + 1, t, spark_if[0][t]);
				wp[k] = want[k];
				k++;
			}
		}
		for (int t = 0; t < 2; t++) {
			hears_exactly(S, spark_if[0][t], wp, 4);
			json_t *f = iface(S, spark_if[0][t]);
			/* Its own twin is on the same bridge: heard, ignored, counted. */
			cr_assert_geq(cnt(f, "ignored", "own_twin"), 1);
			cr_assert_geq(cnt(f, "dropped", "other_cluster"), 1);
			cr_assert_str_eq(json_string_value(json_array_get(json_object_get(f, "other_clusters"), 0)),
					 "c-other");
			cr_assert_eq(cnt(f, "dropped", "bad_hmac"), 0);
		}
	}
	/* The foreign node hears only frames it drops. */
	json_t *X = json_object_get(res, "x");
	hears_exactly(X, "enp1s0f0np0", NULL, 0);
	cr_assert_geq(cnt(X, "dropped", "other_cluster"), 3);
	json_decref(res);
}

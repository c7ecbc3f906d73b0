/* The environment contract (agent/jobenv.c): lists from discovery reports
 * (the sysfs fixtures' expected JSON), a rank's environment, and the job
 * network rule (fabric when every node reaches every other directly). */
#include "jobenv.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>

static json_t *fixture(const char *name)
{
	char p[512];
	snprintf(p, sizeof p, "%s/%s.expected.json", TOPO_FIXTURES, name);
	json_error_t e;
	json_t *j = json_load_file(p, 0, &e);
	cr_assert(j, "cannot load %s: %s", p, e.text);
	return j;
}

static const char *env_get(json_t *env, const char *k)
{
	return json_string_value(json_object_get(env, k));
}

Test(jobenv, lists_healthy_node_both_twins_of_both_ports)
{
	json_t *d = fixture("spark-healthy");
	char nd[256], hca[256], addr[256];
	jobenv_fabric_lists(d, "enp1s0f1np1", nd, sizeof nd, hca, sizeof hca, addr, sizeof addr);
	cr_expect_str_eq(nd, "enp1s0f0np0,enP2p1s0f0np0,enp1s0f1np1,enP2p1s0f1np1");
	cr_expect_str_eq(hca, "rocep1s0f0,roceP2p1s0f0,rocep1s0f1,roceP2p1s0f1");
	cr_expect_str_eq(addr, "enp1s0f1np1,enp1s0f0np0,enP2p1s0f0np0,enP2p1s0f1np1",
			 "the socket interface first");
	json_decref(d);
}

Test(jobenv, lists_skip_an_unplugged_port)
{
	json_t *d = fixture("spark-port1-unplugged");
	char nd[256], hca[256], addr[256];
	jobenv_fabric_lists(d, NULL, nd, sizeof nd, hca, sizeof hca, addr, sizeof addr);
	cr_expect_str_eq(nd, "enp1s0f0np0,enP2p1s0f0np0");
	cr_expect_str_eq(hca, "rocep1s0f0,roceP2p1s0f0", "both twins of the active port only");
	json_decref(d);
}

static struct jobenv_job base_job(void)
{
	struct jobenv_job j = {
		.job_id = 7, .job_name = "train", .group = "g", .topology = "ring", .shape = "ring",
		.launcher = "native", .world_size = 8, .ranks_per_node = 2, .nnodes = 4,
		.node_rank = 1, .node = "spark-2", .rank = 3, .local_rank = 1, .net = "fabric",
		.socket_addr = "169.254.12.1", .socket_ifname = "enp1s0f1np1",
		.tcp_include = "169.254.12.0/24", .master_addr = "169.254.12.9", .master_port = 29800,
		.peers = "0=a:1,1=b:2", .model_dir = "/data/models"};
	return j;
}

Test(jobenv, rank_environment_from_this_nodes_ports)
{
	json_t *d = fixture("spark-healthy");
	struct jobenv_job j = base_job();
	json_t *env = jobenv_build(&j, d);
	cr_assert(env);
	const char *want[][2] = {
		{"SPARK_JOB_ID", "7"}, {"SPARK_RANK", "3"}, {"SPARK_WORLD_SIZE", "8"},
		{"SPARK_LOCAL_RANK", "1"}, {"SPARK_NODE", "spark-2"}, {"SPARK_GROUP", "g"},
		{"SPARK_TOPOLOGY", "ring"}, {"SPARK_PEERS", "0=a:1,1=b:2"}, {"SPARK_NET", "fabric"},
		{"SPARK_MODEL_DIR", "/data/models"}, {"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "169.254.12.9"},
		{"MASTER_PORT", "29800"},
		{"NCCL_IB_HCA", "rocep1s0f0,roceP2p1s0f0,rocep1s0f1,roceP2p1s0f1"},
		{"NCCL_SOCKET_IFNAME", "enp1s0f1np1,enp1s0f0np0,enP2p1s0f0np0,enP2p1s0f1np1"},
		{"UCX_NET_DEVICES", "enp1s0f1np1,enp1s0f0np0,enP2p1s0f0np0,enP2p1s0f1np1"},
		{"OMPI_MCA_btl_tcp_if_include", "169.254.12.0/24"}, {"GLOO_SOCKET_IFNAME", "enp1s0f1np1"},
		{"TP_SOCKET_IFNAME", "enp1s0f1np1"}, {"VLLM_HOST_IP", "169.254.12.1"},
		{"NCCL_IB_SUBNET_AWARE_ROUTING", "1"}, {"NCCL_ALGO", "Ring"}, {"NCCL_NET_PLUGIN", "none"},
		{"NCCL_IB_MERGE_NICS", "0"},
		{"SPARK_FABRIC_NETDEVS", "enp1s0f0np0,enP2p1s0f0np0,enp1s0f1np1,enP2p1s0f1np1"}};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
		cr_expect_str_eq(env_get(env, want[i][0]) ?: "(unset)", want[i][1], "%s", want[i][0]);
	cr_expect_null(json_object_get(env, "NCCL_IB_GID_INDEX"), "never pinned");
	json_decref(env);
	json_decref(d);
}

Test(jobenv, switch_and_small_rings_have_no_ring_settings)
{
	struct jobenv_job j = base_job();
	j.topology = "switch";
	json_t *env = jobenv_build(&j, NULL);
	cr_expect_null(json_object_get(env, "NCCL_ALGO"));
	cr_expect_null(json_object_get(env, "NCCL_IB_HCA"), "no RDMA device, no NCCL_IB_HCA");
	json_decref(env);
	j.topology = "ring";
	j.nnodes = 2;
	env = jobenv_build(&j, NULL);
	cr_expect_null(json_object_get(env, "NCCL_ALGO"), "a pair is not a ring of 3+");
	json_decref(env);
}

Test(jobenv, management_net_names_the_management_interface)
{
	json_t *d = fixture("spark-healthy");
	struct jobenv_job j = base_job();
	j.net = "management";
	j.socket_addr = "10.1.2.3";
	j.socket_ifname = "enP7s7";
	j.tcp_include = "10.1.2.0/24";
	json_t *env = jobenv_build(&j, d);
	cr_expect_str_eq(env_get(env, "NCCL_SOCKET_IFNAME"), "enP7s7");
	cr_expect_str_eq(env_get(env, "GLOO_SOCKET_IFNAME"), "enP7s7");
	cr_expect_str_eq(env_get(env, "UCX_NET_DEVICES"), "enP7s7");
	cr_expect_str_eq(env_get(env, "SPARK_NET"), "management");
	cr_expect_str_eq(env_get(env, "NCCL_IB_HCA"), "rocep1s0f0,roceP2p1s0f0,rocep1s0f1,roceP2p1s0f1",
			 "RDMA still on the fabric");
	json_decref(env);
	json_decref(d);
}

Test(jobenv, overrides_last_and_launcher_ranks)
{
	struct jobenv_job j = base_job();
	json_t *ov = json_pack("[s, s, s]", "NCCL_ALGO=Tree", "FOO=a=b", "NCCL_IB_GID_INDEX=3");
	j.overrides = ov;
	j.rank = -1;
	j.local_rank = -1;
	json_t *base = json_pack("{s:s}", "PATH", "/usr/bin");
	j.base = base;
	json_t *env = jobenv_build(&j, NULL);
	cr_expect_str_eq(env_get(env, "NCCL_ALGO"), "Tree");
	cr_expect_str_eq(env_get(env, "FOO"), "a=b");
	cr_expect_str_eq(env_get(env, "NCCL_IB_GID_INDEX"), "3", "the user may pin it");
	cr_expect_str_eq(env_get(env, "PATH"), "/usr/bin");
	cr_expect_null(json_object_get(env, "RANK"), "torchrun/mpi number their own ranks");
	cr_expect_null(json_object_get(env, "SPARK_LOCAL_RANK"));
	json_decref(env);
	json_decref(ov);
	json_decref(base);
}

Test(jobenv, parse_kv)
{
	char k[64];
	cr_expect_eq(jobenv_parse_kv("A_1=x", k, sizeof k), 0);
	cr_expect_str_eq(k, "A_1");
	cr_expect_eq(jobenv_parse_kv("_X=", k, sizeof k), 0);
	cr_expect_lt(jobenv_parse_kv("1A=x", k, sizeof k), 0);
	cr_expect_lt(jobenv_parse_kv("=x", k, sizeof k), 0);
	cr_expect_lt(jobenv_parse_kv("NOEQ", k, sizeof k), 0);
	cr_expect_lt(jobenv_parse_kv("A-B=x", k, sizeof k), 0);
}

/* A node of a synthetic report: ports with twins {netdev, carrier, ipv4}. */
static json_t *node(const char *p0t0, const char *p0t1, const char *p1t0, const char *p1t1)
{
	const char *a[4] = {p0t0, p0t1, p1t0, p1t1};
	const char *nd[4] = {"enp1s0f0np0", "enP2p1s0f0np0", "enp1s0f1np1", "enP2p1s0f1np1"};
	json_t *ports = json_array();
	for (int p = 0; p < 2; p++) {
		json_t *tw = json_array();
		for (int t = 0; t < 2; t++) {
			const char *ad = a[p * 2 + t];
			json_array_append_new(tw, json_pack("{s:s, s:b, s:o}", "netdev", nd[p * 2 + t],
							    "carrier", ad != NULL,
							    "ipv4", ad ? json_pack("[s]", ad) : json_array()));
		}
		json_array_append_new(ports, json_pack("{s:s, s:o}", "name", p ? "1" : "0", "twins", tw));
	}
	return json_pack("{s:o}", "ports", ports);
}

Test(jobnet, switch_rails_are_fabric)
{
	/* every node on port 1 (node 3 on port 0), rail subnets .20 and .21 */
	json_t *d[3] = {node(NULL, NULL, "169.254.20.1/24", "169.254.21.1/24"),
			node(NULL, NULL, "169.254.20.2/24", "169.254.21.2/24"),
			node("169.254.20.3/24", "169.254.21.3/24", NULL, NULL)};
	struct jobnet_member m[3] = {{d[0], "10.0.0.1"}, {d[1], "10.0.0.2"}, {d[2], "10.0.0.3"}};
	struct jobnet_plan p;
	cr_assert_eq(jobnet_plan(m, 3, &p), 0);
	cr_expect(p.fabric);
	cr_expect_str_eq(p.socket_addr[0], "169.254.20.1");
	cr_expect_str_eq(p.socket_addr[2], "169.254.20.3");
	cr_expect_str_eq(p.tcp_include, "169.254.20.0/24");
	for (int i = 0; i < 3; i++)
		json_decref(d[i]);
}

Test(jobnet, ring_of_four_without_common_subnet_is_management)
{
	/* cable i: node i port 0 <-> node i+1 port 1, subnet 169.254.(10+i).0/24 */
	json_t *d[4];
	char a[4][2][32];
	for (int i = 0; i < 4; i++) {
		snprintf(a[i][0], 32, "169.254.%d.1/24", 10 + i);           /* port 0: cable i */
		snprintf(a[i][1], 32, "169.254.%d.2/24", 10 + (i + 3) % 4); /* port 1: cable i-1 */
		d[i] = node(a[i][0], NULL, a[i][1], NULL);
	}
	struct jobnet_member m[4] = {{d[0], "10.0.0.1"}, {d[1], "10.0.0.2"}, {d[2], "10.0.0.3"},
				     {d[3], "10.0.0.4"}};
	struct jobnet_plan p;
	cr_assert_eq(jobnet_plan(m, 4, &p), 0);
	cr_expect_not(p.fabric);
	cr_expect_str_eq(p.socket_addr[3], "10.0.0.4");
	cr_expect(strstr(p.why, "no common subnet") != NULL, "%s", p.why);
	/* a pair of neighbours (nodes 0 and 1 share cable 0) is fabric */
	cr_assert_eq(jobnet_plan(m, 2, &p), 0);
	cr_expect(p.fabric);
	cr_expect_str_eq(p.socket_addr[0], "169.254.10.1");
	cr_expect_str_eq(p.socket_addr[1], "169.254.10.2");
	for (int i = 0; i < 4; i++)
		json_decref(d[i]);
}

Test(jobnet, no_addresses_is_management)
{
	json_t *d = node(NULL, NULL, NULL, NULL);
	struct jobnet_member m[2] = {{d, "169.254.100.1"}, {NULL, "169.254.100.2"}};
	struct jobnet_plan p;
	cr_assert_eq(jobnet_plan(m, 2, &p), 0);
	cr_expect_not(p.fabric);
	cr_expect_str_eq(p.socket_addr[1], "169.254.100.2");
	cr_expect_str_eq(p.tcp_include, "");
	json_decref(d);
	cr_expect_eq(jobenv_master_port(7), JOBENV_PORT_BASE + 700);
	char net[64];
	cr_expect_eq(jobenv_cidr_network("169.254.100.7/16", net, sizeof net), 0);
	cr_expect_str_eq(net, "169.254.0.0/16");
}

/* Issue 16: a 3-node ring (a triangle) has no subnet that spans it, but
 * every pair has its own cable subnet: the job is on the fabric, and each
 * node's view names the address that node reaches each peer at. */
Test(jobnet, triangle_is_fabric_with_per_node_views)
{
	/* cable i: node i port 0 (.1) <-> node i+1 port 1 (.2), subnet 169.254.(30+i) */
	json_t *d[3];
	char a[3][2][32];
	for (int i = 0; i < 3; i++) {
		snprintf(a[i][0], 32, "169.254.%d.1/24", 30 + i);
		snprintf(a[i][1], 32, "169.254.%d.2/24", 30 + (i + 2) % 3);
		d[i] = node(a[i][0], NULL, a[i][1], NULL);
	}
	struct jobnet_member m[3] = {{d[0], "10.0.0.1"}, {d[1], "10.0.0.2"}, {d[2], "10.0.0.3"}};
	struct jobnet_plan p;
	cr_assert_eq(jobnet_plan(m, 3, &p), 0);
	cr_expect(p.fabric, "%s", p.why);
	cr_expect(p.pairwise);
	/* node 0 reaches node 1 on cable 0, node 2 on cable 2 */
	cr_expect_str_eq(p.peer_addr[0][1], "169.254.30.2");
	cr_expect_str_eq(p.peer_addr[0][2], "169.254.32.1");
	cr_expect_str_eq(p.peer_addr[1][0], "169.254.30.1");
	cr_expect_str_eq(p.peer_addr[2][0], "169.254.32.2");
	cr_expect_str_eq(p.peer_addr[1][2], "169.254.31.2");
	cr_expect(strstr(p.tcp_include, "169.254.30.0/24") && strstr(p.tcp_include, "169.254.31.0/24") &&
		  strstr(p.tcp_include, "169.254.32.0/24"), "%s", p.tcp_include);
	json_t *spec = json_pack("{s:[{s:s},{s:s},{s:s}], s:i, s:i, s:s, s:s}", "nodes", "name", "a",
				 "name", "b", "name", "c", "ranks_per_node", 1, "master_port", 29500,
				 "master_addr", p.socket_addr[0], "peers", "unused");
	json_t *v2 = jobnet_node_spec(&p, 2, spec);
	cr_expect_str_eq(json_string_value(json_object_get(v2, "peers")),
			 "0=169.254.32.2:29501,1=169.254.31.1:29502,2=169.254.32.1:29503");
	cr_expect_str_eq(json_string_value(json_object_get(v2, "master_addr")), "169.254.32.2");
	cr_expect_str_eq(json_string_value(json_object_get(spec, "peers")), "unused",
			 "the shared spec is left alone");
	json_decref(v2);
	json_decref(spec);
	/* the triangle's group is given to the job as "direct": no ring-only NCCL */
	struct jobenv_job j = base_job();
	j.nnodes = 3;
	json_t *env = jobenv_build(&j, NULL);
	cr_expect_str_eq(env_get(env, "SPARK_TOPOLOGY"), "direct");
	cr_expect_null(json_object_get(env, "NCCL_ALGO"));
	json_decref(env);
	j.nnodes = 4;
	env = jobenv_build(&j, NULL);
	cr_expect_str_eq(env_get(env, "SPARK_TOPOLOGY"), "ring");
	cr_expect_str_eq(env_get(env, "NCCL_ALGO"), "Ring");
	json_decref(env);
	for (int i = 0; i < 3; i++)
		json_decref(d[i]);
}

Test(jobnet, pair_addrs_are_both_twins_of_the_cable_between_them)
{
	/* ring of four, cable i: node i port 0 <-> node i+1 port 1, twin 0 on
	 * 169.254.(10+i).0/24, twin 1 on 169.254.(30+i).0/24 */
	json_t *d[4];
	char a[4][4][32];
	for (int i = 0; i < 4; i++) {
		int prev = (i + 3) % 4;
		snprintf(a[i][0], 32, "169.254.%d.1/24", 10 + i);
		snprintf(a[i][1], 32, "169.254.%d.1/24", 30 + i);
		snprintf(a[i][2], 32, "169.254.%d.2/24", 10 + prev);
		snprintf(a[i][3], 32, "169.254.%d.2/24", 30 + prev);
		d[i] = node(a[i][0], a[i][1], a[i][2], a[i][3]);
	}
	char out[2][48];
	cr_assert_eq(jobnet_pair_addrs(d[0], d[1], out, 2), 2);
	cr_expect_str_eq(out[0], "169.254.10.2");
	cr_expect_str_eq(out[1], "169.254.30.2");
	cr_assert_eq(jobnet_pair_addrs(d[1], d[0], out, 2), 2, "the other way round");
	cr_expect_str_eq(out[0], "169.254.10.1");
	cr_expect_str_eq(out[1], "169.254.30.1");
	cr_expect_eq(jobnet_pair_addrs(d[0], d[2], out, 2), 0, "no cable between nodes 0 and 2");
	cr_expect_eq(jobnet_pair_addrs(d[0], d[1], out, 1), 1, "at most max");
	cr_expect_eq(jobnet_pair_addrs(NULL, d[1], out, 2), 0, "no report: nothing reached");
	for (int i = 0; i < 4; i++)
		json_decref(d[i]);
}

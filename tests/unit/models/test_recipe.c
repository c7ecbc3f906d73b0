/* models/recipe: parsing with file:line:column errors, --set overrides, the
 * built-in recipes, and the renderer's command lines against the engines'
 * documented multi-node flags (docs/serve.md) on a pair, a 4-node ring and a
 * 4-node switch. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "recipe.h"

static recipe_t parse_ok(const char *text)
{
	recipe_t r;
	char err[RECIPE_ERR_LEN] = "";
	int rc = recipe_parse("t.yaml", text, strlen(text), NULL, 0, &r, err, sizeof err);
	cr_assert_eq(rc, 0, "%s", err);
	return r;
}

static void parse_fails(const char *text, const char *const *sets, size_t n, const char *want)
{
	recipe_t r;
	char err[RECIPE_ERR_LEN] = "";
	int rc = recipe_parse("t.yaml", text, strlen(text), sets, n, &r, err, sizeof err);
	cr_assert_lt(rc, 0, "parsed, wanted \"%s\"", want);
	cr_assert(strstr(err, want), "error \"%s\" lacks \"%s\"", err, want);
}

/* ---- parsing ----------------------------------------------------------------- */

Test(recipe, every_builtin_parses_and_has_its_runtime)
{
	size_t n = 0;
	for (const recipe_builtin_t *b; (b = recipe_builtin_at(n)); n++) {
		recipe_t r;
		char err[RECIPE_ERR_LEN] = "";
		cr_assert_eq(recipe_parse(b->name, b->text, strlen(b->text), NULL, 0, &r, err,
					  sizeof err),
			     0, "built-in %s: %s", b->name, err);
		cr_assert_str_eq(r.name, b->name);
		cr_assert_str_eq(recipe_runtime_name(r.runtime), b->name);
		recipe_free(&r);
	}
	cr_assert_eq(n, 6);
	cr_assert_null(recipe_builtin_find("nope"));
}

Test(recipe, defaults_when_only_the_required_keys_are_given)
{
	recipe_t r = parse_ok("name: m\nruntime: sglang\nmodel: org/m\n");
	cr_assert_eq(r.port, 30000);
	cr_assert_eq(r.tp, 0);
	cr_assert_eq(r.pp, 0);
	cr_assert_str_eq(r.health_path, "/health");
	cr_assert_eq(r.startup_timeout_s, RECIPE_STARTUP_TIMEOUT_S);
	cr_assert_eq(r.restart, RECIPE_RESTART_ON_FAILURE);
	cr_assert_eq(r.restart_limit, 5);
	cr_assert_eq(r.memory_gib, 0);
	recipe_free(&r);
}

Test(recipe, full_recipe_fields)
{
	recipe_t r = parse_ok("name: big\n"
			      "runtime: vllm\n"
			      "model: org/m\n"
			      "tp: 2\npp: 2\nnodes: 4\nport: 9000\n"
			      "args: [--max-model-len, \"32768\"]\n"
			      "env:\n  HF_HOME: /data/hf\n"
			      "health:\n  path: /v1/models\n  interval: 30s\n  startup_timeout: 2h\n"
			      "memory: 90GiB\n"
			      "restart:\n  policy: always\n  limit: 0\n  backoff: 1m\n");
	cr_assert_eq(r.tp, 2);
	cr_assert_eq(r.nodes, 4);
	cr_assert_eq(r.port, 9000);
	cr_assert_eq(r.n_args, 2);
	cr_assert_str_eq(r.args[1], "32768");
	cr_assert_eq(r.n_env, 1);
	cr_assert_str_eq(r.env_key[0], "HF_HOME");
	cr_assert_eq(r.health_interval_s, 30);
	cr_assert_eq(r.startup_timeout_s, 7200);
	cr_assert_float_eq(r.memory_gib, 90.0, 1e-9);
	cr_assert_eq(r.restart, RECIPE_RESTART_ALWAYS);
	cr_assert_eq(r.restart_limit, 0);
	cr_assert_eq(r.backoff_s, 60);
	recipe_free(&r);
}

Test(recipe, errors_name_file_line_and_column)
{
	parse_fails("name: m\nruntime: vllm\nmodel: x\ntp: nine\n", NULL, 0,
		    "t.yaml:4:1: tp: expected a whole number from 1 to 8");
	parse_fails("name: m\nruntime: vllm\nmodel: x\nhealth:\n  path: /h\n  interval: soon\n",
		    NULL, 0, "t.yaml:6:3: health.interval: expected a duration");
	parse_fails("name: m\nruntime: vllm\nmodel: x\ntpp: 2\n", NULL, 0,
		    "t.yaml:4:1: tpp: unknown key");
	parse_fails("name: m\nruntime: vlm\nmodel: x\n", NULL, 0,
		    "t.yaml:2:1: runtime: unknown runtime \"vlm\"");
	parse_fails("name: m\nruntime: vllm\nmodel: x\nrestart:\n  policy: sometimes\n", NULL, 0,
		    "t.yaml:5:3: restart.policy: unknown policy");
	/* YAML syntax errors come from libyaml with their mark */
	parse_fails("name: m\nruntime: [vllm\n", NULL, 0, "t.yaml:");
	parse_fails("runtime: vllm\nmodel: x\n", NULL, 0, "t.yaml: missing \"name\"");
}

Test(recipe, layout_and_runtime_rules)
{
	parse_fails("name: m\nruntime: vllm\nmodel: x\ntp: 2\npp: 2\nnodes: 2\n", NULL, 0,
		    "tp 2 x pp 2 is 4 nodes, not 2");
	parse_fails("name: m\nruntime: llamacpp\nmodel: x\npp: 2\n", NULL, 0,
		    "t.yaml:4:1: pp: llamacpp has no pipeline stages");
	parse_fails("name: m\nruntime: command\nmodel: x\n", NULL, 0, "needs a command: template");
	parse_fails("name: m\nruntime: vllm\nmodel: x\ncommand: [a]\n", NULL, 0,
		    "only runtime command takes a command");
	parse_fails("name: m\nruntime: command\nmodel: x\ncommand: [srv, \"{prot}\"]\n", NULL, 0,
		    "unknown placeholder {prot}");
	parse_fails("name: m\nruntime: command\nmodel: x\ncommand: [srv, \"{port\"]\n", NULL, 0,
		    "a '{' without its '}'");
	parse_fails("name: M!\nruntime: vllm\nmodel: x\n", NULL, 0, "t.yaml:1:1: name:");
	parse_fails("name: m\nruntime: vllm\nmodel: x\nenv:\n  9X: y\n", NULL, 0,
		    "t.yaml:5:3: env.9X: not a variable name");
	parse_fails("name: m\nruntime: vllm\nmodel: x\nmemory: lots\n", NULL, 0,
		    "t.yaml:4:1: memory: expected auto or GiB");
	parse_fails("name: m\nruntime: vllm\nmodel: x\ndtype: fp3\n", NULL, 0,
		    "t.yaml:4:1: dtype: unknown storage type \"fp3\"");
	parse_fails("name: m\nruntime: vllm\nmodel: x\nhealth:\n  path: health\n", NULL, 0,
		    "health.path: an HTTP path starting with '/'");
}

Test(recipe, set_overrides_before_validation)
{
	const char *text = "name: m\nruntime: vllm\nmodel: x\ntp: 2\nrestart: never\n";
	const char *sets[] = {"tp=4", "model=org/other", "env.HF_HOME=/d", "health.path=/v1/models",
			      "restart.limit=2", "port=8100"};
	recipe_t r;
	char err[RECIPE_ERR_LEN] = "";
	cr_assert_eq(recipe_parse("t.yaml", text, strlen(text), sets, 6, &r, err, sizeof err), 0,
		     "%s", err);
	cr_assert_eq(r.tp, 4);
	cr_assert_str_eq(r.model, "org/other");
	cr_assert_str_eq(r.env_val[0], "/d");
	cr_assert_str_eq(r.health_path, "/v1/models");
	cr_assert_eq(r.restart, RECIPE_RESTART_NEVER);
	cr_assert_eq(r.restart_limit, 2);
	cr_assert_eq(r.port, 8100);
	recipe_free(&r);
	const char *bad[] = {"tp=x"};
	parse_fails(text, bad, 1, "--set tp=x: expected a whole number");
	const char *nokey[] = {"colour=red"};
	parse_fails(text, nokey, 1, "--set colour=red: no key \"colour\"");
	const char *noeq[] = {"tp"};
	parse_fails(text, noeq, 1, "--set tp: expected KEY=VALUE");
}

/* ---- rendering ------------------------------------------------------------------ */

/* n members spark-1..n at 169.254.10.i (fabric) and 169.254.100.i (agent).
 * On a ring, odd nodes carry the socket on port 1 and even ones on port 0,
 * so a test can tell one member's interface names from another's. */
static recipe_layout_t layout(size_t n, const char *topo)
{
	recipe_layout_t l = {.group = "g", .topology = topo, .net = "fabric", .n = n};
	for (size_t i = 0; i < n; i++) {
		recipe_member_t *m = &l.m[i];
		snprintf(m->name, sizeof m->name, "spark-%zu", i + 1);
		snprintf(m->addr, sizeof m->addr, "169.254.10.%zu", i + 1);
		snprintf(m->mgmt_addr, sizeof m->mgmt_addr, "169.254.100.%zu", i + 1);
		snprintf(m->ifname, sizeof m->ifname, "%s", i % 2 ? "enp1s0f0np0" : "enp1s0f1np1");
		snprintf(m->hcas, sizeof m->hcas, "%s",
			 i % 2 ? "rocep1s0f0,roceP2p1s0f0" : "rocep1s0f1,roceP2p1s0f1");
	}
	return l;
}

static json_t *render(const char *builtin, const char *const *sets, size_t n,
		      const recipe_layout_t *l)
{
	const recipe_builtin_t *b = recipe_builtin_find(builtin);
	cr_assert(b);
	recipe_t r;
	char err[RECIPE_ERR_LEN] = "";
	cr_assert_eq(recipe_parse(b->name, b->text, strlen(b->text), sets, n, &r, err, sizeof err),
		     0, "%s", err);
	json_t *out = NULL;
	cr_assert_eq(recipe_render(&r, l, &out, err, sizeof err), 0, "%s", err);
	recipe_free(&r);
	return out;
}

/* argv of rank i joined with spaces */
static char *argv_of(json_t *plan, size_t i)
{
	static char buf[4096];
	json_t *a = json_object_get(json_array_get(json_object_get(plan, "ranks"), i), "argv");
	buf[0] = '\0';
	size_t k;
	json_t *w;
	json_array_foreach(a, k, w) {
		strncat(buf, k ? " " : "", sizeof buf - strlen(buf) - 1);
		strncat(buf, json_string_value(w), sizeof buf - strlen(buf) - 1);
	}
	return buf;
}

static const char *env_of(json_t *plan, size_t i, const char *k)
{
	json_t *e = json_object_get(json_array_get(json_object_get(plan, "ranks"), i), "env");
	return json_string_value(json_object_get(e, k));
}

static const char *role_of(json_t *plan, size_t i)
{
	return json_string_value(
	    json_object_get(json_array_get(json_object_get(plan, "ranks"), i), "role"));
}

Test(render, vllm_pair)
{
	recipe_layout_t l = layout(2, "switch");
	snprintf(l.m[1].ifnames, sizeof l.m[1].ifnames, "enp1s0f0np0,enP2p1s0f0np0");
	json_t *p = render("vllm", NULL, 0, &l);
	cr_assert_eq(json_array_size(json_object_get(p, "ranks")), 2);
	/* NCCL and UCX get every addressed twin, Gloo one netdev */
	cr_assert_str_eq(env_of(p, 1, "NCCL_SOCKET_IFNAME"), "enp1s0f0np0,enP2p1s0f0np0");
	cr_assert_str_eq(env_of(p, 1, "UCX_NET_DEVICES"), "enp1s0f0np0,enP2p1s0f0np0");
	cr_assert_str_eq(env_of(p, 0, "NCCL_SOCKET_IFNAME"), "enp1s0f1np1");
	cr_assert_str_eq(argv_of(p, 0),
			 "vllm serve meta-llama/Llama-3.3-70B-Instruct --tensor-parallel-size 2 "
			 "--nnodes 2 --node-rank 0 --master-addr 169.254.10.1 --master-port 29500 "
			 "--host 0.0.0.0 --port 8000 --gpu-memory-utilization 0.80");
	cr_assert_str_eq(argv_of(p, 1),
			 "vllm serve meta-llama/Llama-3.3-70B-Instruct --tensor-parallel-size 2 "
			 "--nnodes 2 --node-rank 1 --master-addr 169.254.10.1 --master-port 29500 "
			 "--headless --gpu-memory-utilization 0.80");
	cr_assert_str_eq(role_of(p, 0), "api");
	cr_assert_str_eq(role_of(p, 1), "headless");
	/* each node's own address and interface */
	cr_assert_str_eq(env_of(p, 0, "VLLM_HOST_IP"), "169.254.10.1");
	cr_assert_str_eq(env_of(p, 1, "VLLM_HOST_IP"), "169.254.10.2");
	cr_assert_str_eq(env_of(p, 1, "GLOO_SOCKET_IFNAME"), "enp1s0f0np0");
	cr_assert_str_eq(env_of(p, 0, "GLOO_SOCKET_IFNAME"), "enp1s0f1np1");
	cr_assert_str_eq(env_of(p, 1, "NCCL_IB_HCA"), "rocep1s0f0,roceP2p1s0f0");
	cr_assert_str_eq(env_of(p, 1, "MASTER_ADDR"), "169.254.10.1");
	cr_assert_null(env_of(p, 0, "NCCL_ALGO"));
	cr_assert_str_eq(json_string_value(json_object_get(json_object_get(p, "endpoint"), "url")),
			 "http://169.254.10.1:8000");
	cr_assert_str_eq(json_string_value(
			     json_object_get(json_object_get(p, "endpoint"), "management_url")),
			 "http://169.254.100.1:8000");
	json_decref(p);
}

Test(render, vllm_single_node_has_no_multinode_flags)
{
	recipe_layout_t l = layout(1, "switch");
	json_t *p = render("vllm", NULL, 0, &l);
	cr_assert_str_eq(argv_of(p, 0), "vllm serve meta-llama/Llama-3.3-70B-Instruct "
					"--tensor-parallel-size 1 --host 0.0.0.0 --port 8000 "
					"--gpu-memory-utilization 0.80");
	cr_assert_null(env_of(p, 0, "NCCL_IB_SUBNET_AWARE_ROUTING"));
	json_decref(p);
}

Test(render, vllm_tp2_pp2_on_a_4_ring)
{
	recipe_layout_t l = layout(4, "ring");
	const char *sets[] = {"tp=2", "pp=2"};
	json_t *p = render("vllm", sets, 2, &l);
	cr_assert(strstr(argv_of(p, 3), "--tensor-parallel-size 2 --pipeline-parallel-size 2 "
					"--nnodes 4 --node-rank 3 --master-addr 169.254.10.1"));
	cr_assert(strstr(argv_of(p, 3), "--headless"));
	for (size_t i = 0; i < 4; i++) {
		cr_assert_str_eq(env_of(p, i, "NCCL_ALGO"), "Ring");
		cr_assert_str_eq(env_of(p, i, "NCCL_NET_PLUGIN"), "none");
		cr_assert_str_eq(env_of(p, i, "NCCL_IB_MERGE_NICS"), "0");
		cr_assert_str_eq(env_of(p, i, "SPARK_TOPOLOGY"), "ring");
	}
	json_decref(p);
}

Test(render, sglang_4_ring)
{
	recipe_layout_t l = layout(4, "ring");
	json_t *p = render("sglang", NULL, 0, &l);
	cr_assert_str_eq(argv_of(p, 0),
			 "python3 -m sglang.launch_server --model-path "
			 "meta-llama/Llama-3.3-70B-Instruct --tp 4 --dist-init-addr "
			 "169.254.10.1:29500 --nnodes 4 --node-rank 0 --host 0.0.0.0 --port 30000 "
			 "--mem-fraction-static 0.80");
	cr_assert_str_eq(argv_of(p, 2),
			 "python3 -m sglang.launch_server --model-path "
			 "meta-llama/Llama-3.3-70B-Instruct --tp 4 --dist-init-addr "
			 "169.254.10.1:29500 --nnodes 4 --node-rank 2 --mem-fraction-static 0.80");
	cr_assert_str_eq(env_of(p, 2, "NCCL_SOCKET_IFNAME"), "enp1s0f1np1");
	cr_assert_str_eq(env_of(p, 3, "NCCL_SOCKET_IFNAME"), "enp1s0f0np0");
	cr_assert_str_eq(env_of(p, 3, "NCCL_ALGO"), "Ring");
	json_decref(p);
}

Test(render, three_ring_is_a_mesh_without_ring_only_nccl)
{
	recipe_layout_t l = layout(3, "ring");
	const char *sets[] = {"tp=1", "nodes=1"};
	json_t *p1 = render("sglang", sets, 2, &l);
	cr_assert_eq(json_array_size(json_object_get(p1, "ranks")), 1, "a recipe of 1 node");
	json_decref(p1);
	json_t *p = render("sglang", NULL, 0, &l);
	cr_assert_null(env_of(p, 0, "NCCL_ALGO"));
	cr_assert_str_eq(env_of(p, 0, "SPARK_TOPOLOGY"), "direct");
	json_decref(p);
}

Test(render, sglang_4_switch)
{
	recipe_layout_t l = layout(4, "switch");
	json_t *p = render("sglang", NULL, 0, &l);
	cr_assert(strstr(argv_of(p, 1), "--tp 4 --dist-init-addr 169.254.10.1:29500 --nnodes 4 "
					"--node-rank 1"));
	cr_assert_null(strstr(argv_of(p, 1), "--port"));
	cr_assert_null(env_of(p, 1, "NCCL_ALGO"));
	cr_assert_str_eq(env_of(p, 1, "NCCL_IB_SUBNET_AWARE_ROUTING"), "1");
	json_decref(p);
}

Test(render, llamacpp_pair_and_4_switch)
{
	recipe_layout_t l2 = layout(2, "switch");
	json_t *p = render("llamacpp", NULL, 0, &l2);
	cr_assert_str_eq(argv_of(p, 0), "llama-server --model /var/lib/sparkctl/models/model.gguf "
					"--rpc 169.254.10.2:50052 --host 0.0.0.0 --port 8080 "
					"--n-gpu-layers 999");
	cr_assert_str_eq(argv_of(p, 1), "rpc-server --host 169.254.10.2 --port 50052");
	cr_assert_str_eq(role_of(p, 1), "rpc-server");
	json_decref(p);
	recipe_layout_t l4 = layout(4, "switch");
	p = render("llamacpp", NULL, 0, &l4);
	cr_assert(strstr(argv_of(p, 0),
			 "--rpc 169.254.10.2:50052,169.254.10.3:50052,169.254.10.4:50052"));
	for (size_t i = 1; i < 4; i++) {
		char want[64];
		snprintf(want, sizeof want, "rpc-server --host 169.254.10.%zu --port 50052", i + 1);
		cr_assert_str_eq(argv_of(p, i), want);
	}
	cr_assert_eq(json_integer_value(json_object_get(p, "tp")), 1);
	json_decref(p);
}

Test(render, llamacpp_4_ring_binds_each_node_to_its_own_address)
{
	recipe_layout_t l = layout(4, "ring");
	const char *sets[] = {"rpc_port=50100"};
	json_t *p = render("llamacpp", sets, 1, &l);
	cr_assert_str_eq(argv_of(p, 3), "rpc-server --host 169.254.10.4 --port 50100");
	cr_assert(strstr(argv_of(p, 0), "--rpc 169.254.10.2:50100,169.254.10.3:50100,"));
	json_decref(p);
}

Test(render, trtllm_under_mpirun)
{
	recipe_layout_t l = layout(4, "switch");
	json_t *p = render("trtllm", NULL, 0, &l);
	cr_assert_str_eq(argv_of(p, 0),
			 "mpirun -np 4 -H 169.254.10.1:1,169.254.10.2:1,169.254.10.3:1,"
			 "169.254.10.4:1 --mca plm_rsh_agent sparkctl exec --shell --mca "
			 "plm_rsh_no_tree_spawn 1 trtllm-llmapi-launch trtllm-serve "
			 "nvidia/Llama-3.3-70B-Instruct-FP4 --tp_size 4 --host 0.0.0.0 --port 8000 "
			 "--backend pytorch");
	cr_assert_str_eq(role_of(p, 0), "mpi-root");
	for (size_t i = 1; i < 4; i++) {
		json_t *r = json_array_get(json_object_get(p, "ranks"), i);
		cr_assert(json_is_null(json_object_get(r, "argv")), "mpirun starts rank %zu", i);
		cr_assert_str_eq(role_of(p, i), "mpi-rank");
	}
	/* the env a remote rank gets is its own node's, not rank 0's */
	cr_assert_str_eq(env_of(p, 1, "NCCL_SOCKET_IFNAME"), "enp1s0f0np0");
	json_decref(p);
	recipe_layout_t l2 = layout(2, "ring");
	p = render("trtllm", NULL, 0, &l2);
	cr_assert(strstr(argv_of(p, 0), "mpirun -np 2 -H 169.254.10.1:1,169.254.10.2:1 "));
	cr_assert(strstr(argv_of(p, 0), "--tp_size 2 "));
	json_decref(p);
}

Test(render, spark_decode_peers)
{
	recipe_layout_t l = layout(2, "switch");
	json_t *p = render("spark-decode", NULL, 0, &l);
	cr_assert_str_eq(argv_of(p, 0), "spark-decode --synthetic tiny --serve --host 0.0.0.0 "
					"--port 8000 --served-model-name spark-decode");
	cr_assert_str_eq(argv_of(p, 1), "spark-decode --synthetic tiny --serve");
	cr_assert_str_eq(env_of(p, 1, "SPARK_PEERS"), "0=169.254.10.1:29501,1=169.254.10.2:29502");
	cr_assert_str_eq(env_of(p, 1, "SPARK_RANK"), "1");
	cr_assert_str_eq(env_of(p, 1, "SPARK_WORLD_SIZE"), "2");
	json_decref(p);
}

Test(render, command_placeholders_per_node)
{
	const char *text = "name: c\nruntime: command\nmodel: /m\nport: 9000\n"
			   "command: [srv, \"--rank={rank}/{nnodes}\", \"--me={addr}\", "
			   "\"--head={master_addr}:{master_port}\", \"{{literal}}\", \"{node}@{group}\"]\n"
			   "env:\n  MY_VAR: x\n";
	recipe_t r = parse_ok(text);
	recipe_layout_t l = layout(4, "switch");
	json_t *p = NULL;
	char err[RECIPE_ERR_LEN];
	cr_assert_eq(recipe_render(&r, &l, &p, err, sizeof err), 0, "%s", err);
	cr_assert_str_eq(argv_of(p, 2), "srv --rank=2/4 --me=169.254.10.3 "
					"--head=169.254.10.1:29500 {literal} spark-3@g");
	cr_assert_str_eq(env_of(p, 2, "MY_VAR"), "x");
	json_decref(p);
	recipe_free(&r);
}

Test(render, refuses_a_layout_the_group_cannot_hold)
{
	recipe_t r = parse_ok("name: m\nruntime: vllm\nmodel: x\ntp: 4\n");
	recipe_layout_t l = layout(2, "switch");
	json_t *p = NULL;
	char err[RECIPE_ERR_LEN] = "";
	cr_assert_lt(recipe_render(&r, &l, &p, err, sizeof err), 0);
	cr_assert(strstr(err, "needs 4 nodes; group g has 2"), "%s", err);
	cr_assert_null(p);
	recipe_free(&r);
	r = parse_ok("name: m\nruntime: vllm\nmodel: x\npp: 3\n");
	l = layout(4, "switch");
	cr_assert_lt(recipe_render(&r, &l, &p, err, sizeof err), 0);
	cr_assert(strstr(err, "do not split into pp 3"), "%s", err);
	recipe_free(&r);
}

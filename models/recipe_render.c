/* recipe_render: a recipe + a group layout -> every member's argv and
 * environment (see recipe.h). The engines' multi-node command lines and
 * where each flag is documented: docs/serve.md. */
#include "recipe.h"

#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rctx {
	const recipe_t *r;
	const recipe_layout_t *l;
	int nnodes, tp, pp;
	const char *master_addr;
	char rpc_peers[RECIPE_MAX_NODES * 72];
};

static void push(json_t *a, const char *s) { json_array_append_new(a, json_string(s)); }

static void pushi(json_t *a, long long v)
{
	char b[32];
	snprintf(b, sizeof b, "%lld", v);
	push(a, b);
}

static void pushf(json_t *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void pushf(json_t *a, const char *fmt, ...)
{
	char b[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(b, sizeof b, fmt, ap);
	va_end(ap);
	push(a, b);
}

/* The value of one placeholder for rank `rank`. */
static void placeholder(const struct rctx *c, int rank, const char *name, char *out, size_t len)
{
	const recipe_member_t *m = &c->l->m[rank];
	if (strcmp(name, "model") == 0)
		snprintf(out, len, "%s", c->r->model);
	else if (strcmp(name, "name") == 0)
		snprintf(out, len, "%s", c->r->name);
	else if (strcmp(name, "rank") == 0 || strcmp(name, "node_rank") == 0)
		snprintf(out, len, "%d", rank);
	else if (strcmp(name, "nnodes") == 0 || strcmp(name, "world_size") == 0)
		snprintf(out, len, "%d", c->nnodes);
	else if (strcmp(name, "tp") == 0)
		snprintf(out, len, "%d", c->tp);
	else if (strcmp(name, "pp") == 0)
		snprintf(out, len, "%d", c->pp);
	else if (strcmp(name, "port") == 0)
		snprintf(out, len, "%d", c->r->port);
	else if (strcmp(name, "host") == 0)
		snprintf(out, len, "0.0.0.0");
	else if (strcmp(name, "addr") == 0)
		snprintf(out, len, "%s", m->addr);
	else if (strcmp(name, "node") == 0)
		snprintf(out, len, "%s", m->name);
	else if (strcmp(name, "group") == 0)
		snprintf(out, len, "%s", c->l->group ? c->l->group : "");
	else if (strcmp(name, "master_addr") == 0)
		snprintf(out, len, "%s", c->master_addr);
	else if (strcmp(name, "master_port") == 0)
		snprintf(out, len, "%d", c->r->master_port);
	else if (strcmp(name, "rpc_port") == 0)
		snprintf(out, len, "%d", c->r->rpc_port);
	else if (strcmp(name, "rpc_peers") == 0)
		snprintf(out, len, "%s", c->rpc_peers);
	else
		out[0] = '\0'; /* recipe_parse refused it */
}

/* s with its placeholders filled in for rank. */
static void expand(const struct rctx *c, int rank, const char *s, json_t *argv)
{
	char *buf = NULL;
	size_t bl = 0;
	FILE *f = open_memstream(&buf, &bl);
	if (!f)
		return;
	for (const char *p = s; *p; p++) {
		if ((p[0] == '{' && p[1] == '{') || (p[0] == '}' && p[1] == '}')) {
			fputc(*p, f);
			p++;
			continue;
		}
		const char *e = *p == '{' ? strchr(p, '}') : NULL;
		if (e && e - p - 1 < 32) {
			char name[32], val[RECIPE_MAX_NODES * 72 + 600];
			memcpy(name, p + 1, (size_t)(e - p - 1));
			name[e - p - 1] = '\0';
			placeholder(c, rank, name, val, sizeof val);
			fputs(val, f);
			p = e;
			continue;
		}
		fputc(*p, f);
	}
	fclose(f);
	if (buf)
		push(argv, buf);
	free(buf);
}

static void extra_args(const struct rctx *c, int rank, json_t *argv)
{
	for (size_t i = 0; i < c->r->n_args; i++)
		expand(c, rank, c->r->args[i], argv);
}

static void set(json_t *env, const char *k, const char *v)
{
	if (v && *v)
		json_object_set_new(env, k, json_string(v));
}

static void seti(json_t *env, const char *k, long long v)
{
	char b[32];
	snprintf(b, sizeof b, "%lld", v);
	json_object_set_new(env, k, json_string(b));
}

/* The variables the engines read, from THIS member's own interface and
 * RDMA devices (SPARK-FACTS.md "Env for engines"), then the recipe's env. */
static json_t *member_env(const struct rctx *c, int rank)
{
	const recipe_member_t *m = &c->l->m[rank];
	json_t *env = json_object();
	seti(env, "SPARK_RANK", rank);
	seti(env, "SPARK_WORLD_SIZE", c->nnodes);
	set(env, "SPARK_NODE", m->name);
	set(env, "SPARK_GROUP", c->l->group);
	bool ring = c->l->topology && strcmp(c->l->topology, "ring") == 0;
	/* a 3-node ring is a full mesh: every pair has its own cable */
	bool mesh = ring && c->nnodes == 3;
	set(env, "SPARK_TOPOLOGY", mesh ? "direct" : c->l->topology);
	if (c->r->runtime == RECIPE_SPARK_DECODE) {
		char peers[RECIPE_MAX_NODES * 80] = "";
		size_t o = 0;
		for (int i = 0; i < c->nnodes && o < sizeof peers; i++)
			o += (size_t)snprintf(peers + o, sizeof peers - o, "%s%d=%s:%d", i ? "," : "", i,
					      c->l->m[i].addr, c->r->master_port + 1 + i);
		set(env, "SPARK_PEERS", peers);
	}
	seti(env, "RANK", rank);
	seti(env, "WORLD_SIZE", c->nnodes);
	set(env, "MASTER_ADDR", c->master_addr);
	seti(env, "MASTER_PORT", c->r->master_port);
	if (c->r->runtime == RECIPE_VLLM)
		set(env, "VLLM_HOST_IP", m->addr);
	/* NCCL and UCX take every addressed twin; Gloo and TP one netdev */
	const char *list = m->ifnames[0] ? m->ifnames : m->ifname;
	set(env, "NCCL_SOCKET_IFNAME", list);
	set(env, "GLOO_SOCKET_IFNAME", m->ifname);
	set(env, "TP_SOCKET_IFNAME", m->ifname);
	set(env, "UCX_NET_DEVICES", list);
	set(env, "NCCL_IB_HCA", m->hcas);
	if (c->nnodes > 1)
		set(env, "NCCL_IB_SUBNET_AWARE_ROUTING", "1");
	if (ring && c->nnodes >= 4) {
		set(env, "NCCL_ALGO", "Ring");
		set(env, "NCCL_NET_PLUGIN", "none");
		set(env, "NCCL_IB_MERGE_NICS", "0");
	}
	for (size_t i = 0; i < c->r->n_env; i++)
		json_object_set_new(env, c->r->env_key[i], json_string(c->r->env_val[i]));
	return env;
}

/* ---- the engines --------------------------------------------------------------- */

/* vLLM, multiprocessing backend across nodes: every node runs `vllm serve`
 * with --nnodes/--node-rank/--master-addr/--master-port; all but rank 0 are
 * --headless (no API server). */
static json_t *argv_vllm(const struct rctx *c, int rank, const char **role)
{
	json_t *a = json_array();
	push(a, "vllm");
	push(a, "serve");
	push(a, c->r->model);
	push(a, "--tensor-parallel-size");
	pushi(a, c->tp);
	if (c->pp > 1) {
		push(a, "--pipeline-parallel-size");
		pushi(a, c->pp);
	}
	if (c->nnodes > 1) {
		push(a, "--nnodes");
		pushi(a, c->nnodes);
		push(a, "--node-rank");
		pushi(a, rank);
		push(a, "--master-addr");
		push(a, c->master_addr);
		push(a, "--master-port");
		pushi(a, c->r->master_port);
	}
	if (rank == 0) {
		push(a, "--host");
		push(a, "0.0.0.0");
		push(a, "--port");
		pushi(a, c->r->port);
		*role = "api";
	} else {
		push(a, "--headless");
		*role = "headless";
	}
	extra_args(c, rank, a);
	return a;
}

/* SGLang: every node runs launch_server with --tp (the whole TP size),
 * --dist-init-addr MASTER:PORT, --nnodes, --node-rank; rank 0 serves HTTP. */
static json_t *argv_sglang(const struct rctx *c, int rank, const char **role)
{
	json_t *a = json_array();
	push(a, "python3");
	push(a, "-m");
	push(a, "sglang.launch_server");
	push(a, "--model-path");
	push(a, c->r->model);
	push(a, "--tp");
	pushi(a, c->tp);
	if (c->nnodes > 1) {
		push(a, "--dist-init-addr");
		pushf(a, "%s:%d", c->master_addr, c->r->master_port);
		push(a, "--nnodes");
		pushi(a, c->nnodes);
		push(a, "--node-rank");
		pushi(a, rank);
	}
	if (rank == 0) {
		push(a, "--host");
		push(a, "0.0.0.0");
		push(a, "--port");
		pushi(a, c->r->port);
		*role = "api";
	} else {
		*role = "worker";
	}
	extra_args(c, rank, a);
	return a;
}

/* llama.cpp RPC: every other node runs rpc-server bound to its own address;
 * rank 0 runs llama-server with --rpc listing them (layers are split over
 * rank 0's own device and the RPC devices). */
static json_t *argv_llamacpp(const struct rctx *c, int rank, const char **role)
{
	json_t *a = json_array();
	if (rank > 0) {
		push(a, "rpc-server");
		push(a, "--host");
		push(a, c->l->m[rank].addr);
		push(a, "--port");
		pushi(a, c->r->rpc_port);
		*role = "rpc-server";
		return a; /* args are llama-server's */
	}
	push(a, "llama-server");
	push(a, "--model");
	push(a, c->r->model);
	if (c->nnodes > 1) {
		push(a, "--rpc");
		push(a, c->rpc_peers);
	}
	push(a, "--host");
	push(a, "0.0.0.0");
	push(a, "--port");
	pushi(a, c->r->port);
	*role = "api";
	extra_args(c, rank, a);
	return a;
}

/* TensorRT-LLM: one MPI world; rank 0 runs mpirun, which starts
 * trtllm-llmapi-launch trtllm-serve on every node (reaching the others
 * through `sparkctl exec`, as `sparkctl run --launcher mpi` does). */
static json_t *argv_trtllm(const struct rctx *c, int rank, const char **role)
{
	if (rank > 0 && c->nnodes > 1) {
		*role = "mpi-rank";
		return json_null();
	}
	json_t *a = json_array();
	if (c->nnodes > 1) {
		char hosts[RECIPE_MAX_NODES * 72] = "";
		size_t o = 0;
		for (int i = 0; i < c->nnodes && o < sizeof hosts; i++)
			o += (size_t)snprintf(hosts + o, sizeof hosts - o, "%s%s:1", i ? "," : "",
					      c->l->m[i].addr);
		push(a, "mpirun");
		push(a, "-np");
		pushi(a, c->nnodes);
		push(a, "-H");
		push(a, hosts);
		push(a, "--mca");
		push(a, "plm_rsh_agent");
		push(a, "sparkctl exec --shell");
		push(a, "--mca");
		push(a, "plm_rsh_no_tree_spawn");
		push(a, "1");
		*role = "mpi-root";
	} else {
		*role = "api";
	}
	push(a, "trtllm-llmapi-launch");
	push(a, "trtllm-serve");
	push(a, c->r->model);
	push(a, "--tp_size");
	pushi(a, c->tp);
	if (c->pp > 1) {
		push(a, "--pp_size");
		pushi(a, c->pp);
	}
	push(a, "--host");
	push(a, "0.0.0.0");
	push(a, "--port");
	pushi(a, c->r->port);
	extra_args(c, rank, a);
	return a;
}

/* spark-decode: one rank per node joined by libsparkcoll from SPARK_PEERS,
 * in server mode: rank 0 serves HTTP on the recipe's port under the recipe's
 * name, the others follow its requests. "synthetic:SHAPE" selects a synthetic
 * shape, anything else is a model directory. */
static json_t *argv_spark_decode(const struct rctx *c, int rank, const char **role)
{
	json_t *a = json_array();
	push(a, "spark-decode");
	if (strncmp(c->r->model, "synthetic:", 10) == 0) {
		push(a, "--synthetic");
		push(a, c->r->model + 10);
	} else {
		push(a, "--model");
		push(a, c->r->model);
	}
	push(a, "--serve");
	if (rank == 0) {
		push(a, "--host");
		push(a, "0.0.0.0");
		push(a, "--port");
		pushi(a, c->r->port);
		push(a, "--served-model-name");
		push(a, c->r->name);
	}
	*role = rank == 0 ? "api" : "worker";
	extra_args(c, rank, a);
	return a;
}

static json_t *argv_command(const struct rctx *c, int rank, const char **role)
{
	json_t *a = json_array();
	for (size_t i = 0; i < c->r->n_command; i++)
		expand(c, rank, c->r->command[i], a);
	*role = rank == 0 ? "api" : "worker";
	extra_args(c, rank, a);
	return a;
}

typedef json_t *(*argv_fn)(const struct rctx *c, int rank, const char **role);
static const argv_fn engines[RECIPE_RUNTIMES] = {argv_vllm,     argv_sglang,
						 argv_llamacpp, argv_trtllm,
						 argv_spark_decode, argv_command};

int recipe_render(const recipe_t *r, const recipe_layout_t *l, json_t **out, char *err,
		  size_t errlen)
{
	*out = NULL;
	if (!l->n || l->n > RECIPE_MAX_NODES) {
		snprintf(err, errlen, "the group has %zu nodes (1 to %d can serve)", l->n,
			 RECIPE_MAX_NODES);
		return -EINVAL;
	}
	if ((unsigned)r->runtime >= RECIPE_RUNTIMES) {
		snprintf(err, errlen, "unknown runtime");
		return -EINVAL;
	}
	struct rctx c = {.r = r, .l = l};
	int pp = r->pp ? r->pp : 1;
	int nodes = r->nodes ? r->nodes : r->tp ? r->tp * pp : (int)l->n;
	if (nodes > (int)l->n) {
		snprintf(err, errlen, "recipe %s needs %d nodes; group %s has %zu", r->name, nodes,
			 l->group ? l->group : "-", l->n);
		return -EINVAL;
	}
	int tp = r->tp ? r->tp : nodes / pp;
	if (tp * pp != nodes) {
		snprintf(err, errlen, "recipe %s: %d nodes do not split into pp %d stages of equal "
				      "tp; set tp and pp (tp x pp = nodes)", r->name, nodes, pp);
		return -EINVAL;
	}
	if (r->runtime == RECIPE_LLAMACPP)
		tp = 1; /* layers are split over RPC devices, not tensors */
	for (int i = 0; i < nodes; i++)
		if (!l->m[i].addr[0]) {
			snprintf(err, errlen, "node %s (rank %d) has no address", l->m[i].name, i);
			return -EINVAL;
		}
	c.nnodes = nodes;
	c.tp = tp;
	c.pp = pp;
	c.master_addr = l->m[0].addr;
	size_t o = 0;
	for (int i = 1; i < nodes && o < sizeof c.rpc_peers; i++)
		o += (size_t)snprintf(c.rpc_peers + o, sizeof c.rpc_peers - o, "%s%s:%d",
				      i > 1 ? "," : "", l->m[i].addr, r->rpc_port);

	json_t *ranks = json_array();
	for (int i = 0; i < nodes; i++) {
		const char *role = "worker";
		json_t *argv = engines[r->runtime](&c, i, &role);
		json_array_append_new(ranks, json_pack("{s:i, s:s, s:s, s:s, s:o, s:o}", "rank", i,
						       "node", l->m[i].name, "address", l->m[i].addr,
						       "role", role, "argv", argv, "env",
						       member_env(&c, i)));
	}
	const recipe_member_t *m0 = &l->m[0];
	char url[160], murl[160], hurl[300];
	snprintf(url, sizeof url, "http://%s:%d", m0->addr, r->port);
	snprintf(murl, sizeof murl, "http://%s:%d", m0->mgmt_addr[0] ? m0->mgmt_addr : m0->addr,
		 r->port);
	snprintf(hurl, sizeof hurl, "http://127.0.0.1:%d%s", r->port, r->health_path);
	*out = json_pack(
	    "{s:s, s:s, s:s, s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:s, s:i,"
	    " s:{s:s, s:s}, s:{s:s, s:s, s:i, s:i, s:i}, s:{s:s, s:i, s:i, s:i}, s:o}",
	    "recipe", r->name, "runtime", recipe_runtime_name(r->runtime), "model", r->model,
	    "group", l->group ? l->group : "", "topology", l->topology ? l->topology : "unknown",
	    "net", l->net ? l->net : "unknown", "nodes", nodes, "tp", tp, "pp", pp, "port",
	    r->port, "master_addr", c.master_addr, "master_port", r->master_port, "endpoint",
	    "url", url, "management_url", murl, "health", "url", hurl, "path", r->health_path,
	    "interval_s", r->health_interval_s, "timeout_s", r->health_timeout_s,
	    "startup_timeout_s", r->startup_timeout_s, "restart", "policy",
	    recipe_restart_name(r->restart), "limit", r->restart_limit, "backoff_s", r->backoff_s,
	    "backoff_max_s", r->backoff_max_s, "ranks", ranks);
	if (!*out) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

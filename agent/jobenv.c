/* jobenv: see jobenv.h. */
#include "jobenv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- small helpers -------------------------------------------------------- */

static const char *jstr(const json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

static void list_add(char *buf, size_t len, const char *item)
{
	size_t used = strnlen(buf, len);
	if (!item || !*item || used + 1 >= len)
		return;
	/* no duplicates: compare whole items */
	const char *p = buf;
	size_t il = strlen(item);
	while (*p) {
		const char *e = strchr(p, ',');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		if (l == il && strncmp(p, item, il) == 0)
			return;
		p = e ? e + 1 : p + l;
	}
	snprintf(buf + used, len - used, "%s%s", used ? "," : "", item);
}

/* "a.b.c.d/len" -> address and mask (host order). */
static int parse_cidr(const char *cidr, uint32_t *addr, uint32_t *mask, int *plen)
{
	char ip[64];
	const char *slash = cidr ? strchr(cidr, '/') : NULL;
	if (!slash || (size_t)(slash - cidr) >= sizeof ip)
		return -EINVAL;
	memcpy(ip, cidr, (size_t)(slash - cidr));
	ip[slash - cidr] = '\0';
	struct in_addr a;
	if (inet_pton(AF_INET, ip, &a) != 1)
		return -EINVAL;
	char *end;
	long l = strtol(slash + 1, &end, 10);
	if (*end || end == slash + 1 || l < 0 || l > 32)
		return -EINVAL;
	*addr = ntohl(a.s_addr);
	*mask = l == 0 ? 0 : (uint32_t)(0xffffffffu << (32 - l));
	*plen = (int)l;
	return 0;
}

int jobenv_cidr_network(const char *cidr, char *out, size_t len)
{
	uint32_t a, m;
	int pl;
	if (parse_cidr(cidr, &a, &m, &pl) < 0)
		return -EINVAL;
	struct in_addr n = {.s_addr = htonl(a & m)};
	char ip[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &n, ip, sizeof ip);
	snprintf(out, len, "%s/%d", ip, pl);
	return 0;
}

int jobenv_master_port(long long job_id)
{
	return JOBENV_PORT_BASE + (int)((job_id < 0 ? -job_id : job_id) % 50) * 100;
}

int jobenv_parse_kv(const char *s, char *key, size_t keylen)
{
	const char *eq = s ? strchr(s, '=') : NULL;
	if (!eq || eq == s || (size_t)(eq - s) >= keylen)
		return -EINVAL;
	for (const char *p = s; p < eq; p++) {
		char c = *p;
		bool ok = c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
			  (p > s && c >= '0' && c <= '9');
		if (!ok)
			return -EINVAL;
	}
	memcpy(key, s, (size_t)(eq - s));
	key[eq - s] = '\0';
	return 0;
}

/* Each twin with carrier, in report order: cb(port, twin, arg). */
#define FOR_UP_TWINS(disc, p, t, i, k)                                                     \
	json_array_foreach(json_object_get((disc), "ports"), (i), (p))                      \
		json_array_foreach(json_object_get((p), "twins"), (k), (t))                  \
			if (json_is_true(json_object_get((t), "carrier")))

/* ---- the job's network ------------------------------------------------------ */

/* Does node d have a twin with carrier and an IPv4 address in addr/mask? */
static bool reaches(json_t *d, uint32_t net, uint32_t mask)
{
	size_t i, k, x;
	json_t *p, *t, *a;
	FOR_UP_TWINS(d, p, t, i, k)
		json_array_foreach(json_object_get(t, "ipv4"), x, a) {
			uint32_t ad, m;
			int pl;
			if (parse_cidr(json_string_value(a), &ad, &m, &pl) == 0 && (ad & mask) == net)
				return true;
		}
	return false;
}

/* The CIDR addresses of node d (one per twin with carrier, at most max, in
 * report order) in a subnet where node from also has a twin with carrier and
 * an address (borrowed from d). The count. */
static size_t pair_cidrs(json_t *from, json_t *d, const char **out, size_t max)
{
	size_t n = 0, i, k, x;
	json_t *p, *t, *a;
	FOR_UP_TWINS(d, p, t, i, k)
		json_array_foreach(json_object_get(t, "ipv4"), x, a) {
			uint32_t ad, mask;
			int pl;
			const char *s = json_string_value(a);
			if (n >= max || parse_cidr(s, &ad, &mask, &pl) < 0 || !reaches(from, ad & mask, mask))
				continue;
			out[n++] = s;
			break; /* one address per twin */
		}
	return n;
}

/* An address of node d that node from reaches; its subnet into net. */
static bool pair_addr(json_t *from, json_t *d, char *addr, size_t al, char *net, size_t nl)
{
	const char *s;
	if (pair_cidrs(from, d, &s, 1) == 0)
		return false;
	snprintf(addr, al, "%.*s", (int)(strchr(s, '/') - s), s);
	jobenv_cidr_network(s, net, nl);
	return true;
}

size_t jobnet_pair_addrs(json_t *from, json_t *to, char (*out)[48], size_t max)
{
	const char *s[8];
	size_t n = pair_cidrs(from, to, s, max < 8 ? max : 8);
	for (size_t i = 0; i < n; i++)
		snprintf(out[i], 48, "%.*s", (int)(strchr(s[i], '/') - s[i]), s[i]);
	return n;
}

/* Every node reaches every other on some shared subnet (the cable between
 * them): fill the per-node views. */
static bool plan_pairwise(const struct jobnet_member *m, size_t n, struct jobnet_plan *out)
{
	if (n < 3 || n > JOBNET_PAIRWISE_MAX)
		return false;
	char inc[sizeof out->tcp_include] = "";
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < n; j++) {
			char net[64];
			if (i == j)
				continue;
			if (!pair_addr(m[i].discovery, m[j].discovery, out->peer_addr[i][j],
				       sizeof out->peer_addr[i][j], net, sizeof net))
				return false;
			list_add(inc, sizeof inc, net);
		}
	/* a node's own address: the one rank 0 reaches it at (rank 0: node 1's view) */
	for (size_t i = 0; i < n; i++) {
		snprintf(out->socket_addr[i], sizeof out->socket_addr[i], "%s",
			 out->peer_addr[i == 0 ? 1 : 0][i]);
		snprintf(out->peer_addr[i][i], sizeof out->peer_addr[i][i], "%s", out->socket_addr[i]);
	}
	snprintf(out->tcp_include, sizeof out->tcp_include, "%s", inc);
	out->pairwise = true;
	return true;
}

json_t *jobnet_node_spec(const struct jobnet_plan *p, size_t node, json_t *spec)
{
	if (!p->pairwise || node >= p->n)
		return json_incref(spec);
	json_t *c = json_deep_copy(spec);
	if (!c)
		return NULL;
	int rpn = (int)json_integer_value(json_object_get(spec, "ranks_per_node"));
	int port = (int)json_integer_value(json_object_get(spec, "master_port"));
	size_t nn = json_array_size(json_object_get(spec, "nodes"));
	char *peers = NULL;
	size_t pl = 0;
	FILE *f = open_memstream(&peers, &pl);
	if (!f) {
		json_decref(c);
		return NULL;
	}
	int k = 0;
	for (size_t j = 0; j < nn && j < p->n; j++)
		for (int l = 0; l < (rpn > 0 ? rpn : 1); l++, k++)
			fprintf(f, "%s%d=%s:%d", k ? "," : "", k, p->peer_addr[node][j], port + 1 + k);
	fclose(f);
	json_object_set_new(c, "peers", json_string(peers ? peers : ""));
	json_object_set_new(c, "master_addr", json_string(p->peer_addr[node][0]));
	free(peers);
	return c;
}

int jobnet_plan(const struct jobnet_member *m, size_t n, struct jobnet_plan *out)
{
	memset(out, 0, sizeof *out);
	if (!m || n == 0 || n > JOBENV_MAX_NODES)
		return -EINVAL;
	out->n = n;
	bool fabric = true;
	for (size_t i = 0; i < n && fabric; i++) {
		bool found = false;
		size_t pi, k, x;
		json_t *p, *t, *a;
		FOR_UP_TWINS(m[i].discovery, p, t, pi, k) {
			json_array_foreach(json_object_get(t, "ipv4"), x, a) {
				uint32_t ad, mask;
				int pl;
				if (found || parse_cidr(json_string_value(a), &ad, &mask, &pl) < 0)
					continue;
				bool all = true;
				for (size_t j = 0; j < n && all; j++)
					all = j == i || reaches(m[j].discovery, ad & mask, mask);
				if (!all)
					continue;
				found = true;
				const char *s = json_string_value(a);
				snprintf(out->socket_addr[i], sizeof out->socket_addr[i], "%.*s",
					 (int)(strchr(s, '/') - s), s);
				char netw[64];
				jobenv_cidr_network(s, netw, sizeof netw);
				list_add(out->tcp_include, sizeof out->tcp_include, netw);
			}
		}
		if (!found) {
			fabric = false;
			bool any = false;
			FOR_UP_TWINS(m[i].discovery, p, t, pi, k)
				any |= json_array_size(json_object_get(t, "ipv4")) > 0;
			snprintf(out->why, sizeof out->why,
				 any ? "node %zu of the job has no fabric address that every other node "
				       "reaches directly (no common subnet)"
				     : "node %zu of the job has no fabric IPv4 address on a port with carrier",
				 i);
		}
	}
	if (!fabric && plan_pairwise(m, n, out)) {
		out->why[0] = '\0';
		out->fabric = true;
		return 0;
	}
	if (!fabric) {
		out->tcp_include[0] = '\0';
		for (size_t i = 0; i < n; i++)
			snprintf(out->socket_addr[i], sizeof out->socket_addr[i], "%s",
				 m[i].mgmt_addr ? m[i].mgmt_addr : "");
	}
	out->fabric = fabric;
	return 0;
}

/* ---- one rank's environment ------------------------------------------------- */

void jobenv_fabric_lists(json_t *disc, const char *first_ifname, char *netdevs, size_t nl,
			 char *hcas, size_t hl, char *addressed, size_t al)
{
	if (netdevs)
		netdevs[0] = '\0';
	if (hcas)
		hcas[0] = '\0';
	if (addressed)
		addressed[0] = '\0';
	size_t i, k;
	json_t *p, *t;
	bool first_ok = false;
	FOR_UP_TWINS(disc, p, t, i, k) {
		const char *nd = jstr(t, "netdev");
		if (netdevs)
			list_add(netdevs, nl, nd);
		json_t *rd = json_object_get(t, "rdma");
		const char *dev = json_is_object(rd) ? jstr(rd, "device") : NULL;
		const char *st = json_is_object(rd) ? jstr(rd, "state") : NULL;
		if (hcas && dev && (!st || strcmp(st, "active") == 0))
			list_add(hcas, hl, dev);
		if (json_array_size(json_object_get(t, "ipv4")) > 0 && nd && first_ifname &&
		    strcmp(nd, first_ifname) == 0)
			first_ok = true;
	}
	if (!addressed)
		return;
	if (first_ok)
		list_add(addressed, al, first_ifname);
	FOR_UP_TWINS(disc, p, t, i, k)
		if (json_array_size(json_object_get(t, "ipv4")) > 0)
			list_add(addressed, al, jstr(t, "netdev"));
}

static void set(json_t *env, const char *k, const char *v)
{
	if (v)
		json_object_set_new(env, k, json_string(v));
}

static void seti(json_t *env, const char *k, long long v)
{
	char b[32];
	snprintf(b, sizeof b, "%lld", v);
	json_object_set_new(env, k, json_string(b));
}

json_t *jobenv_build(const struct jobenv_job *j, json_t *disc)
{
	json_t *env = json_object();
	if (!env)
		return NULL;
	const char *k;
	json_t *v;
	json_object_foreach(j->base, k, v)
		if (json_is_string(v))
			json_object_set(env, k, v);
	seti(env, "SPARK_JOB_ID", j->job_id);
	set(env, "SPARK_JOB_NAME", j->job_name);
	if (j->rank >= 0)
		seti(env, "SPARK_RANK", j->rank);
	seti(env, "SPARK_WORLD_SIZE", j->world_size);
	if (j->local_rank >= 0)
		seti(env, "SPARK_LOCAL_RANK", j->local_rank);
	seti(env, "SPARK_LOCAL_WORLD_SIZE", j->ranks_per_node);
	set(env, "SPARK_NODE", j->node);
	seti(env, "SPARK_NODE_RANK", j->node_rank);
	seti(env, "SPARK_NNODES", j->nnodes);
	set(env, "SPARK_GROUP", j->group);
	/* A 3-node ring group is a full mesh (every pair has its cable): the job
	 * is told "direct", so libsparkcoll's self-test decides one-shot and
	 * NCCL is not held to ring-only algorithms. */
	bool mesh = j->topology && strcmp(j->topology, "ring") == 0 && j->nnodes == 3 && j->shape &&
		    strcmp(j->shape, "ring") == 0;
	set(env, "SPARK_TOPOLOGY", mesh ? "direct" : j->topology);
	set(env, "SPARK_GROUP_SHAPE", j->shape);
	set(env, "SPARK_LAUNCHER", j->launcher);
	set(env, "SPARK_PEERS", j->peers);
	set(env, "SPARK_NET", j->net);
	set(env, "SPARK_MODEL_DIR", j->model_dir);
	char netdevs[512], hcas[512], addressed[512];
	bool fabric = j->net && strcmp(j->net, "fabric") == 0;
	jobenv_fabric_lists(disc, j->socket_ifname, netdevs, sizeof netdevs, hcas, sizeof hcas,
			    addressed, sizeof addressed);
	set(env, "SPARK_FABRIC_NETDEVS", netdevs);
	if (j->rank >= 0)
		seti(env, "RANK", j->rank);
	seti(env, "WORLD_SIZE", j->world_size);
	if (j->local_rank >= 0)
		seti(env, "LOCAL_RANK", j->local_rank);
	seti(env, "LOCAL_WORLD_SIZE", j->ranks_per_node);
	set(env, "MASTER_ADDR", j->master_addr);
	seti(env, "MASTER_PORT", j->master_port);
	/* engine variables: sockets on the chosen interface(s), RDMA on the fabric */
	const char *ifn = j->socket_ifname && *j->socket_ifname ? j->socket_ifname : NULL;
	const char *socklist = fabric && addressed[0] ? addressed : ifn;
	if (hcas[0])
		set(env, "NCCL_IB_HCA", hcas);
	set(env, "NCCL_SOCKET_IFNAME", socklist);
	set(env, "UCX_NET_DEVICES", socklist);
	if (j->tcp_include && *j->tcp_include) {
		set(env, "OMPI_MCA_btl_tcp_if_include", j->tcp_include);
		set(env, "OMPI_MCA_oob_tcp_if_include", j->tcp_include);
	}
	set(env, "GLOO_SOCKET_IFNAME", ifn);
	set(env, "TP_SOCKET_IFNAME", ifn);
	set(env, "VLLM_HOST_IP", j->socket_addr && *j->socket_addr ? j->socket_addr : NULL);
	set(env, "NCCL_IB_SUBNET_AWARE_ROUTING", "1");
	if (j->topology && strcmp(j->topology, "ring") == 0 && j->nnodes >= 3 && !mesh) {
		set(env, "NCCL_ALGO", "Ring");
		set(env, "NCCL_NET_PLUGIN", "none");
		set(env, "NCCL_IB_MERGE_NICS", "0");
	}
	size_t i;
	json_array_foreach(j->overrides, i, v) {
		const char *s = json_string_value(v);
		char key[128];
		if (s && jobenv_parse_kv(s, key, sizeof key) == 0)
			set(env, key, strchr(s, '=') + 1);
	}
	return env;
}

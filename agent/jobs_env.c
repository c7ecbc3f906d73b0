/* jobs_env: `sparkctl env --node-list LIST` (issue 21), the environment a
 * rank of `sparkctl run` would get on THIS node, for a job on the listed
 * nodes that another scheduler (Slurm's TaskProlog) started.
 *
 * Request (control socket, RIGHT_USER):
 *   {"type":"job_env", "nodes":["spark-1","spark-2"], "job_id":N?,
 *    "job_name":S?, "group":S?, "rank":N?, "local_rank":N?,
 *    "ranks_per_node":N?}
 * Two halves, as with a job:
 *   the head (jh_job_env): the job's network plan from the nodes' stored
 *     reports (jobnet_plan, as job_run makes it), the topology from the
 *     latest validation, answered as the job spec node ORIGIN sees it:
 *     {"job":{...}, "node_rank":K, "socket_addr":A}. A worker forwards the
 *     request like any head-served one (the jobs service's table).
 *   the asking node (env_from_plan, jobs_env_answer on a worker): the rank's
 *     environment from that spec and
 *   THIS node's live discovery (rank_env in jobs_node.c, launcher "slurm"),
 *   without the variables of the caller's own session (PATH, LANG,
 *   SPARKCTL_SOCKET): {"node":NAME, "node_rank":K, "env":{...}}.
 * Errors: bad_request (fields), not_found (a name not in the cluster),
 * not_in_list (this node is not among the names). */
#include "jobs.h"

#include "jobenv.h"
#include "log.h"
#include "partition.h"
#include "proto.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An optional integer field in [lo, hi]; def when absent. false: present but
 * of another type or out of range. */
static bool opt_int(const json_t *req, const char *k, long long lo, long long hi, long long def,
		    long long *out)
{
	json_t *v = json_object_get(req, k);
	*out = def;
	if (!v)
		return true;
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
		return false;
	*out = json_integer_value(v);
	return true;
}

static bool opt_str(const json_t *req, const char *k, size_t max)
{
	json_t *v = json_object_get(req, k);
	return !v || (json_is_string(v) && strlen(json_string_value(v)) <= max);
}

/* The plan for the request's nodes as node `origin` sees it: 0 and *out, or
 * -1 with code and why filled. */
static int env_plan(struct agent *a, const json_t *req, const char *origin, json_t **out,
		    const char **code, char *why, size_t wl)
{
	*out = NULL;
	*code = "bad_request";
	json_t *names = json_object_get(req, "nodes");
	size_t n = json_array_size(names);
	long long job_id, rpn, rank, local_rank, world;
	if (!json_is_array(names) || n == 0 || n > JOBENV_MAX_NODES) {
		snprintf(why, wl, "job_env needs \"nodes\": 1 to %d node names", JOBENV_MAX_NODES);
		return -1;
	}
	if (!opt_int(req, "job_id", 0, 1LL << 40, 0, &job_id) ||
	    !opt_int(req, "ranks_per_node", 1, JOBS_MAX_RANKS_PER_NODE, 1, &rpn) ||
	    !opt_int(req, "rank", -1, 1 << 20, -1, &rank) ||
	    !opt_int(req, "local_rank", -1, JOBS_MAX_RANKS_PER_NODE, -1, &local_rank) ||
	    !opt_int(req, "world_size", 0, 1 << 20, 0, &world) || !opt_str(req, "job_name", 63) ||
	    !opt_str(req, "group", 63)) {
		snprintf(why, wl, "job_env: job_id, ranks_per_node, rank, local_rank and world_size "
				  "must be integers in range, job_name and group strings of at most 63 "
				  "characters");
		return -1;
	}
	db_node *all = NULL;
	size_t nall = 0;
	if (db_node_list(a->hd.db, &all, &nall) < 0) {
		*code = "internal";
		snprintf(why, wl, "cannot read cluster.db");
		return -1;
	}
	db_node *sel = calloc(n, sizeof *sel);
	if (!sel) {
		free(all);
		*code = "internal";
		snprintf(why, wl, "out of memory");
		return -1;
	}
	int rc = -1;
	long long mine = -1;
	size_t i;
	json_t *v;
	json_array_foreach(names, i, v) {
		const char *nm = json_string_value(v);
		if (!nm || !*nm || strlen(nm) > 63) {
			snprintf(why, wl, "job_env: \"nodes\" must be node names");
			goto out;
		}
		bool found = false;
		for (size_t k = 0; k < nall && !found; k++)
			if (strcmp(all[k].name, nm) == 0) {
				sel[i] = all[k];
				found = true;
			}
		if (!found) {
			*code = "not_found";
			snprintf(why, wl, "node %s of the list is not in the cluster ('sparkctl node ls' "
					  "lists its nodes)", nm);
			goto out;
		}
		for (size_t k = 0; k < i; k++)
			if (strcmp(sel[k].id, sel[i].id) == 0) {
				snprintf(why, wl, "node %s is twice in the list", nm);
				goto out;
			}
		if (strcmp(sel[i].id, origin) == 0)
			mine = (long long)i;
	}
	if (mine < 0) {
		const char *me = origin;
		for (size_t k = 0; k < nall; k++)
			if (strcmp(all[k].id, origin) == 0)
				me = all[k].name;
		*code = "not_in_list";
		snprintf(why, wl, "this node (%s) is not in the node list; run it on one of the listed "
				  "nodes (Slurm runs its TaskProlog on each)", me);
		goto out;
	}
	/* topology and shape: the cluster's (latest validation), these nodes' arc */
	enum plan_topo topo = jh_cluster_topology(a, all, nall);
	struct plan_node *pn = calloc(nall ? nall : 1, sizeof *pn);
	const char **pnames = calloc(n, sizeof *pnames);
	struct plan_result *pr = calloc(1, sizeof *pr);
	if (pn && pnames && pr && nall <= PLAN_MAX_NODES) {
		for (size_t k = 0; k < nall; k++)
			pn[k].name = all[k].name;
		for (size_t k = 0; k < n; k++)
			pnames[k] = sel[k].name;
		struct plan_input in = {.topo = topo, .nodes = pn, .n = nall, .names = pnames,
					.n_names = n};
		plan_group(&in, pr);
	}
	char shape[16];
	snprintf(shape, sizeof shape, "%s", pr && pr->code == 0 ? pr->shape : "unknown");
	free(pn);
	free(pnames);
	free(pr);
	/* the network, as job_run plans it */
	struct jobnet_plan *plan = jh_net_plan(a, sel, n);
	if (!plan) {
		*code = "internal";
		snprintf(why, wl, "out of memory");
		goto out;
	}
	int port = jobenv_master_port(job_id);
	json_t *nodes_j = json_array();
	char *peers = NULL;
	size_t pl = 0;
	FILE *f = open_memstream(&peers, &pl);
	int k = 0;
	for (i = 0; i < n; i++) {
		json_array_append_new(nodes_j, json_pack("{s:s, s:s, s:s}", "node_id", sel[i].id, "name",
							  sel[i].name, "socket_addr",
							  plan->socket_addr[i]));
		for (int l = 0; f && l < rpn; l++, k++)
			fprintf(f, "%s%d=%s:%d", k ? "," : "", k, plan->socket_addr[i], port + 1 + k);
	}
	if (f)
		fclose(f);
	const char *group = proto_str(req, "group");
	const char *jname = proto_str(req, "job_name");
	json_t *spec = json_pack(
	    "{s:I, s:s, s:s, s:s, s:s, s:i, s:i, s:i, s:s, s:s, s:s, s:s, s:i, s:s, s:o, s:[]}",
	    "id", (json_int_t)job_id, "name", jname ? jname : "", "group", group ? group : "",
	    "topology", plan_topo_name(topo), "shape", shape, "world_size",
	    (int)(world > 0 ? world : (long long)n * rpn), "ranks_per_node", (int)rpn, "nnodes", (int)n,
	    "net", plan->fabric ? "fabric" : "management", "net_why", plan->why, "master_addr",
	    plan->socket_addr[0], "tcp_include", plan->tcp_include, "master_port", port, "peers",
	    peers ? peers : "", "nodes", nodes_j, "env");
	free(peers);
	if (!spec) {
		free(plan);
		*code = "internal";
		snprintf(why, wl, "out of memory");
		goto out;
	}
	*out = json_pack("{s:o, s:I, s:s, s:I, s:I}", "job", jobnet_node_spec(plan, (size_t)mine, spec),
			 "node_rank", (json_int_t)mine, "socket_addr", plan->socket_addr[mine], "rank",
			 (json_int_t)rank, "local_rank", (json_int_t)local_rank);
	json_decref(spec);
	free(plan);
	rc = *out ? 0 : -1;
	if (rc < 0) {
		*code = "internal";
		snprintf(why, wl, "out of memory");
	}
out:
	free(sel);
	free(all);
	return rc;
}

/* This node's half: the environment from the head's plan. */
static void env_from_plan(struct agent *a, conn *cli, json_int_t id, json_t *p)
{
	json_t *job = json_object_get(p, "job");
	int node_rank = (int)proto_int(p, "node_rank", 0);
	json_t *env = jn_rank_env(a, job, node_rank, proto_str(p, "socket_addr"),
				  (int)proto_int(p, "rank", -1), (int)proto_int(p, "local_rank", -1),
				  "slurm");
	if (!env) {
		conn_send_new(cli, proto_error(id, "internal", "out of memory"));
		return;
	}
	/* the caller's session keeps its own: only the job's variables */
	static const char *const own[] = {"PATH", "LANG", "SPARKCTL_SOCKET",
					  "OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"};
	for (size_t i = 0; i < ARRAY_SIZE(own); i++)
		json_object_del(env, own[i]);
	svc_send_result(cli, id, json_pack("{s:s, s:i, s:o}", "node", a->id.node_name,
					       "node_rank", node_rank, "env", env));
}

/* A worker's half: the head's plan (forwarded by control.c, answered to
 * peers.c) becomes this node's environment; an error goes to the CLI as it is. */
void jobs_env_answer(struct agent *a, conn *cli, json_int_t orig_id, json_t *msg)
{
	if (!cli)
		return;
	json_t *d = json_object_get(msg, "data");
	if (strcmp(proto_type(msg) ? proto_type(msg) : "", "result") != 0 || !json_is_object(d)) {
		json_t *copy = json_deep_copy(msg);
		json_object_set_new(copy, "id", json_integer(orig_id));
		conn_send_new(cli, copy);
		return;
	}
	env_from_plan(a, cli, orig_id, d);
}

/* The head's half: the plan as the asking node sees it; the head's own node
 * fills in its environment at once, a worker's gets the plan (jobs_env_answer). */
void jh_job_env(struct agent *a, const struct svc_req *q)
{
	json_t *o = NULL;
	const char *code;
	char why[512];
	if (env_plan(a, q->msg, q->origin, &o, &code, why, sizeof why) < 0) {
		svc_error(q, code, "%s", why);
		return;
	}
	if (strcmp(q->origin, a->id.node_id) == 0) {
		env_from_plan(a, q->reply, q->id, o);
		json_decref(o);
	} else {
		svc_reply(q, o);
	}
}

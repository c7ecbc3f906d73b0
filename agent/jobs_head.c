/* jobs_head: groups and jobs on the head (issue 6, docs/jobs.md).
 *
 * The head owns the truth (cluster.db: groups, jobs, ranks) and an in-memory
 * table of the jobs still starting or running. A run plans the job's network
 * (jobenv.h), records the job and its ranks in one transaction, then sends
 * job_start to every member; each member builds its ranks' environment from
 * its own ports. Members report job_started / job_exit, and stream output on
 * request (job_tail) as job_data.
 *
 * Watchers carry answers to a CLI (its control connection, or the session of
 * the worker that relays it): run in the foreground, logs, cancel, exec. Each
 * gets "stream" frames and one final result or error.
 *
 * Fail fast: the first rank that exits non-zero (or is lost) stops the job:
 * SIGTERM to every other rank (the shim sends SIGKILL after JOBS_GRACE_MS);
 * cancel, --timeout and group rm --force do the same. A node that becomes
 * unreachable loses its ranks and fails the job. The job's exit code is the
 * failing rank's code, else the highest code of its ranks (255 for a lost
 * rank). After a restart (head or member), job_sync reconciles: ranks still
 * running are kept, ranks that ended are recorded, ranks nobody reports are
 * lost, ranks of finished jobs are stopped. */
#include "jobs.h"

#include "jobenv.h"
#include "log.h"
#include "partition.h"
#include "proto.h"
#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct hrank {
	int rank, local_rank;
	char node_id[40];
	char node_name[64];
	char state[16];
	int exit_code, sig;
	int64_t pid, started_at, ended_at;
	bool signalled;            /* we asked it to stop */
};

struct hjob {
	struct hjob *next;
	struct agent *a;
	db_job row;
	int nranks;
	struct hrank *ranks;
	json_t *spec;              /* with "id": what job_start carries */
	bool stopping, cancelled, timed_out;
	char stop_reason[256];
	int fail_code;             /* exit code of the rank that failed first, -1 none */
	uv_timer_t *timer;         /* --timeout */
	uint64_t pending_since_ms;
	uint64_t kill_at_ms;       /* job_stop: SIGKILL what is still running then (0: none) */
	bool killed;
};

enum wkind { W_RUN, W_LOGS, W_CANCEL, W_EXEC };

struct wtail {
	long long tail_id;
	int rank;
	char node_id[40];
	char node_name[64];
	int64_t offset;
	bool sent, eof, detached;
};

struct watcher {
	struct watcher *next;
	enum wkind kind;
	conn *dest;
	json_int_t id;
	bool dead;
	long long job_id;
	bool follow, label;
	int ntails;
	struct wtail *tails;
	long long exec_id;
	char exec_node[40];
	char exec_node_name[64];
	uint64_t deadline_ms;
};

static void job_check_done(struct agent *a, struct hjob *j);
static void ended_queue(struct agent *a, long long id);
static void rank_end_queue(struct agent *a, struct hjob *j, struct hrank *r);
static json_t *job_result(struct agent *a, long long id);
static void watchers_job_update(struct agent *a, long long job_id);

/* ---- answers ---------------------------------------------------------------- */

static void reply_error(conn *dest, json_int_t id, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void reply_error(conn *dest, json_int_t id, const char *code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	conn_send_new(dest, proto_error(id, code, msg));
}

static void reply(conn *dest, json_int_t id, json_t *data)
{
	svc_send_result(dest, id, data);
}

/* What a job or exec carries to every member must fit in the frames that
 * carry it: refuse it up front instead of a job_start that cannot be sent. */
static bool spec_too_large(conn *dest, json_int_t id, const json_t *argv, const json_t *env)
{
	size_t n = json_dumpb(argv, NULL, 0, JSON_COMPACT) +
		   (env ? json_dumpb(env, NULL, 0, JSON_COMPACT) : 0);
	if (n <= JOBS_MAX_SPEC_BYTES)
		return false;
	reply_error(dest, id, "too_large",
		    "the command and environment are too large (%zu bytes; at most %d): pass big "
		    "inputs in a file", n, JOBS_MAX_SPEC_BYTES);
	return true;
}

/* A command is an array of strings (answered bad_request otherwise). */
static bool argv_strings(conn *dest, json_int_t id, const json_t *argv)
{
	size_t i;
	json_t *v;
	json_array_foreach(argv, i, v)
		if (!json_is_string(v)) {
			reply_error(dest, id, "bad_request", "the command must be strings");
			return false;
		}
	return true;
}

static json_t *stream_msg(struct watcher *w, const char *event)
{
	json_t *m = proto_msg("stream", w->id);
	json_object_set_new(m, "event", json_string(event));
	return m;
}

static void w_send(struct watcher *w, json_t *m)
{
	if (!w->dead)
		conn_send_new(w->dest, m);
	else
		json_decref(m);
}

static void w_note(struct watcher *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void w_note(struct watcher *w, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	json_t *m = stream_msg(w, "note");
	json_object_set_new(m, "message", json_string(msg));
	w_send(w, m);
}

/* Mark dead (answers stop); swept later so lists stay walkable. */
static void w_finish(struct agent *a, struct watcher *w)
{
	if (w->dead)
		return;
	w->dead = true;
	/* tails still open on nodes stop there */
	for (int i = 0; i < w->ntails; i++)
		if (w->tails[i].sent && !w->tails[i].eof) {
			json_t *m = proto_msg("job_untail", 0);
			json_object_set_new(m, "tail_id", json_integer(w->tails[i].tail_id));
			peers_to_node(a, w->tails[i].node_id, m);
		}
	if (w->kind == W_EXEC && w->exec_id) {
		json_t *m = proto_msg("exec_signal", 0);
		json_object_set_new(m, "exec_id", json_integer(w->exec_id));
		peers_to_node(a, w->exec_node, m);
	}
}

static void w_result(struct agent *a, struct watcher *w, json_t *data)
{
	if (!w->dead)
		svc_send_result(w->dest, w->id, data);
	else
		json_decref(data);
	w_finish(a, w);
}

static void w_sweep(struct jobs *J)
{
	for (struct watcher **p = &J->watchers; *p;) {
		struct watcher *w = *p;
		if (w->dead) {
			*p = w->next;
			free(w->tails);
			free(w);
		} else {
			p = &w->next;
		}
	}
}

static struct watcher *w_new(struct agent *a, enum wkind k, conn *dest, json_int_t id)
{
	struct watcher *w = calloc(1, sizeof *w);
	if (!w)
		return NULL;
	w->kind = k;
	w->dest = dest;
	w->id = id;
	w->next = a->jobs->watchers;
	a->jobs->watchers = w;
	return w;
}

/* ---- small helpers ------------------------------------------------------------- */

/* Who asks is the caller the asking node's control socket saw: its uid and
 * user name are a job's owner, whatever else the request says. */
static const json_t *caller(const json_t *req) { return json_object_get(req, "caller"); }

static bool is_root(const json_t *req) { return proto_int(caller(req), "uid", -1) == 0; }

static const char *req_user(const json_t *req)
{
	const char *u = proto_str(caller(req), "user");
	return u ? u : "";
}

static void host_of(const char *addr, char *out, size_t len)
{
	char host[128];
	int port;
	if (util_split_hostport(addr, 0, host, sizeof host, &port) == 0)
		snprintf(out, len, "%s", host);
	else
		snprintf(out, len, "%s", addr);
}

struct jobnet_plan *jh_net_plan(struct agent *a, const db_node *nodes, size_t n)
{
	struct jobnet_member *mem = calloc(n ? n : 1, sizeof *mem);
	char (*mgmt)[128] = calloc(n ? n : 1, sizeof *mgmt);
	struct jobnet_plan *plan = calloc(1, sizeof *plan);
	if (mem && mgmt && plan) {
		for (size_t i = 0; i < n; i++) {
			db_fabric f;
			if (db_fabric_get(a->hd.db, nodes[i].id, &f) == 0) {
				mem[i].discovery = json_loads(f.discovery, 0, NULL);
				db_fabric_free(&f);
			}
			host_of(nodes[i].address, mgmt[i], sizeof mgmt[i]);
			mem[i].mgmt_addr = mgmt[i];
		}
		jobnet_plan(mem, n, plan); /* copies what it keeps */
		for (size_t i = 0; i < n; i++)
			json_decref(mem[i].discovery);
	} else {
		free(plan);
		plan = NULL;
	}
	free(mem);
	free(mgmt);
	return plan;
}

static struct hjob *find_job(struct jobs *J, long long id)
{
	for (struct hjob *j = J->hjobs; j; j = j->next)
		if (j->row.id == id)
			return j;
	return NULL;
}

static struct hrank *find_hrank(struct hjob *j, int rank)
{
	for (int i = 0; i < j->nranks; i++)
		if (j->ranks[i].rank == rank)
			return &j->ranks[i];
	return NULL;
}

static bool rank_final(const struct hrank *r)
{
	return strcmp(r->state, "pending") != 0 && strcmp(r->state, "running") != 0;
}

static bool node_live(struct agent *a, const char *node_id)
{
	return strcmp(node_id, a->id.node_id) == 0 || peers_session(a, node_id) != NULL;
}

static json_t *job_json(const db_job *j)
{
	json_t *o = json_pack("{s:I, s:s, s:s, s:s, s:s, s:i, s:i, s:s, s:s, s:s, s:I, s:I, s:I, s:I}",
			      "id", (json_int_t)j->id, "name", j->name, "group", j->group_name, "user",
			      j->owner, "launcher", j->launcher, "world_size", j->world_size,
			      "ranks_per_node", j->ranks_per_node, "command", j->command, "state",
			      j->state, "reason", j->reason, "timeout_s", (json_int_t)j->timeout_s,
			      "created_at", (json_int_t)j->created_at, "started_at",
			      (json_int_t)j->started_at, "ended_at", (json_int_t)j->ended_at);
	json_object_set_new(o, "exit_code", j->exit_code >= 0 ? json_integer(j->exit_code) : json_null());
	/* the service that runs it ("serve:NAME"), null for a user's job */
	json_object_set_new(o, "owner", j->managed_by[0] ? json_string(j->managed_by) : json_null());
	int64_t end = j->ended_at ? j->ended_at : util_now();
	int64_t from = j->started_at ? j->started_at : j->created_at;
	json_object_set_new(o, "duration_s", json_integer(end >= from ? end - from : 0));
	return o;
}

static json_t *rank_json(const db_job_rank *r)
{
	json_t *o = json_pack("{s:i, s:s, s:s, s:i, s:s, s:I, s:i, s:I, s:I}", "rank", r->rank,
			      "node", r->node_name, "node_id", r->node_id, "local_rank", r->local_rank,
			      "state", r->state, "pid", (json_int_t)r->pid, "signal", r->signal,
			      "started_at", (json_int_t)r->started_at, "ended_at",
			      (json_int_t)r->ended_at);
	json_object_set_new(o, "exit_code", r->exit_code >= 0 ? json_integer(r->exit_code) : json_null());
	return o;
}

/* A job of the caller by id or name ("all jobs" for root). */
static int lookup_job(struct agent *a, conn *dest, json_int_t id, const json_t *req, db_job *out)
{
	const char *key = proto_str(req, "job");
	if (!key || !*key) {
		reply_error(dest, id, "bad_request", "missing job id or name");
		return -1;
	}
	bool digits = true;
	for (const char *p = key; *p; p++)
		digits &= *p >= '0' && *p <= '9';
	int r = digits ? db_job_get(a->hd.db, atoll(key), out)
		       : db_job_get_by_name(a->hd.db, key, is_root(req) ? NULL : req_user(req), out);
	if (r == 0 && !is_root(req) && strcmp(out->owner, req_user(req)) != 0)
		r = -ENOENT; /* someone else's: not visible */
	if (r < 0) {
		reply_error(dest, id, "not_found", "no job '%s'%s; 'sparkctl job ls' lists them", key,
			    is_root(req) ? "" : " of yours");
		return -1;
	}
	return 0;
}

/* ---- topology and the cluster's nodes -------------------------------------------- */

/* The cluster's topology and the nodes in ring order (ring) or join order.
 * The latest stored validation run (`sparkctl topo validate`, issue 5) decides
 * when it passed or warned and still describes the nodes now: its class, and
 * for a ring or pair its ring_order, into which nodes[] is reordered. Without
 * one the class is guessed from the fabric reports: every node with both ports
 * up is a ring (crossed cabling, ring order = join order), every node with one
 * port up is a switch, two nodes are a pair (a ring of 2). */
static enum plan_topo guess_topology(struct agent *a, const db_node *nodes, size_t n);

static enum plan_topo cluster_topology(struct agent *a, db_node *nodes, size_t n)
{
	if (n < 2)
		return PLAN_UNKNOWN;
	db_topo_run run;
	if (n <= PLAN_MAX_NODES && db_topo_run_latest(a->hd.db, &run) == 0) {
		json_t *v = run.verdict ? json_loads(run.verdict, 0, NULL) : NULL;
		json_t *ro = json_object_get(v, "ring_order");
		const char *ring[PLAN_MAX_NODES], *names[PLAN_MAX_NODES];
		size_t nr = 0, order[PLAN_MAX_NODES];
		size_t i;
		json_t *e;
		json_array_foreach(ro, i, e)
			if (nr < PLAN_MAX_NODES)
				ring[nr++] = json_string_value(e);
		for (i = 0; i < n; i++)
			names[i] = nodes[i].name;
		enum plan_topo t;
		int r = plan_topo_from_run(run.cls, run.result, ring, nr, run.n_nodes, names, n, &t,
					   order);
		json_decref(v);
		db_topo_run_free(&run);
		if (r == 0) {
			db_node *copy = malloc(n * sizeof *copy);
			if (copy) {
				memcpy(copy, nodes, n * sizeof *copy);
				for (i = 0; i < n; i++)
					nodes[i] = copy[order[i]];
				free(copy);
			}
			return t;
		}
	}
	return guess_topology(a, nodes, n);
}

int jh_cluster_topology(struct agent *a, db_node *nodes, size_t n)
{
	return (int)cluster_topology(a, nodes, n);
}

static enum plan_topo guess_topology(struct agent *a, const db_node *nodes, size_t n)
{
	if (n < 2)
		return PLAN_UNKNOWN;
	int ones = 0, twos = 0;
	for (size_t i = 0; i < n; i++) {
		db_fabric_port *p = NULL;
		size_t np = 0;
		if (db_fabric_ports(a->hd.db, nodes[i].id, &p, &np) < 0 || np == 0) {
			free(p);
			return PLAN_UNKNOWN;
		}
		int up = 0;
		for (size_t k = 0; k < np; k++) {
			bool first = k == 0 || strcmp(p[k].port, p[k - 1].port) != 0;
			bool port_up = false;
			for (size_t m = k; m < np && strcmp(p[m].port, p[k].port) == 0; m++)
				port_up |= p[m].carrier == 1;
			up += first && port_up;
		}
		free(p);
		ones += up == 1;
		twos += up == 2;
	}
	if (n == 2 && ones + twos == 2)
		return PLAN_RING;
	if (twos == (int)n)
		return PLAN_RING;
	if (ones == (int)n)
		return PLAN_SWITCH;
	return PLAN_UNKNOWN;
}

static const char *topo_word(enum plan_topo t) { return plan_topo_name(t); }

/* The latest stored validation failed for these nodes (issue 16): why. */
static bool cabling_failed(struct agent *a, const char *const *names, size_t n, char *why,
			   size_t len)
{
	db_topo_run run;
	if (db_topo_run_latest(a->hd.db, &run) < 0)
		return false;
	int r = plan_cabling_failed(run.result, run.verdict, (long long)(util_now() - run.started_at),
				    names, n, why, len);
	db_topo_run_free(&run);
	return r == 1;
}

/* Members of a group in rank order as node rows; "all" is every node. */
static int group_nodes(struct agent *a, const char *group, db_node **out, size_t *n,
		       enum plan_topo *topo, char *shape, size_t shlen, char *err, size_t errlen)
{
	*out = NULL;
	*n = 0;
	db_node *all = NULL;
	size_t nall = 0;
	if (db_node_list(a->hd.db, &all, &nall) < 0) {
		snprintf(err, errlen, "cannot read cluster.db");
		return -EIO;
	}
	*topo = cluster_topology(a, all, nall);
	if (strcmp(group, "all") == 0) {
		*out = all;
		*n = nall;
		snprintf(shape, shlen, "%s",
			 nall == 1 ? "single"
			 : *topo == PLAN_RING ? (nall == 2 ? "pair" : "ring")
			 : *topo == PLAN_SWITCH ? "switch" : "unknown");
		return 0;
	}
	db_group g;
	if (db_group_get(a->hd.db, group, &g) < 0) {
		free(all);
		snprintf(err, errlen, "no group '%s'; 'sparkctl group ls' lists them (or use --group all)",
			 group);
		return -ENOENT;
	}
	snprintf(shape, shlen, "%s", g.shape);
	db_group_member *m = NULL;
	size_t nm = 0;
	if (db_group_members(a->hd.db, group, &m, &nm) < 0) {
		free(all);
		snprintf(err, errlen, "cannot read cluster.db");
		return -EIO;
	}
	db_node *sel = calloc(nm ? nm : 1, sizeof *sel);
	for (size_t i = 0; sel && i < nm; i++)
		for (size_t k = 0; k < nall; k++)
			if (strcmp(all[k].id, m[i].node_id) == 0)
				sel[(*n)++] = all[k];
	free(m);
	free(all);
	if (!sel) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	if (*n == 0) {
		free(sel);
		snprintf(err, errlen, "group '%s' has no nodes left (its nodes were removed)", group);
		return -ENOENT;
	}
	*out = sel;
	return 0;
}

/* ---- groups ------------------------------------------------------------------------ */

static json_t *active_jobs_of_group(struct agent *a, const char *group)
{
	json_t *arr = json_array();
	for (struct hjob *j = a->jobs->hjobs; j; j = j->next)
		if (strcmp(j->row.group_name, group) == 0)
			json_array_append_new(arr, json_integer(j->row.id));
	return arr;
}

static json_t *group_json(struct agent *a, const db_group *g, const db_group_member *m, size_t n)
{
	json_t *nodes = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(nodes, json_string(m[i].node_name));
	return json_pack("{s:s, s:b, s:s, s:s, s:s, s:s, s:I, s:o, s:o, s:b}", "name", g->name,
			 "shared", g->shared, "topology", g->topology, "shape", g->shape, "note",
			 g->note, "created_by", g->created_by, "created_at", (json_int_t)g->created_at,
			 "nodes", nodes, "jobs", active_jobs_of_group(a, g->name), "builtin", 0);
}

static json_t *all_group_json(struct agent *a)
{
	db_node *nodes = NULL;
	size_t n = 0;
	enum plan_topo topo;
	char shape[16], err[128];
	db_group g = {.shared = true};
	snprintf(g.name, sizeof g.name, "all");
	if (group_nodes(a, "all", &nodes, &n, &topo, shape, sizeof shape, err, sizeof err) < 0)
		return NULL;
	snprintf(g.topology, sizeof g.topology, "%s", topo_word(topo));
	snprintf(g.shape, sizeof g.shape, "%s", shape);
	snprintf(g.note, sizeof g.note, "every node of the cluster, in %s order",
		 topo == PLAN_RING ? "ring" : "join");
	db_group_member *m = calloc(n ? n : 1, sizeof *m);
	for (size_t i = 0; m && i < n; i++)
		snprintf(m[i].node_name, sizeof m[i].node_name, "%s", nodes[i].name);
	json_t *o = group_json(a, &g, m, m ? n : 0);
	json_object_set_new(o, "builtin", json_true());
	free(m);
	free(nodes);
	return o;
}

void jh_group_create(struct agent *a, const struct svc_req *q)
{
	conn *dest = q->reply;
	json_int_t id = q->id;
	const json_t *req = q->msg;
	const char *name = proto_str(req, "name");
	bool shared = json_is_true(json_object_get(req, "shared"));
	json_t *names = json_object_get(req, "nodes");
	json_int_t size = proto_int(req, "size", 0);
	if (!name || !util_valid_name(name)) {
		reply_error(dest, id, "bad_request",
			    "'%s' is not a valid group name (1-63 of a-z, 0-9, '-')", name ? name : "");
		return;
	}
	if (strcmp(name, "all") == 0) {
		reply_error(dest, id, "bad_request",
			    "'all' is the built-in group of every node; pick another name");
		return;
	}
	if ((json_array_size(names) > 0) == (size > 0)) {
		reply_error(dest, id, "bad_request", "give either --nodes a,b,c or --size N");
		return;
	}
	db_group old;
	if (db_group_get(a->hd.db, name, &old) == 0) {
		reply_error(dest, id, "exists", "group '%s' already exists; 'sparkctl group show %s'",
			    name, name);
		return;
	}
	db_node *nodes = NULL;
	size_t n = 0;
	if (db_node_list(a->hd.db, &nodes, &n) < 0) {
		reply_error(dest, id, "internal", "cannot read cluster.db");
		return;
	}
	if (n > PLAN_MAX_NODES)
		n = PLAN_MAX_NODES;
	enum plan_topo topo = cluster_topology(a, nodes, n);
	db_membership *ms = NULL;
	size_t nms = 0;
	db_group_memberships(a->hd.db, &ms, &nms);
	struct plan_node pn[PLAN_MAX_NODES];
	char busy[PLAN_MAX_NODES][96];
	for (size_t i = 0; i < n; i++) {
		pn[i].name = nodes[i].name;
		pn[i].busy = NULL;
		for (size_t k = 0; k < nms && !pn[i].busy; k++)
			if (strcmp(ms[k].node_id, nodes[i].id) == 0 && (!shared || !ms[k].shared)) {
				snprintf(busy[i], sizeof busy[i], "in group %s", ms[k].group_name);
				pn[i].busy = busy[i];
			}
		if (!pn[i].busy && nodes[i].drained) {
			snprintf(busy[i], sizeof busy[i], "drained");
			pn[i].busy = busy[i];
		}
		if (!pn[i].busy && size > 0 && strcmp(nodes[i].state, "ready") != 0) {
			snprintf(busy[i], sizeof busy[i], "%s", nodes[i].state);
			pn[i].busy = busy[i];
		}
	}
	free(ms);
	const char *nm[PLAN_MAX_NODES];
	size_t nn = 0;
	size_t i;
	json_t *v;
	json_array_foreach(names, i, v)
		if (nn < PLAN_MAX_NODES && json_is_string(v))
			nm[nn++] = json_string_value(v);
	struct plan_input in = {.topo = topo, .nodes = pn, .n = n, .size = (size_t)(size > 0 ? size : 0),
				.names = nm, .n_names = nn};
	struct plan_result pr;
	if (plan_group(&in, &pr) < 0) {
		free(nodes);
		reply_error(dest, id, pr.code == -ENOENT ? "not_found" : "bad_request", "%s", pr.err);
		return;
	}
	const char *ids[PLAN_MAX_NODES], *cnames[PLAN_MAX_NODES];
	json_t *chosen = json_array();
	for (i = 0; i < pr.n; i++) {
		ids[i] = nodes[pr.idx[i]].id;
		cnames[i] = nodes[pr.idx[i]].name;
		json_array_append_new(chosen, json_string(nodes[pr.idx[i]].name));
	}
	db_group g = {.shared = shared, .created_at = util_now()};
	snprintf(g.name, sizeof g.name, "%s", name);
	snprintf(g.topology, sizeof g.topology, "%s", topo_word(topo));
	snprintf(g.shape, sizeof g.shape, "%s", pr.shape);
	snprintf(g.note, sizeof g.note, "%s", pr.note);
	snprintf(g.created_by, sizeof g.created_by, "%s", req_user(req));
	char cnode[64], cgroup[64], why[720];
	bool cwarn = cabling_failed(a, cnames, pr.n, why, sizeof why);
	int r = db_group_create(a->hd.db, &g, ids, pr.n, cnode, cgroup);
	free(nodes);
	if (r < 0) {
		json_decref(chosen);
		if (r == -EBUSY)
			reply_error(dest, id, "busy", "node '%s' is already in group '%s'%s", cnode, cgroup,
				    shared ? " (not shared)" : "; make both groups --shared to share it");
		else if (r == -EEXIST)
			reply_error(dest, id, "exists", "group '%s' already exists", name);
		else
			reply_error(dest, id, "internal", "cannot store the group in cluster.db: %s",
				    strerror(-r));
		return;
	}
	db_event_add(a->hd.db, util_now(), NULL, "group_created", name);
	log_info("group_created", "group=%s shared=%d shape=%s nodes=%zu by=%s", name, shared, pr.shape,
		 pr.n, log_q(req_user(req)));
	json_t *o = json_pack("{s:s, s:b, s:s, s:s, s:s, s:o}", "name", name, "shared", shared,
			      "topology", g.topology, "shape", g.shape, "note", pr.note, "nodes", chosen);
	if (cwarn)
		json_object_set_new(o, "warning", json_string(why));
	reply(dest, id, o);
}

void jh_group_ls(struct agent *a, const struct svc_req *q)
{
	conn *dest = q->reply;
	json_int_t id = q->id;
	const json_t *req = q->msg;
	(void)req;
	db_group *gs = NULL;
	size_t n = 0;
	if (db_group_list(a->hd.db, &gs, &n) < 0) {
		reply_error(dest, id, "internal", "cannot read cluster.db");
		return;
	}
	json_t *arr = json_array();
	json_t *all = all_group_json(a);
	if (all)
		json_array_append_new(arr, all);
	for (size_t i = 0; i < n; i++) {
		db_group_member *m = NULL;
		size_t nm = 0;
		db_group_members(a->hd.db, gs[i].name, &m, &nm);
		json_array_append_new(arr, group_json(a, &gs[i], m, nm));
		free(m);
	}
	free(gs);
	reply(dest, id, json_pack("{s:o}", "groups", arr));
}

void jh_group_show(struct agent *a, const struct svc_req *q)
{
	conn *dest = q->reply;
	json_int_t id = q->id;
	const json_t *req = q->msg;
	const char *name = proto_str(req, "name");
	if (!name) {
		reply_error(dest, id, "bad_request", "missing group name");
		return;
	}
	json_t *o;
	if (strcmp(name, "all") == 0) {
		o = all_group_json(a);
	} else {
		db_group g;
		if (db_group_get(a->hd.db, name, &g) < 0) {
			reply_error(dest, id, "not_found", "no group '%s'; 'sparkctl group ls' lists them",
				    name);
			return;
		}
		db_group_member *m = NULL;
		size_t nm = 0;
		db_group_members(a->hd.db, name, &m, &nm);
		o = group_json(a, &g, m, nm);
		free(m);
	}
	if (!o) {
		reply_error(dest, id, "internal", "cannot read cluster.db");
		return;
	}
	/* members in detail: rank order, state, address */
	db_node *nodes = NULL;
	size_t n = 0;
	enum plan_topo topo;
	char shape[16], err[256];
	json_t *members = json_array();
	if (group_nodes(a, name, &nodes, &n, &topo, shape, sizeof shape, err, sizeof err) == 0) {
		for (size_t i = 0; i < n; i++)
			json_array_append_new(members,
					      json_pack("{s:i, s:s, s:s, s:s}", "index", (int)i, "name",
							nodes[i].name, "state", nodes[i].state, "address",
							nodes[i].address));
		free(nodes);
	}
	json_object_set_new(o, "members", members);
	reply(dest, id, o);
}

static void stop_job(struct agent *a, struct hjob *j, const char *reason, bool cancelled);

void jh_group_rm(struct agent *a, const struct svc_req *q)
{
	conn *dest = q->reply;
	json_int_t id = q->id;
	const json_t *req = q->msg;
	const char *name = proto_str(req, "name");
	bool force = json_is_true(json_object_get(req, "force"));
	if (!name) {
		reply_error(dest, id, "bad_request", "missing group name");
		return;
	}
	if (strcmp(name, "all") == 0) {
		reply_error(dest, id, "bad_request", "'all' is built in and cannot be removed");
		return;
	}
	db_group g;
	if (db_group_get(a->hd.db, name, &g) < 0) {
		reply_error(dest, id, "not_found", "no group '%s'; 'sparkctl group ls' lists them", name);
		return;
	}
	/* A service keeps its group (its runs are jobs of it): even --force
	 * would leave it restarting against a group that no longer exists. */
	char svcs[300];
	if (db_services_using(a->hd.db, name, NULL, svcs, sizeof svcs) > 0) {
		reply_error(dest, id, "busy", "group '%s' is used by service(s) %s; stop and remove them "
			    "first ('sparkctl svc stop NAME', 'sparkctl svc rm NAME')%s", name, svcs,
			    force ? " (--force cancels jobs, not services)" : "");
		return;
	}
	json_t *running = active_jobs_of_group(a, name);
	if (json_array_size(running) && !force) {
		char ids[256] = "";
		size_t i;
		json_t *v;
		json_array_foreach(running, i, v)
			snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%lld", i ? ", " : "",
				 (long long)json_integer_value(v));
		json_decref(running);
		reply_error(dest, id, "busy",
			    "group '%s' has running job(s) %s; cancel them ('sparkctl job cancel') or pass "
			    "--force", name, ids);
		return;
	}
	char why[160];
	snprintf(why, sizeof why, "group %s removed by %s", name, req_user(req));
	size_t i;
	json_t *v;
	json_array_foreach(running, i, v) {
		struct hjob *j = find_job(a->jobs, (long long)json_integer_value(v));
		if (j)
			stop_job(a, j, why, true);
	}
	if (db_group_remove(a->hd.db, name) < 0) {
		json_decref(running);
		reply_error(dest, id, "internal", "cannot update cluster.db");
		return;
	}
	db_event_add(a->hd.db, util_now(), NULL, "group_removed", name);
	log_info("group_removed", "group=%s by=%s cancelled=%zu", name, log_q(req_user(req)),
		 json_array_size(running));
	reply(dest, id, json_pack("{s:s, s:o}", "name", name, "cancelled_jobs", running));
}

/* ---- the job table -------------------------------------------------------------------- */

static void on_job_timeout(uv_timer_t *t)
{
	struct hjob *j = t->data;
	char why[128], d[32];
	util_fmt_age(j->row.timeout_s, d, sizeof d);
	snprintf(why, sizeof why, "timed out after %s (--timeout)", d);
	j->timed_out = true;
	stop_job(j->a, j, why, false);
}

static void hjob_free(struct hjob *j)
{
	if (j->timer) {
		uv_timer_stop(j->timer);
		j->timer->data = NULL;
		uv_close((uv_handle_t *)j->timer, (uv_close_cb)free);
	}
	json_decref(j->spec);
	free(j->ranks);
	free(j);
}

static struct hjob *hjob_add(struct agent *a, const db_job *row, const db_job_rank *ranks, size_t n,
			     json_t *spec)
{
	struct hjob *j = calloc(1, sizeof *j);
	if (!j)
		return NULL;
	j->ranks = calloc(n ? n : 1, sizeof *j->ranks);
	if (!j->ranks) {
		free(j);
		return NULL;
	}
	j->a = a;
	j->row = *row;
	j->nranks = (int)n;
	j->fail_code = -1;
	j->spec = json_incref(spec);
	j->pending_since_ms = util_now_ms();
	for (size_t i = 0; i < n; i++) {
		struct hrank *r = &j->ranks[i];
		r->rank = ranks[i].rank;
		r->local_rank = ranks[i].local_rank;
		snprintf(r->node_id, sizeof r->node_id, "%s", ranks[i].node_id);
		snprintf(r->node_name, sizeof r->node_name, "%s", ranks[i].node_name);
		snprintf(r->state, sizeof r->state, "%s", ranks[i].state[0] ? ranks[i].state : "pending");
		r->exit_code = ranks[i].exit_code;
		r->sig = ranks[i].signal;
		r->pid = ranks[i].pid;
		r->started_at = ranks[i].started_at;
		r->ended_at = ranks[i].ended_at;
	}
	if (row->timeout_s > 0) {
		j->timer = malloc(sizeof *j->timer);
		if (j->timer) {
			uv_timer_init(a->loop, j->timer);
			j->timer->data = j;
			int64_t from = row->started_at ? row->started_at : row->created_at;
			int64_t t = row->timeout_s < JOBS_MAX_TIMEOUT_S ? row->timeout_s : JOBS_MAX_TIMEOUT_S;
			int64_t left = from + t - util_now();
			uv_timer_start(j->timer, on_job_timeout, (uint64_t)(left > 0 ? left : 0) * 1000, 0);
		}
	}
	j->next = a->jobs->hjobs;
	a->jobs->hjobs = j;
	return j;
}

static void save_rank(struct agent *a, struct hjob *j, struct hrank *r)
{
	db_job_rank row = {.job_id = j->row.id, .rank = r->rank, .local_rank = r->local_rank,
			   .pid = r->pid, .exit_code = r->exit_code, .signal = r->sig,
			   .started_at = r->started_at, .ended_at = r->ended_at};
	snprintf(row.state, sizeof row.state, "%s", r->state);
	if (db_job_rank_update(a->hd.db, &row) < 0)
		log_warn("job_rank_save_failed", "job=%lld rank=%d", (long long)j->row.id, r->rank);
}

static void save_job(struct agent *a, struct hjob *j)
{
	if (db_job_set_state(a->hd.db, &j->row) < 0)
		log_warn("job_save_failed", "job=%lld", (long long)j->row.id);
}

/* Ask every node with live ranks of j to signal them. */
static void signal_nodes(struct agent *a, struct hjob *j, const char *sig)
{
	for (int i = 0; i < j->nranks; i++) {
		struct hrank *r = &j->ranks[i];
		if (rank_final(r))
			continue;
		r->signalled = true;
		bool first = true;
		for (int k = 0; k < i; k++)
			first &= strcmp(j->ranks[k].node_id, r->node_id) != 0 || rank_final(&j->ranks[k]);
		if (!first)
			continue;
		json_t *m = proto_msg("job_signal", 0);
		json_object_set_new(m, "job_id", json_integer(j->row.id));
		json_object_set_new(m, "signal", json_string(sig));
		peers_to_node(a, r->node_id, m);
	}
}

static void stop_job(struct agent *a, struct hjob *j, const char *reason, bool cancelled)
{
	if (!j->stopping) {
		j->stopping = true;
		snprintf(j->stop_reason, sizeof j->stop_reason, "%s", reason);
		log_info("job_stopping", "job=%lld reason=%s", (long long)j->row.id, log_q(reason));
		for (struct watcher *w = a->jobs->watchers; w; w = w->next)
			if (!w->dead && w->job_id == j->row.id && w->kind == W_RUN)
				w_note(w, "stopping job %lld: %s", (long long)j->row.id, reason);
	}
	j->cancelled |= cancelled;
	signal_nodes(a, j, "TERM");
	job_check_done(a, j);
}

static void rank_lost(struct agent *a, struct hjob *j, struct hrank *r, const char *why)
{
	if (rank_final(r))
		return;
	snprintf(r->state, sizeof r->state, "lost");
	r->exit_code = 255;
	r->ended_at = util_now();
	save_rank(a, j, r);
	log_warn("rank_lost", "job=%lld rank=%d node=%s why=%s", (long long)j->row.id, r->rank,
		 r->node_name, log_q(why));
	char reason[256];
	snprintf(reason, sizeof reason, "rank %d on %s was lost: %s", r->rank, r->node_name, why);
	rank_end_queue(a, j, r);
	if (j->fail_code < 0 && !j->stopping)
		j->fail_code = 255;
	for (struct watcher *w = a->jobs->watchers; w; w = w->next)
		if (!w->dead && w->job_id == j->row.id && w->kind == W_RUN)
			w_note(w, "%s", reason);
	if (!j->stopping)
		stop_job(a, j, reason, false);
	else
		job_check_done(a, j);
}

/* A rank's end as a member reported it. */
static void rank_exit(struct agent *a, struct hjob *j, struct hrank *r, int code, int sig, bool lost,
		      int64_t ended_at)
{
	if (rank_final(r))
		return;
	if (lost) {
		rank_lost(a, j, r, "its supervisor on the node disappeared");
		return;
	}
	r->exit_code = code;
	r->sig = sig;
	r->ended_at = ended_at ? ended_at : util_now();
	/* killed: died of the signal we sent; a rank that exits non-zero on its own
	 * (even while being stopped) failed */
	const char *st = code == 0 ? "exited" : r->signalled && sig ? "killed" : "failed";
	snprintf(r->state, sizeof r->state, "%s", st);
	save_rank(a, j, r);
	for (struct watcher *w = a->jobs->watchers; w; w = w->next)
		if (!w->dead && w->job_id == j->row.id && w->kind == W_RUN) {
			json_t *m = stream_msg(w, "rank_exit");
			json_object_set_new(m, "rank", json_integer(r->rank));
			json_object_set_new(m, "node", json_string(r->node_name));
			json_object_set_new(m, "exit_code", json_integer(code));
			json_object_set_new(m, "signal", json_integer(sig));
			json_object_set_new(m, "state", json_string(st));
			w_send(w, m);
		}
	rank_end_queue(a, j, r);
	if (strcmp(st, "failed") == 0 && !j->stopping) {
		char reason[256];
		if (sig)
			snprintf(reason, sizeof reason, "rank %d on %s was killed by signal %d", r->rank,
				 r->node_name, sig);
		else
			snprintf(reason, sizeof reason, "rank %d on %s exited with code %d%s", r->rank,
				 r->node_name, code,
				 code == 127 ? " (command not found)"
				 : code == 126 ? " (could not run the command)" : "");
		j->fail_code = code;
		stop_job(a, j, reason, false);
		return;
	}
	job_check_done(a, j);
}

static void job_check_done(struct agent *a, struct hjob *j)
{
	for (int i = 0; i < j->nranks; i++)
		if (!rank_final(&j->ranks[i]))
			return;
	/* the highest code of the ranks that failed, else of all ranks */
	int code = -1, maxc = 0;
	bool failed = j->fail_code >= 0 || j->timed_out;
	for (int i = 0; i < j->nranks; i++) {
		struct hrank *r = &j->ranks[i];
		bool bad = strcmp(r->state, "failed") == 0 || strcmp(r->state, "lost") == 0;
		if (r->exit_code > maxc)
			maxc = r->exit_code;
		if (bad && r->exit_code > code)
			code = r->exit_code;
		failed |= bad;
	}
	if (code < 0)
		code = maxc;
	const char *state = j->cancelled ? "cancelled" : failed ? "failed" : "succeeded";
	snprintf(j->row.state, sizeof j->row.state, "%s", state);
	snprintf(j->row.reason, sizeof j->row.reason, "%s",
		 j->stopping ? j->stop_reason : failed ? "a rank failed" : "");
	/* The job's exit code is decided here, once, and `sparkctl run` exits
	 * with it: a job that did not succeed never reports 0. */
	if (strcmp(state, "succeeded") != 0 && code <= 0)
		code = 1;
	j->row.exit_code = code > 255 ? 255 : code;
	j->row.ended_at = util_now();
	if (!j->row.started_at)
		j->row.started_at = j->row.created_at;
	save_job(a, j);
	char detail[256];
	snprintf(detail, sizeof detail, "job %lld %s %s exit %d", (long long)j->row.id, j->row.name,
		 state, j->row.exit_code);
	db_event_add(a->hd.db, util_now(), NULL, "job_ended", detail);
	log_info("job_ended", "job=%lld state=%s exit=%d reason=%s", (long long)j->row.id, state,
		 j->row.exit_code, log_q(j->row.reason));
	/* members may forget it (their dirs get the "done" mark) */
	for (int i = 0; i < j->nranks; i++) {
		bool first = true;
		for (int k = 0; k < i; k++)
			first &= strcmp(j->ranks[k].node_id, j->ranks[i].node_id) != 0;
		if (!first || !node_live(a, j->ranks[i].node_id))
			continue;
		json_t *m = proto_msg("job_sync_ack", 0);
		json_object_set_new(m, "done", json_pack("[I]", (json_int_t)j->row.id));
		peers_to_node(a, j->ranks[i].node_id, m);
	}
	long long id = j->row.id;
	for (struct hjob **p = &a->jobs->hjobs; *p; p = &(*p)->next)
		if (*p == j) {
			*p = j->next;
			break;
		}
	hjob_free(j);
	watchers_job_update(a, id);
	ended_queue(a, id);
}

/* SVC_EV_JOB_ENDED, once per job: its end is decided only here (the job then
 * leaves the table of active jobs; after a head restart only jobs still
 * active in cluster.db come back). SVC_EV_RANK_ENDED, once per rank that
 * ends while others of its job still run and the job is not being stopped.
 * Both are emitted from the next loop iteration, in the order they happened
 * (a job's rank ends before its own end), so a service reacting to them
 * (launching the next run, stopping a job) never runs inside the jobs
 * service's own walks over its lists. J->ended holds [event, record]. */
static void on_ended(uv_timer_t *t)
{
	struct jobs *J = t->data;
	while (J->ended && json_array_size(J->ended) && !J->stopping) {
		json_t *e = json_incref(json_array_get(J->ended, 0));
		json_array_remove(J->ended, 0);
		enum svc_event ev = (enum svc_event)json_integer_value(json_array_get(e, 0));
		const json_t *rec = json_array_get(e, 1);
		json_int_t id = proto_int(rec, ev == SVC_EV_RANK_ENDED ? "job_id" : "id", 0);
		struct svc_event_arg arg = {.id = id, .data = rec};
		svc_emit(J->a, ev, &arg);
		json_decref(e);
	}
}

static void event_queue(struct agent *a, enum svc_event ev, json_t *rec)
{
	struct jobs *J = a->jobs;
	if (!rec || (!J->ended && !(J->ended = json_array()))) {
		json_decref(rec);
		return;
	}
	json_array_append_new(J->ended, json_pack("[i, o]", (int)ev, rec));
	uv_timer_start(&J->end_timer, on_ended, 0, 0);
}

static void ended_queue(struct agent *a, long long id)
{
	event_queue(a, SVC_EV_JOB_ENDED, job_result(a, id));
}

/* r of j has just ended: SVC_EV_RANK_ENDED when other ranks of j still run
 * (or have not started) and j is not being stopped: a supervisor of ranks
 * that must all live (the serve service) learns of an end the job itself
 * does not fail on (an exit 0). */
static void rank_end_queue(struct agent *a, struct hjob *j, struct hrank *r)
{
	if (j->stopping)
		return;
	int others = 0;
	for (int i = 0; i < j->nranks; i++)
		others += &j->ranks[i] != r && !rank_final(&j->ranks[i]);
	if (!others)
		return;
	db_job_rank row = {.job_id = j->row.id, .rank = r->rank, .local_rank = r->local_rank,
			   .pid = r->pid, .exit_code = r->exit_code, .signal = r->sig,
			   .started_at = r->started_at, .ended_at = r->ended_at};
	snprintf(row.state, sizeof row.state, "%s", r->state);
	snprintf(row.node_id, sizeof row.node_id, "%s", r->node_id);
	snprintf(row.node_name, sizeof row.node_name, "%s", r->node_name);
	json_t *rec = rank_json(&row);
	if (rec) {
		json_object_set_new(rec, "job_id", json_integer(j->row.id));
		json_object_set_new(rec, "running", json_integer(others));
	}
	event_queue(a, SVC_EV_RANK_ENDED, rec);
}

/* ---- watchers and the end of a job ----------------------------------------------------------- */

static json_t *job_result(struct agent *a, long long id)
{
	db_job row;
	if (db_job_get(a->hd.db, id, &row) < 0)
		return json_object();
	json_t *o = job_json(&row);
	db_job_rank *rk = NULL;
	size_t n = 0;
	json_t *ranks = json_array();
	if (db_job_ranks(a->hd.db, id, &rk, &n) == 0)
		for (size_t i = 0; i < n; i++)
			json_array_append_new(ranks, rank_json(&rk[i]));
	free(rk);
	json_object_set_new(o, "ranks", ranks);
	return o;
}

static void send_tail(struct agent *a, struct watcher *w, struct wtail *t)
{
	if (!node_live(a, t->node_id)) {
		t->eof = true;
		t->detached = true;
		w_note(w, "the log of rank %d is on %s, which is not connected", t->rank, t->node_name);
		return;
	}
	json_t *m = proto_msg("job_tail", 0);
	json_object_set_new(m, "tail_id", json_integer(t->tail_id));
	json_object_set_new(m, "job_id", json_integer(w->job_id));
	json_object_set_new(m, "rank", json_integer(t->rank));
	json_object_set_new(m, "offset", json_integer(t->offset));
	json_object_set_new(m, "follow", json_boolean(w->follow));
	t->sent = true;
	t->detached = false;
	peers_to_node(a, t->node_id, m);
}

/* Is this watcher finished? (job ended / every tail read) */
static void watcher_check(struct agent *a, struct watcher *w)
{
	if (w->dead)
		return;
	bool job_active = find_job(a->jobs, w->job_id) != NULL;
	if (w->kind == W_CANCEL) {
		if (!job_active)
			w_result(a, w, job_result(a, w->job_id));
		return;
	}
	if (w->kind == W_RUN) {
		if (!job_active)
			w_result(a, w, job_result(a, w->job_id));
		return;
	}
	if (w->kind != W_LOGS)
		return;
	bool all_eof = true;
	for (int i = 0; i < w->ntails; i++) {
		struct wtail *t = &w->tails[i];
		if (t->eof)
			continue;
		all_eof = false;
		if (!w->follow && !t->sent) { /* one rank after the other */
			send_tail(a, w, t);
			if (!t->eof)
				return;
			continue;
		}
		if (!w->follow)
			return;
	}
	if (all_eof && (!w->follow || !job_active))
		w_result(a, w, job_result(a, w->job_id));
	else if (w->follow && !job_active) {
		/* ended: whatever is still streaming finishes as a plain read */
		bool open = false;
		for (int i = 0; i < w->ntails; i++)
			open |= !w->tails[i].eof && !w->tails[i].detached;
		if (!open)
			w_result(a, w, job_result(a, w->job_id));
	}
}

static void watchers_job_update(struct agent *a, long long job_id)
{
	for (struct watcher *w = a->jobs->watchers; w; w = w->next)
		if (!w->dead && w->job_id == job_id)
			watcher_check(a, w);
	w_sweep(a->jobs);
}

static int add_tails(struct agent *a, struct watcher *w, const db_job_rank *rk, size_t n, int only)
{
	w->tails = calloc(n ? n : 1, sizeof *w->tails);
	if (!w->tails)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		if (only >= 0 && rk[i].rank != only)
			continue;
		struct wtail *t = &w->tails[w->ntails++];
		t->tail_id = ++a->jobs->next_tail;
		t->rank = rk[i].rank;
		snprintf(t->node_id, sizeof t->node_id, "%s", rk[i].node_id);
		snprintf(t->node_name, sizeof t->node_name, "%s", rk[i].node_name);
	}
	return 0;
}

/* What depends on the job's id: MASTER_PORT and SPARK_PEERS (rank = node
 * index * ranks_per_node + local rank; port = MASTER_PORT + 1 + rank). */
static void spec_complete(json_t *spec, long long id)
{
	int port = jobenv_master_port(id);
	int rpn = (int)json_integer_value(json_object_get(spec, "ranks_per_node"));
	json_t *nodes = json_object_get(spec, "nodes");
	char *peers = NULL;
	size_t pl = 0;
	FILE *f = open_memstream(&peers, &pl);
	int k = 0;
	size_t i;
	json_t *v;
	json_array_foreach(nodes, i, v)
		for (int l = 0; l < (rpn > 0 ? rpn : 1); l++, k++)
			fprintf(f, "%s%d=%s:%d", k ? "," : "", k,
				json_string_value(json_object_get(v, "socket_addr")) ?: "", port + 1 + k);
	fclose(f);
	json_object_set_new(spec, "id", json_integer(id));
	json_object_set_new(spec, "master_port", json_integer(port));
	json_object_set_new(spec, "peers", json_string(peers ? peers : ""));
	free(peers);
}

/* ---- run ------------------------------------------------------------------------------------ */

static bool job_name_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 63)
		return false;
	for (const char *p = s; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		      *p == '-' || *p == '_' || *p == '.'))
			return false;
	return true;
}

static void default_name(const char *argv0, char *out, size_t len)
{
	const char *b = strrchr(argv0, '/');
	b = b ? b + 1 : argv0;
	size_t o = 0;
	for (const char *p = b; *p && o + 1 < len && o < 63; p++) {
		char c = *p;
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			  c == '-' || c == '_' || c == '.';
		out[o++] = ok ? c : '-';
	}
	out[o] = '\0';
	if (!o)
		snprintf(out, len, "job");
}

/* What a job is made of, from `sparkctl run` (job_run) or another service
 * (the job_launch hook). Checked by the caller; job_create checks what needs
 * the cluster (the group, its members, their state, the cabling). */
struct job_params {
	const char *group, *launcher, *name;
	const char *user;       /* runs as; the row's owner */
	json_int_t uid;
	const char *managed_by; /* "serve:NAME" for a launch, "" for a user's run */
	json_t *argv;           /* what every rank runs (a launch: rank 0's, for people) */
	json_t *env;            /* array of "K=V" or NULL */
	json_t *rank_specs;     /* a launch: per rank [{"argv": [...], "env": ["K=V"...]}] */
	const json_t *rank_nodes; /* a launch: the node id of each rank, in group order */
	int rpn, nnodes, grace_ms;
	json_int_t timeout;
	bool force, detach;
	const char *workdir, *cwd, *path, *lang;
	char code[32];
	char err[1024];
};

static long long job_fail(struct job_params *p, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static long long job_fail(struct job_params *p, const char *code, const char *fmt, ...)
{
	snprintf(p->code, sizeof p->code, "%s", code);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(p->err, sizeof p->err, fmt, ap);
	va_end(ap);
	return -1;
}

/* Record the job and send job_start to its members. dest, id: a CLI's run
 * (watched in the foreground unless p->detach, answered here), or NULL for a
 * launch. The job's id, or -1 with p->code and p->err set (nothing started). */
static long long job_create(struct agent *a, struct job_params *p, conn *dest, json_int_t id)
{
	const char *group = p->group, *launcher = p->launcher, *name = p->name, *user = p->user;
	json_t *argv = p->argv, *env = p->env;
	int rpn = p->rpn;
	size_t i;
	json_t *v;
	/* members, all reachable */
	db_node *nodes = NULL;
	size_t n = 0;
	enum plan_topo topo;
	char shape[16], err[512];
	int r = group_nodes(a, group, &nodes, &n, &topo, shape, sizeof shape, err, sizeof err);
	if (r < 0)
		return job_fail(p, r == -ENOENT ? "not_found" : "internal", "%s", err);
	/* "nnodes": only the group's first K nodes in rank order (an arc of a
	 * ring); `sparkctl bench decode` runs the smaller world sizes this way */
	if (p->nnodes < 0 || (size_t)p->nnodes > n) {
		free(nodes);
		return job_fail(p, "bad_request", "group %s has %zu node(s), not %d", group, n,
				p->nnodes);
	}
	if (p->nnodes > 0 && (size_t)p->nnodes < n) {
		n = (size_t)p->nnodes;
		if (n == 1 || topo == PLAN_RING)
			snprintf(shape, sizeof shape, "%s",
				 n == 1 ? "single" : n == 2 ? "pair" : "chain");
	}
	if (n > JOBENV_MAX_NODES) {
		free(nodes);
		return job_fail(p, "bad_request", "a job spans at most %d nodes", JOBENV_MAX_NODES);
	}
	/* a launch names each rank's node: exactly the members, in group order */
	if (p->rank_nodes) {
		bool same = json_array_size(p->rank_nodes) == n;
		for (i = 0; same && i < n; i++)
			same = strcmp(json_string_value(json_array_get(p->rank_nodes, i)) ?: "",
				      nodes[i].id) == 0;
		if (!same) {
			char want[512] = "";
			for (i = 0; i < n; i++)
				snprintf(want + strlen(want), sizeof want - strlen(want), "%s%s",
					 i ? ", " : "", nodes[i].id);
			free(nodes);
			return job_fail(p, "bad_request",
					"the ranks must be one per member of group %s in its order (%s)",
					group, want);
		}
	}
	for (i = 0; i < n; i++) {
		const char *why = NULL;
		if (nodes[i].drained)
			why = "drained ('sparkctl node undrain' puts it back)";
		else if (strcmp(nodes[i].state, "ready") != 0 || !node_live(a, nodes[i].id))
			why = "unreachable (its sparkd is not connected to the head)";
		if (why) {
			job_fail(p, "unavailable", "node %s of group %s is %s; nothing was started",
				 nodes[i].name, group, why);
			free(nodes);
			return -1;
		}
	}
	/* cabling that failed validation (a same-port ring fails in NCCL): refuse */
	const char *mnames[JOBENV_MAX_NODES];
	char cwhy[720];
	for (i = 0; i < n; i++)
		mnames[i] = nodes[i].name;
	if (!p->force && cabling_failed(a, mnames, n, cwhy, sizeof cwhy)) {
		job_fail(p, "cabling_failed",
			 "group %s: %s; nothing was started: fix the cabling and run 'sparkctl topo "
			 "validate' again, or run with --force", group, cwhy);
		free(nodes);
		return -1;
	}
	/* network plan from the stored reports */
	struct jobnet_plan *plan = jh_net_plan(a, nodes, n);
	if (!plan) {
		free(nodes);
		return job_fail(p, "internal", "out of memory");
	}

	int world = (int)(n * (size_t)rpn);
	int nrows = strcmp(launcher, "native") == 0 ? world : strcmp(launcher, "torchrun") == 0 ? (int)n : 1;
	db_job_rank *rows = calloc((size_t)nrows, sizeof *rows);
	json_t *nodes_j = json_array(), *hosts = json_array();
	for (i = 0; i < n; i++) {
		json_array_append_new(nodes_j, json_pack("{s:s, s:s, s:s}", "node_id", nodes[i].id,
							  "name", nodes[i].name, "socket_addr",
							  plan->socket_addr[i]));
		json_array_append_new(hosts, json_string(plan->socket_addr[i]));
	}
	for (int k = 0; rows && k < nrows; k++) {
		size_t node = strcmp(launcher, "native") == 0 ? (size_t)(k / rpn) : (size_t)k;
		rows[k].rank = k;
		rows[k].local_rank = strcmp(launcher, "native") == 0 ? (int)(k % rpn) : 0;
		snprintf(rows[k].node_id, sizeof rows[k].node_id, "%s", nodes[node].id);
		snprintf(rows[k].node_name, sizeof rows[k].node_name, "%s", nodes[node].name);
	}
	db_job row = {.uid = p->uid, .ranks_per_node = rpn, .world_size = world,
		      .timeout_s = p->timeout, .created_at = util_now()};
	snprintf(row.name, sizeof row.name, "%s", name);
	snprintf(row.group_name, sizeof row.group_name, "%s", group);
	snprintf(row.owner, sizeof row.owner, "%s", user);
	snprintf(row.launcher, sizeof row.launcher, "%s", launcher);
	snprintf(row.managed_by, sizeof row.managed_by, "%s", p->managed_by ? p->managed_by : "");
	size_t cl = 0;
	json_array_foreach(argv, i, v)
		cl += (size_t)snprintf(row.command + cl, cl < sizeof row.command ? sizeof row.command - cl : 0,
				       "%s%s", i ? " " : "", json_string_value(v));
	json_t *envarr = json_is_array(env) ? json_incref(env) : json_array();
	json_t *spec = json_pack(
	    "{s:s, s:s, s:s, s:s, s:O, s:o, s:s, s:s, s:s, s:s, s:s, s:s, s:i, s:i, s:i, s:s, s:s, s:s,"
	    " s:s, s:o, s:o}",
	    "name", name, "group", group, "owner", user, "launcher", launcher, "argv", argv, "env",
	    envarr, "workdir", p->workdir ? p->workdir : "", "cwd", p->cwd ? p->cwd : "", "path",
	    p->path ? p->path : "", "lang", p->lang ? p->lang : "", "topology", topo_word(topo),
	    "shape", shape, "world_size", world, "ranks_per_node", rpn, "nnodes", (int)n, "net",
	    plan->fabric ? "fabric" : "management", "net_why", plan->why, "master_addr",
	    plan->socket_addr[0], "tcp_include", plan->tcp_include, "nodes", nodes_j, "hosts", hosts);
	if (spec && p->rank_specs) {
		json_object_set(spec, "rank_specs", p->rank_specs);
		json_object_set_new(spec, "managed_by", json_string(row.managed_by));
		json_object_set_new(spec, "grace_ms", json_integer(p->grace_ms));
	}
	char *spec_text = spec ? json_dumps(spec, JSON_COMPACT) : NULL;
	r = rows && spec_text ? db_job_create(a->hd.db, &row, spec_text, rows, (size_t)nrows) : -ENOMEM;
	free(spec_text);
	if (r < 0) {
		free(rows);
		free(nodes);
		free(plan);
		json_decref(spec);
		return job_fail(p, "internal", "cannot record the job in cluster.db: %s", strerror(-r));
	}
	spec_complete(spec, row.id);
	hjob_add(a, &row, rows, (size_t)nrows, spec);
	char detail[200];
	snprintf(detail, sizeof detail, "job %lld %s on %s by %s", (long long)row.id, name, group, user);
	db_event_add(a->hd.db, util_now(), NULL, "job_started", detail);
	log_info("job_created", "job=%lld name=%s group=%s launcher=%s world=%d net=%s user=%s%s%s",
		 (long long)row.id, name, group, launcher, world, plan->fabric ? "fabric" : "management",
		 log_q(user), row.managed_by[0] ? " managed_by=" : "", row.managed_by);
	json_t *started = json_pack("{s:I, s:s, s:s, s:s, s:i, s:s, s:s, s:s, s:s}", "job_id",
				    (json_int_t)row.id, "name", name, "group", group, "launcher", launcher,
				    "world_size", world, "net", plan->fabric ? "fabric" : "management",
				    "master_addr", plan->socket_addr[0], "topology", topo_word(topo),
				    "shape", shape);
	json_t *rl = json_array();
	for (int k = 0; k < nrows; k++)
		json_array_append_new(rl, json_pack("{s:i, s:s}", "rank", rows[k].rank, "node",
						    rows[k].node_name));
	json_object_set_new(started, "ranks", rl);
	/* In the foreground, output follows from the start: the tails travel in
	 * job_start, so a rank that ends at once cannot end before its tail. */
	struct watcher *w = NULL;
	if (dest && !p->detach && (w = w_new(a, W_RUN, dest, id))) {
		w->job_id = row.id;
		w->follow = true;
		w->label = nrows > 1;
		json_t *m = stream_msg(w, "started");
		json_object_update(m, started);
		w_send(w, m);
		add_tails(a, w, rows, (size_t)nrows, -1);
	}
	for (i = 0; i < n; i++) {
		json_t *ranks = json_array(), *tails = json_array();
		for (int k = 0; k < nrows; k++)
			if (strcmp(rows[k].node_id, nodes[i].id) == 0)
				json_array_append_new(ranks, json_pack("{s:i, s:i}", "rank", rows[k].rank,
								       "local_rank", rows[k].local_rank));
		for (int k = 0; w && k < w->ntails; k++)
			if (strcmp(w->tails[k].node_id, nodes[i].id) == 0) {
				w->tails[k].sent = true;
				json_array_append_new(tails, json_pack("{s:I, s:i}", "tail_id",
								       (json_int_t)w->tails[k].tail_id,
								       "rank", w->tails[k].rank));
			}
		if (json_array_size(ranks) == 0) {
			json_decref(ranks);
			json_decref(tails);
			continue;
		}
		json_t *m = proto_msg("job_start", 0);
		json_object_set_new(m, "job", jobnet_node_spec(plan, i, spec)); /* per-node view */
		json_object_set_new(m, "node_rank", json_integer((json_int_t)i));
		json_object_set_new(m, "socket_addr", json_string(plan->socket_addr[i]));
		json_object_set_new(m, "ranks", ranks);
		json_object_set_new(m, "tails", tails);
		if (peers_to_node(a, nodes[i].id, m) < 0) {
			struct hjob *j = find_job(a->jobs, row.id);
			for (int k = 0; j && k < j->nranks; k++)
				if (strcmp(j->ranks[k].node_id, nodes[i].id) == 0) {
					rank_lost(a, j, &j->ranks[k], "its node disconnected at start");
					j = find_job(a->jobs, row.id);
				}
		}
	}
	if (dest && p->detach)
		reply(dest, id, started);
	else
		json_decref(started);
	if (w) {
		watcher_check(a, w); /* a job that ended already */
		w_sweep(a->jobs);
	}
	free(rows);
	free(nodes);
	free(plan);
	json_decref(spec);
	return row.id;
}

void jh_job_run(struct agent *a, const struct svc_req *q)
{
	conn *dest = q->reply;
	json_int_t id = q->id;
	const json_t *req = q->msg;
	const char *group = proto_str(req, "group");
	const char *launcher = proto_str(req, "launcher");
	json_t *argv = json_object_get(req, "argv");
	json_t *env = json_object_get(req, "env");
	json_int_t rpn = proto_int(req, "ranks_per_node", 1);
	json_int_t timeout = proto_int(req, "timeout_s", 0);
	bool detach = json_is_true(json_object_get(req, "detach"));
	const char *user = req_user(req);
	if (!launcher)
		launcher = "native";
	if (!group || !*group) {
		reply_error(dest, id, "bad_request", "missing --group (a group name, or all)");
		return;
	}
	if (strcmp(launcher, "native") && strcmp(launcher, "torchrun") && strcmp(launcher, "mpi")) {
		reply_error(dest, id, "bad_request", "unknown launcher '%s' (native, torchrun or mpi)",
			    launcher);
		return;
	}
	if (!json_is_array(argv) || json_array_size(argv) == 0) {
		reply_error(dest, id, "bad_request", "missing the command (after --)");
		return;
	}
	if (!argv_strings(dest, id, argv))
		return;
	size_t i;
	json_t *v;
	if (rpn < 1 || rpn > JOBS_MAX_RANKS_PER_NODE) {
		reply_error(dest, id, "bad_request", "--ranks-per-node must be 1 to %d",
			    JOBS_MAX_RANKS_PER_NODE);
		return;
	}
	if (spec_too_large(dest, id, argv, env))
		return;
	if (timeout < 0 || timeout > JOBS_MAX_TIMEOUT_S) {
		reply_error(dest, id, "bad_request", "--timeout must be 0 to %d s (10 years)",
			    JOBS_MAX_TIMEOUT_S);
		return;
	}
	json_array_foreach(env, i, v) {
		char key[128];
		if (!json_is_string(v) || jobenv_parse_kv(json_string_value(v), key, sizeof key) < 0) {
			reply_error(dest, id, "bad_request",
				    "--env '%s' is not KEY=VALUE (KEY: letters, digits, '_')",
				    json_is_string(v) ? json_string_value(v) : "?");
			return;
		}
	}
	char name[64];
	const char *nm = proto_str(req, "name");
	if (nm && !job_name_ok(nm)) {
		reply_error(dest, id, "bad_request",
			    "--name '%s' is not a valid job name (1-63 of letters, digits, '-', '_', '.')",
			    nm);
		return;
	}
	if (nm)
		snprintf(name, sizeof name, "%s", nm);
	else
		default_name(json_string_value(json_array_get(argv, 0)), name, sizeof name);


	json_int_t nnodes = proto_int(req, "nnodes", 0);
	struct job_params p = {
		.group = group, .launcher = launcher, .name = name, .user = user,
		.uid = proto_int(caller(req), "uid", -1), .managed_by = "", .argv = argv,
		.env = json_is_array(env) ? env : NULL, .rpn = (int)rpn,
		.nnodes = nnodes < 0 || nnodes > JOBENV_MAX_NODES * 64 ? -1 : (int)nnodes,
		.timeout = timeout, .force = json_is_true(json_object_get(req, "force")),
		.detach = detach, .workdir = proto_str(req, "workdir"), .cwd = proto_str(req, "cwd"),
		.path = proto_str(req, "path"), .lang = proto_str(req, "lang"),
	};
	if (job_create(a, &p, dest, id) < 0)
		reply_error(dest, id, p.code, "%s", p.err);
}

/* ---- the job_launch and job_stop hooks (another service's jobs) ----------------------------- */

#define LAUNCH_GRACE_MAX_MS 600000

static long long launch_fail(char *err, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static long long launch_fail(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* One rank of a launch spec: {"node": id, "argv": [s...], "env": {K: s}} as
 * {"argv": [...], "env": ["K=V"...]} (jobenv's overrides); its size in *bytes. */
static json_t *launch_rank(const json_t *rk, size_t k, size_t *bytes, char *err, size_t len)
{
	json_t *argv = json_object_get(rk, "argv"), *env = json_object_get(rk, "env");
	if (!json_is_object(rk) || !json_is_string(json_object_get(rk, "node"))) {
		launch_fail(err, len, "rank %zu: needs a node id", k);
		return NULL;
	}
	if (!json_is_array(argv) || json_array_size(argv) == 0) {
		launch_fail(err, len, "rank %zu: argv must be a non-empty array of strings", k);
		return NULL;
	}
	size_t i;
	json_t *v;
	json_array_foreach(argv, i, v)
		if (!json_is_string(v) || (i == 0 && json_string_length(v) == 0)) {
			launch_fail(err, len, "rank %zu: argv must be a non-empty array of strings", k);
			return NULL;
		}
	if (env && !json_is_object(env)) {
		launch_fail(err, len, "rank %zu: env must be an object of strings", k);
		return NULL;
	}
	json_t *kv = json_array();
	const char *key;
	json_object_foreach(env, key, v) {
		char *s = NULL, kbuf[128];
		if (!json_is_string(v) || asprintf(&s, "%s=%s", key, json_string_value(v)) < 0 ||
		    jobenv_parse_kv(s, kbuf, sizeof kbuf) < 0) {
			free(s);
			json_decref(kv);
			launch_fail(err, len, "rank %zu: env '%s' is not KEY (letters, digits, '_') = a string",
				    k, key);
			return NULL;
		}
		json_array_append_new(kv, json_string(s));
		free(s);
	}
	*bytes += json_dumpb(argv, NULL, 0, JSON_COMPACT) + json_dumpb(kv, NULL, 0, JSON_COMPACT);
	return json_pack("{s:O, s:o}", "argv", argv, "env", kv);
}

static long long hook_job_launch(struct agent *a, const json_t *spec, char *err, size_t len)
{
	if (a->id.role != ROLE_HEAD || !a->hd.db || !a->jobs || a->jobs->stopping)
		return launch_fail(err, len, "only the head launches jobs"), -ENOTSUP;
	const char *name = proto_str(spec, "name"), *group = proto_str(spec, "group");
	const char *owner = proto_str(spec, "owner");
	const json_t *who = json_object_get(spec, "caller");
	const char *user = proto_str(who, "user");
	json_t *ranks = json_object_get(spec, "ranks");
	json_int_t grace = proto_int(spec, "grace_ms", JOBS_GRACE_MS);
	if (!json_is_object(spec))
		return launch_fail(err, len, "the spec must be an object");
	if (!name || !job_name_ok(name))
		return launch_fail(err, len, "'%s' is not a valid job name (1-63 of letters, digits, "
				   "'-', '_', '.')", name ? name : "");
	if (!group || !*group)
		return launch_fail(err, len, "missing the group");
	if (!owner || !*owner || strlen(owner) >= sizeof ((db_job *)0)->managed_by)
		return launch_fail(err, len, "missing the owner (e.g. serve:NAME, under %zu bytes)",
				   sizeof ((db_job *)0)->managed_by);
	if (!user || !*user || !json_is_integer(json_object_get(who, "uid")))
		return launch_fail(err, len, "the caller needs a user name and uid");
	if (!json_is_array(ranks) || json_array_size(ranks) == 0 ||
	    json_array_size(ranks) > JOBENV_MAX_NODES)
		return launch_fail(err, len, "ranks must be 1 to %d objects, one per member",
				   JOBENV_MAX_NODES);
	if (grace < 100 || grace > LAUNCH_GRACE_MAX_MS)
		return launch_fail(err, len, "grace_ms must be 100 to %d", LAUNCH_GRACE_MAX_MS);
	json_t *specs = json_array(), *nodes = json_array();
	size_t bytes = 0, i;
	json_t *rk;
	json_array_foreach(ranks, i, rk) {
		json_t *one = launch_rank(rk, i, &bytes, err, len);
		if (!one) {
			json_decref(specs);
			json_decref(nodes);
			return -EINVAL;
		}
		json_array_append_new(specs, one);
		json_array_append(nodes, json_object_get(rk, "node"));
	}
	if (bytes > JOBS_MAX_SPEC_BYTES) {
		json_decref(specs);
		json_decref(nodes);
		return launch_fail(err, len, "the commands and environments are too large (%zu bytes; "
				   "at most %d)", bytes, JOBS_MAX_SPEC_BYTES);
	}
	struct job_params p = {
		.group = group, .launcher = "native", .name = name, .user = user,
		.uid = proto_int(who, "uid", -1), .managed_by = owner,
		.argv = json_object_get(json_array_get(specs, 0), "argv"), .rank_specs = specs,
		.rank_nodes = nodes, .rpn = 1, .grace_ms = (int)grace,
		.force = json_is_true(json_object_get(spec, "force")), .detach = true,
		.workdir = proto_str(spec, "workdir"),
	};
	long long id = job_create(a, &p, NULL, 0);
	json_decref(specs);
	json_decref(nodes);
	if (id < 0) {
		snprintf(err, len, "%s", p.err);
		return strcmp(p.code, "not_found") == 0     ? -ENOENT
		       : strcmp(p.code, "unavailable") == 0 ? -EHOSTUNREACH
		       : strcmp(p.code, "internal") == 0    ? -EIO
							    : -EINVAL;
	}
	return id;
}

static int hook_job_stop(struct agent *a, long long job_id, int grace_ms)
{
	if (a->id.role != ROLE_HEAD || !a->jobs)
		return -ENOTSUP;
	struct hjob *j = find_job(a->jobs, job_id);
	if (!j)
		return -ENOENT;
	char why[160];
	snprintf(why, sizeof why, "stopped by %s", j->row.managed_by[0] ? j->row.managed_by : "its service");
	uint64_t at = util_now_ms() + (uint64_t)(grace_ms > 0 ? grace_ms : 0);
	if (!j->kill_at_ms || at < j->kill_at_ms)
		j->kill_at_ms = at; /* SIGKILL then, by on_head_tick (the shim's own grace may be shorter) */
	stop_job(a, j, why, true); /* may end and free j */
	return 0;
}

void jh_hooks(struct agent *a)
{
	a->hooks.job_launch = hook_job_launch;
	a->hooks.job_stop = hook_job_stop;
}


/* ---- job ls / show / logs / cancel ------------------------------------------------------------ */

void jh_job_ls(struct agent *a, const struct svc_req *q)
{
	conn *dest = q->reply;
	json_int_t id = q->id;
	const json_t *req = q->msg;
	bool running = json_is_true(json_object_get(req, "running"));
	json_int_t limit = proto_int(req, "limit", 50);
	db_job *js = NULL;
	size_t n = 0;
	if (db_job_list(a->hd.db, is_root(req) ? NULL : req_user(req), running,
			limit > 0 ? (size_t)limit : 0, &js, &n) < 0) {
		reply_error(dest, id, "internal", "cannot read cluster.db");
		return;
	}
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, job_json(&js[i]));
	free(js);
	reply(dest, id, json_pack("{s:o}", "jobs", arr));
}

void jh_job_show(struct agent *a, const struct svc_req *q)
{
	conn *dest = q->reply;
	json_int_t id = q->id;
	const json_t *req = q->msg;
	db_job row;
	if (lookup_job(a, dest, id, req, &row) < 0)
		return;
	json_t *o = job_result(a, row.id);
	char *spec = NULL;
	if (db_job_spec(a->hd.db, row.id, &spec) == 0) {
		json_t *s = json_loads(spec, 0, NULL);
		const char *keys[] = {"argv", "env", "rank_specs", "workdir", "net", "net_why", "master_addr",
				      "topology", "shape", "nnodes"};
		for (size_t i = 0; s && i < ARRAY_SIZE(keys); i++)
			if (json_object_get(s, keys[i]))
				json_object_set(o, keys[i], json_object_get(s, keys[i]));
		json_object_set_new(o, "master_port", json_integer(jobenv_master_port(row.id)));
		json_decref(s);
	}
	free(spec);
	reply(dest, id, o);
}

void jh_job_logs(struct agent *a, const struct svc_req *q)
{
	conn *dest = q->reply;
	json_int_t id = q->id;
	const json_t *req = q->msg;
	db_job row;
	if (lookup_job(a, dest, id, req, &row) < 0)
		return;
	int only = (int)proto_int(req, "rank", -1);
	db_job_rank *rk = NULL;
	size_t n = 0;
	if (db_job_ranks(a->hd.db, row.id, &rk, &n) < 0) {
		reply_error(dest, id, "internal", "cannot read cluster.db");
		return;
	}
	if (only >= 0) {
		bool have = false;
		for (size_t i = 0; i < n; i++)
			have |= rk[i].rank == only;
		if (!have) {
			free(rk);
			reply_error(dest, id, "not_found", "job %lld has no rank %d (ranks 0-%zu)",
				    (long long)row.id, only, n ? n - 1 : 0);
			return;
		}
	}
	struct watcher *w = w_new(a, W_LOGS, dest, id);
	if (!w || add_tails(a, w, rk, n, only) < 0) {
		free(rk);
		reply_error(dest, id, "internal", "out of memory");
		return;
	}
	free(rk);
	w->job_id = row.id;
	w->follow = json_is_true(json_object_get(req, "follow")) && find_job(a->jobs, row.id);
	w->label = w->ntails > 1;
	json_t *m = stream_msg(w, "started");
	json_object_set_new(m, "job_id", json_integer(row.id));
	json_object_set_new(m, "label", json_boolean(w->label));
	w_send(w, m);
	if (w->follow)
		for (int i = 0; i < w->ntails; i++)
			send_tail(a, w, &w->tails[i]);
	watcher_check(a, w);
	w_sweep(a->jobs);
}

void jh_job_cancel(struct agent *a, const struct svc_req *q)
{
	conn *dest = q->reply;
	json_int_t id = q->id;
	const json_t *req = q->msg;
	db_job row;
	if (lookup_job(a, dest, id, req, &row) < 0)
		return;
	struct hjob *j = find_job(a->jobs, row.id);
	if (!j) {
		json_t *o = job_json(&row);
		json_object_set_new(o, "note", json_string("the job had already ended"));
		reply(dest, id, o);
		return;
	}
	char why[160];
	snprintf(why, sizeof why, "cancelled by %s", req_user(req));
	struct watcher *w = w_new(a, W_CANCEL, dest, id);
	if (w) {
		w->job_id = row.id;
		w->deadline_ms = util_now_ms() + JOBS_GRACE_MS + 5000;
	}
	stop_job(a, j, why, true); /* may end the job and answer at once */
	w_sweep(a->jobs);
}

/* ---- exec ---------------------------------------------------------------------------------- */

/* A node by name, id, agent address, or a fabric address of its report. */
static int resolve_node(struct agent *a, const char *key, db_node *out)
{
	if (db_node_get_by_name(a->hd.db, key, out) == 0 || db_node_get(a->hd.db, key, out) == 0)
		return 0;
	db_node *nodes = NULL;
	size_t n = 0;
	if (db_node_list(a->hd.db, &nodes, &n) < 0)
		return -EIO;
	int r = -ENOENT;
	for (size_t i = 0; i < n && r < 0; i++) {
		char host[128];
		host_of(nodes[i].address, host, sizeof host);
		if (strcmp(host, key) == 0) {
			*out = nodes[i];
			r = 0;
			break;
		}
		db_fabric f;
		if (db_fabric_get(a->hd.db, nodes[i].id, &f) < 0)
			continue;
		json_t *d = json_loads(f.discovery, 0, NULL);
		db_fabric_free(&f);
		size_t pi, ti, ai;
		json_t *p, *t, *ad;
		size_t kl = strlen(key);
		json_array_foreach(json_object_get(d, "ports"), pi, p)
			json_array_foreach(json_object_get(p, "twins"), ti, t)
				json_array_foreach(json_object_get(t, "ipv4"), ai, ad) {
					const char *s = json_string_value(ad);
					if (r < 0 && s && strncmp(s, key, kl) == 0 && s[kl] == '/') {
						*out = nodes[i];
						r = 0;
					}
				}
		json_decref(d);
	}
	free(nodes);
	return r;
}

void jh_exec(struct agent *a, const struct svc_req *q)
{
	conn *dest = q->reply;
	json_int_t id = q->id;
	const json_t *req = q->msg;
	const char *key = proto_str(req, "node");
	json_t *argv = json_object_get(req, "argv");
	if (!key || !*key || !json_is_array(argv) || json_array_size(argv) == 0) {
		reply_error(dest, id, "bad_request", "exec needs a node and a command");
		return;
	}
	if (!argv_strings(dest, id, argv))
		return;
	size_t i;
	json_t *v;
	if (spec_too_large(dest, id, argv, json_object_get(req, "env")))
		return;
	db_node n;
	if (resolve_node(a, key, &n) < 0) {
		reply_error(dest, id, "not_found",
			    "no node '%s' (by name or address) in cluster %s; 'sparkctl node ls' lists them",
			    key, a->id.cluster_name);
		return;
	}
	if (!node_live(a, n.id)) {
		reply_error(dest, id, "unavailable", "node %s is unreachable (its sparkd is not connected)",
			    n.name);
		return;
	}
	json_t *m = proto_msg("exec_start", 0);
	long long xid = ++a->jobs->next_exec;
	json_object_set_new(m, "exec_id", json_integer(xid));
	json_object_set(m, "argv", argv);
	json_object_set_new(m, "shell", json_boolean(json_is_true(json_object_get(req, "shell"))));
	json_object_set_new(m, "user", json_string(req_user(req)));
	/* inside a job (SPARK_JOB_ID of the caller): that node's job environment */
	struct hjob *j = find_job(a->jobs, (long long)proto_int(req, "job_id", 0));
	if (j && (is_root(req) || strcmp(j->row.owner, req_user(req)) == 0)) {
		json_t *nodes = json_object_get(j->spec, "nodes");
		json_array_foreach(nodes, i, v)
			if (strcmp(json_string_value(json_object_get(v, "node_id")) ?: "", n.id) == 0) {
				json_object_set(m, "job", j->spec);
				json_object_set_new(m, "node_rank", json_integer((json_int_t)i));
				json_object_set(m, "socket_addr", json_object_get(v, "socket_addr"));
			}
	}
	struct watcher *w = w_new(a, W_EXEC, dest, id);
	if (!w) {
		json_decref(m);
		reply_error(dest, id, "internal", "out of memory");
		return;
	}
	w->exec_id = xid;
	snprintf(w->exec_node, sizeof w->exec_node, "%s", n.id);
	snprintf(w->exec_node_name, sizeof w->exec_node_name, "%s", n.name);
	if (peers_to_node(a, n.id, m) < 0) {
		w->exec_id = 0;
		reply_error(dest, id, "unavailable", "node %s is unreachable", n.name);
		w_finish(a, w);
		w_sweep(a->jobs);
	}
}

/* ---- requests -------------------------------------------------------------------------------- */

void jh_stream_cancel(struct agent *a, conn *dest, json_int_t id)
{
	for (struct watcher *w = a->jobs->watchers; w; w = w->next)
		if (w->dest == dest && w->id == id)
			w_finish(a, w);
	w_sweep(a->jobs);
}

void jh_conn_gone(struct agent *a, conn *c)
{
	if (!a->jobs)
		return;
	for (struct watcher *w = a->jobs->watchers; w; w = w->next)
		if (w->dest == c) {
			w_finish(a, w);
			w->dead = true;
		}
	w_sweep(a->jobs);
}

/* ---- member frames -------------------------------------------------------------------------- */

static struct watcher *watcher_of_tail(struct jobs *J, long long tail_id, struct wtail **out)
{
	for (struct watcher *w = J->watchers; w; w = w->next)
		for (int i = 0; i < w->ntails; i++)
			if (w->tails[i].tail_id == tail_id) {
				*out = &w->tails[i];
				return w;
			}
	return NULL;
}

void jh_job_data(struct agent *a, const char *node_id, const json_t *msg)
{
	struct wtail *t = NULL;
	struct watcher *w = watcher_of_tail(a->jobs, (long long)proto_int(msg, "tail_id", 0), &t);
	if (!w || w->dead || t->eof)
		return;
	if (strcmp(t->node_id, node_id) != 0) { /* only the node running that rank */
		log_warn("frame_not_owner", "type=job_data tail_id=%lld from=%s owner=%s",
			 t->tail_id, node_id, t->node_id);
		return;
	}
	json_t *data = json_object_get(msg, "data");
	if (json_is_string(data) && json_string_length(data)) {
		json_t *m = stream_msg(w, "output");
		json_object_set_new(m, "rank", json_integer(t->rank));
		json_object_set_new(m, "node", json_string(t->node_name));
		json_object_set(m, "data", data);
		w_send(w, m);
	}
	t->offset = proto_int(msg, "offset", t->offset);
	const char *err = proto_str(msg, "error");
	if (err)
		w_note(w, "%s", err);
	if (json_is_true(json_object_get(msg, "eof"))) {
		t->eof = true;
		watcher_check(a, w);
		w_sweep(a->jobs);
	}
}

void jh_job_started(struct agent *a, const char *node_id, const json_t *msg)
{
	long long id = (long long)proto_int(msg, "job_id", 0);
	struct hjob *j = find_job(a->jobs, id);
	if (!j) { /* ended meanwhile: stop what started */
		json_t *m = proto_msg("job_signal", 0);
		json_object_set_new(m, "job_id", json_integer(id));
		json_object_set_new(m, "signal", json_string("TERM"));
		peers_to_node(a, node_id, m);
		return;
	}
	size_t i;
	json_t *v;
	json_array_foreach(json_object_get(msg, "ranks"), i, v) {
		struct hrank *r = find_hrank(j, (int)proto_int(v, "rank", -1));
		if (!r || strcmp(r->node_id, node_id) != 0 || strcmp(r->state, "pending") != 0)
			continue;
		snprintf(r->state, sizeof r->state, "running");
		r->pid = proto_int(v, "pid", 0);
		r->started_at = proto_int(v, "started_at", util_now());
		save_rank(a, j, r);
	}
	bool all = true;
	for (int k = 0; k < j->nranks; k++)
		all &= strcmp(j->ranks[k].state, "pending") != 0;
	if (all && strcmp(j->row.state, "starting") == 0) {
		snprintf(j->row.state, sizeof j->row.state, "running");
		j->row.started_at = util_now();
		save_job(a, j);
	}
	if (j->stopping)
		signal_nodes(a, j, "TERM");
}

void jh_job_exit(struct agent *a, const char *node_id, const json_t *msg)
{
	struct hjob *j = find_job(a->jobs, (long long)proto_int(msg, "job_id", 0));
	if (!j)
		return;
	struct hrank *r = find_hrank(j, (int)proto_int(msg, "rank", -1));
	if (!r || strcmp(r->node_id, node_id) != 0)
		return;
	rank_exit(a, j, r, (int)proto_int(msg, "exit_code", -1), (int)proto_int(msg, "signal", 0),
		  json_is_true(json_object_get(msg, "lost")), proto_int(msg, "ended_at", 0));
}

void jh_job_sync(struct agent *a, const char *node_id, const json_t *msg)
{
	struct jobs *J = a->jobs;
	json_t *done = json_array();
	json_t *reported = json_object_get(msg, "ranks");
	size_t i;
	json_t *v;
	json_array_foreach(reported, i, v) {
		long long id = (long long)proto_int(v, "job_id", 0);
		int rank = (int)proto_int(v, "rank", -1);
		bool running = strcmp(proto_str(v, "state") ?: "", "running") == 0;
		struct hjob *j = find_job(J, id);
		struct hrank *r = j ? find_hrank(j, rank) : NULL;
		if (!j || !r || strcmp(r->node_id, node_id) != 0) {
			if (running) { /* of a finished job: stop it */
				json_t *m = proto_msg("job_signal", 0);
				json_object_set_new(m, "job_id", json_integer(id));
				json_object_set_new(m, "signal", json_string("TERM"));
				peers_to_node(a, node_id, m);
			} else {
				bool seen = false;
				size_t k;
				json_t *d;
				json_array_foreach(done, k, d)
					seen |= json_integer_value(d) == id;
				if (!seen)
					json_array_append_new(done, json_integer(id));
			}
			continue;
		}
		if (running) {
			if (strcmp(r->state, "pending") == 0) {
				snprintf(r->state, sizeof r->state, "running");
				r->pid = proto_int(v, "pid", 0);
				r->started_at = proto_int(v, "started_at", util_now());
				save_rank(a, j, r);
			}
			if (j->stopping && !rank_final(r)) {
				json_t *m = proto_msg("job_signal", 0);
				json_object_set_new(m, "job_id", json_integer(id));
				json_object_set_new(m, "signal", json_string("TERM"));
				peers_to_node(a, node_id, m);
			}
		} else {
			rank_exit(a, j, r, (int)proto_int(v, "exit_code", -1), (int)proto_int(v, "signal", 0),
				  json_is_true(json_object_get(v, "lost")), proto_int(v, "ended_at", 0));
		}
	}
	/* running ranks on this node that it does not know any more */
	for (struct hjob *j = J->hjobs, *next; j; j = next) {
		next = j->next;
		long long jid = j->row.id;
		for (int k = 0; k < j->nranks; k++) {
			struct hrank *r = &j->ranks[k];
			if (strcmp(r->node_id, node_id) != 0 || strcmp(r->state, "running") != 0)
				continue;
			bool known = false;
			json_array_foreach(reported, i, v)
				known |= proto_int(v, "job_id", 0) == j->row.id &&
					 proto_int(v, "rank", -1) == r->rank;
			if (!known)
				rank_lost(a, j, r, "its node's sparkd restarted without it");
			if (!find_job(J, jid))
				break; /* the job ended and was freed */
		}
	}
	/* tails of watchers that the node lost when it restarted: resume them */
	for (struct watcher *w = J->watchers; w; w = w->next)
		for (int k = 0; k < w->ntails && !w->dead; k++) {
			struct wtail *t = &w->tails[k];
			if (t->detached && strcmp(t->node_id, node_id) == 0 && w->follow) {
				t->eof = false;
				send_tail(a, w, t);
			}
		}
	json_t *m = proto_msg("job_sync_ack", 0);
	json_object_set_new(m, "done", done);
	peers_to_node(a, node_id, m);
	w_sweep(J);
}

static struct watcher *exec_watcher(struct jobs *J, long long xid)
{
	for (struct watcher *w = J->watchers; w; w = w->next)
		if (w->kind == W_EXEC && w->exec_id == xid && !w->dead)
			return w;
	return NULL;
}

/* exec_data / exec_exit: only from the node the exec runs on. */
static struct watcher *exec_of_sender(struct agent *a, const char *node_id, const json_t *msg)
{
	struct watcher *w = exec_watcher(a->jobs, (long long)proto_int(msg, "exec_id", 0));
	if (w && strcmp(w->exec_node, node_id) != 0) {
		log_warn("frame_not_owner", "type=%s exec_id=%lld from=%s owner=%s", proto_type(msg),
			 w->exec_id, node_id, w->exec_node);
		return NULL;
	}
	return w;
}

void jh_exec_data(struct agent *a, const char *node_id, const json_t *msg)
{
	struct watcher *w = exec_of_sender(a, node_id, msg);
	if (!w)
		return;
	json_t *m = stream_msg(w, "output");
	json_object_set(m, "stream", json_object_get(msg, "stream"));
	json_object_set(m, "data", json_object_get(msg, "data"));
	w_send(w, m);
}

void jh_exec_exit(struct agent *a, const char *node_id, const json_t *msg)
{
	struct watcher *w = exec_of_sender(a, node_id, msg);
	if (!w)
		return;
	w->exec_id = 0; /* nothing left to stop */
	const char *err = proto_str(msg, "error");
	if (err)
		w_note(w, "%s", err);
	w_result(a, w, json_pack("{s:I, s:I, s:s}", "exit_code", proto_int(msg, "exit_code", 1),
				 "signal", proto_int(msg, "signal", 0), "node", w->exec_node_name));
	w_sweep(a->jobs);
}

void jh_node_session_gone(struct agent *a, const char *node_id)
{
	struct jobs *J = a->jobs;
	if (!J)
		return;
	for (struct watcher *w = J->watchers; w; w = w->next) {
		if (w->dead)
			continue;
		if (w->kind == W_EXEC && w->exec_id && strcmp(w->exec_node, node_id) == 0) {
			w->exec_id = 0;
			conn_send_new(w->dest, proto_error(w->id, "node_lost", "lost the connection to the node "
									   "running the command"));
			w_finish(a, w);
			continue;
		}
		for (int i = 0; i < w->ntails; i++) {
			struct wtail *t = &w->tails[i];
			if (strcmp(t->node_id, node_id) != 0 || t->eof)
				continue;
			t->detached = true;
			t->eof = true; /* resumed from its offset when the node syncs again */
			w_note(w, "lost the connection to %s; its output resumes when it is back", t->node_name);
		}
		watcher_check(a, w);
	}
	w_sweep(J);
}

/* ---- timer: unreachable nodes, ranks that never started, cancel deadlines ------------------------- */

static void on_head_tick(uv_timer_t *tm)
{
	struct jobs *J = tm->data;
	struct agent *a = J->a;
	if (a->id.role != ROLE_HEAD || !a->hd.db)
		return;
	uint64_t now = util_now_ms();
	for (struct hjob *j = J->hjobs; j; j = j->next)
		if (j->kill_at_ms && !j->killed && now >= j->kill_at_ms) {
			j->killed = true; /* job_stop's grace is over */
			log_info("job_kill", "job=%lld", (long long)j->row.id);
			signal_nodes(a, j, "KILL");
		}
	for (struct hjob *j = J->hjobs, *next; j; j = next) {
		next = j->next;
		long long id = j->row.id;
		for (int k = 0; find_job(J, id) && k < j->nranks; k++) { /* j is freed once it ends */
			struct hrank *r = &j->ranks[k];
			if (rank_final(r))
				continue;
			db_node n;
			if (db_node_get(a->hd.db, r->node_id, &n) < 0) {
				rank_lost(a, j, r, "its node was removed from the cluster");
			} else if (strcmp(n.state, "unreachable") == 0 || strcmp(n.state, "down") == 0) {
				char why[128];
				snprintf(why, sizeof why, "node %s became %s", n.name, n.state);
				rank_lost(a, j, r, why);
			} else if (strcmp(r->state, "pending") == 0 &&
				   now - j->pending_since_ms > JOBS_START_TIMEOUT_MS) {
				rank_lost(a, j, r, "it never started (no answer from its node)");
			}
		}
	}
	for (struct watcher *w = J->watchers; w; w = w->next)
		if (!w->dead && w->kind == W_CANCEL && now >= w->deadline_ms) {
			json_t *o = job_result(a, w->job_id);
			json_object_set_new(o, "note", json_string("the ranks are still stopping"));
			w_result(a, w, o);
		}
	w_sweep(J);
}

int jh_start(struct agent *a)
{
	struct jobs *J = a->jobs;
	uv_timer_start(&J->head_timer, on_head_tick, 500, 500);
	if (a->id.role != ROLE_HEAD || !a->hd.db || J->head_loaded)
		return 0;
	J->head_loaded = true;
	db_job *js = NULL;
	size_t n = 0;
	if (db_job_list(a->hd.db, NULL, true, 0, &js, &n) < 0)
		return -EIO;
	for (size_t i = 0; i < n; i++) {
		db_job_rank *rk = NULL;
		size_t nr = 0;
		char *spec = NULL;
		if (db_job_ranks(a->hd.db, js[i].id, &rk, &nr) == 0 && db_job_spec(a->hd.db, js[i].id, &spec) == 0) {
			json_t *s = json_loads(spec, 0, NULL);
			if (s) {
				spec_complete(s, js[i].id);
				hjob_add(a, &js[i], rk, nr, s);
				log_info("job_resumed", "job=%lld state=%s", (long long)js[i].id, js[i].state);
			}
			json_decref(s);
		}
		free(spec);
		free(rk);
	}
	free(js);
	/* the head's own node reports its ranks like any member */
	jn_head_up(a);
	return 0;
}

void jh_stop(struct agent *a)
{
	struct jobs *J = a->jobs;
	for (struct watcher *w = J->watchers; w; w = w->next)
		if (!w->dead) {
			conn_send_new(w->dest, proto_error(w->id, "shutdown",
							   "the head's sparkd is stopping; running jobs keep "
							   "running"));
			w->dead = true;
		}
	for (struct hjob *j = J->hjobs; j; j = j->next)
		if (j->timer)
			uv_timer_stop(j->timer);
}

void jh_free(struct agent *a)
{
	struct jobs *J = a->jobs;
	for (struct watcher *w = J->watchers; w; w = w->next)
		w->dead = true;
	w_sweep(J);
	while (J->hjobs) {
		struct hjob *j = J->hjobs;
		J->hjobs = j->next;
		if (j->timer) { /* closed by main's final walk */
			free(j->timer);
			j->timer = NULL;
		}
		hjob_free(j);
	}
}

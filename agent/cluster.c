/* cluster: the cluster service's table and the requests every node serves
 * itself (version, debug_memory, init, join, leave). See cluster.h. */
#include "cluster.h"

#include "cfg.h"
#include "log.h"
#include "model.h"
#include "proto.h"
#include "spark_config.h"
#include "util.h"

#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void r_version(struct agent *a, const struct svc_req *q)
{
	svc_reply(q, json_pack("{s:s, s:s, s:s, s:s, s:I}", "sparkd_version", SPARK_VERSION, "role",
			       role_name(a->id.role), "node", a->id.node_name, "cluster",
			       a->id.cluster_name, "uptime_s", (json_int_t)(util_now() - a->started_at)));
}

/* Where this daemon's memory is (a debugging aid, not a stable interface):
 * resident set from /proc/self/status, glibc heap (mallinfo2) and, on the
 * head, SQLite's share of it. bench/cluster/run.py --mem prints it. */
static void r_debug_memory(struct agent *a, const struct svc_req *q)
{
	json_t *d = json_object();
	FILE *f = fopen("/proc/self/status", "re");
	char line[256];
	while (f && fgets(line, sizeof line, f)) {
		static const char *const keys[] = {"VmRSS", "RssAnon", "RssFile", "VmHWM"};
		for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
			size_t n = strlen(keys[i]);
			if (strncmp(line, keys[i], n) == 0 && line[n] == ':') {
				char key[32];
				snprintf(key, sizeof key, "%s_kib", keys[i]);
				json_object_set_new(d, key, json_integer(strtoll(line + n + 1, NULL, 10)));
			}
		}
	}
	if (f)
		fclose(f);
	struct mallinfo2 mi = mallinfo2();
	json_object_set_new(d, "heap", json_pack("{s:I, s:I, s:I, s:I, s:I}",
						 "arena", (json_int_t)mi.arena,
						 "mmapped", (json_int_t)mi.hblkhd,
						 "in_use", (json_int_t)mi.uordblks,
						 "free", (json_int_t)mi.fordblks,
						 "top_free", (json_int_t)mi.keepcost));
	db_mem m;
	if (a->hd.db && db_memory(a->hd.db, &m) == 0)
		json_object_set_new(d, "sqlite", json_pack("{s:I, s:I, s:I, s:I, s:I}",
							   "cache", (json_int_t)m.cache,
							   "schema", (json_int_t)m.schema,
							   "stmt", (json_int_t)m.stmt,
							   "lookaside_slots_hiwtr",
							   (json_int_t)m.lookaside_slots,
							   "total", (json_int_t)m.total));
	size_t n = 0;
	for (struct session *s = a->hd.sessions; s; s = s->next)
		n++;
	json_object_set_new(d, "sessions", json_integer((json_int_t)n));
	svc_reply(q, d);
}

static void r_init(struct agent *a, const struct svc_req *q)
{
	if (a->id.role == ROLE_HEAD) { /* a head cannot leave (r_leave): say what it can do */
		svc_error(q, "already_in_cluster",
			  "this node is already the head of cluster %s; add nodes with 'sparkctl "
			  "token create', or to start a new cluster stop sparkd and wipe %s",
			  a->id.cluster_name, a->opts.state_dir);
		return;
	}
	if (a->id.role != ROLE_NONE && !a->id.removed) {
		svc_error(q, "already_in_cluster",
			  "this node is already a worker of cluster %s; run 'sparkctl leave' first",
			  a->id.cluster_name);
		return;
	}
	head_init(a, q);
}

static void r_join(struct agent *a, const struct svc_req *q)
{
	if (a->id.role != ROLE_NONE && !a->id.removed) {
		svc_error(q, "already_in_cluster",
			  "this node is already %s of cluster %s; run 'sparkctl leave' first",
			  a->id.role == ROLE_HEAD ? "the head" : "a worker", a->id.cluster_name);
		return;
	}
	worker_handle_join(a, q->reply, q->msg);
}

static void r_leave(struct agent *a, const struct svc_req *q)
{
	if (a->id.role == ROLE_HEAD) {
		svc_error(q, "is_head",
			  "this node is the head of cluster %s; the head cannot leave its own "
			  "cluster (remove the workers, then stop sparkd and wipe %s)",
			  a->id.cluster_name, a->opts.state_dir);
		return;
	}
	if (a->id.role == ROLE_NONE) {
		svc_error(q, "not_in_cluster",
			  "this node is not in a cluster; run 'sparkctl init' to start one or "
			  "'sparkctl join HEAD --token TOKEN' to join one");
		return;
	}
	worker_handle_leave(a, q->reply, q->msg);
}

/* Who may ask what: job users (the socket's group) read the cluster; admins
 * (root, security.admin_group) change membership and tokens (issue 14). */
static const struct svc_request requests[] = {
	{"version", r_version, RIGHT_USER, SVC_LOCAL},
	{"debug_memory", r_debug_memory, RIGHT_USER, SVC_LOCAL},
	{"init", r_init, RIGHT_ADMIN, SVC_LOCAL, 0, {{"name", 'S'}, {"ttl_s", 'I'}, {"advertise", 'S'}}},
	{"join", r_join, RIGHT_ADMIN, SVC_LOCAL, 0,
	 {{"head", 's'}, {"token", 's'}, {"name", 'S'}, {"timeout_s", 'I'}}},
	{"leave", r_leave, RIGHT_ADMIN, SVC_LOCAL},
	{"status", head_status, RIGHT_USER, SVC_HEAD, 0, {{NULL, 0}}, cluster_status_answer},
	{"node_ls", head_node_ls, RIGHT_USER, SVC_HEAD},
	{"node_show", head_node_show, RIGHT_USER, SVC_HEAD, 0, {{"node", 's'}}},
	{"node_drain", head_node_drain, RIGHT_ADMIN, SVC_HEAD, 0, {{"node", 's'}}},
	{"node_undrain", head_node_undrain, RIGHT_ADMIN, SVC_HEAD, 0, {{"node", 's'}}},
	{"node_rm", head_node_rm, RIGHT_ADMIN, SVC_HEAD, 0, {{"node", 's'}}},
	{"token_create", head_token_create_req, RIGHT_ADMIN, SVC_HEAD, 0,
	 {{"ttl_s", 'I'}, {"uses", 'I'}, {"description", 'S'}}},
	{"token_ls", head_token_ls, RIGHT_ADMIN, SVC_HEAD},
	{"token_revoke", head_token_revoke, RIGHT_ADMIN, SVC_HEAD, 0, {{"token_id", 's'}}},
	{NULL},
};

/* The role this node has: the head opens cluster.db and listens; a worker
 * listens (to point joiners at the head) and connects to it. */
static int cluster_start(struct agent *a, char *err, size_t len)
{
	if (a->id.role == ROLE_HEAD)
		return head_start(a, err, len);
	if (a->id.role == ROLE_WORKER && !a->id.removed) {
		int r;
		if ((r = agent_tls_setup(a, err, len)) < 0 ||
		    (r = agent_listen(a, err, len)) < 0)
			return r;
		return worker_start(a);
	}
	return 0;
}

static void cluster_stop(struct agent *a)
{
	worker_stop(a);
	head_stop(a);
}

static void cluster_event(struct agent *a, enum svc_event ev, const struct svc_event_arg *arg)
{
	if (ev == SVC_EV_CONN_GONE)
		worker_cli_gone(a, arg->c);
}

/* A member's session frames (they take the session: sessions.c), and the
 * head's revocation list to its workers. */
static const struct svc_frame frames[] = {
	{"hello", NULL, FRAME_TO_HEAD, {{"address", 'S'}, {"version", 'S'}, {"mem", 'O'}}, head_hello},
	{"heartbeat", NULL, FRAME_TO_HEAD, {{"mem", 'O'}, {NULL, 0}}, head_heartbeat, SVC_FRAME_QUIET},
	{"leave", NULL, FRAME_TO_HEAD, {{NULL, 0}}, head_leave},
	{"crl", worker_on_crl, FRAME_TO_NODE, {{"crl", 's'}, {NULL, 0}}},
	{NULL},
};

/* ---- memory (issue 19) -------------------------------------------------------- */

/* A Spark's MemTotal is about what CUDA sees (MODEL_CUDA_GIB); the planner
 * gives an engine MODEL_USABLE_GIB of it (docs/planner.md). */
#define MEM_MAX_BYTES ((int64_t)1 << 50) /* 1 PiB: anything above is not a machine's */

int cluster_mem_read(struct agent *a, struct cluster_mem *m)
{
	FILE *f = fopen("/proc/meminfo", "re");
	if (!f)
		return -errno;
	long long total = -1, avail = -1;
	char line[128];
	while (fgets(line, sizeof line, f)) {
		long long v;
		if (sscanf(line, "MemTotal: %lld kB", &v) == 1)
			total = v;
		else if (sscanf(line, "MemAvailable: %lld kB", &v) == 1)
			avail = v;
	}
	fclose(f);
	if (total <= 0 || avail < 0 || total > MEM_MAX_BYTES / 1024)
		return -EIO;
	m->total = (int64_t)total * 1024;
	m->available = (int64_t)(avail < total ? avail : total) * 1024;
	m->budget = a->mem_budget > 0 ? a->mem_budget
				      : (int64_t)((double)m->total * (MODEL_USABLE_GIB / MODEL_CUDA_GIB));
	return 0;
}

json_t *cluster_mem_json(const struct cluster_mem *m)
{
	return json_pack("{s:I, s:I, s:I}", "total", (json_int_t)m->total, "available",
			 (json_int_t)m->available, "budget", (json_int_t)m->budget);
}

int cluster_mem_parse(const json_t *o, struct cluster_mem *m)
{
	json_t *t = json_object_get(o, "total"), *v = json_object_get(o, "available"),
	       *b = json_object_get(o, "budget");
	if (!json_is_integer(t) || !json_is_integer(v) || !json_is_integer(b))
		return -EINVAL;
	m->total = json_integer_value(t);
	m->available = json_integer_value(v);
	m->budget = json_integer_value(b);
	if (m->total <= 0 || m->total > MEM_MAX_BYTES || m->available < 0 ||
	    m->available > m->total || m->budget <= 0 || m->budget > MEM_MAX_BYTES)
		return -EINVAL;
	return 0;
}

/* serve.memory_budget_gib: what services may use on this node (a number > 0). */
static int mem_budget_config(struct agent *a, char *err, size_t len)
{
	const char *s;
	char e2[160];
	int r = a->cfg ? cfg_get_str(a->cfg, "serve.memory_budget_gib", &s, e2, sizeof e2) : -ENOENT;
	if (r == -ENOENT)
		return 0;
	char *end = NULL;
	errno = 0;
	double gib = r == 0 ? strtod(s, &end) : 0;
	if (r < 0 || errno || end == s || *end || !(gib > 0) ||
	    gib * 1024.0 * 1024.0 * 1024.0 > (double)MEM_MAX_BYTES) {
		snprintf(err, len, "%s: serve.memory_budget_gib must be a number of GiB above 0 (like "
			 "96 or 40.5)", a->opts.config[0] ? a->opts.config : "config");
		return -EINVAL;
	}
	a->mem_budget = (int64_t)(gib * 1024.0 * 1024.0 * 1024.0);
	return 0;
}

static int cluster_init(struct agent *a, char *err, size_t len)
{
	head_hooks(a);
	return mem_budget_config(a, err, len);
}

const struct service cluster_service = {
	.name = "cluster",
	.requests = requests,
	.frames = frames,
	.init = cluster_init,
	.start = cluster_start,
	.stop = cluster_stop,
	.on_event = cluster_event,
};

/* cluster: the cluster service's table and the requests every node serves
 * itself (version, debug_memory, init, join, leave). See cluster.h. */
#include "cluster.h"

#include "log.h"
#include "proto.h"
#include "spark_config.h"
#include "util.h"

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
	{"hello", NULL, FRAME_TO_HEAD, {{"address", 'S'}, {"version", 'S'}}, head_hello},
	{"heartbeat", NULL, FRAME_TO_HEAD, {{NULL, 0}}, head_heartbeat, SVC_FRAME_QUIET},
	{"leave", NULL, FRAME_TO_HEAD, {{NULL, 0}}, head_leave},
	{"crl", worker_on_crl, FRAME_TO_NODE, {{"crl", 's'}, {NULL, 0}}},
	{NULL},
};

static int cluster_init(struct agent *a, char *err, size_t len)
{
	(void)err;
	(void)len;
	head_hooks(a);
	return 0;
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

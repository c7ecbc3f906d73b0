/* control: the Unix control socket sparkctl talks to. Peers are authorised by
 * SO_PEERCRED: root, the daemon's own user, or a member of the socket's group.
 * Requests are dispatched through a table; cluster requests are served by the
 * head (here, or forwarded to it by a worker). */
#include "agent.h"

#include "log.h"
#include "proto.h"
#include "spark_config.h"
#include "util.h"

#include <errno.h>
#include <grp.h>
#include <malloc.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

void control_send_result(conn *c, json_int_t id, json_t *data)
{
	if (conn_send_new(c, proto_result(id, data)) == -EMSGSIZE)
		conn_send_new(c, proto_error(id, "too_large",
					     "the answer is larger than a frame may be (1 MiB); ask for "
					     "less (e.g. fewer lines, one node)"));
}

void control_reply(conn *c, const json_t *req, json_t *data)
{
	control_send_result(c, proto_id(req), data);
}

void control_error(conn *c, const json_t *req, const char *code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	conn_send_new(c, proto_error(req ? proto_id(req) : 0, code, msg));
}

static void h_version(struct agent *a, conn *c, const json_t *req)
{
	json_t *d = json_pack("{s:s, s:s, s:s, s:s, s:I}", "sparkd_version", SPARK_VERSION,
			      "role", role_name(a->id.role), "node", a->id.node_name,
			      "cluster", a->id.cluster_name, "uptime_s",
			      (json_int_t)(util_now() - a->started_at));
	control_reply(c, req, d);
}

/* Where this daemon's memory is (a debugging aid, not a stable interface):
 * resident set from /proc/self/status, glibc heap (mallinfo2) and, on the
 * head, SQLite's share of it. bench/cluster/run.py --mem prints it. */
static void h_debug_memory(struct agent *a, conn *c, const json_t *req)
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
	if (a->db && db_memory(a->db, &m) == 0)
		json_object_set_new(d, "sqlite", json_pack("{s:I, s:I, s:I, s:I, s:I}",
							   "cache", (json_int_t)m.cache,
							   "schema", (json_int_t)m.schema,
							   "stmt", (json_int_t)m.stmt,
							   "lookaside_slots_hiwtr",
							   (json_int_t)m.lookaside_slots,
							   "total", (json_int_t)m.total));
	size_t n = 0;
	for (struct session *s = a->sessions; s; s = s->next)
		n++;
	json_object_set_new(d, "sessions", json_integer((json_int_t)n));
	control_reply(c, req, d);
}

static void not_in_cluster(conn *c, const json_t *req)
{
	control_error(c, req, "not_in_cluster",
		      "this node is not in a cluster; run 'sparkctl init' to start one or "
		      "'sparkctl join HEAD --token TOKEN' to join one");
}

static void h_cluster(struct agent *a, conn *c, const json_t *req)
{
	if (a->id.role == ROLE_HEAD)
		head_handle_request(a, c, req, a->id.node_id);
	else if (a->id.role == ROLE_WORKER && !a->id.removed)
		worker_forward(a, c, req);
	else if (a->id.removed)
		control_error(c, req, "removed",
			      "this node was removed from cluster %s; join again with a new token "
			      "('sparkctl join HEAD --token TOKEN')", a->id.cluster_name);
	else
		not_in_cluster(c, req);
}

static void h_init(struct agent *a, conn *c, const json_t *req)
{
	if (a->id.role == ROLE_HEAD) { /* a head cannot leave (h_leave): say what it can do */
		control_error(c, req, "already_in_cluster",
			      "this node is already the head of cluster %s; add nodes with 'sparkctl "
			      "token create', or to start a new cluster stop sparkd and wipe %s",
			      a->id.cluster_name, a->opts.state_dir);
		return;
	}
	if (a->id.role != ROLE_NONE && !a->id.removed) {
		control_error(c, req, "already_in_cluster",
			      "this node is already a worker of cluster %s; run 'sparkctl leave' first",
			      a->id.cluster_name);
		return;
	}
	head_handle_init(a, c, req);
}

static void h_join(struct agent *a, conn *c, const json_t *req)
{
	if (a->id.role != ROLE_NONE && !a->id.removed) {
		control_error(c, req, "already_in_cluster",
			      "this node is already %s of cluster %s; run 'sparkctl leave' first",
			      a->id.role == ROLE_HEAD ? "the head" : "a worker", a->id.cluster_name);
		return;
	}
	worker_handle_join(a, c, req);
}

static void h_leave(struct agent *a, conn *c, const json_t *req)
{
	if (a->id.role == ROLE_HEAD) {
		control_error(c, req, "is_head",
			      "this node is the head of cluster %s; the head cannot leave its own "
			      "cluster (remove the workers, then stop sparkd and wipe %s)",
			      a->id.cluster_name, a->opts.state_dir);
		return;
	}
	if (a->id.role == ROLE_NONE) {
		not_in_cluster(c, req);
		return;
	}
	worker_handle_leave(a, c, req);
}

static void h_jobs(struct agent *a, conn *c, const json_t *req)
{
	jobs_control(a, c, req); /* groups, jobs, exec (jobs_ctl.c) */
}

/* Who may ask what (issue 14): job users (the socket's group) read the
 * cluster and run, watch and cancel their own jobs, and exec as themselves;
 * admins (root, security.admin_group) also change membership, tokens, groups
 * and addresses. The head checks the same table for forwarded requests. */
struct ctl_handler {
	const char *type;
	void (*fn)(struct agent *a, conn *c, const json_t *req);
	enum agent_right right;
	struct proto_field fields[5]; /* checked before fn: never a default for a bad one */
};

static const struct ctl_handler handlers[] = {
	{"version", h_version, RIGHT_USER},
	{"debug_memory", h_debug_memory, RIGHT_USER},
	{"init", h_init, RIGHT_ADMIN, {{"name", 'S'}, {"ttl_s", 'I'}, {"advertise", 'S'}}},
	{"join", h_join, RIGHT_ADMIN,
	 {{"head", 's'}, {"token", 's'}, {"name", 'S'}, {"timeout_s", 'I'}}},
	{"leave", h_leave, RIGHT_ADMIN},
	{"status", h_cluster, RIGHT_USER},
	{"node_ls", h_cluster, RIGHT_USER},
	{"node_show", h_cluster, RIGHT_USER, {{"node", 's'}}},
	{"node_drain", h_cluster, RIGHT_ADMIN, {{"node", 's'}}},
	{"node_undrain", h_cluster, RIGHT_ADMIN, {{"node", 's'}}},
	{"node_rm", h_cluster, RIGHT_ADMIN, {{"node", 's'}}},
	{"token_create", h_cluster, RIGHT_ADMIN,
	 {{"ttl_s", 'I'}, {"uses", 'I'}, {"description", 'S'}}},
	{"token_ls", h_cluster, RIGHT_ADMIN},
	{"token_revoke", h_cluster, RIGHT_ADMIN, {{"token_id", 's'}}},
	{"topo_show", h_cluster, RIGHT_USER},
	{"topo_validate", h_cluster, RIGHT_USER},
	{"topo_addresses", h_cluster, RIGHT_ADMIN},
	{"group_create", h_jobs, RIGHT_ADMIN},
	{"group_ls", h_jobs, RIGHT_USER},
	{"group_show", h_jobs, RIGHT_USER},
	{"group_rm", h_jobs, RIGHT_ADMIN},
	{"job_run", h_jobs, RIGHT_USER},
	{"job_ls", h_jobs, RIGHT_USER},
	{"job_show", h_jobs, RIGHT_USER},
	{"job_logs", h_jobs, RIGHT_USER},
	{"job_cancel", h_jobs, RIGHT_USER},
	{"exec", h_jobs, RIGHT_USER},
	{"job_env", jobs_env_request, RIGHT_USER,
	 {{"nodes", 'a'}, {"job_id", 'I'}, {"rank", 'I'}, {"local_rank", 'I'}, {"group", 'S'}}},
	{NULL, NULL, RIGHT_ADMIN, {{NULL, 0}}},
};

static const struct ctl_handler *find_handler(const char *type)
{
	for (const struct ctl_handler *h = handlers; h->type; h++)
		if (strcmp(h->type, type) == 0)
			return h;
	return NULL;
}

/* {"uid":N,"user":NAME,"groups":[NAME...]} of a control socket peer. */
static json_t *caller_of(conn *c)
{
	struct ucred cr;
	socklen_t sl = sizeof cr;
	if (getsockopt(conn_fd(c), SOL_SOCKET, SO_PEERCRED, &cr, &sl) < 0)
		return NULL;
	json_t *o = json_pack("{s:I}", "uid", (json_int_t)cr.uid);
	json_t *groups = json_array();
	struct passwd *pw = getpwuid(cr.uid);
	if (pw) {
		json_object_set_new(o, "user", json_string(pw->pw_name));
		gid_t gids[256];
		int ng = 256;
		if (getgrouplist(pw->pw_name, pw->pw_gid, gids, &ng) < 0)
			ng = 256; /* more than fit: the first 256 */
		for (int i = 0; i < ng; i++) {
			struct group *gr = getgrgid(gids[i]);
			if (gr)
				json_array_append_new(groups, json_string(gr->gr_name));
		}
	}
	json_object_set_new(o, "groups", groups);
	return o;
}

bool agent_caller_is_admin(struct agent *a, const json_t *req)
{
	json_t *caller = json_object_get(req, "caller");
	if (!json_is_object(caller))
		return false;
	if (proto_int(caller, "uid", -1) == 0)
		return true;
	size_t i;
	json_t *g;
	json_array_foreach(json_object_get(caller, "groups"), i, g)
		if (a->admin_group[0] && json_is_string(g) &&
		    strcmp(json_string_value(g), a->admin_group) == 0)
			return true;
	return false;
}

int control_check_fields(const json_t *req, char *why, size_t len)
{
	const struct ctl_handler *h = find_handler(proto_type(req));
	char err[128];
	if (!h || proto_check(req, h->fields, err, sizeof err) == 0)
		return 0;
	snprintf(why, len, "%s: %s", proto_type(req), err);
	return -EBADMSG;
}

bool agent_caller_may(struct agent *a, const json_t *req, char *why, size_t len)
{
	const struct ctl_handler *h = find_handler(proto_type(req));
	if (!h || h->right == RIGHT_USER || agent_caller_is_admin(a, req))
		return true;
	json_t *caller = json_object_get(req, "caller");
	const char *user = proto_str(caller, "user");
	char who[96];
	if (user)
		snprintf(who, sizeof who, "user %s", user);
	else
		snprintf(who, sizeof who, "uid %lld", (long long)proto_int(caller, "uid", -1));
	snprintf(why, len,
		 "\"%s\" needs an admin of the cluster (root%s%s), and %s is not one; run it as "
		 "root%s", proto_type(req), a->admin_group[0] ? " or group " : "", a->admin_group, who,
		 a->admin_group[0] ? " or add the user to that group" : "");
	return false;
}

/* The daemon's agent, for connections whose data is NULL (refused). */
static struct agent *ctl_agent;

static void on_ctl_frame(conn *c, json_t *msg)
{
	struct agent *a = conn_data(c);
	if (!a) { /* refused peer: its request is read (so closing sends no RST) and dropped */
		json_decref(msg);
		conn_close(c, 0);
		return;
	}
	const char *type = proto_type(msg);
	const struct ctl_handler *h = find_handler(type);
	if (!h) {
		control_error(c, msg, "unknown_type",
			      "unknown request type \"%s\"; is sparkctl newer than sparkd %s?",
			      type, SPARK_VERSION);
		json_decref(msg);
		conn_close(c, 0);
		return;
	}
	/* Who asks is what the kernel says, never what the request says; the
	 * head reads it from forwarded requests. */
	json_t *caller = caller_of(c);
	if (!caller) {
		control_error(c, msg, "forbidden", "cannot read the caller's credentials");
		json_decref(msg);
		return;
	}
	json_object_set_new(msg, "caller", caller);
	/* Requests served here are checked here (fields, then rights); the head
	 * checks the cluster and job requests it serves, forwarded or not. */
	char why[512];
	if (h->fn == h_cluster || h->fn == h_jobs)
		h->fn(a, c, msg);
	else if (control_check_fields(msg, why, sizeof why) < 0)
		control_error(c, msg, "bad_request", "%s", why);
	else if (agent_caller_may(a, msg, why, sizeof why))
		h->fn(a, c, msg);
	else
		control_error(c, msg, "forbidden", "%s", why);
	json_decref(msg);
}

static void on_ctl_close(conn *c, int err)
{
	struct agent *a = conn_data(c);
	(void)err;
	if (ctl_agent && ctl_agent->ctl_conns)
		ctl_agent->ctl_conns--;
	if (a) {
		worker_cli_gone(a, c);
		peers_cli_gone(a, c);
		jobs_cli_gone(a, c);
		topoval_conn_gone(a, c);
	}
}

static void on_ctl_ready(conn *c, int status)
{
	(void)c;
	(void)status;
}

static const struct conn_cbs ctl_cbs = {
	.on_ready = on_ctl_ready,
	.on_frame = on_ctl_frame,
	.on_close = on_ctl_close,
};

/* May this peer use the control socket? */
static bool peer_allowed(struct agent *a, int fd, char *why, size_t len)
{
	struct ucred cr;
	socklen_t sl = sizeof cr;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &sl) < 0) {
		snprintf(why, len, "cannot read peer credentials");
		return false;
	}
	if (cr.uid == 0 || cr.uid == geteuid())
		return true;
	struct stat st;
	if (stat(a->opts.socket, &st) == 0) {
		if (cr.gid == st.st_gid)
			return true;
		struct passwd *pw = getpwuid(cr.uid);
		if (pw) {
			gid_t groups[256];
			int ng = 256;
			if (getgrouplist(pw->pw_name, pw->pw_gid, groups, &ng) >= 0)
				for (int i = 0; i < ng; i++)
					if (groups[i] == st.st_gid)
						return true;
		}
		struct group *gr = getgrgid(st.st_gid);
		snprintf(why, len,
			 "permission denied: uid %u is neither root nor in group %s of %s; "
			 "run as root or add the user to that group",
			 (unsigned)cr.uid, gr ? gr->gr_name : "?", a->opts.socket);
		return false;
	}
	snprintf(why, len, "permission denied");
	return false;
}

static void on_ctl_connection(uv_stream_t *server, int status)
{
	struct agent *a = server->data;
	ctl_agent = a;
	if (status < 0)
		return;
	conn *c = conn_accept(server, NULL, &ctl_cbs, a);
	if (!c)
		return;
	conn_set_max_frame(c, AGENT_CTL_FRAME);
	/* Every connection counts, refused ones too (they are closed at their
	 * first frame, so that the answer is read before the close). */
	if (++a->ctl_conns > 2 * AGENT_CTL_MAX) {
		conn_close(c, -EBUSY); /* beyond any reason: no answer */
		return;
	}
	char why[256];
	if (!peer_allowed(a, conn_fd(c), why, sizeof why)) {
		log_warn("control_refused", "reason=%s", log_q(why));
		conn_set_data(c, NULL);
		conn_send_new(c, proto_error(0, "forbidden", why));
		return;
	}
	if (a->ctl_conns > AGENT_CTL_MAX) {
		log_warn("control_busy", "connections=%u", a->ctl_conns);
		conn_set_data(c, NULL);
		conn_send_new(c, proto_error(0, "busy",
					     "sparkd has too many control connections open; try again"));
		return;
	}
}

/* What answers on the socket file at path: 1 a listener accepted (or its
 * backlog is full), 0 nobody (a stale file: ECONNREFUSED), or a negative errno. */
static int ctl_sock_answers(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof sa.sun_path)
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int r = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 ? 1 : -errno;
	close(fd);
	if (r == -EAGAIN)
		return 1;
	return r == -ECONNREFUSED ? 0 : r;
}

static const char *file_kind(mode_t m)
{
	return S_ISREG(m) ? "a regular file" : S_ISDIR(m) ? "a directory" : S_ISLNK(m) ? "a symbolic link"
	       : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) || S_ISBLK(m) ? "a device" : "something else";
}

/* Make room for the socket at path: nothing there, or a stale socket file we
 * remove. A daemon that answers, or anything that is not a socket, is refused
 * and left alone. */
static int ctl_clear_path(const char *path, char *err, size_t errlen)
{
	struct stat st;
	if (lstat(path, &st) < 0) {
		if (errno == ENOENT)
			return 0;
		int e = -errno;
		snprintf(err, errlen, "cannot check control socket %s: %s", path, strerror(-e));
		return e;
	}
	if (!S_ISSOCK(st.st_mode)) {
		snprintf(err, errlen,
			 "%s is %s, not a socket; sparkd will not remove it: pass another --socket "
			 "PATH, or remove it yourself if it is not needed", path, file_kind(st.st_mode));
		return -EEXIST;
	}
	int r = ctl_sock_answers(path);
	if (r == 1) {
		snprintf(err, errlen,
			 "another daemon answers on control socket %s; stop it first or pass another "
			 "--socket PATH", path);
		return -EADDRINUSE;
	}
	if (r < 0) {
		snprintf(err, errlen, "cannot check control socket %s: %s; remove it or pass another "
			 "--socket PATH", path, strerror(-r));
		return r;
	}
	if (unlink(path) < 0 && errno != ENOENT) {
		int e = -errno;
		snprintf(err, errlen, "cannot remove the stale control socket %s: %s", path,
			 strerror(-e));
		return e;
	}
	log_info("control_stale_socket", "path=%s action=%s", log_q(path), log_q("replaced"));
	return 0;
}

int control_start(struct agent *a, char *err, size_t errlen)
{
	char dir[256];
	util_strlcpy(dir, a->opts.socket, sizeof dir);
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = '\0';
		util_mkdirs(dir, 0755);
	}
	int r = ctl_clear_path(a->opts.socket, err, errlen);
	if (r < 0)
		return r;
	/* Bound here rather than by uv_pipe_bind: libuv unlinks the path of a pipe
	 * it bound when the handle closes, whoever's file it is by then. */
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(a->opts.socket) >= sizeof sa.sun_path) {
		snprintf(err, errlen, "control socket path %s is too long (at most %zu bytes)",
			 a->opts.socket, sizeof sa.sun_path - 1);
		return -ENAMETOOLONG;
	}
	memcpy(sa.sun_path, a->opts.socket, strlen(a->opts.socket) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		r = -errno;
		snprintf(err, errlen, "cannot make the control socket: %s", strerror(-r));
		return r;
	}
	mode_t old = umask(0117);
	r = bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 ? -errno : 0;
	umask(old);
	bool bound = r == 0;
	uv_pipe_init(a->loop, &a->ctl, 0);
	a->ctl.data = a;
	if (r == 0)
		r = uv_pipe_open(&a->ctl, fd);
	if (r < 0)
		close(fd); /* not the handle's yet */
	struct stat st;
	if (r == 0)
		r = lstat(a->opts.socket, &st) < 0 ? -errno : 0;
	if (r == 0) {
		a->ctl_dev = st.st_dev;
		a->ctl_ino = st.st_ino;
		r = chmod(a->opts.socket, 0660) < 0 ? -errno : 0;
	}
	if (r == 0)
		r = uv_listen((uv_stream_t *)&a->ctl, 64, on_ctl_connection);
	if (r < 0) {
		snprintf(err, errlen, "cannot listen on control socket %s: %s", a->opts.socket,
			 strerror(-r));
		uv_close((uv_handle_t *)&a->ctl, NULL);
		if (bound)
			unlink(a->opts.socket);
		return r;
	}
	a->ctl_open = true;
	return 0;
}

/* Close the socket; remove its file only if it is still the one we bound (a
 * daemon started later on the same path must stay reachable). */
void control_stop(struct agent *a)
{
	if (a->ctl_open) {
		uv_close((uv_handle_t *)&a->ctl, NULL);
		struct stat st;
		if (lstat(a->opts.socket, &st) == 0 && S_ISSOCK(st.st_mode) &&
		    st.st_dev == a->ctl_dev && st.st_ino == a->ctl_ino)
			unlink(a->opts.socket);
		else
			log_info("control_socket_kept", "path=%s reason=%s", log_q(a->opts.socket),
				 log_q("no longer ours"));
		a->ctl_open = false;
	}
}

/* control: the Unix control socket sparkctl talks to. Peers are authorised by
 * SO_PEERCRED: root, the daemon's own user, or a member of the socket's group.
 * Every request gets its caller from the kernel, is looked up in the
 * services' request tables (service.h) and served here, or, for a
 * head-served one on a worker, forwarded to the head (peers.c).
 *
 * Limits (issue 27, docs/protocol.md "Limits"): AGENT_CTL_MAX connections
 * are served at once, of which AGENT_CTL_RESERVED only for root and sparkd's
 * own user, and at most security.control_per_user per other user; a refused
 * connection gets one error frame (`busy`, `forbidden`) and is closed, and a
 * user holding twice its share (or others holding twice AGENT_CTL_MAX) is
 * closed with no answer. A request must arrive whole within
 * security.control_request_s of its first byte (conn_set_frame_timeout); a
 * connection with no request in flight (every request answered by a `result`
 * or `error`) is closed after security.control_idle_s, so streams (svc_watch,
 * job logs -f) live as long as their request. */
#include "service.h"

#include "log.h"
#include "proto.h"
#include "spark_config.h"
#include "util.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

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

/* A control connection. A refused one is answered once ready and closed
 * (conn lingers for the peer's request, so that the close sends no RST). */
struct ctl_client {
	struct ctl_client *next;
	struct agent *a;
	conn *c;
	uid_t uid;
	bool privileged;  /* root or sparkd's own user */
	bool refused;
	bool closing;
	unsigned inflight; /* requests not yet answered with result or error */
	uint64_t last_ms;  /* last request or final answer (or the accept) */
	char code[16];     /* refused: the error sent once ready */
	char why[232];
};

static void not_in_cluster(const struct svc_req *r)
{
	svc_error(r, "not_in_cluster",
		  "this node is not in a cluster; run 'sparkctl init' to start one or "
		  "'sparkctl join HEAD --token TOKEN' to join one");
}

/* A head-served request: here on the head, else forwarded by a worker. */
static void serve_at_head(struct agent *a, const struct svc_request *row, const struct svc_req *r)
{
	if (a->id.role == ROLE_HEAD) {
		svc_serve(a, row, r);
	} else if (a->id.removed) {
		svc_error(r, "removed",
			  "this node was removed from cluster %s; join again with a new token "
			  "('sparkctl join HEAD --token TOKEN')", a->id.cluster_name);
	} else if (a->id.role == ROLE_WORKER) {
		unsigned flags = row->flags & SVC_STREAMS ? PEERS_STREAMS : 0;
		if (peers_forward(a, r->reply, r->msg, flags, row->on_answer) < 0)
			svc_error(r, "internal", "out of memory");
	} else {
		not_in_cluster(r);
	}
}

static void on_ctl_frame(conn *c, json_t *msg)
{
	struct ctl_client *cl = conn_data(c);
	struct agent *a = cl->a;
	if (cl->refused) {
		json_decref(msg);
		conn_close(c, 0);
		return;
	}
	cl->inflight++;
	cl->last_ms = util_now_ms();
	const char *type = proto_type(msg);
	const struct svc_request *row = svc_request_of(type);
	struct svc_req r = {.reply = c, .id = proto_id(msg), .msg = msg, .origin = a->id.node_id};
	if (!row) {
		svc_error(&r, "unknown_type",
			  "unknown request type \"%s\"; is sparkctl newer than sparkd %s?", type,
			  SPARK_VERSION);
		json_decref(msg);
		conn_close(c, 0);
		return;
	}
	/* Who asks is what the kernel says, never what the request says; the
	 * head reads it from forwarded requests. */
	json_t *caller = caller_of(c);
	if (!caller) {
		svc_error(&r, "forbidden", "cannot read the caller's credentials");
		json_decref(msg);
		return;
	}
	json_object_set_new(msg, "caller", caller);
	if (row->at == SVC_HEAD)
		serve_at_head(a, row, &r); /* checked where it is served */
	else
		svc_serve(a, row, &r);
	json_decref(msg);
}

/* A final answer (result or error) ends a request; stream frames do not. */
static void on_ctl_sent(conn *c, const json_t *msg)
{
	struct ctl_client *cl = conn_data(c);
	const char *t = proto_type(msg);
	if (!cl || cl->refused || !t || (strcmp(t, "result") != 0 && strcmp(t, "error") != 0))
		return;
	if (cl->inflight)
		cl->inflight--;
	cl->last_ms = util_now_ms();
}

static void on_ctl_close(conn *c, int err)
{
	struct ctl_client *cl = conn_data(c);
	struct agent *a = cl->a;
	(void)err;
	if (a->ctl_conns)
		a->ctl_conns--;
	for (struct ctl_client **p = &a->ctl_clients; *p; p = &(*p)->next)
		if (*p == cl) {
			*p = cl->next;
			break;
		}
	if (!cl->refused) {
		peers_cli_gone(a, c);
		svc_emit(a, SVC_EV_CONN_GONE, &(struct svc_event_arg){.c = c});
	}
	free(cl);
}

static void on_ctl_ready(conn *c, int status)
{
	struct ctl_client *cl = conn_data(c);
	if (status < 0 || !cl->refused)
		return;
	/* READY: the answer goes out now, then conn reads and drops the
	 * request until the peer closes (or its linger time ends). */
	conn_send_new(c, proto_error(0, cl->code, cl->why));
	cl->closing = true;
	conn_close(c, 0);
}

static const struct conn_cbs ctl_cbs = {
	.on_ready = on_ctl_ready,
	.on_frame = on_ctl_frame,
	.on_close = on_ctl_close,
	.on_sent = on_ctl_sent,
};

/* Close connections with no request in flight for ctl_idle_ms. */
static void ctl_sweep(uv_timer_t *t)
{
	struct agent *a = t->data;
	uint64_t now = util_now_ms();
	for (struct ctl_client *cl = a->ctl_clients; cl; cl = cl->next) {
		if (cl->refused || cl->closing || cl->inflight || now - cl->last_ms < a->ctl_idle_ms)
			continue;
		char why[128];
		snprintf(why, sizeof why, "closed after %u s without a request",
			 a->ctl_idle_ms / 1000);
		cl->closing = true;
		/* -ENOTCONN: conn is closing it already (a request deadline) */
		if (conn_send_new(cl->c, proto_error(0, "idle_timeout", why)) == -ENOTCONN)
			continue;
		log_info("control_idle", "uid=%u idle_ms=%llu", (unsigned)cl->uid,
			 (unsigned long long)(now - cl->last_ms));
		conn_close(cl->c, 0);
	}
}

static void refuse(struct ctl_client *cl, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void refuse(struct ctl_client *cl, const char *code, const char *fmt, ...)
{
	cl->refused = true;
	util_strlcpy(cl->code, code, sizeof cl->code);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cl->why, sizeof cl->why, fmt, ap);
	va_end(ap);
}

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
	if (status < 0)
		return;
	struct ctl_client *cl = calloc(1, sizeof *cl);
	if (!cl)
		return;
	cl->a = a;
	cl->last_ms = util_now_ms();
	conn *c = conn_accept(server, NULL, &ctl_cbs, cl);
	if (!c) {
		free(cl);
		return;
	}
	cl->c = c;
	cl->next = a->ctl_clients;
	a->ctl_clients = cl;
	a->ctl_conns++;
	conn_set_max_frame(c, AGENT_CTL_FRAME);
	struct ucred cr;
	socklen_t sl = sizeof cr;
	if (getsockopt(conn_fd(c), SOL_SOCKET, SO_PEERCRED, &cr, &sl) < 0) {
		refuse(cl, "forbidden", "cannot read peer credentials");
		return;
	}
	cl->uid = cr.uid;
	cl->privileged = cr.uid == 0 || cr.uid == geteuid();
	/* What is open besides this one: served connections, this user's
	 * (served, and all), and other users' (served or being refused). */
	unsigned served = 0, mine = 0, mine_all = 0, others = 0;
	for (struct ctl_client *o = cl->next; o; o = o->next) {
		if (!o->refused)
			served++;
		if (o->uid == cl->uid) {
			mine_all++;
			if (!o->refused)
				mine++;
		}
		if (!o->privileged)
			others++;
	}
	if (!cl->privileged && (mine_all >= 2 * a->ctl_per_uid || others >= 2 * AGENT_CTL_MAX)) {
		/* beyond any reason: no answer */
		cl->refused = true;
		cl->closing = true;
		conn_close(c, -EBUSY);
		return;
	}
	char why[256];
	if (!peer_allowed(a, conn_fd(c), why, sizeof why)) {
		log_warn("control_refused", "reason=%s", log_q(why));
		refuse(cl, "forbidden", "%s", why);
		return;
	}
	if (!cl->privileged && mine >= a->ctl_per_uid) {
		log_warn("control_busy", "uid=%u connections=%u reason=%s", (unsigned)cl->uid, mine,
			 log_q("per user"));
		refuse(cl, "busy",
		       "uid %u already has %u control connections open (at most %u per user); "
		       "close some, or wait: idle ones are closed after %u s",
		       (unsigned)cl->uid, mine, a->ctl_per_uid, a->ctl_idle_ms / 1000);
		return;
	}
	unsigned room = cl->privileged ? AGENT_CTL_MAX : AGENT_CTL_MAX - AGENT_CTL_RESERVED;
	if (served >= room) {
		log_warn("control_busy", "uid=%u connections=%u", (unsigned)cl->uid, served);
		refuse(cl, "busy", "sparkd has too many control connections open; try again");
		return;
	}
	conn_set_frame_timeout(c, a->ctl_request_ms);
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
	if (!a->ctl_idle_ms)
		a->ctl_idle_ms = AGENT_CTL_IDLE_MS;
	if (!a->ctl_request_ms)
		a->ctl_request_ms = AGENT_CTL_REQUEST_MS;
	if (!a->ctl_per_uid)
		a->ctl_per_uid = AGENT_CTL_PER_UID;
	uv_timer_init(a->loop, &a->ctl_timer);
	a->ctl_timer.data = a;
	uv_timer_start(&a->ctl_timer, ctl_sweep, 1000, 1000);
	a->ctl_timer_on = true;
	return 0;
}

/* Close the socket; remove its file only if it is still the one we bound (a
 * daemon started later on the same path must stay reachable). */
void control_stop(struct agent *a)
{
	if (a->ctl_timer_on) {
		uv_timer_stop(&a->ctl_timer);
		uv_close((uv_handle_t *)&a->ctl_timer, NULL);
		a->ctl_timer_on = false;
	}
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

/* control: the Unix control socket sparkctl talks to. Peers are authorised by
 * SO_PEERCRED: root, the daemon's own user, or a member of the socket's group.
 * Every request gets its caller from the kernel, is looked up in the
 * services' request tables (service.h) and served here, or, for a
 * head-served one on a worker, forwarded to the head (peers.c). */
#include "service.h"

#include "log.h"
#include "proto.h"
#include "spark_config.h"
#include "util.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
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

/* A control connection: refused ones are read until their first frame (so
 * that closing sends no RST after the answer) and dropped. */
struct ctl_client {
	struct agent *a;
	bool refused;
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

static void on_ctl_close(conn *c, int err)
{
	struct ctl_client *cl = conn_data(c);
	struct agent *a = cl->a;
	(void)err;
	if (a->ctl_conns)
		a->ctl_conns--;
	if (!cl->refused) {
		peers_cli_gone(a, c);
		svc_emit(a, SVC_EV_CONN_GONE, &(struct svc_event_arg){.c = c});
	}
	free(cl);
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
	if (status < 0)
		return;
	struct ctl_client *cl = calloc(1, sizeof *cl);
	if (!cl)
		return;
	cl->a = a;
	conn *c = conn_accept(server, NULL, &ctl_cbs, cl);
	if (!c) {
		free(cl);
		return;
	}
	conn_set_max_frame(c, AGENT_CTL_FRAME);
	/* Every connection counts, refused ones too (they are closed at their
	 * first frame, so that the answer is read before the close). */
	if (++a->ctl_conns > 2 * AGENT_CTL_MAX) {
		cl->refused = true;
		conn_close(c, -EBUSY); /* beyond any reason: no answer */
		return;
	}
	char why[256];
	if (!peer_allowed(a, conn_fd(c), why, sizeof why)) {
		log_warn("control_refused", "reason=%s", log_q(why));
		cl->refused = true;
		conn_send_new(c, proto_error(0, "forbidden", why));
		return;
	}
	if (a->ctl_conns > AGENT_CTL_MAX) {
		log_warn("control_busy", "connections=%u", a->ctl_conns);
		cl->refused = true;
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

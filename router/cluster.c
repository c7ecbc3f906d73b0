#include "cluster.h"

#include "log.h"
#include "proto.h"
#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define BACKOFF_MIN_MS 200
#define BACKOFF_MAX_MS 5000
#define FIRST_SNAPSHOT_MS 10000 /* the contract: the first frame comes at once */

struct cluster {
	uv_loop_t *loop;
	char *path;
	cluster_fn changed;
	void *arg;
	uv_pipe_t pipe;
	uv_connect_t creq;
	uv_timer_t retry;
	uv_timer_t expire;     /* the stale snapshot's grace */
	unsigned grace_ms;     /* services_grace_s of the policy, in ms */
	uint64_t lost_ms;      /* when the snapshot went stale */
	bool pipe_live;        /* pipe initialised and not yet closed */
	bool freeing;
	int handles;           /* libuv handles not yet closed */
	proto_decoder dec;
	struct svc_table t;
	unsigned backoff_ms;
	char err[256];
	char logged[256];      /* the last error logged at warn (repeats go to debug) */
	char rbuf[65536];
};

bool cluster_peer_ok(uid_t peer, uid_t self)
{
	return peer == 0 || peer == self;
}

static void start_connect(struct cluster *c);

static void on_retry(uv_timer_t *t)
{
	start_connect(t->data);
}

static void handle_closed(uv_handle_t *h)
{
	struct cluster *c = h->data;
	if (h == (uv_handle_t *)&c->pipe && !c->freeing) {
		uv_timer_start(&c->retry, on_retry, c->backoff_ms, 0);
		c->backoff_ms = c->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : c->backoff_ms * 2;
	}
	if (--c->handles == 0 && c->freeing) {
		proto_decoder_free(&c->dec);
		svc_table_clear(&c->t);
		free(c->path);
		free(c);
	}
}

static void on_expire(uv_timer_t *t)
{
	struct cluster *c = t->data;
	if (!c->t.stale)
		return;
	svc_table_clear(&c->t);
	log_warn("services_snapshot_expired", "socket=%s grace_s=%u error=%s service_targets=unusable",
		 log_q(c->path), c->grace_ms / 1000, log_q(c->err));
	c->changed(c->arg);
}

/* The stream is gone (why in fmt); log, retry later. keep: sparkd went away
 * or ended the stream (a restart, the head unreachable): the last snapshot
 * stays usable, stale, for the grace, as the services' servers go on without
 * sparkd; else (a frame that breaks the contract, a socket that is not
 * sparkd's) the table is emptied at once. */
static void __attribute__((format(printf, 3, 4))) lost(struct cluster *c, bool keep, const char *fmt,
						       ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->err, sizeof c->err, fmt, ap);
	va_end(ap);
	bool had = c->t.connected, was_stale = c->t.stale;
	if (keep && had && c->grace_ms > 0) {
		c->t.connected = false;
		c->t.stale = true;
		c->lost_ms = uv_now(c->loop);
		uv_timer_start(&c->expire, on_expire, c->grace_ms, 0);
	} else if (!keep || !was_stale) {
		uv_timer_stop(&c->expire);
		svc_table_clear(&c->t);
	}
	char kept[64];
	if (c->t.stale)
		snprintf(kept, sizeof kept, "kept_stale grace_s=%u", c->grace_ms / 1000);
	else
		snprintf(kept, sizeof kept, "unusable");
	if (strcmp(c->err, c->logged)) {
		log_warn("sparkd_watch_lost", "socket=%s error=%s retry_ms=%u service_targets=%s",
			 log_q(c->path), log_q(c->err), c->backoff_ms, kept);
		util_strlcpy(c->logged, c->err, sizeof c->logged);
	} else {
		log_debug("sparkd_watch_lost", "socket=%s error=%s retry_ms=%u", log_q(c->path),
			  log_q(c->err), c->backoff_ms);
	}
	if (c->pipe_live) {
		c->pipe_live = false;
		uv_close((uv_handle_t *)&c->pipe, handle_closed);
	}
	if (had || (was_stale && !c->t.stale))
		c->changed(c->arg);
}

static void on_no_snapshot(uv_timer_t *t)
{
	lost(t->data, true, "no snapshot from sparkd within %d ms of svc_watch", FIRST_SNAPSHOT_MS);
}

static void on_alloc(uv_handle_t *h, size_t want, uv_buf_t *b)
{
	(void)want;
	struct cluster *c = h->data;
	*b = uv_buf_init(c->rbuf, sizeof c->rbuf);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
	struct cluster *c = s->data;
	if (n < 0) {
		lost(c, true, "%s", n == UV_EOF ? "sparkd closed the connection" : uv_strerror((int)n));
		return;
	}
	if (proto_decoder_feed(&c->dec, b->base, (size_t)n) < 0) {
		lost(c, true, "out of memory");
		return;
	}
	for (;;) {
		json_t *msg = NULL;
		char e[200];
		int r = proto_decoder_next(&c->dec, &msg, e, sizeof e);
		if (r == 0)
			return;
		if (r < 0) {
			lost(c, false, "bad frame from sparkd: %s", e);
			return;
		}
		bool was = c->t.connected;
		r = svc_frame(msg, &c->t, e, sizeof e);
		json_decref(msg);
		if (r < 0) {
			lost(c, r == -ECONNABORTED, "%s", e);
			return;
		}
		uv_timer_stop(&c->expire);
		if (!was) {
			uv_timer_stop(&c->retry);
			log_info("sparkd_watch", "socket=%s services=%zu", log_q(c->path), c->t.n);
			c->logged[0] = 0;
		}
		c->err[0] = 0;
		c->backoff_ms = BACKOFF_MIN_MS;
		c->changed(c->arg);
	}
}

static void on_written(uv_write_t *w, int status)
{
	free(w->data);
	free(w);
	(void)status; /* a failed write shows as a read error */
}

static void on_connect(uv_connect_t *req, int status)
{
	struct cluster *c = req->data;
	if (c->freeing)
		return;
	if (status < 0) {
		lost(c, true, "cannot connect: %s%s", uv_strerror(status),
		     status == UV_ENOENT || status == UV_ECONNREFUSED ? " (is sparkd running?)"
		     : status == UV_EACCES ? " (run spark-router as root or as a member of the socket's group)"
					   : "");
		return;
	}
	uv_os_fd_t fd;
	struct ucred cr;
	socklen_t cl = sizeof cr;
	if (uv_fileno((uv_handle_t *)&c->pipe, &fd) < 0 ||
	    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0) {
		lost(c, false, "cannot read the peer's credentials: %s", strerror(errno));
		return;
	}
	if (!cluster_peer_ok(cr.uid, geteuid())) {
		lost(c, false, "the socket's owner (uid %u, pid %d) is neither root nor this router's user: not sparkd",
		     (unsigned)cr.uid, (int)cr.pid);
		return;
	}
	json_t *m = proto_msg("svc_watch", 1);
	uint8_t *frame = NULL;
	size_t len = 0;
	int r = proto_encode(m, &frame, &len);
	json_decref(m);
	uv_write_t *w = r == 0 ? malloc(sizeof *w) : NULL;
	if (!w) {
		free(frame);
		lost(c, true, "out of memory");
		return;
	}
	w->data = frame;
	uv_buf_t b = uv_buf_init((char *)frame, (unsigned)len);
	if ((r = uv_write(w, (uv_stream_t *)&c->pipe, &b, 1, on_written)) < 0 ||
	    (r = uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read)) < 0) {
		lost(c, true, "%s", uv_strerror(r));
		return;
	}
	uv_timer_start(&c->retry, on_no_snapshot, FIRST_SNAPSHOT_MS, 0);
}

static void start_connect(struct cluster *c)
{
	proto_decoder_free(&c->dec);
	proto_decoder_init(&c->dec);
	if (uv_pipe_init(c->loop, &c->pipe, 0) < 0) {
		lost(c, true, "cannot make a socket");
		uv_timer_start(&c->retry, on_retry, c->backoff_ms, 0);
		return;
	}
	c->pipe.data = c;
	c->pipe_live = true;
	c->handles++;
	c->creq.data = c;
	uv_pipe_connect(&c->creq, &c->pipe, c->path, on_connect);
}

struct cluster *cluster_new(uv_loop_t *loop, const char *socket_path, cluster_fn changed,
			    void *arg)
{
	if (strlen(socket_path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		errno = ENAMETOOLONG;
		return NULL;
	}
	struct cluster *c = calloc(1, sizeof *c);
	if (!c || !(c->path = strdup(socket_path))) {
		free(c);
		return NULL;
	}
	c->loop = loop;
	c->changed = changed;
	c->arg = arg;
	c->backoff_ms = BACKOFF_MIN_MS;
	snprintf(c->err, sizeof c->err, "connecting");
	proto_decoder_init(&c->dec);
	uv_timer_init(loop, &c->retry);
	c->retry.data = c;
	c->handles++;
	uv_timer_init(loop, &c->expire);
	c->expire.data = c;
	c->handles++;
	start_connect(c);
	return c;
}

const struct svc_table *cluster_services(const struct cluster *c)
{
	return &c->t;
}

const char *cluster_error(const struct cluster *c)
{
	return c->err;
}

const char *cluster_socket(const struct cluster *c)
{
	return c->path;
}

void cluster_set_grace(struct cluster *c, unsigned seconds)
{
	c->grace_ms = seconds * 1000u;
	if (c->t.stale && !c->grace_ms) {
		svc_table_clear(&c->t);
		uv_timer_stop(&c->expire);
		c->changed(c->arg);
	}
}

unsigned cluster_stale_s(const struct cluster *c)
{
	return c->t.stale ? (unsigned)((uv_now(c->loop) - c->lost_ms) / 1000) : 0;
}

void cluster_free(struct cluster *c)
{
	if (!c)
		return;
	c->freeing = true;
	uv_timer_stop(&c->retry);
	uv_close((uv_handle_t *)&c->retry, handle_closed);
	uv_timer_stop(&c->expire);
	uv_close((uv_handle_t *)&c->expire, handle_closed);
	if (c->pipe_live) {
		c->pipe_live = false;
		uv_close((uv_handle_t *)&c->pipe, handle_closed);
	}
}

#include "upstream.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct sock;

struct upstream {
	uv_loop_t *loop;
	CURLM *multi;
	uv_timer_t timer;
	upstream_done_fn done;
	void *arg;
	CURL *pool[256];
	size_t npool;
	/* the sockets libcurl opened for its connections, by fd: their uv_poll
	 * lives as long as the connection, not one transfer */
	struct sock **conn;
	size_t nconn;
};

/* One socket libcurl asked us to watch. A connection's socket (opened by
 * open_socket) keeps its uv_poll between the transfers that reuse it: libuv
 * re-registers a poll handle with epoll on every uv_poll_init and
 * uv_poll_start (6 epoll_ctl and an ioctl per request), so an idle one stays
 * watched for reading, and on_poll stops it if the server closes it before
 * libcurl reuses or closes the connection. */
struct sock {
	uv_poll_t poll;
	curl_socket_t fd;
	struct upstream *u;
	bool conn;    /* in u->conn: closed by close_socket */
	bool polling; /* poll initialised */
	bool active;  /* in a transfer (between libcurl's watch and CURL_POLL_REMOVE) */
	int events;   /* UV_READABLE/UV_WRITABLE of the running uv_poll, 0: stopped */
};

static void check_done(struct upstream *u)
{
	CURLMsg *msg;
	int left;
	while ((msg = curl_multi_info_read(u->multi, &left))) {
		if (msg->msg != CURLMSG_DONE)
			continue;
		CURL *e = msg->easy_handle;
		CURLcode rc = msg->data.result;
		curl_multi_remove_handle(u->multi, e);
		u->done(e, rc, u->arg);
	}
}

static void on_poll(uv_poll_t *h, int status, int events);

static void sock_watch(struct sock *s, int ev)
{
	if (s->events == ev)
		return;
	if (ev)
		uv_poll_start(&s->poll, ev, on_poll);
	else
		uv_poll_stop(&s->poll);
	s->events = ev;
}

static void on_poll(uv_poll_t *h, int status, int events)
{
	struct sock *s = h->data;
	if (!s->active) { /* idle in libcurl's cache: the server closed it, or sent junk */
		sock_watch(s, 0);
		return;
	}
	int flags = 0, running;
	if (status < 0)
		flags = CURL_CSELECT_ERR;
	if (events & UV_READABLE)
		flags |= CURL_CSELECT_IN;
	if (events & UV_WRITABLE)
		flags |= CURL_CSELECT_OUT;
	struct upstream *u = s->u;
	curl_multi_socket_action(u->multi, s->fd, flags, &running);
	check_done(u);
}

static void on_timer(uv_timer_t *t)
{
	struct upstream *u = t->data;
	int running;
	curl_multi_socket_action(u->multi, CURL_SOCKET_TIMEOUT, 0, &running);
	check_done(u);
}

static void sock_closed(uv_handle_t *h)
{
	free(h->data);
}

static void sock_free(struct sock *s)
{
	if (s->polling)
		uv_close((uv_handle_t *)&s->poll, sock_closed);
	else
		free(s);
}

static struct sock *conn_sock(struct upstream *u, curl_socket_t fd)
{
	return fd >= 0 && (size_t)fd < u->nconn ? u->conn[fd] : NULL;
}

static curl_socket_t open_socket(void *clientp, curlsocktype purpose, struct curl_sockaddr *a)
{
	struct upstream *u = clientp;
	if (purpose != CURLSOCKTYPE_IPCXN)
		return CURL_SOCKET_BAD;
	curl_socket_t fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
	if (fd < 0)
		return CURL_SOCKET_BAD;
	if ((size_t)fd >= u->nconn) {
		size_t n = u->nconn ? u->nconn : 64;
		while (n <= (size_t)fd)
			n *= 2;
		struct sock **nc = realloc(u->conn, n * sizeof *nc);
		if (!nc) {
			close(fd);
			return CURL_SOCKET_BAD;
		}
		memset(nc + u->nconn, 0, (n - u->nconn) * sizeof *nc);
		u->conn = nc;
		u->nconn = n;
	}
	struct sock *s = calloc(1, sizeof *s);
	if (!s) {
		close(fd);
		return CURL_SOCKET_BAD;
	}
	s->fd = fd;
	s->u = u;
	s->conn = true;
	u->conn[fd] = s;
	return fd;
}

static int close_socket(void *clientp, curl_socket_t fd)
{
	struct upstream *u = clientp;
	struct sock *s = conn_sock(u, fd);
	if (s) {
		u->conn[fd] = NULL;
		sock_free(s); /* uv_close: out of epoll before the fd is closed */
	}
	return close(fd);
}

static int on_socket(CURL *e, curl_socket_t fd, int what, void *userp, void *socketp)
{
	(void)e;
	struct upstream *u = userp;
	struct sock *s = socketp ? socketp : conn_sock(u, fd);
	if (what == CURL_POLL_REMOVE) {
		if (!s)
			return 0;
		curl_multi_assign(u->multi, fd, NULL);
		s->active = false;
		if (s->conn) /* idle: kept watched for reading (see struct sock) */
			sock_watch(s, s->polling ? UV_READABLE : 0);
		else
			sock_free(s);
		return 0;
	}
	if (!s) {
		s = calloc(1, sizeof *s);
		if (!s)
			return -1;
		s->fd = fd;
		s->u = u;
	}
	if (!s->polling) {
		if (uv_poll_init_socket(u->loop, &s->poll, fd) < 0) {
			if (!s->conn)
				free(s);
			return -1;
		}
		s->poll.data = s;
		s->polling = true;
	}
	if (!s->active) {
		s->active = true;
		curl_multi_assign(u->multi, fd, s);
	}
	int ev = 0;
	if (what & CURL_POLL_IN)
		ev |= UV_READABLE;
	if (what & CURL_POLL_OUT)
		ev |= UV_WRITABLE;
	sock_watch(s, ev);
	return 0;
}

static int on_timeout(CURLM *m, long ms, void *userp)
{
	(void)m;
	struct upstream *u = userp;
	if (ms < 0)
		uv_timer_stop(&u->timer);
	else
		uv_timer_start(&u->timer, on_timer, (uint64_t)ms, 0);
	return 0;
}

struct upstream *upstream_new(uv_loop_t *loop, upstream_done_fn done, void *arg)
{
	struct upstream *u = calloc(1, sizeof *u);
	if (!u)
		return NULL;
	u->loop = loop;
	u->done = done;
	u->arg = arg;
	u->multi = curl_multi_init();
	if (!u->multi) {
		free(u);
		return NULL;
	}
	uv_timer_init(loop, &u->timer);
	u->timer.data = u;
	curl_multi_setopt(u->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
	curl_multi_setopt(u->multi, CURLMOPT_SOCKETDATA, u);
	curl_multi_setopt(u->multi, CURLMOPT_TIMERFUNCTION, on_timeout);
	curl_multi_setopt(u->multi, CURLMOPT_TIMERDATA, u);
	curl_multi_setopt(u->multi, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
	/* keep idle upstream connections for reuse (the default shrinks with the
	 * number of handles, which here are made per request) */
	curl_multi_setopt(u->multi, CURLMOPT_MAXCONNECTS, 512L);
	return u;
}

int upstream_add(struct upstream *u, CURL *easy)
{
	return curl_multi_add_handle(u->multi, easy) == CURLM_OK ? 0 : -1;
}

void upstream_remove(struct upstream *u, CURL *easy)
{
	curl_multi_remove_handle(u->multi, easy);
}

void upstream_free(struct upstream *u)
{
	if (!u)
		return;
	while (u->npool)
		curl_easy_cleanup(u->pool[--u->npool]);
	curl_multi_cleanup(u->multi); /* closes the connections: close_socket */
	free(u->conn);
	uv_close((uv_handle_t *)&u->timer, sock_closed); /* frees timer.data, u */
}

CURL *upstream_get(struct upstream *u)
{
	CURL *e = u->npool ? u->pool[--u->npool] : curl_easy_init();
	if (e) {
		curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, open_socket);
		curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, u);
		curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, close_socket);
		curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, u);
	}
	return e;
}

void upstream_put(struct upstream *u, CURL *easy)
{
	if (u->npool < sizeof u->pool / sizeof u->pool[0]) {
		curl_easy_reset(easy);
		u->pool[u->npool++] = easy;
	} else {
		curl_easy_cleanup(easy);
	}
}

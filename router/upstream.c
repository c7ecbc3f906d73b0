#include "upstream.h"

#include <stdlib.h>

struct upstream {
	uv_loop_t *loop;
	CURLM *multi;
	uv_timer_t timer;
	upstream_done_fn done;
	void *arg;
	CURL *pool[256];
	size_t npool;
};

struct sock {
	uv_poll_t poll;
	curl_socket_t fd;
	struct upstream *u;
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

static void on_poll(uv_poll_t *h, int status, int events)
{
	struct sock *s = h->data;
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

static int on_socket(CURL *e, curl_socket_t fd, int what, void *userp, void *socketp)
{
	(void)e;
	struct upstream *u = userp;
	struct sock *s = socketp;
	if (what == CURL_POLL_REMOVE) {
		if (s) {
			uv_poll_stop(&s->poll);
			uv_close((uv_handle_t *)&s->poll, sock_closed);
			curl_multi_assign(u->multi, fd, NULL);
		}
		return 0;
	}
	if (!s) {
		s = calloc(1, sizeof *s);
		if (!s)
			return -1;
		s->fd = fd;
		s->u = u;
		if (uv_poll_init_socket(u->loop, &s->poll, fd) < 0) {
			free(s);
			return -1;
		}
		s->poll.data = s;
		curl_multi_assign(u->multi, fd, s);
	}
	int ev = 0;
	if (what & CURL_POLL_IN)
		ev |= UV_READABLE;
	if (what & CURL_POLL_OUT)
		ev |= UV_WRITABLE;
	uv_poll_start(&s->poll, ev, on_poll);
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
	curl_multi_cleanup(u->multi);
	uv_close((uv_handle_t *)&u->timer, sock_closed); /* frees timer.data, u */
}

CURL *upstream_get(struct upstream *u)
{
	if (u->npool)
		return u->pool[--u->npool];
	return curl_easy_init();
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

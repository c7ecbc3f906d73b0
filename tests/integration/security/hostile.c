#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* accept4 */
#endif
#include "hostile.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define HS_MAX_FRAME (2u << 20) /* what we accept from a daemon; above that is garbage */

static long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static int left_ms(long deadline)
{
	long l = deadline - now_ms();
	return l < 0 ? 0 : (int)l;
}

uint8_t *hs_frame(const char *json, size_t *len)
{
	size_t n = strlen(json);
	uint8_t *b = malloc(n + 4);
	if (!b)
		return NULL;
	b[0] = (uint8_t)(n >> 24);
	b[1] = (uint8_t)(n >> 16);
	b[2] = (uint8_t)(n >> 8);
	b[3] = (uint8_t)n;
	memcpy(b + 4, json, n);
	*len = n + 4;
	return b;
}

/* ---- one connection (client side, or a connection the server accepted) ---- */

struct hs_client {
	int fd;
	SSL_CTX *ctx; /* owned by a client made by hs_connect */
	SSL *ssl;     /* NULL on a plain (Unix) connection */
	uint8_t *rbuf;
	size_t rlen, rcap;
	bool closed;
	int send_ms; /* 0: 3000 */
};

static void set_nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

static int wait_fd(int fd, short ev, int ms)
{
	struct pollfd p = {.fd = fd, .events = ev};
	int r;
	while ((r = poll(&p, 1, ms)) < 0 && errno == EINTR)
		;
	return r;
}

/* >0 bytes, 0 closed (EOF, reset, alert), -2 timeout. */
static int io_read(struct hs_client *c, void *buf, int n, long deadline)
{
	if (c->closed)
		return 0;
	for (;;) {
		if (!c->ssl) {
			ssize_t r = read(c->fd, buf, (size_t)n);
			if (r > 0)
				return (int)r;
			if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
				c->closed = true;
				return 0;
			}
			if (wait_fd(c->fd, POLLIN, left_ms(deadline)) == 0)
				return -2;
			continue;
		}
		ERR_clear_error();
		int r = SSL_read(c->ssl, buf, n);
		if (r > 0)
			return r;
		int e = SSL_get_error(c->ssl, r);
		if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
			if (wait_fd(c->fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT,
				    left_ms(deadline)) == 0)
				return -2;
			continue;
		}
		c->closed = true;
		return 0;
	}
}

static int io_write(struct hs_client *c, const void *buf, size_t n)
{
	const uint8_t *p = buf;
	long deadline = now_ms() + (c->send_ms ? c->send_ms : 3000); /* a peer that stopped reading counts as gone */
	while (n > 0 && !c->closed) {
		size_t chunk = n > 16384 ? 16384 : n;
		if (!c->ssl) {
			ssize_t r = send(c->fd, p, chunk, MSG_NOSIGNAL);
			if (r > 0) {
				p += r;
				n -= (size_t)r;
				continue;
			}
			if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
				if (wait_fd(c->fd, POLLOUT, left_ms(deadline)) == 0)
					return -1;
				continue;
			}
			c->closed = true;
			return -1;
		}
		ERR_clear_error();
		int r = SSL_write(c->ssl, p, (int)chunk);
		if (r > 0) {
			p += r;
			n -= (size_t)r;
			continue;
		}
		int e = SSL_get_error(c->ssl, r);
		if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
			if (wait_fd(c->fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT,
				    left_ms(deadline)) == 0)
				return -1;
			continue;
		}
		c->closed = true;
		return -1;
	}
	return c->closed ? -1 : 0;
}

/* 0 when the handshake completed, -1 otherwise. */
static int io_handshake(struct hs_client *c, bool server, long deadline)
{
	for (;;) {
		ERR_clear_error();
		int r = server ? SSL_accept(c->ssl) : SSL_connect(c->ssl);
		if (r == 1)
			return 0;
		int e = SSL_get_error(c->ssl, r);
		if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
			return -1;
		if (wait_fd(c->fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, left_ms(deadline)) == 0)
			return -1;
	}
}

int hs_send(struct hs_client *c, const void *buf, size_t n) { return io_write(c, buf, n); }

void hs_set_send_timeout(struct hs_client *c, int ms) { c->send_ms = ms; }

int hs_send_frame(struct hs_client *c, const char *json)
{
	size_t n;
	uint8_t *f = hs_frame(json, &n);
	int r = f ? io_write(c, f, n) : -1;
	free(f);
	return r;
}

int hs_send_header(struct hs_client *c, uint32_t len)
{
	uint8_t h[4] = {(uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len};
	return io_write(c, h, 4);
}

/* Read more into rbuf. >0, 0 closed, -2 timeout. */
static int fill(struct hs_client *c, long deadline)
{
	if (c->rcap - c->rlen < 16384) {
		size_t nc = c->rcap ? c->rcap * 2 : 65536;
		uint8_t *nb = realloc(c->rbuf, nc);
		if (!nb)
			return 0;
		c->rbuf = nb;
		c->rcap = nc;
	}
	int r = io_read(c, c->rbuf + c->rlen, (int)(c->rcap - c->rlen), deadline);
	if (r > 0)
		c->rlen += (size_t)r;
	return r;
}

/* A complete frame's text from rbuf (caller frees), or NULL when incomplete;
 * *bad set when the header is unacceptable. */
static char *take_frame(struct hs_client *c, bool *bad)
{
	*bad = false;
	if (c->rlen < 4)
		return NULL;
	uint32_t n = (uint32_t)c->rbuf[0] << 24 | (uint32_t)c->rbuf[1] << 16 |
		     (uint32_t)c->rbuf[2] << 8 | c->rbuf[3];
	if (n == 0 || n > HS_MAX_FRAME) {
		*bad = true;
		return NULL;
	}
	if (c->rlen < 4 + (size_t)n)
		return NULL;
	char *s = malloc(n + 1);
	if (!s)
		return NULL;
	memcpy(s, c->rbuf + 4, n);
	s[n] = '\0';
	memmove(c->rbuf, c->rbuf + 4 + n, c->rlen - 4 - n);
	c->rlen -= 4 + n;
	return s;
}

static char *read_frame_text(struct hs_client *c, int timeout_ms)
{
	long deadline = now_ms() + timeout_ms;
	for (;;) {
		bool bad;
		char *s = take_frame(c, &bad);
		if (s || bad)
			return s;
		if (fill(c, deadline) <= 0)
			return NULL;
	}
}

json_t *hs_read_frame(struct hs_client *c, int timeout_ms)
{
	char *s = read_frame_text(c, timeout_ms);
	json_t *j = s ? json_loads(s, 0, NULL) : NULL;
	free(s);
	return j;
}

bool hs_wait_closed(struct hs_client *c, int timeout_ms)
{
	long deadline = now_ms() + timeout_ms;
	for (;;) {
		c->rlen = 0; /* discard */
		int r = fill(c, deadline);
		if (r == 0)
			return true;
		if (r == -2)
			return false;
	}
}

bool hs_peer_closed(struct hs_client *c)
{
	for (;;) {
		int r = fill(c, now_ms());
		if (r == 0)
			return true;
		if (r == -2)
			return false;
		if (c->rlen > (1u << 20))
			c->rlen = 0; /* only closing matters here */
	}
}

int hs_fd(const struct hs_client *c) { return c->fd; }

static void conn_free(struct hs_client *c)
{
	if (!c)
		return;
	if (c->ssl) {
		if (!c->closed)
			SSL_shutdown(c->ssl);
		SSL_free(c->ssl);
	}
	if (c->fd >= 0)
		close(c->fd);
	if (c->ctx)
		SSL_CTX_free(c->ctx);
	free(c->rbuf);
	free(c);
}

void hs_close(struct hs_client *c) { conn_free(c); }

static int tcp_connect(int port, int timeout_ms)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	set_nonblock(fd);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		int err = 0;
		socklen_t sl = sizeof err;
		if (errno != EINPROGRESS || wait_fd(fd, POLLOUT, timeout_ms) <= 0 ||
		    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) < 0 || err) {
			close(fd);
			return -1;
		}
	}
	return fd;
}

struct hs_client *hs_connect(int port, const char *cert_file, const char *key_file,
			     int timeout_ms)
{
	long deadline = now_ms() + timeout_ms;
	struct hs_client *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->fd = -1;
	c->ctx = SSL_CTX_new(TLS_client_method());
	if (!c->ctx)
		goto fail;
	SSL_CTX_set_min_proto_version(c->ctx, TLS1_3_VERSION);
	SSL_CTX_set_verify(c->ctx, SSL_VERIFY_NONE, NULL);
	if (cert_file && (SSL_CTX_use_certificate_chain_file(c->ctx, cert_file) != 1 ||
			  SSL_CTX_use_PrivateKey_file(c->ctx, key_file, SSL_FILETYPE_PEM) != 1))
		goto fail;
	if ((c->fd = tcp_connect(port, timeout_ms)) < 0)
		goto fail;
	c->ssl = SSL_new(c->ctx);
	if (!c->ssl || SSL_set_fd(c->ssl, c->fd) != 1 || io_handshake(c, false, deadline) < 0)
		goto fail;
	return c;
fail:
	ERR_clear_error();
	conn_free(c);
	return NULL;
}

struct hs_client *hs_connect_unix(const char *path)
{
	struct hs_client *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
	if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		conn_free(c);
		return NULL;
	}
	set_nonblock(c->fd);
	return c;
}

/* ---- fake server ------------------------------------------------------------ */

struct hs_server {
	int lfd;
	SSL_CTX *ctx;
	char **on_connect;
	int conn_ms;
	pthread_t th;
	pthread_mutex_t mu;
	volatile int stop;
	int accepts, handshakes;
	char **frames; /* received frames' text */
	int nframes, capframes;
};

static int accept_any(int ok, X509_STORE_CTX *x)
{
	(void)ok;
	(void)x;
	return 1;
}

static void record(struct hs_server *s, char *text)
{
	pthread_mutex_lock(&s->mu);
	if (s->nframes == s->capframes) {
		int nc = s->capframes ? s->capframes * 2 : 16;
		char **nf = realloc(s->frames, (size_t)nc * sizeof *nf);
		if (!nf) {
			pthread_mutex_unlock(&s->mu);
			free(text);
			return;
		}
		s->frames = nf;
		s->capframes = nc;
	}
	s->frames[s->nframes++] = text;
	pthread_mutex_unlock(&s->mu);
}

static void serve_one(struct hs_server *s, int fd)
{
	struct hs_client *c = calloc(1, sizeof *c);
	if (!c) {
		close(fd);
		return;
	}
	c->fd = fd;
	set_nonblock(fd);
	long deadline = now_ms() + s->conn_ms;
	c->ssl = SSL_new(s->ctx);
	if (!c->ssl || SSL_set_fd(c->ssl, fd) != 1 || io_handshake(c, true, now_ms() + 3000) < 0) {
		ERR_clear_error();
		conn_free(c);
		return;
	}
	pthread_mutex_lock(&s->mu);
	s->handshakes++;
	pthread_mutex_unlock(&s->mu);
	for (char **f = s->on_connect; f && *f; f++)
		hs_send_frame(c, *f);
	while (!s->stop && now_ms() < deadline && !c->closed) {
		long step = now_ms() + 100;
		bool bad;
		char *t = take_frame(c, &bad);
		if (bad)
			break;
		if (t) {
			record(s, t);
			continue;
		}
		fill(c, step < deadline ? step : deadline);
	}
	conn_free(c);
}

static void *server_main(void *arg)
{
	struct hs_server *s = arg;
	while (!s->stop) {
		if (wait_fd(s->lfd, POLLIN, 100) <= 0)
			continue;
		int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		pthread_mutex_lock(&s->mu);
		s->accepts++;
		pthread_mutex_unlock(&s->mu);
		serve_one(s, fd);
	}
	return NULL;
}

struct hs_server *hs_server_start(int port, const char *chain_file, const char *key_file,
				  const char *const *on_connect, int conn_ms)
{
	struct hs_server *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	pthread_mutex_init(&s->mu, NULL);
	s->conn_ms = conn_ms;
	s->lfd = -1;
	size_t n = 0;
	while (on_connect && on_connect[n])
		n++;
	s->on_connect = calloc(n + 1, sizeof *s->on_connect);
	for (size_t i = 0; s->on_connect && i < n; i++)
		s->on_connect[i] = strdup(on_connect[i]);
	s->ctx = SSL_CTX_new(TLS_server_method());
	if (!s->ctx)
		goto fail;
	SSL_CTX_set_min_proto_version(s->ctx, TLS1_3_VERSION);
	/* like a head: ask for the peer's certificate, but take whatever comes */
	SSL_CTX_set_verify(s->ctx, SSL_VERIFY_PEER, accept_any);
	if (SSL_CTX_use_certificate_chain_file(s->ctx, chain_file) != 1 ||
	    SSL_CTX_use_PrivateKey_file(s->ctx, key_file, SSL_FILETYPE_PEM) != 1 ||
	    SSL_CTX_check_private_key(s->ctx) != 1)
		goto fail;
	s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (s->lfd < 0 || bind(s->lfd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
	    listen(s->lfd, 64) < 0)
		goto fail;
	if (pthread_create(&s->th, NULL, server_main, s) != 0)
		goto fail;
	return s;
fail:
	ERR_clear_error();
	if (s->lfd >= 0)
		close(s->lfd);
	if (s->ctx)
		SSL_CTX_free(s->ctx);
	for (size_t i = 0; s->on_connect && i < n; i++)
		free(s->on_connect[i]);
	free(s->on_connect);
	free(s);
	return NULL;
}

void hs_server_stop(struct hs_server *s)
{
	if (!s)
		return;
	s->stop = 1;
	pthread_join(s->th, NULL);
	close(s->lfd);
	SSL_CTX_free(s->ctx);
	for (char **f = s->on_connect; f && *f; f++)
		free(*f);
	free(s->on_connect);
	for (int i = 0; i < s->nframes; i++)
		free(s->frames[i]);
	free(s->frames);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

static int get_int(struct hs_server *s, int *p)
{
	pthread_mutex_lock(&s->mu);
	int v = *p;
	pthread_mutex_unlock(&s->mu);
	return v;
}

int hs_server_accepts(struct hs_server *s) { return get_int(s, &s->accepts); }
int hs_server_handshakes(struct hs_server *s) { return get_int(s, &s->handshakes); }
int hs_server_nframes(struct hs_server *s) { return get_int(s, &s->nframes); }

char *hs_server_types(struct hs_server *s)
{
	size_t cap = 256, len = 0;
	char *out = calloc(1, cap);
	pthread_mutex_lock(&s->mu);
	for (int i = 0; out && i < s->nframes; i++) {
		json_t *j = json_loads(s->frames[i], 0, NULL);
		const char *t = json_string_value(json_object_get(j, "type"));
		const char *w = t ? t : "(not json)";
		size_t need = len + strlen(w) + 2;
		if (need > cap) {
			char *no = realloc(out, cap = need * 2);
			if (!no) {
				json_decref(j);
				break;
			}
			out = no;
		}
		len += (size_t)sprintf(out + len, "%s%s", len ? "," : "", w);
		json_decref(j);
	}
	pthread_mutex_unlock(&s->mu);
	return out;
}

bool hs_server_saw(struct hs_server *s, const char *type)
{
	bool seen = false;
	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < s->nframes && !seen; i++) {
		json_t *j = json_loads(s->frames[i], 0, NULL);
		const char *t = json_string_value(json_object_get(j, "type"));
		seen = t && strcmp(t, type) == 0;
		json_decref(j);
	}
	pthread_mutex_unlock(&s->mu);
	return seen;
}

bool hs_server_saw_text(struct hs_server *s, const char *text)
{
	bool seen = false;
	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < s->nframes && !seen; i++)
		seen = strstr(s->frames[i], text) != NULL;
	pthread_mutex_unlock(&s->mu);
	return seen;
}

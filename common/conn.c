/* conn: framed JSON over libuv streams, optionally inside TLS 1.3 driven through
 * memory BIOs. See conn.h for the contract.
 *
 * Life cycle of a struct conn (states only move forward):
 *   RESOLVE -> CONNECT -> [HANDSHAKE] -> READY -> CLOSING -> CLOSED
 *   (accepted: START or HANDSHAKE -> READY ...)
 * CLOSING: no more frames are delivered; queued bytes are flushed, the write
 *   side is shut down, input is read and discarded until the peer's EOF or a
 *   linger timeout (closing a socket with unread input makes TCP send a reset
 *   that can destroy the error frame we just sent).
 * CLOSED: uv_close() was called on every handle. When the last handle close
 *   callback (and a pending getaddrinfo, if any) has run, on_close is called
 *   once and the conn is freed. on_close therefore never runs inside a call
 *   made by the owner (conn_close, conn_send), always from the loop. */
#include "conn.h"

#include "log.h"
#include "proto.h"
#include "util.h"

#include <errno.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509_vfy.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

/* Socket reads go into a buffer that lives only from alloc_cb to the end of
 * read_cb: read_cb copies every byte (into the TLS read BIO or the frame
 * decoder) before it returns. A 64 KiB array inside each conn cost the head
 * 64 KiB per connected worker for as long as the session lived (calloc touches
 * all of it when it reuses freed heap); now one such block exists per read in
 * progress, i.e. one per loop, and malloc hands the same one back each time. */
#define CONN_RBUF (64 * 1024)
/* Bytes queued for a peer that does not read; beyond this the peer is dropped
 * (Redis' output buffer limit). 32 max-size frames. */
#define CONN_WQ_MAX ((size_t)32 << 20)
#define CONN_LINGER_MS 2000
#define CONN_ACCEPT_HANDSHAKE_MS 10000

enum conn_state {
	ST_RESOLVE,
	ST_CONNECT,
	ST_START,     /* accepted plain stream, on_ready due on the next loop turn */
	ST_HANDSHAKE,
	ST_READY,
	ST_CLOSING,
	ST_CLOSED,
};

struct pending_frame {
	struct pending_frame *next;
	uint8_t *buf;
	size_t len;
};

struct wreq {
	uv_write_t req;
	conn *c;
	uint8_t *buf;
	size_t len;
};

struct conn {
	uv_loop_t *loop;
	union {
		uv_handle_t h;
		uv_stream_t s;
		uv_tcp_t tcp;
		uv_pipe_t pipe;
	} io;
	uv_timer_t timer;
	uv_getaddrinfo_t gai;
	uv_connect_t creq;
	uv_shutdown_t sreq;
	struct addrinfo *ai_all, *ai_next; /* remaining addresses to try */
	struct conn_cbs cbs;
	void *data;
	enum conn_state state;
	int close_err;
	int pending;        /* handle closes + getaddrinfo still due */
	bool gai_active;
	bool silent;        /* failed inside conn_accept/connect: no callbacks */
	bool ready_called;  /* on_ready was called (with any status) */
	bool got_eof;
	bool is_pipe;
	bool verify_failed; /* peer certificate failed verification (server) */
	bool frame_timing;  /* READY: the timer runs for a frame in progress */
	unsigned frame_ms;  /* conn_set_frame_timeout, 0: none */
	SSL *ssl;
	BIO *rbio, *wbio;
	proto_decoder dec;
	struct pending_frame *pq_head, **pq_tail; /* frames sent before READY */
	size_t pq_bytes, wq_bytes;
	char peer[INET6_ADDRSTRLEN + 16];
};

static void close_impl(conn *c, int err, bool flush);
static void conn_fail(conn *c, int err, bool flush);
static void flush_wbio(conn *c);
static void timer_cb(uv_timer_t *t);
static void start_next_address(conn *c);

/* ---------- teardown ---------- */

static void free_conn(conn *c)
{
	struct pending_frame *p = c->pq_head;
	while (p) {
		struct pending_frame *n = p->next;
		free(p->buf);
		free(p);
		p = n;
	}
	if (c->ai_all)
		uv_freeaddrinfo(c->ai_all);
	if (c->ssl)
		SSL_free(c->ssl); /* frees both BIOs */
	proto_decoder_free(&c->dec);
	free(c);
}

static void maybe_finish(conn *c)
{
	if (c->pending > 0 || c->state != ST_CLOSED)
		return;
	if (!c->silent && c->cbs.on_close)
		c->cbs.on_close(c, c->close_err);
	free_conn(c);
}

static void on_handle_closed(uv_handle_t *h)
{
	conn *c = h->data;
	c->pending--;
	maybe_finish(c);
}

static void force_close(conn *c)
{
	c->state = ST_CLOSED;
	if (c->gai_active)
		uv_cancel((uv_req_t *)&c->gai); /* its callback still runs */
	if (!uv_is_closing((uv_handle_t *)&c->timer)) {
		uv_timer_stop(&c->timer);
		uv_close((uv_handle_t *)&c->timer, on_handle_closed);
	}
	if (!uv_is_closing(&c->io.h))
		uv_close(&c->io.h, on_handle_closed);
}

static void drop_pending_frames(conn *c)
{
	struct pending_frame *p = c->pq_head;
	while (p) {
		struct pending_frame *n = p->next;
		free(p->buf);
		free(p);
		p = n;
	}
	c->pq_head = NULL;
	c->pq_tail = &c->pq_head;
	c->pq_bytes = 0;
}

static void shutdown_cb(uv_shutdown_t *req, int status)
{
	conn *c = req->data;
	if (c->state != ST_CLOSING)
		return;
	/* Everything we queued is written and FIN sent. Wait for the peer's EOF
	 * unless it already came or the write side failed. */
	if (status < 0 || c->got_eof)
		force_close(c);
}

static void close_impl(conn *c, int err, bool flush)
{
	if (c->state == ST_CLOSED)
		return;
	if (c->state == ST_CLOSING) {
		if (!flush)
			force_close(c);
		return;
	}
	enum conn_state prev = c->state;
	c->close_err = err;
	c->state = ST_CLOSING;
	drop_pending_frames(c);
	if (!flush || prev < ST_HANDSHAKE) {
		force_close(c);
		return;
	}
	if (c->ssl) {
		if (SSL_is_init_finished(c->ssl)) {
			ERR_clear_error();
			SSL_shutdown(c->ssl); /* queues close_notify */
			ERR_clear_error();
		}
		flush_wbio(c); /* close_notify, or a handshake alert */
		if (c->state != ST_CLOSING)
			return;
	}
	uv_timer_stop(&c->timer);
	uv_timer_start(&c->timer, timer_cb, CONN_LINGER_MS, 0);
	c->sreq.data = c;
	if (uv_shutdown(&c->sreq, &c->io.s, shutdown_cb) < 0)
		force_close(c);
}

/* Internal failure: close, and if the owner never heard of the transport being
 * ready, tell it through on_ready(status < 0) (on_close follows from the loop). */
static void conn_fail(conn *c, int err, bool flush)
{
	bool before_ready = !c->ready_called && c->state < ST_READY;
	if (err == 0)
		err = -ECONNRESET;
	close_impl(c, err, flush);
	if (before_ready && !c->silent) {
		c->ready_called = true;
		if (c->cbs.on_ready)
			c->cbs.on_ready(c, err);
	}
}

void conn_close(conn *c, int err)
{
	if (!c)
		return;
	close_impl(c, err, err == 0);
}

/* ---------- writing ---------- */

static void write_cb(uv_write_t *req, int status)
{
	struct wreq *w = (struct wreq *)req;
	conn *c = w->c;
	c->wq_bytes -= w->len;
	free(w->buf);
	free(w);
	if (status < 0 && status != UV_ECANCELED)
		conn_fail(c, status, false);
}

/* Takes ownership of buf. */
static int write_raw(conn *c, uint8_t *buf, size_t len)
{
	if (c->state == ST_CLOSED || uv_is_closing(&c->io.h)) {
		free(buf);
		return -ENOTCONN;
	}
	struct wreq *w = malloc(sizeof *w);
	if (!w) {
		free(buf);
		conn_fail(c, -ENOMEM, false);
		return -ENOMEM;
	}
	w->c = c;
	w->buf = buf;
	w->len = len;
	uv_buf_t b = uv_buf_init((char *)buf, (unsigned)len);
	int r = uv_write(&w->req, &c->io.s, &b, 1, write_cb);
	if (r < 0) {
		free(buf);
		free(w);
		conn_fail(c, r, false);
		return r;
	}
	c->wq_bytes += len;
	return 0;
}

/* Move whatever TLS produced (records, alerts) to the socket. */
static void flush_wbio(conn *c)
{
	while (c->ssl && c->state != ST_CLOSED) {
		size_t n = BIO_ctrl_pending(c->wbio);
		if (n == 0)
			break;
		if (n > INT32_MAX)
			n = INT32_MAX;
		uint8_t *b = malloc(n);
		if (!b) {
			conn_fail(c, -ENOMEM, false);
			return;
		}
		int r = BIO_read(c->wbio, b, (int)n);
		if (r <= 0) {
			free(b);
			break;
		}
		if (write_raw(c, b, (size_t)r) < 0)
			return;
	}
}

/* Send one encoded frame now (state READY). Takes ownership of buf. */
static int send_encoded(conn *c, uint8_t *buf, size_t len)
{
	if (!c->ssl)
		return write_raw(c, buf, len);
	ERR_clear_error();
	int r = SSL_write(c->ssl, buf, (int)len);
	free(buf);
	if (r != (int)len) {
		ERR_clear_error();
		conn_fail(c, -EPROTO, false);
		return -EPROTO;
	}
	flush_wbio(c);
	return c->state == ST_CLOSED ? -ENOTCONN : 0;
}

static void flush_pending_frames(conn *c)
{
	while (c->pq_head && c->state == ST_READY) {
		struct pending_frame *p = c->pq_head;
		c->pq_head = p->next;
		if (!c->pq_head)
			c->pq_tail = &c->pq_head;
		c->pq_bytes -= p->len;
		uint8_t *buf = p->buf;
		size_t len = p->len;
		free(p);
		send_encoded(c, buf, len);
	}
}

/* Queue or send one encoded frame. Takes ownership of buf. */
static int send_frame(conn *c, uint8_t *buf, size_t len)
{
	if (c->wq_bytes + c->pq_bytes + len > CONN_WQ_MAX) {
		free(buf);
		log_warn("conn_send_backlog", "peer=%s queued=%zu", c->peer,
			 c->wq_bytes + c->pq_bytes);
		close_impl(c, -ENOBUFS, false);
		return -ENOBUFS;
	}
	if (c->state != ST_READY || c->pq_head) {
		struct pending_frame *p = malloc(sizeof *p);
		if (!p) {
			free(buf);
			return -ENOMEM;
		}
		p->next = NULL;
		p->buf = buf;
		p->len = len;
		*c->pq_tail = p;
		c->pq_tail = &p->next;
		c->pq_bytes += len;
		return 0;
	}
	return send_encoded(c, buf, len);
}

int conn_send(conn *c, const json_t *msg)
{
	if (!c || c->state >= ST_CLOSING)
		return -ENOTCONN;
	if (!msg)
		return -EINVAL;
	uint8_t *buf;
	size_t len;
	int r = proto_encode(msg, &buf, &len);
	if (r < 0)
		return r;
	r = send_frame(c, buf, len);
	if (r == 0 && c->cbs.on_sent)
		c->cbs.on_sent(c, msg);
	return r;
}

int conn_send_bin(conn *c, const json_t *msg, const void *data, size_t len)
{
	if (!c || c->state >= ST_CLOSING)
		return -ENOTCONN;
	if (!msg || (len && !data))
		return -EINVAL;
	uint8_t *buf;
	size_t n;
	int r = proto_encode_bin(msg, data, len, &buf, &n);
	if (r < 0)
		return r;
	r = send_frame(c, buf, n);
	if (r == 0 && c->cbs.on_sent)
		c->cbs.on_sent(c, msg);
	return r;
}

int conn_send_new(conn *c, json_t *msg)
{
	if (!msg)
		return -ENOMEM;
	int r = conn_send(c, msg);
	json_decref(msg);
	return r;
}

/* ---------- reading ---------- */

/* An error frame (error code `what`), sent ahead of anything queued, then the close. */
static void fail_with_error(conn *c, int err, const char *what, const char *why)
{
	json_t *e = proto_error(0, what, why);
	uint8_t *buf;
	size_t len;
	if (e && proto_encode(e, &buf, &len) == 0)
		send_encoded(c, buf, len);
	json_decref(e);
	close_impl(c, err, true);
}

static void bad_frame(conn *c, int code, const char *why)
{
	log_info("conn_bad_frame", "peer=%s reason=%s", c->peer, log_q(why));
	fail_with_error(c, code, "bad_frame", why);
}

static void process_frames(conn *c)
{
	while (c->state == ST_READY) {
		json_t *msg = NULL;
		const uint8_t *bin = NULL;
		size_t binlen = 0;
		char why[160];
		why[0] = '\0';
		int r = proto_decoder_next_bin(&c->dec, &msg, c->cbs.on_bin ? &bin : NULL, &binlen,
					       why, sizeof why);
		if (r == 0)
			break;
		if (r < 0) {
			bad_frame(c, r, why[0] ? why : "malformed frame");
			break;
		}
		if (bin)
			c->cbs.on_bin(c, msg, bin, binlen);
		else if (c->cbs.on_frame)
			c->cbs.on_frame(c, msg);
		else
			json_decref(msg);
	}
}

void conn_set_max_frame(conn *c, size_t max) { proto_decoder_limit(&c->dec, max); }

void conn_set_frame_timeout(conn *c, unsigned ms)
{
	c->frame_ms = ms;
	if (!ms && c->frame_timing) {
		uv_timer_stop(&c->timer);
		c->frame_timing = false;
	}
}

/* READY with a frame deadline: the timer runs from a frame's first byte until
 * no partial frame is left. */
static void frame_clock(conn *c)
{
	if (!c->frame_ms || c->state != ST_READY)
		return;
	bool partial = c->dec.len > 0;
	if (partial && !c->frame_timing) {
		c->frame_timing = true;
		uv_timer_start(&c->timer, timer_cb, c->frame_ms, 0);
	} else if (!partial && c->frame_timing) {
		c->frame_timing = false;
		uv_timer_stop(&c->timer);
	}
}

static void frame_timeout(conn *c)
{
	c->frame_timing = false;
	log_info("conn_frame_timeout", "peer=%s ms=%u bytes=%zu", c->peer, c->frame_ms,
		 c->dec.len);
	char why[128];
	snprintf(why, sizeof why, "request not complete within %u ms of its first byte; closed",
		 c->frame_ms);
	fail_with_error(c, -ETIMEDOUT, "timeout", why);
}

void conn_set_binary(conn *c, size_t max) { proto_decoder_binary(&c->dec, max); }

static void take_bytes(conn *c, const void *data, size_t n)
{
	if (proto_decoder_feed(&c->dec, data, n) < 0) {
		close_impl(c, -ENOMEM, false);
		return;
	}
	process_frames(c);
	frame_clock(c);
}

static void become_ready(conn *c);

/* The reason for the last OpenSSL failure; empties the error queue. */
static void ssl_reason(char *buf, size_t len)
{
	unsigned long e, last = 0;
	int sys = 0;
	while ((e = ERR_get_error()) != 0) {
		if (ERR_SYSTEM_ERROR(e))
			sys = ERR_GET_REASON(e); /* an errno, e.g. a file that cannot be opened */
		last = e;
	}
	const char *r = last ? ERR_reason_error_string(last) : NULL;
	if (r)
		snprintf(buf, len, "%s", r);
	else if (sys > 0)
		snprintf(buf, len, "%s", strerror(sys));
	else if (last)
		snprintf(buf, len, "OpenSSL error %08lX", last);
	else
		snprintf(buf, len, "protocol error");
}

static void tls_handshake(conn *c)
{
	ERR_clear_error();
	int r = SSL_do_handshake(c->ssl);
	int e = r == 1 ? SSL_ERROR_NONE : SSL_get_error(c->ssl, r);
	char why[128] = "";
	if (r != 1 && e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
		ssl_reason(why, sizeof why);
	flush_wbio(c);
	if (c->state != ST_HANDSHAKE)
		return;
	if (r == 1) {
		become_ready(c);
		return;
	}
	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
		return;
	log_info("tls_handshake_failed", "peer=%s reason=%s", c->peer, log_q(why));
	conn_fail(c, -EPROTO, true);
}

static void tls_read_app(conn *c)
{
	char buf[16384];
	while (c->state == ST_READY) {
		ERR_clear_error();
		int r = SSL_read(c->ssl, buf, sizeof buf);
		if (r > 0) {
			take_bytes(c, buf, (size_t)r);
			continue;
		}
		int e = SSL_get_error(c->ssl, r);
		if (e == SSL_ERROR_WANT_READ)
			break;
		if (e == SSL_ERROR_ZERO_RETURN) { /* peer's close_notify */
			close_impl(c, 0, true);
			break;
		}
		char why[128];
		ssl_reason(why, sizeof why);
		log_info("tls_read_failed", "peer=%s reason=%s", c->peer, log_q(why));
		close_impl(c, -EPROTO, true);
		break;
	}
	if (c->state == ST_READY)
		flush_wbio(c); /* e.g. a KeyUpdate answer */
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)suggested;
	(void)h;
	char *b = malloc(CONN_RBUF);
	/* NULL: libuv calls read_cb with UV_ENOBUFS, which closes the conn */
	*buf = uv_buf_init(b, b ? CONN_RBUF : 0);
}

static void read_bytes(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	conn *c = s->data;
	if (nread == 0 || c->state == ST_CLOSED)
		return;
	if (nread < 0 && nread == UV_EOF)
		c->got_eof = true;
	if (c->state == ST_CLOSING) { /* lingering: discard input until EOF */
		if (nread < 0)
			force_close(c);
		return;
	}
	if (nread < 0) {
		int err = nread == UV_EOF ? 0 : (int)nread;
		if (c->state < ST_READY)
			conn_fail(c, err ? err : -ECONNRESET, true);
		else
			close_impl(c, err, err == 0);
		return;
	}
	if (!c->ssl) {
		if (c->state == ST_READY)
			take_bytes(c, buf->base, (size_t)nread);
		return;
	}
	if (BIO_write(c->rbio, buf->base, (int)nread) != (int)nread) {
		conn_fail(c, -ENOMEM, false);
		return;
	}
	if (c->state == ST_HANDSHAKE)
		tls_handshake(c);
	if (c->state == ST_READY)
		tls_read_app(c);
}

/* libuv hands every buffer from alloc_cb back here, also with errors and
 * nread == 0; it is ours to free. */
static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	read_bytes(s, nread, buf);
	free(buf->base);
}

static void become_ready(conn *c)
{
	c->state = ST_READY;
	uv_timer_stop(&c->timer);
	if (!c->ssl) {
		int r = uv_read_start(&c->io.s, alloc_cb, read_cb);
		if (r < 0) {
			conn_fail(c, r, false);
			return;
		}
	}
	c->ready_called = true;
	if (c->cbs.on_ready)
		c->cbs.on_ready(c, 0);
	if (c->state == ST_READY)
		flush_pending_frames(c);
}

static void timer_cb(uv_timer_t *t)
{
	conn *c = t->data;
	switch (c->state) {
	case ST_START:
		become_ready(c);
		break;
	case ST_RESOLVE:
	case ST_CONNECT:
	case ST_HANDSHAKE:
		log_info("conn_timeout", "peer=%s", c->peer);
		conn_fail(c, -ETIMEDOUT, false);
		break;
	case ST_CLOSING:
		force_close(c);
		break;
	case ST_READY:
		if (c->frame_timing)
			frame_timeout(c);
		break;
	default:
		break;
	}
}

/* ---------- TLS verification ---------- */

static int server_verify_cb(int ok, X509_STORE_CTX *xs)
{
	SSL *ssl = X509_STORE_CTX_get_ex_data(xs, SSL_get_ex_data_X509_STORE_CTX_idx());
	conn *c = ssl ? SSL_get_app_data(ssl) : NULL;
	if (!ok && c)
		c->verify_failed = true;
	return 1; /* never abort: a joiner has no valid certificate yet */
}

static int no_password_cb(char *buf, int size, int rwflag, void *u)
{
	(void)buf;
	(void)size;
	(void)rwflag;
	(void)u;
	return -1; /* encrypted keys are not supported; never prompt on a tty */
}

static SSL_CTX *ctx_fail(SSL_CTX *ctx, char *err, size_t errlen, const char *what,
			 const char *file)
{
	char why[160];
	ssl_reason(why, sizeof why);
	if (err && errlen)
		snprintf(err, errlen, "%s%s%s: %s", what, file ? " " : "", file ? file : "", why);
	SSL_CTX_free(ctx);
	return NULL;
}

static SSL_CTX *make_ctx(bool server, const char *cert_file, const char *key_file,
			 const char *ca_file, char *err, size_t errlen)
{
	ERR_clear_error();
	if (!cert_file != !key_file || (server && !cert_file)) {
		if (err && errlen)
			snprintf(err, errlen, "%s", server ? "a TLS server needs a certificate and a key"
							    : "a certificate needs its key and vice versa");
		return NULL;
	}
	SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
	if (!ctx)
		return ctx_fail(NULL, err, errlen, "cannot create TLS context", NULL);
	if (SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) != 1 ||
	    SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION) != 1)
		return ctx_fail(ctx, err, errlen, "TLS 1.3 is not available", NULL);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	/* Agent sessions are long-lived and idle between heartbeats: let OpenSSL
	 * free each connection's ~17 KiB read and write record buffers whenever
	 * they are empty instead of holding ~34 KiB per connection for its whole
	 * life (7 workers: ~230 KiB on the head). The cost is a malloc/free per
	 * record, which is noise at one heartbeat a second. */
	SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
	if (server)
		SSL_CTX_set_num_tickets(ctx, 0);
	SSL_CTX_set_default_passwd_cb(ctx, no_password_cb);
	if (cert_file) {
		if (SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1)
			return ctx_fail(ctx, err, errlen, "cannot load certificate", cert_file);
		if (SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM) != 1)
			return ctx_fail(ctx, err, errlen, "cannot load private key", key_file);
		if (SSL_CTX_check_private_key(ctx) != 1)
			return ctx_fail(ctx, err, errlen, "private key does not match certificate",
					key_file);
	}
	if (ca_file && SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1)
		return ctx_fail(ctx, err, errlen, "cannot load CA certificate", ca_file);
	if (!ca_file)
		SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
	else if (server)
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_CLIENT_ONCE, server_verify_cb);
	else
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	ERR_clear_error();
	return ctx;
}

SSL_CTX *tls_server_ctx(const char *cert_file, const char *key_file, const char *ca_file,
			char *err, size_t errlen)
{
	return make_ctx(true, cert_file, key_file, ca_file, err, errlen);
}

SSL_CTX *tls_client_ctx(const char *cert_file, const char *key_file, const char *ca_file,
			char *err, size_t errlen)
{
	return make_ctx(false, cert_file, key_file, ca_file, err, errlen);
}

int tls_ctx_load_crl(SSL_CTX *ctx, const char *crl_file, char *err, size_t errlen)
{
	ERR_clear_error();
	BIO *bio = BIO_new_file(crl_file, "r");
	X509_CRL *crl = bio ? PEM_read_bio_X509_CRL(bio, NULL, no_password_cb, NULL) : NULL;
	BIO_free(bio);
	X509_STORE *st = SSL_CTX_get_cert_store(ctx);
	int ok = crl && st && X509_STORE_add_crl(st, crl) == 1 &&
		 X509_STORE_set_flags(st, X509_V_FLAG_CRL_CHECK) == 1;
	X509_CRL_free(crl);
	if (!ok) {
		char why[160];
		ssl_reason(why, sizeof why);
		if (err && errlen)
			snprintf(err, errlen, "cannot load revocation list %s: %s", crl_file, why);
		return -EINVAL;
	}
	return 0;
}

/* ---------- creation ---------- */

static conn *conn_new(uv_loop_t *loop, bool is_pipe, SSL_CTX *ssl_ctx, bool server,
		      const struct conn_cbs *cbs, void *data)
{
	conn *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->loop = loop;
	c->is_pipe = is_pipe;
	if (cbs)
		c->cbs = *cbs;
	c->data = data;
	c->pq_tail = &c->pq_head;
	proto_decoder_init(&c->dec);
	util_strlcpy(c->peer, is_pipe ? "unix" : "-", sizeof c->peer);
	int r = is_pipe ? uv_pipe_init(loop, &c->io.pipe, 0) : uv_tcp_init(loop, &c->io.tcp);
	if (r < 0) {
		free(c);
		return NULL;
	}
	c->io.h.data = c;
	c->pending++;
	uv_timer_init(loop, &c->timer);
	c->timer.data = c;
	c->pending++;
	c->gai.data = c;
	c->creq.data = c;
	c->sreq.data = c;
	if (ssl_ctx) {
		ERR_clear_error();
		c->ssl = SSL_new(ssl_ctx);
		c->rbio = BIO_new(BIO_s_mem());
		c->wbio = BIO_new(BIO_s_mem());
		if (!c->ssl || !c->rbio || !c->wbio) {
			BIO_free(c->rbio);
			BIO_free(c->wbio);
			c->rbio = c->wbio = NULL;
			ERR_clear_error();
			c->silent = true;
			force_close(c);
			return NULL;
		}
		BIO_set_mem_eof_return(c->rbio, -1); /* empty = retry, not EOF */
		SSL_set_bio(c->ssl, c->rbio, c->wbio);
		SSL_set_app_data(c->ssl, c);
		if (server)
			SSL_set_accept_state(c->ssl);
		else
			SSL_set_connect_state(c->ssl);
	}
	return c;
}

static void fmt_peer(const struct sockaddr *sa, char *out, size_t len)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		uv_ip4_name(in, ip, sizeof ip);
		snprintf(out, len, "%s:%u", ip, (unsigned)ntohs(in->sin_port));
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		uv_ip6_name(in6, ip, sizeof ip);
		snprintf(out, len, "[%s]:%u", ip, (unsigned)ntohs(in6->sin6_port));
	}
}

static void free_handle(uv_handle_t *h) { free(h); }

static void drop_pending_connection(uv_stream_t *server)
{
	uv_handle_t *h = malloc(sizeof(union { uv_tcp_t t; uv_pipe_t p; }));
	if (!h)
		return;
	int r = server->type == UV_NAMED_PIPE ? uv_pipe_init(server->loop, (uv_pipe_t *)h, 0)
					      : uv_tcp_init(server->loop, (uv_tcp_t *)h);
	if (r < 0) {
		free(h);
		return;
	}
	uv_accept(server, (uv_stream_t *)h);
	uv_close(h, free_handle);
}

conn *conn_accept(uv_stream_t *server, SSL_CTX *ssl_ctx, const struct conn_cbs *cbs,
		  void *data)
{
	if (!server || (server->type != UV_NAMED_PIPE && server->type != UV_TCP))
		return NULL;
	bool is_pipe = server->type == UV_NAMED_PIPE;
	conn *c = conn_new(server->loop, is_pipe, ssl_ctx, true, cbs, data);
	if (!c) {
		drop_pending_connection(server);
		return NULL;
	}
	if (uv_accept(server, &c->io.s) < 0) {
		c->silent = true;
		force_close(c);
		return NULL;
	}
	if (!is_pipe) {
		struct sockaddr_storage ss;
		int sl = sizeof ss;
		if (uv_tcp_getpeername(&c->io.tcp, (struct sockaddr *)&ss, &sl) == 0)
			fmt_peer((struct sockaddr *)&ss, c->peer, sizeof c->peer);
		uv_tcp_nodelay(&c->io.tcp, 1);
		uv_tcp_keepalive(&c->io.tcp, 1, 60);
	}
	if (c->ssl) {
		c->state = ST_HANDSHAKE;
		uv_timer_start(&c->timer, timer_cb, CONN_ACCEPT_HANDSHAKE_MS, 0);
		if (uv_read_start(&c->io.s, alloc_cb, read_cb) < 0) {
			c->silent = true;
			force_close(c);
			return NULL;
		}
	} else {
		/* on_ready from the loop, never inside conn_accept */
		c->state = ST_START;
		uv_timer_start(&c->timer, timer_cb, 0, 0);
	}
	return c;
}

static void connect_cb(uv_connect_t *req, int status)
{
	conn *c = req->data;
	if (c->state != ST_CONNECT)
		return; /* cancelled by a close */
	if (status < 0) {
		if (c->ai_next) {
			start_next_address(c);
			return;
		}
		conn_fail(c, status, false);
		return;
	}
	if (c->ai_all) {
		uv_freeaddrinfo(c->ai_all);
		c->ai_all = c->ai_next = NULL;
	}
	if (!c->is_pipe) {
		uv_tcp_nodelay(&c->io.tcp, 1);
		uv_tcp_keepalive(&c->io.tcp, 1, 60);
	}
	if (!c->ssl) {
		become_ready(c);
		return;
	}
	c->state = ST_HANDSHAKE;
	int r = uv_read_start(&c->io.s, alloc_cb, read_cb);
	if (r < 0) {
		conn_fail(c, r, false);
		return;
	}
	tls_handshake(c); /* ClientHello */
}

static int start_connect(conn *c, const struct sockaddr *sa)
{
	c->state = ST_CONNECT;
	fmt_peer(sa, c->peer, sizeof c->peer);
	return uv_tcp_connect(&c->creq, &c->io.tcp, sa, connect_cb);
}

/* A failed connect leaves the socket unusable: close the handle, and from its
 * close callback open a fresh one for the next address. */
static void reconnect_closed(uv_handle_t *h)
{
	conn *c = h->data;
	if (c->state != ST_CONNECT) { /* closed meanwhile */
		c->pending--;
		maybe_finish(c);
		return;
	}
	int r = uv_tcp_init(c->loop, &c->io.tcp);
	if (r < 0) { /* not expected: uv_tcp_init makes no socket */
		c->pending--;
		conn_fail(c, r, false);
		return;
	}
	c->io.h.data = c;
	while (c->ai_next) {
		struct addrinfo *ai = c->ai_next;
		c->ai_next = ai->ai_next;
		if (start_connect(c, ai->ai_addr) == 0)
			return;
	}
	conn_fail(c, -ECONNREFUSED, false);
}

static void start_next_address(conn *c)
{
	uv_close(&c->io.h, reconnect_closed);
}

static void gai_cb(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
	conn *c = req->data;
	c->gai_active = false;
	c->pending--;
	if (c->state != ST_RESOLVE) {
		if (res)
			uv_freeaddrinfo(res);
		maybe_finish(c);
		return;
	}
	if (status < 0 || !res) {
		if (res)
			uv_freeaddrinfo(res);
		log_info("conn_resolve_failed", "peer=%s reason=%s", c->peer,
			 log_q(uv_strerror(status)));
		conn_fail(c, -EHOSTUNREACH, false);
		return;
	}
	c->ai_all = res;
	c->ai_next = res;
	while (c->ai_next) {
		struct addrinfo *ai = c->ai_next;
		c->ai_next = ai->ai_next;
		if (start_connect(c, ai->ai_addr) == 0)
			return;
	}
	conn_fail(c, -EHOSTUNREACH, false);
}

int conn_connect_tcp(uv_loop_t *loop, const char *host, int port, SSL_CTX *ssl_ctx,
		     unsigned timeout_ms, const struct conn_cbs *cbs, void *data, conn **out)
{
	if (!loop || !host || !*host || port < 1 || port > 65535 || !out)
		return -EINVAL;
	if (strlen(host) > 255)
		return -ENAMETOOLONG;
	*out = NULL;
	conn *c = conn_new(loop, false, ssl_ctx, false, cbs, data);
	if (!c)
		return -ENOMEM;
	if (strchr(host, ':'))
		snprintf(c->peer, sizeof c->peer, "[%.50s]:%d", host, port);
	else
		snprintf(c->peer, sizeof c->peer, "%.50s:%d", host, port);
	union {
		struct sockaddr sa;
		struct sockaddr_in in;
		struct sockaddr_in6 in6;
	} addr;
	int r;
	if (uv_ip4_addr(host, port, &addr.in) == 0 || uv_ip6_addr(host, port, &addr.in6) == 0) {
		r = start_connect(c, &addr.sa);
	} else {
		char portstr[8];
		snprintf(portstr, sizeof portstr, "%d", port);
		struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
					 .ai_flags = AI_ADDRCONFIG};
		c->state = ST_RESOLVE;
		r = uv_getaddrinfo(loop, &c->gai, gai_cb, host, portstr, &hints);
		if (r == 0) {
			c->gai_active = true;
			c->pending++;
		}
	}
	if (r < 0) {
		c->silent = true;
		force_close(c);
		return r;
	}
	if (timeout_ms)
		uv_timer_start(&c->timer, timer_cb, timeout_ms, 0);
	*out = c;
	return 0;
}

int conn_connect_unix(uv_loop_t *loop, const char *path, const struct conn_cbs *cbs,
		      void *data, conn **out)
{
	if (!loop || !path || !*path || !out)
		return -EINVAL;
	if (strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path))
		return -ENAMETOOLONG;
	*out = NULL;
	conn *c = conn_new(loop, true, NULL, false, cbs, data);
	if (!c)
		return -ENOMEM;
	c->state = ST_CONNECT;
	uv_pipe_connect(&c->creq, &c->io.pipe, path, connect_cb);
	*out = c;
	return 0;
}

/* ---------- accessors ---------- */

void *conn_data(conn *c) { return c ? c->data : NULL; }

void conn_set_data(conn *c, void *data)
{
	if (c)
		c->data = data;
}

uv_loop_t *conn_loop(conn *c) { return c ? c->loop : NULL; }

int conn_fd(conn *c)
{
	uv_os_fd_t fd;
	if (!c || c->state == ST_CLOSED)
		return -EBADF;
	int r = uv_fileno(&c->io.h, &fd);
	return r < 0 ? r : (int)fd;
}

bool conn_is_tls(conn *c) { return c && c->ssl; }

const char *conn_verify_error(conn *c)
{
	if (!c || !c->ssl)
		return NULL;
	long v = SSL_get_verify_result(c->ssl);
	return v == X509_V_OK ? NULL : X509_verify_cert_error_string(v);
}

bool conn_peer_revoked(conn *c)
{
	return c && c->ssl && SSL_is_init_finished(c->ssl) && SSL_get0_peer_certificate(c->ssl) &&
	       SSL_get_verify_result(c->ssl) == X509_V_ERR_CERT_REVOKED;
}

X509 *conn_peer_cert(conn *c)
{
	if (!c || !c->ssl || !SSL_is_init_finished(c->ssl))
		return NULL;
	X509 *x = SSL_get0_peer_certificate(c->ssl);
	if (!x)
		return NULL;
	if (SSL_get_verify_mode(c->ssl) & SSL_VERIFY_PEER) {
		if (c->verify_failed || SSL_get_verify_result(c->ssl) != X509_V_OK)
			return NULL;
	}
	return x;
}

STACK_OF(X509) *conn_peer_chain(conn *c)
{
	if (!c || !c->ssl)
		return NULL;
	return SSL_get_peer_cert_chain(c->ssl);
}

const char *conn_peer_name(conn *c) { return c ? c->peer : ""; }

/* conn: one framed-JSON connection on the libuv loop, over a Unix socket or
 * TCP, optionally wrapped in TLS 1.3 (OpenSSL with memory BIOs, so the loop
 * never blocks). Every frame that arrives is decoded with proto.h and handed to
 * on_frame; a malformed frame (too large, bad JSON, missing fields) is answered
 * with an error frame (code "bad_frame") and the connection is closed: the
 * owner sees on_close(c, -EBADMSG or -EMSGSIZE) and nothing else.
 *
 * Life cycle: conn_accept()/conn_connect() -> [TLS handshake] -> on_ready ->
 * on_frame* -> on_close (exactly once, after which the conn is freed by this
 * module: do not touch it after on_close returns). conn_close() may be called
 * from any callback; it flushes queued frames first when err == 0.
 * The process must ignore SIGPIPE (libuv writes with plain write(2)). */
#ifndef SPARK_CONN_H
#define SPARK_CONN_H

#include <jansson.h>
#include <openssl/ssl.h>
#include <stdbool.h>
#include <uv.h>

typedef struct conn conn;

struct conn_cbs {
	/* Transport is ready (TLS handshake done, or at once for plain). For TLS,
	 * the owner inspects conn_peer_chain()/conn_peer_cert() here and may
	 * conn_close(). status < 0: connect or handshake failed (on_close follows). */
	void (*on_ready)(conn *c, int status);
	/* One decoded frame; the callee owns msg and must json_decref it. */
	void (*on_frame)(conn *c, json_t *msg);
	/* Exactly once. err 0 = orderly close (either side), negative errno otherwise. */
	void (*on_close)(conn *c, int err);
	/* One binary frame (proto.h; only after conn_set_binary): the callee owns
	 * msg; data is lent until it returns. NULL: binary frames are bad frames. */
	void (*on_bin)(conn *c, json_t *msg, const uint8_t *data, size_t len);
	/* Optional: every frame conn_send/conn_send_bin accepted for sending (msg
	 * borrowed), so that an owner can tell when its answers went out. */
	void (*on_sent)(conn *c, const json_t *msg);
};

/* TLS contexts (TLS 1.3 only, ECDSA P-256 keys from pki.h).
 * Server: presents cert+key (cert file may hold the chain: leaf then CA);
 *   ca_file non-NULL -> client certs are requested and verified against it but
 *   not required (a joiner has none yet): check conn_peer_cert() per message.
 * Client: presents cert+key when given (mutual TLS); ca_file non-NULL ->
 *   the server chain is verified against it (no host name check: cluster certs
 *   name node ids, not hosts); ca_file NULL -> no verification at all, the owner
 *   MUST pin the chain itself in on_ready (join: CA hash from the token).
 * Return NULL and fill err on failure. */
SSL_CTX *tls_server_ctx(const char *cert_file, const char *key_file,
			const char *ca_file, char *err, size_t errlen);
SSL_CTX *tls_client_ctx(const char *cert_file, const char *key_file,
			const char *ca_file, char *err, size_t errlen);

/* Check peers against a CRL too (PEM file signed by the context's CA): a
 * revoked leaf then fails verification on every handshake. 0 or -EINVAL. */
int tls_ctx_load_crl(SSL_CTX *ctx, const char *crl_file, char *err, size_t errlen);

/* Wrap an accepted stream. server is a listening uv_pipe_t or uv_tcp_t; ssl_ctx
 * NULL means plain. Returns NULL on failure (the pending connection is dropped). */
conn *conn_accept(uv_stream_t *server, SSL_CTX *ssl_ctx, const struct conn_cbs *cbs,
		  void *data);
/* Start a TCP connection to host:port (numeric IPv4/IPv6 or a name) with an
 * optional TLS client context. timeout_ms bounds connect + handshake. */
int conn_connect_tcp(uv_loop_t *loop, const char *host, int port, SSL_CTX *ssl_ctx,
		     unsigned timeout_ms, const struct conn_cbs *cbs, void *data,
		     conn **out);
/* Plain Unix-socket client (used by tests and tools living on the loop). */
int conn_connect_unix(uv_loop_t *loop, const char *path, const struct conn_cbs *cbs,
		      void *data, conn **out);

/* Queue a frame (msg is not stolen). 0, -ENOTCONN once closing, -EMSGSIZE.
 * -ENOBUFS when more than 32 MiB would be queued for a peer that does not
 * read: the connection is then closed (on_close(c, -ENOBUFS)). Frames sent
 * before on_ready are queued and go out after it, in order. */
int conn_send(conn *c, const json_t *msg);
/* Send then decref msg; convenient for replies. */
int conn_send_new(conn *c, json_t *msg);
/* Queue msg followed by len raw bytes as one binary frame (proto.h), for a
 * peer that accepts them. Returns as conn_send. */
int conn_send_bin(conn *c, const json_t *msg, const void *data, size_t len);
void conn_close(conn *c, int err);

/* Largest frame this peer may send (see proto_decoder_limit); 0 = PROTO_MAX_FRAME. */
void conn_set_max_frame(conn *c, size_t max);
/* Opt-in deadline on a frame in progress: once the first byte of a frame has
 * arrived, the whole frame must arrive within ms, else the peer is answered
 * with an error frame (code "timeout") and the connection is closed
 * (on_close(c, -ETIMEDOUT)). Only while READY; 0 = none (the default). */
void conn_set_frame_timeout(conn *c, unsigned ms);
/* Accept binary frames from this peer with payloads of at most max bytes
 * (0: refuse them, the default). Enable it only for an authenticated peer. */
void conn_set_binary(conn *c, size_t max);

void *conn_data(conn *c);
void conn_set_data(conn *c, void *data);
uv_loop_t *conn_loop(conn *c);
int conn_fd(conn *c);                 /* for SO_PEERCRED on Unix sockets */
bool conn_is_tls(conn *c);
/* Peer's leaf certificate (TLS only), borrowed, NULL if none was sent or it failed
 * verification against the context's CA. */
X509 *conn_peer_cert(conn *c);
/* The peer presented a certificate that the CRL loaded into the context
 * (tls_ctx_load_crl) lists. */
bool conn_peer_revoked(conn *c);
/* Why the peer's certificate failed verification (also after a failed
 * handshake), or NULL when it did not fail. */
const char *conn_verify_error(conn *c);
/* Peer's full chain as sent (TLS only), borrowed; for pinning during join.
 * (OpenSSL semantics: on the server side the chain leaves out the leaf.) */
STACK_OF(X509) *conn_peer_chain(conn *c);
/* "ADDR:PORT" of the peer for TCP, "unix" for pipes. */
const char *conn_peer_name(conn *c);

#endif

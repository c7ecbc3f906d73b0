/* hostile: peers written for the purpose of attacking sparkd, on OpenSSL and
 * plain sockets only (nothing from common/, so the tests do not share the
 * code they test).
 * - hs_server: a TLS 1.3 server on 127.0.0.1:PORT presenting a given chain
 *   file (leaf first) and key, in its own thread. It serves connections one
 *   after the other; on each it sends the frames it was given right after
 *   the handshake, then records every frame it receives until the peer
 *   closes or a per-connection time runs out.
 * - hs_client: a raw TLS client (with or without a client certificate) that
 *   sends arbitrary bytes and tells when the peer closed.
 * - frames: 4-byte big-endian length, then JSON. */
#ifndef SPARK_TEST_HOSTILE_H
#define SPARK_TEST_HOSTILE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- frames -------------------------------------------------------------- */
/* A frame of json text (the header is added). Caller frees; *len its size. */
uint8_t *hs_frame(const char *json, size_t *len);

/* ---- fake server ----------------------------------------------------------- */
struct hs_server;
/* Listen on 127.0.0.1:port (SO_REUSEADDR) presenting chain_file (PEM, leaf then
 * CA) and key_file. on_connect: NULL-terminated JSON texts sent after each
 * handshake, or NULL. conn_ms: how long one connection is served at most.
 * NULL if it cannot listen or load the keys. */
struct hs_server *hs_server_start(int port, const char *chain_file, const char *key_file,
				  const char *const *on_connect, int conn_ms);
void hs_server_stop(struct hs_server *s); /* joins the thread, closes everything */
int hs_server_accepts(struct hs_server *s);    /* TCP connections accepted */
int hs_server_handshakes(struct hs_server *s); /* TLS handshakes completed */
int hs_server_nframes(struct hs_server *s);    /* frames received, all connections */
/* The types of the frames received, comma-separated ("" when none). Caller frees. */
char *hs_server_types(struct hs_server *s);
/* true when some frame received has this type. */
bool hs_server_saw(struct hs_server *s, const char *type);
/* true when some frame received contains this text (e.g. a token secret). */
bool hs_server_saw_text(struct hs_server *s, const char *text);

/* ---- raw client ------------------------------------------------------------ */
struct hs_client;
/* TCP connect to 127.0.0.1:port and do a TLS 1.3 handshake (server not
 * verified), presenting cert_file/key_file when given. NULL when TCP or TLS
 * fails within timeout_ms. */
struct hs_client *hs_connect(int port, const char *cert_file, const char *key_file,
			     int timeout_ms);
/* Plain Unix stream socket (the control socket): same calls, no TLS. */
struct hs_client *hs_connect_unix(const char *path);
/* Send bytes. 0, or -1 when the peer is gone (EPIPE, reset, write timeout). */
int hs_send(struct hs_client *c, const void *buf, size_t n);
/* A peer that stops reading for this long counts as gone (default 3000 ms). */
void hs_set_send_timeout(struct hs_client *c, int ms);
int hs_send_frame(struct hs_client *c, const char *json);
int hs_send_header(struct hs_client *c, uint32_t len);
/* Next frame within timeout_ms: the parsed object (caller decrefs), or NULL
 * on timeout, close or garbage. */
json_t *hs_read_frame(struct hs_client *c, int timeout_ms);
/* Wait up to timeout_ms for the peer to close, discarding data. true if it did. */
bool hs_wait_closed(struct hs_client *c, int timeout_ms);
/* Non-blocking: has the peer closed (EOF, reset, or a TLS alert)? */
bool hs_peer_closed(struct hs_client *c);
void hs_close(struct hs_client *c); /* NULL is fine */
int hs_fd(const struct hs_client *c);

#endif

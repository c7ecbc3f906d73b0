/* conn: framed JSON over Unix sockets and TLS, on a real libuv loop.
 * Server and clients share one loop in this process. "Raw" clients are plain
 * non-blocking sockets driven from the test, used to send what conn_send
 * would refuse to (garbage, oversized frames). */
#include "common/conn.h"
#include "common/pki.h"
#include "common/proto.h"
#include "common/util.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* ---------- per-connection record ---------- */

#define MAXP 16

struct peer {
	conn *c;
	int ready_calls, ready_status;
	int close_calls, close_err;
	int order; /* event counter: on_ready must precede frames and on_close */
	int ready_at, first_frame_at, close_at;
	json_t *frames;         /* every frame received */
	char peer_cn[128];      /* CN of conn_peer_cert() at on_ready, "" if NULL */
	bool had_cert;
	int chain_len;
	bool chain_has_ca;      /* conn_peer_chain() holds the pinned CA */
	int send_after_close;   /* conn_send result after conn_close in on_frame */
	json_t *send_on_ready;  /* frames to send from on_ready (array) */
	int sent_calls;         /* on_sent */
};

static uv_loop_t loop_s, *loop = &loop_s;
static uv_timer_t ticker;
static union {
	uv_handle_t h;
	uv_stream_t s;
	uv_pipe_t pipe;
	uv_tcp_t tcp;
} listener;
static bool listening;
static SSL_CTX *srv_ctx;
static struct peer srv[MAXP], cli[MAXP];
static int n_srv, n_events;
static char dir[] = "/tmp/conntestXXXXXX";
static char sock_path[128];
static int tcp_port;
static char ca1_hash[PKI_HASH_HEX];
/* SPARK_TEST_SLOW=N stretches every wait N times (valgrind: 20). */
static unsigned slow = 1;
#define T(ms) ((unsigned)(ms) * slow)

static void tick(uv_timer_t *t) { (void)t; }

static void setup(void)
{
	signal(SIGPIPE, SIG_IGN); /* as every libuv program must */
	const char *sl = getenv("SPARK_TEST_SLOW");
	if (sl && atoi(sl) > 1)
		slow = (unsigned)atoi(sl);
	cr_assert_eq(uv_loop_init(loop), 0);
	uv_timer_init(loop, &ticker);
	uv_timer_start(&ticker, tick, 5, 5); /* keeps UV_RUN_ONCE from blocking long */
	cr_assert_not_null(mkdtemp(dir));
	snprintf(sock_path, sizeof sock_path, "%s/s.sock", dir);
	for (int i = 0; i < MAXP; i++) {
		srv[i].frames = json_array();
		cli[i].frames = json_array();
	}
}

static void teardown(void)
{
	for (int i = 0; i < MAXP; i++) {
		json_decref(srv[i].frames);
		json_decref(cli[i].frames);
		json_decref(cli[i].send_on_ready);
	}
	SSL_CTX_free(srv_ctx);
	char cmd[64];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd) != 0)
		cr_log_info("cannot remove %s", dir);
}

TestSuite(conn, .init = setup, .fini = teardown, .timeout = 600);

#define RUN_UNTIL(cond, ms)                                                     \
	do {                                                                    \
		uint64_t end_ = uv_now(loop) + T(ms);                            \
		while (!(cond) && uv_now(loop) < end_)                          \
			uv_run(loop, UV_RUN_ONCE);                              \
	} while (0)

/* Close everything the test opened and check that the loop ends clean. */
static void finish(void)
{
	for (int i = 0; i < MAXP; i++) {
		if (srv[i].c && srv[i].close_calls == 0)
			conn_close(srv[i].c, -ECANCELED);
		if (cli[i].c && cli[i].close_calls == 0)
			conn_close(cli[i].c, -ECANCELED);
	}
	if (listening)
		uv_close(&listener.h, NULL);
	uv_close((uv_handle_t *)&ticker, NULL);
	uv_run(loop, UV_RUN_DEFAULT);
	for (int i = 0; i < MAXP; i++) {
		cr_assert_leq(srv[i].close_calls, 1, "server %d on_close once", i);
		cr_assert_leq(cli[i].close_calls, 1, "client %d on_close once", i);
		cr_assert_leq(srv[i].ready_calls, 1);
		cr_assert_leq(cli[i].ready_calls, 1);
	}
	cr_assert_eq(uv_loop_close(loop), 0, "no handle left open");
}

/* ---------- callbacks ---------- */

static void record_tls(struct peer *p, conn *c)
{
	X509 *x = conn_peer_cert(c);
	p->had_cert = x != NULL;
	p->peer_cn[0] = '\0';
	if (x)
		pki_cert_cn(x, p->peer_cn, sizeof p->peer_cn);
	STACK_OF(X509) *chain = conn_peer_chain(c);
	p->chain_len = chain ? sk_X509_num(chain) : -1;
	for (int i = 0; chain && i < sk_X509_num(chain); i++) {
		char h[PKI_HASH_HEX];
		if (pki_spki_sha256(sk_X509_value(chain, i), h) == 0 && strcmp(h, ca1_hash) == 0)
			p->chain_has_ca = true;
	}
}

static void on_ready(conn *c, int status)
{
	struct peer *p = conn_data(c);
	p->ready_calls++;
	p->ready_status = status;
	p->ready_at = ++n_events;
	if (status == 0 && conn_is_tls(c))
		record_tls(p, c);
	size_t i;
	json_t *m;
	if (status == 0)
		json_array_foreach(p->send_on_ready, i, m)
			cr_assert_eq(conn_send(c, m), 0);
}

static void on_close(conn *c, int err)
{
	struct peer *p = conn_data(c);
	p->close_calls++;
	p->close_err = err;
	p->close_at = ++n_events;
	p->c = NULL;
}

static void cli_on_frame(conn *c, json_t *msg)
{
	struct peer *p = conn_data(c);
	if (!p->first_frame_at)
		p->first_frame_at = ++n_events;
	json_array_append_new(p->frames, msg);
}

static void srv_on_frame(conn *c, json_t *msg)
{
	struct peer *p = conn_data(c);
	if (!p->first_frame_at)
		p->first_frame_at = ++n_events;
	json_array_append(p->frames, msg);
	const char *t = proto_type(msg);
	if (strcmp(t, "echo") == 0) {
		json_t *r = json_deep_copy(msg);
		json_object_set_new(r, "peer_cn",
				    p->peer_cn[0] ? json_string(p->peer_cn) : json_null());
		cr_assert_eq(conn_send_new(c, r), 0);
	} else if (strcmp(t, "size") == 0) { /* answer with the pad length */
		json_t *r = proto_result(proto_id(msg), NULL);
		json_object_set_new(json_object_get(r, "data"), "len",
				    json_integer((json_int_t)strlen(proto_str(msg, "pad"))));
		cr_assert_eq(conn_send_new(c, r), 0);
	} else if (strcmp(t, "want_big") == 0) { /* reply with an exactly-1 MiB frame */
		json_t *r = proto_msg("big", proto_id(msg));
		json_object_set_new(r, "pad", json_string(""));
		char *s = json_dumps(r, JSON_COMPACT);
		size_t padlen = PROTO_MAX_FRAME - strlen(s);
		free(s);
		char *pad = malloc(padlen + 1);
		memset(pad, 'b', padlen);
		pad[padlen] = '\0';
		json_object_set_new(r, "pad", json_string(pad));
		free(pad);
		cr_assert_eq(conn_send_new(c, r), 0);
	} else if (strcmp(t, "close_me") == 0) {
		conn_close(c, 0);
		conn_close(c, 0); /* twice is harmless */
		p->send_after_close = conn_send(c, msg);
	}
	json_decref(msg);
}

static void srv_on_sent(conn *c, const json_t *msg)
{
	struct peer *p = conn_data(c);
	cr_assert_not_null(proto_type(msg));
	p->sent_calls++;
}

static const struct conn_cbs srv_cbs = {.on_ready = on_ready, .on_frame = srv_on_frame,
					.on_close = on_close, .on_sent = srv_on_sent};
static unsigned srv_frame_ms; /* conn_set_frame_timeout on accepted conns */
static const struct conn_cbs cli_cbs = {on_ready, cli_on_frame, on_close};

static void on_connection(uv_stream_t *server, int status)
{
	cr_assert_eq(status, 0);
	cr_assert_lt(n_srv, MAXP);
	struct peer *p = &srv[n_srv++];
	p->c = conn_accept(server, srv_ctx, &srv_cbs, p);
	cr_assert_not_null(p->c);
	if (srv_frame_ms)
		conn_set_frame_timeout(p->c, srv_frame_ms);
}

static void listen_unix(void)
{
	cr_assert_eq(uv_pipe_init(loop, &listener.pipe, 0), 0);
	cr_assert_eq(uv_pipe_bind(&listener.pipe, sock_path), 0);
	cr_assert_eq(uv_listen(&listener.s, 64, on_connection), 0);
	listening = true;
}

static void listen_tcp(void)
{
	struct sockaddr_in a;
	uv_ip4_addr("127.0.0.1", 0, &a);
	cr_assert_eq(uv_tcp_init(loop, &listener.tcp), 0);
	cr_assert_eq(uv_tcp_bind(&listener.tcp, (struct sockaddr *)&a, 0), 0);
	cr_assert_eq(uv_listen(&listener.s, 64, on_connection), 0);
	struct sockaddr_in got;
	int len = sizeof got;
	cr_assert_eq(uv_tcp_getsockname(&listener.tcp, (struct sockaddr *)&got, &len), 0);
	tcp_port = ntohs(got.sin_port);
	listening = true;
}

static json_t *msg_with(const char *type, int id, const char *key, const char *val)
{
	json_t *m = proto_msg(type, id);
	if (key)
		json_object_set_new(m, key, json_string(val));
	return m;
}

static json_t *frame_at(struct peer *p, size_t i) { return json_array_get(p->frames, i); }

/* ---------- certificates ---------- */

static char path_of_buf[8][160];
static const char *path_of(int slot, const char *name)
{
	snprintf(path_of_buf[slot], sizeof path_of_buf[slot], "%s/%s", dir, name);
	return path_of_buf[slot];
}

/* CA1 signs "head" (server, chain file) and "node-1"; CA2 signs "rogue". */
static void make_pki(void)
{
	EVP_PKEY *k1, *k2, *ks, *kc, *kr;
	X509 *ca1, *ca2, *xs, *xc, *xr;
	char serial[41];
	cr_assert_eq(pki_make_key(&k1), 0);
	cr_assert_eq(pki_make_key(&k2), 0);
	cr_assert_eq(pki_make_key(&ks), 0);
	cr_assert_eq(pki_make_key(&kc), 0);
	cr_assert_eq(pki_make_key(&kr), 0);
	cr_assert_eq(pki_make_ca("one", k1, &ca1), 0);
	cr_assert_eq(pki_make_ca("two", k2, &ca2), 0);
	cr_assert_eq(pki_issue(ca1, k1, ks, "head", 10, &xs, serial), 0);
	cr_assert_eq(pki_issue(ca1, k1, kc, "node-1", 10, &xc, serial), 0);
	cr_assert_eq(pki_issue(ca2, k2, kr, "rogue", 10, &xr, serial), 0);
	cr_assert_eq(pki_spki_sha256(ca1, ca1_hash), 0);
	cr_assert_eq(pki_write_cert(path_of(0, "ca1.pem"), ca1), 0);
	cr_assert_eq(pki_write_cert(path_of(0, "ca2.pem"), ca2), 0);
	char *leaf = pki_cert_to_pem(xs), *cap = pki_cert_to_pem(ca1);
	char *chain = malloc(strlen(leaf) + strlen(cap) + 1);
	strcpy(chain, leaf);
	strcat(chain, cap);
	cr_assert_eq(pki_write_pem_text(path_of(0, "head.pem"), chain, 0644), 0);
	free(leaf);
	free(cap);
	free(chain);
	cr_assert_eq(pki_write_key(path_of(0, "head.key"), ks), 0);
	cr_assert_eq(pki_write_cert(path_of(0, "node1.pem"), xc), 0);
	cr_assert_eq(pki_write_key(path_of(0, "node1.key"), kc), 0);
	cr_assert_eq(pki_write_cert(path_of(0, "rogue.pem"), xr), 0);
	cr_assert_eq(pki_write_key(path_of(0, "rogue.key"), kr), 0);
	X509_free(ca1);
	X509_free(ca2);
	X509_free(xs);
	X509_free(xc);
	X509_free(xr);
	EVP_PKEY_free(k1);
	EVP_PKEY_free(k2);
	EVP_PKEY_free(ks);
	EVP_PKEY_free(kc);
	EVP_PKEY_free(kr);
	char err[256] = "";
	srv_ctx = tls_server_ctx(path_of(0, "head.pem"), path_of(1, "head.key"),
				 path_of(2, "ca1.pem"), err, sizeof err);
	cr_assert_not_null(srv_ctx, "server ctx: %s", err);
}

static SSL_CTX *client_ctx(const char *cert, const char *key, const char *ca)
{
	char err[256] = "";
	SSL_CTX *ctx = tls_client_ctx(cert ? path_of(3, cert) : NULL, key ? path_of(4, key) : NULL,
				      ca ? path_of(5, ca) : NULL, err, sizeof err);
	cr_assert_not_null(ctx, "client ctx: %s", err);
	return ctx;
}

/* ---------- raw sockets ---------- */

static int raw_unix(void)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	util_strlcpy(a.sun_path, sock_path, sizeof a.sun_path);
	cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
	return fd;
}

static int raw_tcp(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	return fd;
}

/* Write everything, letting the loop run while the socket is full. Stops
 * early (returns false) if the server has gone away. */
static bool raw_write(int fd, const void *data, size_t len)
{
	const char *p = data;
	uint64_t end = uv_now(loop) + T(5000);
	while (len && uv_now(loop) < end) {
		ssize_t w = write(fd, p, len);
		if (w > 0) {
			p += w;
			len -= (size_t)w;
		} else if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
			uv_run(loop, UV_RUN_ONCE);
		} else {
			return false;
		}
	}
	return len == 0;
}

/* Read until EOF or reset (returns the bytes; *eof says how it ended). */
static uint8_t *raw_read_all(int fd, size_t *len, bool *eof)
{
	size_t cap = 1 << 16, n = 0;
	uint8_t *b = malloc(cap);
	*eof = false;
	uint64_t end = uv_now(loop) + T(5000);
	while (uv_now(loop) < end) {
		if (n == cap)
			b = realloc(b, cap *= 2);
		ssize_t r = read(fd, b + n, cap - n);
		if (r > 0) {
			n += (size_t)r;
		} else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
			*eof = true;
			break;
		} else {
			uv_run(loop, UV_RUN_ONCE);
		}
	}
	*len = n;
	return b;
}

/* Decode all frames in buf into an array (stops at the first bad one). */
static json_t *decode_all(const uint8_t *buf, size_t len)
{
	json_t *arr = json_array();
	proto_decoder d;
	proto_decoder_init(&d);
	cr_assert_eq(proto_decoder_feed(&d, buf, len), 0);
	json_t *m;
	while (proto_decoder_next(&d, &m, NULL, 0) == 1)
		json_array_append_new(arr, m);
	proto_decoder_free(&d);
	return arr;
}

static void put_frame(uint8_t *out, const char *body, uint32_t len)
{
	out[0] = (uint8_t)(len >> 24);
	out[1] = (uint8_t)(len >> 16);
	out[2] = (uint8_t)(len >> 8);
	out[3] = (uint8_t)len;
	memcpy(out + 4, body, strlen(body) < len ? strlen(body) : len);
}

/* A raw client sends bytes; the server must answer with one bad_frame error,
 * close, and report err_want through on_close. */
static void expect_bad_frame(const void *bytes, size_t len, int err_want)
{
	int before = n_srv;
	int fd = raw_unix();
	raw_write(fd, bytes, len);
	size_t n;
	bool eof;
	uint8_t *got = raw_read_all(fd, &n, &eof);
	cr_assert(eof, "server closes after a bad frame");
	json_t *frames = decode_all(got, n);
	cr_assert_eq(json_array_size(frames), 1, "exactly one reply frame, got %zu",
		     json_array_size(frames));
	json_t *e = json_array_get(frames, 0);
	cr_assert_str_eq(proto_type(e), "error");
	cr_assert_str_eq(proto_str(e, "code"), "bad_frame");
	cr_assert_not_null(proto_str(e, "message"));
	json_decref(frames);
	free(got);
	close(fd);
	RUN_UNTIL(n_srv == before + 1 && srv[before].close_calls == 1, 3000);
	cr_assert_eq(n_srv, before + 1);
	cr_assert_eq(srv[before].close_calls, 1);
	cr_assert_eq(srv[before].close_err, err_want, "on_close err %d, want %d",
		     srv[before].close_err, err_want);
	cr_assert_eq(json_array_size(srv[before].frames), 0, "no frame reached the owner");
}

/* A conn client on the Unix socket echoes one frame through the server. */
static void expect_echo_works(struct peer *p)
{
	p->send_on_ready = json_array();
	json_array_append_new(p->send_on_ready, msg_with("echo", 99, "x", "alive"));
	cr_assert_eq(conn_connect_unix(loop, sock_path, &cli_cbs, p, &p->c), 0);
	RUN_UNTIL(json_array_size(p->frames) == 1, 3000);
	cr_assert_eq(json_array_size(p->frames), 1, "server still serves");
	cr_assert_str_eq(proto_str(frame_at(p, 0), "x"), "alive");
	conn_close(p->c, 0);
	RUN_UNTIL(p->close_calls == 1, 3000);
	cr_assert_eq(p->close_err, 0);
}

/* ---------- tests ---------- */

Test(conn, plain_unix_echo)
{
	listen_unix();
	struct peer *p = &cli[0];
	cr_assert_eq(conn_connect_unix(loop, sock_path, &cli_cbs, p, &p->c), 0);
	cr_assert_eq(p->ready_calls, 0, "on_ready never runs inside connect");
	/* queued before the connection is up: must go out first, in order */
	cr_assert_eq(conn_send_new(p->c, msg_with("echo", 1, "x", "early")), 0);
	cr_assert_eq(conn_send_new(p->c, msg_with("echo", 2, "x", "second")), 0);
	/* and a large frame that cannot go out in one write */
	char *big = malloc(300001);
	memset(big, 'z', 300000);
	big[300000] = '\0';
	cr_assert_eq(conn_send_new(p->c, msg_with("echo", 3, "x", big)), 0);
	RUN_UNTIL(json_array_size(p->frames) == 3, 5000);
	cr_assert_eq(p->ready_calls, 1);
	cr_assert_eq(p->ready_status, 0);
	cr_assert_eq(json_array_size(p->frames), 3);
	cr_assert_eq(proto_id(frame_at(p, 0)), 1);
	cr_assert_str_eq(proto_str(frame_at(p, 0), "x"), "early");
	cr_assert_eq(proto_id(frame_at(p, 1)), 2);
	cr_assert_str_eq(proto_str(frame_at(p, 2), "x"), big);
	free(big);
	cr_assert(json_is_null(json_object_get(frame_at(p, 0), "peer_cn")));
	cr_assert_str_eq(conn_peer_name(p->c), "unix");
	cr_assert_not(conn_is_tls(p->c));
	cr_assert_null(conn_peer_cert(p->c));
	cr_assert_geq(conn_fd(p->c), 0);
	cr_assert_eq(conn_loop(p->c), loop);
	cr_assert_eq(n_srv, 1);
	cr_assert_eq(srv[0].ready_calls, 1);
	cr_assert_lt(srv[0].ready_at, srv[0].first_frame_at, "on_ready before frames");
	cr_assert_geq(conn_fd(srv[0].c), 0, "server side has a fd for SO_PEERCRED");
	conn_close(p->c, 0);
	cr_assert_eq(conn_send_new(p->c, msg_with("echo", 4, NULL, NULL)), -ENOTCONN);
	RUN_UNTIL(p->close_calls && srv[0].close_calls, 3000);
	cr_assert_eq(p->close_calls, 1);
	cr_assert_eq(p->close_err, 0);
	cr_assert_eq(srv[0].close_calls, 1, "server sees the orderly close");
	cr_assert_eq(srv[0].close_err, 0);
	cr_assert_eq(json_array_size(srv[0].frames), 3);
	finish();
}

Test(conn, tls_mutual_round_trip)
{
	make_pki();
	listen_tcp();
	SSL_CTX *cctx = client_ctx("node1.pem", "node1.key", "ca1.pem");
	struct peer *p = &cli[0];
	p->send_on_ready = json_array();
	json_array_append_new(p->send_on_ready, msg_with("echo", 1, "x", "hello"));
	json_array_append_new(p->send_on_ready, msg_with("want_big", 2, NULL, NULL));
	cr_assert_eq(conn_connect_tcp(loop, "127.0.0.1", tcp_port, cctx, T(5000), &cli_cbs, p, &p->c),
		     0);
	RUN_UNTIL(json_array_size(p->frames) == 2, 5000);
	cr_assert_eq(p->ready_status, 0);
	cr_assert(conn_is_tls(p->c));
	cr_assert(p->had_cert, "client sees the verified server certificate");
	cr_assert_str_eq(p->peer_cn, "head");
	char want_peer[32];
	snprintf(want_peer, sizeof want_peer, "127.0.0.1:%d", tcp_port);
	cr_assert_str_eq(conn_peer_name(p->c), want_peer);
	cr_assert_eq(json_array_size(p->frames), 2);
	cr_assert_str_eq(proto_str(frame_at(p, 0), "x"), "hello");
	cr_assert_str_eq(proto_str(frame_at(p, 0), "peer_cn"), "node-1",
			 "server sees the client's verified CN");
	char *big = json_dumps(frame_at(p, 1), JSON_COMPACT);
	cr_assert_eq(strlen(big), PROTO_MAX_FRAME, "an exactly-1 MiB frame arrives through TLS");
	free(big);
	cr_assert_str_eq(srv[0].peer_cn, "node-1");
	cr_assert(strncmp(conn_peer_name(srv[0].c), "127.0.0.1:", 10) == 0, "%s",
		  conn_peer_name(srv[0].c));

	/* client -> server: exactly the limit passes, one more byte is refused
	 * without hurting the connection */
	json_t *m = proto_msg("size", 3);
	json_object_set_new(m, "pad", json_string(""));
	char *s = json_dumps(m, JSON_COMPACT);
	size_t padlen = PROTO_MAX_FRAME - strlen(s);
	free(s);
	char *pad = malloc(padlen + 2);
	memset(pad, 'p', padlen + 1);
	pad[padlen + 1] = '\0';
	json_object_set_new(m, "pad", json_string(pad));
	cr_assert_eq(conn_send(p->c, m), -EMSGSIZE);
	pad[padlen] = '\0';
	json_object_set_new(m, "pad", json_string(pad));
	cr_assert_eq(conn_send_new(p->c, m), 0);
	free(pad);
	RUN_UNTIL(json_array_size(p->frames) == 3, 5000);
	cr_assert_eq(json_array_size(p->frames), 3);
	cr_assert_eq(proto_int(json_object_get(frame_at(p, 2), "data"), "len", 0), (json_int_t)padlen);

	conn_close(p->c, 0);
	RUN_UNTIL(p->close_calls && srv[0].close_calls, 3000);
	cr_assert_eq(p->close_err, 0);
	cr_assert_eq(srv[0].close_err, 0, "close_notify is an orderly close");
	finish();
	SSL_CTX_free(cctx);
}

Test(conn, tls_client_without_ca_sees_chain)
{
	make_pki();
	listen_tcp();
	SSL_CTX *cctx = client_ctx(NULL, NULL, NULL);
	struct peer *p = &cli[0];
	p->send_on_ready = json_array();
	json_array_append_new(p->send_on_ready, msg_with("echo", 1, "x", "pinned"));
	cr_assert_eq(conn_connect_tcp(loop, "127.0.0.1", tcp_port, cctx, T(5000), &cli_cbs, p, &p->c),
		     0);
	RUN_UNTIL(json_array_size(p->frames) == 1, 5000);
	cr_assert_eq(p->ready_status, 0);
	cr_assert_geq(p->chain_len, 2, "leaf and CA as sent by the server");
	cr_assert(p->chain_has_ca, "the CA to pin is in the chain");
	cr_assert_str_eq(p->peer_cn, "head");
	cr_assert_eq(json_array_size(p->frames), 1);
	cr_assert(json_is_null(json_object_get(frame_at(p, 0), "peer_cn")),
		  "no client certificate was sent");
	cr_assert_not(srv[0].had_cert);
	finish();
	SSL_CTX_free(cctx);
}

Test(conn, tls_client_cert_from_other_ca_is_not_trusted)
{
	make_pki();
	listen_tcp();
	SSL_CTX *cctx = client_ctx("rogue.pem", "rogue.key", "ca1.pem");
	struct peer *p = &cli[0];
	p->send_on_ready = json_array();
	json_array_append_new(p->send_on_ready, msg_with("echo", 1, "x", "who am i"));
	cr_assert_eq(conn_connect_tcp(loop, "127.0.0.1", tcp_port, cctx, T(5000), &cli_cbs, p, &p->c),
		     0);
	RUN_UNTIL(json_array_size(p->frames) == 1, 5000);
	cr_assert_eq(p->ready_status, 0, "the handshake itself succeeds");
	cr_assert_eq(json_array_size(p->frames), 1);
	cr_assert_eq(srv[0].ready_status, 0);
	cr_assert_not(srv[0].had_cert, "conn_peer_cert() is NULL for an untrusted cert");
	cr_assert(json_is_null(json_object_get(frame_at(p, 0), "peer_cn")));
	finish();
	SSL_CTX_free(cctx);
}

Test(conn, tls_client_refuses_untrusted_server)
{
	make_pki();
	listen_tcp();
	SSL_CTX *cctx = client_ctx(NULL, NULL, "ca2.pem");
	struct peer *p = &cli[0];
	cr_assert_eq(conn_connect_tcp(loop, "127.0.0.1", tcp_port, cctx, T(5000), &cli_cbs, p, &p->c),
		     0);
	RUN_UNTIL(p->close_calls == 1 && n_srv == 1 && srv[0].close_calls == 1, 5000);
	cr_assert_eq(p->ready_calls, 1);
	cr_assert_lt(p->ready_status, 0, "on_ready reports the failed handshake");
	cr_assert_eq(p->close_calls, 1);
	cr_assert_lt(p->close_err, 0);
	cr_assert_lt(p->ready_at, p->close_at, "on_ready, then on_close");
	cr_assert_eq(json_array_size(p->frames), 0);
	cr_assert_eq(srv[0].close_calls, 1);
	cr_assert_lt(srv[0].close_err, 0);
	finish();
	SSL_CTX_free(cctx);
}

Test(conn, garbage_frames_then_good_client)
{
	listen_unix();
	/* 1000 frames of random bytes in one stream */
	uint32_t seed = 12345;
	size_t cap = 1000 * 260, off = 0;
	uint8_t *buf = malloc(cap);
	for (int i = 0; i < 1000; i++) {
		seed = seed * 1103515245u + 12345u;
		uint32_t len = 1 + (seed >> 16) % 250;
		buf[off++] = 0;
		buf[off++] = 0;
		buf[off++] = (uint8_t)(len >> 8);
		buf[off++] = (uint8_t)len;
		for (uint32_t j = 0; j < len; j++) {
			seed = seed * 1103515245u + 12345u;
			buf[off++] = (uint8_t)(seed >> 24);
		}
	}
	expect_bad_frame(buf, off, -EBADMSG);
	free(buf);

	/* one connection per kind of malformed frame */
	static const struct {
		const char *body;
		uint32_t len; /* 0: strlen(body) */
		int err;
	} kinds[] = {
		{"", 0xffffffffu, -EMSGSIZE},
		{"{\"v\":1,\"type\":\"x\",\"id\":1}", PROTO_MAX_FRAME + 1, -EMSGSIZE},
		{"{\"v\":1,\"type\":\"x\",\"id\":1", 0, -EBADMSG},
		{"[1,2]", 0, -EBADMSG},
		{"{\"v\":1,\"id\":1}", 0, -EBADMSG},
		{"{\"v\":2,\"type\":\"x\",\"id\":1}", 0, -EBADMSG},
		{"{\"v\":1,\"type\":\"x\"}", 0, -EBADMSG},
	};
	for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
		uint8_t f[128] = {0};
		uint32_t len = kinds[i].len ? kinds[i].len : (uint32_t)strlen(kinds[i].body);
		put_frame(f, kinds[i].body, len);
		size_t n = 4 + (kinds[i].len ? strlen(kinds[i].body) : len);
		expect_bad_frame(f, n, kinds[i].err);
	}
	uint8_t zero[4] = {0};
	expect_bad_frame(zero, 4, -EMSGSIZE);

	expect_echo_works(&cli[0]);
	finish();
}

Test(conn, oversized_frame_gets_error_then_close)
{
	listen_unix();
	/* a full frame of 1 MiB + 1 bytes, not just its header */
	size_t len = PROTO_MAX_FRAME + 1;
	uint8_t *f = malloc(len + 4);
	memset(f + 4, ' ', len);
	put_frame(f, "{\"v\":1,\"type\":\"x\",\"id\":1}", (uint32_t)len);
	f[4 + len - 1] = '}';
	expect_bad_frame(f, len + 4, -EMSGSIZE);
	free(f);
	expect_echo_works(&cli[0]);
	finish();
}

/* conn_set_frame_timeout: a frame must arrive whole within the deadline of
 * its first byte, however the bytes trickle; an idle connection and a frame
 * in two quick parts are not affected. */
Test(conn, frame_deadline_closes_a_trickling_peer)
{
	srv_frame_ms = T(400);
	listen_unix();
	uint8_t f[64];
	const char *body = "{\"v\":1,\"type\":\"echo\",\"id\":5}";
	put_frame(f, body, (uint32_t)strlen(body));
	size_t flen = 4 + strlen(body);
	/* an idle connection outlives the deadline, then its frame in two parts is served */
	int idle = raw_unix();
	RUN_UNTIL(n_srv == 1, 3000);
	RUN_UNTIL(false, 2 * 400);
	cr_assert_eq(srv[0].close_calls, 0, "an idle connection was closed by the frame deadline");
	cr_assert(raw_write(idle, f, 10));
	RUN_UNTIL(false, 100);
	cr_assert(raw_write(idle, f + 10, flen - 10));
	RUN_UNTIL(json_array_size(srv[0].frames) == 1, 3000);
	cr_assert_eq(json_array_size(srv[0].frames), 1, "a frame in two parts was not delivered");
	RUN_UNTIL(srv[0].sent_calls == 1, 3000);
	cr_assert_eq(srv[0].sent_calls, 1, "on_sent was called %d times for one echo",
		     srv[0].sent_calls);
	/* a trickling one: a byte every 100 ms never completes its frame in time */
	int fd = raw_unix();
	RUN_UNTIL(n_srv == 2, 3000);
	uint64_t t0 = uv_now(loop);
	char pk;
	bool answered = false;
	for (size_t i = 0; i < flen && !answered; i++) {
		if (!raw_write(fd, f + i, 1))
			break;
		uint64_t end = uv_now(loop) + 100;
		while (!answered && uv_now(loop) < end) {
			uv_run(loop, UV_RUN_ONCE);
			answered = recv(fd, &pk, 1, MSG_PEEK | MSG_DONTWAIT) >= 0;
		}
	}
	uint64_t dt = uv_now(loop) - t0;
	cr_assert(answered, "a peer trickling a byte every 100 ms was not answered");
	cr_assert_geq(dt, T(400), "answered after %llu ms, before the deadline",
		      (unsigned long long)dt);
	cr_assert_lt(dt, T(400) + T(1500), "answered only after %llu ms", (unsigned long long)dt);
	size_t n;
	bool eof;
	uint8_t *got = raw_read_all(fd, &n, &eof);
	cr_assert(eof, "the connection was not closed after the timeout");
	json_t *frames = decode_all(got, n);
	cr_assert_eq(json_array_size(frames), 1, "one error frame, got %zu", json_array_size(frames));
	cr_assert_str_eq(proto_str(json_array_get(frames, 0), "code"), "timeout");
	json_decref(frames);
	free(got);
	close(fd);
	RUN_UNTIL(srv[1].close_calls == 1, 3000);
	cr_assert_eq(srv[1].close_calls, 1);
	cr_assert_eq(srv[1].close_err, -ETIMEDOUT);
	cr_assert_eq(json_array_size(srv[1].frames), 0, "no frame reached the owner");
	close(idle);
	srv_frame_ms = 0;
	finish();
}

Test(conn, garbage_to_tls_server)
{
	make_pki();
	listen_tcp();
	int fd = raw_tcp(tcp_port);
	uint8_t junk[1000];
	for (size_t i = 0; i < sizeof junk; i++)
		junk[i] = (uint8_t)(i * 37 + 11);
	raw_write(fd, junk, sizeof junk);
	size_t n;
	bool eof;
	free(raw_read_all(fd, &n, &eof));
	cr_assert(eof, "server hangs up on a non-TLS peer");
	close(fd);
	RUN_UNTIL(n_srv == 1 && srv[0].close_calls == 1, 3000);
	cr_assert_eq(srv[0].ready_calls, 1);
	cr_assert_lt(srv[0].ready_status, 0, "handshake failure reported by on_ready");
	cr_assert_lt(srv[0].close_err, 0);
	cr_assert_eq(json_array_size(srv[0].frames), 0);

	/* still serving */
	SSL_CTX *cctx = client_ctx("node1.pem", "node1.key", "ca1.pem");
	struct peer *p = &cli[0];
	p->send_on_ready = json_array();
	json_array_append_new(p->send_on_ready, msg_with("echo", 1, "x", "ok"));
	cr_assert_eq(conn_connect_tcp(loop, "127.0.0.1", tcp_port, cctx, T(5000), &cli_cbs, p, &p->c),
		     0);
	RUN_UNTIL(json_array_size(p->frames) == 1, 5000);
	cr_assert_eq(json_array_size(p->frames), 1);
	finish();
	SSL_CTX_free(cctx);
}

Test(conn, close_inside_on_frame_drops_later_frames)
{
	listen_unix();
	/* three frames in one write: the server reads them in one go */
	const char *b1 = "{\"v\":1,\"type\":\"echo\",\"id\":1}";
	const char *b2 = "{\"v\":1,\"type\":\"close_me\",\"id\":2}";
	const char *b3 = "{\"v\":1,\"type\":\"echo\",\"id\":3}";
	uint8_t buf[256];
	size_t off = 0;
	put_frame(buf + off, b1, (uint32_t)strlen(b1));
	off += 4 + strlen(b1);
	put_frame(buf + off, b2, (uint32_t)strlen(b2));
	off += 4 + strlen(b2);
	put_frame(buf + off, b3, (uint32_t)strlen(b3));
	off += 4 + strlen(b3);
	int fd = raw_unix();
	cr_assert(raw_write(fd, buf, off));
	size_t n;
	bool eof;
	uint8_t *got = raw_read_all(fd, &n, &eof);
	cr_assert(eof);
	json_t *frames = decode_all(got, n);
	cr_assert_eq(json_array_size(frames), 1, "only the reply to id 1 (queued before the close)");
	cr_assert_eq(proto_id(json_array_get(frames, 0)), 1);
	json_decref(frames);
	free(got);
	close(fd);
	RUN_UNTIL(n_srv == 1 && srv[0].close_calls == 1, 3000);
	cr_assert_eq(json_array_size(srv[0].frames), 2, "frame 3 is never delivered");
	cr_assert_eq(srv[0].close_calls, 1);
	cr_assert_eq(srv[0].close_err, 0);
	cr_assert_eq(srv[0].send_after_close, -ENOTCONN);
	finish();
}

Test(conn, close_inside_on_frame_over_tls)
{
	make_pki();
	listen_tcp();
	SSL_CTX *cctx = client_ctx("node1.pem", "node1.key", "ca1.pem");
	struct peer *p = &cli[0];
	p->send_on_ready = json_array();
	json_array_append_new(p->send_on_ready, msg_with("echo", 1, NULL, NULL));
	json_array_append_new(p->send_on_ready, msg_with("close_me", 2, NULL, NULL));
	json_array_append_new(p->send_on_ready, msg_with("echo", 3, NULL, NULL));
	cr_assert_eq(conn_connect_tcp(loop, "127.0.0.1", tcp_port, cctx, T(5000), &cli_cbs, p, &p->c),
		     0);
	RUN_UNTIL(p->close_calls == 1 && n_srv == 1 && srv[0].close_calls == 1, 5000);
	cr_assert_eq(p->close_calls, 1);
	cr_assert_eq(p->close_err, 0, "the server's close_notify is an orderly close");
	cr_assert_eq(json_array_size(p->frames), 1);
	cr_assert_eq(proto_id(frame_at(p, 0)), 1);
	cr_assert_eq(json_array_size(srv[0].frames), 2);
	cr_assert_eq(srv[0].close_err, 0);
	finish();
	SSL_CTX_free(cctx);
}

Test(conn, client_rejects_oversized_frame_from_server)
{
	/* a raw server announces a frame over the limit to a conn client */
	int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	util_strlcpy(a.sun_path, sock_path, sizeof a.sun_path);
	cr_assert_eq(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
	cr_assert_eq(listen(lfd, 4), 0);
	struct peer *p = &cli[0];
	cr_assert_eq(conn_connect_unix(loop, sock_path, &cli_cbs, p, &p->c), 0);
	RUN_UNTIL(p->ready_calls == 1, 3000);
	cr_assert_eq(p->ready_status, 0);
	int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	cr_assert_geq(fd, 0);
	uint8_t hdr[8] = {0x00, 0x10, 0x00, 0x01, '{', '"', 'v', '"'};
	cr_assert(raw_write(fd, hdr, sizeof hdr));
	size_t n;
	bool eof;
	uint8_t *got = raw_read_all(fd, &n, &eof);
	cr_assert(eof);
	json_t *frames = decode_all(got, n);
	cr_assert_eq(json_array_size(frames), 1);
	cr_assert_str_eq(proto_str(json_array_get(frames, 0), "code"), "bad_frame");
	json_decref(frames);
	free(got);
	close(fd);
	close(lfd);
	RUN_UNTIL(p->close_calls == 1, 3000);
	cr_assert_eq(p->close_err, -EMSGSIZE);
	cr_assert_eq(json_array_size(p->frames), 0);
	finish();
}

Test(conn, stalled_reader_bounds_write_queue)
{
	/* a raw server that never reads: the client's queue must not grow forever */
	int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	util_strlcpy(a.sun_path, sock_path, sizeof a.sun_path);
	cr_assert_eq(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
	cr_assert_eq(listen(lfd, 4), 0);
	struct peer *p = &cli[0];
	cr_assert_eq(conn_connect_unix(loop, sock_path, &cli_cbs, p, &p->c), 0);
	RUN_UNTIL(p->ready_calls == 1, 3000);
	json_t *m = proto_msg("blob", 1);
	char *pad = malloc(1000001);
	memset(pad, 'q', 1000000);
	pad[1000000] = '\0';
	json_object_set_new(m, "pad", json_string(pad));
	free(pad);
	int r = 0, sent = 0;
	while (sent < 100 && (r = conn_send(p->c, m)) == 0)
		sent++;
	json_decref(m);
	cr_assert_eq(r, -ENOBUFS, "send fails once too much is queued (sent %d MB)", sent);
	cr_assert(sent >= 16 && sent <= 64, "queue limit is tens of MB: %d", sent);
	RUN_UNTIL(p->close_calls == 1, 3000);
	cr_assert_eq(p->close_err, -ENOBUFS);
	close(lfd);
	finish();
}

Test(conn, connect_refused_and_timeout)
{
	/* a free port: bind, learn it, close */
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0);
	socklen_t al = sizeof a;
	getsockname(s, (struct sockaddr *)&a, &al);
	int free_port = ntohs(a.sin_port);
	close(s);
	struct peer *p = &cli[0];
	cr_assert_eq(conn_connect_tcp(loop, "127.0.0.1", free_port, NULL, T(2000), &cli_cbs, p, &p->c),
		     0);
	RUN_UNTIL(p->close_calls == 1, 3000);
	cr_assert_eq(p->ready_calls, 1);
	cr_assert_eq(p->ready_status, -ECONNREFUSED);
	cr_assert_eq(p->close_err, -ECONNREFUSED);
	cr_assert_lt(p->ready_at, p->close_at);

	/* a peer that accepts TCP but never speaks TLS: the timeout covers the handshake */
	make_pki();
	int l = socket(AF_INET, SOCK_STREAM, 0);
	a.sin_port = 0;
	cr_assert_eq(bind(l, (struct sockaddr *)&a, sizeof a), 0);
	cr_assert_eq(listen(l, 4), 0);
	al = sizeof a;
	getsockname(l, (struct sockaddr *)&a, &al);
	SSL_CTX *cctx = client_ctx(NULL, NULL, "ca1.pem");
	struct peer *q = &cli[1];
	uint64_t t0 = uv_now(loop);
	cr_assert_eq(conn_connect_tcp(loop, "127.0.0.1", ntohs(a.sin_port), cctx, 300, &cli_cbs, q,
				      &q->c),
		     0);
	RUN_UNTIL(q->close_calls == 1, 3000);
	uint64_t took = uv_now(loop) - t0;
	cr_assert_eq(q->ready_status, -ETIMEDOUT);
	cr_assert_eq(q->close_err, -ETIMEDOUT);
	cr_assert(took >= 250 && took < T(2000), "timed out after %llu ms", (unsigned long long)took);
	close(l);

	/* bad arguments fail at once, without callbacks */
	conn *c = NULL;
	cr_assert_eq(conn_connect_tcp(loop, "127.0.0.1", 0, NULL, 0, &cli_cbs, &cli[2], &c), -EINVAL);
	cr_assert_lt(conn_connect_unix(loop, "/nonexistent/dir/that/is/very/long/"
					     "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
					     "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
				     &cli_cbs, &cli[2], &c),
		     0);
	finish();
	cr_assert_eq(cli[2].ready_calls + cli[2].close_calls, 0);
	SSL_CTX_free(cctx);
}

Test(conn, connect_by_name_and_cancel)
{
	listen_tcp();
	struct peer *p = &cli[0];
	p->send_on_ready = json_array();
	json_array_append_new(p->send_on_ready, msg_with("echo", 1, "x", "named"));
	/* "localhost" may resolve to ::1 first; the server only listens on 127.0.0.1 */
	cr_assert_eq(conn_connect_tcp(loop, "localhost", tcp_port, NULL, T(3000), &cli_cbs, p, &p->c), 0);
	RUN_UNTIL(json_array_size(p->frames) == 1 || p->close_calls, 4000);
	cr_assert_eq(p->ready_status, 0);
	cr_assert_eq(json_array_size(p->frames), 1);

	/* closing while the connection is still being made: on_close once, no on_ready */
	struct peer *q = &cli[1];
	cr_assert_eq(conn_connect_tcp(loop, "localhost", tcp_port, NULL, T(3000), &cli_cbs, q, &q->c), 0);
	conn_close(q->c, 0);
	struct peer *r = &cli[2];
	cr_assert_eq(conn_connect_tcp(loop, "127.0.0.1", tcp_port, NULL, T(3000), &cli_cbs, r, &r->c), 0);
	conn_close(r->c, -ECANCELED);
	cr_assert_eq(q->close_calls + r->close_calls, 0, "on_close never runs inside conn_close");
	RUN_UNTIL(q->close_calls == 1 && r->close_calls == 1, 3000);
	cr_assert_eq(q->close_calls, 1);
	cr_assert_eq(r->close_calls, 1);
	cr_assert_eq(r->close_err, -ECANCELED);
	cr_assert_eq(q->ready_calls + r->ready_calls, 0);
	finish();
}

Test(conn, tls_context_errors)
{
	make_pki();
	char err[256] = "";
	cr_assert_null(tls_server_ctx(NULL, NULL, NULL, err, sizeof err), "server needs a cert");
	cr_assert_neq(err[0], '\0');
	err[0] = '\0';
	cr_assert_null(tls_server_ctx(path_of(0, "head.pem"), path_of(1, "node1.key"), NULL, err,
				      sizeof err),
		       "key must match the certificate");
	cr_assert_neq(err[0], '\0');
	err[0] = '\0';
	cr_assert_null(tls_client_ctx(NULL, NULL, path_of(0, "missing.pem"), err, sizeof err));
	cr_assert(strstr(err, "missing.pem"), "names the file: %s", err);
	cr_assert_null(tls_client_ctx(path_of(0, "node1.pem"), NULL, NULL, err, sizeof err));
	SSL_CTX *c = tls_client_ctx(NULL, NULL, NULL, err, sizeof err);
	cr_assert_not_null(c);
	cr_assert_eq(SSL_CTX_get_min_proto_version(c), TLS1_3_VERSION, "TLS 1.3 only");
	SSL_CTX_free(c);
	cr_assert_eq(SSL_CTX_get_min_proto_version(srv_ctx), TLS1_3_VERSION);
	uv_close((uv_handle_t *)&ticker, NULL);
	uv_run(loop, UV_RUN_DEFAULT);
	cr_assert_eq(uv_loop_close(loop), 0);
}

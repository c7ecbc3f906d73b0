/* libFuzzer target: the frames an upstream member sends a node during a model
 * push (agent/model_relay.c, the receiving side: mp_hello, mp_piece, mp_end
 * and anything else). Once per process: a small model (three files, 64 KiB
 * chunks) and its manifest. Per input: a fresh store, an engine with a push
 * of chain [src, n1] where this node is n1, and a plain Unix connection the
 * engine adopts as src's link (mr_engine_adopt: as if src's certificate had
 * been checked). The input is decoded into frames: whole chunks sent right,
 * the same with one byte flipped, pieces (binary frames) with fuzzed chunk,
 * offset and bytes, binary frames with fuzzed length words or other types,
 * pieces in the old JSON form (base64, raw strings), mp_end, more
 * hellos (some announcing another push with its chain, lanes of every
 * kind, members passed over (skip, or a skip that is not a boolean), the
 * model's name (the manifest's or another), and the manifest's text, whole
 * or cut; some a lane's hello), frames of the other direction (mp_bad with
 * give_up among them), keepalives, unknown types and raw bytes. The
 * loop runs after each; then the peer closes and the engine is closed.
 * Invariants (abort): ASan/UBSan clean; no file stands under its final name
 * in the store unless it has exactly the source's bytes; every handle closes
 * (the loop ends). */
#include "model_relay.h"

#include "proto.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64], src[128], store[128], sock[128];
static struct mm_manifest *man;
static uint8_t *content[3];
static size_t content_len[3];
static const size_t lens[3] = {700, 3 * 65536 + 11, 65536};
static uv_loop_t loop;
static char *mtext;
static struct mr_engine *eng;
static bool done;

static int rm_one(const char *p, const struct stat *st, int type, struct FTW *ftw);

static void cleanup(void)
{
	nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

static void make_model(void)
{
	snprintf(dir, sizeof dir, "/tmp/fuzz_mr.XXXXXX");
	if (!mkdtemp(dir))
		abort();
	atexit(cleanup);
	snprintf(src, sizeof src, "%s/model", dir);
	snprintf(store, sizeof store, "%s/store", dir);
	snprintf(sock, sizeof sock, "%s/s", dir);
	mkdir(src, 0755);
	static const char *names[3] = {"a.json", "b.safetensors", "c.bin"};
	uint32_t x = 1;
	for (int i = 0; i < 3; i++) {
		content[i] = malloc(lens[i]);
		content_len[i] = lens[i];
		for (size_t k = 0; k < lens[i]; k++) {
			x ^= x << 13;
			x ^= x >> 17;
			x ^= x << 5;
			content[i][k] = (uint8_t)x;
		}
		char p[256];
		snprintf(p, sizeof p, "%s/%s", src, names[i]);
		FILE *f = fopen(p, "wb");
		if (!f || fwrite(content[i], 1, lens[i], f) != lens[i])
			abort();
		fclose(f);
	}
	char err[256];
	if (mm_build(src, "fz", MM_CHUNK_MIN, &man, err, sizeof err) < 0)
		abort();
	json_t *j = mm_to_json(man);
	mtext = json_dumps(j, JSON_COMPACT);
	json_decref(j);
}

static int rm_one(const char *p, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return type == FTW_DP ? rmdir(p) : unlink(p);
}

static void on_done(void *d, int status, const json_t *report)
{
	(void)d;
	(void)status;
	(void)report;
	done = true;
}

static const struct mr_cbs cbs = {.on_done = on_done};

static void on_conn(uv_stream_t *server, int status)
{
	if (status == 0 && mr_engine_adopt(eng, server, "src") < 0)
		abort();
}

/* --- the fake upstream --- */

static int fd = -1;

static void pump_loop(void)
{
	char sink[65536];
	for (int i = 0; i < 8; i++) {
		uv_run(&loop, UV_RUN_NOWAIT);
		while (read(fd, sink, sizeof sink) > 0) {
		}
	}
}

/* Bytes as they go on the wire (the length words included). */
static void send_bytes(const void *buf, size_t len)
{
	size_t off = 0;
	while (off < len) {
		ssize_t w = write(fd, (const uint8_t *)buf + off, len - off);
		if (w < 0 && errno == EAGAIN) {
			pump_loop();
			continue;
		}
		if (w <= 0)
			return; /* the engine closed: fine */
		off += (size_t)w;
	}
	pump_loop();
}

/* A plain frame: the length word, then buf. */
static void send_raw(const void *buf, size_t len)
{
	uint8_t *f = malloc(len + 4);
	f[0] = (uint8_t)(len >> 24);
	f[1] = (uint8_t)(len >> 16);
	f[2] = (uint8_t)(len >> 8);
	f[3] = (uint8_t)len;
	memcpy(f + 4, buf, len);
	send_bytes(f, len + 4);
	free(f);
}

static void send_json(json_t *f)
{
	char *s = json_dumps(f, JSON_COMPACT);
	json_decref(f);
	if (s)
		send_raw(s, strlen(s));
	free(s);
}

/* A binary frame (proto.h): header f, then n bytes of p. */
static void send_bin(json_t *f, const uint8_t *p, size_t n)
{
	uint8_t *buf;
	size_t len;
	if (proto_encode_bin(f, p, n, &buf, &len) == 0) {
		send_bytes(buf, len);
		free(buf);
	}
	json_decref(f);
}

static void send_piece(json_int_t chunk, json_int_t off, const uint8_t *p, size_t n)
{
	json_t *f = proto_msg("mp_piece", 0);
	json_object_set_new(f, "chunk", json_integer(chunk));
	json_object_set_new(f, "off", json_integer(off));
	send_bin(f, p, n);
}

static json_t *b64(const uint8_t *p, size_t n)
{
	char *s = malloc(4 * ((n + 2) / 3) + 1);
	EVP_EncodeBlock((unsigned char *)s, p, (int)n);
	json_t *j = json_string(s);
	free(s);
	return j;
}

/* The old form: data as a JSON value (refused now). */
static void send_piece_json(json_int_t chunk, json_int_t off, json_t *datav)
{
	json_t *f = proto_msg("mp_piece", 0);
	json_object_set_new(f, "chunk", json_integer(chunk));
	json_object_set_new(f, "off", json_integer(off));
	json_object_set_new(f, "data", datav);
	send_json(f);
}

static void send_chunk(size_t c, bool flip)
{
	uint64_t off;
	uint32_t len;
	const struct mm_file *f = mm_chunk_file(man, c, &off, &len);
	const uint8_t *base = content[f - man->files] + off;
	uint8_t *tmp = malloc(len);
	memcpy(tmp, base, len);
	if (flip)
		tmp[len / 3] ^= 1;
	for (uint32_t o = 0; o < len; o += MR_PIECE) {
		uint32_t k = len - o < MR_PIECE ? len - o : MR_PIECE;
		send_piece((json_int_t)c, o, tmp + o, k);
	}
	free(tmp);
}

struct in {
	const uint8_t *p;
	size_t n;
};

static unsigned take(struct in *in)
{
	if (!in->n)
		return 0;
	in->n--;
	return *in->p++;
}

static void check_store(void)
{
	for (size_t i = 0; i < man->nfiles; i++) {
		char final[256];
		if (mm_store_paths(store, man, i, final, sizeof final, NULL, 0) < 0)
			abort();
		FILE *f = fopen(final, "rb");
		if (!f)
			continue;
		uint8_t *b = malloc(content_len[i] + 1);
		size_t got = fread(b, 1, content_len[i] + 1, f);
		fclose(f);
		if (got != content_len[i] || memcmp(b, content[i], got))
			abort(); /* a wrong byte under a final name */
		free(b);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!man) {
		signal(SIGPIPE, SIG_IGN);
		make_model();
	}
	if (size > 4096)
		return 0;
	nftw(store, rm_one, 8, FTW_DEPTH | FTW_PHYS);
	uv_loop_init(&loop);
	eng = mr_engine_new(&loop, NULL, NULL, "n1");
	mr_engine_accept(eng, store, &cbs, NULL);
	uv_pipe_t lst;
	uv_pipe_init(&loop, &lst, 0);
	unlink(sock);
	if (uv_pipe_bind(&lst, sock) < 0 || uv_listen((uv_stream_t *)&lst, 4, on_conn) < 0)
		abort();
	struct mr_member chain[2] = {{"src", "127.0.0.1", 9}, {"n1", "127.0.0.1", 9}};
	struct mr_push_opts o = {.push_id = "f00d", .m = man, .chain = chain, .nchain = 2,
				 .self = 1, .store_root = store, .up_wait_ms = 20};
	char err[256];
	done = false;
	if (mr_push_start(eng, &o, &cbs, NULL, err, sizeof err) < 0)
		abort();
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	snprintf(a.sun_path, sizeof a.sun_path, "%s", sock);
	if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0)
		abort();
	fcntl(fd, F_SETFL, O_NONBLOCK);
	pump_loop();
	struct in in = {data, size};
	if (take(&in) % 16) { /* mostly the right hello first */
		json_t *h = proto_msg("mp_hello", 0);
		json_object_set_new(h, "push", json_string("f00d"));
		json_object_set_new(h, "from", json_string("src"));
		send_json(h);
	}
	while (in.n) {
		unsigned op = take(&in) % 10;
		size_t c = take(&in) % (man->nchunks + 1);
		switch (op) {
		case 0:
		case 1:
			if (c < man->nchunks)
				send_chunk(c, op == 1);
			break;
		case 2: {
			json_int_t ch = (json_int_t)(int8_t)take(&in);
			json_int_t off = (json_int_t)((take(&in) << 8 | take(&in)) * 97) - 1000;
			size_t k = take(&in);
			k = k < in.n ? k : in.n;
			send_piece(ch, off, in.p, k);
			in.p += k;
			in.n -= k;
			break;
		}
		case 3:
			send_json(proto_msg("mp_end", 0));
			break;
		case 4: {
			/* a hello again, or one announcing push beef (with its chain
			 * and the manifest's text, right or cut short) */
			json_t *h = proto_msg("mp_hello", 0);
			json_object_set_new(h, "push", json_string(c & 1 ? "f00d" : "beef"));
			json_object_set_new(h, "from", json_string(c & 2 ? "src" : "n1"));
			size_t tl = strlen(mtext), cut = c & 4 ? tl : take(&in) % (tl + 1);
			json_object_set_new(h, "chain", json_pack("[{s:s,s:s,s:i},{s:s,s:s,s:i}]", "id",
								   "src", "host", "127.0.0.1", "port", 9,
								   "id", "n1", "host", "127.0.0.1",
								   "port", 9));
			json_object_set_new(h, "manifest_bytes", json_integer((json_int_t)tl));
			/* the model's name the ticket signs: the manifest's, or another */
			json_object_set_new(h, "name", json_string(take(&in) % 8 == 7 ? "other" : "fz"));
			if (c & 8) /* a lane's hello, or lanes of every kind in the chain */
				json_object_set_new(h, "lane", json_integer((json_int_t)(c % 3)));
			json_t *m1 = json_array_get(json_object_get(h, "chain"), 1);
			if (c & 16)
				json_object_set_new(m1, "lanes", json_pack("[s,s]", "127.0.0.1", "::1"));
			else if (c & 32)
				json_object_set_new(m1, "lanes", c & 64 ? json_pack("[i]", 5)
									: json_string("x"));
			size_t sk = take(&in); /* a member passed over (a repair round), or a bad flag */
			if (sk & 1)
				json_object_set_new(json_array_get(json_object_get(h, "chain"), sk >> 1 & 1),
						    "skip", sk & 4 ? json_true() : json_string("yes"));
			send_json(h);
			json_t *mf = proto_msg("mp_manifest", 0);
			json_object_set_new(mf, "off", json_integer(0));
			json_object_set_new(mf, "text", json_stringn(mtext, cut));
			send_json(mf);
			for (int k = 0; k < 4; k++)
				uv_run(&loop, UV_RUN_NOWAIT);
			break;
		}
		case 5: {
			static const char *types[] = {"mp_ack", "mp_need", "mp_bad", "mp_done",
						      "mp_progress", "nope", "mp_keepalive"};
			json_t *f = proto_msg(types[c % 7], 0);
			json_object_set_new(f, "chunk", json_integer((json_int_t)c));
			json_object_set_new(f, "bits", json_string("AA=="));
			if (c & 1)
				json_object_set_new(f, "give_up", json_true());
			send_json(f);
			break;
		}
		case 6: {
			size_t k = take(&in);
			k = k < in.n ? k : in.n;
			send_raw(in.p, k);
			in.p += k;
			in.n -= k;
			break;
		}
		case 7: {
			size_t k = take(&in);
			k = k < in.n ? k : in.n;
			send_piece_json((json_int_t)c, 0, c & 1 ? json_stringn((const char *)in.p, k)
							       : b64(in.p, k));
			in.p += k;
			in.n -= k;
			break;
		}
		case 8: {
			/* a binary frame's length words as the input says: a header
			 * or a payload longer or shorter than what follows */
			uint8_t w[8];
			for (int k = 0; k < 8; k++)
				w[k] = (uint8_t)take(&in);
			w[0] |= 0x80;
			send_bytes(w, sizeof w);
			size_t k = take(&in);
			k = k < in.n ? k : in.n;
			send_bytes(in.p, k);
			in.p += k;
			in.n -= k;
			break;
		}
		default: {
			/* other binary frames: another type, or fields of the wrong type */
			static const char *types[] = {"mp_piece", "mp_hello", "mp_end", "mp_ack"};
			json_t *f = proto_msg(types[c % 4], 0);
			json_object_set_new(f, "chunk", c & 4 ? json_integer(5) : json_object());
			size_t k = take(&in);
			k = k < in.n ? k : in.n;
			send_bin(f, in.p, k);
			in.p += k;
			in.n -= k;
			break;
		}
		}
	}
	close(fd);
	fd = -1;
	for (int i = 0; i < 4; i++)
		uv_run(&loop, UV_RUN_NOWAIT);
	mr_push_cancel(eng, "f00d");
	mr_engine_close(eng);
	uv_close((uv_handle_t *)&lst, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	if (uv_loop_close(&loop) != 0)
		abort(); /* a handle left open */
	check_store();
	return 0;
}

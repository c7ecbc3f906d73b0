/* model_relay: a push along a chain of four real relays on loopback, over
 * mutual TLS with cluster certificates made here: everything arrives and
 * hashes the same, a second push moves nothing, a chunk corrupted on the wire
 * is caught and sent again, a node that goes away mid-push is named while the
 * others finish and a second push completes it, and strangers (another CA, a
 * member not in the chain, a later member, no TLS at all) get nothing and
 * write nothing. */
#include "model_relay.h"

#include "conn.h"
#include "pki.h"
#include "proto.h"
#include "log.h"
#include "util.h"

#include <criterion/criterion.h>
#include <openssl/evp.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#define CS MM_CHUNK_MIN /* 64 KiB chunks: ~40 of them */
#define NN 4

static char tmp[256], src[300];
static const char *ids[NN] = {"src", "n1", "n2", "n3"};
static SSL_CTX *srv[NN], *cli[NN];
static SSL_CTX *rogue_cli, *outsider_cli, *late_cli, *nocert_cli;
static uv_loop_t loop;

static void rmtree(const char *p)
{
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", p);
	cr_assert_eq(system(cmd), 0);
}

static const char *pathf(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", tmp, name);
	return buf;
}

/* leaf then CA in NAME.crt, key in NAME.key */
static void issue(X509 *ca, EVP_PKEY *cak, const char *cn, const char *name)
{
	EVP_PKEY *k;
	X509 *x;
	char serial[41], p[400];
	cr_assert_eq(pki_make_key(&k), 0);
	cr_assert_eq(pki_issue(ca, cak, k, cn, 10, &x, serial), 0);
	char *leaf = pki_cert_to_pem(x), *cap = pki_cert_to_pem(ca);
	char *chain = malloc(strlen(leaf) + strlen(cap) + 1);
	strcpy(chain, leaf);
	strcat(chain, cap);
	snprintf(p, sizeof p, "%s/%s.crt", tmp, name);
	cr_assert_eq(pki_write_pem_text(p, chain, 0644), 0);
	snprintf(p, sizeof p, "%s/%s.key", tmp, name);
	cr_assert_eq(pki_write_key(p, k), 0);
	free(leaf);
	free(cap);
	free(chain);
	X509_free(x);
	EVP_PKEY_free(k);
}

static SSL_CTX *ctx_of(const char *name, bool server, const char *ca)
{
	char c[400], k[400], a[400], err[256] = "";
	snprintf(c, sizeof c, "%s/%s.crt", tmp, name);
	snprintf(k, sizeof k, "%s/%s.key", tmp, name);
	snprintf(a, sizeof a, "%s/%s", tmp, ca);
	SSL_CTX *x = server ? tls_server_ctx(c, k, a, err, sizeof err)
			    : tls_client_ctx(c, k, a, err, sizeof err);
	cr_assert_not_null(x, "%s", err);
	return x;
}

static void put_file(const char *rel, size_t len, unsigned seed)
{
	char p[600];
	snprintf(p, sizeof p, "%s/%s", src, rel);
	char *s = strrchr(p, '/');
	*s = 0;
	mkdir(p, 0755);
	*s = '/';
	FILE *f = fopen(p, "wb");
	cr_assert_not_null(f);
	uint32_t x = seed * 2654435761u + 7;
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		fputc((int)(x & 0xff), f);
	}
	fclose(f);
}

static void setup(void)
{
	signal(SIGPIPE, SIG_IGN);
	if (getenv("MR_DEBUG"))
		log_set_level(LOG_DEBUG);
	snprintf(tmp, sizeof tmp, "/tmp/test_mr.XXXXXX");
	cr_assert_not_null(mkdtemp(tmp));
	snprintf(src, sizeof src, "%s/model", tmp);
	mkdir(src, 0755);
	put_file("config.json", 700, 1);
	put_file("model-00001.safetensors", 20 * CS + 5, 2);
	put_file("sub/model-00002.safetensors", 17 * CS, 3);
	EVP_PKEY *k1, *k2;
	X509 *ca1, *ca2;
	char p[400];
	cr_assert_eq(pki_make_key(&k1), 0);
	cr_assert_eq(pki_make_key(&k2), 0);
	cr_assert_eq(pki_make_ca("one", k1, &ca1), 0);
	cr_assert_eq(pki_make_ca("two", k2, &ca2), 0);
	cr_assert_eq(pki_write_cert(pathf(p, sizeof p, "ca1.pem"), ca1), 0);
	for (int i = 0; i < NN; i++)
		issue(ca1, k1, ids[i], ids[i]);
	issue(ca2, k2, "n1", "rogue");     /* another cluster's "n1" */
	issue(ca1, k1, "n9", "outsider");  /* a member not in this push */
	for (int i = 0; i < NN; i++) {
		srv[i] = ctx_of(ids[i], true, "ca1.pem");
		cli[i] = ctx_of(ids[i], false, "ca1.pem");
	}
	rogue_cli = ctx_of("rogue", false, "ca1.pem");
	outsider_cli = ctx_of("outsider", false, "ca1.pem");
	late_cli = ctx_of("n3", false, "ca1.pem");
	char e2[256];
	nocert_cli = tls_client_ctx(NULL, NULL, pathf(p, sizeof p, "ca1.pem"), e2, sizeof e2);
	cr_assert_not_null(nocert_cli, "%s", e2);
	X509_free(ca1);
	X509_free(ca2);
	EVP_PKEY_free(k1);
	EVP_PKEY_free(k2);
	uv_loop_init(&loop);
}

static void stop_engines(void);

static void teardown(void)
{
	stop_engines();
	uv_loop_close(&loop);
	for (int i = 0; i < NN; i++) {
		SSL_CTX_free(srv[i]);
		SSL_CTX_free(cli[i]);
	}
	SSL_CTX_free(rogue_cli);
	SSL_CTX_free(outsider_cli);
	SSL_CTX_free(late_cli);
	SSL_CTX_free(nocert_cli);
	rmtree(tmp);
}

TestSuite(relay, .init = setup, .fini = teardown, .timeout = 60);

/* ---- a push ---- */

struct node {
	struct mr_engine *e;
	char store[300];
	bool done;
	int status;
	json_t *report;
	uint64_t progress[NN];
};
static struct node nodes[NN];
static struct mr_member chain[NN];
static struct mm_manifest *man;
static int kill_at = -1;       /* close this node's engine once it has received something */
static uint64_t kill_after;

static void on_progress(void *data, const char *node, uint64_t bytes, uint64_t total)
{
	(void)total;
	struct node *me = data;
	for (int i = 1; i < NN; i++)
		if (!strcmp(node, ids[i])) {
			if (me == &nodes[0])
				nodes[0].progress[i] = bytes;
			/* on the node itself, per chunk: "kill" it half-way */
			if (me == &nodes[i] && i == kill_at && bytes >= kill_after && nodes[i].e) {
				mr_engine_close(nodes[i].e); /* its agent dies */
				nodes[i].e = NULL;
				nodes[i].done = true;
				kill_at = -1;
			}
		}
}

static void on_done(void *data, int status, const json_t *report)
{
	struct node *n = data;
	n->done = true;
	n->status = status;
	n->report = json_deep_copy(report);
}

static const struct mr_cbs cbs = {.on_progress = on_progress, .on_done = on_done};

static void start_engines(void)
{
	char err[256];
	for (int i = 0; i < NN; i++) {
		if (nodes[i].e)
			continue;
		nodes[i].e = mr_engine_new(&loop, srv[i], cli[i], ids[i]);
		cr_assert_eq(mr_engine_listen(nodes[i].e, "127.0.0.1", 0, err, sizeof err), 0, "%s",
			     err);
		util_strlcpy(chain[i].id, ids[i], sizeof chain[i].id);
		util_strlcpy(chain[i].host, "127.0.0.1", sizeof chain[i].host);
		chain[i].port = mr_engine_port(nodes[i].e);
		snprintf(nodes[i].store, sizeof nodes[i].store, "%s/store-%s", tmp, ids[i]);
	}
}

static void stop_engines(void)
{
	for (int i = 0; i < NN; i++)
		if (nodes[i].e) {
			mr_engine_close(nodes[i].e);
			nodes[i].e = NULL;
		}
	uv_run(&loop, UV_RUN_DEFAULT);
}

/* Run one push over the chain; every node's part must end. */
static void push(const char *id, size_t corrupt_at_n1)
{
	char err[256] = "";
	if (!man)
		cr_assert_eq(mm_build(src, "tiny", CS, &man, err, sizeof err), 0, "%s", err);
	for (int i = NN - 1; i >= 0; i--) {
		json_decref(nodes[i].report);
		nodes[i].report = NULL;
		nodes[i].done = !nodes[i].e; /* a node whose engine is closed takes no part */
		if (!nodes[i].e)
			continue;
		struct mr_push_opts o = {.push_id = id, .m = man, .chain = chain, .nchain = NN,
					 .self = (size_t)i, .src_dir = src,
					 .store_root = nodes[i].store,
					 .test_corrupt = i == 1 ? corrupt_at_n1 : 0};
		cr_assert_eq(mr_push_start(nodes[i].e, &o, &cbs, &nodes[i], err, sizeof err), 0,
			     "node %d: %s", i, err);
	}
	for (int spins = 0; spins < 200000; spins++) {
		bool all = true;
		for (int i = 0; i < NN; i++)
			all = all && nodes[i].done;
		if (all)
			break;
		uv_run(&loop, UV_RUN_ONCE);
	}
	for (int i = 0; i < NN; i++)
		cr_assert(nodes[i].done, "node %s ended its part", ids[i]);
	char *r = json_dumps(nodes[0].report, JSON_COMPACT);
	cr_log_info("push %s: status %d, %s", id, nodes[0].status, r);
	free(r);
}

static json_t *report_of(const char *node)
{
	size_t i;
	json_t *r;
	json_array_foreach(nodes[0].report, i, r)
		if (!strcmp(json_string_value(json_object_get(r, "node")), node))
			return r;
	cr_assert_fail("no report for %s", node);
	return NULL;
}

static void same_content(int i)
{
	for (size_t f = 0; f < man->nfiles; f++) {
		char a[600], b[600], cmd[1400];
		snprintf(a, sizeof a, "%s/%s", src, man->files[f].path);
		snprintf(b, sizeof b, "%s/tiny/%s", nodes[i].store, man->files[f].path);
		snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
		cr_assert_eq(system(cmd), 0, "%s has the same bytes as %s", b, a);
	}
}

static void cleanup_push(void)
{
	stop_engines();
	for (int i = 0; i < NN; i++) {
		json_decref(nodes[i].report);
		nodes[i].report = NULL;
	}
	mm_free(man);
	man = NULL;
}

Test(relay, chain_copies_then_moves_nothing)
{
	start_engines();
	push("01", 0);
	cr_assert_eq(nodes[0].status, 0, "the push is complete everywhere");
	cr_assert_eq(json_array_size(nodes[0].report), 3);
	for (int i = 1; i < NN; i++) {
		json_t *r = report_of(ids[i]);
		cr_assert_str_eq(json_string_value(json_object_get(r, "status")), "complete");
		cr_assert_eq(json_integer_value(json_object_get(r, "bytes_written")),
			     (json_int_t)man->total_bytes, "%s", ids[i]);
		cr_assert_eq(nodes[0].progress[i], man->total_bytes, "progress of %s", ids[i]);
		cr_assert_eq(nodes[i].status, 0);
		same_content(i);
	}
	push("02", 0);
	cr_assert_eq(nodes[0].status, 0);
	for (int i = 1; i < NN; i++)
		cr_assert_eq(json_integer_value(json_object_get(report_of(ids[i]), "bytes_written")),
			     0, "a second push writes nothing on %s", ids[i]);
	cleanup_push();
}

static void set_lanes(const char *a0, const char *a1)
{
	for (int i = 0; i < NN; i++) {
		chain[i].nlanes = 0;
		if (a0) {
			util_strlcpy(chain[i].lanes[0], a0, sizeof chain[i].lanes[0]);
			chain[i].nlanes = 1;
		}
		if (a1) {
			util_strlcpy(chain[i].lanes[1], a1, sizeof chain[i].lanes[1]);
			chain[i].nlanes = 2;
		}
	}
}

static json_int_t by_link(const char *node, size_t k)
{
	return json_integer_value(json_array_get(json_object_get(report_of(node), "chunks_by_link"), k));
}

/* Two lanes per hop (the twins of a cable; here two links to 127.0.0.1): the
 * chunks are split over both; a lane that does not answer leaves its share to
 * the other; a first address that does not answer falls back to the host. */
Test(relay, chunks_split_over_both_lanes_and_survive_a_dead_one)
{
	start_engines();
	set_lanes("127.0.0.1", "127.0.0.1");
	push("31", 0);
	cr_assert_eq(nodes[0].status, 0, "complete everywhere over two lanes per hop");
	for (int i = 1; i < NN; i++) {
		same_content(i);
		cr_assert_gt(by_link(ids[i], 0), 0, "%s got chunks over its first link", ids[i]);
		cr_assert_gt(by_link(ids[i], 1), 0, "%s got chunks over its second lane", ids[i]);
		cr_assert_eq(by_link(ids[i], 0) + by_link(ids[i], 1), (json_int_t)man->nchunks);
	}
	char err[256];
	for (int i = 1; i < NN; i++)
		cr_assert_eq(mm_store_remove(nodes[i].store, "tiny", err, sizeof err), 0, "%s", err);
	/* 127.0.0.3: nothing listens there (the engines are on 127.0.0.1) */
	set_lanes("127.0.0.1", "127.0.0.3");
	push("32", 0);
	cr_assert_eq(nodes[0].status, 0, "complete with the second lane refused");
	for (int i = 1; i < NN; i++) {
		same_content(i);
		cr_assert_eq(by_link(ids[i], 0), (json_int_t)man->nchunks, "%s: all over one", ids[i]);
	}
	for (int i = 1; i < NN; i++)
		cr_assert_eq(mm_store_remove(nodes[i].store, "tiny", err, sizeof err), 0, "%s", err);
	set_lanes("127.0.0.3", "127.0.0.1");
	push("33", 0);
	cr_assert_eq(nodes[0].status, 0, "complete over the host when the fabric does not answer");
	for (int i = 1; i < NN; i++)
		same_content(i);
	set_lanes(NULL, NULL);
	cleanup_push();
}

Test(relay, corruption_on_the_wire_is_caught_and_repaired)
{
	start_engines();
	push("03", 5 + 1); /* n1 flips a bit of chunk 5 the first time it forwards it */
	cr_assert_eq(nodes[0].status, 0);
	json_t *r2 = report_of("n2");
	cr_assert_eq(json_integer_value(json_object_get(r2, "chunks_bad")), 1,
		     "n2 saw one bad chunk");
	cr_assert_eq(json_integer_value(json_object_get(report_of("n1"), "chunks_bad")), 0);
	/* the report names the repair: chunk 5 is chunk 4 of the second file */
	json_t *rep = json_object_get(r2, "repairs");
	cr_assert_eq(json_array_size(rep), 1, "n2 names one repair");
	json_t *x = json_array_get(rep, 0);
	cr_assert_str_eq(json_string_value(json_object_get(x, "path")), "model-00001.safetensors");
	cr_assert_eq(json_integer_value(json_object_get(x, "chunk")), 4);
	cr_assert_str_eq(json_string_value(json_object_get(x, "problem")), "corrupted on receipt");
	cr_assert_str_eq(json_string_value(json_object_get(x, "bad_from")), "n1");
	cr_assert_str_eq(json_string_value(json_object_get(x, "from")), "n1",
			 "sent again by n1, which verified it");
	cr_assert_eq(json_array_size(json_object_get(report_of("n3"), "repairs")), 0);
	for (int i = 1; i < NN; i++)
		same_content(i);
	cleanup_push();
}

/* n1 corrupts chunk 5 every time it sends it (a lying relay): n2 gives up on
 * it after 3 bad copies (mp_bad give_up: n1 stops sending it), takes the
 * rest and ends incomplete naming n1 (bad_from, corrupt_chunks); n3 lacks it
 * too. The same push again with n1 passed over (skip; its engine closed, so
 * a dial would show as "down"): the source sends to n2, n2 relays to n3, and
 * only chunk 5 moves: both complete with the source's bytes. */
Test(relay, a_relay_that_always_corrupts_is_passed_over_by_a_second_round)
{
	start_engines();
	mr_engine_test_corrupt(nodes[1].e, 5 + 1);
	push("0a", 0);
	cr_assert_neq(nodes[0].status, 0, "not complete everywhere");
	json_t *r1 = report_of("n1"), *r2 = report_of("n2"), *r3 = report_of("n3");
	cr_assert_str_eq(json_string_value(json_object_get(r1, "status")), "complete");
	cr_assert_str_eq(json_string_value(json_object_get(r2, "status")), "incomplete");
	cr_assert_str_eq(json_string_value(json_object_get(r2, "bad_from")), "n1");
	cr_assert_eq(json_integer_value(json_object_get(r2, "chunks_bad")), MR_BAD_MAX);
	cr_assert(strstr(json_string_value(json_object_get(r2, "message")), "n1"), "names n1");
	json_t *cc = json_array_get(json_object_get(r2, "corrupt_chunks"), 0);
	cr_assert_str_eq(json_string_value(json_object_get(cc, "path")), "model-00001.safetensors");
	cr_assert_eq(json_integer_value(json_object_get(cc, "chunk")), 4);
	cr_assert_eq(json_array_size(json_object_get(r2, "corrupt_chunks")), 1);
	cr_assert_eq(json_integer_value(json_object_get(r2, "chunks_written")),
		     (json_int_t)man->nchunks - 1, "n2 took every other chunk");
	cr_assert_str_eq(json_string_value(json_object_get(r3, "status")), "incomplete");
	cr_assert_null(json_object_get(r3, "bad_from"), "n3 got no bad copy itself");
	cr_assert_eq(json_integer_value(json_object_get(r3, "chunks_written")),
		     (json_int_t)man->nchunks - 1);

	mr_engine_close(nodes[1].e);
	nodes[1].e = NULL;
	chain[1].skip = true;
	push("0a", 0);
	chain[1].skip = false;
	cr_assert_eq(nodes[0].status, 0, "complete on n2 and n3");
	cr_assert_eq(json_array_size(nodes[0].report), 2, "n1 not dialled: no report of it");
	for (int i = 2; i < NN; i++) {
		json_t *r = report_of(ids[i]);
		cr_assert_str_eq(json_string_value(json_object_get(r, "status")), "complete");
		cr_assert_eq(json_integer_value(json_object_get(r, "chunks_written")), 1,
			     "only chunk 5 moved to %s", ids[i]);
		same_content(i);
	}
	cleanup_push();
}

/* Flip one byte of the second file's chunk K in node i's copy, keeping its
 * size and mtime (a disk that rots under a file recorded complete). */
static void rot(int i, size_t k)
{
	char p[600];
	snprintf(p, sizeof p, "%s/tiny/model-00001.safetensors", nodes[i].store);
	struct stat st;
	cr_assert_eq(stat(p, &st), 0);
	int fd = open(p, O_RDWR);
	cr_assert_geq(fd, 0);
	uint8_t b;
	off_t off = (off_t)(k * CS + 100);
	cr_assert_eq(pread(fd, &b, 1, off), 1);
	b ^= 0x10;
	cr_assert_eq(pwrite(fd, &b, 1, off), 1);
	struct timespec ts[2] = {st.st_atim, st.st_mtim};
	cr_assert_eq(futimens(fd, ts), 0);
	close(fd);
}

static size_t damaged(int i)
{
	json_t *bad = NULL;
	char err[256] = "";
	cr_assert_eq(mm_store_verify(nodes[i].store, "tiny", &bad, err, sizeof err), 0, "%s", err);
	size_t n = json_array_size(bad);
	json_decref(bad);
	return n;
}

static json_t *only_repair(const char *node)
{
	json_t *rep = json_object_get(report_of(node), "repairs");
	cr_assert_eq(json_array_size(rep), 1, "%s names one repair", node);
	return json_array_get(rep, 0);
}

/* A relay whose copy rotted on disk (size and mtime unchanged, so it counts
 * as held) finds out when it reads the chunk to forward it, gets it again from
 * the node before it, mends its own copy and serves the node after it; with
 * the node before it damaged too, that one asks the source in turn. */
Test(relay, a_relay_with_a_damaged_copy_fetches_it_again)
{
	char err[256];
	start_engines();
	push("41", 0);
	cr_assert_eq(nodes[0].status, 0);
	rot(1, 3);
	cr_assert_eq(damaged(1), 1, "n1's copy is damaged");
	cr_assert_eq(mm_store_remove(nodes[2].store, "tiny", err, sizeof err), 0, "%s", err);
	push("42", 0);
	cr_assert_eq(nodes[0].status, 0, "complete everywhere");
	json_t *x = only_repair("n1");
	cr_assert_str_eq(json_string_value(json_object_get(x, "path")), "model-00001.safetensors");
	cr_assert_eq(json_integer_value(json_object_get(x, "chunk")), 3);
	cr_assert_str_eq(json_string_value(json_object_get(x, "problem")), "damaged on disk");
	cr_assert_str_eq(json_string_value(json_object_get(x, "from")), "src");
	cr_assert_eq(json_integer_value(json_object_get(report_of("n1"), "bytes_written")), 0);
	cr_assert_eq(json_integer_value(json_object_get(report_of("n2"), "bytes_written")),
		     (json_int_t)man->total_bytes);
	for (int i = 1; i < NN; i++) {
		same_content(i);
		cr_assert_eq(damaged(i), 0, "%s verifies clean", ids[i]);
	}
	/* n1 and n2 both damaged at chunk 7, n3 lacks the model: n2 asks n1, n1 asks src */
	rot(1, 7);
	rot(2, 7);
	cr_assert_eq(mm_store_remove(nodes[3].store, "tiny", err, sizeof err), 0, "%s", err);
	push("43", 0);
	cr_assert_eq(nodes[0].status, 0, "complete everywhere");
	cr_assert_str_eq(json_string_value(json_object_get(only_repair("n1"), "from")), "src");
	cr_assert_str_eq(json_string_value(json_object_get(only_repair("n2"), "from")), "n1");
	cr_assert_eq(json_integer_value(json_object_get(only_repair("n2"), "chunk")), 7);
	cr_assert_eq(json_array_size(json_object_get(report_of("n3"), "repairs")), 0);
	for (int i = 1; i < NN; i++) {
		same_content(i);
		cr_assert_eq(damaged(i), 0, "%s verifies clean", ids[i]);
	}
	cleanup_push();
}

Test(relay, node_down_mid_push_then_completed)
{
	start_engines();
	kill_at = 2;
	kill_after = 8 * CS; /* n2 stops after 8 of its 39 chunks */
	push("04", 0);
	cr_assert_neq(nodes[0].status, 0, "not complete everywhere");
	cr_assert_str_eq(json_string_value(json_object_get(report_of("n2"), "status")), "down");
	cr_assert_str_eq(json_string_value(json_object_get(report_of("n1"), "status")), "complete");
	cr_assert_str_eq(json_string_value(json_object_get(report_of("n3"), "status")), "complete",
			 "n1 served n3 itself");
	same_content(1);
	same_content(3);
	/* n2 comes back: the next push resumes where it stopped */
	start_engines();
	push("05", 0);
	cr_assert_eq(nodes[0].status, 0);
	json_int_t w = json_integer_value(json_object_get(report_of("n2"), "bytes_written"));
	cr_assert_gt(w, 0);
	cr_assert_leq(w, (json_int_t)(man->total_bytes - 8 * CS),
		      "only what n2 lacked moved (%lld)", (long long)w);
	cr_assert_eq(json_integer_value(json_object_get(report_of("n3"), "bytes_written")), 0);
	same_content(2);
	cleanup_push();
}

/* ---- strangers ---- */

struct probe {
	bool ready, closed;
	char code[64];
	int lane; /* its hello asks for that lane */
};

static void pr_ready(conn *c, int status)
{
	struct probe *p = conn_data(c);
	if (status < 0)
		return;
	p->ready = true;
	json_t *h = proto_msg("mp_hello", 0);
	json_object_set_new(h, "push", json_string("77"));
	json_object_set_new(h, "from", json_string("n1"));
	if (p->lane)
		json_object_set_new(h, "lane", json_integer(p->lane));
	conn_send_new(c, h);
	/* a piece as a binary frame, and the same as JSON */
	static uint8_t junk[4096];
	json_t *pc = proto_msg("mp_piece", 0);
	json_object_set_new(pc, "chunk", json_integer(0));
	json_object_set_new(pc, "off", json_integer(0));
	conn_send_bin(c, pc, junk, sizeof junk);
	json_object_set_new(pc, "data", json_string("AAAA"));
	conn_send_new(c, pc);
}

static void pr_frame(conn *c, json_t *f)
{
	struct probe *p = conn_data(c);
	if (!strcmp(proto_type(f), "error"))
		util_strlcpy(p->code, proto_str(f, "code") ? proto_str(f, "code") : "", sizeof p->code);
	json_decref(f);
}

static void pr_close(conn *c, int err)
{
	(void)err;
	struct probe *p = conn_data(c);
	p->closed = true;
}

static const struct conn_cbs pr_cbs = {pr_ready, pr_frame, pr_close};

static void probe_lane(SSL_CTX *ctx, int port, struct probe *p, int lane)
{
	conn *c;
	memset(p, 0, sizeof *p);
	p->lane = lane;
	cr_assert_eq(conn_connect_tcp(&loop, "127.0.0.1", port, ctx, 5000, &pr_cbs, p, &c), 0);
	for (int i = 0; i < 100000 && !p->closed; i++)
		uv_run(&loop, UV_RUN_ONCE);
	cr_assert(p->closed);
}

static void probe_with(SSL_CTX *ctx, int port, struct probe *p)
{
	probe_lane(ctx, port, p, 0);
}

Test(relay, strangers_get_nothing_and_write_nothing)
{
	start_engines();
	char err[256] = "";
	cr_assert_eq(mm_build(src, "tiny", CS, &man, err, sizeof err), 0, "%s", err);
	/* n2 waits for push 77 from src -> n1 -> n2 */
	struct mr_push_opts o = {.push_id = "77", .m = man, .chain = chain, .nchain = NN,
				 .self = 2, .store_root = nodes[2].store, .up_wait_ms = 30000};
	cr_assert_eq(mr_push_start(nodes[2].e, &o, &cbs, &nodes[2], err, sizeof err), 0, "%s", err);
	struct probe p;
	probe_with(rogue_cli, chain[2].port, &p);
	cr_assert_str_eq(p.code, "unauthenticated", "another cluster's n1 is refused");
	probe_with(outsider_cli, chain[2].port, &p);
	cr_assert_str_eq(p.code, "not_upstream", "a member not in the chain");
	probe_with(late_cli, chain[2].port, &p);
	cr_assert_str_eq(p.code, "not_upstream", "a member after n2 in the chain");
	probe_lane(late_cli, chain[2].port, &p, 1);
	cr_assert_str_eq(p.code, "not_upstream", "a later member's lane");
	probe_lane(cli[1], chain[2].port, &p, 1);
	cr_assert_str_eq(p.code, "not_upstream", "the upstream's lane before its first link");
	probe_with(nocert_cli, chain[2].port, &p);
	cr_assert_str_eq(p.code, "unauthenticated", "TLS without a client certificate");
	probe_with(NULL, chain[2].port, &p);
	cr_assert_str_eq(p.code, "", "frames without TLS: no answer, closed");
	/* no TLS at all: bytes on the port */
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)chain[2].port)};
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
	const char junk[] = "\0\0\0\x20{\"v\":1,\"type\":\"mp_hello\",\"id\":0}"
			    "\x80\0\0\x20\0\0\x10\0{\"v\":1,\"type\":\"mp_piece\",\"id\":0}";
	cr_assert_gt(write(fd, junk, sizeof junk - 1), 0);
	char zeros[4096] = {0};
	cr_assert_gt(write(fd, zeros, sizeof zeros), 0);
	for (int i = 0; i < 50; i++)
		uv_run(&loop, UV_RUN_NOWAIT);
	close(fd);
	/* nothing was written: every partial file is still all zeros */
	for (size_t f = 0; f < man->nfiles; f++) {
		char part[600];
		mm_store_paths(nodes[2].store, man, f, NULL, 0, part, sizeof part);
		struct mm_have h;
		cr_assert_eq(mm_store_have(nodes[2].store, man, &h, err, sizeof err), 0);
		cr_assert_eq(h.count, 0, "no chunk of the model is on n2");
		mm_have_free(&h);
	}
	mr_push_cancel(nodes[2].e, "77");
	cr_assert(nodes[2].done);
	cr_assert_eq(nodes[2].status, -ECANCELED);
	cleanup_push();
}

/* ---- pushes announced by the hello (what sparkd does) ---- */

static void push_announced(const char *id)
{
	char err[256] = "";
	if (!man)
		cr_assert_eq(mm_build(src, "tiny", CS, &man, err, sizeof err), 0, "%s", err);
	for (int i = 0; i < NN; i++) {
		json_decref(nodes[i].report);
		nodes[i].report = NULL;
		nodes[i].done = false;
		if (i > 0)
			mr_engine_accept(nodes[i].e, nodes[i].store, &cbs, &nodes[i]);
	}
	struct mr_push_opts o = {.push_id = id, .m = man, .chain = chain, .nchain = NN, .self = 0,
				 .src_dir = src};
	cr_assert_eq(mr_push_start(nodes[0].e, &o, &cbs, &nodes[0], err, sizeof err), 0, "%s", err);
	for (int spins = 0; spins < 200000 && !nodes[0].done; spins++)
		uv_run(&loop, UV_RUN_ONCE);
	cr_assert(nodes[0].done);
	for (int spins = 0; spins < 2000; spins++) /* the others' last frames */
		uv_run(&loop, UV_RUN_NOWAIT);
	char *r = json_dumps(nodes[0].report, JSON_COMPACT);
	cr_log_info("push %s: status %d, %s", id, nodes[0].status, r);
	free(r);
}

Test(relay, announced_push_reaches_every_node)
{
	start_engines();
	push_announced("a1");
	cr_assert_eq(nodes[0].status, 0);
	for (int i = 1; i < NN; i++) {
		cr_assert_str_eq(json_string_value(json_object_get(report_of(ids[i]), "status")),
				 "complete");
		cr_assert(nodes[i].done, "%s ended its part", ids[i]);
		same_content(i);
	}
	push_announced("a2");
	cr_assert_eq(nodes[0].status, 0);
	for (int i = 1; i < NN; i++)
		cr_assert_eq(json_integer_value(json_object_get(report_of(ids[i]), "bytes_written")),
			     0);
	cleanup_push();
}

Test(relay, a_node_without_room_refuses_before_the_first_byte)
{
	start_engines();
	mr_engine_test_avail(nodes[2].e, 1000);
	push_announced("a3");
	cr_assert_eq(nodes[0].status, -ENOSPC);
	json_t *r2 = report_of("n2");
	cr_assert_str_eq(json_string_value(json_object_get(r2, "status")), "failed");
	const char *m = json_string_value(json_object_get(r2, "message"));
	char want[64];
	snprintf(want, sizeof want, "%llu bytes", (unsigned long long)man->total_bytes);
	/* the report's row names the node; its message says "this node", not
	 * an id (issue 28), and a small size is not "0.0 GiB" */
	cr_assert(strstr(m, "this node lacks room") && strstr(m, want) && strstr(m, "1000 bytes") &&
		  !strstr(m, "0.0 GiB"), "%s", m);
	char err[256];
	for (int i = 1; i < NN; i++) {
		struct mm_have h;
		cr_assert_eq(mm_store_have(nodes[i].store, man, &h, err, sizeof err), 0);
		cr_assert_eq(h.count, 0, "no chunk reached %s", ids[i]);
		mm_have_free(&h);
	}
	cleanup_push();
}

Test(relay, announced_push_refuses_a_lying_chain)
{
	start_engines();
	for (int i = 1; i < NN; i++)
		mr_engine_accept(nodes[i].e, nodes[i].store, &cbs, &nodes[i]);
	char err[256] = "";
	cr_assert_eq(mm_build(src, "tiny", CS, &man, err, sizeof err), 0, "%s", err);
	/* the outsider n9 announces a push whose chain says "src" is first: its
	 * certificate says n9 */
	struct mr_member fake[2];
	fake[0] = chain[0];
	fake[1] = chain[1];
	struct mr_engine *rogue = mr_engine_new(&loop, srv[0], outsider_cli, "n9");
	struct mr_push_opts o = {.push_id = "a4", .m = man, .chain = fake, .nchain = 2, .self = 0,
				 .src_dir = src};
	struct node rn = {0};
	cr_assert_eq(mr_push_start(rogue, &o, &cbs, &rn, err, sizeof err), 0, "%s", err);
	for (int spins = 0; spins < 100000 && !rn.done; spins++)
		uv_run(&loop, UV_RUN_ONCE);
	cr_assert_neq(rn.status, 0, "refused");
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(rn.report, 0), "status")),
			 "down");
	json_decref(rn.report);
	struct mm_have h;
	cr_assert_eq(mm_store_have(nodes[1].store, man, &h, err, sizeof err), 0);
	cr_assert_eq(h.count, 0, "nothing written on n1");
	mm_have_free(&h);
	mr_engine_close(rogue);
	cleanup_push();
}

/* ---- the head's permission ---- */

static int test_verify(void *data, const char *text, const char *ticket, int64_t expires_at)
{
	(void)data;
	(void)expires_at;
	/* the test's "signature": the text itself with its newlines as '|' */
	char want[512];
	snprintf(want, sizeof want, "%s", text);
	for (char *c = want; *c; c++)
		if (*c == '\n')
			*c = '|';
	return strcmp(want, ticket) ? -EACCES : 0;
}

static json_int_t pushed_with(const char *id, const char *ticket)
{
	char err[256] = "";
	if (!man)
		cr_assert_eq(mm_build(src, "tiny", CS, &man, err, sizeof err), 0, "%s", err);
	for (int i = 0; i < NN; i++) {
		json_decref(nodes[i].report);
		nodes[i].report = NULL;
		nodes[i].done = false;
		if (i > 0) {
			mr_engine_accept(nodes[i].e, nodes[i].store, &cbs, &nodes[i]);
			mr_engine_verify(nodes[i].e, test_verify, NULL);
		}
	}
	struct mr_push_opts o = {.push_id = id, .m = man, .chain = chain, .nchain = NN, .self = 0,
				 .src_dir = src, .ticket = ticket, .expires_at = 99};
	cr_assert_eq(mr_push_start(nodes[0].e, &o, &cbs, &nodes[0], err, sizeof err), 0, "%s", err);
	for (int spins = 0; spins < 200000 && !nodes[0].done; spins++)
		uv_run(&loop, UV_RUN_ONCE);
	cr_assert(nodes[0].done);
	return nodes[0].status;
}

Test(relay, announced_pushes_need_the_heads_permission)
{
	start_engines();
	char *text = mr_ticket_text("b1", "tiny", 99, chain, NN);
	cr_assert_str_eq(text, "sparkctl-push-v1\nb1\ntiny\n99\nsrc,n1,n2,n3");
	for (char *c = text; *c; c++)
		if (*c == '\n')
			*c = '|';
	cr_assert_eq(pushed_with("b1", text), 0, "a push with its permission");
	for (int i = 1; i < NN; i++)
		same_content(i);
	char err[256];
	for (int i = 1; i < NN; i++) /* start the refused ones from empty stores */
		cr_assert_eq(mm_store_remove(nodes[i].store, "tiny", err, sizeof err), 0, "%s", err);
	cr_assert_eq(pushed_with("b2", text), -EACCES, "b1's permission is not b2's");
	json_t *r1 = report_of("n1");
	cr_assert_str_eq(json_string_value(json_object_get(r1, "status")), "failed");
	cr_assert(strstr(json_string_value(json_object_get(r1, "message")), "no valid permission"));
	cr_assert_eq(pushed_with("b3", NULL), -EACCES, "no permission at all");
	free(text);
	/* nothing of b2 or b3 was written, not even the record */
	for (int i = 1; i < NN; i++) {
		struct mm_have h;
		cr_assert_eq(mm_store_have(nodes[i].store, man, &h, err, sizeof err), 0);
		cr_assert_eq(h.count, 0, "no chunk on %s", ids[i]);
		mm_have_free(&h);
		json_t *list;
		cr_assert_eq(mm_store_list(nodes[i].store, &list, err, sizeof err), 0);
		cr_assert_eq(json_array_size(list), 0, "no model recorded on %s", ids[i]);
		json_decref(list);
	}
	cleanup_push();
}

/* ---- a member that sends the model's own bytes before it may ---- */

struct member_probe {
	struct probe pr;
	const char *push, *ticket;
};

/* src's hello announcing push ID of `tiny` (chain src, n1) with the ticket
 * given (NULL: none) and manifest_bytes. */
static json_t *src_hello(const char *id, const char *ticket, json_int_t mbytes)
{
	json_t *h = proto_msg("mp_hello", 0);
	json_object_set_new(h, "push", json_string(id));
	json_object_set_new(h, "from", json_string("src"));
	json_t *ch = json_array();
	for (int i = 0; i < 2; i++)
		json_array_append_new(ch, json_pack("{s:s, s:s, s:i}", "id", chain[i].id, "host",
						    chain[i].host, "port", chain[i].port));
	json_object_set_new(h, "chain", ch);
	json_object_set_new(h, "name", json_string("tiny"));
	json_object_set_new(h, "manifest_bytes", json_integer(mbytes));
	if (ticket)
		json_object_set_new(h, "ticket", json_string(ticket));
	json_object_set_new(h, "expires_at", json_integer(99));
	return h;
}

/* As src: the hello of an announced push with the given ticket, the manifest,
 * then at once every chunk of the model as binary pieces (the right bytes),
 * without waiting for n1's mp_need. */
static void mp_ready(conn *c, int status)
{
	struct member_probe *mp = conn_data(c);
	if (status < 0)
		return;
	mp->pr.ready = true;
	json_t *mj = mm_to_json(man);
	char *text = json_dumps(mj, JSON_COMPACT);
	json_decref(mj);
	conn_send_new(c, src_hello(mp->push, mp->ticket, (json_int_t)strlen(text)));
	json_t *mf = proto_msg("mp_manifest", 0);
	json_object_set_new(mf, "off", json_integer(0));
	json_object_set_new(mf, "text", json_string(text));
	conn_send_new(c, mf);
	free(text);
	uint8_t *buf = malloc(CS);
	char err[256];
	for (size_t k = 0; k < man->nchunks; k++) {
		uint32_t len;
		cr_assert_eq(mm_read_chunk(man, src, k, buf, &len, err, sizeof err), 0, "%s", err);
		json_t *pc = proto_msg("mp_piece", 0);
		json_object_set_new(pc, "chunk", json_integer((json_int_t)k));
		json_object_set_new(pc, "off", json_integer(0));
		conn_send_bin(c, pc, buf, len);
		json_decref(pc);
	}
	free(buf);
}

static const struct conn_cbs mp_cbs = {mp_ready, pr_frame, pr_close};

Test(relay, a_member_without_permission_sends_binary_pieces_and_writes_nothing)
{
	start_engines();
	char err[256] = "";
	if (!man)
		cr_assert_eq(mm_build(src, "tiny", CS, &man, err, sizeof err), 0, "%s", err);
	mr_engine_accept(nodes[1].e, nodes[1].store, &cbs, &nodes[1]);
	mr_engine_verify(nodes[1].e, test_verify, NULL);
	char good[512];
	char *t = mr_ticket_text("c2", "tiny", 99, chain, 2);
	snprintf(good, sizeof good, "%s", t);
	free(t);
	for (char *c = good; *c; c++)
		if (*c == '\n')
			*c = '|';
	struct {
		const char *push, *ticket, *code, *why;
	} cases[] = {
	    {"c1", "not-a-signature", "not_authorized", "a wrong ticket"},
	    {"c3", good, "not_authorized", "c2's ticket for push c3"},
	    {"c2", good, "bad_frame", "the right ticket, pieces before n1 asked for them"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct member_probe mp = {.push = cases[i].push, .ticket = cases[i].ticket};
		conn *c;
		cr_assert_eq(conn_connect_tcp(&loop, "127.0.0.1", chain[1].port, cli[0], 5000,
					      &mp_cbs, &mp, &c), 0);
		for (int k = 0; k < 100000 && !mp.pr.closed; k++)
			uv_run(&loop, UV_RUN_ONCE);
		for (int k = 0; k < 200; k++) /* n1's preparation, if one began */
			uv_run(&loop, UV_RUN_NOWAIT);
		cr_assert(mp.pr.ready && mp.pr.closed);
		cr_assert_str_eq(mp.pr.code, cases[i].code, "%s", cases[i].why);
		struct mm_have h;
		cr_assert_eq(mm_store_have(nodes[1].store, man, &h, err, sizeof err), 0);
		cr_assert_eq(h.count, 0, "%s: no chunk on n1", cases[i].why);
		mm_have_free(&h);
		char final[600];
		for (size_t f = 0; f < man->nfiles; f++) {
			struct stat st;
			mm_store_paths(nodes[1].store, man, f, final, sizeof final, NULL, 0);
			cr_assert_neq(stat(final, &st), 0, "%s: no final file %s", cases[i].why, final);
		}
	}
	cleanup_push();
}

/* ---- a downstream member that keeps asking for a chunk again ---- */

struct greedy {
	uv_tcp_t lst;
	conn *c;
	int copies;      /* chunk 0 received */
	char code[64];
	bool closed;
};

static void gr_want(conn *c)
{
	json_t *w = proto_msg("mp_want", 0);
	json_object_set_new(w, "chunk", json_integer(0));
	conn_send_new(c, w);
}

static void gr_frame(conn *c, json_t *f)
{
	struct greedy *g = conn_data(c);
	const char *t = proto_type(f);
	if (!strcmp(t, "mp_hello")) {
		conn_set_max_frame(c, 0);
		conn_set_binary(c, MR_PIECE);
		/* it needs nothing, then asks for chunk 0 "again" */
		size_t nb = (man->nchunks + 7) / 8;
		char *zeros = calloc(nb + 3, 1), *b = malloc(4 * (nb + 2) / 3 + 8);
		EVP_EncodeBlock((unsigned char *)b, (unsigned char *)zeros, (int)nb);
		json_t *n = proto_msg("mp_need", 0);
		json_object_set_new(n, "node", json_string("n1"));
		json_object_set_new(n, "bits", json_string(b));
		conn_send_new(c, n);
		free(zeros);
		free(b);
		gr_want(c);
	} else if (!strcmp(t, "error")) {
		util_strlcpy(g->code, proto_str(f, "code") ? proto_str(f, "code") : "", sizeof g->code);
	}
	json_decref(f);
}

static void gr_bin(conn *c, json_t *f, const uint8_t *data, size_t len)
{
	(void)data;
	(void)len;
	struct greedy *g = conn_data(c);
	if (!strcmp(proto_type(f), "mp_piece") && proto_int(f, "chunk", -1) == 0) {
		g->copies++;
		json_t *a = proto_msg("mp_ack", 0);
		json_object_set_new(a, "chunk", json_integer(0));
		conn_send_new(c, a);
		gr_want(c);
	}
	json_decref(f);
}

static void gr_close(conn *c, int err)
{
	(void)err;
	struct greedy *g = conn_data(c);
	g->closed = true;
}

static void gr_ready(conn *c, int status)
{
	(void)c;
	(void)status;
}

static const struct conn_cbs gr_cbs = {.on_ready = gr_ready, .on_frame = gr_frame,
				       .on_close = gr_close, .on_bin = gr_bin};

static void gr_accept(uv_stream_t *server, int status)
{
	struct greedy *g = server->data;
	if (status == 0 && !g->c)
		g->c = conn_accept(server, srv[1], &gr_cbs, g);
}

/* n1 (its real certificate) answers the source's hello, needs nothing, and
 * asks for chunk 0 again and again: it gets it MR_BAD_MAX times, then
 * bad_frame and the link closes; the source's push ends. */
Test(relay, a_downstream_asking_again_and_again_is_cut_off)
{
	start_engines();
	char err[256] = "";
	cr_assert_eq(mm_build(src, "tiny", CS, &man, err, sizeof err), 0, "%s", err);
	static struct greedy g;
	memset(&g, 0, sizeof g);
	uv_tcp_init(&loop, &g.lst);
	g.lst.data = &g;
	struct sockaddr_in sa;
	uv_ip4_addr("127.0.0.1", 0, &sa);
	cr_assert_eq(uv_tcp_bind(&g.lst, (struct sockaddr *)&sa, 0), 0);
	cr_assert_eq(uv_listen((uv_stream_t *)&g.lst, 4, gr_accept), 0);
	struct sockaddr_storage ss;
	int sl = sizeof ss;
	uv_tcp_getsockname(&g.lst, (struct sockaddr *)&ss, &sl);
	struct mr_member two[2] = {chain[0], chain[1]};
	two[1].port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	nodes[0].done = false;
	struct mr_push_opts o = {.push_id = "51", .m = man, .chain = two, .nchain = 2, .self = 0,
				 .src_dir = src};
	cr_assert_eq(mr_push_start(nodes[0].e, &o, &cbs, &nodes[0], err, sizeof err), 0, "%s", err);
	for (int i = 0; i < 200000 && !(nodes[0].done && g.closed); i++)
		uv_run(&loop, UV_RUN_ONCE);
	cr_assert(g.closed, "the link was closed");
	cr_assert_eq(g.copies, MR_BAD_MAX, "chunk 0 sent %d times", g.copies);
	cr_assert_str_eq(g.code, "bad_frame");
	cr_assert(nodes[0].done, "the source's push ended");
	cr_assert_neq(nodes[0].status, 0, "not complete");
	uv_close((uv_handle_t *)&g.lst, NULL);
	cleanup_push();
}

/* ---- the limits of the data port ---- */

static bool expired;

static void on_expire(uv_timer_t *t)
{
	(void)t;
	expired = true;
}

/* Run the loop until *flag is set or ms have passed; the flag's value. */
static bool run_until(const bool *flag, unsigned ms)
{
	uv_timer_t t;
	uv_timer_init(&loop, &t);
	expired = false;
	uv_timer_start(&t, on_expire, ms, 0);
	while (!*flag && !expired)
		uv_run(&loop, UV_RUN_ONCE);
	uv_close((uv_handle_t *)&t, NULL);
	uv_run(&loop, UV_RUN_NOWAIT);
	return *flag;
}

/* A member's raw link: it sends what the test says, counts what comes. */
struct raw {
	conn *c;
	bool ready, closed;
	char code[64];
	int keepalives, needs;
};

static void raw_ready(conn *c, int status)
{
	struct raw *r = conn_data(c);
	r->ready = status == 0;
}

static void raw_frame(conn *c, json_t *f)
{
	struct raw *r = conn_data(c);
	const char *t = proto_type(f);
	if (!strcmp(t, "error"))
		util_strlcpy(r->code, proto_str(f, "code") ? proto_str(f, "code") : "", sizeof r->code);
	r->keepalives += !strcmp(t, "mp_keepalive");
	r->needs += !strcmp(t, "mp_need");
	json_decref(f);
}

static void raw_close(conn *c, int err)
{
	(void)err;
	struct raw *r = conn_data(c);
	r->closed = true;
	r->c = NULL;
}

static const struct conn_cbs raw_cbs = {raw_ready, raw_frame, raw_close};

static void raw_open(struct raw *r, SSL_CTX *ctx, int port)
{
	memset(r, 0, sizeof *r);
	cr_assert_eq(conn_connect_tcp(&loop, "127.0.0.1", port, ctx, 5000, &raw_cbs, r, &r->c), 0);
	cr_assert(run_until(&r->ready, 5000), "connected");
}

/* src's hello announcing push ID of `tiny` to n1 (chain src, n1) with the
 * ticket given (NULL: none), manifest_bytes as said, and the first `part`
 * bytes of the manifest's text (all when part is -1). */
static void announce(struct raw *r, const char *id, const char *ticket, json_int_t mbytes,
		     long part)
{
	json_t *mj = mm_to_json(man);
	char *text = json_dumps(mj, JSON_COMPACT);
	json_decref(mj);
	conn_send_new(r->c, src_hello(id, ticket, mbytes ? mbytes : (json_int_t)strlen(text)));
	size_t n = part < 0 ? strlen(text) : (size_t)part;
	if (n) {
		json_t *mf = proto_msg("mp_manifest", 0);
		json_object_set_new(mf, "off", json_integer(0));
		json_object_set_new(mf, "text", json_stringn(text, n));
		conn_send_new(r->c, mf);
	}
	free(text);
}

/* The engines, the model, and n1 taking announced pushes. */
static void n1_accepts(void)
{
	start_engines();
	char err[256] = "";
	cr_assert_eq(mm_build(src, "tiny", CS, &man, err, sizeof err), 0, "%s", err);
	mr_engine_accept(nodes[1].e, nodes[1].store, &cbs, &nodes[1]);
}

static size_t announced_on(int i)
{
	struct mr_stats st;
	mr_engine_stats(nodes[i].e, &st);
	return st.announced;
}

/* A member (the source's real certificate) announces pushes of the largest
 * manifest with a bogus ticket and sends nothing more: each hello is refused
 * at once (not_authorized, the link closed) and nothing is kept, before a
 * byte of the manifest came. */
Test(relay, a_hello_without_permission_is_refused_before_the_manifest)
{
	n1_accepts();
	mr_engine_verify(nodes[1].e, test_verify, NULL);
	static const char *const ids2[] = {"e1", "e2", "e3", "e4", "e5", "e6"};
	struct raw r[6];
	for (int i = 0; i < 6; i++) {
		raw_open(&r[i], cli[0], chain[1].port);
		announce(&r[i], ids2[i], i % 2 ? "bogus" : NULL, (json_int_t)MR_MANIFEST_MAX, 0);
	}
	for (int i = 0; i < 6; i++) {
		cr_assert(run_until(&r[i].closed, 3000), "hello %s answered and closed", ids2[i]);
		cr_assert_str_eq(r[i].code, "not_authorized", "%s", ids2[i]);
	}
	cr_assert_eq(announced_on(1), 0, "no push kept");
	struct mr_stats st;
	mr_engine_stats(nodes[1].e, &st);
	cr_assert_eq(st.links, 0, "no connection kept");
	cleanup_push();
}

/* Without a ticket check (the tests' engines), a member may have at most
 * MR_PUSHES_PER_PEER announced pushes here at once: the next is `busy`. A
 * push whose upstream goes before its manifest came ends at once: its id is
 * free again and the member may announce more. */
Test(relay, announced_pushes_are_bounded_and_freed_when_the_member_goes)
{
	n1_accepts();
	struct raw r[MR_PUSHES_PER_PEER + 1];
	char id[MR_PUSHES_PER_PEER + 1][8];
	for (int i = 0; i <= MR_PUSHES_PER_PEER; i++) {
		snprintf(id[i], sizeof id[i], "d%d", i);
		raw_open(&r[i], cli[0], chain[1].port);
		announce(&r[i], id[i], NULL, 0, 10); /* the manifest's first 10 bytes */
		for (int k = 0; k < 50; k++)
			uv_run(&loop, UV_RUN_NOWAIT);
	}
	cr_assert(run_until(&r[MR_PUSHES_PER_PEER].closed, 3000), "the last one refused");
	cr_assert_str_eq(r[MR_PUSHES_PER_PEER].code, "busy");
	for (int i = 0; i < MR_PUSHES_PER_PEER; i++)
		cr_assert(!r[i].closed && !r[i].code[0], "push %s taken", id[i]);
	cr_assert_eq(announced_on(1), MR_PUSHES_PER_PEER);
	/* the member goes away */
	for (int i = 0; i < MR_PUSHES_PER_PEER; i++)
		conn_close(r[i].c, 0);
	for (int i = 0; i < MR_PUSHES_PER_PEER; i++)
		cr_assert(run_until(&r[i].closed, 3000));
	for (int k = 0; k < 200 && announced_on(1); k++)
		uv_run(&loop, UV_RUN_NOWAIT);
	cr_assert_eq(announced_on(1), 0, "every announced push ended with its link");
	/* the same ids again: taken, not busy */
	for (int i = 0; i < MR_PUSHES_PER_PEER; i++) {
		raw_open(&r[i], cli[0], chain[1].port);
		announce(&r[i], id[i], NULL, 0, 10);
	}
	for (int k = 0; k < 200 && announced_on(1) < MR_PUSHES_PER_PEER; k++)
		uv_run(&loop, UV_RUN_ONCE);
	cr_assert_eq(announced_on(1), MR_PUSHES_PER_PEER, "the ids are free again");
	for (int i = 0; i < MR_PUSHES_PER_PEER; i++)
		cr_assert(!r[i].closed && !r[i].code[0], "push %s taken again", id[i]);
	for (int i = 0; i < MR_PUSHES_PER_PEER; i++)
		conn_close(r[i].c, 0);
	cleanup_push();
}

/* Shorter times on n1 (hello 300 ms, idle 600 ms, keepalive 100 ms): a
 * member's TLS connection without a hello is closed after the hello time; an
 * upstream that announced a push and then says nothing (its connection
 * open) is cut off after the idle time and the push ends; a link that is
 * quiet but whose peer sends mp_keepalive stays, and n1 sends its own. */
Test(relay, silent_links_are_closed_and_keepalives_keep_quiet_ones)
{
	n1_accepts();
	mr_engine_test_times(nodes[1].e, 300, 600, 100);
	struct raw r;
	uint64_t t0 = util_now_ms();
	raw_open(&r, cli[0], chain[1].port);
	cr_assert(run_until(&r.closed, 5000), "no hello: closed");
	uint64_t dt = util_now_ms() - t0;
	cr_assert(dt >= 295, "not before the hello time (%llu ms)", (unsigned long long)dt);
	/* announced, half a manifest, then silence */
	raw_open(&r, cli[0], chain[1].port);
	announce(&r, "f1", NULL, 0, 10);
	for (int k = 0; k < 200 && announced_on(1) == 0; k++)
		uv_run(&loop, UV_RUN_ONCE);
	cr_assert_eq(announced_on(1), 1);
	cr_assert(run_until(&r.closed, 5000), "a silent upstream is cut off");
	for (int k = 0; k < 200 && announced_on(1); k++)
		uv_run(&loop, UV_RUN_NOWAIT);
	cr_assert_eq(announced_on(1), 0, "its push ended");
	/* the whole manifest: n1 (the chain's end) answers mp_need; then this
	 * side sends only keepalives for 2 s, more than three idle times */
	raw_open(&r, cli[0], chain[1].port);
	announce(&r, "f2", NULL, 0, -1);
	bool needed = false;
	for (int k = 0; k < 100000 && !needed && !r.closed; k++) {
		uv_run(&loop, UV_RUN_ONCE);
		needed = r.needs > 0;
	}
	cr_assert(needed, "n1 asked for the chunks");
	uint64_t start = util_now_ms(), last = start;
	while (!r.closed && util_now_ms() - start < 2000) {
		if (util_now_ms() - last >= 100) {
			conn_send_new(r.c, proto_msg("mp_keepalive", 0));
			last = util_now_ms();
		}
		bool never = false;
		run_until(&never, 20);
	}
	cr_assert(!r.closed, "a link with keepalives stays (%s)", r.code);
	cr_assert_gt(r.keepalives, 5, "n1 sent keepalives (%d)", r.keepalives);
	cr_assert_eq(announced_on(1), 1);
	/* and once they stop: cut off, the push ended (incomplete) */
	cr_assert(run_until(&r.closed, 5000), "closed once the keepalives stop");
	for (int k = 0; k < 2000 && announced_on(1); k++)
		uv_run(&loop, UV_RUN_ONCE);
	cr_assert_eq(announced_on(1), 0);
	cleanup_push();
}

/* A flood of plain connections that never say anything: at most
 * MR_PREHELLO_MAX are held, the oldest closed for each newcomer. */
Test(relay, a_connection_flood_is_capped)
{
	start_engines();
	enum { FLOOD = 200 };
	int fds[FLOOD];
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)chain[1].port)};
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	for (int i = 0; i < FLOOD; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM, 0);
		cr_assert_geq(fds[i], 0);
		cr_assert_eq(connect(fds[i], (struct sockaddr *)&a, sizeof a), 0);
		for (int k = 0; k < 4; k++)
			uv_run(&loop, UV_RUN_NOWAIT);
	}
	struct mr_stats st;
	for (int k = 0; k < 500; k++) {
		uv_run(&loop, UV_RUN_NOWAIT);
		mr_engine_stats(nodes[1].e, &st);
		if (st.links <= MR_PREHELLO_MAX)
			break;
		usleep(1000);
	}
	cr_assert_leq(st.prehello, MR_PREHELLO_MAX, "%zu waiting", st.prehello);
	cr_assert_leq(st.links, MR_PREHELLO_MAX, "%zu connections held", st.links);
	/* the first ones were closed: they read end of file */
	char b[16];
	fcntl(fds[0], F_SETFL, O_NONBLOCK);
	cr_assert_leq(read(fds[0], b, sizeof b), 0, "the oldest was closed");
	for (int i = 0; i < FLOOD; i++)
		close(fds[i]);
	cleanup_push();
}

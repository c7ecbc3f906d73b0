/* `sparkctl model ls|rm|verify` against a real sparkd (issue 18): the models
 * the node holds in its store, under models.dir of its config or its state
 * dir; a damaged chunk is found by verify (exit 1, one line saying what to
 * do); rm removes it; a relative models.dir is refused at start. The store is
 * seeded with the store library (a push's receiving side does the same). */
#include "harness.h"
#include "hostile.h"
#include "model_manifest.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

static struct h_cluster *c;
static char srcroot[256], src[512], store[512], cfg[512];

static void setup(void)
{
	c = h_cluster_new(1);
	snprintf(srcroot, sizeof srcroot, "/tmp/sparkctl-it-src-XXXXXX");
	cr_assert_not_null(mkdtemp(srcroot));
	snprintf(src, sizeof src, "%s/model-src", srcroot);
	snprintf(store, sizeof store, "%s/bigdisk/models", c->root);
	snprintf(cfg, sizeof cfg, "%s/sparkd.yaml", c->root);
	cr_assert_eq(mkdir(src, 0755), 0);
	static const size_t lens[] = {900, 3 * MM_CHUNK_MIN + 5};
	static const char *names[] = {"config.json", "model.safetensors"};
	for (int i = 0; i < 2; i++) {
		char p[600];
		snprintf(p, sizeof p, "%s/%s", src, names[i]);
		FILE *f = fopen(p, "wb");
		for (size_t k = 0; k < lens[i]; k++)
			fputc((int)((k * 7 + i) & 0xff), f);
		fclose(f);
	}
	FILE *f = fopen(cfg, "w");
	fprintf(f, "models:\n  dir: %s\n", store);
	fclose(f);
}

static void teardown(void)
{
	h_cluster_free(c);
	char cmd[400];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", srcroot);
	if (system(cmd) != 0)
		cr_log_warn("could not remove %s", srcroot);
}

TestSuite(models, .init = setup, .fini = teardown, .timeout = 60);

/* Receive NAME into the store as a push would: every chunk when whole, else
 * only the first. */
static struct mm_manifest *seed(const char *name, bool whole)
{
	struct mm_manifest *m;
	char err[256] = "";
	cr_assert_eq(mm_build(src, name, MM_CHUNK_MIN, &m, err, sizeof err), 0, "%s", err);
	struct mm_have h;
	cr_assert_eq(mm_store_have(store, m, &h, err, sizeof err), 0, "%s", err);
	cr_assert_eq(mm_store_begin(store, m, &h, err, sizeof err), 0, "%s", err);
	uint8_t *buf = malloc(m->chunk_size);
	for (size_t i = 0; i < (whole ? m->nchunks : 1); i++) {
		uint32_t len;
		cr_assert_eq(mm_read_chunk(m, src, i, buf, &len, err, sizeof err), 0, "%s", err);
		cr_assert_eq(mm_store_put(store, m, i, buf, len), 0);
	}
	free(buf);
	for (size_t i = 0; whole && i < m->nfiles; i++)
		cr_assert_eq(mm_store_finish_file(store, m, i), 0);
	mm_have_free(&h);
	return m;
}

Test(models, ls_verify_damage_rm)
{
	cr_assert_eq(h_start_cfg(c, 0, cfg), 0);
	struct h_result r = h_ctl(c, 0, "model", "ls", NULL);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	cr_assert(strstr(r.out, "No models"), "%s", r.out);
	h_result_free(&r);

	struct mm_manifest *m = seed("tiny-llm", true);
	r = h_ctl(c, 0, "model", "ls", "-o", "json", NULL);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	json_t *j = h_json(&r);
	cr_assert_str_eq(json_string_value(json_object_get(j, "dir")), store,
			 "models.dir of the config");
	json_t *e = json_array_get(json_object_get(j, "models"), 0);
	cr_assert_str_eq(json_string_value(json_object_get(e, "name")), "tiny-llm");
	cr_assert(json_is_true(json_object_get(e, "complete")));
	cr_assert_eq(json_integer_value(json_object_get(e, "bytes")), (json_int_t)m->total_bytes);
	cr_assert_eq(json_integer_value(json_object_get(e, "files")), 2);
	json_decref(j);
	h_result_free(&r);
	r = h_ctl(c, 0, "model", "ls", NULL);
	cr_assert(strstr(r.out, "tiny-llm") && strstr(r.out, "complete"), "%s", r.out);
	h_result_free(&r);

	r = h_ctl(c, 0, "model", "verify", "tiny-llm", NULL);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	cr_assert(strstr(r.out, "every chunk matches"), "%s", r.out);
	h_result_free(&r);

	/* one flipped bit in chunk 2 of the shard, size and mtime kept */
	char p[700];
	snprintf(p, sizeof p, "%s/tiny-llm/model.safetensors", store);
	struct stat st;
	stat(p, &st);
	int fd = open(p, O_RDWR);
	uint8_t b;
	cr_assert_eq(pread(fd, &b, 1, 2 * MM_CHUNK_MIN + 9), 1);
	b ^= 0x10;
	cr_assert_eq(pwrite(fd, &b, 1, 2 * MM_CHUNK_MIN + 9), 1);
	struct timespec ts[2] = {st.st_atim, st.st_mtim};
	futimens(fd, ts);
	close(fd);
	r = h_ctl(c, 0, "model", "verify", "tiny-llm", NULL);
	cr_assert_eq(r.rc, 1, "a damaged model fails verify");
	cr_assert(strstr(r.out, "model.safetensors") && strstr(r.out, "hash"), "%s", r.out);
	cr_assert(strstr(r.err, "damaged") && strstr(r.err, "sparkctl model rm tiny-llm"), "%s",
		  r.err);
	cr_assert_eq(strchr(r.err, '\n'), r.err + strlen(r.err) - 1, "one line: %s", r.err);
	h_result_free(&r);
	r = h_ctl(c, 0, "model", "verify", "tiny-llm", "-o", "json", NULL);
	j = h_json(&r);
	cr_assert(json_is_false(json_object_get(j, "ok")));
	e = json_array_get(json_object_get(j, "problems"), 0);
	cr_assert_str_eq(json_string_value(json_object_get(e, "path")), "model.safetensors");
	cr_assert_eq(json_integer_value(json_object_get(e, "chunk")), 2);
	cr_assert_str_eq(json_string_value(json_object_get(e, "problem")), "hash");
	json_decref(j);
	h_result_free(&r);

	r = h_ctl(c, 0, "model", "verify", "nope", NULL);
	cr_assert_eq(r.rc, 1);
	cr_assert(strstr(r.err, "no model nope") && strstr(r.err, "model ls"), "%s", r.err);
	h_result_free(&r);
	r = h_ctl(c, 0, "model", "verify", "../etc", NULL);
	cr_assert_eq(r.rc, 1, "a name that is not a model name is refused");
	h_result_free(&r);
	r = h_ctl(c, 0, "model", "verify", NULL);
	cr_assert_eq(r.rc, 2, "usage");
	h_result_free(&r);

	r = h_ctl(c, 0, "model", "rm", "tiny-llm", NULL);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	cr_assert(strstr(r.out, "removed"), "%s", r.out);
	h_result_free(&r);
	snprintf(p, sizeof p, "%s/tiny-llm", store);
	cr_assert_neq(access(p, F_OK), 0, "the folder is gone");
	r = h_ctl(c, 0, "model", "rm", "tiny-llm", NULL);
	cr_assert_eq(r.rc, 1);
	cr_assert(strstr(r.err, "no model tiny-llm"), "%s", r.err);
	h_result_free(&r);
	mm_free(m);
}

Test(models, partial_model_and_default_dir)
{
	/* no config: the store is STATE_DIR/models */
	snprintf(store, sizeof store, "%s/models", c->nodes[0].dir);
	cr_assert_eq(h_start(c, 0), 0);
	struct mm_manifest *m = seed("half", false);
	struct h_result r = h_ctl(c, 0, "model", "ls", "-o", "json", NULL);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	json_t *j = h_json(&r);
	cr_assert_str_eq(json_string_value(json_object_get(j, "dir")), store);
	json_t *e = json_array_get(json_object_get(j, "models"), 0);
	cr_assert(json_is_false(json_object_get(e, "complete")), "a model still being received");
	cr_assert_lt(json_integer_value(json_object_get(e, "files_complete")), 2);
	json_decref(j);
	h_result_free(&r);
	r = h_ctl(c, 0, "model", "ls", NULL);
	cr_assert(strstr(r.out, "partial"), "%s", r.out);
	h_result_free(&r);
	mm_free(m);
}

Test(models, relative_models_dir_refused)
{
	FILE *f = fopen(cfg, "w");
	fprintf(f, "models:\n  dir: data/models\n");
	fclose(f);
	char *argv[] = {(char *)h_bin("sparkd"), "--state-dir", c->nodes[0].dir, "--socket",
			c->nodes[0].sock, "--listen", "127.0.0.1:1", "--config", cfg, NULL};
	struct h_result r = h_run(argv);
	cr_assert_neq(r.rc, 0, "sparkd does not start");
	cr_assert(strstr(r.err, "models.dir") && strstr(r.err, "absolute"), "%s", r.err);
	h_result_free(&r);
	f = fopen(cfg, "w");
	fprintf(f, "models:\n  directory: /x\n");
	fclose(f);
	r = h_run(argv);
	cr_assert_neq(r.rc, 0, "an unknown key under models:");
	cr_assert(strstr(r.err, "directory"), "%s", r.err);
	h_result_free(&r);
}

/* A hostile caller on the control socket: one raw request, its answer. */
static json_t *raw_call(const char *json)
{
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	snprintf(a.sun_path, sizeof a.sun_path, "%s", c->nodes[0].sock);
	cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
	size_t n = strlen(json);
	uint8_t hdr[4] = {(uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
	cr_assert_eq(write(fd, hdr, 4), 4);
	cr_assert_eq(write(fd, json, n), (ssize_t)n);
	uint8_t lh[4];
	cr_assert_eq(read(fd, lh, 4), 4);
	size_t len = (size_t)lh[0] << 24 | lh[1] << 16 | lh[2] << 8 | lh[3];
	char *buf = malloc(len + 1);
	size_t got = 0;
	while (got < len) {
		ssize_t k = read(fd, buf + got, len - got);
		cr_assert_gt(k, 0);
		got += (size_t)k;
	}
	close(fd);
	json_t *j = json_loadb(buf, len, 0, NULL);
	free(buf);
	cr_assert_not_null(j);
	return j;
}

Test(models, hostile_requests_refused)
{
	cr_assert_eq(h_start_cfg(c, 0, cfg), 0);
	struct mm_manifest *m = seed("keep", true);
	static const char *const bad[] = {
		"{\"v\":1,\"type\":\"model_rm\",\"id\":1,\"name\":5}",
		"{\"v\":1,\"type\":\"model_rm\",\"id\":1}",
		"{\"v\":1,\"type\":\"model_rm\",\"id\":1,\"name\":\"../bigdisk\"}",
		"{\"v\":1,\"type\":\"model_rm\",\"id\":1,\"name\":\".meta\"}",
		"{\"v\":1,\"type\":\"model_rm\",\"id\":1,\"name\":\"\"}",
		"{\"v\":1,\"type\":\"model_verify\",\"id\":1,\"name\":\"/etc/passwd\"}",
		"{\"v\":1,\"type\":\"model_verify\",\"id\":1,\"name\":[\"keep\"]}",
		/* model_push with a bad directory, name or chain */
		"{\"v\":1,\"type\":\"model_push\",\"id\":1,\"dir\":\"rel/dir\",\"name\":\"m\","
		"\"chain\":[{\"id\":\"a\",\"host\":\"127.0.0.1\",\"port\":1},"
		"{\"id\":\"b\",\"host\":\"127.0.0.1\",\"port\":1}]}",
		"{\"v\":1,\"type\":\"model_push\",\"id\":1,\"dir\":\"/tmp\",\"name\":\"../m\","
		"\"chain\":[]}",
		"{\"v\":1,\"type\":\"model_push\",\"id\":1,\"dir\":\"/tmp\",\"name\":\"m\","
		"\"chain\":{}}",
		"{\"v\":1,\"type\":\"model_push\",\"id\":1,\"dir\":\"/tmp\",\"name\":\"m\","
		"\"chain\":[{\"id\":\"a\"}]}",
		"{\"v\":1,\"type\":\"model_push\",\"id\":1,\"dir\":\"/tmp\",\"name\":\"m\","
		"\"chain\":[],\"dry_run\":\"yes\"}",
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		json_t *j = raw_call(bad[i]);
		cr_assert_str_eq(json_string_value(json_object_get(j, "type")), "error", "%s", bad[i]);
		cr_assert_str_eq(json_string_value(json_object_get(j, "code")), "bad_request", "%s",
				 bad[i]);
		json_decref(j);
	}
	/* the model and the store's record are untouched, the agent alive */
	struct h_result r = h_ctl(c, 0, "model", "verify", "keep", NULL);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	h_result_free(&r);
	mm_free(m);
}

/* ---- model push between real agents (a head and two workers on loopback) ---- */

/* When set: node-2's sparkd corrupts that chunk (from 0) whenever it sends it
 * (SPARKD_TEST_CORRUPT_CHUNK, read by the model service in tests only). */
static const char *liar_chunk;

static void start_three(const char *cfg2)
{
	h_cluster_free(c);
	c = h_cluster_new(3);
	for (int i = 0; i < 3; i++) {
		if (i == 1 && liar_chunk)
			setenv("SPARKD_TEST_CORRUPT_CHUNK", liar_chunk, 1);
		int r = i == 2 && cfg2 ? h_start_cfg(c, i, cfg2) : h_start(c, i);
		unsetenv("SPARKD_TEST_CORRUPT_CHUNK");
		cr_assert_eq(r, 0, "sparkd %d", i);
	}
	char *tok = h_init(c);
	for (int i = 1; i < 3; i++) {
		struct h_result r = h_ctl(c, i, "join", h_addr(c, 0), "--token", tok, "--timeout",
					  "3s", NULL);
		cr_assert_eq(r.rc, 0, "join %d: %s", i, r.err);
		h_result_free(&r);
	}
	free(tok);
	for (int i = 1; i < 3; i++)
		cr_assert(h_wait_state(c, 0, c->nodes[i].name, "ready", 5000) >= 0);
}

static void same_files(const char *store_dir, const char *name)
{
	char cmd[1400];
	snprintf(cmd, sizeof cmd, "diff -r '%s' '%s/%s' >/dev/null", src, store_dir, name);
	cr_assert_eq(system(cmd), 0, "%s/%s has the source's files", store_dir, name);
}

static json_t *node_report(json_t *j, const char *name)
{
	size_t i;
	json_t *n;
	json_array_foreach(json_object_get(j, "nodes"), i, n)
		if (!strcmp(json_string_value(json_object_get(n, "name")), name))
			return n;
	cr_assert_fail("no report for %s", name);
	return NULL;
}

Test(models, push_to_two_workers_then_nothing_moves)
{
	start_three(NULL);
	char s1[600], s2[600];
	snprintf(s1, sizeof s1, "%s/models", c->nodes[1].dir);
	snprintf(s2, sizeof s2, "%s/models", c->nodes[2].dir);
	struct h_result r = h_ctl(c, 0, "model", "push", src, "--nodes", "node-2,node-3",
				  "--dry-run", NULL);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	cr_assert(strstr(r.out, "Would push model-src") && strstr(r.out, "node-3"), "%s", r.out);
	h_result_free(&r);
	cr_assert_neq(access(s1, F_OK), 0, "a dry run moves nothing");

	r = h_ctl(c, 0, "model", "push", src, "--nodes", "node-2,node-3", "--name", "tiny", "-o",
		  "json", NULL);
	cr_assert_eq(r.rc, 0, "%s\n%s", r.out, r.err);
	json_t *j = h_json(&r);
	cr_assert(json_is_true(json_object_get(j, "complete")));
	json_int_t total = json_integer_value(json_object_get(j, "bytes"));
	cr_assert_eq(json_integer_value(json_object_get(node_report(j, "node-2"), "bytes_written")),
		     total);
	cr_assert_eq(json_integer_value(json_object_get(node_report(j, "node-3"), "bytes_written")),
		     total);
	json_decref(j);
	h_result_free(&r);
	same_files(s1, "tiny");
	same_files(s2, "tiny");
	r = h_ctl(c, 2, "model", "verify", "tiny", NULL);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	h_result_free(&r);

	/* model ls, asked on a worker: every node's store, through the head */
	r = h_ctl(c, 1, "model", "ls", "-o", "json", NULL);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	j = h_json(&r);
	json_t *ns = json_object_get(j, "nodes");
	cr_assert_eq(json_array_size(ns), 3, "every node: %s", r.out);
	for (size_t i = 0; i < 3; i++) {
		json_t *n = json_array_get(ns, i);
		const char *nm = json_string_value(json_object_get(n, "node"));
		json_t *ms = json_object_get(n, "models");
		bool target = !strcmp(nm, "node-2") || !strcmp(nm, "node-3");
		cr_assert_eq(json_array_size(ms), target ? 1 : 0, "%s: %s", nm, r.out);
		if (target) {
			json_t *m = json_array_get(ms, 0);
			cr_assert_str_eq(json_string_value(json_object_get(m, "name")), "tiny");
			cr_assert(json_is_true(json_object_get(m, "complete")));
		}
	}
	json_decref(j);
	h_result_free(&r);
	r = h_ctl(c, 0, "model", "ls", NULL);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	cr_assert(strstr(r.out, "NODE") && strstr(r.out, "node-3") && strstr(r.out, "tiny"), "%s",
		  r.out);
	cr_assert(strstr(r.out, "No models on node-1"), "%s", r.out);
	h_result_free(&r);
	r = h_ctl(c, 0, "model", "ls", "--node", "node-3", "-o", "json", NULL);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	j = h_json(&r);
	cr_assert_eq(json_array_size(json_object_get(j, "nodes")), 1);
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(j, "nodes"),
									    0), "node")), "node-3");
	json_decref(j);
	h_result_free(&r);
	r = h_ctl(c, 0, "model", "ls", "--node", "node-9", NULL);
	cr_assert_eq(r.rc, 1, "a node that does not exist");
	cr_assert(strstr(r.err, "node-9"), "%s", r.err);
	h_result_free(&r);

	/* again: nothing moves */
	r = h_ctl(c, 0, "model", "push", src, "--nodes", "node-2,node-3", "--name", "tiny", "-o",
		  "json", NULL);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	j = h_json(&r);
	cr_assert_eq(json_integer_value(json_object_get(node_report(j, "node-2"), "bytes_written")),
		     0);
	cr_assert_eq(json_integer_value(json_object_get(node_report(j, "node-3"), "bytes_written")),
		     0);
	json_decref(j);
	h_result_free(&r);

	/* one file changes on the source: only it moves */
	char p[700];
	snprintf(p, sizeof p, "%s/config.json", src);
	FILE *f = fopen(p, "w");
	fputs("{\"changed\": true}", f);
	fclose(f);
	r = h_ctl(c, 1, "model", "push", src, "--nodes", "node-1,node-3", "--name", "tiny", "-o",
		  "json", NULL);
	cr_assert_eq(r.rc, 0, "a push from a worker: %s", r.err);
	j = h_json(&r);
	cr_assert_eq(json_integer_value(json_object_get(node_report(j, "node-3"), "bytes_written")),
		     17, "only config.json moved");
	json_decref(j);
	h_result_free(&r);
	same_files(s2, "tiny");

	/* a forged permission: node-2 refuses before a byte, nothing is written there */
	r = h_ctl(c, 0, "node", "ls", "-o", "json", NULL);
	j = h_json(&r);
	h_result_free(&r);
	char ids[2][64] = {"", ""};
	size_t ni;
	json_t *nd;
	json_array_foreach(json_object_get(j, "nodes"), ni, nd) {
		const char *nm = json_string_value(json_object_get(nd, "name"));
		if (!strcmp(nm, "node-1") || !strcmp(nm, "node-2"))
			snprintf(ids[!strcmp(nm, "node-2")], sizeof ids[0], "%s",
				 json_string_value(json_object_get(nd, "id")));
	}
	json_decref(j);
	char req[1200];
	snprintf(req, sizeof req,
		 "{\"v\":1,\"type\":\"model_push\",\"id\":1,\"dir\":\"%s\",\"name\":\"forged\","
		 "\"push\":\"abcd\",\"ticket\":\"AAAA\",\"expires_at\":%lld,\"chain\":["
		 "{\"id\":\"%s\",\"host\":\"127.0.0.1\",\"port\":%d},"
		 "{\"id\":\"%s\",\"host\":\"127.0.0.1\",\"port\":%d}]}",
		 src, (long long)time(NULL) + 600, ids[0], c->nodes[0].port + 1, ids[1],
		 c->nodes[1].port + 1);
	j = raw_call(req);
	cr_assert_str_eq(json_string_value(json_object_get(j, "type")), "result");
	json_t *d = json_object_get(j, "data");
	cr_assert(json_is_false(json_object_get(d, "complete")), "a forged ticket moves nothing");
	json_t *rep = json_array_get(json_object_get(d, "nodes"), 0);
	cr_assert_str_eq(json_string_value(json_object_get(rep, "status")), "failed");
	cr_assert(strstr(json_string_value(json_object_get(rep, "message")), "no valid permission"));
	json_decref(j);
	snprintf(p, sizeof p, "%s/forged", s1);
	cr_assert_neq(access(p, F_OK), 0, "nothing of it on node-2");

	/* bad input */
	r = h_ctl(c, 0, "model", "push", "/nonexistent/model", "--nodes", "node-2", NULL);
	cr_assert_eq(r.rc, 1);
	cr_assert(strstr(r.err, "/nonexistent/model"), "%s", r.err);
	h_result_free(&r);
	r = h_ctl(c, 0, "model", "push", src, "--nodes", "node-9", NULL);
	cr_assert_eq(r.rc, 1);
	cr_assert(strstr(r.err, "node-9") && strstr(r.err, "node ls"), "%s", r.err);
	h_result_free(&r);
	r = h_ctl(c, 0, "model", "push", src, "--group", "nope", NULL);
	cr_assert_eq(r.rc, 1, "a group that does not exist");
	h_result_free(&r);
	r = h_ctl(c, 0, "model", "push", src, NULL);
	cr_assert_eq(r.rc, 2, "neither --group nor --nodes");
	h_result_free(&r);

	/* model rm on other nodes, through the head (asked on a worker) */
	r = h_ctl(c, 1, "model", "rm", "tiny", "--nodes", "node-2,node-3", NULL);
	cr_assert_eq(r.rc, 0, "%s\n%s", r.out, r.err);
	cr_assert(strstr(r.out, "removed from node-2") && strstr(r.out, "removed from node-3"), "%s",
		  r.out);
	h_result_free(&r);
	char gone[700];
	snprintf(gone, sizeof gone, "%s/tiny", s2);
	cr_assert_neq(access(gone, F_OK), 0, "node-3's copy is gone");
	r = h_ctl(c, 0, "model", "rm", "tiny", "--nodes", "node-2", NULL);
	cr_assert_eq(r.rc, 1, "node-2 holds no tiny any more");
	cr_assert(strstr(r.err, "node-2") && strstr(r.err, "no model tiny"), "%s", r.err);
	h_result_free(&r);
	r = h_ctl(c, 0, "model", "rm", "tiny", "--nodes", "node-2,node-9", NULL);
	cr_assert_eq(r.rc, 1, "a node that does not exist");
	cr_assert(strstr(r.err, "node-9"), "%s", r.err);
	h_result_free(&r);
}

/* A relay whose copy rotted on disk (one byte, size and mtime kept: it counts
 * as held and is not re-read when the push begins) finds out when it reads
 * the chunk for the node after it, fetches it again from the node before it,
 * mends its copy and serves the next: both verify clean and the output names
 * the repair. Then a push whose source is another worker (--from), asked on a
 * third node: the head starts it there and the CLI gets its progress and
 * report as if local. */
Test(models, relay_repairs_its_copy_and_push_from_another_node)
{
	start_three(NULL);
	char s0[600], s1[600], s2[600];
	snprintf(s0, sizeof s0, "%s/models", c->nodes[0].dir);
	snprintf(s1, sizeof s1, "%s/models", c->nodes[1].dir);
	snprintf(s2, sizeof s2, "%s/models", c->nodes[2].dir);
	struct h_result r = h_ctl(c, 0, "model", "push", src, "--nodes", "node-2,node-3", "--name",
				  "tiny", NULL);
	cr_assert_eq(r.rc, 0, "%s\n%s", r.out, r.err);
	cr_assert_null(strstr(r.out, "Repaired"), "nothing to repair: %s", r.out);
	h_result_free(&r);
	/* node-2's copy rots */
	char p[700];
	snprintf(p, sizeof p, "%s/tiny/model.safetensors", s1);
	struct stat st;
	cr_assert_eq(stat(p, &st), 0);
	int fd = open(p, O_RDWR);
	cr_assert_geq(fd, 0);
	unsigned char b;
	cr_assert_eq(pread(fd, &b, 1, 1000), 1);
	b ^= 0x01;
	cr_assert_eq(pwrite(fd, &b, 1, 1000), 1);
	struct timespec ts[2] = {st.st_atim, st.st_mtim};
	cr_assert_eq(futimens(fd, ts), 0);
	close(fd);
	r = h_ctl(c, 1, "model", "verify", "tiny", NULL);
	cr_assert_eq(r.rc, 1, "node-2's copy is damaged");
	h_result_free(&r);
	r = h_ctl(c, 0, "model", "rm", "tiny", "--nodes", "node-3", NULL);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	h_result_free(&r);
	r = h_ctl(c, 0, "model", "push", src, "--nodes", "node-2,node-3", "--name", "tiny", NULL);
	cr_assert_eq(r.rc, 0, "complete everywhere: %s\n%s", r.out, r.err);
	cr_assert(strstr(r.out, "Repaired on node-2: model.safetensors chunk 0, damaged on disk; "
				"fetched again from node-1."), "%s", r.out);
	h_result_free(&r);
	for (int i = 1; i < 3; i++) {
		r = h_ctl(c, i, "model", "verify", "tiny", NULL);
		cr_assert_eq(r.rc, 0, "node-%d verifies clean: %s", i + 1, r.out);
		h_result_free(&r);
	}
	same_files(s1, "tiny");
	same_files(s2, "tiny");

	/* --from: asked on node-3, node-2 is the source, node-1 and node-3 receive */
	r = h_ctl(c, 2, "model", "push", src, "--from", "node-2", "--nodes", "node-1,node-3",
		  "--name", "fromtwo", "--dry-run", NULL);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	cr_assert(strstr(r.out, "0. node-2  source"), "%s", r.out);
	h_result_free(&r);
	r = h_ctl(c, 2, "model", "push", src, "--from", "node-2", "--nodes", "node-1,node-3",
		  "--name", "fromtwo", "-o", "json", NULL);
	cr_assert_eq(r.rc, 0, "%s\n%s", r.out, r.err);
	json_t *j = h_json(&r);
	cr_assert(json_is_true(json_object_get(j, "complete")), "%s", r.out);
	json_int_t total = json_integer_value(json_object_get(j, "bytes"));
	cr_assert_str_eq(json_string_value(json_object_get(
			     json_array_get(json_object_get(j, "route"), 0), "name")), "node-2");
	cr_assert_eq(json_array_size(json_object_get(j, "nodes")), 2, "%s", r.out);
	cr_assert_eq(json_integer_value(json_object_get(node_report(j, "node-1"), "bytes_written")),
		     total);
	cr_assert_eq(json_integer_value(json_object_get(node_report(j, "node-3"), "bytes_written")),
		     total);
	json_decref(j);
	h_result_free(&r);
	same_files(s0, "fromtwo");
	same_files(s2, "fromtwo");
	snprintf(p, sizeof p, "%s/fromtwo", s1);
	cr_assert_neq(access(p, F_OK), 0, "the source keeps no copy in its store");
	/* the text output, asked on the head: again, nothing moves */
	r = h_ctl(c, 0, "model", "push", src, "--from", "node-2", "--nodes", "node-1,node-3",
		  "--name", "fromtwo", NULL);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	cr_assert(strstr(r.out, "complete on every node"), "%s", r.out);
	h_result_free(&r);
	/* the head as the source, asked on a worker (the head's own node: its mailbox) */
	r = h_ctl(c, 2, "model", "push", src, "--from", "node-1", "--nodes", "node-2", "--name",
		  "fromhead", "-o", "json", NULL);
	cr_assert_eq(r.rc, 0, "%s\n%s", r.out, r.err);
	j = h_json(&r);
	cr_assert(json_is_true(json_object_get(j, "complete")), "%s", r.out);
	cr_assert_eq(json_integer_value(json_object_get(node_report(j, "node-2"), "bytes_written")),
		     total);
	json_decref(j);
	h_result_free(&r);
	same_files(s1, "fromhead");
	/* bad input */
	r = h_ctl(c, 2, "model", "push", "relative/dir", "--from", "node-2", "--nodes", "node-1",
		  NULL);
	cr_assert_eq(r.rc, 2, "a relative DIR with --from");
	h_result_free(&r);
	r = h_ctl(c, 2, "model", "push", src, "--from", "node-9", "--nodes", "node-1", NULL);
	cr_assert_eq(r.rc, 1);
	cr_assert(strstr(r.err, "node-9"), "%s", r.err);
	h_result_free(&r);
	r = h_ctl(c, 2, "model", "push", "/nonexistent/model", "--from", "node-2", "--nodes",
		  "node-1", NULL);
	cr_assert_eq(r.rc, 1, "a folder missing on the source");
	cr_assert(strstr(r.err, "node-2") && strstr(r.err, "/nonexistent/model"), "%s", r.err);
	h_result_free(&r);
}

/* A model big enough to take a while on loopback: MIB MiB in one file, every
 * MiB different (no two chunks alike). */
static void big_model(const char *dir, int mib)
{
	cr_assert_eq(mkdir(dir, 0755), 0);
	char p[600];
	snprintf(p, sizeof p, "%s/weights.safetensors", dir);
	FILE *f = fopen(p, "wb");
	cr_assert_not_null(f);
	static unsigned char buf[1 << 20];
	for (int m = 0; m < mib; m++) {
		for (size_t k = 0; k < sizeof buf; k++)
			buf[k] = (unsigned char)((k * 131 + (size_t)m * 7919 + (k >> 11)) & 0xff);
		cr_assert_eq(fwrite(buf, 1, sizeof buf, f), sizeof buf);
	}
	fclose(f);
}

/* A number from /proc/PID/FILE of node i's sparkd: the first line fmt (one
 * %lld) reads; -1 when none does. */
static long long proc_num(int i, const char *file, const char *fmt)
{
	char p[64], line[256];
	snprintf(p, sizeof p, "/proc/%d/%s", (int)c->nodes[i].pid, file);
	FILE *f = fopen(p, "r");
	long long v = -1;
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, fmt, &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}

/* Bytes node i's sparkd wrote so far (wchar of /proc/PID/io): its chunks
 * (partial files are allocated whole up front, so their size tells nothing). */
static long long wrote(int i)
{
	return proc_num(i, "io", "wchar: %lld");
}

/* Does node i's log hold text? */
static bool log_has(int i, const char *text)
{
	FILE *f = fopen(c->nodes[i].log, "r");
	if (!f)
		return false;
	char line[4096];
	bool found = false;
	while (!found && fgets(line, sizeof line, f))
		found = strstr(line, text) != NULL;
	fclose(f);
	return found;
}

static bool wait_log(int i, const char *text, int ms)
{
	for (int t = 0; t < ms / 50; t++) {
		if (log_has(i, text))
			return true;
		usleep(50000);
	}
	return log_has(i, text);
}

/* sparkctl against node i in the background, its output to out (or /dev/null). */
static pid_t ctl_bg(int i, const char *const *args, const char *out)
{
	pid_t p = fork();
	cr_assert(p >= 0);
	if (p == 0) {
		char *argv[32];
		int n = 0;
		argv[n++] = (char *)h_bin("sparkctl");
		argv[n++] = "--socket";
		argv[n++] = c->nodes[i].sock;
		for (int k = 0; args[k] && n < 31; k++)
			argv[n++] = (char *)args[k];
		argv[n] = NULL;
		int nul = open("/dev/null", O_RDWR);
		int o = out ? open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644) : nul;
		dup2(nul, 0);
		dup2(o, 1);
		dup2(nul, 2);
		execv(argv[0], argv);
		_exit(127);
	}
	return p;
}

/* A --from push whose CLI goes away mid-push (Ctrl-C on node-3, a worker: its
 * sparkd sends the head stream_cancel) is stopped at its source: the head
 * sends node-2 model_push_cancel, node-2's push ends cancelled and sends no
 * more; the receivers hold a partial copy, and the next push moves only what
 * they lack and completes it. */
Test(models, push_from_is_cancelled_when_its_cli_goes_away, .timeout = 180)
{
	start_three(NULL);
	char big[600], s0[600], s2[600], d2[700];
	snprintf(big, sizeof big, "%s/big", srcroot);
	big_model(big, 512);
	snprintf(s0, sizeof s0, "%s/models", c->nodes[0].dir);
	snprintf(s2, sizeof s2, "%s/models", c->nodes[2].dir);
	snprintf(d2, sizeof d2, "%s/bigm", s2);
	static const char *const args[] = {"model", "push", NULL, "--from", "node-2", "--nodes",
					   "node-1,node-3", "--name", "bigm", NULL};
	const char *a[10];
	memcpy(a, args, sizeof a);
	a[2] = big;
	long long w0 = wrote(2);
	cr_assert_geq(w0, 0, "cannot read node-3's /proc/PID/io");
	pid_t cli = ctl_bg(2, a, NULL);
	/* the last node of the chain (node-2, node-1, node-3) has written some */
	long long k = 0;
	for (int t = 0; t < 1500 && (k = wrote(2) - w0) < 32 << 20; t++)
		usleep(20000);
	cr_assert_geq(k, 32 << 20, "node-3 got no 32 MiB within 30 s");
	kill(cli, SIGINT);
	int st;
	cr_assert_eq(waitpid(cli, &st, 0), cli);
	cr_assert(wait_log(0, "model_push_from_cancel", 5000), "the head noticed the CLI left");
	cr_assert(wait_log(1, "model_push_cancelled", 5000), "node-2 was told to stop");
	cr_assert(wait_log(1, "model_push_done name=bigm status=-125", 5000),
		  "node-2's push ended cancelled");
	/* no more chunks come: what was already on its way (node-1's window
	 * to node-3, chunks in the worker pools) still lands, slowly on a busy
	 * machine, and then node-3 writes (about) nothing more: a second with
	 * under 1 MiB written comes within 20 s */
	long long k1 = wrote(2), k2 = k1, last = 0;
	int drained = -1;
	for (int t = 0; t < 20 && drained < 0; t++) {
		sleep(1);
		k2 = wrote(2);
		last = k2 - k1;
		if (last < 1 << 20)
			drained = t;
		k1 = k2;
	}
	cr_assert_geq(drained, 0, "node-3 still receives 20 s after the cancel (%lld bytes in the "
		      "last second)", last);
	cr_log_info("node-3 drained %d s after the cancel", drained + 1);
	cr_assert_lt(k2 - w0, 512ll << 20, "node-3 holds only part of the model (%lld bytes)",
		     k2 - w0);
	cr_log_info("node-3 wrote %lld MiB before the cancel took effect", (k2 - w0) >> 20);
	struct h_result r = h_ctl(c, 0, "model", "ls", "--node", "node-3", "-o", "json", NULL);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	json_t *j = h_json(&r);
	json_t *m = json_array_get(json_object_get(json_array_get(json_object_get(j, "nodes"), 0),
						   "models"), 0);
	cr_assert_str_eq(json_string_value(json_object_get(m, "name")), "bigm", "%s", r.out);
	cr_assert(json_is_false(json_object_get(m, "complete")), "partial on node-3: %s", r.out);
	json_decref(j);
	h_result_free(&r);
	/* the receivers end their part once no upstream comes back (10 s) */
	cr_assert(wait_log(2, "node_status=incomplete", 15000), "node-3's part ended incomplete");
	cr_assert(wait_log(0, "node_status=incomplete", 5000), "node-1's part ended incomplete");
	/* again, to the end: only what is missing moves */
	r = h_ctl(c, 2, "model", "push", big, "--from", "node-2", "--nodes", "node-1,node-3",
		  "--name", "bigm", "-o", "json", NULL);
	cr_assert_eq(r.rc, 0, "%s\n%s", r.out, r.err);
	j = h_json(&r);
	cr_assert(json_is_true(json_object_get(j, "complete")), "%s", r.out);
	json_int_t total = json_integer_value(json_object_get(j, "bytes"));
	json_int_t w3 = json_integer_value(json_object_get(node_report(j, "node-3"),
							   "bytes_written"));
	cr_assert(w3 > 0 && w3 < total, "node-3 got only what it lacked: %lld of %lld",
		  (long long)w3, (long long)total);
	json_decref(j);
	h_result_free(&r);
	r = h_ctl(c, 2, "model", "verify", "bigm", NULL);
	cr_assert_eq(r.rc, 0, "%s", r.out);
	h_result_free(&r);
}

/* Only the head stops a source's push: node-3 (its real certificate, its
 * sparkd stopped) sends the head model_push_cancel for a running --from push,
 * bare and inside a forward: unknown_type each (the head takes that frame
 * from nobody), and the push goes on to complete. */
Test(models, a_members_model_push_cancel_is_refused, .timeout = 90)
{
	start_three(NULL);
	char big[600], out[600];
	snprintf(big, sizeof big, "%s/big", srcroot);
	snprintf(out, sizeof out, "%s/push.json", srcroot);
	big_model(big, 128);
	h_kill(c, 2, SIGTERM);
	cr_assert(h_wait_state(c, 0, "node-3", "unreachable", 20000) >= 0);
	char crt[600], key[600];
	snprintf(crt, sizeof crt, "%s/node.crt", c->nodes[2].dir);
	snprintf(key, sizeof key, "%s/node.key", c->nodes[2].dir);
	struct hs_client *m = hs_connect(c->nodes[0].port, crt, key, 5000);
	cr_assert(m, "cannot connect to the head with node-3's certificate");
	cr_assert_eq(hs_send_frame(m, "{\"v\":1,\"type\":\"hello\",\"id\":1,\"version\":\"x\"}"), 0);
	json_t *f = hs_read_frame(m, 5000);
	cr_assert(f && !strcmp(json_string_value(json_object_get(f, "type")), "result"),
		  "the head took node-3's hello");
	json_decref(f);
	const char *a[] = {"model", "push", big, "--from", "node-2", "--nodes", "node-1",
			   "--name", "bigc", "-o", "json", NULL};
	pid_t cli = ctl_bg(0, a, out);
	cr_assert(wait_log(1, "model_push_asked push=", 10000), "node-2 was asked to push");
	/* the push's id, from node-2's log */
	char push[80] = "", line[4096];
	FILE *lf = fopen(c->nodes[1].log, "r");
	while (lf && fgets(line, sizeof line, lf)) {
		char *q = strstr(line, "model_push_asked push=");
		if (q)
			sscanf(q, "model_push_asked push=%64[0-9a-f]", push);
	}
	if (lf)
		fclose(lf);
	cr_assert(push[0], "no push id in node-2's log");
	char fr[400];
	snprintf(fr, sizeof fr, "{\"v\":1,\"type\":\"model_push_cancel\",\"id\":3,\"push\":\"%s\"}",
		 push);
	cr_assert_eq(hs_send_frame(m, fr), 0);
	f = hs_read_frame(m, 5000);
	cr_assert(f, "no answer to a member's model_push_cancel");
	cr_assert_str_eq(json_string_value(json_object_get(f, "code")), "unknown_type");
	json_decref(f);
	snprintf(fr, sizeof fr, "{\"v\":1,\"type\":\"forward\",\"id\":4,\"request\":{\"v\":1,"
		 "\"type\":\"model_push_cancel\",\"id\":1,\"push\":\"%s\"}}", push);
	cr_assert_eq(hs_send_frame(m, fr), 0);
	f = hs_read_frame(m, 5000);
	cr_assert(f, "no answer to a forwarded model_push_cancel");
	cr_assert_str_eq(json_string_value(json_object_get(f, "code")), "unknown_type");
	json_decref(f);
	int st;
	cr_assert_eq(waitpid(cli, &st, 0), cli);
	hs_close(m);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the push went on to its end");
	cr_assert(!log_has(1, "model_push_cancelled"), "node-2 stopped nothing");
	cr_assert(!log_has(0, "model_push_from_cancel"), "the head asked nothing of node-2");
	FILE *o = fopen(out, "r");
	json_t *j = o ? json_loadf(o, 0, NULL) : NULL;
	if (o)
		fclose(o);
	cr_assert(j && json_is_true(json_object_get(j, "complete")), "complete on node-1");
	json_decref(j);
}

/* A lying relay: node-2 corrupts chunk 1 (model.safetensors' first) every
 * time it sends it. node-3, after it, gives up on that chunk after 3 bad
 * copies and ends incomplete naming node-2; the source runs one repair round
 * to node-3 alone (node-2 passed over), which moves that one chunk: the answer
 * says complete, names the culprit and the source, and node-3's copy
 * verifies clean. */
Test(models, a_lying_relay_is_passed_over_by_a_repair_round)
{
	liar_chunk = "1";
	start_three(NULL);
	liar_chunk = NULL;
	char s2[600];
	snprintf(s2, sizeof s2, "%s/models", c->nodes[2].dir);
	struct h_result r = h_ctl(c, 0, "model", "push", src, "--nodes", "node-2,node-3", "--name",
				  "lied", NULL);
	cr_assert_eq(r.rc, 0, "complete after the repair round: %s\n%s", r.out, r.err);
	cr_assert(strstr(r.out, "Repaired on node-3: model.safetensors chunk 0, corrupted on receipt "
				"from node-2; fetched again from node-1."), "%s", r.out);
	cr_assert(strstr(r.out, "complete on every node"), "%s", r.out);
	cr_log_info("%s", r.out);
	h_result_free(&r);
	cr_assert(log_has(2, "model_chunk_given_up"), "node-3 gave up on node-2's copies");
	cr_assert(log_has(1, "model_chunk_refused_down"), "node-2 was told to stop sending it");
	cr_assert(log_has(0, "model_push_repair"), "the source ran a repair round");
	r = h_ctl(c, 2, "model", "verify", "lied", NULL);
	cr_assert_eq(r.rc, 0, "node-3's copy verifies: %s", r.out);
	h_result_free(&r);
	same_files(s2, "lied");

	/* the JSON answer, for another name */
	r = h_ctl(c, 0, "model", "push", src, "--nodes", "node-2,node-3", "--name", "lied2", "-o",
		  "json", NULL);
	cr_assert_eq(r.rc, 0, "%s\n%s", r.out, r.err);
	json_t *j = h_json(&r);
	cr_assert(json_is_true(json_object_get(j, "complete")), "%s", r.out);
	json_t *n3 = node_report(j, "node-3"), *n2 = node_report(j, "node-2");
	cr_assert_str_eq(json_string_value(json_object_get(n3, "status")), "complete");
	cr_assert_str_eq(json_string_value(json_object_get(n2, "status")), "complete");
	cr_assert_eq(json_integer_value(json_object_get(n3, "bytes_written")),
		     json_integer_value(json_object_get(j, "bytes")),
		     "both rounds together wrote the model once on node-3");
	cr_assert_geq(json_integer_value(json_object_get(n3, "chunks_bad")), 3);
	const char *n2id = json_string_value(json_object_get(n2, "node"));
	const char *n1id = json_string_value(json_object_get(json_array_get(json_object_get(j,
									     "route"), 0), "node"));
	cr_assert_str_eq(json_string_value(json_object_get(n3, "bad_from")), n2id);
	cr_assert_str_eq(json_string_value(json_object_get(n3, "repaired_from")), n1id);
	cr_assert(strstr(json_string_value(json_object_get(n3, "message")), n2id), "%s", r.out);
	json_t *rp = json_array_get(json_object_get(n3, "repairs"), 0);
	cr_assert_str_eq(json_string_value(json_object_get(rp, "bad_from_name")), "node-2");
	cr_assert_str_eq(json_string_value(json_object_get(rp, "from_name")), "node-1");
	cr_assert_str_eq(json_string_value(json_object_get(rp, "path")), "model.safetensors");
	json_t *rr = json_object_get(j, "repair_round");
	cr_assert(json_is_true(json_object_get(rr, "complete")), "%s", r.out);
	cr_assert_eq(json_array_size(json_object_get(rr, "nodes")), 1, "node-3 only: %s", r.out);
	cr_assert_str_eq(json_string_value(json_array_get(json_object_get(rr, "bad_from"), 0)), n2id);
	json_decref(j);
	h_result_free(&r);
	r = h_ctl(c, 2, "model", "verify", "lied2", NULL);
	cr_assert_eq(r.rc, 0, "%s", r.out);
	h_result_free(&r);
}

Test(models, push_refused_up_front_when_a_node_lacks_room)
{
	/* node-3's store is a 1 MiB tmpfs: the model (~197 KiB x 2 + ...) is made bigger */
	char small[600], c3[700];
	snprintf(small, sizeof small, "/tmp/sparkctl-it-small.%d", (int)getpid());
	mkdir(small, 0755);
	if (mount("tmpfs", small, "tmpfs", 0, "size=1m") < 0) {
		rmdir(small);
		cr_skip_test("cannot mount a tmpfs here: %s", strerror(errno));
	}
	char p[700];
	snprintf(p, sizeof p, "%s/big.bin", src);
	FILE *f = fopen(p, "wb");
	for (int k = 0; k < 3 << 20; k++)
		fputc(k & 0xff, f);
	fclose(f);
	snprintf(c3, sizeof c3, "%s/node3.yaml", "/tmp");
	f = fopen(c3, "w");
	fprintf(f, "models:\n  dir: %s\n", small);
	fclose(f);
	start_three(c3);
	struct h_result r = h_ctl(c, 0, "model", "push", src, "--nodes", "node-2,node-3", NULL);
	umount(small);
	rmdir(small);
	unlink(c3);
	cr_assert_eq(r.rc, 1, "%s", r.out);
	cr_assert(strstr(r.err, "node-3") || strstr(r.out, "lacks room"), "%s %s", r.out, r.err);
	cr_assert(strstr(r.out, "lacks room") && strstr(r.out, "bytes"), "%s", r.out);
	h_result_free(&r);
	char s1[600];
	snprintf(s1, sizeof s1, "%s/models/model-src/big.bin", c->nodes[1].dir);
	struct stat st;
	cr_assert_neq(stat(s1, &st), 0, "node-2 got no file");
}

/* SPARK_MODEL_DIR: every rank of a job finds its node's model store (the
 * folder `model ls` names, where a push puts NAME/). */
Test(models, every_rank_gets_its_nodes_model_dir)
{
	start_three(NULL);
	struct h_result r = h_ctl(c, 0, "run", "--group", "all", "--", "sh", "-c",
				  "echo \"dir $SPARK_NODE $SPARK_MODEL_DIR\"", NULL);
	cr_assert_eq(r.rc, 0, "%s\n%s", r.out, r.err);
	for (int i = 0; i < 3; i++) {
		struct h_result l = h_ctl(c, i, "model", "ls", "--node", c->nodes[i].name, "-o", "json",
					  NULL);
		cr_assert_eq(l.rc, 0, "%s", l.err);
		json_t *j = h_json(&l);
		json_t *n = json_array_get(json_object_get(j, "nodes"), 0);
		char want[1200];
		snprintf(want, sizeof want, "dir %s %s", c->nodes[i].name,
			 json_string_value(json_object_get(n, "dir")));
		cr_assert(strstr(r.out, want), "'%s' in:\n%s", want, r.out);
		json_decref(j);
		h_result_free(&l);
	}
	h_result_free(&r);
}

/* ---- the data port's limits (issue 27) ---- */

/* VmRSS of node i's sparkd, in KiB. */
static long rss_kib(int i)
{
	return (long)proc_num(i, "status", "VmRSS: %lld");
}

/* Open descriptors of node i's sparkd. */
static int nfds(int i)
{
	char p[64];
	snprintf(p, sizeof p, "/proc/%d/fd", (int)c->nodes[i].pid);
	DIR *d = opendir(p);
	int n = 0;
	for (struct dirent *e; d && (e = readdir(d));)
		n += e->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

/* The node id node i's certificate names (its CN). */
static void node_id(int i, char *out, size_t len)
{
	char crt[600];
	snprintf(crt, sizeof crt, "%s/node.crt", c->nodes[i].dir);
	FILE *f = fopen(crt, "r");
	cr_assert_not_null(f, "%s", crt);
	X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
	fclose(f);
	cr_assert_not_null(x);
	cr_assert_gt(X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, out,
					       (int)len), 0);
	X509_free(x);
}

/* node-3 (its real certificate) announces a push to node-2 with a bogus
 * ticket and the largest manifest allowed; unless that is answered within a
 * second, it sends 16 MiB of the manifest's text. The answer's code, or ""
 * (none, the link open). */
static void bogus_announce(struct hs_client *m, const char *push, const char *id3,
			   const char *id2, char *code, size_t len)
{
	char h[1024];
	snprintf(h, sizeof h, "{\"v\":1,\"type\":\"mp_hello\",\"id\":0,\"push\":\"%s\",\"from\":"
		 "\"%s\",\"chain\":[{\"id\":\"%s\",\"host\":\"127.0.0.1\",\"port\":%d},{\"id\":"
		 "\"%s\",\"host\":\"127.0.0.1\",\"port\":%d}],\"name\":\"huge\",\"manifest_bytes\":"
		 "%d,\"ticket\":\"bm90LWEtc2lnbmF0dXJl\",\"expires_at\":%lld}", push, id3, id3,
		 c->nodes[2].port + 1, id2, c->nodes[1].port + 1, 64 << 20,
		 (long long)time(NULL) + 600);
	cr_assert_eq(hs_send_frame(m, h), 0);
	code[0] = 0;
	json_t *f = hs_read_frame(m, 1000);
	if (f && json_is_string(json_object_get(f, "code")))
		snprintf(code, len, "%s", json_string_value(json_object_get(f, "code")));
	json_decref(f);
	static char piece[(512 << 10) + 200];
	for (int k = 0; k < 32 && !code[0] && !hs_peer_closed(m); k++) {
		int n = snprintf(piece, sizeof piece,
				 "{\"v\":1,\"type\":\"mp_manifest\",\"id\":0,\"off\":%d,\"text\":\"",
				 k << 19);
		memset(piece + n, 'x', 512 << 10);
		snprintf(piece + n + (512 << 10), sizeof piece - (size_t)n - (512 << 10), "\"}");
		if (hs_send_frame(m, piece) < 0)
			break;
	}
}

/* A member with a valid cluster certificate (node-3's) announces pushes to
 * node-2's data port with a bogus ticket, the largest manifest and (until it
 * is refused) 16 MiB of its text, on eight push ids, then goes: node-2's
 * sparkd grows by less than 16 MiB, each hello is answered not_authorized, and
 * the same ids announced
 * again get the same answer (not `busy`: nothing was kept). A TLS connection
 * that sends no hello is closed within MR_HELLO_MS; a flood of 400
 * connections leaves node-2 with at most MR_PREHELLO_MAX more descriptors;
 * then a real push to node-2 and node-3 completes. */
Test(models, a_member_without_a_ticket_pins_nothing_on_the_data_port, .timeout = 120)
{
	start_three(NULL);
	char id2[64], id3[64], crt[600], key[600];
	node_id(1, id2, sizeof id2);
	node_id(2, id3, sizeof id3);
	snprintf(crt, sizeof crt, "%s/node.crt", c->nodes[2].dir);
	snprintf(key, sizeof key, "%s/node.key", c->nodes[2].dir);
	int port = c->nodes[1].port + 1;
	cr_assert(wait_log(1, "model_data_listening", 5000), "node-2's data port is up");
	long rss0 = rss_kib(1);
	cr_assert_gt(rss0, 0);
	static const char *const pushes[] = {"a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8"};
	char code[8][64];
	for (int k = 0; k < 8; k++) {
		struct hs_client *m = hs_connect(port, crt, key, 5000);
		cr_assert(m, "node-3's certificate opens node-2's data port");
		hs_set_send_timeout(m, 1000);
		bogus_announce(m, pushes[k], id3, id2, code[k], sizeof code[k]);
		cr_log_info("push %s: %s", pushes[k], code[k][0] ? code[k] : "(no answer)");
		hs_close(m); /* and vanishes */
	}
	usleep(300000);
	long rss1 = rss_kib(1);
	cr_log_info("node-2's sparkd: VmRSS %ld KiB before, %ld KiB after", rss0, rss1);
	cr_assert_lt(rss1 - rss0, 16 << 10, "node-2 holds what a member without a ticket sent: "
		     "%ld KiB more", rss1 - rss0);
	for (int k = 0; k < 8; k++)
		cr_assert_str_eq(code[k], "not_authorized", "push %s: refused on its hello",
				 pushes[k]);
	/* the ids are free: announced again, the same refusal */
	for (int k = 0; k < 8; k++) {
		struct hs_client *m = hs_connect(port, crt, key, 5000);
		cr_assert(m, "node-2's data port still answers");
		char h[1024];
		snprintf(h, sizeof h, "{\"v\":1,\"type\":\"mp_hello\",\"id\":0,\"push\":\"%s\","
			 "\"from\":\"%s\",\"chain\":[{\"id\":\"%s\",\"host\":\"127.0.0.1\",\"port\":"
			 "%d},{\"id\":\"%s\",\"host\":\"127.0.0.1\",\"port\":%d}],\"name\":\"huge\","
			 "\"manifest_bytes\":100,\"ticket\":\"AAAA\",\"expires_at\":%lld}",
			 pushes[k], id3, id3, c->nodes[2].port + 1, id2, port,
			 (long long)time(NULL) + 600);
		cr_assert_eq(hs_send_frame(m, h), 0);
		json_t *f = hs_read_frame(m, 5000);
		cr_assert(f, "push %s: an answer", pushes[k]);
		cr_assert_str_eq(json_string_value(json_object_get(f, "code")), "not_authorized",
				 "push %s", pushes[k]);
		json_decref(f);
		hs_close(m);
	}
	/* a member's TLS connection without a hello is closed (MR_HELLO_MS) */
	struct hs_client *quiet = hs_connect(port, crt, key, 5000);
	cr_assert(quiet);
	long t0 = h_now_ms();
	cr_assert(hs_wait_closed(quiet, 15000), "a connection without a hello is closed");
	cr_log_info("closed after %ld ms without a hello", h_now_ms() - t0);
	hs_close(quiet);
	/* a flood of plain connections that say nothing */
	int fd0 = nfds(1);
	enum { FLOOD = 400 };
	static int fds[FLOOD];
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	int most = 0;
	for (int i = 0; i < FLOOD; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		cr_assert_geq(fds[i], 0);
		cr_assert_eq(connect(fds[i], (struct sockaddr *)&a, sizeof a), 0, "connect %d", i);
		if (i % 20 == 19) {
			int n = nfds(1);
			most = n > most ? n : most;
		}
	}
	usleep(300000);
	int n = nfds(1);
	most = n > most ? n : most;
	cr_log_info("node-2's sparkd: %d descriptors before the flood, at most %d during it", fd0,
		    most);
	cr_assert_leq(most - fd0, 64 + 16, "the flood holds %d descriptors", most - fd0);
	for (int i = 0; i < FLOOD; i++)
		close(fds[i]);
	/* a real push still works */
	struct h_result r = h_ctl(c, 0, "model", "push", src, "--nodes", "node-2,node-3", "--name",
				  "tiny", "-o", "json", NULL);
	cr_assert_eq(r.rc, 0, "%s\n%s", r.out, r.err);
	json_t *j = h_json(&r);
	cr_assert(json_is_true(json_object_get(j, "complete")), "%s", r.out);
	json_decref(j);
	h_result_free(&r);
}

/* model_manifest: the directory walk, the manifest JSON and its parser, and the
 * node-side store (partial files, resume, verify, space). */
#include "model_manifest.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define CS MM_CHUNK_MIN /* 64 KiB chunks keep the files small */

static char tmp[256];
static char src[300], store[300];

static void rmtree(const char *p)
{
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", p);
	cr_assert_eq(system(cmd), 0);
}

static void setup(void)
{
	snprintf(tmp, sizeof tmp, "/tmp/test_mm.XXXXXX");
	cr_assert_not_null(mkdtemp(tmp));
	snprintf(src, sizeof src, "%s/src", tmp);
	snprintf(store, sizeof store, "%s/store", tmp);
	cr_assert_eq(mkdir(src, 0755), 0);
}

static void teardown(void)
{
	rmtree(tmp);
}

static void put_file(const char *rel, const void *data, size_t len)
{
	char p[600];
	snprintf(p, sizeof p, "%s/%s", src, rel);
	char *s = strrchr(p, '/');
	*s = 0;
	char cmd[700];
	snprintf(cmd, sizeof cmd, "mkdir -p '%s'", p);
	cr_assert_eq(system(cmd), 0);
	*s = '/';
	FILE *f = fopen(p, "wb");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(data, 1, len, f), len);
	fclose(f);
}

static uint8_t *pattern(size_t len, unsigned seed)
{
	uint8_t *b = malloc(len ? len : 1);
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		b[i] = (uint8_t)x;
	}
	return b;
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *b = malloc((size_t)n + 1);
	cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return b;
}

/* A model folder: a small config, a 2.x-chunk shard in a folder, an empty
 * file and a file of exactly one chunk. */
static void make_model(void)
{
	put_file("config.json", "abc", 3);
	uint8_t *b = pattern(2 * CS + 17, 1);
	put_file("shards/model-00001.safetensors", b, 2 * CS + 17);
	free(b);
	put_file("empty", "", 0);
	b = pattern(CS, 2);
	put_file("exact.bin", b, CS);
	free(b);
}

TestSuite(manifest, .init = setup, .fini = teardown);

Test(manifest, sha256_known_vector)
{
	uint8_t h[MM_HASH_LEN];
	cr_assert_eq(mm_hash("abc", 3, h), 0);
	static const uint8_t want[8] = {0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea};
	cr_assert_eq(memcmp(h, want, 8), 0, "SHA-256(\"abc\") starts ba7816bf8f01cfea");
}

Test(manifest, walk_chunks_and_json)
{
	make_model();
	struct mm_manifest *m;
	char err[256] = "";
	cr_assert_eq(mm_build(src, "llama-3.1-8b", CS, &m, err, sizeof err), 0, "%s", err);
	cr_assert_eq(m->nfiles, 4);
	cr_assert_str_eq(m->files[0].path, "config.json");
	cr_assert_str_eq(m->files[1].path, "empty");
	cr_assert_str_eq(m->files[2].path, "exact.bin");
	cr_assert_str_eq(m->files[3].path, "shards/model-00001.safetensors");
	cr_assert_eq(m->files[0].nchunks, 1);
	cr_assert_eq(m->files[1].nchunks, 0);
	cr_assert_eq(m->files[2].nchunks, 1);
	cr_assert_eq(m->files[3].nchunks, 3);
	cr_assert_eq(m->nchunks, 5);
	cr_assert_eq(m->total_bytes, 3 + CS + 2 * CS + 17);
	uint64_t off;
	uint32_t len;
	const struct mm_file *f = mm_chunk_file(m, 4, &off, &len);
	cr_assert_eq(f, &m->files[3]);
	cr_assert_eq(off, 2 * CS);
	cr_assert_eq(len, 17, "the last chunk is short");
	cr_assert_eq(mm_chunk_file(m, 2, &off, &len), &m->files[3], "chunk after the empty file");
	cr_assert_eq(mm_chunk_file(m, 1, &off, &len), &m->files[2]);
	cr_assert_null(mm_chunk_file(m, 5, NULL, NULL));

	json_t *j = mm_to_json(m);
	json_t *f0 = json_array_get(json_object_get(j, "files"), 0);
	cr_assert_str_eq(json_string_value(json_object_get(f0, "chunks")),
			 "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	cr_assert_str_eq(json_string_value(json_object_get(j, "hash")), "sha256");
	char *text = json_dumps(j, JSON_COMPACT);
	struct mm_manifest *back;
	cr_assert_eq(mm_parse(text, strlen(text), &back, err, sizeof err), 0, "%s", err);
	cr_assert_eq(back->nfiles, m->nfiles);
	cr_assert_eq(back->nchunks, m->nchunks);
	cr_assert_eq(back->total_bytes, m->total_bytes);
	cr_assert_eq(memcmp(back->hashes, m->hashes, m->nchunks * MM_HASH_LEN), 0);
	for (size_t i = 0; i < m->nfiles; i++) {
		cr_assert_str_eq(back->files[i].path, m->files[i].path);
		cr_assert_eq(back->files[i].mtime_ns, m->files[i].mtime_ns);
		cr_assert_eq(back->files[i].mode, m->files[i].mode);
	}
	free(text);
	json_decref(j);
	mm_free(back);
	mm_free(m);
}

Test(manifest, refuses_what_cannot_be_carried)
{
	struct mm_manifest *m = NULL;
	char err[512] = "", p[600], q[600];
	put_file("ok.bin", "x", 1);
	/* a symlink inside, to a regular file: carried as that file */
	snprintf(p, sizeof p, "%s/alias.bin", src);
	cr_assert_eq(symlink("ok.bin", p), 0);
	cr_assert_eq(mm_build(src, "m", CS, &m, err, sizeof err), 0, "%s", err);
	cr_assert_eq(m->nfiles, 2);
	cr_assert_eq(m->files[0].size, 1);
	mm_free(m);
	/* leaving the directory */
	snprintf(q, sizeof q, "%s/outside", tmp);
	FILE *f = fopen(q, "w");
	fputs("secret", f);
	fclose(f);
	cr_assert_eq(symlink(q, (snprintf(p, sizeof p, "%s/leak", src), p)), 0);
	cr_assert_eq(mm_build(src, "m", CS, &m, err, sizeof err), -EXDEV);
	cr_assert_null(m);
	cr_assert(strstr(err, "leak") && strstr(err, "leaving"), "%s", err);
	unlink(p);
	snprintf(p, sizeof p, "%s/up", src);
	cr_assert_eq(symlink("../outside", p), 0);
	cr_assert_eq(mm_build(src, "m", CS, &m, err, sizeof err), -EXDEV, "relative ../ too");
	unlink(p);
	/* dangling */
	snprintf(p, sizeof p, "%s/dangling", src);
	cr_assert_eq(symlink("nothing-here", p), 0);
	cr_assert_lt(mm_build(src, "m", CS, &m, err, sizeof err), 0);
	cr_assert(strstr(err, "dangling"), "%s", err);
	unlink(p);
	/* a fifo */
	snprintf(p, sizeof p, "%s/pipe", src);
	cr_assert_eq(mkfifo(p, 0600), 0);
	cr_assert_eq(mm_build(src, "m", CS, &m, err, sizeof err), -EINVAL);
	cr_assert(strstr(err, "pipe") && strstr(err, "not a regular file"), "%s", err);
	unlink(p);
	/* a name the store reserves */
	put_file("w.sparkpart", "y", 1);
	cr_assert_eq(mm_build(src, "m", CS, &m, err, sizeof err), -EINVAL);
	cr_assert(strstr(err, "w.sparkpart"), "%s", err);
	snprintf(p, sizeof p, "%s/w.sparkpart", src);
	unlink(p);
	/* bad arguments */
	cr_assert_eq(mm_build(src, "../etc", CS, &m, err, sizeof err), -EINVAL);
	cr_assert_eq(mm_build(src, "m", 1000, &m, err, sizeof err), -EINVAL);
	cr_assert_eq(mm_build("/nonexistent/dir", "m", CS, &m, err, sizeof err), -ENOENT);
	cr_assert(strstr(err, "/nonexistent/dir"), "%s", err);
	cr_assert_eq(mm_build(q, "m", CS, &m, err, sizeof err), -ENOTDIR);
}

Test(manifest, names_and_paths)
{
	cr_assert(mm_valid_name("Qwen3-32B_FP8.v2"));
	static const char *bad_names[] = {"", ".hidden", "-x", "a/b", "a b", "é"};
	for (size_t i = 0; i < sizeof bad_names / sizeof *bad_names; i++)
		cr_assert_not(mm_valid_name(bad_names[i]), "%s", bad_names[i]);
	char longn[MM_NAME_MAX + 2];
	memset(longn, 'a', sizeof longn - 1);
	longn[sizeof longn - 1] = 0;
	cr_assert_not(mm_valid_name(longn));
	longn[MM_NAME_MAX] = 0;
	cr_assert(mm_valid_name(longn));
	cr_assert(mm_valid_path("a/b.c/..d/.e"));
	static const char *bad_paths[] = {"", "/etc/passwd", "../x", "a/../b", "a/./b", "a//b",
					  "a/", ".", "..", "x\ny", "a.sparkpart", "a\x7f"};
	for (size_t i = 0; i < sizeof bad_paths / sizeof *bad_paths; i++)
		cr_assert_not(mm_valid_path(bad_paths[i]), "%s", bad_paths[i]);
	char comp[300];
	memset(comp, 'c', 256);
	comp[256] = 0;
	cr_assert_not(mm_valid_path(comp), "a 256-byte component");
}

/* A valid manifest text with one replacement applied. */
static int parse_with(const char *from, const char *to)
{
	static const char base[] =
	    "{\"v\":1,\"name\":\"m\",\"hash\":\"sha256\",\"chunk_size\":65536,\"total_bytes\":3,"
	    "\"files\":[{\"path\":\"a\",\"size\":3,\"mtime_ns\":5,\"mode\":420,\"chunks\":"
	    "\"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\"},"
	    "{\"path\":\"b/c\",\"size\":0,\"mtime_ns\":-5,\"mode\":0,\"chunks\":\"\"}]}";
	char text[2048];
	const char *at = strstr(base, from);
	cr_assert_not_null(at, "%s", from);
	snprintf(text, sizeof text, "%.*s%s%s", (int)(at - base), base, to, at + strlen(from));
	struct mm_manifest *m = NULL;
	char err[256] = "";
	int r = mm_parse(text, strlen(text), &m, err, sizeof err);
	if (r == 0) {
		cr_assert_not_null(m);
		mm_free(m);
	} else {
		cr_assert_null(m);
		cr_assert(err[0], "an error says why");
	}
	return r;
}

Test(manifest, parser_checks_every_field)
{
	cr_assert_eq(parse_with("\"v\":1", "\"v\":1"), 0, "the base parses");
	static const char *const cases[][2] = {
		{"\"v\":1", "\"v\":2"},
		{"\"v\":1,", ""},
		{"\"v\":1", "\"v\":1,\"extra\":0"},
		{"\"v\":1", "\"v\":1,\"v\":1"},
		{"\"name\":\"m\"", "\"name\":\"../m\""},
		{"\"name\":\"m\"", "\"name\":5"},
		{"\"name\":\"m\"", "\"name\":\"m\\u0000x\""},
		{"\"sha256\"", "\"xxh3\""},
		{"65536", "4096"},
		{"65536", "65536.0"},
		{"65536", "134217728"},
		{"\"total_bytes\":3", "\"total_bytes\":4"},
		{"\"total_bytes\":3", "\"total_bytes\":-1"},
		{"\"files\":[", "\"files\":{\"x\":["},
		{"\"path\":\"a\"", "\"path\":\"../a\""},
		{"\"path\":\"a\"", "\"path\":\"/a\""},
		{"\"path\":\"a\"", "\"path\":\"a\\u0000b\""},
		{"\"path\":\"a\"", "\"path\":\"b/c\""},   /* duplicate */
		{"\"path\":\"a\"", "\"path\":\"z\""},     /* out of order */
		{"\"path\":\"a\"", "\"path\":\"b\""},     /* file and folder */
		{"\"path\":\"a\"", "\"path\":\"a.sparkpart\""},
		{"\"size\":3", "\"size\":-3"},
		{"\"size\":3", "\"size\":\"3\""},
		{"\"size\":3", "\"size\":70000"},        /* needs 2 chunks, has 1 */
		{"\"mtime_ns\":5", "\"mtime_ns\":\"5\""},
		{"\"mode\":420", "\"mode\":512"},
		{"\"mode\":420", "\"mode\":-1"},
		{"\"mode\":420,", ""},
		{"ba7816bf", "BA7816BF"},
		{"ba7816bf", "ba7816bg"},
		{"ad\"}", "\"}"},
		{"ad\"}", "ad00\"}"},
		{"\"chunks\":\"\"", "\"chunks\":\"00\""},
		{"\"chunks\":\"\"", "\"chunks\":null"},
		{"}]}", "},5]}"},
		{"}]}", "}]"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
		cr_assert_eq(parse_with(cases[i][0], cases[i][1]), -EINVAL, "case %zu: %s -> %s", i,
			     cases[i][0], cases[i][1]);
	struct mm_manifest *m;
	char err[64];
	cr_assert_eq(mm_parse("", 0, &m, err, sizeof err), -EINVAL);
	cr_assert_eq(mm_parse("[]", 2, &m, err, sizeof err), -EINVAL);
}

Test(manifest, source_changed_while_pushed)
{
	make_model();
	struct mm_manifest *m;
	char err[256];
	cr_assert_eq(mm_build(src, "m", CS, &m, err, sizeof err), 0, "%s", err);
	uint8_t *buf = malloc(CS);
	uint32_t len;
	cr_assert_eq(mm_read_chunk(m, src, 4, buf, &len, err, sizeof err), 0, "%s", err);
	cr_assert_eq(len, 17);
	/* same size, new content, mtime restored: the hash still catches it */
	char p[600];
	snprintf(p, sizeof p, "%s/shards/model-00001.safetensors", src);
	struct stat st;
	stat(p, &st);
	int fd = open(p, O_WRONLY);
	cr_assert_eq(pwrite(fd, "Z", 1, 2 * CS + 3), 1);
	struct timespec ts[2] = {st.st_atim, st.st_mtim};
	futimens(fd, ts);
	close(fd);
	cr_assert_eq(mm_read_chunk(m, src, 4, buf, &len, err, sizeof err), -EAGAIN);
	cr_assert(strstr(err, "model-00001.safetensors") && strstr(err, "changed"), "%s", err);
	/* a grown file: size differs */
	FILE *f = fopen(p, "ab");
	fputc('x', f);
	fclose(f);
	cr_assert_eq(mm_read_chunk(m, src, 2, buf, &len, err, sizeof err), -EAGAIN);
	free(buf);
	mm_free(m);
}

/* Receive the chunks of m that have lacks from src into the store (only the
 * first stop_after of them when stop_after >= 0: an interruption), then, for
 * a whole receive, finish every file that was partial. */
static void receive(const struct mm_manifest *m, const struct mm_have *have, int stop_after)
{
	uint8_t *buf = malloc(m->chunk_size);
	char err[256];
	int n = 0;
	for (size_t c = 0; c < m->nchunks; c++) {
		if (have && mm_have_test(have, c))
			continue;
		if (stop_after >= 0 && n++ == stop_after)
			break;
		uint32_t len;
		cr_assert_eq(mm_read_chunk(m, src, c, buf, &len, err, sizeof err), 0, "%s", err);
		cr_assert_eq(mm_store_put(store, m, c, buf, len), 0, "chunk %zu", c);
	}
	free(buf);
	if (stop_after >= 0)
		return;
	for (size_t i = 0; i < m->nfiles; i++) {
		char part[600];
		mm_store_paths(store, m, i, NULL, 0, part, sizeof part);
		if (access(part, F_OK) == 0)
			cr_assert_eq(mm_store_finish_file(store, m, i), 0, "%s", part);
	}
}

static void same_content(const struct mm_manifest *m)
{
	for (size_t i = 0; i < m->nfiles; i++) {
		char a[600], b[600], part[600];
		snprintf(a, sizeof a, "%s/%s", src, m->files[i].path);
		cr_assert_eq(mm_store_paths(store, m, i, b, sizeof b, part, sizeof part), 0);
		size_t la, lb;
		char *da = slurp(a, &la), *db = slurp(b, &lb);
		cr_assert_not_null(db, "%s is under its final name", b);
		cr_assert_eq(la, lb, "%s", b);
		cr_assert_eq(memcmp(da, db, la), 0, "%s", b);
		cr_assert_neq(access(part, F_OK), 0, "no %s left", part);
		struct stat st;
		stat(b, &st);
		cr_assert_eq((int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec,
			     m->files[i].mtime_ns, "mtime of %s", b);
		free(da);
		free(db);
	}
}

/* make_model() pushed whole into the store: its manifest */
static struct mm_manifest *stored_model(void)
{
	make_model();
	struct mm_manifest *m;
	char err[256] = "";
	cr_assert_eq(mm_build(src, "m", CS, &m, err, sizeof err), 0, "%s", err);
	struct mm_have h;
	cr_assert_eq(mm_store_have(store, m, &h, err, sizeof err), 0, "%s", err);
	cr_assert_eq(mm_store_begin(store, m, &h, err, sizeof err), 0, "%s", err);
	receive(m, &h, -1);
	mm_have_free(&h);
	return m;
}

TestSuite(store, .init = setup, .fini = teardown);

Test(store, receive_verify_rename)
{
	make_model();
	struct mm_manifest *m;
	char err[256] = "";
	cr_assert_eq(mm_build(src, "m", CS, &m, err, sizeof err), 0, "%s", err);
	struct mm_have h;
	cr_assert_eq(mm_store_have(store, m, &h, err, sizeof err), 0, "%s", err);
	cr_assert_eq(h.count, 0, "an empty store holds nothing");
	cr_assert_eq(mm_store_begin(store, m, &h, err, sizeof err), 0, "%s", err);
	char fin[600], part[600];
	mm_store_paths(store, m, 3, fin, sizeof fin, part, sizeof part);
	cr_assert_neq(access(fin, F_OK), 0, "nothing under the final name before it is complete");
	cr_assert_eq(access(part, F_OK), 0, "the partial file stands beside it");
	struct stat st;
	stat(part, &st);
	cr_assert_eq(st.st_size, 2 * CS + 17, "its full size is reserved");
	/* a lying peer: wrong bytes for chunk 2 are refused and not written */
	uint8_t *junk = pattern(CS, 99);
	cr_assert_eq(mm_store_put(store, m, 2, junk, CS), -EBADMSG);
	cr_assert_eq(mm_store_put(store, m, 4, junk, 16), -EBADMSG, "a wrong length too");
	cr_assert_eq(mm_store_put(store, m, 99, junk, CS), -EINVAL);
	free(junk);
	receive(m, &h, -1);
	same_content(m);
	json_t *list;
	cr_assert_eq(mm_store_list(store, &list, err, sizeof err), 0);
	cr_assert_eq(json_array_size(list), 1);
	json_t *e = json_array_get(list, 0);
	cr_assert_str_eq(json_string_value(json_object_get(e, "name")), "m");
	cr_assert(json_is_true(json_object_get(e, "complete")));
	cr_assert_eq(json_integer_value(json_object_get(e, "bytes")), (json_int_t)m->total_bytes);
	cr_assert(json_is_integer(json_object_get(e, "finished_at")));
	json_decref(list);
	json_t *bad;
	cr_assert_eq(mm_store_verify(store, "m", &bad, err, sizeof err), 0, "%s", err);
	cr_assert_eq(json_array_size(bad), 0);
	json_decref(bad);
	/* a second push holds everything without reading a byte */
	mm_have_free(&h);
	cr_assert_eq(mm_store_have(store, m, &h, err, sizeof err), 0);
	cr_assert_eq(h.count, m->nchunks);
	cr_assert_eq(h.bytes, m->total_bytes);
	uint64_t need, avail;
	cr_assert_eq(mm_store_space(store, m, &h, &need, &avail, err, sizeof err), 0);
	cr_assert_eq(need, 0);
	mm_have_free(&h);
	mm_free(m);
}

Test(store, resume_after_interruption)
{
	make_model();
	struct mm_manifest *m;
	char err[256] = "";
	cr_assert_eq(mm_build(src, "m", CS, &m, err, sizeof err), 0, "%s", err);
	struct mm_have h;
	cr_assert_eq(mm_store_have(store, m, &h, err, sizeof err), 0);
	cr_assert_eq(mm_store_begin(store, m, &h, err, sizeof err), 0, "%s", err);
	receive(m, &h, 3); /* three chunks in, then the agent "dies" */
	mm_have_free(&h);
	cr_assert_eq(mm_store_have(store, m, &h, err, sizeof err), 0, "%s", err);
	cr_assert_eq(h.count, 3, "the three received chunks are found again");
	cr_assert(mm_have_test(&h, 0) && mm_have_test(&h, 1) && mm_have_test(&h, 2));
	cr_assert_not(mm_have_test(&h, 3));
	uint64_t need, avail;
	cr_assert_eq(mm_store_space(store, m, &h, &need, &avail, err, sizeof err), 0, "%s", err);
	cr_assert_eq(need, 0, "the partial file already holds its room");
	cr_assert_eq(mm_store_begin(store, m, &h, err, sizeof err), 0, "%s", err);
	receive(m, &h, -1);
	same_content(m);
	mm_have_free(&h);
	mm_free(m);
}

Test(store, damaged_copy_found_and_repaired)
{
	make_model();
	struct mm_manifest *m;
	char err[256] = "";
	cr_assert_eq(mm_build(src, "m", CS, &m, err, sizeof err), 0, "%s", err);
	struct mm_have h;
	mm_store_have(store, m, &h, err, sizeof err);
	mm_store_begin(store, m, &h, err, sizeof err);
	receive(m, &h, -1);
	mm_have_free(&h);
	/* a bit flip on disk, size and mtime kept: verify finds the chunk */
	char fin[600], part[600];
	mm_store_paths(store, m, 3, fin, sizeof fin, part, sizeof part);
	struct stat st;
	stat(fin, &st);
	int fd = open(fin, O_RDWR);
	uint8_t b;
	cr_assert_eq(pread(fd, &b, 1, CS + 10), 1);
	b ^= 1;
	cr_assert_eq(pwrite(fd, &b, 1, CS + 10), 1);
	struct timespec ts[2] = {st.st_atim, st.st_mtim};
	futimens(fd, ts);
	close(fd);
	json_t *bad;
	cr_assert_eq(mm_store_verify(store, "m", &bad, err, sizeof err), 0);
	cr_assert_eq(json_array_size(bad), 1);
	json_t *e = json_array_get(bad, 0);
	cr_assert_str_eq(json_string_value(json_object_get(e, "path")),
			 "shards/model-00001.safetensors");
	cr_assert_eq(json_integer_value(json_object_get(e, "chunk")), 1);
	cr_assert_str_eq(json_string_value(json_object_get(e, "problem")), "hash");
	json_decref(bad);
	/* the next push: the damaged file no longer counts whole once its mtime moves */
	fd = open(fin, O_RDWR);
	futimens(fd, NULL);
	close(fd);
	cr_assert_eq(mm_store_have(store, m, &h, err, sizeof err), 0);
	cr_assert_eq(h.count, m->nchunks - 1, "all but the damaged chunk");
	cr_assert_not(mm_have_test(&h, 3));
	cr_assert_eq(mm_store_begin(store, m, &h, err, sizeof err), 0, "%s", err);
	cr_assert_eq(access(fin, F_OK), 0, "the damaged file stays until the new one replaces it");
	cr_assert_eq(access(part, F_OK), 0);
	receive(m, &h, -1);
	same_content(m);
	mm_have_free(&h);
	/* a missing file */
	unlink(fin);
	cr_assert_eq(mm_store_verify(store, "m", &bad, err, sizeof err), 0);
	cr_assert_eq(json_array_size(bad), 1);
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(bad, 0), "problem")),
			 "missing");
	json_decref(bad);
	mm_free(m);
}

Test(store, new_version_prune_and_remove)
{
	make_model();
	struct mm_manifest *m;
	char err[256] = "";
	cr_assert_eq(mm_build(src, "m", CS, &m, err, sizeof err), 0, "%s", err);
	struct mm_have h;
	mm_store_have(store, m, &h, err, sizeof err);
	mm_store_begin(store, m, &h, err, sizeof err);
	receive(m, &h, -1);
	mm_have_free(&h);
	mm_free(m);
	/* the source drops exact.bin and changes config.json */
	char p[600];
	snprintf(p, sizeof p, "%s/exact.bin", src);
	unlink(p);
	put_file("config.json", "abcd", 4);
	cr_assert_eq(mm_build(src, "m", CS, &m, err, sizeof err), 0, "%s", err);
	cr_assert_eq(mm_store_have(store, m, &h, err, sizeof err), 0);
	cr_assert_eq(h.count, m->nchunks - 1, "only config.json's chunk is missing");
	cr_assert_eq(mm_store_begin(store, m, &h, err, sizeof err), 0, "%s", err);
	receive(m, &h, -1);
	cr_assert_eq(mm_store_prune(store, m), 0);
	snprintf(p, sizeof p, "%s/m/exact.bin", store);
	cr_assert_neq(access(p, F_OK), 0, "the dropped file is pruned");
	same_content(m);
	mm_have_free(&h);
	cr_assert_eq(mm_store_remove(store, "m", err, sizeof err), 0, "%s", err);
	json_t *list;
	cr_assert_eq(mm_store_list(store, &list, err, sizeof err), 0);
	cr_assert_eq(json_array_size(list), 0);
	json_decref(list);
	snprintf(p, sizeof p, "%s/m", store);
	cr_assert_neq(access(p, F_OK), 0);
	cr_assert_eq(mm_store_remove(store, "m", err, sizeof err), -ENOENT);
	cr_assert(strstr(err, "no model m"), "%s", err);
	cr_assert_eq(mm_store_remove(store, "../x", err, sizeof err), -EINVAL);
	mm_free(m);
}

Test(store, space_refused_with_numbers)
{
	char err[256] = "";
	cr_assert_eq(mm_space_check("spark-2", 100, 100, err, sizeof err), 0);
	cr_assert_eq(mm_space_check("spark-2", 3221225472ull, 1073741824ull, err, sizeof err),
		     -ENOSPC);
	cr_assert(strstr(err, "spark-2") && strstr(err, "3221225472") && strstr(err, "1073741824") &&
		      strstr(err, "3.0 GiB") && strstr(err, "1.0 GiB"),
		  "%s", err);
	make_model();
	struct mm_manifest *m;
	cr_assert_eq(mm_build(src, "m", CS, &m, err, sizeof err), 0, "%s", err);
	struct mm_have h;
	mm_store_have(store, m, &h, err, sizeof err);
	uint64_t need, avail;
	cr_assert_eq(mm_store_space(store, m, &h, &need, &avail, err, sizeof err), 0, "%s", err);
	cr_assert_eq(need, m->total_bytes, "nothing held: everything to write");
	cr_assert_gt(avail, 0);
	mm_have_free(&h);
	mm_free(m);
}

/* A new version under a server that has the old one mapped (issue 28): the
 * mapping keeps the old bytes while the new version is received and after it
 * is complete, whether it is the same size or shorter (no SIGBUS); the final
 * name then holds the new version, a new inode; the old inode is freed when
 * the last mapping goes. */
static sigjmp_buf bus_jmp;
static void on_bus(int sig)
{
	(void)sig;
	siglongjmp(bus_jmp, 1);
}

/* 1 when reading every byte of the mapping raised SIGBUS, else 0; *same:
 * the mapping still equals want */
static int read_mapping(const uint8_t *map, const uint8_t *want, size_t len, bool *same)
{
	struct sigaction sa = {.sa_handler = on_bus}, old;
	sigaction(SIGBUS, &sa, &old);
	volatile int bus = 0;
	volatile unsigned sum = 0;
	if (sigsetjmp(bus_jmp, 1) == 0) {
		for (size_t i = 0; i < len; i++)
			sum += map[i];
		*same = memcmp(map, want, len) == 0;
	} else {
		bus = 1;
		*same = false;
	}
	sigaction(SIGBUS, &old, NULL);
	return bus;
}

static void new_version_under_a_mapping(size_t new_len)
{
	const size_t old_len = 2 * CS + 17;
	struct mm_manifest *m = stored_model();
	char err[256] = "";
	struct mm_have h;
	mm_free(m);
	/* the server: the shard mapped, as spark-decode maps safetensors */
	char fin[600];
	snprintf(fin, sizeof fin, "%s/m/shards/model-00001.safetensors", store);
	int fd = open(fin, O_RDONLY);
	cr_assert_geq(fd, 0);
	struct stat st0;
	fstat(fd, &st0);
	uint8_t *map = mmap(NULL, old_len, PROT_READ, MAP_PRIVATE, fd, 0);
	cr_assert_neq(map, MAP_FAILED);
	close(fd);
	uint8_t *v1 = pattern(old_len, 1);
	json_t *list;
	cr_assert_eq(mm_store_list(store, &list, err, sizeof err), 0);
	char ver1[16];
	snprintf(ver1, sizeof ver1, "%s",
		 json_string_value(json_object_get(json_array_get(list, 0), "version")));
	cr_assert_eq(strlen(ver1), 12, "a version of 12 hex digits: %s", ver1);
	cr_assert(json_is_integer(json_object_get(json_array_get(list, 0), "changed_at")));
	json_decref(list);
	/* version 2: chunk 0 kept, the rest changed (and maybe shorter) */
	uint8_t *v2 = pattern(new_len, 5);
	memcpy(v2, v1, CS);
	put_file("shards/model-00001.safetensors", v2, new_len);
	cr_assert_eq(mm_build(src, "m", CS, &m, err, sizeof err), 0, "%s", err);
	cr_assert_eq(mm_store_have(store, m, &h, err, sizeof err), 0, "%s", err);
	cr_assert_eq(h.count, m->nchunks - (new_len + CS - 1) / CS + 1,
		     "all but the changed chunks of the shard are held");
	cr_assert_eq(mm_store_begin(store, m, &h, err, sizeof err), 0, "%s", err);
	bool same;
	cr_assert_eq(read_mapping(map, v1, old_len, &same), 0, "no SIGBUS after the push began");
	cr_assert(same, "the mapping still reads version 1 after the push began");
	receive(m, &h, -1);
	same_content(m);
	cr_assert_eq(read_mapping(map, v1, old_len, &same), 0,
		     "no SIGBUS under a mapping of the old version (new size %zu)", new_len);
	cr_assert(same, "the mapping still reads version 1 once version 2 is complete");
	struct stat st1;
	cr_assert_eq(stat(fin, &st1), 0);
	cr_assert_neq(st1.st_ino, st0.st_ino, "version 2 is a new inode");
	cr_assert_eq((size_t)st1.st_size, new_len);
	/* a second push of version 2 moves nothing and keeps its inode */
	mm_have_free(&h);
	cr_assert_eq(mm_store_have(store, m, &h, err, sizeof err), 0);
	cr_assert_eq(h.count, m->nchunks);
	uint64_t need, avail;
	cr_assert_eq(mm_store_space(store, m, &h, &need, &avail, err, sizeof err), 0);
	cr_assert_eq(need, 0);
	cr_assert_eq(mm_store_begin(store, m, &h, err, sizeof err), 0, "%s", err);
	struct stat st2;
	stat(fin, &st2);
	cr_assert_eq(st2.st_ino, st1.st_ino, "nothing to move: the file stays");
	cr_assert_eq(mm_store_list(store, &list, err, sizeof err), 0);
	const char *ver2 = json_string_value(json_object_get(json_array_get(list, 0), "version"));
	cr_assert(ver2 && strlen(ver2) == 12 && strcmp(ver2, ver1), "version %s after %s", ver2, ver1);
	json_decref(list);
	json_t *bad;
	cr_assert_eq(mm_store_verify(store, "m", &bad, err, sizeof err), 0);
	cr_assert_eq(json_array_size(bad), 0);
	json_decref(bad);
	munmap(map, old_len);
	mm_have_free(&h);
	mm_free(m);
	free(v1);
	free(v2);
}

Test(store, new_version_same_size_leaves_a_mapping_alone)
{
	new_version_under_a_mapping(2 * CS + 17);
}

Test(store, new_version_shorter_leaves_a_mapping_alone)
{
	new_version_under_a_mapping(CS + 100);
}

/* An interrupted push of a new version, resumed: the chunks already in the
 * partial file and those the old final file holds both count; the final file
 * keeps the old version until the new one is complete. */
Test(store, new_version_resumed_keeps_the_old_file_until_complete)
{
	struct mm_manifest *m = stored_model();
	char err[256] = "";
	struct mm_have h;
	mm_free(m);
	uint8_t *v1 = pattern(2 * CS + 17, 1), *v2 = pattern(2 * CS + 17, 6);
	memcpy(v2, v1, CS); /* chunk 0 kept, chunks 1 and 2 new */
	put_file("shards/model-00001.safetensors", v2, 2 * CS + 17);
	cr_assert_eq(mm_build(src, "m", CS, &m, err, sizeof err), 0, "%s", err);
	cr_assert_eq(mm_store_have(store, m, &h, err, sizeof err), 0);
	cr_assert_eq(mm_store_begin(store, m, &h, err, sizeof err), 0, "%s", err);
	receive(m, &h, 1); /* one new chunk in, then the agent "dies" */
	mm_have_free(&h);
	char fin[600];
	snprintf(fin, sizeof fin, "%s/m/shards/model-00001.safetensors", store);
	size_t len;
	char *now = slurp(fin, &len);
	cr_assert(now && len == 2 * CS + 17 && !memcmp(now, v1, len),
		  "the final file is version 1 while version 2 is partial");
	free(now);
	cr_assert_eq(mm_store_have(store, m, &h, err, sizeof err), 0, "%s", err);
	cr_assert_eq(h.count, m->nchunks - 1, "only one chunk is missing");
	cr_assert_eq(mm_store_begin(store, m, &h, err, sizeof err), 0, "%s", err);
	receive(m, &h, -1);
	same_content(m);
	mm_have_free(&h);
	mm_free(m);
	free(v1);
	free(v2);
}

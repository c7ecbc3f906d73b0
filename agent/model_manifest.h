/* model_manifest: what `sparkctl model push` moves, and where a node keeps it
 * (issue 18, docs/models.md). Pure: files and memory only, no agent state, no
 * sockets, so units and the fuzz target use it as it is.
 *
 * Manifest: a model directory walked in a fixed order (regular files only;
 * a symlink is followed when it stays inside the directory and names a
 * regular file, refused otherwise; fifos, sockets and devices are refused),
 * every file cut into chunks of chunk_size bytes (the last one shorter), each
 * chunk named by its SHA-256. JSON form (docs/models.md):
 *   {"v":1, "name":N, "hash":"sha256", "chunk_size":C, "total_bytes":T,
 *    "files":[{"path":P, "size":S, "mtime_ns":M, "mode":O, "chunks":HEX}, ...]}
 * HEX is the files' chunk hashes concatenated, 64 lower-case hex digits per
 * chunk. The parser checks every field, type, range and length, and that
 * the paths are safe relative paths that do not collide.
 *
 * Store: ROOT/NAME/PATH are complete, verified files; a file being received
 * is ROOT/NAME/PATH.sparkpart (never under its final name), renamed once
 * every chunk of it is verified; ROOT/.meta/NAME.json keeps the manifest a
 * node last received for NAME and what it knows of its own files. Every
 * function returns 0 or a negative errno code, with a message for people in
 * err where one is taken. */
#ifndef SPARK_MODEL_MANIFEST_H
#define SPARK_MODEL_MANIFEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MM_HASH_LEN 32                    /* SHA-256 */
#define MM_CHUNK_DEFAULT (4u << 20)       /* 4 MiB */
#define MM_CHUNK_MIN (64u << 10)          /* 64 KiB */
#define MM_CHUNK_MAX (64u << 20)          /* 64 MiB */
#define MM_MAX_FILES 65536
#define MM_MAX_CHUNKS (1u << 22)          /* 16 TiB at 4 MiB */
#define MM_MAX_FILE_BYTES (1ull << 44)    /* 16 TiB */
#define MM_PATH_MAX 1024                  /* a relative path in a manifest */
#define MM_NAME_MAX 128                   /* a model name */
#define MM_PART_SUFFIX ".sparkpart"

struct mm_file {
	char *path;            /* relative, '/'-separated */
	uint64_t size;
	int64_t mtime_ns;
	uint32_t mode;         /* permission bits only (0..0777) */
	uint32_t first_chunk;  /* index of its first chunk in mm_manifest.hashes */
	uint32_t nchunks;      /* ceil(size / chunk_size) */
};

struct mm_manifest {
	char name[MM_NAME_MAX + 1];
	uint32_t chunk_size;
	uint64_t total_bytes;
	size_t nfiles;
	struct mm_file *files;   /* sorted by path (byte order) */
	size_t nchunks;
	uint8_t (*hashes)[MM_HASH_LEN];
};

/* A model name: 1-128 of [A-Za-z0-9._-], not starting with '.' or '-'. */
bool mm_valid_name(const char *name);
/* A relative path a manifest may carry: 1-MM_PATH_MAX bytes, components of
 * 1-255 bytes, none "." or "..", no leading or doubled '/', no byte below
 * 0x20, no trailing MM_PART_SUFFIX. */
bool mm_valid_path(const char *path);

/* Walk dir and hash it. chunk_size 0 means MM_CHUNK_DEFAULT. A file whose
 * size or mtime changed while it was read is an error naming it (-EAGAIN). */
int mm_build(const char *dir, const char *name, uint32_t chunk_size, struct mm_manifest **out,
	     char *err, size_t errlen);
void mm_free(struct mm_manifest *m);

/* Chunk i: its file, its offset in that file and its length. */
const struct mm_file *mm_chunk_file(const struct mm_manifest *m, size_t chunk, uint64_t *offset,
				    uint32_t *len);
/* SHA-256 of len bytes (OpenSSL EVP). */
int mm_hash(const void *data, size_t len, uint8_t out[MM_HASH_LEN]);
/* 0 when data hashes to chunk i's hash and has its length; -EBADMSG otherwise. */
int mm_check_chunk(const struct mm_manifest *m, size_t chunk, const void *data, size_t len);
/* Read chunk i from the source directory into buf (chunk_size bytes) and check
 * it: -EAGAIN naming the file when it no longer matches the manifest. */
int mm_read_chunk(const struct mm_manifest *m, const char *dir, size_t chunk, void *buf,
		  uint32_t *len, char *err, size_t errlen);

/* JSON form (new reference) and its parser. mm_parse reads bytes (a file, a
 * frame) with duplicate keys refused. */
json_t *mm_to_json(const struct mm_manifest *m);
int mm_from_json(const json_t *j, struct mm_manifest **out, char *err, size_t errlen);
int mm_parse(const char *buf, size_t len, struct mm_manifest **out, char *err, size_t errlen);

/* --- the node-side store --- */

/* Which chunks a node holds (bit i: chunk i verified on its disk). */
struct mm_have {
	size_t nchunks;
	size_t count;          /* bits set */
	uint64_t bytes;        /* their bytes */
	uint64_t *bits;
	/* of those, the ones found only in the file under the final name (an
	 * older version's or a damaged copy): mm_store_begin copies them into
	 * the new .sparkpart; NULL when none (the source's own have) */
	uint64_t *in_final;
};
void mm_have_free(struct mm_have *h);
bool mm_have_test(const struct mm_have *h, size_t chunk);

/* ROOT/NAME, ROOT/NAME/PATH, ROOT/NAME/PATH.sparkpart, ROOT/.meta/NAME.json. */
int mm_store_paths(const char *root, const struct mm_manifest *m, size_t file, char *final,
		   size_t flen, char *part, size_t plen);

/* What of m this node already holds, for resume: a complete file recorded
 * in ROOT/.meta/NAME.json with the same chunks, size and its own mtime counts
 * whole without being read; any other partial, then final, file of that path
 * is re-hashed chunk by chunk and only the chunks that match count (those
 * found only in the final file are marked in in_final). */
int mm_store_have(const char *root, const struct mm_manifest *m, struct mm_have *out, char *err,
		  size_t errlen);

/* Room: bytes still to write for m (its size minus the chunks held) against
 * the free bytes of the file system under ROOT (statvfs f_bavail). -ENOSPC
 * with both numbers in err when need > avail. */
int mm_store_space(const char *root, const struct mm_manifest *m, const struct mm_have *have,
		   uint64_t *need, uint64_t *avail, char *err, size_t errlen);
/* The decision alone (also used by the head with the nodes' numbers). */
int mm_space_check(const char *node, uint64_t need, uint64_t avail, char *err, size_t errlen);

/* Begin receiving m: ROOT/NAME and its folders, ROOT/.meta/NAME.json (the
 * manifest, files not complete yet), and for every file not complete its
 * .sparkpart (space reserved with posix_fallocate, so a disk never fills
 * half-way), into which the chunks held in the final file are copied. A
 * file under its final name is never written: it stays (a running server
 * may have it open or mapped) until mm_store_finish_file renames the new
 * one over it, a new inode. Files that are complete and files of an older
 * manifest that this one does not list are left alone (mm_store_prune
 * removes the latter). */
int mm_store_begin(const char *root, const struct mm_manifest *m, const struct mm_have *have,
		   char *err, size_t errlen);
/* Check chunk i against the manifest (-EBADMSG: not written) and write it into
 * its file's .sparkpart. */
int mm_store_put(const char *root, const struct mm_manifest *m, size_t chunk, const void *data,
		 size_t len);
/* Read chunk i back from the store (the .sparkpart while there is one, else
 * the final file) into
 * buf (chunk_size bytes); -EBADMSG when what is there no longer matches its
 * hash (a damaged disk), -ENOENT when neither file is there. */
int mm_store_get(const char *root, const struct mm_manifest *m, size_t chunk, void *buf,
		 uint32_t *len);
/* Write a good copy of chunk i (checked against the manifest first: -EBADMSG)
 * over a damaged one in its .sparkpart (else its final file: the bytes a
 * server that mapped it reads become the right ones again), keeping the
 * file's size and giving it back the manifest's mtime, then fsync. */
int mm_store_repair(const char *root, const struct mm_manifest *m, size_t chunk, const void *data,
		    size_t len);
/* Every chunk of file f is in: fsync, mode and mtime from the manifest,
 * rename to the final name, record it complete in ROOT/.meta/NAME.json. */
int mm_store_finish_file(const char *root, const struct mm_manifest *m, size_t file);
/* Remove files under ROOT/NAME that m does not list (an older version's). */
int mm_store_prune(const char *root, const struct mm_manifest *m);

/* The models of a store: [{"name", "files", "files_complete", "bytes",
 * "complete", "pushed_at", "finished_at", "version" (12 hex digits of the
 * content's digest), "changed_at" (the last replacement or removal of a file
 * under its final name, or null)}]. */
int mm_store_list(const char *root, json_t **out, char *err, size_t errlen);
/* Remove ROOT/NAME and its record; -ENOENT when neither exists. */
int mm_store_remove(const char *root, const char *name, char *err, size_t errlen);
/* Re-hash every file of NAME against its recorded manifest: *bad gets an
 * array of {"path", "chunk", "problem"} ("missing", "size", "hash"). */
int mm_store_verify(const char *root, const char *name, json_t **bad, char *err, size_t errlen);
/* The recorded manifest of NAME (-ENOENT when none). */
int mm_store_manifest(const char *root, const char *name, struct mm_manifest **out, char *err,
		      size_t errlen);

#endif

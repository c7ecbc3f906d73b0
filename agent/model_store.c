/* model_store: the node-side store of pushed models (model_manifest.h).
 * ROOT/NAME/PATH complete files, ROOT/NAME/PATH.sparkpart files being
 * received, ROOT/.meta/NAME.json {"manifest", "complete":[paths],
 * "pushed_at", "finished_at", "changed_at" (the last time a file under a
 * final name was replaced or removed)}.
 * A file under its final name is never written again (but for a repair of
 * a damaged chunk with its right bytes): a new version is received in a
 * new .sparkpart and renamed over it, so a server that has the old file
 * open or mapped keeps the old inode's bytes until it closes them. */
#include "model_manifest.h"

#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define META_MAX (64u << 20) /* a recorded manifest: 16 TiB at 4 MiB chunks is ~270 MiB; refuse beyond */

void mm_have_free(struct mm_have *h)
{
	free(h->bits);
	free(h->in_final);
	memset(h, 0, sizeof *h);
}

bool mm_have_test(const struct mm_have *h, size_t chunk)
{
	return chunk < h->nchunks && (h->bits[chunk / 64] >> (chunk % 64) & 1);
}

static bool bit_test(const uint64_t *bits, size_t chunk)
{
	return bits && (bits[chunk / 64] >> (chunk % 64) & 1);
}

static void have_set(struct mm_have *h, const struct mm_manifest *m, size_t chunk)
{
	if (mm_have_test(h, chunk))
		return;
	uint32_t len = 0;
	mm_chunk_file(m, chunk, NULL, &len);
	h->bits[chunk / 64] |= 1ull << (chunk % 64);
	h->count++;
	h->bytes += len;
}

int mm_store_paths(const char *root, const struct mm_manifest *m, size_t file, char *final,
		   size_t flen, char *part, size_t plen)
{
	if (file >= m->nfiles)
		return -EINVAL;
	const char *p = m->files[file].path;
	if (final && snprintf(final, flen, "%s/%s/%s", root, m->name, p) >= (int)flen)
		return -ENAMETOOLONG;
	if (part && snprintf(part, plen, "%s/%s/%s%s", root, m->name, p, MM_PART_SUFFIX) >=
			(int)plen)
		return -ENAMETOOLONG;
	return 0;
}

static int meta_path(const char *root, const char *name, char *out, size_t len)
{
	return snprintf(out, len, "%s/.meta/%s.json", root, name) >= (int)len ? -ENAMETOOLONG : 0;
}

/* ROOT/.meta/NAME.json, or NULL (-ENOENT) */
static int meta_load(const char *root, const char *name, json_t **out)
{
	char path[PATH_MAX];
	*out = NULL;
	if (meta_path(root, name, path, sizeof path) < 0)
		return -ENAMETOOLONG;
	char *buf;
	size_t len;
	int r = util_read_file(path, &buf, &len, META_MAX);
	if (r < 0)
		return r;
	json_t *j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, NULL);
	free(buf);
	if (!json_is_object(j)) {
		json_decref(j);
		return -EINVAL;
	}
	*out = j;
	return 0;
}

static int meta_save(const char *root, const char *name, json_t *meta)
{
	char path[PATH_MAX], dir[PATH_MAX];
	if (meta_path(root, name, path, sizeof path) < 0 ||
	    snprintf(dir, sizeof dir, "%s/.meta", root) >= (int)sizeof dir)
		return -ENAMETOOLONG;
	int r = util_mkdirs(dir, 0755);
	if (r < 0)
		return r;
	char *s = json_dumps(meta, JSON_COMPACT);
	if (!s)
		return -ENOMEM;
	r = util_write_file(path, s, strlen(s), 0644);
	free(s);
	return r;
}

int mm_store_manifest(const char *root, const char *name, struct mm_manifest **out, char *err,
		      size_t errlen)
{
	*out = NULL;
	if (!mm_valid_name(name)) {
		snprintf(err, errlen, "'%s' is not a model name", name);
		return -EINVAL;
	}
	json_t *meta;
	int r = meta_load(root, name, &meta);
	if (r == -ENOENT) {
		snprintf(err, errlen, "no model %s on this node", name);
		return r;
	}
	if (r < 0) {
		snprintf(err, errlen, "%s/.meta/%s.json: unreadable (%s)", root, name, strerror(-r));
		return r;
	}
	r = mm_from_json(json_object_get(meta, "manifest"), out, err, errlen);
	json_decref(meta);
	return r;
}

/* Is path listed in the meta's "complete" array? */
static bool meta_complete(const json_t *meta, const char *path)
{
	size_t i;
	json_t *v;
	json_array_foreach(json_object_get(meta, "complete"), i, v)
		if (json_is_string(v) && !strcmp(json_string_value(v), path))
			return true;
	return false;
}

static bool same_file_entry(const struct mm_manifest *a, const struct mm_file *fa,
			    const struct mm_manifest *b, const struct mm_file *fb)
{
	return a->chunk_size == b->chunk_size && fa->size == fb->size &&
	       fa->mtime_ns == fb->mtime_ns && fa->nchunks == fb->nchunks &&
	       memcmp(a->hashes[fa->first_chunk], b->hashes[fb->first_chunk],
		      (size_t)fa->nchunks * MM_HASH_LEN) == 0;
}

static const struct mm_file *find_file(const struct mm_manifest *m, const char *path)
{
	size_t lo = 0, hi = m->nfiles;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(m->files[mid].path, path);
		if (c == 0)
			return &m->files[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static int64_t st_mtime_ns(const struct stat *st)
{
	return (int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
}

/* Hash the chunks of file f not yet held found in the file at path; set
 * those that match (and mark them in mark, when given). */
static int rehash(const char *path, const struct mm_manifest *m, const struct mm_file *f,
		  uint8_t *buf, struct mm_have *h, uint64_t *mark)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return 0;
	}
	for (uint32_t c = 0; c < f->nchunks; c++) {
		uint64_t off = (uint64_t)c * m->chunk_size;
		size_t want = f->size - off < m->chunk_size ? (size_t)(f->size - off) : m->chunk_size;
		if (off + want > (uint64_t)st.st_size)
			break;
		if (mm_have_test(h, f->first_chunk + c))
			continue;
		size_t got = 0;
		while (got < want) {
			ssize_t k = pread(fd, buf + got, want - got, (off_t)(off + got));
			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0)
				break;
			got += (size_t)k;
		}
		if (got == want && mm_check_chunk(m, f->first_chunk + c, buf, want) == 0) {
			have_set(h, m, f->first_chunk + c);
			if (mark)
				mark[(f->first_chunk + c) / 64] |= 1ull << ((f->first_chunk + c) % 64);
		}
	}
	close(fd);
	return 0;
}

int mm_store_have(const char *root, const struct mm_manifest *m, struct mm_have *out, char *err,
		  size_t errlen)
{
	memset(out, 0, sizeof *out);
	out->nchunks = m->nchunks;
	out->bits = calloc(m->nchunks / 64 + 1, sizeof *out->bits);
	out->in_final = calloc(m->nchunks / 64 + 1, sizeof *out->in_final);
	if (!out->bits || !out->in_final) {
		mm_have_free(out);
		return -ENOMEM;
	}
	json_t *meta = NULL;
	struct mm_manifest *old = NULL;
	if (meta_load(root, m->name, &meta) == 0) {
		char e2[128];
		if (mm_from_json(json_object_get(meta, "manifest"), &old, e2, sizeof e2) < 0)
			old = NULL; /* an unreadable record: everything is re-hashed */
	}
	uint8_t *buf = malloc(m->chunk_size);
	int r = buf ? 0 : -ENOMEM;
	for (size_t i = 0; r == 0 && i < m->nfiles; i++) {
		const struct mm_file *f = &m->files[i];
		char final[PATH_MAX], part[PATH_MAX];
		if ((r = mm_store_paths(root, m, i, final, sizeof final, part, sizeof part)) < 0)
			break;
		struct stat st;
		bool fin = lstat(final, &st) == 0 && S_ISREG(st.st_mode);
		const struct mm_file *of = old ? find_file(old, f->path) : NULL;
		if (fin && of && meta_complete(meta, f->path) && same_file_entry(m, f, old, of) &&
		    (uint64_t)st.st_size == f->size && st_mtime_ns(&st) == f->mtime_ns) {
			for (uint32_t c = 0; c < f->nchunks; c++) {
				size_t k = f->first_chunk + c;
				have_set(out, m, k);
				out->in_final[k / 64] |= 1ull << (k % 64);
			}
			continue;
		}
		/* the new version's partial file first, then what of it the file
		 * under the final name (an older version, a damaged copy) holds */
		const char *at = part;
		r = rehash(part, m, f, buf, out, NULL);
		if (r == 0 && fin)
			r = rehash(at = final, m, f, buf, out, out->in_final);
		if (r < 0)
			snprintf(err, errlen, "%s: %s", at, strerror(-r));
	}
	free(buf);
	mm_free(old);
	json_decref(meta);
	if (r < 0)
		mm_have_free(out);
	return r;
}

/* n bytes for people: "1.5 GiB", "37 MiB" (never "0.0 GiB"), "512 bytes". */
static const char *size_str(uint64_t n, char *buf, size_t len)
{
	if (n >= 1073741824ull)
		snprintf(buf, len, "%.1f GiB", n / 1073741824.0);
	else if (n >= 1048576ull)
		snprintf(buf, len, "%.0f MiB", n / 1048576.0);
	else
		snprintf(buf, len, "%" PRIu64 " bytes", n);
	return buf;
}

int mm_space_check(const char *node, uint64_t need, uint64_t avail, char *err, size_t errlen)
{
	if (need <= avail)
		return 0;
	char a[32], b[32], c[32];
	snprintf(err, errlen, "%s lacks room: %" PRIu64 " bytes (%s) to write, %" PRIu64
		 " bytes (%s) free; free %s more or point models.dir at a bigger disk",
		 node, need, size_str(need, a, sizeof a), avail, size_str(avail, b, sizeof b),
		 size_str(need - avail, c, sizeof c));
	return -ENOSPC;
}

int mm_store_space(const char *root, const struct mm_manifest *m, const struct mm_have *have,
		   uint64_t *need, uint64_t *avail, char *err, size_t errlen)
{
	/* The store may not exist yet: ask the nearest folder that does. */
	char dir[PATH_MAX];
	util_strlcpy(dir, root, sizeof dir);
	struct statvfs sv;
	while (statvfs(dir, &sv) < 0) {
		char *s = strrchr(dir, '/');
		if (errno != ENOENT || !s) {
			int e = errno;
			snprintf(err, errlen, "%s: %s", root, strerror(e));
			return -e;
		}
		if (s == dir)
			s[1] = 0;
		else
			*s = 0;
	}
	/* A file held whole under its final name needs nothing. Any other is
	 * received whole into its partial file (what the final file holds is
	 * copied there: the final file is never written), which holds its whole
	 * size once made (posix_fallocate): need is what is not yet allocated. */
	uint64_t n = 0;
	for (size_t i = 0; i < m->nfiles; i++) {
		char part[PATH_MAX];
		struct stat st;
		const struct mm_file *f = &m->files[i];
		uint32_t infin = 0;
		for (uint32_t c = 0; have && c < f->nchunks; c++)
			infin += bit_test(have->in_final, f->first_chunk + c);
		if (f->nchunks && infin == f->nchunks)
			continue;
		uint64_t alloc = 0;
		if (mm_store_paths(root, m, i, NULL, 0, part, sizeof part) == 0 &&
		    lstat(part, &st) == 0 && S_ISREG(st.st_mode))
			alloc = (uint64_t)st.st_blocks * 512;
		n += alloc < f->size ? f->size - alloc : 0;
	}
	*need = n;
	*avail = (uint64_t)sv.f_bavail * sv.f_frsize;
	return mm_space_check("this node", *need, *avail, err, errlen);
}

static int mkparents(const char *path)
{
	char dir[PATH_MAX];
	util_strlcpy(dir, path, sizeof dir);
	char *s = strrchr(dir, '/');
	if (!s)
		return 0;
	*s = 0;
	return util_mkdirs(dir, 0755);
}

/* Mode and mtime from the manifest, then fsync. */
static int settle_file(int fd, const struct mm_file *f)
{
	struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT},
				 {.tv_sec = f->mtime_ns / 1000000000LL,
				  .tv_nsec = f->mtime_ns % 1000000000LL}};
	if (ts[1].tv_nsec < 0) {
		ts[1].tv_sec -= 1;
		ts[1].tv_nsec += 1000000000LL;
	}
	if (fchmod(fd, (mode_t)f->mode) < 0 || fsync(fd) < 0 || futimens(fd, ts) < 0)
		return -errno;
	return 0;
}

static int complete_add(json_t *meta, const char *path)
{
	if (meta_complete(meta, path))
		return 0;
	return json_array_append_new(json_object_get(meta, "complete"), json_string(path)) < 0
		       ? -ENOMEM
		       : 0;
}

/* All of len bytes at off into buf: 0, or -EIO when the file is shorter. */
static int read_at(int fd, void *buf, size_t len, uint64_t off)
{
	size_t got = 0;
	while (got < len) {
		ssize_t k = pread(fd, (uint8_t *)buf + got, len - got, (off_t)(off + got));
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			return -EIO;
		got += (size_t)k;
	}
	return 0;
}

static int write_at(int fd, const void *data, size_t len, uint64_t off);

/* Copy the chunks of f that have found only in the final file into the
 * partial file pfd, each checked again (the final file is only read). */
static int copy_from_final(const char *final, int pfd, const struct mm_manifest *m,
			   const struct mm_file *f, const struct mm_have *have, uint8_t *buf,
			   char *err, size_t errlen)
{
	int fd = open(final, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		int e = errno;
		snprintf(err, errlen, "%s: %s", final, strerror(e));
		return -e;
	}
	int r = 0;
	for (uint32_t c = 0; r == 0 && c < f->nchunks; c++) {
		size_t k = f->first_chunk + c;
		if (!bit_test(have->in_final, k))
			continue;
		uint64_t off = (uint64_t)c * m->chunk_size;
		size_t len = f->size - off < m->chunk_size ? (size_t)(f->size - off) : m->chunk_size;
		r = read_at(fd, buf, len, off);
		if (r == 0 && mm_check_chunk(m, k, buf, len) < 0) {
			snprintf(err, errlen, "%s: changed while the push began; run the push again",
				 final);
			r = -EAGAIN;
		}
		if (r == 0)
			r = write_at(pfd, buf, len, off);
	}
	close(fd);
	return r;
}

int mm_store_begin(const char *root, const struct mm_manifest *m, const struct mm_have *have,
		   char *err, size_t errlen)
{
	char dir[PATH_MAX];
	if (snprintf(dir, sizeof dir, "%s/%s", root, m->name) >= (int)sizeof dir)
		return -ENAMETOOLONG;
	int r = util_mkdirs(dir, 0755);
	if (r < 0) {
		snprintf(err, errlen, "%s: %s", dir, strerror(-r));
		return r;
	}
	json_t *mj = mm_to_json(m);
	json_t *meta = mj ? json_pack("{s:o, s:[], s:I, s:n}", "manifest", mj, "complete",
				       "pushed_at", (json_int_t)util_now(), "finished_at")
			  : NULL;
	uint8_t *buf = malloc(m->chunk_size);
	if (!meta || !buf) {
		json_decref(meta);
		free(buf);
		return -ENOMEM;
	}
	json_t *old = NULL;
	if (meta_load(root, m->name, &old) == 0 &&
	    json_is_integer(json_object_get(old, "changed_at")))
		json_object_set(meta, "changed_at", json_object_get(old, "changed_at"));
	json_decref(old);
	for (size_t i = 0; r == 0 && i < m->nfiles; i++) {
		const struct mm_file *f = &m->files[i];
		char final[PATH_MAX], part[PATH_MAX];
		if ((r = mm_store_paths(root, m, i, final, sizeof final, part, sizeof part)) < 0)
			break;
		size_t infin = 0;
		for (uint32_t c = 0; c < f->nchunks; c++)
			infin += bit_test(have->in_final, f->first_chunk + c);
		struct stat st;
		bool fin = lstat(final, &st) == 0;
		if (fin && !S_ISREG(st.st_mode)) {
			snprintf(err, errlen, "%s: in the way (not a regular file)", final);
			r = -EEXIST;
			break;
		}
		if ((r = mkparents(final)) < 0) {
			snprintf(err, errlen, "%s: cannot make its folder (%s)", final, strerror(-r));
			break;
		}
		if ((fin && infin == f->nchunks && (uint64_t)st.st_size == f->size) ||
		    (!fin && f->size == 0)) {
			/* complete where it stands (an empty file: made now); its
			 * bytes are not touched, only its mode and mtime */
			int fd = open(final, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
			if (fd < 0 || ftruncate(fd, (off_t)f->size) < 0 || settle_file(fd, f) < 0) {
				r = -errno;
				snprintf(err, errlen, "%s: %s", final, strerror(errno));
				if (fd >= 0)
					close(fd);
				break;
			}
			close(fd);
			unlink(part);
			r = complete_add(meta, f->path);
			continue;
		}
		/* Never a partial file under the final name, and never a byte
		 * written into the final file: a server may have it mapped. The new
		 * version is a new file; what of it the final file holds is copied
		 * into it, and it is renamed over the final one once complete. */
		int fd = open(part, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0) {
			r = -errno;
			snprintf(err, errlen, "%s: %s", part, strerror(errno));
			break;
		}
		if (ftruncate(fd, (off_t)f->size) < 0) {
			r = -errno;
		} else if (f->size) {
			int e = posix_fallocate(fd, 0, (off_t)f->size);
			if (e && e != EOPNOTSUPP && e != EINVAL) /* tmpfs/overlay quirks: space was checked */
				r = -e;
		}
		if (r == 0 && infin)
			r = copy_from_final(final, fd, m, f, have, buf, err, errlen);
		close(fd);
		if (r < 0) {
			if (!err[0])
				snprintf(err, errlen, "%s: %s", part, strerror(-r));
			break;
		}
	}
	free(buf);
	if (r == 0 && json_array_size(json_object_get(meta, "complete")) == m->nfiles)
		json_object_set_new(meta, "finished_at", json_integer(util_now())); /* nothing to move */
	if (r == 0)
		r = meta_save(root, m->name, meta);
	json_decref(meta);
	if (r == 0) /* files whose chunks were all in their partial file */
		for (size_t i = 0; r == 0 && i < m->nfiles; i++) {
			const struct mm_file *f = &m->files[i];
			size_t held = 0;
			for (uint32_t c = 0; c < f->nchunks; c++)
				held += mm_have_test(have, f->first_chunk + c);
			char part[PATH_MAX];
			struct stat st;
			if (held == f->nchunks &&
			    mm_store_paths(root, m, i, NULL, 0, part, sizeof part) == 0 &&
			    lstat(part, &st) == 0)
				r = mm_store_finish_file(root, m, i);
		}
	if (r < 0 && !err[0])
		snprintf(err, errlen, "%s: %s", dir, strerror(-r));
	return r;
}

/* All of data at offset off: 0 or -errno. */
static int write_at(int fd, const void *data, size_t len, uint64_t off)
{
	size_t done = 0;
	while (done < len) {
		ssize_t k = pwrite(fd, (const uint8_t *)data + done, len - done, (off_t)(off + done));
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		done += (size_t)k;
	}
	return 0;
}

/* Chunk i's file and offset, once data matches its hash (-EBADMSG). */
static int checked_chunk(const struct mm_manifest *m, size_t chunk, const void *data, size_t len,
			 const struct mm_file **f, uint64_t *off)
{
	if (!(*f = mm_chunk_file(m, chunk, off, NULL)))
		return -EINVAL;
	return mm_check_chunk(m, chunk, data, len);
}

int mm_store_put(const char *root, const struct mm_manifest *m, size_t chunk, const void *data,
		 size_t len)
{
	uint64_t off;
	const struct mm_file *f;
	int r = checked_chunk(m, chunk, data, len, &f, &off);
	if (r < 0)
		return r;
	char part[PATH_MAX];
	if ((r = mm_store_paths(root, m, (size_t)(f - m->files), NULL, 0, part, sizeof part)) < 0)
		return r;
	int fd = open(part, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	r = write_at(fd, data, len, off);
	close(fd);
	return r;
}

int mm_store_repair(const char *root, const struct mm_manifest *m, size_t chunk, const void *data,
		    size_t len)
{
	uint64_t off;
	const struct mm_file *f;
	int r = checked_chunk(m, chunk, data, len, &f, &off);
	if (r < 0)
		return r;
	char final[PATH_MAX], part[PATH_MAX];
	if ((r = mm_store_paths(root, m, (size_t)(f - m->files), final, sizeof final, part,
				sizeof part)) < 0)
		return r;
	bool is_final = false;
	int fd = open(part, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		is_final = true;
		fd = open(final, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	}
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != f->size) {
		close(fd);
		return -EIO;
	}
	r = write_at(fd, data, len, off);
	if (r == 0 && is_final)
		r = settle_file(fd, f);
	else if (r == 0 && fsync(fd) < 0)
		r = -errno;
	close(fd);
	return r;
}

int mm_store_finish_file(const char *root, const struct mm_manifest *m, size_t file)
{
	char final[PATH_MAX], part[PATH_MAX];
	int r = mm_store_paths(root, m, file, final, sizeof final, part, sizeof part);
	if (r < 0)
		return r;
	const struct mm_file *f = &m->files[file];
	int fd = open(part, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != f->size)
		r = -EIO;
	else
		r = settle_file(fd, f);
	close(fd);
	if (r < 0)
		return r;
	if (rename(part, final) < 0)
		return -errno;
	json_t *meta;
	if ((r = meta_load(root, m->name, &meta)) < 0)
		return r;
	if (!json_is_array(json_object_get(meta, "complete")))
		json_object_set_new(meta, "complete", json_array());
	json_object_set_new(meta, "changed_at", json_integer(util_now()));
	if ((r = complete_add(meta, f->path)) == 0) {
		if (json_array_size(json_object_get(meta, "complete")) == m->nfiles)
			json_object_set_new(meta, "finished_at", json_integer(util_now()));
		r = meta_save(root, m->name, meta);
	}
	json_decref(meta);
	return r;
}

/* nftw has no user pointer: one walk at a time (the agent is one thread). */
static struct {
	const struct mm_manifest *m;
	size_t base;
	int err;
	bool removed; /* a final file went */
} prune_ctx;

static int prune_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	if (ftw->level == 0)
		return 0;
	const char *rel = path + prune_ctx.base;
	if (type == FTW_DP) {
		rmdir(path); /* only when empty */
		return 0;
	}
	char tmp[PATH_MAX];
	util_strlcpy(tmp, rel, sizeof tmp);
	size_t n = strlen(tmp), sl = strlen(MM_PART_SUFFIX);
	bool part = n > sl && !strcmp(tmp + n - sl, MM_PART_SUFFIX);
	if (part)
		tmp[n - sl] = 0;
	if (find_file(prune_ctx.m, tmp))
		return 0;
	if (unlink(path) < 0 && errno != ENOENT)
		prune_ctx.err = -errno;
	else if (!part)
		prune_ctx.removed = true;
	return 0;
}

int mm_store_prune(const char *root, const struct mm_manifest *m)
{
	char dir[PATH_MAX];
	if (snprintf(dir, sizeof dir, "%s/%s", root, m->name) >= (int)sizeof dir)
		return -ENAMETOOLONG;
	prune_ctx.m = m;
	prune_ctx.base = strlen(dir) + 1;
	prune_ctx.err = 0;
	prune_ctx.removed = false;
	if (nftw(dir, prune_one, 16, FTW_DEPTH | FTW_PHYS) < 0 && errno != ENOENT)
		return -errno;
	json_t *meta;
	if (prune_ctx.removed && meta_load(root, m->name, &meta) == 0) {
		json_object_set_new(meta, "changed_at", json_integer(util_now()));
		meta_save(root, m->name, meta);
		json_decref(meta);
	}
	return prune_ctx.err;
}

static int rm_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (type == FTW_DP)
		return rmdir(path) < 0 ? -1 : 0;
	return unlink(path) < 0 && errno != ENOENT ? -1 : 0;
}

int mm_store_remove(const char *root, const char *name, char *err, size_t errlen)
{
	if (!mm_valid_name(name)) {
		snprintf(err, errlen, "'%s' is not a model name", name);
		return -EINVAL;
	}
	char dir[PATH_MAX], meta[PATH_MAX];
	if (snprintf(dir, sizeof dir, "%s/%s", root, name) >= (int)sizeof dir ||
	    meta_path(root, name, meta, sizeof meta) < 0)
		return -ENAMETOOLONG;
	struct stat st;
	bool had_dir = lstat(dir, &st) == 0, had_meta = access(meta, F_OK) == 0;
	if (!had_dir && !had_meta) {
		snprintf(err, errlen, "no model %s on this node", name);
		return -ENOENT;
	}
	/* the record first: a half-removed model then reads as unknown, not complete */
	if (had_meta && unlink(meta) < 0) {
		int e = errno;
		snprintf(err, errlen, "%s: %s", meta, strerror(e));
		return -e;
	}
	if (had_dir && nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS) < 0) {
		int e = errno;
		snprintf(err, errlen, "%s: %s", dir, strerror(e));
		return -e;
	}
	return 0;
}

/* A model's version: the first 12 hex digits of SHA-256 over every file's
 * path, size and chunk hashes (not its mtime): the same bytes, the same
 * version, on every node. */
static void version_of(const struct mm_manifest *m, char out[13])
{
	size_t len = 0;
	for (size_t i = 0; i < m->nfiles; i++)
		len += strlen(m->files[i].path) + 24 + (size_t)m->files[i].nchunks * MM_HASH_LEN;
	uint8_t *buf = malloc(len + 1), h[MM_HASH_LEN];
	size_t off = 0;
	snprintf(out, 13, "unknown");
	if (!buf)
		return;
	for (size_t i = 0; i < m->nfiles; i++) {
		const struct mm_file *f = &m->files[i];
		off += (size_t)snprintf((char *)buf + off, len + 1 - off, "%s%c%" PRIu64 "%c", f->path,
					0, f->size, 0);
		if (f->nchunks)
			memcpy(buf + off, m->hashes[f->first_chunk], (size_t)f->nchunks * MM_HASH_LEN);
		off += (size_t)f->nchunks * MM_HASH_LEN;
	}
	if (mm_hash(buf, off, h) == 0)
		for (int i = 0; i < 6; i++)
			snprintf(out + 2 * i, 3, "%02x", h[i]);
	free(buf);
}

int mm_store_list(const char *root, json_t **out, char *err, size_t errlen)
{
	*out = json_array();
	if (!*out)
		return -ENOMEM;
	char dir[PATH_MAX];
	if (snprintf(dir, sizeof dir, "%s/.meta", root) >= (int)sizeof dir)
		return -ENAMETOOLONG;
	DIR *d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : (snprintf(err, errlen, "%s: %s", dir, strerror(errno)),
					      -errno);
	struct dirent *de;
	while ((de = readdir(d))) {
		char name[MM_NAME_MAX + 1];
		size_t n = strlen(de->d_name);
		if (n <= 5 || n - 5 > MM_NAME_MAX || strcmp(de->d_name + n - 5, ".json"))
			continue;
		memcpy(name, de->d_name, n - 5);
		name[n - 5] = 0;
		if (!mm_valid_name(name))
			continue;
		json_t *meta;
		struct mm_manifest *m = NULL;
		char e2[256];
		if (meta_load(root, name, &meta) < 0)
			continue;
		if (mm_from_json(json_object_get(meta, "manifest"), &m, e2, sizeof e2) < 0) {
			json_decref(meta);
			continue;
		}
		size_t done = 0;
		for (size_t i = 0; i < m->nfiles; i++) {
			char final[PATH_MAX];
			struct stat st;
			if (meta_complete(meta, m->files[i].path) &&
			    mm_store_paths(root, m, i, final, sizeof final, NULL, 0) == 0 &&
			    lstat(final, &st) == 0 && (uint64_t)st.st_size == m->files[i].size)
				done++;
		}
		json_t *fin = json_object_get(meta, "finished_at");
		json_t *chg = json_object_get(meta, "changed_at");
		char ver[13];
		version_of(m, ver);
		json_array_append_new(
		    *out, json_pack("{s:s, s:I, s:I, s:I, s:b, s:O, s:O, s:s, s:O}", "name", m->name,
				    "files", (json_int_t)m->nfiles, "files_complete", (json_int_t)done,
				    "bytes", (json_int_t)m->total_bytes, "complete", done == m->nfiles,
				    "pushed_at", json_object_get(meta, "pushed_at") ?: json_null(),
				    "finished_at", fin ? fin : json_null(), "version", ver,
				    "changed_at", chg ? chg : json_null()));
		mm_free(m);
		json_decref(meta);
	}
	closedir(d);
	return 0;
}

static int add_bad(json_t *bad, const char *path, json_int_t chunk, const char *problem)
{
	return json_array_append_new(bad, json_pack("{s:s, s:I, s:s}", "path", path, "chunk", chunk,
						    "problem", problem));
}

int mm_store_verify(const char *root, const char *name, json_t **bad, char *err, size_t errlen)
{
	struct mm_manifest *m;
	*bad = NULL;
	int r = mm_store_manifest(root, name, &m, err, errlen);
	if (r < 0)
		return r;
	*bad = json_array();
	uint8_t *buf = malloc(m->chunk_size);
	if (!*bad || !buf) {
		free(buf);
		mm_free(m);
		return -ENOMEM;
	}
	for (size_t i = 0; i < m->nfiles; i++) {
		const struct mm_file *f = &m->files[i];
		char final[PATH_MAX];
		if (mm_store_paths(root, m, i, final, sizeof final, NULL, 0) < 0)
			continue;
		int fd = open(final, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
			add_bad(*bad, f->path, -1, "missing");
			if (fd >= 0)
				close(fd);
			continue;
		}
		if ((uint64_t)st.st_size != f->size)
			add_bad(*bad, f->path, -1, "size");
		for (uint32_t c = 0; c < f->nchunks; c++) {
			uint64_t off = (uint64_t)c * m->chunk_size;
			size_t want =
			    f->size - off < m->chunk_size ? (size_t)(f->size - off) : m->chunk_size;
			size_t got = 0;
			while (got < want) {
				ssize_t k = pread(fd, buf + got, want - got, (off_t)(off + got));
				if (k < 0 && errno == EINTR)
					continue;
				if (k <= 0)
					break;
				got += (size_t)k;
			}
			if (got != want || mm_check_chunk(m, f->first_chunk + c, buf, want) < 0)
				add_bad(*bad, f->path, c, "hash");
		}
		close(fd);
	}
	free(buf);
	mm_free(m);
	return 0;
}

int mm_store_get(const char *root, const struct mm_manifest *m, size_t chunk, void *buf,
		 uint32_t *len)
{
	uint64_t off;
	const struct mm_file *f = mm_chunk_file(m, chunk, &off, len);
	if (!f)
		return -EINVAL;
	char final[PATH_MAX], part[PATH_MAX];
	int r = mm_store_paths(root, m, (size_t)(f - m->files), final, sizeof final, part,
			       sizeof part);
	if (r < 0)
		return r;
	/* while a new version is received, the final file is the old one */
	int fd = open(part, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		fd = open(final, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	size_t got = 0;
	while (got < *len) {
		ssize_t k = pread(fd, (uint8_t *)buf + got, *len - got, (off_t)(off + got));
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	close(fd);
	if (got != *len)
		return -EBADMSG;
	return mm_check_chunk(m, chunk, buf, *len);
}

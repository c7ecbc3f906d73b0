/* model_manifest: walk a model directory, hash it in chunks, and the
 * manifest's JSON form and parser (model_manifest.h). */
#include "model_manifest.h"

#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool mm_valid_name(const char *name)
{
	if (!name)
		return false;
	size_t n = strlen(name);
	if (n == 0 || n > MM_NAME_MAX || name[0] == '.' || name[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

bool mm_valid_path(const char *path)
{
	if (!path)
		return false;
	size_t n = strlen(path);
	if (n == 0 || n > MM_PATH_MAX || path[0] == '/')
		return false;
	size_t sl = strlen(MM_PART_SUFFIX);
	if (n >= sl && strcmp(path + n - sl, MM_PART_SUFFIX) == 0)
		return false;
	const char *p = path;
	while (*p) {
		const char *e = strchr(p, '/');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (len == 0 || len > 255)
			return false;
		if ((len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.'))
			return false;
		for (size_t i = 0; i < len; i++)
			if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f)
				return false;
		if (!e)
			break;
		p = e + 1;
		if (!*p)
			return false; /* trailing '/' */
	}
	return true;
}

int mm_hash(const void *data, size_t len, uint8_t out[MM_HASH_LEN])
{
	unsigned int olen = 0;
	if (EVP_Digest(data, len, out, &olen, EVP_sha256(), NULL) != 1 || olen != MM_HASH_LEN)
		return -EIO;
	return 0;
}

void mm_free(struct mm_manifest *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->nfiles; i++)
		free(m->files[i].path);
	free(m->files);
	free(m->hashes);
	free(m);
}

/* --- the walk --- */

struct walk {
	char root[PATH_MAX];       /* realpath of the directory */
	struct mm_file *files;
	size_t n, cap;
	char *err;
	size_t errlen;
};

static int add_file(struct walk *w, const char *rel, const struct stat *st)
{
	if (!mm_valid_path(rel)) {
		snprintf(w->err, w->errlen, "%s: a name sparkctl cannot carry (a %s file, a control "
			 "character or a path over %d bytes): rename it", rel, MM_PART_SUFFIX,
			 MM_PATH_MAX);
		return -EINVAL;
	}
	if ((uint64_t)st->st_size > MM_MAX_FILE_BYTES) {
		snprintf(w->err, w->errlen, "%s: larger than %llu bytes", rel,
			 (unsigned long long)MM_MAX_FILE_BYTES);
		return -EFBIG;
	}
	if (w->n == MM_MAX_FILES) {
		snprintf(w->err, w->errlen, "more than %d files", MM_MAX_FILES);
		return -E2BIG;
	}
	if (w->n == w->cap) {
		size_t nc = w->cap ? w->cap * 2 : 16;
		struct mm_file *nf = realloc(w->files, nc * sizeof *nf);
		if (!nf)
			return -ENOMEM;
		w->files = nf;
		w->cap = nc;
	}
	struct mm_file *f = &w->files[w->n];
	memset(f, 0, sizeof *f);
	f->path = strdup(rel);
	if (!f->path)
		return -ENOMEM;
	f->size = (uint64_t)st->st_size;
	f->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
	f->mode = st->st_mode & 0777;
	w->n++;
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int walk_dir(struct walk *w, const char *rel, int depth)
{
	char abs[PATH_MAX];
	if (snprintf(abs, sizeof abs, "%s%s%s", w->root, rel[0] ? "/" : "", rel) >= (int)sizeof abs) {
		snprintf(w->err, w->errlen, "%s: path too long", rel);
		return -ENAMETOOLONG;
	}
	if (depth > 64) {
		snprintf(w->err, w->errlen, "%s: folders nested more than 64 deep", rel);
		return -ELOOP;
	}
	DIR *d = opendir(abs);
	if (!d) {
		int e = errno;
		snprintf(w->err, w->errlen, "%s: %s", abs, strerror(e));
		return -e;
	}
	char **names = NULL;
	size_t n = 0, cap = 0;
	int r = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 16;
			char **nn = realloc(names, nc * sizeof *nn);
			if (!nn) {
				r = -ENOMEM;
				break;
			}
			names = nn;
			cap = nc;
		}
		if (!(names[n] = strdup(de->d_name))) {
			r = -ENOMEM;
			break;
		}
		n++;
	}
	closedir(d);
	if (n)
		qsort(names, n, sizeof *names, cmp_str);
	for (size_t i = 0; r == 0 && i < n; i++) {
		char crel[PATH_MAX], cabs[PATH_MAX];
		if (snprintf(crel, sizeof crel, "%s%s%s", rel, rel[0] ? "/" : "", names[i]) >=
			(int)sizeof crel ||
		    snprintf(cabs, sizeof cabs, "%s/%s", abs, names[i]) >= (int)sizeof cabs) {
			snprintf(w->err, w->errlen, "%s/%s: path too long", rel, names[i]);
			r = -ENAMETOOLONG;
			break;
		}
		struct stat st;
		if (lstat(cabs, &st) < 0) {
			r = -errno;
			snprintf(w->err, w->errlen, "%s: %s", crel, strerror(errno));
			break;
		}
		if (S_ISDIR(st.st_mode)) {
			r = walk_dir(w, crel, depth + 1);
		} else if (S_ISREG(st.st_mode)) {
			r = add_file(w, crel, &st);
		} else if (S_ISLNK(st.st_mode)) {
			char real[PATH_MAX];
			size_t rl = strlen(w->root);
			if (!realpath(cabs, real)) {
				snprintf(w->err, w->errlen, "%s: a symlink to nothing (%s)", crel,
					 strerror(errno));
				r = -ENOENT;
			} else if (strncmp(real, w->root, rl) != 0 || real[rl] != '/') {
				snprintf(w->err, w->errlen, "%s: a symlink leaving the directory (to %s): "
					 "copy the file in or push the folder it points to", crel, real);
				r = -EXDEV;
			} else if (stat(real, &st) < 0 || !S_ISREG(st.st_mode)) {
				snprintf(w->err, w->errlen, "%s: a symlink to something other than a "
					 "regular file", crel);
				r = -EINVAL;
			} else {
				r = add_file(w, crel, &st);
			}
		} else {
			snprintf(w->err, w->errlen, "%s: not a regular file (a fifo, socket or device): "
				 "move it out of the model directory", crel);
			r = -EINVAL;
		}
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return r;
}

static int cmp_file(const void *a, const void *b)
{
	return strcmp(((const struct mm_file *)a)->path, ((const struct mm_file *)b)->path);
}

/* Chunk ranges and the hash table, from files[].size (files sorted). */
static int layout(struct mm_manifest *m, char *err, size_t errlen)
{
	uint64_t total = 0, chunks = 0;
	for (size_t i = 0; i < m->nfiles; i++) {
		struct mm_file *f = &m->files[i];
		uint64_t nc = (f->size + m->chunk_size - 1) / m->chunk_size;
		if (chunks + nc > MM_MAX_CHUNKS) {
			snprintf(err, errlen, "more than %u chunks: use a larger chunk size",
				 MM_MAX_CHUNKS);
			return -E2BIG;
		}
		f->first_chunk = (uint32_t)chunks;
		f->nchunks = (uint32_t)nc;
		chunks += nc;
		total += f->size;
	}
	m->total_bytes = total;
	m->nchunks = (size_t)chunks;
	m->hashes = calloc(chunks ? chunks : 1, MM_HASH_LEN);
	return m->hashes ? 0 : -ENOMEM;
}

const struct mm_file *mm_chunk_file(const struct mm_manifest *m, size_t chunk, uint64_t *offset,
				    uint32_t *len)
{
	if (chunk >= m->nchunks)
		return NULL;
	size_t lo = 0, hi = m->nfiles;
	while (lo < hi) { /* the last file whose first_chunk <= chunk and holds chunks */
		size_t mid = lo + (hi - lo) / 2;
		if (m->files[mid].first_chunk <= chunk)
			lo = mid + 1;
		else
			hi = mid;
	}
	/* files before lo start at or before chunk; empty files share first_chunk */
	for (size_t i = lo; i-- > 0;) {
		const struct mm_file *f = &m->files[i];
		if (f->nchunks && chunk < (size_t)f->first_chunk + f->nchunks) {
			uint64_t off = (uint64_t)(chunk - f->first_chunk) * m->chunk_size;
			if (offset)
				*offset = off;
			if (len)
				*len = (uint32_t)(f->size - off < m->chunk_size ? f->size - off
										: m->chunk_size);
			return f;
		}
		if (f->nchunks)
			break;
	}
	return NULL;
}

int mm_check_chunk(const struct mm_manifest *m, size_t chunk, const void *data, size_t len)
{
	uint32_t want;
	if (!mm_chunk_file(m, chunk, NULL, &want) || len != want)
		return -EBADMSG;
	uint8_t h[MM_HASH_LEN];
	if (mm_hash(data, len, h) < 0)
		return -EIO;
	return memcmp(h, m->hashes[chunk], MM_HASH_LEN) == 0 ? 0 : -EBADMSG;
}

static int same_stat(const struct mm_file *f, const struct stat *st)
{
	int64_t mt = (int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
	return (uint64_t)st->st_size == f->size && mt == f->mtime_ns;
}

/* Hash file f of the walk (opened by path below root). */
/* Hashing on several threads: each takes the next chunk of the model (in any
 * file), reads and hashes it; every file's size and mtime are checked before
 * the first chunk and after the last (a file that changes fails the push). */
#define MM_HASH_THREADS 8

struct hash_pool {
	struct mm_manifest *m;
	const char *root;
	pthread_mutex_t mu;
	size_t next;     /* the next chunk to take */
	int r;           /* the first failure */
	char err[256];
};

static void *hash_thread(void *arg)
{
	struct hash_pool *hp = arg;
	struct mm_manifest *m = hp->m;
	uint8_t *buf = malloc(m->chunk_size);
	int fd = -1;
	const struct mm_file *open_f = NULL;
	for (;;) {
		pthread_mutex_lock(&hp->mu);
		size_t c = hp->r ? m->nchunks : hp->next++;
		pthread_mutex_unlock(&hp->mu);
		if (c >= m->nchunks)
			break;
		uint64_t off;
		uint32_t len;
		const struct mm_file *f = mm_chunk_file(m, c, &off, &len);
		int r = buf ? 0 : -ENOMEM;
		char e[256] = "";
		if (r == 0 && f != open_f) {
			if (fd >= 0)
				close(fd);
			char abs[PATH_MAX];
			snprintf(abs, sizeof abs, "%s/%s", hp->root, f->path);
			fd = open(abs, O_RDONLY | O_CLOEXEC);
			open_f = f;
			if (fd < 0) {
				r = -errno;
				snprintf(e, sizeof e, "%s: %s", f->path, strerror(errno));
			}
		}
		size_t got = 0;
		while (r == 0 && got < len) {
			ssize_t k = pread(fd, buf + got, len - got, (off_t)(off + got));
			if (k < 0 && errno == EINTR)
				continue;
			if (k < 0) {
				r = -errno;
				snprintf(e, sizeof e, "%s: %s", f->path, strerror(errno));
			} else if (k == 0) {
				r = -EAGAIN; /* shorter than when it was walked */
				snprintf(e, sizeof e, "%s: changed while it was read (size or mtime): "
					 "push again once nothing writes to it", f->path);
			}
			got += k > 0 ? (size_t)k : 0;
		}
		if (r == 0)
			r = mm_hash(buf, len, m->hashes[c]);
		if (r < 0) {
			pthread_mutex_lock(&hp->mu);
			if (!hp->r) {
				hp->r = r;
				util_strlcpy(hp->err, e[0] ? e : strerror(-r), sizeof hp->err);
			}
			pthread_mutex_unlock(&hp->mu);
		}
	}
	if (fd >= 0)
		close(fd);
	free(buf);
	return NULL;
}

/* Size and mtime of every file as the walk saw them: 0, or -EAGAIN/-errno. */
static int check_files(const struct mm_manifest *m, const char *root, char *err, size_t errlen)
{
	for (size_t i = 0; i < m->nfiles; i++) {
		const struct mm_file *f = &m->files[i];
		char abs[PATH_MAX];
		struct stat st;
		if (snprintf(abs, sizeof abs, "%s/%s", root, f->path) >= (int)sizeof abs)
			return -ENAMETOOLONG;
		if (stat(abs, &st) < 0 || !same_stat(f, &st)) {
			snprintf(err, errlen, "%s: changed while it was read (size or mtime): push "
				 "again once nothing writes to it", f->path);
			return -EAGAIN;
		}
	}
	return 0;
}

static int hash_all(struct mm_manifest *m, const char *root, char *err, size_t errlen)
{
	int r = check_files(m, root, err, errlen);
	if (r < 0 || m->nchunks == 0)
		return r;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	size_t n = cpus < 1 ? 1 : cpus > MM_HASH_THREADS ? MM_HASH_THREADS : (size_t)cpus;
	if (n > m->nchunks)
		n = m->nchunks;
	struct hash_pool hp = {.m = m, .root = root};
	pthread_mutex_init(&hp.mu, NULL);
	pthread_t th[MM_HASH_THREADS];
	size_t started = 0;
	for (size_t i = 1; i < n; i++) /* this thread is one of them */
		if (pthread_create(&th[started], NULL, hash_thread, &hp) == 0)
			started++;
	hash_thread(&hp);
	for (size_t i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	pthread_mutex_destroy(&hp.mu);
	if (hp.r < 0) {
		snprintf(err, errlen, "%s", hp.err);
		return hp.r;
	}
	return check_files(m, root, err, errlen);
}

int mm_build(const char *dir, const char *name, uint32_t chunk_size, struct mm_manifest **out,
	     char *err, size_t errlen)
{
	*out = NULL;
	if (!chunk_size)
		chunk_size = MM_CHUNK_DEFAULT;
	if (chunk_size < MM_CHUNK_MIN || chunk_size > MM_CHUNK_MAX) {
		snprintf(err, errlen, "chunk size %u outside %u..%u", chunk_size, MM_CHUNK_MIN,
			 MM_CHUNK_MAX);
		return -EINVAL;
	}
	if (!mm_valid_name(name)) {
		snprintf(err, errlen, "model name '%s': use 1-%d letters, digits, '.', '_' or '-' "
			 "(not first '.' or '-')", name ? name : "", MM_NAME_MAX);
		return -EINVAL;
	}
	struct walk w = {.err = err, .errlen = errlen};
	struct stat st;
	if (!realpath(dir, w.root) || stat(w.root, &st) < 0) {
		int e = errno;
		snprintf(err, errlen, "%s: %s", dir, strerror(e));
		return -e;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "%s: not a directory", dir);
		return -ENOTDIR;
	}
	int r = walk_dir(&w, "", 0);
	struct mm_manifest *m = calloc(1, sizeof *m);
	if (!m)
		r = r ? r : -ENOMEM;
	if (r) {
		for (size_t i = 0; i < w.n; i++)
			free(w.files[i].path);
		free(w.files);
		free(m);
		return r;
	}
	util_strlcpy(m->name, name, sizeof m->name);
	m->chunk_size = chunk_size;
	m->files = w.files;
	m->nfiles = w.n;
	if (m->nfiles)
		qsort(m->files, m->nfiles, sizeof *m->files, cmp_file);
	if ((r = layout(m, err, errlen)) == 0)
		r = hash_all(m, w.root, err, errlen);
	if (r) {
		mm_free(m);
		return r;
	}
	*out = m;
	return 0;
}

int mm_read_chunk(const struct mm_manifest *m, const char *dir, size_t chunk, void *buf,
		  uint32_t *len, char *err, size_t errlen)
{
	uint64_t off;
	const struct mm_file *f = mm_chunk_file(m, chunk, &off, len);
	if (!f)
		return -EINVAL;
	char abs[PATH_MAX];
	if (snprintf(abs, sizeof abs, "%s/%s", dir, f->path) >= (int)sizeof abs)
		return -ENAMETOOLONG;
	int fd = open(abs, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		snprintf(err, errlen, "%s: %s", f->path, strerror(e));
		return -e;
	}
	struct stat st;
	size_t got = 0;
	int r = 0;
	if (fstat(fd, &st) < 0 || !same_stat(f, &st))
		r = -EAGAIN;
	while (r == 0 && got < *len) {
		ssize_t k = pread(fd, (uint8_t *)buf + got, *len - got, (off_t)(off + got));
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			r = k < 0 ? -errno : -EAGAIN;
			break;
		}
		got += (size_t)k;
	}
	close(fd);
	if (r == 0 && mm_check_chunk(m, chunk, buf, *len) < 0)
		r = -EAGAIN;
	if (r == -EAGAIN)
		snprintf(err, errlen, "%s: changed since the push began (size, mtime or content): push "
			 "again once nothing writes to it", f->path);
	else if (r < 0)
		snprintf(err, errlen, "%s: %s", f->path, strerror(-r));
	return r;
}

/* --- JSON --- */

static const char hexd[] = "0123456789abcdef";

json_t *mm_to_json(const struct mm_manifest *m)
{
	json_t *files = json_array();
	json_t *o = json_pack("{s:i, s:s, s:s, s:I, s:I, s:o}", "v", 1, "name", m->name, "hash",
			      "sha256", "chunk_size", (json_int_t)m->chunk_size, "total_bytes",
			      (json_int_t)m->total_bytes, "files", files);
	if (!o)
		return NULL;
	for (size_t i = 0; i < m->nfiles; i++) {
		const struct mm_file *f = &m->files[i];
		size_t hl = (size_t)f->nchunks * MM_HASH_LEN * 2;
		char *hex = malloc(hl + 1);
		if (!hex) {
			json_decref(o);
			return NULL;
		}
		for (size_t c = 0; c < f->nchunks; c++)
			for (size_t b = 0; b < MM_HASH_LEN; b++) {
				uint8_t v = m->hashes[f->first_chunk + c][b];
				hex[(c * MM_HASH_LEN + b) * 2] = hexd[v >> 4];
				hex[(c * MM_HASH_LEN + b) * 2 + 1] = hexd[v & 15];
			}
		hex[hl] = 0;
		json_t *fo = json_pack("{s:s, s:I, s:I, s:i, s:s}", "path", f->path, "size",
				       (json_int_t)f->size, "mtime_ns", (json_int_t)f->mtime_ns,
				       "mode", (int)f->mode, "chunks", hex);
		free(hex);
		if (!fo || json_array_append_new(files, fo) < 0) {
			json_decref(o);
			return NULL;
		}
	}
	return o;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* The object's keys are exactly the allowed ones (all present). */
static int exact_keys(const json_t *o, const char *const keys[], size_t n, const char *where,
		      char *err, size_t errlen)
{
	if (!json_is_object(o)) {
		snprintf(err, errlen, "%s: not an object", where);
		return -EINVAL;
	}
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)o, k, v) {
		size_t i;
		for (i = 0; i < n; i++)
			if (!strcmp(k, keys[i]))
				break;
		if (i == n) {
			snprintf(err, errlen, "%s: unknown field '%.40s'", where, k);
			return -EINVAL;
		}
	}
	for (size_t i = 0; i < n; i++)
		if (!json_object_get(o, keys[i])) {
			snprintf(err, errlen, "%s: missing field '%s'", where, keys[i]);
			return -EINVAL;
		}
	return 0;
}

/* A JSON integer in [lo, hi]. */
static int get_int(const json_t *o, const char *key, json_int_t lo, json_int_t hi,
		   json_int_t *out, const char *where, char *err, size_t errlen)
{
	json_t *v = json_object_get(o, key);
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
		snprintf(err, errlen, "%s: '%s' must be an integer in %lld..%lld", where, key,
			 (long long)lo, (long long)hi);
		return -EINVAL;
	}
	*out = json_integer_value(v);
	return 0;
}

/* A JSON string without NUL bytes; its length in *len. */
static const char *get_str(const json_t *o, const char *key, size_t max, size_t *len,
			   const char *where, char *err, size_t errlen)
{
	json_t *v = json_object_get(o, key);
	if (!json_is_string(v)) {
		snprintf(err, errlen, "%s: '%s' must be a string", where, key);
		return NULL;
	}
	const char *s = json_string_value(v);
	size_t n = json_string_length(v);
	if (strlen(s) != n || n > max) {
		snprintf(err, errlen, "%s: '%s' too long or holds a NUL byte", where, key);
		return NULL;
	}
	if (len)
		*len = n;
	return s;
}

static int cmp_path_idx(const void *a, const void *b)
{
	return strcmp((*(const struct mm_file *const *)a)->path,
		      (*(const struct mm_file *const *)b)->path);
}

int mm_from_json(const json_t *j, struct mm_manifest **out, char *err, size_t errlen)
{
	static const char *const top[] = {"v", "name", "hash", "chunk_size", "total_bytes",
					  "files"};
	static const char *const fkeys[] = {"path", "size", "mtime_ns", "mode", "chunks"};
	*out = NULL;
	int r = exact_keys(j, top, ARRAY_SIZE(top), "manifest", err, errlen);
	if (r)
		return r;
	json_int_t v, cs, total;
	if ((r = get_int(j, "v", 1, 1, &v, "manifest", err, errlen)) ||
	    (r = get_int(j, "chunk_size", MM_CHUNK_MIN, MM_CHUNK_MAX, &cs, "manifest", err,
			 errlen)) ||
	    (r = get_int(j, "total_bytes", 0, (json_int_t)1 << 60, &total, "manifest",
			 err, errlen)))
		return r;
	const char *name = get_str(j, "name", MM_NAME_MAX, NULL, "manifest", err, errlen);
	if (!name)
		return -EINVAL;
	if (!mm_valid_name(name)) {
		snprintf(err, errlen, "manifest: bad model name");
		return -EINVAL;
	}
	const char *hash = get_str(j, "hash", 16, NULL, "manifest", err, errlen);
	if (!hash)
		return -EINVAL;
	if (strcmp(hash, "sha256") != 0) {
		snprintf(err, errlen, "manifest: hash '%.16s' is not sha256", hash);
		return -EINVAL;
	}
	json_t *files = json_object_get(j, "files");
	if (!json_is_array(files) || json_array_size(files) > MM_MAX_FILES) {
		snprintf(err, errlen, "manifest: 'files' must be an array of at most %d",
			 MM_MAX_FILES);
		return -EINVAL;
	}
	struct mm_manifest *m = calloc(1, sizeof *m);
	size_t nf = json_array_size(files);
	if (!m || !(m->files = calloc(nf ? nf : 1, sizeof *m->files))) {
		free(m);
		return -ENOMEM;
	}
	util_strlcpy(m->name, name, sizeof m->name);
	m->chunk_size = (uint32_t)cs;
	for (size_t i = 0; i < nf; i++) {
		json_t *fo = json_array_get(files, i);
		char where[48];
		snprintf(where, sizeof where, "manifest: files[%zu]", i);
		struct mm_file *f = &m->files[i];
		json_int_t size, mt, mode;
		const char *path;
		if ((r = exact_keys(fo, fkeys, ARRAY_SIZE(fkeys), where, err, errlen)) ||
		    (r = get_int(fo, "size", 0, (json_int_t)MM_MAX_FILE_BYTES, &size, where, err,
				 errlen)) ||
		    (r = get_int(fo, "mtime_ns", INT64_MIN, INT64_MAX, &mt, where, err, errlen)) ||
		    (r = get_int(fo, "mode", 0, 0777, &mode, where, err, errlen)))
			goto fail;
		if (!(path = get_str(fo, "path", MM_PATH_MAX, NULL, where, err, errlen))) {
			r = -EINVAL;
			goto fail;
		}
		if (!mm_valid_path(path)) {
			snprintf(err, errlen, "%s: unsafe or invalid path", where);
			r = -EINVAL;
			goto fail;
		}
		if (!(f->path = strdup(path))) {
			r = -ENOMEM;
			goto fail;
		}
		m->nfiles = i + 1;
		/* The hash text before anything is allocated for it: a manifest
		 * gets no more memory than the bytes it sent. */
		size_t hl;
		uint64_t nc = ((uint64_t)size + (uint64_t)cs - 1) / (uint64_t)cs;
		if (!get_str(fo, "chunks", (size_t)-1, &hl, where, err, errlen)) {
			r = -EINVAL;
			goto fail;
		}
		if (nc > MM_MAX_CHUNKS || hl != nc * MM_HASH_LEN * 2) {
			snprintf(err, errlen, "%s: 'chunks' holds %zu hex digits, %llu chunks need %llu",
				 where, hl, (unsigned long long)nc,
				 (unsigned long long)(nc * MM_HASH_LEN * 2));
			r = -EINVAL;
			goto fail;
		}
		f->size = (uint64_t)size;
		f->mtime_ns = mt;
		f->mode = (uint32_t)mode;
	}
	/* Paths: sorted, no duplicates, no file standing where another's folder is. */
	for (size_t i = 1; i < m->nfiles; i++)
		if (strcmp(m->files[i - 1].path, m->files[i].path) >= 0) {
			snprintf(err, errlen, "manifest: files[%zu]: paths not in strict order", i);
			r = -EINVAL;
			goto fail;
		}
	{
		/* "a" and "a/b": "a/..." sorts after "a" but maybe not right after it
		 * ("a-x" sorts between), so look every folder prefix up. */
		const struct mm_file **idx = malloc((m->nfiles ? m->nfiles : 1) * sizeof *idx);
		if (!idx) {
			r = -ENOMEM;
			goto fail;
		}
		for (size_t i = 0; i < m->nfiles; i++)
			idx[i] = &m->files[i];
		for (size_t i = 0; r == 0 && i < m->nfiles; i++) {
			char pre[MM_PATH_MAX + 1];
			util_strlcpy(pre, m->files[i].path, sizeof pre);
			for (char *s = strchr(pre, '/'); s; s = strchr(s + 1, '/')) {
				*s = 0;
				struct mm_file key = {.path = pre};
				const struct mm_file *kp = &key;
				if (bsearch(&kp, idx, m->nfiles, sizeof *idx, cmp_path_idx)) {
					snprintf(err, errlen, "manifest: files[%zu]: '%s' is both a "
						 "file and a folder", i, pre);
					r = -EINVAL;
				}
				*s = '/';
				if (r)
					break;
			}
		}
		free(idx);
		if (r)
			goto fail;
	}
	uint64_t sum = 0;
	for (size_t i = 0; i < m->nfiles; i++)
		sum += m->files[i].size; /* <= 65536 * 2^44: no overflow */
	if (sum != (uint64_t)total) {
		snprintf(err, errlen, "manifest: total_bytes %lld is not the sum of the sizes",
			 (long long)total);
		r = -EINVAL;
		goto fail;
	}
	if ((r = layout(m, err, errlen))) {
		r = r == -E2BIG ? -EINVAL : r; /* too many chunks: a bad manifest */
		goto fail;
	}
	for (size_t i = 0; i < m->nfiles; i++) {
		struct mm_file *f = &m->files[i];
		size_t hl;
		char where[48];
		snprintf(where, sizeof where, "manifest: files[%zu]", i);
		const char *hex = get_str(json_array_get(files, i), "chunks", (size_t)-1, &hl, where,
					  err, errlen);
		if (!hex) {
			r = -EINVAL;
			goto fail;
		}
		for (size_t k = 0; k < hl; k += 2) {
			int hi = hexval(hex[k]), lo = hexval(hex[k + 1]);
			if (hi < 0 || lo < 0) {
				snprintf(err, errlen, "%s: 'chunks' is not lower-case hex", where);
				r = -EINVAL;
				goto fail;
			}
			((uint8_t *)m->hashes)[(size_t)f->first_chunk * MM_HASH_LEN + k / 2] =
			    (uint8_t)(hi << 4 | lo);
		}
	}
	*out = m;
	return 0;
fail:
	mm_free(m);
	return r;
}

int mm_parse(const char *buf, size_t len, struct mm_manifest **out, char *err, size_t errlen)
{
	json_error_t je;
	*out = NULL;
	json_t *j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
	if (!j) {
		snprintf(err, errlen, "manifest: %s (line %d)", je.text, je.line);
		return -EINVAL;
	}
	int r = mm_from_json(j, out, err, errlen);
	json_decref(j);
	return r;
}

/* dec_st.c - safetensors: header parsing, memory-mapped files, a directory's
 * tensors by name.
 *
 * Format: 8-byte little-endian header length N, N bytes of JSON mapping each
 * tensor name to {dtype, shape, data_offsets [begin, end)} (offsets relative
 * to the data section that follows the header), optional "__metadata__".
 * Every length and offset is checked against the file's real size before use;
 * files are mapped read-only and only the pages a rank reads are touched. */
#include "dec.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ERR(...) (snprintf(err, errlen, __VA_ARGS__), -EINVAL)

static const struct {
	const char *name;
	unsigned size;
	int dec; /* dec_dtype_t, or -1 */
} st_dtypes[] = {
	{"F32", 4, DEC_F32}, {"F16", 2, DEC_F16}, {"BF16", 2, DEC_BF16},
	{"F64", 8, -1}, {"I64", 8, -1}, {"I32", 4, -1}, {"I16", 2, -1}, {"I8", 1, -1},
	{"U64", 8, -1}, {"U32", 4, -1}, {"U16", 2, -1}, {"U8", 1, -1}, {"BOOL", 1, -1},
	{"F8_E4M3", 1, -1}, {"F8_E5M2", 1, -1},
};

static void fmt_shape(char *buf, size_t len, const int64_t *shape, int ndim)
{
	size_t o = 0;
	o += (size_t)snprintf(buf + o, len - o, "[");
	for (int i = 0; i < ndim && o < len; i++)
		o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
	if (o < len)
		snprintf(buf + o, len - o, "]");
}

static int parse_tensor(const char *name, json_t *v, uint64_t data_size, dec_st_tensor_t *t,
                        char *err, size_t errlen)
{
	json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
	       *off = json_object_get(v, "data_offsets");
	unsigned esize = 0;
	uint64_t nel = 1;
	json_int_t b, e;

	if (!json_is_object(v))
		return ERR("tensor '%s' is not a JSON object", name);
	if (!json_is_string(dt))
		return ERR("tensor '%s' has no dtype", name);
	for (size_t i = 0; i < sizeof(st_dtypes) / sizeof(st_dtypes[0]); i++)
		if (strcmp(json_string_value(dt), st_dtypes[i].name) == 0) {
			esize = st_dtypes[i].size;
			t->supported = st_dtypes[i].dec >= 0;
			t->dtype = t->supported ? (dec_dtype_t)st_dtypes[i].dec : DEC_F32;
			snprintf(t->dtype_name, sizeof(t->dtype_name), "%s", st_dtypes[i].name);
		}
	if (!esize)
		return ERR("tensor '%s' has unknown dtype '%.16s'", name, json_string_value(dt));
	if (!json_is_array(sh) || json_array_size(sh) > DEC_MAX_DIMS)
		return ERR("tensor '%s' has a bad shape (want a list of at most %d sizes)", name,
		           DEC_MAX_DIMS);
	t->ndim = (int)json_array_size(sh);
	for (int i = 0; i < t->ndim; i++) {
		json_t *d = json_array_get(sh, (size_t)i);
		if (!json_is_integer(d) || json_integer_value(d) < 0 ||
		    json_integer_value(d) > ((json_int_t)1 << 40))
			return ERR("tensor '%s' has a bad shape entry", name);
		t->shape[i] = json_integer_value(d);
		if (t->shape[i] && nel > (UINT64_MAX / 16) / (uint64_t)t->shape[i])
			return ERR("tensor '%s' is impossibly large", name);
		nel *= (uint64_t)t->shape[i];
	}
	if (!json_is_array(off) || json_array_size(off) != 2 ||
	    !json_is_integer(json_array_get(off, 0)) || !json_is_integer(json_array_get(off, 1)))
		return ERR("tensor '%s' has bad data_offsets (want [begin, end])", name);
	b = json_integer_value(json_array_get(off, 0));
	e = json_integer_value(json_array_get(off, 1));
	if (b < 0 || e < b)
		return ERR("tensor '%s' has bad data_offsets [%lld, %lld]", name, (long long)b,
		           (long long)e);
	if ((uint64_t)e > data_size)
		return ERR("tensor '%s' ends at byte %lld of the data but the file holds only %llu "
		           "(truncated file?)",
		           name, (long long)e, (unsigned long long)data_size);
	if ((uint64_t)(e - b) != nel * esize) {
		char s[96];
		fmt_shape(s, sizeof(s), t->shape, t->ndim);
		return ERR("tensor '%s': data_offsets span %lld bytes but shape %s of %s needs %llu",
		           name, (long long)(e - b), s, t->dtype_name,
		           (unsigned long long)(nel * esize));
	}
	t->begin = (uint64_t)b;
	t->end = (uint64_t)e;
	return 0;
}

int dec_st_parse(const uint8_t *buf, size_t len, uint64_t file_size, dec_st_header_t *h,
                 char *err, size_t errlen)
{
	uint64_t n = 0, data_size;
	json_t *root;
	json_error_t je;
	const char *key;
	json_t *val;
	int rc = 0;
	size_t cap;

	memset(h, 0, sizeof(*h));
	if (len < 8 || file_size < 8)
		return ERR("too short for a safetensors file (%llu bytes)",
		           (unsigned long long)(len < file_size ? len : file_size));
	for (int i = 7; i >= 0; i--)
		n = (n << 8) | buf[i];
	if (n < 2 || n > DEC_ST_MAX_HEADER)
		return ERR("header length %llu is not plausible (not a safetensors file?)",
		           (unsigned long long)n);
	if (n > file_size - 8 || n > len - 8)
		return ERR("truncated: the header needs %llu bytes but the file has %llu",
		           (unsigned long long)(n + 8), (unsigned long long)file_size);
	data_size = file_size - 8 - n;
	root = json_loadb((const char *)buf + 8, (size_t)n, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return ERR("header is not valid JSON (%s at byte %d)", je.text, je.position);
	if (!json_is_object(root)) {
		json_decref(root);
		return ERR("header is not a JSON object");
	}
	cap = json_object_size(root);
	h->t = calloc(cap ? cap : 1, sizeof(*h->t));
	if (!h->t) {
		json_decref(root);
		return -ENOMEM;
	}
	json_object_foreach(root, key, val) {
		dec_st_tensor_t *t = &h->t[h->n];
		if (strcmp(key, "__metadata__") == 0)
			continue;
		if (!*key || strlen(key) > 1024) {
			rc = ERR("header has a tensor with a bad name");
			break;
		}
		if ((rc = parse_tensor(key, val, data_size, t, err, errlen)) < 0)
			break;
		if (!(t->name = strdup(key))) {
			rc = -ENOMEM;
			break;
		}
		h->n++;
	}
	json_decref(root);
	h->data_start = 8 + n;
	if (rc < 0)
		dec_st_header_free(h);
	return rc;
}

void dec_st_header_free(dec_st_header_t *h)
{
	for (int i = 0; i < h->n; i++)
		free(h->t[i].name);
	free(h->t);
	memset(h, 0, sizeof(*h));
}

static int cmp_tensor(const void *a, const void *b)
{
	return strcmp(((const dec_st_tensor_t *)a)->name, ((const dec_st_tensor_t *)b)->name);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int has_suffix(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a > b && strcmp(s + a - b, suf) == 0;
}

static int open_one(const char *path, dec_st_file_t *f, dec_st_header_t *h, char *err,
                    size_t errlen)
{
	struct stat sb;
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc;
	char why[DEC_ERR_LEN];

	if (fd < 0)
		return snprintf(err, errlen, "%s: %s", path, strerror(errno)), -errno;
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		return ERR("%s: not a regular file", path);
	}
	f->size = (size_t)sb.st_size;
	if (f->size < 8) {
		close(fd);
		return ERR("%s: too short for a safetensors file (%zu bytes)", path, f->size);
	}
	f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (f->map == MAP_FAILED) {
		f->map = NULL;
		return snprintf(err, errlen, "%s: cannot map: %s", path, strerror(errno)), -errno;
	}
	rc = dec_st_parse(f->map, f->size, f->size, h, why, sizeof(why));
	if (rc < 0)
		return snprintf(err, errlen, "%s: %s", path, why), rc;
	f->data_start = h->data_start;
	return 0;
}

int dec_st_open_dir(const char *dir, dec_st_set_t *s, char *err, size_t errlen)
{
	DIR *d;
	struct dirent *de;
	char **names = NULL;
	int nn = 0, cap = 0, rc = 0;

	memset(s, 0, sizeof(*s));
	if (!(d = opendir(dir)))
		return snprintf(err, errlen, "%s: %s", dir, strerror(errno)), -errno;
	while ((de = readdir(d))) {
		if (!has_suffix(de->d_name, ".safetensors"))
			continue;
		if (nn == cap) {
			char **nb = realloc(names, sizeof(*names) * (size_t)(cap = cap ? cap * 2 : 8));
			if (!nb) {
				rc = -ENOMEM;
				break;
			}
			names = nb;
		}
		if (!(names[nn] = malloc(strlen(dir) + strlen(de->d_name) + 2))) {
			rc = -ENOMEM;
			break;
		}
		sprintf(names[nn++], "%s/%s", dir, de->d_name);
	}
	closedir(d);
	if (rc == 0 && nn == 0)
		rc = ERR("%s: no *.safetensors files", dir);
	if (rc == 0) {
		qsort(names, (size_t)nn, sizeof(*names), cmp_str);
		s->files = calloc((size_t)nn, sizeof(*s->files));
		if (!s->files)
			rc = -ENOMEM;
	}
	for (int i = 0; rc == 0 && i < nn; i++) {
		dec_st_header_t h;
		dec_st_tensor_t *nt;
		s->files[i].path = names[i];
		names[i] = NULL;
		s->nfiles++;
		if ((rc = open_one(s->files[i].path, &s->files[i], &h, err, errlen)) < 0)
			break;
		nt = realloc(s->t, sizeof(*s->t) * (size_t)(s->n + h.n + 1));
		if (!nt) {
			dec_st_header_free(&h);
			rc = -ENOMEM;
			break;
		}
		s->t = nt;
		for (int j = 0; j < h.n; j++) {
			h.t[j].file = i;
			s->t[s->n++] = h.t[j];
		}
		free(h.t); /* names moved into s->t */
	}
	for (int i = 0; i < nn; i++)
		free(names[i]);
	free(names);
	if (rc == 0 && s->n > 0) {
		qsort(s->t, (size_t)s->n, sizeof(*s->t), cmp_tensor);
		for (int i = 1; i < s->n; i++)
			if (strcmp(s->t[i - 1].name, s->t[i].name) == 0) {
				rc = ERR("tensor '%s' appears in both %s and %s", s->t[i].name,
				         s->files[s->t[i - 1].file].path, s->files[s->t[i].file].path);
				break;
			}
	}
	if (rc < 0) {
		if (rc == -ENOMEM)
			snprintf(err, errlen, "%s: out of memory", dir);
		dec_st_close(s);
	}
	return rc;
}

void dec_st_close(dec_st_set_t *s)
{
	for (int i = 0; i < s->nfiles; i++) {
		if (s->files[i].map)
			munmap((void *)s->files[i].map, s->files[i].size);
		free(s->files[i].path);
	}
	for (int i = 0; i < s->n; i++)
		free(s->t[i].name);
	free(s->files);
	free(s->t);
	memset(s, 0, sizeof(*s));
}

const dec_st_tensor_t *dec_st_find(const dec_st_set_t *s, const char *name)
{
	dec_st_tensor_t key = {.name = (char *)name};
	if (!s->n)
		return NULL;
	return bsearch(&key, s->t, (size_t)s->n, sizeof(*s->t), cmp_tensor);
}

const void *dec_st_data(const dec_st_set_t *s, const dec_st_tensor_t *t)
{
	const dec_st_file_t *f = &s->files[t->file];
	return f->map + f->data_start + t->begin;
}

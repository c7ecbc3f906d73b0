/* libFuzzer target for the model push manifest parser (agent/model_manifest.c
 * mm_parse), which a node runs on the manifest a push sends it. Invariants
 * that abort on failure: the answer is 0, -EINVAL or -ENOMEM; a refusal has a
 * message and no manifest; an accepted manifest has safe, strictly sorted
 * paths, sizes that sum to total_bytes, chunk ranges that tile the files
 * (every chunk maps back to its file with the right length), and it prints
 * back to JSON that parses to the same manifest. */
#include "model_manifest.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void same(const struct mm_manifest *a, const struct mm_manifest *b)
{
	if (a->nfiles != b->nfiles || a->nchunks != b->nchunks || a->chunk_size != b->chunk_size ||
	    a->total_bytes != b->total_bytes || strcmp(a->name, b->name))
		abort();
	if (a->nchunks && memcmp(a->hashes, b->hashes, a->nchunks * MM_HASH_LEN))
		abort();
	for (size_t i = 0; i < a->nfiles; i++)
		if (strcmp(a->files[i].path, b->files[i].path) || a->files[i].size != b->files[i].size ||
		    a->files[i].mtime_ns != b->files[i].mtime_ns || a->files[i].mode != b->files[i].mode)
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 1 << 16)
		return 0;
	struct mm_manifest *m = (struct mm_manifest *)1;
	char err[256] = "";
	int r = mm_parse((const char *)data, size, &m, err, sizeof err);
	if (r != 0 && r != -EINVAL && r != -ENOMEM)
		abort();
	if (r < 0) {
		if (!err[0] && r == -EINVAL)
			abort();
		if (m)
			abort();
		return 0;
	}
	uint64_t sum = 0;
	size_t chunks = 0;
	for (size_t i = 0; i < m->nfiles; i++) {
		const struct mm_file *f = &m->files[i];
		if (!mm_valid_path(f->path) || f->mode > 0777)
			abort();
		if (i && strcmp(m->files[i - 1].path, f->path) >= 0)
			abort();
		if (f->first_chunk != chunks ||
		    f->nchunks != (f->size + m->chunk_size - 1) / m->chunk_size)
			abort();
		chunks += f->nchunks;
		sum += f->size;
	}
	if (sum != m->total_bytes || chunks != m->nchunks || !mm_valid_name(m->name))
		abort();
	uint64_t bytes = 0;
	for (size_t c = 0; c < m->nchunks; c++) {
		uint64_t off;
		uint32_t len;
		const struct mm_file *f = mm_chunk_file(m, c, &off, &len);
		if (!f || len == 0 || len > m->chunk_size || off + len > f->size ||
		    c != f->first_chunk + off / m->chunk_size)
			abort();
		bytes += len;
	}
	if (bytes != m->total_bytes)
		abort();
	json_t *j = mm_to_json(m);
	char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	if (text) {
		struct mm_manifest *back = NULL;
		if (mm_parse(text, strlen(text), &back, err, sizeof err) != 0)
			abort();
		same(m, back);
		mm_free(back);
	}
	free(text);
	json_decref(j);
	mm_free(m);
	return 0;
}

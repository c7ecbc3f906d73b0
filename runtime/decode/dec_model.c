/* dec_model.c - the weights of one rank, Megatron-style.
 *
 * Column-parallel (split by output rows, contiguous in the file): q/k/v by
 * heads, gate/up by MLP columns, the LM head by vocabulary. Row-parallel
 * (split by input columns, a strided slice of every row): o_proj and
 * down_proj; their partial outputs are summed by an all-reduce. Norms, biases
 * of row-parallel layers and the embedding table are replicated (the table is
 * mapped, only the rows of tokens seen are read).
 *
 * From files the slices point into read-only maps of the safetensors files
 * (zero copy; a misaligned tensor is copied). Synthetic weights are generated
 * for this rank's slice only, from a hash of (seed, tensor name, row, col), so
 * every world size computes with the same model. */
#include "dec.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ERR(...) (snprintf(err, errlen, __VA_ARGS__), -EINVAL)

uint64_t dec_name_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++) {
		h ^= (uint8_t)*s;
		h *= 1099511628211ull;
	}
	return h;
}

static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline uint64_t synth_row(uint64_t seed, uint64_t name_hash, uint64_t row)
{
	return mix64(seed ^ name_hash ^ (row * 0x9e3779b97f4a7c15ull));
}

/* One hash serves two neighbouring columns (32 bits each, 24 used). */
static inline float synth_u32(uint32_t bits, float scale)
{
	float u = (float)(bits >> 8) * (1.0f / 16777216.0f);
	return scale * (2.0f * u - 1.0f);
}

static inline float synth_at(uint64_t rowkey, uint64_t col, float scale)
{
	uint64_t z = mix64(rowkey + (col >> 1) * 0xc2b2ae3d27d4eb4full);
	return synth_u32((uint32_t)(z >> (32 * (col & 1))), scale);
}

float dec_synth_value(uint64_t seed, uint64_t name_hash, uint64_t row, uint64_t col, float scale)
{
	return synth_at(synth_row(seed, name_hash, row), col, scale);
}

static void *track(dec_model_t *m, size_t bytes)
{
	void *p;
	if (m->nbufs == m->capbufs) {
		int nc = m->capbufs ? m->capbufs * 2 : 64;
		void **nb = realloc(m->bufs, sizeof(*nb) * (size_t)nc);
		if (!nb)
			return NULL;
		m->bufs = nb;
		m->capbufs = nc;
	}
	if (posix_memalign(&p, 64, bytes ? bytes : 1))
		return NULL;
	m->bufs[m->nbufs++] = p;
	return p;
}

static void store(void *dst, dec_dtype_t t, size_t i, float v)
{
	if (t == DEC_F32)
		((float *)dst)[i] = v;
	else if (t == DEC_BF16)
		((uint16_t *)dst)[i] = dec_f32_to_bf16(v);
	else
		((uint16_t *)dst)[i] = dec_f32_to_f16(v);
}

static float round_to(dec_dtype_t t, float v)
{
	if (t == DEC_BF16)
		return dec_bf16_to_f32(dec_f32_to_bf16(v));
	if (t == DEC_F16)
		return dec_f16_to_f32(dec_f32_to_f16(v));
	return v;
}

static float load1(const void *src, dec_dtype_t t, size_t i)
{
	if (t == DEC_F32) {
		float f;
		memcpy(&f, (const uint8_t *)src + i * 4, 4);
		return f;
	} else {
		uint16_t h;
		memcpy(&h, (const uint8_t *)src + i * 2, 2);
		return t == DEC_BF16 ? dec_bf16_to_f32(h) : dec_f16_to_f32(h);
	}
}

/* A tensor from the files, checked against the shape config.json implies. */
static int find_tensor(dec_model_t *m, const char *name, int ndim, int64_t d0, int64_t d1,
                       const dec_st_tensor_t **out, char *err, size_t errlen)
{
	const dec_st_tensor_t *t = dec_st_find(&m->st, name);
	int ok;
	if (!t)
		return ERR("%s: tensor '%s' is missing from the safetensors files", m->dir, name);
	ok = t->ndim == ndim && t->shape[0] == d0 && (ndim == 1 || t->shape[1] == d1);
	if (!ok) {
		char have[96] = "[";
		size_t o = 1;
		for (int i = 0; i < t->ndim && o < sizeof(have); i++)
			o += (size_t)snprintf(have + o, sizeof(have) - o, "%s%lld", i ? ", " : "",
			                      (long long)t->shape[i]);
		if (o < sizeof(have))
			snprintf(have + o, sizeof(have) - o, "]");
		if (ndim == 1)
			return ERR("%s: tensor '%s' has shape %s but config.json implies [%lld]",
			           m->st.files[t->file].path, name, have, (long long)d0);
		return ERR("%s: tensor '%s' has shape %s but config.json implies [%lld, %lld]",
		           m->st.files[t->file].path, name, have, (long long)d0, (long long)d1);
	}
	if (!t->supported)
		return ERR("%s: tensor '%s' has dtype %s (F32, F16 and BF16 are supported)",
		           m->st.files[t->file].path, name, t->dtype_name);
	*out = t;
	return 0;
}

/* Rows [r0, r0+nr) x columns [c0, c0+nc) of a [rows, cols] matrix. */
static int get_mat(dec_model_t *m, const char *name, int rows, int cols, int r0, int nr, int c0,
                   int nc, float scale, dec_mat_t *out, char *err, size_t errlen)
{
	out->rows = nr;
	out->cols = nc;
	if (m->synthetic) {
		uint64_t h = dec_name_hash(name);
		size_t es = dec_dtype_size(m->wdtype);
		void *p = track(m, (size_t)nr * (size_t)nc * es);
		if (!p)
			return ERR("out of memory for '%s' (%zu MiB)", name,
			           ((size_t)nr * (size_t)nc * es) >> 20);
		for (int i = 0; i < nr; i++) {
			uint64_t key = synth_row(m->seed, h, (uint64_t)(r0 + i));
			size_t at = (size_t)i * (size_t)nc;
			if (m->wdtype == DEC_BF16) {
				uint16_t *q = (uint16_t *)p + at;
				int j = 0;
				if (c0 & 1) /* start on an even column */
					q[j] = dec_f32_to_bf16(synth_at(key, (uint64_t)(c0 + j), scale)), j++;
				for (; j + 1 < nc; j += 2) {
					uint64_t z = mix64(key + ((uint64_t)(c0 + j) >> 1) * 0xc2b2ae3d27d4eb4full);
					q[j] = dec_f32_to_bf16(synth_u32((uint32_t)z, scale));
					q[j + 1] = dec_f32_to_bf16(synth_u32((uint32_t)(z >> 32), scale));
				}
				if (j < nc)
					q[j] = dec_f32_to_bf16(synth_at(key, (uint64_t)(c0 + j), scale));
			} else
				for (int j = 0; j < nc; j++)
					store(p, m->wdtype, at + (size_t)j,
					      synth_at(key, (uint64_t)(c0 + j), scale));
		}
		out->data = p;
		out->dtype = m->wdtype;
		out->ld = (size_t)nc;
	} else {
		const dec_st_tensor_t *t;
		const uint8_t *base;
		size_t es;
		int rc = find_tensor(m, name, 2, rows, cols, &t, err, errlen);
		if (rc < 0)
			return rc;
		es = dec_dtype_size(t->dtype);
		base = (const uint8_t *)dec_st_data(&m->st, t) +
		       ((size_t)r0 * (size_t)cols + (size_t)c0) * es;
		out->dtype = t->dtype;
		out->ld = (size_t)cols;
		out->data = base;
		if ((uintptr_t)base % es) { /* misaligned in the file: copy the slice */
			uint8_t *p = track(m, (size_t)nr * (size_t)nc * es);
			if (!p)
				return ERR("out of memory copying '%s'", name);
			for (int i = 0; i < nr; i++)
				memcpy(p + (size_t)i * nc * es, base + (size_t)i * cols * es, (size_t)nc * es);
			out->data = p;
			out->ld = (size_t)nc;
		}
	}
	m->weight_bytes += (size_t)nr * (size_t)nc * dec_dtype_size(out->dtype);
	return 0;
}

/* kind 1: norm weight (synthetic 1 +- 0.1); kind 0: bias (synthetic +- 0.1). */
static int get_vec(dec_model_t *m, const char *name, int n, int lo, int cnt, int kind,
                   float **out, char *err, size_t errlen)
{
	float *p = track(m, (size_t)cnt * sizeof(float));
	if (!p)
		return -ENOMEM;
	if (m->synthetic) {
		uint64_t h = dec_name_hash(name);
		for (int i = 0; i < cnt; i++) /* what a file of this dtype would hold */
			p[i] = round_to(m->wdtype, (kind ? 1.0f : 0.0f) +
			                               dec_synth_value(m->seed, h, 0, (uint64_t)(lo + i), 0.1f));
	} else {
		const dec_st_tensor_t *t;
		const uint8_t *src;
		int rc = find_tensor(m, name, 1, n, 0, &t, err, errlen);
		if (rc < 0)
			return rc;
		src = dec_st_data(&m->st, t);
		for (int i = 0; i < cnt; i++)
			p[i] = load1(src, t->dtype, (size_t)(lo + i));
	}
	*out = p;
	return 0;
}

static int has(const dec_model_t *m, const char *name)
{
	return dec_st_find(&m->st, name) != NULL;
}

static void prefault(const dec_mat_t *w)
{
	size_t es = dec_dtype_size(w->dtype), rowb = (size_t)w->cols * es;
	volatile uint8_t sink = 0;
	if (w->ld == (size_t)w->cols) {
		const uint8_t *p = w->data;
		size_t n = (size_t)w->rows * rowb;
		for (size_t o = 0; o < n; o += 4096)
			sink ^= p[o];
		if (n)
			sink ^= p[n - 1];
	} else {
		for (int i = 0; i < w->rows; i++) {
			const uint8_t *p = (const uint8_t *)w->data + (size_t)i * w->ld * es;
			for (size_t o = 0; o < rowb; o += 4096)
				sink ^= p[o];
			sink ^= p[rowb - 1];
		}
	}
	(void)sink;
}

static int load_layer(dec_model_t *m, int l, char *err, size_t errlen)
{
	const dec_config_t *c = &m->cfg;
	dec_layer_t *L = &m->layers[l];
	int hd = c->head_dim, r = m->rank, H = c->hidden;
	int qd = c->n_heads * hd, kvd = c->n_kv_heads * hd;
	int q0 = r * m->nh * hd, k0 = r * m->nkv * hd, i0 = r * m->inter;
	float sq = sqrtf(3.0f / (float)H), so = sqrtf(3.0f / (float)qd),
	      sd = sqrtf(3.0f / (float)c->inter);
	char n[160];
	int rc;

#define NAME(s) (snprintf(n, sizeof(n), "model.layers.%d.%s", l, s), n)
	if ((rc = get_vec(m, NAME("input_layernorm.weight"), H, 0, H, 1, &L->attn_norm, err,
	                  errlen)) < 0 ||
	    (rc = get_vec(m, NAME("post_attention_layernorm.weight"), H, 0, H, 1, &L->mlp_norm, err,
	                  errlen)) < 0 ||
	    (rc = get_mat(m, NAME("self_attn.q_proj.weight"), qd, H, q0, m->nh * hd, 0, H, sq,
	                  &L->wq, err, errlen)) < 0 ||
	    (rc = get_mat(m, NAME("self_attn.k_proj.weight"), kvd, H, k0, m->nkv * hd, 0, H, sq,
	                  &L->wk, err, errlen)) < 0 ||
	    (rc = get_mat(m, NAME("self_attn.v_proj.weight"), kvd, H, k0, m->nkv * hd, 0, H, sq,
	                  &L->wv, err, errlen)) < 0 ||
	    (rc = get_mat(m, NAME("self_attn.o_proj.weight"), H, qd, 0, H, q0, m->nh * hd, so,
	                  &L->wo, err, errlen)) < 0 ||
	    (rc = get_mat(m, NAME("mlp.gate_proj.weight"), c->inter, H, i0, m->inter, 0, H, sq,
	                  &L->wgate, err, errlen)) < 0 ||
	    (rc = get_mat(m, NAME("mlp.up_proj.weight"), c->inter, H, i0, m->inter, 0, H, sq,
	                  &L->wup, err, errlen)) < 0 ||
	    (rc = get_mat(m, NAME("mlp.down_proj.weight"), H, c->inter, 0, H, i0, m->inter, sd,
	                  &L->wdown, err, errlen)) < 0)
		return rc;
	if (m->cfg.attn_bias &&
	    ((rc = get_vec(m, NAME("self_attn.q_proj.bias"), qd, q0, m->nh * hd, 0, &L->bq, err,
	                   errlen)) < 0 ||
	     (rc = get_vec(m, NAME("self_attn.k_proj.bias"), kvd, k0, m->nkv * hd, 0, &L->bk, err,
	                   errlen)) < 0 ||
	     (rc = get_vec(m, NAME("self_attn.v_proj.bias"), kvd, k0, m->nkv * hd, 0, &L->bv, err,
	                   errlen)) < 0))
		return rc;
	if (m->cfg.o_bias &&
	    (rc = get_vec(m, NAME("self_attn.o_proj.bias"), H, 0, H, 0, &L->bo, err, errlen)) < 0)
		return rc;
	if (m->cfg.qk_norm &&
	    ((rc = get_vec(m, NAME("self_attn.q_norm.weight"), hd, 0, hd, 1, &L->q_norm, err,
	                   errlen)) < 0 ||
	     (rc = get_vec(m, NAME("self_attn.k_norm.weight"), hd, 0, hd, 1, &L->k_norm, err,
	                   errlen)) < 0))
		return rc;
#undef NAME
	return 0;
}

int dec_model_load(dec_model_t *m, const dec_load_opts_t *o, int rank, int world, char *err,
                   size_t errlen)
{
	dec_config_t *c = &m->cfg;
	int rc;
	const char *lm_name;

	memset(m, 0, sizeof(*m));
	m->rank = rank;
	m->world = world;
	m->seed = o->seed;
	if (o->shape) {
		*c = *o->shape;
		m->synthetic = 1;
		m->wdtype = o->dtype;
	} else {
		m->dir = o->model_dir;
		if ((rc = dec_config_load(o->model_dir, c, err, errlen)) < 0)
			return rc;
		if ((rc = dec_st_open_dir(o->model_dir, &m->st, err, errlen)) < 0)
			return rc;
		/* optional parts are decided by what layer 0 has */
		c->attn_bias = has(m, "model.layers.0.self_attn.q_proj.bias");
		c->o_bias = has(m, "model.layers.0.self_attn.o_proj.bias");
		c->qk_norm = has(m, "model.layers.0.self_attn.q_norm.weight");
		if (!c->tie_embeddings && !has(m, "lm_head.weight") &&
		    has(m, "model.embed_tokens.weight"))
			c->tie_embeddings = 1;
	}
	if (o->layers > 0) {
		if (o->layers > c->total_layers) {
			rc = ERR("--layers %d: %s has only %d layers", o->layers, c->name, c->total_layers);
			goto fail;
		}
		c->n_layers = o->layers;
	}
	if ((rc = dec_config_check(c, err, errlen)) < 0 ||
	    (rc = dec_config_check_world(c, world, err, errlen)) < 0)
		goto fail;
	if (rank < 0 || rank >= world) {
		rc = ERR("rank %d is outside world size %d", rank, world);
		goto fail;
	}
	m->nh = c->n_heads / world;
	m->nkv = c->n_kv_heads / world;
	m->inter = c->inter / world;
	m->vocab_shard = (c->vocab + world - 1) / world;
	m->vocab_lo = rank * m->vocab_shard;
	m->vocab_n = c->vocab - m->vocab_lo;
	if (m->vocab_n > m->vocab_shard)
		m->vocab_n = m->vocab_shard;
	if (m->vocab_n < 0)
		m->vocab_n = 0;
	if (m->vocab_lo > c->vocab)
		m->vocab_lo = c->vocab;
	if (!(m->layers = calloc((size_t)c->n_layers, sizeof(*m->layers)))) {
		rc = -ENOMEM;
		goto fail;
	}
	for (int l = 0; l < c->n_layers; l++)
		if ((rc = load_layer(m, l, err, errlen)) < 0)
			goto fail;
	if ((rc = get_vec(m, "model.norm.weight", c->hidden, 0, c->hidden, 1, &m->final_norm, err,
	                  errlen)) < 0)
		goto fail;
	/* embedding: the whole table, replicated and read row by row */
	m->embed.rows = c->vocab;
	m->embed.cols = c->hidden;
	m->embed.ld = (size_t)c->hidden;
	if (m->synthetic) {
		m->embed.dtype = m->wdtype;
	} else {
		const dec_st_tensor_t *t;
		if ((rc = find_tensor(m, "model.embed_tokens.weight", 2, c->vocab, c->hidden, &t, err,
		                      errlen)) < 0)
			goto fail;
		m->embed.data = dec_st_data(&m->st, t);
		m->embed.dtype = t->dtype;
	}
	lm_name = c->tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
	if ((rc = get_mat(m, lm_name, c->vocab, c->hidden, m->vocab_lo, m->vocab_n, 0, c->hidden,
	                  c->tie_embeddings ? 1.0f : sqrtf(3.0f / (float)c->hidden), &m->lm_head,
	                  err, errlen)) < 0)
		goto fail;
	if (!m->synthetic) {
		m->wdtype = m->layers[0].wq.dtype;
		if (o->prefault) {
			for (int l = 0; l < c->n_layers; l++) {
				dec_layer_t *L = &m->layers[l];
				const dec_mat_t *ms[] = {&L->wq, &L->wk, &L->wv, &L->wo,
				                         &L->wgate, &L->wup, &L->wdown};
				for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++)
					prefault(ms[i]);
			}
			prefault(&m->lm_head);
		}
	}
	return 0;
fail:
	if (rc == -ENOMEM)
		snprintf(err, errlen, "out of memory loading the weights");
	dec_model_free(m);
	return rc;
}

void dec_model_free(dec_model_t *m)
{
	for (int i = 0; i < m->nbufs; i++)
		free(m->bufs[i]);
	free(m->bufs);
	free(m->layers);
	dec_st_close(&m->st);
	memset(m, 0, sizeof(*m));
}

void dec_model_embed(const dec_model_t *m, int tok, float *out)
{
	int H = m->cfg.hidden;
	if (m->synthetic) {
		uint64_t h = dec_name_hash("model.embed_tokens.weight");
		for (int j = 0; j < H; j++)
			out[j] = round_to(m->wdtype,
			                  dec_synth_value(m->seed, h, (uint64_t)tok, (uint64_t)j, 1.0f));
	} else {
		const uint8_t *row = (const uint8_t *)m->embed.data +
		                     (size_t)tok * m->embed.ld * dec_dtype_size(m->embed.dtype);
		for (int j = 0; j < H; j++)
			out[j] = load1(row, m->embed.dtype, (size_t)j);
	}
}

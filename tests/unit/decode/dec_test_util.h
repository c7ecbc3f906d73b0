/* dec_test_util.h - helpers for spark-decode's tests: write a small Hugging
 * Face style model (config.json + safetensors), run commands and capture
 * their output. Header-only; each test program includes it once. */
#ifndef DEC_TEST_UTIL_H
#define DEC_TEST_UTIL_H

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
	int hidden, inter, layers, heads, kv, hd, vocab;
	const char *dtype;      /* "F32", "F16", "BF16" */
	int qkv_bias, o_bias, qk_norm, tie;
	const char *rope_scaling; /* JSON object text or NULL */
	int nfiles;             /* 1 or 2 */
	int unaligned;          /* data section starts at an odd offset */
	uint64_t seed;
} tu_spec_t;

static inline tu_spec_t tu_default_spec(void)
{
	tu_spec_t s = {.hidden = 64, .inter = 96, .layers = 2, .heads = 8, .kv = 2, .hd = 12,
	               .vocab = 211, .dtype = "F32", .nfiles = 1, .seed = 7};
	return s;
}

static inline uint64_t tu_rng(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline float tu_uniform(uint64_t *s, float a)
{
	return a * (2.0f * (float)(tu_rng(s) >> 40) / 16777216.0f - 1.0f);
}

static inline uint16_t tu_bf16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	x += 0x7fffu + ((x >> 16) & 1u);
	return (uint16_t)(x >> 16);
}

static inline uint16_t tu_f16(float f)
{
	/* values here are small normals: exponent rebias, round to nearest even */
	uint32_t x, sign, ax, r;
	memcpy(&x, &f, 4);
	sign = (x >> 16) & 0x8000u;
	ax = x & 0x7fffffffu;
	if (ax < 0x38800000u) /* tiny: flush to zero is fine for test data */
		return (uint16_t)sign;
	r = ax - (112u << 23);
	r += 0xfffu + ((r >> 13) & 1u);
	return (uint16_t)(sign | (r >> 13));
}

typedef struct {
	char name[128];
	int ndim;
	long shape[2];
	int kind; /* 0 matrix, 1 norm, 2 bias, 3 embedding */
} tu_tensor_t;

static inline int tu_tensors(const tu_spec_t *s, tu_tensor_t *t)
{
	int n = 0, qd = s->heads * s->hd, kvd = s->kv * s->hd;
#define T(k, nd, d0, d1, ...)                                                   \
	do {                                                                        \
		snprintf(t[n].name, sizeof(t[n].name), __VA_ARGS__);                   \
		t[n].kind = k, t[n].ndim = nd, t[n].shape[0] = d0, t[n].shape[1] = d1; \
		n++;                                                                    \
	} while (0)
	T(3, 2, s->vocab, s->hidden, "model.embed_tokens.weight");
	for (int l = 0; l < s->layers; l++) {
		T(1, 1, s->hidden, 0, "model.layers.%d.input_layernorm.weight", l);
		T(0, 2, qd, s->hidden, "model.layers.%d.self_attn.q_proj.weight", l);
		T(0, 2, kvd, s->hidden, "model.layers.%d.self_attn.k_proj.weight", l);
		T(0, 2, kvd, s->hidden, "model.layers.%d.self_attn.v_proj.weight", l);
		if (s->qkv_bias) {
			T(2, 1, qd, 0, "model.layers.%d.self_attn.q_proj.bias", l);
			T(2, 1, kvd, 0, "model.layers.%d.self_attn.k_proj.bias", l);
			T(2, 1, kvd, 0, "model.layers.%d.self_attn.v_proj.bias", l);
		}
		if (s->qk_norm) {
			T(1, 1, s->hd, 0, "model.layers.%d.self_attn.q_norm.weight", l);
			T(1, 1, s->hd, 0, "model.layers.%d.self_attn.k_norm.weight", l);
		}
		T(0, 2, s->hidden, qd, "model.layers.%d.self_attn.o_proj.weight", l);
		if (s->o_bias)
			T(2, 1, s->hidden, 0, "model.layers.%d.self_attn.o_proj.bias", l);
		T(1, 1, s->hidden, 0, "model.layers.%d.post_attention_layernorm.weight", l);
		T(0, 2, s->inter, s->hidden, "model.layers.%d.mlp.gate_proj.weight", l);
		T(0, 2, s->inter, s->hidden, "model.layers.%d.mlp.up_proj.weight", l);
		T(0, 2, s->hidden, s->inter, "model.layers.%d.mlp.down_proj.weight", l);
	}
	T(1, 1, s->hidden, 0, "model.norm.weight");
	if (!s->tie)
		T(0, 2, s->vocab, s->hidden, "lm_head.weight");
#undef T
	return n;
}

static inline int tu_write_st(const char *path, const tu_spec_t *s, tu_tensor_t *t, int n,
                              uint64_t *rng)
{
	size_t es = strcmp(s->dtype, "F32") == 0 ? 4 : 2, off = 0, hlen, pad;
	json_t *h = json_object();
	char *txt;
	FILE *f;
	uint8_t len8[8];

	for (int i = 0; i < n; i++) {
		size_t nel = (size_t)t[i].shape[0] * (t[i].ndim == 2 ? (size_t)t[i].shape[1] : 1);
		json_t *sh = t[i].ndim == 2 ? json_pack("[I,I]", (json_int_t)t[i].shape[0],
		                                        (json_int_t)t[i].shape[1])
		                            : json_pack("[I]", (json_int_t)t[i].shape[0]);
		json_object_set_new(h, t[i].name,
		                    json_pack("{s:s,s:o,s:[I,I]}", "dtype", s->dtype, "shape", sh,
		                              "data_offsets", (json_int_t)off,
		                              (json_int_t)(off + nel * es)));
		off += nel * es;
	}
	json_object_set_new(h, "__metadata__", json_pack("{s:s}", "format", "pt"));
	txt = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(h);
	hlen = strlen(txt);
	pad = (8 - hlen % 8) % 8;
	if (s->unaligned)
		pad = (hlen + pad) % 2 ? pad : pad + 1; /* odd: every tensor misaligned */
	hlen += pad;
	for (int i = 0; i < 8; i++)
		len8[i] = (uint8_t)(hlen >> (8 * i));
	if (!(f = fopen(path, "wb")))
		return -1;
	fwrite(len8, 1, 8, f);
	fputs(txt, f);
	for (size_t i = 0; i < pad; i++)
		fputc(' ', f);
	free(txt);
	for (int i = 0; i < n; i++) {
		size_t nel = (size_t)t[i].shape[0] * (t[i].ndim == 2 ? (size_t)t[i].shape[1] : 1);
		float a = t[i].kind == 3 ? 1.0f
		          : t[i].kind == 0 ? sqrtf(3.0f / (float)t[i].shape[1])
		                           : 0.1f;
		for (size_t j = 0; j < nel; j++) {
			float v = (t[i].kind == 1 ? 1.0f : 0.0f) + tu_uniform(rng, a);
			if (es == 4) {
				fwrite(&v, 4, 1, f);
			} else {
				uint16_t b = strcmp(s->dtype, "BF16") == 0 ? tu_bf16(v) : tu_f16(v);
				uint8_t le[2] = {(uint8_t)b, (uint8_t)(b >> 8)};
				fwrite(le, 1, 2, f);
			}
		}
	}
	return fclose(f);
}

/* Write DIR/config.json and the safetensors file(s) of spec s. */
static inline int tu_write_model(const char *dir, const tu_spec_t *s)
{
	static tu_tensor_t t[4096];
	char path[512];
	FILE *f;
	int n = tu_tensors(s, t), half = s->nfiles > 1 ? n / 2 : n;
	uint64_t rng = s->seed;

	mkdir(dir, 0755);
	snprintf(path, sizeof(path), "%s/config.json", dir);
	if (!(f = fopen(path, "w")))
		return -1;
	fprintf(f,
	        "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\",\n"
	        " \"hidden_size\": %d, \"intermediate_size\": %d, \"num_hidden_layers\": %d,\n"
	        " \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d,\n"
	        " \"vocab_size\": %d, \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0,\n"
	        " \"hidden_act\": \"silu\", \"tie_word_embeddings\": %s,\n"
	        " \"rope_scaling\": %s, \"torch_dtype\": \"float32\"}\n",
	        s->hidden, s->inter, s->layers, s->heads, s->kv, s->hd, s->vocab,
	        s->tie ? "true" : "false", s->rope_scaling ? s->rope_scaling : "null");
	fclose(f);
	if (s->nfiles > 1) {
		snprintf(path, sizeof(path), "%s/model-00001-of-00002.safetensors", dir);
		if (tu_write_st(path, s, t, half, &rng) < 0)
			return -1;
		snprintf(path, sizeof(path), "%s/model-00002-of-00002.safetensors", dir);
		return tu_write_st(path, s, t + half, n - half, &rng);
	}
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	return tu_write_st(path, s, t, n, &rng);
}

static inline char *tu_slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	if (buf)
		buf[n] = 0;
	if (len)
		*len = (size_t)n;
	fclose(f);
	return buf;
}

/* Run a shell command with stdout/stderr into DIR/out and DIR/err; exit code. */
static inline int tu_sh(const char *dir, const char *fmt, ...)
{
	char cmd[4096], full[5000];
	va_list ap;
	int st;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	snprintf(full, sizeof(full), "(%s) >%s/out 2>%s/err", cmd, dir, dir);
	st = system(full);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static inline const char *tu_decode_bin(void)
{
	static char path[1024];
	const char *b = getenv("SPARK_BUILD_DIR");
	snprintf(path, sizeof(path), "%s/runtime/decode/spark-decode", b ? b : ".");
	return path;
}

static inline const char *tu_ref_script(void)
{
	static char path[1024];
	const char *s = getenv("SPARK_SOURCE_DIR");
	snprintf(path, sizeof(path), "%s/tests/unit/decode/ref_decode.py", s ? s : ".");
	return path;
}

static inline char *tu_mkdtemp(void)
{
	char tmpl[] = "/tmp/spark-decode-test-XXXXXX";
	char *d = mkdtemp(tmpl);
	return d ? strdup(d) : NULL;
}

static inline void tu_rmrf(const char *dir)
{
	char cmd[600];
	if (dir && strncmp(dir, "/tmp/spark-decode-test-", 23) == 0) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			fprintf(stderr, "cannot remove %s\n", dir);
	}
}

/* Lines of a file (count of '\n', plus one for an unterminated last line). */
static inline int tu_lines(const char *text)
{
	int n = 0;
	for (const char *p = text; *p; p++)
		n += *p == '\n';
	if (*text && text[strlen(text) - 1] != '\n')
		n++;
	return n;
}

#endif

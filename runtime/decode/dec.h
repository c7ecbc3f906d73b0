/* dec.h - spark-decode internals: a Llama/Qwen-family decoder, tensor-parallel
 * over libsparkcoll.
 *
 * Contract of the modules (one job each):
 *   dec_half.h    inline f16/bf16 <-> f32 conversions (portable, vectorisable)
 *   dec_st.c      safetensors: parse a header from memory, map a file, scan a dir
 *   dec_config.c  config.json -> dec_config_t, validation, world-size checks
 *   dec_shapes.c  the YAML shape catalog -> dec_config_t for --synthetic
 *   dec_model.c   this rank's shard of the weights (mapped files or synthetic)
 *   dec_kernels.c matrix-vector products (f32 via BLAS, f16/bf16 portable C),
 *                 RMSNorm, RoPE, SiLU
 *   dec_forward.c one decoder step with two all-reduces per layer, greedy
 *                 decoding, timings
 *   dec_output.c  table and JSON writers for a run's report
 * Functions return 0 or a negative errno-style code and, where a person must
 * read why, fill `err` (one line, no trailing newline). Nothing here exits.
 * Weights are row-major [out, in] like Hugging Face linear layers. */
#ifndef SPARK_DEC_H
#define SPARK_DEC_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dec_half.h"
#include "sparkcoll.h"

#define DEC_ERR_LEN 512
#define DEC_MAX_WORLD 64
#define DEC_MAX_DIMS 4
#define DEC_ST_MAX_HEADER (100u << 20) /* safetensors' own limit */

typedef enum { DEC_F32 = 0, DEC_F16 = 1, DEC_BF16 = 2 } dec_dtype_t;

size_t dec_dtype_size(dec_dtype_t t);
const char *dec_dtype_name(dec_dtype_t t); /* "f32", "f16", "bf16" */
int dec_dtype_parse(const char *s, dec_dtype_t *out);

/* ---- safetensors ---------------------------------------------------------- */

typedef struct dec_st_tensor {
	char *name;
	dec_dtype_t dtype;
	int supported;            /* 0: a dtype we do not compute with (I64, F64...) */
	char dtype_name[8];
	int ndim;
	int64_t shape[DEC_MAX_DIMS];
	uint64_t begin, end;      /* byte offsets in the data section */
	int file;                 /* index in dec_st_set_t.files */
} dec_st_tensor_t;

typedef struct dec_st_header {
	dec_st_tensor_t *t;
	int n;
	uint64_t data_start;      /* 8 + header length */
} dec_st_header_t;

/* Parse the header of a safetensors image of `len` bytes (only the first
 * 8 + header-length bytes are read; `file_size` is the whole file's size so
 * offsets can be checked). */
int dec_st_parse(const uint8_t *buf, size_t len, uint64_t file_size, dec_st_header_t *h,
                 char *err, size_t errlen);
void dec_st_header_free(dec_st_header_t *h);

typedef struct dec_st_file {
	char *path;
	const uint8_t *map;
	size_t size;
	uint64_t data_start;
} dec_st_file_t;

/* All *.safetensors files of a directory, their tensors by name. */
typedef struct dec_st_set {
	dec_st_file_t *files;
	int nfiles;
	dec_st_tensor_t *t;       /* sorted by name */
	int n;
} dec_st_set_t;

int dec_st_open_dir(const char *dir, dec_st_set_t *s, char *err, size_t errlen);
void dec_st_close(dec_st_set_t *s);
const dec_st_tensor_t *dec_st_find(const dec_st_set_t *s, const char *name);
const void *dec_st_data(const dec_st_set_t *s, const dec_st_tensor_t *t);

/* ---- model configuration ------------------------------------------------- */

typedef enum { DEC_ROPE_DEFAULT = 0, DEC_ROPE_LINEAR = 1, DEC_ROPE_LLAMA3 = 2 } dec_rope_type_t;

typedef struct dec_config {
	char name[64];            /* shape name or model_type */
	int hidden, inter, n_layers, n_heads, n_kv_heads, head_dim, vocab;
	double rms_eps, rope_theta;
	int tie_embeddings;
	int attn_bias;            /* q/k/v biases (Qwen2 style); -1 = from the files */
	int o_bias;               /* o_proj bias (Llama attention_bias); -1 = from the files */
	int qk_norm;              /* per-head q/k RMSNorm (Qwen3); -1 = from the files */
	dec_rope_type_t rope_type;
	double rope_factor, rope_low_freq, rope_high_freq;
	int rope_orig_max_pos;
	int total_layers;         /* layers of the full shape (before --layers) */
} dec_config_t;

void dec_config_init(dec_config_t *c);
/* config.json text -> c. Fills defaults (head_dim = hidden / heads...). */
int dec_config_parse(const char *json, size_t len, dec_config_t *c, char *err, size_t errlen);
int dec_config_load(const char *dir, dec_config_t *c, char *err, size_t errlen);
/* Sanity of the numbers (positive, head_dim even, kv heads divide heads...). */
int dec_config_check(const dec_config_t *c, char *err, size_t errlen);
/* 0 if the shape splits over `world` ranks, else -EINVAL with the reason and
 * the world sizes that do work. */
int dec_config_check_world(const dec_config_t *c, int world, char *err, size_t errlen);

/* ---- shape catalog ------------------------------------------------------- */

extern const char dec_builtin_catalog[]; /* shapes.yaml, compiled in */

/* Find shape `name` in the YAML catalog text (NULL = the built-in one). */
int dec_shape_find(const char *yaml, size_t len, const char *name, dec_config_t *c, char *err,
                   size_t errlen);
/* Print "name  hidden ... description" lines of every shape. */
int dec_shape_list(const char *yaml, size_t len, FILE *out, char *err, size_t errlen);

/* ---- the weights of one rank --------------------------------------------- */

typedef struct dec_mat {
	const void *data;         /* first element of this rank's slice */
	dec_dtype_t dtype;
	int rows, cols;           /* of the slice */
	size_t ld;                /* elements from one row to the next */
} dec_mat_t;

typedef struct dec_layer {
	float *attn_norm, *mlp_norm;        /* [hidden] */
	dec_mat_t wq, wk, wv, wo, wgate, wup, wdown;
	float *bq, *bk, *bv;                /* local slices, or NULL */
	float *bo;                          /* [hidden] (added after the all-reduce), or NULL */
	float *q_norm, *k_norm;             /* [head_dim], or NULL */
} dec_layer_t;

typedef struct dec_model {
	dec_config_t cfg;
	int rank, world;
	int nh, nkv, inter;       /* local heads, kv heads, intermediate columns */
	int vocab_lo, vocab_n;    /* this rank's vocabulary rows */
	int vocab_shard;          /* ceil(vocab / world): padded shard for gathers */
	dec_layer_t *layers;
	float *final_norm;
	dec_mat_t lm_head;
	dec_mat_t embed;          /* whole table (file) or data == NULL (synthetic) */
	int synthetic;
	uint64_t seed;
	dec_dtype_t wdtype;       /* dtype of the big matrices */
	size_t weight_bytes;      /* bytes of matrices one token streams on this rank */
	dec_st_set_t st;          /* mapped files */
	const char *dir;          /* model directory (for messages) */
	void **bufs;              /* allocations to free */
	int nbufs, capbufs;
} dec_model_t;

typedef struct dec_load_opts {
	const char *model_dir;    /* either this */
	const dec_config_t *shape;/* or a synthetic shape */
	dec_dtype_t dtype;        /* synthetic weights' dtype */
	uint64_t seed;
	int layers;               /* > 0: use only the first N layers */
	int prefault;             /* touch this rank's pages at load */
} dec_load_opts_t;

int dec_model_load(dec_model_t *m, const dec_load_opts_t *o, int rank, int world, char *err,
                   size_t errlen);
void dec_model_free(dec_model_t *m);
/* Row `tok` of the embedding table as f32 (file or synthetic). */
void dec_model_embed(const dec_model_t *m, int tok, float *out);
/* Deterministic synthetic value of element (row, col) of tensor `name`. */
float dec_synth_value(uint64_t seed, uint64_t name_hash, uint64_t row, uint64_t col, float scale);
uint64_t dec_name_hash(const char *s);

/* ---- kernels ------------------------------------------------------------- */

/* y[i] = sum_j W[i][j] x[j] for the rows of the slice. */
void dec_matvec(const dec_mat_t *w, const float *x, float *y);
void dec_rmsnorm(float *out, const float *x, const float *w, int n, float eps);
void dec_silu_mul(float *gate, const float *up, int n);
void dec_rope(float *v, int nheads, int head_dim, int pos, const float *inv_freq);
void dec_rope_freqs(const dec_config_t *c, float *inv_freq); /* [head_dim / 2] */
int dec_blas_name(char *buf, size_t len); /* "openblas" or "plain C" */
void dec_blas_threads(int n);

/* ---- the run ------------------------------------------------------------- */

typedef struct dec_run_opts {
	const int *prompt;
	int n_prompt;
	int n_tokens;             /* tokens to generate */
	int warmup;               /* untimed steps before the prompt */
	sc_algo_t algo;
	sc_dtype_t comm_dtype;    /* SC_F32 or SC_BF16 */
	int want_logits;          /* all ranks: gather full logits every step */
	FILE *dump;               /* rank 0: writes them (f32, host order) */
	/* Sampling: temperature 0 is greedy; above, every rank adds the same
	 * Gumbel noise (a hash of sample_seed, the step and the token's global
	 * id) to logits / temperature and takes the arg-max, which draws from
	 * softmax(logits / T) and needs no more traffic than greedy. */
	double temperature;
	uint64_t sample_seed;
	int eos_set;              /* 1: stop after generating the id eos */
	int eos;
	/* called on the rank that sets it (rank 0 of a server) after each
	 * generated token, with its index; it cannot stop the run (all ranks
	 * must take the same steps) */
	void (*on_token)(void *ud, int index, int tok);
	void *ud;
} dec_run_opts_t;

typedef struct dec_rank_stats {
	double compute_ms, comm_ms; /* per generated token, averages */
} dec_rank_stats_t;

typedef struct dec_result {
	int *tokens;              /* generated ids [n_tokens] */
	int n_tokens;             /* generated: fewer than asked when eos came */
	int stopped;              /* 1: the last token is the eos id */
	double *step_s;           /* wall time of each timed step */
	double total_s;           /* sum of step_s */
	double compute_s, comm_s; /* totals over the timed steps (this rank) */
	double allreduce_s;       /* the all-reduce part of comm_s */
	double prefill_s;
	size_t allreduce_bytes;   /* one all-reduce message */
	int allreduce_per_token;
	size_t gather_bytes;      /* the final arg-max all-gather, per rank */
	int gather_per_token;
	sc_algo_t algo_used;      /* what auto picks for allreduce_bytes */
	dec_rank_stats_t ranks[DEC_MAX_WORLD];
} dec_result_t;

/* Decode on this rank (comm may be NULL when world == 1). Every rank returns
 * the same tokens; the timings are this rank's, ranks[] has everyone's. */
int dec_generate(const dec_model_t *m, sc_comm_t *comm, const dec_run_opts_t *o, dec_result_t *r,
                 char *err, size_t errlen);
void dec_result_free(dec_result_t *r);
/* p-th percentile (nearest rank) of the step times, seconds. */
double dec_percentile(const dec_result_t *r, double p);

/* ---- report -------------------------------------------------------------- */

typedef struct dec_report {
	const dec_model_t *m;
	const dec_result_t *r;
	const char *source;       /* model dir or "synthetic:SHAPE" */
	const char *mode;         /* "local", "job" or "single" */
	int n_prompt;
	sc_algo_t algo_requested;
	sc_dtype_t comm_dtype;
	char transport[16];
	double memcpy_gbs, read_gbs; /* 0 if not measured */
	double load_s;
} dec_report_t;

void dec_report_table(FILE *f, const dec_report_t *rep);
void dec_report_json(FILE *f, const dec_report_t *rep);
/* Best-of-n single-thread memcpy and read bandwidth over `bytes`, GB/s. */
int dec_measure_membw(size_t bytes, double *memcpy_gbs, double *read_gbs);

double dec_now(void);
int dec_parse_ids(const char *s, int **ids, int *n);
/* Gumbel(0, 1) noise for (seed, step, id), the same on every rank and machine. */
double dec_gumbel(uint64_t seed, uint64_t step, uint64_t id);

#endif

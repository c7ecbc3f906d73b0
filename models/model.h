/* models: the shape of a language model, its parameter and memory
 * arithmetic, whether it fits on Sparks, and how fast it decodes.
 *
 * A pure library: it parses the text it is given (a Hugging Face config.json,
 * the YAML shape catalog, a calibration file) and computes; it opens no socket
 * and knows no cluster state. The CLI (sparkctl fit, sparkctl plan decode)
 * and the agent call it. Depends on common/ only (and jansson, libyaml).
 *
 *   model_shape.c    config.json (jansson) and catalog (libyaml) -> model_shape_t
 *   model_params.c   parameter counts by part, total and active per token
 *   model_memory.c   storage types, weight bytes per rank, KV cache, fit
 *   model_decode.c   batch-1 decode speed: compute + communication per token
 *
 * Functions return 0 or a negative errno; on failure err receives one line
 * for a person that names the field or value at fault. Formulas and their
 * sources: docs/planner.md. */
#ifndef SPARK_MODEL_H
#define SPARK_MODEL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MODEL_ERR_LEN 256
#define GIB (1024.0 * 1024.0 * 1024.0)

/* ---- shapes -------------------------------------------------------------- */

enum model_attn { MODEL_ATTN_GQA = 0, MODEL_ATTN_MLA = 1 };

typedef struct model_shape {
	char name[64];         /* catalog key, or config.json's model_type */
	char display[96];      /* "Llama-3.1-8B" (catalog) or the name */
	char arch[48];         /* config.json model_type: llama, qwen3_moe, deepseek_v3, gpt_oss... */
	char source[256];      /* where the numbers come from (catalog) or the file read */
	char status[16];       /* "released" or "announced" */
	char native_dtype[16]; /* storage type of the published weights (quantization_config) */
	char native_rule[16];  /* which tensors are at native_dtype: all, linear, experts */
	char quant_method[32]; /* quantization_config.quant_method, when native_dtype is "" */
	bool shape_known;      /* false: an announced model with only its parameter count */

	int64_t hidden, layers, heads, kv_heads, head_dim, vocab, inter;
	int64_t max_pos;          /* the model's context limit (max_position_embeddings), 0 none */
	char max_pos_default[32]; /* "": from the config; else the class whose default it is
				   * (config.json has no max_position_embeddings): "LlamaConfig" */
	bool tied, qkv_bias, o_bias, qk_norm, sinks;
	enum model_attn attn;
	/* MLA (DeepSeek-style); q_lora_rank 0 = a plain q projection */
	int64_t q_lora_rank, kv_lora_rank, qk_nope, qk_rope, v_head_dim;
	/* MoE: routed experts (0 = dense), active per token, shared experts, an
	 * expert's intermediate size, a shared expert's (default moe_inter), the
	 * first dense layers, MoE every moe_every layers (Qwen decoder_sparse_step) */
	int64_t experts, experts_active, shared_experts, moe_inter, shared_inter, first_dense,
	    moe_every;
	bool expert_bias, router_bias, shared_gate;
	/* sliding-window attention: window in tokens, how many layers use it */
	int64_t window, sliding_layers;
	int64_t mtp_layers; /* multi-token-prediction layers: shipped, not counted */
	/* published totals (parameters; 0 = not published), announced models' only data */
	double published_total, published_active;
} model_shape_t;

/* config.json text (or a parsed object) -> shape. Knows llama, mistral, qwen2,
 * qwen3 (dense), qwen2_moe, qwen3_moe, deepseek_v2/v3, kimi_k2, glm4_moe,
 * gpt_oss; anything else, or a missing field, is an error naming it. */
int model_shape_from_json(json_t *cfg, const char *name, model_shape_t *s, char *err,
			  size_t errlen);
int model_shape_parse_config(const char *text, size_t len, const char *name, model_shape_t *s,
			     char *err, size_t errlen);
/* A directory holding config.json, or the path of a config.json. */
int model_shape_load(const char *path, model_shape_t *s, char *err, size_t errlen);

/* The catalog: YAML `models: {KEY: {display, source, status, config: {config.json
 * fields...}, published_total, published_active}}` plus `decode_reports`.
 * yaml NULL = the built-in one (models/catalog.yaml, compiled in). */
extern const char model_builtin_catalog[];

typedef struct model_report {
	char model[64];   /* catalog key */
	char dtype[16];   /* weights' storage type */
	char source[160];
	int nodes;
	double tok_s;
} model_report_t;

typedef struct model_catalog {
	model_shape_t *shapes;
	size_t n;
	model_report_t *reports; /* published decode speeds (calibration) */
	size_t n_reports;
} model_catalog_t;

int model_catalog_parse(const char *yaml, size_t len, model_catalog_t *c, char *err,
			size_t errlen);
void model_catalog_free(model_catalog_t *c);
const model_shape_t *model_catalog_find(const model_catalog_t *c, const char *name);

/* ---- parameters ---------------------------------------------------------- */

/* Parameters by part. "Linear" parts are the matrices a quantiser converts;
 * norms, biases, routers, sinks stay at high precision. */
typedef struct model_params {
	double embed;          /* token embedding */
	double lm_head;        /* 0 when tied */
	double attn;           /* attention projections, all layers */
	double attn_repl;      /* of which replicated on every TP rank (MLA q_a/kv_a) */
	double attn_kv;        /* of which K/V projections (GQA), replicated when TP > kv heads */
	double dense_mlp;      /* dense MLP layers */
	double experts;        /* routed experts, all of them */
	double shared;         /* shared experts */
	double router;         /* routers (and their biases) */
	double small;          /* norms, biases, sinks */
	double total;
	double active;         /* per token: everything but the embedding table, and only
				  experts_active of the routed experts */
	double experts_active_params; /* routed experts read per token */
	double per_layer_attn, per_layer_dense, per_layer_moe; /* one layer of each kind */
	int64_t dense_layers, moe_layers;
} model_params_t;

int model_params(const model_shape_t *s, model_params_t *p);

/* ---- storage types ------------------------------------------------------- */

typedef struct model_dtype {
	const char *name;      /* bf16, fp8, nvfp4, mxfp4, int4, q4_k_m... */
	double bytes;          /* per parameter, scales included */
	const char *rule;      /* default rule: which tensors take this type */
	const char *what;      /* one line: layout */
} model_dtype_t;

const model_dtype_t *model_dtype_find(const char *name);
const model_dtype_t *model_dtype_at(size_t i); /* NULL past the end */

/* Rules: all (every tensor), linear (block matrices; embeddings, LM head,
 * norms, routers bf16), experts (only MoE experts; the rest bf16). */
bool model_rule_valid(const char *rule);

/* ---- memory and fit ------------------------------------------------------ */

typedef struct model_fit_opts {
	int tp, pp;              /* 0 = choose from nodes */
	int nodes;               /* 0 = tp * pp */
	const char *dtype;       /* NULL = the model's native type */
	const char *rule;        /* NULL = the type's default (native_rule for native) */
	const char *kv_dtype;    /* bf16 (default) or fp8 */
	int64_t context;         /* tokens per sequence; 0 = default (min(32768, max_pos)) */
	int64_t batch;           /* sequences; 0 = 1 */
	double usable_gib;       /* per node; 0 = MODEL_USABLE_GIB */
	double overhead_gib;     /* per node; < 0 = MODEL_OVERHEAD_GIB */
} model_fit_opts_t;

#define MODEL_CUDA_GIB 121.7    /* memory CUDA sees on a Spark (SPARK-FACTS.md) */
#define MODEL_USABLE_GIB 102.0  /* free to an engine after the OS (MiaAI-Lab GLM #47) */
#define MODEL_OVERHEAD_GIB 4.0  /* engine context, activations, CUDA graphs (docs/planner.md) */
#define MODEL_DEFAULT_CONTEXT 32768
#define MODEL_MAX_NODES 8

/* What bounds the largest context: the memory left for the KV cache, the
 * model's own limit (max_position_embeddings), or nothing (every layer
 * holds only its sliding window and the model states no limit). */
enum model_bound { MODEL_BOUND_MEMORY = 0, MODEL_BOUND_MODEL, MODEL_BOUND_NONE };
const char *model_bound_name(enum model_bound b); /* "memory", "model", "none" */

typedef struct model_fit {
	int tp, pp, nodes;
	char dtype[16], rule[16], kv_dtype[16];
	int64_t context, batch;
	double usable_gib, overhead_gib;
	/* the fullest node (the first or last pipeline stage), in bytes */
	double weights_b, kv_b, overhead_b, left_b;
	double kv_per_token_b;   /* on that node, one sequence, every layer at full length */
	double kv_full_per_token_b, kv_window_per_token_b; /* split by layer kind, per node */
	int64_t window;
	double weights_total_b;  /* the whole model at this type */
	bool kv_known;           /* false: announced shape, KV not estimated */
	bool kv_replicated;      /* TP > kv heads: heads are copied */
	int64_t kv_heads_per_rank;
	bool fits;
	int64_t max_context;     /* the largest context at this batch (0: weights do not fit) */
	bool max_context_capped; /* max_context is the model's max_position_embeddings */
	enum model_bound max_context_bound; /* which limit max_context is */
	char why[160];           /* when it does not fit */
} model_fit_t;

/* Fit a model on opts->nodes nodes (or tp x pp). -EINVAL with err when the
 * layout cannot run (TP not dividing the heads, ...). */
int model_fit(const model_shape_t *s, const model_fit_opts_t *o, model_fit_t *f, char *err,
	      size_t errlen);
/* The layout for N nodes: TP = N when the heads split N ways, else the largest
 * TP that does, times PP. 0, or -EINVAL when no layout of N works. */
int model_layout(const model_shape_t *s, int nodes, int *tp, int *pp);
/* Fewest nodes (1..max_nodes) on which it fits; 0 if none. f receives that fit. */
int model_fewest_nodes(const model_shape_t *s, const model_fit_opts_t *o, int max_nodes,
		       model_fit_t *f);
/* KV bytes per token of one sequence on one rank: full-attention and
 * sliding-window layers apart. */
void model_kv_per_token(const model_shape_t *s, int tp, int64_t layers_here, double kv_bytes,
			double *full, double *window);

/* ---- decode speed -------------------------------------------------------- */

enum model_topo { MODEL_TOPO_SWITCH = 0, MODEL_TOPO_RING = 1 };
enum model_algo { MODEL_ALGO_AUTO = 0, MODEL_ALGO_ONESHOT, MODEL_ALGO_RING, MODEL_ALGO_RELAY,
		  MODEL_ALGO_DOUBLING, MODEL_ALGO_NONE };

const char *model_algo_name(enum model_algo a);

/* Link cost: alpha (s) and beta (s per byte) for one algorithm at one world
 * size; world_size 0 and algo AUTO = any. */
typedef struct model_link {
	int world_size;
	enum model_algo algo;
	double alpha_s, beta_s_per_b;
} model_link_t;

#define MODEL_MAX_LINKS 32

typedef struct model_calib {
	char source[160];
	double mem_gbs;          /* bytes a rank streams per second, decimal GB/s */
	double efficiency;       /* of mem_gbs (the published-figure calibration) */
	double mem_gbs_all_cores;/* per rank when host_cores ranks stream at once (0 = mem_gbs) */
	int host_cores;          /* ranks share this many cores (0 = one rank per node) */
	double per_token_s;      /* fixed cost per token */
	double per_layer_s;      /* fixed cost per layer and token on each rank (launches, norms) */
	double comm_bytes;       /* bytes per element of the all-reduce (2 = bf16) */
	double gather_bytes;     /* bytes each rank contributes to the per-token gather (0 = vocab*comm/TP) */
	double alpha_s, beta_s_per_b; /* default link */
	model_link_t links[MODEL_MAX_LINKS];
	size_t n_links;
} model_calib_t;

#define MODEL_SPARK_GBS 273.0       /* LPDDR5x per node */
#define MODEL_RDMA_ALPHA_US 1.5     /* ib_write_lat, 2 bytes */
#define MODEL_RDMA_LINK_GBS 24.0    /* nccl busbw per 200G link */
#define MODEL_PER_TOKEN_MS 0.3      /* fixed per-token cost of a GPU engine (assumption) */

/* Spark defaults: 273 GB/s x efficiency, 200G RoCE alpha/beta, bf16. */
void model_calib_default(model_calib_t *c, double efficiency);
/* A calibration file (JSON, written by bench/planner/run.sh) over defaults. */
int model_calib_parse(const char *text, size_t len, model_calib_t *c, char *err, size_t errlen);
/* Efficiency of the bandwidth bound from published single-node reports: the
 * median of tok/s x bytes per token / 273 GB/s, over reports at most 1
 * (a report above the bound means the byte count is wrong and is left out).
 * used/skipped counts are returned; -ENOENT when no report is usable. */
int model_calibrate_efficiency(const model_catalog_t *c, double per_token_s, double *eff,
			       int *used, int *skipped);

typedef struct model_decode_opts {
	int nodes;               /* 1..N in the table */
	enum model_topo topo;
	enum model_algo algo;
	const char *dtype, *rule; /* NULL = native */
	int64_t context;          /* tokens already in the KV cache (read every token) */
	const char *kv_dtype;
} model_decode_opts_t;

typedef struct model_decode_row {
	int tp;
	bool possible;             /* heads split tp ways */
	enum model_algo algo;      /* the all-reduce algorithm priced */
	double bytes_per_rank;     /* weights + KV read per token by one rank */
	double compute_s, comm_s, fixed_s, token_s;
	double allreduce_s;        /* one all-reduce */
	int allreduces;            /* per token */
	double allreduce_bytes;
	double tok_s, speedup;
} model_decode_row_t;

/* Bytes of weights (and KV at o->context) one rank reads per token at TP tp. */
int model_decode_bytes(const model_shape_t *s, const model_decode_opts_t *o, int tp,
		       double *bytes, char *err, size_t errlen);
/* Time of one all-reduce of m bytes on n ranks with algorithm a (not AUTO). */
double model_allreduce_s(const model_calib_t *c, enum model_algo a, int n, double m);
/* The algorithm auto picks: the cheapest the topology allows. */
enum model_algo model_pick_algo(const model_calib_t *c, enum model_topo t, enum model_algo want,
				int n, double m);
/* One row per TP 1..o->nodes. rows must hold o->nodes entries. */
int model_decode(const model_shape_t *s, const model_decode_opts_t *o, const model_calib_t *c,
		 model_decode_row_t *rows, char *err, size_t errlen);

#endif

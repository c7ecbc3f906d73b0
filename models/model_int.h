/* model_int.h - what the models/ files share and nobody else needs. */
#ifndef SPARK_MODEL_INT_H
#define SPARK_MODEL_INT_H

#include "model.h"

/* One layer's parameters by how tensor parallelism treats them. */
typedef struct model_layer_parts {
	double attn_split;  /* split over TP ranks (q, o, MLA q_b/kv_b) */
	double attn_kv;     /* GQA K/V projections: split, but at least one head per rank */
	double attn_repl;   /* replicated on every rank (MLA q_a, kv_a) */
	double dense;       /* dense MLP (split) */
	double expert;      /* one routed expert (split) */
	double experts;     /* how many routed experts the layer has (0 = dense layer) */
	double shared;      /* shared experts (split) */
	double router;      /* replicated */
	double small;       /* norms, biases, sinks: replicated */
	bool moe;
} model_layer_parts_t;

void model_layer_parts(const model_shape_t *s, int64_t i, model_layer_parts_t *p);

/* Bytes per parameter of the high-precision parts for storage type d. */
double model_hi_bytes(const model_dtype_t *d);

/* Weight bytes one rank holds (active false) or reads per token (active
 * true: only experts_active routed experts) for layers [l0, l1) at TP tp;
 * first: the stage holds the embedding table; last: the LM head (a tied one
 * is a copy of the table) and the final norm. */
double model_rank_bytes(const model_shape_t *s, const model_dtype_t *d, const char *rule, int tp,
			int64_t l0, int64_t l1, bool first, bool last, bool active);

/* The storage type and precision rule a fit uses: dtype NULL = the model's
 * native type (with its own rule); rule NULL = the type's default. */
int model_storage(const model_shape_t *s, const char *dtype, const char *rule,
		  const model_dtype_t **d, const char **r, char *err, size_t errlen);

/* Can TP tp split the heads (and the KV heads: one divides the other)? */
bool model_tp_ok(const model_shape_t *s, int tp, char *why, size_t wl);

#endif

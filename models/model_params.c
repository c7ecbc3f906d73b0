/* model_params.c - parameter counts from a shape, part by part: embeddings,
 * attention (GQA with biases and q/k norms, or MLA with its low-rank q and
 * kv projections), dense MLPs, routed and shared experts, routers, norms,
 * the LM head (tied or not). MTP layers are not counted (they ship with
 * DeepSeek-V3 and GLM-4.5 but are not part of the published totals).
 * Active per token: everything a token reads, i.e. all but the embedding
 * table (one row is looked up) and the routed experts it is not sent to;
 * a tied LM head is the embedding table, read whole. */
#include "model_int.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

/* Is layer i a MoE layer? (Each family's own rule.) */
static bool is_moe_layer(const model_shape_t *s, int64_t i)
{
	if (!s->experts)
		return false;
	if (strncmp(s->arch, "qwen", 4) == 0)
		return (i + 1) % s->moe_every == 0; /* decoder_sparse_step */
	return i >= s->first_dense && i % s->moe_every == 0; /* DeepSeek, GLM; gpt-oss: all */
}

void model_layer_parts(const model_shape_t *s, int64_t i, model_layer_parts_t *p)
{
	const double h = (double)s->hidden, hd = (double)s->head_dim, nh = (double)s->heads,
		     kvh = (double)s->kv_heads;
	memset(p, 0, sizeof *p);
	p->small = 2 * h;
	if (s->attn == MODEL_ATTN_MLA) {
		double qdim = nh * (double)(s->qk_nope + s->qk_rope);
		p->attn_split = (s->q_lora_rank ? (double)s->q_lora_rank * qdim : h * qdim) +
				(double)s->kv_lora_rank * nh * (double)(s->qk_nope + s->v_head_dim) +
				nh * (double)s->v_head_dim * h;
		p->attn_repl = h * (double)(s->kv_lora_rank + s->qk_rope) +
			       (s->q_lora_rank ? h * (double)s->q_lora_rank : 0);
		p->small += (double)s->kv_lora_rank + (double)s->q_lora_rank;
	} else {
		p->attn_split = 2 * h * nh * hd;
		p->attn_kv = 2 * h * kvh * hd;
		if (s->qkv_bias)
			p->small += nh * hd + 2 * kvh * hd;
		if (s->o_bias)
			p->small += h;
		if (s->qk_norm)
			p->small += 2 * hd;
		if (s->sinks)
			p->small += nh;
	}
	p->moe = is_moe_layer(s, i);
	if (p->moe) {
		p->experts = (double)s->experts;
		p->expert = 3 * h * (double)s->moe_inter +
			    (s->expert_bias ? 2 * (double)s->moe_inter + h : 0);
		p->shared = (double)s->shared_experts * 3 * h * (double)s->shared_inter;
		p->router = h * (double)s->experts + (s->router_bias ? (double)s->experts : 0) +
			    (s->shared_gate ? h : 0);
	} else {
		p->dense = 3 * h * (double)s->inter;
	}
}

int model_params(const model_shape_t *s, model_params_t *p)
{
	memset(p, 0, sizeof *p);
	if (!s->shape_known) {
		if (s->published_total <= 0)
			return -EINVAL;
		p->total = s->published_total;
		p->active = s->published_active > 0 ? s->published_active : s->published_total;
		return 0;
	}
	model_layer_parts_t l;
	for (int64_t i = 0; i < s->layers; i++) {
		model_layer_parts(s, i, &l);
		double attn = l.attn_split + l.attn_kv + l.attn_repl;
		p->attn += attn;
		p->attn_repl += l.attn_repl;
		p->attn_kv += l.attn_kv;
		p->small += l.small;
		p->per_layer_attn = attn;
		if (l.moe) {
			p->moe_layers++;
			p->experts += l.experts * l.expert;
			p->shared += l.shared;
			p->router += l.router;
			p->experts_active_params += (double)s->experts_active * l.expert;
			p->per_layer_moe = l.experts * l.expert + l.shared + l.router;
		} else {
			p->dense_layers++;
			p->dense_mlp += l.dense;
			p->per_layer_dense = l.dense;
		}
	}
	p->embed = (double)s->vocab * (double)s->hidden;
	p->lm_head = s->tied ? 0 : p->embed;
	p->small += (double)s->hidden; /* final norm */
	p->total = p->embed + p->lm_head + p->attn + p->dense_mlp + p->experts + p->shared +
		   p->router + p->small;
	/* a token reads the LM head (the embedding table when tied), attention, dense
	 * MLPs, shared experts, routers, small tensors and its routed experts */
	p->active = (s->tied ? p->embed : p->lm_head) + p->attn + p->dense_mlp + p->shared +
		    p->router + p->small + p->experts_active_params;
	return 0;
}

double model_hi_bytes(const model_dtype_t *d)
{
	return d && d->bytes >= 4.0 ? 4.0 : 2.0;
}

/* ---- storage types ------------------------------------------------------- */

/* Bytes per parameter with the type's scales: nvfp4 = 4-bit values + an fp8
 * scale per 16; mxfp4 = 4-bit + an e8m0 scale per 32; int4 = 4-bit + an f16
 * scale and a 4-bit zero per group of 128 (AWQ/GPTQ); fp8 with per-128x128
 * block f32 scales (DeepSeek) is 1 + 4/16384. GGUF: bytes per block / weights
 * per block (ggml-common.h). */
static const model_dtype_t dtypes[] = {
    {"f32", 4.0, "all", "32-bit float"},
    {"bf16", 2.0, "all", "bfloat16"},
    {"f16", 2.0, "all", "float16"},
    {"fp8", 1.0 + 4.0 / 16384.0, "linear", "e4m3 + f32 scale per 128x128 block"},
    {"int8", 1.0 + 2.0 / 128.0, "linear", "8-bit + f16 scale per 128"},
    {"nvfp4", 0.5 + 1.0 / 16.0, "linear", "e2m1 + fp8 scale per 16"},
    {"mxfp4", 0.5 + 1.0 / 32.0, "experts", "e2m1 + e8m0 scale per 32"},
    {"int4", 0.5 + 2.5 / 128.0, "linear", "4-bit + f16 scale and 4-bit zero per 128 (AWQ/GPTQ)"},
    {"q8_0", 34.0 / 32.0, "all", "GGUF: 32 x int8 + f16 scale"},
    {"q6_k", 210.0 / 256.0, "all", "GGUF: 6.5625 bits"},
    {"q5_k_m", 176.0 / 256.0, "all", "GGUF Q5_K: 5.5 bits"},
    {"q5_0", 22.0 / 32.0, "all", "GGUF: 5.5 bits"},
    {"q4_k_m", 144.0 / 256.0, "all", "GGUF Q4_K: 4.5 bits"},
    {"q4_0", 18.0 / 32.0, "all", "GGUF: 4.5 bits"},
    {"q3_k_m", 110.0 / 256.0, "all", "GGUF Q3_K: 3.4375 bits"},
    {"q2_k", 84.0 / 256.0, "all", "GGUF: 2.625 bits"},
};

const model_dtype_t *model_dtype_find(const char *name)
{
	if (!name)
		return NULL;
	for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
		if (strcasecmp(dtypes[i].name, name) == 0)
			return &dtypes[i];
	if (strcasecmp(name, "q4_k") == 0)
		return model_dtype_find("q4_k_m");
	if (strcasecmp(name, "q5_k") == 0)
		return model_dtype_find("q5_k_m");
	if (strcasecmp(name, "q3_k") == 0)
		return model_dtype_find("q3_k_m");
	return NULL;
}

const model_dtype_t *model_dtype_at(size_t i)
{
	return i < sizeof dtypes / sizeof dtypes[0] ? &dtypes[i] : NULL;
}

bool model_rule_valid(const char *rule)
{
	return rule && (strcmp(rule, "all") == 0 || strcmp(rule, "linear") == 0 ||
			strcmp(rule, "experts") == 0);
}

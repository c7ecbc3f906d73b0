/* model_memory.c - memory per node for tensor parallelism across nodes
 * (TP) and pipeline parallelism by layers (PP), and whether it fits.
 *
 *   weights  per part at its storage type (the rule says which parts take
 *            the asked type; the rest stay bf16), split over TP as vLLM does:
 *            q/o/MLP/experts/embedding/LM head divided by TP; GQA K/V at least
 *            one head per rank; MLA q_a/kv_a, routers, norms replicated.
 *   KV       GQA 2 x layers x max(1, kv_heads/TP) x head_dim x bytes per token;
 *            MLA layers x (kv_lora_rank + qk_rope_head_dim) x bytes, whole on
 *            every rank; sliding-window layers hold at most the window.
 *   node     weights + KV(context x batch) + overhead <= usable. */
#include "model_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define ERR(...) (snprintf(err, errlen, __VA_ARGS__), -EINVAL)

bool model_tp_ok(const model_shape_t *s, int tp, char *why, size_t wl)
{
	if (!s->shape_known)
		return true;
	if (s->heads % tp) {
		snprintf(why, wl, "%lld attention heads do not split over TP %d",
			 (long long)s->heads, tp);
		return false;
	}
	if (s->attn == MODEL_ATTN_GQA && s->kv_heads % tp && tp % s->kv_heads) {
		snprintf(why, wl, "%lld KV heads and TP %d: one must divide the other",
			 (long long)s->kv_heads, tp);
		return false;
	}
	return true;
}

int model_layout(const model_shape_t *s, int nodes, int *tp, int *pp)
{
	char why[128];
	for (int t = nodes; t >= 1; t--) {
		if (nodes % t || !model_tp_ok(s, t, why, sizeof why))
			continue;
		if (s->shape_known && nodes / t > s->layers)
			continue;
		*tp = t;
		*pp = nodes / t;
		return 0;
	}
	return -EINVAL;
}

void model_kv_per_token(const model_shape_t *s, int tp, int64_t layers_here, double kv_bytes,
			double *full, double *window)
{
	double per_layer;
	if (s->attn == MODEL_ATTN_MLA) {
		per_layer = (double)(s->kv_lora_rank + s->qk_rope) * kv_bytes;
	} else {
		int64_t heads = s->kv_heads / tp;
		if (heads < 1)
			heads = 1;
		per_layer = 2.0 * (double)heads * (double)s->head_dim * kv_bytes;
	}
	double sliding = s->layers ? (double)layers_here * (double)s->sliding_layers /
					     (double)s->layers
				   : 0;
	sliding = round(sliding);
	*window = sliding * per_layer;
	*full = ((double)layers_here - sliding) * per_layer;
}

double model_rank_bytes(const model_shape_t *s, const model_dtype_t *d, const char *rule, int tp,
			int64_t l0, int64_t l1, bool first, bool last, bool active)
{
	const double lo = d->bytes, hi = model_hi_bytes(d);
	const bool all = strcmp(rule, "all") == 0, experts_only = strcmp(rule, "experts") == 0;
	const double lin = experts_only ? hi : lo, exb = lo, emb = all ? lo : hi;
	double b = 0;
	model_layer_parts_t p;
	for (int64_t i = l0; i < l1; i++) {
		model_layer_parts(s, i, &p);
		double kv_share = 1.0 / tp;
		if (s->attn == MODEL_ATTN_GQA && tp > s->kv_heads)
			kv_share = 1.0 / (double)s->kv_heads; /* heads copied: one per rank */
		b += (p.attn_split / tp + p.attn_kv * kv_share + p.attn_repl) * lin;
		b += p.dense / tp * lin;
		double ne = active ? (p.moe ? (double)s->experts_active : 0) : p.experts;
		b += (ne * p.expert + p.shared) / tp * exb;
		b += (p.router + p.small) * (all ? lo : hi);
	}
	double table = (double)s->vocab * (double)s->hidden / tp;
	if (first)
		b += table * emb;
	if (last) {
		b += (double)s->hidden * (all ? lo : hi);
		if (!s->tied || !first)
			b += table * emb; /* an untied LM head, or a tied one's copy on the last stage */
	}
	return b;
}

int model_storage(const model_shape_t *s, const char *dtype, const char *rule,
		  const model_dtype_t **d, const char **r, char *err, size_t errlen)
{
	const char *dt = dtype ? dtype : s->native_dtype;
	if (!dt || !*dt) {
		if (s->quant_method[0])
			return ERR("%s: quantization_config.quant_method '%s' is not a storage type the "
				   "planner knows; say it with --dtype", s->name, s->quant_method);
		return ERR("%s: config.json gives no torch_dtype or quantization_config; say the "
			   "storage type with --dtype", s->name);
	}
	if (!(*d = model_dtype_find(dt)))
		return ERR("unknown storage type '%s' (bf16, f16, fp8, nvfp4, mxfp4, int4, q8_0, "
			   "q4_k_m...)", dt);
	*r = rule ? rule
		  : ((!dtype || strcasecmp(dtype, s->native_dtype) == 0) && s->native_rule[0]
			 ? s->native_rule
			 : (*d)->rule);
	if (!model_rule_valid(*r))
		return ERR("unknown precision rule '%s' (all, linear or experts)", *r);
	if (strcmp(*r, "experts") == 0 && s->shape_known && !s->experts)
		*r = "linear"; /* a dense model has no experts to keep apart */
	return 0;
}

static void fill_names(model_fit_t *f, const char *dtype, const char *rule, const char *kv)
{
	snprintf(f->dtype, sizeof f->dtype, "%s", dtype);
	snprintf(f->rule, sizeof f->rule, "%s", rule);
	snprintf(f->kv_dtype, sizeof f->kv_dtype, "%s", kv);
}

const char *model_bound_name(enum model_bound b)
{
	return b == MODEL_BOUND_MODEL ? "model" : b == MODEL_BOUND_NONE ? "none" : "memory";
}

/* Largest context L with batch x (full x L + win x min(L, W)) <= budget,
 * at most cap (the model's limit, 0 none). *bound: which limit it is. */
static int64_t max_context(double budget, int64_t batch, double full, double win, int64_t W,
			   int64_t cap, enum model_bound *bound)
{
	*bound = MODEL_BOUND_MEMORY;
	if (budget <= 0)
		return 0;
	double per = budget / (double)batch;
	double L;
	if (W > 0 && (full + win) * (double)W >= per) {
		L = per / (full + win);
	} else if (full > 0) {
		L = (per - win * (double)W) / full;
	} else {
		L = INFINITY;
	}
	if (cap > 0 && L >= (double)cap) {
		*bound = MODEL_BOUND_MODEL;
		return cap;
	}
	if (!isfinite(L)) {
		*bound = MODEL_BOUND_NONE;
		return INT64_C(1) << 40;
	}
	return (int64_t)floor(L);
}

int model_fit(const model_shape_t *s, const model_fit_opts_t *o, model_fit_t *f, char *err,
	      size_t errlen)
{
	memset(f, 0, sizeof *f);
	const model_dtype_t *d;
	const char *rule;
	int rc = model_storage(s, o->dtype, o->rule, &d, &rule, err, errlen);
	if (rc < 0)
		return rc;
	const char *kvn = o->kv_dtype ? o->kv_dtype : "bf16";
	double kvb;
	if (strcmp(kvn, "bf16") == 0 || strcmp(kvn, "f16") == 0)
		kvb = 2;
	else if (strcmp(kvn, "fp8") == 0)
		kvb = 1;
	else
		return ERR("unknown KV cache type '%s' (bf16 or fp8)", kvn);

	int tp = o->tp, pp = o->pp, nodes = o->nodes;
	if (!tp && !pp) {
		if (nodes < 1)
			nodes = 1;
		if (model_layout(s, nodes, &tp, &pp) < 0)
			return ERR("%s does not split over %d nodes: no TP x PP layout divides its "
				   "heads", s->name, nodes);
	} else {
		if (!tp)
			tp = 1;
		if (!pp)
			pp = 1;
		if (nodes && nodes != tp * pp)
			return ERR("TP %d x PP %d is %d nodes, not %d", tp, pp, tp * pp, nodes);
		char why[128];
		if (!model_tp_ok(s, tp, why, sizeof why))
			return ERR("%s: %s", s->name, why);
		if (s->shape_known && pp > s->layers)
			return ERR("PP %d is more than the %lld layers", pp, (long long)s->layers);
	}
	if (tp < 1 || pp < 1 || tp * pp > 64)
		return ERR("TP x PP must be 1..64 nodes");
	f->tp = tp;
	f->pp = pp;
	f->nodes = tp * pp;
	fill_names(f, d->name, rule, kvn);
	f->batch = o->batch > 0 ? o->batch : 1;
	f->usable_gib = o->usable_gib > 0 ? o->usable_gib : MODEL_USABLE_GIB;
	f->overhead_gib = o->overhead_gib >= 0 ? o->overhead_gib : MODEL_OVERHEAD_GIB;
	int64_t cap = s->max_pos;
	f->context = o->context > 0 ? o->context
				    : (cap > 0 && cap < MODEL_DEFAULT_CONTEXT ? cap : MODEL_DEFAULT_CONTEXT);
	if (cap > 0 && f->context > cap) {
		if (s->max_pos_default[0])
			return ERR("context %lld is more than %s's %lld (%s's default "
				   "max_position_embeddings: its config.json gives none)",
				   (long long)f->context, s->name, (long long)cap, s->max_pos_default);
		return ERR("context %lld is more than %s's %lld (max_position_embeddings)",
			   (long long)f->context, s->name, (long long)cap);
	}
	const double usable = f->usable_gib * GIB, over = f->overhead_gib * GIB;
	f->overhead_b = over;

	if (!s->shape_known) {
		/* an announced model: weights only, evenly over the nodes */
		f->weights_total_b = s->published_total * d->bytes;
		f->weights_b = f->weights_total_b / f->nodes;
		f->kv_known = false;
		f->left_b = usable - f->weights_b - over;
		f->fits = f->left_b >= 0;
		if (!f->fits)
			snprintf(f->why, sizeof f->why, "weights need %.1f GiB per node",
				 f->weights_b / GIB);
		return 0;
	}
	f->kv_known = true;
	f->window = s->window;
	f->kv_heads_per_rank = s->attn == MODEL_ATTN_GQA ? (s->kv_heads / tp ? s->kv_heads / tp : 1)
							 : 0;
	f->kv_replicated = s->attn == MODEL_ATTN_GQA ? tp > s->kv_heads : tp > 1;
	f->weights_total_b = model_rank_bytes(s, d, rule, 1, 0, s->layers, true, true, false);

	/* every stage; the fullest decides, the tightest decides the context */
	int64_t l0 = 0, best_ctx = -1;
	enum model_bound best_bound = MODEL_BOUND_MEMORY;
	double worst_used = -1;
	for (int k = 0; k < pp; k++) {
		int64_t n = s->layers / pp + (k < s->layers % pp ? 1 : 0);
		double w = model_rank_bytes(s, d, rule, tp, l0, l0 + n, k == 0, k == pp - 1, false);
		double full, win;
		model_kv_per_token(s, tp, n, kvb, &full, &win);
		int64_t ctx_w = s->window && f->context > s->window ? s->window : f->context;
		double kv = (double)f->batch * (full * (double)f->context + win * (double)ctx_w);
		double used = w + kv + over;
		enum model_bound bound;
		int64_t mc = max_context(usable - w - over, f->batch, full, win, s->window, cap, &bound);
		if (used > worst_used) {
			worst_used = used;
			f->weights_b = w;
			f->kv_b = kv;
			f->kv_full_per_token_b = full;
			f->kv_window_per_token_b = win;
			f->kv_per_token_b = full + win;
		}
		if (best_ctx < 0 || mc < best_ctx) {
			best_ctx = mc;
			best_bound = bound;
		}
		l0 += n;
	}
	f->left_b = usable - worst_used;
	f->fits = f->left_b >= 0;
	f->max_context = best_ctx < 0 ? 0 : best_ctx;
	f->max_context_bound = best_bound;
	f->max_context_capped = best_bound == MODEL_BOUND_MODEL;
	if (!f->fits) {
		if (f->weights_b + over > usable)
			snprintf(f->why, sizeof f->why, "weights alone need %.1f GiB of %.1f per node",
				 f->weights_b / GIB, f->usable_gib);
		else
			snprintf(f->why, sizeof f->why,
				 "KV for %lld x %lld tokens needs %.1f GiB, %.1f left after weights",
				 (long long)f->batch, (long long)f->context, f->kv_b / GIB,
				 (usable - f->weights_b - over) / GIB);
	}
	return 0;
}

int model_fewest_nodes(const model_shape_t *s, const model_fit_opts_t *o, int max_nodes,
		       model_fit_t *f)
{
	char err[MODEL_ERR_LEN];
	for (int n = 1; n <= max_nodes; n++) {
		model_fit_opts_t oo = *o;
		oo.tp = oo.pp = 0;
		oo.nodes = n;
		if (model_fit(s, &oo, f, err, sizeof err) == 0 && f->fits)
			return n;
	}
	return 0;
}

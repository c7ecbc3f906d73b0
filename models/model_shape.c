/* model_shape.c - a model's shape from a Hugging Face config.json (jansson)
 * or from the YAML catalog, whose entries carry config.json's own fields
 * (converted to a JSON object here, so both go through one reader).
 * A family is recognised by model_type; a field the family needs and the file
 * lacks is an error naming it, never a guess. Defaults are only those the
 * Hugging Face configuration class itself defines (head_dim = hidden / heads,
 * tie_word_embeddings false for these families), listed in docs/planner.md. */
#include "model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#define ERR(...) (snprintf(err, errlen, __VA_ARGS__), -EINVAL)
#define MAX_CONFIG_BYTES (4u << 20)

enum family { FAM_DENSE, FAM_QWEN_MOE, FAM_DEEPSEEK, FAM_GLM_MOE, FAM_GPT_OSS };

/* With the Hugging Face configuration class and its max_position_embeddings
 * default (what transformers and the engines take when config.json has no
 * such field); kimi_k2 has no class in transformers, so no default. */
static const struct {
	const char *type;
	enum family fam;
	const char *cls;
	int64_t max_pos;
} families[] = {
    {"llama", FAM_DENSE, "LlamaConfig", 2048},
    {"mistral", FAM_DENSE, "MistralConfig", 131072},
    {"qwen2", FAM_DENSE, "Qwen2Config", 32768},
    {"qwen3", FAM_DENSE, "Qwen3Config", 32768},
    {"qwen2_moe", FAM_QWEN_MOE, "Qwen2MoeConfig", 32768},
    {"qwen3_moe", FAM_QWEN_MOE, "Qwen3MoeConfig", 32768},
    {"deepseek_v2", FAM_DEEPSEEK, "DeepseekV2Config", 2048},
    {"deepseek_v3", FAM_DEEPSEEK, "DeepseekV3Config", 4096},
    {"kimi_k2", FAM_DEEPSEEK, NULL, 0},
    {"glm4_moe", FAM_GLM_MOE, "Glm4MoeConfig", 131072},
    {"gpt_oss", FAM_GPT_OSS, "GptOssConfig", 131072},
};

struct rd {
	json_t *cfg;
	const char *where; /* "config.json" or "catalog model 'x'" */
	char *err;
	size_t errlen;
};

/* An integer field: present, integral, in [lo, hi]. def -1 means required. */
static int get_int(struct rd *r, const char *key, int64_t lo, int64_t hi, int64_t def, int64_t *out)
{
	json_t *v = json_object_get(r->cfg, key);
	char *err = r->err;
	size_t errlen = r->errlen;
	if (!v || json_is_null(v)) {
		if (def == -1)
			return ERR("%s: missing field '%s'", r->where, key);
		*out = def;
		return 0;
	}
	double d;
	if (json_is_integer(v))
		d = (double)json_integer_value(v);
	else if (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v))
		d = json_real_value(v);
	else
		return ERR("%s: field '%s' must be an integer", r->where, key);
	if (!(d >= (double)lo && d <= (double)hi))
		return ERR("%s: field '%s' is %.0f, outside %lld..%lld", r->where, key, d, (long long)lo,
			   (long long)hi);
	*out = (int64_t)d;
	return 0;
}

static int get_bool(struct rd *r, const char *key, bool def, bool *out)
{
	json_t *v = json_object_get(r->cfg, key);
	char *err = r->err;
	size_t errlen = r->errlen;
	if (!v || json_is_null(v)) {
		*out = def;
		return 0;
	}
	if (!json_is_boolean(v))
		return ERR("%s: field '%s' must be true or false", r->where, key);
	*out = json_is_true(v);
	return 0;
}

static const char *get_str(json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

#define TRY(x)                                                                                     \
	do {                                                                                       \
		int rc_ = (x);                                                                     \
		if (rc_ < 0)                                                                       \
			return rc_;                                                                \
	} while (0)

#define BIG (INT64_C(1) << 24)

/* Storage type from quantization_config / torch_dtype. */
static void read_storage(json_t *cfg, model_shape_t *s)
{
	json_t *q = json_object_get(cfg, "quantization_config");
	s->native_dtype[0] = s->native_rule[0] = s->quant_method[0] = '\0';
	if (json_is_object(q)) {
		const char *m = get_str(q, "quant_method");
		const char *algo = get_str(q, "quant_algo");
		const char *fmt = get_str(q, "format");
		json_t *bits = json_object_get(q, "bits");
		snprintf(s->quant_method, sizeof s->quant_method, "%s", m ? m : "?");
		if (m && strcmp(m, "fp8") == 0) {
			snprintf(s->native_dtype, sizeof s->native_dtype, "fp8");
		} else if (m && strcmp(m, "mxfp4") == 0) {
			snprintf(s->native_dtype, sizeof s->native_dtype, "mxfp4");
			/* gpt-oss: modules_to_not_convert lists attention, router, embeddings, LM head */
			snprintf(s->native_rule, sizeof s->native_rule, "experts");
		} else if (m && strcmp(m, "modelopt") == 0 && algo) {
			if (strcasecmp(algo, "NVFP4") == 0)
				snprintf(s->native_dtype, sizeof s->native_dtype, "nvfp4");
			else if (strcasecmp(algo, "FP8") == 0)
				snprintf(s->native_dtype, sizeof s->native_dtype, "fp8");
		} else if (m && strcmp(m, "compressed-tensors") == 0 && fmt) {
			if (strstr(fmt, "nvfp4"))
				snprintf(s->native_dtype, sizeof s->native_dtype, "nvfp4");
			else if (strstr(fmt, "float-quantized"))
				snprintf(s->native_dtype, sizeof s->native_dtype, "fp8");
			else if (strstr(fmt, "pack-quantized"))
				snprintf(s->native_dtype, sizeof s->native_dtype, "int4");
		} else if (m && (strcmp(m, "awq") == 0 || strcmp(m, "gptq") == 0) &&
			   json_integer_value(bits) == 4) {
			snprintf(s->native_dtype, sizeof s->native_dtype, "int4");
		}
		if (s->native_dtype[0] && !s->native_rule[0])
			snprintf(s->native_rule, sizeof s->native_rule, "linear");
		if (s->native_dtype[0])
			s->quant_method[0] = '\0';
		return;
	}
	const char *t = get_str(cfg, "torch_dtype");
	if (!t)
		t = get_str(cfg, "dtype");
	if (!t)
		return;
	if (strcmp(t, "bfloat16") == 0 || strcmp(t, "bf16") == 0)
		snprintf(s->native_dtype, sizeof s->native_dtype, "bf16");
	else if (strcmp(t, "float16") == 0 || strcmp(t, "f16") == 0)
		snprintf(s->native_dtype, sizeof s->native_dtype, "f16");
	else if (strcmp(t, "float32") == 0 || strcmp(t, "f32") == 0)
		snprintf(s->native_dtype, sizeof s->native_dtype, "f32");
	else if (model_dtype_find(t))
		snprintf(s->native_dtype, sizeof s->native_dtype, "%s", t);
	if (s->native_dtype[0])
		snprintf(s->native_rule, sizeof s->native_rule, "all");
}

/* Sliding-window layers: layer_types when present, else the family's rule. */
static int read_sliding(struct rd *r, enum family fam, model_shape_t *s)
{
	char *err = r->err;
	size_t errlen = r->errlen;
	json_t *win = json_object_get(r->cfg, "sliding_window");
	json_t *lt = json_object_get(r->cfg, "layer_types");
	bool use = true;
	s->window = s->sliding_layers = 0;
	TRY(get_bool(r, "use_sliding_window", true, &use));
	if (!win || json_is_null(win) || !use)
		return 0;
	TRY(get_int(r, "sliding_window", 1, BIG * 64, 0, &s->window));
	if (json_is_array(lt)) {
		size_t i;
		json_t *x;
		if ((int64_t)json_array_size(lt) != s->layers)
			return ERR("%s: layer_types has %zu entries for %lld layers", r->where,
				   json_array_size(lt), (long long)s->layers);
		json_array_foreach(lt, i, x) {
			const char *t = json_string_value(x);
			if (!t)
				return ERR("%s: layer_types[%zu] is not a string", r->where, i);
			if (strcmp(t, "sliding_attention") == 0)
				s->sliding_layers++;
			else if (strcmp(t, "full_attention") != 0)
				return ERR("%s: layer_types[%zu] '%.40s' is neither sliding_attention nor "
					   "full_attention", r->where, i, t);
		}
	} else if (fam == FAM_GPT_OSS) {
		s->sliding_layers = (s->layers + 1) / 2; /* even layers (openai/gpt-oss model.py) */
	} else if (fam == FAM_QWEN_MOE || (strncmp(s->arch, "qwen", 4) == 0)) {
		/* Qwen: layers from max_window_layers on use the window */
		int64_t mwl;
		TRY(get_int(r, "max_window_layers", 0, s->layers, -1, &mwl));
		s->sliding_layers = s->layers - mwl;
	} else {
		s->sliding_layers = s->layers; /* Mistral: every layer */
	}
	if (s->sliding_layers == 0)
		s->window = 0;
	return 0;
}

int model_shape_from_json(json_t *cfg, const char *name, model_shape_t *s, char *err,
			  size_t errlen)
{
	struct rd r = {cfg, "config.json", err, errlen};
	char where[96];
	memset(s, 0, sizeof *s);
	if (name && *name) {
		snprintf(where, sizeof where, "model '%.60s'", name);
		r.where = where;
	}
	if (!json_is_object(cfg))
		return ERR("%s: not a JSON object", r.where);
	const char *mt = get_str(cfg, "model_type");
	if (!mt)
		return ERR("%s: missing field 'model_type' (which architecture this is)", r.where);
	int fam = -1;
	size_t fi = 0;
	for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
		if (strcmp(families[i].type, mt) == 0) {
			fam = (int)families[i].fam;
			fi = i;
		}
	if (fam < 0)
		return ERR("%s: model_type '%.40s' is not one the planner knows (llama, mistral, qwen2, "
			   "qwen3, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3, kimi_k2, glm4_moe, "
			   "gpt_oss)", r.where, mt);
	snprintf(s->arch, sizeof s->arch, "%s", mt);
	snprintf(s->name, sizeof s->name, "%s", name && *name ? name : mt);
	snprintf(s->display, sizeof s->display, "%s", s->name);
	snprintf(s->status, sizeof s->status, "released");
	s->shape_known = true;
	s->moe_every = 1;

	TRY(get_int(&r, "hidden_size", 1, BIG, -1, &s->hidden));
	TRY(get_int(&r, "num_hidden_layers", 1, 4096, -1, &s->layers));
	TRY(get_int(&r, "num_attention_heads", 1, 16384, -1, &s->heads));
	TRY(get_int(&r, "vocab_size", 1, BIG, -1, &s->vocab));
	TRY(get_int(&r, "max_position_embeddings", 1, BIG * 64, 0, &s->max_pos));
	if (!s->max_pos && families[fi].max_pos) { /* the class's default, as the engines take it */
		s->max_pos = families[fi].max_pos;
		snprintf(s->max_pos_default, sizeof s->max_pos_default, "%s", families[fi].cls);
	}
	TRY(get_bool(&r, "tie_word_embeddings", false, &s->tied));

	if (fam == FAM_DEEPSEEK) {
		s->attn = MODEL_ATTN_MLA;
		TRY(get_int(&r, "q_lora_rank", 1, BIG, 0, &s->q_lora_rank)); /* null: plain q */
		TRY(get_int(&r, "kv_lora_rank", 1, BIG, -1, &s->kv_lora_rank));
		TRY(get_int(&r, "qk_nope_head_dim", 1, BIG, -1, &s->qk_nope));
		TRY(get_int(&r, "qk_rope_head_dim", 1, BIG, -1, &s->qk_rope));
		TRY(get_int(&r, "v_head_dim", 1, BIG, -1, &s->v_head_dim));
		TRY(get_int(&r, "num_key_value_heads", 1, 16384, s->heads, &s->kv_heads));
		s->head_dim = s->qk_nope + s->qk_rope;
	} else {
		TRY(get_int(&r, "num_key_value_heads", 1, 16384, -1, &s->kv_heads));
		if (s->hidden % s->heads && !json_object_get(cfg, "head_dim"))
			return ERR("%s: missing field 'head_dim' (hidden_size does not divide by the "
				   "heads)", r.where);
		TRY(get_int(&r, "head_dim", 1, BIG, s->hidden / s->heads, &s->head_dim));
		if (s->heads % s->kv_heads)
			return ERR("%s: num_attention_heads %lld is not a multiple of "
				   "num_key_value_heads %lld", r.where, (long long)s->heads,
				   (long long)s->kv_heads);
		bool ab = false;
		TRY(get_bool(&r, "attention_bias", fam == FAM_GPT_OSS, &ab));
		s->qkv_bias = ab || strcmp(mt, "qwen2") == 0 || strcmp(mt, "qwen2_moe") == 0;
		s->o_bias = ab;
		s->qk_norm = strcmp(mt, "qwen3") == 0 || strcmp(mt, "qwen3_moe") == 0;
		if (fam == FAM_GLM_MOE)
			TRY(get_bool(&r, "use_qk_norm", false, &s->qk_norm));
	}

	switch (fam) {
	case FAM_DENSE:
		TRY(get_int(&r, "intermediate_size", 1, BIG, -1, &s->inter));
		break;
	case FAM_QWEN_MOE: {
		TRY(get_int(&r, "num_experts", 1, 65536, -1, &s->experts));
		TRY(get_int(&r, "num_experts_per_tok", 1, s->experts, -1, &s->experts_active));
		TRY(get_int(&r, "moe_intermediate_size", 1, BIG, -1, &s->moe_inter));
		TRY(get_int(&r, "decoder_sparse_step", 1, 4096, 1, &s->moe_every));
		TRY(get_int(&r, "intermediate_size", 1, BIG, 0, &s->inter));
		json_t *mo = json_object_get(cfg, "mlp_only_layers");
		if (json_array_size(mo) > 0)
			return ERR("%s: mlp_only_layers is not supported (every layer must be MoE, or "
				   "every decoder_sparse_step-th)", r.where);
		if (s->moe_every > 1 && !s->inter)
			return ERR("%s: missing field 'intermediate_size' (dense layers between MoE "
				   "layers)", r.where);
		if (strcmp(mt, "qwen2_moe") == 0) {
			TRY(get_int(&r, "shared_expert_intermediate_size", 1, BIG, -1, &s->shared_inter));
			s->shared_experts = 1;
			s->shared_gate = true;
		}
		break;
	}
	case FAM_DEEPSEEK:
	case FAM_GLM_MOE:
		TRY(get_int(&r, "n_routed_experts", 1, 65536, -1, &s->experts));
		TRY(get_int(&r, "num_experts_per_tok", 1, s->experts, -1, &s->experts_active));
		TRY(get_int(&r, "n_shared_experts", 0, 64, -1, &s->shared_experts));
		TRY(get_int(&r, "moe_intermediate_size", 1, BIG, -1, &s->moe_inter));
		TRY(get_int(&r, "first_k_dense_replace", 0, s->layers, -1, &s->first_dense));
		TRY(get_int(&r, "moe_layer_freq", 1, 4096, 1, &s->moe_every));
		TRY(get_int(&r, "intermediate_size", 1, BIG, s->first_dense ? -1 : 0, &s->inter));
		TRY(get_int(&r, "num_nextn_predict_layers", 0, 64, 0, &s->mtp_layers));
		{
			const char *tm = get_str(cfg, "topk_method");
			s->router_bias = (tm && strcmp(tm, "noaux_tc") == 0) || fam == FAM_GLM_MOE;
		}
		break;
	case FAM_GPT_OSS:
		TRY(get_int(&r, "num_local_experts", 1, 65536, -1, &s->experts));
		if (json_object_get(cfg, "experts_per_token"))
			TRY(get_int(&r, "experts_per_token", 1, s->experts, -1, &s->experts_active));
		else
			TRY(get_int(&r, "num_experts_per_tok", 1, s->experts, -1, &s->experts_active));
		TRY(get_int(&r, "intermediate_size", 1, BIG, -1, &s->moe_inter));
		s->expert_bias = s->router_bias = s->sinks = true;
		break;
	}
	if (s->experts && !s->shared_inter)
		s->shared_inter = s->moe_inter;
	TRY(read_sliding(&r, (enum family)fam, s));
	read_storage(cfg, s);
	return 0;
}

int model_shape_parse_config(const char *text, size_t len, const char *name, model_shape_t *s,
			     char *err, size_t errlen)
{
	json_error_t je;
	if (len > MAX_CONFIG_BYTES)
		return ERR("config.json: %zu bytes, more than a config.json holds (limit %u)", len,
			   MAX_CONFIG_BYTES);
	json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!j)
		return ERR("config.json: not valid JSON: %s (line %d)", je.text, je.line);
	int rc = model_shape_from_json(j, name, s, err, errlen);
	json_decref(j);
	return rc;
}

int model_shape_load(const char *path, model_shape_t *s, char *err, size_t errlen)
{
	char file[4096];
	size_t pl = strlen(path);
	if (pl >= 5 && strcmp(path + pl - 5, ".json") == 0)
		snprintf(file, sizeof file, "%s", path);
	else
		snprintf(file, sizeof file, "%s/config.json", path);
	FILE *f = fopen(file, "rb");
	if (!f)
		return snprintf(err, errlen, "%s: %s", file, strerror(errno)), -errno;
	char *buf = malloc(MAX_CONFIG_BYTES + 1);
	if (!buf) {
		fclose(f);
		return -ENOMEM;
	}
	size_t n = fread(buf, 1, MAX_CONFIG_BYTES + 1, f);
	int rderr = ferror(f);
	fclose(f);
	if (rderr) {
		free(buf);
		return ERR("%s: read error", file);
	}
	char e2[MODEL_ERR_LEN];
	int rc = model_shape_parse_config(buf, n, NULL, s, e2, sizeof e2);
	free(buf);
	if (rc < 0) {
		/* "config.json: x" -> "PATH: x" */
		const char *m = strncmp(e2, "config.json: ", 13) == 0 ? e2 + 13 : e2;
		return ERR("%s: %s", file, m);
	}
	snprintf(s->source, sizeof s->source, "%s", file);
	return 0;
}

/* ---- the YAML catalog ---------------------------------------------------- */

static const char *yscalar(yaml_node_t *n)
{
	return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* A YAML node as JSON: plain scalars become integers, reals, booleans or null
 * where they read as one; quoted scalars stay strings. */
static json_t *yaml_to_json(yaml_document_t *d, yaml_node_t *n, int depth, long *budget)
{
	/* aliases make a DAG: a budget of nodes keeps "billion laughs" bounded */
	if (!n || depth > 16 || --*budget < 0)
		return NULL;
	if (n->type == YAML_SCALAR_NODE) {
		const char *v = (const char *)n->data.scalar.value;
		if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
			char *end;
			if (!*v || strcmp(v, "null") == 0 || strcmp(v, "~") == 0)
				return json_null();
			if (strcmp(v, "true") == 0)
				return json_true();
			if (strcmp(v, "false") == 0)
				return json_false();
			errno = 0;
			long long ll = strtoll(v, &end, 10);
			if (!errno && end != v && !*end)
				return json_integer(ll);
			double x = strtod(v, &end);
			if (end != v && !*end && isfinite(x))
				return json_real(x);
		}
		return json_stringn(v, n->data.scalar.length);
	}
	if (n->type == YAML_SEQUENCE_NODE) {
		json_t *a = json_array();
		for (yaml_node_item_t *it = n->data.sequence.items.start;
		     it < n->data.sequence.items.top; it++) {
			json_t *x = yaml_to_json(d, yaml_document_get_node(d, *it), depth + 1, budget);
			if (!x) {
				json_decref(a);
				return NULL;
			}
			json_array_append_new(a, x);
		}
		return a;
	}
	if (n->type == YAML_MAPPING_NODE) {
		json_t *o = json_object();
		for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top;
		     p++) {
			const char *k = yscalar(yaml_document_get_node(d, p->key));
			json_t *x = k ? yaml_to_json(d, yaml_document_get_node(d, p->value), depth + 1, budget)
				      : NULL;
			if (!x || json_object_get(o, k)) {
				json_decref(x);
				json_decref(o);
				return NULL;
			}
			json_object_set_new(o, k, x);
		}
		return o;
	}
	return NULL;
}

static int num_field(json_t *o, const char *k, double lo, double hi, double *out)
{
	json_t *v = json_object_get(o, k);
	if (!v)
		return 1;
	if (!json_is_number(v))
		return -1;
	double x = json_number_value(v);
	if (!(x >= lo && x <= hi))
		return -1;
	*out = x;
	return 0;
}

static int catalog_entry(json_t *e, const char *key, model_shape_t *s, char *err, size_t errlen)
{
	static const char *const known[] = {"display",         "source", "status", "config",
					    "published_total", "published_active"};
	const char *k;
	json_t *v;
	if (!json_is_object(e))
		return ERR("catalog: model '%.60s' is not a mapping", key);
	json_object_foreach(e, k, v) {
		bool ok = false;
		for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
			ok = ok || strcmp(k, known[i]) == 0;
		if (!ok)
			return ERR("catalog: model '%.60s' has unknown field '%.40s'", key, k);
	}
	const char *status = get_str(e, "status");
	if (!status || (strcmp(status, "released") && strcmp(status, "announced")))
		return ERR("catalog: model '%.60s': status must be released or announced", key);
	const char *src = get_str(e, "source");
	if (!src || !*src)
		return ERR("catalog: model '%.60s' has no source", key);
	json_t *cfg = json_object_get(e, "config");
	if (cfg) {
		int rc = model_shape_from_json(cfg, key, s, err, errlen);
		if (rc < 0)
			return rc;
	} else {
		memset(s, 0, sizeof *s);
		if (strcmp(status, "announced") != 0)
			return ERR("catalog: model '%.60s' has no config (only an announced model may "
				   "have just its parameter count)", key);
		snprintf(s->name, sizeof s->name, "%s", key);
		s->shape_known = false;
		snprintf(s->native_dtype, sizeof s->native_dtype, "bf16");
		snprintf(s->native_rule, sizeof s->native_rule, "all");
	}
	snprintf(s->status, sizeof s->status, "%s", status);
	snprintf(s->source, sizeof s->source, "%s", src);
	const char *disp = get_str(e, "display");
	snprintf(s->display, sizeof s->display, "%s", disp ? disp : key);
	if (num_field(e, "published_total", 1e6, 1e14, &s->published_total) < 0 ||
	    num_field(e, "published_active", 1e6, 1e14, &s->published_active) < 0)
		return ERR("catalog: model '%.60s': published_total/active must be parameter counts",
			   key);
	if (!s->shape_known && !s->published_total)
		return ERR("catalog: model '%.60s' has neither a config nor published_total", key);
	return 0;
}

static int catalog_report(json_t *e, size_t i, const model_catalog_t *c, model_report_t *r,
			  char *err, size_t errlen)
{
	const char *m = get_str(e, "model"), *dt = get_str(e, "dtype"), *src = get_str(e, "source");
	double nodes = 0, tok = 0;
	if (!json_is_object(e) || !m || !dt || !src)
		return ERR("catalog: decode_reports[%zu] needs model, dtype, nodes, tok_s and source", i);
	if (!model_catalog_find(c, m))
		return ERR("catalog: decode_reports[%zu]: no model '%.60s' in the catalog", i, m);
	if (!model_dtype_find(dt))
		return ERR("catalog: decode_reports[%zu]: unknown dtype '%.20s'", i, dt);
	if (num_field(e, "nodes", 1, MODEL_MAX_NODES, &nodes) != 0 ||
	    num_field(e, "tok_s", 0.001, 1e9, &tok) != 0)
		return ERR("catalog: decode_reports[%zu]: nodes (1..8) and tok_s must be numbers", i);
	memset(r, 0, sizeof *r);
	snprintf(r->model, sizeof r->model, "%s", m);
	snprintf(r->dtype, sizeof r->dtype, "%s", dt);
	snprintf(r->source, sizeof r->source, "%s", src);
	r->nodes = (int)nodes;
	r->tok_s = tok;
	return 0;
}

int model_catalog_parse(const char *yaml, size_t len, model_catalog_t *c, char *err,
			size_t errlen)
{
	yaml_parser_t p;
	yaml_document_t doc;
	int rc = 0;
	memset(c, 0, sizeof *c);
	if (!yaml) {
		yaml = model_builtin_catalog;
		len = strlen(model_builtin_catalog);
	}
	if (len > MAX_CONFIG_BYTES)
		return ERR("catalog: %zu bytes, over the %u limit", len, MAX_CONFIG_BYTES);
	if (!yaml_parser_initialize(&p))
		return -ENOMEM;
	yaml_parser_set_input_string(&p, (const unsigned char *)yaml, len);
	if (!yaml_parser_load(&p, &doc)) {
		rc = ERR("catalog: %s at line %zu", p.problem ? p.problem : "bad YAML",
			 p.problem_mark.line + 1);
		yaml_parser_delete(&p);
		return rc;
	}
	yaml_parser_delete(&p);
	long budget = 200000;
	json_t *root = yaml_to_json(&doc, yaml_document_get_root_node(&doc), 0, &budget);
	yaml_document_delete(&doc);
	if (!json_is_object(root)) {
		json_decref(root);
		return ERR("catalog: the top must be a mapping with 'models' (and no duplicate keys)");
	}
	json_t *models = json_object_get(root, "models");
	json_t *reports = json_object_get(root, "decode_reports");
	const char *k;
	json_t *v;
	json_object_foreach(root, k, v) {
		if (strcmp(k, "models") && strcmp(k, "decode_reports")) {
			rc = ERR("catalog: unknown top-level key '%.40s'", k);
			goto out;
		}
	}
	if (!json_is_object(models) || json_object_size(models) == 0) {
		rc = ERR("catalog: no 'models' mapping");
		goto out;
	}
	if (reports && !json_is_array(reports)) {
		rc = ERR("catalog: decode_reports must be a list");
		goto out;
	}
	c->shapes = calloc(json_object_size(models), sizeof *c->shapes);
	c->reports = calloc(json_array_size(reports) + 1, sizeof *c->reports);
	if (!c->shapes || !c->reports) {
		rc = -ENOMEM;
		goto out;
	}
	json_object_foreach(models, k, v) {
		if ((rc = catalog_entry(v, k, &c->shapes[c->n], err, errlen)) < 0)
			goto out;
		c->n++;
	}
	size_t i;
	json_array_foreach(reports, i, v) {
		if ((rc = catalog_report(v, i, c, &c->reports[c->n_reports], err, errlen)) < 0)
			goto out;
		c->n_reports++;
	}
out:
	json_decref(root);
	if (rc < 0)
		model_catalog_free(c);
	return rc;
}

void model_catalog_free(model_catalog_t *c)
{
	free(c->shapes);
	free(c->reports);
	memset(c, 0, sizeof *c);
}

const model_shape_t *model_catalog_find(const model_catalog_t *c, const char *name)
{
	for (size_t i = 0; i < c->n; i++)
		if (strcasecmp(c->shapes[i].name, name) == 0 ||
		    strcasecmp(c->shapes[i].display, name) == 0)
			return &c->shapes[i];
	return NULL;
}

/* models/: parameter counts against published totals (catalog and the
 * config.json fixtures of every family), each formula against cases worked
 * by hand, fit and context limits, the decode model's pieces, and the errors
 * a person sees for bad files. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model.h"

#ifndef MODEL_FIXTURES
#define MODEL_FIXTURES "tests/fixtures/models"
#endif

static model_catalog_t cat;

static void load_cat(void)
{
	char err[MODEL_ERR_LEN];
	cr_assert_eq(model_catalog_parse(NULL, 0, &cat, err, sizeof err), 0, "%s", err);
}

static void free_cat(void)
{
	model_catalog_free(&cat);
}

static model_shape_t fixture(const char *name)
{
	model_shape_t s;
	char path[512], err[MODEL_ERR_LEN];
	snprintf(path, sizeof path, "%s/%s.json", MODEL_FIXTURES, name);
	cr_assert_eq(model_shape_load(path, &s, err, sizeof err), 0, "%s: %s", name, err);
	return s;
}

static double rel(double got, double want)
{
	return fabs(got - want) / want;
}

/* ---- published totals ------------------------------------------------------ */

TestSuite(published, .init = load_cat, .fini = free_cat);

Test(published, every_catalog_model_within_tolerance)
{
	int checked = 0;
	for (size_t i = 0; i < cat.n; i++) {
		const model_shape_t *s = &cat.shapes[i];
		if (!s->shape_known || !s->published_total)
			continue;
		model_params_t p;
		cr_assert_eq(model_params(s, &p), 0);
		double tol = s->experts ? 0.03 : 0.02;
		cr_expect(rel(p.total, s->published_total) <= tol,
			  "%s: %.2fB computed, %.2fB published (over %.0f%%)", s->name, p.total / 1e9,
			  s->published_total / 1e9, tol * 100);
		if (s->experts && s->published_active)
			cr_expect(rel(p.active, s->published_active) <= 0.06,
				  "%s: %.2fB active computed, %.2fB published", s->name,
				  p.active / 1e9, s->published_active / 1e9);
		checked++;
	}
	cr_assert_geq(checked, 13, "only %d catalog models have published totals", checked);
}

struct pub {
	const char *fixture;
	double total, active; /* billions; active 0 = dense */
};

Test(published, fixtures_of_every_family)
{
	/* the figures the issue names, read through config.json */
	static const struct pub cases[] = {
	    {"llama-3.1-8b", 8.03, 0},       {"llama-3.1-405b", 405.9, 0},
	    {"qwen3-32b", 32.8, 0},          {"mistral-7b-v0.1", 7.24, 0},
	    {"qwen3-235b-a22b", 235, 22},    {"deepseek-v3", 671, 37},
	    {"kimi-k2", 1000, 32},           {"glm-4.5", 355, 32},
	    {"gpt-oss-120b", 116.8, 5.1},    {"qwen1.5-moe-a2.7b", 14.3, 0},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		model_shape_t s = fixture(cases[i].fixture);
		model_params_t p;
		model_params(&s, &p);
		double tol = s.experts ? 0.03 : 0.02;
		cr_expect(rel(p.total / 1e9, cases[i].total) <= tol, "%s: %.2fB vs %.2fB",
			  cases[i].fixture, p.total / 1e9, cases[i].total);
		if (cases[i].active)
			cr_expect(rel(p.active / 1e9, cases[i].active) <= 0.06, "%s active: %.2fB vs %.2fB",
				  cases[i].fixture, p.active / 1e9, cases[i].active);
	}
}

Test(published, deepseek_excludes_the_mtp_layer)
{
	model_shape_t s = fixture("deepseek-v3");
	cr_assert_eq(s.mtp_layers, 1);
	cr_assert_eq(s.layers, 61);
	model_params_t p;
	model_params(&s, &p);
	cr_assert_eq(p.dense_layers, 3);
	cr_assert_eq(p.moe_layers, 58);
	cr_assert(p.total < 680e9, "the 14B MTP module must not be counted: %.1fB", p.total / 1e9);
}

/* ---- hand-computed parameter counts ---------------------------------------- */

static model_shape_t tiny(void)
{
	model_shape_t s;
	memset(&s, 0, sizeof s);
	snprintf(s.name, sizeof s.name, "tiny");
	snprintf(s.arch, sizeof s.arch, "llama");
	snprintf(s.native_dtype, sizeof s.native_dtype, "bf16");
	snprintf(s.native_rule, sizeof s.native_rule, "all");
	s.shape_known = true;
	s.hidden = 64;
	s.layers = 2;
	s.heads = 4;
	s.kv_heads = 2;
	s.head_dim = 16;
	s.inter = 128;
	s.vocab = 100;
	s.moe_every = 1;
	return s;
}

Test(params, dense_by_hand)
{
	model_shape_t s = tiny();
	model_params_t p;
	model_params(&s, &p);
	/* embed 100*64 = 6400, LM head 6400; per layer q 64*64 + k,v 2*64*32 + o 64*64
	 * = 12288, MLP 3*64*128 = 24576, norms 128 -> 36992 x 2; final norm 64 */
	cr_assert_float_eq(p.attn, 2 * 12288.0, 1e-9);
	cr_assert_float_eq(p.dense_mlp, 2 * 24576.0, 1e-9);
	cr_assert_float_eq(p.total, 6400 + 6400 + 2 * 36992.0 + 64, 1e-9);
	cr_assert_float_eq(p.active, p.total - 6400, 1e-9); /* the table is looked up, not read */
	s.tied = true;
	model_params(&s, &p);
	cr_assert_float_eq(p.total, 6400 + 2 * 36992.0 + 64, 1e-9);
	cr_assert_float_eq(p.active, p.total, 1e-9); /* a tied LM head reads the table */
}

Test(params, moe_and_mla_by_hand)
{
	model_shape_t s = tiny();
	snprintf(s.arch, sizeof s.arch, "deepseek_v3");
	s.attn = MODEL_ATTN_MLA;
	s.q_lora_rank = 8;
	s.kv_lora_rank = 4;
	s.qk_nope = 6;
	s.qk_rope = 2;
	s.v_head_dim = 5;
	s.experts = 10;
	s.experts_active = 2;
	s.shared_experts = 1;
	s.moe_inter = 16;
	s.shared_inter = 16;
	s.first_dense = 1;
	model_params_t p;
	model_params(&s, &p);
	/* MLA per layer: q_a 64*8=512, q_b 8*4*(6+2)=256, kv_a 64*(4+2)=384,
	 * kv_b 4*4*(6+5)=176, o 4*5*64=1280 -> 2608; norms 2*64 + 4 + 8 = 140 */
	cr_assert_float_eq(p.attn, 2 * 2608.0, 1e-9);
	cr_assert_float_eq(p.attn_repl, 2 * (384.0 + 512.0), 1e-9);
	/* layer 0 dense 3*64*128 = 24576; layer 1 MoE: experts 10*3*64*16 = 30720,
	 * shared 3072, router 64*10 = 640 */
	cr_assert_eq(p.dense_layers, 1);
	cr_assert_eq(p.moe_layers, 1);
	cr_assert_float_eq(p.experts, 30720.0, 1e-9);
	cr_assert_float_eq(p.shared, 3072.0, 1e-9);
	cr_assert_float_eq(p.router, 640.0, 1e-9);
	double total = 6400 * 2 + 2 * 2608.0 + 2 * 140.0 + 24576 + 30720 + 3072 + 640 + 64;
	cr_assert_float_eq(p.total, total, 1e-9);
	/* active: 2 of 10 experts (2*3072), not the embedding table */
	cr_assert_float_eq(p.active, total - 6400 - 8 * 3072.0, 1e-9);
}

/* ---- KV cache ---------------------------------------------------------------- */

Test(kv, gqa_replicates_heads_past_tp)
{
	const model_shape_t *s = NULL;
	load_cat();
	s = model_catalog_find(&cat, "llama-3.3-70b");
	cr_assert(s);
	double full, win;
	model_kv_per_token(s, 1, s->layers, 2, &full, &win);
	cr_assert_float_eq(full, 2.0 * 80 * 8 * 128 * 2, 1e-9); /* 327,680 B */
	cr_assert_float_eq(win, 0, 1e-9);
	model_kv_per_token(s, 8, s->layers, 2, &full, &win);
	cr_assert_float_eq(full, 2.0 * 80 * 1 * 128 * 2, 1e-9);
	/* TP 16 > 8 KV heads: still one head per rank, not half a head */
	model_kv_per_token(s, 16, s->layers, 2, &full, &win);
	cr_assert_float_eq(full, 2.0 * 80 * 1 * 128 * 2, 1e-9);
	model_kv_per_token(s, 8, s->layers, 1, &full, &win); /* fp8 KV */
	cr_assert_float_eq(full, 2.0 * 80 * 1 * 128 * 1, 1e-9);
	free_cat();
}

Test(kv, mla_is_whole_on_every_rank)
{
	model_shape_t s = fixture("deepseek-v3");
	double full, win;
	for (int tp = 1; tp <= 8; tp *= 2) {
		model_kv_per_token(&s, tp, s.layers, 2, &full, &win);
		cr_assert_float_eq(full, 61.0 * (512 + 64) * 2, 1e-9, "TP %d: %f", tp, full); /* 70,272 */
	}
}

Test(kv, sliding_layers_hold_the_window)
{
	model_shape_t s = fixture("gpt-oss-120b");
	cr_assert_eq(s.window, 128);
	cr_assert_eq(s.sliding_layers, 18);
	double full, win;
	model_kv_per_token(&s, 1, s.layers, 2, &full, &win);
	cr_assert_float_eq(full, 18.0 * 2 * 8 * 64 * 2, 1e-9);
	cr_assert_float_eq(win, 18.0 * 2 * 8 * 64 * 2, 1e-9);
	model_fit_opts_t o = {.nodes = 1, .context = 131072, .overhead_gib = 0};
	model_fit_t f;
	char err[MODEL_ERR_LEN];
	cr_assert_eq(model_fit(&s, &o, &f, err, sizeof err), 0, "%s", err);
	cr_assert_float_eq(f.kv_b, full * 131072 + win * 128, 1e-3);
	/* Mistral: every layer slides; Qwen3 with use_sliding_window false: none */
	model_shape_t m = fixture("mistral-7b-v0.1");
	cr_assert_eq(m.sliding_layers, 32);
	cr_assert_eq(m.window, 4096);
	model_shape_t q = fixture("qwen3-32b");
	cr_assert_eq(q.window, 0);
	model_shape_t q2 = fixture("qwen1.5-moe-a2.7b");
	cr_assert_eq(q2.window, 0);
	/* the catalog's gpt-oss has no layer_types: the family rule (even layers) */
	load_cat();
	const model_shape_t *g = model_catalog_find(&cat, "gpt-oss-20b");
	cr_assert(g);
	cr_assert_eq(g->sliding_layers, 12);
	cr_assert_eq(g->window, 128);
	free_cat();
}

/* ---- storage types and weights ------------------------------------------------ */

Test(weights, storage_types_and_rules)
{
	const model_dtype_t *d = model_dtype_find("nvfp4");
	cr_assert(d);
	cr_assert_float_eq(d->bytes, 0.5 + 1.0 / 16, 1e-12); /* fp8 scale per 16 */
	cr_assert_float_eq(model_dtype_find("mxfp4")->bytes, 0.5 + 1.0 / 32, 1e-12);
	cr_assert_float_eq(model_dtype_find("q4_k_m")->bytes, 4.5 / 8, 1e-12);
	cr_assert_float_eq(model_dtype_find("q8_0")->bytes, 8.5 / 8, 1e-12);
	cr_assert_null(model_dtype_find("fp5"));

	model_shape_t s = tiny();
	model_fit_t f;
	char err[MODEL_ERR_LEN];
	model_fit_opts_t o = {.nodes = 1, .dtype = "nvfp4", .context = 1, .overhead_gib = 0};
	cr_assert_eq(model_fit(&s, &o, &f, err, sizeof err), 0, "%s", err);
	cr_assert_str_eq(f.rule, "linear");
	/* linear: the 2 x 36864 block-matrix parameters at 0.5625 B, the rest
	 * (tables 12800, norms 2*128 + 64) at 2 B */
	cr_assert_float_eq(f.weights_b, 2 * 36864 * 0.5625 + (12800 + 256 + 64) * 2.0, 1e-6);
	o.rule = "all";
	cr_assert_eq(model_fit(&s, &o, &f, err, sizeof err), 0);
	cr_assert_float_eq(f.weights_b, (2 * 36864 + 12800 + 256 + 64) * 0.5625, 1e-6);
	o.rule = "bogus";
	cr_assert_lt(model_fit(&s, &o, &f, err, sizeof err), 0);
	cr_assert(strstr(err, "bogus"), "%s", err);
}

Test(weights, gpt_oss_keeps_only_experts_in_mxfp4)
{
	model_shape_t s = fixture("gpt-oss-120b");
	cr_assert_str_eq(s.native_dtype, "mxfp4");
	cr_assert_str_eq(s.native_rule, "experts");
	model_params_t p;
	model_params(&s, &p);
	model_fit_opts_t o = {.nodes = 1, .context = 1, .overhead_gib = 0};
	model_fit_t f;
	char err[MODEL_ERR_LEN];
	cr_assert_eq(model_fit(&s, &o, &f, err, sizeof err), 0, "%s", err);
	double want = p.experts * (0.5 + 1.0 / 32) + (p.total - p.experts) * 2;
	cr_assert(rel(f.weights_b, want) < 1e-9, "%f vs %f", f.weights_b, want);
	/* about 65 GB: the published MXFP4 checkpoint */
	cr_assert(f.weights_b > 60e9 && f.weights_b < 67e9, "%.1f GB", f.weights_b / 1e9);
}

Test(weights, quantization_configs)
{
	cr_assert_str_eq(fixture("llama-3.1-8b-nvfp4").native_dtype, "nvfp4");
	cr_assert_str_eq(fixture("deepseek-v3").native_dtype, "fp8");
	cr_assert_str_eq(fixture("deepseek-v3").native_rule, "linear");
	cr_assert_str_eq(fixture("llama-3.1-8b").native_dtype, "bf16");
	model_shape_t s;
	char err[MODEL_ERR_LEN];
	const char *odd = "{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":128,"
			  "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
			  "\"vocab_size\":100,\"quantization_config\":{\"quant_method\":\"hqq\"}}";
	cr_assert_eq(model_shape_parse_config(odd, strlen(odd), NULL, &s, err, sizeof err), 0, "%s", err);
	model_fit_opts_t o = {.nodes = 1};
	model_fit_t f;
	cr_assert_lt(model_fit(&s, &o, &f, err, sizeof err), 0);
	cr_assert(strstr(err, "hqq") && strstr(err, "--dtype"), "%s", err);
	o.dtype = "int4";
	cr_assert_eq(model_fit(&s, &o, &f, err, sizeof err), 0, "%s", err);
}

Test(weights, tp_splits_and_replicates)
{
	model_shape_t s = fixture("deepseek-v3");
	model_params_t p;
	model_params(&s, &p);
	model_fit_opts_t o = {.nodes = 8, .dtype = "bf16", .rule = "all", .context = 1, .overhead_gib = 0};
	model_fit_t f;
	char err[MODEL_ERR_LEN];
	cr_assert_eq(model_fit(&s, &o, &f, err, sizeof err), 0, "%s", err);
	cr_assert_eq(f.tp, 8);
	/* everything split 8 ways except MLA's q_a/kv_a, routers and norms */
	double repl = p.attn_repl + p.router + p.small;
	double want = ((p.total - repl) / 8 + repl) * 2;
	cr_assert(rel(f.weights_b, want) < 1e-9, "%f vs %f", f.weights_b, want);
}

/* ---- fit ----------------------------------------------------------------------- */

Test(fit, layout_and_errors)
{
	load_cat();
	const model_shape_t *s = model_catalog_find(&cat, "Llama-3.3-70B");
	cr_assert(s, "display names are found too");
	int tp, pp;
	cr_assert_eq(model_layout(s, 4, &tp, &pp), 0);
	cr_assert_eq(tp, 4);
	cr_assert_eq(pp, 1);
	cr_assert_eq(model_layout(s, 3, &tp, &pp), 0); /* 64 heads do not split 3 ways */
	cr_assert_eq(tp, 1);
	cr_assert_eq(pp, 3);
	cr_assert_eq(model_layout(s, 6, &tp, &pp), 0);
	cr_assert_eq(tp, 2);
	cr_assert_eq(pp, 3);
	model_fit_opts_t o = {.tp = 3};
	model_fit_t f;
	char err[MODEL_ERR_LEN];
	cr_assert_lt(model_fit(s, &o, &f, err, sizeof err), 0);
	cr_assert(strstr(err, "64 attention heads"), "%s", err);
	model_fit_opts_t o2 = {.nodes = 1, .context = 1 << 20};
	cr_assert_lt(model_fit(s, &o2, &f, err, sizeof err), 0);
	cr_assert(strstr(err, "max_position_embeddings"), "%s", err);
	model_fit_opts_t o3 = {.tp = 2, .pp = 2, .nodes = 3};
	cr_assert_lt(model_fit(s, &o3, &f, err, sizeof err), 0);
	free_cat();
}

Test(fit, max_context_is_the_edge)
{
	load_cat();
	const model_shape_t *s = model_catalog_find(&cat, "llama-3.1-70b");
	model_fit_opts_t o = {.nodes = 1, .dtype = "fp8", .batch = 4, .context = 1024,
			      .overhead_gib = -1};
	model_fit_t f, g;
	char err[MODEL_ERR_LEN];
	cr_assert_eq(model_fit(s, &o, &f, err, sizeof err), 0, "%s", err);
	cr_assert(f.fits);
	cr_assert_eq(f.overhead_gib, MODEL_OVERHEAD_GIB);
	cr_assert_eq(f.usable_gib, MODEL_USABLE_GIB);
	cr_assert(!f.max_context_capped);
	cr_assert_float_eq(f.weights_b + f.kv_b + f.overhead_b + f.left_b, 102 * GIB, 1);
	/* at max_context it fits, one token more it does not */
	o.context = f.max_context;
	cr_assert_eq(model_fit(s, &o, &g, err, sizeof err), 0);
	cr_assert(g.fits);
	o.context = f.max_context + 1;
	cr_assert_eq(model_fit(s, &o, &g, err, sizeof err), 0);
	cr_assert(!g.fits);
	cr_assert(strstr(g.why, "KV"), "%s", g.why);
	/* 4 sequences of max_context: 327,680 B per token each */
	cr_assert(fabs(4.0 * 327680 * (double)f.max_context - (102 * GIB - f.weights_b - f.overhead_b)) <
		  4.0 * 327680);
	free_cat();
}

/* A tiny model (spark-decode's tiny shape as a config.json): memory would hold
 * some 68 million tokens; the model's own limit bounds the answer, and says so. */
Test(fit, tiny_model_is_bounded_by_its_own_limit)
{
	model_shape_t s = fixture("tiny-llama");
	model_fit_opts_t o = {.nodes = 1, .overhead_gib = -1};
	model_fit_t f;
	char err[MODEL_ERR_LEN];
	cr_assert_eq(s.max_pos, 2048);
	cr_assert_str_empty(s.max_pos_default, "from the config: %s", s.max_pos_default);
	cr_assert_eq(model_fit(&s, &o, &f, err, sizeof err), 0, "%s", err);
	cr_assert(f.fits);
	cr_assert_eq(f.context, 2048, "the default context is the model's maximum when less");
	cr_assert_eq(f.max_context, 2048);
	cr_assert_eq(f.max_context_bound, MODEL_BOUND_MODEL);
	cr_assert(f.max_context_capped);
	cr_assert_str_eq(model_bound_name(f.max_context_bound), "model");

	/* memory bounds it when little is left: 1536 B of KV per token (3 layers x
	 * k and v x 8 heads x 16 x 2 B), 600 tokens' worth above the weights */
	o.overhead_gib = 0;
	o.usable_gib = (f.weights_b + 600.5 * 1536) / (1024.0 * 1024 * 1024);
	o.context = 512;
	cr_assert_eq(model_fit(&s, &o, &f, err, sizeof err), 0, "%s", err);
	cr_assert_eq(f.kv_per_token_b, 1536);
	cr_assert_eq(f.max_context, 600);
	cr_assert_eq(f.max_context_bound, MODEL_BOUND_MEMORY);
	cr_assert(!f.max_context_capped);
	cr_assert_str_eq(model_bound_name(f.max_context_bound), "memory");

	/* no max_position_embeddings: the configuration class's default
	 * (LlamaConfig: 2048), as transformers and the engines take it */
	static const char nomax[] =
	    "{\"model_type\":\"llama\",\"hidden_size\":128,\"intermediate_size\":256,"
	    "\"num_hidden_layers\":3,\"num_attention_heads\":16,\"num_key_value_heads\":8,"
	    "\"head_dim\":16,\"vocab_size\":1001,\"torch_dtype\":\"bfloat16\"}";
	model_shape_t t;
	cr_assert_eq(model_shape_parse_config(nomax, strlen(nomax), NULL, &t, err, sizeof err), 0,
		     "%s", err);
	cr_assert_eq(t.max_pos, 2048);
	cr_assert_str_eq(t.max_pos_default, "LlamaConfig");
	model_fit_opts_t d = {.nodes = 1, .overhead_gib = -1};
	cr_assert_eq(model_fit(&t, &d, &f, err, sizeof err), 0, "%s", err);
	cr_assert_eq(f.max_context, 2048, "not the %lld memory holds", (long long)f.max_context);
	cr_assert_eq(f.max_context_bound, MODEL_BOUND_MODEL);
	d.context = 4096;
	cr_assert_lt(model_fit(&t, &d, &f, err, sizeof err), 0);
	cr_assert(strstr(err, "LlamaConfig's default"), "%s", err);
	/* other families' defaults; kimi_k2 has no class in transformers */
	static const struct {
		const char *type;
		long long max_pos;
	} fam[] = {{"mistral", 131072}, {"qwen2", 32768}, {"qwen3", 32768}};
	for (size_t i = 0; i < sizeof fam / sizeof fam[0]; i++) {
		char js[400];
		snprintf(js, sizeof js, "{\"model_type\":\"%s\"%s", fam[i].type, strchr(nomax, ','));
		cr_assert_eq(model_shape_parse_config(js, strlen(js), NULL, &t, err, sizeof err), 0,
			     "%s: %s", fam[i].type, err);
		cr_expect_eq(t.max_pos, fam[i].max_pos, "%s", fam[i].type);
	}
}

Test(fit, fewest_nodes_and_usable)
{
	load_cat();
	const model_shape_t *s = model_catalog_find(&cat, "deepseek-v3");
	model_fit_opts_t o = {.context = 32768, .overhead_gib = -1};
	model_fit_t f;
	/* 671B at fp8 is ~626 GiB of weights: 7 nodes of 102 GiB */
	int n = model_fewest_nodes(s, &o, 8, &f);
	cr_assert_eq(n, 7, "%d", n);
	cr_assert(f.fits);
	o.usable_gib = 121;
	cr_assert_eq(model_fewest_nodes(s, &o, 8, &f), 6);
	o.dtype = "bf16";
	cr_assert_eq(model_fewest_nodes(s, &o, 8, &f), 0, "bf16 DeepSeek-V3 is 1.25 TiB");
	/* an announced model: weights only */
	const model_shape_t *g = model_catalog_find(&cat, "glm-5.3");
	cr_assert(g && !g->shape_known);
	model_fit_opts_t og = {.nodes = 8, .dtype = "fp8", .overhead_gib = -1};
	char err[MODEL_ERR_LEN];
	cr_assert_eq(model_fit(g, &og, &f, err, sizeof err), 0, "%s", err);
	cr_assert(!f.kv_known);
	cr_assert_float_eq(f.weights_b, 753e9 * model_dtype_find("fp8")->bytes / 8, 1);
	free_cat();
}

/* ---- decode model ----------------------------------------------------------------- */

Test(decode, alpha_beta_by_hand)
{
	model_calib_t c;
	model_calib_default(&c, 1);
	const double m = 16384, a = 1.5e-6, b = 1 / 24e9;
	cr_assert_float_eq(model_allreduce_s(&c, MODEL_ALGO_ONESHOT, 8, m), a + 7 * m * b, 1e-15);
	cr_assert_float_eq(model_allreduce_s(&c, MODEL_ALGO_RING, 8, m), 14 * a + 14.0 / 8 * m * b, 1e-15);
	cr_assert_float_eq(model_allreduce_s(&c, MODEL_ALGO_RELAY, 8, m), 4 * (a + m * b), 1e-15);
	cr_assert_float_eq(model_allreduce_s(&c, MODEL_ALGO_DOUBLING, 8, m), 3 * (a + m * b), 1e-15);
	cr_assert_float_eq(model_allreduce_s(&c, MODEL_ALGO_ONESHOT, 1, m), 0, 1e-15);
	/* a switch allows one-shot: cheapest at 16 KiB; a ring does not */
	enum model_algo sw = model_pick_algo(&c, MODEL_TOPO_SWITCH, MODEL_ALGO_AUTO, 8, m);
	cr_assert(sw == MODEL_ALGO_ONESHOT || sw == MODEL_ALGO_DOUBLING);
	cr_assert_eq(model_pick_algo(&c, MODEL_TOPO_RING, MODEL_ALGO_AUTO, 8, m), MODEL_ALGO_RELAY);
	cr_assert_eq(model_pick_algo(&c, MODEL_TOPO_RING, MODEL_ALGO_ONESHOT, 8, m), MODEL_ALGO_RELAY);
	cr_assert_eq(model_pick_algo(&c, MODEL_TOPO_SWITCH, MODEL_ALGO_RING, 8, m), MODEL_ALGO_RING);
	/* 16 MiB: ring's bandwidth term wins */
	cr_assert_eq(model_pick_algo(&c, MODEL_TOPO_SWITCH, MODEL_ALGO_AUTO, 8, 16 << 20), MODEL_ALGO_RING);
}

Test(decode, token_time_by_hand)
{
	model_shape_t s = tiny();
	model_calib_t c;
	model_calib_default(&c, 0.5);
	model_decode_opts_t o = {.nodes = 2, .topo = MODEL_TOPO_SWITCH, .algo = MODEL_ALGO_ONESHOT};
	model_decode_row_t rows[2];
	char err[MODEL_ERR_LEN];
	cr_assert_eq(model_decode(&s, &o, &c, rows, err, sizeof err), 0, "%s", err);
	/* TP 1 reads 2 x 36864 block params + the LM head 6400 + norms 2*128+64, at 2 B */
	double b1 = (2 * 36864 + 6400 + 256 + 64) * 2.0;
	cr_assert_float_eq(rows[0].bytes_per_rank, b1, 1e-9);
	cr_assert_float_eq(rows[0].compute_s, b1 / (273e9 * 0.5), 1e-18);
	cr_assert_float_eq(rows[0].token_s, rows[0].compute_s + 0.3e-3, 1e-15);
	/* TP 2: q/o/MLP/LM head halve, k/v halve (2 KV heads), norms stay */
	double b2 = (2 * 36864 / 2.0 + 6400 / 2.0 + 256 + 64) * 2.0;
	cr_assert_float_eq(rows[1].bytes_per_rank, b2, 1e-9);
	cr_assert_eq(rows[1].allreduces, 4);
	cr_assert_float_eq(rows[1].allreduce_bytes, 128, 1e-12);
	double ar = 1.5e-6 + 128 / 24e9;
	double gather = 1.5e-6 + 50 * 2 / 24e9; /* vocab/2 logits of 2 B */
	cr_assert_float_eq(rows[1].comm_s, 4 * ar + gather, 1e-15);
	cr_assert_float_eq(rows[1].speedup, rows[1].tok_s / rows[0].tok_s, 1e-12);
}

Test(decode, calibration_file)
{
	model_calib_t c;
	char err[MODEL_ERR_LEN];
	model_calib_default(&c, 1);
	const char *txt = "{\"source\":\"sim\",\"mem_gbs\":5,\"host_cores\":2,\"mem_gbs_all_cores\":4,"
			  "\"per_token_ms\":0.1,\"per_layer_us\":10,\"comm_bytes\":2,\"gather_bytes\":8,"
			  "\"alpha_us\":20,\"link_gbs\":2,"
			  "\"links\":[{\"world_size\":4,\"algo\":\"oneshot\",\"alpha_us\":40,\"link_gbs\":1}]}";
	cr_assert_eq(model_calib_parse(txt, strlen(txt), &c, err, sizeof err), 0, "%s", err);
	cr_assert_float_eq(model_allreduce_s(&c, MODEL_ALGO_ONESHOT, 4, 1000), 40e-6 + 3 * 1000 / 1e9, 1e-15);
	cr_assert_float_eq(model_allreduce_s(&c, MODEL_ALGO_ONESHOT, 2, 1000), 20e-6 + 1000 / 2e9, 1e-15);
	/* 4 ranks on 2 cores: two stream at once at 4 GB/s each, twice over; every
	 * rank runs both layers' fixed 10 us */
	model_shape_t s = tiny();
	model_decode_opts_t o = {.nodes = 4, .algo = MODEL_ALGO_ONESHOT};
	model_decode_row_t rows[4];
	cr_assert_eq(model_decode(&s, &o, &c, rows, err, sizeof err), 0, "%s", err);
	cr_assert_float_eq(rows[3].compute_s, (rows[3].bytes_per_rank / 4e9 + 20e-6) * 2, 1e-15);
	cr_assert_float_eq(rows[0].compute_s, rows[0].bytes_per_rank / 5e9 + 20e-6, 1e-15);
	cr_assert_float_eq(rows[0].fixed_s, 0.1e-3, 1e-15);
	static const char *const bad[] = {
	    "{\"mem_gbs\":-1}", "{\"nope\":1}", "{\"links\":[{\"algo\":\"x\"}]}", "[1]", "{", "",
	    "{\"links\":[{\"world_size\":2,\"algo\":\"ring\"}]}",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		cr_expect_lt(model_calib_parse(bad[i], strlen(bad[i]), &c, err, sizeof err), 0, "%s", bad[i]);
}

Test(decode, efficiency_from_published_reports)
{
	const char *yaml = "models:\n"
			   "  m:\n    source: test\n    status: released\n"
			   "    config: {model_type: llama, hidden_size: 64, intermediate_size: 128,\n"
			   "             num_hidden_layers: 2, num_attention_heads: 4,\n"
			   "             num_key_value_heads: 2, vocab_size: 100, torch_dtype: bfloat16}\n"
			   "decode_reports:\n"
			   "  - {model: m, dtype: bf16, nodes: 1, tok_s: 1000000, source: a}\n"
			   "  - {model: m, dtype: bf16, nodes: 2, tok_s: 5, source: b}\n"
			   "  - {model: m, dtype: bf16, nodes: 1, tok_s: 999999999, source: over}\n";
	model_catalog_t c;
	char err[MODEL_ERR_LEN];
	cr_assert_eq(model_catalog_parse(yaml, strlen(yaml), &c, err, sizeof err), 0, "%s", err);
	cr_assert_eq(c.n_reports, 3);
	double eff;
	int used, skipped;
	cr_assert_eq(model_calibrate_efficiency(&c, 0, &eff, &used, &skipped), 0);
	cr_assert_eq(used, 1);
	cr_assert_eq(skipped, 1);
	double bytes = (2 * 36864 + 6400 + 256 + 64) * 2.0;
	cr_assert_float_eq(eff, bytes * 1e6 / 273e9, 1e-12);
	model_catalog_free(&c);
}

Test(decode, published_calibration_is_plausible)
{
	load_cat();
	double eff;
	int used, skipped;
	cr_assert_eq(model_calibrate_efficiency(&cat, MODEL_PER_TOKEN_MS * 1e-3, &eff, &used, &skipped), 0);
	/* SPARK-FACTS.md: a measured 8B NVFP4 run reaches ~60-65% of the bound */
	cr_assert(eff > 0.55 && eff < 0.8, "%.2f", eff);
	cr_assert_geq(used, 3);
	free_cat();
}

/* ---- errors a person reads ----------------------------------------------------------- */

Test(errors, config_json)
{
	model_shape_t s;
	char err[MODEL_ERR_LEN], path[512];
	static const struct {
		const char *file, *want;
	} cases[] = {
	    {"bad-unknown-arch", "model_type 'gemma3'"},
	    {"bad-missing-kv-heads", "missing field 'num_key_value_heads'"},
	    {"bad-missing-moe", "missing field 'n_shared_experts'"},
	    {"bad-truncated", "not valid JSON"},
	    {"does-not-exist", "No such file"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		snprintf(path, sizeof path, "%s/%s.json", MODEL_FIXTURES, cases[i].file);
		cr_expect_lt(model_shape_load(path, &s, err, sizeof err), 0, "%s", cases[i].file);
		cr_expect(strstr(err, cases[i].want), "%s: '%s'", cases[i].file, err);
		cr_expect(strstr(err, cases[i].file), "the line names the file: %s", err);
	}
	static const struct {
		const char *json, *want;
	} inl[] = {
	    {"{\"model_type\":\"llama\",\"hidden_size\":\"4096\"}", "'hidden_size' must be an integer"},
	    {"{\"model_type\":\"llama\",\"hidden_size\":-3}", "'hidden_size' is -3"},
	    {"[]", "not a JSON object"},
	    {"{}", "missing field 'model_type'"},
	    {"{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":128,"
	     "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":3,"
	     "\"vocab_size\":10}", "not a multiple"},
	    {"{\"model_type\":\"gpt_oss\",\"hidden_size\":64,\"intermediate_size\":128,"
	     "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
	     "\"vocab_size\":10,\"num_local_experts\":4,\"experts_per_token\":2,"
	     "\"sliding_window\":8,\"layer_types\":[\"full_attention\"]}", "layer_types has 1"},
	};
	for (size_t i = 0; i < sizeof inl / sizeof inl[0]; i++) {
		cr_expect_lt(model_shape_parse_config(inl[i].json, strlen(inl[i].json), NULL, &s, err,
						      sizeof err), 0, "%s", inl[i].json);
		cr_expect(strstr(err, inl[i].want), "'%s' for %s", err, inl[i].json);
	}
}

Test(errors, a_directory_holds_config_json)
{
	char dir[] = "/tmp/model-dir-XXXXXX", path[256], err[MODEL_ERR_LEN];
	cr_assert(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/config.json", dir);
	FILE *f = fopen(path, "w");
	fputs("{\"model_type\":\"qwen3\",\"hidden_size\":64,\"intermediate_size\":128,"
	      "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
	      "\"vocab_size\":10,\"torch_dtype\":\"bfloat16\"}", f);
	fclose(f);
	model_shape_t s;
	int rc = model_shape_load(dir, &s, err, sizeof err);
	unlink(path);
	rmdir(dir);
	cr_assert_eq(rc, 0, "%s", err);
	cr_assert(s.qk_norm, "qwen3 has q/k norms");
	cr_assert_eq(s.head_dim, 16);
}

Test(errors, catalog)
{
	model_catalog_t c;
	char err[MODEL_ERR_LEN];
	static const struct {
		const char *yaml, *want;
	} cases[] = {
	    {"models: {m: {source: s, status: released, colour: red}}", "unknown field 'colour'"},
	    {"models: {m: {source: s, status: maybe}}", "status must be"},
	    {"models: {m: {status: released}}", "no source"},
	    {"models: {m: {source: s, status: released}}", "no config"},
	    {"models: {m: {source: s, status: announced}}", "neither a config nor"},
	    {"models: {m: {source: s, status: released, config: {model_type: bert}}}", "'bert'"},
	    {"other: 1", "unknown top-level key"},
	    {"models: [1, 2]", "no 'models' mapping"},
	    {"models: {m: {source: s, status: announced, published_total: 5e9}}\n"
	     "decode_reports: [{model: q, dtype: bf16, nodes: 1, tok_s: 1, source: x}]", "no model 'q'"},
	    {"models: {a: 1, a: 2}", "duplicate"},
	    {"models: {m: [", "catalog:"},
	    {"a: &x [*x]", "catalog:"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		cr_expect_lt(model_catalog_parse(cases[i].yaml, strlen(cases[i].yaml), &c, err, sizeof err),
			     0, "%s", cases[i].yaml);
		cr_expect(strstr(err, cases[i].want), "'%s' for %s", err, cases[i].yaml);
	}
}

/* Text writers of the model planner (docs/planner.md): fit for one model,
 * fit --catalog's table, plan decode's predicted speed-up. They print from
 * the structs models/ filled (the views of print.h) and the JSON answer. */
#include "output.h"
#include "print.h"

#include <stdio.h>
#include <string.h>

static void human_params(double p, char *buf, size_t len)
{
	if (p >= 1e12)
		snprintf(buf, len, "%.2fT", p / 1e12);
	else if (p >= 1e9)
		snprintf(buf, len, "%.1fB", p / 1e9);
	else
		snprintf(buf, len, "%.0fM", p / 1e6);
}

static void human_tokens(int64_t t, char *buf, size_t len)
{
	if (t >= 1024 && t % 1024 == 0)
		snprintf(buf, len, "%lldK", (long long)(t / 1024));
	else
		snprintf(buf, len, "%lld", (long long)t);
}

static const char *rule_text(const char *rule)
{
	if (strcmp(rule, "all") == 0)
		return "every tensor at this type";
	if (strcmp(rule, "experts") == 0)
		return "only MoE experts at this type; attention, router, embeddings, LM head bf16";
	return "block matrices at this type; embeddings, LM head, norms, routers bf16";
}

/* One model: fit's data holds the vLLM words the fit implies. */
static void fit_table(const struct cli_fit_view *v, json_t *d)
{
	const model_shape_t *s = v->shape;
	const model_params_t *p = v->params;
	const model_fit_t *f = v->fit, *ff = v->fewest_fit;
	int fewest = v->fewest;
	char tot[32], act[32], ctx[32];
	human_params(p->total, tot, sizeof tot);
	human_params(p->active, act, sizeof act);
	if (!s->shape_known && !s->published_active)
		snprintf(act, sizeof act, "unpublished");
	printf("Model:    %s (%s%s, %s parameters, %s active per token)\n", s->display,
	       s->shape_known ? s->arch : "announced", s->shape_known ? "" : ", shape not public",
	       tot, act);
	printf("Source:   %s\n", s->source);
	printf("Storage:  %s, rule %s (%s); KV cache %s\n", f->dtype, f->rule, rule_text(f->rule),
	       f->kv_dtype);
	printf("Layout:   TP %d x PP %d on %d node%s\n", f->tp, f->pp, f->nodes, f->nodes > 1 ? "s" : "");
	if (f->kv_known) {
		printf("Context:  %lld tokens x batch %lld\n", (long long)f->context, (long long)f->batch);
		char kvnote[160];
		if (s->attn == MODEL_ATTN_MLA)
			snprintf(kvnote, sizeof kvnote, "MLA latent %lld+%lld per layer, whole on every rank",
				 (long long)s->kv_lora_rank, (long long)s->qk_rope);
		else
			snprintf(kvnote, sizeof kvnote, "%lld of %lld KV heads per rank%s",
				 (long long)f->kv_heads_per_rank, (long long)s->kv_heads,
				 f->kv_replicated ? ", copied: TP exceeds the KV heads" : "");
		printf("KV:       %.1f KiB per token per node (%s)", f->kv_per_token_b / 1024, kvnote);
		if (f->window)
			printf("; %lld sliding layers hold at most %lld tokens", (long long)s->sliding_layers,
			       (long long)f->window);
		printf("\n");
	} else {
		printf("KV:       not estimated: the shape is not public (weights and overhead only)\n");
	}
	printf("\n");
	static const char *const hdr[] = {"PER NODE", "GIB"};
	out_table *t = out_table_new(2, hdr);
	char b[6][32];
	const char *rows[][2] = {
	    {"weights", out_fmt(b[0], 32, "%.1f", (f->weights_b) / GIB)},
	    {"kv cache", out_fmt(b[1], 32, "%.1f", (f->kv_b) / GIB)},
	    {"overhead", out_fmt(b[2], 32, "%.1f", (f->overhead_b) / GIB)},
	    {"total", out_fmt(b[3], 32, "%.1f", (f->weights_b + f->kv_b + f->overhead_b) / GIB)},
	    {"usable", out_fmt(b[4], 32, "%.1f", f->usable_gib)},
	    {"left", out_fmt(b[5], 32, "%.1f", (f->left_b) / GIB)},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
		out_table_row(t, rows[i]);
	out_table_print(t, stdout);
	out_table_free(t);
	printf("\n");
	if (f->fits)
		printf("Verdict:  FITS on %d node%s", f->nodes, f->nodes > 1 ? "s" : "");
	else
		printf("Verdict:  DOES NOT FIT on %d node%s: %s", f->nodes, f->nodes > 1 ? "s" : "", f->why);
	if (f->kv_known && f->max_context_bound == MODEL_BOUND_NONE) {
		printf("; the context is not limited by memory (every layer holds only its "
		       "sliding window) and %s states no limit", s->display);
	} else if (f->kv_known && f->max_context > 0) {
		human_tokens(f->max_context, ctx, sizeof ctx);
		printf("; the largest context at batch %lld is %s", (long long)f->batch, ctx);
		if (f->max_context_bound == MODEL_BOUND_MODEL && s->max_pos_default[0])
			printf(", limited by the model: %lld (%s's default; config.json has no "
			       "max_position_embeddings)", (long long)s->max_pos, s->max_pos_default);
		else if (f->max_context_bound == MODEL_BOUND_MODEL)
			printf(", limited by the model: %lld (max_position_embeddings)",
			       (long long)s->max_pos);
		else if (s->max_pos)
			printf(", limited by memory (the model allows %lld)", (long long)s->max_pos);
		else
			printf(", limited by memory (the model states no limit)");
	}
	printf("\n");
	if (fewest)
		printf("Fewest:   %d node%s (TP %d x PP %d) at this type, context and batch\n", fewest,
		       fewest > 1 ? "s" : "", ff->tp, ff->pp);
	else
		printf("Fewest:   none of 1..%d nodes at this type, context and batch\n", MODEL_MAX_NODES);
	if (f->fits) {
		size_t i;
		json_t *w;
		printf("vLLM:     vllm serve MODEL");
		json_array_foreach(json_object_get(d, "vllm_args"), i, w)
			printf(" %s", json_string_value(w));
		printf("\n");
		if (f->kv_known)
			printf("          (or pin the KV budget: --kv-cache-memory-bytes %lld)\n",
			       cli_jnum(d, "kv_cache_memory_bytes"));
	}
}


/* --catalog: data's "models" follow the catalog's shapes; a cell is the
 * fewest nodes at that type with the largest context there. */
static void fit_catalog_table(const struct cli_fit_view *v, json_t *d)
{
	static const char *const dtypes[] = {"bf16", "fp8", "nvfp4", "native"};
	static const char *const hdr[] = {"MODEL", "PARAMS", "ACTIVE", "KV/TOKEN", "BF16", "FP8",
					  "NVFP4", "NATIVE"};
	out_table *t = out_table_new(8, hdr);
	size_t i;
	json_t *row;
	json_array_foreach(json_object_get(d, "models"), i, row) {
		if (i >= v->cat->n)
			break;
		const model_shape_t *s = &v->cat->shapes[i];
		char cells[4][48], tot[32], act[32], kvb[32] = "-";
		json_t *kv = json_object_get(row, "kv_bytes_per_token");
		if (json_is_number(kv))
			snprintf(kvb, sizeof kvb, "%.1f KiB", json_number_value(kv) / 1024);
		for (int k = 0; k < 4; k++) {
			json_t *best = json_object_get(json_object_get(row, "fewest_nodes"), dtypes[k]);
			snprintf(cells[k], sizeof cells[k], "-");
			if (!json_is_object(best))
				continue;
			int found = (int)cli_jnum(best, "nodes");
			json_t *mc = json_object_get(best, "max_context");
			char c[32];
			human_tokens(json_integer_value(mc), c, sizeof c);
			if (json_is_integer(mc))
				snprintf(cells[k], sizeof cells[k], "%d (%s%s)", found, c,
					 json_is_true(json_object_get(best, "max_context_capped")) ? " max" : "");
			else if (strcmp(cli_jstr(best, "max_context_bound") ?: "", "none") == 0)
				snprintf(cells[k], sizeof cells[k], "%d (no limit)", found);
			else
				snprintf(cells[k], sizeof cells[k], "%d (weights)", found);
			if (k == 3)
				snprintf(cells[k] + strlen(cells[k]), sizeof cells[k] - strlen(cells[k]),
					 " %s", cli_jstr(best, "dtype"));
		}
		human_params(json_number_value(json_object_get(row, "total")), tot, sizeof tot);
		human_params(json_number_value(json_object_get(row, "active")), act, sizeof act);
		if (!s->shape_known && !s->published_active)
			snprintf(act, sizeof act, "-");
		char name[112];
		snprintf(name, sizeof name, "%s%s", s->display,
			 strcmp(s->status, "announced") == 0 ? " (announced)" : "");
		const char *r[] = {name, tot, act, kvb, cells[0], cells[1], cells[2], cells[3]};
		out_table_row(t, r);
	}
	char ctxs[32];
	long long batch = cli_jnum(d, "batch");
	human_tokens(v->context ? v->context : MODEL_DEFAULT_CONTEXT, ctxs, sizeof ctxs);
	printf("Fewest nodes (of");
	json_t *n;
	json_array_foreach(json_object_get(d, "nodes"), i, n)
		printf("%s%lld", i ? "," : " ", (long long)json_integer_value(n));
	printf(") per storage type, at %s tokens x batch %lld, %.0f GiB usable per node%s%s\n"
	       "cells: nodes (largest context at batch %lld on that many nodes)\n\n",
	       v->context ? ctxs : "32K (or the model's maximum)", batch,
	       json_number_value(json_object_get(d, "usable_gib")), v->group ? ", group " : "",
	       v->group ? v->group : "", batch);
	out_table_print(t, stdout);
	out_table_free(t);
	printf("\nKV/TOKEN: bf16 KV cache of one token over the whole model. '-': does not fit\n"
	       "on the listed node counts. NATIVE: the published weights' own type.\n");
}

void cli_text_fit(const struct cli_answer *a)
{
	const struct cli_fit_view *v = a->view;
	if (v->catalog)
		fit_catalog_table(v, a->data);
	else
		fit_table(v, a->data);
}

void cli_text_plan_decode(const struct cli_answer *a)
{
	const struct cli_plan_decode_view *v = a->view;
	const model_shape_t *s = v->shape;
	const model_decode_opts_t *o = v->opts;
	const model_calib_t *c = v->calib;
	const model_decode_row_t *rows = v->rows;
	int n = v->n;
	const char *eff_note = v->eff_note;
	printf("Model:    %s, %s weights, batch 1, %lld tokens of context\n", s->display,
	       o->dtype ? o->dtype : s->native_dtype, (long long)o->context);
	printf("Network:  %s, all-reduce %s; %s\n", o->topo == MODEL_TOPO_RING ? "ring" : "switch",
	       model_algo_name(o->algo), c->source);
	printf("Compute:  %.1f GB/s x %.2f efficiency per rank%s\n\n", c->mem_gbs, c->efficiency,
	       eff_note);
	static const char *const hdr[] = {"NODES", "TOK/S", "SPEED-UP", "MS/TOKEN", "COMPUTE",
					  "COMM",  "FIXED", "ALGO",     "ALLREDUCE US", "GB/RANK"};
	out_table *t = out_table_new(10, hdr);
	for (int i = 0; i < n; i++) {
		const model_decode_row_t *r = &rows[i];
		char b[10][32];
		if (!r->possible)
			continue;
		const char *row[] = {
		    out_fmt(b[0], 32, "%d", r->tp),
		    out_fmt(b[1], 32, "%.1f", r->tok_s),
		    out_fmt(b[2], 32, "%.2fx", r->speedup),
		    out_fmt(b[3], 32, "%.2f", r->token_s * 1e3),
		    out_fmt(b[4], 32, "%.2f", r->compute_s * 1e3),
		    out_fmt(b[5], 32, "%.2f", r->comm_s * 1e3),
		    out_fmt(b[6], 32, "%.2f", r->fixed_s * 1e3),
		    model_algo_name(r->algo),
		    r->tp > 1 ? out_fmt(b[8], 32, "%.1f", r->allreduce_s * 1e6) : "-",
		    out_fmt(b[9], 32, "%.2f", r->bytes_per_rank / 1e9),
		};
		out_table_row(t, row);
	}
	out_table_print(t, stdout);
	out_table_free(t);
	const model_decode_row_t *last = NULL;
	for (int i = n - 1; i >= 0 && !last; i--)
		if (rows[i].possible)
			last = &rows[i];
	if (last && last->tp > 1)
		printf("\nAt %d nodes a token is %.0f%% compute, %.0f%% communication (%d all-reduces "
		       "of %.0f B, %.1f us each), %.0f%% fixed.\n",
		       last->tp, 100 * last->compute_s / last->token_s, 100 * last->comm_s / last->token_s,
		       last->allreduces, last->allreduce_bytes, last->allreduce_s * 1e6,
		       100 * last->fixed_s / last->token_s);
	printf("Times in ms per token; node counts whose TP does not split the heads are left out.\n");
}


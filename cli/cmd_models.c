/* sparkctl fit / fit --catalog / plan decode: the model planner (models/).
 * Everything but --group works without a cluster: the shapes come from the
 * compiled-in catalog or a config.json, the arithmetic from models/. This
 * file fills model_fit_t and model_decode_row_t and makes the JSON answers
 * (keys: docs/planner.md); the text writers are in print_models.c. */
#include "cli.h"
#include "print.h"

#include "model.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_LIST 16

struct plan_args {
	const char *model, *catalog_file, *dtype, *rule, *kv_dtype, *group, *calibration;
	const char *topology, *algo;
	int nodes_list[MAX_LIST], n_nodes_list;
	int tp, pp;
	long long context, batch;
	double usable_gib, overhead_gib;
	bool catalog_mode;
};

enum {
	OPT_NODES = 1000, OPT_TP, OPT_PP, OPT_DTYPE, OPT_RULE, OPT_KV, OPT_CONTEXT, OPT_BATCH,
	OPT_USABLE, OPT_OVERHEAD, OPT_CATALOG, OPT_CATALOG_FILE, OPT_GROUP, OPT_MODEL, OPT_TOPO,
	OPT_ALGO, OPT_CALIB,
};

static const struct option plan_opts[] = {
    {"nodes", required_argument, NULL, OPT_NODES},
    {"tp", required_argument, NULL, OPT_TP},
    {"pp", required_argument, NULL, OPT_PP},
    {"dtype", required_argument, NULL, OPT_DTYPE},
    {"rule", required_argument, NULL, OPT_RULE},
    {"kv-dtype", required_argument, NULL, OPT_KV},
    {"context", required_argument, NULL, OPT_CONTEXT},
    {"batch", required_argument, NULL, OPT_BATCH},
    {"usable-gib", required_argument, NULL, OPT_USABLE},
    {"overhead-gib", required_argument, NULL, OPT_OVERHEAD},
    {"catalog", no_argument, NULL, OPT_CATALOG},
    {"catalog-file", required_argument, NULL, OPT_CATALOG_FILE},
    {"group", required_argument, NULL, OPT_GROUP},
    {"model", required_argument, NULL, OPT_MODEL},
    {"topology", required_argument, NULL, OPT_TOPO},
    {"algo", required_argument, NULL, OPT_ALGO},
    {"calibration", required_argument, NULL, OPT_CALIB},
    CLI_OPT_END,
};

static int parse_ll(const char *s, long long lo, long long hi, long long *out)
{
	char *end;
	errno = 0;
	double mult = 1;
	long long v = strtoll(s, &end, 10);
	if (end != s && (*end == 'k' || *end == 'K') && !end[1]) {
		mult = 1024;
		end++;
	}
	if (errno || end == s || *end)
		return -1;
	v = (long long)((double)v * mult);
	if (v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

static int parse_list(const char *s, int *out, int *n)
{
	char buf[128];
	snprintf(buf, sizeof buf, "%s", s);
	*n = 0;
	for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
		long long v;
		if (*n >= MAX_LIST || parse_ll(tok, 1, 64, &v) < 0)
			return -1;
		out[(*n)++] = (int)v;
	}
	return *n ? 0 : -1;
}

/* Flags shared by fit and plan decode; the verb's positional MODEL too. */
static int parse_args(struct cli_ctx *ctx, int argc, char **argv, struct plan_args *a)
{
	int ch, rc = 0;
	memset(a, 0, sizeof *a);
	a->overhead_gib = -1;
	optind = 0;
	/* MODEL may come first (before the flags) */
	if (argc > 1 && argv[1][0] != '-') {
		a->model = argv[1];
		argv[1] = argv[0];
		argv++;
		argc--;
	}
	while ((ch = cli_next_opt(ctx, argc, argv, plan_opts, &rc)) != -1) {
		long long v;
		char *end;
		switch (ch) {
		case -2:
			return rc;
		case OPT_NODES:
			if (parse_list(optarg, a->nodes_list, &a->n_nodes_list) < 0)
				return cli_usage(ctx, "--nodes takes a number 1..64 or a list like 1,2,4,8");
			break;
		case OPT_TP:
		case OPT_PP:
			if (parse_ll(optarg, 1, 64, &v) < 0)
				return cli_usage(ctx, "--%s takes 1..64", ch == OPT_TP ? "tp" : "pp");
			*(ch == OPT_TP ? &a->tp : &a->pp) = (int)v;
			break;
		case OPT_DTYPE:
			a->dtype = optarg;
			break;
		case OPT_RULE:
			a->rule = optarg;
			break;
		case OPT_KV:
			a->kv_dtype = optarg;
			break;
		case OPT_CONTEXT:
			if (parse_ll(optarg, 1, 1LL << 32, &a->context) < 0)
				return cli_usage(ctx, "--context takes tokens, e.g. 32768 or 128K");
			break;
		case OPT_BATCH:
			if (parse_ll(optarg, 1, 1 << 20, &a->batch) < 0)
				return cli_usage(ctx, "--batch takes 1..1048576 sequences");
			break;
		case OPT_USABLE:
		case OPT_OVERHEAD: {
			double x = strtod(optarg, &end);
			if (end == optarg || *end || !(x >= 0 && x <= 4096) ||
			    (ch == OPT_USABLE && x <= 0))
				return cli_usage(ctx, "--%s takes GiB, e.g. 102",
						 ch == OPT_USABLE ? "usable-gib" : "overhead-gib");
			*(ch == OPT_USABLE ? &a->usable_gib : &a->overhead_gib) = x;
			break;
		}
		case OPT_CATALOG:
			a->catalog_mode = true;
			break;
		case OPT_CATALOG_FILE:
			a->catalog_file = optarg;
			break;
		case OPT_GROUP:
			a->group = optarg;
			break;
		case OPT_MODEL:
			a->model = optarg;
			break;
		case OPT_TOPO:
			a->topology = optarg;
			break;
		case OPT_ALGO:
			a->algo = optarg;
			break;
		case OPT_CALIB:
			a->calibration = optarg;
			break;
		}
	}
	if (optind < argc) {
		if (a->model || argv[optind][0] == '-')
			return cli_usage(ctx, "unexpected argument '%s'", argv[optind]);
		a->model = argv[optind++];
		if (optind < argc)
			return cli_usage(ctx, "unexpected argument '%s'", argv[optind]);
	}
	if (a->usable_gib == 0)
		a->usable_gib = MODEL_USABLE_GIB;
	return 0;
}

static char *slurp(const char *path, size_t max, size_t *len, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
		return NULL;
	}
	char *buf = malloc(max + 1);
	size_t n = buf ? fread(buf, 1, max + 1, f) : 0;
	fclose(f);
	if (!buf || n > max) {
		snprintf(err, errlen, "%s is larger than %zu bytes", path, max);
		free(buf);
		return NULL;
	}
	buf[n] = '\0';
	*len = n;
	return buf;
}

static int load_catalog(const char *file, model_catalog_t *cat)
{
	char err[MODEL_ERR_LEN];
	char *text = NULL;
	size_t len = 0;
	if (file && !(text = slurp(file, 4u << 20, &len, err, sizeof err)))
		return cli_fail("%s; check --catalog-file", err);
	int rc = model_catalog_parse(text, len, cat, err, sizeof err);
	free(text);
	if (rc < 0)
		return cli_fail("%s%s%s", file ? file : "", file ? ": " : "", err);
	return 0;
}

/* MODEL: a catalog key or name, else a directory or config.json. */
static int resolve_model(struct cli_ctx *ctx, const char *m, const model_catalog_t *cat,
			 model_shape_t *s)
{
	if (!m)
		return cli_usage(ctx, "which model? give a catalog name (sparkctl fit --catalog lists "
				      "them) or a directory or config.json");
	const model_shape_t *c = model_catalog_find(cat, m);
	if (c) {
		*s = *c;
		return 0;
	}
	struct stat st;
	if (stat(m, &st) == 0) {
		char err[MODEL_ERR_LEN];
		if (model_shape_load(m, s, err, sizeof err) < 0)
			return cli_fail("%s; fix the file, or say the shape with a catalog name", err);
		return 0;
	}
	char names[1024] = "";
	size_t o = 0;
	for (size_t i = 0; i < cat->n && o < sizeof names; i++)
		o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", i ? ", " : "",
				      cat->shapes[i].name);
	return cli_usage(ctx, "no model '%s' in the catalog and no such file (catalog: %s)", m, names);
}

static int group_size(struct cli_ctx *ctx, const char *group, int *n, char *topo, size_t tl)
{
	json_t *d = NULL;
	if (cli_call(ctx, "group_show", json_pack("{s:s}", "name", group), &d, 0))
		return 1;
	*n = (int)json_array_size(json_object_get(d, "members"));
	const char *t = json_string_value(json_object_get(d, "topology"));
	snprintf(topo, tl, "%s", t ? t : "");
	json_decref(d);
	if (*n < 1)
		return cli_fail("group '%s' has no members; add nodes to it first", group);
	return 0;
}

/* ---- fit: writers -------------------------------------------------------- */

static double gib(double b)
{
	return b / GIB;
}

/* vLLM flags the fit implies: argv-style words into a JSON array. */
static json_t *vllm_args(const model_fit_t *f)
{
	json_t *a = json_array();
	char v[32];
	json_array_append_new(a, json_string("--tensor-parallel-size"));
	snprintf(v, sizeof v, "%d", f->tp);
	json_array_append_new(a, json_string(v));
	if (f->pp > 1) {
		json_array_append_new(a, json_string("--pipeline-parallel-size"));
		snprintf(v, sizeof v, "%d", f->pp);
		json_array_append_new(a, json_string(v));
	}
	if (f->kv_known) {
		json_array_append_new(a, json_string("--max-model-len"));
		snprintf(v, sizeof v, "%lld", (long long)f->context);
		json_array_append_new(a, json_string(v));
	}
	json_array_append_new(a, json_string("--gpu-memory-utilization"));
	snprintf(v, sizeof v, "%.2f", floor(f->usable_gib / MODEL_CUDA_GIB * 100) / 100);
	json_array_append_new(a, json_string(v));
	if (f->kv_known && f->batch > 1) {
		json_array_append_new(a, json_string("--max-num-seqs"));
		snprintf(v, sizeof v, "%lld", (long long)f->batch);
		json_array_append_new(a, json_string(v));
	}
	if (strcmp(f->kv_dtype, "fp8") == 0) {
		json_array_append_new(a, json_string("--kv-cache-dtype"));
		json_array_append_new(a, json_string("fp8"));
	}
	return a;
}

/* --kv-cache-memory-bytes: the KV asked for, per node, rounded up to MiB. */
static long long kv_cache_bytes(const model_fit_t *f)
{
	return (long long)(ceil(f->kv_b / (1 << 20)) * (1 << 20));
}

static json_t *fit_json(const model_shape_t *s, const model_params_t *p, const model_fit_t *f,
			int fewest, const model_fit_t *ff)
{
	json_t *o = json_object();
	json_object_set_new(o, "model", json_string(s->name));
	json_object_set_new(o, "display", json_string(s->display));
	json_object_set_new(o, "architecture", json_string(s->arch));
	json_object_set_new(o, "status", json_string(s->status));
	json_object_set_new(o, "source", json_string(s->source));
	json_t *pj = json_pack("{s:f, s:f}", "total", p->total, "active", p->active);
	if (s->shape_known) {
		json_object_set_new(pj, "embedding", json_real(p->embed));
		json_object_set_new(pj, "lm_head", json_real(p->lm_head));
		json_object_set_new(pj, "attention", json_real(p->attn));
		json_object_set_new(pj, "dense_mlp", json_real(p->dense_mlp));
		json_object_set_new(pj, "experts", json_real(p->experts));
		json_object_set_new(pj, "shared_experts", json_real(p->shared));
		json_object_set_new(pj, "router", json_real(p->router));
		json_object_set_new(pj, "other", json_real(p->small));
	}
	json_object_set_new(o, "params", pj);
	json_object_set_new(o, "dtype", json_string(f->dtype));
	json_object_set_new(o, "rule", json_string(f->rule));
	json_object_set_new(o, "kv_dtype", json_string(f->kv_dtype));
	json_object_set_new(o, "nodes", json_integer(f->nodes));
	json_object_set_new(o, "tp", json_integer(f->tp));
	json_object_set_new(o, "pp", json_integer(f->pp));
	json_object_set_new(o, "context", json_integer(f->context));
	json_object_set_new(o, "batch", json_integer(f->batch));
	json_object_set_new(o, "usable_gib", json_real(f->usable_gib));
	json_object_set_new(o, "overhead_gib", json_real(f->overhead_gib));
	json_object_set_new(o, "weights_total_gib", json_real(gib(f->weights_total_b)));
	json_object_set_new(o, "per_node",
			    json_pack("{s:f, s:f, s:f, s:f, s:f}", "weights_gib", gib(f->weights_b),
				      "kv_gib", gib(f->kv_b), "overhead_gib", gib(f->overhead_b),
				      "total_gib", gib(f->weights_b + f->kv_b + f->overhead_b),
				      "left_gib", gib(f->left_b)));
	json_object_set_new(o, "kv_known", json_boolean(f->kv_known));
	if (f->kv_known) {
		json_object_set_new(o, "kv_bytes_per_token", json_real(f->kv_per_token_b));
		json_object_set_new(o, "kv_attention", json_string(s->attn == MODEL_ATTN_MLA ? "mla" : "gqa"));
		json_object_set_new(o, "kv_heads_per_rank", json_integer(f->kv_heads_per_rank));
		json_object_set_new(o, "kv_replicated", json_boolean(f->kv_replicated));
		json_object_set_new(o, "sliding_window", json_integer(f->window));
		json_object_set_new(o, "sliding_layers", json_integer(s->sliding_layers));
		/* null: nothing bounds it (sliding layers only, no model limit) */
		json_object_set_new(o, "max_context", f->max_context_bound == MODEL_BOUND_NONE
							      ? json_null()
							      : json_integer(f->max_context));
		json_object_set_new(o, "max_context_capped", json_boolean(f->max_context_capped));
		json_object_set_new(o, "max_context_bound",
				    json_string(model_bound_name(f->max_context_bound)));
	}
	json_object_set_new(o, "model_context_limit", s->shape_known && s->max_pos
							      ? json_integer(s->max_pos)
							      : json_null());
	json_object_set_new(o, "model_context_limit_from",
			    !s->shape_known || !s->max_pos ? json_null()
			    : s->max_pos_default[0]        ? json_string("default")
							   : json_string("config"));
	json_object_set_new(o, "fits", json_boolean(f->fits));
	json_object_set_new(o, "why", f->fits ? json_null() : json_string(f->why));
	json_object_set_new(o, "fewest_nodes", fewest ? json_integer(fewest) : json_null());
	json_object_set_new(o, "fewest_layout",
			    fewest ? json_pack("{s:i, s:i}", "tp", ff->tp, "pp", ff->pp) : json_null());
	json_object_set_new(o, "vllm_args", vllm_args(f));
	json_object_set_new(o, "kv_cache_memory_bytes",
			    f->kv_known ? json_integer(kv_cache_bytes(f)) : json_null());
	return o;
}

static model_fit_opts_t fit_opts(const struct plan_args *a, int nodes)
{
	model_fit_opts_t o = {.tp = a->tp, .pp = a->pp, .nodes = nodes, .dtype = a->dtype,
			      .rule = a->rule, .kv_dtype = a->kv_dtype, .context = a->context,
			      .batch = a->batch, .usable_gib = a->usable_gib,
			      .overhead_gib = a->overhead_gib};
	return o;
}

/* ---- fit --catalog ------------------------------------------------------- */

static const char *const guide_dtypes[] = {"bf16", "fp8", "nvfp4"};

static int fit_catalog(struct cli_ctx *ctx, const struct plan_args *a, const model_catalog_t *cat)
{
	int list[MAX_LIST], nl = a->n_nodes_list;
	char topo[32];
	if (nl)
		memcpy(list, a->nodes_list, sizeof list);
	else
		for (nl = 0; nl < MODEL_MAX_NODES; nl++)
			list[nl] = nl + 1;
	if (a->group) {
		int n;
		if (group_size(ctx, a->group, &n, topo, sizeof topo))
			return 1;
		list[0] = n;
		nl = 1;
	}
	json_t *out = json_array();
	for (size_t i = 0; i < cat->n; i++) {
		const model_shape_t *s = &cat->shapes[i];
		model_params_t p;
		model_params(s, &p);
		json_t *row = json_pack("{s:s, s:s, s:s, s:f, s:f}", "model", s->name, "display",
					s->display, "status", s->status, "total", p.total, "active",
					p.active);
		json_t *per = json_object();
		if (s->shape_known) {
			double full, win;
			model_kv_per_token(s, 1, s->layers, 2, &full, &win);
			json_object_set_new(row, "kv_bytes_per_token", json_real(full + win));
		}
		for (int k = 0; k < 4; k++) {
			const char *dt = k < 3 ? guide_dtypes[k] : NULL;
			struct plan_args aa = *a;
			aa.tp = aa.pp = 0;
			aa.dtype = dt;
			aa.rule = NULL;
			int found = 0;
			model_fit_t f, best;
			char err[MODEL_ERR_LEN];
			for (int j = 0; j < nl && !found; j++) {
				model_fit_opts_t o = fit_opts(&aa, list[j]);
				if (model_fit(s, &o, &f, err, sizeof err) == 0 && f.fits) {
					found = list[j];
					best = f;
				}
			}
			const char *key = k < 3 ? dt : "native";
			if (found) {
				json_object_set_new(per, key,
						    json_pack("{s:i, s:i, s:i, s:s, s:o, s:b, s:o}", "nodes", found,
							      "tp", best.tp, "pp", best.pp, "dtype", best.dtype,
							      "max_context", best.kv_known && best.max_context_bound != MODEL_BOUND_NONE
									     ? json_integer(best.max_context) : json_null(),
							      "max_context_capped", best.max_context_capped,
							      "max_context_bound", best.kv_known
									     ? json_string(model_bound_name(best.max_context_bound))
									     : json_null()));
			} else {
				json_object_set_new(per, key, json_null());
			}
		}
		json_object_set_new(row, "fewest_nodes", per);
		json_array_append_new(out, row);
	}
	json_t *o = json_pack("{s:o, s:I, s:I, s:f, s:o}", "nodes", json_array(), "context",
			      (json_int_t)(a->context ? a->context : MODEL_DEFAULT_CONTEXT),
			      "batch", (json_int_t)(a->batch ? a->batch : 1), "usable_gib",
			      a->usable_gib, "models", out);
	for (int j = 0; j < nl; j++)
		json_array_append_new(json_object_get(o, "nodes"), json_integer(list[j]));
	struct cli_fit_view view = {.catalog = true, .cat = cat, .context = a->context,
				    .group = a->group};
	cli_output(ctx, NULL, o, &view);
	json_decref(o);
	return 0;
}

/* ---- fit ----------------------------------------------------------------- */

int cmd_fit(struct cli_ctx *ctx, int argc, char **argv)
{
	struct plan_args a;
	int rc = parse_args(ctx, argc, argv, &a);
	if (rc)
		return rc;
	if (a.topology || a.algo || a.calibration)
		return cli_usage(ctx, "--topology, --algo and --calibration belong to 'sparkctl plan decode'");
	model_catalog_t cat;
	if ((rc = load_catalog(a.catalog_file, &cat)))
		return rc;
	if (a.catalog_mode) {
		if (a.model)
			rc = cli_usage(ctx, "--catalog covers every model; drop '%s'", a.model);
		else if (a.tp || a.pp)
			rc = cli_usage(ctx, "--catalog chooses the layout itself; drop --tp/--pp");
		else
			rc = fit_catalog(ctx, &a, &cat);
		model_catalog_free(&cat);
		return rc;
	}
	model_shape_t s;
	if ((rc = resolve_model(ctx, a.model, &cat, &s))) {
		model_catalog_free(&cat);
		return rc;
	}
	model_catalog_free(&cat);
	if (a.n_nodes_list > 1)
		return cli_usage(ctx, "--nodes takes one number here (a list is for --catalog)");
	int nodes = a.n_nodes_list ? a.nodes_list[0] : 0;
	if (a.group) {
		char topo[32];
		if (group_size(ctx, a.group, &nodes, topo, sizeof topo))
			return 1;
	}
	if (!nodes && !a.tp && !a.pp)
		nodes = 1;
	model_fit_opts_t o = fit_opts(&a, nodes);
	model_fit_t f, ff;
	char err[MODEL_ERR_LEN];
	if (model_fit(&s, &o, &f, err, sizeof err) < 0)
		return cli_usage(ctx, "%s", err);
	int fewest = model_fewest_nodes(&s, &o, MODEL_MAX_NODES, &ff);
	model_params_t p;
	model_params(&s, &p);
	json_t *j = fit_json(&s, &p, &f, fewest, &ff);
	struct cli_fit_view view = {.shape = &s, .params = &p, .fit = &f, .fewest = fewest,
				    .fewest_fit = &ff};
	cli_output(ctx, NULL, j, &view);
	json_decref(j);
	if (!f.fits) {
		if (fewest)
			return cli_fail("%s does not fit on %d node%s; it fits on %d (--nodes %d)",
					s.display, f.nodes, f.nodes > 1 ? "s" : "", fewest, fewest);
		return cli_fail("%s does not fit on 1..%d nodes at %s; try a smaller --dtype "
				"(fp8, nvfp4), --kv-dtype fp8 or a shorter --context", s.display,
				MODEL_MAX_NODES, f.dtype);
	}
	return 0;
}

/* ---- plan decode --------------------------------------------------------- */

static json_t *decode_json(const model_shape_t *s, const model_decode_opts_t *o,
			   const model_calib_t *c, const model_decode_row_t *rows, int n)
{
	json_t *a = json_array();
	for (int i = 0; i < n; i++) {
		const model_decode_row_t *r = &rows[i];
		if (!r->possible)
			continue;
		json_array_append_new(
		    a, json_pack("{s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:s, s:i, s:f, s:f, s:f}",
				 "nodes", r->tp, "tok_s", r->tok_s, "speedup", r->speedup, "token_ms",
				 r->token_s * 1e3, "compute_ms", r->compute_s * 1e3, "comm_ms",
				 r->comm_s * 1e3, "fixed_ms", r->fixed_s * 1e3, "algo",
				 model_algo_name(r->algo), "allreduces", r->allreduces,
				 "allreduce_bytes", r->allreduce_bytes, "allreduce_us",
				 r->allreduce_s * 1e6, "bytes_per_rank", r->bytes_per_rank));
	}
	return json_pack("{s:s, s:s, s:s, s:s, s:I, s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:o}",
			 "model", s->name, "dtype", o->dtype ? o->dtype : s->native_dtype,
			 "topology", o->topo == MODEL_TOPO_RING ? "ring" : "switch", "algo",
			 model_algo_name(o->algo), "context", (json_int_t)o->context, "calibration",
			 c->source, "mem_gbs", c->mem_gbs, "efficiency", c->efficiency,
			 "per_token_ms", c->per_token_s * 1e3, "per_layer_us", c->per_layer_s * 1e6,
			 "alpha_us", c->alpha_s * 1e6, "link_gbs", 1.0 / (c->beta_s_per_b * 1e9),
			 "rows", a);
}

int cmd_plan_decode(struct cli_ctx *ctx, int argc, char **argv)
{
	struct plan_args a;
	int rc = parse_args(ctx, argc, argv, &a);
	if (rc)
		return rc;
	if (a.catalog_mode || a.tp || a.pp || a.batch > 1)
		return cli_usage(ctx, "plan decode models batch 1 at TP 1..N: drop --catalog/--tp/--pp/--batch");
	if (a.n_nodes_list > 1)
		return cli_usage(ctx, "--nodes takes one number: the table covers 1..N");
	model_decode_opts_t o = {.nodes = a.n_nodes_list ? a.nodes_list[0] : 0, .dtype = a.dtype,
				 .rule = a.rule, .context = a.context, .kv_dtype = a.kv_dtype,
				 .topo = MODEL_TOPO_SWITCH, .algo = MODEL_ALGO_AUTO};
	char gtopo[32] = "";
	if (a.group && group_size(ctx, a.group, &o.nodes, gtopo, sizeof gtopo))
		return 1;
	if (!o.nodes)
		return cli_usage(ctx, "how many nodes? give --nodes N (or --group G)");
	const char *topo = a.topology ? a.topology : (*gtopo ? gtopo : "switch");
	if (strcmp(topo, "ring") == 0)
		o.topo = MODEL_TOPO_RING;
	else if (strcmp(topo, "switch") != 0 && strcmp(topo, "pair") != 0)
		return cli_usage(ctx, "--topology takes ring or switch");
	if (a.algo) {
		if (strcmp(a.algo, "auto") == 0)
			o.algo = MODEL_ALGO_AUTO;
		else if (strcmp(a.algo, "oneshot") == 0)
			o.algo = MODEL_ALGO_ONESHOT;
		else if (strcmp(a.algo, "ring") == 0)
			o.algo = MODEL_ALGO_RING;
		else
			return cli_usage(ctx, "--algo takes auto, oneshot or ring");
	}
	model_catalog_t cat;
	if ((rc = load_catalog(a.catalog_file, &cat)))
		return rc;
	model_shape_t s;
	if ((rc = resolve_model(ctx, a.model, &cat, &s))) {
		model_catalog_free(&cat);
		return rc;
	}
	model_calib_t c;
	char err[MODEL_ERR_LEN], note[160] = "";
	if (a.calibration) {
		size_t len;
		char *text = slurp(a.calibration, 1u << 20, &len, err, sizeof err);
		model_calib_default(&c, 1.0);
		if (!text || model_calib_parse(text, len, &c, err, sizeof err) < 0) {
			free(text);
			model_catalog_free(&cat);
			return cli_fail("%s: %s; write one with bench/planner/run.sh", a.calibration, err);
		}
		free(text);
		snprintf(note, sizeof note, " (from %s)", a.calibration);
	} else {
		double eff;
		int used, skipped;
		if (model_calibrate_efficiency(&cat, MODEL_PER_TOKEN_MS * 1e-3, &eff, &used, &skipped) < 0) {
			model_catalog_free(&cat);
			return cli_fail("the catalog has no usable single-node decode report to calibrate "
					"on; add decode_reports or pass --calibration FILE");
		}
		model_calib_default(&c, eff);
		snprintf(note, sizeof note,
			 " (median of %d published single-node figures; %d above the bound left out)",
			 used, skipped);
	}
	model_catalog_free(&cat);
	model_decode_row_t *rows = calloc((size_t)o.nodes, sizeof *rows);
	if (!rows)
		return cli_fail("out of memory");
	if (model_decode(&s, &o, &c, rows, err, sizeof err) < 0) {
		free(rows);
		return cli_usage(ctx, "%s", err);
	}
	json_t *j = decode_json(&s, &o, &c, rows, o.nodes);
	struct cli_plan_decode_view view = {.shape = &s, .opts = &o, .calib = &c, .rows = rows,
					    .n = o.nodes, .eff_note = note};
	cli_output(ctx, NULL, j, &view);
	json_decref(j);
	free(rows);
	return 0;
}

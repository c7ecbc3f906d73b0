/* model_decode.c - batch-1 decode speed at tensor parallelism 1..N.
 *
 * Per token:  compute = bytes one rank reads (its share of the active
 *             weights + its KV cache at the context) / (bandwidth x efficiency)
 *             communication = 2 all-reduces per layer of hidden x comm_bytes,
 *             priced by libsparkcoll's alpha-beta model (docs/runtime.md) for
 *             the algorithm the topology allows, + one gather of the logits
 *             fixed = a per-token cost (sampling, scheduling, launches)
 * tok/s = 1 / (compute + communication + fixed). */
#include "model_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define ERR(...) (snprintf(err, errlen, __VA_ARGS__), -EINVAL)

const char *model_algo_name(enum model_algo a)
{
	switch (a) {
	case MODEL_ALGO_AUTO: return "auto";
	case MODEL_ALGO_ONESHOT: return "oneshot";
	case MODEL_ALGO_RING: return "ring";
	case MODEL_ALGO_RELAY: return "relay";
	case MODEL_ALGO_DOUBLING: return "doubling";
	case MODEL_ALGO_NONE: return "none";
	}
	return "?";
}

static int algo_from(const char *s, enum model_algo *a)
{
	for (int i = MODEL_ALGO_AUTO; i <= MODEL_ALGO_NONE; i++)
		if (strcmp(model_algo_name((enum model_algo)i), s) == 0)
			return *a = (enum model_algo)i, 0;
	return -EINVAL;
}

void model_calib_default(model_calib_t *c, double efficiency)
{
	memset(c, 0, sizeof *c);
	snprintf(c->source, sizeof c->source,
		 "Spark defaults: 273 GB/s, 200G RoCE alpha %.1f us, %.0f GB/s per link",
		 MODEL_RDMA_ALPHA_US, MODEL_RDMA_LINK_GBS);
	c->mem_gbs = MODEL_SPARK_GBS;
	c->efficiency = efficiency > 0 ? efficiency : 1.0;
	c->per_token_s = MODEL_PER_TOKEN_MS * 1e-3;
	c->comm_bytes = 2;
	c->alpha_s = MODEL_RDMA_ALPHA_US * 1e-6;
	c->beta_s_per_b = 1.0 / (MODEL_RDMA_LINK_GBS * 1e9);
}

static int num(json_t *o, const char *k, double lo, double hi, double *out, char *err,
	       size_t errlen)
{
	json_t *v = json_object_get(o, k);
	if (!v)
		return 0;
	if (!json_is_number(v) || !(json_number_value(v) >= lo && json_number_value(v) <= hi))
		return ERR("calibration: '%s' must be a number in %g..%g", k, lo, hi);
	*out = json_number_value(v);
	return 0;
}

int model_calib_parse(const char *text, size_t len, model_calib_t *c, char *err, size_t errlen)
{
	static const char *const known[] = {"source",     "mem_gbs",     "mem_gbs_all_cores",
					    "host_cores", "efficiency",  "per_token_ms", "per_layer_us",
					    "comm_bytes", "gather_bytes", "alpha_us",
					    "link_gbs",   "links",       "measured"};
	json_error_t je;
	int rc = 0;
	if (len > (1u << 20))
		return ERR("calibration: %zu bytes, over the 1 MiB limit", len);
	json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!j)
		return ERR("calibration: not valid JSON: %s (line %d)", je.text, je.line);
	if (!json_is_object(j)) {
		rc = ERR("calibration: not a JSON object");
		goto out;
	}
	const char *k;
	json_t *v;
	json_object_foreach(j, k, v) {
		bool ok = false;
		for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
			ok = ok || strcmp(k, known[i]) == 0;
		if (!ok) {
			rc = ERR("calibration: unknown key '%.40s'", k);
			goto out;
		}
	}
	const char *src = json_string_value(json_object_get(j, "source"));
	if (src)
		snprintf(c->source, sizeof c->source, "%s", src);
	double cores = c->host_cores, ptm = c->per_token_s * 1e3, plu = c->per_layer_s * 1e6,
	       au = c->alpha_s * 1e6,
	       lg = 1.0 / (c->beta_s_per_b * 1e9);
	if ((rc = num(j, "mem_gbs", 1e-3, 1e5, &c->mem_gbs, err, errlen)) ||
	    (rc = num(j, "mem_gbs_all_cores", 1e-3, 1e5, &c->mem_gbs_all_cores, err, errlen)) ||
	    (rc = num(j, "host_cores", 0, 4096, &cores, err, errlen)) ||
	    (rc = num(j, "efficiency", 1e-3, 1, &c->efficiency, err, errlen)) ||
	    (rc = num(j, "per_token_ms", 0, 1e5, &ptm, err, errlen)) ||
	    (rc = num(j, "per_layer_us", 0, 1e6, &plu, err, errlen)) ||
	    (rc = num(j, "comm_bytes", 0.5, 8, &c->comm_bytes, err, errlen)) ||
	    (rc = num(j, "gather_bytes", 0, 1e9, &c->gather_bytes, err, errlen)) ||
	    (rc = num(j, "alpha_us", 0, 1e6, &au, err, errlen)) ||
	    (rc = num(j, "link_gbs", 1e-4, 1e4, &lg, err, errlen)))
		goto out;
	c->host_cores = (int)cores;
	c->per_token_s = ptm * 1e-3;
	c->per_layer_s = plu * 1e-6;
	c->alpha_s = au * 1e-6;
	c->beta_s_per_b = 1.0 / (lg * 1e9);
	json_t *links = json_object_get(j, "links");
	if (links && !json_is_array(links)) {
		rc = ERR("calibration: 'links' must be a list");
		goto out;
	}
	size_t i;
	c->n_links = 0;
	json_array_foreach(links, i, v) {
		model_link_t *l = &c->links[c->n_links];
		double ws = 0, a = -1, g = -1;
		const char *an = json_string_value(json_object_get(v, "algo"));
		if (c->n_links >= MODEL_MAX_LINKS) {
			rc = ERR("calibration: more than %d links", MODEL_MAX_LINKS);
			goto out;
		}
		if (!json_is_object(v) || !an || algo_from(an, &l->algo) < 0 ||
		    l->algo == MODEL_ALGO_NONE) {
			rc = ERR("calibration: links[%zu] needs world_size, algo (oneshot, ring, relay, "
				 "doubling), alpha_us and link_gbs", i);
			goto out;
		}
		if ((rc = num(v, "world_size", 1, 4096, &ws, err, errlen)) ||
		    (rc = num(v, "alpha_us", 0, 1e6, &a, err, errlen)) ||
		    (rc = num(v, "link_gbs", 1e-4, 1e4, &g, err, errlen)))
			goto out;
		if (a < 0 || g <= 0) {
			rc = ERR("calibration: links[%zu] needs alpha_us and link_gbs", i);
			goto out;
		}
		l->world_size = (int)ws;
		l->alpha_s = a * 1e-6;
		l->beta_s_per_b = 1.0 / (g * 1e9);
		c->n_links++;
	}
out:
	json_decref(j);
	return rc;
}

static void link_for(const model_calib_t *c, enum model_algo a, int n, double *al, double *be)
{
	*al = c->alpha_s;
	*be = c->beta_s_per_b;
	int best = -1;
	for (size_t i = 0; i < c->n_links; i++) {
		const model_link_t *l = &c->links[i];
		if (l->algo != a && l->algo != MODEL_ALGO_AUTO)
			continue;
		int score = (l->world_size == n ? 2 : l->world_size == 0 ? 1 : -1) * 2 +
			    (l->algo == a ? 1 : 0);
		if (score > best && score >= 2) {
			best = score;
			*al = l->alpha_s;
			*be = l->beta_s_per_b;
		}
	}
}

double model_allreduce_s(const model_calib_t *c, enum model_algo a, int n, double m)
{
	double al, be;
	if (n <= 1)
		return 0;
	link_for(c, a, n, &al, &be);
	switch (a) {
	case MODEL_ALGO_ONESHOT:
		return al + (n - 1) * m * be;
	case MODEL_ALGO_RELAY:
		return (n / 2) * (al + m * be);
	case MODEL_ALGO_DOUBLING:
		return log2((double)n) * (al + m * be);
	case MODEL_ALGO_RING:
	default:
		return 2.0 * (n - 1) * al + 2.0 * (n - 1) / n * m * be;
	}
}

static bool pow2(int n)
{
	return n > 0 && (n & (n - 1)) == 0;
}

enum model_algo model_pick_algo(const model_calib_t *c, enum model_topo t, enum model_algo want,
				int n, double m)
{
	if (n <= 1)
		return MODEL_ALGO_NONE;
	if (want == MODEL_ALGO_ONESHOT)
		return t == MODEL_TOPO_RING && n > 3 ? MODEL_ALGO_RELAY : MODEL_ALGO_ONESHOT;
	if (want != MODEL_ALGO_AUTO)
		return want;
	/* what libsparkcoll may run: a switch connects every pair; a physical ring
	 * only neighbours (relay; doubling at 2 and 4 ranks, whose partners are
	 * neighbours; ring) */
	enum model_algo cand[4];
	int k = 0;
	if (t == MODEL_TOPO_SWITCH || n <= 3)
		cand[k++] = MODEL_ALGO_ONESHOT;
	else
		cand[k++] = MODEL_ALGO_RELAY;
	if (pow2(n) && n > 2 && (t == MODEL_TOPO_SWITCH || n == 4))
		cand[k++] = MODEL_ALGO_DOUBLING;
	cand[k++] = MODEL_ALGO_RING;
	enum model_algo best = cand[0];
	for (int i = 1; i < k; i++)
		if (model_allreduce_s(c, cand[i], n, m) < model_allreduce_s(c, best, n, m))
			best = cand[i];
	return best;
}

int model_decode_bytes(const model_shape_t *s, const model_decode_opts_t *o, int tp,
		       double *bytes, char *err, size_t errlen)
{
	const model_dtype_t *d;
	const char *rule;
	int rc;
	if (!s->shape_known)
		return ERR("%s is announced without a public shape: its decode speed cannot be "
			   "modelled", s->name);
	if ((rc = model_storage(s, o->dtype, o->rule, &d, &rule, err, errlen)) < 0)
		return rc;
	/* the embedding table is not streamed (one row per token); the LM head is */
	double b = model_rank_bytes(s, d, rule, tp, 0, s->layers, false, true, true);
	if (o->context > 0) {
		double kvb = o->kv_dtype && strcmp(o->kv_dtype, "fp8") == 0 ? 1 : 2, full, win;
		model_kv_per_token(s, tp, s->layers, kvb, &full, &win);
		int64_t cw = s->window && o->context > s->window ? s->window : o->context;
		b += full * (double)o->context + win * (double)cw;
	}
	*bytes = b;
	return 0;
}

/* Compute per token on one rank: its bytes at the streaming rate, plus the
 * per-layer cost. On a host whose cores the ranks share (a calibration of
 * the simulator), only host_cores ranks run at once. */
static double compute_s(const model_calib_t *c, int tp, double bytes, int64_t layers)
{
	double rate = c->mem_gbs * 1e9 * c->efficiency, fixed = (double)layers * c->per_layer_s;
	if (c->host_cores <= 0 || tp <= 1)
		return bytes / rate + fixed;
	int k = tp < c->host_cores ? tp : c->host_cores;
	double all = (c->mem_gbs_all_cores > 0 ? c->mem_gbs_all_cores : c->mem_gbs) * 1e9 *
		     c->efficiency;
	double r = c->host_cores > 1 ? rate + (all - rate) * (k - 1) / (c->host_cores - 1) : all;
	return (bytes / r + fixed) * ((double)tp / k);
}

int model_decode(const model_shape_t *s, const model_decode_opts_t *o, const model_calib_t *c,
		 model_decode_row_t *rows, char *err, size_t errlen)
{
	if (o->nodes < 1 || o->nodes > 64)
		return ERR("--nodes must be 1..64");
	for (int tp = 1; tp <= o->nodes; tp++) {
		model_decode_row_t *r = &rows[tp - 1];
		memset(r, 0, sizeof *r);
		r->tp = tp;
		char why[128];
		r->possible = model_tp_ok(s, tp, why, sizeof why);
		int rc = model_decode_bytes(s, o, tp, &r->bytes_per_rank, err, errlen);
		if (rc < 0)
			return rc;
		r->compute_s = compute_s(c, tp, r->bytes_per_rank, s->layers);
		r->fixed_s = c->per_token_s;
		r->allreduce_bytes = (double)s->hidden * c->comm_bytes;
		if (tp > 1) {
			r->algo = model_pick_algo(c, o->topo, o->algo, tp, r->allreduce_bytes);
			r->allreduces = (int)(2 * s->layers);
			r->allreduce_s = model_allreduce_s(c, r->algo, tp, r->allreduce_bytes);
			/* the logits: each rank's vocab/TP slice (or gather_bytes) to the others */
			double blk = c->gather_bytes > 0 ? c->gather_bytes
							 : ceil((double)s->vocab / tp) * c->comm_bytes;
			double al, be;
			link_for(c, r->algo, tp, &al, &be);
			r->comm_s = r->allreduces * r->allreduce_s + al + (tp - 1) * blk * be;
		} else {
			r->algo = MODEL_ALGO_NONE;
		}
		r->token_s = r->compute_s + r->comm_s + r->fixed_s;
		r->tok_s = 1.0 / r->token_s;
		r->speedup = r->tok_s / rows[0].tok_s;
	}
	return 0;
}

int model_calibrate_efficiency(const model_catalog_t *c, double per_token_s, double *eff,
			       int *used, int *skipped)
{
	double v[64];
	int n = 0;
	*used = *skipped = 0;
	for (size_t i = 0; i < c->n_reports && n < 64; i++) {
		const model_report_t *r = &c->reports[i];
		const model_shape_t *s = model_catalog_find(c, r->model);
		if (r->nodes != 1 || !s || !s->shape_known)
			continue;
		model_decode_opts_t o = {.nodes = 1, .dtype = r->dtype};
		double bytes;
		char err[MODEL_ERR_LEN];
		if (model_decode_bytes(s, &o, 1, &bytes, err, sizeof err) < 0) {
			(*skipped)++;
			continue;
		}
		double t = 1.0 / r->tok_s - per_token_s;
		double e = t > 0 ? bytes / (t * MODEL_SPARK_GBS * 1e9) : 2;
		if (e > 1.0 || e <= 0) {
			(*skipped)++;
			continue;
		}
		v[n++] = e;
	}
	if (!n)
		return -ENOENT;
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
			double x = v[j];
			v[j] = v[j - 1];
			v[j - 1] = x;
		}
	*eff = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	*used = n;
	return 0;
}

/* dec_forward.c - one decoder step per token on every rank, greedy decoding.
 *
 * Per layer and token: RMSNorm -> local q/k/v heads (+bias, q/k norm) -> RoPE
 * -> KV cache -> attention over the local heads -> o_proj partial ->
 * ALL-REDUCE -> residual; RMSNorm -> local gate/up columns -> SwiGLU ->
 * down_proj partial -> ALL-REDUCE -> residual. At the end: final norm, this
 * rank's vocabulary rows of the LM head, a local arg-max and one all-gather
 * of (value, index) pairs, so every rank picks the same token (lowest index
 * on ties). Exactly the traffic of a Megatron-style GPU engine at batch 1.
 * Time inside collectives is counted as communication, the rest as compute. */
#include "dec.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ERR(...) (snprintf(err, errlen, __VA_ARGS__), -EINVAL)

double dec_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
	const dec_model_t *m;
	sc_comm_t *comm;
	const dec_run_opts_t *o;
	float *x, *h, *q, *k, *v, *att, *part, *gate, *up, *logits, *scores, *inv_freq;
	float *kc, *vc;    /* [layers][max_seq][nkv * head_dim] */
	uint16_t *cbuf;    /* bf16 all-reduce buffer */
	float *gather;     /* [world * vocab_shard] when dumping logits */
	int max_seq;
	double t_allreduce, t_gather;
	int quiet;         /* warm-up: no dump, greedy */
	int sample_step;   /* index of the token being generated */
	char *err;
	size_t errlen;
} run_t;

static int comm_fail(run_t *s, const char *what, int rc)
{
	snprintf(s->err, s->errlen, "%s failed: %s (%s)", what, sc_strerror(rc),
	         sc_comm_last_error(s->comm));
	return rc;
}

static int allreduce(run_t *s, float *buf, int n)
{
	double t0;
	int rc;
	if (!s->comm || s->m->world == 1)
		return 0;
	t0 = dec_now();
	if (s->o->comm_dtype == SC_BF16) {
		for (int i = 0; i < n; i++)
			s->cbuf[i] = dec_f32_to_bf16(buf[i]);
		rc = sc_allreduce_algo(s->comm, s->cbuf, s->cbuf, (size_t)n, SC_BF16, SC_SUM, s->o->algo);
		for (int i = 0; i < n; i++)
			buf[i] = dec_bf16_to_f32(s->cbuf[i]);
	} else {
		rc = sc_allreduce_algo(s->comm, buf, buf, (size_t)n, SC_F32, SC_SUM, s->o->algo);
	}
	s->t_allreduce += dec_now() - t0;
	return rc < 0 ? comm_fail(s, "all-reduce", rc) : 0;
}

static int gather(run_t *s, const void *send, void *recv, size_t count, sc_dtype_t dt)
{
	double t0 = dec_now();
	int rc = sc_allgather(s->comm, send, recv, count, dt);
	s->t_gather += dec_now() - t0;
	return rc < 0 ? comm_fail(s, "all-gather", rc) : 0;
}

static void attention(run_t *s, int l, int pos)
{
	const dec_model_t *m = s->m;
	int hd = m->cfg.head_dim, kvd = m->nkv * hd, group = m->nh / m->nkv;
	const float *kc = s->kc + (size_t)l * s->max_seq * kvd;
	const float *vc = s->vc + (size_t)l * s->max_seq * kvd;
	float scale = 1.0f / sqrtf((float)hd);

	for (int h = 0; h < m->nh; h++) {
		const float *q = s->q + (size_t)h * hd;
		float *out = s->att + (size_t)h * hd, mx = -INFINITY, sum = 0;
		int g = h / group;
		for (int t = 0; t <= pos; t++) {
			const float *k = kc + (size_t)t * kvd + (size_t)g * hd;
			float d = 0;
			for (int i = 0; i < hd; i++)
				d += q[i] * k[i];
			s->scores[t] = d * scale;
			if (s->scores[t] > mx)
				mx = s->scores[t];
		}
		for (int t = 0; t <= pos; t++)
			sum += s->scores[t] = expf(s->scores[t] - mx);
		memset(out, 0, sizeof(float) * (size_t)hd);
		for (int t = 0; t <= pos; t++) {
			const float *v = vc + (size_t)t * kvd + (size_t)g * hd;
			float p = s->scores[t] / sum;
			for (int i = 0; i < hd; i++)
				out[i] += p * v[i];
		}
	}
}

static void add(float *y, const float *b, int n)
{
	for (int i = 0; i < n; i++)
		y[i] += b[i];
}

static void head_norm(float *v, int nheads, int hd, const float *w, float eps)
{
	for (int h = 0; h < nheads; h++)
		dec_rmsnorm(v + (size_t)h * hd, v + (size_t)h * hd, w, hd, eps);
}

/* One token at position pos; *next = the greedy token when want_next. */
static int step(run_t *s, int tok, int pos, int want_next, int *next)
{
	const dec_model_t *m = s->m;
	const dec_config_t *c = &m->cfg;
	int H = c->hidden, hd = c->head_dim, kvd = m->nkv * hd;
	float eps = (float)c->rms_eps;
	int rc;

	dec_model_embed(m, tok, s->x);
	for (int l = 0; l < c->n_layers; l++) {
		const dec_layer_t *L = &m->layers[l];
		float *kdst = s->kc + ((size_t)l * s->max_seq + (size_t)pos) * kvd;
		float *vdst = s->vc + ((size_t)l * s->max_seq + (size_t)pos) * kvd;

		dec_rmsnorm(s->h, s->x, L->attn_norm, H, eps);
		dec_matvec(&L->wq, s->h, s->q);
		dec_matvec(&L->wk, s->h, kdst);
		dec_matvec(&L->wv, s->h, vdst);
		if (L->bq) {
			add(s->q, L->bq, m->nh * hd);
			add(kdst, L->bk, kvd);
			add(vdst, L->bv, kvd);
		}
		if (L->q_norm) {
			head_norm(s->q, m->nh, hd, L->q_norm, eps);
			head_norm(kdst, m->nkv, hd, L->k_norm, eps);
		}
		dec_rope(s->q, m->nh, hd, pos, s->inv_freq);
		dec_rope(kdst, m->nkv, hd, pos, s->inv_freq);
		attention(s, l, pos);
		dec_matvec(&L->wo, s->att, s->part);
		if ((rc = allreduce(s, s->part, H)) < 0)
			return rc;
		if (L->bo)
			add(s->part, L->bo, H);
		add(s->x, s->part, H);

		dec_rmsnorm(s->h, s->x, L->mlp_norm, H, eps);
		dec_matvec(&L->wgate, s->h, s->gate);
		dec_matvec(&L->wup, s->h, s->up);
		dec_silu_mul(s->gate, s->up, m->inter);
		dec_matvec(&L->wdown, s->gate, s->part);
		if ((rc = allreduce(s, s->part, H)) < 0)
			return rc;
		add(s->x, s->part, H);
	}
	if (!want_next && !s->gather)
		return 0;
	dec_rmsnorm(s->h, s->x, m->final_norm, H, eps);
	dec_matvec(&m->lm_head, s->h, s->logits);
	if (s->gather) { /* full logits for the dump (rank 0 writes them) */
		for (int i = m->vocab_n; i < m->vocab_shard; i++)
			s->logits[i] = 0;
		if (m->world > 1 &&
		    (rc = gather(s, s->logits, s->gather, (size_t)m->vocab_shard, SC_F32)) < 0)
			return rc;
		if (m->world == 1)
			memcpy(s->gather, s->logits, sizeof(float) * (size_t)m->vocab_n);
		if (m->rank == 0 && s->o->dump && !s->quiet) {
			for (int r = 0; r < m->world; r++) {
				long lo = (long)r * m->vocab_shard, n = c->vocab - lo;
				if (n > m->vocab_shard)
					n = m->vocab_shard;
				if (n > 0 && fwrite(s->gather + lo, sizeof(float), (size_t)n, s->o->dump) !=
				                 (size_t)n)
					return snprintf(s->err, s->errlen, "cannot write the logits dump"), -EIO;
			}
		}
	}
	if (!want_next)
		return 0;
	{
		int32_t mine[2], all[2 * DEC_MAX_WORLD];
		float best = -INFINITY, v;
		int bi = -1;
		uint32_t u;
		if (s->o->temperature > 0 && !s->quiet) {
			/* Gumbel-max: arg-max of logit / T + g draws from softmax(logit / T) */
			double inv_t = 1.0 / s->o->temperature;
			for (int i = 0; i < m->vocab_n; i++)
				s->logits[i] = (float)(s->logits[i] * inv_t +
				                       dec_gumbel(s->o->sample_seed, (uint64_t)s->sample_step,
				                                  (uint64_t)(m->vocab_lo + i)));
		}
		for (int i = 0; i < m->vocab_n; i++)
			if (s->logits[i] > best || (bi < 0 && !isnan(s->logits[i]))) {
				best = s->logits[i];
				bi = i;
			}
		memcpy(&u, &best, 4);
		mine[0] = (int32_t)u;
		mine[1] = bi < 0 ? -1 : m->vocab_lo + bi;
		if (m->world > 1) {
			if ((rc = gather(s, mine, all, 2, SC_I32)) < 0)
				return rc;
		} else {
			all[0] = mine[0];
			all[1] = mine[1];
		}
		bi = -1;
		best = -INFINITY;
		for (int r = 0; r < m->world; r++) {
			u = (uint32_t)all[2 * r];
			memcpy(&v, &u, 4);
			if (all[2 * r + 1] >= 0 && (bi < 0 || v > best)) {
				best = v;
				bi = all[2 * r + 1];
			}
		}
		if (bi < 0 || bi >= c->vocab || isnan(best))
			return snprintf(s->err, s->errlen, "the logits are not numbers (NaN) at position %d",
			                pos),
			       -ERANGE;
		*next = bi;
	}
	return 0;
}

static void *zalloc(size_t n, int *fail)
{
	void *p = calloc(n ? n : 1, 1);
	if (!p)
		*fail = 1;
	return p;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int dec_generate(const dec_model_t *m, sc_comm_t *comm, const dec_run_opts_t *o, dec_result_t *r,
                 char *err, size_t errlen)
{
	const dec_config_t *c = &m->cfg;
	run_t s = {.m = m, .comm = comm, .o = o, .err = err, .errlen = errlen};
	int fail = 0, rc = 0, H = c->hidden, hd = c->head_dim, kvd = m->nkv * hd;
	int wide = H > m->inter ? H : m->inter;
	size_t kvsz;
	int tok, pos = 0;

	memset(r, 0, sizeof(*r));
	if (o->n_prompt < 1 || o->n_tokens < 1)
		return ERR("need at least one prompt token and one token to generate");
	if (m->world > 1 && !comm)
		return ERR("world size %d without a communicator", m->world);
	for (int i = 0; i < o->n_prompt; i++)
		if (o->prompt[i] < 0 || o->prompt[i] >= c->vocab)
			return ERR("prompt token %d is outside the vocabulary (0-%d)", o->prompt[i],
			           c->vocab - 1);
	s.max_seq = o->n_prompt + o->n_tokens;
	kvsz = (size_t)c->n_layers * (size_t)s.max_seq * (size_t)kvd * sizeof(float);
	s.x = zalloc(sizeof(float) * (size_t)H, &fail);
	s.h = zalloc(sizeof(float) * (size_t)H, &fail);
	s.part = zalloc(sizeof(float) * (size_t)H, &fail);
	s.q = zalloc(sizeof(float) * (size_t)(m->nh * hd), &fail);
	s.att = zalloc(sizeof(float) * (size_t)(m->nh * hd), &fail);
	s.gate = zalloc(sizeof(float) * (size_t)m->inter, &fail);
	s.up = zalloc(sizeof(float) * (size_t)m->inter, &fail);
	s.logits = zalloc(sizeof(float) * (size_t)m->vocab_shard, &fail);
	s.scores = zalloc(sizeof(float) * (size_t)s.max_seq, &fail);
	s.inv_freq = zalloc(sizeof(float) * (size_t)(hd / 2), &fail);
	s.kc = zalloc(kvsz, &fail);
	s.vc = zalloc(kvsz, &fail);
	s.cbuf = zalloc(sizeof(uint16_t) * (size_t)wide, &fail);
	if (o->want_logits)
		s.gather = zalloc(sizeof(float) * (size_t)m->vocab_shard * (size_t)m->world, &fail);
	r->tokens = zalloc(sizeof(int) * (size_t)o->n_tokens, &fail);
	r->step_s = zalloc(sizeof(double) * (size_t)o->n_tokens, &fail);
	if (fail) {
		rc = ERR("out of memory for the KV cache and activations");
		goto out;
	}
	dec_rope_freqs(c, s.inv_freq);
	r->n_tokens = o->n_tokens;
	r->allreduce_bytes = (size_t)H * (o->comm_dtype == SC_BF16 ? 2 : 4);
	r->allreduce_per_token = m->world > 1 ? 2 * c->n_layers : 0;
	r->gather_bytes = m->world > 1 ? 8 : 0;
	r->gather_per_token = m->world > 1 ? 1 : 0;
	r->algo_used = m->world > 1 ? (o->algo == SC_ALGO_AUTO
	                                   ? sc_comm_pick_algo(comm, r->allreduce_bytes)
	                                   : o->algo)
	                            : SC_ALGO_AUTO;
	if (comm && m->world > 1 && (rc = sc_barrier(comm)) < 0) {
		comm_fail(&s, "barrier", rc);
		goto out;
	}
	/* warm-up steps at position 0 (overwritten by the real one): first-touch
	 * costs and connection ramp-up stay out of the timings */
	s.quiet = 1;
	for (int i = 0; i < o->warmup; i++)
		if ((rc = step(&s, o->prompt[0], 0, 1, &tok)) < 0)
			goto out;
	s.quiet = 0;
	/* prefill: the prompt but its last token, one position at a time */
	{
		double t0 = dec_now();
		for (; pos < o->n_prompt - 1; pos++)
			if ((rc = step(&s, o->prompt[pos], pos, 0, NULL)) < 0)
				goto out;
		r->prefill_s = dec_now() - t0;
	}
	if (comm && m->world > 1 && (rc = sc_barrier(comm)) < 0) {
		comm_fail(&s, "barrier", rc);
		goto out;
	}
	s.t_allreduce = s.t_gather = 0;
	tok = o->prompt[o->n_prompt - 1];
	for (int i = 0; i < o->n_tokens; i++, pos++) {
		double t0 = dec_now();
		s.sample_step = i;
		if ((rc = step(&s, tok, pos, 1, &r->tokens[i])) < 0)
			goto out;
		tok = r->tokens[i];
		r->step_s[i] = dec_now() - t0;
		r->total_s += r->step_s[i];
		if (o->on_token)
			o->on_token(o->ud, i, tok);
		if (o->eos_set && tok == o->eos) {
			/* every rank has the same token: all stop here together */
			r->n_tokens = i + 1;
			r->stopped = 1;
			break;
		}
	}
	r->comm_s = s.t_allreduce + s.t_gather;
	r->allreduce_s = s.t_allreduce;
	r->compute_s = r->total_s - r->comm_s;
	/* everyone's per-token compute and communication, for the report */
	{
		double mine[2] = {r->compute_s / r->n_tokens * 1e3, r->comm_s / r->n_tokens * 1e3};
		double all[2 * DEC_MAX_WORLD];
		if (m->world > 1) {
			int64_t b[2];
			memcpy(b, mine, sizeof(b));
			if ((rc = sc_allgather(comm, b, all, 2, SC_I64)) < 0) {
				comm_fail(&s, "all-gather", rc);
				goto out;
			}
		} else {
			memcpy(all, mine, sizeof(mine));
		}
		for (int i = 0; i < m->world; i++) {
			r->ranks[i].compute_ms = all[2 * i];
			r->ranks[i].comm_ms = all[2 * i + 1];
		}
	}
out:
	free(s.x);
	free(s.h);
	free(s.part);
	free(s.q);
	free(s.att);
	free(s.gate);
	free(s.up);
	free(s.logits);
	free(s.scores);
	free(s.inv_freq);
	free(s.kc);
	free(s.vc);
	free(s.cbuf);
	free(s.gather);
	if (rc < 0)
		dec_result_free(r);
	return rc;
}

/* splitmix64's finaliser: a well-mixed 64-bit hash */
static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

double dec_gumbel(uint64_t seed, uint64_t step, uint64_t id)
{
	uint64_t h = mix64(mix64(mix64(seed + 0x9e3779b97f4a7c15ULL) ^ step) ^ id);
	/* 53 bits -> u in (0, 1), never 0 or 1 */
	double u = ((double)(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
	return -log(-log(u));
}

void dec_result_free(dec_result_t *r)
{
	free(r->tokens);
	free(r->step_s);
	r->tokens = NULL;
	r->step_s = NULL;
}

double dec_percentile(const dec_result_t *r, double p)
{
	int n = r->n_tokens, k;
	double *v, out;
	if (n < 1 || !(v = malloc(sizeof(double) * (size_t)n)))
		return 0;
	memcpy(v, r->step_s, sizeof(double) * (size_t)n);
	qsort(v, (size_t)n, sizeof(double), cmp_double);
	k = (int)ceil(p / 100.0 * n) - 1;
	k = k < 0 ? 0 : k >= n ? n - 1 : k;
	out = v[k];
	free(v);
	return out;
}

/* dec_output.c - a run's report as a table (people) or JSON (tools; keys are
 * documented in docs/inference.md), and the memory bandwidth probe the weight
 * streaming rate is compared with. */
#include "dec.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	double tps, p50, p99, mean, comp, comm, ar, share, stream, stream50;
} figures_t;

static figures_t figures(const dec_report_t *rep)
{
	const dec_result_t *r = rep->r;
	figures_t f = {0};
	int n = r->n_tokens;
	if (n < 1 || r->total_s <= 0)
		return f;
	f.tps = n / r->total_s;
	f.p50 = dec_percentile(r, 50) * 1e3;
	f.p99 = dec_percentile(r, 99) * 1e3;
	f.mean = r->total_s / n * 1e3;
	f.comp = r->compute_s / n * 1e3;
	f.comm = r->comm_s / n * 1e3;
	f.ar = r->allreduce_s / n * 1e3;
	f.share = r->comm_s / r->total_s;
	f.stream = (double)rep->m->weight_bytes * f.tps / 1e9;
	/* at the median token: what the kernels sustain, less exposed to noise */
	f.stream50 = f.p50 > 0 ? (double)rep->m->weight_bytes / (f.p50 * 1e-3) / 1e9 : 0;
	return f;
}

/* What multiplies the weights: the BLAS for f32, portable C for 16-bit. */
static void kernel_name(const dec_model_t *m, char *buf, size_t len)
{
	if (m->wdtype == DEC_F32)
		dec_blas_name(buf, len);
	else
		snprintf(buf, len, "portable C");
}

static const char *algo_used(const dec_report_t *rep)
{
	return rep->m->world > 1 ? sc_algo_name(rep->r->algo_used) : "none";
}

void dec_report_table(FILE *out, const dec_report_t *rep)
{
	const dec_model_t *m = rep->m;
	const dec_config_t *c = &m->cfg;
	const dec_result_t *r = rep->r;
	figures_t f = figures(rep);
	char blas[32];

	kernel_name(m, blas, sizeof(blas));
	fprintf(out, "model            %s (%d of %d layers, hidden %d, heads %d/%d, vocab %d, %s)\n",
	        rep->source, c->n_layers, c->total_layers, c->hidden, c->n_heads, c->n_kv_heads,
	        c->vocab, dec_dtype_name(m->wdtype));
	fprintf(out, "ranks            %d (%s, %s)\n", m->world, rep->mode,
	        m->world > 1 ? rep->transport : "no communication");
	fprintf(out, "algorithm        %s -> %s\n", sc_algo_name(rep->algo_requested), algo_used(rep));
	fprintf(out, "tokens           %d generated after %d prompt tokens\n", r->n_tokens,
	        rep->n_prompt);
	fprintf(out, "tokens/s         %.2f\n", f.tps);
	fprintf(out, "latency ms       p50 %.2f  p99 %.2f  mean %.2f\n", f.p50, f.p99, f.mean);
	fprintf(out, "per token ms     compute %.2f  communication %.2f (all-reduce %.2f)  share %.0f%%\n",
	        f.comp, f.comm, f.ar, f.share * 100);
	if (m->world > 1)
		fprintf(out, "messages/token   %d all-reduce x %zu B (%s) + %d all-gather x %zu B\n",
		        r->allreduce_per_token, r->allreduce_bytes,
		        rep->comm_dtype == SC_BF16 ? "bf16" : "f32", r->gather_per_token,
		        r->gather_bytes);
	else
		fprintf(out, "messages/token   none (one rank)\n");
	fprintf(out, "weights/token    %.3f GB on rank 0, streamed at %.2f GB/s (%.2f at p50; %s)\n",
	        (double)m->weight_bytes / 1e9, f.stream, f.stream50, blas);
	if (rep->memcpy_gbs > 0)
		fprintf(out, "memory           memcpy %.2f GB/s, read %.2f GB/s: streaming(p50)/memcpy %.2f\n",
		        rep->memcpy_gbs, rep->read_gbs, f.stream50 / rep->memcpy_gbs);
	if (m->world > 1) {
		fprintf(out, "per rank ms      ");
		for (int i = 0; i < m->world; i++)
			fprintf(out, "%s%d: %.2f+%.2f", i ? "  " : "", i, r->ranks[i].compute_ms,
			        r->ranks[i].comm_ms);
		fprintf(out, "  (compute+communication)\n");
	}
	fprintf(out, "generated        ");
	for (int i = 0; i < r->n_tokens; i++)
		fprintf(out, "%s%d", i ? "," : "", r->tokens[i]);
	fprintf(out, "\n");
}

void dec_report_json(FILE *out, const dec_report_t *rep)
{
	const dec_model_t *m = rep->m;
	const dec_config_t *c = &m->cfg;
	const dec_result_t *r = rep->r;
	figures_t f = figures(rep);
	json_t *o = json_object(), *a, *ranks = json_array();
	char blas[32];

	kernel_name(m, blas, sizeof(blas));
	json_object_set_new(o, "model", json_string(rep->source));
	json_object_set_new(o, "shape",
	                    json_pack("{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i}", "hidden_size", c->hidden,
	                              "intermediate_size", c->inter, "layers", c->n_layers,
	                              "total_layers", c->total_layers, "heads", c->n_heads,
	                              "kv_heads", c->n_kv_heads, "head_dim", c->head_dim,
	                              "vocab_size", c->vocab));
	json_object_set_new(o, "weights_dtype", json_string(dec_dtype_name(m->wdtype)));
	json_object_set_new(o, "world_size", json_integer(m->world));
	json_object_set_new(o, "mode", json_string(rep->mode));
	json_object_set_new(o, "transport", json_string(m->world > 1 ? rep->transport : "none"));
	json_object_set_new(o, "algo_requested", json_string(sc_algo_name(rep->algo_requested)));
	json_object_set_new(o, "algo", json_string(algo_used(rep)));
	json_object_set_new(o, "comm_dtype", json_string(rep->comm_dtype == SC_BF16 ? "bf16" : "f32"));
	json_object_set_new(o, "prompt_tokens", json_integer(rep->n_prompt));
	json_object_set_new(o, "tokens", json_integer(r->n_tokens));
	json_object_set_new(o, "tokens_per_s", json_real(f.tps));
	json_object_set_new(o, "latency_ms",
	                    json_pack("{s:f,s:f,s:f}", "p50", f.p50, "p99", f.p99, "mean", f.mean));
	json_object_set_new(o, "compute_ms_per_token", json_real(f.comp));
	json_object_set_new(o, "comm_ms_per_token", json_real(f.comm));
	json_object_set_new(o, "allreduce_ms_per_token", json_real(f.ar));
	json_object_set_new(o, "comm_share", json_real(f.share));
	json_object_set_new(o, "messages_per_token",
	                    json_pack("{s:{s:i,s:I},s:{s:i,s:I}}", "allreduce", "count",
	                              r->allreduce_per_token, "bytes", (json_int_t)r->allreduce_bytes,
	                              "allgather", "count", r->gather_per_token, "bytes",
	                              (json_int_t)r->gather_bytes));
	json_object_set_new(o, "weight_bytes_per_token", json_integer((json_int_t)m->weight_bytes));
	json_object_set_new(o, "weight_stream_gbs", json_real(f.stream));
	json_object_set_new(o, "weight_stream_p50_gbs", json_real(f.stream50));
	if (rep->memcpy_gbs > 0) {
		json_object_set_new(o, "memcpy_gbs", json_real(rep->memcpy_gbs));
		json_object_set_new(o, "read_gbs", json_real(rep->read_gbs));
		json_object_set_new(o, "stream_vs_memcpy", json_real(f.stream50 / rep->memcpy_gbs));
	}
	json_object_set_new(o, "kernel", json_string(blas));
	json_object_set_new(o, "load_s", json_real(rep->load_s));
	json_object_set_new(o, "prefill_s", json_real(r->prefill_s));
	for (int i = 0; i < m->world; i++)
		json_array_append_new(ranks, json_pack("{s:i,s:f,s:f}", "rank", i,
		                                       "compute_ms_per_token", r->ranks[i].compute_ms,
		                                       "comm_ms_per_token", r->ranks[i].comm_ms));
	json_object_set_new(o, "ranks", ranks);
	a = json_array();
	for (int i = 0; i < r->n_tokens; i++)
		json_array_append_new(a, json_integer(r->tokens[i]));
	json_object_set_new(o, "generated", a);
	json_dumpf(o, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
	fputc('\n', out);
	json_decref(o);
}

int dec_measure_membw(size_t bytes, double *memcpy_gbs, double *read_gbs)
{
	size_t n = bytes / sizeof(uint64_t);
	uint64_t *a, *b;
	double best_c = 1e30, best_r = 1e30;
	volatile uint64_t sink = 0;

	if (posix_memalign((void **)&a, 64, bytes) || posix_memalign((void **)&b, 64, bytes))
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) /* fault both in */
		a[i] = i, b[i] = 0;
	for (int it = 0; it < 5; it++) {
		double t0 = dec_now(), t1;
		uint64_t s = 0;
		memcpy(b, a, bytes);
		t1 = dec_now();
		if (t1 - t0 < best_c)
			best_c = t1 - t0;
		for (size_t i = 0; i < n; i++)
			s += b[i];
		sink ^= s;
		t0 = dec_now() - t1;
		if (t0 < best_r)
			best_r = t0;
	}
	(void)sink;
	free(a);
	free(b);
	*memcpy_gbs = (double)bytes / best_c / 1e9;
	*read_gbs = (double)bytes / best_r / 1e9;
	return 0;
}

int dec_parse_ids(const char *s, int **ids, int *n)
{
	int cap = 8, k = 0;
	int *v = malloc(sizeof(int) * (size_t)cap);
	if (!v)
		return -ENOMEM;
	while (*s) {
		char *end;
		long x;
		errno = 0;
		x = strtol(s, &end, 10);
		if (errno || end == s || x < 0 || x > (1L << 30) || (*end && *end != ',')) {
			free(v);
			return -EINVAL;
		}
		if (k == cap) {
			int *nv = realloc(v, sizeof(int) * (size_t)(cap *= 2));
			if (!nv) {
				free(v);
				return -ENOMEM;
			}
			v = nv;
		}
		v[k++] = (int)x;
		s = *end ? end + 1 : end;
	}
	if (!k) {
		free(v);
		return -EINVAL;
	}
	*ids = v;
	*n = k;
	return 0;
}

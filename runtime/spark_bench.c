/* spark-bench - all-reduce benchmark for libsparkcoll, nccl-tests style.
 *
 *   spark-bench allreduce -b 8 -e 64M -f 2 [--algo auto|oneshot|relay|doubling|ring|all]
 *       [--dtype f32|f16|bf16|i32|i64] [--op sum|max|min] [--iters N]
 *       [--warmup N] [--inplace] [--check 0|1] [-o table|json]
 *       [--local N | --rank R --peers 0=a:p,1=a:p,...]
 *
 * Without --local or --peers it runs as one rank of a job and reads the job
 * environment (SPARK_* or RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT). Rank 0
 * prints; time is the slowest rank's average per call. */
#include "sc_internal.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
	size_t minb, maxb;
	double factor;
	sc_algo_t algo;
	sc_dtype_t dtype;
	sc_op_t op;
	int iters, warmup, local, inplace, check, json, rank, all;
	const char *peers;
	size_t sizes[64], iter_bytes;
	int nsizes;
} args_t;

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: spark-bench allreduce [-b MINBYTES] [-e MAXBYTES] [-f FACTOR]\n"
	        "         [--algo auto|oneshot|relay|doubling|ring|all] [--dtype f32|f16|bf16|i32|i64]\n"
	        "         [--op sum|max|min]\n"
	        "         [--iters N] [--warmup N] [--inplace] [--check 0|1] [-o table|json]\n"
	        "         [--sizes S1,S2,...] [--iter-bytes B]\n"
	        "         [--local N | --rank R --peers 0=addr:port,1=addr:port,...]\n"
	        "  --local N   run N ranks on this machine over loopback TCP\n"
	        "  --algo all  auto, one-shot (when on), relay, doubling (when it can run:\n"
	        "              4 ranks, or 8, 16... with one-shot on) and ring side by side\n"
	        "              (interleaved rounds, best kept)\n"
	        "  (neither)   run as one rank of a job: SPARK_RANK/SPARK_WORLD_SIZE/SPARK_PEERS\n"
	        "              or RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT\n"
	        "  sizes accept K, M, G suffixes; busbw = algbw * 2(n-1)/n\n"
	        "  --sizes     explicit size list instead of -b/-e/-f\n"
	        "  --iter-bytes B  fewer iterations for large sizes: about B bytes per size (min 3)\n");
}

static int64_t val(int rank, size_t i)
{
	return (int64_t)((i * 13u + (size_t)rank * 7u) % 31u) - 15;
}

static void fill(void *buf, size_t count, sc_dtype_t dt, int rank)
{
	for (size_t i = 0; i < count; i++)
		sc_dtype_set(buf, i, dt, (double)val(rank, i));
}

static int64_t count_wrong(const void *buf, size_t count, sc_dtype_t dt, sc_op_t op, int n)
{
	int64_t wrong = 0;
	for (size_t i = 0; i < count; i++) {
		int64_t e = val(0, i);
		for (int r = 1; r < n; r++) {
			int64_t v = val(r, i);
			e = op == SC_SUM ? e + v : op == SC_MAX ? (v > e ? v : e) : (v < e ? v : e);
		}
		if (sc_dtype_get(buf, i, dt) != (double)e)
			wrong++;
	}
	return wrong;
}

/* Time `iters` calls; this rank's microseconds per call, or a negative code. */
static int64_t time_calls(sc_comm_t *c, const args_t *a, sc_algo_t algo, void *sb, void *rb,
                          size_t count, int iters, int *rc)
{
	uint64_t t0;
	if ((*rc = sc_barrier(c)) < 0)
		return -1;
	t0 = sc_now_ns();
	for (int i = 0; i < iters && *rc == 0; i++)
		*rc = sc_allreduce_algo(c, sb, rb, count, a->dtype, a->op, algo);
	return (int64_t)((sc_now_ns() - t0) / (uint64_t)iters);
}

static int run(sc_comm_t *c, const args_t *a)
{
	int n = sc_comm_size(c), rank = sc_comm_rank(c), rc = 0, first = 1;
	size_t es = sc_dtype_size(a->dtype);
	uint8_t *sb = NULL, *rb = NULL;
	sc_info_t info;
	int64_t total_wrong = 0;
	sc_algo_t algos[SC_ALGO_COUNT];
	int nalgo = 0, rounds;

	sc_comm_info(c, &info);
	if (a->all) { /* side by side, interleaved; one-shot only where it runs */
		algos[nalgo++] = SC_ALGO_AUTO;
		if (info.oneshot_enabled)
			algos[nalgo++] = SC_ALGO_ONESHOT;
		algos[nalgo++] = SC_ALGO_RELAY;
		if ((info.oneshot_enabled || n == 4) && n >= 4 && (n & (n - 1)) == 0)
			algos[nalgo++] = SC_ALGO_DOUBLING;
		algos[nalgo++] = SC_ALGO_RING;
	} else {
		algos[nalgo++] = a->algo;
	}
	rounds = nalgo > 1 ? 3 : 1;
	sb = malloc(a->maxb + es);
	rb = a->inplace ? sb : malloc(a->maxb + es);
	if (!sb || !rb) {
		fprintf(stderr, "spark-bench: out of memory for %zu bytes\n", a->maxb);
		free(sb);
		if (!a->inplace)
			free(rb);
		return 1;
	}
	memset(sb, 0, a->maxb + es);
	if (!a->inplace)
		memset(rb, 0, a->maxb + es);
	if (rank == 0) {
		if (a->json) {
			printf("{\"tool\":\"spark-bench\",\"collective\":\"allreduce\",\"world_size\":%d,"
			       "\"transport\":\"%s\",\"transport_reason\":\"%s\",\"oneshot_enabled\":%s,"
			       "\"small_algo\":\"%s\",\"oneshot_max\":%zu,\"calibrated\":%s,"
			       "\"decision\":\"%s\",\"inplace\":%s,\"results\":[",
			       n, info.transport, info.transport_reason,
			       info.oneshot_enabled ? "true" : "false", sc_algo_name(info.small_algo),
			       info.oneshot_max, info.calibrated ? "true" : "false", info.decision,
			       a->inplace ? "true" : "false");
		} else {
			printf("# spark-bench allreduce: %d ranks, transport %s (%s)\n", n, info.transport,
			       info.transport_reason);
			printf("# %s; auto uses %s up to %zu bytes%s\n", info.decision,
			       sc_algo_name(info.small_algo), info.oneshot_max,
			       info.calibrated ? " (calibrated)" : "");
			printf("# %12s %12s %5s %5s %8s %11s %11s %11s %7s\n", "size", "count", "type",
			       "redop", "algo", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
		}
		fflush(stdout);
	}
	for (size_t bytes = a->nsizes ? a->sizes[0] : a->minb, si = 0;
	     a->nsizes ? si < (size_t)a->nsizes : bytes <= a->maxb;) {
		size_t count = bytes / es;
		int64_t t[SC_ALGO_COUNT], w[SC_ALGO_COUNT];
		int iters = a->iters, warmup = a->warmup;
		if (count == 0)
			goto next;
		if (a->iter_bytes && (size_t)iters * count * es > a->iter_bytes) {
			size_t k = a->iter_bytes / (count * es);
			iters = k < 3 ? 3 : (int)k;
			if (warmup > iters)
				warmup = iters;
		}
		/* split the iterations over the rounds; keep each algorithm's best round */
		if (rounds > 1)
			iters = iters / rounds < 2 ? 2 : iters / rounds;
		fill(sb, count, a->dtype, rank);
		for (int k = 0; k < nalgo; k++) {
			t[k] = INT64_MAX;
			w[k] = 0;
			for (int i = 0; i < warmup && rc == 0; i++)
				rc = sc_allreduce_algo(c, sb, rb, count, a->dtype, a->op, algos[k]);
		}
		for (int r = 0; r < rounds && rc == 0; r++)
			for (int k = 0; k < nalgo && rc == 0; k++) {
				int64_t us = time_calls(c, a, algos[k], sb, rb, count, iters, &rc);
				if (rc == 0 && us < t[k])
					t[k] = us;
			}
		for (int k = 0; k < nalgo && rc == 0 && a->check; k++) {
			fill(sb, count, a->dtype, rank);
			rc = sc_allreduce_algo(c, sb, rb, count, a->dtype, a->op, algos[k]);
			if (rc == 0)
				w[k] = count_wrong(rb, count, a->dtype, a->op, n);
		}
		if (rc == 0)
			rc = sc_allreduce(c, t, t, (size_t)nalgo, SC_I64, SC_MAX);
		if (rc == 0)
			rc = sc_allreduce(c, w, w, (size_t)nalgo, SC_I64, SC_SUM);
		if (rc < 0) {
			fprintf(stderr, "spark-bench: rank %d: allreduce of %zu bytes failed: %s: %s\n",
			        rank, bytes, sc_strerror(rc), sc_comm_last_error(c));
			break;
		}
		for (int k = 0; k < nalgo; k++) {
			sc_algo_t used = algos[k] == SC_ALGO_AUTO ? sc_comm_pick_algo(c, count * es)
			                                          : algos[k];
			double us = (double)t[k] / 1e3;
			double algbw = us > 0 ? (double)(count * es) / us / 1e3 : 0;
			double busbw = algbw * 2.0 * (n - 1) / n;
			if (used == SC_ALGO_DOUBLING && ((!info.oneshot_enabled && n > 4) || (n & (n - 1))))
				used = SC_ALGO_ONESHOT; /* what the library runs instead */
			if (used == SC_ALGO_ONESHOT && !info.oneshot_enabled)
				used = SC_ALGO_RELAY;
			total_wrong += w[k];
			if (rank != 0)
				continue;
			if (a->json)
				printf("%s{\"bytes\":%zu,\"count\":%zu,\"type\":\"%s\",\"op\":\"%s\","
				       "\"algo\":\"%s\",\"requested\":\"%s\",\"time_us\":%.3f,"
				       "\"algbw_gbs\":%.4f,\"busbw_gbs\":%.4f,\"wrong\":%lld}",
				       first ? "" : ",", count * es, count, sc_dtype_name(a->dtype),
				       sc_op_name(a->op), sc_algo_name(used), sc_algo_name(algos[k]), us,
				       algbw, busbw, (long long)w[k]);
			else
				printf("  %12zu %12zu %5s %5s %8s %11.2f %11.3f %11.3f %7lld\n", count * es,
				       count, sc_dtype_name(a->dtype), sc_op_name(a->op),
				       nalgo > 1 && algos[k] == SC_ALGO_AUTO ? "auto" : sc_algo_name(used),
				       us, algbw, busbw, (long long)w[k]);
			first = 0;
		}
		if (rank == 0)
			fflush(stdout);
	next:
		if (a->nsizes) {
			if (++si < (size_t)a->nsizes)
				bytes = a->sizes[si];
		} else {
			size_t nb = (size_t)((double)bytes * a->factor);
			if (nb <= bytes)
				nb = bytes + 1;
			bytes = nb;
		}
	}
	if (rank == 0 && a->json) {
		printf("],\"wrong\":%lld,\"ok\":%s}\n", (long long)total_wrong,
		       rc == 0 && total_wrong == 0 ? "true" : "false");
		fflush(stdout);
	}
	free(sb);
	if (!a->inplace)
		free(rb);
	return rc < 0 || total_wrong ? 1 : 0;
}

static int local_rank(int rank, int n, const char *const *peers, int listen_fd, void *arg)
{
	const args_t *a = arg;
	sc_options_t o;
	sc_comm_t *c = NULL;
	int rc;

	sc_options_default(&o);
	if (sc_options_from_env(&o) < 0)
		return 2;
	o.listen_fd = listen_fd;
	rc = sc_comm_init(&c, rank, n, peers, &o);
	if (rc < 0) {
		fprintf(stderr, "spark-bench: rank %d: init failed: %s\n", rank, sc_strerror(rc));
		return 1;
	}
	rc = run(c, a);
	sc_comm_destroy(c);
	return rc;
}

int main(int argc, char **argv)
{
	args_t a = {.minb = 8, .maxb = 64u << 20, .factor = 2, .algo = SC_ALGO_AUTO,
	            .dtype = SC_F32, .op = SC_SUM, .iters = 20, .warmup = 5, .check = 1,
	            .rank = -1};
	static const struct option lo[] = {
		{"minbytes", required_argument, 0, 'b'}, {"maxbytes", required_argument, 0, 'e'},
		{"stepfactor", required_argument, 0, 'f'}, {"algo", required_argument, 0, 'a'},
		{"dtype", required_argument, 0, 'd'}, {"op", required_argument, 0, 'p'},
		{"iters", required_argument, 0, 'n'}, {"warmup", required_argument, 0, 'w'},
		{"local", required_argument, 0, 'l'}, {"inplace", no_argument, 0, 'i'},
		{"check", required_argument, 0, 'c'}, {"output", required_argument, 0, 'o'},
		{"rank", required_argument, 0, 'r'}, {"peers", required_argument, 0, 'P'},
		{"sizes", required_argument, 0, 'S'}, {"iter-bytes", required_argument, 0, 'B'},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	int ch, rc;

	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (strcmp(argv[1], "allreduce") != 0) {
		fprintf(stderr, "spark-bench: unknown benchmark '%s' (try: spark-bench allreduce --help)\n",
		        argv[1]);
		return 2;
	}
	optind = 2;
	while ((ch = getopt_long(argc, argv, "b:e:f:a:d:p:n:w:l:ic:o:r:P:h", lo, NULL)) != -1) {
		switch (ch) {
		case 'b':
			if (sc_parse_size(optarg, &a.minb) < 0)
				goto bad;
			break;
		case 'e':
			if (sc_parse_size(optarg, &a.maxb) < 0)
				goto bad;
			break;
		case 'f':
			a.factor = atof(optarg);
			if (a.factor <= 1.0)
				goto bad;
			break;
		case 'a':
			a.all = strcmp(optarg, "all") == 0;
			if (a.all)
				a.algo = SC_ALGO_AUTO;
			else if (sc_algo_parse(optarg, &a.algo) < 0)
				goto bad;
			break;
		case 'd':
			if (sc_dtype_parse(optarg, &a.dtype) < 0)
				goto bad;
			break;
		case 'p':
			if (sc_op_parse(optarg, &a.op) < 0)
				goto bad;
			break;
		case 'n': a.iters = atoi(optarg); if (a.iters < 1) goto bad; break;
		case 'w': a.warmup = atoi(optarg); if (a.warmup < 0) goto bad; break;
		case 'l': a.local = atoi(optarg); if (a.local < 1 || a.local > 64) goto bad; break;
		case 'i': a.inplace = 1; break;
		case 'c': a.check = atoi(optarg) != 0; break;
		case 'o':
			if (strcmp(optarg, "json") == 0)
				a.json = 1;
			else if (strcmp(optarg, "table") != 0)
				goto bad;
			break;
		case 'r': a.rank = atoi(optarg); break;
		case 'P': a.peers = optarg; break;
		case 'S': {
			char *dup = strdup(optarg), *save = NULL;
			a.nsizes = 0;
			for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
				if (a.nsizes >= 64 || sc_parse_size(t, &a.sizes[a.nsizes]) < 0) {
					free(dup);
					goto bad;
				}
				a.nsizes++;
			}
			free(dup);
			if (!a.nsizes)
				goto bad;
			break;
		}
		case 'B':
			if (sc_parse_size(optarg, &a.iter_bytes) < 0)
				goto bad;
			break;
		case 'h': usage(stdout); return 0;
		default: goto bad;
		}
	}
	if (optind != argc || a.minb > a.maxb || a.maxb > ((size_t)1 << 34))
		goto bad;
	for (int i = 0; i < a.nsizes; i++) {
		if (a.sizes[i] > ((size_t)1 << 34))
			goto bad;
		if (i == 0 || a.sizes[i] > a.maxb)
			a.maxb = a.sizes[i];
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (a.local) {
		rc = sc_local_run(a.local, local_rank, &a, 0);
		if (rc)
			fprintf(stderr, "spark-bench: a local rank failed (status %d)\n", rc);
		return rc ? 1 : 0;
	}
	{
		sc_comm_t *c = NULL;
		if (a.peers) {
			char **peers = NULL;
			sc_options_t o;
			int n = 1;
			for (const char *p = a.peers; *p; p++)
				n += *p == ',';
			if (a.rank < 0 || a.rank >= n || sc_parse_peers(a.peers, n, &peers) < 0) {
				fprintf(stderr, "spark-bench: --peers must list rank=addr:port for every rank "
				                "and --rank must be one of them\n");
				return 2;
			}
			sc_options_default(&o);
			if (sc_options_from_env(&o) < 0) {
				sc_free_peers(peers, n);
				fprintf(stderr, "spark-bench: bad SPARK_COLL_* value\n");
				return 2;
			}
			rc = sc_comm_init(&c, a.rank, n, (const char *const *)peers, &o);
			sc_free_peers(peers, n);
		} else {
			rc = sc_comm_init_from_env(&c);
		}
		if (rc < 0) {
			fprintf(stderr, "spark-bench: cannot join the job: %s\n", sc_strerror(rc));
			return 1;
		}
		rc = run(c, &a);
		sc_comm_destroy(c);
		return rc;
	}
bad:
	fprintf(stderr, "spark-bench: bad arguments (try: spark-bench allreduce --help)\n");
	return 2;
}

/* Benchmarks run as jobs on a group (docs/runtime.md, docs/inference.md):
 * bench allreduce (spark-bench) and bench decode (spark-decode), through the
 * job runner of cmd_jobs.c; bench decode's table is in print_jobs.c. */
#include "cli.h"

#include "proto.h"
#include "util.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OPT_END CLI_OPT_END

/* ---- runtime tools -------------------------------------------------------------- */

/* A runtime tool (spark-bench, spark-decode): env VAR, next to sparkctl, the
 * build tree's ../runtime/SUBDIR, then PATH. The same path must hold on every
 * node. */
static void find_tool(const char *var, const char *name, const char *subdir, char *out, size_t len)
{
	const char *env = getenv(var);
	if (env && *env) {
		snprintf(out, len, "%s", env);
		return;
	}
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n > 0) {
		self[n] = '\0';
		char *slash = strrchr(self, '/');
		if (slash)
			*slash = '\0';
		for (size_t i = 0; i < 2; i++) {
			char cand[4400], real[4096];
			if (i == 0)
				snprintf(cand, sizeof cand, "%s/%s", self, name);
			else
				snprintf(cand, sizeof cand, "%s/../runtime/%s%s%s", self, subdir,
					 *subdir ? "/" : "", name);
			if (access(cand, X_OK) == 0 && realpath(cand, real)) {
				snprintf(out, len, "%s", real);
				return;
			}
		}
	}
	snprintf(out, len, "%s", name);
}

static void find_bench(char *out, size_t len) { find_tool("SPARK_BENCH", "spark-bench", "", out, len); }

/* The job_run request of a bench: argv cmd (stolen) launched natively on
 * group, on its first nnodes nodes (0: all of them). */
static json_t *bench_job(const char *group, const char *name, long rpn, json_t *cmd,
			 int64_t timeout, long nnodes)
{
	json_t *args = json_pack("{s:s, s:s, s:s, s:i, s:o, s:[], s:I}", "group", group, "name", name,
				 "launcher", "native", "ranks_per_node", (int)rpn, "argv", cmd, "env",
				 "timeout_s", (json_int_t)timeout);
	if (nnodes > 0)
		json_object_set_new(args, "nnodes", json_integer(nnodes));
	cli_add_caller_env(args);
	return args;
}

int cmd_bench_allreduce(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {{"group", required_argument, NULL, 'g'},
					   {"ranks-per-node", required_argument, NULL, 'k'},
					   {"timeout", required_argument, NULL, 't'},
					   OPT_END};
	const char *group = NULL;
	long rpn = 1;
	int64_t timeout = 600;
	int ch;
	optind = 0;
	opterr = 0;
	/* our flags first; everything else (and after --) goes to spark-bench */
	json_t *rest = json_array();
	while (optind < argc) {
		int before = optind;
		ch = getopt_long(argc, argv, "+", lo, NULL);
		if (ch == -1) {
			if (optind < argc && strcmp(argv[optind - 1], "--") != 0)
				json_array_append_new(rest, json_string(argv[optind++]));
			else
				break;
			continue;
		}
		char *end;
		if (ch == 'g') {
			group = optarg;
		} else if (ch == 'k') {
			rpn = strtol(optarg, &end, 10);
			if (*end || rpn < 1 || rpn > 64) {
				json_decref(rest);
				return cli_usage(ctx, "--ranks-per-node: '%s' is not a number from 1 to 64",
						 optarg);
			}
		} else if (ch == 't') {
			if (util_parse_duration(optarg, &timeout) < 0) {
				json_decref(rest);
				return cli_usage(ctx, "--timeout: '%s' is not a duration", optarg);
			}
		} else { /* not ours: spark-bench's, with its value if it has one */
			for (int i = before; i < optind; i++)
				json_array_append_new(rest, json_string(argv[i]));
		}
	}
	for (; optind < argc; optind++)
		json_array_append_new(rest, json_string(argv[optind]));
	if (!group) {
		json_decref(rest);
		return cli_usage(ctx, "missing --group G (a group from 'sparkctl group ls', or all)");
	}
	char bench[4096];
	find_bench(bench, sizeof bench);
	json_t *cmd = json_pack("[s, s]", bench, "allreduce");
	json_array_extend(cmd, rest);
	json_decref(rest);
	return cli_run_foreground(ctx, bench_job(group, "bench-allreduce", rpn, cmd, timeout, 0), 0);
}

/* ---- bench decode ------------------------------------------------------------- */

/* Heads, KV heads and MLP columns of a catalog shape from the local
 * `spark-decode --list-shapes` table; -1 when it cannot be known here. */
static int shape_splits(const char *decode, const char *shape, long *heads, long *kv, long *inter)
{
	char cmd[4400];
	snprintf(cmd, sizeof cmd, "'%s' --list-shapes 2>/dev/null", decode);
	if (strchr(decode, '\'') || strchr(shape, '\''))
		return -1;
	FILE *f = popen(cmd, "r");
	if (!f)
		return -1;
	char line[512], name[128];
	long hidden, layers;
	int found = -1;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "%127s %ld %ld %ld %ld/%ld", name, &hidden, inter, &layers, heads, kv) ==
			6 &&
		    strcmp(name, shape) == 0)
			found = 0;
	pclose(f);
	return found;
}

/* rank 0's JSON report in its output (libsparkcoll's stderr line comes first) */
static json_t *decode_report(const char *out)
{
	const char *p = out;
	while (p && *p && *p != '{') {
		p = strchr(p, '\n');
		p = p ? p + 1 : NULL;
	}
	return p && *p ? json_loads(p, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
}

int cmd_bench_decode(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {{"group", required_argument, NULL, 'g'},
					   {"model", required_argument, NULL, 'm'},
					   {"layers", required_argument, NULL, 'l'},
					   {"algo", required_argument, NULL, 'a'},
					   {"tokens", required_argument, NULL, 'n'},
					   {"timeout", required_argument, NULL, 't'},
					   OPT_END};
	const char *group = NULL, *model = NULL, *algo = "auto";
	long layers = 0, tokens = 32;
	int64_t timeout = 600;
	int ch, rc = 0;
	optind = 0;
	while ((ch = cli_next_opt(ctx, argc, argv, lo, &rc)) != -1) {
		if (ch == -2)
			return rc;
		char *end;
		if (ch == 'g') {
			group = optarg;
		} else if (ch == 'm') {
			model = optarg;
		} else if (ch == 'a') {
			static const char *const algos[] = {"auto", "oneshot", "ring", "relay", "doubling"};
			bool known = false;
			for (size_t k = 0; k < sizeof algos / sizeof algos[0]; k++)
				known |= strcmp(optarg, algos[k]) == 0;
			if (!known)
				return cli_usage(ctx, "--algo: '%s' is not auto, oneshot, ring, relay or doubling",
						 optarg);
			algo = optarg;
		} else if (ch == 'l' || ch == 'n') {
			long v = strtol(optarg, &end, 10);
			if (*end || v < 1 || v > 1000000)
				return cli_usage(ctx, "--%s: '%s' is not a positive number",
						 ch == 'l' ? "layers" : "tokens", optarg);
			*(ch == 'l' ? &layers : &tokens) = v;
		} else if (ch == 't') {
			if (util_parse_duration(optarg, &timeout) < 0)
				return cli_usage(ctx, "--timeout: '%s' is not a duration", optarg);
		}
	}
	if (optind < argc)
		return cli_usage(ctx, "unexpected argument '%s'", argv[optind]);
	if (!group)
		return cli_usage(ctx, "missing --group G (a group from 'sparkctl group ls', or all)");
	if (!model)
		return cli_usage(ctx, "missing --model SHAPE (a shape of 'spark-decode --list-shapes')");

	/* the group's size decides the world sizes: 1, 2, 4 ... and N */
	json_t *g = NULL;
	if (cli_call(ctx, "group_show", json_pack("{s:s}", "name", group), &g, 0))
		return 1;
	long n = (long)json_array_size(json_object_get(g, "nodes"));
	json_decref(g);
	if (n < 1)
		return cli_fail("group %s has no nodes", group);
	char decode[4096];
	find_tool("SPARK_DECODE", "spark-decode", "decode", decode, sizeof decode);
	long heads = 0, kv = 0, inter = 0;
	bool known = shape_splits(decode, model, &heads, &kv, &inter) == 0;
	long sizes[16];
	int ns = 0;
	for (long w = 1; ns < 16; w = w * 2 < n ? w * 2 : n) {
		if (!known || (heads % w == 0 && kv % w == 0 && inter % w == 0))
			sizes[ns++] = w;
		if (w == n)
			break;
	}
	if (known && sizes[ns - 1] != n)
		fprintf(stderr,
			"sparkctl: %s does not split over %ld ranks (%ld heads, %ld KV heads, %ld MLP "
			"columns); the table stops at %ld\n",
			model, n, heads, kv, inter, sizes[ns - 1]);

	json_t *rows = json_array();
	json_t *first_tokens = NULL;
	bool same = true;
	double base = 0;
	for (int k = 0; k < ns; k++) {
		char l[24], t[24];
		snprintf(l, sizeof l, "%ld", layers);
		snprintf(t, sizeof t, "%ld", tokens);
		json_t *cmd = json_pack("[s, s, s, s, s, s, s, s, s]", decode, "--synthetic", model,
					"--algo", algo, "--tokens", t, "-o", "json");
		if (layers > 0) {
			json_array_append_new(cmd, json_string("--layers"));
			json_array_append_new(cmd, json_string(l));
		}
		struct { char *buf; size_t len; } out = {0};
		rc = cli_run_capture(ctx, bench_job(group, "bench-decode", 1, cmd, timeout, sizes[k]), 0,
				     &out.buf, &out.len);
		json_t *rep = rc == 0 ? decode_report(out.buf) : NULL;
		if (!rep) {
			if (out.len)
				fwrite(out.buf, 1, out.len, stderr);
			free(out.buf);
			json_decref(rows);
			json_decref(first_tokens);
			if (rc == 0)
				return cli_fail("spark-decode on %ld node(s) of %s printed no report", sizes[k],
						group);
			return rc;
		}
		free(out.buf);
		double tps = json_number_value(json_object_get(rep, "tokens_per_s"));
		if (k == 0)
			base = sizes[0] == 1 ? tps : 0;
		json_t *gen = json_object_get(rep, "generated");
		if (!first_tokens)
			first_tokens = json_incref(gen);
		else if (!json_equal(first_tokens, gen))
			same = false;
		json_array_append_new(
		    rows, json_pack("{s:i, s:f, s:o, s:f, s:f, s:s, s:s, s:O}", "world_size",
				    (int)sizes[k], "tokens_per_s", tps, "speedup",
				    base > 0 ? json_real(tps / base) : json_null(), "comm_share",
				    json_number_value(json_object_get(rep, "comm_share")), "p50_ms",
				    json_number_value(json_object_get(json_object_get(rep, "latency_ms"),
								      "p50")),
				    "algo", cli_jstr(rep, "algo"), "transport", cli_jstr(rep, "transport"),
				    "generated", gen ? gen : json_null()));
		json_decref(rep);
	}
	json_decref(first_tokens);
	json_t *o = json_pack("{s:s, s:s, s:i, s:s, s:I, s:b, s:o}", "group", group, "model", model,
			      "layers", (int)layers, "algo", algo, "tokens", (json_int_t)tokens,
			      "same_tokens", same, "rows", rows);
	cli_output(ctx, NULL, o, NULL);
	json_decref(o);
	return same ? 0 : 1;
}

/* Text writers of groups and jobs (docs/jobs.md): group create/ls/show/rm,
 * run --detach, job ls/show/cancel, and bench decode's table. The streams
 * (run in the foreground, job logs, exec) print as they come, in cmd_jobs.c. */
#include "output.h"
#include "print.h"

#include "util.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static void join_names(json_t *arr, char *buf, size_t len)
{
	buf[0] = '\0';
	size_t i;
	json_t *v;
	json_array_foreach(arr, i, v) {
		size_t u = strlen(buf);
		if (json_is_string(v))
			snprintf(buf + u, len - u, "%s%s", i ? "," : "", json_string_value(v));
		else
			snprintf(buf + u, len - u, "%s%lld", i ? "," : "", (long long)json_integer_value(v));
	}
	if (!buf[0])
		snprintf(buf, len, "-");
}

static void table_done(out_table *t)
{
	out_table_print(t, stdout);
	out_table_free(t);
}

/* ---- group ------------------------------------------------------------------- */

void cli_text_group_create(const struct cli_answer *a)
{
	json_t *d = a->data;
	char names[512];
	join_names(json_object_get(d, "nodes"), names, sizeof names);
	printf("Group %s: %s (%s%s, ranks in this order).\n", cli_jstr(d, "name"), names, cli_jstr(d, "shape"),
	       json_is_true(json_object_get(d, "shared")) ? ", shared" : "");
	if (*cli_jstr(d, "note") && strcmp(cli_jstr(d, "note"), "-") != 0)
		printf("Note: %s.\n", cli_jstr(d, "note"));
}

void cli_text_group_ls(const struct cli_answer *a)
{
	static const char *const hdr[] = {"NAME", "NODES", "SHAPE", "SHARED", "JOBS", "MEMBERS"};
	out_table *t = out_table_new(6, hdr);
	size_t i;
	json_t *g;
	json_array_foreach(json_object_get(a->data, "groups"), i, g) {
		char n[16], names[512], jobs[128];
		snprintf(n, sizeof n, "%zu", json_array_size(json_object_get(g, "nodes")));
		join_names(json_object_get(g, "nodes"), names, sizeof names);
		join_names(json_object_get(g, "jobs"), jobs, sizeof jobs);
		const char *row[] = {cli_jstr(g, "name"), n, cli_jstr(g, "shape"),
				     json_is_true(json_object_get(g, "builtin"))  ? "built-in"
				     : json_is_true(json_object_get(g, "shared")) ? "yes"
										  : "no",
				     jobs, names};
		out_table_row(t, row);
	}
	table_done(t);
}

void cli_text_group_show(const struct cli_answer *a)
{
	json_t *d = a->data;
	char jobs[256];
	join_names(json_object_get(d, "jobs"), jobs, sizeof jobs);
	printf("Group:    %s%s\n", cli_jstr(d, "name"),
	       json_is_true(json_object_get(d, "builtin")) ? " (built-in: every node)" : "");
	printf("Shape:    %s (cluster topology %s)%s\n", cli_jstr(d, "shape"), cli_jstr(d, "topology"),
	       json_is_true(json_object_get(d, "shared")) ? ", shared" : "");
	if (*cli_jstr(d, "note"))
		printf("Note:     %s\n", cli_jstr(d, "note"));
	printf("Jobs:     %s\n\n", jobs);
	static const char *const hdr[] = {"INDEX", "NODE", "STATE", "ADDRESS"};
	out_table *t = out_table_new(4, hdr);
	size_t i;
	json_t *m;
	json_array_foreach(json_object_get(d, "members"), i, m) {
		char idx[16];
		snprintf(idx, sizeof idx, "%lld", cli_jnum(m, "index"));
		const char *row[] = {idx, cli_jstr(m, "name"), cli_jstr(m, "state"), cli_jstr(m, "address")};
		out_table_row(t, row);
	}
	table_done(t);
}

/* The group's name as asked (the answer names only the cancelled jobs). */
void cli_text_group_rm(const struct cli_answer *a)
{
	json_t *cancelled = json_object_get(a->data, "cancelled_jobs");
	char jobs[256];
	join_names(cancelled, jobs, sizeof jobs);
	printf("Group %s removed%s%s.\n", cli_jstr(a->req, "name"),
	       json_array_size(cancelled) ? "; cancelled job(s) " : "",
	       json_array_size(cancelled) ? jobs : "");
}

/* ---- run ------------------------------------------------------------------------ */

/* run --detach prints the job id; in the foreground the output was the
 * stream and the end is said on stderr, so there is nothing more to print. */
void cli_text_run(const struct cli_answer *a)
{
	if (json_is_true(json_object_get(a->req, "detach")))
		printf("%lld\n", cli_jnum(a->data, "job_id"));
}

/* ---- job ------------------------------------------------------------------------ */

static void fmt_exit(json_t *j, char *buf, size_t len)
{
	json_t *e = json_object_get(j, "exit_code");
	if (json_is_integer(e))
		snprintf(buf, len, "%lld", (long long)json_integer_value(e));
	else
		snprintf(buf, len, "-");
}

void cli_text_job_ls(const struct cli_answer *a)
{
	static const char *const hdr[] = {"ID",	   "NAME", "GROUP",    "USER",   "LAUNCHER",
					  "RANKS", "STATE", "EXIT", "DURATION", "COMMAND"};
	out_table *t = out_table_new(10, hdr);
	size_t i;
	json_t *j;
	json_array_foreach(json_object_get(a->data, "jobs"), i, j) {
		char id[24], ranks[16], ex[16], dur[24], cmd[64];
		snprintf(id, sizeof id, "%lld", cli_jnum(j, "id"));
		snprintf(ranks, sizeof ranks, "%lld", cli_jnum(j, "world_size"));
		fmt_exit(j, ex, sizeof ex);
		util_fmt_age(cli_jnum(j, "duration_s"), dur, sizeof dur);
		snprintf(cmd, sizeof cmd, "%.60s", cli_jstr(j, "command"));
		char user[160]; /* a service's run: whose, and which service */
		if (json_is_string(json_object_get(j, "owner")))
			snprintf(user, sizeof user, "%s (%s)", cli_jstr(j, "user"), cli_jstr(j, "owner"));
		else
			snprintf(user, sizeof user, "%s", cli_jstr(j, "user"));
		const char *row[] = {id, cli_jstr(j, "name"), cli_jstr(j, "group"), user, cli_jstr(j, "launcher"),
				     ranks, cli_jstr(j, "state"), ex, dur, cmd};
		out_table_row(t, row);
	}
	table_done(t);
}

void cli_text_job_show(const struct cli_answer *a)
{
	json_t *d = a->data;
	char c[40], s[40], e[40], ex[16], env[1024];
	out_fmt_utc(cli_jnum(d, "created_at"), "-", c, sizeof c);
	out_fmt_utc(cli_jnum(d, "started_at"), "-", s, sizeof s);
	out_fmt_utc(cli_jnum(d, "ended_at"), "-", e, sizeof e);
	fmt_exit(d, ex, sizeof ex);
	join_names(json_object_get(d, "env"), env, sizeof env);
	printf("Job:        %lld (%s)\n", cli_jnum(d, "id"), cli_jstr(d, "name"));
	printf("User:       %s\n", cli_jstr(d, "user"));
	if (json_is_string(json_object_get(d, "owner")))
		printf("Owner:      %s (the job of a service)\n", cli_jstr(d, "owner"));
	printf("Group:      %s (%s, topology %s)\n", cli_jstr(d, "group"), cli_jstr(d, "shape"), cli_jstr(d, "topology"));
	printf("Launcher:   %s, %lld rank(s), %lld per node\n", cli_jstr(d, "launcher"), cli_jnum(d, "world_size"),
	       cli_jnum(d, "ranks_per_node"));
	printf("Command:    %s\n", cli_jstr(d, "command"));
	printf("State:      %s%s%s (exit %s)\n", cli_jstr(d, "state"), *cli_jstr(d, "reason") ? ": " : "",
	       cli_jstr(d, "reason"), ex);
	printf("Network:    %s, MASTER_ADDR %s:%lld\n", cli_jstr(d, "net"), cli_jstr(d, "master_addr"),
	       cli_jnum(d, "master_port"));
	if (*cli_jstr(d, "net_why") && strcmp(cli_jstr(d, "net_why"), "-") != 0)
		printf("            (%s)\n", cli_jstr(d, "net_why"));
	printf("Env:        %s\n", env);
	printf("Created:    %s\nStarted:    %s\nEnded:      %s\n\n", c, s, e);
	static const char *const hdr[] = {"RANK", "NODE", "LOCAL", "PID", "STATE", "EXIT", "SIGNAL"};
	out_table *t = out_table_new(7, hdr);
	size_t i;
	json_t *rk;
	json_array_foreach(json_object_get(d, "ranks"), i, rk) {
		char rank[16], loc[16], pid[24], x[16], sig[16];
		snprintf(rank, sizeof rank, "%lld", cli_jnum(rk, "rank"));
		snprintf(loc, sizeof loc, "%lld", cli_jnum(rk, "local_rank"));
		snprintf(pid, sizeof pid, "%lld", cli_jnum(rk, "pid"));
		fmt_exit(rk, x, sizeof x);
		snprintf(sig, sizeof sig, "%lld", cli_jnum(rk, "signal"));
		const char *row[] = {rank, cli_jstr(rk, "node"), loc, pid, cli_jstr(rk, "state"), x,
				     cli_jnum(rk, "signal") ? sig : "-"};
		out_table_row(t, row);
	}
	table_done(t);
}

void cli_text_job_cancel(const struct cli_answer *a)
{
	json_t *d = a->data;
	if (json_is_string(json_object_get(d, "note")))
		printf("Job %lld: %s (%s).\n", cli_jnum(d, "id"), cli_jstr(d, "note"), cli_jstr(d, "state"));
	else
		printf("Job %lld %s.\n", cli_jnum(d, "id"), cli_jstr(d, "state"));
}

/* ---- bench decode ------------------------------------------------------------- */

/* The answer cmd_bench.c made from every world size's spark-decode report. */
void cli_text_bench_decode(const struct cli_answer *a)
{
	json_t *d = a->data;
	long long layers = cli_jnum(d, "layers");
	char ls[32] = "";
	if (layers > 0)
		snprintf(ls, sizeof ls, " (%lld layers)", layers);
	printf("spark-decode %s%s on group %s, %lld tokens, --algo %s\n", cli_jstr(d, "model"), ls,
	       cli_jstr(d, "group"), cli_jnum(d, "tokens"), cli_jstr(d, "algo"));
	static const char *const hdr[] = {"WORLD", "TOKENS/S", "SPEED-UP", "COMM SHARE", "P50 MS",
					  "ALGORITHM"};
	out_table *t = out_table_new(6, hdr);
	size_t i;
	json_t *r;
	json_array_foreach(json_object_get(d, "rows"), i, r) {
		char w[16], tp[32], su[32], cs[16], p50[32];
		snprintf(w, sizeof w, "%lld", cli_jnum(r, "world_size"));
		snprintf(tp, sizeof tp, "%.2f", json_number_value(json_object_get(r, "tokens_per_s")));
		json_t *s = json_object_get(r, "speedup");
		if (json_is_number(s))
			snprintf(su, sizeof su, "%.2fx", json_number_value(s));
		else
			snprintf(su, sizeof su, "-");
		snprintf(cs, sizeof cs, "%.0f%%",
			 100 * json_number_value(json_object_get(r, "comm_share")));
		snprintf(p50, sizeof p50, "%.2f", json_number_value(json_object_get(r, "p50_ms")));
		const char *row[] = {w, tp, su, cs, p50, cli_jstr(r, "algo")};
		out_table_row(t, row);
	}
	table_done(t);
	if (!json_is_true(json_object_get(d, "same_tokens")))
		printf("warning: the world sizes generated different tokens\n");
}

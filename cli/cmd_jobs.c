/* Groups, jobs and exec (issue 6, docs/jobs.md): group create/ls/show/rm,
 * run, exec, job ls/show/logs/cancel: arguments and requests (the text
 * writers of their answers are in print_jobs.c). Requests that stream (run in
 * the foreground, logs, exec) read "stream" frames until the final result and
 * print them as they come. */
#include "cli.h"

#include "proto.h"
#include "util.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define OPT_END CLI_OPT_END

/* ---- streaming requests ------------------------------------------------------ */

typedef void (*event_fn)(void *arg, json_t *msg);

struct stream_opts {
	event_fn on_event;
	void *arg;
	bool ctrl_c_cancels;   /* run: Ctrl-C cancels the job, a second one detaches */
	long long *job_id;     /* learnt from the "started" event */
};

struct stream_state {
	struct cli_ctx *ctx;
	const struct stream_opts *so;
};

static void on_stream_event(void *arg, json_t *msg)
{
	struct stream_state *st = arg;
	const char *ev = proto_str(msg, "event");
	if (st->so->job_id && ev && strcmp(ev, "started") == 0)
		*st->so->job_id = (long long)proto_int(msg, "job_id", 0);
	if (st->so->on_event)
		st->so->on_event(st->so->arg, msg);
}

/* Ctrl-C during `run`: the first cancels the job, a second stops waiting. */
static int on_stream_interrupt(void *arg, int count)
{
	struct stream_state *st = arg;
	long long jid = st->so->job_id ? *st->so->job_id : 0;
	fflush(stdout);
	if (count >= 2 || !jid) {
		if (jid)
			cli_fail("detached from job %lld; it is still stopping ('sparkctl job show %lld')",
				 jid, jid);
		return 1;
	}
	fprintf(stderr, "sparkctl: cancelling job %lld (Ctrl-C again to stop waiting)\n", jid);
	char id[32];
	snprintf(id, sizeof id, "%lld", jid);
	char *code = NULL, *msg = NULL;
	if (cli_call_raw(st->ctx, "job_cancel", json_pack("{s:s}", "job", id), NULL, 5000, &code,
			 &msg) < 0)
		fprintf(stderr, "sparkctl: could not cancel job %lld: %s\n", jid, msg ? msg : "");
	free(code);
	free(msg);
	return 0;
}

/* Send one request and read frames until the final answer (client.c's read
 * loop). Returns 0 with *data, 1 after printing the error, 130 when detached
 * by a second Ctrl-C. */
static int stream_call(struct cli_ctx *ctx, const char *type, json_t *args, json_t **data,
		       const struct stream_opts *so)
{
	struct stream_state st = {.ctx = ctx, .so = so};
	struct cli_stream cs = {.on_event = on_stream_event,
				.on_interrupt = so->ctrl_c_cancels ? on_stream_interrupt : NULL,
				.arg = &st};
	char *code = NULL, *msg = NULL;
	int r = cli_stream_raw(ctx, type, args, data, 0, &cs, &code, &msg);
	int rc = 0;
	if (r < 0) {
		long long jid = so->job_id ? *so->job_id : 0;
		if (code && strcmp(code, "detached") == 0)
			rc = 130;
		else if (code && strcmp(code, "transport") == 0 && jid)
			rc = cli_fail("lost the connection to sparkd on %s; job %lld keeps running: "
				      "'sparkctl job logs -f %lld' follows it", ctx->socket, jid, jid);
		else
			rc = cli_fail("%s", msg && *msg ? msg : "request failed");
	}
	free(code);
	free(msg);
	return rc;
}

/* ---- output with rank labels -------------------------------------------------- */

struct linebuf {
	char *buf;
	size_t len, cap;
};

struct printer {
	bool label;
	int only;                /* print only this rank (no label); -1 all */
	struct linebuf *lines;   /* per rank */
	int nlines;
	bool quiet_notes;
	struct linebuf *capture; /* when set: rank `only`'s output goes here, not stdout */
};

static struct linebuf *lb_of(struct printer *p, int rank)
{
	if (rank < 0)
		rank = 0;
	if (rank >= p->nlines) {
		int n = rank + 16;
		struct linebuf *nl = realloc(p->lines, (size_t)n * sizeof *nl);
		if (!nl)
			return NULL;
		memset(nl + p->nlines, 0, (size_t)(n - p->nlines) * sizeof *nl);
		p->lines = nl;
		p->nlines = n;
	}
	return &p->lines[rank];
}

static void emit(struct printer *p, int rank, const char *s, size_t n)
{
	if (p->label)
		printf("%d: ", rank);
	fwrite(s, 1, n, stdout);
}

static void print_output(struct printer *p, int rank, const char *data, size_t n)
{
	if (p->only >= 0 && rank != p->only)
		return;
	if (p->capture) {
		struct linebuf *c = p->capture;
		if (c->len + n + 1 > c->cap) {
			size_t nc = (c->len + n + 1) * 2;
			char *nb = realloc(c->buf, nc);
			if (!nb)
				return;
			c->buf = nb;
			c->cap = nc;
		}
		memcpy(c->buf + c->len, data, n);
		c->len += n;
		c->buf[c->len] = '\0';
		return;
	}
	if (!p->label || p->only >= 0) {
		fwrite(data, 1, n, stdout);
		fflush(stdout);
		return;
	}
	struct linebuf *lb = lb_of(p, rank);
	if (!lb)
		return;
	for (size_t i = 0; i < n; i++) {
		if (lb->len + 1 >= lb->cap) {
			size_t nc = lb->cap ? lb->cap * 2 : 256;
			char *nb = realloc(lb->buf, nc);
			if (!nb)
				return;
			lb->buf = nb;
			lb->cap = nc;
		}
		lb->buf[lb->len++] = data[i];
		if (data[i] == '\n') {
			emit(p, rank, lb->buf, lb->len);
			lb->len = 0;
		}
	}
	fflush(stdout);
}

static void flush_rank(struct printer *p, int rank)
{
	if (rank >= p->nlines || rank < 0)
		return;
	struct linebuf *lb = &p->lines[rank];
	if (lb->len) {
		emit(p, rank, lb->buf, lb->len);
		fputc('\n', stdout);
		lb->len = 0;
	}
	fflush(stdout);
}

static void printer_free(struct printer *p)
{
	for (int i = 0; i < p->nlines; i++) {
		flush_rank(p, i);
		free(p->lines[i].buf);
	}
	free(p->lines);
}

static void on_job_event(void *arg, json_t *m)
{
	struct printer *p = arg;
	const char *ev = proto_str(m, "event");
	if (!ev)
		return;
	if (strcmp(ev, "started") == 0) {
		json_t *l = json_object_get(m, "label");
		if (json_is_boolean(l))
			p->label = json_is_true(l);
		else
			p->label = json_array_size(json_object_get(m, "ranks")) > 1 &&
				   strcmp(cli_jstr(m, "launcher"), "mpi") != 0;
	} else if (strcmp(ev, "output") == 0) {
		json_t *d = json_object_get(m, "data");
		print_output(p, (int)proto_int(m, "rank", 0), json_string_value(d) ?: "",
			     json_string_length(d));
	} else if (strcmp(ev, "rank_exit") == 0) {
		flush_rank(p, (int)proto_int(m, "rank", 0));
	} else if (strcmp(ev, "note") == 0 && !p->quiet_notes) {
		fflush(stdout);
		fprintf(stderr, "sparkctl: %s\n", cli_jstr(m, "message"));
	}
}

/* ---- group ------------------------------------------------------------------- */

static json_t *split_list(const char *s)
{
	json_t *arr = json_array();
	char *dup = strdup(s), *save = NULL;
	for (char *t = strtok_r(dup, ", ", &save); t; t = strtok_r(NULL, ", ", &save))
		json_array_append_new(arr, json_string(t));
	free(dup);
	return arr;
}

/* After the flags: the NAME (unless cli_leading_arg took it) and nothing more.
 * 0, or the exit code of a usage error. */
static int trailing_arg(struct cli_ctx *ctx, int argc, char **argv, const char *what,
			const char **name)
{
	if (!*name && optind < argc)
		*name = argv[optind++];
	if (optind < argc)
		return cli_usage(ctx, "unexpected argument '%s'", argv[optind]);
	if (!*name)
		return cli_usage(ctx, "missing %s", what);
	return 0;
}

/* `VERB ARG`: send {key: ARG} as a `type` request and print the answer.
 * The exit code (2 bad usage, 1 failed). */
static int request_one_arg(struct cli_ctx *ctx, int argc, char **argv, const char *what,
			   const char *type, const char *key, unsigned timeout_ms)
{
	if (argc < 2)
		return cli_usage(ctx, "missing %s", what);
	if (argc > 2)
		return cli_usage(ctx, "unexpected argument '%s'", argv[2]);
	return cli_request(ctx, type, json_pack("{s:s}", key, argv[1]), timeout_ms, NULL);
}

void cli_add_caller_env(json_t *args)
{
	char cwd[4096];
	if (getcwd(cwd, sizeof cwd))
		json_object_set_new(args, "cwd", json_string(cwd));
	if (getenv("PATH"))
		json_object_set_new(args, "path", json_string(getenv("PATH")));
}

int cmd_group_create(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {{"nodes", required_argument, NULL, 'n'},
					   {"size", required_argument, NULL, 's'},
					   {"shared", no_argument, NULL, 'S'},
					   OPT_END};
	const char *nodes = NULL;
	long size = 0;
	bool shared = false;
	int ch, rc = 0;
	optind = 0;
	const char *name = cli_leading_arg(&argc, &argv);
	while ((ch = cli_next_opt(ctx, argc, argv, lo, &rc)) != -1) {
		if (ch == -2)
			return rc;
		if (ch == 'n')
			nodes = optarg;
		else if (ch == 'S')
			shared = true;
		else if (ch == 's') {
			char *end;
			size = strtol(optarg, &end, 10);
			if (*end || size < 1)
				return cli_usage(ctx, "--size: '%s' is not a positive number", optarg);
		}
	}
	if ((rc = trailing_arg(ctx, argc, argv, "the group NAME", &name)))
		return rc;
	if (!util_valid_name(name))
		return cli_usage(ctx, "'%s' is not a valid group name (1-63 of a-z, 0-9, '-')", name);
	if (!nodes == !size)
		return cli_usage(ctx, "give either --nodes a,b,c or --size N");
	json_t *args = json_pack("{s:s, s:b}", "name", name, "shared", shared);
	if (nodes)
		json_object_set_new(args, "nodes", split_list(nodes));
	else
		json_object_set_new(args, "size", json_integer(size));
	json_t *d;
	if (cli_request(ctx, "group_create", args, 0, &d))
		return 1;
	if (json_is_string(json_object_get(d, "warning")))
		fprintf(stderr, "sparkctl: warning: %s; jobs on this group are refused until the cabling "
				"validates (or run with --force)\n", cli_jstr(d, "warning"));
	json_decref(d);
	return 0;
}

int cmd_group_ls(struct cli_ctx *ctx, int argc, char **argv)
{
	if (argc > 1)
		return cli_usage(ctx, "unexpected argument '%s'", argv[1]);
	return cli_request(ctx, "group_ls", NULL, 0, NULL);
}

int cmd_group_show(struct cli_ctx *ctx, int argc, char **argv)
{
	return request_one_arg(ctx, argc, argv, "the group NAME", "group_show", "name", 0);
}

int cmd_group_rm(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {{"force", no_argument, NULL, 'f'}, OPT_END};
	bool force = false;
	int ch, rc = 0;
	optind = 0;
	const char *name = cli_leading_arg(&argc, &argv);
	while ((ch = cli_next_opt(ctx, argc, argv, lo, &rc)) != -1) {
		if (ch == -2)
			return rc;
		force = true;
	}
	if ((rc = trailing_arg(ctx, argc, argv, "the group NAME", &name)))
		return rc;
	return cli_request(ctx, "group_rm", json_pack("{s:s, s:b}", "name", name, "force", force), 0,
			   NULL);
}

/* ---- run ------------------------------------------------------------------------ */

/* The head decides a job's exit code (0 only for a job that succeeded);
 * the CLI exits with it. An answer without one (an older head) is a failure. */
static int job_exit_code(json_t *d)
{
	json_t *e = json_object_get(d, "exit_code");
	long long c = json_is_integer(e) ? json_integer_value(e) : 1;
	return c < 0 || c > 255 ? 1 : (int)c;
}

static void say_job_end(json_t *d)
{
	const char *state = cli_jstr(d, "state");
	if (strcmp(state, "succeeded") == 0)
		return;
	fflush(stdout);
	if (*cli_jstr(d, "reason") && strcmp(cli_jstr(d, "reason"), "-"))
		cli_fail("job %lld %s: %s", cli_jnum(d, "id"), state, cli_jstr(d, "reason"));
	else
		cli_fail("job %lld %s", cli_jnum(d, "id"), state);
}

/* A job in the foreground: stream its output (only rank `only` when >= 0),
 * then say how it ended; returns the job's exit code. */
static int run_job(struct cli_ctx *ctx, json_t *args, int only, struct linebuf *capture);

int cli_run_foreground(struct cli_ctx *ctx, json_t *args, int only)
{
	return run_job(ctx, args, only, NULL);
}

int cli_run_capture(struct cli_ctx *ctx, json_t *args, int only, char **out, size_t *len)
{
	struct linebuf lb = {0};
	int r = run_job(ctx, args, only, &lb);
	*out = lb.buf;
	*len = lb.len;
	return r;
}

/* cli_run_foreground, or with capture: rank `only`'s output into *capture, no
 * JSON answer printed (the caller prints its own). */
static int run_job(struct cli_ctx *ctx, json_t *args, int only, struct linebuf *capture)
{
	struct printer p = {.only = only, .capture = capture};
	long long job_id = 0;
	json_t *d = NULL, *req = json_incref(args);
	struct stream_opts so = {.on_event = on_job_event, .arg = &p, .ctrl_c_cancels = true,
				 .job_id = &job_id};
	int r = stream_call(ctx, "job_run", args, &d, &so);
	printer_free(&p);
	if (r) {
		json_decref(req);
		return r;
	}
	if (only < 0 && !capture) /* run's own answer; a bench prints its own */
		cli_output(ctx, req, d, NULL);
	json_decref(req);
	say_job_end(d);
	r = job_exit_code(d);
	json_decref(d);
	return r;
}

int cmd_run(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {{"group", required_argument, NULL, 'g'},
					   {"name", required_argument, NULL, 'n'},
					   {"launcher", required_argument, NULL, 'l'},
					   {"ranks-per-node", required_argument, NULL, 'k'},
					   {"env", required_argument, NULL, 'e'},
					   {"workdir", required_argument, NULL, 'w'},
					   {"timeout", required_argument, NULL, 't'},
					   {"detach", no_argument, NULL, 'd'},
					   {"force", no_argument, NULL, 'f'},
					   OPT_END};
	const char *group = NULL, *name = NULL, *launcher = "native", *workdir = NULL;
	long rpn = 1;
	int64_t timeout = 0;
	bool detach = false, force = false;
	json_t *env = json_array();
	int ch, rc = 0;
	optind = 0;
	while ((ch = cli_next_opt(ctx, argc, argv, lo, &rc)) != -1) {
		if (ch == -2) {
			json_decref(env);
			return rc;
		}
		char key[128], *end;
		switch (ch) {
		case 'g': group = optarg; break;
		case 'n': name = optarg; break;
		case 'l': launcher = optarg; break;
		case 'w': workdir = optarg; break;
		case 'd': detach = true; break;
		case 'f': force = true; break;
		case 'k':
			rpn = strtol(optarg, &end, 10);
			if (*end || rpn < 1 || rpn > 64) {
				json_decref(env);
				return cli_usage(ctx, "--ranks-per-node: '%s' is not a number from 1 to 64",
						 optarg);
			}
			break;
		case 't':
			if (util_parse_duration(optarg, &timeout) < 0 || timeout < 0) {
				json_decref(env);
				return cli_usage(ctx, "--timeout: '%s' is not a duration like 90s, 30m or 2h",
						 optarg);
			}
			break;
		case 'e': {
			const char *eq = strchr(optarg, '=');
			size_t kl = eq ? (size_t)(eq - optarg) : 0;
			bool ok = eq && kl > 0 && kl < sizeof key;
			for (size_t i = 0; ok && i < kl; i++) {
				char c = optarg[i];
				ok = c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
				     (i > 0 && c >= '0' && c <= '9');
			}
			if (!ok) {
				json_decref(env);
				return cli_usage(ctx, "--env: '%s' is not KEY=VALUE (KEY: letters, digits "
						      "and '_', not starting with a digit)", optarg);
			}
			json_array_append_new(env, json_string(optarg));
			break;
		}
		}
	}
	if (!group) {
		json_decref(env);
		return cli_usage(ctx, "missing --group G (a group from 'sparkctl group ls', or all)");
	}
	if (strcmp(launcher, "native") && strcmp(launcher, "torchrun") && strcmp(launcher, "mpi")) {
		json_decref(env);
		return cli_usage(ctx, "--launcher: '%s' is not native, torchrun or mpi", launcher);
	}
	if (optind >= argc) {
		json_decref(env);
		return cli_usage(ctx, "missing the command: sparkctl run --group G -- CMD ARGS...");
	}
	json_t *cmd = json_array();
	for (int i = optind; i < argc; i++)
		json_array_append_new(cmd, json_string(argv[i]));
	json_t *args = json_pack("{s:s, s:s, s:i, s:o, s:o, s:I, s:b}", "group", group, "launcher",
				 launcher, "ranks_per_node", (int)rpn, "env", env, "argv", cmd,
				 "timeout_s", (json_int_t)timeout, "detach", detach);
	if (name)
		json_object_set_new(args, "name", json_string(name));
	if (workdir)
		json_object_set_new(args, "workdir", json_string(workdir));
	if (force)
		json_object_set_new(args, "force", json_true());
	cli_add_caller_env(args);
	if (getenv("LANG"))
		json_object_set_new(args, "lang", json_string(getenv("LANG")));
	if (detach)
		return cli_request(ctx, "job_run", args, 60000, NULL);
	return cli_run_foreground(ctx, args, -1);
}

/* ---- exec ----------------------------------------------------------------------- */

static void on_exec_event(void *arg, json_t *m)
{
	(void)arg;
	const char *ev = proto_str(m, "event");
	if (ev && strcmp(ev, "output") == 0) {
		json_t *d = json_object_get(m, "data");
		FILE *f = strcmp(cli_jstr(m, "stream"), "err") == 0 ? stderr : stdout;
		fwrite(json_string_value(d) ?: "", 1, json_string_length(d), f);
		fflush(f);
	} else if (ev && strcmp(ev, "note") == 0) {
		fprintf(stderr, "sparkctl: %s\n", cli_jstr(m, "message"));
	}
}

int cmd_exec(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {{"shell", no_argument, NULL, 's'}, OPT_END};
	bool shell = false;
	int ch, rc = 0;
	optind = 0;
	while ((ch = cli_next_opt(ctx, argc, argv, lo, &rc)) != -1) {
		if (ch == -2)
			return rc;
		shell = true;
	}
	if (optind < argc && strcmp(argv[optind], "--") == 0)
		optind++;
	if (optind >= argc)
		return cli_usage(ctx, "missing NODE: sparkctl exec NODE -- CMD ARGS...");
	const char *node = argv[optind++];
	if (optind < argc && strcmp(argv[optind], "--") == 0)
		optind++;
	if (optind >= argc)
		return cli_usage(ctx, "missing the command: sparkctl exec %s -- CMD ARGS...", node);
	json_t *cmd = json_array();
	for (int i = optind; i < argc; i++)
		json_array_append_new(cmd, json_string(argv[i]));
	json_t *args = json_pack("{s:s, s:o, s:b}", "node", node, "argv", cmd, "shell", shell);
	const char *jid = getenv("SPARK_JOB_ID");
	if (jid && *jid)
		json_object_set_new(args, "job_id", json_integer(atoll(jid)));
	json_t *d = NULL;
	struct stream_opts so = {.on_event = on_exec_event};
	int r = stream_call(ctx, "exec", args, &d, &so);
	if (r) /* the command did not run (no such node, refused...): 1, or 2 for bad usage */
		return r;
	long long code = cli_jnum(d, "exit_code");
	json_decref(d);
	return code < 0 ? 255 : code > 255 ? 255 : (int)code;
}

/* ---- job ------------------------------------------------------------------------ */

int cmd_job_ls(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {{"running", no_argument, NULL, 'r'},
					   {"limit", required_argument, NULL, 'n'},
					   OPT_END};
	bool running = false;
	long limit = 50;
	int ch, rc = 0;
	optind = 0;
	while ((ch = cli_next_opt(ctx, argc, argv, lo, &rc)) != -1) {
		if (ch == -2)
			return rc;
		if (ch == 'r')
			running = true;
		else {
			char *end;
			limit = strtol(optarg, &end, 10);
			if (*end || limit < 0)
				return cli_usage(ctx, "--limit: '%s' is not a number", optarg);
		}
	}
	if (optind < argc)
		return cli_usage(ctx, "unexpected argument '%s'", argv[optind]);
	return cli_request(ctx, "job_ls", json_pack("{s:b, s:i}", "running", running, "limit", (int)limit),
			   0, NULL);
}

int cmd_job_show(struct cli_ctx *ctx, int argc, char **argv)
{
	return request_one_arg(ctx, argc, argv, "the JOB (id or name)", "job_show", "job", 0);
}

int cmd_job_logs(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {{"follow", no_argument, NULL, 'f'},
					   {"rank", required_argument, NULL, 'r'},
					   OPT_END};
	bool follow = false;
	long rank = -1;
	int ch, rc = 0;
	optind = 0;
	const char *job = cli_leading_arg(&argc, &argv);
	while ((ch = getopt_long(argc, argv, "fr:", lo, NULL)) != -1) {
		if (ch == 'f')
			follow = true;
		else if (ch == 'r') {
			char *end;
			rank = strtol(optarg, &end, 10);
			if (*end || rank < 0)
				return cli_usage(ctx, "--rank: '%s' is not a rank number", optarg);
		} else {
			return cli_usage(ctx, "unknown or incomplete option '%s'", argv[optind - 1]);
		}
	}
	if ((rc = trailing_arg(ctx, argc, argv, "the JOB (id or name)", &job)))
		return rc;
	json_t *args = json_pack("{s:s, s:b, s:i}", "job", job, "follow", follow, "rank", (int)rank);
	struct printer p = {.only = -1};
	struct stream_opts so = {.on_event = on_job_event, .arg = &p};
	json_t *d = NULL;
	int r = stream_call(ctx, "job_logs", args, &d, &so);
	printer_free(&p);
	if (r)
		return r;
	json_decref(d);
	return 0;
}

int cmd_job_cancel(struct cli_ctx *ctx, int argc, char **argv)
{
	return request_one_arg(ctx, argc, argv, "the JOB (id or name)", "job_cancel", "job", 30000);
}

/* cli: the sparkctl command line. The command table (commands.c) maps
 * "GROUP VERB" to a handler and a text writer; handlers parse their own flags
 * with getopt_long and build the request (cmd_<area>.c), cli_request() sends
 * it and prints the answer: the JSON as it came for -o json, else through the
 * row's text writer (print_<area>.c, declared in print.h). Handlers never
 * choose between the two themselves.
 * Exit codes: 0 success, 1 the operation failed, 2 bad usage. Every failure
 * prints one line "sparkctl: <what happened>; <what to do next>" on stderr. */
#ifndef SPARK_CLI_H
#define SPARK_CLI_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

enum cli_output { OUT_TABLE = 0, OUT_JSON = 1 };

struct cli_cmd;

struct cli_ctx {
	const char *socket;        /* control socket of the local sparkd */
	enum cli_output out;
	bool tty;                  /* stdout is a terminal (progress, colours) */
	const struct cli_cmd *cmd; /* the command being run */
};

typedef int (*cli_fn)(struct cli_ctx *ctx, int argc, char **argv);

/* What a text writer prints from: the request as it was sent (NULL when there
 * was none), the answer (exactly what -o json prints), and for a command that
 * computes its answer here (fit, sim up...) the C view it was made from, of
 * the type print.h gives for that writer (else NULL). */
struct cli_answer {
	const struct cli_ctx *ctx;
	json_t *req;
	json_t *data;
	const void *view;
};
/* A command's text writer: prints the answer for people on stdout. */
typedef void (*cli_writer)(const struct cli_answer *a);

struct cli_cmd {
	const char *group;   /* "node", "token", "sim"...; NULL for top-level verbs */
	const char *verb;    /* "ls", "init"... */
	cli_fn fn;           /* argv[0] is the verb; flags follow */
	cli_writer print;    /* the text writer of its answer; NULL: the command prints
			      * no answer (streams, exec, faults) */
	const char *usage;   /* synopsis lines after "sparkctl " */
	const char *summary; /* one line */
	const char *help;    /* option descriptions, may be NULL */
};

extern const struct cli_cmd cli_commands[];

/* Print the command's usage to stdout (for --help) and return 0. */
int cli_help(const struct cli_cmd *cmd);
/* Bad usage: "sparkctl: MSG" + "Run 'sparkctl GROUP VERB --help' for usage." -> 2 */
int cli_usage(struct cli_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Failed operation: "sparkctl: MSG" -> 1 */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Send {"type":type, ...args} to the local sparkd, wait for the answer.
 * args is stolen (may be NULL). On success returns 0 and *data (if non-NULL)
 * receives the reply's "data" (caller decrefs). On an error reply or a
 * transport failure prints the one-line message and returns 1. timeout_ms 0 =
 * 30 s. */
int cli_call(struct cli_ctx *ctx, const char *type, json_t *args, json_t **data,
	     unsigned timeout_ms);
/* cli_call, then cli_output of the answer with args as the request. 0, or 1
 * after the error line. With answer non-NULL the answer stays the caller's
 * (for an exit code or a warning after the output), else it is released. */
int cli_request(struct cli_ctx *ctx, const char *type, json_t *args, unsigned timeout_ms,
		json_t **answer);
/* Same as cli_call, but returns the error instead of printing: 0, or -1 with *code and
 * *message (strdup'd; caller frees) from the error frame. */
int cli_call_raw(struct cli_ctx *ctx, const char *type, json_t *args, json_t **data,
		 unsigned timeout_ms, char **code, char **message);

/* Requests that stream: "stream" frames go to on_event until the final
 * answer; there is no deadline. With on_interrupt, Ctrl-C calls it (count =
 * how many so far) instead of ending sparkctl; it returns nonzero to stop
 * waiting (cli_stream_raw then fails with code "detached"). */
struct cli_stream {
	void (*on_event)(void *arg, json_t *msg);
	int (*on_interrupt)(void *arg, int count);
	void *arg;
};
int cli_stream_raw(struct cli_ctx *ctx, const char *type, json_t *args, json_t **data,
		   unsigned timeout_ms, const struct cli_stream *so, char **code, char **message);

/* Jobs in the foreground (cmd_jobs.c), for the commands that run one (bench):
 * stream the output (only rank `only` when >= 0), say how it ended, return the
 * job's exit code; _capture keeps rank `only`'s output in *out (malloc'd,
 * caller frees) instead of printing it. The caller's cwd and PATH go into
 * a job_run request with cli_add_caller_env. */
int cli_run_foreground(struct cli_ctx *ctx, json_t *args, int only);
int cli_run_capture(struct cli_ctx *ctx, json_t *args, int only, char **out, size_t *len);
void cli_add_caller_env(json_t *args);

/* Connect to the control socket at path (the fd, or a negative errno); the
 * one-line message for a failed connect (err from cli_connect). */
int cli_connect(const char *path);
void cli_connect_error(const char *path, int err, char *buf, size_t len);

/* getopt_long over a command's argv ("+": stop at the first non-option).
 * Returns the option, -1 at the end, or -2 after printing a usage error, with
 * the exit code in *rc. Set optind = 0 before the first call. */
struct option;
#define CLI_OPT_END {NULL, 0, NULL, 0}
int cli_next_opt(struct cli_ctx *ctx, int argc, char **argv, const struct option *lo, int *rc);
/* A NAME given before the flags (`job logs 7 -f`): argv[1] when it is not a
 * flag, shifted out so that getopt sees the verb and then the flags; NULL
 * when there is none there. */
const char *cli_leading_arg(int *argc, char ***argv);
/* Fields of a reply for printing: the string, or "-" when absent; the integer, or 0. */
const char *cli_jstr(json_t *o, const char *key);
long long cli_jnum(json_t *o, const char *key);

/* The answer of the running command (ctx->cmd) on stdout (output.c): with
 * -o json, data as JSON (nothing when data is NULL), else through the
 * command's text writer with req, data and view (struct cli_answer). */
void cli_output(struct cli_ctx *ctx, json_t *req, json_t *data, const void *view);
/* Print JSON to stdout (indented, newline). */
void cli_print_json(const json_t *j);

/* Progress of a long command (output.c). cli_progress: a transient status
 * line on stderr, only on a terminal with table output (never in pipes nor
 * with -o json); cli_progress_clear wipes it. cli_steps_file: where step
 * lines go: stdout with table output (*tty: stdout is a terminal), with
 * -o json stderr when it is a terminal, else nowhere (NULL). */
void cli_progress(const struct cli_ctx *ctx, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void cli_progress_clear(const struct cli_ctx *ctx);
FILE *cli_steps_file(const struct cli_ctx *ctx, bool *tty);

#endif

/* sparkctl entry point: global flags, command lookup, dispatch. */
#include "cli.h"

#include "spark_config.h"

#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void print_overview(FILE *f)
{
	fprintf(f, "sparkctl %s: the DGX Spark cluster assistant\n\n"
		   "Usage: sparkctl [--socket PATH] [-o table|json] COMMAND [ARGS...]\n\n"
		   "Commands:\n", SPARK_VERSION);
	for (const struct cli_cmd *c = cli_commands; c->verb; c++) {
		char name[64];
		snprintf(name, sizeof name, "%s%s%s", c->group ? c->group : "", c->group ? " " : "",
			 c->verb);
		fprintf(f, "  %-18s %s\n", name, c->summary);
	}
	fprintf(f, "\nGlobal options:\n"
		   "  --socket PATH      control socket of the local sparkd (env SPARKCTL_SOCKET,\n"
		   "                     default %s)\n"
		   "  -o, --output FMT   table (default) or json\n"
		   "  -h, --help         help for sparkctl or for a command\n\n"
		   "Run 'sparkctl COMMAND --help' for a command's options.\n", SPARK_DEFAULT_SOCKET);
}

int cli_help(const struct cli_cmd *cmd)
{
	printf("Usage: sparkctl %s\n\n%s\n", cmd->usage, cmd->summary);
	if (cmd->help)
		printf("\n%s", cmd->help);
	printf("\nGlobal options: --socket PATH, -o table|json, -h/--help\n");
	return 0;
}

static const struct cli_cmd *current;

/* Each message goes out in one write, so a reader never sees half a line. */
static void emit_line(const char *fmt, va_list ap, const char *suffix)
{
	char line[2048];
	int n = snprintf(line, sizeof line, "sparkctl: ");
	n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
	if (n > (int)sizeof line - 1)
		n = (int)sizeof line - 1;
	snprintf(line + n, sizeof line - (size_t)n, "%s\n", suffix);
	fputs(line, stderr);
}

int cli_usage(struct cli_ctx *ctx, const char *fmt, ...)
{
	char suffix[160];
	const struct cli_cmd *c = ctx && ctx->cmd ? ctx->cmd : current;
	if (c)
		snprintf(suffix, sizeof suffix, "; run 'sparkctl %s%s%s --help' for usage",
			 c->group ? c->group : "", c->group ? " " : "", c->verb);
	else
		snprintf(suffix, sizeof suffix, "; run 'sparkctl --help' for usage");
	va_list ap;
	va_start(ap, fmt);
	emit_line(fmt, ap, suffix);
	va_end(ap);
	return 2;
}

int cli_fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	emit_line(fmt, ap, "");
	va_end(ap);
	return 1;
}

int cli_next_opt(struct cli_ctx *ctx, int argc, char **argv, const struct option *lo, int *rc)
{
	opterr = 0;
	int ch = getopt_long(argc, argv, "+", lo, NULL);
	if (ch == '?' || ch == ':') {
		const char *bad = argv[optind - 1];
		*rc = cli_usage(ctx, "unknown or incomplete option '%s'", bad ? bad : "?");
		return -2;
	}
	return ch;
}

const char *cli_leading_arg(int *argc, char ***argv)
{
	char **av = *argv;
	if (*argc < 2 || av[1][0] == '-')
		return NULL;
	const char *arg = av[1];
	av[1] = av[0];
	(*argv)++;
	(*argc)--;
	return arg;
}

const char *cli_jstr(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	return json_is_string(v) ? json_string_value(v) : "-";
}

long long cli_jnum(json_t *o, const char *key)
{
	return (long long)json_integer_value(json_object_get(o, key));
}

/* Pull global options out of argv (up to a "--"), compacting the rest. */
static int take_globals(struct cli_ctx *ctx, int *argc, char **argv)
{
	int out = 1;
	int i = 1;
	for (; i < *argc; i++) {
		const char *a = argv[i];
		const char *val = NULL;
		if (strcmp(a, "--") == 0)
			break;
		if (strcmp(a, "--socket") == 0 || strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
			if (i + 1 >= *argc)
				return cli_usage(NULL, "%s needs a value", a);
			val = argv[++i];
		} else if (strncmp(a, "--socket=", 9) == 0) {
			a = "--socket";
			val = argv[i] + 9;
		} else if (strncmp(a, "--output=", 9) == 0) {
			a = "-o";
			val = argv[i] + 9;
		} else if (strncmp(a, "-o", 2) == 0 && a[2]) {
			val = a + 2;
			a = "-o";
		} else {
			argv[out++] = argv[i];
			continue;
		}
		if (strcmp(a, "--socket") == 0) {
			ctx->socket = val;
		} else if (strcmp(val, "json") == 0) {
			ctx->out = OUT_JSON;
		} else if (strcmp(val, "table") == 0 || strcmp(val, "files") == 0) {
			ctx->out = OUT_TABLE;
		} else {
			return cli_usage(NULL, "unknown output format '%s' (use table or json)", val);
		}
	}
	for (; i < *argc; i++)
		argv[out++] = argv[i];
	argv[out] = NULL;
	*argc = out;
	return 0;
}

static int wants_help(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0)
			return 0;
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
			return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct cli_ctx ctx = {0};
	ctx.socket = getenv("SPARKCTL_SOCKET");
	if (!ctx.socket || !*ctx.socket)
		ctx.socket = SPARK_DEFAULT_SOCKET;
	ctx.tty = isatty(STDOUT_FILENO);
	int r = take_globals(&ctx, &argc, argv);
	if (r)
		return r;
	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		print_overview(stdout);
		return argc < 2 ? 2 : 0;
	}
	if (strcmp(argv[1], "--version") == 0)
		argv[1] = "version";
	/* Two-word commands first ("node ls"), then one-word ("status"). */
	const struct cli_cmd *found = NULL, *group_seen = NULL;
	for (const struct cli_cmd *c = cli_commands; c->verb; c++) {
		if (c->group && strcmp(c->group, argv[1]) == 0) {
			group_seen = c;
			if (argc >= 3 && strcmp(c->verb, argv[2]) == 0) {
				found = c;
				break;
			}
		} else if (!c->group && strcmp(c->verb, argv[1]) == 0) {
			found = c;
			break;
		}
	}
	if (!found && group_seen) {
		if (argc >= 3 && strcmp(argv[2], "--help") != 0 && strcmp(argv[2], "-h") != 0)
			fprintf(stderr, "sparkctl: unknown command '%s %s'\n", argv[1], argv[2]);
		FILE *f = argc >= 3 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0)
				  ? stdout
				  : stderr;
		fprintf(f, "Commands of 'sparkctl %s':\n", argv[1]);
		for (const struct cli_cmd *c = cli_commands; c->verb; c++)
			if (c->group && strcmp(c->group, argv[1]) == 0)
				fprintf(f, "  sparkctl %-30s %s\n", c->usage, c->summary);
		return f == stdout ? 0 : 2;
	}
	if (!found) {
		fprintf(stderr, "sparkctl: unknown command '%s'; run 'sparkctl --help' for the list\n",
			argv[1]);
		return 2;
	}
	current = found;
	ctx.cmd = found;
	int skip = found->group ? 2 : 1;
	int cargc = argc - skip;
	char **cargv = argv + skip; /* cargv[0] is the verb */
	if (wants_help(cargc, cargv))
		return cli_help(found);
	return found->fn(&ctx, cargc, cargv);
}

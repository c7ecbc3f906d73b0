/* output: the one place that chooses between JSON and text (cli_output),
 * progress lines, and the plain-text table writer the text writers use. */
#include "output.h"
#include "cli.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void cli_print_json(const json_t *j)
{
	json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	fputc('\n', stdout);
}

void cli_output(struct cli_ctx *ctx, json_t *req, json_t *data, const void *view)
{
	if (ctx->out == OUT_JSON) {
		if (data)
			cli_print_json(data);
		return;
	}
	if (ctx->cmd && ctx->cmd->print) {
		struct cli_answer a = {.ctx = ctx, .req = req, .data = data, .view = view};
		ctx->cmd->print(&a);
	}
}

void cli_progress(const struct cli_ctx *ctx, const char *fmt, ...)
{
	if (!ctx->tty || ctx->out != OUT_TABLE)
		return;
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
}

void cli_progress_clear(const struct cli_ctx *ctx)
{
	cli_progress(ctx, "%40s\r", "");
}

FILE *cli_steps_file(const struct cli_ctx *ctx, bool *tty)
{
	if (ctx->out == OUT_TABLE) {
		*tty = ctx->tty;
		return stdout;
	}
	FILE *f = isatty(STDERR_FILENO) ? stderr : NULL;
	*tty = f != NULL;
	return f;
}

struct out_table {
	int ncols;
	size_t nrows, cap;
	char **cells; /* (nrows + 1) * ncols, row 0 = headers */
};

static char *dup_cell(const char *s) { return strdup(s ? s : "-"); }

out_table *out_table_new(int ncols, const char *const headers[])
{
	out_table *t = calloc(1, sizeof *t);
	if (!t)
		abort();
	t->ncols = ncols;
	t->cap = 8;
	t->cells = calloc(t->cap * (size_t)ncols, sizeof(char *));
	if (!t->cells)
		abort();
	for (int i = 0; i < ncols; i++)
		t->cells[i] = dup_cell(headers[i]);
	t->nrows = 1;
	return t;
}

void out_table_row(out_table *t, const char *const cells[])
{
	if (t->nrows == t->cap) {
		t->cap *= 2;
		t->cells = realloc(t->cells, t->cap * (size_t)t->ncols * sizeof(char *));
		if (!t->cells)
			abort();
	}
	for (int i = 0; i < t->ncols; i++)
		t->cells[t->nrows * (size_t)t->ncols + (size_t)i] = dup_cell(cells[i]);
	t->nrows++;
}

const char *out_fmt(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, len, fmt, ap);
	va_end(ap);
	return buf;
}

const char *out_fmt_ms(unsigned long long ms, char *buf, size_t len)
{
	if (ms < 60000)
		snprintf(buf, len, "%.1fs", (double)ms / 1000.0);
	else
		snprintf(buf, len, "%llum%02llus", ms / 60000, ms / 1000 % 60);
	return buf;
}

void out_upper(const char *s, char *out, size_t len)
{
	size_t i = 0;
	for (; s && s[i] && i + 1 < len; i++)
		out[i] = (char)(s[i] >= 'a' && s[i] <= 'z' ? s[i] - 'a' + 'A' : s[i]);
	out[i] = '\0';
}

void out_table_print(out_table *t, FILE *f)
{
	size_t *w = calloc((size_t)t->ncols, sizeof *w);
	if (!w)
		abort();
	for (size_t r = 0; r < t->nrows; r++)
		for (int c = 0; c < t->ncols; c++) {
			size_t l = strlen(t->cells[r * (size_t)t->ncols + (size_t)c]);
			if (l > w[c])
				w[c] = l;
		}
	for (size_t r = 0; r < t->nrows; r++) {
		for (int c = 0; c < t->ncols; c++) {
			const char *s = t->cells[r * (size_t)t->ncols + (size_t)c];
			if (c == t->ncols - 1)
				fprintf(f, "%s", s);
			else
				fprintf(f, "%-*s   ", (int)w[c], s);
		}
		fputc('\n', f);
	}
	free(w);
}

void out_table_free(out_table *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->nrows * (size_t)t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	free(t);
}

const char *out_fmt_utc(long long ts, const char *none, char *buf, size_t len)
{
	if (ts <= 0) {
		snprintf(buf, len, "%s", none);
		return buf;
	}
	time_t t = (time_t)ts;
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(buf, len, "%Y-%m-%d %H:%M:%SZ", &tm);
	return buf;
}

#include "output.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

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

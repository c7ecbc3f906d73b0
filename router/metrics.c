#include "metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double BOUNDS[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
				0.25,   0.5,   1,      2.5,   5,    10,    30,    60};
#define NB (sizeof BOUNDS / sizeof BOUNDS[0])
#define MAX_SERIES 2048

struct series {
	char *labels;
	double v;             /* counter/gauge value; histogram sum */
	uint64_t n;           /* histogram count */
	uint64_t buckets[NB]; /* histogram, not cumulative */
};

struct family {
	char *name, *help;
	enum metric_type type;
	struct series *s;
	size_t n, cap;
};

struct metrics {
	struct family *f;
	size_t n;
	size_t total;
};

struct metrics *metrics_new(void)
{
	return calloc(1, sizeof(struct metrics));
}

void metrics_free(struct metrics *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n; i++) {
		for (size_t k = 0; k < m->f[i].n; k++)
			free(m->f[i].s[k].labels);
		free(m->f[i].s);
		free(m->f[i].name);
		free(m->f[i].help);
	}
	free(m->f);
	free(m);
}

int metrics_family(struct metrics *m, const char *name, enum metric_type t, const char *help)
{
	struct family *nf = realloc(m->f, (m->n + 1) * sizeof *nf);
	if (!nf)
		return -1;
	m->f = nf;
	m->f[m->n] = (struct family){.name = strdup(name), .help = strdup(help), .type = t};
	m->n++;
	return 0;
}

static struct series *find(struct metrics *m, const char *name, const char *labels)
{
	struct family *f = NULL;
	for (size_t i = 0; i < m->n && !f; i++)
		if (!strcmp(m->f[i].name, name))
			f = &m->f[i];
	if (!f)
		return NULL;
	labels = labels ? labels : "";
	for (size_t k = 0; k < f->n; k++)
		if (!strcmp(f->s[k].labels, labels))
			return &f->s[k];
	if (m->total >= MAX_SERIES)
		return NULL; /* bounded: label values come from the policy, never from clients */
	if (f->n == f->cap) {
		size_t cap = f->cap ? f->cap * 2 : 8;
		struct series *ns = realloc(f->s, cap * sizeof *ns);
		if (!ns)
			return NULL;
		f->s = ns;
		f->cap = cap;
	}
	struct series *s = &f->s[f->n];
	memset(s, 0, sizeof *s);
	s->labels = strdup(labels);
	if (!s->labels)
		return NULL;
	f->n++;
	m->total++;
	return s;
}

void metrics_add(struct metrics *m, const char *name, const char *labels, double v)
{
	struct series *s = find(m, name, labels);
	if (s)
		s->v += v;
}

void metrics_set(struct metrics *m, const char *name, const char *labels, double v)
{
	struct series *s = find(m, name, labels);
	if (s)
		s->v = v;
}

void metrics_observe(struct metrics *m, const char *name, const char *labels, double seconds)
{
	struct series *s = find(m, name, labels);
	if (!s)
		return;
	s->v += seconds;
	s->n++;
	for (size_t i = 0; i < NB; i++)
		if (seconds <= BOUNDS[i]) {
			s->buckets[i]++;
			break;
		}
}

void metrics_label(char *out, size_t n, const char *v)
{
	size_t o = 0;
	for (; *v && o + 3 < n; v++) {
		if (*v == '"' || *v == '\\') {
			out[o++] = '\\';
			out[o++] = *v;
		} else if (*v == '\n') {
			out[o++] = '\\';
			out[o++] = 'n';
		} else {
			out[o++] = *v;
		}
	}
	out[o] = 0;
}

char *metrics_text(struct metrics *m, size_t *len)
{
	char *buf = NULL;
	size_t size = 0;
	FILE *f = open_memstream(&buf, &size);
	if (!f)
		return NULL;
	static const char *const tn[] = {"counter", "gauge", "histogram"};
	for (size_t i = 0; i < m->n; i++) {
		struct family *fa = &m->f[i];
		fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", fa->name, fa->help, fa->name, tn[fa->type]);
		for (size_t k = 0; k < fa->n; k++) {
			struct series *s = &fa->s[k];
			const char *l = s->labels;
			const char *sep = *l ? "," : "";
			if (fa->type != METRIC_HISTOGRAM) {
				fprintf(f, "%s%s%s%s %.17g\n", fa->name, *l ? "{" : "", l, *l ? "}" : "", s->v);
				continue;
			}
			uint64_t cum = 0;
			for (size_t b = 0; b < NB; b++) {
				cum += s->buckets[b];
				fprintf(f, "%s_bucket{%s%sle=\"%g\"} %llu\n", fa->name, l, sep, BOUNDS[b],
					(unsigned long long)cum);
			}
			fprintf(f, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", fa->name, l, sep,
				(unsigned long long)s->n);
			fprintf(f, "%s_sum%s%s%s %.17g\n", fa->name, *l ? "{" : "", l, *l ? "}" : "", s->v);
			fprintf(f, "%s_count%s%s%s %llu\n", fa->name, *l ? "{" : "", l, *l ? "}" : "",
				(unsigned long long)s->n);
		}
	}
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	*len = size;
	return buf;
}

/* metrics: counters, gauges and histograms by name and label set, written as
 * Prometheus text (exposition format 0.0.4). Single-threaded; label sets are
 * the caller's preformatted `k="v",k2="v2"` strings (values escaped with
 * metrics_label). A family is declared once with its type and help. */
#ifndef SPARK_ROUTER_METRICS_H
#define SPARK_ROUTER_METRICS_H

#include <stddef.h>
#include <stdint.h>

enum metric_type { METRIC_COUNTER, METRIC_GAUGE, METRIC_HISTOGRAM };

struct metrics;

struct metrics *metrics_new(void);
void metrics_free(struct metrics *m);
/* Declare a family (before use). Histograms share one bucket list (seconds). */
int metrics_family(struct metrics *m, const char *name, enum metric_type t, const char *help);
void metrics_add(struct metrics *m, const char *name, const char *labels, double v);
void metrics_set(struct metrics *m, const char *name, const char *labels, double v);
void metrics_observe(struct metrics *m, const char *name, const char *labels, double seconds);
/* Escape a label value into out (", \ and newline), NUL-terminated. */
void metrics_label(char *out, size_t n, const char *v);
/* The whole text, malloc'd (*len set). NULL on memory exhaustion. */
char *metrics_text(struct metrics *m, size_t *len);

#endif

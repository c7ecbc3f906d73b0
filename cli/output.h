/* output: plain-text tables for people (JSON goes through cli_print_json).
 * Columns are left-aligned, separated by three spaces, headers upper case. */
#ifndef SPARK_OUTPUT_H
#define SPARK_OUTPUT_H

#include <stdio.h>

typedef struct out_table out_table;

out_table *out_table_new(int ncols, const char *const headers[]);
/* Add a row of exactly ncols cells (NULL prints as "-"). Cells are copied. */
void out_table_row(out_table *t, const char *const cells[]);
/* printf-style single-cell helper for building rows. */
const char *out_fmt(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void out_table_print(out_table *t, FILE *f);
/* A duration for people: "2.5s" under a minute, else "3m07s". */
const char *out_fmt_ms(unsigned long long ms, char *buf, size_t len);
/* A Unix time as "YYYY-MM-DD HH:MM:SSZ" (UTC), or none when ts <= 0; returns buf. */
const char *out_fmt_utc(long long ts, const char *none, char *buf, size_t len);
/* s in upper case into out (ASCII letters; "pass" -> "PASS"), truncated to len. */
void out_upper(const char *s, char *out, size_t len);
void out_table_free(out_table *t);

#endif

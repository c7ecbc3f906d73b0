/* libFuzzer target for spark-router's routing log line (router/logline.c):
 * the input's first 48 bytes are the four reals, the three integers and the
 * flags, the rest (split at NUL bytes) the five strings. Invariants that
 * abort: the returned length is the same whatever the buffer, and a buffer
 * too small gets a NUL-terminated prefix; the line is one JSON object and a
 * '\n' that jansson parses back with exactly the documented keys; integers
 * and booleans come back exactly; a string that is valid UTF-8 comes back
 * equal and is escaped exactly as json_dumps escapes it; one that is not
 * comes back with U+FFFD in it and its ASCII bytes in order; a finite real
 * comes back within half a unit of its last decimal, a non-finite one null. */
#include "logline.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_str(json_t *o, const char *k, const char *in, const char *line)
{
	json_t *v = json_object_get(o, k);
	if (!json_is_string(v))
		abort();
	const char *got = json_string_value(v);
	json_t *ref = json_string(in); /* NULL when in is not valid UTF-8 */
	if (ref) {
		if (strcmp(got, in))
			abort();
		char *esc = json_dumps(ref, JSON_ENCODE_ANY);
		if (!esc || !strstr(line, esc))
			abort();
		free(esc);
		json_decref(ref);
		return;
	}
	if (!strstr(got, "\xEF\xBF\xBD"))
		abort();
	const char *g = got;
	for (const char *p = in; *p; p++) {
		if ((unsigned char)*p >= 0x80)
			continue;
		g = strchr(g, *p);
		if (!g)
			abort();
		g++;
	}
}

static void check_real(json_t *o, const char *k, double x, int dec)
{
	json_t *v = json_object_get(o, k);
	if (!isfinite(x)) {
		if (!json_is_null(v))
			abort();
		return;
	}
	if (!json_is_real(v))
		abort();
	double got = json_real_value(v);
	double tol = 0.5 * pow(10, -dec) + fabs(x) * 1e-15;
	if (fabs(got - x) > tol)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 48 || size > 100000)
		return 0;
	struct logline l;
	memset(&l, 0, sizeof l);
	double d[4];
	memcpy(d, data, sizeof d);
	int32_t iv[2];
	memcpy(iv, data + 32, sizeof iv);
	int32_t tok;
	memcpy(&tok, data + 40, sizeof tok);
	uint8_t flags = data[44];
	l.ts = d[0];
	l.ms = d[1];
	l.overhead_ms = d[2];
	l.ttft_ms = d[3];
	l.status = iv[0];
	l.attempts = iv[1];
	l.tokens_estimated = (long long)tok * (flags & 8 ? 1000000007LL : 1);
	l.stream = flags & 1;
	l.client_closed = flags & 2;
	l.has_ttft = flags & 4;
	/* the strings: the rest, NUL-terminated pieces */
	size_t rest = size - 48;
	char *s = malloc(rest + 6);
	memcpy(s, data + 48, rest);
	memset(s + rest, 0, 6);
	const char *str[6];
	size_t off = 0;
	for (int i = 0; i < 6; i++) {
		str[i] = s + off;
		off += strlen(s + off) + 1;
		if (off > rest)
			off = rest;
	}
	l.request_id = str[0];
	l.model = str[1];
	l.route = str[2];
	l.rule = str[3];
	l.target = str[4];
	l.upstream_error = flags & 16 ? str[5] : NULL;

	char small[64];
	size_t n = logline_format(small, sizeof small, &l);
	if (n < sizeof small ? strlen(small) != n : strlen(small) != sizeof small - 1)
		abort();
	char *line = malloc(n + 1);
	if (logline_format(line, n + 1, &l) != n || strlen(line) != n || n < 2 || line[n - 1] != '\n' ||
	    memchr(line, '\n', n - 1))
		abort();
	if (n < sizeof small && strcmp(small, line))
		abort();
	if (n >= sizeof small && strncmp(small, line, sizeof small - 1))
		abort();
	json_error_t err;
	json_t *o = json_loadb(line, n - 1, JSON_REJECT_DUPLICATES, &err);
	if (!json_is_object(o))
		abort();
	if (json_object_size(o) != 13u + l.has_ttft + !!l.upstream_error)
		abort();
	if (l.upstream_error)
		check_str(o, "upstream_error", l.upstream_error, line);
	else if (json_object_get(o, "upstream_error"))
		abort();
	check_str(o, "request_id", l.request_id, line);
	check_str(o, "model", l.model, line);
	check_str(o, "route", l.route, line);
	check_str(o, "rule", l.rule, line);
	check_str(o, "target", l.target, line);
	if (json_integer_value(json_object_get(o, "status")) != l.status ||
	    !json_is_integer(json_object_get(o, "status")) ||
	    json_integer_value(json_object_get(o, "attempts")) != l.attempts ||
	    json_integer_value(json_object_get(o, "tokens_estimated")) != l.tokens_estimated ||
	    json_is_true(json_object_get(o, "stream")) != l.stream ||
	    !json_is_boolean(json_object_get(o, "stream")) ||
	    json_is_true(json_object_get(o, "client_closed")) != l.client_closed ||
	    !json_is_boolean(json_object_get(o, "client_closed")))
		abort();
	check_real(o, "ts", l.ts, 6);
	check_real(o, "ms", l.ms, 3);
	check_real(o, "overhead_ms", l.overhead_ms, 3);
	if (l.has_ttft)
		check_real(o, "ttft_ms", l.ttft_ms, 3);
	else if (json_object_get(o, "ttft_ms"))
		abort();
	json_decref(o);
	free(line);
	free(s);
	return 0;
}

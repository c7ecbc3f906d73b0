/* logline: the routing log's line without json_pack and json_dumps (see logline.h). */
#include "logline.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct out {
	char *p;
	size_t len, cap;
};

static void put(struct out *o, const char *s, size_t n)
{
	if (o->len < o->cap) {
		size_t room = o->cap - o->len;
		memcpy(o->p + o->len, s, n < room ? n : room);
	}
	o->len += n;
}

static void putc1(struct out *o, char c)
{
	if (o->len < o->cap)
		o->p[o->len] = c;
	o->len++;
}

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 and in *bad
 * the length of the maximal invalid subpart (Unicode's "U+FFFD substitution
 * of maximal subparts"). */
static size_t utf8_seq(const unsigned char *s, size_t n, size_t *bad)
{
	unsigned char c = s[0];
	size_t need;
	unsigned char lo = 0x80, hi = 0xBF; /* range of the second byte */
	if (c >= 0xC2 && c <= 0xDF)
		need = 2;
	else if (c >= 0xE0 && c <= 0xEF) {
		need = 3;
		if (c == 0xE0)
			lo = 0xA0;
		else if (c == 0xED)
			hi = 0x9F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		need = 4;
		if (c == 0xF0)
			lo = 0x90;
		else if (c == 0xF4)
			hi = 0x8F;
	} else {
		*bad = 1;
		return 0;
	}
	size_t i = 1;
	for (; i < need; i++) {
		if (i >= n)
			break;
		unsigned char b = s[i];
		if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF))
			break;
	}
	if (i == need)
		return need;
	*bad = i;
	return 0;
}

static void put_str(struct out *o, const char *str)
{
	static const char hex[] = "0123456789ABCDEF"; /* as jansson writes them */
	const unsigned char *s = (const unsigned char *)(str ? str : "");
	size_t n = strlen((const char *)s);
	putc1(o, '"');
	size_t run = 0; /* bytes before s[i] to copy as they are */
	size_t i = 0;
	while (i < n) {
		unsigned char c = s[i];
		if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
			i++;
			run++;
			continue;
		}
		if (c >= 0x80) {
			size_t bad = 0, k = utf8_seq(s + i, n - i, &bad);
			if (k) {
				i += k;
				run += k;
				continue;
			}
			put(o, (const char *)s + i - run, run);
			run = 0;
			put(o, "\xEF\xBF\xBD", 3);
			i += bad;
			continue;
		}
		put(o, (const char *)s + i - run, run);
		run = 0;
		char e[6] = {'\\', 0};
		size_t en = 2;
		switch (c) {
		case '"': e[1] = '"'; break;
		case '\\': e[1] = '\\'; break;
		case '\b': e[1] = 'b'; break;
		case '\f': e[1] = 'f'; break;
		case '\n': e[1] = 'n'; break;
		case '\r': e[1] = 'r'; break;
		case '\t': e[1] = 't'; break;
		default:
			e[1] = 'u';
			e[2] = '0';
			e[3] = '0';
			e[4] = hex[c >> 4];
			e[5] = hex[c & 15];
			en = 6;
		}
		put(o, e, en);
		i++;
	}
	put(o, (const char *)s + i - run, run);
	putc1(o, '"');
}

static void put_u64(struct out *o, uint64_t v)
{
	char d[24];
	size_t k = sizeof d;
	do {
		d[--k] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	put(o, d + k, sizeof d - k);
}

static void put_int(struct out *o, long long v)
{
	if (v < 0) {
		putc1(o, '-');
		put_u64(o, (uint64_t)0 - (uint64_t)v);
	} else
		put_u64(o, (uint64_t)v);
}

/* x with at most `dec` decimals (1 to 6), trailing zeros dropped, at least
 * one decimal: always a JSON real. Values too large for that (never a time
 * here) are written by printf's %.17g; non-finite ones, which JSON cannot
 * hold, as null. */
static void put_real(struct out *o, double x, int dec)
{
	static const uint64_t pow10[] = {1, 10, 100, 1000, 10000, 100000, 1000000};
	if (!isfinite(x)) {
		put(o, "null", 4);
		return;
	}
	double scale = (double)pow10[dec];
	double a = fabs(x) * scale + 0.5;
	if (a >= 9007199254740992.0) { /* 2^53: past exact integers */
		char b[40];
		int n = snprintf(b, sizeof b, "%.17g", x);
		put(o, b, (size_t)n);
		if (!strpbrk(b, ".eE"))
			put(o, ".0", 2);
		return;
	}
	uint64_t v = (uint64_t)a;
	if (x < 0 && v)
		putc1(o, '-');
	put_u64(o, v / pow10[dec]);
	uint64_t f = v % pow10[dec];
	char d[8];
	for (int i = dec - 1; i >= 0; i--) {
		d[i] = (char)('0' + f % 10);
		f /= 10;
	}
	int n = dec;
	while (n > 1 && d[n - 1] == '0')
		n--;
	putc1(o, '.');
	put(o, d, (size_t)n);
}

#define KEY(o, lit) put(o, lit, sizeof lit - 1)

size_t logline_format(char *buf, size_t cap, const struct logline *l)
{
	struct out o = {buf, 0, cap};
	KEY(&o, "{\"ts\":");
	put_real(&o, l->ts, 6);
	KEY(&o, ",\"request_id\":");
	put_str(&o, l->request_id);
	KEY(&o, ",\"model\":");
	put_str(&o, l->model);
	KEY(&o, ",\"route\":");
	put_str(&o, l->route);
	KEY(&o, ",\"rule\":");
	put_str(&o, l->rule);
	KEY(&o, ",\"target\":");
	put_str(&o, l->target);
	KEY(&o, ",\"status\":");
	put_int(&o, l->status);
	KEY(&o, ",\"attempts\":");
	put_int(&o, l->attempts);
	if (l->stream)
		KEY(&o, ",\"stream\":true");
	else
		KEY(&o, ",\"stream\":false");
	KEY(&o, ",\"tokens_estimated\":");
	put_int(&o, l->tokens_estimated);
	if (l->client_closed)
		KEY(&o, ",\"client_closed\":true");
	else
		KEY(&o, ",\"client_closed\":false");
	KEY(&o, ",\"ms\":");
	put_real(&o, l->ms, 3);
	KEY(&o, ",\"overhead_ms\":");
	put_real(&o, l->overhead_ms, 3);
	if (l->has_ttft) {
		KEY(&o, ",\"ttft_ms\":");
		put_real(&o, l->ttft_ms, 3);
	}
	if (l->upstream_error) {
		KEY(&o, ",\"upstream_error\":");
		put_str(&o, l->upstream_error);
	}
	KEY(&o, "}\n");
	if (o.len < cap)
		buf[o.len] = '\0';
	else if (cap)
		buf[cap - 1] = '\0';
	return o.len;
}

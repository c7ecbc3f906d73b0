/* hostlist: see hostlist.h. */
#include "hostlist.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '_' || c == '.';
}

static int add(struct hostlist *h, const char *name, size_t len, size_t *cap)
{
	if (len == 0)
		return -EINVAL;
	if (len > HOSTLIST_NAME_MAX)
		return -E2BIG;
	if (h->n >= HOSTLIST_MAX)
		return -E2BIG;
	if (h->n == *cap) {
		size_t nc = *cap ? *cap * 2 : 16;
		void *p = realloc(h->names, nc * sizeof *h->names);
		if (!p)
			return -ENOMEM;
		h->names = p;
		*cap = nc;
	}
	memcpy(h->names[h->n], name, len);
	h->names[h->n][len] = '\0';
	h->n++;
	return 0;
}

/* One decimal bound of 1-9 digits at *p; its width in *w. */
static int bound(const char **p, const char *end, long *v, int *w)
{
	const char *s = *p;
	long x = 0;
	int n = 0;
	while (s < end && *s >= '0' && *s <= '9') {
		if (++n > 9)
			return -EINVAL;
		x = x * 10 + (*s - '0');
		s++;
	}
	if (n == 0)
		return -EINVAL;
	*p = s;
	*v = x;
	*w = n;
	return 0;
}

/* Expand item[0..len) behind prefix[0..pl). */
static int expand(struct hostlist *h, size_t *cap, char *prefix, size_t pl, const char *item,
		  size_t len)
{
	const char *lb = memchr(item, '[', len);
	size_t lit = lb ? (size_t)(lb - item) : len;
	if (pl + lit > HOSTLIST_NAME_MAX)
		return -E2BIG;
	for (size_t i = 0; i < lit; i++)
		if (!name_char(item[i]))
			return -EINVAL;
	memcpy(prefix + pl, item, lit);
	pl += lit;
	if (!lb)
		return add(h, prefix, pl, cap);
	const char *rb = memchr(lb, ']', len - lit);
	if (!rb || rb == lb + 1)
		return -EINVAL;
	const char *rest = rb + 1;
	size_t restlen = len - (size_t)(rest - item);
	const char *p = lb + 1;
	while (p < rb) {
		long lo, hi;
		int wlo, whi;
		if (bound(&p, rb, &lo, &wlo) < 0)
			return -EINVAL;
		hi = lo;
		whi = wlo;
		if (p < rb && *p == '-') {
			p++;
			if (bound(&p, rb, &hi, &whi) < 0 || hi < lo)
				return -EINVAL;
		}
		if (p < rb) {
			if (*p != ',' || p + 1 == rb)
				return -EINVAL;
			p++;
		}
		/* numbers are at least as wide as the low bound: "01-10" pads */
		int width = wlo;
		(void)whi;
		for (long v = lo; v <= hi; v++) {
			char num[16];
			int nl = snprintf(num, sizeof num, "%0*ld", width, v);
			if (pl + (size_t)nl > HOSTLIST_NAME_MAX)
				return -E2BIG;
			memcpy(prefix + pl, num, (size_t)nl);
			int r = expand(h, cap, prefix, pl + (size_t)nl, rest, restlen);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

int hostlist_expand(const char *s, struct hostlist *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof *out);
	if (err && errlen)
		err[0] = '\0';
	size_t len = s ? strnlen(s, HOSTLIST_TEXT_MAX + 1) : 0;
	if (len == 0 || len > HOSTLIST_TEXT_MAX) {
		if (err)
			snprintf(err, errlen, len ? "the host list is longer than %d characters"
						  : "the host list is empty",
				 HOSTLIST_TEXT_MAX);
		return len ? -E2BIG : -EINVAL;
	}
	/* brackets balanced and not nested; inside them only digits, ',' and '-' */
	int depth = 0;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		bool ok = c == '[' ? depth++ == 0
			: c == ']' ? depth-- == 1
			: depth ? (c >= '0' && c <= '9') || c == ',' || c == '-'
				: name_char(c) || c == ',';
		if (!ok) {
			if (err)
				snprintf(err, errlen, "unexpected '%c' at character %zu of the host list",
					 c >= 0x20 && c < 0x7f ? c : '?', i + 1);
			return -EINVAL;
		}
	}
	if (depth) {
		if (err)
			snprintf(err, errlen, "a '[' of the host list is not closed");
		return -EINVAL;
	}
	size_t cap = 0;
	char prefix[HOSTLIST_NAME_MAX + 16];
	size_t start = 0;
	depth = 0;
	for (size_t i = 0; i <= len; i++) {
		if (i < len && s[i] == '[')
			depth = 1;
		else if (i < len && s[i] == ']')
			depth = 0;
		if (i < len && (depth || s[i] != ','))
			continue;
		int r = i > start ? expand(out, &cap, prefix, 0, s + start, i - start) : -EINVAL;
		if (r < 0) {
			int il = (int)(i - start > 40 ? 40 : i - start);
			if (err && r == -E2BIG)
				snprintf(err, errlen,
					 "the host list has more than %d names or a name longer than %d "
					 "characters (at '%.*s')", HOSTLIST_MAX, HOSTLIST_NAME_MAX, il,
					 s + start);
			else if (err)
				snprintf(err, errlen, "bad host list item '%.*s'", il, s + start);
			return r;
		}
		start = i + 1;
	}
	return 0;
}

void hostlist_free(struct hostlist *h)
{
	free(h->names);
	h->names = NULL;
	h->n = 0;
}

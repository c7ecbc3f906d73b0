#include "rx.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

struct rx {
	char *pattern;
	pcre2_code *code;
	pcre2_match_context *mctx;
	bool jit;
};

/* GNU's word-boundary escapes \< and \> into PCRE2 syntax (PCRE2 reads them
 * as the characters < and >); the rest is copied. out holds 9 bytes per byte
 * of pattern. */
static void translate(const char *p, char *out)
{
	bool in_class = false;
	size_t o = 0;
	for (size_t i = 0; p[i]; i++) {
		if (p[i] == '\\' && p[i + 1]) {
			if (!in_class && (p[i + 1] == '<' || p[i + 1] == '>')) {
				const char *s = p[i + 1] == '<' ? "\\b(?=\\w)" : "\\b(?<=\\w)";
				memcpy(out + o, s, strlen(s));
				o += strlen(s);
			} else {
				out[o++] = p[i];
				out[o++] = p[i + 1];
			}
			i++;
			continue;
		}
		if (!in_class && p[i] == '[') {
			in_class = true;
			out[o++] = p[i];
			if (p[i + 1] == '^')
				out[o++] = p[++i];
			if (p[i + 1] == ']') /* a ] first in a class is the character */
				out[o++] = p[++i];
			continue;
		}
		if (in_class && p[i] == '[' && p[i + 1] == ':') { /* [:alpha:] */
			const char *e = strstr(p + i + 2, ":]");
			if (e) {
				size_t n = (size_t)(e + 2 - (p + i));
				memcpy(out + o, p + i, n);
				o += n;
				i += n - 1;
				continue;
			}
		}
		if (in_class && p[i] == ']')
			in_class = false;
		out[o++] = p[i];
	}
	out[o] = 0;
}

int rx_compile(const char *pattern, struct rx **out, char *err, size_t errlen)
{
	*out = NULL;
	size_t n = strlen(pattern);
	if (n == 0 || n > RX_PATTERN_MAX) {
		snprintf(err, errlen, "a regular expression is 1-%d characters", RX_PATTERN_MAX);
		return -EINVAL;
	}
	char *pat = malloc(n * 9 + 1);
	struct rx *x = calloc(1, sizeof *x);
	if (!pat || !x) {
		free(pat);
		free(x);
		return -ENOMEM;
	}
	translate(pattern, pat);
	x->pattern = strdup(pattern);
	int ec;
	PCRE2_SIZE eo;
	x->code = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
				PCRE2_CASELESS | PCRE2_MULTILINE | PCRE2_UTF | PCRE2_NEVER_BACKSLASH_C,
				&ec, &eo, NULL);
	free(pat);
	if (!x->code) {
		char m[160];
		pcre2_get_error_message(ec, (PCRE2_UCHAR *)m, sizeof m);
		snprintf(err, errlen, "%s (near character %zu)", m, (size_t)eo < n ? (size_t)eo + 1 : n);
		rx_free(x);
		return -EINVAL;
	}
	x->mctx = pcre2_match_context_create(NULL);
	if (!x->mctx || !x->pattern) {
		rx_free(x);
		return -ENOMEM;
	}
	pcre2_set_match_limit(x->mctx, RX_MATCH_LIMIT);
	pcre2_set_depth_limit(x->mctx, RX_DEPTH_LIMIT);
	pcre2_set_heap_limit(x->mctx, RX_HEAP_LIMIT_KIB);
	/* JIT where the platform has it (amd64, arm64), else the interpreter */
	x->jit = pcre2_jit_compile(x->code, PCRE2_JIT_COMPLETE) == 0;
	*out = x;
	return 0;
}

void rx_free(struct rx *x)
{
	if (!x)
		return;
	pcre2_match_context_free(x->mctx);
	pcre2_code_free(x->code);
	free(x->pattern);
	free(x);
}

bool rx_jit(const struct rx *x)
{
	return x->jit;
}

const char *rx_pattern(const struct rx *x)
{
	return x->pattern;
}

int rx_match(const struct rx *x, const char *text, size_t len)
{
	uint32_t opts = 0;
	if (len > RX_TEXT_MAX) {
		len = RX_TEXT_MAX;
		while (len > 0 && ((unsigned char)text[len] & 0xC0) == 0x80)
			len--;
		opts |= PCRE2_NOTEOL; /* the cut is not the end of the text */
	}
	pcre2_match_data *md = pcre2_match_data_create(1, NULL);
	if (!md)
		return -ENOMEM;
	/* a JIT stack of its own per match: matches run in several threads */
	pcre2_jit_stack *js = NULL;
	pcre2_match_context *mc = x->mctx;
	pcre2_match_context *own = NULL;
	if (x->jit) {
		js = pcre2_jit_stack_create(32 * 1024, RX_JIT_STACK_MAX, NULL);
		own = js ? pcre2_match_context_copy(x->mctx) : NULL;
		if (own) {
			pcre2_jit_stack_assign(own, NULL, js);
			mc = own;
		}
	}
	int rc = pcre2_match(x->code, (PCRE2_SPTR)text, len, 0, opts, md, mc);
	pcre2_match_context_free(own);
	pcre2_jit_stack_free(js);
	pcre2_match_data_free(md);
	if (rc >= 0)
		return 1;
	switch (rc) {
	case PCRE2_ERROR_NOMATCH:
		return 0;
	case PCRE2_ERROR_MATCHLIMIT:
	case PCRE2_ERROR_DEPTHLIMIT:
	case PCRE2_ERROR_HEAPLIMIT:
	case PCRE2_ERROR_JIT_STACKLIMIT:
		return -E2BIG;
	case PCRE2_ERROR_NOMEMORY:
		return -ENOMEM;
	default:
		return -EINVAL; /* a UTF-8 error, or an error of the library */
	}
}

/* ---- the shape check of route check ---- */

struct grp {
	bool repeat, alt; /* holds a repeat / alternatives (also in a group inside) */
};

/* At p: an unbounded repeat (*, +, {n,}) or a large {n,m}? Sets *len. */
static bool repeat_at(const char *p, size_t *len)
{
	*len = 0;
	if (*p == '*' || *p == '+') {
		*len = 1;
		return true;
	}
	if (*p == '?') {
		*len = 1;
		return false;
	}
	if (*p != '{')
		return false;
	const char *q = p + 1;
	while (*q >= '0' && *q <= '9')
		q++;
	if (*q == '}') {
		*len = (size_t)(q + 1 - p);
		return false;
	}
	if (*q != ',')
		return false;
	q++;
	if (*q == '}') {
		*len = (size_t)(q + 1 - p);
		return true;
	}
	long hi = 0;
	for (; *q >= '0' && *q <= '9'; q++)
		if (hi < 100000)
			hi = hi * 10 + (*q - '0');
	if (*q != '}')
		return false;
	*len = (size_t)(q + 1 - p);
	return hi > 1;
}

const char *rx_unbounded(const char *p)
{
	struct grp st[64];
	size_t n = 0;
	for (size_t i = 0; p[i]; i++) {
		struct grp *g = n ? &st[n - 1] : NULL;
		size_t ql;
		if (p[i] == '\\' && p[i + 1]) {
			char c = p[i + 1];
			if ((c >= '1' && c <= '9') || c == 'g' || c == 'k')
				return "a backreference: matching it can take time exponential in the text";
			i++;
			if (repeat_at(p + i + 1, &ql) && g)
				g->repeat = true;
			continue;
		}
		if (p[i] == '[') { /* a class is one character */
			size_t j = i + 1;
			if (p[j] == '^')
				j++;
			if (p[j] == ']')
				j++;
			while (p[j] && p[j] != ']') {
				if (p[j] == '[' && p[j + 1] == ':') {
					const char *e = strstr(p + j + 2, ":]");
					j = e ? (size_t)(e - p) + 2 : j + 1;
					continue;
				}
				j += p[j] == '\\' && p[j + 1] ? 2 : 1;
			}
			if (!p[j])
				return NULL;
			i = j;
			if (repeat_at(p + i + 1, &ql) && g)
				g->repeat = true;
			continue;
		}
		if (p[i] == '(') {
			if (n == sizeof st / sizeof st[0])
				return "groups nested too deep to check";
			st[n++] = (struct grp){false, false};
			continue;
		}
		if (p[i] == '|') {
			if (g)
				g->alt = true;
			continue;
		}
		if (p[i] == ')') {
			if (!n)
				continue;
			struct grp in = st[--n];
			bool rep = repeat_at(p + i + 1, &ql);
			if (rep && (in.repeat || in.alt))
				return in.repeat ? "a repeated group that holds a repeat (like (a+)+): matching it can take time exponential in the text"
						 : "a repeated group of alternatives (like (a|aa)*): matching it can take time exponential in the text when they overlap";
			struct grp *up = n ? &st[n - 1] : NULL;
			if (up) {
				up->repeat |= in.repeat || rep;
				up->alt |= in.alt;
			}
			continue;
		}
		if (p[i] != '*' && p[i] != '+' && p[i] != '{' && p[i] != '?' &&
		    repeat_at(p + i + 1, &ql)) {
			if (g)
				g->repeat = true;
		}
	}
	return NULL;
}

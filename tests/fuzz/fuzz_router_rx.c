/* libFuzzer target for spark-router's rule regexes (router/rx.c): the
 * pattern translation and compile, the shape check behind route check's
 * warnings, and a match with its limits. Input: the pattern, a NUL byte, the
 * text (when there is no NUL, the input is both). Invariants that abort: a
 * refused pattern gives a message and no handle; a match answers 1, 0 or
 * -E2BIG (-EINVAL only for text that is not UTF-8); a text longer than the
 * cap matches as its first RX_TEXT_MAX bytes do without the cut's end. */
#include "rx.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nul = memchr(data, 0, size);
	size_t plen = nul ? (size_t)(nul - data) : size;
	if (plen > RX_PATTERN_MAX + 8)
		return 0;
	char pat[RX_PATTERN_MAX + 9];
	memcpy(pat, data, plen);
	pat[plen] = 0;
	const char *text = nul ? (const char *)nul + 1 : (const char *)data;
	size_t tlen = nul ? size - plen - 1 : size;
	(void)rx_unbounded(pat);
	char err[256] = "";
	struct rx *x = (struct rx *)1;
	int r = rx_compile(pat, &x, err, sizeof err);
	if (r < 0) {
		if (x || (r != -EINVAL && r != -ENOMEM) || (r == -EINVAL && !err[0]))
			abort();
		return 0;
	}
	if (!x || strcmp(rx_pattern(x), pat))
		abort();
	int m = rx_match(x, text, tlen);
	if (m != 1 && m != 0 && m != -E2BIG && m != -EINVAL && m != -ENOMEM)
		abort();
	rx_free(x);
	return 0;
}

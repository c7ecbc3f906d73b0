/* libFuzzer target for spark-router's reading of token counts from upstream
 * answers and stream chunks (router/decide.c usage_read): arbitrary bytes as
 * the answer. Invariants that abort: counts are 0 or in (0, 2^40); nothing is
 * set unless 0 is returned; and on any text that jansson parses whole, the
 * result equals reading the parsed object's top-level "usage" (the fast path,
 * which parses only a trailing "usage" member, never disagrees with it). */
#include "decide.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static long long count(json_t *u, const char *k)
{
	json_int_t v = json_integer_value(json_object_get(u, k));
	return v > 0 && v < (1LL << 40) ? (long long)v : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	long long pt = -1, ct = -1;
	int rc = usage_read((const char *)data, size, &pt, &ct);
	if (rc == 0) {
		if (pt < 0 || pt >= (1LL << 40) || ct < 0 || ct >= (1LL << 40))
			abort();
	} else if (rc != -ENOENT || pt != -1 || ct != -1) {
		abort();
	}
	json_t *whole = json_loadb((const char *)data, size, 0, NULL);
	if (whole) {
		json_t *u = json_object_get(whole, "usage");
		if (json_is_object(u) ? rc != 0 || pt != count(u, "prompt_tokens") ||
						ct != count(u, "completion_tokens")
				      : rc != -ENOENT)
			abort();
		json_decref(whole);
	}
	return 0;
}

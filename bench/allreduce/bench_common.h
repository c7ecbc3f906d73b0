/* Shared argument handling of the peer benchmark programs (Open MPI, Gloo):
 * the same size list and iteration rule as spark-bench --sizes/--iter-bytes. */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_MAX_SIZES 64

static int bench_parse_sizes(const char *s, size_t *out)
{
	int n = 0;
	while (s && *s && n < BENCH_MAX_SIZES) {
		char *end;
		unsigned long long v = strtoull(s, &end, 10);
		if (*end == 'K' || *end == 'k') { v <<= 10; end++; }
		else if (*end == 'M' || *end == 'm') { v <<= 20; end++; }
		out[n++] = (size_t)v;
		s = *end == ',' ? end + 1 : end;
		if (*end && *end != ',')
			break;
	}
	return n;
}

/* iterations for one size: `iters`, cut so one size moves about iter_bytes */
static int bench_iters(int iters, size_t iter_bytes, size_t bytes)
{
	if (iter_bytes && bytes && (size_t)iters * bytes > iter_bytes) {
		size_t k = iter_bytes / bytes;
		return k < 3 ? 3 : (int)k;
	}
	return iters;
}
#endif

/* Helpers for the libsparkcoll unit tests: run N forked ranks on loopback
 * (sc_local_run) with a shared page for per-rank results, and exact test data. */
#ifndef SC_TEST_UTIL_H
#define SC_TEST_UTIL_H

#include "sc_internal.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define TU_MAXR 16

typedef struct {
	int rc[TU_MAXR];          /* per-rank result code */
	int64_t val[TU_MAXR][8];  /* per-rank free slots */
	char msg[TU_MAXR][256];
	pid_t pid[TU_MAXR];
	int flag;
	void *user;
} tu_shared_t;

static inline tu_shared_t *tu_shared_new(void)
{
	void *p = mmap(NULL, sizeof(tu_shared_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
	               -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	memset(p, 0, sizeof(tu_shared_t));
	return p;
}

static inline void tu_shared_free(tu_shared_t *s) { munmap(s, sizeof(*s)); }

/* Run fn on n forked ranks; every rank must return 0 (its message is shown
 * if not) and every process must exit cleanly. */
static inline void tu_run_ok(int n, sc_local_fn fn, int timeout_ms)
{
	tu_shared_t *sh = tu_shared_new();
	int st = sc_local_run(n, fn, sh, timeout_ms);
	for (int r = 0; r < n; r++)
		cr_expect(sh->rc[r] == 0, "n=%d rank %d: %s", n, r, sh->msg[r]);
	cr_assert(st == 0, "n=%d: a rank exited with status %d", n, st);
	tu_shared_free(sh);
}

/* Options for fast tests: fixed crossover (no calibration), short timeouts. */
static inline void tu_opts(sc_options_t *o, int listen_fd)
{
	sc_options_default(o);
	o->listen_fd = listen_fd;
	o->oneshot_max = 64 * 1024;
	o->timeout_ms = 10000;
	o->connect_timeout_ms = 10000;
	o->pair_timeout_ms = 2000;
}

/* exact small integers: sums over <= 8 ranks stay exact in bf16 */
static inline int64_t tu_val(int rank, size_t i, int salt)
{
	return (int64_t)((i * 13u + (size_t)rank * 7u + (size_t)salt) % 31u) - 15;
}

static inline int64_t tu_expect(int n, size_t i, int salt, sc_op_t op)
{
	int64_t e = tu_val(0, i, salt);
	for (int r = 1; r < n; r++) {
		int64_t v = tu_val(r, i, salt);
		e = op == SC_SUM ? e + v : op == SC_MAX ? (v > e ? v : e) : (v < e ? v : e);
	}
	return e;
}

static inline uint64_t tu_hash(const void *p, size_t len)
{
	const uint8_t *b = p;
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < len; i++) {
		h ^= b[i];
		h *= 1099511628211ull;
	}
	return h;
}

/* deterministic pseudo-random floats in [-1, 1) per (rank, i) */
static inline float tu_rand(int rank, size_t i)
{
	uint64_t x = (uint64_t)rank * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull + 1;
	x ^= x >> 31;
	x *= 0x94D049BB133111EBull;
	x ^= x >> 29;
	return (float)((double)(x >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

#endif

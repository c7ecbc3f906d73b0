/* sc_dtype.c - element types, portable f16/bf16 conversion, reduction kernels.
 *
 * Reductions fold sources in the order given (rank order for one-shot), in
 * blocks, so the output may alias any one source at the same offset. f16 and
 * bf16 are widened to f32, folded in f32 and rounded once per call. */
#include "sc_internal.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

size_t sc_dtype_size(sc_dtype_t d)
{
	switch (d) {
	case SC_F32: return 4;
	case SC_F16: return 2;
	case SC_BF16: return 2;
	case SC_I32: return 4;
	case SC_I64: return 8;
	}
	return 0;
}

static const char *const dtype_names[] = {"f32", "f16", "bf16", "i32", "i64"};
static const char *const op_names[] = {"sum", "max", "min"};
static const char *const algo_names[] = {"auto", "oneshot", "ring", "relay", "doubling"};

const char *sc_dtype_name(sc_dtype_t d)
{
	return (unsigned)d < SC_DTYPE_COUNT ? dtype_names[d] : "?";
}
const char *sc_op_name(sc_op_t o) { return (unsigned)o < SC_OP_COUNT ? op_names[o] : "?"; }
const char *sc_algo_name(sc_algo_t a) { return (unsigned)a < SC_ALGO_COUNT ? algo_names[a] : "?"; }

static int parse_name(const char *s, const char *const *names, int n)
{
	if (!s)
		return -EINVAL;
	for (int i = 0; i < n; i++)
		if (strcasecmp(s, names[i]) == 0)
			return i;
	return -EINVAL;
}

int sc_dtype_parse(const char *s, sc_dtype_t *out)
{
	int i = parse_name(s, dtype_names, SC_DTYPE_COUNT);
	if (i < 0) {
		if (s && (strcasecmp(s, "float") == 0 || strcasecmp(s, "float32") == 0))
			i = SC_F32;
		else if (s && (strcasecmp(s, "half") == 0 || strcasecmp(s, "float16") == 0))
			i = SC_F16;
		else if (s && strcasecmp(s, "bfloat16") == 0)
			i = SC_BF16;
		else
			return -EINVAL;
	}
	*out = (sc_dtype_t)i;
	return 0;
}

int sc_op_parse(const char *s, sc_op_t *out)
{
	int i = parse_name(s, op_names, SC_OP_COUNT);
	if (i < 0)
		return i;
	*out = (sc_op_t)i;
	return 0;
}

int sc_algo_parse(const char *s, sc_algo_t *out)
{
	int i = parse_name(s, algo_names, SC_ALGO_COUNT);
	if (i < 0) {
		if (s && (strcasecmp(s, "one-shot") == 0 || strcasecmp(s, "one_shot") == 0))
			i = SC_ALGO_ONESHOT;
		else
			return -EINVAL;
	}
	*out = (sc_algo_t)i;
	return 0;
}

/* ---- conversions --------------------------------------------------------- */

static uint32_t f2u(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}
static float u2f(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

float sc_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t sc_f32_to_bf16(float f)
{
	uint32_t u = f2u(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign, force quiet */
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

float sc_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t man = h & 0x3ffu;
	uint32_t u;

	if (exp == 0x1f) {
		u = sign | 0x7f800000u | (man << 13);
	} else if (exp != 0) {
		u = sign | ((exp + 112u) << 23) | (man << 13);
	} else if (man == 0) {
		u = sign;
	} else { /* subnormal: normalise */
		int e = 113;
		while (!(man & 0x400u)) {
			man <<= 1;
			e--;
		}
		man &= 0x3ffu;
		u = sign | ((uint32_t)e << 23) | (man << 13);
	}
	return u2f(u);
}

uint16_t sc_f32_to_f16(float f)
{
	uint32_t u = f2u(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	uint32_t a = u & 0x7fffffffu;

	if (a >= 0x7f800000u) /* inf or NaN */
		return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u | ((a >> 13) & 0x3ffu) : 0));
	if (a >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
		return (uint16_t)(sign | 0x7c00u);
	if (a >= 0x38800000u) { /* normal f16 range (>= 2^-14) */
		uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - (112u << 23);
		return (uint16_t)(sign | (r >> 13));
	}
	if (a < 0x33000000u) /* < 2^-25: rounds to zero */
		return sign;
	{ /* subnormal f16 */
		uint32_t e = a >> 23;                 /* 102..112 */
		uint32_t m = (a & 0x7fffffu) | 0x800000u;
		uint32_t shift = 126u - e;            /* 14..24 */
		uint32_t res = m >> shift;
		uint32_t rem = m & ((1u << shift) - 1u);
		uint32_t half = 1u << (shift - 1u);
		if (rem > half || (rem == half && (res & 1u)))
			res++;
		return (uint16_t)(sign | res);
	}
}

/* ---- reductions ---------------------------------------------------------- */

#define BLK 512

static inline float fmaxx(float a, float b) { return a > b ? a : b; }
static inline float fminx(float a, float b) { return a < b ? a : b; }

/* Two-input kernels: out[i] = a[i] op b[i]; out may alias a or b. */
#define DEF2(name, T, EXPR)                                                                 \
	static void name(T *out, const T *a, const T *b, size_t n)                          \
	{                                                                                   \
		for (size_t i = 0; i < n; i++) {                                            \
			T x = a[i], y = b[i];                                               \
			out[i] = (EXPR);                                                    \
		}                                                                           \
	}
DEF2(sum_f32, float, x + y)
DEF2(max_f32, float, fmaxx(x, y))
DEF2(min_f32, float, fminx(x, y))
DEF2(sum_i32, int32_t, (int32_t)((uint32_t)x + (uint32_t)y))
DEF2(max_i32, int32_t, x > y ? x : y)
DEF2(min_i32, int32_t, x < y ? x : y)
DEF2(sum_i64, int64_t, (int64_t)((uint64_t)x + (uint64_t)y))
DEF2(max_i64, int64_t, x > y ? x : y)
DEF2(min_i64, int64_t, x < y ? x : y)

static void load_half(float *dst, const uint16_t *src, size_t n, int bf)
{
	if (bf)
		for (size_t i = 0; i < n; i++)
			dst[i] = sc_bf16_to_f32(src[i]);
	else
		for (size_t i = 0; i < n; i++)
			dst[i] = sc_f16_to_f32(src[i]);
}

static void store_half(uint16_t *dst, const float *src, size_t n, int bf)
{
	if (bf)
		for (size_t i = 0; i < n; i++)
			dst[i] = sc_f32_to_bf16(src[i]);
	else
		for (size_t i = 0; i < n; i++)
			dst[i] = sc_f32_to_f16(src[i]);
}

static void fold_f32(float *acc, const float *x, size_t n, sc_op_t op)
{
	switch (op) {
	case SC_SUM: sum_f32(acc, acc, x, n); break;
	case SC_MAX: max_f32(acc, acc, x, n); break;
	case SC_MIN: min_f32(acc, acc, x, n); break;
	}
}

static void fold_i32(int32_t *acc, const int32_t *x, size_t n, sc_op_t op)
{
	switch (op) {
	case SC_SUM: sum_i32(acc, acc, x, n); break;
	case SC_MAX: max_i32(acc, acc, x, n); break;
	case SC_MIN: min_i32(acc, acc, x, n); break;
	}
}

static void fold_i64(int64_t *acc, const int64_t *x, size_t n, sc_op_t op)
{
	switch (op) {
	case SC_SUM: sum_i64(acc, acc, x, n); break;
	case SC_MAX: max_i64(acc, acc, x, n); break;
	case SC_MIN: min_i64(acc, acc, x, n); break;
	}
}

void sc_reduce(void *out, const void *const *srcs, int nsrc, size_t count, sc_dtype_t dt,
               sc_op_t op)
{
	size_t es = sc_dtype_size(dt);

	if (nsrc <= 0 || count == 0)
		return;
	if (nsrc == 1) {
		if (out != srcs[0])
			memmove(out, srcs[0], count * es);
		return;
	}
	if (dt == SC_F16 || dt == SC_BF16) {
		int bf = dt == SC_BF16;
		float acc[BLK], tmp[BLK];
		for (size_t off = 0; off < count; off += BLK) {
			size_t n = count - off < BLK ? count - off : BLK;
			load_half(acc, (const uint16_t *)srcs[0] + off, n, bf);
			for (int s = 1; s < nsrc; s++) {
				load_half(tmp, (const uint16_t *)srcs[s] + off, n, bf);
				fold_f32(acc, tmp, n, op);
			}
			store_half((uint16_t *)out + off, acc, n, bf);
		}
		return;
	}
	{
		union { float f[BLK]; int32_t i[BLK]; int64_t l[BLK]; } acc;
		for (size_t off = 0; off < count; off += BLK) {
			size_t n = count - off < BLK ? count - off : BLK;
			memcpy(&acc, (const char *)srcs[0] + off * es, n * es);
			for (int s = 1; s < nsrc; s++) {
				const char *x = (const char *)srcs[s] + off * es;
				switch (dt) {
				case SC_F32: fold_f32(acc.f, (const float *)x, n, op); break;
				case SC_I32: fold_i32(acc.i, (const int32_t *)x, n, op); break;
				case SC_I64: fold_i64(acc.l, (const int64_t *)x, n, op); break;
				default: break;
				}
			}
			memcpy((char *)out + off * es, &acc, n * es);
		}
	}
}

/* out[i] = a[i] op b[i] (ring reduce-scatter step); out may alias a or b. */
void sc_reduce2(void *out, const void *a, const void *b, size_t count, sc_dtype_t dt, sc_op_t op)
{
	switch (dt) {
	case SC_F32:
		switch (op) {
		case SC_SUM: sum_f32(out, a, b, count); return;
		case SC_MAX: max_f32(out, a, b, count); return;
		case SC_MIN: min_f32(out, a, b, count); return;
		}
		return;
	case SC_I32:
		switch (op) {
		case SC_SUM: sum_i32(out, a, b, count); return;
		case SC_MAX: max_i32(out, a, b, count); return;
		case SC_MIN: min_i32(out, a, b, count); return;
		}
		return;
	case SC_I64:
		switch (op) {
		case SC_SUM: sum_i64(out, a, b, count); return;
		case SC_MAX: max_i64(out, a, b, count); return;
		case SC_MIN: min_i64(out, a, b, count); return;
		}
		return;
	case SC_F16:
	case SC_BF16: {
		const void *srcs[2] = {a, b};
		sc_reduce(out, srcs, 2, count, dt, op);
		return;
	}
	}
}

double sc_dtype_get(const void *buf, size_t i, sc_dtype_t dt)
{
	switch (dt) {
	case SC_F32: return ((const float *)buf)[i];
	case SC_F16: return sc_f16_to_f32(((const uint16_t *)buf)[i]);
	case SC_BF16: return sc_bf16_to_f32(((const uint16_t *)buf)[i]);
	case SC_I32: return ((const int32_t *)buf)[i];
	case SC_I64: return (double)((const int64_t *)buf)[i];
	}
	return 0;
}

void sc_dtype_set(void *buf, size_t i, sc_dtype_t dt, double v)
{
	switch (dt) {
	case SC_F32: ((float *)buf)[i] = (float)v; break;
	case SC_F16: ((uint16_t *)buf)[i] = sc_f32_to_f16((float)v); break;
	case SC_BF16: ((uint16_t *)buf)[i] = sc_f32_to_bf16((float)v); break;
	case SC_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
	case SC_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
	}
}

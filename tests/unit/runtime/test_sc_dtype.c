/* Portable f16/bf16 conversion and the reduction kernels. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <string.h>

#include "sc_internal.h"

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

Test(dtype, f16_roundtrip_every_value)
{
	for (uint32_t h = 0; h < 65536; h++) {
		float f = sc_f16_to_f32((uint16_t)h);
		uint16_t back = sc_f32_to_f16(f);
		if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
			cr_assert((back & 0x7c00) == 0x7c00 && (back & 0x3ff), "NaN %04x stays NaN", h);
		else
			cr_assert_eq(back, h, "f16 %04x -> %g -> %04x", h, f, back);
	}
}

Test(dtype, f16_known_values)
{
	cr_assert_eq(sc_f32_to_f16(1.0f), 0x3c00);
	cr_assert_eq(sc_f32_to_f16(-2.0f), 0xc000);
	cr_assert_eq(sc_f32_to_f16(65504.0f), 0x7bff);
	cr_assert_eq(sc_f32_to_f16(65519.0f), 0x7bff);
	cr_assert_eq(sc_f32_to_f16(65520.0f), 0x7c00); /* ties to even: overflow */
	cr_assert_eq(sc_f32_to_f16(1e9f), 0x7c00);
	cr_assert_eq(sc_f32_to_f16(-INFINITY), 0xfc00);
	cr_assert_eq(sc_f32_to_f16(5.9604645e-8f), 0x0001); /* smallest subnormal */
	cr_assert_eq(sc_f32_to_f16(2.9802322e-8f), 0x0000); /* half of it: to even (0) */
	cr_assert_eq(sc_f32_to_f16(4.4703484e-8f), 0x0001); /* 0.75 ulp: up */
	cr_assert_eq(sc_f32_to_f16(6.1035156e-5f), 0x0400); /* smallest normal */
	cr_assert_eq(sc_f32_to_f16(1.0009765625f), 0x3c01);
	cr_assert_eq(sc_f32_to_f16(1.00048828125f), 0x3c00); /* tie -> even */
	cr_assert_eq(sc_f32_to_f16(1.00146484375f), 0x3c02); /* tie -> even (up) */
	cr_assert_eq(sc_f32_to_f16(-0.0f), 0x8000);
	cr_assert_eq(sc_f16_to_f32(0x0001), 5.9604645e-8f);
	cr_assert_eq(sc_f16_to_f32(0x03ff), 6.0975552e-5f);
}

/* Compare with the compiler's own conversion where it has one. */
Test(dtype, f16_matches_compiler_rounding)
{
#if defined(__FLT16_MAX__)
	uint32_t x = 12345;
	for (int i = 0; i < 2000000; i++) {
		x = x * 1664525u + 1013904223u;
		{
			float f = u2f((x & 0x8fffffffu) | ((x & 1) ? 0x30000000u : 0x38000000u));
			_Float16 ref = (_Float16)f;
			uint16_t rb;
			memcpy(&rb, &ref, 2);
			if (isnan(f))
				continue;
			cr_assert_eq(sc_f32_to_f16(f), rb, "%a: ours %04x compiler %04x", (double)f,
			             sc_f32_to_f16(f), rb);
		}
	}
#else
	cr_skip_test("no _Float16 in this compiler");
#endif
}

static uint16_t ref_bf16(float f)
{
	/* reference: round the exact value to nearest-even with doubles */
	uint32_t u = f2u(f);
	uint32_t lo = u & 0xffff, hi = u >> 16;
	if (lo > 0x8000 || (lo == 0x8000 && (hi & 1)))
		hi++;
	return (uint16_t)hi;
}

Test(dtype, bf16_rounding)
{
	uint32_t x = 99;
	cr_assert_eq(sc_f32_to_bf16(1.0f), 0x3f80);
	cr_assert_eq(sc_bf16_to_f32(0x3f80), 1.0f);
	cr_assert_eq(sc_f32_to_bf16(u2f(0x3f808000)), 0x3f80); /* tie to even */
	cr_assert_eq(sc_f32_to_bf16(u2f(0x3f818000)), 0x3f82);
	cr_assert_eq(sc_f32_to_bf16(u2f(0x7f7fffff)), 0x7f80); /* rounds to inf */
	cr_assert((sc_f32_to_bf16(NAN) & 0x7fc0) == 0x7fc0);
	cr_assert((sc_f32_to_bf16(u2f(0x7f800001)) & 0x7f) != 0, "signalling NaN stays NaN");
	for (int i = 0; i < 1000000; i++) {
		float f;
		x = x * 1664525u + 1013904223u;
		f = u2f(x);
		if (isnan(f))
			continue;
		cr_assert_eq(sc_f32_to_bf16(f), ref_bf16(f));
	}
	for (uint32_t h = 0; h < 65536; h++) {
		float f = sc_bf16_to_f32((uint16_t)h);
		if (!isnan(f))
			cr_assert_eq(sc_f32_to_bf16(f), h);
	}
}

Test(dtype, reduce_rank_order_and_aliasing)
{
	float a[1030], b[1030], c[1030], out[1030];
	const void *srcs[3] = {a, b, c};
	for (int i = 0; i < 1030; i++) {
		a[i] = 1e8f;
		b[i] = -1e8f;
		c[i] = 1.0f + (float)i;
	}
	sc_reduce(out, srcs, 3, 1030, SC_F32, SC_SUM);
	for (int i = 0; i < 1030; i++)
		cr_assert_eq(out[i], (a[i] + b[i]) + c[i]); /* exactly this order */
	/* output aliasing a later source (one-shot in place on rank 2) */
	sc_reduce(c, srcs, 3, 1030, SC_F32, SC_SUM);
	for (int i = 0; i < 1030; i++)
		cr_assert_eq(c[i], 1.0f + (float)i);
	{
		int64_t x[3] = {INT64_MAX, -5, 7}, y[3] = {1, -6, 8}, o[3];
		const void *s2[2] = {x, y};
		sc_reduce(o, s2, 2, 3, SC_I64, SC_MAX);
		cr_assert(o[0] == INT64_MAX && o[1] == -5 && o[2] == 8);
		sc_reduce(o, s2, 2, 3, SC_I64, SC_MIN);
		cr_assert(o[0] == 1 && o[1] == -6 && o[2] == 7);
		sc_reduce(o, s2, 2, 3, SC_I64, SC_SUM); /* wraps, no UB */
		cr_assert(o[0] == INT64_MIN && o[1] == -11 && o[2] == 15);
	}
	{
		int32_t x[2] = {INT32_MAX, 3}, y[2] = {1, -4}, o[2];
		sc_reduce2(o, x, y, 2, SC_I32, SC_SUM);
		cr_assert(o[0] == INT32_MIN && o[1] == -1);
		sc_reduce2(x, x, y, 2, SC_I32, SC_MIN);
		cr_assert(x[0] == 1 && x[1] == -4);
	}
}

Test(dtype, half_accumulates_in_f32)
{
	/* 2048 + 1 + 1 in f16: pairwise f16 rounding would give 2048; f32 accumulation 2050 */
	uint16_t a = sc_f32_to_f16(2048), b = sc_f32_to_f16(1), c = sc_f32_to_f16(1), o;
	const void *srcs[3] = {&a, &b, &c};
	sc_reduce(&o, srcs, 3, 1, SC_F16, SC_SUM);
	cr_assert_eq(sc_f16_to_f32(o), 2050.0f);
	{
		uint16_t x = sc_f32_to_bf16(256), y = sc_f32_to_bf16(1), z = sc_f32_to_bf16(1);
		const void *s2[3] = {&x, &y, &z};
		sc_reduce(&o, s2, 3, 1, SC_BF16, SC_SUM);
		cr_assert_eq(sc_bf16_to_f32(o), 258.0f);
		sc_reduce(&o, s2, 3, 1, SC_BF16, SC_MIN);
		cr_assert_eq(sc_bf16_to_f32(o), 1.0f);
	}
}

Test(dtype, names_and_parsing)
{
	sc_dtype_t d;
	sc_op_t o;
	sc_algo_t a;
	cr_assert_eq(sc_dtype_size(SC_F32), 4);
	cr_assert_eq(sc_dtype_size(SC_BF16), 2);
	cr_assert_eq(sc_dtype_size(SC_I64), 8);
	cr_assert_eq(sc_dtype_parse("bf16", &d), 0);
	cr_assert_eq(d, SC_BF16);
	cr_assert_eq(sc_dtype_parse("float16", &d), 0);
	cr_assert_eq(d, SC_F16);
	cr_assert_eq(sc_dtype_parse("f8", &d), -EINVAL);
	cr_assert_eq(sc_op_parse("MAX", &o), 0);
	cr_assert_eq(o, SC_MAX);
	cr_assert_eq(sc_op_parse("prod", &o), -EINVAL);
	cr_assert_eq(sc_algo_parse("one-shot", &a), 0);
	cr_assert_eq(a, SC_ALGO_ONESHOT);
	cr_assert_eq(sc_algo_parse("tree", &a), -EINVAL);
	cr_assert_str_eq(sc_dtype_name(SC_I32), "i32");
	cr_assert_str_eq(sc_algo_name(SC_ALGO_RING), "ring");
	cr_assert_str_eq(sc_strerror(-SC_EMISMATCH),
	                 "ranks called the collective with different count, type, op or collective");
	cr_assert_str_eq(sc_strerror(-ETIMEDOUT), "timed out waiting for a peer");
}

Test(dtype, element_get_and_set_every_type)
{
	union {
		float f[3];
		uint16_t h[3];
		int32_t i32[3];
		int64_t i64[3];
	} b;
	static const sc_dtype_t all[] = {SC_F32, SC_F16, SC_BF16, SC_I32, SC_I64};
	for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) {
		memset(&b, 0x5a, sizeof b);
		sc_dtype_set(&b, 1, all[k], -7.0);
		cr_assert_eq(sc_dtype_get(&b, 1, all[k]), -7.0, "%s", sc_dtype_name(all[k]));
		/* only element 1 was written */
		size_t es = sc_dtype_size(all[k]);
		for (size_t j = 0; j < es; j++) {
			cr_assert_eq(((uint8_t *)&b)[j], 0x5a);
			cr_assert_eq(((uint8_t *)&b)[2 * es + j], 0x5a);
		}
	}
	sc_dtype_set(&b, 0, SC_F16, 1.0 + 1.0 / 4096); /* rounds to nearest even: 1.0 */
	cr_assert_eq(b.h[0], 0x3c00);
	sc_dtype_set(&b, 0, SC_BF16, 3.5);
	cr_assert_eq(b.h[0], sc_f32_to_bf16(3.5f));
	sc_dtype_set(&b, 0, SC_I32, -2.75); /* integers truncate */
	cr_assert_eq(b.i32[0], -2);
	sc_dtype_set(&b, 0, SC_I64, (double)((int64_t)11 << 40));
	cr_assert_eq(b.i64[0], (int64_t)11 << 40);
	cr_assert_eq(sc_dtype_get(&b, 0, SC_I64), (double)((int64_t)11 << 40));
}

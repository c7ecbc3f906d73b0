/* dec_half.h - portable f16/bf16 <-> f32 conversions (round to nearest even),
 * inline so that the weight loops can vectorise them. No intrinsics: the
 * widening directions are mask-only arithmetic the compiler turns into SIMD. */
#ifndef SPARK_DEC_HALF_H
#define SPARK_DEC_HALF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float dec_bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof(f));
	return f;
}

static inline uint32_t dec_f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline float dec_bf16_to_f32(uint16_t h)
{
	return dec_bits_f32((uint32_t)h << 16);
}

static inline float dec_f16_to_f32(uint16_t h)
{
	uint32_t e = h & 0x7c00u, sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t inf = 0u - (uint32_t)(e == 0x7c00u), sub = 0u - (uint32_t)(e == 0);
	uint32_t bits = ((uint32_t)(h & 0x7fffu) << 13) + (112u << 23) + (inf & (112u << 23));
	uint32_t subbits = dec_f32_bits((float)(h & 0x3ffu) * 5.9604644775390625e-8f); /* 2^-24 */
	return dec_bits_f32(((bits & ~sub) | (subbits & sub)) | sign);
}

static inline uint16_t dec_f32_to_bf16(float f)
{
	uint32_t x = dec_f32_bits(f);
	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
	x += 0x7fffu + ((x >> 16) & 1u);
	return (uint16_t)(x >> 16);
}

static inline uint16_t dec_f32_to_f16(float f)
{
	uint32_t x = dec_f32_bits(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu, r;
	if (ax >= 0x7f800000u)
		return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
	if (ax >= 0x477ff000u) /* rounds to >= 65536 */
		return (uint16_t)(sign | 0x7c00u);
	if (ax < 0x38800000u) /* below 2^-14: subnormal or zero, exact scaling */
		return (uint16_t)(sign | (uint32_t)lrintf(dec_bits_f32(ax) * 16777216.0f));
	r = ax - (112u << 23);
	r += 0xfffu + ((r >> 13) & 1u);
	return (uint16_t)(sign | (r >> 13));
}

#endif

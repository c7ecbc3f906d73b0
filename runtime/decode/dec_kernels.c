/* dec_kernels.c - the arithmetic of a decoder step on one core.
 *
 * f32 matrix-vector products go to the system BLAS (OpenBLAS) when built with
 * it; f16/bf16 weights are widened on the fly by portable C that compilers
 * vectorise (omp simd reductions when -fopenmp-simd is available), so 16-bit
 * weights stream at 2 bytes per element. No intrinsics: the same code builds
 * on aarch64 and x86_64. */
#include "dec.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#ifdef DEC_HAVE_CBLAS
#include <cblas.h>
#endif

#define DEC_PRAGMA(x) _Pragma(#x)
#ifdef DEC_OMP_SIMD
#define SIMD_SUM(v) DEC_PRAGMA(omp simd reduction(+ : v))
#define SIMD_SUM4(a, b, c, d) DEC_PRAGMA(omp simd reduction(+ : a, b, c, d))
#define SIMD DEC_PRAGMA(omp simd)
#else
#define SIMD_SUM(v)
#define SIMD_SUM4(a, b, c, d)
#define SIMD
#endif

size_t dec_dtype_size(dec_dtype_t t)
{
	return t == DEC_F32 ? 4 : 2;
}

const char *dec_dtype_name(dec_dtype_t t)
{
	return t == DEC_F32 ? "f32" : t == DEC_F16 ? "f16" : "bf16";
}

int dec_dtype_parse(const char *s, dec_dtype_t *out)
{
	if (strcmp(s, "f32") == 0)
		*out = DEC_F32;
	else if (strcmp(s, "f16") == 0)
		*out = DEC_F16;
	else if (strcmp(s, "bf16") == 0)
		*out = DEC_BF16;
	else
		return -EINVAL;
	return 0;
}

#ifndef DEC_HAVE_CBLAS
static float dot_f32(const float *w, const float *x, int n)
{
	float acc = 0;
	SIMD_SUM(acc)
	for (int j = 0; j < n; j++)
		acc += w[j] * x[j];
	return acc;
}
#endif

/* Four rows at a time: four independent sums share each load of x, which
 * keeps the adders busy while the weights stream in. */
#define DOT4(NAME, CONV)                                                               \
	static void NAME##4(const uint16_t *w, size_t ld, const float *x, int n, float *y) \
	{                                                                                  \
		const uint16_t *w1 = w + ld, *w2 = w1 + ld, *w3 = w2 + ld;                     \
		float a0 = 0, a1 = 0, a2 = 0, a3 = 0;                                          \
		SIMD_SUM4(a0, a1, a2, a3)                                                      \
		for (int j = 0; j < n; j++) {                                                  \
			float xj = x[j];                                                           \
			a0 += CONV(w[j]) * xj;                                                     \
			a1 += CONV(w1[j]) * xj;                                                    \
			a2 += CONV(w2[j]) * xj;                                                    \
			a3 += CONV(w3[j]) * xj;                                                    \
		}                                                                              \
		y[0] = a0, y[1] = a1, y[2] = a2, y[3] = a3;                                    \
	}                                                                                  \
	static float NAME(const uint16_t *w, const float *x, int n)                       \
	{                                                                                  \
		float acc = 0;                                                                 \
		SIMD_SUM(acc)                                                                  \
		for (int j = 0; j < n; j++)                                                    \
			acc += CONV(w[j]) * x[j];                                                  \
		return acc;                                                                    \
	}

DOT4(dot_bf16, dec_bf16_to_f32)
DOT4(dot_f16, dec_f16_to_f32)

static void matvec16(const dec_mat_t *w, const float *x, float *y, int f16)
{
	const uint16_t *p = w->data;
	int i = 0;
	for (; i + 4 <= w->rows; i += 4, p += 4 * w->ld) {
		if (f16)
			dot_f164(p, w->ld, x, w->cols, y + i);
		else
			dot_bf164(p, w->ld, x, w->cols, y + i);
	}
	for (; i < w->rows; i++, p += w->ld)
		y[i] = f16 ? dot_f16(p, x, w->cols) : dot_bf16(p, x, w->cols);
}

void dec_matvec(const dec_mat_t *w, const float *x, float *y)
{
	if (w->rows <= 0)
		return;
	switch (w->dtype) {
	case DEC_F32:
#ifdef DEC_HAVE_CBLAS
		cblas_sgemv(CblasRowMajor, CblasNoTrans, w->rows, w->cols, 1.0f, w->data, (int)w->ld, x,
		            1, 0.0f, y, 1);
#else
		for (int i = 0; i < w->rows; i++)
			y[i] = dot_f32((const float *)w->data + (size_t)i * w->ld, x, w->cols);
#endif
		break;
	case DEC_BF16:
		matvec16(w, x, y, 0);
		break;
	case DEC_F16:
		matvec16(w, x, y, 1);
		break;
	}
}

void dec_rmsnorm(float *out, const float *x, const float *w, int n, float eps)
{
	float ss = 0, s;
	SIMD_SUM(ss)
	for (int i = 0; i < n; i++)
		ss += x[i] * x[i];
	s = 1.0f / sqrtf(ss / (float)n + eps);
	for (int i = 0; i < n; i++)
		out[i] = x[i] * s * w[i];
}

void dec_silu_mul(float *gate, const float *up, int n)
{
	for (int i = 0; i < n; i++) {
		float g = gate[i];
		gate[i] = g / (1.0f + expf(-g)) * up[i];
	}
}

void dec_rope_freqs(const dec_config_t *c, float *inv_freq)
{
	int half = c->head_dim / 2;
	for (int i = 0; i < half; i++) {
		double f = 1.0 / pow(c->rope_theta, (2.0 * i) / c->head_dim);
		if (c->rope_type == DEC_ROPE_LINEAR) {
			f /= c->rope_factor;
		} else if (c->rope_type == DEC_ROPE_LLAMA3) {
			double lo_wl = c->rope_orig_max_pos / c->rope_low_freq;
			double hi_wl = c->rope_orig_max_pos / c->rope_high_freq;
			double wl = 2 * M_PI / f;
			if (wl > lo_wl) {
				f /= c->rope_factor;
			} else if (wl >= hi_wl) {
				double sm = (c->rope_orig_max_pos / wl - c->rope_low_freq) /
				            (c->rope_high_freq - c->rope_low_freq);
				f = (1 - sm) * f / c->rope_factor + sm * f;
			}
		}
		inv_freq[i] = (float)f;
	}
}

/* Hugging Face "rotate_half" layout: element i pairs with i + head_dim/2. */
void dec_rope(float *v, int nheads, int head_dim, int pos, const float *inv_freq)
{
	int half = head_dim / 2;
	for (int i = 0; i < half; i++) {
		double a = (double)pos * inv_freq[i];
		float c = (float)cos(a), s = (float)sin(a);
		for (int h = 0; h < nheads; h++) {
			float *p = v + (size_t)h * head_dim;
			float x0 = p[i], x1 = p[i + half];
			p[i] = x0 * c - x1 * s;
			p[i + half] = x1 * c + x0 * s;
		}
	}
}

int dec_blas_name(char *buf, size_t len)
{
#ifdef DEC_HAVE_CBLAS
	return snprintf(buf, len, "%s", DEC_CBLAS_NAME);
#else
	return snprintf(buf, len, "plain C");
#endif
}

void dec_blas_threads(int n)
{
#ifdef DEC_HAVE_OPENBLAS_THREADS
	openblas_set_num_threads(n);
#else
	(void)n;
#endif
}

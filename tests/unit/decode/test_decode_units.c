/* runtime/decode modules one by one: 16-bit conversions, matrix-vector
 * kernels, the safetensors header parser, config.json, the shape catalog and
 * world-size checks. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "dec.h"

static char err[DEC_ERR_LEN];

Test(decode_units, half_conversions)
{
	static const float vals[] = {0.0f, 1.0f, -2.5f, 0.1f, 65504.0f, 6.1035156e-05f,
	                             5.9604645e-08f, 3.0e-6f, -1234.5f};
	for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		float v = vals[i];
		float h = dec_f16_to_f32(dec_f32_to_f16(v)), b = dec_bf16_to_f32(dec_f32_to_bf16(v));
		cr_assert_leq(fabsf(h - v), fabsf(v) * 1e-3f + 3e-8f, "f16 %g -> %g", v, h);
		cr_assert_leq(fabsf(b - v), fabsf(v) * 8e-3f, "bf16 %g -> %g", v, b);
	}
	cr_assert_eq(dec_f32_to_f16(65520.0f), 0x7c00); /* rounds to infinity */
	cr_assert_eq(dec_f32_to_f16(65519.0f), 0x7bff);
	cr_assert_eq(dec_f32_to_f16(1.0f + 1.0f / 2048), 0x3c00); /* tie to even */
	cr_assert_eq(dec_f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);
	cr_assert(isinf(dec_f16_to_f32(0x7c00)) && isnan(dec_f16_to_f32(0x7e00)));
	cr_assert_eq(dec_f16_to_f32(0x0001), 5.9604644775390625e-8f);
	cr_assert_eq(dec_f16_to_f32(0x8000), 0.0f);
	cr_assert(signbit(dec_f16_to_f32(0x8000)));
	cr_assert_eq(dec_f32_to_bf16(1.0f), 0x3f80);
	cr_assert(isnan(dec_bf16_to_f32(dec_f32_to_bf16(NAN))));
	/* every f16 bit pattern survives f16 -> f32 -> f16 */
	for (uint32_t u = 0; u < 0x10000; u++) {
		float f = dec_f16_to_f32((uint16_t)u);
		if (!isnan(f))
			cr_assert_eq(dec_f32_to_f16(f), u, "0x%04x", u);
	}
}

Test(decode_units, matvec_all_dtypes_with_stride)
{
	enum { R = 37, C = 53, LD = 61 };
	static float wf[R * LD], x[C], y[R];
	static uint16_t wb[R * LD], wh[R * LD];
	for (int i = 0; i < R * LD; i++) {
		float v = dec_synth_value(3, 4, (uint64_t)i, 0, 1.0f);
		wb[i] = dec_f32_to_bf16(v);
		wh[i] = dec_f32_to_f16(v);
		wf[i] = v;
	}
	for (int j = 0; j < C; j++)
		x[j] = dec_synth_value(5, 6, (uint64_t)j, 0, 1.0f);
	for (int t = 0; t < 3; t++) {
		dec_mat_t m = {.dtype = (dec_dtype_t)t, .rows = R, .cols = C, .ld = LD};
		m.data = t == DEC_F32 ? (const void *)(wf + 2) : t == DEC_BF16 ? (const void *)(wb + 2)
		                                                               : (const void *)(wh + 2);
		dec_matvec(&m, x, y);
		for (int i = 0; i < R; i++) {
			double ref = 0;
			for (int j = 0; j < C; j++) {
				size_t k = (size_t)i * LD + 2 + (size_t)j;
				double w = t == DEC_F32 ? wf[k] : t == DEC_BF16 ? dec_bf16_to_f32(wb[k])
				                                                : dec_f16_to_f32(wh[k]);
				ref += w * x[j];
			}
			cr_assert_leq(fabs(ref - y[i]), 1e-4, "%s row %d: %g vs %g", dec_dtype_name(m.dtype),
			              i, y[i], ref);
		}
	}
}

static size_t st_image(uint8_t *buf, size_t cap, const char *header, size_t data)
{
	size_t n = strlen(header);
	cr_assert_leq(8 + n + data, cap);
	for (int i = 0; i < 8; i++)
		buf[i] = (uint8_t)((uint64_t)n >> (8 * i));
	memcpy(buf + 8, header, n);
	memset(buf + 8 + n, 0, data);
	return 8 + n + data;
}

Test(decode_units, safetensors_header)
{
	static uint8_t buf[4096];
	dec_st_header_t h;
	size_t n = st_image(buf, sizeof(buf),
	                    "{\"__metadata__\":{\"format\":\"pt\"},"
	                    "\"a\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
	                    "\"b\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[12,20]}}",
	                    20);
	cr_assert_eq(dec_st_parse(buf, n, n, &h, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(h.n, 2);
	for (int i = 0; i < h.n; i++) {
		if (strcmp(h.t[i].name, "a") == 0) {
			cr_assert(h.t[i].supported && h.t[i].dtype == DEC_BF16 && h.t[i].ndim == 2);
			cr_assert_eq(h.t[i].shape[1], 3);
		} else {
			cr_assert(!h.t[i].supported && h.t[i].ndim == 0);
		}
	}
	dec_st_header_free(&h);
	/* data shorter than the offsets claim */
	cr_assert_lt(dec_st_parse(buf, n - 1, n - 1, &h, err, sizeof(err)), 0);
	cr_assert(strstr(err, "truncated"), "%s", err);
}

Test(decode_units, safetensors_bad_headers)
{
	static const struct {
		const char *hdr, *want;
	} cases[] = {
		{"[1,2]", "not a JSON object"},
		{"{\"a\":", "not valid JSON"},
		{"{\"a\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,1]}}", "unknown dtype"},
		{"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", "needs 12"},
		{"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", "bad shape"},
		{"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", "bad data_offsets"},
		{"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}", "bad shape"},
		{"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", "bad data_offsets"},
		{"{\"a\":1}", "not a JSON object"},
		{"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
		 "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
		 "not valid JSON"},
		{"{\"a\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],"
		 "\"data_offsets\":[0,4]}}",
		 "impossibly large"},
	};
	static uint8_t buf[4096];
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		dec_st_header_t h;
		size_t n = st_image(buf, sizeof(buf), cases[i].hdr, 16);
		cr_assert_lt(dec_st_parse(buf, n, n, &h, err, sizeof(err)), 0, "%s", cases[i].hdr);
		cr_assert(strstr(err, cases[i].want), "%s: %s", cases[i].hdr, err);
	}
	cr_assert_lt(dec_st_parse(buf, 5, 5, &(dec_st_header_t){0}, err, sizeof(err)), 0);
}

Test(decode_units, config_json)
{
	dec_config_t c;
	const char *ok = "{\"hidden_size\": 64, \"intermediate_size\": 96, \"num_attention_heads\": 8,"
	                 " \"num_hidden_layers\": 2, \"vocab_size\": 100, \"num_key_value_heads\": 2,"
	                 " \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}}";
	cr_assert_eq(dec_config_parse(ok, strlen(ok), &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(c.head_dim, 8);
	cr_assert_eq(c.rope_type, DEC_ROPE_LLAMA3);
	cr_assert_eq(c.rope_orig_max_pos, 8192);
	cr_assert_float_eq(c.rms_eps, 1e-6, 1e-12);
	const char *yarn = "{\"hidden_size\": 64, \"intermediate_size\": 96, \"num_attention_heads\": 8,"
	                   " \"num_hidden_layers\": 2, \"vocab_size\": 100,"
	                   " \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4.0}}";
	cr_assert_lt(dec_config_parse(yarn, strlen(yarn), &c, err, sizeof(err)), 0);
	cr_assert(strstr(err, "'yarn' is not supported"), "%s", err);
	const char *gqa = "{\"hidden_size\": 64, \"intermediate_size\": 96, \"num_attention_heads\": 8,"
	                  " \"num_hidden_layers\": 2, \"vocab_size\": 100, \"num_key_value_heads\": 3}";
	cr_assert_lt(dec_config_parse(gqa, strlen(gqa), &c, err, sizeof(err)), 0);
	cr_assert(strstr(err, "multiple of num_key_value_heads"), "%s", err);
}

Test(decode_units, shape_catalog)
{
	dec_config_t c;
	cr_assert_eq(dec_shape_find(NULL, 0, "dense-27b", &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(c.hidden, 5376);
	cr_assert_eq(c.n_kv_heads, 16);
	cr_assert_eq(dec_config_check_world(&c, 8, err, sizeof(err)), 0);
	cr_assert_lt(dec_config_check_world(&c, 3, err, sizeof(err)), 0);
	cr_assert(strstr(err, "(world sizes that work: 1, 2, 4, 8, 16)"), "%s", err);
	cr_assert_eq(dec_shape_find(NULL, 0, "llama-3.1-8b", &c, err, sizeof(err)), 0, "%s", err);
	cr_assert(c.hidden == 4096 && c.inter == 14336 && c.n_layers == 32 && c.vocab == 128256);
	cr_assert_eq(dec_shape_find(NULL, 0, "tiny-qwen", &c, err, sizeof(err)), 0, "%s", err);
	cr_assert(c.qk_norm == 1 && c.attn_bias == 1 && c.tie_embeddings == 1 && c.o_bias == 0);
	cr_assert_lt(dec_shape_find(NULL, 0, "nope", &c, err, sizeof(err)), 0);
	cr_assert(strstr(err, "tiny"), "%s", err);

	const char *typo = "shapes:\n  x:\n    hidden_size: 8\n    hiden: 3\n";
	cr_assert_lt(dec_shape_find(typo, strlen(typo), "x", &c, err, sizeof(err)), 0);
	cr_assert(strstr(err, "unknown field 'hiden'"), "%s", err);
	const char *bad = "shapes: [1, 2]\n";
	cr_assert_lt(dec_shape_find(bad, strlen(bad), "x", &c, err, sizeof(err)), 0);
	const char *broken = "shapes:\n  x: {hidden_size: 8\n";
	cr_assert_lt(dec_shape_find(broken, strlen(broken), "x", &c, err, sizeof(err)), 0);
	cr_assert(strstr(err, "shape catalog:"), "%s", err);
}

Test(decode_units, synthetic_model_shards_agree)
{
	dec_config_t c;
	dec_model_t full, half;
	dec_load_opts_t o = {.shape = &c, .dtype = DEC_BF16, .seed = 1};
	cr_assert_eq(dec_shape_find(NULL, 0, "tiny", &c, err, sizeof(err)), 0);
	cr_assert_eq(dec_model_load(&full, &o, 0, 1, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(dec_model_load(&half, &o, 1, 2, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(half.vocab_lo, 501);
	cr_assert_eq(half.vocab_n, 500);
	cr_assert_eq(half.layers[1].wdown.cols, 128);
	/* rank 1's slice of down_proj is columns 128.. of the full one */
	const uint16_t *f = full.layers[1].wdown.data, *h = half.layers[1].wdown.data;
	for (int i = 0; i < 128; i++)
		for (int j = 0; j < 128; j++)
			cr_assert_eq(h[(size_t)i * half.layers[1].wdown.ld + (size_t)j],
			             f[(size_t)i * full.layers[1].wdown.ld + 128 + (size_t)j]);
	/* 3 layers x (q 256x128, k, v 128x128, o 128x256, gate, up, down 256x128) + LM head */
	cr_assert_eq(full.weight_bytes, (size_t)2 * (3 * 196608 + 1001 * 128));
	cr_assert_eq(half.weight_bytes, (size_t)2 * (3 * 98304 + 500 * 128));
	dec_model_free(&full);
	dec_model_free(&half);
}

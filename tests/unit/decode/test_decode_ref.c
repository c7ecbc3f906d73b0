/* spark-decode against an independent numpy forward pass (ref_decode.py) on
 * small models written here as config.json + safetensors: the same greedy
 * tokens, and every step's logits within 1e-4. */
#include <criterion/criterion.h>

#include "dec_test_util.h"

#define PROMPT "3,1,4,1,5"
#define TOKENS 8

static json_t *load_json(const char *dir, const char *name)
{
	char path[600];
	json_error_t je;
	json_t *j;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	j = json_load_file(path, 0, &je);
	cr_assert(j, "%s: %s", path, je.text);
	return j;
}

static void check_against_numpy(const tu_spec_t *spec, const char *extra)
{
	char *dir = tu_mkdtemp(), model[600], errpath[600], *err;
	json_t *mine, *ref, *a, *b;
	int rc;

	cr_assert(dir);
	snprintf(model, sizeof(model), "%s/model", dir);
	cr_assert_eq(tu_write_model(model, spec), 0);
	rc = tu_sh(dir, "%s --model %s --prompt " PROMPT " --tokens %d --dump-logits %s/dump -o json %s",
	           tu_decode_bin(), model, TOKENS, dir, extra);
	snprintf(errpath, sizeof(errpath), "%s/err", dir);
	err = tu_slurp(errpath, NULL);
	cr_assert_eq(rc, 0, "spark-decode failed (%d): %s", rc, err ? err : "");
	free(err);
	mine = load_json(dir, "out");
	rc = tu_sh(dir, "/usr/bin/python3 %s %s --prompt " PROMPT " --tokens %d --compare %s/dump",
	           tu_ref_script(), model, TOKENS, dir);
	cr_assert_eq(rc, 0, "ref_decode.py failed (%d)", rc);
	ref = load_json(dir, "out");
	a = json_object_get(mine, "generated");
	b = json_object_get(ref, "tokens");
	cr_assert(json_equal(a, b), "tokens differ: %s vs numpy %s", json_dumps(a, JSON_COMPACT),
	          json_dumps(b, JSON_COMPACT));
	cr_assert_eq(json_array_size(a), TOKENS);
	cr_assert_lt(json_real_value(json_object_get(ref, "max_abs_diff")), 1e-4,
	             "logits differ by %g (largest logit %g)",
	             json_real_value(json_object_get(ref, "max_abs_diff")),
	             json_real_value(json_object_get(ref, "max_abs_logit")));
	cr_assert_gt(json_real_value(json_object_get(ref, "max_abs_logit")), 0.5);
	json_decref(mine);
	json_decref(ref);
	tu_rmrf(dir);
	free(dir);
}

Test(decode_ref, llama_f32)
{
	tu_spec_t s = tu_default_spec();
	check_against_numpy(&s, "");
}

Test(decode_ref, llama_bf16_two_files)
{
	tu_spec_t s = tu_default_spec();
	s.dtype = "BF16";
	s.nfiles = 2;
	check_against_numpy(&s, "");
}

Test(decode_ref, llama_f16_misaligned)
{
	tu_spec_t s = tu_default_spec();
	s.dtype = "F16";
	s.unaligned = 1;
	check_against_numpy(&s, "");
}

/* Qwen-style extras: q/k/v and o biases, per-head q/k norm, tied embeddings,
 * and Llama-3 rope scaling with a short original context so it matters. */
Test(decode_ref, qwen_style_extras)
{
	tu_spec_t s = tu_default_spec();
	s.qkv_bias = s.o_bias = s.qk_norm = s.tie = 1;
	s.rope_scaling = "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0,"
	                 " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64}";
	check_against_numpy(&s, "");
}

/* Each rank maps only its slices: row-parallel o/down are strided in the file. */
Test(decode_ref, tensor_parallel_2_from_files)
{
	tu_spec_t s = tu_default_spec();
	check_against_numpy(&s, "--local 2");
}

Test(decode_ref, tensor_parallel_2_bf16_qwen_style)
{
	tu_spec_t s = tu_default_spec();
	s.dtype = "BF16";
	s.qkv_bias = s.o_bias = s.qk_norm = s.tie = 1;
	check_against_numpy(&s, "--local 2 --algo ring");
}

/* sparkctl fit / fit --catalog / plan decode end to end: the documented JSON
 * keys (docs/planner.md), exit codes, and the stderr line. No cluster. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_run.h"
#ifndef MODEL_FIXTURES
#define MODEL_FIXTURES "tests/fixtures/models"
#endif

/* The keys docs/planner.md promises for `fit -o json`, in that order. */
static const char *const fit_keys[] = {
    "model", "display", "architecture", "status", "source", "params", "dtype", "rule",
    "kv_dtype", "nodes", "tp", "pp", "context", "batch", "usable_gib", "overhead_gib",
    "weights_total_gib", "per_node", "kv_known", "kv_bytes_per_token", "kv_attention",
    "kv_heads_per_rank", "kv_replicated", "sliding_window", "sliding_layers", "max_context",
    "max_context_capped", "max_context_bound", "model_context_limit", "model_context_limit_from", "fits", "why", "fewest_nodes", "fewest_layout", "vllm_args",
    "kv_cache_memory_bytes",
};

Test(fit_cli, json_keys_are_the_documented_ones)
{
	json_t *j = cli_run_json("", "fit llama-3.3-70b --nodes 2 --dtype fp8 --context 64K -o json", 0);
	size_t i = 0;
	const char *k;
	json_t *v;
	json_object_foreach(j, k, v) {
		cr_assert_lt(i, sizeof fit_keys / sizeof fit_keys[0], "extra key %s", k);
		cr_assert_str_eq(k, fit_keys[i], "key %zu", i);
		i++;
	}
	cr_assert_eq(i, sizeof fit_keys / sizeof fit_keys[0]);
	cr_assert(json_is_true(json_object_get(j, "fits")));
	cr_assert_eq(json_integer_value(json_object_get(j, "tp")), 2);
	cr_assert_eq(json_integer_value(json_object_get(j, "context")), 65536);
	json_t *pn = json_object_get(j, "per_node");
	static const char *const pk[] = {"weights_gib", "kv_gib", "overhead_gib", "total_gib", "left_gib"};
	for (size_t n = 0; n < 5; n++)
		cr_assert(json_is_number(json_object_get(pn, pk[n])), "per_node.%s", pk[n]);
	/* 64K tokens x 160 KiB (2 x 80 layers x 4 of 8 KV heads x 128 x 2 B) = 10 GiB */
	cr_assert_float_eq(json_real_value(json_object_get(pn, "kv_gib")), 10.0, 1e-9);
	cr_assert_eq(json_integer_value(json_object_get(j, "kv_heads_per_rank")), 4);
	json_t *va = json_object_get(j, "vllm_args");
	cr_assert_str_eq(json_string_value(json_array_get(va, 0)), "--tensor-parallel-size");
	cr_assert_str_eq(json_string_value(json_array_get(va, 1)), "2");
	json_decref(j);
}

Test(fit_cli, config_json_and_exit_codes)
{
	json_t *j = cli_run_json("", "fit " MODEL_FIXTURES "/deepseek-v3.json --nodes 8 -o json", 0);
	cr_assert_str_eq(json_string_value(json_object_get(j, "dtype")), "fp8");
	cr_assert_str_eq(json_string_value(json_object_get(j, "kv_attention")), "mla");
	cr_assert_eq(json_integer_value(json_object_get(j, "fewest_nodes")), 7);
	json_decref(j);
	char *out;
	/* does not fit: exit 1, the stderr line says where it would */
	cr_assert_eq(cli_run("", "fit deepseek-v3 --nodes 4", &out, 1), 1);
	cr_assert(strstr(out, "DOES NOT FIT"), "%s", out);
	cr_assert(strstr(out, "sparkctl: DeepSeek-V3 does not fit on 4 nodes; it fits on 7 (--nodes 7)"), "%s", out);
	free(out);
	cr_assert_eq(cli_run("", "fit kimi-k2 --dtype bf16", &out, 1), 1);
	cr_assert(strstr(out, "try a smaller --dtype"), "%s", out);
	free(out);
	/* bad usage: exit 2 */
	cr_assert_eq(cli_run("", "fit no-such-model", &out, 1), 2);
	cr_assert(strstr(out, "no model 'no-such-model'"), "%s", out);
	free(out);
	cr_assert_eq(cli_run("", "fit llama-3.3-70b --tp 3", &out, 1), 2);
	cr_assert(strstr(out, "heads"), "%s", out);
	free(out);
	cr_assert_eq(cli_run("", "fit llama-3.3-70b --dtype fp7", &out, 1), 2);
	free(out);
	cr_assert_eq(cli_run("", "fit " MODEL_FIXTURES "/bad-unknown-arch.json", &out, 1), 1);
	cr_assert(strstr(out, "gemma3"), "%s", out);
	free(out);
	cr_assert_eq(cli_run("", "fit --help", &out, 0), 0);
	cr_assert(strstr(out, "--kv-dtype"), "%s", out);
	free(out);
}

/* Which bound the largest context meets, in words and in JSON: a tiny model
 * is limited by its own max_position_embeddings, not by memory. */
Test(fit_cli, max_context_says_which_bound)
{
	char *out;
	cr_assert_eq(cli_run("", "fit " MODEL_FIXTURES "/tiny-llama.json", &out, 0), 0);
	cr_assert(strstr(out, "the largest context at batch 1 is 2K, limited by the model: 2048 "
			      "(max_position_embeddings)"), "%s", out);
	free(out);
	json_t *j = cli_run_json("", "fit " MODEL_FIXTURES "/tiny-llama.json -o json", 0);
	cr_assert_eq(json_integer_value(json_object_get(j, "max_context")), 2048);
	cr_assert_str_eq(json_string_value(json_object_get(j, "max_context_bound")), "model");
	cr_assert_eq(json_integer_value(json_object_get(j, "model_context_limit")), 2048);
	cr_assert_str_eq(json_string_value(json_object_get(j, "model_context_limit_from")), "config");
	json_decref(j);
	/* little memory left: memory bounds it below the model's limit */
	const char *small = "fit " MODEL_FIXTURES "/tiny-llama.json --usable-gib 0.0025 "
			    "--overhead-gib 0 --context 512";
	cr_assert_eq(cli_run("", small, &out, 0), 0);
	cr_assert(strstr(out, ", limited by memory (the model allows 2048)"), "%s", out);
	free(out);
	char args[512];
	snprintf(args, sizeof args, "%s -o json", small);
	j = cli_run_json("", args, 0);
	json_int_t mc = json_integer_value(json_object_get(j, "max_context"));
	cr_assert(mc > 512 && mc < 2048, "max_context %lld", (long long)mc);
	cr_assert_str_eq(json_string_value(json_object_get(j, "max_context_bound")), "memory");
	json_decref(j);
	/* a config.json without max_position_embeddings: LlamaConfig's default */
	char dir[] = "/tmp/fit-cli-XXXXXX", path[600];
	cr_assert(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/config.json", dir);
	FILE *f = fopen(path, "w");
	cr_assert(f);
	fputs("{\"model_type\":\"llama\",\"hidden_size\":128,\"intermediate_size\":256,"
	      "\"num_hidden_layers\":3,\"num_attention_heads\":16,\"num_key_value_heads\":8,"
	      "\"head_dim\":16,\"vocab_size\":1001,\"torch_dtype\":\"bfloat16\"}\n", f);
	fclose(f);
	snprintf(args, sizeof args, "fit %s", dir);
	int rc = cli_run("", args, &out, 0);
	cr_expect_eq(rc, 0);
	cr_expect(strstr(out, "limited by the model: 2048 (LlamaConfig's default; config.json has "
			      "no max_position_embeddings)"), "%s", out);
	free(out);
	snprintf(args, sizeof args, "fit %s -o json", dir);
	j = cli_run_json("", args, 0);
	cr_expect_eq(json_integer_value(json_object_get(j, "max_context")), 2048);
	cr_expect_str_eq(json_string_value(json_object_get(j, "model_context_limit_from")), "default");
	json_decref(j);
	unlink(path);
	rmdir(dir);
}

Test(fit_cli, catalog_guide)
{
	json_t *j = cli_run_json("", "fit --catalog --nodes 1,2,4,8 -o json", 0);
	json_t *models = json_object_get(j, "models");
	cr_assert_geq(json_array_size(models), 16);
	cr_assert_eq(json_array_size(json_object_get(j, "nodes")), 4);
	size_t i;
	json_t *m;
	int seen = 0;
	json_array_foreach(models, i, m) {
		const char *name = json_string_value(json_object_get(m, "model"));
		json_t *fn = json_object_get(m, "fewest_nodes");
		cr_assert(json_is_object(fn), "%s", name);
		if (strcmp(name, "deepseek-v3") == 0) {
			/* fp8 needs 7 nodes: of 1,2,4,8 that is 8 */
			cr_assert_eq(json_integer_value(json_object_get(json_object_get(fn, "fp8"), "nodes")), 8);
			cr_assert(json_is_null(json_object_get(fn, "bf16")));
			seen++;
		}
		if (strcmp(name, "gpt-oss-120b") == 0) {
			json_t *nat = json_object_get(fn, "native");
			cr_assert_eq(json_integer_value(json_object_get(nat, "nodes")), 1);
			cr_assert_str_eq(json_string_value(json_object_get(nat, "dtype")), "mxfp4");
			seen++;
		}
	}
	cr_assert_eq(seen, 2);
	json_decref(j);
	char *out;
	cr_assert_eq(cli_run("", "fit --catalog", &out, 0), 0);
	cr_assert(strstr(out, "Kimi-K2"), "%s", out);
	cr_assert(strstr(out, "GLM-5.3 (announced)"), "%s", out);
	free(out);
}

Test(fit_cli, plan_decode)
{
	json_t *j = cli_run_json("", "plan decode dense-27b --nodes 8 --dtype nvfp4 -o json", 0);
	json_t *rows = json_object_get(j, "rows");
	cr_assert_eq(json_array_size(rows), 4, "1, 2, 4, 8: 32 heads do not split 3, 5, 6, 7 ways");
	json_t *r8 = json_array_get(rows, 3);
	cr_assert_eq(json_integer_value(json_object_get(r8, "nodes")), 8);
	cr_assert_eq(json_integer_value(json_object_get(r8, "allreduces")), 124);
	cr_assert_float_eq(json_real_value(json_object_get(r8, "allreduce_bytes")), 5376 * 2, 1e-9);
	double s8 = json_real_value(json_object_get(r8, "speedup"));
	cr_assert(s8 > 1 && s8 < 8, "%f", s8);
	json_decref(j);
	/* ring topology: one-shot cannot run past 3 nodes, relay does */
	j = cli_run_json("", "plan decode dense-27b --nodes 4 --topology ring --algo oneshot -o json", 0);
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(j, "rows"), 2), "algo")), "relay");
	json_decref(j);
	char *out;
	cr_assert_eq(cli_run("", "plan decode dense-27b", &out, 1), 2);
	cr_assert(strstr(out, "--nodes"), "%s", out);
	free(out);
	cr_assert_eq(cli_run("", "plan decode glm-5.3 --nodes 8", &out, 1), 2);
	cr_assert(strstr(out, "announced"), "%s", out);
	free(out);
	cr_assert_eq(cli_run("", "plan decode dense-27b --nodes 2 --calibration /nonexistent", &out, 1), 1);
	cr_assert(strstr(out, "bench/planner/run.sh"), "%s", out);
	free(out);
}

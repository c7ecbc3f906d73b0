/* spark-decode on broken models and bad requests: exit 1 (2 for bad usage)
 * and exactly one clear line on stderr, also with --local (checked once,
 * before any rank starts). */
#include <criterion/criterion.h>
#include <fcntl.h>

#include "dec_test_util.h"

static char *dir, model[600];

static void setup(void)
{
	tu_spec_t s = tu_default_spec();
	dir = tu_mkdtemp();
	cr_assert(dir);
	snprintf(model, sizeof(model), "%s/model", dir);
	cr_assert_eq(tu_write_model(model, &s), 0);
}

static void teardown(void)
{
	tu_rmrf(dir);
	free(dir);
}

static void expect_error(int want_rc, const char *want, const char *fmt, ...)
{
	char args[2048], path[700], *err;
	va_list ap;
	int rc;
	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	rc = tu_sh(dir, "%s %s --tokens 2", tu_decode_bin(), args);
	snprintf(path, sizeof(path), "%s/err", dir);
	err = tu_slurp(path, NULL);
	cr_assert(err);
	cr_assert_eq(rc, want_rc, "%s: exit %d, want %d; stderr: %s", args, rc, want_rc, err);
	cr_assert_eq(tu_lines(err), 1, "%s: want one line on stderr, got:\n%s", args, err);
	cr_assert(strstr(err, want), "%s: stderr lacks '%s':\n%s", args, want, err);
	cr_assert(strncmp(err, "spark-decode: ", 14) == 0, "%s", err);
	free(err);
}

static void rewrite_config(const char *key, const char *from, const char *to)
{
	char path[700], *txt, *p, out[8192];
	snprintf(path, sizeof(path), "%s/config.json", model);
	txt = tu_slurp(path, NULL);
	cr_assert(txt);
	p = strstr(txt, key);
	cr_assert(p && strstr(p, from));
	p = strstr(p, from);
	snprintf(out, sizeof(out), "%.*s%s%s", (int)(p - txt), txt, to, p + strlen(from));
	free(txt);
	FILE *f = fopen(path, "w");
	cr_assert(f);
	fputs(out, f);
	fclose(f);
}

static void patch_st(long off, const char *bytes, size_t n)
{
	char path[700];
	int fd;
	snprintf(path, sizeof(path), "%s/model.safetensors", model);
	fd = open(path, O_WRONLY);
	cr_assert(fd >= 0);
	cr_assert_eq(pwrite(fd, bytes, n, off), (ssize_t)n);
	close(fd);
}

TestSuite(decode_bad, .init = setup, .fini = teardown);

Test(decode_bad, truncated_file)
{
	char path[700];
	struct stat sb;
	snprintf(path, sizeof(path), "%s/model.safetensors", model);
	cr_assert_eq(stat(path, &sb), 0);
	cr_assert_eq(truncate(path, sb.st_size / 2), 0);
	expect_error(1, "truncated file?", "--model %s", model);
	expect_error(1, "truncated file?", "--model %s --local 2", model);
	cr_assert_eq(truncate(path, 5), 0);
	expect_error(1, "too short", "--model %s", model);
}

Test(decode_bad, header_length_garbage)
{
	patch_st(0, "\xff\xff\xff\xff\x00\x00\x00\x01", 8);
	expect_error(1, "not plausible", "--model %s", model);
}

Test(decode_bad, header_length_past_end)
{
	patch_st(0, "\x00\x00\x00\x04\x00\x00\x00\x00", 8); /* 64 MiB header */
	expect_error(1, "truncated: the header needs", "--model %s", model);
}

Test(decode_bad, header_not_json)
{
	patch_st(8, "[", 1);
	expect_error(1, "not valid JSON", "--model %s", model);
}

Test(decode_bad, unsupported_dtype)
{
	char path[700], *txt, *p;
	snprintf(path, sizeof(path), "%s/model.safetensors", model);
	txt = tu_slurp(path, NULL);
	p = strstr(txt + 8, "\"dtype\":\"F32\"");
	cr_assert(p);
	patch_st((long)(p - txt) + 9, "I32", 3); /* same size, not computable */
	free(txt);
	expect_error(1, "has dtype I32", "--model %s", model);
}

Test(decode_bad, shape_disagrees_with_config)
{
	rewrite_config("intermediate_size", "96", "128");
	expect_error(1, "mlp.gate_proj.weight' has shape [96, 64] but config.json implies [128, 64]",
	             "--model %s", model);
	expect_error(1, "but config.json implies", "--model %s --local 2", model);
}

Test(decode_bad, missing_tensor)
{
	rewrite_config("num_hidden_layers", "2", "3");
	expect_error(1, "'model.layers.2.input_layernorm.weight' is missing", "--model %s", model);
}

Test(decode_bad, config_missing_or_broken)
{
	char path[700];
	FILE *f;
	snprintf(path, sizeof(path), "%s/config.json", model);
	unlink(path);
	expect_error(1, "config.json: No such file", "--model %s", model);
	f = fopen(path, "w");
	fputs("{\"hidden_size\": 64,", f);
	fclose(f);
	expect_error(1, "not valid JSON", "--model %s", model);
	f = fopen(path, "w");
	fputs("{\"hidden_size\": 64, \"intermediate_size\": 96}", f);
	fclose(f);
	expect_error(1, "missing num_attention_heads", "--model %s", model);
	f = fopen(path, "w");
	fputs("{\"hidden_size\": 64, \"intermediate_size\": 96, \"num_attention_heads\": 8, "
	      "\"num_hidden_layers\": 2, \"vocab_size\": 211, \"hidden_act\": \"gelu\"}",
	      f);
	fclose(f);
	expect_error(1, "hidden_act must be \"silu\"", "--model %s", model);
}

Test(decode_bad, no_safetensors)
{
	char path[700];
	snprintf(path, sizeof(path), "%s/model.safetensors", model);
	unlink(path);
	expect_error(1, "no *.safetensors files", "--model %s", model);
}

Test(decode_bad, world_size_does_not_split)
{
	expect_error(1, "does not split over 3 ranks", "--model %s --local 3", model);
	expect_error(1, "world sizes that work: 1, 2, 4", "--synthetic tiny-qwen --local 8");
	expect_error(1, "has only 3 layers", "--synthetic tiny --layers 9 --local 2");
}

Test(decode_bad, bad_requests)
{
	expect_error(1, "unknown shape 'nope'", "--synthetic nope");
	expect_error(1, "outside the vocabulary", "--synthetic tiny --prompt 5000");
	expect_error(1, "outside the vocabulary", "--synthetic tiny --prompt 1,5000 --local 2");
	expect_error(2, "exactly one of", "--synthetic tiny --model %s", model);
	expect_error(2, "--algo must be", "--synthetic tiny --algo tree");
	expect_error(2, "--local wants", "--synthetic tiny --local 0");
}

/* spark-decode --model model run from cwd with SPARK_MODEL_DIR=store loads
 * dir/model (the store's copy). */
static void loads_the_store_copy(const char *cwd, const char *store, const char *why)
{
	char path[700], *out;
	cr_assert_eq(tu_sh(dir, "cd %s && SPARK_MODEL_DIR=%s %s --model model --tokens 2 -o json",
	                   cwd, store, tu_decode_bin()), 0);
	snprintf(path, sizeof(path), "%s/out", dir);
	out = tu_slurp(path, NULL);
	cr_assert(out);
	snprintf(path, sizeof(path), "\"model\": \"%s/model\"", dir);
	cr_assert(strstr(out, path), "%s: %s", why, out);
	free(out);
}

/* A job of a pushed model: --model NAME is found in SPARK_MODEL_DIR (the
 * node's store), first, even when the working directory holds a folder of
 * that name (issue 28); a name the store lacks is a folder here, and without
 * either the name is no model. */
Test(decode_bad, model_name_from_the_store)
{
	char path[700];
	snprintf(path, sizeof(path), "%s/elsewhere", dir);
	cr_assert_eq(mkdir(path, 0755), 0);
	loads_the_store_copy(path, dir, "the store's copy was not loaded");
	/* from dir itself, where ./model is a folder too: the store's copy */
	loads_the_store_copy(dir, dir, "the folder here was preferred over the store's copy");
	/* from dir itself, ./model is a directory the store lacks: it is used as given */
	cr_assert_eq(tu_sh(dir, "cd %s && SPARK_MODEL_DIR=/nonexistent %s --model model --tokens 2 -o json",
	                   dir, tu_decode_bin()), 0);
	expect_error(1, "model", "--model no-such-model-here");
}

/* dec_config.c - config.json of a Hugging Face Llama/Qwen-family model ->
 * dec_config_t, the sanity checks, and whether a shape splits over N ranks. */
#include "dec.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ERR(...) (snprintf(err, errlen, __VA_ARGS__), -EINVAL)
#define MAX_DIM (1 << 20)
#define MAX_VOCAB (1 << 22)
#define MAX_LAYERS 1024

void dec_config_init(dec_config_t *c)
{
	memset(c, 0, sizeof(*c));
	c->rms_eps = 1e-6;
	c->rope_theta = 10000.0;
	c->attn_bias = c->o_bias = c->qk_norm = -1;
	c->rope_type = DEC_ROPE_DEFAULT;
}

static int get_int(json_t *o, const char *key, int required, int lo, int hi, int *out, char *err,
                   size_t errlen)
{
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v)) {
		if (required)
			return ERR("config.json: missing %s", key);
		return 0;
	}
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
		return ERR("config.json: %s must be an integer in [%d, %d]", key, lo, hi);
	*out = (int)json_integer_value(v);
	return 1;
}

static int get_num(json_t *o, const char *key, double *out, char *err, size_t errlen)
{
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) <= 0)
		return ERR("config.json: %s must be a positive number", key);
	*out = json_number_value(v);
	return 1;
}

static int parse_rope_scaling(json_t *rs, dec_config_t *c, char *err, size_t errlen)
{
	json_t *ty;
	const char *t;
	int rc;

	if (!rs || json_is_null(rs))
		return 0;
	if (!json_is_object(rs))
		return ERR("config.json: rope_scaling must be an object or null");
	ty = json_object_get(rs, "rope_type");
	if (!ty)
		ty = json_object_get(rs, "type");
	if (!json_is_string(ty))
		return ERR("config.json: rope_scaling has no rope_type");
	t = json_string_value(ty);
	if (strcmp(t, "default") == 0)
		return 0;
	c->rope_factor = 1.0;
	if ((rc = get_num(rs, "factor", &c->rope_factor, err, errlen)) < 0)
		return rc;
	if (strcmp(t, "linear") == 0) {
		c->rope_type = DEC_ROPE_LINEAR;
		return 0;
	}
	if (strcmp(t, "llama3") == 0) {
		c->rope_type = DEC_ROPE_LLAMA3;
		c->rope_low_freq = 1.0;
		c->rope_high_freq = 4.0;
		c->rope_orig_max_pos = 8192;
		if ((rc = get_num(rs, "low_freq_factor", &c->rope_low_freq, err, errlen)) < 0 ||
		    (rc = get_num(rs, "high_freq_factor", &c->rope_high_freq, err, errlen)) < 0 ||
		    (rc = get_int(rs, "original_max_position_embeddings", 0, 1, 1 << 30,
		                  &c->rope_orig_max_pos, err, errlen)) < 0)
			return rc;
		if (c->rope_high_freq <= c->rope_low_freq)
			return ERR("config.json: rope_scaling needs high_freq_factor > low_freq_factor");
		return 0;
	}
	return ERR("config.json: rope_scaling type '%.32s' is not supported (default, linear, "
	           "llama3 are)",
	           t);
}

int dec_config_parse(const char *json, size_t len, dec_config_t *c, char *err, size_t errlen)
{
	json_error_t je;
	json_t *o = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je), *v;
	int rc = 0, hd = 0;

	dec_config_init(c);
	if (!o)
		return ERR("config.json is not valid JSON (%s, line %d)", je.text, je.line);
	if (!json_is_object(o)) {
		json_decref(o);
		return ERR("config.json is not a JSON object");
	}
	v = json_object_get(o, "model_type");
	snprintf(c->name, sizeof(c->name), "%s", json_is_string(v) ? json_string_value(v) : "model");
	v = json_object_get(o, "hidden_act");
	if (v && !(json_is_string(v) && strcmp(json_string_value(v), "silu") == 0)) {
		json_decref(o);
		return ERR("config.json: hidden_act must be \"silu\" (a SwiGLU MLP)");
	}
	if ((rc = get_int(o, "hidden_size", 1, 1, MAX_DIM, &c->hidden, err, errlen)) < 0 ||
	    (rc = get_int(o, "intermediate_size", 1, 1, MAX_DIM, &c->inter, err, errlen)) < 0 ||
	    (rc = get_int(o, "num_attention_heads", 1, 1, 4096, &c->n_heads, err, errlen)) < 0 ||
	    (rc = get_int(o, "num_hidden_layers", 1, 1, MAX_LAYERS, &c->n_layers, err, errlen)) < 0 ||
	    (rc = get_int(o, "vocab_size", 1, 1, MAX_VOCAB, &c->vocab, err, errlen)) < 0)
		goto out;
	c->n_kv_heads = c->n_heads;
	if ((rc = get_int(o, "num_key_value_heads", 0, 1, 4096, &c->n_kv_heads, err, errlen)) < 0 ||
	    (rc = get_int(o, "head_dim", 0, 2, 4096, &hd, err, errlen)) < 0 ||
	    (rc = get_num(o, "rms_norm_eps", &c->rms_eps, err, errlen)) < 0 ||
	    (rc = get_num(o, "rope_theta", &c->rope_theta, err, errlen)) < 0 ||
	    (rc = parse_rope_scaling(json_object_get(o, "rope_scaling"), c, err, errlen)) < 0)
		goto out;
	c->head_dim = hd ? hd : c->hidden / c->n_heads;
	v = json_object_get(o, "tie_word_embeddings");
	if (v && !json_is_boolean(v)) {
		rc = ERR("config.json: tie_word_embeddings must be true or false");
		goto out;
	}
	c->tie_embeddings = json_is_true(v);
	v = json_object_get(o, "mlp_bias");
	if (json_is_true(v)) {
		rc = ERR("config.json: mlp_bias is not supported");
		goto out;
	}
	c->total_layers = c->n_layers;
	rc = dec_config_check(c, err, errlen);
out:
	json_decref(o);
	return rc;
}

int dec_config_load(const char *dir, dec_config_t *c, char *err, size_t errlen)
{
	char path[4096], why[DEC_ERR_LEN];
	FILE *f;
	char *buf;
	long n;
	int rc;

	snprintf(path, sizeof(path), "%s/config.json", dir);
	if (!(f = fopen(path, "rb")))
		return snprintf(err, errlen, "%s: %s", path, strerror(errno)), -ENOENT;
	if (fseek(f, 0, SEEK_END) < 0 || (n = ftell(f)) < 0 || n > (1 << 24) ||
	    fseek(f, 0, SEEK_SET) < 0) {
		fclose(f);
		return ERR("%s: unreadable or larger than 16 MiB", path);
	}
	if (!(buf = malloc((size_t)n + 1))) {
		fclose(f);
		return -ENOMEM;
	}
	if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		fclose(f);
		return ERR("%s: read error", path);
	}
	fclose(f);
	rc = dec_config_parse(buf, (size_t)n, c, why, sizeof(why));
	free(buf);
	if (rc < 0)
		snprintf(err, errlen, "%s: %s", dir, why);
	return rc;
}

int dec_config_check(const dec_config_t *c, char *err, size_t errlen)
{
	if (c->hidden < 1 || c->hidden > MAX_DIM || c->inter < 1 || c->inter > MAX_DIM)
		return ERR("hidden_size and intermediate_size must be in [1, %d]", MAX_DIM);
	if (c->n_layers < 1 || c->n_layers > MAX_LAYERS)
		return ERR("num_hidden_layers must be in [1, %d]", MAX_LAYERS);
	if (c->vocab < 1 || c->vocab > MAX_VOCAB)
		return ERR("vocab_size must be in [1, %d]", MAX_VOCAB);
	if (c->n_heads < 1 || c->n_kv_heads < 1 || c->n_heads > 4096 ||
	    c->n_heads % c->n_kv_heads)
		return ERR("num_attention_heads (%d) must be a multiple of num_key_value_heads (%d)",
		           c->n_heads, c->n_kv_heads);
	if (c->head_dim < 2 || c->head_dim % 2 || c->head_dim > 4096)
		return ERR("head_dim (%d) must be even and in [2, 4096]", c->head_dim);
	if ((long long)c->n_heads * c->head_dim > MAX_DIM)
		return ERR("num_attention_heads x head_dim is too large");
	if (!(c->rms_eps > 0) || !(c->rope_theta > 0) || !isfinite(c->rms_eps) ||
	    !isfinite(c->rope_theta))
		return ERR("rms_norm_eps and rope_theta must be positive");
	if (c->rope_type != DEC_ROPE_DEFAULT && !(c->rope_factor > 0))
		return ERR("rope_scaling factor must be positive");
	return 0;
}

static int splits(const dec_config_t *c, int w)
{
	return c->n_heads % w == 0 && c->n_kv_heads % w == 0 && c->inter % w == 0;
}

int dec_config_check_world(const dec_config_t *c, int world, char *err, size_t errlen)
{
	char ok[256];
	size_t o = 0;

	if (world >= 1 && world <= DEC_MAX_WORLD && splits(c, world))
		return 0;
	ok[0] = 0;
	for (int w = 1; w <= DEC_MAX_WORLD && o < sizeof(ok); w++)
		if (splits(c, w))
			o += (size_t)snprintf(ok + o, sizeof(ok) - o, "%s%d", o ? ", " : "", w);
	if (world < 1 || world > DEC_MAX_WORLD)
		return ERR("world size %d is out of range (1-%d)", world, DEC_MAX_WORLD);
	return ERR("%s does not split over %d ranks: %d attention heads, %d KV heads and %d MLP "
	           "columns must all divide evenly (world sizes that work: %s)",
	           c->name, world, c->n_heads, c->n_kv_heads, c->inter, ok);
}

/* dec_shapes.c - the YAML shape catalog behind --synthetic: a mapping
 * `shapes: {NAME: {config.json-style fields, description}}`. Unknown fields
 * are errors, so a typo cannot silently change a benchmark's shape. */
#include "dec.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define ERR(...) (snprintf(err, errlen, __VA_ARGS__), -EINVAL)

static const char *scalar(yaml_document_t *d, yaml_node_t *n)
{
	(void)d;
	return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static int load_doc(const char *yaml, size_t len, yaml_document_t *doc, yaml_node_t **shapes,
                    char *err, size_t errlen)
{
	yaml_parser_t p;
	yaml_node_t *root;

	if (!yaml) {
		yaml = dec_builtin_catalog;
		len = strlen(dec_builtin_catalog);
	}
	if (!yaml_parser_initialize(&p))
		return -ENOMEM;
	yaml_parser_set_input_string(&p, (const unsigned char *)yaml, len);
	if (!yaml_parser_load(&p, doc)) {
		int rc = ERR("shape catalog: %s at line %zu", p.problem ? p.problem : "bad YAML",
		             p.problem_mark.line + 1);
		yaml_parser_delete(&p);
		return rc;
	}
	yaml_parser_delete(&p);
	root = yaml_document_get_root_node(doc);
	*shapes = NULL;
	if (root && root->type == YAML_MAPPING_NODE) {
		for (yaml_node_pair_t *pr = root->data.mapping.pairs.start;
		     pr < root->data.mapping.pairs.top; pr++) {
			const char *k = scalar(doc, yaml_document_get_node(doc, pr->key));
			if (k && strcmp(k, "shapes") == 0)
				*shapes = yaml_document_get_node(doc, pr->value);
		}
	}
	if (!*shapes || (*shapes)->type != YAML_MAPPING_NODE) {
		yaml_document_delete(doc);
		return ERR("shape catalog: no 'shapes' mapping at the top");
	}
	return 0;
}

static int to_int(const char *s, int lo, int hi, int *out)
{
	char *end;
	long v;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return -1;
	*out = (int)v;
	return 0;
}

static int to_bool(const char *s, int *out)
{
	if (strcmp(s, "true") == 0 || strcmp(s, "yes") == 0)
		return *out = 1, 0;
	if (strcmp(s, "false") == 0 || strcmp(s, "no") == 0)
		return *out = 0, 0;
	return -1;
}

static int fill_shape(yaml_document_t *d, yaml_node_t *m, const char *name, dec_config_t *c,
                      char *err, size_t errlen)
{
	dec_config_init(c);
	snprintf(c->name, sizeof(c->name), "%s", name);
	c->attn_bias = c->o_bias = c->qk_norm = 0;
	if (m->type != YAML_MAPPING_NODE)
		return ERR("shape catalog: shape '%s' is not a mapping", name);
	for (yaml_node_pair_t *pr = m->data.mapping.pairs.start; pr < m->data.mapping.pairs.top;
	     pr++) {
		const char *k = scalar(d, yaml_document_get_node(d, pr->key));
		const char *v = scalar(d, yaml_document_get_node(d, pr->value));
		int bad = 0;
		char *end;
		if (!k || !v)
			return ERR("shape catalog: shape '%s' has a non-scalar field", name);
		if (strcmp(k, "description") == 0)
			continue;
		else if (strcmp(k, "hidden_size") == 0)
			bad = to_int(v, 1, 1 << 20, &c->hidden);
		else if (strcmp(k, "intermediate_size") == 0)
			bad = to_int(v, 1, 1 << 20, &c->inter);
		else if (strcmp(k, "num_hidden_layers") == 0)
			bad = to_int(v, 1, 1024, &c->n_layers);
		else if (strcmp(k, "num_attention_heads") == 0)
			bad = to_int(v, 1, 4096, &c->n_heads);
		else if (strcmp(k, "num_key_value_heads") == 0)
			bad = to_int(v, 1, 4096, &c->n_kv_heads);
		else if (strcmp(k, "head_dim") == 0)
			bad = to_int(v, 2, 4096, &c->head_dim);
		else if (strcmp(k, "vocab_size") == 0)
			bad = to_int(v, 1, 1 << 22, &c->vocab);
		else if (strcmp(k, "rms_norm_eps") == 0 || strcmp(k, "rope_theta") == 0) {
			double x = strtod(v, &end);
			bad = end == v || *end || !isfinite(x) || x <= 0;
			*(k[1] == 'm' ? &c->rms_eps : &c->rope_theta) = x;
		} else if (strcmp(k, "tie_word_embeddings") == 0)
			bad = to_bool(v, &c->tie_embeddings);
		else if (strcmp(k, "qkv_bias") == 0)
			bad = to_bool(v, &c->attn_bias);
		else if (strcmp(k, "o_bias") == 0)
			bad = to_bool(v, &c->o_bias);
		else if (strcmp(k, "qk_norm") == 0)
			bad = to_bool(v, &c->qk_norm);
		else
			return ERR("shape catalog: shape '%s' has unknown field '%.40s'", name, k);
		if (bad)
			return ERR("shape catalog: shape '%s': bad value '%.40s' for %s", name, v, k);
	}
	if (!c->n_kv_heads)
		c->n_kv_heads = c->n_heads;
	if (!c->head_dim && c->n_heads)
		c->head_dim = c->hidden / c->n_heads;
	c->total_layers = c->n_layers;
	if (dec_config_check(c, err, errlen) < 0) {
		char why[DEC_ERR_LEN];
		snprintf(why, sizeof(why), "%s", err);
		return ERR("shape catalog: shape '%s': %s", name, why);
	}
	return 0;
}

int dec_shape_find(const char *yaml, size_t len, const char *name, dec_config_t *c, char *err,
                   size_t errlen)
{
	yaml_document_t doc;
	yaml_node_t *shapes;
	char names[512];
	size_t o = 0;
	int rc;

	if ((rc = load_doc(yaml, len, &doc, &shapes, err, errlen)) < 0)
		return rc;
	names[0] = 0;
	rc = -ENOENT;
	for (yaml_node_pair_t *pr = shapes->data.mapping.pairs.start;
	     pr < shapes->data.mapping.pairs.top; pr++) {
		const char *k = scalar(&doc, yaml_document_get_node(&doc, pr->key));
		if (!k)
			continue;
		if (strcmp(k, name) == 0) {
			rc = fill_shape(&doc, yaml_document_get_node(&doc, pr->value), k, c, err, errlen);
			break;
		}
		if (o < sizeof(names))
			o += (size_t)snprintf(names + o, sizeof(names) - o, "%s%s", o ? ", " : "", k);
	}
	if (rc == -ENOENT)
		snprintf(err, errlen, "unknown shape '%s' (the catalog has: %s)", name, names);
	yaml_document_delete(&doc);
	return rc;
}

int dec_shape_list(const char *yaml, size_t len, FILE *out, char *err, size_t errlen)
{
	yaml_document_t doc;
	yaml_node_t *shapes;
	int rc;

	if ((rc = load_doc(yaml, len, &doc, &shapes, err, errlen)) < 0)
		return rc;
	fprintf(out, "%-14s %7s %7s %6s %9s %5s %7s  %s\n", "SHAPE", "HIDDEN", "INTER", "LAYERS",
	        "HEADS/KV", "HDIM", "VOCAB", "DESCRIPTION");
	for (yaml_node_pair_t *pr = shapes->data.mapping.pairs.start;
	     pr < shapes->data.mapping.pairs.top; pr++) {
		yaml_node_t *m = yaml_document_get_node(&doc, pr->value);
		const char *k = scalar(&doc, yaml_document_get_node(&doc, pr->key)), *desc = "";
		dec_config_t c;
		char hk[24];
		if (!k)
			continue;
		if ((rc = fill_shape(&doc, m, k, &c, err, errlen)) < 0)
			break;
		for (yaml_node_pair_t *q = m->data.mapping.pairs.start; q < m->data.mapping.pairs.top;
		     q++) {
			const char *fk = scalar(&doc, yaml_document_get_node(&doc, q->key));
			if (fk && strcmp(fk, "description") == 0)
				desc = scalar(&doc, yaml_document_get_node(&doc, q->value));
		}
		snprintf(hk, sizeof(hk), "%d/%d", c.n_heads, c.n_kv_heads);
		fprintf(out, "%-14s %7d %7d %6d %9s %5d %7d  %s\n", k, c.hidden, c.inter, c.n_layers, hk,
		        c.head_dim, c.vocab, desc ? desc : "");
	}
	yaml_document_delete(&doc);
	return rc;
}

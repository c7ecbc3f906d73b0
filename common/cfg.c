#include "cfg.h"

#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

struct builder {
	yaml_parser_t p;
	const char *name;
	const char *text;
	size_t len;
	char *err;
	size_t errlen;
	int depth;
};

static int perr(struct builder *b, yaml_mark_t m, const char *what)
{
	snprintf(b->err, b->errlen, "%s:%zu:%zu: %s", b->name, m.line + 1, m.column + 1, what);
	return -EINVAL;
}

static int next(struct builder *b, yaml_event_t *ev)
{
	if (!yaml_parser_parse(&b->p, ev)) {
		size_t line = b->p.problem_mark.line, col = b->p.problem_mark.column;
		if (b->p.error == YAML_READER_ERROR) {
			/* the reader (bad encoding) reports a byte offset, not a mark */
			line = col = 0;
			for (size_t i = 0; i < b->p.problem_offset && i < b->len; i++) {
				if (b->text[i] == '\n') {
					line++;
					col = 0;
				} else {
					col++;
				}
			}
		}
		snprintf(b->err, b->errlen, "%s:%zu:%zu: %s", b->name, line + 1, col + 1,
			 b->p.problem ? b->p.problem : "syntax error");
		return -EINVAL;
	}
	return 0;
}

static int parse_node(struct builder *b, yaml_event_t *ev, json_t **out);

static int parse_mapping(struct builder *b, json_t **out)
{
	json_t *obj = json_object();
	for (;;) {
		yaml_event_t k;
		if (next(b, &k) < 0)
			goto fail;
		if (k.type == YAML_MAPPING_END_EVENT) {
			yaml_event_delete(&k);
			break;
		}
		if (k.type != YAML_SCALAR_EVENT) {
			int r = perr(b, k.start_mark, "mapping keys must be plain scalars");
			yaml_event_delete(&k);
			json_decref(obj);
			return r;
		}
		char key[256];
		yaml_mark_t km = k.start_mark;
		if (k.data.scalar.length >= sizeof key ||
		    strlen((const char *)k.data.scalar.value) != k.data.scalar.length) {
			int r = perr(b, km, k.data.scalar.length >= sizeof key
						    ? "mapping key is too long"
						    : "mapping key contains a NUL character");
			yaml_event_delete(&k);
			json_decref(obj);
			return r;
		}
		util_strlcpy(key, (const char *)k.data.scalar.value, sizeof key);
		yaml_event_delete(&k);
		if (json_object_get(obj, key)) {
			char what[300];
			snprintf(what, sizeof what, "duplicate key \"%s\"", key);
			json_decref(obj);
			return perr(b, km, what);
		}
		yaml_event_t v;
		if (next(b, &v) < 0)
			goto fail;
		json_t *val = NULL;
		int r = parse_node(b, &v, &val);
		if (r < 0) {
			json_decref(obj);
			return r;
		}
		json_object_set_new(obj, key, val);
	}
	*out = obj;
	return 0;
fail:
	json_decref(obj);
	return -EINVAL;
}

static int parse_sequence(struct builder *b, json_t **out)
{
	json_t *arr = json_array();
	for (;;) {
		yaml_event_t v;
		if (next(b, &v) < 0) {
			json_decref(arr);
			return -EINVAL;
		}
		if (v.type == YAML_SEQUENCE_END_EVENT) {
			yaml_event_delete(&v);
			break;
		}
		json_t *val = NULL;
		int r = parse_node(b, &v, &val);
		if (r < 0) {
			json_decref(arr);
			return r;
		}
		json_array_append_new(arr, val);
	}
	*out = arr;
	return 0;
}

/* Consumes ev. */
static int parse_node(struct builder *b, yaml_event_t *ev, json_t **out)
{
	int r = 0;
	if (++b->depth > 32) {
		r = perr(b, ev->start_mark, "nesting too deep");
		yaml_event_delete(ev);
		b->depth--;
		return r;
	}
	switch (ev->type) {
	case YAML_SCALAR_EVENT:
		*out = json_stringn((const char *)ev->data.scalar.value, ev->data.scalar.length);
		if (!*out)
			r = perr(b, ev->start_mark, "value is not valid UTF-8");
		yaml_event_delete(ev);
		break;
	case YAML_MAPPING_START_EVENT:
		yaml_event_delete(ev);
		r = parse_mapping(b, out);
		break;
	case YAML_SEQUENCE_START_EVENT:
		yaml_event_delete(ev);
		r = parse_sequence(b, out);
		break;
	case YAML_ALIAS_EVENT:
		r = perr(b, ev->start_mark, "aliases are not supported");
		yaml_event_delete(ev);
		break;
	default:
		r = perr(b, ev->start_mark, "unexpected YAML event");
		yaml_event_delete(ev);
		break;
	}
	b->depth--;
	return r;
}

int cfg_parse(const char *name, const char *text, size_t len, json_t **out, char *err,
	      size_t errlen)
{
	struct builder b = {.name = name, .text = text, .len = len, .err = err, .errlen = errlen};
	*out = NULL;
	if (!yaml_parser_initialize(&b.p)) {
		snprintf(err, errlen, "%s: out of memory", name);
		return -ENOMEM;
	}
	yaml_parser_set_input_string(&b.p, (const unsigned char *)text, len);
	json_t *root = NULL;
	int r = 0;
	for (;;) {
		yaml_event_t ev;
		if (next(&b, &ev) < 0) {
			r = -EINVAL;
			break;
		}
		if (ev.type == YAML_STREAM_END_EVENT) {
			yaml_event_delete(&ev);
			break;
		}
		if (ev.type == YAML_STREAM_START_EVENT || ev.type == YAML_DOCUMENT_START_EVENT) {
			yaml_event_delete(&ev);
			continue;
		}
		if (ev.type == YAML_DOCUMENT_END_EVENT) {
			yaml_event_delete(&ev);
			break; /* one document only */
		}
		if (root) {
			r = perr(&b, ev.start_mark, "more than one top-level node");
			yaml_event_delete(&ev);
			break;
		}
		if (ev.type == YAML_SCALAR_EVENT && ev.data.scalar.length == 0) {
			yaml_event_delete(&ev);
			root = json_object();
			continue;
		}
		if (ev.type != YAML_MAPPING_START_EVENT) {
			r = perr(&b, ev.start_mark, "the top level must be a mapping of keys to values");
			yaml_event_delete(&ev);
			break;
		}
		r = parse_node(&b, &ev, &root);
		if (r < 0)
			break;
	}
	yaml_parser_delete(&b.p);
	if (r < 0) {
		json_decref(root);
		return r;
	}
	*out = root ? root : json_object();
	return 0;
}

int cfg_load(const char *path, json_t **out, char *err, size_t errlen)
{
	char *text;
	size_t len;
	int r = util_read_file(path, &text, &len, 1 << 20);
	if (r < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(-r));
		return r;
	}
	r = cfg_parse(path, text, len, out, err, errlen);
	free(text);
	return r;
}

json_t *cfg_get(json_t *root, const char *dotted)
{
	char buf[256];
	if (util_strlcpy(buf, dotted, sizeof buf) >= sizeof buf)
		return NULL;
	json_t *cur = root;
	char *save = NULL;
	for (char *tok = strtok_r(buf, ".", &save); tok; tok = strtok_r(NULL, ".", &save)) {
		if (!json_is_object(cur))
			return NULL;
		cur = json_object_get(cur, tok);
		if (!cur)
			return NULL;
	}
	return cur;
}

int cfg_get_str(json_t *root, const char *dotted, const char **out, char *err, size_t errlen)
{
	json_t *v = cfg_get(root, dotted);
	if (!v)
		return -ENOENT;
	if (!json_is_string(v)) {
		snprintf(err, errlen, "%s: expected a string value", dotted);
		return -EINVAL;
	}
	*out = json_string_value(v);
	return 0;
}

int cfg_int(const json_t *v, long long min, long long max, long long *out)
{
	const char *s = json_is_string(v) ? json_string_value(v) : NULL;
	char *end = NULL;
	errno = 0;
	long long x = s ? strtoll(s, &end, 10) : 0;
	if (!s || !*s || *end || errno || x < min || x > max)
		return -EINVAL;
	*out = x;
	return 0;
}

int cfg_get_int(json_t *root, const char *dotted, long long min, long long max, long long *out,
		char *err, size_t errlen)
{
	json_t *v = cfg_get(root, dotted);
	if (!v)
		return -ENOENT;
	if (cfg_int(v, min, max, out) < 0) {
		snprintf(err, errlen, "%s: expected an integer from %lld to %lld", dotted, min, max);
		return -EINVAL;
	}
	return 0;
}

int cfg_check_keys(json_t *obj, const char *where, const char *const allowed[], char *err,
		   size_t errlen)
{
	const char *key;
	json_t *v;
	json_object_foreach(obj, key, v) {
		int ok = 0;
		for (size_t i = 0; allowed[i]; i++)
			if (strcmp(key, allowed[i]) == 0)
				ok = 1;
		if (!ok) {
			snprintf(err, errlen, "%s: unknown key \"%s\"", where, key);
			return -EINVAL;
		}
	}
	return 0;
}

/* cfg_locate: skip the node whose start event is ev (consumed). */
static int loc_skip(yaml_parser_t *p, yaml_event_t *ev)
{
	int depth = 0;
	for (;;) {
		yaml_event_type_t t = ev->type;
		yaml_event_delete(ev);
		if (t == YAML_MAPPING_START_EVENT || t == YAML_SEQUENCE_START_EVENT)
			depth++;
		else if (t == YAML_MAPPING_END_EVENT || t == YAML_SEQUENCE_END_EVENT)
			depth--;
		else if (t == YAML_STREAM_END_EVENT || t == YAML_NO_EVENT)
			return -ENOENT;
		if (depth <= 0)
			return 0;
		if (!yaml_parser_parse(p, ev))
			return -ENOENT;
	}
}

/* ev is the start event of the current node (consumed); find path[i..n). */
static int loc_find(yaml_parser_t *p, yaml_event_t *ev, const char *const path[], size_t i,
		    size_t n, yaml_mark_t *out)
{
	if (i == n) {
		*out = ev->start_mark;
		yaml_event_delete(ev);
		return 0;
	}
	int is_map = ev->type == YAML_MAPPING_START_EVENT;
	if (!is_map && ev->type != YAML_SEQUENCE_START_EVENT) {
		yaml_event_delete(ev);
		return -ENOENT;
	}
	yaml_event_delete(ev);
	char *end = NULL;
	unsigned long want = is_map ? 0 : strtoul(path[i], &end, 10);
	if (!is_map && (!*path[i] || *end))
		return -ENOENT;
	for (unsigned long idx = 0;; idx++) {
		yaml_event_t k;
		if (!yaml_parser_parse(p, &k))
			return -ENOENT;
		if (k.type == YAML_MAPPING_END_EVENT || k.type == YAML_SEQUENCE_END_EVENT ||
		    k.type == YAML_STREAM_END_EVENT || k.type == YAML_NO_EVENT) {
			yaml_event_delete(&k);
			return -ENOENT;
		}
		if (!is_map) {
			if (idx == want)
				return loc_find(p, &k, path, i + 1, n, out);
			if (loc_skip(p, &k) < 0)
				return -ENOENT;
			continue;
		}
		int match = k.type == YAML_SCALAR_EVENT &&
			    k.data.scalar.length == strlen(path[i]) &&
			    memcmp(k.data.scalar.value, path[i], k.data.scalar.length) == 0;
		if (loc_skip(p, &k) < 0)
			return -ENOENT;
		yaml_event_t v;
		if (!yaml_parser_parse(p, &v))
			return -ENOENT;
		if (match)
			return loc_find(p, &v, path, i + 1, n, out);
		if (loc_skip(p, &v) < 0)
			return -ENOENT;
	}
}

int cfg_locate(const char *text, size_t len, const char *const path[], size_t n, size_t *line,
	       size_t *col)
{
	yaml_parser_t p;
	if (!yaml_parser_initialize(&p))
		return -ENOMEM;
	yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
	int r = -ENOENT;
	yaml_event_t ev;
	while (yaml_parser_parse(&p, &ev)) {
		yaml_event_type_t t = ev.type;
		if (t == YAML_MAPPING_START_EVENT) {
			yaml_mark_t m;
			r = loc_find(&p, &ev, path, 0, n, &m);
			if (r == 0) {
				*line = m.line + 1;
				*col = m.column + 1;
			}
			break;
		}
		yaml_event_delete(&ev);
		if (t == YAML_STREAM_END_EVENT || t == YAML_DOCUMENT_END_EVENT)
			break;
	}
	yaml_parser_delete(&p);
	return r;
}

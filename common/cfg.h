/* cfg: YAML configuration files (libyaml) loaded into a jansson tree.
 * Mappings become objects, sequences arrays, scalars strings (typed getters
 * convert). Errors name the file, line and column:
 *   "/etc/sparkctl/sparkd.yaml:3:7: mapping values are not allowed here".
 * Duplicate keys and non-scalar keys are errors. Only one document is read. */
#ifndef SPARK_CFG_H
#define SPARK_CFG_H

#include <jansson.h>
#include <stddef.h>

/* Parse YAML text (name is used in messages). *out is an object (empty for an
 * empty document). 0 or -EINVAL with err filled. */
int cfg_parse(const char *name, const char *text, size_t len, json_t **out, char *err,
	      size_t errlen);
/* Read and parse a file; -ENOENT if missing (err filled too). */
int cfg_load(const char *path, json_t **out, char *err, size_t errlen);

/* Look up a dotted path ("fabric.interfaces"). NULL if absent. */
json_t *cfg_get(json_t *root, const char *dotted);
/* Typed reads of a scalar at a dotted path. Return 0 (found, *out set),
 * -ENOENT (absent, *out untouched), -EINVAL (wrong type; err says which key). */
int cfg_get_str(json_t *root, const char *dotted, const char **out, char *err, size_t errlen);
/* A scalar (the loader gives every scalar as a string) as a decimal integer
 * in min..max: 0 and *out, or -EINVAL (not a string, not a whole number, out
 * of range: the caller names the key and the file position). */
int cfg_int(const json_t *v, long long min, long long max, long long *out);
int cfg_get_int(json_t *root, const char *dotted, long long min, long long max, long long *out,
		char *err, size_t errlen);
/* Check that every top-level key of root is in the NULL-terminated list
 * allowed[] (catches typos). 0 or -EINVAL naming the unknown key. */
int cfg_check_keys(json_t *obj, const char *where, const char *const allowed[], char *err,
		   size_t errlen);

/* Where the node at a path starts in YAML text, for messages about a value
 * (a policy's unknown target, say) after cfg_parse accepted the file.
 * path[] are mapping keys, or decimal indices into sequences. 0 with
 * *line, *col (1-based), or -ENOENT (no such node, or text does not parse). */
int cfg_locate(const char *text, size_t len, const char *const path[], size_t n, size_t *line,
	       size_t *col);

#endif

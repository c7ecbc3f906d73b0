/* recipe: parse and validate a recipe file (see recipe.h, docs/serve.md). */
#include "recipe.h"

#include "cfg.h"
#include "model.h"
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const runtime_names[RECIPE_RUNTIMES] = {
    "vllm", "sglang", "llamacpp", "trtllm", "spark-decode", "command"};

const char *recipe_runtime_name(enum recipe_runtime r)
{
	return (unsigned)r < RECIPE_RUNTIMES ? runtime_names[r] : "unknown";
}

int recipe_runtime_parse(const char *s, enum recipe_runtime *out)
{
	for (int i = 0; s && i < RECIPE_RUNTIMES; i++)
		if (strcmp(s, runtime_names[i]) == 0) {
			*out = (enum recipe_runtime)i;
			return 0;
		}
	return -EINVAL;
}

const char *recipe_restart_name(enum recipe_restart r)
{
	switch (r) {
	case RECIPE_RESTART_ALWAYS: return "always";
	case RECIPE_RESTART_NEVER: return "never";
	default: return "on-failure";
	}
}

const char *const recipe_placeholders[] = {
    "model", "name", "rank", "node_rank", "nnodes", "world_size", "tp", "pp", "port",
    "host", "addr", "node", "group", "master_addr", "master_port", "rpc_port", "rpc_peers",
    NULL};

/* ---- where a key is in the text ------------------------------------------ */

/* Line and column of the block-mapping key at dotted path, or 0. */
static int locate(const char *text, size_t len, const char *dotted, size_t *line, size_t *col)
{
	struct {
		size_t indent;
		char key[64];
	} stack[8];
	int depth = 0;
	size_t ln = 0;
	const char *p = text, *end = text + len;
	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		if (!eol)
			eol = end;
		ln++;
		const char *q = p;
		while (q < eol && *q == ' ')
			q++;
		size_t indent = (size_t)(q - p);
		const char *k = q;
		while (q < eol && (isalnum((unsigned char)*q) || *q == '_' || *q == '-' || *q == '.'))
			q++;
		if (q > k && q < eol && *q == ':' && (q + 1 == eol || q[1] == ' ' || q[1] == '\r') &&
		    *k != '-' && (size_t)(q - k) < sizeof stack[0].key) {
			while (depth > 0 && stack[depth - 1].indent >= indent)
				depth--;
			if (depth < 8) {
				stack[depth].indent = indent;
				memcpy(stack[depth].key, k, (size_t)(q - k));
				stack[depth].key[q - k] = '\0';
				depth++;
				char path[256] = "";
				size_t o = 0;
				for (int i = 0; i < depth && o < sizeof path; i++)
					o += (size_t)snprintf(path + o, sizeof path - o, "%s%s", i ? "." : "",
							      stack[i].key);
				if (strcmp(path, dotted) == 0) {
					*line = ln;
					*col = indent + 1;
					return 1;
				}
			}
		}
		p = eol + 1;
	}
	return 0;
}

struct ctx {
	const char *file;
	const char *text;
	size_t len;
	const char *const *sets;
	size_t n_sets;
	char *err;
	size_t errlen;
};

/* Was key given by --set? */
static const char *set_for(const struct ctx *c, const char *key)
{
	size_t kl = strlen(key);
	for (size_t i = 0; i < c->n_sets; i++)
		if (strncmp(c->sets[i], key, kl) == 0 && c->sets[i][kl] == '=')
			return c->sets[i];
	return NULL;
}

static int fail(const struct ctx *c, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int fail(const struct ctx *c, const char *key, const char *fmt, ...)
{
	char what[224];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	size_t line, col;
	const char *s = key ? set_for(c, key) : NULL;
	if (s)
		snprintf(c->err, c->errlen, "--set %.80s: %s", s, what);
	else if (key && locate(c->text, c->len, key, &line, &col))
		snprintf(c->err, c->errlen, "%s:%zu:%zu: %s: %s", c->file, line, col, key, what);
	else if (key)
		snprintf(c->err, c->errlen, "%s: %s: %s", c->file, key, what);
	else
		snprintf(c->err, c->errlen, "%s: %s", c->file, what);
	return -EINVAL;
}

/* ---- typed reads ---------------------------------------------------------- */

static int get_str(const struct ctx *c, json_t *root, const char *key, char *out, size_t len,
		   bool required)
{
	json_t *v = cfg_get(root, key);
	if (!v) {
		if (required)
			return fail(c, NULL, "missing \"%s\"", key);
		return 0;
	}
	if (!json_is_string(v))
		return fail(c, key, "expected a text value");
	const char *s = json_string_value(v);
	if (strlen(s) != json_string_length(v))
		return fail(c, key, "contains a NUL character");
	if (required && !*s)
		return fail(c, key, "must not be empty");
	if (strlen(s) >= len)
		return fail(c, key, "longer than %zu characters", len - 1);
	util_strlcpy(out, s, len);
	return 0;
}

static int get_int(const struct ctx *c, json_t *root, const char *key, long long lo,
		   long long hi, int *out)
{
	json_t *v = cfg_get(root, key);
	long long x;
	if (!v)
		return 0;
	if (cfg_int(v, lo, hi, &x) < 0)
		return fail(c, key, "expected a whole number from %lld to %lld", lo, hi);
	*out = (int)x;
	return 0;
}

/* "90", "90s", "30m", "1h" -> seconds in lo..hi. */
static int get_duration(const struct ctx *c, json_t *root, const char *key, int64_t lo,
			int64_t hi, int *out)
{
	json_t *v = cfg_get(root, key);
	if (!v)
		return 0;
	int64_t s;
	if (!json_is_string(v) || util_parse_duration(json_string_value(v), &s) < 0 || s < lo ||
	    s > hi)
		return fail(c, key, "expected a duration (90s, 30m, 2h) from %llds to %llds",
			    (long long)lo, (long long)hi);
	*out = (int)s;
	return 0;
}

static bool env_key_ok(const char *k)
{
	if (!*k || strlen(k) > 127)
		return false;
	for (const char *p = k; *p; p++) {
		char ch = *p;
		bool ok = ch == '_' || (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
			  (p > k && ch >= '0' && ch <= '9');
		if (!ok)
			return false;
	}
	return true;
}

/* Every {placeholder} in s is known; "{{" and "}}" are literal braces. */
static int check_template(const struct ctx *c, const char *key, const char *s)
{
	for (const char *p = s; *p; p++) {
		if ((p[0] == '{' && p[1] == '{') || (p[0] == '}' && p[1] == '}')) {
			p++;
			continue;
		}
		if (*p == '}')
			return fail(c, key, "a '}' without its '{' (write }} for a brace)");
		if (*p != '{')
			continue;
		const char *e = strchr(p, '}');
		if (!e || e - p - 1 >= 32)
			return fail(c, key, "a '{' without its '}' (write {{ for a brace)");
		char name[32];
		memcpy(name, p + 1, (size_t)(e - p - 1));
		name[e - p - 1] = '\0';
		bool known = false;
		for (size_t i = 0; recipe_placeholders[i]; i++)
			known |= strcmp(name, recipe_placeholders[i]) == 0;
		if (!known)
			return fail(c, key, "unknown placeholder {%s} (known: {model} {rank} {node_rank} "
					    "{nnodes} {tp} {pp} {port} {host} {addr} {master_addr} "
					    "{master_port}...; docs/serve.md)", name);
		p = e;
	}
	return 0;
}

/* A list of words: a YAML sequence of scalars, or one text split on spaces. */
static int get_words(const struct ctx *c, json_t *root, const char *key, char **out, size_t *n)
{
	json_t *v = cfg_get(root, key);
	*n = 0;
	if (!v)
		return 0;
	if (json_is_string(v)) {
		const char *p = json_string_value(v);
		if (strlen(p) != json_string_length(v))
			return fail(c, key, "contains a NUL character");
		while (*p) {
			while (*p == ' ' || *p == '\t')
				p++;
			if (!*p)
				break;
			const char *s = p;
			while (*p && *p != ' ' && *p != '\t')
				p++;
			if (*n >= RECIPE_MAX_ARGS)
				return fail(c, key, "more than %d words", RECIPE_MAX_ARGS);
			out[(*n)++] = strndup(s, (size_t)(p - s));
		}
	} else if (json_is_array(v)) {
		size_t i;
		json_t *w;
		if (json_array_size(v) > RECIPE_MAX_ARGS)
			return fail(c, key, "more than %d words", RECIPE_MAX_ARGS);
		json_array_foreach(v, i, w) {
			if (!json_is_string(w))
				return fail(c, key, "item %zu is not a text value", i + 1);
			if (strlen(json_string_value(w)) != json_string_length(w))
				return fail(c, key, "item %zu contains a NUL character", i + 1);
			if (json_string_length(w) > 4096)
				return fail(c, key, "item %zu is longer than 4096 characters", i + 1);
			out[(*n)++] = strdup(json_string_value(w));
		}
	} else {
		return fail(c, key, "expected a list of words");
	}
	for (size_t i = 0; i < *n; i++) {
		if (!out[i])
			return fail(c, key, "out of memory");
		int r = check_template(c, key, out[i]);
		if (r < 0)
			return r;
	}
	return 0;
}

/* ---- --set ------------------------------------------------------------------ */

static const char *const top_keys[] = {
    "name", "description", "runtime", "model", "tp", "pp", "nodes", "port", "master_port",
    "rpc_port", "args", "command", "env", "health", "memory", "dtype", "context", "restart",
    NULL};
static const char *const health_keys[] = {"path", "interval", "timeout", "startup_timeout",
					  NULL};
static const char *const restart_keys[] = {"policy", "limit", "backoff", "backoff_max", NULL};

static int apply_set(const struct ctx *c, json_t *root, const char *set)
{
	const char *eq = strchr(set, '=');
	char key[128];
	if (!eq || eq == set || (size_t)(eq - set) >= sizeof key) {
		snprintf(c->err, c->errlen, "--set %.80s: expected KEY=VALUE", set);
		return -EINVAL;
	}
	memcpy(key, set, (size_t)(eq - set));
	key[eq - set] = '\0';
	const char *val = eq + 1;
	char *dot = strchr(key, '.');
	if (!dot) {
		bool ok = false;
		for (size_t i = 0; top_keys[i]; i++)
			ok |= strcmp(key, top_keys[i]) == 0;
		if (!ok || strcmp(key, "env") == 0 || strcmp(key, "health") == 0) {
			snprintf(c->err, c->errlen,
				 "--set %.80s: no key \"%s\" (tp, pp, nodes, port, model, memory, "
				 "args, env.NAME, health.path, restart.limit...)", set, key);
			return -EINVAL;
		}
		if (strcmp(key, "restart") == 0) {
			json_t *r = json_object_get(root, "restart");
			if (json_is_object(r)) {
				json_object_set_new(r, "policy", json_string(val));
				return 0;
			}
		}
		json_object_set_new(root, key, json_string(val));
		return 0;
	}
	*dot = '\0';
	const char *sub = dot + 1;
	const char *const *allowed = strcmp(key, "health") == 0    ? health_keys
				     : strcmp(key, "restart") == 0 ? restart_keys
								   : NULL;
	bool ok = strcmp(key, "env") == 0 ? env_key_ok(sub) : false;
	for (size_t i = 0; allowed && allowed[i]; i++)
		ok |= strcmp(sub, allowed[i]) == 0;
	if (!ok) {
		snprintf(c->err, c->errlen, "--set %.80s: no key \"%s.%s\"", set, key, sub);
		return -EINVAL;
	}
	json_t *obj = json_object_get(root, key);
	if (strcmp(key, "restart") == 0 && json_is_string(obj)) {
		json_t *o = json_pack("{s:O}", "policy", obj);
		json_object_set_new(root, key, o);
		obj = o;
	}
	if (!obj) {
		obj = json_object();
		json_object_set_new(root, key, obj);
	}
	if (!json_is_object(obj)) {
		snprintf(c->err, c->errlen, "--set %.80s: \"%s\" in the recipe is not a mapping", set,
			 key);
		return -EINVAL;
	}
	json_object_set_new(obj, sub, json_string(val));
	return 0;
}

/* ---- the recipe ------------------------------------------------------------ */

static bool name_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 63 || !(isalnum((unsigned char)s[0])))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '-' ||
		      s[i] == '_' || s[i] == '.'))
			return false;
	return true;
}

static const int default_port[RECIPE_RUNTIMES] = {8000, 30000, 8080, 8000, 8000, 8000};

static int validate(const struct ctx *c, json_t *root, recipe_t *r)
{
	int rc;
	if ((rc = cfg_check_keys(root, c->file, top_keys, c->err, c->errlen)) < 0) {
		/* name the line of the unknown key */
		const char *k;
		json_t *v;
		json_object_foreach(root, k, v) {
			bool ok = false;
			for (size_t i = 0; top_keys[i]; i++)
				ok |= strcmp(k, top_keys[i]) == 0;
			if (!ok)
				return fail(c, k, "unknown key (known: name, runtime, model, tp, pp, nodes, "
						  "port, args, command, env, health, memory, restart...)");
		}
		return rc;
	}
	char rt[32] = "";
	if ((rc = get_str(c, root, "name", r->name, sizeof r->name, true)) < 0 ||
	    (rc = get_str(c, root, "description", r->description, sizeof r->description, false)) <
		0 ||
	    (rc = get_str(c, root, "runtime", rt, sizeof rt, true)) < 0 ||
	    (rc = get_str(c, root, "model", r->model, sizeof r->model, true)) < 0)
		return rc;
	if (!name_ok(r->name))
		return fail(c, "name", "1-63 of a-z, 0-9, '-', '_', '.', starting with a letter or "
				       "digit");
	if (recipe_runtime_parse(rt, &r->runtime) < 0)
		return fail(c, "runtime", "unknown runtime \"%s\" (vllm, sglang, llamacpp, trtllm, "
					  "spark-decode, command)", rt);
	r->port = default_port[r->runtime];
	r->master_port = RECIPE_MASTER_PORT;
	r->rpc_port = RECIPE_RPC_PORT;
	if ((rc = get_int(c, root, "tp", 1, RECIPE_MAX_NODES, &r->tp)) < 0 ||
	    (rc = get_int(c, root, "pp", 1, RECIPE_MAX_NODES, &r->pp)) < 0 ||
	    (rc = get_int(c, root, "nodes", 1, RECIPE_MAX_NODES, &r->nodes)) < 0 ||
	    (rc = get_int(c, root, "port", 1, 65535, &r->port)) < 0 ||
	    (rc = get_int(c, root, "master_port", 1, 65535, &r->master_port)) < 0 ||
	    (rc = get_int(c, root, "rpc_port", 1, 65535, &r->rpc_port)) < 0)
		return rc;
	int tp = r->tp ? r->tp : 1, pp = r->pp ? r->pp : 1;
	if (r->tp && r->nodes && tp * pp != r->nodes)
		return fail(c, cfg_get(root, "nodes") ? "nodes" : "tp",
			    "tp %d x pp %d is %d nodes, not %d (one GPU per Spark)", tp, pp, tp * pp,
			    r->nodes);
	if (r->tp && tp * pp > RECIPE_MAX_NODES)
		return fail(c, "tp", "tp %d x pp %d is more than %d nodes", tp, pp, RECIPE_MAX_NODES);
	if (r->pp > 1 && (r->runtime == RECIPE_LLAMACPP || r->runtime == RECIPE_SGLANG ||
			  r->runtime == RECIPE_SPARK_DECODE))
		return fail(c, "pp", "%s has no pipeline stages here (pp must be 1; docs/serve.md)",
			    rt);
	if ((rc = get_words(c, root, "args", r->args, &r->n_args)) < 0 ||
	    (rc = get_words(c, root, "command", r->command, &r->n_command)) < 0)
		return rc;
	if (r->runtime == RECIPE_COMMAND && r->n_command == 0)
		return fail(c, cfg_get(root, "command") ? "command" : "runtime",
			    "runtime command needs a command: template, e.g. "
			    "[my-server, --port, \"{port}\"]");
	if (r->runtime != RECIPE_COMMAND && r->n_command)
		return fail(c, "command", "only runtime command takes a command (use args for extra "
					  "flags of %s)", rt);
	/* env */
	json_t *env = cfg_get(root, "env");
	if (env && !json_is_object(env))
		return fail(c, "env", "expected a mapping of NAME: value");
	if (json_object_size(env) > RECIPE_MAX_ENV)
		return fail(c, "env", "more than %d variables", RECIPE_MAX_ENV);
	const char *k;
	json_t *v;
	json_object_foreach(env, k, v) {
		char path[160];
		snprintf(path, sizeof path, "env.%s", k);
		if (!env_key_ok(k))
			return fail(c, path, "not a variable name (a letter or '_', then letters, "
					     "digits, '_')");
		if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v) ||
		    json_string_length(v) > 4096)
			return fail(c, path, "expected a text value of at most 4096 characters");
		r->env_key[r->n_env] = strdup(k);
		r->env_val[r->n_env] = strdup(json_string_value(v));
		r->n_env++;
		if (!r->env_key[r->n_env - 1] || !r->env_val[r->n_env - 1])
			return fail(c, path, "out of memory");
	}
	/* health */
	json_t *h = cfg_get(root, "health");
	if (h && !json_is_object(h))
		return fail(c, "health", "expected a mapping (path, interval, timeout, "
					 "startup_timeout)");
	if (h && (rc = cfg_check_keys(h, "health", health_keys, c->err, c->errlen)) < 0) {
		json_object_foreach(h, k, v) {
			bool ok = false;
			for (size_t i = 0; health_keys[i]; i++)
				ok |= strcmp(k, health_keys[i]) == 0;
			char path[160];
			snprintf(path, sizeof path, "health.%s", k);
			if (!ok)
				return fail(c, path, "unknown key (path, interval, timeout, "
						     "startup_timeout)");
		}
		return rc;
	}
	util_strlcpy(r->health_path, r->runtime == RECIPE_LLAMACPP || r->runtime == RECIPE_SGLANG ||
					     r->runtime == RECIPE_VLLM || r->runtime == RECIPE_TRTLLM ||
					     r->runtime == RECIPE_SPARK_DECODE
				 ? "/health"
				 : "/v1/models",
		     sizeof r->health_path);
	r->health_interval_s = RECIPE_HEALTH_INTERVAL_S;
	r->health_timeout_s = RECIPE_HEALTH_TIMEOUT_S;
	r->startup_timeout_s = RECIPE_STARTUP_TIMEOUT_S;
	if ((rc = get_str(c, root, "health.path", r->health_path, sizeof r->health_path, false)) <
		0 ||
	    (rc = get_duration(c, root, "health.interval", 1, 3600, &r->health_interval_s)) < 0 ||
	    (rc = get_duration(c, root, "health.timeout", 1, 600, &r->health_timeout_s)) < 0 ||
	    (rc = get_duration(c, root, "health.startup_timeout", 10, 7 * 86400,
			       &r->startup_timeout_s)) < 0)
		return rc;
	if (r->health_path[0] != '/' || strpbrk(r->health_path, " \t\r\n"))
		return fail(c, "health.path", "an HTTP path starting with '/', without spaces");
	/* memory */
	json_t *m = cfg_get(root, "memory");
	if (m) {
		const char *s = json_is_string(m) ? json_string_value(m) : NULL;
		char *e = NULL;
		double g = 0;
		if (s && strcmp(s, "auto") != 0) {
			errno = 0;
			g = strtod(s, &e);
			while (e && *e == ' ')
				e++;
			if (e && (strcmp(e, "GiB") == 0 || strcmp(e, "G") == 0))
				e += strlen(e);
		}
		if (!s || (strcmp(s, "auto") != 0 && (!*s || (e && *e) || errno || !isfinite(g) ||
						       g <= 0 || g > 1024)))
			return fail(c, "memory", "expected auto or GiB per node (90, 90GiB) up to 1024");
		r->memory_gib = g;
	}
	if ((rc = get_str(c, root, "dtype", r->dtype, sizeof r->dtype, false)) < 0)
		return rc;
	if (r->dtype[0] && !model_dtype_find(r->dtype))
		return fail(c, "dtype", "unknown storage type \"%s\" (bf16, fp8, nvfp4, mxfp4, int4, "
					"q4_k_m...; sparkctl fit --help)", r->dtype);
	int ctxk = 0;
	if ((rc = get_int(c, root, "context", 1, 100000000, &ctxk)) < 0)
		return rc;
	r->context = ctxk;
	/* restart */
	r->restart = RECIPE_RESTART_ON_FAILURE;
	r->restart_limit = RECIPE_RESTART_LIMIT;
	r->backoff_s = RECIPE_BACKOFF_S;
	r->backoff_max_s = RECIPE_BACKOFF_MAX_S;
	json_t *rs = cfg_get(root, "restart");
	const char *pol = NULL, *polkey = "restart";
	if (json_is_string(rs)) {
		pol = json_string_value(rs);
	} else if (json_is_object(rs)) {
		json_object_foreach(rs, k, v) {
			bool ok = false;
			for (size_t i = 0; restart_keys[i]; i++)
				ok |= strcmp(k, restart_keys[i]) == 0;
			char path[160];
			snprintf(path, sizeof path, "restart.%s", k);
			if (!ok)
				return fail(c, path, "unknown key (policy, limit, backoff, backoff_max)");
		}
		json_t *p = json_object_get(rs, "policy");
		if (p && !json_is_string(p))
			return fail(c, "restart.policy", "expected on-failure, always or never");
		pol = json_string_value(p);
		polkey = "restart.policy";
		if ((rc = get_int(c, root, "restart.limit", 0, 1000, &r->restart_limit)) < 0 ||
		    (rc = get_duration(c, root, "restart.backoff", 1, 3600, &r->backoff_s)) < 0 ||
		    (rc = get_duration(c, root, "restart.backoff_max", 1, 86400, &r->backoff_max_s)) <
			0)
			return rc;
		if (r->backoff_max_s < r->backoff_s)
			return fail(c, "restart.backoff_max", "shorter than restart.backoff (%ds)",
				    r->backoff_s);
	} else if (rs) {
		return fail(c, "restart", "expected on-failure, always, never, or a mapping");
	}
	if (pol) {
		if (strcmp(pol, "on-failure") == 0)
			r->restart = RECIPE_RESTART_ON_FAILURE;
		else if (strcmp(pol, "always") == 0)
			r->restart = RECIPE_RESTART_ALWAYS;
		else if (strcmp(pol, "never") == 0)
			r->restart = RECIPE_RESTART_NEVER;
		else
			return fail(c, polkey, "unknown policy \"%s\" (on-failure, always, never)", pol);
	}
	return 0;
}

void recipe_free(recipe_t *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->n_args; i++)
		free(r->args[i]);
	for (size_t i = 0; i < r->n_command; i++)
		free(r->command[i]);
	for (size_t i = 0; i < r->n_env; i++) {
		free(r->env_key[i]);
		free(r->env_val[i]);
	}
	memset(r, 0, sizeof *r);
}

int recipe_parse(const char *file, const char *text, size_t len, const char *const *sets,
		 size_t n_sets, recipe_t *r, char *err, size_t errlen)
{
	memset(r, 0, sizeof *r);
	if (!file)
		file = "recipe";
	if (len > RECIPE_MAX_TEXT) {
		snprintf(err, errlen, "%s: larger than %d bytes", file, RECIPE_MAX_TEXT);
		return -EINVAL;
	}
	json_t *root = NULL;
	int rc = cfg_parse(file, text, len, &root, err, errlen);
	if (rc < 0)
		return rc;
	struct ctx c = {.file = file, .text = text, .len = len, .sets = sets, .n_sets = n_sets,
			.err = err, .errlen = errlen};
	for (size_t i = 0; i < n_sets && rc == 0; i++)
		rc = apply_set(&c, root, sets[i]);
	if (rc == 0)
		rc = validate(&c, root, r);
	json_decref(root);
	if (rc < 0)
		recipe_free(r);
	return rc;
}

int recipe_load(const char *path, const char *const *sets, size_t n_sets, recipe_t *r,
		char *err, size_t errlen)
{
	char *text;
	size_t len;
	memset(r, 0, sizeof *r);
	int rc = util_read_file(path, &text, &len, RECIPE_MAX_TEXT);
	if (rc < 0) {
		snprintf(err, errlen, "%s: %s", path,
			 rc == -EFBIG || rc == -E2BIG ? "too large" : strerror(-rc));
		return rc;
	}
	rc = recipe_parse(path, text, len, sets, n_sets, r, err, errlen);
	free(text);
	return rc;
}

static json_t *words(char *const *w, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_string(w[i]));
	return a;
}

json_t *recipe_json(const recipe_t *r)
{
	json_t *env = json_object();
	for (size_t i = 0; i < r->n_env; i++)
		json_object_set_new(env, r->env_key[i], json_string(r->env_val[i]));
	json_t *o = json_pack(
	    "{s:s, s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:o, s:o, s:o,"
	    " s:{s:s, s:i, s:i, s:i}, s:o, s:s, s:I, s:{s:s, s:i, s:i, s:i}}",
	    "name", r->name, "description", r->description, "runtime",
	    recipe_runtime_name(r->runtime), "model", r->model, "tp", r->tp, "pp", r->pp, "nodes",
	    r->nodes, "port", r->port, "master_port", r->master_port, "rpc_port", r->rpc_port,
	    "args", words(r->args, r->n_args), "command", words(r->command, r->n_command), "env",
	    env, "health", "path", r->health_path, "interval_s", r->health_interval_s, "timeout_s",
	    r->health_timeout_s, "startup_timeout_s", r->startup_timeout_s, "memory_gib",
	    r->memory_gib > 0 ? json_real(r->memory_gib) : json_string("auto"), "dtype", r->dtype,
	    "context", (json_int_t)r->context, "restart", "policy", recipe_restart_name(r->restart),
	    "limit", r->restart_limit, "backoff_s", r->backoff_s, "backoff_max_s",
	    r->backoff_max_s);
	return o;
}

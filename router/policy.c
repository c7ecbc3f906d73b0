#include "policy.h"

#include "cfg.h"
#include "util.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define DEPTH 8

/* Parse context: the text (for cfg_locate) and the path of the value at hand. */
struct pctx {
	const char *name, *text;
	size_t len;
	const char *path[DEPTH];
	char idx[DEPTH][24];
	size_t n;
	char *err;
	size_t errlen;
	struct policy *p;
};

static void push(struct pctx *c, const char *key)
{
	if (c->n < DEPTH)
		c->path[c->n] = key;
	c->n++;
}

static void pushi(struct pctx *c, size_t i)
{
	if (c->n < DEPTH) {
		snprintf(c->idx[c->n], sizeof c->idx[0], "%zu", i);
		c->path[c->n] = c->idx[c->n];
	}
	c->n++;
}

static void pop(struct pctx *c)
{
	c->n--;
}

/* Error about the value at the current path (plus an optional last key). */
static int __attribute__((format(printf, 3, 4))) fail(struct pctx *c, const char *key,
						       const char *fmt, ...)
{
	size_t line = 1, col = 1;
	const char *path[DEPTH + 1];
	size_t n = c->n < DEPTH ? c->n : DEPTH;
	memcpy(path, c->path, n * sizeof path[0]);
	if (key)
		path[n++] = key;
	/* the value itself, else the closest enclosing node that exists */
	while (cfg_locate(c->text, c->len, path, n, &line, &col) < 0 && n > 0)
		n--;
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	char where[256] = "";
	size_t w = 0;
	for (size_t i = 0; i < (c->n < DEPTH ? c->n : DEPTH) && w < sizeof where; i++)
		w += snprintf(where + w, sizeof where - w, "%s%s", i ? "." : "", c->path[i]);
	if (key && w < sizeof where)
		snprintf(where + w, sizeof where - w, "%s%s", w ? "." : "", key);
	snprintf(c->err, c->errlen, "%s:%zu:%zu: %s: %s", c->name, line, col, where, msg);
	return -EINVAL;
}

static int check_keys(struct pctx *c, json_t *obj, const char *const allowed[])
{
	const char *key;
	json_t *v;
	json_object_foreach(obj, key, v) {
		size_t i;
		for (i = 0; allowed[i]; i++)
			if (strcmp(key, allowed[i]) == 0)
				break;
		if (!allowed[i])
			return fail(c, key, "unknown key");
	}
	return 0;
}

static int get_str(struct pctx *c, json_t *obj, const char *key, char **out)
{
	json_t *v = json_object_get(obj, key);
	if (!v)
		return 0;
	if (!json_is_string(v) || !*json_string_value(v))
		return fail(c, key, "expected a non-empty string");
	free(*out);
	*out = strdup(json_string_value(v));
	return *out ? 0 : -ENOMEM;
}

static int get_int(struct pctx *c, json_t *obj, const char *key, long long min, long long max,
		   long long *out)
{
	json_t *v = json_object_get(obj, key);
	if (!v)
		return 0;
	if (cfg_int(v, min, max, out) < 0)
		return fail(c, key, "expected an integer from %lld to %lld", min, max);
	return 0;
}

static int get_intv(struct pctx *c, json_t *obj, const char *key, long long min, long long max,
		    int *out)
{
	long long x = *out;
	int r = get_int(c, obj, key, min, max, &x);
	*out = (int)x;
	return r;
}

static int get_bool(struct pctx *c, json_t *obj, const char *key, int *out)
{
	json_t *v = json_object_get(obj, key);
	if (!v)
		return 0;
	const char *s = json_is_string(v) ? json_string_value(v) : "";
	if (!strcmp(s, "true") || !strcmp(s, "yes"))
		*out = 1;
	else if (!strcmp(s, "false") || !strcmp(s, "no"))
		*out = 0;
	else
		return fail(c, key, "expected true or false");
	return 0;
}

/* 1 to max-1 characters, each a letter, a digit or one of extra. */
static bool word_of(const char *s, size_t max, const char *extra)
{
	size_t n = strlen(s);
	if (n == 0 || n >= max)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (!(ch >= 'a' && ch <= 'z') && !(ch >= 'A' && ch <= 'Z') && !(ch >= '0' && ch <= '9') &&
		    !strchr(extra, ch))
			return false;
	}
	return true;
}

static bool valid_name(const char *s)
{
	return word_of(s, POLICY_NAME_MAX, "-_.:/");
}

/* A user name as useradd takes it: 1-32 letters, digits, '_', '.', '-',
 * not starting with '-'. */
static bool valid_user(const char *s)
{
	return s[0] != '-' && word_of(s, 33, "_.-");
}

/* owner: (of a target, or the policy's default): a user name or "*". */
static int check_owner(struct pctx *c, const char *owner)
{
	if (owner && strcmp(owner, "*") != 0 && !valid_user(owner))
		return fail(c, "owner", "expected a user name (1-32 of letters, digits, '_', '.', '-') "
			    "or \"*\" (any owner)");
	return 0;
}

/* A string, or a list of strings, into out[] (strdup'd). */
static int get_list(struct pctx *c, json_t *obj, const char *key, char *out[], size_t *n)
{
	json_t *v = json_object_get(obj, key);
	if (!v)
		return 0;
	if (json_is_string(v)) {
		if (!*json_string_value(v))
			return fail(c, key, "expected a non-empty string");
		out[0] = strdup(json_string_value(v));
		*n = 1;
		return out[0] ? 0 : -ENOMEM;
	}
	if (!json_is_array(v) || json_array_size(v) == 0)
		return fail(c, key, "expected a string or a non-empty list of strings");
	if (json_array_size(v) > POLICY_MAX_LIST)
		return fail(c, key, "at most %d entries", POLICY_MAX_LIST);
	size_t i;
	json_t *e;
	push(c, key);
	json_array_foreach(v, i, e) {
		if (!json_is_string(e) || !*json_string_value(e)) {
			pushi(c, i);
			int r = fail(c, NULL, "expected a non-empty string");
			pop(c);
			pop(c);
			return r;
		}
		out[(*n)++] = strdup(json_string_value(e));
	}
	pop(c);
	return 0;
}

static int target_ref(struct pctx *c, json_t *v, const char *key, int *out)
{
	if (!v || !json_is_string(v))
		return fail(c, key, "expected the name of a target");
	int t = policy_target_index(c->p, json_string_value(v));
	if (t < 0)
		return fail(c, key, "unknown target \"%s\"", json_string_value(v));
	*out = t;
	return 0;
}


/* network: fabric (default) or management: which endpoint URL of a service. */
static int get_network(struct pctx *c, json_t *obj, bool *management)
{
	json_t *v = json_object_get(obj, "network");
	if (!v)
		return 0;
	const char *s = json_is_string(v) ? json_string_value(v) : "";
	if (!strcmp(s, "fabric"))
		*management = false;
	else if (!strcmp(s, "management"))
		*management = true;
	else
		return fail(c, "network", "expected fabric or management");
	return 0;
}

static int parse_target(struct pctx *c, const char *name, json_t *t)
{
	static const char *const keys[] = {"url", "service", "api_key_env", "model",
					   "max_concurrency", "queue", "queue_timeout_ms",
					   "connect_timeout_ms", "timeout_ms", "weight",
					   "cooldown_after", "cooldown_s", "network", "max_context",
					   "owner", "stall_timeout_ms", NULL};
	struct policy *p = c->p;
	if (!valid_name(name))
		return fail(c, NULL, "a target name is 1-63 of letters, digits and -_.:/");
	if (!json_is_object(t))
		return fail(c, NULL, "expected a mapping with url: or service:");
	int r = check_keys(c, t, keys);
	if (r < 0)
		return r;
	struct target *tg = &p->targets[p->n_targets++];
	util_strlcpy(tg->name, name, sizeof tg->name);
	tg->queue = 0;
	tg->queue_timeout_ms = 5000;
	tg->connect_timeout_ms = 5000;
	tg->timeout_ms = 600000;
	tg->stall_timeout_ms = 120000;
	tg->weight = 1;
	tg->cooldown_after = 3;
	tg->cooldown_s = 10;
	tg->management = p->management;
	if ((r = get_network(c, t, &tg->management)) < 0 ||
	    (r = get_int(c, t, "max_context", 1, 1LL << 40, &tg->max_context)) < 0 ||
	    (r = get_intv(c, t, "cooldown_after", 0, 1000, &tg->cooldown_after)) < 0 ||
	    (r = get_intv(c, t, "cooldown_s", 1, 3600, &tg->cooldown_s)) < 0 ||
	    (r = get_str(c, t, "url", &tg->url)) < 0 ||
	    (r = get_str(c, t, "service", &tg->service)) < 0 ||
	    (r = get_str(c, t, "owner", &tg->owner)) < 0 ||
	    (r = get_str(c, t, "api_key_env", &tg->api_key_env)) < 0 ||
	    (r = get_str(c, t, "model", &tg->model)) < 0 ||
	    (r = get_intv(c, t, "max_concurrency", 0, 100000, &tg->max_concurrency)) < 0 ||
	    (r = get_intv(c, t, "queue", 0, 100000, &tg->queue)) < 0 ||
	    (r = get_intv(c, t, "queue_timeout_ms", 1, 3600000, &tg->queue_timeout_ms)) < 0 ||
	    (r = get_intv(c, t, "connect_timeout_ms", 1, 600000, &tg->connect_timeout_ms)) < 0 ||
	    (r = get_intv(c, t, "timeout_ms", 1, 86400000, &tg->timeout_ms)) < 0 ||
	    (r = get_intv(c, t, "stall_timeout_ms", 1000, 86400000, &tg->stall_timeout_ms)) < 0 ||
	    (r = get_intv(c, t, "weight", 0, 1000000, &tg->weight)) < 0)
		return r;
	if (!!tg->url == !!tg->service)
		return fail(c, NULL, "a target has exactly one of url: and service:");
	tg->kind = tg->service ? TARGET_SERVICE : TARGET_URL;
	if (tg->url && !util_http_url(tg->url, true))
		return fail(c, "url", "expected an http:// or https:// URL without spaces");
	if (tg->service && !valid_name(tg->service))
		return fail(c, "service", "not a valid service name");
	if (tg->owner && !tg->service)
		return fail(c, "owner", "only service targets take owner: (the user whose service it follows)");
	if ((r = check_owner(c, tg->owner)) < 0)
		return r;
	if (tg->service && !tg->owner &&
	    !(tg->owner = strdup(p->service_owner ? p->service_owner : POLICY_SERVICE_OWNER)))
		return fail(c, NULL, "out of memory");
	if (tg->url && json_object_get(t, "network"))
		return fail(c, "network", "only service targets take network: (a URL target is its url:)");
	if (tg->service && tg->api_key_env)
		return fail(c, "api_key_env", "only URL targets take an API key");
	if (tg->url) { /* no trailing slash: paths are appended */
		size_t n = strlen(tg->url);
		while (n > 8 && tg->url[n - 1] == '/')
			tg->url[--n] = 0;
	}
	return 0;
}

static int parse_cond(struct pctx *c, json_t *w, struct cond *cd)
{
	static const char *const keys[] = {"min_tokens", "max_tokens", "min_chars", "max_chars",
					   "tools", "images", "keywords", "regex", "in",
					   "model", "header", NULL};
	cd->min_tokens = cd->max_tokens = cd->min_chars = cd->max_chars = -1;
	cd->tools = cd->images = -1;
	if (!json_is_object(w) || json_object_size(w) == 0)
		return fail(c, NULL, "expected a mapping of conditions");
	int r = check_keys(c, w, keys);
	if (r < 0)
		return r;
	const long long big = 1LL << 40;
	if ((r = get_int(c, w, "min_tokens", 0, big, &cd->min_tokens)) < 0 ||
	    (r = get_int(c, w, "max_tokens", 0, big, &cd->max_tokens)) < 0 ||
	    (r = get_int(c, w, "min_chars", 0, big, &cd->min_chars)) < 0 ||
	    (r = get_int(c, w, "max_chars", 0, big, &cd->max_chars)) < 0 ||
	    (r = get_bool(c, w, "tools", &cd->tools)) < 0 ||
	    (r = get_bool(c, w, "images", &cd->images)) < 0 ||
	    (r = get_list(c, w, "keywords", cd->keywords, &cd->n_keywords)) < 0 ||
	    (r = get_list(c, w, "model", cd->models, &cd->n_models)) < 0)
		return r;
	if (cd->min_tokens >= 0 && cd->max_tokens >= 0 && cd->min_tokens > cd->max_tokens)
		return fail(c, "max_tokens", "is below min_tokens");
	if (cd->min_chars >= 0 && cd->max_chars >= 0 && cd->min_chars > cd->max_chars)
		return fail(c, "max_chars", "is below min_chars");
	json_t *in = json_object_get(w, "in");
	cd->scope = SCOPE_LAST_USER;
	if (in) {
		const char *s = json_is_string(in) ? json_string_value(in) : "";
		if (!strcmp(s, "last_user"))
			cd->scope = SCOPE_LAST_USER;
		else if (!strcmp(s, "system"))
			cd->scope = SCOPE_SYSTEM;
		else if (!strcmp(s, "any"))
			cd->scope = SCOPE_ANY;
		else
			return fail(c, "in", "expected last_user, system or any");
		if (!cd->n_keywords && !json_object_get(w, "regex"))
			return fail(c, "in", "applies to keywords: or regex:, and there is neither");
	}
	json_t *re = json_object_get(w, "regex");
	if (re) {
		if (!json_is_string(re) || !*json_string_value(re) ||
		    strlen(json_string_value(re)) > RX_PATTERN_MAX)
			return fail(c, "regex", "expected a regular expression of 1-%d characters",
				    RX_PATTERN_MAX);
		char m[200];
		int e = rx_compile(json_string_value(re), &cd->regex, m, sizeof m);
		if (e == -EINVAL)
			return fail(c, "regex", "not a valid regular expression: %s", m);
		if (e < 0)
			return e;
		cd->has_regex = true;
	}
	json_t *h = json_object_get(w, "header");
	if (h) {
		push(c, "header");
		r = 0;
		static const char *const hkeys[] = {"name", "value", NULL};
		if (!json_is_object(h))
			r = fail(c, NULL, "expected a mapping with name: and optional value:");
		else if ((r = check_keys(c, h, hkeys)) < 0 ||
			 (r = get_str(c, h, "name", &cd->header_name)) < 0 ||
			 (r = get_str(c, h, "value", &cd->header_value)) < 0)
			;
		else if (!cd->header_name)
			r = fail(c, NULL, "name: is missing");
		pop(c);
		if (r < 0)
			return r;
	}
	return 0;
}

static const char DEFAULT_PROMPT_TARGET[] =
	"You route requests to language models. Candidates: {{targets}}.\n"
	"Pick the smallest candidate that can answer the request below well.\n"
	"Answer with JSON only, exactly {\"target\": \"NAME\"}.\n\nRequest:\n{{message}}";
static const char DEFAULT_PROMPT_P_SOLVE[] =
	"Estimate the probability that a small, fast language model answers the request below "
	"correctly.\nAnswer with JSON only, exactly {\"p_solve\": NUMBER} with NUMBER from 0 to 1."
	"\n\nRequest:\n{{message}}";

static int parse_classifier(struct pctx *c, json_t *o, struct route *rt)
{
	int r;
	if (json_object_get(o, "target") || json_object_get(o, "rules") || json_object_get(o, "seed"))
		return fail(c, json_object_get(o, "target") ? "target" : json_object_get(o, "rules") ? "rules" : "seed",
			    "not used by a classifier route (it takes classifier:, default: and targets: or strong:/weak:)");
	if ((r = target_ref(c, json_object_get(o, "classifier"), "classifier", &rt->judge)) < 0)
		return r;
	if ((r = target_ref(c, json_object_get(o, "default"), "default", &rt->target)) < 0)
		return r;
	json_t *an = json_object_get(o, "answer");
	const char *as = an ? (json_is_string(an) ? json_string_value(an) : "") : "target";
	if (!strcmp(as, "target"))
		rt->answer = ANSWER_TARGET;
	else if (!strcmp(as, "p_solve"))
		rt->answer = ANSWER_P_SOLVE;
	else
		return fail(c, "answer", "expected target or p_solve");
	rt->judge_timeout_ms = 2000;
	rt->judge_max_tokens = 64;
	rt->threshold = 0.5;
	if ((r = get_intv(c, o, "timeout_ms", 1, 600000, &rt->judge_timeout_ms)) < 0 ||
	    (r = get_intv(c, o, "max_tokens", 1, 4096, &rt->judge_max_tokens)) < 0 ||
	    (r = get_str(c, o, "prompt", &rt->prompt)) < 0)
		return r;
	if (rt->prompt && strlen(rt->prompt) > 16384)
		return fail(c, "prompt", "at most 16384 characters");
	json_t *tgs = json_object_get(o, "targets");
	if (rt->answer == ANSWER_TARGET) {
		if (json_object_get(o, "strong") || json_object_get(o, "weak") || json_object_get(o, "threshold"))
			return fail(c, json_object_get(o, "strong") ? "strong" : json_object_get(o, "weak") ? "weak" : "threshold",
				    "answer: target takes targets:, not strong:/weak:/threshold:");
		if (!json_is_array(tgs) || json_array_size(tgs) == 0 || json_array_size(tgs) > POLICY_MAX_LIST)
			return fail(c, "targets", "expected a list of 1-%d candidate targets", POLICY_MAX_LIST);
		size_t i;
		json_t *e;
		push(c, "targets");
		json_array_foreach(tgs, i, e) {
			char ix[24];
			snprintf(ix, sizeof ix, "%zu", i);
			if ((r = target_ref(c, e, ix, &rt->wtargets[rt->n_wtargets])) < 0) {
				pop(c);
				return r;
			}
			rt->weights[rt->n_wtargets++] = 1;
		}
		pop(c);
		if (!rt->prompt)
			rt->prompt = strdup(DEFAULT_PROMPT_TARGET);
	} else {
		if (tgs)
			return fail(c, "targets", "answer: p_solve takes strong: and weak:, not targets:");
		if ((r = target_ref(c, json_object_get(o, "strong"), "strong", &rt->strong)) < 0 ||
		    (r = target_ref(c, json_object_get(o, "weak"), "weak", &rt->weak)) < 0)
			return r;
		json_t *th = json_object_get(o, "threshold");
		if (th) {
			const char *ts = json_is_string(th) ? json_string_value(th) : "";
			char *end = NULL;
			double x = strtod(ts, &end);
			if (!*ts || *end || !(x >= 0 && x <= 1))
				return fail(c, "threshold", "expected a number from 0 to 1");
			rt->threshold = x;
		}
		if (!rt->prompt)
			rt->prompt = strdup(DEFAULT_PROMPT_P_SOLVE);
	}
	return rt->prompt ? 0 : -ENOMEM;
}

static int parse_route(struct pctx *c, const char *name, json_t *o)
{
	static const char *const keys[] = {"type", "target", "targets", "seed", "rules",
					   "default", "fallbacks", "aliases", "classifier",
					   "prompt", "answer", "strong", "weak", "threshold",
					   "timeout_ms", "max_tokens", "sticky", NULL};
	struct policy *p = c->p;
	if (!valid_name(name))
		return fail(c, NULL, "a route name is 1-63 of letters, digits and -_.:/");
	if (!json_is_object(o))
		return fail(c, NULL, "expected a mapping with type:");
	int r = check_keys(c, o, keys);
	if (r < 0)
		return r;
	struct route *rt = &p->routes[p->n_routes++];
	util_strlcpy(rt->name, name, sizeof rt->name);
	rt->target = -1;
	json_t *ty = json_object_get(o, "type");
	const char *ts = json_is_string(ty) ? json_string_value(ty) : "";
	if (!strcmp(ts, "passthrough"))
		rt->type = ROUTE_PASSTHROUGH;
	else if (!strcmp(ts, "weighted"))
		rt->type = ROUTE_WEIGHTED;
	else if (!strcmp(ts, "rules"))
		rt->type = ROUTE_RULES;
	else if (!strcmp(ts, "classifier"))
		rt->type = ROUTE_CLASSIFIER;
	else
		return fail(c, "type", "expected passthrough, weighted, rules or classifier");
	if (rt->type != ROUTE_CLASSIFIER) {
		static const char *const only[] = {"classifier", "prompt", "answer", "strong",
						   "weak", "threshold", "timeout_ms", "max_tokens", NULL};
		for (size_t i = 0; only[i]; i++)
			if (json_object_get(o, only[i]))
				return fail(c, only[i], "only classifier routes take this");
	}
	if ((r = get_list(c, o, "aliases", rt->aliases, &rt->n_aliases)) < 0)
		return r;
	rt->sticky = rt->type == ROUTE_PASSTHROUGH ? STICKY_OFF : STICKY_HEADER;
	json_t *st = json_object_get(o, "sticky");
	if (st) {
		const char *ss = json_is_string(st) ? json_string_value(st) : "";
		if (!strcmp(ss, "off") || !strcmp(ss, "false"))
			rt->sticky = STICKY_OFF;
		else if (!strcmp(ss, "header"))
			rt->sticky = STICKY_HEADER;
		else if (!strcmp(ss, "hash"))
			rt->sticky = STICKY_HASH;
		else
			return fail(c, "sticky", "expected off, header or hash");
	}
	json_t *fb = json_object_get(o, "fallbacks");
	if (fb) {
		if (!json_is_array(fb) || json_array_size(fb) > POLICY_MAX_LIST)
			return fail(c, "fallbacks", "expected a list of at most %d target names",
				    POLICY_MAX_LIST);
		size_t i;
		json_t *e;
		push(c, "fallbacks");
		json_array_foreach(fb, i, e) {
			char ix[24];
			snprintf(ix, sizeof ix, "%zu", i);
			if ((r = target_ref(c, e, ix, &rt->fallbacks[rt->n_fallbacks++])) < 0) {
				pop(c);
				return r;
			}
		}
		pop(c);
	}
	json_t *tg = json_object_get(o, "target");
	json_t *tgs = json_object_get(o, "targets");
	json_t *rules = json_object_get(o, "rules");
	json_t *def = json_object_get(o, "default");
	json_t *seed = json_object_get(o, "seed");
	switch (rt->type) {
	case ROUTE_PASSTHROUGH:
		if (tgs || rules || def || seed)
			return fail(c, tgs ? "targets" : rules ? "rules" : def ? "default" : "seed",
				    "not used by a passthrough route (it takes target:)");
		return target_ref(c, tg, "target", &rt->target);
	case ROUTE_WEIGHTED: {
		if (tg || rules || def)
			return fail(c, tg ? "target" : rules ? "rules" : "default",
				    "not used by a weighted route (it takes targets: and seed:)");
		if (!json_is_array(tgs) || json_array_size(tgs) == 0 ||
		    json_array_size(tgs) > POLICY_MAX_LIST)
			return fail(c, "targets", "expected a list of 1-%d targets", POLICY_MAX_LIST);
		if (seed) {
			long long s = 0;
			if ((r = get_int(c, o, "seed", 0, 1LL << 62, &s)) < 0)
				return r;
			rt->has_seed = true;
			rt->seed = (uint64_t)s;
		}
		size_t i;
		json_t *e;
		long long sum = 0;
		push(c, "targets");
		json_array_foreach(tgs, i, e) {
			pushi(c, i);
			static const char *const wkeys[] = {"target", "weight", NULL};
			int t = -1;
			if (json_is_string(e)) {
				r = target_ref(c, e, NULL, &t);
				if (r == 0)
					rt->weights[i] = p->targets[t].weight;
			} else if (json_is_object(e)) {
				rt->weights[i] = -1;
				if ((r = check_keys(c, e, wkeys)) == 0 &&
				    (r = target_ref(c, json_object_get(e, "target"), "target", &t)) == 0) {
					rt->weights[i] = p->targets[t].weight;
					r = get_intv(c, e, "weight", 0, 1000000, &rt->weights[i]);
				}
			} else {
				r = fail(c, NULL, "expected a target name or {target:, weight:}");
			}
			pop(c);
			if (r < 0) {
				pop(c);
				return r;
			}
			rt->wtargets[i] = t;
			sum += rt->weights[i];
			rt->n_wtargets++;
		}
		pop(c);
		if (sum <= 0)
			return fail(c, "targets", "the weights add up to 0");
		return 0;
	}
	case ROUTE_CLASSIFIER:
		return parse_classifier(c, o, rt);
	case ROUTE_RULES: {
		if (tg || tgs || seed)
			return fail(c, tg ? "target" : tgs ? "targets" : "seed",
				    "not used by a rules route (it takes rules: and default:)");
		if ((r = target_ref(c, def, "default", &rt->target)) < 0)
			return r;
		if (!rules)
			return 0; /* only a default: legal, and explained as such */
		if (!json_is_array(rules) || json_array_size(rules) > POLICY_MAX_RULES)
			return fail(c, "rules", "expected a list of at most %d rules",
				    POLICY_MAX_RULES);
		size_t i;
		json_t *e;
		push(c, "rules");
		json_array_foreach(rules, i, e) {
			pushi(c, i);
			static const char *const rkeys[] = {"name", "when", "target", NULL};
			struct rule *ru = &rt->rules[rt->n_rules++];
			snprintf(ru->name, sizeof ru->name, "rule%zu", i);
			r = 0;
			if (!json_is_object(e))
				r = fail(c, NULL, "expected a mapping with when: and target:");
			else if ((r = check_keys(c, e, rkeys)) == 0) {
				json_t *nm = json_object_get(e, "name");
				if (nm && (!json_is_string(nm) || !valid_name(json_string_value(nm))))
					r = fail(c, "name", "a rule name is 1-63 of letters, digits and -_.:/");
				else if (nm)
					util_strlcpy(ru->name, json_string_value(nm), sizeof ru->name);
				for (size_t k = 0; r == 0 && k + 1 < rt->n_rules; k++)
					if (!strcmp(rt->rules[k].name, ru->name))
						r = fail(c, "name", "a rule of this name comes before");
				if (r == 0)
					r = target_ref(c, json_object_get(e, "target"), "target",
						       &ru->target);
				if (r == 0) {
					json_t *w = json_object_get(e, "when");
					if (!w)
						r = fail(c, NULL, "when: is missing");
					else {
						push(c, "when");
						r = parse_cond(c, w, &ru->when);
						pop(c);
					}
				}
			}
			pop(c);
			if (r < 0) {
				pop(c);
				return r;
			}
		}
		pop(c);
		return 0;
	}
	}
	return 0;
}

static int parse_api_keys(struct pctx *c, json_t *v)
{
	struct policy *p = c->p;
	if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > POLICY_MAX_LIST)
		return fail(c, "api_keys", "expected a list of 1-%d entries {env: VAR} or {key: K}",
			    POLICY_MAX_LIST);
	size_t i;
	json_t *e;
	push(c, "api_keys");
	int r = 0;
	json_array_foreach(v, i, e) {
		pushi(c, i);
		static const char *const keys[] = {"env", "key", NULL};
		json_t *env = json_is_object(e) ? json_object_get(e, "env") : NULL;
		json_t *key = json_is_object(e) ? json_object_get(e, "key") : NULL;
		const char *val = NULL;
		if (!json_is_object(e) || (r = check_keys(c, e, keys)) < 0 || !!env == !!key) {
			if (r == 0)
				r = fail(c, NULL, "expected {env: VAR} or {key: K}");
		} else if (env) {
			val = json_is_string(env) ? getenv(json_string_value(env)) : NULL;
			if (!val || strlen(val) < 16)
				r = fail(c, "env", "the environment variable is unset or shorter than 16 characters");
		} else {
			val = json_is_string(key) ? json_string_value(key) : NULL;
			if (!val || strlen(val) < 16)
				r = fail(c, "key", "an API key is at least 16 characters");
		}
		pop(c);
		if (r < 0)
			break;
		p->api_keys[p->n_api_keys++] = strdup(val);
	}
	pop(c);
	return r;
}

int policy_parse(const char *name, const char *text, size_t len, struct policy **out, char *err,
		 size_t errlen)
{
	static const char *const keys[] = {"listen", "api_keys", "log", "max_body_bytes",
					   "max_connections", "idle_timeout_s", "default_route",
					   "sessions", "targets", "routes", "network", "owner",
					   "services_grace_s", NULL};
	json_t *root = NULL;
	*out = NULL;
	int r = cfg_parse(name, text, len, &root, err, errlen);
	if (r < 0)
		return r;
	struct policy *p = calloc(1, sizeof *p);
	if (!p) {
		json_decref(root);
		return -ENOMEM;
	}
	struct pctx c = {.name = name, .text = text, .len = len, .err = err, .errlen = errlen, .p = p};
	p->path = strdup(name);
	p->max_body_bytes = 4 << 20;
	p->max_connections = 1024;
	p->idle_timeout_s = 30;
	long long mc = p->max_connections, it = p->idle_timeout_s, gr = POLICY_SERVICES_GRACE_S;
	if ((r = check_keys(&c, root, keys)) < 0 || (r = get_str(&c, root, "listen", &p->listen)) < 0 ||
	    (r = get_str(&c, root, "log", &p->log_path)) < 0 ||
	    (r = get_str(&c, root, "default_route", &p->default_route)) < 0 ||
	    (r = get_int(&c, root, "max_body_bytes", 1024, 1LL << 30, &p->max_body_bytes)) < 0 ||
	    (r = get_int(&c, root, "max_connections", 1, 100000, &mc)) < 0 ||
	    (r = get_int(&c, root, "idle_timeout_s", 1, 3600, &it)) < 0 ||
	    (r = get_int(&c, root, "services_grace_s", 0, 3600, &gr)) < 0 ||
	    (r = get_network(&c, root, &p->management)) < 0 ||
	    (r = get_str(&c, root, "owner", &p->service_owner)) < 0 ||
	    (r = check_owner(&c, p->service_owner)) < 0)
		goto out;
	p->max_connections = (int)mc;
	p->idle_timeout_s = (int)it;
	p->services_grace_s = (int)gr;
	char why[PATH_MAX + 100];
	if (p->log_path && policy_log_path_check(p->log_path, why, sizeof why) < 0) {
		r = fail(&c, "log", "%s", why);
		goto out;
	}
	if (p->listen) {
		char msg[160];
		if (util_check_hostport(p->listen, 0, msg, sizeof msg) < 0) {
			r = fail(&c, "listen", "%s", msg);
			goto out;
		}
	}
	p->session_ttl_s = 1800;
	p->max_sessions = 10000;
	json_t *ses = json_object_get(root, "sessions");
	if (ses) {
		static const char *const skeys[] = {"header", "ttl_s", "max", NULL};
		push(&c, "sessions");
		if (!json_is_object(ses))
			r = fail(&c, NULL, "expected a mapping with header:, ttl_s:, max:");
		else if ((r = check_keys(&c, ses, skeys)) == 0 &&
			 (r = get_str(&c, ses, "header", &p->session_header)) == 0 &&
			 (r = get_intv(&c, ses, "ttl_s", 1, 7 * 86400, &p->session_ttl_s)) == 0)
			r = get_intv(&c, ses, "max", 1, 1000000, &p->max_sessions);
		pop(&c);
		if (r < 0)
			goto out;
	}
	if (!p->session_header)
		p->session_header = strdup("x-session-id");
	json_t *ak = json_object_get(root, "api_keys");
	if (ak && (r = parse_api_keys(&c, ak)) < 0)
		goto out;
	json_t *targets = json_object_get(root, "targets");
	if (!json_is_object(targets) || json_object_size(targets) == 0) {
		r = fail(&c, targets ? "targets" : NULL, "expected a mapping of target names to targets");
		goto out;
	}
	if (json_object_size(targets) > POLICY_MAX_TARGETS) {
		r = fail(&c, "targets", "at most %d targets", POLICY_MAX_TARGETS);
		goto out;
	}
	const char *k;
	json_t *v;
	push(&c, "targets");
	json_object_foreach(targets, k, v) {
		push(&c, k);
		r = parse_target(&c, k, v);
		pop(&c);
		if (r < 0)
			goto out;
	}
	pop(&c);
	json_t *routes = json_object_get(root, "routes");
	if (!json_is_object(routes) || json_object_size(routes) == 0) {
		r = fail(&c, routes ? "routes" : NULL, "expected a mapping of model names to routes");
		goto out;
	}
	if (json_object_size(routes) > POLICY_MAX_ROUTES) {
		r = fail(&c, "routes", "at most %d routes", POLICY_MAX_ROUTES);
		goto out;
	}
	push(&c, "routes");
	json_object_foreach(routes, k, v) {
		push(&c, k);
		r = parse_route(&c, k, v);
		pop(&c);
		if (r < 0)
			goto out;
	}
	pop(&c);
	/* every model name (route or alias) selects one route */
	for (size_t i = 0; i < p->n_routes; i++) {
		struct route *rt = &p->routes[i];
		for (size_t a = 0; a < rt->n_aliases; a++) {
			const struct route *o = policy_route(p, rt->aliases[a]);
			if (o != rt) {
				push(&c, "routes");
				push(&c, rt->name);
				r = fail(&c, "aliases", "\"%s\" already names route \"%s\"",
					 rt->aliases[a], o->name);
				goto out;
			}
			for (size_t j = 0; j < p->n_routes; j++)
				for (size_t b = 0; b < p->routes[j].n_aliases; b++)
					if ((j != i || b != a) &&
					    !strcmp(p->routes[j].aliases[b], rt->aliases[a])) {
						push(&c, "routes");
						push(&c, rt->name);
						r = fail(&c, "aliases", "\"%s\" is an alias of two routes",
							 rt->aliases[a]);
						goto out;
					}
		}
	}
	if (p->default_route && !policy_route(p, p->default_route)) {
		r = fail(&c, "default_route", "unknown route \"%s\"", p->default_route);
		goto out;
	}
	if (!p->listen)
		p->listen = strdup("127.0.0.1:4000");
	r = 0;
out:
	json_decref(root);
	if (r < 0) {
		policy_free(p);
		return r;
	}
	*out = p;
	return 0;
}

int policy_load(const char *path, struct policy **out, char *err, size_t errlen)
{
	char *text;
	size_t len;
	int r = util_read_file(path, &text, &len, 1 << 20);
	if (r < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(-r));
		return r;
	}
	r = policy_parse(path, text, len, out, err, errlen);
	free(text);
	return r;
}

static void free_cond(struct cond *c)
{
	for (size_t i = 0; i < c->n_keywords; i++)
		free(c->keywords[i]);
	for (size_t i = 0; i < c->n_models; i++)
		free(c->models[i]);
	rx_free(c->regex);
	free(c->header_name);
	free(c->header_value);
}

void policy_free(struct policy *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n_targets; i++) {
		struct target *t = &p->targets[i];
		free(t->url);
		free(t->service);
		free(t->owner);
		free(t->api_key_env);
		free(t->model);
	}
	for (size_t i = 0; i < p->n_routes; i++) {
		struct route *r = &p->routes[i];
		for (size_t a = 0; a < r->n_aliases; a++)
			free(r->aliases[a]);
		for (size_t k = 0; k < r->n_rules; k++)
			free_cond(&r->rules[k].when);
		free(r->prompt);
	}
	for (size_t i = 0; i < p->n_api_keys; i++) {
		explicit_bzero(p->api_keys[i], strlen(p->api_keys[i]));
		free(p->api_keys[i]);
	}
	free(p->path);
	free(p->listen);
	free(p->log_path);
	free(p->default_route);
	free(p->session_header);
	free(p->service_owner);
	free(p);
}

const struct route *policy_route(const struct policy *p, const char *model)
{
	if (!model)
		return NULL;
	for (size_t i = 0; i < p->n_routes; i++)
		if (!strcmp(p->routes[i].name, model))
			return &p->routes[i];
	for (size_t i = 0; i < p->n_routes; i++)
		for (size_t a = 0; a < p->routes[i].n_aliases; a++)
			if (!strcmp(p->routes[i].aliases[a], model))
				return &p->routes[i];
	return NULL;
}

int policy_target_index(const struct policy *p, const char *name)
{
	for (size_t i = 0; i < p->n_targets; i++)
		if (!strcmp(p->targets[i].name, name))
			return (int)i;
	return -1;
}

int policy_log_path_check(const char *path, char *why, size_t whylen)
{
	if (!strcmp(path, "-"))
		return 0;
	/* where it really is: the file, else its directory, without links */
	char real[PATH_MAX], dir[PATH_MAX];
	if (!realpath(path, real)) {
		util_strlcpy(dir, path, sizeof dir);
		char *slash = strrchr(dir, '/');
		const char *base = slash ? slash + 1 : path;
		if (slash == dir)
			dir[1] = 0;
		else if (slash)
			*slash = 0;
		else
			util_strlcpy(dir, ".", sizeof dir);
		char rd[PATH_MAX];
		if (!realpath(dir, rd) ||
		    (size_t)snprintf(real, sizeof real, "%s/%s", rd, base) >= sizeof real)
			util_strlcpy(real, path, sizeof real);
	}
	static const char *const no[] = {"/proc", "/sys", "/dev"};
	for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
		size_t n = strlen(no[i]);
		if (!strncmp(real, no[i], n) && (real[n] == 0 || real[n] == '/')) {
			snprintf(why, whylen, "%s is under %s, not a place for a log file (use a file in "
				 "/var/log, or - for standard output)", path, no[i]);
			return -EINVAL;
		}
	}
	struct stat st;
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		snprintf(why, whylen, "%s exists and is not a regular file", path);
		return -EINVAL;
	}
	return 0;
}

const char *route_type_name(enum route_type t)
{
	switch (t) {
	case ROUTE_PASSTHROUGH:
		return "passthrough";
	case ROUTE_WEIGHTED:
		return "weighted";
	case ROUTE_RULES:
		return "rules";
	case ROUTE_CLASSIFIER:
		return "classifier";
	}
	return "?";
}

bool policy_has_service_targets(const struct policy *p)
{
	for (size_t i = 0; i < p->n_targets; i++)
		if (p->targets[i].kind == TARGET_SERVICE)
			return true;
	return false;
}

bool policy_owner_ok(const struct target *tg, const char *owner)
{
	return !tg->owner || strcmp(tg->owner, "*") == 0 || (owner && strcmp(tg->owner, owner) == 0);
}

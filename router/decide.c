#include "decide.h"

#include "util.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Text gathered from a request, with a cap so one request cannot make the
 * router copy or scan unbounded text (the body limit bounds it anyway). */
#define TEXT_MAX (1 << 20)

struct buf {
	char *s;
	size_t n, cap;
};

/* Append n bytes (no separator), NUL-terminated, capped at TEXT_MAX in all. */
static int buf_raw(struct buf *b, const char *s, size_t n)
{
	if (b->n + n + 2 > TEXT_MAX)
		n = b->n + 2 < TEXT_MAX ? TEXT_MAX - b->n - 2 : 0;
	if (b->n + n + 2 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->n + n + 2)
			cap *= 2;
		char *ns = realloc(b->s, cap);
		if (!ns)
			return -ENOMEM;
		b->s = ns;
		b->cap = cap;
	}
	memcpy(b->s + b->n, s, n);
	b->n += n;
	b->s[b->n] = 0;
	return 0;
}

/* Append a piece of text, a newline between pieces. */
static int buf_add(struct buf *b, const char *s, size_t n)
{
	if (b->n && n && buf_raw(b, "\n", 1) < 0)
		return -ENOMEM;
	return buf_raw(b, s, n);
}

static long long utf8_len(const char *s, size_t n)
{
	long long c = 0;
	for (size_t i = 0; i < n; i++)
		if (((unsigned char)s[i] & 0xC0) != 0x80)
			c++;
	return c;
}

/* Text of a message content (a string or a list of parts); notes images. */
static int content_text(json_t *content, struct req_info *r, struct buf *into)
{
	if (json_is_string(content)) {
		size_t n = json_string_length(content);
		r->chars += utf8_len(json_string_value(content), n);
		return into ? buf_add(into, json_string_value(content), n) : 0;
	}
	if (json_is_null(content) || !content)
		return 0;
	if (!json_is_array(content))
		return -EINVAL;
	size_t i;
	json_t *part;
	json_array_foreach(content, i, part) {
		if (!json_is_object(part))
			return -EINVAL;
		const char *type = json_string_value(json_object_get(part, "type"));
		if (!type)
			return -EINVAL;
		if (!strcmp(type, "image_url") || !strcmp(type, "image") ||
		    !strcmp(type, "input_image"))
			r->images = true;
		json_t *t = json_object_get(part, "text");
		if (json_is_string(t)) {
			size_t n = json_string_length(t);
			r->chars += utf8_len(json_string_value(t), n);
			if (into && buf_add(into, json_string_value(t), n) < 0)
				return -ENOMEM;
		}
	}
	return 0;
}

static int parse_chat(json_t *body, struct req_info *r, char *err, size_t errlen)
{
	json_t *msgs = json_object_get(body, "messages");
	if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
		snprintf(err, errlen, "'messages' must be a non-empty array");
		return -EINVAL;
	}
	struct buf sys = {0}, last = {0};
	size_t i;
	json_t *m;
	int rc = 0;
	json_array_foreach(msgs, i, m) {
		const char *role = json_is_object(m) ? json_string_value(json_object_get(m, "role")) : NULL;
		if (!role) {
			snprintf(err, errlen, "'messages.%zu' must be an object with a string 'role'", i);
			rc = -EINVAL;
			break;
		}
		struct buf *into = NULL;
		if (!strcmp(role, "system") || !strcmp(role, "developer")) {
			into = &sys;
		} else if (!strcmp(role, "user")) {
			last.n = 0; /* keep only the last user message */
			if (last.s)
				last.s[0] = 0;
			into = &last;
		}
		if (json_object_get(m, "tool_calls") || json_object_get(m, "function_call") ||
		    !strcmp(role, "tool") || !strcmp(role, "function"))
			r->tools = true;
		rc = content_text(json_object_get(m, "content"), r, into);
		if (rc == -EINVAL)
			snprintf(err, errlen, "'messages.%zu.content' must be a string or an array of content parts", i);
		if (rc < 0)
			break;
	}
	if (rc < 0) {
		free(sys.s);
		free(last.s);
		return rc;
	}
	json_t *tools = json_object_get(body, "tools");
	json_t *fns = json_object_get(body, "functions");
	if ((tools && !json_is_array(tools) && !json_is_null(tools)) ||
	    (fns && !json_is_array(fns) && !json_is_null(fns))) {
		free(sys.s);
		free(last.s);
		snprintf(err, errlen, "'tools' must be an array");
		return -EINVAL;
	}
	if (json_array_size(tools) || json_array_size(fns))
		r->tools = true;
	r->system = sys.s ? sys.s : strdup("");
	r->last_user = last.s ? last.s : strdup("");
	return r->system && r->last_user ? 0 : -ENOMEM;
}

static int parse_completion(json_t *body, struct req_info *r, char *err, size_t errlen)
{
	json_t *prompt = json_object_get(body, "prompt");
	struct buf b = {0};
	if (json_is_string(prompt)) {
		r->chars = utf8_len(json_string_value(prompt), json_string_length(prompt));
		if (buf_add(&b, json_string_value(prompt), json_string_length(prompt)) < 0)
			return -ENOMEM;
	} else if (json_is_array(prompt) && json_array_size(prompt) > 0) {
		size_t i;
		json_t *e;
		json_array_foreach(prompt, i, e) {
			if (json_is_string(e)) {
				r->chars += utf8_len(json_string_value(e), json_string_length(e));
				if (buf_add(&b, json_string_value(e), json_string_length(e)) < 0) {
					free(b.s);
					return -ENOMEM;
				}
			} else if (json_is_integer(e)) {
				r->chars += 4; /* a token id: about one token */
			} else if (json_is_array(e)) {
				r->chars += 4 * (long long)json_array_size(e);
			} else {
				free(b.s);
				snprintf(err, errlen, "'prompt' must be a string, an array of strings or of token ids");
				return -EINVAL;
			}
		}
	} else {
		snprintf(err, errlen, "'prompt' must be a string, an array of strings or of token ids");
		return -EINVAL;
	}
	r->last_user = b.s ? b.s : strdup("");
	r->system = strdup("");
	return r->system && r->last_user ? 0 : -ENOMEM;
}

int req_parse(const char *text, size_t len, enum req_kind kind, struct req_info *out,
	      json_t **body, char *err, size_t errlen)
{
	memset(out, 0, sizeof *out);
	*body = NULL;
	json_error_t je;
	json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!j) {
		snprintf(err, errlen, "the request body is not valid JSON: %s (at byte %d)", je.text,
			 je.position);
		return -EINVAL;
	}
	if (!json_is_object(j)) {
		json_decref(j);
		snprintf(err, errlen, "the request body must be a JSON object");
		return -EINVAL;
	}
	out->kind = kind;
	json_t *model = json_object_get(j, "model");
	if (!json_is_string(model) || json_string_length(model) == 0 ||
	    json_string_length(model) > 256) {
		json_decref(j);
		snprintf(err, errlen, "'model' must be a string of 1-256 characters");
		return -EINVAL;
	}
	out->model = json_string_value(model);
	json_t *st = json_object_get(j, "stream");
	if (st && !json_is_boolean(st) && !json_is_null(st)) {
		json_decref(j);
		snprintf(err, errlen, "'stream' must be a boolean");
		return -EINVAL;
	}
	out->stream = json_is_true(st);
	int r = kind == REQ_CHAT ? parse_chat(j, out, err, errlen)
				 : parse_completion(j, out, err, errlen);
	if (r < 0) {
		if (r == -ENOMEM)
			snprintf(err, errlen, "out of memory");
		req_info_free(out);
		json_decref(j);
		return r;
	}
	out->tokens = (out->chars + 3) / 4;
	*body = j;
	return 0;
}

void req_info_free(struct req_info *r)
{
	free(r->last_user);
	free(r->system);
	r->last_user = r->system = NULL;
}

uint64_t decide_rand(uint64_t *state)
{
	uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

/* Keywords, then the regular expression (bounded: rx.h), over one text. A
 * regex that hits a limit does not match; *limited counts those. */
static bool text_match(const struct cond *c, const char *text, int *limited)
{
	if (c->n_keywords) {
		bool any = false;
		for (size_t i = 0; i < c->n_keywords && !any; i++)
			any = strcasestr(text, c->keywords[i]) != NULL;
		if (!any)
			return false;
	}
	if (!c->has_regex)
		return true;
	int m = rx_match(c->regex, text, strlen(text));
	if (m < 0 && limited)
		(*limited)++;
	return m == 1;
}

static bool cond_holds(const struct cond *c, const struct req_info *r, header_fn hdr, void *hctx,
		       int *limited)
{
	if (c->min_tokens >= 0 && r->tokens < c->min_tokens)
		return false;
	if (c->max_tokens >= 0 && r->tokens > c->max_tokens)
		return false;
	if (c->min_chars >= 0 && r->chars < c->min_chars)
		return false;
	if (c->max_chars >= 0 && r->chars > c->max_chars)
		return false;
	if (c->tools >= 0 && r->tools != (c->tools == 1))
		return false;
	if (c->images >= 0 && r->images != (c->images == 1))
		return false;
	if (c->n_models) {
		bool any = false;
		for (size_t i = 0; i < c->n_models && !any; i++)
			any = r->model && !strcmp(r->model, c->models[i]);
		if (!any)
			return false;
	}
	if (c->header_name) {
		const char *v = hdr ? hdr(hctx, c->header_name) : NULL;
		if (!v || (c->header_value && strcmp(v, c->header_value)))
			return false;
	}
	if (c->n_keywords || c->has_regex) {
		const char *a = r->last_user ? r->last_user : "";
		const char *s = r->system ? r->system : "";
		switch (c->scope) {
		case SCOPE_LAST_USER:
			return text_match(c, a, limited);
		case SCOPE_SYSTEM:
			return text_match(c, s, limited);
		case SCOPE_ANY:
			return text_match(c, a, limited) || text_match(c, s, limited);
		}
	}
	return true;
}

bool cond_match(const struct cond *c, const struct req_info *r, header_fn hdr, void *hctx)
{
	return cond_holds(c, r, hdr, hctx, NULL);
}

bool route_has_regex(const struct route *rt)
{
	if (!rt || rt->type != ROUTE_RULES)
		return false;
	for (size_t i = 0; i < rt->n_rules; i++)
		if (rt->rules[i].when.has_regex)
			return true;
	return false;
}

static void chain_add(struct decision *d, int t)
{
	for (size_t i = 0; i < d->n_chain; i++)
		if (d->chain[i] == t)
			return;
	if (d->n_chain < DECISION_MAX_CHAIN)
		d->chain[d->n_chain++] = t;
}

int route_decide(const struct policy *p, const struct req_info *r, header_fn hdr, void *hctx,
		 uint64_t *rng, struct decision *d)
{
	return route_decide_live(p, r, hdr, hctx, rng, NULL, d);
}

/* Weight of entry i of a weighted route: 0 for a service target that is not
 * usable now (when svcs is given and some entry is usable). */
static int live_weight(const struct policy *p, const struct route *rt, size_t i,
		       const struct svc_table *svcs)
{
	if (!svcs || p->targets[rt->wtargets[i]].kind != TARGET_SERVICE)
		return rt->weights[i];
	struct resolved rv;
	target_resolve(p, rt->wtargets[i], svcs, &rv);
	return rv.usable ? rt->weights[i] : 0;
}

int route_decide_live(const struct policy *p, const struct req_info *r, header_fn hdr, void *hctx,
		      uint64_t *rng, const struct svc_table *svcs, struct decision *d)
{
	memset(d, 0, sizeof *d);
	const struct route *rt = policy_route(p, r->model);
	bool by_default = false;
	if (!rt && p->default_route) {
		rt = policy_route(p, p->default_route);
		by_default = true;
	}
	if (!rt)
		return -ENOENT;
	d->route = rt;
	switch (rt->type) {
	case ROUTE_PASSTHROUGH:
		d->target = rt->target;
		snprintf(d->rule, sizeof d->rule, "passthrough");
		snprintf(d->reason, sizeof d->reason, "route %s passes everything to %s", rt->name,
			 p->targets[rt->target].name);
		break;
	case ROUTE_WEIGHTED: {
		/* service targets that are not usable take no share (unless none is usable) */
		int w[POLICY_MAX_LIST];
		long long sum = 0;
		for (size_t i = 0; i < rt->n_wtargets; i++)
			sum += (w[i] = live_weight(p, rt, i, svcs));
		bool live = svcs && sum > 0;
		if (!live) {
			sum = 0;
			for (size_t i = 0; i < rt->n_wtargets; i++)
				sum += (w[i] = rt->weights[i]);
		}
		uint64_t x = decide_rand(rng) % (uint64_t)sum;
		size_t i = 0;
		for (; i + 1 < rt->n_wtargets; i++) {
			if (x < (uint64_t)w[i])
				break;
			x -= (uint64_t)w[i];
		}
		d->target = rt->wtargets[i];
		snprintf(d->rule, sizeof d->rule, "weighted");
		bool skipped = false;
		for (size_t k = 0; live && k < rt->n_wtargets; k++)
			skipped |= w[k] != rt->weights[k];
		snprintf(d->reason, sizeof d->reason, "weighted draw: %s has weight %d of %lld%s",
			 p->targets[d->target].name, w[i], sum,
			 skipped ? " (service targets that are not ready take no share)" : "");
		break;
	}
	case ROUTE_CLASSIFIER:
		d->target = rt->target;
		d->pending = true;
		snprintf(d->rule, sizeof d->rule, "classifier");
		snprintf(d->reason, sizeof d->reason, "waiting for the classifier %s",
			 p->targets[rt->judge].name);
		break;
	case ROUTE_RULES: {
		size_t i;
		for (i = 0; i < rt->n_rules; i++) {
			int limited = 0;
			bool m = cond_holds(&rt->rules[i].when, r, hdr, hctx, &limited);
			if (limited && !d->regex_limited++)
				util_strlcpy(d->regex_limited_rule, rt->rules[i].name,
					     sizeof d->regex_limited_rule);
			if (m)
				break;
		}
		if (i < rt->n_rules) {
			d->target = rt->rules[i].target;
			snprintf(d->rule, sizeof d->rule, "%s", rt->rules[i].name);
			snprintf(d->reason, sizeof d->reason,
				 "rule %s (number %zu) is the first that matches (%lld tokens, %lld characters%s%s)",
				 rt->rules[i].name, i + 1, r->tokens, r->chars, r->tools ? ", tools" : "",
				 r->images ? ", images" : "");
		} else {
			d->target = rt->target;
			snprintf(d->rule, sizeof d->rule, "default");
			snprintf(d->reason, sizeof d->reason,
				 "none of the %zu rules matches (%lld tokens, %lld characters%s%s)",
				 rt->n_rules, r->tokens, r->chars, r->tools ? ", tools" : "",
				 r->images ? ", images" : "");
		}
		break;
	}
	}
	if (by_default) {
		size_t n = strlen(d->reason);
		snprintf(d->reason + n, sizeof d->reason - n, "; model \"%.64s\" has no route, so default_route %s",
			 r->model, rt->name);
	}
	chain_add(d, d->target);
	for (size_t i = 0; i < rt->n_fallbacks; i++)
		chain_add(d, rt->fallbacks[i]);
	return 0;
}

void target_resolve(const struct policy *p, int t, const struct svc_table *svcs,
		    struct resolved *out)
{
	const struct target *tg = &p->targets[t];
	memset(out, 0, sizeof *out);
	out->model = tg->model;
	out->max_context = tg->max_context;
	if (tg->kind == TARGET_URL) {
		out->usable = true;
		out->state = "url";
		util_strlcpy(out->base, tg->url, sizeof out->base);
		return;
	}
	const struct svc_info *sv = svcs ? svc_find(svcs, tg->service) : NULL;
	out->state = sv ? sv->state : svcs && svcs->connected ? "absent" : "disconnected";
	if (!sv)
		return;
	out->owner = sv->owner;
	if (!policy_owner_ok(tg, sv->owner)) { /* someone else's service of that name */
		out->state = "other_owner";
		return;
	}
	if (sv->max_context)
		out->max_context = sv->max_context;
	if (!tg->model)
		out->model = sv->n_models ? sv->models[0] : sv->model[0] ? sv->model : NULL;
	out->usable = svc_usable(sv, tg->management) &&
		      svc_base_url(sv, tg->management, out->base, sizeof out->base);
}

const struct svc_info *target_service(const struct target *tg, const struct svc_table *svcs)
{
	const struct svc_info *sv = svcs && tg->kind == TARGET_SERVICE ? svc_find(svcs, tg->service) : NULL;
	return sv && policy_owner_ok(tg, sv->owner) ? sv : NULL;
}

json_t *decision_json(const struct policy *p, const struct decision *d,
		      const struct svc_table *svcs)
{
	const struct target *t = &p->targets[d->target];
	struct resolved rv;
	target_resolve(p, d->target, svcs, &rv);
	json_t *fb = json_array();
	for (size_t i = 1; i < d->n_chain; i++)
		json_array_append_new(fb, json_string(p->targets[d->chain[i]].name));
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:o, s:b}", "route", d->route->name,
			      "route_type", route_type_name(d->route->type), "target", t->name,
			      "target_kind", t->kind == TARGET_URL ? "url" : "service", "rule", d->rule,
			      "reason", d->reason, "fallbacks", fb, "resolvable", rv.usable);
	if (d->route->type == ROUTE_CLASSIFIER)
		json_object_set_new(o, "classifier", json_string(p->targets[d->route->judge].name));
	if (rv.max_context)
		json_object_set_new(o, "max_context", json_integer(rv.max_context));
	if (t->kind != TARGET_SERVICE)
		return o;
	json_object_set_new(o, "service", json_string(t->service));
	json_object_set_new(o, "owner", json_string(t->owner ? t->owner : "*"));
	if (rv.owner)
		json_object_set_new(o, "service_owner", json_string(rv.owner));
	json_object_set_new(o, "state", json_string(rv.state));
	json_object_set_new(o, "network", json_string(t->management ? "management" : "fabric"));
	if (svcs && svcs->stale)
		json_object_set_new(o, "snapshot", json_string("stale"));
	if (rv.usable) {
		json_object_set_new(o, "url", json_string(rv.base));
		if (svcs && svcs->stale)
			json_object_set_new(o, "note", json_string(
				"spark-router lost sparkd's stream (see its log: sparkd_watch_lost) and routes "
				"by the last snapshot until sparkd is back or services_grace_s passes"));
		return o;
	}
	char note[300];
	if (!strcmp(rv.state, "disconnected"))
		snprintf(note, sizeof note,
			 "spark-router has no snapshot of the cluster's services from sparkd (see its "
			 "log: sparkd_watch_lost); requests to this target go to the route's fallbacks");
	else if (!strcmp(rv.state, "other_owner"))
		snprintf(note, sizeof note,
			 "service %s belongs to %s, not %s (the target's owner:): spark-router does not "
			 "follow it; requests to this target go to the route's fallbacks",
			 t->service, rv.owner && *rv.owner ? rv.owner : "an unknown user", t->owner);
	else if (!strcmp(rv.state, "absent"))
		snprintf(note, sizeof note,
			 "the cluster has no service %s; requests to this target go to the route's fallbacks",
			 t->service);
	else if (!strcmp(rv.state, "ready"))
		snprintf(note, sizeof note,
			 "service %s is ready but has no %s endpoint; requests to this target go to the route's fallbacks",
			 t->service, t->management ? "management" : "fabric");
	else
		snprintf(note, sizeof note,
			 "service %s is %s, not ready; requests to this target go to the route's fallbacks",
			 t->service, rv.state);
	json_object_set_new(o, "note", json_string(note));
	return o;
}

/* Append s (at most max bytes, cut at a UTF-8 boundary) to b. */
static int add_capped(struct buf *b, const char *s, size_t max)
{
	size_t n = strlen(s);
	if (n > max) {
		n = max;
		while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
			n--;
	}
	return buf_raw(b, s, n);
}

char *classifier_body(const struct policy *p, const struct route *rt, const struct req_info *r)
{
	struct buf b = {0};
	char names[POLICY_MAX_LIST * (POLICY_NAME_MAX + 2)] = "";
	size_t w = 0;
	if (rt->answer == ANSWER_TARGET) {
		for (size_t i = 0; i < rt->n_wtargets; i++)
			w += snprintf(names + w, sizeof names - w, "%s%s", i ? ", " : "",
				      p->targets[rt->wtargets[i]].name);
	} else {
		snprintf(names, sizeof names, "%s, %s", p->targets[rt->weak].name,
			 p->targets[rt->strong].name);
	}
	const char *t = rt->prompt;
	int rc = 0;
	while (*t && rc == 0) {
		const char *open = strstr(t, "{{");
		if (!open) {
			rc = add_capped(&b, t, SIZE_MAX);
			break;
		}
		rc = buf_raw(&b, t, (size_t)(open - t));
		if (!strncmp(open, "{{message}}", 11)) {
			rc = rc ? rc : add_capped(&b, r->last_user ? r->last_user : "", 8000);
			t = open + 11;
		} else if (!strncmp(open, "{{system}}", 10)) {
			rc = rc ? rc : add_capped(&b, r->system ? r->system : "", 4000);
			t = open + 10;
		} else if (!strncmp(open, "{{targets}}", 11)) {
			rc = rc ? rc : add_capped(&b, names, SIZE_MAX);
			t = open + 11;
		} else {
			rc = rc ? rc : add_capped(&b, "{{", 2);
			t = open + 2;
		}
	}
	if (rc < 0) {
		free(b.s);
		return NULL;
	}
	const struct target *j = &p->targets[rt->judge];
	json_t *o = json_pack("{s:s, s:[{s:s, s:s}], s:i, s:i, s:b}", "model",
			      j->model ? j->model : "classifier", "messages", "role", "user", "content",
			      b.s ? b.s : "", "temperature", 0, "max_tokens", rt->judge_max_tokens,
			      "stream", 0);
	free(b.s);
	char *out = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	return out;
}

static void settle(const struct policy *p, struct decision *d, int t, const char *rule)
{
	const struct route *rt = d->route;
	d->pending = false;
	d->target = t;
	snprintf(d->rule, sizeof d->rule, "%s", rule);
	d->n_chain = 0;
	chain_add(d, t);
	for (size_t i = 0; i < rt->n_fallbacks; i++)
		chain_add(d, rt->fallbacks[i]);
	(void)p;
}

static int pick_default(const struct policy *p, struct decision *d, const char *why)
{
	settle(p, d, d->route->target, "classifier_default");
	snprintf(d->reason, sizeof d->reason, "%s, so the default %s", why,
		 p->targets[d->target].name);
	return -EINVAL;
}

int classifier_pick(const struct policy *p, const char *body, size_t len, long status,
		    const char *why, struct decision *d)
{
	const struct route *rt = d->route;
	const char *judge = p->targets[rt->judge].name;
	char m[200];
	if (!body) {
		snprintf(m, sizeof m, "the classifier %s failed (%s)", judge, why ? why : "error");
		return pick_default(p, d, m);
	}
	if (status != 200) {
		snprintf(m, sizeof m, "the classifier %s answered HTTP %ld", judge, status);
		return pick_default(p, d, m);
	}
	json_t *j = json_loadb(body, len, 0, NULL);
	json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
	const char *content =
		json_string_value(json_object_get(json_object_get(ch, "message"), "content"));
	if (!content) {
		json_decref(j);
		snprintf(m, sizeof m, "the classifier %s's answer is not a chat completion with content", judge);
		return pick_default(p, d, m);
	}
	/* the JSON object in the content, also when fenced or wrapped in words */
	const char *a = strchr(content, '{'), *z = strrchr(content, '}');
	json_t *v = a && z && z > a ? json_loadb(a, (size_t)(z - a + 1), 0, NULL) : NULL;
	json_decref(j);
	int rc;
	if (rt->answer == ANSWER_TARGET) {
		const char *name = json_string_value(json_object_get(v, "target"));
		int t = name ? policy_target_index(p, name) : -1;
		bool cand = false;
		for (size_t i = 0; t >= 0 && i < rt->n_wtargets; i++)
			cand |= rt->wtargets[i] == t;
		if (!cand) {
			snprintf(m, sizeof m, "the classifier %s's answer names no candidate target", judge);
			rc = pick_default(p, d, m);
		} else {
			settle(p, d, t, "classifier");
			snprintf(d->reason, sizeof d->reason, "the classifier %s chose %s", judge, name);
			rc = 0;
		}
	} else {
		json_t *ps = json_object_get(v, "p_solve");
		double x = json_is_number(ps) ? json_number_value(ps) : -1;
		if (!(x >= 0 && x <= 1)) {
			snprintf(m, sizeof m, "the classifier %s's answer has no p_solve from 0 to 1", judge);
			rc = pick_default(p, d, m);
		} else {
			int t = x >= rt->threshold ? rt->weak : rt->strong;
			settle(p, d, t, "classifier");
			snprintf(d->reason, sizeof d->reason, "the classifier %s gave p_solve %.3g %s %.3g, so %s",
				 judge, x, x >= rt->threshold ? ">=" : "<", rt->threshold, p->targets[t].name);
			rc = 0;
		}
	}
	json_decref(v);
	return rc;
}

bool is_context_error(const char *body, size_t len)
{
	static const char *const pats[] = {"context length", "context_length", "maximum context",
					   "context window", "exceeds the context",
					   "prompt is too long", "too many tokens", NULL};
	char buf[4096];
	size_t n = len < sizeof buf - 1 ? len : sizeof buf - 1;
	memcpy(buf, body, n);
	buf[n] = 0;
	for (size_t i = 0; i < n; i++)
		if (!buf[i])
			buf[i] = ' ';
	for (size_t i = 0; pats[i]; i++)
		if (strcasestr(buf, pats[i]))
			return true;
	return false;
}

static const char *skip_ws(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
		p++;
	return p;
}

/* The object after the last "usage": when it closes the top-level object
 * (one '}' and blanks after it), else NULL. In JSON a "usage" whose first
 * quote is not escaped, followed by ':', is always a key named usage, never
 * text inside a string. */
static json_t *usage_at_end(const char *text, size_t len)
{
	const char *end = text + len, *k = NULL;
	for (const char *p = text; p < end;) {
		const char *q = memmem(p, (size_t)(end - p), "\"usage\"", 7);
		if (!q)
			break;
		k = q;
		p = q + 1;
	}
	size_t bs = 0; /* an escaped quote ("a\\"usage": ...) is inside a key */
	while (k && k - bs > text && k[-1 - (ptrdiff_t)bs] == '\\')
		bs++;
	if (!k || bs % 2)
		return NULL;
	const char *p = skip_ws(k + 7, end);
	if (p == end || *p != ':')
		return NULL;
	p = skip_ws(p + 1, end);
	if (p == end || *p != '{')
		return NULL;
	json_error_t e;
	json_t *u = json_loadb(p, (size_t)(end - p), JSON_DISABLE_EOF_CHECK, &e);
	if (!u)
		return NULL;
	const char *q = skip_ws(p + e.position, end);
	if (q < end && *q == '}')
		q = skip_ws(q + 1, end);
	if (q != end || p + e.position == end) {
		json_decref(u);
		return NULL;
	}
	return u;
}

static long long token_count(json_t *u, const char *key)
{
	json_int_t v = json_integer_value(json_object_get(u, key));
	return v > 0 && v < (1LL << 40) ? (long long)v : 0;
}

int usage_read(const char *text, size_t len, long long *prompt, long long *completion)
{
	int rc = -ENOENT;
	json_t *whole = NULL, *u = usage_at_end(text, len);
	json_t *obj = u;
	if (!u) {
		whole = json_loadb(text, len, 0, NULL);
		obj = json_object_get(whole, "usage");
	}
	if (json_is_object(obj)) {
		*prompt = token_count(obj, "prompt_tokens");
		*completion = token_count(obj, "completion_tokens");
		rc = 0;
	}
	json_decref(u);
	json_decref(whole);
	return rc;
}

void decision_pin(const struct policy *p, const struct route *rt, int t, struct decision *d)
{
	memset(d, 0, sizeof *d);
	d->route = rt;
	settle(p, d, t, "session");
	snprintf(d->reason, sizeof d->reason, "the conversation started on %s and stays there",
		 p->targets[t].name);
}

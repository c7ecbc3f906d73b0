#include "services.h"

#include "proto.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool word_ok(const char *s, size_t max, const char *extra)
{
	size_t n = strlen(s);
	if (n == 0 || n >= max)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (!(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') && !(c >= '0' && c <= '9') &&
		    !strchr(extra, c))
			return false;
	}
	return true;
}

/* http://HOST:PORT with no path, spaces or control characters. */
static bool url_ok(const char *u)
{
	return strlen(u) < SVC_URL_MAX - 8 && util_http_url(u, false) && !strpbrk(u, "?#");
}

/* A string field that is absent or null: "" (ok); else it must pass check. */
static int opt_str(const json_t *o, const char *key, char *out, size_t len,
		   bool (*check)(const char *))
{
	json_t *v = json_object_get(o, key);
	out[0] = 0;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v) || (check && !check(json_string_value(v))) ||
	    strlen(json_string_value(v)) >= len)
		return -1;
	util_strlcpy(out, json_string_value(v), len);
	return 0;
}

static bool printable(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < ' ' || *s == 0x7f)
			return false;
	return true;
}

/* One service record into s; false when it breaks the contract. */
static bool read_service(const json_t *o, struct svc_info *s)
{
	memset(s, 0, sizeof *s);
	const char *name = proto_str(o, "name"), *state = proto_str(o, "state");
	if (!json_is_object(o) || !name || !state || !word_ok(name, SVC_NAME_MAX, "-_.:/") ||
	    !word_ok(state, sizeof s->state, "_"))
		return false;
	util_strlcpy(s->name, name, sizeof s->name);
	util_strlcpy(s->state, state, sizeof s->state);
	if (opt_str(o, "group", s->group, sizeof s->group, printable) < 0 ||
	    opt_str(o, "owner", s->owner, sizeof s->owner, printable) < 0 ||
	    opt_str(o, "model", s->model, sizeof s->model, printable) < 0)
		return false;
	json_t *mc = json_object_get(o, "max_context");
	if (mc && !json_is_null(mc)) {
		if (!json_is_integer(mc) || json_integer_value(mc) < 0 ||
		    json_integer_value(mc) > (1LL << 40))
			return false;
		s->max_context = json_integer_value(mc);
	}
	json_t *ep = json_object_get(o, "endpoint");
	if (!ep || json_is_null(ep))
		return true;
	if (!json_is_object(ep) || opt_str(ep, "url", s->url, sizeof s->url, url_ok) < 0 ||
	    opt_str(ep, "management_url", s->mgmt_url, sizeof s->mgmt_url, url_ok) < 0)
		return false;
	json_t *ms = json_object_get(ep, "models");
	if (ms && !json_is_null(ms)) {
		if (!json_is_array(ms))
			return false;
		size_t i;
		json_t *m;
		json_array_foreach(ms, i, m) {
			const char *id = json_string_value(m);
			if (!id || !*id || strlen(id) >= SVC_URL_MAX || !printable(id))
				return false;
			if (s->n_models < SVC_MAX_MODELS)
				util_strlcpy(s->models[s->n_models++], id, SVC_URL_MAX);
		}
	}
	return true;
}

int svc_frame(const json_t *msg, struct svc_table *out, char *err, size_t errlen)
{
	const char *type = proto_type(msg);
	if (type && (!strcmp(type, "error") || !strcmp(type, "result"))) {
		const char *code = proto_str(msg, "code"), *m = proto_str(msg, "message");
		snprintf(err, errlen, "%s%s%s%s", !strcmp(type, "result") ? "the stream ended" : "sparkd answered ",
			 code ? code : "", m ? ": " : "", m ? m : "");
		return -ECONNABORTED;
	}
	if (!type || strcmp(type, "stream")) {
		snprintf(err, errlen, "unexpected frame type %.40s", type ? type : "(none)");
		return -EBADMSG;
	}
	json_t *svcs = json_object_get(json_object_get(msg, "data"), "services");
	if (!json_is_array(svcs)) {
		snprintf(err, errlen, "a stream frame without data.services");
		return -EBADMSG;
	}
	size_t n = json_array_size(svcs);
	if (n > SVC_MAX) {
		snprintf(err, errlen, "%zu services in one snapshot (at most %d)", n, SVC_MAX);
		return -EBADMSG;
	}
	struct svc_info *v = n ? calloc(n, sizeof *v) : NULL;
	if (n && !v) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (!read_service(json_array_get(svcs, i), &v[k])) {
			snprintf(err, errlen, "service record %zu breaks the svc_watch contract", i);
			free(v);
			return -EBADMSG;
		}
		if (!svc_find(&(struct svc_table){.n = k, .v = v}, v[k].name))
			k++; /* a repeated name: the first record counts */
	}
	free(out->v);
	out->v = v;
	out->n = k;
	out->connected = true;
	out->stale = false;
	return 1;
}

void svc_table_clear(struct svc_table *t)
{
	free(t->v);
	t->v = NULL;
	t->n = 0;
	t->connected = false;
	t->stale = false;
}

const struct svc_info *svc_find(const struct svc_table *t, const char *name)
{
	for (size_t i = 0; t && i < t->n; i++)
		if (!strcmp(t->v[i].name, name))
			return &t->v[i];
	return NULL;
}

bool svc_usable(const struct svc_info *s, bool management)
{
	return s && !strcmp(s->state, "ready") && (management ? s->mgmt_url[0] : s->url[0]);
}

bool svc_base_url(const struct svc_info *s, bool management, char *buf, size_t len)
{
	const char *u = management ? s->mgmt_url : s->url;
	if (!*u)
		return false;
	size_t n = strlen(u);
	while (n && u[n - 1] == '/')
		n--;
	return (size_t)snprintf(buf, len, "%.*s/v1", (int)n, u) < len;
}

bool svc_has_model(const struct svc_info *s, const char *id)
{
	for (size_t i = 0; i < s->n_models; i++)
		if (!strcmp(s->models[i], id))
			return true;
	return false;
}

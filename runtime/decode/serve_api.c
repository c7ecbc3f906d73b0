/* serve_api.c - the OpenAI-compatible request parser and answer writers.
 *
 * A request body is one JSON object. Known fields are checked for type and
 * range; a wrong one is a 400 naming it (`param`), never a default. Unknown
 * fields are ignored (OpenAI clients send more than a server may use). */
#include "serve.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void serve_set_error(serve_err_t *e, int status, const char *type, const char *code,
                     const char *param, const char *fmt, ...)
{
	va_list ap;
	e->status = status;
	snprintf(e->type, sizeof(e->type), "%s", type);
	snprintf(e->code, sizeof(e->code), "%s", code ? code : "");
	snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
}

#define BAD(param, ...)                                                                     \
	(serve_set_error(e, 400, "invalid_request_error", "invalid_value", param, __VA_ARGS__), \
	 -EINVAL)

static int is_null(const json_t *v)
{
	return !v || json_is_null(v);
}

static int get_bool(const json_t *o, const char *k, int *out, serve_err_t *e)
{
	const json_t *v = json_object_get(o, k);
	if (is_null(v))
		return 0;
	if (!json_is_boolean(v))
		return BAD(k, "'%s' must be true or false", k);
	*out = json_is_true(v);
	return 0;
}

/* text (the byte-level stand-in) -> prompt ids */
static int text_prompt(const char *s, size_t n, const serve_limits_t *lim, serve_req_t *r,
                       const char *param, serve_err_t *e)
{
	if (lim->tok == SERVE_TOK_NONE)
		return BAD(param, "this model has no tokenizer spark-decode supports: send the prompt "
		                  "as an array of token ids");
	if (n == 0)
		return BAD(param, "the prompt is empty");
	if (n > (size_t)lim->max_context)
		return serve_set_error(e, 400, "invalid_request_error", "context_length_exceeded", param,
		                       "the prompt is %zu tokens; this server's context is %d", n,
		                       lim->max_context),
		       -EINVAL;
	if (!(r->prompt = malloc(sizeof(int) * n)))
		return serve_set_error(e, 500, "server_error", NULL, NULL, "out of memory"), -ENOMEM;
	serve_tok_encode((const unsigned char *)s, n, lim->vocab, r->prompt);
	r->n_prompt = (int)n;
	return 0;
}

static int id_prompt(const json_t *a, const serve_limits_t *lim, serve_req_t *r, serve_err_t *e)
{
	size_t n = json_array_size(a), i;
	json_t *v;
	if (n > (size_t)lim->max_context)
		return serve_set_error(e, 400, "invalid_request_error", "context_length_exceeded",
		                       "prompt", "the prompt is %zu tokens; this server's context is %d",
		                       n, lim->max_context),
		       -EINVAL;
	if (!(r->prompt = malloc(sizeof(int) * (n ? n : 1))))
		return serve_set_error(e, 500, "server_error", NULL, NULL, "out of memory"), -ENOMEM;
	json_array_foreach(a, i, v) {
		json_int_t t = json_integer_value(v);
		if (!json_is_integer(v) || t < 0 || t >= lim->vocab)
			return BAD("prompt", "prompt token %zu must be an integer id from 0 to %d", i,
			           lim->vocab - 1);
		r->prompt[i] = (int)t;
	}
	r->n_prompt = (int)n;
	return 0;
}

static int parse_prompt(const json_t *p, const serve_limits_t *lim, serve_req_t *r,
                        serve_err_t *e)
{
	if (is_null(p))
		return BAD("prompt", "'prompt' is required");
	if (json_is_string(p))
		return text_prompt(json_string_value(p), json_string_length(p), lim, r, "prompt", e);
	if (!json_is_array(p) || json_array_size(p) == 0)
		return BAD("prompt", "'prompt' must be a string or a non-empty array of token ids");
	if (json_is_integer(json_array_get(p, 0)))
		return id_prompt(p, lim, r, e);
	/* a batch: one string or one array of ids is served, more are not */
	if (json_array_size(p) != 1)
		return BAD("prompt", "batched prompts are not supported: send one prompt per request");
	p = json_array_get(p, 0);
	if (json_is_string(p))
		return text_prompt(json_string_value(p), json_string_length(p), lim, r, "prompt", e);
	if (json_is_array(p) && json_array_size(p) > 0)
		return id_prompt(p, lim, r, e);
	return BAD("prompt", "'prompt' must be a string or a non-empty array of token ids");
}

static int parse_messages(const json_t *msgs, const serve_limits_t *lim, serve_req_t *r,
                          serve_err_t *e)
{
	static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
	char *buf = NULL;
	size_t len = 0, cap = 0, i;
	json_t *m;
	int rc = 0;

	if (!json_is_array(msgs) || json_array_size(msgs) == 0)
		return BAD("messages", "'messages' must be a non-empty array of messages");
	json_array_foreach(msgs, i, m) {
		const char *role = json_string_value(json_object_get(m, "role"));
		const json_t *c = json_object_get(m, "content");
		size_t k;
		int known = 0;
		if (!json_is_object(m))
			rc = BAD("messages", "messages[%zu] must be an object", i);
		else if (!role)
			rc = BAD("messages", "messages[%zu].role must be a string", i);
		for (k = 0; rc == 0 && k < sizeof(roles) / sizeof(roles[0]); k++)
			known |= strcmp(role, roles[k]) == 0;
		if (rc == 0 && !known)
			rc = BAD("messages", "messages[%zu].role must be system, developer, user, "
			                     "assistant or tool", i);
		if (rc < 0)
			break;
		if (is_null(c)) {
			rc = serve_chat_append(&buf, &len, &cap, role, "", 0);
		} else if (json_is_string(c)) {
			rc = serve_chat_append(&buf, &len, &cap, role, json_string_value(c),
			                       json_string_length(c));
		} else if (json_is_array(c)) {
			/* content parts: only text parts are served, joined in order */
			size_t j;
			json_t *part;
			char *joined = NULL;
			size_t jl = 0, jc = 0;
			json_array_foreach(c, j, part) {
				const json_t *t = json_object_get(part, "text");
				const char *type = json_string_value(json_object_get(part, "type"));
				if (!type || strcmp(type, "text") != 0 || !json_is_string(t)) {
					rc = BAD("messages", "messages[%zu].content[%zu]: only text parts "
					                     "({\"type\":\"text\",\"text\":...}) are supported", i, j);
					break;
				}
				if ((rc = serve_buf_append(&joined, &jl, &jc, json_string_value(t),
				                           json_string_length(t))) < 0)
					break;
			}
			if (rc == 0)
				rc = serve_chat_append(&buf, &len, &cap, role, joined ? joined : "", jl);
			free(joined);
		} else {
			rc = BAD("messages", "messages[%zu].content must be a string or an array of "
			                     "text parts", i);
		}
		if (rc < 0)
			break;
	}
	if (rc == 0 && (rc = serve_chat_append(&buf, &len, &cap, NULL, NULL, 0)) == 0)
		rc = text_prompt(buf, len, lim, r, "messages", e);
	else if (rc == -ENOMEM)
		serve_set_error(e, 500, "server_error", NULL, NULL, "out of memory");
	free(buf);
	return rc;
}

static int parse_fields(serve_kind_t kind, const json_t *j, const serve_limits_t *lim,
                        serve_req_t *r, serve_err_t *e)
{
	const json_t *v;
	const char *mt_key = "max_tokens";
	int rc, have_max = 0;

	v = json_object_get(j, "model");
	if (!is_null(v) && !json_is_string(v))
		return BAD("model", "'model' must be a string");
	if (json_is_string(v) && strcmp(json_string_value(v), lim->model_id) != 0)
		return serve_set_error(e, 404, "invalid_request_error", "model_not_found", "model",
		                       "the model '%s' does not exist: this server serves '%s'",
		                       json_string_value(v), lim->model_id),
		       -ENOENT;
	if ((rc = get_bool(j, "stream", &r->stream, e)) < 0)
		return rc;
	v = json_object_get(j, "stream_options");
	if (!is_null(v)) {
		if (!json_is_object(v))
			return BAD("stream_options", "'stream_options' must be an object");
		if ((rc = get_bool(v, "include_usage", &r->include_usage, e)) < 0)
			return rc;
	}
	v = json_object_get(j, "n");
	if (!is_null(v) && (!json_is_integer(v) || json_integer_value(v) != 1))
		return BAD("n", "only n = 1 is supported");
	v = json_object_get(j, "temperature");
	if (!is_null(v)) {
		double t = json_number_value(v);
		if (!json_is_number(v) || !(t >= 0 && t <= 2))
			return BAD("temperature", "'temperature' must be a number from 0 to 2");
		r->temperature = t;
	}
	v = json_object_get(j, "top_p");
	if (!is_null(v)) {
		double p = json_number_value(v);
		if (!json_is_number(v) || !(p > 0 && p <= 1))
			return BAD("top_p", "'top_p' must be a number above 0, at most 1");
		if (p < 1)
			return BAD("top_p", "top_p below 1 is not supported by spark-decode "
			                    "(it samples from the whole distribution)");
	}
	v = json_object_get(j, "seed");
	if (!is_null(v)) {
		if (!json_is_integer(v))
			return BAD("seed", "'seed' must be an integer");
		r->has_seed = 1;
		r->seed = (uint64_t)json_integer_value(v);
	}
	v = json_object_get(j, "stop");
	if (!is_null(v) && !(json_is_array(v) && json_array_size(v) == 0))
		return BAD("stop", "stop sequences are not supported by spark-decode (it stops at "
		                   "the end-of-sequence id or max_tokens)");
	if (kind == SERVE_CHAT && !is_null(json_object_get(j, "max_completion_tokens")))
		mt_key = "max_completion_tokens";
	v = json_object_get(j, mt_key);
	if (!is_null(v)) {
		json_int_t n = json_integer_value(v);
		if (!json_is_integer(v) || n < 1 || n > lim->max_tokens_cap)
			return BAD(mt_key, "'%s' must be an integer from 1 to %d", mt_key,
			           lim->max_tokens_cap);
		r->max_tokens = (int)n;
		have_max = 1;
	}
	if (kind == SERVE_COMPLETIONS)
		rc = parse_prompt(json_object_get(j, "prompt"), lim, r, e);
	else
		rc = parse_messages(json_object_get(j, "messages"), lim, r, e);
	if (rc < 0)
		return rc;
	if (!have_max) {
		r->max_tokens = kind == SERVE_COMPLETIONS ? lim->default_max_tokens
		                                          : lim->max_context - r->n_prompt;
		if (r->max_tokens > lim->max_tokens_cap)
			r->max_tokens = lim->max_tokens_cap;
		if (r->max_tokens < 1)
			r->max_tokens = 1;
	}
	if ((long)r->n_prompt + r->max_tokens > lim->max_context)
		return serve_set_error(e, 400, "invalid_request_error", "context_length_exceeded",
		                       kind == SERVE_CHAT ? "messages" : "prompt",
		                       "the prompt (%d tokens) and max_tokens (%d) exceed this "
		                       "server's context of %d tokens",
		                       r->n_prompt, r->max_tokens, lim->max_context),
		       -EINVAL;
	return 0;
}

int serve_parse_request(serve_kind_t kind, const char *body, size_t len,
                        const serve_limits_t *lim, serve_req_t *req, serve_err_t *e)
{
	json_error_t je;
	json_t *j;
	int rc;

	memset(req, 0, sizeof(*req));
	req->kind = kind;
	j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
	if (!j) {
		serve_set_error(e, 400, "invalid_request_error", "invalid_json", NULL,
		                "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line,
		                je.column);
		return -EINVAL;
	}
	if (!json_is_object(j)) {
		json_decref(j);
		return BAD(NULL, "the body must be a JSON object");
	}
	rc = parse_fields(kind, j, lim, req, e);
	json_decref(j);
	if (rc < 0)
		serve_req_free(req);
	return rc;
}

void serve_req_free(serve_req_t *req)
{
	free(req->prompt);
	req->prompt = NULL;
	req->n_prompt = 0;
}

/* ---- writers -------------------------------------------------------------- */

static char *dump(json_t *o, size_t *len)
{
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	*len = s ? strlen(s) : 0;
	return s;
}

static json_t *str_or_null(const char *s)
{
	return s && *s ? json_string(s) : json_null();
}

char *serve_error_json(const serve_err_t *e, size_t *len)
{
	json_t *o = json_pack("{s:{s:s,s:s,s:o,s:o}}", "error", "message", e->message, "type",
	                      e->type, "param", str_or_null(e->param), "code",
	                      str_or_null(e->code));
	return dump(o, len);
}

static json_t *ids_array(const int *ids, int n)
{
	json_t *a = json_array();
	for (int i = 0; a && i < n; i++)
		json_array_append_new(a, json_integer(ids[i]));
	return a;
}

static json_t *usage(const serve_out_t *o)
{
	return json_pack("{s:i,s:i,s:i}", "prompt_tokens", o->prompt_tokens, "completion_tokens",
	                 o->completion_tokens, "total_tokens",
	                 o->prompt_tokens + o->completion_tokens);
}

static json_t *text_of(const serve_out_t *o)
{
	json_t *t = json_stringn(o->text ? o->text : "", o->text ? o->text_len : 0);
	return t ? t : json_string("\xef\xbf\xbd"); /* the tokenizer writes valid UTF-8 */
}

static json_t *envelope(const serve_out_t *o, const char *object, json_t *choice)
{
	return json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", o->id, "object", object, "created",
	                 (json_int_t)o->created, "model", o->model, "choices", choice);
}

char *serve_answer_json(const serve_out_t *o, size_t *len)
{
	json_t *choice, *env;
	if (o->kind == SERVE_CHAT)
		choice = json_pack("{s:i,s:{s:s,s:o},s:n,s:o,s:o}", "index", 0, "message", "role",
		                   "assistant", "content", text_of(o), "logprobs", "finish_reason",
		                   str_or_null(o->finish), "token_ids", ids_array(o->ids, o->n_ids));
	else
		choice = json_pack("{s:i,s:o,s:n,s:o,s:o}", "index", 0, "text", text_of(o), "logprobs",
		                   "finish_reason", str_or_null(o->finish), "token_ids",
		                   ids_array(o->ids, o->n_ids));
	env = envelope(o, o->kind == SERVE_CHAT ? "chat.completion" : "text_completion", choice);
	if (env)
		json_object_set_new(env, "usage", usage(o));
	return dump(env, len);
}

static char *sse(json_t *o, size_t *len)
{
	size_t n;
	char *s = dump(o, &n), *out;
	if (!s)
		return NULL;
	out = malloc(n + 9);
	if (out) {
		memcpy(out, "data: ", 6);
		memcpy(out + 6, s, n);
		memcpy(out + 6 + n, "\n\n", 3);
		*len = n + 8;
	}
	free(s);
	return out;
}

char *serve_chunk_sse(const serve_out_t *o, int first, size_t *len)
{
	json_t *choice;
	if (o->kind == SERVE_CHAT) {
		json_t *delta = json_object();
		if (first)
			json_object_set_new(delta, "role", json_string("assistant"));
		if (o->text_len || first)
			json_object_set_new(delta, "content", text_of(o));
		choice = json_pack("{s:i,s:o,s:n,s:o}", "index", 0, "delta", delta, "logprobs",
		                   "finish_reason", str_or_null(o->finish));
		return sse(envelope(o, "chat.completion.chunk", choice), len);
	}
	choice = json_pack("{s:i,s:o,s:n,s:o,s:o}", "index", 0, "text", text_of(o), "logprobs",
	                   "finish_reason", str_or_null(o->finish), "token_ids",
	                   ids_array(o->ids, o->n_ids));
	return sse(envelope(o, "text_completion", choice), len);
}

char *serve_usage_sse(const serve_out_t *o, size_t *len)
{
	json_t *env = json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", o->id, "object",
	                        o->kind == SERVE_CHAT ? "chat.completion.chunk" : "text_completion",
	                        "created", (json_int_t)o->created, "model", o->model, "choices",
	                        "usage", usage(o));
	return sse(env, len);
}

char *serve_models_json(const char *model, long long created, size_t *len)
{
	json_t *o = json_pack("{s:s,s:[{s:s,s:s,s:I,s:s}]}", "object", "list", "data", "id", model,
	                      "object", "model", "created", (json_int_t)created, "owned_by",
	                      "sparkctl");
	return dump(o, len);
}

/* spark-decode --serve's request parser, answer writers and byte-level
 * stand-in tokenizer (runtime/decode/serve_api.c, serve_tok.c). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <string.h>

#include "serve.h"

static const serve_limits_t LIM = {.model_id = "synthetic:tiny",
                                   .vocab = 1001,
                                   .tok = SERVE_TOK_BYTES,
                                   .max_tokens_cap = 64,
                                   .max_context = 128,
                                   .default_max_tokens = 16};

static serve_req_t ok(serve_kind_t k, const char *body)
{
	serve_req_t r;
	serve_err_t e = {0};
	int rc = serve_parse_request(k, body, strlen(body), &LIM, &r, &e);
	cr_assert_eq(rc, 0, "%s: %d %s", body, e.status, e.message);
	return r;
}

static serve_err_t bad(serve_kind_t k, const char *body, int status, const char *param)
{
	serve_req_t r;
	serve_err_t e = {0};
	int rc = serve_parse_request(k, body, strlen(body), &LIM, &r, &e);
	cr_assert_lt(rc, 0, "%s was accepted", body);
	cr_assert_eq(e.status, status, "%s: status %d (%s)", body, e.status, e.message);
	cr_assert_str_eq(e.param, param, "%s: param '%s' (%s)", body, e.param, e.message);
	cr_assert(e.message[0]);
	cr_assert(r.prompt == NULL);
	return e;
}

Test(serve_api, text_prompt_is_bytes_with_default_max_tokens)
{
	serve_req_t r = ok(SERVE_COMPLETIONS, "{\"model\":\"synthetic:tiny\",\"prompt\":\"Hi\\u00e9\"}");
	cr_assert_eq(r.n_prompt, 4); /* H i and the two bytes of é */
	cr_assert_eq(r.prompt[0], 'H');
	cr_assert_eq(r.prompt[1], 'i');
	cr_assert_eq(r.prompt[2], 0xC3);
	cr_assert_eq(r.prompt[3], 0xA9);
	cr_assert_eq(r.max_tokens, 16);
	cr_assert_eq(r.temperature, 0);
	cr_assert(!r.stream && !r.has_seed);
	serve_req_free(&r);
}

Test(serve_api, id_prompts_and_sampling_fields)
{
	serve_req_t r = ok(SERVE_COMPLETIONS, "{\"prompt\":[1,2,1000],\"max_tokens\":64,"
	                                      "\"temperature\":0.7,\"seed\":-5,\"stream\":true,"
	                                      "\"stream_options\":{\"include_usage\":true},"
	                                      "\"n\":1,\"top_p\":1,\"stop\":null,\"user\":\"x\"}");
	cr_assert_eq(r.n_prompt, 3);
	cr_assert_eq(r.prompt[2], 1000);
	cr_assert_eq(r.max_tokens, 64);
	cr_assert_float_eq(r.temperature, 0.7, 1e-12);
	cr_assert(r.has_seed && r.seed == (uint64_t)-5);
	cr_assert(r.stream && r.include_usage);
	serve_req_free(&r);
	r = ok(SERVE_COMPLETIONS, "{\"prompt\":[[5,6]]}");
	cr_assert_eq(r.n_prompt, 2);
	serve_req_free(&r);
	r = ok(SERVE_COMPLETIONS, "{\"prompt\":[\"ab\"]}");
	cr_assert_eq(r.n_prompt, 2);
	serve_req_free(&r);
}

Test(serve_api, chat_template)
{
	const char *want = "<|system|>\nbe brief\n<|user|>\nhi there\n<|assistant|>\n";
	serve_req_t r = ok(SERVE_CHAT, "{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
	                               "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
	                               "\"hi \"},{\"type\":\"text\",\"text\":\"there\"}]}]}");
	cr_assert_eq(r.n_prompt, (int)strlen(want));
	for (int i = 0; i < r.n_prompt; i++)
		cr_assert_eq(r.prompt[i], (unsigned char)want[i], "byte %d", i);
	/* chat without max_tokens: what the context leaves, within the cap */
	cr_assert_eq(r.max_tokens, 64);
	serve_req_free(&r);
	r = ok(SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
	                   "\"max_completion_tokens\":3}");
	cr_assert_eq(r.max_tokens, 3);
	serve_req_free(&r);
}

Test(serve_api, malformed_bodies_are_400_with_the_param)
{
	serve_err_t e = bad(SERVE_COMPLETIONS, "{\"prompt\":", 400, "");
	cr_assert_str_eq(e.code, "invalid_json");
	bad(SERVE_COMPLETIONS, "[1,2]", 400, "");
	bad(SERVE_COMPLETIONS, "", 400, "");
	bad(SERVE_COMPLETIONS, "{\"prompt\":\"a\",\"prompt\":\"b\"}", 400, ""); /* duplicate key */
	bad(SERVE_COMPLETIONS, "{}", 400, "prompt");
	bad(SERVE_COMPLETIONS, "{\"prompt\":\"\"}", 400, "prompt");
	bad(SERVE_COMPLETIONS, "{\"prompt\":[]}", 400, "prompt");
	bad(SERVE_COMPLETIONS, "{\"prompt\":[1,1001]}", 400, "prompt");
	bad(SERVE_COMPLETIONS, "{\"prompt\":[1,-1]}", 400, "prompt");
	bad(SERVE_COMPLETIONS, "{\"prompt\":[1,2.5]}", 400, "prompt");
	bad(SERVE_COMPLETIONS, "{\"prompt\":[\"a\",\"b\"]}", 400, "prompt");
	bad(SERVE_COMPLETIONS, "{\"prompt\":{}}", 400, "prompt");
	bad(SERVE_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":0}", 400, "max_tokens");
	bad(SERVE_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":65}", 400, "max_tokens");
	bad(SERVE_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":\"8\"}", 400, "max_tokens");
	bad(SERVE_COMPLETIONS, "{\"prompt\":\"a\",\"temperature\":2.5}", 400, "temperature");
	bad(SERVE_COMPLETIONS, "{\"prompt\":\"a\",\"temperature\":\"hot\"}", 400, "temperature");
	bad(SERVE_COMPLETIONS, "{\"prompt\":\"a\",\"seed\":1.5}", 400, "seed");
	bad(SERVE_COMPLETIONS, "{\"prompt\":\"a\",\"stream\":1}", 400, "stream");
	bad(SERVE_COMPLETIONS, "{\"prompt\":\"a\",\"stream_options\":[]}", 400, "stream_options");
	bad(SERVE_COMPLETIONS, "{\"prompt\":\"a\",\"n\":2}", 400, "n");
	bad(SERVE_COMPLETIONS, "{\"prompt\":\"a\",\"top_p\":0.5}", 400, "top_p");
	bad(SERVE_COMPLETIONS, "{\"prompt\":\"a\",\"stop\":[\"x\"]}", 400, "stop");
	bad(SERVE_COMPLETIONS, "{\"prompt\":\"a\",\"model\":7}", 400, "model");
	e = bad(SERVE_COMPLETIONS, "{\"prompt\":\"a\",\"model\":\"gpt-4\"}", 404, "model");
	cr_assert_str_eq(e.code, "model_not_found");
	bad(SERVE_CHAT, "{\"messages\":[]}", 400, "messages");
	bad(SERVE_CHAT, "{\"messages\":[\"hi\"]}", 400, "messages");
	bad(SERVE_CHAT, "{\"messages\":[{\"content\":\"hi\"}]}", 400, "messages");
	bad(SERVE_CHAT, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"hi\"}]}", 400, "messages");
	bad(SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "messages");
	bad(SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}",
	    400, "messages");
}

Test(serve_api, context_limit)
{
	char body[400];
	serve_err_t e;
	memset(body, 0, sizeof(body));
	strcpy(body, "{\"prompt\":\"");
	memset(body + strlen(body), 'x', 100);
	strcat(body, "\",\"max_tokens\":29}");
	e = bad(SERVE_COMPLETIONS, body, 400, "prompt");
	cr_assert_str_eq(e.code, "context_length_exceeded");
	strcpy(strstr(body, "29}"), "28}");
	serve_req_t r = ok(SERVE_COMPLETIONS, body);
	cr_assert_eq(r.n_prompt + r.max_tokens, 128);
	serve_req_free(&r);
}

Test(serve_api, no_tokenizer_takes_ids_only)
{
	serve_limits_t l = LIM;
	serve_req_t r;
	serve_err_t e;
	l.tok = SERVE_TOK_NONE;
	cr_assert_lt(serve_parse_request(SERVE_COMPLETIONS, "{\"prompt\":\"hi\"}", 15, &l, &r, &e), 0);
	cr_assert_eq(e.status, 400);
	cr_assert(strstr(e.message, "token ids"));
	cr_assert_eq(serve_parse_request(SERVE_COMPLETIONS, "{\"prompt\":[3]}", 14, &l, &r, &e), 0);
	serve_req_free(&r);
}

Test(serve_api, error_object_shape)
{
	serve_err_t e;
	size_t len;
	char *s;
	json_t *j, *err;
	serve_set_error(&e, 429, "requests", "rate_limit_exceeded", NULL, "queue full (%d)", 3);
	s = serve_error_json(&e, &len);
	j = json_loads(s, 0, NULL);
	err = json_object_get(j, "error");
	cr_assert_str_eq(json_string_value(json_object_get(err, "message")), "queue full (3)");
	cr_assert_str_eq(json_string_value(json_object_get(err, "type")), "requests");
	cr_assert_str_eq(json_string_value(json_object_get(err, "code")), "rate_limit_exceeded");
	cr_assert(json_is_null(json_object_get(err, "param")));
	json_decref(j);
	free(s);
}

Test(serve_api, answers_and_chunks)
{
	int ids[3] = {72, 105, 33};
	serve_out_t o = {.kind = SERVE_CHAT, .id = "chatcmpl-1", .created = 5, .model = "m",
	                 .text = "Hi!", .text_len = 3, .ids = ids, .n_ids = 3, .finish = "length",
	                 .prompt_tokens = 4, .completion_tokens = 3};
	size_t len;
	char *s = serve_answer_json(&o, &len);
	json_t *j = json_loads(s, 0, NULL), *c;
	cr_assert_str_eq(json_string_value(json_object_get(j, "object")), "chat.completion");
	c = json_array_get(json_object_get(j, "choices"), 0);
	cr_assert_str_eq(json_string_value(json_object_get(json_object_get(c, "message"), "content")),
	                 "Hi!");
	cr_assert_str_eq(json_string_value(json_object_get(c, "finish_reason")), "length");
	cr_assert_eq(json_integer_value(json_object_get(json_object_get(j, "usage"), "total_tokens")),
	             7);
	json_decref(j);
	free(s);
	o.finish = NULL;
	s = serve_chunk_sse(&o, 1, &len);
	cr_assert(strncmp(s, "data: {", 7) == 0 && strcmp(s + len - 2, "\n\n") == 0);
	j = json_loadb(s + 6, len - 8, 0, NULL);
	c = json_array_get(json_object_get(j, "choices"), 0);
	cr_assert_str_eq(json_string_value(json_object_get(j, "object")), "chat.completion.chunk");
	cr_assert_str_eq(json_string_value(json_object_get(json_object_get(c, "delta"), "role")),
	                 "assistant");
	cr_assert(json_is_null(json_object_get(c, "finish_reason")));
	json_decref(j);
	free(s);
	o.kind = SERVE_COMPLETIONS;
	s = serve_usage_sse(&o, &len);
	j = json_loadb(s + 6, len - 8, 0, NULL);
	cr_assert_eq(json_array_size(json_object_get(j, "choices")), 0);
	cr_assert_eq(json_integer_value(json_object_get(json_object_get(j, "usage"), "prompt_tokens")),
	             4);
	json_decref(j);
	free(s);
}

static char *detok(const int *ids, int n)
{
	static char out[256];
	serve_utf8_t st = {0};
	size_t len = 0;
	for (int i = 0; i < n; i++)
		len += serve_tok_piece(&st, ids[i], out + len);
	len += serve_tok_flush(&st, out + len);
	out[len] = 0;
	return out;
}

Test(serve_tok, bytes_back_to_utf8_with_replacement)
{
	int ascii[] = {'o', 'k'};
	int split[] = {0xC3, 0xA9, 0xE2 + 256, 0x82, 0xAC}; /* é, € (one id past 256) */
	int bad1[] = {0xFF, 'a'};
	int cut[] = {0xE2, 0x82, 'z'};                      /* an unfinished € then z */
	int tail[] = {'a', 0xF0, 0x9F};                     /* unfinished at the end */
	int over[] = {0xE0, 0x80, 'b'};                     /* overlong: E0 needs A0-BF */
	int sur[] = {0xED, 0xA0, 0x80};                     /* a surrogate */
	cr_assert_str_eq(detok(ascii, 2), "ok");
	cr_assert_str_eq(detok(split, 5), "\xc3\xa9\xe2\x82\xac");
	cr_assert_str_eq(detok(bad1, 2), "\xef\xbf\xbd" "a");
	cr_assert_str_eq(detok(cut, 3), "\xef\xbf\xbd" "z");
	cr_assert_str_eq(detok(tail, 3), "a\xef\xbf\xbd");
	cr_assert_str_eq(detok(over, 3), "\xef\xbf\xbd\xef\xbf\xbd" "b");
	cr_assert_str_eq(detok(sur, 3), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
	/* every id sequence gives text jansson accepts (valid UTF-8) */
	for (int a = 0; a < 256; a += 3)
		for (int b = 0; b < 256; b += 5) {
			int ids[3] = {a, b, (a * 7 + b) % 256};
			char *t = detok(ids, 3);
			json_t *s = json_string(t);
			cr_assert(s, "ids %d %d %d give invalid UTF-8", a, b, ids[2]);
			json_decref(s);
		}
}

Test(serve_tok, encode_modulo_vocab)
{
	int ids[3];
	serve_tok_encode((const unsigned char *)"\xff" "A\x01", 3, 200, ids);
	cr_assert_eq(ids[0], 255 % 200);
	cr_assert_eq(ids[1], 'A');
	cr_assert_eq(ids[2], 1);
}

/* The sampler's noise: deterministic, and Gumbel(0,1)-distributed (mean is
 * the Euler-Mascheroni constant 0.5772, variance pi^2/6 = 1.645), so the
 * arg-max of logit/T + noise draws from softmax(logit/T). */
Test(serve_sampling, gumbel_noise)
{
	double sum = 0, sq = 0;
	int n = 200000, wins[3] = {0};
	const double logit[3] = {1.0, 0.0, -1.0};
	cr_assert_eq(dec_gumbel(7, 3, 11), dec_gumbel(7, 3, 11));
	cr_assert_neq(dec_gumbel(7, 3, 11), dec_gumbel(8, 3, 11));
	for (int i = 0; i < n; i++) {
		double g = dec_gumbel(1, (uint64_t)i, 5);
		sum += g;
		sq += g * g;
	}
	cr_assert_float_eq(sum / n, 0.5772, 0.01);
	cr_assert_float_eq(sq / n - (sum / n) * (sum / n), 1.6449, 0.03);
	/* three tokens with logits 1, 0, -1: softmax 0.665, 0.245, 0.090 */
	for (int s = 0; s < 60000; s++) {
		int best = 0;
		double bv = -1e300;
		for (int t = 0; t < 3; t++) {
			double v = logit[t] + dec_gumbel(42, (uint64_t)s, (uint64_t)t);
			if (v > bv)
				bv = v, best = t;
		}
		wins[best]++;
	}
	cr_assert_float_eq(wins[0] / 60000.0, 0.665, 0.01);
	cr_assert_float_eq(wins[1] / 60000.0, 0.245, 0.01);
	cr_assert_float_eq(wins[2] / 60000.0, 0.090, 0.01);
}

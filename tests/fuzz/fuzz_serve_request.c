/* libFuzzer target for spark-decode --serve's request parser
 * (runtime/decode/serve_api.c serve_parse_request) and what the server does
 * with an accepted request: the ids through the stand-in detokenizer, the
 * answer, a chunk and the usage chunk. The first byte picks completions or
 * chat (bit 0) and the tokenizer (bit 1: none). Invariants that abort: a
 * refused body has a status of 400/404/500, a message and no prompt; an
 * accepted one has 1..context prompt ids inside the vocabulary, 1..cap
 * max_tokens within the context, and every writer's output is valid JSON. */
#include "serve.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_json(char *s, size_t len, int sse)
{
	json_t *j;
	if (!s)
		return; /* out of memory only */
	if (sse) {
		if (len < 8 || memcmp(s, "data: ", 6) != 0 || memcmp(s + len - 2, "\n\n", 2) != 0)
			abort();
		j = json_loadb(s + 6, len - 8, JSON_ALLOW_NUL, NULL);
	} else {
		j = json_loadb(s, len, JSON_ALLOW_NUL, NULL); /* id 0 is the byte NUL: \u0000 */
	}
	if (!j)
		abort();
	json_decref(j);
	free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	serve_limits_t lim = {.model_id = "synthetic:tiny", .vocab = 1001, .tok = SERVE_TOK_BYTES,
	                      .max_tokens_cap = 64, .max_context = 256, .default_max_tokens = 16};
	serve_kind_t kind;
	serve_req_t r;
	serve_err_t e;
	size_t len;

	if (size < 1)
		return 0;
	kind = data[0] & 1 ? SERVE_CHAT : SERVE_COMPLETIONS;
	if (data[0] & 2)
		lim.tok = SERVE_TOK_NONE;
	memset(&e, 0, sizeof(e));
	if (serve_parse_request(kind, (const char *)data + 1, size - 1, &lim, &r, &e) < 0) {
		if ((e.status != 400 && e.status != 404 && e.status != 500) || !e.message[0] ||
		    r.prompt || r.n_prompt)
			abort();
		check_json(serve_error_json(&e, &len), len, 0);
		return 0;
	}
	if (r.n_prompt < 1 || r.n_prompt > lim.max_context || r.max_tokens < 1 ||
	    r.max_tokens > lim.max_tokens_cap || r.n_prompt + r.max_tokens > lim.max_context ||
	    !(r.temperature >= 0 && r.temperature <= 2))
		abort();
	for (int i = 0; i < r.n_prompt; i++)
		if (r.prompt[i] < 0 || r.prompt[i] >= lim.vocab)
			abort();
	/* the prompt ids as if generated: text, answer, chunks */
	{
		char *text = malloc((size_t)r.n_prompt * SERVE_PIECE_MAX + SERVE_PIECE_MAX);
		serve_utf8_t st = {0};
		size_t tl = 0;
		serve_out_t o = {.kind = kind, .id = "cmpl-1", .created = 1, .model = lim.model_id,
		                 .ids = r.prompt, .n_ids = r.n_prompt, .finish = "length",
		                 .prompt_tokens = r.n_prompt, .completion_tokens = r.max_tokens};
		if (!text)
			abort();
		for (int i = 0; i < r.n_prompt; i++)
			tl += serve_tok_piece(&st, r.prompt[i], text + tl);
		tl += serve_tok_flush(&st, text + tl);
		o.text = text;
		o.text_len = tl;
		check_json(serve_answer_json(&o, &len), len, 0);
		check_json(serve_chunk_sse(&o, 1, &len), len, 1);
		check_json(serve_usage_sse(&o, &len), len, 1);
		free(text);
	}
	serve_req_free(&r);
	return 0;
}

/* serve.h - spark-decode --serve: rank 0's OpenAI-compatible HTTP API.
 *
 * Contract of the modules (one job each):
 *   serve_api.c   request bodies -> a checked serve_req_t, or an OpenAI-style
 *                 error; answers, SSE chunks, /v1/models (jansson). Pure.
 *   serve_tok.c   the byte-level stand-in tokenizer (text bytes -> ids modulo
 *                 the vocabulary, ids -> bytes with invalid UTF-8 replaced by
 *                 U+FFFD) and the chat template. Pure.
 *   serve_http.c  the HTTP server (libmicrohttpd, a thread per connection),
 *                 the bounded FIFO queue, the lockstep loop that broadcasts each
 *                 request to the other ranks (sc_broadcast), SIGTERM draining.
 * Functions return 0 or a negative errno-style code. Nothing here exits. */
#ifndef SPARK_SERVE_H
#define SPARK_SERVE_H

#include <stddef.h>
#include <stdint.h>

#include "dec.h"

typedef enum { SERVE_COMPLETIONS = 0, SERVE_CHAT = 1 } serve_kind_t;

typedef enum { SERVE_TOK_NONE = 0, SERVE_TOK_BYTES = 1 } serve_tok_t;

/* What a request is checked against. */
typedef struct serve_limits {
	const char *model_id;     /* the one model this server serves */
	int vocab;
	serve_tok_t tok;          /* NONE: prompts only as token ids, answers carry no text */
	int max_tokens_cap;       /* largest max_tokens accepted */
	int max_context;          /* prompt + max_tokens */
	int default_max_tokens;   /* completions without max_tokens (OpenAI: 16) */
} serve_limits_t;

typedef struct serve_req {
	serve_kind_t kind;
	int *prompt;              /* token ids, malloc'd */
	int n_prompt;
	int max_tokens;
	double temperature;       /* 0: greedy */
	int has_seed;
	uint64_t seed;
	int stream, include_usage;
} serve_req_t;

typedef struct serve_err {
	int status;               /* HTTP status */
	char type[32];            /* invalid_request_error, server_error... */
	char code[40];            /* may be empty: null */
	char param[40];           /* may be empty: null */
	char message[300];
} serve_err_t;

void serve_set_error(serve_err_t *e, int status, const char *type, const char *code,
                     const char *param, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));

/* Parse and check a POST body of `kind`. 0 and *req filled (free it with
 * serve_req_free), or a negative code and *e (status 400, 404...). */
int serve_parse_request(serve_kind_t kind, const char *body, size_t len,
                        const serve_limits_t *lim, serve_req_t *req, serve_err_t *e);
void serve_req_free(serve_req_t *req);

/* One answer or chunk's contents. */
typedef struct serve_out {
	serve_kind_t kind;
	const char *id;           /* cmpl-... / chatcmpl-... */
	long long created;
	const char *model;
	const char *text;         /* the text so far (answer) or this chunk's delta */
	size_t text_len;
	const int *ids;           /* generated ids (answer) or this chunk's, may be NULL */
	int n_ids;
	const char *finish;       /* "stop", "length", or NULL while running */
	int prompt_tokens, completion_tokens;
} serve_out_t;

/* malloc'd JSON texts, NULL when out of memory; *len is set. */
char *serve_error_json(const serve_err_t *e, size_t *len);
char *serve_answer_json(const serve_out_t *o, size_t *len);
/* "data: {chunk}\n\n". The chat stream's first chunk carries the role
 * (first = 1). */
char *serve_chunk_sse(const serve_out_t *o, int first, size_t *len);
/* the usage chunk of stream_options.include_usage: no choices */
char *serve_usage_sse(const serve_out_t *o, size_t *len);
char *serve_models_json(const char *model, long long created, size_t *len);

/* ---- serve_tok.c ---------------------------------------------------------- */

/* text -> ids, one per byte: byte % vocab. ids holds len entries. */
void serve_tok_encode(const unsigned char *text, size_t len, int vocab, int *ids);

/* ids -> text: each id is the byte id % 256; bytes that are not valid UTF-8
 * come out as U+FFFD, a sequence split between tokens waits for its end. */
typedef struct serve_utf8 {
	unsigned char pend[4];
	int n, need;
} serve_utf8_t;
#define SERVE_PIECE_MAX 8 /* bytes serve_tok_piece / _flush write at most */
size_t serve_tok_piece(serve_utf8_t *st, int id, char *out);
size_t serve_tok_flush(serve_utf8_t *st, char *out);

/* Append n bytes (and keep a NUL after them) to a malloc'd buffer. */
int serve_buf_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n);

/* The chat template (docs/serving.md): every message as
 * "<|ROLE|>\nCONTENT\n", then "<|assistant|>\n". Appends to a malloc'd buffer. */
int serve_chat_append(char **buf, size_t *len, size_t *cap, const char *role, const char *content,
                      size_t content_len);

/* ---- serve_http.c --------------------------------------------------------- */

#define SERVE_MAX_CONTEXT (1 << 20) /* the largest --max-context */

typedef struct serve_opts {
	const char *host;         /* listen address (default 0.0.0.0) */
	int port;                 /* 0: any free port (logged) */
	const char *model_id;
	serve_tok_t tok;
	int queue;                /* waiting requests beyond the running one */
	int max_conns;
	int max_body;             /* bytes */
	int max_tokens_cap, max_context;
	int idle_timeout_s;
	int head_timeout_s;       /* accept (or the last answer) to a request's headers */
	const char *api_key;      /* non-NULL: /v1/ wants Authorization: Bearer KEY */
	dec_run_opts_t run;       /* algo, comm dtype */
} serve_opts_t;

/* Rank 0: bind, then (after *loaded says the model is in) answer until
 * SIGTERM; other ranks follow rank 0's requests. Returns an exit code. */
int serve_rank0(const dec_model_t *m, sc_comm_t *comm, const serve_opts_t *o);
int serve_follow(const dec_model_t *m, sc_comm_t *comm, const serve_opts_t *o);
/* bind rank 0's listener before the model loads (a taken port fails at once) */
int serve_bind(const serve_opts_t *o, char *err, size_t errlen);

#endif

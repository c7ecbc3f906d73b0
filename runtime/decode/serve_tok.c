/* serve_tok.c - the byte-level stand-in tokenizer and the chat template.
 *
 * Synthetic shapes have no tokenizer, so text maps to ids one byte each (the
 * byte modulo the vocabulary) and ids map back to the byte id % 256. A model
 * of random weights emits arbitrary bytes; what is not valid UTF-8 becomes
 * U+FFFD (as byte-level BPE decoders do with errors="replace"), so every
 * answer is valid JSON text. This is a stand-in, not a real tokenizer. */
#include "serve.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void serve_tok_encode(const unsigned char *text, size_t len, int vocab, int *ids)
{
	for (size_t i = 0; i < len; i++)
		ids[i] = vocab > 0 ? text[i] % vocab : 0;
}

static size_t put_fffd(char *out)
{
	out[0] = (char)0xEF;
	out[1] = (char)0xBF;
	out[2] = (char)0xBD;
	return 3;
}

/* The bytes a lead byte needs after it, or -1 if it cannot start a sequence. */
static int need_of(unsigned char b)
{
	if (b < 0x80)
		return 0;
	if (b >= 0xC2 && b <= 0xDF)
		return 1;
	if (b >= 0xE0 && b <= 0xEF)
		return 2;
	if (b >= 0xF0 && b <= 0xF4)
		return 3;
	return -1;
}

/* Whether b may follow the pending bytes (RFC 3629's table: no overlong
 * forms, no surrogates, nothing above U+10FFFF). */
static int continues(const serve_utf8_t *st, unsigned char b)
{
	unsigned char lo = 0x80, hi = 0xBF;
	if (st->n == 1) {
		switch (st->pend[0]) {
		case 0xE0: lo = 0xA0; break;
		case 0xED: hi = 0x9F; break;
		case 0xF0: lo = 0x90; break;
		case 0xF4: hi = 0x8F; break;
		default: break;
		}
	}
	return b >= lo && b <= hi;
}

size_t serve_tok_piece(serve_utf8_t *st, int id, char *out)
{
	unsigned char b = (unsigned char)((unsigned)id % 256u);
	size_t n = 0;
	int need;

	if (st->n > 0) {
		if (continues(st, b)) {
			st->pend[st->n++] = b;
			if (st->n == st->need + 1) {
				memcpy(out, st->pend, (size_t)st->n);
				n = (size_t)st->n;
				st->n = 0;
			}
			return n;
		}
		/* an unfinished sequence: one U+FFFD for it, then b afresh */
		n += put_fffd(out);
		st->n = 0;
	}
	need = need_of(b);
	if (need < 0) {
		n += put_fffd(out + n);
	} else if (need == 0) {
		out[n++] = (char)b;
	} else {
		st->pend[0] = b;
		st->n = 1;
		st->need = need;
	}
	return n;
}

size_t serve_tok_flush(serve_utf8_t *st, char *out)
{
	if (st->n == 0)
		return 0;
	st->n = 0;
	return put_fffd(out);
}

int serve_buf_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
	if (*len + n + 1 > *cap) {
		size_t c = *cap ? *cap : 256;
		char *nb;
		while (c < *len + n + 1)
			c *= 2;
		if (!(nb = realloc(*buf, c)))
			return -ENOMEM;
		*buf = nb;
		*cap = c;
	}
	memcpy(*buf + *len, s, n);
	*len += n;
	(*buf)[*len] = 0;
	return 0;
}

int serve_chat_append(char **buf, size_t *len, size_t *cap, const char *role, const char *content,
                      size_t content_len)
{
	int rc;
	if (!content) /* the closing assistant turn */
		return serve_buf_append(buf, len, cap, "<|assistant|>\n", 14);
	if ((rc = serve_buf_append(buf, len, cap, "<|", 2)) < 0 ||
	    (rc = serve_buf_append(buf, len, cap, role, strlen(role))) < 0 ||
	    (rc = serve_buf_append(buf, len, cap, "|>\n", 3)) < 0 ||
	    (rc = serve_buf_append(buf, len, cap, content, content_len)) < 0)
		return rc;
	return serve_buf_append(buf, len, cap, "\n", 1);
}

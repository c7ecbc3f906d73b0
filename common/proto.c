#include "proto.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void proto_decoder_init(proto_decoder *d) { memset(d, 0, sizeof *d); }

void proto_decoder_limit(proto_decoder *d, size_t max)
{
	d->max = max > PROTO_MAX_FRAME ? PROTO_MAX_FRAME : max;
}

static size_t decoder_max(const proto_decoder *d) { return d->max ? d->max : PROTO_MAX_FRAME; }

void proto_decoder_free(proto_decoder *d)
{
	free(d->buf);
	memset(d, 0, sizeof *d);
}

void proto_decoder_binary(proto_decoder *d, size_t max_payload)
{
	d->bin_max = max_payload > 0x7fffffffu ? 0x7fffffffu : max_payload;
}

/* Drop the frame returned last (its payload was lent until this call). */
static void drop_skip(proto_decoder *d)
{
	if (!d->skip)
		return;
	memmove(d->buf, d->buf + d->skip, d->len - d->skip);
	d->len -= d->skip;
	d->skip = 0;
}

int proto_decoder_feed(proto_decoder *d, const void *data, size_t n)
{
	if (n == 0)
		return 0;
	drop_skip(d);
	if (d->len + n > d->cap) {
		size_t cap = d->cap ? d->cap : 4096;
		while (cap < d->len + n)
			cap *= 2;
		/* never hold more than one max frame plus its header and a bit */
		size_t most = decoder_max(d) + 8 + d->bin_max + 65536;
		if (cap > most)
			cap = d->len + n > most ? d->len + n : most;
		uint8_t *nb = realloc(d->buf, cap);
		if (!nb)
			return -ENOMEM;
		d->buf = nb;
		d->cap = cap;
	}
	memcpy(d->buf + d->len, data, n);
	d->len += n;
	return 0;
}

static int fail(char *err, size_t errlen, int code, const char *why)
{
	if (err && errlen)
		snprintf(err, errlen, "%s", why);
	return code;
}

static uint32_t be32(const uint8_t *b)
{
	return ((uint32_t)b[0] << 24) | ((uint32_t)b[1] << 16) | ((uint32_t)b[2] << 8) |
	       (uint32_t)b[3];
}

/* Parse and check one frame's JSON. 1 with *msg, or a negative errno. */
static int take_json(const uint8_t *p, size_t n, json_t **msg, char *err, size_t errlen)
{
	json_error_t jerr;
	json_t *j = json_loadb((const char *)p, n, JSON_REJECT_DUPLICATES, &jerr);
	if (!j)
		return fail(err, errlen, -EBADMSG, "frame is not valid JSON");
	if (!json_is_object(j)) {
		json_decref(j);
		return fail(err, errlen, -EBADMSG, "frame is not a JSON object");
	}
	json_t *v = json_object_get(j, "v");
	json_t *t = json_object_get(j, "type");
	json_t *id = json_object_get(j, "id");
	if (!json_is_integer(v) || json_integer_value(v) != PROTO_VERSION) {
		json_decref(j);
		return fail(err, errlen, -EBADMSG, "missing or unsupported protocol version \"v\"");
	}
	if (!json_is_string(t) || json_string_length(t) == 0 || json_string_length(t) > 64) {
		json_decref(j);
		return fail(err, errlen, -EBADMSG, "missing or invalid \"type\"");
	}
	if (!json_is_integer(id)) {
		json_decref(j);
		return fail(err, errlen, -EBADMSG, "missing or invalid \"id\"");
	}
	*msg = j;
	return 1;
}

/* A binary frame at the start of the buffer (its first word has the flag). */
static int next_binary(proto_decoder *d, uint32_t w, json_t **msg, const uint8_t **bin,
		       size_t *binlen, char *err, size_t errlen)
{
	uint32_t hlen = w & ~PROTO_BIN_FLAG;
	if (!d->bin_max || !bin) {
		char why[64];
		snprintf(why, sizeof why, "frame larger than %zu bytes", decoder_max(d));
		return fail(err, errlen, -EMSGSIZE, why);
	}
	if (hlen == 0 || hlen > decoder_max(d))
		return fail(err, errlen, -EMSGSIZE, "binary frame header of a bad length");
	if (d->len < 8)
		return 0;
	uint32_t blen = be32(d->buf + 4);
	if (blen > d->bin_max) {
		char why[64];
		snprintf(why, sizeof why, "binary payload larger than %zu bytes", d->bin_max);
		return fail(err, errlen, -EMSGSIZE, why);
	}
	if (d->len - 8 < (size_t)hlen + blen)
		return 0;
	int r = take_json(d->buf + 8, hlen, msg, err, errlen);
	if (r < 0)
		return r;
	*bin = d->buf + 8 + hlen;
	*binlen = blen;
	d->skip = 8 + (size_t)hlen + blen;
	return 1;
}

int proto_decoder_next_bin(proto_decoder *d, json_t **msg, const uint8_t **bin, size_t *binlen,
			   char *err, size_t errlen)
{
	*msg = NULL;
	if (bin) {
		*bin = NULL;
		*binlen = 0;
	}
	drop_skip(d);
	if (d->len < 4)
		return 0;
	uint32_t flen = be32(d->buf);
	if (flen & PROTO_BIN_FLAG)
		return next_binary(d, flen, msg, bin, binlen, err, errlen);
	if (flen == 0)
		return fail(err, errlen, -EMSGSIZE, "empty frame");
	if (flen > decoder_max(d)) {
		char why[64];
		snprintf(why, sizeof why, "frame larger than %zu bytes", decoder_max(d));
		return fail(err, errlen, -EMSGSIZE, why);
	}
	if (d->len - 4 < flen)
		return 0;
	int r = take_json(d->buf + 4, flen, msg, err, errlen);
	memmove(d->buf, d->buf + 4 + flen, d->len - 4 - flen);
	d->len -= 4 + flen;
	if (d->len == 0 && !d->bin_max) {
		/* Nothing buffered: give the buffer back. It grows to the largest
		 * frame seen (up to 1 MiB) and a long-lived connection (a worker's
		 * session on the head) is idle almost all the time. A data link
		 * (binary frames) keeps it: it is busy while it lives. */
		free(d->buf);
		d->buf = NULL;
		d->cap = 0;
	}
	return r;
}

int proto_decoder_next(proto_decoder *d, json_t **msg, char *err, size_t errlen)
{
	return proto_decoder_next_bin(d, msg, NULL, NULL, err, errlen);
}

int proto_encode(const json_t *msg, uint8_t **out, size_t *outlen)
{
	char *s = json_dumps(msg, JSON_COMPACT);
	if (!s)
		return -ENOMEM;
	size_t n = strlen(s);
	if (n > PROTO_MAX_FRAME) {
		free(s);
		return -EMSGSIZE;
	}
	uint8_t *b = malloc(n + 4);
	if (!b) {
		free(s);
		return -ENOMEM;
	}
	b[0] = (uint8_t)(n >> 24);
	b[1] = (uint8_t)(n >> 16);
	b[2] = (uint8_t)(n >> 8);
	b[3] = (uint8_t)n;
	memcpy(b + 4, s, n);
	free(s);
	*out = b;
	*outlen = n + 4;
	return 0;
}

int proto_encode_bin(const json_t *msg, const void *data, size_t len, uint8_t **out,
		     size_t *outlen)
{
	if (len > UINT32_MAX)
		return -EMSGSIZE;
	char *s = json_dumps(msg, JSON_COMPACT);
	if (!s)
		return -ENOMEM;
	size_t n = strlen(s);
	if (n == 0 || n > PROTO_MAX_FRAME) {
		free(s);
		return -EMSGSIZE;
	}
	uint8_t *b = malloc(8 + n + len);
	if (!b) {
		free(s);
		return -ENOMEM;
	}
	uint32_t w = PROTO_BIN_FLAG | (uint32_t)n;
	for (int k = 0; k < 4; k++) {
		b[k] = (uint8_t)(w >> (24 - 8 * k));
		b[4 + k] = (uint8_t)((uint64_t)len >> (24 - 8 * k));
	}
	memcpy(b + 8, s, n);
	if (len)
		memcpy(b + 8 + n, data, len);
	free(s);
	*out = b;
	*outlen = 8 + n + len;
	return 0;
}

json_t *proto_msg(const char *type, json_int_t id)
{
	return json_pack("{s:i, s:s, s:I}", "v", PROTO_VERSION, "type", type, "id", id);
}

json_t *proto_error(json_int_t id, const char *code, const char *message)
{
	json_t *m = proto_msg("error", id);
	json_object_set_new(m, "code", json_string(code ? code : "error"));
	json_object_set_new(m, "message", json_string(message ? message : ""));
	return m;
}

json_t *proto_result(json_int_t id, json_t *data)
{
	json_t *m = proto_msg("result", id);
	json_object_set_new(m, "data", data ? data : json_object());
	return m;
}

const char *proto_type(const json_t *msg) { return proto_str(msg, "type"); }

json_int_t proto_id(const json_t *msg) { return proto_int(msg, "id", 0); }

const char *proto_str(const json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);
	return json_is_string(v) ? json_string_value(v) : NULL;
}

json_int_t proto_int(const json_t *obj, const char *key, json_int_t def)
{
	json_t *v = json_object_get(obj, key);
	return json_is_integer(v) ? json_integer_value(v) : def;
}

int proto_check(const json_t *msg, const struct proto_field *fields, char *err, size_t errlen)
{
	for (const struct proto_field *f = fields; f && f->name; f++) {
		json_t *v = json_object_get(msg, f->name);
		bool ok;
		const char *what;
		char type = f->type;
		if (type >= 'A' && type <= 'Z') { /* optional, but of this type when present */
			if (!v || json_is_null(v))
				continue;
			type = (char)(type - 'A' + 'a');
		}
		switch (type) {
		case 's': ok = json_is_string(v); what = "a string"; break;
		case 'i': ok = json_is_integer(v); what = "an integer"; break;
		case 'b': ok = json_is_boolean(v); what = "true or false"; break;
		case 'o': ok = json_is_object(v); what = "an object"; break;
		case 'a': ok = json_is_array(v); what = "an array"; break;
		default: ok = false; what = "of a known type"; break;
		}
		if (!ok) {
			if (err && errlen)
				snprintf(err, errlen, v ? "%s must be %s" : "%s is missing", f->name, what);
			return -EBADMSG;
		}
	}
	return 0;
}

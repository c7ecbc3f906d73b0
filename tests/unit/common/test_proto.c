/* proto: framing and message codec. */
#include "common/proto.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Frame raw bytes (any content) with a 4-byte big-endian length. */
static size_t frame_raw(uint8_t *out, const void *body, uint32_t len)
{
	out[0] = (uint8_t)(len >> 24);
	out[1] = (uint8_t)(len >> 16);
	out[2] = (uint8_t)(len >> 8);
	out[3] = (uint8_t)len;
	memcpy(out + 4, body, len);
	return 4 + (size_t)len;
}

/* Decode exactly one frame made of body; return the decoder's verdict. */
static int decode_one(const char *body, json_t **msg, char *err, size_t errlen)
{
	uint8_t buf[512];
	size_t n = frame_raw(buf, body, (uint32_t)strlen(body));
	proto_decoder d;
	proto_decoder_init(&d);
	cr_assert_eq(proto_decoder_feed(&d, buf, n), 0);
	int r = proto_decoder_next(&d, msg, err, errlen);
	proto_decoder_free(&d);
	return r;
}

/* A message whose compact JSON is exactly `size` bytes. */
static json_t *msg_of_size(size_t size)
{
	json_t *m = proto_msg("big", 7);
	json_object_set_new(m, "pad", json_string(""));
	char *s = json_dumps(m, JSON_COMPACT);
	size_t base = strlen(s);
	free(s);
	cr_assert(size >= base);
	char *pad = malloc(size - base + 1);
	memset(pad, 'a', size - base);
	pad[size - base] = '\0';
	json_object_set_new(m, "pad", json_string(pad));
	free(pad);
	s = json_dumps(m, JSON_COMPACT);
	cr_assert_eq(strlen(s), size);
	free(s);
	return m;
}

Test(proto, round_trip_keeps_every_field)
{
	json_t *m = proto_msg("node.show", 42);
	json_object_set_new(m, "name", json_string("spark-2 \"quoted\" \xc3\xa9"));
	json_object_set_new(m, "list", json_pack("[i,s,{s:b}]", 1, "two", "three", 1));
	json_object_set_new(m, "big", json_integer(9007199254740993LL));
	uint8_t *buf;
	size_t len;
	cr_assert_eq(proto_encode(m, &buf, &len), 0);
	cr_assert_eq(len, 4 + (((size_t)buf[0] << 24) | ((size_t)buf[1] << 16) |
			       ((size_t)buf[2] << 8) | buf[3]));
	proto_decoder d;
	proto_decoder_init(&d);
	cr_assert_eq(proto_decoder_feed(&d, buf, len), 0);
	json_t *out = NULL;
	cr_assert_eq(proto_decoder_next(&d, &out, NULL, 0), 1);
	cr_assert(json_equal(m, out));
	cr_assert_str_eq(proto_type(out), "node.show");
	cr_assert_eq(proto_id(out), 42);
	cr_assert_eq(proto_int(out, "big", 0), 9007199254740993LL);
	cr_assert_eq(d.len, 0, "decoder must consume the whole frame");
	json_t *none;
	cr_assert_eq(proto_decoder_next(&d, &none, NULL, 0), 0);
	cr_assert_null(none);
	json_decref(m);
	json_decref(out);
	free(buf);
	proto_decoder_free(&d);
}

Test(proto, frames_split_byte_by_byte)
{
	uint8_t *all = NULL;
	size_t total = 0;
	for (int i = 0; i < 3; i++) {
		json_t *m = proto_msg("ping", i + 1);
		json_object_set_new(m, "seq", json_integer(i * 1000));
		uint8_t *b;
		size_t n;
		cr_assert_eq(proto_encode(m, &b, &n), 0);
		all = realloc(all, total + n);
		memcpy(all + total, b, n);
		total += n;
		free(b);
		json_decref(m);
	}
	proto_decoder d;
	proto_decoder_init(&d);
	int got = 0;
	for (size_t i = 0; i < total; i++) {
		cr_assert_eq(proto_decoder_feed(&d, all + i, 1), 0);
		json_t *m;
		int r;
		while ((r = proto_decoder_next(&d, &m, NULL, 0)) == 1) {
			got++;
			cr_assert_eq(proto_id(m), got, "frames arrive in order");
			cr_assert_eq(proto_int(m, "seq", -1), (got - 1) * 1000);
			json_decref(m);
		}
		cr_assert_eq(r, 0, "a partial frame is not an error (byte %zu)", i);
	}
	cr_assert_eq(got, 3);
	free(all);
	proto_decoder_free(&d);
}

Test(proto, several_frames_in_one_feed)
{
	uint8_t buf[4096];
	size_t off = 0;
	for (int i = 0; i < 5; i++) {
		char body[128];
		snprintf(body, sizeof body, "{\"v\":1,\"type\":\"t%d\",\"id\":%d}", i, i);
		off += frame_raw(buf + off, body, (uint32_t)strlen(body));
	}
	/* plus the first 3 bytes of a sixth frame's header */
	buf[off++] = 0;
	buf[off++] = 0;
	buf[off++] = 0;
	proto_decoder d;
	proto_decoder_init(&d);
	cr_assert_eq(proto_decoder_feed(&d, buf, off), 0);
	for (int i = 0; i < 5; i++) {
		json_t *m;
		cr_assert_eq(proto_decoder_next(&d, &m, NULL, 0), 1);
		char t[8];
		snprintf(t, sizeof t, "t%d", i);
		cr_assert_str_eq(proto_type(m), t);
		json_decref(m);
	}
	json_t *m;
	cr_assert_eq(proto_decoder_next(&d, &m, NULL, 0), 0);
	cr_assert_null(m);
	proto_decoder_free(&d);
}

Test(proto, limit_is_exactly_one_mib)
{
	/* Encoder: exactly the limit passes, one byte more is refused. */
	json_t *ok = msg_of_size(PROTO_MAX_FRAME);
	json_t *over = msg_of_size(PROTO_MAX_FRAME + 1);
	uint8_t *b;
	size_t n;
	cr_assert_eq(proto_encode(ok, &b, &n), 0);
	cr_assert_eq(n, PROTO_MAX_FRAME + 4);
	uint8_t *b2 = NULL;
	size_t n2 = 0;
	cr_assert_eq(proto_encode(over, &b2, &n2), -EMSGSIZE);

	/* Decoder: a frame of exactly the limit is accepted. */
	proto_decoder d;
	proto_decoder_init(&d);
	cr_assert_eq(proto_decoder_feed(&d, b, n), 0);
	json_t *m;
	cr_assert_eq(proto_decoder_next(&d, &m, NULL, 0), 1);
	cr_assert(json_equal(m, ok));
	json_decref(m);
	proto_decoder_free(&d);

	/* A header announcing limit+1 is refused as soon as the header is in,
	 * before the body is buffered. */
	uint8_t hdr[4] = {0x00, 0x10, 0x00, 0x01};
	char err[128] = "";
	proto_decoder_init(&d);
	cr_assert_eq(proto_decoder_feed(&d, hdr, 4), 0);
	cr_assert_eq(proto_decoder_next(&d, &m, err, sizeof err), -EMSGSIZE);
	cr_assert_neq(err[0], '\0', "the reason is filled");
	proto_decoder_free(&d);

	uint8_t huge[4] = {0xff, 0xff, 0xff, 0xff};
	proto_decoder_init(&d);
	cr_assert_eq(proto_decoder_feed(&d, huge, 4), 0);
	cr_assert_eq(proto_decoder_next(&d, &m, NULL, 0), -EMSGSIZE);
	proto_decoder_free(&d);

	json_decref(ok);
	json_decref(over);
	free(b);
}

Test(proto, zero_length_frame_is_an_error)
{
	uint8_t z[4] = {0, 0, 0, 0};
	proto_decoder d;
	proto_decoder_init(&d);
	cr_assert_eq(proto_decoder_feed(&d, z, 4), 0);
	json_t *m = (json_t *)1;
	char err[128] = "";
	cr_assert_eq(proto_decoder_next(&d, &m, err, sizeof err), -EMSGSIZE);
	cr_assert_null(m);
	cr_assert_neq(err[0], '\0');
	proto_decoder_free(&d);
}

Test(proto, malformed_bodies_are_refused)
{
	static const char *bad[] = {
		"{",                                         /* bad JSON */
		"not json at all",
		"[1,2,3]",                                   /* not an object */
		"\"str\"",
		"{\"v\":1,\"type\":\"x\",\"id\":1} trailing", /* trailing garbage */
		"{\"type\":\"x\",\"id\":1}",                 /* missing v */
		"{\"v\":2,\"type\":\"x\",\"id\":1}",         /* wrong v */
		"{\"v\":\"1\",\"type\":\"x\",\"id\":1}",     /* v of the wrong type */
		"{\"v\":1.0,\"type\":\"x\",\"id\":1}",
		"{\"v\":1,\"id\":1}",                        /* missing type */
		"{\"v\":1,\"type\":\"\",\"id\":1}",          /* empty type */
		"{\"v\":1,\"type\":7,\"id\":1}",
		"{\"v\":1,\"type\":\"x\"}",                  /* missing id */
		"{\"v\":1,\"type\":\"x\",\"id\":\"1\"}",
		"{\"v\":1,\"type\":\"x\",\"id\":1,\"id\":2}", /* duplicate key */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		json_t *m = (json_t *)1;
		char err[128] = "";
		int r = decode_one(bad[i], &m, err, sizeof err);
		cr_assert_eq(r, -EBADMSG, "case %zu (%s): got %d", i, bad[i], r);
		cr_assert_null(m, "case %zu", i);
		cr_assert_neq(err[0], '\0', "case %zu has a reason", i);
	}
}

Test(proto, minimal_valid_frame_and_extra_fields)
{
	json_t *m = NULL;
	cr_assert_eq(decode_one("{\"v\":1,\"type\":\"x\",\"id\":0}", &m, NULL, 0), 1);
	cr_assert_eq(proto_id(m), 0);
	json_decref(m);
	cr_assert_eq(decode_one("{\"id\":-5,\"extra\":{\"a\":[]},\"type\":\"job.ls\",\"v\":1}", &m,
				NULL, 0),
		     1);
	cr_assert_str_eq(proto_type(m), "job.ls");
	cr_assert_eq(proto_id(m), -5);
	json_decref(m);
}

Test(proto, good_frame_then_bad_frame)
{
	uint8_t buf[256];
	const char *good = "{\"v\":1,\"type\":\"a\",\"id\":1}";
	size_t off = frame_raw(buf, good, (uint32_t)strlen(good));
	off += frame_raw(buf + off, "{oops}", 6);
	proto_decoder d;
	proto_decoder_init(&d);
	cr_assert_eq(proto_decoder_feed(&d, buf, off), 0);
	json_t *m;
	cr_assert_eq(proto_decoder_next(&d, &m, NULL, 0), 1);
	json_decref(m);
	cr_assert_eq(proto_decoder_next(&d, &m, NULL, 0), -EBADMSG);
	proto_decoder_free(&d);
}

/* An idle connection holds no buffer: once every byte is decoded the decoder
 * gives its buffer back, however large the last frame made it; a partial
 * frame stays buffered. */
Test(proto, decoder_releases_its_buffer_when_empty)
{
	size_t big = 200000;
	char *body = malloc(big + 64);
	cr_assert_not_null(body);
	int n = snprintf(body, 64, "{\"v\":1,\"type\":\"a\",\"id\":1,\"pad\":\"");
	memset(body + n, 'x', big);
	memcpy(body + n + big, "\"}", 2);
	size_t blen = (size_t)n + big + 2;
	uint8_t *buf = malloc(blen + 4);
	cr_assert_not_null(buf);
	size_t off = frame_raw(buf, body, (uint32_t)blen);
	proto_decoder d;
	proto_decoder_init(&d);
	json_t *m;
	cr_assert_eq(proto_decoder_feed(&d, buf, off - 1), 0);
	cr_assert_eq(proto_decoder_next(&d, &m, NULL, 0), 0);
	cr_assert_not_null(d.buf);
	cr_assert_eq(proto_decoder_feed(&d, buf + off - 1, 1), 0);
	cr_assert_eq(proto_decoder_next(&d, &m, NULL, 0), 1);
	json_decref(m);
	cr_assert_null(d.buf);
	cr_assert_eq(d.cap, 0);
	cr_assert_eq(d.len, 0);
	/* and it is usable again */
	const char *small = "{\"v\":1,\"type\":\"b\",\"id\":2}";
	off = frame_raw(buf, small, (uint32_t)strlen(small));
	cr_assert_eq(proto_decoder_feed(&d, buf, off), 0);
	cr_assert_eq(proto_decoder_next(&d, &m, NULL, 0), 1);
	cr_assert_str_eq(json_string_value(json_object_get(m, "type")), "b");
	json_decref(m);
	cr_assert_null(d.buf);
	proto_decoder_free(&d);
	free(buf);
	free(body);
}

Test(proto, builders_and_getters)
{
	json_t *e = proto_error(9, "bad_frame", "frame is not valid JSON");
	cr_assert_str_eq(proto_type(e), "error");
	cr_assert_eq(proto_id(e), 9);
	cr_assert_eq(proto_int(e, "v", 0), PROTO_VERSION);
	cr_assert_str_eq(proto_str(e, "code"), "bad_frame");
	cr_assert_str_eq(proto_str(e, "message"), "frame is not valid JSON");
	json_decref(e);

	json_t *r = proto_result(3, NULL);
	cr_assert_str_eq(proto_type(r), "result");
	cr_assert(json_is_object(json_object_get(r, "data")));
	json_decref(r);
	r = proto_result(4, json_pack("{s:i}", "n", 5));
	cr_assert_eq(proto_int(json_object_get(r, "data"), "n", 0), 5);
	json_decref(r);

	json_t *m = json_pack("{s:i,s:s}", "n", 1, "s", "x");
	cr_assert_null(proto_str(m, "n"), "a number is not a string");
	cr_assert_null(proto_str(m, "missing"));
	cr_assert_eq(proto_int(m, "s", -1), -1, "a string is not an int");
	cr_assert_eq(proto_int(m, "missing", 77), 77);
	json_decref(m);
}

/* A peer that has not authenticated gets a small limit (issue 14): a header
 * announcing more is refused before any of the body arrives. */
Test(proto, a_lowered_limit_refuses_larger_frames_from_the_header_alone)
{
	proto_decoder d;
	proto_decoder_init(&d);
	proto_decoder_limit(&d, 16 * 1024);
	uint8_t hdr[4] = {0, 0x0e, 0x10, 0}; /* 900 KiB */
	cr_assert_eq(proto_decoder_feed(&d, hdr, 4), 0);
	json_t *m = NULL;
	char err[128] = "";
	cr_expect_eq(proto_decoder_next(&d, &m, err, sizeof err), -EMSGSIZE);
	cr_expect(strstr(err, "16384"), "%s", err);
	proto_decoder_free(&d);
	/* at the limit it is fine; back to the default, so is a large one */
	proto_decoder_init(&d);
	proto_decoder_limit(&d, 64);
	json_t *small = proto_msg("join", 1);
	uint8_t *buf;
	size_t len;
	cr_assert_eq(proto_encode(small, &buf, &len), 0);
	cr_assert_leq(len - 4, 64);
	cr_assert_eq(proto_decoder_feed(&d, buf, len), 0);
	cr_expect_eq(proto_decoder_next(&d, &m, err, sizeof err), 1);
	json_decref(m);
	free(buf);
	json_decref(small);
	json_t *big = msg_of_size(100000);
	cr_assert_eq(proto_encode(big, &buf, &len), 0);
	proto_decoder_limit(&d, 0);
	cr_assert_eq(proto_decoder_feed(&d, buf, len), 0);
	cr_expect_eq(proto_decoder_next(&d, &m, err, sizeof err), 1, "%s", err);
	json_decref(m);
	free(buf);
	json_decref(big);
	proto_decoder_free(&d);
}

/* ---- binary frames (the model push's data links) ---- */

Test(proto, binary_frame_round_trip_split_anywhere)
{
	uint8_t payload[3000];
	for (size_t i = 0; i < sizeof payload; i++)
		payload[i] = (uint8_t)(i * 7 + 1);
	json_t *m = proto_msg("mp_piece", 0);
	json_object_set_new(m, "chunk", json_integer(4));
	uint8_t *bin;
	size_t blen;
	cr_assert_eq(proto_encode_bin(m, payload, sizeof payload, &bin, &blen), 0);
	cr_assert(bin[0] & 0x80, "the flag is in the first length word");
	uint8_t *plain;
	size_t plen;
	cr_assert_eq(proto_encode(m, &plain, &plen), 0);
	/* plain, binary, plain, an empty binary one: fed in pieces of every size */
	uint8_t *empty;
	size_t elen;
	cr_assert_eq(proto_encode_bin(m, NULL, 0, &empty, &elen), 0);
	size_t total = plen + blen + plen + elen;
	uint8_t *all = malloc(total);
	memcpy(all, plain, plen);
	memcpy(all + plen, bin, blen);
	memcpy(all + plen + blen, plain, plen);
	memcpy(all + plen + blen + plen, empty, elen);
	for (size_t step = 1; step <= 4097; step += 512) {
		proto_decoder d;
		proto_decoder_init(&d);
		proto_decoder_binary(&d, sizeof payload);
		int kinds[4], n = 0;
		for (size_t off = 0; off < total; off += step) {
			size_t k = total - off < step ? total - off : step;
			cr_assert_eq(proto_decoder_feed(&d, all + off, k), 0);
			json_t *got;
			const uint8_t *b;
			size_t bl;
			int r;
			while ((r = proto_decoder_next_bin(&d, &got, &b, &bl, NULL, 0)) == 1) {
				cr_assert_lt(n, 4);
				cr_assert(json_equal(got, m));
				kinds[n] = b ? (int)bl : -1;
				if (b && bl)
					cr_assert_eq(memcmp(b, payload, bl), 0, "the payload, byte for byte");
				n++;
				json_decref(got);
			}
			cr_assert_eq(r, 0);
		}
		cr_assert_eq(n, 4, "step %zu: four frames", step);
		cr_assert_eq(kinds[0], -1);
		cr_assert_eq(kinds[1], (int)sizeof payload);
		cr_assert_eq(kinds[2], -1);
		cr_assert_eq(kinds[3], 0);
		proto_decoder_free(&d);
	}
	free(all);
	free(bin);
	free(plain);
	free(empty);
	json_decref(m);
}

Test(proto, binary_frames_are_refused_unless_enabled_and_within_the_limit)
{
	json_t *m = proto_msg("mp_piece", 0);
	uint8_t payload[100] = {0};
	uint8_t *bin;
	size_t blen;
	cr_assert_eq(proto_encode_bin(m, payload, sizeof payload, &bin, &blen), 0);
	json_t *got;
	const uint8_t *b;
	size_t bl;
	char err[128];
	/* not enabled: too large, on the first word alone (no byte of it held) */
	proto_decoder d;
	proto_decoder_init(&d);
	cr_assert_eq(proto_decoder_feed(&d, bin, 4), 0);
	cr_assert_eq(proto_decoder_next_bin(&d, &got, &b, &bl, err, sizeof err), -EMSGSIZE);
	cr_assert(strstr(err, "larger than"), "%s", err);
	proto_decoder_free(&d);
	/* enabled, but proto_decoder_next (a caller that takes no payload) */
	proto_decoder_init(&d);
	proto_decoder_binary(&d, 1000);
	cr_assert_eq(proto_decoder_feed(&d, bin, blen), 0);
	cr_assert_lt(proto_decoder_next(&d, &got, err, sizeof err), 0);
	proto_decoder_free(&d);
	/* a payload over the limit: refused on its length word */
	proto_decoder_init(&d);
	proto_decoder_binary(&d, 99);
	cr_assert_eq(proto_decoder_feed(&d, bin, 8), 0);
	cr_assert_eq(proto_decoder_next_bin(&d, &got, &b, &bl, err, sizeof err), -EMSGSIZE);
	cr_assert(strstr(err, "payload larger than 99"), "%s", err);
	proto_decoder_free(&d);
	/* a header of length 0, and a header that is not a frame's JSON */
	uint8_t zero[8] = {0x80, 0, 0, 0, 0, 0, 0, 1};
	proto_decoder_init(&d);
	proto_decoder_binary(&d, 99);
	cr_assert_eq(proto_decoder_feed(&d, zero, sizeof zero), 0);
	cr_assert_eq(proto_decoder_next_bin(&d, &got, &b, &bl, err, sizeof err), -EMSGSIZE);
	proto_decoder_free(&d);
	uint8_t notjson[] = {0x80, 0, 0, 2, 0, 0, 0, 1, '[', ']', 'x'};
	proto_decoder_init(&d);
	proto_decoder_binary(&d, 99);
	cr_assert_eq(proto_decoder_feed(&d, notjson, sizeof notjson), 0);
	cr_assert_eq(proto_decoder_next_bin(&d, &got, &b, &bl, err, sizeof err), -EBADMSG);
	proto_decoder_free(&d);
	free(bin);
	json_decref(m);
}

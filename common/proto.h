/* proto: the wire format of every sparkctl connection (CLI<->agent, agent<->agent).
 * A frame is a 4-byte big-endian length, then that many bytes of one JSON object
 * with at least {"v":1, "type":"<string>", "id":<integer>}. Frames over
 * PROTO_MAX_FRAME, bad JSON, non-objects and missing/ill-typed fields are errors:
 * the receiver answers with proto_error() and closes (conn.c does this). */
#ifndef SPARK_PROTO_H
#define SPARK_PROTO_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define PROTO_VERSION 1
#define PROTO_MAX_FRAME (1u << 20)

/* Binary frames (the model push's data links only, once a peer is known): a
 * 4-byte big-endian word with PROTO_BIN_FLAG set and the JSON header's length
 * in its low 31 bits, a 4-byte big-endian payload length, the JSON header (the
 * same object as in a plain frame) and the payload's raw bytes. A decoder that
 * has not enabled them (proto_decoder_binary) refuses one as too large, since
 * its length word exceeds every limit. */
#define PROTO_BIN_FLAG 0x80000000u

typedef struct proto_decoder {
	uint8_t *buf;
	size_t len, cap;
	size_t max;     /* largest frame accepted; 0 means PROTO_MAX_FRAME */
	size_t bin_max; /* largest binary payload accepted; 0: binary frames refused */
	size_t skip;    /* bytes of the frame last returned, dropped at the next call */
} proto_decoder;

void proto_decoder_init(proto_decoder *d);
/* Accept frames of at most max bytes (1..PROTO_MAX_FRAME; 0 restores the
 * default). A peer that has not authenticated gets a small limit, so that it
 * cannot make the receiver hold a megabyte per connection. */
void proto_decoder_limit(proto_decoder *d, size_t max);
void proto_decoder_free(proto_decoder *d);
/* Append received bytes. 0, or -ENOMEM. */
int proto_decoder_feed(proto_decoder *d, const void *data, size_t n);
/* Take the next complete frame. Returns 1 and sets *msg (caller owns it),
 * 0 when more bytes are needed, or a negative errno with a reason in err:
 * -EMSGSIZE (length over the limit or zero), -EBADMSG (bad JSON, not an
 * object, missing or wrong v/type/id). After an error the decoder is unusable. */
int proto_decoder_next(proto_decoder *d, json_t **msg, char *err, size_t errlen);
/* Accept binary frames with payloads of at most max_payload bytes (0: refuse
 * them again). The decoder then keeps its buffer between frames. */
void proto_decoder_binary(proto_decoder *d, size_t max_payload);
/* As proto_decoder_next, and for a binary frame *bin points at its payload of
 * *binlen bytes inside the decoder (valid until the decoder's next call);
 * *bin is NULL for a plain frame. proto_decoder_next refuses a binary frame
 * (-EBADMSG). */
int proto_decoder_next_bin(proto_decoder *d, json_t **msg, const uint8_t **bin, size_t *binlen,
			   char *err, size_t errlen);

/* Serialise msg into a newly allocated frame. 0, -EMSGSIZE or -ENOMEM. */
int proto_encode(const json_t *msg, uint8_t **out, size_t *outlen);
/* Serialise msg followed by len bytes of data as one binary frame (len at
 * most UINT32_MAX). 0, -EMSGSIZE or -ENOMEM. */
int proto_encode_bin(const json_t *msg, const void *data, size_t len, uint8_t **out,
		     size_t *outlen);

/* New {"v":1,"type":type,"id":id}. */
json_t *proto_msg(const char *type, json_int_t id);
/* {"v":1,"type":"error","id":id,"code":code,"message":message} */
json_t *proto_error(json_int_t id, const char *code, const char *message);
/* {"v":1,"type":"result","id":id,"data":data} (steals data; NULL -> {}) */
json_t *proto_result(json_int_t id, json_t *data);

/* Fields of a frame type: name and JSON type, 's' string, 'i' integer, 'b'
 * boolean, 'o' object, 'a' array: required; the upper-case letter: optional,
 * but of that type when present (null counts as absent). Ends with {NULL, 0}. */
struct proto_field {
	const char *name;
	char type;
};
/* 0, or -EBADMSG with "FIELD is missing" / "FIELD must be a T" in err. */
int proto_check(const json_t *msg, const struct proto_field *fields, char *err, size_t errlen);

const char *proto_type(const json_t *msg);
json_int_t proto_id(const json_t *msg);
/* Typed field getters: NULL / def when absent or of another type. */
const char *proto_str(const json_t *obj, const char *key);
json_int_t proto_int(const json_t *obj, const char *key, json_int_t def);

#endif

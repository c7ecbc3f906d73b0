/* libFuzzer target for the wire decoder (common/proto.c).
 * The input is a byte stream as a peer could send it. It is fed to one
 * proto_decoder in chunks of pseudo-random sizes (derived from the input, so
 * a crash reproduces), and every complete frame is taken out. Invariants that
 * abort on failure: a decoded frame has v==1, a non-empty type and an integer
 * id; re-encoding it and decoding again gives an equal message. */
#include "common/proto.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check_round_trip(const json_t *msg)
{
	if (proto_int(msg, "v", 0) != PROTO_VERSION || !proto_type(msg) ||
	    !proto_type(msg)[0] || !json_is_integer(json_object_get(msg, "id")))
		abort();
	uint8_t *buf;
	size_t len;
	int r = proto_encode(msg, &buf, &len);
	if (r == -EMSGSIZE) /* escaping can make a re-encoded frame larger */
		return;
	if (r < 0)
		abort();
	proto_decoder d;
	proto_decoder_init(&d);
	json_t *again = NULL;
	if (proto_decoder_feed(&d, buf, len) < 0 || proto_decoder_next(&d, &again, NULL, 0) != 1 ||
	    !json_equal(msg, again) || d.len != 0)
		abort();
	json_decref(again);
	proto_decoder_free(&d);
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint32_t h = 2166136261u; /* FNV-1a of the input seeds the chunk sizes */
	for (size_t i = 0; i < size; i++)
		h = (h ^ data[i]) * 16777619u;
	proto_decoder d;
	proto_decoder_init(&d);
	size_t off = 0;
	int r = 0;
	while (off < size && r >= 0) {
		h ^= h << 13;
		h ^= h >> 17;
		h ^= h << 5;
		size_t chunk = 1 + h % 97;
		if (chunk > size - off)
			chunk = size - off;
		if (proto_decoder_feed(&d, data + off, chunk) < 0)
			break;
		off += chunk;
		json_t *msg;
		char err[128] = "";
		while ((r = proto_decoder_next(&d, &msg, err, sizeof err)) == 1) {
			check_round_trip(msg);
			json_decref(msg);
		}
		if (r < 0 && !err[0])
			abort(); /* every error carries a reason */
	}
	proto_decoder_free(&d);
	return 0;
}

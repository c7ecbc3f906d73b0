/* libFuzzer target for the binary frames of the wire decoder (common/proto.c,
 * proto_decoder_binary / proto_decoder_next_bin: the model push's data links).
 * The first input byte picks the largest payload accepted (0..255 x 64 bytes,
 * 0: binary frames refused); the rest is a byte stream as a peer could send
 * it, fed to one decoder in chunks of pseudo-random sizes (derived from the
 * input, so a crash reproduces), plain and binary frames mixed. Invariants
 * that abort on failure: a binary frame arrives only when enabled, its payload
 * lies inside the bytes fed and is at most the limit; re-encoding it
 * (proto_encode_bin) and decoding again gives an equal header and the same
 * payload; a plain frame still round-trips; every error carries a reason;
 * the decoder never holds more than one largest frame plus what one feed
 * brought beyond it. */
#include "common/proto.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check_bin(const json_t *msg, const uint8_t *bin, size_t binlen, size_t max)
{
	if (binlen > max || proto_int(msg, "v", 0) != PROTO_VERSION || !proto_type(msg) ||
	    !proto_type(msg)[0])
		abort();
	uint8_t *buf;
	size_t len;
	int r = proto_encode_bin(msg, bin, binlen, &buf, &len);
	if (r == -EMSGSIZE) /* escaping can make a re-encoded header larger */
		return;
	if (r < 0)
		abort();
	proto_decoder d;
	proto_decoder_init(&d);
	proto_decoder_binary(&d, max);
	json_t *again = NULL;
	const uint8_t *b2;
	size_t l2;
	if (proto_decoder_feed(&d, buf, len) < 0 ||
	    proto_decoder_next_bin(&d, &again, &b2, &l2, NULL, 0) != 1 || !b2 || l2 != binlen ||
	    memcmp(b2, bin, binlen) || !json_equal(msg, again))
		abort();
	json_decref(again);
	proto_decoder_free(&d);
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t max = (size_t)data[0] * 64;
	data++;
	size--;
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < size; i++)
		h = (h ^ data[i]) * 16777619u;
	proto_decoder d;
	proto_decoder_init(&d);
	proto_decoder_limit(&d, 4096);
	proto_decoder_binary(&d, max);
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
		if (d.cap > 4096 + 8 + max + 65536 + chunk && d.cap > d.len)
			abort(); /* more memory than the limits allow */
		json_t *msg;
		const uint8_t *bin;
		size_t binlen;
		char err[128] = "";
		while ((r = proto_decoder_next_bin(&d, &msg, &bin, &binlen, err, sizeof err)) == 1) {
			if (bin) {
				if (!max || bin < d.buf || bin + binlen > d.buf + d.len)
					abort();
				check_bin(msg, bin, binlen, max);
			} else if (!json_is_integer(json_object_get(msg, "id"))) {
				abort();
			}
			json_decref(msg);
		}
		if (r < 0 && !err[0])
			abort();
	}
	proto_decoder_free(&d);
	return 0;
}

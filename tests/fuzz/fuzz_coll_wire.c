/* libFuzzer target over libsparkcoll's wire parsers: message headers, the
 * HELLO handshake, header checks, peer lists and size strings. Seeds:
 * tests/fuzz/corpus/coll_wire (relay, one-shot, ring data headers, ABORT,
 * a verbs HELLO, a peer list, a size). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sc_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	sc_hdr_t h, want;
	sc_hello_t hello;
	const char *why = NULL;

	if (sc_hdr_decode(data, size, &h, &why) == 0) {
		uint8_t b[SC_HDR_LEN];
		sc_hdr_t again;
		sc_hdr_encode(&h, b);
		if (sc_hdr_decode(b, sizeof(b), &again, &why) != 0 || again.len != h.len ||
		    again.count != h.count)
			abort(); /* encode(decode(x)) must decode the same */
		if (h.kind == SC_MSG_DATA && (h.algo >= SC_ALGO_COUNT || h.dtype >= SC_DTYPE_COUNT ||
		                              h.op >= SC_OP_COUNT))
			abort(); /* a data header names a known algorithm (3 relay, 4 doubling), type, op */
		(void)sc_algo_name((sc_algo_t)h.algo);
		memset(&want, 0, sizeof(want));
		want.kind = SC_MSG_DATA;
		want.coll = SC_COLL_ALLREDUCE;
		(void)sc_hdr_check(&h, &want, &why);
	}
	if (size >= SC_HDR_LEN)
		(void)sc_hello_decode(data + SC_HDR_LEN, size - SC_HDR_LEN, &hello, &why);
	(void)sc_hello_decode(data, size, &hello, &why);
	if (size > 0 && size < 4096) {
		char *s = malloc(size + 1);
		char **peers = NULL;
		size_t sz;
		memcpy(s, data, size);
		s[size] = '\0';
		if (sc_parse_peers(s, 1 + data[0] % 8, &peers) == 0)
			sc_free_peers(peers, 1 + data[0] % 8);
		(void)sc_parse_size(s, &sz);
		free(s);
	}
	return 0;
}

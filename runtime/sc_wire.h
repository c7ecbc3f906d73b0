/* sc_wire.h - the bytes libsparkcoll puts on a link.
 *
 * Every message is a fixed 32-byte header (big-endian fields) followed by
 * `len` payload bytes. Data payloads are in host byte order; the HELLO
 * handshake refuses peers of the other byte order. Decoders check every field
 * and never read past the given length.
 *
 *  off size field
 *   0  2   magic 0x5343 ("SC")
 *   2  1   version (2: init gathers every rank's host id before the self-test;
 *          3: algorithms 3 = relay and 4 = doubling, and init calibrates
 *          them (relay against ring when one-shot is off, one-shot against
 *          doubling); ranks of different versions refuse each other's HELLO)
 *   3  1   kind (SC_MSG_*)
 *   4  4   seq: collective sequence number
 *   8  1   coll (SC_COLL_*)
 *   9  1   algo (sc_algo_t: 1 one-shot, 2 ring, 3 relay, 4 doubling)
 *  10  1   dtype (sc_dtype_t)
 *  11  1   op (sc_op_t)
 *  12  2   step within the collective
 *  14  2   src: sender rank
 *  16  8   count: elements of the collective (ABORT: the error code, negated)
 *  24  8   len: payload bytes
 */
#ifndef SC_WIRE_H
#define SC_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define SC_WIRE_MAGIC 0x5343u
#define SC_WIRE_VERSION 3u
#define SC_HDR_LEN 32
#define SC_MAX_WORLD 256
/* Largest payload one message may announce (a ring chunk of a huge buffer is split). */
#define SC_MAX_PAYLOAD ((uint64_t)1 << 40)

enum sc_msg_kind { SC_MSG_DATA = 1, SC_MSG_ABORT = 2, SC_MSG_HELLO = 3, SC_MSG_HELLO_ACK = 4,
                   SC_MSG_READY = 5, SC_MSG_RDV = 6, SC_MSG_TABLE = 7, SC_MSG_KIND_MAX = 7 };
enum sc_coll { SC_COLL_NONE = 0, SC_COLL_ALLREDUCE = 1, SC_COLL_ALLGATHER = 2, SC_COLL_BCAST = 3,
               SC_COLL_BARRIER = 4, SC_COLL_SELFTEST = 5, SC_COLL_MAX = 5 };

typedef struct sc_hdr {
	uint8_t kind;
	uint32_t seq;
	uint8_t coll, algo, dtype, op;
	uint16_t step, src;
	uint64_t count;
	uint64_t len;
} sc_hdr_t;

/* HELLO / HELLO_ACK payload: who the sender is and what it can do. */
#define SC_HELLO_LEN 64
#define SC_HELLO_F_LITTLE_ENDIAN 0x1u
#define SC_HELLO_F_VERBS 0x2u
typedef struct sc_hello {
	uint16_t rank, world_size;
	uint32_t flags;
	uint64_t job_id;
	/* verbs endpoint, valid with SC_HELLO_F_VERBS */
	uint32_t qpn, psn;
	uint8_t gid[16];
	uint16_t lid;
	uint8_t mtu;      /* enum ibv_mtu value */
	uint8_t pad;
	uint32_t slot_size, nslots;
} sc_hello_t;

void sc_hdr_encode(const sc_hdr_t *h, uint8_t out[SC_HDR_LEN]);
/* 0, or -EPROTO with a reason in *why (static string) for bad magic/version/
 * kind/field ranges. `len` is the number of bytes available in buf. */
int sc_hdr_decode(const uint8_t *buf, size_t len, sc_hdr_t *h, const char **why);
void sc_hello_encode(const sc_hello_t *h, uint8_t out[SC_HELLO_LEN]);
int sc_hello_decode(const uint8_t *buf, size_t len, sc_hello_t *h, const char **why);
/* Compare a received DATA header to the expected one: 0, or -SC_EMISMATCH /
 * -SC_EPEER with a static reason. ABORT headers are reported by the caller. */
int sc_hdr_check(const sc_hdr_t *got, const sc_hdr_t *want, const char **why);

/* Peer list "0=addr:port,1=addr:port,..." into addrs[world] (malloc'd strings). */
int sc_parse_peers(const char *s, int world_size, char ***addrs_out);
void sc_free_peers(char **addrs, int world_size);
/* "addr:port" or "[v6]:port" -> host (NUL-terminated) and port. */
int sc_split_hostport(const char *s, char *host, size_t hostlen, uint16_t *port);
/* "64M", "8", "4k", "1G" -> bytes. */
int sc_parse_size(const char *s, size_t *out);

#endif

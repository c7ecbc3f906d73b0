/* l2frame: the neighbour-discovery frame sparkd sends on every fabric netdev.
 *
 * CONTRACT
 * - A whole Ethernet frame: destination ff:ff:ff:ff:ff:ff (a broadcast crosses
 *   a switch or bridge; link-local multicast would not), source = the sending
 *   netdev's MAC, EtherType 0x88B5 (IEEE local experimental), then the payload
 *   below, every integer big-endian, every string length-prefixed (no NUL).
 * - An HMAC-SHA256 over the payload (magic .. last field) authenticates it.
 *   Its key is derived from the cluster secret (the hex string a node gets at
 *   join): key = HMAC-SHA256(secret bytes as given, "sparkctl l2disc v1"), so
 *   the secret itself never keys anything but this derivation.
 * - topo_l2frame_decode() checks every length before use and returns one
 *   distinct code per reason, in this order: not ours (EtherType or magic),
 *   unsupported version, truncated, malformed (bad field value), other cluster
 *   (cluster id differs: no key check is tried), bad HMAC. Bytes after the
 *   declared payload length (Ethernet padding) are ignored.
 * - Pure functions, no I/O, no allocation; safe from any thread.
 *
 * PAYLOAD (offsets from the end of the 14-byte Ethernet header)
 *   0  magic "SPKD"          4  version (1)        5  flags (0; others malformed)
 *   6  u16 payload length (magic .. HMAC inclusive)  8  u64 sequence
 *  16  u8 len + cluster id (1..64)   u8 len + node id (1..64)
 *      u8 len + node name (1..63)    u8 len + port (1..15)
 *      u8 twin index (0..7)          u8 len + netdev (1..15)
 *      u32 MTU                       6 bytes sender MAC (= Ethernet source)
 *      [later versions may append fields here; v1 readers skip them]
 *      32 bytes HMAC-SHA256
 * Strings are printable ASCII without spaces (0x21..0x7e).
 */
#ifndef SPARK_TOPO_L2FRAME_H
#define SPARK_TOPO_L2FRAME_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#define TOPO_L2_ETHERTYPE 0x88B5
#define TOPO_L2_VERSION 1
#define TOPO_L2_ETH_HLEN 14
#define TOPO_L2_HMAC_LEN 32
#define TOPO_L2_MAX_ID 64   /* cluster id, node id */
#define TOPO_L2_MAX_NAME 63 /* node name */
#define TOPO_L2_MAX_PORT 15
#define TOPO_L2_MAX_NETDEV 15 /* IFNAMSIZ - 1 */
#define TOPO_L2_MAX_TWIN 7
/* Largest frame encode can produce (Ethernet header included), well under 1500. */
#define TOPO_L2_MAX_FRAME 320

/* Decode results (negative errno-style, distinct). */
#define TOPO_L2_ENOTOURS (-ENOMSG)         /* not 0x88B5 or not our magic */
#define TOPO_L2_EVERSION (-EPROTONOSUPPORT) /* our magic, unknown version */
#define TOPO_L2_ETRUNC (-EBADMSG)          /* shorter than its fields say */
#define TOPO_L2_EMALFORMED (-EPROTO)       /* a field out of range */
#define TOPO_L2_EOTHERCLUSTER (-EXDEV)     /* valid frame of another cluster */
#define TOPO_L2_EBADHMAC (-EACCES)         /* our cluster id, wrong HMAC */

struct topo_l2frame {
	uint8_t dst_mac[6]; /* decode only: the Ethernet destination */
	uint8_t src_mac[6]; /* Ethernet source = sender MAC field */
	uint64_t seq;
	char cluster_id[TOPO_L2_MAX_ID + 1];
	char node_id[TOPO_L2_MAX_ID + 1];
	char node_name[TOPO_L2_MAX_NAME + 1];
	char port[TOPO_L2_MAX_PORT + 1];
	unsigned twin;
	char netdev[TOPO_L2_MAX_NETDEV + 1];
	uint32_t mtu;
};

struct topo_l2key {
	uint8_t k[32];
};

/* Derive the frame key from the cluster secret. 0, or -EINVAL for an empty
 * secret, -EIO if OpenSSL fails. */
int topo_l2key_init(struct topo_l2key *key, const char *secret);

/* Encode f (src_mac, seq, ids, port, twin, netdev, mtu; dst_mac is ignored:
 * always broadcast) into buf. *outlen = frame length. 0, -EINVAL for a field
 * out of range (empty or too long string, bad characters, twin > 7),
 * -ENOSPC if buflen is too small (TOPO_L2_MAX_FRAME always suffices). */
int topo_l2frame_encode(const struct topo_l2frame *f, const struct topo_l2key *key, uint8_t *buf,
			size_t buflen, size_t *outlen);

/* Decode a received Ethernet frame. cluster_id: ours (frames of any other id
 * give TOPO_L2_EOTHERCLUSTER after being parsed into out). On success and on
 * EOTHERCLUSTER / EBADHMAC, out holds the parsed (unauthenticated for the
 * latter two) fields; on the other errors out is zeroed. */
int topo_l2frame_decode(const uint8_t *buf, size_t len, const char *cluster_id,
			const struct topo_l2key *key, struct topo_l2frame *out);

/* A short lower-case reason for a decode code: "ok", "not_ours",
 * "bad_version", "truncated", "malformed", "other_cluster", "bad_hmac". */
const char *topo_l2frame_strerror(int code);

#endif

/* Wire header and handshake codecs, header checks, peer list and size parsing. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "sc_internal.h"

static sc_hdr_t sample(void)
{
	sc_hdr_t h = {0};
	h.kind = SC_MSG_DATA;
	h.seq = 0xdeadbeef;
	h.coll = SC_COLL_ALLREDUCE;
	h.algo = SC_ALGO_RING;
	h.dtype = SC_BF16;
	h.op = SC_MIN;
	h.step = 513;
	h.src = 7;
	h.count = 1000003;
	h.len = 2000006;
	return h;
}

Test(wire, header_roundtrip_big_endian)
{
	sc_hdr_t h = sample(), g;
	uint8_t b[SC_HDR_LEN];
	sc_hdr_encode(&h, b);
	cr_assert_eq(b[0], 0x53);
	cr_assert_eq(b[1], 0x43);
	cr_assert_eq(b[4], 0xde); /* seq big-endian */
	cr_assert_eq(b[7], 0xef);
	cr_assert_eq(sc_hdr_decode(b, sizeof(b), &g, NULL), 0);
	cr_assert(g.kind == h.kind && g.seq == h.seq && g.coll == h.coll && g.algo == h.algo &&
	          g.dtype == h.dtype && g.op == h.op && g.step == h.step && g.src == h.src &&
	          g.count == h.count && g.len == h.len);
}

Test(wire, relay_header_roundtrip)
{
	sc_hdr_t h = sample(), g;
	uint8_t b[SC_HDR_LEN];
	h.algo = SC_ALGO_RELAY;
	h.step = 0x8000 | (3 << 8) | 2; /* leftward stream, segment 3, step 2 */
	sc_hdr_encode(&h, b);
	cr_assert_eq(b[2], SC_WIRE_VERSION);
	cr_assert_eq(b[9], 3);
	cr_assert_eq(sc_hdr_decode(b, sizeof(b), &g, NULL), 0);
	cr_assert_eq(g.algo, SC_ALGO_RELAY);
	cr_assert_eq(g.step, h.step);
	cr_assert_str_eq(sc_algo_name(SC_ALGO_RELAY), "relay");
	sc_algo_t a = SC_ALGO_AUTO;
	cr_assert_eq(sc_algo_parse("relay", &a), 0);
	cr_assert_eq(a, SC_ALGO_RELAY);
	cr_assert_eq(sc_algo_parse("RELAY", &a), 0);
	cr_assert_eq(sc_algo_parse("all", &a), -EINVAL);
	cr_assert_str_eq(sc_algo_name(SC_ALGO_DOUBLING), "doubling");
	cr_assert_eq(sc_algo_parse("doubling", &a), 0);
	cr_assert_eq(a, SC_ALGO_DOUBLING);
	cr_assert_str_eq(sc_algo_name((sc_algo_t)SC_ALGO_COUNT), "?");
}

Test(wire, header_errors)
{
	sc_hdr_t h = sample(), g;
	uint8_t b[SC_HDR_LEN], c[SC_HDR_LEN];
	const char *why = NULL;
	sc_hdr_encode(&h, b);
	cr_assert_eq(sc_hdr_decode(b, SC_HDR_LEN - 1, &g, &why), -EPROTO);
	cr_assert_str_eq(why, "short header");
	cr_assert_eq(sc_hdr_decode(NULL, 40, &g, &why), -EPROTO);
#define MUT(off, v, msg)                                                        \
	do {                                                                    \
		memcpy(c, b, sizeof(c));                                        \
		c[off] = (v);                                                   \
		cr_assert_eq(sc_hdr_decode(c, sizeof(c), &g, &why), -EPROTO);   \
		cr_assert_str_eq(why, msg);                                     \
	} while (0)
	MUT(0, 0x00, "bad magic");
	MUT(2, 9, "unsupported version");
	MUT(2, 1, "unsupported version"); /* before the host-id exchange at init */
	MUT(2, 2, "unsupported version"); /* before relay (and its calibration at init) */
	MUT(3, 0, "unknown message kind");
	MUT(3, 99, "unknown message kind");
	MUT(8, 0, "unknown collective");
	MUT(8, 42, "unknown collective");
	MUT(9, 5, "algorithm, type or op out of range"); /* 3 relay, 4 doubling are valid */
	MUT(10, 5, "algorithm, type or op out of range");
	MUT(11, 3, "algorithm, type or op out of range");
	MUT(14, 0x01, "sender rank out of range"); /* src = 263 */
	MUT(24, 0xff, "payload too large");
	MUT(16, 0x01, "count too large");
	/* payload larger than count * element size */
	h.len = h.count * 2 + 1;
	sc_hdr_encode(&h, c);
	cr_assert_eq(sc_hdr_decode(c, sizeof(c), &g, &why), -EPROTO);
	cr_assert_str_eq(why, "payload larger than the collective");
	/* ABORT carries no payload; HELLO exactly one hello */
	memset(&h, 0, sizeof(h));
	h.kind = SC_MSG_ABORT;
	h.len = 1;
	sc_hdr_encode(&h, c);
	cr_assert_eq(sc_hdr_decode(c, sizeof(c), &g, &why), -EPROTO);
	h.len = 0;
	h.count = SC_EMISMATCH;
	sc_hdr_encode(&h, c);
	cr_assert_eq(sc_hdr_decode(c, sizeof(c), &g, &why), 0);
	cr_assert_eq(g.count, SC_EMISMATCH);
	h.kind = SC_MSG_HELLO;
	h.len = 3;
	sc_hdr_encode(&h, c);
	cr_assert_eq(sc_hdr_decode(c, sizeof(c), &g, &why), -EPROTO);
	h.kind = SC_MSG_RDV;
	sc_hdr_encode(&h, c);
	cr_assert_eq(sc_hdr_decode(c, sizeof(c), &g, &why), -EPROTO);
	h.kind = SC_MSG_TABLE;
	h.len = 1u << 20;
	sc_hdr_encode(&h, c);
	cr_assert_eq(sc_hdr_decode(c, sizeof(c), &g, &why), -EPROTO);
}

Test(wire, header_check_names_the_mismatch)
{
	sc_hdr_t want = sample(), got = sample();
	const char *why = NULL;
	cr_assert_eq(sc_hdr_check(&got, &want, &why), 0);
	got.count++;
	cr_assert_eq(sc_hdr_check(&got, &want, &why), -SC_EMISMATCH);
	cr_assert(strstr(why, "count"));
	got = sample();
	got.dtype = SC_F32;
	cr_assert_eq(sc_hdr_check(&got, &want, &why), -SC_EMISMATCH);
	cr_assert(strstr(why, "type"));
	got = sample();
	got.op = SC_SUM;
	cr_assert_eq(sc_hdr_check(&got, &want, &why), -SC_EMISMATCH);
	cr_assert(strstr(why, "op"));
	got = sample();
	got.seq++;
	cr_assert_eq(sc_hdr_check(&got, &want, &why), -SC_EMISMATCH);
	got = sample();
	got.coll = SC_COLL_ALLGATHER;
	cr_assert_eq(sc_hdr_check(&got, &want, &why), -SC_EMISMATCH);
	got = sample();
	got.algo = SC_ALGO_ONESHOT;
	cr_assert_eq(sc_hdr_check(&got, &want, &why), -SC_EMISMATCH);
	cr_assert(strstr(why, "algorithm"));
	got = sample();
	got.algo = SC_ALGO_RELAY;
	cr_assert_eq(sc_hdr_check(&got, &want, &why), -SC_EMISMATCH);
	cr_assert(strstr(why, "algorithm"));
	got = sample();
	got.src = 3;
	cr_assert_eq(sc_hdr_check(&got, &want, &why), -SC_EPEER);
	got = sample();
	got.kind = SC_MSG_HELLO;
	cr_assert_eq(sc_hdr_check(&got, &want, &why), -SC_EPEER);
}

Test(wire, hello_roundtrip_and_errors)
{
	sc_hello_t h = {0}, g;
	uint8_t b[SC_HELLO_LEN];
	const char *why = NULL;
	h.rank = 3;
	h.world_size = 8;
	h.flags = SC_HELLO_F_LITTLE_ENDIAN | SC_HELLO_F_VERBS;
	h.job_id = 0x0123456789abcdefull;
	h.qpn = 0x1234;
	h.psn = 0xabcdef;
	for (int i = 0; i < 16; i++)
		h.gid[i] = (uint8_t)i;
	h.mtu = 5;
	h.slot_size = 65536;
	h.nslots = 32;
	sc_hello_encode(&h, b);
	cr_assert_eq(sc_hello_decode(b, sizeof(b), &g, &why), 0);
	cr_assert(g.rank == h.rank && g.world_size == h.world_size && g.flags == h.flags &&
	          g.job_id == h.job_id && g.qpn == h.qpn && g.psn == h.psn &&
	          memcmp(g.gid, h.gid, 16) == 0 && g.mtu == h.mtu && g.slot_size == h.slot_size &&
	          g.nslots == h.nslots);
	cr_assert_eq(sc_hello_decode(b, sizeof(b) - 1, &g, &why), -EPROTO);
	h.rank = 8;
	sc_hello_encode(&h, b);
	cr_assert_eq(sc_hello_decode(b, sizeof(b), &g, &why), -EPROTO);
	h.rank = 3;
	h.flags |= 0x80;
	sc_hello_encode(&h, b);
	cr_assert_eq(sc_hello_decode(b, sizeof(b), &g, &why), -EPROTO);
	h.flags = SC_HELLO_F_VERBS;
	h.qpn = 0x1000000;
	sc_hello_encode(&h, b);
	cr_assert_eq(sc_hello_decode(b, sizeof(b), &g, &why), -EPROTO);
	h.qpn = 5;
	h.mtu = 9;
	sc_hello_encode(&h, b);
	cr_assert_eq(sc_hello_decode(b, sizeof(b), &g, &why), -EPROTO);
	h.mtu = 3;
	h.slot_size = 10;
	sc_hello_encode(&h, b);
	cr_assert_eq(sc_hello_decode(b, sizeof(b), &g, &why), -EPROTO);
	/* without the verbs flag the verbs fields are not checked */
	h.flags = 0;
	sc_hello_encode(&h, b);
	cr_assert_eq(sc_hello_decode(b, sizeof(b), &g, &why), 0);
}

Test(wire, peer_lists)
{
	char **p = NULL;
	cr_assert_eq(sc_parse_peers("1=10.0.0.2:29500, 0=10.0.0.1:29500", 2, &p), 0);
	cr_assert_str_eq(p[0], "10.0.0.1:29500");
	cr_assert_str_eq(p[1], "10.0.0.2:29500");
	sc_free_peers(p, 2);
	cr_assert_eq(sc_parse_peers("0=[fe80::1%eth0]:1,1=[fd00::2]:2,2=host.example:3", 3, &p), 0);
	cr_assert_str_eq(p[1], "[fd00::2]:2");
	sc_free_peers(p, 3);
	cr_assert_eq(sc_parse_peers("0=a:1", 2, &p), -EINVAL);          /* missing rank */
	cr_assert_eq(sc_parse_peers("0=a:1,0=b:2", 2, &p), -EINVAL);    /* duplicate */
	cr_assert_eq(sc_parse_peers("0=a:1,2=b:2", 2, &p), -EINVAL);    /* out of range */
	cr_assert_eq(sc_parse_peers("0=a:0,1=b:2", 2, &p), -EINVAL);    /* port 0 */
	cr_assert_eq(sc_parse_peers("0=a:70000,1=b:2", 2, &p), -EINVAL);
	cr_assert_eq(sc_parse_peers("0=a,1=b:2", 2, &p), -EINVAL);      /* no port */
	cr_assert_eq(sc_parse_peers("0=fe80::1:5,1=b:2", 2, &p), -EINVAL); /* bare v6 */
	cr_assert_eq(sc_parse_peers("x=a:1,1=b:2", 2, &p), -EINVAL);
	cr_assert_eq(sc_parse_peers("0=a:1,,1=b:2", 2, &p), -EINVAL);
	cr_assert_eq(sc_parse_peers("", 1, &p), -EINVAL);
	cr_assert_null(p);
}

Test(wire, hostport_and_sizes)
{
	char h[64];
	uint16_t port;
	size_t s;
	cr_assert_eq(sc_split_hostport("[::1]:80", h, sizeof(h), &port), 0);
	cr_assert_str_eq(h, "::1");
	cr_assert_eq(port, 80);
	cr_assert_eq(sc_split_hostport("[::1]80", h, sizeof(h), &port), -EINVAL);
	cr_assert_eq(sc_split_hostport(":80", h, sizeof(h), &port), -EINVAL);
	cr_assert_eq(sc_split_hostport("a:-1", h, sizeof(h), &port), -EINVAL);
	cr_assert_eq(sc_split_hostport("a:1x", h, sizeof(h), &port), -EINVAL);
	cr_assert_eq(sc_parse_size("64M", &s), 0);
	cr_assert_eq(s, 64u << 20);
	cr_assert_eq(sc_parse_size("4k", &s), 0);
	cr_assert_eq(s, 4096);
	cr_assert_eq(sc_parse_size("8", &s), 0);
	cr_assert_eq(s, 8);
	cr_assert_eq(sc_parse_size("1GB", &s), 0);
	cr_assert_eq(s, 1u << 30);
	cr_assert_eq(sc_parse_size("-1", &s), -EINVAL);
	cr_assert_eq(sc_parse_size("3X", &s), -EINVAL);
	cr_assert_eq(sc_parse_size("99999999999999999999G", &s), -EINVAL);
}

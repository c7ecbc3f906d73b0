/* The discovery frame: round trip, every decode error, every cut length. */
#include "topology/l2frame.h"

#include <criterion/criterion.h>
#include <string.h>

#define CLUSTER "c-7f3a"

static struct topo_l2frame sample(void)
{
	struct topo_l2frame f;
	memset(&f, 0, sizeof f);
	static const uint8_t mac[6] = {0x02, 0x11, 0x22, 0x33, 0x44, 0x55};
	memcpy(f.src_mac, mac, 6);
	f.seq = 0x0102030405060708ull;
	strcpy(f.cluster_id, CLUSTER);
	strcpy(f.node_id, "n-1234");
	strcpy(f.node_name, "spark-1");
	strcpy(f.port, "1");
	f.twin = 1;
	strcpy(f.netdev, "enP2p1s0f1np1");
	f.mtu = 9000;
	return f;
}

static size_t encode(const struct topo_l2frame *f, const struct topo_l2key *k, uint8_t *buf)
{
	size_t len = 0;
	cr_assert_eq(topo_l2frame_encode(f, k, buf, TOPO_L2_MAX_FRAME, &len), 0);
	return len;
}

Test(l2frame, round_trip_and_wire_layout)
{
	struct topo_l2key k;
	cr_assert_eq(topo_l2key_init(&k, "secret-hex"), 0);
	struct topo_l2frame f = sample(), g;
	uint8_t buf[TOPO_L2_MAX_FRAME];
	size_t len = encode(&f, &k, buf);
	/* Broadcast, source MAC, EtherType big-endian, magic, version. */
	for (int i = 0; i < 6; i++)
		cr_assert_eq(buf[i], 0xff);
	cr_assert_eq(memcmp(buf + 6, f.src_mac, 6), 0);
	cr_assert_eq(buf[12], 0x88);
	cr_assert_eq(buf[13], 0xB5);
	cr_assert_eq(memcmp(buf + 14, "SPKD", 4), 0);
	cr_assert_eq(buf[18], 1);
	cr_assert_eq(((size_t)buf[20] << 8 | buf[21]), len - TOPO_L2_ETH_HLEN);
	cr_assert_eq(buf[22], 0x01); /* sequence, most significant byte first */
	cr_assert_eq(buf[29], 0x08);
	cr_assert_eq(topo_l2frame_decode(buf, len, CLUSTER, &k, &g), 0);
	cr_assert_str_eq(g.node_id, "n-1234");
	cr_assert_str_eq(g.node_name, "spark-1");
	cr_assert_str_eq(g.port, "1");
	cr_assert_str_eq(g.netdev, "enP2p1s0f1np1");
	cr_assert_eq(g.twin, 1);
	cr_assert_eq(g.mtu, 9000);
	cr_assert_eq(g.seq, f.seq);
	cr_assert_eq(memcmp(g.src_mac, f.src_mac, 6), 0);
	cr_assert_eq(g.dst_mac[0], 0xff);
	/* Ethernet padding after the payload is ignored. */
	uint8_t pad[TOPO_L2_MAX_FRAME + 64];
	memcpy(pad, buf, len);
	memset(pad + len, 0, 64);
	cr_assert_eq(topo_l2frame_decode(pad, len + 64, CLUSTER, &k, &g), 0);
}

Test(l2frame, decode_errors_are_distinct)
{
	struct topo_l2key k, wrong;
	topo_l2key_init(&k, "secret-hex");
	topo_l2key_init(&wrong, "other");
	struct topo_l2frame f = sample(), g;
	uint8_t buf[TOPO_L2_MAX_FRAME], x[TOPO_L2_MAX_FRAME];
	size_t len = encode(&f, &k, buf);

	cr_assert_eq(topo_l2frame_decode(buf, len, "c-other", &k, &g), TOPO_L2_EOTHERCLUSTER);
	cr_assert_str_eq(g.cluster_id, CLUSTER); /* parsed, for the counters */
	cr_assert_eq(topo_l2frame_decode(buf, len, CLUSTER, &wrong, &g), TOPO_L2_EBADHMAC);
	cr_assert_str_eq(g.node_name, "spark-1");

	memcpy(x, buf, len);
	x[12] = 0x08; /* IPv4 EtherType */
	cr_assert_eq(topo_l2frame_decode(x, len, CLUSTER, &k, &g), TOPO_L2_ENOTOURS);
	memcpy(x, buf, len);
	x[14] = 'X';
	cr_assert_eq(topo_l2frame_decode(x, len, CLUSTER, &k, &g), TOPO_L2_ENOTOURS);
	memcpy(x, buf, len);
	x[18] = 2;
	cr_assert_eq(topo_l2frame_decode(x, len, CLUSTER, &k, &g), TOPO_L2_EVERSION);
	/* Any flipped bit in the authenticated part: bad HMAC or malformed. */
	for (size_t i = 30; i < len; i++) {
		memcpy(x, buf, len);
		x[i] ^= 0x01;
		int r = topo_l2frame_decode(x, len, CLUSTER, &k, &g);
		cr_assert(r == TOPO_L2_EBADHMAC || r == TOPO_L2_EMALFORMED || r == TOPO_L2_EOTHERCLUSTER,
			  "byte %zu: %s", i, topo_l2frame_strerror(r));
	}
	/* A source MAC that differs from the authenticated one. */
	memcpy(x, buf, len);
	x[11] ^= 0x80;
	cr_assert_eq(topo_l2frame_decode(x, len, CLUSTER, &k, &g), TOPO_L2_EMALFORMED);
	/* Declared length below the minimum. */
	memcpy(x, buf, len);
	x[20] = 0;
	x[21] = 20;
	cr_assert_eq(topo_l2frame_decode(x, len, CLUSTER, &k, &g), TOPO_L2_EMALFORMED);
	cr_assert_str_eq(topo_l2frame_strerror(TOPO_L2_EBADHMAC), "bad_hmac");
	cr_assert_str_eq(topo_l2frame_strerror(TOPO_L2_ETRUNC), "truncated");
	cr_assert_str_eq(topo_l2frame_strerror(TOPO_L2_EOTHERCLUSTER), "other_cluster");
}

Test(l2frame, every_cut_length_is_an_error)
{
	struct topo_l2key k;
	topo_l2key_init(&k, "secret-hex");
	struct topo_l2frame f = sample(), g;
	uint8_t buf[TOPO_L2_MAX_FRAME];
	size_t len = encode(&f, &k, buf);
	for (size_t n = 0; n < len; n++) {
		/* An exact-size copy so a read past n would be caught by ASan. */
		uint8_t *cut = malloc(n ? n : 1);
		memcpy(cut, buf, n);
		int r = topo_l2frame_decode(cut, n, CLUSTER, &k, &g);
		free(cut);
		int want = n < 18 ? TOPO_L2_ENOTOURS : TOPO_L2_ETRUNC;
		cr_assert_eq(r, want, "length %zu: %s", n, topo_l2frame_strerror(r));
		cr_assert_eq(g.node_id[0], 0);
	}
}

Test(l2frame, encode_checks_every_field)
{
	struct topo_l2key k;
	topo_l2key_init(&k, "s");
	uint8_t buf[TOPO_L2_MAX_FRAME];
	size_t len;
	struct topo_l2frame f = sample();
	f.twin = 8;
	cr_assert_eq(topo_l2frame_encode(&f, &k, buf, sizeof buf, &len), -EINVAL);
	f = sample();
	f.node_name[0] = '\0';
	cr_assert_eq(topo_l2frame_encode(&f, &k, buf, sizeof buf, &len), -EINVAL);
	f = sample();
	strcpy(f.node_name, "has space");
	cr_assert_eq(topo_l2frame_encode(&f, &k, buf, sizeof buf, &len), -EINVAL);
	f = sample();
	memset(f.cluster_id, 'c', TOPO_L2_MAX_ID);
	f.cluster_id[TOPO_L2_MAX_ID] = '\0';
	cr_assert_eq(topo_l2frame_encode(&f, &k, buf, sizeof buf, &len), 0); /* longest allowed */
	memset(f.node_id, 'n', TOPO_L2_MAX_ID);
	memset(f.node_name, 'm', TOPO_L2_MAX_NAME);
	memset(f.port, 'p', TOPO_L2_MAX_PORT);
	memset(f.netdev, 'd', TOPO_L2_MAX_NETDEV);
	cr_assert_eq(topo_l2frame_encode(&f, &k, buf, sizeof buf, &len), 0);
	cr_assert_leq(len, TOPO_L2_MAX_FRAME);
	struct topo_l2frame g;
	cr_assert_eq(topo_l2frame_decode(buf, len, f.cluster_id, &k, &g), 0);
	cr_assert_eq(strlen(g.netdev), TOPO_L2_MAX_NETDEV);
	cr_assert_eq(topo_l2frame_encode(&f, &k, buf, 100, &len), -ENOSPC);
	cr_assert_eq(topo_l2key_init(&k, ""), -EINVAL);
}

/* l2frame: encode/decode of the neighbour-discovery frame (see l2frame.h). */
#include "topology/l2frame.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <string.h>

static const uint8_t l2_magic[4] = {'S', 'P', 'K', 'D'};
static const char l2_kdf_label[] = "sparkctl l2disc v1";
#define L2_FIXED_HDR 16 /* magic, version, flags, length, sequence */

int topo_l2key_init(struct topo_l2key *key, const char *secret)
{
	if (!key || !secret || !*secret)
		return -EINVAL;
	unsigned int mdlen = 0;
	if (!HMAC(EVP_sha256(), secret, (int)strlen(secret), (const unsigned char *)l2_kdf_label,
		  sizeof l2_kdf_label - 1, key->k, &mdlen) ||
	    mdlen != sizeof key->k)
		return -EIO;
	return 0;
}

static int valid_str(const char *s, size_t max)
{
	size_t n = strnlen(s, max + 1);
	if (n == 0 || n > max)
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
			return 0;
	return 1;
}

static int valid_bytes(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] < 0x21 || p[i] > 0x7e)
			return 0;
	return 1;
}

struct wbuf {
	uint8_t *p;
	size_t len, off;
	int err;
};

static void put(struct wbuf *w, const void *data, size_t n)
{
	if (w->err || n > w->len - w->off) {
		w->err = 1;
		return;
	}
	memcpy(w->p + w->off, data, n);
	w->off += n;
}

static void put_u8(struct wbuf *w, unsigned v)
{
	uint8_t b = (uint8_t)v;
	put(w, &b, 1);
}

static void put_be(struct wbuf *w, uint64_t v, unsigned bytes)
{
	uint8_t b[8];
	for (unsigned i = 0; i < bytes; i++)
		b[i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
	put(w, b, bytes);
}

static void put_str(struct wbuf *w, const char *s)
{
	size_t n = strlen(s);
	put_u8(w, (unsigned)n);
	put(w, s, n);
}

static int mac_payload(const struct topo_l2key *key, const uint8_t *p, size_t n,
		       uint8_t out[TOPO_L2_HMAC_LEN])
{
	unsigned int mdlen = 0;
	if (!HMAC(EVP_sha256(), key->k, sizeof key->k, p, n, out, &mdlen) ||
	    mdlen != TOPO_L2_HMAC_LEN)
		return -EIO;
	return 0;
}

int topo_l2frame_encode(const struct topo_l2frame *f, const struct topo_l2key *key, uint8_t *buf,
			size_t buflen, size_t *outlen)
{
	if (!f || !key || !buf || !outlen)
		return -EINVAL;
	if (!valid_str(f->cluster_id, TOPO_L2_MAX_ID) || !valid_str(f->node_id, TOPO_L2_MAX_ID) ||
	    !valid_str(f->node_name, TOPO_L2_MAX_NAME) || !valid_str(f->port, TOPO_L2_MAX_PORT) ||
	    !valid_str(f->netdev, TOPO_L2_MAX_NETDEV) || f->twin > TOPO_L2_MAX_TWIN)
		return -EINVAL;
	struct wbuf w = {buf, buflen, 0, 0};
	static const uint8_t bcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	put(&w, bcast, 6);
	put(&w, f->src_mac, 6);
	put_be(&w, TOPO_L2_ETHERTYPE, 2);
	size_t start = w.off;
	put(&w, l2_magic, 4);
	put_u8(&w, TOPO_L2_VERSION);
	put_u8(&w, 0);
	size_t len_off = w.off;
	put_be(&w, 0, 2); /* payload length, filled below */
	put_be(&w, f->seq, 8);
	put_str(&w, f->cluster_id);
	put_str(&w, f->node_id);
	put_str(&w, f->node_name);
	put_str(&w, f->port);
	put_u8(&w, f->twin);
	put_str(&w, f->netdev);
	put_be(&w, f->mtu, 4);
	put(&w, f->src_mac, 6);
	if (w.err || buflen - w.off < TOPO_L2_HMAC_LEN)
		return -ENOSPC;
	size_t plen = w.off - start + TOPO_L2_HMAC_LEN;
	buf[len_off] = (uint8_t)(plen >> 8);
	buf[len_off + 1] = (uint8_t)plen;
	if (mac_payload(key, buf + start, w.off - start, buf + w.off) < 0)
		return -EIO;
	w.off += TOPO_L2_HMAC_LEN;
	*outlen = w.off;
	return 0;
}

struct rbuf {
	const uint8_t *p;
	size_t len, off;
};

static int get(struct rbuf *r, void *out, size_t n)
{
	if (n > r->len - r->off)
		return -1;
	memcpy(out, r->p + r->off, n);
	r->off += n;
	return 0;
}

static uint64_t be(const uint8_t *b, unsigned bytes)
{
	uint64_t v = 0;
	for (unsigned i = 0; i < bytes; i++)
		v = (v << 8) | b[i];
	return v;
}

/* A length-prefixed string: -1 truncated, -2 malformed, 0 ok. */
static int get_str(struct rbuf *r, char *out, size_t max)
{
	uint8_t n;
	if (get(r, &n, 1) < 0)
		return -1;
	if (n > r->len - r->off)
		return -1;
	if (n == 0 || n > max || !valid_bytes(r->p + r->off, n))
		return -2;
	memcpy(out, r->p + r->off, n);
	out[n] = '\0';
	r->off += n;
	return 0;
}

int topo_l2frame_decode(const uint8_t *buf, size_t len, const char *cluster_id,
			const struct topo_l2key *key, struct topo_l2frame *out)
{
	if (!out)
		return -EINVAL;
	memset(out, 0, sizeof *out);
	if (!buf || len < TOPO_L2_ETH_HLEN || be(buf + 12, 2) != TOPO_L2_ETHERTYPE)
		return TOPO_L2_ENOTOURS;
	const uint8_t *p = buf + TOPO_L2_ETH_HLEN;
	size_t avail = len - TOPO_L2_ETH_HLEN;
	if (avail < sizeof l2_magic || memcmp(p, l2_magic, sizeof l2_magic) != 0)
		return TOPO_L2_ENOTOURS;
	if (avail < 5)
		return TOPO_L2_ETRUNC;
	if (p[4] != TOPO_L2_VERSION)
		return TOPO_L2_EVERSION;
	if (avail < L2_FIXED_HDR)
		return TOPO_L2_ETRUNC;
	size_t plen = (size_t)be(p + 6, 2);
	if (plen < L2_FIXED_HDR + TOPO_L2_HMAC_LEN || p[5] != 0)
		return TOPO_L2_EMALFORMED; /* v1 defines no flag */
	if (plen > avail)
		return TOPO_L2_ETRUNC;
	/* Fields live between the fixed header and the HMAC. */
	struct rbuf r = {p, plen - TOPO_L2_HMAC_LEN, L2_FIXED_HDR};
	int rc = 0;
	uint8_t b[6];
	out->seq = be(p + 8, 8);
	if ((rc = get_str(&r, out->cluster_id, TOPO_L2_MAX_ID)) == 0 &&
	    (rc = get_str(&r, out->node_id, TOPO_L2_MAX_ID)) == 0 &&
	    (rc = get_str(&r, out->node_name, TOPO_L2_MAX_NAME)) == 0 &&
	    (rc = get_str(&r, out->port, TOPO_L2_MAX_PORT)) == 0) {
		if (get(&r, b, 1) < 0)
			rc = -1;
		else if (b[0] > TOPO_L2_MAX_TWIN)
			rc = -2;
		else
			out->twin = b[0];
	}
	if (rc == 0)
		rc = get_str(&r, out->netdev, TOPO_L2_MAX_NETDEV);
	if (rc == 0) {
		if (get(&r, b, 4) < 0)
			rc = -1;
		else
			out->mtu = (uint32_t)be(b, 4);
	}
	if (rc == 0 && get(&r, out->src_mac, 6) < 0)
		rc = -1;
	if (rc != 0) {
		/* A field out of range, or the declared length holds fewer bytes
		 * than the fields need (a frame cut on the way was caught above by
		 * plen > avail, so this is the sender's own inconsistency). */
		memset(out, 0, sizeof *out);
		return TOPO_L2_EMALFORMED;
	}
	if (memcmp(out->src_mac, buf + 6, 6) != 0 || (out->src_mac[0] & 1) || out->mtu < 68 ||
	    out->mtu > 65535) {
		memset(out, 0, sizeof *out);
		return TOPO_L2_EMALFORMED;
	}
	memcpy(out->dst_mac, buf, 6);
	if (!cluster_id || strcmp(cluster_id, out->cluster_id) != 0)
		return TOPO_L2_EOTHERCLUSTER;
	if (!key)
		return TOPO_L2_EBADHMAC;
	uint8_t mac[TOPO_L2_HMAC_LEN];
	if (mac_payload(key, p, plen - TOPO_L2_HMAC_LEN, mac) < 0)
		return TOPO_L2_EBADHMAC;
	if (CRYPTO_memcmp(mac, p + plen - TOPO_L2_HMAC_LEN, TOPO_L2_HMAC_LEN) != 0)
		return TOPO_L2_EBADHMAC;
	return 0;
}

const char *topo_l2frame_strerror(int code)
{
	switch (code) {
	case 0:
		return "ok";
	case TOPO_L2_ENOTOURS:
		return "not_ours";
	case TOPO_L2_EVERSION:
		return "bad_version";
	case TOPO_L2_ETRUNC:
		return "truncated";
	case TOPO_L2_EMALFORMED:
		return "malformed";
	case TOPO_L2_EOTHERCLUSTER:
		return "other_cluster";
	case TOPO_L2_EBADHMAC:
		return "bad_hmac";
	default:
		return "error";
	}
}

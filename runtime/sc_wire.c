/* sc_wire.c - header and handshake codecs, peer-list and size parsing. */
#include "sc_wire.h"
#include "sparkcoll.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)(v >> 16));
	put16(p + 2, (uint16_t)v);
}
static void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)(v >> 32));
	put32(p + 4, (uint32_t)v);
}
static uint16_t get16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static uint32_t get32(const uint8_t *p) { return ((uint32_t)get16(p) << 16) | get16(p + 2); }
static uint64_t get64(const uint8_t *p) { return ((uint64_t)get32(p) << 32) | get32(p + 4); }

void sc_hdr_encode(const sc_hdr_t *h, uint8_t out[SC_HDR_LEN])
{
	put16(out, SC_WIRE_MAGIC);
	out[2] = SC_WIRE_VERSION;
	out[3] = h->kind;
	put32(out + 4, h->seq);
	out[8] = h->coll;
	out[9] = h->algo;
	out[10] = h->dtype;
	out[11] = h->op;
	put16(out + 12, h->step);
	put16(out + 14, h->src);
	put64(out + 16, h->count);
	put64(out + 24, h->len);
}

int sc_hdr_decode(const uint8_t *buf, size_t len, sc_hdr_t *h, const char **why)
{
	const char *dummy;
	if (!why)
		why = &dummy;
	if (!buf || len < SC_HDR_LEN) {
		*why = "short header";
		return -EPROTO;
	}
	if (get16(buf) != SC_WIRE_MAGIC) {
		*why = "bad magic";
		return -EPROTO;
	}
	if (buf[2] != SC_WIRE_VERSION) {
		*why = "unsupported version";
		return -EPROTO;
	}
	memset(h, 0, sizeof(*h));
	h->kind = buf[3];
	h->seq = get32(buf + 4);
	h->coll = buf[8];
	h->algo = buf[9];
	h->dtype = buf[10];
	h->op = buf[11];
	h->step = get16(buf + 12);
	h->src = get16(buf + 14);
	h->count = get64(buf + 16);
	h->len = get64(buf + 24);
	if (h->kind < SC_MSG_DATA || h->kind > SC_MSG_KIND_MAX) {
		*why = "unknown message kind";
		return -EPROTO;
	}
	if (h->src >= SC_MAX_WORLD) {
		*why = "sender rank out of range";
		return -EPROTO;
	}
	if (h->len > SC_MAX_PAYLOAD) {
		*why = "payload too large";
		return -EPROTO;
	}
	if (h->kind == SC_MSG_ABORT) {
		if (h->len != 0) {
			*why = "abort with payload";
			return -EPROTO;
		}
		return 0;
	}
	if (h->kind == SC_MSG_DATA) {
		if (h->coll == SC_COLL_NONE || h->coll > SC_COLL_MAX) {
			*why = "unknown collective";
			return -EPROTO;
		}
		if (h->algo >= SC_ALGO_COUNT || h->dtype >= SC_DTYPE_COUNT || h->op >= SC_OP_COUNT) {
			*why = "algorithm, type or op out of range";
			return -EPROTO;
		}
		if (h->count > SC_MAX_PAYLOAD) {
			*why = "count too large";
			return -EPROTO;
		}
		if (h->len > h->count * sc_dtype_size((sc_dtype_t)h->dtype)) {
			*why = "payload larger than the collective";
			return -EPROTO;
		}
		return 0;
	}
	if (h->kind == SC_MSG_HELLO || h->kind == SC_MSG_HELLO_ACK) {
		if (h->len != SC_HELLO_LEN) {
			*why = "hello of wrong length";
			return -EPROTO;
		}
		return 0;
	}
	if (h->kind == SC_MSG_READY) {
		if (h->len != 0) {
			*why = "ready with payload";
			return -EPROTO;
		}
		return 0;
	}
	/* RDV: payload = u16 port; TABLE: payload = NUL-separated addr:port list */
	if (h->kind == SC_MSG_RDV && h->len != 2) {
		*why = "rendezvous of wrong length";
		return -EPROTO;
	}
	if (h->kind == SC_MSG_TABLE && h->len > 64u * SC_MAX_WORLD) {
		*why = "peer table too large";
		return -EPROTO;
	}
	return 0;
}

int sc_hdr_check(const sc_hdr_t *got, const sc_hdr_t *want, const char **why)
{
	if (got->kind != SC_MSG_DATA) {
		*why = "unexpected message kind";
		return -SC_EPEER;
	}
	if (got->src != want->src) {
		*why = "message from the wrong rank";
		return -SC_EPEER;
	}
	if (got->seq != want->seq) {
		*why = "ranks are at different collective calls (sequence differs)";
		return -SC_EMISMATCH;
	}
	if (got->coll != want->coll) {
		*why = "ranks called different collectives";
		return -SC_EMISMATCH;
	}
	if (got->count != want->count) {
		*why = "ranks called with different counts";
		return -SC_EMISMATCH;
	}
	if (got->dtype != want->dtype) {
		*why = "ranks called with different types";
		return -SC_EMISMATCH;
	}
	if (got->op != want->op) {
		*why = "ranks called with different ops";
		return -SC_EMISMATCH;
	}
	if (got->algo != want->algo) {
		*why = "ranks chose different algorithms (different sizes or settings)";
		return -SC_EMISMATCH;
	}
	if (got->step != want->step) {
		*why = "ranks are at different steps (root or settings differ)";
		return -SC_EMISMATCH;
	}
	if (got->len != want->len) {
		*why = "payload length differs from the expected one";
		return -SC_EMISMATCH;
	}
	return 0;
}

void sc_hello_encode(const sc_hello_t *h, uint8_t out[SC_HELLO_LEN])
{
	memset(out, 0, SC_HELLO_LEN);
	put16(out, h->rank);
	put16(out + 2, h->world_size);
	put32(out + 4, h->flags);
	put64(out + 8, h->job_id);
	put32(out + 16, h->qpn);
	put32(out + 20, h->psn);
	memcpy(out + 24, h->gid, 16);
	put16(out + 40, h->lid);
	out[42] = h->mtu;
	out[43] = 0;
	put32(out + 44, h->slot_size);
	put32(out + 48, h->nslots);
}

int sc_hello_decode(const uint8_t *buf, size_t len, sc_hello_t *h, const char **why)
{
	const char *dummy;
	if (!why)
		why = &dummy;
	if (!buf || len < SC_HELLO_LEN) {
		*why = "short hello";
		return -EPROTO;
	}
	memset(h, 0, sizeof(*h));
	h->rank = get16(buf);
	h->world_size = get16(buf + 2);
	h->flags = get32(buf + 4);
	h->job_id = get64(buf + 8);
	h->qpn = get32(buf + 16);
	h->psn = get32(buf + 20);
	memcpy(h->gid, buf + 24, 16);
	h->lid = get16(buf + 40);
	h->mtu = buf[42];
	h->slot_size = get32(buf + 44);
	h->nslots = get32(buf + 48);
	if (h->world_size == 0 || h->world_size > SC_MAX_WORLD || h->rank >= h->world_size) {
		*why = "rank or world size out of range";
		return -EPROTO;
	}
	if (h->flags & ~(uint32_t)(SC_HELLO_F_LITTLE_ENDIAN | SC_HELLO_F_VERBS)) {
		*why = "unknown hello flags";
		return -EPROTO;
	}
	if (h->flags & SC_HELLO_F_VERBS) {
		if (h->qpn == 0 || h->qpn > 0xffffffu || h->psn > 0xffffffu) {
			*why = "bad queue pair number or PSN";
			return -EPROTO;
		}
		if (h->mtu < 1 || h->mtu > 5) {
			*why = "bad path MTU";
			return -EPROTO;
		}
		if (h->slot_size < 4096 || h->slot_size > (1u << 24) || h->nslots == 0 ||
		    h->nslots > 1024) {
			*why = "bad slot geometry";
			return -EPROTO;
		}
	}
	return 0;
}

int sc_split_hostport(const char *s, char *host, size_t hostlen, uint16_t *port)
{
	const char *colon, *h = s;
	size_t hl;
	char *end;
	unsigned long p;

	if (!s || !*s)
		return -EINVAL;
	if (*s == '[') {
		const char *rb = strchr(s, ']');
		if (!rb || rb[1] != ':')
			return -EINVAL;
		h = s + 1;
		hl = (size_t)(rb - h);
		colon = rb + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon)
			return -EINVAL;
		if (memchr(s, ':', (size_t)(colon - s)))
			return -EINVAL; /* bare IPv6 needs brackets */
		hl = (size_t)(colon - s);
	}
	if (hl == 0 || hl >= hostlen)
		return -EINVAL;
	if (!isdigit((unsigned char)colon[1]))
		return -EINVAL;
	errno = 0;
	p = strtoul(colon + 1, &end, 10);
	if (errno || *end || p == 0 || p > 65535)
		return -EINVAL;
	memcpy(host, h, hl);
	host[hl] = '\0';
	*port = (uint16_t)p;
	return 0;
}

void sc_free_peers(char **addrs, int world_size)
{
	if (!addrs)
		return;
	for (int i = 0; i < world_size; i++)
		free(addrs[i]);
	free(addrs);
}

int sc_parse_peers(const char *s, int world_size, char ***addrs_out)
{
	char **addrs;
	const char *p = s;
	int seen = 0;

	*addrs_out = NULL;
	if (!s || world_size <= 0 || world_size > SC_MAX_WORLD)
		return -EINVAL;
	addrs = calloc((size_t)world_size, sizeof(*addrs));
	if (!addrs)
		return -ENOMEM;
	while (*p) {
		const char *end = strchr(p, ',');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		char item[300], host[256];
		char *eq, *stop;
		long r;
		uint16_t port;

		while (n && isspace((unsigned char)*p)) {
			p++;
			n--;
		}
		while (n && isspace((unsigned char)p[n - 1]))
			n--;
		if (n == 0 || n >= sizeof(item))
			goto bad;
		memcpy(item, p, n);
		item[n] = '\0';
		eq = strchr(item, '=');
		if (!eq || eq == item)
			goto bad;
		*eq = '\0';
		errno = 0;
		r = strtol(item, &stop, 10);
		if (errno || *stop || r < 0 || r >= world_size || addrs[r])
			goto bad;
		if (sc_split_hostport(eq + 1, host, sizeof(host), &port) < 0)
			goto bad;
		addrs[r] = strdup(eq + 1);
		if (!addrs[r])
			goto bad;
		seen++;
		if (!end)
			break;
		p = end + 1;
	}
	if (seen != world_size)
		goto bad;
	*addrs_out = addrs;
	return 0;
bad:
	sc_free_peers(addrs, world_size);
	return -EINVAL;
}

int sc_parse_size(const char *s, size_t *out)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	switch (*end) {
	case '\0': break;
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	default: return -EINVAL;
	}
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end)
		return -EINVAL;
	if (shift && v > (ULLONG_MAX >> shift))
		return -EINVAL;
	v <<= shift;
	if (v > SIZE_MAX)
		return -EINVAL;
	*out = (size_t)v;
	return 0;
}

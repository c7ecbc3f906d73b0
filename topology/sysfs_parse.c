#include "sysfs_parse.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Copy s[0..len) into buf (NUL-terminated) without trailing whitespace.
 * Rejects empty values, embedded NULs and values longer than TOPO_VAL_MAX. */
static int trim(const char *s, size_t len, char buf[TOPO_VAL_MAX + 1])
{
	if (!s)
		return -EINVAL;
	while (len > 0 && (s[len - 1] == '\n' || s[len - 1] == ' ' || s[len - 1] == '\t' ||
			   s[len - 1] == '\r'))
		len--;
	if (len == 0 || len > TOPO_VAL_MAX)
		return -EINVAL;
	if (memchr(s, '\0', len))
		return -EINVAL;
	memcpy(buf, s, len);
	buf[len] = '\0';
	return 0;
}

static int copy_out(const char *v, char *out, size_t outlen)
{
	size_t l = strlen(v);
	if (!out || l + 1 > outlen)
		return -ERANGE;
	memcpy(out, v, l + 1);
	return 0;
}

int topo_parse_long(const char *s, size_t len, long min, long max, long *out)
{
	char b[TOPO_VAL_MAX + 1];
	if (trim(s, len, b) < 0)
		return -EINVAL;
	const char *p = b;
	if (*p == '-')
		p++;
	if (!*p)
		return -EINVAL;
	for (const char *q = p; *q; q++)
		if (!isdigit((unsigned char)*q))
			return -EINVAL;
	errno = 0;
	char *end = NULL;
	long v = strtol(b, &end, 10);
	if (errno == ERANGE || v < min || v > max)
		return -ERANGE;
	if (*end)
		return -EINVAL;
	*out = v;
	return 0;
}

int topo_parse_hex(const char *s, size_t len, unsigned long max, unsigned long *out)
{
	char b[TOPO_VAL_MAX + 1];
	if (trim(s, len, b) < 0)
		return -EINVAL;
	if (b[0] != '0' || (b[1] != 'x' && b[1] != 'X') || !b[2])
		return -EINVAL;
	size_t n = 0;
	for (const char *q = b + 2; *q; q++, n++)
		if (!isxdigit((unsigned char)*q))
			return -EINVAL;
	if (n > 16)
		return -ERANGE;
	errno = 0;
	unsigned long v = strtoul(b + 2, NULL, 16);
	if (errno == ERANGE || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

int topo_parse_mac(const char *s, size_t len, char *out, size_t outlen)
{
	char b[TOPO_VAL_MAX + 1];
	if (trim(s, len, b) < 0)
		return -EINVAL;
	size_t n = strlen(b);
	/* "xx" then ":xx" repeated: length 3k-1 for k octets. */
	if ((n + 1) % 3 != 0 || (n + 1) / 3 > 20)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (i % 3 == 2) {
			if (b[i] != ':')
				return -EINVAL;
		} else if (!isxdigit((unsigned char)b[i])) {
			return -EINVAL;
		} else {
			b[i] = (char)tolower((unsigned char)b[i]);
		}
	}
	return copy_out(b, out, outlen);
}

int topo_parse_operstate(const char *s, size_t len, char *out, size_t outlen)
{
	static const char *const ok[] = {"up",      "down",       "lowerlayerdown", "unknown",
					 "dormant", "notpresent", "testing"};
	char b[TOPO_VAL_MAX + 1];
	if (trim(s, len, b) < 0)
		return -EINVAL;
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
		if (strcmp(b, ok[i]) == 0)
			return copy_out(b, out, outlen);
	return -EINVAL;
}

/* "LinkUp" -> "link_up", "ACTIVE_DEFER" -> "active_defer", "Phy Test" -> "phy_test". */
static int snake(const char *w, char *out, size_t outlen)
{
	size_t o = 0;
	if (!*w)
		return -EINVAL;
	for (size_t i = 0; w[i]; i++) {
		char c = w[i];
		char add;
		if (isupper((unsigned char)c)) {
			if (i > 0 && islower((unsigned char)w[i - 1]) && o > 0 && out[o - 1] != '_') {
				if (o + 1 >= outlen)
					return -ERANGE;
				out[o++] = '_';
			}
			add = (char)tolower((unsigned char)c);
		} else if (islower((unsigned char)c) || isdigit((unsigned char)c)) {
			add = c;
		} else if (c == ' ' || c == '_' || c == '-') {
			if (o == 0 || out[o - 1] == '_')
				continue;
			add = '_';
		} else {
			return -EINVAL;
		}
		if (o + 1 >= outlen)
			return -ERANGE;
		out[o++] = add;
	}
	while (o > 0 && out[o - 1] == '_')
		o--;
	if (o == 0)
		return -EINVAL;
	out[o] = '\0';
	return 0;
}

int topo_parse_ib_state(const char *s, size_t len, int *code, char *word, size_t wordlen)
{
	char b[TOPO_VAL_MAX + 1];
	if (trim(s, len, b) < 0)
		return -EINVAL;
	char *colon = strchr(b, ':');
	if (!colon || colon == b || colon[1] != ' ' || !colon[2])
		return -EINVAL;
	long v;
	if (topo_parse_long(b, (size_t)(colon - b), 0, 255, &v) < 0 || b[0] == '-')
		return -EINVAL;
	char w[TOPO_VAL_MAX + 1];
	/* phys_state prints "<unknown>" for codes it has no name for. */
	int r = strcmp(colon + 2, "<unknown>") == 0 ? snake("unknown", w, sizeof w)
						   : snake(colon + 2, w, sizeof w);
	if (r < 0)
		return r;
	r = copy_out(w, word, wordlen);
	if (r < 0)
		return r;
	*code = (int)v;
	return 0;
}

int topo_parse_ib_rate(const char *s, size_t len, long *tenths, int *width, char *speed,
		       size_t speedlen)
{
	char b[TOPO_VAL_MAX + 1];
	if (trim(s, len, b) < 0)
		return -EINVAL;
	/* "%d[.5] Gb/sec (%dX%s)", the kernel's format; the speed word is optional
	 * ("(4X)" is printed by old kernels for an unknown speed). */
	const char *p = b;
	long whole = 0;
	int nd = 0;
	while (isdigit((unsigned char)*p)) {
		if (++nd > 6)
			return -ERANGE;
		whole = whole * 10 + (*p - '0');
		p++;
	}
	if (nd == 0)
		return -EINVAL;
	long t = whole * 10;
	if (*p == '.') {
		p++;
		if (!isdigit((unsigned char)*p))
			return -EINVAL;
		t += *p - '0';
		p++;
		if (isdigit((unsigned char)*p))
			return -EINVAL;
	}
	if (strncmp(p, " Gb/sec (", 9) != 0)
		return -EINVAL;
	p += 9;
	int w = 0;
	nd = 0;
	while (isdigit((unsigned char)*p)) {
		if (++nd > 2)
			return -ERANGE;
		w = w * 10 + (*p - '0');
		p++;
	}
	if (nd == 0 || w == 0 || *p != 'X')
		return -EINVAL;
	p++;
	char sp[16] = "";
	if (*p == ' ') {
		p++;
		size_t n = 0;
		while (isalnum((unsigned char)*p)) {
			if (n + 1 >= sizeof sp)
				return -ERANGE;
			sp[n++] = *p++;
		}
		sp[n] = '\0';
		if (n == 0)
			return -EINVAL;
	}
	if (p[0] != ')' || p[1] != '\0')
		return -EINVAL;
	if (speed && copy_out(sp, speed, speedlen) < 0)
		return -ERANGE;
	*tenths = t;
	*width = w;
	return 0;
}

int topo_parse_gid(const char *s, size_t len, uint8_t out[16])
{
	char b[TOPO_VAL_MAX + 1];
	if (trim(s, len, b) < 0)
		return -EINVAL;
	if (strlen(b) > 45) /* INET6_ADDRSTRLEN - 1 */
		return -EINVAL;
	struct in6_addr a;
	if (inet_pton(AF_INET6, b, &a) != 1)
		return -EINVAL;
	memcpy(out, &a, 16);
	return 0;
}

int topo_parse_gid_type(const char *s, size_t len, int *type)
{
	char b[TOPO_VAL_MAX + 1];
	if (trim(s, len, b) < 0)
		return -EINVAL;
	if (strcmp(b, "IB/RoCE v1") == 0 || strcmp(b, "RoCE v1") == 0 || strcmp(b, "IB") == 0)
		*type = 1;
	else if (strcmp(b, "RoCE v2") == 0)
		*type = 2;
	else
		return -EINVAL;
	return 0;
}

int topo_parse_link_layer(const char *s, size_t len, char *out, size_t outlen)
{
	char b[TOPO_VAL_MAX + 1];
	if (trim(s, len, b) < 0)
		return -EINVAL;
	if (strcmp(b, "Ethernet") == 0)
		return copy_out("ethernet", out, outlen);
	if (strcmp(b, "InfiniBand") == 0)
		return copy_out("infiniband", out, outlen);
	return -EINVAL;
}

static int hexfield(const char *p, size_t n, unsigned max, unsigned *out)
{
	unsigned v = 0;
	for (size_t i = 0; i < n; i++) {
		if (!isxdigit((unsigned char)p[i]))
			return -EINVAL;
		char c = (char)tolower((unsigned char)p[i]);
		v = v * 16 + (unsigned)(isdigit((unsigned char)c) ? c - '0' : c - 'a' + 10);
	}
	if (v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

int topo_parse_pci_addr(const char *s, size_t len, struct topo_pci_addr *out)
{
	char b[TOPO_VAL_MAX + 1];
	if (trim(s, len, b) < 0)
		return -EINVAL;
	/* DDDD:BB:DD.F; the domain may have 4 to 8 hex digits (VMD uses 10000). */
	size_t n = strlen(b);
	if (n < 12 || n > 16)
		return -EINVAL;
	size_t dl = n - 8;
	const char *t = b + dl;
	if (t[0] != ':' || t[3] != ':' || t[6] != '.')
		return -EINVAL;
	struct topo_pci_addr a;
	if (hexfield(b, dl, 0xffffffffu, &a.domain) < 0 || hexfield(t + 1, 2, 0xff, &a.bus) < 0 ||
	    hexfield(t + 4, 2, 0x1f, &a.dev) < 0 || hexfield(t + 7, 1, 7, &a.fn) < 0)
		return -EINVAL;
	*out = a;
	return 0;
}

int topo_parse_pcie_speed(const char *s, size_t len, int *gen, char *out, size_t outlen)
{
	static const struct {
		const char *rate;
		int gen;
	} gens[] = {{"2.5", 1}, {"5.0", 2}, {"5", 2},    {"8.0", 3}, {"8", 3},
		    {"16.0", 4}, {"16", 4}, {"32.0", 5}, {"32", 5}, {"64.0", 6}, {"64", 6}};
	char b[TOPO_VAL_MAX + 1];
	if (trim(s, len, b) < 0)
		return -EINVAL;
	if (strcmp(b, "Unknown") == 0 || strncmp(b, "Unknown ", 8) == 0)
		return -ENODATA;
	const char *p = b;
	size_t nd = 0;
	while (isdigit((unsigned char)*p) && nd < 4) {
		p++;
		nd++;
	}
	if (nd == 0 || nd > 3)
		return -EINVAL;
	if (*p == '.') {
		p++;
		if (!isdigit((unsigned char)*p))
			return -EINVAL;
		p++;
	}
	size_t numlen = (size_t)(p - b);
	if (strcmp(p, " GT/s") != 0 && strcmp(p, " GT/s PCIe") != 0)
		return -EINVAL;
	int g = 0;
	for (size_t i = 0; i < sizeof gens / sizeof gens[0]; i++)
		if (strlen(gens[i].rate) == numlen && strncmp(b, gens[i].rate, numlen) == 0)
			g = gens[i].gen;
	int r = copy_out(b, out, outlen);
	if (r < 0)
		return r;
	*gen = g;
	return 0;
}

int topo_parse_ifname(const char *s, size_t len, char *out, size_t outlen)
{
	char b[TOPO_VAL_MAX + 1];
	if (trim(s, len, b) < 0)
		return -EINVAL;
	size_t n = strlen(b);
	if (n > 15 || strcmp(b, ".") == 0 || strcmp(b, "..") == 0)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)b[i];
		/* The kernel allows more; we keep to printable ASCII for JSON and logs. */
		if (c == '/' || c == ':' || isspace(c) || c < 0x20 || c >= 0x7f)
			return -EINVAL;
	}
	return copy_out(b, out, outlen);
}

int topo_parse_phys_port(const char *s, size_t len, int *port)
{
	char b[TOPO_VAL_MAX + 1];
	if (trim(s, len, b) < 0)
		return -EINVAL;
	if (b[0] != 'p' || !b[1])
		return -EINVAL;
	long v;
	if (b[1] == '-' || topo_parse_long(b + 1, strlen(b + 1), 0, 255, &v) < 0)
		return -EINVAL;
	*port = (int)v;
	return 0;
}

/* One "addr_info" entry of `ip -json address` -> "addr/len" appended to arr. */
static void ip_json_addr(json_t *ai, json_t *v4, json_t *v6)
{
	const char *fam = json_string_value(json_object_get(ai, "family"));
	const char *local = json_string_value(json_object_get(ai, "local"));
	json_t *pl = json_object_get(ai, "prefixlen");
	if (!fam || !local || !json_is_integer(pl))
		return;
	json_int_t plen = json_integer_value(pl);
	unsigned char buf[16];
	char txt[INET6_ADDRSTRLEN + 8];
	if (strcmp(fam, "inet") == 0) {
		if (plen < 0 || plen > 32 || inet_pton(AF_INET, local, buf) != 1)
			return;
		char a[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, buf, a, sizeof a);
		snprintf(txt, sizeof txt, "%s/%d", a, (int)plen);
		json_array_append_new(v4, json_string(txt));
	} else if (strcmp(fam, "inet6") == 0) {
		if (plen < 0 || plen > 128 || inet_pton(AF_INET6, local, buf) != 1)
			return;
		char a[INET6_ADDRSTRLEN];
		inet_ntop(AF_INET6, buf, a, sizeof a);
		snprintf(txt, sizeof txt, "%s/%d", a, (int)plen);
		json_array_append_new(v6, json_string(txt));
	}
}

int topo_parse_ip_json(const char *s, size_t len, json_t **out)
{
	if (!s || len > (1u << 24))
		return -EINVAL;
	json_t *root = json_loadb(s, len, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_array(root)) {
		json_decref(root);
		return -EINVAL;
	}
	json_t *res = json_object();
	size_t i;
	json_t *link;
	json_array_foreach(root, i, link) {
		const char *name = json_string_value(json_object_get(link, "ifname"));
		char ifn[16];
		if (!name || topo_parse_ifname(name, strlen(name), ifn, sizeof ifn) < 0 ||
		    strcmp(ifn, name) != 0)
			continue;
		json_t *entry = json_object_get(res, ifn);
		if (!entry) {
			entry = json_pack("{s:[],s:[]}", "ipv4", "ipv6");
			json_object_set_new(res, ifn, entry);
		}
		json_t *infos = json_object_get(link, "addr_info");
		size_t j;
		json_t *ai;
		if (json_is_array(infos))
			json_array_foreach(infos, j, ai)
				ip_json_addr(ai, json_object_get(entry, "ipv4"),
					     json_object_get(entry, "ipv6"));
	}
	json_decref(root);
	*out = res;
	return 0;
}

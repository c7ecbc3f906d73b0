/* addrplan: fabric IPv4 plan, netlink apply, netplan render (see addrplan.h). */
#include "topology/addrplan.h"
#include "nl.h"
#include "topo_internal.h"

#include "common/log.h"
#include "common/util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netlink/addr.h>
#include <netlink/cache.h>
#include <netlink/errno.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pool {
	uint32_t base; /* host order */
	int plen, prefix;
	uint32_t nsub;  /* subnets of /prefix in the pool */
	uint32_t hosts; /* usable host numbers per subnet */
};

/* "a.b.c.d/len" -> host-order address and length. */
static bool parse_cidr(const char *s, uint32_t *ip, int *len)
{
	char buf[32];
	const char *slash = s ? strchr(s, '/') : NULL;
	if (!slash || (size_t)(slash - s) >= sizeof buf)
		return false;
	memcpy(buf, s, (size_t)(slash - s));
	buf[slash - s] = '\0';
	char *end = NULL;
	long l = strtol(slash + 1, &end, 10);
	struct in_addr a;
	if (inet_pton(AF_INET, buf, &a) != 1 || !end || *end || end == slash + 1 || l < 0 || l > 32)
		return false;
	*ip = ntohl(a.s_addr);
	*len = (int)l;
	return true;
}

static uint32_t prefix_mask(int len) { return len ? ~0u << (32 - len) : 0; }

static int parse_pool(const char *s, int prefix, struct pool *p, char *err, size_t errlen)
{
	uint32_t base;
	int plen;
	if (!strchr(s, '/')) {
		snprintf(err, errlen, "pool '%s' is not an IPv4 prefix like 10.77.0.0/16", s);
		return -EINVAL;
	}
	if (!parse_cidr(s, &base, &plen) || plen < 8 || plen > 28) {
		snprintf(err, errlen, "pool '%s' is not an IPv4 prefix between /8 and /28", s);
		return -EINVAL;
	}
	if (prefix == 0)
		prefix = TOPO_ADDR_DEFAULT_PREFIX;
	if (prefix < plen + 2 || prefix > 30) {
		snprintf(err, errlen, "subnet length /%d does not leave 4 subnets in pool %s", prefix, s);
		return -EINVAL;
	}
	uint32_t mask = prefix_mask(plen);
	if (base & ~mask) {
		snprintf(err, errlen, "pool %s has host bits set (the network is %u.%u.%u.%u/%d)", s,
			 (base & mask) >> 24, ((base & mask) >> 16) & 255, ((base & mask) >> 8) & 255,
			 (base & mask) & 255, plen);
		return -EINVAL;
	}
	p->base = base;
	p->plen = plen;
	p->prefix = prefix;
	p->nsub = 1u << (prefix - plen);
	p->hosts = (1u << (32 - prefix)) - 2;
	return 0;
}

static void fmt_ip(uint32_t ip, char *out, size_t len)
{
	snprintf(out, len, "%u.%u.%u.%u", ip >> 24, (ip >> 16) & 255, (ip >> 8) & 255, ip & 255);
}

static uint32_t subnet_base(const struct pool *p, uint32_t idx)
{
	return p->base + (idx << (32 - p->prefix));
}

static uint32_t fnv1a(const char *s)
{
	uint32_t h = 2166136261u;
	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 16777619u;
	}
	return h;
}

/* A free slot in [1, n-2] by hash + linear probing; 0 when full. */
static uint32_t pick(const char *key, uint32_t n, unsigned char *used)
{
	uint32_t usable = n - 2;
	uint32_t start = fnv1a(key) % usable;
	for (uint32_t i = 0; i < usable; i++) {
		uint32_t idx = 1 + (start + i) % usable;
		if (!used[idx]) {
			used[idx] = 1;
			return idx;
		}
	}
	return 0;
}

static const char *jstr(json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }

struct pend {
	char key[200];
	json_t *cable;
	bool swap; /* the verdict's "a" end is the higher name */
};

static int pend_cmp(const void *a, const void *b)
{
	return strcmp(((const struct pend *)a)->key, ((const struct pend *)b)->key);
}

static void add_member(json_t *nodes, json_t *members, const char *node, const char *port,
		       const char *netdev, int twin, const char *addr, const char *subnet)
{
	json_array_append_new(members, json_pack("{s:s, s:s, s:s, s:s}", "node", node, "port", port,
						 "netdev", netdev, "address", addr));
	json_t *list = json_object_get(nodes, node);
	if (!list) {
		list = json_array();
		json_object_set_new(nodes, node, list);
	}
	json_array_append_new(list, json_pack("{s:s, s:s, s:i, s:s, s:s, s:[]}", "netdev", netdev, "port",
					      port, "twin", twin, "address", addr, "subnet", subnet,
					      "peers"));
}

/* Fill every node entry's "peers" from the members of its subnet. */
static void fill_peers(json_t *subnets, json_t *nodes)
{
	size_t i, j, k;
	json_t *s, *m, *o;
	json_array_foreach(subnets, i, s) {
		json_t *members = json_object_get(s, "members");
		json_array_foreach(members, j, m) {
			json_t *entry = NULL;
			json_t *list = json_object_get(nodes, jstr(m, "node"));
			json_t *e;
			size_t x;
			json_array_foreach(list, x, e)
				if (strcmp(jstr(e, "netdev"), jstr(m, "netdev")) == 0)
					entry = e;
			if (!entry)
				continue;
			json_array_foreach(members, k, o) {
				if (k == j)
					continue;
				char ip[32];
				util_strlcpy(ip, jstr(o, "address"), sizeof ip);
				char *sl = strchr(ip, '/');
				if (sl)
					*sl = '\0';
				json_array_append_new(json_object_get(entry, "peers"), json_string(ip));
			}
		}
	}
}

static int plan_direct(json_t *verdict, const struct pool *pl, unsigned char *used, json_t *subnets,
		       json_t *nodes, char *err, size_t errlen)
{
	json_t *cables = json_object_get(verdict, "cables");
	size_t n = json_array_size(cables), k = 0, i;
	struct pend *pv = calloc(n ? n : 1, sizeof *pv);
	if (!pv)
		return -ENOMEM;
	json_t *c;
	json_array_foreach(cables, i, c) {
		if (!jstr(c, "kind") || strcmp(jstr(c, "kind"), "direct") != 0)
			continue;
		json_t *a = json_object_get(c, "a"), *b = json_object_get(c, "b");
		if (!jstr(a, "node") || !jstr(a, "port") || !jstr(b, "node") || !jstr(b, "port"))
			continue;
		char ea[100], eb[100];
		snprintf(ea, sizeof ea, "%s:%s", jstr(a, "node"), jstr(a, "port"));
		snprintf(eb, sizeof eb, "%s:%s", jstr(b, "node"), jstr(b, "port"));
		bool swap = strcmp(ea, eb) > 0;
		snprintf(pv[k].key, sizeof pv[k].key, "%s-%s", swap ? eb : ea, swap ? ea : eb);
		pv[k].cable = c;
		pv[k].swap = swap;
		k++;
	}
	qsort(pv, k, sizeof pv[0], pend_cmp);
	int rc = 0;
	for (i = 0; i < k && rc == 0; i++) {
		json_t *c2 = pv[i].cable;
		json_t *a = json_object_get(c2, "a"), *b = json_object_get(c2, "b");
		bool swap = pv[i].swap;
		if (swap) {
			json_t *t = a;
			a = b;
			b = t;
		}
		size_t ti;
		json_t *tw;
		json_array_foreach(json_object_get(c2, "twins"), ti, tw) {
			json_t *ta = json_object_get(tw, swap ? "b" : "a");
			json_t *tb = json_object_get(tw, swap ? "a" : "b");
			if (!jstr(ta, "netdev") || !jstr(tb, "netdev"))
				continue;
			int twin = (int)json_integer_value(json_object_get(tw, "twin"));
			char key[220];
			snprintf(key, sizeof key, "%s#%d", pv[i].key, twin);
			uint32_t idx = pick(key, pl->nsub, used);
			if (!idx) {
				snprintf(err, errlen, "pool has too few /%d subnets for every twin of every "
						      "cable", pl->prefix);
				rc = -EINVAL;
				break;
			}
			uint32_t base = subnet_base(pl, idx);
			char net[32], ipa[40], ipb[40], sub[40];
			fmt_ip(base, net, sizeof net);
			snprintf(sub, sizeof sub, "%s/%d", net, pl->prefix);
			fmt_ip(base + 1, net, sizeof net);
			snprintf(ipa, sizeof ipa, "%s/%d", net, pl->prefix);
			fmt_ip(base + 2, net, sizeof net);
			snprintf(ipb, sizeof ipb, "%s/%d", net, pl->prefix);
			json_t *members = json_array();
			add_member(nodes, members, jstr(a, "node"), jstr(a, "port"), jstr(ta, "netdev"),
				   twin, ipa, sub);
			add_member(nodes, members, jstr(b, "node"), jstr(b, "port"), jstr(tb, "netdev"),
				   twin, ipb, sub);
			json_array_append_new(subnets, json_pack("{s:s, s:i, s:s, s:n, s:o}", "subnet", sub,
								 "twin", twin, "cable", pv[i].key, "rail",
								 "members", members));
		}
	}
	free(pv);
	return rc;
}

struct swport {
	const char *node, *port;
	json_t *cable;
};

static int swport_cmp(const void *a, const void *b)
{
	return strcmp(((const struct swport *)a)->node, ((const struct swport *)b)->node);
}

static int plan_switch(json_t *verdict, const struct pool *pl, unsigned char *used, json_t *subnets,
		       json_t *nodes, char *err, size_t errlen)
{
	/* The main L2 domain: the one with the most nodes (first on a tie). */
	const char *main_id = NULL;
	size_t best = 0, i;
	json_t *d;
	json_array_foreach(json_object_get(verdict, "l2_domains"), i, d) {
		size_t nn = json_array_size(json_object_get(d, "nodes"));
		if (nn > best) {
			best = nn;
			main_id = jstr(d, "id");
		}
	}
	if (!main_id) {
		snprintf(err, errlen, "switch verdict without l2_domains");
		return -EINVAL;
	}
	json_t *cables = json_object_get(verdict, "cables");
	size_t n = json_array_size(cables), k = 0;
	struct swport *sp = calloc(n ? n : 1, sizeof *sp);
	if (!sp)
		return -ENOMEM;
	json_t *c;
	json_array_foreach(cables, i, c) {
		const char *sw = jstr(json_object_get(c, "b"), "switch");
		json_t *a = json_object_get(c, "a");
		if (!sw || strcmp(sw, main_id) != 0 || !jstr(a, "node") || !jstr(a, "port"))
			continue;
		/* One port per node: two on one rail would share a subnet. */
		bool dup = false;
		for (size_t j = 0; j < k; j++)
			if (strcmp(sp[j].node, jstr(a, "node")) == 0) {
				dup = true;
				if (strcmp(jstr(a, "port"), sp[j].port) < 0) {
					sp[j].port = jstr(a, "port");
					sp[j].cable = c;
				}
			}
		if (dup)
			continue;
		sp[k].node = jstr(a, "node");
		sp[k].port = jstr(a, "port");
		sp[k].cable = c;
		k++;
	}
	qsort(sp, k, sizeof sp[0], swport_cmp);
	unsigned char *hused = calloc(pl->hosts + 2, 1);
	uint32_t *host = calloc(k ? k : 1, sizeof *host);
	int rc = 0;
	if (!hused || !host)
		rc = -ENOMEM;
	for (i = 0; rc == 0 && i < k; i++) {
		host[i] = pick(sp[i].node, pl->hosts + 2, hused);
		if (!host[i]) {
			snprintf(err, errlen, "a /%d subnet has too few addresses for %zu nodes",
				 pl->prefix, k);
			rc = -EINVAL;
		}
	}
	for (int twin = 0; rc == 0 && twin < 8; twin++) {
		json_t *members = NULL;
		char sub[40] = "";
		uint32_t base = 0;
		for (i = 0; i < k; i++) {
			json_t *tw = NULL, *t;
			size_t ti;
			json_array_foreach(json_object_get(sp[i].cable, "twins"), ti, t)
				if (json_integer_value(json_object_get(t, "twin")) == twin)
					tw = t;
			const char *nd = jstr(json_object_get(tw, "a"), "netdev");
			if (!nd)
				continue;
			if (!members) {
				char key[32];
				snprintf(key, sizeof key, "rail#%d", twin);
				uint32_t idx = pick(key, pl->nsub, used);
				if (!idx) {
					snprintf(err, errlen, "pool has too few /%d subnets", pl->prefix);
					rc = -EINVAL;
					break;
				}
				base = subnet_base(pl, idx);
				char net[32];
				fmt_ip(base, net, sizeof net);
				snprintf(sub, sizeof sub, "%s/%d", net, pl->prefix);
				members = json_array();
			}
			char net[32], ip[40];
			fmt_ip(base + host[i], net, sizeof net);
			snprintf(ip, sizeof ip, "%s/%d", net, pl->prefix);
			add_member(nodes, members, sp[i].node, sp[i].port, nd, twin, ip, sub);
		}
		if (members)
			json_array_append_new(subnets, json_pack("{s:s, s:i, s:n, s:i, s:o}", "subnet", sub,
								 "twin", twin, "cable", "rail", twin,
								 "members", members));
	}
	free(sp);
	free(hused);
	free(host);
	return rc;
}


/* Keep the plan off the networks the members already use on their other
 * netdevs (verdict "host_addresses"): a fabric /24 inside the office LAN would
 * route part of that LAN into a cable. Two prefixes are nested or disjoint. A
 * host network inside the pool blocks the pool subnets it overlaps. One that
 * holds the whole pool (a 10.0.0.0/8 LAN around a 10.77.0.0/16 pool, or a
 * 169.254.0.0/16 link-local net around the simulator's pool) blocks only the
 * subnet of the host's own address, and the entry says "contains_pool". */
static json_t *block_host_networks(json_t *verdict, const struct pool *pl, unsigned char *used)
{
	json_t *out = json_array();
	const char *node;
	json_t *list;
	uint32_t pmask = prefix_mask(pl->plen);
	json_object_foreach(json_object_get(verdict, "host_addresses"), node, list) {
		size_t i;
		json_t *e;
		json_array_foreach(list, i, e) {
			uint32_t ip;
			int len;
			if (!parse_cidr(jstr(e, "address"), &ip, &len))
				continue;
			uint32_t net = ip & prefix_mask(len);
			bool contains_pool = len <= pl->plen && (pl->base & prefix_mask(len)) == net;
			bool inside_pool = len > pl->plen && (net & pmask) == pl->base;
			if (!contains_pool && !inside_pool)
				continue;
			uint32_t first, last; /* subnet indices to block */
			int blen;
			if (inside_pool && len < pl->prefix) {
				first = (net - pl->base) >> (32 - pl->prefix);
				last = first + (1u << (pl->prefix - len)) - 1;
				blen = len;
			} else if ((ip & pmask) == pl->base) {
				first = last = (ip - pl->base) >> (32 - pl->prefix);
				blen = pl->prefix;
			} else {
				first = 1;
				last = 0; /* the pool is inside that network, the address is not in the pool */
				blen = 0;
			}
			for (uint32_t x = first; x <= last && x < pl->nsub; x++)
				used[x] = 1;
			char b[32], bs[40];
			fmt_ip(subnet_base(pl, first), b, sizeof b);
			snprintf(bs, sizeof bs, "%s/%d", b, blen);
			json_array_append_new(out, json_pack("{s:s, s:s?, s:s, s:s?, s:b}", "node", node, "netdev",
							     jstr(e, "netdev"), "address", jstr(e, "address"),
							     "blocked", blen ? bs : NULL, "contains_pool",
							     contains_pool));
		}
	}
	return out;
}

int topo_addrplan_make(json_t *verdict, const struct topo_addrplan_opts *o, json_t **plan, char *err,
		       size_t errlen)
{
	char dummy[8];
	if (!err) {
		err = dummy;
		errlen = sizeof dummy;
	}
	err[0] = '\0';
	if (!plan)
		return -EINVAL;
	*plan = NULL;
	const char *pool = o && o->pool ? o->pool : TOPO_ADDR_DEFAULT_POOL;
	struct pool pl;
	int r = parse_pool(pool, o ? o->prefix : 0, &pl, err, errlen);
	if (r < 0)
		return r;
	const char *cls = jstr(verdict, "class");
	if (!cls || !json_is_array(json_object_get(verdict, "cables"))) {
		snprintf(err, errlen, "not a topology verdict (no class or cables)");
		return -EINVAL;
	}
	unsigned char *used = calloc(pl.nsub, 1);
	if (!used)
		return -ENOMEM;
	json_t *avoided = block_host_networks(verdict, &pl, used);
	json_t *subnets = json_array(), *nodes = json_object();
	if (strcmp(cls, "ring") == 0 || strcmp(cls, "pair") == 0) {
		r = plan_direct(verdict, &pl, used, subnets, nodes, err, errlen);
	} else if (strcmp(cls, "switch") == 0) {
		r = plan_switch(verdict, &pl, used, subnets, nodes, err, errlen);
	} else {
		snprintf(err, errlen, "no addressing plan for topology '%s': fix the cabling first", cls);
		r = -EINVAL;
	}
	free(used);
	if (r < 0) {
		if (r == -EINVAL && json_array_size(avoided) > 0) {
			size_t el = strlen(err);
			snprintf(err + el, errlen - el, ", after keeping clear of %zu network(s) the members use "
				 "on other netdevs (plan \"avoided\")", json_array_size(avoided));
		}
		json_decref(avoided);
		json_decref(subnets);
		json_decref(nodes);
		return r;
	}
	fill_peers(subnets, nodes);
	char net[32], poolstr[48];
	fmt_ip(pl.base, net, sizeof net);
	snprintf(poolstr, sizeof poolstr, "%s/%d", net, pl.plen);
	*plan = json_pack("{s:s, s:i, s:s, s:o, s:o, s:o}", "pool", poolstr, "prefix", pl.prefix, "class",
			  cls, "subnets", subnets, "nodes", nodes, "avoided", avoided);
	return *plan ? 0 : -ENOMEM;
}

/* ---------- apply ---------- */

struct want {
	const char *netdev;
	char addr[48]; /* "a.b.c.d/len" */
	bool present;
};

static bool in_pool(uint32_t ip, const struct pool *p)
{
	uint32_t mask = ~0u << (32 - p->plen);
	return (ip & mask) == p->base;
}

static json_t *change(const char *netdev, const char *addr)
{
	return json_pack("{s:s, s:s}", "netdev", netdev, "address", addr);
}

/* ARP on the fabric netdevs. Linux answers an ARP request for any of its
 * addresses on whichever netdev heard it (arp_ignore 0) and may name any of
 * them as the sender of its own requests (arp_announce 0). Both twins of a
 * port hear the same broadcasts (one L2 domain through a switch; one cable on
 * a direct link), so peers learn both twins' addresses at one twin's MAC and
 * send it all the traffic meant for the two: half the port's bandwidth
 * (measured in the simulator: two TCP streams to the two twins of a node
 * through the switch shared one twin, 97 + 95 Mbit/s of 2 x 200). The fix
 * every multi-homed Linux host uses: answer only for the receiving netdev's
 * own addresses (arp_ignore 1), announce the address of the outgoing netdev
 * (arp_announce 2). */
static const struct {
	const char *name;
	int value;
} fabric_arp[] = {{"arp_ignore", 1}, {"arp_announce", 2}};

/* Set this netdev's ARP sysctls (fabric_arp) where they differ; each change
 * (or, dry, each that would be made) appended to changes as {"netdev","name",
 * "value","was"}. 0 or negative errno with err filled. */
static int arp_settings(const char *dev, bool dry, json_t *changes, char *err, size_t errlen)
{
	for (size_t i = 0; i < sizeof fabric_arp / sizeof fabric_arp[0]; i++) {
		char path[160], buf[32] = "";
		snprintf(path, sizeof path, "/proc/sys/net/ipv4/conf/%s/%s", dev, fabric_arp[i].name);
		FILE *f = fopen(path, "r");
		if (!f || !fgets(buf, sizeof buf, f)) {
			int e = f ? EIO : errno;
			if (f)
				fclose(f);
			snprintf(err, errlen, "reading %s: %s", path, strerror(e));
			return -e;
		}
		fclose(f);
		int was = atoi(buf);
		if (was == fabric_arp[i].value)
			continue;
		if (!dry) {
			/* a sysctl is written in place (no temporary file beside it) */
			f = fopen(path, "w");
			int e = !f ? errno : fprintf(f, "%d\n", fabric_arp[i].value) < 0 ? EIO : 0;
			if (f && fclose(f) != 0 && !e)
				e = errno;
			if (e) {
				snprintf(err, errlen, "setting %s to %d: %s", path, fabric_arp[i].value,
					 strerror(e));
				return -e;
			}
		}
		json_array_append_new(changes, json_pack("{s:s, s:s, s:i, s:i}", "netdev", dev, "name",
							  fabric_arp[i].name, "value",
							  fabric_arp[i].value, "was", was));
		log_info("fabric_sysctl_set", "netdev=%s name=%s value=%d was=%d dry_run=%d", dev,
			 fabric_arp[i].name, fabric_arp[i].value, was, dry);
	}
	return 0;
}

int topo_addrplan_apply(json_t *plan, const struct topo_addrplan_apply_opts *o, json_t **report,
			char *err, size_t errlen)
{
	char dummy[8];
	if (!err) {
		err = dummy;
		errlen = sizeof dummy;
	}
	err[0] = '\0';
	if (!report || !o || !o->node) {
		snprintf(err, errlen, "apply: no node given");
		return -EINVAL;
	}
	*report = NULL;
	const char *pool = jstr(plan, "pool");
	struct pool pl;
	if (!pool || parse_pool(pool, (int)json_integer_value(json_object_get(plan, "prefix")), &pl,
				err, errlen) < 0) {
		if (!err[0])
			snprintf(err, errlen, "apply: the plan has no valid pool");
		return -EINVAL;
	}
	json_t *mine = json_object_get(json_object_get(plan, "nodes"), o->node);
	if (!mine && !o->netdevs) {
		snprintf(err, errlen, "the plan gives node %s no address", o->node);
		return -EINVAL;
	}
	size_t nwant = json_array_size(mine);
	struct want *w = calloc(nwant ? nwant : 1, sizeof *w);
	/* Managed netdevs: the caller's list plus the plan's. */
	size_t nmax = nwant + o->n_netdevs;
	const char **devs = calloc(nmax ? nmax : 1, sizeof *devs);
	if (!w || !devs) {
		free(w);
		free(devs);
		return -ENOMEM;
	}
	size_t ndev = 0;
	for (size_t i = 0; i < o->n_netdevs; i++)
		devs[ndev++] = o->netdevs[i];
	for (size_t i = 0; i < nwant; i++) {
		json_t *e = json_array_get(mine, i);
		w[i].netdev = jstr(e, "netdev");
		util_strlcpy(w[i].addr, jstr(e, "address") ? jstr(e, "address") : "", sizeof w[i].addr);
		bool have = false;
		for (size_t j = 0; j < ndev; j++)
			have |= w[i].netdev && strcmp(devs[j], w[i].netdev) == 0;
		if (!have && w[i].netdev)
			devs[ndev++] = w[i].netdev;
	}
	json_t *added = json_array(), *removed = json_array(), *kept = json_array(),
	       *missing = json_array(), *sysctls = json_array();
	int rc = 0;
	struct topo_nl nl = {0};
	int nr;
	if ((rc = topo_nl_read(&nl, TOPO_NL_ADDRS, err, errlen)) < 0)
		goto out;
	struct nl_sock *sk = nl.sk;
	struct nl_cache *cache = nl.addrs;
	/* Removals first (a moved address must leave its old netdev before it
	 * can be added to the new one). */
	for (size_t d = 0; d < ndev && rc == 0; d++) {
		int ifindex = (int)if_nametoindex(devs[d]);
		if (!ifindex) {
			json_array_append_new(missing, json_string(devs[d]));
			continue;
		}
		for (struct nl_object *ob = nl_cache_get_first(cache); ob; ob = nl_cache_get_next(ob)) {
			struct rtnl_addr *a = (struct rtnl_addr *)ob;
			if (rtnl_addr_get_family(a) != AF_INET || rtnl_addr_get_ifindex(a) != ifindex)
				continue;
			struct nl_addr *local = rtnl_addr_get_local(a);
			if (!local || nl_addr_get_len(local) != 4)
				continue;
			uint32_t ip;
			memcpy(&ip, nl_addr_get_binary_addr(local), 4);
			ip = ntohl(ip);
			char ipbuf[32], full[48];
			fmt_ip(ip, ipbuf, sizeof ipbuf);
			snprintf(full, sizeof full, "%s/%d", ipbuf, rtnl_addr_get_prefixlen(a));
			bool wanted = false;
			for (size_t i = 0; i < nwant; i++)
				if (w[i].netdev && strcmp(w[i].netdev, devs[d]) == 0 &&
				    strcmp(w[i].addr, full) == 0) {
					wanted = true;
					w[i].present = true;
				}
			if (wanted) {
				json_array_append_new(kept, change(devs[d], full));
				continue;
			}
			if (!in_pool(ip, &pl))
				continue; /* not ours: left alone */
			if (!o->dry_run && (nr = rtnl_addr_delete(sk, a, 0)) < 0) {
				snprintf(err, errlen, "removing %s from %s: %s", full, devs[d], nl_geterror(nr));
				rc = -EIO;
				break;
			}
			json_array_append_new(removed, change(devs[d], full));
			log_info("addr_removed", "netdev=%s addr=%s dry_run=%d", devs[d], full, o->dry_run);
		}
	}
	for (size_t i = 0; i < nwant && rc == 0; i++) {
		if (w[i].present || !w[i].netdev)
			continue;
		int ifindex = (int)if_nametoindex(w[i].netdev);
		if (!ifindex)
			continue; /* listed in missing_netdevs */
		if (!o->dry_run) {
			struct rtnl_addr *a = rtnl_addr_alloc();
			struct nl_addr *local = NULL;
			if (!a || nl_addr_parse(w[i].addr, AF_INET, &local) < 0) {
				rtnl_addr_put(a);
				snprintf(err, errlen, "bad address %s in the plan", w[i].addr);
				rc = -EINVAL;
				break;
			}
			rtnl_addr_set_ifindex(a, ifindex);
			rtnl_addr_set_local(a, local);
			rtnl_addr_set_prefixlen(a, (int)nl_addr_get_prefixlen(local));
			nr = rtnl_addr_add(sk, a, 0);
			nl_addr_put(local);
			rtnl_addr_put(a);
			if (nr < 0) {
				snprintf(err, errlen, "adding %s to %s: %s", w[i].addr, w[i].netdev,
					 nl_geterror(nr));
				rc = -EIO;
				break;
			}
		}
		json_array_append_new(added, change(w[i].netdev, w[i].addr));
		log_info("addr_added", "netdev=%s addr=%s dry_run=%d", w[i].netdev, w[i].addr, o->dry_run);
	}
	/* every planned netdev that exists, once */
	for (size_t i = 0; i < nwant && rc == 0; i++) {
		bool seen = false;
		for (size_t j = 0; j < i; j++)
			seen |= w[j].netdev && w[i].netdev && strcmp(w[j].netdev, w[i].netdev) == 0;
		if (!seen && w[i].netdev && if_nametoindex(w[i].netdev))
			rc = arp_settings(w[i].netdev, o->dry_run, sysctls, err, errlen);
	}
out:
	topo_nl_close(&nl);
	bool changed = json_array_size(added) || json_array_size(removed) || json_array_size(sysctls);
	char msg[160];
	if (rc < 0)
		snprintf(msg, sizeof msg, "stopped: %s", err);
	else if (!changed)
		snprintf(msg, sizeof msg, "addresses and ARP settings already match the plan: nothing "
					  "changed");
	else
		snprintf(msg, sizeof msg, "%s %zu address(es), %s %zu, %s %zu ARP setting(s)",
			 o->dry_run ? "would add" : "added", json_array_size(added),
			 o->dry_run ? "would remove" : "removed", json_array_size(removed),
			 o->dry_run ? "would set" : "set", json_array_size(sysctls));
	*report = json_pack("{s:s, s:b, s:b, s:o, s:o, s:o, s:o, s:o, s:s}", "node", o->node,
			    "changed", changed && !o->dry_run, "dry_run", o->dry_run, "added", added,
			    "removed", removed, "kept", kept, "missing_netdevs", missing, "sysctls",
			    sysctls, "message", msg);
	free(w);
	free(devs);
	return rc;
}

/* ---------- netplan ---------- */

struct nentry {
	const char *netdev;
	const char *addr;
};

static int nentry_cmp(const void *a, const void *b)
{
	return strcmp(((const struct nentry *)a)->netdev, ((const struct nentry *)b)->netdev);
}

int topo_addrplan_netplan(json_t *plan, const char *node, int mtu, char **yaml, char *err,
			  size_t errlen)
{
	char dummy[8];
	if (!err) {
		err = dummy;
		errlen = sizeof dummy;
	}
	err[0] = '\0';
	if (!yaml || !node)
		return -EINVAL;
	*yaml = NULL;
	json_t *mine = json_object_get(json_object_get(plan, "nodes"), node);
	size_t n = json_array_size(mine);
	if (!n) {
		snprintf(err, errlen, "the plan gives node %s no address", node);
		return -EINVAL;
	}
	struct nentry *e = calloc(n, sizeof *e);
	if (!e)
		return -ENOMEM;
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		json_t *x = json_array_get(mine, i);
		if (!jstr(x, "netdev") || !jstr(x, "address"))
			continue;
		e[k].netdev = jstr(x, "netdev");
		e[k].addr = jstr(x, "address");
		k++;
	}
	qsort(e, k, sizeof e[0], nentry_cmp);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f) {
		free(e);
		return -ENOMEM;
	}
	fprintf(f,
		"# %s: fabric addresses of %s, written by sparkctl\n"
		"# (%s plan from pool %s). Apply with `netplan apply`. After recabling,\n"
		"# run `sparkctl topo validate` and write this file again. Remove other files\n"
		"# that configure these netdevs (NVIDIA's 40-cx7.yaml): netplan merges them.\n"
		"network:\n"
		"  version: 2\n"
		"  ethernets:\n",
		TOPO_NETPLAN_PATH, node, jstr(plan, "class") ? jstr(plan, "class") : "?",
		jstr(plan, "pool") ? jstr(plan, "pool") : "?");
	for (size_t i = 0; i < k; i++) {
		if (i > 0 && strcmp(e[i].netdev, e[i - 1].netdev) == 0) {
			fprintf(f, "        - %s\n", e[i].addr);
			continue;
		}
		fprintf(f, "    %s:\n      dhcp4: false\n      dhcp6: false\n      optional: true\n",
			e[i].netdev);
		if (mtu > 0)
			fprintf(f, "      mtu: %d\n", mtu);
		fprintf(f, "      addresses:\n        - %s\n", e[i].addr);
	}
	fclose(f);
	free(e);
	*yaml = buf;
	return 0;
}

int topo_addrplan_write_netplan(const char *path, const char *yaml)
{
	if (!path || !yaml)
		return -EINVAL;
	return util_write_file(path, yaml, strlen(yaml), 0600);
}

/* ---------- this host's other networks ---------- */

static bool is_fabric_netdev(json_t *discovery, const char *name)
{
	size_t i, j;
	json_t *p, *t;
	json_array_foreach(json_object_get(discovery, "ports"), i, p)
		json_array_foreach(json_object_get(p, "twins"), j, t)
			if (jstr(t, "netdev") && strcmp(jstr(t, "netdev"), name) == 0)
				return true;
	return false;
}

int topo_host_addresses(json_t *discovery, json_t **out, char *err, size_t errlen)
{
	char dummy[8];
	if (!err) {
		err = dummy;
		errlen = sizeof dummy;
	}
	err[0] = '\0';
	if (!out)
		return -EINVAL;
	*out = NULL;
	struct topo_nd *nds = NULL;
	size_t n = 0;
	int r = topo_nl_netdevs(&nds, &n, err, errlen); /* discovery's own netlink reader */
	if (r < 0)
		return r;
	json_t *list = json_array();
	for (size_t i = 0; i < n; i++) {
		if (is_fabric_netdev(discovery, nds[i].name)) /* the plan's own */
			continue;
		size_t j;
		json_t *a;
		json_array_foreach(nds[i].ipv4, j, a) {
			const char *txt = json_string_value(a);
			if (txt && strncmp(txt, "127.", 4) != 0) /* loopback */
				json_array_append_new(list, json_pack("{s:s, s:s}", "netdev", nds[i].name,
								      "address", txt));
		}
	}
	topo_nds_free(nds, n);
	*out = list;
	return 0;
}

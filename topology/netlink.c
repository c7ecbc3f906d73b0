/* netlink: discovery's view of the links and addresses of the current
 * network namespace (one dump through nl.h), as topo_nd records. The live
 * watcher is watch.c. */
#include "nl.h"
#include "topo_internal.h"

#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netlink/addr.h>
#include <netlink/cache.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int topo_nl_netdevs(struct topo_nd **out, size_t *n, char *err, size_t errlen)
{
	struct topo_nl nl;
	struct topo_nd *v = NULL;
	size_t k = 0;
	int r = topo_nl_read(&nl, TOPO_NL_LINKS | TOPO_NL_ADDRS, err, errlen);
	if (r < 0)
		return r;
	struct nl_cache *links = nl.links, *addrs = nl.addrs;
	int cnt = nl_cache_nitems(links);
	v = calloc(cnt > 0 ? (size_t)cnt : 1, sizeof *v);
	if (!v) {
		r = -ENOMEM;
		goto out;
	}
	for (struct nl_object *o = nl_cache_get_first(links); o && k < (size_t)cnt;
	     o = nl_cache_get_next(o)) {
		struct rtnl_link *l = (struct rtnl_link *)o;
		const char *name = rtnl_link_get_name(l);
		char ifn[16];
		if (!name || topo_parse_ifname(name, strlen(name), ifn, sizeof ifn) < 0)
			continue;
		struct topo_nd *nd = &v[k++];
		topo_nd_init(nd);
		util_strlcpy(nd->name, ifn, sizeof nd->name);
		nd->ifindex = rtnl_link_get_ifindex(l);
		nd->src_ifindex = TOPO_SRC_NETLINK;
		nd->mtu = (long)rtnl_link_get_mtu(l);
		nd->src_mtu = TOPO_SRC_NETLINK;
		char buf[64];
		rtnl_link_operstate2str(rtnl_link_get_operstate(l), buf, sizeof buf);
		if (topo_parse_operstate(buf, strlen(buf), nd->operstate, sizeof nd->operstate) == 0)
			nd->src_oper = TOPO_SRC_NETLINK;
		/* IFLA_CARRIER; the kernel reports 0 for an administratively down link. */
		nd->carrier = rtnl_link_get_carrier(l) ? 1 : 0;
		nd->admin_up = (rtnl_link_get_flags(l) & IFF_UP) ? 1 : 0;
		nd->src_carrier = TOPO_SRC_NETLINK;
		struct nl_addr *mac = rtnl_link_get_addr(l);
		if (mac && nl_addr_get_len(mac) > 0 && nl_addr_get_len(mac) <= 20) {
			const unsigned char *m = nl_addr_get_binary_addr(mac);
			size_t o2 = 0;
			for (unsigned i = 0; i < nl_addr_get_len(mac); i++)
				o2 += (size_t)snprintf(nd->mac + o2, sizeof nd->mac - o2, "%s%02x",
						       i ? ":" : "", m[i]);
			nd->src_mac = TOPO_SRC_NETLINK;
		}
		nd->src_addr = TOPO_SRC_NETLINK;
		for (struct nl_object *ao = nl_cache_get_first(addrs); ao;
		     ao = nl_cache_get_next(ao)) {
			struct rtnl_addr *a = (struct rtnl_addr *)ao;
			if (rtnl_addr_get_ifindex(a) != nd->ifindex)
				continue;
			char txt[INET6_ADDRSTRLEN + 8];
			int fam;
			if (topo_nl_addr_text(a, txt, sizeof txt, &fam) < 0)
				continue;
			json_array_append_new(fam == AF_INET ? nd->ipv4 : nd->ipv6, json_string(txt));
		}
	}
	r = 0;
out:
	topo_nl_close(&nl);
	if (r < 0) {
		topo_nds_free(v, k);
		return r;
	}
	*out = v;
	*n = k;
	return 0;
}

/* Netlink operations of the simulator, all through libnl-route-3. */
#include "sim_int.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/pkt_sched.h>
#include <netlink/errno.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/link/bridge.h>
#include <netlink/route/link/veth.h>
#include <netlink/route/qdisc.h>
#include <netlink/route/qdisc/netem.h>
#include <netlink/route/tc.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* libnl errors are positive NLE_* codes; map the ones we meet to errno. */
static int nlerr(int e)
{
	if (e >= 0)
		return e;
	switch (-e) {
	case NLE_EXIST: return -EEXIST;
	case NLE_OBJ_NOTFOUND:
	case NLE_NODEV: return -ENODEV;
	case NLE_PERM: return -EPERM;
	case NLE_NOMEM: return -ENOMEM;
	case NLE_INVAL: return -EINVAL;
	case NLE_RANGE: return -ERANGE;
	case NLE_BUSY: return -EBUSY;
	case NLE_OPNOTSUPP: return -EOPNOTSUPP;
	case NLE_NOACCESS: return -EACCES;
	default:
		if (getenv("SPARK_SIM_DEBUG"))
			fprintf(stderr, "libnl: %s\n", nl_geterror(e));
		return -EIO;
	}
}

struct nl_sock *simnet_open(int nsfd)
{
	int self = -1;
	if (nsfd >= 0) {
		self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
		if (self < 0)
			return NULL;
		if (setns(nsfd, CLONE_NEWNET) < 0) {
			close(self);
			return NULL;
		}
	}
	struct nl_sock *sk = nl_socket_alloc();
	if (sk && nl_connect(sk, NETLINK_ROUTE) < 0) {
		nl_socket_free(sk);
		sk = NULL;
	}
	if (self >= 0) {
		if (setns(self, CLONE_NEWNET) < 0) {
			/* Cannot get back: refuse to continue in the wrong place. */
			if (sk)
				nl_socket_free(sk);
			sk = NULL;
		}
		close(self);
	}
	return sk;
}

void simnet_close(struct nl_sock *sk)
{
	if (sk)
		nl_socket_free(sk);
}

static int get_link(struct nl_sock *sk, const char *ifname, struct rtnl_link **out)
{
	int r = rtnl_link_get_kernel(sk, 0, ifname, out);
	return r < 0 ? nlerr(r) : 0;
}

int simnet_ifindex(struct nl_sock *sk, const char *ifname)
{
	struct rtnl_link *l;
	int r = get_link(sk, ifname, &l);
	if (r < 0)
		return r;
	int idx = rtnl_link_get_ifindex(l);
	rtnl_link_put(l);
	return idx;
}

static int set_mac(struct rtnl_link *l, const char *mac)
{
	if (!mac || !*mac)
		return 0;
	struct nl_addr *a;
	int r = nl_addr_parse(mac, AF_LLC, &a);
	if (r < 0)
		return nlerr(r);
	rtnl_link_set_addr(l, a);
	nl_addr_put(a);
	return 0;
}

int simnet_bridge_add(struct nl_sock *ctl, const char *name, int nsfd)
{
	struct rtnl_link *l = rtnl_link_bridge_alloc();
	if (!l)
		return -ENOMEM;
	rtnl_link_set_name(l, name);
	rtnl_link_set_ns_fd(l, nsfd);
	rtnl_link_set_flags(l, IFF_UP);
	/* A new bridge has STP off: ports forward as soon as they are up. */
	int r = nlerr(rtnl_link_add(ctl, l, NLM_F_CREATE | NLM_F_EXCL));
	rtnl_link_put(l);
	return r;
}

static int fill_end(struct rtnl_link *l, const struct sim_end *e, int nsfd, bool may_up)
{
	rtnl_link_set_name(l, e->ifname);
	rtnl_link_set_ns_fd(l, nsfd);
	if (e->mtu > 0)
		rtnl_link_set_mtu(l, (unsigned)e->mtu);
	if (e->up && may_up)
		rtnl_link_set_flags(l, IFF_UP);
	return set_mac(l, e->mac);
}

int simnet_veth_add(struct nl_sock *ctl, const struct sim_end *m, int mfd, int master,
		    const struct sim_end *p, int pfd)
{
	struct rtnl_link *l = rtnl_link_veth_alloc();
	if (!l)
		return -ENOMEM;
	/* libnl versions differ on whether get_peer takes a reference. */
	struct rtnl_link *peer = rtnl_link_veth_get_peer(l);
	int extra_ref = nl_object_get_refcnt((struct nl_object *)peer) > 1;
	/* The kernel opens the peer before it is paired (-ENOTCONN if asked
	 * to bring it up): only the main end comes up here. */
	int r = fill_end(l, m, mfd, true);
	if (r == 0)
		r = fill_end(peer, p, pfd, false);
	if (r == 0 && master > 0)
		rtnl_link_set_master(l, master);
	if (r == 0)
		r = nlerr(rtnl_link_add(ctl, l, NLM_F_CREATE | NLM_F_EXCL));
	if (extra_ref)
		rtnl_link_put(peer);
	rtnl_link_veth_release(l);
	return r;
}

int simnet_link_del(struct nl_sock *sk, const char *ifname)
{
	struct rtnl_link *l;
	int r = get_link(sk, ifname, &l);
	if (r < 0)
		return r;
	r = nlerr(rtnl_link_delete(sk, l));
	rtnl_link_put(l);
	return r;
}

int simnet_link_set(struct nl_sock *sk, const char *ifname, int up, int mtu, int master)
{
	struct rtnl_link *orig;
	int r = get_link(sk, ifname, &orig);
	if (r < 0)
		return r;
	struct rtnl_link *ch = rtnl_link_alloc();
	if (!ch) {
		rtnl_link_put(orig);
		return -ENOMEM;
	}
	if (up == 1)
		rtnl_link_set_flags(ch, IFF_UP);
	else if (up == 0)
		rtnl_link_unset_flags(ch, IFF_UP);
	if (mtu > 0)
		rtnl_link_set_mtu(ch, (unsigned)mtu);
	if (master >= 0)
		rtnl_link_set_master(ch, master);
	r = nlerr(rtnl_link_change(sk, orig, ch, 0));
	rtnl_link_put(ch);
	rtnl_link_put(orig);
	return r;
}

int simnet_addr_add(struct nl_sock *sk, const char *ifname, const char *cidr)
{
	int idx = simnet_ifindex(sk, ifname);
	if (idx < 0)
		return idx;
	struct nl_addr *local;
	int r = nl_addr_parse(cidr, AF_INET, &local);
	if (r < 0)
		return nlerr(r);
	struct rtnl_addr *a = rtnl_addr_alloc();
	if (!a) {
		nl_addr_put(local);
		return -ENOMEM;
	}
	rtnl_addr_set_ifindex(a, idx);
	rtnl_addr_set_family(a, AF_INET);
	r = rtnl_addr_set_local(a, local);
	if (r == 0)
		rtnl_addr_set_prefixlen(a, (int)nl_addr_get_prefixlen(local));
	if (r == 0)
		r = rtnl_addr_add(sk, a, 0);
	rtnl_addr_put(a);
	nl_addr_put(local);
	return nlerr(r);
}

int simnet_delay(struct nl_sock *sk, const char *ifname, int ms)
{
	int idx = simnet_ifindex(sk, ifname);
	if (idx < 0)
		return idx;
	struct rtnl_qdisc *q = rtnl_qdisc_alloc();
	if (!q)
		return -ENOMEM;
	rtnl_tc_set_ifindex(TC_CAST(q), idx);
	rtnl_tc_set_parent(TC_CAST(q), TC_H_ROOT);
	int r;
	if (ms <= 0) {
		r = rtnl_qdisc_delete(sk, q);
		/* Nothing to remove is fine. */
		if (r == -NLE_OBJ_NOTFOUND || r == -NLE_NOATTR || r == -NLE_INVAL ||
		    r == -NLE_OPNOTSUPP || r == -NLE_NODEV)
			r = 0;
	} else {
		rtnl_tc_set_handle(TC_CAST(q), TC_HANDLE(0x5350, 0));
		r = rtnl_tc_set_kind(TC_CAST(q), "netem");
		if (r == 0) {
			rtnl_netem_set_limit(q, 1000);
			rtnl_netem_set_delay(q, ms * 1000); /* microseconds */
			r = rtnl_qdisc_add(sk, q, NLM_F_CREATE | NLM_F_REPLACE);
		}
	}
	rtnl_qdisc_put(q);
	return nlerr(r);
}

static void fill_info(struct nl_sock *sk, struct rtnl_link *l, struct sim_link_info *out)
{
	memset(out, 0, sizeof *out);
	out->ifindex = rtnl_link_get_ifindex(l);
	unsigned flags = rtnl_link_get_flags(l);
	out->admin_up = (flags & IFF_UP) != 0;
	out->carrier = (flags & IFF_LOWER_UP) != 0;
	out->mtu = (int)rtnl_link_get_mtu(l);
	struct nl_addr *a = rtnl_link_get_addr(l);
	if (a)
		nl_addr2str(a, out->mac, sizeof out->mac);
	int m = rtnl_link_get_master(l);
	if (m > 0) {
		struct rtnl_link *ml;
		if (rtnl_link_get_kernel(sk, m, NULL, &ml) == 0) {
			snprintf(out->master, sizeof out->master, "%s", rtnl_link_get_name(ml));
			rtnl_link_put(ml);
		}
	}
}

int simnet_query(struct nl_sock *sk, const char *ifname, struct sim_link_info *out)
{
	struct rtnl_link *l;
	int r = get_link(sk, ifname, &l);
	if (r < 0)
		return r;
	fill_info(sk, l, out);
	rtnl_link_put(l);
	return 0;
}

int simnet_names(struct nl_sock *sk, json_t *arr)
{
	struct nl_cache *c;
	int r = rtnl_link_alloc_cache(sk, AF_UNSPEC, &c);
	if (r < 0)
		return nlerr(r);
	for (struct nl_object *o = nl_cache_get_first(c); o; o = nl_cache_get_next(o))
		json_array_append_new(arr, json_string(rtnl_link_get_name((struct rtnl_link *)o)));
	nl_cache_free(c);
	return 0;
}

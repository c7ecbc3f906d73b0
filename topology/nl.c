/* nl: NETLINK_ROUTE sockets and link/address dumps for topology/ (see nl.h). */
#include "nl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netlink/addr.h>
#include <netlink/cache.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/socket.h>
#include <stdio.h>
#include <string.h>

static int fail(char *err, size_t errlen, int code, const char *step, int nlerr)
{
	if (err && errlen)
		snprintf(err, errlen, "netlink: %s: %s", step,
			 code == -ENOMEM ? "out of memory" : nl_geterror(nlerr));
	return code;
}

int topo_nl_open(struct topo_nl *nl, char *err, size_t errlen)
{
	memset(nl, 0, sizeof *nl);
	nl->sk = nl_socket_alloc();
	if (!nl->sk)
		return fail(err, errlen, -ENOMEM, "socket", 0);
	int r = nl_connect(nl->sk, NETLINK_ROUTE);
	if (r < 0) {
		topo_nl_close(nl);
		return fail(err, errlen, -EIO, "connect", r);
	}
	return 0;
}

int topo_nl_open_events(struct topo_nl *nl, nl_recvmsg_msg_cb_t on_msg, void *arg, char *err,
			size_t errlen)
{
	int r = topo_nl_open(nl, err, errlen);
	if (r < 0)
		return r;
	nl_socket_disable_seq_check(nl->sk);
	r = nl_socket_modify_cb(nl->sk, NL_CB_VALID, NL_CB_CUSTOM, on_msg, arg);
	const char *step = "callback";
	if (r >= 0) {
		step = "subscribe";
		r = nl_socket_add_memberships(nl->sk, RTNLGRP_LINK, RTNLGRP_IPV4_IFADDR,
					      RTNLGRP_IPV6_IFADDR, 0);
	}
	if (r >= 0) {
		step = "non-blocking";
		r = nl_socket_set_nonblocking(nl->sk);
	}
	if (r < 0) {
		topo_nl_close(nl);
		return fail(err, errlen, -EIO, step, r);
	}
	/* A burst (many links flapping at once) fits before ENOBUFS; failing to
	 * grow the buffer only makes a resync likelier. */
	nl_socket_set_buffer_size(nl->sk, 1 << 20, 0);
	return 0;
}

static void free_dumps(struct topo_nl *nl)
{
	if (nl->addrs)
		nl_cache_free(nl->addrs);
	if (nl->links)
		nl_cache_free(nl->links);
	nl->addrs = nl->links = NULL;
}

int topo_nl_dump(struct topo_nl *nl, unsigned what, char *err, size_t errlen)
{
	free_dumps(nl);
	if (!nl->sk)
		return fail(err, errlen, -EIO, "dump", -NLE_BAD_SOCK);
	int r;
	if ((what & TOPO_NL_LINKS) && (r = rtnl_link_alloc_cache(nl->sk, AF_UNSPEC, &nl->links)) < 0) {
		nl->links = NULL;
		return fail(err, errlen, -EIO, "link dump", r);
	}
	if ((what & TOPO_NL_ADDRS) && (r = rtnl_addr_alloc_cache(nl->sk, &nl->addrs)) < 0) {
		nl->addrs = NULL;
		free_dumps(nl);
		return fail(err, errlen, -EIO, "address dump", r);
	}
	return 0;
}

int topo_nl_read(struct topo_nl *nl, unsigned what, char *err, size_t errlen)
{
	int r = topo_nl_open(nl, err, errlen);
	if (r < 0)
		return r;
	r = topo_nl_dump(nl, what, err, errlen);
	if (r < 0)
		topo_nl_close(nl);
	return r;
}

void topo_nl_close(struct topo_nl *nl)
{
	if (!nl)
		return;
	free_dumps(nl);
	if (nl->sk)
		nl_socket_free(nl->sk); /* closes the fd */
	nl->sk = NULL;
}

int topo_nl_addr_text(struct rtnl_addr *a, char *out, size_t outlen, int *family)
{
	struct nl_addr *l = rtnl_addr_get_local(a);
	if (!l)
		return -EINVAL;
	int fam = nl_addr_get_family(l);
	unsigned blen = nl_addr_get_len(l);
	if (!((fam == AF_INET && blen == 4) || (fam == AF_INET6 && blen == 16)))
		return -EINVAL;
	char t[INET6_ADDRSTRLEN];
	if (!inet_ntop(fam, nl_addr_get_binary_addr(l), t, sizeof t))
		return -EINVAL;
	snprintf(out, outlen, "%s/%d", t, rtnl_addr_get_prefixlen(a));
	if (family)
		*family = fam;
	return 0;
}

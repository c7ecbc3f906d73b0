/* nl: the one NETLINK_ROUTE helper of topology/ (libnl-route-3). Discovery
 * (netlink.c), the live watcher (watch.c) and the address plan (addrplan.c)
 * open their sockets and dump links and addresses through it. Not part of
 * the public API.
 *
 * A socket belongs to the network namespace current when it is opened, so
 * nothing here keeps a socket between calls: each reader opens, dumps and
 * closes; only the watcher keeps its event socket.
 *
 * Errors: every function returns 0 or a negative errno: -ENOMEM (out of
 * memory) or -EIO (the kernel or libnl refused; libnl's own code is not
 * returned), and fills err (when not NULL) with one line that starts with
 * "netlink: " and says which step failed ("netlink: link dump: ..."). */
#ifndef SPARK_TOPO_NL_H
#define SPARK_TOPO_NL_H

#include <netlink/handlers.h>
#include <stddef.h>

struct nl_sock;
struct nl_cache;
struct rtnl_addr;

/* What topo_nl_dump reads. */
#define TOPO_NL_LINKS 1u
#define TOPO_NL_ADDRS 2u

/* A socket and what was dumped through it. Zero-initialise, or let
 * topo_nl_open / topo_nl_open_events fill it. */
struct topo_nl {
	struct nl_sock *sk;
	struct nl_cache *links; /* rtnl_link objects (TOPO_NL_LINKS), else NULL */
	struct nl_cache *addrs; /* rtnl_addr objects of every family (TOPO_NL_ADDRS), else NULL */
};

/* A connected NETLINK_ROUTE socket for dumps and changes (rtnl_addr_add...). */
int topo_nl_open(struct topo_nl *nl, char *err, size_t errlen);
/* A non-blocking socket subscribed to link and address events (RTNLGRP_LINK,
 * RTNLGRP_IPV4_IFADDR, RTNLGRP_IPV6_IFADDR), sequence checks off, a 1 MiB
 * receive buffer, every valid message passed to on_msg(msg, arg). */
int topo_nl_open_events(struct topo_nl *nl, nl_recvmsg_msg_cb_t on_msg, void *arg, char *err,
			size_t errlen);
/* Dump what (TOPO_NL_LINKS | TOPO_NL_ADDRS) into nl->links / nl->addrs,
 * replacing an earlier dump. On failure both are NULL. */
int topo_nl_dump(struct topo_nl *nl, unsigned what, char *err, size_t errlen);
/* topo_nl_open, then topo_nl_dump; nothing is left open on failure. */
int topo_nl_read(struct topo_nl *nl, unsigned what, char *err, size_t errlen);
/* The dumps, then the socket. Safe on a zeroed or closed struct. */
void topo_nl_close(struct topo_nl *nl);

/* "169.254.1.1/24" or "fe80::1/64" from an address's local address; *family
 * (may be NULL) is AF_INET or AF_INET6. -EINVAL for any other family or a
 * wrong length. */
int topo_nl_addr_text(struct rtnl_addr *a, char *out, size_t outlen, int *family);

#endif

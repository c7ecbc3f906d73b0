/* addrplan: IPv4 addressing of the fabric, from a classified cable map.
 *
 * CONTRACT
 * - topo_addrplan_make() is pure: verdict (classify.h) + pool -> plan.
 *   ring/pair: one subnet per twin per direct cable, end "a" .1, end "b" .2
 *   (a = the lower of the two "node:port" names). switch: one subnet per twin
 *   rail (twin 0 of every node in one subnet, twin 1 in another), one host
 *   number per node. Every twin gets its own subnet, so routing is never
 *   ambiguous (SPARK-FACTS.md).
 * - Deterministic and stable: a cable's subnet is chosen by a hash of its two
 *   ends and twin (linear probing on a collision, cables taken in name
 *   order), a node's host number by a hash of its name; so recabling one
 *   cable leaves every other cable's addresses alone. The pool's first and
 *   last subnets are never used (169.254.0.0/24 and .255.0/24 are reserved
 *   by RFC 3927).
 * - Pools: TOPO_ADDR_DEFAULT_POOL for real clusters (fabric.pool overrides);
 *   the simulator and tests pass "169.254.0.0/16" explicitly.
 * - topo_addrplan_apply() (libnl-route-3) makes this node's netdevs match the
 *   plan: adds missing addresses, removes addresses INSIDE THE POOL that the
 *   plan does not give that netdev (sparkctl owns the pool), leaves every other
 *   address alone. Re-running with unchanged cabling changes nothing and says
 *   so ("changed":false). It also sets arp_ignore=1 and arp_announce=2 on
 *   every planned netdev (/proc/sys/net/ipv4/conf/DEV): both twins of a port
 *   hear the same ARP broadcasts, and with Linux's defaults peers learn both
 *   twins' addresses at one twin's MAC, halving the port (addrplan.c). Needs
 *   CAP_NET_ADMIN in the node's namespace.
 * - topo_addrplan_netplan() renders /etc/netplan/40-sparkctl.yaml for one node
 *   without applying it; topo_addrplan_write_netplan() writes it mode 0600.
 * - Members' own networks (verdict "host_addresses", see topo_host_addresses)
 *   are never planned over: a subnet that overlaps one is skipped like a
 *   taken one; a network that holds the whole pool blocks only the subnet of
 *   the member's address there.
 *
 * PLAN: {"pool","prefix","class",
 *   "subnets":[{"subnet":"169.254.7.0/24","twin":0,"cable":"spark-1:0-spark-2:1"|null,
 *               "rail":0|null,"members":[{"node","port","netdev","address"}]}],
 *   "nodes":{"spark-1":[{"netdev","port","twin","address":"169.254.7.1/24",
 *                        "subnet","peers":["169.254.7.2"]}]},
 *   "avoided":[{"node","netdev","address","blocked":"10.77.5.0/24"|null,
 *               "contains_pool":bool}]}
 * APPLY REPORT: {"node","changed":bool,"dry_run":bool,"added":[{"netdev","address"}],
 *   "removed":[...],"kept":[...],"missing_netdevs":[...],
 *   "sysctls":[{"netdev","name":"arp_ignore"|"arp_announce","value","was"}],"message"}
 */
#ifndef SPARK_TOPO_ADDRPLAN_H
#define SPARK_TOPO_ADDRPLAN_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* RFC 1918, rarely used by home or office networks. */
#define TOPO_ADDR_DEFAULT_POOL "10.77.0.0/16"
#define TOPO_ADDR_SIM_POOL "169.254.0.0/16"
#define TOPO_ADDR_DEFAULT_PREFIX 24
#define TOPO_NETPLAN_PATH "/etc/netplan/40-sparkctl.yaml"

struct topo_addrplan_opts {
	const char *pool; /* NULL = TOPO_ADDR_DEFAULT_POOL */
	int prefix;       /* subnet length, 0 = 24; must leave >= 4 subnets in the pool */
};

/* 0 with *plan, or -EINVAL (err filled): bad pool/prefix, a verdict without
 * class or cables, class "unknown", or more subnets/hosts than fit. */
int topo_addrplan_make(json_t *verdict, const struct topo_addrplan_opts *o, json_t **plan, char *err,
		       size_t errlen);

struct topo_addrplan_apply_opts {
	const char *node; /* this node's name in the plan */
	/* This node's fabric netdevs; stale pool addresses are removed from all
	 * of them (a port whose cable went away loses its old address). NULL =
	 * the netdevs the plan names for this node. */
	const char *const *netdevs;
	size_t n_netdevs;
	bool dry_run; /* report what would change, touch nothing */
};

/* 0 with *report, or negative errno (err filled): -EINVAL bad plan/node,
 * -EIO netlink failure (the report, when set, lists what was done before). */
int topo_addrplan_apply(json_t *plan, const struct topo_addrplan_apply_opts *o, json_t **report,
			char *err, size_t errlen);

/* This host's IPv4 addresses outside its fabric: every address on a netdev
 * that is not loopback and not a fabric netdev of `discovery`
 * (ports[].twins[].netdev), as [{"netdev","address":"a.b.c.d/len"}]. The head
 * puts each member's list into the verdict as "host_addresses"
 * {"node":[...]}, and topo_addrplan_make() keeps the plan off those networks
 * (the plan's "avoided" lists what it kept clear of). 0, or a negative errno
 * (netlink). */
int topo_host_addresses(json_t *discovery, json_t **out, char *err, size_t errlen);

/* YAML text for one node (caller frees). mtu > 0 adds "mtu:" to every netdev.
 * 0, or -EINVAL when the plan has nothing for that node. */
int topo_addrplan_netplan(json_t *plan, const char *node, int mtu, char **yaml, char *err,
			  size_t errlen);

/* Write yaml to path (TOPO_NETPLAN_PATH on DGX OS) atomically, mode 0600. */
int topo_addrplan_write_netplan(const char *path, const char *yaml);

#endif

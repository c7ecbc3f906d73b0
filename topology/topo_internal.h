/* topo_internal: what the discovery sources (sysfs.c, netlink.c, verbs.c)
 * fill and discover.c groups and writes out. Not part of the public API. */
#ifndef SPARK_TOPO_INTERNAL_H
#define SPARK_TOPO_INTERNAL_H

#include "sysfs_parse.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TOPO_SRC_SYSFS "sysfs"
#define TOPO_SRC_NETLINK "netlink"
#define TOPO_SRC_VERBS "verbs"
#define TOPO_SRC_DUMP "netlink_dump" /* `ip -json address` output read from a file */

/* One netdev. Numbers are -1 when unknown; strings "" when unknown. Each
 * fact's source is recorded as it is read (src_*, NULL = not known). */
struct topo_nd {
	char name[16];
	long ifindex;
	char mac[64];
	long mtu;
	char operstate[20];
	int carrier;     /* 1, 0, -1 unknown */
	int admin_up;    /* IFF_UP: 1, 0, -1 unknown */
	long speed;      /* Mb/s, -1 unknown */
	bool is_virtual; /* lives under /sys/devices/virtual */
	bool has_device; /* has a device link (PCI, virtio, USB...) */
	char driver[64];
	bool has_pci;
	char pci[24];
	struct topo_pci_addr pa;
	long vendor, device;  /* PCI ids, -1 unknown */
	long cur_width, max_width;
	char cur_speed[32], max_speed[32];
	int cur_gen, max_gen;
	int phys_port;   /* from phys_port_name "pN", -1 unknown */
	json_t *ipv4, *ipv6; /* arrays of "addr/len" strings */
	const char *src_ifindex, *src_mac, *src_mtu, *src_oper, *src_carrier, *src_speed,
	    *src_driver, *src_pci, *src_addr;
	bool sysfs_ok;   /* the sysfs entry exists and is this very netdev */
};

struct topo_gid {
	int index;
	uint8_t raw[16];
	int type;        /* 1 RoCE v1 (or IB), 2 RoCE v2, 0 unknown */
	char ndev[16];   /* "" if unknown */
};

struct topo_ibport {
	int num;
	int state, phys_state; /* -1 unknown */
	char state_w[32], phys_state_w[48];
	char rate[64];
	long rate_tenths;      /* -1 unknown */
	char link_layer[16];
	char ndev[16];         /* netdev of the port's GIDs (the GID at index 0), "" unknown */
	bool gids_read;        /* gids holds the table (it is read only when needed) */
	struct topo_gid *gids;
	size_t n_gids;
};

struct topo_ibdev {
	char name[64];
	bool has_pci;
	char pci[24];
	char hca_type[32];
	char fw_ver[64];
	struct topo_ibport *ports;
	size_t n_ports;
	const char *source;
};

/* sysfs.c: paths are root + "/" + rel. */
int topo_sysfs_path(const char *root, const char *rel, char *out, size_t outlen);
/* Read a small file; 0 with buf NUL-terminated and *len set, or -errno. */
int topo_sysfs_read(const char *root, const char *rel, char *buf, size_t buflen, size_t *len);
/* Sorted names in a directory (no "." entries); caller frees with topo_free_names. */
int topo_sysfs_list(const char *root, const char *rel, char ***names, size_t *n);
void topo_free_names(char **names, size_t n);
/* Basename of a symlink's target. */
int topo_sysfs_link_base(const char *root, const char *rel, char *out, size_t outlen);
/* Full target of a symlink (as readlink gives it). */
int topo_sysfs_link(const char *root, const char *rel, char *out, size_t outlen);
/* The netdevs of root/sys/class/net, basic facts from sysfs. */
int topo_sysfs_netdevs(const char *root, struct topo_nd **out, size_t *n);
/* Facts only sysfs has (speed, PCI, driver, phys_port_name) for nd->name.
 * check_ifindex: skip them when sysfs's ifindex differs from nd->ifindex
 * (a netdev of another namespace with the same name). */
void topo_sysfs_netdev_extras(const char *root, struct topo_nd *nd, bool check_ifindex);
/* All RDMA devices of root/sys/class/infiniband (none if it is absent): device and
 * port facts and each port's netdev (from its first GID entry), not the GID tables
 * (up to 1024 entries each on rxe); topo_sysfs_ibdev_gids reads those. */
int topo_sysfs_ibdevs(const char *root, struct topo_ibdev **out, size_t *n);
/* Read the GID tables of d's ports that have none yet. */
void topo_sysfs_ibdev_gids(const char *root, struct topo_ibdev *d);
void topo_ibdevs_free(struct topo_ibdev *d, size_t n);
void topo_nds_free(struct topo_nd *nd, size_t n);
void topo_nd_init(struct topo_nd *nd);

/* netlink.c: links and addresses of the current network namespace (one
 * dump through nl.h). Errors as nl.h says. */
int topo_nl_netdevs(struct topo_nd **out, size_t *n, char *err, size_t errlen);

/* verbs.c: replace the facts of the devices libibverbs can open with its
 * answers (source "verbs"), GID tables included; only devs[i] with want[i]
 * (every one if want is NULL). note says what happened when it could not. */
void topo_verbs_fill(struct topo_ibdev *devs, size_t n, const bool *want, char *note,
		     size_t notelen);
/* "200 Gb/sec (4X HDR)" from verbs active_speed/active_width (kernel format). */
int topo_ib_rate_string(int active_speed, int active_width, char *out, size_t outlen,
			long *tenths);

#endif

/* discover: this node's fabric as the hardware is (SPARK-FACTS.md, docs/discovery.md).
 *
 * CONTRACT
 * - topo_discover() reads netdevs (netlink, or sysfs alone), their PCI functions
 *   and RDMA devices (verbs where a device opens, sysfs otherwise) under
 *   opts->sysfs_root, picks the fabric netdevs and groups them into physical
 *   ports of twins. It returns one JSON object (shape below), 0, or a negative
 *   errno with err filled when discovery itself cannot run (unreadable
 *   sys/class/net, netlink failure). Finding nothing is not a failure.
 * - Fabric selection, first that applies: opts->ports (explicit map: port ->
 *   twin netdevs, the simulator's way), opts->interfaces (globs), else every
 *   netdev whose PCI function is a ConnectX-7 (15b3:1021). Twins are the same
 *   bus:device.function on two PCI domains (0000:01:00.0 and 0002:01:00.0);
 *   netdevs without PCI group by name (enp1s0f0np0 ~ enP2p1s0f0np0).
 * - Every fact carries its source in a "sources" object ("sysfs", "netlink",
 *   "verbs", or "netlink_dump" for an `ip -json address` file read in place of
 *   netlink from a fake tree). Unknown values are JSON null.
 * - topo_findings() is a pure function of that JSON (the head re-runs it with
 *   the cluster MTU); it never reads the machine.
 * - topo_watch_*: netlink link/address events for a libuv loop (or any loop
 *   polling topo_watch_fd()), one callback per carrier/speed/MTU/operstate/
 *   address change, deduplicated against the last known state.
 *
 * JSON (keys stable, snake_case; see docs/discovery.md for all of them):
 * {"schema_version":1, "sysfs_root":"/", "sources_used":{"sysfs":true,...},
 *  "notes":[...], "selection":{"by":"pci_id"|"interfaces"|"ports",...},
 *  "ports":[{"name":"0","twins":[{"netdev":"enp1s0f0np0","present":true,
 *     "ifindex":3,"mac":"..","mtu":9000,"operstate":"up","carrier":true,
 *     "speed_mbps":200000,"virtual":false,"driver":"mlx5_core",
 *     "pci":{"address":"0000:01:00.0","vendor_id":"0x15b3","device_id":"0x1021",
 *            "current_link_width":4,"max_link_width":4,...},
 *     "ipv4":["169.254.10.1/24"],"ipv6":[...],
 *     "rdma":{"device":"rocep1s0f0","port":1,"state":"active",
 *             "phys_state":"link_up","rate":"200 Gb/sec (4X HDR)",
 *             "rocev2_gid_index":3,"gids":[...],"source":"sysfs"},
 *     "sources":{"mtu":"sysfs",...}}, ...]}],
 *  "other_nics":[{"netdev":"enP7s7","pci_address":..,"vendor_id":..,...}],
 *  "host":{"cpus":20,"memory_mib":124536}}   (CPUs online and MemTotal; absent
 *  when the root has neither sys/devices/system/cpu/online nor proc/meminfo)
 */
#ifndef SPARK_TOPO_DISCOVER_H
#define SPARK_TOPO_DISCOVER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#define TOPO_CX7_VENDOR 0x15b3
#define TOPO_CX7_DEVICE 0x1021
#define TOPO_FULL_SPEED_MBPS 200000
#define TOPO_MIN_PCIE_WIDTH 4

struct topo_port_spec {
	const char *name;             /* "0", "1" or any label */
	const char *const *netdevs;   /* its twins */
	size_t n_netdevs;
};

struct topo_opts {
	const char *sysfs_root;            /* NULL or "" means "/" */
	const char *const *interfaces;     /* fabric.interfaces globs */
	size_t n_interfaces;
	const struct topo_port_spec *ports; /* fabric.ports */
	size_t n_ports;
	bool use_netlink; /* links/addresses from netlink; off: sysfs tree only */
	bool use_verbs;   /* ask libibverbs (only when sysfs_root is "/") */
	/* Without netlink: an `ip -json address show` dump for addresses.
	 * NULL = SYSFS_ROOT/ip-addr.json if that file exists. */
	const char *addr_dump;
	int cluster_mtu;  /* fabric.mtu, 0 = unknown; for the caller's topo_findings() */
	void *owned;      /* set by topo_opts_from_config; freed by topo_opts_free */
};

/* Defaults: root "/", netlink and verbs on, no selection override. */
void topo_opts_init(struct topo_opts *o);
/* Fill o from a config tree (cfg.h): fabric.interfaces (list of globs),
 * fabric.ports (map: port -> list of netdevs), fabric.mtu, discovery.sysfs_root.
 * A sysfs_root other than "/" turns netlink and verbs off. 0 or -EINVAL with
 * err naming the key. o keeps a reference to cfg until topo_opts_free. */
int topo_opts_from_config(struct topo_opts *o, json_t *cfg, char *err, size_t errlen);
void topo_opts_free(struct topo_opts *o);

int topo_discover(const struct topo_opts *opts, json_t **out, char *err, size_t errlen);

/* Findings over a discovery object: *findings = array of
 * {"code","severity":"warn"|"error","port","netdev","message","fix"} (port and
 * netdev null when they do not apply). cluster_mtu 0 skips
 * mtu_cluster_mismatch. Returns the number of findings or -EINVAL for a
 * discovery object without "ports". Codes: twin_down, speed_low,
 * pcie_width_low, mtu_twin_mismatch, mtu_cluster_mismatch, no_rocev2_gid,
 * rdma_port_inactive, twins_same_subnet, no_fabric_port. */
int topo_findings(json_t *discovery, int cluster_mtu, json_t **findings);

/* ---- live link/address watcher ---- */
enum {
	TOPO_CHG_CARRIER = 1u << 0,
	TOPO_CHG_SPEED = 1u << 1,
	TOPO_CHG_MTU = 1u << 2,
	TOPO_CHG_OPERSTATE = 1u << 3,
	TOPO_CHG_ADDR = 1u << 4,  /* addr/addr_added say which */
	TOPO_CHG_NEW = 1u << 5,   /* the netdev appeared */
	TOPO_CHG_GONE = 1u << 6,  /* the netdev was removed */
	TOPO_CHG_RESYNC = 1u << 7 /* events were lost; state re-read from a dump */
};

struct topo_link_event {
	unsigned changes;      /* TOPO_CHG_* bits */
	const char *netdev;
	int ifindex;
	int carrier, old_carrier;         /* 1/0, -1 unknown */
	long mtu, old_mtu;
	long speed_mbps, old_speed_mbps;  /* from sysfs, -1 unknown */
	const char *operstate;            /* "up", "down", "lowerlayerdown"... */
	const char *addr;                 /* TOPO_CHG_ADDR: "169.254.1.1/24" */
	bool addr_added;                  /* TOPO_CHG_ADDR: added (true) or removed */
};

typedef void (*topo_watch_cb)(const struct topo_link_event *ev, void *arg);
struct topo_watch;

/* Subscribe to link and IPv4/IPv6 address events of the current network
 * namespace and record the present state (no callbacks for it). sysfs_root
 * is where speeds are read (NULL = "/"). 0 or negative errno, err filled. */
int topo_watch_open(struct topo_watch **out, const char *sysfs_root, topo_watch_cb cb,
		    void *arg, char *err, size_t errlen);
/* The non-blocking netlink socket to poll for reading. */
int topo_watch_fd(const struct topo_watch *w);
/* Read every pending event and call back; 0 or negative errno. A lost-event
 * overflow (ENOBUFS) is handled by re-dumping links (TOPO_CHG_RESYNC). */
int topo_watch_process(struct topo_watch *w);
/* Run inside a libuv loop: uv_poll on the fd calling topo_watch_process. */
int topo_watch_uv_start(struct topo_watch *w, uv_loop_t *loop);
/* Stop and free. With uv started, the memory is freed by the loop's next
 * iteration (uv_close); never use w after this call. */
void topo_watch_close(struct topo_watch *w);

#endif

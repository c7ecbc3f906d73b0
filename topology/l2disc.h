/* l2disc: neighbour discovery on the fabric netdevs, inside a libuv loop.
 *
 * CONTRACT
 * - One AF_PACKET socket per fabric netdev, bound to that netdev and to
 *   EtherType 0x88B5 (l2frame.h), polled with uv_poll. Needs CAP_NET_RAW; works
 *   before any IP address exists. A netdev that is missing or cannot be opened
 *   is retried on every tick (its error shows in the snapshot); one that
 *   vanishes is closed and reopened when it returns.
 * - Sends one frame per netdev every fast_interval_ms for fast_period_ms after
 *   start (and after topo_l2disc_kick), then every interval_ms.
 * - Receives: ignores PACKET_OUTGOING and PACKET_OTHERHOST frames and frames of
 *   this node on the same physical port (its own twins); drops and counts
 *   not_ours / malformed (incl. truncated, bad version) / other_cluster /
 *   bad_hmac. A frame of this node from ANOTHER port is kept as a neighbour
 *   with "self":true: it means a cable back to the same node.
 * - Per local netdev it keeps the neighbours heard (node id/name, port, twin,
 *   netdev, MTU, MAC, frames, lost frames by sequence gaps, last heard) and
 *   forgets one not heard for expiry_ms.
 * - Single-threaded: every call from the loop's thread. Strings in opts are
 *   copied; the caller may free them after start.
 *
 * SNAPSHOT (topo_l2disc_snapshot; keys stable):
 * {"cluster_id","node_id","node_name","uptime_ms","interval_ms","expiry_ms",
 *  "interfaces":[{"netdev","port","twin","open":bool,"error":str|null,"mac","mtu",
 *     "tx_frames","tx_errors","rx_frames",
 *     "neighbours":[{"node_id","node_name","port","twin","netdev","mac","mtu",
 *                    "frames","lost","heard_ms_ago","self":bool}],
 *     "dropped":{"bad_hmac","other_cluster","malformed","not_ours","table_full"},
 *     "ignored":{"own_twin","outgoing","otherhost"},
 *     "other_clusters":[ids, at most 4], "bad_hmac_from":{"node_name","mac"}|null,
 *     "foreign"?:{"mac","tool":"nvidia_topo_discover"|"unknown","frames"} (the last
 *     sender of 0x88B5 frames that are not ours: another discovery tool)}],
 *  "dropped":{same keys, summed over interfaces}}
 */
#ifndef SPARK_TOPO_L2DISC_H
#define SPARK_TOPO_L2DISC_H

#include <jansson.h>
#include <stddef.h>
#include <uv.h>

struct topo_l2disc_if {
	const char *netdev; /* e.g. "enp1s0f0np0" */
	const char *port;   /* physical port label, "0" or "1" */
	unsigned twin;      /* 0 or 1: the PCIe path */
};

struct topo_l2disc_opts {
	const char *cluster_id;
	const char *secret; /* cluster secret (hex string from join) */
	const char *node_id;
	const char *node_name;
	const struct topo_l2disc_if *ifs;
	size_t n_ifs;
	unsigned fast_interval_ms; /* default 200 */
	unsigned fast_period_ms;   /* default 3000 */
	unsigned interval_ms;      /* default 1000 */
	unsigned expiry_ms;        /* default 5000 */
};

struct topo_l2disc;

/* Defaults above; ids and interfaces left empty. */
void topo_l2disc_opts_init(struct topo_l2disc_opts *o);

/* The fabric netdevs of a discovery object (discover.h: ports[].twins[],
 * twin index = position in its port) as an array for opts.ifs. The strings
 * point into disc; free(*ifs) only. 0, or -EINVAL if disc has no "ports". */
int topo_l2disc_ifs_from_discovery(json_t *disc, struct topo_l2disc_if **ifs, size_t *n);

/* Validate opts, derive the key, open what can be opened, start the timer.
 * 0 or negative errno (err filled): -EINVAL for bad opts. A netdev that does
 * not open is not an error here (see the snapshot). */
int topo_l2disc_start(uv_loop_t *loop, const struct topo_l2disc_opts *o, struct topo_l2disc **out,
		      char *err, size_t errlen);

/* Back to the fast interval now (call on carrier up / netdev appeared). */
void topo_l2disc_kick(struct topo_l2disc *d);

/* A new JSON object (shape above); NULL only on allocation failure. */
json_t *topo_l2disc_snapshot(struct topo_l2disc *d);

/* Stop and free. Memory is released by the loop's next iteration (uv_close
 * callbacks); never use d after this call. */
void topo_l2disc_stop(struct topo_l2disc *d);

#endif

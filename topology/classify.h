/* classify: the cluster's cable map -> a topology verdict that names the
 * cable, port or setting to fix.
 *
 * CONTRACT
 * - topo_classify() is a pure function of its JSON input (no I/O, no clock):
 *   same map, same verdict, byte for byte (nodes are ordered by name).
 * - Classes: "pair" (2 nodes, direct cable), "ring" (3+ nodes, direct cables,
 *   crossed: port 0 of one node to port 1 of the next), "switch" (ports that
 *   hear 2+ other ports share an L2 domain), "unknown" (nothing to go on).
 *   Results: "fail" if any finding has severity "fail", else "warn" if any has
 *   "warn", else "pass" ("info" findings never change the result).
 * - Every finding names its ends (node, port, netdev) in "message" and in
 *   "ends", and gives a one-line "fix". Codes (docs/topology.md):
 *   no_nodes, single_node, too_many_nodes, expect_mismatch, node_isolated,
 *   cable_to_self, cable_one_way, twin_silent, mtu_mismatch, missing_cable,
 *   same_port_cable, two_rings, ring_missing_nodes, ring_shape,
 *   pair_extra_cable, pair_ports_differ (info), l2_split, switch_partial,
 *   mixed_switch_direct, switch_two_ports (info), switch_ports_differ (info),
 *   unknown_neighbour, bad_hmac_frames (info beside a working twin, else
 *   warn), other_cluster_frames (info), mtu_mixed (warn: cables agree end
 *   to end but not with the cluster's MTU).
 * - A 3-node ring is a full mesh: "mesh" and "any_to_any" are true.
 * - A chain whose ends have link but hear no member: unjoined_node (a machine
 *   that has not joined is cabled there), never missing_cable.
 * - A sender that is not a member but is in the map's "former" (left or
 *   removed lately): node_left (info), not unknown_neighbour.
 * - Frames of another discovery tool on a twin ("foreign"): foreign_discovery
 *   (info), naming NVIDIA's detection script when it is that.
 * - twin_silent names the end whose netdev is administratively down
 *   ("admin_up": false in the map), both when both are, and says when it
 *   cannot tell.
 * - Twins: twin i of a cable is "ok" when each end's twin i exchanged frames
 *   with the other end's port (either twin: the hardware may deliver a frame
 *   to both PCIe functions of a port).
 *
 * CABLE MAP (input; extra keys ignored; "heard" entries name the SENDER):
 * {"nodes":[{"id","name","ports":[{"port":"0","twins":[{"netdev","carrier":bool|null,
 *   "admin_up":bool|null,
 *   "mtu":int|null,"heard":[{"node_id","node_name"?,"port","twin","netdev","mtu"}],
 *   "dropped":{"bad_hmac","other_cluster"}?,"other_clusters":[..]?,
 *   "bad_hmac_from":{"node_name","mac"}?, "foreign":{"mac","tool","frames"}?}]}]}],
 *  "former":[{"id"?,"name","how":"left"|"removed","ago_s"}]?}
 *
 * VERDICT (output):
 * {"class","result","nodes":N,"any_to_any":bool,"mesh":bool,"cluster_mtu"?,
 *  "cables":[{"kind":"direct"|"self"|"switch","a":{"node","port"},
 *             "b":{"node","port"} | {"switch":"l2-1"},"same_port":bool,
 *             "twins_ok":n,"mtu_ok":bool,
 *             "twins":[{"twin":i,"a":{"netdev","mtu","carrier"},"b":{...}|null,"ok":bool}]}],
 *  "ring_order":[names] (pair, and a ring that is one cycle),
 *  "l2_domains":[{"id":"l2-1","nodes":[names],"ports":[{"node","port"}]}] (switch),
 *  "findings":[{"code","severity":"info"|"warn"|"fail","message","fix","ends":[{"node","port","netdev"?}]}],
 *  "advice":[{"code","message"}]}
 */
#ifndef SPARK_TOPO_CLASSIFY_H
#define SPARK_TOPO_CLASSIFY_H

#include <jansson.h>
#include <stddef.h>

#define TOPO_CLASSIFY_MAX_NODES 16 /* verdicts are meant for 2..8 */

struct topo_classify_opts {
	const char *expect; /* NULL, "pair", "ring" or "switch" (--expect); "ring" accepts a
			     * pair (a ring of 2) */
	long mtu;           /* the cluster's MTU (fabric.mtu), 0 unknown: mismatches are
			     * fixed towards it (else towards the MTU most twins have) */
};

/* 0 with *verdict set, or -EINVAL (err filled) for a map that is not one:
 * no "nodes" array, a node without id, duplicate ids, more than
 * TOPO_CLASSIFY_MAX_NODES nodes, 4 ports or 4 twins per port. */
int topo_classify(json_t *map, const struct topo_classify_opts *o, json_t **verdict, char *err,
		  size_t errlen);

/* Build the cable map from what the head gathered per node:
 * nodes = [{"id","name","discovery":<topo_discover JSON>|null,
 *           "l2disc":<topo_l2disc_snapshot JSON>|null}, ...].
 * Ports and twins come from discovery (carrier, mtu), else from the
 * snapshot's interfaces; "heard" from the snapshot's neighbours. 0 or -EINVAL. */
int topo_cablemap_build(json_t *nodes, json_t **map);

#endif

/* sim: a simulated DGX Spark cluster on one Linux machine (docs/simulator.md).
 *
 * One network namespace per node ("PREFIX-K", K = 1..N), each holding exactly a
 * Spark's fabric netdevs (enp1s0f0np0 + enP2p1s0f0np0 = port 0, enp1s0f1np1 +
 * enP2p1s0f1np1 = port 1), the management netdev enP7s7 (169.254.100.K/16) and
 * lo. Cables are veth pairs, one per twin. "PREFIX-mgmt" holds the management
 * bridge and the loose ends of unplugged ports; "PREFIX-switch" (switch
 * topology) holds the fabric bridge. Everything is made with libnl-route-3 and
 * setns(2). Each node runs a real sparkd (unless no_agents), except the last
 * `bare` nodes: wired like the others, with no sparkd (a fresh machine to
 * provision; `sim fault start` can still start one there). The sim is
 * described by ROOT/sim.json; ROOT defaults to /run/sparkctl-sim/PREFIX, and a
 * custom ROOT is registered there by a symlink, so PREFIX alone finds a sim.
 *
 * Every function returns 0 or a negative errno; on failure err (if non-NULL)
 * receives one human sentence of context, without the "sparkctl:" prefix.
 * Callers need CAP_NET_ADMIN and CAP_SYS_ADMIN (sim_check_caps). Not thread
 * safe: functions switch the calling thread's network namespace for moments. */
#ifndef SPARK_SIM_H
#define SPARK_SIM_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define SIM_MIN_NODES 2
#define SIM_MAX_NODES 8
#define SIM_DEFAULT_PREFIX "spark"
#define SIM_RUN_DIR "/run/sparkctl-sim"
#define SIM_PREFIX_MAX 24 /* so that "PREFIX-switch" stays a short name */
#define SIM_AGENT_PORT 7300

enum sim_topo { SIM_PAIR = 0, SIM_RING = 1, SIM_SWITCH = 2 };

struct sim_opts {
	const char *prefix; /* NULL: "spark" */
	const char *root;   /* NULL: SIM_RUN_DIR/PREFIX */
	int nodes;          /* 2..8; 1..7 with bare */
	int bare;           /* K more nodes (nodes+1..nodes+K), wired like the others,
			     * without sparkd; nodes + bare <= 8 */
	enum sim_topo topo;
	int mtu;            /* fabric MTU, 0: 1500 */
	int port;           /* pair: port cabled on both nodes (default 0);
			     * switch: port of every node on the switch (default 1); -1: default */
	bool no_agents;     /* network only, no sparkd */
	const char *sparkd; /* NULL: sim_find_sparkd() */
};

/* 0 if the process may build a sim, else -EPERM with a one-line reason. */
int sim_check_caps(char *err, size_t errlen);
/* "pair"|"ring"|"switch" <-> enum; -EINVAL on anything else. */
int sim_parse_topo(const char *s, enum sim_topo *out);
const char *sim_topo_name(enum sim_topo t);
/* A valid prefix: 1..SIM_PREFIX_MAX chars of [a-z0-9-], starting with a letter. */
bool sim_valid_prefix(const char *s);

/* Build the sim. Refuses (-EEXIST) if anything of PREFIX exists. On failure
 * everything made so far is removed. Prints nothing. */
int sim_up(const struct sim_opts *o, char *err, size_t errlen);
/* Remove everything of PREFIX: every process living in its namespaces
 * (SIGTERM, then SIGKILL after 2 s), the namespaces (with their veths and
 * bridges), the root dir and its registration. Works from a partial or missing
 * sim.json; 0 when nothing was there. root may be NULL (found from PREFIX). */
int sim_down(const char *prefix, const char *root, char *err, size_t errlen);

/* sim.json of PREFIX with each node's "agent_state" refreshed (running|stopped|bare).
 * -ENOENT if no such sim. Caller decrefs. */
int sim_describe(const char *prefix, json_t **out, char *err, size_t errlen);
/* Prefixes of every sim registered under SIM_RUN_DIR, sorted (JSON array). */
json_t *sim_list(void);

/* Split "NODE" or "NODE:THING" where NODE is "PREFIX-K" (or bare "K", then
 * the prefix is defprefix or "spark"). thing may be NULL. */
int sim_parse_target(const char *s, const char *defprefix, char *prefix, size_t plen,
		     int *node, char *thing, size_t tlen);

/* Run argv in a node's namespace: network namespace, a private mount namespace
 * with /sys remounted (so /sys/class/net shows the node's netdevs), and
 * SPARKCTL_SOCKET / SPARK_SIM_NODE set. Does not return on success (execvp);
 * the caller's exit code becomes the command's. ns may also be PREFIX-mgmt or
 * PREFIX-switch. */
int sim_exec(const char *prefix, const char *ns, char *const argv[], char *err, size_t errlen);
/* Enter a namespace in this process: net only (sockets made afterwards live
 * there). *saved receives an fd to return with sim_leave_ns. */
int sim_enter_ns(const char *ns, int *saved);
int sim_leave_ns(int saved);

/* Faults. spec is as on the command line:
 *   cut|restore NODE:PORT | NODE:IFNAME    (a whole cable, or one twin)
 *   mtu NODE:IFNAME VALUE                  (that end only)
 *   swap NODE-A:PORT NODE-B:PORT           (the two ports exchange peers)
 *   delay NODE:IFNAME MS                   (netem on that end's egress; 0 removes)
 *   kill NODE | start NODE                 (its sparkd)
 *   down|up NODE:PORT | NODE:IFNAME        (this end only, admin state: the
 *                                           peer stays up and loses carrier)
 * sim.json is updated to match. */
int sim_fault(const char *kind, int argc, char *const args[], const char *defprefix, char *err,
	      size_t errlen);

/* State of a netdev in a namespace, read by netlink. */
struct sim_link_info {
	int ifindex;
	bool admin_up;
	bool carrier;
	int mtu;
	char mac[18];
	char master[16]; /* bridge name or "" */
};
int sim_link_query(const char *ns, const char *ifname, struct sim_link_info *out);
/* Netdev names of a namespace, sorted, as a JSON array of strings. */
int sim_link_names(const char *ns, json_t **out);

/* Where sparkd is: env SPARKD, the running binary's dir, ../agent/sparkd
 * relative to it (build tree), then PATH. */
int sim_find_sparkd(char *out, size_t len);

#endif

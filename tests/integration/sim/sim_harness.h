/* sim_harness: integration tests on a simulated Spark cluster (sim/sim.h).
 *
 *   struct sh_sim s;
 *   struct sim_opts o = {.nodes = 4, .topo = SIM_RING, .no_agents = true, .port = -1};
 *   cr_assert_eq(sh_up(&s, "ring", &o), 0, "%s", s.err);
 *   ... sh_exec(&s, 2, argv, &out) / sh_raw_open(sh_ns(&s, 1), "enp1s0f0np0") ...
 *   sh_down(&s);
 *
 * Each sim gets a unique prefix ("t" + pid + counter + tag), so tests run side
 * by side. Cleanup happens on every exit path: sh_up forks a guard process
 * (own session, ignores SIGINT/SIGTERM/SIGHUP) holding a pipe to the test;
 * when the test process ends without sh_down (Criterion assertion, crash,
 * SIGTERM, SIGKILL, timeout) the pipe closes and the guard runs sim_down.
 * The test process becomes a child subreaper so agents are reaped, not left
 * as zombies. Needs root: call sh_require_root() first (skips otherwise). */
#ifndef SPARK_SIM_HARNESS_H
#define SPARK_SIM_HARNESS_H

#include "sim.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SH_ETHERTYPE 0x88B5

struct sh_sim {
	char prefix[SIM_PREFIX_MAX + 1];
	char root[256];
	int nodes;
	enum sim_topo topo;
	pid_t guard;
	int guard_fd;
	bool up;
	char err[512]; /* why sh_up failed */
	char ns[SIM_MAX_NODES + 1][48];
};

/* Skip the current Criterion test unless we may make namespaces. */
void sh_require_root(void);
/* A prefix no other test or process uses: "t<pid><n><tag>", at most 24 chars. */
void sh_unique_prefix(char *out, size_t len, const char *tag);
/* Bring up a sim; o->prefix is replaced by a unique one built from tag.
 * Returns 0, or a negative errno with s->err set. */
int sh_up(struct sh_sim *s, const char *tag, const struct sim_opts *o);
/* sim_down, stop the guard, reap. Returns sim_down's result. Safe to repeat. */
int sh_down(struct sh_sim *s);
/* Namespace / node name of node k ("PREFIX-K"); k = 0 is PREFIX-mgmt. */
const char *sh_ns(struct sh_sim *s, int k);
/* sim.json of the sim as sim_describe gives it (caller decrefs), or NULL. */
json_t *sh_describe(struct sh_sim *s);

/* Nothing of PREFIX is left: no namespace, no root dir, no registration, no
 * process in its namespaces. Returns "" when clean, or what remains. */
const char *sh_leftovers(const char *prefix, const char *root);
/* Poll sh_leftovers until clean or timeout_ms; true when clean. */
bool sh_wait_clean(const char *prefix, const char *root, int timeout_ms);

/* Run argv in node k (as `sparkctl sim exec`), capture stdout+stderr into
 * *out (caller frees; may be NULL). Returns the exit code (128+N on signal). */
int sh_exec(struct sh_sim *s, int k, char *const argv[], char **out);
/* sh_exec of "/bin/sh -c CMD". */
int sh_sh(struct sh_sim *s, int k, const char *cmd, char **out);
/* Path of a built binary (SPARK_BUILD_DIR/cli/sparkctl, .../agent/sparkd),
 * or NULL if it is not built. */
const char *sh_bin(const char *name);

/* The built sparkctl with ARGS... (NULL-terminated, at most 40) in node k,
 * stdout+stderr in *out (caller frees; may be NULL). Returns its exit code. */
int sh_ctl(struct sh_sim *s, int k, char **out, ...) __attribute__((sentinel));
/* sh_ctl of "ARGS... -o json", the output parsed (caller decrefs); NULL, and
 * a cr_log_info line with the output, when it failed or was not JSON. */
json_t *sh_ctl_json(struct sh_sim *s, int k, ...) __attribute__((sentinel));
/* A sim of `nodes` nodes with agents (skips unless root, and unless sparkd
 * and sparkctl are built). Asserts on failure. */
void sh_agents_up(struct sh_sim *s, const char *tag, int nodes, enum sim_topo topo);
/* sh_agents_up, then node 1 inits cluster `name` and every other node joins it. */
void sh_cluster_up(struct sh_sim *s, const char *tag, int nodes, enum sim_topo topo,
		   const char *name);
/* Wait (up to 200 status polls) until the head's status has a fabric report
 * of each of its `nodes` nodes, and with `ready`, every node ready. Asserts. */
void sh_wait_reports(struct sh_sim *s, int nodes, bool ready);
/* On a 4-node sim switch: node 3 re-cabled on port 0 (the others stay on port
 * 1), fabric addresses one subnet per twin rail (169.254.20.K/24 on twin 0,
 * 169.254.21.K/24 on twin 1 of node K's cabled port), then wait (10 s) until
 * the head's reports have them. Asserts. */
void sh_switch_rails(struct sh_sim *s);

/* Raw Ethernet frames. A socket for ethertype on ifname inside namespace ns. */
int sh_raw_open(const char *ns, const char *ifname, uint16_t ethertype);
/* Send a broadcast frame (source: the netdev's MAC). */
int sh_raw_send(int fd, const void *payload, size_t len);
/* Send to a given destination MAC. */
int sh_raw_send_to(int fd, const uint8_t dst[6], const void *payload, size_t len);
/* Receive one frame meant for this host (drops PACKET_OUTGOING and
 * PACKET_OTHERHOST): payload after the Ethernet header into buf. Returns its
 * length, 0 on timeout, negative errno on error. */
ssize_t sh_raw_recv(int fd, void *buf, size_t len, int timeout_ms);

/* Which fabric netdevs hear a broadcast sent on each fabric netdev of the
 * sim: heard[i][j] is true when a frame sent on endpoint i arrived at
 * endpoint j, endpoint = (k - 1) * 4 + port * 2 + twin. Frames are sent on
 * every endpoint that is admin up. Returns 0 or negative errno. */
#define SH_EP(k, port, twin) (((k) - 1) * 4 + (port) * 2 + (twin))
int sh_frame_map(struct sh_sim *s, bool heard[4 * SIM_MAX_NODES][4 * SIM_MAX_NODES]);
/* "spark-2:enP2p1s0f1np1" for endpoint e, in a static rotating buffer. */
const char *sh_ep_name(struct sh_sim *s, int e);

/* Fabric netdev names of a node: sh_twin_name[port][twin]. */
extern const char *const sh_twin_name[2][2];

uint64_t sh_now_us(void);
void sh_sleep_ms(int ms);

#endif

/* sim internals: the in-memory model of a sim (mirrors sim.json), namespace
 * handling, netlink operations and agent processes. Not for use outside sim/. */
#ifndef SPARK_SIM_INT_H
#define SPARK_SIM_INT_H

#include "sim.h"

#include <limits.h>
#include <net/if.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define SIM_NS_MAX 48 /* "PREFIX-switch" and friends */
#define SIM_MAX_LINKS (5 * SIM_MAX_NODES)
#define SIM_ALL_NS (SIM_MAX_NODES + 2)
#define SIM_NETNS_DIR "/run/netns"
#define SIM_MGMT_BRIDGE "br-mgmt"
#define SIM_FABRIC_BRIDGE "br-fabric"
#define SIM_MGMT_IF "enP7s7"
#define SIM_MARKER ".sparkctl-sim"

/* One end of a veth pair. */
struct sim_end {
	char ns[SIM_NS_MAX];
	char ifname[IFNAMSIZ];
	char mac[18];
	int mtu;
	int delay_ms;    /* delay on this end's egress, 0 = none */
	pid_t delay_pid; /* delay-line helper when the kernel has no netem */
	bool up;         /* admin state */
};

enum sim_link_kind { SIM_LK_CABLE, SIM_LK_SWITCH, SIM_LK_UNPLUGGED, SIM_LK_MGMT };

/* One veth pair. a is always a node's netdev; b is another node's netdev
 * (cable), a switch port (switch), a loose end in PREFIX-mgmt (unplugged),
 * or a management bridge port (mgmt). */
struct sim_link {
	enum sim_link_kind kind;
	bool cut;
	struct sim_end a, b;
};

struct sim_node {
	int index; /* 1..N */
	char name[SIM_NS_MAX]; /* = namespace name, PREFIX-K */
	char addr[16];         /* management address, 169.254.100.K */
	pid_t pid;             /* sparkd, 0 when none was started */
	bool bare;             /* made without sparkd (sim up --bare); cleared by start */
};

struct sim {
	char prefix[SIM_PREFIX_MAX + 1];
	char root[PATH_MAX];
	enum sim_topo topo;
	int mtu;
	int port;
	bool agents;
	char sparkd[PATH_MAX];
	long long created_at;
	int nnodes;
	struct sim_node nodes[SIM_MAX_NODES];
	int nlinks;
	struct sim_link links[SIM_MAX_LINKS];
};

/* errors: write "fmt" into err (if any) and return code. */
int sim_errf(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* model (sim_model.c) */
void simm_plan(struct sim *s, const struct sim_opts *o);
void simm_ns_name(const struct sim *s, const char *what, char *out, size_t len);
void simm_node_dir(const struct sim *s, int k, const char *file, char *out, size_t len);
bool simm_has_switch(const struct sim *s);
const char *simm_kind_name(enum sim_link_kind k);
json_t *simm_to_json(const struct sim *s);
int simm_from_json(const json_t *j, struct sim *s);
int simm_save(const struct sim *s);
/* Root of PREFIX (following the registration symlink) into root. */
int simm_root_of(const char *prefix, char *root, size_t len);
int simm_load(const char *prefix, struct sim *s, char *err, size_t errlen);
/* Exclusive lock on the sim's root (flock); returns fd or negative errno. */
int simm_lock(const struct sim *s);
void simm_unlock(int fd);
/* The link whose node end is (ns, ifname); *end receives that end. */
struct sim_link *simm_find_end(struct sim *s, const char *ns, const char *ifname,
			       struct sim_end **end);
const char *simm_fabric_ifname(int port, int twin);

/* namespaces (sim_ns.c) */
int simns_create(const char *name);
int simns_delete(const char *name);
int simns_open(const char *name); /* O_RDONLY|O_CLOEXEC fd or -errno */
bool simns_exists(const char *name);
/* In a forked child: join the namespace, private mounts, fresh /sys. */
int simns_enter_full(const char *name);
/* Kill every process whose net namespace is one of names (NULL-terminated
 * array). SIGTERM, then SIGKILL after grace_ms. Reaps children of ours. */
void simns_kill_all(const char *const *names, int grace_ms);
/* pid is running (not a zombie, not gone). */
bool sim_pid_alive(pid_t pid);

/* netlink (sim_net.c). A socket opened with simnet_open(fd) lives in that
 * namespace for its whole life (fd < 0: the current one). */
struct nl_sock;
struct nl_sock *simnet_open(int nsfd);
void simnet_close(struct nl_sock *sk);
int simnet_ifindex(struct nl_sock *sk, const char *ifname);
int simnet_bridge_add(struct nl_sock *ctl, const char *name, int nsfd);
/* veth pair: main end m in namespace mfd (enslaved to master if > 0, up if
 * m->up), peer p in pfd, left down: the caller brings it up. */
int simnet_veth_add(struct nl_sock *ctl, const struct sim_end *m, int mfd, int master,
		    const struct sim_end *p, int pfd);
int simnet_link_del(struct nl_sock *sk, const char *ifname);
/* up: -1 keep, 0 down, 1 up; mtu 0 keep; master -1 keep. */
int simnet_link_set(struct nl_sock *sk, const char *ifname, int up, int mtu, int master);
int simnet_addr_add(struct nl_sock *sk, const char *ifname, const char *cidr);
int simnet_delay(struct nl_sock *sk, const char *ifname, int ms);
int simnet_query(struct nl_sock *sk, const char *ifname, struct sim_link_info *out);
int simnet_names(struct nl_sock *sk, json_t *arr);

/* Namespace fds and netlink sockets of one sim, opened on first use (sim.c). */
struct simnets {
	int nns;
	char name[SIM_ALL_NS][SIM_NS_MAX];
	int fd[SIM_ALL_NS];
	struct nl_sock *sk[SIM_ALL_NS];
	struct nl_sock *ctl; /* in the caller's namespace, for creating veths */
};
int simx_idx(struct simnets *n, const char *ns); /* index into fd/sk, or -errno */
void simx_close(struct simnets *n);
/* Create link l (both ends, enslaving, delays) as the model says. */
int simx_make_link(struct simnets *n, struct sim_link *l);
/* Apply e->delay_ms to end e (netem, or the delay line of sim_delay.c);
 * updates e->delay_pid. 0 removes any delay. */
int simx_delay(struct simnets *n, struct sim_end *e);

/* agents (sim_agent.c) */
int sima_spawn(struct sim *s, int k, char *err, size_t errlen);
/* Wait for the sockets of nodes in mask (bit k-1) to accept connections. */
int sima_wait(struct sim *s, unsigned mask, int timeout_ms, char *err, size_t errlen);
int sima_stop(struct sim *s, int k);
bool sima_running(const struct sim *s, int k);

#endif

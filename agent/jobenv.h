/* jobenv: the environment contract of a job's ranks (DESIGN.md "Job
 * environment contract", docs/jobs.md). Pure functions of their input (no
 * I/O): the head plans the job's network with jobnet_plan() from the nodes'
 * stored discovery reports, and each member builds its ranks' environment
 * with jobenv_build() from ITS OWN live discovery, so interface and RDMA
 * device names are always this node's.
 *
 * The network rule (SPARK_NET):
 *   fabric      every node has a fabric IPv4 address (on a twin with carrier)
 *               that every other node of the job reaches directly, i.e. has a
 *               twin with carrier in the same subnet (a switch, a pair, a
 *               3-ring with a common subnet...). Sockets (MASTER_ADDR,
 *               SPARK_PEERS, GLOO/TP/NCCL socket interfaces) use those.
 *               If no subnet spans the job but every node reaches every other
 *               one on the subnet of the cable between them (a 3-node ring: a
 *               full mesh), the plan is "pairwise": fabric, and each node's
 *               view of the others (SPARK_PEERS, MASTER_ADDR) names the address
 *               that node reaches (jobnet_node_spec).
 *   management  otherwise (no fabric addresses yet, or a ring of 4+ where
 *               non-neighbours share no subnet): sockets use each node's agent
 *               (management) address and the interface carrying it. RDMA
 *               (NCCL_IB_HCA) still names the fabric devices. */
#ifndef SPARK_AGENT_JOBENV_H
#define SPARK_AGENT_JOBENV_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define JOBENV_MAX_NODES 64
#define JOBENV_PORT_BASE 29500 /* MASTER_PORT = base + (job id % 50) * 100 */

/* ---- the job's network, on the head ------------------------------------ */

struct jobnet_member {
	json_t *discovery;     /* the node's last topo_discover report, or NULL */
	const char *mgmt_addr; /* host part of its agent address */
};

#define JOBNET_PAIRWISE_MAX 8 /* a pairwise plan: at most this many nodes */

struct jobnet_plan {
	bool fabric;                              /* SPARK_NET=fabric */
	bool pairwise;                            /* fabric, per-node views (peer_addr) */
	size_t n;
	/* pairwise: peer_addr[i][j] = the address of node j that node i reaches */
	char peer_addr[JOBNET_PAIRWISE_MAX][JOBNET_PAIRWISE_MAX][48];
	char socket_addr[JOBENV_MAX_NODES][64];   /* per node, in rank order */
	char tcp_include[512];                    /* fabric: union of the subnets (CIDR) */
	char why[256];                            /* why management, for the job's record */
};

/* 0, or -EINVAL (n = 0 or too many nodes). */
int jobnet_plan(const struct jobnet_member *m, size_t n, struct jobnet_plan *out);
/* The job spec as node `node` must see it: a pairwise plan rewrites
 * "master_addr" and "peers" (from "nodes", "ranks_per_node", "master_port")
 * with the addresses that node reaches; otherwise the spec itself. A new
 * reference either way (NULL on allocation failure). */
json_t *jobnet_node_spec(const struct jobnet_plan *p, size_t node, json_t *spec);
/* The IPv4 addresses of node `to` (one per twin with carrier, in report
 * order, at most max) in a subnet where node `from` has a twin with carrier:
 * what `from` reaches `to` at over the fabric (both twins of the cable
 * between them on a ring; both rails on a switch). The count. */
size_t jobnet_pair_addrs(json_t *from, json_t *to, char (*out)[48], size_t max);
/* MASTER_PORT of a job. */
int jobenv_master_port(long long job_id);

/* ---- one rank's environment, on its node -------------------------------- */

struct jobenv_job {
	long long job_id;
	const char *job_name;
	const char *group;
	const char *topology;      /* ring | switch | unknown (a 3-node ring group, a full
				    * mesh, is given to the job as "direct") */
	const char *shape;         /* ring | chain | pair | switch | single | scattered | unknown */
	const char *launcher;      /* native | torchrun | mpi | exec */
	int world_size;
	int ranks_per_node;
	int nnodes;
	int node_rank;
	const char *node;          /* this node's name */
	int rank;                  /* -1: not set (torchrun, mpi and exec set their own) */
	int local_rank;            /* -1: not set */
	const char *net;           /* "fabric" | "management" */
	const char *socket_addr;   /* this node's address for sockets */
	const char *socket_ifname; /* the netdev carrying it ("" unknown) */
	const char *tcp_include;   /* Open MPI interface selection (CIDR list) */
	const char *master_addr;
	int master_port;
	const char *peers;         /* SPARK_PEERS value */
	const char *model_dir;     /* SPARK_MODEL_DIR: this node's model store (may be NULL) */
	json_t *base;              /* object: HOME, USER, PATH... (may be NULL) */
	json_t *overrides;         /* array of "K=V" strings, applied last (may be NULL) */
};

/* The rank's environment as an object of strings, in a stable order: base,
 * the SPARK_* contract, the conventional variables, the engine variables from
 * discovery, then overrides. Never sets NCCL_IB_GID_INDEX (an override may).
 * NULL on allocation failure. */
json_t *jobenv_build(const struct jobenv_job *j, json_t *discovery);

/* Comma lists from a discovery report. netdevs: the twins with carrier of
 * every port that has one (SPARK_FABRIC_NETDEVS); hcas: their RDMA devices
 * (NCCL_IB_HCA, "" without RDMA); addressed: those twins that carry an IPv4
 * address, first_ifname first if it is one of them. */
void jobenv_fabric_lists(json_t *discovery, const char *first_ifname, char *netdevs, size_t nl,
			 char *hcas, size_t hl, char *addressed, size_t al);

/* Check "KEY=VALUE" (KEY: a letter or '_', then letters, digits, '_').
 * 0 with the key copied, or -EINVAL. */
int jobenv_parse_kv(const char *s, char *key, size_t keylen);

/* "a.b.c.d/len" -> network "a.b.c.d/len" with host bits cleared. 0 or -EINVAL. */
int jobenv_cidr_network(const char *cidr, char *out, size_t len);

#endif

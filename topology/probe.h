/* probe: latency, bandwidth and MTU between two twins (one per node).
 *
 * CONTRACT
 * - Every call here BLOCKS (sockets, verbs polling): run it in a worker thread
 *   (uv_queue_work), never on the loop. Every wait has a deadline
 *   (params.timeout_ms); topo_probe_server_stop() may be called from any
 *   thread to end a blocked topo_probe_server_run() early.
 * - TCP path (works everywhere, the simulator's): the server listens on the
 *   twin's address with the socket bound to the twin's netdev
 *   (SO_BINDTODEVICE, needs CAP_NET_RAW); the client connects from its own twin
 *   netdev (connect retried until the deadline, so either side may start
 *   first) and drives one session: ping-pong of small messages (TCP_NODELAY),
 *   bulk transfer each way on a second connection, and the MTU check: UDP
 *   datagrams with DF set, echoed by the server with DF set, the largest that
 *   makes the round trip = the largest unfragmented packet both ways.
 * - Verbs path (compiled always, used only where topo_probe_rdma_usable()
 *   says yes): an RC queue pair; ping-pong of SENDs and RDMA-write bandwidth
 *   client -> server; QPN/PSN/GID/rkey/address/MTU swapped through the caller's
 *   exchange callback (the agent carries them over its channel). The GID index
 *   comes from discovery (RoCE v2, never a pinned number).
 * - Every result says its "transport" ("tcp" or "rdma") and is judged against
 *   the thresholds of THAT transport; a TCP result never claims RDMA numbers.
 *   Latency is one way: half the round trip (as ib_write_lat reports it).
 *
 * RESULT (client side; the server returns a smaller object):
 * {"transport":"tcp"|"rdma","role":"client","netdev","local","peer",
 *  "latency":{"iterations","size","p50_us","p99_us","min_us","max_us"},
 *  "bandwidth":{"to_peer_gbps","from_peer_gbps"|null,"gbps","seconds"},
 *  "mtu":{"local_mtu","peer_mtu"|null,"largest_ok","ok","method"},
 *  "thresholds":{"min_gbps","max_p50_us","max_p99_us"|null,"mtu"},
 *  "result":"pass"|"fail","findings":[{"code","severity","message","fix"}]}
 * Codes: probe_bandwidth_low, probe_latency_high, probe_latency_p99_high,
 * probe_mtu_low, probe_mtu_mismatch, probe_error.
 */
#ifndef SPARK_TOPO_PROBE_H
#define SPARK_TOPO_PROBE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct topo_probe_thresholds {
	/* RDMA, per twin (SPARK-FACTS.md: ib_write_bw 92-97 Gb/s, ib_write_lat ~1.5 us) */
	double rdma_min_gbps;   /* 85 */
	double rdma_max_p50_us; /* 5 */
	double rdma_max_p99_us; /* 20; 0 = not checked */
	/* TCP: one stream, the simulator's veths and loaded test machines */
	double tcp_min_gbps;    /* 1 */
	double tcp_max_p50_us;  /* 2000 */
	double tcp_max_p99_us;  /* 0 = not checked */
	int mtu;                /* expected MTU (fabric.mtu); 0 = the local netdev's */
};

struct topo_probe_params {
	unsigned ping_iters; /* 1000 (quick: 200), after 20 warm-up round trips */
	unsigned ping_size;  /* 8 bytes */
	unsigned bulk_ms;    /* per direction: 1000 (quick: 200) */
	bool mtu_check;      /* true */
	unsigned timeout_ms; /* each blocking step: 5000 */
};

void topo_probe_thresholds_default(struct topo_probe_thresholds *t);
/* probes.{rdma_min_gbps, rdma_max_p50_us, rdma_max_p99_us, tcp_min_gbps,
 * tcp_max_p50_us, tcp_max_p99_us} (numbers >= 0) and fabric.mtu from a config
 * tree (cfg.h). Absent keys keep their value. 0 or -EINVAL naming the key. */
int topo_probe_thresholds_from_config(json_t *cfg, struct topo_probe_thresholds *t, char *err,
				      size_t errlen);
void topo_probe_params_init(struct topo_probe_params *p, bool quick);

/* ---------------- TCP path ---------------- */

struct topo_probe_server;

struct topo_probe_server_opts {
	const char *netdev;  /* twin netdev to bind to; NULL = any (tests on lo) */
	const char *address; /* "169.254.7.2", "fe80::1%enp1s0f0np0"; NULL = any */
	int port;            /* 0 = ephemeral (see topo_probe_server_port) */
	const char *token;   /* the client must present the same; NULL = none */
	unsigned timeout_ms; /* each blocking step; 0 = 10000 */
};

/* Listen (TCP and the UDP echo socket) and return at once. 0 or -errno. */
int topo_probe_server_start(const struct topo_probe_server_opts *o, struct topo_probe_server **out,
			    char *err, size_t errlen);
int topo_probe_server_port(const struct topo_probe_server *s);
/* Serve one client session to its end. 0 with *result, -ETIMEDOUT (nobody
 * came or the client stalled), -ECANCELED (stopped), -EPROTO, -EACCES (bad
 * token), or another -errno. */
int topo_probe_server_run(struct topo_probe_server *s, json_t **result, char *err, size_t errlen);
/* Wake a blocked run (any thread). */
void topo_probe_server_stop(struct topo_probe_server *s);
void topo_probe_server_free(struct topo_probe_server *s);

struct topo_probe_client_opts {
	const char *netdev;        /* our twin netdev; NULL = any */
	const char *local_address; /* bind to it; NULL = the kernel's choice */
	const char *peer_address;  /* the server's twin address */
	int peer_port;
	const char *token;
	struct topo_probe_params params;
	struct topo_probe_thresholds thresholds;
};

/* Run the whole session. 0 with *result (judged: "result" pass|fail), or
 * -errno with err filled and *result = {"transport":"tcp","result":"fail",
 * "findings":[probe_error]} when something was measured before the error. */
int topo_probe_client_run(const struct topo_probe_client_opts *o, json_t **result, char *err,
			  size_t errlen);

/* ---------------- verbs path ---------------- */

struct topo_rdma_endpoint {
	uint32_t qpn, psn, rkey;
	uint64_t addr;     /* remote-writable buffer */
	uint32_t buf_len;
	uint32_t mtu;      /* active path MTU in bytes (256..4096) */
	uint8_t gid[16];
};

/* Swap endpoints with the peer: send *local, fill *remote. 0 or -errno.
 * Called once per run, from the probing thread. */
typedef int (*topo_probe_exchange_fn)(const struct topo_rdma_endpoint *local,
				      struct topo_rdma_endpoint *remote, void *arg);

struct topo_probe_rdma_opts {
	const char *ibdev;  /* "rocep1s0f0" (discovery: twins[].rdma.device) */
	int ib_port;        /* 1 */
	int gid_index;      /* discovery: twins[].rdma.rocev2_gid_index */
	const char *netdev; /* for the report */
	bool server;        /* the passive end (echoes, is written to) */
	struct topo_probe_params params;
	struct topo_probe_thresholds thresholds;
	topo_probe_exchange_fn exchange;
	void *exchange_arg;
};

/* 0 when ibdev opens, its port is active on Ethernet and gid_index is a
 * RoCE v2 GID; else -ENODEV/-ENOENT/-ENETDOWN/-EINVAL and why says so. */
int topo_probe_rdma_usable(const char *ibdev, int ib_port, int gid_index, char *why, size_t whylen);
/* One run (client or server by o->server). Same result shape, "transport":"rdma". */
int topo_probe_rdma_run(const struct topo_probe_rdma_opts *o, json_t **result, char *err,
			size_t errlen);

/* Endpoint <-> JSON for the agent's channel: {"qpn","psn","rkey","addr"
 * (hex string),"buf_len","mtu","gid" (32 hex chars)}. from_json: 0 or -EINVAL. */
json_t *topo_rdma_endpoint_to_json(const struct topo_rdma_endpoint *e);
int topo_rdma_endpoint_from_json(json_t *j, struct topo_rdma_endpoint *e);

/* "rdma" when both twins' discovery objects have an RDMA device with a
 * RoCE v2 GID on an active port, else "tcp". */
const char *topo_probe_pick_transport(json_t *local_twin, json_t *peer_twin);

#endif

/* topo: topology validation inside sparkd (issue 5, docs/topology.md).
 * The topo service's header, for topo.c (every node, and the service's
 * tables) and topo_head.c (the head).
 *
 *   topo.c       every node: L2 neighbour discovery (topology/l2disc.h) with the
 *                cluster identity, restarted when the identity or the fabric
 *                netdevs change and kicked on link changes; the node end of the
 *                head's requests: its state (discovery + neighbour table), probe
 *                servers and clients (TCP, or RDMA with the endpoint exchange
 *                relayed by the head), applying the address plan. Blocking work
 *                runs in uv_queue_work; what the probing threads send the head
 *                comes to the loop through a uv_async queue, then goes out with
 *                peers_to_head (the head's own node's through peers.c's mailbox).
 *   topo_head.c  the head: `topo_show`, `topo_validate`, `topo_addresses`: gather
 *                every node's state, build the cable map, classify, probe, store
 *                the run in cluster.db, answer; status's "topology" object.
 *
 * Frames over a worker's session (the head's own node gets the same objects
 * through peers.c's mailbox):
 *   head -> node  {"type":"topo_req","id":N,"op":OP,...}
 *        OP = state | probe_serve | probe_client | rdma | rdma_peer | addr_apply
 *   node -> head  {"type":"topo_reply","id":N,"ok":true,"data":{...}}
 *                 {"type":"topo_reply","id":N,"ok":false,"code":C,"message":M}
 *                 {"type":"topo_rdma_ep","id":0,"probe":P,"endpoint":{...}}
 *                 (an RDMA probe's queue-pair endpoint, relayed by the head to
 *                 the other end as op rdma_peer). */
#ifndef SPARK_AGENT_TOPO_H
#define SPARK_AGENT_TOPO_H

#include "service.h"

#include "addrplan.h"
#include "discover.h"
#include "l2disc.h"
#include "probe.h"

#include <pthread.h>

#define TOPO_SETTLE_MS 1300      /* neighbour tables are trusted after this much l2disc uptime */
#define TOPO_STALE_EXTRA_MS 500  /* a neighbour not heard for 2 intervals + this is dropped */
#define TOPO_CHANGE_WAIT_MS 4000 /* a run waits this long at most for the reports after a carrier change */
#define TOPO_REQ_TIMEOUT_MS 20000
#define TOPO_RUN_TIMEOUT_MS 180000
#define TOPO_BULK_MS 500         /* probes.bulk_ms: per direction, full validation */
#define TOPO_QUICK_BULK_MS 50    /* probes.quick_bulk_ms */
#define TOPO_PING_ITERS 1000     /* probes.ping_iters */
#define TOPO_QUICK_PING_ITERS 100 /* probes.quick_ping_iters */
#define TOPO_PROBE_TIMEOUT_MS 5000 /* probes.timeout_ms: each blocking step */
#define TOPO_MAX_NODES 16

struct tjob;
struct tmail;
struct thead;

struct topo_agent {
	struct agent *a;
	/* config */
	struct topo_opts dopts;                /* discovery, as fabric.c reads it */
	struct topo_probe_thresholds thr;      /* probes.*, fabric.mtu */
	unsigned bulk_ms, quick_bulk_ms, ping_iters, quick_ping_iters, probe_timeout_ms;
	char pool[64];                         /* fabric.pool */
	int prefix;                            /* fabric.prefix */
	/* neighbour discovery */
	struct topo_l2disc *l2;
	char l2_sig[1024];                     /* identity + netdevs it runs with */
	char l2_err[256];
	uv_timer_t tick;
	bool tick_init;
	/* mailbox to the loop */
	uv_async_t async;
	bool async_init;
	pthread_mutex_t mu;
	pthread_cond_t cv;                     /* RDMA exchanges wait here */
	struct tmail *mail_first, *mail_last;
	/* node-side jobs in worker threads */
	struct tjob *jobs;
	bool stopping;
	/* head */
	struct thead *head;
};

/* topo.c */
extern const struct service topo_service;
/* Queue a frame to the head for the loop (any thread: the probes' threads):
 * the loop sends it with peers_to_head (the head's own node: its mailbox).
 * Steals msg. */
void topo_mail(struct topo_agent *t, json_t *msg);
/* The node's fabric netdevs from a discovery object (borrowed strings). */
size_t topo_disc_netdevs(json_t *disc, const char **out, size_t max);

/* topo_head.c */
int topo_head_init(struct topo_agent *t);
void topo_head_on_reply(struct agent *a, const char *node_id, const json_t *msg);
void topo_head_on_rdma_ep(struct agent *a, const char *node_id, const json_t *msg);
void topo_head_show(struct agent *a, const struct svc_req *q);
void topo_head_validate(struct agent *a, const struct svc_req *q);
void topo_head_addresses(struct agent *a, const struct svc_req *q);
void topo_head_conn_gone(struct agent *a, conn *c);
json_t *topo_head_status(struct agent *a);
void topo_head_stop(struct agent *a);
void topo_head_free(struct agent *a);

#endif

/* cluster: the cluster service. Membership (init, join, leave, node rm,
 * drain), tokens, status and the sessions between agents:
 *   cluster.c       the service's request table and its local requests
 *   cluster_head.c  the head: CA and cluster.db, joins, who a member's
 *                   certificate names (for sessions.c), hello, heartbeats,
 *                   leave, liveness, the CRL, the head-served requests
 *   cluster_node.c  a worker: join, the session to the head with hello,
 *                   heartbeats and reconnect, the head's crl and revocation */
#ifndef SPARK_AGENT_CLUSTER_H
#define SPARK_AGENT_CLUSTER_H

#include "service.h"

extern const struct service cluster_service;

/* cluster_head.c */
int head_start(struct agent *a, char *err, size_t errlen); /* after identity load */
void head_stop(struct agent *a);
void head_hooks(struct agent *a); /* the membership policy sessions.c asks */
/* The member sessions' own frames (cluster.c's frame table). */
void head_hello(struct agent *a, struct session *s, const json_t *msg);
void head_heartbeat(struct agent *a, struct session *s, const json_t *msg);
void head_leave(struct agent *a, struct session *s, const json_t *msg);
void head_init(struct agent *a, const struct svc_req *q); /* the "init" request */
/* The head-served requests (cluster.c's table). */
void head_status(struct agent *a, const struct svc_req *q);
void head_node_ls(struct agent *a, const struct svc_req *q);
void head_node_show(struct agent *a, const struct svc_req *q);
void head_node_drain(struct agent *a, const struct svc_req *q);
void head_node_undrain(struct agent *a, const struct svc_req *q);
void head_node_rm(struct agent *a, const struct svc_req *q);
void head_token_create_req(struct agent *a, const struct svc_req *q);
void head_token_ls(struct agent *a, const struct svc_req *q);
void head_token_revoke(struct agent *a, const struct svc_req *q);
/* Remake crl.pem from cluster.db, reload the listener's TLS context and send
 * the list to every connected worker ({"type":"crl","crl":PEM}). */
int head_crl_update(struct agent *a);
char *head_crl_pem(struct agent *a);          /* the list as PEM (caller frees) */
const char *head_store_error(int r);          /* a db_ error for people */
/* Mint a token; on success fills the printable token string. */
int head_token_create(struct agent *a, int64_t ttl, int64_t uses, const char *descr,
		      char *token_out, size_t len, char *id_out);

/* cluster.c: this node's memory (issue 19), bytes: MemTotal and MemAvailable
 * of /proc/meminfo (on a Spark the GPU uses the same pool) and the budget
 * services may use: serve.memory_budget_gib, else the planner's usable share
 * of MemTotal (MODEL_USABLE_GIB of MODEL_CUDA_GIB). 0, or -errno. */
struct cluster_mem {
	int64_t total, available, budget;
};
int cluster_mem_read(struct agent *a, struct cluster_mem *m);
json_t *cluster_mem_json(const struct cluster_mem *m); /* {"total","available","budget"} */
/* A report from a peer: all three integers, 0 <= available <= total,
 * 0 < budget. 0, or -EINVAL. */
int cluster_mem_parse(const json_t *o, struct cluster_mem *m);

/* cluster_node.c */
int worker_start(struct agent *a);                /* connect to the head (identity known) */
void worker_stop(struct agent *a);
void worker_handle_join(struct agent *a, conn *c, const json_t *req);
void worker_handle_leave(struct agent *a, conn *c, const json_t *req);
void worker_cli_gone(struct agent *a, conn *c);   /* a CLI closed: forget it */
void worker_on_crl(struct agent *a, const char *from, const json_t *msg); /* "crl" */
/* status on a worker: the head's answer plus this node's link to it */
void cluster_status_answer(struct agent *a, conn *cli, json_int_t orig_id, json_t *msg);

#endif

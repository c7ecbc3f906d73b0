/* jobs: groups, jobs and exec (issue 6, docs/jobs.md). Internal header of
 * the jobs_*.c files; agent.h has the hooks the rest of sparkd calls.
 *   jobs_ctl.c   CLI requests on the control socket: the caller's uid and user
 *                name (SO_PEERCRED) are attached, then the head serves them
 *                here, or a worker relays them over its session ("job_req";
 *                the head's answers come back as "stream" frames and one final
 *                "result"/"error" with the relay's id)
 *   jobs_head.c  the head: groups, the job table (cluster.db), fan-out to the
 *                members, watchers (output and results streamed to a CLI), fail
 *                fast, cancel, timeouts, unreachable nodes, sync after restarts
 *   jobs_node.c  every node: ranks started through the shim, their logs and
 *                tails, exec sessions, adoption after a restart, sync
 *   jobs_shim.c  `sparkd --rank-shim DIR`, the per-rank supervisor process
 *   jobenv.c, plan.c: pure functions (environment contract, group planner)
 *
 * Frames between the head and a member (over the worker's mTLS session; the
 * head's own node gets them through a local mailbox, never re-entrantly):
 *   head -> node: job_start, job_signal, job_tail, job_untail, exec_start,
 *                 exec_signal, job_sync_ack
 *   node -> head: job_started, job_exit, job_data, job_sync, exec_data, exec_exit,
 *                 and from a worker's CLI: job_req, stream_cancel */
#ifndef SPARK_AGENT_JOBS_H
#define SPARK_AGENT_JOBS_H

#include "agent.h"

#include "discover.h"

#include <limits.h>

#define JOBS_GRACE_MS 3000         /* SIGTERM -> SIGKILL */
#define JOBS_TICK_MS 50            /* tails and adopted-rank polling */
#define JOBS_CHUNK 65536           /* bytes of log per data frame */
#define JOBS_START_TIMEOUT_MS 30000 /* a rank still pending after this is lost */
#define JOBS_MAX_RANKS_PER_NODE 64
#define JOBS_MAX_SPEC_BYTES (128 * 1024) /* argv + env of a job or exec */
#define JOBS_MAX_TIMEOUT_S (10 * 366 * 86400) /* --timeout: no overflow of start + timeout */
#define JOBS_KEEP_DAYS 7           /* finished job dirs on nodes */

struct mail;
struct hjob;
struct watcher;
struct nrank;
struct ntail;
struct nexec;

struct jobs {
	struct agent *a;
	/* mailbox between the head and its own node */
	struct mail *mail_first, *mail_last;
	uv_timer_t mail_timer;
	/* head */
	struct hjob *hjobs;
	struct watcher *watchers;
	long long next_tail, next_exec;
	uv_timer_t head_timer;
	bool head_loaded;
	/* node */
	struct nrank *ranks;
	struct ntail *tails;
	struct nexec *execs;
	uv_timer_t node_timer;
	struct topo_opts topts;
	bool topts_ok;
	json_t *disc;              /* this node's last discovery (cached briefly) */
	uint64_t disc_ms;
	char exe[PATH_MAX];        /* this sparkd binary (for the shim) */
	bool stopping;
};

/* jobs_ctl.c */

/* jobs_head.c. dest: where answers go (a CLI connection, or a worker's session
 * for a relayed request), id: the id to answer with. */
void jh_request(struct agent *a, conn *dest, json_int_t id, const json_t *req);
void jh_on_node_msg(struct agent *a, const char *node_id, const json_t *msg);
void jh_stream_cancel(struct agent *a, conn *dest, json_int_t id);
void jh_conn_gone(struct agent *a, conn *c);
void jh_node_session_gone(struct agent *a, const char *node_id);
int jh_start(struct agent *a);
void jh_stop(struct agent *a);
void jh_free(struct agent *a);
json_t *jh_node_groups(struct agent *a, const char *node_id);
/* enum plan_topo of the cluster's nodes (reordered to ring order on a ring) */
int jh_cluster_topology(struct agent *a, db_node *nodes, size_t n);
void jh_job_env(struct agent *a, conn *dest, json_int_t id, const json_t *req); /* jobs_env.c */

/* jobs_node.c */
bool jn_on_head_msg(struct agent *a, const json_t *msg); /* false: not a job frame */
void jn_send_head(struct agent *a, json_t *msg); /* steals msg */
void jn_head_up(struct agent *a);                 /* send job_sync */
void jn_head_lost(struct agent *a);
int jn_start(struct agent *a);
void jn_stop(struct agent *a);
void jn_free(struct agent *a);
/* a rank's environment from a job spec and this node's live discovery */
json_t *jn_rank_env(struct agent *a, const json_t *job, int node_rank, const char *socket_addr,
		    int rank, int local_rank, const char *launcher);

/* jobs.c (the mailbox and shared helpers) */
void jobs_mail(struct agent *a, bool to_head, json_t *msg); /* steals msg */
/* Send to a member node (the head's own node through the mailbox). steals msg.
 * -ENOTCONN when that node has no session. */
int jobs_send_node(struct agent *a, const char *node_id, json_t *msg);
/* Bytes of a log as JSON-safe text: NUL and invalid UTF-8 become '?'. A UTF-8
 * sequence cut at the end is left out (*used tells how many bytes were taken)
 * unless final. */
json_t *jobs_text(const char *buf, size_t len, bool final, size_t *used);

#endif

/* jobs: groups, jobs and exec (issue 6, docs/jobs.md), the jobs service.
 * Header of the jobs*.c files only:
 *   jobs.c       the service's tables (requests the head serves, frames both
 *                ways), its events, helpers shared by the others
 *   jobs_head.c  the head: groups, the job table (cluster.db), fan-out to the
 *                members, watchers (output and results streamed to a CLI), fail
 *                fast, cancel, timeouts, unreachable nodes, sync after restarts
 *   jobs_node.c  every node: ranks started through the shim, their logs and
 *                tails, exec sessions, adoption after a restart, sync
 *   jobs_shim.c  `sparkd --rank-shim DIR`, the per-rank supervisor process
 *   jobenv.c: a pure function (the environment contract); the group planner
 *                is topology/partition.c
 *
 * Requests (from the CLI of any node; a worker forwards them, control.c and
 * peers.c) are answered with any number of "stream" frames and one final
 * "result"/"error". Frames between the head and a member (over the worker's
 * mTLS session; the head's own node gets them through peers.c's mailbox):
 *   head -> node: job_start, job_signal, job_tail, job_untail, exec_start,
 *                 exec_signal, job_sync_ack
 *   node -> head: job_started, job_exit, job_data, job_sync, exec_data, exec_exit */
#ifndef SPARK_AGENT_JOBS_H
#define SPARK_AGENT_JOBS_H

#include "service.h"

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

struct hjob;
struct watcher;
struct nrank;
struct ntail;
struct nexec;

struct jobs {
	struct agent *a;
	/* head */
	struct hjob *hjobs;
	struct watcher *watchers;
	long long next_tail, next_exec;
	uv_timer_t head_timer;
	bool head_loaded;
	json_t *ended;             /* records of jobs that ended, for SVC_EV_JOB_ENDED */
	uv_timer_t end_timer;
	/* node */
	struct nrank *ranks;
	struct ntail *tails;
	struct nexec *execs;
	uv_timer_t node_timer;
	char exe[PATH_MAX];        /* this sparkd binary (for the shim) */
	bool stopping;
};

/* jobs.c */
extern const struct service jobs_service;

/* jobs_head.c: the requests (jobs.c's table) and the members' frames; the
 * handlers check that the sending node owns what a frame names. */
void jh_group_create(struct agent *a, const struct svc_req *q);
void jh_group_ls(struct agent *a, const struct svc_req *q);
void jh_group_show(struct agent *a, const struct svc_req *q);
void jh_group_rm(struct agent *a, const struct svc_req *q);
void jh_job_run(struct agent *a, const struct svc_req *q);
void jh_job_ls(struct agent *a, const struct svc_req *q);
void jh_job_show(struct agent *a, const struct svc_req *q);
void jh_job_logs(struct agent *a, const struct svc_req *q);
void jh_job_cancel(struct agent *a, const struct svc_req *q);
void jh_exec(struct agent *a, const struct svc_req *q);
void jh_job_data(struct agent *a, const char *node_id, const json_t *msg);
void jh_job_started(struct agent *a, const char *node_id, const json_t *msg);
void jh_job_exit(struct agent *a, const char *node_id, const json_t *msg);
void jh_job_sync(struct agent *a, const char *node_id, const json_t *msg);
void jh_exec_data(struct agent *a, const char *node_id, const json_t *msg);
void jh_exec_exit(struct agent *a, const char *node_id, const json_t *msg);
void jh_stream_cancel(struct agent *a, conn *dest, json_int_t id);
void jh_conn_gone(struct agent *a, conn *c);
void jh_node_session_gone(struct agent *a, const char *node_id);
int jh_start(struct agent *a);
void jh_hooks(struct agent *a); /* job_launch, job_stop (struct agent_hooks) */
void jh_stop(struct agent *a);
void jh_free(struct agent *a);
/* jobs_head.c: the job network for these nodes from their stored fabric reports
 * (jobenv.c jobnet_plan), as job_run plans it: a new plan (caller frees), NULL
 * when memory runs out. */
struct jobnet_plan *jh_net_plan(struct agent *a, const db_node *nodes, size_t n);
/* jobs_head.c: enum plan_topo of the cluster's nodes (reordered to ring order on a ring) */
int jh_cluster_topology(struct agent *a, db_node *nodes, size_t n);
/* jobs_env.c: job_env, the environment a rank of `sparkctl run` would get on the
 * asking node (the head plans; the asking node fills it from its own ports) */
void jh_job_env(struct agent *a, const struct svc_req *q);
void jobs_env_answer(struct agent *a, conn *cli, json_int_t orig_id, json_t *msg);

/* jobs_node.c: the head's frames (from: the head's node id) */
void jn_job_start(struct agent *a, const char *from, const json_t *msg);
void jn_job_tail(struct agent *a, const char *from, const json_t *msg);
void jn_job_untail(struct agent *a, const char *from, const json_t *msg);
void jn_job_signal(struct agent *a, const char *from, const json_t *msg);
void jn_sync_ack(struct agent *a, const char *from, const json_t *msg);
void jn_exec_start(struct agent *a, const char *from, const json_t *msg);
void jn_exec_signal(struct agent *a, const char *from, const json_t *msg);
void jn_head_up(struct agent *a);                 /* send job_sync */
bool jn_job_here(struct agent *a, long long job_id); /* the job_here hook */
void jn_head_lost(struct agent *a);
int jn_start(struct agent *a);
void jn_stop(struct agent *a);
void jn_free(struct agent *a);
/* a rank's environment from a job spec and this node's live discovery */
json_t *jn_rank_env(struct agent *a, const json_t *job, int node_rank, const char *socket_addr,
		    int rank, int local_rank, const char *launcher);

/* Bytes of a log as JSON-safe text: NUL and invalid UTF-8 become '?'. A UTF-8
 * sequence cut at the end is left out (*used tells how many bytes were taken)
 * unless final. */
json_t *jobs_text(const char *buf, size_t len, bool final, size_t *used);

#endif

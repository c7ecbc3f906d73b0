/* serve: model servers as supervised services (issue 19, docs/serving.md),
 * the serve service. Header of the serve*.c files only:
 *   serve.c       the service's tables (requests the head serves, frames both
 *                 ways), its events
 *   serve_head.c  the head: the services table (cluster.db), start (memory
 *                 admission, one start at a time per shared node), states,
 *                 restarts with back-off, stop, re-adoption after a head
 *                 restart, watchers (svc_watch: spark-router, svc logs -f)
 *   serve_node.c  every node: the health check of the services whose rank 0
 *                 runs here (libcurl, from this node), reported to the head
 *
 * A service's every start is a job of the jobs service (a->hooks.job_launch,
 * job_stop; its end arrives as SVC_EV_JOB_ENDED, and a rank's end while the
 * others run as SVC_EV_RANK_ENDED: an exit 0 there ends the run too).
 * Frames between the head and a member:
 *   head -> node: svc_health_watch, svc_health_unwatch
 *   node -> head: svc_health */
#ifndef SPARK_AGENT_SERVE_H
#define SPARK_AGENT_SERVE_H

#include "service.h"

struct sh_svc;   /* serve_head.c: one service */
struct sh_watch; /* serve_head.c: one svc_watch stream */
struct sn_watch; /* serve_node.c: one health check */

struct serve {
	struct agent *a;
	/* head */
	struct sh_svc *svcs;
	struct sh_watch *watchers;
	uv_timer_t head_timer;
	bool head_on, head_loaded;
	/* node */
	struct sn_watch *checks;
	uv_timer_t node_timer;
	bool node_on, node_stopping, curl_on;
	int inflight;             /* health checks in the thread pool */
};

/* serve.c */
extern const struct service serve_service;

/* serve_head.c: requests (serve.c's table) and the members' frames */
void sh_svc_start(struct agent *a, const struct svc_req *q);
void sh_svc_ls(struct agent *a, const struct svc_req *q);
void sh_svc_show(struct agent *a, const struct svc_req *q);
void sh_svc_stop(struct agent *a, const struct svc_req *q);
void sh_svc_restart(struct agent *a, const struct svc_req *q);
void sh_svc_rm(struct agent *a, const struct svc_req *q);
void sh_svc_watch(struct agent *a, const struct svc_req *q);
void sh_health(struct agent *a, const char *node_id, const json_t *msg);
void sh_event(struct agent *a, enum svc_event ev, const struct svc_event_arg *arg);
int sh_start(struct agent *a);
void sh_stop(struct agent *a);
void sh_free(struct agent *a);

/* serve_node.c: the head's frames (from: the head's node id) */
void sn_health_watch(struct agent *a, const char *from, const json_t *msg);
void sn_health_unwatch(struct agent *a, const char *from, const json_t *msg);
void sn_event(struct agent *a, enum svc_event ev, const struct svc_event_arg *arg);
int sn_start(struct agent *a);
void sn_stop(struct agent *a);
void sn_free(struct agent *a);
/* Limits of a watch (svc_health_watch) and of what a check reads. */
#define SN_INTERVAL_MIN_MS 100
#define SN_INTERVAL_MAX_MS 3600000
#define SN_TIMEOUT_MIN_MS 10
#define SN_TIMEOUT_MAX_MS 600000
#define SN_BODY_MAX (64 * 1024)
/* The model ids of an OpenAI model list {"data": [{"id": s}, ...]} (entries
 * without a usable id are skipped; at most 256 ids of at most 256 bytes).
 * 0 with *ids a new array, or -EINVAL / -E2BIG (over SN_BODY_MAX) with err. */
int sn_models_parse(const char *body, size_t len, json_t **ids, char *err, size_t errlen);

#endif

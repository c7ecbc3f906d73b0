/* service: what every service of sparkd exports, and the registry that finds
 * them (issue 15). A service (cluster, fabric, topo, jobs, ...) is a set of
 * files agent/S.c, agent/S_*.c with its own header S.h that only they
 * include; it exports one `const struct service`, listed once in service.c.
 *
 * The core below the services (control.c: the Unix socket; peers.c: the
 * sessions between agents, the pending requests, the own-node mailbox;
 * service.c: this registry and the reply helpers) finds a request or frame
 * type by table lookup, checks its fields and the caller's right, and calls
 * the one handler signature. Services never call each other: what one needs
 * of another it reads through db/ (on the head) or learns from an event
 * (svc_emit) the owning service raises.
 *
 * Adding a request: one row in the service's `requests` table and one row in
 * cli/commands.c (docs/hacking.md). */
#ifndef SPARK_AGENT_SERVICE_H
#define SPARK_AGENT_SERVICE_H

#include "agent.h"

#include "proto.h"

/* A request as its handler sees it. reply and id: where and with which id
 * the answer goes (the CLI's connection, or on the head the session of the
 * worker that forwarded it). msg: the request, fields checked, with the
 * "caller" its node's control socket read from SO_PEERCRED. origin: the node
 * whose CLI asked (this node for local requests). */
struct svc_req {
	conn *reply;
	json_int_t id;
	const json_t *msg;
	const char *origin;
};
typedef void (*svc_request_fn)(struct agent *a, const struct svc_req *r);

enum svc_at {
	SVC_LOCAL, /* served by the node whose socket got it, whatever its role */
	SVC_HEAD,  /* served by the head: a worker forwards it (peers.c) */
};
#define SVC_STREAMS 1u      /* the answer may be "stream" frames before the final one */
#define SVC_NAMED_CALLER 2u /* the caller must have a user name (jobs run as it) */

struct svc_request {
	const char *type;
	svc_request_fn fn;
	enum agent_right right;
	enum svc_at at;
	unsigned flags;
	struct proto_field fields[16]; /* checked before fn: never a default for a bad one */
	peers_answer_fn on_answer;    /* SVC_HEAD on a worker: the head's answer passes
				       * here on its way to the CLI (NULL: as it is) */
};

/* A frame between agents. from: the sending node's id (for SVC_TO_NODE
 * frames, the head's). Fields are checked before fn (an error frame answers
 * a bad one); fn checks that the sender owns the object the frame names. */
typedef void (*svc_frame_fn)(struct agent *a, const char *from, const json_t *msg);
/* dir (agent.h): FRAME_TO_HEAD, a member (or the head's own node, through
 * the mailbox) to the head; FRAME_TO_NODE, the head to a node (its own too). */
struct svc_frame {
	const char *type;
	svc_frame_fn fn;
	enum agent_frame_dir dir;
	struct proto_field fields[8];
	/* a frame of the session itself (hello, heartbeat, leave: only over a
	 * member's session, never the mailbox): this gets the session, fn is NULL */
	void (*on_session)(struct agent *a, struct session *s, const json_t *msg);
	unsigned flags;
};
#define SVC_FRAME_QUIET 1u /* not work for agent_settle (heartbeats) */

/* What the core and services tell each other without calling each other. */
enum svc_event {
	SVC_EV_ROLE,           /* this node became the head (init) */
	SVC_EV_HEAD_UP,        /* worker: the head answered hello */
	SVC_EV_HEAD_LOST,      /* worker: the session to the head closed */
	SVC_EV_CONN_GONE,      /* a CLI connection or a member's session closed (conn) */
	SVC_EV_NODE_GONE,      /* head: a node's last session closed (node_id) */
	SVC_EV_STREAM_CANCEL,  /* head: who asked (conn, id) no longer reads the stream */
	SVC_EV_FABRIC_CHANGED, /* this node's fabric changed (bits: TOPO_CHG_*) */
	SVC_EV_NODE_UP,        /* head: a member said hello (node_id; the head's own node too) */
	SVC_EV_JOB_ENDED,      /* head: a job ended (id; data: its record as job_show has it) */
	SVC_EV_RANK_ENDED,     /* head: a rank ended while others of its job still run and the
				* job is not being stopped (id: the job; data: the rank's record
				* as job_show has it, with job_id and running: how many still
				* run); before the job's own SVC_EV_JOB_ENDED */
};
struct svc_event_arg {
	conn *c;
	json_int_t id;
	const char *node_id;
	unsigned bits;
	const json_t *data;
};

struct service {
	const char *name;
	const struct svc_request *requests; /* ends with {NULL} (NULL: none) */
	const struct svc_frame *frames;     /* ends with {NULL} (NULL: none) */
	int (*init)(struct agent *a, char *err, size_t len); /* config, before the loop */
	/* After the identity is loaded, in list order (the cluster service first:
	 * it starts the role, opening cluster.db on the head). <0: sparkd stops
	 * with err; a service that can run degraded logs and returns 0. */
	int (*start)(struct agent *a, char *err, size_t len);
	void (*stop)(struct agent *a);  /* shutdown: close handles */
	void (*free)(struct agent *a);  /* after the loop ended */
	void (*on_event)(struct agent *a, enum svc_event ev, const struct svc_event_arg *arg);
};

/* The registry (service.c). */
const struct service *svc_named(const char *name); /* NULL: none (tests) */
const struct svc_request *svc_request_of(const char *type);
const struct svc_frame *svc_frame_of(const char *type, enum agent_frame_dir dir);
/* Check r's fields and its caller's right against row, then call row->fn;
 * answer bad_request or forbidden otherwise. */
void svc_serve(struct agent *a, const struct svc_request *row, const struct svc_req *r);
/* Is the request's caller an admin of the cluster (root, security.admin_group)?
 * For handlers whose rule is "the owner or an admin" (svc stop). */
bool svc_caller_is_admin(struct agent *a, const json_t *req);
void svc_emit(struct agent *a, enum svc_event ev, const struct svc_event_arg *arg);
int svc_init_all(struct agent *a, char *err, size_t len);
int svc_start_all(struct agent *a, char *err, size_t len);
void svc_stop_all(struct agent *a);
void svc_free_all(struct agent *a);

/* Answers. A result too large for a frame becomes a "too_large" error. */
void svc_send_result(conn *c, json_int_t id, json_t *data);
void svc_reply(const struct svc_req *r, json_t *data);
void svc_error(const struct svc_req *r, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* An error answer to a frame or request msg that arrived on c. */
void svc_error_to(conn *c, const json_t *msg, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif

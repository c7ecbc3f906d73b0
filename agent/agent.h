/* agent: sparkd, the per-node daemon. One libuv loop runs everything:
 *   control.c  the Unix control socket for sparkctl (SO_PEERCRED), request table
 *   identity.c the node's identity in its state dir (role, ids, keys, certs)
 *   head.c     the head role: cluster CA, cluster.db, joins, heartbeats, liveness
 *   worker.c   the worker role: join, mutual-TLS session to the head, heartbeats,
 *              reconnect with backoff, forwarding cluster requests to the head
 *   fabric.c   this node's fabric (topology/): discovery at start and on netlink
 *              changes, sent to the head; the head stores reports in cluster.db
 *   jobs*.c    groups, jobs and exec (issue 6): see jobs.h; ranks run under
 *              `sparkd --rank-shim` and outlive sparkd
 * A node with no identity is "unjoined": it answers version/status locally and
 * waits for `init` or `join`. */
#ifndef SPARK_AGENT_H
#define SPARK_AGENT_H

#include "conn.h"
#include "db.h"

#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#define AGENT_HEARTBEAT_MS 1000
#define AGENT_UNREACHABLE_MS 5000
#define AGENT_DOWN_MS 60000
#define AGENT_BACKOFF_MIN_MS 250
#define AGENT_BACKOFF_MAX_MS 10000
#define AGENT_CERT_DAYS 825
#define AGENT_QUEUE_WAIT_MS 3000 /* a request waits this long for a (re)connecting head */
/* Limits on what a peer that has not authenticated can hold (issue 14). */
#define AGENT_PREAUTH_FRAME (16 * 1024) /* a join is under 2 KiB */
#define AGENT_PREAUTH_MS 5000           /* accept to join answered, TLS included */
#define AGENT_PREAUTH_MAX 64            /* at once; the oldest is dropped */
#define AGENT_SESSION_IDLE_MS 15000     /* an authenticated session with no frame */
#define AGENT_CTL_MAX 128               /* control socket connections served at once */
#define AGENT_CTL_RESERVED 16           /* of those, kept for root and sparkd's own user */
#define AGENT_CTL_PER_UID 32            /* served at once per other user (security.control_per_user) */
#define AGENT_CTL_IDLE_MS 10000         /* no request in flight (security.control_idle_s) */
#define AGENT_CTL_REQUEST_MS 5000       /* a request's first byte to its last (security.control_request_s) */
#define AGENT_CTL_FRAME (256 * 1024)    /* largest control request */
#define AGENT_JOIN_EXPIRE_S 600         /* a join that never connected is undone */

enum agent_role { ROLE_NONE = 0, ROLE_HEAD, ROLE_WORKER };

struct agent_opts {
	char state_dir[256];
	char socket[256];
	char listen_host[128];
	int listen_port;
	char name[64];       /* default node name (--name / config / host name) */
	char config[256];
	int log_level;
};

/* What a node keeps in STATE_DIR/identity.json (+ PEM files beside it). */
struct identity {
	enum agent_role role;
	bool removed;               /* a worker whose certificate was revoked */
	char cluster_id[40];
	char cluster_name[64];
	char node_id[40];
	char node_name[64];
	char head_id[40];
	char head_addr[160];        /* "HOST:PORT" of the head's agent port */
	char cluster_secret[65];
	char advertise[160];        /* this node's own agent address as others see it */
	char head_key[65];          /* worker: SHA-256 of the head's public key (pinned) */
	char joined_via[160];       /* worker: the address `join` was given */
};

struct agent;
struct session;
struct ctl_client;
struct pending; /* peers.c: a request sent to the head, waiting for its answer */
struct mail;    /* peers.c: the own-node mailbox */
struct ask;     /* peers.c: a request to a node */
struct fabric;  /* fabric service: discovery options, last report, watcher */
struct jobs;    /* jobs service: groups, jobs, exec */
struct topo_agent; /* topo service: neighbour discovery and topology validation */
struct model_svc;  /* model service (model.c): the models this node holds */
struct serve;      /* serve service (serve.c): supervised model servers */

/* A frame's direction (service.h's svc_dir). */
enum agent_frame_dir { FRAME_TO_HEAD, FRAME_TO_NODE };

/* Facts one service owns and others read (issue 15: services never call each
 * other). The owner sets its hook at init; a reader checks for NULL. */
struct agent_hooks {
	/* fabric (head): a node's summary {ports_up, ports_total, ...} and full
	 * report {updated_at, discovery, findings}, JSON null if none; store a
	 * report of a node's (topology validation fetches fresh ones). */
	json_t *(*fabric_summary)(struct agent *a, const char *node_id);
	json_t *(*fabric_report)(struct agent *a, const char *node_id);
	int (*fabric_store)(struct agent *a, const char *node_id, json_t *discovery);
	/* fabric (every node): this node's last discovery (borrowed; NULL before
	 * the first one or after a failure) */
	json_t *(*discovery)(struct agent *a);
	/* topo (head): the last validation for status, or JSON null */
	json_t *(*topo_status)(struct agent *a);
	/* model (every node): the folder of this node's model store (models.dir,
	 * else STATE_DIR/models): a job's SPARK_MODEL_DIR */
	const char *(*model_dir)(struct agent *a);
	/* cluster (head): membership policy for sessions.c. session_auth: the
	 * member a CA-verified certificate names (0, node_id filled), or <0 to
	 * refuse it as revoked (logged); session_preauth: a frame before
	 * authentication (a join); session_closed: an authenticated session ended. */
	int (*session_auth)(struct agent *a, X509 *cert, char *node_id, size_t len);
	void (*session_preauth)(struct agent *a, struct session *s, const json_t *msg);
	void (*session_closed)(struct agent *a, const struct session *s);
	/* jobs (head): start a job on behalf of another service (the serve
	 * service's runs). spec: {"name": s, "group": s, "owner": s (e.g.
	 * "serve:NAME"), "caller": {as control.c attaches to requests},
	 * "ranks": [{"node": node id, "argv": [s...], "env": {s: s}}] one per
	 * group member in group order}; every rank also gets the job environment
	 * contract (jobenv.c), the spec's env wins. The job id (>0), or <0 with
	 * err. Its end arrives as SVC_EV_JOB_ENDED. */
	long long (*job_launch)(struct agent *a, const json_t *spec, char *err, size_t len);
	/* jobs (head): SIGTERM every rank of a job, SIGKILL after grace_ms.
	 * 0, or <0 when it is unknown or has ended. */
	int (*job_stop)(struct agent *a, long long job_id, int grace_ms);
	/* jobs (every node): does a rank of this job still run on this node?
	 * (the serve service's health checks end with their run's job) */
	bool (*job_here)(struct agent *a, long long job_id);
};

/* The head role's state (cluster_head.c; db is read by every head side). */
struct agent_head {
	db *db;                   /* cluster.db */
	X509 *ca;
	EVP_PKEY *ca_key;
	char *crl_pem;            /* the revocation list last made (head_crl_update) */
	uv_timer_t live_timer;
	bool live_timer_on;
	bool self_up;             /* SVC_EV_NODE_UP sent for the head's own node */
	uint64_t self_mem_ms;     /* when the head last read its own memory */
	struct session *sessions; /* connected workers */
};

/* The worker role's state: its session to the head (cluster_node.c) and the
 * requests it sends there (peers.c). */
struct agent_worker {
	conn *link;               /* the session to the head */
	bool up;                  /* hello answered */
	uint64_t last_ok_ms;
	uv_timer_t hb_timer, retry_timer, queue_timer;
	bool hb_on, retry_on, queue_on;
	unsigned backoff_ms;
	json_int_t next_id;       /* ids of requests to the head (peers.c) */
	struct pending *pending;
	struct join_wait *join_wait; /* a join's CLI, answered once connected */
	char error[256];          /* last reason the head could not be reached */
	char addr_now[160];       /* the head address this (or the last) session uses */
	bool alt;                 /* the next connect tries the other address */
	struct join_op *join;     /* a join in progress (one at a time) */
};

struct agent {
	uv_loop_t *loop;
	struct agent_opts opts;
	int lock_fd;
	uv_pipe_t ctl;
	bool ctl_open;
	dev_t ctl_dev; /* the control socket file we bound (control_stop unlinks only it) */
	ino_t ctl_ino;
	uv_tcp_t srv;
	bool srv_open;
	uv_signal_t sigterm, sigint;
	bool stopping;
	int64_t started_at;
	json_t *cfg;              /* the loaded config tree, NULL without a config file */
	struct fabric *fabric;
	struct jobs *jobs;
	struct topo_agent *topo;
	struct model_svc *model;
	struct serve *serve;
	struct agent_hooks hooks;
	struct mail *mail_first, *mail_last; /* peers.c: the own-node mailbox */
	struct ask *asks;         /* peers.c: requests to nodes waiting for answers */
	json_int_t next_ask_id;
	uv_timer_t ask_timer;
	bool ask_timer_on;
	uv_timer_t mail_timer;
	bool mail_timer_on;
	uint64_t busy_ms;         /* last burst of allocations (agent_busy) */
	bool unsettled;           /* busy since the last agent_settle that trimmed */

	struct identity id;
	char admin_group[64];     /* security.admin_group: admins besides root */
	int64_t join_expire_s;    /* security.join_expire_s */
	int64_t mem_budget;       /* serve.memory_budget_gib in bytes, 0: the planner's share */
	unsigned ctl_conns;       /* open control socket connections */
	struct ctl_client *ctl_clients; /* control.c: every open control connection */
	uv_timer_t ctl_timer;     /* control.c: closes idle control connections */
	bool ctl_timer_on;
	unsigned ctl_idle_ms;     /* security.control_idle_s */
	unsigned ctl_request_ms;  /* security.control_request_s */
	unsigned ctl_per_uid;     /* security.control_per_user */
	unsigned port_conns;      /* worker: open agent-port connections */
	SSL_CTX *srv_ctx;         /* our listener: our cert, verifies peers against the CA */
	SSL_CTX *cli_ctx;         /* outgoing mutual TLS to the head */

	struct agent_head hd;     /* the head role */
	struct agent_worker wk;   /* the worker role */
};

/* A connected worker on the head. */
struct session {
	struct session *next;
	struct agent *a;
	conn *c;
	char node_id[40];
	bool authed;              /* presented a valid, unrevoked node certificate */
	bool closing;             /* closed by the head; gone at its on_close */
	uint64_t accepted_ms;
	uint64_t last_ms;         /* last complete frame */
};

/* control.c: the Unix socket sparkctl talks to (SO_PEERCRED), dispatch
 * through the services' request tables (service.h), generic forwarding of
 * head-served requests by a worker (peers.c). */
enum agent_right { RIGHT_USER, RIGHT_ADMIN };
int control_start(struct agent *a, char *err, size_t errlen);
void control_stop(struct agent *a);

/* identity.c */
/* security.* of the config: admin_group, join_expire_s, control_idle_s,
 * control_request_s, control_per_user. */
int agent_security_config(struct agent *a, char *err, size_t errlen);
void identity_paths(struct agent *a, const char *file, char *out, size_t len);
int identity_load(struct agent *a, char *err, size_t errlen);
int identity_save(struct agent *a);
int identity_wipe(struct agent *a);
int agent_tls_setup(struct agent *a, char *err, size_t errlen);
/* The agent port; its connections go to peers_accept (sessions.c). */
int agent_listen(struct agent *a, char *err, size_t errlen);
void agent_close_listener(struct agent *a);
const char *role_name(enum agent_role r);

/* peers.c: requests this node sends its head and waits for (one table for
 * the CLI's forwarded requests and the worker's own hello and leave). frame
 * is stolen; its id is set here. Queued for AGENT_QUEUE_WAIT_MS while the
 * head is not up (PEERS_NOW: send on the session as it is: hello).
 * PEERS_STREAMS: "stream" frames with its id go to cli as they come, and a CLI
 * that goes away sends the head a stream_cancel. on_answer (may be NULL: the
 * answer goes to cli with its id) gets the final answer, or an error made
 * here when the head is unreachable or sparkd stops. */
typedef void (*peers_answer_fn)(struct agent *a, conn *cli, json_int_t orig_id, json_t *msg);
#define PEERS_NOW 1u
#define PEERS_STREAMS 2u
int peers_request(struct agent *a, conn *cli, json_int_t orig_id, json_t *frame, unsigned flags,
		  peers_answer_fn on_answer);
/* A CLI request the head serves, from a worker: {"type":"forward","request":req}. */
int peers_forward(struct agent *a, conn *cli, const json_t *req, unsigned flags,
		  peers_answer_fn on_answer);
bool peers_on_head_frame(struct agent *a, const json_t *msg); /* an answer of ours: used */
void peers_head_up(struct agent *a);   /* hello answered: send what was queued */
void peers_head_lost(struct agent *a); /* the session closed: fail what was sent */
void peers_cli_gone(struct agent *a, conn *cli);
void peers_stop(struct agent *a, const char *why);
/* The live, authenticated session of a node on the head (NULL: not connected). */
struct session *peers_session(struct agent *a, const char *node_id);

/* sessions.c: the agent port's connections (a head's sessions with its
 * members; a worker's port answers not_head) and their limits. */
void peers_accept(struct agent *a, uv_stream_t *server);
void peers_sweep_sessions(struct agent *a);   /* pre-auth and idle limits (liveness tick, 0.5 s) */
void peers_close_others(struct agent *a, struct session *s); /* s replaces its node's older ones */
void peers_close_sessions(struct agent *a);   /* the head stops */
/* Tests only (tests/fuzz/fuzz_session.c): accept the connection pending on a
 * plain listener as the authenticated session of node node_id, as if it had
 * presented that node's valid certificate. 0, -ENOENT (not the head), -ENOMEM
 * or -EIO. */
int peers_adopt_session(struct agent *a, uv_stream_t *server, const char *node_id);
/* Frames between a node's services and the head's (msg stolen). To this node
 * itself (the head's own node) they go through the one own-node mailbox and
 * are dispatched, next loop iteration, like a frame from a session. */
int peers_to_node(struct agent *a, const char *node_id, json_t *msg); /* head side */
int peers_to_head(struct agent *a, json_t *msg);                      /* node side */
/* Requests the head sends a node and waits for (the topology runs' state
 * and probe requests): msg (stolen) gets an id, goes with peers_to_node, and
 * cb gets the node's answer (the frame with that id, from that node, that a
 * service hands to peers_node_answer), or NULL and why on a timeout, a
 * session that closed, or shutdown. owner groups a caller's requests:
 * peers_ask_pending counts them, peers_ask_forget drops them unanswered.
 * 0, -ENOTCONN (no session to that node: msg freed, cb not called), -ENOMEM. */
typedef void (*peers_ask_fn)(struct agent *a, void *owner, int tag, const json_t *reply,
			     const char *why);
int peers_ask(struct agent *a, const char *node_id, json_t *msg, unsigned timeout_ms,
	      peers_ask_fn cb, void *owner, int tag);
bool peers_node_answer(struct agent *a, const char *from, const json_t *msg); /* ours: used */
size_t peers_ask_pending(struct agent *a, const void *owner);
void peers_ask_forget(struct agent *a, const void *owner);
void peers_session_gone(struct agent *a, conn *c); /* head: fail what was asked through c */

/* Dispatch a frame of another agent (or of the mailbox) to its row of the
 * services' frame tables, which the caller looked up (svc_frame_of; NULL:
 * none, refused as unknown_type): its fields checked, then its handler. c:
 * where a bad one is answered (NULL: the mailbox, logged). */
struct svc_frame;
void peers_dispatch(struct agent *a, conn *c, const char *from, enum agent_frame_dir dir,
		    const struct svc_frame *f, const json_t *msg);


/* settle.c: memory after bursts. Init (CA key, certificates, migrations), joins (key
 * generation, CSR signing), TLS handshakes and CLI requests allocate and free a
 * lot at once, and glibc keeps what was freed inside the heap (only a top
 * beyond 128 KiB goes back by itself), so an idle sparkd would hold hundreds of
 * KiB of freed memory for good. Such work calls agent_busy; the 1 s timers
 * (liveness on the head, heartbeat on a worker) call agent_settle, which, once
 * the agent has been quiet for AGENT_SETTLE_MS (heartbeats do not count),
 * drops SQLite's caches (head) and hands free heap pages to the kernel. */
#define AGENT_SETTLE_MS 2000
void agent_busy(struct agent *a);
void agent_settle(struct agent *a);

/* jobs_shim.c: `sparkd --rank-shim DIR`, a rank's supervisor process (main
 * runs it before anything else; it is not a service). */
int agent_rank_shim(int argc, char **argv);

/* main.c */
void agent_shutdown(struct agent *a);

#endif

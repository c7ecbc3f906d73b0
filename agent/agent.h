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
#define AGENT_CTL_MAX 128               /* control socket connections at once */
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

struct pending; /* peers.c: a request sent to the head, waiting for its answer */
struct fabric;  /* fabric.c: discovery options, last report, watcher */
struct jobs;    /* jobs*.c: groups, jobs, exec */
struct topo_agent; /* topo*.c: neighbour discovery and topology validation */

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
	uint64_t busy_ms;         /* last burst of allocations (agent_busy) */
	bool unsettled;           /* busy since the last agent_settle that trimmed */

	struct identity id;
	char admin_group[64];     /* security.admin_group: admins besides root */
	int64_t join_expire_s;    /* security.join_expire_s */
	unsigned ctl_conns;       /* open control socket connections */
	unsigned port_conns;      /* worker: open agent-port connections */
	SSL_CTX *srv_ctx;         /* our listener: our cert, verifies peers against the CA */
	SSL_CTX *cli_ctx;         /* outgoing mutual TLS to the head */

	/* head */
	db *db;
	X509 *ca;
	EVP_PKEY *ca_key;
	char *crl_pem;            /* the revocation list last made (head_crl_update) */
	uv_timer_t live_timer;
	bool live_timer_on;
	struct session *sessions; /* connected workers */

	/* worker */
	conn *head;
	bool head_up;             /* hello answered */
	uint64_t head_last_ok_ms;
	uv_timer_t hb_timer, retry_timer, queue_timer;
	bool hb_on, retry_on, queue_on;
	unsigned backoff_ms;
	json_int_t next_fwd_id;   /* ids of requests to the head (peers.c) */
	struct pending *pending;
	struct join_wait *join_wait; /* a join's CLI, answered once connected */
	char head_error[256];     /* last reason the head could not be reached */
	char head_addr_now[160];  /* the head address this (or the last) session uses */
	bool head_alt;            /* the next connect tries the other address */
	struct join_op *join;     /* a join in progress (one at a time) */
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

/* control.c */
enum agent_right { RIGHT_USER, RIGHT_ADMIN };
int control_start(struct agent *a, char *err, size_t errlen);
/* May the request's caller (its "caller" object, set by the control socket of
 * the node it came from) ask for this? If not, why says so. */
bool agent_caller_may(struct agent *a, const json_t *req, char *why, size_t len);
bool agent_caller_is_admin(struct agent *a, const json_t *req);
/* The request's fields against control.c's table: 0, or -EBADMSG and why. */
int control_check_fields(const json_t *req, char *why, size_t len);
/* A result frame; one too large to send becomes a "too_large" error. */
void control_send_result(conn *c, json_int_t id, json_t *data);
void control_stop(struct agent *a);
/* Reply helpers for handlers (req is the request, c the CLI connection). */
void control_reply(conn *c, const json_t *req, json_t *data);
void control_error(conn *c, const json_t *req, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* identity.c */
/* security.* of the config: admin_group, join_expire_s. */
int agent_security_config(struct agent *a, char *err, size_t errlen);
void identity_paths(struct agent *a, const char *file, char *out, size_t len);
int identity_load(struct agent *a, char *err, size_t errlen);
int identity_save(struct agent *a);
int identity_wipe(struct agent *a);
int agent_tls_setup(struct agent *a, char *err, size_t errlen);
int agent_listen(struct agent *a, char *err, size_t errlen);
void agent_close_listener(struct agent *a);
const char *role_name(enum agent_role r);

/* head.c */
/* The live, authenticated session of a node (NULL: not connected). */
struct session *head_session(struct agent *a, const char *node_id);
int head_start(struct agent *a, char *err, size_t errlen);   /* after identity load */
void head_stop(struct agent *a);
void head_on_accept(struct agent *a, uv_stream_t *server);
/* Control requests the head serves (locally or forwarded by a worker).
 * origin_node_id: the node whose CLI asked (for the `local` flag). */
void head_handle_request(struct agent *a, conn *reply_to, const json_t *req,
			 const char *origin_node_id);
void head_handle_init(struct agent *a, conn *c, const json_t *req);
/* Remake crl.pem from cluster.db, reload the listener's TLS context and send
 * the list to every connected worker ({"type":"crl","crl":PEM}). */
int head_crl_update(struct agent *a);
char *head_crl_pem(struct agent *a);          /* the list as PEM (caller frees) */
const char *head_store_error(int r);          /* a db_ error for people */
/* Mint a token; on success fills the printable token string. */
int head_token_create(struct agent *a, int64_t ttl, int64_t uses, const char *descr,
		      char *token_out, size_t len, char *id_out);
/* Tests only (tests/fuzz/fuzz_session.c): accept the connection pending on a
 * plain listener as the authenticated session of node node_id, as if it had
 * presented that node's valid certificate. 0, -ENOENT (no such node, or not
 * the head), -ENOMEM or -EIO. */
int head_adopt_session(struct agent *a, uv_stream_t *server, const char *node_id);

/* worker.c */
int worker_start(struct agent *a);                /* connect to the head (identity known) */
void worker_stop(struct agent *a);
void worker_handle_join(struct agent *a, conn *c, const json_t *req);
void worker_handle_leave(struct agent *a, conn *c, const json_t *req);
void worker_forward(struct agent *a, conn *c, const json_t *req);
void worker_cli_gone(struct agent *a, conn *c);   /* a CLI closed: forget it */

/* peers.c: requests this node sends its head and waits for (one table for
 * the CLI's forwarded and relayed requests and the worker's own hello and
 * leave). frame is stolen; its id is set here. Queued for AGENT_QUEUE_WAIT_MS
 * while the head is not up (PEERS_NOW: send on the session as it is: hello).
 * PEERS_STREAMS: "stream" frames with its id go to cli as they come, and a CLI
 * that goes away sends the head a stream_cancel. on_answer (may be NULL: the
 * answer goes to cli with its id) gets the final answer, or an error made
 * here when the head is unreachable or sparkd stops. */
typedef void (*peers_answer_fn)(struct agent *a, conn *cli, json_int_t orig_id, json_t *msg);
#define PEERS_NOW 1u
#define PEERS_STREAMS 2u
int peers_request(struct agent *a, conn *cli, json_int_t orig_id, json_t *frame, unsigned flags,
		  peers_answer_fn on_answer);
bool peers_on_head_frame(struct agent *a, const json_t *msg); /* an answer of ours: used */
void peers_head_up(struct agent *a);   /* hello answered: send what was queued */
void peers_head_lost(struct agent *a); /* the session closed: fail what was sent */
void peers_cli_gone(struct agent *a, conn *cli);
void peers_stop(struct agent *a, const char *why);

/* fabric.c. Frame worker -> head: {"type":"fabric","id":0,"discovery":{...}}
 * (topology/discover.h JSON), after each hello and each fabric change; no answer,
 * a malformed one is answered with an error and the session closed. */
int fabric_init(struct agent *a, char *err, size_t errlen); /* options from a->cfg */
int fabric_start(struct agent *a);   /* first discovery, watcher, publish (after the role started) */
void fabric_publish(struct agent *a); /* head: store own report; worker: send it */
void fabric_stop(struct agent *a);
void fabric_free(struct agent *a);   /* after the loop has ended */
/* Head: findings with fabric.mtu, report, port rows and change events to cluster.db. */
int fabric_store(struct agent *a, const char *node_id, json_t *discovery);
void fabric_on_frame(struct agent *a, conn *c, const char *node_id, const json_t *msg);
/* Head: a node's summary {ports_up, ports_total, speed_mbps, mtu, findings...}
 * and full report {updated_at, discovery, findings}; JSON null if none. */
json_t *fabric_summary_json(struct agent *a, const char *node_id);
json_t *fabric_report_json(struct agent *a, const char *node_id);
/* This node's last discovery (borrowed; NULL before the first one or after a failure). */
json_t *fabric_discovery(struct agent *a);

/* jobs*.c (issue 6, agent/jobs.h). Hooks: */
int jobs_shim_main(int argc, char **argv);   /* main: `sparkd --rank-shim DIR` */
int jobs_init(struct agent *a);              /* main, after the role started: adopt ranks */
void jobs_stop(struct agent *a);             /* shutdown: exec sessions end, ranks keep running */
void jobs_free(struct agent *a);             /* after the loop has ended */
bool jobs_control(struct agent *a, conn *c, const json_t *req); /* control.c: true if handled */
void jobs_cli_gone(struct agent *a, conn *c);                   /* control.c: CLI closed */
void jobs_env_request(struct agent *a, conn *c, const json_t *req); /* jobs_env.c: job_env */
bool jobs_session_frame(struct agent *a, struct session *s, const json_t *msg); /* head.c */
void jobs_session_closed(struct agent *a, struct session *s);                   /* head.c */
bool jobs_head_frame(struct agent *a, const json_t *msg); /* worker.c, before forwards */
void jobs_head_up(struct agent *a);          /* worker.c: hello answered */
void jobs_head_lost(struct agent *a);        /* worker.c: session to the head closed */
json_t *jobs_node_groups(struct agent *a, const char *node_id); /* head.c: node's groups */

/* topo.c, topo_head.c (issue 5, agent/topo.h, docs/topology.md): L2 neighbour
 * discovery on every node; topology show/validate/addresses served by the head,
 * which asks the nodes with "topo_req" frames ("topo_reply" answers). Hooks: */
int topoval_init(struct agent *a, char *err, size_t errlen); /* main: config, before the loop */
void topoval_fabric_changed(struct agent *a, unsigned changes); /* fabric.c: TOPO_CHG_* bits */
void topoval_on_head_frame(struct agent *a, const json_t *msg); /* worker.c: a topo_req */
void topoval_on_node_frame(struct agent *a, const char *node_id, const json_t *msg); /* head.c */
void topoval_request(struct agent *a, conn *c, const json_t *req, const char *origin); /* head.c */
void topoval_conn_gone(struct agent *a, conn *c); /* control.c, head.c: a connection closed */
json_t *topoval_status_json(struct agent *a); /* head.c status: the last run, or JSON null */
void topoval_stop(struct agent *a);           /* shutdown */
void topoval_free(struct agent *a);           /* after the loop has ended */

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

/* main.c */
void agent_shutdown(struct agent *a);

#endif

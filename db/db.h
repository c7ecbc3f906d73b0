/* db: the head's cluster.db (SQLite). The ONLY module that writes SQL.
 * Opening applies migrations (schema version in PRAGMA user_version), turns on
 * WAL, foreign keys and a busy timeout. Every change runs in one transaction.
 * Functions return 0 or a negative errno; "not found" is -ENOENT.
 * Times are Unix seconds (int64). Strings in structs are fixed-size copies so
 * callers never free anything but the arrays returned by *_list. */
#ifndef SPARK_DB_H
#define SPARK_DB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct db db;

typedef struct db_cluster {
	char id[40];          /* uuid-like, made at init */
	char name[64];
	char ca_hash[65];     /* SHA-256 of the CA SPKI, hex */
	char secret[65];      /* cluster secret (hex) for L2 discovery HMACs */
	char head_id[40];
	int64_t created_at;
} db_cluster;

typedef struct db_node {
	char id[40];          /* node id = certificate CN */
	char name[64];
	char role[16];        /* "head" | "worker" */
	char state[16];       /* "ready" | "unreachable" | "down" | "draining" */
	char address[80];     /* "ADDR:PORT" the node's agent listens on */
	char version[32];
	char cert_serial[41]; /* serial of the node's current certificate */
	int64_t joined_at;
	int64_t last_seen;
	bool drained;         /* set by drain; state shows "draining" while ready */
	int64_t connected_at; /* first session; 0: a join not completed ("joining") */
	char key_hash[65];    /* SHA-256 of the certified public key (joins) */
	/* memory as the node last reported it, bytes (0: never): MemTotal,
	 * MemAvailable, what services may use; mem_at: when (0: never) */
	int64_t mem_total, mem_available, mem_budget, mem_at;
} db_node;

typedef struct db_token {
	char id[17];          /* public token id, 16 hex chars */
	char secret_hash[65]; /* SHA-256 of the secret, hex; the secret is never stored */
	char description[64];
	int64_t created_at;
	int64_t expires_at;   /* 0 = never */
	int64_t uses_left;    /* -1 = unlimited */
	int64_t uses;
	bool revoked;
} db_token;

typedef struct db_event {
	int64_t id, ts;
	char node_id[40];
	char kind[32];
	char detail[256];
} db_event;

int db_open(const char *path, db **out);
void db_close(db *d);
int db_schema_version(db *d);
/* "ok" from PRAGMA integrity_check -> 0, otherwise -EIO. */
int db_integrity_check(db *d);

/* Heap SQLite holds for this connection, in bytes (sqlite3_db_status), and for
 * the whole process (sqlite3_memory_used). For `sparkd` memory diagnostics. */
typedef struct db_mem {
	int64_t cache, schema, stmt, lookaside_slots, total;
} db_mem;
int db_memory(db *d, db_mem *out);
/* Give back heap the connection only caches: prepared statements (prepared
 * again on their next use) and page-cache pages not in use. For quiet moments
 * after a burst of work; never needed for correctness. */
void db_release_memory(db *d);

/* Cluster row (exactly one once initialised). -ENOENT before init. */
int db_cluster_create(db *d, const db_cluster *c, const db_node *head);
int db_cluster_get(db *d, db_cluster *out);

/* Nodes */
int db_node_get(db *d, const char *id, db_node *out);
int db_node_get_by_name(db *d, const char *name, db_node *out);
int db_node_list(db *d, db_node **out, size_t *n); /* ordered: head first, then joined_at, name */
/* Heartbeat/hello: set last_seen, address, version and state "ready". */
int db_node_seen(db *d, const char *id, int64_t ts, const char *address, const char *version);
/* Only last_seen, and only forwards (never below the stored value). */
int db_node_touch(db *d, const char *id, int64_t ts);
int db_node_set_state(db *d, const char *id, const char *state);
/* The memory a node reported (bytes, >= 0) at `at`. -ENOENT for an unknown node. */
int db_node_set_memory(db *d, const char *id, int64_t total, int64_t available, int64_t budget,
		       int64_t at);
/* A state change and its event, in one transaction: when the stored state
 * differs from state, set it and add an event of kind state with detail
 * (NULL: "OLD -> NEW", OLD as db_node_get shows it: "draining", "joining"...).
 * Nothing is written when the node already is in that state. Returns 1 when
 * it changed, 0 when it already was in that state, -ENOENT for an unknown
 * node, -EINVAL for a state that is not ready|unreachable|down|draining. Note
 * that db_node_seen and db_node_connected set "ready" themselves: transition
 * first. */
int db_node_transition(db *d, const char *id, const char *state, const char *detail, int64_t now);
int db_node_set_drained(db *d, const char *id, bool drained);
/* Remove the node and revoke its certificate serial, in one transaction; the
 * groups it was in lose it and their shape (`single` when one member is left,
 * else `unknown`, with a note that names it). */
int db_node_remove(db *d, const char *id, int64_t now);
/* 1 if this serial was revoked, 0 if not. */
int db_cert_revoked(db *d, const char *serial);
/* Every revoked serial (for the CRL); free with db_strv_free. */
int db_revoked_list(db *d, char ***out, size_t *n);
void db_strv_free(char **v, size_t n);
/* A node's session said hello: last_seen, address, version, state ready and,
 * the first time, connected_at (then *first is true: the join is complete). */
int db_node_connected(db *d, const char *id, int64_t now, const char *address,
		      const char *version, bool *first);
/* Joins whose answer may have been lost (issue 14): a worker row made with
 * this token under this name that never connected. The token's secret is
 * checked. 0 and the row, -ENOENT, -EKEYREVOKED. */
int db_join_pending(db *d, const char *token_id, const char *secret_hash, const char *name,
		    db_node *out);
/* Finish such a join again: the row keeps its id and token use, gets the new
 * certificate serial, key hash, address and version; old_serial is revoked. */
int db_join_resume(db *d, const char *token_id, const char *secret_hash, const db_node *node,
		   const char *old_serial, int64_t now);
/* Joins made before cutoff that never connected: removed, their certificates
 * revoked and their token uses given back, in one transaction. *out lists them. */
int db_join_expire(db *d, int64_t cutoff, int64_t now, db_node **out, size_t *n);

/* Tokens */
int db_token_add(db *d, const db_token *t);
int db_token_list(db *d, db_token **out, size_t *n);
int db_token_get(db *d, const char *id, db_token *out);
int db_token_revoke(db *d, const char *id);
/* The join transaction: check the token (exists, hash matches, not revoked, not
 * expired at now, uses left), check the node name is free, consume one use and
 * insert the node, atomically. Errors: -ENOENT unknown token or hash mismatch,
 * -EKEYREVOKED, -EKEYEXPIRED, -EUSERS no uses left, -EEXIST name taken. Nothing
 * is changed on any error. */
int db_join_commit(db *d, const char *token_id, const char *secret_hash, int64_t now,
		   const db_node *node);

/* Fabric reports (issue 4): the last discovery of each node, as JSON text, the
 * head's findings over it, and one row per twin netdev for queries. Rows go
 * with their node (ON DELETE CASCADE). */
typedef struct db_fabric_port {
	char port[16];        /* physical port name ("0", "1"...) */
	int twin;             /* order within the port, 0-based */
	char netdev[16];
	bool present;
	int carrier;          /* 1, 0, -1 unknown */
	char operstate[20];   /* "" unknown */
	int64_t speed_mbps;   /* -1 unknown */
	int64_t mtu;          /* -1 unknown */
	char rdma_device[32]; /* "" none */
	char rdma_state[16];  /* "active", "down"...; "" none */
	int gid_index;        /* RoCE v2 GID index, -1 none */
} db_fabric_port;

typedef struct db_fabric {
	int64_t updated_at;
	int64_t n_findings;
	char *discovery;      /* JSON text (malloc'd; free with db_fabric_free) */
	char *findings;       /* JSON array text (malloc'd) */
} db_fabric;

/* Replace a node's report and its port rows in one transaction. -ENOENT if the
 * node does not exist. */
int db_fabric_set(db *d, const char *node_id, int64_t ts, const char *discovery_json,
		  const char *findings_json, int64_t n_findings, const db_fabric_port *ports,
		  size_t n);
/* The stored report; -ENOENT when the node never reported. */
int db_fabric_get(db *d, const char *node_id, db_fabric *out);
void db_fabric_free(db_fabric *f);
/* A node's port rows, ordered by port then twin (empty when none). */
int db_fabric_ports(db *d, const char *node_id, db_fabric_port **out, size_t *n);
/* How many physical ports of the node have a twin with carrier up; -ENOENT
 * when the node has no port rows (never reported, or reported none). */
int db_fabric_ports_up(db *d, const char *node_id);

/* Events log (newest last). */
int db_event_add(db *d, int64_t ts, const char *node_id, const char *kind, const char *detail);
int db_event_list(db *d, int64_t since_id, size_t limit, db_event **out, size_t *n);
/* The newest limit events of one node (0 = all), oldest first. */
int db_node_events(db *d, const char *node_id, size_t limit, db_event **out, size_t *n);

/* Groups and jobs (issue 6). A group is an ordered set of nodes (rank order).
 * A node is in at most one group unless every group holding it is shared.
 * Jobs and ranks are history: they keep names as text and outlive groups and
 * nodes. exit_code -1 = not known (NULL). */
typedef struct db_group {
	char name[64];
	bool shared;
	char topology[16];    /* cluster topology when made: ring|switch|unknown */
	char shape[16];       /* ring|chain|switch|single|scattered|unknown */
	char note[256];       /* the planner's words (what a chain costs...) */
	char created_by[64];
	int64_t created_at;
	int n_members;
} db_group;

typedef struct db_group_member {
	char node_id[40];
	char node_name[64];
	int seq;              /* 0-based rank order */
} db_group_member;

typedef struct db_membership {
	char group_name[64];
	char node_id[40];
	bool shared;
} db_membership;

/* Insert the group and its members (rank order = array order) in one
 * transaction. -EEXIST: name taken (conflict_node "") or a node twice;
 * -ENOENT: a node id unknown (conflict_node = that id); -EBUSY: a node is
 * already in a group it may not share (conflict_node = its name,
 * conflict_group = that group). Both buffers, if given, hold 64 bytes. */
int db_group_create(db *d, const db_group *g, const char *const *node_ids, size_t n,
		    char *conflict_node, char *conflict_group);
int db_group_get(db *d, const char *name, db_group *out);
int db_group_list(db *d, db_group **out, size_t *n);
int db_group_members(db *d, const char *name, db_group_member **out, size_t *n);
int db_group_remove(db *d, const char *name);
/* Every (group, node) pair, by group then rank order. */
int db_group_memberships(db *d, db_membership **out, size_t *n);
/* Names of the groups holding this node, by name; free with db_strv_free. */
int db_node_groups(db *d, const char *node_id, char ***out, size_t *n);
/* The group's member nodes as node rows, in rank order (empty for an unknown
 * group or one whose nodes were all removed). */
int db_group_nodes(db *d, const char *group, db_node **out, size_t *n);

typedef struct db_job {
	int64_t id;
	char name[64];
	char group_name[64];
	char owner[64];       /* user name; ranks run as this user on every node */
	int64_t uid;          /* the owner's uid on the node that asked */
	char launcher[16];    /* native|torchrun|mpi */
	int ranks_per_node;
	int world_size;
	char command[256];    /* argv joined, for people */
	char state[16];       /* starting|running|succeeded|failed|cancelled */
	char reason[256];
	int exit_code;        /* -1 unknown */
	int64_t timeout_s;    /* 0 none */
	int64_t created_at, started_at, ended_at;
	char managed_by[80];  /* the service that runs it ("serve:NAME"), "" for a user's job */
} db_job;

typedef struct db_job_rank {
	int64_t job_id;
	int rank;
	char node_id[40];
	char node_name[64];
	int local_rank;
	char state[16];       /* pending|running|exited|failed|killed|lost */
	int64_t pid;
	int exit_code;        /* -1 unknown */
	int signal;
	int64_t started_at, ended_at;
} db_job_rank;

/* Insert a job ("starting") and its ranks ("pending") in one transaction;
 * fills j->id. */
int db_job_create(db *d, db_job *j, const char *spec_json, const db_job_rank *ranks, size_t n);
int db_job_get(db *d, int64_t id, db_job *out);
/* The newest job of that name (of owner, when owner is not NULL). */
int db_job_get_by_name(db *d, const char *name, const char *owner, db_job *out);
/* Newest first; owner NULL = everyone's; limit 0 = all. */
int db_job_list(db *d, const char *owner, bool active_only, size_t limit, db_job **out,
		size_t *n);
int db_job_spec(db *d, int64_t id, char **out); /* malloc'd JSON text */
/* state, reason, exit_code, started_at, ended_at of j->id. */
int db_job_set_state(db *d, const db_job *j);
int db_job_ranks(db *d, int64_t id, db_job_rank **out, size_t *n);
/* state, pid, exit_code, signal, started_at, ended_at of (job_id, rank). */
int db_job_rank_update(db *d, const db_job_rank *r);
/* Ids of the group's starting or running jobs. */
int db_group_active_jobs(db *d, const char *group, int64_t **ids, size_t *n);

/* Supervised services (issue 19, docs/serving.md; db_services.c). One row
 * per service, named uniquely; its runs are jobs (run_id: the current or
 * last one, 0 none). plan, caller, need and endpoint are JSON text
 * (malloc'd: db_service_free); need is {"NODE_ID": bytes}. */
typedef struct db_service {
	char name[64];
	char group_name[64];
	char recipe[64];
	char runtime[16];
	char model[256];
	char owner[64];       /* user name of who started it */
	int64_t uid;
	char state[16];       /* starting|ready|unhealthy|restarting|waiting|failed|stopped */
	int64_t run_id;
	int64_t run_started;  /* Unix seconds the current run was launched */
	int restarts, failures;
	bool forced;          /* admitted with --force */
	char last_error[256];
	int64_t created_at, updated_at;
	char *plan, *caller, *need, *endpoint;
} db_service;

/* Insert (state as given); -EEXIST when the name is taken, -EINVAL for a bad
 * state or JSON. */
int db_service_add(db *d, const db_service *s);
int db_service_get(db *d, const char *name, db_service *out);
/* Every service, oldest first; free with db_services_free. */
int db_service_list(db *d, db_service **out, size_t *n);
/* state, run_id, run_started, restarts, failures, last_error, endpoint,
 * updated_at of s->name (endpoint NULL: unchanged). -ENOENT: no such one. */
int db_service_update(db *d, const db_service *s);
int db_service_remove(db *d, const char *name);
/* How many services are on group (NULL: any) with a rank on node_id (NULL:
 * any), whatever their state; list gets "NAME (STATE), ..." (cut at len). */
int db_services_using(db *d, const char *group, const char *node_id, char *list, size_t len);
void db_service_free(db_service *s);
void db_services_free(db_service *v, size_t n);

/* Topology validation runs (issue 5, docs/topology.md). A run is the whole
 * verdict (JSON text) plus its cables and probe results as rows. History:
 * names are text and outlive nodes. Adding a run keeps only the newest
 * DB_TOPO_KEEP_RUNS. Optional numbers are negative when unknown (NULL). */
#define DB_TOPO_KEEP_RUNS 50

typedef struct db_topo_run {
	int64_t id;
	int64_t started_at, finished_at; /* Unix seconds */
	int64_t duration_ms;
	char expect[16];      /* "" or pair|ring|switch */
	bool quick;
	char cls[16];         /* pair|ring|switch|unknown */
	char result[8];       /* pass|warn|fail */
	int n_nodes;
	int n_findings;
	char *verdict;        /* JSON text (malloc'd; db_topo_run_free) */
} db_topo_run;

typedef struct db_topo_cable {
	char kind[16];        /* direct|self|switch */
	char a_node[64], a_port[16];
	char b_node[64], b_port[16]; /* switch cables: b_node = the L2 domain ("l2-1"), b_port "" */
	int twins_ok;
	bool mtu_ok, same_port;
} db_topo_cable;

typedef struct db_topo_probe {
	char a_node[64], a_netdev[16]; /* the client end */
	char b_node[64], b_netdev[16]; /* the server end */
	int twin;
	char transport[8];    /* tcp|rdma */
	char result[8];       /* pass|warn|fail */
	double p50_us, p99_us, gbps; /* < 0 unknown */
	int64_t mtu_largest;  /* < 0 unknown */
	const char *detail;   /* add: JSON text of the result (NULL = {}); list: NULL */
} db_topo_probe;

/* Insert a run with its cables and probes in one transaction, fill r->id,
 * then drop runs older than the newest DB_TOPO_KEEP_RUNS. r->verdict must be
 * JSON text. -EINVAL for a bad class/result or missing verdict. */
int db_topo_run_add(db *d, db_topo_run *r, const db_topo_cable *cables, size_t ncables,
		    const db_topo_probe *probes, size_t nprobes);
/* The newest run (verdict included); -ENOENT when there is none. */
int db_topo_run_latest(db *d, db_topo_run *out);
void db_topo_run_free(db_topo_run *r);
/* A run's cables / probes, in the order they were added (empty when none). */
int db_topo_cables(db *d, int64_t run_id, db_topo_cable **out, size_t *n);
int db_topo_probes(db *d, int64_t run_id, db_topo_probe **out, size_t *n);

#endif

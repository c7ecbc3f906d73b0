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

/* Cluster row (exactly one once initialised). -ENOENT before init. */
int db_cluster_create(db *d, const db_cluster *c, const db_node *head);
int db_cluster_get(db *d, db_cluster *out);

/* Nodes */
int db_node_get(db *d, const char *id, db_node *out);
int db_node_get_by_name(db *d, const char *name, db_node *out);
int db_node_list(db *d, db_node **out, size_t *n); /* ordered: head first, then joined_at, name */
/* Heartbeat/hello: set last_seen, address, version and state "ready". */
int db_node_seen(db *d, const char *id, int64_t ts, const char *address, const char *version);
int db_node_set_state(db *d, const char *id, const char *state);
int db_node_set_drained(db *d, const char *id, bool drained);
/* Remove the node and revoke its certificate serial, in one transaction. */
int db_node_remove(db *d, const char *id, int64_t now);
/* 1 if this serial was revoked, 0 if not. */
int db_cert_revoked(db *d, const char *serial);

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

/* Events log (newest last). */
int db_event_add(db *d, int64_t ts, const char *node_id, const char *kind, const char *detail);
int db_event_list(db *d, int64_t since_id, size_t limit, db_event **out, size_t *n);

#endif

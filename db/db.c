/* db: the head's cluster.db. See db.h for the contract.
 *
 * All SQL of the project lives in this file. Values are always bound to
 * prepared statements (cached per connection); the only statement text built
 * at run time is "PRAGMA user_version = N" with N a compile-time migration
 * number, because PRAGMA cannot take a bound parameter.
 *
 * The connection is single-threaded (SQLITE_OPEN_NOMUTEX): only the agent's
 * event loop thread may use a db handle. */
#include "db.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "log.h"
#include "util.h"

/* ---------- schema ---------- */

/* Migration N (1-based) brings the schema from user_version N-1 to N.
 * Append only; never edit a released migration. */
static const char *const migrations[] = {
	/* 1: the cluster, its nodes, join tokens, revoked certificates, events.
	 * events.node_id and revoked_certs.node_id have no foreign key on purpose:
	 * they are history and must outlive the node row (a removed node's events
	 * stay readable, a refused join can log a node id never recorded). */
	"CREATE TABLE cluster ("
	"  singleton  INTEGER PRIMARY KEY NOT NULL DEFAULT 1 CHECK (singleton = 1),"
	"  id         TEXT NOT NULL UNIQUE CHECK (length(id) > 0),"
	"  name       TEXT NOT NULL CHECK (length(name) > 0),"
	"  ca_hash    TEXT NOT NULL,"
	"  secret     TEXT NOT NULL,"
	"  head_id    TEXT NOT NULL,"
	"  created_at INTEGER NOT NULL"
	") STRICT;"
	"CREATE TABLE tokens ("
	"  id          TEXT PRIMARY KEY NOT NULL CHECK (length(id) BETWEEN 1 AND 16),"
	"  secret_hash TEXT NOT NULL CHECK (length(secret_hash) = 64),"
	"  description TEXT NOT NULL DEFAULT '',"
	"  created_at  INTEGER NOT NULL,"
	"  expires_at  INTEGER NOT NULL DEFAULT 0 CHECK (expires_at >= 0),"
	"  uses_left   INTEGER NOT NULL DEFAULT -1 CHECK (uses_left >= -1),"
	"  uses        INTEGER NOT NULL DEFAULT 0 CHECK (uses >= 0),"
	"  revoked     INTEGER NOT NULL DEFAULT 0 CHECK (revoked IN (0, 1))"
	") STRICT;"
	"CREATE TABLE nodes ("
	"  id          TEXT PRIMARY KEY NOT NULL CHECK (length(id) > 0),"
	"  name        TEXT NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 63),"
	"  role        TEXT NOT NULL CHECK (role IN ('head', 'worker')),"
	"  state       TEXT NOT NULL DEFAULT 'ready'"
	"              CHECK (state IN ('ready', 'unreachable', 'down', 'draining')),"
	"  address     TEXT NOT NULL DEFAULT '',"
	"  version     TEXT NOT NULL DEFAULT '',"
	"  cert_serial TEXT NOT NULL DEFAULT '',"
	"  joined_at   INTEGER NOT NULL,"
	"  last_seen   INTEGER NOT NULL DEFAULT 0,"
	"  drained     INTEGER NOT NULL DEFAULT 0 CHECK (drained IN (0, 1)),"
	"  token_id    TEXT REFERENCES tokens(id) ON DELETE SET NULL"
	") STRICT;"
	"CREATE UNIQUE INDEX nodes_one_head ON nodes(role) WHERE role = 'head';"
	"CREATE UNIQUE INDEX nodes_serial ON nodes(cert_serial) WHERE cert_serial <> '';"
	"CREATE INDEX nodes_token ON nodes(token_id);"
	"CREATE TABLE revoked_certs ("
	"  serial     TEXT PRIMARY KEY NOT NULL CHECK (length(serial) > 0),"
	"  node_id    TEXT NOT NULL DEFAULT '',"
	"  revoked_at INTEGER NOT NULL"
	") STRICT;"
	"CREATE TABLE events ("
	"  id      INTEGER PRIMARY KEY AUTOINCREMENT,"
	"  ts      INTEGER NOT NULL,"
	"  node_id TEXT NOT NULL DEFAULT '',"
	"  kind    TEXT NOT NULL CHECK (length(kind) > 0),"
	"  detail  TEXT NOT NULL DEFAULT ''"
	") STRICT;",
	/* 2: fabric reports (issue 4). node_fabric keeps each node's last discovery
	 * and the head's findings over it as JSON text; fabric_ports has one row per
	 * twin netdev (seq = order in the report) for queries and change events.
	 * NULL is "unknown". Both go with their node. */
	"CREATE TABLE node_fabric ("
	"  node_id    TEXT PRIMARY KEY NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,"
	"  updated_at INTEGER NOT NULL,"
	"  discovery  TEXT NOT NULL CHECK (json_valid(discovery)),"
	"  findings   TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(findings)),"
	"  n_findings INTEGER NOT NULL DEFAULT 0 CHECK (n_findings >= 0)"
	") STRICT;"
	"CREATE TABLE fabric_ports ("
	"  node_id     TEXT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,"
	"  netdev      TEXT NOT NULL CHECK (length(netdev) BETWEEN 1 AND 15),"
	"  seq         INTEGER NOT NULL CHECK (seq >= 0),"
	"  port        TEXT NOT NULL,"
	"  twin        INTEGER NOT NULL CHECK (twin >= 0),"
	"  present     INTEGER NOT NULL CHECK (present IN (0, 1)),"
	"  carrier     INTEGER CHECK (carrier IN (0, 1)),"
	"  operstate   TEXT NOT NULL DEFAULT '',"
	"  speed_mbps  INTEGER,"
	"  mtu         INTEGER,"
	"  rdma_device TEXT NOT NULL DEFAULT '',"
	"  rdma_state  TEXT NOT NULL DEFAULT '',"
	"  gid_index   INTEGER,"
	"  PRIMARY KEY (node_id, netdev)"
	") STRICT;",
};
#define DB_SCHEMA_VERSION ((int)ARRAY_SIZE(migrations))

/* ---------- statements ---------- */

#define NODE_COLS "id, name, role, state, address, version, cert_serial, joined_at, last_seen, drained"
#define FPORT_COLS \
	"port, twin, netdev, present, carrier, operstate, speed_mbps, mtu, rdma_device, " \
	"rdma_state, gid_index"
#define TOKEN_COLS "id, secret_hash, description, created_at, expires_at, uses_left, uses, revoked"
enum q {
	Q_BEGIN, Q_COMMIT, Q_ROLLBACK,
	Q_CLUSTER_INSERT, Q_CLUSTER_GET,
	Q_NODE_INSERT, Q_NODE_GET, Q_NODE_GET_NAME, Q_NODE_LIST, Q_NODE_SEEN,
	Q_NODE_STATE, Q_NODE_DRAINED, Q_NODE_DELETE, Q_NODE_NAME_USED,
	Q_CERT_REVOKE, Q_CERT_REVOKED,
	Q_TOKEN_INSERT, Q_TOKEN_LIST, Q_TOKEN_GET, Q_TOKEN_REVOKE, Q_TOKEN_USE,
	Q_EVENT_ADD, Q_EVENT_LIST,
	Q_FABRIC_SET, Q_FABRIC_GET, Q_FPORT_CLEAR, Q_FPORT_INSERT, Q_FPORT_LIST,
	Q_COUNT
};

static const char *const sql_text[Q_COUNT] = {
	[Q_BEGIN] = "BEGIN IMMEDIATE",
	[Q_COMMIT] = "COMMIT",
	[Q_ROLLBACK] = "ROLLBACK",
	[Q_CLUSTER_INSERT] =
		"INSERT INTO cluster (singleton, id, name, ca_hash, secret, head_id, created_at) "
		"VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6)",
	[Q_CLUSTER_GET] =
		"SELECT id, name, ca_hash, secret, head_id, created_at FROM cluster WHERE singleton = 1",
	[Q_NODE_INSERT] =
		"INSERT INTO nodes (" NODE_COLS ", token_id) "
		"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
	[Q_NODE_GET] = "SELECT " NODE_COLS " FROM nodes WHERE id = ?1",
	[Q_NODE_GET_NAME] = "SELECT " NODE_COLS " FROM nodes WHERE name = ?1",
	[Q_NODE_LIST] =
		"SELECT " NODE_COLS " FROM nodes "
		"ORDER BY role = 'head' DESC, joined_at ASC, name ASC",
	[Q_NODE_SEEN] =
		"UPDATE nodes SET last_seen = ?2, address = coalesce(?3, address), "
		"version = coalesce(?4, version), state = 'ready' WHERE id = ?1",
	[Q_NODE_STATE] = "UPDATE nodes SET state = ?2 WHERE id = ?1",
	[Q_NODE_DRAINED] = "UPDATE nodes SET drained = ?2 WHERE id = ?1",
	[Q_NODE_DELETE] = "DELETE FROM nodes WHERE id = ?1",
	[Q_NODE_NAME_USED] = "SELECT 1 FROM nodes WHERE name = ?1",
	[Q_CERT_REVOKE] =
		"INSERT INTO revoked_certs (serial, node_id, revoked_at) VALUES (?1, ?2, ?3) "
		"ON CONFLICT (serial) DO NOTHING",
	[Q_CERT_REVOKED] = "SELECT 1 FROM revoked_certs WHERE serial = ?1",
	[Q_TOKEN_INSERT] =
		"INSERT INTO tokens (" TOKEN_COLS ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
	[Q_TOKEN_LIST] = "SELECT " TOKEN_COLS " FROM tokens ORDER BY created_at ASC, id ASC",
	[Q_TOKEN_GET] = "SELECT " TOKEN_COLS " FROM tokens WHERE id = ?1",
	[Q_TOKEN_REVOKE] = "UPDATE tokens SET revoked = 1 WHERE id = ?1",
	[Q_TOKEN_USE] =
		"UPDATE tokens SET uses = uses + 1, "
		"uses_left = CASE WHEN uses_left > 0 THEN uses_left - 1 ELSE uses_left END "
		"WHERE id = ?1 AND revoked = 0 AND uses_left <> 0",
	[Q_EVENT_ADD] = "INSERT INTO events (ts, node_id, kind, detail) VALUES (?1, ?2, ?3, ?4)",
	[Q_EVENT_LIST] =
		"SELECT id, ts, node_id, kind, detail FROM events WHERE id > ?1 "
		"ORDER BY id ASC LIMIT ?2",
	[Q_FABRIC_SET] =
		"INSERT INTO node_fabric (node_id, updated_at, discovery, findings, n_findings) "
		"VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (node_id) DO UPDATE SET "
		"updated_at = excluded.updated_at, discovery = excluded.discovery, "
		"findings = excluded.findings, n_findings = excluded.n_findings",
	[Q_FABRIC_GET] =
		"SELECT updated_at, n_findings, discovery, findings FROM node_fabric WHERE node_id = ?1",
	[Q_FPORT_CLEAR] = "DELETE FROM fabric_ports WHERE node_id = ?1",
	[Q_FPORT_INSERT] =
		"INSERT INTO fabric_ports (" FPORT_COLS ", node_id, seq) "
		"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
	[Q_FPORT_LIST] =
		"SELECT " FPORT_COLS " FROM fabric_ports WHERE node_id = ?1 ORDER BY seq ASC",
};

struct db {
	sqlite3 *h;
	sqlite3_stmt *st[Q_COUNT];
};

/* ---------- helpers ---------- */

/* SQLite result code -> negative errno. */
static int err_of(db *d, int rc)
{
	switch (rc & 0xff) {
	case SQLITE_OK:
	case SQLITE_ROW:
	case SQLITE_DONE:
		return 0;
	case SQLITE_CONSTRAINT:
		if (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY)
			return -EEXIST;
		return -EINVAL;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return -EBUSY;
	case SQLITE_NOMEM:
		return -ENOMEM;
	case SQLITE_READONLY:
		return -EROFS;
	case SQLITE_FULL:
		return -ENOSPC;
	case SQLITE_TOOBIG:
		return -E2BIG;
	case SQLITE_MISUSE:
	case SQLITE_RANGE:
		return -EINVAL;
	case SQLITE_CANTOPEN:
	case SQLITE_IOERR:
	case SQLITE_PERM:
	case SQLITE_AUTH: {
		int e = d && d->h ? sqlite3_system_errno(d->h) : 0;
		return e > 0 ? -e : (rc & 0xff) == SQLITE_CANTOPEN ? -ENOENT : -EIO;
	}
	default: /* CORRUPT, NOTADB, SCHEMA, ERROR ... */
		return -EIO;
	}
}

/* Log an unexpected SQLite failure and map it. Constraint failures are the
 * caller's business (EEXIST/EINVAL) and are logged at debug only. */
static int fail(db *d, int rc, const char *op)
{
	int e = err_of(d, rc);
	const char *m = d && d->h ? sqlite3_errmsg(d->h) : sqlite3_errstr(rc);
	if ((rc & 0xff) == SQLITE_CONSTRAINT)
		log_debug("db_constraint", "op=%s rc=%d err=%s", op, rc, log_q(m));
	else
		log_error("db_error", "op=%s rc=%d err=%s", op, rc, log_q(m));
	return e;
}

/* The cached statement for q, reset and with no bindings. NULL on failure
 * (with *err set). */
static sqlite3_stmt *stmt(db *d, enum q q, int *err)
{
	sqlite3_stmt *s = d->st[q];
	if (!s) {
		int rc = sqlite3_prepare_v3(d->h, sql_text[q], -1, SQLITE_PREPARE_PERSISTENT, &s, NULL);
		if (rc != SQLITE_OK) {
			*err = fail(d, rc, "prepare");
			return NULL;
		}
		d->st[q] = s;
	}
	return s;
}

static void done(sqlite3_stmt *s)
{
	if (s) {
		sqlite3_reset(s);
		sqlite3_clear_bindings(s);
	}
}

/* Bindings are SQLITE_STATIC: every statement is stepped and reset (which
 * clears its bindings) before the function that bound it returns, so the
 * strings outlive their use and binding cannot fail for lack of memory. */

/* Bind a fixed-size struct field: never reads past its end, even if a caller
 * left it unterminated. */
static int bind_field(sqlite3_stmt *s, int i, const char *f, size_t cap)
{
	return sqlite3_bind_text(s, i, f, (int)strnlen(f, cap), SQLITE_STATIC);
}
#define BIND_F(s, i, field) bind_field((s), (i), (field), sizeof(field))

/* Bind a C string; NULL binds SQL NULL. */
static int bind_str(sqlite3_stmt *s, int i, const char *v)
{
	if (!v)
		return sqlite3_bind_null(s, i);
	return sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC);
}

static void col_str(sqlite3_stmt *s, int i, char *dst, size_t cap)
{
	const unsigned char *v = sqlite3_column_text(s, i);
	util_strlcpy(dst, v ? (const char *)v : "", cap);
}
#define COL_F(s, i, field) col_str((s), (i), (field), sizeof(field))

/* Run a statement that returns no rows (or whose rows are ignored). */
static int exec_stmt(db *d, sqlite3_stmt *s, const char *op)
{
	int rc;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW)
		;
	int e = rc == SQLITE_DONE ? 0 : fail(d, rc, op);
	done(s);
	return e;
}

static int run(db *d, enum q q, const char *op)
{
	int e = 0;
	sqlite3_stmt *s = stmt(d, q, &e);
	return s ? exec_stmt(d, s, op) : e;
}

static int tx_begin(db *d) { return run(d, Q_BEGIN, "begin"); }

static void tx_rollback(db *d)
{
	/* Some errors (e.g. SQLITE_FULL, IOERR) roll back by themselves. */
	if (!sqlite3_get_autocommit(d->h))
		run(d, Q_ROLLBACK, "rollback");
}

/* Commit if e == 0, roll back otherwise; returns the final code. */
static int tx_end(db *d, int e)
{
	if (e == 0) {
		e = run(d, Q_COMMIT, "commit");
		if (e == 0)
			return 0;
	}
	tx_rollback(d);
	return e;
}

static bool is_empty(const char *s) { return !s || !*s; }

static bool state_valid(const char *s)
{
	static const char *const states[] = {"ready", "unreachable", "down", "draining"};
	for (size_t i = 0; s && i < ARRAY_SIZE(states); i++)
		if (strcmp(s, states[i]) == 0)
			return true;
	return false;
}

/* Compare two hex digests without an early exit on the first difference. */
static bool digest_eq(const char *a, const char *b, size_t cap)
{
	size_t la = strnlen(a, cap), lb = strnlen(b, cap);
	unsigned char diff = (unsigned char)(la != lb);
	size_t n = la < lb ? la : lb;
	for (size_t i = 0; i < n; i++)
		diff |= (unsigned char)(a[i] ^ b[i]);
	return diff == 0 && la > 0;
}

/* ---------- open, migrations ---------- */

static int pragma_int(db *d, const char *sql, int *out)
{
	sqlite3_stmt *s = NULL;
	int e = 0;
	int rc = sqlite3_prepare_v2(d->h, sql, -1, &s, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		*out = sqlite3_column_int(s, 0);
	else
		e = rc == SQLITE_DONE ? -EIO : fail(d, rc, sql);
	sqlite3_finalize(s);
	return e;
}

static int exec_sql(db *d, const char *sql, const char *op)
{
	char *msg = NULL;
	int rc = sqlite3_exec(d->h, sql, NULL, NULL, &msg);
	if (rc != SQLITE_OK) {
		log_error("db_error", "op=%s rc=%d err=%s", op, rc, log_q(msg ? msg : sqlite3_errstr(rc)));
		sqlite3_free(msg);
		return err_of(d, rc);
	}
	return 0;
}

static int set_journal_wal(db *d)
{
	sqlite3_stmt *s = NULL;
	int rc = sqlite3_prepare_v2(d->h, "PRAGMA journal_mode = WAL", -1, &s, NULL);
	int e = 0;
	if (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		const char *m = (const char *)sqlite3_column_text(s, 0);
		/* An in-memory database reports "memory"; anything else must be WAL. */
		if (!m || (strcmp(m, "wal") != 0 && strcmp(m, "memory") != 0)) {
			log_error("db_error", "op=journal_mode mode=%s", log_q(m ? m : ""));
			e = -EIO;
		}
	} else {
		e = fail(d, rc, "journal_mode");
	}
	sqlite3_finalize(s);
	return e;
}

static int migrate(db *d)
{
	int cur = 0, e;
	if ((e = pragma_int(d, "PRAGMA user_version", &cur)) < 0)
		return e;
	if (cur > DB_SCHEMA_VERSION) {
		log_error("db_too_new", "version=%d known=%d", cur, DB_SCHEMA_VERSION);
		return -EPROTO;
	}
	while (cur < DB_SCHEMA_VERSION) {
		if ((e = tx_begin(d)) < 0)
			return e;
		/* Re-read under the write lock: another process may have migrated. */
		if ((e = pragma_int(d, "PRAGMA user_version", &cur)) < 0)
			return tx_end(d, e);
		if (cur > DB_SCHEMA_VERSION)
			return tx_end(d, -EPROTO);
		if (cur == DB_SCHEMA_VERSION) {
			tx_rollback(d);
			return 0;
		}
		char bump[48];
		snprintf(bump, sizeof bump, "PRAGMA user_version = %d", cur + 1);
		e = exec_sql(d, migrations[cur], "migrate");
		if (e == 0)
			e = exec_sql(d, bump, "migrate_version");
		if ((e = tx_end(d, e)) < 0) {
			log_error("db_migrate_failed", "to=%d errno=%d", cur + 1, -e);
			return e;
		}
		cur++;
		log_info("db_migrated", "version=%d", cur);
	}
	return 0;
}

int db_open(const char *path, db **out)
{
	if (!path || !out)
		return -EINVAL;
	*out = NULL;
	db *d = calloc(1, sizeof *d);
	if (!d)
		return -ENOMEM;
	int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
	int rc = sqlite3_open_v2(path, &d->h, flags, NULL);
	int e = 0;
	if (rc != SQLITE_OK) {
		e = fail(d, rc, "open");
		goto err;
	}
	sqlite3_extended_result_codes(d->h, 1);
	sqlite3_busy_timeout(d->h, 5000);
	if (sqlite3_db_readonly(d->h, "main") == 1) {
		log_error("db_error", "op=open path=%s err=%s", log_q(path), log_q("read-only"));
		e = -EROFS;
		goto err;
	}
	if ((e = set_journal_wal(d)) < 0 ||
	    (e = exec_sql(d, "PRAGMA synchronous = NORMAL", "synchronous")) < 0 ||
	    (e = exec_sql(d, "PRAGMA foreign_keys = ON", "foreign_keys")) < 0)
		goto err;
	int fk = 0;
	if ((e = pragma_int(d, "PRAGMA foreign_keys", &fk)) < 0)
		goto err;
	if (fk != 1) {
		log_error("db_error", "op=foreign_keys err=%s", log_q("not supported by this SQLite"));
		e = -ENOTSUP;
		goto err;
	}
	if ((e = migrate(d)) < 0)
		goto err;
	*out = d;
	return 0;
err:
	db_close(d);
	return e;
}

void db_close(db *d)
{
	if (!d)
		return;
	for (int i = 0; i < Q_COUNT; i++)
		sqlite3_finalize(d->st[i]);
	if (d->h && sqlite3_close(d->h) != SQLITE_OK)
		log_error("db_error", "op=close err=%s", log_q(sqlite3_errmsg(d->h)));
	free(d);
}

int db_schema_version(db *d)
{
	int v = 0;
	if (!d)
		return -EINVAL;
	int e = pragma_int(d, "PRAGMA user_version", &v);
	return e < 0 ? e : v;
}

int db_integrity_check(db *d)
{
	if (!d)
		return -EINVAL;
	sqlite3_stmt *s = NULL;
	int rc = sqlite3_prepare_v2(d->h, "PRAGMA integrity_check", -1, &s, NULL);
	int e = 0;
	if (rc != SQLITE_OK) {
		e = fail(d, rc, "integrity_check");
	} else {
		rc = sqlite3_step(s);
		const char *r = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(s, 0) : NULL;
		if (!r || strcmp(r, "ok") != 0) {
			log_error("db_integrity", "result=%s", log_q(r ? r : sqlite3_errmsg(d->h)));
			e = -EIO;
		}
	}
	sqlite3_finalize(s);
	/* A foreign key violation is corruption of our invariants too. */
	if (e == 0) {
		rc = sqlite3_prepare_v2(d->h, "PRAGMA foreign_key_check", -1, &s, NULL);
		if (rc != SQLITE_OK)
			e = fail(d, rc, "foreign_key_check");
		else if ((rc = sqlite3_step(s)) != SQLITE_DONE)
			e = rc == SQLITE_ROW ? -EIO : fail(d, rc, "foreign_key_check");
		sqlite3_finalize(s);
	}
	return e;
}

/* ---------- cluster ---------- */

static int node_insert(db *d, const db_node *n, const char *def_role, const char *token_id)
{
	int e = 0;
	sqlite3_stmt *s = stmt(d, Q_NODE_INSERT, &e);
	if (!s)
		return e;
	BIND_F(s, 1, n->id);
	BIND_F(s, 2, n->name);
	if (n->role[0])
		BIND_F(s, 3, n->role);
	else
		bind_str(s, 3, def_role);
	if (n->state[0])
		BIND_F(s, 4, n->state);
	else
		bind_str(s, 4, "ready");
	BIND_F(s, 5, n->address);
	BIND_F(s, 6, n->version);
	BIND_F(s, 7, n->cert_serial);
	sqlite3_bind_int64(s, 8, n->joined_at);
	sqlite3_bind_int64(s, 9, n->last_seen);
	sqlite3_bind_int(s, 10, n->drained ? 1 : 0);
	bind_str(s, 11, token_id);
	return exec_stmt(d, s, "node_insert");
}

int db_cluster_create(db *d, const db_cluster *c, const db_node *head)
{
	if (!d || !c || !head || is_empty(c->id) || is_empty(head->id) || is_empty(head->name))
		return -EINVAL;
	if (head->role[0] && strncmp(head->role, "head", sizeof head->role) != 0)
		return -EINVAL;
	int e = tx_begin(d);
	if (e < 0)
		return e;
	sqlite3_stmt *s = stmt(d, Q_CLUSTER_INSERT, &e);
	if (s) {
		BIND_F(s, 1, c->id);
		BIND_F(s, 2, c->name);
		BIND_F(s, 3, c->ca_hash);
		BIND_F(s, 4, c->secret);
		if (c->head_id[0])
			BIND_F(s, 5, c->head_id);
		else
			BIND_F(s, 5, head->id);
		sqlite3_bind_int64(s, 6, c->created_at);
		e = exec_stmt(d, s, "cluster_insert");
	}
	if (e == 0)
		e = node_insert(d, head, "head", NULL);
	return tx_end(d, e);
}

int db_cluster_get(db *d, db_cluster *out)
{
	if (!d || !out)
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = stmt(d, Q_CLUSTER_GET, &e);
	if (!s)
		return e;
	int rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		memset(out, 0, sizeof *out);
		COL_F(s, 0, out->id);
		COL_F(s, 1, out->name);
		COL_F(s, 2, out->ca_hash);
		COL_F(s, 3, out->secret);
		COL_F(s, 4, out->head_id);
		out->created_at = sqlite3_column_int64(s, 5);
	} else {
		e = rc == SQLITE_DONE ? -ENOENT : fail(d, rc, "cluster_get");
	}
	done(s);
	return e;
}

/* ---------- nodes ---------- */

static void node_row(sqlite3_stmt *s, db_node *n)
{
	memset(n, 0, sizeof *n);
	COL_F(s, 0, n->id);
	COL_F(s, 1, n->name);
	COL_F(s, 2, n->role);
	COL_F(s, 3, n->state);
	COL_F(s, 4, n->address);
	COL_F(s, 5, n->version);
	COL_F(s, 6, n->cert_serial);
	n->joined_at = sqlite3_column_int64(s, 7);
	n->last_seen = sqlite3_column_int64(s, 8);
	n->drained = sqlite3_column_int(s, 9) != 0;
	/* A drained node that is otherwise ready shows "draining". */
	if (n->drained && strcmp(n->state, "ready") == 0)
		util_strlcpy(n->state, "draining", sizeof n->state);
}

static int node_get(db *d, enum q q, const char *key, db_node *out)
{
	if (!d || !key || !out)
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = stmt(d, q, &e);
	if (!s)
		return e;
	bind_str(s, 1, key);
	int rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		node_row(s, out);
	else
		e = rc == SQLITE_DONE ? -ENOENT : fail(d, rc, "node_get");
	done(s);
	return e;
}

int db_node_get(db *d, const char *id, db_node *out)
{
	return node_get(d, Q_NODE_GET, id, out);
}

int db_node_get_by_name(db *d, const char *name, db_node *out)
{
	return node_get(d, Q_NODE_GET_NAME, name, out);
}

/* Growable array for *_list results. */
static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
	if (n < *cap)
		return 0;
	size_t nc = *cap ? *cap * 2 : 8;
	if (nc > SIZE_MAX / elem)
		return -ENOMEM;
	void *p = realloc(*arr, nc * elem);
	if (!p)
		return -ENOMEM;
	*arr = p;
	*cap = nc;
	return 0;
}

int db_node_list(db *d, db_node **out, size_t *n)
{
	if (!d || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0, rc;
	sqlite3_stmt *s = stmt(d, Q_NODE_LIST, &e);
	if (!s)
		return e;
	db_node *arr = NULL;
	size_t cnt = 0, cap = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if ((e = grow((void **)&arr, &cap, cnt, sizeof *arr)) < 0)
			break;
		node_row(s, &arr[cnt++]);
	}
	if (e == 0 && rc != SQLITE_DONE)
		e = fail(d, rc, "node_list");
	done(s);
	if (e < 0) {
		free(arr);
		return e;
	}
	*out = arr;
	*n = cnt;
	return 0;
}

/* One UPDATE/DELETE in its own transaction; -ENOENT if it touched no row. */
static int update_one(db *d, sqlite3_stmt *s, const char *op)
{
	int e = tx_begin(d);
	if (e < 0) {
		done(s);
		return e;
	}
	e = exec_stmt(d, s, op);
	if (e == 0 && sqlite3_changes(d->h) == 0)
		e = -ENOENT;
	return tx_end(d, e);
}

int db_node_seen(db *d, const char *id, int64_t ts, const char *address, const char *version)
{
	if (!d || !id)
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = stmt(d, Q_NODE_SEEN, &e);
	if (!s)
		return e;
	bind_str(s, 1, id);
	sqlite3_bind_int64(s, 2, ts);
	bind_str(s, 3, address); /* NULL keeps the stored value */
	bind_str(s, 4, version);
	return update_one(d, s, "node_seen");
}

int db_node_set_state(db *d, const char *id, const char *state)
{
	if (!d || !id || !state_valid(state))
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = stmt(d, Q_NODE_STATE, &e);
	if (!s)
		return e;
	bind_str(s, 1, id);
	bind_str(s, 2, state);
	return update_one(d, s, "node_set_state");
}

int db_node_set_drained(db *d, const char *id, bool drained)
{
	if (!d || !id)
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = stmt(d, Q_NODE_DRAINED, &e);
	if (!s)
		return e;
	bind_str(s, 1, id);
	sqlite3_bind_int(s, 2, drained ? 1 : 0);
	return update_one(d, s, "node_set_drained");
}

int db_node_remove(db *d, const char *id, int64_t now)
{
	if (!d || !id)
		return -EINVAL;
	int e = tx_begin(d);
	if (e < 0)
		return e;
	db_node n;
	e = node_get(d, Q_NODE_GET, id, &n);
	/* The head cannot be removed: the cluster would be left without one. */
	if (e == 0 && strcmp(n.role, "head") == 0)
		e = -EPERM;
	sqlite3_stmt *s = NULL;
	if (e == 0 && (s = stmt(d, Q_NODE_DELETE, &e))) {
		bind_str(s, 1, id);
		e = exec_stmt(d, s, "node_delete");
	}
	if (e == 0 && n.cert_serial[0] && (s = stmt(d, Q_CERT_REVOKE, &e))) {
		BIND_F(s, 1, n.cert_serial);
		bind_str(s, 2, id);
		sqlite3_bind_int64(s, 3, now);
		e = exec_stmt(d, s, "cert_revoke");
	}
	return tx_end(d, e);
}

int db_cert_revoked(db *d, const char *serial)
{
	if (!d || !serial)
		return -EINVAL;
	if (!*serial)
		return 0;
	int e = 0;
	sqlite3_stmt *s = stmt(d, Q_CERT_REVOKED, &e);
	if (!s)
		return e;
	bind_str(s, 1, serial);
	int rc = sqlite3_step(s);
	e = rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : fail(d, rc, "cert_revoked");
	done(s);
	return e;
}

/* ---------- tokens ---------- */

static void token_row(sqlite3_stmt *s, db_token *t)
{
	memset(t, 0, sizeof *t);
	COL_F(s, 0, t->id);
	COL_F(s, 1, t->secret_hash);
	COL_F(s, 2, t->description);
	t->created_at = sqlite3_column_int64(s, 3);
	t->expires_at = sqlite3_column_int64(s, 4);
	t->uses_left = sqlite3_column_int64(s, 5);
	t->uses = sqlite3_column_int64(s, 6);
	t->revoked = sqlite3_column_int(s, 7) != 0;
}

int db_token_add(db *d, const db_token *t)
{
	if (!d || !t || !t->id[0])
		return -EINVAL;
	int e = tx_begin(d);
	if (e < 0)
		return e;
	sqlite3_stmt *s = stmt(d, Q_TOKEN_INSERT, &e);
	if (s) {
		BIND_F(s, 1, t->id);
		BIND_F(s, 2, t->secret_hash);
		BIND_F(s, 3, t->description);
		sqlite3_bind_int64(s, 4, t->created_at);
		sqlite3_bind_int64(s, 5, t->expires_at);
		sqlite3_bind_int64(s, 6, t->uses_left);
		sqlite3_bind_int64(s, 7, t->uses);
		sqlite3_bind_int(s, 8, t->revoked ? 1 : 0);
		e = exec_stmt(d, s, "token_add");
	}
	return tx_end(d, e);
}

int db_token_list(db *d, db_token **out, size_t *n)
{
	if (!d || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0, rc;
	sqlite3_stmt *s = stmt(d, Q_TOKEN_LIST, &e);
	if (!s)
		return e;
	db_token *arr = NULL;
	size_t cnt = 0, cap = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if ((e = grow((void **)&arr, &cap, cnt, sizeof *arr)) < 0)
			break;
		token_row(s, &arr[cnt++]);
	}
	if (e == 0 && rc != SQLITE_DONE)
		e = fail(d, rc, "token_list");
	done(s);
	if (e < 0) {
		free(arr);
		return e;
	}
	*out = arr;
	*n = cnt;
	return 0;
}

int db_token_get(db *d, const char *id, db_token *out)
{
	if (!d || !id || !out)
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = stmt(d, Q_TOKEN_GET, &e);
	if (!s)
		return e;
	bind_str(s, 1, id);
	int rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		token_row(s, out);
	else
		e = rc == SQLITE_DONE ? -ENOENT : fail(d, rc, "token_get");
	done(s);
	return e;
}

int db_token_revoke(db *d, const char *id)
{
	if (!d || !id)
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = stmt(d, Q_TOKEN_REVOKE, &e);
	if (!s)
		return e;
	bind_str(s, 1, id);
	return update_one(d, s, "token_revoke");
}

static int name_used(db *d, const char *name, size_t cap)
{
	int e = 0;
	sqlite3_stmt *s = stmt(d, Q_NODE_NAME_USED, &e);
	if (!s)
		return e;
	bind_field(s, 1, name, cap);
	int rc = sqlite3_step(s);
	e = rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : fail(d, rc, "name_used");
	done(s);
	return e;
}

int db_join_commit(db *d, const char *token_id, const char *secret_hash, int64_t now,
		   const db_node *node)
{
	if (!d || !token_id || !secret_hash || !node || is_empty(node->id) || is_empty(node->name))
		return -EINVAL;
	if (node->role[0] && strncmp(node->role, "worker", sizeof node->role) != 0)
		return -EINVAL; /* the head is made by db_cluster_create, never by a join */
	int e = tx_begin(d);
	if (e < 0)
		return e;
	db_token t;
	e = db_token_get(d, token_id, &t);
	if (e == 0 && !digest_eq(t.secret_hash, secret_hash, sizeof t.secret_hash))
		e = -ENOENT;
	else if (e == 0 && t.revoked)
		e = -EKEYREVOKED;
	else if (e == 0 && t.expires_at != 0 && now >= t.expires_at)
		e = -EKEYEXPIRED;
	else if (e == 0 && t.uses_left == 0)
		e = -EUSERS;
	if (e == 0) {
		int used = name_used(d, node->name, sizeof node->name);
		e = used < 0 ? used : used ? -EEXIST : 0;
	}
	sqlite3_stmt *s = NULL;
	if (e == 0 && (s = stmt(d, Q_TOKEN_USE, &e))) {
		bind_str(s, 1, t.id);
		e = exec_stmt(d, s, "token_use");
		if (e == 0 && sqlite3_changes(d->h) != 1)
			e = -EIO; /* checked above under the same write lock */
	}
	if (e == 0)
		e = node_insert(d, node, "worker", t.id);
	return tx_end(d, e);
}

/* ---------- events ---------- */

int db_event_add(db *d, int64_t ts, const char *node_id, const char *kind, const char *detail)
{
	if (!d || is_empty(kind))
		return -EINVAL;
	int e = tx_begin(d);
	if (e < 0)
		return e;
	sqlite3_stmt *s = stmt(d, Q_EVENT_ADD, &e);
	if (s) {
		/* Stored no longer than db_event can return them. */
		sqlite3_bind_int64(s, 1, ts);
		bind_field(s, 2, node_id ? node_id : "", sizeof ((db_event *)0)->node_id - 1);
		bind_field(s, 3, kind, sizeof ((db_event *)0)->kind - 1);
		bind_field(s, 4, detail ? detail : "", sizeof ((db_event *)0)->detail - 1);
		e = exec_stmt(d, s, "event_add");
	}
	return tx_end(d, e);
}

int db_event_list(db *d, int64_t since_id, size_t limit, db_event **out, size_t *n)
{
	if (!d || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0, rc;
	sqlite3_stmt *s = stmt(d, Q_EVENT_LIST, &e);
	if (!s)
		return e;
	sqlite3_bind_int64(s, 1, since_id);
	/* limit 0 = no limit (a negative LIMIT means none in SQLite). */
	sqlite3_bind_int64(s, 2, limit == 0 || (uint64_t)limit > (uint64_t)INT64_MAX ? -1 : (int64_t)limit);
	db_event *arr = NULL;
	size_t cnt = 0, cap = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if ((e = grow((void **)&arr, &cap, cnt, sizeof *arr)) < 0)
			break;
		db_event *ev = &arr[cnt++];
		memset(ev, 0, sizeof *ev);
		ev->id = sqlite3_column_int64(s, 0);
		ev->ts = sqlite3_column_int64(s, 1);
		COL_F(s, 2, ev->node_id);
		COL_F(s, 3, ev->kind);
		COL_F(s, 4, ev->detail);
	}
	if (e == 0 && rc != SQLITE_DONE)
		e = fail(d, rc, "event_list");
	done(s);
	if (e < 0) {
		free(arr);
		return e;
	}
	*out = arr;
	*n = cnt;
	return 0;
}

/* ---------- fabric reports ---------- */

/* -1 (unknown) binds NULL. */
static void bind_opt_int(sqlite3_stmt *s, int i, int64_t v)
{
	if (v < 0)
		sqlite3_bind_null(s, i);
	else
		sqlite3_bind_int64(s, i, v);
}

static int64_t col_opt_int(sqlite3_stmt *s, int i)
{
	return sqlite3_column_type(s, i) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, i);
}

static int fport_insert(db *d, const char *node_id, size_t seq, const db_fabric_port *p)
{
	if (!memchr(p->netdev, '\0', sizeof p->netdev) || !p->netdev[0])
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = stmt(d, Q_FPORT_INSERT, &e);
	if (!s)
		return e;
	BIND_F(s, 1, p->port);
	sqlite3_bind_int(s, 2, p->twin < 0 ? 0 : p->twin);
	BIND_F(s, 3, p->netdev);
	sqlite3_bind_int(s, 4, p->present ? 1 : 0);
	bind_opt_int(s, 5, p->carrier < 0 ? -1 : p->carrier != 0);
	BIND_F(s, 6, p->operstate);
	bind_opt_int(s, 7, p->speed_mbps);
	bind_opt_int(s, 8, p->mtu);
	BIND_F(s, 9, p->rdma_device);
	BIND_F(s, 10, p->rdma_state);
	bind_opt_int(s, 11, p->gid_index);
	bind_str(s, 12, node_id);
	sqlite3_bind_int64(s, 13, (int64_t)seq);
	return exec_stmt(d, s, "fabric_port_insert");
}

int db_fabric_set(db *d, const char *node_id, int64_t ts, const char *discovery_json,
		  const char *findings_json, int64_t n_findings, const db_fabric_port *ports,
		  size_t n)
{
	if (!d || is_empty(node_id) || !discovery_json || n_findings < 0 || (n && !ports))
		return -EINVAL;
	int e = tx_begin(d);
	if (e < 0)
		return e;
	db_node node;
	e = node_get(d, Q_NODE_GET, node_id, &node);
	sqlite3_stmt *s = NULL;
	if (e == 0 && (s = stmt(d, Q_FABRIC_SET, &e))) {
		bind_str(s, 1, node_id);
		sqlite3_bind_int64(s, 2, ts);
		bind_str(s, 3, discovery_json);
		bind_str(s, 4, findings_json ? findings_json : "[]");
		sqlite3_bind_int64(s, 5, n_findings);
		e = exec_stmt(d, s, "fabric_set");
	}
	if (e == 0 && (s = stmt(d, Q_FPORT_CLEAR, &e))) {
		bind_str(s, 1, node_id);
		e = exec_stmt(d, s, "fabric_ports_clear");
	}
	for (size_t i = 0; e == 0 && i < n; i++)
		e = fport_insert(d, node_id, i, &ports[i]);
	return tx_end(d, e);
}

static char *col_dup(sqlite3_stmt *s, int i)
{
	const unsigned char *v = sqlite3_column_text(s, i);
	return strdup(v ? (const char *)v : "");
}

int db_fabric_get(db *d, const char *node_id, db_fabric *out)
{
	if (!d || !node_id || !out)
		return -EINVAL;
	memset(out, 0, sizeof *out);
	int e = 0;
	sqlite3_stmt *s = stmt(d, Q_FABRIC_GET, &e);
	if (!s)
		return e;
	bind_str(s, 1, node_id);
	int rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		out->updated_at = sqlite3_column_int64(s, 0);
		out->n_findings = sqlite3_column_int64(s, 1);
		out->discovery = col_dup(s, 2);
		out->findings = col_dup(s, 3);
		if (!out->discovery || !out->findings) {
			db_fabric_free(out);
			e = -ENOMEM;
		}
	} else {
		e = rc == SQLITE_DONE ? -ENOENT : fail(d, rc, "fabric_get");
	}
	done(s);
	return e;
}

void db_fabric_free(db_fabric *f)
{
	if (!f)
		return;
	free(f->discovery);
	free(f->findings);
	f->discovery = f->findings = NULL;
}

int db_fabric_ports(db *d, const char *node_id, db_fabric_port **out, size_t *n)
{
	if (!d || !node_id || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0, rc;
	sqlite3_stmt *s = stmt(d, Q_FPORT_LIST, &e);
	if (!s)
		return e;
	bind_str(s, 1, node_id);
	db_fabric_port *arr = NULL;
	size_t cnt = 0, cap = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if ((e = grow((void **)&arr, &cap, cnt, sizeof *arr)) < 0)
			break;
		db_fabric_port *p = &arr[cnt++];
		memset(p, 0, sizeof *p);
		COL_F(s, 0, p->port);
		p->twin = sqlite3_column_int(s, 1);
		COL_F(s, 2, p->netdev);
		p->present = sqlite3_column_int(s, 3) != 0;
		p->carrier = (int)col_opt_int(s, 4);
		COL_F(s, 5, p->operstate);
		p->speed_mbps = col_opt_int(s, 6);
		p->mtu = col_opt_int(s, 7);
		COL_F(s, 8, p->rdma_device);
		COL_F(s, 9, p->rdma_state);
		p->gid_index = (int)col_opt_int(s, 10);
	}
	if (e == 0 && rc != SQLITE_DONE)
		e = fail(d, rc, "fabric_ports");
	done(s);
	if (e < 0) {
		free(arr);
		return e;
	}
	*out = arr;
	*n = cnt;
	return 0;
}

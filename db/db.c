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
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
	/* 3: groups and jobs (issue 6). A group is an ordered set of nodes (seq =
	 * rank order); members go with their node. Jobs and their ranks are history:
	 * they keep the group and node names as text and outlive both. spec holds
	 * what every node needs to start its ranks (argv, env overrides, workdir,
	 * launcher plan, net) as JSON. exit_code NULL = not known yet. */
	"CREATE TABLE groups ("
	"  name       TEXT PRIMARY KEY NOT NULL CHECK (length(name) BETWEEN 1 AND 63),"
	"  shared     INTEGER NOT NULL DEFAULT 0 CHECK (shared IN (0, 1)),"
	"  topology   TEXT NOT NULL DEFAULT '',"
	"  shape      TEXT NOT NULL DEFAULT '',"
	"  note       TEXT NOT NULL DEFAULT '',"
	"  created_by TEXT NOT NULL DEFAULT '',"
	"  created_at INTEGER NOT NULL"
	") STRICT;"
	"CREATE TABLE group_members ("
	"  group_name TEXT NOT NULL REFERENCES groups(name) ON DELETE CASCADE,"
	"  node_id    TEXT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,"
	"  seq        INTEGER NOT NULL CHECK (seq >= 0),"
	"  PRIMARY KEY (group_name, node_id),"
	"  UNIQUE (group_name, seq)"
	") STRICT;"
	"CREATE INDEX group_members_node ON group_members(node_id);"
	"CREATE TABLE jobs ("
	"  id             INTEGER PRIMARY KEY AUTOINCREMENT,"
	"  name           TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 63),"
	"  group_name     TEXT NOT NULL CHECK (length(group_name) > 0),"
	"  owner          TEXT NOT NULL CHECK (length(owner) > 0),"
	"  uid            INTEGER NOT NULL,"
	"  launcher       TEXT NOT NULL CHECK (launcher IN ('native', 'torchrun', 'mpi')),"
	"  ranks_per_node INTEGER NOT NULL CHECK (ranks_per_node >= 1),"
	"  world_size     INTEGER NOT NULL CHECK (world_size >= 1),"
	"  command        TEXT NOT NULL DEFAULT '',"
	"  spec           TEXT NOT NULL CHECK (json_valid(spec)),"
	"  state          TEXT NOT NULL CHECK (state IN ('starting', 'running', 'succeeded',"
	"                 'failed', 'cancelled')),"
	"  reason         TEXT NOT NULL DEFAULT '',"
	"  exit_code      INTEGER,"
	"  timeout_s      INTEGER NOT NULL DEFAULT 0 CHECK (timeout_s >= 0),"
	"  created_at     INTEGER NOT NULL,"
	"  started_at     INTEGER NOT NULL DEFAULT 0,"
	"  ended_at       INTEGER NOT NULL DEFAULT 0"
	") STRICT;"
	"CREATE INDEX jobs_state ON jobs(state);"
	"CREATE TABLE job_ranks ("
	"  job_id     INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
	"  rank       INTEGER NOT NULL CHECK (rank >= 0),"
	"  node_id    TEXT NOT NULL,"
	"  node_name  TEXT NOT NULL,"
	"  local_rank INTEGER NOT NULL DEFAULT 0 CHECK (local_rank >= 0),"
	"  state      TEXT NOT NULL CHECK (state IN ('pending', 'running', 'exited', 'failed',"
	"             'killed', 'lost')),"
	"  pid        INTEGER NOT NULL DEFAULT 0,"
	"  exit_code  INTEGER,"
	"  signal     INTEGER NOT NULL DEFAULT 0,"
	"  started_at INTEGER NOT NULL DEFAULT 0,"
	"  ended_at   INTEGER NOT NULL DEFAULT 0,"
	"  PRIMARY KEY (job_id, rank)"
	") STRICT;"
	"CREATE INDEX job_ranks_node ON job_ranks(node_id);",
	/* 4: topology validation runs (issue 5). A run keeps its whole verdict as
	 * JSON; topo_cables and topo_probes are its cables and probe results as
	 * rows for queries. They are history: node names are text, no foreign key
	 * to nodes. Only the newest DB_TOPO_KEEP_RUNS runs are kept. */
	"CREATE TABLE topo_runs ("
	"  id          INTEGER PRIMARY KEY AUTOINCREMENT,"
	"  started_at  INTEGER NOT NULL,"
	"  finished_at INTEGER NOT NULL,"
	"  duration_ms INTEGER NOT NULL DEFAULT 0 CHECK (duration_ms >= 0),"
	"  expect      TEXT NOT NULL DEFAULT '',"
	"  quick       INTEGER NOT NULL DEFAULT 0 CHECK (quick IN (0, 1)),"
	"  class       TEXT NOT NULL CHECK (length(class) > 0),"
	"  result      TEXT NOT NULL CHECK (result IN ('pass', 'warn', 'fail')),"
	"  n_nodes     INTEGER NOT NULL CHECK (n_nodes >= 0),"
	"  n_findings  INTEGER NOT NULL DEFAULT 0 CHECK (n_findings >= 0),"
	"  verdict     TEXT NOT NULL CHECK (json_valid(verdict))"
	") STRICT;"
	"CREATE TABLE topo_cables ("
	"  run_id    INTEGER NOT NULL REFERENCES topo_runs(id) ON DELETE CASCADE,"
	"  seq       INTEGER NOT NULL CHECK (seq >= 0),"
	"  kind      TEXT NOT NULL CHECK (kind IN ('direct', 'self', 'switch')),"
	"  a_node    TEXT NOT NULL,"
	"  a_port    TEXT NOT NULL,"
	"  b_node    TEXT NOT NULL DEFAULT '',"
	"  b_port    TEXT NOT NULL DEFAULT '',"
	"  twins_ok  INTEGER NOT NULL DEFAULT 0 CHECK (twins_ok >= 0),"
	"  mtu_ok    INTEGER NOT NULL DEFAULT 1 CHECK (mtu_ok IN (0, 1)),"
	"  same_port INTEGER NOT NULL DEFAULT 0 CHECK (same_port IN (0, 1)),"
	"  PRIMARY KEY (run_id, seq)"
	") STRICT;"
	"CREATE TABLE topo_probes ("
	"  run_id      INTEGER NOT NULL REFERENCES topo_runs(id) ON DELETE CASCADE,"
	"  seq         INTEGER NOT NULL CHECK (seq >= 0),"
	"  a_node      TEXT NOT NULL,"
	"  a_netdev    TEXT NOT NULL,"
	"  b_node      TEXT NOT NULL,"
	"  b_netdev    TEXT NOT NULL,"
	"  twin        INTEGER NOT NULL DEFAULT 0 CHECK (twin >= 0),"
	"  transport   TEXT NOT NULL CHECK (transport IN ('tcp', 'rdma')),"
	"  result      TEXT NOT NULL CHECK (result IN ('pass', 'warn', 'fail')),"
	"  p50_us      REAL,"
	"  p99_us      REAL,"
	"  gbps        REAL,"
	"  mtu_largest INTEGER,"
	"  detail      TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(detail)),"
	"  PRIMARY KEY (run_id, seq)"
	") STRICT;",
	/* 5: join state (issue 14). connected_at is when the node first opened a
	 * session (0: never, a join whose answer may have been lost); key_hash
	 * is the SHA-256 of the public key its certificate was issued for, so a
	 * retry of the same join (same token, name and key) is recognised. */
	"ALTER TABLE nodes ADD COLUMN connected_at INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE nodes ADD COLUMN key_hash TEXT NOT NULL DEFAULT '';"
	"UPDATE nodes SET connected_at = joined_at WHERE role = 'head' OR EXISTS "
	"  (SELECT 1 FROM events e WHERE e.node_id = nodes.id AND e.kind = 'connected');",
};
#define DB_SCHEMA_VERSION ((int)ARRAY_SIZE(migrations))

/* ---------- statements ---------- */

#define NODE_COLS \
	"id, name, role, state, address, version, cert_serial, joined_at, last_seen, drained, " \
	"connected_at, key_hash"
#define FPORT_COLS \
	"port, twin, netdev, present, carrier, operstate, speed_mbps, mtu, rdma_device, " \
	"rdma_state, gid_index"
#define TOKEN_COLS "id, secret_hash, description, created_at, expires_at, uses_left, uses, revoked"
#define GROUP_COLS \
	"g.name, g.shared, g.topology, g.shape, g.note, g.created_by, g.created_at, " \
	"(SELECT count(*) FROM group_members m WHERE m.group_name = g.name)"
#define JOB_COLS \
	"id, name, group_name, owner, uid, launcher, ranks_per_node, world_size, command, state, " \
	"reason, exit_code, timeout_s, created_at, started_at, ended_at"
#define RANK_COLS \
	"job_id, rank, node_id, node_name, local_rank, state, pid, exit_code, signal, started_at, " \
	"ended_at"

enum q {
	Q_BEGIN, Q_COMMIT, Q_ROLLBACK,
	Q_CLUSTER_INSERT, Q_CLUSTER_GET,
	Q_NODE_INSERT, Q_NODE_GET, Q_NODE_GET_NAME, Q_NODE_LIST, Q_NODE_SEEN, Q_NODE_TOUCH,
	Q_NODE_STATE, Q_NODE_DRAINED, Q_NODE_DELETE, Q_NODE_NAME_USED,
	Q_CERT_REVOKE, Q_CERT_REVOKED, Q_CERT_LIST,
	Q_NODE_CONNECTED, Q_JOIN_PENDING, Q_JOIN_RESUME, Q_JOIN_EXPIRED, Q_TOKEN_UNUSE,
	Q_TOKEN_INSERT, Q_TOKEN_LIST, Q_TOKEN_GET, Q_TOKEN_REVOKE, Q_TOKEN_USE,
	Q_EVENT_ADD, Q_EVENT_LIST,
	Q_FABRIC_SET, Q_FABRIC_GET, Q_FPORT_CLEAR, Q_FPORT_INSERT, Q_FPORT_LIST,
	Q_GROUP_INSERT, Q_GROUP_MEMBER_INSERT, Q_GROUP_GET, Q_GROUP_LIST, Q_GROUP_MEMBERS,
	Q_GROUP_DELETE, Q_GROUP_CONFLICT, Q_MEMBERSHIPS,
	Q_JOB_INSERT, Q_JOB_RANK_INSERT, Q_JOB_GET, Q_JOB_BY_NAME, Q_JOB_LIST, Q_JOB_SPEC,
	Q_JOB_STATE, Q_JOB_RANKS, Q_JOB_RANK_UPDATE, Q_JOB_ACTIVE_IN_GROUP,
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
		"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
	[Q_NODE_GET] = "SELECT " NODE_COLS " FROM nodes WHERE id = ?1",
	[Q_NODE_GET_NAME] = "SELECT " NODE_COLS " FROM nodes WHERE name = ?1",
	[Q_NODE_LIST] =
		"SELECT " NODE_COLS " FROM nodes "
		"ORDER BY role = 'head' DESC, joined_at ASC, name ASC",
	[Q_NODE_SEEN] =
		"UPDATE nodes SET last_seen = ?2, address = coalesce(?3, address), "
		"version = coalesce(?4, version), state = 'ready' WHERE id = ?1",
	/* Never moves last_seen backwards (a late flush after a newer write). */
	[Q_NODE_TOUCH] = "UPDATE nodes SET last_seen = max(last_seen, ?2) WHERE id = ?1",
	[Q_NODE_STATE] = "UPDATE nodes SET state = ?2 WHERE id = ?1",
	[Q_NODE_DRAINED] = "UPDATE nodes SET drained = ?2 WHERE id = ?1",
	[Q_NODE_DELETE] = "DELETE FROM nodes WHERE id = ?1",
	[Q_NODE_NAME_USED] = "SELECT 1 FROM nodes WHERE name = ?1",
	[Q_CERT_REVOKE] =
		"INSERT INTO revoked_certs (serial, node_id, revoked_at) VALUES (?1, ?2, ?3) "
		"ON CONFLICT (serial) DO NOTHING",
	[Q_CERT_REVOKED] = "SELECT 1 FROM revoked_certs WHERE serial = ?1",
	[Q_CERT_LIST] = "SELECT serial FROM revoked_certs ORDER BY revoked_at, serial",
	[Q_NODE_CONNECTED] =
		"UPDATE nodes SET connected_at = ?2 WHERE id = ?1 AND connected_at = 0",
	/* A worker's join that never connected, made with this token. */
	[Q_JOIN_PENDING] =
		"SELECT " NODE_COLS " FROM nodes WHERE name = ?1 AND token_id = ?2 "
		"AND role = 'worker' AND connected_at = 0",
	[Q_JOIN_RESUME] =
		"UPDATE nodes SET cert_serial = ?2, key_hash = ?3, joined_at = ?4, last_seen = ?4, "
		"address = ?5, version = ?6 WHERE id = ?1 AND connected_at = 0",
	[Q_JOIN_EXPIRED] =
		"SELECT " NODE_COLS ", coalesce(token_id, '') FROM nodes WHERE role = 'worker' "
		"AND connected_at = 0 AND joined_at < ?1 ORDER BY joined_at",
	/* Give back the use an expired join took (unlimited tokens have none). */
	[Q_TOKEN_UNUSE] =
		"UPDATE tokens SET uses = max(uses - 1, 0), uses_left = uses_left + 1 "
		"WHERE id = ?1 AND uses_left >= 0",
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
	[Q_GROUP_INSERT] =
		"INSERT INTO groups (name, shared, topology, shape, note, created_by, created_at) "
		"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
	[Q_GROUP_MEMBER_INSERT] =
		"INSERT INTO group_members (group_name, node_id, seq) VALUES (?1, ?2, ?3)",
	[Q_GROUP_GET] = "SELECT " GROUP_COLS " FROM groups g WHERE g.name = ?1",
	[Q_GROUP_LIST] = "SELECT " GROUP_COLS " FROM groups g ORDER BY g.created_at, g.name",
	[Q_GROUP_MEMBERS] =
		"SELECT m.node_id, n.name, m.seq FROM group_members m JOIN nodes n ON n.id = m.node_id "
		"WHERE m.group_name = ?1 ORDER BY m.seq",
	[Q_GROUP_DELETE] = "DELETE FROM groups WHERE name = ?1",
	/* Another group holding the node that a new group (shared = ?2) may not share it with. */
	[Q_GROUP_CONFLICT] =
		"SELECT g.name FROM group_members m JOIN groups g ON g.name = m.group_name "
		"WHERE m.node_id = ?1 AND (?2 = 0 OR g.shared = 0) ORDER BY g.name LIMIT 1",
	[Q_MEMBERSHIPS] =
		"SELECT m.group_name, m.node_id, g.shared FROM group_members m "
		"JOIN groups g ON g.name = m.group_name ORDER BY m.group_name, m.seq",
	[Q_JOB_INSERT] =
		"INSERT INTO jobs (name, group_name, owner, uid, launcher, ranks_per_node, world_size, "
		"command, spec, state, timeout_s, created_at) "
		"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'starting', ?10, ?11)",
	[Q_JOB_RANK_INSERT] =
		"INSERT INTO job_ranks (job_id, rank, node_id, node_name, local_rank, state) "
		"VALUES (?1, ?2, ?3, ?4, ?5, 'pending')",
	[Q_JOB_GET] = "SELECT " JOB_COLS " FROM jobs WHERE id = ?1",
	[Q_JOB_BY_NAME] =
		"SELECT " JOB_COLS " FROM jobs WHERE name = ?1 AND (?2 IS NULL OR owner = ?2) "
		"ORDER BY id DESC LIMIT 1",
	[Q_JOB_LIST] =
		"SELECT " JOB_COLS " FROM jobs WHERE (?1 IS NULL OR owner = ?1) "
		"AND (?2 = 0 OR state IN ('starting', 'running')) ORDER BY id DESC LIMIT ?3",
	[Q_JOB_SPEC] = "SELECT spec FROM jobs WHERE id = ?1",
	[Q_JOB_STATE] =
		"UPDATE jobs SET state = ?2, reason = ?3, exit_code = ?4, started_at = ?5, "
		"ended_at = ?6 WHERE id = ?1",
	[Q_JOB_RANKS] =
		"SELECT " RANK_COLS " FROM job_ranks WHERE job_id = ?1 ORDER BY rank",
	[Q_JOB_RANK_UPDATE] =
		"UPDATE job_ranks SET state = ?3, pid = ?4, exit_code = ?5, signal = ?6, "
		"started_at = ?7, ended_at = ?8 WHERE job_id = ?1 AND rank = ?2",
	[Q_JOB_ACTIVE_IN_GROUP] =
		"SELECT id FROM jobs WHERE group_name = ?1 AND state IN ('starting', 'running') "
		"ORDER BY id",
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

/* Page cache size, in KiB (negative = KiB in SQLite's PRAGMA): ~14 pages. */
#define DB_CACHE_KIB_SQL "-64"

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

/* Process-wide SQLite settings; must run before SQLite initialises (the first
 * open). db.c is the only SQLite user in the process. */
static void db_configure(void)
{
	static bool done;
	if (done)
		return;
	done = true;
	/* No up-front bulk page allocation per page cache (SQLite reserves 20
	 * pages, ~87 KiB, at the first read): pages are allocated as they are
	 * used, and db_release_memory() can hand all unused ones back. Fails
	 * harmlessly (SQLITE_MISUSE) if SQLite was already initialised. */
	sqlite3_config(SQLITE_CONFIG_PAGECACHE, (void *)NULL, 0, 0);
}

int db_open(const char *path, db **out)
{
	if (!path || !out)
		return -EINVAL;
	*out = NULL;
	db_configure();
	db *d = calloc(1, sizeof *d);
	if (!d)
		return -ENOMEM;
	/* cluster.db holds the cluster's secrets (CA key, token hashes): 0600
	 * whatever the umask. SQLite makes -wal and -shm with the main file's
	 * mode; ones left by a crash under an older mode are fixed too. */
	int e = 0;
	if (strcmp(path, ":memory:") != 0 && strncmp(path, "file:", 5) != 0) {
		static const char *const sfx[] = {"", "-wal", "-shm", "-journal"};
		for (size_t i = 0; i < ARRAY_SIZE(sfx); i++) {
			char p[4096];
			if ((size_t)snprintf(p, sizeof p, "%s%s", path, sfx[i]) >= sizeof p) {
				e = -ENAMETOOLONG;
				goto err;
			}
			int fd = open(p, O_RDWR | O_CLOEXEC | (i == 0 ? O_CREAT : 0), 0600);
			if (fd < 0 && (i == 0 || errno != ENOENT)) {
				e = -errno;
				log_error("db_error", "op=open path=%s err=%s", log_q(p), log_q(strerror(-e)));
				goto err;
			}
			if (fd >= 0) {
				struct stat st;
				int bad = fstat(fd, &st) < 0 || ((st.st_mode & 077) && fchmod(fd, 0600) < 0);
				e = bad ? -errno : 0;
				close(fd);
				if (bad) {
					log_error("db_error", "op=chmod path=%s err=%s", log_q(p),
						  log_q(strerror(-e)));
					goto err;
				}
			}
		}
	}
	int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
	int rc = sqlite3_open_v2(path, &d->h, flags, NULL);
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
	/* The page cache before anything reads a page: cluster.db is a few hundred
	 * KiB, read from the OS page cache in microseconds, and the head's idle
	 * work (heartbeats, liveness) touches a handful of pages. SQLite's default
	 * (2 MiB) would end up holding a private copy of the whole file. */
	if ((e = exec_sql(d, "PRAGMA cache_size = " DB_CACHE_KIB_SQL, "cache_size")) < 0 ||
	    (e = set_journal_wal(d)) < 0 ||
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

int db_memory(db *d, db_mem *out)
{
	if (!d || !out)
		return -EINVAL;
	int cur = 0, hi = 0;
	memset(out, 0, sizeof *out);
	if (sqlite3_db_status(d->h, SQLITE_DBSTATUS_CACHE_USED, &cur, &hi, 0) == SQLITE_OK)
		out->cache = cur;
	if (sqlite3_db_status(d->h, SQLITE_DBSTATUS_SCHEMA_USED, &cur, &hi, 0) == SQLITE_OK)
		out->schema = cur;
	if (sqlite3_db_status(d->h, SQLITE_DBSTATUS_STMT_USED, &cur, &hi, 0) == SQLITE_OK)
		out->stmt = cur;
	if (sqlite3_db_status(d->h, SQLITE_DBSTATUS_LOOKASIDE_USED, &cur, &hi, 0) == SQLITE_OK)
		out->lookaside_slots = hi;
	out->total = sqlite3_memory_used();
	return 0;
}

void db_release_memory(db *d)
{
	if (!d)
		return;
	/* Every cached statement is reset when the function that used it returns
	 * (done()), so none is running here; a busy one is left alone anyway. */
	for (int i = 0; i < Q_COUNT; i++)
		if (d->st[i] && !sqlite3_stmt_busy(d->st[i])) {
			sqlite3_finalize(d->st[i]);
			d->st[i] = NULL;
		}
	sqlite3_db_release_memory(d->h);
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
	sqlite3_bind_int64(s, 11, n->connected_at);
	BIND_F(s, 12, n->key_hash);
	bind_str(s, 13, token_id);
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
	n->connected_at = sqlite3_column_int64(s, 10);
	COL_F(s, 11, n->key_hash);
	/* A drained node that is otherwise ready shows "draining"; a worker that
	 * never connected is still "joining", whatever the stored state. */
	if (n->drained && strcmp(n->state, "ready") == 0)
		util_strlcpy(n->state, "draining", sizeof n->state);
	if (n->connected_at == 0 && strcmp(n->role, "worker") == 0)
		util_strlcpy(n->state, "joining", sizeof n->state);
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

int db_node_touch(db *d, const char *id, int64_t ts)
{
	if (!d || !id)
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = stmt(d, Q_NODE_TOUCH, &e);
	if (!s)
		return e;
	bind_str(s, 1, id);
	sqlite3_bind_int64(s, 2, ts);
	return update_one(d, s, "node_touch");
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

int db_revoked_list(db *d, char ***out, size_t *n)
{
	if (!d || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0, rc;
	sqlite3_stmt *s = stmt(d, Q_CERT_LIST, &e);
	if (!s)
		return e;
	char **arr = NULL;
	size_t cnt = 0, cap = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if ((e = grow((void **)&arr, &cap, cnt, sizeof *arr)) < 0)
			break;
		const char *t = (const char *)sqlite3_column_text(s, 0);
		if (!(arr[cnt] = strdup(t ? t : ""))) {
			e = -ENOMEM;
			break;
		}
		cnt++;
	}
	if (e == 0 && rc != SQLITE_DONE)
		e = fail(d, rc, "revoked_list");
	done(s);
	if (e < 0) {
		db_strv_free(arr, cnt);
		return e;
	}
	*out = arr;
	*n = cnt;
	return 0;
}

void db_strv_free(char **v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

int db_node_connected(db *d, const char *id, int64_t now, const char *address,
		      const char *version, bool *first)
{
	if (!d || !id)
		return -EINVAL;
	int e = tx_begin(d);
	if (e < 0)
		return e;
	sqlite3_stmt *s = stmt(d, Q_NODE_CONNECTED, &e);
	if (s) {
		bind_str(s, 1, id);
		sqlite3_bind_int64(s, 2, now);
		e = exec_stmt(d, s, "node_connected");
	}
	if (first)
		*first = e == 0 && sqlite3_changes(d->h) == 1;
	if (e == 0 && (s = stmt(d, Q_NODE_SEEN, &e))) {
		bind_str(s, 1, id);
		sqlite3_bind_int64(s, 2, now);
		bind_str(s, 3, address);
		bind_str(s, 4, version);
		e = exec_stmt(d, s, "node_seen");
		if (e == 0 && sqlite3_changes(d->h) == 0)
			e = -ENOENT;
	}
	return tx_end(d, e);
}

/* The token named by a join, checked against its secret; -ENOENT for an
 * unknown token or a wrong secret (the same answer, so that token ids cannot
 * be probed), -EKEYREVOKED. Expiry and uses are the caller's to judge. */
static int join_token(db *d, const char *token_id, const char *secret_hash, db_token *t)
{
	int e = db_token_get(d, token_id, t);
	if (e == 0 && !digest_eq(t->secret_hash, secret_hash, sizeof t->secret_hash))
		e = -ENOENT;
	else if (e == 0 && t->revoked)
		e = -EKEYREVOKED;
	return e;
}

int db_join_pending(db *d, const char *token_id, const char *secret_hash, const char *name,
		    db_node *out)
{
	if (!d || !token_id || !secret_hash || !name || !out)
		return -EINVAL;
	db_token t;
	int e = join_token(d, token_id, secret_hash, &t);
	if (e < 0)
		return e;
	sqlite3_stmt *s = stmt(d, Q_JOIN_PENDING, &e);
	if (!s)
		return e;
	bind_str(s, 1, name);
	bind_str(s, 2, token_id);
	int rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		node_row(s, out);
	else
		e = rc == SQLITE_DONE ? -ENOENT : fail(d, rc, "join_pending");
	done(s);
	return e;
}

int db_join_resume(db *d, const char *token_id, const char *secret_hash, const db_node *node,
		   const char *old_serial, int64_t now)
{
	if (!d || !token_id || !secret_hash || !node || is_empty(node->id))
		return -EINVAL;
	int e = tx_begin(d);
	if (e < 0)
		return e;
	db_node cur;
	e = db_join_pending(d, token_id, secret_hash, node->name, &cur);
	if (e == 0 && strcmp(cur.id, node->id) != 0)
		e = -ENOENT;
	sqlite3_stmt *s = NULL;
	if (e == 0 && old_serial && *old_serial && (s = stmt(d, Q_CERT_REVOKE, &e))) {
		bind_str(s, 1, old_serial);
		bind_str(s, 2, node->id);
		sqlite3_bind_int64(s, 3, now);
		e = exec_stmt(d, s, "cert_revoke");
	}
	if (e == 0 && (s = stmt(d, Q_JOIN_RESUME, &e))) {
		bind_str(s, 1, node->id);
		BIND_F(s, 2, node->cert_serial);
		BIND_F(s, 3, node->key_hash);
		sqlite3_bind_int64(s, 4, now);
		BIND_F(s, 5, node->address);
		BIND_F(s, 6, node->version);
		e = exec_stmt(d, s, "join_resume");
		if (e == 0 && sqlite3_changes(d->h) != 1)
			e = -ENOENT;
	}
	return tx_end(d, e);
}

int db_join_expire(db *d, int64_t cutoff, int64_t now, db_node **out, size_t *n)
{
	if (!d || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = tx_begin(d);
	if (e < 0)
		return e;
	db_node *arr = NULL;
	char (*tok)[17] = NULL;
	size_t cnt = 0, cap = 0, tcap = 0;
	sqlite3_stmt *s = stmt(d, Q_JOIN_EXPIRED, &e);
	int rc = SQLITE_DONE;
	if (s) {
		sqlite3_bind_int64(s, 1, cutoff);
		while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
			if ((e = grow((void **)&arr, &cap, cnt, sizeof *arr)) < 0 ||
			    (e = grow((void **)&tok, &tcap, cnt, sizeof *tok)) < 0)
				break;
			node_row(s, &arr[cnt]);
			const char *t = (const char *)sqlite3_column_text(s, 12);
			util_strlcpy(tok[cnt], t ? t : "", sizeof tok[cnt]);
			cnt++;
		}
		if (e == 0 && rc != SQLITE_DONE)
			e = fail(d, rc, "join_expired");
		done(s);
	}
	for (size_t i = 0; e == 0 && i < cnt; i++) {
		if (arr[i].cert_serial[0] && (s = stmt(d, Q_CERT_REVOKE, &e))) {
			BIND_F(s, 1, arr[i].cert_serial);
			bind_str(s, 2, arr[i].id);
			sqlite3_bind_int64(s, 3, now);
			e = exec_stmt(d, s, "cert_revoke");
		}
		if (e == 0 && tok[i][0] && (s = stmt(d, Q_TOKEN_UNUSE, &e))) {
			bind_str(s, 1, tok[i]);
			e = exec_stmt(d, s, "token_unuse");
		}
		if (e == 0 && (s = stmt(d, Q_NODE_DELETE, &e))) {
			bind_str(s, 1, arr[i].id);
			e = exec_stmt(d, s, "node_delete");
		}
	}
	free(tok);
	e = tx_end(d, e);
	if (e < 0) {
		free(arr);
		return e;
	}
	*out = arr;
	*n = cnt;
	return 0;
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

/* ---------- groups and jobs (issue 6) ---------- */

static void group_row(sqlite3_stmt *s, db_group *g)
{
	memset(g, 0, sizeof *g);
	COL_F(s, 0, g->name);
	g->shared = sqlite3_column_int(s, 1) != 0;
	COL_F(s, 2, g->topology);
	COL_F(s, 3, g->shape);
	COL_F(s, 4, g->note);
	COL_F(s, 5, g->created_by);
	g->created_at = sqlite3_column_int64(s, 6);
	g->n_members = sqlite3_column_int(s, 7);
}

int db_group_create(db *d, const db_group *g, const char *const *node_ids, size_t n,
		    char *conflict_node, char *conflict_group)
{
	if (conflict_node)
		conflict_node[0] = '\0';
	if (conflict_group)
		conflict_group[0] = '\0';
	if (!d || !g || is_empty(g->name) || (n && !node_ids))
		return -EINVAL;
	int e = tx_begin(d);
	if (e < 0)
		return e;
	sqlite3_stmt *s = stmt(d, Q_GROUP_GET, &e);
	if (s) { /* the name first: it is the caller's first mistake to report */
		bind_str(s, 1, g->name);
		int rc = sqlite3_step(s);
		e = rc == SQLITE_ROW ? -EEXIST : rc == SQLITE_DONE ? 0 : fail(d, rc, "group_get");
		done(s);
	}
	/* Membership rules before any insert, so a refused group leaves nothing behind. */
	for (size_t i = 0; e == 0 && i < n; i++) {
		db_node node;
		if ((e = node_get(d, Q_NODE_GET, node_ids[i], &node)) < 0) {
			if (conflict_node)
				util_strlcpy(conflict_node, node_ids[i], 64);
			break;
		}
		if (!(s = stmt(d, Q_GROUP_CONFLICT, &e)))
			break;
		bind_str(s, 1, node_ids[i]);
		sqlite3_bind_int(s, 2, g->shared ? 1 : 0);
		int rc = sqlite3_step(s);
		if (rc == SQLITE_ROW) {
			if (conflict_node)
				util_strlcpy(conflict_node, node.name, 64);
			if (conflict_group)
				col_str(s, 0, conflict_group, 64);
			e = -EBUSY;
		} else if (rc != SQLITE_DONE) {
			e = fail(d, rc, "group_conflict");
		}
		done(s);
	}
	if (e == 0 && (s = stmt(d, Q_GROUP_INSERT, &e))) {
		BIND_F(s, 1, g->name);
		sqlite3_bind_int(s, 2, g->shared ? 1 : 0);
		BIND_F(s, 3, g->topology);
		BIND_F(s, 4, g->shape);
		BIND_F(s, 5, g->note);
		BIND_F(s, 6, g->created_by);
		sqlite3_bind_int64(s, 7, g->created_at);
		e = exec_stmt(d, s, "group_insert");
	}
	for (size_t i = 0; e == 0 && i < n; i++) {
		if (!(s = stmt(d, Q_GROUP_MEMBER_INSERT, &e)))
			break;
		BIND_F(s, 1, g->name);
		bind_str(s, 2, node_ids[i]);
		sqlite3_bind_int64(s, 3, (int64_t)i);
		e = exec_stmt(d, s, "group_member_insert");
		if (e == -EEXIST && conflict_node) /* the same node twice */
			util_strlcpy(conflict_node, node_ids[i], 64);
	}
	return tx_end(d, e);
}

int db_group_get(db *d, const char *name, db_group *out)
{
	if (!d || !name || !out)
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = stmt(d, Q_GROUP_GET, &e);
	if (!s)
		return e;
	bind_str(s, 1, name);
	int rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		group_row(s, out);
	else
		e = rc == SQLITE_DONE ? -ENOENT : fail(d, rc, "group_get");
	done(s);
	return e;
}

int db_group_list(db *d, db_group **out, size_t *n)
{
	if (!d || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0, rc;
	sqlite3_stmt *s = stmt(d, Q_GROUP_LIST, &e);
	if (!s)
		return e;
	db_group *arr = NULL;
	size_t cnt = 0, cap = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if ((e = grow((void **)&arr, &cap, cnt, sizeof *arr)) < 0)
			break;
		group_row(s, &arr[cnt++]);
	}
	if (e == 0 && rc != SQLITE_DONE)
		e = fail(d, rc, "group_list");
	done(s);
	if (e < 0) {
		free(arr);
		return e;
	}
	*out = arr;
	*n = cnt;
	return 0;
}

int db_group_members(db *d, const char *name, db_group_member **out, size_t *n)
{
	if (!d || !name || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0, rc;
	sqlite3_stmt *s = stmt(d, Q_GROUP_MEMBERS, &e);
	if (!s)
		return e;
	bind_str(s, 1, name);
	db_group_member *arr = NULL;
	size_t cnt = 0, cap = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if ((e = grow((void **)&arr, &cap, cnt, sizeof *arr)) < 0)
			break;
		db_group_member *m = &arr[cnt++];
		memset(m, 0, sizeof *m);
		COL_F(s, 0, m->node_id);
		COL_F(s, 1, m->node_name);
		m->seq = sqlite3_column_int(s, 2);
	}
	if (e == 0 && rc != SQLITE_DONE)
		e = fail(d, rc, "group_members");
	done(s);
	if (e < 0) {
		free(arr);
		return e;
	}
	*out = arr;
	*n = cnt;
	return 0;
}

int db_group_remove(db *d, const char *name)
{
	if (!d || is_empty(name))
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = stmt(d, Q_GROUP_DELETE, &e);
	if (!s)
		return e;
	bind_str(s, 1, name);
	return update_one(d, s, "group_delete");
}

int db_group_memberships(db *d, db_membership **out, size_t *n)
{
	if (!d || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0, rc;
	sqlite3_stmt *s = stmt(d, Q_MEMBERSHIPS, &e);
	if (!s)
		return e;
	db_membership *arr = NULL;
	size_t cnt = 0, cap = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if ((e = grow((void **)&arr, &cap, cnt, sizeof *arr)) < 0)
			break;
		db_membership *m = &arr[cnt++];
		memset(m, 0, sizeof *m);
		COL_F(s, 0, m->group_name);
		COL_F(s, 1, m->node_id);
		m->shared = sqlite3_column_int(s, 2) != 0;
	}
	if (e == 0 && rc != SQLITE_DONE)
		e = fail(d, rc, "memberships");
	done(s);
	if (e < 0) {
		free(arr);
		return e;
	}
	*out = arr;
	*n = cnt;
	return 0;
}

static void job_row(sqlite3_stmt *s, db_job *j)
{
	memset(j, 0, sizeof *j);
	j->id = sqlite3_column_int64(s, 0);
	COL_F(s, 1, j->name);
	COL_F(s, 2, j->group_name);
	COL_F(s, 3, j->owner);
	j->uid = sqlite3_column_int64(s, 4);
	COL_F(s, 5, j->launcher);
	j->ranks_per_node = sqlite3_column_int(s, 6);
	j->world_size = sqlite3_column_int(s, 7);
	COL_F(s, 8, j->command);
	COL_F(s, 9, j->state);
	COL_F(s, 10, j->reason);
	j->exit_code = sqlite3_column_type(s, 11) == SQLITE_NULL ? -1 : sqlite3_column_int(s, 11);
	j->timeout_s = sqlite3_column_int64(s, 12);
	j->created_at = sqlite3_column_int64(s, 13);
	j->started_at = sqlite3_column_int64(s, 14);
	j->ended_at = sqlite3_column_int64(s, 15);
}

static void rank_row(sqlite3_stmt *s, db_job_rank *r)
{
	memset(r, 0, sizeof *r);
	r->job_id = sqlite3_column_int64(s, 0);
	r->rank = sqlite3_column_int(s, 1);
	COL_F(s, 2, r->node_id);
	COL_F(s, 3, r->node_name);
	r->local_rank = sqlite3_column_int(s, 4);
	COL_F(s, 5, r->state);
	r->pid = sqlite3_column_int64(s, 6);
	r->exit_code = sqlite3_column_type(s, 7) == SQLITE_NULL ? -1 : sqlite3_column_int(s, 7);
	r->signal = sqlite3_column_int(s, 8);
	r->started_at = sqlite3_column_int64(s, 9);
	r->ended_at = sqlite3_column_int64(s, 10);
}

int db_job_create(db *d, db_job *j, const char *spec_json, const db_job_rank *ranks, size_t n)
{
	if (!d || !j || !spec_json || is_empty(j->name) || is_empty(j->group_name) ||
	    is_empty(j->owner) || (n && !ranks))
		return -EINVAL;
	int e = tx_begin(d);
	if (e < 0)
		return e;
	sqlite3_stmt *s = stmt(d, Q_JOB_INSERT, &e);
	if (s) {
		BIND_F(s, 1, j->name);
		BIND_F(s, 2, j->group_name);
		BIND_F(s, 3, j->owner);
		sqlite3_bind_int64(s, 4, j->uid);
		BIND_F(s, 5, j->launcher);
		sqlite3_bind_int(s, 6, j->ranks_per_node);
		sqlite3_bind_int(s, 7, j->world_size);
		BIND_F(s, 8, j->command);
		bind_str(s, 9, spec_json);
		sqlite3_bind_int64(s, 10, j->timeout_s);
		sqlite3_bind_int64(s, 11, j->created_at);
		e = exec_stmt(d, s, "job_insert");
	}
	int64_t id = e == 0 ? sqlite3_last_insert_rowid(d->h) : 0;
	for (size_t i = 0; e == 0 && i < n; i++) {
		if (!(s = stmt(d, Q_JOB_RANK_INSERT, &e)))
			break;
		sqlite3_bind_int64(s, 1, id);
		sqlite3_bind_int(s, 2, ranks[i].rank);
		BIND_F(s, 3, ranks[i].node_id);
		BIND_F(s, 4, ranks[i].node_name);
		sqlite3_bind_int(s, 5, ranks[i].local_rank);
		e = exec_stmt(d, s, "job_rank_insert");
	}
	e = tx_end(d, e);
	if (e == 0) {
		j->id = id;
		util_strlcpy(j->state, "starting", sizeof j->state);
		j->exit_code = -1;
	}
	return e;
}

static int job_get(db *d, enum q q, sqlite3_stmt *s, db_job *out)
{
	int rc = sqlite3_step(s);
	int e = 0;
	if (rc == SQLITE_ROW)
		job_row(s, out);
	else
		e = rc == SQLITE_DONE ? -ENOENT : fail(d, rc, q == Q_JOB_GET ? "job_get" : "job_by_name");
	done(s);
	return e;
}

int db_job_get(db *d, int64_t id, db_job *out)
{
	if (!d || !out)
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = stmt(d, Q_JOB_GET, &e);
	if (!s)
		return e;
	sqlite3_bind_int64(s, 1, id);
	return job_get(d, Q_JOB_GET, s, out);
}

int db_job_get_by_name(db *d, const char *name, const char *owner, db_job *out)
{
	if (!d || !name || !out)
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = stmt(d, Q_JOB_BY_NAME, &e);
	if (!s)
		return e;
	bind_str(s, 1, name);
	bind_str(s, 2, owner);
	return job_get(d, Q_JOB_BY_NAME, s, out);
}

int db_job_list(db *d, const char *owner, bool active_only, size_t limit, db_job **out,
		size_t *n)
{
	if (!d || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0, rc;
	sqlite3_stmt *s = stmt(d, Q_JOB_LIST, &e);
	if (!s)
		return e;
	bind_str(s, 1, owner);
	sqlite3_bind_int(s, 2, active_only ? 1 : 0);
	sqlite3_bind_int64(s, 3, limit ? (int64_t)limit : -1);
	db_job *arr = NULL;
	size_t cnt = 0, cap = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if ((e = grow((void **)&arr, &cap, cnt, sizeof *arr)) < 0)
			break;
		job_row(s, &arr[cnt++]);
	}
	if (e == 0 && rc != SQLITE_DONE)
		e = fail(d, rc, "job_list");
	done(s);
	if (e < 0) {
		free(arr);
		return e;
	}
	*out = arr;
	*n = cnt;
	return 0;
}

int db_job_spec(db *d, int64_t id, char **out)
{
	if (!d || !out)
		return -EINVAL;
	*out = NULL;
	int e = 0;
	sqlite3_stmt *s = stmt(d, Q_JOB_SPEC, &e);
	if (!s)
		return e;
	sqlite3_bind_int64(s, 1, id);
	int rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		*out = col_dup(s, 0);
		if (!*out)
			e = -ENOMEM;
	} else {
		e = rc == SQLITE_DONE ? -ENOENT : fail(d, rc, "job_spec");
	}
	done(s);
	return e;
}

int db_job_set_state(db *d, const db_job *j)
{
	if (!d || !j || is_empty(j->state))
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = stmt(d, Q_JOB_STATE, &e);
	if (!s)
		return e;
	sqlite3_bind_int64(s, 1, j->id);
	BIND_F(s, 2, j->state);
	BIND_F(s, 3, j->reason);
	bind_opt_int(s, 4, j->exit_code);
	sqlite3_bind_int64(s, 5, j->started_at);
	sqlite3_bind_int64(s, 6, j->ended_at);
	return update_one(d, s, "job_state");
}

int db_job_ranks(db *d, int64_t id, db_job_rank **out, size_t *n)
{
	if (!d || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0, rc;
	sqlite3_stmt *s = stmt(d, Q_JOB_RANKS, &e);
	if (!s)
		return e;
	sqlite3_bind_int64(s, 1, id);
	db_job_rank *arr = NULL;
	size_t cnt = 0, cap = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if ((e = grow((void **)&arr, &cap, cnt, sizeof *arr)) < 0)
			break;
		rank_row(s, &arr[cnt++]);
	}
	if (e == 0 && rc != SQLITE_DONE)
		e = fail(d, rc, "job_ranks");
	done(s);
	if (e < 0) {
		free(arr);
		return e;
	}
	*out = arr;
	*n = cnt;
	return 0;
}

int db_job_rank_update(db *d, const db_job_rank *r)
{
	if (!d || !r || is_empty(r->state))
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = stmt(d, Q_JOB_RANK_UPDATE, &e);
	if (!s)
		return e;
	sqlite3_bind_int64(s, 1, r->job_id);
	sqlite3_bind_int(s, 2, r->rank);
	BIND_F(s, 3, r->state);
	sqlite3_bind_int64(s, 4, r->pid);
	bind_opt_int(s, 5, r->exit_code);
	sqlite3_bind_int(s, 6, r->signal);
	sqlite3_bind_int64(s, 7, r->started_at);
	sqlite3_bind_int64(s, 8, r->ended_at);
	return update_one(d, s, "job_rank_update");
}

int db_group_active_jobs(db *d, const char *group, int64_t **ids, size_t *n)
{
	if (!d || !group || !ids || !n)
		return -EINVAL;
	*ids = NULL;
	*n = 0;
	int e = 0, rc;
	sqlite3_stmt *s = stmt(d, Q_JOB_ACTIVE_IN_GROUP, &e);
	if (!s)
		return e;
	bind_str(s, 1, group);
	int64_t *arr = NULL;
	size_t cnt = 0, cap = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if ((e = grow((void **)&arr, &cap, cnt, sizeof *arr)) < 0)
			break;
		arr[cnt++] = sqlite3_column_int64(s, 0);
	}
	if (e == 0 && rc != SQLITE_DONE)
		e = fail(d, rc, "group_active_jobs");
	done(s);
	if (e < 0) {
		free(arr);
		return e;
	}
	*ids = arr;
	*n = cnt;
	return 0;
}

/* ---------- topology validation runs (issue 5) ---------- */

/* These statements run a few times per validation: prepared per call (not
 * in the cached table) and finalized by the caller. */
static sqlite3_stmt *tprep(db *d, const char *sql, int *err)
{
	sqlite3_stmt *s = NULL;
	int rc = sqlite3_prepare_v2(d->h, sql, -1, &s, NULL);
	if (rc != SQLITE_OK) {
		*err = fail(d, rc, "topo_prepare");
		sqlite3_finalize(s);
		return NULL;
	}
	return s;
}

static int trun(db *d, sqlite3_stmt *s, const char *op)
{
	int rc;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW)
		;
	int e = rc == SQLITE_DONE ? 0 : fail(d, rc, op);
	sqlite3_finalize(s);
	return e;
}

static bool one_of(const char *s, const char *const *set, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(s, set[i]) == 0)
			return true;
	return false;
}

static void bind_opt_real(sqlite3_stmt *s, int i, double v)
{
	if (v < 0)
		sqlite3_bind_null(s, i);
	else
		sqlite3_bind_double(s, i, v);
}

static double col_opt_real(sqlite3_stmt *s, int i)
{
	return sqlite3_column_type(s, i) == SQLITE_NULL ? -1 : sqlite3_column_double(s, i);
}

int db_topo_run_add(db *d, db_topo_run *r, const db_topo_cable *cables, size_t ncables,
		    const db_topo_probe *probes, size_t nprobes)
{
	static const char *const results[] = {"pass", "warn", "fail"};
	static const char *const kinds[] = {"direct", "self", "switch"};
	static const char *const transports[] = {"tcp", "rdma"};
	if (!d || !r || !r->verdict || !memchr(r->cls, '\0', sizeof r->cls) || !r->cls[0] ||
	    !memchr(r->result, '\0', sizeof r->result) || !one_of(r->result, results, 3) ||
	    (ncables && !cables) || (nprobes && !probes))
		return -EINVAL;
	for (size_t i = 0; i < ncables; i++)
		if (!memchr(cables[i].kind, '\0', sizeof cables[i].kind) ||
		    !one_of(cables[i].kind, kinds, 3))
			return -EINVAL;
	for (size_t i = 0; i < nprobes; i++)
		if (!memchr(probes[i].transport, '\0', sizeof probes[i].transport) ||
		    !one_of(probes[i].transport, transports, 2) ||
		    !memchr(probes[i].result, '\0', sizeof probes[i].result) ||
		    !one_of(probes[i].result, results, 3))
			return -EINVAL;
	int e = tx_begin(d);
	if (e < 0)
		return e;
	sqlite3_stmt *s = tprep(d,
				"INSERT INTO topo_runs (started_at, finished_at, duration_ms, expect, "
				"quick, class, result, n_nodes, n_findings, verdict) "
				"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
				&e);
	if (s) {
		sqlite3_bind_int64(s, 1, r->started_at);
		sqlite3_bind_int64(s, 2, r->finished_at);
		sqlite3_bind_int64(s, 3, r->duration_ms < 0 ? 0 : r->duration_ms);
		BIND_F(s, 4, r->expect);
		sqlite3_bind_int(s, 5, r->quick ? 1 : 0);
		BIND_F(s, 6, r->cls);
		BIND_F(s, 7, r->result);
		sqlite3_bind_int(s, 8, r->n_nodes < 0 ? 0 : r->n_nodes);
		sqlite3_bind_int(s, 9, r->n_findings < 0 ? 0 : r->n_findings);
		bind_str(s, 10, r->verdict);
		e = trun(d, s, "topo_run_add");
	}
	int64_t id = e == 0 ? sqlite3_last_insert_rowid(d->h) : 0;
	for (size_t i = 0; e == 0 && i < ncables; i++) {
		const db_topo_cable *c = &cables[i];
		if (!(s = tprep(d,
				"INSERT INTO topo_cables (run_id, seq, kind, a_node, a_port, b_node, "
				"b_port, twins_ok, mtu_ok, same_port) "
				"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
				&e)))
			break;
		sqlite3_bind_int64(s, 1, id);
		sqlite3_bind_int64(s, 2, (int64_t)i);
		BIND_F(s, 3, c->kind);
		BIND_F(s, 4, c->a_node);
		BIND_F(s, 5, c->a_port);
		BIND_F(s, 6, c->b_node);
		BIND_F(s, 7, c->b_port);
		sqlite3_bind_int(s, 8, c->twins_ok < 0 ? 0 : c->twins_ok);
		sqlite3_bind_int(s, 9, c->mtu_ok ? 1 : 0);
		sqlite3_bind_int(s, 10, c->same_port ? 1 : 0);
		e = trun(d, s, "topo_cable_add");
	}
	for (size_t i = 0; e == 0 && i < nprobes; i++) {
		const db_topo_probe *p = &probes[i];
		if (!(s = tprep(d,
				"INSERT INTO topo_probes (run_id, seq, a_node, a_netdev, b_node, b_netdev, "
				"twin, transport, result, p50_us, p99_us, gbps, mtu_largest, detail) "
				"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
				&e)))
			break;
		sqlite3_bind_int64(s, 1, id);
		sqlite3_bind_int64(s, 2, (int64_t)i);
		BIND_F(s, 3, p->a_node);
		BIND_F(s, 4, p->a_netdev);
		BIND_F(s, 5, p->b_node);
		BIND_F(s, 6, p->b_netdev);
		sqlite3_bind_int(s, 7, p->twin < 0 ? 0 : p->twin);
		BIND_F(s, 8, p->transport);
		BIND_F(s, 9, p->result);
		bind_opt_real(s, 10, p->p50_us);
		bind_opt_real(s, 11, p->p99_us);
		bind_opt_real(s, 12, p->gbps);
		bind_opt_int(s, 13, p->mtu_largest);
		bind_str(s, 14, p->detail ? p->detail : "{}");
		e = trun(d, s, "topo_probe_add");
	}
	if (e == 0 && (s = tprep(d,
				 "DELETE FROM topo_runs WHERE id NOT IN "
				 "(SELECT id FROM topo_runs ORDER BY id DESC LIMIT ?1)",
				 &e))) {
		sqlite3_bind_int(s, 1, DB_TOPO_KEEP_RUNS);
		e = trun(d, s, "topo_run_prune");
	}
	e = tx_end(d, e);
	if (e == 0)
		r->id = id;
	return e;
}

int db_topo_run_latest(db *d, db_topo_run *out)
{
	if (!d || !out)
		return -EINVAL;
	memset(out, 0, sizeof *out);
	int e = 0;
	sqlite3_stmt *s = tprep(d,
				"SELECT id, started_at, finished_at, duration_ms, expect, quick, class, "
				"result, n_nodes, n_findings, verdict FROM topo_runs "
				"ORDER BY id DESC LIMIT 1",
				&e);
	if (!s)
		return e;
	int rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		out->id = sqlite3_column_int64(s, 0);
		out->started_at = sqlite3_column_int64(s, 1);
		out->finished_at = sqlite3_column_int64(s, 2);
		out->duration_ms = sqlite3_column_int64(s, 3);
		COL_F(s, 4, out->expect);
		out->quick = sqlite3_column_int(s, 5) != 0;
		COL_F(s, 6, out->cls);
		COL_F(s, 7, out->result);
		out->n_nodes = sqlite3_column_int(s, 8);
		out->n_findings = sqlite3_column_int(s, 9);
		out->verdict = col_dup(s, 10);
		if (!out->verdict)
			e = -ENOMEM;
	} else {
		e = rc == SQLITE_DONE ? -ENOENT : fail(d, rc, "topo_run_latest");
	}
	sqlite3_finalize(s);
	return e;
}

void db_topo_run_free(db_topo_run *r)
{
	if (!r)
		return;
	free(r->verdict);
	r->verdict = NULL;
}

int db_topo_cables(db *d, int64_t run_id, db_topo_cable **out, size_t *n)
{
	if (!d || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0, rc;
	sqlite3_stmt *s = tprep(d,
				"SELECT kind, a_node, a_port, b_node, b_port, twins_ok, mtu_ok, same_port "
				"FROM topo_cables WHERE run_id = ?1 ORDER BY seq",
				&e);
	if (!s)
		return e;
	sqlite3_bind_int64(s, 1, run_id);
	db_topo_cable *arr = NULL;
	size_t cnt = 0, cap = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if ((e = grow((void **)&arr, &cap, cnt, sizeof *arr)) < 0)
			break;
		db_topo_cable *c = &arr[cnt++];
		memset(c, 0, sizeof *c);
		COL_F(s, 0, c->kind);
		COL_F(s, 1, c->a_node);
		COL_F(s, 2, c->a_port);
		COL_F(s, 3, c->b_node);
		COL_F(s, 4, c->b_port);
		c->twins_ok = sqlite3_column_int(s, 5);
		c->mtu_ok = sqlite3_column_int(s, 6) != 0;
		c->same_port = sqlite3_column_int(s, 7) != 0;
	}
	if (e == 0 && rc != SQLITE_DONE)
		e = fail(d, rc, "topo_cables");
	sqlite3_finalize(s);
	if (e < 0) {
		free(arr);
		return e;
	}
	*out = arr;
	*n = cnt;
	return 0;
}

int db_topo_probes(db *d, int64_t run_id, db_topo_probe **out, size_t *n)
{
	if (!d || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0, rc;
	sqlite3_stmt *s = tprep(d,
				"SELECT a_node, a_netdev, b_node, b_netdev, twin, transport, result, "
				"p50_us, p99_us, gbps, mtu_largest FROM topo_probes WHERE run_id = ?1 "
				"ORDER BY seq",
				&e);
	if (!s)
		return e;
	sqlite3_bind_int64(s, 1, run_id);
	db_topo_probe *arr = NULL;
	size_t cnt = 0, cap = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if ((e = grow((void **)&arr, &cap, cnt, sizeof *arr)) < 0)
			break;
		db_topo_probe *p = &arr[cnt++];
		memset(p, 0, sizeof *p);
		COL_F(s, 0, p->a_node);
		COL_F(s, 1, p->a_netdev);
		COL_F(s, 2, p->b_node);
		COL_F(s, 3, p->b_netdev);
		p->twin = sqlite3_column_int(s, 4);
		COL_F(s, 5, p->transport);
		COL_F(s, 6, p->result);
		p->p50_us = col_opt_real(s, 7);
		p->p99_us = col_opt_real(s, 8);
		p->gbps = col_opt_real(s, 9);
		p->mtu_largest = col_opt_int(s, 10);
	}
	if (e == 0 && rc != SQLITE_DONE)
		e = fail(d, rc, "topo_probes");
	sqlite3_finalize(s);
	if (e < 0) {
		free(arr);
		return e;
	}
	*out = arr;
	*n = cnt;
	return 0;
}

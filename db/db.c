/* db: the head's cluster.db. See db.h for the contract.
 *
 * This file: open and close, pragmas, migrations (the schema), transactions,
 * the statement cache, SQLite error mapping and the small bind/column
 * helpers (db_internal.h). The tables' queries live in one file per table
 * group: db_nodes.c (cluster, nodes, tokens, joins, revoked certificates,
 * events), db_fabric.c, db_jobs.c (groups, jobs, ranks), db_services.c
 * (supervised services), db_topo.c
 * (topology runs). Values are always bound to prepared statements; the only
 * statement text built at run time is "PRAGMA user_version = N" with N a
 * compile-time migration number, because PRAGMA cannot take a bound
 * parameter.
 *
 * The connection is single-threaded (SQLITE_OPEN_NOMUTEX): only the agent's
 * event loop thread may use a db handle. */
#include "db.h"
#include "db_internal.h"

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
	/* 6: one node's newest events without reading the whole log (issue 15,
	 * db_node_events). IF NOT EXISTS: a database put back to an older version
	 * by dropping tables keeps its indexes on events. */
	"CREATE INDEX IF NOT EXISTS events_node ON events(node_id, id);",
	/* 7: services (issue 19). A node's memory as its heartbeat reports it, in
	 * bytes (0: never reported): MemTotal, MemAvailable, the budget services
	 * may use (serve.memory_budget_gib or the planner's usable memory) and
	 * when it was reported; and who manages a job ("serve:NAME" for a
	 * service's run, '' for a job a user ran). */
	"ALTER TABLE nodes ADD COLUMN mem_total INTEGER NOT NULL DEFAULT 0 CHECK (mem_total >= 0);"
	"ALTER TABLE nodes ADD COLUMN mem_available INTEGER NOT NULL DEFAULT 0"
	"  CHECK (mem_available >= 0);"
	"ALTER TABLE nodes ADD COLUMN mem_budget INTEGER NOT NULL DEFAULT 0 CHECK (mem_budget >= 0);"
	"ALTER TABLE nodes ADD COLUMN mem_at INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE jobs ADD COLUMN managed_by TEXT NOT NULL DEFAULT '';",
	/* 8: supervised services (issue 19, db_services.c). plan is what the CLI
	 * rendered (`serve --dry-run -o json`), caller who started it (its runs
	 * run as that user), need the memory it was admitted with per node id
	 * ({"NODE_ID": bytes}), endpoint where it answers once ready. run_id is
	 * the current (or last) run's job id (0: none yet); failures count the
	 * runs that failed since the last ready one (the restart limit),
	 * restarts every run after the first. */
	"CREATE TABLE services ("
	"  name        TEXT PRIMARY KEY NOT NULL CHECK (length(name) BETWEEN 1 AND 63),"
	"  group_name  TEXT NOT NULL CHECK (length(group_name) > 0),"
	"  recipe      TEXT NOT NULL DEFAULT '',"
	"  runtime     TEXT NOT NULL DEFAULT '',"
	"  model       TEXT NOT NULL DEFAULT '',"
	"  owner       TEXT NOT NULL CHECK (length(owner) > 0),"
	"  uid         INTEGER NOT NULL DEFAULT -1,"
	"  state       TEXT NOT NULL CHECK (state IN ('starting', 'ready', 'unhealthy', "
	"              'restarting', 'failed', 'stopped')),"
	"  plan        TEXT NOT NULL CHECK (json_valid(plan)),"
	"  caller      TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(caller)),"
	"  need        TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(need)),"
	"  endpoint    TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(endpoint)),"
	"  run_id      INTEGER NOT NULL DEFAULT 0 CHECK (run_id >= 0),"
	"  run_started INTEGER NOT NULL DEFAULT 0,"
	"  restarts    INTEGER NOT NULL DEFAULT 0 CHECK (restarts >= 0),"
	"  failures    INTEGER NOT NULL DEFAULT 0 CHECK (failures >= 0),"
	"  forced      INTEGER NOT NULL DEFAULT 0 CHECK (forced IN (0, 1)),"
	"  last_error  TEXT NOT NULL DEFAULT '',"
	"  created_at  INTEGER NOT NULL,"
	"  updated_at  INTEGER NOT NULL"
	") STRICT;",
	/* 9: a service may be `waiting` for a member that is away (issue 28).
	 * SQLite cannot change a CHECK: the table is made again and its rows
	 * copied (nothing references it). */
	"CREATE TABLE services_new ("
	"  name        TEXT PRIMARY KEY NOT NULL CHECK (length(name) BETWEEN 1 AND 63),"
	"  group_name  TEXT NOT NULL CHECK (length(group_name) > 0),"
	"  recipe      TEXT NOT NULL DEFAULT '',"
	"  runtime     TEXT NOT NULL DEFAULT '',"
	"  model       TEXT NOT NULL DEFAULT '',"
	"  owner       TEXT NOT NULL CHECK (length(owner) > 0),"
	"  uid         INTEGER NOT NULL DEFAULT -1,"
	"  state       TEXT NOT NULL CHECK (state IN ('starting', 'ready', 'unhealthy', "
	"              'restarting', 'waiting', 'failed', 'stopped')),"
	"  plan        TEXT NOT NULL CHECK (json_valid(plan)),"
	"  caller      TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(caller)),"
	"  need        TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(need)),"
	"  endpoint    TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(endpoint)),"
	"  run_id      INTEGER NOT NULL DEFAULT 0 CHECK (run_id >= 0),"
	"  run_started INTEGER NOT NULL DEFAULT 0,"
	"  restarts    INTEGER NOT NULL DEFAULT 0 CHECK (restarts >= 0),"
	"  failures    INTEGER NOT NULL DEFAULT 0 CHECK (failures >= 0),"
	"  forced      INTEGER NOT NULL DEFAULT 0 CHECK (forced IN (0, 1)),"
	"  last_error  TEXT NOT NULL DEFAULT '',"
	"  created_at  INTEGER NOT NULL,"
	"  updated_at  INTEGER NOT NULL"
	") STRICT;"
	"INSERT INTO services_new SELECT * FROM services;"
	"DROP TABLE services;"
	"ALTER TABLE services_new RENAME TO services;",
};
#define DB_SCHEMA_VERSION ((int)ARRAY_SIZE(migrations))

/* ---------- the connection and its statement cache ---------- */

/* One prepared statement per SQL text, found by the text's address: every
 * text is a static array of an area file, so the address is its identity. A
 * few dozen statements: a linear scan costs less than one sqlite3_step. */
struct db_cached {
	const char *sql;
	sqlite3_stmt *st;
};

struct db {
	sqlite3 *h;
	struct db_cached *cache;
	size_t n_cache, cap_cache;
};

static const char SQL_BEGIN[] = "BEGIN IMMEDIATE";
static const char SQL_COMMIT[] = "COMMIT";
static const char SQL_ROLLBACK[] = "ROLLBACK";

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

int db_fail(db *d, int rc, const char *op)
{
	int e = err_of(d, rc);
	const char *m = d && d->h ? sqlite3_errmsg(d->h) : sqlite3_errstr(rc);
	if ((rc & 0xff) == SQLITE_CONSTRAINT)
		log_debug("db_constraint", "op=%s rc=%d err=%s", op, rc, log_q(m));
	else
		log_error("db_error", "op=%s rc=%d err=%s", op, rc, log_q(m));
	return e;
}

sqlite3_stmt *db_stmt(db *d, const char *sql, int *err)
{
	for (size_t i = 0; i < d->n_cache; i++)
		if (d->cache[i].sql == sql)
			return d->cache[i].st;
	int e = db_grow((void **)&d->cache, &d->cap_cache, d->n_cache, sizeof *d->cache);
	if (e < 0) {
		*err = e;
		return NULL;
	}
	sqlite3_stmt *s = NULL;
	int rc = sqlite3_prepare_v3(d->h, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, NULL);
	if (rc != SQLITE_OK) {
		sqlite3_finalize(s);
		*err = db_fail(d, rc, "prepare");
		return NULL;
	}
	d->cache[d->n_cache].sql = sql;
	d->cache[d->n_cache].st = s;
	d->n_cache++;
	return s;
}

void db_done(sqlite3_stmt *s)
{
	if (s) {
		sqlite3_reset(s);
		sqlite3_clear_bindings(s);
	}
}

/* Finalize every cached statement that is not running; free the cache when
 * none is left. */
static void cache_release(db *d)
{
	size_t keep = 0;
	for (size_t i = 0; i < d->n_cache; i++) {
		if (sqlite3_stmt_busy(d->cache[i].st))
			d->cache[keep++] = d->cache[i];
		else
			sqlite3_finalize(d->cache[i].st);
	}
	d->n_cache = keep;
	if (keep == 0) {
		free(d->cache);
		d->cache = NULL;
		d->cap_cache = 0;
	}
}

int db_bind_field(sqlite3_stmt *s, int i, const char *f, size_t cap)
{
	return sqlite3_bind_text(s, i, f, (int)strnlen(f, cap), SQLITE_STATIC);
}

int db_bind_str(sqlite3_stmt *s, int i, const char *v)
{
	if (!v)
		return sqlite3_bind_null(s, i);
	return sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC);
}

void db_bind_opt_int(sqlite3_stmt *s, int i, int64_t v)
{
	if (v < 0)
		sqlite3_bind_null(s, i);
	else
		sqlite3_bind_int64(s, i, v);
}

void db_col_str(sqlite3_stmt *s, int i, char *dst, size_t cap)
{
	const unsigned char *v = sqlite3_column_text(s, i);
	util_strlcpy(dst, v ? (const char *)v : "", cap);
}

int64_t db_col_opt_int(sqlite3_stmt *s, int i)
{
	return sqlite3_column_type(s, i) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, i);
}

char *db_col_dup(sqlite3_stmt *s, int i)
{
	const unsigned char *v = sqlite3_column_text(s, i);
	return strdup(v ? (const char *)v : "");
}

int db_exec(db *d, sqlite3_stmt *s, const char *op)
{
	int rc;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW)
		;
	int e = rc == SQLITE_DONE ? 0 : db_fail(d, rc, op);
	db_done(s);
	return e;
}

static int run(db *d, const char *sql, const char *op)
{
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, sql, &e);
	return s ? db_exec(d, s, op) : e;
}

int db_tx_begin(db *d) { return run(d, SQL_BEGIN, "begin"); }

static void tx_rollback(db *d)
{
	/* Some errors (e.g. SQLITE_FULL, IOERR) roll back by themselves. */
	if (!sqlite3_get_autocommit(d->h))
		run(d, SQL_ROLLBACK, "rollback");
}

int db_tx_end(db *d, int e)
{
	if (e == 0) {
		e = run(d, SQL_COMMIT, "commit");
		if (e == 0)
			return 0;
	}
	tx_rollback(d);
	return e;
}

int db_update_one(db *d, sqlite3_stmt *s, const char *op)
{
	int e = db_tx_begin(d);
	if (e < 0) {
		db_done(s);
		return e;
	}
	e = db_exec(d, s, op);
	if (e == 0 && sqlite3_changes(d->h) == 0)
		e = -ENOENT;
	return db_tx_end(d, e);
}

int db_changes(db *d) { return sqlite3_changes(d->h); }

int64_t db_last_rowid(db *d) { return sqlite3_last_insert_rowid(d->h); }

int db_rows(db *d, sqlite3_stmt *s, size_t elem, int (*row)(sqlite3_stmt *s, void *elem),
	    void **out, size_t *n, const char *op)
{
	*out = NULL;
	*n = 0;
	char *arr = NULL;
	size_t cnt = 0, cap = 0;
	int e = 0, rc;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if ((e = db_grow((void **)&arr, &cap, cnt, elem)) < 0)
			break;
		memset(arr + cnt * elem, 0, elem);
		if ((e = row(s, arr + cnt * elem)) < 0)
			break;
		cnt++;
	}
	if (e == 0 && rc != SQLITE_DONE)
		e = db_fail(d, rc, op);
	db_done(s);
	if (e < 0) {
		free(arr);
		return e;
	}
	*out = arr;
	*n = cnt;
	return 0;
}

int db_grow(void **arr, size_t *cap, size_t n, size_t elem)
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

bool db_is_empty(const char *s) { return !s || !*s; }

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
		e = rc == SQLITE_DONE ? -EIO : db_fail(d, rc, sql);
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
		e = db_fail(d, rc, "journal_mode");
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
		if ((e = db_tx_begin(d)) < 0)
			return e;
		/* Re-read under the write lock: another process may have migrated. */
		if ((e = pragma_int(d, "PRAGMA user_version", &cur)) < 0)
			return db_tx_end(d, e);
		if (cur > DB_SCHEMA_VERSION)
			return db_tx_end(d, -EPROTO);
		if (cur == DB_SCHEMA_VERSION) {
			tx_rollback(d);
			return 0;
		}
		char bump[48];
		snprintf(bump, sizeof bump, "PRAGMA user_version = %d", cur + 1);
		e = exec_sql(d, migrations[cur], "migrate");
		if (e == 0)
			e = exec_sql(d, bump, "migrate_version");
		if ((e = db_tx_end(d, e)) < 0) {
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
		e = db_fail(d, rc, "open");
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
	for (size_t i = 0; i < d->n_cache; i++)
		sqlite3_finalize(d->cache[i].st);
	free(d->cache);
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
		e = db_fail(d, rc, "integrity_check");
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
			e = db_fail(d, rc, "foreign_key_check");
		else if ((rc = sqlite3_step(s)) != SQLITE_DONE)
			e = rc == SQLITE_ROW ? -EIO : db_fail(d, rc, "foreign_key_check");
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
	 * (db_done()), so none is running here; a busy one is left alone anyway. */
	cache_release(d);
	sqlite3_db_release_memory(d->h);
}

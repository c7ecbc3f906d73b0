/* db internals: what db.c gives the area files (db_nodes.c, db_fabric.c,
 * db_jobs.c, db_topo.c). Never included outside db/.
 *
 * One statement style: each area file keeps its SQL as
 *     static const char SQL_NAME[] = "...";
 * next to the functions that use it, and runs it as
 *     sqlite3_stmt *s = db_stmt(d, SQL_NAME, &e);   bind; step...
 *     db_done(s);        (or db_exec(d, s, op), which steps and finishes)
 * db_stmt() prepares each text once per connection (SQLITE_PREPARE_PERSISTENT)
 * and caches it under the text's address; db_done() resets it and clears its
 * bindings. A statement is finished (db_done or db_exec) before the function
 * that took it returns, so db_release_memory() may finalize any cached one.
 * Values are always bound, never spliced into SQL text.
 *
 * Bindings are SQLITE_STATIC: every statement is finished before the function
 * that bound it returns, so the strings outlive their use. */
#ifndef SPARK_DB_INTERNAL_H
#define SPARK_DB_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include "db.h"

/* The cached statement for this SQL text (keyed by the address of a static
 * array), reset and with no bindings. NULL on failure, with *err set. */
sqlite3_stmt *db_stmt(db *d, const char *sql, int *err);
/* Reset and clear the bindings of a statement from db_stmt (NULL is fine). */
void db_done(sqlite3_stmt *s);
/* Step a statement to its end (rows ignored), then db_done it. 0 or -errno. */
int db_exec(db *d, sqlite3_stmt *s, const char *op);

/* Log an unexpected SQLite failure of op and map rc to a negative errno.
 * Constraint failures are the caller's business and logged at debug only. */
int db_fail(db *d, int rc, const char *op);

/* Transactions (BEGIN IMMEDIATE). db_tx_end commits when e == 0, rolls back
 * otherwise, and returns the final code. */
int db_tx_begin(db *d);
int db_tx_end(db *d, int e);
/* One UPDATE/DELETE (bound, from db_stmt) in its own transaction; -ENOENT if
 * it touched no row. */
int db_update_one(db *d, sqlite3_stmt *s, const char *op);
/* Rows changed by the last statement; rowid of the last insert. */
int db_changes(db *d);
int64_t db_last_rowid(db *d);

/* Growable array for *_list results: room for element n. 0 or -ENOMEM. */
int db_grow(void **arr, size_t *cap, size_t n, size_t elem);
/* Every row of a bound statement from db_stmt into a new array of elem-size
 * entries, each zeroed and filled by row (0, or -ENOMEM), then db_done. On
 * success *out (caller frees; NULL for none) and *n; on failure nothing is
 * kept. op names the query in the log. */
int db_rows(db *d, sqlite3_stmt *s, size_t elem, int (*row)(sqlite3_stmt *s, void *elem),
	    void **out, size_t *n, const char *op);

bool db_is_empty(const char *s);

/* Binding and reading values. A fixed-size struct field is bound no further
 * than its end even if unterminated; a NULL C string binds SQL NULL; a
 * negative optional number binds NULL and NULL reads back as -1. */
int db_bind_field(sqlite3_stmt *s, int i, const char *f, size_t cap);
#define BIND_F(s, i, field) db_bind_field((s), (i), (field), sizeof(field))
int db_bind_str(sqlite3_stmt *s, int i, const char *v);
void db_bind_opt_int(sqlite3_stmt *s, int i, int64_t v);
void db_col_str(sqlite3_stmt *s, int i, char *dst, size_t cap);
#define COL_F(s, i, field) db_col_str((s), (i), (field), sizeof(field))
int64_t db_col_opt_int(sqlite3_stmt *s, int i);
char *db_col_dup(sqlite3_stmt *s, int i); /* malloc'd copy, NULL on ENOMEM */

/* Node rows (db_nodes.c), for the areas that select nodes too. */
#define NODE_COLS \
	"id, name, role, state, address, version, cert_serial, joined_at, last_seen, drained, " \
	"connected_at, key_hash"
/* What a select reads: NODE_COLS and the memory the node last reported. */
#define NODE_READ_COLS NODE_COLS ", mem_total, mem_available, mem_budget, mem_at"
#define NODE_READ_NCOLS 16
/* Fill n from a row of NODE_READ_COLS (columns 0..15), with the shown state:
 * "draining" for a drained ready node, "joining" for a worker that never
 * connected. */
void db_node_row(sqlite3_stmt *s, db_node *n);
int db_node_row_v(sqlite3_stmt *s, void *n); /* the same, as a db_rows row function */

#endif

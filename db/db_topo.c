/* db: topology validation runs (issue 5) with their cables and probe
 * results. See db.h. */

#include "db.h"
#include "db_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "util.h"

/* ---------- topology validation runs (issue 5) ---------- */

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

static const char SQL_TOPO_RUN_INSERT[] =
	"INSERT INTO topo_runs (started_at, finished_at, duration_ms, expect, "
	"quick, class, result, n_nodes, n_findings, verdict) "
	"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";
static const char SQL_TOPO_CABLE_INSERT[] =
	"INSERT INTO topo_cables (run_id, seq, kind, a_node, a_port, b_node, "
	"b_port, twins_ok, mtu_ok, same_port) "
	"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";
static const char SQL_TOPO_PROBE_INSERT[] =
	"INSERT INTO topo_probes (run_id, seq, a_node, a_netdev, b_node, b_netdev, "
	"twin, transport, result, p50_us, p99_us, gbps, mtu_largest, detail) "
	"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";
static const char SQL_TOPO_RUN_PRUNE[] =
	"DELETE FROM topo_runs WHERE id NOT IN "
	"(SELECT id FROM topo_runs ORDER BY id DESC LIMIT ?1)";

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
	int e = db_tx_begin(d);
	if (e < 0)
		return e;
	sqlite3_stmt *s = db_stmt(d, SQL_TOPO_RUN_INSERT, &e);
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
		db_bind_str(s, 10, r->verdict);
		e = db_exec(d, s, "topo_run_add");
	}
	int64_t id = e == 0 ? db_last_rowid(d) : 0;
	for (size_t i = 0; e == 0 && i < ncables; i++) {
		const db_topo_cable *c = &cables[i];
		if (!(s = db_stmt(d, SQL_TOPO_CABLE_INSERT, &e)))
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
		e = db_exec(d, s, "topo_cable_add");
	}
	for (size_t i = 0; e == 0 && i < nprobes; i++) {
		const db_topo_probe *p = &probes[i];
		if (!(s = db_stmt(d, SQL_TOPO_PROBE_INSERT, &e)))
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
		db_bind_opt_int(s, 13, p->mtu_largest);
		db_bind_str(s, 14, p->detail ? p->detail : "{}");
		e = db_exec(d, s, "topo_probe_add");
	}
	if (e == 0 && (s = db_stmt(d, SQL_TOPO_RUN_PRUNE, &e))) {
		sqlite3_bind_int(s, 1, DB_TOPO_KEEP_RUNS);
		e = db_exec(d, s, "topo_run_prune");
	}
	e = db_tx_end(d, e);
	if (e == 0)
		r->id = id;
	return e;
}

static const char SQL_TOPO_RUN_LATEST[] =
	"SELECT id, started_at, finished_at, duration_ms, expect, quick, class, "
	"result, n_nodes, n_findings, verdict FROM topo_runs "
	"ORDER BY id DESC LIMIT 1";

int db_topo_run_latest(db *d, db_topo_run *out)
{
	if (!d || !out)
		return -EINVAL;
	memset(out, 0, sizeof *out);
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_TOPO_RUN_LATEST, &e);
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
		out->verdict = db_col_dup(s, 10);
		if (!out->verdict)
			e = -ENOMEM;
	} else {
		e = rc == SQLITE_DONE ? -ENOENT : db_fail(d, rc, "topo_run_latest");
	}
	db_done(s);
	return e;
}

void db_topo_run_free(db_topo_run *r)
{
	if (!r)
		return;
	free(r->verdict);
	r->verdict = NULL;
}

static const char SQL_TOPO_CABLES[] =
	"SELECT kind, a_node, a_port, b_node, b_port, twins_ok, mtu_ok, same_port "
	"FROM topo_cables WHERE run_id = ?1 ORDER BY seq";

static int topo_cables_row(sqlite3_stmt *s, void *p)
{
	db_topo_cable *c = p;
	COL_F(s, 0, c->kind);
	COL_F(s, 1, c->a_node);
	COL_F(s, 2, c->a_port);
	COL_F(s, 3, c->b_node);
	COL_F(s, 4, c->b_port);
	c->twins_ok = sqlite3_column_int(s, 5);
	c->mtu_ok = sqlite3_column_int(s, 6) != 0;
	c->same_port = sqlite3_column_int(s, 7) != 0;
	return 0;
}

int db_topo_cables(db *d, int64_t run_id, db_topo_cable **out, size_t *n)
{
	if (!d || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_TOPO_CABLES, &e);
	if (!s)
		return e;
	sqlite3_bind_int64(s, 1, run_id);
	return db_rows(d, s, sizeof **out, topo_cables_row, (void **)out, n, "topo_cables");
}

static const char SQL_TOPO_PROBES[] =
	"SELECT a_node, a_netdev, b_node, b_netdev, twin, transport, result, "
	"p50_us, p99_us, gbps, mtu_largest FROM topo_probes WHERE run_id = ?1 "
	"ORDER BY seq";

static int topo_probes_row(sqlite3_stmt *s, void *elem)
{
	db_topo_probe *p = elem;
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
	p->mtu_largest = db_col_opt_int(s, 10);
	return 0;
}

int db_topo_probes(db *d, int64_t run_id, db_topo_probe **out, size_t *n)
{
	if (!d || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_TOPO_PROBES, &e);
	if (!s)
		return e;
	sqlite3_bind_int64(s, 1, run_id);
	return db_rows(d, s, sizeof **out, topo_probes_row, (void **)out, n, "topo_probes");
}

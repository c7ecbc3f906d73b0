/* db: fabric reports (issue 4): each node's last discovery and findings,
 * and one row per twin netdev. See db.h. */

#include "db.h"
#include "db_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "util.h"

#define FPORT_COLS \
	"port, twin, netdev, present, carrier, operstate, speed_mbps, mtu, rdma_device, " \
	"rdma_state, gid_index"

/* ---------- fabric reports ---------- */

static const char SQL_FPORT_INSERT[] =
	"INSERT INTO fabric_ports (" FPORT_COLS ", node_id, seq) "
	"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)";

static int fport_insert(db *d, const char *node_id, size_t seq, const db_fabric_port *p)
{
	if (!memchr(p->netdev, '\0', sizeof p->netdev) || !p->netdev[0])
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_FPORT_INSERT, &e);
	if (!s)
		return e;
	BIND_F(s, 1, p->port);
	sqlite3_bind_int(s, 2, p->twin < 0 ? 0 : p->twin);
	BIND_F(s, 3, p->netdev);
	sqlite3_bind_int(s, 4, p->present ? 1 : 0);
	db_bind_opt_int(s, 5, p->carrier < 0 ? -1 : p->carrier != 0);
	BIND_F(s, 6, p->operstate);
	db_bind_opt_int(s, 7, p->speed_mbps);
	db_bind_opt_int(s, 8, p->mtu);
	BIND_F(s, 9, p->rdma_device);
	BIND_F(s, 10, p->rdma_state);
	db_bind_opt_int(s, 11, p->gid_index);
	db_bind_str(s, 12, node_id);
	sqlite3_bind_int64(s, 13, (int64_t)seq);
	return db_exec(d, s, "fabric_port_insert");
}

static const char SQL_FABRIC_SET[] =
	"INSERT INTO node_fabric (node_id, updated_at, discovery, findings, n_findings) "
	"VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (node_id) DO UPDATE SET "
	"updated_at = excluded.updated_at, discovery = excluded.discovery, "
	"findings = excluded.findings, n_findings = excluded.n_findings";
static const char SQL_FPORT_CLEAR[] =
	"DELETE FROM fabric_ports WHERE node_id = ?1";

int db_fabric_set(db *d, const char *node_id, int64_t ts, const char *discovery_json,
		  const char *findings_json, int64_t n_findings, const db_fabric_port *ports,
		  size_t n)
{
	if (!d || db_is_empty(node_id) || !discovery_json || n_findings < 0 || (n && !ports))
		return -EINVAL;
	int e = db_tx_begin(d);
	if (e < 0)
		return e;
	db_node node;
	e = db_node_get(d, node_id, &node);
	sqlite3_stmt *s = NULL;
	if (e == 0 && (s = db_stmt(d, SQL_FABRIC_SET, &e))) {
		db_bind_str(s, 1, node_id);
		sqlite3_bind_int64(s, 2, ts);
		db_bind_str(s, 3, discovery_json);
		db_bind_str(s, 4, findings_json ? findings_json : "[]");
		sqlite3_bind_int64(s, 5, n_findings);
		e = db_exec(d, s, "fabric_set");
	}
	if (e == 0 && (s = db_stmt(d, SQL_FPORT_CLEAR, &e))) {
		db_bind_str(s, 1, node_id);
		e = db_exec(d, s, "fabric_ports_clear");
	}
	for (size_t i = 0; e == 0 && i < n; i++)
		e = fport_insert(d, node_id, i, &ports[i]);
	return db_tx_end(d, e);
}

static const char SQL_FABRIC_GET[] =
	"SELECT updated_at, n_findings, discovery, findings FROM node_fabric WHERE node_id = ?1";

int db_fabric_get(db *d, const char *node_id, db_fabric *out)
{
	if (!d || !node_id || !out)
		return -EINVAL;
	memset(out, 0, sizeof *out);
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_FABRIC_GET, &e);
	if (!s)
		return e;
	db_bind_str(s, 1, node_id);
	int rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		out->updated_at = sqlite3_column_int64(s, 0);
		out->n_findings = sqlite3_column_int64(s, 1);
		out->discovery = db_col_dup(s, 2);
		out->findings = db_col_dup(s, 3);
		if (!out->discovery || !out->findings) {
			db_fabric_free(out);
			e = -ENOMEM;
		}
	} else {
		e = rc == SQLITE_DONE ? -ENOENT : db_fail(d, rc, "fabric_get");
	}
	db_done(s);
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

static const char SQL_FPORT_LIST[] =
	"SELECT " FPORT_COLS " FROM fabric_ports WHERE node_id = ?1 ORDER BY seq ASC";

static int fabric_ports_row(sqlite3_stmt *s, void *elem)
{
	db_fabric_port *p = elem;
	COL_F(s, 0, p->port);
	p->twin = sqlite3_column_int(s, 1);
	COL_F(s, 2, p->netdev);
	p->present = sqlite3_column_int(s, 3) != 0;
	p->carrier = (int)db_col_opt_int(s, 4);
	COL_F(s, 5, p->operstate);
	p->speed_mbps = db_col_opt_int(s, 6);
	p->mtu = db_col_opt_int(s, 7);
	COL_F(s, 8, p->rdma_device);
	COL_F(s, 9, p->rdma_state);
	p->gid_index = (int)db_col_opt_int(s, 10);
	return 0;
}

int db_fabric_ports(db *d, const char *node_id, db_fabric_port **out, size_t *n)
{
	if (!d || !node_id || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_FPORT_LIST, &e);
	if (!s)
		return e;
	db_bind_str(s, 1, node_id);
	return db_rows(d, s, sizeof **out, fabric_ports_row, (void **)out, n, "fabric_ports");
}

/* Rows, and physical ports with at least one twin's carrier up. */
static const char SQL_FPORT_UP[] =
	"SELECT count(*), count(DISTINCT CASE WHEN carrier = 1 THEN port END) "
	"FROM fabric_ports WHERE node_id = ?1";

int db_fabric_ports_up(db *d, const char *node_id)
{
	if (!d || !node_id)
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_FPORT_UP, &e);
	if (!s)
		return e;
	db_bind_str(s, 1, node_id);
	int rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		e = sqlite3_column_int64(s, 0) == 0 ? -ENOENT : sqlite3_column_int(s, 1);
	else
		e = db_fail(d, rc, "fabric_ports_up");
	db_done(s);
	return e;
}

/* db: groups (ordered sets of nodes), jobs and their ranks (issue 6).
 * See db.h. */

#include "db.h"
#include "db_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "util.h"

#define GROUP_COLS \
	"g.name, g.shared, g.topology, g.shape, g.note, g.created_by, g.created_at, " \
	"(SELECT count(*) FROM group_members m WHERE m.group_name = g.name)"
#define JOB_COLS \
	"id, name, group_name, owner, uid, launcher, ranks_per_node, world_size, command, state, " \
	"reason, exit_code, timeout_s, created_at, started_at, ended_at, managed_by"
#define RANK_COLS \
	"job_id, rank, node_id, node_name, local_rank, state, pid, exit_code, signal, started_at, " \
	"ended_at"

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

static int group_row_v(sqlite3_stmt *s, void *p)
{
	group_row(s, p);
	return 0;
}

static const char SQL_GROUP_GET[] =
	"SELECT " GROUP_COLS " FROM groups g WHERE g.name = ?1";
/* Another group holding the node that a new group (shared = ?2) may not share it with. */
static const char SQL_GROUP_CONFLICT[] =
	"SELECT g.name FROM group_members m JOIN groups g ON g.name = m.group_name "
	"WHERE m.node_id = ?1 AND (?2 = 0 OR g.shared = 0) ORDER BY g.name LIMIT 1";
static const char SQL_GROUP_INSERT[] =
	"INSERT INTO groups (name, shared, topology, shape, note, created_by, created_at) "
	"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
static const char SQL_GROUP_MEMBER_INSERT[] =
	"INSERT INTO group_members (group_name, node_id, seq) VALUES (?1, ?2, ?3)";

int db_group_create(db *d, const db_group *g, const char *const *node_ids, size_t n,
		    char *conflict_node, char *conflict_group)
{
	if (conflict_node)
		conflict_node[0] = '\0';
	if (conflict_group)
		conflict_group[0] = '\0';
	if (!d || !g || db_is_empty(g->name) || (n && !node_ids))
		return -EINVAL;
	int e = db_tx_begin(d);
	if (e < 0)
		return e;
	sqlite3_stmt *s = db_stmt(d, SQL_GROUP_GET, &e);
	if (s) { /* the name first: it is the caller's first mistake to report */
		db_bind_str(s, 1, g->name);
		int rc = sqlite3_step(s);
		e = rc == SQLITE_ROW ? -EEXIST : rc == SQLITE_DONE ? 0 : db_fail(d, rc, "group_get");
		db_done(s);
	}
	/* Membership rules before any insert, so a refused group leaves nothing behind. */
	for (size_t i = 0; e == 0 && i < n; i++) {
		db_node node;
		if ((e = db_node_get(d, node_ids[i], &node)) < 0) {
			if (conflict_node)
				util_strlcpy(conflict_node, node_ids[i], 64);
			break;
		}
		if (!(s = db_stmt(d, SQL_GROUP_CONFLICT, &e)))
			break;
		db_bind_str(s, 1, node_ids[i]);
		sqlite3_bind_int(s, 2, g->shared ? 1 : 0);
		int rc = sqlite3_step(s);
		if (rc == SQLITE_ROW) {
			if (conflict_node)
				util_strlcpy(conflict_node, node.name, 64);
			if (conflict_group)
				db_col_str(s, 0, conflict_group, 64);
			e = -EBUSY;
		} else if (rc != SQLITE_DONE) {
			e = db_fail(d, rc, "group_conflict");
		}
		db_done(s);
	}
	if (e == 0 && (s = db_stmt(d, SQL_GROUP_INSERT, &e))) {
		BIND_F(s, 1, g->name);
		sqlite3_bind_int(s, 2, g->shared ? 1 : 0);
		BIND_F(s, 3, g->topology);
		BIND_F(s, 4, g->shape);
		BIND_F(s, 5, g->note);
		BIND_F(s, 6, g->created_by);
		sqlite3_bind_int64(s, 7, g->created_at);
		e = db_exec(d, s, "group_insert");
	}
	for (size_t i = 0; e == 0 && i < n; i++) {
		if (!(s = db_stmt(d, SQL_GROUP_MEMBER_INSERT, &e)))
			break;
		BIND_F(s, 1, g->name);
		db_bind_str(s, 2, node_ids[i]);
		sqlite3_bind_int64(s, 3, (int64_t)i);
		e = db_exec(d, s, "group_member_insert");
		if (e == -EEXIST && conflict_node) /* the same node twice */
			util_strlcpy(conflict_node, node_ids[i], 64);
	}
	return db_tx_end(d, e);
}

int db_group_get(db *d, const char *name, db_group *out)
{
	if (!d || !name || !out)
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_GROUP_GET, &e);
	if (!s)
		return e;
	db_bind_str(s, 1, name);
	int rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		group_row(s, out);
	else
		e = rc == SQLITE_DONE ? -ENOENT : db_fail(d, rc, "group_get");
	db_done(s);
	return e;
}

static const char SQL_GROUP_LIST[] =
	"SELECT " GROUP_COLS " FROM groups g ORDER BY g.created_at, g.name";

int db_group_list(db *d, db_group **out, size_t *n)
{
	if (!d || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_GROUP_LIST, &e);
	if (!s)
		return e;
	return db_rows(d, s, sizeof **out, group_row_v, (void **)out, n, "group_list");
}

static const char SQL_GROUP_MEMBERS[] =
	"SELECT m.node_id, n.name, m.seq FROM group_members m JOIN nodes n ON n.id = m.node_id "
	"WHERE m.group_name = ?1 ORDER BY m.seq";

static int group_members_row(sqlite3_stmt *s, void *p)
{
	db_group_member *m = p;
	COL_F(s, 0, m->node_id);
	COL_F(s, 1, m->node_name);
	m->seq = sqlite3_column_int(s, 2);
	return 0;
}

int db_group_members(db *d, const char *name, db_group_member **out, size_t *n)
{
	if (!d || !name || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_GROUP_MEMBERS, &e);
	if (!s)
		return e;
	db_bind_str(s, 1, name);
	return db_rows(d, s, sizeof **out, group_members_row, (void **)out, n, "group_members");
}

static const char SQL_GROUP_DELETE[] =
	"DELETE FROM groups WHERE name = ?1";

int db_group_remove(db *d, const char *name)
{
	if (!d || db_is_empty(name))
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_GROUP_DELETE, &e);
	if (!s)
		return e;
	db_bind_str(s, 1, name);
	return db_update_one(d, s, "group_delete");
}

static const char SQL_MEMBERSHIPS[] =
	"SELECT m.group_name, m.node_id, g.shared FROM group_members m "
	"JOIN groups g ON g.name = m.group_name ORDER BY m.group_name, m.seq";

static int memberships_row(sqlite3_stmt *s, void *p)
{
	db_membership *m = p;
	COL_F(s, 0, m->group_name);
	COL_F(s, 1, m->node_id);
	m->shared = sqlite3_column_int(s, 2) != 0;
	return 0;
}

int db_group_memberships(db *d, db_membership **out, size_t *n)
{
	if (!d || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_MEMBERSHIPS, &e);
	if (!s)
		return e;
	return db_rows(d, s, sizeof **out, memberships_row, (void **)out, n, "memberships");
}

static const char SQL_NODE_GROUPS[] =
	"SELECT group_name FROM group_members WHERE node_id = ?1 ORDER BY group_name";

int db_node_groups(db *d, const char *node_id, char ***out, size_t *n)
{
	if (!d || !node_id || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0, rc;
	sqlite3_stmt *s = db_stmt(d, SQL_NODE_GROUPS, &e);
	if (!s)
		return e;
	db_bind_str(s, 1, node_id);
	char **arr = NULL;
	size_t cnt = 0, cap = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if ((e = db_grow((void **)&arr, &cap, cnt, sizeof *arr)) < 0)
			break;
		if (!(arr[cnt] = db_col_dup(s, 0))) {
			e = -ENOMEM;
			break;
		}
		cnt++;
	}
	if (e == 0 && rc != SQLITE_DONE)
		e = db_fail(d, rc, "node_groups");
	db_done(s);
	if (e < 0) {
		db_strv_free(arr, cnt);
		return e;
	}
	*out = arr;
	*n = cnt;
	return 0;
}

static const char SQL_GROUP_NODES[] =
	"SELECT " NODE_READ_COLS " FROM group_members m JOIN nodes n ON n.id = m.node_id "
	"WHERE m.group_name = ?1 ORDER BY m.seq";

int db_group_nodes(db *d, const char *group, db_node **out, size_t *n)
{
	if (!d || !group || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_GROUP_NODES, &e);
	if (!s)
		return e;
	db_bind_str(s, 1, group);
	return db_rows(d, s, sizeof **out, db_node_row_v, (void **)out, n, "group_nodes");
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
	COL_F(s, 16, j->managed_by);
}

static int job_row_v(sqlite3_stmt *s, void *p)
{
	job_row(s, p);
	return 0;
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

static int rank_row_v(sqlite3_stmt *s, void *p)
{
	rank_row(s, p);
	return 0;
}

static const char SQL_JOB_INSERT[] =
	"INSERT INTO jobs (name, group_name, owner, uid, launcher, ranks_per_node, world_size, "
	"command, spec, state, timeout_s, created_at, managed_by) "
	"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'starting', ?10, ?11, ?12)";
static const char SQL_JOB_RANK_INSERT[] =
	"INSERT INTO job_ranks (job_id, rank, node_id, node_name, local_rank, state) "
	"VALUES (?1, ?2, ?3, ?4, ?5, 'pending')";

int db_job_create(db *d, db_job *j, const char *spec_json, const db_job_rank *ranks, size_t n)
{
	if (!d || !j || !spec_json || db_is_empty(j->name) || db_is_empty(j->group_name) ||
	    db_is_empty(j->owner) || (n && !ranks))
		return -EINVAL;
	int e = db_tx_begin(d);
	if (e < 0)
		return e;
	sqlite3_stmt *s = db_stmt(d, SQL_JOB_INSERT, &e);
	if (s) {
		BIND_F(s, 1, j->name);
		BIND_F(s, 2, j->group_name);
		BIND_F(s, 3, j->owner);
		sqlite3_bind_int64(s, 4, j->uid);
		BIND_F(s, 5, j->launcher);
		sqlite3_bind_int(s, 6, j->ranks_per_node);
		sqlite3_bind_int(s, 7, j->world_size);
		BIND_F(s, 8, j->command);
		db_bind_str(s, 9, spec_json);
		sqlite3_bind_int64(s, 10, j->timeout_s);
		sqlite3_bind_int64(s, 11, j->created_at);
		BIND_F(s, 12, j->managed_by);
		e = db_exec(d, s, "job_insert");
	}
	int64_t id = e == 0 ? db_last_rowid(d) : 0;
	for (size_t i = 0; e == 0 && i < n; i++) {
		if (!(s = db_stmt(d, SQL_JOB_RANK_INSERT, &e)))
			break;
		sqlite3_bind_int64(s, 1, id);
		sqlite3_bind_int(s, 2, ranks[i].rank);
		BIND_F(s, 3, ranks[i].node_id);
		BIND_F(s, 4, ranks[i].node_name);
		sqlite3_bind_int(s, 5, ranks[i].local_rank);
		e = db_exec(d, s, "job_rank_insert");
	}
	e = db_tx_end(d, e);
	if (e == 0) {
		j->id = id;
		util_strlcpy(j->state, "starting", sizeof j->state);
		j->exit_code = -1;
	}
	return e;
}

static int job_get(db *d, sqlite3_stmt *s, db_job *out, const char *op)
{
	int rc = sqlite3_step(s);
	int e = 0;
	if (rc == SQLITE_ROW)
		job_row(s, out);
	else
		e = rc == SQLITE_DONE ? -ENOENT : db_fail(d, rc, op);
	db_done(s);
	return e;
}

static const char SQL_JOB_GET[] =
	"SELECT " JOB_COLS " FROM jobs WHERE id = ?1";

int db_job_get(db *d, int64_t id, db_job *out)
{
	if (!d || !out)
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_JOB_GET, &e);
	if (!s)
		return e;
	sqlite3_bind_int64(s, 1, id);
	return job_get(d, s, out, "job_get");
}

static const char SQL_JOB_BY_NAME[] =
	"SELECT " JOB_COLS " FROM jobs WHERE name = ?1 AND (?2 IS NULL OR owner = ?2) "
	"ORDER BY id DESC LIMIT 1";

int db_job_get_by_name(db *d, const char *name, const char *owner, db_job *out)
{
	if (!d || !name || !out)
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_JOB_BY_NAME, &e);
	if (!s)
		return e;
	db_bind_str(s, 1, name);
	db_bind_str(s, 2, owner);
	return job_get(d, s, out, "job_by_name");
}

static const char SQL_JOB_LIST[] =
	"SELECT " JOB_COLS " FROM jobs WHERE (?1 IS NULL OR owner = ?1) "
	"AND (?2 = 0 OR state IN ('starting', 'running')) ORDER BY id DESC LIMIT ?3";

int db_job_list(db *d, const char *owner, bool active_only, size_t limit, db_job **out,
		size_t *n)
{
	if (!d || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_JOB_LIST, &e);
	if (!s)
		return e;
	db_bind_str(s, 1, owner);
	sqlite3_bind_int(s, 2, active_only ? 1 : 0);
	sqlite3_bind_int64(s, 3, limit ? (int64_t)limit : -1);
	return db_rows(d, s, sizeof **out, job_row_v, (void **)out, n, "job_list");
}

static const char SQL_JOB_SPEC[] =
	"SELECT spec FROM jobs WHERE id = ?1";

int db_job_spec(db *d, int64_t id, char **out)
{
	if (!d || !out)
		return -EINVAL;
	*out = NULL;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_JOB_SPEC, &e);
	if (!s)
		return e;
	sqlite3_bind_int64(s, 1, id);
	int rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		*out = db_col_dup(s, 0);
		if (!*out)
			e = -ENOMEM;
	} else {
		e = rc == SQLITE_DONE ? -ENOENT : db_fail(d, rc, "job_spec");
	}
	db_done(s);
	return e;
}

static const char SQL_JOB_STATE[] =
	"UPDATE jobs SET state = ?2, reason = ?3, exit_code = ?4, started_at = ?5, "
	"ended_at = ?6 WHERE id = ?1";

int db_job_set_state(db *d, const db_job *j)
{
	if (!d || !j || db_is_empty(j->state))
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_JOB_STATE, &e);
	if (!s)
		return e;
	sqlite3_bind_int64(s, 1, j->id);
	BIND_F(s, 2, j->state);
	BIND_F(s, 3, j->reason);
	db_bind_opt_int(s, 4, j->exit_code);
	sqlite3_bind_int64(s, 5, j->started_at);
	sqlite3_bind_int64(s, 6, j->ended_at);
	return db_update_one(d, s, "job_state");
}

static const char SQL_JOB_RANKS[] =
	"SELECT " RANK_COLS " FROM job_ranks WHERE job_id = ?1 ORDER BY rank";

int db_job_ranks(db *d, int64_t id, db_job_rank **out, size_t *n)
{
	if (!d || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_JOB_RANKS, &e);
	if (!s)
		return e;
	sqlite3_bind_int64(s, 1, id);
	return db_rows(d, s, sizeof **out, rank_row_v, (void **)out, n, "job_ranks");
}

static const char SQL_JOB_RANK_UPDATE[] =
	"UPDATE job_ranks SET state = ?3, pid = ?4, exit_code = ?5, signal = ?6, "
	"started_at = ?7, ended_at = ?8 WHERE job_id = ?1 AND rank = ?2";

int db_job_rank_update(db *d, const db_job_rank *r)
{
	if (!d || !r || db_is_empty(r->state))
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_JOB_RANK_UPDATE, &e);
	if (!s)
		return e;
	sqlite3_bind_int64(s, 1, r->job_id);
	sqlite3_bind_int(s, 2, r->rank);
	BIND_F(s, 3, r->state);
	sqlite3_bind_int64(s, 4, r->pid);
	db_bind_opt_int(s, 5, r->exit_code);
	sqlite3_bind_int(s, 6, r->signal);
	sqlite3_bind_int64(s, 7, r->started_at);
	sqlite3_bind_int64(s, 8, r->ended_at);
	return db_update_one(d, s, "job_rank_update");
}

static const char SQL_JOB_ACTIVE_IN_GROUP[] =
	"SELECT id FROM jobs WHERE group_name = ?1 AND state IN ('starting', 'running') "
	"ORDER BY id";

int db_group_active_jobs(db *d, const char *group, int64_t **ids, size_t *n)
{
	if (!d || !group || !ids || !n)
		return -EINVAL;
	*ids = NULL;
	*n = 0;
	int e = 0, rc;
	sqlite3_stmt *s = db_stmt(d, SQL_JOB_ACTIVE_IN_GROUP, &e);
	if (!s)
		return e;
	db_bind_str(s, 1, group);
	int64_t *arr = NULL;
	size_t cnt = 0, cap = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if ((e = db_grow((void **)&arr, &cap, cnt, sizeof *arr)) < 0)
			break;
		arr[cnt++] = sqlite3_column_int64(s, 0);
	}
	if (e == 0 && rc != SQLITE_DONE)
		e = db_fail(d, rc, "group_active_jobs");
	db_done(s);
	if (e < 0) {
		free(arr);
		return e;
	}
	*ids = arr;
	*n = cnt;
	return 0;
}


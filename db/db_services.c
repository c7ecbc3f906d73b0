/* db: supervised services (issue 19, migration 8). See db.h. */

#include "db.h"
#include "db_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#define SVC_COLS \
	"name, group_name, recipe, runtime, model, owner, uid, state, run_id, run_started, " \
	"restarts, failures, forced, last_error, created_at, updated_at, plan, caller, need, " \
	"endpoint"

static const char SQL_SVC_INSERT[] =
	"INSERT INTO services (name, group_name, recipe, runtime, model, owner, uid, state, "
	"run_id, run_started, restarts, failures, forced, last_error, created_at, updated_at, "
	"plan, caller, need, endpoint) "
	"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, "
	"?18, ?19, ?20)";
static const char SQL_SVC_GET[] = "SELECT " SVC_COLS " FROM services WHERE name = ?1";
static const char SQL_SVC_LIST[] =
	"SELECT " SVC_COLS " FROM services ORDER BY created_at, name";
static const char SQL_SVC_UPDATE[] =
	"UPDATE services SET state = ?2, run_id = ?3, run_started = ?4, restarts = ?5, "
	"failures = ?6, last_error = ?7, endpoint = coalesce(?8, endpoint), updated_at = ?9 "
	"WHERE name = ?1";
static const char SQL_SVC_DELETE[] = "DELETE FROM services WHERE name = ?1";
/* Services on group ?1 (NULL: any) whose plan has a rank on node ?2 (NULL:
 * any node). */
static const char SQL_SVC_USING[] =
	"SELECT name, state FROM services WHERE (?1 IS NULL OR group_name = ?1) AND "
	"(?2 IS NULL OR EXISTS (SELECT 1 FROM json_each(plan, '$.ranks') r "
	"WHERE json_extract(r.value, '$.node_id') = ?2)) ORDER BY created_at, name";

static const char *json_or(const char *s, const char *dflt)
{
	return s && *s ? s : dflt;
}

int db_service_add(db *d, const db_service *v)
{
	if (!d || !v || db_is_empty(v->name) || db_is_empty(v->group_name) ||
	    db_is_empty(v->owner) || db_is_empty(v->state) || !v->plan)
		return -EINVAL;
	int e = db_tx_begin(d);
	if (e < 0)
		return e;
	sqlite3_stmt *s = db_stmt(d, SQL_SVC_INSERT, &e);
	if (s) {
		BIND_F(s, 1, v->name);
		BIND_F(s, 2, v->group_name);
		BIND_F(s, 3, v->recipe);
		BIND_F(s, 4, v->runtime);
		BIND_F(s, 5, v->model);
		BIND_F(s, 6, v->owner);
		sqlite3_bind_int64(s, 7, v->uid);
		BIND_F(s, 8, v->state);
		sqlite3_bind_int64(s, 9, v->run_id);
		sqlite3_bind_int64(s, 10, v->run_started);
		sqlite3_bind_int(s, 11, v->restarts);
		sqlite3_bind_int(s, 12, v->failures);
		sqlite3_bind_int(s, 13, v->forced);
		BIND_F(s, 14, v->last_error);
		sqlite3_bind_int64(s, 15, v->created_at);
		sqlite3_bind_int64(s, 16, v->updated_at);
		db_bind_str(s, 17, v->plan);
		db_bind_str(s, 18, json_or(v->caller, "{}"));
		db_bind_str(s, 19, json_or(v->need, "{}"));
		db_bind_str(s, 20, json_or(v->endpoint, "{}"));
		e = db_exec(d, s, "service_insert");
	}
	return db_tx_end(d, e);
}

void db_service_free(db_service *v)
{
	if (!v)
		return;
	free(v->plan);
	free(v->caller);
	free(v->need);
	free(v->endpoint);
	v->plan = v->caller = v->need = v->endpoint = NULL;
}

void db_services_free(db_service *v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		db_service_free(&v[i]);
	free(v);
}

static int svc_row(sqlite3_stmt *s, db_service *v)
{
	memset(v, 0, sizeof *v);
	COL_F(s, 0, v->name);
	COL_F(s, 1, v->group_name);
	COL_F(s, 2, v->recipe);
	COL_F(s, 3, v->runtime);
	COL_F(s, 4, v->model);
	COL_F(s, 5, v->owner);
	v->uid = sqlite3_column_int64(s, 6);
	COL_F(s, 7, v->state);
	v->run_id = sqlite3_column_int64(s, 8);
	v->run_started = sqlite3_column_int64(s, 9);
	v->restarts = sqlite3_column_int(s, 10);
	v->failures = sqlite3_column_int(s, 11);
	v->forced = sqlite3_column_int(s, 12) != 0;
	COL_F(s, 13, v->last_error);
	v->created_at = sqlite3_column_int64(s, 14);
	v->updated_at = sqlite3_column_int64(s, 15);
	v->plan = db_col_dup(s, 16);
	v->caller = db_col_dup(s, 17);
	v->need = db_col_dup(s, 18);
	v->endpoint = db_col_dup(s, 19);
	if (!v->plan || !v->caller || !v->need || !v->endpoint) {
		db_service_free(v);
		return -ENOMEM;
	}
	return 0;
}

int db_service_get(db *d, const char *name, db_service *out)
{
	if (!d || !name || !out)
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_SVC_GET, &e);
	if (!s)
		return e;
	db_bind_str(s, 1, name);
	int rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		e = svc_row(s, out);
	else
		e = rc == SQLITE_DONE ? -ENOENT : db_fail(d, rc, "service_get");
	db_done(s);
	return e;
}

int db_service_list(db *d, db_service **out, size_t *n)
{
	if (!d || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_SVC_LIST, &e);
	if (!s)
		return e;
	db_service *arr = NULL;
	size_t cnt = 0, cap = 0;
	int rc;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if ((e = db_grow((void **)&arr, &cap, cnt, sizeof *arr)) < 0 ||
		    (e = svc_row(s, &arr[cnt])) < 0)
			break;
		cnt++;
	}
	if (e == 0 && rc != SQLITE_DONE)
		e = db_fail(d, rc, "service_list");
	db_done(s);
	if (e < 0) {
		db_services_free(arr, cnt);
		return e;
	}
	*out = arr;
	*n = cnt;
	return 0;
}

int db_service_update(db *d, const db_service *v)
{
	if (!d || !v || db_is_empty(v->name) || db_is_empty(v->state))
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_SVC_UPDATE, &e);
	if (!s)
		return e;
	BIND_F(s, 1, v->name);
	BIND_F(s, 2, v->state);
	sqlite3_bind_int64(s, 3, v->run_id);
	sqlite3_bind_int64(s, 4, v->run_started);
	sqlite3_bind_int(s, 5, v->restarts);
	sqlite3_bind_int(s, 6, v->failures);
	BIND_F(s, 7, v->last_error);
	db_bind_str(s, 8, v->endpoint); /* NULL binds NULL: unchanged */
	sqlite3_bind_int64(s, 9, v->updated_at);
	return db_update_one(d, s, "service_update");
}

int db_service_remove(db *d, const char *name)
{
	if (!d || !name)
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_SVC_DELETE, &e);
	if (!s)
		return e;
	db_bind_str(s, 1, name);
	return db_update_one(d, s, "service_delete");
}

int db_services_using(db *d, const char *group, const char *node_id, char *list, size_t len)
{
	if (!d || (!group && !node_id) || !list || !len)
		return -EINVAL;
	list[0] = '\0';
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_SVC_USING, &e);
	if (!s)
		return e;
	if (group)
		db_bind_str(s, 1, group);
	if (node_id)
		db_bind_str(s, 2, node_id);
	int rc, n = 0;
	size_t o = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		const char *name = (const char *)sqlite3_column_text(s, 0);
		const char *state = (const char *)sqlite3_column_text(s, 1);
		if (o < len)
			o += (size_t)snprintf(list + o, len - o, "%s%s (%s)", n ? ", " : "",
					      name ? name : "", state ? state : "");
		n++;
	}
	if (rc != SQLITE_DONE)
		e = db_fail(d, rc, "service_using");
	db_done(s);
	return e < 0 ? e : n;
}

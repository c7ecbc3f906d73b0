/* db: the cluster row, nodes, join tokens and joins, revoked certificates,
 * and the events log. See db.h for the contract, db_internal.h for the
 * statement style. */

#include "db.h"
#include "db_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "util.h"

#define TOKEN_COLS "id, secret_hash, description, created_at, expires_at, uses_left, uses, revoked"

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

/* ---------- cluster ---------- */

static const char SQL_NODE_INSERT[] =
	"INSERT INTO nodes (" NODE_COLS ", token_id) "
	"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)";

static int node_insert(db *d, const db_node *n, const char *def_role, const char *token_id)
{
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_NODE_INSERT, &e);
	if (!s)
		return e;
	BIND_F(s, 1, n->id);
	BIND_F(s, 2, n->name);
	if (n->role[0])
		BIND_F(s, 3, n->role);
	else
		db_bind_str(s, 3, def_role);
	if (n->state[0])
		BIND_F(s, 4, n->state);
	else
		db_bind_str(s, 4, "ready");
	BIND_F(s, 5, n->address);
	BIND_F(s, 6, n->version);
	BIND_F(s, 7, n->cert_serial);
	sqlite3_bind_int64(s, 8, n->joined_at);
	sqlite3_bind_int64(s, 9, n->last_seen);
	sqlite3_bind_int(s, 10, n->drained ? 1 : 0);
	sqlite3_bind_int64(s, 11, n->connected_at);
	BIND_F(s, 12, n->key_hash);
	db_bind_str(s, 13, token_id);
	return db_exec(d, s, "node_insert");
}

static const char SQL_CLUSTER_INSERT[] =
	"INSERT INTO cluster (singleton, id, name, ca_hash, secret, head_id, created_at) "
	"VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6)";

int db_cluster_create(db *d, const db_cluster *c, const db_node *head)
{
	if (!d || !c || !head || db_is_empty(c->id) || db_is_empty(head->id) || db_is_empty(head->name))
		return -EINVAL;
	if (head->role[0] && strncmp(head->role, "head", sizeof head->role) != 0)
		return -EINVAL;
	int e = db_tx_begin(d);
	if (e < 0)
		return e;
	sqlite3_stmt *s = db_stmt(d, SQL_CLUSTER_INSERT, &e);
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
		e = db_exec(d, s, "cluster_insert");
	}
	if (e == 0)
		e = node_insert(d, head, "head", NULL);
	return db_tx_end(d, e);
}

static const char SQL_CLUSTER_GET[] =
	"SELECT id, name, ca_hash, secret, head_id, created_at FROM cluster WHERE singleton = 1";

int db_cluster_get(db *d, db_cluster *out)
{
	if (!d || !out)
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_CLUSTER_GET, &e);
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
		e = rc == SQLITE_DONE ? -ENOENT : db_fail(d, rc, "cluster_get");
	}
	db_done(s);
	return e;
}

/* ---------- nodes ---------- */

void db_node_row(sqlite3_stmt *s, db_node *n)
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
	n->mem_total = sqlite3_column_int64(s, 12);
	n->mem_available = sqlite3_column_int64(s, 13);
	n->mem_budget = sqlite3_column_int64(s, 14);
	n->mem_at = sqlite3_column_int64(s, 15);
	/* A drained node that is otherwise ready shows "draining"; a worker that
	 * never connected is still "joining", whatever the stored state. */
	if (n->drained && strcmp(n->state, "ready") == 0)
		util_strlcpy(n->state, "draining", sizeof n->state);
	if (n->connected_at == 0 && strcmp(n->role, "worker") == 0)
		util_strlcpy(n->state, "joining", sizeof n->state);
}

int db_node_row_v(sqlite3_stmt *s, void *p)
{
	db_node_row(s, p);
	return 0;
}

static const char SQL_NODE_GET[] = "SELECT " NODE_READ_COLS " FROM nodes WHERE id = ?1";
static const char SQL_NODE_GET_NAME[] = "SELECT " NODE_READ_COLS " FROM nodes WHERE name = ?1";

static int node_get(db *d, const char *sql, const char *key, db_node *out)
{
	if (!d || !key || !out)
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, sql, &e);
	if (!s)
		return e;
	db_bind_str(s, 1, key);
	int rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		db_node_row(s, out);
	else
		e = rc == SQLITE_DONE ? -ENOENT : db_fail(d, rc, "node_get");
	db_done(s);
	return e;
}

int db_node_get(db *d, const char *id, db_node *out)
{
	return node_get(d, SQL_NODE_GET, id, out);
}

int db_node_get_by_name(db *d, const char *name, db_node *out)
{
	return node_get(d, SQL_NODE_GET_NAME, name, out);
}

static const char SQL_NODE_LIST[] =
	"SELECT " NODE_READ_COLS " FROM nodes "
	"ORDER BY role = 'head' DESC, joined_at ASC, name ASC";

int db_node_list(db *d, db_node **out, size_t *n)
{
	if (!d || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_NODE_LIST, &e);
	if (!s)
		return e;
	return db_rows(d, s, sizeof **out, db_node_row_v, (void **)out, n, "node_list");
}

static const char SQL_NODE_SEEN[] =
	"UPDATE nodes SET last_seen = ?2, address = coalesce(?3, address), "
	"version = coalesce(?4, version), state = 'ready' WHERE id = ?1";

int db_node_seen(db *d, const char *id, int64_t ts, const char *address, const char *version)
{
	if (!d || !id)
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_NODE_SEEN, &e);
	if (!s)
		return e;
	db_bind_str(s, 1, id);
	sqlite3_bind_int64(s, 2, ts);
	db_bind_str(s, 3, address); /* NULL keeps the stored value */
	db_bind_str(s, 4, version);
	return db_update_one(d, s, "node_seen");
}

/* Never moves last_seen backwards (a late flush after a newer write). */
static const char SQL_NODE_TOUCH[] =
	"UPDATE nodes SET last_seen = max(last_seen, ?2) WHERE id = ?1";

int db_node_touch(db *d, const char *id, int64_t ts)
{
	if (!d || !id)
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_NODE_TOUCH, &e);
	if (!s)
		return e;
	db_bind_str(s, 1, id);
	sqlite3_bind_int64(s, 2, ts);
	return db_update_one(d, s, "node_touch");
}

static const char SQL_NODE_MEMORY[] =
	"UPDATE nodes SET mem_total = ?2, mem_available = ?3, mem_budget = ?4, mem_at = ?5 "
	"WHERE id = ?1";

int db_node_set_memory(db *d, const char *id, int64_t total, int64_t available, int64_t budget,
		       int64_t at)
{
	if (!d || !id || total < 0 || available < 0 || budget < 0)
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_NODE_MEMORY, &e);
	if (!s)
		return e;
	db_bind_str(s, 1, id);
	sqlite3_bind_int64(s, 2, total);
	sqlite3_bind_int64(s, 3, available);
	sqlite3_bind_int64(s, 4, budget);
	sqlite3_bind_int64(s, 5, at);
	return db_update_one(d, s, "node_memory");
}

static const char SQL_NODE_STATE[] =
	"UPDATE nodes SET state = ?2 WHERE id = ?1";

int db_node_set_state(db *d, const char *id, const char *state)
{
	if (!d || !id || !state_valid(state))
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_NODE_STATE, &e);
	if (!s)
		return e;
	db_bind_str(s, 1, id);
	db_bind_str(s, 2, state);
	return db_update_one(d, s, "node_set_state");
}

static const char SQL_NODE_DRAINED[] =
	"UPDATE nodes SET drained = ?2 WHERE id = ?1";

int db_node_set_drained(db *d, const char *id, bool drained)
{
	if (!d || !id)
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_NODE_DRAINED, &e);
	if (!s)
		return e;
	db_bind_str(s, 1, id);
	sqlite3_bind_int(s, 2, drained ? 1 : 0);
	return db_update_one(d, s, "node_set_drained");
}

static const char SQL_NODE_DELETE[] =
	"DELETE FROM nodes WHERE id = ?1";
/* The groups the node leaves were planned with it: their shape no longer
 * holds (a pair left with one member is not a pair). */
static const char SQL_NODE_GROUPS_RESHAPE[] =
	"UPDATE groups SET shape = CASE (SELECT count(*) FROM group_members m "
	"WHERE m.group_name = groups.name) WHEN 2 THEN 'single' ELSE 'unknown' END, note = ?2 "
	"WHERE name IN (SELECT group_name FROM group_members WHERE node_id = ?1)";
static const char SQL_CERT_REVOKE[] =
	"INSERT INTO revoked_certs (serial, node_id, revoked_at) VALUES (?1, ?2, ?3) "
	"ON CONFLICT (serial) DO NOTHING";

int db_node_remove(db *d, const char *id, int64_t now)
{
	if (!d || !id)
		return -EINVAL;
	int e = db_tx_begin(d);
	if (e < 0)
		return e;
	db_node n;
	e = db_node_get(d, id, &n);
	/* The head cannot be removed: the cluster would be left without one. */
	if (e == 0 && strcmp(n.role, "head") == 0)
		e = -EPERM;
	sqlite3_stmt *s = NULL;
	char note[200];
	snprintf(note, sizeof note, "%s was removed from the cluster after this group was planned "
		 "with it; remove the group and create it again to plan it anew", e == 0 ? n.name : "");
	if (e == 0 && (s = db_stmt(d, SQL_NODE_GROUPS_RESHAPE, &e))) {
		db_bind_str(s, 1, id);
		db_bind_str(s, 2, note);
		e = db_exec(d, s, "node_groups_reshape");
	}
	if (e == 0 && (s = db_stmt(d, SQL_NODE_DELETE, &e))) {
		db_bind_str(s, 1, id);
		e = db_exec(d, s, "node_delete");
	}
	if (e == 0 && n.cert_serial[0] && (s = db_stmt(d, SQL_CERT_REVOKE, &e))) {
		BIND_F(s, 1, n.cert_serial);
		db_bind_str(s, 2, id);
		sqlite3_bind_int64(s, 3, now);
		e = db_exec(d, s, "cert_revoke");
	}
	return db_tx_end(d, e);
}

static const char SQL_CERT_REVOKED[] =
	"SELECT 1 FROM revoked_certs WHERE serial = ?1";

int db_cert_revoked(db *d, const char *serial)
{
	if (!d || !serial)
		return -EINVAL;
	if (!*serial)
		return 0;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_CERT_REVOKED, &e);
	if (!s)
		return e;
	db_bind_str(s, 1, serial);
	int rc = sqlite3_step(s);
	e = rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : db_fail(d, rc, "cert_revoked");
	db_done(s);
	return e;
}

static const char SQL_CERT_LIST[] =
	"SELECT serial FROM revoked_certs ORDER BY revoked_at, serial";

int db_revoked_list(db *d, char ***out, size_t *n)
{
	if (!d || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0, rc;
	sqlite3_stmt *s = db_stmt(d, SQL_CERT_LIST, &e);
	if (!s)
		return e;
	char **arr = NULL;
	size_t cnt = 0, cap = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if ((e = db_grow((void **)&arr, &cap, cnt, sizeof *arr)) < 0)
			break;
		const char *t = (const char *)sqlite3_column_text(s, 0);
		if (!(arr[cnt] = strdup(t ? t : ""))) {
			e = -ENOMEM;
			break;
		}
		cnt++;
	}
	if (e == 0 && rc != SQLITE_DONE)
		e = db_fail(d, rc, "revoked_list");
	db_done(s);
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

static const char SQL_NODE_CONNECTED[] =
	"UPDATE nodes SET connected_at = ?2 WHERE id = ?1 AND connected_at = 0";

int db_node_connected(db *d, const char *id, int64_t now, const char *address,
		      const char *version, bool *first)
{
	if (!d || !id)
		return -EINVAL;
	int e = db_tx_begin(d);
	if (e < 0)
		return e;
	sqlite3_stmt *s = db_stmt(d, SQL_NODE_CONNECTED, &e);
	if (s) {
		db_bind_str(s, 1, id);
		sqlite3_bind_int64(s, 2, now);
		e = db_exec(d, s, "node_connected");
	}
	if (first)
		*first = e == 0 && db_changes(d) == 1;
	if (e == 0 && (s = db_stmt(d, SQL_NODE_SEEN, &e))) {
		db_bind_str(s, 1, id);
		sqlite3_bind_int64(s, 2, now);
		db_bind_str(s, 3, address);
		db_bind_str(s, 4, version);
		e = db_exec(d, s, "node_seen");
		if (e == 0 && db_changes(d) == 0)
			e = -ENOENT;
	}
	return db_tx_end(d, e);
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

/* A worker's join that never connected, made with this token. */
static const char SQL_JOIN_PENDING[] =
	"SELECT " NODE_READ_COLS " FROM nodes WHERE name = ?1 AND token_id = ?2 "
	"AND role = 'worker' AND connected_at = 0";

int db_join_pending(db *d, const char *token_id, const char *secret_hash, const char *name,
		    db_node *out)
{
	if (!d || !token_id || !secret_hash || !name || !out)
		return -EINVAL;
	db_token t;
	int e = join_token(d, token_id, secret_hash, &t);
	if (e < 0)
		return e;
	sqlite3_stmt *s = db_stmt(d, SQL_JOIN_PENDING, &e);
	if (!s)
		return e;
	db_bind_str(s, 1, name);
	db_bind_str(s, 2, token_id);
	int rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		db_node_row(s, out);
	else
		e = rc == SQLITE_DONE ? -ENOENT : db_fail(d, rc, "join_pending");
	db_done(s);
	return e;
}

static const char SQL_JOIN_RESUME[] =
	"UPDATE nodes SET cert_serial = ?2, key_hash = ?3, joined_at = ?4, last_seen = ?4, "
	"address = ?5, version = ?6 WHERE id = ?1 AND connected_at = 0";

int db_join_resume(db *d, const char *token_id, const char *secret_hash, const db_node *node,
		   const char *old_serial, int64_t now)
{
	if (!d || !token_id || !secret_hash || !node || db_is_empty(node->id))
		return -EINVAL;
	int e = db_tx_begin(d);
	if (e < 0)
		return e;
	db_node cur;
	e = db_join_pending(d, token_id, secret_hash, node->name, &cur);
	if (e == 0 && strcmp(cur.id, node->id) != 0)
		e = -ENOENT;
	sqlite3_stmt *s = NULL;
	if (e == 0 && old_serial && *old_serial && (s = db_stmt(d, SQL_CERT_REVOKE, &e))) {
		db_bind_str(s, 1, old_serial);
		db_bind_str(s, 2, node->id);
		sqlite3_bind_int64(s, 3, now);
		e = db_exec(d, s, "cert_revoke");
	}
	if (e == 0 && (s = db_stmt(d, SQL_JOIN_RESUME, &e))) {
		db_bind_str(s, 1, node->id);
		BIND_F(s, 2, node->cert_serial);
		BIND_F(s, 3, node->key_hash);
		sqlite3_bind_int64(s, 4, now);
		BIND_F(s, 5, node->address);
		BIND_F(s, 6, node->version);
		e = db_exec(d, s, "join_resume");
		if (e == 0 && db_changes(d) != 1)
			e = -ENOENT;
	}
	return db_tx_end(d, e);
}

static const char SQL_JOIN_EXPIRED[] =
	"SELECT " NODE_READ_COLS ", coalesce(token_id, '') FROM nodes WHERE role = 'worker' "
	"AND connected_at = 0 AND joined_at < ?1 ORDER BY joined_at";
/* Give back the use an expired join took (unlimited tokens have none). */
static const char SQL_TOKEN_UNUSE[] =
	"UPDATE tokens SET uses = max(uses - 1, 0), uses_left = uses_left + 1 "
	"WHERE id = ?1 AND uses_left >= 0";

int db_join_expire(db *d, int64_t cutoff, int64_t now, db_node **out, size_t *n)
{
	if (!d || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = db_tx_begin(d);
	if (e < 0)
		return e;
	db_node *arr = NULL;
	char (*tok)[17] = NULL;
	size_t cnt = 0, cap = 0, tcap = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_JOIN_EXPIRED, &e);
	int rc = SQLITE_DONE;
	if (s) {
		sqlite3_bind_int64(s, 1, cutoff);
		while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
			if ((e = db_grow((void **)&arr, &cap, cnt, sizeof *arr)) < 0 ||
			    (e = db_grow((void **)&tok, &tcap, cnt, sizeof *tok)) < 0)
				break;
			db_node_row(s, &arr[cnt]);
			const char *t = (const char *)sqlite3_column_text(s, NODE_READ_NCOLS);
			util_strlcpy(tok[cnt], t ? t : "", sizeof tok[cnt]);
			cnt++;
		}
		if (e == 0 && rc != SQLITE_DONE)
			e = db_fail(d, rc, "join_expired");
		db_done(s);
	}
	for (size_t i = 0; e == 0 && i < cnt; i++) {
		if (arr[i].cert_serial[0] && (s = db_stmt(d, SQL_CERT_REVOKE, &e))) {
			BIND_F(s, 1, arr[i].cert_serial);
			db_bind_str(s, 2, arr[i].id);
			sqlite3_bind_int64(s, 3, now);
			e = db_exec(d, s, "cert_revoke");
		}
		if (e == 0 && tok[i][0] && (s = db_stmt(d, SQL_TOKEN_UNUSE, &e))) {
			db_bind_str(s, 1, tok[i]);
			e = db_exec(d, s, "token_unuse");
		}
		if (e == 0 && (s = db_stmt(d, SQL_NODE_DELETE, &e))) {
			db_bind_str(s, 1, arr[i].id);
			e = db_exec(d, s, "node_delete");
		}
	}
	free(tok);
	e = db_tx_end(d, e);
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

static int token_row_v(sqlite3_stmt *s, void *p)
{
	token_row(s, p);
	return 0;
}

static const char SQL_TOKEN_INSERT[] =
	"INSERT INTO tokens (" TOKEN_COLS ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

int db_token_add(db *d, const db_token *t)
{
	if (!d || !t || !t->id[0])
		return -EINVAL;
	int e = db_tx_begin(d);
	if (e < 0)
		return e;
	sqlite3_stmt *s = db_stmt(d, SQL_TOKEN_INSERT, &e);
	if (s) {
		BIND_F(s, 1, t->id);
		BIND_F(s, 2, t->secret_hash);
		BIND_F(s, 3, t->description);
		sqlite3_bind_int64(s, 4, t->created_at);
		sqlite3_bind_int64(s, 5, t->expires_at);
		sqlite3_bind_int64(s, 6, t->uses_left);
		sqlite3_bind_int64(s, 7, t->uses);
		sqlite3_bind_int(s, 8, t->revoked ? 1 : 0);
		e = db_exec(d, s, "token_add");
	}
	return db_tx_end(d, e);
}

static const char SQL_TOKEN_LIST[] =
	"SELECT " TOKEN_COLS " FROM tokens ORDER BY created_at ASC, id ASC";

int db_token_list(db *d, db_token **out, size_t *n)
{
	if (!d || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_TOKEN_LIST, &e);
	if (!s)
		return e;
	return db_rows(d, s, sizeof **out, token_row_v, (void **)out, n, "token_list");
}

static const char SQL_TOKEN_GET[] =
	"SELECT " TOKEN_COLS " FROM tokens WHERE id = ?1";

int db_token_get(db *d, const char *id, db_token *out)
{
	if (!d || !id || !out)
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_TOKEN_GET, &e);
	if (!s)
		return e;
	db_bind_str(s, 1, id);
	int rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		token_row(s, out);
	else
		e = rc == SQLITE_DONE ? -ENOENT : db_fail(d, rc, "token_get");
	db_done(s);
	return e;
}

static const char SQL_TOKEN_REVOKE[] =
	"UPDATE tokens SET revoked = 1 WHERE id = ?1";

int db_token_revoke(db *d, const char *id)
{
	if (!d || !id)
		return -EINVAL;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_TOKEN_REVOKE, &e);
	if (!s)
		return e;
	db_bind_str(s, 1, id);
	return db_update_one(d, s, "token_revoke");
}

static const char SQL_NODE_NAME_USED[] =
	"SELECT 1 FROM nodes WHERE name = ?1";

static int name_used(db *d, const char *name, size_t cap)
{
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_NODE_NAME_USED, &e);
	if (!s)
		return e;
	db_bind_field(s, 1, name, cap);
	int rc = sqlite3_step(s);
	e = rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : db_fail(d, rc, "name_used");
	db_done(s);
	return e;
}

static const char SQL_TOKEN_USE[] =
	"UPDATE tokens SET uses = uses + 1, "
	"uses_left = CASE WHEN uses_left > 0 THEN uses_left - 1 ELSE uses_left END "
	"WHERE id = ?1 AND revoked = 0 AND uses_left <> 0";

int db_join_commit(db *d, const char *token_id, const char *secret_hash, int64_t now,
		   const db_node *node)
{
	if (!d || !token_id || !secret_hash || !node || db_is_empty(node->id) || db_is_empty(node->name))
		return -EINVAL;
	if (node->role[0] && strncmp(node->role, "worker", sizeof node->role) != 0)
		return -EINVAL; /* the head is made by db_cluster_create, never by a join */
	int e = db_tx_begin(d);
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
	if (e == 0 && (s = db_stmt(d, SQL_TOKEN_USE, &e))) {
		db_bind_str(s, 1, t.id);
		e = db_exec(d, s, "token_use");
		if (e == 0 && db_changes(d) != 1)
			e = -EIO; /* checked above under the same write lock */
	}
	if (e == 0)
		e = node_insert(d, node, "worker", t.id);
	return db_tx_end(d, e);
}

/* ---------- events ---------- */

static const char SQL_EVENT_ADD[] =
	"INSERT INTO events (ts, node_id, kind, detail) VALUES (?1, ?2, ?3, ?4)";

/* One event row, inside the caller's transaction. */
static int event_insert(db *d, int64_t ts, const char *node_id, const char *kind,
			const char *detail)
{
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_EVENT_ADD, &e);
	if (!s)
		return e;
	/* Stored no longer than db_event can return them. */
	sqlite3_bind_int64(s, 1, ts);
	db_bind_field(s, 2, node_id ? node_id : "", sizeof ((db_event *)0)->node_id - 1);
	db_bind_field(s, 3, kind, sizeof ((db_event *)0)->kind - 1);
	db_bind_field(s, 4, detail ? detail : "", sizeof ((db_event *)0)->detail - 1);
	return db_exec(d, s, "event_add");
}

int db_event_add(db *d, int64_t ts, const char *node_id, const char *kind, const char *detail)
{
	if (!d || db_is_empty(kind))
		return -EINVAL;
	int e = db_tx_begin(d);
	if (e < 0)
		return e;
	e = event_insert(d, ts, node_id, kind, detail);
	return db_tx_end(d, e);
}

/* Only when the stored state differs, so that a repeated transition writes
 * nothing (a drained node shows "draining" but is still "ready"). */
static const char SQL_NODE_STATE_CHANGE[] =
	"UPDATE nodes SET state = ?2 WHERE id = ?1 AND state <> ?2";

int db_node_transition(db *d, const char *id, const char *state, const char *detail, int64_t now)
{
	if (!d || db_is_empty(id) || !state_valid(state))
		return -EINVAL;
	int e = db_tx_begin(d);
	if (e < 0)
		return e;
	db_node n; /* n.state: the state as shown before the change */
	e = node_get(d, SQL_NODE_GET, id, &n);
	sqlite3_stmt *s = NULL;
	int changed = 0;
	if (e == 0 && (s = db_stmt(d, SQL_NODE_STATE_CHANGE, &e))) {
		db_bind_str(s, 1, id);
		db_bind_str(s, 2, state);
		e = db_exec(d, s, "node_transition");
		changed = e == 0 && db_changes(d) == 1;
	}
	if (e == 0 && changed) {
		char words[64];
		if (!detail) {
			snprintf(words, sizeof words, "%s -> %s", n.state, state);
			detail = words;
		}
		e = event_insert(d, now, id, state, detail);
	}
	e = db_tx_end(d, e);
	return e < 0 ? e : changed;
}

static int event_row(sqlite3_stmt *s, void *p)
{
	db_event *ev = p;
	ev->id = sqlite3_column_int64(s, 0);
	ev->ts = sqlite3_column_int64(s, 1);
	COL_F(s, 2, ev->node_id);
	COL_F(s, 3, ev->kind);
	COL_F(s, 4, ev->detail);
	return 0;
}

/* Every row of s as events. */
static int event_rows(db *d, sqlite3_stmt *s, const char *op, db_event **out, size_t *n)
{
	return db_rows(d, s, sizeof **out, event_row, (void **)out, n, op);
}

/* limit 0 = no limit (a negative LIMIT means none in SQLite). */
static int64_t sql_limit(size_t limit)
{
	return limit == 0 || (uint64_t)limit > (uint64_t)INT64_MAX ? -1 : (int64_t)limit;
}

static const char SQL_EVENT_LIST[] =
	"SELECT id, ts, node_id, kind, detail FROM events WHERE id > ?1 "
	"ORDER BY id ASC LIMIT ?2";

int db_event_list(db *d, int64_t since_id, size_t limit, db_event **out, size_t *n)
{
	if (!d || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_EVENT_LIST, &e);
	if (!s)
		return e;
	sqlite3_bind_int64(s, 1, since_id);
	sqlite3_bind_int64(s, 2, sql_limit(limit));
	return event_rows(d, s, "event_list", out, n);
}

/* The newest ?2 of one node, returned oldest first (index events_node). */
static const char SQL_NODE_EVENTS[] =
	"SELECT id, ts, node_id, kind, detail FROM "
	"(SELECT id, ts, node_id, kind, detail FROM events WHERE node_id = ?1 "
	"ORDER BY id DESC LIMIT ?2) ORDER BY id ASC";

int db_node_events(db *d, const char *node_id, size_t limit, db_event **out, size_t *n)
{
	if (!d || !node_id || !out || !n)
		return -EINVAL;
	*out = NULL;
	*n = 0;
	int e = 0;
	sqlite3_stmt *s = db_stmt(d, SQL_NODE_EVENTS, &e);
	if (!s)
		return e;
	db_bind_str(s, 1, node_id);
	sqlite3_bind_int64(s, 2, sql_limit(limit));
	return event_rows(d, s, "node_events", out, n);
}

/* Criterion tests for db/: schema and migrations, cluster, joins and their
 * refusals, node life cycle, revocation, events, crash safety. Every test gets
 * its own temp dir, removed afterwards. The raw sqlite3 calls below only READ
 * (or fake a future schema version); all writes go through db.h. */
#include <criterion/criterion.h>

#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "db.h"
#include "db_tmp.h"

static db *D;

static void setup(void)
{
	db_tmp_setup(&D, false);
}

static void teardown(void)
{
	db_tmp_teardown(&D);
}

TestSuite(db, .init = setup, .fini = teardown, .timeout = 50);

/* ---------- helpers ---------- */

#define NOW ((int64_t)1790000000)
#define HASH_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define HASH_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

static void open_db(void)
{
	cr_assert_eq(db_open(path, &D), 0);
	cr_assert_not_null(D);
}

static db_node mknode(const char *id, const char *name, const char *role, int64_t joined)
{
	db_node n;
	memset(&n, 0, sizeof n);
	snprintf(n.id, sizeof n.id, "%s", id);
	snprintf(n.name, sizeof n.name, "%s", name);
	snprintf(n.role, sizeof n.role, "%s", role);
	snprintf(n.state, sizeof n.state, "ready");
	snprintf(n.address, sizeof n.address, "169.254.0.%d:7300", (int)(joined % 250) + 1);
	snprintf(n.version, sizeof n.version, "0.1.0");
	snprintf(n.cert_serial, sizeof n.cert_serial, "serial-%s", id);
	n.joined_at = joined;
	n.last_seen = joined;
	return n;
}

static void init_cluster(void)
{
	db_cluster c;
	memset(&c, 0, sizeof c);
	strcpy(c.id, "c0ffee00-0000-4000-8000-000000000001");
	strcpy(c.name, "lab");
	strcpy(c.ca_hash, HASH_A);
	strcpy(c.secret, HASH_B);
	strcpy(c.head_id, "head-id");
	c.created_at = NOW;
	db_node h = mknode("head-id", "spark-1", "head", NOW);
	cr_assert_eq(db_cluster_create(D, &c, &h), 0);
}

static void add_token(const char *id, const char *hash, int64_t expires, int64_t uses_left)
{
	db_token t;
	memset(&t, 0, sizeof t);
	snprintf(t.id, sizeof t.id, "%s", id);
	snprintf(t.secret_hash, sizeof t.secret_hash, "%s", hash);
	snprintf(t.description, sizeof t.description, "test token %s", id);
	t.created_at = NOW;
	t.expires_at = expires;
	t.uses_left = uses_left;
	cr_assert_eq(db_token_add(D, &t), 0, "token_add %s", id);
}

/* A fingerprint of everything a join could change, read by a second connection. */
static void snapshot(char *buf, size_t len)
{
	sqlite3 *h = NULL;
	sqlite3_stmt *s = NULL;
	cr_assert_eq(sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	const char *q =
		"SELECT (SELECT count(*) FROM cluster) || '/' || (SELECT count(*) FROM nodes) || '/' ||"
		" (SELECT group_concat(id || ':' || uses || ':' || uses_left || ':' || revoked, ',')"
		"  FROM (SELECT * FROM tokens ORDER BY id)) || '/' ||"
		" (SELECT count(*) FROM revoked_certs) || '/' || (SELECT count(*) FROM events)";
	cr_assert_eq(sqlite3_prepare_v2(h, q, -1, &s, NULL), SQLITE_OK, "%s", sqlite3_errmsg(h));
	cr_assert_eq(sqlite3_step(s), SQLITE_ROW);
	snprintf(buf, len, "%s", (const char *)sqlite3_column_text(s, 0));
	sqlite3_finalize(s);
	sqlite3_close(h);
}

static int raw_int(const char *sql)
{
	sqlite3 *h = NULL;
	sqlite3_stmt *s = NULL;
	cr_assert_eq(sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_prepare_v2(h, sql, -1, &s, NULL), SQLITE_OK, "%s", sqlite3_errmsg(h));
	cr_assert_eq(sqlite3_step(s), SQLITE_ROW);
	int v = sqlite3_column_int(s, 0);
	sqlite3_finalize(s);
	sqlite3_close(h);
	return v;
}

static size_t node_count(void)
{
	db_node *ns = NULL;
	size_t n = 0;
	cr_assert_eq(db_node_list(D, &ns, &n), 0);
	free(ns);
	return n;
}

/* ---------- schema ---------- */

Test(db, fresh_open_creates_schema_and_reopen_is_noop)
{
	open_db();
	/* Every migration ran (later ones may add more than fabric's 2). */
	int v = db_schema_version(D);
	cr_assert_geq(v, 2);
	cr_assert_eq(db_integrity_check(D), 0);
	init_cluster();
	db_close(D);
	D = NULL;

	cr_assert_eq(raw_int("PRAGMA user_version"), v);
	cr_assert_eq(raw_int("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN "
			     "('cluster', 'nodes', 'tokens', 'revoked_certs', 'events', 'node_fabric', "
			     "'fabric_ports')"), 7);
	int objects = raw_int("SELECT count(*) FROM sqlite_master");

	open_db();
	cr_assert_eq(db_schema_version(D), v);
	db_cluster c;
	cr_assert_eq(db_cluster_get(D, &c), 0);
	cr_assert_str_eq(c.name, "lab");
	cr_assert_eq(node_count(), 1);
	db_close(D);
	D = NULL;
	cr_assert_eq(raw_int("SELECT count(*) FROM sqlite_master"), objects);
	cr_assert_eq(raw_int("PRAGMA user_version"), v);

	/* WAL is persistent in the file header. */
	sqlite3 *h;
	sqlite3_stmt *s;
	cr_assert_eq(sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_prepare_v2(h, "PRAGMA journal_mode", -1, &s, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_step(s), SQLITE_ROW);
	cr_assert_str_eq((const char *)sqlite3_column_text(s, 0), "wal");
	sqlite3_finalize(s);
	sqlite3_close(h);
}

Test(db, future_version_is_refused)
{
	open_db();
	db_close(D);
	D = NULL;
	sqlite3 *h;
	cr_assert_eq(sqlite3_open_v2(path, &h, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(h, "PRAGMA user_version = 99", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(h);

	db *d2 = (db *)0x1;
	cr_assert_eq(db_open(path, &d2), -EPROTO);
	cr_assert_null(d2);
	cr_assert_eq(raw_int("PRAGMA user_version"), 99);
}

Test(db, garbage_file_is_refused)
{
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	for (int i = 0; i < 512; i++)
		fputs("this is not a database ", f);
	fclose(f);
	db *d2 = NULL;
	int e = db_open(path, &d2);
	cr_assert_lt(e, 0);
	cr_assert_null(d2);
}

Test(db, open_bad_args)
{
	cr_assert_eq(db_open(NULL, &D), -EINVAL);
	cr_assert_eq(db_open(path, NULL), -EINVAL);
	char p[200];
	snprintf(p, sizeof p, "%s/missing/dir/cluster.db", dir);
	cr_assert_lt(db_open(p, &D), 0);
	cr_assert_null(D);
}

/* ---------- cluster ---------- */

Test(db, cluster_create_get)
{
	open_db();
	db_cluster c;
	cr_assert_eq(db_cluster_get(D, &c), -ENOENT);
	init_cluster();
	cr_assert_eq(db_cluster_get(D, &c), 0);
	cr_assert_str_eq(c.id, "c0ffee00-0000-4000-8000-000000000001");
	cr_assert_str_eq(c.name, "lab");
	cr_assert_str_eq(c.ca_hash, HASH_A);
	cr_assert_str_eq(c.secret, HASH_B);
	cr_assert_str_eq(c.head_id, "head-id");
	cr_assert_eq(c.created_at, NOW);

	db_node h;
	cr_assert_eq(db_node_get(D, "head-id", &h), 0);
	cr_assert_str_eq(h.role, "head");
	cr_assert_str_eq(h.name, "spark-1");
	cr_assert_eq(db_node_get_by_name(D, "spark-1", &h), 0);
	cr_assert_str_eq(h.id, "head-id");
	cr_assert_eq(db_node_get(D, "nope", &h), -ENOENT);
	cr_assert_eq(db_node_get_by_name(D, "nope", &h), -ENOENT);

	/* A second init is refused and changes nothing. */
	char before[512], after[512];
	snapshot(before, sizeof before);
	db_cluster c2 = c;
	strcpy(c2.id, "other");
	db_node h2 = mknode("head-2", "spark-9", "head", NOW);
	cr_assert_eq(db_cluster_create(D, &c2, &h2), -EEXIST);
	snapshot(after, sizeof after);
	cr_assert_str_eq(before, after);
	cr_assert_eq(db_node_get(D, "head-2", &h), -ENOENT);
}

Test(db, cluster_create_is_atomic)
{
	open_db();
	db_cluster c;
	memset(&c, 0, sizeof c);
	strcpy(c.id, "cid");
	strcpy(c.name, "lab");
	/* Invalid head (bad state) -> neither row is written. */
	db_node h = mknode("head-id", "spark-1", "head", NOW);
	strcpy(h.state, "bogus");
	cr_assert_eq(db_cluster_create(D, &c, &h), -EINVAL);
	cr_assert_eq(db_cluster_get(D, &c), -ENOENT);
	cr_assert_eq(node_count(), 0);
	/* head_id defaults to the head node's id. */
	h = mknode("head-id", "spark-1", "head", NOW);
	cr_assert_eq(db_cluster_create(D, &c, &h), 0);
	cr_assert_eq(db_cluster_get(D, &c), 0);
	cr_assert_str_eq(c.head_id, "head-id");
}

/* ---------- joins ---------- */

Test(db, join_success_consumes_a_use)
{
	open_db();
	init_cluster();
	add_token("0123456789abcdef", HASH_A, NOW + 3600, 2);
	add_token("ffffffffffffffff", HASH_B, 0, -1);

	db_node n = mknode("w1", "spark-2", "worker", NOW + 1);
	cr_assert_eq(db_join_commit(D, "0123456789abcdef", HASH_A, NOW + 1, &n), 0);
	db_token t;
	cr_assert_eq(db_token_get(D, "0123456789abcdef", &t), 0);
	cr_assert_eq(t.uses, 1);
	cr_assert_eq(t.uses_left, 1);

	db_node g;
	cr_assert_eq(db_node_get(D, "w1", &g), 0);
	cr_assert_str_eq(g.name, "spark-2");
	cr_assert_str_eq(g.role, "worker");
	/* joined, but not complete until the node connects */
	cr_assert_str_eq(g.state, "joining");
	cr_assert_eq(g.connected_at, 0);
	bool first = false;
	cr_assert_eq(db_node_connected(D, "w1", NOW + 2, NULL, NULL, &first), 0);
	cr_assert(first);
	cr_assert_eq(db_node_connected(D, "w1", NOW + 3, NULL, NULL, &first), 0);
	cr_assert(!first, "only the first session completes the join");
	cr_assert_eq(db_node_get(D, "w1", &g), 0);
	cr_assert_str_eq(g.state, "ready");
	cr_assert_eq(g.connected_at, NOW + 2);
	cr_assert_str_eq(g.address, n.address);
	cr_assert_str_eq(g.version, "0.1.0");
	cr_assert_str_eq(g.cert_serial, "serial-w1");
	cr_assert_eq(g.joined_at, NOW + 1);
	cr_assert_eq(g.drained, false);

	/* Empty role/state default to worker/ready (shown "joining" until it connects). */
	n = mknode("w2", "spark-3", "", NOW + 2);
	n.state[0] = '\0';
	cr_assert_eq(db_join_commit(D, "0123456789abcdef", HASH_A, NOW + 2, &n), 0);
	cr_assert_eq(db_node_get(D, "w2", &g), 0);
	cr_assert_str_eq(g.role, "worker");
	cr_assert_str_eq(g.state, "joining");
	cr_assert_eq(db_node_connected(D, "w2", NOW + 3, NULL, NULL, NULL), 0);
	cr_assert_eq(db_node_get(D, "w2", &g), 0);
	cr_assert_str_eq(g.state, "ready");
	cr_assert_eq(db_token_get(D, "0123456789abcdef", &t), 0);
	cr_assert_eq(t.uses, 2);
	cr_assert_eq(t.uses_left, 0);

	/* Unlimited token stays unlimited. */
	for (int i = 0; i < 5; i++) {
		char id[32], name[32];
		snprintf(id, sizeof id, "u%d", i);
		snprintf(name, sizeof name, "spark-u%d", i);
		n = mknode(id, name, "worker", NOW + 10 + i);
		cr_assert_eq(db_join_commit(D, "ffffffffffffffff", HASH_B, NOW + 10, &n), 0);
	}
	cr_assert_eq(db_token_get(D, "ffffffffffffffff", &t), 0);
	cr_assert_eq(t.uses, 5);
	cr_assert_eq(t.uses_left, -1);
	cr_assert_eq(node_count(), 8);
	cr_assert_eq(db_integrity_check(D), 0);
}

static void expect_refused(const char *tok, const char *hash, int64_t now, const db_node *n, int code)
{
	char before[512], after[512];
	snapshot(before, sizeof before);
	int e = db_join_commit(D, tok, hash, now, n);
	cr_assert_eq(e, code, "join %s as %s: got %d want %d", tok, n->name, e, code);
	snapshot(after, sizeof after);
	cr_assert_str_eq(before, after, "join %s changed the db", tok);
	db_node g;
	if (strcmp(n->id, "head-id") != 0 && strcmp(n->id, "w1") != 0)
		cr_assert_eq(db_node_get(D, n->id, &g), -ENOENT);
}

Test(db, join_refusals_change_nothing)
{
	open_db();
	init_cluster();
	add_token("aaaaaaaaaaaaaaaa", HASH_A, NOW + 100, 5);     /* good */
	add_token("eeeeeeeeeeeeeeee", HASH_A, NOW - 1, 5);       /* expired */
	add_token("e000000000000000", HASH_A, NOW, 5);           /* expires exactly now */
	add_token("rrrrrrrrrrrrrrrr", HASH_A, 0, 5);             /* revoked below */
	add_token("0000000000000000", HASH_A, 0, 0);             /* used up */
	cr_assert_eq(db_token_revoke(D, "rrrrrrrrrrrrrrrr"), 0);
	db_node w1 = mknode("w1", "spark-2", "worker", NOW);
	cr_assert_eq(db_join_commit(D, "aaaaaaaaaaaaaaaa", HASH_A, NOW, &w1), 0);

	db_node n = mknode("new", "spark-5", "worker", NOW);
	expect_refused("nosuchtoken00000", HASH_A, NOW, &n, -ENOENT);
	expect_refused("aaaaaaaaaaaaaaaa", HASH_B, NOW, &n, -ENOENT);
	expect_refused("aaaaaaaaaaaaaaaa", "", NOW, &n, -ENOENT);
	expect_refused("aaaaaaaaaaaaaaaa", "aaaa", NOW, &n, -ENOENT);
	expect_refused("aaaaaaaaaaaaaaaa", HASH_A, NOW + 100, &n, -EKEYEXPIRED);
	expect_refused("eeeeeeeeeeeeeeee", HASH_A, NOW, &n, -EKEYEXPIRED);
	expect_refused("e000000000000000", HASH_A, NOW, &n, -EKEYEXPIRED);
	expect_refused("rrrrrrrrrrrrrrrr", HASH_A, NOW, &n, -EKEYREVOKED);
	expect_refused("0000000000000000", HASH_A, NOW, &n, -EUSERS);

	db_node taken = mknode("new", "spark-2", "worker", NOW);   /* worker's name */
	expect_refused("aaaaaaaaaaaaaaaa", HASH_A, NOW, &taken, -EEXIST);
	taken = mknode("new", "spark-1", "worker", NOW);           /* head's name */
	expect_refused("aaaaaaaaaaaaaaaa", HASH_A, NOW, &taken, -EEXIST);
	taken = mknode("w1", "spark-7", "worker", NOW);            /* id taken */
	snprintf(taken.cert_serial, sizeof taken.cert_serial, "fresh");
	expect_refused("aaaaaaaaaaaaaaaa", HASH_A, NOW, &taken, -EEXIST);
	taken = mknode("new", "spark-8", "head", NOW);             /* a join never makes a head */
	expect_refused("aaaaaaaaaaaaaaaa", HASH_A, NOW, &taken, -EINVAL);
	taken = mknode("new", "spark-8", "worker", NOW);           /* invalid state */
	strcpy(taken.state, "weird");
	expect_refused("aaaaaaaaaaaaaaaa", HASH_A, NOW, &taken, -EINVAL);

	/* After all that, the good token still works exactly once more per use. */
	db_token t;
	cr_assert_eq(db_token_get(D, "aaaaaaaaaaaaaaaa", &t), 0);
	cr_assert_eq(t.uses, 1);
	cr_assert_eq(t.uses_left, 4);
	cr_assert_eq(db_join_commit(D, "aaaaaaaaaaaaaaaa", HASH_A, NOW, &n), 0);
	cr_assert_eq(db_integrity_check(D), 0);
}

Test(db, tokens_add_list_get_revoke)
{
	open_db();
	db_token t;
	cr_assert_eq(db_token_get(D, "nope", &t), -ENOENT);
	cr_assert_eq(db_token_revoke(D, "nope"), -ENOENT);
	add_token("bbbbbbbbbbbbbbbb", HASH_B, 0, -1);
	add_token("aaaaaaaaaaaaaaaa", HASH_A, NOW + 5, 3);
	memset(&t, 0, sizeof t);
	strcpy(t.id, "aaaaaaaaaaaaaaaa");
	strcpy(t.secret_hash, HASH_A);
	cr_assert_eq(db_token_add(D, &t), -EEXIST);
	strcpy(t.id, "cccccccccccccccc");
	strcpy(t.secret_hash, "short");
	cr_assert_eq(db_token_add(D, &t), -EINVAL);

	db_token *ts = NULL;
	size_t n = 0;
	cr_assert_eq(db_token_list(D, &ts, &n), 0);
	cr_assert_eq(n, 2);
	cr_assert_str_eq(ts[0].id, "aaaaaaaaaaaaaaaa");
	cr_assert_str_eq(ts[0].description, "test token aaaaaaaaaaaaaaaa");
	cr_assert_eq(ts[0].expires_at, NOW + 5);
	cr_assert_eq(ts[0].uses_left, 3);
	cr_assert_eq(ts[0].revoked, false);
	cr_assert_str_eq(ts[1].id, "bbbbbbbbbbbbbbbb");
	free(ts);

	cr_assert_eq(db_token_revoke(D, "aaaaaaaaaaaaaaaa"), 0);
	cr_assert_eq(db_token_revoke(D, "aaaaaaaaaaaaaaaa"), 0); /* idempotent */
	cr_assert_eq(db_token_get(D, "aaaaaaaaaaaaaaaa", &t), 0);
	cr_assert(t.revoked);
}

/* ---------- nodes ---------- */

Test(db, node_seen_state_drain)
{
	open_db();
	init_cluster();
	add_token("aaaaaaaaaaaaaaaa", HASH_A, 0, -1);
	db_node n = mknode("w1", "spark-2", "worker", NOW);
	cr_assert_eq(db_join_commit(D, "aaaaaaaaaaaaaaaa", HASH_A, NOW, &n), 0);
	cr_assert_eq(db_node_connected(D, "w1", NOW, NULL, NULL, NULL), 0);

	db_node g;
	cr_assert_eq(db_node_set_state(D, "w1", "unreachable"), 0);
	cr_assert_eq(db_node_get(D, "w1", &g), 0);
	cr_assert_str_eq(g.state, "unreachable");
	cr_assert_eq(db_node_set_state(D, "w1", "bogus"), -EINVAL);
	cr_assert_eq(db_node_set_state(D, "w1", NULL), -EINVAL);
	cr_assert_eq(db_node_set_state(D, "ghost", "down"), -ENOENT);

	cr_assert_eq(db_node_seen(D, "w1", NOW + 50, "169.254.9.9:7301", "0.2.0"), 0);
	cr_assert_eq(db_node_get(D, "w1", &g), 0);
	cr_assert_str_eq(g.state, "ready");
	cr_assert_eq(g.last_seen, NOW + 50);
	cr_assert_str_eq(g.address, "169.254.9.9:7301");
	cr_assert_str_eq(g.version, "0.2.0");
	/* NULL address/version keep what is stored. */
	cr_assert_eq(db_node_seen(D, "w1", NOW + 51, NULL, NULL), 0);
	cr_assert_eq(db_node_get(D, "w1", &g), 0);
	cr_assert_eq(g.last_seen, NOW + 51);
	cr_assert_str_eq(g.address, "169.254.9.9:7301");
	cr_assert_eq(db_node_seen(D, "ghost", NOW, NULL, NULL), -ENOENT);

	cr_assert_eq(db_node_set_drained(D, "w1", true), 0);
	cr_assert_eq(db_node_get(D, "w1", &g), 0);
	cr_assert(g.drained);
	cr_assert_str_eq(g.state, "draining");
	cr_assert_eq(db_node_seen(D, "w1", NOW + 52, NULL, NULL), 0); /* still draining */
	cr_assert_eq(db_node_get(D, "w1", &g), 0);
	cr_assert_str_eq(g.state, "draining");
	cr_assert_eq(db_node_set_state(D, "w1", "down"), 0);        /* liveness wins */
	cr_assert_eq(db_node_get(D, "w1", &g), 0);
	cr_assert_str_eq(g.state, "down");
	cr_assert(g.drained);
	cr_assert_eq(db_node_seen(D, "w1", NOW + 53, NULL, NULL), 0);
	cr_assert_eq(db_node_set_drained(D, "w1", false), 0);
	cr_assert_eq(db_node_get(D, "w1", &g), 0);
	cr_assert_str_eq(g.state, "ready");
	cr_assert_not(g.drained);
	cr_assert_eq(db_node_set_drained(D, "ghost", true), -ENOENT);
}

/* Heartbeats only move last_seen (agent/cluster_head.c HEAD_SEEN_FLUSH_S): never the
 * state, never backwards. */
Test(db, node_touch_only_moves_last_seen_forward)
{
	open_db();
	init_cluster();
	add_token("aaaaaaaaaaaaaaaa", HASH_A, 0, -1);
	db_node n = mknode("w1", "spark-2", "worker", NOW);
	cr_assert_eq(db_join_commit(D, "aaaaaaaaaaaaaaaa", HASH_A, NOW, &n), 0);
	cr_assert_eq(db_node_connected(D, "w1", NOW, NULL, NULL, NULL), 0);
	cr_assert_eq(db_node_set_state(D, "w1", "unreachable"), 0);

	db_node g;
	cr_assert_eq(db_node_touch(D, "w1", NOW + 30), 0);
	cr_assert_eq(db_node_get(D, "w1", &g), 0);
	cr_assert_eq(g.last_seen, NOW + 30);
	cr_assert_str_eq(g.state, "unreachable");
	cr_assert_eq(db_node_touch(D, "w1", NOW + 10), 0);
	cr_assert_eq(db_node_get(D, "w1", &g), 0);
	cr_assert_eq(g.last_seen, NOW + 30);
	cr_assert_eq(db_node_touch(D, "ghost", NOW), -ENOENT);
	cr_assert_eq(db_node_touch(NULL, "w1", NOW), -EINVAL);
	cr_assert_eq(db_node_touch(D, NULL, NOW), -EINVAL);
}

/* Dropping the cached statements and pages changes nothing but memory. */
Test(db, release_memory_keeps_working)
{
	open_db();
	init_cluster();
	db_node g;
	cr_assert_eq(db_node_get(D, "head-id", &g), 0);
	db_mem before, after;
	cr_assert_eq(db_memory(D, &before), 0);
	cr_assert_gt(before.schema, 0);
	cr_assert_gt(before.stmt, 0);
	db_release_memory(D);
	cr_assert_eq(db_memory(D, &after), 0);
	cr_assert_eq(after.stmt, 0);
	cr_assert_leq(after.cache, before.cache);
	cr_assert_eq(db_node_get(D, "head-id", &g), 0);
	cr_assert_str_eq(g.name, "spark-1");
	cr_assert_eq(db_node_seen(D, "head-id", NOW + 5, NULL, NULL), 0);
	db_release_memory(D);
	cr_assert_eq(db_node_get(D, "head-id", &g), 0);
	cr_assert_eq(g.last_seen, NOW + 5);
	db_release_memory(NULL);
	cr_assert_eq(db_memory(NULL, &after), -EINVAL);
}

Test(db, node_list_order)
{
	open_db();
	db_cluster c;
	memset(&c, 0, sizeof c);
	strcpy(c.id, "cid");
	strcpy(c.name, "lab");
	/* The head joined "later" than the workers on purpose. */
	db_node h = mknode("h", "zz-head", "head", NOW + 100);
	cr_assert_eq(db_cluster_create(D, &c, &h), 0);
	add_token("aaaaaaaaaaaaaaaa", HASH_A, 0, -1);
	struct { const char *id, *name; int64_t t; } w[] = {
		{"a", "spark-c", NOW + 2}, {"b", "spark-b", NOW + 1}, {"c", "spark-a", NOW + 2},
		{"d", "spark-d", NOW + 0},
	};
	for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
		db_node n = mknode(w[i].id, w[i].name, "worker", w[i].t);
		cr_assert_eq(db_join_commit(D, "aaaaaaaaaaaaaaaa", HASH_A, NOW, &n), 0);
	}
	db_node *ns = NULL;
	size_t n = 0;
	cr_assert_eq(db_node_list(D, &ns, &n), 0);
	cr_assert_eq(n, 5);
	const char *want[] = {"zz-head", "spark-d", "spark-b", "spark-a", "spark-c"};
	for (size_t i = 0; i < n; i++)
		cr_assert_str_eq(ns[i].name, want[i], "position %zu", i);
	free(ns);
}

Test(db, node_list_empty)
{
	open_db();
	db_node *ns = (db_node *)0x1;
	size_t n = 7;
	cr_assert_eq(db_node_list(D, &ns, &n), 0);
	cr_assert_eq(n, 0);
	free(ns);
}

Test(db, node_remove_revokes_serial)
{
	open_db();
	init_cluster();
	add_token("aaaaaaaaaaaaaaaa", HASH_A, 0, -1);
	db_node n = mknode("w1", "spark-2", "worker", NOW);
	cr_assert_eq(db_join_commit(D, "aaaaaaaaaaaaaaaa", HASH_A, NOW, &n), 0);
	cr_assert_eq(db_cert_revoked(D, "serial-w1"), 0);

	cr_assert_eq(db_node_remove(D, "w1", NOW + 9), 0);
	db_node g;
	cr_assert_eq(db_node_get(D, "w1", &g), -ENOENT);
	cr_assert_eq(db_cert_revoked(D, "serial-w1"), 1);
	cr_assert_eq(db_cert_revoked(D, "serial-head-id"), 0);
	cr_assert_eq(db_cert_revoked(D, ""), 0);
	cr_assert_eq(db_node_remove(D, "w1", NOW + 10), -ENOENT);
	cr_assert_eq(raw_int("SELECT revoked_at FROM revoked_certs WHERE serial = 'serial-w1'"), (int)(NOW + 9));

	/* The head cannot be removed; nothing changes. */
	char before[512], after[512];
	snapshot(before, sizeof before);
	cr_assert_eq(db_node_remove(D, "head-id", NOW), -EPERM);
	snapshot(after, sizeof after);
	cr_assert_str_eq(before, after);

	/* The name is free again; a rejoin with a new certificate works and
	 * the old serial stays revoked across a reopen. */
	n = mknode("w1b", "spark-2", "worker", NOW + 20);
	cr_assert_eq(db_join_commit(D, "aaaaaaaaaaaaaaaa", HASH_A, NOW + 20, &n), 0);
	db_close(D);
	D = NULL;
	open_db();
	cr_assert_eq(db_cert_revoked(D, "serial-w1"), 1);
	cr_assert_eq(db_cert_revoked(D, "serial-w1b"), 0);
	cr_assert_eq(db_integrity_check(D), 0);
}

/* ---------- events ---------- */

Test(db, events_add_list_since)
{
	open_db();
	db_event *ev = NULL;
	size_t n = 9;
	cr_assert_eq(db_event_list(D, 0, 0, &ev, &n), 0);
	cr_assert_eq(n, 0);
	free(ev);

	for (int i = 1; i <= 5; i++) {
		char det[32];
		snprintf(det, sizeof det, "detail %d", i);
		cr_assert_eq(db_event_add(D, NOW + i, i % 2 ? "w1" : NULL, "node_joined", det), 0);
	}
	cr_assert_eq(db_event_add(D, NOW, "w1", "", "x"), -EINVAL);
	cr_assert_eq(db_event_add(D, NOW, "w1", NULL, "x"), -EINVAL);

	cr_assert_eq(db_event_list(D, 0, 0, &ev, &n), 0);
	cr_assert_eq(n, 5);
	for (size_t i = 0; i < n; i++) {
		char det[32];
		snprintf(det, sizeof det, "detail %zu", i + 1);
		cr_assert_str_eq(ev[i].detail, det);
		cr_assert_eq(ev[i].ts, NOW + (int64_t)i + 1);
		cr_assert_str_eq(ev[i].kind, "node_joined");
		cr_assert_str_eq(ev[i].node_id, i % 2 ? "" : "w1");
		if (i)
			cr_assert_gt(ev[i].id, ev[i - 1].id);
	}
	int64_t second = ev[1].id;
	free(ev);

	cr_assert_eq(db_event_list(D, second, 0, &ev, &n), 0);
	cr_assert_eq(n, 3);
	cr_assert_str_eq(ev[0].detail, "detail 3");
	free(ev);
	cr_assert_eq(db_event_list(D, second, 2, &ev, &n), 0);
	cr_assert_eq(n, 2);
	cr_assert_str_eq(ev[1].detail, "detail 4");
	free(ev);
	cr_assert_eq(db_event_list(D, 1000, 10, &ev, &n), 0);
	cr_assert_eq(n, 0);
	free(ev);
}

Test(db, long_strings_are_truncated)
{
	open_db();
	char big[1000];
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	cr_assert_eq(db_event_add(D, NOW, big, big, big), 0);
	db_event *ev = NULL;
	size_t n = 0;
	cr_assert_eq(db_event_list(D, 0, 0, &ev, &n), 0);
	cr_assert_eq(n, 1);
	cr_assert_eq(strlen(ev[0].detail), sizeof ev[0].detail - 1);
	cr_assert_eq(strlen(ev[0].kind), sizeof ev[0].kind - 1);
	cr_assert_eq(strlen(ev[0].node_id), sizeof ev[0].node_id - 1);
	free(ev);

	/* An unterminated struct field is read only up to its size. */
	db_cluster c;
	memset(&c, 'y', sizeof c);
	c.created_at = NOW;
	db_node h = mknode("h", "spark-1", "head", NOW);
	memset(h.address, 'z', sizeof h.address);
	cr_assert_eq(db_cluster_create(D, &c, &h), 0);
	db_cluster g;
	cr_assert_eq(db_cluster_get(D, &g), 0);
	cr_assert_eq(strlen(g.name), sizeof g.name - 1);
	cr_assert_eq(strlen(g.id), sizeof g.id - 1);
	db_node gn;
	cr_assert_eq(db_node_get(D, "h", &gn), 0);
	cr_assert_eq(strlen(gn.address), sizeof gn.address - 1);
}

Test(db, integrity_check_ok)
{
	open_db();
	init_cluster();
	cr_assert_eq(db_integrity_check(D), 0);
}

/* ---------- crash safety ---------- */

#define CRASH_TOKEN "cccccccccccccccc"

static void joiner(int round, int wfd)
{
	db *d = NULL;
	if (db_open(path, &d) < 0)
		_exit(2);
	for (int i = 0; i < 1000000; i++) {
		db_node n;
		char id[32], name[32];
		snprintf(id, sizeof id, "r%d-%d", round, i);
		snprintf(name, sizeof name, "spark-r%d-%d", round, i);
		n = mknode(id, name, "worker", NOW + i);
		if (db_join_commit(d, CRASH_TOKEN, HASH_A, NOW, &n) != 0)
			_exit(3);
		/* Half the time also touch other tables, so the kill lands anywhere. */
		if (i % 2)
			db_node_seen(d, id, NOW + i, NULL, NULL);
		if (i == 0 && write(wfd, "x", 1) != 1)
			_exit(4);
	}
	_exit(0);
}

Test(db, crash_mid_join_leaves_no_half_join, .timeout = 55)
{
	open_db();
	init_cluster();
	add_token(CRASH_TOKEN, HASH_A, 0, -1);
	db_close(D);
	D = NULL;

	for (int round = 0; round < 6; round++) {
		int p[2];
		cr_assert_eq(pipe(p), 0);
		pid_t pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			close(p[0]);
			joiner(round, p[1]);
		}
		close(p[1]);
		char b;
		cr_assert_eq(read(p[0], &b, 1), 1, "child made no join in round %d", round);
		close(p[0]);
		struct timespec ts = {0, (long)(1 + round * 7) * 1000000L};
		nanosleep(&ts, NULL);
		cr_assert_eq(kill(pid, SIGKILL), 0);
		int st;
		cr_assert_eq(waitpid(pid, &st, 0), pid);
		cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "child ended by itself: %d", st);
	}

	open_db();
	cr_assert_eq(db_integrity_check(D), 0);
	db_token t;
	cr_assert_eq(db_token_get(D, CRASH_TOKEN, &t), 0);
	size_t nodes = node_count();
	cr_log_info("crash test: %zu nodes, %lld token uses after 6 kills", nodes, (long long)t.uses);
	cr_assert_geq(t.uses, 6);
	cr_assert_eq((int64_t)nodes - 1, t.uses, "nodes=%zu uses=%lld", nodes, (long long)t.uses);
	cr_assert_eq(raw_int("SELECT count(*) FROM nodes WHERE role = 'worker' AND token_id IS NULL"), 0);
	/* And the database is still writable. */
	db_node n = mknode("after", "spark-after", "worker", NOW);
	cr_assert_eq(db_join_commit(D, CRASH_TOKEN, HASH_A, NOW, &n), 0);
}

/* ---------- fabric reports (migration 2) ---------- */

static db_fabric_port mkport(const char *port, int twin, const char *netdev, int carrier)
{
	db_fabric_port p;
	memset(&p, 0, sizeof p);
	snprintf(p.port, sizeof p.port, "%s", port);
	p.twin = twin;
	snprintf(p.netdev, sizeof p.netdev, "%s", netdev);
	p.present = true;
	p.carrier = carrier;
	snprintf(p.operstate, sizeof p.operstate, "%s", carrier ? "up" : "down");
	p.speed_mbps = carrier ? 200000 : -1;
	p.mtu = 9000;
	snprintf(p.rdma_device, sizeof p.rdma_device, "roce%s", netdev);
	snprintf(p.rdma_state, sizeof p.rdma_state, "active");
	p.gid_index = 3;
	return p;
}

Test(db, fabric_report_roundtrip_and_replace)
{
	open_db();
	init_cluster();
	db_fabric f;
	cr_assert_eq(db_fabric_get(D, "head-id", &f), -ENOENT);
	db_fabric_port ports[3] = {mkport("0", 0, "enp1s0f0np0", 1), mkport("0", 1, "enP2p1s0f0np0", 0),
				   mkport("1", 0, "enp1s0f1np1", -1)};
	ports[2].present = false;
	ports[2].mtu = -1;
	ports[2].gid_index = -1;
	ports[2].rdma_device[0] = '\0';
	cr_assert_eq(db_fabric_set(D, "head-id", NOW, "{\"ports\":[]}", "[{\"code\":\"twin_down\"}]", 1,
				   ports, 3), 0);
	cr_assert_eq(db_fabric_get(D, "head-id", &f), 0);
	cr_expect_eq(f.updated_at, NOW);
	cr_expect_eq(f.n_findings, 1);
	cr_expect_str_eq(f.discovery, "{\"ports\":[]}");
	cr_expect_str_eq(f.findings, "[{\"code\":\"twin_down\"}]");
	db_fabric_free(&f);
	db_fabric_free(&f); /* safe to repeat */

	db_fabric_port *got = NULL;
	size_t n = 0;
	cr_assert_eq(db_fabric_ports(D, "head-id", &got, &n), 0);
	cr_assert_eq(n, 3);
	cr_expect_str_eq(got[0].netdev, "enp1s0f0np0");
	cr_expect_eq(got[0].carrier, 1);
	cr_expect_eq(got[0].speed_mbps, 200000);
	cr_expect_eq(got[0].gid_index, 3);
	cr_expect_str_eq(got[1].netdev, "enP2p1s0f0np0");
	cr_expect_eq(got[1].twin, 1);
	cr_expect_eq(got[1].carrier, 0);
	cr_expect_eq(got[1].speed_mbps, -1);
	cr_expect_str_eq(got[2].port, "1");
	cr_expect(!got[2].present);
	cr_expect_eq(got[2].carrier, -1);
	cr_expect_eq(got[2].mtu, -1);
	cr_expect_eq(got[2].gid_index, -1);
	cr_expect_str_eq(got[2].rdma_device, "");
	free(got);

	/* A new report replaces the old one, rows included. */
	cr_assert_eq(db_fabric_set(D, "head-id", NOW + 5, "{\"ports\":[1]}", NULL, 0, ports + 1, 1), 0);
	cr_assert_eq(db_fabric_get(D, "head-id", &f), 0);
	cr_expect_eq(f.updated_at, NOW + 5);
	cr_expect_eq(f.n_findings, 0);
	cr_expect_str_eq(f.findings, "[]");
	db_fabric_free(&f);
	cr_assert_eq(db_fabric_ports(D, "head-id", &got, &n), 0);
	cr_assert_eq(n, 1);
	cr_expect_str_eq(got[0].netdev, "enP2p1s0f0np0");
	free(got);
	cr_assert_eq(db_integrity_check(D), 0);
}

Test(db, fabric_report_refusals_change_nothing)
{
	open_db();
	init_cluster();
	db_fabric_port p = mkport("0", 0, "enp1s0f0np0", 1);
	cr_assert_eq(db_fabric_set(D, "head-id", NOW, "{}", "[]", 0, &p, 1), 0);
	char before[256], after[256];
	snapshot(before, sizeof before);
	int rows = raw_int("SELECT count(*) FROM fabric_ports");
	cr_expect_eq(db_fabric_set(D, "nobody", NOW, "{}", "[]", 0, &p, 1), -ENOENT);
	cr_expect_eq(db_fabric_set(D, "head-id", NOW, "{not json", "[]", 0, &p, 1), -EINVAL);
	cr_expect_eq(db_fabric_set(D, "head-id", NOW, "{}", "[", 0, &p, 1), -EINVAL);
	cr_expect_eq(db_fabric_set(D, "head-id", NOW, "{}", "[]", -1, &p, 1), -EINVAL);
	cr_expect_eq(db_fabric_set(D, NULL, NOW, "{}", "[]", 0, &p, 1), -EINVAL);
	db_fabric_port dup[2] = {p, p}; /* one netdev twice */
	cr_expect_eq(db_fabric_set(D, "head-id", NOW + 1, "{}", "[]", 0, dup, 2), -EEXIST);
	db_fabric_port bad = p;
	memset(bad.netdev, 'x', sizeof bad.netdev); /* unterminated */
	cr_expect_eq(db_fabric_set(D, "head-id", NOW + 1, "{}", "[]", 0, &bad, 1), -EINVAL);
	snapshot(after, sizeof after);
	cr_expect_str_eq(after, before);
	cr_expect_eq(raw_int("SELECT count(*) FROM fabric_ports"), rows);
	db_fabric f;
	cr_assert_eq(db_fabric_get(D, "head-id", &f), 0);
	cr_expect_eq(f.updated_at, NOW);
	db_fabric_free(&f);
	db_fabric_port *got = NULL;
	size_t n = 9;
	cr_expect_eq(db_fabric_ports(D, "nobody", &got, &n), 0);
	cr_expect_eq(n, 0);
	free(got);
}

Test(db, fabric_report_goes_with_its_node)
{
	open_db();
	init_cluster();
	add_token("0123456789abcdef", HASH_A, 0, -1);
	db_node w = mknode("w1", "spark-2", "worker", NOW + 1);
	cr_assert_eq(db_join_commit(D, "0123456789abcdef", HASH_A, NOW + 1, &w), 0);
	db_fabric_port p[2] = {mkport("0", 0, "enp1s0f0np0", 1), mkport("0", 1, "enP2p1s0f0np0", 1)};
	cr_assert_eq(db_fabric_set(D, "w1", NOW + 2, "{}", "[]", 0, p, 2), 0);
	cr_assert_eq(db_fabric_set(D, "head-id", NOW + 2, "{}", "[]", 0, p, 2), 0);
	cr_assert_eq(db_node_remove(D, "w1", NOW + 3), 0);
	db_fabric f;
	cr_expect_eq(db_fabric_get(D, "w1", &f), -ENOENT);
	cr_expect_eq(raw_int("SELECT count(*) FROM fabric_ports WHERE node_id = 'w1'"), 0);
	cr_expect_eq(raw_int("SELECT count(*) FROM fabric_ports WHERE node_id = 'head-id'"), 2);
	cr_assert_eq(db_integrity_check(D), 0);
}

Test(db, migration_from_version_1_keeps_data)
{
	open_db();
	init_cluster();
	db_close(D);
	D = NULL;
	int latest = raw_int("PRAGMA user_version");
	/* Make the file a version-1 database again: drop every later table. */
	sqlite3 *h;
	cr_assert_eq(sqlite3_open_v2(path, &h, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(h, "PRAGMA foreign_keys = OFF", NULL, NULL, NULL), SQLITE_OK);
	for (;;) {
		sqlite3_stmt *st;
		cr_assert_eq(sqlite3_prepare_v2(h,
						"SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT IN "
						"('cluster', 'nodes', 'tokens', 'revoked_certs', 'events', "
						"'sqlite_sequence') LIMIT 1",
						-1, &st, NULL),
			     SQLITE_OK);
		char drop[160] = "";
		if (sqlite3_step(st) == SQLITE_ROW)
			snprintf(drop, sizeof drop, "DROP TABLE \"%s\"", sqlite3_column_text(st, 0));
		sqlite3_finalize(st);
		if (!drop[0])
			break;
		cr_assert_eq(sqlite3_exec(h, drop, NULL, NULL, NULL), SQLITE_OK, "%s: %s", drop,
			     sqlite3_errmsg(h));
	}
	/* ... and the columns later migrations added to version-1 tables */
	cr_assert_eq(sqlite3_exec(h, "ALTER TABLE nodes DROP COLUMN connected_at;"
				     "ALTER TABLE nodes DROP COLUMN key_hash;"
				     "ALTER TABLE nodes DROP COLUMN mem_total;"
				     "ALTER TABLE nodes DROP COLUMN mem_available;"
				     "ALTER TABLE nodes DROP COLUMN mem_budget;"
				     "ALTER TABLE nodes DROP COLUMN mem_at;", NULL, NULL, NULL),
		     SQLITE_OK, "%s", sqlite3_errmsg(h));
	cr_assert_eq(sqlite3_exec(h, "PRAGMA user_version = 1", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(h);
	open_db();
	cr_assert_eq(db_schema_version(D), latest);
	db_node hn;
	cr_assert_eq(db_node_get(D, "head-id", &hn), 0);
	cr_expect_str_eq(hn.state, "ready", "the head counts as connected after the migration");
	cr_assert_eq(node_count(), 1);
	db_cluster c;
	cr_assert_eq(db_cluster_get(D, &c), 0);
	cr_expect_str_eq(c.name, "lab");
	db_fabric_port p = mkport("0", 0, "enp1s0f0np0", 1);
	cr_expect_eq(db_fabric_set(D, "head-id", NOW, "{}", "[]", 0, &p, 1), 0);
	cr_assert_eq(db_integrity_check(D), 0);
}

/* ---------- joins whose answer was lost (issue 14) ---------- */

Test(db, join_pending_resume_keeps_the_token_use)
{
	open_db();
	init_cluster();
	add_token("1111111111111111", HASH_A, 0, 1); /* single use */
	db_node n = mknode("w1", "spark-2", "worker", NOW);
	strcpy(n.key_hash, HASH_B);
	cr_assert_eq(db_join_commit(D, "1111111111111111", HASH_A, NOW, &n), 0);
	/* the answer was lost: the same join again */
	db_node p;
	cr_assert_eq(db_join_pending(D, "1111111111111111", HASH_A, "spark-2", &p), 0);
	cr_assert_str_eq(p.id, "w1");
	cr_assert_str_eq(p.key_hash, HASH_B);
	cr_expect_eq(db_join_pending(D, "1111111111111111", HASH_B, "spark-2", &p), -ENOENT,
		     "a wrong secret finds nothing");
	cr_expect_eq(db_join_pending(D, "1111111111111111", HASH_A, "spark-9", &p), -ENOENT);
	db_node again = n;
	strcpy(again.cert_serial, "serial-w1-again");
	cr_assert_eq(db_join_resume(D, "1111111111111111", HASH_A, &again, "serial-w1", NOW + 5), 0);
	db_token t;
	cr_assert_eq(db_token_get(D, "1111111111111111", &t), 0);
	cr_expect_eq(t.uses_left, 0, "the resume took no second use");
	cr_expect_eq(t.uses, 1);
	cr_expect_eq(db_cert_revoked(D, "serial-w1"), 1, "the lost answer's certificate is revoked");
	cr_expect_eq(db_cert_revoked(D, "serial-w1-again"), 0);
	db_node g;
	cr_assert_eq(db_node_get(D, "w1", &g), 0);
	cr_expect_str_eq(g.cert_serial, "serial-w1-again");
	/* once connected, the join is complete and can no longer be resumed */
	cr_assert_eq(db_node_connected(D, "w1", NOW + 6, NULL, NULL, NULL), 0);
	cr_expect_eq(db_join_pending(D, "1111111111111111", HASH_A, "spark-2", &p), -ENOENT);
	cr_expect_eq(db_join_resume(D, "1111111111111111", HASH_A, &again, "", NOW + 7), -ENOENT);
}

Test(db, join_never_connected_expires_and_gives_the_use_back)
{
	open_db();
	init_cluster();
	add_token("2222222222222222", HASH_A, 0, 1);
	add_token("3333333333333333", HASH_B, 0, -1);
	db_node ghost = mknode("g1", "ghost", "worker", NOW);
	db_node live = mknode("l1", "live", "worker", NOW);
	db_node young = mknode("y1", "young", "worker", NOW + 100);
	cr_assert_eq(db_join_commit(D, "2222222222222222", HASH_A, NOW, &ghost), 0);
	cr_assert_eq(db_join_commit(D, "3333333333333333", HASH_B, NOW, &live), 0);
	cr_assert_eq(db_join_commit(D, "3333333333333333", HASH_B, NOW + 100, &young), 0);
	cr_assert_eq(db_node_connected(D, "l1", NOW + 1, NULL, NULL, NULL), 0);
	db_node *gone = NULL;
	size_t n = 0;
	cr_assert_eq(db_join_expire(D, NOW + 50, NOW + 60, &gone, &n), 0);
	cr_assert_eq(n, 1);
	cr_expect_str_eq(gone[0].name, "ghost");
	free(gone);
	db_node g;
	cr_expect_eq(db_node_get(D, "g1", &g), -ENOENT);
	cr_expect_eq(db_node_get(D, "l1", &g), 0, "a node that connected stays");
	cr_expect_eq(db_node_get(D, "y1", &g), 0, "a join younger than the cutoff stays");
	cr_expect_eq(db_cert_revoked(D, "serial-g1"), 1);
	db_token t;
	cr_assert_eq(db_token_get(D, "2222222222222222", &t), 0);
	cr_expect_eq(t.uses_left, 1, "the single use is back");
	cr_expect_eq(t.uses, 0);
	cr_assert_eq(db_token_get(D, "3333333333333333", &t), 0);
	cr_expect_eq(t.uses_left, -1, "an unlimited token stays unlimited");
	char **rv = NULL;
	size_t nrv = 0;
	cr_assert_eq(db_revoked_list(D, &rv, &nrv), 0);
	cr_assert_eq(nrv, 1);
	cr_expect_str_eq(rv[0], "serial-g1");
	db_strv_free(rv, nrv);
}

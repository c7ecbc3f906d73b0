/* Criterion tests for the db/ functions of issue 15: a node's state change and
 * its event in one transaction (db_node_transition), and the questions that
 * callers used to answer in C over loaded rows (a node's newest events, its
 * groups, a group's nodes, a node's ports with carrier). Also the statement
 * cache: statements given back by db_release_memory come back on their next
 * use, topology runs included. Raw sqlite3 calls only read, except one
 * trigger that makes event inserts fail (to show the transaction). */
#include <criterion/criterion.h>

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "db.h"
#include "db_tmp.h"

#define NOW ((int64_t)1790000000)

static db *D;

/* A worker that joined with its own token and, unless pending, connected. */
static void add_worker(const char *id, const char *name, bool connect)
{
	db_token t = {.created_at = NOW, .uses_left = -1};
	snprintf(t.id, sizeof t.id, "t%s", id);
	memset(t.secret_hash, 'a', 64);
	cr_assert_eq(db_token_add(D, &t), 0);
	db_node n = {.joined_at = NOW, .last_seen = NOW};
	snprintf(n.id, sizeof n.id, "%s", id);
	snprintf(n.name, sizeof n.name, "%s", name);
	snprintf(n.address, sizeof n.address, "169.254.0.2:7300");
	snprintf(n.cert_serial, sizeof n.cert_serial, "serial-%s", id);
	cr_assert_eq(db_join_commit(D, t.id, t.secret_hash, NOW, &n), 0);
	if (connect)
		cr_assert_eq(db_node_connected(D, id, NOW + 1, NULL, NULL, NULL), 0);
}

static void setup(void)
{
	db_tmp_setup(&D, true);
	db_cluster c = {.created_at = NOW};
	strcpy(c.id, "c1");
	strcpy(c.name, "lab");
	db_node h = {.joined_at = NOW};
	strcpy(h.id, "n1");
	strcpy(h.name, "spark-1");
	cr_assert_eq(db_cluster_create(D, &c, &h), 0);
	add_worker("n2", "spark-2", true);
	add_worker("n3", "spark-3", true);
	add_worker("n4", "spark-4", true);
}

static void teardown(void)
{
	db_tmp_teardown(&D);
}

TestSuite(db_queries, .init = setup, .fini = teardown, .timeout = 50);

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

static const char *state_of(const char *id)
{
	static db_node n;
	cr_assert_eq(db_node_get(D, id, &n), 0);
	return n.state;
}

/* The node's newest event (db_node_events with limit 1). */
static db_event last_event(const char *id)
{
	db_event *ev = NULL, r;
	size_t n = 0;
	cr_assert_eq(db_node_events(D, id, 1, &ev, &n), 0);
	cr_assert_eq(n, 1, "%s has no event", id);
	r = ev[0];
	free(ev);
	return r;
}

/* ---------- db_node_transition ---------- */

Test(db_queries, transition_sets_state_and_writes_its_event)
{
	int events = raw_int("SELECT count(*) FROM events");
	cr_assert_eq(db_node_transition(D, "n2", "unreachable", NULL, NOW + 10), 1);
	cr_expect_str_eq(state_of("n2"), "unreachable");
	db_event ev = last_event("n2");
	cr_expect_str_eq(ev.kind, "unreachable");
	cr_expect_str_eq(ev.detail, "ready -> unreachable");
	cr_expect_eq(ev.ts, NOW + 10);
	cr_expect_eq(raw_int("SELECT count(*) FROM events"), events + 1);

	/* the same state again writes nothing */
	cr_assert_eq(db_node_transition(D, "n2", "unreachable", NULL, NOW + 11), 0);
	cr_expect_eq(raw_int("SELECT count(*) FROM events"), events + 1);

	/* a detail given is kept as given */
	cr_assert_eq(db_node_transition(D, "n2", "ready", "heartbeat after 9s", NOW + 12), 1);
	cr_expect_str_eq(state_of("n2"), "ready");
	ev = last_event("n2");
	cr_expect_str_eq(ev.kind, "ready");
	cr_expect_str_eq(ev.detail, "heartbeat after 9s");
	cr_expect_str_eq(state_of("n3"), "ready", "other nodes are left alone");
}

Test(db_queries, transition_refuses_unknown_nodes_and_states)
{
	int events = raw_int("SELECT count(*) FROM events");
	cr_expect_eq(db_node_transition(D, "nope", "down", NULL, NOW), -ENOENT);
	cr_expect_eq(db_node_transition(D, "n2", "joining", NULL, NOW), -EINVAL);
	cr_expect_eq(db_node_transition(D, "n2", "Ready", NULL, NOW), -EINVAL);
	cr_expect_eq(db_node_transition(D, "n2", "", NULL, NOW), -EINVAL);
	cr_expect_eq(db_node_transition(D, "n2", NULL, NULL, NOW), -EINVAL);
	cr_expect_eq(db_node_transition(D, NULL, "down", NULL, NOW), -EINVAL);
	cr_expect_eq(db_node_transition(NULL, "n2", "down", NULL, NOW), -EINVAL);
	cr_expect_eq(raw_int("SELECT count(*) FROM events"), events);
	cr_expect_str_eq(state_of("n2"), "ready");
}

Test(db_queries, transition_of_a_drained_node)
{
	cr_assert_eq(db_node_set_drained(D, "n3", true), 0);
	cr_assert_str_eq(state_of("n3"), "draining");
	int events = raw_int("SELECT count(*) FROM events");
	/* Still ready underneath: a live session saying "ready" changes nothing
	 * (no "draining -> ready" event at every liveness tick). */
	cr_expect_eq(db_node_transition(D, "n3", "ready", NULL, NOW + 5), 0);
	cr_expect_eq(raw_int("SELECT count(*) FROM events"), events);
	/* A real change says what `node ls` showed before it. */
	cr_assert_eq(db_node_transition(D, "n3", "down", NULL, NOW + 6), 1);
	cr_expect_str_eq(last_event("n3").detail, "draining -> down");
	cr_expect_str_eq(state_of("n3"), "down");
	cr_assert_eq(db_node_transition(D, "n3", "ready", NULL, NOW + 7), 1);
	cr_expect_str_eq(last_event("n3").detail, "down -> ready");
	cr_expect_str_eq(state_of("n3"), "draining");
}

Test(db_queries, transition_is_one_transaction)
{
	/* Make every event insert fail: the state must not change either. */
	sqlite3 *h = NULL;
	cr_assert_eq(sqlite3_open_v2(path, &h, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(h,
				  "CREATE TRIGGER no_events BEFORE INSERT ON events "
				  "BEGIN SELECT RAISE(ABORT, 'no events today'); END",
				  NULL, NULL, NULL),
		     SQLITE_OK, "%s", sqlite3_errmsg(h));
	int r = db_node_transition(D, "n4", "down", NULL, NOW + 3);
	cr_expect_lt(r, 0, "the failed event insert is reported (%d)", r);
	cr_expect_str_eq(state_of("n4"), "ready", "the state change was rolled back with it");
	cr_assert_eq(sqlite3_exec(h, "DROP TRIGGER no_events", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(h);
	cr_expect_eq(db_node_transition(D, "n4", "down", NULL, NOW + 4), 1);
	cr_expect_str_eq(state_of("n4"), "down");
	cr_expect_str_eq(last_event("n4").detail, "ready -> down");
}

/* ---------- a node's newest events ---------- */

Test(db_queries, node_events_are_the_newest_of_that_node)
{
	/* More than the 1000 events the head used to read for `node show`. */
	for (int i = 0; i < 1200; i++) {
		char d[32];
		snprintf(d, sizeof d, "e%d", i);
		const char *who = i % 3 == 0 ? "n2" : i % 3 == 1 ? "n3" : "";
		cr_assert_eq(db_event_add(D, NOW + 100 + i, who, "test", d), 0);
	}
	db_event *ev = NULL;
	size_t n = 0;
	cr_assert_eq(db_node_events(D, "n2", 10, &ev, &n), 0);
	cr_assert_eq(n, 10);
	/* n2 got e0, e3, ... e1197: the newest ten are e1170..e1197, oldest first */
	for (size_t i = 0; i < n; i++) {
		char want[32];
		snprintf(want, sizeof want, "e%zu", 1170 + 3 * i);
		cr_expect_str_eq(ev[i].node_id, "n2");
		cr_expect_str_eq(ev[i].detail, want);
		if (i)
			cr_expect_gt(ev[i].id, ev[i - 1].id);
	}
	free(ev);
	cr_assert_eq(db_node_events(D, "n2", 0, &ev, &n), 0);
	cr_expect_eq(n, 400, "limit 0 is all of them");
	cr_expect_str_eq(ev[0].detail, "e0");
	free(ev);
	cr_assert_eq(db_node_events(D, "n4", 10, &ev, &n), 0);
	cr_expect_eq(n, 0, "n4 has no event of its own");
	free(ev);
	cr_assert_eq(db_node_events(D, "nobody", 10, &ev, &n), 0);
	cr_expect_eq(n, 0);
	free(ev);
	cr_expect_eq(db_node_events(D, NULL, 10, &ev, &n), -EINVAL);
	cr_expect_eq(raw_int("SELECT count(*) FROM sqlite_master WHERE type = 'index' "
			     "AND name = 'events_node'"),
		     1, "looked up by index, not by reading the log");
}

Test(db_queries, node_events_outlive_the_node)
{
	cr_assert_eq(db_node_transition(D, "n4", "down", NULL, NOW + 1), 1);
	cr_assert_eq(db_node_remove(D, "n4", NOW + 2), 0);
	db_event *ev = NULL;
	size_t n = 0;
	cr_assert_eq(db_node_events(D, "n4", 10, &ev, &n), 0);
	cr_assert_eq(n, 1);
	cr_expect_str_eq(ev[0].kind, "down");
	free(ev);
}

/* ---------- groups of a node, nodes of a group ---------- */

static void mkgroup(const char *name, bool shared, const char *const *ids, size_t n)
{
	db_group g = {.shared = shared, .created_at = NOW};
	snprintf(g.name, sizeof g.name, "%s", name);
	cr_assert_eq(db_group_create(D, &g, ids, n, NULL, NULL), 0, "group %s", name);
}

Test(db_queries, node_groups_and_group_nodes)
{
	const char *g1[] = {"n3", "n2"}, *g2[] = {"n3"};
	mkgroup("zeta", true, g1, 2);
	mkgroup("alpha", true, g2, 1);
	char **names = NULL;
	size_t n = 0;
	cr_assert_eq(db_node_groups(D, "n3", &names, &n), 0);
	cr_assert_eq(n, 2);
	cr_expect_str_eq(names[0], "alpha");
	cr_expect_str_eq(names[1], "zeta");
	db_strv_free(names, n);
	cr_assert_eq(db_node_groups(D, "n2", &names, &n), 0);
	cr_assert_eq(n, 1);
	cr_expect_str_eq(names[0], "zeta");
	db_strv_free(names, n);
	cr_assert_eq(db_node_groups(D, "n4", &names, &n), 0);
	cr_expect_eq(n, 0);
	db_strv_free(names, n);

	db_node *ns = NULL;
	cr_assert_eq(db_group_nodes(D, "zeta", &ns, &n), 0);
	cr_assert_eq(n, 2);
	cr_expect_str_eq(ns[0].id, "n3", "rank order, not join order");
	cr_expect_str_eq(ns[0].name, "spark-3");
	cr_expect_str_eq(ns[0].address, "169.254.0.2:7300");
	cr_expect_str_eq(ns[1].id, "n2");
	free(ns);

	/* rows are full node rows, with the state as shown */
	cr_assert_eq(db_node_set_drained(D, "n2", true), 0);
	cr_assert_eq(db_group_nodes(D, "zeta", &ns, &n), 0);
	cr_assert_eq(n, 2);
	cr_expect_str_eq(ns[1].state, "draining");
	cr_expect(ns[1].drained);
	free(ns);

	/* a removed node leaves its groups */
	cr_assert_eq(db_node_remove(D, "n3", NOW + 1), 0);
	cr_assert_eq(db_group_nodes(D, "zeta", &ns, &n), 0);
	cr_assert_eq(n, 1);
	cr_expect_str_eq(ns[0].id, "n2");
	free(ns);
	cr_assert_eq(db_group_nodes(D, "alpha", &ns, &n), 0);
	cr_expect_eq(n, 0);
	free(ns);
	/* ... and their shape no longer holds: one member left is single, none
	 * unknown, the note names the node */
	db_group g;
	cr_assert_eq(db_group_get(D, "zeta", &g), 0);
	cr_expect_str_eq(g.shape, "single");
	cr_expect(strstr(g.note, "spark-3 was removed"), "%s", g.note);
	cr_assert_eq(db_group_get(D, "alpha", &g), 0);
	cr_expect_str_eq(g.shape, "unknown");
	cr_assert_eq(db_group_nodes(D, "no-such-group", &ns, &n), 0);
	cr_expect_eq(n, 0);
	free(ns);
	cr_expect_eq(db_group_nodes(D, NULL, &ns, &n), -EINVAL);
	cr_expect_eq(db_node_groups(D, NULL, &names, &n), -EINVAL);
}

/* ---------- ports with carrier ---------- */

static db_fabric_port port(const char *p, int twin, const char *netdev, int carrier)
{
	db_fabric_port r = {.twin = twin, .present = true, .carrier = carrier, .speed_mbps = -1,
			    .mtu = 9000, .gid_index = -1};
	snprintf(r.port, sizeof r.port, "%s", p);
	snprintf(r.netdev, sizeof r.netdev, "%s", netdev);
	return r;
}

Test(db_queries, fabric_ports_up_counts_physical_ports)
{
	cr_expect_eq(db_fabric_ports_up(D, "n2"), -ENOENT, "never reported");
	db_fabric_port p[4] = {port("0", 0, "enp1s0f0np0", 0), port("0", 1, "enP2p1s0f0np0", 1),
			       port("1", 0, "enp1s0f1np1", 0), port("1", 1, "enP2p1s0f1np1", -1)};
	cr_assert_eq(db_fabric_set(D, "n2", NOW, "{}", "[]", 0, p, 4), 0);
	cr_expect_eq(db_fabric_ports_up(D, "n2"), 1, "port 0 is up through its second twin");
	p[2].carrier = 1;
	p[3].carrier = 1;
	cr_assert_eq(db_fabric_set(D, "n2", NOW + 1, "{}", "[]", 0, p, 4), 0);
	cr_expect_eq(db_fabric_ports_up(D, "n2"), 2, "two twins up are still one port");
	for (int i = 0; i < 4; i++)
		p[i].carrier = 0;
	cr_assert_eq(db_fabric_set(D, "n2", NOW + 2, "{}", "[]", 0, p, 4), 0);
	cr_expect_eq(db_fabric_ports_up(D, "n2"), 0);
	cr_assert_eq(db_fabric_set(D, "n2", NOW + 3, "{}", "[]", 0, NULL, 0), 0);
	cr_expect_eq(db_fabric_ports_up(D, "n2"), -ENOENT, "a report without ports");
	cr_expect_eq(db_fabric_ports_up(D, "n3"), -ENOENT);
	cr_expect_eq(db_fabric_ports_up(D, NULL), -EINVAL);
}

/* ---------- the statement cache ---------- */

static int64_t add_run(void)
{
	db_topo_run r = {.started_at = NOW, .finished_at = NOW + 1, .n_nodes = 2};
	strcpy(r.cls, "pair");
	strcpy(r.result, "pass");
	r.verdict = (char *)"{}";
	db_topo_cable c = {.twins_ok = 2, .mtu_ok = true};
	strcpy(c.kind, "direct");
	strcpy(c.a_node, "spark-1");
	strcpy(c.a_port, "0");
	strcpy(c.b_node, "spark-2");
	strcpy(c.b_port, "1");
	cr_assert_eq(db_topo_run_add(D, &r, &c, 1, NULL, 0), 0);
	return r.id;
}

Test(db_queries, released_statements_come_back_topology_runs_too)
{
	int64_t id = add_run();
	db_topo_run latest;
	cr_assert_eq(db_topo_run_latest(D, &latest), 0);
	cr_expect_eq(latest.id, id);
	db_topo_run_free(&latest);
	db_mem m;
	cr_assert_eq(db_memory(D, &m), 0);
	cr_assert_gt(m.stmt, 0, "topology statements are cached like the others");
	db_release_memory(D);
	cr_assert_eq(db_memory(D, &m), 0);
	cr_expect_eq(m.stmt, 0, "every cached statement was given back");
	/* every area works again after the release, twice */
	for (int round = 0; round < 2; round++) {
		int64_t id2 = add_run();
		cr_assert_gt(id2, id);
		id = id2;
		db_topo_cable *c = NULL;
		size_t n = 0;
		cr_assert_eq(db_topo_cables(D, id, &c, &n), 0);
		cr_assert_eq(n, 1);
		cr_expect_str_eq(c[0].b_node, "spark-2");
		free(c);
		cr_assert_eq(db_node_transition(D, "n2", round ? "ready" : "down", NULL, NOW), 1);
		cr_expect_str_eq(state_of("n2"), round ? "ready" : "down");
		cr_expect_eq(db_fabric_ports_up(D, "n2"), -ENOENT);
		db_release_memory(D);
	}
}

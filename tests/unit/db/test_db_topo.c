/* Criterion tests for db/'s topology validation runs (issue 5, migration 4):
 * a run with its cables and probes round-trips, bad values are refused without
 * a trace, the newest run is the one status shows, only DB_TOPO_KEEP_RUNS
 * runs are kept (their rows go with them). Every test has its own temp dir. */
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

static db *D;

static void setup(void)
{
	db_tmp_setup(&D, true);
}

static void teardown(void)
{
	db_tmp_teardown(&D);
}

TestSuite(db_topo, .init = setup, .fini = teardown, .timeout = 50);

/* Rows of a table, read with a separate read-only connection. */
static int count(const char *sql)
{
	sqlite3 *h = NULL;
	cr_assert_eq(sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	sqlite3_stmt *s = NULL;
	cr_assert_eq(sqlite3_prepare_v2(h, sql, -1, &s, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_step(s), SQLITE_ROW);
	int n = sqlite3_column_int(s, 0);
	sqlite3_finalize(s);
	sqlite3_close(h);
	return n;
}

static db_topo_run run_of(const char *cls, const char *result, int64_t ts)
{
	db_topo_run r = {0};
	r.started_at = ts;
	r.finished_at = ts + 2;
	r.duration_ms = 2345;
	snprintf(r.expect, sizeof r.expect, "ring");
	r.quick = true;
	snprintf(r.cls, sizeof r.cls, "%s", cls);
	snprintf(r.result, sizeof r.result, "%s", result);
	r.n_nodes = 4;
	r.n_findings = 1;
	r.verdict = (char *)"{\"class\":\"ring\",\"result\":\"pass\"}";
	return r;
}

Test(db_topo, run_round_trip)
{
	cr_assert_eq(db_topo_run_latest(D, &(db_topo_run){0}), -ENOENT);
	db_topo_cable c[2] = {{.kind = "direct", .a_node = "spark-1", .a_port = "0",
			       .b_node = "spark-2", .b_port = "1", .twins_ok = 2, .mtu_ok = true},
			      {.kind = "switch", .a_node = "spark-3", .a_port = "1", .b_node = "l2-1",
			       .twins_ok = 1, .mtu_ok = false, .same_port = false}};
	db_topo_probe p[1] = {{.a_node = "spark-1", .a_netdev = "enp1s0f0np0", .b_node = "spark-2",
			       .b_netdev = "enp1s0f1np1", .twin = 0, .transport = "tcp",
			       .result = "warn", .p50_us = 11.5, .p99_us = -1, .gbps = 0.5,
			       .mtu_largest = 1500, .detail = "{\"x\":1}"}};
	db_topo_run r = run_of("ring", "warn", 1790000000);
	cr_assert_eq(db_topo_run_add(D, &r, c, 2, p, 1), 0);
	cr_assert_gt(r.id, 0);
	db_topo_run got;
	cr_assert_eq(db_topo_run_latest(D, &got), 0);
	cr_expect_eq(got.id, r.id);
	cr_expect_str_eq(got.cls, "ring");
	cr_expect_str_eq(got.result, "warn");
	cr_expect_str_eq(got.expect, "ring");
	cr_expect(got.quick);
	cr_expect_eq(got.n_nodes, 4);
	cr_expect_eq(got.n_findings, 1);
	cr_expect_eq(got.duration_ms, 2345);
	cr_expect_eq(got.finished_at, 1790000002);
	cr_expect_str_eq(got.verdict, "{\"class\":\"ring\",\"result\":\"pass\"}");
	db_topo_run_free(&got);
	cr_expect_null(got.verdict);

	db_topo_cable *cc = NULL;
	size_t nc = 0;
	cr_assert_eq(db_topo_cables(D, r.id, &cc, &nc), 0);
	cr_assert_eq(nc, 2);
	cr_expect_str_eq(cc[0].kind, "direct");
	cr_expect_str_eq(cc[0].b_port, "1");
	cr_expect_eq(cc[0].twins_ok, 2);
	cr_expect(cc[0].mtu_ok);
	cr_expect_str_eq(cc[1].b_node, "l2-1");
	cr_expect(!cc[1].mtu_ok);
	free(cc);
	db_topo_probe *pp = NULL;
	size_t np = 0;
	cr_assert_eq(db_topo_probes(D, r.id, &pp, &np), 0);
	cr_assert_eq(np, 1);
	cr_expect_str_eq(pp[0].b_netdev, "enp1s0f1np1");
	cr_expect_str_eq(pp[0].result, "warn");
	cr_expect_float_eq(pp[0].p50_us, 11.5, 1e-9);
	cr_expect_lt(pp[0].p99_us, 0, "unknown stays unknown");
	cr_expect_eq(pp[0].mtu_largest, 1500);
	cr_expect_null(pp[0].detail);
	free(pp);
	cr_expect_eq(count("SELECT count(*) FROM topo_probes WHERE json_extract(detail, '$.x') = 1"), 1);
	cr_expect_eq(db_integrity_check(D), 0);
}

Test(db_topo, refuses_bad_values_whole)
{
	db_topo_run r = run_of("ring", "maybe", 1);
	cr_expect_eq(db_topo_run_add(D, &r, NULL, 0, NULL, 0), -EINVAL);
	r = run_of("", "pass", 1);
	cr_expect_eq(db_topo_run_add(D, &r, NULL, 0, NULL, 0), -EINVAL);
	r = run_of("ring", "pass", 1);
	r.verdict = NULL;
	cr_expect_eq(db_topo_run_add(D, &r, NULL, 0, NULL, 0), -EINVAL);
	r = run_of("ring", "pass", 1);
	db_topo_cable bad = {.kind = "wireless", .a_node = "x", .a_port = "0"};
	cr_expect_eq(db_topo_run_add(D, &r, &bad, 1, NULL, 0), -EINVAL);
	db_topo_probe badp = {.a_node = "x", .transport = "udp", .result = "pass"};
	cr_expect_eq(db_topo_run_add(D, &r, NULL, 0, &badp, 1), -EINVAL);
	/* Bad JSON is refused by the schema, in one transaction: nothing stays. */
	r.verdict = (char *)"{not json";
	cr_expect_neq(db_topo_run_add(D, &r, NULL, 0, NULL, 0), 0);
	db_topo_probe badj = {.a_node = "x", .transport = "tcp", .result = "pass", .detail = "[",
			      .p50_us = -1, .p99_us = -1, .gbps = -1, .mtu_largest = -1};
	r = run_of("ring", "pass", 1);
	cr_expect_neq(db_topo_run_add(D, &r, NULL, 0, &badj, 1), 0);
	cr_expect_eq(count("SELECT count(*) FROM topo_runs"), 0);
	cr_expect_eq(count("SELECT count(*) FROM topo_probes"), 0);
	cr_expect_eq(db_topo_run_latest(D, &r), -ENOENT);
}

Test(db_topo, keeps_the_newest_runs)
{
	db_topo_cable c = {.kind = "direct", .a_node = "a", .a_port = "0", .b_node = "b",
			   .b_port = "1", .mtu_ok = true};
	int64_t last = 0;
	for (int i = 0; i < DB_TOPO_KEEP_RUNS + 7; i++) {
		db_topo_run r = run_of(i % 2 ? "ring" : "switch", i % 3 ? "pass" : "fail", 1000 + i);
		cr_assert_eq(db_topo_run_add(D, &r, &c, 1, NULL, 0), 0);
		cr_assert_gt(r.id, last);
		last = r.id;
	}
	cr_expect_eq(count("SELECT count(*) FROM topo_runs"), DB_TOPO_KEEP_RUNS);
	cr_expect_eq(count("SELECT count(*) FROM topo_cables"), DB_TOPO_KEEP_RUNS,
		     "the cables of dropped runs went with them");
	db_topo_run got;
	cr_assert_eq(db_topo_run_latest(D, &got), 0);
	cr_expect_eq(got.id, last);
	cr_expect_eq(got.started_at, 1000 + DB_TOPO_KEEP_RUNS + 6);
	db_topo_run_free(&got);
	/* A reopened database has the same newest run. */
	db_close(D);
	cr_assert_eq(db_open(path, &D), 0);
	cr_assert_eq(db_topo_run_latest(D, &got), 0);
	cr_expect_eq(got.id, last);
	db_topo_run_free(&got);
}

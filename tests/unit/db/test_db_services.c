/* Criterion tests for the services table (issue 19, migration 8,
 * db_services.c): a service round-trips with its JSON columns, names are
 * unique, a bad state or plan is refused, updates keep what they do not
 * name (the endpoint when NULL), the list is oldest first, a row survives
 * closing and reopening the database (a head restart), and remove;
 * migration 9 (issue 28) keeps the rows and allows `waiting`. */
#include <criterion/criterion.h>

#include <errno.h>
#include <ftw.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "db.h"
#include "db_tmp.h"

#define NOW ((int64_t)1790000000)

static db *D;

static void setup(void)
{
	db_tmp_setup(&D, true);
}

static void teardown(void)
{
	db_tmp_teardown(&D);
}

TestSuite(db_services, .init = setup, .fini = teardown);

static db_service svc(const char *name, int64_t created)
{
	db_service s = {.uid = 1000, .created_at = created, .updated_at = created};
	snprintf(s.name, sizeof s.name, "%s", name);
	snprintf(s.group_name, sizeof s.group_name, "duo");
	snprintf(s.recipe, sizeof s.recipe, "command");
	snprintf(s.runtime, sizeof s.runtime, "command");
	snprintf(s.model, sizeof s.model, "/srv");
	snprintf(s.owner, sizeof s.owner, "alice");
	snprintf(s.state, sizeof s.state, "starting");
	s.plan = (char *)"{\"ranks\":[{\"rank\":0,\"node\":\"n1\"}]}";
	s.caller = (char *)"{\"uid\":1000,\"user\":\"alice\"}";
	s.need = (char *)"{\"id-1\":1073741824}";
	return s;
}

Test(db_services, add_get_roundtrip_and_unique_names)
{
	db_service s = svc("web", NOW);
	s.forced = true;
	cr_assert_eq(db_service_add(D, &s), 0);
	cr_assert_eq(db_service_add(D, &s), -EEXIST);
	db_service g;
	cr_assert_eq(db_service_get(D, "web", &g), 0);
	cr_expect_str_eq(g.group_name, "duo");
	cr_expect_str_eq(g.owner, "alice");
	cr_expect_eq(g.uid, 1000);
	cr_expect_str_eq(g.state, "starting");
	cr_expect(g.forced);
	cr_expect_eq(g.run_id, 0);
	cr_expect_str_eq(g.plan, s.plan);
	cr_expect_str_eq(g.caller, s.caller);
	cr_expect_str_eq(g.need, s.need);
	cr_expect_str_eq(g.endpoint, "{}");
	db_service_free(&g);
	cr_assert_eq(db_service_get(D, "nosuch", &g), -ENOENT);
}

Test(db_services, bad_state_or_plan_is_refused)
{
	db_service s = svc("bad", NOW);
	snprintf(s.state, sizeof s.state, "running");
	cr_expect_eq(db_service_add(D, &s), -EINVAL);
	s = svc("bad", NOW);
	s.plan = (char *)"{not json";
	cr_expect_eq(db_service_add(D, &s), -EINVAL);
	s = svc("", NOW);
	cr_expect_eq(db_service_add(D, &s), -EINVAL);
	db_service *v = NULL;
	size_t n = 9;
	cr_assert_eq(db_service_list(D, &v, &n), 0);
	cr_expect_eq(n, 0, "nothing was stored");
	db_services_free(v, n);
}

Test(db_services, update_keeps_the_endpoint_when_null_and_survives_reopen)
{
	db_service s = svc("web", NOW);
	cr_assert_eq(db_service_add(D, &s), 0);
	s.run_id = 42;
	s.run_started = NOW + 1;
	snprintf(s.state, sizeof s.state, "ready");
	s.endpoint = (char *)"{\"url\":\"http://169.254.1.1:8000\",\"models\":[\"m\"]}";
	s.updated_at = NOW + 2;
	cr_assert_eq(db_service_update(D, &s), 0);
	/* a later change without an endpoint keeps it */
	snprintf(s.state, sizeof s.state, "unhealthy");
	snprintf(s.last_error, sizeof s.last_error, "HTTP 503");
	s.endpoint = NULL;
	s.restarts = 2;
	s.failures = 1;
	cr_assert_eq(db_service_update(D, &s), 0);
	db_close(D);
	cr_assert_eq(db_open(path, &D), 0);
	db_service g;
	cr_assert_eq(db_service_get(D, "web", &g), 0);
	cr_expect_str_eq(g.state, "unhealthy");
	cr_expect_eq(g.run_id, 42);
	cr_expect_eq(g.run_started, NOW + 1);
	cr_expect_eq(g.restarts, 2);
	cr_expect_eq(g.failures, 1);
	cr_expect_str_eq(g.last_error, "HTTP 503");
	cr_expect(strstr(g.endpoint, "169.254.1.1:8000"), "%s", g.endpoint);
	cr_expect_eq(g.updated_at, NOW + 2);
	db_service_free(&g);
	db_service x = svc("nosuch", NOW);
	cr_expect_eq(db_service_update(D, &x), -ENOENT);
	snprintf(s.state, sizeof s.state, "sleeping");
	cr_expect_eq(db_service_update(D, &s), -EINVAL, "a bad state is refused");
	snprintf(s.state, sizeof s.state, "waiting");
	cr_expect_eq(db_service_update(D, &s), 0, "waiting for a member is a state");
}

Test(db_services, list_oldest_first_and_remove)
{
	db_service b = svc("b-late", NOW + 5), a = svc("a-early", NOW);
	cr_assert_eq(db_service_add(D, &b), 0);
	cr_assert_eq(db_service_add(D, &a), 0);
	db_service *v = NULL;
	size_t n = 0;
	cr_assert_eq(db_service_list(D, &v, &n), 0);
	cr_assert_eq(n, 2);
	cr_expect_str_eq(v[0].name, "a-early");
	cr_expect_str_eq(v[1].name, "b-late");
	cr_expect_str_eq(v[1].need, "{\"id-1\":1073741824}");
	db_services_free(v, n);
	cr_assert_eq(db_service_remove(D, "a-early"), 0);
	cr_assert_eq(db_service_remove(D, "a-early"), -ENOENT);
	cr_assert_eq(db_service_list(D, &v, &n), 0);
	cr_expect_eq(n, 1);
	db_services_free(v, n);
}

/* Migration 9 made the table again to allow `waiting`: a version-8 table
 * (the same without it) and its rows come through, and take the new state. */
Test(db_services, migration_9_keeps_rows_and_allows_waiting)
{
	db_service s = svc("web", NOW);
	snprintf(s.state, sizeof s.state, "ready");
	cr_assert_eq(db_service_add(D, &s), 0);
	db_close(D);
	D = NULL;
	sqlite3 *h;
	cr_assert_eq(sqlite3_open_v2(path, &h, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
	sqlite3_stmt *st;
	cr_assert_eq(sqlite3_prepare_v2(h, "SELECT sql FROM sqlite_master WHERE name = 'services'", -1,
					&st, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
	char v8[4096];
	snprintf(v8, sizeof v8, "%s", (const char *)sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	char *w = strstr(v8, "'waiting', ");
	cr_assert(w, "%s", v8);
	memmove(w, w + strlen("'waiting', "), strlen(w + strlen("'waiting', ")) + 1);
	char sql[4400];
	snprintf(sql, sizeof sql, "ALTER TABLE services RENAME TO s9; %s; INSERT INTO services "
		 "SELECT * FROM s9; DROP TABLE s9; PRAGMA user_version = 8;", v8);
	cr_assert_eq(sqlite3_exec(h, sql, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(h));
	cr_assert_neq(sqlite3_exec(h, "UPDATE services SET state = 'waiting'", NULL, NULL, NULL),
		      SQLITE_OK, "version 8 refuses waiting");
	sqlite3_close(h);
	cr_assert_eq(db_open(path, &D), 0);
	db_service g;
	cr_assert_eq(db_service_get(D, "web", &g), 0);
	cr_expect_str_eq(g.state, "ready");
	cr_expect_str_eq(g.owner, "alice");
	db_service_free(&g);
	snprintf(s.state, sizeof s.state, "waiting");
	cr_expect_eq(db_service_update(D, &s), 0);
	cr_expect_eq(db_integrity_check(D), 0);
}

/* What group rm and node rm ask before they remove: the services on a group,
 * or with a rank on a node, whatever their state. */
Test(db_services, using_a_group_or_a_node)
{
	db_service a = svc("a", NOW), b = svc("b", NOW + 1);
	a.plan = (char *)"{\"ranks\":[{\"rank\":0,\"node_id\":\"id-1\"},{\"rank\":1,\"node_id\":\"id-2\"}]}";
	b.plan = (char *)"{\"ranks\":[{\"rank\":0,\"node_id\":\"id-3\"}]}";
	snprintf(b.group_name, sizeof b.group_name, "solo");
	snprintf(b.state, sizeof b.state, "stopped");
	cr_assert_eq(db_service_add(D, &a), 0);
	cr_assert_eq(db_service_add(D, &b), 0);
	char list[64];
	cr_expect_eq(db_services_using(D, "duo", NULL, list, sizeof list), 1);
	cr_expect_str_eq(list, "a (starting)");
	cr_expect_eq(db_services_using(D, NULL, "id-2", list, sizeof list), 1);
	cr_expect_str_eq(list, "a (starting)");
	cr_expect_eq(db_services_using(D, NULL, "id-3", list, sizeof list), 1);
	cr_expect_str_eq(list, "b (stopped)");
	cr_expect_eq(db_services_using(D, NULL, "id-9", list, sizeof list), 0);
	cr_expect_str_eq(list, "");
	cr_expect_eq(db_services_using(D, "nosuch", NULL, list, sizeof list), 0);
	snprintf(b.group_name, sizeof b.group_name, "duo");
	db_service c = b;
	snprintf(c.name, sizeof c.name, "c");
	snprintf(c.group_name, sizeof c.group_name, "duo");
	cr_assert_eq(db_service_add(D, &c), 0);
	cr_expect_eq(db_services_using(D, "duo", NULL, list, sizeof list), 2);
	cr_expect_str_eq(list, "a (starting), c (stopped)");
	char tiny[8];
	cr_expect_eq(db_services_using(D, "duo", NULL, tiny, sizeof tiny), 2, "cut, still counted");
	cr_expect_str_eq(tiny, "a (star");
	cr_expect_eq(db_services_using(D, NULL, NULL, list, sizeof list), -EINVAL);
}

/* Groups and jobs in cluster.db (migration 3): membership rules, refusals
 * that leave nothing behind, jobs with ranks, history that outlives nodes. */
#include "db.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64], path[128];
static db *D;

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(p);
}

static void add_node(const char *id, const char *name)
{
	db_token t = {.created_at = 1, .uses_left = -1};
	snprintf(t.id, sizeof t.id, "t%s", id);
	memset(t.secret_hash, 'a', 64);
	cr_assert_eq(db_token_add(D, &t), 0);
	db_node n = {.joined_at = 1, .last_seen = 1};
	snprintf(n.id, sizeof n.id, "%s", id);
	snprintf(n.name, sizeof n.name, "%s", name);
	snprintf(n.address, sizeof n.address, "10.0.0.1:7300");
	cr_assert_eq(db_join_commit(D, t.id, t.secret_hash, 2, &n), 0);
}

static void setup(void)
{
	strcpy(dir, "/tmp/sparkjobs-db-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/cluster.db", dir);
	cr_assert_eq(db_open(path, &D), 0);
	db_cluster c = {.created_at = 1};
	strcpy(c.id, "c1");
	strcpy(c.name, "t");
	db_node h = {.joined_at = 1};
	strcpy(h.id, "n1");
	strcpy(h.name, "s1");
	cr_assert_eq(db_cluster_create(D, &c, &h), 0);
	add_node("n2", "s2");
	add_node("n3", "s3");
	add_node("n4", "s4");
}

static void teardown(void)
{
	db_close(D);
	nftw(dir, rm_cb, 8, FTW_DEPTH | FTW_PHYS);
}

TestSuite(db_jobs, .init = setup, .fini = teardown, .timeout = 30);

static int mkgroup(const char *name, bool shared, const char *a, const char *b, char *cn, char *cg)
{
	db_group g = {.shared = shared, .created_at = 5};
	snprintf(g.name, sizeof g.name, "%s", name);
	strcpy(g.shape, "pair");
	const char *ids[] = {a, b};
	return db_group_create(D, &g, ids, b ? 2 : 1, cn, cg);
}

static size_t count_groups(void)
{
	db_group *g = NULL;
	size_t n = 0;
	cr_assert_eq(db_group_list(D, &g, &n), 0);
	free(g);
	return n;
}

Test(db_jobs, schema_version_3)
{
	cr_expect_geq(db_schema_version(D), 3);
	cr_expect_eq(db_integrity_check(D), 0);
}

Test(db_jobs, groups_exclusive_and_shared)
{
	char cn[64], cg[64];
	cr_assert_eq(mkgroup("a", false, "n1", "n2", cn, cg), 0);
	/* n2 is taken by an exclusive group: refused, nothing half-made */
	cr_expect_eq(mkgroup("b", false, "n3", "n2", cn, cg), -EBUSY);
	cr_expect_str_eq(cn, "s2");
	cr_expect_str_eq(cg, "a");
	cr_expect_eq(mkgroup("c", true, "n2", NULL, cn, cg), -EBUSY, "shared cannot take an exclusive node");
	cr_expect_eq(count_groups(), 1);
	cr_expect_eq(db_group_get(D, "b", &(db_group){0}), -ENOENT);
	/* shared groups share */
	cr_assert_eq(mkgroup("s", true, "n3", "n4", cn, cg), 0);
	cr_assert_eq(mkgroup("t", true, "n4", NULL, cn, cg), 0);
	cr_expect_eq(mkgroup("x", false, "n4", NULL, cn, cg), -EBUSY, "exclusive cannot take a shared node");
	cr_expect_eq(mkgroup("a", false, "n3", NULL, cn, cg), -EEXIST);
	cr_expect_eq(mkgroup("u", false, "nope", NULL, cn, cg), -ENOENT);
	cr_expect_eq(mkgroup("v", true, "n3", "n3", cn, cg), -EEXIST, "a node twice");
	cr_expect_eq(count_groups(), 3);
	db_group_member *m = NULL;
	size_t n = 0;
	cr_assert_eq(db_group_members(D, "s", &m, &n), 0);
	cr_assert_eq(n, 2);
	cr_expect_str_eq(m[0].node_name, "s3");
	cr_expect_str_eq(m[1].node_name, "s4");
	free(m);
	db_group g;
	cr_assert_eq(db_group_get(D, "s", &g), 0);
	cr_expect(g.shared);
	cr_expect_eq(g.n_members, 2);
	db_membership *ms = NULL;
	cr_assert_eq(db_group_memberships(D, &ms, &n), 0);
	cr_expect_eq(n, 5);
	free(ms);
	/* a removed node leaves its groups */
	cr_assert_eq(db_node_remove(D, "n4", 9), 0);
	cr_assert_eq(db_group_get(D, "t", &g), 0);
	cr_expect_eq(g.n_members, 0);
	cr_assert_eq(db_group_remove(D, "a"), 0);
	cr_expect_eq(db_group_remove(D, "a"), -ENOENT);
	cr_assert_eq(mkgroup("x", false, "n2", NULL, cn, cg), 0, "a's nodes are free again");
}

Test(db_jobs, jobs_and_ranks)
{
	db_job j = {.uid = 1000, .ranks_per_node = 2, .world_size = 4, .timeout_s = 60, .created_at = 10};
	strcpy(j.name, "train");
	strcpy(j.group_name, "g");
	strcpy(j.owner, "alice");
	strcpy(j.launcher, "native");
	strcpy(j.command, "python3 train.py");
	db_job_rank r[4] = {0};
	for (int i = 0; i < 4; i++) {
		r[i].rank = i;
		r[i].local_rank = i % 2;
		strcpy(r[i].node_id, i < 2 ? "n1" : "n2");
		strcpy(r[i].node_name, i < 2 ? "s1" : "s2");
	}
	cr_assert_eq(db_job_create(D, &j, "{\"argv\":[\"python3\"]}", r, 4), 0);
	cr_expect_gt(j.id, 0);
	db_job g;
	cr_assert_eq(db_job_get(D, j.id, &g), 0);
	cr_expect_str_eq(g.state, "starting");
	cr_expect_eq(g.exit_code, -1);
	cr_expect_str_eq(g.owner, "alice");
	char *spec = NULL;
	cr_assert_eq(db_job_spec(D, j.id, &spec), 0);
	cr_expect_str_eq(spec, "{\"argv\":[\"python3\"]}");
	free(spec);
	db_job_rank rr = r[2];
	rr.job_id = j.id;
	strcpy(rr.state, "failed");
	rr.exit_code = 3;
	rr.pid = 42;
	cr_assert_eq(db_job_rank_update(D, &rr), 0);
	rr.rank = 99;
	cr_expect_eq(db_job_rank_update(D, &rr), -ENOENT);
	strcpy(rr.state, "bogus");
	rr.rank = 1;
	cr_expect_lt(db_job_rank_update(D, &rr), 0, "states are checked");
	db_job_rank *got = NULL;
	size_t n = 0;
	cr_assert_eq(db_job_ranks(D, j.id, &got, &n), 0);
	cr_assert_eq(n, 4);
	cr_expect_str_eq(got[2].state, "failed");
	cr_expect_eq(got[2].exit_code, 3);
	cr_expect_eq(got[0].exit_code, -1);
	cr_expect_str_eq(got[3].node_name, "s2");
	free(got);
	int64_t *ids = NULL;
	cr_assert_eq(db_group_active_jobs(D, "g", &ids, &n), 0);
	cr_expect_eq(n, 1);
	free(ids);
	strcpy(g.state, "failed");
	strcpy(g.reason, "rank 2 on s2 exited with code 3");
	g.exit_code = 3;
	g.ended_at = 20;
	cr_assert_eq(db_job_set_state(D, &g), 0);
	cr_assert_eq(db_group_active_jobs(D, "g", &ids, &n), 0);
	cr_expect_eq(n, 0);
	free(ids);
	/* listing: by owner, active only, by name */
	db_job j2 = j;
	j2.created_at = 30;
	cr_assert_eq(db_job_create(D, &j2, "{}", NULL, 0), 0);
	strcpy(j2.owner, "bob");
	cr_assert_eq(db_job_create(D, &j2, "{}", NULL, 0), 0);
	db_job *js = NULL;
	cr_assert_eq(db_job_list(D, "alice", false, 0, &js, &n), 0);
	cr_expect_eq(n, 2);
	cr_expect_gt(js[0].id, js[1].id, "newest first");
	free(js);
	cr_assert_eq(db_job_list(D, NULL, true, 0, &js, &n), 0);
	cr_expect_eq(n, 2);
	free(js);
	cr_assert_eq(db_job_list(D, NULL, false, 1, &js, &n), 0);
	cr_expect_eq(n, 1);
	free(js);
	cr_assert_eq(db_job_get_by_name(D, "train", "bob", &g), 0);
	cr_expect_str_eq(g.owner, "bob");
	cr_expect_eq(db_job_get_by_name(D, "nope", NULL, &g), -ENOENT);
	/* history outlives the node */
	cr_assert_eq(db_node_remove(D, "n2", 40), 0);
	cr_assert_eq(db_job_ranks(D, j.id, &got, &n), 0);
	cr_expect_eq(n, 4);
	free(got);
	cr_expect_eq(db_integrity_check(D), 0);
}

Test(db_jobs, bad_job_rows_leave_nothing)
{
	db_job j = {.ranks_per_node = 1, .world_size = 1, .created_at = 1};
	strcpy(j.name, "x");
	strcpy(j.group_name, "g");
	strcpy(j.owner, "root");
	strcpy(j.launcher, "slurm"); /* not a launcher */
	cr_expect_lt(db_job_create(D, &j, "{}", NULL, 0), 0);
	strcpy(j.launcher, "mpi");
	cr_expect_lt(db_job_create(D, &j, "not json", NULL, 0), 0);
	db_job_rank r[2] = {{.rank = 0}, {.rank = 0}}; /* the same rank twice */
	strcpy(r[0].node_id, "n1");
	strcpy(r[1].node_id, "n1");
	cr_expect_lt(db_job_create(D, &j, "{}", r, 2), 0);
	db_job *js = NULL;
	size_t n = 9;
	cr_assert_eq(db_job_list(D, NULL, false, 0, &js, &n), 0);
	cr_expect_eq(n, 0);
	free(js);
}

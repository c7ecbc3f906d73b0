/* The db tests' one fixture: a fresh temp dir per test holding cluster.db
 * (dir, and path: its cluster.db), removed with everything in it afterwards. */
#ifndef SPARK_TEST_DB_TMP_H
#define SPARK_TEST_DB_TMP_H

#include <criterion/criterion.h>

#include <ftw.h>
#include <stdio.h>
#include <string.h>

#include "db.h"

static char dir[64], path[128];

static int db_tmp_rm(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(p);
}

/* A new temp dir; with open, *d is cluster.db opened (migrated) in it. */
static inline void db_tmp_setup(db **d, bool open)
{
	strcpy(dir, "/tmp/sparkdb-test-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/cluster.db", dir);
	*d = NULL;
	if (open)
		cr_assert_eq(db_open(path, d), 0);
}

static inline void db_tmp_teardown(db **d)
{
	db_close(*d);
	*d = NULL;
	nftw(dir, db_tmp_rm, 8, FTW_DEPTH | FTW_PHYS);
}

#endif

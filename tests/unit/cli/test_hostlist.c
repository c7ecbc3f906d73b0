/* Slurm host lists (cli/hostlist.c): what SLURM_JOB_NODELIST holds for the
 * issue's clusters, and what a hostile or broken list gets. */
#include "hostlist.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The names of s joined by spaces ("" on error), and the code. */
static int expand(const char *s, char *out, size_t len)
{
	struct hostlist h;
	char err[256];
	int r = hostlist_expand(s, &h, err, sizeof err);
	out[0] = '\0';
	if (r == 0)
		for (size_t i = 0, o = 0; i < h.n && o < len; i++)
			o += (size_t)snprintf(out + o, len - o, "%s%s", i ? " " : "", h.names[i]);
	else
		cr_assert(err[0], "an error says why (%s)", s);
	hostlist_free(&h);
	return r;
}

#define EXPECT(in, want)                                                                  \
	do {                                                                              \
		char got[4096];                                                           \
		cr_expect_eq(expand(in, got, sizeof got), 0, "%s", in);                   \
		cr_expect_str_eq(got, want, "%s", in);                                    \
	} while (0)

#define REJECT(in, code)                                                                  \
	do {                                                                              \
		char got[64];                                                             \
		cr_expect_eq(expand(in, got, sizeof got), code, "'%s' is refused", in);   \
	} while (0)

Test(hostlist, the_issue_clusters)
{
	EXPECT("spark-1,spark-2", "spark-1 spark-2");                      /* a pair */
	EXPECT("spark-[1-4]", "spark-1 spark-2 spark-3 spark-4");          /* a 4-ring */
	EXPECT("spark-[1-2]", "spark-1 spark-2");                          /* group 1 of it */
	EXPECT("spark-[3-4]", "spark-3 spark-4");                          /* group 2 */
	EXPECT("spark-[1,4]", "spark-1 spark-4");                          /* an arc that wraps */
	EXPECT("spark-[01-08]",
	       "spark-01 spark-02 spark-03 spark-04 spark-05 spark-06 spark-07 spark-08");
	EXPECT("sw[1-2],head", "sw1 sw2 head");                            /* brackets and names */
	EXPECT("slu1234s-[3-4]", "slu1234s-3 slu1234s-4");                 /* the sim's names */
}

Test(hostlist, ranges_and_padding)
{
	EXPECT("n[8-11]", "n8 n9 n10 n11");
	EXPECT("n[098-101]", "n098 n099 n100 n101");
	EXPECT("n[1-2,5,7-8]", "n1 n2 n5 n7 n8");
	EXPECT("r[1-2]-n[1-2]", "r1-n1 r1-n2 r2-n1 r2-n2");
	EXPECT("a.b_c-d", "a.b_c-d");
	EXPECT("n[5]x", "n5x");
}

Test(hostlist, broken_lists)
{
	REJECT("", -EINVAL);
	REJECT(",", -EINVAL);
	REJECT("a,,b", -EINVAL);
	REJECT("a,", -EINVAL);
	REJECT("n[1-", -EINVAL);
	REJECT("n[]", -EINVAL);
	REJECT("n[3-1]", -EINVAL);
	REJECT("n[1-2", -EINVAL);
	REJECT("n1-2]", -EINVAL);
	REJECT("n[[1]]", -EINVAL);
	REJECT("n[a-b]", -EINVAL);
	REJECT("n[1,]", -EINVAL);
	REJECT("n[,1]", -EINVAL);
	REJECT("n[1--2]", -EINVAL);
	REJECT("n 1", -EINVAL);
	REJECT("n;rm", -EINVAL);
	REJECT("n[1234567890]", -EINVAL);
}

Test(hostlist, limits)
{
	REJECT("n[0-999999999]", -E2BIG);                   /* not a billion names */
	REJECT("n[1-99]-m[1-99]", -E2BIG);                  /* 9801 > 4096 */
	char longname[80];
	memset(longname, 'a', 64);
	longname[64] = '\0';
	REJECT(longname, -E2BIG);
	memset(longname, 'a', 62);
	snprintf(longname + 62, sizeof longname - 62, "[1-10]"); /* 63 then 64 characters */
	REJECT(longname, -E2BIG);
	char *big = malloc(HOSTLIST_TEXT_MAX + 2);
	memset(big, 'a', HOSTLIST_TEXT_MAX + 1);
	big[HOSTLIST_TEXT_MAX + 1] = '\0';
	REJECT(big, -E2BIG);
	free(big);
	struct hostlist h;
	cr_assert_eq(hostlist_expand("n[1-4096]", &h, NULL, 0), 0);
	cr_expect_eq(h.n, 4096);
	cr_expect_str_eq(h.names[4095], "n4096");
	hostlist_free(&h);
}

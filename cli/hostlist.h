/* hostlist: Slurm's host list syntax (SLURM_JOB_NODELIST, `scontrol show
 * hostnames`), pure (no I/O).
 *
 *   "spark-1,spark-2"        two names
 *   "node[1-3],other"        node1 node2 node3 other
 *   "n[01-03,7]"             n01 n02 n03 n7 (a range keeps its low bound's width)
 *   "r[1-2]-n[1-2]"          r1-n1 r1-n2 r2-n1 r2-n2 (brackets multiply)
 *
 * A name is made of letters, digits, '-', '_' and '.'; a range's bounds are
 * decimal numbers of at most 9 digits with lo <= hi. Duplicates are kept in
 * the order given (Slurm's own lists have none). Anything else (empty items,
 * unbalanced or nested brackets, other characters) is -EINVAL; more than
 * HOSTLIST_MAX names, or a name longer than HOSTLIST_NAME_MAX, is -E2BIG. */
#ifndef SPARK_CLI_HOSTLIST_H
#define SPARK_CLI_HOSTLIST_H

#include <stddef.h>

#define HOSTLIST_MAX 4096
#define HOSTLIST_NAME_MAX 63
#define HOSTLIST_TEXT_MAX 65536

struct hostlist {
	size_t n;
	char (*names)[HOSTLIST_NAME_MAX + 1];
};

/* Expand s into out (free with hostlist_free, also after an error). 0,
 * -EINVAL (syntax; err says where), -E2BIG or -ENOMEM. */
int hostlist_expand(const char *s, struct hostlist *out, char *err, size_t errlen);
void hostlist_free(struct hostlist *h);

#endif

/* partition: the group planner (issue 6), which cuts the cluster into groups
 * of nodes for jobs. A pure function: no I/O, no clock, no allocation; the
 * same input always gives the same group. It lives in topology/ (issue 15)
 * because it reads only topology: ring order or switch, and a stored
 * validation verdict. Its names keep the plan_ prefix.
 *
 * Input: the cluster's nodes in ring order (topology ring, order known) or in
 * join order (otherwise), each either free or busy with a reason ("in group
 * a", "drained", "unreachable"), and either a size (--size N) or names
 * (--nodes a,b,c).
 *
 * Rules:
 * - ring, --size N: a contiguous arc of N free nodes in ring order. Among the
 *   runs of free nodes that fit, the shortest (best fit, so the ring is not cut
 *   into useless pieces), then the one starting first. N equal to the whole
 *   ring is the ring itself. Ranks follow the arc.
 * - switch (or unknown topology), --size N: the first N free nodes.
 * - --nodes: every name must exist and be free. On a ring the ranks follow ring
 *   order (starting after the gap, so an arc that wraps stays in one piece);
 *   elsewhere the order given.
 * - A ring of 3 is a full mesh (every pair has its own cable): its groups'
 *   notes say that one-shot and tree all-reduce work.
 * - shape says what the group is: ring (the whole ring, 3+), pair (2 nodes on
 *   one cable), chain (3+ contiguous nodes of a larger ring), scattered (ring
 *   nodes that are not contiguous), switch, single, unknown. note says, in
 *   words, what the shape costs (a chain's extra hop, one-shot impossible...). */
#ifndef SPARK_TOPO_PARTITION_H
#define SPARK_TOPO_PARTITION_H

#include <stdbool.h>
#include <stddef.h>

#define PLAN_MAX_NODES 64
#define PLAN_NOTE_MAX 256 /* db_group.note */

enum plan_topo { PLAN_UNKNOWN = 0, PLAN_RING, PLAN_SWITCH };

struct plan_node {
	const char *name;
	const char *busy;   /* NULL = free, else why not ("in group a", "drained") */
};

struct plan_input {
	enum plan_topo topo;
	const struct plan_node *nodes; /* ring order (PLAN_RING) or join order */
	size_t n;
	size_t size;                   /* --size N; 0 when names are given */
	const char *const *names;      /* --nodes */
	size_t n_names;
};

struct plan_result {
	int code;                      /* 0, -EINVAL, -ENOENT, -EBUSY, -ENOSPC */
	size_t idx[PLAN_MAX_NODES];    /* chosen nodes in rank order (indexes into nodes) */
	size_t n;
	char shape[16];
	/* For people, never cut off: a note is at most PLAN_NOTE_MAX - 1 bytes with
	 * names of up to 63 bytes (it is stored as the group's note, 256 bytes);
	 * err's lists of nodes end in "and N more" before they would overflow. */
	char note[PLAN_NOTE_MAX];      /* "" when there is nothing to say */
	char err[1024];                /* one line when code < 0 */
};

const char *plan_topo_name(enum plan_topo t);
/* Returns out->code. */
int plan_group(const struct plan_input *in, struct plan_result *out);

/* The topology from a stored validation run (`sparkctl topo validate`): cls
 * (pair|ring|switch|unknown), result (pass|warn|fail), its ring_order (NULL/0
 * when it has none) and the number of nodes it saw, against the cluster's
 * nodes now (names, in join order). Returns 0 and fills *topo and order[] (a
 * permutation of 0..n-1: ring order for a ring or pair, join order for a
 * switch) when the run can be used; -1 when it cannot (failed, unknown class,
 * a ring order that does not name exactly the nodes now, a node count that
 * changed), and the caller falls back to its guess. */
int plan_topo_from_run(const char *cls, const char *result, const char *const *ring_order,
		       size_t n_ring, int run_nodes, const char *const *names, size_t n,
		       enum plan_topo *topo, size_t *order);

/* Whether the latest stored validation (result, its verdict JSON text, its
 * age in seconds) failed in a way that concerns a group of these nodes: a
 * "fail" finding naming one of them among its ends, or naming no node at
 * all (cluster-wide). `expect_mismatch` (a --expect the cabling was not) is
 * no failure of the cabling: the cables may be right for what they are. 1 with why filled ("the latest cabling validation, 12 s
 * ago, FAILed: MESSAGE; fix: FIX"), else 0. Parses the verdict (jansson);
 * why is never cut off mid-word (it ends in "..." if it would overflow). */
int plan_cabling_failed(const char *result, const char *verdict, long long age_s,
			const char *const *names, size_t n, char *why, size_t len);

#endif

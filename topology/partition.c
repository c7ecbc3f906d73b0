/* partition: the group planner. See partition.h for the rules. */
#include "partition.h"

#include <jansson.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *plan_topo_name(enum plan_topo t)
{
	return t == PLAN_RING ? "ring" : t == PLAN_SWITCH ? "switch" : "unknown";
}

static int fail(struct plan_result *r, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(struct plan_result *r, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->err, sizeof r->err, fmt, ap);
	va_end(ap);
	r->code = code;
	r->n = 0;
	return code;
}

/* Append to a bounded string. */
static void cat(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void cat(char *buf, size_t len, const char *fmt, ...)
{
	size_t used = strnlen(buf, len);
	if (used + 1 >= len)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf + used, len - used, fmt, ap);
	va_end(ap);
}

/* "a, b (in group x), c (drained)" for the error lines; when the next node
 * would not fit, "and N more" instead of a cut-off word. */
static void list_nodes(const struct plan_input *in, bool free_only, char *buf, size_t len)
{
	buf[0] = '\0';
	bool first = true;
	size_t left = 0;
	for (size_t i = 0; i < in->n; i++)
		left += !(free_only && in->nodes[i].busy);
	for (size_t i = 0; i < in->n; i++) {
		if (free_only && in->nodes[i].busy)
			continue;
		char item[200];
		snprintf(item, sizeof item, "%s%s%s%s", first ? "" : ", ", in->nodes[i].name,
			 in->nodes[i].busy ? " (" : "", in->nodes[i].busy ? in->nodes[i].busy : "");
		if (in->nodes[i].busy)
			snprintf(item + strlen(item), sizeof item - strlen(item), ")");
		if (strlen(buf) + strlen(item) + 24 >= len) {
			cat(buf, len, " and %zu more", left);
			return;
		}
		cat(buf, len, "%s", item);
		left--;
		first = false;
	}
	if (first)
		cat(buf, len, "none");
}

static size_t count_free(const struct plan_input *in)
{
	size_t f = 0;
	for (size_t i = 0; i < in->n; i++)
		f += in->nodes[i].busy == NULL;
	return f;
}

/* Shape and note of a ring group whose members are idx[0..n) in arc order;
 * contiguous tells whether they form one arc. */
static void ring_shape(const struct plan_input *in, struct plan_result *r, bool contiguous)
{
	const char *first = in->nodes[r->idx[0]].name, *last = in->nodes[r->idx[r->n - 1]].name;
	if (r->n == 1) {
		snprintf(r->shape, sizeof r->shape, "single");
		snprintf(r->note, sizeof r->note, "one node: no fabric traffic between ranks");
	} else if (r->n == in->n && in->n == 3) {
		snprintf(r->shape, sizeof r->shape, "ring");
		snprintf(r->note, sizeof r->note,
			 "the whole 3-node ring, a full mesh: every pair of nodes has its own cable, "
			 "so ring, tree and one-shot all-reduce all run over direct cables");
	} else if (r->n == in->n && in->n >= 3) {
		snprintf(r->shape, sizeof r->shape, "ring");
		snprintf(r->note, sizeof r->note,
			 "the whole %zu-node ring: ring all-reduce over direct cables; one-shot "
			 "all-reduce needs any-to-any links (a switch)", in->n);
	} else if (r->n == 2 && contiguous) {
		snprintf(r->shape, sizeof r->shape, "pair");
		snprintf(r->note, sizeof r->note,
			 "2 neighbours on one direct cable: all-reduce is a direct exchange");
	} else if (contiguous) {
		/* Names of up to 63 bytes each: the note stays within PLAN_NOTE_MAX. */
		snprintf(r->shape, sizeof r->shape, "chain");
		snprintf(r->note, sizeof r->note,
			 "a chain of %zu of %zu ring nodes: its ends %.63s and %.63s have no cable "
			 "between them: ring all-reduce is slower, one-shot needs a switch",
			 r->n, in->n, first, last);
	} else {
		snprintf(r->shape, sizeof r->shape, "scattered");
		snprintf(r->note, sizeof r->note,
			 "these nodes are not neighbours on the ring: some ranks have no direct "
			 "cable between them, so jobs fall back to the management network; pick "
			 "neighbours (or use --size) for fabric speed");
	}
}

/* Ring, --size: best-fitting run of free nodes, in cyclic order. */
static int plan_ring_size(const struct plan_input *in, struct plan_result *r)
{
	size_t n = in->n, want = in->size;
	size_t nfree = count_free(in);
	if (nfree == n) { /* everything free: one run, the whole ring from its start */
		for (size_t i = 0; i < want; i++)
			r->idx[i] = i;
		r->n = want;
		ring_shape(in, r, true);
		return 0;
	}
	/* Runs start right after a busy node; walk the cycle once from there. */
	size_t best_start = 0, best_len = 0;
	bool found = false;
	for (size_t s = 0; s < n; s++) {
		size_t prev = (s + n - 1) % n;
		if (in->nodes[s].busy || !in->nodes[prev].busy)
			continue;
		size_t len = 0;
		while (len < n && !in->nodes[(s + len) % n].busy)
			len++;
		if (len >= want && (!found || len < best_len)) {
			found = true;
			best_start = s;
			best_len = len;
		}
	}
	if (!found) {
		char freel[640];
		list_nodes(in, true, freel, sizeof freel);
		return fail(r, -ENOSPC,
			    "no %zu neighbouring free nodes on the ring (free: %s); a group must be a "
			    "contiguous arc to use direct cables: free the nodes between them, pick "
			    "them with --nodes, or ask for fewer",
			    want, freel);
	}
	for (size_t i = 0; i < want; i++)
		r->idx[i] = (best_start + i) % n;
	r->n = want;
	ring_shape(in, r, true);
	return 0;
}

/* Ring, --nodes: order by ring position, starting after the largest gap. */
static void ring_order_names(const struct plan_input *in, struct plan_result *r)
{
	bool chosen[PLAN_MAX_NODES] = {false};
	for (size_t i = 0; i < r->n; i++)
		chosen[r->idx[i]] = true;
	size_t n = in->n, start = 0;
	if (r->n < n) {
		/* the first chosen node that follows an unchosen one (largest gap first) */
		size_t best_gap = 0;
		for (size_t s = 0; s < n; s++) {
			if (!chosen[s] || chosen[(s + n - 1) % n])
				continue;
			size_t gap = 0;
			while (gap < n && !chosen[(s + n - 1 - gap) % n])
				gap++;
			if (gap > best_gap) {
				best_gap = gap;
				start = s;
			}
		}
	}
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (chosen[(start + i) % n])
			r->idx[k++] = (start + i) % n;
	bool contiguous = true;
	for (size_t i = 0; i + 1 < r->n; i++)
		contiguous &= (r->idx[i] + 1) % n == r->idx[i + 1];
	ring_shape(in, r, contiguous);
}

int plan_group(const struct plan_input *in, struct plan_result *r)
{
	memset(r, 0, sizeof *r);
	if (!in || !in->nodes || in->n == 0)
		return fail(r, -ENOSPC, "the cluster has no nodes");
	if (in->n > PLAN_MAX_NODES)
		return fail(r, -EINVAL, "more than %d nodes", PLAN_MAX_NODES);
	if (in->n_names > 0) {
		if (in->n_names > in->n)
			return fail(r, -EINVAL, "%zu nodes named but the cluster has %zu", in->n_names,
				    in->n);
		for (size_t i = 0; i < in->n_names; i++) {
			size_t k = 0;
			while (k < in->n && strcmp(in->nodes[k].name, in->names[i]) != 0)
				k++;
			if (k == in->n) {
				char all[768];
				list_nodes(in, false, all, sizeof all);
				return fail(r, -ENOENT, "no node named '%s' in the cluster (nodes: %s)",
					    in->names[i], all);
			}
			for (size_t j = 0; j < i; j++)
				if (r->idx[j] == k)
					return fail(r, -EINVAL, "node '%s' is named twice", in->names[i]);
			if (in->nodes[k].busy)
				return fail(r, -EBUSY, "node '%s' is not free (%s)", in->names[i],
					    in->nodes[k].busy);
			r->idx[i] = k;
		}
		r->n = in->n_names;
		if (in->topo == PLAN_RING) {
			ring_order_names(in, r);
		} else if (in->topo == PLAN_SWITCH) {
			snprintf(r->shape, sizeof r->shape, "%s", r->n == 1 ? "single" : "switch");
			snprintf(r->note, sizeof r->note, "%s",
				 r->n == 1 ? "one node: no fabric traffic between ranks"
					   : "any-to-any through the switch: ring and one-shot all-reduce "
					     "both work");
		} else {
			snprintf(r->shape, sizeof r->shape, "%s", r->n == 1 ? "single" : "unknown");
			snprintf(r->note, sizeof r->note,
				 "the topology is not validated ('sparkctl topo validate'): ranks "
				 "follow the order given");
		}
		return 0;
	}
	if (in->size == 0)
		return fail(r, -EINVAL, "a group needs at least one node");
	size_t nfree = count_free(in);
	if (in->size > nfree) {
		char all[768];
		list_nodes(in, false, all, sizeof all);
		return fail(r, -ENOSPC, "size %zu is larger than the %zu free node%s (%s)", in->size,
			    nfree, nfree == 1 ? "" : "s", all);
	}
	if (in->topo == PLAN_RING)
		return plan_ring_size(in, r);
	for (size_t i = 0; i < in->n && r->n < in->size; i++)
		if (!in->nodes[i].busy)
			r->idx[r->n++] = i;
	if (in->topo == PLAN_SWITCH) {
		snprintf(r->shape, sizeof r->shape, "%s", r->n == 1 ? "single" : "switch");
		snprintf(r->note, sizeof r->note, "%s",
			 r->n == 1 ? "one node: no fabric traffic between ranks"
				   : "any-to-any through the switch: ring and one-shot all-reduce both "
				     "work");
	} else {
		snprintf(r->shape, sizeof r->shape, "%s", r->n == 1 ? "single" : "unknown");
		snprintf(r->note, sizeof r->note,
			 "the topology is not validated ('sparkctl topo validate'): the first free "
			 "nodes in join order");
	}
	return 0;
}

int plan_topo_from_run(const char *cls, const char *result, const char *const *ring_order,
		       size_t n_ring, int run_nodes, const char *const *names, size_t n,
		       enum plan_topo *topo, size_t *order)
{
	if (!cls || !result || n < 2 || n > PLAN_MAX_NODES)
		return -1;
	if (strcmp(result, "pass") != 0 && strcmp(result, "warn") != 0)
		return -1;
	if (run_nodes >= 0 && (size_t)run_nodes != n)
		return -1;
	if (strcmp(cls, "switch") == 0) {
		for (size_t i = 0; i < n; i++)
			order[i] = i;
		*topo = PLAN_SWITCH;
		return 0;
	}
	if (strcmp(cls, "ring") != 0 && strcmp(cls, "pair") != 0)
		return -1;
	if (n_ring != n)
		return -1;
	bool used[PLAN_MAX_NODES] = {false};
	for (size_t k = 0; k < n_ring; k++) {
		size_t i = 0;
		while (i < n && (!ring_order[k] || strcmp(ring_order[k], names[i]) != 0))
			i++;
		if (i == n || used[i])
			return -1;
		used[i] = true;
		order[k] = i;
	}
	*topo = PLAN_RING;
	return 0;
}

int plan_cabling_failed(const char *result, const char *verdict, long long age_s,
			const char *const *names, size_t n, char *why, size_t len)
{
	if (len)
		why[0] = '\0';
	if (!result || strcmp(result, "fail") != 0 || !verdict)
		return 0;
	json_t *v = json_loads(verdict, 0, NULL);
	size_t i, k;
	json_t *f, *e;
	json_t *hit = NULL;
	int count = 0;
	json_array_foreach(json_object_get(v, "findings"), i, f) {
		const char *sev = json_string_value(json_object_get(f, "severity"));
		const char *code = json_string_value(json_object_get(f, "code"));
		if (!sev || strcmp(sev, "fail") != 0 || (code && strcmp(code, "expect_mismatch") == 0))
			continue;
		bool mine = json_array_size(json_object_get(f, "ends")) == 0;
		json_array_foreach(json_object_get(f, "ends"), k, e) {
			const char *node = json_string_value(json_object_get(e, "node"));
			for (size_t m = 0; node && m < n && !mine; m++)
				mine = names[m] && strcmp(names[m], node) == 0;
		}
		if (mine && count++ == 0)
			hit = f;
	}
	if (!hit) {
		json_decref(v);
		return 0;
	}
	const char *msg = json_string_value(json_object_get(hit, "message"));
	const char *fix = json_string_value(json_object_get(hit, "fix"));
	char more[48] = "";
	if (count > 1)
		snprintf(more, sizeof more, " (and %d more failure%s)", count - 1, count > 2 ? "s" : "");
	int w = snprintf(why, len, "the latest cabling validation, %lld s ago, FAILed: %s%s; fix: %s",
			 age_s, msg ? msg : "?", more, fix ? fix : "see 'sparkctl topo validate'");
	if (w >= 0 && (size_t)w >= len && len > 4)
		memcpy(why + len - 4, "...", 4);
	json_decref(v);
	return 1;
}

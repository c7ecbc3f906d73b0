/* topo_head: topology show, validate and addresses on the head (see topo.h,
 * docs/topology.md).
 *
 * A run gathers every node's state (its discovery and neighbour table, asked
 * over its session; the head's own node locally; an unconnected node keeps its
 * stored discovery and gets a node_unreachable finding). While some node's
 * neighbour discovery has run for less than TOPO_SETTLE_MS, the run waits and
 * gathers once more. Neighbours on a twin without carrier, or not heard for
 * two intervals, or sent from a twin that has no carrier in its sender's
 * report of this run, are left out (a cable just cut or moved). Then:
 *   show       topo_cablemap_build + topo_classify -> the verdict;
 *   addresses  + topo_addrplan_make; every node applies it (or reports what it
 *              would change) with its own netdevs;
 *   addresses with "node": that node's netplan from the latest stored
 *              validation, answered from cluster.db (sparkctl provision);
 *   validate   + probes, in rounds where a node's twin is in one probe at a
 *              time: every healthy twin of every direct cable (client end "a",
 *              server end "b"); on a switch, per twin rail, each node with the
 *              next one (bandwidth), then, unless --quick, every other pair
 *              (latency and MTU only). Probes use the twins' IPv6 link-local
 *              addresses (scoped to the netdev), else their IPv4 address; RDMA
 *              where both twins can, falling back to TCP when it fails without
 *              a result. Probe findings join the verdict's (bandwidth and
 *              latency: warn; MTU and errors: fail), the run is stored in
 *              cluster.db and answered. One validation at a time. */
#include "topo.h"

#include "classify.h"
#include "log.h"
#include "pki.h"
#include "proto.h"
#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TICK_MS 50
#define MAX_PROBES 256
#define MAX_ROUNDS 64

struct vrun;

enum vkind { VK_SHOW, VK_VALIDATE, VK_ADDRESSES };

struct vnode {
	char id[40], name[64];
	bool self, reachable, answered;
	json_t *disc, *l2;
	json_t *host_addrs; /* its IPv4 addresses outside the fabric (topo_host_addresses) */
	char l2_err[256];
	char err[384];
};

struct vprobe {
	int a, b; /* node indices: client, server */
	char a_port[16], b_port[16], a_nd[16], b_nd[16];
	int twin;
	bool bulk;
	int round;
	char transport[8];
	char token[33];
	char pid[40];
	json_t *result;
	char err[512];
	char fallback[384];
	bool done;
};

struct vrun {
	struct vrun *next;
	struct thead *h;
	enum vkind kind;
	conn *cli;
	json_int_t cli_id;
	char origin[40];
	char expect[16];
	bool quick, apply;
	uint64_t t0_ms;
	int64_t started_at;
	struct vnode nodes[TOPO_MAX_NODES];
	size_t n;
	int gathers;
	uint64_t wake_ms;
	json_t *verdict;
	json_t *plan;
	json_t *reports;
	struct vprobe *probes;
	size_t np;
	int round, nrounds, round_left;
	bool finished;
};

#define GONE_MAX 16
#define GONE_KEEP_S 120 /* a node that left is "known" this long */

struct thead {
	struct topo_agent *t;
	/* nodes that left or were removed lately (from cluster.db's events) */
	int64_t ev_seen;
	int64_t member_change_ts, cabling_change_ts;
	char member_change[96], cabling_change[160];
	struct {
		char name[64];
		int64_t ts;
		bool removed;
	} gone[GONE_MAX];
	int ngone;
	struct vrun *runs;
	uv_timer_t timer;
	bool timer_init, stopped;
	bool validating;
};

static const char *jstr(const json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

static const char *jstr_or(const json_t *o, const char *k, const char *def)
{
	const char *s = jstr(o, k);
	return s ? s : def;
}

static void on_tick(uv_timer_t *h);

static void tick_on(struct thead *h)
{
	if (h->timer_init && !h->stopped && !uv_is_active((uv_handle_t *)&h->timer))
		uv_timer_start(&h->timer, on_tick, TICK_MS, TICK_MS);
}

/* ---- answers to the CLI ----------------------------------------------------------- */

static void answer(struct vrun *r, json_t *data)
{
	if (r->cli)
		svc_send_result(r->cli, r->cli_id, data);
	else
		json_decref(data);
	r->cli = NULL;
}

static void answer_err(struct vrun *r, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void answer_err(struct vrun *r, const char *code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (r->cli)
		conn_send_new(r->cli, proto_error(r->cli_id, code, msg));
	r->cli = NULL;
}

/* Drop the run's requests; the run itself is freed by the next tick. */
static void finish(struct vrun *r)
{
	struct thead *h = r->h;
	r->finished = true;
	if (r->kind == VK_VALIDATE)
		h->validating = false;
	peers_ask_forget(h->t->a, r);
	tick_on(h);
}

static void run_free(struct vrun *r)
{
	for (size_t i = 0; i < r->n; i++) {
		json_decref(r->nodes[i].disc);
		json_decref(r->nodes[i].l2);
		json_decref(r->nodes[i].host_addrs);
	}
	for (size_t i = 0; i < r->np; i++)
		json_decref(r->probes[i].result);
	free(r->probes);
	json_decref(r->verdict);
	json_decref(r->plan);
	json_decref(r->reports);
	free(r);
}

/* ---- requests to nodes --------------------------------------------------------------- */

/* Send op (msg, stolen) to node ni of the run (peers.c keeps it until its
 * topo_reply, a timeout or the session's end; cb gets idx back). 0, or
 * -ENOTCONN (msg freed). */
static int send_req(struct vrun *r, size_t ni, json_t *msg, peers_ask_fn cb, int idx,
		    unsigned timeout_ms)
{
	struct agent *a = r->h->t->a;
	json_object_set_new(msg, "type", json_string("topo_req"));
	int rc = peers_ask(a, r->nodes[ni].id, msg, timeout_ms, cb, r, idx);
	if (rc == 0)
		tick_on(r->h);
	return rc;
}

/* Requests of the run still waiting for an answer. */
static size_t pending(struct vrun *r)
{
	return peers_ask_pending(r->h->t->a, r);
}

static json_t *op_msg(const char *op)
{
	json_t *m = proto_msg("topo_req", 0);
	json_object_set_new(m, "op", json_string(op));
	return m;
}

/* The reply's data, or NULL with why filled (no answer, an error answer). */
static json_t *reply_data(const char *err, const json_t *m, char *why, size_t len)
{
	if (!m) {
		snprintf(why, len, "%s", err ? err : "no answer");
		return NULL;
	}
	if (!json_is_true(json_object_get(m, "ok"))) {
		snprintf(why, len, "%s", jstr_or(m, "message", "the node refused the request"));
		return NULL;
	}
	json_t *d = json_object_get(m, "data");
	return json_is_object(d) ? d : NULL;
}

/* ---- gather ------------------------------------------------------------------------------- */

static void gathered(struct vrun *r);

static void on_state(struct agent *a_, void *owner, int idx, const json_t *m, const char *err)
{
	struct vrun *r = owner;
	(void)a_;
	struct vnode *n = &r->nodes[idx];
	n->answered = true;
	char why[384];
	json_t *d = reply_data(err, m, why, sizeof why);
	if (!d) {
		snprintf(n->err, sizeof n->err, "%s", why);
	} else {
		json_t *disc = json_object_get(d, "discovery"), *l2 = json_object_get(d, "l2disc");
		if (json_is_object(disc)) {
			json_decref(n->disc);
			n->disc = json_incref(disc);
		}
		json_decref(n->l2);
		n->l2 = json_is_object(l2) ? json_incref(l2) : NULL;
		json_t *ha = json_object_get(d, "host_addresses");
		json_decref(n->host_addrs);
		n->host_addrs = json_is_array(ha) ? json_incref(ha) : NULL;
		util_strlcpy(n->l2_err, jstr_or(d, "l2disc_error", ""), sizeof n->l2_err);
	}
	if (pending(r) == 0)
		gathered(r);
}

static json_t *stored_discovery(struct agent *a, const char *node_id)
{
	db_fabric f;
	if (!a->hd.db || db_fabric_get(a->hd.db, node_id, &f) < 0)
		return NULL;
	json_t *d = json_loads(f.discovery, 0, NULL);
	db_fabric_free(&f);
	return d;
}

static void gather(struct vrun *r)
{
	struct agent *a = r->h->t->a;
	r->gathers++;
	size_t asked = 0;
	for (size_t i = 0; i < r->n; i++) {
		struct vnode *n = &r->nodes[i];
		n->answered = false;
		n->err[0] = '\0';
		if (send_req(r, i, op_msg("state"), on_state, (int)i, TOPO_REQ_TIMEOUT_MS) == 0) {
			n->reachable = true;
			asked++;
			continue;
		}
		n->reachable = false;
		n->answered = true;
		snprintf(n->err, sizeof n->err, "sparkd on %s is not connected to the head", n->name);
		if (!n->disc)
			n->disc = stored_discovery(a, n->id);
		json_decref(n->l2);
		n->l2 = NULL;
	}
	if (asked == 0)
		gathered(r);
}

static int start_run(struct vrun *r)
{
	struct agent *a = r->h->t->a;
	db_node *nodes = NULL;
	size_t n = 0;
	if (!a->hd.db || db_node_list(a->hd.db, &nodes, &n) < 0)
		return -EIO;
	if (n > TOPO_MAX_NODES) {
		free(nodes);
		return -E2BIG;
	}
	for (size_t i = 0; i < n; i++) {
		struct vnode *v = &r->nodes[i];
		util_strlcpy(v->id, nodes[i].id, sizeof v->id);
		util_strlcpy(v->name, nodes[i].name, sizeof v->name);
		v->self = strcmp(nodes[i].id, a->id.node_id) == 0;
	}
	r->n = n;
	free(nodes);
	r->next = r->h->runs;
	r->h->runs = r;
	gather(r);
	return 0;
}

/* ---- the verdict ---------------------------------------------------------------------------- */

static json_t *twin_of(json_t *disc, const char *netdev)
{
	size_t i, k;
	json_t *p, *t;
	json_array_foreach(json_object_get(disc, "ports"), i, p)
		json_array_foreach(json_object_get(p, "twins"), k, t) {
			const char *nd = jstr(t, "netdev");
			if (nd && netdev && strcmp(nd, netdev) == 0)
				return t;
		}
	return NULL;
}

/* A copy of a neighbour table without what a cut or moved cable left behind:
 * neighbours of a twin without carrier, those not heard for two intervals,
 * and those whose SENDER's netdev has no carrier in the sender's own report
 * of this run (a switch cable just moved to the node's other port: the
 * others still remember the old port for two intervals, and a verdict must
 * not mix what was heard before the change with the reports after it). */
static json_t *fresh_l2(struct vrun *r, json_t *l2, json_t *disc)
{
	json_t *c = json_deep_copy(l2);
	json_int_t iv = proto_int(c, "interval_ms", 1000);
	double stale = 2.0 * (double)(iv > 0 ? iv : 1000) + TOPO_STALE_EXTRA_MS;
	size_t i;
	json_t *f;
	json_array_foreach(json_object_get(c, "interfaces"), i, f) {
		json_t *tw = twin_of(disc, jstr(f, "netdev"));
		json_t *nb = json_object_get(f, "neighbours");
		if (json_is_false(json_object_get(tw, "carrier"))) {
			json_array_clear(nb);
			continue;
		}
		for (size_t k = json_array_size(nb); k-- > 0;) {
			json_t *e = json_array_get(nb, k);
			json_t *ago = json_object_get(e, "heard_ms_ago");
			if (json_is_number(ago) && json_number_value(ago) > stale) {
				json_array_remove(nb, k);
				continue;
			}
			const char *from = jstr(e, "node_id");
			for (size_t m = 0; from && m < r->n; m++)
				if (strcmp(r->nodes[m].id, from) == 0 && r->nodes[m].disc &&
				    json_is_false(json_object_get(twin_of(r->nodes[m].disc, jstr(e, "netdev")),
								  "carrier"))) {
					json_array_remove(nb, k);
					break;
				}
		}
	}
	return c;
}

static void add_finding(json_t *verdict, const char *code, const char *sev, const char *msg,
			const char *fix, json_t *ends)
{
	json_t *f = json_object_get(verdict, "findings");
	if (!json_is_array(f)) {
		f = json_array();
		json_object_set_new(verdict, "findings", f);
	}
	json_array_append_new(f, json_pack("{s:s, s:s, s:s, s:s, s:o}", "code", code, "severity",
					   sev, "message", msg, "fix", fix,
					   "ends", ends ? ends : json_array()));
}

static void recompute_result(json_t *verdict)
{
	int worst = 0;
	size_t i;
	json_t *f;
	json_array_foreach(json_object_get(verdict, "findings"), i, f) {
		const char *s = jstr_or(f, "severity", "");
		if (strcmp(s, "fail") == 0)
			worst = 2;
		else if (strcmp(s, "warn") == 0 && worst < 1)
			worst = 1;
	}
	json_object_set_new(verdict, "result",
			    json_string(worst == 2 ? "fail" : worst == 1 ? "warn" : "pass"));
}

/* Read the events recorded since the last scan (incrementally): nodes that
 * left or were removed (for the map's "former"), and the newest membership
 * and cabling changes (for status: a verdict older than them is stale). */
static void scan_events(struct thead *h, struct agent *a)
{
	db_event *ev = NULL;
	size_t nev = 0;
	while (a->hd.db && db_event_list(a->hd.db, h->ev_seen, 1000, &ev, &nev) == 0 && nev > 0) {
		for (size_t i = 0; i < nev; i++) {
			h->ev_seen = ev[i].id;
			const char *k = ev[i].kind, *d = ev[i].detail;
			bool left = strcmp(k, "node_left") == 0, removed = strcmp(k, "node_removed") == 0;
			if (left || removed || strcmp(k, "joined") == 0) {
				h->member_change_ts = ev[i].ts;
				snprintf(h->member_change, sizeof h->member_change, "%s %s", d,
					 left ? "left" : removed ? "was removed" : "joined");
			}
			if (strcmp(k, "fabric") == 0 && (strstr(d, "carrier") || strstr(d, "mtu") ||
							 strstr(d, "gone") || strstr(d, "appeared"))) {
				h->cabling_change_ts = ev[i].ts;
				snprintf(h->cabling_change, sizeof h->cabling_change, "%s", d);
			}
			if (!left && !removed)
				continue;
			if (h->ngone == GONE_MAX) { /* full: drop the oldest */
				memmove(&h->gone[0], &h->gone[1], (GONE_MAX - 1) * sizeof h->gone[0]);
				h->ngone--;
			}
			int g = h->ngone++;
			util_strlcpy(h->gone[g].name, d, sizeof h->gone[g].name);
			h->gone[g].ts = ev[i].ts;
			h->gone[g].removed = removed;
		}
		free(ev);
		ev = NULL;
		if (nev < 1000)
			break;
	}
	free(ev);
}

/* The map's "former": nodes that left or were removed in the last
 * GONE_KEEP_S seconds and are not members again, read from the events that
 * `leave` and `node rm` record. */
static json_t *former_nodes(struct vrun *r)
{
	struct thead *h = r->h;
	scan_events(h, h->t->a);
	json_t *out = json_array();
	int64_t now = util_now();
	for (int k = 0; k < h->ngone; k++) {
		if (now - h->gone[k].ts > GONE_KEEP_S)
			continue;
		bool member = false;
		for (size_t i = 0; i < r->n; i++)
			member |= strcmp(r->nodes[i].name, h->gone[k].name) == 0;
		if (!member)
			json_array_append_new(out, json_pack("{s:s, s:s, s:I}", "name", h->gone[k].name,
							     "how", h->gone[k].removed ? "removed" : "left",
							     "ago_s", (json_int_t)(now - h->gone[k].ts)));
	}
	return out;
}

static int classify(struct vrun *r, char *err, size_t errlen)
{
	json_t *nodes = json_array();
	for (size_t i = 0; i < r->n; i++) {
		struct vnode *n = &r->nodes[i];
		json_t *l2 = n->l2 ? fresh_l2(r, n->l2, n->disc) : json_null();
		json_array_append_new(nodes, json_pack("{s:s, s:s, s:O, s:o}", "id", n->id, "name",
						       n->name, "discovery",
						       n->disc ? n->disc : json_null(), "l2disc", l2));
	}
	json_t *map = NULL, *verdict = NULL;
	int rc = topo_cablemap_build(nodes, &map);
	json_decref(nodes);
	if (rc < 0) {
		snprintf(err, errlen, "cannot build the cable map from the nodes' reports");
		return rc;
	}
	json_object_set_new(map, "former", former_nodes(r));
	struct topo_classify_opts co = {.expect = r->expect[0] ? r->expect : NULL,
					.mtu = r->h->t->dopts.cluster_mtu};
	rc = topo_classify(map, &co, &verdict, err, errlen);
	json_decref(map);
	if (rc < 0)
		return rc;
	json_t *frames = json_object();
	for (size_t i = 0; i < r->n; i++) {
		struct vnode *n = &r->nodes[i];
		char msg[768], fix[384];
		/* Without a node's neighbour table, what the classifier says about its
		 * cables rests on half the evidence (a sparkd down looks like a cable
		 * missing): its own finding below says what to fix first. */
		json_t *fs = json_object_get(verdict, "findings");
		for (size_t k = json_array_size(fs); !n->l2 && k-- > 0;) {
			json_t *f = json_array_get(fs, k), *e;
			size_t x;
			bool mine = false;
			json_array_foreach(json_object_get(f, "ends"), x, e)
				mine |= strcmp(jstr_or(e, "node", ""), n->name) == 0;
			if (mine)
				json_array_remove(fs, k);
		}
		if (!n->reachable || !n->disc || (n->answered && n->err[0])) {
			snprintf(msg, sizeof msg, "the head could not ask %s for its neighbours: %s", n->name,
				 n->err[0] ? n->err : "no fabric report");
			snprintf(fix, sizeof fix,
				 "start sparkd on %s (systemctl start sparkd) and check 'sparkctl status'; then validate again",
				 n->name);
			add_finding(verdict, "node_unreachable", "fail", msg, fix,
				    json_pack("[{s:s}]", "node", n->name));
		} else if (!n->l2) {
			snprintf(msg, sizeof msg, "neighbour discovery does not run on %s: %s", n->name,
				 n->l2_err[0] ? n->l2_err : "unknown reason");
			snprintf(fix, sizeof fix,
				 "sparkd on %s needs CAP_NET_RAW and its fabric netdevs (fabric.ports); see its log",
				 n->name);
			add_finding(verdict, "neighbour_discovery_off", "fail", msg, fix,
				    json_pack("[{s:s}]", "node", n->name));
		}
		if (n->l2) {
			json_t *d = json_object_get(n->l2, "dropped");
			json_object_set_new(frames, n->name,
					    json_pack("{s:O, s:I}", "dropped", d ? d : json_null(),
						      "uptime_ms", proto_int(n->l2, "uptime_ms", 0)));
		}
	}
	json_object_set_new(verdict, "frames", frames);
	/* the addressing plan keeps clear of these (topology/addrplan.h) */
	json_t *hosts = json_object();
	for (size_t i = 0; i < r->n; i++)
		if (r->nodes[i].host_addrs)
			json_object_set(hosts, r->nodes[i].name, r->nodes[i].host_addrs);
	json_object_set_new(verdict, "host_addresses", hosts);
	recompute_result(verdict);
	json_decref(r->verdict);
	r->verdict = verdict;
	return 0;
}

/* ---- probes ---------------------------------------------------------------------------------- */

static int node_index(struct vrun *r, const char *name)
{
	for (size_t i = 0; name && i < r->n; i++)
		if (strcmp(r->nodes[i].name, name) == 0)
			return (int)i;
	return -1;
}

/* Netdev of twin t of a node's port, from its discovery. */
static const char *port_twin(json_t *disc, const char *port, int t)
{
	size_t i;
	json_t *p;
	json_array_foreach(json_object_get(disc, "ports"), i, p)
		if (strcmp(jstr_or(p, "name", ""), port) == 0)
			return jstr(json_array_get(json_object_get(p, "twins"), (size_t)t), "netdev");
	return NULL;
}

static struct vprobe *add_probe(struct vrun *r, int a, const char *ap, const char *and_, int b,
				const char *bp, const char *bnd, int twin, bool bulk)
{
	if (a < 0 || b < 0 || !and_ || !bnd || r->np >= MAX_PROBES)
		return NULL;
	if (r->np % 16 == 0) {
		struct vprobe *np = realloc(r->probes, (r->np + 16) * sizeof *np);
		if (!np)
			return NULL;
		r->probes = np;
	}
	struct vprobe *p = &r->probes[r->np++];
	memset(p, 0, sizeof *p);
	p->a = a;
	p->b = b;
	util_strlcpy(p->a_port, ap, sizeof p->a_port);
	util_strlcpy(p->b_port, bp, sizeof p->b_port);
	util_strlcpy(p->a_nd, and_, sizeof p->a_nd);
	util_strlcpy(p->b_nd, bnd, sizeof p->b_nd);
	p->twin = twin;
	p->bulk = bulk;
	p->round = -1;
	return p;
}

/* Is twin t of the switch cable of (node, port) healthy? */
static bool switch_twin_ok(json_t *verdict, const char *node, const char *port, int t)
{
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(verdict, "cables"), i, c) {
		json_t *ea = json_object_get(c, "a");
		if (strcmp(jstr_or(c, "kind", ""), "switch") != 0 ||
		    strcmp(jstr_or(ea, "node", ""), node) != 0 || strcmp(jstr_or(ea, "port", ""), port) != 0)
			continue;
		size_t k;
		json_t *tw;
		json_array_foreach(json_object_get(c, "twins"), k, tw)
			if (json_integer_value(json_object_get(tw, "twin")) == t)
				return json_is_true(json_object_get(tw, "ok"));
	}
	return false;
}

static void plan_probes(struct vrun *r)
{
	json_t *v = r->verdict;
	size_t i, k;
	json_t *c, *tw;
	/* Direct cables: each healthy twin, client = end a. */
	json_array_foreach(json_object_get(v, "cables"), i, c) {
		if (strcmp(jstr_or(c, "kind", ""), "direct") != 0)
			continue;
		json_t *ea = json_object_get(c, "a"), *eb = json_object_get(c, "b");
		int a = node_index(r, jstr(ea, "node")), b = node_index(r, jstr(eb, "node"));
		json_array_foreach(json_object_get(c, "twins"), k, tw) {
			if (!json_is_true(json_object_get(tw, "ok")))
				continue;
			add_probe(r, a, jstr_or(ea, "port", "?"), jstr(json_object_get(tw, "a"), "netdev"), b,
				  jstr_or(eb, "port", "?"), jstr(json_object_get(tw, "b"), "netdev"),
				  (int)json_integer_value(json_object_get(tw, "twin")), true);
		}
	}
	/* Switch: per L2 domain and twin rail, each node with the next (bandwidth),
	 * then every other pair (latency and MTU) unless quick. */
	json_t *dom;
	json_array_foreach(json_object_get(v, "l2_domains"), i, dom) {
		for (int t = 0; t < 2; t++) {
			int idx[TOPO_MAX_NODES];
			const char *port[TOPO_MAX_NODES];
			int m = 0;
			json_t *pe;
			json_array_foreach(json_object_get(dom, "ports"), k, pe) {
				int ni = node_index(r, jstr(pe, "node"));
				const char *pn = jstr(pe, "port");
				bool seen = false;
				for (int x = 0; x < m; x++)
					seen |= idx[x] == ni;
				if (ni < 0 || !pn || seen || m >= TOPO_MAX_NODES ||
				    !switch_twin_ok(v, r->nodes[ni].name, pn, t) ||
				    !port_twin(r->nodes[ni].disc, pn, t))
					continue;
				idx[m] = ni;
				port[m++] = pn;
			}
			if (m < 2)
				continue;
			bool ringpair[TOPO_MAX_NODES][TOPO_MAX_NODES] = {{false}};
			for (int x = 0; x < (m == 2 ? 1 : m); x++) {
				int y = (x + 1) % m;
				ringpair[x][y] = ringpair[y][x] = true;
				add_probe(r, idx[x], port[x], port_twin(r->nodes[idx[x]].disc, port[x], t),
					  idx[y], port[y], port_twin(r->nodes[idx[y]].disc, port[y], t), t,
					  true);
			}
			if (r->quick)
				continue;
			for (int x = 0; x < m; x++)
				for (int y = x + 1; y < m; y++)
					if (!ringpair[x][y])
						add_probe(r, idx[x], port[x],
							  port_twin(r->nodes[idx[x]].disc, port[x], t), idx[y],
							  port[y], port_twin(r->nodes[idx[y]].disc, port[y], t), t,
							  false);
		}
	}
	/* Rounds: a node's twin rail is in one probe at a time; bandwidth first. */
	static bool busy[MAX_ROUNDS][TOPO_MAX_NODES][2];
	memset(busy, 0, sizeof busy);
	int first_light = 0;
	for (int pass = 0; pass < 2; pass++) {
		int base = pass == 0 ? 0 : first_light;
		for (size_t x = 0; x < r->np; x++) {
			struct vprobe *p = &r->probes[x];
			if (p->bulk != (pass == 0))
				continue;
			int rail = p->twin & 1;
			int rd = base;
			while (rd < MAX_ROUNDS - 1 && (busy[rd][p->a][rail] || busy[rd][p->b][rail]))
				rd++;
			busy[rd][p->a][rail] = busy[rd][p->b][rail] = true;
			p->round = rd;
			if (rd + 1 > r->nrounds)
				r->nrounds = rd + 1;
		}
		first_light = r->nrounds;
	}
}

static json_t *params_json(struct vrun *r, const struct vprobe *p)
{
	struct topo_agent *t = r->h->t;
	unsigned bulk = p->bulk ? (r->quick ? t->quick_bulk_ms : t->bulk_ms) : 0;
	unsigned ping = r->quick ? t->quick_ping_iters : t->ping_iters;
	return json_pack("{s:i, s:i, s:i, s:b}", "ping_iters", (int)ping, "bulk_ms", (int)bulk,
			 "timeout_ms", (int)t->probe_timeout_ms, "mtu_check", 1);
}

static json_t *thresholds_json(const struct topo_probe_thresholds *t)
{
	return json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:i}", "rdma_min_gbps", t->rdma_min_gbps,
			 "rdma_max_p50_us", t->rdma_max_p50_us, "rdma_max_p99_us", t->rdma_max_p99_us,
			 "tcp_min_gbps", t->tcp_min_gbps, "tcp_max_p50_us", t->tcp_max_p50_us,
			 "tcp_max_p99_us", t->tcp_max_p99_us, "mtu", t->mtu);
}

/* Upper bound of a probe's run time, for the request deadline. */
static unsigned probe_budget_ms(struct vrun *r, const struct vprobe *p)
{
	json_t *pj = params_json(r, p);
	unsigned bulk = (unsigned)proto_int(pj, "bulk_ms", 0);
	json_decref(pj);
	return r->h->t->probe_timeout_ms * 6 + 2 * bulk + 5000;
}

static void start_round(struct vrun *r);
static void validate_done(struct vrun *r);
static void start_tcp(struct vrun *r, struct vprobe *p);

static void probe_done(struct vrun *r, struct vprobe *p)
{
	if (p->done)
		return;
	p->done = true;
	if (--r->round_left == 0) {
		r->round++;
		start_round(r);
	}
}

static void probe_fail(struct vrun *r, struct vprobe *p, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void probe_fail(struct vrun *r, struct vprobe *p, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(p->err, sizeof p->err, fmt, ap);
	va_end(ap);
	probe_done(r, p);
}

static void on_client(struct agent *a_, void *owner, int idx, const json_t *m, const char *err)
{
	struct vrun *r = owner;
	(void)a_;
	struct vprobe *p = &r->probes[idx];
	char why[384];
	json_t *d = reply_data(err, m, why, sizeof why);
	if (!d) {
		probe_fail(r, p, "%s", why);
		return;
	}
	json_t *res = json_object_get(d, "result");
	if (json_is_object(res))
		p->result = json_incref(res);
	if (proto_int(d, "rc", 0) < 0)
		snprintf(p->err, sizeof p->err, "%s", jstr_or(d, "error", "the probe failed"));
	probe_done(r, p);
}

/* Where the client reaches the server's twin: its IPv6 link-local address
 * scoped to the client's netdev, else its first IPv4 address. */
static int probe_addrs(struct vrun *r, struct vprobe *p, char *listen, size_t llen, char *peer,
		       size_t plen)
{
	json_t *tw = twin_of(r->nodes[p->b].disc, p->b_nd);
	size_t i;
	json_t *x;
	json_array_foreach(json_object_get(tw, "ipv6"), i, x) {
		const char *s = json_string_value(x);
		if (s && strncasecmp(s, "fe80:", 5) == 0) {
			snprintf(listen, llen, "::");
			snprintf(peer, plen, "%.*s%%%s", (int)strcspn(s, "/"), s, p->a_nd);
			return 0;
		}
	}
	const char *v4 = json_string_value(json_array_get(json_object_get(tw, "ipv4"), 0));
	if (v4) {
		snprintf(listen, llen, "0.0.0.0");
		snprintf(peer, plen, "%.*s", (int)strcspn(v4, "/"), v4);
		return 0;
	}
	return -EADDRNOTAVAIL;
}

static void on_serve(struct agent *a_, void *owner, int idx, const json_t *m, const char *err)
{
	struct vrun *r = owner;
	(void)a_;
	struct vprobe *p = &r->probes[idx];
	char why[384];
	json_t *d = reply_data(err, m, why, sizeof why);
	json_int_t port = d ? proto_int(d, "port", 0) : 0;
	if (!d || port <= 0 || port > 65535) {
		probe_fail(r, p, "%s", d ? "the probe server gave no port" : why);
		return;
	}
	char listen[8], peer[96];
	probe_addrs(r, p, listen, sizeof listen, peer, sizeof peer);
	json_t *msg = op_msg("probe_client");
	json_object_set_new(msg, "netdev", json_string(p->a_nd));
	json_object_set_new(msg, "peer_address", json_string(peer));
	json_object_set_new(msg, "peer_port", json_integer(port));
	json_object_set_new(msg, "token", json_string(p->token));
	json_object_set_new(msg, "params", params_json(r, p));
	json_object_set_new(msg, "thresholds", thresholds_json(&r->h->t->thr));
	if (send_req(r, (size_t)p->a, msg, on_client, idx, probe_budget_ms(r, p)) < 0)
		probe_fail(r, p, "sparkd on %s is not connected to the head", r->nodes[p->a].name);
}

static void start_tcp(struct vrun *r, struct vprobe *p)
{
	util_strlcpy(p->transport, "tcp", sizeof p->transport);
	char listen[8], peer[96];
	if (probe_addrs(r, p, listen, sizeof listen, peer, sizeof peer) < 0) {
		probe_fail(r, p, "%s %s has no IPv6 link-local or IPv4 address to probe",
			   r->nodes[p->b].name, p->b_nd);
		return;
	}
	json_t *msg = op_msg("probe_serve");
	json_object_set_new(msg, "netdev", json_string(p->b_nd));
	json_object_set_new(msg, "address", json_string(listen));
	json_object_set_new(msg, "token", json_string(p->token));
	json_object_set_new(msg, "timeout_ms", json_integer(r->h->t->probe_timeout_ms + 2000));
	int idx = (int)(p - r->probes);
	if (send_req(r, (size_t)p->b, msg, on_serve, idx, TOPO_REQ_TIMEOUT_MS) < 0)
		probe_fail(r, p, "sparkd on %s is not connected to the head", r->nodes[p->b].name);
}

static void on_rdma_server(struct agent *a_, void *owner, int idx, const json_t *m, const char *err)
{
	(void)a_;
	(void)owner;
	(void)idx;
	(void)err;
	(void)m; /* the client's answer carries the measurement */
}

static void on_rdma_client(struct agent *a_, void *owner, int idx, const json_t *m, const char *err)
{
	struct vrun *r = owner;
	(void)a_;
	struct vprobe *p = &r->probes[idx];
	char why[384];
	json_t *d = reply_data(err, m, why, sizeof why);
	json_t *res = d ? json_object_get(d, "result") : NULL;
	if (d && json_is_object(res) && proto_int(d, "rc", 0) == 0) {
		p->result = json_incref(res);
		probe_done(r, p);
		return;
	}
	/* No RDMA result: measure over TCP and say why. */
	snprintf(p->fallback, sizeof p->fallback, "RDMA probe failed (%s); measured over TCP instead",
		 d ? jstr_or(d, "error", "no result") : why);
	log_info("probe_rdma_fallback", "a=%s:%s b=%s:%s reason=%s", r->nodes[p->a].name, p->a_nd,
		 r->nodes[p->b].name, p->b_nd, log_q(p->fallback));
	start_tcp(r, p);
}

static void on_ignore(struct agent *a_, void *owner, int idx, const json_t *m, const char *err)
{
	(void)a_;
	(void)owner;
	(void)idx;
	(void)err;
	(void)m;
}

static json_t *rdma_msg(struct vrun *r, struct vprobe *p, bool server)
{
	const char *nd = server ? p->b_nd : p->a_nd;
	json_t *tw = twin_of(r->nodes[server ? p->b : p->a].disc, nd);
	json_t *rd = json_object_get(tw, "rdma");
	json_t *msg = op_msg("rdma");
	json_object_set_new(msg, "probe", json_string(p->pid));
	json_object_set_new(msg, "server", json_boolean(server));
	json_object_set_new(msg, "ibdev", json_string(jstr_or(rd, "device", "")));
	json_object_set_new(msg, "ib_port", json_integer(proto_int(rd, "port", 1)));
	json_object_set_new(msg, "gid_index", json_integer(proto_int(rd, "rocev2_gid_index", -1)));
	json_object_set_new(msg, "netdev", json_string(nd));
	json_object_set_new(msg, "params", params_json(r, p));
	json_object_set_new(msg, "thresholds", thresholds_json(&r->h->t->thr));
	return msg;
}

static void start_probe(struct vrun *r, struct vprobe *p)
{
	pki_random_hex(p->token, 16);
	pki_random_hex(p->pid, 12);
	json_t *ta = twin_of(r->nodes[p->a].disc, p->a_nd), *tb = twin_of(r->nodes[p->b].disc, p->b_nd);
	if (strcmp(topo_probe_pick_transport(ta, tb), "rdma") != 0) {
		start_tcp(r, p);
		return;
	}
	util_strlcpy(p->transport, "rdma", sizeof p->transport);
	int idx = (int)(p - r->probes);
	unsigned budget = probe_budget_ms(r, p);
	if (send_req(r, (size_t)p->b, rdma_msg(r, p, true), on_rdma_server, idx, budget) < 0 ||
	    send_req(r, (size_t)p->a, rdma_msg(r, p, false), on_rdma_client, idx, budget) < 0)
		probe_fail(r, p, "%s or %s is not connected to the head", r->nodes[p->a].name,
			   r->nodes[p->b].name);
}

static void start_round(struct vrun *r)
{
	while (r->round < r->nrounds) {
		r->round_left = 0;
		for (size_t i = 0; i < r->np; i++)
			r->round_left += r->probes[i].round == r->round;
		if (r->round_left) {
			/* start_probe may finish a probe at once (no address, no session):
			 * count first, then start. */
			r->round_left++;
			for (size_t i = 0; i < r->np; i++)
				if (r->probes[i].round == r->round)
					start_probe(r, &r->probes[i]);
			if (--r->round_left > 0)
				return;
		}
		r->round++;
	}
	validate_done(r);
}

/* An RDMA endpoint from node_id: relay it to the other end of its probe. */
static void relay_endpoint(struct thead *h, const char *node_id, const json_t *msg)
{
	const char *pid = jstr(msg, "probe");
	for (struct vrun *r = h->runs; pid && r; r = r->next) {
		if (r->finished)
			continue;
		for (size_t i = 0; i < r->np; i++) {
			struct vprobe *p = &r->probes[i];
			if (strcmp(p->pid, pid) != 0 || p->done)
				continue;
			/* only an end of that probe may send its endpoint */
			bool from_a = strcmp(r->nodes[p->a].id, node_id) == 0;
			if (!from_a && strcmp(r->nodes[p->b].id, node_id) != 0) {
				log_warn("frame_not_owner", "type=topo_rdma_ep probe=%s from=%s", pid,
					 node_id);
				return;
			}
			int to = from_a ? p->b : p->a;
			json_t *m = op_msg("rdma_peer");
			json_object_set_new(m, "probe", json_string(pid));
			json_object_set(m, "endpoint", json_object_get(msg, "endpoint"));
			send_req(r, (size_t)to, m, on_ignore, (int)i, TOPO_REQ_TIMEOUT_MS);
			return;
		}
	}
}

/* Severity of a probe finding: slow is a warning, broken is a failure. */
static const char *probe_severity(const char *code)
{
	return strcmp(code, "probe_bandwidth_low") == 0 || strcmp(code, "probe_latency_high") == 0 ||
			       strcmp(code, "probe_latency_p99_high") == 0
		       ? "warn"
		       : "fail";
}

static json_t *end_json(struct vrun *r, int ni, const char *port, const char *nd)
{
	return json_pack("{s:s, s:s, s:s}", "node", r->nodes[ni].name, "port", port, "netdev", nd);
}

static json_t *num_at(json_t *o, const char *a, const char *b)
{
	json_t *v = json_object_get(json_object_get(o, a), b);
	return json_is_number(v) ? json_incref(v) : json_null();
}

/* The probe as the verdict lists it; its findings go to the verdict. */
static json_t *probe_json(struct vrun *r, struct vprobe *p, json_t *verdict, const char **result)
{
	char where[256];
	snprintf(where, sizeof where, "%s port %s %s -> %s port %s %s (twin %d, %s)",
		 r->nodes[p->a].name, p->a_port, p->a_nd, r->nodes[p->b].name, p->b_port, p->b_nd,
		 p->twin, p->transport[0] ? p->transport : "tcp");
	int worst = 0;
	size_t i;
	json_t *f;
	json_array_foreach(json_object_get(p->result, "findings"), i, f) {
		const char *code = jstr_or(f, "code", "probe_error");
		const char *sev = probe_severity(code);
		worst = strcmp(sev, "fail") == 0 ? 2 : worst < 1 ? 1 : worst;
		char msg[900];
		snprintf(msg, sizeof msg, "probe %s: %s", where, jstr_or(f, "message", code));
		add_finding(verdict, code, sev, msg, jstr_or(f, "fix", "see docs/topology.md"),
			    json_pack("[o, o]", end_json(r, p->a, p->a_port, p->a_nd),
				      end_json(r, p->b, p->b_port, p->b_nd)));
	}
	if (p->err[0] && !json_array_size(json_object_get(p->result, "findings"))) {
		char msg[1024];
		snprintf(msg, sizeof msg, "probe %s could not run: %s", where, p->err);
		add_finding(verdict, "probe_error", "fail", msg,
			    "check that sparkd runs on both nodes and both netdevs are up with an "
			    "address (IPv6 link-local or the fabric plan's); see docs/topology.md",
			    json_pack("[o, o]", end_json(r, p->a, p->a_port, p->a_nd),
				      end_json(r, p->b, p->b_port, p->b_nd)));
		worst = 2;
	}
	*result = worst == 2 ? "fail" : worst == 1 ? "warn" : "pass";
	json_t *o = json_pack("{s:o, s:o, s:i, s:s, s:s, s:b}", "a",
			      end_json(r, p->a, p->a_port, p->a_nd), "b",
			      end_json(r, p->b, p->b_port, p->b_nd), "twin", p->twin, "transport",
			      p->transport[0] ? p->transport : "tcp", "result", *result, "bandwidth",
			      p->bulk);
	json_object_set_new(o, "p50_us", num_at(p->result, "latency", "p50_us"));
	json_object_set_new(o, "p99_us", num_at(p->result, "latency", "p99_us"));
	json_object_set_new(o, "gbps", num_at(p->result, "bandwidth", "gbps"));
	json_object_set_new(o, "mtu_largest", num_at(p->result, "mtu", "largest_ok"));
	json_object_set_new(o, "error", p->err[0] ? json_string(p->err) : json_null());
	json_object_set_new(o, "fallback_reason", p->fallback[0] ? json_string(p->fallback) : json_null());
	json_object_set_new(o, "detail", p->result ? json_incref(p->result) : json_null());
	return o;
}

static double dnum(json_t *v)
{
	return json_is_number(v) ? json_number_value(v) : -1;
}

static void store_run(struct vrun *r, int64_t duration_ms)
{
	struct agent *a = r->h->t->a;
	json_t *v = r->verdict;
	json_t *cables = json_object_get(v, "cables"), *probes = json_object_get(v, "probes");
	size_t nc = json_array_size(cables), np = json_array_size(probes), i;
	db_topo_cable *cr = calloc(nc ? nc : 1, sizeof *cr);
	db_topo_probe *pr = calloc(np ? np : 1, sizeof *pr);
	char **details = calloc(np ? np : 1, sizeof *details);
	db_topo_run run = {0};
	json_t *x;
	if (!cr || !pr || !details)
		goto out;
	json_array_foreach(cables, i, x) {
		json_t *ea = json_object_get(x, "a"), *eb = json_object_get(x, "b");
		util_strlcpy(cr[i].kind, jstr_or(x, "kind", "direct"), sizeof cr[i].kind);
		util_strlcpy(cr[i].a_node, jstr_or(ea, "node", ""), sizeof cr[i].a_node);
		util_strlcpy(cr[i].a_port, jstr_or(ea, "port", ""), sizeof cr[i].a_port);
		util_strlcpy(cr[i].b_node, jstr_or(eb, "node", jstr_or(eb, "switch", "")),
			     sizeof cr[i].b_node);
		util_strlcpy(cr[i].b_port, jstr_or(eb, "port", ""), sizeof cr[i].b_port);
		cr[i].twins_ok = (int)proto_int(x, "twins_ok", 0);
		cr[i].mtu_ok = !json_is_false(json_object_get(x, "mtu_ok"));
		cr[i].same_port = json_is_true(json_object_get(x, "same_port"));
	}
	json_array_foreach(probes, i, x) {
		json_t *ea = json_object_get(x, "a"), *eb = json_object_get(x, "b");
		util_strlcpy(pr[i].a_node, jstr_or(ea, "node", ""), sizeof pr[i].a_node);
		util_strlcpy(pr[i].a_netdev, jstr_or(ea, "netdev", ""), sizeof pr[i].a_netdev);
		util_strlcpy(pr[i].b_node, jstr_or(eb, "node", ""), sizeof pr[i].b_node);
		util_strlcpy(pr[i].b_netdev, jstr_or(eb, "netdev", ""), sizeof pr[i].b_netdev);
		pr[i].twin = (int)proto_int(x, "twin", 0);
		util_strlcpy(pr[i].transport, jstr_or(x, "transport", "tcp"), sizeof pr[i].transport);
		util_strlcpy(pr[i].result, jstr_or(x, "result", "fail"), sizeof pr[i].result);
		pr[i].p50_us = dnum(json_object_get(x, "p50_us"));
		pr[i].p99_us = dnum(json_object_get(x, "p99_us"));
		pr[i].gbps = dnum(json_object_get(x, "gbps"));
		json_t *ml = json_object_get(x, "mtu_largest");
		pr[i].mtu_largest = json_is_integer(ml) ? json_integer_value(ml) : -1;
		details[i] = json_dumps(x, JSON_COMPACT);
		pr[i].detail = details[i];
	}
	run.started_at = r->started_at;
	run.finished_at = util_now();
	run.duration_ms = duration_ms;
	util_strlcpy(run.expect, r->expect, sizeof run.expect);
	run.quick = r->quick;
	util_strlcpy(run.cls, jstr_or(v, "class", "unknown"), sizeof run.cls);
	util_strlcpy(run.result, jstr_or(v, "result", "fail"), sizeof run.result);
	run.n_nodes = (int)proto_int(v, "nodes", (json_int_t)r->n);
	run.n_findings = (int)json_array_size(json_object_get(v, "findings"));
	/* The verdict without its run object (the row has those fields). */
	json_t *copy = json_copy(v);
	json_object_del(copy, "run");
	run.verdict = json_dumps(copy, JSON_COMPACT);
	json_decref(copy);
	int rc = run.verdict ? db_topo_run_add(a->hd.db, &run, cr, nc, pr, np) : -ENOMEM;
	if (rc < 0)
		log_warn("topo_store_failed", "err=%d", rc);
	else
		json_object_set_new(json_object_get(v, "run"), "id", json_integer(run.id));
	free(run.verdict);
out:
	for (i = 0; details && i < np; i++)
		free(details[i]);
	free(details);
	free(cr);
	free(pr);
}

static void validate_done(struct vrun *r)
{
	json_t *v = r->verdict;
	json_t *probes = json_array();
	int ntcp = 0, nrdma = 0;
	for (size_t i = 0; i < r->np; i++) {
		struct vprobe *p = &r->probes[i];
		const char *res;
		json_array_append_new(probes, probe_json(r, p, v, &res));
		if (strcmp(p->transport, "rdma") == 0)
			nrdma++;
		else
			ntcp++;
	}
	json_object_set_new(v, "probes", probes);
	json_object_set_new(v, "probe_summary",
			    json_pack("{s:i, s:i, s:i, s:i, s:s, s:s}", "count", (int)r->np, "rounds",
				      r->nrounds, "tcp", ntcp, "rdma", nrdma, "transport",
				      r->np == 0 ? "none"
				      : nrdma == 0 ? "tcp"
				      : ntcp == 0  ? "rdma"
						   : "mixed",
				      "note",
				      nrdma == 0 && ntcp
					      ? "no usable RDMA device: latency and bandwidth were measured "
						"over TCP, judged by the TCP thresholds"
					      : ""));
	recompute_result(v);
	int64_t dur = (int64_t)(util_now_ms() - r->t0_ms);
	json_object_set_new(v, "run",
			    json_pack("{s:n, s:I, s:I, s:b, s:s}", "id", "started_at",
				      (json_int_t)r->started_at, "duration_ms", (json_int_t)dur, "quick",
				      r->quick, "expect", r->expect));
	store_run(r, dur);
	log_info("topo_validated", "class=%s result=%s nodes=%zu findings=%zu probes=%zu ms=%lld",
		 jstr_or(v, "class", "?"), jstr_or(v, "result", "?"), r->n,
		 json_array_size(json_object_get(v, "findings")), r->np, (long long)dur);
	answer(r, json_incref(v));
	finish(r);
}

/* ---- addresses ------------------------------------------------------------------------------ */

static void addresses_done(struct vrun *r)
{
	struct topo_agent *t = r->h->t;
	const char *local = NULL;
	for (size_t i = 0; i < r->n; i++)
		if (strcmp(r->nodes[i].id, r->origin) == 0)
			local = r->nodes[i].name;
	bool failed = false;
	size_t i;
	json_t *x;
	json_array_foreach(r->reports, i, x) failed |= !json_is_object(json_object_get(x, "report")) ||
						     proto_int(x, "rc", 0) < 0;
	answer(r, json_pack("{s:s, s:s, s:s, s:i, s:b, s:b, s:O, s:O, s:o, s:i}", "class",
			    jstr_or(r->verdict, "class", "unknown"), "result",
			    jstr_or(r->verdict, "result", "fail"), "pool", t->pool, "prefix", t->prefix,
			    "applied", r->apply, "failed", failed, "plan", r->plan, "reports", r->reports,
			    "local_node", local ? json_string(local) : json_null(), "mtu",
			    t->dopts.cluster_mtu));
	finish(r);
}

static void on_addr(struct agent *a_, void *owner, int idx, const json_t *m, const char *err)
{
	struct vrun *r = owner;
	(void)a_;
	char why[384];
	json_t *d = reply_data(err, m, why, sizeof why);
	json_t *o = json_pack("{s:s, s:I, s:o, s:o}", "node", r->nodes[idx].name, "rc",
			      d ? proto_int(d, "rc", 0) : (json_int_t)-EIO, "error",
			      d ? json_incref(json_object_get(d, "error") ? json_object_get(d, "error")
									  : json_null())
				: json_string(why),
			      "report",
			      d && json_is_object(json_object_get(d, "report"))
				      ? json_incref(json_object_get(d, "report"))
				      : json_null());
	json_array_set_new(r->reports, (size_t)idx, o);
	/* The node's discovery after applying: stored before --apply answers, so
	 * a job started right after it is planned with the new addresses. */
	json_t *disc = d ? json_object_get(d, "discovery") : NULL;
	if (json_is_object(disc)) {
		struct agent *ag = r->h->t->a;
		int fr = ag->hooks.fabric_store ? ag->hooks.fabric_store(ag, r->nodes[idx].id, disc) : -ENOSYS;
		if (fr < 0)
			log_warn("fabric_store_failed", "node=%s err=%d", r->nodes[idx].name, fr);
	}
	if (pending(r) == 0)
		addresses_done(r);
}

static void run_addresses(struct vrun *r)
{
	struct topo_agent *t = r->h->t;
	struct topo_addrplan_opts o = {.pool = t->pool, .prefix = t->prefix};
	char err[512] = "";
	if (topo_addrplan_make(r->verdict, &o, &r->plan, err, sizeof err) < 0) {
		answer_err(r, "no_plan", "no addressing plan for this cabling (%s): %s; run 'sparkctl topo validate'",
			   jstr_or(r->verdict, "class", "unknown"), err);
		finish(r);
		return;
	}
	if (r->apply && strcmp(jstr_or(r->verdict, "result", "fail"), "fail") == 0) {
		answer_err(r, "topology_failed",
			   "the cabling has failures ('sparkctl topo validate' lists them); fix them "
			   "before applying addresses");
		finish(r);
		return;
	}
	r->reports = json_array();
	for (size_t i = 0; i < r->n; i++)
		json_array_append_new(r->reports, json_null()); /* answers land at their node's index */
	size_t sent = 0;
	for (size_t i = 0; i < r->n; i++) {
		json_t *m = op_msg("addr_apply");
		json_object_set(m, "plan", r->plan);
		json_object_set_new(m, "dry_run", json_boolean(!r->apply));
		if (send_req(r, i, m, on_addr, (int)i, TOPO_REQ_TIMEOUT_MS) == 0)
			sent++;
		else
			json_array_set_new(r->reports, i,
					   json_pack("{s:s, s:i, s:s, s:n}", "node", r->nodes[i].name, "rc",
						     -ENOTCONN, "error", "sparkd is not connected to the head",
						     "report"));
	}
	if (sent == 0)
		addresses_done(r);
}

/* ---- after the gather ----------------------------------------------------------------------- */

/* Does some node's table hold a neighbour whose sending twin has no carrier
 * in its sender's report of this run? */
static bool mixed_reports(struct vrun *r)
{
	for (size_t i = 0; i < r->n; i++) {
		json_int_t iv = proto_int(r->nodes[i].l2, "interval_ms", 1000);
		double stale = 2.0 * (double)(iv > 0 ? iv : 1000) + TOPO_STALE_EXTRA_MS;
		size_t x, k;
		json_t *f, *e;
		json_array_foreach(json_object_get(r->nodes[i].l2, "interfaces"), x, f)
			json_array_foreach(json_object_get(f, "neighbours"), k, e) {
				json_t *ago = json_object_get(e, "heard_ms_ago");
				if (json_is_number(ago) && json_number_value(ago) > stale)
					continue; /* left out as stale anyway */
				const char *from = jstr(e, "node_id");
				for (size_t m = 0; from && m < r->n; m++)
					if (strcmp(r->nodes[m].id, from) == 0 && r->nodes[m].disc &&
					    json_is_false(json_object_get(
						twin_of(r->nodes[m].disc, jstr(e, "netdev")), "carrier")))
						return true;
			}
	}
	return false;
}

static void gathered(struct vrun *r)
{
	/* A neighbour table younger than TOPO_SETTLE_MS may miss neighbours: wait. */
	json_int_t min_up = -1;
	for (size_t i = 0; i < r->n; i++) {
		json_int_t up = r->nodes[i].l2 ? proto_int(r->nodes[i].l2, "uptime_ms", 0) : -1;
		if (up >= 0 && (min_up < 0 || up < min_up))
			min_up = up;
	}
	if (r->gathers < 3 && min_up >= 0 && min_up < TOPO_SETTLE_MS) {
		r->wake_ms = util_now_ms() + (uint64_t)(TOPO_SETTLE_MS - min_up) + 20;
		tick_on(r->h);
		return;
	}
	/* A carrier changed moments ago: some node still remembers frames from a
	 * twin that has no carrier now, and the reports that follow the change
	 * (the new port heard) may not be in yet. Gather again until those
	 * entries are gone (two intervals), at most TOPO_CHANGE_WAIT_MS. */
	if (mixed_reports(r) && util_now_ms() - r->t0_ms < TOPO_CHANGE_WAIT_MS) {
		r->wake_ms = util_now_ms() + 300;
		tick_on(r->h);
		return;
	}
	char err[512] = "";
	if (classify(r, err, sizeof err) < 0) {
		answer_err(r, "internal", "cannot classify the cable map: %s", err);
		finish(r);
		return;
	}
	if (r->kind == VK_SHOW) {
		answer(r, json_incref(r->verdict));
		finish(r);
	} else if (r->kind == VK_ADDRESSES) {
		run_addresses(r);
	} else {
		plan_probes(r);
		r->round = 0;
		start_round(r);
	}
}

/* ---- hooks ------------------------------------------------------------------------------------ */

void topo_head_on_rdma_ep(struct agent *a, const char *node_id, const json_t *msg)
{
	struct thead *h = a->topo ? a->topo->head : NULL;
	if (h)
		relay_endpoint(h, node_id, msg);
}

/* A node's answer: only to a request of ours, from the node it was sent to
 * (peers.c matches both). */
void topo_head_on_reply(struct agent *a, const char *node_id, const json_t *msg)
{
	if (!peers_node_answer(a, node_id, msg))
		log_debug("topo_reply_unknown", "node_id=%s id=%lld", node_id, (long long)proto_id(msg));
}

void topo_head_conn_gone(struct agent *a, conn *c)
{
	struct thead *h = a->topo ? a->topo->head : NULL;
	if (!h)
		return;
	for (struct vrun *r = h->runs; r; r = r->next)
		if (r->cli == c)
			r->cli = NULL;
}

static void on_tick(uv_timer_t *th)
{
	struct thead *h = th->data;
	uint64_t now = util_now_ms();
	for (struct vrun *r = h->runs; r; r = r->next) {
		if (r->finished)
			continue;
		if (now - r->t0_ms > TOPO_RUN_TIMEOUT_MS) {
			answer_err(r, "timeout", "the topology run did not finish in %d s",
				   TOPO_RUN_TIMEOUT_MS / 1000);
			finish(r);
		} else if (r->wake_ms && now >= r->wake_ms) {
			r->wake_ms = 0;
			gather(r);
		}
	}
	for (struct vrun **p = &h->runs; *p;) {
		struct vrun *r = *p;
		if (r->finished) {
			*p = r->next;
			run_free(r);
		} else {
			p = &r->next;
		}
	}
	bool busy = h->runs != NULL;
	if (!busy)
		uv_timer_stop(th);
}

/* topo_addresses with "node": that node's netplan from the latest stored
 * validation (no gather, nothing applied; sparkctl provision asks this).
 * Answers {"node","netplan":YAML|null,"reason":text|null,"run_id","class",
 * "result","finished_at"}; netplan is null when no validation was stored yet,
 * the latest one failed, or it does not include that node (reason says which). */
static void addresses_for_node(struct agent *a, conn *c, const json_t *req, const char *node)
{
	struct topo_agent *t = a->topo;
	db_topo_run run;
	int rc = a->hd.db ? db_topo_run_latest(a->hd.db, &run) : -ENOENT;
	if (rc == -ENOENT) {
		svc_send_result(c, proto_id(req),
			      json_pack("{s:s, s:n, s:s, s:n, s:n, s:n, s:n}", "node", node, "netplan",
					"reason", "no validated topology yet", "run_id", "class",
					"result", "finished_at"));
		return;
	}
	if (rc < 0) {
		svc_error_to(c, req, "internal", "cannot read cluster.db (%d)", rc);
		return;
	}
	char err[512] = "", reason[640] = "";
	char *yaml = NULL;
	json_t *v = json_loads(run.verdict ? run.verdict : "", 0, NULL), *plan = NULL;
	struct topo_addrplan_opts o = {.pool = t->pool, .prefix = t->prefix};
	if (strcmp(run.result, "fail") == 0)
		snprintf(reason, sizeof reason,
			 "the latest topology validation failed ('sparkctl topo validate' lists why)");
	else if (!v || topo_addrplan_make(v, &o, &plan, err, sizeof err) < 0)
		snprintf(reason, sizeof reason, "no addressing plan for the validated %s cabling: %s",
			 run.cls, err[0] ? err : "unreadable verdict");
	else if (topo_addrplan_netplan(plan, node, t->dopts.cluster_mtu, &yaml, err, sizeof err) < 0)
		snprintf(reason, sizeof reason, "%s is not in the validated topology", node);
	svc_send_result(c, proto_id(req),
		      json_pack("{s:s, s:o, s:o, s:I, s:s, s:s, s:I}", "node", node, "netplan",
				yaml ? json_string(yaml) : json_null(), "reason",
				reason[0] ? json_string(reason) : json_null(), "run_id",
				(json_int_t)run.id, "class", run.cls, "result", run.result,
				"finished_at", (json_int_t)run.finished_at));
	free(yaml);
	json_decref(plan);
	json_decref(v);
	db_topo_run_free(&run);
}

static void run_request(struct agent *a, const struct svc_req *q, enum vkind kind)
{
	conn *c = q->reply;
	const json_t *req = q->msg;
	const char *origin = q->origin;
	struct thead *h = a->topo ? a->topo->head : NULL;
	if (!h || h->stopped) {
		svc_error_to(c, req, "shutdown", "sparkd is stopping");
		return;
	}
	const char *node = proto_str(req, "node");
	if (kind == VK_ADDRESSES && node && *node) {
		addresses_for_node(a, c, req, node);
		return;
	}
	const char *expect = proto_str(req, "expect");
	if (expect && *expect && strcmp(expect, "pair") != 0 && strcmp(expect, "ring") != 0 &&
	    strcmp(expect, "switch") != 0) {
		svc_error_to(c, req, "bad_request", "--expect takes pair, ring or switch, not '%s'",
			      expect);
		return;
	}
	if (kind == VK_VALIDATE && h->validating) {
		svc_error_to(c, req, "busy",
			      "a topology validation is already running; wait for it and run this again");
		return;
	}
	struct vrun *r = calloc(1, sizeof *r);
	if (!r) {
		svc_error_to(c, req, "internal", "out of memory");
		return;
	}
	r->h = h;
	r->kind = kind;
	r->cli = c;
	r->cli_id = proto_id(req);
	util_strlcpy(r->origin, origin ? origin : "", sizeof r->origin);
	util_strlcpy(r->expect, expect ? expect : "", sizeof r->expect);
	r->quick = json_is_true(json_object_get(req, "quick"));
	r->apply = json_is_true(json_object_get(req, "apply"));
	r->t0_ms = util_now_ms();
	r->started_at = util_now();
	if (kind == VK_VALIDATE)
		h->validating = true;
	int rc = start_run(r);
	if (rc < 0) {
		if (kind == VK_VALIDATE)
			h->validating = false;
		free(r);
		svc_error_to(c, req, rc == -E2BIG ? "too_many_nodes" : "internal",
			      rc == -E2BIG ? "the cluster has more than %d nodes" : "cannot read cluster.db (%d)",
			      rc == -E2BIG ? TOPO_MAX_NODES : rc);
	}
}

void topo_head_show(struct agent *a, const struct svc_req *q) { run_request(a, q, VK_SHOW); }
void topo_head_validate(struct agent *a, const struct svc_req *q) { run_request(a, q, VK_VALIDATE); }
void topo_head_addresses(struct agent *a, const struct svc_req *q) { run_request(a, q, VK_ADDRESSES); }

json_t *topo_head_status(struct agent *a)
{
	db_topo_run run;
	if (!a->hd.db || db_topo_run_latest(a->hd.db, &run) < 0)
		return json_null();
	char summary[64];
	char up[16];
	snprintf(up, sizeof up, "%s", run.result);
	for (char *p = up; *p; p++)
		*p = (char)(*p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p);
	snprintf(summary, sizeof summary, "%s(%d) %s", run.cls, run.n_nodes, up);
	int64_t age = util_now() - run.finished_at;
	json_t *o = json_pack("{s:I, s:s, s:s, s:i, s:i, s:b, s:s, s:I, s:I, s:I, s:s}", "run_id",
			      (json_int_t)run.id, "class", run.cls, "result", run.result, "nodes",
			      run.n_nodes, "findings", run.n_findings, "quick", run.quick, "expect",
			      run.expect, "finished_at", (json_int_t)run.finished_at, "age_s",
			      (json_int_t)(age > 0 ? age : 0), "duration_ms",
			      (json_int_t)run.duration_ms, "summary", summary);
	/* A verdict that predates the membership or the cabling is no longer the
	 * cluster's: say so (status prints it), and what changed. */
	struct thead *h = a->topo ? a->topo->head : NULL;
	char why[320] = "";
	size_t now_nodes = 0;
	db_node *nodes = NULL;
	if (db_node_list(a->hd.db, &nodes, &now_nodes) == 0 && (int)now_nodes != run.n_nodes)
		snprintf(why, sizeof why, "the cluster has %zu nodes now, the validation saw %d",
			 now_nodes, run.n_nodes);
	free(nodes);
	if (h) {
		scan_events(h, a);
		/* the count alone does not say who: the newest membership change does
		 * (in the run's own second too when the count already differs) */
		if (h->member_change[0] && (h->member_change_ts > run.started_at ||
					    (why[0] && h->member_change_ts >= run.started_at))) {
			char count[160];
			snprintf(count, sizeof count, "%s", why);
			snprintf(why, sizeof why, "%s since%s%s%s", h->member_change, count[0] ? " (" : "",
				 count, count[0] ? ")" : "");
		}
		else if (!why[0] && h->cabling_change_ts > run.started_at && h->cabling_change[0])
			snprintf(why, sizeof why, "the cabling changed since (%s)", h->cabling_change);
	}
	json_object_set_new(o, "stale", json_boolean(why[0] != 0));
	json_object_set_new(o, "stale_reason", why[0] ? json_string(why) : json_null());
	db_topo_run_free(&run);
	return o;
}

int topo_head_init(struct topo_agent *t)
{
	struct thead *h = calloc(1, sizeof *h);
	if (!h)
		return -ENOMEM;
	h->t = t;
	uv_timer_init(t->a->loop, &h->timer);
	h->timer.data = h;
	h->timer_init = true;
	t->head = h;
	return 0;
}

void topo_head_stop(struct agent *a)
{
	struct thead *h = a->topo ? a->topo->head : NULL;
	if (!h || h->stopped)
		return;
	for (struct vrun *r = h->runs; r; r = r->next)
		if (!r->finished) {
			answer_err(r, "shutdown", "sparkd is stopping; run this again when it is back");
			finish(r);
		}
	h->stopped = true;
	uv_timer_stop(&h->timer); /* closed by main's final walk */
}

void topo_head_free(struct agent *a)
{
	struct thead *h = a->topo ? a->topo->head : NULL;
	if (!h)
		return;
	while (h->runs) {
		struct vrun *r = h->runs;
		h->runs = r->next;
		run_free(r);
	}
	free(h);
	a->topo->head = NULL;
}

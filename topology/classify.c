/* classify: cable map -> verdict (see classify.h). Pure: no I/O, no clock. */
#include "topology/classify.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXN TOPO_CLASSIFY_MAX_NODES
#define MAXP 4
#define MAXT 4
#define NPORT (MAXN * MAXP)
#define NTWIN (NPORT * MAXT)

struct ctwin {
	const char *netdev;
	int carrier; /* 1, 0, -1 unknown */
	int admin;   /* admin state: 1 up, 0 down, -1 unknown */
	long mtu;    /* from the map, 0 unknown */
	long reported_mtu; /* what its frames said, 0 unknown */
	int port;    /* global port index */
	int idx;     /* index in its port */
	json_t *j;
};

struct cport {
	const char *name;
	int node;
	int rank; /* 0 = first port of its node by name ("0"), 1 = second... */
	int ntw;
	int tw[MAXT];
	int comp;
};

struct cnode {
	const char *id, *name;
	int np;
	int port[MAXP]; /* global port indices, by name */
	json_t *j;
};

struct ctx {
	const struct topo_classify_opts *o;
	json_t *map;
	int nn, np, nt;
	struct cnode n[MAXN];
	struct cport p[NPORT];
	struct ctwin t[NTWIN];
	unsigned char th[NTWIN][NTWIN]; /* th[a][b]: twin a heard twin b */
	unsigned char ph[NPORT][NPORT]; /* port hears port */
	int comp_size[NPORT];
	json_t *fail, *warn, *info; /* findings by severity */
	json_t *cables, *advice;
	const char *cls;
	bool any_to_any;
	bool mesh; /* every pair of nodes has its own direct cable (a 3-node ring) */
	long cluster_mtu; /* the MTU mismatches are judged against (0: none) */
	char sb[32][4096]; /* rotating message fragments: room for every name of MAXN nodes */
	int si;
};

/* ---------- small helpers ---------- */

static const char *S(struct ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *S(struct ctx *c, const char *fmt, ...)
{
	char *b = c->sb[c->si++ % 32];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(b, sizeof c->sb[0], fmt, ap);
	va_end(ap);
	return b;
}

static const char *NN(struct ctx *c, int n) { return c->n[n].name; }
static const char *PN(struct ctx *c, int p) { return p >= 0 && p < c->np ? c->p[p].name : "?"; }
/* "spark-1 port 0" */
static const char *PL(struct ctx *c, int p) { return S(c, "%s port %s", NN(c, c->p[p].node), PN(c, p)); }
/* "spark-1 enp1s0f0np0" */
static const char *TL(struct ctx *c, int t)
{
	return S(c, "%s %s", NN(c, c->p[c->t[t].port].node), c->t[t].netdev);
}

static json_t *end_port(struct ctx *c, int p)
{
	return json_pack("{s:s, s:s}", "node", NN(c, c->p[p].node), "port", PN(c, p));
}

static json_t *end_twin(struct ctx *c, int t)
{
	int p = c->t[t].port;
	return json_pack("{s:s, s:s, s:s}", "node", NN(c, c->p[p].node), "port", PN(c, p), "netdev",
			 c->t[t].netdev);
}

static json_t *end_node(struct ctx *c, int n) { return json_pack("{s:s}", "node", NN(c, n)); }

static void finding(struct ctx *c, const char *code, const char *sev, json_t *ends, const char *fix,
		    const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void finding(struct ctx *c, const char *code, const char *sev, json_t *ends, const char *fix,
		    const char *fmt, ...)
{
	/* Sized by the text itself: a message is never cut off. */
	char *msg = NULL;
	va_list ap;
	va_start(ap, fmt);
	int w = vasprintf(&msg, fmt, ap);
	va_end(ap);
	if (w < 0)
		msg = NULL;
	json_t *f = json_pack("{s:s, s:s, s:s, s:s, s:o}", "code", code, "severity", sev, "message",
			      msg ? msg : code, "fix", fix, "ends", ends ? ends : json_array());
	free(msg);
	json_t *dst = strcmp(sev, "fail") == 0 ? c->fail : strcmp(sev, "warn") == 0 ? c->warn : c->info;
	json_array_append_new(dst, f);
}

static void advice(struct ctx *c, const char *code, const char *msg)
{
	json_array_append_new(c->advice, json_pack("{s:s, s:s}", "code", code, "message", msg));
}

static long jint(json_t *v) { return json_is_integer(v) ? (long)json_integer_value(v) : 0; }

static int find_node(struct ctx *c, const char *id)
{
	for (int i = 0; i < c->nn; i++)
		if (strcmp(c->n[i].id, id) == 0)
			return i;
	return -1;
}

static int find_port(struct ctx *c, int n, const char *name)
{
	for (int i = 0; i < c->n[n].np; i++)
		if (strcmp(PN(c, c->n[n].port[i]), name) == 0)
			return c->n[n].port[i];
	return -1;
}

static int port_by_rank(struct ctx *c, int n, int rank)
{
	for (int i = 0; i < c->n[n].np; i++)
		if (c->p[c->n[n].port[i]].rank == rank)
			return c->n[n].port[i];
	return -1;
}

/* Twin tw hears some twin of port q / is heard by one. */
static bool twin_hears_port(struct ctx *c, int tw, int q)
{
	for (int i = 0; i < c->p[q].ntw; i++)
		if (c->th[tw][c->p[q].tw[i]])
			return true;
	return false;
}

static bool port_hears_twin(struct ctx *c, int q, int tw)
{
	for (int i = 0; i < c->p[q].ntw; i++)
		if (c->th[c->p[q].tw[i]][tw])
			return true;
	return false;
}

static long twin_mtu(struct ctx *c, int t) { return c->t[t].mtu > 0 ? c->t[t].mtu : c->t[t].reported_mtu; }

static json_t *twin_json(struct ctx *c, int t)
{
	long m = twin_mtu(c, t);
	return json_pack("{s:s, s:o, s:o}", "netdev", c->t[t].netdev, "mtu",
			 m > 0 ? json_integer(m) : json_null(), "carrier",
			 c->t[t].carrier < 0 ? json_null() : json_boolean(c->t[t].carrier));
}

/* ---------- parsing ---------- */

static const char *node_label(json_t *n)
{
	const char *s = json_string_value(json_object_get(n, "name"));
	return s && *s ? s : json_string_value(json_object_get(n, "id"));
}

static int node_cmp(const void *a, const void *b)
{
	json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
	const char *lx = node_label(x), *ly = node_label(y);
	int r = strcmp(lx ? lx : "", ly ? ly : "");
	if (r)
		return r;
	const char *ix = json_string_value(json_object_get(x, "id"));
	const char *iy = json_string_value(json_object_get(y, "id"));
	return strcmp(ix ? ix : "", iy ? iy : "");
}

static const char *port_label(json_t *p)
{
	const char *s = json_string_value(json_object_get(p, "port"));
	return s ? s : json_string_value(json_object_get(p, "name"));
}

static int port_cmp(const void *a, const void *b)
{
	const char *x = port_label(*(json_t *const *)a), *y = port_label(*(json_t *const *)b);
	return strcmp(x ? x : "", y ? y : "");
}

static int parse(struct ctx *c, json_t *map, char *err, size_t errlen)
{
	json_t *nodes = json_object_get(map, "nodes");
	if (!json_is_array(nodes)) {
		snprintf(err, errlen, "cable map has no \"nodes\" array");
		return -EINVAL;
	}
	size_t cnt = json_array_size(nodes);
	if (cnt > MAXN) {
		snprintf(err, errlen, "cable map has %zu nodes, at most %d are supported", cnt, MAXN);
		return -EINVAL;
	}
	json_t *v[MAXN];
	for (size_t i = 0; i < cnt; i++) {
		v[i] = json_array_get(nodes, i);
		const char *id = json_string_value(json_object_get(v[i], "id"));
		if (!json_is_object(v[i]) || !id || !*id) {
			snprintf(err, errlen, "cable map node %zu has no \"id\"", i);
			return -EINVAL;
		}
	}
	qsort(v, cnt, sizeof v[0], node_cmp);
	for (size_t i = 0; i < cnt; i++) {
		struct cnode *n = &c->n[c->nn];
		n->j = v[i];
		n->id = json_string_value(json_object_get(v[i], "id"));
		n->name = node_label(v[i]);
		if (find_node(c, n->id) >= 0) {
			snprintf(err, errlen, "cable map lists node id %s twice", n->id);
			return -EINVAL;
		}
		json_t *ports = json_object_get(v[i], "ports");
		size_t pc = json_array_size(ports);
		if (pc > MAXP) {
			snprintf(err, errlen, "node %s has %zu ports, at most %d", n->name, pc, MAXP);
			return -EINVAL;
		}
		json_t *pv[MAXP];
		size_t k = 0;
		for (size_t j = 0; j < pc; j++) {
			json_t *pj = json_array_get(ports, j);
			if (json_is_object(pj) && port_label(pj))
				pv[k++] = pj;
		}
		qsort(pv, k, sizeof pv[0], port_cmp);
		c->nn++;
		for (size_t j = 0; j < k; j++) {
			int g = c->np++;
			struct cport *p = &c->p[g];
			p->name = port_label(pv[j]);
			p->node = c->nn - 1;
			p->comp = g;
			n->port[n->np++] = g;
			json_t *tws = json_object_get(pv[j], "twins");
			if (json_array_size(tws) > MAXT) {
				snprintf(err, errlen, "node %s port %s has %zu twins, at most %d", n->name,
					 p->name, json_array_size(tws), MAXT);
				return -EINVAL;
			}
			size_t ti;
			json_t *tj;
			json_array_foreach(tws, ti, tj) {
				int tg = c->nt++;
				struct ctwin *t = &c->t[tg];
				const char *nd = json_string_value(json_object_get(tj, "netdev"));
				t->netdev = nd ? nd : "?";
				json_t *car = json_object_get(tj, "carrier");
				t->carrier = json_is_boolean(car) ? json_is_true(car) : -1;
				json_t *adm = json_object_get(tj, "admin_up");
				t->admin = json_is_boolean(adm) ? json_is_true(adm) : -1;
				t->mtu = jint(json_object_get(tj, "mtu"));
				t->port = g;
				t->idx = (int)ti;
				t->j = tj;
				p->tw[p->ntw++] = tg;
			}
		}
	}
	/* Rank = position of the port's name among every name in the map, so a
	 * node that lists only port "1" still has it as its second port. */
	const char *names[NPORT];
	int nnames = 0;
	for (int g = 0; g < c->np; g++) {
		int k = 0;
		while (k < nnames && strcmp(names[k], c->p[g].name) < 0)
			k++;
		if (k < nnames && strcmp(names[k], c->p[g].name) == 0)
			continue;
		memmove(names + k + 1, names + k, (size_t)(nnames - k) * sizeof names[0]);
		names[k] = c->p[g].name;
		nnames++;
	}
	for (int g = 0; g < c->np; g++)
		for (int k = 0; k < nnames; k++)
			if (strcmp(names[k], c->p[g].name) == 0)
				c->p[g].rank = k;
	return 0;
}

/* A node that left the cluster lately (the map's "former"), by id or name. */
static json_t *former(struct ctx *c, const char *id, const char *name)
{
	size_t i;
	json_t *f;
	json_array_foreach(json_object_get(c->map, "former"), i, f) {
		const char *fid = json_string_value(json_object_get(f, "id"));
		const char *fn = json_string_value(json_object_get(f, "name"));
		if ((fid && id && strcmp(fid, id) == 0) || (fn && name && strcmp(fn, name) == 0))
			return f;
	}
	return NULL;
}

/* Resolve every "heard" entry to a twin; unknown senders become findings. */
static void resolve_heard(struct ctx *c)
{
	const char *unknown[MAXN * 4];
	int nunknown = 0;
	for (int a = 0; a < c->nt; a++) {
		size_t i;
		json_t *h;
		json_array_foreach(json_object_get(c->t[a].j, "heard"), i, h) {
			const char *id = json_string_value(json_object_get(h, "node_id"));
			const char *pn = json_string_value(json_object_get(h, "port"));
			const char *nd = json_string_value(json_object_get(h, "netdev"));
			if (!id || !pn)
				continue;
			int m = find_node(c, id);
			if (m < 0) {
				bool seen = false;
				for (int k = 0; k < nunknown; k++)
					seen |= strcmp(unknown[k], id) == 0;
				if (seen || nunknown >= (int)(sizeof unknown / sizeof unknown[0]))
					continue;
				unknown[nunknown++] = id;
				const char *nm = json_string_value(json_object_get(h, "node_name"));
				json_t *gone = former(c, id, nm);
				if (gone) {
					const char *how = json_string_value(json_object_get(gone, "how"));
					bool rm = how && strcmp(how, "removed") == 0;
					finding(c, "node_left", "info", json_pack("[o]", end_twin(c, a)),
						"nothing to do: its frames stop within seconds; unplug its cable if "
						"it should not be cabled there, or join it again (sparkctl join)",
						"%s still hears %s on port %s, which %s the cluster %llds ago",
						TL(c, a), nm ? nm : id, pn,
						rm ? "was removed from (sparkctl node rm)" : "left (sparkctl leave)",
						(long long)jint(json_object_get(gone, "ago_s")));
					continue;
				}
				finding(c, "unknown_neighbour", "warn", json_pack("[o]", end_twin(c, a)),
					"join that node to this cluster (sparkctl join) or unplug it",
					"%s hears node %s%s%s%s on port %s, which is not a member of this "
					"cluster but holds its secret",
					TL(c, a), id, nm ? " (" : "", nm ? nm : "", nm ? ")" : "", pn);
				continue;
			}
			int q = find_port(c, m, pn);
			if (q < 0)
				continue;
			if (q == c->t[a].port)
				continue; /* its own twin: l2disc drops these already */
			int b = -1;
			for (int k = 0; k < c->p[q].ntw; k++)
				if (nd && strcmp(c->t[c->p[q].tw[k]].netdev, nd) == 0)
					b = c->p[q].tw[k];
			json_t *tw = json_object_get(h, "twin");
			if (b < 0 && json_is_integer(tw) && json_integer_value(tw) >= 0 &&
			    json_integer_value(tw) < c->p[q].ntw)
				b = c->p[q].tw[json_integer_value(tw)];
			if (b < 0)
				continue;
			c->th[a][b] = 1;
			c->ph[c->t[a].port][q] = 1;
			long mtu = jint(json_object_get(h, "mtu"));
			if (mtu > 0)
				c->t[b].reported_mtu = mtu;
		}
	}
}

static int uf_find(struct ctx *c, int p)
{
	while (c->p[p].comp != p) {
		c->p[p].comp = c->p[c->p[p].comp].comp;
		p = c->p[p].comp;
	}
	return p;
}

static void components(struct ctx *c)
{
	for (int a = 0; a < c->np; a++)
		for (int b = 0; b < c->np; b++)
			if (a != b && (c->ph[a][b] || c->ph[b][a])) {
				int ra = uf_find(c, a), rb = uf_find(c, b);
				if (ra != rb) {
					/* The lowest index is the root: components are named
					 * by their first port, in node-name order. */
					if (ra < rb)
						c->p[rb].comp = ra;
					else
						c->p[ra].comp = rb;
				}
			}
	for (int a = 0; a < c->np; a++) {
		c->p[a].comp = uf_find(c, a);
		c->comp_size[c->p[a].comp]++;
	}
}

static bool port_linked(struct ctx *c, int p) { return c->comp_size[c->p[p].comp] >= 2; }

static int other_port_in_comp(struct ctx *c, int p)
{
	for (int q = 0; q < c->np; q++)
		if (q != p && c->p[q].comp == c->p[p].comp)
			return q;
	return -1;
}

/* ---------- node and twin level findings ---------- */

static void node_drops(struct ctx *c)
{
	for (int t = 0; t < c->nt; t++) {
		json_t *d = json_object_get(c->t[t].j, "dropped");
		long bad = jint(json_object_get(d, "bad_hmac"));
		long other = jint(json_object_get(d, "other_cluster"));
		if (bad > 0) {
			json_t *bf = json_object_get(c->t[t].j, "bad_hmac_from");
			const char *who = json_string_value(json_object_get(bf, "node_name"));
			const char *mac = json_string_value(json_object_get(bf, "mac"));
			/* Info beside a working cable (a stray or forged frame), warn
			 * when that twin hears nothing valid (a node with an old secret). */
			bool heard_ok = false;
			for (int b = 0; b < c->nt; b++)
				heard_ok |= c->th[t][b];
			finding(c, "bad_hmac_frames", heard_ok ? "info" : "warn",
				json_pack("[o]", end_twin(c, t)),
				"re-join the node on the other end with this cluster's token "
				"(sparkctl leave; sparkctl join HEAD --token T)",
				"%s dropped %ld discovery frames with a bad HMAC%s%s%s%s%s: the node "
				"cabled there holds another cluster secret",
				TL(c, t), bad, who ? " from " : "", who ? who : "", mac ? " (" : "",
				mac ? mac : "", mac ? ")" : "");
		}
		json_t *fg = json_object_get(c->t[t].j, "foreign");
		if (json_is_object(fg)) {
			const char *mac = json_string_value(json_object_get(fg, "mac"));
			const char *tool = json_string_value(json_object_get(fg, "tool"));
			bool nv = tool && strcmp(tool, "nvidia_topo_discover") == 0;
			finding(c, "foreign_discovery", "info", json_pack("[o]", end_twin(c, t)),
				nv ? "NVIDIA's script rewrites netplan on the machine it runs on: there, "
				     "check /etc/netplan/ (40-cx7.yaml) and remove what it configured for "
				     "these netdevs, or sparkctl's plan and its plan fight"
				   : "find the tool on the machine with that MAC; if it configures the "
				     "fabric, keep it from fighting sparkctl's plan",
				"%s hears %ld discovery frame(s) (EtherType 0x88B5) of another tool%s from "
				"%s%s",
				TL(c, t), jint(json_object_get(fg, "frames")),
				nv ? ", NVIDIA's detection script (TOPO_DISCOVER_2NODE_V2)," : "",
				mac ? mac : "an unknown MAC", nv ? "" : "; sparkd ignores them");
		}
		if (other > 0) {
			json_t *ids = json_object_get(c->t[t].j, "other_clusters");
			const char *first = json_string_value(json_array_get(ids, 0));
			finding(c, "other_cluster_frames", "info", json_pack("[o]", end_twin(c, t)),
				"nothing to do; give each cluster its own switch or VLAN to keep them apart",
				"%s hears %ld frames of another cluster%s%s on the same wire; they are ignored",
				TL(c, t), other, first ? " " : "", first ? first : "");
		}
	}
}

static void node_isolated(struct ctx *c)
{
	/* With nothing cabled the class is unknown: --expect says what was meant. */
	const char *cls = strcmp(c->cls, "unknown") ? c->cls : c->o->expect ? c->o->expect : "";
	for (int n = 0; n < c->nn; n++) {
		bool linked = false, any_carrier = false, any_twin = false;
		long bad = 0;
		for (int i = 0; i < c->n[n].np; i++) {
			int p = c->n[n].port[i];
			linked |= port_linked(c, p);
			for (int k = 0; k < c->p[p].ntw; k++) {
				int t = c->p[p].tw[k];
				any_twin = true;
				any_carrier |= c->t[t].carrier == 1;
				bad += jint(json_object_get(json_object_get(c->t[t].j, "dropped"), "bad_hmac"));
			}
		}
		if (linked || c->nn < 2)
			continue;
		const char *fix;
		if (!any_twin)
			fix = S(c, "run `sparkctl discover` on %s and set fabric.interfaces or fabric.ports in "
				   "its sparkd.yaml", NN(c, n));
		else if (bad > 0)
			fix = S(c, "re-join %s with this cluster's token: it drops frames with a bad HMAC",
				NN(c, n));
		else if (any_carrier)
			fix = S(c, "check that sparkd runs on %s (`sparkctl status`) and that its fabric.ports "
				   "name these netdevs", NN(c, n));
		else if (strcmp(cls, "switch") == 0)
			fix = S(c, "cable %s port %s to the switch", NN(c, n),
				c->n[n].np ? PN(c, c->n[n].port[0]) : "0");
		else if (strcmp(cls, "ring") == 0)
			fix = S(c, "cable %s port 0 to port 1 of the next node and its port 1 to port 0 of "
				   "the previous node", NN(c, n));
		else
			fix = S(c, "plug %s's fabric cable (see docs/topology.md for where it goes)",
				NN(c, n));
		const char *why = !any_twin       ? "reports no fabric netdev"
				  : bad > 0       ? "hears only frames with a bad HMAC and no node hears it"
				  : any_carrier   ? "has link but hears nothing and no node hears it"
						  : "has no fabric link up (no carrier on any fabric netdev)";
		finding(c, "node_isolated", "fail", json_pack("[o]", end_node(c, n)), fix, "%s %s",
			NN(c, n), why);
	}
}

static void self_cables(struct ctx *c)
{
	for (int p = 0; p < c->np; p++) {
		if (c->comp_size[c->p[p].comp] != 2)
			continue;
		int q = other_port_in_comp(c, p);
		if (q < p || c->p[q].node != c->p[p].node)
			continue;
		finding(c, "cable_to_self", "fail", json_pack("[o, o]", end_port(c, p), end_port(c, q)),
			S(c, "move one end of that cable from %s to the next node", NN(c, c->p[p].node)),
			"%s is cabled to port %s of the same node", PL(c, p), PN(c, q));
		json_array_append_new(c->cables,
				      json_pack("{s:s, s:o, s:o, s:b, s:i, s:b, s:[]}", "kind", "self",
						"a", end_port(c, p), "b", end_port(c, q), "same_port",
						0, "twins_ok", 0, "mtu_ok", 1, "twins"));
	}
}

/* The fix for a silent twin whose link is down: name the end whose netdev
 * is administratively down (both when both are), else the end without
 * carrier when only one reports none, else say that it cannot tell. NULL
 * when the link is up on both ends (not a link problem). tb may be -1. */
static const char *down_fix(struct ctx *c, int ta, int tb, const char **why)
{
	bool da = c->t[ta].admin == 0, db = tb >= 0 && c->t[tb].admin == 0;
	bool ca = c->t[ta].carrier == 0, cb = tb >= 0 && c->t[tb].carrier == 0;
	const char *na = c->t[ta].netdev, *nb = tb >= 0 ? c->t[tb].netdev : "";
	const char *ma = NN(c, c->p[c->t[ta].port].node);
	const char *mb = tb >= 0 ? NN(c, c->p[c->t[tb].port].node) : "";
	*why = "";
	if (da && db) {
		*why = S(c, " (%s is down on %s and %s on %s)", na, ma, nb, mb);
		return S(c, "bring %s up on %s and %s up on %s (`ip link set NAME up`; netplan must "
			    "list them)", na, ma, nb, mb);
	}
	if (da || db) {
		int t = da ? ta : tb;
		const char *n = NN(c, c->p[c->t[t].port].node);
		*why = S(c, " (%s is administratively down on %s)", c->t[t].netdev, n);
		return S(c, "bring %s up on %s (`ip link set %s up`; netplan must list it)",
			 c->t[t].netdev, n, c->t[t].netdev);
	}
	if (!ca && !cb)
		return NULL;
	bool known = c->t[ta].admin == 1 && (tb < 0 || c->t[tb].admin == 1);
	if (ca != cb && !known) {
		int t = ca ? ta : tb;
		const char *n = NN(c, c->p[c->t[t].port].node);
		*why = S(c, " (no link on %s %s)", n, c->t[t].netdev);
		return S(c, "bring %s up on %s (`ip link set %s up`; netplan must list it)",
			 c->t[t].netdev, n, c->t[t].netdev);
	}
	if (known) {
		*why = " (no link although both ends are up)";
		return S(c, "both ends are up but have no link: check the cable and transceivers of "
			    "%s port %s (the other twin of a port shares the cable, so also check the "
			    "NIC's firmware and `ethtool %s`)", ma, PN(c, c->t[ta].port), na);
	}
	*why = " (link down on both ends)";
	if (tb < 0)
		return S(c, "run `ip link show %s` on %s and bring it up if it lacks the UP flag", na, ma);
	return S(c, "sparkctl cannot tell which end is down: run `ip link show %s` on %s and `ip link "
		    "show %s` on %s, and `ip link set NAME up` on the one without the UP flag (netplan "
		    "must list it)", na, ma, nb, mb);
}

/* Twins and MTU of one direct cable, a = p, b = q. Returns the cable object. */
static json_t *direct_cable(struct ctx *c, int p, int q)
{
	json_t *twins = json_array();
	int ok_count = 0;
	bool mtu_ok = true;
	int nt = c->p[p].ntw > c->p[q].ntw ? c->p[p].ntw : c->p[q].ntw;
	char cab[200];
	snprintf(cab, sizeof cab, "%s <-> %s", PL(c, p), PL(c, q));
	for (int i = 0; i < nt; i++) {
		int ta = i < c->p[p].ntw ? c->p[p].tw[i] : -1;
		int tb = i < c->p[q].ntw ? c->p[q].tw[i] : -1;
		bool oka = ta >= 0 && twin_hears_port(c, ta, q) && port_hears_twin(c, q, ta);
		bool okb = tb >= 0 && twin_hears_port(c, tb, p) && port_hears_twin(c, p, tb);
		bool ok = oka && okb;
		ok_count += ok;
		json_array_append_new(twins, json_pack("{s:i, s:o, s:o, s:b}", "twin", i, "a",
						       ta >= 0 ? twin_json(c, ta) : json_null(), "b",
						       tb >= 0 ? twin_json(c, tb) : json_null(), "ok", ok));
		if (ta >= 0 && tb >= 0) {
			long ma = twin_mtu(c, ta), mb = twin_mtu(c, tb);
			if (ma > 0 && mb > 0 && ma != mb) {
				mtu_ok = false;
				/* Put the odd end back to the cluster's MTU (fabric.mtu, else
				 * the one most twins use); neither end has it: both move. */
				long want = c->cluster_mtu > 0 ? c->cluster_mtu : ma > mb ? ma : mb;
				const char *fix;
				if (ma != want && mb != want)
					fix = S(c, "set the MTU of %s and %s to %ld (netplan `mtu: %ld`), the "
						   "cluster's MTU%s",
						TL(c, ta), TL(c, tb), want, want, c->o->mtu > 0 ? " (fabric.mtu)" : "");
				else
					fix = S(c, "set the MTU of %s to %ld (netplan `mtu: %ld`) like its "
						   "other end: the cluster's MTU%s",
						TL(c, ma != want ? ta : tb), want, want,
						c->o->mtu > 0 ? " (fabric.mtu)" : "");
				finding(c, "mtu_mismatch", "fail",
					json_pack("[o, o]", end_twin(c, ta), end_twin(c, tb)), fix,
					"MTU differs across cable %s: %s has %ld, %s has %ld", cab, TL(c, ta),
					ma, TL(c, tb), mb);
			}
		}
	}
	bool same = c->p[p].rank == c->p[q].rank;
	json_t *cable = json_pack("{s:s, s:o, s:o, s:b, s:i, s:b, s:o}", "kind", "direct", "a",
				  end_port(c, p), "b", end_port(c, q), "same_port", same, "twins_ok",
				  ok_count, "mtu_ok", mtu_ok, "twins", twins);
	if (ok_count == 0) {
		int from = c->ph[q][p] ? p : q, to = from == p ? q : p; /* to hears from */
		if (c->ph[p][q] && c->ph[q][p])
			finding(c, "cable_one_way", "fail",
				json_pack("[o, o]", end_port(c, p), end_port(c, q)),
				"check both ends' fabric.ports list every twin netdev and that sparkd runs",
				"no twin of cable %s exchanges frames both ways", cab);
		else
			finding(c, "cable_one_way", "fail",
				json_pack("[o, o]", end_port(c, p), end_port(c, q)),
				S(c, "check that %s sends on port %s (l2disc tx_errors) and that %s accepts "
				     "its frames (l2disc dropped counters)", NN(c, c->p[to].node), PN(c, to),
				  NN(c, c->p[from].node)),
				"%s hears %s but %s hears nothing back on that cable", PL(c, to),
				PL(c, from), PL(c, from));
		return cable;
	}
	for (int i = 0; i < nt; i++) {
		int ta = i < c->p[p].ntw ? c->p[p].tw[i] : -1;
		int tb = i < c->p[q].ntw ? c->p[q].tw[i] : -1;
		if (json_is_true(json_object_get(json_array_get(twins, (size_t)i), "ok")))
			continue;
		if (ta < 0 || tb < 0) {
			int have = ta >= 0 ? ta : tb;
			int lack = ta >= 0 ? q : p;
			finding(c, "twin_silent", "warn", json_pack("[o]", end_twin(c, have)),
				S(c, "check discovery on %s: port %s should show two twin netdevs",
				  NN(c, c->p[lack].node), PN(c, lack)),
				"twin %d of cable %s exists only on %s (%s): half bandwidth", i, cab,
				NN(c, c->p[c->t[have].port].node), c->t[have].netdev);
			continue;
		}
		const char *why = "";
		const char *fix = down_fix(c, ta, tb, &why);
		if (!fix)
			fix = S(c, "check that sparkd on both nodes lists %s and %s in fabric.ports",
				c->t[ta].netdev, c->t[tb].netdev);
		finding(c, "twin_silent", "warn", json_pack("[o, o]", end_twin(c, ta), end_twin(c, tb)),
			fix, "twin %d of cable %s (%s, %s) carries no discovery frames%s: half bandwidth",
			i, cab, TL(c, ta), TL(c, tb), why);
	}
	return cable;
}

/* ---------- pair ---------- */

struct dcable {
	int p, q; /* ports, distinct nodes */
};

static int direct_cables(struct ctx *c, struct dcable *out)
{
	int k = 0;
	for (int p = 0; p < c->np; p++) {
		if (c->comp_size[c->p[p].comp] != 2)
			continue;
		int q = other_port_in_comp(c, p);
		if (q < p || c->p[q].node == c->p[p].node)
			continue;
		out[k].p = p;
		out[k].q = q;
		k++;
	}
	return k;
}

static void do_pair(struct ctx *c, struct dcable *dc, int ndc, json_t *v)
{
	c->cls = "pair";
	c->any_to_any = true;
	for (int i = 0; i < ndc; i++)
		json_array_append_new(c->cables, direct_cable(c, dc[i].p, dc[i].q));
	if (ndc >= 2) {
		json_t *ends = json_array();
		for (int i = 1; i < ndc; i++) {
			json_array_append_new(ends, end_port(c, dc[i].p));
			json_array_append_new(ends, end_port(c, dc[i].q));
		}
		finding(c, "pair_extra_cable", "info", ends,
			"leave it or unplug it: one 200G port per node carries a pair's traffic",
			"%d cables join %s and %s; the second (%s <-> %s) adds nothing", ndc, NN(c, 0),
			NN(c, 1), PL(c, dc[1].p), PL(c, dc[1].q));
	}
	if (c->p[dc[0].p].rank != c->p[dc[0].q].rank)
		finding(c, "pair_ports_differ", "info",
			json_pack("[o, o]", end_port(c, dc[0].p), end_port(c, dc[0].q)),
			"optional: use the same port on both nodes (tools that copy one node's "
			"interface names to the other expect it); sparkctl sets each node's own",
			"the cable joins %s to %s: different ports on the two ends", PL(c, dc[0].p),
			PL(c, dc[0].q));
	json_object_set_new(v, "ring_order", json_pack("[s, s]", NN(c, 0), NN(c, 1)));
}

/* ---------- ring ---------- */

struct walk {
	int k;             /* nodes */
	int node[MAXN];
	int entry[MAXN];   /* port through which the walk enters node[i], -1 none */
	int exitp[MAXN];   /* port through which it leaves, -1 none */
	bool cycle;
};

static int cable_at(struct dcable *dc, int ndc, int port)
{
	for (int i = 0; i < ndc; i++)
		if (dc[i].p == port || dc[i].q == port)
			return i;
	return -1;
}

static int cable_other(struct dcable *d, int port) { return d->p == port ? d->q : d->p; }

static int fwd_count(struct ctx *c, const struct walk *w)
{
	int f = 0;
	for (int i = 0; i < w->k; i++)
		f += (w->exitp[i] < 0 || c->p[w->exitp[i]].rank == 0) &&
		     (w->entry[i] < 0 || c->p[w->entry[i]].rank == 1);
	return f;
}

static bool is_fwd(struct ctx *c, const struct walk *w, int i)
{
	return (w->exitp[i] < 0 || c->p[w->exitp[i]].rank == 0) &&
	       (w->entry[i] < 0 || c->p[w->entry[i]].rank == 1);
}

static void reverse_walk(struct walk *w)
{
	struct walk r = *w;
	for (int i = 0; i < w->k; i++) {
		/* A cycle keeps its first node; a path starts from its other end. */
		int j = w->cycle ? (w->k - i) % w->k : w->k - 1 - i;
		r.node[i] = w->node[j];
		r.entry[i] = w->exitp[j];
		r.exitp[i] = w->entry[j];
	}
	*w = r;
}

/* Walk the component of node s. deg[] = direct cables per node. */
static void walk_component(struct ctx *c, struct dcable *dc, int ndc, const int *deg, int s,
			   struct walk *w)
{
	memset(w, 0, sizeof *w);
	/* A path starts at an end (the component's first end by name), a cycle
	 * at its first node by name (s: nodes are visited in name order). */
	int start = s, best = -1;
	int seen[MAXN] = {0}, stack[MAXN], sp = 0;
	stack[sp++] = s;
	seen[s] = 1;
	while (sp) {
		int n = stack[--sp];
		if (deg[n] <= 1 && (best < 0 || n < best))
			best = n;
		for (int i = 0; i < c->n[n].np; i++) {
			int ci = cable_at(dc, ndc, c->n[n].port[i]);
			if (ci < 0)
				continue;
			int m = c->p[cable_other(&dc[ci], c->n[n].port[i])].node;
			if (!seen[m]) {
				seen[m] = 1;
				stack[sp++] = m;
			}
		}
	}
	if (best >= 0)
		start = best;
	w->cycle = deg[start] == 2;
	int cur = start, came = -1; /* cable index we arrived by */
	int entry = -1;
	for (;;) {
		w->node[w->k] = cur;
		w->entry[w->k] = entry;
		w->exitp[w->k] = -1;
		int next_cab = -1, exit_port = -1;
		/* Leave by the lowest-ranked port whose cable is not the one we came by. */
		for (int i = 0; i < c->n[cur].np; i++) {
			int pt = c->n[cur].port[i];
			int ci = cable_at(dc, ndc, pt);
			if (ci >= 0 && ci != came) {
				next_cab = ci;
				exit_port = pt;
				break;
			}
		}
		w->k++;
		if (next_cab < 0 || w->k >= MAXN)
			break;
		int arrive = cable_other(&dc[next_cab], exit_port);
		int nxt = c->p[arrive].node;
		if (nxt == start && w->cycle) {
			w->exitp[w->k - 1] = exit_port;
			w->entry[0] = arrive;
			break;
		}
		w->exitp[w->k - 1] = exit_port;
		came = next_cab;
		entry = arrive;
		cur = nxt;
	}
	/* Keep the direction with the most nodes cabled port 1 in, port 0 out. */
	struct walk r = *w;
	reverse_walk(&r);
	if (fwd_count(c, &r) > fwd_count(c, w))
		*w = r;
}

static void walk_names(struct ctx *c, const struct walk *w, char *buf, size_t len)
{
	size_t o = 0;
	buf[0] = '\0';
	for (int i = 0; i < w->k && o < len; i++)
		o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? " - " : "", NN(c, w->node[i]));
}

static void append(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t len, const char *fmt, ...)
{
	size_t o = strlen(buf);
	if (o >= len)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf + o, len - o, fmt, ap);
	va_end(ap);
}

/* A chain end's free port with link (a twin with carrier) on which no
 * member is heard: something is cabled there that is not in the cluster. */
static bool unjoined_end(struct ctx *c, int p)
{
	if (port_linked(c, p))
		return false;
	/* a node that hears nothing at all is node_isolated, not a neighbour of
	 * a machine to join */
	int n = c->p[p].node;
	bool other_linked = false;
	for (int i = 0; i < c->n[n].np; i++)
		other_linked |= port_linked(c, c->n[n].port[i]);
	if (!other_linked)
		return false;
	bool car = false;
	for (int i = 0; i < c->p[p].ntw; i++)
		car |= c->t[c->p[p].tw[i]].carrier == 1;
	return car;
}

/* A source MAC that port p saw in frames it could not use, if any. */
static const char *heard_mac(struct ctx *c, int p)
{
	for (int i = 0; i < c->p[p].ntw; i++) {
		json_t *tj = c->t[c->p[p].tw[i]].j;
		const char *m = json_string_value(json_object_get(json_object_get(tj, "bad_hmac_from"), "mac"));
		if (!m)
			m = json_string_value(json_object_get(json_object_get(tj, "foreign"), "mac"));
		if (m)
			return m;
	}
	return NULL;
}

/* Same-port cables: one finding per run of "backward" nodes. */
static void same_port_findings(struct ctx *c, const struct walk *w)
{
	int k = w->k;
	if (k < 2)
		return;
	bool done[MAXN] = {false};
	for (int i0 = 0; i0 < k; i0++) {
		if (done[i0] || is_fwd(c, w, i0))
			continue;
		/* Find the start of this run (walk back in a cycle). */
		int s = i0;
		if (w->cycle)
			for (int n = 0; n < k && !is_fwd(c, w, (s - 1 + k) % k); n++)
				s = (s - 1 + k) % k;
		int run[MAXN], rn = 0;
		for (int i = s; rn < k; i = w->cycle ? (i + 1) % k : i + 1) {
			if (i >= k || is_fwd(c, w, i))
				break;
			run[rn++] = i;
			done[i] = true;
		}
		if (rn == k)
			break; /* cannot happen: the walk's direction has the most forward nodes */
		char cabs[512] = "", fix[2048] = "on ";
		json_t *ends = json_array();
		int first = run[0], last = run[rn - 1];
		int ncab = 0;
		if (w->entry[first] >= 0) {
			int prev = w->cycle ? (first - 1 + k) % k : first - 1;
			append(cabs, sizeof cabs, "%s <-> %s", PL(c, w->exitp[prev]), PL(c, w->entry[first]));
			json_array_append_new(ends, end_port(c, w->exitp[prev]));
			json_array_append_new(ends, end_port(c, w->entry[first]));
			ncab++;
		}
		if (w->exitp[last] >= 0) {
			int nxt = w->cycle ? (last + 1) % k : last + 1;
			append(cabs, sizeof cabs, "%s%s <-> %s", ncab ? " and " : "", PL(c, w->exitp[last]),
			       PL(c, w->entry[nxt]));
			json_array_append_new(ends, end_port(c, w->exitp[last]));
			json_array_append_new(ends, end_port(c, w->entry[nxt]));
			ncab++;
		}
		for (int r = 0; r < rn; r++) {
			int i = run[r], n = w->node[i];
			bool two = w->entry[i] >= 0 && w->exitp[i] >= 0;
			int used = w->entry[i] >= 0 ? w->entry[i] : w->exitp[i];
			int other = port_by_rank(c, n, 1 - c->p[used].rank);
			if (two)
				append(fix, sizeof fix, "%s%s swap the cables of port %s and port %s",
				       r ? "; on " : "", NN(c, n), PN(c, port_by_rank(c, n, 0)),
				       PN(c, port_by_rank(c, n, 1)));
			else
				append(fix, sizeof fix, "%s%s move the cable from port %s to port %s",
				       r ? "; on " : "", NN(c, n), PN(c, used), other >= 0 ? PN(c, other) : "1");
		}
		finding(c, "same_port_cable", "fail", ends, fix,
			"cable%s %s join%s the same port on both ends; a ring needs port 0 of each node "
			"cabled to port 1 of the next",
			ncab > 1 ? "s" : "", cabs, ncab > 1 ? "" : "s");
	}
}

static void do_ring(struct ctx *c, struct dcable *dc, int ndc, json_t *v)
{
	c->cls = "ring";
	c->any_to_any = false;
	int deg[MAXN] = {0};
	for (int i = 0; i < ndc; i++) {
		deg[c->p[dc[i].p].node]++;
		deg[c->p[dc[i].q].node]++;
	}
	for (int n = 0; n < c->nn; n++)
		if (deg[n] > 2) {
			finding(c, "ring_shape", "fail", json_pack("[o]", end_node(c, n)),
				S(c, "keep two cables on %s: port 0 to the next node, port 1 to the previous",
				  NN(c, n)),
				"%s has %d direct cables; a ring node has exactly two", NN(c, n), deg[n]);
			for (int i = 0; i < ndc; i++)
				json_array_append_new(c->cables, direct_cable(c, dc[i].p, dc[i].q));
			return;
		}
	struct walk w[MAXN];
	int nw = 0;
	bool inwalk[MAXN] = {false};
	for (int n = 0; n < c->nn; n++) {
		if (inwalk[n])
			continue;
		walk_component(c, dc, ndc, deg, n, &w[nw]);
		for (int i = 0; i < w[nw].k; i++)
			inwalk[w[nw].node[i]] = true;
		nw++;
	}
	/* Cables in walk order, "a" = the end the walk leaves by. */
	for (int i = 0; i < nw; i++)
		for (int j = 0; j < w[i].k; j++)
			if (w[i].exitp[j] >= 0) {
				int nx = (j + 1) % w[i].k;
				json_array_append_new(c->cables,
						      direct_cable(c, w[i].exitp[j], w[i].entry[nx]));
			}
	for (int i = 0; i < nw; i++)
		same_port_findings(c, &w[i]);

	int ncyc = 0, nchain = 0;
	for (int i = 0; i < nw; i++) {
		if (w[i].cycle)
			ncyc++;
		else
			nchain++;
	}
	if (nw == 1 && w[0].cycle) {
		/* Three nodes in one cycle: every pair has its own cable. */
		if (w[0].k == 3) {
			c->mesh = true;
			c->any_to_any = true;
		}
		json_t *ro = json_array();
		for (int i = 0; i < w[0].k; i++)
			json_array_append_new(ro, json_string(NN(c, w[0].node[i])));
		json_object_set_new(v, "ring_order", ro);
		return;
	}
	/* Plan: open every cycle at its closing cable, chain the pieces in order. */
	json_t *proposed = json_array();
	char groups[2048] = "", unplug[2048] = "", connect[3072] = "";
	json_t *ends = json_array();
	int nun = 0;
	for (int i = 0; i < nw; i++) {
		char names[2048];
		walk_names(c, &w[i], names, sizeof names);
		append(groups, sizeof groups, "%s(%s)", i ? ", " : "", names);
		for (int j = 0; j < w[i].k; j++)
			json_array_append_new(proposed, json_string(NN(c, w[i].node[j])));
		if (w[i].cycle) {
			int last = w[i].k - 1;
			append(unplug, sizeof unplug, "%s%s <-> %s", nun++ ? " and " : "",
			       PL(c, w[i].exitp[last]), PL(c, w[i].entry[0]));
			json_array_append_new(ends, end_port(c, w[i].exitp[last]));
			json_array_append_new(ends, end_port(c, w[i].entry[0]));
		}
	}
	json_object_set_new(v, "proposed_ring_order", proposed);
	int explained = 0;
	for (int i = 0; i < nw; i++) {
		int from = w[i].node[w[i].k - 1];
		int to = w[(i + 1) % nw].node[0];
		int fp = port_by_rank(c, from, 0), tp = port_by_rank(c, to, 1);
		if (fp < 0 || tp < 0)
			continue;
		const char *conn = S(c, "%s port %s to %s port %s", NN(c, from), PN(c, fp), NN(c, to),
				     PN(c, tp));
		if (ncyc == 0) {
			/* Chains only: each join is one missing cable, unless the chain's
			 * ends have link and hear no member: a machine that has not
			 * joined is cabled there (sparkd not running, or not joined). */
			bool ua = unjoined_end(c, fp), ub = unjoined_end(c, tp);
			if (ua || ub) {
				char who[160] = "";
				const char *mac = heard_mac(c, ua ? fp : tp);
				if (!mac && ua && ub)
					mac = heard_mac(c, tp);
				if (mac)
					snprintf(who, sizeof who, " (MAC %s in the frames it sent)", mac);
				if (ua && ub) {
					explained++;
					finding(c, "unjoined_node", "warn",
						json_pack("[o, o]", end_port(c, fp), end_port(c, tp)),
						"join that machine: start sparkd there (systemctl start sparkd), "
						"then `sparkctl join HEAD --token T` with a token from `sparkctl "
						"token create`; the cabling is right",
						"%s and %s have link but hear no node of the cluster: a machine "
						"that has not joined%s is cabled between them, %s %s (or a member "
						"whose sparkd does not run discovery on that port: check its "
						"fabric.ports)",
						PL(c, fp), PL(c, tp), who,
						nw == 1 ? "closing the ring" : "joining the chains", groups);
				} else {
					int u = ua ? fp : tp, m = ua ? tp : fp;
					finding(c, "unjoined_node", "fail",
						json_pack("[o, o]", end_port(c, fp), end_port(c, tp)),
						S(c, "join the machine on %s (start sparkd there, then `sparkctl join "
						     "HEAD --token T`) and cable its other port to %s", PL(c, u),
						  PL(c, m)),
						"%s has link but hears no node of the cluster: a machine that has "
						"not joined%s is cabled there; %s has no link",
						PL(c, u), who, PL(c, m));
				}
				continue;
			}
			const char *msg = nw == 1 ? S(c, "the ring is a chain %s: the cable closing it is "
							 "missing", groups)
						  : S(c, "the nodes form %d chains %s: a cable is missing "
							 "between %s and %s", nw, groups, NN(c, from),
						      NN(c, to));
			finding(c, "missing_cable", "fail",
				json_pack("[o, o]", end_port(c, fp), end_port(c, tp)), S(c, "connect %s", conn),
				"%s", msg);
		} else {
			append(connect, sizeof connect, "%s%s", i ? " and " : "", conn);
			json_array_append_new(ends, end_port(c, fp));
			json_array_append_new(ends, end_port(c, tp));
		}
	}
	if (ncyc == 0) {
		/* every gap is a machine waiting to join: nothing to recable */
		if (explained == nw)
			json_object_del(v, "proposed_ring_order");
		json_decref(ends);
		return;
	}
	char fix[6144];
	snprintf(fix, sizeof fix, "unplug %s; connect %s", unplug, connect);
	if (nchain == 0)
		finding(c, "two_rings", "fail", ends, fix,
			"the cables form %d separate rings %s instead of one ring through every node", nw,
			groups);
	else
		finding(c, "ring_missing_nodes", "fail", ends, fix,
			"the ring does not pass through every node: %s", groups);
}

/* ---------- switch ---------- */

static void do_switch(struct ctx *c, struct dcable *dc, int ndc, json_t *v)
{
	c->cls = "switch";
	int dom[NPORT], nd = 0;
	for (int p = 0; p < c->np; p++)
		if (c->p[p].comp == p && c->comp_size[p] >= 3)
			dom[nd++] = p;
	int dnodes[NPORT] = {0};
	int main_d = 0;
	for (int d = 0; d < nd; d++) {
		bool has[MAXN] = {false};
		for (int p = 0; p < c->np; p++)
			if (c->p[p].comp == dom[d])
				has[c->p[p].node] = true;
		for (int n = 0; n < c->nn; n++)
			dnodes[d] += has[n];
		if (dnodes[d] > dnodes[main_d])
			main_d = d;
	}
	json_t *doms = json_array();
	bool on_main[MAXN] = {false};
	for (int d = 0; d < nd; d++) {
		json_t *names = json_array(), *ports = json_array();
		bool has[MAXN] = {false};
		for (int p = 0; p < c->np; p++)
			if (c->p[p].comp == dom[d]) {
				json_array_append_new(ports, end_port(c, p));
				if (!has[c->p[p].node])
					json_array_append_new(names, json_string(NN(c, c->p[p].node)));
				has[c->p[p].node] = true;
				if (d == main_d)
					on_main[c->p[p].node] = true;
			}
		json_array_append_new(doms, json_pack("{s:s, s:o, s:o}", "id", S(c, "l2-%d", d + 1),
						      "nodes", names, "ports", ports));
	}
	json_object_set_new(v, "l2_domains", doms);
	if (nd >= 2) {
		char groups[2048] = "";
		json_t *ends = json_array();
		for (size_t d = 0; d < json_array_size(doms); d++) {
			json_t *names = json_object_get(json_array_get(doms, d), "nodes");
			append(groups, sizeof groups, "%s(", d ? ", " : "");
			for (size_t i = 0; i < json_array_size(names); i++)
				append(groups, sizeof groups, "%s%s", i ? ", " : "",
				       json_string_value(json_array_get(names, i)));
			append(groups, sizeof groups, ")");
			if ((int)d != main_d)
				json_array_extend(ends, json_object_get(json_array_get(doms, d), "ports"));
		}
		finding(c, "l2_split", "fail", ends,
			"put every node's fabric port on one switch and one VLAN (or link the switches)",
			"the fabric ports form %d separate L2 domains %s; a switched cluster needs one", nd,
			groups);
	}
	for (int i = 0; i < ndc; i++) {
		int p = dc[i].p, q = dc[i].q;
		int np = c->p[p].node, nq = c->p[q].node;
		json_array_append_new(c->cables, direct_cable(c, p, q));
		if (on_main[np] && on_main[nq]) {
			finding(c, "mixed_switch_direct", "warn",
				json_pack("[o, o]", end_port(c, p), end_port(c, q)),
				S(c, "unplug the direct cable %s <-> %s (or cable both ports to the switch)",
				  PL(c, p), PL(c, q)),
				"direct cable %s <-> %s alongside the switch: traffic between %s and %s can take "
				"either path",
				PL(c, p), PL(c, q), NN(c, np), NN(c, nq));
		} else {
			int off = on_main[np] ? q : p;
			int offn = c->p[off].node;
			finding(c, "mixed_switch_direct", "fail",
				json_pack("[o, o]", end_port(c, p), end_port(c, q)),
				S(c, "cable %s to the switch and unplug the direct cable", PL(c, off)),
				"%s is joined by a direct cable (%s <-> %s), not through the switch: switch and "
				"direct cables are mixed",
				NN(c, offn), PL(c, p), PL(c, q));
		}
	}
	/* Per port on a switch: who it hears, its twins, its MTU. */
	long mtus[NTWIN];
	int nm = 0;
	for (int d = 0; d < nd; d++) {
		for (int p = 0; p < c->np; p++) {
			if (c->p[p].comp != dom[d])
				continue;
			int n = c->p[p].node;
			char missing[2048] = "";
			int nmiss = 0;
			json_t *ends = json_array();
			bool has[MAXN] = {false};
			for (int q = 0; q < c->np; q++)
				if (c->p[q].comp == dom[d] && c->p[q].node != n && c->ph[p][q])
					has[c->p[q].node] = true;
			for (int q = 0; q < c->np; q++) {
				int m = c->p[q].node;
				if (c->p[q].comp != dom[d] || m == n || has[m])
					continue;
				has[m] = true; /* name each node once */
				append(missing, sizeof missing, "%s%s", nmiss++ ? ", " : "", NN(c, m));
				json_array_append_new(ends, end_port(c, q));
			}
			if (nmiss) {
				json_array_insert_new(ends, 0, end_port(c, p));
				finding(c, "switch_partial", "fail", ends,
					"check the switch: every port in the same VLAN, no port isolation, "
					"every port up",
					"%s does not hear %s although they share its L2 domain", PL(c, p),
					missing);
			} else {
				json_decref(ends);
			}
			json_t *twins = json_array();
			int ok_count = 0;
			for (int i = 0; i < c->p[p].ntw; i++) {
				int t = c->p[p].tw[i];
				bool hears = false, heard = false;
				for (int q = 0; q < c->np; q++)
					if (c->p[q].comp == dom[d] && c->p[q].node != n) {
						hears |= twin_hears_port(c, t, q);
						heard |= port_hears_twin(c, q, t);
					}
				bool ok = hears && heard;
				ok_count += ok;
				json_array_append_new(twins, json_pack("{s:i, s:o, s:n, s:b}", "twin", i, "a",
								       twin_json(c, t), "b", "ok", ok));
				if (twin_mtu(c, t) > 0 && d == main_d)
					mtus[nm++] = twin_mtu(c, t);
			}
			for (int i = 0; ok_count > 0 && i < c->p[p].ntw; i++) {
				int t = c->p[p].tw[i];
				if (json_is_true(json_object_get(json_array_get(twins, (size_t)i), "ok")))
					continue;
				const char *why = "";
				const char *fix = down_fix(c, t, -1, &why);
				finding(c, "twin_silent", "warn", json_pack("[o]", end_twin(c, t)),
					fix ? fix
					    : S(c, "check that sparkd on %s lists %s in fabric.ports", NN(c, n),
						c->t[t].netdev),
					"twin %d of %s (%s) exchanges no frames on the switch%s while its "
					"twin does: half bandwidth",
					i, PL(c, p), c->t[t].netdev, why);
			}
			json_array_append_new(
			    c->cables, json_pack("{s:s, s:o, s:{s:s}, s:b, s:i, s:b, s:o}", "kind", "switch",
						 "a", end_port(c, p), "b", "switch", S(c, "l2-%d", d + 1),
						 "same_port", 0, "twins_ok", ok_count, "mtu_ok", 1, "twins",
						 twins));
		}
	}
	/* MTU: the most common value on the main domain (the larger on a tie). */
	long best = 0;
	int bestc = 0;
	for (int i = 0; i < nm; i++) {
		int cnt = 0;
		for (int j = 0; j < nm; j++)
			cnt += mtus[j] == mtus[i];
		if (cnt > bestc || (cnt == bestc && mtus[i] > best)) {
			best = mtus[i];
			bestc = cnt;
		}
	}
	if (c->o->mtu > 0)
		best = c->o->mtu; /* the cluster's fabric.mtu */
	if (nd > 0 && best > 0) {
		size_t ci;
		json_t *cab;
		json_array_foreach(c->cables, ci, cab) {
			if (strcmp(json_string_value(json_object_get(cab, "kind")), "switch") != 0 ||
			    strcmp(json_string_value(json_object_get(json_object_get(cab, "b"), "switch")),
				   S(c, "l2-%d", main_d + 1)) != 0)
				continue;
			const char *node = json_string_value(json_object_get(json_object_get(cab, "a"), "node"));
			const char *port = json_string_value(json_object_get(json_object_get(cab, "a"), "port"));
			size_t ti;
			json_t *tw;
			json_array_foreach(json_object_get(cab, "twins"), ti, tw) {
				json_t *a = json_object_get(tw, "a");
				long m = jint(json_object_get(a, "mtu"));
				if (m <= 0 || m == best)
					continue;
				const char *nd_ = json_string_value(json_object_get(a, "netdev"));
				json_object_set_new(cab, "mtu_ok", json_false());
				finding(c, "mtu_mismatch", "fail",
					json_pack("[{s:s, s:s, s:s}]", "node", node, "port", port, "netdev", nd_),
					S(c, "set the MTU of %s %s to %ld (netplan `mtu: %ld`); switch ports must "
					     "allow it too", node, nd_, best, best),
					"%s %s has MTU %ld; the other ports on this switch use %ld", node, nd_, m,
					best);
			}
		}
	}
	/* Ports: two on the switch, or not the same port everywhere. */
	const char *common = NULL;
	bool differ = false;
	for (int n = 0; n < c->nn; n++) {
		int cnt = 0, first = -1;
		for (int i = 0; i < c->n[n].np; i++) {
			int p = c->n[n].port[i];
			if (nd && c->p[p].comp == dom[main_d]) {
				cnt++;
				if (first < 0)
					first = p;
			}
		}
		if (cnt >= 2)
			finding(c, "switch_two_ports", "info", json_pack("[o]", end_node(c, n)),
				"optional: one cable per node is enough; sparkctl uses both if both are cabled",
				"%s has both fabric ports on the switch", NN(c, n));
		if (first >= 0) {
			if (!common)
				common = PN(c, first);
			else if (strcmp(common, PN(c, first)) != 0)
				differ = true;
		}
	}
	if (differ) {
		char who[2048] = "";
		json_t *ends = json_array();
		for (int n = 0; n < c->nn; n++)
			for (int i = 0; i < c->n[n].np; i++) {
				int p = c->n[n].port[i];
				if (c->p[p].comp == dom[main_d]) {
					append(who, sizeof who, "%s%s", who[0] ? ", " : "", PL(c, p));
					json_array_append_new(ends, end_port(c, p));
					break;
				}
			}
		finding(c, "switch_ports_differ", "info", ends,
			"optional: use the same port on every node (NVIDIA's scripts expect it); sparkctl "
			"sets each node's own",
			"nodes use different ports to the switch: %s", who);
	}
	bool all_main = nd > 0;
	for (int n = 0; n < c->nn; n++)
		all_main &= on_main[n];
	c->any_to_any = all_main && nd == 1;
}

/* ---------- the cluster's MTU ---------- */

/* fabric.mtu when configured, else the MTU most twins have (the larger on a tie). */
static long cluster_mtu(struct ctx *c)
{
	if (c->o->mtu > 0)
		return c->o->mtu;
	long best = 0;
	int bestc = 0;
	for (int i = 0; i < c->nt; i++) {
		long m = twin_mtu(c, i);
		if (m <= 0)
			continue;
		int cnt = 0;
		for (int j = 0; j < c->nt; j++)
			cnt += twin_mtu(c, j) == m;
		if (cnt > bestc || (cnt == bestc && m > best)) {
			best = m;
			bestc = cnt;
		}
	}
	return best;
}

/* Direct cables whose two ends agree with each other but not with the
 * cluster's MTU: each cable works, the cluster runs at mixed MTUs (a job
 * across them is held to the smallest, and fabric.mtu says otherwise). */
static void mixed_mtu(struct ctx *c)
{
	if (c->cluster_mtu <= 0)
		return;
	char cabs[3072] = "", fix[3072] = "";
	json_t *ends = json_array();
	int n = 0;
	long other = 0;
	size_t i, k;
	json_t *cab, *tw;
	json_array_foreach(c->cables, i, cab) {
		if (strcmp(json_string_value(json_object_get(cab, "kind")), "direct") != 0 ||
		    json_is_false(json_object_get(cab, "mtu_ok")))
			continue;
		long m = 0;
		json_array_foreach(json_object_get(cab, "twins"), k, tw) {
			long x = jint(json_object_get(json_object_get(tw, "a"), "mtu"));
			if (x > 0 && x != c->cluster_mtu)
				m = x;
		}
		if (m == 0)
			continue;
		json_t *a = json_object_get(cab, "a"), *b = json_object_get(cab, "b");
		const char *an = json_string_value(json_object_get(a, "node"));
		const char *ap = json_string_value(json_object_get(a, "port"));
		const char *bn = json_string_value(json_object_get(b, "node"));
		const char *bp = json_string_value(json_object_get(b, "port"));
		append(cabs, sizeof cabs, "%s%s port %s <-> %s port %s (%ld)", n ? ", " : "", an, ap, bn,
		       bp, m);
		append(fix, sizeof fix, "%s%s port %s and %s port %s", n ? ", " : "", an, ap, bn, bp);
		json_array_append_new(ends, json_deep_copy(a));
		json_array_append_new(ends, json_deep_copy(b));
		other = m;
		n++;
	}
	if (n == 0) {
		json_decref(ends);
		return;
	}
	finding(c, "mtu_mixed", "warn", ends,
		S(c, "set the MTU of both twins of %s to %ld (netplan `mtu: %ld`), the cluster's MTU%s; "
		     "or, to run at %ld, set fabric.mtu and every cable to it",
		  fix, c->cluster_mtu, c->cluster_mtu, c->o->mtu > 0 ? " (fabric.mtu)" : "", other),
		"the cluster's cables run at different MTUs: %s, the others at %ld%s; a job across "
		"them is held to the smallest",
		cabs, c->cluster_mtu, c->o->mtu > 0 ? " (fabric.mtu)" : "");
}

/* ---------- verdict ---------- */

static void give_advice(struct ctx *c)
{
	if (strcmp(c->cls, "pair") == 0) {
		advice(c, "pair_any_to_any",
		       "two nodes are always neighbours: ring and one-shot all-reduce both work over the "
		       "one cable");
		advice(c, "use_both_twins",
		       "list both twins of the port (NCCL_IB_HCA) for about 190 Gb/s instead of 95");
	} else if (strcmp(c->cls, "ring") == 0 && c->mesh) {
		advice(c, "ring3_full_mesh",
		       "a 3-node ring is a full mesh: every pair of nodes has its own cable, so ring, "
		       "tree and one-shot all-reduce all run over direct cables (any-to-any)");
		advice(c, "use_both_twins",
		       "list both twins of each port (NCCL_IB_HCA) or bandwidth halves");
	} else if (strcmp(c->cls, "ring") == 0) {
		advice(c, "ring_neighbours_only",
		       "ring all-reduce needs only neighbours (NCCL_ALGO=Ring): tree and one-shot "
		       "algorithms reach non-neighbours and fail");
		advice(c, "ring_no_any_to_any",
		       "one-shot all-reduce and split groups need any-to-any links: use a switch for them");
		advice(c, "use_both_twins",
		       "list both twins of each port (NCCL_IB_HCA) or bandwidth halves");
		if (c->nn >= 8)
			advice(c, "ring_wants_switch",
			       "8 nodes want a switch: a ring all-reduce crosses 7 hops, and latency-bound "
			       "decode all-reduces suffer most");
	} else if (strcmp(c->cls, "switch") == 0) {
		advice(c, "switch_any_to_any",
		       "the switch gives any-to-any links: one-shot all-reduce and split groups work");
		if (c->nn > 4)
			advice(c, "switch_beyond_nvidia",
			       "NVIDIA's own helper stops at 4 nodes through a switch; sparkctl handles up to 8");
		advice(c, "switch_speed",
		       "each switch port should run at 200G: a port at 100G halves that node's bandwidth");
	}
}

int topo_classify(json_t *map, const struct topo_classify_opts *o, json_t **verdict, char *err,
		  size_t errlen)
{
	static const struct topo_classify_opts defo = {0};
	char dummy[8];
	if (!err) {
		err = dummy;
		errlen = sizeof dummy;
	}
	err[0] = '\0';
	if (!verdict)
		return -EINVAL;
	*verdict = NULL;
	if (o && o->expect && strcmp(o->expect, "pair") && strcmp(o->expect, "ring") &&
	    strcmp(o->expect, "switch")) {
		snprintf(err, errlen, "expect must be pair, ring or switch, not '%s'", o->expect);
		return -EINVAL;
	}
	struct ctx *c = calloc(1, sizeof *c);
	if (!c)
		return -ENOMEM;
	c->o = o ? o : &defo;
	c->map = map;
	int r = parse(c, map, err, errlen);
	if (r < 0) {
		free(c);
		return r;
	}
	c->fail = json_array();
	c->warn = json_array();
	c->info = json_array();
	c->cables = json_array();
	c->advice = json_array();
	c->cls = "unknown";
	json_t *v = json_object();

	resolve_heard(c);
	components(c);
	node_drops(c);
	c->cluster_mtu = cluster_mtu(c);
	struct dcable dc[NPORT];
	int ndc = direct_cables(c, dc);
	int nsw = 0;
	for (int p = 0; p < c->np; p++)
		nsw += c->p[p].comp == p && c->comp_size[p] >= 3;

	if (c->nn == 0) {
		finding(c, "no_nodes", "fail", NULL, "join nodes to the cluster (sparkctl join)",
			"the cable map holds no node");
	} else if (c->nn == 1) {
		finding(c, "single_node", "warn", json_pack("[o]", end_node(c, 0)),
			"join a second node (sparkctl join) and cable it",
			"only %s is in the cluster: no fabric to validate", NN(c, 0));
	} else {
		/* The class first: isolated nodes get a fix that fits it. */
		c->cls = nsw > 0 ? "switch" : ndc == 0 ? "unknown" : c->nn == 2 ? "pair" : "ring";
		node_isolated(c);
		self_cables(c);
		if (nsw > 0)
			do_switch(c, dc, ndc, v);
		else if (ndc > 0 && c->nn == 2)
			do_pair(c, dc, ndc, v);
		else if (ndc > 0)
			do_ring(c, dc, ndc, v);
		mixed_mtu(c);
	}
	if (c->nn > 8)
		finding(c, "too_many_nodes", "warn", NULL, "keep 8 nodes or fewer per cluster",
			"%d nodes: sparkctl validates 2 to 8", c->nn);
	/* A pair is a ring of 2 (docs/jobs.md): --expect ring accepts it. */
	bool ring_of_2 = c->o->expect && strcmp(c->o->expect, "ring") == 0 &&
			 strcmp(c->cls, "pair") == 0;
	if (c->o->expect && strcmp(c->o->expect, c->cls) != 0 && !ring_of_2) {
		finding(c, "expect_mismatch", "fail", NULL,
			S(c, "recable as a %s (docs/topology.md), or run with --expect %s", c->o->expect,
			  strcmp(c->cls, "unknown") ? c->cls : c->o->expect),
			"expected a %s, found %s%s (%d nodes)", c->o->expect,
			strcmp(c->cls, "unknown") ? "a " : "", strcmp(c->cls, "unknown") ? c->cls : "no topology",
			c->nn);
	}
	give_advice(c);
	const char *result = json_array_size(c->fail) ? "fail" : json_array_size(c->warn) ? "warn" : "pass";
	json_t *findings = json_array();
	json_array_extend(findings, c->fail);
	json_array_extend(findings, c->warn);
	json_array_extend(findings, c->info);
	json_object_set_new(v, "class", json_string(c->cls));
	json_object_set_new(v, "result", json_string(result));
	json_object_set_new(v, "nodes", json_integer(c->nn));
	json_object_set_new(v, "any_to_any", json_boolean(c->any_to_any));
	json_object_set_new(v, "mesh", json_boolean(c->mesh));
	if (c->cluster_mtu > 0)
		json_object_set_new(v, "cluster_mtu", json_integer(c->cluster_mtu));
	json_object_set_new(v, "cables", c->cables);
	json_object_set_new(v, "findings", findings);
	json_object_set_new(v, "advice", c->advice);
	json_decref(c->fail);
	json_decref(c->warn);
	json_decref(c->info);
	free(c);
	*verdict = v;
	return 0;
}

/* ---------- cable map from per-node data ---------- */

static json_t *find_iface(json_t *snap, const char *netdev)
{
	size_t i;
	json_t *f;
	json_array_foreach(json_object_get(snap, "interfaces"), i, f) {
		const char *nd = json_string_value(json_object_get(f, "netdev"));
		if (nd && strcmp(nd, netdev) == 0)
			return f;
	}
	return NULL;
}

static json_t *map_twin(const char *netdev, json_t *carrier, json_t *admin, json_t *mtu,
		       json_t *iface)
{
	json_t *heard = json_array();
	size_t i;
	json_t *nb;
	json_array_foreach(json_object_get(iface, "neighbours"), i, nb) {
		json_t *h = json_object();
		static const char *const keys[] = {"node_id", "node_name", "port", "twin", "netdev", "mtu"};
		for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
			json_t *x = json_object_get(nb, keys[k]);
			if (x)
				json_object_set(h, keys[k], x);
		}
		json_array_append_new(heard, h);
	}
	if (!json_is_integer(mtu) && iface)
		mtu = json_object_get(iface, "mtu");
	json_t *t = json_pack("{s:s, s:O, s:O, s:O, s:o}", "netdev", netdev,
			      "carrier", json_is_boolean(carrier) ? carrier : json_null(), "admin_up",
			      json_is_boolean(admin) ? admin : json_null(), "mtu",
			      json_is_integer(mtu) ? mtu : json_null(), "heard", heard);
	if (iface) {
		json_t *d = json_object_get(iface, "dropped");
		if (d)
			json_object_set_new(t, "dropped", json_deep_copy(d));
		json_t *oc = json_object_get(iface, "other_clusters");
		if (json_array_size(oc))
			json_object_set_new(t, "other_clusters", json_deep_copy(oc));
		json_t *bf = json_object_get(iface, "bad_hmac_from");
		if (json_is_object(bf))
			json_object_set_new(t, "bad_hmac_from", json_deep_copy(bf));
		json_t *fg = json_object_get(iface, "foreign");
		if (json_is_object(fg))
			json_object_set_new(t, "foreign", json_deep_copy(fg));
	}
	return t;
}

static json_t *map_port(json_t *ports, const char *name)
{
	size_t i;
	json_t *p;
	json_array_foreach(ports, i, p)
		if (strcmp(json_string_value(json_object_get(p, "port")), name) == 0)
			return p;
	p = json_pack("{s:s, s:[]}", "port", name, "twins");
	json_array_append_new(ports, p);
	return p;
}

int topo_cablemap_build(json_t *nodes, json_t **map)
{
	if (!json_is_array(nodes) || !map)
		return -EINVAL;
	json_t *out = json_array();
	size_t i;
	json_t *n;
	json_array_foreach(nodes, i, n) {
		const char *id = json_string_value(json_object_get(n, "id"));
		const char *name = json_string_value(json_object_get(n, "name"));
		if (!id) {
			json_decref(out);
			return -EINVAL;
		}
		json_t *disc = json_object_get(n, "discovery");
		json_t *snap = json_object_get(n, "l2disc");
		json_t *ports = json_array();
		size_t j, k;
		json_t *p, *t;
		json_array_foreach(json_object_get(disc, "ports"), j, p) {
			const char *pn = json_string_value(json_object_get(p, "name"));
			if (!pn)
				continue;
			json_t *mp = map_port(ports, pn);
			json_array_foreach(json_object_get(p, "twins"), k, t) {
				const char *nd = json_string_value(json_object_get(t, "netdev"));
				if (!nd)
					continue;
				json_array_append_new(json_object_get(mp, "twins"),
						      map_twin(nd, json_object_get(t, "carrier"),
							       json_object_get(t, "admin_up"),
							       json_object_get(t, "mtu"), find_iface(snap, nd)));
			}
		}
		/* Interfaces l2disc runs on that discovery did not list. */
		json_array_foreach(json_object_get(snap, "interfaces"), j, t) {
			const char *nd = json_string_value(json_object_get(t, "netdev"));
			const char *pn = json_string_value(json_object_get(t, "port"));
			if (!nd || !pn)
				continue;
			bool listed = false;
			size_t a, b;
			json_t *mp, *mt;
			json_array_foreach(ports, a, mp) json_array_foreach(json_object_get(mp, "twins"), b, mt)
				listed |= strcmp(json_string_value(json_object_get(mt, "netdev")), nd) == 0;
			if (!listed)
				json_array_append_new(json_object_get(map_port(ports, pn), "twins"),
						      map_twin(nd, NULL, NULL, NULL, t));
		}
		json_array_append_new(out, json_pack("{s:s, s:s, s:o}", "id", id, "name", name ? name : id,
						     "ports", ports));
	}
	*map = json_pack("{s:o}", "nodes", out);
	return *map ? 0 : -ENOMEM;
}

/* fabric: this node's fabric in the cluster (issue 4, docs/discovery.md).
 *
 * Every sparkd runs topo_discover() at start with the fabric.* and discovery.*
 * keys of its config, and watches netlink link/address events in the loop. A
 * change on a fabric netdev (or a netdev appearing, going, or lost events)
 * re-runs discovery after FABRIC_DEBOUNCE_MS, so the report is always whole,
 * then publishes it:
 *   worker: a {"type":"fabric","discovery":{...}} frame to the head (id 0, no
 *           answer), after every hello and after every change;
 *   head:   fabric_store() for itself; for workers on their frames.
 * fabric_store() runs topo_findings() with the head's cluster MTU (fabric.mtu,
 * 0 when unset), writes the report, findings and one row per twin to
 * cluster.db, and adds an event per port change ("port 0 enp1s0f0np0 carrier
 * down"). The service owns this node's discovery state (the last report):
 * others read it, and the head's stored reports, through a->hooks. */
#include "service.h"

#include "discover.h"
#include "log.h"
#include "proto.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FABRIC_DEBOUNCE_MS 150
#define FABRIC_MAX_TWINS 64 /* rows accepted from one report */

struct fabric {
	struct agent *a;
	struct topo_opts opts;
	json_t *report;           /* last discovery (NULL: discovery failed) */
	struct topo_watch *watch;
	uv_timer_t debounce;
	bool timer_init;
	unsigned pending;         /* TOPO_CHG_* bits seen since the last discovery */
};

/* ---- the report as rows ----------------------------------------------------- */

static const char *jstr(const json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

static int64_t jint(const json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	return json_is_integer(v) && json_integer_value(v) >= 0 ? (int64_t)json_integer_value(v) : -1;
}

/* Twin rows of a discovery object. -EINVAL when its shape is wrong (no
 * "ports" array, a twin without a usable netdev name, too many twins). */
static int report_rows(const json_t *disc, db_fabric_port **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	json_t *ports = json_object_get(disc, "ports");
	if (!json_is_array(ports))
		return -EINVAL;
	size_t total = 0, i, k;
	json_t *p, *t;
	json_array_foreach(ports, i, p)
		total += json_array_size(json_object_get(p, "twins"));
	if (total > FABRIC_MAX_TWINS)
		return -EINVAL;
	db_fabric_port *rows = calloc(total ? total : 1, sizeof *rows);
	if (!rows)
		return -ENOMEM;
	size_t cnt = 0;
	json_array_foreach(ports, i, p) {
		const char *pname = jstr(p, "name");
		if (!pname || strlen(pname) >= sizeof rows->port)
			goto bad;
		json_array_foreach(json_object_get(p, "twins"), k, t) {
			db_fabric_port *r = &rows[cnt++];
			const char *nd = jstr(t, "netdev");
			if (!nd || !*nd || strlen(nd) >= sizeof r->netdev)
				goto bad;
			util_strlcpy(r->port, pname, sizeof r->port);
			r->twin = (int)k;
			util_strlcpy(r->netdev, nd, sizeof r->netdev);
			r->present = json_is_true(json_object_get(t, "present"));
			json_t *c = json_object_get(t, "carrier");
			r->carrier = json_is_boolean(c) ? json_is_true(c) : -1;
			util_strlcpy(r->operstate, jstr(t, "operstate") ? jstr(t, "operstate") : "",
				     sizeof r->operstate);
			r->speed_mbps = jint(t, "speed_mbps");
			r->mtu = jint(t, "mtu");
			json_t *rd = json_object_get(t, "rdma");
			r->gid_index = -1;
			if (json_is_object(rd)) {
				const char *dev = jstr(rd, "device"), *st = jstr(rd, "state");
				util_strlcpy(r->rdma_device, dev ? dev : "", sizeof r->rdma_device);
				util_strlcpy(r->rdma_state, st ? st : "", sizeof r->rdma_state);
				int64_t g = jint(rd, "rocev2_gid_index");
				r->gid_index = g > 65535 ? -1 : (int)g;
			}
		}
	}
	*out = rows;
	*n = cnt;
	return 0;
bad:
	free(rows);
	return -EINVAL;
}

/* {"ports_up","ports_total","twins_up","twins_total","speed_mbps","mtu",
 *  "mtu_max","findings","updated_at"}: a port is up when a twin has carrier;
 * speed_mbps is the lowest speed of the twins with carrier, mtu the lowest
 * (mtu_max the highest) of the present twins; null when unknown. */
static json_t *summary(const db_fabric_port *r, size_t n, int64_t n_findings, int64_t updated_at)
{
	int ports = 0, ports_up = 0, twins_up = 0;
	int64_t speed = -1, mtu = -1, mtu_max = -1;
	for (size_t i = 0; i < n; i++) {
		bool first = i == 0 || strcmp(r[i].port, r[i - 1].port) != 0;
		if (first)
			ports++;
		if (r[i].carrier == 1) {
			twins_up++;
			bool port_counted = false;
			for (size_t j = i; j-- > 0 && strcmp(r[j].port, r[i].port) == 0;)
				port_counted |= r[j].carrier == 1;
			ports_up += !port_counted;
			if (r[i].speed_mbps > 0 && (speed < 0 || r[i].speed_mbps < speed))
				speed = r[i].speed_mbps;
		}
		if (r[i].present && r[i].mtu > 0) {
			if (mtu < 0 || r[i].mtu < mtu)
				mtu = r[i].mtu;
			if (r[i].mtu > mtu_max)
				mtu_max = r[i].mtu;
		}
	}
	json_t *o = json_pack("{s:i, s:i, s:i, s:i, s:I, s:I}", "ports_up", ports_up, "ports_total",
			      ports, "twins_up", twins_up, "twins_total", (int)n, "findings",
			      (json_int_t)n_findings, "updated_at", (json_int_t)updated_at);
	json_object_set_new(o, "speed_mbps", speed > 0 ? json_integer(speed) : json_null());
	json_object_set_new(o, "mtu", mtu > 0 ? json_integer(mtu) : json_null());
	json_object_set_new(o, "mtu_max", mtu_max > 0 ? json_integer(mtu_max) : json_null());
	return o;
}

/* ---- head: store and read back ---------------------------------------------- */

static void port_event(struct agent *a, const char *node_id, const char *node_name,
		       const db_fabric_port *r, const char *what)
{
	char detail[200];
	snprintf(detail, sizeof detail, "port %s %s %s", r->port, r->netdev, what);
	db_event_add(a->hd.db, util_now(), node_id, "fabric", detail);
	log_info("fabric_port", "node=%s port=%s netdev=%s change=%s", node_name, log_q(r->port),
		 r->netdev, log_q(what));
}

static void fmt_speed(int64_t mbps, char *buf, size_t len)
{
	if (mbps < 0)
		snprintf(buf, len, "unknown");
	else if (mbps % 1000 == 0)
		snprintf(buf, len, "%lldG", (long long)(mbps / 1000));
	else
		snprintf(buf, len, "%lldM", (long long)mbps);
}

/* One event per twin whose presence, carrier, speed or MTU changed. */
static void diff_events(struct agent *a, const db_node *node, const db_fabric_port *old,
			size_t nold, const db_fabric_port *cur, size_t ncur)
{
	char what[96];
	for (size_t i = 0; i < ncur; i++) {
		const db_fabric_port *c = &cur[i], *o = NULL;
		for (size_t j = 0; j < nold && !o; j++)
			if (strcmp(old[j].netdev, c->netdev) == 0)
				o = &old[j];
		if (!o) {
			port_event(a, node->id, node->name, c, c->present ? "appeared" : "absent");
			continue;
		}
		if (o->present != c->present)
			port_event(a, node->id, node->name, c, c->present ? "present" : "absent");
		if (o->carrier != c->carrier && c->carrier >= 0)
			port_event(a, node->id, node->name, c, c->carrier ? "carrier up" : "carrier down");
		if (o->speed_mbps >= 0 && c->speed_mbps >= 0 && o->speed_mbps != c->speed_mbps) {
			char s1[24], s2[24];
			fmt_speed(o->speed_mbps, s1, sizeof s1);
			fmt_speed(c->speed_mbps, s2, sizeof s2);
			snprintf(what, sizeof what, "speed %s -> %s", s1, s2);
			port_event(a, node->id, node->name, c, what);
		}
		if (o->mtu >= 0 && c->mtu >= 0 && o->mtu != c->mtu) {
			snprintf(what, sizeof what, "mtu %lld -> %lld", (long long)o->mtu,
				 (long long)c->mtu);
			port_event(a, node->id, node->name, c, what);
		}
	}
	for (size_t j = 0; j < nold; j++) {
		bool kept = false;
		for (size_t i = 0; i < ncur && !kept; i++)
			kept = strcmp(old[j].netdev, cur[i].netdev) == 0;
		if (!kept)
			port_event(a, node->id, node->name, &old[j], "gone");
	}
}

static int fabric_store(struct agent *a, const char *node_id, json_t *discovery)
{
	if (!a->hd.db)
		return -ENOTCONN;
	db_node node;
	int r = db_node_get(a->hd.db, node_id, &node);
	if (r < 0)
		return r;
	db_fabric_port *rows = NULL, *old = NULL;
	size_t n = 0, nold = 0;
	if ((r = report_rows(discovery, &rows, &n)) < 0)
		return r;
	json_t *findings = NULL;
	int nf = topo_findings(discovery, a->fabric ? a->fabric->opts.cluster_mtu : 0, &findings);
	if (nf < 0) {
		free(rows);
		return nf;
	}
	db_fabric prev;
	bool had = db_fabric_get(a->hd.db, node_id, &prev) == 0;
	if (had)
		db_fabric_free(&prev);
	if (had && db_fabric_ports(a->hd.db, node_id, &old, &nold) < 0)
		had = false;
	char *dj = json_dumps(discovery, JSON_COMPACT);
	char *fj = json_dumps(findings, JSON_COMPACT);
	r = dj && fj ? db_fabric_set(a->hd.db, node_id, util_now(), dj, fj, nf, rows, n) : -ENOMEM;
	if (r == 0) {
		if (had) {
			diff_events(a, &node, old, nold, rows, n);
		} else {
			json_t *s = summary(rows, n, nf, 0);
			char detail[128];
			snprintf(detail, sizeof detail, "first report: %d/%d ports up, %d findings",
				 (int)json_integer_value(json_object_get(s, "ports_up")),
				 (int)json_integer_value(json_object_get(s, "ports_total")), nf);
			db_event_add(a->hd.db, util_now(), node_id, "fabric", detail);
			json_decref(s);
		}
		log_info("fabric_report", "node=%s twins=%zu findings=%d", node.name, n, nf);
	} else {
		log_warn("fabric_store_failed", "node=%s err=%d", node.name, r);
	}
	free(dj);
	free(fj);
	json_decref(findings);
	free(rows);
	free(old);
	return r;
}

static json_t *fabric_summary_json(struct agent *a, const char *node_id)
{
	db_fabric f;
	if (!a->hd.db || db_fabric_get(a->hd.db, node_id, &f) < 0)
		return json_null();
	db_fabric_port *rows = NULL;
	size_t n = 0;
	json_t *o = db_fabric_ports(a->hd.db, node_id, &rows, &n) == 0
			    ? summary(rows, n, f.n_findings, f.updated_at)
			    : json_null();
	free(rows);
	db_fabric_free(&f);
	return o;
}

static json_t *fabric_report_json(struct agent *a, const char *node_id)
{
	db_fabric f;
	if (!a->hd.db || db_fabric_get(a->hd.db, node_id, &f) < 0)
		return json_null();
	json_t *d = json_loads(f.discovery, 0, NULL), *fi = json_loads(f.findings, 0, NULL);
	json_t *o = json_pack("{s:I, s:o, s:o}", "updated_at", (json_int_t)f.updated_at, "discovery",
			      d ? d : json_null(), "findings", fi ? fi : json_array());
	db_fabric_free(&f);
	return o;
}

/* A node's report. A malformed one closes its session: it would not be
 * better the next time. */
static void on_fabric_frame(struct agent *a, const char *node_id, const json_t *msg)
{
	json_t *d = json_object_get(msg, "discovery");
	if (fabric_store(a, node_id, d) != -EINVAL)
		return;
	log_warn("fabric_bad_report", "node_id=%s", node_id);
	struct session *s = peers_session(a, node_id);
	if (s) {
		svc_error_to(s->c, msg, "bad_request",
			     "a fabric frame needs a discovery object with ports and their twins");
		conn_close(s->c, 0);
	}
}

/* ---- this node: discover, watch, publish -------------------------------------- */

static void log_report(struct fabric *f, const char *why)
{
	db_fabric_port *rows = NULL;
	size_t n = 0;
	json_t *findings = NULL;
	int nf = topo_findings(f->report, f->opts.cluster_mtu, &findings);
	if (report_rows(f->report, &rows, &n) == 0) {
		json_t *s = summary(rows, n, nf < 0 ? 0 : nf, 0);
		json_t *sp = json_object_get(s, "speed_mbps"), *mtu = json_object_get(s, "mtu");
		log_info("fabric", "why=%s ports=%d ports_up=%d twins_up=%d/%d speed_mbps=%lld mtu=%lld "
				   "findings=%d",
			 why, (int)json_integer_value(json_object_get(s, "ports_total")),
			 (int)json_integer_value(json_object_get(s, "ports_up")),
			 (int)json_integer_value(json_object_get(s, "twins_up")), (int)n,
			 json_is_integer(sp) ? (long long)json_integer_value(sp) : -1LL,
			 json_is_integer(mtu) ? (long long)json_integer_value(mtu) : -1LL, nf);
		json_decref(s);
	}
	size_t i;
	json_t *x;
	json_array_foreach(findings, i, x)
		log_debug("fabric_finding", "code=%s netdev=%s", jstr(x, "code") ? jstr(x, "code") : "-",
			  jstr(x, "netdev") ? jstr(x, "netdev") : "-");
	json_decref(findings);
	free(rows);
}

static int rediscover(struct fabric *f, const char *why)
{
	json_t *d = NULL;
	char err[512] = "";
	int r = topo_discover(&f->opts, &d, err, sizeof err);
	if (r < 0) {
		log_warn("fabric_discovery_failed", "why=%s err=%s", why, log_q(err));
		return r;
	}
	json_decref(f->report);
	f->report = d;
	log_report(f, why);
	return 0;
}


static void fabric_publish(struct agent *a)
{
	struct fabric *f = a->fabric;
	if (!f || !f->report || a->stopping)
		return;
	/* neighbour discovery follows identity and netdevs (topo) */
	svc_emit(a, SVC_EV_FABRIC_CHANGED, &(struct svc_event_arg){.bits = 0});
	if (a->id.role == ROLE_HEAD && a->hd.db) {
		fabric_store(a, a->id.node_id, f->report);
	} else if (a->id.role == ROLE_WORKER && a->wk.link && a->wk.up) {
		json_t *m = proto_msg("fabric", 0);
		json_object_set(m, "discovery", f->report);
		int r = peers_to_head(a, m);
		if (r < 0)
			log_warn("fabric_send_failed", "err=%d", r);
	}
}

static void on_debounce(uv_timer_t *t)
{
	struct fabric *f = t->data;
	unsigned changes = f->pending;
	f->pending = 0;
	if (rediscover(f, "change") == 0) {
		svc_emit(f->a, SVC_EV_FABRIC_CHANGED, &(struct svc_event_arg){.bits = changes});
		fabric_publish(f->a);
	}
}

static json_t *fabric_discovery(struct agent *a)
{
	return a->fabric ? a->fabric->report : NULL;
}

/* Is this netdev one of the fabric twins of the last report? */
static bool is_fabric(const struct fabric *f, const char *netdev)
{
	size_t i, k;
	json_t *p, *t;
	json_array_foreach(json_object_get(f->report, "ports"), i, p)
		json_array_foreach(json_object_get(p, "twins"), k, t) {
			const char *nd = jstr(t, "netdev");
			if (nd && netdev && strcmp(nd, netdev) == 0)
				return true;
		}
	return false;
}

static void on_link(const struct topo_link_event *ev, void *arg)
{
	struct fabric *f = arg;
	unsigned always = TOPO_CHG_NEW | TOPO_CHG_GONE | TOPO_CHG_RESYNC;
	if (f->a->stopping || (!(ev->changes & always) && f->report && !is_fabric(f, ev->netdev)))
		return;
	log_info("fabric_change", "netdev=%s changes=0x%x carrier=%d mtu=%ld speed_mbps=%ld oper=%s",
		 ev->netdev ? ev->netdev : "-", ev->changes, ev->carrier, ev->mtu, ev->speed_mbps,
		 ev->operstate ? ev->operstate : "-");
	f->pending |= ev->changes;
	if (!uv_is_active((uv_handle_t *)&f->debounce))
		uv_timer_start(&f->debounce, on_debounce, FABRIC_DEBOUNCE_MS, 0);
}

static int fabric_init(struct agent *a, char *err, size_t errlen)
{
	struct fabric *f = calloc(1, sizeof *f);
	if (!f) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	f->a = a;
	topo_opts_init(&f->opts);
	char e2[256] = "";
	int r = topo_opts_from_config(&f->opts, a->cfg, e2, sizeof e2);
	if (r < 0) {
		snprintf(err, errlen, "%s: %s", a->opts.config, e2);
		free(f);
		return r;
	}
	a->fabric = f;
	a->hooks.discovery = fabric_discovery;
	a->hooks.fabric_summary = fabric_summary_json;
	a->hooks.fabric_report = fabric_report_json;
	a->hooks.fabric_store = fabric_store;
	return 0;
}

/* First discovery and the watcher; publishes the report (a worker's session
 * is not up yet: its hello answer publishes). */
static int fabric_start(struct agent *a, char *errbuf, size_t errlen)
{
	struct fabric *f = a->fabric;
	(void)errbuf;
	(void)errlen;
	if (!f)
		return 0;
	uv_timer_init(a->loop, &f->debounce);
	f->debounce.data = f;
	f->timer_init = true;
	rediscover(f, "start");
	char err[256] = "";
	int r = 0;
	if (f->opts.use_netlink) {
		r = topo_watch_open(&f->watch, f->opts.sysfs_root, on_link, f, err, sizeof err);
		if (r == 0 && (r = topo_watch_uv_start(f->watch, a->loop)) < 0)
			snprintf(err, sizeof err, "%s", uv_strerror(r));
		if (r < 0) {
			log_warn("fabric_watch_failed", "err=%s action=%s", log_q(err),
				 log_q("no live fabric changes; restart sparkd to report them"));
			topo_watch_close(f->watch);
			f->watch = NULL;
		}
	}
	fabric_publish(a);
	return 0; /* a node without a watcher works without live changes */
}

static void fabric_stop(struct agent *a)
{
	struct fabric *f = a->fabric;
	if (!f)
		return;
	if (f->timer_init)
		uv_timer_stop(&f->debounce); /* closed by main's final walk */
	topo_watch_close(f->watch);
	f->watch = NULL;
}

static void fabric_free(struct agent *a)
{
	struct fabric *f = a->fabric;
	if (!f)
		return;
	topo_opts_free(&f->opts);
	json_decref(f->report);
	free(f);
	a->fabric = NULL;
}

static void fabric_event(struct agent *a, enum svc_event ev, const struct svc_event_arg *arg)
{
	(void)arg;
	if (ev == SVC_EV_HEAD_UP || ev == SVC_EV_ROLE)
		fabric_publish(a); /* a (new) head gets this node's report */
}

static const struct svc_frame frames[] = {
	{"fabric", on_fabric_frame, FRAME_TO_HEAD, {{"discovery", 'o'}, {NULL, 0}}},
	{NULL},
};

const struct service fabric_service = {
	.name = "fabric",
	.frames = frames,
	.init = fabric_init,
	.start = fabric_start,
	.stop = fabric_stop,
	.free = fabric_free,
	.on_event = fabric_event,
};

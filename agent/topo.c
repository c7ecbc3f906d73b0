/* topo: the node side of topology validation (see topo.h, docs/topology.md).
 *
 * Neighbour discovery: every node in a cluster runs topology/l2disc on its
 * fabric netdevs with the cluster id, its node id and name, and the cluster
 * secret. l2_sync() compares what it runs with (identity + netdev list) with
 * what it should run with, and restarts it on a difference; it is called after
 * every fabric discovery (fabric.c hook), after init and hello (fabric_publish)
 * and once a second (a leave or a removal). A carrier, new-netdev or resync
 * change kicks it back to the fast interval.
 *
 * The head's requests ("topo_req") are served here for every node, the head's
 * own included. Probes block, so they run in uv_queue_work threads; every
 * answer goes through the mailbox (uv_async) to the loop. */
#include "topo.h"

#include "cfg.h"
#include "log.h"
#include "proto.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TOPO_TICK_MS 1000

struct tmail {
	struct tmail *next;
	json_t *msg;
};

enum tjob_kind { TJ_SERVE, TJ_CLIENT, TJ_RDMA };

struct tjob {
	struct tjob *next;
	struct topo_agent *t;
	uv_work_t work;
	enum tjob_kind kind;
	json_int_t id;           /* the request to answer when done (0: none) */
	json_t *req;             /* private copy: the thread reads its strings */
	struct topo_probe_server *srv;
	struct topo_probe_client_opts copts;
	struct topo_probe_rdma_opts ropts;
	char probe[48];          /* RDMA: the probe whose endpoints are swapped */
	bool have_peer;          /* under t->mu */
	struct topo_rdma_endpoint peer;
	json_t *result;
	int rc;
	char err[512];
};

static const char *jstr(const json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

/* ---- mailbox ------------------------------------------------------------------ */

void topo_mail(struct topo_agent *t, json_t *msg)
{
	struct tmail *m = calloc(1, sizeof *m);
	if (!m) {
		json_decref(msg);
		return;
	}
	m->msg = msg;
	pthread_mutex_lock(&t->mu);
	if (!t->async_init) {
		pthread_mutex_unlock(&t->mu);
		json_decref(msg);
		free(m);
		return;
	}
	if (t->mail_last)
		t->mail_last->next = m;
	else
		t->mail_first = m;
	t->mail_last = m;
	uv_async_send(&t->async);
	pthread_mutex_unlock(&t->mu);
}

static void on_async(uv_async_t *h)
{
	struct topo_agent *t = h->data;
	struct agent *a = t->a;
	pthread_mutex_lock(&t->mu);
	struct tmail *m = t->mail_first;
	t->mail_first = t->mail_last = NULL;
	pthread_mutex_unlock(&t->mu);
	while (m) {
		struct tmail *next = m->next;
		peers_to_head(a, json_incref(m->msg)); /* the head's own node: its mailbox */
		json_decref(m->msg);
		free(m);
		m = next;
	}
}

static void reply_ok(struct topo_agent *t, json_int_t id, json_t *data)
{
	json_t *m = proto_msg("topo_reply", id);
	json_object_set_new(m, "ok", json_true());
	json_object_set_new(m, "data", data ? data : json_object());
	topo_mail(t, m);
}

static void reply_err(struct topo_agent *t, json_int_t id, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void reply_err(struct topo_agent *t, json_int_t id, const char *code, const char *fmt, ...)
{
	char msg[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	json_t *m = proto_msg("topo_reply", id);
	json_object_set_new(m, "ok", json_false());
	json_object_set_new(m, "code", json_string(code));
	json_object_set_new(m, "message", json_string(msg));
	topo_mail(t, m);
}

/* ---- neighbour discovery ---------------------------------------------------------- */

static void l2_stop(struct topo_agent *t, const char *why)
{
	if (!t->l2)
		return;
	topo_l2disc_stop(t->l2);
	t->l2 = NULL;
	log_info("l2disc_stopped", "why=%s", log_q(why));
}

static void l2_sync(struct topo_agent *t)
{
	struct agent *a = t->a;
	json_t *disc = a->hooks.discovery ? a->hooks.discovery(a) : NULL;
	const char *why = NULL;
	if (t->stopping || a->stopping)
		why = "sparkd is stopping";
	else if (a->id.role == ROLE_NONE || a->id.removed)
		why = "this node is not in a cluster";
	else if (!a->id.cluster_secret[0] || !a->id.cluster_id[0])
		why = "no cluster secret in the identity (join again)";
	else if (!disc)
		why = "fabric discovery failed (see the fabric_discovery_failed log line)";
	struct topo_l2disc_if *ifs = NULL;
	size_t n = 0;
	if (!why && topo_l2disc_ifs_from_discovery(disc, &ifs, &n) < 0)
		why = "fabric discovery has no ports";
	char sig[sizeof t->l2_sig] = "";
	if (!why) {
		size_t o = (size_t)snprintf(sig, sizeof sig, "%s|%s|%s|%s", a->id.cluster_id,
					    a->id.node_id, a->id.node_name, a->id.cluster_secret);
		for (size_t i = 0; i < n && o < sizeof sig; i++)
			o += (size_t)snprintf(sig + o, sizeof sig - o, "|%s:%s:%u", ifs[i].netdev,
					      ifs[i].port, ifs[i].twin);
	}
	if (strcmp(sig, t->l2_sig) == 0) {
		free(ifs);
		return;
	}
	l2_stop(t, why ? why : "identity or fabric netdevs changed");
	util_strlcpy(t->l2_sig, sig, sizeof t->l2_sig);
	if (why) {
		util_strlcpy(t->l2_err, why, sizeof t->l2_err);
		free(ifs);
		return;
	}
	if (n == 0) {
		snprintf(t->l2_err, sizeof t->l2_err,
			 "no fabric netdevs on this node (set fabric.ports or fabric.interfaces)");
		log_warn("l2disc_not_started", "reason=%s", log_q(t->l2_err));
		free(ifs);
		return;
	}
	struct topo_l2disc_opts o;
	topo_l2disc_opts_init(&o);
	o.cluster_id = a->id.cluster_id;
	o.secret = a->id.cluster_secret;
	o.node_id = a->id.node_id;
	o.node_name = a->id.node_name;
	o.ifs = ifs;
	o.n_ifs = n;
	char err[256] = "";
	int r = topo_l2disc_start(a->loop, &o, &t->l2, err, sizeof err);
	if (r < 0) {
		t->l2 = NULL;
		util_strlcpy(t->l2_err, err[0] ? err : strerror(-r), sizeof t->l2_err);
		log_warn("l2disc_not_started", "reason=%s", log_q(t->l2_err));
	} else {
		t->l2_err[0] = '\0';
		log_info("l2disc_started", "netdevs=%zu node=%s", n, a->id.node_name);
	}
	free(ifs);
}

static void on_tick(uv_timer_t *h)
{
	l2_sync(h->data);
}

static void topoval_fabric_changed(struct agent *a, unsigned changes)
{
	struct topo_agent *t = a->topo;
	if (!t || t->stopping)
		return;
	/* A link that went down, came up or was replaced may now lead elsewhere:
	 * start over with empty neighbour tables (sending fast again), so nothing
	 * heard over the old cabling survives. The head waits TOPO_SETTLE_MS after
	 * a start before it trusts a table. */
	if (changes & (TOPO_CHG_CARRIER | TOPO_CHG_NEW | TOPO_CHG_GONE | TOPO_CHG_RESYNC))
		t->l2_sig[0] = '\0';
	l2_sync(t);
	if (t->l2 && (changes & TOPO_CHG_MTU))
		topo_l2disc_kick(t->l2);
}

/* ---- jobs in worker threads ---------------------------------------------------------- */

static struct tjob *job_new(struct topo_agent *t, enum tjob_kind kind, json_int_t id,
			    const json_t *req)
{
	struct tjob *j = calloc(1, sizeof *j);
	if (!j)
		return NULL;
	j->t = t;
	j->kind = kind;
	j->id = id;
	j->req = req ? json_deep_copy(req) : NULL;
	j->work.data = j;
	return j;
}

static void job_free(struct tjob *j)
{
	struct topo_agent *t = j->t;
	for (struct tjob **p = &t->jobs; *p; p = &(*p)->next)
		if (*p == j) {
			*p = j->next;
			break;
		}
	if (j->srv)
		topo_probe_server_free(j->srv);
	json_decref(j->req);
	json_decref(j->result);
	free(j);
}

static void work_run(uv_work_t *w)
{
	struct tjob *j = w->data;
	j->err[0] = '\0';
	switch (j->kind) {
	case TJ_SERVE:
		j->rc = topo_probe_server_run(j->srv, &j->result, j->err, sizeof j->err);
		break;
	case TJ_CLIENT:
		j->rc = topo_probe_client_run(&j->copts, &j->result, j->err, sizeof j->err);
		break;
	case TJ_RDMA:
		j->rc = topo_probe_rdma_run(&j->ropts, &j->result, j->err, sizeof j->err);
		break;
	}
	/* The probes draw random numbers: free OpenSSL's per-thread state now, as
	 * libuv's pool threads outlive OpenSSL's own cleanup at exit. */
	OPENSSL_thread_stop();
}

static void work_done(uv_work_t *w, int status)
{
	struct tjob *j = w->data;
	struct topo_agent *t = j->t;
	if (status < 0 && !j->err[0]) {
		j->rc = status;
		snprintf(j->err, sizeof j->err, "%s", uv_strerror(status));
	}
	if (j->kind == TJ_SERVE) {
		if (j->rc < 0 && j->rc != -ECANCELED)
			log_debug("probe_server_done", "rc=%d err=%s", j->rc, log_q(j->err));
	} else if (j->id) {
		json_t *d = json_pack("{s:i, s:o, s:o}", "rc", j->rc, "error",
				      j->rc < 0 ? json_string(j->err) : json_null(), "result",
				      j->result ? json_incref(j->result) : json_null());
		reply_ok(t, j->id, d);
	}
	job_free(j);
}

static int job_queue(struct topo_agent *t, struct tjob *j)
{
	j->next = t->jobs;
	t->jobs = j;
	int r = uv_queue_work(t->a->loop, &j->work, work_run, work_done);
	if (r < 0)
		job_free(j);
	return r;
}

/* The RDMA exchange, in the probing thread: our endpoint goes to the head
 * (which relays it to the other end), then we wait for the other end's. */
static int rdma_exchange(const struct topo_rdma_endpoint *local, struct topo_rdma_endpoint *remote,
			 void *arg)
{
	struct tjob *j = arg;
	struct topo_agent *t = j->t;
	json_t *m = proto_msg("topo_rdma_ep", 0);
	json_object_set_new(m, "probe", json_string(j->probe));
	json_object_set_new(m, "endpoint", topo_rdma_endpoint_to_json(local));
	topo_mail(t, m);
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	unsigned tmo = j->ropts.params.timeout_ms ? j->ropts.params.timeout_ms : TOPO_PROBE_TIMEOUT_MS;
	dl.tv_sec += tmo / 1000;
	dl.tv_nsec += (long)(tmo % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	int r = 0;
	pthread_mutex_lock(&t->mu);
	while (!j->have_peer && !t->stopping && r == 0)
		r = pthread_cond_timedwait(&t->cv, &t->mu, &dl);
	bool got = j->have_peer;
	if (got)
		*remote = j->peer;
	bool stopping = t->stopping;
	pthread_mutex_unlock(&t->mu);
	if (got)
		return 0;
	return stopping ? -ECANCELED : -ETIMEDOUT;
}

/* ---- requests -------------------------------------------------------------------------- */

static void params_from(const json_t *o, struct topo_probe_params *p)
{
	topo_probe_params_init(p, false);
	json_int_t v;
	if ((v = proto_int(o, "ping_iters", -1)) >= 0 && v <= 1000000)
		p->ping_iters = (unsigned)v;
	if ((v = proto_int(o, "ping_size", -1)) > 0 && v <= 65536)
		p->ping_size = (unsigned)v;
	if ((v = proto_int(o, "bulk_ms", -1)) >= 0 && v <= 60000)
		p->bulk_ms = (unsigned)v;
	if ((v = proto_int(o, "timeout_ms", -1)) > 0 && v <= 600000)
		p->timeout_ms = (unsigned)v;
	json_t *mc = json_object_get(o, "mtu_check");
	if (json_is_boolean(mc))
		p->mtu_check = json_is_true(mc);
}

static double num_or(const json_t *o, const char *k, double def)
{
	json_t *v = json_object_get(o, k);
	return json_is_number(v) && json_number_value(v) >= 0 ? json_number_value(v) : def;
}

static void thresholds_from(const json_t *o, const struct topo_probe_thresholds *def,
			    struct topo_probe_thresholds *t)
{
	*t = *def;
	t->rdma_min_gbps = num_or(o, "rdma_min_gbps", t->rdma_min_gbps);
	t->rdma_max_p50_us = num_or(o, "rdma_max_p50_us", t->rdma_max_p50_us);
	t->rdma_max_p99_us = num_or(o, "rdma_max_p99_us", t->rdma_max_p99_us);
	t->tcp_min_gbps = num_or(o, "tcp_min_gbps", t->tcp_min_gbps);
	t->tcp_max_p50_us = num_or(o, "tcp_max_p50_us", t->tcp_max_p50_us);
	t->tcp_max_p99_us = num_or(o, "tcp_max_p99_us", t->tcp_max_p99_us);
	t->mtu = (int)num_or(o, "mtu", t->mtu);
}

static void op_state(struct topo_agent *t, json_int_t id, const json_t *req)
{
	(void)req;
	json_t *d = NULL;
	char err[512] = "";
	int r = topo_discover(&t->dopts, &d, err, sizeof err);
	if (r < 0) {
		reply_err(t, id, "discovery_failed", "fabric discovery failed on %s: %s",
			  t->a->id.node_name, err[0] ? err : strerror(-r));
		return;
	}
	json_t *snap = t->l2 ? topo_l2disc_snapshot(t->l2) : NULL;
	json_t *hosts = NULL;
	if (topo_host_addresses(d, &hosts, err, sizeof err) < 0)
		log_warn("host_addresses_failed", "err=%s", log_q(err));
	reply_ok(t, id,
		 json_pack("{s:o, s:o, s:o, s:o}", "discovery", d, "l2disc", snap ? snap : json_null(),
			   "l2disc_error",
			   t->l2 ? json_null()
				 : json_string(t->l2_err[0] ? t->l2_err : "neighbour discovery is not running"),
			   "host_addresses", hosts ? hosts : json_null()));
}

static void op_probe_serve(struct topo_agent *t, json_int_t id, const json_t *req)
{
	struct topo_probe_server_opts so = {
		.netdev = jstr(req, "netdev"),
		.address = jstr(req, "address"),
		.port = 0,
		.token = jstr(req, "token"),
		.timeout_ms = (unsigned)proto_int(req, "timeout_ms", 10000),
	};
	struct topo_probe_server *s = NULL;
	char err[512] = "";
	int r = topo_probe_server_start(&so, &s, err, sizeof err);
	if (r < 0) {
		reply_err(t, id, "probe_server_failed", "%s: cannot start a probe server on %s: %s",
			  t->a->id.node_name, so.netdev ? so.netdev : "any", err[0] ? err : strerror(-r));
		return;
	}
	int port = topo_probe_server_port(s);
	struct tjob *j = job_new(t, TJ_SERVE, 0, NULL);
	if (!j) {
		topo_probe_server_free(s);
		reply_err(t, id, "internal", "out of memory");
		return;
	}
	j->srv = s;
	if ((r = job_queue(t, j)) < 0) {
		reply_err(t, id, "internal", "cannot queue the probe server: %s", uv_strerror(r));
		return;
	}
	reply_ok(t, id, json_pack("{s:i}", "port", port));
}

static void op_probe_client(struct topo_agent *t, json_int_t id, const json_t *req)
{
	struct tjob *j = job_new(t, TJ_CLIENT, id, req);
	if (!j || !j->req) {
		if (j)
			job_free(j);
		reply_err(t, id, "internal", "out of memory");
		return;
	}
	struct topo_probe_client_opts *o = &j->copts;
	o->netdev = jstr(j->req, "netdev");
	o->local_address = jstr(j->req, "local_address");
	o->peer_address = jstr(j->req, "peer_address");
	o->peer_port = (int)proto_int(j->req, "peer_port", 0);
	o->token = jstr(j->req, "token");
	params_from(json_object_get(j->req, "params"), &o->params);
	thresholds_from(json_object_get(j->req, "thresholds"), &t->thr, &o->thresholds);
	if (!o->peer_address || o->peer_port <= 0 || o->peer_port > 65535) {
		job_free(j);
		reply_err(t, id, "bad_request", "probe_client needs peer_address and peer_port");
		return;
	}
	int r = job_queue(t, j);
	if (r < 0)
		reply_err(t, id, "internal", "cannot queue the probe: %s", uv_strerror(r));
}

static void op_rdma(struct topo_agent *t, json_int_t id, const json_t *req)
{
	struct tjob *j = job_new(t, TJ_RDMA, id, req);
	if (!j || !j->req) {
		if (j)
			job_free(j);
		reply_err(t, id, "internal", "out of memory");
		return;
	}
	const char *probe = jstr(j->req, "probe");
	struct topo_probe_rdma_opts *o = &j->ropts;
	o->ibdev = jstr(j->req, "ibdev");
	o->ib_port = (int)proto_int(j->req, "ib_port", 1);
	o->gid_index = (int)proto_int(j->req, "gid_index", -1);
	o->netdev = jstr(j->req, "netdev");
	o->server = json_is_true(json_object_get(j->req, "server"));
	params_from(json_object_get(j->req, "params"), &o->params);
	thresholds_from(json_object_get(j->req, "thresholds"), &t->thr, &o->thresholds);
	o->exchange = rdma_exchange;
	o->exchange_arg = j;
	if (!probe || strlen(probe) >= sizeof j->probe || !o->ibdev || o->gid_index < 0) {
		job_free(j);
		reply_err(t, id, "bad_request", "rdma needs probe, ibdev and gid_index");
		return;
	}
	util_strlcpy(j->probe, probe, sizeof j->probe);
	int r = job_queue(t, j);
	if (r < 0)
		reply_err(t, id, "internal", "cannot queue the probe: %s", uv_strerror(r));
}

static void op_rdma_peer(struct topo_agent *t, json_int_t id, const json_t *req)
{
	const char *probe = jstr(req, "probe");
	struct topo_rdma_endpoint ep;
	if (!probe || topo_rdma_endpoint_from_json(json_object_get(req, "endpoint"), &ep) < 0) {
		reply_err(t, id, "bad_request", "rdma_peer needs probe and a valid endpoint");
		return;
	}
	bool found = false;
	pthread_mutex_lock(&t->mu);
	for (struct tjob *j = t->jobs; j; j = j->next)
		if (j->kind == TJ_RDMA && strcmp(j->probe, probe) == 0) {
			j->peer = ep;
			j->have_peer = true;
			found = true;
		}
	pthread_cond_broadcast(&t->cv);
	pthread_mutex_unlock(&t->mu);
	if (found)
		reply_ok(t, id, NULL);
	else
		reply_err(t, id, "not_found", "no RDMA probe %s runs on %s", probe, t->a->id.node_name);
}

size_t topo_disc_netdevs(json_t *disc, const char **out, size_t max)
{
	size_t n = 0, i, k;
	json_t *p, *tw;
	json_array_foreach(json_object_get(disc, "ports"), i, p)
		json_array_foreach(json_object_get(p, "twins"), k, tw) {
			const char *nd = jstr(tw, "netdev");
			if (nd && n < max)
				out[n++] = nd;
		}
	return n;
}

static void op_addr_apply(struct topo_agent *t, json_int_t id, const json_t *req)
{
	struct agent *a = t->a;
	json_t *plan = json_object_get(req, "plan");
	json_t *disc = a->hooks.discovery ? a->hooks.discovery(a) : NULL;
	const char *nds[16];
	size_t n = topo_disc_netdevs(disc, nds, 16);
	struct topo_addrplan_apply_opts o = {
		.node = a->id.node_name,
		.netdevs = n ? nds : NULL,
		.n_netdevs = n,
		.dry_run = json_is_true(json_object_get(req, "dry_run")),
	};
	json_t *rep = NULL;
	char err[512] = "";
	int r = topo_addrplan_apply(plan, &o, &rep, err, sizeof err);
	if (r == 0 && !o.dry_run && json_is_true(json_object_get(rep, "changed")))
		log_info("fabric_addresses_applied", "added=%zu removed=%zu",
			 json_array_size(json_object_get(rep, "added")),
			 json_array_size(json_object_get(rep, "removed")));
	/* What changed is in effect now: send the discovery that shows it, so the
	 * head has it before `--apply` returns (issue 16). */
	json_t *after = NULL;
	if (r == 0 && !o.dry_run && json_is_true(json_object_get(rep, "changed"))) {
		char derr[256] = "";
		if (topo_discover(&t->dopts, &after, derr, sizeof derr) < 0) {
			log_warn("discovery_failed", "after=addr_apply err=%s", log_q(derr));
			after = NULL;
		}
	}
	reply_ok(t, id,
		 json_pack("{s:i, s:o, s:o, s:o}", "rc", r, "error", r < 0 ? json_string(err) : json_null(),
			   "report", rep ? rep : json_null(), "discovery", after ? after : json_null()));
}

struct node_op {
	const char *op;
	void (*fn)(struct topo_agent *t, json_int_t id, const json_t *req);
};

static const struct node_op node_ops[] = {
	{"state", op_state},
	{"probe_serve", op_probe_serve},
	{"probe_client", op_probe_client},
	{"rdma", op_rdma},
	{"rdma_peer", op_rdma_peer},
	{"addr_apply", op_addr_apply},
	{NULL, NULL},
};

static void topo_node_request(struct agent *a, const json_t *req)
{
	struct topo_agent *t = a->topo;
	if (!t)
		return;
	json_int_t id = proto_id(req);
	const char *op = proto_str(req, "op");
	if (t->stopping) {
		reply_err(t, id, "shutdown", "sparkd on %s is stopping", a->id.node_name);
		return;
	}
	for (const struct node_op *o = node_ops; op && o->op; o++)
		if (strcmp(o->op, op) == 0) {
			o->fn(t, id, req);
			return;
		}
	reply_err(t, id, "unknown_op", "sparkd on %s does not know topology op \"%s\"",
		  a->id.node_name, op ? op : "");
}

static void on_topo_req(struct agent *a, const char *from, const json_t *msg)
{
	(void)from; /* the head: only it has a session that sends node frames */
	topo_node_request(a, msg);
}

/* ---- life cycle ------------------------------------------------------------------------ */

static int cfg_uint(json_t *cfg, const char *key, long long lo, long long hi, unsigned *out,
		    char *err, size_t errlen)
{
	long long v;
	int r = cfg_get_int(cfg, key, lo, hi, &v, err, errlen);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	*out = (unsigned)v;
	return 0;
}

/* "a.b.c.d/len" with len 8..28. */
static bool valid_pool(const char *s)
{
	char ip[32];
	const char *slash = strchr(s, '/');
	if (!slash || (size_t)(slash - s) >= sizeof ip)
		return false;
	memcpy(ip, s, (size_t)(slash - s));
	ip[slash - s] = '\0';
	struct in_addr in;
	char *end;
	long len = strtol(slash + 1, &end, 10);
	return inet_pton(AF_INET, ip, &in) == 1 && !*end && slash[1] && len >= 8 && len <= 28;
}

static int read_config(struct topo_agent *t, json_t *cfg, char *err, size_t errlen)
{
	static const char *const probe_keys[] = {
		"rdma_min_gbps", "rdma_max_p50_us", "rdma_max_p99_us", "tcp_min_gbps",
		"tcp_max_p50_us", "tcp_max_p99_us", "bulk_ms", "quick_bulk_ms", "ping_iters",
		"quick_ping_iters", "timeout_ms", NULL};
	json_t *pr = cfg_get(cfg, "probes");
	int r;
	if (pr && !json_is_object(pr)) {
		snprintf(err, errlen, "probes: expected a map of settings (docs/topology.md)");
		return -EINVAL;
	}
	if (pr && (r = cfg_check_keys(pr, "probes", probe_keys, err, errlen)) < 0)
		return r;
	topo_probe_thresholds_default(&t->thr);
	if ((r = topo_probe_thresholds_from_config(cfg, &t->thr, err, errlen)) < 0)
		return r;
	t->bulk_ms = TOPO_BULK_MS;
	t->quick_bulk_ms = TOPO_QUICK_BULK_MS;
	t->ping_iters = TOPO_PING_ITERS;
	t->quick_ping_iters = TOPO_QUICK_PING_ITERS;
	t->probe_timeout_ms = TOPO_PROBE_TIMEOUT_MS;
	if ((r = cfg_uint(cfg, "probes.bulk_ms", 0, 60000, &t->bulk_ms, err, errlen)) < 0 ||
	    (r = cfg_uint(cfg, "probes.quick_bulk_ms", 0, 60000, &t->quick_bulk_ms, err, errlen)) < 0 ||
	    (r = cfg_uint(cfg, "probes.ping_iters", 0, 1000000, &t->ping_iters, err, errlen)) < 0 ||
	    (r = cfg_uint(cfg, "probes.quick_ping_iters", 0, 1000000, &t->quick_ping_iters, err,
			  errlen)) < 0 ||
	    (r = cfg_uint(cfg, "probes.timeout_ms", 100, 600000, &t->probe_timeout_ms, err, errlen)) < 0)
		return r;
	const char *pool = TOPO_ADDR_DEFAULT_POOL;
	r = cfg_get_str(cfg, "fabric.pool", &pool, err, errlen);
	if (r < 0 && r != -ENOENT)
		return r;
	if (!valid_pool(pool)) {
		snprintf(err, errlen, "fabric.pool: expected an IPv4 prefix like %s, got \"%s\"",
			 TOPO_ADDR_DEFAULT_POOL, pool);
		return -EINVAL;
	}
	util_strlcpy(t->pool, pool, sizeof t->pool);
	unsigned prefix = TOPO_ADDR_DEFAULT_PREFIX;
	if ((r = cfg_uint(cfg, "fabric.prefix", 8, 30, &prefix, err, errlen)) < 0)
		return r;
	t->prefix = (int)prefix;
	return 0;
}

static int topoval_init(struct agent *a, char *err, size_t errlen)
{
	struct topo_agent *t = calloc(1, sizeof *t);
	if (!t) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	t->a = a;
	topo_opts_init(&t->dopts);
	char e2[384] = "";
	int r = topo_opts_from_config(&t->dopts, a->cfg, e2, sizeof e2);
	if (r == 0)
		r = read_config(t, a->cfg, e2, sizeof e2);
	if (r < 0) {
		snprintf(err, errlen, "%s: %s", a->opts.config, e2);
		topo_opts_free(&t->dopts);
		free(t);
		return r;
	}
	/* Probes block a libuv worker thread each (a server waits for its client):
	 * room for both ends of several probes beside the loop's other work. */
	setenv("UV_THREADPOOL_SIZE", "16", 0);
	pthread_mutex_init(&t->mu, NULL);
	pthread_cond_init(&t->cv, NULL);
	if ((r = uv_async_init(a->loop, &t->async, on_async)) < 0) {
		snprintf(err, errlen, "cannot set up the topology mailbox: %s", uv_strerror(r));
		topo_opts_free(&t->dopts);
		free(t);
		return r;
	}
	t->async.data = t;
	t->async_init = true;
	uv_timer_init(a->loop, &t->tick);
	t->tick.data = t;
	t->tick_init = true;
	uv_timer_start(&t->tick, on_tick, TOPO_TICK_MS, TOPO_TICK_MS);
	a->topo = t;
	topo_head_init(t);
	a->hooks.topo_status = topo_head_status;
	return 0;
}

static void topoval_stop(struct agent *a)
{
	struct topo_agent *t = a->topo;
	if (!t || t->stopping)
		return;
	topo_head_stop(a);
	pthread_mutex_lock(&t->mu);
	t->stopping = true;
	pthread_cond_broadcast(&t->cv);
	for (struct tjob *j = t->jobs; j; j = j->next)
		if (j->srv)
			topo_probe_server_stop(j->srv);
	if (t->async_init) {
		t->async_init = false;
		uv_close((uv_handle_t *)&t->async, NULL);
	}
	pthread_mutex_unlock(&t->mu);
	if (t->tick_init)
		uv_timer_stop(&t->tick); /* closed by main's final walk */
	l2_stop(t, "sparkd is stopping");
}

static void topoval_free(struct agent *a)
{
	struct topo_agent *t = a->topo;
	if (!t)
		return;
	topo_head_free(a);
	while (t->jobs)
		job_free(t->jobs);
	for (struct tmail *m = t->mail_first, *next; m; m = next) {
		next = m->next;
		json_decref(m->msg);
		free(m);
	}
	pthread_mutex_destroy(&t->mu);
	pthread_cond_destroy(&t->cv);
	topo_opts_free(&t->dopts);
	free(t);
	a->topo = NULL;
}

static void topo_event(struct agent *a, enum svc_event ev, const struct svc_event_arg *arg)
{
	if (ev == SVC_EV_FABRIC_CHANGED)
		topoval_fabric_changed(a, arg->bits);
	else if (ev == SVC_EV_CONN_GONE)
		topo_head_conn_gone(a, arg->c);
}

static const struct svc_request requests[] = {
	{"topo_show", topo_head_show, RIGHT_USER, SVC_HEAD},
	{"topo_validate", topo_head_validate, RIGHT_USER, SVC_HEAD},
	{"topo_addresses", topo_head_addresses, RIGHT_ADMIN, SVC_HEAD},
	{NULL},
};

static const struct svc_frame frames[] = {
	{"topo_req", on_topo_req, FRAME_TO_NODE, {{"op", 's'}, {NULL, 0}}},
	{"topo_reply", topo_head_on_reply, FRAME_TO_HEAD, {{"ok", 'b'}, {NULL, 0}}},
	{"topo_rdma_ep", topo_head_on_rdma_ep, FRAME_TO_HEAD,
	 {{"probe", 's'}, {"endpoint", 'o'}, {NULL, 0}}},
	{NULL},
};

const struct service topo_service = {
	.name = "topo",
	.requests = requests,
	.frames = frames,
	.init = topoval_init,
	.stop = topoval_stop,
	.free = topoval_free,
	.on_event = topo_event,
};

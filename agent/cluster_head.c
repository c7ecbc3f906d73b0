/* head: the cluster's head. Holds the CA and cluster.db, admits joiners with a
 * token, authenticates workers by certificate (refusing revoked ones), records
 * heartbeats and marks nodes unreachable/down, and serves cluster requests. */
#include "cluster.h"

#include "log.h"
#include "pki.h"
#include "proto.h"
#include "spark_config.h"
#include "token.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---------------------------------------------------------- */
/* Heartbeats and last_seen. A connected node's liveness is its session's last
 * frame (s->last_ms); cluster.db only needs last_seen for nodes that are NOT
 * connected, i.e. for after a disconnect or a head restart. So a heartbeat
 * writes nothing while the node stays ready and its stored last_seen is less
 * than HEAD_SEEN_FLUSH_S old: 7 workers cost one small transaction every
 * ~1.4 s instead of 7 a second (WAL traffic, checkpoints, ~0.15 % CPU).
 * State changes are still written at once, the exact last_seen is written when
 * the session closes (also at shutdown), and status/node ls read it from the
 * live session. What a head crash (no clean stop) can lose is at most
 * HEAD_SEEN_FLUSH_S of last_seen for the nodes that were connected: after the
 * restart they reconnect and are ready again, and one that does not is seen
 * as quiet for at most that much longer than it really was. */
#define HEAD_SEEN_FLUSH_S 10

/* Wall-clock time of a session's last frame. */
static int64_t session_seen(const struct session *s)
{
	return util_now() - (int64_t)((util_now_ms() - s->last_ms) / 1000);
}

static void advertise_addr(struct agent *a, const char *requested, char *out, size_t len)
{
	char host[128];
	int port = a->opts.listen_port;
	if (requested && *requested &&
	    util_split_hostport(requested, a->opts.listen_port, host, sizeof host, &port) == 0) {
		snprintf(out, len, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
		return;
	}
	const char *lh = a->opts.listen_host;
	if (strcmp(lh, "0.0.0.0") != 0 && strcmp(lh, "::") != 0) {
		snprintf(out, len, strchr(lh, ':') ? "[%s]:%d" : "%s:%d", lh, port);
		return;
	}
	/* Wildcard listen: the first non-loopback IPv4 address of this machine. */
	uv_interface_address_t *ifs = NULL;
	int n = 0;
	snprintf(out, len, "127.0.0.1:%d", port);
	if (uv_interface_addresses(&ifs, &n) == 0) {
		for (int i = 0; i < n; i++) {
			if (ifs[i].is_internal || ifs[i].address.address4.sin_family != AF_INET)
				continue;
			char ip[64];
			uv_ip4_name(&ifs[i].address.address4, ip, sizeof ip);
			snprintf(out, len, "%s:%d", ip, port);
			break;
		}
		uv_free_interface_addresses(ifs, n);
	}
}

static const char *display_state(const db_node *n)
{
	if (n->drained && strcmp(n->state, "ready") == 0)
		return "draining";
	return n->state;
}

/* The groups a node is in (the jobs service writes them; cluster.db says). */
static json_t *node_groups(struct agent *a, const char *node_id)
{
	json_t *arr = json_array();
	char **names = NULL;
	size_t n = 0;
	if (db_node_groups(a->hd.db, node_id, &names, &n) < 0)
		return arr;
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, json_string(names[i]));
	db_strv_free(names, n);
	return arr;
}

static json_t *node_json(struct agent *a, const db_node *n, const char *origin)
{
	int64_t now = util_now();
	/* A connected node's last_seen is its session's (HEAD_SEEN_FLUSH_S). */
	struct session *s = peers_session(a, n->id);
	int64_t seen = s && session_seen(s) > n->last_seen ? session_seen(s) : n->last_seen;
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:b, s:b}",
			      "id", n->id, "name", n->name, "state", display_state(n), "role",
			      n->role, "address", n->address, "version", n->version, "joined_at",
			      (json_int_t)n->joined_at, "last_seen", (json_int_t)seen,
			      "last_seen_ago_s",
			      (json_int_t)(strcmp(n->id, a->id.node_id) == 0 ? 0 : now - seen),
			      "drained", n->drained, "local",
			      origin && strcmp(origin, n->id) == 0);
	json_object_set_new(o, "age_s", json_integer(now - n->joined_at));
	json_object_set_new(o, "fabric", a->hooks.fabric_summary ? a->hooks.fabric_summary(a, n->id)
							   : json_null());
	json_object_set_new(o, "groups", node_groups(a, n->id));
	/* memory as last reported, bytes (issue 19); null before the first report */
	json_object_set_new(o, "mem", n->mem_at ? json_pack("{s:I, s:I, s:I, s:I}", "total",
							     (json_int_t)n->mem_total, "available",
							     (json_int_t)n->mem_available, "budget",
							     (json_int_t)n->mem_budget, "reported_at",
							     (json_int_t)n->mem_at)
						: json_null());
	return o;
}


static int lookup_node(struct agent *a, const struct svc_req *q, db_node *n)
{
	const json_t *req = q->msg;
	const char *name = proto_str(req, "node");
	if (!name || !*name) {
		svc_error(q, "bad_request", "missing node name");
		return -1;
	}
	if (db_node_get_by_name(a->hd.db, name, n) == 0 || db_node_get(a->hd.db, name, n) == 0)
		return 0;
	svc_error(q, "not_found",
		      "no node named '%s' in cluster %s; 'sparkctl node ls' lists them", name,
		      a->id.cluster_name);
	return -1;
}

/* ---- cluster requests --------------------------------------------------- */

void head_status(struct agent *a, const struct svc_req *q)
{
	db_cluster cl;
	db_node *nodes = NULL;
	size_t n = 0;
	if (db_cluster_get(a->hd.db, &cl) < 0 || db_node_list(a->hd.db, &nodes, &n) < 0) {
		svc_error(q, "internal", "cannot read cluster.db");
		return;
	}
	json_t *arr = json_array();
	json_t *head = NULL;
	for (size_t i = 0; i < n; i++) {
		json_array_append_new(arr, node_json(a, &nodes[i], q->origin));
		if (strcmp(nodes[i].id, cl.head_id) == 0)
			head = json_pack("{s:s, s:s, s:s}", "id", nodes[i].id, "name", nodes[i].name,
					 "address", nodes[i].address);
	}
	size_t ready = 0;
	for (size_t i = 0; i < n; i++)
		ready += strcmp(nodes[i].state, "ready") == 0;
	json_t *d = json_pack("{s:{s:s, s:s, s:I}, s:o, s:I, s:I, s:o}", "cluster", "id", cl.id,
			      "name", cl.name, "created_at", (json_int_t)cl.created_at, "head",
			      head ? head : json_null(), "node_count", (json_int_t)n, "ready_count",
			      (json_int_t)ready, "nodes", arr);
	json_object_set_new(d, "topology", a->hooks.topo_status ? a->hooks.topo_status(a) : json_null());
	/* the serve service's records (cluster.db): each group's services */
	json_t *svcs = json_array();
	db_service *sv = NULL;
	size_t ns = 0;
	if (db_service_list(a->hd.db, &sv, &ns) == 0)
		for (size_t i = 0; i < ns; i++)
			json_array_append_new(svcs, json_pack("{s:s, s:s, s:s}", "name", sv[i].name,
							      "group", sv[i].group_name, "state",
							      sv[i].state));
	db_services_free(sv, ns);
	json_object_set_new(d, "services", svcs);
	free(nodes);
	svc_reply(q, d);
}

void head_node_ls(struct agent *a, const struct svc_req *q)
{
	db_node *nodes = NULL;
	size_t n = 0;
	if (db_node_list(a->hd.db, &nodes, &n) < 0) {
		svc_error(q, "internal", "cannot read cluster.db");
		return;
	}
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, node_json(a, &nodes[i], q->origin));
	free(nodes);
	svc_reply(q, json_pack("{s:o}", "nodes", arr));
}

void head_node_show(struct agent *a, const struct svc_req *q)
{
	db_node n;
	if (lookup_node(a, q, &n) < 0)
		return;
	json_t *o = node_json(a, &n, q->origin);
	json_object_set_new(o, "cert_serial", json_string(n.cert_serial));
	json_object_set_new(o, "connected", json_boolean(strcmp(n.id, a->id.node_id) == 0 ||
							 peers_session(a, n.id) != NULL));
	db_event *ev = NULL;
	size_t nev = 0;
	json_t *events = json_array();
	if (db_node_events(a->hd.db, n.id, 10, &ev, &nev) == 0) { /* the newest 10, oldest first */
		for (size_t i = 0; i < nev; i++)
			json_array_append_new(events, json_pack("{s:I, s:s, s:s}", "ts", (json_int_t)ev[i].ts,
								"kind", ev[i].kind, "detail", ev[i].detail));
		free(ev);
	}
	json_object_set_new(o, "events", events);
	json_object_set_new(o, "fabric_report",
			    a->hooks.fabric_report ? a->hooks.fabric_report(a, n.id) : json_null());
	svc_reply(q, o);
}

static void r_node_drain(struct agent *a, const struct svc_req *q, bool drain)
{
	db_node n;
	if (lookup_node(a, q, &n) < 0)
		return;
	int r = db_node_set_drained(a->hd.db, n.id, drain);
	if (r < 0) {
		svc_error(q, "internal", "cannot update cluster.db: %s", head_store_error(r));
		return;
	}
	db_event_add(a->hd.db, util_now(), n.id, drain ? "drained" : "undrained", "");
	log_info(drain ? "node_drained" : "node_undrained", "node=%s", n.name);
	svc_reply(q, json_pack("{s:s, s:b}", "name", n.name, "drained", drain));
}

static void revoke_session(struct agent *a, const char *node_id)
{
	struct session *s = peers_session(a, node_id);
	if (s) {
		conn_send_new(s->c, proto_error(0, "revoked",
						"this node was removed from the cluster and its certificate revoked"));
		conn_close(s->c, 0);
	}
}

void head_node_rm(struct agent *a, const struct svc_req *q)
{
	db_node n;
	if (lookup_node(a, q, &n) < 0)
		return;
	if (strcmp(n.id, a->id.node_id) == 0) {
		svc_error(q, "is_head",
			      "'%s' is the head; the head cannot be removed from its own cluster", n.name);
		return;
	}
	/* A service's plan names its nodes: removing one would leave it
	 * restarting against a node that no longer exists. */
	char svcs[300];
	int r = db_services_using(a->hd.db, NULL, n.id, svcs, sizeof svcs);
	if (r > 0) {
		svc_error(q, "busy", "'%s' runs a rank of service(s) %s; stop and remove them first "
			  "('sparkctl svc stop NAME', 'sparkctl svc rm NAME'), then remove the node",
			  n.name, svcs);
		return;
	}
	r = db_node_remove(a->hd.db, n.id, util_now());
	if (r < 0) {
		svc_error(q, "internal", "cannot update cluster.db: %s", head_store_error(r));
		return;
	}
	db_event_add(a->hd.db, util_now(), NULL, "node_removed", n.name);
	log_info("node_removed", "node=%s id=%s serial=%s", n.name, n.id, n.cert_serial);
	revoke_session(a, n.id);
	head_crl_update(a);
	svc_reply(q, json_pack("{s:s, s:s, s:s}", "name", n.name, "id", n.id,
					"revoked_serial", n.cert_serial));
}

int head_token_create(struct agent *a, int64_t ttl, int64_t uses, const char *descr,
		      char *token_out, size_t len, char *id_out)
{
	db_cluster cl;
	int r = db_cluster_get(a->hd.db, &cl);
	if (r < 0)
		return r;
	struct join_token t;
	util_strlcpy(t.ca_hash, cl.ca_hash, sizeof t.ca_hash);
	if ((r = pki_random_hex(t.id, 8)) < 0 || (r = pki_random_hex(t.secret, 16)) < 0)
		return r;
	db_token row = {0};
	util_strlcpy(row.id, t.id, sizeof row.id);
	pki_sha256_hex(t.secret, strlen(t.secret), row.secret_hash);
	util_strlcpy(row.description, descr ? descr : "", sizeof row.description);
	row.created_at = util_now();
	row.expires_at = ttl > 0 ? row.created_at + ttl : 0;
	row.uses_left = uses > 0 ? uses : -1;
	if ((r = db_token_add(a->hd.db, &row)) < 0)
		return r;
	token_format(&t, token_out, len);
	if (id_out)
		util_strlcpy(id_out, t.id, 17);
	log_info("token_created", "token_id=%s ttl_s=%lld uses=%lld", t.id, (long long)ttl,
		 (long long)uses);
	return 0;
}

static json_t *token_json(const db_token *t)
{
	int64_t now = util_now();
	const char *state = t->revoked ? "revoked"
			    : (t->expires_at && t->expires_at <= now) ? "expired"
			    : t->uses_left == 0 ? "used"
			    : "valid";
	return json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I}", "id", t->id, "state", state,
			 "description", t->description, "created_at", (json_int_t)t->created_at,
			 "expires_at", (json_int_t)t->expires_at, "uses_left",
			 (json_int_t)t->uses_left, "uses", (json_int_t)t->uses);
}

void head_token_create_req(struct agent *a, const struct svc_req *q)
{
	const json_t *req = q->msg;
	int64_t ttl = proto_int(req, "ttl_s", 86400);
	int64_t uses = proto_int(req, "uses", 0);
	if (ttl < 0 || uses < 0 || ttl > UTIL_TTL_MAX_S || uses > INT32_MAX) {
		svc_error(q, "bad_request",
			      "ttl must be 0..%lld s (10 years) and uses 0..%d", (long long)UTIL_TTL_MAX_S,
			      INT32_MAX);
		return;
	}
	char tok[160], id[17];
	const char *descr = proto_str(req, "description");
	int r = head_token_create(a, ttl, uses, descr, tok, sizeof tok, id);
	if (r < 0) {
		svc_error(q, "internal", "cannot store the token in cluster.db: %s",
			      head_store_error(r));
		return;
	}
	char cmd[400];
	db_node head;
	db_node_get(a->hd.db, a->id.node_id, &head);
	snprintf(cmd, sizeof cmd, "sparkctl join %s --token %s", head.address, tok);
	db_token row;
	db_token_get(a->hd.db, id, &row);
	json_t *d = token_json(&row);
	json_object_set_new(d, "token", json_string(tok));
	json_object_set_new(d, "join_command", json_string(cmd));
	svc_reply(q, d);
}

void head_token_ls(struct agent *a, const struct svc_req *q)
{
	db_token *t = NULL;
	size_t n = 0;
	if (db_token_list(a->hd.db, &t, &n) < 0) {
		svc_error(q, "internal", "cannot read cluster.db");
		return;
	}
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, token_json(&t[i]));
	free(t);
	svc_reply(q, json_pack("{s:o}", "tokens", arr));
}

void head_token_revoke(struct agent *a, const struct svc_req *q)
{
	const json_t *req = q->msg;
	const char *id = proto_str(req, "token_id");
	if (!id || db_token_revoke(a->hd.db, id) < 0) {
		svc_error(q, "not_found",
			      "no token with id '%s'; 'sparkctl token ls' lists them", id ? id : "");
		return;
	}
	log_info("token_revoked", "token_id=%s", id);
	svc_reply(q, json_pack("{s:s, s:s}", "id", id, "state", "revoked"));
}

void head_node_drain(struct agent *a, const struct svc_req *q)
{
	r_node_drain(a, q, true);
}

void head_node_undrain(struct agent *a, const struct svc_req *q)
{
	r_node_drain(a, q, false);
}

/* ---- liveness ----------------------------------------------------------- */

/* The one place a node's state changes (state and event in one transaction). */
static void set_state(struct agent *a, const db_node *n, const char *state)
{
	if (db_node_transition(a->hd.db, n->id, state, NULL, util_now()) > 0)
		log_info("node_state", "node=%s from=%s to=%s", n->name, n->state, state);
}

/* Joins that never connected within security.join_expire_s are undone: the
 * row goes, its certificate is revoked and its token use given back. */
static void expire_joins(struct agent *a, int64_t now)
{
	db_node *gone = NULL;
	size_t n = 0;
	if (db_join_expire(a->hd.db, now - a->join_expire_s, now, &gone, &n) < 0 || n == 0) {
		free(gone);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		db_event_add(a->hd.db, now, NULL, "join_expired", gone[i].name);
		log_info("join_expired", "node=%s id=%s serial=%s", gone[i].name, gone[i].id,
			 gone[i].cert_serial);
	}
	free(gone);
	head_crl_update(a);
}

static void self_tick(struct agent *a);
static void peer_mem(struct agent *a, const db_node *n, const json_t *msg);

static void on_live_timer(uv_timer_t *t)
{
	struct agent *a = t->data;
	db_node *nodes = NULL;
	size_t n = 0;
	if (db_node_list(a->hd.db, &nodes, &n) < 0)
		return;
	uint64_t now_ms = util_now_ms();
	int64_t now = util_now();
	peers_sweep_sessions(a);
	self_tick(a);
	bool expired = false; /* a join that never connected, and is past its time */
	for (size_t i = 0; i < n; i++) {
		if (strcmp(nodes[i].state, "joining") == 0) {
			expired |= nodes[i].joined_at < now - a->join_expire_s;
			continue;
		}
		if (strcmp(nodes[i].id, a->id.node_id) == 0)
			continue;
		struct session *s = peers_session(a, nodes[i].id);
		/* Without a session a node is quiet since it was last seen, but at
		 * most since this sparkd started: after a head restart its members
		 * reconnect with back-off, and the stored last_seen may be up to
		 * HEAD_SEEN_FLUSH_S old; each gets AGENT_UNREACHABLE_MS to come back
		 * before its jobs (and services' runs) are lost. */
		int64_t seen = nodes[i].last_seen > a->started_at ? nodes[i].last_seen : a->started_at;
		uint64_t quiet_ms = s ? now_ms - s->last_ms
				      : (uint64_t)(now > seen ? now - seen : 0) * 1000;
		const char *want = quiet_ms >= AGENT_DOWN_MS         ? "down"
				   : quiet_ms >= AGENT_UNREACHABLE_MS ? "unreachable"
								      : "ready";
		/* Only a live session proves readiness. */
		if (!s && strcmp(want, "ready") == 0)
			continue;
		set_state(a, &nodes[i], want);
	}
	free(nodes);
	if (expired)
		expire_joins(a, now);
	agent_settle(a);
}

/* ---- sessions (worker connections) --------------------------------------- */

static void join_refused(struct session *s, const json_t *req, int r, const char *name,
			 const char *tid)
{
	const char *code, *msg;
	char buf[256];
	switch (r) {
	case -EKEYEXPIRED:
		code = "token_expired";
		msg = "the join token has expired; make a new one on the head with 'sparkctl token create'";
		break;
	case -EKEYREVOKED:
		code = "token_revoked";
		msg = "the join token was revoked; make a new one on the head with 'sparkctl token create'";
		break;
	case -EUSERS:
		code = "token_used";
		msg = "the join token has no uses left; make a new one on the head with 'sparkctl token create'";
		break;
	case -EEXIST:
		code = "name_taken";
		msg = "a node with this name is already in the cluster; pick another with --name "
		      "or remove the old one with 'sparkctl node rm'";
		break;
	case -ENOENT:
		code = "token_invalid";
		msg = "the join token is not known to this cluster; make a new one on the head with "
		      "'sparkctl token create'";
		break;
	default:
		code = "internal";
		snprintf(buf, sizeof buf, "the head could not record the join: %s", head_store_error(r));
		msg = buf;
		break;
	}
	log_warn("join_refused", "name=%s token_id=%s code=%s peer=%s", log_q(name), log_q(tid), code,
		 conn_peer_name(s->c));
	svc_error_to(s->c, req, code, "%s", msg);
	conn_close(s->c, 0);
}

static void handle_join(struct agent *a, struct session *s, const json_t *req)
{
	const char *tid = proto_str(req, "token_id");
	const char *secret = proto_str(req, "secret");
	const char *name = proto_str(req, "name");
	const char *csr = proto_str(req, "csr");
	const char *addr = proto_str(req, "address");
	const char *ver = proto_str(req, "version");
	conn *c = s->c;
	if (!tid || !secret || !name || !csr || !addr) {
		svc_error_to(s->c, req, "bad_request", "join needs token_id, secret, name, csr, address");
		conn_close(c, 0);
		return;
	}
	if (!util_valid_name(name)) {
		svc_error_to(s->c, req, "bad_name",
			      "'%s' is not a valid node name (1-63 of a-z, 0-9, '-'); pass --name", name);
		conn_close(c, 0);
		return;
	}
	db_node node = {0};
	char hash[PKI_HASH_HEX];
	pki_sha256_hex(secret, strlen(secret), hash);
	if (pki_csr_spki_sha256(csr, node.key_hash) < 0) {
		svc_error_to(s->c, req, "bad_csr", "the certificate request is invalid");
		conn_close(c, 0);
		return;
	}
	/* A retry of a join whose answer was lost (the head died after storing
	 * it, the link broke, the joiner could not write its keys): the same
	 * token and name, never connected. It finishes that join under the same
	 * node id and token use. */
	db_node pending;
	bool resume = db_join_pending(a->hd.db, tid, hash, name, &pending) == 0;
	if (resume)
		util_strlcpy(node.id, pending.id, sizeof node.id);
	else
		pki_random_hex(node.id, 16);
	char *cert_pem = NULL;
	if (pki_sign_csr(a->hd.ca, a->hd.ca_key, csr, node.id, AGENT_CERT_DAYS, &cert_pem,
			 node.cert_serial) < 0) {
		svc_error_to(s->c, req, "bad_csr", "the certificate request is invalid");
		conn_close(c, 0);
		return;
	}
	util_strlcpy(node.name, name, sizeof node.name);
	util_strlcpy(node.role, "worker", sizeof node.role);
	util_strlcpy(node.state, "ready", sizeof node.state);
	util_strlcpy(node.address, addr, sizeof node.address);
	util_strlcpy(node.version, ver ? ver : "", sizeof node.version);
	node.joined_at = node.last_seen = util_now();
	int r = resume ? db_join_resume(a->hd.db, tid, hash, &node, pending.cert_serial, util_now())
		       : db_join_commit(a->hd.db, tid, hash, util_now(), &node);
	if (r < 0) {
		free(cert_pem);
		join_refused(s, req, r, name, tid);
		return;
	}
	db_event_add(a->hd.db, util_now(), node.id, resume ? "join_resumed" : "joined", node.name);
	log_info(resume ? "join_resumed" : "node_joined", "node=%s id=%s addr=%s serial=%s", node.name,
		 node.id, node.address, node.cert_serial);
	if (resume)
		head_crl_update(a); /* the certificate the lost answer carried */
	db_cluster cl;
	db_cluster_get(a->hd.db, &cl);
	char *ca_pem = pki_cert_to_pem(a->hd.ca);
	char *crl = head_crl_pem(a);
	db_node head;
	db_node_get(a->hd.db, a->id.node_id, &head);
	json_t *d = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "node_id",
			      node.id, "node_name", node.name, "cert", cert_pem, "ca",
			      ca_pem ? ca_pem : "", "cluster_id", cl.id, "cluster_name", cl.name,
			      "cluster_secret", cl.secret, "head_id", head.id, "head_addr",
			      head.address, "crl", crl ? crl : "");
	free(cert_pem);
	free(ca_pem);
	free(crl);
	svc_send_result(s->c, proto_id(req), d);
	conn_close(c, 0);
}

void head_hello(struct agent *a, struct session *s, const json_t *req)
{
	const char *addr = proto_str(req, "address");
	const char *ver = proto_str(req, "version");
	db_node n;
	if (db_node_get(a->hd.db, s->node_id, &n) < 0) { /* removed while it connected */
		svc_error_to(s->c, req, "revoked", "this node is no longer in the cluster");
		conn_close(s->c, 0);
		return;
	}
	peers_close_others(a, s); /* one session per node: a reconnect replaces a stale one */
	bool first = false;
	db_node_transition(a->hd.db, n.id, "ready", NULL, util_now());
	db_node_connected(a->hd.db, s->node_id, util_now(), addr && *addr ? addr : n.address,
			  ver ? ver : n.version, &first);
	db_event_add(a->hd.db, util_now(), n.id, "connected", conn_peer_name(s->c));
	log_info(first ? "join_complete" : "node_connected", "node=%s peer=%s", n.name,
		 conn_peer_name(s->c));
	db_cluster cl;
	db_cluster_get(a->hd.db, &cl);
	db_node head;
	db_node_get(a->hd.db, a->id.node_id, &head);
	char *crl = head_crl_pem(a);
	svc_send_result(s->c, proto_id(req), json_pack("{s:s, s:s, s:s, s:s, s:s}", "cluster_id", cl.id,
					    "cluster_name", cl.name, "node_name", n.name, "head_addr",
					    head.address, "crl", crl ? crl : ""));
	free(crl);
	peer_mem(a, &n, req);
	struct svc_event_arg arg = {.node_id = n.id};
	svc_emit(a, SVC_EV_NODE_UP, &arg);
}

void head_leave(struct agent *a, struct session *s, const json_t *req)
{
	db_node n;
	int r = db_node_get(a->hd.db, s->node_id, &n);
	if (r == 0)
		r = db_node_remove(a->hd.db, n.id, util_now());
	if (r < 0) {
		svc_error_to(s->c, req, "internal", "the head could not remove this node: %s",
			      head_store_error(r));
		return;
	}
	db_event_add(a->hd.db, util_now(), NULL, "node_left", n.name);
	log_info("node_left", "node=%s id=%s", n.name, n.id);
	s->authed = false;
	svc_send_result(s->c, proto_id(req), json_pack("{s:s}", "left", n.name));
	conn_close(s->c, 0);
	head_crl_update(a);
}

/* ---- memory reports (issue 19) -------------------------------------------- */

/* Store a node's memory report (n: its row as stored). Heartbeats come every
 * second; a row is written when the total or budget changed, when what is
 * available moved by HEAD_MEM_STEP, or when the stored one is HEAD_SEEN_FLUSH_S
 * old: a quiet cluster costs about one small write per node per 10 s. */
#define HEAD_MEM_STEP ((int64_t)64 << 20)
static void store_mem(struct agent *a, const db_node *n, const struct cluster_mem *m)
{
	int64_t now = util_now();
	int64_t moved = m->available - n->mem_available;
	if (m->total == n->mem_total && m->budget == n->mem_budget && moved < HEAD_MEM_STEP &&
	    -moved < HEAD_MEM_STEP && now - n->mem_at < HEAD_SEEN_FLUSH_S)
		return;
	if (db_node_set_memory(a->hd.db, n->id, m->total, m->available, m->budget, now) < 0)
		log_warn("node_memory_save_failed", "node=%s", n->name);
}

static void peer_mem(struct agent *a, const db_node *n, const json_t *msg)
{
	json_t *o = json_object_get(msg, "mem");
	struct cluster_mem m;
	if (!o)
		return;
	if (cluster_mem_parse(o, &m) < 0) {
		log_warn("bad_memory_report", "node=%s", n->name);
		return;
	}
	store_mem(a, n, &m);
}

/* The head's own node has no heartbeat: it reads its memory here (liveness
 * tick), and says its node is up once the services have started. */
static void self_tick(struct agent *a)
{
	uint64_t now_ms = util_now_ms();
	if (a->hd.self_up && now_ms - a->hd.self_mem_ms < AGENT_HEARTBEAT_MS)
		return;
	a->hd.self_mem_ms = now_ms;
	db_node self;
	struct cluster_mem m;
	if (db_node_get(a->hd.db, a->id.node_id, &self) == 0 && cluster_mem_read(a, &m) == 0)
		store_mem(a, &self, &m);
	if (!a->hd.self_up) {
		a->hd.self_up = true;
		struct svc_event_arg arg = {.node_id = a->id.node_id};
		svc_emit(a, SVC_EV_NODE_UP, &arg);
	}
}

void head_heartbeat(struct agent *a, struct session *s, const json_t *msg)
{
	db_node n;
	if (db_node_get(a->hd.db, s->node_id, &n) < 0)
		return;
	peer_mem(a, &n, msg);
	if (db_node_transition(a->hd.db, n.id, "ready", NULL, util_now()) > 0) {
		log_info("node_state", "node=%s from=%s to=ready", n.name, n.state);
		db_node_seen(a->hd.db, n.id, util_now(), n.address, n.version);
	} else if (util_now() - n.last_seen >= HEAD_SEEN_FLUSH_S) {
		db_node_touch(a->hd.db, n.id, util_now());
	}
}

/* ---- membership policy for the sessions (sessions.c, a->hooks) ------------ */

/* The member a verified certificate names: its CN is a node of cluster.db
 * whose stored serial is the certificate's, and that serial is not revoked. */
static int session_auth(struct agent *a, X509 *peer, char *node_id, size_t len)
{
	char cn[64], serial[41];
	db_node n;
	if (pki_cert_cn(peer, cn, sizeof cn) < 0 || pki_cert_serial(peer, serial) < 0 ||
	    db_node_get(a->hd.db, cn, &n) < 0 || strcmp(n.cert_serial, serial) != 0 ||
	    db_cert_revoked(a->hd.db, serial) != 0) {
		log_warn("cert_refused", "cn=%s serial=%s", log_q(cn), serial);
		return -EPERM;
	}
	util_strlcpy(node_id, n.id, len);
	return 0;
}

/* Before a certificate: only a join. */
static void session_preauth(struct agent *a, struct session *s, const json_t *msg)
{
	if (strcmp(proto_type(msg), "join") == 0) {
		handle_join(a, s, msg);
		return;
	}
	svc_error_to(s->c, msg, "unauthenticated",
		     "present a node certificate, or send a join with a token");
	conn_close(s->c, 0);
}

static void session_closed(struct agent *a, const struct session *s)
{
	db_node_touch(a->hd.db, s->node_id, session_seen(s)); /* see HEAD_SEEN_FLUSH_S */
}

void head_hooks(struct agent *a)
{
	a->hooks.session_auth = session_auth;
	a->hooks.session_preauth = session_preauth;
	a->hooks.session_closed = session_closed;
}

/* A database failure as a person can act on it (ENOSPC is SQLite's "database
 * or disk is full"). */
const char *head_store_error(int r)
{
	switch (r) {
	case -ENOSPC:
		return "the database or disk is full: free space on the file system of the state "
		       "directory, then try again";
	case -EROFS:
		return "the state directory is read-only";
	case -EBUSY:
		return "cluster.db is busy (another process holds it)";
	default:
		return strerror(r < 0 ? -r : r);
	}
}

/* A new CRL from cluster.db (caller frees). */
static char *make_crl(struct agent *a)
{
	char **serials = NULL;
	size_t n = 0;
	char *pem = NULL;
	if (db_revoked_list(a->hd.db, &serials, &n) == 0)
		pki_make_crl(a->hd.ca, a->hd.ca_key, (const char *const *)serials, n, (long)util_now(),
			     AGENT_CERT_DAYS, &pem);
	db_strv_free(serials, n);
	return pem;
}

/* The current CRL (caller frees): the one head_crl_update last made, so that
 * every answer carries the same text until something is revoked. */
char *head_crl_pem(struct agent *a)
{
	return a->hd.crl_pem ? strdup(a->hd.crl_pem) : make_crl(a);
}

int head_crl_update(struct agent *a)
{
	char *pem = make_crl(a);
	if (!pem) {
		log_error("crl_failed", "reason=%s", "cannot make the revocation list");
		return -EIO;
	}
	char p[512], err[256] = "";
	identity_paths(a, "crl.pem", p, sizeof p);
	int r = pki_write_pem_text(p, pem, 0644);
	if (r == 0)
		r = agent_tls_setup(a, err, sizeof err);
	if (r < 0)
		log_error("crl_failed", "err=%d detail=%s", r, log_q(err));
	json_t *m = proto_msg("crl", 0);
	json_object_set_new(m, "crl", json_string(pem));
	for (struct session *s = a->hd.sessions; s; s = s->next)
		if (s->authed && !s->closing)
			conn_send(s->c, m);
	json_decref(m);
	free(a->hd.crl_pem);
	a->hd.crl_pem = pem;
	return r;
}

/* A head made before certificates carried roles gets a head certificate for
 * its own key (so workers' pins of that key still hold). */
static int upgrade_head_cert(struct agent *a, char *err, size_t errlen)
{
	char crt[512], key[512];
	identity_paths(a, "node.crt", crt, sizeof crt);
	identity_paths(a, "node.key", key, sizeof key);
	X509 *cur = NULL, *x = NULL;
	EVP_PKEY *k = NULL;
	int r = pki_read_cert(crt, &cur);
	if (r == 0 && pki_cert_role(cur) == PKI_ROLE_HEAD) {
		X509_free(cur);
		return 0;
	}
	char serial[41], old[41] = "";
	if (r == 0)
		pki_cert_serial(cur, old);
	if (r == 0)
		r = pki_read_key(key, &k);
	if (r == 0)
		r = pki_issue_head(a->hd.ca, a->hd.ca_key, k, a->id.node_id, AGENT_CERT_DAYS, &x, serial);
	char *leaf = r == 0 ? pki_cert_to_pem(x) : NULL, *ca = r == 0 ? pki_cert_to_pem(a->hd.ca) : NULL;
	if (r == 0 && (!leaf || !ca))
		r = -ENOMEM;
	if (r == 0) {
		size_t ll = strlen(leaf), cl = strlen(ca);
		char *chain = malloc(ll + cl + 1);
		r = chain ? 0 : -ENOMEM;
		if (chain) {
			memcpy(chain, leaf, ll);
			memcpy(chain + ll, ca, cl + 1);
			r = pki_write_pem_text(crt, chain, 0644);
			free(chain);
		}
	}
	if (r == 0)
		log_info("head_cert_upgraded", "old_serial=%s serial=%s", old, serial);
	else
		snprintf(err, errlen, "cannot give the head a head certificate (%s): %s", crt,
			 strerror(-r));
	free(leaf);
	free(ca);
	X509_free(cur);
	X509_free(x);
	EVP_PKEY_free(k);
	return r;
}

/* ---- start, init, stop ---------------------------------------------------- */

static int load_ca(struct agent *a, char *err, size_t errlen)
{
	char p[512];
	identity_paths(a, "ca.crt", p, sizeof p);
	if (pki_read_cert(p, &a->hd.ca) < 0) {
		snprintf(err, errlen, "cannot read the cluster CA %s", p);
		return -EIO;
	}
	identity_paths(a, "ca.key", p, sizeof p);
	if (pki_read_key(p, &a->hd.ca_key) < 0) {
		snprintf(err, errlen, "cannot read the cluster CA key %s", p);
		return -EIO;
	}
	return 0;
}

static int open_db(struct agent *a, char *err, size_t errlen)
{
	char p[512];
	identity_paths(a, "cluster.db", p, sizeof p);
	int r = db_open(p, &a->hd.db);
	if (r < 0)
		snprintf(err, errlen, "cannot open %s: %s", p, strerror(-r));
	return r;
}

static void start_timers(struct agent *a)
{
	if (!a->hd.live_timer_on) {
		uv_timer_init(a->loop, &a->hd.live_timer);
		a->hd.live_timer.data = a;
		a->hd.live_timer_on = true;
	}
	a->hd.self_up = false; /* the first tick: after every service started */
	uv_timer_start(&a->hd.live_timer, on_live_timer, 1000, 500);
}

int head_start(struct agent *a, char *err, size_t errlen)
{
	int r;
	if ((r = load_ca(a, err, errlen)) < 0 || (r = open_db(a, err, errlen)) < 0 ||
	    (r = upgrade_head_cert(a, err, errlen)) < 0 || (r = head_crl_update(a)) < 0 ||
	    (r = agent_listen(a, err, errlen)) < 0)
		return r;
	/* Our own address may have changed with --listen. */
	db_node self;
	if (db_node_get(a->hd.db, a->id.node_id, &self) == 0)
		db_node_seen(a->hd.db, self.id, util_now(), self.address, SPARK_VERSION);
	start_timers(a);
	agent_busy(a); /* CA and keys loaded, migrations run */
	return 0;
}

void head_stop(struct agent *a)
{
	peers_close_sessions(a);
	if (a->hd.live_timer_on)
		uv_timer_stop(&a->hd.live_timer); /* closed by main's final walk */
}

void head_init(struct agent *a, const struct svc_req *q)
{
	const json_t *req = q->msg;
	const char *name = proto_str(req, "name");
	if (!name || !*name)
		name = "spark";
	if (!util_valid_name(name)) {
		svc_error(q, "bad_name",
			      "'%s' is not a valid cluster name (1-63 of a-z, 0-9, '-')", name);
		return;
	}
	int64_t ttl = proto_int(req, "ttl_s", 86400);
	if (ttl < 0 || ttl > UTIL_TTL_MAX_S) {
		svc_error(q, "bad_request", "the token ttl must be 0..%lld s (10 years)",
			      (long long)UTIL_TTL_MAX_S);
		return;
	}
	const char *adv = proto_str(req, "advertise");
	char why[256];
	if (adv && *adv && util_check_hostport(adv, a->opts.listen_port, why, sizeof why) < 0) {
		svc_error(q, "bad_request", "--advertise %s: %s", adv, why);
		return;
	}
	char err[512] = "";
	/* Bind first: if the port is taken, nothing is written. */
	if (agent_listen(a, err, sizeof err) < 0) {
		svc_error(q, "listen_failed", "%s", err);
		return;
	}
	identity_wipe(a);
	EVP_PKEY *node_key = NULL;
	X509 *node_cert = NULL;
	struct identity id = {.role = ROLE_HEAD};
	db_cluster cl = {0};
	db_node head = {0};
	int r = pki_make_key(&a->hd.ca_key);
	if (r == 0)
		r = pki_make_ca(name, a->hd.ca_key, &a->hd.ca);
	pki_random_hex(cl.id, 16);
	pki_random_hex(id.node_id, 16);
	pki_random_hex(cl.secret, 32);
	if (r == 0)
		r = pki_make_key(&node_key);
	if (r == 0)
		r = pki_issue_head(a->hd.ca, a->hd.ca_key, node_key, id.node_id, AGENT_CERT_DAYS,
				   &node_cert, head.cert_serial);
	char p[512];
	if (r == 0) {
		identity_paths(a, "ca.key", p, sizeof p);
		r = pki_write_key(p, a->hd.ca_key);
	}
	if (r == 0) {
		identity_paths(a, "ca.crt", p, sizeof p);
		r = pki_write_cert(p, a->hd.ca);
	}
	if (r == 0) {
		identity_paths(a, "node.key", p, sizeof p);
		r = pki_write_key(p, node_key);
	}
	if (r == 0) {
		char *leaf = pki_cert_to_pem(node_cert), *ca = pki_cert_to_pem(a->hd.ca);
		size_t ll = leaf ? strlen(leaf) : 0, cl2 = ca ? strlen(ca) : 0;
		char *chain = malloc(ll + cl2 + 1);
		if (leaf && ca && chain) {
			memcpy(chain, leaf, ll);
			memcpy(chain + ll, ca, cl2 + 1);
			identity_paths(a, "node.crt", p, sizeof p);
			r = pki_write_pem_text(p, chain, 0644);
		} else {
			r = -ENOMEM;
		}
		free(leaf);
		free(ca);
		free(chain);
	}
	EVP_PKEY_free(node_key);
	X509_free(node_cert);
	if (r == 0) {
		util_strlcpy(cl.name, name, sizeof cl.name);
		r = pki_spki_sha256(a->hd.ca, cl.ca_hash);
		util_strlcpy(cl.head_id, id.node_id, sizeof cl.head_id);
		cl.created_at = util_now();
	}
	if (r == 0)
		r = open_db(a, err, sizeof err);
	if (r == 0) {
		util_strlcpy(head.id, id.node_id, sizeof head.id);
		util_strlcpy(head.name, a->opts.name, sizeof head.name);
		util_strlcpy(head.role, "head", sizeof head.role);
		util_strlcpy(head.state, "ready", sizeof head.state);
		advertise_addr(a, proto_str(req, "advertise"), head.address, sizeof head.address);
		util_strlcpy(head.version, SPARK_VERSION, sizeof head.version);
		head.joined_at = head.last_seen = util_now();
		r = db_cluster_create(a->hd.db, &cl, &head);
	}
	if (r == 0) {
		util_strlcpy(id.cluster_id, cl.id, sizeof id.cluster_id);
		util_strlcpy(id.cluster_name, cl.name, sizeof id.cluster_name);
		util_strlcpy(id.node_name, head.name, sizeof id.node_name);
		util_strlcpy(id.head_id, head.id, sizeof id.head_id);
		util_strlcpy(id.head_addr, head.address, sizeof id.head_addr);
		util_strlcpy(id.cluster_secret, cl.secret, sizeof id.cluster_secret);
		util_strlcpy(id.advertise, head.address, sizeof id.advertise);
		a->id = id;
		r = identity_save(a);
	}
	if (r == 0)
		r = head_crl_update(a); /* crl.pem, then the TLS contexts */
	char tok[160], tid[17];
	if (r == 0)
		r = head_token_create(a, ttl, 0, "made by init", tok, sizeof tok, tid);
	if (r < 0) {
		log_error("init_failed", "err=%d detail=%s", r, log_q(err));
		if (a->hd.db) {
			db_close(a->hd.db);
			a->hd.db = NULL;
		}
		identity_wipe(a);
		agent_close_listener(a);
		svc_error(q, "init_failed", "could not initialise the cluster: %s",
			      err[0] ? err : strerror(-r));
		return;
	}
	start_timers(a);
	agent_busy(a); /* key generation, certificates, a new cluster.db */
	db_event_add(a->hd.db, util_now(), head.id, "init", cl.name);
	svc_emit(a, SVC_EV_ROLE, NULL);
	log_info("cluster_init", "cluster=%s id=%s head=%s addr=%s", cl.name, cl.id, head.name,
		 head.address);
	char cmd[400];
	snprintf(cmd, sizeof cmd, "sparkctl join %s --token %s", head.address, tok);
	svc_reply(q,
		      json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:I}", "cluster_id", cl.id,
				"cluster_name", cl.name, "head", head.name, "head_address",
				head.address, "token", tok, "token_id", tid, "join_command", cmd,
				"token_expires_at", (json_int_t)(ttl > 0 ? util_now() + ttl : 0)));
}

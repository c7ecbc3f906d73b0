/* worker: joining a cluster and staying in it. The join pins the head's CA by
 * the hash in the token before anything secret is sent, proves the token
 * secret, and sends a CSR (the node key never leaves this machine). Afterwards
 * the worker keeps one mutual-TLS session to the head: hello, a heartbeat every
 * second, reconnect with capped exponential backoff and jitter, forever, and it
 * answers the head's session frames (crl, revocation); the services' frames
 * it dispatches by their tables (peers.c). */
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
#include <sys/socket.h>
#include <unistd.h>

/* A join's CLI waits for the first session to the head (a join is complete
 * when the node connected with its identity). */
struct join_wait {
	conn *cli;
	json_int_t orig_id;
	json_t *answer;
};

static void schedule_reconnect(struct agent *a);
static void connect_head(struct agent *a);
static void take_crl(struct agent *a, const char *pem);

/* ---- join ---------------------------------------------------------------- */

struct join_op {
	struct agent *a;
	conn *cli;
	json_t *req;              /* the CLI request (for the reply id) */
	struct join_token tok;
	char host[128];
	int port;
	char name[64];
	EVP_PKEY *key;
	char *csr;
	conn *c;
	uv_timer_t retry;
	uint64_t deadline_ms, started_ms;
	char last_err[256];
	char head_cn[64];         /* the leaf the head presented (checked again in the answer) */
	char head_key[PKI_HASH_HEX];
	bool not_head;            /* the peer is a member, not the head: nothing was sent */
	bool done;
};

static void free_join(uv_handle_t *h) { free(h->data); }

static void join_finish(struct join_op *j)
{
	struct agent *a = j->a;
	if (a->wk.join == j)
		a->wk.join = NULL;
	json_decref(j->req);
	EVP_PKEY_free(j->key);
	free(j->csr);
	uv_close((uv_handle_t *)&j->retry, free_join);
}

static void join_fail(struct join_op *j, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void join_fail(struct join_op *j, const char *code, const char *fmt, ...)
{
	if (j->done)
		return;
	j->done = true;
	char msg[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	log_warn("join_failed", "head=%s:%d code=%s reason=%s", j->host, j->port, code, log_q(msg));
	if (j->cli)
		svc_error_to(j->cli, j->req, code, "%s", msg);
	if (j->c)
		conn_close(j->c, 0);
	if (j->a->id.role == ROLE_NONE)
		agent_close_listener(j->a);
	if (!j->c)
		join_finish(j);
}

static void local_address(struct agent *a, conn *c, char *out, size_t len)
{
	const char *lh = a->opts.listen_host;
	if (strcmp(lh, "0.0.0.0") != 0 && strcmp(lh, "::") != 0) {
		snprintf(out, len, strchr(lh, ':') ? "[%s]:%d" : "%s:%d", lh, a->opts.listen_port);
		return;
	}
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	char ip[64] = "127.0.0.1";
	if (getsockname(conn_fd(c), (struct sockaddr *)&ss, &sl) == 0) {
		if (ss.ss_family == AF_INET)
			uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof ip);
		else
			uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof ip);
	}
	snprintf(out, len, strchr(ip, ':') ? "[%s]:%d" : "%s:%d", ip, a->opts.listen_port);
}

static void on_join_ready(conn *c, int status)
{
	struct join_op *j = conn_data(c);
	if (status < 0) {
		snprintf(j->last_err, sizeof j->last_err, "%s", uv_strerror(status));
		return; /* on_close retries */
	}
	/* Pin: some certificate in the head's chain must be the CA named by the
	 * token, and the head's leaf must be signed by it. */
	STACK_OF(X509) *chain = conn_peer_chain(c);
	X509 *leaf = conn_peer_cert(c);
	X509 *ca = NULL;
	for (int i = 0; chain && i < sk_X509_num(chain); i++) {
		char h[PKI_HASH_HEX];
		X509 *x = sk_X509_value(chain, i);
		if (pki_spki_sha256(x, h) == 0 && pki_ct_equal(h, j->tok.ca_hash))
			ca = x;
		if (!leaf && i == 0)
			leaf = x;
	}
	if (!ca || !leaf || pki_verify(leaf, ca) < 0) {
		join_fail(j, "ca_mismatch",
			  "the head at %s:%d did not present the CA named in the token: possible "
			  "man-in-the-middle, or a token from another cluster; nothing was sent",
			  j->host, j->port);
		return;
	}
	/* The CA signs every member; only the head's certificate says OU=head.
	 * A member (or a removed one) answering here gets nothing: a worker's
	 * port says where its head is, which the close handler reports. */
	if (pki_cert_role(leaf) != PKI_ROLE_HEAD) {
		j->not_head = true;
		log_warn("join_not_head", "peer=%s:%d", j->host, j->port);
		return;
	}
	if (pki_cert_cn(leaf, j->head_cn, sizeof j->head_cn) < 0 ||
	    pki_spki_sha256(leaf, j->head_key) < 0) {
		join_fail(j, "ca_mismatch", "the head at %s:%d presented an unreadable certificate; "
					    "nothing was sent", j->host, j->port);
		return;
	}
	char addr[160];
	local_address(j->a, c, addr, sizeof addr);
	util_strlcpy(j->a->id.advertise, addr, sizeof j->a->id.advertise);
	json_t *m = proto_msg("join", 1);
	json_object_set_new(m, "token_id", json_string(j->tok.id));
	json_object_set_new(m, "secret", json_string(j->tok.secret));
	json_object_set_new(m, "name", json_string(j->name));
	json_object_set_new(m, "csr", json_string(j->csr));
	json_object_set_new(m, "address", json_string(addr));
	json_object_set_new(m, "version", json_string(SPARK_VERSION));
	conn_send_new(c, m);
}

static int save_join(struct agent *a, struct join_op *j, const json_t *d, char *err, size_t len)
{
	const char *cert = proto_str(d, "cert"), *ca = proto_str(d, "ca");
	const char *fields[] = {"node_id", "node_name", "cluster_id", "cluster_name",
				"cluster_secret", "head_id", "head_addr"};
	for (size_t i = 0; i < ARRAY_SIZE(fields); i++)
		if (!proto_str(d, fields[i])) {
			snprintf(err, len, "the head's answer lacks %s", fields[i]);
			return -EPROTO;
		}
	if (!cert || !ca) {
		snprintf(err, len, "the head's answer lacks the certificate");
		return -EPROTO;
	}
	if (strcmp(proto_str(d, "head_id"), j->head_cn) != 0) {
		snprintf(err, len, "the head's answer names head %s, but its certificate is %s",
			 proto_str(d, "head_id"), j->head_cn);
		return -EPROTO;
	}
	const char *crl = proto_str(d, "crl");
	X509 *cax = NULL;
	if (crl && *crl && (pki_cert_from_pem(ca, &cax) < 0 || pki_crl_check(crl, cax, NULL) < 0)) {
		X509_free(cax);
		snprintf(err, len, "the head's revocation list is not signed by the cluster CA");
		return -EPROTO;
	}
	X509_free(cax);
	char p[512];
	size_t cl = strlen(cert), al = strlen(ca);
	char *chain = malloc(cl + al + 1);
	if (!chain)
		return -ENOMEM;
	memcpy(chain, cert, cl);
	memcpy(chain + cl, ca, al + 1);
	identity_paths(a, "node.key", p, sizeof p);
	int r = pki_write_key(p, j->key);
	if (r == 0) {
		identity_paths(a, "node.crt", p, sizeof p);
		r = pki_write_pem_text(p, chain, 0644);
	}
	free(chain);
	if (r == 0) {
		identity_paths(a, "ca.crt", p, sizeof p);
		r = pki_write_pem_text(p, ca, 0644);
	}
	if (r == 0 && crl && *crl) {
		identity_paths(a, "crl.pem", p, sizeof p);
		r = pki_write_pem_text(p, crl, 0644);
	}
	if (r < 0) {
		snprintf(err, len, "cannot write keys to %s: %s", a->opts.state_dir, strerror(-r));
		return r;
	}
	struct identity id = {.role = ROLE_WORKER};
	util_strlcpy(id.node_id, proto_str(d, "node_id"), sizeof id.node_id);
	util_strlcpy(id.node_name, proto_str(d, "node_name"), sizeof id.node_name);
	util_strlcpy(id.cluster_id, proto_str(d, "cluster_id"), sizeof id.cluster_id);
	util_strlcpy(id.cluster_name, proto_str(d, "cluster_name"), sizeof id.cluster_name);
	util_strlcpy(id.cluster_secret, proto_str(d, "cluster_secret"), sizeof id.cluster_secret);
	util_strlcpy(id.head_id, proto_str(d, "head_id"), sizeof id.head_id);
	util_strlcpy(id.head_key, j->head_key, sizeof id.head_key);
	/* The head's own address (what it advertises), not whatever relayed the
	 * join (a port-forward, a tunnel); that one is kept as a fallback. */
	snprintf(id.joined_via, sizeof id.joined_via, strchr(j->host, ':') ? "[%s]:%d" : "%s:%d",
		 j->host, j->port);
	util_strlcpy(id.head_addr, proto_str(d, "head_addr"), sizeof id.head_addr);
	util_strlcpy(id.advertise, a->id.advertise, sizeof id.advertise);
	a->id = id;
	if ((r = identity_save(a)) < 0) {
		snprintf(err, len, "cannot write %s/identity.json: %s", a->opts.state_dir, strerror(-r));
		return r;
	}
	identity_paths(a, "join.key", p, sizeof p);
	unlink(p); /* node.key holds it now */
	return agent_tls_setup(a, err, len);
}

static void on_join_frame(conn *c, json_t *msg)
{
	struct join_op *j = conn_data(c);
	struct agent *a = j->a;
	const char *t = proto_type(msg);
	if (j->done) {
		json_decref(msg);
		return;
	}
	if (j->not_head) {
		const char *code = proto_str(msg, "code"), *m = proto_str(msg, "message");
		if (strcmp(t, "error") == 0 && code && strcmp(code, "not_head") == 0 && m)
			join_fail(j, "not_head",
				  "%s:%d is not the head of the cluster but one of its nodes; its head "
				  "is at %s: run 'sparkctl join %s --token ...' (nothing was sent)",
				  j->host, j->port, m, m);
		json_decref(msg);
		return;
	}
	if (strcmp(t, "error") == 0) {
		const char *code = proto_str(msg, "code");
		const char *m = proto_str(msg, "message");
		join_fail(j, code ? code : "refused", "the head refused the join: %s",
			  m ? m : "no reason given");
	} else if (strcmp(t, "result") == 0) {
		char err[512] = "";
		json_t *d = json_object_get(msg, "data");
		if (save_join(a, j, d, err, sizeof err) < 0) {
			identity_wipe(a);
			join_fail(j, "join_failed", "joined, but %s; fix that and run the same join "
						    "command again (the head keeps this join for %s)",
				  err, "a while");
		} else {
			j->done = true;
			log_info("joined", "cluster=%s node=%s head=%s", a->id.cluster_name,
				 a->id.node_name, a->id.head_addr);
			/* The CLI hears of it once the first session to the head is up:
			 * a join is complete when the node connected with its identity. */
			struct join_wait *w = j->cli ? calloc(1, sizeof *w) : NULL;
			if (w) {
				w->cli = j->cli;
				w->orig_id = proto_id(j->req);
				w->answer = json_pack("{s:s, s:s, s:s, s:s}", "cluster_name",
						      a->id.cluster_name, "cluster_id", a->id.cluster_id,
						      "node_name", a->id.node_name, "head_address",
						      a->id.head_addr);
				a->wk.join_wait = w;
			} else if (j->cli) {
				svc_error_to(j->cli, j->req, "internal", "out of memory");
			}
			j->cli = NULL;
			conn_close(c, 0);
			worker_start(a);
		}
	}
	json_decref(msg);
}

static void join_attempt(struct join_op *j);

static void on_join_retry(uv_timer_t *t) { join_attempt(t->data); }

static void on_join_close(conn *c, int err)
{
	struct join_op *j = conn_data(c);
	j->c = NULL;
	if (j->done) {
		join_finish(j);
		return;
	}
	if (j->not_head) {
		join_fail(j, "not_head",
			  "%s:%d is not the head of the cluster: it presented a node's certificate "
			  "(a member, or a removed one); nothing was sent. Run the join command "
			  "that 'sparkctl token create' prints on the head", j->host, j->port);
		return;
	}
	if (!j->last_err[0] || err)
		snprintf(j->last_err, sizeof j->last_err, "%s",
			 err ? (err > -4096 ? uv_strerror(err) : strerror(-err)) : "connection closed");
	if (util_now_ms() + 500 >= j->deadline_ms) {
		unsigned secs = (unsigned)((util_now_ms() - j->started_ms + 500) / 1000);
		join_fail(j, "head_unreachable",
			  "could not reach the head at %s:%d for %u s (%s); check the address, that "
			  "sparkd runs there, and that port %d is open",
			  j->host, j->port, secs, j->last_err, j->port);
		return;
	}
	uv_timer_start(&j->retry, on_join_retry, 500, 0);
}

static const struct conn_cbs join_cbs = {
	.on_ready = on_join_ready,
	.on_frame = on_join_frame,
	.on_close = on_join_close,
};

static SSL_CTX *join_ctx(void)
{
	static SSL_CTX *ctx;
	char err[256];
	if (!ctx)
		ctx = tls_client_ctx(NULL, NULL, NULL, err, sizeof err);
	return ctx;
}

static void join_attempt(struct join_op *j)
{
	j->last_err[0] = '\0';
	uint64_t left = j->deadline_ms > util_now_ms() ? j->deadline_ms - util_now_ms() : 1;
	int r = conn_connect_tcp(j->a->loop, j->host, j->port, join_ctx(),
				 (unsigned)(left < 5000 ? left : 5000), &join_cbs, j, &j->c);
	if (r < 0) {
		j->c = NULL;
		join_fail(j, "head_unreachable", "cannot connect to the head at %s:%d: %s", j->host,
			  j->port, r > -4096 ? uv_strerror(r) : strerror(-r));
	}
}

void worker_handle_join(struct agent *a, conn *c, const json_t *req)
{
	if (a->wk.join) {
		svc_error_to(c, req, "busy", "a join is already in progress");
		return;
	}
	const char *head = proto_str(req, "head");
	const char *token = proto_str(req, "token");
	const char *name = proto_str(req, "name");
	char err[512];
	struct join_op *j = calloc(1, sizeof *j);
	if (!j) {
		svc_error_to(c, req, "internal", "out of memory");
		return;
	}
	j->a = a;
	if (!head || util_split_hostport(head, SPARK_DEFAULT_PORT, j->host, sizeof j->host,
					 &j->port) < 0) {
		free(j);
		svc_error_to(c, req, "bad_request", "bad head address '%s'; use HOST[:PORT]",
			      head ? head : "");
		return;
	}
	if (token_parse(token, &j->tok, err, sizeof err) < 0) {
		free(j);
		svc_error_to(c, req, "bad_token", "%s", err);
		return;
	}
	util_strlcpy(j->name, name && *name ? name : a->opts.name, sizeof j->name);
	if (!util_valid_name(j->name)) {
		free(j);
		svc_error_to(c, req, "bad_name",
			      "'%s' is not a valid node name (1-63 of a-z, 0-9, '-'); pass --name", name);
		return;
	}
	if (a->id.removed)
		identity_wipe(a);
	if (agent_listen(a, err, sizeof err) < 0) {
		free(j);
		svc_error_to(c, req, "listen_failed", "%s", err);
		return;
	}
	/* The key is stored before the head is contacted: a join whose answer is
	 * lost (the head died, this disk filled up) is retried with the same key,
	 * and the head then finishes that join instead of refusing the token. */
	char kp[512];
	identity_paths(a, "join.key", kp, sizeof kp);
	int kr = pki_read_key(kp, &j->key);
	if (kr < 0) {
		kr = pki_make_key(&j->key);
		if (kr == 0)
			kr = pki_write_key(kp, j->key);
		if (kr < 0) {
			EVP_PKEY_free(j->key);
			free(j);
			svc_error_to(c, req, "internal",
				      "cannot store a key in %s: %s; free space or fix its permissions",
				      a->opts.state_dir, strerror(-kr));
			return;
		}
	}
	if (pki_make_csr(j->key, j->name, &j->csr) < 0) {
		EVP_PKEY_free(j->key);
		free(j);
		svc_error_to(c, req, "internal", "cannot make a certificate request");
		return;
	}
	j->cli = c;
	j->req = json_incref((json_t *)req);
	int64_t timeout_s = proto_int(req, "timeout_s", 10);
	j->started_ms = util_now_ms();
	j->deadline_ms = j->started_ms + (uint64_t)(timeout_s > 0 ? timeout_s : 10) * 1000;
	uv_timer_init(a->loop, &j->retry);
	j->retry.data = j;
	a->wk.join = j;
	log_info("join_start", "head=%s:%d name=%s token_id=%s", j->host, j->port, j->name, j->tok.id);
	join_attempt(j);
}

/* ---- session to the head -------------------------------------------------- */

/* Answer the join's CLI: connected, or not (with why). */
static void join_wait_end(struct agent *a, const char *why)
{
	struct join_wait *w = a->wk.join_wait;
	if (!w)
		return;
	a->wk.join_wait = NULL;
	if (w->cli) {
		json_object_set_new(w->answer, "connected", json_boolean(!why));
		if (why)
			json_object_set_new(w->answer, "note", json_string(why));
		conn_send_new(w->cli, proto_result(w->orig_id, json_incref(w->answer)));
	}
	json_decref(w->answer);
	free(w);
}

void worker_cli_gone(struct agent *a, conn *c)
{
	if (a->wk.join && a->wk.join->cli == c)
		a->wk.join->cli = NULL;
	if (a->wk.join_wait && a->wk.join_wait->cli == c)
		a->wk.join_wait->cli = NULL;
}

/* This node's memory for the head (hello and every heartbeat: issue 19). */
static void add_mem(struct agent *a, json_t *m)
{
	struct cluster_mem mem;
	if (cluster_mem_read(a, &mem) == 0)
		json_object_set_new(m, "mem", cluster_mem_json(&mem));
}

static void on_heartbeat(uv_timer_t *t)
{
	struct agent *a = t->data;
	if (a->wk.link && a->wk.up) {
		json_t *m = proto_msg("heartbeat", 0);
		add_mem(a, m);
		conn_send_new(a->wk.link, m);
	}
	agent_settle(a);
}

static void become_unjoined(struct agent *a)
{
	worker_stop(a);
	agent_close_listener(a);
	identity_wipe(a);
}

static void on_head_frame(conn *c, json_t *msg)
{
	struct agent *a = conn_data(c);
	const char *t = proto_type(msg);
	json_int_t id = proto_id(msg);
	a->wk.last_ok_ms = util_now_ms();
	agent_busy(a); /* the head sends nothing unasked but answers and requests */
	const struct svc_frame *f = svc_frame_of(t, FRAME_TO_NODE);
	if (f) { /* a service's (crl, jobs, topo, ...) */
		peers_dispatch(a, c, a->id.head_id, FRAME_TO_NODE, f, msg);
		json_decref(msg);
		return;
	}
	if (peers_on_head_frame(a, msg)) { /* answers to what this node asked */
		json_decref(msg);
		return;
	}
	if (strcmp(t, "error") == 0 && id == 0) {
		const char *code = proto_str(msg, "code");
		if (code && strcmp(code, "revoked") == 0) {
			log_warn("revoked", "cluster=%s reason=%s", a->id.cluster_name,
				 log_q(proto_str(msg, "message")));
			a->id.removed = true;
			identity_save(a);
			worker_stop(a);
			agent_close_listener(a);
		}
	}
	json_decref(msg);
}

static void on_hello_answer(struct agent *a, conn *cli, json_int_t orig_id, json_t *msg)
{
	(void)cli;
	(void)orig_id;
	if (strcmp(proto_type(msg), "result") != 0)
		return; /* refused or head_unreachable: the session closes, or closed */
	json_t *d = json_object_get(msg, "data");
	take_crl(a, proto_str(d, "crl"));
	a->wk.alt = strcmp(a->wk.addr_now, a->id.head_addr) != 0; /* stick to it */
	a->wk.up = true;
	a->wk.backoff_ms = 0;
	a->wk.error[0] = '\0';
	log_info("head_connected", "head=%s", a->wk.addr_now);
	join_wait_end(a, NULL);
	uv_timer_start(&a->wk.hb_timer, on_heartbeat, AGENT_HEARTBEAT_MS, AGENT_HEARTBEAT_MS);
	peers_head_up(a);
	svc_emit(a, SVC_EV_HEAD_UP, NULL);
}

static void on_leave_answer(struct agent *a, conn *cli, json_int_t orig_id, json_t *msg)
{
	if (strcmp(proto_type(msg), "result") == 0) {
		char cluster[64];
		util_strlcpy(cluster, a->id.cluster_name, sizeof cluster);
		log_info("left", "cluster=%s", cluster);
		become_unjoined(a);
		if (cli)
			conn_send_new(cli, proto_result(orig_id, json_pack("{s:s}", "left", cluster)));
	} else if (cli) {
		json_t *copy = json_copy(msg);
		json_object_set_new(copy, "id", json_integer(orig_id));
		conn_send_new(cli, copy);
	}
}

/* status on a worker: the head's answer plus how this node reaches the head. */
void cluster_status_answer(struct agent *a, conn *cli, json_int_t orig_id, json_t *msg)
{
	if (!cli)
		return;
	json_t *copy = json_deep_copy(msg);
	json_t *d = json_object_get(copy, "data");
	if (json_is_object(d))
		json_object_set_new(d, "head_link",
				    json_pack("{s:s, s:s, s:s}", "address", a->wk.addr_now, "source",
					      strcmp(a->wk.addr_now, a->id.head_addr) == 0
						      ? "advertised by the head"
						      : "the address join was given",
					      "head_key", a->id.head_key));
	json_object_set_new(copy, "id", json_integer(orig_id));
	conn_send_new(cli, copy);
}

/* Is the peer this cluster's head? The chain is CA-signed and unrevoked (the
 * TLS context checked that); the leaf must also say OU=head, name the head id
 * learnt at join and carry the key pinned then. A node that joined before
 * keys were pinned pins the first head certificate that passes the rest. */
static int check_head(struct agent *a, conn *c, char *why, size_t len)
{
	X509 *leaf = conn_peer_cert(c);
	char cn[64] = "", key[PKI_HASH_HEX] = "";
	if (!leaf || pki_cert_cn(leaf, cn, sizeof cn) < 0 || pki_spki_sha256(leaf, key) < 0) {
		snprintf(why, len, "presented no readable certificate");
		return -EACCES;
	}
	if (pki_cert_role(leaf) != PKI_ROLE_HEAD || strcmp(cn, a->id.head_id) != 0) {
		snprintf(why, len, "presented the certificate of node %s, not of this cluster's head %s",
			 cn, a->id.head_id);
		return -EACCES;
	}
	if (!a->id.head_key[0]) {
		util_strlcpy(a->id.head_key, key, sizeof a->id.head_key);
		identity_save(a);
		log_info("head_key_pinned", "head=%s key=%s", cn, key);
	} else if (!pki_ct_equal(key, a->id.head_key)) {
		snprintf(why, len, "presented head %s's name with another key than the one pinned at join",
			 cn);
		return -EACCES;
	}
	return 0;
}

/* A revocation list from the head: check its signature, store it, reload. */
/* The head's list changed (a node was removed): its certificate is revoked. */
void worker_on_crl(struct agent *a, const char *from, const json_t *msg)
{
	(void)from;
	take_crl(a, proto_str(msg, "crl"));
}

static void take_crl(struct agent *a, const char *pem)
{
	if (!pem || !*pem)
		return;
	char p[512], err[256] = "";
	X509 *ca = NULL;
	size_t n = 0;
	identity_paths(a, "ca.crt", p, sizeof p);
	if (pki_read_cert(p, &ca) < 0 || pki_crl_check(pem, ca, &n) < 0) {
		X509_free(ca);
		log_warn("crl_refused", "reason=%s", "not signed by the cluster CA");
		return;
	}
	X509_free(ca);
	identity_paths(a, "crl.pem", p, sizeof p);
	char *cur = NULL;
	size_t len = 0;
	bool same = util_read_file(p, &cur, &len, 1 << 20) == 0 && len == strlen(pem) &&
		    memcmp(cur, pem, len) == 0;
	free(cur);
	if (same)
		return; /* the list this node already checks against */
	if (pki_write_pem_text(p, pem, 0644) < 0 || agent_tls_setup(a, err, sizeof err) < 0) {
		log_error("crl_failed", "detail=%s", log_q(err));
		return;
	}
	log_debug("crl_stored", "revoked=%zu", n);
}

static void on_head_ready(conn *c, int status)
{
	struct agent *a = conn_data(c);
	if (status < 0) {
		const char *v = conn_verify_error(c);
		if (v) { /* a certificate that is not the cluster's, or revoked */
			snprintf(a->wk.error, sizeof a->wk.error,
				 "the peer at %s is not this cluster's head: its certificate failed (%s)",
				 a->wk.addr_now, v);
			log_warn("head_impostor", "addr=%s reason=%s", a->wk.addr_now, log_q(v));
			return;
		}
		snprintf(a->wk.error, sizeof a->wk.error, "%s",
			 status > -4096 ? uv_strerror(status) : strerror(-status));
		return;
	}
	char why[256];
	if (check_head(a, c, why, sizeof why) < 0) {
		snprintf(a->wk.error, sizeof a->wk.error, "the peer at %s is not this cluster's head: it %s",
			 a->wk.addr_now, why);
		log_warn("head_impostor", "addr=%s reason=%s", a->wk.addr_now, log_q(why));
		conn_close(c, -EACCES);
		return;
	}
	json_t *m = proto_msg("hello", 0);
	json_object_set_new(m, "address", json_string(a->id.advertise));
	json_object_set_new(m, "version", json_string(SPARK_VERSION));
	add_mem(a, m);
	peers_request(a, NULL, 0, m, PEERS_NOW, on_hello_answer);
}

static void on_head_close(conn *c, int err)
{
	struct agent *a = conn_data(c);
	if (a->wk.link != c)
		return;
	a->wk.link = NULL;
	bool was_up = a->wk.up;
	a->wk.up = false;
	if (a->wk.hb_on)
		uv_timer_stop(&a->wk.hb_timer);
	if (err && !a->wk.error[0])
		snprintf(a->wk.error, sizeof a->wk.error, "%s",
			 err > -4096 ? uv_strerror(err) : strerror(-err));
	else if (!a->wk.error[0])
		snprintf(a->wk.error, sizeof a->wk.error, "connection closed");
	char why[512];
	snprintf(why, sizeof why, "lost the connection to the head at %s (%s)", a->id.head_addr,
		 a->wk.error);
	join_wait_end(a, why);
	peers_head_lost(a);
	svc_emit(a, SVC_EV_HEAD_LOST, NULL);
	if (was_up)
		log_warn("head_lost", "head=%s reason=%s", a->id.head_addr, log_q(a->wk.error));
	if (!a->stopping && a->id.role == ROLE_WORKER && !a->id.removed)
		schedule_reconnect(a);
}

static const struct conn_cbs head_cbs = {
	.on_ready = on_head_ready,
	.on_frame = on_head_frame,
	.on_close = on_head_close,
};

static void connect_head(struct agent *a)
{
	char host[128];
	int port;
	if (a->wk.link || a->stopping)
		return;
	/* The head's advertised address first; after a failure, the address the
	 * join went through (if it differs), and so on in turn. Either way the
	 * peer must prove it is the pinned head. */
	const char *addr = a->id.head_addr;
	if (a->wk.alt && a->id.joined_via[0] && strcmp(a->id.joined_via, a->id.head_addr) != 0)
		addr = a->id.joined_via;
	a->wk.alt = !a->wk.alt;
	util_strlcpy(a->wk.addr_now, addr, sizeof a->wk.addr_now);
	if (util_split_hostport(addr, SPARK_DEFAULT_PORT, host, sizeof host, &port) < 0) {
		log_error("bad_head_addr", "head=%s", log_q(addr));
		return;
	}
	a->wk.error[0] = '\0';
	int r = conn_connect_tcp(a->loop, host, port, a->cli_ctx, 5000, &head_cbs, a, &a->wk.link);
	if (r < 0) {
		a->wk.link = NULL;
		snprintf(a->wk.error, sizeof a->wk.error, "%s", r > -4096 ? uv_strerror(r) : "error");
		schedule_reconnect(a);
	}
}

static void on_retry(uv_timer_t *t) { connect_head(t->data); }

static void schedule_reconnect(struct agent *a)
{
	if (!a->wk.retry_on || a->stopping || a->id.role != ROLE_WORKER || a->id.removed)
		return;
	unsigned b = a->wk.backoff_ms ? a->wk.backoff_ms * 2 : AGENT_BACKOFF_MIN_MS;
	if (b > AGENT_BACKOFF_MAX_MS)
		b = AGENT_BACKOFF_MAX_MS;
	a->wk.backoff_ms = b;
	/* +-20% jitter so restarted heads are not hit by every worker at once */
	unsigned char rnd;
	char hex[3];
	pki_random_hex(hex, 1);
	rnd = (unsigned char)strtoul(hex, NULL, 16);
	unsigned delay = b * 8 / 10 + (unsigned)((uint64_t)b * 4 / 10 * rnd / 255);
	log_debug("head_retry", "in_ms=%u reason=%s", delay, log_q(a->wk.error));
	uv_timer_start(&a->wk.retry_timer, on_retry, delay, 0);
}

int worker_start(struct agent *a)
{
	if (!a->wk.hb_on) {
		uv_timer_init(a->loop, &a->wk.hb_timer);
		a->wk.hb_timer.data = a;
		a->wk.hb_on = true;
	}
	if (!a->wk.retry_on) {
		uv_timer_init(a->loop, &a->wk.retry_timer);
		a->wk.retry_timer.data = a;
		a->wk.retry_on = true;
	}
	a->wk.backoff_ms = 0;
	agent_busy(a); /* identity loaded, or a join just finished */
	connect_head(a);
	return 0;
}

void worker_stop(struct agent *a)
{
	if (a->wk.join) {
		struct join_op *j = a->wk.join;
		a->wk.join = NULL;
		if (!j->done) {
			j->done = true;
			if (j->cli)
				svc_error_to(j->cli, j->req, "shutdown", "sparkd is shutting down");
		}
		if (j->c)
			conn_close(j->c, 0);
		else
			join_finish(j);
	}
	/* Timers stay initialised (a node may join again); main closes them. */
	if (a->wk.hb_on)
		uv_timer_stop(&a->wk.hb_timer);
	if (a->wk.retry_on)
		uv_timer_stop(&a->wk.retry_timer);
	if (a->wk.link) {
		conn *h = a->wk.link;
		a->wk.link = NULL;
		a->wk.up = false;
		conn_close(h, 0);
	}
	join_wait_end(a, "sparkd stopped talking to the head");
	peers_stop(a, "sparkd stopped talking to the head");
}

void worker_handle_leave(struct agent *a, conn *c, const json_t *req)
{
	if (a->id.removed) {
		char cluster[64];
		util_strlcpy(cluster, a->id.cluster_name, sizeof cluster);
		become_unjoined(a);
		svc_send_result(c, proto_id(req), json_pack("{s:s}", "left", cluster));
		return;
	}
	if (peers_request(a, c, proto_id(req), proto_msg("leave", 0), 0, on_leave_answer) < 0)
		svc_error_to(c, req, "internal", "out of memory");
}

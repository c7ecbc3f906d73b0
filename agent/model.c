/* model: the `model` service of sparkd (issue 18, docs/models.md): the models
 * this node holds, in its store (models.dir, default STATE_DIR/models).
 * Requests, served by the node whose control socket got them:
 *   model_ls                 -> {"node", "dir", "models": [mm_store_list rows]}
 *   model_rm {name}          -> {"node", "name", "removed": true}     (admin)
 *   model_verify {name}      -> {"node", "name", "files", "bytes", "ok", "problems": [...]}
 *   model_push {dir, name, chain: [{id, host, port}]} (admin, streams)
 *        -> "stream" {event: "progress", node, bytes, total} ..., then
 *           {"name", "files", "bytes", "seconds", "nodes": [report]}; nodes
 *           that ended incomplete because an upstream kept corrupting a chunk
 *           (their report names it: bad_from) get one repair round from this
 *           node (the same push, the others passed over), merged into the
 *           answer (and "repair_round")
 *   model_push_from {from, ...model_push} (admin, head, streams): the head
 *        sends node FROM model_push_run, which answers with model_push_event
 *        and model_push_end frames, passed on as model_push's stream and answer;
 *        when the CLI that asked goes away (its stream ends), the head sends
 *        the node model_push_cancel {push}, which stops the push there
 * verify re-hashes every chunk in a libuv worker thread, so the agent keeps
 * answering meanwhile; so does model_push for the manifest. A push is the
 * chain of data links of model_relay.c: once this node has an identity, it
 * listens on the agent's address, port + 1 (MODEL_DATA_PORT_OFFSET), for the
 * pushes of members before it in a chain, received into its store. */
#include "agent.h"
#include "jobenv.h"
#include "model_manifest.h"
#include "model_relay.h"
#include "service.h"

#include "cfg.h"
#include "conn.h"
#include "log.h"
#include "pki.h"
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MODEL_DATA_PORT_OFFSET 1

struct push_job;

struct model_svc {
	char root[PATH_MAX];
	unsigned verifying; /* verify jobs in worker threads */
	struct mr_engine *eng;
	SSL_CTX *srv, *cli;
	EVP_PKEY *ca_pub;   /* checks the head's push tickets */
	struct push_job *pushes;
	unsigned seq;
};

/* model_push_from on the head: a push whose source is another node (--from). */
struct remote_push {
	struct remote_push *next;
	conn *reply;
	json_int_t id;
	char node[40], node_name[64];
	char push[65];
	bool gone;
};

static struct remote_push *remote_running;

static void remote_node_gone(const char *node_id);
static void remote_free(struct remote_push *rp);
static void remote_caller_gone(struct agent *a, struct remote_push *rp);

static const char *node_name(struct agent *a)
{
	return a->id.node_name[0] ? a->id.node_name : a->opts.name;
}

/* The hook other services read: a job's SPARK_MODEL_DIR. */
static const char *model_dir(struct agent *a)
{
	return a->model ? a->model->root : NULL;
}

static int model_init(struct agent *a, char *err, size_t len)
{
	struct model_svc *m = calloc(1, sizeof *m);
	if (!m)
		return -ENOMEM;
	const char *dir = NULL;
	char e2[256];
	json_t *sec = a->cfg ? cfg_get(a->cfg, "models") : NULL;
	static const char *const keys[] = {"dir", NULL};
	int r = 0;
	if (sec && !json_is_object(sec)) {
		snprintf(err, len, "models: must be a mapping (models: {dir: /data/models})");
		r = -EINVAL;
	} else if (sec && (r = cfg_check_keys(sec, "models", keys, err, len)) < 0) {
		/* err names the unknown key */
	} else if (a->cfg && (r = cfg_get_str(a->cfg, "models.dir", &dir, e2, sizeof e2)) == -EINVAL) {
		snprintf(err, len, "%s", e2);
	} else {
		r = 0;
		if (dir && dir[0] != '/') {
			snprintf(err, len, "models.dir: '%s' is not an absolute path", dir);
			r = -EINVAL;
		}
	}
	if (r < 0) {
		free(m);
		return r;
	}
	if (dir)
		util_strlcpy(m->root, dir, sizeof m->root);
	else
		snprintf(m->root, sizeof m->root, "%s/models", a->opts.state_dir);
	a->model = m;
	a->hooks.model_dir = model_dir;
	return 0;
}

static void push_unlink(struct agent *a, struct push_job *j);
static void model_free(struct agent *a)
{
	if (!a->model)
		return;
	while (a->model->pushes)
		push_unlink(a, a->model->pushes);
	while (remote_running)
		remote_free(remote_running);
	SSL_CTX_free(a->model->srv);
	SSL_CTX_free(a->model->cli);
	EVP_PKEY_free(a->model->ca_pub);
	free(a->model);
	a->model = NULL;
}

struct push_job;
static void push_unlink(struct agent *a, struct push_job *j);

static void in_done(void *data, int status, const json_t *report)
{
	(void)data;
	json_t *me = json_array_get(report, 0);
	log_info("model_push_received", "status=%d node_status=%s bytes=%lld message=%s", status,
		 json_string_value(json_object_get(me, "status")),
		 (long long)json_integer_value(json_object_get(me, "bytes_written")),
		 log_q(json_string_value(json_object_get(me, "message"))));
}

static const struct mr_cbs in_cbs = {.on_done = in_done};

#define TICKET_TTL_S 3600

/* A push's permission: the cluster CA's signature (ECDSA P-256, SHA-256) over
 * mr_ticket_text, made by the head for an admin's request (model_ticket). */
static int verify_ticket(void *data, const char *text, const char *ticket, int64_t expires_at)
{
	struct agent *a = data;
	int64_t now = util_now();
	if (!a->model || !a->model->ca_pub || expires_at < now || expires_at > now + 2 * TICKET_TTL_S)
		return -EACCES;
	size_t tl = strlen(ticket);
	if (tl == 0 || tl % 4 || tl > 512)
		return -EACCES;
	unsigned char sig[400];
	int k = EVP_DecodeBlock(sig, (const unsigned char *)ticket, (int)tl);
	if (k <= 0)
		return -EACCES;
	k -= (ticket[tl - 1] == '=') + (ticket[tl - 2] == '=');
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	int ok = md && EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, a->model->ca_pub) == 1 &&
		 EVP_DigestVerify(md, sig, (size_t)k, (const unsigned char *)text, strlen(text)) == 1;
	EVP_MD_CTX_free(md);
	return ok ? 0 : -EACCES;
}

/* The data port, once this node has certificates: TLS contexts of its own
 * (both directions, the revocation list too). Logged, not fatal: a node
 * whose data port is taken still serves everything else. */
static void engine_start(struct agent *a)
{
	struct model_svc *m = a->model;
	if (!m || m->eng || a->id.role == ROLE_NONE || a->id.removed)
		return; /* (no state: sparkd started without this service, as fuzz_session does) */
	if (a->opts.listen_port <= 0) { /* an agent port chosen by the kernel (tests) */
		log_info("model_data_off", "reason=%s", log_q("the agent port is not fixed"));
		return;
	}
	char crt[512], key[512], ca[512], crl[512], err[256] = "";
	identity_paths(a, "node.crt", crt, sizeof crt);
	identity_paths(a, "node.key", key, sizeof key);
	identity_paths(a, "ca.crt", ca, sizeof ca);
	identity_paths(a, "crl.pem", crl, sizeof crl);
	m->srv = tls_server_ctx(crt, key, ca, err, sizeof err);
	m->cli = m->srv ? tls_client_ctx(crt, key, ca, err, sizeof err) : NULL;
	if (m->cli && access(crl, F_OK) == 0 &&
	    (tls_ctx_load_crl(m->srv, crl, err, sizeof err) < 0 ||
	     tls_ctx_load_crl(m->cli, crl, err, sizeof err) < 0)) {
		SSL_CTX_free(m->cli);
		m->cli = NULL;
	}
	if (!m->cli) {
		log_error("model_data_off", "reason=%s", log_q(err));
		SSL_CTX_free(m->srv);
		m->srv = NULL;
		return;
	}
	m->eng = mr_engine_new(a->loop, m->srv, m->cli, a->id.node_id);
	int port = a->opts.listen_port + MODEL_DATA_PORT_OFFSET;
	/* every address of the node: the fabric's too (the chain's lanes), and
	 * the agent's (the fallback); only members' certificates get anywhere. An
	 * agent on loopback (tests) keeps its data port there. */
	const char *lh = a->opts.listen_host;
	const char *any = !strncmp(lh, "127.", 4) || !strcmp(lh, "::1") ? lh
			  : strchr(lh, ':')				? "::"
									: "0.0.0.0";
	if (!m->eng || mr_engine_listen(m->eng, any, port, err, sizeof err) < 0) {
		log_error("model_data_off", "reason=%s", log_q(err));
		if (m->eng)
			mr_engine_close(m->eng);
		m->eng = NULL;
		return;
	}
	mr_engine_accept(m->eng, m->root, &in_cbs, a);
	/* Tests only (tests/integration/models): a lying relay, which corrupts
	 * chunk N (from 0) every time it sends it */
	const char *tc = getenv("SPARKD_TEST_CORRUPT_CHUNK");
	if (tc && *tc) {
		char *end;
		unsigned long k = strtoul(tc, &end, 10);
		if (!*end && k < (1ul << 31)) {
			mr_engine_test_corrupt(m->eng, (size_t)k + 1);
			log_warn("model_test_corrupt", "chunk=%lu", k);
		}
	}
	X509 *cax = NULL;
	if (pki_read_cert(ca, &cax) == 0) {
		m->ca_pub = X509_get_pubkey(cax);
		X509_free(cax);
	}
	if (!m->ca_pub)
		log_error("model_tickets_off", "reason=%s", log_q("cannot read the CA's key from ca.crt: "
								  "announced pushes are refused"));
	mr_engine_verify(m->eng, verify_ticket, a);
	log_info("model_data_listening", "addr=%s:%d store=%s", a->opts.listen_host, port,
		 log_q(m->root));
}

static int model_start(struct agent *a, char *err, size_t len)
{
	(void)err;
	(void)len;
	engine_start(a);
	return 0;
}

static void model_stop(struct agent *a)
{
	if (a->model && a->model->eng) {
		mr_engine_close(a->model->eng);
		a->model->eng = NULL;
	}
}

/* Requests reach the handlers whenever the table is listed; the state exists
 * only when the service was initialised. */
static bool ready(struct agent *a, const struct svc_req *r)
{
	if (a->model)
		return true;
	svc_error(r, "internal", "the model service is not running on %s", node_name(a));
	return false;
}

/* {"node", "dir", "models"}: this node's store; NULL with err on failure. */
static json_t *ls_json(struct agent *a, char *err, size_t errlen)
{
	json_t *list;
	int rc = mm_store_list(a->model->root, &list, err, errlen);
	if (rc < 0) {
		json_decref(list);
		if (!err[0])
			snprintf(err, errlen, "%s", strerror(-rc));
		return NULL;
	}
	return json_pack("{s:s, s:s, s:o}", "node", node_name(a), "dir", a->model->root, "models",
			 list);
}

static void r_model_ls(struct agent *a, const struct svc_req *r)
{
	if (!ready(a, r))
		return;
	char err[512] = "";
	json_t *j = ls_json(a, err, sizeof err);
	if (!j)
		svc_error(r, "internal", "%s", err);
	else
		svc_reply(r, j);
}

/* ---- model_ls_all, model_rm_nodes: the head asks nodes' stores ---- */

static int rm_here(struct agent *a, const char *name, char *err, size_t errlen);

#define LS_ALL_TIMEOUT_MS 5000

struct ls_all {
	struct ls_all *next;
	conn *reply;
	json_int_t id;
	bool rm;       /* model_rm_nodes: remove name; else list */
	char name[MM_NAME_MAX + 1];
	/* per node: {"node", "id"} and then "dir", "models" (ls) or "removed" (rm),
	 * or "error" */
	json_t *nodes;
	size_t pending;
	bool gone;     /* the asker left: answer nobody */
};

static struct ls_all *ls_running;

static void ls_all_finish(struct agent *a, struct ls_all *j)
{
	(void)a;
	struct ls_all **pp = &ls_running;
	while (*pp && *pp != j)
		pp = &(*pp)->next;
	if (*pp)
		*pp = j->next;
	if (!j->gone) {
		struct svc_req r = {.reply = j->reply, .id = j->id};
		json_t *d = json_pack("{s:O}", "nodes", j->nodes);
		if (j->rm)
			json_object_set_new(d, "name", json_string(j->name));
		svc_reply(&r, d);
	}
	json_decref(j->nodes);
	free(j);
}

static void ls_all_answer(struct agent *a, void *owner, int tag, const json_t *reply,
			  const char *why)
{
	struct ls_all *j = owner;
	json_t *slot = json_array_get(j->nodes, (size_t)tag);
	json_t *dir = json_object_get(reply, "dir"), *models = json_object_get(reply, "models");
	bool ok = json_is_true(json_object_get(reply, "ok"));
	if (ok && !j->rm && json_is_string(dir) && json_is_array(models)) {
		json_object_set(slot, "dir", dir);
		json_object_set(slot, "models", models);
	} else if (ok && j->rm) {
		json_object_set_new(slot, "removed", json_true());
	} else {
		json_object_set_new(slot, "error", json_string(why ? why
							      : proto_str(reply, "message")
								    ? proto_str(reply, "message")
								    : "no answer"));
	}
	if (--j->pending == 0)
		ls_all_finish(a, j);
}

/* Ask the nodes named in want (an array of names or ids; NULL: every node). */
static void fan_out(struct agent *a, const struct svc_req *r, bool rm, const char *name,
		    const json_t *want)
{
	db_node *nodes = NULL;
	size_t n = 0;
	if (!a->hd.db || db_node_list(a->hd.db, &nodes, &n) < 0) {
		svc_error(r, "internal", "cannot read cluster.db");
		return;
	}
	struct ls_all *j = calloc(1, sizeof *j);
	if (!j || !(j->nodes = json_array())) {
		free(j);
		free(nodes);
		svc_error(r, "internal", "out of memory");
		return;
	}
	j->reply = r->reply;
	j->id = r->id;
	j->rm = rm;
	util_strlcpy(j->name, name ? name : "", sizeof j->name);
	j->next = ls_running;
	ls_running = j;
	const char *missing = NULL;
	size_t wi;
	json_t *w;
	if (!want) {
		for (size_t i = 0; i < n; i++)
			json_array_append_new(j->nodes, json_pack("{s:s, s:s}", "node", nodes[i].name,
								  "id", nodes[i].id));
	} else {
		json_array_foreach(want, wi, w) {
			const char *s = json_string_value(w);
			size_t i = 0;
			while (i < n && (!s || (strcmp(s, nodes[i].name) && strcmp(s, nodes[i].id))))
				i++;
			if (i == n) {
				missing = s ? s : "";
				break;
			}
			json_array_append_new(j->nodes, json_pack("{s:s, s:s}", "node", nodes[i].name,
								  "id", nodes[i].id));
		}
	}
	free(nodes);
	size_t count = json_array_size(j->nodes);
	if (count == 0 || missing) {
		char m[200];
		snprintf(m, sizeof m, "no node '%s' in the cluster; 'sparkctl node ls' lists them",
			 missing ? missing : "");
		j->gone = true;
		ls_all_finish(a, j);
		svc_error(r, "not_found", "%s", m);
		return;
	}
	j->pending = count + 1; /* held until every ask is out */
	for (size_t i = 0; i < count; i++) {
		const char *id = json_string_value(json_object_get(json_array_get(j->nodes, i), "id"));
		json_t *q = proto_msg("model_req", 0);
		json_object_set_new(q, "op", json_string(j->rm ? "rm" : "ls"));
		if (j->rm)
			json_object_set_new(q, "name", json_string(j->name));
		if (peers_ask(a, id, q, LS_ALL_TIMEOUT_MS, ls_all_answer, j, (int)i) < 0)
			ls_all_answer(a, j, (int)i, NULL, "not connected to the head");
	}
	if (--j->pending == 0)
		ls_all_finish(a, j);
}

static void r_model_ls_all(struct agent *a, const struct svc_req *r)
{
	const char *node = proto_str(r->msg, "node");
	json_t *want = node ? json_pack("[s]", node) : NULL;
	fan_out(a, r, false, NULL, want);
	json_decref(want);
}

static void r_model_rm_nodes(struct agent *a, const struct svc_req *r)
{
	const char *name = proto_str(r->msg, "name");
	json_t *nodes = json_object_get(r->msg, "nodes");
	if (!mm_valid_name(name) || json_array_size(nodes) < 1 || json_array_size(nodes) > 64) {
		svc_error(r, "bad_request", "name (a model name) and nodes (1-64 names) are required");
		return;
	}
	fan_out(a, r, true, name, nodes);
}

/* The head asks this node about its store (op ls: the list; op rm: remove
 * name): answered with the request's id. */
static void f_model_req(struct agent *a, const char *from, const json_t *msg)
{
	(void)from; /* the head: only it sends node frames */
	const char *op = proto_str(msg, "op"), *name = proto_str(msg, "name");
	json_t *m = proto_msg("model_reply", proto_id(msg));
	char err[512] = "";
	json_t *j = NULL;
	int rc = -EINVAL;
	if (!a->model)
		snprintf(err, sizeof err, "no model service on %s", node_name(a));
	else if (!strcmp(op, "ls") && (j = ls_json(a, err, sizeof err)))
		rc = 0;
	else if (!strcmp(op, "rm") && !mm_valid_name(name))
		snprintf(err, sizeof err, "'%s' is not a model name", name ? name : "");
	else if (!strcmp(op, "rm"))
		rc = rm_here(a, name, err, sizeof err);
	else if (strcmp(op, "ls"))
		snprintf(err, sizeof err, "unknown op '%.16s'", op);
	json_object_set_new(m, "ok", json_boolean(rc >= 0));
	if (j) {
		json_object_set(m, "dir", json_object_get(j, "dir"));
		json_object_set(m, "models", json_object_get(j, "models"));
		json_decref(j);
	}
	if (rc < 0)
		json_object_set_new(m, "message", json_string(err[0] ? err : strerror(-rc)));
	peers_to_head(a, m);
}

/* A node's answer: only to an ask of ours, from the node it was sent to
 * (peers.c matches both). */
static void f_model_reply(struct agent *a, const char *from, const json_t *msg)
{
	if (!peers_node_answer(a, from, msg))
		log_debug("model_reply_unknown", "node_id=%s id=%lld", from,
			  (long long)proto_id(msg));
}

/* Remove model name from this node's store: 0, or <0 with err for people. */
static int rm_here(struct agent *a, const char *name, char *err, size_t errlen)
{
	int rc = mm_store_remove(a->model->root, name, err, errlen);
	if (rc == -ENOENT)
		snprintf(err, errlen, "no model %s on %s; see 'sparkctl model ls'", name,
			 node_name(a));
	else if (rc >= 0)
		log_info("model_removed", "name=%s dir=%s", name, log_q(a->model->root));
	return rc;
}

static void r_model_rm(struct agent *a, const struct svc_req *r)
{
	if (!ready(a, r))
		return;
	const char *name = proto_str(r->msg, "name");
	char err[512] = "";
	if (!mm_valid_name(name)) {
		svc_error(r, "bad_request", "'%s' is not a model name", name);
		return;
	}
	int rc = rm_here(a, name, err, sizeof err);
	if (rc < 0)
		svc_error(r, rc == -ENOENT ? "not_found" : "internal", "%s", err);
	else
		svc_reply(r, json_pack("{s:s, s:s, s:b}", "node", node_name(a), "name", name,
				       "removed", 1));
}

/* verify in a worker thread */
struct verify_job {
	uv_work_t w;
	struct agent *a;
	conn *reply;
	json_int_t id;
	char root[PATH_MAX];
	char name[MM_NAME_MAX + 1];
	int rc;
	char err[512];
	json_t *bad;
	json_int_t files, bytes;
	bool gone; /* the CLI left: answer nobody */
	struct verify_job *next;
};
static struct verify_job *jobs_running;

static void verify_work(uv_work_t *w)
{
	struct verify_job *j = w->data;
	struct mm_manifest *m;
	j->rc = mm_store_manifest(j->root, j->name, &m, j->err, sizeof j->err);
	if (j->rc < 0)
		return;
	j->files = (json_int_t)m->nfiles;
	j->bytes = (json_int_t)m->total_bytes;
	mm_free(m);
	j->rc = mm_store_verify(j->root, j->name, &j->bad, j->err, sizeof j->err);
}

static void verify_done(uv_work_t *w, int status)
{
	struct verify_job *j = w->data;
	struct verify_job **pp = &jobs_running;
	while (*pp && *pp != j)
		pp = &(*pp)->next;
	if (*pp)
		*pp = j->next;
	if (j->a->model)
		j->a->model->verifying--;
	struct svc_req r = {.reply = j->reply, .id = j->id, .msg = NULL, .origin = NULL};
	if (j->gone) {
	} else if (status < 0) {
		svc_error(&r, "internal", "verify of %s did not run", j->name);
	} else if (j->rc == -ENOENT) {
		svc_error(&r, "not_found", "no model %s on %s; see 'sparkctl model ls'", j->name,
			  node_name(j->a));
	} else if (j->rc < 0) {
		svc_error(&r, "internal", "%s", j->err);
	} else {
		size_t n = json_array_size(j->bad);
		if (n)
			log_warn("model_verify_failed", "name=%s problems=%zu", j->name, n);
		svc_reply(&r, json_pack("{s:s, s:s, s:I, s:I, s:b, s:O}", "node", node_name(j->a),
					"name", j->name, "files", j->files, "bytes", j->bytes, "ok",
					n == 0, "problems", j->bad ? j->bad : json_array()));
	}
	json_decref(j->bad);
	free(j);
}

static void r_model_verify(struct agent *a, const struct svc_req *r)
{
	if (!ready(a, r))
		return;
	const char *name = proto_str(r->msg, "name");
	if (!mm_valid_name(name)) {
		svc_error(r, "bad_request", "'%s' is not a model name", name);
		return;
	}
	if (a->model->verifying >= 4) {
		svc_error(r, "busy", "4 verifications are running on %s; try again when one ended",
			  node_name(a));
		return;
	}
	struct verify_job *j = calloc(1, sizeof *j);
	if (!j) {
		svc_error(r, "internal", "out of memory");
		return;
	}
	j->a = a;
	j->reply = r->reply;
	j->id = r->id;
	j->w.data = j;
	util_strlcpy(j->root, a->model->root, sizeof j->root);
	util_strlcpy(j->name, name, sizeof j->name);
	if (uv_queue_work(a->loop, &j->w, verify_work, verify_done) < 0) {
		free(j);
		svc_error(r, "internal", "cannot start the verification");
		return;
	}
	a->model->verifying++;
	j->next = jobs_running;
	jobs_running = j;
}

static void push_cli_gone(struct agent *a, conn *c);

static void model_event(struct agent *a, enum svc_event ev, const struct svc_event_arg *arg)
{
	if (ev == SVC_EV_ROLE || ev == SVC_EV_HEAD_UP) {
		engine_start(a);
		return;
	}
	if (ev == SVC_EV_NODE_GONE && arg->node_id) {
		remote_node_gone(arg->node_id);
		return;
	}
	if (ev == SVC_EV_STREAM_CANCEL) {
		for (struct remote_push *rp = remote_running; rp; rp = rp->next)
			if (rp->reply == arg->c && rp->id == arg->id)
				remote_caller_gone(a, rp);
		return;
	}
	if (ev != SVC_EV_CONN_GONE)
		return;
	for (struct remote_push *rp = remote_running; rp; rp = rp->next)
		if (rp->reply == arg->c)
			remote_caller_gone(a, rp);
	for (struct ls_all *j = ls_running; j; j = j->next)
		if (j->reply == arg->c)
			j->gone = true;
	for (struct verify_job *j = jobs_running; j; j = j->next)
		if (j->reply == arg->c)
			j->gone = true;
	push_cli_gone(a, arg->c);
}

/* ---- model_ticket: the head signs an admin's push ---- */

/* A node's last discovery report (fabric service, through its hook): borrowed
 * from *hold, which the caller frees. */
static json_t *discovery_of(struct agent *a, const char *id, json_t **hold)
{
	*hold = a->hooks.fabric_report ? a->hooks.fabric_report(a, id) : NULL;
	return json_object_get(*hold, "discovery");
}

/* The chain's order and its hops over the fabric: from the source, each next
 * member is the first (in the order asked) that the member before it reaches
 * directly on a fabric subnet (on a ring its cabled neighbour, on a switch
 * anyone: the order asked), else the first left; each member's lanes are its
 * addresses there (one per twin). mem[0] stays first. */
static void plan_route(struct agent *a, struct mr_member *mem, size_t n)
{
	json_t **hold = calloc(n, sizeof *hold), **disc = calloc(n, sizeof *disc);
	size_t *ord = calloc(n, sizeof *ord);
	bool *used = calloc(n, sizeof *used);
	struct mr_member *out = calloc(n, sizeof *out);
	if (!hold || !disc || !ord || !used || !out)
		goto done;
	for (size_t i = 0; i < n; i++)
		disc[i] = discovery_of(a, mem[i].id, &hold[i]);
	used[0] = true;
	out[0] = mem[0];
	for (size_t pos = 1; pos < n; pos++) {
		size_t cur = ord[pos - 1], pick = n;
		char lanes[MR_LANES][48];
		unsigned nl = 0;
		for (size_t j = 1; j < n && pick == n; j++)
			if (!used[j] && (nl = (unsigned)jobnet_pair_addrs(disc[cur], disc[j], lanes,
									  MR_LANES)) > 0)
				pick = j;
		for (size_t j = 1; j < n && pick == n; j++)
			if (!used[j])
				pick = j;
		used[pick] = true;
		ord[pos] = pick;
		out[pos] = mem[pick];
		out[pos].nlanes = nl;
		for (unsigned k = 0; k < nl; k++)
			util_strlcpy(out[pos].lanes[k], lanes[k], sizeof out[pos].lanes[k]);
	}
	memcpy(mem, out, n * sizeof *mem);
done:
	for (size_t i = 0; hold && i < n; i++)
		json_decref(hold[i]);
	free(hold);
	free(disc);
	free(ord);
	free(used);
	free(out);
}

static void r_model_ticket(struct agent *a, const struct svc_req *r)
{
	const char *push = proto_str(r->msg, "push"), *name = proto_str(r->msg, "name");
	json_t *ch = json_object_get(r->msg, "chain");
	size_t n = json_array_size(ch);
	if (!a->hd.ca_key) {
		svc_error(r, "internal", "only the head signs pushes");
		return;
	}
	if (!mr_valid_push_id(push) || !mm_valid_name(name) || n < 2 || n > 64) {
		svc_error(r, "bad_request", "push (1-64 hex), name (a model name) and chain (2-64 "
			  "node ids) are required");
		return;
	}
	struct mr_member *mem = calloc(n, sizeof *mem);
	if (!mem) {
		svc_error(r, "internal", "out of memory");
		return;
	}
	for (size_t i = 0; i < n; i++) {
		const char *id = json_string_value(json_array_get(ch, i));
		if (!id || !id[0] || strlen(id) >= sizeof mem[i].id) {
			free(mem);
			svc_error(r, "bad_request", "chain[%zu] must be a node id", i);
			return;
		}
		util_strlcpy(mem[i].id, id, sizeof mem[i].id);
	}
	plan_route(a, mem, n);
	int64_t exp = util_now() + TICKET_TTL_S;
	char *text = mr_ticket_text(push, name, exp, mem, n);
	json_t *order = json_array(), *lanes = json_object();
	size_t fabric_hops = 0;
	for (size_t i = 0; i < n; i++) {
		json_array_append_new(order, json_string(mem[i].id));
		json_t *l = json_array();
		for (unsigned k = 0; k < mem[i].nlanes; k++)
			json_array_append_new(l, json_string(mem[i].lanes[k]));
		json_object_set_new(lanes, mem[i].id, l);
		fabric_hops += i > 0 && mem[i].nlanes > 0;
	}
	free(mem);
	unsigned char sig[256];
	size_t sl = sizeof sig;
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	int ok = text && md && EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, a->hd.ca_key) == 1 &&
		 EVP_DigestSign(md, sig, &sl, (const unsigned char *)text, strlen(text)) == 1;
	EVP_MD_CTX_free(md);
	free(text);
	char b64[400];
	if (!ok || sl > 256) {
		json_decref(order);
		json_decref(lanes);
		svc_error(r, "internal", "cannot sign the push");
		return;
	}
	EVP_EncodeBlock((unsigned char *)b64, sig, (int)sl);
	const char *net = fabric_hops == n - 1 ? "fabric" : fabric_hops ? "mixed" : "agent_address";
	log_info("model_ticket", "push=%s name=%s nodes=%zu network=%s", push, name, n, net);
	svc_reply(r, json_pack("{s:s, s:s, s:I, s:s, s:o, s:o, s:s}", "push", push, "name", name,
			       "expires_at", (json_int_t)exp, "ticket", b64, "chain", order,
			       "lanes", lanes, "network", net));
}

/* ---- model_push: this node is the source ---- */

struct push_job {
	struct push_job *next;
	struct agent *a;
	conn *reply;
	json_int_t id;
	bool gone, started, dry_run;
	bool via_head;  /* started by the head (model_push_run): answers go there */
	bool cancelled; /* model_push_cancel came while the manifest was being built */
	char push_id[65];
	char *ticket;
	int64_t expires_at;
	char dir[PATH_MAX];
	char name[MM_NAME_MAX + 1];
	struct mr_member *chain;
	size_t n;
	struct mm_manifest *m;
	int rc;
	char err[512];
	uint64_t t0;
	uv_work_t w;
	/* the repair round (one): the first round's report, while it runs */
	json_t *first;
	json_t *repair_nodes, *repair_bad_from; /* [ids] */
};

static void push_unlink(struct agent *a, struct push_job *j)
{
	struct push_job **pp = a->model ? &a->model->pushes : NULL;
	while (pp && *pp && *pp != j)
		pp = &(*pp)->next;
	if (pp && *pp)
		*pp = j->next;
	mm_free(j->m);
	free(j->chain);
	free(j->ticket);
	json_decref(j->first);
	json_decref(j->repair_nodes);
	json_decref(j->repair_bad_from);
	free(j);
}

static void push_cli_gone(struct agent *a, conn *c)
{
	if (!a->model)
		return;
	for (struct push_job *j = a->model->pushes; j; j = j->next)
		if (j->reply == c)
			j->gone = true; /* the push goes on; its answer goes nowhere */
}

/* The final answer of a push: to the CLI that asked here, or (started by the
 * head for a CLI elsewhere: --from) to the head, which passes it on. */
static void job_answer(struct push_job *j, json_t *data, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void job_answer(struct push_job *j, json_t *data, const char *code, const char *fmt, ...)
{
	char m[512] = "";
	if (fmt) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(m, sizeof m, fmt, ap);
		va_end(ap);
	}
	if (j->via_head) {
		json_t *f = proto_msg("model_push_end", 0);
		json_object_set_new(f, "push", json_string(j->push_id));
		json_object_set_new(f, "ok", json_boolean(data != NULL));
		if (data)
			json_object_set_new(f, "data", data);
		else
			json_object_set_new(f, "error", json_pack("{s:s, s:s}", "code", code,
								  "message", m));
		peers_to_head(j->a, f);
		return;
	}
	struct svc_req r = {.reply = j->reply, .id = j->id};
	if (j->gone)
		json_decref(data);
	else if (data)
		svc_reply(&r, data);
	else
		svc_error(&r, code, "%s", m);
}

static void on_push_progress(void *data, const char *node, uint64_t bytes, uint64_t total)
{
	struct push_job *j = data;
	if (j->via_head) {
		json_t *f = proto_msg("model_push_event", 0);
		json_object_set_new(f, "push", json_string(j->push_id));
		json_object_set_new(f, "node", json_string(node));
		json_object_set_new(f, "bytes", json_integer((json_int_t)bytes));
		json_object_set_new(f, "total", json_integer((json_int_t)total));
		json_object_set_new(f, "ms", json_integer((json_int_t)(util_now_ms() - j->t0)));
		peers_to_head(j->a, f);
		return;
	}
	if (j->gone)
		return;
	json_t *f = proto_msg("stream", j->id);
	json_object_set_new(f, "event", json_string("progress"));
	json_object_set_new(f, "node", json_string(node));
	json_object_set_new(f, "bytes", json_integer((json_int_t)bytes));
	json_object_set_new(f, "total", json_integer((json_int_t)total));
	json_object_set_new(f, "ms", json_integer((json_int_t)(util_now_ms() - j->t0)));
	conn_send_new(j->reply, f);
}

static bool in_ids(const json_t *ids, const char *id)
{
	size_t i;
	json_t *v;
	json_array_foreach(ids, i, v)
		if (id && !strcmp(json_string_value(v), id))
			return true;
	return false;
}

static void on_push_done(void *data, int status, const json_t *report);

/* Nodes ended incomplete and some report names who sent them bad copies:
 * one repair round, the same push (id, ticket, manifest) from this node to
 * those nodes only, the culprits and everyone else passed over (skip), so
 * that only what they lack moves, from the source. true when it started. */
static bool repair_start(struct push_job *j, const json_t *report)
{
	struct agent *a = j->a;
	json_t *bad = json_array(), *targets = json_array();
	size_t i;
	json_t *r;
	json_array_foreach(report, i, r) {
		const char *bf = json_string_value(json_object_get(r, "bad_from"));
		if (bf && !strcmp(json_string_value(json_object_get(r, "status")), "incomplete") &&
		    strcmp(bf, j->chain[0].id) && !in_ids(bad, bf))
			json_array_append_new(bad, json_string(bf));
	}
	json_array_foreach(report, i, r) {
		const char *id = json_string_value(json_object_get(r, "node"));
		if (json_array_size(bad) && id && !in_ids(bad, id) &&
		    !strcmp(json_string_value(json_object_get(r, "status")), "incomplete"))
			json_array_append_new(targets, json_string(id));
	}
	struct mr_member *ch = json_array_size(targets) ? malloc(j->n * sizeof *ch) : NULL;
	if (!ch || !a->model || !a->model->eng) {
		free(ch);
		json_decref(bad);
		json_decref(targets);
		return false;
	}
	memcpy(ch, j->chain, j->n * sizeof *ch);
	for (size_t k = 1; k < j->n; k++)
		ch[k].skip = !in_ids(targets, ch[k].id);
	j->first = json_deep_copy(report);
	j->repair_nodes = targets;
	j->repair_bad_from = bad;
	char *tl = json_dumps(targets, JSON_COMPACT), *bl = json_dumps(bad, JSON_COMPACT);
	log_warn("model_push_repair", "push=%s name=%s nodes=%s bad_from=%s", j->push_id, j->name,
		 log_q(tl ? tl : ""), log_q(bl ? bl : ""));
	free(tl);
	free(bl);
	struct mr_push_opts o = {.push_id = j->push_id, .m = j->m, .chain = ch, .nchain = j->n,
				 .self = 0, .src_dir = j->dir, .ticket = j->ticket,
				 .expires_at = j->expires_at};
	static const struct mr_cbs cbs = {.on_progress = on_push_progress,
					  .on_done = on_push_done};
	char err[256] = "";
	int rc = mr_push_start(a->model->eng, &o, &cbs, j, err, sizeof err);
	free(ch);
	if (rc < 0) {
		log_error("model_push_repair_failed", "push=%s err=%s", j->push_id, log_q(err));
		json_decref(j->first);
		j->first = NULL;
		return false;
	}
	return true;
}

/* The repair round's reports merged into the first round's: a node it made
 * complete is complete, with the bytes of both rounds, and each chunk it had
 * given up on is a repair from the source naming the culprit. */
static json_t *repair_merge(struct push_job *j, const json_t *second)
{
	json_t *out = json_deep_copy(j->first);
	const char *src = j->chain[0].id;
	size_t i, k;
	json_t *r, *r2;
	json_array_foreach(out, i, r) {
		const char *id = json_string_value(json_object_get(r, "node"));
		if (!in_ids(j->repair_nodes, id))
			continue;
		json_t *got = NULL;
		json_array_foreach(second, k, r2)
			if (!got && id && !strcmp(json_string_value(json_object_get(r2, "node")) ?: "", id))
				got = r2;
		const char *st2 = got ? json_string_value(json_object_get(got, "status")) : NULL;
		static const char *const sums[] = {"bytes_written", "chunks_written", "chunks_bad"};
		for (size_t s = 0; got && s < sizeof sums / sizeof *sums; s++) {
			json_int_t v1 = json_integer_value(json_object_get(r, sums[s]));
			json_int_t v2 = json_integer_value(json_object_get(got, sums[s]));
			if (v1 >= 0 && v2 >= 0)
				json_object_set_new(r, sums[s], json_integer(v1 + v2));
		}
		json_t *reps = json_object_get(r, "repairs");
		if (!json_is_array(reps)) {
			reps = json_array();
			json_object_set_new(r, "repairs", reps);
		}
		if (got && json_is_array(json_object_get(got, "repairs")))
			json_array_extend(reps, json_object_get(got, "repairs"));
		const char *bf = json_string_value(json_object_get(r, "bad_from"));
		char m[400];
		if (st2 && !strcmp(st2, "complete")) {
			json_t *c;
			json_array_foreach(json_object_get(r, "corrupt_chunks"), k, c) {
				json_t *e = json_pack("{s:O, s:O, s:s, s:s}", "path",
						      json_object_get(c, "path"), "chunk",
						      json_object_get(c, "chunk"), "problem",
						      "corrupted on receipt", "from", src);
				if (e && bf)
					json_object_set_new(e, "bad_from", json_string(bf));
				json_array_append_new(reps, e);
			}
			snprintf(m, sizeof m, "completed by a repair round from %s (%s sent corrupted "
				 "copies)", src, bf ? bf : json_string_value(json_array_get(
							     j->repair_bad_from, 0)));
			json_object_set_new(r, "status", json_string("complete"));
		} else {
			snprintf(m, sizeof m, "%s; the repair round from %s: %s",
				 json_string_value(json_object_get(r, "message")) ?: "", src,
				 got ? json_string_value(json_object_get(got, "message")) ?: st2
				     : "no report");
		}
		json_object_set_new(r, "message", json_string(m));
		json_object_set_new(r, "repaired_from", json_string(src));
	}
	return out;
}

static void on_push_done(void *data, int status, const json_t *report)
{
	struct push_job *j = data;
	struct agent *a = j->a;
	if (status != 0 && status != -ECANCELED && !j->first && !j->repair_nodes &&
	    repair_start(j, report))
		return; /* answered when the repair round ends */
	if (status == -ECANCELED) {
		log_info("model_push_done", "name=%s status=%d", j->name, status);
		job_answer(j, NULL, "cancelled", "push %s was cancelled: its caller went away",
			   j->push_id);
		push_unlink(a, j);
		return;
	}
	json_t *merged = j->first ? repair_merge(j, report) : NULL;
	if (merged) {
		const json_t *all = merged;
		size_t i;
		json_t *r;
		status = 0;
		json_array_foreach(all, i, r)
			if (strcmp(json_string_value(json_object_get(r, "status")) ?: "", "complete"))
				status = -EIO;
		report = merged;
	}
	double secs = (double)(util_now_ms() - j->t0) / 1000.0;
	log_info("model_push_done", "name=%s status=%d seconds=%.1f", j->name, status, secs);
	json_t *ans = json_pack("{s:s, s:I, s:I, s:f, s:b, s:O}", "name", j->name, "files",
				(json_int_t)j->m->nfiles, "bytes", (json_int_t)j->m->total_bytes,
				"seconds", secs, "complete", status == 0, "nodes", report);
	if (ans && j->first)
		json_object_set_new(ans, "repair_round",
				    json_pack("{s:O, s:O, s:s, s:b}", "nodes", j->repair_nodes,
					      "bad_from", j->repair_bad_from, "from", j->chain[0].id,
					      "complete", status == 0));
	json_decref(merged);
	job_answer(j, ans, NULL, NULL);
	push_unlink(a, j);
}

static void manifest_work(uv_work_t *w)
{
	struct push_job *j = w->data;
	j->rc = mm_build(j->dir, j->name, 0, &j->m, j->err, sizeof j->err);
}

static void manifest_done(uv_work_t *w, int status)
{
	struct push_job *j = w->data;
	struct agent *a = j->a;
	if (j->cancelled) {
		log_info("model_push_cancelled", "push=%s name=%s stage=manifest", j->push_id,
			 j->name);
		job_answer(j, NULL, "cancelled", "push %s was cancelled: its caller went away",
			   j->push_id);
		push_unlink(a, j);
		return;
	}
	if (status < 0 || j->rc < 0 || !a->model || !a->model->eng) {
		job_answer(j, NULL, j->rc == -ENOENT || j->rc == -ENOTDIR ? "not_found" : "failed",
			   "%s", j->rc < 0 ? j->err : "the data port of this node is not open");
		push_unlink(a, j);
		return;
	}
	if (j->dry_run) {
		json_t *ch = json_array();
		for (size_t i = 0; i < j->n; i++)
			json_array_append_new(ch, json_pack("{s:s, s:s, s:i}", "id", j->chain[i].id,
							    "host", j->chain[i].host, "port",
							    j->chain[i].port));
		job_answer(j, json_pack("{s:s, s:I, s:I, s:I, s:b, s:o}", "name", j->name, "files",
					(json_int_t)j->m->nfiles, "bytes",
					(json_int_t)j->m->total_bytes, "chunks",
					(json_int_t)j->m->nchunks, "dry_run", 1, "chain", ch),
			   NULL, NULL);
		push_unlink(a, j);
		return;
	}
	struct mr_push_opts o = {.push_id = j->push_id, .m = j->m, .chain = j->chain,
				 .nchain = j->n, .self = 0, .src_dir = j->dir, .ticket = j->ticket,
				 .expires_at = j->expires_at};
	static const struct mr_cbs cbs = {.on_progress = on_push_progress, .on_done = on_push_done};
	char err[256] = "";
	j->t0 = util_now_ms();
	if (mr_push_start(a->model->eng, &o, &cbs, j, err, sizeof err) < 0) {
		job_answer(j, NULL, "failed", "%s", err);
		push_unlink(a, j);
		return;
	}
	j->started = true;
	log_info("model_push_start", "name=%s files=%zu bytes=%llu nodes=%zu", j->name,
		 j->m->nfiles, (unsigned long long)j->m->total_bytes, j->n - 1);
}

/* A push job from a model_push request or a model_push_run frame (the same
 * fields): NULL with *code and err for people when they do not hold. */
static struct push_job *job_parse(struct agent *a, const json_t *msg, const char **code, char *err,
				  size_t errlen)
{
	const char *dir = proto_str(msg, "dir"), *name = proto_str(msg, "name");
	const char *push = proto_str(msg, "push"), *ticket = proto_str(msg, "ticket");
	json_t *ch = json_object_get(msg, "chain");
	size_t n = json_array_size(ch);
	*code = "bad_request";
	if (!dir || dir[0] != '/' || strlen(dir) >= PATH_MAX) {
		snprintf(err, errlen, "dir must be an absolute path");
		return NULL;
	}
	if (!mm_valid_name(name)) {
		snprintf(err, errlen, "'%s' is not a model name (1-%d of letters, digits, '.', '_', "
			 "'-')", name ? name : "", MM_NAME_MAX);
		return NULL;
	}
	if (n < 2 || n > 64) {
		snprintf(err, errlen, "chain must list this node and 1-63 others");
		return NULL;
	}
	if (!mr_valid_push_id(push)) {
		snprintf(err, errlen, "push must be 1-64 lower-case hex digits");
		return NULL;
	}
	if (!a->model->eng) {
		*code = "failed";
		snprintf(err, errlen, "the data port of %s is not open (not in a cluster, or port %d "
			 "taken: see sparkd's log)", node_name(a),
			 a->opts.listen_port + MODEL_DATA_PORT_OFFSET);
		return NULL;
	}
	struct push_job *j = calloc(1, sizeof *j);
	struct mr_member *mem = calloc(n, sizeof *mem);
	if (!j || !mem || !(j->ticket = strdup(ticket ? ticket : ""))) {
		free(j);
		free(mem);
		*code = "internal";
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	for (size_t i = 0; i < n && !err[0]; i++) {
		json_t *e = json_array_get(ch, i);
		const char *id = proto_str(e, "id"), *host = proto_str(e, "host");
		json_int_t port = proto_int(e, "port", -1);
		if (!id || !host || !id[0] || strlen(id) >= sizeof mem[i].id || !host[0] ||
		    strlen(host) >= sizeof mem[i].host || port < 1 || port > 65535) {
			snprintf(err, errlen, "chain[%zu] needs id, host and port (1-65535)", i);
			break;
		}
		for (size_t k = 0; k < i; k++)
			if (!strcmp(mem[k].id, id))
				snprintf(err, errlen, "node %s is twice in the chain", id);
		util_strlcpy(mem[i].id, id, sizeof mem[i].id);
		util_strlcpy(mem[i].host, host, sizeof mem[i].host);
		mem[i].port = (int)port;
		if (!err[0] && mr_member_lanes(json_object_get(e, "lanes"), &mem[i]) < 0)
			snprintf(err, errlen, "chain[%zu].lanes: at most %d fabric addresses", i,
				 MR_LANES);
	}
	if (!err[0] && strcmp(mem[0].id, a->id.node_id))
		snprintf(err, errlen, "the chain must start at this node (%s)", node_name(a));
	if (err[0]) {
		free(j->ticket);
		free(j);
		free(mem);
		return NULL;
	}
	j->a = a;
	j->chain = mem;
	j->n = n;
	j->dry_run = json_is_true(json_object_get(msg, "dry_run"));
	util_strlcpy(j->dir, dir, sizeof j->dir);
	util_strlcpy(j->name, name, sizeof j->name);
	util_strlcpy(j->push_id, push, sizeof j->push_id);
	j->expires_at = proto_int(msg, "expires_at", 0);
	j->t0 = util_now_ms();
	j->w.data = j;
	return j;
}

static void job_go(struct agent *a, struct push_job *j)
{
	j->next = a->model->pushes;
	a->model->pushes = j;
	if (uv_queue_work(a->loop, &j->w, manifest_work, manifest_done) < 0) {
		job_answer(j, NULL, "internal", "cannot start the manifest");
		push_unlink(a, j);
	}
}

static void r_model_push(struct agent *a, const struct svc_req *r)
{
	if (!ready(a, r))
		return;
	const char *code;
	char err[512] = "";
	struct push_job *j = job_parse(a, r->msg, &code, err, sizeof err);
	if (!j) {
		svc_error(r, code, "%s", err);
		return;
	}
	j->reply = r->reply;
	j->id = r->id;
	job_go(a, j);
}

/* ---- model_push_from: the head starts a push on another node (--from) ----
 * The head sends the source node model_push_run (the model_push fields); the
 * node's progress comes back as model_push_event frames and its answer as
 * model_push_end, which the head passes to the CLI as the stream and the
 * result of a local model_push. */

static void remote_free(struct remote_push *rp)
{
	struct remote_push **pp = &remote_running;
	while (*pp && *pp != rp)
		pp = &(*pp)->next;
	if (*pp)
		*pp = rp->next;
	free(rp);
}

static struct remote_push *remote_of(const char *from, const char *push)
{
	for (struct remote_push *rp = remote_running; rp; rp = rp->next)
		if (!strcmp(rp->node, from) && push && !strcmp(rp->push, push))
			return rp;
	return NULL;
}

static void r_model_push_from(struct agent *a, const struct svc_req *r)
{
	const char *from = proto_str(r->msg, "from"), *push = proto_str(r->msg, "push");
	json_t *ch = json_object_get(r->msg, "chain");
	db_node nd;
	if (!a->hd.db || (db_node_get_by_name(a->hd.db, from, &nd) < 0 &&
			  db_node_get(a->hd.db, from, &nd) < 0)) {
		svc_error(r, "not_found", "no node '%s' in the cluster; 'sparkctl node ls' lists them",
			  from);
		return;
	}
	const char *first = proto_str(json_array_get(ch, 0), "id");
	if (!first || strcmp(first, nd.id) || !mr_valid_push_id(push)) {
		svc_error(r, "bad_request", "the chain must start at node %s, the source, and push "
			  "must be 1-64 hex digits", nd.name);
		return;
	}
	if (remote_of(nd.id, push)) {
		svc_error(r, "busy", "push %s already runs on %s", push, nd.name);
		return;
	}
	struct remote_push *rp = calloc(1, sizeof *rp);
	json_t *f = json_deep_copy(r->msg);
	if (!rp || !f) {
		free(rp);
		json_decref(f);
		svc_error(r, "internal", "out of memory");
		return;
	}
	rp->reply = r->reply;
	rp->id = r->id;
	util_strlcpy(rp->node, nd.id, sizeof rp->node);
	util_strlcpy(rp->node_name, nd.name, sizeof rp->node_name);
	util_strlcpy(rp->push, push, sizeof rp->push);
	static const char *const drop[] = {"from", "caller", "id", "type"};
	for (size_t i = 0; i < sizeof drop / sizeof *drop; i++)
		json_object_del(f, drop[i]);
	json_object_set_new(f, "type", json_string("model_push_run"));
	json_object_set_new(f, "id", json_integer(0));
	if (peers_to_node(a, nd.id, f) < 0) {
		free(rp);
		svc_error(r, "unreachable", "node %s is not connected to the head; see 'sparkctl node "
			  "ls'", nd.name);
		return;
	}
	rp->next = remote_running;
	remote_running = rp;
	log_info("model_push_from", "push=%s node=%s", push, nd.name);
}

/* The head asks this node to be a push's source. */
static void f_model_push_run(struct agent *a, const char *from, const json_t *msg)
{
	(void)from; /* the head: only it sends node frames */
	const char *code = "internal";
	char err[512] = "";
	struct push_job *j = a->model ? job_parse(a, msg, &code, err, sizeof err) : NULL;
	if (!j) {
		json_t *f = proto_msg("model_push_end", 0);
		json_object_set_new(f, "push", json_string(proto_str(msg, "push")));
		json_object_set_new(f, "ok", json_false());
		json_object_set_new(f, "error", json_pack("{s:s, s:s}", "code", code, "message",
							  err[0] ? err : "no model service"));
		peers_to_head(a, f);
		return;
	}
	j->via_head = true;
	log_info("model_push_asked", "push=%s name=%s", j->push_id, j->name);
	job_go(a, j);
}

/* The head: the CLI that asked for push (--from) went away; stop it here.
 * Only pushes the head started (model_push_run) are stopped this way. */
static void f_model_push_cancel(struct agent *a, const char *from, const json_t *msg)
{
	(void)from; /* the head: only it sends node frames */
	const char *push = proto_str(msg, "push");
	struct push_job *j = a->model ? a->model->pushes : NULL;
	while (j && (!j->via_head || strcmp(j->push_id, push)))
		j = j->next;
	if (!j) {
		log_debug("model_push_cancel_unknown", "push=%s", log_q(push));
		return;
	}
	log_info("model_push_cancelled", "push=%s name=%s stage=%s", j->push_id, j->name,
		 j->started ? "relay" : "manifest");
	if (!j->started)
		j->cancelled = true; /* manifest_done answers */
	else if (a->model->eng)
		mr_push_cancel(a->model->eng, j->push_id); /* on_push_done answers */
}

static void f_model_push_event(struct agent *a, const char *from, const json_t *msg)
{
	(void)a;
	struct remote_push *rp = remote_of(from, proto_str(msg, "push"));
	if (!rp || rp->gone)
		return;
	json_t *f = proto_msg("stream", rp->id);
	json_object_set_new(f, "event", json_string("progress"));
	static const char *const keys[] = {"node", "bytes", "total", "ms"};
	for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
		json_object_set(f, keys[i], json_object_get(msg, keys[i]));
	conn_send_new(rp->reply, f);
}

static void f_model_push_end(struct agent *a, const char *from, const json_t *msg)
{
	(void)a;
	struct remote_push *rp = remote_of(from, proto_str(msg, "push"));
	if (!rp)
		return;
	struct svc_req r = {.reply = rp->reply, .id = rp->id};
	json_t *d = json_object_get(msg, "data"), *e = json_object_get(msg, "error");
	if (!rp->gone && json_is_true(json_object_get(msg, "ok")) && json_is_object(d))
		svc_reply(&r, json_incref(d));
	else if (!rp->gone)
		svc_error(&r, proto_str(e, "code") ? proto_str(e, "code") : "failed", "%s: %s",
			  rp->node_name, proto_str(e, "message") ? proto_str(e, "message")
								 : "the push failed");
	remote_free(rp);
}

/* The CLI that asked for a --from push went away (its connection closed, or
 * the worker it asked on sent stream_cancel): the source stops the push
 * (model_push_cancel); its model_push_end, when it comes, ends the entry. */
static void remote_caller_gone(struct agent *a, struct remote_push *rp)
{
	if (rp->gone)
		return;
	rp->gone = true;
	json_t *f = proto_msg("model_push_cancel", 0);
	json_object_set_new(f, "push", json_string(rp->push));
	int r = peers_to_node(a, rp->node, f);
	log_info("model_push_from_cancel", "push=%s node=%s sent=%s", rp->push, rp->node_name,
		 r < 0 ? "no" : "yes");
}

/* The source's session closed: its CLI hears so (the push may go on there). */
static void remote_node_gone(const char *node_id)
{
	for (struct remote_push *rp = remote_running, *nx; rp; rp = nx) {
		nx = rp->next;
		if (strcmp(rp->node, node_id))
			continue;
		if (!rp->gone) {
			struct svc_req r = {.reply = rp->reply, .id = rp->id};
			svc_error(&r, "unreachable", "node %s, the source, left the head during the "
				  "push; run it again once it is back: only what is missing moves",
				  rp->node_name);
		}
		remote_free(rp);
	}
}

static const struct svc_request requests[] = {
	{"model_ls", r_model_ls, RIGHT_USER, SVC_LOCAL},
	{"model_ls_all", r_model_ls_all, RIGHT_USER, SVC_HEAD, 0, {{"node", 'S'}, {NULL, 0}}},
	{"model_rm_nodes", r_model_rm_nodes, RIGHT_ADMIN, SVC_HEAD, 0,
	 {{"name", 's'}, {"nodes", 'a'}, {NULL, 0}}},
	{"model_rm", r_model_rm, RIGHT_ADMIN, SVC_LOCAL, 0, {{"name", 's'}, {NULL, 0}}},
	{"model_verify", r_model_verify, RIGHT_USER, SVC_LOCAL, 0, {{"name", 's'}, {NULL, 0}}},
	{"model_push", r_model_push, RIGHT_ADMIN, SVC_LOCAL, SVC_STREAMS,
	 {{"dir", 's'}, {"name", 's'}, {"chain", 'a'}, {"push", 's'}, {"ticket", 's'},
	  {"expires_at", 'i'}, {"dry_run", 'B'}, {NULL, 0}}},
	{"model_push_from", r_model_push_from, RIGHT_ADMIN, SVC_HEAD, SVC_STREAMS,
	 {{"from", 's'}, {"dir", 's'}, {"name", 's'}, {"chain", 'a'}, {"push", 's'},
	  {"ticket", 's'}, {"expires_at", 'i'}, {"dry_run", 'B'}, {NULL, 0}}},
	{"model_ticket", r_model_ticket, RIGHT_ADMIN, SVC_HEAD, 0,
	 {{"push", 's'}, {"name", 's'}, {"chain", 'a'}, {NULL, 0}}},
	{NULL},
};

static const struct svc_frame frames[] = {
	{"model_req", f_model_req, FRAME_TO_NODE, {{"op", 's'}, {"name", 'S'}, {NULL, 0}}},
	{"model_reply", f_model_reply, FRAME_TO_HEAD, {{"ok", 'b'}, {NULL, 0}}},
	{"model_push_run", f_model_push_run, FRAME_TO_NODE,
	 {{"dir", 's'}, {"name", 's'}, {"chain", 'a'}, {"push", 's'}, {"ticket", 's'},
	  {"expires_at", 'i'}, {"dry_run", 'B'}, {NULL, 0}}},
	{"model_push_cancel", f_model_push_cancel, FRAME_TO_NODE, {{"push", 's'}, {NULL, 0}}},
	{"model_push_event", f_model_push_event, FRAME_TO_HEAD,
	 {{"push", 's'}, {"node", 's'}, {"bytes", 'i'}, {"total", 'i'}, {"ms", 'i'}, {NULL, 0}}},
	{"model_push_end", f_model_push_end, FRAME_TO_HEAD,
	 {{"push", 's'}, {"ok", 'b'}, {"data", 'O'}, {"error", 'O'}, {NULL, 0}}},
	{NULL},
};

const struct service model_service = {
	.name = "model",
	.requests = requests,
	.frames = frames,
	.init = model_init,
	.start = model_start,
	.stop = model_stop,
	.free = model_free,
	.on_event = model_event,
};

/* sessions: the agent port and the head's sessions with its members, below
 * the services (issue 15; the peers layer with peers.c).
 *
 * Every connection to the agent port comes here. On a worker it is answered
 * `not_head` (naming the head) and closed. On the head it becomes a session:
 * at most AGENT_PREAUTH_MAX unauthenticated ones (the oldest dropped for a
 * newcomer), each with AGENT_PREAUTH_MS to authenticate and frames of at most
 * AGENT_PREAUTH_FRAME until then; a TLS client certificate is authenticated by
 * the cluster service's hook (a->hooks.session_auth: which member it names),
 * and anything sent before that goes to its pre-authentication hook (a join).
 * An authenticated session without a frame for AGENT_SESSION_IDLE_MS is
 * closed. Its frames are the session's own (forward, stream_cancel) or a
 * service's, found in the services' frame tables: rows with an on_session
 * handler (hello, heartbeat, leave) get the session, the others the sending
 * node's id (peers_dispatch). */
#include "service.h"

#include "log.h"
#include "proto.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void session_unlink(struct agent *a, struct session *s)
{
	for (struct session **p = &a->hd.sessions; *p; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			return;
		}
}

void peers_sweep_sessions(struct agent *a)
{
	uint64_t now_ms = util_now_ms();
	for (struct session *s = a->hd.sessions; s; s = s->next) {
		if (s->closing)
			continue;
		if (!s->authed && now_ms - s->accepted_ms >= AGENT_PREAUTH_MS) {
			log_info("session_preauth_timeout", "peer=%s", conn_peer_name(s->c));
			s->closing = true;
			conn_close(s->c, -ETIMEDOUT);
		} else if (s->authed && now_ms - s->last_ms >= AGENT_SESSION_IDLE_MS) {
			log_warn("session_idle", "node_id=%s peer=%s idle_ms=%llu", s->node_id,
				 conn_peer_name(s->c), (unsigned long long)(now_ms - s->last_ms));
			s->closing = true;
			conn_close(s->c, -ETIMEDOUT);
		}
	}
}

void peers_close_others(struct agent *a, struct session *s)
{
	for (struct session *o = a->hd.sessions; o; o = o->next)
		if (o != s && o->authed && strcmp(o->node_id, s->node_id) == 0) {
			o->authed = false;
			conn_close(o->c, 0);
		}
}

void peers_close_sessions(struct agent *a)
{
	while (a->hd.sessions) {
		struct session *s = a->hd.sessions;
		a->hd.sessions = s->next;
		s->next = NULL;
		conn_close(s->c, 0);
		/* on_session_close frees s; it is no longer on the list */
	}
}

/* ---- the session's own frames ------------------------------------------------------ */

/* A CLI request a worker forwards: served like a local one, answered on the
 * session with the forward's id. */
static void f_forward(struct agent *a, struct session *s, const json_t *msg)
{
	/* a shallow copy with the forward's id, the one answers go with */
	json_t *inner = json_copy(json_object_get(msg, "request"));
	json_object_set_new(inner, "id", json_integer(proto_id(msg)));
	const char *t = proto_type(inner);
	const struct svc_request *row = svc_request_of(t);
	struct svc_req q = {.reply = s->c, .id = proto_id(msg), .msg = inner, .origin = s->node_id};
	if (!t || !*t)
		svc_error(&q, "bad_request", "forward needs a request with a type");
	else if (!row || row->at != SVC_HEAD)
		svc_error(&q, "unknown_type", "the head does not serve \"%s\"", t);
	else
		svc_serve(a, row, &q);
	json_decref(inner);
}

/* The CLI that asked through this session no longer reads the stream. */
static void f_stream_cancel(struct agent *a, struct session *s, const json_t *msg)
{
	svc_emit(a, SVC_EV_STREAM_CANCEL,
		 &(struct svc_event_arg){.c = s->c, .id = proto_int(msg, "relay_id", 0)});
}

static const struct own_frame {
	const char *type;
	void (*fn)(struct agent *a, struct session *s, const json_t *msg);
	struct proto_field fields[2];
} own_frames[] = {
	{"forward", f_forward, {{"request", 'o'}, {NULL, 0}}},
	{"stream_cancel", f_stream_cancel, {{"relay_id", 'i'}, {NULL, 0}}},
};

/* A frame of an authenticated member: the session's own, a service's that
 * takes the session, or a service's that takes the sender's id. A frame
 * missing a field, or with it of another type, is answered with an error and
 * not acted on. */
static void member_frame(struct agent *a, struct session *s, const json_t *msg)
{
	const char *t = proto_type(msg);
	const struct proto_field *fields = NULL;
	const struct own_frame *own = NULL;
	for (size_t i = 0; i < ARRAY_SIZE(own_frames) && !own; i++)
		if (strcmp(own_frames[i].type, t) == 0)
			own = &own_frames[i];
	const struct svc_frame *row = own ? NULL : svc_frame_of(t, FRAME_TO_HEAD);
	if (!own && (!row || !row->on_session)) {
		if (!row || !(row->flags & SVC_FRAME_QUIET))
			agent_busy(a);
		peers_dispatch(a, s->c, s->node_id, FRAME_TO_HEAD, row, msg);
		return;
	}
	fields = own ? own->fields : row->fields;
	char why[128];
	if (proto_check(msg, fields, why, sizeof why) < 0) {
		log_warn("frame_refused", "type=%s reason=%s peer=%s", t, log_q(why), conn_peer_name(s->c));
		svc_error_to(s->c, msg, "bad_request", "%s: %s", t, why);
		return;
	}
	if (own || !(row->flags & SVC_FRAME_QUIET))
		agent_busy(a);
	if (own)
		own->fn(a, s, msg);
	else
		row->on_session(a, s, msg);
}

/* ---- connection callbacks ------------------------------------------------------------- */

static void on_session_frame(conn *c, json_t *msg)
{
	struct session *s = conn_data(c);
	struct agent *a = s->a;
	if (!s->authed) {
		agent_busy(a);
		if (a->hooks.session_preauth) {
			a->hooks.session_preauth(a, s, msg);
		} else {
			svc_error_to(c, msg, "unauthenticated", "present a node certificate");
			conn_close(c, 0);
		}
		json_decref(msg);
		return;
	}
	s->last_ms = util_now_ms();
	member_frame(a, s, msg);
	json_decref(msg);
}

static void refuse_revoked(conn *c)
{
	conn_send_new(c, proto_error(0, "revoked",
				     "this node's certificate is not valid in the cluster (removed "
				     "or revoked); join again with a new token"));
	conn_close(c, 0);
}

static void on_session_ready(conn *c, int status)
{
	struct session *s = conn_data(c);
	struct agent *a = s->a;
	agent_busy(a); /* a TLS handshake just ran */
	if (status < 0)
		return;
	X509 *peer = conn_peer_cert(c);
	if (!peer && conn_peer_revoked(c)) {
		log_warn("cert_refused", "reason=revoked peer=%s", conn_peer_name(c));
		refuse_revoked(c);
		return;
	}
	if (!peer)
		return; /* a joiner: only a small "join" frame, within AGENT_PREAUTH_MS */
	char node_id[40];
	if (!a->hooks.session_auth || a->hooks.session_auth(a, peer, node_id, sizeof node_id) < 0) {
		refuse_revoked(c); /* the hook logged why */
		return;
	}
	util_strlcpy(s->node_id, node_id, sizeof s->node_id);
	s->authed = true;
	s->last_ms = util_now_ms();
	conn_set_max_frame(c, 0); /* a member may send full-size frames */
}

static void on_session_close(conn *c, int err)
{
	struct session *s = conn_data(c);
	struct agent *a = s->a;
	if (s->authed) {
		log_info("node_disconnected", "node_id=%s err=%d", s->node_id, err);
		if (a->hooks.session_closed)
			a->hooks.session_closed(a, s);
	}
	agent_busy(a);
	session_unlink(a, s);
	peers_session_gone(a, c);
	svc_emit(a, SVC_EV_CONN_GONE, &(struct svc_event_arg){.c = c});
	if (s->authed && !peers_session(a, s->node_id))
		svc_emit(a, SVC_EV_NODE_GONE, &(struct svc_event_arg){.node_id = s->node_id});
	free(s);
}

static const struct conn_cbs session_cbs = {
	.on_ready = on_session_ready,
	.on_frame = on_session_frame,
	.on_close = on_session_close,
};

/* Workers answer agent-port connections with a pointer to the head. */
static void on_worker_port_ready(conn *c, int status)
{
	struct agent *a = conn_data(c);
	if (status < 0)
		return;
	conn_send_new(c, proto_error(0, "not_head", a->id.head_addr));
	conn_close(c, 0);
}

static void on_worker_port_frame(conn *c, json_t *msg)
{
	(void)c;
	json_decref(msg);
}

static void on_worker_port_close(conn *c, int err)
{
	struct agent *a = conn_data(c);
	(void)err;
	if (a->port_conns)
		a->port_conns--;
}

static const struct conn_cbs worker_port_cbs = {
	.on_ready = on_worker_port_ready,
	.on_frame = on_worker_port_frame,
	.on_close = on_worker_port_close,
};

void peers_accept(struct agent *a, uv_stream_t *server)
{
	if (a->id.role != ROLE_HEAD) {
		/* A worker's port only points callers at the head; it still caps
		 * how many may hold a connection (each closes within seconds). */
		conn *c = conn_accept(server, a->srv_ctx, &worker_port_cbs, a);
		if (!c)
			return;
		conn_set_max_frame(c, AGENT_PREAUTH_FRAME);
		if (++a->port_conns > AGENT_PREAUTH_MAX)
			conn_close(c, -EBUSY);
		return;
	}
	/* Unauthenticated sessions (joiners, or anyone before its handshake):
	 * at most AGENT_PREAUTH_MAX, the oldest dropped for a newcomer. */
	size_t unauthed = 0;
	struct session *oldest = NULL;
	for (struct session *o = a->hd.sessions; o; o = o->next)
		if (!o->authed && !o->closing) {
			unauthed++;
			if (!oldest || o->accepted_ms <= oldest->accepted_ms)
				oldest = o;
		}
	if (unauthed >= AGENT_PREAUTH_MAX && oldest) {
		log_warn("session_preauth_dropped", "peer=%s unauthenticated=%zu",
			 conn_peer_name(oldest->c), unauthed);
		oldest->closing = true;
		conn_close(oldest->c, -EBUSY);
	}
	struct session *s = calloc(1, sizeof *s);
	if (!s)
		return;
	s->a = a;
	s->accepted_ms = util_now_ms();
	s->c = conn_accept(server, a->srv_ctx, &session_cbs, s);
	if (!s->c) {
		free(s);
		return;
	}
	conn_set_max_frame(s->c, AGENT_PREAUTH_FRAME);
	s->next = a->hd.sessions;
	a->hd.sessions = s;
}

int peers_adopt_session(struct agent *a, uv_stream_t *server, const char *node_id)
{
	if (a->id.role != ROLE_HEAD || !node_id || !*node_id)
		return -ENOENT;
	struct session *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	s->a = a;
	s->accepted_ms = s->last_ms = util_now_ms();
	util_strlcpy(s->node_id, node_id, sizeof s->node_id);
	s->authed = true;
	s->c = conn_accept(server, NULL, &session_cbs, s);
	if (!s->c) {
		free(s);
		return -EIO;
	}
	s->next = a->hd.sessions;
	a->hd.sessions = s;
	return 0;
}

/* peers: the requests this node sends its head and waits for (issue 15: one
 * pending-request table where the worker's cluster forwards and the job
 * relays each had their own queue, timer, timeout and id counter).
 *
 * Each entry has an id on the head session and, when a CLI asked, that CLI's
 * connection and request id. It is sent at once while the session to the head
 * is up (or, PEERS_NOW, as soon as the session exists: hello), else queued
 * for AGENT_QUEUE_WAIT_MS. Answers come back with the entry's id: "stream"
 * frames (PEERS_STREAMS) go to the CLI as they arrive, the final "result" or
 * "error" goes to the CLI (or to the entry's on_answer) and ends the entry. A
 * CLI that goes away leaves the entry to be dropped on its answer; a
 * streaming one sends the head a stream_cancel.
 *
 * Also here: the head's session lookup, the one own-node mailbox (the head's
 * services and its own node's talk through it as if over a session), the
 * requests the head sends nodes and waits for (peers_ask), and dispatch of
 * agent-to-agent frames by the services' frame tables. */
#include "service.h"

#include "log.h"
#include "proto.h"
#include "util.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pending {
	struct pending *next;
	json_int_t id;        /* on the head session */
	json_int_t orig_id;   /* the CLI's */
	conn *cli;            /* NULL: internal, or the CLI went away */
	unsigned flags;
	peers_answer_fn on_answer;
	json_t *frame;        /* not sent yet: waiting for the head session */
	uint64_t queued_ms;
	long long job_id;     /* learnt from a "started" stream event */
};

/* The own-node mailbox: frames between the head and its own node. */
struct mail {
	struct mail *next;
	enum agent_frame_dir dir;
	json_t *msg;
};

/* A request the head sent a node, waiting for its answer. */
struct ask {
	struct ask *next;
	json_int_t id;
	char node_id[40];
	conn *via;               /* the node's session (NULL: the head's own node) */
	peers_ask_fn cb;
	void *owner;
	int tag;
	uint64_t deadline_ms;
};

static void pending_unlink(struct agent *a, struct pending *p)
{
	for (struct pending **q = &a->wk.pending; *q; q = &(*q)->next)
		if (*q == p) {
			*q = p->next;
			return;
		}
}

static void pending_free(struct pending *p)
{
	json_decref(p->frame);
	free(p);
}

static void fail(struct agent *a, struct pending *p, const char *code, const char *why)
{
	if (p->on_answer) {
		json_t *e = proto_error(p->orig_id, code, why);
		p->on_answer(a, p->cli, p->orig_id, e);
		json_decref(e);
	} else if (p->cli) {
		conn_send_new(p->cli, proto_error(p->orig_id, code, why));
	}
}

static void on_queue_timer(uv_timer_t *t)
{
	struct agent *a = t->data;
	uint64_t now = util_now_ms();
	bool left = false;
	for (struct pending *p = a->wk.pending, *next; p; p = next) {
		next = p->next;
		if (!p->frame)
			continue;
		if (now - p->queued_ms < AGENT_QUEUE_WAIT_MS) {
			left = true;
			continue;
		}
		char why[512];
		snprintf(why, sizeof why,
			 "the head at %s is unreachable (%s); check that its sparkd runs, or run this "
			 "command on the head",
			 a->id.head_addr, a->wk.error[0] ? a->wk.error : "connecting");
		pending_unlink(a, p);
		fail(a, p, "head_unreachable", why);
		pending_free(p);
	}
	if (!left)
		uv_timer_stop(t);
}

int peers_request(struct agent *a, conn *cli, json_int_t orig_id, json_t *frame, unsigned flags,
		  peers_answer_fn on_answer)
{
	struct pending *p = calloc(1, sizeof *p);
	if (!p) {
		json_decref(frame);
		return -ENOMEM;
	}
	p->id = ++a->wk.next_id;
	p->orig_id = orig_id;
	p->cli = cli;
	p->flags = flags;
	p->on_answer = on_answer;
	json_object_set_new(frame, "id", json_integer(p->id));
	p->next = a->wk.pending;
	a->wk.pending = p;
	if (a->wk.link && (a->wk.up || (flags & PEERS_NOW))) {
		conn_send_new(a->wk.link, frame);
		return 0;
	}
	p->frame = frame;
	p->queued_ms = util_now_ms();
	if (!a->wk.queue_on) {
		uv_timer_init(a->loop, &a->wk.queue_timer);
		a->wk.queue_timer.data = a;
		a->wk.queue_on = true;
	}
	if (!uv_is_active((uv_handle_t *)&a->wk.queue_timer))
		uv_timer_start(&a->wk.queue_timer, on_queue_timer, 250, 250);
	return 0;
}

bool peers_on_head_frame(struct agent *a, const json_t *msg)
{
	json_int_t id = proto_id(msg);
	struct pending *p = a->wk.pending;
	while (id && p && p->id != id)
		p = p->next;
	if (!id || !p)
		return false;
	bool final = strcmp(proto_type(msg), "stream") != 0;
	if (!final) {
		const char *ev = proto_str(msg, "event");
		if (ev && strcmp(ev, "started") == 0)
			p->job_id = (long long)proto_int(msg, "job_id", 0);
		if (p->cli && (p->flags & PEERS_STREAMS)) {
			json_t *copy = json_copy((json_t *)msg);
			json_object_set_new(copy, "id", json_integer(p->orig_id));
			conn_send_new(p->cli, copy);
		}
		return true;
	}
	pending_unlink(a, p);
	if (p->on_answer) {
		p->on_answer(a, p->cli, p->orig_id, (json_t *)msg);
	} else if (p->cli) {
		json_t *copy = json_copy((json_t *)msg);
		json_object_set_new(copy, "id", json_integer(p->orig_id));
		conn_send_new(p->cli, copy);
	}
	pending_free(p);
	return true;
}

void peers_head_up(struct agent *a)
{
	for (struct pending *p = a->wk.pending; p; p = p->next)
		if (p->frame) {
			conn_send_new(a->wk.link, p->frame);
			p->frame = NULL;
		}
}

void peers_head_lost(struct agent *a)
{
	for (struct pending *p = a->wk.pending, *next; p; p = next) {
		next = p->next;
		if (p->frame)
			continue; /* queued: waits for the next session */
		char why[512];
		const char *err = a->wk.error[0] ? a->wk.error : "closed";
		if (p->job_id)
			snprintf(why, sizeof why,
				 "lost the connection to the head at %s (%s); job %lld keeps running: "
				 "follow it with 'sparkctl job logs -f %lld'",
				 a->id.head_addr, err, p->job_id, p->job_id);
		else
			snprintf(why, sizeof why, "lost the connection to the head at %s (%s); try again",
				 a->id.head_addr, err);
		pending_unlink(a, p);
		fail(a, p, "head_unreachable", why);
		pending_free(p);
	}
}

void peers_cli_gone(struct agent *a, conn *cli)
{
	for (struct pending *p = a->wk.pending, *next; p; p = next) {
		next = p->next;
		if (p->cli != cli)
			continue;
		p->cli = NULL;
		if (!(p->flags & PEERS_STREAMS))
			continue; /* its answer is dropped when it comes */
		if (!p->frame && a->wk.link && a->wk.up) {
			json_t *m = proto_msg("stream_cancel", 0);
			json_object_set_new(m, "relay_id", json_integer(p->id));
			conn_send_new(a->wk.link, m);
		}
		pending_unlink(a, p);
		pending_free(p);
	}
}

void peers_stop(struct agent *a, const char *why)
{
	while (a->mail_first) {
		struct mail *m = a->mail_first;
		a->mail_first = m->next;
		json_decref(m->msg);
		free(m);
	}
	a->mail_last = NULL;
	if (a->mail_timer_on)
		uv_timer_stop(&a->mail_timer); /* closed by main's final walk */
	while (a->asks) { /* their owners answered their own callers when they stopped */
		struct ask *q = a->asks;
		a->asks = q->next;
		free(q);
	}
	if (a->ask_timer_on)
		uv_timer_stop(&a->ask_timer);
	if (a->wk.queue_on)
		uv_timer_stop(&a->wk.queue_timer); /* closed by main's final walk */
	while (a->wk.pending) {
		struct pending *p = a->wk.pending;
		a->wk.pending = p->next;
		fail(a, p, "shutdown", why);
		pending_free(p);
	}
}

int peers_forward(struct agent *a, conn *cli, const json_t *req, unsigned flags,
		  peers_answer_fn on_answer)
{
	agent_busy(a);
	json_t *m = proto_msg("forward", 0);
	json_object_set(m, "request", (json_t *)req);
	return peers_request(a, cli, proto_id(req), m, flags, on_answer);
}

/* ---- sessions, mailbox, dispatch ----------------------------------------------- */

struct session *peers_session(struct agent *a, const char *node_id)
{
	for (struct session *s = a->hd.sessions; s; s = s->next)
		if (s->authed && !s->closing && strcmp(s->node_id, node_id) == 0)
			return s;
	return NULL;
}

void peers_dispatch(struct agent *a, conn *c, const char *from, enum agent_frame_dir dir,
		    const struct svc_frame *f, const json_t *msg)
{
	const char *t = proto_type(msg);
	char why[160];
	if (!f) {
		log_warn("frame_refused", "type=%s reason=unknown_type from=%s", log_q(t), from);
		if (c)
			svc_error_to(c, msg, "unknown_type", "%s does not serve \"%s\"",
				     dir == FRAME_TO_HEAD ? "the head" : "a node", t);
		return;
	}
	if (!f->fn) { /* a session's own frame (hello...) from the mailbox */
		log_warn("frame_refused", "type=%s reason=session_only from=%s", log_q(t), from);
		return;
	}
	if (proto_check(msg, f->fields, why, sizeof why) < 0) {
		log_warn("frame_refused", "type=%s reason=%s from=%s", t, log_q(why), from);
		if (c)
			svc_error_to(c, msg, "bad_request", "%s: %s", t, why);
		return;
	}
	f->fn(a, from, msg);
}

static void on_mail(uv_timer_t *t)
{
	struct agent *a = t->data;
	/* Only what is queued now: handlers may post more (next iteration). */
	struct mail *m = a->mail_first;
	a->mail_first = a->mail_last = NULL;
	while (m) {
		struct mail *next = m->next;
		if (!a->stopping && a->id.role == ROLE_HEAD)
			peers_dispatch(a, NULL, a->id.node_id, m->dir,
				       svc_frame_of(proto_type(m->msg), m->dir), m->msg);
		json_decref(m->msg);
		free(m);
		m = next;
	}
}

static int mail(struct agent *a, enum agent_frame_dir dir, json_t *msg)
{
	struct mail *m = a->stopping ? NULL : calloc(1, sizeof *m);
	if (!m) {
		json_decref(msg);
		return a->stopping ? -ESHUTDOWN : -ENOMEM;
	}
	m->dir = dir;
	m->msg = msg;
	if (a->mail_last)
		a->mail_last->next = m;
	else
		a->mail_first = m;
	a->mail_last = m;
	if (!a->mail_timer_on) {
		uv_timer_init(a->loop, &a->mail_timer);
		a->mail_timer.data = a;
		a->mail_timer_on = true;
	}
	if (!uv_is_active((uv_handle_t *)&a->mail_timer))
		uv_timer_start(&a->mail_timer, on_mail, 0, 0);
	return 0;
}

int peers_to_node(struct agent *a, const char *node_id, json_t *msg)
{
	if (a->id.role == ROLE_HEAD && strcmp(node_id, a->id.node_id) == 0)
		return mail(a, FRAME_TO_NODE, msg);
	struct session *s = peers_session(a, node_id);
	if (!s) {
		json_decref(msg);
		return -ENOTCONN;
	}
	return conn_send_new(s->c, msg);
}

/* ---- requests to nodes ------------------------------------------------------------ */

static void ask_timer_arm(struct agent *a);

/* Unlink the asks that match and call them back with why, oldest first;
 * callbacks may ask again. */
static void fail_asks(struct agent *a, bool (*match)(const struct ask *q, const void *arg),
		      const void *arg, const char *why)
{
	struct ask *hit = NULL, **tail = &hit;
	for (struct ask **p = &a->asks; *p;) {
		struct ask *q = *p;
		if (match(q, arg)) {
			*p = q->next;
			q->next = NULL;
			*tail = q;
			tail = &q->next;
		} else {
			p = &q->next;
		}
	}
	while (hit) {
		struct ask *q = hit;
		hit = q->next;
		q->cb(a, q->owner, q->tag, NULL, why);
		free(q);
	}
}

static bool ask_expired(const struct ask *q, const void *arg)
{
	return q->deadline_ms <= *(const uint64_t *)arg;
}

static void on_ask_timer(uv_timer_t *t)
{
	struct agent *a = t->data;
	uint64_t now = util_now_ms();
	fail_asks(a, ask_expired, &now, "no answer in time");
	ask_timer_arm(a);
}

/* One timer for the earliest deadline. */
static void ask_timer_arm(struct agent *a)
{
	if (!a->ask_timer_on) {
		uv_timer_init(a->loop, &a->ask_timer);
		a->ask_timer.data = a;
		a->ask_timer_on = true;
	}
	uint64_t first = UINT64_MAX, now = util_now_ms();
	for (struct ask *q = a->asks; q; q = q->next)
		if (q->deadline_ms < first)
			first = q->deadline_ms;
	if (first == UINT64_MAX || a->stopping)
		uv_timer_stop(&a->ask_timer);
	else
		uv_timer_start(&a->ask_timer, on_ask_timer, first > now ? first - now : 0, 0);
}

int peers_ask(struct agent *a, const char *node_id, json_t *msg, unsigned timeout_ms,
	      peers_ask_fn cb, void *owner, int tag)
{
	bool self = a->id.role == ROLE_HEAD && strcmp(node_id, a->id.node_id) == 0;
	struct session *s = self ? NULL : peers_session(a, node_id);
	if (!self && !s) {
		json_decref(msg);
		return -ENOTCONN;
	}
	struct ask *q = calloc(1, sizeof *q);
	if (!q) {
		json_decref(msg);
		return -ENOMEM;
	}
	q->id = ++a->next_ask_id;
	util_strlcpy(q->node_id, node_id, sizeof q->node_id);
	q->via = s ? s->c : NULL;
	q->cb = cb;
	q->owner = owner;
	q->tag = tag;
	q->deadline_ms = util_now_ms() + timeout_ms;
	json_object_set_new(msg, "id", json_integer(q->id));
	q->next = a->asks;
	a->asks = q;
	peers_to_node(a, node_id, msg);
	ask_timer_arm(a);
	return 0;
}

bool peers_node_answer(struct agent *a, const char *from, const json_t *msg)
{
	json_int_t id = proto_id(msg);
	for (struct ask **p = &a->asks; *p; p = &(*p)->next) {
		struct ask *q = *p;
		if (q->id != id || strcmp(q->node_id, from) != 0)
			continue; /* not ours, or not from the node it was sent to */
		*p = q->next;
		q->cb(a, q->owner, q->tag, msg, NULL);
		free(q);
		ask_timer_arm(a);
		return true;
	}
	return false;
}

size_t peers_ask_pending(struct agent *a, const void *owner)
{
	size_t n = 0;
	for (struct ask *q = a->asks; q; q = q->next)
		n += q->owner == owner;
	return n;
}

void peers_ask_forget(struct agent *a, const void *owner)
{
	for (struct ask **p = &a->asks; *p;) {
		struct ask *q = *p;
		if (q->owner == owner) {
			*p = q->next;
			free(q);
		} else {
			p = &q->next;
		}
	}
	ask_timer_arm(a);
}

static bool ask_via(const struct ask *q, const void *arg)
{
	return q->via && q->via == (const conn *)arg;
}

void peers_session_gone(struct agent *a, conn *c)
{
	fail_asks(a, ask_via, c, "the node's session to the head closed");
}

int peers_to_head(struct agent *a, json_t *msg)
{
	if (a->id.role == ROLE_HEAD)
		return mail(a, FRAME_TO_HEAD, msg);
	if (a->id.role == ROLE_WORKER && a->wk.link && a->wk.up)
		return conn_send_new(a->wk.link, msg);
	json_decref(msg);
	return -ENOTCONN;
}

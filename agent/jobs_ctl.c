/* jobs_ctl: the CLI side of groups, jobs and exec. A request from sparkctl
 * gets the caller's uid and user name (SO_PEERCRED on the control socket,
 * never what the CLI says) and the origin node, then the head serves it: here
 * on the head, or relayed by a worker as {"type":"job_req","id":R,
 * "request":{...}}. The head answers with any number of {"type":"stream",
 * "id":R,...} frames and one final "result" or "error"; the relay gives them
 * the CLI's id. A CLI that goes away sends "stream_cancel" for its relay, so the
 * head stops streaming (a job it started keeps running). */
#include "jobs.h"

#include "log.h"
#include "proto.h"
#include "util.h"

#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

struct relay {
	struct relay *next;
	json_int_t rid;        /* id on the head session */
	json_int_t orig_id;    /* id the CLI used */
	conn *cli;
	json_t *pending;       /* not sent yet: waiting for the head session */
	uint64_t queued_ms;
	long long job_id;      /* learnt from a "started" stream event */
};

static const char *const jobs_types[] = {"group_create", "group_ls",   "group_show", "group_rm",
					  "job_run",      "job_ls",     "job_show",   "job_logs",
					  "job_cancel",   "exec",       NULL};

static bool is_jobs_type(const char *t)
{
	for (const char *const *p = jobs_types; *p; p++)
		if (strcmp(*p, t) == 0)
			return true;
	return false;
}

static void relay_free(struct jobs *J, struct relay *r)
{
	for (struct relay **p = &J->relays; *p; p = &(*p)->next)
		if (*p == r) {
			*p = r->next;
			break;
		}
	json_decref(r->pending);
	free(r);
}

static void relay_fail(struct relay *r, const char *code, const char *msg)
{
	if (r->cli)
		conn_send_new(r->cli, proto_error(r->orig_id, code, msg));
}

static void on_relay_timer(uv_timer_t *t)
{
	struct jobs *J = t->data;
	struct agent *a = J->a;
	uint64_t now = util_now_ms();
	bool left = false;
	for (struct relay *r = J->relays, *next; r; r = next) {
		next = r->next;
		if (!r->pending)
			continue;
		if (now - r->queued_ms >= AGENT_QUEUE_WAIT_MS) {
			char why[512];
			snprintf(why, sizeof why,
				 "the head at %s is unreachable (%s); check that its sparkd runs, or run "
				 "this command on the head",
				 a->id.head_addr, a->head_error[0] ? a->head_error : "connecting");
			relay_fail(r, "head_unreachable", why);
			relay_free(J, r);
			continue;
		}
		left = true;
	}
	if (!left)
		uv_timer_stop(t);
}

static void relay_send(struct agent *a, conn *c, const json_t *req)
{
	struct jobs *J = a->jobs;
	struct relay *r = calloc(1, sizeof *r);
	if (!r) {
		control_error(c, req, "internal", "out of memory");
		return;
	}
	r->rid = ++a->next_fwd_id;
	r->orig_id = proto_id(req);
	r->cli = c;
	r->next = J->relays;
	J->relays = r;
	json_t *m = proto_msg("job_req", r->rid);
	json_object_set(m, "request", (json_t *)req);
	if (a->head && a->head_up) {
		conn_send_new(a->head, m);
		return;
	}
	r->pending = m;
	r->queued_ms = util_now_ms();
	if (!uv_is_active((uv_handle_t *)&J->relay_timer))
		uv_timer_start(&J->relay_timer, on_relay_timer, 250, 250);
}

bool jobs_control(struct agent *a, conn *c, const json_t *req)
{
	const char *t = proto_type(req);
	if (!is_jobs_type(t))
		return false;
	if (!a->jobs) {
		control_error(c, req, "unavailable", "sparkd is starting or stopping; try again");
		return true;
	}
	if (a->id.removed) {
		control_error(c, req, "removed",
			      "this node was removed from cluster %s; join again with a new token "
			      "('sparkctl join HEAD --token TOKEN')", a->id.cluster_name);
		return true;
	}
	if (a->id.role == ROLE_NONE) {
		control_error(c, req, "not_in_cluster",
			      "this node is not in a cluster; run 'sparkctl init' to start one or "
			      "'sparkctl join HEAD --token TOKEN' to join one");
		return true;
	}
	struct ucred cr;
	socklen_t sl = sizeof cr;
	if (getsockopt(conn_fd(c), SOL_SOCKET, SO_PEERCRED, &cr, &sl) < 0) {
		control_error(c, req, "forbidden", "cannot read the caller's credentials");
		return true;
	}
	struct passwd *pw = getpwuid(cr.uid);
	if (!pw) {
		control_error(c, req, "forbidden",
			      "uid %u has no user name on this node; jobs run as a named user (the same "
			      "name on every node)", (unsigned)cr.uid);
		return true;
	}
	json_t *r = json_deep_copy(req);
	json_object_set_new(r, "uid", json_integer(cr.uid));
	json_object_set_new(r, "user", json_string(pw->pw_name));
	json_object_set_new(r, "origin", json_string(a->id.node_id));
	if (a->id.role == ROLE_HEAD)
		jh_request(a, c, proto_id(req), r);
	else
		relay_send(a, c, r);
	json_decref(r);
	return true;
}

bool jctl_on_head_frame(struct agent *a, const json_t *msg)
{
	struct jobs *J = a->jobs;
	json_int_t id = proto_id(msg);
	if (!id)
		return false;
	struct relay *r = J->relays;
	while (r && r->rid != id)
		r = r->next;
	if (!r)
		return false;
	const char *t = proto_type(msg);
	bool final = strcmp(t, "stream") != 0;
	if (!final && strcmp(proto_str(msg, "event") ? proto_str(msg, "event") : "", "started") == 0)
		r->job_id = (long long)proto_int(msg, "job_id", 0);
	if (r->cli) {
		json_t *copy = json_copy((json_t *)msg);
		json_object_set_new(copy, "id", json_integer(r->orig_id));
		conn_send_new(r->cli, copy);
	}
	if (final)
		relay_free(J, r);
	return true;
}

void jobs_cli_gone(struct agent *a, conn *c)
{
	struct jobs *J = a->jobs;
	if (!J)
		return;
	for (struct relay *r = J->relays, *next; r; r = next) {
		next = r->next;
		if (r->cli != c)
			continue;
		if (!r->pending && a->head && a->head_up) {
			json_t *m = proto_msg("stream_cancel", 0);
			json_object_set_new(m, "relay_id", json_integer(r->rid));
			conn_send_new(a->head, m);
		}
		relay_free(J, r);
	}
	if (a->id.role == ROLE_HEAD)
		jh_conn_gone(a, c);
}

void jctl_head_up(struct agent *a)
{
	struct jobs *J = a->jobs;
	for (struct relay *r = J->relays; r; r = r->next)
		if (r->pending) {
			conn_send_new(a->head, r->pending);
			r->pending = NULL;
		}
}

void jctl_head_lost(struct agent *a)
{
	struct jobs *J = a->jobs;
	for (struct relay *r = J->relays, *next; r; r = next) {
		next = r->next;
		if (r->pending)
			continue;
		char why[512];
		if (r->job_id)
			snprintf(why, sizeof why,
				 "lost the connection to the head at %s (%s); job %lld keeps running: "
				 "follow it with 'sparkctl job logs -f %lld'",
				 a->id.head_addr, a->head_error[0] ? a->head_error : "closed", r->job_id,
				 r->job_id);
		else
			snprintf(why, sizeof why, "lost the connection to the head at %s (%s); try again",
				 a->id.head_addr, a->head_error[0] ? a->head_error : "closed");
		relay_fail(r, "head_unreachable", why);
		relay_free(J, r);
	}
}

void jctl_stop(struct agent *a)
{
	struct jobs *J = a->jobs;
	while (J->relays) {
		relay_fail(J->relays, "shutdown", "sparkd is shutting down");
		relay_free(J, J->relays);
	}
}

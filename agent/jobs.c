/* jobs: the hooks agent.h exposes, the local mailbox between the head and its
 * own node, and helpers shared by jobs_*.c. See jobs.h. */
#include "jobs.h"

#include "log.h"
#include "proto.h"
#include "util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct mail {
	struct mail *next;
	bool to_head;
	json_t *msg;
};

static void on_mail(uv_timer_t *t)
{
	struct jobs *J = t->data;
	struct agent *a = J->a;
	/* Only what is queued now: handlers may post more (next iteration). */
	struct mail *m = J->mail_first;
	J->mail_first = J->mail_last = NULL;
	while (m) {
		struct mail *next = m->next;
		if (!a->stopping) {
			if (m->to_head) {
				if (a->id.role == ROLE_HEAD)
					jh_on_node_msg(a, a->id.node_id, m->msg);
			} else {
				jn_on_head_msg(a, m->msg);
			}
		}
		json_decref(m->msg);
		free(m);
		m = next;
	}
}

void jobs_mail(struct agent *a, bool to_head, json_t *msg)
{
	struct jobs *J = a->jobs;
	struct mail *m = J && !J->stopping ? calloc(1, sizeof *m) : NULL;
	if (!m) {
		json_decref(msg);
		return;
	}
	m->to_head = to_head;
	m->msg = msg;
	if (J->mail_last)
		J->mail_last->next = m;
	else
		J->mail_first = m;
	J->mail_last = m;
	if (!uv_is_active((uv_handle_t *)&J->mail_timer))
		uv_timer_start(&J->mail_timer, on_mail, 0, 0);
}

int jobs_send_node(struct agent *a, const char *node_id, json_t *msg)
{
	if (strcmp(node_id, a->id.node_id) == 0) {
		jobs_mail(a, false, msg);
		return 0;
	}
	struct session *s = head_session(a, node_id);
	if (!s) {
		json_decref(msg);
		return -ENOTCONN;
	}
	return conn_send_new(s->c, msg);
}

/* Length of the UTF-8 sequence starting with byte c, 0 if c cannot start one. */
static size_t utf8_len(unsigned char c)
{
	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		return 2;
	if (c >= 0xe0 && c <= 0xef)
		return 3;
	if (c >= 0xf0 && c <= 0xf4)
		return 4;
	return 0;
}

json_t *jobs_text(const char *buf, size_t len, bool final, size_t *used)
{
	char *out = malloc(len + 1);
	if (!out)
		return NULL;
	size_t i = 0, o = 0;
	while (i < len) {
		unsigned char c = (unsigned char)buf[i];
		size_t l = utf8_len(c);
		if (l == 0 || c == 0) {
			out[o++] = '?';
			i++;
			continue;
		}
		if (i + l > len) {
			if (!final)
				break; /* the rest comes with the next read */
			out[o++] = '?';
			i++;
			continue;
		}
		bool ok = true;
		for (size_t k = 1; k < l; k++)
			ok &= ((unsigned char)buf[i + k] & 0xc0) == 0x80;
		/* overlong 3/4-byte forms and surrogates */
		if (ok && l == 3) {
			unsigned char c1 = (unsigned char)buf[i + 1];
			ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0);
		} else if (ok && l == 4) {
			unsigned char c1 = (unsigned char)buf[i + 1];
			ok = !(c == 0xf0 && c1 < 0x90) && !(c == 0xf4 && c1 >= 0x90);
		}
		if (!ok) {
			out[o++] = '?';
			i++;
			continue;
		}
		memcpy(out + o, buf + i, l);
		o += l;
		i += l;
	}
	if (used)
		*used = i;
	json_t *s = json_stringn(out, o);
	free(out);
	return s;
}

/* ---- hooks (agent.h) ------------------------------------------------------- */

int jobs_init(struct agent *a)
{
	struct jobs *J = calloc(1, sizeof *J);
	if (!J)
		return -ENOMEM;
	J->a = a;
	a->jobs = J;
	uv_timer_init(a->loop, &J->mail_timer);
	J->mail_timer.data = J;
	uv_timer_init(a->loop, &J->head_timer);
	J->head_timer.data = J;
	uv_timer_init(a->loop, &J->node_timer);
	J->node_timer.data = J;
	size_t n = sizeof J->exe;
	if (uv_exepath(J->exe, &n) < 0)
		J->exe[0] = '\0';
	int r = jn_start(a);
	if (r == 0)
		r = jh_start(a);
	return r;
}

void jobs_stop(struct agent *a)
{
	struct jobs *J = a->jobs;
	if (!J || J->stopping)
		return;
	jh_stop(a);
	jn_stop(a);
	J->stopping = true;
	uv_timer_stop(&J->mail_timer);
	uv_timer_stop(&J->head_timer);
	uv_timer_stop(&J->node_timer);
	/* the timers are closed by main's final walk; jobs_free frees the rest */
}

void jobs_free(struct agent *a)
{
	struct jobs *J = a->jobs;
	if (!J)
		return;
	while (J->mail_first) {
		struct mail *m = J->mail_first;
		J->mail_first = m->next;
		json_decref(m->msg);
		free(m);
	}
	jh_free(a);
	jn_free(a);
	free(J);
	a->jobs = NULL;
}

void jobs_session_closed(struct agent *a, struct session *s)
{
	if (!a->jobs)
		return;
	jh_conn_gone(a, s->c);
	if (s->authed && !head_session(a, s->node_id))
		jh_node_session_gone(a, s->node_id);
}

/* head.c's frame table routes job_req, stream_cancel and the members' job_*
 * and exec_* frames here, their fields checked. */
bool jobs_session_frame(struct agent *a, struct session *s, const json_t *msg)
{
	const char *t = proto_type(msg);
	if (!a->jobs)
		return false;
	if (strcmp(t, "job_req") == 0) {
		json_t *inner = json_object_get(msg, "request");
		if (!json_is_string(json_object_get(inner, "type"))) {
			control_error(s->c, msg, "bad_request", "job_req needs a request with a type");
			return true;
		}
		json_t *req = json_deep_copy(inner);
		json_object_set_new(req, "origin", json_string(s->node_id));
		jh_request(a, s->c, proto_id(msg), req);
		json_decref(req);
	} else if (strcmp(t, "stream_cancel") == 0) {
		jh_stream_cancel(a, s->c, proto_int(msg, "relay_id", 0));
	} else {
		jh_on_node_msg(a, s->node_id, msg);
	}
	return true;
}

bool jobs_head_frame(struct agent *a, const json_t *msg)
{
	if (!a->jobs)
		return false;
	return jn_on_head_msg(a, msg);
}

void jobs_head_up(struct agent *a)
{
	if (!a->jobs)
		return;
	jn_head_up(a);
}

void jobs_head_lost(struct agent *a)
{
	if (!a->jobs)
		return;
	jn_head_lost(a);
}

json_t *jobs_node_groups(struct agent *a, const char *node_id)
{
	return a->jobs ? jh_node_groups(a, node_id) : json_array();
}

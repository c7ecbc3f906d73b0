/* jobs: the jobs service's tables and events, and helpers shared by jobs_*.c.
 * See jobs.h. */
#include "jobs.h"

#include "log.h"
#include "proto.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- the service ---------------------------------------------------------------- */

static int jobs_init(struct agent *a, char *err, size_t len)
{
	(void)err;
	(void)len;
	jh_hooks(a);
	a->hooks.job_here = jn_job_here;
	return 0;
}

static int jobs_start(struct agent *a, char *err, size_t len)
{
	struct jobs *J = calloc(1, sizeof *J);
	if (!J) {
		snprintf(err, len, "out of memory");
		return -ENOMEM;
	}
	J->a = a;
	a->jobs = J;
	uv_timer_init(a->loop, &J->head_timer);
	J->head_timer.data = J;
	uv_timer_init(a->loop, &J->node_timer);
	J->node_timer.data = J;
	uv_timer_init(a->loop, &J->end_timer);
	J->end_timer.data = J;
	size_t n = sizeof J->exe;
	if (uv_exepath(J->exe, &n) < 0)
		J->exe[0] = '\0';
	int r = jn_start(a);
	if (r == 0)
		r = jh_start(a);
	if (r < 0)
		snprintf(err, len, "cannot start jobs: %s", strerror(-r));
	return r;
}

static void jobs_stop(struct agent *a)
{
	struct jobs *J = a->jobs;
	if (!J || J->stopping)
		return;
	jh_stop(a);
	jn_stop(a);
	J->stopping = true;
	uv_timer_stop(&J->head_timer);
	uv_timer_stop(&J->node_timer);
	uv_timer_stop(&J->end_timer);
	/* the timers are closed by main's final walk; jobs_free frees the rest */
}

static void jobs_free(struct agent *a)
{
	struct jobs *J = a->jobs;
	if (!J)
		return;
	jh_free(a);
	jn_free(a);
	json_decref(J->ended);
	free(J);
	a->jobs = NULL;
}

static void jobs_event(struct agent *a, enum svc_event ev, const struct svc_event_arg *arg)
{
	if (!a->jobs || a->jobs->stopping)
		return;
	switch (ev) {
	case SVC_EV_HEAD_UP:
		jn_head_up(a);
		break;
	case SVC_EV_HEAD_LOST:
		jn_head_lost(a);
		break;
	case SVC_EV_CONN_GONE:
		if (a->id.role == ROLE_HEAD)
			jh_conn_gone(a, arg->c);
		break;
	case SVC_EV_NODE_GONE:
		jh_node_session_gone(a, arg->node_id);
		break;
	case SVC_EV_STREAM_CANCEL:
		jh_stream_cancel(a, arg->c, arg->id);
		break;
	default:
		break;
	}
}

/* Job users run, watch and cancel their own jobs and exec as themselves;
 * groups are made and removed by admins (issue 14). A job runs as its
 * caller's user name on every node. */
#define JOB SVC_HEAD, SVC_NAMED_CALLER
#define STREAM SVC_HEAD, SVC_NAMED_CALLER | SVC_STREAMS
static const struct svc_request requests[] = {
	{"group_create", jh_group_create, RIGHT_ADMIN, JOB,
	 {{"name", 'S'}, {"nodes", 'A'}, {"size", 'I'}, {"shared", 'B'}}},
	{"group_ls", jh_group_ls, RIGHT_USER, JOB},
	{"group_show", jh_group_show, RIGHT_USER, JOB, {{"name", 'S'}}},
	{"group_rm", jh_group_rm, RIGHT_ADMIN, JOB, {{"name", 'S'}, {"force", 'B'}}},
	{"job_run", jh_job_run, RIGHT_USER, STREAM,
	 {{"group", 'S'}, {"launcher", 'S'}, {"argv", 'A'}, {"env", 'A'}, {"ranks_per_node", 'I'},
	  {"timeout_s", 'I'}, {"detach", 'B'}, {"name", 'S'}, {"nnodes", 'I'}, {"force", 'B'},
	  {"workdir", 'S'}, {"cwd", 'S'}, {"path", 'S'}, {"lang", 'S'}}},
	{"job_ls", jh_job_ls, RIGHT_USER, JOB, {{"running", 'B'}, {"limit", 'I'}}},
	{"job_show", jh_job_show, RIGHT_USER, JOB, {{"job", 'S'}}},
	{"job_logs", jh_job_logs, RIGHT_USER, STREAM, {{"job", 'S'}, {"rank", 'I'}, {"follow", 'B'}}},
	{"job_cancel", jh_job_cancel, RIGHT_USER, JOB, {{"job", 'S'}}},
	{"exec", jh_exec, RIGHT_USER, STREAM,
	 {{"node", 'S'}, {"argv", 'A'}, {"env", 'A'}, {"shell", 'B'}, {"job_id", 'I'}}},
	/* `sparkctl env` (Slurm's TaskProlog): the head plans, the asking node fills in */
	{"job_env", jh_job_env, RIGHT_USER, SVC_HEAD, 0,
	 {{"nodes", 'a'}, {"job_id", 'I'}, {"job_name", 'S'}, {"group", 'S'}, {"rank", 'I'},
	  {"local_rank", 'I'}, {"ranks_per_node", 'I'}},
	 jobs_env_answer},
	{NULL},
};
#undef JOB
#undef STREAM

static const struct svc_frame frames[] = {
	{"job_started", jh_job_started, FRAME_TO_HEAD, {{"job_id", 'i'}, {"ranks", 'a'}, {NULL, 0}}},
	{"job_exit", jh_job_exit, FRAME_TO_HEAD,
	 {{"job_id", 'i'}, {"rank", 'i'}, {"exit_code", 'i'}, {"signal", 'i'}, {NULL, 0}}},
	{"job_data", jh_job_data, FRAME_TO_HEAD, {{"tail_id", 'i'}, {NULL, 0}}},
	{"job_sync", jh_job_sync, FRAME_TO_HEAD, {{"ranks", 'a'}, {NULL, 0}}},
	{"exec_data", jh_exec_data, FRAME_TO_HEAD,
	 {{"exec_id", 'i'}, {"stream", 's'}, {"data", 's'}, {NULL, 0}}},
	{"exec_exit", jh_exec_exit, FRAME_TO_HEAD,
	 {{"exec_id", 'i'}, {"exit_code", 'i'}, {"signal", 'i'}, {NULL, 0}}},
	{"job_start", jn_job_start, FRAME_TO_NODE, {{"job", 'o'}, {NULL, 0}}},
	{"job_signal", jn_job_signal, FRAME_TO_NODE, {{"job_id", 'i'}, {NULL, 0}}},
	{"job_tail", jn_job_tail, FRAME_TO_NODE,
	 {{"tail_id", 'i'}, {"job_id", 'i'}, {"rank", 'I'}, {"offset", 'I'}, {NULL, 0}}},
	{"job_untail", jn_job_untail, FRAME_TO_NODE, {{"tail_id", 'i'}, {NULL, 0}}},
	{"exec_start", jn_exec_start, FRAME_TO_NODE, {{"exec_id", 'i'}, {"argv", 'a'}, {NULL, 0}}},
	{"exec_signal", jn_exec_signal, FRAME_TO_NODE, {{"exec_id", 'i'}, {NULL, 0}}},
	{"job_sync_ack", jn_sync_ack, FRAME_TO_NODE, {{NULL, 0}}},
	{NULL},
};

const struct service jobs_service = {
	.name = "jobs",
	.requests = requests,
	.frames = frames,
	.init = jobs_init,
	.start = jobs_start,
	.stop = jobs_stop,
	.free = jobs_free,
	.on_event = jobs_event,
};

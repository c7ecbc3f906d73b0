/* serve: the serve service's tables and life cycle (serve.h). */
#include "serve.h"

#include <stdlib.h>

static const struct svc_request requests[] = {
	/* plan: what `serve --dry-run -o json` prints (cli/cmd_serve.c renders it) */
	{"svc_start", sh_svc_start, RIGHT_USER, SVC_HEAD, SVC_NAMED_CALLER,
	 {{"name", 's'}, {"group", 's'}, {"plan", 'o'}, {"force", 'B'}, {NULL, 0}}},
	{"svc_ls", sh_svc_ls, RIGHT_USER, SVC_HEAD, 0, {{"group", 'S'}, {NULL, 0}}},
	{"svc_show", sh_svc_show, RIGHT_USER, SVC_HEAD, 0, {{"name", 's'}, {NULL, 0}}},
	{"svc_stop", sh_svc_stop, RIGHT_USER, SVC_HEAD, 0, {{"name", 's'}, {NULL, 0}}},
	{"svc_restart", sh_svc_restart, RIGHT_USER, SVC_HEAD, 0, {{"name", 's'}, {NULL, 0}}},
	/* a stopped or failed service leaves the list (svc logs: the CLI reads the
	 * current run's job logs with job_logs) */
	{"svc_rm", sh_svc_rm, RIGHT_USER, SVC_HEAD, 0, {{"name", 's'}, {NULL, 0}}},
	/* a snapshot of every service, then one after each change (spark-router) */
	{"svc_watch", sh_svc_watch, RIGHT_USER, SVC_HEAD, SVC_STREAMS, {{"group", 'S'}, {NULL, 0}}},
	{NULL},
};

static const struct svc_frame frames[] = {
	{"svc_health", sh_health, FRAME_TO_HEAD,
	 {{"service", 's'}, {"run", 'i'}, {"ok", 'b'}, {"code", 'I'}, {"models", 'A'},
	  {"error", 'S'}, {NULL, 0}}},
	{"svc_health_watch", sn_health_watch, FRAME_TO_NODE,
	 {{"service", 's'}, {"run", 'i'}, {"url", 's'}, {"models_url", 'S'}, {"interval_ms", 'i'},
	  {"timeout_ms", 'i'}, {NULL, 0}}},
	{"svc_health_unwatch", sn_health_unwatch, FRAME_TO_NODE, {{"service", 's'}, {NULL, 0}}},
	{NULL},
};

static int serve_init(struct agent *a, char *err, size_t len)
{
	(void)err;
	(void)len;
	a->serve = calloc(1, sizeof *a->serve);
	if (!a->serve)
		return -1;
	a->serve->a = a;
	return 0;
}

static int serve_start(struct agent *a, char *err, size_t len)
{
	(void)err;
	(void)len;
	int r = sn_start(a);
	if (r < 0)
		return r;
	return sh_start(a);
}

static void serve_stop(struct agent *a)
{
	sh_stop(a);
	sn_stop(a);
}

static void serve_free(struct agent *a)
{
	if (!a->serve)
		return;
	sh_free(a);
	sn_free(a);
	free(a->serve);
	a->serve = NULL;
}

static void serve_event(struct agent *a, enum svc_event ev, const struct svc_event_arg *arg)
{
	sh_event(a, ev, arg);
	sn_event(a, ev, arg);
}

const struct service serve_service = {
	.name = "serve",
	.requests = requests,
	.frames = frames,
	.init = serve_init,
	.start = serve_start,
	.stop = serve_stop,
	.free = serve_free,
	.on_event = serve_event,
};

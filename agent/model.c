/* model: the `model` service of sparkd (issue 18, docs/models.md): the models
 * this node holds, in its store (models.dir, default STATE_DIR/models).
 * Requests, served by the node whose control socket got them:
 *   model_ls                 -> {"node", "dir", "models": [mm_store_list rows]}
 *   model_rm {name}          -> {"node", "name", "removed": true}     (admin)
 *   model_verify {name}      -> {"node", "name", "files", "bytes", "ok", "problems": [...]}
 * verify re-hashes every chunk in a libuv worker thread, so the agent keeps
 * answering meanwhile. The push itself (model_relay.c, the data connections
 * between nodes) is not served yet. */
#include "agent.h"
#include "model_manifest.h"
#include "service.h"

#include "cfg.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct model_svc {
	char root[PATH_MAX];
	unsigned verifying; /* verify jobs in worker threads */
};

static const char *node_name(struct agent *a)
{
	return a->id.node_name[0] ? a->id.node_name : a->opts.name;
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
	return 0;
}

static void model_free(struct agent *a)
{
	free(a->model);
	a->model = NULL;
}

static void r_model_ls(struct agent *a, const struct svc_req *r)
{
	json_t *list;
	char err[512] = "";
	int rc = mm_store_list(a->model->root, &list, err, sizeof err);
	if (rc < 0) {
		json_decref(list);
		svc_error(r, "internal", "%s", err[0] ? err : strerror(-rc));
		return;
	}
	svc_reply(r, json_pack("{s:s, s:s, s:o}", "node", node_name(a), "dir", a->model->root,
			       "models", list));
}

static void r_model_rm(struct agent *a, const struct svc_req *r)
{
	const char *name = proto_str(r->msg, "name");
	char err[512] = "";
	if (!mm_valid_name(name)) {
		svc_error(r, "bad_request", "'%s' is not a model name", name);
		return;
	}
	int rc = mm_store_remove(a->model->root, name, err, sizeof err);
	if (rc == -ENOENT) {
		svc_error(r, "not_found", "no model %s on %s; see 'sparkctl model ls'", name,
			  node_name(a));
		return;
	}
	if (rc < 0) {
		svc_error(r, "internal", "%s", err);
		return;
	}
	log_info("model_removed", "name=%s dir=%s", name, log_q(a->model->root));
	svc_reply(r, json_pack("{s:s, s:s, s:b}", "node", node_name(a), "name", name, "removed",
			       1));
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

static void model_event(struct agent *a, enum svc_event ev, const struct svc_event_arg *arg)
{
	(void)a;
	if (ev != SVC_EV_CONN_GONE)
		return;
	for (struct verify_job *j = jobs_running; j; j = j->next)
		if (j->reply == arg->c)
			j->gone = true;
}

static const struct svc_request requests[] = {
	{"model_ls", r_model_ls, RIGHT_USER, SVC_LOCAL},
	{"model_rm", r_model_rm, RIGHT_ADMIN, SVC_LOCAL, 0, {{"name", 's'}, {NULL, 0}}},
	{"model_verify", r_model_verify, RIGHT_USER, SVC_LOCAL, 0, {{"name", 's'}, {NULL, 0}}},
	{NULL},
};

const struct service model_service = {
	.name = "model",
	.requests = requests,
	.init = model_init,
	.free = model_free,
	.on_event = model_event,
};

/* serve_head.c: the head side of the serve service (serve.h, docs/serving.md).
 *
 * A service is a row of cluster.db's services table (db_service) and, while
 * the head runs, one struct sh_svc. Its every run is a job of the jobs
 * service (a->hooks.job_launch); the job's end (SVC_EV_JOB_ENDED) decides
 * what comes next by the recipe's restart policy. A model server cannot
 * lose a rank: one that exits 0 while the others run (SVC_EV_RANK_ENDED)
 * makes the head stop the run (rank 0's exit 0 counts as the run's, any
 * other as a failure). Health: rank 0's node
 * checks the server over HTTP (serve_node.c) and reports svc_health; only
 * that node may report it.
 *
 * States: starting (a run is up and not yet healthy, or it waits for an
 * earlier service on a shared node: waiting_for), ready, unhealthy (failing
 * after ready), restarting (back-off before the next run), failed (restart
 * limit, or a run that never became healthy within startup_timeout and no
 * restart left), waiting (a member's sparkd is not connected to the head:
 * the next run starts as soon as every member is back; waiting costs no
 * restart and no back-off), stopped.
 *
 * Admission: each member's budget (the node's report, nodes.mem_budget)
 * minus the need of the services placed there that are not stopped or
 * failed must hold this service's need, else the start is refused with the
 * numbers per node (--force overrides and says so).
 *
 * After a head restart every service is loaded with its state; a run whose
 * job is still starting or running (the jobs table) is kept (the watch goes
 * to rank 0's node again when it says hello: SVC_EV_NODE_UP), not started
 * again.
 *
 * Who may: every user of the cluster sees every service (the router needs
 * them all); only its owner (who started it) or an admin (root,
 * security.admin_group) stops, restarts or removes it. */
#include "serve.h"

#include "log.h"
#include "proto.h"
#include "util.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SH_TICK_MS 500
#define SH_STOP_GRACE_MS 5000       /* SIGTERM, then SIGKILL after this */
#define SH_STOP_WAIT_MS (SH_STOP_GRACE_MS + 10000) /* a stop's answer at the latest */
#define SH_MAX_PLAN (64 * 1024)     /* bytes of a plan (JSON) */
#define SH_MAX_SERVICES 256
#define SH_MAX_WATCHERS 64
#define SH_MAX_NODES 8
#define SH_MAX_MODELS 64
#define SH_START_HOLD_S 600        /* a start holds others on its nodes back this long at most */
#define SH_MAX_ADDRS 17             /* a node's addresses an endpoint may name */
#define SH_GIB (1024.0 * 1024.0 * 1024.0)

struct sh_svc {
	struct sh_svc *next;
	db_service row;       /* text columns NULL: kept as JSON below */
	json_t *plan, *caller, *need, *endpoint;
	char node_id[SH_MAX_NODES][40]; /* rank i's node */
	char node_name[SH_MAX_NODES][64];
	size_t n_nodes;
	char waiting_for[64]; /* starting, no run yet: the service it waits for */
	bool live;            /* the run's job has not ended */
	bool got_ok;          /* the run answered its health check once */
	bool stopping;        /* svc stop: stopped at the run's end */
	bool restart_now;     /* svc restart: a new run at the run's end */
	bool timed_out;       /* start-up timeout: the run's end is a failure */
	int rank_end;         /* a rank ended while the others ran: 0 no, 1 a failure, 2 clean */
	char rank_why[200];   /* which rank and how */
	uint64_t next_start_ms;
	conn *stop_dest;      /* svc stop waits for the run's end */
	json_int_t stop_id;
	uint64_t stop_deadline_ms;
};

struct sh_watch {
	struct sh_watch *next;
	conn *dest;
	json_int_t id;
	char group[64];
	bool dead;
};

static void notify(struct agent *a);
static void try_start(struct agent *a, struct sh_svc *s);

/* ---- small helpers ------------------------------------------------------------ */

static struct serve *S(struct agent *a) { return a->serve; }

static bool is_head(struct agent *a) { return a->serve && a->id.role == ROLE_HEAD && a->hd.db; }

static const char *caller_user(const json_t *req)
{
	const char *u = proto_str(json_object_get(req, "caller"), "user");
	return u ? u : "";
}

static struct sh_svc *find_svc(struct agent *a, const char *name)
{
	for (struct sh_svc *s = S(a)->svcs; s; s = s->next)
		if (strcmp(s->row.name, name) == 0)
			return s;
	return NULL;
}

static bool state_is(const struct sh_svc *s, const char *st) { return strcmp(s->row.state, st) == 0; }

/* Placed on its nodes (its memory counts there): not stopped or failed. */
static bool placed(const struct sh_svc *s)
{
	return !state_is(s, "stopped") && !state_is(s, "failed");
}

static bool shares_node(const struct sh_svc *x, const struct sh_svc *y)
{
	for (size_t i = 0; i < x->n_nodes; i++)
		for (size_t k = 0; k < y->n_nodes; k++)
			if (strcmp(x->node_id[i], y->node_id[k]) == 0)
				return true;
	return false;
}

static json_int_t plan_int(const json_t *plan, const char *obj, const char *key, json_int_t def)
{
	const json_t *o = obj ? json_object_get(plan, obj) : plan;
	return proto_int(o, key, def);
}

static const char *plan_str(const json_t *plan, const char *obj, const char *key)
{
	const json_t *o = obj ? json_object_get(plan, obj) : plan;
	const char *v = proto_str(o, key);
	return v ? v : "";
}

static void rfc3339(int64_t t, char *out, size_t len)
{
	time_t tt = (time_t)t;
	struct tm tm;
	if (!gmtime_r(&tt, &tm) || !strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm))
		snprintf(out, len, "1970-01-01T00:00:00Z");
}

static void svc_free(struct sh_svc *s)
{
	json_decref(s->plan);
	json_decref(s->caller);
	json_decref(s->need);
	json_decref(s->endpoint);
	free(s);
}

/* ---- what a service looks like ------------------------------------------------ */

/* The object svc_watch and svc ls carry (the contract's fields). */
static json_t *svc_brief(const struct sh_svc *s)
{
	char at[32];
	rfc3339(s->row.updated_at, at, sizeof at);
	json_t *ep = json_object();
	json_object_set_new(ep, "url", json_string(plan_str(s->plan, "endpoint", "url")));
	json_object_set_new(ep, "management_url",
			    json_string(plan_str(s->plan, "endpoint", "management_url")));
	json_t *models = json_object_get(s->endpoint, "models");
	json_object_set_new(ep, "models", json_is_array(models) ? json_deep_copy(models) : json_array());
	json_int_t ctx = plan_int(s->plan, "admission", "context", 0);
	return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:s}", "name", s->row.name,
			 "owner", s->row.owner, "group", s->row.group_name, "state", s->row.state,
			 "runtime", s->row.runtime,
			 "model", s->row.model, "run",
			 s->live ? json_integer(s->row.run_id) : json_null(), "endpoint", ep,
			 "max_context", ctx > 0 ? json_integer(ctx) : json_null(), "updated_at", at);
}

/* svc show: the brief object and the rest. */
static json_t *svc_full(const struct sh_svc *s)
{
	json_t *o = svc_brief(s);
	json_t *nodes = json_array();
	for (size_t i = 0; i < s->n_nodes; i++) {
		json_int_t need = proto_int(s->need, s->node_id[i], 0);
		json_array_append_new(nodes, json_pack("{s:i, s:s, s:s, s:f}", "rank", (int)i, "node",
						       s->node_name[i], "node_id", s->node_id[i],
						       "need_gib", (double)need / SH_GIB));
	}
	char at[32];
	rfc3339(s->row.created_at, at, sizeof at);
	json_object_set_new(o, "recipe", json_string(s->row.recipe));
	json_object_set_new(o, "created_at", json_string(at));
	json_object_set_new(o, "last_run", s->row.run_id ? json_integer(s->row.run_id) : json_null());
	rfc3339(s->row.run_started, at, sizeof at);
	json_object_set_new(o, "run_started_at", s->live ? json_string(at) : json_null());
	json_object_set_new(o, "restarts", json_integer(s->row.restarts));
	json_object_set_new(o, "failures", json_integer(s->row.failures));
	json_object_set_new(o, "restart", json_deep_copy(json_object_get(s->plan, "restart")));
	json_object_set_new(o, "health", json_deep_copy(json_object_get(s->plan, "health")));
	json_object_set_new(o, "last_error", json_string(s->row.last_error));
	json_object_set_new(o, "waiting_for",
			    s->waiting_for[0] ? json_string(s->waiting_for) : json_null());
	json_object_set_new(o, "forced", json_boolean(s->row.forced));
	json_object_set_new(o, "nodes", nodes);
	return o;
}

static void save(struct agent *a, struct sh_svc *s, bool endpoint)
{
	s->row.updated_at = util_now();
	char *ep = endpoint ? json_dumps(s->endpoint, JSON_COMPACT) : NULL;
	s->row.endpoint = ep;
	int r = db_service_update(a->hd.db, &s->row);
	s->row.endpoint = NULL;
	free(ep);
	if (r < 0)
		log_warn("service_save_failed", "service=%s err=%s", s->row.name, strerror(-r));
}

static void set_state(struct agent *a, struct sh_svc *s, const char *state, const char *why)
{
	bool changed = !state_is(s, state);
	if (why)
		snprintf(s->row.last_error, sizeof s->row.last_error, "%s", why);
	if (changed) {
		log_info("service_state", "service=%s from=%s to=%s%s%s", s->row.name, s->row.state,
			 state, why ? " why=" : "", why ? log_q(why) : "");
		snprintf(s->row.state, sizeof s->row.state, "%s", state);
	}
	save(a, s, false);
	if (changed)
		notify(a);
}

/* ---- watchers (svc_watch) -------------------------------------------------------- */

static json_t *snapshot(struct agent *a, const char *group)
{
	json_t *arr = json_array();
	for (struct sh_svc *s = S(a)->svcs; s; s = s->next)
		if (!group || !*group || strcmp(group, s->row.group_name) == 0)
			json_array_append_new(arr, svc_brief(s));
	return json_pack("{s:o}", "services", arr);
}

static void watch_send(struct agent *a, struct sh_watch *w)
{
	json_t *m = proto_msg("stream", w->id);
	json_object_set_new(m, "data", snapshot(a, w->group));
	conn_send_new(w->dest, m);
}

static void watch_sweep(struct serve *sv)
{
	for (struct sh_watch **p = &sv->watchers; *p;) {
		if ((*p)->dead) {
			struct sh_watch *w = *p;
			*p = w->next;
			free(w);
		} else {
			p = &(*p)->next;
		}
	}
}

/* A change of a service's state, endpoint or models: a snapshot to every watcher. */
static void notify(struct agent *a)
{
	for (struct sh_watch *w = S(a)->watchers; w; w = w->next)
		if (!w->dead)
			watch_send(a, w);
}

/* ---- health watches on rank 0's node ---------------------------------------------- */

static void send_watch(struct agent *a, struct sh_svc *s)
{
	if (!s->live || !s->n_nodes)
		return;
	char url[512], murl[512];
	const char *base = plan_str(s->plan, "endpoint", "url");
	const char *path = plan_str(s->plan, "health", "path");
	snprintf(url, sizeof url, "%s%s%s", base, path[0] == '/' ? "" : "/", path[0] ? path : "health");
	snprintf(murl, sizeof murl, "%s/v1/models", base);
	json_int_t interval = plan_int(s->plan, "health", "interval_s", 10);
	json_int_t timeout = plan_int(s->plan, "health", "timeout_s", 5);
	json_t *m = proto_msg("svc_health_watch", 0);
	json_object_set_new(m, "service", json_string(s->row.name));
	json_object_set_new(m, "run", json_integer(s->row.run_id));
	json_object_set_new(m, "url", json_string(url));
	json_object_set_new(m, "models_url", json_string(murl));
	json_object_set_new(m, "interval_ms", json_integer(interval * 1000));
	json_object_set_new(m, "timeout_ms", json_integer(timeout * 1000));
	if (peers_to_node(a, s->node_id[0], m) < 0)
		log_info("service_watch_later", "service=%s node=%s (not connected: sent when it "
			 "says hello)", s->row.name, s->node_name[0]);
}

static void send_unwatch(struct agent *a, struct sh_svc *s)
{
	if (!s->n_nodes)
		return;
	json_t *m = proto_msg("svc_health_unwatch", 0);
	json_object_set_new(m, "service", json_string(s->row.name));
	peers_to_node(a, s->node_id[0], m);
}

/* ---- runs -------------------------------------------------------------------------- */

/* Another service on a shared node whose start is under way (or waits
 * longer): this one waits for it to become ready or fail, but not for a
 * run that has been starting for SH_START_HOLD_S already (issue 27: one
 * user's server that never becomes ready would hold every other service on
 * its nodes back until its own start-up timeout, 60 minutes by default). */
static struct sh_svc *blocker(struct agent *a, const struct sh_svc *s)
{
	int64_t now = util_now();
	for (struct sh_svc *t = S(a)->svcs; t; t = t->next) {
		if (t == s || !state_is(t, "starting") || !shares_node(s, t))
			continue;
		if (t->live && now - t->row.run_started < SH_START_HOLD_S)
			return t;
		if (t->live)
			continue;
		if (t->waiting_for[0] && (t->row.created_at < s->row.created_at ||
					  (t->row.created_at == s->row.created_at &&
					   strcmp(t->row.name, s->row.name) < 0)))
			return t;
	}
	return NULL;
}

static void run_ended(struct agent *a, struct sh_svc *s, bool clean, const char *why);

/* The first member (rank index) whose sparkd is not connected to the head,
 * or -1 when every member is there. */
static int member_away(struct agent *a, const struct sh_svc *s)
{
	for (size_t i = 0; i < s->n_nodes; i++)
		if (strcmp(s->node_id[i], a->id.node_id) != 0 && !peers_session(a, s->node_id[i]))
			return (int)i;
	return -1;
}

/* No run can start while member k is away: wait for it, without counting
 * a failure or a back-off (SVC_EV_NODE_UP and the tick start the run).
 * ended: why the last run ended, when it ended for this. */
static void wait_for_member(struct agent *a, struct sh_svc *s, int k, const char *ended)
{
	char why[600];
	snprintf(why, sizeof why, "%s%swaiting for %s: its sparkd is not connected to the head; "
		 "the service starts when it is back", ended ? ended : "", ended ? "; " : "",
		 s->node_name[k]);
	s->waiting_for[0] = '\0';
	if (!state_is(s, "waiting"))
		log_info("service_waits_member", "service=%s node=%s", s->row.name, s->node_name[k]);
	set_state(a, s, "waiting", why);
}

static void launch(struct agent *a, struct sh_svc *s)
{
	json_t *ranks = json_array();
	size_t i;
	json_t *r;
	json_array_foreach(json_object_get(s->plan, "ranks"), i, r) {
		json_t *env = json_object_get(r, "env");
		env = json_is_object(env) ? json_deep_copy(env) : json_object();
		/* the PATH of the CLI that started it, as `sparkctl run` passes it,
		 * unless the recipe sets one */
		json_t *path = json_object_get(s->plan, "path");
		if (json_is_string(path) && !json_object_get(env, "PATH"))
			json_object_set(env, "PATH", path);
		json_array_append_new(ranks, json_pack("{s:s, s:O, s:o}", "node", s->node_id[i], "argv",
						       json_object_get(r, "argv"), "env", env));
	}
	char jname[96], owner[96];
	snprintf(jname, sizeof jname, "svc-%s-%d", s->row.name, s->row.restarts + (s->row.run_id ? 2 : 1));
	snprintf(owner, sizeof owner, "serve:%s", s->row.name);
	json_t *spec = json_pack("{s:s, s:s, s:s, s:O, s:o}", "name", jname, "group",
				 s->row.group_name, "owner", owner, "caller", s->caller, "ranks", ranks);
	/* where the CLI that started it was (the ranks' working directory) */
	if (spec && json_is_string(json_object_get(s->plan, "cwd")))
		json_object_set(spec, "workdir", json_object_get(s->plan, "cwd"));
	char err[512] = "";
	long long id = -ENOSYS;
	if (!a->hooks.job_launch)
		snprintf(err, sizeof err, "the jobs service does not start services on this head");
	else if (!spec)
		snprintf(err, sizeof err, "out of memory");
	else
		id = a->hooks.job_launch(a, spec, err, sizeof err);
	json_decref(spec);
	s->waiting_for[0] = '\0';
	if (id <= 0) {
		char why[600];
		snprintf(why, sizeof why, "cannot start a run: %s", err[0] ? err : "job_launch failed");
		log_warn("service_launch_failed", "service=%s err=%s", s->row.name, log_q(err));
		s->live = false;
		run_ended(a, s, false, why);
		return;
	}
	if (s->row.run_id)
		s->row.restarts++;
	s->row.run_id = id;
	s->row.run_started = util_now();
	s->live = true;
	s->got_ok = false;
	s->timed_out = false;
	s->rank_end = 0;
	s->rank_why[0] = '\0';
	s->restart_now = false;
	log_info("service_run", "service=%s job=%lld restarts=%d", s->row.name, id, s->row.restarts);
	snprintf(s->row.state, sizeof s->row.state, "starting");
	save(a, s, false);
	notify(a);
	send_watch(a, s);
}

/* Start a run now, or wait: in "waiting" for a member that is away, in
 * "starting" for an earlier service on a shared node. */
static void try_start(struct agent *a, struct sh_svc *s)
{
	int away = member_away(a, s);
	if (away >= 0) {
		wait_for_member(a, s, away, NULL);
		return;
	}
	struct sh_svc *b = blocker(a, s);
	if (b) {
		bool changed = strcmp(s->waiting_for, b->row.name) != 0 || !state_is(s, "starting");
		snprintf(s->waiting_for, sizeof s->waiting_for, "%s", b->row.name);
		if (changed) {
			log_info("service_waits", "service=%s for=%s", s->row.name, b->row.name);
			set_state(a, s, "starting", NULL);
		}
		return;
	}
	launch(a, s);
}

/* The run's job ended (or could not start): the restart policy decides. */
static void run_ended(struct agent *a, struct sh_svc *s, bool clean, const char *why)
{
	s->live = false;
	if (s->stopping) {
		s->stopping = false;
		set_state(a, s, "stopped", NULL);
		if (s->stop_dest) {
			svc_send_result(s->stop_dest, s->stop_id, svc_full(s));
			s->stop_dest = NULL;
		}
		return;
	}
	if (s->restart_now) {
		s->restart_now = false;
		s->row.failures = 0;
		snprintf(s->row.last_error, sizeof s->row.last_error, "restarted by request");
		try_start(a, s);
		return;
	}
	if (s->timed_out)
		clean = false;
	else if (s->rank_end)
		clean = s->rank_end == 2;
	const char *policy = plan_str(s->plan, "restart", "policy");
	int limit = (int)plan_int(s->plan, "restart", "limit", 5);
	if (strcmp(policy, "never") == 0 || (clean && strcmp(policy, "always") != 0)) {
		set_state(a, s, clean ? "stopped" : "failed", why);
		return;
	}
	s->row.failures++;
	if (strcmp(policy, "always") != 0 && s->row.failures > limit) {
		char w[400];
		snprintf(w, sizeof w, "%s; restart limit (%d) reached", why, limit);
		set_state(a, s, "failed", w);
		return;
	}
	/* A run that ended with a member away counts once (a node that resets
	 * under its service may be the service's doing, and the limit ends that
	 * loop); the wait for the member is the back-off. */
	int away = member_away(a, s);
	if (away >= 0) {
		wait_for_member(a, s, away, why);
		return;
	}
	long long b = plan_int(s->plan, "restart", "backoff_s", 10);
	long long bmax = plan_int(s->plan, "restart", "backoff_max_s", 300);
	for (int k = 1; k < s->row.failures && b < bmax; k++)
		b *= 2;
	if (b > bmax)
		b = bmax;
	if (b < 0)
		b = 0;
	s->next_start_ms = util_now_ms() + (uint64_t)b * 1000;
	log_info("service_backoff", "service=%s failures=%d backoff_s=%lld", s->row.name,
		 s->row.failures, b);
	set_state(a, s, "restarting", why);
}

/* Why a job ended, from its record (SVC_EV_JOB_ENDED's data): the jobs
 * service's reason ("rank 1 on spark-2 was killed by signal 9"), else the
 * first rank that failed on its own (not one stopped with SIGTERM after it). */
static void job_why(const json_t *job, char *out, size_t len)
{
	const char *st = proto_str(job, "state"), *reason = proto_str(job, "reason");
	if (reason && *reason) {
		snprintf(out, len, "%s", reason);
		return;
	}
	size_t i;
	json_t *r;
	json_array_foreach(json_object_get(job, "ranks"), i, r) {
		const char *rs = proto_str(r, "state") ?: "";
		json_int_t sig = proto_int(r, "signal", 0), code = proto_int(r, "exit_code", 0);
		const char *node = proto_str(r, "node") ?: "?";
		long long rank = (long long)proto_int(r, "rank", 0);
		if (strcmp(rs, "lost") == 0) {
			snprintf(out, len, "rank %lld on %s was lost", rank, node);
			return;
		}
		if (sig && sig != SIGTERM) {
			snprintf(out, len, "rank %lld on %s was killed by signal %lld", rank, node,
				 (long long)sig);
			return;
		}
		if (!sig && code != 0) {
			snprintf(out, len, "rank %lld on %s exited with code %lld", rank, node,
				 (long long)code);
			return;
		}
	}
	snprintf(out, len, "the run (job %lld) ended: %s", (long long)proto_int(job, "id", 0),
		 st ? st : "?");
}

static void on_job_ended(struct agent *a, json_int_t id, const json_t *job)
{
	for (struct sh_svc *s = S(a)->svcs; s; s = s->next) {
		if (!s->live || s->row.run_id != id)
			continue;
		char why[320];
		if (s->timed_out) /* we stopped it: the reason is ours, not the job's */
			snprintf(why, sizeof why, "no healthy answer within the start-up timeout (%llds)",
				 (long long)plan_int(s->plan, "health", "startup_timeout_s", 3600));
		else if (s->rank_end)
			snprintf(why, sizeof why, "%s", s->rank_why);
		else
			job_why(job, why, sizeof why);
		const char *st = proto_str(job, "state");
		bool clean = st && strcmp(st, "succeeded") == 0;
		log_info("service_run_ended", "service=%s job=%lld state=%s why=%s", s->row.name,
			 (long long)id, st ? st : "?", log_q(why));
		send_unwatch(a, s);
		run_ended(a, s, clean, why);
		return;
	}
}

/* A rank of a live run ended while the others ran (SVC_EV_RANK_ENDED): a
 * model server cannot lose a rank, so the run ends here. A rank that failed
 * (non-zero, a signal, lost) has already made the jobs service stop the job,
 * whose end says why; an exit 0 does not end a job, so the run is stopped
 * here: rank 0's exit 0 is the server quitting, a clean end of the run (as a
 * run that exited 0: stopped under on-failure); any other rank's is a
 * failure (restarted by the policy, like a crashed rank). Not while the run
 * is being stopped or restarted, or has timed out: that end is ours. */
static void on_rank_ended(struct agent *a, json_int_t id, const json_t *rank)
{
	for (struct sh_svc *s = S(a)->svcs; s; s = s->next) {
		if (!s->live || s->row.run_id != id)
			continue;
		if (s->stopping || s->restart_now || s->timed_out || s->rank_end)
			return;
		const char *st = proto_str(rank, "state") ?: "";
		if (strcmp(st, "exited") != 0)
			return; /* failed, killed or lost: the jobs service ends the job */
		long long r = (long long)proto_int(rank, "rank", -1);
		s->rank_end = r == 0 ? 2 : 1;
		snprintf(s->rank_why, sizeof s->rank_why, "rank %lld on %s exited %lld while the others ran",
			 r, proto_str(rank, "node") ?: "?", (long long)proto_int(rank, "exit_code", 0));
		snprintf(s->row.last_error, sizeof s->row.last_error, "%s", s->rank_why);
		log_warn("service_rank_ended", "service=%s job=%lld rank=%lld why=%s", s->row.name,
			 (long long)id, r, log_q(s->rank_why));
		save(a, s, false);
		if (!a->hooks.job_stop || a->hooks.job_stop(a, s->row.run_id, SH_STOP_GRACE_MS) < 0) {
			send_unwatch(a, s);
			run_ended(a, s, s->rank_end == 2, s->rank_why);
		}
		return;
	}
}

/* ---- the tick: back-off, waiting starts, start-up timeouts, stop answers -------------- */

static void on_tick(uv_timer_t *t)
{
	struct agent *a = ((struct serve *)t->data)->a;
	if (!is_head(a))
		return;
	uint64_t now = util_now_ms();
	int64_t now_s = util_now();
	for (struct sh_svc *s = S(a)->svcs; s; s = s->next) {
		if (state_is(s, "restarting") && !s->live && now >= s->next_start_ms)
			try_start(a, s);
		else if ((state_is(s, "starting") || state_is(s, "waiting")) && !s->live && !s->stopping)
			try_start(a, s);
		if (s->live && state_is(s, "starting") && !s->got_ok && !s->timed_out && !s->stopping) {
			json_int_t lim = plan_int(s->plan, "health", "startup_timeout_s", 3600);
			if (now_s - s->row.run_started > lim) {
				char why[200];
				snprintf(why, sizeof why, "no healthy answer within the start-up timeout "
					 "(%llds)", (long long)lim);
				s->timed_out = true;
				snprintf(s->row.last_error, sizeof s->row.last_error, "%s", why);
				log_warn("service_startup_timeout", "service=%s job=%lld", s->row.name,
					 (long long)s->row.run_id);
				if (!a->hooks.job_stop || a->hooks.job_stop(a, s->row.run_id, SH_STOP_GRACE_MS) < 0)
					run_ended(a, s, false, why);
			}
		}
		if (s->stop_dest && now >= s->stop_deadline_ms) {
			json_t *o = svc_full(s);
			json_object_set_new(o, "note", json_string("the run has not ended yet; "
								   "'sparkctl svc show' follows it"));
			svc_send_result(s->stop_dest, s->stop_id, o);
			s->stop_dest = NULL;
		}
	}
}

/* ---- load (head start, head restart) --------------------------------------------------- */

/* Node ids and names of the plan's ranks (the plan carries both, the ids
 * added at svc_start). */
static int fill_nodes(struct sh_svc *s)
{
	size_t i;
	json_t *r;
	s->n_nodes = 0;
	json_array_foreach(json_object_get(s->plan, "ranks"), i, r) {
		if (i >= SH_MAX_NODES)
			return -EINVAL;
		const char *id = proto_str(r, "node_id"), *name = proto_str(r, "node");
		if (!id || !name)
			return -EINVAL;
		snprintf(s->node_id[i], sizeof s->node_id[i], "%s", id);
		snprintf(s->node_name[i], sizeof s->node_name[i], "%s", name);
		s->n_nodes = i + 1;
	}
	return s->n_nodes ? 0 : -EINVAL;
}

static struct sh_svc *svc_from_row(db_service *row)
{
	struct sh_svc *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->plan = json_loads(row->plan, 0, NULL);
	s->caller = json_loads(row->caller, 0, NULL);
	s->need = json_loads(row->need, 0, NULL);
	s->endpoint = json_loads(row->endpoint, 0, NULL);
	db_service_free(row);
	s->row = *row;
	if (!s->plan || !s->caller || !s->need || !s->endpoint || fill_nodes(s) < 0) {
		svc_free(s);
		return NULL;
	}
	return s;
}

static void svc_link(struct agent *a, struct sh_svc *s)
{
	struct sh_svc **p = &S(a)->svcs;
	while (*p)
		p = &(*p)->next;
	*p = s;
}

static void load(struct agent *a)
{
	struct serve *sv = S(a);
	if (sv->head_loaded || !is_head(a))
		return;
	sv->head_loaded = true;
	db_service *rows = NULL;
	size_t n = 0;
	if (db_service_list(a->hd.db, &rows, &n) < 0) {
		log_warn("services_load_failed", "err=%s", "cannot read cluster.db");
		return;
	}
	for (size_t i = 0; i < n; i++) {
		char name[64];
		snprintf(name, sizeof name, "%s", rows[i].name);
		struct sh_svc *s = svc_from_row(&rows[i]);
		if (!s) {
			db_service_free(&rows[i]);
			log_warn("service_load_failed", "service=%s err=%s", name, "bad row");
			continue;
		}
		svc_link(a, s);
		bool running = state_is(s, "starting") || state_is(s, "ready") || state_is(s, "unhealthy");
		if (running && s->row.run_id) {
			db_job j;
			bool alive = db_job_get(a->hd.db, s->row.run_id, &j) == 0 &&
				     (strcmp(j.state, "starting") == 0 || strcmp(j.state, "running") == 0);
			if (alive) {
				s->live = true;
				s->got_ok = !state_is(s, "starting");
				log_info("service_adopted", "service=%s job=%lld state=%s", s->row.name,
					 (long long)s->row.run_id, s->row.state);
				continue;
			}
			char why[200];
			snprintf(why, sizeof why, "its run (job %lld) ended while the head was away",
				 (long long)s->row.run_id);
			run_ended(a, s, false, why);
			continue;
		}
		if (state_is(s, "restarting"))
			s->next_start_ms = util_now_ms() + 1000;
		log_info("service_loaded", "service=%s state=%s", s->row.name, s->row.state);
	}
	free(rows);
}

/* ---- requests ---------------------------------------------------------------------------- */

/* Owner or admin (root, security.admin_group). */
static bool may_manage(struct agent *a, const struct sh_svc *s, const json_t *req)
{
	return svc_caller_is_admin(a, req) || strcmp(caller_user(req), s->row.owner) == 0;
}

static struct sh_svc *svc_of_req(struct agent *a, const struct svc_req *q, bool manage)
{
	if (!is_head(a)) {
		svc_error(q, "not_head", "services are kept by the head");
		return NULL;
	}
	const char *name = proto_str(q->msg, "name");
	struct sh_svc *s = name ? find_svc(a, name) : NULL;
	if (!s) {
		svc_error(q, "not_found", "no service '%s'; 'sparkctl svc ls' lists them", name ? name : "");
		return NULL;
	}
	if (manage && !may_manage(a, s, q->msg)) {
		svc_error(q, "forbidden", "service %s belongs to %s; only its owner or an admin of the "
			  "cluster may change it", s->row.name, s->row.owner);
		return NULL;
	}
	return s;
}

/* The node's memory budget in bytes (its last report), 0 when it reports none. */
static int64_t node_budget(const db_node *n)
{
	return n->mem_at > 0 && n->mem_budget > 0 ? n->mem_budget : 0;
}

/* "http://ADDR:PORT" of an address (IPv6 in brackets). */
static void url_of(const char *addr, json_int_t port, char *out, size_t len)
{
	snprintf(out, len, strchr(addr, ':') ? "http://[%s]:%lld" : "http://%s:%lld", addr,
		 (long long)port);
}

/* Is u (a trailing '/' allowed) http://ADDR:PORT of addr, with or without
 * brackets around an IPv6 address (the CLI renders them without)? */
static bool url_is(const char *u, const char *addr, json_int_t port)
{
	char want[160];
	size_t n = strlen(u);
	while (n > 7 && u[n - 1] == '/')
		n--;
	url_of(addr, port, want, sizeof want);
	if (strlen(want) == n && strncmp(u, want, n) == 0)
		return true;
	snprintf(want, sizeof want, "http://%s:%lld", addr, (long long)port);
	return strlen(want) == n && strncmp(u, want, n) == 0;
}

/* The addresses of a node, from what the head knows of it: [0] its
 * management (agent) address, then the IPv4 addresses of its last fabric
 * report. The count. */
static size_t node_addrs(struct agent *a, const char *node_id, char out[][64], size_t max)
{
	db_node nd;
	int port;
	if (db_node_get(a->hd.db, node_id, &nd) < 0 ||
	    util_split_hostport(nd.address, 7300, out[0], 64, &port) < 0)
		out[0][0] = '\0'; /* unknown */
	size_t n = 1;
	json_t *rep = a->hooks.fabric_report ? a->hooks.fabric_report(a, node_id) : NULL;
	size_t i, k, x;
	json_t *p, *t, *ad;
	json_array_foreach(json_object_get(json_object_get(rep, "discovery"), "ports"), i, p)
		json_array_foreach(json_object_get(p, "twins"), k, t)
			json_array_foreach(json_object_get(t, "ipv4"), x, ad) {
				const char *c = json_string_value(ad);
				size_t l = c ? strcspn(c, "/") : 0;
				if (n < max && l > 0 && l < 64) {
					memcpy(out[n], c, l);
					out[n++][l] = '\0';
				}
			}
	json_decref(rep);
	return n;
}

/* A health path: '/' then printable characters without spaces. */
static bool path_ok(const char *p)
{
	if (p[0] != '/' || strlen(p) > 200)
		return false;
	for (; *p; p++)
		if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f)
			return false;
	return true;
}

/* A service's endpoint is where its rank 0 runs (issue 27): the plan's
 * endpoint.url must be http://ADDR:PORT with ADDR an address of rank 0's
 * node on the network the plan names (management: its agent address;
 * fabric: an address of its last fabric report, or its agent address) and
 * PORT the plan's port; management_url must be that node's agent address
 * and the port. The head writes both back in their canonical form, and the
 * health check (send_watch) is endpoint.url + health.path: a plan cannot
 * make the router or root's sparkd go to another host. 0, or -1 after
 * answering. */
static int check_endpoint(struct agent *a, const struct svc_req *q, struct sh_svc *s)
{
	char addrs[SH_MAX_ADDRS][64];
	size_t na = node_addrs(a, s->node_id[0], addrs, SH_MAX_ADDRS);
	json_int_t port = plan_int(s->plan, NULL, "port", 0);
	const char *url = plan_str(s->plan, "endpoint", "url");
	const char *murl = plan_str(s->plan, "endpoint", "management_url");
	bool mgmt_only = strcmp(plan_str(s->plan, NULL, "net"), "management") == 0;
	const char *host = NULL;
	if (port < 1 || port > 65535) {
		svc_error(q, "bad_request", "the plan's port must be 1 to 65535");
		return -1;
	}
	for (size_t i = 0; i < na && !host; i++)
		if (addrs[i][0] && (i == 0 || !mgmt_only) && url_is(url, addrs[i], port))
			host = addrs[i];
	if (!host) {
		char list[400];
		size_t o = 0;
		list[0] = '\0';
		for (size_t i = 0; i < na && o < sizeof list; i++)
			if (addrs[i][0] && (i == 0 || !mgmt_only))
				o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", o ? ", " : "",
						      addrs[i]);
		svc_error(q, "bad_request", "the plan's endpoint.url '%.200s' is not where rank 0 runs: "
			  "a service's endpoint is http://ADDR:%lld with ADDR an address of %s (%s); "
			  "render the plan again ('sparkctl serve ... --dry-run')", url, (long long)port,
			  s->node_name[0], list[0] ? list : "none known");
		return -1;
	}
	if (*murl && (!addrs[0][0] || !url_is(murl, addrs[0], port))) {
		svc_error(q, "bad_request", "the plan's endpoint.management_url '%.200s' is not "
			  "http://%s:%lld, the management address of %s (rank 0); render the plan again",
			  murl, addrs[0][0] ? addrs[0] : "?", (long long)port, s->node_name[0]);
		return -1;
	}
	const char *hpath = plan_str(s->plan, "health", "path");
	if (*hpath && !path_ok(hpath)) {
		svc_error(q, "bad_request", "the plan's health.path must be an HTTP path ('/' and "
			  "printable characters, no spaces)");
		return -1;
	}
	/* health.url (what --dry-run shows) is on the service's own port: on
	 * rank 0's node's loopback or its endpoint; sparkd checks
	 * endpoint.url + health.path */
	const char *hurl = plan_str(s->plan, "health", "url");
	if (*hurl) {
		char want[300];
		bool ok = false;
		static const char *const local[] = {"127.0.0.1", "localhost", "::1"};
		for (size_t i = 0; i < 4 && !ok; i++) {
			const char *h = i < 3 ? local[i] : host;
			url_of(h, port, want, sizeof want);
			size_t l = strlen(want);
			ok = strncmp(hurl, want, l) == 0 && strcmp(hurl + l, *hpath ? hpath : "/health") == 0;
			snprintf(want, sizeof want, "http://%s:%lld", h, (long long)port);
			l = strlen(want);
			ok |= strncmp(hurl, want, l) == 0 && strcmp(hurl + l, *hpath ? hpath : "/health") == 0;
		}
		if (!ok) {
			svc_error(q, "bad_request", "the plan's health.url '%.200s' is not the service's "
				  "own endpoint (port %lld on rank 0's node, path health.path); health "
				  "checks go only there", hurl, (long long)port);
			return -1;
		}
	}
	json_t *ep = json_object_get(s->plan, "endpoint");
	if (!json_is_object(ep)) {
		ep = json_object();
		json_object_set_new(s->plan, "endpoint", ep);
	}
	char canon[160];
	url_of(host, port, canon, sizeof canon);
	json_object_set_new(ep, "url", json_string(canon));
	if (addrs[0][0]) {
		url_of(addrs[0], port, canon, sizeof canon);
		json_object_set_new(ep, "management_url", json_string(canon));
	}
	return 0;
}

/* Check the plan against the group: ranks are its members in order (every
 * one: a run is a job of the whole group), each with an argv of strings and
 * an env of strings. Fills s's nodes and adds "node_id" to each
 * rank of the plan. 0, or -1 after answering. */
static int check_plan(struct agent *a, const struct svc_req *q, struct sh_svc *s, const char *group)
{
	json_t *ranks = json_object_get(s->plan, "ranks");
	size_t n = json_array_size(ranks);
	if (json_dumpb(s->plan, NULL, 0, JSON_COMPACT) > SH_MAX_PLAN) {
		svc_error(q, "too_large", "the plan is larger than %d KiB", SH_MAX_PLAN / 1024);
		return -1;
	}
	if (strcmp(plan_str(s->plan, NULL, "group"), group) != 0) {
		svc_error(q, "bad_request", "the plan was rendered for group '%s', not '%s'",
			  plan_str(s->plan, NULL, "group"), group);
		return -1;
	}
	if (n == 0 || n > SH_MAX_NODES) {
		svc_error(q, "bad_request", "the plan must have 1 to %d ranks", SH_MAX_NODES);
		return -1;
	}
	db_node *members = NULL;
	size_t nm = 0;
	bool all = strcmp(group, "all") == 0;
	int r = all ? db_node_list(a->hd.db, &members, &nm) : db_group_nodes(a->hd.db, group, &members, &nm);
	if (r < 0 || nm == 0) {
		free(members);
		svc_error(q, "not_found", "no group '%s' (or it has no nodes); 'sparkctl group ls'", group);
		return -1;
	}
	if (n != nm) { /* the jobs service runs a job on every member of its group */
		svc_error(q, "bad_request", "the plan has %zu rank(s) and group %s %zu node(s): a "
			  "service runs on every member; make a group of %zu ('sparkctl group create') "
			  "or --set nodes=%zu", n, group, nm, n, nm);
		free(members);
		return -1;
	}
	size_t i;
	json_t *rk;
	json_array_foreach(ranks, i, rk) {
		const char *node = proto_str(rk, "node");
		json_t *argv = json_object_get(rk, "argv"), *env = json_object_get(rk, "env");
		const db_node *m = NULL;
		if (all) {
			for (size_t k = 0; k < nm && !m; k++)
				if (node && strcmp(members[k].name, node) == 0)
					m = &members[k];
			for (size_t k = 0; m && k < i; k++)
				if (strcmp(s->node_id[k], m->id) == 0)
					m = NULL; /* twice */
		} else if (i < nm && node && strcmp(members[i].name, node) == 0) {
			m = &members[i];
		}
		if (proto_int(rk, "rank", -1) != (json_int_t)i || !m) {
			svc_error(q, "bad_request", "rank %zu of the plan is not on %s, member %zu of group %s; "
				  "render the plan again ('sparkctl serve ... --dry-run')", i,
				  i < nm && !all ? members[i].name : "the group's node", i, group);
			free(members);
			return -1;
		}
		bool ok = json_is_array(argv) && json_array_size(argv) > 0 &&
			  json_array_size(argv) <= 256 && (!env || json_is_object(env));
		size_t k;
		json_t *v;
		const char *key;
		json_array_foreach(argv, k, v) ok &= json_is_string(v);
		json_object_foreach(env, key, v) ok &= json_is_string(v);
		if (!ok) {
			svc_error(q, "bad_request", "rank %zu of the plan needs an argv (strings) and an env "
				  "(strings)%s", i, json_is_null(argv) ? "; runtimes whose other ranks "
				  "mpirun starts are not supervised yet" : "");
			free(members);
			return -1;
		}
		snprintf(s->node_id[i], sizeof s->node_id[i], "%s", m->id);
		snprintf(s->node_name[i], sizeof s->node_name[i], "%s", m->name);
		json_object_set_new(rk, "node_id", json_string(m->id));
	}
	s->n_nodes = n;
	free(members);
	return check_endpoint(a, q, s);
}

/* Memory admission: fills admission {nodes:[...], fits, note}. false when
 * some node's budget cannot hold it (why: the numbers). */
static bool admit(struct agent *a, struct sh_svc *s, json_t *adm, char *why, size_t wl)
{
	double need_gib = 0;
	json_t *pa = json_object_get(s->plan, "admission");
	json_t *ng = json_object_get(pa, "need_gib");
	if (json_is_number(ng) && json_number_value(ng) > 0 && json_number_value(ng) < 1e6)
		need_gib = json_number_value(ng);
	int64_t need = (int64_t)(need_gib * SH_GIB);
	json_t *nodes = json_array();
	bool fits = true;
	size_t o = 0;
	why[0] = '\0';
	for (size_t i = 0; i < s->n_nodes; i++) {
		json_object_set_new(s->need, s->node_id[i], json_integer(need));
		db_node n;
		int64_t budget = db_node_get(a->hd.db, s->node_id[i], &n) == 0 ? node_budget(&n) : 0;
		int64_t used = 0;
		json_t *others = json_array();
		for (struct sh_svc *t = S(a)->svcs; t; t = t->next) {
			json_int_t tn = proto_int(t->need, s->node_id[i], 0);
			if (t != s && placed(t) && tn > 0) {
				used += tn;
				json_array_append_new(others, json_string(t->row.name));
			}
		}
		json_t *e = json_pack("{s:s, s:f, s:f, s:o}", "node", s->node_name[i], "need_gib",
				      need / SH_GIB, "used_gib", used / SH_GIB, "services", others);
		if (budget <= 0) {
			json_object_set_new(e, "budget_gib", json_null());
			json_object_set_new(e, "fits", json_null());
			json_object_set_new(e, "note", json_string("the node reports no memory budget: "
								   "not checked"));
		} else {
			double free_gib = (budget - used) / SH_GIB;
			bool ok = used + need <= budget;
			json_object_set_new(e, "budget_gib", json_real(budget / SH_GIB));
			json_object_set_new(e, "free_gib", json_real(free_gib < 0 ? 0 : free_gib));
			json_object_set_new(e, "fits", json_boolean(ok));
			if (!ok && o < wl)
				o += (size_t)snprintf(why + o, wl - o,
						      "%s%s: budget %.1f GiB, %.1f GiB placed, needs %.1f "
						      "GiB, %.1f GiB would fit", o ? "; " : "",
						      s->node_name[i], budget / SH_GIB, used / SH_GIB,
						      need / SH_GIB, free_gib < 0 ? 0 : free_gib);
			fits &= ok;
		}
		json_array_append_new(nodes, e);
	}
	json_object_set_new(adm, "need_gib", json_real(need_gib));
	json_object_set_new(adm, "need_source",
			    json_string(need > 0 ? plan_str(s->plan, "admission", "source")
						 : "unknown (set memory: GiB in the recipe)"));
	json_object_set_new(adm, "nodes", nodes);
	json_object_set_new(adm, "fits", json_boolean(fits));
	return fits;
}

void sh_svc_start(struct agent *a, const struct svc_req *q)
{
	if (!is_head(a)) {
		svc_error(q, "not_head", "services are kept by the head");
		return;
	}
	const char *name = proto_str(q->msg, "name"), *group = proto_str(q->msg, "group");
	bool force = json_is_true(json_object_get(q->msg, "force"));
	if (!util_valid_name(name)) {
		svc_error(q, "bad_request", "'%s' is not a valid service name (1-63 of a-z, 0-9, '-')", name);
		return;
	}
	if (find_svc(a, name)) {
		svc_error(q, "exists", "service '%s' exists; 'sparkctl svc restart %s', or stop and "
			  "'sparkctl svc rm %s' it first", name, name, name);
		return;
	}
	size_t count = 0;
	for (struct sh_svc *t = S(a)->svcs; t; t = t->next)
		count++;
	if (count >= SH_MAX_SERVICES) {
		svc_error(q, "busy", "the cluster has %zu services, the most it keeps; remove some "
			  "('sparkctl svc rm')", count);
		return;
	}
	struct sh_svc *s = calloc(1, sizeof *s);
	if (!s) {
		svc_error(q, "internal", "out of memory");
		return;
	}
	s->plan = json_deep_copy(json_object_get(q->msg, "plan"));
	s->caller = json_deep_copy(json_object_get(q->msg, "caller"));
	s->need = json_object();
	s->endpoint = json_object();
	if (!s->plan || !s->caller || !s->need || !s->endpoint) {
		svc_free(s);
		svc_error(q, "internal", "out of memory");
		return;
	}
	if (check_plan(a, q, s, group) < 0) {
		svc_free(s);
		return;
	}
	json_t *adm = json_object();
	char why[1024];
	bool fits = admit(a, s, adm, why, sizeof why);
	if (!fits && !force) {
		json_decref(adm);
		svc_free(s);
		svc_error(q, "no_memory", "service %s does not fit: %s; use fewer or other nodes, "
			  "a smaller memory:, stop a service, or --force", name, why);
		return;
	}
	int64_t now = util_now();
	db_service *r = &s->row;
	snprintf(r->name, sizeof r->name, "%s", name);
	snprintf(r->group_name, sizeof r->group_name, "%s", group);
	snprintf(r->recipe, sizeof r->recipe, "%s", plan_str(s->plan, NULL, "recipe"));
	snprintf(r->runtime, sizeof r->runtime, "%s", plan_str(s->plan, NULL, "runtime"));
	snprintf(r->model, sizeof r->model, "%s", plan_str(s->plan, NULL, "model"));
	snprintf(r->owner, sizeof r->owner, "%s", caller_user(q->msg));
	r->uid = proto_int(s->caller, "uid", -1);
	snprintf(r->state, sizeof r->state, "starting");
	r->forced = !fits;
	r->created_at = r->updated_at = now;
	r->plan = json_dumps(s->plan, JSON_COMPACT);
	r->caller = json_dumps(s->caller, JSON_COMPACT);
	r->need = json_dumps(s->need, JSON_COMPACT);
	int e = r->plan && r->caller && r->need ? db_service_add(a->hd.db, r) : -ENOMEM;
	db_service_free(r);
	if (e < 0) {
		json_decref(adm);
		svc_free(s);
		svc_error(q, e == -EEXIST ? "exists" : "internal", "cannot record service %s: %s", name,
			  strerror(-e));
		return;
	}
	db_event_add(a->hd.db, now, NULL, "service_created", name);
	log_info("service_created", "service=%s group=%s by=%s forced=%d", name, group,
		 log_q(r->owner), !fits);
	svc_link(a, s);
	try_start(a, s);
	json_t *o = svc_full(s);
	if (!fits)
		json_object_set_new(adm, "note", json_string("over the memory budget; started because "
							     "of --force"));
	json_object_set_new(o, "admission", adm);
	svc_reply(q, o);
}

void sh_svc_ls(struct agent *a, const struct svc_req *q)
{
	if (!is_head(a)) {
		svc_error(q, "not_head", "services are kept by the head");
		return;
	}
	svc_reply(q, snapshot(a, proto_str(q->msg, "group")));
}

void sh_svc_show(struct agent *a, const struct svc_req *q)
{
	struct sh_svc *s = svc_of_req(a, q, false);
	if (s)
		svc_reply(q, svc_full(s));
}

/* Stop the live run (SIGTERM, SIGKILL after the grace): true while its end
 * is awaited (SVC_EV_JOB_ENDED), false when there is no run to wait for. */
static bool stop_run(struct agent *a, struct sh_svc *s)
{
	if (!s->live)
		return false;
	if (a->hooks.job_stop && a->hooks.job_stop(a, s->row.run_id, SH_STOP_GRACE_MS) == 0)
		return true;
	send_unwatch(a, s);
	s->live = false;
	return false;
}

void sh_svc_stop(struct agent *a, const struct svc_req *q)
{
	struct sh_svc *s = svc_of_req(a, q, true);
	if (!s)
		return;
	s->restart_now = false;
	s->waiting_for[0] = '\0';
	if (s->live) {
		if (s->stop_dest) {
			json_t *o = svc_full(s);
			json_object_set_new(o, "note", json_string("a stop is already under way"));
			svc_reply(q, o);
			return;
		}
		s->stopping = true;
		snprintf(s->row.last_error, sizeof s->row.last_error, "stopped by %s", caller_user(q->msg));
		if (stop_run(a, s)) {
			s->stop_dest = q->reply;
			s->stop_id = q->id;
			s->stop_deadline_ms = util_now_ms() + SH_STOP_WAIT_MS;
			log_info("service_stopping", "service=%s job=%lld by=%s", s->row.name,
				 (long long)s->row.run_id, log_q(caller_user(q->msg)));
			return; /* answered at the run's end */
		}
		s->stopping = false;
	}
	char by[96];
	snprintf(by, sizeof by, "stopped by %s", caller_user(q->msg));
	set_state(a, s, "stopped", by);
	svc_reply(q, svc_full(s));
}

void sh_svc_restart(struct agent *a, const struct svc_req *q)
{
	struct sh_svc *s = svc_of_req(a, q, true);
	if (!s)
		return;
	s->stopping = false;
	s->restart_now = true;
	if (stop_run(a, s)) {
		json_t *o = svc_full(s);
		json_object_set_new(o, "note", json_string("the current run is stopping; a new one "
							   "starts at its end"));
		svc_reply(q, o);
		return;
	}
	s->restart_now = false;
	s->row.failures = 0;
	snprintf(s->row.last_error, sizeof s->row.last_error, "restarted by %s", caller_user(q->msg));
	try_start(a, s);
	svc_reply(q, svc_full(s));
}

void sh_svc_rm(struct agent *a, const struct svc_req *q)
{
	struct sh_svc *s = svc_of_req(a, q, true);
	if (!s)
		return;
	if (s->live || placed(s)) {
		svc_error(q, "busy", "service %s is %s; 'sparkctl svc stop %s' first", s->row.name,
			  s->row.state, s->row.name);
		return;
	}
	int e = db_service_remove(a->hd.db, s->row.name);
	if (e < 0 && e != -ENOENT) {
		svc_error(q, "internal", "cannot remove service %s: %s", s->row.name, strerror(-e));
		return;
	}
	db_event_add(a->hd.db, util_now(), NULL, "service_removed", s->row.name);
	json_t *o = svc_full(s);
	json_object_set_new(o, "state", json_string("removed")); /* not the state it had */
	for (struct sh_svc **p = &S(a)->svcs; *p; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			break;
		}
	svc_free(s);
	notify(a);
	svc_reply(q, o);
}

void sh_svc_watch(struct agent *a, const struct svc_req *q)
{
	if (!is_head(a)) {
		svc_error(q, "not_head", "services are kept by the head");
		return;
	}
	size_t n = 0;
	for (struct sh_watch *w = S(a)->watchers; w; w = w->next)
		n += !w->dead;
	if (n >= SH_MAX_WATCHERS) {
		svc_error(q, "busy", "%zu watchers already follow the services; try again later", n);
		return;
	}
	struct sh_watch *w = calloc(1, sizeof *w);
	if (!w) {
		svc_error(q, "internal", "out of memory");
		return;
	}
	w->dest = q->reply;
	w->id = q->id;
	snprintf(w->group, sizeof w->group, "%s", proto_str(q->msg, "group") ?: "");
	w->next = S(a)->watchers;
	S(a)->watchers = w;
	watch_send(a, w); /* the snapshot at once; no final answer while it reads */
}

/* ---- frames ---------------------------------------------------------------------------------- */

void sh_health(struct agent *a, const char *node_id, const json_t *msg)
{
	if (!is_head(a))
		return;
	const char *name = proto_str(msg, "service");
	json_int_t run = proto_int(msg, "run", 0);
	struct sh_svc *s = name ? find_svc(a, name) : NULL;
	if (!s || !s->live || s->row.run_id != run || strcmp(node_id, s->node_id[0]) != 0) {
		log_warn("frame_not_owner", "type=svc_health service=%s run=%lld from=%s owner=%s",
			 log_q(name ? name : ""), (long long)run, node_id,
			 s ? s->node_id[0] : "(none)");
		return;
	}
	bool ok = json_is_true(json_object_get(msg, "ok"));
	if (!ok) {
		char why[300];
		const char *err = proto_str(msg, "error");
		json_int_t code = proto_int(msg, "code", 0);
		if (code)
			snprintf(why, sizeof why, "health check: HTTP %lld%s%s", (long long)code,
				 err ? ": " : "", err ? err : "");
		else
			snprintf(why, sizeof why, "health check: %s", err ? err : "no answer");
		if (state_is(s, "ready"))
			set_state(a, s, "unhealthy", why);
		else if (strcmp(s->row.last_error, why) != 0) {
			snprintf(s->row.last_error, sizeof s->row.last_error, "%s", why);
			save(a, s, false);
		}
		return;
	}
	s->got_ok = true;
	json_t *models = json_array();
	size_t i;
	json_t *m;
	json_array_foreach(json_object_get(msg, "models"), i, m)
		if (i < SH_MAX_MODELS && json_is_string(m) && strlen(json_string_value(m)) < 256)
			json_array_append(models, m);
	bool models_changed = !json_equal(models, json_object_get(s->endpoint, "models"));
	json_object_set_new(s->endpoint, "url", json_string(plan_str(s->plan, "endpoint", "url")));
	json_object_set_new(s->endpoint, "management_url",
			    json_string(plan_str(s->plan, "endpoint", "management_url")));
	json_object_set_new(s->endpoint, "models", models);
	if (!state_is(s, "ready")) {
		if (state_is(s, "starting"))
			log_info("service_ready", "service=%s job=%lld after_s=%lld", s->row.name,
				 (long long)run, (long long)(util_now() - s->row.run_started));
		s->row.failures = 0;
		s->row.last_error[0] = '\0';
		snprintf(s->row.state, sizeof s->row.state, "ready");
		save(a, s, true);
		notify(a);
	} else if (models_changed) {
		save(a, s, true);
		notify(a);
	}
}

/* ---- events and life cycle --------------------------------------------------------------------- */

void sh_event(struct agent *a, enum svc_event ev, const struct svc_event_arg *arg)
{
	struct serve *sv = S(a);
	if (!sv || !sv->head_on)
		return;
	switch (ev) {
	case SVC_EV_ROLE:
		load(a);
		break;
	case SVC_EV_NODE_UP:
		for (struct sh_svc *s = sv->svcs; s && arg->node_id; s = s->next)
			if (s->live && strcmp(s->node_id[0], arg->node_id) == 0)
				send_watch(a, s);
			else if (state_is(s, "waiting") && !s->live && !s->stopping && is_head(a))
				try_start(a, s);
		break;
	case SVC_EV_JOB_ENDED:
		if (is_head(a))
			on_job_ended(a, arg->id, arg->data);
		break;
	case SVC_EV_RANK_ENDED:
		if (is_head(a))
			on_rank_ended(a, arg->id, arg->data);
		break;
	case SVC_EV_CONN_GONE:
		for (struct sh_watch *w = sv->watchers; w; w = w->next)
			if (w->dest == arg->c)
				w->dead = true;
		for (struct sh_svc *s = sv->svcs; s; s = s->next)
			if (s->stop_dest == arg->c)
				s->stop_dest = NULL;
		watch_sweep(sv);
		break;
	case SVC_EV_STREAM_CANCEL:
		for (struct sh_watch *w = sv->watchers; w; w = w->next)
			if (w->dest == arg->c && w->id == arg->id)
				w->dead = true;
		watch_sweep(sv);
		break;
	default:
		break;
	}
}

int sh_start(struct agent *a)
{
	struct serve *sv = S(a);
	uv_timer_init(a->loop, &sv->head_timer);
	sv->head_timer.data = sv;
	uv_timer_start(&sv->head_timer, on_tick, SH_TICK_MS, SH_TICK_MS);
	sv->head_on = true;
	load(a);
	return 0;
}

void sh_stop(struct agent *a)
{
	struct serve *sv = S(a);
	if (!sv || !sv->head_on)
		return;
	for (struct sh_watch *w = sv->watchers; w; w = w->next)
		if (!w->dead) {
			conn_send_new(w->dest, proto_error(w->id, "shutdown", "the head's sparkd is "
							   "stopping; services keep running"));
			w->dead = true;
		}
	for (struct sh_svc *s = sv->svcs; s; s = s->next)
		if (s->stop_dest) {
			conn_send_new(s->stop_dest, proto_error(s->stop_id, "shutdown", "the head's sparkd "
								 "is stopping; the stop goes on"));
			s->stop_dest = NULL;
		}
	uv_timer_stop(&sv->head_timer); /* closed by main's final walk */
}

void sh_free(struct agent *a)
{
	struct serve *sv = S(a);
	if (!sv)
		return;
	for (struct sh_watch *w = sv->watchers; w; w = w->next)
		w->dead = true;
	watch_sweep(sv);
	while (sv->svcs) {
		struct sh_svc *s = sv->svcs;
		sv->svcs = s->next;
		svc_free(s);
	}
}

/* spark-router's view of the cluster's services: the svc_watch frames
 * (router/services.c) and the subscription (router/cluster.c) against a fake
 * sparkd, a Unix socket server in this test that speaks the framing. */
#include "cluster.h"
#include "decide.h"
#include "policy.h"
#include "proto.h"
#include "services.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define SNAP(svcs) "{\"v\":1,\"type\":\"stream\",\"id\":1,\"data\":{\"services\":[" svcs "]}}"
#define QWEN_READY                                                                           \
	"{\"name\":\"qwen\",\"owner\":\"root\",\"group\":\"g1\",\"state\":\"ready\",\"runtime\":\"vllm\","   \
	"\"model\":\"Qwen/Qwen3-8B\",\"run\":7,\"endpoint\":{\"url\":\"http://169.254.1.1:8000\"," \
	"\"management_url\":\"http://169.254.100.1:8000\",\"models\":[\"qwen3-8b\",\"qwen3-8b-lora\"]}," \
	"\"max_context\":32768,\"updated_at\":\"2026-12-01T23:00:00Z\"}"
#define QWEN_STARTING                                                                        \
	"{\"name\":\"qwen\",\"owner\":\"root\",\"group\":\"g1\",\"state\":\"starting\",\"runtime\":\"vllm\","\
	"\"model\":\"Qwen/Qwen3-8B\",\"run\":8,\"endpoint\":{\"url\":\"http://169.254.1.1:8000\"," \
	"\"management_url\":null,\"models\":[]},\"max_context\":null,\"updated_at\":\"2026-12-01T23:01:00Z\"}"

static int frame(const char *text, struct svc_table *t, char *err)
{
	json_t *m = json_loads(text, 0, NULL);
	cr_assert(m, "bad test JSON: %s", text);
	int r = svc_frame(m, t, err, 200);
	json_decref(m);
	return r;
}

Test(services, a_snapshot_fills_the_table)
{
	struct svc_table t = {0};
	char err[200];
	cr_assert_eq(frame(SNAP(QWEN_READY ",{\"name\":\"small\",\"state\":\"stopped\",\"endpoint\":null}"), &t, err), 1);
	cr_assert(t.connected);
	cr_assert_eq(t.n, 2);
	const struct svc_info *q = svc_find(&t, "qwen");
	cr_assert(q);
	cr_assert_str_eq(q->state, "ready");
	cr_assert_str_eq(q->group, "g1");
	cr_assert_eq(q->max_context, 32768);
	cr_assert_eq(q->n_models, 2);
	cr_assert(svc_has_model(q, "qwen3-8b-lora"));
	cr_assert(!svc_has_model(q, "qwen3"));
	cr_assert(svc_usable(q, false));
	char b[300];
	cr_assert(svc_base_url(q, false, b, sizeof b));
	cr_assert_str_eq(b, "http://169.254.1.1:8000/v1");
	cr_assert(svc_base_url(q, true, b, sizeof b));
	cr_assert_str_eq(b, "http://169.254.100.1:8000/v1");
	const struct svc_info *s = svc_find(&t, "small");
	cr_assert(s && !svc_usable(s, false));
	cr_assert_null(svc_find(&t, "nope"));
	/* a later snapshot replaces the whole table */
	cr_assert_eq(frame(SNAP(QWEN_STARTING), &t, err), 1);
	cr_assert_eq(t.n, 1);
	q = svc_find(&t, "qwen");
	cr_assert(!svc_usable(q, false) && !svc_usable(q, true));
	cr_assert_eq(q->max_context, 0);
	cr_assert_eq(frame(SNAP(""), &t, err), 1);
	cr_assert_eq(t.n, 0);
	cr_assert(t.connected);
	svc_table_clear(&t);
	cr_assert(!t.connected);
}

Test(services, error_and_result_frames_end_the_stream)
{
	struct svc_table t = {0};
	char err[200];
	cr_assert_eq(frame(SNAP(QWEN_READY), &t, err), 1);
	cr_assert_eq(frame("{\"v\":1,\"type\":\"error\",\"id\":1,\"code\":\"unavailable\",\"message\":\"no head\"}", &t, err),
		     -ECONNABORTED);
	cr_assert(strstr(err, "unavailable") && strstr(err, "no head"), "%s", err);
	cr_assert_eq(frame("{\"v\":1,\"type\":\"result\",\"id\":1,\"data\":{}}", &t, err), -ECONNABORTED);
	cr_assert_eq(t.n, 1, "the table is the caller's to clear");
	svc_table_clear(&t);
}

Test(services, records_that_break_the_contract_are_refused)
{
	static const char *bad[] = {
		"{\"v\":1,\"type\":\"stream\",\"id\":1,\"data\":{}}",
		"{\"v\":1,\"type\":\"stream\",\"id\":1,\"data\":{\"services\":{}}}",
		"{\"v\":1,\"type\":\"hello\",\"id\":1}",
		SNAP("{\"state\":\"ready\"}"),
		SNAP("{\"name\":\"a b\",\"state\":\"ready\"}"),
		SNAP("{\"name\":\"a\",\"state\":\"Ready now\"}"),
		SNAP("{\"name\":\"a\",\"state\":\"ready\",\"endpoint\":{\"url\":\"ftp://x\"}}"),
		SNAP("{\"name\":\"a\",\"state\":\"ready\",\"endpoint\":{\"url\":\"http://x/ y\"}}"),
		SNAP("{\"name\":\"a\",\"state\":\"ready\",\"endpoint\":{\"url\":\"http://x?q\"}}"),
		SNAP("{\"name\":\"a\",\"state\":\"ready\",\"endpoint\":{\"url\":5}}"),
		SNAP("{\"name\":\"a\",\"state\":\"ready\",\"endpoint\":{\"models\":[1]}}"),
		SNAP("{\"name\":\"a\",\"state\":\"ready\",\"endpoint\":{\"models\":\"m\"}}"),
		SNAP("{\"name\":\"a\",\"state\":\"ready\",\"max_context\":-1}"),
		SNAP("{\"name\":\"a\",\"state\":\"ready\",\"max_context\":\"big\"}"),
		SNAP("7"),
	};
	struct svc_table t = {0};
	char err[200];
	cr_assert_eq(frame(SNAP(QWEN_READY), &t, err), 1);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		cr_assert_eq(frame(bad[i], &t, err), -EBADMSG, "accepted: %s", bad[i]);
		cr_assert_eq(t.n, 1, "a refused frame changed the table: %s", bad[i]);
	}
	svc_table_clear(&t);
}

Test(services, bounds_hold)
{
	/* more than SVC_MAX services: refused; more than SVC_MAX_MODELS models: cut */
	json_t *svcs = json_array();
	for (int i = 0; i <= SVC_MAX; i++)
		json_array_append_new(svcs, json_pack("{s:s#, s:s}", "name", "s", (size_t)1, "state", "ready"));
	json_t *m = json_pack("{s:i, s:s, s:i, s:{s:o}}", "v", 1, "type", "stream", "id", 1, "data",
			      "services", svcs);
	struct svc_table t = {0};
	char err[200];
	cr_assert_eq(svc_frame(m, &t, err, sizeof err), -EBADMSG);
	json_decref(m);
	json_t *models = json_array();
	for (int i = 0; i < 40; i++) {
		char id[16];
		snprintf(id, sizeof id, "m%d", i);
		json_array_append_new(models, json_string(id));
	}
	m = json_pack("{s:i, s:s, s:i, s:{s:[{s:s, s:s, s:{s:s, s:o}}]}}", "v", 1, "type", "stream",
		      "id", 1, "data", "services", "name", "a", "state", "ready", "endpoint", "url",
		      "http://169.254.1.1:1", "models", models);
	cr_assert_eq(svc_frame(m, &t, err, sizeof err), 1, "%s", err);
	cr_assert_eq(t.v[0].n_models, SVC_MAX_MODELS);
	json_decref(m);
	/* repeated names: the first record counts */
	cr_assert_eq(frame(SNAP("{\"name\":\"a\",\"state\":\"ready\"},{\"name\":\"a\",\"state\":\"failed\"}"), &t, err), 1);
	cr_assert_eq(t.n, 1);
	cr_assert_str_eq(t.v[0].state, "ready");
	svc_table_clear(&t);
}

Test(services, only_root_or_our_own_user_may_feed_the_router)
{
	cr_assert(cluster_peer_ok(0, 1000));
	cr_assert(cluster_peer_ok(1000, 1000));
	cr_assert(!cluster_peer_ok(1001, 1000));
	cr_assert(cluster_peer_ok(0, 0));
	cr_assert(!cluster_peer_ok(65534, 0));
}

/* ---- decisions about service targets ---- */

static const char *SVC_POLICY =
	"targets:\n"
	"  big:\n"
	"    url: http://127.0.0.1:8001/v1\n"
	"    max_context: 131072\n"
	"  pool:\n"
	"    service: qwen\n"
	"  pool-mgmt:\n"
	"    service: qwen\n"
	"    network: management\n"
	"    model: served-name\n"
	"routes:\n"
	"  fast:\n"
	"    type: passthrough\n"
	"    target: pool\n"
	"    fallbacks: [big]\n"
	"  mgmt:\n"
	"    type: passthrough\n"
	"    target: pool-mgmt\n";

static json_t *decide_json(struct policy *p, const char *route, const struct svc_table *t)
{
	char b[200], err[256];
	snprintf(b, sizeof b, "{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", route);
	struct req_info ri;
	json_t *j;
	cr_assert_eq(req_parse(b, strlen(b), REQ_CHAT, &ri, &j, err, sizeof err), 0);
	struct decision d;
	uint64_t rng = 0;
	cr_assert_eq(route_decide(p, &ri, NULL, NULL, &rng, &d), 0);
	json_t *o = decision_json(p, &d, t);
	req_info_free(&ri);
	json_decref(j);
	return o;
}

static const char *jstr(json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

Test(services, decisions_explain_a_service_target)
{
	char err[600];
	struct policy *p;
	cr_assert_eq(policy_parse("t.yaml", SVC_POLICY, strlen(SVC_POLICY), &p, err, sizeof err), 0, "%s", err);
	/* no subscription yet */
	json_t *o = decide_json(p, "fast", NULL);
	cr_assert_str_eq(jstr(o, "target_kind"), "service");
	cr_assert_str_eq(jstr(o, "service"), "qwen");
	cr_assert_str_eq(jstr(o, "state"), "disconnected");
	cr_assert(json_is_false(json_object_get(o, "resolvable")));
	cr_assert(strstr(jstr(o, "note"), "no snapshot"), "%s", jstr(o, "note"));
	json_decref(o);
	struct svc_table t = {0};
	cr_assert_eq(frame(SNAP(""), &t, err), 1);
	o = decide_json(p, "fast", &t);
	cr_assert_str_eq(jstr(o, "state"), "absent");
	cr_assert(strstr(jstr(o, "note"), "no service qwen"));
	json_decref(o);
	cr_assert_eq(frame(SNAP(QWEN_STARTING), &t, err), 1);
	o = decide_json(p, "fast", &t);
	cr_assert_str_eq(jstr(o, "state"), "starting");
	cr_assert(json_is_false(json_object_get(o, "resolvable")));
	cr_assert(strstr(jstr(o, "note"), "starting, not ready"));
	json_decref(o);
	cr_assert_eq(frame(SNAP(QWEN_READY), &t, err), 1);
	o = decide_json(p, "fast", &t);
	cr_assert_str_eq(jstr(o, "state"), "ready");
	cr_assert(json_is_true(json_object_get(o, "resolvable")));
	cr_assert_str_eq(jstr(o, "url"), "http://169.254.1.1:8000/v1");
	cr_assert_str_eq(jstr(o, "network"), "fabric");
	cr_assert_eq(json_integer_value(json_object_get(o, "max_context")), 32768);
	cr_assert_null(json_object_get(o, "note"));
	json_decref(o);
	o = decide_json(p, "mgmt", &t);
	cr_assert_str_eq(jstr(o, "url"), "http://169.254.100.1:8000/v1");
	json_decref(o);
	/* what a request is sent with */
	struct resolved rv;
	target_resolve(p, policy_target_index(p, "pool"), &t, &rv);
	cr_assert(rv.usable);
	cr_assert_str_eq(rv.model, "qwen3-8b", "the service's first model id is sent upstream");
	target_resolve(p, policy_target_index(p, "pool-mgmt"), &t, &rv);
	cr_assert_str_eq(rv.model, "served-name", "the target's model: wins");
	target_resolve(p, policy_target_index(p, "big"), &t, &rv);
	cr_assert(rv.usable);
	cr_assert_eq(rv.max_context, 131072);
	cr_assert_str_eq(rv.base, "http://127.0.0.1:8001/v1");
	/* ready, but without a management endpoint */
	cr_assert_eq(frame(SNAP("{\"name\":\"qwen\",\"owner\":\"root\",\"state\":\"ready\",\"endpoint\":{\"url\":\"http://169.254.1.1:8000\"}}"), &t, err), 1);
	o = decide_json(p, "mgmt", &t);
	cr_assert(json_is_false(json_object_get(o, "resolvable")));
	cr_assert(strstr(jstr(o, "note"), "no management endpoint"), "%s", jstr(o, "note"));
	json_decref(o);
	svc_table_clear(&t);
	policy_free(p);
}

Test(services, weighted_draws_leave_out_services_that_are_not_ready)
{
	const char *pol = "targets:\n  pool: {service: qwen}\n  a: {url: 'http://127.0.0.1:1/v1'}\n"
			  "routes:\n  w: {type: weighted, seed: 7, targets: [pool, a]}\n";
	char err[600];
	struct policy *p;
	cr_assert_eq(policy_parse("t.yaml", pol, strlen(pol), &p, err, sizeof err), 0, "%s", err);
	const char *b = "{\"model\":\"w\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
	struct req_info ri;
	json_t *j;
	cr_assert_eq(req_parse(b, strlen(b), REQ_CHAT, &ri, &j, err, sizeof err), 0);
	struct svc_table t = {0};
	int pool = policy_target_index(p, "pool");
	uint64_t rng = 7;
	int n_pool[3] = {0};
	for (int phase = 0; phase < 3; phase++) {
		/* 0: starting, 1: ready, 2: no snapshot at all (sparkd lost) */
		if (phase == 0)
			cr_assert_eq(frame(SNAP(QWEN_STARTING), &t, err), 1);
		else if (phase == 1)
			cr_assert_eq(frame(SNAP(QWEN_READY), &t, err), 1);
		else
			svc_table_clear(&t);
		for (int i = 0; i < 400; i++) {
			struct decision d;
			cr_assert_eq(route_decide_live(p, &ri, NULL, NULL, &rng, &t, &d), 0);
			n_pool[phase] += d.target == pool;
			if (phase == 0)
				cr_assert(strstr(d.reason, "take no share"), "%s", d.reason);
		}
	}
	cr_assert_eq(n_pool[0], 0, "a starting service got %d of 400 draws", n_pool[0]);
	cr_assert(n_pool[1] > 140 && n_pool[1] < 260, "a ready one: %d of 400 (1:1)", n_pool[1]);
	cr_assert_eq(n_pool[2], 0, "without a snapshot: %d of 400", n_pool[2]);
	req_info_free(&ri);
	json_decref(j);
	policy_free(p);
}

Test(services, policy_network_and_max_context)
{
	char err[600];
	struct policy *p;
	const char *ok = "network: management\n"
			 "targets:\n  a: {service: qwen}\n  b: {service: qwen, network: fabric}\n"
			 "  c: {url: 'http://127.0.0.1:1/v1', max_context: 4096}\n"
			 "routes:\n  r: {type: passthrough, target: a}\n";
	cr_assert_eq(policy_parse("t.yaml", ok, strlen(ok), &p, err, sizeof err), 0, "%s", err);
	cr_assert(p->targets[0].management);
	cr_assert(!p->targets[1].management);
	cr_assert_eq(p->targets[2].max_context, 4096);
	policy_free(p);
	static const struct {
		const char *text, *msg;
	} bad[] = {
		{"targets:\n  a: {service: q, network: infiniband}\nroutes:\n  r: {type: passthrough, target: a}\n",
		 "t.yaml:2:28: targets.a.network: expected fabric or management"},
		{"targets:\n  a: {url: 'http://h:1', network: fabric}\nroutes:\n  r: {type: passthrough, target: a}\n",
		 "t.yaml:2:35: targets.a.network: only service targets take network:"},
		{"targets:\n  a: {url: 'http://h:1', max_context: 0}\nroutes:\n  r: {type: passthrough, target: a}\n",
		 "t.yaml:2:39: targets.a.max_context: expected an integer from 1"},
		{"network: wifi\ntargets:\n  a: {url: 'http://h:1'}\nroutes:\n  r: {type: passthrough, target: a}\n",
		 "t.yaml:1:10: network: expected fabric or management"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		cr_assert_neq(policy_parse("t.yaml", bad[i].text, strlen(bad[i].text), &p, err, sizeof err), 0);
		cr_assert(strstr(err, bad[i].msg), "got: %s\nwant: %s", err, bad[i].msg);
	}
}

/* ---- the subscription against a fake sparkd ---- */

struct fake {
	char path[108];
	int lfd;
	pthread_t th;
	sem_t step;                 /* posted by the client's changed callback */
	int accepted;
	char first_type[32];        /* type of the first request frame received */
	int mode;                   /* 0: the scripted stream, 1: error answers, 2: garbage */
};

static int send_frame(int fd, const char *text)
{
	json_t *m = json_loads(text, 0, NULL);
	uint8_t *b;
	size_t n;
	if (!m || proto_encode(m, &b, &n) < 0)
		return -1;
	json_decref(m);
	ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
	free(b);
	return w == (ssize_t)n ? 0 : -1;
}

/* The client's request: one frame. */
static void read_request(struct fake *f, int fd)
{
	proto_decoder d;
	proto_decoder_init(&d);
	json_t *m = NULL;
	char err[128];
	while (proto_decoder_next(&d, &m, err, sizeof err) == 0) {
		uint8_t b[4096];
		ssize_t n = recv(fd, b, sizeof b, 0);
		if (n <= 0)
			break;
		proto_decoder_feed(&d, b, (size_t)n);
	}
	if (m && !f->first_type[0])
		snprintf(f->first_type, sizeof f->first_type, "%s", proto_type(m));
	json_decref(m);
	proto_decoder_free(&d);
}

static int accept_one(struct fake *f)
{
	int fd = accept(f->lfd, NULL, NULL);
	if (fd >= 0)
		__atomic_add_fetch(&f->accepted, 1, __ATOMIC_SEQ_CST);
	return fd;
}

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	if (f->mode == 1 || f->mode == 2) {
		for (int i = 0; i < 3; i++) {
			int fd = accept_one(f);
			if (fd < 0)
				return NULL;
			read_request(f, fd);
			if (f->mode == 1)
				send_frame(fd, "{\"v\":1,\"type\":\"error\",\"id\":1,\"code\":\"unavailable\",\"message\":\"the head is unreachable\"}");
			else
				send(fd, "\xff\xff\xff\xffjunk", 8, MSG_NOSIGNAL);
			/* the client hangs up on its side */
			char b[16];
			while (recv(fd, b, sizeof b, 0) > 0)
				;
			close(fd);
		}
		return NULL;
	}
	int fd = accept_one(f);
	read_request(f, fd);
	send_frame(fd, SNAP(QWEN_READY));
	sem_wait(&f->step);
	send_frame(fd, SNAP(QWEN_STARTING));
	sem_wait(&f->step);
	close(fd);            /* the head went away */
	sem_wait(&f->step);   /* the client saw the loss */
	fd = accept_one(f);   /* it comes back */
	read_request(f, fd);
	send_frame(fd, SNAP("{\"name\":\"qwen\",\"state\":\"ready\",\"endpoint\":{\"url\":\"http://169.254.2.1:9000\"}}"));
	sem_wait(&f->step);
	close(fd);
	return NULL;
}

static void fake_start(struct fake *f, int mode)
{
	memset(f, 0, sizeof *f);
	f->mode = mode;
	snprintf(f->path, sizeof f->path, "/tmp/router-fake-sparkd-%d.sock", (int)getpid());
	unlink(f->path);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	memcpy(sa.sun_path, f->path, strlen(f->path) + 1);
	f->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	cr_assert(f->lfd >= 0);
	cr_assert_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
	cr_assert_eq(listen(f->lfd, 8), 0);
	sem_init(&f->step, 0, 0);
	pthread_create(&f->th, NULL, fake_main, f);
}

static void fake_stop(struct fake *f)
{
	shutdown(f->lfd, SHUT_RDWR);
	close(f->lfd);
	pthread_join(f->th, NULL);
	unlink(f->path);
	sem_destroy(&f->step);
}

struct watcher {
	struct fake *f;
	struct cluster *c;
	uv_loop_t *loop;
	char seen[8][96];   /* what each change showed of service qwen */
	int n;
	int want;
};

static void on_changed(void *arg)
{
	struct watcher *w = arg;
	const struct svc_table *t = cluster_services(w->c);
	const struct svc_info *q = svc_find(t, "qwen");
	if (w->n < 8)
		snprintf(w->seen[w->n], sizeof w->seen[0], "%s %s", !t->connected ? "disconnected" : q ? q->state : "absent",
			 q ? q->url : "");
	w->n++;
	if (!t->connected)
		cr_assert_neq(cluster_error(w->c)[0], 0, "a lost stream says why");
	sem_post(&w->f->step);
	if (w->n == w->want)
		uv_stop(w->loop);
}

static void on_deadline(uv_timer_t *t)
{
	uv_stop(t->loop);
}

static void run_for(uv_loop_t *loop, uint64_t ms)
{
	uv_timer_t dl;
	uv_timer_init(loop, &dl);
	uv_timer_start(&dl, on_deadline, ms, 0);
	uv_run(loop, UV_RUN_DEFAULT);
	uv_close((uv_handle_t *)&dl, NULL);
	uv_run(loop, UV_RUN_NOWAIT);
}

Test(cluster, follows_snapshots_loses_the_stream_and_reconnects, .timeout = 20)
{
	struct fake f;
	fake_start(&f, 0);
	uv_loop_t loop;
	uv_loop_init(&loop);
	struct watcher w = {.f = &f, .loop = &loop, .want = 4};
	w.c = cluster_new(&loop, f.path, on_changed, &w);
	cr_assert(w.c);
	cr_assert(!cluster_services(w.c)->connected);
	run_for(&loop, 15000);
	/* the fake hangs up after the fourth: a fifth change (the loss) may come in */
	cr_assert(w.n == 4 || w.n == 5, "changes seen: %d", w.n);
	cr_assert_str_eq(f.first_type, "svc_watch");
	cr_assert_str_eq(w.seen[0], "ready http://169.254.1.1:8000");
	cr_assert_str_eq(w.seen[1], "starting http://169.254.1.1:8000");
	cr_assert_str_eq(w.seen[2], "disconnected ");
	cr_assert_str_eq(w.seen[3], "ready http://169.254.2.1:9000");
	cr_assert_eq(f.accepted, 2);
	cluster_free(w.c);
	uv_run(&loop, UV_RUN_NOWAIT);
	cr_assert_eq(uv_loop_close(&loop), 0, "cluster_free leaves no handle open");
	fake_stop(&f);
}

static void stream_refused(int mode)
{
	struct fake f;
	fake_start(&f, mode);
	uv_loop_t loop;
	uv_loop_init(&loop);
	struct watcher w = {.f = &f, .loop = &loop, .want = 1};
	w.c = cluster_new(&loop, f.path, on_changed, &w);
	/* 200 + 400 ms of back-off between three connections */
	for (int i = 0; i < 40 && __atomic_load_n(&f.accepted, __ATOMIC_SEQ_CST) < 3; i++)
		run_for(&loop, 100);
	run_for(&loop, 100);
	cr_assert_eq(f.accepted, 3, "the client reconnects after each refusal");
	cr_assert_eq(w.n, 0, "no snapshot, so no change");
	cr_assert(!cluster_services(w.c)->connected);
	cr_assert(strstr(cluster_error(w.c), mode == 1 ? "unavailable" : "bad frame"), "%s",
		  cluster_error(w.c));
	cluster_free(w.c);
	uv_run(&loop, UV_RUN_NOWAIT);
	fake_stop(&f);
	uv_run(&loop, UV_RUN_NOWAIT);
	cr_assert_eq(uv_loop_close(&loop), 0);
}

Test(cluster, an_error_answer_means_retry_with_back_off, .timeout = 20)
{
	stream_refused(1);
}

Test(cluster, a_bad_frame_drops_the_stream, .timeout = 20)
{
	stream_refused(2);
}

Test(cluster, no_sparkd_is_retried_quietly)
{
	uv_loop_t loop;
	uv_loop_init(&loop);
	struct watcher w = {.loop = &loop};
	char path[108];
	snprintf(path, sizeof path, "/tmp/router-no-sparkd-%d.sock", (int)getpid());
	unlink(path);
	w.c = cluster_new(&loop, path, on_changed, &w);
	run_for(&loop, 700);
	cr_assert(strstr(cluster_error(w.c), "is sparkd running"), "%s", cluster_error(w.c));
	cr_assert_eq(w.n, 0);
	cluster_free(w.c);
	uv_run(&loop, UV_RUN_NOWAIT);
	cr_assert_eq(uv_loop_close(&loop), 0);
	char longp[200];
	memset(longp, 'x', sizeof longp - 1);
	longp[sizeof longp - 1] = 0;
	cr_assert_null(cluster_new(&loop, longp, on_changed, &w));
}

/* Issue 27: a user may start a service under a name the admin's left free;
 * a service target follows only a service of its owner: (root unless set;
 * "*" follows any), and says whose it found. */
static const char *OWNER_POLICY =
	"targets:\n"
	"  big: {url: 'http://127.0.0.1:8001/v1'}\n"
	"  pool: {service: qwen}\n"
	"  alices: {service: qwen, owner: alice}\n"
	"  anyone: {service: qwen, owner: '*'}\n"
	"routes:\n"
	"  fast: {type: passthrough, target: pool, fallbacks: [big]}\n"
	"  alice: {type: passthrough, target: alices}\n";

#define QWEN_OF(owner)                                                                        \
	"{\"name\":\"qwen\"" owner ",\"state\":\"ready\",\"endpoint\":{\"url\":"                 \
	"\"http://169.254.9.9:8000\",\"models\":[\"qwen3-8b\"]}}"

Test(services, a_service_target_follows_only_its_owner)
{
	char err[600];
	struct policy *p;
	cr_assert_eq(policy_parse("t.yaml", OWNER_POLICY, strlen(OWNER_POLICY), &p, err, sizeof err), 0,
		     "%s", err);
	const struct target *pool = &p->targets[policy_target_index(p, "pool")];
	cr_assert_str_eq(pool->owner, "root", "the default owner of a service target");
	struct svc_table t = {0};
	/* mallory's service under the name the admin's left free */
	cr_assert_eq(frame(SNAP(QWEN_OF(",\"owner\":\"mallory\"")), &t, err), 1);
	cr_assert_str_eq(svc_find(&t, "qwen")->owner, "mallory");
	json_t *o = decide_json(p, "fast", &t);
	cr_assert(json_is_false(json_object_get(o, "resolvable")), "mallory's service is followed");
	cr_assert_str_eq(jstr(o, "state"), "other_owner");
	cr_assert_str_eq(jstr(o, "owner"), "root");
	cr_assert_str_eq(jstr(o, "service_owner"), "mallory");
	cr_assert(strstr(jstr(o, "note"), "belongs to mallory, not root"), "%s", jstr(o, "note"));
	cr_assert_null(json_object_get(o, "url"));
	json_decref(o);
	struct resolved rv;
	target_resolve(p, policy_target_index(p, "pool"), &t, &rv);
	cr_assert(!rv.usable);
	cr_assert_null(target_service(pool, &t));
	target_resolve(p, policy_target_index(p, "alices"), &t, &rv);
	cr_assert(!rv.usable, "alice's target follows mallory's service");
	target_resolve(p, policy_target_index(p, "anyone"), &t, &rv);
	cr_assert(rv.usable, "owner: '*' follows any owner");
	cr_assert_str_eq(rv.base, "http://169.254.9.9:8000/v1");
	/* alice's own */
	cr_assert_eq(frame(SNAP(QWEN_OF(",\"owner\":\"alice\"")), &t, err), 1);
	target_resolve(p, policy_target_index(p, "alices"), &t, &rv);
	cr_assert(rv.usable);
	target_resolve(p, policy_target_index(p, "pool"), &t, &rv);
	cr_assert(!rv.usable);
	/* a record without an owner (an older sparkd) is nobody's */
	cr_assert_eq(frame(SNAP(QWEN_OF("")), &t, err), 1);
	target_resolve(p, policy_target_index(p, "pool"), &t, &rv);
	cr_assert(!rv.usable);
	cr_assert_str_eq(rv.state, "other_owner");
	/* root's */
	cr_assert_eq(frame(SNAP(QWEN_OF(",\"owner\":\"root\"")), &t, err), 1);
	o = decide_json(p, "fast", &t);
	cr_assert(json_is_true(json_object_get(o, "resolvable")));
	cr_assert_str_eq(jstr(o, "service_owner"), "root");
	json_decref(o);
	cr_assert_eq(target_service(pool, &t), svc_find(&t, "qwen"));
	/* an owner that is not a string breaks the contract */
	cr_assert_eq(frame(SNAP(QWEN_OF(",\"owner\":7")), &t, err), -EBADMSG);
	svc_table_clear(&t);
	policy_free(p);
	/* owner: is for service targets, and names a user */
	static const char *const bad[] = {
		"targets:\n  a: {url: 'http://127.0.0.1:1/v1', owner: root}\n",
		"targets:\n  a: {service: q, owner: 'bad user'}\n",
		"targets:\n  a: {service: q, owner: ''}\n",
		"targets:\n  a: {service: q, owner: -rf}\n",
		"targets:\n  a: {service: q, owner: [root]}\n",
		"owner: root\ntargets:\n  a: {url: 'http://127.0.0.1:1/v1', owner: root}\n",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct policy *q = NULL;
		cr_assert_lt(policy_parse("b.yaml", bad[i], strlen(bad[i]), &q, err, sizeof err), 0,
			     "accepted: %s", bad[i]);
		cr_assert(strstr(err, "targets.a.owner"), "%s", err);
	}
	/* the policy's owner: is the default of its service targets */
	static const char OWNED[] = "owner: alice\ntargets:\n  a: {service: q}\n"
				    "  b: {service: q, owner: root}\n  u: {url: 'http://127.0.0.1:1/v1'}\n"
				    "routes:\n  r: {type: passthrough, target: a}\n";
	cr_assert_eq(policy_parse("o.yaml", OWNED, strlen(OWNED), &p, err, sizeof err), 0, "%s", err);
	cr_assert_str_eq(p->targets[0].owner, "alice");
	cr_assert_str_eq(p->targets[1].owner, "root");
	cr_assert_null(p->targets[2].owner);
	policy_free(p);
	static const char BADTOP[] = "owner: 'a b'\ntargets:\n  a: {service: q}\n";
	cr_assert_lt(policy_parse("o.yaml", BADTOP, strlen(BADTOP), &p, err, sizeof err), 0);
	cr_assert(strstr(err, "o.yaml:1:8: owner: expected a user name"), "%s", err);
}

/* The node side of services' health checks (agent/serve_node.c, issue 19):
 * a real serve service on a libuv loop, as a worker whose session to the
 * head is a Unix socket this test reads, checking a real HTTP server
 * (libmicrohttpd, on 127.0.0.1 in a thread of this process). What the head
 * would see: svc_health frames on the first check and on every change (ok,
 * 5xx, a timeout, the model ids of GET /v1/models, a 10 MiB model list cut
 * at 64 KiB), again after the head came back, none after an unwatch or once
 * the run's job ended here, none for watches it must refuse; at most 64
 * watches. And the model-list parser on its own. */
#include "serve.h"

#include <criterion/criterion.h>
#include <microhttpd.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the HTTP server the checks reach ------------------------------------------------------- */

static atomic_int health_code = 200;
static atomic_int health_delay_ms = 0;
static atomic_int models_mode = 0; /* 0: two ids, 1: 10 MiB, 2: not a list */
static atomic_int models_gets = 0;
static char *big;
#define BIG_LEN (10u << 20)

static enum MHD_Result on_http(void *cls, struct MHD_Connection *c, const char *url,
			       const char *method, const char *version, const char *upload,
			       size_t *upload_len, void **state)
{
	(void)cls, (void)method, (void)version, (void)upload, (void)upload_len;
	if (!*state) { /* headers only: answer on the next call */
		*state = c;
		return MHD_YES;
	}
	struct MHD_Response *r;
	unsigned code = 200;
	if (strcmp(url, "/health") == 0) {
		if (health_delay_ms)
			usleep((useconds_t)health_delay_ms * 1000);
		code = (unsigned)health_code;
		r = MHD_create_response_from_buffer(2, "ok", MHD_RESPMEM_PERSISTENT);
	} else if (strcmp(url, "/v1/models") == 0) {
		models_gets++;
		static const char two[] = "{\"object\":\"list\",\"data\":[{\"id\":\"m-1\",\"object\":"
					  "\"model\"},{\"object\":\"model\"},{\"id\":\"m-2\"}]}";
		if (models_mode == 1)
			r = MHD_create_response_from_buffer(BIG_LEN, big, MHD_RESPMEM_PERSISTENT);
		else if (models_mode == 2)
			r = MHD_create_response_from_buffer(7, "[1,2,3]", MHD_RESPMEM_PERSISTENT);
		else
			r = MHD_create_response_from_buffer(sizeof two - 1, (void *)two,
							    MHD_RESPMEM_PERSISTENT);
	} else {
		code = 404;
		r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
	}
	enum MHD_Result ret = MHD_queue_response(c, code, r);
	MHD_destroy_response(r);
	return ret;
}

/* ---- a worker's serve service and its link to the "head" ------------------------------------- */

static struct agent A;
static uv_loop_t loop;
static uv_pipe_t head_srv;
static conn *head_side; /* the head's end: what the node sends arrives here */
static json_t *frames;  /* svc_health frames received, in order */
static struct MHD_Daemon *httpd;
static int http_port;
static char sock_path[128];
static bool job_runs = true;

static bool job_here(struct agent *a, long long id)
{
	(void)a;
	return id != 7 || job_runs;
}

static void on_head_frame(conn *c, json_t *msg)
{
	(void)c;
	if (strcmp(proto_type(msg), "svc_health") == 0)
		json_array_append(frames, msg);
	json_decref(msg);
}
static void on_head_close(conn *c, int err) { (void)c, (void)err; head_side = NULL; }
static const struct conn_cbs head_cbs = {.on_frame = on_head_frame, .on_close = on_head_close};

static void on_accept(uv_stream_t *s, int status)
{
	cr_assert_eq(status, 0);
	head_side = conn_accept(s, NULL, &head_cbs, NULL);
	cr_assert_not_null(head_side);
}
static void on_node_close(conn *c, int err) { (void)c, (void)err; A.wk.link = NULL; }
static void on_node_frame(conn *c, json_t *msg) { (void)c; json_decref(msg); }
static const struct conn_cbs node_cbs = {.on_frame = on_node_frame, .on_close = on_node_close};

static void run_until(bool (*done)(void), int max_ms)
{
	for (int t = 0; t < max_ms && !done(); t += 5) {
		uv_run(&loop, UV_RUN_NOWAIT);
		usleep(5000);
	}
}
static bool linked(void) { return head_side != NULL; }

static void setup(void)
{
	big = malloc(BIG_LEN);
	cr_assert_not_null(big);
	memset(big, ' ', BIG_LEN);
	memcpy(big, "{\"data\":[", 9);
	httpd = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD, 0,
				 NULL, NULL, on_http, NULL, MHD_OPTION_SOCK_ADDR,
				 &(struct sockaddr_in){.sin_family = AF_INET,
						       .sin_addr.s_addr = htonl(INADDR_LOOPBACK)},
				 MHD_OPTION_END);
	cr_assert_not_null(httpd, "cannot start the HTTP server");
	http_port = MHD_get_daemon_info(httpd, MHD_DAEMON_INFO_BIND_PORT)->port;
	cr_assert_gt(http_port, 0);

	frames = json_array();
	uv_loop_init(&loop);
	memset(&A, 0, sizeof A);
	A.loop = &loop;
	A.id.role = ROLE_WORKER;
	snprintf(A.id.node_id, sizeof A.id.node_id, "node-test");
	A.hooks.job_here = job_here;
	char err[256];
	cr_assert_eq(serve_service.init(&A, err, sizeof err), 0);
	cr_assert_eq(serve_service.start(&A, err, sizeof err), 0, "%s", err);
	snprintf(sock_path, sizeof sock_path, "/tmp/test_serve_health.%d.sock", (int)getpid());
	unlink(sock_path);
	uv_pipe_init(&loop, &head_srv, 0);
	cr_assert_eq(uv_pipe_bind(&head_srv, sock_path), 0);
	cr_assert_eq(uv_listen((uv_stream_t *)&head_srv, 4, on_accept), 0);
	cr_assert_eq(conn_connect_unix(&loop, sock_path, &node_cbs, &A, &A.wk.link), 0);
	A.wk.up = true;
	run_until(linked, 5000);
	cr_assert(head_side, "the node's link to the head did not connect");
}

static void close_walk(uv_handle_t *h, void *arg)
{
	(void)arg;
	if (!uv_is_closing(h))
		uv_close(h, NULL);
}

static void teardown(void)
{
	serve_service.stop(&A);
	if (A.wk.link)
		conn_close(A.wk.link, 0);
	if (head_side)
		conn_close(head_side, 0);
	for (int i = 0; i < 50; i++)
		uv_run(&loop, UV_RUN_NOWAIT);
	uv_walk(&loop, close_walk, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	serve_service.free(&A);
	uv_loop_close(&loop);
	unlink(sock_path);
	MHD_stop_daemon(httpd);
	json_decref(frames);
	free(big);
}

TestSuite(serve_health, .init = setup, .fini = teardown, .timeout = 60);

/* ---- helpers --------------------------------------------------------------------------------- */

static void watch(const char *service, long long run, const char *path, bool models, int interval,
		  int timeout)
{
	char url[128], murl[128];
	snprintf(url, sizeof url, "http://127.0.0.1:%d%s", http_port, path);
	snprintf(murl, sizeof murl, "http://127.0.0.1:%d/v1/models", http_port);
	json_t *m = json_pack("{s:s, s:s, s:I, s:s, s:i, s:i}", "type", "svc_health_watch", "service",
			      service, "run", (json_int_t)run, "url", url, "interval_ms", interval,
			      "timeout_ms", timeout);
	if (models)
		json_object_set_new(m, "models_url", json_string(murl));
	sn_health_watch(&A, "head", m);
	json_decref(m);
}

static size_t want_n;
static bool have_n(void) { return json_array_size(frames) >= want_n; }

/* The next report (after `seen` reports), waiting up to max_ms; NULL if none came. */
static json_t *next_report(size_t seen, int max_ms)
{
	want_n = seen + 1;
	run_until(have_n, max_ms);
	return json_array_get(frames, seen);
}

static const char *s_of(json_t *o, const char *k) { return json_string_value(json_object_get(o, k)) ?: ""; }
static long long i_of(json_t *o, const char *k) { return json_integer_value(json_object_get(o, k)); }

/* ---- the checks -------------------------------------------------------------------------------- */

Test(serve_health, reports_ok_failing_timeout_and_models_on_change_only)
{
	watch("chat", 7, "/health", true, 150, 400);
	json_t *f = next_report(0, 10000);
	cr_assert(f, "no report after the first check");
	cr_expect_str_eq(s_of(f, "service"), "chat");
	cr_expect_eq(i_of(f, "run"), 7);
	cr_expect(json_is_true(json_object_get(f, "ok")));
	cr_expect_eq(i_of(f, "code"), 200);
	json_t *want = json_pack("[s, s]", "m-1", "m-2"); /* the entry without an id is skipped */
	cr_expect(json_equal(json_object_get(f, "models"), want), "models: %s",
		  json_dumps(json_object_get(f, "models"), 0));
	json_decref(want);
	/* nothing changes: no more reports while checks go on */
	int gets = models_gets;
	next_report(1, 1200);
	cr_expect_eq(json_array_size(frames), 1, "a report without a change");
	cr_expect_gt(models_gets, gets + 2, "the checks did not go on");

	/* 5xx */
	health_code = 503;
	f = next_report(1, 10000);
	cr_assert(f, "no report of the 503");
	cr_expect(json_is_false(json_object_get(f, "ok")));
	cr_expect_eq(i_of(f, "code"), 503);
	cr_expect(strstr(s_of(f, "error"), "503"), "error: %s", s_of(f, "error"));
	cr_expect_null(json_object_get(f, "models"));

	/* healthy again, then too slow for timeout_ms */
	health_code = 200;
	f = next_report(2, 10000);
	cr_assert(f && json_is_true(json_object_get(f, "ok")), "not ok again");
	health_delay_ms = 1000;
	f = next_report(3, 10000);
	cr_assert(f, "no report of the timeout");
	cr_expect(json_is_false(json_object_get(f, "ok")));
	cr_expect_eq(i_of(f, "code"), 0);
	cr_expect(strstr(s_of(f, "error"), "imeout") || strstr(s_of(f, "error"), "timed out"),
		  "error: %s", s_of(f, "error"));
	health_delay_ms = 0;

	/* a model list of 10 MiB: read up to 64 KiB, then dropped; health stays ok */
	models_mode = 1;
	f = next_report(4, 10000);
	cr_assert(f && json_is_true(json_object_get(f, "ok")), "not ok after the timeout");
	cr_expect_eq(json_array_size(json_object_get(f, "models")), 0, "models of a capped list: %s",
		     json_dumps(json_object_get(f, "models"), 0));
	/* a list that is not OpenAI's shape: the same (no change, no report) */
	models_mode = 2;
	next_report(5, 800);
	cr_expect_eq(json_array_size(frames), 5);
	/* the ids come back */
	models_mode = 0;
	f = next_report(5, 10000);
	cr_assert(f, "no report when the models came back");
	cr_expect_eq(json_array_size(json_object_get(f, "models")), 2);

	/* the head restarted: the last state again, unasked */
	sn_event(&A, SVC_EV_HEAD_UP, NULL);
	f = next_report(6, 2000);
	cr_assert(f, "nothing re-sent after SVC_EV_HEAD_UP");
	cr_expect(json_equal(f, json_array_get(frames, 5)), "%s", json_dumps(f, 0));

	/* the run's job ends on this node: the watch goes, nothing more is sent */
	job_runs = false;
	for (int i = 0; i < 60; i++) {
		uv_run(&loop, UV_RUN_NOWAIT);
		usleep(5000);
	}
	health_code = 500;
	next_report(7, 1000);
	cr_expect_eq(json_array_size(frames), 7, "a report after the job ended");
	job_runs = true;
	health_code = 200;
}

Test(serve_health, unwatch_replace_and_refused_watches)
{
	watch("a", 8, "/health", false, 150, 400);
	json_t *f = next_report(0, 10000);
	cr_assert(f);
	cr_expect_null(json_object_get(f, "models"), "no models_url, models: %s", json_dumps(f, 0));
	/* a watch of the same service replaces it: a first report for the new run */
	watch("a", 9, "/health", false, 150, 400);
	f = next_report(1, 10000);
	cr_assert(f, "no first report after the watch was replaced");
	cr_expect_eq(i_of(f, "run"), 9);
	json_t *m = json_pack("{s:s, s:s}", "type", "svc_health_unwatch", "service", "a");
	sn_health_unwatch(&A, "head", m);
	json_decref(m);
	health_code = 502;
	next_report(2, 1000);
	cr_expect_eq(json_array_size(frames), 2, "a report after the unwatch");
	health_code = 200;

	/* refused: not http(s), a path to nowhere with a control character, intervals
	 * and timeouts out of range, no run */
	char url[128];
	snprintf(url, sizeof url, "http://127.0.0.1:%d/health", http_port);
	const char *bad[][2] = {{"url", "ftp://127.0.0.1/health"}, {"url", "http://a b/"},
				{"url", "file:///etc/passwd"}};
	for (size_t i = 0; i < 3; i++) {
		m = json_pack("{s:s, s:s, s:i, s:s, s:i, s:i}", "type", "svc_health_watch", "service",
			      "bad", "run", 3, bad[i][0], bad[i][1], "interval_ms", 150, "timeout_ms",
			      400);
		sn_health_watch(&A, "head", m);
		json_decref(m);
	}
	int nums[][3] = {{5, 400, 3}, {150, 0, 3}, {150, 400, 0}, {150, 700000, 3}};
	for (size_t i = 0; i < 4; i++) {
		m = json_pack("{s:s, s:s, s:i, s:s, s:i, s:i}", "type", "svc_health_watch", "service",
			      "bad", "run", nums[i][2], "url", url, "interval_ms", nums[i][0],
			      "timeout_ms", nums[i][1]);
		sn_health_watch(&A, "head", m);
		json_decref(m);
	}
	next_report(2, 1000);
	cr_expect_eq(json_array_size(frames), 2, "a refused watch reported: %s",
		     json_dumps(json_array_get(frames, 2), 0));
}

Test(serve_health, at_most_64_watches_per_node)
{
	char name[32];
	for (int i = 0; i < 70; i++) {
		snprintf(name, sizeof name, "svc-%d", i);
		watch(name, 100 + i, "/health", false, 60000, 2000);
	}
	next_report(63, 15000); /* all that were taken report once */
	next_report(64, 1000);  /* and no other */
	cr_expect_eq(json_array_size(frames), 64, "%zu watches reported", json_array_size(frames));
	/* the six refused were the last ones */
	size_t i;
	json_t *f;
	json_array_foreach(frames, i, f)
		cr_expect_lt(i_of(f, "run"), 164, "run %lld was taken", i_of(f, "run"));
}

/* ---- the parser -------------------------------------------------------------------------------- */

Test(models_parse, openai_list_shape_caps_and_errors)
{
	json_t *ids;
	char err[128];
	const char *ok = "{\"data\":[{\"id\":\"a\"},{\"id\":\"\"},{\"id\":3},\"x\",{\"id\":\"b\"}]}";
	cr_assert_eq(sn_models_parse(ok, strlen(ok), &ids, err, sizeof err), 0, "%s", err);
	json_t *want = json_pack("[s, s]", "a", "b");
	cr_expect(json_equal(ids, want));
	json_decref(want);
	json_decref(ids);
	const char *bad[] = {"[]", "{\"data\":{}}", "{\"data\":[", "", "{\"data\":[],\"data\":[]}"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		cr_expect_eq(sn_models_parse(bad[i], strlen(bad[i]), &ids, err, sizeof err), -EINVAL,
			     "%s", bad[i]);
		cr_expect_null(ids);
	}
	/* at most 256 ids, each at most 256 bytes */
	char *many = NULL;
	size_t ml = 0;
	FILE *f = open_memstream(&many, &ml);
	fputs("{\"data\":[", f);
	for (int i = 0; i < 300; i++)
		fprintf(f, "%s{\"id\":\"m%d\"}", i ? "," : "", i);
	fprintf(f, ",{\"id\":\"%0300d\"}]}", 0);
	fclose(f);
	cr_assert_eq(sn_models_parse(many, ml, &ids, err, sizeof err), 0);
	cr_expect_eq(json_array_size(ids), 256);
	json_decref(ids);
	free(many);
	char *huge = calloc(1, SN_BODY_MAX + 2);
	memset(huge, ' ', SN_BODY_MAX + 1);
	cr_expect_eq(sn_models_parse(huge, SN_BODY_MAX + 1, &ids, err, sizeof err), -E2BIG);
	free(huge);
}

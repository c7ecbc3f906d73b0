/* The jobs service's job_launch and job_stop hooks (issue 19), which the
 * serve service starts and stops its runs with: a real head in this process
 * (sparkd's cluster and jobs services on a libuv loop, `init` over its real
 * control socket, ranks on its own node under the real `sparkd --rank-shim`)
 * and a member node played by this test over a session the head adopted, so
 * the test sees exactly what a member is sent.
 *
 * Checked: each rank runs its own command with its own environment on top of
 * the job environment contract (rank 0 really runs on the head's node; rank
 * 1's spec is what the member gets in job_start); the job is a normal job
 * (`sparkctl job ls -o json` shows it with its owner); job_stop sends SIGTERM
 * to every member and SIGKILL after the grace to what still runs, and the job
 * ends cancelled; bad specs are refused with a reason and record nothing. */
#include "agent.h"
#include "cluster.h"
#include "jobs.h"
#include "log.h"
#include "pki.h"
#include "proto.h"
#include "token.h"
#include "util.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <ftw.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static struct agent A;
static char dir[256], head_id[40], w1_id[40];
static uv_pipe_t adopt_srv;
static conn *member;     /* the test's end of w1's session */
static json_t *to_w1;    /* frames the head sent w1 */
static json_t *ctl_answer;
static uv_timer_t hb;

/* ---- the loop ------------------------------------------------------------------------------ */

static void pump(bool (*done)(void), int max_ms)
{
	uint64_t t0 = util_now_ms();
	while (!done() && util_now_ms() - t0 < (uint64_t)max_ms)
		uv_run(A.loop, UV_RUN_NOWAIT), usleep(2000);
}

static void on_ctl_frame(conn *c, json_t *msg)
{
	(void)c;
	json_decref(ctl_answer);
	ctl_answer = msg;
}
static void on_ctl_close(conn *c, int err) { (void)c, (void)err; }
static const struct conn_cbs ctl_cbs = {.on_frame = on_ctl_frame, .on_close = on_ctl_close};
static bool answered(void) { return ctl_answer != NULL; }

static void on_w1_frame(conn *c, json_t *msg)
{
	(void)c;
	json_array_append_new(to_w1, msg);
}
static void on_w1_close(conn *c, int err) { (void)c, (void)err; member = NULL; }
static const struct conn_cbs w1_cbs = {.on_frame = on_w1_frame, .on_close = on_w1_close};

static void on_adopt(uv_stream_t *srv, int status)
{
	cr_assert_eq(status, 0);
	cr_assert_eq(peers_adopt_session(&A, srv, w1_id), 0);
}

static void on_hb(uv_timer_t *t)
{
	(void)t;
	if (member)
		conn_send_new(member, proto_msg("heartbeat", 0));
}

/* The index in to_w1 of the first frame of type (with job_id, when > 0) from
 * index from on, waiting up to max_ms; -1 if none came. */
static const char *want_type;
static long long want_job;
static size_t want_from;
static long find_frame(size_t from)
{
	for (size_t i = from; i < json_array_size(to_w1); i++) {
		json_t *m = json_array_get(to_w1, i);
		json_t *job = json_object_get(m, "job");
		long long id = proto_int(m, "job_id", proto_int(job, "id", 0));
		if (strcmp(proto_type(m), want_type) == 0 && (want_job <= 0 || id == want_job))
			return (long)i;
	}
	return -1;
}
static bool have_frame(void) { return find_frame(want_from) >= 0; }
static json_t *wait_frame(const char *type, long long job, size_t from, int max_ms)
{
	want_type = type;
	want_job = job;
	want_from = from;
	pump(have_frame, max_ms);
	long i = find_frame(from);
	return i >= 0 ? json_array_get(to_w1, (size_t)i) : NULL;
}

/* ---- the head -------------------------------------------------------------------------------- */

static void add_worker(const char *name, char *id_out)
{
	char tok[160], tid[17], err[256], hash[PKI_HASH_HEX];
	struct join_token t;
	cr_assert_eq(head_token_create(&A, 0, 1, "test_launch", tok, sizeof tok, tid), 0);
	cr_assert_eq(token_parse(tok, &t, err, sizeof err), 0, "%s", err);
	pki_sha256_hex(t.secret, strlen(t.secret), hash);
	db_node n = {0};
	pki_random_hex(n.id, 16);
	util_strlcpy(n.name, name, sizeof n.name);
	util_strlcpy(n.role, "worker", sizeof n.role);
	util_strlcpy(n.state, "ready", sizeof n.state);
	util_strlcpy(n.address, "127.0.0.2:7300", sizeof n.address);
	util_strlcpy(n.version, "test", sizeof n.version);
	util_strlcpy(n.cert_serial, "01", sizeof n.cert_serial);
	n.joined_at = n.last_seen = util_now();
	bool first;
	cr_assert_eq(db_join_commit(A.hd.db, t.id, hash, util_now(), &n), 0);
	cr_assert_eq(db_node_connected(A.hd.db, n.id, util_now(), n.address, n.version, &first), 0);
	util_strlcpy(id_out, n.id, 40);
}

static bool linked(void) { return member && peers_session(&A, w1_id); }

static void setup(void)
{
	signal(SIGPIPE, SIG_IGN);
	log_set_level(getenv("TEST_LAUNCH_LOG") ? LOG_DEBUG : LOG_WARN);
	snprintf(dir, sizeof dir, "/tmp/test_launch.XXXXXX");
	cr_assert(mkdtemp(dir));
	to_w1 = json_array();
	A.lock_fd = -1;
	A.started_at = util_now();
	A.loop = uv_default_loop();
	util_strlcpy(A.opts.state_dir, dir, sizeof A.opts.state_dir);
	snprintf(A.opts.socket, sizeof A.opts.socket, "%s/sparkd.sock", dir);
	util_strlcpy(A.opts.listen_host, "127.0.0.1", sizeof A.opts.listen_host);
	util_strlcpy(A.opts.name, "spark-1", sizeof A.opts.name);
	char err[512] = "";
	cr_assert(svc_named("cluster")->init(&A, err, sizeof err) == 0 &&
		  svc_named("jobs")->init(&A, err, sizeof err) == 0 &&
		  agent_security_config(&A, err, sizeof err) == 0 &&
		  identity_load(&A, err, sizeof err) == 0 && control_start(&A, err, sizeof err) == 0,
		  "%s", err);
	cr_assert_eq(svc_named("jobs")->start(&A, err, sizeof err), 0, "%s", err);
	cr_assert_not_null(A.hooks.job_launch, "the jobs service registers job_launch");
	cr_assert_not_null(A.hooks.job_stop, "the jobs service registers job_stop");
	snprintf(A.jobs->exe, sizeof A.jobs->exe, "%s/agent/sparkd", getenv("SPARK_BUILD_DIR") ?: ".");
	cr_assert_eq(access(A.jobs->exe, X_OK), 0, "no sparkd at %s", A.jobs->exe);

	conn *c = NULL;
	cr_assert_eq(conn_connect_unix(A.loop, A.opts.socket, &ctl_cbs, NULL, &c), 0);
	conn_send_new(c, json_pack("{s:i, s:s, s:i, s:s}", "v", 1, "type", "init", "id", 1, "name",
				   "launch"));
	pump(answered, 20000);
	cr_assert(ctl_answer && strcmp(proto_type(ctl_answer), "result") == 0, "init failed");
	conn_close(c, 0);
	util_strlcpy(head_id, A.id.node_id, sizeof head_id);
	add_worker("spark-2", w1_id);

	char path[300];
	snprintf(path, sizeof path, "%s/adopt.sock", dir);
	uv_pipe_init(A.loop, &adopt_srv, 0);
	cr_assert_eq(uv_pipe_bind(&adopt_srv, path), 0);
	cr_assert_eq(uv_listen((uv_stream_t *)&adopt_srv, 4, on_adopt), 0);
	cr_assert_eq(conn_connect_unix(A.loop, path, &w1_cbs, NULL, &member), 0);
	pump(linked, 5000);
	cr_assert(linked(), "the head did not adopt spark-2's session");
	uv_timer_init(A.loop, &hb);
	uv_timer_start(&hb, on_hb, 500, 500);

	db_group g = {.shared = true, .created_at = util_now()};
	util_strlcpy(g.name, "pair", sizeof g.name);
	util_strlcpy(g.topology, "unknown", sizeof g.topology);
	util_strlcpy(g.shape, "pair", sizeof g.shape);
	util_strlcpy(g.created_by, "test", sizeof g.created_by);
	const char *ids[] = {head_id, w1_id};
	char cn[64], cg[64];
	cr_assert_eq(db_group_create(A.hd.db, &g, ids, 2, cn, cg), 0);
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st, (void)flag, (void)f;
	remove(p);
	return 0;
}

static void close_walk(uv_handle_t *h, void *arg)
{
	(void)arg;
	if (!uv_is_closing(h))
		uv_close(h, NULL);
}

static void teardown(void)
{
	if (member)
		conn_close(member, 0);
	/* as sparkd stops (main.c), for the services this test started */
	svc_named("jobs")->stop(&A);
	svc_named("cluster")->stop(&A);
	peers_stop(&A, "the test is over");
	agent_close_listener(&A);
	control_stop(&A);
	uv_walk(A.loop, close_walk, NULL);
	uv_run(A.loop, UV_RUN_DEFAULT);
	SSL_CTX_free(A.srv_ctx);
	SSL_CTX_free(A.cli_ctx);
	X509_free(A.hd.ca);
	EVP_PKEY_free(A.hd.ca_key);
	free(A.hd.crl_pem);
	db_close(A.hd.db);
	svc_named("jobs")->free(&A);
	json_decref(to_w1);
	json_decref(ctl_answer);
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(launch, .init = setup, .fini = teardown, .timeout = 120);

/* ---- helpers ---------------------------------------------------------------------------------- */

static json_t *caller(void)
{
	struct passwd *pw = getpwuid(geteuid());
	return json_pack("{s:i, s:s}", "uid", (int)geteuid(), "user", pw ? pw->pw_name : "root");
}

/* A launch spec of the pair: rank 0 on the head's node runs sh -c CMD0, rank 1 argv1. */
static json_t *spec(const char *name, const char *cmd0, json_t *argv1)
{
	return json_pack("{s:s, s:s, s:s, s:o, s:[{s:s, s:[s, s, s, s], s:{s:s, s:s}}, {s:s, s:o, s:{s:s}}]}",
			 "name", name, "group", "pair", "owner", "serve:chat", "caller", caller(), "ranks",
			 "node", head_id, "argv", "/bin/sh", "-c", cmd0, "zero-arg", "env", "SVC_X",
			 "x0", "MASTER_PORT", "1234", "node", w1_id, "argv", argv1, "env", "SVC_X", "x1");
}

static char out_path[400];
static bool out_written(void)
{
	FILE *f = fopen(out_path, "r");
	char line[256] = "";
	bool ok = f && fgets(line, sizeof line, f) && strchr(line, '\n');
	if (f)
		fclose(f);
	return ok;
}

static long long job_id_want;
static const char *state_want;
static bool job_in_state(void)
{
	db_job j;
	return db_job_get(A.hd.db, job_id_want, &j) == 0 && strcmp(j.state, state_want) == 0;
}

static void member_reports(long long id, int exit_code, int sig)
{
	conn_send_new(member, json_pack("{s:i, s:s, s:i, s:I, s:[{s:i, s:i, s:I}]}", "v", 1, "type",
					"job_started", "id", 0, "job_id", (json_int_t)id, "ranks",
					"rank", 1, "pid", 4242, "started_at", (json_int_t)util_now()));
	if (exit_code >= 0)
		conn_send_new(member, json_pack("{s:i, s:s, s:i, s:I, s:i, s:i, s:i}", "v", 1, "type",
						"job_exit", "id", 0, "job_id", (json_int_t)id, "rank",
						1, "exit_code", exit_code, "signal", sig));
}

/* `sparkctl job ls -o json` against the in-process head (the loop runs meanwhile). */
static json_t *job_ls(void)
{
	char out[400];
	snprintf(out, sizeof out, "%s/ls.json", dir);
	pid_t p = fork();
	if (p == 0) {
		char bin[300];
		snprintf(bin, sizeof bin, "%s/cli/sparkctl", getenv("SPARK_BUILD_DIR") ?: ".");
		freopen(out, "w", stdout);
		execl(bin, "sparkctl", "--socket", A.opts.socket, "job", "ls", "-o", "json", NULL);
		_exit(127);
	}
	int st = 0;
	uint64_t t0 = util_now_ms();
	while (waitpid(p, &st, WNOHANG) == 0 && util_now_ms() - t0 < 10000)
		uv_run(A.loop, UV_RUN_NOWAIT), usleep(2000);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "sparkctl job ls failed");
	return json_load_file(out, 0, NULL);
}

/* ---- the tests -------------------------------------------------------------------------------- */

Test(launch, each_rank_its_own_command_and_environment)
{
	snprintf(out_path, sizeof out_path, "%s/r0.txt", dir);
	char cmd0[600];
	snprintf(cmd0, sizeof cmd0,
		 "echo \"$0 $SVC_X $SPARK_RANK $SPARK_WORLD_SIZE $SPARK_GROUP $MASTER_PORT\" > %s",
		 out_path);
	char err[512] = "";
	json_t *s = spec("svc-chat-1", cmd0, json_pack("[s, s]", "/bin/echo", "one"));
	long long id = A.hooks.job_launch(&A, s, err, sizeof err);
	json_decref(s);
	cr_assert_gt(id, 0, "job_launch: %s", err);

	/* rank 0 ran on the head's node: its argv (with $0), its env over the contract's */
	pump(out_written, 20000);
	FILE *f = fopen(out_path, "r");
	cr_assert(f, "rank 0 did not run");
	char line[256] = "";
	cr_assert(fgets(line, sizeof line, f));
	fclose(f);
	cr_expect_str_eq(line, "zero-arg x0 0 2 pair 1234\n");

	/* rank 1's node got its own argv and env, and only rank 1 to start */
	json_t *js = wait_frame("job_start", id, 0, 5000);
	cr_assert(js, "spark-2 got no job_start");
	json_t *want = json_pack("{s:[s, s], s:[s]}", "argv", "/bin/echo", "one", "env", "SVC_X=x1");
	json_t *rs = json_array_get(json_object_get(json_object_get(js, "job"), "rank_specs"), 1);
	cr_expect(json_equal(rs, want), "rank 1's spec: %s", json_dumps(rs, 0));
	json_decref(want);
	cr_expect_eq(json_array_size(json_object_get(js, "ranks")), 1);
	cr_expect_eq(proto_int(json_array_get(json_object_get(js, "ranks"), 0), "rank", -1), 1);

	/* it ends like any job, and is listed with its owner */
	member_reports(id, 0, 0);
	job_id_want = id;
	state_want = "succeeded";
	pump(job_in_state, 10000);
	cr_assert(job_in_state(), "the job did not succeed");
	json_t *ls = job_ls();
	json_t *j = json_array_get(json_object_get(ls, "jobs"), 0);
	cr_expect_eq(proto_int(j, "id", 0), id);
	cr_expect_str_eq(proto_str(j, "owner") ?: "(null)", "serve:chat");
	cr_expect_str_eq(proto_str(j, "name") ?: "", "svc-chat-1");
	cr_expect_eq(proto_int(j, "world_size", 0), 2);
	json_decref(ls);
}

Test(launch, job_stop_terms_every_member_then_kills)
{
	char err[512] = "";
	json_t *s = spec("svc-chat-2", "exec sleep 30", json_pack("[s, s]", "/bin/sleep", "30"));
	long long id = A.hooks.job_launch(&A, s, err, sizeof err);
	json_decref(s);
	cr_assert_gt(id, 0, "job_launch: %s", err);
	cr_assert(wait_frame("job_start", id, 0, 5000));
	member_reports(id, -1, 0); /* rank 1 runs, and does not stop on TERM */
	job_id_want = id;
	state_want = "running";
	pump(job_in_state, 10000);
	cr_assert(job_in_state(), "the job is not running");

	size_t mark = json_array_size(to_w1);
	cr_assert_eq(A.hooks.job_stop(&A, id, 400), 0);
	json_t *term = wait_frame("job_signal", id, mark, 3000);
	cr_assert(term, "no SIGTERM to spark-2");
	cr_expect_str_eq(proto_str(term, "signal") ?: "", "TERM");
	json_t *kill = wait_frame("job_signal", id, (size_t)find_frame(mark) + 1, 5000);
	cr_assert(kill, "no SIGKILL to spark-2 after the grace");
	cr_expect_str_eq(proto_str(kill, "signal") ?: "", "KILL");
	conn_send_new(member, json_pack("{s:i, s:s, s:i, s:I, s:i, s:i, s:i}", "v", 1, "type",
					"job_exit", "id", 0, "job_id", (json_int_t)id, "rank", 1,
					"exit_code", 137, "signal", 9));
	state_want = "cancelled";
	pump(job_in_state, 10000);
	db_job j;
	cr_assert_eq(db_job_get(A.hd.db, id, &j), 0);
	cr_expect_str_eq(j.state, "cancelled", "reason: %s", j.reason);
	cr_expect(strstr(j.reason, "serve:chat"), "%s", j.reason);
	db_job_rank *rk = NULL;
	size_t n = 0;
	cr_assert_eq(db_job_ranks(A.hd.db, id, &rk, &n), 0);
	cr_assert_eq(n, 2);
	cr_expect_str_eq(rk[0].state, "killed", "rank 0 on the head's node: %s", rk[0].state);
	free(rk);
	cr_expect_eq(A.hooks.job_stop(&A, id, 400), -ENOENT, "a job that ended");
}

Test(launch, bad_specs_are_refused_with_a_reason)
{
	struct {
		const char *why;
		const char *path; /* what to change: a JSON pointer-ish key */
		json_t *value;
	} cases[] = {
		{"not a valid job name", "name", json_string("bad name")},
		{"missing the owner", "owner", json_string("")},
		{"user name and uid", "caller", json_object()},
		{"one per member", "swap", NULL},
		{"non-empty array of strings", "argv", json_array()},
		{"KEY", "env", json_pack("{s:s}", "BAD-KEY", "v")},
		{"too large", "big", NULL},
		{"no group", "group", json_string("nope")},
	};
	db_job *before = NULL;
	size_t nb = 0;
	cr_assert_eq(db_job_list(A.hd.db, NULL, false, 0, &before, &nb), 0);
	free(before);
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		json_t *s = spec("svc-bad", "true", json_pack("[s]", "/bin/true"));
		json_t *ranks = json_object_get(s, "ranks");
		if (strcmp(cases[i].path, "swap") == 0) {
			json_t *r0 = json_incref(json_array_get(ranks, 0));
			json_array_remove(ranks, 0);
			json_array_append_new(ranks, r0);
		} else if (strcmp(cases[i].path, "argv") == 0 || strcmp(cases[i].path, "env") == 0) {
			json_object_set_new(json_array_get(ranks, 1), cases[i].path, cases[i].value);
		} else if (strcmp(cases[i].path, "big") == 0) {
			char *b = malloc(JOBS_MAX_SPEC_BYTES);
			memset(b, 'x', JOBS_MAX_SPEC_BYTES - 1);
			b[JOBS_MAX_SPEC_BYTES - 1] = '\0';
			json_object_set_new(json_object_get(json_array_get(ranks, 1), "env"), "BIG",
					    json_string(b));
			free(b);
		} else {
			json_object_set_new(s, cases[i].path, cases[i].value);
		}
		char err[1024] = "";
		long long r = A.hooks.job_launch(&A, s, err, sizeof err);
		json_decref(s);
		cr_expect_lt(r, 0, "case %zu (%s) was launched", i, cases[i].why);
		cr_expect(strstr(err, cases[i].why), "case %zu: want '%s' in: %s", i, cases[i].why, err);
	}
	db_job *after = NULL;
	size_t na = 0;
	cr_assert_eq(db_job_list(A.hd.db, NULL, false, 0, &after, &na), 0);
	free(after);
	cr_expect_eq(na, nb, "a refused launch recorded a job");
}

/* Supervised services in simulated clusters (issue 19, docs/serving.md):
 * real sparkd in every node, `runtime: command` recipes whose rank 0 is
 * python3's HTTP file server over a directory holding `health` and
 * `v1/models`, the other ranks a sleep. What a user checks:
 *   - serve -> starting -> ready, with the endpoint on rank 0's address and
 *     the model ids the server lists; svc logs shows the run's output; svc
 *     watch delivers a snapshot at once and one per change;
 *   - kill -9 of a rank's process: restarting, then ready on a new run;
 *   - the head's sparkd killed and started again: still ready, the same run;
 *     then /health failing: unhealthy, and ready again, on the same run;
 *   - svc stop: stopped, and none of the run's processes is left on any node;
 *   - a run that keeps failing: failed once the restart limit is reached;
 *   - two services on shared nodes start one after the other (the second
 *     waits while the first is not ready); a third over a node's memory
 *     budget is refused with the numbers per node, and --force overrides.
 * Needs root (skips otherwise). */
#include "sim_harness.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];

static const char *js(json_t *o, const char *k)
{
	const char *v = json_string_value(json_object_get(o, k));
	return v ? v : "(unset)";
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	cr_assert(f, "cannot write %s", path);
	fputs(text, f);
	fclose(f);
}

/* A directory for the test: www/ (health, v1/models) and recipes. */
static void files_up(bool health)
{
	strcpy(dir, "/tmp/svc-it-XXXXXX");
	cr_assert(mkdtemp(dir));
	chmod(dir, 0755);
	char p[256];
	snprintf(p, sizeof p, "%s/www", dir);
	mkdir(p, 0755);
	snprintf(p, sizeof p, "%s/www/v1", dir);
	mkdir(p, 0755);
	snprintf(p, sizeof p, "%s/www/v1/models", dir);
	write_text(p, "{\"object\":\"list\",\"data\":[{\"id\":\"tiny-1\",\"object\":\"model\"}]}\n");
	if (health) {
		snprintf(p, sizeof p, "%s/www/health", dir);
		write_text(p, "ok\n");
	}
}

/* The test's directory goes on every exit of a test (the suite's fini). */
static void files_down(void)
{
	if (!dir[0])
		return;
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd) != 0)
		cr_log_warn("could not remove %s", dir);
	dir[0] = '\0';
}

TestSuite(svc, .fini = files_down);

/* A command recipe NAME in dir: rank 0 serves www on port over HTTP, the
 * others sleep; health every second; back-off 1 s. */
static const char *recipe(const char *name, int port, const char *www, const char *limit)
{
	static char path[256];
	snprintf(path, sizeof path, "%s/%s.yaml", dir, name);
	char text[1400];
	snprintf(text, sizeof text,
		 "name: %s\n"
		 "runtime: command\n"
		 "model: %s/%s\n"
		 "port: %d\n"
		 "command: [sh, -c, \"if [ {rank} = 0 ]; then exec python3 -m http.server {port} "
		 "--bind {host} --directory {model}; else exec sleep 86400; fi\"]\n"
		 "health:\n  path: /health\n  interval: 1s\n  timeout: 1s\n  startup_timeout: 10m\n"
		 "memory: \"1\"\n"
		 "restart:\n  policy: on-failure\n  limit: %s\n  backoff: 1s\n  backoff_max: 2s\n",
		 name, dir, www, port, limit);
	write_text(path, text);
	return path;
}

static json_t *show(struct sh_sim *s, const char *name)
{
	return sh_ctl_json(s, 1, "svc", "show", name, NULL);
}

/* Poll svc show until the state is want (or timeout_ms): the object, or NULL. */
static json_t *wait_state(struct sh_sim *s, const char *name, const char *want, int timeout_ms)
{
	uint64_t end = sh_now_us() + (uint64_t)timeout_ms * 1000;
	while (sh_now_us() < end) {
		json_t *o = show(s, name);
		if (o && strcmp(js(o, "state"), want) == 0)
			return o;
		json_decref(o);
		sh_sleep_ms(200);
	}
	json_t *o = show(s, name);
	cr_log_warn("service %s is %s, not %s: %s", name, o ? js(o, "state") : "?", want,
		    o ? js(o, "last_error") : "");
	json_decref(o);
	return NULL;
}

static long long jnum(json_t *o, const char *k)
{
	return (long long)json_integer_value(json_object_get(o, k));
}

/* Poll svc show until the service is ready on a run after run (30 s): the
 * object, or NULL. */
static json_t *wait_new_run(struct sh_sim *s, const char *name, long long run)
{
	for (int i = 0; i < 150; i++) {
		json_t *x = show(s, name);
		if (x && strcmp(js(x, "state"), "ready") == 0 && jnum(x, "run") > run)
			return x;
		json_decref(x);
		sh_sleep_ms(200);
	}
	return NULL;
}

/* The pids of a job's processes: each rank's shim and its children. */
static size_t run_pids(struct sh_sim *s, long long job, pid_t *out, size_t max)
{
	char id[32];
	snprintf(id, sizeof id, "%lld", job);
	json_t *j = sh_ctl_json(s, 1, "job", "show", id, NULL);
	size_t n = 0, i;
	json_t *r;
	json_array_foreach(json_object_get(j, "ranks"), i, r) {
		pid_t shim = (pid_t)jnum(r, "pid");
		if (shim <= 0 || n >= max)
			continue;
		out[n++] = shim;
		char p[64];
		snprintf(p, sizeof p, "/proc/%d/task/%d/children", (int)shim, (int)shim);
		FILE *f = fopen(p, "r");
		int c;
		while (f && n < max && fscanf(f, "%d", &c) == 1)
			out[n++] = (pid_t)c;
		if (f)
			fclose(f);
	}
	json_decref(j);
	return n;
}

/* Alive and not a zombie. */
static bool alive(pid_t pid)
{
	char p[64], line[128];
	snprintf(p, sizeof p, "/proc/%d/status", (int)pid);
	FILE *f = fopen(p, "r");
	if (!f)
		return false;
	bool z = false;
	while (fgets(line, sizeof line, f))
		if (strncmp(line, "State:", 6) == 0)
			z = strchr(line, 'Z') != NULL;
	fclose(f);
	while (waitpid(-1, NULL, WNOHANG) > 0) /* we are the subreaper of orphaned ranks */
		;
	return !z;
}

/* What the nodes' sparkd logged about services, jobs and ranks (for a
 * failure's message). */
static void log_agents(struct sh_sim *s)
{
	for (int k = 1; k <= s->nodes; k++) {
		char cmd[600];
		snprintf(cmd, sizeof cmd, "grep -E 'service_|job_|rank_|session|hello' %s/%s/sparkd.log | tail -40",
			 s->root, sh_ns(s, k));
		FILE *f = popen(cmd, "r");
		char line[1024];
		while (f && fgets(line, sizeof line, f))
			cr_log_warn("%s: %s", sh_ns(s, k), line);
		if (f)
			pclose(f);
	}
}

/* `sparkctl svc watch -o json` in node k, its output into path; the pid. */
static pid_t watch_start(struct sh_sim *s, int k, const char *path)
{
	fflush(NULL);
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(fd, 1);
		char *argv[] = {(char *)sh_bin("sparkctl"), "svc", "watch", "-o", "json", NULL};
		char err[256];
		sim_exec(s->prefix, sh_ns(s, k), argv, err, sizeof err);
		_exit(127);
	}
	return pid;
}

/* The states service name had in the watch's snapshots, in order, changes
 * only, each tagged with its run: "STATE/K" where K counts the distinct runs
 * seen (1 for the first, 2 for the next) and "-" stands for no run. A
 * service's state is decided by two independent sources (its run's end from
 * the jobs service, its health checks), so a check of the sequence must
 * accept every order they can legitimately reach the head in: see
 * states_match. */
static void watch_states(const char *path, const char *name, char *out, size_t len)
{
	out[0] = '\0';
	FILE *f = fopen(path, "r");
	char line[16384], last[64] = "";
	long long runs[8] = {0};
	int nruns = 0;
	size_t o = 0;
	while (f && fgets(line, sizeof line, f)) {
		json_t *d = json_loads(line, 0, NULL);
		size_t i;
		json_t *v;
		json_array_foreach(json_object_get(d, "services"), i, v) {
			if (strcmp(js(v, "name"), name) != 0)
				continue;
			long long run = jnum(v, "run");
			char tag[8] = "-", tok[64];
			int k = 0;
			while (run > 0 && k < nruns && runs[k] != run)
				k++;
			if (run > 0 && k == nruns && nruns < 8)
				runs[nruns++] = run;
			if (run > 0)
				snprintf(tag, sizeof tag, "%d", k + 1);
			snprintf(tok, sizeof tok, "%s/%s", js(v, "state"), tag);
			if (strcmp(tok, last) != 0 && o < len) {
				snprintf(last, sizeof last, "%s", tok);
				o += (size_t)snprintf(out + o, len - o, "%s%s", o ? "," : "", last);
			}
		}
		json_decref(d);
	}
	if (f)
		fclose(f);
}

/* Whether a watch_states sequence matches ere (POSIX extended, anchored by
 * the caller). */
static bool states_match(const char *seq, const char *ere)
{
	regex_t re;
	cr_assert_eq(regcomp(&re, ere, REG_EXTENDED | REG_NOSUB), 0, "bad pattern %s", ere);
	bool ok = regexec(&re, seq, 0, NULL, 0) == 0;
	regfree(&re);
	return ok;
}

Test(svc, ready_crash_head_restart_and_stop, .timeout = 200)
{
	struct sh_sim s;
	sh_cluster_up(&s, "svc", 2, SIM_PAIR, "svc");
	sh_wait_reports(&s, 2, true);
	files_up(true);
	char wpath[256];
	snprintf(wpath, sizeof wpath, "%s/watch.out", dir);
	pid_t watch = watch_start(&s, 2, wpath);

	/* serve from the worker: the head records and starts it */
	const char *rp = recipe("web", 8000, "www", "3");
	uint64_t t0 = sh_now_us();
	json_t *o = sh_ctl_json(&s, 2, "serve", rp, "--group", "all", NULL);
	cr_assert(o, "serve failed");
	cr_expect_str_eq(js(o, "state"), "starting");
	cr_expect(json_is_integer(json_object_get(o, "run")), "a run (job id) at once");
	json_decref(o);
	o = wait_state(&s, "web", "ready", 60000);
	cr_assert(o, "web did not become ready");
	cr_log_info("serve -> ready: %.2f s", (double)(sh_now_us() - t0) / 1e6);
	json_t *ep = json_object_get(o, "endpoint");
	cr_expect(strncmp(js(ep, "url"), "http://169.254.", 15) == 0 &&
		  strstr(js(ep, "url"), ":8000"), "endpoint url %s", js(ep, "url"));
	cr_expect_str_eq(js(ep, "management_url"), "http://169.254.100.1:8000");
	cr_expect_eq(json_array_size(json_object_get(ep, "models")), 1);
	cr_expect_str_eq(json_string_value(json_array_get(json_object_get(ep, "models"), 0)) ?: "",
			 "tiny-1");
	long long run1 = jnum(o, "run");
	json_decref(o);
	/* the endpoint answers from the other node (a client in its namespace) */
	char cmd[256], *out = NULL;
	snprintf(cmd, sizeof cmd, "python3 -c \"import urllib.request as u; "
		 "print(u.urlopen('http://169.254.100.1:8000/v1/models').read().decode())\"");
	cr_expect_eq(sh_sh(&s, 2, cmd, &out), 0, "%s", out);
	cr_expect(out && strstr(out, "tiny-1"), "%s", out);
	free(out);

	/* svc logs: the run's output, rank 0's server logging the health checks */
	cr_expect_eq(sh_ctl(&s, 2, &out, "svc", "logs", "web", "--rank", "0", NULL), 0, "%s", out);
	cr_expect(out && strstr(out, "GET /health"), "svc logs: %s", out);
	free(out);

	/* kill -9 rank 1's process (on node 2): the whole service restarts */
	pid_t pids[16];
	size_t np = run_pids(&s, run1, pids, 16);
	cr_assert_geq(np, 4, "two ranks, each a shim and its process (%zu)", np);
	pid_t victim = 0;
	for (size_t i = 0; i < np; i++) {
		char p[64], cl[256] = "";
		snprintf(p, sizeof p, "/proc/%d/cmdline", (int)pids[i]);
		FILE *f = fopen(p, "r");
		size_t n = f ? fread(cl, 1, sizeof cl - 1, f) : 0;
		if (f)
			fclose(f);
		cl[n] = '\0';
		if (strcmp(cl, "sleep") == 0)
			victim = pids[i];
	}
	cr_assert(victim > 0, "rank 1's sleep not found");
	cr_assert_eq(kill(victim, SIGKILL), 0);
	o = wait_new_run(&s, "web", run1);
	cr_assert(o, "web did not come back ready on a new run");
	cr_expect_eq(jnum(o, "restarts"), 1);
	long long run2 = jnum(o, "run");
	json_decref(o);
	for (size_t i = 0; i < np; i++)
		cr_expect(!alive(pids[i]), "pid %d of the crashed run is still alive", (int)pids[i]);

	/* the head's sparkd killed and started again: the same run, still ready */
	char err[512] = "", a1[64];
	snprintf(a1, sizeof a1, "%s", sh_ns(&s, 1));
	char *args[] = {a1};
	cr_assert_eq(sim_fault("kill", 1, args, NULL, err, sizeof err), 0, "%s", err);
	cr_assert_eq(sim_fault("start", 1, args, NULL, err, sizeof err), 0, "%s", err);
	/* the watch got an error answer when the head went, and ended (a client
	 * such as spark-router reconnects) */
	int wst = 0;
	for (int i = 0; i < 50 && waitpid(watch, &wst, WNOHANG) == 0; i++)
		sh_sleep_ms(100);
	cr_expect(WIFEXITED(wst) && WEXITSTATUS(wst) == 1, "svc watch did not end with the head");
	char seq[512];
	watch_states(wpath, "web", seq, sizeof seq);
	cr_log_info("svc watch states: %s", seq);
	/* Run 1 ready; after rank 1's kill its health checks may fail before the
	 * run's end reaches the head (unhealthy/1), and a check can be slow on a
	 * busy machine at any time (an unhealthy, ready flap of the same run);
	 * then restarting, and ready on run 2. Never a state of run 1 after
	 * restarting, and never a second run without restarting. */
	cr_expect(states_match(seq, "^starting/1,ready/1,((unhealthy|ready)/1,)*"
				    "restarting/[-1],(starting/[-1],)?starting/2,ready/2"
				    "(,(unhealthy|ready)/2)*$"),
		  "svc watch states: %s", seq);
	o = NULL;
	for (int i = 0; i < 100 && !o; i++) {
		o = show(&s, "web");
		if (!o)
			sh_sleep_ms(200);
	}
	cr_assert(o, "the head does not answer after its restart");
	cr_expect_str_eq(js(o, "state"), "ready", "after the head's restart: %s", js(o, "last_error"));
	cr_expect_eq(jnum(o, "run"), run2, "the run was not kept (restarted?)");
	cr_expect_eq(jnum(o, "restarts"), 1);
	json_decref(o);
	/* node 2 reaches the head again before the new watch starts there */
	for (int i = 0; i < 100 && sh_ctl(&s, 2, NULL, "svc", "ls", NULL) != 0; i++)
		sh_sleep_ms(100);
	watch = watch_start(&s, 2, wpath);
	sh_sleep_ms(3000); /* members say hello again; the run must not be restarted */
	o = show(&s, "web");
	bool kept = o && jnum(o, "run") == run2 && strcmp(js(o, "state"), "ready") == 0;
	cr_expect(kept, "3 s after the head's restart: run %lld state %s (%s)", o ? jnum(o, "run") : 0,
		  o ? js(o, "state") : "?", o ? js(o, "last_error") : "");
	if (!kept)
		log_agents(&s);
	json_decref(o);

	/* health failing after ready: unhealthy, and back to ready on the same run (the
	 * health reports reach the restarted head: the watch was sent again) */
	char hp[256], hq[256];
	snprintf(hp, sizeof hp, "%s/www/health", dir);
	snprintf(hq, sizeof hq, "%s/www/health.off", dir);
	cr_assert_eq(rename(hp, hq), 0);
	o = wait_state(&s, "web", "unhealthy", 15000);
	cr_assert(o, "web did not become unhealthy when /health answered 404");
	cr_expect(strstr(js(o, "last_error"), "404"), "%s", js(o, "last_error"));
	cr_expect_eq(jnum(o, "run"), run2, "an unhealthy service is not restarted");
	json_decref(o);
	cr_assert_eq(rename(hq, hp), 0);
	o = wait_state(&s, "web", "ready", 15000);
	cr_assert(o, "web did not become ready again");
	cr_expect_eq(jnum(o, "run"), run2);
	json_decref(o);

	/* status lists it under its group */
	json_t *st = sh_ctl_json(&s, 2, "status", NULL);
	json_t *sv = json_array_get(json_object_get(st, "services"), 0);
	cr_expect(sv && strcmp(js(sv, "name"), "web") == 0 && strcmp(js(sv, "group"), "all") == 0,
		  "status services");
	json_decref(st);

	/* stop: nothing of the run is left on any node */
	np = run_pids(&s, run2, pids, 16);
	cr_assert_geq(np, 4);
	o = sh_ctl_json(&s, 2, "svc", "stop", "web", NULL);
	cr_assert(o, "svc stop failed");
	cr_expect_str_eq(js(o, "state"), "stopped");
	cr_expect(json_is_null(json_object_get(o, "run")));
	json_decref(o);
	for (size_t i = 0; i < np; i++)
		cr_expect(!alive(pids[i]), "pid %d is still alive after svc stop", (int)pids[i]);
	snprintf(cmd, sizeof cmd, "python3 -c \"import urllib.request as u; "
		 "u.urlopen('http://169.254.100.1:8000/health', timeout=2)\"");
	cr_expect_neq(sh_sh(&s, 2, cmd, NULL), 0, "the endpoint still answers after svc stop");

	/* a new watch: the snapshot at once (ready), then each change */
	kill(watch, SIGTERM);
	waitpid(watch, NULL, 0);
	watch_states(wpath, "web", seq, sizeof seq);
	/* the same run throughout: at least the unhealthy, ready of the removed
	 * /health (a slow check may add a flap), then stopped */
	cr_expect(states_match(seq, "^ready/1,(unhealthy/1,ready/1,)+(unhealthy/1,)?stopped/[-1]$"),
		  "svc watch states after the head's restart: %s", seq);
	o = sh_ctl_json(&s, 1, "svc", "rm", "web", NULL);
	cr_expect(o && strcmp(js(o, "state"), "removed") == 0, "svc rm of a stopped service: %s",
		  o ? js(o, "state") : "failed");
	json_decref(o);
	files_down();
	sh_down(&s);
}

Test(svc, limit_order_and_admission, .timeout = 200)
{
	struct sh_sim s;
	sh_cluster_up(&s, "svo", 2, SIM_PAIR, "svo");
	sh_wait_reports(&s, 2, true);
	files_up(false); /* no health file yet: rank 0 answers 404 */
	char *out = NULL;

	/* a run that always fails: restarting, then failed after the limit */
	char rp[256];
	snprintf(rp, sizeof rp, "%s/bad.yaml", dir);
	write_text(rp, "name: bad\nruntime: command\nmodel: none\ncommand: [sh, -c, \"exit 3\"]\n"
		       "memory: \"1\"\nrestart:\n  limit: 1\n  backoff: 1s\n");
	json_t *o = sh_ctl_json(&s, 1, "serve", rp, "--group", "all", NULL);
	cr_assert(o, "serve bad");
	json_decref(o);
	o = wait_state(&s, "bad", "failed", 30000);
	cr_assert(o, "bad did not fail");
	cr_expect_eq(jnum(o, "restarts"), 1, "one restart (limit 1), then failed");
	cr_expect(strstr(js(o, "last_error"), "exited with code 3") &&
		  strstr(js(o, "last_error"), "restart limit"), "%s", js(o, "last_error"));
	json_decref(o);

	/* a plan on part of the group is refused up front (a run is a job of the
	 * whole group) */
	int rc = sh_ctl(&s, 1, &out, "serve", rp, "--group", "all", "--name", "half", "--set",
			"nodes=1", NULL);
	cr_expect_eq(rc, 1, "%s", out);
	cr_expect(out && strstr(out, "runs on every member"), "%s", out);
	free(out);

	/* two services on the same nodes: the second waits for the first */
	o = sh_ctl_json(&s, 1, "serve", recipe("one", 8001, "www", "3"), "--group", "all", NULL);
	cr_assert(o, "serve one");
	json_decref(o);
	o = sh_ctl_json(&s, 1, "serve", recipe("two", 8002, "www", "3"), "--group", "all", NULL);
	cr_assert(o, "serve two");
	cr_expect_str_eq(js(o, "state"), "starting");
	cr_expect_str_eq(js(o, "waiting_for"), "one");
	cr_expect(json_is_null(json_object_get(o, "run")), "two must not run while one starts");
	json_decref(o);
	sh_sleep_ms(2500); /* one is not healthy (404): two still waits */
	o = show(&s, "two");
	cr_expect(o && json_is_null(json_object_get(o, "run")) &&
		  strcmp(js(o, "waiting_for"), "one") == 0, "two started before one was ready");
	json_decref(o);
	char p[256];
	snprintf(p, sizeof p, "%s/www/health", dir);
	write_text(p, "ok\n");
	o = wait_state(&s, "one", "ready", 30000);
	cr_assert(o, "one did not become ready");
	json_decref(o);
	o = wait_state(&s, "two", "ready", 30000);
	cr_assert(o, "two did not become ready after one");
	json_decref(o);

	/* a third over the budget: refused with the numbers per node */
	json_t *n = sh_ctl_json(&s, 1, "node", "show", sh_ns(&s, 2), NULL);
	json_t *mem = json_object_get(n, "mem");
	double budget = json_number_value(json_object_get(mem, "budget")) / (1024.0 * 1024 * 1024);
	json_decref(n);
	cr_assert_gt(budget, 2, "node 2 reports a memory budget (node show: mem.budget)");
	char set[64];
	snprintf(set, sizeof set, "memory=%.1f", budget - 1.5); /* one and two hold 2 GiB */
	rc = sh_ctl(&s, 1, &out, "serve", recipe("three", 8003, "www", "3"), "--group", "all",
		    "--set", set, NULL);
	cr_expect_eq(rc, 1, "over the budget must be refused: %s", out);
	cr_expect(out && strstr(out, "does not fit") && strstr(out, sh_ns(&s, 2)) &&
		  strstr(out, "GiB would fit"), "%s", out);
	free(out);
	o = show(&s, "three");
	cr_expect_null(o, "a refused service is not recorded");
	json_decref(o);
	rc = sh_ctl(&s, 1, &out, "serve", recipe("three", 8003, "www", "3"), "--group", "all", "--set",
		    set, "--force", "-o", "json", NULL);
	cr_expect_eq(rc, 0, "--force overrides the budget: %s", out);
	cr_expect(out && strstr(out, "\"forced\": true") && strstr(out, "because of --force"),
		  "the answer says it was forced: %s", out);
	free(out);
	const char *names[] = {"one", "two", "three"};
	for (int i = 0; i < 3; i++) {
		o = sh_ctl_json(&s, 1, "svc", "stop", names[i], NULL);
		cr_expect(o && strcmp(js(o, "state"), "stopped") == 0, "stop %s", names[i]);
		json_decref(o);
	}
	files_down();
	sh_down(&s);
}

/* A command recipe whose ranks run cmd0 (rank 0) and cmd1 (the others), in
 * sh -c; back-off 2 s so that `restarting` lasts long enough to be seen. */
static const char *recipe_sh(const char *name, int port, const char *cmd0, const char *cmd1)
{
	static char path[256];
	snprintf(path, sizeof path, "%s/%s.yaml", dir, name);
	char text[2400];
	snprintf(text, sizeof text,
		 "name: %s\n"
		 "runtime: command\n"
		 "model: %s/www\n"
		 "port: %d\n"
		 "command: [sh, -c, \"if [ {rank} = 0 ]; then %s; else %s; fi\"]\n"
		 "health:\n  path: /health\n  interval: 1s\n  timeout: 1s\n  startup_timeout: 10m\n"
		 "memory: \"1\"\n"
		 "restart:\n  policy: on-failure\n  limit: 3\n  backoff: 2s\n  backoff_max: 2s\n",
		 name, dir, port, cmd0, cmd1);
	write_text(path, text);
	return path;
}

/* Poll svc show (every 100 ms, timeout_ms) until the state is not `ready`
 * and last_error holds want: that state into state, the last_error into why. */
static bool wait_why(struct sh_sim *s, const char *name, const char *want, int timeout_ms,
		     char *state, size_t slen, char *why, size_t wlen)
{
	uint64_t end = sh_now_us() + (uint64_t)timeout_ms * 1000;
	while (sh_now_us() < end) {
		json_t *o = show(s, name);
		bool hit = o && strcmp(js(o, "state"), "ready") != 0 && strstr(js(o, "last_error"), want);
		if (hit) {
			snprintf(state, slen, "%s", js(o, "state"));
			snprintf(why, wlen, "%s", js(o, "last_error"));
		}
		json_decref(o);
		if (hit)
			return true;
		sh_sleep_ms(100);
	}
	return false;
}

/* A model server cannot lose a rank: a rank that exits 0 while the others
 * run ends the run. Rank 1 exiting 0: the service restarts on every member
 * and says which rank ended; rank 0 exiting 0 (the server quit) under
 * on-failure: the run counts as exited 0, the service is stopped and
 * nothing of the run is left. */
/* Serve recipe rp (service name) on group from node k and wait (60 s) until
 * it is ready: its svc show object. */
static json_t *serve_ready(struct sh_sim *s, int k, const char *name, const char *rp,
			   const char *group)
{
	json_t *o = sh_ctl_json(s, k, "serve", rp, "--group", group, NULL);
	cr_assert(o, "serve %s", name);
	json_decref(o);
	o = wait_state(s, name, "ready", 60000);
	if (!o)
		log_agents(s);
	cr_assert(o, "%s did not become ready", name);
	return o;
}

Test(svc, rank_exit_0_ends_the_run, .timeout = 200)
{
	struct sh_sim s;
	sh_cluster_up(&s, "svr", 2, SIM_PAIR, "svr");
	sh_wait_reports(&s, 2, true);
	files_up(true);

	/* rank 1 of the first run exits 0 a second after the test says go;
	 * the ranks of later runs sleep */
	char c0[256], c1[600];
	snprintf(c0, sizeof c0, "exec python3 -m http.server {port} --bind {host} --directory {model}");
	snprintf(c1, sizeof c1, "if [ -e %s/r1.gone ]; then exec sleep 86400; fi; "
		 "while [ ! -e %s/r1.go ]; do sleep 0.1; done; touch %s/r1.gone; sleep 1; exit 0",
		 dir, dir, dir);
	json_t *o = serve_ready(&s, 2, "lone", recipe_sh("lone", 8004, c0, c1), "all");
	long long run1 = jnum(o, "run");
	json_decref(o);
	pid_t pids[16];
	size_t np = run_pids(&s, run1, pids, 16);
	cr_assert_geq(np, 4, "two ranks, each a shim and its process (%zu)", np);
	char p[256];
	snprintf(p, sizeof p, "%s/r1.go", dir);
	write_text(p, "go\n");
	char state[32] = "", why[320] = "", want[128];
	snprintf(want, sizeof want, "rank 1 on %s exited 0 while the others ran", sh_ns(&s, 2));
	bool seen = wait_why(&s, "lone", "rank 1 on", 15000, state, sizeof state, why, sizeof why);
	if (!seen)
		log_agents(&s);
	cr_assert(seen, "svc show never named rank 1's end");
	cr_expect_str_eq(why, want);
	cr_expect(strcmp(state, "restarting") == 0 || strcmp(state, "starting") == 0,
		  "state %s after rank 1 exited 0", state);
	o = wait_new_run(&s, "lone", run1);
	cr_assert(o, "lone did not come back ready on a new run");
	cr_expect_eq(jnum(o, "restarts"), 1);
	json_decref(o);
	for (size_t i = 0; i < np; i++)
		cr_expect(!alive(pids[i]), "pid %d of the ended run is still alive", (int)pids[i]);
	o = sh_ctl_json(&s, 1, "svc", "stop", "lone", NULL);
	cr_expect(o && strcmp(js(o, "state"), "stopped") == 0, "stop lone");
	json_decref(o);

	/* rank 0 quits with 0 while rank 1 runs: on-failure keeps it stopped */
	snprintf(c0, sizeof c0, "python3 -m http.server {port} --bind {host} --directory {model} & "
		 "while [ ! -e %s/q.go ]; do sleep 0.1; done; kill $!; exit 0", dir);
	o = serve_ready(&s, 2, "quit", recipe_sh("quit", 8005, c0, "exec sleep 86400"), "all");
	run1 = jnum(o, "run");
	json_decref(o);
	np = run_pids(&s, run1, pids, 16);
	cr_assert_geq(np, 4, "two ranks, each a shim and its process (%zu)", np);
	snprintf(p, sizeof p, "%s/q.go", dir);
	write_text(p, "go\n");
	o = wait_state(&s, "quit", "stopped", 20000);
	if (!o)
		log_agents(&s);
	cr_assert(o, "quit was not stopped when rank 0 exited 0");
	snprintf(want, sizeof want, "rank 0 on %s exited 0 while the others ran", sh_ns(&s, 1));
	cr_expect_str_eq(js(o, "last_error"), want);
	cr_expect(json_is_null(json_object_get(o, "run")), "no run after the stop");
	cr_expect_eq(jnum(o, "restarts"), 0, "a clean end under on-failure is not restarted");
	json_decref(o);
	for (size_t i = 0; i < np; i++)
		cr_expect(!alive(pids[i]), "pid %d of the ended run is still alive", (int)pids[i]);
	sh_sleep_ms(2500); /* past the back-off: still stopped, no new run */
	o = show(&s, "quit");
	cr_expect(o && strcmp(js(o, "state"), "stopped") == 0 && json_is_null(json_object_get(o, "run")),
		  "quit was started again: %s", o ? js(o, "state") : "?");
	json_decref(o);
	files_down();
	sh_down(&s);
}

/* A member's sparkd away for longer than the restart limit would allow (limit
 * 1, back-off 1 s: the old code counted every start that could not happen and
 * gave up within seconds): the service waits for it, naming it, without
 * counting, and is ready on a new run within seconds of its return. */
Test(svc, member_away_waits, .timeout = 200)
{
	struct sh_sim s;
	sh_cluster_up(&s, "svw", 2, SIM_PAIR, "svw");
	sh_wait_reports(&s, 2, true);
	files_up(true);
	json_t *o = serve_ready(&s, 1, "away", recipe("away", 8006, "www", "1"), "all");
	long long run1 = jnum(o, "run");
	json_decref(o);

	char err[512] = "", a2[64];
	snprintf(a2, sizeof a2, "%s", sh_ns(&s, 2));
	char *args[] = {a2};
	cr_assert_eq(sim_fault("kill", 1, args, NULL, err, sizeof err), 0, "%s", err);
	o = wait_state(&s, "away", "waiting", 20000);
	if (!o)
		log_agents(&s);
	cr_assert(o, "away is not waiting for its member");
	char want[128];
	snprintf(want, sizeof want, "waiting for %s", sh_ns(&s, 2));
	cr_expect(strstr(js(o, "last_error"), want), "last_error: %s", js(o, "last_error"));
	long long failures = jnum(o, "failures");
	cr_expect_leq(failures, 1, "the run's end counts once at most: %lld", failures);
	json_decref(o);
	/* five back-offs' worth and more: still waiting, nothing counted */
	sh_sleep_ms(6000);
	o = show(&s, "away");
	cr_assert(o);
	cr_expect_str_eq(js(o, "state"), "waiting", "%s", js(o, "last_error"));
	cr_expect_eq(jnum(o, "failures"), failures, "starts were counted while the member was away");
	json_decref(o);

	cr_assert_eq(sim_fault("start", 1, args, NULL, err, sizeof err), 0, "%s", err);
	uint64_t t0 = sh_now_us();
	o = wait_new_run(&s, "away", run1);
	if (!o)
		log_agents(&s);
	cr_assert(o, "away did not come back ready on a new run after its member returned");
	cr_log_info("member back -> ready: %.2f s", (double)(sh_now_us() - t0) / 1e6);
	cr_expect_eq(jnum(o, "failures"), 0, "failures are cleared on ready");
	json_decref(o);
	o = sh_ctl_json(&s, 1, "svc", "stop", "away", NULL);
	cr_expect(o && strcmp(js(o, "state"), "stopped") == 0, "stop away");
	json_decref(o);
	files_down();
	sh_down(&s);
}

/* A service holds its group and its nodes: `group rm --force` and `node rm`
 * of a member are refused, naming the service (before, the group went and
 * the service restarted against it for ever); once the service is removed
 * both go, and a group that lost a member says so in its shape. */
Test(svc, group_and_node_rm_refused_under_a_service, .timeout = 200)
{
	struct sh_sim s;
	sh_cluster_up(&s, "svg", 4, SIM_SWITCH, "svg");
	sh_wait_reports(&s, 4, true);
	files_up(true);
	char *out = NULL;
	cr_assert_eq(sh_ctl(&s, 1, &out, "group", "create", "duo", "--nodes", sh_ns(&s, 2), NULL), 0,
		     "%s", out);
	free(out);
	char two[160];
	snprintf(two, sizeof two, "%s,%s", sh_ns(&s, 3), sh_ns(&s, 4));
	cr_assert_eq(sh_ctl(&s, 1, &out, "group", "create", "pair34", "--nodes", two, NULL), 0, "%s",
		     out);
	free(out);
	json_t *o = serve_ready(&s, 1, "held", recipe("held", 8007, "www", "3"), "duo");
	json_decref(o);

	int rc = sh_ctl(&s, 1, &out, "group", "rm", "duo", "--force", NULL);
	cr_expect_neq(rc, 0, "group rm --force under a service: %s", out);
	cr_expect(out && strstr(out, "held (ready)") && strstr(out, "svc stop"), "%s", out);
	free(out);
	rc = sh_ctl(&s, 1, &out, "node", "rm", sh_ns(&s, 2), NULL);
	cr_expect_neq(rc, 0, "node rm of a member under a service: %s", out);
	cr_expect(out && strstr(out, "held (ready)"), "%s", out);
	free(out);
	o = show(&s, "held");
	cr_expect(o && strcmp(js(o, "state"), "ready") == 0, "held after the refusals: %s",
		  o ? js(o, "state") : "?");
	json_decref(o);

	/* a node that is in a group but under no service goes, and the group it
	 * leaves is no longer called a pair */
	cr_expect_eq(sh_ctl(&s, 1, &out, "node", "rm", sh_ns(&s, 3), NULL), 0, "%s", out);
	free(out);
	o = sh_ctl_json(&s, 1, "group", "show", "pair34", NULL);
	cr_expect(o && strcmp(js(o, "shape"), "single") == 0, "pair34's shape: %s",
		  o ? js(o, "shape") : "?");
	json_decref(o);

	o = sh_ctl_json(&s, 1, "svc", "stop", "held", NULL);
	json_decref(o);
	o = sh_ctl_json(&s, 1, "svc", "rm", "held", NULL);
	cr_expect(o, "svc rm held");
	json_decref(o);
	cr_expect_eq(sh_ctl(&s, 1, &out, "group", "rm", "duo", NULL), 0, "%s", out);
	free(out);
	files_down();
	sh_down(&s);
}

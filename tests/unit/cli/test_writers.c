/* sparkctl's answers as a user sees them: every case of cases.json runs the
 * real sparkctl against a fake sparkd (a Unix socket served here) that
 * answers with a recorded or crafted answer (answers/), then checks
 *   - the request the CLI sent (type and the fields the case names),
 *   - the exit code,
 *   - stdout and stderr, for table output and for -o json, byte for byte
 *     against golden/ (the output of the command table's text writers);
 *     for a plain answer, -o json must print exactly the answer as it came
 *     (no golden file: the answer is the expected output).
 * SPARK_CLI_GOLDEN=write rewrites golden/ from the sparkctl under test (and
 * SPARKCTL=PATH picks another binary, e.g. an older one to compare with). */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SPARKCTL
#define SPARKCTL ""
#endif
#ifndef CASES_DIR
#define CASES_DIR "tests/unit/cli"
#endif

/* ---- the fake sparkd ---------------------------------------------------------- */

struct fake {
	int lfd;
	char dir[64], path[128];
	pthread_t th;
	json_t *kase;     /* the case being served (borrowed) */
	json_t *requests; /* every request received, in order */
	pthread_mutex_t mu;
};

static int read_full(int fd, void *buf, size_t n)
{
	uint8_t *p = buf;
	while (n) {
		ssize_t r = read(fd, p, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

static void send_frame(int fd, json_t *msg)
{
	char *s = json_dumps(msg, JSON_COMPACT);
	size_t n = strlen(s);
	uint8_t hdr[4] = {(uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
	if (write(fd, hdr, 4) != 4 || write(fd, s, n) != (ssize_t)n)
		fprintf(stderr, "fake sparkd: short write\n");
	free(s);
}

/* answers/NAME.json for a string, the object itself otherwise (new ref). */
static json_t *load_answer(json_t *a)
{
	if (!json_is_string(a))
		return json_incref(a);
	char p[512];
	snprintf(p, sizeof p, "%s/answers/%s.json", CASES_DIR, json_string_value(a));
	json_error_t e;
	json_t *j = json_load_file(p, JSON_PRESERVE_ORDER, &e);
	if (!j)
		fprintf(stderr, "cannot load %s: %s\n", p, e.text);
	return j;
}

static void serve_one(struct fake *f, int c)
{
	uint8_t hdr[4];
	if (read_full(c, hdr, 4) < 0)
		return;
	uint32_t n = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
	if (n > (1u << 20))
		return;
	char *buf = malloc(n + 1);
	if (!buf || read_full(c, buf, n) < 0) {
		free(buf);
		return;
	}
	buf[n] = '\0';
	json_t *req = json_loads(buf, 0, NULL);
	free(buf);
	if (!req)
		return;
	pthread_mutex_lock(&f->mu);
	json_array_append(f->requests, req);
	pthread_mutex_unlock(&f->mu);
	json_t *id = json_object_get(req, "id");
	const char *type = json_string_value(json_object_get(req, "type"));
	size_t i;
	json_t *s;
	json_array_foreach(json_object_get(f->kase, "stream"), i, s) {
		json_t *m = json_deep_copy(s);
		json_object_set_new(m, "v", json_integer(1));
		json_object_set(m, "id", id);
		send_frame(c, m);
		json_decref(m);
	}
	json_t *err = json_object_get(f->kase, "error");
	json_t *ans = type ? json_object_get(json_object_get(f->kase, "answers"), type) : NULL;
	json_t *m;
	if (err)
		m = json_pack("{s:i, s:s, s:O, s:O, s:O}", "v", 1, "type", "error", "id", id, "code",
			      json_object_get(err, "code"), "message", json_object_get(err, "message"));
	else if (ans)
		m = json_pack("{s:i, s:s, s:O, s:o}", "v", 1, "type", "result", "id", id, "data",
			      load_answer(ans));
	else
		m = json_pack("{s:i, s:s, s:O, s:s, s:s}", "v", 1, "type", "error", "id", id, "code",
			      "unknown_type", "message", "the fake sparkd has no answer for this");
	send_frame(c, m);
	json_decref(m);
	json_decref(req);
}

static void *serve(void *arg)
{
	struct fake *f = arg;
	for (;;) {
		int c = accept(f->lfd, NULL, NULL);
		if (c < 0) {
			if (errno == EINTR)
				continue;
			return NULL; /* closed by fake_stop */
		}
		serve_one(f, c);
		close(c);
	}
}

static void fake_start(struct fake *f, json_t *kase)
{
	memset(f, 0, sizeof *f);
	snprintf(f->dir, sizeof f->dir, "/tmp/sparkctl-cli-XXXXXX");
	cr_assert(mkdtemp(f->dir));
	snprintf(f->path, sizeof f->path, "%s/sparkd.sock", f->dir);
	f->kase = kase;
	f->requests = json_array();
	pthread_mutex_init(&f->mu, NULL);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", f->path);
	f->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	cr_assert(f->lfd >= 0);
	cr_assert(bind(f->lfd, (struct sockaddr *)&sa, sizeof sa) == 0);
	cr_assert(listen(f->lfd, 8) == 0);
	cr_assert(pthread_create(&f->th, NULL, serve, f) == 0);
}

static void fake_stop(struct fake *f)
{
	shutdown(f->lfd, SHUT_RDWR);
	close(f->lfd);
	pthread_join(f->th, NULL);
	unlink(f->path);
	rmdir(f->dir);
	json_decref(f->requests);
	pthread_mutex_destroy(&f->mu);
}

/* ---- running sparkctl ------------------------------------------------------------ */

static char *slurp(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	if (!fp)
		return NULL;
	fseek(fp, 0, SEEK_END);
	long n = ftell(fp);
	rewind(fp);
	char *b = malloc((size_t)n + 1);
	size_t k = fread(b, 1, (size_t)n, fp);
	fclose(fp);
	b[k] = '\0';
	if (len)
		*len = k;
	return b;
}

static void spill(const char *path, const char *s, size_t n)
{
	FILE *fp = fopen(path, "wb");
	cr_assert(fp, "cannot write %s", path);
	fwrite(s, 1, n, fp);
	fclose(fp);
}

static const char *sparkctl(void)
{
	const char *e = getenv("SPARKCTL");
	return e && *e ? e : SPARKCTL;
}

/* sparkctl [-o json] ARGS with the case's env, talking to the fake; the
 * exit code, stdout and stderr. */
static int run(struct fake *f, json_t *kase, bool json, char **out, size_t *olen, char **err,
	       size_t *elen)
{
	char o[160], e[160];
	snprintf(o, sizeof o, "%s/out", f->dir);
	snprintf(e, sizeof e, "%s/err", f->dir);
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		char *argv[64];
		int n = 0;
		argv[n++] = (char *)sparkctl();
		if (json) {
			argv[n++] = "-o";
			argv[n++] = "json";
		}
		size_t i;
		json_t *a;
		json_array_foreach(json_object_get(kase, "args"), i, a)
			if (n < 62)
				argv[n++] = (char *)json_string_value(a);
		argv[n] = NULL;
		const char *k;
		json_t *v;
		json_object_foreach(json_object_get(kase, "env"), k, v)
			setenv(k, json_string_value(v), 1);
		setenv("SPARKCTL_SOCKET", f->path, 1);
		if (!freopen(o, "wb", stdout) || !freopen(e, "wb", stderr) ||
		    !freopen("/dev/null", "rb", stdin))
			_exit(126);
		execv(argv[0], argv);
		_exit(127);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	*out = slurp(o, olen);
	*err = slurp(e, elen);
	unlink(o);
	unlink(e);
	cr_assert(*out && *err);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* golden/NAME.MODE (stdout) and golden/NAME.MODE.err (stderr, only when
 * there is one): compared, or written with SPARK_CLI_GOLDEN=write. */
static void golden(const char *name, const char *mode, const char *sfx, const char *got,
		   size_t n)
{
	char p[512];
	snprintf(p, sizeof p, "%s/golden/%s.%s%s", CASES_DIR, name, mode, sfx);
	const char *w = getenv("SPARK_CLI_GOLDEN");
	if (w && strcmp(w, "write") == 0) {
		if (n || !*sfx)
			spill(p, got, n);
		else
			unlink(p);
		return;
	}
	size_t wl = 0;
	char *want = slurp(p, &wl);
	if (!want && *sfx) { /* no .err file: no stderr expected */
		want = strdup("");
		wl = 0;
	}
	cr_assert(want, "%s: no golden file %s (SPARK_CLI_GOLDEN=write makes it)", name, p);
	cr_expect(wl == n && memcmp(want, got, n) == 0,
		  "%s (%s%s) differs from %s:\n--- want\n%s\n--- got\n%s", name, mode, sfx, p, want,
		  got);
	free(want);
}

static json_t *cases(void)
{
	char p[512];
	snprintf(p, sizeof p, "%s/cases.json", CASES_DIR);
	json_error_t e;
	json_t *c = json_load_file(p, 0, &e);
	cr_assert(c, "cannot load %s: %s", p, e.text);
	return c;
}

/* The request the CLI sent names the case's type and fields. */
static void check_request(struct fake *f, json_t *kase, const char *name)
{
	json_t *want = json_object_get(kase, "request");
	if (!want)
		return;
	json_t *got = json_array_get(f->requests, 0);
	cr_assert(got, "%s: sparkctl sent no request", name);
	const char *k;
	json_t *v;
	json_object_foreach(want, k, v) {
		json_t *g = json_object_get(got, k);
		char *gs = g ? json_dumps(g, JSON_ENCODE_ANY) : strdup("(absent)");
		char *ws = json_dumps(v, JSON_ENCODE_ANY);
		cr_expect(g && json_equal(g, v), "%s: request field %s is %s, not %s", name, k, gs, ws);
		free(gs);
		free(ws);
	}
}

/* One answer, no stream, no error: -o json prints it as it came, in
 * sparkctl's one JSON format (2-space indent, the answer's key order, a
 * newline). The answer, a new ref, or NULL for the other cases. */
static json_t *plain_answer(json_t *kase)
{
	json_t *answers = json_object_get(kase, "answers");
	if (json_object_size(answers) != 1 || json_object_get(kase, "stream") ||
	    json_object_get(kase, "error") || json_is_false(json_object_get(kase, "json_is_answer")))
		return NULL;
	const char *k;
	json_t *v;
	json_object_foreach(answers, k, v)
		return load_answer(v);
	return NULL;
}

static void check_json_is_answer(json_t *answer, const char *name, const char *out, size_t n)
{
	char *want = json_dumps(answer, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	size_t wl = strlen(want);
	cr_expect(n == wl + 1 && memcmp(out, want, wl) == 0 && out[wl] == '\n',
		  "%s -o json: not the answer as it came:\n--- want\n%s\n--- got\n%s", name, want, out);
	free(want);
}

Test(cli_writers, every_case_prints_its_golden_output)
{
	if (!*sparkctl())
		cr_skip_test("sparkctl is not built in this configuration");
	json_t *all = cases();
	cr_assert(json_array_size(all) > 0);
	size_t i;
	json_t *kase;
	json_array_foreach(all, i, kase) {
		const char *name = json_string_value(json_object_get(kase, "name"));
		int want_rc = (int)json_integer_value(json_object_get(kase, "exit"));
		for (int json = 0; json < 2; json++) {
			struct fake f;
			fake_start(&f, kase);
			char *out, *err;
			size_t ol, el;
			int rc = run(&f, kase, json, &out, &ol, &err, &el);
			cr_expect_eq(rc, want_rc, "%s%s: exit %d, not %d; stderr: %s", name,
				     json ? " -o json" : "", rc, want_rc, err);
			check_request(&f, kase, name);
			json_t *answer = json ? plain_answer(kase) : NULL;
			if (answer)
				check_json_is_answer(answer, name, out, ol);
			else
				golden(name, json ? "json" : "txt", "", out, ol);
			golden(name, json ? "json" : "txt", ".err", err, el);
			json_decref(answer);
			free(out);
			free(err);
			fake_stop(&f);
		}
	}
	json_decref(all);
}

/* Every command that prints an answer has a text writer in the table, so
 * table output is never empty where JSON is not (checked on the cases). */
Test(cli_writers, table_output_is_never_empty_where_json_is_not)
{
	if (!*sparkctl())
		cr_skip_test("sparkctl is not built in this configuration");
	json_t *all = cases();
	size_t i;
	json_t *kase;
	json_array_foreach(all, i, kase) {
		if (json_object_get(kase, "error"))
			continue;
		const char *name = json_string_value(json_object_get(kase, "name"));
		size_t len[2];
		for (int json = 0; json < 2; json++) {
			struct fake f;
			fake_start(&f, kase);
			char *out, *err;
			size_t el;
			run(&f, kase, json, &out, &len[json], &err, &el);
			free(out);
			free(err);
			fake_stop(&f);
		}
		cr_expect(len[1] == 0 || len[0] > 0, "%s: -o json printed %zu bytes, the table nothing",
			  name, len[1]);
	}
	json_decref(all);
}

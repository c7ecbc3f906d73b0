/* cli_run: the built sparkctl run from a unit test, with no cluster (the
 * control socket points nowhere). SPARKCTL is the binary's path (empty when
 * this configuration does not build it: the test is skipped). env: words
 * VAR=VALUE put before the command (may be ""). stdout, and stderr with
 * with_stderr, is captured into *out (caller frees); returns the exit code. */
#ifndef SPARK_TEST_CLI_RUN_H
#define SPARK_TEST_CLI_RUN_H

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#ifndef SPARKCTL
#define SPARKCTL ""
#endif

static int cli_run(const char *env, const char *args, char **out, int with_stderr)
{
	if (!*SPARKCTL)
		cr_skip_test("sparkctl is not built in this configuration");
	char cmd[2048];
	snprintf(cmd, sizeof cmd, "%s SPARKCTL_SOCKET=/nonexistent %s %s %s", env, SPARKCTL, args,
		 with_stderr ? "2>&1" : "2>/dev/null");
	FILE *p = popen(cmd, "r");
	cr_assert(p);
	size_t cap = 1 << 20, n = 0, k;
	char *buf = malloc(cap);
	cr_assert(buf);
	while ((k = fread(buf + n, 1, cap - 1 - n, p)) > 0)
		n += k;
	buf[n] = '\0';
	int st = pclose(p);
	*out = buf;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* cli_run without stderr, which must exit want_rc and print one JSON value. */
static json_t *cli_run_json(const char *env, const char *args, int want_rc)
{
	char *out;
	int rc = cli_run(env, args, &out, 0);
	cr_assert_eq(rc, want_rc, "exit %d for %s:\n%s", rc, args, out);
	json_error_t e;
	json_t *j = json_loads(out, 0, &e);
	cr_assert(j, "not JSON: %s\n%s", e.text, out);
	free(out);
	return j;
}

#endif

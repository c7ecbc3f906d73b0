/* sparkctl route serve|check|reload: spark-router (router/, docs/router.md)
 * from sparkctl. serve runs spark-router in the foreground (exec: its exit
 * status is sparkctl's), following the services of the sparkd sparkctl talks
 * to; check validates a policy through spark-router --check; reload sends
 * SIGHUP to the spark-router named by a pid file, after checking that the
 * process is one. Writers: print_route.c. */
#include "cli.h"
#include "print.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PID_DIR "/run/spark-router" /* the systemd unit's RuntimeDirectory */

/* spark-router: env SPARK_ROUTER, beside sparkctl, the build tree's
 * ../router/, else the bare name (execvp looks it up on PATH). */
static void router_path(char *out, size_t len)
{
	const char *env = getenv("SPARK_ROUTER");
	char self[4096];
	ssize_t n = env && *env ? -1 : readlink("/proc/self/exe", self, sizeof self - 1);
	snprintf(out, len, "%s", env && *env ? env : "spark-router");
	if (n <= 0)
		return;
	self[n] = '\0';
	*strrchr(self, '/') = '\0';
	static const char *const rel[] = {"spark-router", "../router/spark-router"};
	for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
		char cand[4200];
		snprintf(cand, sizeof cand, "%s/%s", self, rel[i]);
		if (access(cand, X_OK) == 0) {
			snprintf(out, len, "%s", cand);
			return;
		}
	}
}

/* The default pid file: /run/spark-router/spark-router.pid (the systemd
 * unit's) when that directory is writable (serve) or the file exists
 * (reload), else $XDG_RUNTIME_DIR/spark-router.pid likewise; "" when none. */
static void default_pid_file(bool existing, char *out, size_t len)
{
	const char *dirs[] = {PID_DIR, getenv("XDG_RUNTIME_DIR")};
	out[0] = '\0';
	for (size_t i = 0; i < 2; i++) {
		if (!dirs[i] || !*dirs[i])
			continue;
		snprintf(out, len, "%s/spark-router.pid", dirs[i]);
		if (existing ? access(out, F_OK) == 0 : access(dirs[i], W_OK) == 0)
			return;
		out[0] = '\0';
	}
}

enum { O_POLICY = 1000, O_LISTEN, O_LOG, O_PID, O_LEVEL };

int cmd_route_serve(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {
		{"policy", required_argument, NULL, O_POLICY}, {"listen", required_argument, NULL, O_LISTEN},
		{"log", required_argument, NULL, O_LOG},       {"pid-file", required_argument, NULL, O_PID},
		{"log-level", required_argument, NULL, O_LEVEL}, CLI_OPT_END,
	};
	const char *policy = NULL, *listen = NULL, *log = NULL, *pid = NULL, *level = NULL;
	int ch, rc = 0;
	optind = 0;
	while ((ch = cli_next_opt(ctx, argc, argv, lo, &rc)) != -1) {
		if (ch == -2)
			return rc;
		const char **dst = ch == O_POLICY ? &policy : ch == O_LISTEN ? &listen : ch == O_LOG ? &log
				 : ch == O_PID	  ? &pid : &level;
		*dst = optarg;
	}
	if (optind < argc)
		return cli_usage(ctx, "unexpected argument '%s'", argv[optind]);
	if (!policy)
		return cli_usage(ctx, "--policy FILE is required");
	char exe[4300], pidbuf[4200];
	router_path(exe, sizeof exe);
	if (!pid) {
		default_pid_file(false, pidbuf, sizeof pidbuf);
		pid = pidbuf[0] ? pidbuf : NULL;
	}
	const char *av[16];
	int n = 0;
	av[n++] = exe;
	av[n++] = "--policy";
	av[n++] = policy;
	av[n++] = "--socket";
	av[n++] = ctx->socket;
	if (listen) {
		av[n++] = "--listen";
		av[n++] = listen;
	}
	if (log) {
		av[n++] = "--log";
		av[n++] = log;
	}
	if (pid) {
		av[n++] = "--pid-file";
		av[n++] = pid;
	}
	if (level) {
		av[n++] = "--log-level";
		av[n++] = level;
	}
	av[n] = NULL;
	fflush(stdout);
	execvp(exe, (char *const *)av);
	return cli_fail("cannot run %s: %s; install spark-router beside sparkctl or on PATH (or set SPARK_ROUTER)",
			exe, strerror(errno));
}

/* Run spark-router --policy FILE --check -o json: its stdout in *out
 * (malloc'd), its stderr passed through. The exit status, or -1. */
static int run_check(const char *policy, const char *sock, char **out)
{
	char exe[4300];
	router_path(exe, sizeof exe);
	int fds[2];
	*out = NULL;
	if (pipe(fds) < 0)
		return -1;
	fflush(stdout);
	pid_t p = fork();
	if (p < 0) {
		close(fds[0]);
		close(fds[1]);
		return -1;
	}
	if (p == 0) {
		dup2(fds[1], 1);
		close(fds[0]);
		close(fds[1]);
		execlp(exe, exe, "--policy", policy, "--check", "-o", "json", "--socket", sock,
		       (char *)NULL);
		fprintf(stderr, "sparkctl: cannot run %s: %s; install spark-router beside sparkctl or on PATH (or set SPARK_ROUTER)\n",
			exe, strerror(errno));
		_exit(127);
	}
	close(fds[1]);
	size_t len = 0, cap = 0;
	char buf[4096];
	ssize_t r;
	while ((r = read(fds[0], buf, sizeof buf)) != 0) {
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 || len + (size_t)r + 1 > (4u << 20))
			break;
		if (len + (size_t)r + 1 > cap) {
			cap = (len + (size_t)r + 1) * 2;
			char *nb = realloc(*out, cap);
			if (!nb)
				break;
			*out = nb;
		}
		memcpy(*out + len, buf, (size_t)r);
		len += (size_t)r;
		(*out)[len] = '\0';
	}
	close(fds[0]);
	int st;
	while (waitpid(p, &st, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int cmd_route_check(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {CLI_OPT_END};
	int ch, rc = 0;
	optind = 0;
	while ((ch = cli_next_opt(ctx, argc, argv, lo, &rc)) != -1)
		if (ch == -2)
			return rc;
	if (argc - optind != 1)
		return cli_usage(ctx, argc - optind ? "one policy file, please" : "the policy FILE is missing");
	char *text = NULL;
	int st = run_check(argv[optind], ctx->socket, &text);
	json_t *o = st == 0 && text ? json_loads(text, 0, NULL) : NULL;
	free(text);
	if (st == 127) {
		json_decref(o);
		return 1;
	}
	if (!o) {
		json_decref(o);
		/* spark-router said what is wrong on stderr (FILE:LINE:COL: ...) */
		return st == 1 ? 1 : cli_fail("spark-router --check failed (status %d)", st);
	}
	cli_output(ctx, NULL, o, NULL);
	json_decref(o);
	return 0;
}

/* The spark-router a pid file names, or -1 with a message for people in why:
 * the pid it holds must be the process holding its lock (spark-router keeps
 * a write lock on its pid file while it runs) and a spark-router by its
 * /proc comm, so a stale file or a recycled pid is never signalled. */
static pid_t router_pid(const char *path, char *why, size_t len)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(why, len, "cannot read the pid file %s: %s (is spark-router running with --pid-file? pass --pid-file FILE)",
			 path, strerror(errno));
		return -1;
	}
	long v = 0;
	int ok = fscanf(f, "%ld", &v) == 1 && v > 1 && v < (1L << 22);
	struct flock q = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
	int locked = fcntl(fileno(f), F_GETLK, &q) == 0 && q.l_type != F_UNLCK;
	fclose(f);
	if (!ok) {
		snprintf(why, len, "%s does not hold a process id", path);
		return -1;
	}
	char comm[64] = "", cpath[64];
	snprintf(cpath, sizeof cpath, "/proc/%ld/comm", v);
	FILE *c = locked && q.l_pid == (pid_t)v ? fopen(cpath, "r") : NULL;
	if (c) {
		if (!fgets(comm, sizeof comm, c))
			comm[0] = '\0';
		fclose(c);
	}
	if (strcmp(comm, "spark-router\n")) {
		snprintf(why, len, "process %ld of %s is not a running spark-router (a stale pid file?); start it with 'sparkctl route serve'",
			 v, path);
		return -1;
	}
	return (pid_t)v;
}

int cmd_route_reload(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {{"pid-file", required_argument, NULL, O_PID}, CLI_OPT_END};
	const char *pidfile = NULL;
	int ch, rc = 0;
	optind = 0;
	while ((ch = cli_next_opt(ctx, argc, argv, lo, &rc)) != -1) {
		if (ch == -2)
			return rc;
		pidfile = optarg;
	}
	if (optind < argc)
		return cli_usage(ctx, "unexpected argument '%s'", argv[optind]);
	char def[4200], why[4400];
	if (!pidfile) {
		default_pid_file(true, def, sizeof def);
		if (!def[0])
			return cli_fail("no pid file given, and none in %s or $XDG_RUNTIME_DIR: is spark-router running? pass --pid-file FILE",
					PID_DIR);
		pidfile = def;
	}
	pid_t pid = router_pid(pidfile, why, sizeof why);
	if (pid < 0)
		return cli_fail("%s", why);
	if (kill(pid, SIGHUP) < 0)
		return cli_fail("cannot signal spark-router (pid %d): %s%s", (int)pid, strerror(errno),
				errno == EPERM ? "; run as its user or root" : "");
	json_t *o = json_pack("{s:i, s:s, s:s}", "pid", (int)pid, "pid_file", pidfile, "signal", "HUP");
	cli_output(ctx, NULL, o, NULL);
	json_decref(o);
	return 0;
}

/* jobs_shim: `sparkd --rank-shim DIR`, the supervisor of one rank (or one
 * exec session). sparkd starts it detached (its own session) with stdout and
 * stderr already pointing where the output goes (the rank's log file, or the
 * exec session's pipes), so a rank outlives its sparkd: a restarted sparkd
 * finds the shim by pid and start time and reads the exit status it leaves.
 *
 * DIR/spec.json: {"argv":[...], "env":{...}, "user":"NAME", "cwd":["DIR",...],
 *   "cwd_strict":bool, "node":"NAME", "what":"rank 3", "grace_ms":N, "exec":bool}
 * The shim becomes a child subreaper, forks the command into its own process
 * group as the user (initgroups, setgid, setuid; only when the shim runs as
 * root and the user is another), in the first cwd that exists, with exactly
 * the env given (HOME, USER, LOGNAME and SHELL from the node's passwd when the
 * env lacks them). PATH of that env finds the command.
 * Signals: SIGTERM/SIGINT -> SIGTERM to the command's group, SIGKILL after
 * grace_ms; SIGUSR1 -> SIGKILL at once. When a rank's command exits, whatever
 * is left of its group is killed and every descendant reaped (the shim is a
 * child subreaper); an exec session leaves what its command daemonized alone,
 * as ssh does (Open MPI's orted daemonizes).
 * Result: DIR/status "CODE SIGNAL\n" (code 128+N for signal N; 127 command
 * not found, 126 cannot run it, user or cwd missing), written atomically;
 * an exec shim (spec.exec) also exits with CODE. */
#include "agent.h"

#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <jansson.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char **env_array(json_t *env, const struct passwd *pw)
{
	size_t n = json_object_size(env) + 8, k = 0;
	char **envp = calloc(n + 1, sizeof *envp);
	if (!envp)
		return NULL;
	const char *key;
	json_t *v;
	json_object_foreach(env, key, v) {
		const char *s = json_string_value(v);
		if (!s || k >= n)
			continue;
		if (asprintf(&envp[k], "%s=%s", key, s) < 0)
			return NULL;
		k++;
	}
	if (pw) {
		const char *defs[][2] = {{"HOME", pw->pw_dir},
					 {"USER", pw->pw_name},
					 {"LOGNAME", pw->pw_name},
					 {"SHELL", pw->pw_shell && *pw->pw_shell ? pw->pw_shell : "/bin/sh"}};
		for (size_t i = 0; i < ARRAY_SIZE(defs) && k < n; i++)
			if (!json_object_get(env, defs[i][0]) &&
			    asprintf(&envp[k], "%s=%s", defs[i][0], defs[i][1]) >= 0)
				k++;
	}
	if (!json_object_get(env, "PATH") && k < n)
		envp[k++] = strdup("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
	return envp;
}

/* The child: become the user, enter the directory, exec. Never returns. */
static void run_child(json_t *spec)
{
	const char *node = json_string_value(json_object_get(spec, "node"));
	const char *what = json_string_value(json_object_get(spec, "what"));
	const char *user = json_string_value(json_object_get(spec, "user"));
	json_t *argv_j = json_object_get(spec, "argv");
	node = node ? node : "?";
	what = what ? what : "command";
	setpgid(0, 0);
	struct passwd *pw = user ? getpwnam(user) : NULL;
	if (!pw) {
		fprintf(stderr, "sparkd: %s on %s: user '%s' does not exist on this node; create it "
				"(the same user name on every node)\n",
			what, node, user ? user : "?");
		_exit(126);
	}
	if (geteuid() == 0 && pw->pw_uid != 0) {
		if (initgroups(pw->pw_name, pw->pw_gid) < 0 || setgid(pw->pw_gid) < 0 ||
		    setuid(pw->pw_uid) < 0) {
			fprintf(stderr, "sparkd: %s on %s: cannot become user %s: %s\n", what, node,
				pw->pw_name, strerror(errno));
			_exit(126);
		}
	} else if (geteuid() != pw->pw_uid && geteuid() != 0) {
		fprintf(stderr, "sparkd: %s on %s: sparkd runs as uid %u and cannot run commands as "
				"%s\n", what, node, (unsigned)geteuid(), pw->pw_name);
		_exit(126);
	}
	json_t *cwd = json_object_get(spec, "cwd");
	bool strict = json_is_true(json_object_get(spec, "cwd_strict"));
	bool in = false;
	size_t i;
	json_t *d;
	json_array_foreach(cwd, i, d) {
		const char *p = json_string_value(d);
		if (p && chdir(p) == 0) {
			in = true;
			break;
		}
		if (strict) {
			fprintf(stderr, "sparkd: %s on %s: cannot enter workdir %s: %s\n", what, node,
				p ? p : "?", strerror(errno));
			_exit(126);
		}
	}
	if (!in && (chdir(pw->pw_dir) < 0 && chdir("/") < 0)) {
		fprintf(stderr, "sparkd: %s on %s: no usable working directory\n", what, node);
		_exit(126);
	}
	size_t argc = json_array_size(argv_j);
	char **argv = calloc(argc + 1, sizeof *argv);
	if (!argv || argc == 0)
		_exit(126);
	for (i = 0; i < argc; i++)
		argv[i] = (char *)json_string_value(json_array_get(argv_j, i));
	char **envp = env_array(json_object_get(spec, "env"), pw);
	if (!envp)
		_exit(126);
	/* execvpe searches the PATH of the calling process: use the job's. */
	for (char **e = envp; *e; e++)
		if (strncmp(*e, "PATH=", 5) == 0)
			setenv("PATH", *e + 5, 1);
	execvpe(argv[0], argv, envp);
	int e = errno;
	if (e == ENOENT)
		fprintf(stderr, "sparkd: %s on %s: command not found: %s\n", what, node, argv[0]);
	else
		fprintf(stderr, "sparkd: %s on %s: cannot run %s: %s\n", what, node, argv[0],
			strerror(e));
	_exit(e == ENOENT ? 127 : 126);
}

static int write_status(const char *dir, int code, int sig)
{
	char p[PATH_MAX], buf[64];
	snprintf(p, sizeof p, "%s/status", dir);
	int n = snprintf(buf, sizeof buf, "%d %d\n", code, sig);
	return util_write_file(p, buf, (size_t)n, 0644);
}

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int agent_rank_shim(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "sparkd: --rank-shim DIR is internal to sparkd\n");
		return 2;
	}
	const char *dir = argv[2];
	/* First thing: a stop request must not kill the shim itself. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGCHLD);
	sigprocmask(SIG_BLOCK, &set, NULL);
	char p[PATH_MAX];
	snprintf(p, sizeof p, "%s/spec.json", dir);
	json_error_t jerr;
	json_t *spec = json_load_file(p, 0, &jerr);
	if (!spec || !json_is_array(json_object_get(spec, "argv"))) {
		fprintf(stderr, "sparkd: cannot read %s: %s\n", p, spec ? "no argv" : jerr.text);
		write_status(dir, 126, 0);
		return 126;
	}
	bool is_exec = json_is_true(json_object_get(spec, "exec"));
	json_int_t grace = json_integer_value(json_object_get(spec, "grace_ms"));
	if (grace <= 0)
		grace = 3000;
	/* A rank owns its descendants (reaped here, killed with it); an exec session
	 * is like ssh: what the command daemonized (Open MPI's orted) lives on. */
	if (!is_exec)
		prctl(PR_SET_CHILD_SUBREAPER, 1);
	signal(SIGPIPE, SIG_DFL);
	fflush(NULL);
	pid_t child = fork();
	if (child < 0) {
		fprintf(stderr, "sparkd: fork: %s\n", strerror(errno));
		write_status(dir, 126, 0);
		return 126;
	}
	if (child == 0) {
		sigprocmask(SIG_UNBLOCK, &set, NULL);
		run_child(spec);
	}
	setpgid(child, child); /* both sides, so a signal never misses the group */
	int code = -1, sig = 0;
	uint64_t kill_at = 0;
	for (;;) {
		int st;
		pid_t w;
		while ((w = waitpid(-1, &st, WNOHANG)) > 0)
			if (w == child) {
				code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
				sig = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
			}
		if (code >= 0)
			break;
		struct timespec to = {0, 200 * 1000000L};
		if (kill_at) {
			uint64_t now = mono_ms();
			if (now >= kill_at) {
				kill(-child, SIGKILL);
				kill(child, SIGKILL);
				kill_at = 0;
			} else if (kill_at - now < 200) {
				to.tv_nsec = (long)(kill_at - now) * 1000000L;
			}
		}
		int s = sigtimedwait(&set, NULL, &to);
		if (s == SIGTERM || s == SIGINT || s == SIGHUP) {
			kill(-child, SIGTERM);
			kill(child, SIGTERM);
			if (!kill_at)
				kill_at = mono_ms() + (uint64_t)grace;
		} else if (s == SIGUSR1) {
			kill(-child, SIGKILL);
			kill(child, SIGKILL);
		}
	}
	/* What the command left in its group goes with it; then reap every
	 * descendant we inherited (bounded: daemons in other sessions stay). */
	if (is_exec) {
		json_decref(spec);
		return code;
	}
	kill(-child, SIGKILL);
	uint64_t until = mono_ms() + 2000;
	for (;;) {
		int st;
		pid_t w = waitpid(-1, &st, WNOHANG);
		if (w < 0 && errno == ECHILD)
			break;
		if (w > 0)
			continue;
		if (mono_ms() >= until)
			break;
		struct timespec to = {0, 50 * 1000000L};
		sigtimedwait(&set, NULL, &to);
	}
	write_status(dir, code, sig);
	json_decref(spec);
	return 0;
}

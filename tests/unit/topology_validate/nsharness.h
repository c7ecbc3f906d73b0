/* Network-namespace scenes for tests, with nothing left behind.
 *
 * ns_run() forks a "world" child in a new anonymous network namespace; the
 * world forks one child per node, each in its own anonymous namespace, makes
 * the veth "cables" between them by PID (`ip link add A netns PID type veth
 * peer name B netns PID2`), runs world_setup (bridges), then lets every node
 * run its setup commands and its function. Each node's JSON comes back to the
 * test as {"node name": JSON}. No namespace has a name, so none can leak: all
 * vanish with their processes, which die with their parent (PDEATHSIG) on
 * every path, the test's timeout included. Addresses used by callers must be
 * 169.254.0.0/16, fe80::/10 or fd00::/8 only. */
#ifndef NSHARNESS_H
#define NSHARNESS_H

#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NS_SKIP 77

/* Under ASan, each node checks its own leaks before it exits (its _exit
 * skips the usual check at exit). */
#if defined(__SANITIZE_ADDRESS__)
#define NS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NS_ASAN 1
#endif
#endif
#ifdef NS_ASAN
#include <sanitizer/lsan_interface.h>
#endif

struct ns_node {
	const char *name;
	const char *setup;         /* shell commands in the node's namespace, or NULL */
	json_t *(*fn)(void *arg);  /* runs in the node's namespace */
	void *arg;
};

struct ns_link {
	int a;            /* node index, or -1 for the world namespace */
	const char *a_if;
	int b;
	const char *b_if;
	int mtu;          /* 0: default */
};

struct ns_scene {
	const struct ns_node *nodes;
	size_t n_nodes;
	const struct ns_link *links;
	size_t n_links;
	const char *world_setup; /* shell commands in the world namespace, or NULL */
	int timeout_s;           /* whole scene; 0 = 30 */
};

static int ns_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int ns_sh(const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof cmd, fmt, ap);
	va_end(ap);
	int r = system(cmd);
	if (r != 0)
		fprintf(stderr, "nsharness: '%s' failed (%d)\n", cmd, r);
	return r;
}

static int ns_read_all(int fd, char **out)
{
	size_t cap = 4096, len = 0;
	char *b = malloc(cap);
	if (!b)
		return -1;
	for (;;) {
		if (len + 1024 > cap) {
			char *nb = realloc(b, cap *= 2);
			if (!nb) {
				free(b);
				return -1;
			}
			b = nb;
		}
		ssize_t n = read(fd, b + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	b[len] = '\0';
	*out = b;
	return 0;
}

static int ns_write_all(int fd, const char *s)
{
	size_t len = strlen(s);
	while (len) {
		ssize_t n = write(fd, s, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		s += n;
		len -= (size_t)n;
	}
	return 0;
}

static void ns_node_main(const struct ns_node *nd, int ready, int go, int out)
{
	char c = 'r';
	if (unshare(CLONE_NEWNET) < 0)
		c = 'x';
	if (write(ready, &c, 1) != 1 || c == 'x')
		_exit(1);
	if (read(go, &c, 1) != 1)
		_exit(1);
	json_t *res;
	if (system("ip link set lo up") != 0 || (nd->setup && ns_sh("%s", nd->setup) != 0))
		res = json_pack("{s:s}", "error", "setup failed");
	else
		res = nd->fn ? nd->fn(nd->arg) : json_object();
	if (!res)
		res = json_pack("{s:s}", "error", "node function returned NULL");
	char *s = json_dumps(res, JSON_COMPACT);
	json_decref(res);
	int leaked = 0;
#ifdef NS_ASAN
	leaked = __lsan_do_recoverable_leak_check();
#endif
	ns_write_all(out, s ? s : "{}");
	free(s);
	_exit(leaked ? 3 : 0);
}

static int ns_world(const struct ns_scene *s, int resfd)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (unshare(CLONE_NEWNET) < 0)
		return errno == EPERM ? NS_SKIP : 1;
	if (system("ip -V >/dev/null 2>&1") != 0)
		return NS_SKIP;
	if (ns_sh("ip link set lo up"))
		return 1;
	size_t n = s->n_nodes;
	pid_t *pid = calloc(n, sizeof *pid);
	int *gofd = calloc(n, sizeof *gofd), *outfd = calloc(n, sizeof *outfd);
	if (!pid || !gofd || !outfd)
		return 1;
	for (size_t i = 0; i < n; i++) {
		int r[2], g[2], o[2];
		if (pipe(r) || pipe(g) || pipe(o))
			return 1;
		fflush(NULL);
		pid[i] = fork();
		if (pid[i] < 0)
			return 1;
		if (pid[i] == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			close(r[0]);
			close(g[1]);
			close(o[0]);
			close(resfd);
			free(pid); /* the world's, not the node's */
			free(gofd);
			free(outfd);
			ns_node_main(&s->nodes[i], r[1], g[0], o[1]);
		}
		close(r[1]);
		close(g[0]);
		close(o[1]);
		char c = 0;
		if (read(r[0], &c, 1) != 1 || c != 'r') {
			fprintf(stderr, "nsharness: node %s could not make its namespace\n", s->nodes[i].name);
			return NS_SKIP;
		}
		close(r[0]);
		gofd[i] = g[1];
		outfd[i] = o[0];
	}
	for (size_t i = 0; i < s->n_links; i++) {
		const struct ns_link *l = &s->links[i];
		char na[64] = "", nb[64] = "", mtu[32] = "";
		if (l->a >= 0)
			snprintf(na, sizeof na, " netns %d", (int)pid[l->a]);
		if (l->b >= 0)
			snprintf(nb, sizeof nb, " netns %d", (int)pid[l->b]);
		if (l->mtu > 0)
			snprintf(mtu, sizeof mtu, " mtu %d", l->mtu);
		if (ns_sh("ip link add %s%s%s type veth peer name %s%s%s", l->a_if, mtu, na, l->b_if, mtu,
			  nb))
			return 1;
	}
	if (s->world_setup && ns_sh("%s", s->world_setup))
		return 1;
	for (size_t i = 0; i < n; i++)
		if (write(gofd[i], "g", 1) != 1)
			return 1;
	json_t *all = json_object();
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		char *txt = NULL;
		if (ns_read_all(outfd[i], &txt) < 0)
			return 1;
		json_error_t je;
		json_t *j = json_loads(txt, 0, &je);
		if (!j) {
			fprintf(stderr, "nsharness: node %s gave no JSON: '%.200s'\n", s->nodes[i].name, txt);
			j = json_pack("{s:s}", "error", "no JSON from node");
			rc = 1;
		}
		json_object_set_new(all, s->nodes[i].name, j);
		free(txt);
	}
	for (size_t i = 0; i < n; i++) {
		int st = 0;
		waitpid(pid[i], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "nsharness: node %s exited with status %d%s\n", s->nodes[i].name, st,
				WIFEXITED(st) && WEXITSTATUS(st) == 3 ? " (leaks, see above)" : "");
			rc = 1;
		}
	}
	char *dump = json_dumps(all, JSON_COMPACT);
	ns_write_all(resfd, dump ? dump : "{}");
	free(dump);
	json_decref(all);
	return rc;
}

/* The nodes' JSON, or NULL (then *skip says whether namespaces were missing). */
static json_t *ns_run(const struct ns_scene *s, bool *skip)
{
	*skip = false;
	if (geteuid() != 0) {
		*skip = true;
		return NULL;
	}
	int res[2];
	if (pipe(res))
		return NULL;
	fflush(NULL);
	pid_t w = fork();
	if (w < 0)
		return NULL;
	if (w == 0) {
		close(res[0]);
		_exit(ns_world(s, res[1]));
	}
	close(res[1]);
	/* Read with an overall deadline; a stuck scene is killed (and with it
	 * every node and namespace). */
	int timeout = (s->timeout_s > 0 ? s->timeout_s : 30) * 1000;
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &t1);
		long left = timeout - ((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000);
		struct pollfd pfd = {res[0], POLLIN, 0};
		if (left <= 0 || poll(&pfd, 1, (int)left) <= 0) {
			fprintf(stderr, "nsharness: scene timed out\n");
			kill(w, SIGKILL);
			break;
		}
		if (len + 4096 > cap) {
			char *nb = realloc(buf, cap *= 2);
			if (!nb)
				break;
			buf = nb;
		}
		ssize_t n = read(res[0], buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(res[0]);
	buf[len] = '\0';
	int st = 0;
	waitpid(w, &st, 0);
	json_t *j = NULL;
	if (WIFEXITED(st) && WEXITSTATUS(st) == NS_SKIP)
		*skip = true;
	else if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		j = json_loads(buf, 0, NULL);
	else
		fprintf(stderr, "nsharness: world failed (status %d)\n", st);
	free(buf);
	return j;
}

#endif

#include "harness.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

long h_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

const char *h_bin(const char *name)
{
	static char buf[4][512];
	static int slot;
	char *b = buf[slot++ % 4];
	const char *bd = getenv("SPARK_BUILD_DIR");
	if (!bd)
		bd = ".";
	if (strcmp(name, "sparkd") == 0)
		snprintf(b, 512, "%s/agent/sparkd", bd);
	else if (strcmp(name, "sparkctl") == 0)
		snprintf(b, 512, "%s/cli/sparkctl", bd);
	else
		snprintf(b, 512, "%s/%s", bd, name);
	return b;
}

/* Can a TCP socket bind 127.0.0.1:port right now? */
static bool port_free(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				 .sin_port = htons((uint16_t)port)};
	bool ok = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

/* An agent port: one the kernel picks, whose next port (the model service's
 * data port, agent port + 1) is free too and is no other node's agent port. */
static int free_port(const struct h_cluster *c, int n)
{
	for (int tries = 0; tries < 100; tries++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in sa = {.sin_family = AF_INET,
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		socklen_t sl = sizeof sa;
		if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
		    getsockname(fd, (struct sockaddr *)&sa, &sl) < 0)
			cr_assert_fail("cannot pick a free port");
		close(fd);
		int p = ntohs(sa.sin_port);
		bool clash = p >= 65535 || !port_free(p + 1);
		for (int i = 0; i < n && !clash; i++)
			clash = abs(c->nodes[i].port - p) <= 1;
		if (!clash)
			return p;
	}
	cr_assert_fail("cannot pick two free ports in a row");
	return 0;
}

struct h_cluster *h_cluster_new(int n)
{
	struct h_cluster *c = calloc(1, sizeof *c);
	cr_assert(c);
	cr_assert(n <= H_MAX_NODES);
	snprintf(c->root, sizeof c->root, "/tmp/sparkctl-it-XXXXXX");
	cr_assert(mkdtemp(c->root), "mkdtemp");
	c->n = n;
	for (int i = 0; i < n; i++) {
		struct h_node *nd = &c->nodes[i];
		snprintf(nd->name, sizeof nd->name, "node-%d", i + 1);
		snprintf(nd->dir, sizeof nd->dir, "%s/%s", c->root, nd->name);
		snprintf(nd->sock, sizeof nd->sock, "%s/%s.sock", c->root, nd->name);
		snprintf(nd->log, sizeof nd->log, "%s/%s.log", c->root, nd->name);
		nd->port = free_port(c, i);
	}
	return c;
}

static void rm_rf(const char *path)
{
	char *argv[] = {"rm", "-rf", (char *)path, NULL};
	pid_t p = fork();
	if (p == 0) {
		execvp("rm", argv);
		_exit(127);
	}
	if (p > 0)
		waitpid(p, NULL, 0);
}

void h_cluster_free(struct h_cluster *c)
{
	if (!c)
		return;
	for (int i = 0; i < c->n; i++)
		if (c->nodes[i].pid > 0)
			h_kill(c, i, SIGKILL);
	if (!getenv("SPARK_KEEP_TEST_DIRS"))
		rm_rf(c->root);
	free(c);
}

int h_sock_answers(const char *path)
{
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
	int ok = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
	close(fd);
	return ok;
}

int h_start(struct h_cluster *c, int i) { return h_start_cfg(c, i, "/dev/null"); }

int h_start_cfg(struct h_cluster *c, int i, const char *config)
{
	struct h_node *nd = &c->nodes[i];
	char listen[64], port[16];
	snprintf(listen, sizeof listen, "127.0.0.1:%d", nd->port);
	snprintf(port, sizeof port, "%d", nd->port);
	unlink(nd->sock);
	pid_t parent = getpid();
	pid_t p = fork();
	cr_assert(p >= 0);
	if (p == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		int fd = open(nd->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0) {
			dup2(fd, 2);
			dup2(fd, 1);
			close(fd);
		}
		execl(h_bin("sparkd"), "sparkd", "--state-dir", nd->dir, "--socket", nd->sock,
		      "--listen", listen, "--name", nd->name, "--config", config, "--log-level",
		      "debug", (char *)NULL);
		_exit(127);
	}
	nd->pid = p;
	for (int t = 0; t < 500; t++) {
		if (h_sock_answers(nd->sock))
			return 0;
		int st;
		if (waitpid(p, &st, WNOHANG) == p) {
			nd->pid = 0;
			return -1;
		}
		usleep(10000);
	}
	return -1;
}

void h_kill(struct h_cluster *c, int i, int sig)
{
	struct h_node *nd = &c->nodes[i];
	if (nd->pid <= 0)
		return;
	kill(nd->pid, sig);
	waitpid(nd->pid, NULL, 0);
	nd->pid = 0;
}

static char *slurp_fd(int fd)
{
	size_t cap = 4096, n = 0;
	char *b = malloc(cap);
	for (;;) {
		if (n + 1024 > cap)
			b = realloc(b, cap *= 2);
		ssize_t r = read(fd, b + n, cap - n - 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	b[n] = '\0';
	return b;
}

struct h_result h_run(char *const argv[])
{
	struct h_result res = {0};
	char outp[] = "/tmp/sparkctl-out-XXXXXX", errp[] = "/tmp/sparkctl-err-XXXXXX";
	int ofd = mkstemp(outp), efd = mkstemp(errp);
	cr_assert(ofd >= 0 && efd >= 0);
	pid_t p = fork();
	cr_assert(p >= 0);
	if (p == 0) {
		dup2(ofd, 1);
		dup2(efd, 2);
		int nul = open("/dev/null", O_RDONLY);
		dup2(nul, 0);
		execv(argv[0], argv);
		_exit(127);
	}
	int st = 0;
	while (waitpid(p, &st, 0) < 0 && errno == EINTR)
		;
	res.rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	lseek(ofd, 0, SEEK_SET);
	lseek(efd, 0, SEEK_SET);
	res.out = slurp_fd(ofd);
	res.err = slurp_fd(efd);
	close(ofd);
	close(efd);
	unlink(outp);
	unlink(errp);
	return res;
}

/* sparkctl --socket NODE ARGS..., under timeout(1) when secs > 0. */
static struct h_result ctl_run(struct h_cluster *c, int i, int secs, va_list ap)
{
	char *argv[64], tmo[16];
	int n = 0;
	if (secs > 0) {
		snprintf(tmo, sizeof tmo, "%d", secs);
		argv[n++] = "/usr/bin/timeout";
		argv[n++] = "-k";
		argv[n++] = "2";
		argv[n++] = tmo;
	}
	argv[n++] = (char *)h_bin("sparkctl");
	argv[n++] = "--socket";
	argv[n++] = c->nodes[i].sock;
	char *a;
	while ((a = va_arg(ap, char *)) && n < 62)
		argv[n++] = a;
	argv[n] = NULL;
	return h_run(argv);
}

struct h_result h_ctl(struct h_cluster *c, int i, ...)
{
	va_list ap;
	va_start(ap, i);
	struct h_result r = ctl_run(c, i, 0, ap);
	va_end(ap);
	return r;
}

struct h_result h_ctl_timeout(struct h_cluster *c, int i, int secs, ...)
{
	va_list ap;
	va_start(ap, secs);
	struct h_result r = ctl_run(c, i, secs, ap);
	va_end(ap);
	return r;
}

void h_result_free(struct h_result *r)
{
	free(r->out);
	free(r->err);
	r->out = r->err = NULL;
}

json_t *h_json(const struct h_result *r)
{
	json_error_t je;
	json_t *j = json_loads(r->out, 0, &je);
	cr_assert(j, "output is not JSON (%s): %s / stderr: %s", je.text, r->out, r->err);
	return j;
}

const char *h_addr(struct h_cluster *c, int i)
{
	static char buf[4][64];
	static int slot;
	char *b = buf[slot++ % 4];
	snprintf(b, 64, "127.0.0.1:%d", c->nodes[i].port);
	return b;
}

char *h_init(struct h_cluster *c)
{
	struct h_result r = h_ctl(c, 0, "init", "--name", "itest", "-o", "json", NULL);
	cr_assert_eq(r.rc, 0, "init failed: %s", r.err);
	json_t *j = h_json(&r);
	char *tok = strdup(json_string_value(json_object_get(j, "token")));
	json_decref(j);
	h_result_free(&r);
	return tok;
}

json_t *h_status_node(json_t *status, const char *name)
{
	size_t i;
	json_t *n;
	json_array_foreach(json_object_get(status, "nodes"), i, n) {
		const char *nm = json_string_value(json_object_get(n, "name"));
		if (nm && strcmp(nm, name) == 0)
			return n;
	}
	return NULL;
}

long h_wait_state(struct h_cluster *c, int via, const char *name, const char *state,
		  long timeout_ms)
{
	long t0 = h_now_ms();
	for (;;) {
		struct h_result r = h_ctl(c, via, "status", "-o", "json", NULL);
		if (r.rc == 0) {
			json_t *j = json_loads(r.out, 0, NULL);
			json_t *n = j ? h_status_node(j, name) : NULL;
			const char *st = n ? json_string_value(json_object_get(n, "state")) : NULL;
			int ok = st && strcmp(st, state) == 0;
			json_decref(j);
			if (ok) {
				h_result_free(&r);
				return h_now_ms() - t0;
			}
		}
		h_result_free(&r);
		if (h_now_ms() - t0 > timeout_ms)
			return -1;
		usleep(100000);
	}
}

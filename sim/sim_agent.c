/* The sparkd of each simulated node: find, start inside the node's
 * namespace, wait for its control socket, stop. */
#include "sim_int.h"

#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static bool executable(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, X_OK) == 0;
}

int sim_find_sparkd(char *out, size_t len)
{
	const char *env = getenv("SPARKD");
	if (env && *env) {
		if (!executable(env))
			return -ENOENT;
		snprintf(out, len, "%s", env);
		return 0;
	}
	char self[PATH_MAX], cand[PATH_MAX + 32];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n > 0) {
		self[n] = 0;
		char *dir = dirname(self);
		const char *rel[] = {"sparkd", "../agent/sparkd"};
		for (int i = 0; i < 2; i++) {
			snprintf(cand, sizeof cand, "%s/%s", dir, rel[i]);
			char real[PATH_MAX];
			if (executable(cand) && realpath(cand, real)) {
				snprintf(out, len, "%s", real);
				return 0;
			}
		}
	}
	const char *path = getenv("PATH");
	if (!path)
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
	char *dup = strdup(path), *save = NULL;
	if (!dup)
		return -ENOMEM;
	for (char *d = strtok_r(dup, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		snprintf(cand, sizeof cand, "%s/sparkd", *d ? d : ".");
		if (executable(cand)) {
			snprintf(out, len, "%s", cand);
			free(dup);
			return 0;
		}
	}
	free(dup);
	return -ENOENT;
}

/* Is pid a sparkd started for this socket (guards against pid reuse)? */
static bool cmdline_has(pid_t pid, const char *arg)
{
	char p[64], buf[8192];
	snprintf(p, sizeof p, "/proc/%d/cmdline", (int)pid);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = 0;
	for (ssize_t i = 0; i < n; i += (ssize_t)strlen(buf + i) + 1)
		if (strcmp(buf + i, arg) == 0)
			return true;
	return false;
}

bool sima_running(const struct sim *s, int k)
{
	pid_t pid = s->nodes[k - 1].pid;
	if (pid <= 0)
		return false;
	char sock[PATH_MAX];
	simm_node_dir(s, k, "sparkd.sock", sock, sizeof sock);
	return sim_pid_alive(pid) && cmdline_has(pid, sock);
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* The node's sparkd.yaml: veths have no PCI function, so discovery is told
 * which netdevs are the fabric and how they pair into ports (the fabric.ports
 * map), the sim's fabric MTU (fabric.mtu, the cluster MTU on the head), and
 * the address pool of `sparkctl topo addresses` (fabric.pool: a sim uses only
 * link-local space, and its upper half 169.254.128.0/17 so that no fabric
 * subnet can cover the management addresses 169.254.100.K), and a TCP bandwidth floor for probes that suits veths on a
 * busy machine (probes.tcp_min_gbps). */
static int write_config(const struct sim *s, const char *path)
{
	char buf[512];
	int n = snprintf(buf, sizeof buf,
			 "# made by sparkctl sim: a simulated Spark's fabric netdevs\n"
			 "fabric:\n"
			 "  ports:\n"
			 "    \"0\": [enp1s0f0np0, enP2p1s0f0np0]\n"
			 "    \"1\": [enp1s0f1np1, enP2p1s0f1np1]\n"
			 "  pool: 169.254.128.0/17\n"
			 "  mtu: %d\n"
			 "probes:\n"
			 "  tcp_min_gbps: 0.1 # veths on shared CPUs; a real cluster keeps 1\n",
			 s->mtu > 0 ? s->mtu : 1500);
	return util_write_file(path, buf, (size_t)n, 0644);
}

int sima_spawn(struct sim *s, int k, char *err, size_t errlen)
{
	struct sim_node *n = &s->nodes[k - 1];
	char dir[PATH_MAX], state[PATH_MAX], sock[PATH_MAX], logp[PATH_MAX], pidp[PATH_MAX];
	char listen[64], cfg[PATH_MAX];
	simm_node_dir(s, k, NULL, dir, sizeof dir);
	simm_node_dir(s, k, "sparkd.yaml", cfg, sizeof cfg);
	simm_node_dir(s, k, "state", state, sizeof state);
	simm_node_dir(s, k, "sparkd.sock", sock, sizeof sock);
	simm_node_dir(s, k, "sparkd.log", logp, sizeof logp);
	simm_node_dir(s, k, "sparkd.pid", pidp, sizeof pidp);
	snprintf(listen, sizeof listen, "%s:%d", n->addr, SIM_AGENT_PORT);
	if (strlen(sock) >= sizeof(((struct sockaddr_un *)0)->sun_path))
		return sim_errf(err, errlen, -ENAMETOOLONG,
				"socket path %s is too long; use a shorter --root", sock);
	if (!s->sparkd[0] || !executable(s->sparkd))
		return sim_errf(err, errlen, -ENOENT,
				"sparkd not found; build it, set SPARKD=/path/to/sparkd, or use --no-agents");
	int r = util_mkdirs(state, 0700);
	if (r < 0)
		return sim_errf(err, errlen, r, "cannot make %s: %s", state, strerror(-r));
	if ((r = write_config(s, cfg)) < 0)
		return sim_errf(err, errlen, r, "cannot write %s: %s", cfg, strerror(-r));
	unlink(sock);
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return sim_errf(err, errlen, -errno, "pipe: %s", strerror(errno));
	pid_t pid = fork();
	if (pid < 0) {
		r = -errno;
		close(pfd[0]);
		close(pfd[1]);
		return sim_errf(err, errlen, r, "fork: %s", strerror(-r));
	}
	if (pid == 0) {
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		for (int sig = 1; sig < NSIG; sig++)
			signal(sig, SIG_DFL);
		setsid();
		int e = -simns_enter_full(n->name);
		if (e == 0 && chdir(dir) < 0)
			e = errno;
		if (e == 0) {
			int in = open("/dev/null", O_RDONLY);
			int lg = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0644);
			if (in < 0 || lg < 0) {
				e = errno;
			} else {
				dup2(in, 0);
				dup2(lg, 1);
				dup2(lg, 2);
				for (int fd = 3; fd < 1024; fd++)
					if (fd != pfd[1])
						close(fd);
				setenv("SPARKCTL_SOCKET", sock, 1);
				setenv("SPARK_SIM_NODE", n->name, 1);
				setenv("SPARK_SIM", s->prefix, 1);
				char *argv[] = {s->sparkd, "--state-dir", state, "--socket", sock,
						"--listen", listen, "--name", n->name,
						"--config", cfg, NULL};
				execv(s->sparkd, argv);
				e = errno;
			}
		}
		if (write(pfd[1], &e, sizeof e) < 0) {
			/* nothing more to say */
		}
		_exit(127);
	}
	close(pfd[1]);
	int child_err = 0;
	ssize_t got;
	do {
		got = read(pfd[0], &child_err, sizeof child_err);
	} while (got < 0 && errno == EINTR);
	close(pfd[0]);
	if (got == (ssize_t)sizeof child_err) {
		waitpid(pid, NULL, 0);
		return sim_errf(err, errlen, -child_err, "cannot start %s in %s: %s", s->sparkd,
				n->name, strerror(child_err));
	}
	n->pid = pid;
	char buf[32];
	int len = snprintf(buf, sizeof buf, "%d\n", (int)pid);
	util_write_file(pidp, buf, (size_t)len, 0644);
	return 0;
}

static bool sock_answers(const char *path)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
	bool ok = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
	close(fd);
	return ok;
}

/* The last lines of a log, joined by " | ". */
static void log_tail(const char *path, char *out, size_t len)
{
	out[0] = 0;
	FILE *f = fopen(path, "re");
	if (!f)
		return;
	char buf[4096];
	fseek(f, 0, SEEK_END);
	long sz = ftell(f);
	long from = sz > (long)sizeof buf - 1 ? sz - (long)sizeof buf + 1 : 0;
	fseek(f, from, SEEK_SET);
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		buf[--n] = 0;
	/* Keep the last 3 lines. */
	char *start = buf;
	int lines = 0;
	for (char *p = buf + n; p > buf; p--)
		if (p[-1] == '\n' && ++lines == 3) {
			start = p;
			break;
		}
	size_t o = 0;
	for (char *p = start; *p && o + 4 < len; p++) {
		if (*p == '\n') {
			o += (size_t)snprintf(out + o, len - o, " | ");
		} else {
			out[o++] = *p;
			out[o] = 0;
		}
	}
}

int sima_wait(struct sim *s, unsigned mask, int timeout_ms, char *err, size_t errlen)
{
	int waited = 0;
	char sock[PATH_MAX], logp[PATH_MAX], tail[512];
	while (mask) {
		for (int k = 1; k <= s->nnodes; k++) {
			if (!(mask & (1u << (k - 1))))
				continue;
			pid_t pid = s->nodes[k - 1].pid;
			simm_node_dir(s, k, "sparkd.sock", sock, sizeof sock);
			if (sock_answers(sock)) {
				mask &= ~(1u << (k - 1));
				continue;
			}
			int st;
			bool dead = waitpid(pid, &st, WNOHANG) == pid || !sim_pid_alive(pid);
			if (dead || waited >= timeout_ms) {
				simm_node_dir(s, k, "sparkd.log", logp, sizeof logp);
				log_tail(logp, tail, sizeof tail);
				if (dead)
					s->nodes[k - 1].pid = 0;
				return sim_errf(err, errlen, dead ? -ECHILD : -ETIMEDOUT,
						"sparkd of %s %s; its log %s ends: %s", s->nodes[k - 1].name,
						dead ? "exited at start" : "did not open its socket in time",
						logp, tail[0] ? tail : "(empty)");
			}
		}
		if (!mask)
			break;
		sleep_ms(20);
		waited += 20;
	}
	return 0;
}

int sima_stop(struct sim *s, int k)
{
	pid_t pid = s->nodes[k - 1].pid;
	if (pid > 0 && sima_running(s, k)) {
		kill(pid, SIGTERM);
		for (int t = 0; t < 100 && sim_pid_alive(pid); t++) {
			waitpid(pid, NULL, WNOHANG);
			sleep_ms(20);
		}
		if (sim_pid_alive(pid)) {
			kill(pid, SIGKILL);
			for (int t = 0; t < 100 && sim_pid_alive(pid); t++) {
				waitpid(pid, NULL, WNOHANG);
				sleep_ms(10);
			}
		}
		waitpid(pid, NULL, WNOHANG);
	}
	s->nodes[k - 1].pid = 0;
	char p[PATH_MAX];
	simm_node_dir(s, k, "sparkd.pid", p, sizeof p);
	unlink(p);
	return 0;
}

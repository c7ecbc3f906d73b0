#include "sim_harness.h"

#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

uint64_t sh_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

const char *const sh_twin_name[2][2] = {{"enp1s0f0np0", "enP2p1s0f0np0"},
					   {"enp1s0f1np1", "enP2p1s0f1np1"}};

void sh_sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

void sh_require_root(void)
{
	char err[256];
	if (sim_check_caps(err, sizeof err) < 0)
		cr_skip_test("%s", err);
	if (access("/proc/self/ns/net", F_OK) < 0)
		cr_skip_test("no network namespaces here");
}

void sh_unique_prefix(char *out, size_t len, const char *tag)
{
	static atomic_int counter;
	int n = atomic_fetch_add(&counter, 1);
	char buf[64];
	snprintf(buf, sizeof buf, "t%ld%c%s", (long)getpid(), 'a' + n % 26, tag ? tag : "");
	for (char *p = buf; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9')))
			*p = '-';
	buf[SIM_PREFIX_MAX] = 0;
	size_t l = strlen(buf);
	while (l && buf[l - 1] == '-')
		buf[--l] = 0;
	snprintf(out, len, "%s", buf);
}

const char *sh_ns(struct sh_sim *s, int k)
{
	if (k < 0 || k > SIM_MAX_NODES)
		return "";
	char buf[sizeof s->ns[0]];
	if (k == 0)
		snprintf(buf, sizeof buf, "%s-mgmt", s->prefix);
	else
		snprintf(buf, sizeof buf, "%s-%d", s->prefix, k);
	memcpy(s->ns[k], buf, sizeof buf);
	return s->ns[k];
}

/* The guard: waits for EOF (test died) or 'd' (sh_down ran). */
static void guard_main(int rfd, const char *prefix, const char *root)
{
	setsid();
	signal(SIGINT, SIG_IGN);
	signal(SIGTERM, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	prctl(PR_SET_NAME, "sim-guard", 0, 0, 0);
	for (int fd = 3; fd < 1024; fd++)
		if (fd != rfd)
			close(fd);
	char c = 0;
	ssize_t n;
	do {
		n = read(rfd, &c, 1);
	} while (n < 0 && errno == EINTR);
	if (n == 1 && c == 'd')
		_exit(0);
	sim_down(prefix, root, NULL, 0);
	_exit(0);
}

int sh_up(struct sh_sim *s, const char *tag, const struct sim_opts *o)
{
	memset(s, 0, sizeof *s);
	s->guard_fd = -1;
	sh_unique_prefix(s->prefix, sizeof s->prefix, tag);
	struct sim_opts oo = *o;
	oo.prefix = s->prefix;
	if (o->root)
		snprintf(s->root, sizeof s->root, "%s", o->root);
	else
		snprintf(s->root, sizeof s->root, "%s/%s", SIM_RUN_DIR, s->prefix);
	s->nodes = o->nodes + o->bare;
	s->topo = o->topo;
	prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	fflush(NULL);
	pid_t g = fork();
	if (g < 0) {
		close(p[0]);
		close(p[1]);
		return -errno;
	}
	if (g == 0) {
		close(p[1]);
		guard_main(p[0], s->prefix, s->root);
	}
	close(p[0]);
	s->guard = g;
	s->guard_fd = p[1];
	int r = sim_up(&oo, s->err, sizeof s->err);
	if (r < 0) {
		sh_down(s);
		return r;
	}
	s->up = true;
	return 0;
}

int sh_down(struct sh_sim *s)
{
	int r = 0;
	if (s->guard_fd >= 0 || s->up)
		r = sim_down(s->prefix, s->root, s->err, sizeof s->err);
	s->up = false;
	if (s->guard_fd >= 0) {
		if (write(s->guard_fd, "d", 1) < 0) {
			/* the guard is gone: nothing to tell it */
		}
		close(s->guard_fd);
		s->guard_fd = -1;
	}
	if (s->guard > 0) {
		waitpid(s->guard, NULL, 0);
		s->guard = 0;
	}
	/* Reap what the sim left to us as subreaper (agents, their children). */
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	return r;
}

json_t *sh_describe(struct sh_sim *s)
{
	json_t *j = NULL;
	if (sim_describe(s->prefix, &j, NULL, 0) < 0)
		return NULL;
	return j;
}

static bool pid_running(long pid)
{
	char p[64], buf[512];
	snprintf(p, sizeof p, "/proc/%ld/stat", pid);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = 0;
	char *rp = strrchr(buf, ')');
	return rp && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X';
}

const char *sh_leftovers(const char *prefix, const char *root)
{
	static char what[512];
	what[0] = 0;
	size_t o = 0;
	DIR *d = opendir("/run/netns");
	size_t pl = strlen(prefix);
	if (d) {
		struct dirent *e;
		while ((e = readdir(d)))
			if (strncmp(e->d_name, prefix, pl) == 0 && e->d_name[pl] == '-' &&
			    o < sizeof what - 64)
				o += (size_t)snprintf(what + o, sizeof what - o, "netns %s; ", e->d_name);
		closedir(d);
	}
	char p[512];
	snprintf(p, sizeof p, "%s/%s", SIM_RUN_DIR, prefix);
	struct stat st;
	if (lstat(p, &st) == 0 && o < sizeof what - 64)
		o += (size_t)snprintf(what + o, sizeof what - o, "%s; ", p);
	if (root && lstat(root, &st) == 0 && o < sizeof what - 64)
		o += (size_t)snprintf(what + o, sizeof what - o, "%s; ", root);
	/* Processes started for this sim carry its paths or SPARK_SIM=prefix. */
	char needle[96];
	snprintf(needle, sizeof needle, "SPARK_SIM=%s", prefix);
	d = opendir("/proc");
	if (d) {
		struct dirent *e;
		while ((e = readdir(d))) {
			char *end;
			long pid = strtol(e->d_name, &end, 10);
			if (*end || pid <= 0 || pid == getpid())
				continue;
			char ep[64], buf[16384];
			snprintf(ep, sizeof ep, "/proc/%ld/environ", pid);
			int fd = open(ep, O_RDONLY | O_CLOEXEC);
			if (fd < 0)
				continue;
			ssize_t n = read(fd, buf, sizeof buf - 1);
			close(fd);
			if (n <= 0)
				continue;
			buf[n] = 0;
			for (ssize_t i = 0; i < n; i += (ssize_t)strlen(buf + i) + 1)
				if (strcmp(buf + i, needle) == 0 && pid_running(pid) &&
				    o < sizeof what - 64) {
					o += (size_t)snprintf(what + o, sizeof what - o, "pid %ld; ", pid);
					break;
				}
		}
		closedir(d);
	}
	return what;
}

bool sh_wait_clean(const char *prefix, const char *root, int timeout_ms)
{
	for (int t = 0;; t += 20) {
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
		if (!sh_leftovers(prefix, root)[0])
			return true;
		if (t >= timeout_ms)
			return false;
		sh_sleep_ms(20);
	}
}

const char *sh_bin(const char *name)
{
	static char buf[4][512];
	static int i;
	const char *b = getenv("SPARK_BUILD_DIR");
	if (!b)
		return NULL;
	const char *sub = strcmp(name, "sparkd") == 0 ? "agent" : "cli";
	char *out = buf[i++ % 4];
	snprintf(out, 512, "%s/%s/%s", b, sub, name);
	return access(out, X_OK) == 0 ? out : NULL;
}

int sh_exec(struct sh_sim *s, int k, char *const argv[], char **out)
{
	int p[2];
	if (out)
		*out = NULL;
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		dup2(p[1], 1);
		dup2(p[1], 2);
		char err[512];
		sim_exec(s->prefix, sh_ns(s, k), argv, err, sizeof err);
		fprintf(stderr, "%s\n", err);
		_exit(127);
	}
	close(p[1]);
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	for (;;) {
		if (len + 1024 > cap)
			buf = realloc(buf, cap *= 2);
		ssize_t n = read(p[0], buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(p[0]);
	buf[len] = 0;
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (out)
		*out = buf;
	else
		free(buf);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int sh_sh(struct sh_sim *s, int k, const char *cmd, char **out)
{
	char *argv[] = {"/bin/sh", "-c", (char *)cmd, NULL};
	return sh_exec(s, k, argv, out);
}

/* sparkctl, the arguments of ap up to NULL, then extra (NULL-terminated). */
static int ctl_va(struct sh_sim *s, int k, char **out, va_list ap, const char *const *extra)
{
	const char *argv[48] = {sh_bin("sparkctl")};
	int n = 1;
	const char *a;
	while ((a = va_arg(ap, const char *)) && n < 41)
		argv[n++] = a;
	for (; extra && *extra; extra++)
		argv[n++] = *extra;
	argv[n] = NULL;
	return sh_exec(s, k, (char *const *)argv, out);
}

int sh_ctl(struct sh_sim *s, int k, char **out, ...)
{
	va_list ap;
	va_start(ap, out);
	int rc = ctl_va(s, k, out, ap, NULL);
	va_end(ap);
	return rc;
}

json_t *sh_ctl_json(struct sh_sim *s, int k, ...)
{
	static const char *const json_out[] = {"-o", "json", NULL};
	char *out = NULL;
	va_list ap;
	va_start(ap, k);
	int rc = ctl_va(s, k, &out, ap, json_out);
	va_end(ap);
	json_t *j = rc == 0 ? json_loads(out, 0, NULL) : NULL;
	if (!j) {
		char args[512] = "";
		size_t o = 0;
		va_start(ap, k);
		for (const char *a; (a = va_arg(ap, const char *)) && o < sizeof args;)
			o += (size_t)snprintf(args + o, sizeof args - o, " %s", a);
		va_end(ap);
		cr_log_info("sparkctl%s in node %d: rc=%d: %s", args, k, rc, out);
	}
	free(out);
	return j;
}

void sh_agents_up(struct sh_sim *s, const char *tag, int nodes, enum sim_topo topo)
{
	sh_require_root();
	const char *sparkd = sh_bin("sparkd");
	if (!sparkd || !sh_bin("sparkctl"))
		cr_skip_test("sparkd or sparkctl is not built");
	struct sim_opts o = {.nodes = nodes, .topo = topo, .port = -1, .sparkd = sparkd};
	cr_assert_eq(sh_up(s, tag, &o), 0, "sim up: %s", s->err);
}

void sh_cluster_up(struct sh_sim *s, const char *tag, int nodes, enum sim_topo topo,
		   const char *name)
{
	sh_agents_up(s, tag, nodes, topo);
	json_t *init = sh_ctl_json(s, 1, "init", "--name", name, NULL);
	cr_assert(init, "init failed");
	char token[256];
	snprintf(token, sizeof token, "%s", json_string_value(json_object_get(init, "token")));
	json_decref(init);
	for (int k = 2; k <= nodes; k++) {
		char *out = NULL;
		int rc = sh_ctl(s, k, &out, "join", "169.254.100.1:7300", "--token", token, NULL);
		cr_assert_eq(rc, 0, "join of node %d: %s", k, out);
		free(out);
	}
}

void sh_wait_reports(struct sh_sim *s, int nodes, bool ready)
{
	for (int tries = 0; tries < 200; tries++) {
		json_t *st = sh_ctl_json(s, 1, "status", NULL);
		int have = 0;
		size_t i;
		json_t *n;
		json_array_foreach(json_object_get(st, "nodes"), i, n)
			have += json_is_object(json_object_get(n, "fabric")) &&
				(!ready ||
				 strcmp(json_string_value(json_object_get(n, "state")) ?: "", "ready") == 0);
		json_decref(st);
		if (have == nodes)
			return;
		sh_sleep_ms(50);
	}
	if (ready)
		cr_assert_fail("the head did not get every node ready with a fabric report");
	cr_assert_fail("the head did not get a fabric report of all %d nodes", nodes);
}

void sh_switch_rails(struct sh_sim *s)
{
	char spec[2][64];
	snprintf(spec[0], sizeof spec[0], "%s:1", sh_ns(s, 3));
	snprintf(spec[1], sizeof spec[1], "%s:0", sh_ns(s, 3));
	const char *argv[] = {sh_bin("sparkctl"), "sim", "fault", "swap", spec[0], spec[1], NULL};
	pid_t pid = fork();
	if (pid == 0) {
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "sim fault swap");
	for (int k = 1; k <= 4; k++) {
		int p = k == 3 ? 0 : 1;
		char cmd[256];
		snprintf(cmd, sizeof cmd,
			 "ip addr add 169.254.20.%d/24 dev %s && ip addr add 169.254.21.%d/24 dev %s", k,
			 sh_twin_name[p][0], k, sh_twin_name[p][1]);
		cr_assert_eq(sh_sh(s, k, cmd, NULL), 0, "%s", cmd);
	}
	for (int tries = 0;; tries++) {
		int ok = 0;
		for (int k = 1; k <= 4; k++) {
			json_t *show = sh_ctl_json(s, 1, "node", "show", sh_ns(s, k), NULL);
			char *txt = json_dumps(show, 0);
			char want[32];
			snprintf(want, sizeof want, "169.254.21.%d/24", k);
			ok += txt && strstr(txt, want) != NULL;
			free(txt);
			json_decref(show);
		}
		if (ok == 4)
			return;
		cr_assert_lt(tries, 100, "the head did not get the fabric addresses");
		sh_sleep_ms(100);
	}
}

/* ---- raw frames ---- */

struct rawinfo {
	int fd;
	int ifindex;
	uint8_t mac[6];
	uint16_t ethertype;
};
static struct rawinfo raws[256];

static struct rawinfo *raw_of(int fd)
{
	for (size_t i = 0; i < sizeof raws / sizeof raws[0]; i++)
		if (raws[i].fd == fd)
			return &raws[i];
	return NULL;
}

int sh_raw_open(const char *ns, const char *ifname, uint16_t ethertype)
{
	int saved;
	int r = sim_enter_ns(ns, &saved);
	if (r < 0)
		return r;
	int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, htons(ethertype));
	int idx = fd >= 0 ? (int)if_nametoindex(ifname) : 0;
	struct ifreq ifr;
	memset(&ifr, 0, sizeof ifr);
	snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", ifname);
	if (fd >= 0 && (idx <= 0 || ioctl(fd, SIOCGIFHWADDR, &ifr) < 0)) {
		r = -ENODEV;
		close(fd);
		fd = -1;
	} else if (fd < 0) {
		r = -errno;
	}
	sim_leave_ns(saved);
	if (fd < 0)
		return r;
	struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_protocol = htons(ethertype),
				  .sll_ifindex = idx};
	if (bind(fd, (struct sockaddr *)&sll, sizeof sll) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	/* Drop anything queued before bind (frames of other netdevs). */
	char junk[2048];
	while (recv(fd, junk, sizeof junk, MSG_DONTWAIT) > 0)
		;
	/* A reused fd number means its old socket was closed: forget it. */
	struct rawinfo *ri = NULL;
	for (size_t i = 0; i < sizeof raws / sizeof raws[0]; i++)
		if (raws[i].fd == fd)
			raws[i].fd = 0;
	for (size_t i = 0; i < sizeof raws / sizeof raws[0] && !ri; i++)
		if (raws[i].fd <= 0)
			ri = &raws[i];
	if (!ri) {
		close(fd);
		return -EMFILE;
	}
	ri->fd = fd;
	ri->ifindex = idx;
	ri->ethertype = ethertype;
	memcpy(ri->mac, ifr.ifr_hwaddr.sa_data, 6);
	return fd;
}

int sh_raw_send_to(int fd, const uint8_t dst[6], const void *payload, size_t len)
{
	struct rawinfo *ri = raw_of(fd);
	if (!ri || len > 9000)
		return -EINVAL;
	uint8_t frame[9100];
	memcpy(frame, dst, 6);
	memcpy(frame + 6, ri->mac, 6);
	frame[12] = (uint8_t)(ri->ethertype >> 8);
	frame[13] = (uint8_t)(ri->ethertype & 0xff);
	memcpy(frame + 14, payload, len);
	size_t flen = 14 + len < 60 ? 60 : 14 + len;
	if (14 + len < 60)
		memset(frame + 14 + len, 0, 60 - 14 - len);
	struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_protocol = htons(ri->ethertype),
				  .sll_ifindex = ri->ifindex, .sll_halen = 6};
	memcpy(sll.sll_addr, dst, 6);
	ssize_t n = sendto(fd, frame, flen, 0, (struct sockaddr *)&sll, sizeof sll);
	return n < 0 ? -errno : 0;
}

int sh_raw_send(int fd, const void *payload, size_t len)
{
	static const uint8_t bcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	return sh_raw_send_to(fd, bcast, payload, len);
}

ssize_t sh_raw_recv(int fd, void *buf, size_t len, int timeout_ms)
{
	uint64_t deadline = sh_now_us() + (uint64_t)timeout_ms * 1000u;
	for (;;) {
		uint8_t frame[9100];
		struct sockaddr_ll from;
		socklen_t fl = sizeof from;
		ssize_t n = recvfrom(fd, frame, sizeof frame, MSG_DONTWAIT, (struct sockaddr *)&from,
				     &fl);
		if (n >= 14) {
			if (from.sll_pkttype == PACKET_OUTGOING || from.sll_pkttype == PACKET_OTHERHOST)
				continue;
			size_t pl = (size_t)n - 14 < len ? (size_t)n - 14 : len;
			memcpy(buf, frame + 14, pl);
			return (ssize_t)pl;
		}
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return -errno;
		if (n >= 0)
			continue;
		uint64_t now = sh_now_us();
		if (now >= deadline)
			return 0;
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int ms = (int)((deadline - now + 999) / 1000);
		poll(&pfd, 1, ms);
	}
}

const char *sh_ep_name(struct sh_sim *s, int e)
{
	static char buf[8][96];
	static int i;
	char *o = buf[i++ % 8];
	int k = e / 4 + 1, port = (e % 4) / 2, twin = e % 2;
	snprintf(o, 96, "%s-%d:%s", s->prefix, k, sh_twin_name[port][twin]);
	return o;
}

int sh_frame_map(struct sh_sim *s, bool heard[4 * SIM_MAX_NODES][4 * SIM_MAX_NODES])
{
	int ne = 4 * s->nodes;
	int fds[4 * SIM_MAX_NODES];
	bool up[4 * SIM_MAX_NODES];
	memset(heard, 0, sizeof(bool) * 4 * SIM_MAX_NODES * 4 * SIM_MAX_NODES);
	int r = 0;
	for (int e = 0; e < ne; e++) {
		int k = e / 4 + 1, port = (e % 4) / 2, twin = e % 2;
		struct sim_link_info li;
		up[e] = sim_link_query(sh_ns(s, k), sh_twin_name[port][twin], &li) == 0 && li.admin_up;
		fds[e] = sh_raw_open(sh_ns(s, k), sh_twin_name[port][twin], SH_ETHERTYPE);
		if (fds[e] < 0) {
			r = fds[e];
			for (int j = 0; j < e; j++)
				close(fds[j]);
			return r;
		}
	}
	uint32_t nonce = (uint32_t)sh_now_us() ^ ((uint32_t)getpid() << 16);
	for (int e = 0; e < ne; e++) {
		if (!up[e])
			continue;
		char msg[32];
		int l = snprintf(msg, sizeof msg, "SIMMAP %08x %03d", nonce, e);
		sh_raw_send(fds[e], msg, (size_t)l + 1);
	}
	/* Collect until 150 ms pass without a new frame (2 s at most). */
	uint64_t start = sh_now_us(), last = start;
	while (sh_now_us() - last < 150000 && sh_now_us() - start < 2000000) {
		struct pollfd pfd[4 * SIM_MAX_NODES];
		for (int e = 0; e < ne; e++)
			pfd[e] = (struct pollfd){.fd = fds[e], .events = POLLIN};
		if (poll(pfd, (nfds_t)ne, 50) <= 0)
			continue;
		for (int e = 0; e < ne; e++) {
			if (!(pfd[e].revents & POLLIN))
				continue;
			char buf[64];
			ssize_t got;
			while ((got = sh_raw_recv(fds[e], buf, sizeof buf - 1, 0)) > 0) {
				buf[got] = 0;
				unsigned nn;
				int from;
				if (sscanf(buf, "SIMMAP %8x %3d", &nn, &from) == 2 && nn == nonce &&
				    from >= 0 && from < ne) {
					heard[from][e] = true;
					last = sh_now_us();
				}
			}
		}
	}
	for (int e = 0; e < ne; e++)
		close(fds[e]);
	for (size_t i = 0; i < sizeof raws / sizeof raws[0]; i++)
		for (int e = 0; e < ne; e++)
			if (raws[i].fd == fds[e])
				raws[i].fd = 0;
	return 0;
}

/* Named network namespaces (the same files ip-netns(8) uses, so `ip netns`
 * lists them), and the processes living in them. */
#include "sim_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void ns_path(const char *name, char *out, size_t len)
{
	snprintf(out, len, "%s/%s", SIM_NETNS_DIR, name);
}

/* Like ip(8): /run/netns is a shared mount so namespaces mounted later show
 * up in the private mount namespaces of sim exec and the agents. */
static int netns_dir_prepare(void)
{
	if (mkdir(SIM_NETNS_DIR, 0755) < 0 && errno != EEXIST)
		return -errno;
	if (mount("", SIM_NETNS_DIR, "none", MS_SHARED | MS_REC, NULL) == 0)
		return 0;
	if (errno != EINVAL)
		return -errno;
	if (mount(SIM_NETNS_DIR, SIM_NETNS_DIR, "none", MS_BIND | MS_REC, NULL) < 0)
		return -errno;
	if (mount("", SIM_NETNS_DIR, "none", MS_SHARED | MS_REC, NULL) < 0)
		return -errno;
	return 0;
}

int simns_open(const char *name)
{
	char p[PATH_MAX];
	ns_path(name, p, sizeof p);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

bool simns_exists(const char *name)
{
	char p[PATH_MAX];
	ns_path(name, p, sizeof p);
	return access(p, F_OK) == 0;
}

int simns_create(const char *name)
{
	char p[PATH_MAX];
	int r = netns_dir_prepare();
	if (r < 0)
		return r;
	ns_path(name, p, sizeof p);
	int fd = open(p, O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	close(fd);
	int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (self < 0) {
		r = -errno;
		unlink(p);
		return r;
	}
	r = 0;
	if (unshare(CLONE_NEWNET) < 0) {
		r = -errno;
	} else {
		if (mount("/proc/thread-self/ns/net", p, "none", MS_BIND, NULL) < 0)
			r = -errno;
		if (setns(self, CLONE_NEWNET) < 0 && r == 0)
			r = -errno;
	}
	close(self);
	if (r < 0) {
		umount2(p, MNT_DETACH);
		unlink(p);
	}
	return r;
}

int simns_delete(const char *name)
{
	char p[PATH_MAX];
	ns_path(name, p, sizeof p);
	if (access(p, F_OK) < 0)
		return -ENOENT;
	umount2(p, MNT_DETACH);
	if (unlink(p) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

int sim_enter_ns(const char *ns, int *saved)
{
	int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (self < 0)
		return -errno;
	int fd = simns_open(ns);
	if (fd < 0) {
		close(self);
		return fd;
	}
	int r = setns(fd, CLONE_NEWNET) < 0 ? -errno : 0;
	close(fd);
	if (r < 0) {
		close(self);
		return r;
	}
	*saved = self;
	return 0;
}

int sim_leave_ns(int saved)
{
	int r = setns(saved, CLONE_NEWNET) < 0 ? -errno : 0;
	close(saved);
	return r;
}

int simns_enter_full(const char *name)
{
	int fd = simns_open(name);
	if (fd < 0)
		return fd;
	int r = setns(fd, CLONE_NEWNET);
	close(fd);
	if (r < 0)
		return -errno;
	if (unshare(CLONE_NEWNS) < 0)
		return -errno;
	/* Keep our mounts from leaking back to the host, then show this
	 * namespace's netdevs under /sys/class/net (as `ip netns exec` does). */
	if (mount("", "/", "none", MS_SLAVE | MS_REC, NULL) < 0)
		return -errno;
	umount2("/sys", MNT_DETACH);
	if (mount(name, "/sys", "sysfs", 0, NULL) < 0)
		return -errno;
	return 0;
}

bool sim_pid_alive(pid_t pid)
{
	if (pid <= 0)
		return false;
	char p[64], buf[512];
	snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(p, "re");
	if (!f)
		return false;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	char *rp = strrchr(buf, ')');
	if (!rp || rp[1] != ' ')
		return false;
	return rp[2] != 'Z' && rp[2] != 'X';
}

struct nsid {
	dev_t dev;
	ino_t ino;
};

static int collect(const struct nsid *ids, int nids, pid_t *pids, int max)
{
	DIR *d = opendir("/proc");
	if (!d)
		return 0;
	int n = 0;
	struct dirent *e;
	pid_t self = getpid();
	while ((e = readdir(d)) && n < max) {
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		if (*end || pid <= 0 || pid == self)
			continue;
		char p[64];
		struct stat st;
		snprintf(p, sizeof p, "/proc/%ld/ns/net", pid);
		if (stat(p, &st) < 0)
			continue;
		for (int i = 0; i < nids; i++)
			if (ids[i].dev == st.st_dev && ids[i].ino == st.st_ino) {
				pids[n++] = (pid_t)pid;
				break;
			}
	}
	closedir(d);
	return n;
}

static void reap(const pid_t *pids, int n)
{
	for (int i = 0; i < n; i++)
		while (waitpid(pids[i], NULL, WNOHANG) > 0)
			;
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

void simns_kill_all(const char *const *names, int grace_ms)
{
	struct nsid ids[SIM_MAX_NODES + 4];
	int nids = 0;
	for (int i = 0; names[i] && nids < (int)(sizeof ids / sizeof ids[0]); i++) {
		char p[PATH_MAX];
		struct stat st;
		ns_path(names[i], p, sizeof p);
		if (stat(p, &st) == 0 && st.st_ino != 0) {
			/* An unmounted placeholder is a plain empty file: skip it. */
			struct stat pst;
			if (stat(SIM_NETNS_DIR, &pst) == 0 && pst.st_dev == st.st_dev)
				continue;
			ids[nids].dev = st.st_dev;
			ids[nids].ino = st.st_ino;
			nids++;
		}
	}
	if (!nids)
		return;
	pid_t pids[1024];
	int n = collect(ids, nids, pids, 1024);
	if (!n)
		return;
	for (int i = 0; i < n; i++)
		kill(pids[i], SIGTERM);
	int waited = 0;
	for (;;) {
		reap(pids, n);
		n = collect(ids, nids, pids, 1024);
		if (!n)
			return;
		if (waited >= grace_ms)
			break;
		sleep_ms(20);
		waited += 20;
	}
	for (int i = 0; i < n; i++)
		kill(pids[i], SIGKILL);
	for (int t = 0; t < 100; t++) {
		reap(pids, n);
		n = collect(ids, nids, pids, 1024);
		if (!n)
			return;
		sleep_ms(20);
	}
}

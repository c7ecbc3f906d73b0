/* Integration: sparkctl provision against a real OpenSSH server, on the simulator.
 *
 * Per test: a sim (tests/integration/sim harness, unique prefix P) made with
 * `sim up --nodes 1 --bare 1`: P-1 is the head (the sim's sparkd, `init` done),
 * P-2 a bare node on the same management net (169.254.100.1 and .2, enP7s7)
 * with nothing running. In P-2 the test starts /usr/sbin/sshd (private config,
 * temporary host key, PidFile, AuthorizedKeysFile) through `sparkctl sim exec`,
 * in its own UTS namespace whose host name is P-2, as a real node's would be.
 * Provision runs on the head exactly as a user would: `sparkctl sim exec P-1 --
 * sparkctl provision 169.254.100.2 ...`; the target installs under --prefix in a
 * temp dir. Cleanup after every test, pass or fail: sim down (every process in
 * the sim's namespaces, the namespaces, the sim root) and the temp dir; the
 * harness's guard runs sim down if this process dies first. */
#include "sim_harness.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define HEAD_IP "169.254.100.1"
#define TARGET_IP "169.254.100.2"

struct env {
	struct sh_sim sim;
	char root[256];
	char head[48], target[48]; /* node (and namespace) names; target = its host name */
	char prefix[320], kh[320], key[320], hostkey[320], sshd_conf[320], sshd_pid[320];
	char head_sock[320];
	pid_t sshd;
};
static struct env E;

struct res {
	int rc;
	char *out, *err;
};

static long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static const char *bin(const char *name)
{
	static char b[2][512];
	static int slot;
	char *p = b[slot++ % 2];
	const char *bd = getenv("SPARK_BUILD_DIR");
	snprintf(p, 512, "%s/%s", bd ? bd : ".",
		 strcmp(name, "sparkd") == 0 ? "agent/sparkd" : "cli/sparkctl");
	return p;
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return strdup("");
	size_t cap = 4096, n = 0;
	char *b = malloc(cap);
	size_t r;
	while ((r = fread(b + n, 1, cap - n - 1, f)) > 0) {
		n += r;
		if (cap - n < 2) {
			cap *= 2;
			b = realloc(b, cap);
		}
	}
	b[n] = 0;
	fclose(f);
	return b;
}

/* Run a shell command, capturing stdout and stderr. */
static struct res sh(const char *fmt, ...)
{
	char cmd[4096], o[400], e[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof cmd, fmt, ap);
	va_end(ap);
	const char *dir = E.root[0] ? E.root : "/tmp";
	snprintf(o, sizeof o, "%s/.out.%d", dir, (int)getpid());
	snprintf(e, sizeof e, "%s/.err.%d", dir, (int)getpid());
	struct res r = {.rc = -1};
	fflush(NULL);
	pid_t p = fork();
	if (p == 0) {
		int fo = open(o, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int fe = open(e, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int fi = open("/dev/null", O_RDONLY);
		dup2(fi, 0);
		dup2(fo, 1);
		dup2(fe, 2);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	int st = 0;
	if (p > 0 && waitpid(p, &st, 0) == p)
		r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	r.out = slurp(o);
	r.err = slurp(e);
	unlink(o);
	unlink(e);
	return r;
}

static void rfree(struct res *r)
{
	free(r->out);
	free(r->err);
}

static int lines(const char *s)
{
	int n = 0;
	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* Pids whose network namespace is ns (at most max), by the namespace's inode. */
static int ns_pids(const char *ns, pid_t *pids, int max)
{
	char p[300];
	snprintf(p, sizeof p, "/run/netns/%s", ns);
	struct stat want;
	if (stat(p, &want) < 0)
		return 0;
	int n = 0;
	DIR *d = opendir("/proc");
	struct dirent *e;
	while (d && (e = readdir(d)) && n < max) {
		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		struct stat st;
		snprintf(p, sizeof p, "/proc/%s/ns/net", e->d_name);
		if (stat(p, &st) == 0 && st.st_ino == want.st_ino && st.st_dev == want.st_dev)
			pids[n++] = (pid_t)atoi(e->d_name);
	}
	if (d)
		closedir(d);
	return n;
}

static void cleanup(void)
{
	sh_down(&E.sim); /* every process in the sim's namespaces too: sshd, sparkd */
	if (E.sshd > 0)
		waitpid(E.sshd, NULL, 0);
	if (E.root[0] && !getenv("SPARK_KEEP_TEST_DIRS")) {
		struct res r = sh("rm -rf '%s'", E.root);
		rfree(&r);
	}
	memset(&E, 0, sizeof E);
}

/* Fork a child that dies with us and execs argv, output to log. */
static pid_t spawn(const char *log, char *const argv[])
{
	pid_t parent = getpid();
	fflush(NULL);
	pid_t p = fork();
	cr_assert(p >= 0);
	if (p == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		int fi = open("/dev/null", O_RDONLY);
		dup2(fi, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		setsid();
		execvp(argv[0], argv);
		_exit(127);
	}
	return p;
}

/* sshd in the bare node, with the node's name as its host name. */
static void start_sshd(void)
{
	char cmd[1024], log[400];
	snprintf(log, sizeof log, "%s/sshd.log", E.root);
	unlink(E.sshd_pid);
	snprintf(cmd, sizeof cmd, "hostname %s && exec /usr/sbin/sshd -D -f %s", E.target,
		 E.sshd_conf);
	char *argv[] = {(char *)bin("sparkctl"), "sim", "exec", E.target, "--", "unshare", "--uts",
			"sh", "-c", cmd, NULL};
	E.sshd = spawn(log, argv);
	long t0 = now_ms();
	while (access(E.sshd_pid, F_OK) != 0) {
		int st;
		cr_assert(waitpid(E.sshd, &st, WNOHANG) == 0, "sshd exited; see %s", log);
		cr_assert(now_ms() - t0 < 5000, "sshd did not start within 5 s");
		usleep(20000);
	}
}

/* Kill sshd and every session process: everything in the target's namespace. */
static void stop_sshd(void)
{
	pid_t pids[256];
	int n = ns_pids(E.target, pids, 256);
	for (int i = 0; i < n; i++)
		kill(pids[i], SIGKILL);
	if (E.sshd > 0)
		waitpid(E.sshd, NULL, 0);
	E.sshd = 0;
}

static void setup(void)
{
	sh_require_root();
	if (access("/usr/sbin/sshd", X_OK) != 0)
		cr_skip_test("no /usr/sbin/sshd (Debian's openssh-server)");
	memset(&E, 0, sizeof E);
	struct sim_opts o = {.nodes = 1, .bare = 1, .topo = SIM_PAIR, .port = -1,
			     .sparkd = bin("sparkd")};
	int rc = sh_up(&E.sim, "prov", &o);
	cr_assert_eq(rc, 0, "sim up --nodes 1 --bare 1: %s", E.sim.err);
	snprintf(E.head, sizeof E.head, "%s", sh_ns(&E.sim, 1));
	snprintf(E.target, sizeof E.target, "%s", sh_ns(&E.sim, 2));
	json_t *d = sh_describe(&E.sim);
	cr_assert(d);
	json_t *n1 = json_array_get(json_object_get(d, "nodes"), 0);
	snprintf(E.head_sock, sizeof E.head_sock, "%s",
		 json_string_value(json_object_get(n1, "socket")));
	json_decref(d);
	snprintf(E.root, sizeof E.root, "/tmp/sparkctl-prov-XXXXXX");
	cr_assert(mkdtemp(E.root), "mkdtemp");
	snprintf(E.prefix, sizeof E.prefix, "%s/target", E.root);
	snprintf(E.kh, sizeof E.kh, "%s/known_hosts", E.root);
	snprintf(E.key, sizeof E.key, "%s/client_key", E.root);
	snprintf(E.hostkey, sizeof E.hostkey, "%s/host_key", E.root);
	snprintf(E.sshd_conf, sizeof E.sshd_conf, "%s/sshd_config", E.root);
	snprintf(E.sshd_pid, sizeof E.sshd_pid, "%s/sshd.pid", E.root);
	mkdir(E.prefix, 0755);
	struct res r = sh("set -e; mkdir -p -m0755 /run/sshd\n"
			  "ssh-keygen -q -t ed25519 -N '' -C host -f %s\n"
			  "ssh-keygen -q -t ed25519 -N '' -C client -f %s\n"
			  "cp %s.pub %s/authorized_keys\n",
			  E.hostkey, E.key, E.key, E.root);
	cr_assert_eq(r.rc, 0, "key setup failed: %s", r.err);
	rfree(&r);
	FILE *f = fopen(E.sshd_conf, "w");
	cr_assert(f);
	fprintf(f,
		"ListenAddress " TARGET_IP "\nPort 22\nHostKey %s\nPidFile %s\n"
		"AuthorizedKeysFile %s/authorized_keys\nStrictModes no\nUsePAM no\n"
		"PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
		"PermitRootLogin prohibit-password\nSubsystem sftp internal-sftp\nLogLevel ERROR\n",
		E.hostkey, E.sshd_pid, E.root);
	fclose(f);
	start_sshd();
	/* a fresh cluster on the head */
	r = sh("%s sim exec %s -- %s init --name provtest", bin("sparkctl"), E.head,
	       bin("sparkctl"));
	cr_assert_eq(r.rc, 0, "init failed: %s", r.err);
	rfree(&r);
}

TestSuite(prov, .init = setup, .fini = cleanup, .timeout = 90);

/* sparkctl provision HOSTS, run on the head node as a user would. */
static struct res provision_as(const char *hosts, const char *identity, const char *extra)
{
	return sh("%s sim exec %s -- %s provision %s --user root --identity %s --known-hosts %s "
		  "--prefix %s %s",
		  bin("sparkctl"), E.head, bin("sparkctl"), hosts, identity, E.kh, E.prefix, extra);
}

static struct res provision(const char *extra)
{
	return provision_as(TARGET_IP, E.key, extra);
}

/* sparkctl ARGS talking to the head's sparkd (from outside the sim: a Unix socket). */
static struct res head_ctl(const char *args)
{
	return sh("%s --socket %s %s", bin("sparkctl"), E.head_sock, args);
}

static char *fingerprint(const char *pubkey)
{
	struct res r = sh("ssh-keygen -E sha256 -lf %s | cut -d' ' -f2", pubkey);
	cr_assert_eq(r.rc, 0);
	r.out[strcspn(r.out, "\n")] = 0;
	free(r.err);
	return r.out;
}

static void trust_host_key(void)
{
	struct res r = sh("printf '" TARGET_IP " %%s\\n' \"$(cut -d' ' -f1,2 %s.pub)\" > %s",
			  E.hostkey, E.kh);
	cr_assert_eq(r.rc, 0);
	rfree(&r);
}

/* Wait for node `name` to be `state` in the head's status. */
static bool wait_node(const char *name, const char *state, long timeout_ms)
{
	long t0 = now_ms();
	do {
		struct res r = head_ctl("status -o json");
		json_t *j = json_loads(r.out, 0, NULL);
		rfree(&r);
		size_t i;
		json_t *n;
		bool ok = false;
		json_array_foreach(json_object_get(j, "nodes"), i, n) {
			const char *nm = json_string_value(json_object_get(n, "name"));
			const char *st = json_string_value(json_object_get(n, "state"));
			if (nm && st && !strcmp(nm, name) && !strcmp(st, state))
				ok = true;
		}
		json_decref(j);
		if (ok)
			return true;
		usleep(100000);
	} while (now_ms() - t0 < timeout_ms);
	return false;
}

static int token_count(void)
{
	struct res r = head_ctl("token ls -o json");
	json_t *j = json_loads(r.out, 0, NULL);
	rfree(&r);
	int n = (int)json_array_size(json_object_get(j, "tokens"));
	json_decref(j);
	return n;
}

/* Content, mode and mtime of the files provision owns on the target. */
static char *managed_hash(void)
{
	struct res r = sh("cd %s && for f in usr/sbin/sparkd usr/bin/sparkctl "
			  "etc/sparkctl/sparkd.yaml etc/systemd/system/sparkd.service; do "
			  "stat -c '%%n %%a %%s %%Y' $f && sha256sum $f || exit 1; done | sha256sum",
			  E.prefix);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	free(r.err);
	return r.out;
}

static char *tree_hash(void)
{
	struct res r = sh("cd %s && find . -printf '%%p %%y %%m %%s %%T@\\n' | sort | sha256sum && "
			  "find . -type f -exec sha256sum {} + | sort | sha256sum",
			  E.prefix);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	free(r.err);
	return r.out;
}

/* A line "HOST  STEP  RESULT ..." printed by provision (pipes: plain lines). */
static bool step_line(const char *out, const char *step, const char *result)
{
	char want[128];
	snprintf(want, sizeof want, TARGET_IP "  %-8s %s", step, result);
	return strstr(out, want) != NULL;
}

Test(prov, prov_full_provision_ready)
{
	long t0 = now_ms();
	struct res r = provision("--accept-new-host-key");
	long t1 = now_ms();
	cr_assert_eq(r.rc, 0, "provision failed:\n%s\n%s", r.out, r.err);
	cr_expect(step_line(r.out, "check", "ok"), "%s", r.out);
	cr_expect(step_line(r.out, "upload", "changed"), "%s", r.out);
	cr_expect(step_line(r.out, "install", "changed"), "%s", r.out);
	cr_expect(step_line(r.out, "netplan", "skipped"), "%s", r.out);
	cr_expect(strstr(r.out, "not in a validated topology yet; after 'sparkctl topo validate', "
			  "run 'sparkctl topo addresses --netplan FILE' or provision again"),
		  "%s", r.out);
	cr_expect(step_line(r.out, "start", "changed"), "%s", r.out);
	cr_expect(step_line(r.out, "token", "changed"), "%s", r.out);
	cr_expect(step_line(r.out, "join", "changed"), "%s", r.out);
	cr_expect(strstr(r.out, "provisioned"), "%s", r.out);
	rfree(&r);
	cr_assert(wait_node(E.target, "ready", 15000), "node not ready on the head");
	cr_log_info("provision %ld ms, then ready after %ld ms", t1 - t0, now_ms() - t1);
	/* as a user sees it, on the head: the bare node is now a ready member */
	r = sh("%s sim exec %s -- %s status", bin("sparkctl"), E.head, bin("sparkctl"));
	cr_expect_eq(r.rc, 0, "%s", r.err);
	bool listed = false;
	char *save = NULL;
	for (char *l = strtok_r(r.out, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
		if (strstr(l, E.target) && strstr(l, "ready") && strstr(l, TARGET_IP))
			listed = true;
	cr_expect(listed, "status does not show %s ready at " TARGET_IP, E.target);
	rfree(&r);
	/* what landed on the target */
	char p[600];
	snprintf(p, sizeof p, "%s/usr/sbin/sparkd", E.prefix);
	cr_expect_eq(access(p, X_OK), 0);
	snprintf(p, sizeof p, "%s/usr/bin/sparkctl", E.prefix);
	cr_expect_eq(access(p, X_OK), 0);
	snprintf(p, sizeof p, "%s/etc/sparkctl/sparkd.yaml", E.prefix);
	char *conf = slurp(p);
	char want[96];
	snprintf(want, sizeof want, "name: %s\n", E.target);
	cr_expect(strstr(conf, want), "%s", conf);
	cr_expect(strstr(conf, "listen: 0.0.0.0:7300\n"), "%s", conf);
	free(conf);
	snprintf(p, sizeof p, "%s/etc/systemd/system/sparkd.service", E.prefix);
	char *unit = slurp(p);
	cr_expect(strstr(unit, E.prefix), "unit without prefixed paths: %s", unit);
	free(unit);
	/* single-use token, consumed */
	r = head_ctl("token ls -o json");
	cr_expect(strstr(r.out, "provision " TARGET_IP), "%s", r.out);
	rfree(&r);
	/* the client's private key never left this machine (sparkd's own node.key is made
	 * on the node) */
	r = sh("grep -rlF \"$(sed -n 2p %s)\" %s", E.key, E.prefix);
	cr_expect_eq(r.rc, 1, "the client key is on the target: %s %s", r.out, r.err);
	rfree(&r);
}

Test(prov, prov_unknown_host_key_refused)
{
	char pub[400];
	snprintf(pub, sizeof pub, "%s.pub", E.hostkey);
	char *fp = fingerprint(pub);
	struct res r = provision("");
	cr_assert_eq(r.rc, 1, "%s\n%s", r.out, r.err);
	cr_expect_eq(lines(r.err), 1, "want one line on stderr, got:\n%s", r.err);
	cr_expect(strstr(r.err, "unknown host key"), "%s", r.err);
	cr_expect(strstr(r.err, fp), "fingerprint %s missing: %s", fp, r.err);
	cr_expect(strstr(r.err, "--accept-new-host-key"), "%s", r.err);
	cr_expect_neq(access(E.kh, F_OK), 0, "known_hosts written without consent");
	rfree(&r);
	free(fp);
	r = sh("find %s -mindepth 1 | wc -l", E.prefix);
	cr_expect_eq(atoi(r.out), 0, "target changed");
	rfree(&r);
}

Test(prov, prov_changed_host_key_refused)
{
	char other[400], pub[400];
	snprintf(other, sizeof other, "%s/other_host_key", E.root);
	struct res r = sh("ssh-keygen -q -t ed25519 -N '' -f %s && printf '" TARGET_IP
			  " %%s\\n' \"$(cut -d' ' -f1,2 %s.pub)\" > %s",
			  other, other, E.kh);
	cr_assert_eq(r.rc, 0);
	rfree(&r);
	snprintf(pub, sizeof pub, "%s.pub", other);
	char *old_fp = fingerprint(pub);
	snprintf(pub, sizeof pub, "%s.pub", E.hostkey);
	char *new_fp = fingerprint(pub);
	char *kh_before = slurp(E.kh);
	r = provision("--accept-new-host-key"); /* never overrides a changed key */
	cr_assert_eq(r.rc, 1, "%s\n%s", r.out, r.err);
	cr_expect_eq(lines(r.err), 1, "want one line on stderr, got:\n%s", r.err);
	cr_expect(strstr(r.err, "CHANGED"), "%s", r.err);
	cr_expect(strstr(r.err, old_fp), "known fingerprint %s missing: %s", old_fp, r.err);
	cr_expect(strstr(r.err, new_fp), "offered fingerprint %s missing: %s", new_fp, r.err);
	char *kh_after = slurp(E.kh);
	cr_expect_str_eq(kh_before, kh_after, "known_hosts changed");
	free(kh_before);
	free(kh_after);
	free(old_fp);
	free(new_fp);
	rfree(&r);
}

Test(prov, prov_wrong_client_key_refused)
{
	char wrong[400];
	snprintf(wrong, sizeof wrong, "%s/wrong_key", E.root);
	struct res r = sh("ssh-keygen -q -t ed25519 -N '' -f %s", wrong);
	cr_assert_eq(r.rc, 0);
	rfree(&r);
	trust_host_key();
	r = provision_as(TARGET_IP, wrong, "");
	cr_assert_eq(r.rc, 1, "%s\n%s", r.out, r.err);
	cr_expect_eq(lines(r.err), 1, "want one line on stderr, got:\n%s", r.err);
	cr_expect(strstr(r.err, "refused authentication"), "%s", r.err);
	cr_expect(strstr(r.err, wrong), "%s", r.err);
	rfree(&r);
}

Test(prov, prov_sshd_killed_during_upload)
{
	trust_host_key();
	/* slow the head -> target direction so the upload takes about a second */
	struct res r = sh("tc -n %s qdisc add dev enP7s7 root tbf rate 3mbit burst 32kb latency 500ms",
			  E.head);
	bool shaped = r.rc == 0;
	rfree(&r);
	char out[400], err[400], cmd[2048], stage[600], dest[600];
	snprintf(out, sizeof out, "%s/run1.out", E.root);
	snprintf(err, sizeof err, "%s/run1.err", E.root);
	snprintf(stage, sizeof stage, "%s/usr/sbin/sparkd.sparkctl-new", E.prefix);
	snprintf(dest, sizeof dest, "%s/usr/sbin/sparkd", E.prefix);
	snprintf(cmd, sizeof cmd,
		 "exec %s sim exec %s -- %s provision " TARGET_IP " --user root "
		 "--identity %s --known-hosts %s --prefix %s >%s 2>%s",
		 bin("sparkctl"), E.head, bin("sparkctl"), E.key, E.kh, E.prefix, out, err);
	pid_t p = fork();
	cr_assert(p >= 0);
	if (p == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	/* wait until part of sparkd is on the target, then kill sshd and its sessions */
	long t0 = now_ms();
	struct stat sb;
	while (!(stat(stage, &sb) == 0 && sb.st_size >= 32 * 1024)) {
		cr_assert(now_ms() - t0 < 20000, "the upload never started");
		cr_assert_eq(waitpid(p, NULL, WNOHANG), 0, "provision ended before the upload: %s",
			     slurp(err));
		usleep(2000);
	}
	stop_sshd();
	int st = 0;
	t0 = now_ms();
	while (waitpid(p, &st, WNOHANG) == 0) {
		cr_assert(now_ms() - t0 < 30000, "provision hangs after sshd died");
		usleep(20000);
	}
	char *o = slurp(out), *e = slurp(err);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d\n%s\n%s", st, o, e);
	cr_expect_eq(lines(e), 1, "want one line on stderr, got:\n%s", e);
	cr_expect(strstr(e, "upload"), "%s", e);
	cr_expect(step_line(o, "upload", "failed"), "%s", o);
	/* nothing half-written in place: the binary is absent, not truncated */
	cr_expect_neq(access(dest, F_OK), 0, "a partial %s was installed", dest);
	cr_log_info("upload shaped by tbf: %s", shaped ? "yes" : "no");
	free(o);
	free(e);
	/* sshd back, full speed: a rerun completes */
	r = sh("tc -n %s qdisc del dev enP7s7 root 2>/dev/null; true", E.head);
	rfree(&r);
	start_sshd();
	r = provision("");
	cr_assert_eq(r.rc, 0, "rerun failed:\n%s\n%s", r.out, r.err);
	cr_expect(step_line(r.out, "upload", "changed"), "%s", r.out);
	rfree(&r);
	cr_assert(wait_node(E.target, "ready", 15000), "node not ready after the rerun");
	cr_expect_neq(access(stage, F_OK), 0, "staging file left behind after a good run");
}

Test(prov, prov_dry_run_changes_nothing)
{
	trust_host_key();
	char *before = tree_hash();
	char *kh_before = slurp(E.kh);
	int tokens = token_count();
	struct res r = provision("--dry-run");
	cr_assert_eq(r.rc, 0, "%s\n%s", r.out, r.err);
	cr_expect(strstr(r.out, "Dry run"), "%s", r.out);
	cr_expect(step_line(r.out, "check", "ok"), "%s", r.out);
	cr_expect(step_line(r.out, "upload", "would change"), "%s", r.out);
	cr_expect(step_line(r.out, "install", "would change"), "%s", r.out);
	cr_expect(step_line(r.out, "start", "would change"), "%s", r.out);
	cr_expect(step_line(r.out, "token", "would change"), "%s", r.out);
	cr_expect(step_line(r.out, "join", "would change"), "%s", r.out);
	rfree(&r);
	char *after = tree_hash();
	cr_expect_str_eq(before, after, "the prefix tree changed in a dry run");
	cr_expect_eq(token_count(), tokens, "a dry run minted a token");
	char *kh_after = slurp(E.kh);
	cr_expect_str_eq(kh_before, kh_after);
	free(before);
	free(after);
	free(kh_before);
	free(kh_after);
}

Test(prov, prov_second_run_unchanged)
{
	struct res r = provision("--accept-new-host-key");
	cr_assert_eq(r.rc, 0, "first run failed:\n%s\n%s", r.out, r.err);
	rfree(&r);
	cr_assert(wait_node(E.target, "ready", 15000));
	char pidf[600];
	snprintf(pidf, sizeof pidf, "%s/run/sparkctl/sparkd.pid", E.prefix);
	char *pid1 = slurp(pidf);
	char *files1 = managed_hash();
	int tokens = token_count();
	r = provision("-o json");
	cr_assert_eq(r.rc, 0, "second run failed:\n%s\n%s", r.out, r.err);
	json_t *j = json_loads(r.out, 0, NULL);
	cr_assert(j, "not JSON: %s", r.out);
	json_t *h = json_array_get(json_object_get(j, "hosts"), 0);
	cr_expect_str_eq(json_string_value(json_object_get(h, "result")), "unchanged");
	cr_expect_eq(json_integer_value(json_object_get(h, "steps_done")), 7);
	size_t i;
	json_t *s;
	json_array_foreach(json_object_get(h, "steps"), i, s) {
		const char *step = json_string_value(json_object_get(s, "step"));
		const char *res = json_string_value(json_object_get(s, "result"));
		const char *want = !strcmp(step, "check")     ? "ok"
				   : !strcmp(step, "netplan") ? "skipped"
							      : "unchanged";
		cr_expect_str_eq(res, want, "step %s: %s (%s)", step, res,
				 json_string_value(json_object_get(s, "detail")));
	}
	json_decref(j);
	rfree(&r);
	char *pid2 = slurp(pidf);
	cr_expect_str_eq(pid1, pid2, "sparkd was restarted");
	/* sparkd's state and log move on by themselves; the files provision owns must not */
	char *files2 = managed_hash();
	cr_expect_str_eq(files1, files2, "the second run touched installed files");
	cr_expect_eq(token_count(), tokens, "a second run minted a token");
	free(pid1);
	free(pid2);
	free(files1);
	free(files2);
	/* and a table run says so, step by step */
	r = provision("");
	cr_assert_eq(r.rc, 0, "%s", r.err);
	cr_expect(step_line(r.out, "upload", "unchanged"), "%s", r.out);
	cr_expect(step_line(r.out, "install", "unchanged"), "%s", r.out);
	cr_expect(step_line(r.out, "start", "unchanged"), "%s", r.out);
	cr_expect(step_line(r.out, "token", "unchanged"), "%s", r.out);
	cr_expect(step_line(r.out, "join", "unchanged"), "%s", r.out);
	rfree(&r);
}

Test(prov, prov_failed_host_does_not_stop_others)
{
	/* the second host is a closed port on the head's own address: refused at once */
	struct res r = provision_as(TARGET_IP " " HEAD_IP ":2", E.key,
				    "--parallel 2 --accept-new-host-key -o json");
	cr_assert_eq(r.rc, 1, "%s\n%s", r.out, r.err);
	cr_expect_eq(lines(r.err), 1, "one line per failed host, got:\n%s", r.err);
	cr_expect(strstr(r.err, HEAD_IP ":2"), "%s", r.err);
	json_t *j = json_loads(r.out, 0, NULL);
	cr_assert(j, "not JSON: %s", r.out);
	json_t *hosts = json_object_get(j, "hosts");
	cr_assert_eq(json_array_size(hosts), 2);
	cr_expect_str_eq(json_string_value(json_object_get(json_array_get(hosts, 0), "result")),
			 "provisioned");
	cr_expect_str_eq(json_string_value(json_object_get(json_array_get(hosts, 1), "result")),
			 "failed");
	cr_expect_eq(json_integer_value(json_object_get(j, "failed")), 1);
	json_decref(j);
	rfree(&r);
	cr_expect(wait_node(E.target, "ready", 15000), "the good host is not ready");
}

Test(prov, prov_failed_join_is_undone)
{
	/* a second cluster's head: the token (from the first) is refused at once.
	 * On 7310: 7301 is the first head's model data port (agent port + 1). */
	char sock2[400], state2[400], log2[400];
	snprintf(sock2, sizeof sock2, "%s/head2.sock", E.root);
	snprintf(state2, sizeof state2, "%s/head2", E.root);
	snprintf(log2, sizeof log2, "%s/head2.log", E.root);
	char *argv[] = {(char *)bin("sparkctl"), "sim", "exec", E.head, "--", (char *)bin("sparkd"),
			"--state-dir", state2, "--socket", sock2, "--listen", HEAD_IP ":7310",
			"--name", "other", "--config", "/dev/null", NULL};
	spawn(log2, argv); /* in the head's namespace: sim down ends it */
	struct res r;
	long t0 = now_ms();
	do {
		usleep(50000);
		r = sh("%s --socket %s init --name other", bin("sparkctl"), sock2);
		if (r.rc == 0)
			break;
		rfree(&r);
		cr_assert(now_ms() - t0 < 5000, "second head did not start");
	} while (1);
	rfree(&r);
	/* a config from before, which the undo must give back */
	char conf[600];
	snprintf(conf, sizeof conf, "%s/etc/sparkctl", E.prefix);
	r = sh("mkdir -p %s && echo '# from before' > %s/sparkd.yaml", conf, conf);
	rfree(&r);
	strcat(conf, "/sparkd.yaml");
	trust_host_key();
	r = provision("--head " HEAD_IP ":7310");
	cr_assert_eq(r.rc, 1, "%s\n%s", r.out, r.err);
	cr_expect(step_line(r.out, "join", "failed"), "%s", r.out);
	cr_expect(strstr(r.err, "did not present the CA"), "%s", r.err);
	cr_expect_eq(lines(r.err), 1, "%s", r.err);
	const char *undone[] = {"token", "start", "install", "upload"};
	for (size_t i = 0; i < sizeof undone / sizeof undone[0]; i++)
		cr_expect(step_line(r.out, undone[i], "undone"), "%s not undone:\n%s", undone[i], r.out);
	rfree(&r);
	/* back to before: no binaries, no unit, the old config, no sparkd, token revoked */
	char p[600];
	snprintf(p, sizeof p, "%s/usr/sbin/sparkd", E.prefix);
	cr_expect_neq(access(p, F_OK), 0, "sparkd left installed");
	snprintf(p, sizeof p, "%s/usr/bin/sparkctl", E.prefix);
	cr_expect_neq(access(p, F_OK), 0, "sparkctl left installed");
	snprintf(p, sizeof p, "%s/etc/systemd/system/sparkd.service", E.prefix);
	cr_expect_neq(access(p, F_OK), 0, "unit left installed");
	char *c = slurp(conf);
	cr_expect_str_eq(c, "# from before\n", "config not restored");
	free(c);
	pid_t pids[256];
	int np = ns_pids(E.target, pids, 256), nsparkd = 0;
	for (int i = 0; i < np; i++) {
		char lk[64], exe[512];
		snprintf(lk, sizeof lk, "/proc/%d/exe", (int)pids[i]);
		ssize_t n = readlink(lk, exe, sizeof exe - 1);
		exe[n > 0 ? n : 0] = 0;
		nsparkd += strstr(exe, "sparkd") != NULL;
	}
	cr_expect_eq(nsparkd, 0, "sparkd still runs on the target");
	r = head_ctl("token ls -o json");
	cr_expect(strstr(r.out, "\"revoked\""), "token not revoked: %s", r.out);
	rfree(&r);
	r = sh("find %s -name '*.sparkctl-*'", E.prefix);
	cr_expect_str_eq(r.out, "", "leftovers: %s", r.out);
	rfree(&r);
}

/* Restart the provisioned sparkd of the target with the sim's fabric section in
 * its config (veths have no PCI function: the sim tells discovery which netdevs
 * are the fabric), as provision's start step does without systemd. */
static void restart_target_with_fabric(void)
{
	struct res r = sh("set -e; cd %s\n"
			  "printf 'fabric:\\n  ports:\\n    \"0\": [enp1s0f0np0, enP2p1s0f0np0]\\n"
			  "    \"1\": [enp1s0f1np1, enP2p1s0f1np1]\\n  pool: 169.254.128.0/17\\n' "
			  ">> etc/sparkctl/sparkd.yaml\n"
			  "pid=$(cat run/sparkctl/sparkd.pid); kill $pid; i=0\n"
			  "while kill -0 $pid 2>/dev/null && [ $i -lt 100 ]; do sleep 0.05; "
			  "i=$((i+1)); done\n"
			  "%s sim exec %s -- sh -c 'cd / && setsid nohup sh -c \"echo \\$\\$ > %s/"
			  "run/sparkctl/sparkd.pid; exec %s/usr/sbin/sparkd --config "
			  "%s/etc/sparkctl/sparkd.yaml\" >>%s/var/log/sparkd.log 2>&1 </dev/null &'\n",
			  E.prefix, bin("sparkctl"), E.target, E.prefix, E.prefix, E.prefix,
			  E.prefix);
	cr_assert_eq(r.rc, 0, "restart failed: %s %s", r.out, r.err);
	rfree(&r);
}

Test(prov, prov_reprovision_in_validated_topology_gets_netplan)
{
	struct res r = provision("--accept-new-host-key");
	cr_assert_eq(r.rc, 0, "first run failed:\n%s\n%s", r.out, r.err);
	cr_expect(step_line(r.out, "netplan", "skipped"), "%s", r.out);
	rfree(&r);
	cr_assert(wait_node(E.target, "ready", 15000));
	/* the node's sparkd learns its fabric, then the head validates the pair */
	restart_target_with_fabric();
	bool validated = false;
	long t0 = now_ms();
	char *last = NULL;
	while (!validated && now_ms() - t0 < 40000) {
		usleep(500000);
		r = head_ctl("topo validate --quick -o json");
		json_t *v = json_loads(r.out, 0, NULL);
		const char *cls = json_string_value(json_object_get(v, "class"));
		const char *res = json_string_value(json_object_get(v, "result"));
		validated = cls && res && !strcmp(cls, "pair") && strcmp(res, "fail") != 0;
		json_decref(v);
		free(last);
		last = r.out;
		free(r.err);
	}
	cr_assert(validated, "the head did not validate the pair:\n%s", last);
	free(last);
	/* the node is in the latest validated topology: provision writes its netplan */
	r = provision("");
	cr_assert_eq(r.rc, 0, "re-provision failed:\n%s\n%s", r.out, r.err);
	cr_expect(step_line(r.out, "netplan", "changed"), "%s", r.out);
	cr_expect(strstr(r.out, "/etc/netplan/40-sparkctl.yaml"), "%s", r.out);
	cr_expect(step_line(r.out, "token", "unchanged"), "%s", r.out);
	cr_expect(step_line(r.out, "join", "unchanged"), "%s", r.out);
	rfree(&r);
	char p[600];
	snprintf(p, sizeof p, "%s/etc/netplan/40-sparkctl.yaml", E.prefix);
	struct stat st;
	cr_assert_eq(stat(p, &st), 0, "no %s", p);
	cr_expect_eq(st.st_mode & 07777, 0600, "mode %o", st.st_mode & 07777);
	char *y = slurp(p);
	/* a sim pair is one cable, on port 0: both of its twin netdevs */
	cr_expect(strstr(y, "enp1s0f0np0:") && strstr(y, "enP2p1s0f0np0:"),
		  "the netplan misses fabric netdevs:\n%s", y);
	cr_expect(strstr(y, "169.254."), "no fabric address:\n%s", y);
	free(y);
	/* and again: the file is up to date */
	r = provision("");
	cr_assert_eq(r.rc, 0, "third run failed:\n%s\n%s", r.out, r.err);
	cr_expect(step_line(r.out, "netplan", "unchanged"), "%s", r.out);
	rfree(&r);
}

/* ---- --package DIR: the package of the target's architecture -------------------------- */

/* A sparkctl package in DIR named NAME whose control says ARCH, holding this build's
 * sparkd and sparkctl with MARK appended (an ELF runs with trailing bytes), so the files
 * on the target show which package they came from. */
static void make_deb(const char *dir, const char *name, const char *arch, const char *mark)
{
	struct res r = sh("set -e; t=%s/debtree-%s; rm -rf $t; mkdir -p $t/DEBIAN $t/usr/sbin "
			  "$t/usr/bin %s\n"
			  "cp %s $t/usr/sbin/sparkd; cp %s $t/usr/bin/sparkctl\n"
			  "printf '%s' >> $t/usr/sbin/sparkd; printf '%s' >> $t/usr/bin/sparkctl\n"
			  "printf 'Package: sparkctl\\nVersion: 0.1.0~test\\nArchitecture: %s\\n"
			  "Maintainer: test <test@example.org>\\nDescription: test package\\n' > "
			  "$t/DEBIAN/control\n"
			  "dpkg-deb -b --root-owner-group $t %s/%s >/dev/null; rm -rf $t",
			  E.root, arch, dir, bin("sparkd"), bin("sparkctl"), mark, mark, arch, dir, name);
	cr_assert_eq(r.rc, 0, "dpkg-deb -b: %s", r.err);
	rfree(&r);
}

static bool file_has(const char *path, const char *s)
{
	struct res r = sh("grep -qaF '%s' %s", s, path);
	bool ok = r.rc == 0;
	rfree(&r);
	return ok;
}

Test(prov, prov_package_of_the_target_arch)
{
	if (access("/usr/bin/dpkg-deb", X_OK) != 0)
		cr_skip_test("no dpkg-deb");
	char dir[400], opt[500], p[700];
	snprintf(dir, sizeof dir, "%s/pkgs", E.root);
	make_deb(dir, "sparkctl_0.1.0~test_amd64.deb", "amd64", "pkg-amd64-marker");
	make_deb(dir, "sparkctl_0.1.0~test_arm64.deb", "arm64", "pkg-arm64-marker");
	snprintf(opt, sizeof opt, "--accept-new-host-key --package %s", dir);
	struct res r = provision(opt);
	cr_assert_eq(r.rc, 0, "provision --package failed:\n%s\n%s", r.out, r.err);
	cr_expect(strstr(r.out, "package sparkctl_0.1.0~test_amd64.deb (0.1.0~test amd64)"), "%s",
		  r.out);
	cr_expect(strstr(r.out, "sparkctl_0.1.0~test_amd64.deb (amd64, checked by dpkg-deb)"), "%s",
		  r.out);
	rfree(&r);
	cr_assert(wait_node(E.target, "ready", 15000), "node not ready on the head");
	/* the amd64 package's programs run there, never the arm64 one's */
	snprintf(p, sizeof p, "%s/usr/sbin/sparkd", E.prefix);
	cr_expect(file_has(p, "pkg-amd64-marker"), "sparkd is not the amd64 package's");
	cr_expect(!file_has(p, "pkg-arm64-marker"), "sparkd came from the arm64 package");
	snprintf(p, sizeof p, "%s/usr/bin/sparkctl", E.prefix);
	cr_expect(file_has(p, "pkg-amd64-marker"), "sparkctl is not the amd64 package's");
	r = sh("cmp %s/var/cache/sparkctl/packages/sparkctl_0.1.0~test_amd64.deb "
	       "%s/sparkctl_0.1.0~test_amd64.deb && ! ls %s/var/cache/sparkctl/packages | grep arm64",
	       E.prefix, dir, E.prefix);
	cr_expect_eq(r.rc, 0, "the target does not hold exactly the amd64 package: %s %s", r.out,
		     r.err);
	rfree(&r);
	/* a second run changes nothing */
	r = provision(opt + strlen("--accept-new-host-key "));
	cr_expect_eq(r.rc, 0, "%s", r.err);
	cr_expect(step_line(r.out, "upload", "unchanged"), "%s", r.out);
	cr_expect(step_line(r.out, "start", "unchanged"), "%s", r.out);
	rfree(&r);
}

Test(prov, prov_package_other_arch_only_falls_back_to_same_arch_binaries)
{
	if (access("/usr/bin/dpkg-deb", X_OK) != 0)
		cr_skip_test("no dpkg-deb");
	char dir[400], opt[500], p[700];
	snprintf(dir, sizeof dir, "%s/pkgs", E.root);
	make_deb(dir, "sparkctl_0.1.0~test_arm64.deb", "arm64", "pkg-arm64-marker");
	snprintf(opt, sizeof opt, "--accept-new-host-key --package %s", dir);
	struct res r = provision(opt);
	cr_assert_eq(r.rc, 0, "provision failed:\n%s\n%s", r.out, r.err);
	cr_expect(strstr(r.out, "no amd64 package in"), "%s", r.out);
	rfree(&r);
	snprintf(p, sizeof p, "%s/usr/sbin/sparkd", E.prefix);
	r = sh("cmp %s %s", p, bin("sparkd"));
	cr_expect_eq(r.rc, 0, "the target's sparkd is not this machine's: %s", r.out);
	rfree(&r);
}

Test(prov, prov_package_architecture_field_decides)
{
	if (access("/usr/bin/dpkg-deb", X_OK) != 0)
		cr_skip_test("no dpkg-deb");
	char dir[400], opt[500];
	snprintf(dir, sizeof dir, "%s/pkgs", E.root);
	/* named for amd64, built for arm64 */
	make_deb(dir, "sparkctl_0.1.0~test_amd64.deb", "arm64", "pkg-arm64-marker");
	snprintf(opt, sizeof opt, "--accept-new-host-key --package %s", dir);
	struct res r = provision(opt);
	cr_expect_eq(r.rc, 1, "a mislabelled package was accepted:\n%s", r.out);
	cr_expect(strstr(r.out, "Architecture 'arm64'; expected sparkctl, amd64") ||
			  strstr(r.err, "Architecture 'arm64'; expected sparkctl, amd64"),
		  "%s\n%s", r.out, r.err);
	rfree(&r);
	char p[700];
	snprintf(p, sizeof p, "%s/usr/sbin/sparkd", E.prefix);
	cr_expect_neq(access(p, F_OK), 0, "files were installed from a refused package");
}

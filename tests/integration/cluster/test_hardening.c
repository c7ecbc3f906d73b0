/* Hardening (issue 14, items 4 and 5): the control socket is never taken over
 * nor removed when it is not sparkd's; the state dir and cluster.db are private
 * whatever the umask; bad input is a usage error (exit 2) caught before anything
 * is sent, and failed operations exit 1 with a message that says what to do.
 * Real sparkd daemons on loopback (harness.h). */
#include "harness.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static struct h_cluster *C;

static void setup(void)
{
	umask(022); /* the usual one: files are made 0644 and dirs 0755 unless sparkd says otherwise */
}

static void teardown(void)
{
	h_cluster_free(C);
	C = NULL;
}

TestSuite(hardening, .init = setup, .fini = teardown, .timeout = 90);

/* ---- helpers ---------------------------------------------------------------------- */

struct run {
	pid_t pid;
	char errpath[300];
};

/* Start `sparkd --state-dir DIR --socket SOCK --name N --listen 127.0.0.1:PORT
 * --config /dev/null [extra1 [extra2]]` for node i of C with the given socket
 * (without --listen and --config when extra1 is --config); stderr to a file. */
static struct run spawn_sparkd(int i, const char *sock, const char *extra1, const char *extra2)
{
	struct h_node *nd = &C->nodes[i];
	struct run rr = {0};
	snprintf(rr.errpath, sizeof rr.errpath, "%s/%s.spawn.err", C->root, nd->name);
	char listen[64];
	snprintf(listen, sizeof listen, "127.0.0.1:%d", nd->port);
	pid_t parent = getpid();
	rr.pid = fork();
	cr_assert(rr.pid >= 0);
	if (rr.pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		int fd = open(rr.errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd >= 0) {
			dup2(fd, 2);
			dup2(fd, 1);
			close(fd);
		}
		char *argv[20];
		int n = 0;
		argv[n++] = (char *)h_bin("sparkd");
		argv[n++] = "--state-dir";
		argv[n++] = nd->dir;
		argv[n++] = "--socket";
		argv[n++] = (char *)sock;
		argv[n++] = "--name";
		argv[n++] = nd->name;
		if (!extra1 || strcmp(extra1, "--config") != 0) { /* else the file's listen applies */
			argv[n++] = "--listen";
			argv[n++] = listen;
			argv[n++] = "--config";
			argv[n++] = "/dev/null";
		}
		if (extra1)
			argv[n++] = (char *)extra1;
		if (extra2)
			argv[n++] = (char *)extra2;
		argv[n] = NULL;
		execv(argv[0], argv);
		_exit(127);
	}
	return rr;
}

/* Wait up to ms for the process to exit: its exit code, or -1 when it is still
 * running (it is then killed: a daemon that should have refused to start). */
static int wait_exit(struct run *rr, long ms)
{
	long t0 = h_now_ms();
	int st;
	while (h_now_ms() - t0 < ms) {
		if (waitpid(rr->pid, &st, WNOHANG) == rr->pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		usleep(20000);
	}
	kill(rr->pid, SIGKILL);
	waitpid(rr->pid, NULL, 0);
	return -1;
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	static char buf[8192];
	size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
	buf[n] = '\0';
	if (f)
		fclose(f);
	return buf;
}

/* Run sparkd with these flags on node i (its own socket) and expect it to exit
 * with `rc` within 5 s, printing `what` on stderr. */
static void expect_sparkd_refuses(int i, const char *sock, const char *f1, const char *f2, int rc,
				  const char *what)
{
	struct run rr = spawn_sparkd(i, sock, f1, f2);
	int got = wait_exit(&rr, 5000);
	const char *err = slurp(rr.errpath);
	cr_expect_eq(got, rc, "sparkd %s %s: exit %d (want %d; -1 = still running): %s", f1 ? f1 : "",
		     f2 ? f2 : "", got, rc, err);
	cr_expect(strstr(err, what), "sparkd %s %s: stderr lacks \"%s\": %s", f1 ? f1 : "",
		  f2 ? f2 : "", what, err);
}

static int wait_answers(const char *path, long ms)
{
	long t0 = h_now_ms();
	while (h_now_ms() - t0 < ms) {
		if (h_sock_answers(path))
			return 1;
		usleep(20000);
	}
	return 0;
}

static mode_t mode_of(const char *path)
{
	struct stat st;
	cr_assert_eq(stat(path, &st), 0, "stat %s: %s", path, strerror(errno));
	return st.st_mode & 07777;
}

/* sparkctl --socket SOCK ARGS... (NULL-terminated) */
static struct h_result ctl_on(const char *sock, const char *a1, const char *a2, const char *a3,
			      const char *a4, const char *a5)
{
	char *argv[] = {(char *)h_bin("sparkctl"), "--socket", (char *)sock, (char *)a1, (char *)a2,
			(char *)a3, (char *)a4, (char *)a5, NULL};
	return h_run(argv);
}

/* ---- the control socket ---------------------------------------------------------- */

Test(hardening, socket_of_a_running_daemon_is_not_taken_over)
{
	C = h_cluster_new(2);
	cr_assert_eq(h_start(C, 0), 0);
	/* a second daemon (its own state dir) pointed at node 1's socket by mistake */
	expect_sparkd_refuses(1, C->nodes[0].sock, NULL, NULL, 1, "another daemon answers");
	struct stat st;
	cr_assert_eq(lstat(C->nodes[0].sock, &st), 0, "the running daemon's socket was removed");
	struct h_result r = h_ctl(C, 0, "version", "-o", "json", NULL);
	cr_expect_eq(r.rc, 0, "%s", r.err);
	cr_expect(strstr(r.out, "\"role\": \"none\""), "the first daemon no longer answers: %s",
		  r.out);
	h_result_free(&r);
}

Test(hardening, a_file_or_dir_at_the_socket_path_is_never_removed)
{
	C = h_cluster_new(1);
	char file[300], dir[300];
	snprintf(file, sizeof file, "%s/notes.txt", C->root);
	snprintf(dir, sizeof dir, "%s/adir", C->root);
	FILE *f = fopen(file, "w");
	cr_assert(f);
	fputs("precious\n", f);
	fclose(f);
	cr_assert_eq(mkdir(dir, 0755), 0);
	expect_sparkd_refuses(0, file, NULL, NULL, 1, "is a regular file, not a socket");
	cr_expect_str_eq(slurp(file), "precious\n", "the file given as --socket was changed");
	expect_sparkd_refuses(0, dir, NULL, NULL, 1, "is a directory, not a socket");
	struct stat st;
	cr_expect(stat(dir, &st) == 0 && S_ISDIR(st.st_mode), "the directory was removed");
	char link[300];
	snprintf(link, sizeof link, "%s/alink", C->root);
	cr_assert_eq(symlink(file, link), 0);
	expect_sparkd_refuses(0, link, NULL, NULL, 1, "is a symbolic link, not a socket");
	cr_expect(lstat(link, &st) == 0 && S_ISLNK(st.st_mode), "the symlink was removed");
}

Test(hardening, a_stale_socket_is_replaced)
{
	C = h_cluster_new(1);
	/* a socket file nobody listens on, as a crashed daemon leaves */
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", C->nodes[0].sock);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	close(fd);
	cr_assert(!h_sock_answers(C->nodes[0].sock));
	struct run rr = spawn_sparkd(0, C->nodes[0].sock, NULL, NULL);
	int up = wait_answers(C->nodes[0].sock, 5000);
	kill(rr.pid, SIGTERM);
	int rc = wait_exit(&rr, 5000);
	cr_expect(up, "sparkd did not replace the stale socket: %s", slurp(rr.errpath));
	cr_expect_eq(rc, 0, "exit %d after SIGTERM: %s", rc, slurp(rr.errpath));
	struct stat st;
	cr_expect_neq(lstat(C->nodes[0].sock, &st), 0, "its own socket is removed on exit");
}

Test(hardening, exit_removes_the_socket_only_if_it_is_still_ours)
{
	C = h_cluster_new(2);
	cr_assert_eq(h_start(C, 0), 0);
	/* node 0's socket file is moved aside; node 1 then starts on the same path */
	char aside[300];
	snprintf(aside, sizeof aside, "%s.aside", C->nodes[0].sock);
	cr_assert_eq(rename(C->nodes[0].sock, aside), 0);
	struct run rr = spawn_sparkd(1, C->nodes[0].sock, NULL, NULL);
	cr_assert(wait_answers(C->nodes[0].sock, 5000), "second daemon did not start: %s",
		  slurp(rr.errpath));
	h_kill(C, 0, SIGTERM); /* the first daemon exits cleanly */
	cr_expect(h_sock_answers(C->nodes[0].sock),
		  "the first daemon's exit removed the second daemon's socket");
	kill(rr.pid, SIGTERM);
	cr_expect_eq(wait_exit(&rr, 5000), 0);
}

/* ---- state dir and cluster.db ------------------------------------------------------- */

Test(hardening, state_dir_0700_and_cluster_db_0600_whatever_the_umask)
{
	C = h_cluster_new(1);
	cr_assert_eq(mkdir(C->nodes[0].dir, 0755), 0); /* made by hand, or by an older sparkd */
	umask(0); /* the worst case: sparkd must not rely on it */
	cr_assert_eq(h_start(C, 0), 0);
	umask(022);
	cr_expect_eq(mode_of(C->nodes[0].dir), 0700, "state dir is %04o", mode_of(C->nodes[0].dir));
	free(h_init(C));
	char p[400];
	static const char *const files[] = {"cluster.db", "cluster.db-wal", "cluster.db-shm"};
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		snprintf(p, sizeof p, "%s/%s", C->nodes[0].dir, files[i]);
		cr_expect_eq(mode_of(p), 0600, "%s is %04o", files[i], mode_of(p));
	}
	/* a cluster.db left 0644 (by an older sparkd) is made 0600 on the next start */
	h_kill(C, 0, SIGTERM);
	snprintf(p, sizeof p, "%s/cluster.db", C->nodes[0].dir);
	cr_assert_eq(chmod(p, 0644), 0);
	cr_assert_eq(h_start(C, 0), 0);
	/* the socket accepts (kernel backlog) before start-up is over: an answer
	 * from the loop means the head has opened cluster.db */
	struct h_result r = h_ctl(C, 0, "status", NULL);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	h_result_free(&r);
	cr_expect_eq(mode_of(p), 0600, "cluster.db is %04o after a restart", mode_of(p));
}

Test(hardening, state_dir_others_can_write_is_refused)
{
	C = h_cluster_new(1);
	cr_assert_eq(mkdir(C->nodes[0].dir, 0700), 0);
	cr_assert_eq(chmod(C->nodes[0].dir, 0777), 0);
	expect_sparkd_refuses(0, C->nodes[0].sock, NULL, NULL, 1, "chmod 700");
	cr_assert_eq(chmod(C->nodes[0].dir, 0770), 0);
	expect_sparkd_refuses(0, C->nodes[0].sock, NULL, NULL, 1, "may be written by its group");
	struct stat st;
	cr_expect_neq(lstat(C->nodes[0].sock, &st), 0, "a refused daemon made its socket");
}

Test(hardening, state_dir_of_another_user_is_refused)
{
	if (geteuid() != 0)
		cr_skip_test("needs root to chown the state dir");
	C = h_cluster_new(1);
	cr_assert_eq(mkdir(C->nodes[0].dir, 0700), 0);
	cr_assert_eq(chown(C->nodes[0].dir, 65534, 65534), 0);
	expect_sparkd_refuses(0, C->nodes[0].sock, NULL, NULL, 1, "chown 0");
}

/* ---- sparkd flags ----------------------------------------------------------------------- */

Test(hardening, sparkd_bad_listen_and_config_dir_are_usage_errors)
{
	C = h_cluster_new(1);
	const char *sock = C->nodes[0].sock;
	/* the flag comes after the harness's --listen, so it wins */
	expect_sparkd_refuses(0, sock, "--listen", "nonsense", 2, "not an IP address");
	expect_sparkd_refuses(0, sock, "--listen", "127.0.0.1:99999", 2, "above 65535");
	expect_sparkd_refuses(0, sock, "--listen", "127.0.0.1:", 2, "empty port");
	expect_sparkd_refuses(0, sock, "--listen", "evil host:1", 2, "spaces");
	expect_sparkd_refuses(0, sock, "--config", C->root, 2, "is a directory");
	char cfg[300];
	snprintf(cfg, sizeof cfg, "%s/bad.yaml", C->root);
	FILE *f = fopen(cfg, "w");
	cr_assert(f);
	fputs("listen: nonsense\n", f);
	fclose(f);
	expect_sparkd_refuses(0, sock, "--config", cfg, 2, "bad.yaml: listen: 'nonsense' is not an IP");
}

/* ---- sparkctl usage errors, caught before anything is sent ---------------------------- */

Test(hardening, join_bad_token_or_address_is_usage_error_before_sending)
{
	C = h_cluster_new(1);
	/* no daemon on this socket: a request sent would fail with exit 1 */
	char sock[300];
	snprintf(sock, sizeof sock, "%s/nobody.sock", C->root);
	static const char good[] = "spk1.0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
				   ".0123456789abcdef.0123456789abcdef0123456789abcdef";
	static const struct {
		const char *head, *token, *what;
	} cases[] = {
		{"127.0.0.1:7300", "spk1.nothex", "malformed token"},
		{"127.0.0.1:7300", "", "missing --token"},
		{"127.0.0.1:99999", good, "above 65535"},
		{"127.0.0.1:0", good, "1 to 65535"},
		{"evil host:1", good, "spaces"},
		{"head..lab", good, "empty label"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct h_result r = ctl_on(sock, "join", cases[i].head, "--token", cases[i].token, NULL);
		cr_expect_eq(r.rc, 2, "join %s --token %s: exit %d: %s", cases[i].head, cases[i].token,
			     r.rc, r.err);
		cr_expect(strstr(r.err, cases[i].what), "join %s: stderr lacks \"%s\": %s",
			  cases[i].head, cases[i].what, r.err);
		cr_expect(!strstr(r.err, "no sparkd"), "join %s was sent: %s", cases[i].head, r.err);
		h_result_free(&r);
	}
	/* the good ones get as far as the (absent) daemon: exit 1 */
	struct h_result r = ctl_on(sock, "join", "spark-01.lab:7300", "--token", good, NULL);
	cr_expect_eq(r.rc, 1, "%s", r.err);
	cr_expect(strstr(r.err, "no sparkd"), "%s", r.err);
	h_result_free(&r);
	r = ctl_on(sock, "init", "--advertise", "evil host:1", NULL, NULL);
	cr_expect_eq(r.rc, 2, "init --advertise 'evil host:1': exit %d: %s", r.rc, r.err);
	cr_expect(strstr(r.err, "--advertise") && strstr(r.err, "spaces"), "%s", r.err);
	h_result_free(&r);
	r = ctl_on(sock, "init", "--advertise", "[::1]:99999", NULL, NULL);
	cr_expect_eq(r.rc, 2, "%s", r.err);
	h_result_free(&r);
}

Test(hardening, token_ttl_is_bounded)
{
	C = h_cluster_new(1);
	char sock[300];
	snprintf(sock, sizeof sock, "%s/nobody.sock", C->root);
	static const char *const huge[] = {"99999999999", "3651d", "100000000000d99999999999s"};
	for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
		struct h_result r = ctl_on(sock, "token", "create", "--ttl", huge[i], NULL);
		cr_expect_eq(r.rc, 2, "token create --ttl %s: exit %d: %s", huge[i], r.rc, r.err);
		cr_expect(strstr(r.err, "maximum of 3650d"), "%s", r.err);
		h_result_free(&r);
		r = ctl_on(sock, "init", "--ttl", huge[i], NULL, NULL);
		cr_expect_eq(r.rc, 2, "init --ttl %s: exit %d: %s", huge[i], r.rc, r.err);
		h_result_free(&r);
	}
	/* the maximum itself is accepted and expires when it says */
	cr_assert_eq(h_start(C, 0), 0);
	free(h_init(C));
	struct h_result r = h_ctl(C, 0, "token", "create", "--ttl", "3650d", "-o", "json", NULL);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	json_t *j = h_json(&r);
	long long exp = (long long)json_integer_value(json_object_get(j, "expires_at"));
	long long now = (long long)time(NULL);
	cr_expect(exp >= now + 3650LL * 86400 - 60 && exp <= now + 3650LL * 86400 + 60,
		  "expires_at %lld, now %lld", exp, now);
	json_decref(j);
	h_result_free(&r);
}

/* ---- failed operations: exit 1 and what to do ----------------------------------------- */

Test(hardening, exec_on_unknown_node_exits_1_with_the_agents_message)
{
	C = h_cluster_new(1);
	cr_assert_eq(h_start(C, 0), 0);
	free(h_init(C));
	struct h_result r = h_ctl(C, 0, "exec", "nosuch", "--", "true", NULL);
	cr_expect_eq(r.rc, 1, "exec nosuch: exit %d: %s", r.rc, r.err);
	cr_expect(strstr(r.err, "nosuch"), "the message does not name the node: %s", r.err);
	h_result_free(&r);
	r = h_ctl(C, 0, "exec", "node-1", "--", "sh", "-c", "exit 7", NULL);
	cr_expect_eq(r.rc, 7, "the command's own exit code is passed on: %d %s", r.rc, r.err);
	h_result_free(&r);
}

Test(hardening, init_on_a_head_says_what_to_do_not_leave)
{
	C = h_cluster_new(1);
	cr_assert_eq(h_start(C, 0), 0);
	free(h_init(C));
	struct h_result r = h_ctl(C, 0, "init", NULL);
	cr_expect_eq(r.rc, 1, "%s", r.err);
	cr_expect(strstr(r.err, "already the head"), "%s", r.err);
	cr_expect(!strstr(r.err, "sparkctl leave"), "advises leave, which a head refuses: %s", r.err);
	cr_expect(strstr(r.err, "token create"), "%s", r.err);
	h_result_free(&r);
	r = h_ctl(C, 0, "leave", NULL); /* and indeed: */
	cr_expect_eq(r.rc, 1);
	h_result_free(&r);
}

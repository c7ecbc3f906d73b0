/* Cluster formation scenarios: real sparkd daemons on loopback. */
#include "harness.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static struct h_cluster *C;

static void teardown(void)
{
	h_cluster_free(C);
	C = NULL;
}

TestSuite(cluster, .fini = teardown, .timeout = 90);

static void start_all(int n)
{
	C = h_cluster_new(n);
	for (int i = 0; i < n; i++)
		cr_assert_eq(h_start(C, i), 0, "sparkd %d did not start", i);
}

static struct h_result join(int i, const char *token)
{
	return h_ctl(C, i, "join", h_addr(C, 0), "--token", token, "--timeout", "3s", NULL);
}

/* A head and one worker that joined it. */
static void start_pair(void)
{
	start_all(2);
	char *tok = h_init(C);
	struct h_result r = join(1, tok);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	h_result_free(&r);
	free(tok);
}

/* `token create [OPT VAL]` on the head: the token (caller frees), and its id
 * in *id (caller frees) when id is not NULL. */
static char *create_token(const char *opt, const char *val, char **id)
{
	struct h_result r = h_ctl(C, 0, "token", "create", "-o", "json", opt, val, NULL);
	cr_assert_eq(r.rc, 0, "token create: %s", r.err);
	json_t *j = h_json(&r);
	char *tok = strdup(json_string_value(json_object_get(j, "token")));
	if (id)
		*id = strdup(json_string_value(json_object_get(j, "id")));
	json_decref(j);
	h_result_free(&r);
	return tok;
}

static int count_nodes(int via)
{
	struct h_result r = h_ctl(C, via, "status", "-o", "json", NULL);
	cr_assert_eq(r.rc, 0, "status failed: %s", r.err);
	json_t *j = h_json(&r);
	int n = (int)json_array_size(json_object_get(j, "nodes"));
	json_decref(j);
	h_result_free(&r);
	return n;
}

Test(cluster, init_three_joins_status_shows_four_ready)
{
	start_all(4);
	char *tok = h_init(C);
	for (int i = 1; i < 4; i++) {
		struct h_result r = join(i, tok);
		cr_assert_eq(r.rc, 0, "join %d failed: %s", i, r.err);
		cr_assert(strstr(r.out, "Joined cluster itest"), "join output: %s", r.out);
		h_result_free(&r);
	}
	free(tok);
	for (int via = 0; via < 4; via += 3) {
		struct h_result r = h_ctl(C, via, "status", "-o", "json", NULL);
		cr_assert_eq(r.rc, 0, "status via %d: %s", via, r.err);
		json_t *j = h_json(&r);
		cr_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "cluster"), "name")),
				 "itest");
		json_t *nodes = json_object_get(j, "nodes");
		cr_assert_eq(json_array_size(nodes), 4);
		for (int i = 0; i < 4; i++) {
			json_t *n = h_status_node(j, C->nodes[i].name);
			cr_assert(n, "node %s missing", C->nodes[i].name);
			cr_assert_str_eq(json_string_value(json_object_get(n, "state")), "ready");
			cr_assert_str_eq(json_string_value(json_object_get(n, "role")),
					 i == 0 ? "head" : "worker");
			cr_assert_str_eq(json_string_value(json_object_get(n, "address")), h_addr(C, i));
			cr_assert_eq(json_is_true(json_object_get(n, "local")), i == via,
				     "local flag of %s via %d", C->nodes[i].name, via);
		}
		json_decref(j);
		h_result_free(&r);
	}
	/* The table view marks the local node and lists every node. */
	struct h_result r = h_ctl(C, 2, "status", NULL);
	cr_assert_eq(r.rc, 0);
	cr_assert(strstr(r.out, "node-3*"), "%s", r.out);
	cr_assert(strstr(r.out, "NAME") && strstr(r.out, "LAST SEEN"), "%s", r.out);
	h_result_free(&r);
	/* Private keys never left the workers: the head has only its own. */
	char p[512];
	snprintf(p, sizeof p, "%s/node.key", C->nodes[1].dir);
	struct stat st;
	cr_assert_eq(stat(p, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0600);
}

static void expect_refused(int i, const char *token, const char *needle)
{
	int before = count_nodes(0);
	struct h_result r = join(i, token);
	cr_assert_eq(r.rc, 1, "join should fail (rc %d): %s", r.rc, r.out);
	cr_assert(strstr(r.err, needle), "expected '%s' in: %s", needle, r.err);
	cr_assert_eq(strchr(r.err, '\n'), r.err + strlen(r.err) - 1, "one line: %s", r.err);
	h_result_free(&r);
	cr_assert_eq(count_nodes(0), before, "a refused join changed the cluster");
	/* and the joiner is still not in a cluster */
	r = h_ctl(C, i, "status", NULL);
	cr_assert_eq(r.rc, 1);
	cr_assert(strstr(r.err, "not in a cluster"), "%s", r.err);
	h_result_free(&r);
}

Test(cluster, bad_tokens_are_refused_and_nothing_is_recorded)
{
	start_all(2);
	char *tok = h_init(C);
	char bad[256];
	/* wrong secret */
	snprintf(bad, sizeof bad, "%s", tok);
	bad[strlen(bad) - 1] = bad[strlen(bad) - 1] == '0' ? '1' : '0';
	expect_refused(1, bad, "not known to this cluster");
	/* unknown token id */
	snprintf(bad, sizeof bad, "%s", tok);
	bad[75] = bad[75] == 'a' ? 'b' : 'a';
	expect_refused(1, bad, "not known to this cluster");
	/* CA hash mismatch: nothing secret is sent */
	snprintf(bad, sizeof bad, "%s", tok);
	bad[10] = bad[10] == 'a' ? 'b' : 'a';
	expect_refused(1, bad, "man-in-the-middle");
	/* malformed: a usage error, caught by sparkctl (test_hardening.c) */
	struct h_result r = join(1, "spk1.nothex");
	cr_assert_eq(r.rc, 2);
	cr_assert(strstr(r.err, "malformed token"), "%s", r.err);
	h_result_free(&r);
	/* revoked */
	char *id2;
	char *tok2 = create_token(NULL, NULL, &id2);
	r = h_ctl(C, 0, "token", "revoke", id2, NULL);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	h_result_free(&r);
	expect_refused(1, tok2, "revoked");
	/* expired */
	char *tok3 = create_token("--ttl", "1s", NULL);
	sleep(2);
	expect_refused(1, tok3, "expired");
	/* single use, then used up */
	char *tok4 = create_token("--uses", "1", NULL);
	r = join(1, tok4);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	h_result_free(&r);
	/* token ls shows states, never secrets */
	r = h_ctl(C, 0, "token", "ls", "-o", "json", NULL);
	cr_assert_eq(r.rc, 0);
	cr_assert_null(strstr(r.out, tok + 87), "a secret leaked into token ls");
	cr_assert(strstr(r.out, "\"revoked\"") && strstr(r.out, "\"expired\"") &&
		  strstr(r.out, "\"used\""), "%s", r.out);
	h_result_free(&r);
	free(tok);
	free(tok2);
	free(id2);
	free(tok3);
	free(tok4);
}

Test(cluster, name_taken_already_joined_and_unreachable_head)
{
	start_all(3);
	char *tok = h_init(C);
	struct h_result r = h_ctl(C, 1, "join", h_addr(C, 0), "--token", tok, "--name", "dup", NULL);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	h_result_free(&r);
	r = h_ctl(C, 2, "join", h_addr(C, 0), "--token", tok, "--name", "dup", NULL);
	cr_assert_eq(r.rc, 1);
	cr_assert(strstr(r.err, "already in the cluster"), "%s", r.err);
	h_result_free(&r);
	r = h_ctl(C, 1, "join", h_addr(C, 0), "--token", tok, NULL);
	cr_assert_eq(r.rc, 1);
	cr_assert(strstr(r.err, "already a worker of cluster itest"), "%s", r.err);
	h_result_free(&r);
	cr_assert_eq(count_nodes(0), 2);
	/* head unreachable: a port where nothing listens */
	char dead[64];
	snprintf(dead, sizeof dead, "127.0.0.1:%d", C->nodes[2].port + 1);
	long t0 = h_now_ms();
	r = h_ctl(C, 2, "join", dead, "--token", tok, "--timeout", "2s", NULL);
	long took = h_now_ms() - t0;
	cr_assert_eq(r.rc, 1);
	cr_assert(strstr(r.err, "could not reach the head at 127.0.0.1:") && strstr(r.err, "for 2 s"),
		  "%s", r.err);
	cr_assert(took < 6000, "took %ld ms", took);
	h_result_free(&r);
	free(tok);
}

Test(cluster, killed_worker_goes_unreachable_and_comes_back_without_token)
{
	start_pair();
	h_kill(C, 1, SIGKILL);
	long ms = h_wait_state(C, 0, "node-2", "unreachable", 6000);
	cr_assert(ms >= 0, "node-2 not unreachable within 6 s");
	cr_assert_eq(h_start(C, 1), 0);
	ms = h_wait_state(C, 0, "node-2", "ready", 5000);
	cr_assert(ms >= 0, "node-2 not ready again within 5 s of restart");
	/* the head restarts too, and loses nothing */
	h_kill(C, 0, SIGKILL);
	cr_assert_eq(h_start(C, 0), 0);
	cr_assert_eq(count_nodes(0), 2);
	ms = h_wait_state(C, 1, "node-2", "ready", 15000);
	cr_assert(ms >= 0, "worker did not come back to a restarted head");
}

static int sql_int(const char *db, const char *q)
{
	sqlite3 *h;
	cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	sqlite3_busy_timeout(h, 10000);
	sqlite3_stmt *st;
	cr_assert_eq(sqlite3_prepare_v2(h, q, -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(h));
	int v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0) : -1;
	sqlite3_finalize(st);
	sqlite3_close(h);
	return v;
}

/* Heartbeats (one a second per worker) are not each written to cluster.db:
 * status takes a connected node's last_seen from its session, and the exact
 * value is stored when the session ends (agent/cluster_head.c HEAD_SEEN_FLUSH_S). */
Test(cluster, heartbeats_are_not_each_written_but_last_seen_is_kept)
{
	start_pair();
	char db[600];
	snprintf(db, sizeof db, "%s/cluster.db", C->nodes[0].dir);
	const char *q = "SELECT last_seen FROM nodes WHERE name = 'node-2'";
	sleep(1); /* the worker's hello is in */
	int stored = sql_int(db, q);
	sleep(3);
	struct h_result r = h_ctl(C, 0, "status", "-o", "json", NULL);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	json_t *j = h_json(&r);
	json_t *n = h_status_node(j, "node-2");
	cr_assert(n);
	cr_assert_leq(json_integer_value(json_object_get(n, "last_seen_ago_s")), 2,
		      "a connected node's last_seen lags: %s", r.out);
	json_decref(j);
	h_result_free(&r);
	cr_assert_eq(sql_int(db, q), stored, "every heartbeat was written");
	/* the worker stops: its last heartbeat is stored */
	h_kill(C, 1, SIGTERM);
	long t0 = h_now_ms();
	int now = 0, seen = 0;
	do {
		usleep(100 * 1000);
		now = (int)time(NULL);
		seen = sql_int(db, q);
	} while (seen < now - 2 && h_now_ms() - t0 < 5000);
	cr_assert_geq(seen, now - 2, "last_seen %d not stored at disconnect (now %d)", seen, now);
}

Test(cluster, head_killed_during_joins_leaves_a_consistent_db)
{
	start_all(6);
	char *tok = h_init(C);
	pid_t kids[5];
	for (int i = 1; i < 6; i++) {
		kids[i - 1] = fork();
		if (kids[i - 1] == 0) {
			struct h_result r = join(i, tok);
			_exit(r.rc);
		}
	}
	usleep(60000);
	h_kill(C, 0, SIGKILL);
	for (int i = 0; i < 5; i++)
		waitpid(kids[i], NULL, 0);
	char db[512];
	snprintf(db, sizeof db, "%s/cluster.db", C->nodes[0].dir);
	cr_assert_eq(h_start(C, 0), 0);
	sqlite3 *h;
	cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
	sqlite3_busy_timeout(h, 10000); /* the restarted head may be recovering the WAL */
	sqlite3_stmt *st;
	sqlite3_prepare_v2(h, "PRAGMA integrity_check", -1, &st, NULL);
	cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
	cr_assert_str_eq((const char *)sqlite3_column_text(st, 0), "ok");
	sqlite3_finalize(st);
	sqlite3_close(h);
	int workers = sql_int(db, "SELECT count(*) FROM nodes WHERE role='worker'");
	int uses = sql_int(db, "SELECT coalesce(sum(uses),0) FROM tokens");
	cr_assert_eq(workers, uses, "%d worker rows but %d token uses", workers, uses);
	/* Every worker either fully joined (identity on disk, known to the head)
	 * or is not in a cluster and can join now. */
	for (int i = 1; i < 6; i++) {
		char idp[512];
		snprintf(idp, sizeof idp, "%s/identity.json", C->nodes[i].dir);
		if (access(idp, F_OK) == 0)
			continue;
		struct h_result r = join(i, tok);
		cr_assert_eq(r.rc, 0, "rejoin of node-%d: %s", i + 1, r.err);
		h_result_free(&r);
	}
	free(tok);
	for (int i = 1; i < 6; i++) {
		char q[256];
		snprintf(q, sizeof q, "SELECT count(*) FROM nodes WHERE name='node-%d'", i + 1);
		cr_assert_eq(sql_int(db, q), 1, "node-%d is not exactly once in the cluster", i + 1);
	}
	for (int i = 1; i < 6; i++)
		cr_assert(h_wait_state(C, 0, C->nodes[i].name, "ready", 15000) >= 0, "node-%d not ready",
			  i + 1);
}

Test(cluster, removed_node_certificate_is_refused)
{
	start_pair();
	/* Keep a copy of the worker's identity, as an attacker with the disk would. */
	h_kill(C, 1, SIGKILL);
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "cp -a %s %s.bak", C->nodes[1].dir, C->nodes[1].dir);
	cr_assert_eq(system(cmd), 0);
	struct h_result r = h_ctl(C, 0, "node", "rm", "node-2", NULL);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	cr_assert(strstr(r.out, "revoked"), "%s", r.out);
	h_result_free(&r);
	snprintf(cmd, sizeof cmd, "rm -rf %s && mv %s.bak %s", C->nodes[1].dir, C->nodes[1].dir,
		 C->nodes[1].dir);
	cr_assert_eq(system(cmd), 0);
	cr_assert_eq(h_start(C, 1), 0);
	/* The old certificate gets it nowhere. */
	long t0 = h_now_ms();
	int refused = 0;
	while (h_now_ms() - t0 < 5000 && !refused) {
		r = h_ctl(C, 1, "status", NULL);
		refused = r.rc == 1 && strstr(r.err, "removed from cluster itest");
		h_result_free(&r);
		usleep(100000);
	}
	cr_assert(refused, "the removed node was not told it is removed");
	cr_assert_eq(count_nodes(0), 1);
	char log[8192] = "";
	FILE *f = fopen(C->nodes[0].log, "r");
	size_t n = f ? fread(log, 1, sizeof log - 1, f) : 0;
	log[n] = '\0';
	if (f)
		fclose(f);
	cr_assert(strstr(log, "msg=cert_refused"), "head log lacks cert_refused");
}

Test(cluster, leave_and_rejoin)
{
	start_all(2);
	char *tok = h_init(C);
	struct h_result r = join(1, tok);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	h_result_free(&r);
	r = h_ctl(C, 0, "leave", NULL);
	cr_assert_eq(r.rc, 1);
	cr_assert(strstr(r.err, "head cannot leave"), "%s", r.err);
	h_result_free(&r);
	r = h_ctl(C, 1, "leave", NULL);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	h_result_free(&r);
	cr_assert_eq(count_nodes(0), 1);
	r = h_ctl(C, 1, "status", NULL);
	cr_assert_eq(r.rc, 1);
	cr_assert(strstr(r.err, "not in a cluster"), "%s", r.err);
	h_result_free(&r);
	r = join(1, tok);
	cr_assert_eq(r.rc, 0, "rejoin: %s", r.err);
	h_result_free(&r);
	cr_assert_eq(count_nodes(0), 2);
	free(tok);
}

static void spray_garbage_tcp(int port, int n)
{
	for (int i = 0; i < n; i++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
		inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
		if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
			unsigned char junk[64];
			for (size_t k = 0; k < sizeof junk; k++)
				junk[k] = (unsigned char)(rand() & 0xff);
			if (i % 3 == 0)
				memcpy(junk, "\x16\x03\x01\x00\x05", 5); /* a TLS record header */
			send(fd, junk, sizeof junk, MSG_NOSIGNAL);
		}
		close(fd);
	}
}

/* Frames that must each be refused: bad JSON, no fields, too large, missing
 * type, empty, wrong version, unknown type, truncated and never completed. */
static void spray_garbage_unix(const char *path, int n)
{
	static const char *const bodies[] = {"hello", "{}", "{\"v\":1,\"id\":1}",
					     "{\"v\":9,\"type\":\"x\",\"id\":1}",
					     "{\"v\":1,\"type\":\"nope\",\"id\":1}", "[1,2,3]",
					     "{\"v\":1,\"type\":5,\"id\":\"x\"}"};
	const size_t nb = sizeof bodies / sizeof bodies[0];
	for (int i = 0; i < n; i++) {
		int fd = socket(AF_UNIX, SOCK_STREAM, 0);
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
		struct timeval tv = {.tv_sec = 2};
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
		if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
			unsigned char buf[256];
			size_t len;
			size_t k = (size_t)i % (nb + 3);
			if (k < nb) {
				size_t bl = strlen(bodies[k]);
				buf[0] = buf[1] = 0;
				buf[2] = (unsigned char)(bl >> 8);
				buf[3] = (unsigned char)bl;
				memcpy(buf + 4, bodies[k], bl);
				len = bl + 4;
			} else if (k == nb) {
				memcpy(buf, "\x7f\xff\xff\xff{", 5); /* 2 GiB announced */
				len = 5;
			} else if (k == nb + 1) {
				memset(buf, 0, 4); /* empty frame */
				len = 4;
			} else {
				memcpy(buf, "\x00\x00\x00\x40{\"v\"", 9); /* truncated, then hang up */
				len = 9;
			}
			send(fd, buf, len, MSG_NOSIGNAL);
			if (i % 50 == 0 && k != nb + 2) {
				char rb[512];
				ssize_t r = recv(fd, rb, sizeof rb, 0);
				cr_assert(r > 4, "no error frame for garbage #%zu", k);
				rb[r] = '\0';
				cr_assert(strstr(rb + 4, "\"error\""), "reply to garbage #%zu: %s", k, rb + 4);
			}
		}
		close(fd);
	}
}

Test(cluster, malformed_frames_do_not_hurt_the_daemons)
{
	start_pair();
	spray_garbage_tcp(C->nodes[0].port, 1000);
	spray_garbage_unix(C->nodes[0].sock, 1000);
	spray_garbage_tcp(C->nodes[1].port, 200);
	cr_assert_eq(kill(C->nodes[0].pid, 0), 0, "head died");
	cr_assert_eq(kill(C->nodes[1].pid, 0), 0, "worker died");
	cr_assert_eq(count_nodes(0), 2);
	cr_assert(h_wait_state(C, 1, "node-2", "ready", 3000) >= 0);
}

Test(cluster, control_socket_refuses_other_users)
{
	start_all(1);
	chmod(C->root, 0755);
	chmod(C->nodes[0].sock, 0666); /* let the connect through: SO_PEERCRED must refuse */
	int pfd[2];
	cr_assert_eq(pipe(pfd), 0);
	pid_t p = fork();
	if (p == 0) {
		close(pfd[0]);
		dup2(pfd[1], 2);
		dup2(pfd[1], 1);
		if (setgid(65534) < 0 || setuid(65534) < 0)
			_exit(99);
		execl(h_bin("sparkctl"), "sparkctl", "--socket", C->nodes[0].sock, "status", (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	char buf[1024] = "";
	size_t got = 0;
	ssize_t n;
	while (got < sizeof buf - 1 && (n = read(pfd[0], buf + got, sizeof buf - 1 - got)) > 0)
		got += (size_t)n;
	buf[got] = '\0';
	int st;
	waitpid(p, &st, 0);
	cr_assert(WIFEXITED(st));
	cr_assert_eq(WEXITSTATUS(st), 1, "%s", buf);
	cr_assert(strstr(buf, "permission denied: uid 65534"), "%s", buf);
	/* root still gets in */
	struct h_result r = h_ctl(C, 0, "version", NULL);
	cr_assert_eq(r.rc, 0);
	cr_assert(strstr(r.out, "role none"), "%s", r.out);
	h_result_free(&r);
}

Test(cluster, second_daemon_on_same_state_dir_is_refused)
{
	start_all(1);
	char *argv[] = {(char *)h_bin("sparkd"), "--state-dir", C->nodes[0].dir, "--socket",
			"/tmp/sparkctl-it-other.sock", "--listen", "127.0.0.1:1", "--config",
			"/dev/null", NULL};
	struct h_result r = h_run(argv);
	cr_assert_eq(r.rc, 1);
	cr_assert(strstr(r.err, "already runs on state dir"), "%s", r.err);
	h_result_free(&r);
	char *bad[] = {(char *)h_bin("sparkd"), "--config", "/nonexistent/sparkd.yaml", NULL};
	r = h_run(bad);
	cr_assert_eq(r.rc, 2);
	cr_assert(strstr(r.err, "/nonexistent/sparkd.yaml"), "%s", r.err);
	h_result_free(&r);
}

Test(cluster, config_errors_name_file_line_and_column)
{
	C = h_cluster_new(1);
	char path[512];
	snprintf(path, sizeof path, "%s/bad.yaml", C->root);
	FILE *f = fopen(path, "w");
	fputs("state_dir: /tmp/x\nlisten: [1, 2\n", f);
	fclose(f);
	char *argv[] = {(char *)h_bin("sparkd"), "--config", path, NULL};
	struct h_result r = h_run(argv);
	cr_assert_eq(r.rc, 2);
	char want[600];
	snprintf(want, sizeof want, "%s:3:1:", path);
	cr_assert(strstr(r.err, want), "%s", r.err);
	h_result_free(&r);
	f = fopen(path, "w");
	fputs("state_dir: /tmp/x\nlisten_port: 7300\n", f);
	fclose(f);
	r = h_run(argv);
	cr_assert_eq(r.rc, 2);
	cr_assert(strstr(r.err, "unknown key \"listen_port\""), "%s", r.err);
	h_result_free(&r);
}

/* One control request over the raw socket (4-byte big-endian length, JSON). */
static json_t *raw_request(const char *path, const char *body)
{
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
	struct timeval tv = {.tv_sec = 5};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0, "connect %s", path);
	size_t bl = strlen(body);
	unsigned char hdr[4] = {0, 0, (unsigned char)(bl >> 8), (unsigned char)bl};
	send(fd, hdr, 4, MSG_NOSIGNAL);
	send(fd, body, bl, MSG_NOSIGNAL);
	static char buf[65536];
	size_t got = 0;
	ssize_t r;
	while (got < sizeof buf - 1 && (r = recv(fd, buf + got, sizeof buf - 1 - got, 0)) > 0) {
		got += (size_t)r;
		if (got >= 4) {
			size_t len = (size_t)buf[0] << 24 | (size_t)(unsigned char)buf[1] << 16 |
				     (size_t)(unsigned char)buf[2] << 8 | (unsigned char)buf[3];
			if (got >= 4 + len)
				break;
		}
	}
	close(fd);
	cr_assert(got > 4, "no answer on %s", path);
	json_error_t e;
	json_t *m = json_loadb(buf + 4, got - 4, 0, &e);
	cr_assert_not_null(m, "not JSON: %.*s", (int)(got - 4), buf + 4);
	return m;
}

Test(cluster, debug_memory_reports_the_daemons_memory)
{
	start_pair();
	cr_assert(h_wait_state(C, 0, C->nodes[1].name, "ready", 15000) >= 0, "the worker is not ready");
	for (int i = 0; i < 2; i++) {
		json_t *m = raw_request(C->nodes[i].sock, "{\"v\":1,\"type\":\"debug_memory\",\"id\":7}");
		char *dump = json_dumps(m, 0);
		json_t *d = json_object_get(m, "data");
		cr_assert_str_eq(json_string_value(json_object_get(m, "type")), "result", "%s", dump);
		cr_assert_eq(json_integer_value(json_object_get(m, "id")), 7);
		cr_assert_gt(json_integer_value(json_object_get(d, "VmRSS_kib")), 1000, "%s", dump);
		cr_assert_gt(json_integer_value(json_object_get(d, "RssAnon_kib")), 0, "%s", dump);
		json_t *heap = json_object_get(d, "heap");
		cr_assert(json_is_integer(json_object_get(heap, "in_use")), "%s", dump);
#ifndef __SANITIZE_ADDRESS__ /* ASan's allocator is not glibc's: mallinfo2 says 0 there */
		cr_assert_gt(json_integer_value(json_object_get(heap, "in_use")), 0, "%s", dump);
#endif
		if (i == 0) { /* the head: its SQLite share and the worker's session */
			cr_assert_gt(json_integer_value(json_object_get(json_object_get(d, "sqlite"), "total")),
				     0, "%s", dump);
			cr_assert_eq(json_integer_value(json_object_get(d, "sessions")), 1, "%s", dump);
		} else {
			cr_assert_null(json_object_get(d, "sqlite"), "a worker has no cluster.db: %s", dump);
		}
		free(dump);
		json_decref(m);
	}
}

/* MemTotal of this machine in bytes (every daemon of the test reads the same). */
static long long meminfo_total(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	cr_assert(f);
	char line[128];
	long long kb = -1;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "MemTotal: %lld kB", &kb) == 1)
			break;
	fclose(f);
	cr_assert_gt(kb, 0);
	return kb * 1024;
}

/* node's "mem" in status -o json on node via, once it has one (10 s). */
static json_t *wait_mem(int via, const char *node)
{
	long t0 = h_now_ms();
	for (;;) {
		struct h_result r = h_ctl(C, via, "status", "-o", "json", NULL);
		cr_assert_eq(r.rc, 0, "%s", r.err);
		json_t *j = h_json(&r);
		json_t *mem = json_object_get(h_status_node(j, node), "mem");
		if (json_is_object(mem)) {
			json_incref(mem);
			json_decref(j);
			h_result_free(&r);
			return mem;
		}
		json_decref(j);
		h_result_free(&r);
		cr_assert_lt(h_now_ms() - t0, 10000, "no memory report of %s in 10 s", node);
		usleep(200 * 1000);
	}
}

/* Issue 19: each node reports MemTotal, MemAvailable and the budget services
 * may use; the head's own node is read on the head. The budget is
 * serve.memory_budget_gib when set (the worker here), else the planner's
 * share of MemTotal (102 of 121.7 GiB: the head here). */
Test(cluster, nodes_report_their_memory_and_budget)
{
	C = h_cluster_new(2);
	char cfg[600];
	snprintf(cfg, sizeof cfg, "%s/mem.yaml", C->root);
	FILE *f = fopen(cfg, "w");
	fputs("serve:\n  memory_budget_gib: 40.5\n", f);
	fclose(f);
	cr_assert_eq(h_start(C, 0), 0);
	cr_assert_eq(h_start_cfg(C, 1, cfg), 0);
	char *tok = h_init(C);
	struct h_result r = join(1, tok);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	h_result_free(&r);
	free(tok);
	long long total = meminfo_total();
	for (int i = 0; i < 2; i++) {
		json_t *mem = wait_mem(i, C->nodes[i].name);
		long long t = json_integer_value(json_object_get(mem, "total"));
		long long av = json_integer_value(json_object_get(mem, "available"));
		long long b = json_integer_value(json_object_get(mem, "budget"));
		cr_expect_eq(t, total, "%s: total %lld, MemTotal %lld", C->nodes[i].name, t, total);
		cr_expect(av > 0 && av <= t, "%s: available %lld of %lld", C->nodes[i].name, av, t);
		long long want = i == 1 ? (long long)(40.5 * 1024 * 1024 * 1024)
					: (long long)((double)total * (102.0 / 121.7));
		cr_expect_eq(b, want, "%s: budget %lld, want %lld", C->nodes[i].name, b, want);
		cr_expect_gt(json_integer_value(json_object_get(mem, "reported_at")), 0);
		json_decref(mem);
	}
	/* node show prints it for people */
	r = h_ctl(C, 1, "node", "show", C->nodes[1].name, NULL);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	cr_expect(strstr(r.out, "budget 40.5 GiB for services"), "%s", r.out);
	h_result_free(&r);
	/* a budget that is not a positive number stops sparkd with the key named */
	f = fopen(cfg, "w");
	fputs("serve:\n  memory_budget_gib: -3\n", f);
	fclose(f);
	char *argv[] = {(char *)h_bin("sparkd"), "--config", cfg, NULL};
	r = h_run(argv);
	cr_expect_eq(r.rc, 2, "rc %d: %s", r.rc, r.err);
	cr_expect(strstr(r.err, "serve.memory_budget_gib"), "%s", r.err);
	h_result_free(&r);
}

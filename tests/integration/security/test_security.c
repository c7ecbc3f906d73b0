/* Security scenarios of issue 14: real sparkd daemons on loopback against
 * hostile peers written for the purpose (hostile.c: a fake head, a fake
 * worker, raw TLS and control-socket clients). Each test checks one clause of
 * the security contract (docs/cluster.md, "Security model"). Node i of the
 * harness is named node-(i+1): node-1 is the head, node-2 is "w1", node-3 "w2". */
#include "../cluster/harness.h"
#include "hostile.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_CLIENTS 400

/* Built with ASan, sparkd is too (b_sanitize is project-wide): its allocator
 * keeps freed memory in a quarantine (256 MiB), so RSS says nothing there. */
#if defined(__SANITIZE_ADDRESS__)
#define SPARK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SPARK_ASAN 1
#endif
#endif
#ifndef SPARK_ASAN
#define SPARK_ASAN 0
#endif

static struct h_cluster *C;
static struct hs_server *S;
static struct hs_client *CL[MAX_CLIENTS];
static char USER_NAME[32], GROUP_JOB[32], GROUP_ADM[32];
static bool user_made, gjob_made, gadm_made;
static pid_t router_pid; /* a spark-router a test started, stopped by teardown */
static pid_t HOG; /* a process holding control connections as the test user */

static struct h_result run_cmd(const char *a0, ...)
{
	char *argv[32];
	int n = 0;
	argv[n++] = (char *)a0;
	va_list ap;
	va_start(ap, a0);
	char *a;
	while ((a = va_arg(ap, char *)) && n < 31)
		argv[n++] = a;
	va_end(ap);
	argv[n] = NULL;
	return h_run(argv);
}

/* true once name is gone (deleted now, or absent) */
static bool retry_del(const char *tool, const char *name)
{
	for (int t = 0; t < 25; t++) {
		char *argv[] = {(char *)tool, (char *)name, NULL};
		struct h_result r = h_run(argv);
		/* 6: no such user/group (already gone) */
		bool ok = r.rc == 0 || r.rc == 6;
		if (!ok && t == 24)
			fprintf(stderr, "cleanup: %s %s failed: %s", tool, name, r.err);
		h_result_free(&r);
		if (ok)
			return true;
		usleep(200000);
	}
	return false;
}

static void teardown(void)
{
	if (router_pid > 0) {
		kill(router_pid, SIGKILL);
		waitpid(router_pid, NULL, 0);
		router_pid = 0;
	}
	if (HOG > 0) {
		kill(HOG, SIGKILL);
		waitpid(HOG, NULL, 0);
		HOG = 0;
	}
	hs_server_stop(S);
	S = NULL;
	for (int i = 0; i < MAX_CLIENTS; i++) {
		hs_close(CL[i]);
		CL[i] = NULL;
	}
	h_cluster_free(C);
	C = NULL;
	/* a job of the test user (a service's ranks outlive sparkd: they are
	 * re-adopted after a restart) would make userdel fail: end them */
	if (user_made) {
		struct h_result k = run_cmd("/usr/bin/pkill", "-KILL", "-U", USER_NAME, NULL);
		h_result_free(&k);
	}
	/* userdel/groupdel fail while another process holds /etc/passwd's lock: retry */
	if (user_made)
		user_made = !retry_del("/usr/sbin/userdel", USER_NAME);
	if (gjob_made)
		gjob_made = !retry_del("/usr/sbin/groupdel", GROUP_JOB);
	if (gadm_made)
		gadm_made = !retry_del("/usr/sbin/groupdel", GROUP_ADM);
	user_made = gjob_made = gadm_made = false;
}

static void setup(void) { signal(SIGPIPE, SIG_IGN); }

TestSuite(security, .init = setup, .fini = teardown, .timeout = 120);

/* ---- helpers -------------------------------------------------------------- */

/* sparkctl against node i, killed after secs seconds (a hang is a failure, not a stuck suite). */
#define ctl_t(i, secs, ...) h_ctl_timeout(C, (i), (secs), __VA_ARGS__)

static const char *nfile(int i, const char *name)
{
	static char buf[8][512];
	static int slot;
	char *b = buf[slot++ % 8];
	snprintf(b, 512, "%s/%s", C->nodes[i].dir, name);
	return b;
}

static const char *rfile(const char *name)
{
	static char buf[8][512];
	static int slot;
	char *b = buf[slot++ % 8];
	snprintf(b, 512, "%s/%s", C->root, name);
	return b;
}

static bool exists(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0;
}

static char *slurp(const char *p)
{
	FILE *f = fopen(p, "re");
	if (!f)
		return strdup("");
	size_t cap = 1 << 16, n = 0;
	char *b = malloc(cap);
	size_t r;
	while ((r = fread(b + n, 1, cap - n - 1, f)) > 0) {
		n += r;
		if (cap - n < 4096)
			b = realloc(b, cap *= 2);
	}
	b[n] = '\0';
	fclose(f);
	return b;
}

static bool log_has(int i, const char *what)
{
	char *l = slurp(C->nodes[i].log);
	bool has = strstr(l, what) != NULL;
	free(l);
	return has;
}

static void write_file(const char *p, const char *text)
{
	FILE *f = fopen(p, "we");
	cr_assert(f, "cannot write %s", p);
	fputs(text, f);
	fclose(f);
}

static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof sa;
	cr_assert(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
		  getsockname(fd, (struct sockaddr *)&sa, &sl) == 0);
	close(fd);
	return ntohs(sa.sin_port);
}

static void start_nodes(int n)
{
	C = h_cluster_new(n);
	for (int i = 0; i < n; i++)
		cr_assert_eq(h_start(C, i), 0, "sparkd %d did not start", i);
}

static void join_node(int i, const char *tok)
{
	struct h_result r = ctl_t(i, 30, "join", h_addr(C, 0), "--token", tok, "--timeout", "5s", NULL);
	cr_assert_eq(r.rc, 0, "join of %s failed: %s", C->nodes[i].name, r.err);
	h_result_free(&r);
}

/* n daemons; node-1 is the head, nodes 1..joined-1 join it. */
static void cluster(int n, int joined)
{
	start_nodes(n);
	char *tok = h_init(C);
	for (int i = 1; i < joined; i++)
		join_node(i, tok);
	free(tok);
}

/* `token create [--uses N]` on the head: token text (caller frees) and id. */
static char *make_token(const char *uses, char id[64])
{
	struct h_result r = uses ? ctl_t(0, 10, "token", "create", "--uses", uses, "-o", "json", NULL)
				 : ctl_t(0, 10, "token", "create", "-o", "json", NULL);
	cr_assert_eq(r.rc, 0, "token create: %s", r.err);
	json_t *j = h_json(&r);
	char *tok = strdup(json_string_value(json_object_get(j, "token")));
	if (id)
		snprintf(id, 64, "%s", json_string_value(json_object_get(j, "id")));
	json_decref(j);
	h_result_free(&r);
	return tok;
}

static char *cert_serial(int via, const char *node)
{
	struct h_result r = ctl_t(via, 10, "node", "show", node, "-o", "json", NULL);
	cr_assert_eq(r.rc, 0, "node show %s: %s", node, r.err);
	json_t *j = h_json(&r);
	const char *s = json_string_value(json_object_get(j, "cert_serial"));
	cr_assert(s && *s, "node show %s has no cert_serial: %s", node, r.out);
	char *out = strdup(s);
	json_decref(j);
	h_result_free(&r);
	return out;
}

static void node_rm(const char *node)
{
	struct h_result r = ctl_t(0, 10, "node", "rm", node, NULL);
	cr_assert_eq(r.rc, 0, "node rm %s: %s", node, r.err);
	h_result_free(&r);
}

/* upper-case hex without leading zeros, for comparing serial numbers */
static void norm_serial(const char *in, char *out, size_t len)
{
	size_t n = 0;
	while (*in == '0' || *in == ':')
		in++;
	for (; (isxdigit((unsigned char)*in) || *in == ':') && n + 1 < len; in++)
		if (*in != ':')
			out[n++] = (char)toupper((unsigned char)*in);
	out[n] = '\0';
}

/* Does the X.509 CRL at path (checked by openssl) list serial? */
static bool crl_lists(const char *path, const char *serial)
{
	if (!exists(path))
		return false;
	struct h_result r = run_cmd("/usr/bin/openssl", "crl", "-in", path, "-noout", "-text", NULL);
	bool found = false;
	char want[128];
	norm_serial(serial, want, sizeof want);
	for (char *p = r.rc == 0 ? strstr(r.out, "Serial Number:") : NULL; p && !found;
	     p = strstr(p + 1, "Serial Number:")) {
		char got[128];
		norm_serial(p + strlen("Serial Number:") + strspn(p + strlen("Serial Number:"), " "),
			    got, sizeof got);
		found = strcmp(got, want) == 0;
	}
	h_result_free(&r);
	return found;
}

static long wait_crl(int i, const char *serial, long timeout_ms)
{
	long t0 = h_now_ms();
	while (h_now_ms() - t0 <= timeout_ms) {
		if (crl_lists(nfile(i, "crl.pem"), serial))
			return h_now_ms() - t0;
		usleep(100000);
	}
	return -1;
}

static long rss_kib(pid_t pid)
{
	char p[64], line[256];
	snprintf(p, sizeof p, "/proc/%d/status", (int)pid);
	FILE *f = fopen(p, "re");
	long v = -1;
	while (f && fgets(line, sizeof line, f))
		if (strncmp(line, "VmRSS:", 6) == 0)
			v = strtol(line + 6, NULL, 10);
	if (f)
		fclose(f);
	return v;
}

/* Send one control request as user (NULL: as root) over a raw Unix
 * connection; the answer's error code, "ok" for a result, or "none" when no
 * answer came within 10 s. Caller frees. */
static char *ctl_code(const char *sock, const char *json, const char *user)
{
	int pfd[2];
	cr_assert_eq(pipe(pfd), 0);
	pid_t p = fork();
	cr_assert(p >= 0);
	if (p == 0) {
		close(pfd[0]);
		if (user) {
			struct passwd *pw = getpwnam(user);
			if (!pw || initgroups(user, pw->pw_gid) < 0 || setgid(pw->pw_gid) < 0 ||
			    setuid(pw->pw_uid) < 0)
				_exit(3);
		}
		struct hs_client *c = hs_connect_unix(sock);
		const char *code = "none";
		json_t *j = NULL;
		if (c && hs_send_frame(c, json) == 0 && (j = hs_read_frame(c, 10000))) {
			const char *t = json_string_value(json_object_get(j, "type"));
			code = t && strcmp(t, "result") == 0 ? "ok"
			       : json_string_value(json_object_get(j, "code"))
				       ? json_string_value(json_object_get(j, "code"))
				       : "no-code";
		}
		if (write(pfd[1], code, strlen(code)) < 0)
			_exit(4);
		_exit(0);
	}
	close(pfd[1]);
	char buf[128] = "";
	ssize_t n = read(pfd[0], buf, sizeof buf - 1);
	close(pfd[0]);
	waitpid(p, NULL, 0);
	buf[n > 0 ? n : 0] = '\0';
	return strdup(buf[0] ? buf : "child-failed");
}

/* SHA-256 hex (lower case) of the SubjectPublicKeyInfo of the first certificate in path. */
static void spki_sha256(const char *path, char out[65])
{
	FILE *f = fopen(path, "re");
	cr_assert(f, "cannot open %s", path);
	X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
	fclose(f);
	cr_assert(x, "no certificate in %s", path);
	unsigned char *der = NULL;
	int n = i2d_X509_PUBKEY(X509_get_X509_PUBKEY(x), &der);
	cr_assert(n > 0);
	unsigned char md[32];
	unsigned int ml = 0;
	EVP_Digest(der, (size_t)n, md, &ml, EVP_sha256(), NULL);
	for (int i = 0; i < 32; i++)
		sprintf(out + 2 * i, "%02x", md[i]);
	OPENSSL_free(der);
	X509_free(x);
}

static char *cert_subject(const char *path)
{
	struct h_result r = run_cmd("/usr/bin/openssl", "x509", "-in", path, "-noout", "-subject",
				    "-nameopt", "sep_multiline", NULL);
	cr_assert_eq(r.rc, 0, "openssl x509 %s: %s", path, r.err);
	char *s = r.out;
	free(r.err);
	return s;
}

static json_t *identity(int i)
{
	json_t *j = json_load_file(nfile(i, "identity.json"), 0, NULL);
	cr_assert(j, "cannot read %s", nfile(i, "identity.json"));
	return j;
}

/* ---- identities ------------------------------------------------------------ */

Test(security, identities_head_cert_is_ou_head_and_workers_pin_its_key)
{
	cluster(2, 2);
	json_t *hid = identity(0), *wid = identity(1);
	const char *head_id = json_string_value(json_object_get(hid, "node_id"));
	const char *w_id = json_string_value(json_object_get(wid, "node_id"));
	cr_assert(head_id && w_id);
	char *hs = cert_subject(nfile(0, "node.crt")), *ws = cert_subject(nfile(1, "node.crt"));
	char want[128];
	snprintf(want, sizeof want, "CN=%s", head_id);
	cr_expect(strstr(hs, "OU=head") && strstr(hs, want),
		  "the head's certificate subject should be CN=<head id>, OU=head; it is:\n%s", hs);
	snprintf(want, sizeof want, "CN=%s", w_id);
	cr_expect(strstr(ws, "OU=node") && strstr(ws, want) && !strstr(ws, "OU=head"),
		  "a worker's certificate subject should be CN=<node id>, OU=node; it is:\n%s", ws);
	char key[65];
	spki_sha256(nfile(0, "node.crt"), key);
	const char *hk = json_string_value(json_object_get(wid, "head_key"));
	cr_expect(hk && strcmp(hk, key) == 0,
		  "the worker's identity.json should hold head_key = sha256 of the head's SPKI (%s); "
		  "it has %s", key, hk ? hk : "no head_key");
	cr_expect_str_eq(json_string_value(json_object_get(wid, "head_id")) ?: "", head_id);
	free(hs);
	free(ws);
	json_decref(hid);
	json_decref(wid);
}

/* ---- 1. a worker pins its head --------------------------------------------- */

enum fake_kind { FAKE_REMOVED, FAKE_MEMBER, FAKE_FORGED_HEAD };

static const char *const fake_what[] = {
	[FAKE_REMOVED] = "removed node-3's certificate",
	[FAKE_MEMBER] = "current member node-3's certificate",
	[FAKE_FORGED_HEAD] = "a CN=<head id>, OU=head certificate signed by the cluster CA with another key",
};

/* A certificate as the head's (CN = head id, OU = head, the extensions sparkd
 * gives its leaves) on a new key, signed with the head's own ca.key: only the
 * pinned head_key tells it apart. Writes rfile("forged.crt") (leaf then CA)
 * and rfile("forged.key"). */
static void forge_head_cert(void)
{
	json_t *hid = identity(0);
	char subj[128];
	snprintf(subj, sizeof subj, "/CN=%s/OU=head",
		 json_string_value(json_object_get(hid, "node_id")));
	json_decref(hid);
	write_file(rfile("forged.ext"), "basicConstraints=critical,CA:FALSE\n"
					"keyUsage=critical,digitalSignature\n"
					"extendedKeyUsage=serverAuth,clientAuth\n"
					"subjectKeyIdentifier=hash\n"
					"authorityKeyIdentifier=keyid:always\n");
	struct h_result r = run_cmd("/usr/bin/openssl", "ecparam", "-name", "prime256v1", "-genkey",
				    "-noout", "-out", rfile("forged.key"), NULL);
	cr_assert_eq(r.rc, 0, "openssl ecparam: %s", r.err);
	h_result_free(&r);
	r = run_cmd("/usr/bin/openssl", "req", "-new", "-key", rfile("forged.key"), "-subj", subj,
		    "-out", rfile("forged.csr"), NULL);
	cr_assert_eq(r.rc, 0, "openssl req: %s", r.err);
	h_result_free(&r);
	r = run_cmd("/usr/bin/openssl", "x509", "-req", "-in", rfile("forged.csr"), "-CA",
		    nfile(0, "ca.crt"), "-CAkey", nfile(0, "ca.key"), "-set_serial",
		    "0x5eed5eed5eed5eed", "-days", "1", "-extfile", rfile("forged.ext"), "-out",
		    rfile("forged.leaf"), NULL);
	cr_assert_eq(r.rc, 0, "openssl x509 -req: %s", r.err);
	h_result_free(&r);
	char *leaf = slurp(rfile("forged.leaf")), *ca = slurp(nfile(0, "ca.crt"));
	size_t n = strlen(leaf) + strlen(ca) + 1;
	char *chain = malloc(n);
	snprintf(chain, n, "%s%s", leaf, ca);
	write_file(rfile("forged.crt"), chain);
	free(chain);
	free(leaf);
	free(ca);
}

/* The head is killed and a fake head answers on its port with another
 * certificate of the cluster (see fake_what). w1 must connect, send nothing,
 * run nothing, log head_impostor, and come back to the real head. */
static void fake_head_case(enum fake_kind kind)
{
	const char *chain, *key;
	if (kind == FAKE_FORGED_HEAD) {
		cluster(2, 2);
		forge_head_cert();
		chain = rfile("forged.crt");
		key = rfile("forged.key");
	} else {
		cluster(3, 3);
		if (kind == FAKE_REMOVED)
			node_rm("node-3");
		h_kill(C, 2, SIGKILL); /* node-3 would reach the fake too */
		chain = nfile(2, "node.crt");
		key = nfile(2, "node.key");
	}
	const char *marker = rfile("MARKER");
	char exec_frame[1024], job_frame[1024];
	snprintf(exec_frame, sizeof exec_frame,
		 "{\"v\":1,\"type\":\"exec_start\",\"id\":0,\"exec_id\":1,"
		 "\"argv\":[\"/bin/sh\",\"-c\",\"touch %s\"],\"user\":\"root\"}", marker);
	snprintf(job_frame, sizeof job_frame,
		 "{\"v\":1,\"type\":\"job_start\",\"id\":0,\"job_id\":1,\"node_rank\":0,"
		 "\"argv\":[\"/bin/sh\",\"-c\",\"touch %s\"],\"user\":\"root\"}", marker);
	const char *frames[] = {exec_frame, job_frame, NULL};
	h_kill(C, 0, SIGKILL);
	S = hs_server_start(C->nodes[0].port, chain, key, frames, 4000);
	cr_assert(S, "cannot start the fake head on port %d", C->nodes[0].port);
	long t0 = h_now_ms();
	while (hs_server_accepts(S) == 0 && h_now_ms() - t0 < 15000)
		usleep(50000);
	cr_assert(hs_server_accepts(S) > 0, "w1 never connected to the head's address in 15 s");
	/* give a worker that trusts the fake head time to run what it was sent */
	long t1 = h_now_ms();
	while (!exists(marker) && h_now_ms() - t1 < 3000)
		usleep(50000);
	char *types = hs_server_types(S);
	cr_expect_eq(hs_server_nframes(S), 0,
		     "w1 sent frames to a fake head presenting %s (it must close right after the "
		     "handshake): %s", fake_what[kind], types);
	cr_expect(!hs_server_saw(S, "hello"), "w1 said hello to the fake head");
	free(types);
	cr_assert(!exists(marker),
		  "w1 ran exec_start/job_start (user root) from a fake head presenting %s: %s exists",
		  fake_what[kind], marker);
	cr_expect(log_has(1, "head_impostor"), "w1's log has no head_impostor event");
	hs_server_stop(S);
	S = NULL;
	cr_assert_eq(h_start(C, 0), 0, "the real head did not restart");
	cr_assert(h_wait_state(C, 0, "node-2", "ready", 20000) >= 0,
		  "w1 did not come back to the real head within 20 s");
}

Test(security, worker_refuses_fake_head_with_removed_nodes_cert, .timeout = 90)
{
	fake_head_case(FAKE_REMOVED);
}

Test(security, worker_refuses_fake_head_with_current_members_cert, .timeout = 90)
{
	fake_head_case(FAKE_MEMBER);
}

Test(security, worker_refuses_fake_head_with_forged_head_cert_on_another_key, .timeout = 90)
{
	fake_head_case(FAKE_FORGED_HEAD);
}

/* ---- 1b. join checks the head before sending anything secret ----------------- */

Test(security, join_refuses_a_node_cert_and_sends_nothing)
{
	cluster(3, 2); /* node-3 stays out: it is the joiner "n3" */
	char *tok = make_token(NULL, NULL);
	int port = free_port();
	S = hs_server_start(port, nfile(1, "node.crt"), nfile(1, "node.key"), NULL, 2000);
	cr_assert(S);
	char addr[64];
	snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
	struct h_result r = ctl_t(2, 30, "join", addr, "--token", tok, "--name", "n3", "--timeout",
				  "3s", NULL);
	char *types = hs_server_types(S);
	cr_expect(hs_server_handshakes(S) > 0, "the joiner never completed a handshake with the fake");
	cr_expect(!hs_server_saw_text(S, tok + 87),
		  "the joiner sent the token secret to a server presenting a node certificate");
	cr_assert_eq(hs_server_nframes(S), 0,
		     "the joiner sent frames to a server presenting w1's node certificate: %s", types);
	free(types);
	cr_expect_eq(r.rc, 1, "join exit code %d (want 1): %s", r.rc, r.err);
	cr_expect(strstr(r.err, "is not the head"), "join's message: %s", r.err);
	h_result_free(&r);
	char req[512];
	snprintf(req, sizeof req,
		 "{\"v\":1,\"type\":\"join\",\"id\":1,\"head\":\"%s\",\"token\":\"%s\",\"name\":\"n3\","
		 "\"timeout_s\":3}", addr, tok);
	char *code = ctl_code(C->nodes[2].sock, req, NULL);
	cr_expect_str_eq(code, "not_head", "the join's error code is %s", code);
	cr_expect_eq(hs_server_nframes(S), 0, "the second join sent frames to the fake");
	free(code);
	free(tok);
}

Test(security, join_at_a_workers_port_says_where_the_head_is)
{
	cluster(3, 2);
	char *tok = make_token(NULL, NULL);
	struct h_result r = ctl_t(2, 30, "join", h_addr(C, 1), "--token", tok, "--name", "n3",
				  "--timeout", "3s", NULL);
	cr_expect_eq(r.rc, 1, "join exit code %d (want 1): %s", r.rc, r.err);
	cr_expect(strstr(r.err, "is not the head") && strstr(r.err, h_addr(C, 0)),
		  "join at w1's port (%s) should say it is not the head and that the head is at %s: %s",
		  h_addr(C, 1), h_addr(C, 0), r.err);
	h_result_free(&r);
	/* and the token was not spent by anyone */
	struct h_result l = ctl_t(0, 10, "node", "ls", "-o", "json", NULL);
	cr_assert_eq(l.rc, 0);
	json_t *j = h_json(&l);
	cr_expect(!h_status_node(j, "n3"), "n3 is listed on the head: %s", l.out);
	json_decref(j);
	h_result_free(&l);
	free(tok);
}

/* ---- 1c. revocations reach every node ---------------------------------------- */

Test(security, crl_reaches_an_online_worker_within_3s)
{
	cluster(3, 3);
	char *serial = cert_serial(0, "node-3");
	cr_expect(exists(nfile(0, "crl.pem")), "the head has no crl.pem after init");
	node_rm("node-3");
	long ms = wait_crl(1, serial, 3000);
	char *crl = slurp(nfile(1, "crl.pem"));
	cr_assert(ms >= 0, "w1's crl.pem does not list node-3's serial %s 3 s after node rm (%s)",
		  serial, exists(nfile(1, "crl.pem")) ? "crl.pem exists" : "no crl.pem");
	cr_expect(crl_lists(nfile(0, "crl.pem"), serial), "the head's own crl.pem lacks the serial");
	free(crl);
	free(serial);
}

Test(security, crl_reaches_an_offline_worker_when_it_reconnects)
{
	cluster(3, 3);
	char *serial = cert_serial(0, "node-3");
	h_kill(C, 1, SIGKILL);
	node_rm("node-3");
	cr_assert_eq(h_start(C, 1), 0);
	long ms = wait_crl(1, serial, 5000);
	cr_assert(ms >= 0, "w1's crl.pem does not list node-3's serial %s 5 s after w1 restarted (%s)",
		  serial, exists(nfile(1, "crl.pem")) ? "crl.pem exists" : "no crl.pem");
	free(serial);
}

Test(security, removed_nodes_cert_gets_revoked_from_the_head)
{
	cluster(3, 3);
	h_kill(C, 2, SIGKILL);
	node_rm("node-3");
	struct hs_client *c = CL[0] =
		hs_connect(C->nodes[0].port, nfile(2, "node.crt"), nfile(2, "node.key"), 3000);
	cr_assert(c, "no TLS session with the head using node-3's certificate");
	json_t *f = hs_read_frame(c, 3000);
	cr_assert(f, "the head sent nothing to a removed node's certificate");
	cr_expect_str_eq(json_string_value(json_object_get(f, "type")) ?: "", "error");
	cr_expect_str_eq(json_string_value(json_object_get(f, "code")) ?: "", "revoked");
	json_decref(f);
	cr_expect(hs_wait_closed(c, 3000), "the head did not close the removed node's connection");
}

/* ---- 2. unauthenticated resource limits ---------------------------------------- */

Test(security, unauth_frame_over_16k_refused_before_the_body)
{
	cluster(1, 1);
	struct hs_client *c = CL[0] = hs_connect(C->nodes[0].port, NULL, NULL, 3000);
	cr_assert(c);
	cr_assert_eq(hs_send_header(c, 900 * 1024), 0);
	json_t *f = hs_read_frame(c, 3000);
	cr_assert(f, "no error frame within 3 s of a 900 KiB frame header from an unauthenticated peer "
		     "(the head waits for the body)");
	cr_expect_str_eq(json_string_value(json_object_get(f, "code")) ?: "", "bad_frame");
	json_decref(f);
	cr_expect(hs_wait_closed(c, 1000), "the head did not close after the oversized header");
	/* a join-sized frame is still fine for the next peer */
	struct hs_client *d = CL[1] = hs_connect(C->nodes[0].port, NULL, NULL, 3000);
	cr_assert(d);
	cr_assert_eq(hs_send_frame(d, "{\"v\":1,\"type\":\"heartbeat\",\"id\":0}"), 0);
	f = hs_read_frame(d, 3000);
	cr_assert(f);
	cr_expect_str_eq(json_string_value(json_object_get(f, "code")) ?: "", "unauthenticated");
	json_decref(f);
}

Test(security, unauth_idle_tls_connection_closed_within_6s)
{
	cluster(1, 1);
	long t0 = h_now_ms();
	struct hs_client *c = CL[0] = hs_connect(C->nodes[0].port, NULL, NULL, 3000);
	cr_assert(c);
	bool closed = hs_wait_closed(c, 7000 - (int)(h_now_ms() - t0));
	cr_assert(closed, "an idle unauthenticated TLS connection is still open after %ld ms",
		  h_now_ms() - t0);
	cr_expect(h_now_ms() - t0 >= 3000, "closed after only %ld ms (the deadline is 5 s)",
		  h_now_ms() - t0);
}

Test(security, unauth_one_byte_per_second_sender_closed_within_6s)
{
	cluster(1, 1);
	long t0 = h_now_ms();
	struct hs_client *c = CL[0] = hs_connect(C->nodes[0].port, NULL, NULL, 3000);
	cr_assert(c);
	const char *body = "{\"v\":1,\"type\":\"join\",\"id\":1,\"token_id\":\"0000000000000000\"}";
	uint8_t hdr[4] = {0, 0, 0, (uint8_t)strlen(body)};
	const uint8_t *bytes[2] = {hdr, (const uint8_t *)body};
	size_t lens[2] = {4, strlen(body)}, k = 0, part = 0;
	bool closed = false;
	while (!closed && h_now_ms() - t0 < 7000) {
		if (part < 2) {
			if (hs_send(c, bytes[part] + k, 1) < 0)
				closed = true;
			if (++k == lens[part]) {
				part++;
				k = 0;
			}
		}
		long tick = h_now_ms();
		while (!closed && h_now_ms() - tick < 1000)
			closed = hs_wait_closed(c, 100);
	}
	cr_assert(closed, "a one-byte-a-second sender is still connected after %ld ms",
		  h_now_ms() - t0);
}

static int count_open(int n)
{
	int open = 0;
	for (int i = 0; i < n; i++)
		if (CL[i] && !hs_peer_closed(CL[i]))
			open++;
	return open;
}

Test(security, at_most_64_unauth_sessions_oldest_dropped)
{
	cluster(1, 1);
	int made = 0;
	long t0 = h_now_ms();
	for (int i = 0; i < 200; i++) {
		CL[i] = hs_connect(C->nodes[0].port, NULL, NULL, 3000);
		made += CL[i] != NULL;
		if (i == 100) {
			struct h_result r = ctl_t(0, 5, "status", NULL);
			cr_expect_eq(r.rc, 0, "status while 100 peers hang on: %s", r.err);
			h_result_free(&r);
		}
	}
	long opened = h_now_ms() - t0;
	int open = 0;
	long t1 = h_now_ms();
	do {
		open = count_open(200);
		if (open <= 64)
			break;
		usleep(100000);
	} while (h_now_ms() - t1 < 1500);
	cr_expect_gt(made, 64, "only %d of 200 TLS connections could be opened", made);
	cr_assert_leq(open, 64, "%d of 200 unauthenticated connections are still open (%ld ms to open "
				"them all); at most 64 may be", open, opened);
	/* the newest ones survive (unless the 5 s deadline has passed already) */
	if (h_now_ms() - t0 < 4000)
		cr_expect(CL[199] && !hs_peer_closed(CL[199]), "the newest connection was dropped");
	struct h_result r = ctl_t(0, 5, "status", NULL);
	cr_expect_eq(r.rc, 0, "status after 200 peers: %s", r.err);
	h_result_free(&r);
}

Test(security, unauth_memory_bounded_under_300_big_frames)
{
	cluster(1, 1);
	pid_t pid = C->nodes[0].pid;
	long base = rss_kib(pid);
	cr_assert(base > 0);
	const uint32_t frame = 1000 * 1024;
	const size_t body = frame - 4096; /* most of it, never the end */
	char *junk = malloc(body);
	cr_assert(junk);
	memset(junk, ' ', body);
	long peak = base;
	for (int i = 0; i < 300; i++) {
		CL[i] = hs_connect(C->nodes[0].port, NULL, NULL, 3000);
		if (!CL[i])
			continue;
		hs_set_send_timeout(CL[i], 500);
		if (hs_send_header(CL[i], frame) == 0)
			hs_send(CL[i], junk, body);
		if (i % 20 == 19) {
			long r = rss_kib(pid);
			if (r > peak)
				peak = r;
		}
	}
	free(junk);
	usleep(300000);
	long r = rss_kib(pid);
	if (r > peak)
		peak = r;
	cr_log_info("head VmRSS under 300 unauthenticated 1 MiB frames: %ld -> %ld KiB (peak)", base,
		    peak);
	if (!SPARK_ASAN)
		cr_expect_lt(peak - base, 30 * 1024,
			     "the head's VmRSS went from %ld to %ld KiB (+%ld MiB) under 300 "
			     "unauthenticated 1 MiB frames; it must grow by less than 30 MiB",
			     base, peak, (peak - base) / 1024);
	for (int i = 0; i < 300; i++) {
		hs_close(CL[i]);
		CL[i] = NULL;
	}
	long after = rss_kib(pid), t0 = h_now_ms();
	while (!SPARK_ASAN && after - base >= 30 * 1024 && h_now_ms() - t0 < 5000) {
		usleep(200000);
		after = rss_kib(pid);
	}
	if (!SPARK_ASAN)
		cr_expect_lt(after - base, 30 * 1024,
			     "the head's VmRSS stays at %ld KiB (base %ld) after the peers left", after,
			     base);
	struct h_result s = ctl_t(0, 5, "status", NULL);
	cr_expect_eq(s.rc, 0, "status after the flood: %s", s.err);
	h_result_free(&s);
}

Test(security, authed_session_silent_for_15s_closed_by_head, .timeout = 90)
{
	cluster(2, 2);
	h_kill(C, 1, SIGKILL);
	struct hs_client *c = CL[0] =
		hs_connect(C->nodes[0].port, nfile(1, "node.crt"), nfile(1, "node.key"), 3000);
	cr_assert(c);
	char hello[256];
	snprintf(hello, sizeof hello,
		 "{\"v\":1,\"type\":\"hello\",\"id\":1,\"address\":\"%s\",\"version\":\"0.1.0\"}",
		 h_addr(C, 1));
	cr_assert_eq(hs_send_frame(c, hello), 0);
	json_t *f = hs_read_frame(c, 3000);
	cr_assert(f, "no answer to hello with w1's certificate");
	cr_assert_str_eq(json_string_value(json_object_get(f, "type")) ?: "", "result",
			 "hello was not accepted: %s", json_dumps(f, 0));
	json_decref(f);
	long t0 = h_now_ms();
	bool early = hs_wait_closed(c, 10000);
	cr_assert(!early, "the head closed the authenticated session after only %ld ms of silence",
		  h_now_ms() - t0);
	bool closed = hs_wait_closed(c, 10000);
	cr_assert(closed, "an authenticated session silent for %ld ms is still open (limit 15 s)",
		  h_now_ms() - t0);
}

Test(security, control_socket_caps_at_128_connections)
{
	cluster(1, 1);
	for (int i = 0; i < 128; i++) {
		CL[i] = hs_connect_unix(C->nodes[0].sock);
		cr_assert(CL[i], "control connection %d failed", i + 1);
	}
	/* let the daemon accept them all before the 129th */
	struct hs_client *probe = hs_connect_unix(C->nodes[0].sock);
	for (int t = 0; t < 5 && probe; t++) {
		usleep(200000);
		if (hs_peer_closed(probe))
			break;
	}
	hs_close(probe);
	/* connection 129 asks what sparkctl would ask */
	struct hs_client *c = CL[128] = hs_connect_unix(C->nodes[0].sock);
	cr_assert(c);
	hs_send_frame(c, "{\"v\":1,\"type\":\"status\",\"id\":1}");
	json_t *f = hs_read_frame(c, 3000);
	cr_assert(f, "connection 129 to the control socket got no error frame within 3 s");
	char *ft = json_dumps(f, JSON_COMPACT);
	cr_expect_str_eq(json_string_value(json_object_get(f, "code")) ?: "", "busy",
			 "connection 129 was answered %.160s", ft);
	free(ft);
	json_decref(f);
	cr_expect(hs_wait_closed(c, 2000), "connection 129 was not closed");
	struct h_result busy = ctl_t(0, 10, "status", NULL);
	cr_expect_neq(busy.rc, 0, "status worked with 128 control connections held open");
	h_result_free(&busy);
	for (int i = 0; i <= 128; i++) {
		hs_close(CL[i]);
		CL[i] = NULL;
	}
	long t0 = h_now_ms();
	int rc;
	do {
		struct h_result r = ctl_t(0, 5, "status", NULL);
		rc = r.rc;
		h_result_free(&r);
	} while (rc != 0 && h_now_ms() - t0 < 3000 && usleep(100000) == 0);
	cr_expect_eq(rc, 0, "status does not work again after the 128 connections closed");
}

/* ---- 3. rights: job users vs admins ------------------------------------------- */

static void make_user(bool with_admin_group)
{
	snprintf(USER_NAME, sizeof USER_NAME, "spktest%d", (int)getpid() % 100000);
	snprintf(GROUP_JOB, sizeof GROUP_JOB, "spkjob%d", (int)getpid() % 100000);
	snprintf(GROUP_ADM, sizeof GROUP_ADM, "spkadm%d", (int)getpid() % 100000);
	struct h_result r = run_cmd("/usr/sbin/groupadd", "-r", GROUP_JOB, NULL);
	cr_assert_eq(r.rc, 0, "groupadd: %s", r.err);
	gjob_made = true;
	h_result_free(&r);
	char groups[80];
	snprintf(groups, sizeof groups, "%s", GROUP_JOB);
	if (with_admin_group) {
		r = run_cmd("/usr/sbin/groupadd", "-r", GROUP_ADM, NULL);
		cr_assert_eq(r.rc, 0, "groupadd: %s", r.err);
		gadm_made = true;
		h_result_free(&r);
		snprintf(groups, sizeof groups, "%s,%s", GROUP_JOB, GROUP_ADM);
	}
	r = run_cmd("/usr/sbin/useradd", "-r", "-M", "-N", "-g", GROUP_JOB, "-G", groups, "-s",
		    "/usr/sbin/nologin", USER_NAME, NULL);
	cr_assert_eq(r.rc, 0, "useradd: %s", r.err);
	user_made = true;
	h_result_free(&r);
}

/* sparkctl on node i's socket as the test user. */
static struct h_result as_user(int i, ...)
{
	char *argv[48];
	int n = 0;
	argv[n++] = "/usr/sbin/runuser";
	argv[n++] = "-u";
	argv[n++] = USER_NAME;
	argv[n++] = "--";
	argv[n++] = "/usr/bin/timeout";
	argv[n++] = "20";
	argv[n++] = (char *)h_bin("sparkctl");
	argv[n++] = "--socket";
	argv[n++] = C->nodes[i].sock;
	va_list ap;
	va_start(ap, i);
	char *a;
	while ((a = va_arg(ap, char *)) && n < 46)
		argv[n++] = a;
	va_end(ap);
	argv[n] = NULL;
	return h_run(argv);
}

static void open_socket_to(int i, const char *group)
{
	chmod(C->root, 0711); /* the user must reach the sockets, nothing else */
	struct h_result r = run_cmd("/bin/chgrp", group, C->nodes[i].sock, NULL);
	cr_assert_eq(r.rc, 0, "chgrp: %s", r.err);
	h_result_free(&r);
}

static void expect_forbidden(int i, const char *what, ...)
{
	/* the CLI: exit 1, a message naming admin */
	char *args[8];
	int n = 0;
	va_list ap;
	va_start(ap, what);
	char *a;
	while ((a = va_arg(ap, char *)) && n < 7)
		args[n++] = a;
	va_end(ap);
	args[n] = NULL;
	struct h_result r = as_user(i, args[0], args[1], args[2], args[3], args[4], args[5], NULL);
	cr_expect_eq(r.rc, 1, "job user's `%s` on %s: exit %d (want 1, forbidden): %s%s", what,
		     C->nodes[i].name, r.rc, r.out, r.err);
	cr_expect(strstr(r.err, "admin"), "job user's `%s` on %s: message should say it needs an "
					  "admin: %s", what, C->nodes[i].name, r.err);
	h_result_free(&r);
}

Test(security, job_user_may_run_but_not_administer, .timeout = 90)
{
	make_user(false);
	cluster(2, 2);
	open_socket_to(0, GROUP_JOB);
	open_socket_to(1, GROUP_JOB);
	struct passwd *pw = getpwnam(USER_NAME);
	cr_assert(pw);
	/* a job user runs jobs, as themselves */
	struct h_result jr = as_user(1, "run", "--group", "all", "--", "id", "-u", NULL);
	char uidl[32];
	snprintf(uidl, sizeof uidl, "%d", (int)pw->pw_uid);
	cr_expect(jr.rc == 0 && strstr(jr.out, uidl) && !strstr(jr.out, " 0\n"),
		  "job user's run should run as uid %d: rc %d out '%s' err %s", (int)pw->pw_uid, jr.rc,
		  jr.out, jr.err);
	h_result_free(&jr);
	for (int i = 0; i < 2; i++) {
		char *code = ctl_code(C->nodes[i].sock, "{\"v\":1,\"type\":\"token_create\",\"id\":1}",
				      USER_NAME);
		cr_expect_str_eq(code, "forbidden", "token_create by a job user on %s answered %s",
				 C->nodes[i].name, code);
		free(code);
		expect_forbidden(i, "token create", "token", "create", NULL);
		expect_forbidden(i, "node drain", "node", "drain", "node-2", NULL);
		expect_forbidden(i, "group create", "group", "create", "g1", "--nodes", "node-1", NULL);
		static const char *const allowed[][3] = {{"status", NULL, NULL}, {"version", NULL, NULL},
							{"node", "ls", NULL},     {"node", "show", "node-2"},
							{"group", "ls", NULL},    {"job", "ls", NULL},
							{"model", "ls", NULL}};
		for (size_t k = 0; k < sizeof allowed / sizeof allowed[0]; k++) {
			struct h_result r = as_user(i, allowed[k][0], allowed[k][1], allowed[k][2], NULL);
			cr_expect_eq(r.rc, 0, "job user's `%s %s` on %s: %s", allowed[k][0],
				     allowed[k][1] ?: "", C->nodes[i].name, r.err);
			h_result_free(&r);
		}
		struct h_result r;
		r = as_user(i, "exec", i ? "node-1" : "node-2", "--", "id", "-u", NULL);
		char uid[32];
		snprintf(uid, sizeof uid, "%d\n", (int)pw->pw_uid);
		cr_expect(r.rc == 0 && strcmp(r.out, uid) == 0,
			  "job user's exec via %s should run as uid %d: rc %d out '%s' err %s",
			  C->nodes[i].name, (int)pw->pw_uid, r.rc, r.out, r.err);
		h_result_free(&r);
	}
	/* the other admin requests, raw, as the job user; the destructive ones last */
	static const char *const admin_reqs[] = {
		"{\"v\":1,\"type\":\"token_ls\",\"id\":1}",
		"{\"v\":1,\"type\":\"token_revoke\",\"id\":1,\"token_id\":\"0000000000000000\"}",
		"{\"v\":1,\"type\":\"node_undrain\",\"id\":1,\"node\":\"node-2\"}",
		"{\"v\":1,\"type\":\"group_rm\",\"id\":1,\"name\":\"g1\",\"force\":true}",
		"{\"v\":1,\"type\":\"topo_addresses\",\"id\":1,\"apply\":false}",
		"{\"v\":1,\"type\":\"model_rm_nodes\",\"id\":1,\"name\":\"m\",\"nodes\":[\"node-2\"]}",
		"{\"v\":1,\"type\":\"model_ticket\",\"id\":1,\"push\":\"ab\",\"name\":\"m\","
		"\"chain\":[\"x\",\"y\"]}",
		"{\"v\":1,\"type\":\"model_push_from\",\"id\":1,\"from\":\"node-2\",\"dir\":\"/tmp\","
		"\"name\":\"m\",\"push\":\"ab\",\"ticket\":\"AAAA\",\"expires_at\":1,\"chain\":[]}",
		"{\"v\":1,\"type\":\"node_rm\",\"id\":1,\"node\":\"node-2\"}",
		"{\"v\":1,\"type\":\"leave\",\"id\":1}",
		NULL};
	for (int i = 1; i >= 0; i--)
		for (const char *const *q = admin_reqs; *q; q++) {
			char *code = ctl_code(C->nodes[i].sock, *q, USER_NAME);
			cr_expect_str_eq(code, "forbidden", "job user's %s on %s answered %s", *q,
					 C->nodes[i].name, code);
			free(code);
		}
	/* the drains above must not have happened */
	struct h_result r = ctl_t(0, 10, "status", "-o", "json", NULL);
	json_t *j = h_json(&r);
	const char *st = json_string_value(json_object_get(h_status_node(j, "node-2"), "state"));
	cr_expect_str_eq(st ?: "", "ready", "node-2 state after a job user's drain");
	json_decref(j);
	h_result_free(&r);
}

/* ---- control socket: a local user cannot lock others out (issue 27, item 4) ---- */

#define HOG_IDLE 150 /* HOG_TRICKLE as many */
#define HOG_TRICKLE HOG_IDLE
#define HOG_SECS 30

/* As the test user: open HOG_IDLE idle and HOG_TRICKLE trickling connections
 * (a status request, one byte a second), in turns (even: idle), tell the parent on wfd ("o"), then
 * watch them until all are closed or HOG_SECS pass and report one line per
 * connection: "KIND FIRST_MS CLOSED_MS CODE" (KIND i/t, ms since the opening,
 * CLOSED_MS -1 while open, CODE the error code it was sent or "-"). */
static void hog(const char *sock, int wfd)
{
	enum { N = HOG_IDLE + HOG_TRICKLE };
	static const char req[] = "{\"v\":1,\"type\":\"status\",\"id\":1}";
	uint8_t frame[64];
	size_t flen = sizeof req - 1 + 4;
	frame[0] = frame[1] = frame[2] = 0;
	frame[3] = (uint8_t)(sizeof req - 1);
	memcpy(frame + 4, req, sizeof req - 1);
	struct passwd *pw = getpwnam(USER_NAME);
	if (!pw || initgroups(USER_NAME, pw->pw_gid) < 0 || setgid(pw->pw_gid) < 0 ||
	    setuid(pw->pw_uid) < 0)
		_exit(3);
	int fd[N];
	long first[N], closed[N];
	size_t sent[N];
	char code[N][24];
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
	long t0 = h_now_ms();
	for (int i = 0; i < N; i++) {
		first[i] = closed[i] = -1;
		sent[i] = 0;
		snprintf(code[i], sizeof code[i], "-");
		fd[i] = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd[i] < 0 || connect(fd[i], (struct sockaddr *)&sa, sizeof sa) < 0) {
			closed[i] = h_now_ms() - t0;
			snprintf(code[i], sizeof code[i], "connect");
			continue;
		}
		fcntl(fd[i], F_SETFL, fcntl(fd[i], F_GETFL) | O_NONBLOCK);
	}
	if (write(wfd, "o", 1) != 1)
		_exit(4);
	long next_tick = 0;
	for (;;) {
		long now = h_now_ms() - t0;
		int open = 0;
		for (int i = 0; i < N; i++)
			open += closed[i] < 0;
		if (!open || now > HOG_SECS * 1000)
			break;
		if (now >= next_tick) { /* one byte more of each trickling request */
			next_tick = now + 1000;
			for (int i = 1; i < N; i += 2) {
				if (closed[i] >= 0 || sent[i] >= flen)
					continue;
				if (send(fd[i], frame + sent[i], 1, MSG_NOSIGNAL) == 1) {
					if (!sent[i])
						first[i] = now;
					sent[i]++;
				}
			}
		}
		struct pollfd pf[N];
		int map[N], np = 0;
		for (int i = 0; i < N; i++)
			if (closed[i] < 0) {
				pf[np] = (struct pollfd){.fd = fd[i], .events = POLLIN};
				map[np++] = i;
			}
		int wait = (int)(next_tick - now);
		if (poll(pf, np, wait > 0 ? wait : 0) <= 0)
			continue;
		for (int k = 0; k < np; k++) {
			if (!pf[k].revents)
				continue;
			int i = map[k];
			char buf[4096];
			ssize_t r = recv(fd[i], buf, sizeof buf - 1, 0);
			if (r > 0) {
				buf[r] = '\0'; /* frames: their length words hold NULs */
				char *c = memmem(buf, (size_t)r, "\"code\":\"", 8);
				if (c && strcmp(code[i], "-") == 0)
					sscanf(c + 8, "%23[^\"]", code[i]);
				continue;
			}
			if (r < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			closed[i] = h_now_ms() - t0;
		}
	}
	FILE *out = fdopen(wfd, "w");
	for (int i = 0; out && i < N; i++)
		fprintf(out, "%c %ld %ld %s\n", i % 2 ? 't' : 'i', first[i], closed[i], code[i]);
	if (out)
		fclose(out);
	_exit(0);
}

Test(security, control_socket_user_with_300_idle_and_trickling_connections_locks_nobody_out,
     .timeout = 120)
{
	make_user(false);
	cluster(1, 1);
	open_socket_to(0, GROUP_JOB);
	int pfd[2];
	cr_assert_eq(pipe(pfd), 0);
	HOG = fork();
	cr_assert(HOG >= 0);
	if (HOG == 0) {
		close(pfd[0]);
		hog(C->nodes[0].sock, pfd[1]);
	}
	close(pfd[1]);
	char o;
	cr_assert_eq(read(pfd[0], &o, 1), 1, "the user's process could not open its connections");
	long t0 = h_now_ms();
	/* root gets in while the user holds 300 connections */
	for (int k = 0; k < 3; k++) {
		long s0 = h_now_ms();
		struct h_result r = ctl_t(0, 10, "status", NULL);
		cr_expect_eq(r.rc, 0,
			     "root's `sparkctl status` %.1f s after a user opened %d idle and %d "
			     "trickling control connections: exit %d (%.1f s): %s",
			     (s0 - t0) / 1000.0, HOG_IDLE, HOG_TRICKLE, r.rc,
			     (h_now_ms() - s0) / 1000.0, r.err);
		h_result_free(&r);
		usleep(500000);
	}
	/* the user's own request works once its idle connections are closed */
	struct h_result v = {0};
	long tv = 0;
	do {
		h_result_free(&v);
		v = as_user(0, "version", NULL);
		tv = h_now_ms() - t0;
	} while (v.rc != 0 && tv < 25000 && usleep(500000) == 0);
	cr_expect_eq(v.rc, 0, "the user's own `sparkctl version` still fails %.1f s later: %s",
		     tv / 1000.0, v.err);
	h_result_free(&v);
	/* every connection was closed: trickling ones within the 5 s request
	 * deadline of their first byte, idle ones within the 10 s idle timeout
	 * (+ the 1 s sweep), each with 4 s of slack for a loaded machine */
	FILE *in = fdopen(pfd[0], "r");
	cr_assert(in);
	int n = 0, late_t = 0, late_i = 0, n_timeout = 0, n_idle = 0, n_busy = 0;
	char kind, code[32], late[256] = "";
	long first, closed;
	while (fscanf(in, " %c %ld %ld %31s", &kind, &first, &closed, code) == 4) {
		n++;
		n_timeout += strcmp(code, "timeout") == 0;
		n_idle += strcmp(code, "idle_timeout") == 0;
		n_busy += strcmp(code, "busy") == 0;
		if (getenv("SPARK_TEST_VERBOSE"))
			fprintf(stderr, "%c %ld %ld %s\n", kind, first, closed, code);
		bool bad = kind == 't' ? closed < 0 || (first >= 0 && closed - first > 9000)
				       : closed < 0 || closed > 15000;
		if (bad && !late[0])
			snprintf(late, sizeof late, "%s connection: first byte at %ld ms, closed at %ld ms (-1: "
				 "open after %d s), code %s", kind == 't' ? "a trickling" : "an idle",
				 first, closed, HOG_SECS, code);
		if (bad)
			*(kind == 't' ? &late_t : &late_i) += 1;
	}
	fclose(in);
	waitpid(HOG, NULL, 0);
	HOG = 0;
	cr_assert_eq(n, HOG_IDLE + HOG_TRICKLE, "the user's process reported %d connections", n);
	cr_expect_eq(late_t, 0, "%d trickling connections outlived the request deadline; e.g. %s",
		     late_t, late);
	cr_expect_eq(late_i, 0, "%d idle connections outlived the idle timeout; e.g. %s", late_i,
		     late);
	cr_expect(n_timeout > 0 && n_idle > 0 && n_busy > 0,
		  "the connections were not told why they were closed: %d timeout, %d idle_timeout, "
		  "%d busy", n_timeout, n_idle, n_busy);
	cr_expect(log_has(0, "control_busy") && log_has(0, "conn_frame_timeout") &&
		  log_has(0, "control_idle"), "sparkd's log does not say why it closed them");
}

/* A request in flight is never idle: svc_watch (spark-router's subscription,
 * stream frames only) outlives the 10 s idle timeout, while a connection that
 * sent nothing beside it is closed with idle_timeout. */
Test(security, control_stream_outlives_the_idle_timeout, .timeout = 60)
{
	cluster(1, 1);
	struct hs_client *w = CL[0] = hs_connect_unix(C->nodes[0].sock);
	struct hs_client *idle = CL[1] = hs_connect_unix(C->nodes[0].sock);
	cr_assert(w && idle);
	cr_assert_eq(hs_send_frame(w, "{\"v\":1,\"type\":\"svc_watch\",\"id\":7}"), 0);
	json_t *f = hs_read_frame(w, 5000);
	cr_assert(f, "no snapshot from svc_watch");
	cr_assert_str_eq(json_string_value(json_object_get(f, "type")) ?: "", "stream");
	json_decref(f);
	long t0 = h_now_ms();
	json_t *e = hs_read_frame(idle, 20000);
	long dt = h_now_ms() - t0;
	cr_assert(e, "the idle connection got no frame within 20 s");
	cr_expect_str_eq(json_string_value(json_object_get(e, "code")) ?: "", "idle_timeout");
	json_decref(e);
	cr_expect(hs_wait_closed(idle, 3000), "the idle connection was not closed");
	cr_expect(dt >= 8000, "the idle connection was closed after %ld ms (idle timeout 10 s)", dt);
	usleep(1500000); /* a sweep after the idle one's */
	cr_expect(!hs_peer_closed(w), "svc_watch's connection was closed with the idle ones");
}

Test(security, admin_group_member_may_administer, .timeout = 90)
{
	make_user(true);
	C = h_cluster_new(2);
	char cfg[256];
	snprintf(cfg, sizeof cfg, "security:\n  admin_group: %s\n", GROUP_ADM);
	write_file(rfile("sparkd.yaml"), cfg);
	for (int i = 0; i < 2; i++) {
		int r = h_start_cfg(C, i, rfile("sparkd.yaml"));
		char *l = r ? slurp(C->nodes[i].log) : strdup("");
		cr_assert_eq(r, 0, "sparkd with security.admin_group did not start: %s", l);
		free(l);
	}
	char *tok = h_init(C);
	join_node(1, tok);
	free(tok);
	open_socket_to(0, GROUP_JOB);
	open_socket_to(1, GROUP_JOB);
	for (int i = 0; i < 2; i++) {
		struct h_result r = as_user(i, "token", "create", "-o", "json", NULL);
		cr_expect_eq(r.rc, 0, "token create by a member of admin group %s via %s: %s", GROUP_ADM,
			     C->nodes[i].name, r.err);
		h_result_free(&r);
	}
}

/* ---- 4a. join crash window -------------------------------------------------------- */

static char *gen_csr(const char *keypath, const char *cn)
{
	struct h_result r = run_cmd("/usr/bin/openssl", "ecparam", "-name", "prime256v1", "-genkey",
				    "-noout", "-out", keypath, NULL);
	cr_assert_eq(r.rc, 0, "openssl ecparam: %s", r.err);
	h_result_free(&r);
	chmod(keypath, 0600);
	char subj[80];
	snprintf(subj, sizeof subj, "/CN=%s", cn);
	r = run_cmd("/usr/bin/openssl", "req", "-new", "-key", keypath, "-subj", subj, "-out",
		    rfile("csr.pem"), NULL);
	cr_assert_eq(r.rc, 0, "openssl req: %s", r.err);
	h_result_free(&r);
	return slurp(rfile("csr.pem"));
}

/* A join frame sent by a raw client that closes without reading the answer. */
static void raw_join(const char *tok, const char *name, const char *csr, int port)
{
	char tid[17], secret[33], addr[64];
	memcpy(tid, tok + 70, 16);
	tid[16] = '\0';
	memcpy(secret, tok + 87, 32);
	secret[32] = '\0';
	snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
	json_t *m = json_pack("{s:i, s:s, s:i, s:s, s:s, s:s, s:s, s:s, s:s}", "v", 1, "type", "join",
			      "id", 1, "token_id", tid, "secret", secret, "name", name, "csr", csr,
			      "address", addr, "version", "0.1.0");
	char *text = json_dumps(m, JSON_COMPACT);
	json_decref(m);
	struct hs_client *c = hs_connect(C->nodes[0].port, NULL, NULL, 3000);
	cr_assert(c);
	cr_assert_eq(hs_send_frame(c, text), 0);
	free(text);
	usleep(300000); /* the head reads it; the answer is never read */
	hs_close(c);
}

static const char *node_state(const char *name)
{
	static char st[32];
	struct h_result r = ctl_t(0, 10, "node", "ls", "-o", "json", NULL);
	cr_assert_eq(r.rc, 0, "node ls: %s", r.err);
	json_t *j = h_json(&r);
	json_t *n = h_status_node(j, name);
	snprintf(st, sizeof st, "%s", n ? json_string_value(json_object_get(n, "state")) ?: "?" : "");
	json_decref(j);
	h_result_free(&r);
	return st[0] ? st : NULL;
}

static char *pubkey_of(const char *keypath)
{
	struct h_result r = run_cmd("/usr/bin/openssl", "pkey", "-in", keypath, "-pubout", NULL);
	cr_assert_eq(r.rc, 0, "openssl pkey %s: %s", keypath, r.err);
	free(r.err);
	return r.out;
}

Test(security, join_answer_lost_then_retried_completes_with_single_use_token, .timeout = 90)
{
	C = h_cluster_new(2); /* node-2 ("n3") is started later, by hand */
	cr_assert_eq(h_start(C, 0), 0);
	char *tok0 = h_init(C);
	free(tok0);
	char id[64];
	char *tok = make_token("1", id);
	cr_assert_eq(mkdir(C->nodes[1].dir, 0700), 0);
	char *csr = gen_csr(nfile(1, "join.key"), "n3");
	char *pub = pubkey_of(nfile(1, "join.key"));
	raw_join(tok, "n3", csr, C->nodes[1].port);
	long t0 = h_now_ms();
	const char *st;
	while (!(st = node_state("n3")) && h_now_ms() - t0 < 3000)
		usleep(100000);
	cr_assert(st, "the head does not list n3 after its join");
	cr_expect_str_eq(st, "joining", "a join that never connected is shown as %s by node ls", st);
	struct h_result sr = ctl_t(0, 10, "status", "-o", "json", NULL);
	cr_assert_eq(sr.rc, 0, "status: %s", sr.err);
	json_t *sj = h_json(&sr);
	const char *sst = json_string_value(json_object_get(h_status_node(sj, "n3"), "state"));
	cr_expect_str_eq(sst ?: "(absent)", "joining", "status shows the unconnected n3 as %s",
			 sst ?: "(absent)");
	json_decref(sj);
	h_result_free(&sr);
	cr_assert_eq(h_start(C, 1), 0);
	struct h_result r = ctl_t(1, 30, "join", h_addr(C, 0), "--token", tok, "--name", "n3",
				  "--timeout", "5s", NULL);
	cr_assert_eq(r.rc, 0, "the retried join (same token, name and key) failed: %s", r.err);
	h_result_free(&r);
	cr_assert(h_wait_state(C, 0, "n3", "ready", 10000) >= 0, "n3 did not become ready");
	cr_expect(!exists(nfile(1, "join.key")), "join.key is still there after the join completed");
	cr_assert(exists(nfile(1, "node.key")), "no node.key after the join");
	char *npub = pubkey_of(nfile(1, "node.key"));
	cr_expect_str_eq(npub, pub, "node.key is not the key of join.key");
	free(npub);
	free(pub);
	free(csr);
	free(tok);
}

Test(security, ghost_join_expires_and_returns_the_tokens_use, .timeout = 60)
{
	C = h_cluster_new(1);
	write_file(rfile("sparkd.yaml"), "security:\n  join_expire_s: 2\n");
	int rs = h_start_cfg(C, 0, rfile("sparkd.yaml"));
	char *l = rs ? slurp(C->nodes[0].log) : strdup("");
	cr_assert_eq(rs, 0, "sparkd with security.join_expire_s did not start: %s", l);
	free(l);
	char *tok0 = h_init(C);
	free(tok0);
	char id[64];
	char *tok = make_token("1", id);
	char *csr = gen_csr(rfile("ghost.key"), "ghost");
	raw_join(tok, "ghost", csr, free_port());
	cr_expect(node_state("ghost"), "ghost is not listed right after its join");
	long t0 = h_now_ms();
	while (node_state("ghost") && h_now_ms() - t0 < 5000)
		usleep(200000);
	cr_assert(!node_state("ghost"), "ghost (never connected) is still listed %ld ms later, state %s",
		  h_now_ms() - t0, node_state("ghost"));
	struct h_result r = ctl_t(0, 10, "token", "ls", "-o", "json", NULL);
	cr_assert_eq(r.rc, 0);
	json_t *j = h_json(&r), *t;
	size_t i;
	long long left = -99;
	json_array_foreach(json_object_get(j, "tokens"), i, t)
		if (strcmp(json_string_value(json_object_get(t, "id")) ?: "", id) == 0)
			left = (long long)json_integer_value(json_object_get(t, "uses_left"));
	cr_expect_eq(left, 1, "the token's uses_left after the ghost expired: %lld (%s)", left, r.out);
	json_decref(j);
	h_result_free(&r);
	free(csr);
	free(tok);
}

/* ---- 4c. oversized requests refused up front --------------------------------------- */

Test(security, run_with_200k_of_arguments_refused_at_once)
{
	cluster(2, 2);
	/* one argv string may not exceed 128 KiB (MAX_ARG_STRLEN): four of 50 KiB */
	char *arg[4];
	for (int i = 0; i < 4; i++) {
		arg[i] = malloc(50 * 1024 + 1);
		memset(arg[i], 'a' + i, 50 * 1024);
		arg[i][50 * 1024] = '\0';
	}
	long t0 = h_now_ms();
	struct h_result r = ctl_t(0, 20, "run", "--group", "all", "--", "/bin/echo", arg[0], arg[1],
				  arg[2], arg[3], NULL);
	long ms = h_now_ms() - t0;
	for (int i = 0; i < 4; i++)
		free(arg[i]);
	cr_expect_lt(ms, 5000, "run with 200 KiB of arguments took %ld ms", ms);
	cr_expect_neq(r.rc, 0, "run with 200 KiB of arguments was accepted (exit 0)");
	cr_expect(strstr(r.err, "too large"), "run's message should say the job is too large (rc %d): "
					      "%.300s", r.rc, r.err);
	h_result_free(&r);
}

Test(security, control_request_over_256k_refused)
{
	cluster(1, 1);
	/* a status request padded to 300 KiB: under the old 1 MiB limit, over 256 KiB */
	size_t pad = 300 * 1024;
	char *req = malloc(pad + 128);
	cr_assert(req);
	int n = snprintf(req, 128, "{\"v\":1,\"type\":\"status\",\"id\":1,\"pad\":\"");
	memset(req + n, 'x', pad);
	strcpy(req + n + pad, "\"}");
	struct hs_client *c = CL[0] = hs_connect_unix(C->nodes[0].sock);
	cr_assert(c);
	hs_send_frame(c, req); /* may fail half-way once the daemon has refused the header */
	free(req);
	json_t *f = hs_read_frame(c, 3000);
	cr_assert(f, "no answer to a 300 KiB control request within 3 s");
	char *txt = json_dumps(f, JSON_COMPACT);
	cr_expect_str_eq(json_string_value(json_object_get(f, "type")) ?: "", "error",
			 "a 300 KiB control request (limit 256 KiB) was answered %.200s", txt);
	free(txt);
	json_decref(f);
	cr_expect(hs_wait_closed(c, 2000), "the daemon kept the connection after the oversized request");
}

/* A control request whose field has the wrong type is refused, on the node
 * that serves it and on the head for a forwarded one: never read as its
 * default (a "ttl_s":"5" token used to live for a day). */
Test(security, control_request_with_a_mistyped_field_is_refused)
{
	cluster(2, 2);
	static const char *const bad[] = {
		"{\"v\":1,\"type\":\"token_create\",\"id\":1,\"ttl_s\":\"5\"}",
		"{\"v\":1,\"type\":\"token_create\",\"id\":1,\"uses\":true}",
		"{\"v\":1,\"type\":\"node_drain\",\"id\":1,\"node\":7}",
		"{\"v\":1,\"type\":\"node_show\",\"id\":1}",
		"{\"v\":1,\"type\":\"token_revoke\",\"id\":1,\"token_id\":[]}",
	};
	for (int i = 0; i < 2; i++) /* the head, and a worker that forwards */
		for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
			char *code = ctl_code(C->nodes[i].sock, bad[k], NULL);
			cr_expect_str_eq(code, "bad_request", "node %d: %s was answered %s", i, bad[k],
					 code);
			free(code);
		}
	char *ok = ctl_code(C->nodes[1].sock,
			    "{\"v\":1,\"type\":\"token_create\",\"id\":1,\"ttl_s\":60,\"uses\":1}", NULL);
	cr_expect_str_eq(ok, "ok", "a well-typed token_create was answered %s", ok);
	free(ok);
	struct h_result r = ctl_t(0, 10, "token", "ls", "-o", "json", NULL);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	json_t *j = h_json(&r);
	cr_expect_eq(json_array_size(json_object_get(j, "tokens")), 2,
		     "only init's token and the well-typed one exist");
	json_decref(j);
	h_result_free(&r);
}

/* A member's frames name objects of the cluster: the head acts on one only
 * when the sender owns it (issue 15). node-3 (its real certificate, its
 * sparkd stopped) blasts forged output and exits at every tail and job id
 * while node-1 runs a job on node-1 and node-2: the job's output is its own
 * and its exit code its own. A frame the head only ever sends (job_start) is
 * refused with unknown_type, and the session is still served afterwards. */
struct blast {
	struct hs_client *c;
	volatile bool stop;
	int sent;
};

static void *blast_run(void *arg)
{
	struct blast *b = arg;
	char f[512];
	while (!b->stop) {
		for (int id = 1; id <= 16 && !b->stop; id++) {
			snprintf(f, sizeof f,
				 "{\"v\":1,\"type\":\"job_data\",\"id\":0,\"tail_id\":%d,\"offset\":0,"
				 "\"data\":\"INJECTED-%d\\n\",\"eof\":false}", id, id);
			if (hs_send_frame(b->c, f) < 0)
				return NULL;
			snprintf(f, sizeof f,
				 "{\"v\":1,\"type\":\"job_exit\",\"id\":0,\"job_id\":%d,\"rank\":%d,"
				 "\"exit_code\":7,\"signal\":0}", id, id % 2);
			if (hs_send_frame(b->c, f) < 0)
				return NULL;
			b->sent += 2;
		}
		usleep(20000);
	}
	return NULL;
}

Test(security, member_frames_act_only_on_what_the_sender_owns, .timeout = 90)
{
	cluster(3, 3);
	struct h_result g = ctl_t(0, 10, "group", "create", "g12", "--nodes", "node-1,node-2", NULL);
	cr_assert_eq(g.rc, 0, "group create: %s", g.err);
	h_result_free(&g);
	h_kill(C, 2, SIGTERM);
	cr_assert(h_wait_state(C, 0, "node-3", "unreachable", 20000) >= 0,
		  "node-3 did not become unreachable after its sparkd stopped");
	struct hs_client *m = hs_connect(C->nodes[0].port, nfile(2, "node.crt"), nfile(2, "node.key"),
					 5000);
	cr_assert(m, "cannot connect to the head with node-3's certificate");
	cr_assert_eq(hs_send_frame(m, "{\"v\":1,\"type\":\"hello\",\"id\":1,\"version\":\"x\"}"), 0);
	json_t *hello = hs_read_frame(m, 5000);
	cr_assert(hello && strcmp(json_string_value(json_object_get(hello, "type")) ?: "", "result") == 0,
		  "the head did not answer node-3's hello");
	json_decref(hello);
	/* a frame only the head sends */
	cr_assert_eq(hs_send_frame(m, "{\"v\":1,\"type\":\"job_start\",\"id\":5,\"job\":{}}"), 0);
	json_t *e = hs_read_frame(m, 5000);
	cr_expect(e && strcmp(json_string_value(json_object_get(e, "code")) ?: "", "unknown_type") == 0,
		  "a member's job_start should be refused as unknown_type");
	json_decref(e);

	struct blast b = {.c = m};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, blast_run, &b), 0);
	struct h_result r = ctl_t(0, 40, "run", "--group", "g12", "--", "sh", "-c",
				  "sleep 2; echo real-$SPARK_RANK; if [ \"$SPARK_RANK\" = 0 ]; then sleep 1; "
				  "exit 3; fi", NULL);
	b.stop = true;
	pthread_join(th, NULL);
	cr_expect(b.sent > 50, "the forged frames were not sent (%d)", b.sent);
	cr_expect(strstr(r.out, "real-0") && strstr(r.out, "real-1"),
		  "the job's own output is missing (a forged job_exit ended it?): %s / %s", r.out,
		  r.err);
	cr_expect(!strstr(r.out, "INJECTED") && !strstr(r.err, "INJECTED"),
		  "node-3 injected output into a job it has no rank of: %s", r.out);
	cr_expect_eq(r.rc, 3, "rank 0 exits 3 (rank 1 0): sparkctl run must exit 3, not %d", r.rc);
	h_result_free(&r);
	/* the session still works: a heartbeat, then a request */
	cr_expect_eq(hs_send_frame(m, "{\"v\":1,\"type\":\"heartbeat\",\"id\":0}"), 0);
	hs_close(m);
}

/* job_env (issue 21, `sparkctl env --node-list`): a caller on a node's control
 * socket gets bad_request for every mistyped or out-of-range field, on the
 * head and through a worker (whose relay the head checks again: node names
 * that are not strings, too many of them, ranks out of range pass the
 * worker's type check and must stop at the head), not_found for a name not in
 * the cluster and not_in_list when the asking node is not listed; and a
 * well-formed one works from both. */
Test(security, job_env_hostile_requests_are_refused, .timeout = 90)
{
	cluster(2, 2);
	char many[4096];
	size_t o = (size_t)snprintf(many, sizeof many, "{\"v\":1,\"type\":\"job_env\",\"id\":1,\"nodes\":[");
	for (int i = 0; i < 65; i++)
		o += (size_t)snprintf(many + o, sizeof many - o, "%s\"%s\"", i ? "," : "", C->nodes[0].name);
	snprintf(many + o, sizeof many - o, "]}");
	const char *bad[] = {
		"{\"v\":1,\"type\":\"job_env\",\"id\":1}",
		"{\"v\":1,\"type\":\"job_env\",\"id\":1,\"nodes\":\"n1\"}",
		"{\"v\":1,\"type\":\"job_env\",\"id\":1,\"nodes\":[1,2]}",
		"{\"v\":1,\"type\":\"job_env\",\"id\":1,\"nodes\":[]}",
		"{\"v\":1,\"type\":\"job_env\",\"id\":1,\"nodes\":[\"\"]}",
		"{\"v\":1,\"type\":\"job_env\",\"id\":1,\"nodes\":[\"x\"],\"rank\":\"0\"}",
		"{\"v\":1,\"type\":\"job_env\",\"id\":1,\"nodes\":[\"x\"],\"job_id\":-5}",
		"{\"v\":1,\"type\":\"job_env\",\"id\":1,\"nodes\":[\"x\"],\"local_rank\":1000000}",
		"{\"v\":1,\"type\":\"job_env\",\"id\":1,\"nodes\":[\"x\"],\"ranks_per_node\":0}",
		"{\"v\":1,\"type\":\"job_env\",\"id\":1,\"nodes\":[\"x\"],\"group\":[]}",
		many,
	};
	for (int i = 0; i < 2; i++)
		for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
			char *code = ctl_code(C->nodes[i].sock, bad[k], NULL);
			cr_expect_str_eq(code, "bad_request", "node %d: %.120s was answered %s", i, bad[k],
					 code);
			free(code);
		}
	char req[512];
	for (int i = 0; i < 2; i++) {
		snprintf(req, sizeof req, "{\"v\":1,\"type\":\"job_env\",\"id\":1,\"nodes\":[\"%s\",\"nonode\"]}",
			 C->nodes[i].name);
		char *code = ctl_code(C->nodes[i].sock, req, NULL);
		cr_expect_str_eq(code, "not_found", "node %d: an unknown name was answered %s", i, code);
		free(code);
		snprintf(req, sizeof req, "{\"v\":1,\"type\":\"job_env\",\"id\":1,\"nodes\":[\"%s\"]}",
			 C->nodes[1 - i].name);
		code = ctl_code(C->nodes[i].sock, req, NULL);
		cr_expect_str_eq(code, "not_in_list", "node %d: a list without it was answered %s", i,
				 code);
		free(code);
		snprintf(req, sizeof req,
			 "{\"v\":1,\"type\":\"job_env\",\"id\":1,\"nodes\":[\"%s\",\"%s\"],\"rank\":%d}",
			 C->nodes[0].name, C->nodes[1].name, i);
		code = ctl_code(C->nodes[i].sock, req, NULL);
		cr_expect_str_eq(code, "ok", "node %d: a well-formed job_env was answered %s", i, code);
		free(code);
	}
}

/* Services (issue 19, docs/serving.md): only the node that runs rank 0 of a
 * service's current run reports its health. node-3 (rank 1 of a service on
 * node-2,node-3) and node-4 (no rank) send svc_health "ok" over sessions with
 * their real certificates: ignored, the service stays starting with no
 * models. The same frame from node-2 (rank 0) is taken: the control that
 * shows the frames were well formed. A job user cannot stop or remove root's
 * service (forbidden, by the CLI and raw); root (its owner) can. */
static void forge_health(int i, const char *service, long long run, const char *model)
{
	struct hs_client *m = hs_connect(C->nodes[0].port, nfile(i, "node.crt"), nfile(i, "node.key"),
					 5000);
	cr_assert(m, "cannot connect to the head with %s's certificate", C->nodes[i].name);
	cr_assert_eq(hs_send_frame(m, "{\"v\":1,\"type\":\"hello\",\"id\":1,\"version\":\"x\"}"), 0);
	json_t *hello = hs_read_frame(m, 5000);
	cr_assert(hello, "the head did not answer %s's hello", C->nodes[i].name);
	json_decref(hello);
	char f[512];
	snprintf(f, sizeof f,
		 "{\"v\":1,\"type\":\"svc_health\",\"id\":0,\"service\":\"%s\",\"run\":%lld,"
		 "\"ok\":true,\"code\":200,\"models\":[\"%s\"]}", service, run, model);
	cr_assert_eq(hs_send_frame(m, f), 0);
	/* and one naming a run that is not the current one */
	snprintf(f, sizeof f,
		 "{\"v\":1,\"type\":\"svc_health\",\"id\":0,\"service\":\"%s\",\"run\":%lld,"
		 "\"ok\":true,\"code\":200,\"models\":[\"%s-old\"]}", service, run + 1000, model);
	cr_assert_eq(hs_send_frame(m, f), 0);
	/* a heartbeat answered afterwards: the frames before it were handled */
	cr_assert_eq(hs_send_frame(m, "{\"v\":1,\"type\":\"heartbeat\",\"id\":0}"), 0);
	usleep(500 * 1000);
	hs_close(m);
}

static json_t *svc_show_json(const char *name)
{
	struct h_result r = ctl_t(0, 10, "svc", "show", name, "-o", "json", NULL);
	json_t *j = r.rc == 0 ? h_json(&r) : NULL;
	h_result_free(&r);
	return j;
}

Test(security, svc_health_only_from_rank0_and_stop_only_by_owner, .timeout = 120)
{
	make_user(false);
	cluster(4, 4);
	open_socket_to(0, GROUP_JOB);
	struct h_result r = ctl_t(0, 10, "group", "create", "g23", "--nodes", "node-2,node-3", NULL);
	cr_assert_eq(r.rc, 0, "group create: %s", r.err);
	h_result_free(&r);
	write_file(rfile("s1.yaml"), "name: s1\nruntime: command\nmodel: none\nport: 18999\n"
				    "command: [sleep, \"600\"]\nmemory: \"1\"\n");
	r = ctl_t(0, 20, "serve", rfile("s1.yaml"), "--group", "g23", "-o", "json", NULL);
	cr_assert_eq(r.rc, 0, "serve: %s", r.err);
	json_t *j = h_json(&r);
	long long run = (long long)json_integer_value(json_object_get(j, "run"));
	cr_assert_gt(run, 0, "the service has a run");
	json_decref(j);
	h_result_free(&r);

	forge_health(2, "s1", run, "forged-by-rank1");
	forge_health(3, "s1", run, "forged-by-outsider");
	j = svc_show_json("s1");
	cr_assert(j);
	cr_expect_str_eq(json_string_value(json_object_get(j, "state")) ?: "", "starting",
			 "another node's svc_health changed the state");
	cr_expect_eq(json_array_size(json_object_get(json_object_get(j, "endpoint"), "models")), 0,
		     "another node's svc_health set the models");
	json_decref(j);
	cr_expect(log_has(0, "type=svc_health service=\"s1\"") || log_has(0, "type=svc_health service=s1"),
		  "the head logs the refused frames");

	forge_health(1, "s1", run, "from-rank0");
	j = svc_show_json("s1");
	cr_assert(j);
	const char *st = json_string_value(json_object_get(j, "state")) ?: "";
	cr_expect(strcmp(st, "ready") == 0 || strcmp(st, "unhealthy") == 0,
		  "rank 0's report was not taken (state %s)", st);
	json_t *models = json_object_get(json_object_get(j, "endpoint"), "models");
	cr_expect_str_eq(json_string_value(json_array_get(models, 0)) ?: "", "from-rank0");
	json_decref(j);

	/* a job user may look, not stop or remove */
	r = as_user(0, "svc", "ls", NULL);
	cr_expect_eq(r.rc, 0, "a job user's svc ls: %s", r.err);
	h_result_free(&r);
	r = as_user(0, "svc", "stop", "s1", NULL);
	cr_expect_eq(r.rc, 1, "a job user's svc stop of root's service: exit %d: %s", r.rc, r.err);
	cr_expect(strstr(r.err, "owner"), "the message says who may: %s", r.err);
	h_result_free(&r);
	static const char *const reqs[] = {
		"{\"v\":1,\"type\":\"svc_stop\",\"id\":1,\"name\":\"s1\"}",
		"{\"v\":1,\"type\":\"svc_restart\",\"id\":1,\"name\":\"s1\"}",
		"{\"v\":1,\"type\":\"svc_rm\",\"id\":1,\"name\":\"s1\"}", NULL};
	for (const char *const *q = reqs; *q; q++) {
		char *code = ctl_code(C->nodes[0].sock, *q, USER_NAME);
		cr_expect_str_eq(code, "forbidden", "a job user's %s answered %s", *q, code);
		free(code);
	}
	j = svc_show_json("s1");
	cr_expect(j && json_is_integer(json_object_get(j, "run")) &&
		  json_integer_value(json_object_get(j, "run")) == run, "the service was changed");
	json_decref(j);
	r = ctl_t(0, 30, "svc", "stop", "s1", "-o", "json", NULL);
	cr_expect_eq(r.rc, 0, "the owner's svc stop: %s", r.err);
	j = r.rc == 0 ? h_json(&r) : NULL;
	cr_expect_str_eq(json_string_value(json_object_get(j, "state")) ?: "", "stopped");
	json_decref(j);
	h_result_free(&r);
}

/* node's "mem" in status -o json of the head (a new reference, NULL if none). */
static json_t *mem_of(const char *node)
{
	struct h_result r = ctl_t(0, 10, "status", "-o", "json", NULL);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	json_t *j = h_json(&r);
	json_t *m = json_object_get(h_status_node(j, node), "mem");
	m = json_is_object(m) ? json_incref(m) : NULL;
	json_decref(j);
	h_result_free(&r);
	return m;
}

/* Memory reports (issue 19) are a member's own: node-2 (its certificate, its
 * sparkd stopped) reports one good figure, then blasts reports that are not
 * memory (available over total, negative, a budget of 0, strings, 2^62
 * bytes, an array): the head keeps node-2's last good report; a report that
 * names node-1 is node-2's, node-1's own figures are untouched; and the
 * session still works. */
Test(security, memory_reports_are_checked_and_only_the_senders, .timeout = 90)
{
	cluster(2, 2);
	cr_assert(h_wait_state(C, 0, "node-2", "ready", 15000) >= 0);
	h_kill(C, 1, SIGTERM);
	cr_assert(h_wait_state(C, 0, "node-2", "unreachable", 20000) >= 0);
	json_t *head_before = mem_of("node-1");
	cr_assert(head_before, "the head's own node has no memory report");
	struct hs_client *m = hs_connect(C->nodes[0].port, nfile(1, "node.crt"), nfile(1, "node.key"),
					 5000);
	cr_assert(m, "cannot connect to the head with node-2's certificate");
	cr_assert_eq(hs_send_frame(m, "{\"v\":1,\"type\":\"hello\",\"id\":1,\"version\":\"x\",\"mem\":"
				      "{\"total\":1000000000,\"available\":500000000,\"budget\":"
				      "800000000}}"), 0);
	json_t *hello = hs_read_frame(m, 5000);
	cr_assert(hello && strcmp(json_string_value(json_object_get(hello, "type")) ?: "", "result") == 0,
		  "the head did not answer node-2's hello");
	json_decref(hello);
	const char *bad[] = {
		"{\"total\":1000,\"available\":2000,\"budget\":10}",
		"{\"total\":-1,\"available\":0,\"budget\":10}",
		"{\"total\":1000,\"available\":10,\"budget\":0}",
		"{\"total\":\"1000\",\"available\":10,\"budget\":10}",
		"{\"total\":4611686018427387904,\"available\":10,\"budget\":10}",
		"{\"total\":1000,\"available\":10}",
	};
	char f[512];
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		snprintf(f, sizeof f, "{\"v\":1,\"type\":\"heartbeat\",\"id\":0,\"mem\":%s}", bad[i]);
		cr_assert_eq(hs_send_frame(m, f), 0);
	}
	/* not an object: the frame's fields are refused as such (an error answer) */
	cr_assert_eq(hs_send_frame(m, "{\"v\":1,\"type\":\"heartbeat\",\"id\":0,\"mem\":[1,2,3]}"), 0);
	json_t *e = hs_read_frame(m, 5000);
	cr_expect(e && strcmp(json_string_value(json_object_get(e, "type")) ?: "", "error") == 0,
		  "a heartbeat whose mem is an array was not refused");
	json_decref(e);
	usleep(300 * 1000);
	json_t *mine = mem_of("node-2");
	cr_assert(mine, "node-2's good report was not kept");
	cr_expect_eq(json_integer_value(json_object_get(mine, "total")), 1000000000);
	cr_expect_eq(json_integer_value(json_object_get(mine, "available")), 500000000);
	cr_expect_eq(json_integer_value(json_object_get(mine, "budget")), 800000000);
	json_decref(mine);
	/* a report that names another node is still about the sender */
	cr_assert_eq(hs_send_frame(m, "{\"v\":1,\"type\":\"heartbeat\",\"id\":0,\"mem\":{\"node\":"
				      "\"node-1\",\"total\":7,\"available\":7,\"budget\":7}}"), 0);
	usleep(300 * 1000);
	mine = mem_of("node-2");
	cr_expect_eq(json_integer_value(json_object_get(mine, "total")), 7, "not node-2's: %s",
		     json_dumps(mine, 0));
	json_decref(mine);
	json_t *head_after = mem_of("node-1");
	cr_expect_eq(json_integer_value(json_object_get(head_after, "total")),
		     json_integer_value(json_object_get(head_before, "total")),
		     "node-2's reports changed node-1's");
	cr_expect_neq(json_integer_value(json_object_get(head_after, "budget")), 7);
	json_decref(head_before);
	json_decref(head_after);
	cr_expect_eq(hs_send_frame(m, "{\"v\":1,\"type\":\"heartbeat\",\"id\":0}"), 0);
	cr_expect(h_wait_state(C, 0, "node-2", "ready", 5000) >= 0, "the session stopped working");
	hs_close(m);
}

/* ---- issue 27: a job user squatting a service name the admin's left free ---- */

/* Start spark-router with policy on node 0's socket, stderr in log: its pid
 * and (in *port) the port it listens on. */
static pid_t router_up(const char *policy, const char *log, int *port)
{
	pid_t p = fork();
	cr_assert(p >= 0);
	if (p == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0 || dup2(fd, 2) < 0)
			_exit(127);
		execl(h_bin("router/spark-router"), "spark-router", "--policy", policy, "--listen",
		      "127.0.0.1:0", "--socket", C->nodes[0].sock, (char *)NULL);
		_exit(127);
	}
	router_pid = p;
	*port = 0;
	for (int t = 0; t < 100 && !*port; t++) {
		char *l = slurp(log), *m = strstr(l, "msg=router_listen");
		char *q = m ? strstr(m, " port=") : NULL;
		if (q)
			*port = atoi(q + 6);
		free(l);
		if (!*port)
			usleep(100000);
	}
	cr_assert_gt(*port, 0, "spark-router did not start: %s", slurp(log));
	return p;
}

static bool file_has(const char *path, const char *what)
{
	char *l = slurp(path);
	bool has = strstr(l, what) != NULL;
	free(l);
	return has;
}

/* A job user (the socket's group) may serve under a name root's service left
 * free, but (1) not with an endpoint, a management URL or a health URL on
 * another host or port than where its rank 0 runs: refused, nothing
 * recorded; and (2) with a legal endpoint, spark-router's service: target of
 * that name (owner root, the default) does not follow the user's service:
 * the decision says whose it is, a request gets 503, the log says so. On
 * main's code the foreign endpoint was accepted and the router followed the
 * name alone. */
Test(security, svc_name_squatting_by_a_job_user, .timeout = 120)
{
	make_user(false);
	cluster(1, 1);
	open_socket_to(0, GROUP_JOB);
	int port = free_port();
	char text[400];
	snprintf(text, sizeof text, "name: chat\nruntime: command\nmodel: none\nport: %d\n"
		 "command: [sleep, \"600\"]\nmemory: \"1\"\n", port);
	write_file(rfile("chat.yaml"), text);
	chmod(rfile("chat.yaml"), 0644);
	struct h_result r = ctl_t(0, 20, "serve", rfile("chat.yaml"), "--group", "all", "--dry-run",
				  "-o", "json", NULL);
	cr_assert_eq(r.rc, 0, "serve --dry-run: %s", r.err);
	json_t *plan = h_json(&r);
	h_result_free(&r);
	const char *url = json_string_value(json_object_get(json_object_get(plan, "endpoint"), "url"));
	cr_assert(url, "the plan has an endpoint");
	char own[128];
	snprintf(own, sizeof own, "http://127.0.0.1:%d", port);
	cr_assert_str_eq(url, own, "the rendered endpoint is rank 0's address and the port");

	/* foreign endpoints: another host, another port, a foreign management
	 * URL, a health URL elsewhere: refused, whoever asks */
	char other[4][128];
	snprintf(other[0], 128, "http://127.0.0.2:%d", port);
	snprintf(other[1], 128, "http://127.0.0.1:%d", port + 1);
	snprintf(other[2], 128, "http://127.0.0.1:%d@127.0.0.2", port);
	snprintf(other[3], 128, "http://127.0.0.1:%d/../x", port);
	static const char *const keys[][2] = {{"endpoint", "url"}, {"endpoint", "url"},
					      {"endpoint", "url"}, {"endpoint", "url"},
					      {"endpoint", "management_url"}, {"health", "url"}};
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
		json_t *pl = json_deep_copy(plan);
		const char *v = i < 4 ? other[i] : other[0];
		char hv[160];
		if (i == 5) {
			snprintf(hv, sizeof hv, "%s/health", other[0]);
			v = hv;
		}
		json_object_set_new(json_object_get(pl, keys[i][0]), keys[i][1], json_string(v));
		json_t *req = json_pack("{s:i, s:s, s:i, s:s, s:s, s:o}", "v", 1, "type", "svc_start",
					"id", 1, "name", "chat", "group", "all", "plan", pl);
		char *txt = json_dumps(req, JSON_COMPACT);
		json_decref(req);
		char *code = ctl_code(C->nodes[0].sock, txt, USER_NAME);
		cr_expect_str_eq(code, "bad_request", "a job user's svc_start with %s.%s = %s was "
				 "answered %s", keys[i][0], keys[i][1], v, code);
		free(code);
		free(txt);
	}
	r = ctl_t(0, 10, "svc", "show", "chat", NULL);
	cr_expect_neq(r.rc, 0, "a refused svc_start recorded service chat: %s", r.out);
	h_result_free(&r);
	cr_expect(!log_has(0, "service_created"), "a refused plan was recorded");

	/* the same name with a legal endpoint: the user's service */
	r = as_user(0, "serve", rfile("chat.yaml"), "--group", "all", "-o", "json", NULL);
	cr_assert_eq(r.rc, 0, "a job user's serve with its own endpoint: %s%s", r.out, r.err);
	h_result_free(&r);
	r = ctl_t(0, 10, "svc", "ls", "-o", "json", NULL);
	cr_assert_eq(r.rc, 0, "%s", r.err);
	json_t *ls = h_json(&r);
	h_result_free(&r);
	json_t *svc = json_array_get(json_object_get(ls, "services"), 0);
	cr_expect_str_eq(json_string_value(json_object_get(svc, "owner")) ?: "(none)", USER_NAME,
			 "svc ls (the svc_watch object) names the owner");
	json_decref(ls);

	/* spark-router's target of that name, default owner: not followed */
	write_file(rfile("policy.yaml"), "targets:\n  chat: {service: chat, network: management}\n"
					 "routes:\n  chat: {type: passthrough, target: chat}\n");
	int rport;
	pid_t rp = router_up(rfile("policy.yaml"), rfile("router.log"), &rport);
	char want[160];
	snprintf(want, sizeof want, "msg=service_target_ignored target=chat service=chat owner=%s "
		 "want_owner=root", USER_NAME);
	bool logged = false;
	for (int t = 0; t < 100 && !(logged = file_has(rfile("router.log"), want)); t++)
		usleep(100000);
	cr_expect(logged, "the router does not log that it ignores %s's service: %s", USER_NAME,
		  slurp(rfile("router.log")));
	char u[128];
	snprintf(u, sizeof u, "http://127.0.0.1:%d/v1/decision", rport);
	char *cv[] = {"/usr/bin/curl", "-sS", "--max-time", "5", u, "-d",
		      "{\"model\":\"chat\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", NULL};
	r = h_run(cv);
	cr_expect(strstr(r.out, "\"state\":\"other_owner\"") && strstr(r.out, "\"resolvable\":false") &&
		  strstr(r.out, "not root"), "decision: %s%s", r.out, r.err);
	h_result_free(&r);
	snprintf(u, sizeof u, "http://127.0.0.1:%d/v1/chat/completions", rport);
	char *cc[] = {"/usr/bin/curl", "-sS", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}",
		      u, "-H", "content-type: application/json", "-d",
		      "{\"model\":\"chat\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", NULL};
	r = h_run(cc);
	cr_expect_str_eq(r.out, "503", "a request to the route: %s %s", r.out, r.err);
	h_result_free(&r);
	kill(rp, SIGTERM);
	waitpid(rp, NULL, 0);
	router_pid = 0;
	r = ctl_t(0, 30, "svc", "stop", "chat", NULL);
	cr_expect_eq(r.rc, 0, "root's svc stop of the user's service: %s", r.err);
	h_result_free(&r);
	json_decref(plan);
}

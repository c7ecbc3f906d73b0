/* libFuzzer target: an authenticated member's session on a real head (issue 14:
 * "a fuzz target drives an authenticated session with random frames of every
 * type, a node's privileges, not the head's").
 *
 * Once per process (on the first input) it makes a real head: a temporary
 * state dir, sparkd's modules started as main() starts them, and `init` sent
 * over the real control socket (so head_handle_init makes the CA, cluster.db,
 * identity and token). Two worker rows are added through the real join
 * transaction (token, CSR signed by the CA): fz-w1, whose session the input
 * drives, and fz-w2, which never connects. When run as root the process first
 * moves into a network namespace of its own (nothing it does can reach another
 * machine), and the head's own node has a fixture sysfs tree for its fabric;
 * ranks and exec on the head's own node would start `sparkd --rank-shim`,
 * which here names a path that does not exist, so no command ever runs.
 *
 * Each input is decoded into frames a member may send (heartbeat and hello
 * with memory reports, fabric, topo_reply, topo_rdma_ep, model_reply, forward with every
 * jobs request, forward with every cluster request, forward with every
 * services request (plans fuzzed), svc_health, job_started/exit/data/sync,
 * exec_data/exit, stream_cancel, leave, crl, join, frames of the head's
 * direction, unknown types, raw and oversized frames) with fuzzed fields.
 * Fields that name the head's objects (job, tail, exec, topology request and
 * probe ids) may take the values the head just sent this member, so the
 * frames reach the code behind the lookups. The frames go over a Unix socket
 * that the head adopted as fz-w1's session (peers_adopt_session), one at a
 * time, running the loop until it is idle after each; then the member closes
 * and the loop runs until the head has released the session.
 *
 * Invariants (abort on violation): the head survives and sends only
 * well-formed frames; ASan/UBSan/LSan are clean; 3 s after the member closed
 * the head holds no session; a forwarded or relayed request that needs an
 * admin (node drain/undrain/rm, token create/ls/revoke, topo addresses,
 * group create/rm) whose caller is not one (uid 0 or the admin group) is
 * answered with an error, never a result or a stream; and after an input
 * without any admin caller, cluster.db has the same tokens (none revoked),
 * the same groups, and fz-w2 and the head still in it, undrained. */
#include "cluster.h"
#include "jobs.h"
#include "log.h"
#include "pki.h"
#include "proto.h"
#include "token.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#ifndef SPARK_FIXTURES
#error "SPARK_FIXTURES (tests/fixtures/sysfs) must be defined"
#endif

#define MAX_FRAMES 24
#define FRAME_IDLE_MS 40     /* longest wait for the head to go idle after a frame */
#define RELEASE_MS 3000      /* the head must release a closed session within this */

static struct agent A;
static char dir[128];
static char adopt_path[192];
static uv_pipe_t adopt_srv;
static bool adopted;
static bool in_netns;
static json_t *base_disc;            /* a healthy Spark's discovery (fixture) */
static char w1_id[40], w2_id[40], head_id[40];
static char init_token_id[17];

/* ---- the fuzzer's input -------------------------------------------------------- */

struct in {
	const uint8_t *p;
	size_t n;
};

static unsigned u8(struct in *in)
{
	if (!in->n)
		return 0;
	in->n--;
	return *in->p++;
}

static uint32_t u32(struct in *in)
{
	uint32_t v = 0;
	for (int i = 0; i < 4; i++)
		v = v << 8 | u8(in);
	return v;
}

/* ---- what the head told this member (ids the next frames may name) ------------ */

#define RING 8
struct seen {
	long long v[RING];
	unsigned n;
};
static struct seen s_job, s_tail, s_exec, s_topo, s_rank, s_req;
static char s_probe[RING][64];
static unsigned n_probe;

static void seen_add(struct seen *s, long long v) { s->v[s->n++ % RING] = v; }

static long long seen_pick(const struct seen *s, unsigned k)
{
	if (!s->n)
		return 1;
	unsigned have = s->n < RING ? s->n : RING;
	return s->v[(s->n - 1 - k % have) % RING];
}

/* Requests sent in this input that must not succeed. */
static struct {
	json_int_t id;
	char type[32];
} must_fail[MAX_FRAMES];
static size_t n_must_fail;
static bool admin_asked;  /* some request of this input had an admin caller */
static bool head_closed;  /* EOF from the head */
static bool got_bytes;

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "fuzz_session: INVARIANT: %s%s%s\n", what, detail ? ": " : "",
		detail ? detail : "");
	abort();
}

static bool trace; /* FUZZ_SESSION_TRACE=1: print every frame, both ways */

static void trace_frame(const char *dir_, const json_t *m)
{
	if (!trace)
		return;
	char *s = json_dumps(m, JSON_COMPACT);
	fprintf(stderr, "%s %.300s\n", dir_, s ? s : "?");
	free(s);
}

static void on_head_frame(json_t *m)
{
	trace_frame("<-", m);
	const char *t = proto_type(m);
	json_int_t id = proto_id(m);
	if (strcmp(t, "result") == 0 || strcmp(t, "stream") == 0)
		for (size_t i = 0; i < n_must_fail; i++)
			if (must_fail[i].id == id) {
				char *s = json_dumps(m, JSON_COMPACT);
				fprintf(stderr, "fuzz_session: %s by a caller who is not an admin got: %.400s\n",
					must_fail[i].type, s ? s : "?");
				free(s);
				die("an admin-only request succeeded for a non-admin caller", must_fail[i].type);
			}
	size_t i;
	json_t *v;
	if (strcmp(t, "job_start") == 0) {
		seen_add(&s_job, proto_int(json_object_get(m, "job"), "id", 0));
		json_array_foreach(json_object_get(m, "ranks"), i, v)
			seen_add(&s_rank, proto_int(v, "rank", 0));
		json_array_foreach(json_object_get(m, "tails"), i, v)
			seen_add(&s_tail, proto_int(v, "tail_id", 0));
	} else if (strcmp(t, "job_tail") == 0) {
		seen_add(&s_tail, proto_int(m, "tail_id", 0));
		seen_add(&s_job, proto_int(m, "job_id", 0));
	} else if (strcmp(t, "job_signal") == 0) {
		seen_add(&s_job, proto_int(m, "job_id", 0));
	} else if (strcmp(t, "exec_start") == 0) {
		seen_add(&s_exec, proto_int(m, "exec_id", 0));
	} else if (strcmp(t, "model_req") == 0) {
		seen_add(&s_topo, id); /* the ids a model_reply may answer */
	} else if (strcmp(t, "topo_req") == 0) {
		seen_add(&s_topo, id);
		const char *p = proto_str(m, "probe");
		if (p)
			util_strlcpy(s_probe[n_probe++ % RING], p, sizeof s_probe[0]);
	} else if (strcmp(t, "stream") == 0) {
		json_int_t j = proto_int(m, "job_id", 0);
		if (j)
			seen_add(&s_job, j);
	}
}

/* ---- the member's end of the socket ------------------------------------------------ */

static int cfd = -1;
static proto_decoder cdec;
static uint8_t *out;
static size_t out_len, out_off;

static void drain_client(void)
{
	uint8_t buf[65536];
	for (;;) {
		ssize_t n = read(cfd, buf, sizeof buf);
		if (n == 0)
			head_closed = true;
		if (n <= 0)
			break;
		got_bytes = true;
		if (proto_decoder_feed(&cdec, buf, (size_t)n) < 0)
			die("out of memory", NULL);
	}
	for (;;) {
		json_t *m = NULL;
		char why[160] = "";
		int r = proto_decoder_next(&cdec, &m, why, sizeof why);
		if (r == 0)
			break;
		if (r < 0)
			die("the head sent a malformed frame", why);
		on_head_frame(m);
		json_decref(m);
	}
}

static void flush_out(void)
{
	while (out_off < out_len && !head_closed) {
		ssize_t n = write(cfd, out + out_off, out_len - out_off);
		if (n <= 0) {
			if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
				head_closed = true;
			break;
		}
		out_off += (size_t)n;
	}
}

/* Run the head's loop until nothing is left to do now: no bytes moved, no
 * request or write in flight, no timer due. */
static void settle(unsigned max_ms)
{
	uint64_t t0 = util_now_ms();
	int quiet = 0;
	while (util_now_ms() - t0 < max_ms) {
		flush_out();
		got_bytes = false;
		uv_run(A.loop, UV_RUN_NOWAIT);
		drain_client();
		bool busy = got_bytes || (out_off < out_len && !head_closed) ||
			    uv_backend_timeout(A.loop) == 0 || A.loop->active_reqs.count > 0;
		if (busy)
			quiet = 0;
		else if (++quiet >= 2)
			return;
	}
}

static void send_frame(const json_t *m)
{
	uint8_t *buf;
	size_t len;
	trace_frame("->", m);
	if (proto_encode(m, &buf, &len) < 0)
		return;
	free(out);
	out = buf;
	out_len = len;
	out_off = 0;
}

static void send_raw(const uint8_t *body, size_t n, uint32_t claimed)
{
	free(out);
	out = malloc(n + 4);
	if (!out)
		die("out of memory", NULL);
	out[0] = (uint8_t)(claimed >> 24);
	out[1] = (uint8_t)(claimed >> 16);
	out[2] = (uint8_t)(claimed >> 8);
	out[3] = (uint8_t)claimed;
	if (n)
		memcpy(out + 4, body, n);
	out_len = n + 4;
	out_off = 0;
}

/* ---- field generators ------------------------------------------------------------ */

static void put(json_t *o, const char *k, json_t *v)
{
	if (v)
		json_object_set_new(o, k, v);
}

/* Fuzzed text, kept to printable ASCII so that the frame stays valid JSON. */
static json_t *fuzz_text(struct in *in, size_t max)
{
	size_t n = u8(in) % (max + 1);
	char s[256];
	if (n > sizeof s - 1)
		n = sizeof s - 1;
	for (size_t i = 0; i < n; i++) {
		unsigned c = u8(in);
		s[i] = (char)(c >= 0x20 && c < 0x7f ? c : 'a' + c % 26);
	}
	return json_stringn(s, n);
}

/* A string from dict (most of the time), fuzzed text, absent, or not a string. */
static json_t *gstr(struct in *in, const char *const *dict, size_t nd)
{
	unsigned c = u8(in);
	if (c < 208 && nd)
		return json_string(dict[c % nd]);
	if (c < 232)
		return fuzz_text(in, 40);
	if (c < 248)
		return NULL;
	return json_integer(c);
}
#define GSTR(in, d) gstr(in, d, sizeof d / sizeof d[0])

/* An integer: an id the head sent (s may be NULL), an edge value, a literal,
 * absent, or not an integer. */
static json_t *gint(struct in *in, const struct seen *s)
{
	switch (u8(in) % 10) {
	case 0:
	case 1:
	case 2:
		return json_integer(s ? seen_pick(s, u8(in)) : 1);
	case 3:
		return json_integer(0);
	case 4:
		return json_integer(-1);
	case 5:
		return json_integer(u8(in));
	case 6:
		return json_integer((json_int_t)(int32_t)u32(in));
	case 7:
		return json_integer(u8(in) & 1 ? INT64_MAX : INT64_MIN);
	case 8:
		return NULL;
	default:
		return u8(in) & 1 ? json_string("1") : json_real(1.5);
	}
}

static json_t *gbool(struct in *in)
{
	unsigned c = u8(in) % 5;
	return c == 0 ? json_true() : c == 1 ? json_false() : c == 2 ? NULL : c == 3 ? json_true() : json_string("yes");
}

static const char *const node_names[] = {"fz-w1", "fz-w2", "fz-head", "nosuch", "", "127.0.0.1",
					 "169.254.0.1", "all"};

/* A node by name, or by id (the three real ones). */
static json_t *gnode(struct in *in)
{
	unsigned c = u8(in) % 12;
	if (c < 8)
		return json_string(node_names[c]);
	if (c == 8)
		return json_string(w1_id);
	if (c == 9)
		return json_string(w2_id);
	if (c == 10)
		return json_string(head_id);
	return gstr(in, NULL, 0);
}

static json_t *gstrv(struct in *in, const char *const *dict, size_t nd, size_t max)
{
	unsigned c = u8(in);
	if (c >= 240)
		return c & 1 ? json_string("true") : NULL; /* not an array, absent */
	json_t *a = json_array();
	size_t n = c % (max + 1);
	for (size_t i = 0; i < n; i++) {
		json_t *s = gstr(in, dict, nd);
		json_array_append_new(a, s ? s : json_null());
	}
	return a;
}

/* Is this caller an admin by the documented rule (docs/cluster.md): uid 0,
 * or security.admin_group among its groups? */
static bool oracle_admin(const json_t *caller)
{
	if (!json_is_object(caller))
		return false;
	json_t *uid = json_object_get(caller, "uid");
	if (json_is_integer(uid) && json_integer_value(uid) == 0)
		return true;
	size_t i;
	json_t *g;
	json_array_foreach(json_object_get(caller, "groups"), i, g)
		if (json_is_string(g) && strcmp(json_string_value(g), A.admin_group) == 0)
			return true;
	return false;
}

/* The caller a member's control socket would attach: root, a job user, an
 * admin by group, and malformed ones (oracle_admin says which are admins). */
static json_t *gcaller(struct in *in)
{
	switch (u8(in) % 9) {
	case 0:
		return json_pack("{s:i, s:s, s:[s]}", "uid", 0, "user", "root", "groups", "root");
	case 1:
	case 2:
		return json_pack("{s:i, s:s, s:[s, s]}", "uid", 1000, "user", "alice", "groups", "alice",
				 "users");
	case 3:
		return json_pack("{s:i, s:s, s:[s, s]}", "uid", 1001, "user", "bob", "groups", "bob",
				 A.admin_group);
	case 4:
		return json_pack("{s:i, s:s, s:s}", "uid", 1002, "user", "mallory", "groups",
				 A.admin_group); /* groups not an array */
	case 5:
		return json_pack("{s:s, s:s}", "uid", "0", "user", "root"); /* uid not an integer */
	case 6:
		return NULL;
	case 7:
		return json_string("root");
	default: {
		json_t *uid = gint(in, NULL);
		json_t *o = json_object();
		put(o, "uid", uid);
		put(o, "user", fuzz_text(in, 12));
		json_t *g = json_array();
		json_array_append_new(g, fuzz_text(in, 12));
		json_object_set_new(o, "groups", g);
		return o;
	}
	}
}

static const char *const admin_types[] = {"node_drain", "node_undrain", "node_rm", "token_create",
					  "token_ls", "token_revoke", "topo_addresses",
					  "group_create", "group_rm", "init", "join", "leave"};

static bool needs_admin(const char *t)
{
	for (size_t i = 0; i < sizeof admin_types / sizeof admin_types[0]; i++)
		if (strcmp(admin_types[i], t) == 0)
			return true;
	return false;
}

static const char *const group_names[] = {"g1", "g2", "all", "Bad_Name", "fz-w1"};
static const char *const argv0[] = {"true", "sh", "-c", "echo hi", "/bin/false", "sleep", "1"};
static const char *const envs[] = {"A=1", "PATH=/x", "bad", "=x", "SPARK_RANK=9"};
static const char *const launchers[] = {"native", "torchrun", "mpi", "slurm"};
static const char *const expects[] = {"ring", "pair", "switch", "mesh"};

/* The fields of a request of type t. */
/* services (issue 19): names, and plans as `serve --dry-run -o json` prints
 * them, fuzzed: ranks on the cluster's nodes or not, argv and env of any
 * type, numbers out of range. */
static const char *const svc_names[] = {"web", "s2", "Bad Name", "", "web"};

static json_t *gplan(struct in *in)
{
	if (u8(in) % 8 == 0)
		return u8(in) & 1 ? json_string("plan") : NULL;
	json_t *p = json_object();
	put(p, "group", GSTR(in, group_names));
	put(p, "recipe", fuzz_text(in, 10));
	put(p, "runtime", json_string("command"));
	json_t *ranks = json_array();
	unsigned n = u8(in) % 4;
	for (unsigned i = 0; i < n; i++) {
		json_t *r = json_object();
		put(r, "rank", u8(in) % 4 ? json_integer(i) : gint(in, NULL));
		put(r, "node", GSTR(in, node_names));
		put(r, "argv", u8(in) % 4 ? gstrv(in, argv0, sizeof argv0 / sizeof argv0[0], 3)
					  : gint(in, NULL));
		if (u8(in) & 1)
			put(r, "env", u8(in) % 3 ? json_pack("{s:s}", "A", "1") : json_pack("{s:i}", "A", 1));
		json_array_append_new(ranks, r);
	}
	put(p, "ranks", ranks);
	put(p, "endpoint", json_pack("{s:o, s:s}", "url",
				     u8(in) % 3 ? json_string("http://127.0.0.1:8000") : fuzz_text(in, 20),
				     "management_url", "http://127.0.0.1:8000"));
	json_t *h = json_object();
	put(h, "path", fuzz_text(in, 12));
	put(h, "interval_s", gint(in, NULL));
	put(h, "startup_timeout_s", gint(in, NULL));
	put(p, "health", h);
	json_t *rs = json_object();
	put(rs, "policy", json_string(u8(in) & 1 ? "never" : "always"));
	put(rs, "limit", gint(in, NULL));
	put(rs, "backoff_s", gint(in, NULL));
	put(rs, "backoff_max_s", gint(in, NULL));
	put(p, "restart", rs);
	json_t *ad = json_object();
	put(ad, "need_gib", u8(in) % 3 ? json_real((double)u8(in) * 1e4) : gint(in, NULL));
	put(p, "admission", ad);
	return p;
}

static void request_fields(struct in *in, json_t *r, const char *t)
{
	if (strncmp(t, "node_", 5) == 0) {
		put(r, "node", gnode(in));
	} else if (strcmp(t, "token_create") == 0) {
		put(r, "ttl_s", gint(in, NULL));
		put(r, "uses", gint(in, NULL));
		put(r, "description", fuzz_text(in, 20));
	} else if (strcmp(t, "token_revoke") == 0) {
		put(r, "token_id", u8(in) & 1 ? json_string(init_token_id) : fuzz_text(in, 16));
	} else if (strncmp(t, "topo_", 5) == 0) {
		put(r, "expect", GSTR(in, expects));
		put(r, "quick", gbool(in));
		put(r, "apply", gbool(in));
		if (u8(in) & 1)
			put(r, "node", gnode(in));
	} else if (strcmp(t, "group_create") == 0) {
		put(r, "name", GSTR(in, group_names));
		put(r, "shared", gbool(in));
		if (u8(in) & 1)
			put(r, "nodes", gstrv(in, node_names, 4, 3));
		else
			put(r, "size", gint(in, NULL));
	} else if (strncmp(t, "group_", 6) == 0) {
		put(r, "name", GSTR(in, group_names));
		put(r, "force", gbool(in));
	} else if (strcmp(t, "job_run") == 0) {
		put(r, "group", GSTR(in, group_names));
		put(r, "launcher", GSTR(in, launchers));
		put(r, "argv", gstrv(in, argv0, sizeof argv0 / sizeof argv0[0], 3));
		put(r, "env", gstrv(in, envs, sizeof envs / sizeof envs[0], 2));
		put(r, "ranks_per_node", gint(in, NULL));
		put(r, "timeout_s", gint(in, NULL));
		put(r, "detach", gbool(in));
		if (u8(in) & 1)
			put(r, "name", fuzz_text(in, 10));
		if (u8(in) & 1)
			put(r, "nnodes", gint(in, NULL));
	} else if (strcmp(t, "job_ls") == 0) {
		put(r, "running", gbool(in));
		put(r, "limit", gint(in, NULL));
	} else if (strncmp(t, "job_", 4) == 0) {
		char id[32];
		snprintf(id, sizeof id, "%lld", seen_pick(&s_job, u8(in)));
		put(r, "job", u8(in) % 3 ? json_string(id) : fuzz_text(in, 8));
		put(r, "rank", gint(in, &s_rank));
		put(r, "follow", gbool(in));
	} else if (strcmp(t, "svc_start") == 0) {
		put(r, "name", GSTR(in, svc_names));
		put(r, "group", GSTR(in, group_names));
		put(r, "plan", gplan(in));
		put(r, "force", gbool(in));
	} else if (strncmp(t, "svc_", 4) == 0) {
		put(r, "name", GSTR(in, svc_names));
		if (u8(in) & 1)
			put(r, "group", GSTR(in, group_names));
	} else if (strcmp(t, "exec") == 0) {
		put(r, "node", gnode(in));
		put(r, "argv", gstrv(in, argv0, sizeof argv0 / sizeof argv0[0], 3));
		put(r, "shell", gbool(in));
		put(r, "job_id", gint(in, &s_job));
	}
}

static const char *const cluster_types[] = {
    "status",       "node_ls",  "node_show",    "node_drain", "node_undrain",   "node_rm",
    "token_create", "token_ls", "token_revoke", "topo_show",  "topo_validate",  "topo_addresses",
    "init",         "join",     "leave",        "version",    "group_create",   "job_run",
    "debug_memory", "model_ls_all", "model_rm_nodes", "model_ticket", "model_push_from", "nosuch"};
static const char *const jobs_types[] = {"group_create", "group_ls", "group_show", "group_rm",
					 "job_run",      "job_ls",   "job_show",   "job_logs",
					 "job_cancel",   "exec",     "status",     "token_create"};
static const char *const svc_types[] = {"svc_start", "svc_start", "svc_ls",      "svc_show",
					"svc_stop",  "svc_rm",    "svc_restart", "svc_watch"};

/* Above every id a frame of the generator carries (those are < 256), so that
 * only the answer to this request can have its id. */
static json_int_t next_req_id = 1000000;

/* {"type":outer,"id":N,"request":{...}}: a CLI request forwarded or relayed. */
static json_t *wrapped(struct in *in, const char *outer, const char *const *types, size_t nt,
		       bool jobs)
{
	const char *t = types[u8(in) % nt];
	json_t *r = json_object();
	json_object_set_new(r, "v", json_integer(1));
	json_object_set_new(r, "type", json_string(t));
	json_object_set_new(r, "id", json_integer(u8(in)));
	put(r, "caller", gcaller(in));
	bool admin = oracle_admin(json_object_get(r, "caller"));
	if (jobs) { /* what the relay of jobs requests used to add: the head must ignore it */
		json_t *c = json_object_get(r, "caller");
		if (u8(in) % 4) {
			put(r, "uid", json_is_object(c) ? json_incref(json_object_get(c, "uid")) : NULL);
			put(r, "user", json_is_object(c) ? json_incref(json_object_get(c, "user")) : NULL);
		} else {
			put(r, "uid", gint(in, NULL));
			put(r, "user", fuzz_text(in, 10));
		}
		put(r, "origin", u8(in) & 1 ? json_string(w1_id) : json_string(head_id));
	}
	request_fields(in, r, t);
	admin_asked |= admin;
	json_int_t id = ++next_req_id;
	if (needs_admin(t) && !admin && n_must_fail < MAX_FRAMES) {
		must_fail[n_must_fail].id = id;
		util_strlcpy(must_fail[n_must_fail].type, t, sizeof must_fail[0].type);
		n_must_fail++;
	}
	json_t *m = proto_msg(outer, id);
	unsigned c = u8(in) % 16;
	json_object_set_new(m, "request", c == 0 ? json_string("status") : c == 1 ? json_object() : r);
	if (c <= 1)
		json_decref(r);
	return m;
}

/* A copy of the fixture's discovery with one fuzzed change. */
static json_t *gdiscovery(struct in *in)
{
	unsigned c = u8(in) % 8;
	if (c == 0)
		return json_object();
	if (c == 1)
		return json_pack("{s:[]}", "ports");
	if (c == 2)
		return json_string("none");
	json_t *d = json_deep_copy(base_disc);
	json_t *ports = json_object_get(d, "ports");
	json_t *port = json_array_get(ports, u8(in) % (json_array_size(ports) + 1));
	json_t *twin = json_array_get(json_object_get(port, "twins"), u8(in) % 3);
	static const char *const keys[] = {"netdev", "mtu", "carrier", "speed_mbps", "operstate",
					   "ipv4", "name", "twins", "present", "mac"};
	json_t *tgt = c >= 6 ? port : twin;
	const char *k = keys[u8(in) % (sizeof keys / sizeof keys[0])];
	if (tgt) {
		switch (u8(in) % 5) {
		case 0:
			json_object_del(tgt, k);
			break;
		case 1:
			put(tgt, k, gint(in, NULL));
			break;
		case 2:
			put(tgt, k, fuzz_text(in, 20));
			break;
		case 3:
			json_object_set_new(tgt, k, json_pack("[s]", "169.254.1.2/24"));
			break;
		default:
			json_object_set_new(tgt, k, json_null());
		}
	}
	return d;
}

/* A topo_reply's data: a node's state (discovery, neighbour table) or a probe's result. */
static json_t *gtopo_data(struct in *in)
{
	unsigned c = u8(in) % 4;
	if (c == 0)
		return json_pack("{s:o}", "result", json_pack("{s:f, s:f, s:f, s:s}", "gbps",
							      (double)u8(in), "p50_us", (double)u8(in),
							      "p99_us", (double)u8(in), "path", "tcp"));
	if (c == 1)
		return json_pack("{s:s}", "error", "probe failed");
	json_t *d = json_object();
	json_object_set_new(d, "discovery", gdiscovery(in));
	json_t *nb = json_array();
	unsigned n = u8(in) % 3;
	for (unsigned i = 0; i < n; i++)
		json_array_append_new(
		    nb, json_pack("{s:s, s:s, s:s, s:i, s:s, s:I}", "node_id",
				  u8(in) & 1 ? head_id : w2_id, "node_name", u8(in) & 1 ? "fz-head" : "fz-w2",
				  "port", u8(in) & 1 ? "0" : "1", "twin", (int)(u8(in) % 2), "netdev",
				  "enp1s0f0np0", "heard_ms_ago", (json_int_t)u8(in)));
	json_object_set_new(
	    d, "l2disc",
	    json_pack("{s:i, s:[{s:s, s:s, s:i, s:o}]}", "interval_ms", (int)u8(in) * 10, "interfaces",
		      "netdev", "enp1s0f0np0", "port", "0", "twin", 0, "neighbours", nb));
	json_object_set_new(d, "host_addresses", json_pack("[s]", "169.254.7.1"));
	return d;
}

/* A memory report (issue 19): well-formed, fuzzed numbers, or not an object. */
static json_t *gmem(struct in *in)
{
	unsigned c = u8(in) % 6;
	if (c == 0)
		return NULL;
	if (c == 1)
		return fuzz_text(in, 8);
	if (c == 2)
		return json_pack("{s:I, s:I, s:I}", "total", (json_int_t)1 << 37, "available",
				 (json_int_t)1 << 36, "budget", (json_int_t)1 << 36);
	json_t *m = json_object();
	put(m, "total", gint(in, NULL));
	put(m, "available", gint(in, NULL));
	if (c != 3)
		put(m, "budget", gint(in, NULL));
	return m;
}

enum op {
	OP_HEARTBEAT, OP_HELLO, OP_FABRIC, OP_TOPO_REPLY, OP_TOPO_EP, OP_TOPO_OTHER,
	OP_JOB_REQ, OP_JOB_REQ2, OP_FORWARD, OP_FORWARD2, OP_JOB_STARTED, OP_JOB_EXIT,
	OP_JOB_DATA, OP_JOB_SYNC, OP_EXEC_DATA, OP_EXEC_EXIT, OP_STREAM_CANCEL, OP_LEAVE,
	OP_CRL, OP_JOIN, OP_WRONG_WAY, OP_UNKNOWN, OP_RAW, OP_OVERSIZE, OP_SVC_REQ, OP_SVC_HEALTH,
	OP_COUNT
};

/* The next frame of the input, queued in out (false: the input is used up). */
static bool next_frame(struct in *in)
{
	if (!in->n)
		return false;
	unsigned op = u8(in) % OP_COUNT;
	json_t *m = NULL;
	json_int_t id = u8(in) % 4 ? 0 : (json_int_t)u8(in);
	switch (op) {
	case OP_HEARTBEAT:
		m = proto_msg("heartbeat", id);
		put(m, "mem", gmem(in));
		break;
	case OP_HELLO:
		m = proto_msg("hello", id);
		put(m, "address", u8(in) % 3 ? json_string("127.0.0.2:7300") : fuzz_text(in, 40));
		put(m, "version", fuzz_text(in, 10));
		put(m, "mem", gmem(in));
		break;
	case OP_FABRIC:
		m = proto_msg("fabric", id);
		put(m, "discovery", gdiscovery(in));
		break;
	case OP_TOPO_REPLY:
		m = proto_msg("topo_reply", u8(in) % 4 ? seen_pick(&s_topo, u8(in)) : (json_int_t)u8(in));
		if (u8(in) % 3) {
			json_object_set_new(m, "ok", json_true());
			put(m, "data", gtopo_data(in));
		} else {
			put(m, "ok", gbool(in));
			put(m, "code", json_string("refused"));
			put(m, "message", fuzz_text(in, 30));
		}
		break;
	case OP_TOPO_EP:
		m = proto_msg("topo_rdma_ep", id);
		put(m, "probe", n_probe && u8(in) % 3 ? json_string(s_probe[u8(in) % RING]) : fuzz_text(in, 10));
		put(m, "endpoint", json_pack("{s:i, s:i, s:s}", "qpn", (int)u8(in), "psn", (int)u8(in),
					     "gid", "fe80::1"));
		break;
	case OP_TOPO_OTHER: {
		static const char *const t[] = {"topo_req",      "topo_show",      "topo_",
						"topo_validate", "model_reply",   "model_req",
						"model_push_event", "model_push_end"};
		unsigned ti = u8(in) % 8;
		m = proto_msg(t[ti], ti == 4 && u8(in) % 2 ? seen_pick(&s_topo, u8(in)) : id);
		put(m, "op", json_string("state"));
		if (ti == 5)
			put(m, "op", u8(in) % 2 ? json_string("rm") : fuzz_text(in, 4));
		if (u8(in) % 2) { /* a model_reply's fields, of any type */
			put(m, "name", u8(in) % 2 ? json_string("m") : fuzz_text(in, 8));
			put(m, "ok", gbool(in));
			put(m, "dir", u8(in) % 2 ? json_string("/m") : fuzz_text(in, 8));
			put(m, "models", u8(in) % 2 ? json_array() : json_integer(3));
		}
		if (ti >= 6) { /* a push's progress or end from a node: pushes it did not run */
			put(m, "push", u8(in) % 2 ? json_string("ab") : fuzz_text(in, 6));
			put(m, "node", u8(in) % 2 ? json_string("n") : json_integer(1));
			put(m, "bytes", gint(in, NULL));
			put(m, "total", gint(in, NULL));
			put(m, "ms", u8(in) % 2 ? gint(in, NULL) : fuzz_text(in, 2));
			put(m, "data", u8(in) % 2 ? json_object() : fuzz_text(in, 4));
			put(m, "error", u8(in) % 2 ? json_pack("{s:s}", "code", "x") : json_integer(2));
		}
		break;
	}
	case OP_JOB_REQ:
	case OP_JOB_REQ2:
		m = wrapped(in, "forward", jobs_types, sizeof jobs_types / sizeof jobs_types[0], true);
		break;
	case OP_FORWARD:
	case OP_FORWARD2:
		m = wrapped(in, "forward", cluster_types, sizeof cluster_types / sizeof cluster_types[0], false);
		break;
	case OP_JOB_STARTED: {
		m = proto_msg("job_started", id);
		put(m, "job_id", gint(in, &s_job));
		json_t *ranks = json_array();
		unsigned n = u8(in) % 3;
		for (unsigned i = 0; i < n; i++) {
			json_t *r = json_object();
			put(r, "rank", gint(in, &s_rank));
			put(r, "pid", gint(in, NULL));
			put(r, "started_at", gint(in, NULL));
			json_array_append_new(ranks, r);
		}
		json_object_set_new(m, "ranks", ranks);
		break;
	}
	case OP_JOB_EXIT:
		m = proto_msg("job_exit", id);
		put(m, "job_id", gint(in, &s_job));
		put(m, "rank", gint(in, &s_rank));
		put(m, "exit_code", gint(in, NULL));
		put(m, "signal", gint(in, NULL));
		put(m, "lost", gbool(in));
		put(m, "ended_at", gint(in, NULL));
		break;
	case OP_JOB_DATA:
		m = proto_msg("job_data", id);
		put(m, "tail_id", gint(in, &s_tail));
		put(m, "job_id", gint(in, &s_job));
		put(m, "rank", gint(in, &s_rank));
		put(m, "offset", gint(in, NULL));
		put(m, "data", fuzz_text(in, 60));
		put(m, "eof", gbool(in));
		if (u8(in) % 4 == 0)
			put(m, "error", fuzz_text(in, 20));
		break;
	case OP_JOB_SYNC: {
		m = proto_msg("job_sync", id);
		json_t *ranks = json_array();
		unsigned n = u8(in) % 3;
		for (unsigned i = 0; i < n; i++) {
			json_t *r = json_object();
			put(r, "job_id", gint(in, &s_job));
			put(r, "rank", gint(in, &s_rank));
			put(r, "state", json_string(u8(in) & 1 ? "running" : "exited"));
			put(r, "exit_code", gint(in, NULL));
			put(r, "lost", gbool(in));
			json_array_append_new(ranks, r);
		}
		json_object_set_new(m, "ranks", ranks);
		break;
	}
	case OP_EXEC_DATA:
		m = proto_msg("exec_data", id);
		put(m, "exec_id", gint(in, &s_exec));
		put(m, "stream", u8(in) & 1 ? json_string("out") : json_string("err"));
		put(m, "data", fuzz_text(in, 60));
		break;
	case OP_EXEC_EXIT:
		m = proto_msg("exec_exit", id);
		put(m, "exec_id", gint(in, &s_exec));
		put(m, "exit_code", gint(in, NULL));
		put(m, "signal", gint(in, NULL));
		if (u8(in) & 1)
			put(m, "error", fuzz_text(in, 20));
		break;
	case OP_STREAM_CANCEL:
		m = proto_msg("stream_cancel", id);
		put(m, "relay_id", gint(in, &s_req));
		break;
	case OP_LEAVE:
		if (u8(in) % 4) /* leaving ends the session: not too often */
			m = proto_msg("heartbeat", 0);
		else
			m = proto_msg("leave", id);
		break;
	case OP_CRL:
		m = proto_msg("crl", id);
		put(m, "crl", fuzz_text(in, 60));
		break;
	case OP_JOIN:
		m = proto_msg("join", id);
		put(m, "token_id", json_string(init_token_id));
		put(m, "secret", fuzz_text(in, 32));
		put(m, "name", json_string("fz-w3"));
		put(m, "csr", fuzz_text(in, 40));
		put(m, "address", json_string("127.0.0.3:7300"));
		break;
	case OP_SVC_REQ:
		m = wrapped(in, "forward", svc_types, sizeof svc_types / sizeof svc_types[0], false);
		break;
	case OP_SVC_HEALTH: /* only rank 0's node of the current run may say it */
		m = proto_msg("svc_health", id);
		put(m, "service", GSTR(in, svc_names));
		put(m, "run", gint(in, &s_job));
		put(m, "ok", gbool(in));
		put(m, "code", gint(in, NULL));
		put(m, "models", gstrv(in, argv0, sizeof argv0 / sizeof argv0[0], 3));
		if (u8(in) & 1)
			put(m, "error", fuzz_text(in, 20));
		break;
	case OP_WRONG_WAY: {
		static const char *const t[] = {"job_start", "job_signal", "job_tail", "job_untail",
						"exec_start", "exec_signal", "job_sync_ack", "result",
						"error", "stream", "exec_", "job_", "svc_health_watch",
						"svc_health_unwatch"};
		m = proto_msg(t[u8(in) % 14], id);
		put(m, "job_id", gint(in, &s_job));
		put(m, "exec_id", gint(in, &s_exec));
		break;
	}
	case OP_UNKNOWN: {
		json_t *t = fuzz_text(in, 16);
		m = proto_msg(json_string_value(t), id);
		json_decref(t);
		break;
	}
	case OP_RAW: { /* any body: bad JSON, a non-object, missing fields... */
		size_t n = u8(in) % 64;
		uint8_t body[64];
		for (size_t i = 0; i < n; i++)
			body[i] = (uint8_t)u8(in);
		send_raw(body, n, u8(in) % 8 ? (uint32_t)n : u32(in));
		return true;
	}
	case OP_OVERSIZE:
		send_raw(NULL, 0, PROTO_MAX_FRAME + 1 + u8(in));
		return true;
	}
	s_req.n = 0;
	seen_add(&s_req, next_req_id);
	send_frame(m);
	json_decref(m);
	return true;
}

/* ---- the head, once per process ---------------------------------------------------- */

static json_t *ctl_answer;

static void ctl_ready(conn *c, int status)
{
	(void)c;
	if (status < 0)
		die("cannot reach the control socket", NULL);
}

static void ctl_frame(conn *c, json_t *msg)
{
	(void)c;
	if (!ctl_answer)
		ctl_answer = msg;
	else
		json_decref(msg);
}

static void ctl_close(conn *c, int err)
{
	(void)c;
	(void)err;
}

static const struct conn_cbs ctl_cbs = {ctl_ready, ctl_frame, ctl_close};

/* A worker row made by the real join transaction; marked connected once, so
 * that the head never expires it as a join that did not finish. */
static void add_worker(const char *name, char *id_out)
{
	char tok[160], tid[17], err[256];
	struct join_token t;
	if (head_token_create(&A, 0, 1, "fuzz_session", tok, sizeof tok, tid) < 0 ||
	    token_parse(tok, &t, err, sizeof err) < 0)
		die("cannot make a token", NULL);
	db_node n = {0};
	char hash[PKI_HASH_HEX], *csr = NULL, *cert = NULL;
	EVP_PKEY *key = NULL;
	pki_sha256_hex(t.secret, strlen(t.secret), hash);
	pki_random_hex(n.id, 16);
	if (pki_make_key(&key) < 0 || pki_make_csr(key, name, &csr) < 0 ||
	    pki_csr_spki_sha256(csr, n.key_hash) < 0 ||
	    pki_sign_csr(A.hd.ca, A.hd.ca_key, csr, n.id, AGENT_CERT_DAYS, &cert, n.cert_serial) < 0)
		die("cannot make a node certificate", NULL);
	util_strlcpy(n.name, name, sizeof n.name);
	util_strlcpy(n.role, "worker", sizeof n.role);
	util_strlcpy(n.state, "ready", sizeof n.state);
	snprintf(n.address, sizeof n.address, "127.0.0.%d:7300", name[4] == '1' ? 2 : 3);
	util_strlcpy(n.version, "fuzz", sizeof n.version);
	n.joined_at = n.last_seen = util_now();
	bool first;
	if (db_join_commit(A.hd.db, t.id, hash, util_now(), &n) < 0 ||
	    db_node_connected(A.hd.db, n.id, util_now(), n.address, n.version, &first) < 0)
		die("cannot add a worker row", name);
	util_strlcpy(id_out, n.id, 40);
	free(csr);
	free(cert);
	EVP_PKEY_free(key);
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	remove(p);
	return 0;
}

static void cleanup(void)
{
	if (dir[0])
		nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void lo_up(void)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ifreq ifr = {0};
	util_strlcpy(ifr.ifr_name, "lo", sizeof ifr.ifr_name);
	if (s >= 0 && ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
		ifr.ifr_flags |= IFF_UP;
		ioctl(s, SIOCSIFFLAGS, &ifr);
	}
	if (s >= 0)
		close(s);
}

static void on_adopt(uv_stream_t *srv, int status)
{
	if (status < 0)
		return;
	if (peers_adopt_session(&A, srv, w1_id) < 0)
		die("the head would not adopt fz-w1's session", NULL);
	adopted = true;
}

static void setup(void)
{
	signal(SIGPIPE, SIG_IGN);
	/* A network namespace of our own: whatever the head's own node is made
	 * to do (probes, neighbour discovery, addresses), it stays here. */
	in_netns = unshare(CLONE_NEWNET) == 0;
	if (in_netns)
		lo_up();
	else
		fprintf(stderr, "fuzz_session: not root (no network namespace): the head's topology "
				"service stays off\n");
	trace = getenv("FUZZ_SESSION_TRACE") != NULL;
	log_set_level(getenv("FUZZ_SESSION_LOG") ? LOG_DEBUG : LOG_ERROR);
	snprintf(dir, sizeof dir, "%s/sparkfuzz-session.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir))
		die("cannot make a temporary state dir", strerror(errno));
	atexit(cleanup);
	A.lock_fd = -1;
	A.started_at = util_now();
	A.loop = uv_default_loop();
	util_strlcpy(A.opts.state_dir, dir, sizeof A.opts.state_dir);
	snprintf(A.opts.socket, sizeof A.opts.socket, "%s/sparkd.sock", dir);
	util_strlcpy(A.opts.listen_host, "127.0.0.1", sizeof A.opts.listen_host);
	A.opts.listen_port = in_netns ? 7300 : 0;
	util_strlcpy(A.opts.name, "fz-head", sizeof A.opts.name);
	util_strlcpy(A.opts.config, "fuzz_session", sizeof A.opts.config);
	/* Short probes; the head's own fabric from a fixture, never from this machine. */
	/* (scalars as the YAML loader gives them: strings) */
	A.cfg = json_pack("{s:{s:s}, s:{s:s, s:s, s:s, s:s, s:s}, s:{s:s}}", "discovery",
			  "sysfs_root", SPARK_FIXTURES "/spark-healthy", "probes", "timeout_ms", "100",
			  "bulk_ms", "0", "quick_bulk_ms", "0", "ping_iters", "1", "quick_ping_iters",
			  "1", "security", "admin_group", "fzadmin");
	if (geteuid() != 0) { /* the control socket's caller is an admin by its group */
		struct group *gr = getgrgid(getegid());
		json_object_set_new(json_object_get(A.cfg, "security"), "admin_group",
				    json_string(gr ? gr->gr_name : "nogroup"));
	}
	char err[512] = "";
	/* sparkd's services, but topology only inside the fuzzer's own namespace
	 * (its neighbour discovery sends frames on the fixture's netdevs). */
	if (svc_named("cluster")->init(&A, err, sizeof err) < 0 ||
	    svc_named("fabric")->init(&A, err, sizeof err) < 0 ||
	    (in_netns && svc_named("topo")->init(&A, err, sizeof err) < 0) ||
	    agent_security_config(&A, err, sizeof err) < 0 || identity_load(&A, err, sizeof err) < 0 ||
	    control_start(&A, err, sizeof err) < 0)
		die("cannot start the agent", err);
	if (svc_named("jobs")->start(&A, err, sizeof err) < 0)
		die("cannot start jobs", err);
	if (svc_named("serve")->init(&A, err, sizeof err) < 0 ||
	    svc_named("serve")->start(&A, err, sizeof err) < 0)
		die("cannot start serve", err);
	/* Ranks and exec on the head's own node start the shim: make that fail. */
	util_strlcpy(A.jobs->exe, "/nonexistent/sparkd-fuzz-no-shim", sizeof A.jobs->exe);
	char base[512];
	snprintf(base, sizeof base, "%s/spark-healthy.expected.json", SPARK_FIXTURES);
	base_disc = json_load_file(base, 0, NULL);
	if (!base_disc)
		die("cannot read the fixture", base);

	/* `sparkctl init` over the control socket. */
	conn *c = NULL;
	if (conn_connect_unix(A.loop, A.opts.socket, &ctl_cbs, NULL, &c) < 0)
		die("cannot connect to the control socket", NULL);
	json_t *req = json_pack("{s:i, s:s, s:i, s:s}", "v", 1, "type", "init", "id", 1, "name", "fuzz");
	conn_send_new(c, req);
	uint64_t t0 = util_now_ms();
	while (!ctl_answer && util_now_ms() - t0 < 20000)
		uv_run(A.loop, UV_RUN_ONCE);
	if (!ctl_answer || strcmp(proto_type(ctl_answer), "result") != 0) {
		char *s = ctl_answer ? json_dumps(ctl_answer, 0) : NULL;
		die("init failed", s);
	}
	conn_close(c, 0);
	struct join_token t;
	json_t *data = json_object_get(ctl_answer, "data");
	if (token_parse(proto_str(data, "token"), &t, err, sizeof err) < 0)
		die("init's token does not parse", err);
	util_strlcpy(init_token_id, t.id, sizeof init_token_id);
	json_decref(ctl_answer);
	util_strlcpy(head_id, A.id.node_id, sizeof head_id);
	add_worker("fz-w1", w1_id);
	add_worker("fz-w2", w2_id);

	snprintf(adopt_path, sizeof adopt_path, "%s/adopt.sock", dir);
	uv_pipe_init(A.loop, &adopt_srv, 0);
	if (uv_pipe_bind(&adopt_srv, adopt_path) < 0 ||
	    uv_listen((uv_stream_t *)&adopt_srv, 8, on_adopt) < 0)
		die("cannot listen on the adoption socket", adopt_path);
	settle(200);
}

/* A shared group of these nodes (made directly in cluster.db), remade when
 * an input removed it or one of its nodes. */
static void ensure_group(const char *name, const char *const *ids, size_t n)
{
	db_group_member *m = NULL;
	size_t nm = 0;
	bool ok = db_group_members(A.hd.db, name, &m, &nm) == 0 && nm == n;
	for (size_t i = 0; ok && i < n; i++)
		ok = strcmp(m[i].node_id, ids[i]) == 0;
	free(m);
	if (ok)
		return;
	db_group_remove(A.hd.db, name);
	db_group g = {.shared = true, .created_at = util_now()};
	util_strlcpy(g.name, name, sizeof g.name);
	util_strlcpy(g.topology, "unknown", sizeof g.topology);
	util_strlcpy(g.shape, n == 1 ? "single" : "scattered", sizeof g.shape);
	util_strlcpy(g.created_by, "fuzz_session", sizeof g.created_by);
	char cn[64], cg[64];
	if (db_group_create(A.hd.db, &g, ids, n, cn, cg) < 0)
		die("cannot make a group", name);
}

/* Between inputs: the rows the previous input may have removed or drained
 * (an admin caller may, and fz-w1 may leave) are put back, and the groups
 * g1 (fz-w1) and g2 (fz-head, fz-w1) that jobs run on. */
static void restore_rows(void)
{
	db_node n;
	if (db_node_get(A.hd.db, w1_id, &n) < 0)
		add_worker("fz-w1", w1_id);
	if (db_node_get(A.hd.db, w2_id, &n) < 0)
		add_worker("fz-w2", w2_id);
	const char *g1[] = {w1_id}, *g2[] = {head_id, w1_id};
	ensure_group("g1", g1, 1);
	ensure_group("g2", g2, 2);
	db_node_set_drained(A.hd.db, w1_id, false);
	db_node_set_drained(A.hd.db, w2_id, false);
	db_node_set_drained(A.hd.db, head_id, false);
}

struct snapshot {
	size_t tokens, revoked, groups;
};

static void snap(struct snapshot *s)
{
	db_token *t = NULL;
	db_group *g = NULL;
	size_t n = 0;
	memset(s, 0, sizeof *s);
	if (db_token_list(A.hd.db, &t, &s->tokens) < 0 || db_group_list(A.hd.db, &g, &n) < 0)
		die("cannot read cluster.db", NULL);
	for (size_t i = 0; i < s->tokens; i++)
		s->revoked += t[i].revoked;
	s->groups = n;
	free(t);
	free(g);
}

static void check_no_admin_effect(const struct snapshot *before)
{
	struct snapshot after;
	snap(&after);
	char d[160];
	snprintf(d, sizeof d, "tokens %zu -> %zu, revoked %zu -> %zu, groups %zu -> %zu",
		 before->tokens, after.tokens, before->revoked, after.revoked, before->groups,
		 after.groups);
	if (after.tokens != before->tokens || after.revoked != before->revoked ||
	    after.groups != before->groups)
		die("cluster.db changed without an admin caller", d);
	db_node n;
	if (db_node_get(A.hd.db, w2_id, &n) < 0 || n.drained)
		die("another node was removed or drained without an admin caller", "fz-w2");
	if (db_node_get(A.hd.db, head_id, &n) < 0 || n.drained)
		die("the head was removed or drained without an admin caller", NULL);
	if (db_node_get(A.hd.db, w1_id, &n) == 0 && n.drained)
		die("fz-w1 was drained without an admin caller", NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool ready;
	if (!ready) {
		setup();
		ready = true;
	}
	if (size > 4096)
		return 0;
	struct in in = {data, size};
	restore_rows();
	struct snapshot before;
	snap(&before);
	memset(&s_job, 0, sizeof s_job);
	memset(&s_tail, 0, sizeof s_tail);
	memset(&s_exec, 0, sizeof s_exec);
	memset(&s_topo, 0, sizeof s_topo);
	memset(&s_rank, 0, sizeof s_rank);
	memset(&s_req, 0, sizeof s_req);
	n_probe = 0;
	n_must_fail = 0;
	admin_asked = false;
	head_closed = false;
	adopted = false;
	proto_decoder_init(&cdec);

	cfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	util_strlcpy(sa.sun_path, adopt_path, sizeof sa.sun_path);
	if (cfd < 0 || connect(cfd, (struct sockaddr *)&sa, sizeof sa) < 0)
		die("cannot connect to the adoption socket", strerror(errno));
	fcntl(cfd, F_SETFL, fcntl(cfd, F_GETFL) | O_NONBLOCK);
	uint64_t t0 = util_now_ms();
	while (!adopted && util_now_ms() - t0 < 1000)
		uv_run(A.loop, UV_RUN_NOWAIT);
	if (!adopted)
		die("the head did not accept the session", NULL);
	settle(FRAME_IDLE_MS);

	for (int k = 0; k < MAX_FRAMES && !head_closed && next_frame(&in); k++)
		settle(FRAME_IDLE_MS);

	close(cfd);
	cfd = -1;
	free(out);
	out = NULL;
	out_len = out_off = 0;
	proto_decoder_free(&cdec);
	t0 = util_now_ms();
	while (A.hd.sessions && util_now_ms() - t0 < RELEASE_MS) {
		uv_run(A.loop, UV_RUN_NOWAIT);
		if (A.hd.sessions)
			usleep(200);
	}
	if (A.hd.sessions)
		die("the head still holds a session after the member closed", NULL);
	/* What the close set off (mail to the head's own node, job ends) runs now. */
	for (int i = 0; i < 4; i++)
		uv_run(A.loop, UV_RUN_NOWAIT);
	if (!admin_asked)
		check_no_admin_effect(&before);
	return 0;
}

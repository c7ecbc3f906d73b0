/* jobs_node: a node's share of jobs (every sparkd, head included).
 *
 * A rank lives in STATE_DIR/jobs/JOB/rank-R/: spec.json (what the shim runs),
 * output.log (stdout and stderr, as written), shim.pid ("PID STARTTIME"),
 * status ("CODE SIGNAL", left by the shim). The shim (jobs_shim.c) is started
 * detached, so ranks outlive sparkd; a restarted sparkd adopts the shims that
 * still run (same pid AND start time) and polls them, reads the status of
 * those that ended meanwhile, and reports all of it to the head (job_sync).
 * The head answers with the jobs it considers finished (job_sync_ack): their
 * dirs get a "done" mark and are removed after JOBS_KEEP_DAYS.
 *
 * Each rank's environment is built here from THIS node's own discovery
 * (jobenv.h), so interface and RDMA names are always this node's. Logs are
 * streamed to the head on request (job_tail), from an offset, following the
 * file until the rank has exited and every byte was sent. Exec sessions run
 * the same shim with pipes instead of a log and end with their CLI. */
#include "jobs.h"

#include "jobenv.h"
#include "log.h"
#include "proto.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <ifaddrs.h>
#include <arpa/inet.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct nrank {
	struct nrank *next;
	struct agent *a;
	long long job_id;
	int rank;
	char dir[PATH_MAX];
	pid_t pid;
	unsigned long long start;   /* the shim's start time (clock ticks since boot) */
	uv_process_t *proc;         /* our child; NULL when adopted or reaped */
	bool adopted;
	bool exited;
	bool lost;                  /* ended without a status (the shim was killed) */
	int code, sig;
	int64_t started_at, ended_at;
};

struct ntail {
	struct ntail *next;
	long long tail_id, job_id;
	int rank;
	int64_t offset;
	bool follow;
};

struct nexec {
	struct nexec *next;
	struct agent *a;
	long long exec_id;
	char dir[PATH_MAX];
	uv_process_t *proc;
	uv_pipe_t *pipes[2];        /* stdout, stderr */
	char carry[2][4];           /* an unfinished UTF-8 sequence */
	size_t ncarry[2];
	int open;                   /* handles not closed yet */
	bool exited;
	int code, sig;
	pid_t pid;
};

static void jobs_dir(struct agent *a, char *out, size_t len)
{
	snprintf(out, len, "%s/jobs", a->opts.state_dir);
}

/* ---- processes -------------------------------------------------------------- */

/* Field 22 of /proc/PID/stat; 0 when the process does not exist. */
static unsigned long long proc_start(pid_t pid)
{
	char p[64], buf[1024];
	snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	char *s = strrchr(buf, ')');
	if (!s)
		return 0;
	/* after ")": state(3) ppid(4) ... starttime(22) */
	int field = 2;
	for (char *t = s + 1; *t; t++) {
		if (*t == ' ') {
			field++;
			if (field == 22)
				return strtoull(t + 1, NULL, 10);
		}
	}
	return 0;
}

static bool zombie(pid_t pid)
{
	char p[64], buf[256];
	snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return true;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return true;
	buf[n] = '\0';
	char *s = strrchr(buf, ')');
	return !s || s[1] == '\0' || s[2] == 'Z' || s[2] == 'X';
}

static bool alive(pid_t pid, unsigned long long start)
{
	return pid > 0 && start && proc_start(pid) == start && !zombie(pid);
}

static int read_status(const char *dir, int *code, int *sig, int64_t *when)
{
	char p[PATH_MAX];
	snprintf(p, sizeof p, "%s/status", dir);
	FILE *f = fopen(p, "re");
	if (!f)
		return -errno;
	int r = fscanf(f, "%d %d", code, sig) == 2 ? 0 : -EINVAL;
	struct stat st;
	if (when)
		*when = fstat(fileno(f), &st) == 0 ? (int64_t)st.st_mtime : util_now();
	fclose(f);
	return r;
}

/* ---- environment ------------------------------------------------------------- */

/* This node's discovery: the fabric service's, kept current by its netlink
 * watcher (borrowed; NULL before the first one). */
static json_t *discovery(struct agent *a)
{
	return a->hooks.discovery ? a->hooks.discovery(a) : NULL;
}

/* The netdev holding IPv4 addr, and its subnet as CIDR. */
static void iface_of(const char *addr, char *ifn, size_t il, char *cidr, size_t cl)
{
	ifn[0] = cidr[0] = '\0';
	struct in_addr want;
	if (!addr || inet_pton(AF_INET, addr, &want) != 1)
		return;
	struct ifaddrs *ifs = NULL;
	if (getifaddrs(&ifs) < 0)
		return;
	for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
			continue;
		struct sockaddr_in *sa = (struct sockaddr_in *)i->ifa_addr;
		if (sa->sin_addr.s_addr != want.s_addr)
			continue;
		snprintf(ifn, il, "%s", i->ifa_name);
		if (i->ifa_netmask) {
			uint32_t m = ntohl(((struct sockaddr_in *)i->ifa_netmask)->sin_addr.s_addr);
			int pl = 0;
			while (pl < 32 && (m & (0x80000000u >> pl)))
				pl++;
			char c[80];
			snprintf(c, sizeof c, "%s/%d", addr, pl);
			jobenv_cidr_network(c, cidr, cl);
		}
		break;
	}
	freeifaddrs(ifs);
}

static const char *js(const json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "";
}

static int ji(const json_t *o, const char *k, int def)
{
	json_t *v = json_object_get(o, k);
	return json_is_integer(v) ? (int)json_integer_value(v) : def;
}

/* The environment of a rank (rank -1: exec inside a job, or a launcher that
 * numbers its own workers). */
static json_t *rank_env(struct agent *a, const json_t *job, int node_rank, const char *socket_addr,
			int rank, int local_rank, const char *launcher)
{
	char ifn[64], cidr[80];
	iface_of(socket_addr, ifn, sizeof ifn, cidr, sizeof cidr);
	json_t *base = json_object();
	const char *path = js(job, "path");
	json_object_set_new(base, "PATH", json_string(*path ? path
							   : "/usr/local/sbin:/usr/local/bin:"
							     "/usr/sbin:/usr/bin:/sbin:/bin"));
	if (*js(job, "lang"))
		json_object_set_new(base, "LANG", json_string(js(job, "lang")));
	json_object_set_new(base, "SPARKCTL_SOCKET", json_string(a->opts.socket));
	if (strcmp(launcher, "mpi") == 0 && strcmp(js(job, "owner"), "root") == 0) {
		json_object_set_new(base, "OMPI_ALLOW_RUN_AS_ROOT", json_string("1"));
		json_object_set_new(base, "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", json_string("1"));
	}
	const char *inc = js(job, "tcp_include");
	struct jobenv_job e = {
		.job_id = (long long)json_integer_value(json_object_get(job, "id")),
		.job_name = js(job, "name"),
		.group = js(job, "group"),
		.topology = js(job, "topology"),
		.shape = js(job, "shape"),
		.launcher = launcher,
		.world_size = ji(job, "world_size", 1),
		.ranks_per_node = ji(job, "ranks_per_node", 1),
		.nnodes = ji(job, "nnodes", 1),
		.node_rank = node_rank,
		.node = a->id.node_name,
		.rank = rank,
		.local_rank = local_rank,
		.net = js(job, "net"),
		.socket_addr = socket_addr,
		.socket_ifname = ifn,
		.tcp_include = *inc ? inc : cidr,
		.master_addr = js(job, "master_addr"),
		.master_port = ji(job, "master_port", 0),
		.peers = js(job, "peers"),
		.model_dir = a->hooks.model_dir ? a->hooks.model_dir(a) : NULL,
		.base = base,
		.overrides = json_object_get(job, "env"),
	};
	json_t *env = jobenv_build(&e, discovery(a));
	json_decref(base);
	return env;
}

json_t *jn_rank_env(struct agent *a, const json_t *job, int node_rank, const char *socket_addr,
		    int rank, int local_rank, const char *launcher)
{
	return rank_env(a, job, node_rank, socket_addr, rank, local_rank, launcher);
}

/* Where sparkctl is, for Open MPI's remote launcher. */
static void find_sparkctl(struct agent *a, char *out, size_t len)
{
	const char *env = getenv("SPARKCTL");
	if (env && *env && access(env, X_OK) == 0) {
		snprintf(out, len, "%s", env);
		return;
	}
	char exe[PATH_MAX];
	snprintf(exe, sizeof exe, "%s", a->jobs->exe);
	const char *dir = dirname(exe);
	const char *rel[] = {"sparkctl", "../cli/sparkctl", "../bin/sparkctl"};
	for (size_t i = 0; i < ARRAY_SIZE(rel); i++) {
		char cand[PATH_MAX + 32], real[PATH_MAX];
		snprintf(cand, sizeof cand, "%s/%s", dir, rel[i]);
		if (access(cand, X_OK) == 0 && realpath(cand, real)) {
			snprintf(out, len, "%s", real);
			return;
		}
	}
	snprintf(out, len, "sparkctl");
}

static void push(json_t *arr, const char *s) { json_array_append_new(arr, json_string(s)); }

static void pushi(json_t *arr, long long v)
{
	char b[32];
	snprintf(b, sizeof b, "%lld", v);
	push(arr, b);
}

/* The argv a rank runs for its launcher. */
static json_t *launch_argv(struct agent *a, const json_t *job, int node_rank, const char *rankdir,
			   char *err, size_t errlen)
{
	const char *launcher = js(job, "launcher");
	json_t *user = json_object_get(job, "argv");
	json_t *argv = json_array();
	if (strcmp(launcher, "torchrun") == 0) {
		push(argv, "torchrun");
		push(argv, "--nnodes");
		pushi(argv, ji(job, "nnodes", 1));
		push(argv, "--node_rank");
		pushi(argv, node_rank);
		push(argv, "--nproc_per_node");
		pushi(argv, ji(job, "ranks_per_node", 1));
		push(argv, "--master_addr");
		push(argv, js(job, "master_addr"));
		push(argv, "--master_port");
		pushi(argv, ji(job, "master_port", 0));
		/* torch 1.13 on Python 3.11 crashes without these (TEST-ENV-NOTES.md) */
		push(argv, "--redirects");
		push(argv, "1");
		push(argv, "--tee");
		push(argv, "1");
	} else if (strcmp(launcher, "mpi") == 0) {
		char hf[PATH_MAX], agent[PATH_MAX + 32], ctl[PATH_MAX];
		snprintf(hf, sizeof hf, "%s/hostfile", rankdir);
		json_t *hosts = json_object_get(job, "hosts");
		char *text = NULL;
		size_t tl = 0;
		FILE *f = open_memstream(&text, &tl);
		size_t i;
		json_t *h;
		json_array_foreach(hosts, i, h)
			fprintf(f, "%s slots=%d\n", json_string_value(h), ji(job, "ranks_per_node", 1));
		fclose(f);
		int r = util_write_file(hf, text, tl, 0644);
		free(text);
		if (r < 0) {
			snprintf(err, errlen, "cannot write %s: %s", hf, strerror(-r));
			json_decref(argv);
			return NULL;
		}
		find_sparkctl(a, ctl, sizeof ctl);
		snprintf(agent, sizeof agent, "%s exec --shell", ctl);
		const char *inc = js(job, "tcp_include");
		const char *mca[][2] = {{"plm_rsh_agent", agent},
					{"plm_rsh_no_tree_spawn", "1"},
					{"rtc_hwloc_vmhole", "none"},
					{"btl_tcp_if_include", inc},
					{"oob_tcp_if_include", inc}};
		push(argv, "mpirun");
		push(argv, "--hostfile");
		push(argv, hf);
		push(argv, "-np");
		pushi(argv, ji(job, "world_size", 1));
		for (i = 0; i < ARRAY_SIZE(mca); i++) {
			if (!*mca[i][1])
				continue;
			push(argv, "--mca");
			push(argv, mca[i][0]);
			push(argv, mca[i][1]);
		}
		push(argv, "--tag-output");
	}
	json_array_extend(argv, user);
	return argv;
}

/* ---- starting ranks ------------------------------------------------------------ */

static void on_rank_exit(uv_process_t *p, int64_t status, int term);
static void rank_finished(struct agent *a, struct nrank *r);
static void ensure_tick(struct agent *a);

static void free_handle(uv_handle_t *h) { free(h); }

static int write_json(const char *path, json_t *j, int mode)
{
	char *s = json_dumps(j, JSON_COMPACT);
	if (!s)
		return -ENOMEM;
	int r = util_write_file(path, s, strlen(s), mode);
	free(s);
	return r;
}

/* Spawn the shim on DIR with stdout/stderr from stdio[1..2]. */
static int spawn_shim(struct agent *a, const char *dir, uv_stdio_container_t stdio[3],
		      uv_process_t *proc, uv_exit_cb cb)
{
	char *args[] = {a->jobs->exe, "--rank-shim", (char *)dir, NULL};
	char *env[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", NULL};
	uv_process_options_t o = {
		.exit_cb = cb,
		.file = a->jobs->exe,
		.args = args,
		.env = env,
		.cwd = "/",
		.flags = UV_PROCESS_DETACHED,
		.stdio_count = 3,
		.stdio = stdio,
	};
	return uv_spawn(a->loop, proc, &o);
}

static struct nrank *find_rank(struct jobs *J, long long job, int rank)
{
	for (struct nrank *r = J->ranks; r; r = r->next)
		if (r->job_id == job && r->rank == rank)
			return r;
	return NULL;
}

static void append_log(const char *dir, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void append_log(const char *dir, const char *fmt, ...)
{
	char p[PATH_MAX];
	snprintf(p, sizeof p, "%s/output.log", dir);
	FILE *f = fopen(p, "ae");
	if (!f)
		return;
	va_list ap;
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fclose(f);
}

/* The job as one rank sees it: a job another service launched
 * (job_launch) carries each rank's own argv and environment in "rank_specs";
 * its env applies after the job's (a new reference; NULL when rank_specs has
 * no entry for this rank). */
static json_t *rank_view(const json_t *job, int rank)
{
	json_t *specs = json_object_get(job, "rank_specs");
	if (!specs)
		return json_incref((json_t *)job);
	json_t *one = json_array_get(specs, (size_t)rank);
	json_t *argv = json_object_get(one, "argv");
	if (rank < 0 || !json_is_array(argv) || json_array_size(argv) == 0)
		return NULL;
	json_t *v = json_copy((json_t *)job);
	json_t *env = json_array();
	if (!v || !env) {
		json_decref(v);
		json_decref(env);
		return NULL;
	}
	json_array_extend(env, json_object_get(job, "env"));
	json_array_extend(env, json_object_get(one, "env"));
	json_object_set(v, "argv", argv);
	json_object_set_new(v, "env", env);
	json_object_del(v, "rank_specs");
	return v;
}

static int start_rank_as(struct agent *a, const json_t *job, int node_rank, const char *socket_addr,
			 int rank, int local_rank, struct nrank *r, char *err, size_t errlen);

static int start_rank(struct agent *a, const json_t *job, int node_rank, const char *socket_addr,
		      int rank, int local_rank, struct nrank *r, char *err, size_t errlen)
{
	json_t *view = rank_view(job, rank);
	if (!view) {
		snprintf(err, errlen, "the job has no command for rank %d", rank);
		return -EINVAL;
	}
	int e = start_rank_as(a, view, node_rank, socket_addr, rank, local_rank, r, err, errlen);
	json_decref(view);
	return e;
}

static int start_rank_as(struct agent *a, const json_t *job, int node_rank, const char *socket_addr,
			 int rank, int local_rank, struct nrank *r, char *err, size_t errlen)
{
	const char *launcher = js(job, "launcher");
	bool numbered = strcmp(launcher, "native") == 0;
	int e = util_mkdirs(r->dir, 0755);
	if (e < 0) {
		snprintf(err, errlen, "cannot make %s: %s", r->dir, strerror(-e));
		return e;
	}
	json_t *argv = launch_argv(a, job, node_rank, r->dir, err, errlen);
	if (!argv)
		return -EIO;
	json_t *env = rank_env(a, job, node_rank, socket_addr, numbered ? rank : -1,
			       numbered ? local_rank : -1, launcher);
	json_t *cwd = json_array();
	const char *wd = js(job, "workdir");
	if (*wd) {
		push(cwd, wd);
	} else if (*js(job, "cwd")) {
		push(cwd, js(job, "cwd"));
	}
	char what[64];
	snprintf(what, sizeof what, "rank %d", rank);
	json_t *spec = json_pack("{s:o, s:o, s:s, s:o, s:b, s:s, s:s, s:i}", "argv", argv, "env",
				 env ? env : json_object(), "user", js(job, "owner"), "cwd", cwd,
				 "cwd_strict", *wd != '\0', "node", a->id.node_name, "what", what,
				 "grace_ms", ji(job, "grace_ms", JOBS_GRACE_MS));
	char p[PATH_MAX];
	snprintf(p, sizeof p, "%s/spec.json", r->dir);
	e = write_json(p, spec, 0600);
	json_decref(spec);
	if (e < 0) {
		snprintf(err, errlen, "cannot write %s: %s", p, strerror(-e));
		return e;
	}
	snprintf(p, sizeof p, "%s/output.log", r->dir);
	int fd = open(p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (fd < 0) {
		snprintf(err, errlen, "cannot open %s: %s", p, strerror(errno));
		return -errno;
	}
	uv_stdio_container_t stdio[3] = {{.flags = UV_IGNORE},
					 {.flags = UV_INHERIT_FD, .data.fd = fd},
					 {.flags = UV_INHERIT_FD, .data.fd = fd}};
	r->proc = calloc(1, sizeof *r->proc);
	if (!r->proc) {
		close(fd);
		return -ENOMEM;
	}
	r->proc->data = r;
	e = spawn_shim(a, r->dir, stdio, r->proc, on_rank_exit);
	close(fd);
	if (e < 0) {
		uv_close((uv_handle_t *)r->proc, free_handle);
		r->proc = NULL;
		snprintf(err, errlen, "cannot start the rank supervisor %s: %s", a->jobs->exe,
			 uv_strerror(e));
		return e;
	}
	r->pid = r->proc->pid;
	r->start = proc_start(r->pid);
	r->started_at = util_now();
	char buf[64];
	int n = snprintf(buf, sizeof buf, "%d %llu\n", (int)r->pid, r->start);
	snprintf(p, sizeof p, "%s/shim.pid", r->dir);
	util_write_file(p, buf, (size_t)n, 0644);
	return 0;
}

void jn_job_start(struct agent *a, const char *from, const json_t *msg)
{
	(void)from;
	struct jobs *J = a->jobs;
	json_t *job = json_object_get(msg, "job");
	long long id = (long long)json_integer_value(json_object_get(job, "id"));
	int node_rank = ji(msg, "node_rank", 0);
	const char *sock = js(msg, "socket_addr");
	char jd[PATH_MAX], p[PATH_MAX + 16];
	jobs_dir(a, jd, sizeof jd);
	snprintf(p, sizeof p, "%s/%lld", jd, id);
	util_mkdirs(p, 0755);
	snprintf(p, sizeof p, "%s/%lld/job.json", jd, id);
	write_json(p, (json_t *)msg, 0600);
	json_t *started = json_array();
	json_t *failed = json_array();
	size_t i;
	json_t *rk;
	json_array_foreach(json_object_get(msg, "ranks"), i, rk) {
		int rank = ji(rk, "rank", 0);
		if (find_rank(J, id, rank))
			continue; /* a duplicate start (head retry): already ours */
		struct nrank *r = calloc(1, sizeof *r);
		if (!r)
			break;
		r->a = a;
		r->job_id = id;
		r->rank = rank;
		snprintf(r->dir, sizeof r->dir, "%s/%lld/rank-%d", jd, id, rank);
		r->next = J->ranks;
		J->ranks = r;
		char err[512] = "";
		if (start_rank(a, job, node_rank, sock, rank, ji(rk, "local_rank", 0), r, err,
			       sizeof err) < 0) {
			log_warn("rank_start_failed", "job=%lld rank=%d err=%s", id, rank, log_q(err));
			append_log(r->dir, "sparkd: rank %d on %s: %s\n", rank, a->id.node_name, err);
			r->exited = true;
			r->code = 126;
			r->started_at = r->ended_at = util_now();
			char sp[PATH_MAX + 8], buf[32];
			snprintf(sp, sizeof sp, "%s/status", r->dir);
			util_write_file(sp, buf, (size_t)snprintf(buf, sizeof buf, "126 0\n"), 0644);
			json_array_append_new(failed, json_integer(rank));
			continue;
		}
		log_info("rank_started", "job=%lld rank=%d pid=%d", id, rank, (int)r->pid);
		json_array_append_new(started,
				      json_pack("{s:i, s:I, s:I}", "rank", rank, "pid",
						(json_int_t)r->pid, "started_at", (json_int_t)r->started_at));
	}
	/* tails of a foreground run, before anything can end */
	json_array_foreach(json_object_get(msg, "tails"), i, rk) {
		struct ntail *t = calloc(1, sizeof *t);
		if (!t)
			break;
		t->tail_id = (long long)proto_int(rk, "tail_id", 0);
		t->job_id = id;
		t->rank = (int)proto_int(rk, "rank", 0);
		t->follow = true;
		t->next = J->tails;
		J->tails = t;
		ensure_tick(a);
	}
	json_t *m = proto_msg("job_started", 0);
	json_object_set_new(m, "job_id", json_integer(id));
	json_object_set_new(m, "ranks", started);
	peers_to_head(a, m);
	json_array_foreach(failed, i, rk) {
		struct nrank *r = find_rank(J, id, (int)json_integer_value(rk));
		if (r)
			rank_finished(a, r);
	}
	json_decref(failed);
}

/* ---- tails ---------------------------------------------------------------------- */

static void send_data(struct agent *a, struct ntail *t, json_t *text, bool eof, const char *err)
{
	json_t *m = proto_msg("job_data", 0);
	json_object_set_new(m, "tail_id", json_integer(t->tail_id));
	json_object_set_new(m, "job_id", json_integer(t->job_id));
	json_object_set_new(m, "rank", json_integer(t->rank));
	json_object_set_new(m, "offset", json_integer(t->offset));
	if (text)
		json_object_set_new(m, "data", text);
	if (eof)
		json_object_set_new(m, "eof", json_true());
	if (err)
		json_object_set_new(m, "error", json_string(err));
	peers_to_head(a, m);
}

static void tail_free(struct jobs *J, struct ntail *t)
{
	for (struct ntail **p = &J->tails; *p; p = &(*p)->next)
		if (*p == t) {
			*p = t->next;
			break;
		}
	free(t);
}

/* Send what the log has from t->offset (at most max_chunks frames). Returns
 * true when the tail is finished (eof sent). */
static bool tail_pump(struct agent *a, struct ntail *t, int max_chunks)
{
	struct jobs *J = a->jobs;
	struct nrank *r = find_rank(J, t->job_id, t->rank);
	char p[PATH_MAX];
	jobs_dir(a, p, sizeof p);
	char lp[PATH_MAX + 64];
	snprintf(lp, sizeof lp, "%s/%lld/rank-%d/output.log", p, t->job_id, t->rank);
	/* Done when the rank has ended (or is not running here) and the file is read. */
	bool ended = !t->follow || !r || r->exited;
	int fd = open(lp, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (!ended)
			return false;
		char why[160];
		snprintf(why, sizeof why, "no log of rank %d of job %lld on %s", t->rank, t->job_id,
			 a->id.node_name);
		send_data(a, t, NULL, true, why);
		return true;
	}
	static char buf[JOBS_CHUNK];
	bool finished = false;
	for (int c = 0; c < max_chunks; c++) {
		ssize_t n = pread(fd, buf, sizeof buf, t->offset);
		if (n < 0)
			break;
		if (n == 0) {
			if (ended) {
				send_data(a, t, NULL, true, NULL);
				finished = true;
			}
			break;
		}
		size_t used = 0;
		/* a UTF-8 sequence cut by the read waits, unless nothing more can come */
		bool last = ended && n < (ssize_t)sizeof buf;
		json_t *text = jobs_text(buf, (size_t)n, last, &used);
		if (used == 0 && !last) {
			json_decref(text);
			break;
		}
		t->offset += (int64_t)used;
		send_data(a, t, text, false, NULL);
	}
	close(fd);
	return finished;
}

static void node_tick(uv_timer_t *tm);

static void ensure_tick(struct agent *a)
{
	struct jobs *J = a->jobs;
	if (!uv_is_active((uv_handle_t *)&J->node_timer) && !J->stopping)
		uv_timer_start(&J->node_timer, node_tick, JOBS_TICK_MS, JOBS_TICK_MS);
}

void jn_job_tail(struct agent *a, const char *from, const json_t *msg)
{
	(void)from;
	struct jobs *J = a->jobs;
	struct ntail *t = calloc(1, sizeof *t);
	if (!t)
		return;
	t->tail_id = (long long)proto_int(msg, "tail_id", 0);
	t->job_id = (long long)proto_int(msg, "job_id", 0);
	t->rank = (int)proto_int(msg, "rank", 0);
	t->offset = proto_int(msg, "offset", 0);
	t->follow = json_is_true(json_object_get(msg, "follow"));
	t->next = J->tails;
	J->tails = t;
	ensure_tick(a);
}

void jn_job_untail(struct agent *a, const char *from, const json_t *msg)
{
	(void)from;
	struct jobs *J = a->jobs;
	long long id = (long long)proto_int(msg, "tail_id", 0);
	for (struct ntail *t = J->tails; t; t = t->next)
		if (t->tail_id == id) {
			tail_free(J, t);
			return;
		}
}

/* ---- rank exit --------------------------------------------------------------------- */

bool jn_job_here(struct agent *a, long long job_id)
{
	if (!a->jobs)
		return false;
	for (struct nrank *r = a->jobs->ranks; r; r = r->next)
		if (r->job_id == job_id && !r->exited)
			return true;
	return false;
}

static void rank_finished(struct agent *a, struct nrank *r)
{
	struct jobs *J = a->jobs;
	/* Every byte of output goes before the exit, on the same ordered channel. */
	for (struct ntail *t = J->tails, *next; t; t = next) {
		next = t->next;
		if (t->job_id == r->job_id && t->rank == r->rank && tail_pump(a, t, 1 << 20))
			tail_free(J, t);
	}
	log_info("rank_exited", "job=%lld rank=%d code=%d signal=%d%s", r->job_id, r->rank, r->code,
		 r->sig, r->lost ? " lost=1" : "");
	json_t *m = proto_msg("job_exit", 0);
	json_object_set_new(m, "job_id", json_integer(r->job_id));
	json_object_set_new(m, "rank", json_integer(r->rank));
	json_object_set_new(m, "exit_code", json_integer(r->code));
	json_object_set_new(m, "signal", json_integer(r->sig));
	json_object_set_new(m, "ended_at", json_integer(r->ended_at));
	if (r->lost)
		json_object_set_new(m, "lost", json_true());
	peers_to_head(a, m);
}

/* term: the signal that ended our child shim (0 unknown, or adopted). */
static void collect(struct nrank *r, int term)
{
	int code = 0, sig = 0;
	int64_t when = util_now();
	if (read_status(r->dir, &code, &sig, &when) == 0) {
		r->code = code;
		r->sig = sig;
	} else if (term) {
		/* killed before it could block signals: by us (stop), so the rank
		 * never ran or was stopped with it */
		r->code = 128 + term;
		r->sig = term;
	} else {
		r->lost = true;
		r->code = -1;
	}
	r->exited = true;
	r->ended_at = when;
}

static void on_rank_exit(uv_process_t *p, int64_t status, int term)
{
	struct nrank *r = p->data;
	(void)status;
	(void)term;
	uv_close((uv_handle_t *)p, free_handle);
	if (!r)
		return;
	r->proc = NULL;
	collect(r, term);
	if (!r->a->jobs->stopping)
		rank_finished(r->a, r);
}

static void node_tick(uv_timer_t *tm)
{
	struct jobs *J = tm->data;
	struct agent *a = J->a;
	bool adopted = false;
	for (struct nrank *r = J->ranks; r; r = r->next) {
		if (!r->adopted || r->exited)
			continue;
		if (alive(r->pid, r->start)) {
			adopted = true;
			continue;
		}
		collect(r, 0);
		rank_finished(a, r);
	}
	for (struct ntail *t = J->tails, *next; t; t = next) {
		next = t->next;
		if (tail_pump(a, t, t->follow ? 4 : 16))
			tail_free(J, t);
	}
	if (!adopted && !J->tails)
		uv_timer_stop(tm);
}

void jn_job_signal(struct agent *a, const char *from, const json_t *msg)
{
	(void)from;
	struct jobs *J = a->jobs;
	long long id = (long long)proto_int(msg, "job_id", 0);
	const char *s = proto_str(msg, "signal");
	int sig = s && strcmp(s, "KILL") == 0 ? SIGUSR1 : SIGTERM;
	for (struct nrank *r = J->ranks; r; r = r->next) {
		if (r->job_id != id || r->exited)
			continue;
		if (r->proc || alive(r->pid, r->start)) {
			log_info("rank_signal", "job=%lld rank=%d signal=%s", id, r->rank,
				 sig == SIGTERM ? "TERM" : "KILL");
			kill(r->pid, sig);
		}
	}
}

/* ---- sync with the head ---------------------------------------------------------------- */

static json_t *rank_json(const struct nrank *r)
{
	json_t *o = json_pack("{s:I, s:i, s:s, s:I, s:I, s:I}", "job_id", (json_int_t)r->job_id,
			      "rank", r->rank, "state", r->exited ? "exited" : "running", "pid",
			      (json_int_t)r->pid, "started_at", (json_int_t)r->started_at, "ended_at",
			      (json_int_t)r->ended_at);
	if (r->exited) {
		json_object_set_new(o, "exit_code", json_integer(r->code));
		json_object_set_new(o, "signal", json_integer(r->sig));
		if (r->lost)
			json_object_set_new(o, "lost", json_true());
	}
	return o;
}

void jn_head_up(struct agent *a)
{
	struct jobs *J = a->jobs;
	json_t *arr = json_array();
	for (struct nrank *r = J->ranks; r; r = r->next)
		json_array_append_new(arr, rank_json(r));
	json_t *m = proto_msg("job_sync", 0);
	json_object_set_new(m, "ranks", arr);
	peers_to_head(a, m);
}

static void rank_free(struct nrank *r)
{
	if (r->proc) /* still running as our child: the handle outlives the record */
		r->proc->data = NULL;
	free(r);
}

void jn_sync_ack(struct agent *a, const char *from, const json_t *msg)
{
	(void)from;
	struct jobs *J = a->jobs;
	char jd[PATH_MAX];
	jobs_dir(a, jd, sizeof jd);
	size_t i;
	json_t *v;
	json_array_foreach(json_object_get(msg, "done"), i, v) {
		long long id = (long long)json_integer_value(v);
		bool busy = false;
		for (struct nrank *r = J->ranks; r; r = r->next)
			busy |= r->job_id == id && !r->exited;
		if (busy)
			continue; /* the head stops it first; a later ack forgets it */
		char p[PATH_MAX + 32];
		snprintf(p, sizeof p, "%s/%lld/done", jd, id);
		util_write_file(p, "", 0, 0644);
		for (struct nrank **pp = &J->ranks; *pp;) {
			struct nrank *r = *pp;
			if (r->job_id == id) {
				*pp = r->next;
				rank_free(r);
			} else {
				pp = &r->next;
			}
		}
	}
}

/* ---- exec sessions ------------------------------------------------------------------------ */

static void exec_free(struct nexec *x);

static struct nexec *find_exec(struct jobs *J, long long id)
{
	for (struct nexec *x = J->execs; x; x = x->next)
		if (x->exec_id == id)
			return x;
	return NULL;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	remove(p);
	return 0;
}

static void rm_tree(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static void exec_maybe_done(struct nexec *x)
{
	if (!x->exited || x->open > 0)
		return;
	struct agent *a = x->a;
	json_t *m = proto_msg("exec_exit", 0);
	json_object_set_new(m, "exec_id", json_integer(x->exec_id));
	json_object_set_new(m, "exit_code", json_integer(x->code));
	json_object_set_new(m, "signal", json_integer(x->sig));
	if (!a->jobs->stopping)
		peers_to_head(a, m);
	else
		json_decref(m);
	for (struct nexec **p = &a->jobs->execs; *p; p = &(*p)->next)
		if (*p == x) {
			*p = x->next;
			break;
		}
	exec_free(x);
}

static void on_exec_handle_closed(uv_handle_t *h)
{
	struct nexec *x = h->data;
	free(h);
	if (x) {
		x->open--;
		exec_maybe_done(x);
	}
}

static void exec_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b)
{
	(void)h;
	static char buf[JOBS_CHUNK];
	(void)sz;
	*b = uv_buf_init(buf, sizeof buf);
}

static void exec_send(struct nexec *x, int which, const char *data, size_t n, bool final)
{
	/* carry + data, keeping an unfinished UTF-8 sequence for the next read */
	char *tmp = malloc(n + 4);
	if (!tmp)
		return;
	memcpy(tmp, x->carry[which], x->ncarry[which]);
	memcpy(tmp + x->ncarry[which], data, n);
	size_t total = n + x->ncarry[which], used = 0;
	json_t *text = jobs_text(tmp, total, final, &used);
	x->ncarry[which] = total - used <= 3 ? total - used : 0;
	memcpy(x->carry[which], tmp + used, x->ncarry[which]);
	free(tmp);
	if (!text || json_string_length(text) == 0) {
		json_decref(text);
		return;
	}
	json_t *m = proto_msg("exec_data", 0);
	json_object_set_new(m, "exec_id", json_integer(x->exec_id));
	json_object_set_new(m, "stream", json_string(which ? "err" : "out"));
	json_object_set_new(m, "data", text);
	peers_to_head(x->a, m);
}

static void on_exec_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
	struct nexec *x = s->data;
	int which = (uv_pipe_t *)s == x->pipes[1];
	if (n > 0) {
		exec_send(x, which, b->base, (size_t)n, false);
		return;
	}
	if (n < 0) {
		if (x->ncarry[which])
			exec_send(x, which, "", 0, true);
		x->pipes[which] = NULL;
		uv_close((uv_handle_t *)s, on_exec_handle_closed);
	}
}

static void on_exec_exit(uv_process_t *p, int64_t status, int term)
{
	struct nexec *x = p->data;
	x->exited = true;
	x->code = (int)status;
	x->sig = term;
	if (term && !status)
		x->code = 128 + term;
	x->proc = NULL;
	uv_close((uv_handle_t *)p, on_exec_handle_closed);
}

static void exec_fail(struct agent *a, long long id, const char *why)
{
	json_t *m = proto_msg("exec_exit", 0);
	json_object_set_new(m, "exec_id", json_integer(id));
	json_object_set_new(m, "exit_code", json_integer(126));
	json_object_set_new(m, "signal", json_integer(0));
	json_object_set_new(m, "error", json_string(why));
	peers_to_head(a, m);
}

void jn_exec_start(struct agent *a, const char *from, const json_t *msg)
{
	(void)from;
	struct jobs *J = a->jobs;
	long long id = (long long)proto_int(msg, "exec_id", 0);
	json_t *argv = json_object_get(msg, "argv");
	if (!json_is_array(argv) || json_array_size(argv) == 0) {
		exec_fail(a, id, "exec needs a command");
		return;
	}
	struct nexec *x = calloc(1, sizeof *x);
	if (!x)
		return;
	x->a = a;
	x->exec_id = id;
	char jd[PATH_MAX];
	jobs_dir(a, jd, sizeof jd);
	snprintf(x->dir, sizeof x->dir, "%s/exec-%lld", jd, id);
	util_mkdirs(x->dir, 0700);
	json_t *job = json_object_get(msg, "job");
	json_t *env;
	if (json_is_object(job)) {
		env = rank_env(a, job, (int)proto_int(msg, "node_rank", 0), proto_str(msg, "socket_addr"),
			       -1, -1, "exec");
	} else {
		env = json_object();
		json_object_set_new(env, "PATH", json_string("/usr/local/sbin:/usr/local/bin:"
							     "/usr/sbin:/usr/bin:/sbin:/bin"));
		json_object_set_new(env, "SPARKCTL_SOCKET", json_string(a->opts.socket));
	}
	json_t *args;
	if (json_is_true(json_object_get(msg, "shell"))) {
		/* Open MPI's remote-launch words, quotes and all: a shell puts them together */
		char *line = NULL;
		size_t ll = 0;
		FILE *f = open_memstream(&line, &ll);
		size_t i;
		json_t *w;
		json_array_foreach(argv, i, w)
			fprintf(f, "%s%s", i ? " " : "", json_string_value(w) ? json_string_value(w) : "");
		fclose(f);
		args = json_pack("[s, s, s]", "/bin/sh", "-c", line);
		free(line);
	} else {
		args = json_deep_copy(argv);
	}
	json_t *spec = json_pack("{s:o, s:o, s:s, s:[], s:s, s:s, s:i, s:b}", "argv", args, "env",
				 env ? env : json_object(), "user", js(msg, "user"), "cwd", "node",
				 a->id.node_name, "what", "exec", "grace_ms", 1000, "exec", 1);
	char p[PATH_MAX + 16];
	snprintf(p, sizeof p, "%s/spec.json", x->dir);
	int e = write_json(p, spec, 0600);
	json_decref(spec);
	for (int i = 0; e == 0 && i < 2; i++) {
		x->pipes[i] = calloc(1, sizeof *x->pipes[i]);
		if (!x->pipes[i]) {
			e = -ENOMEM;
			break;
		}
		uv_pipe_init(a->loop, x->pipes[i], 0);
		x->pipes[i]->data = x;
		x->open++;
	}
	x->proc = e == 0 ? calloc(1, sizeof *x->proc) : NULL;
	if (e == 0 && x->proc) {
		x->proc->data = x;
		uv_stdio_container_t stdio[3] = {
			{.flags = UV_IGNORE},
			{.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)x->pipes[0]},
			{.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)x->pipes[1]}};
		e = spawn_shim(a, x->dir, stdio, x->proc, on_exec_exit);
		if (e == 0) {
			x->open++;
			x->pid = x->proc->pid;
		}
	} else if (e == 0) {
		e = -ENOMEM;
	}
	if (e < 0) {
		char why[256];
		snprintf(why, sizeof why, "cannot start the command on %s: %s", a->id.node_name,
			 e > -4096 ? uv_strerror(e) : strerror(-e));
		if (x->proc) {
			uv_close((uv_handle_t *)x->proc, free_handle);
			x->proc = NULL;
		}
		for (int i = 0; i < 2; i++)
			if (x->pipes[i]) {
				x->pipes[i]->data = NULL;
				uv_close((uv_handle_t *)x->pipes[i], on_exec_handle_closed);
				x->pipes[i] = NULL;
			}
		rm_tree(x->dir);
		free(x);
		exec_fail(a, id, why);
		return;
	}
	for (int i = 0; i < 2; i++)
		uv_read_start((uv_stream_t *)x->pipes[i], exec_alloc, on_exec_read);
	x->next = J->execs;
	J->execs = x;
	log_debug("exec_started", "exec=%lld pid=%d", id, (int)x->pid);
}

static void exec_stop(struct nexec *x, int sig)
{
	if (x->proc && !x->exited)
		kill(x->pid, sig);
}

void jn_exec_signal(struct agent *a, const char *from, const json_t *msg)
{
	(void)from;
	struct nexec *x = find_exec(a->jobs, (long long)proto_int(msg, "exec_id", 0));
	if (x)
		exec_stop(x, SIGTERM);
}

static void exec_free(struct nexec *x)
{
	rm_tree(x->dir);
	free(x);
}

/* ---- the head's frames --------------------------------------------------------------------- */

void jn_head_lost(struct agent *a)
{
	struct jobs *J = a->jobs;
	while (J->tails)
		tail_free(J, J->tails);
	for (struct nexec *x = J->execs; x; x = x->next)
		exec_stop(x, SIGTERM);
}

/* ---- start, adoption, stop ----------------------------------------------------------------- */

static bool all_digits(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return false;
	return true;
}

static void adopt_job(struct agent *a, const char *jd, long long id)
{
	struct jobs *J = a->jobs;
	char dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%s/%lld", jd, id);
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, "rank-", 5) != 0 || !all_digits(e->d_name + 5))
			continue;
		struct nrank *r = calloc(1, sizeof *r);
		if (!r)
			break;
		r->a = a;
		r->job_id = id;
		r->rank = atoi(e->d_name + 5);
		snprintf(r->dir, sizeof r->dir, "%s/%s", dir, e->d_name);
		char p[PATH_MAX + 16];
		snprintf(p, sizeof p, "%s/shim.pid", r->dir);
		FILE *f = fopen(p, "re");
		int pid = 0;
		if (f) {
			if (fscanf(f, "%d %llu", &pid, &r->start) != 2)
				pid = 0;
			fclose(f);
		}
		r->pid = pid;
		struct stat st;
		r->started_at = stat(p, &st) == 0 ? (int64_t)st.st_mtime : 0;
		if (alive(r->pid, r->start)) {
			r->adopted = true;
			log_info("rank_adopted", "job=%lld rank=%d pid=%d", id, r->rank, pid);
		} else {
			collect(r, 0);
			log_info("rank_found_ended", "job=%lld rank=%d code=%d%s", id, r->rank, r->code,
				 r->lost ? " lost=1" : "");
		}
		r->next = J->ranks;
		J->ranks = r;
	}
	closedir(d);
}

static void scan(struct agent *a)
{
	char jd[PATH_MAX];
	jobs_dir(a, jd, sizeof jd);
	DIR *d = opendir(jd);
	if (!d)
		return;
	struct dirent *e;
	int64_t now = util_now();
	while ((e = readdir(d))) {
		char p[PATH_MAX + 300];
		if (strncmp(e->d_name, "exec-", 5) == 0) { /* exec sessions end with their sparkd */
			snprintf(p, sizeof p, "%s/%s", jd, e->d_name);
			rm_tree(p);
			continue;
		}
		if (!all_digits(e->d_name))
			continue;
		struct stat st;
		snprintf(p, sizeof p, "%s/%s/done", jd, e->d_name);
		if (stat(p, &st) == 0) {
			if (now - (int64_t)st.st_mtime > (int64_t)JOBS_KEEP_DAYS * 86400) {
				snprintf(p, sizeof p, "%s/%s", jd, e->d_name);
				rm_tree(p);
			}
			continue;
		}
		adopt_job(a, jd, atoll(e->d_name));
	}
	closedir(d);
}

int jn_start(struct agent *a)
{
	struct jobs *J = a->jobs;
	char jd[PATH_MAX];
	jobs_dir(a, jd, sizeof jd);
	util_mkdirs(jd, 0755);
	scan(a);
	for (struct nrank *r = J->ranks; r; r = r->next)
		if (r->adopted)
			ensure_tick(a);
	return 0;
}

void jn_stop(struct agent *a)
{
	struct jobs *J = a->jobs;
	/* Ranks keep running (a restarted sparkd adopts them); exec sessions end. */
	for (struct nexec *x = J->execs; x; x = x->next)
		exec_stop(x, SIGTERM);
	while (J->tails)
		tail_free(J, J->tails);
}

void jn_free(struct agent *a)
{
	struct jobs *J = a->jobs;
	while (J->ranks) {
		struct nrank *r = J->ranks;
		J->ranks = r->next;
		rank_free(r);
	}
	while (J->execs) {
		struct nexec *x = J->execs;
		J->execs = x->next;
		/* handles were closed by the final walk; they are freed with it */
		free(x);
	}
}

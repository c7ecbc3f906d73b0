/* prov: the runner. Hosts in parallel (a small thread pool), the step loop
 * (check -> apply, or check only on a dry run), undo newest-first after a failure,
 * events for the caller, and the rendering of the shipped unit and config
 * (dist/sparkd.service, dist/sparkd.yaml, embedded at build time). */
#include "prov_int.h"

#include "prov_dist.h"
#include "spark_config.h"
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_BINARY (256u << 20)

static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;

const char *prov_step_name(int step)
{
	return step >= 0 && step < PROV_NSTEPS ? prov_steps[step].name : "?";
}

const char *prov_step_title(int step)
{
	return step >= 0 && step < PROV_NSTEPS ? prov_steps[step].title : "?";
}

const char *prov_status_name(enum prov_status s)
{
	switch (s) {
	case PROV_PENDING:
		return "pending";
	case PROV_OK:
		return "ok";
	case PROV_CHANGED:
		return "changed";
	case PROV_UNCHANGED:
		return "unchanged";
	case PROV_SKIPPED:
		return "skipped";
	case PROV_PLANNED:
		return "would change";
	case PROV_FAILED:
		return "failed";
	case PROV_UNDONE:
		return "undone";
	case PROV_UNDO_FAILED:
		return "undo failed";
	}
	return "?";
}

void prov_sha256_hex(const void *data, size_t len, char out[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	static const char hex[] = "0123456789abcdef";
	out[0] = 0;
	if (!EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL) || mdlen != 32)
		return;
	for (unsigned i = 0; i < 32; i++) {
		out[2 * i] = hex[md[i] >> 4];
		out[2 * i + 1] = hex[md[i] & 15];
	}
	out[64] = 0;
}

int prov_init(void) { return ssh_init() == SSH_OK ? 0 : -EIO; }

void prov_finish(void) { ssh_finalize(); }

static uint64_t now_ms(void) { return util_now_ms(); }

static void emit(struct prov_host *h, enum prov_event_kind kind, int step,
		 const struct prov_step_result *res, uint64_t done, uint64_t total)
{
	if (!h->o->on_event)
		return;
	struct prov_event ev = {.kind = kind, .host_index = h->index, .host = h->res->host,
				.step = step, .res = res, .done = done, .total = total};
	pthread_mutex_lock(&ev_mu);
	h->o->on_event(h->o->event_arg, &ev);
	pthread_mutex_unlock(&ev_mu);
}

void prov_progress_add(struct prov_host *h, uint64_t bytes)
{
	uint64_t before = h->progress_done;
	h->progress_done += bytes;
	uint64_t t = h->progress_total ? h->progress_total : 1;
	/* every 2 % (and the end) is plenty for a progress line */
	if (before * 50 / t != h->progress_done * 50 / t || h->progress_done >= t)
		emit(h, PROV_EV_PROGRESS, PROV_STEP_UPLOAD, NULL, h->progress_done, h->progress_total);
}

/* ---- rendering ------------------------------------------------------------------ */

static void join_path(char *out, size_t len, const char *prefix, const char *path)
{
	if (strcmp(prefix, "/") == 0)
		snprintf(out, len, "%s", path);
	else
		snprintf(out, len, "%s%s", prefix, path);
}

/* A host name -> a node name: lower case, first label, [a-z0-9-]. */
static void node_name(const char *hostname, char *out, size_t len)
{
	size_t o = 0;
	for (const char *p = hostname; *p && *p != '.' && o + 1 < len && o < 63; p++) {
		char c = (char)tolower((unsigned char)*p);
		out[o++] = (isalnum((unsigned char)c)) ? c : '-';
	}
	out[o] = 0;
	while (o && out[o - 1] == '-')
		out[--o] = 0;
}

static char *replace_all(const char *s, const char *from, const char *to)
{
	size_t fl = strlen(from), tl = strlen(to), n = 0;
	for (const char *p = strstr(s, from); p; p = strstr(p + fl, from))
		n++;
	char *out = malloc(strlen(s) + n * (tl > fl ? tl - fl : 0) + 1);
	if (!out)
		return NULL;
	char *o = out;
	const char *p;
	while ((p = strstr(s, from))) {
		memcpy(o, s, (size_t)(p - s));
		o += p - s;
		memcpy(o, to, tl);
		o += tl;
		s = p + fl;
	}
	strcpy(o, s);
	return out;
}

/* dist/sparkd.yaml with state_dir, socket, listen and name filled. */
static char *render_config(struct prov_host *h)
{
	const char *src = PROV_DIST_CONFIG;
	size_t cap = strlen(src) + 4096;
	char *out = malloc(cap);
	if (!out)
		return NULL;
	int port = h->o->agent_port > 0 ? h->o->agent_port : SPARK_DEFAULT_PORT;
	size_t o = (size_t)snprintf(out, cap,
				    "# Written by 'sparkctl provision' for node %s; a new provision "
				    "run rewrites it.\n",
				    h->res->node);
	bool seen[4] = {false};
	const char *p = src;
	while (*p) {
		size_t n = strcspn(p, "\n");
		char line[1024];
		snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), p);
		p += n + (p[n] == '\n');
		if (!strncmp(line, "state_dir:", 10)) {
			o += (size_t)snprintf(out + o, cap - o, "state_dir: %s\n", h->p_state);
			seen[0] = true;
		} else if (!strncmp(line, "socket:", 7)) {
			o += (size_t)snprintf(out + o, cap - o, "socket: %s\n", h->p_sock);
			seen[1] = true;
		} else if (!strncmp(line, "listen:", 7)) {
			o += (size_t)snprintf(out + o, cap - o, "listen: 0.0.0.0:%d\n", port);
			seen[2] = true;
		} else if (!strncmp(line, "# name:", 7) || !strncmp(line, "name:", 5)) {
			o += (size_t)snprintf(out + o, cap - o, "name: %s\n", h->res->node);
			seen[3] = true;
		} else {
			o += (size_t)snprintf(out + o, cap - o, "%s\n", line);
		}
		if (o >= cap)
			break;
	}
	if (!seen[0])
		o += (size_t)snprintf(out + o, cap - o, "state_dir: %s\n", h->p_state);
	if (!seen[1])
		o += (size_t)snprintf(out + o, cap - o, "socket: %s\n", h->p_sock);
	if (!seen[2])
		o += (size_t)snprintf(out + o, cap - o, "listen: 0.0.0.0:%d\n", port);
	if (!seen[3])
		snprintf(out + o, cap - o, "name: %s\n", h->res->node);
	return out;
}

int prov_render(struct prov_host *h, char *err, size_t errlen)
{
	const char *px = h->o->prefix;
	node_name(h->facts.hostname, h->res->node, sizeof h->res->node);
	if (!util_valid_name(h->res->node)) {
		snprintf(err, errlen,
			 "the host name '%s' of %s makes no valid node name (1-63 of a-z, 0-9, '-'); "
			 "set a host name on it first",
			 h->facts.hostname, h->addr);
		return -EINVAL;
	}
	join_path(h->p_sparkd, sizeof h->p_sparkd, px, "/usr/sbin/sparkd");
	join_path(h->p_sparkctl, sizeof h->p_sparkctl, px, "/usr/bin/sparkctl");
	join_path(h->p_unit, sizeof h->p_unit, px, "/etc/systemd/system/sparkd.service");
	join_path(h->p_conf, sizeof h->p_conf, px, SPARK_DEFAULT_CONFIG);
	join_path(h->p_netplan, sizeof h->p_netplan, px, "/etc/netplan/40-sparkctl.yaml");
	join_path(h->p_state, sizeof h->p_state, px, SPARK_DEFAULT_STATE_DIR);
	join_path(h->p_sock, sizeof h->p_sock, px, SPARK_DEFAULT_SOCKET);
	join_path(h->p_run, sizeof h->p_run, px, "/run/sparkctl");
	join_path(h->p_pid, sizeof h->p_pid, px, "/run/sparkctl/sparkd.pid");
	join_path(h->p_log, sizeof h->p_log, px, "/var/log/sparkd.log");
	if (strlen(h->p_sock) > 100) {
		snprintf(err, errlen, "socket path %s is too long for a Unix socket; use a shorter "
				      "--prefix",
			 h->p_sock);
		return -ENAMETOOLONG;
	}
	free(h->conf_text);
	free(h->unit_text);
	h->conf_text = render_config(h);
	char *u1 = replace_all(PROV_DIST_UNIT, "/usr/sbin/sparkd", h->p_sparkd);
	h->unit_text = u1 ? replace_all(u1, SPARK_DEFAULT_CONFIG, h->p_conf) : NULL;
	free(u1);
	if (!h->conf_text || !h->unit_text) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

/* ---- one host -------------------------------------------------------------------- */

struct shared {
	const struct prov_opts *o;
	const char *const *hosts;
	size_t n;
	struct prov_result *res;
	void *bin_sparkd, *bin_sparkctl;
	size_t len_sparkd, len_sparkctl;
	struct prov_pkg pkgs[PROV_NARCH]; /* --package */
	bool have_pkgs;
	char load_err[512];
	char user[64];              /* default login user */
	char kh_file[PROV_PATH];
	pthread_mutex_t mu;
	size_t next;
};

static void default_user(char *out, size_t len)
{
	struct passwd *pw = getpwuid(getuid());
	const char *u = pw && pw->pw_name ? pw->pw_name : getenv("USER");
	util_strlcpy(out, u && *u ? u : "root", len);
}

/* "[USER@]ADDR[:PORT]" (ADDR may be [v6]). */
static int parse_target(struct prov_host *h, const char *spec, const char *defuser, char *err,
			size_t errlen)
{
	const char *at = strchr(spec, '@');
	const char *hp = spec;
	if (at) {
		snprintf(h->user, sizeof h->user, "%.*s", (int)(at - spec), spec);
		hp = at + 1;
	} else if (h->o->user) {
		util_strlcpy(h->user, h->o->user, sizeof h->user);
	} else {
		util_strlcpy(h->user, defuser, sizeof h->user);
	}
	int port = 22;
	if (!h->user[0] ||
	    util_split_hostport(hp, h->o->port > 0 ? h->o->port : 22, h->addr, sizeof h->addr,
				&port) < 0 ||
	    !h->addr[0]) {
		snprintf(err, errlen, "bad host '%s'; use [USER@]ADDR[:PORT]", spec);
		return -EINVAL;
	}
	h->port = port;
	return 0;
}

static void run_host(struct shared *sh, size_t i)
{
	const struct prov_opts *o = sh->o;
	struct prov_result *res = &sh->res[i];
	struct prov_host *h = calloc(1, sizeof *h);
	memset(res, 0, sizeof *res);
	util_strlcpy(res->host, sh->hosts[i], sizeof res->host);
	uint64_t t0 = now_ms();
	if (!h) {
		res->failed = true;
		snprintf(res->error, sizeof res->error, "out of memory");
		return;
	}
	h->o = o;
	h->index = (int)i;
	h->res = res;
	h->member = -1;
	util_strlcpy(h->kh_file, sh->kh_file, sizeof h->kh_file);
	h->bin_sparkd = sh->bin_sparkd;
	h->bin_sparkctl = sh->bin_sparkctl;
	h->len_sparkd = sh->len_sparkd;
	h->len_sparkctl = sh->len_sparkctl;
	h->pkgs = sh->have_pkgs ? sh->pkgs : NULL;
	bool applied[PROV_NSTEPS] = {false};
	int failed_at = -1;
	char detail[256];
	if (sh->load_err[0] || parse_target(h, sh->hosts[i], sh->user, detail, sizeof detail) < 0) {
		struct prov_step_result *sr = &res->steps[PROV_STEP_CHECK];
		sr->status = PROV_FAILED;
		util_strlcpy(sr->detail, sh->load_err[0] ? sh->load_err : detail, sizeof sr->detail);
		emit(h, PROV_EV_STEP_DONE, PROV_STEP_CHECK, sr, 0, 0);
		failed_at = PROV_STEP_CHECK;
	}
	for (int s = 0; failed_at < 0 && s < PROV_NSTEPS; s++) {
		const struct prov_step *st = &prov_steps[s];
		struct prov_step_result *sr = &res->steps[s];
		uint64_t ts = now_ms();
		emit(h, PROV_EV_STEP_START, s, NULL, 0, 0);
		detail[0] = 0;
		int r = st->check(h, detail, sizeof detail);
		if (r == PROV_DONE) {
			sr->status = s == PROV_STEP_CHECK ? PROV_OK : PROV_UNCHANGED;
		} else if (r == PROV_SKIP) {
			sr->status = PROV_SKIPPED;
		} else if (r == PROV_NEEDED && o->dry_run) {
			sr->status = PROV_PLANNED;
		} else if (r == PROV_NEEDED) {
			applied[s] = true;
			detail[0] = 0;
			r = st->apply ? st->apply(h, detail, sizeof detail) : 0;
			if (r >= 0) {
				sr->status = PROV_CHANGED;
				res->changed = true;
			}
		}
		if (r < 0) {
			sr->status = PROV_FAILED;
			failed_at = s;
			if (!detail[0])
				snprintf(detail, sizeof detail, "%s", strerror(-r));
		}
		util_strlcpy(sr->detail, detail, sizeof sr->detail);
		sr->ms = now_ms() - ts;
		emit(h, PROV_EV_STEP_DONE, s, sr, 0, 0);
	}
	if (failed_at >= 0) {
		res->failed = true;
		snprintf(res->error, sizeof res->error, "%s: %s", prov_step_name(failed_at),
			 res->steps[failed_at].detail);
		bool any = false;
		for (int s = 0; s <= failed_at; s++)
			any |= applied[s];
		bool conn = h->ssh && ssh_is_connected(h->ssh);
		if (any && !conn) { /* e.g. sshd went away: one more try, for the undo */
			char e[256];
			conn = pssh_connect(h, e, sizeof e) == 0;
		}
		bool undo_lost = false;
		for (int s = failed_at; s >= 0; s--) {
			if (!applied[s] || !prov_steps[s].undo)
				continue;
			struct prov_step_result *sr = &res->steps[s];
			struct prov_step_result ur = {0};
			uint64_t ts = now_ms();
			int r = prov_steps[s].undo(h, ur.detail, sizeof ur.detail);
			ur.status = r < 0 ? PROV_UNDO_FAILED : PROV_UNDONE;
			ur.ms = now_ms() - ts;
			if (r < 0)
				undo_lost = true;
			if (s != failed_at) { /* the failed step keeps its failure */
				sr->status = ur.status;
				util_strlcpy(sr->detail, ur.detail, sizeof sr->detail);
			}
			emit(h, PROV_EV_UNDO, s, &ur, 0, 0);
		}
		if (h->restart_after_undo && conn) {
			char d[256];
			prov_restart_after_undo(h, d, sizeof d);
		}
		if (undo_lost) {
			size_t l = strlen(res->error);
			snprintf(res->error + l, sizeof res->error - l,
				 "; undo incomplete (%s): rerun provision once the host is reachable",
				 conn ? "see the steps" : "no connection");
		}
	} else if (!o->dry_run) {
		prov_commit(h);
	}
	for (int s = 0; s < PROV_NSTEPS; s++) {
		enum prov_status st = res->steps[s].status;
		res->steps_done += st == PROV_OK || st == PROV_CHANGED || st == PROV_UNCHANGED ||
				   st == PROV_SKIPPED;
	}
	res->ms = now_ms() - t0;
	pssh_close(h);
	memset(h->token, 0, sizeof h->token);
	free(h->conf_text);
	free(h->unit_text);
	free(h->netplan_text);
	free(h);
}

static void *worker(void *arg)
{
	struct shared *sh = arg;
	for (;;) {
		pthread_mutex_lock(&sh->mu);
		size_t i = sh->next++;
		pthread_mutex_unlock(&sh->mu);
		if (i >= sh->n)
			break;
		run_host(sh, i);
	}
	return NULL;
}

static int load_binary(const char *path, const char *what, void **data, size_t *len, char *err,
		       size_t errlen)
{
	char *d = NULL;
	int r = path ? util_read_file(path, &d, len, MAX_BINARY) : -ENOENT;
	if (r < 0) {
		snprintf(err, errlen, "cannot read the local %s (%s): %s", what, path ? path : "not found",
			 strerror(-r));
		return r;
	}
	*data = d;
	return 0;
}

int prov_run(const struct prov_opts *o, const char *const hosts[], size_t n,
	     struct prov_result *res)
{
	struct shared sh = {.o = o, .hosts = hosts, .n = n, .res = res};
	pthread_mutex_init(&sh.mu, NULL);
	default_user(sh.user, sizeof sh.user);
	if (o->known_hosts)
		util_strlcpy(sh.kh_file, o->known_hosts, sizeof sh.kh_file);
	else
		pssh_default_known_hosts(sh.kh_file, sizeof sh.kh_file);
	if (load_binary(o->sparkd_path, "sparkd", &sh.bin_sparkd, &sh.len_sparkd, sh.load_err,
			sizeof sh.load_err) == 0)
		load_binary(o->sparkctl_path, "sparkctl", &sh.bin_sparkctl, &sh.len_sparkctl,
			    sh.load_err, sizeof sh.load_err);
	if (!sh.load_err[0] && o->package_dir)
		sh.have_pkgs = prov_pkgs_load(o->package_dir, sh.pkgs, sh.load_err,
					      sizeof sh.load_err) > 0;
	size_t nt = o->parallel > 0 ? (size_t)o->parallel : 1;
	if (nt > n)
		nt = n;
	pthread_t *th = calloc(nt ? nt : 1, sizeof *th);
	size_t started = 0;
	for (size_t t = 0; th && t < nt; t++)
		if (pthread_create(&th[started], NULL, worker, &sh) == 0)
			started++;
	if (!started) /* no threads: do it here */
		worker(&sh);
	for (size_t t = 0; t < started; t++)
		pthread_join(th[t], NULL);
	free(th);
	free(sh.bin_sparkd);
	free(sh.bin_sparkctl);
	if (sh.have_pkgs)
		prov_pkgs_free(sh.pkgs);
	pthread_mutex_destroy(&sh.mu);
	int failed = 0;
	for (size_t i = 0; i < n; i++)
		failed += res[i].failed;
	return failed;
}

/* provision: install, configure and join fresh machines over SSH (provision/).
 * Runs on the head: the local sparkd mints one single-use join token per host.
 * Step lines go to stdout (to stderr on a terminal with -o json), the results
 * table (or JSON) at the end, one "sparkctl: HOST: ..." line per failed host. */
#include "cli.h"
#include "output.h"
#include "print.h"
#include "prov.h"

#include "spark_config.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOKEN_TTL_S 600
#define MAX_HOSTS 256

/* ---- the head side: tokens through the local sparkd ------------------------------ */

struct head_ctx {
	struct cli_ctx *ctx;
	pthread_mutex_t mu;
};

static int mint_token(void *arg, const char *host, char *token, size_t toklen, char *token_id,
		size_t idlen, char *err, size_t errlen)
{
	struct head_ctx *hc = arg;
	char descr[300];
	snprintf(descr, sizeof descr, "provision %s", host);
	json_t *d = NULL;
	char *code = NULL, *msg = NULL;
	pthread_mutex_lock(&hc->mu);
	int r = cli_call_raw(hc->ctx, "token_create",
			     json_pack("{s:I, s:I, s:s}", "ttl_s", (json_int_t)TOKEN_TTL_S, "uses",
				       (json_int_t)1, "description", descr),
			     &d, 10000, &code, &msg);
	pthread_mutex_unlock(&hc->mu);
	const char *t = json_string_value(json_object_get(d, "token"));
	const char *id = json_string_value(json_object_get(d, "id"));
	if (r < 0 || !t || !id) {
		snprintf(err, errlen, "the head could not mint a token: %s",
			 msg ? msg : "no token in its answer");
		r = -EIO;
	} else {
		util_strlcpy(token, t, toklen);
		util_strlcpy(token_id, id, idlen);
		r = 0;
	}
	json_decref(d);
	free(code);
	free(msg);
	return r;
}

static int revoke_token(void *arg, const char *token_id)
{
	struct head_ctx *hc = arg;
	pthread_mutex_lock(&hc->mu);
	int r = cli_call_raw(hc->ctx, "token_revoke", json_pack("{s:s}", "token_id", token_id), NULL,
			     10000, NULL, NULL);
	pthread_mutex_unlock(&hc->mu);
	return r < 0 ? -EIO : 0;
}

/* The node's fabric netplan from the head: the topo_addresses request with "node"
 * answers it from the latest stored validation (agent/topo_head.c). */
static int fabric_plan(void *arg, const char *node, const struct prov_facts *f, char **yaml,
		       char *why, size_t whylen)
{
	(void)f;
	struct head_ctx *hc = arg;
	json_t *d = NULL;
	char *code = NULL, *msg = NULL;
	pthread_mutex_lock(&hc->mu);
	int r = cli_call_raw(hc->ctx, "topo_addresses", json_pack("{s:s}", "node", node), &d, 10000,
			     &code, &msg);
	pthread_mutex_unlock(&hc->mu);
	const char *y = json_string_value(json_object_get(d, "netplan"));
	if (r < 0) {
		snprintf(why, whylen, "the head did not give the fabric plan: %s",
			 msg ? msg : "no answer");
		r = -EIO;
	} else if (y) {
		*yaml = strdup(y);
		r = *yaml ? 0 : -ENOMEM;
	} else {
		const char *reason = json_string_value(json_object_get(d, "reason"));
		bool failed = reason && strstr(reason, "failed");
		snprintf(why, whylen,
			 "%s; after %s'sparkctl topo validate', run 'sparkctl topo addresses "
			 "--netplan FILE' or provision again",
			 failed ? reason : "not in a validated topology yet",
			 failed ? "fixing it and " : "");
		r = -ENOENT;
	}
	json_decref(d);
	free(code);
	free(msg);
	return r;
}

/* ---- progress lines ------------------------------------------------------------------ */

struct ui {
	FILE *f;        /* NULL: no step lines */
	bool tty;
	int hostw;
	int open_host;  /* tty: a "running" line without its newline, or -1 */
	int open_step;
};

static void ui_close_line(struct ui *u)
{
	if (u->open_host >= 0) {
		fputc('\n', u->f);
		u->open_host = -1;
	}
}

static void on_event(void *arg, const struct prov_event *ev)
{
	struct ui *u = arg;
	if (!u->f)
		return;
	bool same = u->open_host == ev->host_index && u->open_step == ev->step;
	switch (ev->kind) {
	case PROV_EV_STEP_START:
		if (!u->tty)
			return;
		ui_close_line(u);
		fprintf(u->f, "%-*s  %-8s %-12s", u->hostw, ev->host, prov_step_name(ev->step),
			"...");
		u->open_host = ev->host_index;
		u->open_step = ev->step;
		break;
	case PROV_EV_PROGRESS:
		if (!u->tty || !same || !ev->total)
			return;
		fprintf(u->f, "\r\033[K%-*s  %-8s %3llu%% of %llu KiB", u->hostw, ev->host,
			prov_step_name(ev->step),
			(unsigned long long)(ev->done * 100 / ev->total),
			(unsigned long long)(ev->total / 1024));
		break;
	case PROV_EV_STEP_DONE:
	case PROV_EV_UNDO: {
		if (u->tty && same) {
			fputs("\r\033[K", u->f);
			u->open_host = -1;
		} else {
			ui_close_line(u);
		}
		char t[32];
		out_fmt_ms(ev->res->ms, t, sizeof t);
		fprintf(u->f, "%-*s  %-8s %-12s %6s  %s\n", u->hostw, ev->host, prov_step_name(ev->step),
			prov_status_name(ev->res->status), t, ev->res->detail);
		break;
	}
	}
	fflush(u->f);
}

/* ---- results ---------------------------------------------------------------------- */

static json_t *results_json(const struct prov_opts *o, const struct prov_result *res, size_t n,
			    int failed)
{
	json_t *hosts = json_array();
	for (size_t i = 0; i < n; i++) {
		json_t *steps = json_array();
		for (int s = 0; s < PROV_NSTEPS; s++)
			json_array_append_new(
				steps, json_pack("{s:s, s:s, s:s, s:I}", "step", prov_step_name(s),
						 "result", prov_status_name(res[i].steps[s].status),
						 "detail", res[i].steps[s].detail, "time_ms",
						 (json_int_t)res[i].steps[s].ms));
		json_t *h = json_pack("{s:s, s:s, s:s, s:i, s:i, s:I, s:o, s:o}", "host", res[i].host,
				      "node", res[i].node, "result",
				      cli_prov_host_result(&res[i], o->dry_run), "steps_done",
				      res[i].steps_done, "steps_total", PROV_NSTEPS, "time_ms",
				      (json_int_t)res[i].ms, "error",
				      res[i].failed ? json_string(res[i].error) : json_null(),
				      "steps", steps);
		json_array_append_new(hosts, h);
	}
	return json_pack("{s:b, s:s, s:s, s:s, s:o, s:o, s:i, s:i}", "dry_run", o->dry_run,
			 "cluster", o->head.cluster_name, "head_address", o->head.address, "prefix",
			 o->prefix, "package_dir",
			 o->package_dir ? json_string(o->package_dir) : json_null(), "hosts", hosts,
			 "host_count", (int)n, "failed", failed);
}

/* ---- local binaries ------------------------------------------------------------- */

static bool is_exe(const char *p) { return p && *p && access(p, X_OK) == 0; }

/* sparkctl: env SPARKCTL or this program; sparkd: env SPARKD, next to sparkctl,
 * ../agent/ (build tree), ../sbin/, /usr/sbin. */
static int find_binaries(char *sparkd, char *sparkctl, size_t len)
{
	const char *e = getenv("SPARKCTL");
	if (is_exe(e)) {
		util_strlcpy(sparkctl, e, len);
	} else {
		ssize_t n = readlink("/proc/self/exe", sparkctl, len - 1);
		if (n <= 0)
			return -ENOENT;
		sparkctl[n] = 0;
	}
	e = getenv("SPARKD");
	if (is_exe(e)) {
		util_strlcpy(sparkd, e, len);
		return 0;
	}
	char dir[PATH_MAX];
	util_strlcpy(dir, sparkctl, sizeof dir);
	char *sl = strrchr(dir, '/');
	if (sl)
		*sl = 0;
	const char *rel[] = {"/sparkd", "/../agent/sparkd", "/../sbin/sparkd"};
	for (size_t i = 0; i < ARRAY_SIZE(rel); i++) {
		snprintf(sparkd, len, "%s%s", dir, rel[i]);
		if (is_exe(sparkd))
			return 0;
	}
	util_strlcpy(sparkd, "/usr/sbin/sparkd", len);
	return is_exe(sparkd) ? 0 : -ENOENT;
}

/* Where provision puts packages on a node, so a node provisioned from packages can
 * provision others; the default --package when it holds a sparkctl package. */
#define DEFAULT_PACKAGE_DIR "/var/cache/sparkctl/packages"

static bool has_package(const char *dir)
{
	DIR *d = opendir(dir);
	bool found = false;
	struct dirent *e;
	while (d && !found && (e = readdir(d)))
		found = !strncmp(e->d_name, "sparkctl_", 9) && strstr(e->d_name, ".deb");
	if (d)
		closedir(d);
	return found;
}

static bool valid_prefix(const char *p)
{
	if (p[0] != '/' || strstr(p, "/../") || strstr(p, "/./") || strlen(p) > 200)
		return false;
	for (const char *c = p; *c; c++)
		if (!(('a' <= *c && *c <= 'z') || ('A' <= *c && *c <= 'Z') || ('0' <= *c && *c <= '9') ||
		      strchr("._/+-", *c)))
			return false;
	size_t l = strlen(p);
	return !(l >= 3 && strcmp(p + l - 3, "/..") == 0);
}

int cmd_provision(struct cli_ctx *ctx, int argc, char **argv)
{
	enum { O_USER = 1, O_PORT, O_ID, O_ACCEPT, O_KH, O_DRY, O_PREFIX, O_PAR, O_HEAD, O_PKG };
	static const struct option lo[] = {
		{"user", required_argument, NULL, O_USER},
		{"port", required_argument, NULL, O_PORT},
		{"identity", required_argument, NULL, O_ID},
		{"accept-new-host-key", no_argument, NULL, O_ACCEPT},
		{"known-hosts", required_argument, NULL, O_KH},
		{"dry-run", no_argument, NULL, O_DRY},
		{"prefix", required_argument, NULL, O_PREFIX},
		{"parallel", required_argument, NULL, O_PAR},
		{"head", required_argument, NULL, O_HEAD},
		{"package", required_argument, NULL, O_PKG},
		{NULL, 0, NULL, 0},
	};
	struct prov_opts o = {.prefix = "/", .parallel = 4};
	const char *head_override = NULL;
	char prefix[256];
	int ch;
	optind = 0;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "i:", lo, NULL)) != -1) {
		char *end;
		long v;
		switch (ch) {
		case O_USER:
			o.user = optarg;
			break;
		case O_PORT:
			v = strtol(optarg, &end, 10);
			if (*end || v < 1 || v > 65535)
				return cli_usage(ctx, "--port: '%s' is not a port (1-65535)", optarg);
			o.port = (int)v;
			break;
		case 'i':
		case O_ID:
			o.identity = optarg;
			break;
		case O_ACCEPT:
			o.accept_new_host_key = true;
			break;
		case O_KH:
			o.known_hosts = optarg;
			break;
		case O_DRY:
			o.dry_run = true;
			break;
		case O_PREFIX:
			util_strlcpy(prefix, optarg, sizeof prefix);
			while (strlen(prefix) > 1 && prefix[strlen(prefix) - 1] == '/')
				prefix[strlen(prefix) - 1] = 0;
			if (!valid_prefix(prefix))
				return cli_usage(ctx, "--prefix: '%s' must be an absolute path of letters, "
						      "digits and ._/+-",
						 optarg);
			o.prefix = prefix;
			break;
		case O_PAR:
			v = strtol(optarg, &end, 10);
			if (*end || v < 1 || v > 64)
				return cli_usage(ctx, "--parallel: '%s' is not a number from 1 to 64",
						 optarg);
			o.parallel = (int)v;
			break;
		case O_HEAD:
			head_override = optarg;
			break;
		case O_PKG:
			o.package_dir = optarg;
			break;
		default:
			return cli_usage(ctx, "unknown or incomplete option '%s'", argv[optind - 1]);
		}
	}
	size_t n = (size_t)(argc - optind);
	if (n == 0)
		return cli_usage(ctx, "missing HOST (the machine to provision: [USER@]ADDR[:PORT])");
	if (n > MAX_HOSTS)
		return cli_usage(ctx, "too many hosts (at most %d per run)", MAX_HOSTS);
	if (o.identity && access(o.identity, R_OK) != 0)
		return cli_usage(ctx, "--identity: cannot read '%s'", o.identity);
	if (head_override) {
		char hh[160];
		int hp;
		if (util_split_hostport(head_override, SPARK_DEFAULT_PORT, hh, sizeof hh, &hp) < 0)
			return cli_usage(ctx, "--head: '%s' is not ADDR:PORT", head_override);
	}

	if (o.package_dir) {
		DIR *d = opendir(o.package_dir);
		if (!d)
			return cli_usage(ctx, "--package: cannot read the directory '%s'", o.package_dir);
		closedir(d);
	} else if (has_package(DEFAULT_PACKAGE_DIR)) {
		o.package_dir = DEFAULT_PACKAGE_DIR;
	}

	char sparkd[PATH_MAX], sparkctl[PATH_MAX];
	if (find_binaries(sparkd, sparkctl, sizeof sparkd) < 0)
		return cli_fail("cannot find the sparkd binary to upload; set SPARKD=/path/to/sparkd");
	o.sparkd_path = sparkd;
	o.sparkctl_path = sparkctl;

	/* the cluster the hosts join */
	json_t *st = NULL;
	char *code = NULL, *msg = NULL;
	if (cli_call_raw(ctx, "status", NULL, &st, 10000, &code, &msg) < 0) {
		int r = cli_fail("cannot learn the cluster from the local sparkd: %s; run provision on "
				 "the head (after 'sparkctl init')",
				 msg ? msg : "no answer");
		free(code);
		free(msg);
		return r;
	}
	json_t *cl = json_object_get(st, "cluster"), *hd = json_object_get(st, "head");
	const char *cid = json_string_value(json_object_get(cl, "id"));
	const char *cname = json_string_value(json_object_get(cl, "name"));
	const char *haddr = json_string_value(json_object_get(hd, "address"));
	if (!cid || !cname || (!haddr && !head_override)) {
		json_decref(st);
		return cli_fail("the local sparkd did not say which cluster it heads; run 'sparkctl "
				"status' to check");
	}
	util_strlcpy(o.head.cluster_id, cid, sizeof o.head.cluster_id);
	util_strlcpy(o.head.cluster_name, cname, sizeof o.head.cluster_name);
	util_strlcpy(o.head.address, head_override ? head_override : haddr, sizeof o.head.address);
	json_decref(st);

	struct head_ctx hc = {.ctx = ctx};
	pthread_mutex_init(&hc.mu, NULL);
	o.mint = mint_token;
	o.revoke = revoke_token;
	o.mint_arg = &hc;
	o.fabric_plan = fabric_plan;
	o.fabric_arg = &hc;
	o.interactive = isatty(STDIN_FILENO);

	struct ui u = {.open_host = -1};
	u.f = cli_steps_file(ctx, &u.tty);
	for (size_t i = 0; i < n; i++) {
		int l = (int)strlen(argv[optind + i]);
		if (l > u.hostw)
			u.hostw = l < 40 ? l : 40;
	}
	o.on_event = on_event;
	o.event_arg = &u;
	if (u.f && o.dry_run)
		fprintf(u.f, "Dry run: checking %zu host%s, changing nothing.\n", n, n == 1 ? "" : "s");

	struct prov_result *res = calloc(n, sizeof *res);
	if (!res || prov_init() < 0) {
		free(res);
		return cli_fail("cannot initialise libssh");
	}
	int failed = prov_run(&o, (const char *const *)(argv + optind), n, res);
	prov_finish();
	if (u.f) {
		ui_close_line(&u);
		fflush(u.f);
	}

	json_t *j = results_json(&o, res, n, failed);
	struct cli_provision_view view = {.res = res, .n = n, .dry_run = o.dry_run};
	cli_output(ctx, NULL, j, &view);
	json_decref(j);
	fflush(stdout);
	for (size_t i = 0; i < n; i++)
		if (res[i].failed)
			fprintf(stderr, "sparkctl: %s: %s\n", res[i].host, res[i].error);
	free(res);
	pthread_mutex_destroy(&hc.mu);
	return failed ? 1 : 0;
}

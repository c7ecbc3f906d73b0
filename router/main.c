/* spark-router: flags, the policy, the loop. See docs/router.md. */
#include "policy.h"
#include "server.h"

#include "log.h"
#include "spark_config.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <uv.h>

static const char USAGE[] =
	"Usage: spark-router --policy FILE [--listen HOST:PORT] [--log FILE|-] [--socket PATH]\n"
	"                    [--pid-file FILE]\n"
	"       spark-router --policy FILE --check [-o text|json]\n"
	"\n"
	"An OpenAI-compatible HTTP router: it sends each request to a target chosen by the\n"
	"routes of a YAML policy (docs/router.md).\n"
	"\n"
	"  --policy FILE       the policy (targets, routes, api_keys, listen)\n"
	"  --listen HOST:PORT  listen address (default: the policy's listen:, else 127.0.0.1:4000);\n"
	"                      an address other than loopback needs api_keys in the policy\n"
	"  --log FILE          append the JSON-lines routing log to FILE (\"-\": stdout)\n"
	"  --socket PATH       control socket of the local sparkd, followed for service targets\n"
	"                      (env SPARKCTL_SOCKET, default " SPARK_DEFAULT_SOCKET ")\n"
	"  --pid-file FILE     write the process id to FILE (for 'sparkctl route reload')\n"
	"  --check             validate the policy, print a summary and exit (0 valid, 1 not)\n"
	"  -o, --output FMT    the --check summary as text (default) or json\n"
	"  --log-level LEVEL   error, warn, info (default), debug\n"
	"  --version           print the version\n"
	"  -h, --help          this help\n"
	"\n"
	"Endpoints: POST /v1/chat/completions, /v1/completions, /v1/decision;\n"
	"GET /v1/models, /health, /metrics.\n";

static void on_signal(uv_signal_t *h, int sig)
{
	log_info("router_stop", "signal=%d", sig);
	uv_stop(h->loop);
}

struct reload_ctx {
	struct server *s;
	const char *path;
};

/* route check's warnings: rule regexes whose time only the match limits
 * bound (docs/router.md, "Regular expressions"). */
static json_t *warnings(const struct policy *p)
{
	json_t *w = json_array();
	for (size_t i = 0; i < p->n_routes; i++) {
		const struct route *rt = &p->routes[i];
		for (size_t k = 0; k < rt->n_rules; k++) {
			const struct cond *c = &rt->rules[k].when;
			const char *why = c->has_regex ? rx_unbounded(rx_pattern(c->regex)) : NULL;
			if (!why)
				continue;
			char m[1600];
			snprintf(m, sizeof m,
				 "routes.%s.rules.%zu.when.regex '%s': %s; only its match limit bounds it "
				 "(%d steps per start position over at most %d KiB; past it the rule counts "
				 "as no match)",
				 rt->name, k, rx_pattern(c->regex), why, RX_MATCH_LIMIT, RX_TEXT_MAX / 1024);
			json_array_append_new(w, json_string(m));
		}
	}
	return w;
}

/* The same, in the log (at start and at each reload). */
static void log_warnings(const struct policy *p)
{
	json_t *w = warnings(p);
	size_t i;
	json_t *e;
	json_array_foreach(w, i, e)
		log_warn("regex_unbounded", "policy=%s warning=%s", log_q(p->path),
			 log_q(json_string_value(e)));
	json_decref(w);
}

/* SIGHUP: check the policy file again and swap it in, or keep the old one. */
static void on_hup(uv_signal_t *h, int sig)
{
	(void)sig;
	struct reload_ctx *rc = h->data;
	char err[600];
	struct policy *p = NULL;
	if (policy_load(rc->path, &p, err, sizeof err) < 0) {
		log_error("reload_refused", "policy=%s error=%s keep=old", log_q(rc->path), log_q(err));
		return;
	}
	if (server_reload(rc->s, p) < 0) {
		log_error("reload_refused", "policy=%s error=out_of_memory keep=old", log_q(rc->path));
		policy_free(p);
		return;
	}
	log_info("policy_reloaded", "policy=%s routes=%zu targets=%zu", log_q(rc->path),
		 p->n_routes, p->n_targets);
	log_warnings(p);
}

/* Write our pid to path and hold a write lock on it while we run (fcntl, so
 * that F_GETLK names the holder): refused while another process holds it. */
static int pidfile_write(const char *path)
{
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
	if (fd < 0) {
		fprintf(stderr, "spark-router: cannot open the pid file %s: %s\n", path, strerror(errno));
		return -errno;
	}
	if (fcntl(fd, F_SETLK, &fl) < 0) {
		struct flock q = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
		fcntl(fd, F_GETLK, &q);
		fprintf(stderr, "spark-router: another spark-router (pid %d) holds %s; stop it or pass another --pid-file\n",
			q.l_type != F_UNLCK ? (int)q.l_pid : 0, path);
		close(fd);
		return -EEXIST;
	}
	char b[32];
	int n = snprintf(b, sizeof b, "%d\n", (int)getpid());
	if (ftruncate(fd, 0) < 0 || write(fd, b, (size_t)n) != n) {
		fprintf(stderr, "spark-router: cannot write the pid file %s: %s\n", path, strerror(errno));
		close(fd);
		return -EIO;
	}
	return fd; /* kept open: the lock lasts as long as the process */
}

static json_t *summary(const struct policy *p)
{
	json_t *t = json_array(), *r = json_array();
	for (size_t i = 0; i < p->n_targets; i++) {
		const struct target *tg = &p->targets[i];
		json_t *o = json_pack("{s:s, s:s, s:s}", "name", tg->name, "kind",
				      tg->kind == TARGET_URL ? "url" : "service", "address",
				      tg->url ? tg->url : tg->service);
		if (tg->kind == TARGET_SERVICE) {
			json_object_set_new(o, "network",
					    json_string(tg->management ? "management" : "fabric"));
			json_object_set_new(o, "owner", json_string(tg->owner ? tg->owner : "*"));
		}
		if (tg->max_context)
			json_object_set_new(o, "max_context", json_integer(tg->max_context));
		json_array_append_new(t, o);
	}
	for (size_t i = 0; i < p->n_routes; i++)
		json_array_append_new(r, json_pack("{s:s, s:s}", "name", p->routes[i].name, "type",
						   route_type_name(p->routes[i].type)));
	return json_pack("{s:s, s:b, s:s, s:i, s:o, s:o, s:o}", "policy", p->path, "valid", 1,
			 "listen", p->listen, "api_keys", (int)p->n_api_keys, "targets", t, "routes", r,
			 "warnings", warnings(p));
}

int main(int argc, char **argv)
{
	const char *policy_path = NULL, *out_fmt = "text";
	struct server_opts so = {0};
	int check = 0;
	const char *pid_file = NULL;
	so.control_socket = getenv("SPARKCTL_SOCKET");
	if (!so.control_socket || !*so.control_socket)
		so.control_socket = SPARK_DEFAULT_SOCKET;
	enum { O_POLICY = 256, O_LISTEN, O_LOG, O_CHECK, O_LEVEL, O_VERSION, O_SOCKET, O_PID };
	static const struct option lo[] = {
		{"policy", required_argument, NULL, O_POLICY},
		{"listen", required_argument, NULL, O_LISTEN},
		{"log", required_argument, NULL, O_LOG},
		{"check", no_argument, NULL, O_CHECK},
		{"socket", required_argument, NULL, O_SOCKET},
		{"pid-file", required_argument, NULL, O_PID},
		{"output", required_argument, NULL, 'o'},
		{"log-level", required_argument, NULL, O_LEVEL},
		{"version", no_argument, NULL, O_VERSION},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int ch;
	opterr = 0; /* one line of our own instead of getopt's */
	while ((ch = getopt_long(argc, argv, "ho:", lo, NULL)) != -1) {
		switch (ch) {
		case O_POLICY:
			policy_path = optarg;
			break;
		case O_LISTEN:
			so.listen = optarg;
			break;
		case O_LOG:
			so.log_path = optarg;
			break;
		case O_CHECK:
			check = 1;
			break;
		case O_SOCKET:
			so.control_socket = optarg;
			break;
		case O_PID:
			pid_file = optarg;
			break;
		case 'o':
			out_fmt = optarg;
			if (strcmp(out_fmt, "text") && strcmp(out_fmt, "json")) {
				fprintf(stderr, "spark-router: -o takes text or json; run 'spark-router --help' for usage\n");
				return 2;
			}
			break;
		case O_LEVEL: {
			int l = log_parse_level(optarg);
			if (l < 0) {
				fprintf(stderr, "spark-router: --log-level takes error, warn, info or debug\n");
				return 2;
			}
			log_set_level((enum log_level)l);
			break;
		}
		case O_VERSION:
			printf("spark-router %s\n", SPARK_VERSION);
			return 0;
		case 'h':
			fputs(USAGE, stdout);
			return 0;
		default:
			fprintf(stderr, "spark-router: %s %s; run 'spark-router --help' for usage\n",
				optopt ? "bad or incomplete option" : "unknown option", argv[optind - 1]);
			return 2;
		}
	}
	if (optind < argc || !policy_path) {
		fprintf(stderr, "spark-router: %s; run 'spark-router --help' for usage\n",
			optind < argc ? "unexpected argument" : "--policy FILE is required");
		return 2;
	}
	char err[600];
	struct policy *p = NULL;
	if (policy_load(policy_path, &p, err, sizeof err) < 0) {
		fprintf(stderr, "spark-router: %s (fix it, then check with 'spark-router --policy %s --check')\n",
			err, policy_path);
		return 1;
	}
	bool svc = policy_has_service_targets(p);
	if (so.log_path && policy_log_path_check(so.log_path, err, sizeof err) < 0) {
		fprintf(stderr, "spark-router: --log: %s\n", err);
		policy_free(p);
		return 2;
	}
	json_t *warn = warnings(p);
	if (check) {
		if (!strcmp(out_fmt, "json")) {
			json_t *o = summary(p);
			if (svc)
				json_object_set_new(o, "control_socket", json_string(so.control_socket));
			json_dumpf(o, stdout, JSON_INDENT(2));
			putchar('\n');
			json_decref(o);
		} else {
			printf("%s: valid: %zu targets, %zu routes, listen %s, %zu api keys\n", p->path,
			       p->n_targets, p->n_routes, p->listen, p->n_api_keys);
			if (svc)
				printf("service targets follow the cluster's services through sparkd on %s: each is a target while its service is ready\n",
				       so.control_socket);
			size_t i;
			json_t *e;
			json_array_foreach(warn, i, e)
				printf("warning: %s\n", json_string_value(e));
		}
		json_decref(warn);
		policy_free(p);
		return 0;
	}
	json_decref(warn);
	log_warnings(p);
	signal(SIGPIPE, SIG_IGN);
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	uv_loop_t *loop = uv_default_loop();
	struct server *s = NULL;
	int r = server_start(loop, p, &so, &s, err, sizeof err);
	if (r < 0) {
		fprintf(stderr, "spark-router: %s\n", err);
		policy_free(p);
		return r == -EPERM || r == -EINVAL ? 2 : 1;
	}
	if (pid_file && pidfile_write(pid_file) < 0) {
		server_stop(s);
		return 1;
	}
	log_info("router_listen", "addr=%s port=%d policy=%s routes=%zu targets=%zu",
		 so.listen ? so.listen : p->listen, server_port(s), log_q(p->path), p->n_routes,
		 p->n_targets);
	uv_signal_t sint, sterm, shup;
	struct reload_ctx rc = {.s = s, .path = policy_path};
	uv_signal_init(loop, &sint);
	uv_signal_init(loop, &sterm);
	uv_signal_init(loop, &shup);
	shup.data = &rc;
	uv_signal_start(&sint, on_signal, SIGINT);
	uv_signal_start(&sterm, on_signal, SIGTERM);
	uv_signal_start(&shup, on_hup, SIGHUP);
	uv_run(loop, UV_RUN_DEFAULT);
	server_stop(s);
	if (pid_file)
		unlink(pid_file);
	return 0;
}

/* sparkd: flags and config, the state-dir lock, signals, the loop. */
#include "service.h"

#include "cfg.h"
#include "log.h"
#include "spark_config.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: sparkd [OPTIONS]\n\n"
		"The sparkctl node agent. Runs in the foreground and logs to stderr (logfmt).\n\n"
		"Options:\n"
		"  --state-dir DIR     identity, keys and (on the head) cluster.db (default %s)\n"
		"  --socket PATH       control socket for sparkctl (default %s)\n"
		"  --listen ADDR:PORT  agent port for other nodes (default 0.0.0.0:%d)\n"
		"  --name NAME         this node's default name when joining (default: host name)\n"
		"  --config FILE       YAML config (default %s, if present)\n"
		"  --log-level LEVEL   error, warn, info or debug (default info)\n"
		"  --version           print the version\n"
		"  -h, --help          this help\n\n"
		"Flags override the config file; see sparkd(8).\n",
		SPARK_DEFAULT_STATE_DIR, SPARK_DEFAULT_SOCKET, SPARK_DEFAULT_PORT,
		SPARK_DEFAULT_CONFIG);
}

/* --listen / listen: ADDR[:PORT] with ADDR a numeric IPv4 or bracketed IPv6
 * address of this machine (it is bound, not resolved). 0, or -EINVAL with a
 * message naming what is wrong. */
static int parse_listen(struct agent_opts *o, const char *s, char *err, size_t errlen)
{
	char why[160];
	if (util_check_hostport(s, SPARK_DEFAULT_PORT, why, sizeof why) < 0) {
		snprintf(err, errlen, "'%s' is not ADDR[:PORT] (%s), like 0.0.0.0:%d or [::]:%d", s,
			 why, SPARK_DEFAULT_PORT, SPARK_DEFAULT_PORT);
		return -EINVAL;
	}
	char host[sizeof o->listen_host];
	int port;
	unsigned char a[sizeof(struct in6_addr)];
	if (util_split_hostport(s, SPARK_DEFAULT_PORT, host, sizeof host, &port) < 0 ||
	    (inet_pton(AF_INET, host, a) != 1 && inet_pton(AF_INET6, host, a) != 1)) {
		snprintf(err, errlen, "'%s' is not an IP address; sparkd binds an address of this "
			 "machine, like 0.0.0.0:%d or [::]:%d", s, SPARK_DEFAULT_PORT, SPARK_DEFAULT_PORT);
		return -EINVAL;
	}
	util_strlcpy(o->listen_host, host, sizeof o->listen_host);
	o->listen_port = port;
	return 0;
}

static const char *const config_keys[] = {"state_dir", "socket", "listen", "name", "log_level",
					  "fabric", "discovery", "probes", "security", "models", "serve", NULL};

/* Apply config values for keys the command line did not set. The tree is kept
 * in *cfg for the modules that read their own keys (fabric.c). */
static int apply_config(struct agent_opts *o, const char *path, bool explicit_path,
			const bool set[5], json_t **cfg, char *err, size_t errlen)
{
	json_t *root = NULL;
	int r = cfg_load(path, &root, err, errlen);
	if (r == -ENOENT && !explicit_path)
		return 0;
	if (r == -EISDIR)
		snprintf(err, errlen, "%s is a directory, not a config file; pass the YAML file "
			 "(for example --config %s/sparkd.yaml)", path, path);
	if (r < 0)
		return r;
	r = cfg_check_keys(root, path, config_keys, err, errlen);
	const char *s;
	char e2[256];
	if (r == 0 && !set[0] && cfg_get_str(root, "state_dir", &s, e2, sizeof e2) == 0)
		util_strlcpy(o->state_dir, s, sizeof o->state_dir);
	if (r == 0 && !set[1] && cfg_get_str(root, "socket", &s, e2, sizeof e2) == 0)
		util_strlcpy(o->socket, s, sizeof o->socket);
	if (r == 0 && !set[2] && cfg_get_str(root, "listen", &s, e2, sizeof e2) == 0) {
		char why[384];
		if (parse_listen(o, s, why, sizeof why) < 0) {
			snprintf(err, errlen, "%s: listen: %s", path, why);
			r = -EINVAL;
		}
	}
	if (r == 0 && !set[3] && cfg_get_str(root, "name", &s, e2, sizeof e2) == 0)
		util_strlcpy(o->name, s, sizeof o->name);
	if (r == 0 && !set[4] && cfg_get_str(root, "log_level", &s, e2, sizeof e2) == 0) {
		int lvl = log_parse_level(s);
		if (lvl < 0) {
			snprintf(err, errlen, "%s: log_level: expected error, warn, info or debug", path);
			r = -EINVAL;
		} else {
			o->log_level = lvl;
		}
	}
	if (r == 0)
		*cfg = root;
	else
		json_decref(root);
	return r;
}

static int parse_args(struct agent_opts *o, json_t **cfg, int argc, char **argv)
{
	enum { O_STATE = 1, O_SOCKET, O_LISTEN, O_NAME, O_CONFIG, O_LOG, O_VERSION };
	static const struct option lo[] = {
		{"state-dir", required_argument, NULL, O_STATE},
		{"socket", required_argument, NULL, O_SOCKET},
		{"listen", required_argument, NULL, O_LISTEN},
		{"name", required_argument, NULL, O_NAME},
		{"config", required_argument, NULL, O_CONFIG},
		{"log-level", required_argument, NULL, O_LOG},
		{"version", no_argument, NULL, O_VERSION},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	bool set[5] = {false};
	bool explicit_config = false;
	util_strlcpy(o->state_dir, SPARK_DEFAULT_STATE_DIR, sizeof o->state_dir);
	util_strlcpy(o->socket, SPARK_DEFAULT_SOCKET, sizeof o->socket);
	util_strlcpy(o->listen_host, "0.0.0.0", sizeof o->listen_host);
	util_strlcpy(o->config, SPARK_DEFAULT_CONFIG, sizeof o->config);
	o->listen_port = SPARK_DEFAULT_PORT;
	o->log_level = LOG_INFO;
	int ch;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (ch) {
		case O_STATE:
			util_strlcpy(o->state_dir, optarg, sizeof o->state_dir);
			set[0] = true;
			break;
		case O_SOCKET:
			util_strlcpy(o->socket, optarg, sizeof o->socket);
			set[1] = true;
			break;
		case O_LISTEN: {
			char why[384];
			if (parse_listen(o, optarg, why, sizeof why) < 0) {
				fprintf(stderr, "sparkd: --listen: %s\n", why);
				return 2;
			}
			set[2] = true;
			break;
		}
		case O_NAME:
			if (!util_valid_name(optarg)) {
				fprintf(stderr, "sparkd: --name: '%s' is not a valid node name "
						"(1-63 of a-z, 0-9, '-')\n", optarg);
				return 2;
			}
			util_strlcpy(o->name, optarg, sizeof o->name);
			set[3] = true;
			break;
		case O_CONFIG:
			util_strlcpy(o->config, optarg, sizeof o->config);
			explicit_config = true;
			break;
		case O_LOG: {
			int lvl = log_parse_level(optarg);
			if (lvl < 0) {
				fprintf(stderr, "sparkd: --log-level: expected error, warn, info or debug\n");
				return 2;
			}
			o->log_level = lvl;
			set[4] = true;
			break;
		}
		case O_VERSION:
			printf("sparkd %s\n", SPARK_VERSION);
			exit(0);
		case 'h':
			usage(stdout);
			exit(0);
		default:
			fprintf(stderr, "sparkd: run 'sparkd --help' for usage\n");
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "sparkd: unexpected argument '%s'; run 'sparkd --help' for usage\n",
			argv[optind]);
		return 2;
	}
	char err[512];
	if (apply_config(o, o->config, explicit_config, set, cfg, err, sizeof err) < 0) {
		fprintf(stderr, "sparkd: %s\n", err);
		return 2;
	}
	if (!o->name[0]) {
		char host[64] = "";
		gethostname(host, sizeof host - 1);
		for (char *p = host; *p; p++)
			*p = (*p >= 'A' && *p <= 'Z') ? (char)(*p - 'A' + 'a') : (*p == '.' ? '\0' : *p);
		util_strlcpy(o->name, util_valid_name(host) ? host : "node", sizeof o->name);
	}
	return 0;
}

/* The state dir holds the node's key, the cluster CA and (on the head)
 * cluster.db: create it 0700, refuse one another user owns or that group or
 * others may write (they could have planted files), and chmod it 0700 so
 * nobody else reads it, whatever the umask. */
static int prepare_state_dir(const char *dir, char *err, size_t errlen)
{
	int r = util_mkdirs(dir, 0700);
	if (r < 0) {
		snprintf(err, errlen, "cannot create state dir %s: %s", dir, strerror(-r));
		return r;
	}
	struct stat st;
	if (stat(dir, &st) < 0) {
		r = -errno;
		snprintf(err, errlen, "cannot read state dir %s: %s", dir, strerror(-r));
		return r;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "state dir %s is not a directory; pass another --state-dir", dir);
		return -ENOTDIR;
	}
	if (st.st_uid != geteuid()) {
		snprintf(err, errlen,
			 "state dir %s belongs to uid %u, not to sparkd's user (uid %u); run 'chown %u "
			 "%s' if it is this node's, or pass another --state-dir",
			 dir, (unsigned)st.st_uid, (unsigned)geteuid(), (unsigned)geteuid(), dir);
		return -EPERM;
	}
	if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		snprintf(err, errlen,
			 "state dir %s may be written by %s (mode %04o); check its files, then run "
			 "'chmod 700 %s'", dir, st.st_mode & S_IWOTH ? "anyone" : "its group",
			 (unsigned)(st.st_mode & 07777), dir);
		return -EPERM;
	}
	if ((st.st_mode & 07777) != 0700 && chmod(dir, 0700) < 0) {
		r = -errno;
		snprintf(err, errlen, "cannot chmod state dir %s to 0700: %s", dir, strerror(-r));
		return r;
	}
	return 0;
}

static int take_lock(struct agent *a, char *err, size_t errlen)
{
	char path[512];
	snprintf(path, sizeof path, "%s/sparkd.lock", a->opts.state_dir);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0) {
		snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
		return -errno;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		char pid[32] = "?";
		ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
		if (n > 0) {
			pid[n] = '\0';
			pid[strcspn(pid, "\n")] = '\0';
		}
		snprintf(err, errlen,
			 "another sparkd (pid %s) already runs on state dir %s; stop it or use another --state-dir",
			 pid, a->opts.state_dir);
		close(fd);
		return -EBUSY;
	}
	char buf[32];
	int n = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
	if (ftruncate(fd, 0) < 0 || pwrite(fd, buf, (size_t)n, 0) < 0) {
		/* the lock is what matters; the pid is informative */
	}
	a->lock_fd = fd;
	return 0;
}

static void on_signal(uv_signal_t *h, int signum)
{
	struct agent *a = h->data;
	log_info("signal", "signal=%d action=shutdown", signum);
	agent_shutdown(a);
}

static void close_walk(uv_handle_t *h, void *arg)
{
	(void)arg;
	if (!uv_is_closing(h))
		uv_close(h, NULL);
}

void agent_shutdown(struct agent *a)
{
	if (a->stopping)
		return;
	a->stopping = true;
	svc_stop_all(a);
	peers_stop(a, "sparkd is stopping");
	agent_close_listener(a);
	control_stop(a);
	uv_signal_stop(&a->sigterm);
	uv_signal_stop(&a->sigint);
	uv_close((uv_handle_t *)&a->sigterm, NULL);
	uv_close((uv_handle_t *)&a->sigint, NULL);
}

int main(int argc, char **argv)
{
	static struct agent a;
	if (argc == 3 && strcmp(argv[1], "--rank-shim") == 0)
		return agent_rank_shim(argc, argv); /* a rank's supervisor (jobs_shim.c) */
	int r = parse_args(&a.opts, &a.cfg, argc, argv);
	if (r)
		return r;
	log_set_level(a.opts.log_level);
	signal(SIGPIPE, SIG_IGN);
	a.lock_fd = -1;
	a.started_at = util_now();
	a.loop = uv_default_loop();
	char err[512];
	if (agent_security_config(&a, err, sizeof err) < 0 || /* security.* */
	    svc_init_all(&a, err, sizeof err) < 0) {        /* fabric.*, probes.*, ... */
		fprintf(stderr, "sparkd: %s; fix the config file\n", err);
		json_decref(a.cfg);
		return 2;
	}
	if (prepare_state_dir(a.opts.state_dir, err, sizeof err) < 0) {
		fprintf(stderr, "sparkd: %s\n", err);
		return 1;
	}
	if (take_lock(&a, err, sizeof err) < 0) {
		fprintf(stderr, "sparkd: %s\n", err);
		return 1;
	}
	if (identity_load(&a, err, sizeof err) < 0) {
		fprintf(stderr, "sparkd: %s\n", err);
		return 1;
	}
	if (control_start(&a, err, sizeof err) < 0) {
		fprintf(stderr, "sparkd: %s\n", err);
		return 1;
	}
	uv_signal_init(a.loop, &a.sigterm);
	uv_signal_init(a.loop, &a.sigint);
	a.sigterm.data = a.sigint.data = &a;
	uv_signal_start(&a.sigterm, on_signal, SIGTERM);
	uv_signal_start(&a.sigint, on_signal, SIGINT);

	log_info("start", "version=%s state_dir=%s socket=%s listen=%s:%d role=%s node=%s",
		 SPARK_VERSION, log_q(a.opts.state_dir), log_q(a.opts.socket), a.opts.listen_host,
		 a.opts.listen_port, role_name(a.id.role),
		 a.id.node_name[0] ? a.id.node_name : "-");
	/* The services, the cluster first (it starts the role: the head opens
	 * cluster.db, a worker connects), then discovery, topology, jobs. */
	int rc = 0;
	if (svc_start_all(&a, err, sizeof err) < 0) {
		fprintf(stderr, "sparkd: %s\n", err);
		rc = 1;
		agent_shutdown(&a);
	}
	uv_run(a.loop, UV_RUN_DEFAULT);
	uv_walk(a.loop, close_walk, NULL);
	uv_run(a.loop, UV_RUN_DEFAULT);
	uv_loop_close(a.loop);
	if (a.srv_ctx)
		SSL_CTX_free(a.srv_ctx);
	if (a.cli_ctx)
		SSL_CTX_free(a.cli_ctx);
	if (a.hd.ca)
		X509_free(a.hd.ca);
	if (a.hd.ca_key)
		EVP_PKEY_free(a.hd.ca_key);
	free(a.hd.crl_pem);
	if (a.hd.db)
		db_close(a.hd.db);
	svc_free_all(&a);
	json_decref(a.cfg);
	char lock[512];
	snprintf(lock, sizeof lock, "%s/sparkd.lock", a.opts.state_dir);
	if (a.lock_fd >= 0)
		close(a.lock_fd);
	log_info("stop", "rc=%d", rc);
	return rc;
}

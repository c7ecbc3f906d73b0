/* cmd_export: `sparkctl export slurm` (the cluster as Slurm configuration,
 * slurm.c renders it) and `sparkctl env` (this node's job environment for
 * a job another scheduler started; sparkd's job_env request). Issue 21,
 * docs/slurm.md. */
#include "cli.h"

#include "hostlist.h"
#include "slurm.h"
#include "spark_config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- export slurm ------------------------------------------------------------------ */

static void host_only(const char *addr, char *out, size_t len)
{
	snprintf(out, len, "%s", addr ? addr : "");
	char *c = strrchr(out, ':');
	if (c && !strchr(out, ']') && strchr(out, ':') == c)
		*c = '\0'; /* "a.b.c.d:port" */
}

/* The model slurm.h describes, from the head's answers. NULL after a failed
 * call (its message printed). */
static json_t *build_model(struct cli_ctx *ctx, bool force, int *rc)
{
	json_t *st = NULL, *gl = NULL, *topo = NULL;
	*rc = 1;
	if (cli_call(ctx, "status", NULL, &st, 0))
		return NULL;
	json_t *tsum = json_object_get(st, "topology");
	if (json_is_object(tsum) && strcmp(cli_jstr(tsum, "result"), "fail") == 0 && !force) {
		cli_fail("the latest topology validation of cluster %s failed (%s); nothing was "
			 "exported: fix the cabling and run 'sparkctl topo validate', or export with "
			 "--force", cli_jstr(json_object_get(st, "cluster"), "name"),
			 cli_jstr(tsum, "summary"));
		json_decref(st);
		return NULL;
	}
	/* A verdict from before a membership or cabling change describes another
	 * cluster: its ring order and cables would go into Slurm's files. */
	if (json_is_object(tsum) && json_is_true(json_object_get(tsum, "stale")) && !force) {
		cli_fail("the latest topology validation of cluster %s is out of date (%s); nothing "
			 "was exported: run 'sparkctl topo validate' again, or export with --force",
			 cli_jstr(json_object_get(st, "cluster"), "name"),
			 cli_jstr(tsum, "stale_reason"));
		json_decref(st);
		return NULL;
	}
	if (cli_call(ctx, "group_ls", NULL, &gl, 0)) {
		json_decref(st);
		return NULL;
	}
	json_t *m = json_object();
	json_object_set_new(m, "cluster",
			    json_string(cli_jstr(json_object_get(st, "cluster"), "name")));
	if (json_is_object(tsum)) {
		char *code = NULL, *msg = NULL;
		if (cli_call_raw(ctx, "topo_show", NULL, &topo, 0, &code, &msg) != 0)
			topo = NULL; /* no verdict to read: features and topology stay out */
		free(code);
		free(msg);
		json_t *t = json_pack("{s:s, s:s, s:O, s:b}", "class", cli_jstr(tsum, "class"), "result",
				      cli_jstr(tsum, "result"), "finished_at",
				      json_object_get(tsum, "finished_at") ?: json_null(), "any_to_any",
				      json_is_true(json_object_get(topo, "any_to_any")));
		if (json_is_array(json_object_get(topo, "ring_order")))
			json_object_set(t, "ring_order", json_object_get(topo, "ring_order"));
		if (json_is_array(json_object_get(topo, "cables")))
			json_object_set(t, "cables", json_object_get(topo, "cables"));
		json_object_set_new(m, "topology", t);
	} else {
		json_object_set_new(m, "topology", json_null());
	}
	json_t *nodes = json_array();
	size_t i;
	json_t *n;
	json_array_foreach(json_object_get(st, "nodes"), i, n) {
		json_t *show = NULL;
		if (cli_call(ctx, "node_show", json_pack("{s:s}", "node", cli_jstr(n, "name")), &show, 0)) {
			json_decref(nodes);
			json_decref(m);
			json_decref(st);
			json_decref(gl);
			json_decref(topo);
			return NULL;
		}
		json_t *host = json_object_get(
		    json_object_get(json_object_get(show, "fabric_report"), "discovery"), "host");
		char addr[128];
		host_only(cli_jstr(n, "address"), addr, sizeof addr);
		json_array_append_new(nodes, json_pack("{s:s, s:s, s:O, s:O, s:b}", "name",
						       cli_jstr(n, "name"), "address", addr, "cpus",
						       json_object_get(host, "cpus") ?: json_null(),
						       "memory_mib",
						       json_object_get(host, "memory_mib") ?: json_null(),
						       "drained",
						       json_is_true(json_object_get(n, "drained"))));
		json_decref(show);
	}
	json_object_set_new(m, "nodes", nodes);
	json_t *groups = json_array();
	json_array_foreach(json_object_get(gl, "groups"), i, n)
		json_array_append_new(groups, json_pack("{s:s, s:O}", "name", cli_jstr(n, "name"),
							"nodes", json_object_get(n, "nodes")
								     ?: json_array()));
	json_object_set_new(m, "groups", groups);
	json_decref(st);
	json_decref(gl);
	json_decref(topo);
	*rc = 0;
	return m;
}

/* Write text to DIR/NAME through a temporary file (mode). 0 or -errno. */
static int write_file(const char *dir, const char *name, const char *text, mode_t mode)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8];
	if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
		return -ENAMETOOLONG;
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (fd < 0)
		return -errno;
	size_t len = strlen(text), off = 0;
	while (off < len) {
		ssize_t w = write(fd, text + off, len - off);
		if (w < 0) {
			int e = errno;
			close(fd);
			unlink(tmp);
			return -e;
		}
		off += (size_t)w;
	}
	if (fchmod(fd, mode) < 0 || close(fd) < 0 || rename(tmp, path) < 0) {
		int e = errno;
		unlink(tmp);
		return -e;
	}
	return 0;
}

int cmd_export_slurm(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {
	    {"out", required_argument, NULL, 'd'},
	    {"slurm-version", required_argument, NULL, 'v'},
	    {"force", no_argument, NULL, 'f'},
	    {"gpu-device", required_argument, NULL, 'g'},
	    {"task-prolog", required_argument, NULL, 'p'},
	    {"prolog-socket", required_argument, NULL, 's'},
	    {"sparkctl", required_argument, NULL, 'c'},
	    {"help", no_argument, NULL, 'h'},
	    CLI_OPT_END,
	};
	const char *dir = ".", *ver = "22.05", *gpu = "/dev/nvidia0";
	const char *prolog = "/etc/slurm/sparkctl-task-prolog.sh", *sock = NULL, *self = NULL;
	bool force = false;
	int ch, rc = 0;
	optind = 0;
	while ((ch = cli_next_opt(ctx, argc, argv, lo, &rc)) != -1) {
		switch (ch) {
		case -2:
			return rc;
		case 'h':
			return cli_help(ctx->cmd);
		case 'd': dir = optarg; break;
		case 'v': ver = optarg; break;
		case 'f': force = true; break;
		case 'g': gpu = optarg; break;
		case 'p': prolog = optarg; break;
		case 's': sock = optarg; break;
		case 'c': self = optarg; break;
		default: return cli_usage(ctx, "unexpected option");
		}
	}
	if (optind < argc)
		return cli_usage(ctx, "unexpected argument '%s'", argv[optind]);
	int maj = 0, min = 0;
	if (sscanf(ver, "%d.%d", &maj, &min) != 2 || maj < 20 || maj > 99 || min < 0 || min > 99)
		return cli_usage(ctx, "--slurm-version '%s' is not a Slurm release such as 22.05", ver);
	char exe[PATH_MAX];
	if (!self) {
		ssize_t l = readlink("/proc/self/exe", exe, sizeof exe - 1);
		exe[l > 0 ? l : 0] = '\0';
		self = l > 0 ? exe : "/usr/bin/sparkctl";
	}
	json_t *m = build_model(ctx, force, &rc);
	if (!m)
		return rc;
	json_object_set_new(m, "generated_at", json_integer((json_int_t)time(NULL)));
	json_object_set_new(m, "sparkctl_version", json_string(SPARK_VERSION));
	json_object_set_new(m, "slurm_version", json_string(ver));
	json_object_set_new(m, "task_prolog", json_string(prolog));
	json_object_set_new(m, "sparkctl", json_string(self));
	json_object_set_new(m, "socket", json_string(sock ? sock : ctx->socket));
	json_object_set_new(m, "gpu_device", json_string(gpu));
	struct slurm_files f;
	char err[512];
	if (slurm_render(m, &f, err, sizeof err) < 0) {
		json_decref(m);
		return cli_fail("%s; nothing was exported", err);
	}
	const char *names[] = {"sparkctl.conf", "gres.conf", "topology.conf", "sparkctl-task-prolog.sh"};
	const char *texts[] = {f.slurm_conf, f.gres_conf, f.topology_conf, f.task_prolog};
	json_t *files = json_object();
	for (size_t i = 0; i < 4; i++)
		if (texts[i])
			json_object_set_new(files, names[i], json_string(texts[i]));
	json_t *o = json_pack("{s:O, s:O, s:o}", "cluster", json_object_get(m, "cluster"),
			      "topology", json_object_get(m, "topology"), "files", files);
	/* -o files (the table mode) writes them to --out; -o json prints them */
	if (ctx->out != OUT_JSON) {
		json_t *wrote = json_array(), *removed = json_array();
		json_object_set_new(o, "wrote", wrote);
		json_object_set_new(o, "removed", removed);
		json_object_set_new(o, "task_prolog", json_string(prolog));
		if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
			rc = cli_fail("cannot create %s: %s; pick another --out DIR", dir, strerror(errno));
			json_decref(o);
			goto out;
		}
		for (size_t i = 0; i < 4; i++) {
			char path[PATH_MAX];
			snprintf(path, sizeof path, "%s/%s", dir, names[i]);
			if (!texts[i]) {
				if (unlink(path) == 0)
					json_array_append_new(removed, json_string(path));
				continue;
			}
			int r = write_file(dir, names[i], texts[i], i == 3 ? 0755 : 0644);
			if (r < 0) {
				cli_output(ctx, NULL, o, NULL); /* what was written before */
				rc = cli_fail("cannot write %s: %s; check --out DIR", path, strerror(-r));
				json_decref(o);
				goto out;
			}
			json_array_append_new(wrote, json_string(path));
		}
		json_object_set_new(o, "complete", json_true());
	}
	cli_output(ctx, NULL, o, NULL);
	json_decref(o);
out:
	slurm_files_free(&f);
	json_decref(m);
	return rc;
}

/* ---- env ------------------------------------------------------------------------------- */

static int env_int(const char *name, long lo, long hi, long *out)
{
	const char *s = getenv(name);
	if (!s || !*s)
		return 0;
	char *e;
	long v = strtol(s, &e, 10);
	if (*e || v < lo || v > hi)
		return -1;
	*out = v;
	return 1;
}

int cmd_env(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {
	    {"node-list", required_argument, NULL, 'n'},
	    {"job-id", required_argument, NULL, 'j'},
	    {"rank", required_argument, NULL, 'r'},
	    {"local-rank", required_argument, NULL, 'l'},
	    {"group", required_argument, NULL, 'g'},
	    {"slurm", no_argument, NULL, 's'},
	    {"help", no_argument, NULL, 'h'},
	    CLI_OPT_END,
	};
	const char *list = NULL, *group = NULL;
	long job = -1, rank = -1, local = -1;
	bool slurm = false;
	int ch, rc = 0;
	optind = 0;
	while ((ch = cli_next_opt(ctx, argc, argv, lo, &rc)) != -1) {
		char *e = NULL;
		switch (ch) {
		case -2:
			return rc;
		case 'h':
			return cli_help(ctx->cmd);
		case 'n': list = optarg; break;
		case 'g': group = optarg; break;
		case 's': slurm = true; break;
		case 'j':
		case 'r':
		case 'l': {
			long v = strtol(optarg, &e, 10);
			if (!*optarg || *e || v < 0 || v > (1L << 30))
				return cli_usage(ctx, "'%s' is not a number from 0", optarg);
			*(ch == 'j' ? &job : ch == 'r' ? &rank : &local) = v;
			break;
		}
		default:
			return cli_usage(ctx, "unexpected option");
		}
	}
	if (optind < argc)
		return cli_usage(ctx, "unexpected argument '%s'", argv[optind]);
	/* --slurm: what the flags leave out comes from Slurm's task environment */
	if (slurm) {
		if (!list)
			list = getenv("SLURM_STEP_NODELIST") ?: getenv("SLURM_JOB_NODELIST");
		if (!group)
			group = getenv("SLURM_JOB_PARTITION");
		if ((job < 0 && env_int("SLURM_JOB_ID", 0, 1L << 30, &job) < 0) ||
		    (rank < 0 && env_int("SLURM_PROCID", 0, 1L << 20, &rank) < 0) ||
		    (local < 0 && env_int("SLURM_LOCALID", 0, 64, &local) < 0))
			return cli_usage(ctx, "SLURM_JOB_ID, SLURM_PROCID or SLURM_LOCALID is not a number");
	}
	if (!list)
		return cli_usage(ctx, "missing --node-list NODELIST (Slurm's host list, e.g. "
				      "spark-[1-2]; --slurm reads SLURM_JOB_NODELIST)");
	struct hostlist h;
	char err[256];
	if (hostlist_expand(list, &h, err, sizeof err) < 0) {
		hostlist_free(&h);
		return cli_usage(ctx, "%s", err);
	}
	if (h.n > 64) {
		hostlist_free(&h);
		return cli_usage(ctx, "the node list names %zu nodes; a job spans at most 64", h.n);
	}
	json_t *args = json_pack("{s:[]}", "nodes");
	json_t *nodes = json_object_get(args, "nodes");
	for (size_t i = 0; i < h.n; i++)
		json_array_append_new(nodes, json_string(h.names[i]));
	hostlist_free(&h);
	if (job >= 0)
		json_object_set_new(args, "job_id", json_integer(job));
	if (rank >= 0)
		json_object_set_new(args, "rank", json_integer(rank));
	if (local >= 0)
		json_object_set_new(args, "local_rank", json_integer(local));
	if (group)
		json_object_set_new(args, "group", json_string(group));
	json_t *d = NULL;
	if (cli_call(ctx, "job_env", args, &d, 0))
		return 1;
	cli_output(ctx, NULL, d, NULL);
	json_decref(d);
	return 0;
}

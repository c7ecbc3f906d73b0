/* sparkctl sim up|down|ls|exec|fault: the simulated cluster (sim/sim.h);
 * the text writers of up and ls are in print_sim.c. */
#include "cli.h"
#include "print.h"
#include "sim.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* -EINVAL from sim/ means the arguments were wrong: exit 2, else 1. */
static int sim_fail(struct cli_ctx *ctx, int r, const char *err)
{
	if (r == -EINVAL)
		return cli_usage(ctx, "%s", err);
	return cli_fail("%s", err[0] ? err : strerror(-r));
}

static int parse_num(const char *s, int *out)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (!*s || *end || v < 0 || v > 1000000)
		return -1;
	*out = (int)v;
	return 0;
}

int cmd_sim_up(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option opts[] = {
		{"nodes", required_argument, NULL, 'n'}, {"topology", required_argument, NULL, 't'},
		{"name", required_argument, NULL, 'N'},  {"mtu", required_argument, NULL, 'm'},
		{"root", required_argument, NULL, 'r'},  {"port", required_argument, NULL, 'p'},
		{"no-agents", no_argument, NULL, 'A'},   {"bare", required_argument, NULL, 'b'},
		{NULL, 0, NULL, 0}};
	struct sim_opts o = {.nodes = 4, .port = -1};
	const char *topo = NULL;
	int c;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
		switch (c) {
		case 'n':
			if (parse_num(optarg, &o.nodes) < 0)
				return cli_usage(ctx, "--nodes takes a number from 2 to 8");
			break;
		case 't': topo = optarg; break;
		case 'N': o.prefix = optarg; break;
		case 'm':
			if (parse_num(optarg, &o.mtu) < 0)
				return cli_usage(ctx, "--mtu takes a number");
			break;
		case 'r': o.root = optarg; break;
		case 'p':
			if (parse_num(optarg, &o.port) < 0 || o.port > 1)
				return cli_usage(ctx, "--port takes 0 or 1");
			break;
		case 'A': o.no_agents = true; break;
		case 'b':
			if (parse_num(optarg, &o.bare) < 0 || o.bare > SIM_MAX_NODES - 1)
				return cli_usage(ctx, "--bare takes a number from 0 to %d",
						 SIM_MAX_NODES - 1);
			break;
		default: return cli_usage(ctx, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return cli_usage(ctx, "unexpected argument '%s'", argv[optind]);
	if (!topo)
		topo = o.nodes + o.bare == 2 ? "pair" : "ring";
	if (sim_parse_topo(topo, &o.topo) < 0)
		return cli_usage(ctx, "unknown topology '%s' (pair, ring or switch)", topo);
	char err[512] = "";
	/* A Ctrl-C in the middle would leave half a sim: hold signals, and undo
	 * the sim if one arrived. */
	sigset_t hold, old, pend;
	sigemptyset(&hold);
	sigaddset(&hold, SIGINT);
	sigaddset(&hold, SIGTERM);
	sigaddset(&hold, SIGHUP);
	sigprocmask(SIG_BLOCK, &hold, &old);
	int r = sim_up(&o, err, sizeof err);
	sigpending(&pend);
	const char *prefix = o.prefix ? o.prefix : SIM_DEFAULT_PREFIX;
	if (r == 0 && (sigismember(&pend, SIGINT) || sigismember(&pend, SIGTERM) ||
		       sigismember(&pend, SIGHUP))) {
		sim_down(prefix, NULL, NULL, 0);
		return cli_fail("interrupted; the sim was removed");
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	if (r < 0)
		return sim_fail(ctx, r, err);
	/* -o json: the sim's description (nothing when it cannot be read back) */
	json_t *j = NULL;
	if (sim_describe(prefix, &j, err, sizeof err) < 0)
		j = NULL;
	struct cli_sim_up_view view = {.prefix = prefix, .topology = sim_topo_name(o.topo),
				       .nodes = o.nodes, .bare = o.bare, .no_agents = o.no_agents};
	cli_output(ctx, NULL, j, &view);
	json_decref(j);
	return 0;
}

static bool sim_present(const char *prefix)
{
	char p[512];
	snprintf(p, sizeof p, "%s/%s", SIM_RUN_DIR, prefix);
	if (access(p, F_OK) == 0)
		return true;
	const char *sfx[] = {"mgmt", "switch", "1", "2", "3", "4", "5", "6", "7", "8"};
	for (size_t i = 0; i < sizeof sfx / sizeof sfx[0]; i++) {
		snprintf(p, sizeof p, "/run/netns/%s-%s", prefix, sfx[i]);
		if (access(p, F_OK) == 0)
			return true;
	}
	return false;
}

int cmd_sim_down(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option opts[] = {{"name", required_argument, NULL, 'N'},
					     {"root", required_argument, NULL, 'r'},
					     {"all", no_argument, NULL, 'a'},
					     {NULL, 0, NULL, 0}};
	const char *prefix = NULL, *root = NULL;
	bool all = false;
	int c;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
		switch (c) {
		case 'N': prefix = optarg; break;
		case 'r': root = optarg; break;
		case 'a': all = true; break;
		default: return cli_usage(ctx, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return cli_usage(ctx, "unexpected argument '%s'", argv[optind]);
	if (all && (prefix || root))
		return cli_usage(ctx, "--all removes every sim; it takes no --name or --root");
	char err[512] = "";
	int r = sim_check_caps(err, sizeof err);
	if (r < 0)
		return cli_fail("%s", err);
	json_t *names = json_array();
	if (all) {
		json_decref(names);
		names = sim_list();
	} else {
		json_array_append_new(names, json_string(prefix ? prefix : SIM_DEFAULT_PREFIX));
	}
	int rc = 0;
	size_t i;
	json_t *v;
	json_array_foreach(names, i, v) {
		const char *p = json_string_value(v);
		if (!sim_valid_prefix(p)) {
			json_decref(names);
			return cli_usage(ctx, "'%s' is not a valid sim name", p);
		}
		bool was = sim_present(p) || root;
		r = sim_down(p, root, err, sizeof err);
		if (r < 0)
			rc = sim_fail(ctx, r, err);
		else if (was)
			printf("sim %s removed\n", p);
		else
			printf("no sim named %s; nothing to remove\n", p);
	}
	if (all && json_array_size(names) == 0)
		printf("no sims; nothing to remove\n");
	json_decref(names);
	return rc;
}

int cmd_sim_ls(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option opts[] = {{"name", required_argument, NULL, 'N'},
					     {"links", no_argument, NULL, 'l'},
					     {NULL, 0, NULL, 0}};
	const char *prefix = NULL;
	bool links = false;
	int c;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
		switch (c) {
		case 'N': prefix = optarg; break;
		case 'l': links = true; break;
		default: return cli_usage(ctx, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return cli_usage(ctx, "unexpected argument '%s'", argv[optind]);
	json_t *names;
	if (prefix) {
		names = json_array();
		json_array_append_new(names, json_string(prefix));
	} else {
		names = sim_list();
	}
	char err[512] = "";
	json_t *rows = json_array(); /* nodes, or links with --links */
	json_t *descs = json_array();
	size_t i;
	json_t *v;
	int rc = 0;
	json_array_foreach(names, i, v) {
		json_t *d = NULL;
		int r = sim_describe(json_string_value(v), &d, err, sizeof err);
		if (r < 0) {
			if (prefix)
				rc = sim_fail(ctx, r, err);
			else /* a half-removed sim: say so, list the others */
				fprintf(stderr, "sparkctl: %s\n", err);
			continue;
		}
		size_t j;
		json_t *n;
		json_array_foreach(json_object_get(d, "nodes"), j, n) {
			json_t *row = json_pack(
			    "{s:O, s:s, s:O, s:O, s:O, s:O, s:O, s:b}", "name", json_object_get(n, "name"),
			    "sim", json_string_value(v), "namespace", json_object_get(n, "namespace"),
			    "agent_pid", json_object_get(n, "agent_pid"), "state",
			    json_object_get(n, "agent_state"), "address", json_object_get(n, "address"),
			    "socket", json_object_get(n, "socket"), "bare",
			    json_is_true(json_object_get(n, "bare")));
			if (row)
				json_array_append_new(rows, row);
		}
		json_array_append_new(descs, d);
	}
	json_decref(names);
	if (rc) {
		json_decref(rows);
		json_decref(descs);
		return rc;
	}
	struct cli_sim_ls_view view = {.links = links, .descs = descs};
	cli_output(ctx, NULL, links ? descs : rows, &view);
	json_decref(rows);
	json_decref(descs);
	return 0;
}

int cmd_sim_exec(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *prefix = NULL, *node = NULL;
	int i = 1;
	for (; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0) {
			i++;
			break;
		}
		if (strcmp(argv[i], "--name") == 0 && i + 1 < argc) {
			prefix = argv[++i];
		} else if (strncmp(argv[i], "--name=", 7) == 0) {
			prefix = argv[i] + 7;
		} else if (argv[i][0] == '-') {
			return cli_usage(ctx, "unknown option '%s'", argv[i]);
		} else if (!node) {
			node = argv[i];
		} else {
			break; /* NODE CMD... without "--" */
		}
	}
	if (!node)
		return cli_usage(ctx, "which node? e.g. sparkctl sim exec spark-1 -- sparkctl status");
	if (i >= argc)
		return cli_usage(ctx, "no command to run after '%s --'", node);
	/* NODE is PREFIX-K, or PREFIX-mgmt / PREFIX-switch, or a bare K. */
	char pfx[SIM_PREFIX_MAX + 1], ns[64];
	int k;
	if (sim_parse_target(node, prefix, pfx, sizeof pfx, &k, NULL, 0) == 0) {
		snprintf(ns, sizeof ns, "%s-%d", pfx, k);
	} else {
		const char *dash = strrchr(node, '-');
		if (!dash || (strcmp(dash, "-mgmt") && strcmp(dash, "-switch")) ||
		    (size_t)(dash - node) > SIM_PREFIX_MAX)
			return cli_usage(ctx, "'%s' is not a sim node (e.g. spark-2)", node);
		snprintf(pfx, sizeof pfx, "%.*s", (int)(dash - node), node);
		snprintf(ns, sizeof ns, "%s", node);
	}
	fflush(stdout);
	char err[512] = "";
	int r = sim_exec(pfx, ns, argv + i, err, sizeof err);
	if (r == -ENOENT && strstr(err, "cannot run")) {
		fprintf(stderr, "sparkctl: %s\n", err);
		return 127;
	}
	return sim_fail(ctx, r, err);
}

int cmd_sim_fault(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *prefix = NULL;
	char *args[8];
	int n = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--name") == 0 && i + 1 < argc)
			prefix = argv[++i];
		else if (strncmp(argv[i], "--name=", 7) == 0)
			prefix = argv[i] + 7;
		else if (argv[i][0] == '-' && argv[i][1] && !(argv[i][1] >= '0' && argv[i][1] <= '9'))
			return cli_usage(ctx, "unknown option '%s'", argv[i]);
		else if (n < 8)
			args[n++] = argv[i];
		else
			return cli_usage(ctx, "too many arguments");
	}
	if (n < 1)
		return cli_usage(ctx, "which fault? cut, restore, mtu, swap, delay, kill, start, down or up");
	char err[512] = "";
	int r = sim_fault(args[0], n - 1, args + 1, prefix, err, sizeof err);
	if (r < 0)
		return sim_fail(ctx, r, err);
	return 0;
}

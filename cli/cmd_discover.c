/* sparkctl discover: this machine's fabric ports and health findings, read
 * directly (no sparkd needed). The answer is the discovery object of
 * topology/discover.h plus "findings"; its table (one row per twin grouped by
 * physical port, then the findings with their fixes) is cli_print_fabric in
 * print_topo.c. Exit 0 even with findings; 1 when discovery itself cannot
 * run; 2 on bad usage. */
#include "cli.h"

#include "cfg.h"
#include "discover.h"
#include "spark_config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_discover(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {{"sysfs-root", required_argument, NULL, 'r'},
					   {"config", required_argument, NULL, 'c'},
					   {"mtu", required_argument, NULL, 'm'},
					   {NULL, 0, NULL, 0}};
	const char *root = NULL, *config = NULL;
	long mtu = -1;
	int ch;
	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		if (ch == 'r') {
			if (!*optarg)
				return cli_usage(ctx, "--sysfs-root needs a directory");
			root = optarg;
		} else if (ch == 'c') {
			config = optarg;
		} else if (ch == 'm') {
			char *end;
			errno = 0;
			mtu = strtol(optarg, &end, 10);
			if (errno || *end || end == optarg || mtu < 68 || mtu > 65535)
				return cli_usage(ctx, "--mtu: '%s' is not an MTU from 68 to 65535", optarg);
		} else {
			return cli_usage(ctx, "unknown or incomplete option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return cli_usage(ctx, "unexpected argument '%s'", argv[optind]);

	struct topo_opts o;
	topo_opts_init(&o);
	char err[512];
	const char *path = config ? config : SPARK_DEFAULT_CONFIG;
	json_t *cfg = NULL;
	int r = cfg_load(path, &cfg, err, sizeof err);
	if (r == -ENOENT && !config) {
		r = 0;
	} else if (r < 0) {
		return cli_fail("cannot read the config: %s; fix it or pass --config FILE", err);
	} else if (topo_opts_from_config(&o, cfg, err, sizeof err) < 0) {
		json_decref(cfg);
		return cli_fail("%s: %s; fix the config file", path, err);
	}
	json_decref(cfg);
	if (root) {
		o.sysfs_root = root;
		bool real = strcmp(root, "/") == 0;
		o.use_netlink = o.use_verbs = real;
	}
	if (mtu > 0)
		o.cluster_mtu = (int)mtu;

	json_t *d = NULL;
	r = topo_discover(&o, &d, err, sizeof err);
	if (r < 0) {
		topo_opts_free(&o);
		return cli_fail("discovery failed: %s; check --sysfs-root (or run as root)", err);
	}
	json_t *findings = NULL;
	if (topo_findings(d, o.cluster_mtu, &findings) < 0)
		findings = json_array();
	topo_opts_free(&o);
	json_object_set_new(d, "findings", findings);
	cli_output(ctx, NULL, d, NULL);
	json_decref(d);
	return 0;
}

/* sparkctl discover: this machine's fabric ports and health findings, read
 * directly (no sparkd needed). Table: one row per twin grouped by physical
 * port, then the findings with their fixes. JSON: the discovery object of
 * topology/discover.h plus "findings". Exit 0 even with findings; 1 when
 * discovery itself cannot run; 2 on bad usage. */
#include "cli.h"
#include "output.h"

#include "cfg.h"
#include "discover.h"
#include "spark_config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *sget(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "";
}

static const char *cell_state(json_t *t)
{
	if (!json_is_true(json_object_get(t, "present")))
		return "absent";
	json_t *c = json_object_get(t, "carrier");
	if (json_is_boolean(c))
		return json_is_true(c) ? "up" : "down";
	return *sget(t, "operstate") ? sget(t, "operstate") : "-";
}

static const char *cell_speed(json_t *t, char *buf, size_t len)
{
	json_t *s = json_object_get(t, "speed_mbps");
	if (!json_is_integer(s))
		return "-";
	json_int_t v = json_integer_value(s);
	if (v % 1000 == 0)
		return out_fmt(buf, len, "%lldG", (long long)(v / 1000));
	return out_fmt(buf, len, "%.1fG", (double)v / 1000.0);
}

static const char *cell_pcie(json_t *t, char *buf, size_t len)
{
	json_t *pci = json_object_get(t, "pci");
	json_t *cw = json_object_get(pci, "current_link_width");
	if (!json_is_integer(cw))
		return "-";
	json_t *mw = json_object_get(pci, "max_link_width");
	json_t *gen = json_object_get(pci, "current_gen");
	char g[16] = "";
	if (json_is_integer(gen))
		snprintf(g, sizeof g, "Gen%lld ", (long long)json_integer_value(gen));
	if (json_is_integer(mw) && json_integer_value(mw) > json_integer_value(cw))
		return out_fmt(buf, len, "%sx%lld/x%lld", g, (long long)json_integer_value(cw),
			       (long long)json_integer_value(mw));
	return out_fmt(buf, len, "%sx%lld", g, (long long)json_integer_value(cw));
}

static const char *cell_rdma(json_t *t, char *buf, size_t len)
{
	json_t *r = json_object_get(t, "rdma");
	if (!json_is_object(r))
		return "-";
	return out_fmt(buf, len, "%s %s", sget(r, "device"), *sget(r, "state") ? sget(r, "state") : "?");
}

static const char *cell_gid(json_t *t, char *buf, size_t len)
{
	json_t *g = json_object_get(json_object_get(t, "rdma"), "rocev2_gid_index");
	return json_is_integer(g) ? out_fmt(buf, len, "%lld", (long long)json_integer_value(g)) : "-";
}

static const char *cell_addrs(json_t *t, char *buf, size_t len)
{
	json_t *v4 = json_object_get(t, "ipv4"), *v6 = json_object_get(t, "ipv6");
	if (!json_is_array(v4) && !json_is_array(v6))
		return "-";
	buf[0] = '\0';
	size_t i;
	json_t *a;
	json_array_foreach(v4, i, a) {
		size_t l = strlen(buf);
		snprintf(buf + l, len - l, "%s%s", l ? "," : "", json_string_value(a));
	}
	json_array_foreach(v6, i, a) {
		const char *s = json_string_value(a);
		if (!s || strncmp(s, "fe80:", 5) == 0)
			continue; /* every twin has one; they say nothing */
		size_t l = strlen(buf);
		snprintf(buf + l, len - l, "%s%s", l ? "," : "", s);
	}
	return buf[0] ? buf : "-";
}

void cli_print_fabric(json_t *d, json_t *findings)
{
	json_t *ports = json_object_get(d, "ports");
	if (json_array_size(ports) == 0) {
		printf("No fabric port found.\n");
	} else {
		static const char *const hdr[] = {"PORT", "NETDEV", "STATE", "SPEED", "MTU",
						  "PCIE", "RDMA",   "GID",   "ADDRESSES"};
		out_table *t = out_table_new(9, hdr);
		size_t i, k;
		json_t *p, *tw;
		json_array_foreach(ports, i, p) {
			json_array_foreach(json_object_get(p, "twins"), k, tw) {
				char sp[32], mtu[16], pcie[48], rdma[128], gid[16], addrs[512];
				json_t *m = json_object_get(tw, "mtu");
				const char *row[9] = {
				    k == 0 ? sget(p, "name") : "",
				    sget(tw, "netdev"),
				    cell_state(tw),
				    cell_speed(tw, sp, sizeof sp),
				    json_is_integer(m) ? out_fmt(mtu, sizeof mtu, "%lld",
								 (long long)json_integer_value(m))
						       : "-",
				    cell_pcie(tw, pcie, sizeof pcie),
				    cell_rdma(tw, rdma, sizeof rdma),
				    cell_gid(tw, gid, sizeof gid),
				    cell_addrs(tw, addrs, sizeof addrs),
				};
				out_table_row(t, row);
			}
		}
		out_table_print(t, stdout);
		out_table_free(t);
	}
	size_t i;
	json_t *x;
	json_array_foreach(json_object_get(d, "notes"), i, x)
		printf("note: %s\n", json_string_value(x));
	if (json_array_size(findings) == 0) {
		printf("\nNo findings.\n");
		return;
	}
	printf("\nFINDINGS (%zu)\n", json_array_size(findings));
	json_array_foreach(findings, i, x) {
		const char *port = json_string_value(json_object_get(x, "port"));
		const char *nd = json_string_value(json_object_get(x, "netdev"));
		char where[96] = "";
		if (port && nd)
			snprintf(where, sizeof where, " port %s %s", port, nd);
		else if (nd)
			snprintf(where, sizeof where, " %s", nd);
		printf("%-5s  %s%s: %s\n       fix: %s\n", sget(x, "severity"), sget(x, "code"), where,
		       sget(x, "message"), sget(x, "fix"));
	}
}

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
	if (ctx->out == OUT_JSON) {
		json_object_set(d, "findings", findings);
		cli_print_json(d);
	} else {
		cli_print_fabric(d, findings);
	}
	json_decref(findings);
	json_decref(d);
	return 0;
}

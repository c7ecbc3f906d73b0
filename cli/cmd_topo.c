/* Topology: `topo show`, `topo validate`, `topo addresses` (docs/topology.md).
 * The head does the work (agent/topo_head.c); these ask for it, and
 * print_topo.c prints its answers. Exit 0 only on PASS for validate. */
#include "cli.h"
#include "output.h"
#include "print.h"

#include "addrplan.h"
#include "util.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OPT_END CLI_OPT_END

static int parse(struct cli_ctx *ctx, int argc, char **argv, const struct option *lo, int *rc,
		 int (*on)(int ch, void *arg), void *arg)
{
	optind = 0;
	opterr = 0;
	int ch;
	while ((ch = getopt_long(argc, argv, "+", lo, NULL)) != -1) {
		if (ch == '?' || ch == ':') {
			const char *bad = argv[optind - 1];
			*rc = cli_usage(ctx, "unknown or incomplete option '%s'", bad ? bad : "?");
			return -1;
		}
		if ((*rc = on(ch, arg)) != 0)
			return -1;
	}
	if (optind < argc) {
		*rc = cli_usage(ctx, "unexpected argument '%s'", argv[optind]);
		return -1;
	}
	return 0;
}

/* ---- commands ------------------------------------------------------------------------- */

static int no_opt(int ch, void *arg)
{
	(void)ch;
	(void)arg;
	return 0;
}

int cmd_topo_show(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {OPT_END};
	int rc = 0;
	if (parse(ctx, argc, argv, lo, &rc, no_opt, NULL) < 0)
		return rc;
	return cli_request(ctx, "topo_show", NULL, 60000, NULL);
}

struct vopts {
	struct cli_ctx *ctx;
	const char *expect;
	bool quick;
};

static int v_opt(int ch, void *arg)
{
	struct vopts *o = arg;
	if (ch == 'e') {
		if (strcmp(optarg, "pair") != 0 && strcmp(optarg, "ring") != 0 &&
		    strcmp(optarg, "switch") != 0)
			return cli_usage(o->ctx, "--expect takes pair, ring or switch, not '%s'", optarg);
		o->expect = optarg;
	} else if (ch == 'q') {
		o->quick = true;
	}
	return 0;
}

int cmd_topo_validate(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {{"expect", required_argument, NULL, 'e'},
					   {"quick", no_argument, NULL, 'q'},
					   OPT_END};
	struct vopts o = {.ctx = ctx};
	int rc = 0;
	if (parse(ctx, argc, argv, lo, &rc, v_opt, &o) < 0)
		return rc;
	json_t *args = json_pack("{s:b}", "quick", o.quick);
	if (o.expect)
		json_object_set_new(args, "expect", json_string(o.expect));
	cli_progress(ctx, "Validating the fabric (%s)...\r", o.quick ? "quick" : "full");
	json_t *req = json_incref(args), *v;
	if (cli_call(ctx, "topo_validate", args, &v, 200000)) {
		json_decref(req);
		return 1;
	}
	cli_progress_clear(ctx);
	cli_output(ctx, req, v, NULL);
	json_decref(req);
	const char *res = cli_jstr(v, "result");
	int pass = strcmp(res, "pass") == 0;
	fflush(stdout); /* the verdict first, whole, then the one line on stderr */
	if (!pass) {
		size_t n = 0, i;
		json_t *f;
		json_array_foreach(json_object_get(v, "findings"), i, f)
			n += strcmp(cli_jstr(f, "severity"), "info") != 0;
		char up[8];
		out_upper(res, up, sizeof up);
		fprintf(stderr,
			"sparkctl: topology validation: %s with %zu finding%s; apply the fixes above and "
			"run 'sparkctl topo validate' again\n",
			up, n, n == 1 ? "" : "s");
	}
	json_decref(v);
	return pass ? 0 : 1;
}

struct aopts {
	bool apply;
	const char *netplan;
};

static int a_opt(int ch, void *arg)
{
	struct aopts *o = arg;
	if (ch == 'a')
		o->apply = true;
	else if (ch == 'n')
		o->netplan = optarg;
	return 0;
}

int cmd_topo_addresses(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {{"apply", no_argument, NULL, 'a'},
					   {"netplan", required_argument, NULL, 'n'},
					   OPT_END};
	struct aopts o = {0};
	int rc = 0;
	if (parse(ctx, argc, argv, lo, &rc, a_opt, &o) < 0)
		return rc;
	json_t *req = json_pack("{s:b}", "apply", o.apply), *d;
	if (cli_call(ctx, "topo_addresses", json_incref(req), &d, 60000)) {
		json_decref(req);
		return 1;
	}
	json_t *plan = json_object_get(d, "plan");
	int ret = json_is_true(json_object_get(d, "failed")) ? 1 : 0;
	if (o.netplan) {
		const char *local = json_string_value(json_object_get(d, "local_node"));
		char *yaml = NULL;
		char err[256] = "";
		int mtu = (int)json_integer_value(json_object_get(d, "mtu"));
		if (!local || topo_addrplan_netplan(plan, local, mtu, &yaml, err, sizeof err) < 0) {
			json_decref(req);
			json_decref(d);
			return cli_fail("cannot render netplan for this node: %s; is it cabled?",
					err[0] ? err : "unknown node");
		}
		int w = topo_addrplan_write_netplan(o.netplan, yaml);
		free(yaml);
		if (w < 0) {
			json_decref(req);
			json_decref(d);
			return cli_fail("cannot write %s: %s", o.netplan, strerror(-w));
		}
	}
	struct cli_topo_addresses_view view = {.netplan = o.netplan};
	cli_output(ctx, req, d, &view);
	json_decref(req);
	json_decref(d);
	return ret;
}

/* Topology: `topo show`, `topo validate`, `topo addresses` (docs/topology.md).
 * The head does the work (agent/topo_head.c); these print its answers: the
 * cable map as a table and a picture, probe results, every finding with its
 * fix, the addressing plan. Exit 0 only on PASS for validate. */
#include "cli.h"
#include "output.h"

#include "addrplan.h"
#include "util.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OPT_END CLI_OPT_END
#define TOPO_PIC_MAX 256

static void upper(const char *s, char *out, size_t len)
{
	size_t i = 0;
	for (; s && s[i] && i + 1 < len; i++)
		out[i] = (char)(s[i] >= 'a' && s[i] <= 'z' ? s[i] - 'a' + 'A' : s[i]);
	out[i] = '\0';
}

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

/* ---- pieces of a verdict ------------------------------------------------------------ */

static void end_name(json_t *e, char *buf, size_t len)
{
	if (json_is_string(json_object_get(e, "switch")))
		snprintf(buf, len, "switch %s", cli_jstr(e, "switch"));
	else
		snprintf(buf, len, "%s:%s", cli_jstr(e, "node"), cli_jstr(e, "port"));
}

static void print_cables(json_t *v)
{
	json_t *cables = json_object_get(v, "cables");
	if (!json_array_size(cables)) {
		printf("No cables found: no fabric port hears another node.\n");
		return;
	}
	static const char *const hdr[] = {"CABLE", "KIND", "TWINS OK", "MTU", "NETDEVS"};
	out_table *t = out_table_new(5, hdr);
	size_t i, k;
	json_t *c, *tw;
	json_array_foreach(cables, i, c) {
		char a[96], b[96], cab[200], twins[16], nds[200] = "", mtu[192];
		end_name(json_object_get(c, "a"), a, sizeof a);
		end_name(json_object_get(c, "b"), b, sizeof b);
		snprintf(cab, sizeof cab, "%s -- %s", a, b);
		json_t *tws = json_object_get(c, "twins");
		snprintf(twins, sizeof twins, "%lld/%zu",
			 (long long)json_integer_value(json_object_get(c, "twins_ok")),
			 json_array_size(tws));
		/* The MTU column: the value when every twin agrees end to end, else
		 * each twin whose two ends differ, with its own two values. */
		long long m0 = -1;
		char bad[160] = "";
		json_array_foreach(tws, k, tw) {
			json_t *ta = json_object_get(tw, "a"), *tb = json_object_get(tw, "b");
			size_t o = strlen(nds);
			snprintf(nds + o, sizeof nds - o, "%s%s%s%s%s", k ? ", " : "", cli_jstr(ta, "netdev"),
				 json_is_object(tb) ? "=" : "", json_is_object(tb) ? cli_jstr(tb, "netdev") : "",
				 json_is_true(json_object_get(tw, "ok")) ? "" : " (silent)");
			long long ma = json_is_integer(json_object_get(ta, "mtu"))
					   ? (long long)json_integer_value(json_object_get(ta, "mtu"))
					   : -1;
			long long mb = json_is_integer(json_object_get(tb, "mtu"))
					   ? (long long)json_integer_value(json_object_get(tb, "mtu"))
					   : -1;
			if (m0 < 0 && ma > 0)
				m0 = ma;
			if (ma > 0 && mb > 0 && ma != mb) {
				o = strlen(bad);
				snprintf(bad + o, sizeof bad - o, "%stwin %zu %lld/%lld", o ? ", " : "", k, ma,
					 mb);
			}
		}
		if (bad[0] || json_is_false(json_object_get(c, "mtu_ok")))
			snprintf(mtu, sizeof mtu, "MISMATCH %s", bad[0] ? bad : "(see findings)");
		else if (m0 > 0)
			snprintf(mtu, sizeof mtu, "%lld", m0);
		else
			snprintf(mtu, sizeof mtu, "-");
		const char *row[] = {cab, cli_jstr(c, "kind"), twins, mtu, nds};
		out_table_row(t, row);
	}
	out_table_print(t, stdout);
	out_table_free(t);
}

/* The cable between two nodes in a ring order, if any (direct). */
static json_t *cable_between(json_t *v, const char *x, const char *y)
{
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(v, "cables"), i, c) {
		const char *a = cli_jstr(json_object_get(c, "a"), "node"), *b = cli_jstr(json_object_get(c, "b"), "node");
		if (strcmp(cli_jstr(c, "kind"), "direct") == 0 &&
		    ((strcmp(a, x) == 0 && strcmp(b, y) == 0) || (strcmp(a, y) == 0 && strcmp(b, x) == 0)))
			return c;
	}
	return NULL;
}

static const char *port_of(json_t *c, const char *node)
{
	json_t *a = json_object_get(c, "a"), *b = json_object_get(c, "b");
	return strcmp(cli_jstr(a, "node"), node) == 0 ? cli_jstr(a, "port") : cli_jstr(b, "port");
}

static void link_art(json_t *c, char *buf, size_t len)
{
	long long ok = (long long)json_integer_value(json_object_get(c, "twins_ok"));
	size_t n = json_array_size(json_object_get(c, "twins"));
	bool mtu = !json_is_false(json_object_get(c, "mtu_ok"));
	snprintf(buf, len, "%s", !mtu ? "==MTU!==" : ok >= (long long)n && n ? "========" : ok ? "--half--" : "..none..");
}

/* A text picture: the ring (or pair) as a loop, the switch with its ports,
 * or the cables one per line when neither fits. */
static void print_picture(json_t *v)
{
	const char *cls = cli_jstr(v, "class");
	json_t *order = json_object_get(v, "ring_order");
	size_t n = json_array_size(order), i;
	if ((strcmp(cls, "ring") == 0 || strcmp(cls, "pair") == 0) && n >= 2) {
		printf("\n%s of %zu (twins both up: ====, one twin: --half--, MTU mismatch: ==MTU!==):\n\n",
		       strcmp(cls, "pair") == 0 ? "Pair" : "Ring", n);
		for (i = 0; i < (n == 2 ? 1 : n); i++) {
			const char *x = json_string_value(json_array_get(order, i));
			const char *y = json_string_value(json_array_get(order, (i + 1) % n));
			json_t *c = x && y ? cable_between(v, x, y) : NULL;
			char art[16] = "   (none)   ";
			if (c)
				link_art(c, art, sizeof art);
			printf("  %-12s port %s %s port %s  %s%s\n", x ? x : "?", c ? port_of(c, x) : "?",
			       art, c ? port_of(c, y) : "?", y ? y : "?",
			       n > 2 && i == n - 1 ? "   (closes the ring)" : "");
		}
		return;
	}
	json_t *doms = json_object_get(v, "l2_domains");
	if (strcmp(cls, "switch") == 0 && json_array_size(doms)) {
		json_t *d;
		json_array_foreach(doms, i, d) {
			json_t *ports = json_object_get(d, "ports");
			size_t m = json_array_size(ports), k;
			const int w = 12;
			char line[3][TOPO_PIC_MAX];
			char title[64];
			snprintf(title, sizeof title, " switch %s ", cli_jstr(d, "id"));
			int width = (int)m * w, tl = (int)strlen(title);
			if (width < tl + 6)
				width = tl + 6;
			if (width > TOPO_PIC_MAX - 8)
				width = TOPO_PIC_MAX - 8;
			int left = (width - 2 - tl) / 2;
			char bar[TOPO_PIC_MAX];
			memset(bar, '-', (size_t)width - 2);
			bar[width - 2] = '\0';
			memcpy(bar + left, title, (size_t)tl);
			printf("\n  +%s+\n", bar);
			for (int l = 0; l < 3; l++)
				line[l][0] = '\0';
			json_t *p;
			json_array_foreach(ports, k, p) {
				char pl[16];
				if (strlen(line[0]) + (size_t)w >= sizeof line[0])
					break;
				snprintf(pl, sizeof pl, "p%s", cli_jstr(p, "port"));
				size_t o = strlen(line[0]);
				snprintf(line[0] + o, sizeof line[0] - o, "   %-*s", w - 3, "|");
				o = strlen(line[1]);
				snprintf(line[1] + o, sizeof line[1] - o, "   |%-*s", w - 4, pl);
				o = strlen(line[2]);
				snprintf(line[2] + o, sizeof line[2] - o, "%-*.*s", w, w - 1, cli_jstr(p, "node"));
			}
			for (int l = 0; l < 3; l++) {
				size_t len = strlen(line[l]);
				while (len && line[l][len - 1] == ' ')
					line[l][--len] = '\0';
				printf("  %s\n", line[l]);
			}
		}
		return;
	}
	json_t *cables = json_object_get(v, "cables");
	if (!json_array_size(cables))
		return;
	printf("\nCables as found:\n\n");
	json_t *c;
	json_array_foreach(cables, i, c) {
		char a[96], b[96], art[16];
		end_name(json_object_get(c, "a"), a, sizeof a);
		end_name(json_object_get(c, "b"), b, sizeof b);
		link_art(c, art, sizeof art);
		printf("  %-16s %s %s\n", a, art, b);
	}
}

static void print_probes(json_t *v)
{
	json_t *probes = json_object_get(v, "probes");
	if (!json_array_size(probes))
		return;
	printf("\n");
	static const char *const hdr[] = {"FROM", "TO", "TWIN", "VIA", "P50 US", "P99 US", "GB/S",
					  "MTU", "RESULT"};
	out_table *t = out_table_new(9, hdr);
	size_t i;
	json_t *p;
	json_array_foreach(probes, i, p) {
		json_t *a = json_object_get(p, "a"), *b = json_object_get(p, "b");
		char from[96], to[96], twin[8], p50[24] = "-", p99[24] = "-", gb[24] = "-", mtu[16] = "-",
										  res[16];
		snprintf(from, sizeof from, "%s %s", cli_jstr(a, "node"), cli_jstr(a, "netdev"));
		snprintf(to, sizeof to, "%s %s", cli_jstr(b, "node"), cli_jstr(b, "netdev"));
		snprintf(twin, sizeof twin, "%lld", (long long)json_integer_value(json_object_get(p, "twin")));
		json_t *x;
		if (json_is_number(x = json_object_get(p, "p50_us")))
			snprintf(p50, sizeof p50, "%.1f", json_number_value(x));
		if (json_is_number(x = json_object_get(p, "p99_us")))
			snprintf(p99, sizeof p99, "%.1f", json_number_value(x));
		if (json_is_number(x = json_object_get(p, "gbps")))
			snprintf(gb, sizeof gb, "%.2f", json_number_value(x));
		if (json_is_integer(x = json_object_get(p, "mtu_largest")))
			snprintf(mtu, sizeof mtu, "%lld", (long long)json_integer_value(x));
		upper(cli_jstr(p, "result"), res, sizeof res);
		const char *row[] = {from, to, twin, cli_jstr(p, "transport"), p50, p99, gb, mtu, res};
		out_table_row(t, row);
	}
	out_table_print(t, stdout);
	out_table_free(t);
	json_t *ps = json_object_get(v, "probe_summary");
	const char *note = cli_jstr(ps, "note");
	if (strcmp(note, "-") != 0 && *note)
		printf("(%s)\n", note);
	json_array_foreach(probes, i, p)
		if (json_is_string(json_object_get(p, "fallback_reason")))
			printf("(%s -> %s: %s)\n", cli_jstr(json_object_get(p, "a"), "netdev"),
			       cli_jstr(json_object_get(p, "b"), "netdev"), cli_jstr(p, "fallback_reason"));
}

static void print_findings(json_t *v)
{
	json_t *f = json_object_get(v, "findings");
	if (!json_array_size(f)) {
		printf("\nNo findings.\n");
		return;
	}
	printf("\nFindings:\n");
	size_t i;
	json_t *x;
	/* Failures first, then warnings, then notes. */
	static const char *const order[] = {"fail", "warn", "info"};
	for (int s = 0; s < 3; s++)
		json_array_foreach(f, i, x) {
			if (strcmp(cli_jstr(x, "severity"), order[s]) != 0)
				continue;
			char sev[8];
			upper(order[s], sev, sizeof sev);
			printf("  %-4s  %s: %s\n        fix: %s\n", sev, cli_jstr(x, "code"), cli_jstr(x, "message"),
			       cli_jstr(x, "fix"));
		}
}

static void print_advice(json_t *v)
{
	json_t *adv = json_object_get(v, "advice");
	if (!json_array_size(adv))
		return;
	printf("\nAdvice:\n");
	size_t i;
	json_t *x;
	json_array_foreach(adv, i, x)
		printf("  - %s\n", cli_jstr(x, "message"));
}

static void print_headline(json_t *v, const char *what)
{
	char res[8];
	upper(cli_jstr(v, "result"), res, sizeof res);
	printf("%s: %s, %lld nodes: %s", what, cli_jstr(v, "class"),
	       (long long)json_integer_value(json_object_get(v, "nodes")), res);
	json_t *run = json_object_get(v, "run"), *ps = json_object_get(v, "probe_summary");
	if (json_is_object(run))
		printf("  (%s, %lld probes over %s, %.1f s)",
		       json_is_true(json_object_get(run, "quick")) ? "quick" : "full",
		       (long long)json_integer_value(json_object_get(ps, "count")), cli_jstr(ps, "transport"),
		       (double)json_integer_value(json_object_get(run, "duration_ms")) / 1000.0);
	printf("\n\n");
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
	json_t *v;
	if (cli_call(ctx, "topo_show", NULL, &v, 60000))
		return 1;
	if (ctx->out == OUT_JSON) {
		cli_print_json(v);
	} else {
		print_headline(v, "Topology (cabling only; 'sparkctl topo validate' also probes)");
		print_cables(v);
		print_picture(v);
		print_findings(v);
	}
	json_decref(v);
	return 0;
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
	if (ctx->tty && ctx->out == OUT_TABLE)
		fprintf(stderr, "Validating the fabric (%s)...\r", o.quick ? "quick" : "full");
	json_t *v;
	if (cli_call(ctx, "topo_validate", args, &v, 200000))
		return 1;
	if (ctx->tty && ctx->out == OUT_TABLE)
		fprintf(stderr, "%40s\r", "");
	const char *res = cli_jstr(v, "result");
	if (ctx->out == OUT_JSON) {
		cli_print_json(v);
	} else {
		print_headline(v, "Topology");
		print_cables(v);
		print_picture(v);
		print_probes(v);
		print_findings(v);
		print_advice(v);
	}
	int pass = strcmp(res, "pass") == 0;
	fflush(stdout); /* the verdict first, whole, then the one line on stderr */
	if (!pass) {
		size_t n = 0, i;
		json_t *f;
		json_array_foreach(json_object_get(v, "findings"), i, f)
			n += strcmp(cli_jstr(f, "severity"), "info") != 0;
		char up[8];
		upper(res, up, sizeof up);
		fprintf(stderr,
			"sparkctl: topology validation: %s with %zu finding%s; apply the fixes above and "
			"run 'sparkctl topo validate' again\n",
			up, n, n == 1 ? "" : "s");
	}
	json_decref(v);
	return pass ? 0 : 1;
}

/* What the plan kept clear of (topology/addrplan.h "avoided"): each blocked
 * subnet, and once per network, a pool that lies inside a member's network. */
static void print_avoided(json_t *plan)
{
	size_t i, j;
	json_t *e, *f;
	json_t *av = json_object_get(plan, "avoided");
	json_array_foreach(av, i, e)
		if (json_is_string(json_object_get(e, "blocked")))
			printf("Kept clear of %s: %s uses %s on %s.\n", cli_jstr(e, "blocked"), cli_jstr(e, "node"),
			       cli_jstr(e, "address"), cli_jstr(e, "netdev"));
	json_array_foreach(av, i, e) {
		if (!json_is_true(json_object_get(e, "contains_pool")))
			continue;
		const char *slash = strchr(cli_jstr(e, "address"), '/'), *nd = cli_jstr(e, "netdev");
		/* one note per (prefix length, netdev): the same network on every node */
		bool first = true;
		char nodes[256] = "";
		json_array_foreach(av, j, f) {
			const char *fs = strchr(cli_jstr(f, "address"), '/');
			if (!json_is_true(json_object_get(f, "contains_pool")) || !slash || !fs ||
			    strcmp(slash, fs) != 0 || strcmp(cli_jstr(f, "netdev"), nd) != 0)
				continue;
			if (j < i)
				first = false;
			size_t off = strlen(nodes);
			snprintf(nodes + off, sizeof nodes - off, "%s%s", off ? ", " : "", cli_jstr(f, "node"));
		}
		if (first && slash)
			printf("Note: the pool %s lies inside the /%s network that %s use%s on %s: a host of that "
			       "network whose address falls in a fabric subnet is out of their reach; if there "
			       "are such hosts, set fabric.pool outside it.\n",
			       cli_jstr(plan, "pool"), slash + 1, nodes, strchr(nodes, ',') ? "" : "s", nd);
	}
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

/* "added", "kept", "would add"... for one netdev/address of a report. */
static const char *addr_state(json_t *rep, const char *netdev, const char *addr)
{
	static const char *const lists[] = {"added", "kept", "removed"};
	bool dry = json_is_true(json_object_get(rep, "dry_run"));
	for (int i = 0; i < 3; i++) {
		size_t k;
		json_t *x;
		json_array_foreach(json_object_get(rep, lists[i]), k, x)
			if (strcmp(cli_jstr(x, "netdev"), netdev) == 0 && strcmp(cli_jstr(x, "address"), addr) == 0)
				return i == 0 ? (dry ? "would add" : "added")
				       : i == 1 ? "in place"
						: (dry ? "would remove" : "removed");
	}
	size_t k;
	json_t *x;
	json_array_foreach(json_object_get(rep, "missing_netdevs"), k, x)
		if (strcmp(json_string_value(x) ? json_string_value(x) : "", netdev) == 0)
			return "netdev missing";
	return "-";
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
	json_t *d;
	if (cli_call(ctx, "topo_addresses", json_pack("{s:b}", "apply", o.apply), &d, 60000))
		return 1;
	json_t *plan = json_object_get(d, "plan");
	int ret = json_is_true(json_object_get(d, "failed")) ? 1 : 0;
	if (o.netplan) {
		const char *local = json_string_value(json_object_get(d, "local_node"));
		char *yaml = NULL;
		char err[256] = "";
		int mtu = (int)json_integer_value(json_object_get(d, "mtu"));
		if (!local || topo_addrplan_netplan(plan, local, mtu, &yaml, err, sizeof err) < 0) {
			json_decref(d);
			return cli_fail("cannot render netplan for this node: %s; is it cabled?",
					err[0] ? err : "unknown node");
		}
		int w = topo_addrplan_write_netplan(o.netplan, yaml);
		free(yaml);
		if (w < 0) {
			json_decref(d);
			return cli_fail("cannot write %s: %s", o.netplan, strerror(-w));
		}
		if (ctx->out == OUT_TABLE)
			printf("Wrote %s (mode 600) for %s; review it, then 'netplan apply'.\n\n", o.netplan,
			       local);
	}
	if (ctx->out == OUT_JSON) {
		cli_print_json(d);
		json_decref(d);
		return ret;
	}
	printf("Plan: %s, pool %s, /%lld subnets, one per twin; %s\n\n", cli_jstr(d, "class"),
	       cli_jstr(d, "pool"), (long long)json_integer_value(json_object_get(d, "prefix")),
	       json_is_true(json_object_get(d, "applied"))
		       ? "applied"
		       : "dry run: nothing changed (add --apply to apply it on every node)");
	static const char *const hdr[] = {"NODE", "PORT", "NETDEV", "ADDRESS", "PEERS", "STATE"};
	out_table *t = out_table_new(6, hdr);
	size_t i, k;
	json_t *r, *e;
	json_array_foreach(json_object_get(d, "reports"), i, r) {
		const char *node = cli_jstr(r, "node");
		json_t *rep = json_object_get(r, "report");
		json_array_foreach(json_object_get(json_object_get(plan, "nodes"), node), k, e) {
			char peers[128] = "";
			size_t m;
			json_t *p;
			json_array_foreach(json_object_get(e, "peers"), m, p) {
				size_t off = strlen(peers);
				snprintf(peers + off, sizeof peers - off, "%s%s", m ? " " : "",
					 json_string_value(p) ? json_string_value(p) : "");
			}
			const char *row[] = {node, cli_jstr(e, "port"), cli_jstr(e, "netdev"), cli_jstr(e, "address"),
					     peers[0] ? peers : "-",
					     json_is_object(rep) ? addr_state(rep, cli_jstr(e, "netdev"),
									       cli_jstr(e, "address"))
								 : cli_jstr(r, "error")};
			out_table_row(t, row);
		}
	}
	out_table_print(t, stdout);
	out_table_free(t);
	print_avoided(plan);
	json_array_foreach(json_object_get(d, "reports"), i, r) {
		json_t *rep = json_object_get(r, "report");
		if (!json_is_object(rep))
			printf("%s: %s\n", cli_jstr(r, "node"), cli_jstr(r, "error"));
		else if (json_is_string(json_object_get(rep, "message")))
			printf("%s: %s\n", cli_jstr(r, "node"), cli_jstr(rep, "message"));
	}
	fflush(stdout);
	if (ret)
		fprintf(stderr, "sparkctl: some nodes could not apply the plan (see above); check that "
				"sparkd runs there as root and try again\n");
	json_decref(d);
	return ret;
}

void cli_topo_status_line(json_t *topology)
{
	if (!json_is_object(topology)) {
		printf("Topology: not validated ('sparkctl topo validate')\n");
		return;
	}
	char age[32];
	util_fmt_age((int64_t)json_integer_value(json_object_get(topology, "age_s")), age, sizeof age);
	printf("Topology: %s %s ago%s\n", cli_jstr(topology, "summary"), age,
	       json_is_true(json_object_get(topology, "quick")) ? " (quick)" : "");
	if (json_is_true(json_object_get(topology, "stale")))
		printf("          out of date: %s; run 'sparkctl topo validate' again\n",
		       cli_jstr(topology, "stale_reason"));
}

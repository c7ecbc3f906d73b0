/* Text writers of the fabric and its topology (docs/topology.md): discover
 * and node show's port table, topo show / validate (the cable map as a table
 * and a picture, probe results, every finding with its fix), topo addresses
 * (the addressing plan), and status's topology line. */
#include "output.h"
#include "print.h"

#include "util.h"

#include <stdio.h>
#include <string.h>

#define TOPO_PIC_MAX 256

/* ---- a discovery object ----------------------------------------------------------- */

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
		out_upper(cli_jstr(p, "result"), res, sizeof res);
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
			out_upper(order[s], sev, sizeof sev);
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
	out_upper(cli_jstr(v, "result"), res, sizeof res);
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

void cli_text_discover(const struct cli_answer *a)
{
	cli_print_fabric(a->data, json_object_get(a->data, "findings"));
}

void cli_text_topo_show(const struct cli_answer *a)
{
	json_t *v = a->data;
	print_headline(v, "Topology (cabling only; 'sparkctl topo validate' also probes)");
	print_cables(v);
	print_picture(v);
	print_findings(v);
}

void cli_text_topo_validate(const struct cli_answer *a)
{
	json_t *v = a->data;
	print_headline(v, "Topology");
	print_cables(v);
	print_picture(v);
	print_probes(v);
	print_findings(v);
	print_advice(v);
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

void cli_text_topo_addresses(const struct cli_answer *a)
{
	const struct cli_topo_addresses_view *vw = a->view;
	json_t *d = a->data;
	json_t *plan = json_object_get(d, "plan");
	if (vw && vw->netplan)
		printf("Wrote %s (mode 600) for %s; review it, then 'netplan apply'.\n\n", vw->netplan,
		       cli_jstr(d, "local_node"));
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
	/* text output only, as before: -o json says it by the exit code alone */
	if (json_is_true(json_object_get(d, "failed"))) {
		fflush(stdout);
		fprintf(stderr, "sparkctl: some nodes could not apply the plan (see above); check that "
				"sparkd runs there as root and try again\n");
	}
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

/* Text writers of cluster formation and membership: init, join, leave,
 * status, version, node ls/show/drain/undrain/rm, token create/ls/revoke. */
#include "output.h"
#include "print.h"

#include "util.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

/* ---- init / join / leave ---------------------------------------------- */

void cli_text_init(const struct cli_answer *a)
{
	json_t *d = a->data;
	printf("Cluster %s initialised; this node (%s) is its head at %s.\n\n"
	       "To add a node, run on it:\n\n  %s\n\n"
	       "The token is valid for %s. Make more with 'sparkctl token create'.\n",
	       cli_jstr(d, "cluster_name"), cli_jstr(d, "head"), cli_jstr(d, "head_address"),
	       cli_jstr(d, "join_command"),
	       cli_jnum(d, "token_expires_at") ? "a limited time (see 'sparkctl token ls')"
					      : "ever (no expiry)");
}

void cli_text_join(const struct cli_answer *a)
{
	printf("Joined cluster %s as %s (head %s).\n", cli_jstr(a->data, "cluster_name"),
	       cli_jstr(a->data, "node_name"), cli_jstr(a->data, "head_address"));
}

void cli_text_leave(const struct cli_answer *a)
{
	printf("Left cluster %s; this node's certificate is revoked.\n", cli_jstr(a->data, "left"));
}

/* ---- status / nodes ------------------------------------------------------ */

static void fmt_gbps(long long mbps, char *buf, size_t len)
{
	if (mbps % 1000 == 0)
		snprintf(buf, len, "%lldG", mbps / 1000);
	else
		snprintf(buf, len, "%.1fG", (double)mbps / 1000.0);
}

/* A node's fabric summary in a few words: "2/2 up 200G mtu9000", "-" when the
 * node never reported. */
static void fmt_fabric(json_t *f, char *buf, size_t len)
{
	if (!json_is_object(f)) {
		snprintf(buf, len, "-");
		return;
	}
	if (cli_jnum(f, "ports_total") == 0) {
		snprintf(buf, len, "no ports");
		return;
	}
	char sp[24] = "", mtu[32] = "";
	json_t *s = json_object_get(f, "speed_mbps"), *m = json_object_get(f, "mtu"),
	       *mx = json_object_get(f, "mtu_max");
	if (json_is_integer(s)) {
		sp[0] = ' ';
		fmt_gbps((long long)json_integer_value(s), sp + 1, sizeof sp - 1);
	}
	if (json_is_integer(m) && json_is_integer(mx) &&
	    json_integer_value(mx) != json_integer_value(m))
		snprintf(mtu, sizeof mtu, " mtu%lld-%lld", (long long)json_integer_value(m),
			 (long long)json_integer_value(mx));
	else if (json_is_integer(m))
		snprintf(mtu, sizeof mtu, " mtu%lld", (long long)json_integer_value(m));
	snprintf(buf, len, "%lld/%lld up%s%s", cli_jnum(f, "ports_up"), cli_jnum(f, "ports_total"), sp, mtu);
}

static void print_nodes(json_t *nodes)
{
	static const char *const hdr[] = {"NAME", "STATE",  "ROLE",     "ADDRESS", "LAST SEEN",
					  "AGE",  "FABRIC", "FINDINGS", "GROUP",   "VERSION"};
	out_table *t = out_table_new(10, hdr);
	size_t i;
	json_t *n;
	json_array_foreach(nodes, i, n) {
		char name[80], seen[32], age[32];
		snprintf(name, sizeof name, "%s%s", cli_jstr(n, "name"),
			 json_is_true(json_object_get(n, "local")) ? "*" : "");
		if (strcmp(cli_jstr(n, "role"), "head") == 0)
			snprintf(seen, sizeof seen, "-");
		else {
			util_fmt_age(cli_jnum(n, "last_seen_ago_s"), seen, sizeof seen);
			strncat(seen, " ago", sizeof seen - strlen(seen) - 1);
		}
		util_fmt_age(cli_jnum(n, "age_s"), age, sizeof age);
		json_t *f = json_object_get(n, "fabric");
		char fab[64], nf[16] = "-";
		fmt_fabric(f, fab, sizeof fab);
		if (json_is_object(f))
			snprintf(nf, sizeof nf, "%lld", cli_jnum(f, "findings"));
		/* groups (issue 6): "a,b", "-" when in none */
		char grp[128] = "";
		size_t gi;
		json_t *gv;
		json_array_foreach(json_object_get(n, "groups"), gi, gv)
			snprintf(grp + strlen(grp), sizeof grp - strlen(grp), "%s%s", gi ? "," : "",
				 json_string_value(gv) ?: "");
		const char *row[] = {name, cli_jstr(n, "state"), cli_jstr(n, "role"), cli_jstr(n, "address"), seen, age,
				     fab,  nf, grp[0] ? grp : "-", cli_jstr(n, "version")};
		out_table_row(t, row);
	}
	out_table_print(t, stdout);
	out_table_free(t);
}

/* status: each group's services, "GROUP  NAME (STATE), ..." (the head keeps them
 * oldest first; a group's line gathers its own). */
static void print_services(json_t *svcs)
{
	if (!json_array_size(svcs))
		return;
	printf("\nServices:\n");
	size_t i, k;
	json_t *o, *p;
	json_array_foreach(svcs, i, o) {
		const char *g = cli_jstr(o, "group");
		bool seen = false;
		for (k = 0; k < i && !seen; k++) {
			p = json_array_get(svcs, k);
			seen = strcmp(cli_jstr(p, "group"), g) == 0;
		}
		if (seen)
			continue;
		printf("  %-12s", g);
		int n = 0;
		for (k = i; k < json_array_size(svcs); k++) {
			p = json_array_get(svcs, k);
			if (strcmp(cli_jstr(p, "group"), g) == 0)
				printf("%s%s (%s)", n++ ? ", " : "", cli_jstr(p, "name"), cli_jstr(p, "state"));
		}
		printf("\n");
	}
}

void cli_text_status(const struct cli_answer *a)
{
	json_t *d = a->data;
	json_t *cl = json_object_get(d, "cluster"), *head = json_object_get(d, "head");
	printf("Cluster:  %s (%s)\n", cli_jstr(cl, "name"), cli_jstr(cl, "id"));
	printf("Head:     %s at %s\n", cli_jstr(head, "name"), cli_jstr(head, "address"));
	json_t *link = json_object_get(d, "head_link"); /* on a worker: how it reaches the head */
	if (json_is_object(link) && strcmp(cli_jstr(link, "address"), cli_jstr(head, "address")))
		printf("Reached:  at %s (%s)\n", cli_jstr(link, "address"), cli_jstr(link, "source"));
	printf("Nodes:    %lld, %lld ready\n", cli_jnum(d, "node_count"), cli_jnum(d, "ready_count"));
	cli_topo_status_line(json_object_get(d, "topology"));
	printf("\n");
	print_nodes(json_object_get(d, "nodes"));
	print_services(json_object_get(d, "services"));
}

/* version's answer is made by the CLI: sparkctl_version, then the local
 * sparkd's own fields, or sparkd_error when it did not answer. */
void cli_text_version(const struct cli_answer *a)
{
	json_t *d = a->data;
	printf("sparkctl %s\n", cli_jstr(d, "sparkctl_version"));
	if (!json_is_string(json_object_get(d, "sparkd_error")))
		printf("sparkd   %s (role %s)\n", cli_jstr(d, "sparkd_version"), cli_jstr(d, "role"));
	else
		printf("sparkd   unavailable: %s\n", cli_jstr(d, "sparkd_error"));
}

void cli_text_node_ls(const struct cli_answer *a)
{
	print_nodes(json_object_get(a->data, "nodes"));
}

/* node show: the summary line, the twins grouped by port, the findings. */
static void print_fabric_report(json_t *d)
{
	json_t *f = json_object_get(d, "fabric"), *rep = json_object_get(d, "fabric_report");
	if (!json_is_object(f) || !json_is_object(rep)) {
		printf("Fabric:      not reported yet\n");
		return;
	}
	char sum[64], ago[32];
	fmt_fabric(f, sum, sizeof sum);
	long long age = (long long)time(NULL) - cli_jnum(rep, "updated_at");
	util_fmt_age(age > 0 ? age : 0, ago, sizeof ago);
	printf("Fabric:      %s, %lld finding%s (reported %s ago)\n\n", sum, cli_jnum(f, "findings"),
	       cli_jnum(f, "findings") == 1 ? "" : "s", ago);
	cli_print_fabric(json_object_get(rep, "discovery"), json_object_get(rep, "findings"));
}

void cli_text_node_show(const struct cli_answer *a)
{
	json_t *d = a->data;
	char joined[64], seen[64];
	out_fmt_utc(cli_jnum(d, "joined_at"), "never", joined, sizeof joined);
	out_fmt_utc(cli_jnum(d, "last_seen"), "never", seen, sizeof seen);
	printf("Name:        %s\nID:          %s\nState:       %s\nRole:        %s\n"
	       "Address:     %s\nVersion:     %s\nJoined:      %s\nLast seen:   %s\n"
	       "Connected:   %s\nCertificate: serial %s\n",
	       cli_jstr(d, "name"), cli_jstr(d, "id"), cli_jstr(d, "state"), cli_jstr(d, "role"), cli_jstr(d, "address"),
	       cli_jstr(d, "version"), joined, seen,
	       json_is_true(json_object_get(d, "connected")) ? "yes" : "no",
	       cli_jstr(d, "cert_serial"));
	json_t *mem = json_object_get(d, "mem");
	if (json_is_object(mem)) {
		const double g = 1024.0 * 1024.0 * 1024.0;
		char at[64];
		out_fmt_utc(cli_jnum(mem, "reported_at"), "never", at, sizeof at);
		printf("Memory:      %.1f GiB, %.1f GiB available, budget %.1f GiB for services "
		       "(at %s)\n",
		       (double)cli_jnum(mem, "total") / g, (double)cli_jnum(mem, "available") / g,
		       (double)cli_jnum(mem, "budget") / g, at);
	}
	print_fabric_report(d);
	json_t *ev = json_object_get(d, "events");
	if (json_array_size(ev)) {
		printf("\nRecent events:\n");
		size_t i;
		json_t *e;
		json_array_foreach(ev, i, e) {
			char ts[64];
			out_fmt_utc(cli_jnum(e, "ts"), "never", ts, sizeof ts);
			printf("  %s  %-12s %s\n", ts, cli_jstr(e, "kind"), cli_jstr(e, "detail"));
		}
	}
}

void cli_text_node_drain(const struct cli_answer *a)
{
	printf("Node %s is draining: no new jobs go to it.\n", cli_jstr(a->data, "name"));
}

void cli_text_node_undrain(const struct cli_answer *a)
{
	printf("Node %s takes jobs again.\n", cli_jstr(a->data, "name"));
}

void cli_text_node_rm(const struct cli_answer *a)
{
	printf("Node %s removed; its certificate is revoked and cannot reconnect.\n",
	       cli_jstr(a->data, "name"));
}

/* ---- tokens ---------------------------------------------------------------- */

void cli_text_token_create(const struct cli_answer *a)
{
	json_t *d = a->data;
	char exp[64];
	out_fmt_utc(cli_jnum(d, "expires_at"), "never", exp, sizeof exp);
	printf("Token %s (expires %s, %s).\nOn the new node run:\n\n  %s\n", cli_jstr(d, "id"), exp,
	       cli_jnum(a->req, "uses") ? "limited uses" : "unlimited uses",
	       cli_jstr(d, "join_command"));
}

void cli_text_token_ls(const struct cli_answer *a)
{
	static const char *const hdr[] = {"ID", "STATE", "USES", "USES LEFT", "EXPIRES",
					  "DESCRIPTION"};
	out_table *t = out_table_new(6, hdr);
	size_t i;
	json_t *k;
	json_array_foreach(json_object_get(a->data, "tokens"), i, k) {
		char uses[32], left[32], exp[64];
		snprintf(uses, sizeof uses, "%lld", cli_jnum(k, "uses"));
		if (cli_jnum(k, "uses_left") < 0)
			snprintf(left, sizeof left, "unlimited");
		else
			snprintf(left, sizeof left, "%lld", cli_jnum(k, "uses_left"));
		out_fmt_utc(cli_jnum(k, "expires_at"), "never", exp, sizeof exp);
		const char *row[] = {cli_jstr(k, "id"), cli_jstr(k, "state"), uses, left, exp,
				     cli_jstr(k, "description")};
		out_table_row(t, row);
	}
	out_table_print(t, stdout);
	out_table_free(t);
}

void cli_text_token_revoke(const struct cli_answer *a)
{
	printf("Token %s revoked.\n", cli_jstr(a->data, "id"));
}

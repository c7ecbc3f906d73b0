/* Cluster formation and membership: init, join, leave, status, version,
 * node ls/show/drain/undrain/rm, token create/ls/revoke. */
#include "cli.h"
#include "output.h"

#include "spark_config.h"
#include "token.h"
#include "util.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OPT_END CLI_OPT_END

static void reset_getopt(void) { optind = 0; }

/* --ttl DURATION: 0 (no expiry) up to UTIL_TTL_MAX_S. 0, or the usage error's code. */
static int parse_ttl(struct cli_ctx *ctx, const char *s, int64_t *ttl)
{
	int r = util_parse_duration(s, ttl);
	if (r == -EINVAL)
		return cli_usage(ctx, "--ttl: '%s' is not a duration like 30m, 24h or 7d", s);
	if (r < 0 || *ttl > UTIL_TTL_MAX_S)
		return cli_usage(ctx, "--ttl: '%s' is longer than the maximum of %lldd (10 years); "
				      "use 0 for a token that never expires", s,
				 (long long)(UTIL_TTL_MAX_S / 86400));
	return 0;
}

static int no_args(struct cli_ctx *ctx, int argc, char **argv)
{
	if (argc > 1)
		return cli_usage(ctx, "unexpected argument '%s'", argv[1]);
	return 0;
}

static void fmt_time(long long ts, char *buf, size_t len)
{
	if (ts <= 0) {
		snprintf(buf, len, "never");
		return;
	}
	time_t t = (time_t)ts;
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(buf, len, "%Y-%m-%d %H:%M:%SZ", &tm);
}

/* ---- init / join / leave ---------------------------------------------- */

int cmd_init(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {{"name", required_argument, NULL, 'n'},
					   {"advertise", required_argument, NULL, 'a'},
					   {"ttl", required_argument, NULL, 't'},
					   OPT_END};
	const char *name = NULL, *adv = NULL;
	int64_t ttl = 86400;
	int ch, rc = 0;
	reset_getopt();
	while ((ch = cli_next_opt(ctx, argc, argv, lo, &rc)) != -1) {
		if (ch == -2)
			return rc;
		if (ch == 'n')
			name = optarg;
		else if (ch == 'a')
			adv = optarg;
		else if (ch == 't' && (rc = parse_ttl(ctx, optarg, &ttl)) != 0)
			return rc;
	}
	if (optind < argc)
		return cli_usage(ctx, "unexpected argument '%s'", argv[optind]);
	if (name && !util_valid_name(name))
		return cli_usage(ctx, "--name: '%s' is not a valid cluster name (1-63 of a-z, 0-9, '-')",
				 name);
	char why[160];
	if (adv && util_check_hostport(adv, SPARK_DEFAULT_PORT, why, sizeof why) < 0)
		return cli_usage(ctx, "--advertise: '%s' is not HOST[:PORT] (%s); give the address "
				      "the other nodes reach this one at, like 169.254.1.1:%d",
				 adv, why, SPARK_DEFAULT_PORT);
	json_t *args = json_pack("{s:I}", "ttl_s", (json_int_t)ttl);
	if (name)
		json_object_set_new(args, "name", json_string(name));
	if (adv)
		json_object_set_new(args, "advertise", json_string(adv));
	json_t *d;
	if (cli_call(ctx, "init", args, &d, 60000))
		return 1;
	if (ctx->out == OUT_JSON) {
		cli_print_json(d);
	} else {
		printf("Cluster %s initialised; this node (%s) is its head at %s.\n\n"
		       "To add a node, run on it:\n\n  %s\n\n"
		       "The token is valid for %s. Make more with 'sparkctl token create'.\n",
		       cli_jstr(d, "cluster_name"), cli_jstr(d, "head"), cli_jstr(d, "head_address"),
		       cli_jstr(d, "join_command"),
		       cli_jnum(d, "token_expires_at") ? "a limited time (see 'sparkctl token ls')"
						  : "ever (no expiry)");
	}
	json_decref(d);
	return 0;
}

int cmd_join(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {{"token", required_argument, NULL, 't'},
					   {"name", required_argument, NULL, 'n'},
					   {"timeout", required_argument, NULL, 'w'},
					   OPT_END};
	const char *token = getenv("SPARKCTL_TOKEN"), *name = NULL;
	int64_t timeout = 10;
	int ch, rc = 0;
	reset_getopt();
	/* allow "join HEAD --token T" (flags after the positional) */
	while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		if (ch == 't')
			token = optarg;
		else if (ch == 'n')
			name = optarg;
		else if (ch == 'w') {
			if (util_parse_duration(optarg, &timeout) < 0 || timeout <= 0)
				return cli_usage(ctx, "--timeout: '%s' is not a duration like 10s", optarg);
		} else
			return cli_usage(ctx, "unknown or incomplete option '%s'", argv[optind - 1]);
	}
	(void)rc;
	if (optind >= argc)
		return cli_usage(ctx, "missing HEAD address");
	if (optind + 1 < argc)
		return cli_usage(ctx, "unexpected argument '%s'", argv[optind + 1]);
	if (!token || !*token)
		return cli_usage(ctx, "missing --token (printed by 'sparkctl init' or 'sparkctl token "
				      "create' on the head)");
	if (name && !util_valid_name(name))
		return cli_usage(ctx, "--name: '%s' is not a valid node name (1-63 of a-z, 0-9, '-')",
				 name);
	char why[256];
	if (util_check_hostport(argv[optind], SPARK_DEFAULT_PORT, why, sizeof why) < 0)
		return cli_usage(ctx, "HEAD: '%s' is not HOST[:PORT] (%s); copy the join command "
				      "'sparkctl init' or 'sparkctl token create' printed on the head",
				 argv[optind], why);
	struct join_token jt;
	if (token_parse(token, &jt, why, sizeof why) < 0)
		return cli_usage(ctx, "--token: %s", why);
	json_t *args = json_pack("{s:s, s:s, s:I}", "head", argv[optind], "token", token,
				 "timeout_s", (json_int_t)timeout);
	if (name)
		json_object_set_new(args, "name", json_string(name));
	json_t *d;
	if (cli_call(ctx, "join", args, &d, (unsigned)(timeout + 20) * 1000))
		return 1;
	if (ctx->out == OUT_JSON)
		cli_print_json(d);
	else
		printf("Joined cluster %s as %s (head %s).\n", cli_jstr(d, "cluster_name"),
		       cli_jstr(d, "node_name"), cli_jstr(d, "head_address"));
	json_decref(d);
	return 0;
}

int cmd_leave(struct cli_ctx *ctx, int argc, char **argv)
{
	int r = no_args(ctx, argc, argv);
	if (r)
		return r;
	json_t *d;
	if (cli_call(ctx, "leave", NULL, &d, 0))
		return 1;
	if (ctx->out == OUT_JSON)
		cli_print_json(d);
	else
		printf("Left cluster %s; this node's certificate is revoked.\n", cli_jstr(d, "left"));
	json_decref(d);
	return 0;
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

int cmd_status(struct cli_ctx *ctx, int argc, char **argv)
{
	int r = no_args(ctx, argc, argv);
	if (r)
		return r;
	json_t *d;
	if (cli_call(ctx, "status", NULL, &d, 0))
		return 1;
	if (ctx->out == OUT_JSON) {
		cli_print_json(d);
	} else {
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
	}
	json_decref(d);
	return 0;
}

int cmd_version(struct cli_ctx *ctx, int argc, char **argv)
{
	int r = no_args(ctx, argc, argv);
	if (r)
		return r;
	char *code = NULL, *msg = NULL;
	json_t *d = NULL;
	int rc = cli_call_raw(ctx, "version", NULL, &d, 5000, &code, &msg);
	if (ctx->out == OUT_JSON) {
		json_t *o = json_pack("{s:s}", "sparkctl_version", SPARK_VERSION);
		if (rc == 0)
			json_object_update(o, d);
		else
			json_object_set_new(o, "sparkd_error", json_string(msg));
		cli_print_json(o);
		json_decref(o);
	} else {
		printf("sparkctl %s\n", SPARK_VERSION);
		if (rc == 0)
			printf("sparkd   %s (role %s)\n", cli_jstr(d, "sparkd_version"), cli_jstr(d, "role"));
		else
			printf("sparkd   unavailable: %s\n", msg);
	}
	json_decref(d);
	free(code);
	free(msg);
	return 0;
}

int cmd_node_ls(struct cli_ctx *ctx, int argc, char **argv)
{
	int r = no_args(ctx, argc, argv);
	if (r)
		return r;
	json_t *d;
	if (cli_call(ctx, "node_ls", NULL, &d, 0))
		return 1;
	if (ctx->out == OUT_JSON)
		cli_print_json(d);
	else
		print_nodes(json_object_get(d, "nodes"));
	json_decref(d);
	return 0;
}

static int node_arg(struct cli_ctx *ctx, int argc, char **argv, const char **node)
{
	if (argc < 2)
		return cli_usage(ctx, "missing NODE");
	if (argc > 2)
		return cli_usage(ctx, "unexpected argument '%s'", argv[2]);
	*node = argv[1];
	return 0;
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

int cmd_node_show(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *node = NULL;
	int r = node_arg(ctx, argc, argv, &node);
	if (r)
		return r;
	json_t *d;
	if (cli_call(ctx, "node_show", json_pack("{s:s}", "node", node), &d, 0))
		return 1;
	if (ctx->out == OUT_JSON) {
		cli_print_json(d);
	} else {
		char joined[64], seen[64];
		fmt_time(cli_jnum(d, "joined_at"), joined, sizeof joined);
		fmt_time(cli_jnum(d, "last_seen"), seen, sizeof seen);
		printf("Name:        %s\nID:          %s\nState:       %s\nRole:        %s\n"
		       "Address:     %s\nVersion:     %s\nJoined:      %s\nLast seen:   %s\n"
		       "Connected:   %s\nCertificate: serial %s\n",
		       cli_jstr(d, "name"), cli_jstr(d, "id"), cli_jstr(d, "state"), cli_jstr(d, "role"), cli_jstr(d, "address"),
		       cli_jstr(d, "version"), joined, seen,
		       json_is_true(json_object_get(d, "connected")) ? "yes" : "no",
		       cli_jstr(d, "cert_serial"));
		print_fabric_report(d);
		json_t *ev = json_object_get(d, "events");
		if (json_array_size(ev)) {
			printf("\nRecent events:\n");
			size_t i;
			json_t *e;
			json_array_foreach(ev, i, e) {
				char ts[64];
				fmt_time(cli_jnum(e, "ts"), ts, sizeof ts);
				printf("  %s  %-12s %s\n", ts, cli_jstr(e, "kind"), cli_jstr(e, "detail"));
			}
		}
	}
	json_decref(d);
	return 0;
}

static int node_simple(struct cli_ctx *ctx, int argc, char **argv, const char *type,
		       const char *done_fmt)
{
	const char *node = NULL;
	int r = node_arg(ctx, argc, argv, &node);
	if (r)
		return r;
	json_t *d;
	if (cli_call(ctx, type, json_pack("{s:s}", "node", node), &d, 0))
		return 1;
	if (ctx->out == OUT_JSON)
		cli_print_json(d);
	else
		printf(done_fmt, cli_jstr(d, "name"));
	json_decref(d);
	return 0;
}

int cmd_node_drain(struct cli_ctx *ctx, int argc, char **argv)
{
	return node_simple(ctx, argc, argv, "node_drain", "Node %s is draining: no new jobs go to it.\n");
}

int cmd_node_undrain(struct cli_ctx *ctx, int argc, char **argv)
{
	return node_simple(ctx, argc, argv, "node_undrain", "Node %s takes jobs again.\n");
}

int cmd_node_rm(struct cli_ctx *ctx, int argc, char **argv)
{
	return node_simple(ctx, argc, argv, "node_rm",
			   "Node %s removed; its certificate is revoked and cannot reconnect.\n");
}

/* ---- tokens ---------------------------------------------------------------- */

int cmd_token_create(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {{"ttl", required_argument, NULL, 't'},
					   {"uses", required_argument, NULL, 'u'},
					   {"description", required_argument, NULL, 'd'},
					   OPT_END};
	int64_t ttl = 86400;
	long uses = 0;
	const char *descr = "";
	int ch, rc = 0;
	reset_getopt();
	while ((ch = cli_next_opt(ctx, argc, argv, lo, &rc)) != -1) {
		if (ch == -2)
			return rc;
		if (ch == 't' && (rc = parse_ttl(ctx, optarg, &ttl)) != 0)
			return rc;
		if (ch == 'u') {
			char *end;
			uses = strtol(optarg, &end, 10);
			if (*end || uses < 1 || uses > 1000000)
				return cli_usage(ctx, "--uses: expected a whole number from 1, got '%s'",
						 optarg);
		}
		if (ch == 'd')
			descr = optarg;
	}
	if (optind < argc)
		return cli_usage(ctx, "unexpected argument '%s'", argv[optind]);
	json_t *d;
	if (cli_call(ctx, "token_create",
		     json_pack("{s:I, s:I, s:s}", "ttl_s", (json_int_t)ttl, "uses", (json_int_t)uses,
			       "description", descr),
		     &d, 0))
		return 1;
	if (ctx->out == OUT_JSON) {
		cli_print_json(d);
	} else {
		char exp[64];
		fmt_time(cli_jnum(d, "expires_at"), exp, sizeof exp);
		printf("Token %s (expires %s, %s).\nOn the new node run:\n\n  %s\n", cli_jstr(d, "id"), exp,
		       uses ? "limited uses" : "unlimited uses", cli_jstr(d, "join_command"));
	}
	json_decref(d);
	return 0;
}

int cmd_token_ls(struct cli_ctx *ctx, int argc, char **argv)
{
	int r = no_args(ctx, argc, argv);
	if (r)
		return r;
	json_t *d;
	if (cli_call(ctx, "token_ls", NULL, &d, 0))
		return 1;
	if (ctx->out == OUT_JSON) {
		cli_print_json(d);
	} else {
		static const char *const hdr[] = {"ID", "STATE", "USES", "USES LEFT", "EXPIRES",
						  "DESCRIPTION"};
		out_table *t = out_table_new(6, hdr);
		size_t i;
		json_t *k;
		json_array_foreach(json_object_get(d, "tokens"), i, k) {
			char uses[32], left[32], exp[64];
			snprintf(uses, sizeof uses, "%lld", cli_jnum(k, "uses"));
			if (cli_jnum(k, "uses_left") < 0)
				snprintf(left, sizeof left, "unlimited");
			else
				snprintf(left, sizeof left, "%lld", cli_jnum(k, "uses_left"));
			fmt_time(cli_jnum(k, "expires_at"), exp, sizeof exp);
			const char *row[] = {cli_jstr(k, "id"), cli_jstr(k, "state"), uses, left, exp,
					     cli_jstr(k, "description")};
			out_table_row(t, row);
		}
		out_table_print(t, stdout);
		out_table_free(t);
	}
	json_decref(d);
	return 0;
}

int cmd_token_revoke(struct cli_ctx *ctx, int argc, char **argv)
{
	if (argc < 2)
		return cli_usage(ctx, "missing token ID (see 'sparkctl token ls')");
	if (argc > 2)
		return cli_usage(ctx, "unexpected argument '%s'", argv[2]);
	json_t *d;
	if (cli_call(ctx, "token_revoke", json_pack("{s:s}", "token_id", argv[1]), &d, 0))
		return 1;
	if (ctx->out == OUT_JSON)
		cli_print_json(d);
	else
		printf("Token %s revoked.\n", cli_jstr(d, "id"));
	json_decref(d);
	return 0;
}

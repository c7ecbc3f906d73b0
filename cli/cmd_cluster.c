/* Cluster formation and membership: init, join, leave, status, version,
 * node ls/show/drain/undrain/rm, token create/ls/revoke: arguments and
 * requests (the text writers are in print_cluster.c). */
#include "cli.h"

#include "spark_config.h"
#include "token.h"
#include "util.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	return cli_request(ctx, "init", args, 60000, NULL);
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
	return cli_request(ctx, "join", args, (unsigned)(timeout + 20) * 1000, NULL);
}

int cmd_leave(struct cli_ctx *ctx, int argc, char **argv)
{
	int r = no_args(ctx, argc, argv);
	if (r)
		return r;
	return cli_request(ctx, "leave", NULL, 0, NULL);
}

/* ---- status / nodes ------------------------------------------------------ */

int cmd_status(struct cli_ctx *ctx, int argc, char **argv)
{
	int r = no_args(ctx, argc, argv);
	if (r)
		return r;
	return cli_request(ctx, "status", NULL, 0, NULL);
}

/* The answer is sparkctl's own version, then the local sparkd's answer, or
 * why it gave none (exit 0 either way). */
int cmd_version(struct cli_ctx *ctx, int argc, char **argv)
{
	int r = no_args(ctx, argc, argv);
	if (r)
		return r;
	char *code = NULL, *msg = NULL;
	json_t *d = NULL;
	int rc = cli_call_raw(ctx, "version", NULL, &d, 5000, &code, &msg);
	json_t *o = json_pack("{s:s}", "sparkctl_version", SPARK_VERSION);
	if (rc == 0)
		json_object_update(o, d);
	else
		json_object_set_new(o, "sparkd_error", json_string(msg));
	cli_output(ctx, NULL, o, NULL);
	json_decref(o);
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
	return cli_request(ctx, "node_ls", NULL, 0, NULL);
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

int cmd_node_show(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *node = NULL;
	int r = node_arg(ctx, argc, argv, &node);
	if (r)
		return r;
	return cli_request(ctx, "node_show", json_pack("{s:s}", "node", node), 0, NULL);
}

/* drain, undrain, rm: NODE as {"node": NODE}. */
static int node_simple(struct cli_ctx *ctx, int argc, char **argv, const char *type)
{
	const char *node = NULL;
	int r = node_arg(ctx, argc, argv, &node);
	if (r)
		return r;
	return cli_request(ctx, type, json_pack("{s:s}", "node", node), 0, NULL);
}

int cmd_node_drain(struct cli_ctx *ctx, int argc, char **argv)
{
	return node_simple(ctx, argc, argv, "node_drain");
}

int cmd_node_undrain(struct cli_ctx *ctx, int argc, char **argv)
{
	return node_simple(ctx, argc, argv, "node_undrain");
}

int cmd_node_rm(struct cli_ctx *ctx, int argc, char **argv)
{
	return node_simple(ctx, argc, argv, "node_rm");
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
	return cli_request(ctx, "token_create",
			   json_pack("{s:I, s:I, s:s}", "ttl_s", (json_int_t)ttl, "uses",
				     (json_int_t)uses, "description", descr),
			   0, NULL);
}

int cmd_token_ls(struct cli_ctx *ctx, int argc, char **argv)
{
	int r = no_args(ctx, argc, argv);
	if (r)
		return r;
	return cli_request(ctx, "token_ls", NULL, 0, NULL);
}

int cmd_token_revoke(struct cli_ctx *ctx, int argc, char **argv)
{
	if (argc < 2)
		return cli_usage(ctx, "missing token ID (see 'sparkctl token ls')");
	if (argc > 2)
		return cli_usage(ctx, "unexpected argument '%s'", argv[2]);
	return cli_request(ctx, "token_revoke", json_pack("{s:s}", "token_id", argv[1]), 0, NULL);
}

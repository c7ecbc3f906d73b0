/* The command table: every sparkctl command, its handler and its help.
 * Handlers live in cmd_<area>.c. Keep groups together; order is help order. */
#include "cli.h"

#include <stddef.h>

/* cmd_cluster.c */
int cmd_init(struct cli_ctx *, int, char **);
int cmd_join(struct cli_ctx *, int, char **);
int cmd_leave(struct cli_ctx *, int, char **);
int cmd_status(struct cli_ctx *, int, char **);
int cmd_version(struct cli_ctx *, int, char **);
int cmd_node_ls(struct cli_ctx *, int, char **);
int cmd_node_show(struct cli_ctx *, int, char **);
int cmd_node_drain(struct cli_ctx *, int, char **);
int cmd_node_undrain(struct cli_ctx *, int, char **);
int cmd_node_rm(struct cli_ctx *, int, char **);
int cmd_token_create(struct cli_ctx *, int, char **);
int cmd_token_ls(struct cli_ctx *, int, char **);
int cmd_token_revoke(struct cli_ctx *, int, char **);
/* @@extern-decls: areas add their handler declarations above this line */

const struct cli_cmd cli_commands[] = {
	{NULL, "init", cmd_init, "init [--name CLUSTER] [--advertise ADDR[:PORT]] [--ttl D]",
	 "make the local sparkd the head of a new cluster and print the join command",
	 "  --name CLUSTER        cluster name (default: spark)\n"
	 "  --advertise ADDR:PORT address workers use to reach this head (default: the listen address)\n"
	 "  --ttl D               lifetime of the first join token (default 24h)\n"},
	{NULL, "join", cmd_join, "join HEAD[:PORT] --token TOKEN [--name NODE]",
	 "join the local sparkd to the cluster whose head is HEAD",
	 "  --token TOKEN   the token printed by 'sparkctl init' or 'sparkctl token create'\n"
	 "  --name NODE     this node's name in the cluster (default: the host name)\n"},
	{NULL, "leave", cmd_leave, "leave", "leave the cluster (a worker); its certificate is revoked",
	 NULL},
	{NULL, "status", cmd_status, "status [-o table|json]",
	 "the cluster, its head and every node with its state", NULL},
	{NULL, "version", cmd_version, "version [-o table|json]",
	 "versions of sparkctl and of the local sparkd", NULL},
	{"node", "ls", cmd_node_ls, "node ls [-o table|json]", "list the cluster's nodes", NULL},
	{"node", "show", cmd_node_show, "node show NODE [-o table|json]", "one node in detail", NULL},
	{"node", "drain", cmd_node_drain, "node drain NODE", "take a node out of scheduling", NULL},
	{"node", "undrain", cmd_node_undrain, "node undrain NODE", "put a drained node back",
	 NULL},
	{"node", "rm", cmd_node_rm, "node rm NODE",
	 "remove a node from the cluster and revoke its certificate", NULL},
	{"token", "create", cmd_token_create, "token create [--ttl D] [--uses N] [--description TEXT]",
	 "make a join token and print the join command",
	 "  --ttl D        lifetime: 30m, 24h, 7d, or 0 for no expiry (default 24h)\n"
	 "  --uses N       how many joins it allows (default: unlimited)\n"
	 "  --description  a note shown by 'token ls'\n"},
	{"token", "ls", cmd_token_ls, "token ls [-o table|json]", "list join tokens (never their secrets)",
	 NULL},
	{"token", "revoke", cmd_token_revoke, "token revoke ID", "revoke a join token", NULL},
	/* @@table-entries: areas add their rows above this line */
	{NULL, NULL, NULL, NULL, NULL, NULL},
};

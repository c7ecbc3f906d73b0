/* recipe: how a model server is started on a group (issue 19, docs/serve.md).
 *
 * A recipe is a YAML file (common/cfg: libyaml) naming a runtime (vllm,
 * sglang, llamacpp, trtllm, spark-decode, or command), the model, the layout
 * (tp/pp or nodes), the HTTP port, extra engine flags, environment, health
 * check, memory and restart policy. recipe_parse() reads and validates one;
 * every error names the file, line and column of the key at fault (block
 * YAML; a flow-style mapping gives the file and the key only).
 *
 * recipe_render() turns a recipe and a group layout (members in rank order
 * with the address the others reach each at, its socket interface and RDMA
 * devices, the topology) into every member's argv and environment: the
 * engines' own multi-node command lines. Pure: no I/O, no cluster state.
 *
 * The built-in recipes are YAML files (models/recipes/NAME.yaml) compiled in
 * and installed to share/sparkctl/recipes: the same format a user writes, so
 * the same parser checks them and a user copies one to start their own.
 *
 * Functions return 0 or a negative errno; err receives one line for a
 * person. */
#ifndef SPARK_RECIPE_H
#define SPARK_RECIPE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define RECIPE_ERR_LEN 320
#define RECIPE_MAX_NODES 8
#define RECIPE_MAX_ARGS 64
#define RECIPE_MAX_ENV 64
#define RECIPE_MAX_TEXT (256 * 1024) /* a recipe file is at most this long */

enum recipe_runtime {
	RECIPE_VLLM = 0,
	RECIPE_SGLANG,
	RECIPE_LLAMACPP,
	RECIPE_TRTLLM,
	RECIPE_SPARK_DECODE,
	RECIPE_COMMAND,
	RECIPE_RUNTIMES
};

enum recipe_restart { RECIPE_RESTART_ON_FAILURE = 0, RECIPE_RESTART_ALWAYS, RECIPE_RESTART_NEVER };

/* Defaults (docs/serve.md says why). */
#define RECIPE_HEALTH_INTERVAL_S 10
#define RECIPE_HEALTH_TIMEOUT_S 5
#define RECIPE_STARTUP_TIMEOUT_S 3600 /* first boots compile for 30+ minutes */
#define RECIPE_RESTART_LIMIT 5
#define RECIPE_BACKOFF_S 10
#define RECIPE_BACKOFF_MAX_S 300
#define RECIPE_MASTER_PORT 29500
#define RECIPE_RPC_PORT 50052 /* llama.cpp rpc-server's default */

typedef struct recipe {
	char name[64];
	char description[160];
	enum recipe_runtime runtime;
	char model[512];
	int tp, pp, nodes;         /* 0 = from the group (tp = nodes / pp, pp = 1) */
	int port;                  /* HTTP port of rank 0 */
	int master_port;           /* rendezvous (torch.distributed, SGLang, spark-decode) */
	int rpc_port;              /* llama.cpp rpc-server */
	char *args[RECIPE_MAX_ARGS];         /* extra engine flags, on every rank */
	size_t n_args;
	char *command[RECIPE_MAX_ARGS];      /* runtime command: argv template */
	size_t n_command;
	char *env_key[RECIPE_MAX_ENV], *env_val[RECIPE_MAX_ENV];
	size_t n_env;
	char health_path[128];
	int health_interval_s, health_timeout_s, startup_timeout_s;
	double memory_gib;         /* per node; 0 = let the planner compute it */
	char dtype[16];            /* planner: weights' type ("" = the model's own) */
	long long context;         /* planner: tokens per sequence (0 = its default) */
	enum recipe_restart restart;
	int restart_limit, backoff_s, backoff_max_s;
} recipe_t;

const char *recipe_runtime_name(enum recipe_runtime r);
int recipe_runtime_parse(const char *s, enum recipe_runtime *out);
const char *recipe_restart_name(enum recipe_restart r);

/* Parse and validate recipe text. file names it in messages. sets are
 * "key=value" overrides (sparkctl serve --set) applied before validation:
 * a scalar key (tp, port, model, health.path, restart.limit...) or env.NAME.
 * On success the recipe owns allocated strings: recipe_free(). */
int recipe_parse(const char *file, const char *text, size_t len, const char *const *sets,
		 size_t n_sets, recipe_t *r, char *err, size_t errlen);
int recipe_load(const char *path, const char *const *sets, size_t n_sets, recipe_t *r,
		char *err, size_t errlen);
void recipe_free(recipe_t *r);
/* The recipe as JSON (recipe show -o json). */
json_t *recipe_json(const recipe_t *r);

/* Built-in recipes: name and YAML text; NULL past the end. */
typedef struct recipe_builtin {
	const char *name;
	const char *text;
} recipe_builtin_t;
const recipe_builtin_t *recipe_builtin_at(size_t i);
const recipe_builtin_t *recipe_builtin_find(const char *name);

/* ---- rendering --------------------------------------------------------- */

typedef struct recipe_member {
	char name[64];
	char addr[64];      /* the address every other member reaches this one at */
	char mgmt_addr[64]; /* its management (agent) address */
	char ifname[32];    /* netdev carrying addr ("" unknown) */
	char ifnames[128];  /* NCCL/UCX socket netdevs, ifname first ("" = ifname) */
	char hcas[256];     /* RDMA devices, comma list ("" none) */
} recipe_member_t;

typedef struct recipe_layout {
	const char *group;
	const char *topology;  /* "ring" | "switch" (pair: "switch"), or NULL */
	const char *net;       /* "fabric" | "management": what addr is */
	size_t n;
	recipe_member_t m[RECIPE_MAX_NODES];
} recipe_layout_t;

/* The plan: {recipe, runtime, model, group, topology, net, nodes, tp, pp,
 * port, master_addr, master_port, endpoint {url, management_url}, health
 * {url, path, interval_s, timeout_s, startup_timeout_s}, restart {...},
 * ranks [{rank, node, role, argv, env}]}. A rank that mpirun starts has
 * "argv": null. -EINVAL with err when the layout does not suit the recipe
 * (tp x pp != nodes, more nodes than the group, pp on a runtime without it). */
int recipe_render(const recipe_t *r, const recipe_layout_t *l, json_t **out, char *err,
		  size_t errlen);

/* The placeholders a command template may use, NULL-terminated. */
extern const char *const recipe_placeholders[];

#endif

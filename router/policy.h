/* policy: spark-router's YAML policy (through common/cfg), validated into
 * plain structs. A policy names targets (an external URL with an API key from
 * the environment, or a cluster service followed live: cluster.h) and routes (the model names clients
 * send), each of a type: passthrough, weighted, rules. Every error names the
 * file, line and column of the value at fault. The policy is immutable after
 * policy_parse; the router swaps whole policies. Reference: docs/router.md. */
#ifndef SPARK_ROUTER_POLICY_H
#define SPARK_ROUTER_POLICY_H

#include "rx.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define POLICY_MAX_TARGETS 64
#define POLICY_MAX_ROUTES 64
#define POLICY_MAX_RULES 64
#define POLICY_MAX_LIST 16 /* keywords, models, weighted targets, fallbacks, api keys */
#define POLICY_NAME_MAX 64
#define POLICY_SERVICE_OWNER "root" /* whose service a service: target follows by default */

enum target_kind { TARGET_URL, TARGET_SERVICE };

struct target {
	char name[POLICY_NAME_MAX];
	enum target_kind kind;
	char *url;          /* TARGET_URL: base URL, e.g. http://127.0.0.1:8001/v1 */
	char *service;      /* TARGET_SERVICE: cluster service name (issue 19) */
	char *owner;        /* TARGET_SERVICE: the user the service must belong to
			     * (owner:, else the policy's owner:, else
			     * POLICY_SERVICE_OWNER; "*": anyone) */
	char *api_key_env;  /* environment variable holding the upstream key, or NULL */
	char *model;        /* model name sent upstream instead of the client's, or NULL */
	int max_concurrency; /* 0: no limit */
	int queue;           /* requests waiting beyond max_concurrency */
	int queue_timeout_ms;
	int connect_timeout_ms;
	int timeout_ms;      /* the whole upstream exchange */
	int stall_timeout_ms; /* no byte from the upstream this long (whole seconds): it stalled */
	int weight;          /* default weight in weighted routes */
	int cooldown_after;  /* consecutive failures that cool the target down (0: never) */
	int cooldown_s;      /* how long a cooled target is skipped */
	bool management;     /* TARGET_SERVICE: use the endpoint's management_url, not url */
	long long max_context; /* the context window in tokens, 0: unknown (a service's
			        * record, when it has one, overrides it) */
};

enum route_type { ROUTE_PASSTHROUGH, ROUTE_WEIGHTED, ROUTE_RULES, ROUTE_CLASSIFIER };

enum classifier_answer { ANSWER_TARGET, ANSWER_P_SOLVE };

/* How a route keeps a conversation on one target: not at all, by the
 * session header, or by the header else a hash of the first messages. */
enum sticky { STICKY_OFF, STICKY_HEADER, STICKY_HASH };

enum text_scope { SCOPE_LAST_USER, SCOPE_SYSTEM, SCOPE_ANY };

/* One rule's conditions; all present ones must hold (AND). */
struct cond {
	long long min_tokens, max_tokens; /* -1: absent */
	long long min_chars, max_chars;
	int tools;                        /* -1 absent, 0 must be absent, 1 must be present */
	int images;
	enum text_scope scope;            /* what keywords and regex look at */
	char *keywords[POLICY_MAX_LIST];  /* any one, case-insensitive substring */
	size_t n_keywords;
	bool has_regex;
	struct rx *regex;                 /* case-insensitive, bounded (rx.h) */
	char *models[POLICY_MAX_LIST];    /* requested model name is one of these */
	size_t n_models;
	char *header_name;                /* header present (and equal to header_value) */
	char *header_value;
};

struct rule {
	char name[POLICY_NAME_MAX];
	struct cond when;
	int target;                       /* index into policy targets */
};

struct route {
	char name[POLICY_NAME_MAX];
	enum route_type type;
	char *aliases[POLICY_MAX_LIST];   /* other model names that select this route */
	size_t n_aliases;
	int target;                       /* passthrough target; rules default */
	int wtargets[POLICY_MAX_LIST];    /* weighted */
	int weights[POLICY_MAX_LIST];
	size_t n_wtargets;
	bool has_seed;
	uint64_t seed;
	struct rule rules[POLICY_MAX_RULES];
	size_t n_rules;
	int fallbacks[POLICY_MAX_LIST];   /* tried in order before the first byte reaches the client */
	size_t n_fallbacks;
	/* classifier: ask the judge target; target (the default) when its answer
	 * is invalid, late or failed. Candidates are wtargets[] (answer: target). */
	int judge;
	char *prompt;                     /* template: {{message}}, {{system}}, {{targets}} */
	enum classifier_answer answer;
	int strong, weak;                 /* answer: p_solve */
	double threshold;                 /* p_solve >= threshold: weak */
	int judge_timeout_ms;
	int judge_max_tokens;
	enum sticky sticky;
};

#define POLICY_SERVICES_GRACE_S 60 /* services_grace_s unless set */

struct policy {
	char *path;
	char *listen;                     /* "127.0.0.1:4000" unless set */
	char *api_keys[POLICY_MAX_LIST];  /* bearer tokens clients must send (resolved values) */
	size_t n_api_keys;
	char *log_path;                   /* JSON-lines routing log, or NULL */
	long long max_body_bytes;
	int max_connections;
	int idle_timeout_s;
	int services_grace_s;             /* sparkd gone: service targets route by the last
					   * snapshot this long (0: unusable at once) */
	char *default_route;              /* route for unknown model names, or NULL (404) */
	bool management;                  /* network: management (the default for service targets) */
	char *service_owner;              /* owner: the default owner of service targets, or NULL
					   * (POLICY_SERVICE_OWNER) */
	char *session_header;             /* "x-session-id" unless set */
	int session_ttl_s;
	int max_sessions;
	struct target targets[POLICY_MAX_TARGETS];
	size_t n_targets;
	struct route routes[POLICY_MAX_ROUTES];
	size_t n_routes;
};

/* Parse and validate policy text (name is used in messages). Environment
 * variables named by api key entries are read now (getenv). 0 with *out, or
 * -EINVAL with err = "FILE:LINE:COL: what is wrong". */
int policy_parse(const char *name, const char *text, size_t len, struct policy **out, char *err,
		 size_t errlen);
int policy_load(const char *path, struct policy **out, char *err, size_t errlen);
void policy_free(struct policy *p);

/* Route for a requested model name (route name or alias), or NULL. */
const struct route *policy_route(const struct policy *p, const char *model);
int policy_target_index(const struct policy *p, const char *name);

const char *route_type_name(enum route_type t);
/* Is path a place for the routing log (log:, --log)? "-" (stdout) is;
 * anything under /proc, /sys or /dev (also through a symbolic link), and an
 * existing file that is not a regular file, are not: -EINVAL with why. */
int policy_log_path_check(const char *path, char *why, size_t whylen);
bool policy_has_service_targets(const struct policy *p);
/* Does a service owned by owner (as svc_watch says) count for service target tg? */
bool policy_owner_ok(const struct target *tg, const char *owner);

#endif

/* decide: what the router knows of a request and where it goes. Pure: no
 * I/O, no clock; the caller passes the headers (a lookup function) and the
 * random state of weighted routes. req_parse reads an OpenAI request body
 * (chat completions or completions); route_decide applies a policy to it:
 * the route is the requested model's, a rules route's first matching rule
 * wins, else its default. decision_json explains a decision. */
#ifndef SPARK_ROUTER_DECIDE_H
#define SPARK_ROUTER_DECIDE_H

#include "policy.h"
#include "services.h"

#include <jansson.h>

enum req_kind { REQ_CHAT, REQ_COMPLETIONS };

struct req_info {
	enum req_kind kind;
	const char *model;     /* points into the parsed body */
	long long chars;       /* code points of all prompt text */
	long long tokens;      /* estimated: ceil(chars / 4) */
	bool tools, images, stream;
	char *last_user;       /* text of the last user message (completions: the prompt) */
	char *system;          /* text of the system/developer messages */
};

/* Parse and check a request body (at most len bytes, need not be NUL-terminated).
 * 0 with *out filled and *body the parsed JSON (the caller keeps it while
 * *out is used, and frees both), or -EINVAL with an OpenAI-style message
 * ("'messages' must be a non-empty array") in err. */
int req_parse(const char *text, size_t len, enum req_kind kind, struct req_info *out,
	      json_t **body, char *err, size_t errlen);
void req_info_free(struct req_info *r);

/* Value of a request header (case-insensitive name), or NULL. */
typedef const char *(*header_fn)(void *ctx, const char *name);

#define DECISION_MAX_CHAIN (1 + POLICY_MAX_LIST)

struct decision {
	const struct route *route;
	int target;                         /* the chosen target */
	char rule[POLICY_NAME_MAX];         /* rule name, "default", "passthrough", "weighted" */
	char reason[256];                   /* for people: why this target */
	int chain[DECISION_MAX_CHAIN];      /* target, then the route's fallbacks (no repeats) */
	size_t n_chain;
	bool pending;                       /* classifier route: ask the judge, then classifier_pick */
	int regex_limited;                  /* regex matches that hit a limit (rx.h): no match */
	char regex_limited_rule[POLICY_NAME_MAX]; /* the first rule where one did */
};

/* Next random number of a weighted route (splitmix64 over *state). */
uint64_t decide_rand(uint64_t *state);

/* Decide. rng is this route's state (see decide_rand), used by weighted
 * routes only. 0, or -ENOENT when no route has the requested model name
 * (and the policy has no default_route). */
int route_decide(const struct policy *p, const struct req_info *r, header_fn hdr, void *hctx,
		 uint64_t *rng, struct decision *d);
/* The same, knowing the services (svcs, may be NULL): a weighted draw leaves
 * out service targets that are not usable now, unless none is usable. */
int route_decide_live(const struct policy *p, const struct req_info *r, header_fn hdr, void *hctx,
		      uint64_t *rng, const struct svc_table *svcs, struct decision *d);
/* Does a rule's condition hold (exported for the tests)? */
bool cond_match(const struct cond *c, const struct req_info *r, header_fn hdr, void *hctx);
/* Is rt a rules route with a regex: condition? Deciding on it may take up
 * to the regex limits' time (docs/router.md): the server decides it off its
 * event loop. route_decide touches nothing but its arguments, the policy and
 * req_info read-only, so it may run in another thread while nothing
 * changes them (hdr must then be a lookup of the caller's own copy). */
bool route_has_regex(const struct route *rt);

/* Classifier routes. classifier_body: the chat completion request for the
 * judge (the route's prompt with {{message}}, {{system}} and {{targets}}
 * filled in; the judge target's model: or "classifier"), malloc'd.
 * classifier_pick: read the judge's answer (an OpenAI chat completion whose
 * message content is, or contains, a JSON object {"target": NAME} or
 * {"p_solve": X}) and settle d on its target; any other answer, an HTTP
 * status other than 200 or a failed call (body NULL, why says what) settles
 * d on the route's default. 0 when the judge's answer was used, -EINVAL not. */
char *classifier_body(const struct policy *p, const struct route *rt, const struct req_info *r);
int classifier_pick(const struct policy *p, const char *body, size_t len, long status,
		    const char *why, struct decision *d);

/* Settle d on target t of route rt for a conversation pinned there (rule
 * "session"), with the route's fallbacks after it. */
void decision_pin(const struct policy *p, const struct route *rt, int t, struct decision *d);

/* Does an upstream's error body say the prompt is too long for its context
 * window (vLLM, SGLang, llama.cpp and OpenAI phrasings)? */
bool is_context_error(const char *body, size_t len);

/* The token counts of an upstream answer or stream chunk's top-level "usage"
 * object ({"prompt_tokens": N, "completion_tokens": N}): 0 with both set (0
 * for a count that is absent, not a positive integer or absurd: 2^40 or
 * more), or -ENOENT (nothing set) when there is no such object. When the
 * text ends with a "usage":{...} member (where OpenAI, vLLM, SGLang and
 * llama.cpp put it) only that object is parsed; anything else is parsed whole. */
int usage_read(const char *text, size_t len, long long *prompt, long long *completion);

/* What a target is right now: a URL target always usable at its url:; a
 * service target (looked up in svcs, the last svc_watch snapshot, NULL when
 * the router follows none) usable only while its service is ready with an
 * endpoint on the target's network. */
struct resolved {
	bool usable;
	const char *state;           /* "url"; a service's state, "absent" (not in the
				      * snapshot), "disconnected" (no snapshot) or
				      * "other_owner" (the service belongs to another
				      * user than the target's owner:) */
	const char *owner;           /* the service's owner when the snapshot has it */
	char base[SVC_URL_MAX + 8];  /* the OpenAI base URL (.../v1) when usable */
	const char *model;           /* the model name sent upstream, NULL: the client's */
	long long max_context;       /* tokens, 0: unknown */
};
void target_resolve(const struct policy *p, int t, const struct svc_table *svcs,
		    struct resolved *out);
/* The service a service target follows in svcs: the one of its name, when
 * it belongs to the target's owner (policy_owner_ok); else NULL. */
const struct svc_info *target_service(const struct target *tg, const struct svc_table *svcs);

/* {"route", "route_type", "target", "target_kind", "rule", "reason",
 *  "fallbacks": [...], "resolvable", "max_context"?, and for a service target
 *  "service", "owner" (the one the target requires), "service_owner"? (the
 *  service's), "state", "url"? and a "note" when it is not resolvable}. */
json_t *decision_json(const struct policy *p, const struct decision *d,
		      const struct svc_table *svcs);

#endif

/* spark-router's policy parser and routing decisions (router/policy.c, router/decide.c). */
#include "decide.h"
#include "policy.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *GOOD =
	"targets:\n"
	"  big:\n"
	"    url: http://127.0.0.1:8001/v1/\n"
	"    max_concurrency: 4\n"
	"  small:\n"
	"    url: http://127.0.0.1:8002/v1\n"
	"    weight: 3\n"
	"  pool:\n"
	"    service: qwen-small\n"
	"routes:\n"
	"  auto:\n"
	"    type: rules\n"
	"    aliases: [gpt-4o]\n"
	"    rules:\n"
	"      - name: long\n"
	"        when: {min_tokens: 100}\n"
	"        target: big\n"
	"      - name: tools\n"
	"        when: {tools: true}\n"
	"        target: big\n"
	"      - name: images\n"
	"        when: {images: true}\n"
	"        target: big\n"
	"      - name: proof\n"
	"        when: {keywords: [theorem, Prove], in: last_user}\n"
	"        target: big\n"
	"      - name: code\n"
	"        when: {regex: 'def [a-z_]+\\(', in: any}\n"
	"        target: big\n"
	"      - name: pirate\n"
	"        when: {keywords: [pirate], in: system}\n"
	"        target: pool\n"
	"      - name: gold\n"
	"        when: {header: {name: x-tier, value: gold}}\n"
	"        target: big\n"
	"      - name: alias\n"
	"        when: {model: gpt-4o, max_chars: 5}\n"
	"        target: big\n"
	"    default: small\n"
	"    fallbacks: [big, small]\n"
	"  fast:\n"
	"    type: passthrough\n"
	"    target: small\n"
	"  split:\n"
	"    type: weighted\n"
	"    seed: 42\n"
	"    targets: [big, {target: small, weight: 3}]\n";

static struct policy *load(const char *text)
{
	char err[512] = "";
	struct policy *p = NULL;
	int r = policy_parse("p.yaml", text, strlen(text), &p, err, sizeof err);
	cr_assert_eq(r, 0, "policy refused: %s", err);
	return p;
}

/* The error for a bad policy; asserts it was refused. */
static char *refuse(const char *text)
{
	static char err[512];
	err[0] = 0;
	struct policy *p = NULL;
	int r = policy_parse("p.yaml", text, strlen(text), &p, err, sizeof err);
	cr_assert_lt(r, 0, "policy accepted: %s", text);
	cr_assert_null(p);
	return err;
}

struct hdrs {
	const char *name, *value;
};

static const char *get_hdr(void *ctx, const char *name)
{
	struct hdrs *h = ctx;
	return h && h->name && !strcasecmp(h->name, name) ? h->value : NULL;
}

/* Decide for a chat body; returns the rule and sets *target to its name. */
static const char *decide(struct policy *p, const char *body, struct hdrs *h, const char **target)
{
	struct req_info ri;
	json_t *j;
	char err[256];
	int r = req_parse(body, strlen(body), REQ_CHAT, &ri, &j, err, sizeof err);
	cr_assert_eq(r, 0, "request refused: %s", err);
	static struct decision d;
	uint64_t rng = 1;
	r = route_decide(p, &ri, get_hdr, h, &rng, &d);
	cr_assert_eq(r, 0);
	*target = p->targets[d.target].name;
	req_info_free(&ri);
	json_decref(j);
	return d.rule;
}

Test(policy, parses_a_full_policy)
{
	struct policy *p = load(GOOD);
	cr_assert_eq(p->n_targets, 3);
	cr_assert_eq(p->n_routes, 3);
	cr_assert_str_eq(p->listen, "127.0.0.1:4000");
	cr_assert_str_eq(p->targets[0].url, "http://127.0.0.1:8001/v1"); /* slash trimmed */
	cr_assert_eq(p->targets[0].max_concurrency, 4);
	cr_assert_eq(p->targets[0].cooldown_after, 3); /* defaults */
	cr_assert_eq(p->targets[0].cooldown_s, 10);
	cr_assert_eq(p->targets[2].kind, TARGET_SERVICE);
	cr_assert(policy_has_service_targets(p));
	const struct route *r = policy_route(p, "gpt-4o");
	cr_assert_not_null(r);
	cr_assert_str_eq(r->name, "auto");
	cr_assert_eq(r->n_rules, 8);
	cr_assert_eq(r->n_fallbacks, 2);
	cr_assert_null(policy_route(p, "nope"));
	policy_free(p);
}

Test(policy, errors_name_file_line_and_column)
{
	/* an unknown target, four lines down */
	char *e = refuse("targets:\n  a: {url: http://127.0.0.1:1}\nroutes:\n  r:\n    type: passthrough\n    target: b\n");
	cr_assert_str_eq(e, "p.yaml:6:13: routes.r.target: unknown target \"b\"", "%s", e);
	/* a YAML syntax error comes from common/cfg with its position */
	e = refuse("targets: [a\n");
	cr_assert(strncmp(e, "p.yaml:", 7) == 0, "%s", e);
	/* a typo'd key */
	e = refuse("targets:\n  a: {url: http://127.0.0.1:1, max_concurency: 3}\nroutes:\n  r: {type: passthrough, target: a}\n");
	cr_assert(strstr(e, "p.yaml:2:") && strstr(e, "max_concurency: unknown key"), "%s", e);
	/* a bad regex names the rule's regex */
	e = refuse("targets:\n  a: {url: http://x:1}\nroutes:\n  r:\n    type: rules\n    default: a\n"
		   "    rules:\n      - when: {regex: 'a(('}\n        target: a\n");
	cr_assert(strstr(e, "p.yaml:8:") && strstr(e, "routes.r.rules.0.when.regex"), "%s", e);
}

Test(policy, refuses_what_makes_no_sense)
{
	const char *T = "targets:\n  a: {url: http://127.0.0.1:1}\n";
	char buf[1024];
#define BAD(routes, needle)                                                        \
	do {                                                                       \
		snprintf(buf, sizeof buf, "%sroutes:\n%s", T, routes);             \
		char *e_ = refuse(buf);                                            \
		cr_assert(strstr(e_, needle), "for %s: got %s", routes, e_);      \
	} while (0)
	BAD("  r: {type: magic, target: a}\n", "expected passthrough, weighted, rules or classifier");
	BAD("  r: {type: passthrough}\n", "expected the name of a target");
	BAD("  r: {type: passthrough, target: a, seed: 3}\n", "not used by a passthrough");
	BAD("  r: {type: weighted, targets: [{target: a, weight: 0}]}\n", "add up to 0");
	BAD("  r: {type: weighted, targets: [a], seed: -1}\n", "expected an integer");
	BAD("  r: {type: rules, rules: [{when: {tools: true}, target: a}]}\n", "default: expected the name");
	BAD("  r: {type: rules, default: a, rules: [{target: a}]}\n", "when: is missing");
	BAD("  r: {type: rules, default: a, rules: [{when: {min_tokens: 5, max_tokens: 2}, target: a}]}\n",
	    "below min_tokens");
	BAD("  r: {type: rules, default: a, rules: [{when: {in: system}, target: a}]}\n",
	    "applies to keywords");
	BAD("  r: {type: rules, default: a, rules: [{when: {tools: maybe}, target: a}]}\n",
	    "expected true or false");
	BAD("  r: {type: rules, default: a, rules: [{name: x, when: {tools: true}, target: a}, "
	    "{name: x, when: {tools: false}, target: a}]}\n",
	    "comes before");
	BAD("  r: {type: passthrough, target: a, aliases: [s]}\n  s: {type: passthrough, target: a}\n",
	    "already names route");
	BAD("  r: {type: classifier, targets: [a], default: a}\n", "classifier: expected the name of a target");
	BAD("  r: {type: classifier, classifier: a, default: a}\n", "expected a list of 1-16 candidate");
	BAD("  r: {type: classifier, classifier: a, targets: [a], default: a, strong: a}\n", "answer: target takes targets:");
	BAD("  r: {type: classifier, classifier: a, answer: p_solve, strong: a, default: a}\n", "weak: expected the name");
	BAD("  r: {type: classifier, classifier: a, answer: p_solve, strong: a, weak: a, threshold: 2, default: a}\n",
	    "threshold: expected a number from 0 to 1");
	BAD("  r: {type: classifier, classifier: a, answer: vibes, default: a}\n", "expected target or p_solve");
	BAD("  r: {type: passthrough, target: a, prompt: hi}\n", "only classifier routes take this");
	BAD("  r: {type: passthrough, target: a, fallbacks: [zz]}\n", "unknown target \"zz\"");
	/* targets */
	char *e = refuse("targets:\n  a: {url: ftp://x}\nroutes:\n  r: {type: passthrough, target: a}\n");
	cr_assert(strstr(e, "http:// or https://"), "%s", e);
	e = refuse("targets:\n  a: {url: http://x:1, service: s}\nroutes:\n  r: {type: passthrough, target: a}\n");
	cr_assert(strstr(e, "exactly one of url: and service:"), "%s", e);
	e = refuse("targets:\n  a: {url: http://x:1, max_concurrency: lots}\nroutes:\n  r: {type: passthrough, target: a}\n");
	cr_assert(strstr(e, "2:") && strstr(e, "expected an integer"), "%s", e);
	e = refuse("routes:\n  r: {type: passthrough, target: a}\n");
	cr_assert(strstr(e, "targets"), "%s", e);
	e = refuse("targets:\n  a: {url: http://x:1}\n");
	cr_assert(strstr(e, "routes"), "%s", e);
	e = refuse("listen: '0.0.0.0'\ntargets:\n  a: {url: http://x:1}\nroutes:\n  r: {type: passthrough, target: a}\n");
	cr_assert(strstr(e, "p.yaml:1:9: listen:"), "%s", e);
	e = refuse("api_keys: [{key: short}]\ntargets:\n  a: {url: http://x:1}\nroutes:\n  r: {type: passthrough, target: a}\n");
	cr_assert(strstr(e, "at least 16"), "%s", e);
	unsetenv("SPARK_TEST_ROUTER_KEY");
	e = refuse("api_keys: [{env: SPARK_TEST_ROUTER_KEY}]\ntargets:\n  a: {url: http://x:1}\nroutes:\n  r: {type: passthrough, target: a}\n");
	cr_assert(strstr(e, "unset"), "%s", e);
	setenv("SPARK_TEST_ROUTER_KEY", "0123456789abcdef0123", 1);
	struct policy *p = load("api_keys: [{env: SPARK_TEST_ROUTER_KEY}]\ntargets:\n  a: {url: http://x:1}\nroutes:\n  r: {type: passthrough, target: a}\n");
	cr_assert_eq(p->n_api_keys, 1);
	cr_assert_str_eq(p->api_keys[0], "0123456789abcdef0123");
	policy_free(p);
}

Test(decide, rules_first_match_wins_else_default)
{
	struct policy *p = load(GOOD);
	const char *t;
	/* short plain question: no rule, default small */
	cr_assert_str_eq(decide(p, "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"hi there\"}]}", NULL, &t), "default");
	cr_assert_str_eq(t, "small");
	/* 100 tokens = 397..400 characters: 396 is 99 tokens, 397 is 100 */
	char body[2048], text[512];
	memset(text, 'x', 396);
	text[396] = 0;
	snprintf(body, sizeof body, "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}", text);
	cr_assert_str_eq(decide(p, body, NULL, &t), "default");
	text[396] = 'x';
	text[397] = 0;
	snprintf(body, sizeof body, "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}", text);
	cr_assert_str_eq(decide(p, body, NULL, &t), "long");
	cr_assert_str_eq(t, "big");
	/* tools, either as tools: or as a tool message */
	cr_assert_str_eq(decide(p, "{\"model\":\"auto\",\"tools\":[{\"type\":\"function\"}],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", NULL, &t), "tools");
	cr_assert_str_eq(decide(p, "{\"model\":\"auto\",\"tools\":[],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", NULL, &t), "default");
	cr_assert_str_eq(decide(p, "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"tool\",\"content\":\"42\"}]}", NULL, &t), "tools");
	/* images in content parts */
	cr_assert_str_eq(decide(p, "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"what\"},{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:,\"}}]}]}", NULL, &t), "images");
	/* keywords: case-insensitive, only in the LAST user message */
	cr_assert_str_eq(decide(p, "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"please PROVE it\"}]}", NULL, &t), "proof");
	cr_assert_str_eq(decide(p, "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"prove it\"},{\"role\":\"assistant\",\"content\":\"ok\"},{\"role\":\"user\",\"content\":\"thanks\"}]}", NULL, &t), "default");
	/* regex over any text (here the system prompt) */
	cr_assert_str_eq(decide(p, "{\"model\":\"auto\",\"messages\":[{\"role\":\"system\",\"content\":\"def foo_bar(x)\"},{\"role\":\"user\",\"content\":\"hm\"}]}", NULL, &t), "code");
	cr_assert_str_eq(decide(p, "{\"model\":\"auto\",\"messages\":[{\"role\":\"system\",\"content\":\"def (x)\"},{\"role\":\"user\",\"content\":\"hm\"}]}", NULL, &t), "default");
	/* keywords in the system prompt only: not in the user message */
	cr_assert_str_eq(decide(p, "{\"model\":\"auto\",\"messages\":[{\"role\":\"system\",\"content\":\"talk like a pirate\"},{\"role\":\"user\",\"content\":\"hm\"}]}", NULL, &t), "pirate");
	cr_assert_str_eq(t, "pool");
	cr_assert_str_eq(decide(p, "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"pirate\"}]}", NULL, &t), "default");
	/* header, with its value */
	struct hdrs gold = {"X-Tier", "gold"}, silver = {"x-tier", "silver"};
	cr_assert_str_eq(decide(p, "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}", &gold, &t), "gold");
	cr_assert_str_eq(decide(p, "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}", &silver, &t), "default");
	/* the requested alias (gpt-4o selects route auto; the rule wants it and <= 5 chars) */
	cr_assert_str_eq(decide(p, "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"hey\"}]}", NULL, &t), "alias");
	cr_assert_str_eq(decide(p, "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"hey\"}]}", NULL, &t), "default");
	/* first match wins: tools AND a long prompt -> "long" (listed first) */
	snprintf(body, sizeof body, "{\"model\":\"auto\",\"tools\":[{}],\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}", text);
	cr_assert_str_eq(decide(p, body, NULL, &t), "long");
	policy_free(p);
}

Test(decide, passthrough_unknown_model_and_chain)
{
	struct policy *p = load(GOOD);
	const char *t;
	cr_assert_str_eq(decide(p, "{\"model\":\"fast\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", NULL, &t), "passthrough");
	cr_assert_str_eq(t, "small");
	struct req_info ri;
	json_t *j;
	char err[256];
	const char *b = "{\"model\":\"nope\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
	cr_assert_eq(req_parse(b, strlen(b), REQ_CHAT, &ri, &j, err, sizeof err), 0);
	struct decision d;
	uint64_t rng = 0;
	cr_assert_eq(route_decide(p, &ri, NULL, NULL, &rng, &d), -ENOENT);
	req_info_free(&ri);
	json_decref(j);
	/* the chain: chosen target first, fallbacks after, no repeats */
	b = "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
	cr_assert_eq(req_parse(b, strlen(b), REQ_CHAT, &ri, &j, err, sizeof err), 0);
	cr_assert_eq(route_decide(p, &ri, NULL, NULL, &rng, &d), 0);
	cr_assert_eq(d.n_chain, 2);
	cr_assert_str_eq(p->targets[d.chain[0]].name, "small");
	cr_assert_str_eq(p->targets[d.chain[1]].name, "big");
	json_t *o = decision_json(p, &d, NULL);
	cr_assert_str_eq(json_string_value(json_object_get(o, "target")), "small");
	cr_assert_str_eq(json_string_value(json_object_get(o, "route_type")), "rules");
	cr_assert(json_is_true(json_object_get(o, "resolvable")));
	json_decref(o);
	req_info_free(&ri);
	json_decref(j);
	policy_free(p);
}

Test(decide, service_targets_without_a_snapshot_are_not_resolvable)
{
	struct policy *p = load(GOOD);
	struct req_info ri;
	json_t *j;
	char err[256];
	const char *b = "{\"model\":\"auto\",\"messages\":[{\"role\":\"system\",\"content\":\"pirate\"},{\"role\":\"user\",\"content\":\"x\"}]}";
	cr_assert_eq(req_parse(b, strlen(b), REQ_CHAT, &ri, &j, err, sizeof err), 0);
	struct decision d;
	uint64_t rng = 0;
	cr_assert_eq(route_decide(p, &ri, NULL, NULL, &rng, &d), 0);
	json_t *o = decision_json(p, &d, NULL);
	cr_assert_str_eq(json_string_value(json_object_get(o, "target_kind")), "service");
	cr_assert(json_is_false(json_object_get(o, "resolvable")));
	cr_assert_str_eq(json_string_value(json_object_get(o, "state")), "disconnected");
	cr_assert(strstr(json_string_value(json_object_get(o, "note")), "fallbacks"));
	json_decref(o);
	req_info_free(&ri);
	json_decref(j);
	policy_free(p);
}

Test(decide, weighted_follows_weights_and_seed)
{
	struct policy *p = load(GOOD);
	const struct route *rt = policy_route(p, "split");
	struct req_info ri = {.model = "split"};
	int small = 0;
	uint64_t rng = rt->seed, rng2 = rt->seed;
	int first[20];
	for (int i = 0; i < 4000; i++) {
		struct decision d;
		cr_assert_eq(route_decide(p, &ri, NULL, NULL, &rng, &d), 0);
		small += !strcmp(p->targets[d.target].name, "small");
		if (i < 20)
			first[i] = d.target;
	}
	/* 3 of 4 to small: 3000 expected, binomial sd ~27 */
	cr_assert(small > 2850 && small < 3150, "small got %d of 4000", small);
	/* the same seed gives the same sequence */
	for (int i = 0; i < 20; i++) {
		struct decision d;
		route_decide(p, &ri, NULL, NULL, &rng2, &d);
		cr_assert_eq(d.target, first[i], "draw %d differs", i);
	}
	policy_free(p);
}

Test(request, bad_bodies_get_openai_style_messages)
{
	struct req_info ri;
	json_t *j;
	char err[256];
#define RBAD(kind, body, needle)                                                                    \
	do {                                                                                        \
		cr_assert_eq(req_parse(body, strlen(body), kind, &ri, &j, err, sizeof err), -EINVAL, \
			     "accepted %s", body);                                                  \
		cr_assert(strstr(err, needle), "for %s: %s", body, err);                           \
	} while (0)
	RBAD(REQ_CHAT, "{\"model\":", "not valid JSON");
	RBAD(REQ_CHAT, "[1]", "JSON object");
	RBAD(REQ_CHAT, "{\"messages\":[]}", "'model'");
	RBAD(REQ_CHAT, "{\"model\":\"a\"}", "'messages'");
	RBAD(REQ_CHAT, "{\"model\":\"a\",\"messages\":[]}", "'messages'");
	RBAD(REQ_CHAT, "{\"model\":\"a\",\"messages\":[{\"content\":\"x\"}]}", "'role'");
	RBAD(REQ_CHAT, "{\"model\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":5}]}", "content");
	RBAD(REQ_CHAT, "{\"model\":\"a\",\"stream\":\"yes\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "'stream'");
	RBAD(REQ_CHAT, "{\"model\":\"a\",\"model\":\"b\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "not valid JSON");
	RBAD(REQ_COMPLETIONS, "{\"model\":\"a\",\"prompt\":{}}", "'prompt'");
	/* completions: a string prompt, counted in code points (é is one) */
	const char *b = "{\"model\":\"a\",\"prompt\":\"caf\xc3\xa9 au lait\",\"stream\":true}";
	cr_assert_eq(req_parse(b, strlen(b), REQ_COMPLETIONS, &ri, &j, err, sizeof err), 0, "%s", err);
	cr_assert_eq(ri.chars, 12); /* 13 bytes */
	cr_assert_eq(ri.tokens, 3);
	cr_assert(ri.stream);
	cr_assert_str_eq(ri.last_user, "caf\xc3\xa9 au lait");
	req_info_free(&ri);
	json_decref(j);
}

static const char *CLS =
	"targets:\n"
	"  big: {url: http://127.0.0.1:1/v1}\n"
	"  small: {url: http://127.0.0.1:2/v1}\n"
	"  judge: {url: http://127.0.0.1:3/v1, model: minicpm}\n"
	"  pool: {service: s}\n"
	"routes:\n"
	"  smart:\n"
	"    type: classifier\n"
	"    classifier: judge\n"
	"    targets: [small, big]\n"
	"    default: big\n"
	"    fallbacks: [small]\n"
	"    prompt: 'pick one of {{targets}} for: {{message}} (system: {{system}}) {{other}}'\n"
	"  score:\n"
	"    type: classifier\n"
	"    classifier: judge\n"
	"    answer: p_solve\n"
	"    strong: big\n"
	"    weak: small\n"
	"    threshold: 0.7\n"
	"    default: big\n";

static struct decision pending(struct policy *p, const char *model, struct req_info *ri, json_t **j)
{
	char err[256], body[256];
	snprintf(body, sizeof body,
		 "{\"model\":\"%s\",\"messages\":[{\"role\":\"system\",\"content\":\"S\"},"
		 "{\"role\":\"user\",\"content\":\"caf\u00e9?\"}]}", model);
	cr_assert_eq(req_parse(body, strlen(body), REQ_CHAT, ri, j, err, sizeof err), 0, "%s", err);
	struct decision d;
	uint64_t rng = 0;
	cr_assert_eq(route_decide(p, ri, NULL, NULL, &rng, &d), 0);
	cr_assert(d.pending);
	return d;
}

static const char *judge_says(const char *content)
{
	static char b[512];
	json_t *o = json_pack("{s:[{s:{s:s}}]}", "choices", "message", "content", content);
	char *s = json_dumps(o, JSON_COMPACT);
	snprintf(b, sizeof b, "%s", s);
	free(s);
	json_decref(o);
	return b;
}

Test(classifier, the_judge_gets_the_prompt_filled_in)
{
	struct policy *p = load(CLS);
	struct req_info ri;
	json_t *j;
	struct decision d = pending(p, "smart", &ri, &j);
	char *b = classifier_body(p, d.route, &ri);
	json_t *o = json_loads(b, 0, NULL);
	cr_assert_str_eq(json_string_value(json_object_get(o, "model")), "minicpm");
	cr_assert(json_is_false(json_object_get(o, "stream")));
	const char *c = json_string_value(
		json_object_get(json_array_get(json_object_get(o, "messages"), 0), "content"));
	cr_assert_str_eq(c, "pick one of small, big for: caf\xc3\xa9? (system: S) {{other}}", "%s", c);
	json_decref(o);
	free(b);
	req_info_free(&ri);
	json_decref(j);
	policy_free(p);
}

Test(classifier, answers_pick_targets_and_anything_else_the_default)
{
	struct policy *p = load(CLS);
	struct req_info ri;
	json_t *j;
	struct {
		const char *model, *content;
		long status;
		int rc;
		const char *target, *rule;
	} cases[] = {
		{"smart", "{\"target\":\"small\"}", 200, 0, "small", "classifier"},
		{"smart", "Sure! ```json\n{\"target\": \"big\"}\n```", 200, 0, "big", "classifier"},
		{"smart", "{\"target\":\"pool\"}", 200, -EINVAL, "big", "classifier_default"}, /* not a candidate */
		{"smart", "{\"target\":\"nope\"}", 200, -EINVAL, "big", "classifier_default"},
		{"smart", "big", 200, -EINVAL, "big", "classifier_default"},
		{"smart", "{\"target\":\"small\"}", 500, -EINVAL, "big", "classifier_default"},
		{"score", "{\"p_solve\":0.7}", 200, 0, "small", "classifier"},
		{"score", "{\"p_solve\":0.69}", 200, 0, "big", "classifier"},
		{"score", "{\"p_solve\":1.5}", 200, -EINVAL, "big", "classifier_default"},
		{"score", "{\"p_solve\":\"0.9\"}", 200, -EINVAL, "big", "classifier_default"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct decision d = pending(p, cases[i].model, &ri, &j);
		const char *b = judge_says(cases[i].content);
		int rc = classifier_pick(p, b, strlen(b), cases[i].status, NULL, &d);
		cr_assert_eq(rc, cases[i].rc, "case %zu", i);
		cr_assert(!d.pending);
		cr_assert_str_eq(p->targets[d.target].name, cases[i].target, "case %zu: %s", i, d.reason);
		cr_assert_str_eq(d.rule, cases[i].rule, "case %zu", i);
		cr_assert_eq(d.chain[0], d.target);
		req_info_free(&ri);
		json_decref(j);
	}
	/* no answer at all (timeout): the default, and the reason says why */
	struct decision d = pending(p, "smart", &ri, &j);
	cr_assert_eq(classifier_pick(p, NULL, 0, 0, "no answer within timeout_ms", &d), -EINVAL);
	cr_assert(strstr(d.reason, "no answer within timeout_ms"), "%s", d.reason);
	cr_assert_str_eq(p->targets[d.target].name, "big");
	cr_assert_eq(d.n_chain, 2); /* big, then the fallback small */
	req_info_free(&ri);
	json_decref(j);
	/* garbage that is not a chat completion */
	d = pending(p, "smart", &ri, &j);
	cr_assert_eq(classifier_pick(p, "{\"choices\":5", 13, 200, NULL, &d), -EINVAL);
	cr_assert_str_eq(d.rule, "classifier_default");
	req_info_free(&ri);
	json_decref(j);
	policy_free(p);
}

Test(decide, context_length_errors_are_recognised)
{
	const char *yes[] = {
		"{\"error\":{\"message\":\"This model's maximum context length is 8192 tokens. However, you requested 9000 tokens\"}}",
		"{\"object\":\"error\",\"message\":\"prompt is too long\",\"code\":400}",
		"{\"error\":{\"code\":\"context_length_exceeded\"}}",
		"{\"error\":{\"message\":\"the request exceeds the available context size, try increasing the context window\"}}",
	};
	const char *no[] = {"{\"error\":{\"message\":\"'messages' must be an array\"}}", "", "context"};
	for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
		cr_assert(is_context_error(yes[i], strlen(yes[i])), "%s", yes[i]);
	for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
		cr_assert(!is_context_error(no[i], strlen(no[i])), "%s", no[i]);
}

/* Token counts from upstream answers: the fast path (usage as the last
 * member) and the whole parse agree on what a user's metrics show. */
Test(decide, usage_is_read_from_answers_and_chunks)
{
	static const struct {
		const char *text;
		int rc;
		long long pt, ct;
	} cases[] = {
		/* usage last, as OpenAI and vLLM send it */
		{"{\"id\":\"c\",\"choices\":[{\"message\":{\"content\":\"hi\"}}],"
		 "\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3,\"total_tokens\":10}}", 0, 7, 3},
		/* a stream chunk, blanks and a CR after it */
		{" {\"choices\":[], \"usage\" : { \"prompt_tokens\": 11, \"completion_tokens\": 5 } } \r", 0, 11, 5},
		/* usage first: read by the whole parse */
		{"{\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":4},\"id\":\"x\"}", 0, 2, 4},
		/* only a nested "usage": not the answer's */
		{"{\"choices\":[{\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":9}}]}", -ENOENT, 0, 0},
		{"{\"a\":{\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":9}}}", -ENOENT, 0, 0},
		/* a nested one last, the answer's own first */
		{"{\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2},"
		 "\"x\":{\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":9}}}", 0, 1, 2},
		/* "usage" inside the text of a message */
		{"{\"choices\":[{\"message\":{\"content\":\"\\\"usage\\\":{\\\"prompt_tokens\\\":9}}\"}}]}",
		 -ENOENT, 0, 0},
		/* a key that ends in "usage" (an escaped quote before it) */
		{"{\"a\\\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":5}}", -ENOENT, 0, 0},
		/* OpenAI's chunks before the last carry "usage":null */
		{"{\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}", -ENOENT, 0, 0},
		/* bounded and positive counts only */
		{"{\"usage\":{\"prompt_tokens\":-3,\"completion_tokens\":1099511627776}}", 0, 0, 0},
		{"{\"usage\":{\"prompt_tokens\":\"7\"}}", 0, 0, 0},
		/* not JSON, cut short, empty */
		{"{\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}", -ENOENT, 0, 0},
		{"\"usage\":{\"prompt_tokens\":7}", -ENOENT, 0, 0},
		{"", -ENOENT, 0, 0},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		long long pt = -1, ct = -1;
		int rc = usage_read(cases[i].text, strlen(cases[i].text), &pt, &ct);
		cr_assert_eq(rc, cases[i].rc, "%s: rc %d", cases[i].text, rc);
		if (rc == 0) {
			cr_assert_eq(pt, cases[i].pt, "%s: prompt %lld", cases[i].text, pt);
			cr_assert_eq(ct, cases[i].ct, "%s: completion %lld", cases[i].text, ct);
		} else {
			cr_assert(pt == -1 && ct == -1, "%s: counts changed", cases[i].text);
		}
	}
}

#include "session.h"

Test(session, pins_expire_and_stay_bounded)
{
	struct sessions *s = sessions_new(100, 1000);
	uint64_t k = session_key("auto", "conv-1", 6);
	cr_assert_neq(k, session_key("other", "conv-1", 6), "the route is part of the key");
	cr_assert_eq(sessions_get(s, k, 0), -1);
	sessions_put(s, k, 3, 0);
	cr_assert_eq(sessions_get(s, k, 500), 3);
	cr_assert_eq(sessions_get(s, k, 1400), 3, "a hit refreshes the entry");
	cr_assert_eq(sessions_get(s, k, 2401), -1, "expired 1 s after the last use");
	sessions_put(s, k, 4, 3000);
	sessions_put(s, k, 5, 3001);
	cr_assert_eq(sessions_get(s, k, 3002), 5, "a new pin replaces the old");
	sessions_drop(s, k);
	cr_assert_eq(sessions_get(s, k, 3003), -1);
	/* 100,000 conversations in a table of 128: bounded, the newest kept */
	for (int i = 0; i < 100000; i++) {
		char id[32];
		snprintf(id, sizeof id, "c%d", i);
		sessions_put(s, session_key("auto", id, strlen(id)), i % 7, 10000 + (uint64_t)i / 1000);
	}
	cr_assert_leq(sessions_count(s, 10100), 128);
	cr_assert_eq(sessions_get(s, session_key("auto", "c99999", 6), 10100), 99999 % 7);
	sessions_free(s);
}

Test(policy, sticky_and_sessions_keys)
{
	struct policy *p = load("sessions: {header: x-conv, ttl_s: 60, max: 50}\n"
				"targets: {a: {url: 'http://x:1'}}\n"
				"routes:\n"
				"  p: {type: passthrough, target: a}\n"
				"  w: {type: weighted, targets: [a]}\n"
				"  h: {type: weighted, targets: [a], sticky: hash}\n"
				"  o: {type: rules, default: a, sticky: off}\n");
	cr_assert_str_eq(p->session_header, "x-conv");
	cr_assert_eq(p->session_ttl_s, 60);
	cr_assert_eq(policy_route(p, "p")->sticky, STICKY_OFF);
	cr_assert_eq(policy_route(p, "w")->sticky, STICKY_HEADER);
	cr_assert_eq(policy_route(p, "h")->sticky, STICKY_HASH);
	cr_assert_eq(policy_route(p, "o")->sticky, STICKY_OFF);
	policy_free(p);
	char *e = refuse("targets: {a: {url: 'http://x:1'}}\nroutes: {w: {type: weighted, targets: [a], sticky: always}}\n");
	cr_assert(strstr(e, "expected off, header or hash"), "%s", e);
}

/* issue 27: route check accepted log: /proc/self/mem */
Test(policy, the_log_is_a_regular_file_in_a_sane_place)
{
	static const char *const bad[] = {"/proc/self/mem", "/sys/kernel/x", "/dev/sda", "/dev/null",
					  "/tmp", "/proc"};
	char text[512], why[600];
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		snprintf(text, sizeof text, "log: %s\ntargets:\n  a: {url: http://127.0.0.1:1/v1}\n"
			 "routes:\n  r: {type: passthrough, target: a}\n", bad[i]);
		char *e = refuse(text);
		cr_assert(strstr(e, "p.yaml:1:6: log: "), "%s", e);
		cr_assert_eq(policy_log_path_check(bad[i], why, sizeof why), -EINVAL, "%s", bad[i]);
	}
	/* through a symbolic link too */
	char link[] = "/tmp/spark-router-test-logXXXXXX";
	cr_assert_not_null(mkdtemp(link));
	char lp[600];
	snprintf(lp, sizeof lp, "%s/l.jsonl", link);
	cr_assert_eq(symlink("/proc/self/mem", lp), 0);
	cr_assert_eq(policy_log_path_check(lp, why, sizeof why), -EINVAL);
	cr_assert(strstr(why, "under /proc"), "%s", why);
	unlink(lp);
	/* a file that does not exist yet, or a regular one, or stdout, are fine */
	snprintf(lp, sizeof lp, "%s/new.jsonl", link);
	cr_assert_eq(policy_log_path_check(lp, why, sizeof why), 0, "%s", why);
	cr_assert_eq(policy_log_path_check("-", why, sizeof why), 0);
	cr_assert_eq(policy_log_path_check("relative.jsonl", why, sizeof why), 0, "%s", why);
	rmdir(link);
}

/* services_grace_s (issue 28): how long service targets route by the last
 * snapshot once sparkd went away; 60 unless set, 0 turns it off. The decision
 * of a stale snapshot says so. */
Test(policy, services_grace_s_and_a_stale_snapshot)
{
	const char *T = "targets:\n  s: {service: svc}\nroutes:\n  r: {type: passthrough, target: s}\n";
	struct policy *p = load(T);
	cr_expect_eq(p->services_grace_s, 60);
	policy_free(p);
	char buf[256];
	snprintf(buf, sizeof buf, "services_grace_s: 0\n%s", T);
	p = load(buf);
	cr_expect_eq(p->services_grace_s, 0);
	policy_free(p);
	snprintf(buf, sizeof buf, "services_grace_s: 3601\n%s", T);
	cr_expect(strstr(refuse(buf), "services_grace_s"), "%s", refuse(buf));
	snprintf(buf, sizeof buf, "services_grace_s: soon\n%s", T);
	refuse(buf);

	p = load(T);
	struct svc_info sv = {.name = "svc", .state = "ready", .url = "http://169.254.1.1:8000",
			      .mgmt_url = "http://169.254.100.1:8000"};
	snprintf(sv.group, sizeof sv.group, "g");
	snprintf(sv.owner, sizeof sv.owner, "root");
	struct svc_table t = {.connected = false, .stale = true, .n = 1, .v = &sv};
	struct decision d = {.route = &p->routes[0], .target = 0, .rule = "", .reason = "passthrough"};
	d.chain[0] = 0;
	d.n_chain = 1;
	json_t *o = decision_json(p, &d, &t);
	cr_expect(json_is_true(json_object_get(o, "resolvable")), "a stale snapshot still routes");
	cr_expect_str_eq(json_string_value(json_object_get(o, "snapshot")) ?: "", "stale");
	cr_expect(strstr(json_string_value(json_object_get(o, "note")) ?: "", "services_grace_s"));
	json_decref(o);
	policy_free(p);
}

/* spark-router's rule regexes (router/rx.c): POSIX-like behaviour on PCRE2,
 * the match limits, the text cap, route check's shape warnings, and a limit
 * hit in a routing decision (router/decide.c). */
#include "decide.h"
#include "policy.h"
#include "rx.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct rx *comp(const char *pat)
{
	char err[256] = "";
	struct rx *x = NULL;
	cr_assert_eq(rx_compile(pat, &x, err, sizeof err), 0, "%s: %s", pat, err);
	return x;
}

static int m(const char *pat, const char *text)
{
	struct rx *x = comp(pat);
	int r = rx_match(x, text, strlen(text));
	rx_free(x);
	return r;
}

/* n copies of unit, NUL-terminated */
static char *rep(const char *unit, size_t n)
{
	size_t u = strlen(unit);
	char *s = malloc(u * n + 1);
	cr_assert_not_null(s);
	for (size_t i = 0; i < n; i++)
		memcpy(s + i * u, unit, u);
	s[u * n] = 0;
	return s;
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec / 1e9;
}

Test(rx, behaves_like_the_posix_rules_users_wrote)
{
	cr_assert_eq(m("def [a-z_]+\\(|#include", "x = 1\ndef foo_bar(y):"), 1);
	cr_assert_eq(m("def [a-z_]+\\(|#include", "#INCLUDE <stdio.h>"), 1); /* case-insensitive */
	cr_assert_eq(m("def [a-z_]+\\(|#include", "define it"), 0);
	/* ^ and $ at line breaks, . not across them (REG_NEWLINE) */
	cr_assert_eq(m("^second$", "first\nsecond\nthird"), 1);
	cr_assert_eq(m("first.second", "first\nsecond"), 0);
	/* bracket expressions, classes, intervals */
	cr_assert_eq(m("[[:digit:]]{3}-[0-9]{4}", "call 555-1234"), 1);
	cr_assert_eq(m("[]a]+z", "]]az"), 1);
	/* GNU's word boundaries \< and \> */
	cr_assert_eq(m("\\<cat\\>", "a cat sat"), 1);
	cr_assert_eq(m("\\<cat\\>", "concatenate"), 0);
	cr_assert_eq(m("[\\<]", "<"), 1); /* in a class it stays the character */
	/* non-ASCII text, case-insensitively */
	cr_assert_eq(m("ÉTÉ", "un bel été"), 1);
	char err[256] = "";
	struct rx *x = NULL;
	cr_assert_eq(rx_compile("a((", &x, err, sizeof err), -EINVAL);
	cr_assert_null(x);
	cr_assert(strstr(err, "missing closing parenthesis"), "%s", err);
	cr_assert_eq(rx_compile("", &x, err, sizeof err), -EINVAL);
}

/* (a|aa)*[bc] over runs of 20 a's: each start position backtracks about
 * 17,000 times, past RX_MATCH_LIMIT: -E2BIG, quickly (the first start
 * position stops the match). glibc's regexec took seconds on such text. */
Test(rx, a_catastrophic_pattern_stops_at_its_limit)
{
	char *text = rep("aaaaaaaaaaaaaaaaaaaa!", 5700); /* 119,700 characters */
	struct rx *x = comp("(a|aa)*[bc]");
	double t0 = now_s();
	int r = rx_match(x, text, strlen(text));
	double t = now_s() - t0;
	cr_assert_eq(r, -E2BIG, "got %d", r);
	cr_log_info("(a|aa)*[bc] at its limit: %.3f ms", t * 1e3);
	/* the worst case under the limit: runs of 16 (about 7,000 steps each),
	 * every start position until the text cap: bounded by the cap, not the
	 * text (the figure is in docs/router.md) */
	free(text);
	text = rep("aaaaaaaaaaaaaaaa!", 7100); /* 120,700 characters */
	t0 = now_s();
	r = rx_match(x, text, strlen(text));
	t = now_s() - t0;
	cr_assert_eq(r, 0, "got %d", r);
	cr_log_info("(a|aa)*[bc] just under its limit over %d bytes: %.3f ms (jit %d)", RX_TEXT_MAX,
		    t * 1e3, rx_jit(x));
	/* generous: a busy machine; the unbounded matcher took minutes */
	cr_assert_lt(t, 30.0);
	rx_free(x);
	free(text);
	/* the issue's own case: no c anywhere */
	text = rep("a", 120000);
	cr_assert_eq(m("(a|aa)*c", text), 0);
	free(text);
}

Test(rx, only_the_first_bytes_are_looked_at)
{
	char *text = rep("x", RX_TEXT_MAX + 100);
	memcpy(text + RX_TEXT_MAX + 10, "needle", 6);
	cr_assert_eq(m("needle", text), 0);
	memcpy(text + 10, "needle", 6);
	cr_assert_eq(m("needle", text), 1);
	/* $ does not match where the text was cut */
	cr_assert_eq(m("x$", text), 0);
	free(text);
	/* a cut inside a character moves back to its start (no UTF-8 error) */
	text = rep("é", RX_TEXT_MAX); /* 2 bytes each: twice the cap */
	cr_assert_eq(m("z", text), 0);
	cr_assert_eq(m("é", text), 1);
	free(text);
}

Test(rx, route_check_names_patterns_the_limits_bound)
{
	static const char *const bad[] = {"(a+)+", "(a|aa)*c", "(\\w+\\s?)*$", "(x+x+)+y",
					  "(a)\\1", "((ab)*c)+", "(a|b){2,}", "(?:a*)*"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		cr_assert_not_null(rx_unbounded(bad[i]), "%s", bad[i]);
	static const char *const fine[] = {"def [a-z_]+\\(|#include", "(foo)+", "[(]+[)]*",
					   "(ab){2}", "\\<cat\\>", "a+b+c*", "(x|y)z", "[a|b]*"};
	for (size_t i = 0; i < sizeof fine / sizeof fine[0]; i++)
		cr_assert_null(rx_unbounded(fine[i]), "%s: %s", fine[i], rx_unbounded(fine[i]));
}

Test(rx, a_limit_hit_in_a_decision_is_no_match_and_reported)
{
	const char *pol = "targets:\n  big: {url: http://127.0.0.1:1/v1}\n  small: {url: http://127.0.0.1:2/v1}\n"
			  "routes:\n  r:\n    type: rules\n    rules:\n"
			  "      - {name: blowup, when: {regex: '(a|aa)*[bc]'}, target: big}\n"
			  "      - {name: plain, when: {regex: '!'}, target: big}\n"
			  "    default: small\n";
	char err[256] = "";
	struct policy *p = NULL;
	cr_assert_eq(policy_parse("p.yaml", pol, strlen(pol), &p, err, sizeof err), 0, "%s", err);
	char *text = rep("aaaaaaaaaaaaaaaaaaaa!", 100);
	size_t n = strlen(text) + 100;
	char *body = malloc(n);
	snprintf(body, n, "{\"model\":\"r\",\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}", text);
	struct req_info ri;
	json_t *j;
	cr_assert_eq(req_parse(body, strlen(body), REQ_CHAT, &ri, &j, err, sizeof err), 0, "%s", err);
	cr_assert(route_has_regex(policy_route(p, "r")));
	struct decision d;
	uint64_t rng = 1;
	cr_assert_eq(route_decide(p, &ri, NULL, NULL, &rng, &d), 0);
	cr_assert_str_eq(d.rule, "plain"); /* the next rule decides */
	cr_assert_eq(d.regex_limited, 1);
	cr_assert_str_eq(d.regex_limited_rule, "blowup");
	req_info_free(&ri);
	json_decref(j);
	free(body);
	free(text);
	policy_free(p);
}

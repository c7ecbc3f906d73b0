/* One routing-log line (router/logline.c): what a user reading the log with
 * jq or a JSON-lines loader gets: the fields in order, numbers as JSON reals
 * to the microsecond, strings escaped so the line parses back to the same
 * values, ttft_ms only when there was a first token, and a buffer too small
 * told by the length, like snprintf. */
#include "logline.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <string.h>

static struct logline sample(void)
{
	return (struct logline){.ts = 1764763200.123456789,
				.request_id = "req-1",
				.model = "auto",
				.route = "auto",
				.rule = "long",
				.target = "big",
				.status = 200,
				.attempts = 1,
				.stream = true,
				.tokens_estimated = 120,
				.ms = 12.5,
				.overhead_ms = 0.0204,
				.has_ttft = true,
				.ttft_ms = 3.0};
}

Test(logline, numbers_are_reals_to_the_microsecond)
{
	struct logline l = sample();
	char buf[1024];
	size_t n = logline_format(buf, sizeof buf, &l);
	cr_assert_lt(n, sizeof buf);
	cr_assert_eq(buf[n - 1], '\n', "%s", buf);
	cr_assert(strstr(buf, "\"ts\":1764763200.123457"), "%s", buf);
	cr_assert(strstr(buf, "\"ms\":12.5"), "%s", buf);
	cr_assert(strstr(buf, "\"overhead_ms\":0.02"), "%s", buf);
	cr_assert(strstr(buf, "\"ttft_ms\":3.0"), "a whole number stays a real: %s", buf);
	json_error_t e;
	json_t *j = json_loads(buf, 0, &e);
	cr_assert(j, "not JSON: %s (%s)", buf, e.text);
	cr_assert(json_is_real(json_object_get(j, "ttft_ms")));
	cr_assert_eq(json_integer_value(json_object_get(j, "status")), 200);
	cr_assert(json_is_true(json_object_get(j, "stream")));
	json_decref(j);
	l.has_ttft = false;
	logline_format(buf, sizeof buf, &l);
	cr_assert(!strstr(buf, "ttft_ms"), "no first token, no ttft_ms: %s", buf);
}

Test(logline, hostile_strings_parse_back_to_the_same_values)
{
	struct logline l = sample();
	l.model = "a\"b\\c\n\x01\x1f/\xc3\xa9";
	l.request_id = "\t\r";
	char buf[1024];
	logline_format(buf, sizeof buf, &l);
	json_t *j = json_loads(buf, 0, NULL);
	cr_assert(j, "not JSON: %s", buf);
	cr_assert_str_eq(json_string_value(json_object_get(j, "model")), l.model);
	cr_assert_str_eq(json_string_value(json_object_get(j, "request_id")), "\t\r");
	json_decref(j);
	l.model = "bad \xff byte";
	logline_format(buf, sizeof buf, &l);
	j = json_loads(buf, 0, NULL);
	cr_assert(j, "invalid UTF-8 must still give JSON: %s", buf);
	cr_assert_str_eq(json_string_value(json_object_get(j, "model")), "bad \xef\xbf\xbd byte");
	json_decref(j);
}

Test(logline, a_small_buffer_is_told_by_the_length)
{
	struct logline l = sample();
	char big[1024], small[16];
	size_t n = logline_format(big, sizeof big, &l);
	cr_assert_eq(logline_format(small, sizeof small, &l), n);
}

/* upstream_error (issue 28): last, and only when an upstream broke off */
Test(logline, upstream_error_only_when_set_and_last)
{
	struct logline l = sample();
	char buf[1024];
	logline_format(buf, sizeof buf, &l);
	cr_assert(!strstr(buf, "upstream_error"), "%s", buf);
	l.upstream_error = "target big stalled: no byte for 120 s (\"stall_timeout_ms\")";
	size_t n = logline_format(buf, sizeof buf, &l);
	const char *tail = ",\"upstream_error\":\"target big stalled: no byte for 120 s "
			   "(\\\"stall_timeout_ms\\\")\"}\n";
	cr_assert(n > strlen(tail) && !strcmp(buf + n - strlen(tail), tail), "%s", buf);
	json_t *j = json_loads(buf, 0, NULL);
	cr_assert(j, "not JSON: %s", buf);
	cr_assert_str_eq(json_string_value(json_object_get(j, "upstream_error")), l.upstream_error);
	json_decref(j);
}

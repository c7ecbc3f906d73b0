/* token: the join token's printed form, spk1.<64 hex>.<16 hex>.<32 hex>
 * (common/token.h). What `sparkctl join --token` accepts and what `token
 * create` prints. */
#include "common/token.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#define CA "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define ID "fedcba9876543210"
#define SECRET "00112233445566778899aabbccddeeff"
#define GOOD "spk1." CA "." ID "." SECRET

Test(token, parses_the_printed_form)
{
	struct join_token t;
	char err[256] = "";
	cr_assert_eq(token_parse(GOOD, &t, err, sizeof err), 0, "%s", err);
	cr_assert_str_eq(t.ca_hash, CA);
	cr_assert_str_eq(t.id, ID);
	cr_assert_str_eq(t.secret, SECRET);
	cr_assert_str_empty(err, "no message on success");
}

Test(token, format_then_parse_round_trips)
{
	struct join_token t = {CA, ID, SECRET}, back;
	char out[160], err[256];
	token_format(&t, out, sizeof out);
	cr_assert_str_eq(out, GOOD);
	cr_assert_eq(token_parse(out, &back, err, sizeof err), 0, "%s", err);
	cr_assert_str_eq(back.ca_hash, t.ca_hash);
	cr_assert_str_eq(back.id, t.id);
	cr_assert_str_eq(back.secret, t.secret);
	char again[160];
	token_format(&back, again, sizeof again);
	cr_assert_str_eq(again, out);
}

Test(token, upper_case_hex_is_accepted_and_printed_lower_case)
{
	char up[160];
	snprintf(up, sizeof up, "spk1.%s.%s.%s", "0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF",
		 "FEDCBA9876543210", "00112233445566778899AABBCCDDEEFF");
	struct join_token t;
	char err[256], out[160];
	cr_assert_eq(token_parse(up, &t, err, sizeof err), 0, "%s", err);
	token_format(&t, out, sizeof out);
	cr_assert_str_eq(out, GOOD, "the canonical form is lower case");
}

Test(token, format_truncates_to_the_buffer)
{
	struct join_token t = {CA, ID, SECRET};
	char small[10];
	memset(small, 'x', sizeof small);
	token_format(&t, small, sizeof small);
	cr_assert_str_eq(small, "spk1.0123", "NUL-terminated within the buffer");
}

/* Every malformed form is -EINVAL with a message that says what to do. */
static void refused(const char *s, const char *what)
{
	struct join_token t;
	char err[256] = "";
	cr_assert_eq(token_parse(s, &t, err, sizeof err), -EINVAL, "%s: \"%s\"", what, s ? s : "NULL");
	cr_assert(strstr(err, "malformed token") != NULL, "%s: message \"%s\"", what, err);
	cr_assert(strstr(err, "sparkctl token create") != NULL, "%s: says where to get one", what);
}

Test(token, refuses_null_and_empty)
{
	refused(NULL, "NULL");
	refused("", "empty");
}

Test(token, refuses_a_wrong_prefix)
{
	refused("spk2." CA "." ID "." SECRET, "version 2");
	refused("SPK1." CA "." ID "." SECRET, "upper-case prefix");
	refused("xpk1." CA "." ID "." SECRET, "other prefix");
	refused("spk1:" CA "." ID "." SECRET, "prefix without its dot");
	/* same length, no prefix at all */
	refused("00000" CA "." ID "." SECRET, "hex instead of the prefix");
}

Test(token, refuses_wrong_lengths)
{
	/* each field one short and one long, total length kept or not */
	refused("spk1." CA "0." ID "." SECRET, "ca hash 65");
	refused("spk1." "123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" "." ID "." SECRET,
		"ca hash 63");
	refused("spk1." CA "." ID "0." SECRET, "id 17");
	refused("spk1." CA "." "edcba9876543210" "." SECRET, "id 15");
	refused("spk1." CA "." ID "." SECRET "0", "secret 33");
	refused("spk1." CA "." ID "." "0112233445566778899aabbccddeeff", "secret 31");
	/* a longer ca hash and a shorter id: the total is right, the dots are not */
	refused("spk1." CA "0." "edcba9876543210" "." SECRET, "fields shifted");
	refused("spk1." CA "." ID "." SECRET "\n", "trailing newline");
	refused(" " GOOD, "leading space");
}

Test(token, refuses_non_hex)
{
	static const char *const bad[] = {"g", "G", "-", " ", ".", "z", "\x7f", "\xc3"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		/* put the bad character in each field in turn: first, middle, last */
		const size_t at[] = {5, 40, 68, 70, 78, 85, 87, 100, 118};
		for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
			char s[160];
			snprintf(s, sizeof s, "%s", GOOD);
			s[at[k]] = bad[i][0];
			refused(s, "non-hex character");
		}
	}
}

Test(token, refuses_missing_and_extra_parts)
{
	refused("spk1." CA "." ID, "no secret");
	refused("spk1." CA, "only the ca hash");
	refused("spk1.", "only the prefix");
	refused("spk1." CA ".." SECRET, "empty id");
	refused("spk1." CA "." ID "." SECRET "." SECRET, "a fifth part");
	refused("spk1." CA "." ID "." SECRET ".", "a trailing dot");
	refused("spk1." CA ID "." SECRET ".", "dot moved to the end");
}

Test(token, refuses_overlong_input)
{
	static char big[1 << 16];
	memset(big, 'a', sizeof big - 1);
	memcpy(big, GOOD, strlen(GOOD));
	refused(big, "64 KiB");
}

Test(token, a_short_error_buffer_is_safe)
{
	struct join_token t;
	char err[8];
	memset(err, 'x', sizeof err);
	cr_assert_eq(token_parse("nope", &t, err, sizeof err), -EINVAL);
	cr_assert_eq(strlen(err), sizeof err - 1, "truncated and terminated");
	cr_assert_eq(token_parse("nope", &t, NULL, 0), -EINVAL, "no buffer at all");
}

/* libFuzzer target for the join-token reader (common/token.c token_parse),
 * which sparkctl join and sparkd run on what a person pasted. Invariants that
 * abort on failure: the answer is 0 or -EINVAL; a refusal has a message; an
 * accepted token has lower-case hex fields of 64, 16 and 32 characters and
 * formats back to the input, lower-cased. */
#include "common/token.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_hex(const char *s, size_t n)
{
	if (strlen(s) != n)
		abort();
	for (size_t i = 0; i < n; i++)
		if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i]))
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 300)
		return 0;
	char s[301];
	memcpy(s, data, size);
	s[size] = '\0';
	struct join_token t;
	char err[256] = "";
	int r = token_parse(s, &t, err, sizeof err);
	if (r != 0 && r != -EINVAL)
		abort();
	if (r < 0) {
		if (!err[0])
			abort();
		return 0;
	}
	check_hex(t.ca_hash, 64);
	check_hex(t.id, 16);
	check_hex(t.secret, 32);
	char out[160];
	token_format(&t, out, sizeof out);
	if (strlen(out) != strlen(s))
		abort();
	for (size_t i = 0; s[i]; i++)
		if (out[i] != (char)tolower((unsigned char)s[i]))
			abort();
	return 0;
}

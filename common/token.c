#include "token.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

static int hex_field(const char *s, size_t n, char *dst)
{
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		if (!isxdigit((unsigned char)ch))
			return -EINVAL;
		dst[i] = (char)tolower((unsigned char)ch);
	}
	dst[n] = '\0';
	return 0;
}

int token_parse(const char *s, struct join_token *t, char *err, size_t errlen)
{
	/* "spk1." + 64 + "." + 16 + "." + 32 */
	const size_t want = 5 + 64 + 1 + 16 + 1 + 32;
	if (!s || strlen(s) != want || strncmp(s, "spk1.", 5) != 0 || s[69] != '.' || s[86] != '.' ||
	    hex_field(s + 5, 64, t->ca_hash) < 0 || hex_field(s + 70, 16, t->id) < 0 ||
	    hex_field(s + 87, 32, t->secret) < 0) {
		snprintf(err, errlen,
			 "malformed token (expected spk1.<64 hex>.<16 hex>.<32 hex>); copy it again "
			 "from 'sparkctl token create' on the head");
		return -EINVAL;
	}
	return 0;
}

void token_format(const struct join_token *t, char *out, size_t len)
{
	snprintf(out, len, "spk1.%s.%s.%s", t->ca_hash, t->id, t->secret);
}

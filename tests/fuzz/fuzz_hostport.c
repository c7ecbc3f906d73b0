/* libFuzzer target for the address validator (common/util.c
 * util_check_hostport). Invariants that abort on failure: the answer is 0 or
 * -EINVAL; a refusal comes with a non-empty, NUL-terminated message and an
 * acceptance leaves none; an accepted address has no byte outside printable
 * ASCII nor a space, splits with util_split_hostport into a host and a port
 * 1-65535, and is accepted again (same answer) with and without a default port
 * when it names its port. */
#include "common/util.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 600)
		return 0;
	char s[601];
	memcpy(s, data, size);
	s[size] = '\0';
	int def = size ? (data[0] & 1 ? 7300 : 0) : 7300;
	char err[128];
	memset(err, 0, sizeof err);
	int r = util_check_hostport(s, def, err, sizeof err);
	if (r != 0 && r != -EINVAL)
		abort();
	if (memchr(err, '\0', sizeof err) == NULL)
		abort();
	if (r < 0) {
		if (!err[0])
			abort();
		return 0;
	}
	if (err[0] || strlen(s) == 0 || strlen(s) > 261)
		abort();
	for (const char *p = s; *p; p++)
		if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f)
			abort();
	char host[300];
	int port = -1;
	if (util_split_hostport(s, def ? def : 1, host, sizeof host, &port) < 0)
		abort();
	if (port < 1 || port > 65535 || !host[0])
		abort();
	/* the first ':' after the host (or after ']') marks a named port */
	const char *rb = s[0] == '[' ? strchr(s, ']') : s;
	if (rb && strchr(rb, ':') && util_check_hostport(s, def ? 0 : 7300, NULL, 0) != 0)
		abort();
	return 0;
}

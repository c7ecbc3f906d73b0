/* libFuzzer target for the Slurm host list parser (cli/hostlist.c, what
 * `sparkctl env --node-list` reads from SLURM_JOB_NODELIST). Invariants that
 * abort on failure: the answer is 0, -EINVAL, -E2BIG or -ENOMEM; a refusal
 * says why; an accepted list has 1 to HOSTLIST_MAX names, each 1 to
 * HOSTLIST_NAME_MAX characters of letters, digits, '-', '_' and '.', and the
 * names joined by commas (a list without brackets) parse to the same names. */
#include "cli/hostlist.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool name_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > HOSTLIST_NAME_MAX)
		return false;
	for (const char *p = s; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		      *p == '-' || *p == '_' || *p == '.'))
			return false;
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 4096)
		return 0;
	char s[4097];
	memcpy(s, data, size);
	s[size] = '\0';
	struct hostlist h;
	char err[256];
	memset(err, 0, sizeof err);
	int r = hostlist_expand(s, &h, err, sizeof err);
	if (r != 0 && r != -EINVAL && r != -E2BIG && r != -ENOMEM)
		abort();
	if (r != 0) {
		if (!err[0] || memchr(err, '\0', sizeof err) == NULL)
			abort();
		hostlist_free(&h);
		return 0;
	}
	if (h.n == 0 || h.n > HOSTLIST_MAX)
		abort();
	size_t total = 0;
	for (size_t i = 0; i < h.n; i++) {
		if (!name_ok(h.names[i]))
			abort();
		total += strlen(h.names[i]) + 1;
	}
	/* joined by commas, the names are a list of their own: the same names */
	if (total <= HOSTLIST_TEXT_MAX) {
		char *j = malloc(total);
		size_t o = 0;
		for (size_t i = 0; i < h.n; i++) {
			size_t l = strlen(h.names[i]);
			memcpy(j + o, h.names[i], l);
			o += l;
			j[o++] = i + 1 < h.n ? ',' : '\0';
		}
		struct hostlist h2;
		if (hostlist_expand(j, &h2, NULL, 0) != 0 || h2.n != h.n)
			abort();
		for (size_t i = 0; i < h.n; i++)
			if (strcmp(h.names[i], h2.names[i]) != 0)
				abort();
		hostlist_free(&h2);
		free(j);
	}
	hostlist_free(&h);
	return 0;
}

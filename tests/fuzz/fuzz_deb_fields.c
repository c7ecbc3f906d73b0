/* libFuzzer target for the control-field reader of provision's packages
 * (provision/pkg.c prov_deb_fields: the "Package: / Version: / Architecture:" lines that
 * dpkg-deb -f prints for a .deb in --package DIR). Invariants that abort on failure:
 * the three outputs are NUL-terminated within their buffers, contain no newline, and
 * the result is 0 exactly when all three fields were found. */
#include "prov_int.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_field(const char *f, size_t cap)
{
	if (!memchr(f, 0, cap) || strchr(f, '\n'))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = 0;
	char pkg[64], ver[64], arch[32];
	memset(pkg, 'x', sizeof pkg);
	memset(ver, 'x', sizeof ver);
	memset(arch, 'x', sizeof arch);
	int r = prov_deb_fields(text, pkg, sizeof pkg, ver, sizeof ver, arch, sizeof arch);
	check_field(pkg, sizeof pkg);
	check_field(ver, sizeof ver);
	check_field(arch, sizeof arch);
	if (r == 0 && (!pkg[0] || !ver[0] || !arch[0]))
		abort();
	if (r != 0 && r != -EINVAL)
		abort();
	free(text);
	return 0;
}

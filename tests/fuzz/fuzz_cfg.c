/* libFuzzer target for the YAML configuration reader (common/cfg.c).
 * Arbitrary bytes go to cfg_parse. Invariants that abort on failure: success
 * yields an object; failure yields -EINVAL (or -ENOMEM), no tree, and a
 * message that starts with "NAME:LINE:COL: ". The typed getters are run on
 * whatever was parsed. */
#include "common/cfg.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_err_format(const char *err)
{
	static const char name[] = "fuzz.yaml:";
	if (strncmp(err, name, sizeof name - 1) != 0)
		abort();
	const char *p = err + sizeof name - 1;
	for (int field = 0; field < 2; field++) {
		if (!isdigit((unsigned char)*p))
			abort();
		while (isdigit((unsigned char)*p))
			p++;
		if (*p++ != ':')
			abort();
	}
	if (*p != ' ')
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *root = (json_t *)1;
	char err[512];
	err[0] = '\0';
	int r = cfg_parse("fuzz.yaml", (const char *)data, size, &root, err, sizeof err);
	if (r < 0) {
		if (root || (r != -EINVAL && r != -ENOMEM))
			abort();
		if (r == -EINVAL)
			check_err_format(err);
		return 0;
	}
	if (r != 0 || !json_is_object(root))
		abort();
	static const char *const paths[] = {"a", "a.b", "listen", "node.name", "x.y.z", ""};
	static const char *const allowed[] = {"a", "listen", NULL};
	for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
		const char *s;
		long long v;
		cfg_get(root, paths[i]);
		cfg_get_str(root, paths[i], &s, err, sizeof err);
		cfg_get_int(root, paths[i], -100, 100, &v, err, sizeof err);
	}
	cfg_check_keys(root, "fuzz", allowed, err, sizeof err);
	json_decref(root);
	return 0;
}

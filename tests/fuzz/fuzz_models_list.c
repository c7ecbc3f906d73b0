/* libFuzzer target for the OpenAI model-list parser of services' health
 * checks (agent/serve_node.c sn_models_parse), which a node runs on what a
 * model server answers to GET /v1/models. Invariants that abort on failure:
 * the answer is 0, -EINVAL or -E2BIG; a refusal has a message and no ids; an
 * accepted list is an array of at most 256 distinct-or-not non-empty strings
 * of at most 256 bytes, each of them an "id" the input holds. */
#include "serve.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *ids = (json_t *)1;
	char err[256] = "";
	int r = sn_models_parse((const char *)data, size, &ids, err, sizeof err);
	if (r < 0) {
		if ((r != -EINVAL && r != -E2BIG) || ids || !err[0])
			abort();
		return 0;
	}
	if (r != 0 || !json_is_array(ids) || json_array_size(ids) > 256)
		abort();
	json_t *doc = json_loadb((const char *)data, size, 0, NULL);
	json_t *list = json_object_get(doc, "data");
	size_t i;
	json_t *id;
	json_array_foreach(ids, i, id) {
		size_t n = json_string_length(id);
		if (!json_is_string(id) || n == 0 || n > 256)
			abort();
		bool found = false;
		size_t k;
		json_t *m;
		json_array_foreach(list, k, m)
			found |= json_equal(json_object_get(m, "id"), id);
		if (!found)
			abort();
	}
	json_decref(doc);
	json_decref(ids);
	return 0;
}

/* libFuzzer target over the recipe parser (models/recipe.c). The first byte
 * picks a layout (1..8 nodes, ring or switch) and whether a --set override
 * is applied; the rest is the recipe text. A recipe that parses is rendered,
 * which must either give one rank per node with an argv (or null, for ranks
 * mpirun starts) and an env, or explain itself; a failure must always say
 * why. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recipe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	unsigned knob = data[0];
	const char *text = (const char *)data + 1;
	size_t len = size - 1;
	const char *sets[] = {"tp=2", "env.X=1", "restart.limit=3", "args=--a {rank}"};
	size_t n_sets = (knob >> 4) & 3;
	recipe_t r;
	char err[RECIPE_ERR_LEN];
	err[0] = '\0';
	if (recipe_parse("fuzz.yaml", text, len, sets, n_sets, &r, err, sizeof err) < 0) {
		if (!err[0])
			abort();
		return 0;
	}
	recipe_layout_t l = {.group = "g", .topology = knob & 8 ? "ring" : "switch",
			     .net = "fabric", .n = 1 + (knob & 7)};
	for (size_t i = 0; i < l.n; i++) {
		snprintf(l.m[i].name, sizeof l.m[i].name, "n%zu", i);
		snprintf(l.m[i].addr, sizeof l.m[i].addr, "169.254.0.%zu", i + 1);
		snprintf(l.m[i].ifname, sizeof l.m[i].ifname, "eth%zu", i);
	}
	json_t *plan = NULL;
	err[0] = '\0';
	if (recipe_render(&r, &l, &plan, err, sizeof err) < 0) {
		if (!err[0] || plan)
			abort();
	} else {
		json_t *ranks = json_object_get(plan, "ranks");
		size_t n = json_array_size(ranks);
		if (n < 1 || n > l.n)
			abort();
		size_t i;
		json_t *rk;
		json_array_foreach(ranks, i, rk) {
			json_t *argv = json_object_get(rk, "argv");
			if (!(json_is_array(argv) || json_is_null(argv)) ||
			    !json_is_object(json_object_get(rk, "env")))
				abort();
		}
		json_decref(recipe_json(&r));
		json_decref(plan);
	}
	recipe_free(&r);
	return 0;
}

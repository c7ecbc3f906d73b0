/* The built-in recipes: models/recipes/NAME.yaml, compiled in by
 * embed_text.py (meson) and installed to share/sparkctl/recipes. */
#include "recipe.h"

#include <string.h>

extern const char recipe_text_vllm[], recipe_text_sglang[], recipe_text_llamacpp[],
    recipe_text_trtllm[], recipe_text_spark_decode[], recipe_text_command[];

static const recipe_builtin_t builtins[] = {
    {"vllm", recipe_text_vllm},         {"sglang", recipe_text_sglang},
    {"llamacpp", recipe_text_llamacpp}, {"trtllm", recipe_text_trtllm},
    {"spark-decode", recipe_text_spark_decode}, {"command", recipe_text_command},
};

const recipe_builtin_t *recipe_builtin_at(size_t i)
{
	return i < sizeof builtins / sizeof builtins[0] ? &builtins[i] : NULL;
}

const recipe_builtin_t *recipe_builtin_find(const char *name)
{
	for (size_t i = 0; name && i < sizeof builtins / sizeof builtins[0]; i++)
		if (strcmp(builtins[i].name, name) == 0)
			return &builtins[i];
	return NULL;
}

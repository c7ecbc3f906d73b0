/* Text writers of the Slurm export (docs/slurm.md): what export slurm wrote,
 * and `sparkctl env`'s variables as shell exports (a TaskProlog's output). */
#include "print.h"

#include <stdio.h>
#include <string.h>

void cli_text_export_slurm(const struct cli_answer *a)
{
	size_t i;
	json_t *p;
	json_array_foreach(json_object_get(a->data, "removed"), i, p)
		printf("removed %s (no topology plugin for this fabric)\n", json_string_value(p));
	json_array_foreach(json_object_get(a->data, "wrote"), i, p)
		printf("wrote %s\n", json_string_value(p));
	if (json_is_true(json_object_get(a->data, "complete")))
		printf("Next: copy them to /etc/slurm/ on every node (the TaskProlog to %s), add "
		       "\"Include sparkctl.conf\" to slurm.conf and restart Slurm (docs/slurm.md).\n",
		       cli_jstr(a->data, "task_prolog"));
}

/* export NAME=value lines; a value with a line break cannot be one and is left out. */
void cli_text_env(const struct cli_answer *a)
{
	const char *k;
	json_t *v;
	json_object_foreach(json_object_get(a->data, "env"), k, v) {
		const char *s = json_string_value(v);
		if (s && !strpbrk(s, "\n\r"))
			printf("export %s=%s\n", k, s);
	}
}

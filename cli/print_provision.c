/* Text writer of provision's results: one row per host after the step lines
 * (which cmd_provision.c prints as they happen). */
#include "output.h"
#include "print.h"

#include <stdio.h>

const char *cli_prov_host_result(const struct prov_result *r, bool dry)
{
	if (r->failed)
		return "failed";
	if (dry) {
		for (int s = 0; s < PROV_NSTEPS; s++)
			if (r->steps[s].status == PROV_PLANNED)
				return "would change";
		return "unchanged";
	}
	return r->changed ? "provisioned" : "unchanged";
}

void cli_text_provision(const struct cli_answer *a)
{
	const struct cli_provision_view *v = a->view;
	fputc('\n', stdout); /* after the step lines */
	static const char *const hdr[] = {"HOST", "RESULT", "STEPS DONE", "TIME", "ERROR"};
	out_table *t = out_table_new(5, hdr);
	for (size_t i = 0; i < v->n; i++) {
		const struct prov_result *r = &v->res[i];
		char steps[32], tm[32];
		snprintf(steps, sizeof steps, "%d/%d", r->steps_done, PROV_NSTEPS);
		out_fmt_ms(r->ms, tm, sizeof tm);
		const char *row[] = {r->host, cli_prov_host_result(r, v->dry_run), steps, tm,
				     r->failed ? r->error : NULL};
		out_table_row(t, row);
	}
	out_table_print(t, stdout);
	out_table_free(t);
}

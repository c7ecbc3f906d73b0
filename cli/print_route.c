/* Text writers of sparkctl route check|reload (cmd_route.c). */
#include "print.h"

#include "output.h"

#include <stdio.h>

void cli_text_route_check(const struct cli_answer *a)
{
	json_t *d = a->data;
	json_t *targets = json_object_get(d, "targets"), *routes = json_object_get(d, "routes");
	printf("%s: valid: %zu targets, %zu routes, listen %s, %lld api keys\n", cli_jstr(d, "policy"),
	       json_array_size(targets), json_array_size(routes), cli_jstr(d, "listen"),
	       cli_jnum(d, "api_keys"));
	static const char *const th[] = {"TARGET", "KIND", "ADDRESS", "NETWORK", "OWNER", "MAX_CONTEXT"};
	out_table *t = out_table_new(6, th);
	size_t i;
	json_t *o;
	json_array_foreach(targets, i, o) {
		char ctx[32] = "-";
		if (json_is_integer(json_object_get(o, "max_context")))
			snprintf(ctx, sizeof ctx, "%lld", cli_jnum(o, "max_context"));
		const char *row[] = {cli_jstr(o, "name"), cli_jstr(o, "kind"), cli_jstr(o, "address"),
				     cli_jstr(o, "network"), cli_jstr(o, "owner"), ctx};
		out_table_row(t, row);
	}
	out_table_print(t, stdout);
	out_table_free(t);
	static const char *const rh[] = {"ROUTE", "TYPE"};
	t = out_table_new(2, rh);
	json_array_foreach(routes, i, o) {
		const char *row[] = {cli_jstr(o, "name"), cli_jstr(o, "type")};
		out_table_row(t, row);
	}
	putchar('\n');
	out_table_print(t, stdout);
	out_table_free(t);
	if (json_is_string(json_object_get(d, "control_socket")))
		printf("\nservice targets follow the cluster's services through sparkd on %s\n",
		       cli_jstr(d, "control_socket"));
	json_t *w = json_object_get(d, "warnings");
	if (json_array_size(w))
		putchar('\n');
	json_array_foreach(w, i, o)
		printf("warning: %s\n", json_string_value(o));
}

void cli_text_route_reload(const struct cli_answer *a)
{
	printf("sent SIGHUP to spark-router (pid %lld, from %s): it logs policy_reloaded, or reload_refused and keeps its policy\n",
	       cli_jnum(a->data, "pid"), cli_jstr(a->data, "pid_file"));
}

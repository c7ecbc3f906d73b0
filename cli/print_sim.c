/* Text writers of the simulated cluster: sim up's summary and sim ls's
 * tables (nodes, or the cabling with --links). */
#include "output.h"
#include "print.h"

#include <stdio.h>

void cli_text_sim_up(const struct cli_answer *a)
{
	const struct cli_sim_up_view *v = a->view;
	const char *prefix = v->prefix;
	int total = v->nodes + v->bare;
	if (v->bare == 0)
		printf("sim %s is up: %d nodes, %s, %s\n", prefix, total, v->topology,
		       v->no_agents ? "no agents" : "a sparkd on each node");
	else if (v->bare == 1)
		printf("sim %s is up: %d nodes, %s, %s; %s-%d is bare (no sparkd)\n", prefix, total,
		       v->topology, v->no_agents ? "no agents" : "a sparkd on the others", prefix,
		       total);
	else
		printf("sim %s is up: %d nodes, %s, %s; %s-%d to %s-%d are bare (no sparkd)\n",
		       prefix, total, v->topology,
		       v->no_agents ? "no agents" : "a sparkd on the others", prefix, v->nodes + 1,
		       prefix, total);
	printf("Next: sparkctl sim ls --name %s; sparkctl sim exec %s-1 -- sparkctl status; "
	       "sparkctl sim down --name %s\n",
	       prefix, prefix, prefix);
}

static void ls_links(const json_t *d, out_table *t)
{
	size_t i;
	json_t *l;
	json_array_foreach(json_object_get(d, "links"), i, l) {
		char a[96], b[96], mtu[32], delay[32];
		const json_t *ea = json_object_get(l, "a"), *eb = json_object_get(l, "b");
		out_fmt(a, sizeof a, "%s:%s", json_string_value(json_object_get(ea, "namespace")),
			json_string_value(json_object_get(ea, "ifname")));
		out_fmt(b, sizeof b, "%s:%s", json_string_value(json_object_get(eb, "namespace")),
			json_string_value(json_object_get(eb, "ifname")));
		long long ma = json_integer_value(json_object_get(ea, "mtu"));
		long long mb = json_integer_value(json_object_get(eb, "mtu"));
		if (ma == mb)
			out_fmt(mtu, sizeof mtu, "%lld", ma);
		else
			out_fmt(mtu, sizeof mtu, "%lld/%lld", ma, mb);
		long long da = json_integer_value(json_object_get(ea, "delay_ms"));
		long long db = json_integer_value(json_object_get(eb, "delay_ms"));
		out_fmt(delay, sizeof delay, "%lld/%lld", da, db);
		const char *cells[] = {a, b, json_string_value(json_object_get(l, "kind")),
				       json_string_value(json_object_get(l, "state")), mtu,
				       da || db ? delay : NULL};
		out_table_row(t, cells);
	}
}

/* data: the node rows (or the descriptions with --links); none running is
 * said on stderr, with exit 0. */
void cli_text_sim_ls(const struct cli_answer *a)
{
	const struct cli_sim_ls_view *v = a->view;
	size_t i;
	json_t *d;
	if (json_array_size(v->descs) == 0) {
		fprintf(stderr, "no sim is running; start one with 'sparkctl sim up --nodes 4 --topology ring'\n");
	} else if (v->links) {
		static const char *const hdr[] = {"END A", "END B", "KIND", "STATE", "MTU", "DELAY MS"};
		out_table *t = out_table_new(6, hdr);
		json_array_foreach(v->descs, i, d)
			ls_links(d, t);
		out_table_print(t, stdout);
		out_table_free(t);
	} else {
		static const char *const hdr[] = {"NODE", "NAMESPACE", "AGENT PID", "AGENT", "ADDRESS"};
		out_table *t = out_table_new(5, hdr);
		json_array_foreach(a->data, i, d) {
			char pid[32];
			json_t *p = json_object_get(d, "agent_pid");
			const char *cells[] = {json_string_value(json_object_get(d, "name")),
					       json_string_value(json_object_get(d, "namespace")),
					       json_is_integer(p) ? out_fmt(pid, sizeof pid, "%lld",
									    json_integer_value(p))
								  : NULL,
					       json_string_value(json_object_get(d, "state")),
					       json_string_value(json_object_get(d, "address"))};
			out_table_row(t, cells);
		}
		out_table_print(t, stdout);
		out_table_free(t);
	}
}

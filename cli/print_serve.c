/* Text writers of recipes and serve (docs/serve.md): the recipe table, one
 * recipe, and a dry run's plan: every node's command and environment. */
#include "output.h"
#include "print.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static void print_words(const char *label, json_t *arr)
{
	printf("%-14s", label);
	size_t i;
	json_t *w;
	if (!json_array_size(arr))
		printf("-");
	json_array_foreach(arr, i, w)
		printf("%s%s", i ? " " : "", json_string_value(w));
	printf("\n");
}

static void recipe_text(json_t *j, const char *source)
{
	json_t *h = json_object_get(j, "health"), *rs = json_object_get(j, "restart");
	printf("%-14s%s\n", "Name:", cli_jstr(j, "name"));
	if (*cli_jstr(j, "description"))
		printf("%-14s%s\n", "Description:", cli_jstr(j, "description"));
	printf("%-14s%s\n", "Source:", source);
	printf("%-14s%s\n", "Runtime:", cli_jstr(j, "runtime"));
	printf("%-14s%s\n", "Model:", cli_jstr(j, "model"));
	char l[64];
	long long tp = cli_jnum(j, "tp"), pp = cli_jnum(j, "pp"), nodes = cli_jnum(j, "nodes");
	if (tp || nodes)
		snprintf(l, sizeof l, "tp %lld x pp %lld%s", tp ? tp : nodes / (pp ? pp : 1),
			 pp ? pp : 1, nodes ? "" : "");
	else
		snprintf(l, sizeof l, "every node of the group (tp = nodes / pp, pp %lld)",
			 pp ? pp : 1);
	printf("%-14s%s\n", "Layout:", l);
	printf("%-14s%lld (rendezvous %lld)\n", "Port:", cli_jnum(j, "port"),
	       cli_jnum(j, "master_port"));
	print_words("Args:", json_object_get(j, "args"));
	if (json_array_size(json_object_get(j, "command")))
		print_words("Command:", json_object_get(j, "command"));
	const char *k;
	json_t *v;
	printf("%-14s", "Env:");
	if (!json_object_size(json_object_get(j, "env")))
		printf("-");
	int first = 1;
	json_object_foreach(json_object_get(j, "env"), k, v) {
		printf("%s%s=%s", first ? "" : " ", k, json_string_value(v));
		first = 0;
	}
	printf("\n");
	printf("%-14sGET %s every %llds (timeout %llds), start-up timeout %llds\n", "Health:",
	       cli_jstr(h, "path"), cli_jnum(h, "interval_s"), cli_jnum(h, "timeout_s"),
	       cli_jnum(h, "startup_timeout_s"));
	json_t *m = json_object_get(j, "memory_gib");
	if (json_is_number(m))
		printf("%-14s%.1f GiB per node\n", "Memory:", json_number_value(m));
	else
		printf("%-14sauto (the planner computes it from the model)\n", "Memory:");
	printf("%-14s%s, at most %lld restarts, back-off %llds doubling to %llds\n", "Restart:",
	       cli_jstr(rs, "policy"), cli_jnum(rs, "limit"), cli_jnum(rs, "backoff_s"),
	       cli_jnum(rs, "backoff_max_s"));
}

/* A word as a POSIX shell would need it. */
static void print_shell_word(const char *w)
{
	bool plain = *w != '\0';
	for (const char *p = w; *p; p++)
		if (!(strchr("-_./:=,@+%", *p) || (*p >= '0' && *p <= '9') ||
		      (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
			plain = false;
	if (plain) {
		fputs(w, stdout);
		return;
	}
	putchar('\'');
	for (const char *p = w; *p; p++) {
		if (*p == '\'')
			fputs("'\\''", stdout);
		else
			putchar(*p);
	}
	putchar('\'');
}

static void plan_text(json_t *plan, const char *note)
{
	json_t *ep = json_object_get(plan, "endpoint"), *h = json_object_get(plan, "health");
	json_t *rs = json_object_get(plan, "restart"), *ad = json_object_get(plan, "admission");
	printf("Service:   %s (%s) on group %s: %lld node(s), tp %lld x pp %lld, topology %s\n",
	       cli_jstr(plan, "recipe"), cli_jstr(plan, "runtime"), cli_jstr(plan, "group"),
	       cli_jnum(plan, "nodes"), cli_jnum(plan, "tp"), cli_jnum(plan, "pp"),
	       cli_jstr(plan, "topology"));
	printf("Model:     %s\n", cli_jstr(plan, "model"));
	printf("Network:   %s\n", note);
	printf("Endpoint:  %s (management %s)\n", cli_jstr(ep, "url"), cli_jstr(ep, "management_url"));
	printf("Health:    GET %s on rank 0's node every %llds; start-up timeout %llds\n",
	       cli_jstr(h, "path"), cli_jnum(h, "interval_s"), cli_jnum(h, "startup_timeout_s"));
	printf("Restart:   %s, at most %lld restarts, back-off %llds to %llds\n",
	       cli_jstr(rs, "policy"), cli_jnum(rs, "limit"), cli_jnum(rs, "backoff_s"),
	       cli_jnum(rs, "backoff_max_s"));
	json_t *fits = json_object_get(ad, "fits");
	const char *src = cli_jstr(ad, "source");
	if (json_is_null(fits))
		printf("Memory:    not checked: %s\n", cli_jstr(ad, "why"));
	else if (strcmp(src, "planner") == 0)
		printf("Memory:    %s: %.1f GiB per node (weights %.1f + KV %.1f + overhead %.1f; %s, "
		       "%s, context %lld) of a %.0f GiB budget\n",
		       json_is_true(fits) ? "fits" : "DOES NOT FIT",
		       json_real_value(json_object_get(ad, "need_gib")),
		       json_real_value(json_object_get(ad, "weights_gib")),
		       json_real_value(json_object_get(ad, "kv_gib")),
		       json_real_value(json_object_get(ad, "overhead_gib")), cli_jstr(ad, "shape"),
		       cli_jstr(ad, "dtype"), cli_jnum(ad, "context"),
		       json_real_value(json_object_get(ad, "budget_gib")));
	else
		printf("Memory:    %s: %.1f GiB per node (the recipe's memory) of a %.0f GiB budget\n",
		       json_is_true(fits) ? "fits" : "DOES NOT FIT",
		       json_real_value(json_object_get(ad, "need_gib")),
		       json_real_value(json_object_get(ad, "budget_gib")));
	size_t i;
	json_t *rk;
	json_array_foreach(json_object_get(plan, "ranks"), i, rk) {
		printf("\nrank %lld  %s  %s  %s\n", cli_jnum(rk, "rank"), cli_jstr(rk, "node"),
		       cli_jstr(rk, "address"), cli_jstr(rk, "role"));
		json_t *argv = json_object_get(rk, "argv");
		if (json_is_array(argv)) {
			printf("  ");
			size_t k;
			json_t *w;
			json_array_foreach(argv, k, w) {
				if (k)
					putchar(' ');
				print_shell_word(json_string_value(w));
			}
			printf("\n");
		} else {
			printf("  (started by rank 0's mpirun through 'sparkctl exec')\n");
		}
		const char *key;
		json_t *v;
		json_object_foreach(json_object_get(rk, "env"), key, v) {
			printf("  %s=", key);
			print_shell_word(json_string_value(v));
			printf("\n");
		}
	}
}


void cli_text_recipe_ls(const struct cli_answer *a)
{
	json_t *arr = json_object_get(a->data, "recipes");
	static const char *const hdr[] = {"NAME", "RUNTIME", "MODEL", "SOURCE"};
	out_table *t = out_table_new(4, hdr);
	size_t i;
	json_t *o;
	json_array_foreach(arr, i, o) {
		const char *row[] = {cli_jstr(o, "name"), cli_jstr(o, "runtime"), cli_jstr(o, "model"),
				     cli_jstr(o, "source")};
		out_table_row(t, row);
	}
	out_table_print(t, stdout);
	out_table_free(t);
	json_array_foreach(arr, i, o)
		if (json_is_string(json_object_get(o, "error")))
			fprintf(stderr, "sparkctl: %s\n", cli_jstr(o, "error"));
}

void cli_text_recipe_show(const struct cli_answer *a)
{
	recipe_text(a->data, cli_jstr(a->data, "source"));
}

static void svc_line(json_t *o)
{
	json_t *run = json_object_get(o, "run");
	printf("service %s: %s", cli_jstr(o, "name"), cli_jstr(o, "state"));
	if (json_is_integer(run))
		printf(" (run: job %lld)", (long long)json_integer_value(run));
	const char *wait = json_string_value(json_object_get(o, "waiting_for"));
	if (wait)
		printf(", waiting for %s to be ready", wait);
	printf("\n");
	if (strcmp(cli_jstr(o, "state"), "waiting") == 0)
		printf("%s\n", cli_jstr(o, "last_error"));
	if (json_is_string(json_object_get(o, "note")))
		printf("%s\n", cli_jstr(o, "note"));
}

/* serve: the plan (--dry-run), or the service it started */
void cli_text_serve(const struct cli_answer *a)
{
	if (json_object_get(a->data, "ranks")) {
		plan_text(a->data, cli_jstr(a->data, "network_note"));
		return;
	}
	svc_line(a->data);
	json_t *ep = json_object_get(a->data, "endpoint");
	printf("Endpoint: %s (management %s) once ready\n", cli_jstr(ep, "url"),
	       cli_jstr(ep, "management_url"));
	size_t i;
	json_t *n;
	json_array_foreach(json_object_get(json_object_get(a->data, "admission"), "nodes"), i, n) {
		json_t *b = json_object_get(n, "budget_gib");
		if (json_is_number(b))
			printf("Memory on %s: needs %.1f GiB; %.1f GiB of a %.1f GiB budget placed "
			       "before%s\n", cli_jstr(n, "node"), json_number_value(json_object_get(n, "need_gib")),
			       json_number_value(json_object_get(n, "used_gib")), json_number_value(b),
			       json_is_false(json_object_get(n, "fits")) ? " (OVER: --force)" : "");
		else
			printf("Memory on %s: not checked (the node reports no budget)\n",
			       cli_jstr(n, "node"));
	}
	printf("Follow it with 'sparkctl svc show %s' or 'sparkctl svc logs %s -f'.\n",
	       cli_jstr(a->data, "name"), cli_jstr(a->data, "name"));
}

static void models_cell(json_t *ep, char *buf, size_t len)
{
	size_t o = 0, i;
	json_t *m;
	buf[0] = '\0';
	json_array_foreach(json_object_get(ep, "models"), i, m)
		if (o < len)
			o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? "," : "", json_string_value(m));
	if (!buf[0])
		snprintf(buf, len, "-");
}

void cli_text_svc_ls(const struct cli_answer *a)
{
	json_t *arr = json_object_get(a->data, "services");
	if (!json_array_size(arr)) {
		printf("no services; start one with 'sparkctl serve RECIPE --group G'\n");
		return;
	}
	static const char *const hdr[] = {"NAME", "GROUP", "STATE", "RUNTIME", "RUN", "ENDPOINT",
					  "MODELS"};
	out_table *t = out_table_new(7, hdr);
	size_t i;
	json_t *o;
	json_array_foreach(arr, i, o) {
		char run[32], models[256];
		json_t *r = json_object_get(o, "run"), *ep = json_object_get(o, "endpoint");
		out_fmt(run, sizeof run, "%s", "-");
		if (json_is_integer(r))
			out_fmt(run, sizeof run, "%lld", (long long)json_integer_value(r));
		models_cell(ep, models, sizeof models);
		const char *row[] = {cli_jstr(o, "name"), cli_jstr(o, "group"), cli_jstr(o, "state"),
				     cli_jstr(o, "runtime"), run, cli_jstr(ep, "url"), models};
		out_table_row(t, row);
	}
	out_table_print(t, stdout);
	out_table_free(t);
}

void cli_text_svc_show(const struct cli_answer *a)
{
	json_t *o = a->data, *ep = json_object_get(o, "endpoint"), *rs = json_object_get(o, "restart");
	char models[256];
	models_cell(ep, models, sizeof models);
	json_t *run = json_object_get(o, "run");
	printf("%-14s%s\n", "Name:", cli_jstr(o, "name"));
	printf("%-14s%s\n", "State:", cli_jstr(o, "state"));
	if (json_is_string(json_object_get(o, "waiting_for")))
		printf("%-14swaits for %s (a shared node) to be ready\n", "", cli_jstr(o, "waiting_for"));
	printf("%-14s%s\n", "Group:", cli_jstr(o, "group"));
	printf("%-14s%s (recipe %s)\n", "Runtime:", cli_jstr(o, "runtime"), cli_jstr(o, "recipe"));
	json_t *mc = json_object_get(o, "model_copy");
	printf("%-14s%s%s\n", "Model:", cli_jstr(o, "model"), mc ? " (each node's store)" : "");
	size_t i;
	json_t *n;
	json_array_foreach(json_object_get(mc, "nodes"), i, n) {
		if (!json_is_string(json_object_get(n, "path"))) {
			printf("%-14s%s: not in its store (a folder of that name where serve ran, if any)\n",
			       "", cli_jstr(n, "node"));
			continue;
		}
		printf("%-14s%s: %s, version %s%s%s\n", "", cli_jstr(n, "node"), cli_jstr(n, "path"),
		       cli_jstr(n, "version"), json_is_true(json_object_get(n, "complete")) ? "" : " (partial)",
		       json_is_true(json_object_get(n, "run_started_before"))
			   ? "; changed after the run started: the run serves the version before"
			   : "");
		if (json_is_true(json_object_get(n, "run_started_before")))
			printf("%-14s('sparkctl svc restart %s' moves it to this one)\n", "",
			       cli_jstr(o, "name"));
	}
	printf("%-14s%s\n", "Owner:", cli_jstr(o, "owner"));
	if (json_is_integer(run))
		printf("%-14sjob %lld\n", "Run:", (long long)json_integer_value(run));
	else if (cli_jnum(o, "last_run"))
		printf("%-14snone (last: job %lld)\n", "Run:", cli_jnum(o, "last_run"));
	else
		printf("%-14snone\n", "Run:");
	printf("%-14s%s (management %s)\n", "Endpoint:", cli_jstr(ep, "url"),
	       cli_jstr(ep, "management_url"));
	printf("%-14s%s\n", "Models:", models);
	printf("%-14s%lld restarts, %lld failed in a row; %s, at most %lld, back-off %llds to %llds\n",
	       "Restarts:", cli_jnum(o, "restarts"), cli_jnum(o, "failures"), cli_jstr(rs, "policy"),
	       cli_jnum(rs, "limit"), cli_jnum(rs, "backoff_s"), cli_jnum(rs, "backoff_max_s"));
	if (*cli_jstr(o, "last_error") && strcmp(cli_jstr(o, "last_error"), "-") != 0)
		printf("%-14s%s\n", "Last error:", cli_jstr(o, "last_error"));
	printf("%-14s%s\n", "Updated:", cli_jstr(o, "updated_at"));
	if (json_is_true(json_object_get(o, "forced")))
		printf("%-14sadmitted over a node's memory budget (--force)\n", "Memory:");
	static const char *const hdr[] = {"RANK", "NODE", "NEED"};
	out_table *t = out_table_new(3, hdr);
	json_array_foreach(json_object_get(o, "nodes"), i, n) {
		char rank[16], need[32];
		out_fmt(rank, sizeof rank, "%lld", cli_jnum(n, "rank"));
		out_fmt(need, sizeof need, "%.1f GiB", json_number_value(json_object_get(n, "need_gib")));
		const char *row[] = {rank, cli_jstr(n, "node"), need};
		out_table_row(t, row);
	}
	printf("\n");
	out_table_print(t, stdout);
	out_table_free(t);
}

/* svc stop|restart|rm: one line */
void cli_text_svc_change(const struct cli_answer *a)
{
	svc_line(a->data);
}

/* Text writers of the model store and model push (docs/models.md): which
 * models a node holds, rm and verify, and a push's per-node table. */
#include "output.h"
#include "print.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static void fmt_bytes(long long b, char *buf, size_t len)
{
	if (b >= 1073741824LL)
		snprintf(buf, len, "%.1f GiB", b / 1073741824.0);
	else if (b >= 1048576LL)
		snprintf(buf, len, "%.1f MiB", b / 1048576.0);
	else
		snprintf(buf, len, "%lld B", b);
}

/* One node's models as rows (node first when the table has that column). */
static void ls_rows(out_table *t, const char *node, json_t *models)
{
	size_t i;
	json_t *m;
	json_array_foreach(models, i, m) {
		char files[48], size[32], pushed[32], fin[32];
		if (json_is_true(json_object_get(m, "complete")))
			snprintf(files, sizeof files, "%lld", cli_jnum(m, "files"));
		else
			snprintf(files, sizeof files, "%lld/%lld", cli_jnum(m, "files_complete"),
				 cli_jnum(m, "files"));
		fmt_bytes(cli_jnum(m, "bytes"), size, sizeof size);
		out_fmt_utc(cli_jnum(m, "pushed_at"), "-", pushed, sizeof pushed);
		out_fmt_utc(cli_jnum(m, "finished_at"), "-", fin, sizeof fin);
		const char *state = json_is_true(json_object_get(m, "complete")) ? "complete" : "partial";
		const char *with[] = {node, cli_jstr(m, "name"), files, size, state, pushed, fin};
		out_table_row(t, node ? with : with + 1);
	}
}

void cli_text_model_ls(const struct cli_answer *a)
{
	json_t *nodes = json_object_get(a->data, "nodes");
	if (!nodes) { /* one node in no cluster: its own store */
		static const char *const hdr[] = {"NAME", "FILES", "SIZE", "STATE", "PUSHED",
						  "FINISHED"};
		json_t *models = json_object_get(a->data, "models");
		if (json_array_size(models) == 0) {
			printf("No models on %s (%s).\n", cli_jstr(a->data, "node"),
			       cli_jstr(a->data, "dir"));
			return;
		}
		out_table *t = out_table_new(6, hdr);
		ls_rows(t, NULL, models);
		out_table_print(t, stdout);
		out_table_free(t);
		return;
	}
	static const char *const hdr[] = {"NODE", "NAME", "FILES", "SIZE", "STATE", "PUSHED",
					  "FINISHED"};
	out_table *t = out_table_new(7, hdr);
	size_t i, rows = 0;
	json_t *n;
	json_array_foreach(nodes, i, n) {
		rows += json_array_size(json_object_get(n, "models"));
		ls_rows(t, cli_jstr(n, "node"), json_object_get(n, "models"));
	}
	if (rows)
		out_table_print(t, stdout);
	out_table_free(t);
	json_array_foreach(nodes, i, n)
		if (json_array_size(json_object_get(n, "models")) == 0 &&
		    !json_is_string(json_object_get(n, "error")))
			printf("No models on %s (%s).\n", cli_jstr(n, "node"), cli_jstr(n, "dir"));
}

void cli_text_model_rm(const struct cli_answer *a)
{
	json_t *nodes = json_object_get(a->data, "nodes");
	if (!nodes) {
		printf("Model %s removed from %s.\n", cli_jstr(a->data, "name"),
		       cli_jstr(a->data, "node"));
		return;
	}
	size_t i;
	json_t *n;
	json_array_foreach(nodes, i, n)
		if (json_is_true(json_object_get(n, "removed")))
			printf("Model %s removed from %s.\n", cli_jstr(a->data, "name"),
			       cli_jstr(n, "node"));
}

void cli_text_model_verify(const struct cli_answer *a)
{
	char size[32];
	fmt_bytes(cli_jnum(a->data, "bytes"), size, sizeof size);
	json_t *bad = json_object_get(a->data, "problems");
	if (json_array_size(bad) == 0) {
		printf("%s on %s: %lld files, %s, every chunk matches its SHA-256.\n",
		       cli_jstr(a->data, "name"), cli_jstr(a->data, "node"),
		       cli_jnum(a->data, "files"), size);
		return;
	}
	static const char *const hdr[] = {"PATH", "CHUNK", "PROBLEM"};
	out_table *t = out_table_new(3, hdr);
	size_t i;
	json_t *p;
	json_array_foreach(bad, i, p) {
		char chunk[32];
		if (cli_jnum(p, "chunk") < 0)
			snprintf(chunk, sizeof chunk, "-");
		else
			snprintf(chunk, sizeof chunk, "%lld", cli_jnum(p, "chunk"));
		const char *row[] = {cli_jstr(p, "path"), chunk, cli_jstr(p, "problem")};
		out_table_row(t, row);
	}
	out_table_print(t, stdout);
	out_table_free(t);
}

void cli_text_model_push(const struct cli_answer *a)
{
	char size[32];
	fmt_bytes(cli_jnum(a->data, "bytes"), size, sizeof size);
	if (json_is_true(json_object_get(a->data, "dry_run"))) {
		printf("Would push %s (%lld files, %s, %lld chunks of SHA-256) along:\n",
		       cli_jstr(a->data, "name"), cli_jnum(a->data, "files"), size,
		       cli_jnum(a->data, "chunks"));
		size_t i;
		json_t *n;
		json_array_foreach(json_object_get(a->req, "chain"), i, n) {
			char via[128] = "";
			json_t *lanes = json_object_get(n, "lanes");
			if (i > 0 && json_array_size(lanes) > 0)
				snprintf(via, sizeof via, "  fabric %s%s%s",
					 json_string_value(json_array_get(lanes, 0)),
					 json_array_size(lanes) > 1 ? " + " : "",
					 json_array_size(lanes) > 1
					     ? json_string_value(json_array_get(lanes, 1)) : "");
			else if (i > 0)
				snprintf(via, sizeof via, "  %s (no fabric address)", cli_jstr(n, "host"));
			printf("  %zu. %s%s%s\n", i, cli_jstr(n, "name"), i == 0 ? "  source" : "", via);
		}
		printf("Each node receives only the chunks it lacks, from the node before it%s.\n",
		       !strcmp(cli_jstr(a->req, "network"), "fabric")
			   ? ", over the fabric"
			   : ", over the fabric where the two reach each other there, else over the\n"
			     "address it joined with");
		return;
	}
	static const char *const hdr[] = {"NODE", "STATUS", "WRITTEN", "BAD CHUNKS", "MESSAGE"};
	out_table *t = out_table_new(5, hdr);
	size_t i;
	json_t *n;
	json_array_foreach(json_object_get(a->data, "nodes"), i, n) {
		char w[32], bad[32];
		if (cli_jnum(n, "bytes_written") < 0)
			snprintf(w, sizeof w, "-");
		else
			fmt_bytes(cli_jnum(n, "bytes_written"), w, sizeof w);
		snprintf(bad, sizeof bad, "%lld", cli_jnum(n, "chunks_bad") < 0 ? 0 : cli_jnum(n, "chunks_bad"));
		const char *nm = json_is_string(json_object_get(n, "name")) ? cli_jstr(n, "name")
									    : cli_jstr(n, "node");
		const char *msg = cli_jstr(n, "message");
		const char *row[] = {nm, cli_jstr(n, "status"), w, bad, msg[0] ? msg : "-"};
		out_table_row(t, row);
	}
	out_table_print(t, stdout);
	out_table_free(t);
	/* chunks that failed their hash and were fetched again */
	json_array_foreach(json_object_get(a->data, "nodes"), i, n) {
		const char *nm = json_is_string(json_object_get(n, "name")) ? cli_jstr(n, "name")
									    : cli_jstr(n, "node");
		size_t k;
		json_t *r;
		json_array_foreach(json_object_get(n, "repairs"), k, r) {
			char bad[160] = "";
			if (json_is_string(json_object_get(r, "bad_from_name")))
				snprintf(bad, sizeof bad, " from %s", cli_jstr(r, "bad_from_name"));
			printf("Repaired on %s: %s chunk %lld, %s%s; fetched again from %s.\n", nm,
			       cli_jstr(r, "path"), cli_jnum(r, "chunk"), cli_jstr(r, "problem"), bad,
			       cli_jstr(r, "from_name"));
		}
	}
	double secs = json_real_value(json_object_get(a->data, "seconds"));
	const char *net = cli_jstr(a->data, "network");
	printf("%s: %lld files, %s, in %.1f s%s (%s).\n", cli_jstr(a->data, "name"),
	       cli_jnum(a->data, "files"), size, secs,
	       json_is_true(json_object_get(a->data, "complete")) ? ", complete on every node" : "",
	       !strcmp(net, "fabric") ? "over the fabric"
	       : !strcmp(net, "mixed") ? "over the fabric where nodes reach each other there, else "
					 "their agent addresses"
				       : "over the nodes' agent addresses: no fabric address between them");
	/* the new files stand beside the old ones: running servers keep theirs */
	json_array_foreach(json_object_get(a->data, "services_on_old_version"), i, n) {
		char nodes[512] = "";
		size_t k, off = 0;
		json_t *v;
		json_array_foreach(json_object_get(n, "nodes"), k, v)
			off += (size_t)snprintf(nodes + off, off < sizeof nodes ? sizeof nodes - off : 0,
						"%s%s", k ? ", " : "", json_string_value(v));
		printf("Service %s still serves the version of %s it started with on %s (its "
		       "processes keep the replaced files open); 'sparkctl svc restart %s' moves it to "
		       "this one.\n",
		       cli_jstr(n, "name"), cli_jstr(a->data, "name"), nodes, cli_jstr(n, "name"));
	}
}

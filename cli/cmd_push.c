/* cmd_push: `sparkctl model ls|rm|verify` (issue 18, docs/models.md): the
 * models the local node holds in its store, served by its sparkd's `model`
 * service (agent/model.c). `model push` itself is not built yet. The text
 * writers of these answers are here too (declared in commands.c). */
#include "cli.h"
#include "output.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define VERIFY_TIMEOUT_MS (12u * 3600 * 1000) /* re-hashing hundreds of GB takes minutes */

void cli_text_model_ls(const struct cli_answer *a);
void cli_text_model_rm(const struct cli_answer *a);
void cli_text_model_verify(const struct cli_answer *a);

static void fmt_bytes(long long b, char *buf, size_t len)
{
	if (b >= 1073741824LL)
		snprintf(buf, len, "%.1f GiB", b / 1073741824.0);
	else if (b >= 1048576LL)
		snprintf(buf, len, "%.1f MiB", b / 1048576.0);
	else
		snprintf(buf, len, "%lld B", b);
}

static void fmt_when(long long ts, char *buf, size_t len)
{
	if (ts <= 0) {
		snprintf(buf, len, "-");
		return;
	}
	time_t t = (time_t)ts;
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(buf, len, "%Y-%m-%d %H:%M:%SZ", &tm);
}

/* NAME: one argument, no options (--help is handled by the command table). */
static int one_name(struct cli_ctx *ctx, int argc, char **argv, const char **name)
{
	static const struct option lo[] = {CLI_OPT_END};
	int rc = 0, c;
	optind = 0;
	while ((c = cli_next_opt(ctx, argc, argv, lo, &rc)) != -1)
		if (c == -2)
			return rc;
	if (optind >= argc)
		return cli_usage(ctx, "missing model NAME (see 'sparkctl model ls')");
	if (optind + 1 < argc)
		return cli_usage(ctx, "unexpected argument '%s'", argv[optind + 1]);
	*name = argv[optind];
	return 0;
}

int cmd_model_ls(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {CLI_OPT_END};
	int rc = 0, c;
	optind = 0;
	while ((c = cli_next_opt(ctx, argc, argv, lo, &rc)) != -1)
		if (c == -2)
			return rc;
	if (optind < argc)
		return cli_usage(ctx, "unexpected argument '%s'", argv[optind]);
	return cli_request(ctx, "model_ls", NULL, 0, NULL);
}

int cmd_model_rm(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *name = NULL;
	int r = one_name(ctx, argc, argv, &name);
	if (r)
		return r;
	return cli_request(ctx, "model_rm", json_pack("{s:s}", "name", name), 0, NULL);
}

int cmd_model_verify(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *name = NULL;
	int r = one_name(ctx, argc, argv, &name);
	if (r)
		return r;
	json_t *ans = NULL;
	r = cli_request(ctx, "model_verify", json_pack("{s:s}", "name", name), VERIFY_TIMEOUT_MS,
			&ans);
	if (r)
		return r;
	size_t bad = json_array_size(json_object_get(ans, "problems"));
	if (bad)
		r = cli_fail("%s on %s: %zu damaged or missing part%s; remove it ('sparkctl model rm "
			     "%s') and copy it again", name, cli_jstr(ans, "node"), bad,
			     bad == 1 ? "" : "s", name);
	json_decref(ans);
	return r;
}

/* ---- writers ---- */

void cli_text_model_ls(const struct cli_answer *a)
{
	static const char *const hdr[] = {"NAME", "FILES", "SIZE", "STATE", "PUSHED", "FINISHED"};
	json_t *models = json_object_get(a->data, "models");
	if (json_array_size(models) == 0) {
		printf("No models on %s (%s).\n", cli_jstr(a->data, "node"), cli_jstr(a->data, "dir"));
		return;
	}
	out_table *t = out_table_new(6, hdr);
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
		fmt_when(cli_jnum(m, "pushed_at"), pushed, sizeof pushed);
		fmt_when(cli_jnum(m, "finished_at"), fin, sizeof fin);
		const char *row[] = {cli_jstr(m, "name"), files, size,
				     json_is_true(json_object_get(m, "complete")) ? "complete"
										 : "partial",
				     pushed, fin};
		out_table_row(t, row);
	}
	out_table_print(t, stdout);
	out_table_free(t);
}

void cli_text_model_rm(const struct cli_answer *a)
{
	printf("Model %s removed from %s.\n", cli_jstr(a->data, "name"), cli_jstr(a->data, "node"));
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

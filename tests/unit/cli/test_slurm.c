/* `sparkctl export slurm`'s renderer (cli/slurm.c) against expected files:
 * for each case NAME, slurm/NAME.model.json (the model slurm.h describes)
 * must render exactly slurm/NAME.sparkctl.conf, NAME.gres.conf,
 * NAME.topology.conf (absent: no topology file) and NAME.task-prolog.sh
 * (absent: not compared). SLURM_REGEN=1 writes them instead (review by eye). */
#include "slurm.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return NULL;
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	int c;
	while ((c = fgetc(f)) != EOF)
		fputc(c, m);
	fclose(m);
	fclose(f);
	return buf;
}

static void check(const char *name, const char *suffix, const char *got, bool optional)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s.%s", SLURM_CASES, name, suffix);
	if (getenv("SLURM_REGEN")) {
		if (got) {
			FILE *f = fopen(path, "we");
			cr_assert(f, "%s", path);
			fputs(got, f);
			fclose(f);
		} else {
			remove(path);
		}
		return;
	}
	char *want = slurp(path);
	if (!want && optional && got)
		return;
	if (!want) {
		cr_expect_null(got, "%s: no %s expected, got:\n%s", name, suffix, got);
		return;
	}
	cr_expect(got && strcmp(got, want) == 0, "%s.%s differs\n--- expected\n%s\n--- got\n%s", name,
		  suffix, want, got ? got : "(none)");
	free(want);
}

static void run_case(const char *name)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s.model.json", SLURM_CASES, name);
	json_error_t e;
	json_t *m = json_load_file(path, 0, &e);
	cr_assert(m, "%s: %s", path, e.text);
	struct slurm_files f;
	char err[256];
	cr_assert_eq(slurm_render(m, &f, err, sizeof err), 0, "%s: %s", name, err);
	check(name, "sparkctl.conf", f.slurm_conf, false);
	check(name, "gres.conf", f.gres_conf, false);
	check(name, "topology.conf", f.topology_conf, false);
	check(name, "task-prolog.sh", f.task_prolog, true);
	/* the same model, the same text: a re-export is a diff of what changed */
	struct slurm_files g;
	cr_assert_eq(slurm_render(m, &g, err, sizeof err), 0);
	cr_expect_str_eq(g.slurm_conf, f.slurm_conf);
	slurm_files_free(&g);
	slurm_files_free(&f);
	json_decref(m);
}

Test(slurm, pair) { run_case("pair"); }
Test(slurm, ring4_two_groups) { run_case("ring4"); }
Test(slurm, switch4_two_groups) { run_case("switch4"); }
Test(slurm, switch8) { run_case("switch8"); }
Test(slurm, ring4_drained_node) { run_case("drained"); }

/* What cannot be written for Slurm is refused, with the reason. */
static void refused(const char *json, const char *why)
{
	json_t *m = json_loads(json, 0, NULL);
	cr_assert(m, "%s", json);
	struct slurm_files f;
	char err[256] = "";
	cr_expect_lt(slurm_render(m, &f, err, sizeof err), 0, "%s", json);
	cr_expect(strstr(err, why) != NULL, "'%s' should say '%s'", err, why);
	json_decref(m);
}

Test(slurm, refusals)
{
	refused("{\"nodes\":[]}", "1 to 64");
	refused("{\"nodes\":[{\"name\":\"a b\"}]}", "cannot be written");
	refused("{\"nodes\":[{\"name\":\"a\",\"address\":\"x;y\"}]}", "cannot be written");
	refused("{\"nodes\":[{\"name\":\"a\"}],\"groups\":[{\"name\":\"g\\nPartitionName=x\"}]}",
		"partition name");
	refused("{\"nodes\":[{\"name\":\"a\"}],\"task_prolog\":\"rel/path\"}", "absolute path");
	refused("{\"nodes\":[{\"name\":\"a\"}],\"sparkctl\":\"/x'; rm -rf /'\"}", "absolute path");
	refused("{\"nodes\":[{\"name\":\"a\"}],\"gpu_device\":\"\"}", "absolute path");
}

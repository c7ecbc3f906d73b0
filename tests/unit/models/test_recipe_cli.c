/* sparkctl recipe ls|show and serve --dry-run --layout end to end (no
 * cluster): the JSON keys docs/serve.md documents, user recipe directories,
 * errors with file:line:column, exit codes 0/1/2 and the stderr line. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_run.h"

static char dir[64];
static char env[128]; /* HOME in dir, no recipe dir from the environment */

static void mkdirs(void)
{
	snprintf(dir, sizeof dir, "/tmp/recipe-cli.%d", (int)getpid());
	mkdir(dir, 0755);
	snprintf(env, sizeof env, "HOME=%s SPARKCTL_RECIPE_DIR=", dir);
}

static void put(const char *name, const char *text)
{
	char p[256];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	FILE *f = fopen(p, "w");
	cr_assert(f);
	fputs(text, f);
	fclose(f);
}

static void cleanup(void)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
}

static const char *js(json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }

TestSuite(recipe_cli, .init = mkdirs, .fini = cleanup);

Test(recipe_cli, ls_lists_the_builtins_and_user_recipes_first)
{
	char args[256];
	json_t *j = cli_run_json(env, "recipe ls -o json", 0);
	json_t *rs = json_object_get(j, "recipes");
	cr_assert_eq(json_array_size(rs), 6);
	static const char *const keys[] = {"name", "runtime", "model", "description", "source"};
	for (size_t i = 0; i < 5; i++)
		cr_assert(json_object_get(json_array_get(rs, 0), keys[i]), "key %s", keys[i]);
	cr_assert_str_eq(js(json_array_get(rs, 0), "source"), "built-in");
	json_decref(j);
	/* a user recipe named like a built-in replaces it */
	put("vllm.yaml", "name: vllm\nruntime: vllm\nmodel: org/Mine\n");
	snprintf(args, sizeof args, "recipe ls --recipe-dir %s -o json", dir);
	j = cli_run_json(env, args, 0);
	rs = json_object_get(j, "recipes");
	cr_assert_eq(json_array_size(rs), 6);
	cr_assert_str_eq(js(json_array_get(rs, 0), "model"), "org/Mine");
	json_decref(j);
}

Test(recipe_cli, a_broken_user_recipe_is_named_with_its_line)
{
	put("bad.yaml", "name: bad\nruntime: vllm\nmodel: x\nport: 99999\n");
	char args[256], *out;
	snprintf(args, sizeof args, "recipe ls --recipe-dir %s", dir);
	cr_assert_eq(cli_run(env, args, &out, 1), 1, "%s", out);
	cr_assert(strstr(out, "bad.yaml:4:1: port: expected a whole number from 1 to 65535"), "%s",
		  out);
	free(out);
	snprintf(args, sizeof args, "serve bad --recipe-dir %s --layout /dev/null --dry-run", dir);
	cr_assert_eq(cli_run(env, args, &out, 1), 1, "%s", out);
	cr_assert(strstr(out, "bad.yaml:4:1: port:"), "%s", out);
	free(out);
}

Test(recipe_cli, show_fills_defaults_and_applies_set)
{
	json_t *j = cli_run_json(env, "recipe show sglang --set tp=2 --set env.HF_HOME=/d -o json", 0);
	cr_assert_str_eq(js(j, "runtime"), "sglang");
	cr_assert_eq(json_integer_value(json_object_get(j, "tp")), 2);
	cr_assert_eq(json_integer_value(json_object_get(j, "port")), 30000);
	cr_assert_str_eq(js(json_object_get(j, "env"), "HF_HOME"), "/d");
	cr_assert_str_eq(js(json_object_get(j, "restart"), "policy"), "on-failure");
	cr_assert_eq(json_integer_value(json_object_get(json_object_get(j, "health"),
							"startup_timeout_s")),
		     3600);
	json_decref(j);
	/* --yaml prints a file that parses back to the same recipe */
	char *out;
	cr_assert_eq(cli_run(env, "recipe show llamacpp --yaml", &out, 0), 0);
	put("copy.yaml", out);
	free(out);
	char args[256];
	snprintf(args, sizeof args, "recipe show %s/copy.yaml -o json", dir);
	j = cli_run_json(env, args, 0);
	cr_assert_str_eq(js(j, "runtime"), "llamacpp");
	cr_assert_eq(json_integer_value(json_object_get(j, "rpc_port")), 50052);
	json_decref(j);
	cr_assert_eq(cli_run(env, "recipe show nosuch", &out, 1), 2);
	cr_assert(strstr(out, "no recipe 'nosuch'"), "%s", out);
	free(out);
	cr_assert_eq(cli_run(env, "recipe show vllm --set tp=zero", &out, 1), 1);
	cr_assert(strstr(out, "--set tp=zero: expected a whole number"), "%s", out);
	free(out);
}

static const char layout2[] =
    "{\"group\": \"duo\", \"topology\": \"switch\", \"members\": ["
    "{\"name\": \"spark-1\", \"address\": \"169.254.20.1\", \"mgmt_address\": \"169.254.100.1\","
    " \"ifname\": \"enp1s0f1np1\", \"hcas\": \"rocep1s0f1\"},"
    "{\"name\": \"spark-2\", \"address\": \"169.254.20.2\", \"mgmt_address\": \"169.254.100.2\","
    " \"ifname\": \"enp1s0f0np0\"}]}";

Test(recipe_cli, serve_dry_run_plan_and_admission)
{
	put("duo.json", layout2);
	char args[512];
	snprintf(args, sizeof args, "serve vllm --layout %s/duo.json --dry-run -o json", dir);
	json_t *j = cli_run_json(env, args, 0);
	static const char *const keys[] = {
	    "recipe", "runtime", "model", "group", "topology", "net", "nodes", "tp", "pp",
	    "port", "master_addr", "master_port", "endpoint", "health", "restart", "ranks",
	    "source", "network_note", "admission", "forced"};
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		cr_assert(json_object_get(j, keys[i]), "key %s", keys[i]);
	json_t *r1 = json_array_get(json_object_get(j, "ranks"), 1);
	cr_assert_str_eq(js(r1, "role"), "headless");
	cr_assert_str_eq(js(json_object_get(r1, "env"), "VLLM_HOST_IP"), "169.254.20.2");
	cr_assert_str_eq(js(json_object_get(r1, "env"), "GLOO_SOCKET_IFNAME"), "enp1s0f0np0");
	json_t *ad = json_object_get(j, "admission");
	cr_assert_str_eq(js(ad, "source"), "planner");
	cr_assert_str_eq(js(ad, "shape"), "catalog shape llama-3.3-70b");
	cr_assert(json_is_true(json_object_get(ad, "fits")));
	json_decref(j);

	/* a model that does not fit on 2: exit 1 with the node count it needs */
	char *out;
	snprintf(args, sizeof args,
		 "serve vllm --layout %s/duo.json --dry-run --set model=meta-llama/Llama-3.1-405B", dir);
	cr_assert_eq(cli_run(env, args, &out, 1), 1, "%s", out);
	cr_assert(strstr(out, "DOES NOT FIT"), "%s", out);
	cr_assert(strstr(out, "it would on 8: use a group of 8, or --force"), "%s", out);
	free(out);
	strncat(args, " --force", sizeof args - strlen(args) - 1);
	cr_assert_eq(cli_run(env, args, &out, 1), 0, "%s", out);
	free(out);
	/* the recipe's own memory figure */
	snprintf(args, sizeof args, "serve vllm --layout %s/duo.json --dry-run --set memory=120", dir);
	cr_assert_eq(cli_run(env, args, &out, 1), 1, "%s", out);
	cr_assert(strstr(out, "the recipe's memory, 120.0 GiB per node, is over the 102 GiB"), "%s",
		  out);
	free(out);
	/* a recipe larger than the group */
	snprintf(args, sizeof args, "serve sglang --layout %s/duo.json --dry-run --set tp=4", dir);
	cr_assert_eq(cli_run(env, args, &out, 1), 1, "%s", out);
	cr_assert(strstr(out, "needs 4 nodes; group duo has 2"), "%s", out);
	free(out);
}

Test(recipe_cli, serve_usage_errors_exit_2)
{
	char *out;
	/* a layout file only renders (serve without --dry-run starts a service) */
	cr_assert_eq(cli_run(env, "serve vllm --layout l.json", &out, 1), 2, "%s", out);
	cr_assert(strstr(out, "add --dry-run"), "%s", out);
	free(out);
	cr_assert_eq(cli_run(env, "serve vllm --dry-run", &out, 1), 2, "%s", out);
	cr_assert(strstr(out, "add --group G"), "%s", out);
	free(out);
	cr_assert_eq(cli_run(env, "serve --group g --dry-run", &out, 1), 2, "%s", out);
	free(out);
	cr_assert_eq(cli_run(env, "serve vllm --group g --dry-run --set novalue", &out, 1), 2, "%s", out);
	free(out);
	cr_assert_eq(cli_run(env, "serve --help", &out, 0), 0);
	cr_assert(strstr(out, "--dry-run"), "%s", out);
	free(out);
	/* no sparkd: exit 1 with the socket named */
	cr_assert_eq(cli_run(env, "serve vllm --group g --dry-run", &out, 1), 1, "%s", out);
	free(out);
}

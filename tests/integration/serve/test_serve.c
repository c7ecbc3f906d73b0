/* sparkctl serve --dry-run in simulated clusters (issue 19, docs/serve.md):
 * the plan is built from what the head knows (group_show, node_show), so on a
 * switch with fabric addresses every node gets its own fabric address and
 * interface names (one node cabled on the other port index), and on a 4-ring
 * without a common subnet the sockets go to the management network with the
 * ring-only NCCL settings. Needs root (skips otherwise). */
#include "sim_harness.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *js(json_t *o, const char *k)
{
	const char *v = json_string_value(json_object_get(o, k));
	return v ? v : "(unset)";
}

static json_t *rank_of(json_t *plan, int r)
{
	return json_array_get(json_object_get(plan, "ranks"), (size_t)r);
}

static const char *env_of(json_t *plan, int r, const char *k)
{
	return js(json_object_get(rank_of(plan, r), "env"), k);
}

/* argv of rank r joined with spaces (static buffer). */
static const char *argv_of(json_t *plan, int r)
{
	static char buf[4096];
	buf[0] = '\0';
	size_t i;
	json_t *w;
	json_array_foreach(json_object_get(rank_of(plan, r), "argv"), i, w) {
		strncat(buf, i ? " " : "", sizeof buf - strlen(buf) - 1);
		strncat(buf, json_string_value(w), sizeof buf - strlen(buf) - 1);
	}
	return buf;
}

Test(serve, dry_run_switch_fabric_addresses_each_node_its_own_names, .timeout = 150)
{
	struct sh_sim s;
	sh_cluster_up(&s, "ssw", 4, SIM_SWITCH, "serve");
	sh_wait_reports(&s, 4, true);
	sh_switch_rails(&s); /* node 3 on port 0, the others on port 1; twin rails */
	/* from a worker: the head answers group_show and node_show */
	json_t *plan = sh_ctl_json(&s, 2, "serve", "vllm", "--group", "all", "--dry-run", NULL);
	cr_assert(plan, "serve --dry-run failed");
	cr_expect_str_eq(js(plan, "net"), "fabric");
	cr_expect_str_eq(js(plan, "topology"), "switch");
	cr_expect_str_eq(js(plan, "master_addr"), "169.254.20.1");
	cr_expect_str_eq(js(json_object_get(plan, "endpoint"), "url"), "http://169.254.20.1:8000");
	cr_expect_str_eq(js(json_object_get(plan, "endpoint"), "management_url"),
			 "http://169.254.100.1:8000");
	cr_assert_eq(json_array_size(json_object_get(plan, "ranks")), 4);
	for (int r = 0; r < 4; r++) {
		int p = r == 2 ? 0 : 1;
		char want[256];
		cr_expect_str_eq(js(rank_of(plan, r), "node"), sh_ns(&s, r + 1), "rank %d", r);
		snprintf(want, sizeof want, "169.254.20.%d", r + 1);
		cr_expect_str_eq(env_of(plan, r, "VLLM_HOST_IP"), want, "rank %d", r);
		cr_expect_str_eq(env_of(plan, r, "GLOO_SOCKET_IFNAME"), sh_twin_name[p][0],
				 "rank %d: its own port", r);
		snprintf(want, sizeof want, "%s,%s", sh_twin_name[p][0], sh_twin_name[p][1]);
		cr_expect_str_eq(env_of(plan, r, "NCCL_SOCKET_IFNAME"), want, "rank %d: both twins", r);
		cr_expect_null(json_object_get(json_object_get(rank_of(plan, r), "env"), "NCCL_ALGO"));
		snprintf(want, sizeof want, "--nnodes 4 --node-rank %d --master-addr 169.254.20.1", r);
		cr_expect(strstr(argv_of(plan, r), want), "rank %d: %s", r, argv_of(plan, r));
		cr_expect((r == 0) == (strstr(argv_of(plan, r), "--headless") == NULL), "rank %d", r);
	}
	json_decref(plan);
	sh_down(&s);
}

Test(serve, dry_run_ring_management_and_a_smaller_group, .timeout = 150)
{
	struct sh_sim s;
	sh_cluster_up(&s, "srg", 4, SIM_RING, "serve");
	sh_wait_reports(&s, 4, true);
	json_t *plan = sh_ctl_json(&s, 1, "serve", "sglang", "--group", "all", "--dry-run", NULL);
	cr_assert(plan, "serve --dry-run failed");
	cr_expect_str_eq(js(plan, "net"), "management");
	cr_expect_str_eq(js(plan, "topology"), "ring");
	cr_expect(strstr(js(plan, "network_note"), "management network"), "%s",
		  js(plan, "network_note"));
	for (int r = 0; r < 4; r++) {
		char want[128];
		snprintf(want, sizeof want,
			 "--tp 4 --dist-init-addr 169.254.100.1:29500 --nnodes 4 --node-rank %d", r);
		cr_expect(strstr(argv_of(plan, r), want), "rank %d: %s", r, argv_of(plan, r));
		cr_expect_str_eq(env_of(plan, r, "NCCL_ALGO"), "Ring", "rank %d", r);
		cr_expect_str_eq(env_of(plan, r, "MASTER_ADDR"), "169.254.100.1");
	}
	json_decref(plan);
	/* a group of two: llama.cpp's rpc-server on the second node, bound to it */
	char nodes[128];
	snprintf(nodes, sizeof nodes, "%s,%s", sh_ns(&s, 1), sh_ns(&s, 2));
	char *out = NULL;
	cr_assert_eq(sh_ctl(&s, 1, &out, "group", "create", "duo", "--nodes", nodes, NULL), 0, "%s",
		     out);
	free(out);
	plan = sh_ctl_json(&s, 3, "serve", "llamacpp", "--group", "duo", "--dry-run", NULL);
	cr_assert(plan);
	cr_assert_eq(json_array_size(json_object_get(plan, "ranks")), 2);
	cr_expect_str_eq(argv_of(plan, 1), "rpc-server --host 169.254.100.2 --port 50052");
	cr_expect(strstr(argv_of(plan, 0), "--rpc 169.254.100.2:50052"), "%s", argv_of(plan, 0));
	json_decref(plan);
	/* an unknown group: the head's error, exit 1 */
	int rc = sh_ctl(&s, 1, &out, "serve", "vllm", "--group", "nosuch", "--dry-run", NULL);
	cr_expect_eq(rc, 1, "%s", out);
	cr_expect(out && strstr(out, "no group 'nosuch'"), "%s", out);
	free(out);
	sh_down(&s);
}

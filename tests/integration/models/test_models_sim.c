/* model push on simulated clusters (issue 18): a 4-node ring and a 4-node
 * switch with real agents in namespaces; node 1 pushes a generated 64 MiB
 * model to the group of all nodes. Every node's copy is the source's bytes; a
 * second push moves 0 bytes; once fabric addresses are applied, a push to
 * the nodes named out of order follows the ring (on a switch, the order
 * asked) over both twins of each hop; a stranger on a data port gets nothing; a chunk
 * damaged on a relay's disk is found and moved again (when its mtime changed,
 * at the push's start; when it did not, once the relay reads it for the next
 * node: fetched again from the node before it); a push --from another node; a target whose agent
 * is killed half-way is named while the others finish, and after its restart
 * the next push moves only what it lacked. Root only (skips otherwise). */
#include "sim_harness.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHARD (16u << 20)

static char src[256];

static void make_model(int shards)
{
	snprintf(src, sizeof src, "/tmp/sparkctl-push-src-%d", (int)getpid());
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s && echo '{\"n\":1}' > %s/config.json",
		 src, src, src);
	cr_assert_eq(system(cmd), 0);
	for (int i = 0; i < shards; i++) {
		snprintf(cmd, sizeof cmd, "head -c %u /dev/urandom > %s/model-%05d.safetensors", SHARD,
			 src, i + 1);
		cr_assert_eq(system(cmd), 0);
	}
}

static void drop_model(void)
{
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf %s", src);
	if (system(cmd) != 0)
		cr_log_warn("could not remove %s", src);
}

/* Node k's store dir (model ls). */
static void store_of(struct sh_sim *s, int k, char *out, size_t len)
{
	json_t *j = sh_ctl_json(s, k, "model", "ls", "--node", sh_ns(s, k), NULL);
	cr_assert(j, "model ls on node %d", k);
	json_t *n = json_array_get(json_object_get(j, "nodes"), 0);
	cr_assert_eq(json_array_size(json_object_get(j, "nodes")), 1, "--node: one node");
	snprintf(out, len, "%s", json_string_value(json_object_get(n, "dir")));
	json_decref(j);
}

static json_t *push(struct sh_sim *s, int *rc)
{
	char *out = NULL;
	*rc = sh_ctl(s, 1, &out, "model", "push", src, "--group", "all", "--name", "m", "-o",
		     "json", NULL);
	/* stdout is the JSON summary; a failure adds one line on stderr (after it) */
	char *brace = out ? strrchr(out, '}') : NULL;
	if (brace)
		brace[1] = 0;
	json_t *j = out ? json_loads(out, 0, NULL) : NULL;
	if (!j)
		cr_log_info("model push: rc %d: %s", *rc, out ? out : "");
	free(out);
	return j;
}

static json_int_t written(json_t *j, struct sh_sim *s, int k)
{
	size_t i;
	json_t *n;
	json_array_foreach(json_object_get(j, "nodes"), i, n)
		if (!strcmp(json_string_value(json_object_get(n, "name")), sh_ns(s, k)))
			return json_integer_value(json_object_get(n, "bytes_written"));
	cr_assert_fail("no report for %s", sh_ns(s, k));
	return -2;
}

static const char *status_of(json_t *j, struct sh_sim *s, int k)
{
	size_t i;
	json_t *n;
	json_array_foreach(json_object_get(j, "nodes"), i, n)
		if (!strcmp(json_string_value(json_object_get(n, "name")), sh_ns(s, k)))
			return json_string_value(json_object_get(n, "status"));
	return "";
}

static void same_everywhere(struct sh_sim *s, int nodes)
{
	for (int k = 2; k <= nodes; k++) {
		char dir[512], cmd[1200];
		store_of(s, k, dir, sizeof dir);
		snprintf(cmd, sizeof cmd, "diff -r %s %s/m >/dev/null", src, dir);
		cr_assert_eq(system(cmd), 0, "node %d holds the source's bytes", k);
	}
}

static json_int_t by_link(json_t *j, struct sh_sim *s, int k, size_t lane)
{
	size_t i;
	json_t *n;
	json_array_foreach(json_object_get(j, "nodes"), i, n)
		if (!strcmp(json_string_value(json_object_get(n, "name")), sh_ns(s, k)))
			return json_integer_value(
			    json_array_get(json_object_get(n, "chunks_by_link"), lane));
	return -1;
}

/* With fabric addresses applied: a push to the nodes named out of order
 * follows the fabric (on the ring, the ring: 1 2 3 4 or 1 4 3 2), every hop
 * over both twins of its cable (two lanes, each carrying chunks). */
static void push_over_the_fabric(struct sh_sim *s, enum sim_topo topo)
{
	char *out = NULL;
	cr_assert_eq(sh_ctl(s, 1, &out, "topo", "addresses", "--apply", NULL), 0, "%s", out);
	free(out);
	/* a new version of two shards: 8 chunks move to every node */
	char cmd[600];
	for (int i = 1; i <= 2; i++) {
		snprintf(cmd, sizeof cmd, "head -c %u /dev/urandom > %s/model-%05d.safetensors", SHARD,
			 src, i);
		cr_assert_eq(system(cmd), 0);
	}
	char names[200];
	snprintf(names, sizeof names, "%s,%s,%s", sh_ns(s, 3), sh_ns(s, 2), sh_ns(s, 4));
	out = NULL;
	int rc = sh_ctl(s, 1, &out, "model", "push", src, "--nodes", names, "--name", "m", "-o",
			"json", NULL);
	char *brace = out ? strrchr(out, '}') : NULL;
	if (brace)
		brace[1] = 0;
	json_t *j = out ? json_loads(out, 0, NULL) : NULL;
	cr_assert(j, "model push: rc %d: %s", rc, out ? out : "");
	free(out);
	cr_assert_eq(rc, 0);
	cr_assert_str_eq(json_string_value(json_object_get(j, "network")), "fabric");
	json_t *rt = json_object_get(j, "route");
	cr_assert_eq(json_array_size(rt), 4);
	char order[64] = "";
	for (size_t i = 0; i < 4; i++) {
		const char *nm = json_string_value(json_object_get(json_array_get(rt, i), "name"));
		for (int k = 1; k <= 4; k++)
			if (!strcmp(nm, sh_ns(s, k)))
				snprintf(order + strlen(order), sizeof order - strlen(order), "%d", k);
		if (i > 0)
			cr_assert_eq(json_array_size(json_object_get(json_array_get(rt, i), "lanes")), 2,
				     "hop to %s: both twins", nm);
	}
	cr_log_info("route %s, %.1f s", order, json_real_value(json_object_get(j, "seconds")));
	if (topo == SIM_RING)
		cr_assert(!strcmp(order, "1234") || !strcmp(order, "1432"),
			  "the chain follows the ring: %s", order);
	else
		cr_assert_str_eq(order, "1324", "on a switch the order asked");
	for (int k = 2; k <= 4; k++) {
		cr_assert_eq(written(j, s, k), 2 * SHARD, "node %d got the new shards", k);
		cr_assert_gt(by_link(j, s, k, 0), 0, "node %d: chunks over twin 0", k);
		cr_assert_gt(by_link(j, s, k, 1), 0, "node %d: chunks over twin 1", k);
	}
	json_decref(j);
	same_everywhere(s, 4);
}

static void push_all_then_nothing(enum sim_topo topo, const char *tag)
{
	sh_require_root();
	struct sh_sim s;
	make_model(4);
	sh_cluster_up(&s, tag, 4, topo, "push");
	int rc;
	json_t *j = push(&s, &rc);
	cr_assert_eq(rc, 0);
	cr_assert(j && json_is_true(json_object_get(j, "complete")));
	cr_assert_str_eq(json_string_value(json_object_get(j, "network")), "agent_address",
			 "no fabric address yet: the agents' addresses, and it says so");
	json_int_t total = json_integer_value(json_object_get(j, "bytes"));
	for (int k = 2; k <= 4; k++)
		cr_assert_eq(written(j, &s, k), total, "node %d", k);
	cr_log_info("%s: %lld bytes to 3 nodes in %.1f s", tag, (long long)total,
		    json_real_value(json_object_get(j, "seconds")));
	json_decref(j);
	same_everywhere(&s, 4);
	j = push(&s, &rc);
	cr_assert_eq(rc, 0);
	for (int k = 2; k <= 4; k++)
		cr_assert_eq(written(j, &s, k), 0, "a second push writes nothing on node %d", k);
	json_decref(j);
	push_over_the_fabric(&s, topo);
	sh_down(&s);
	drop_model();
}

Test(push_sim, ring4, .timeout = 150)
{
	push_all_then_nothing(SIM_RING, "pring");
}

Test(push_sim, switch4, .timeout = 150)
{
	push_all_then_nothing(SIM_SWITCH, "pswitch");
}

Test(push_sim, stranger_damage_and_a_killed_agent, .timeout = 170)
{
	sh_require_root();
	struct sh_sim s;
	make_model(4);
	sh_cluster_up(&s, "pkill", 4, SIM_RING, "push");
	int rc;
	json_t *j = push(&s, &rc);
	cr_assert_eq(rc, 0);
	json_decref(j);

	/* a stranger on node 3's data port (169.254.100.3:7301), from node 2's
	 * namespace: plain bytes, then a TLS hello without a certificate */
	char *out = NULL;
	char *argv_b[] = {"/bin/bash", "-c",
			  "exec 3<>/dev/tcp/169.254.100.3/7301 && "
			  "printf '\\000\\000\\000\\040{\"v\":1,\"type\":\"mp_hello\",\"id\":0}' >&3; "
			  "sleep 0.3; echo plain-done; "
			  "sleep 1 | timeout 5 openssl s_client -connect 169.254.100.3:7301 2>&1 | tr -d '\\000'",
			  NULL};
	int r = sh_exec(&s, 2, argv_b, &out);
	cr_log_info("stranger: rc %d %s", r, out ? out : "");
	cr_assert(out && strstr(out, "plain-done"), "%s", out ? out : "");
	cr_assert(strstr(out, "unauthenticated"), "TLS without a certificate is refused: %s", out);
	free(out);
	json_t *v = sh_ctl_json(&s, 3, "version", NULL);
	cr_assert(v, "node 3's agent is alive");
	json_decref(v);

	/* a flipped byte in node 2's copy (a relay): found and moved again */
	char cmd0[1200];
	char d2[512], p[700];
	store_of(&s, 2, d2, sizeof d2);
	snprintf(p, sizeof p, "%s/m/model-00002.safetensors", d2);
	int fd = open(p, O_RDWR);
	cr_assert_geq(fd, 0, "%s", p);
	unsigned char b;
	cr_assert_eq(pread(fd, &b, 1, 5 << 20), 1);
	b ^= 0x20;
	cr_assert_eq(pwrite(fd, &b, 1, 5 << 20), 1);
	close(fd);
	j = push(&s, &rc);
	cr_assert_eq(rc, 0, "the stranger and the damage did not stop the next push");
	cr_assert_eq(written(j, &s, 2), 4 << 20, "the damaged chunk, and only it, moved again");
	cr_assert_eq(written(j, &s, 3), 0);
	json_decref(j);
	same_everywhere(&s, 4);

	/* node 2's copy rots keeping its size and mtime (so it counts as held and
	 * is not read when the push begins) and node 3 loses its copy: node 2
	 * finds out reading that chunk for node 3, fetches it again from node 1,
	 * mends its own copy and serves node 3 */
	fd = open(p, O_RDWR);
	cr_assert_geq(fd, 0, "%s", p);
	struct stat st;
	cr_assert_eq(fstat(fd, &st), 0);
	cr_assert_eq(pread(fd, &b, 1, 9 << 20), 1);
	b ^= 0x04;
	cr_assert_eq(pwrite(fd, &b, 1, 9 << 20), 1);
	struct timespec ts[2] = {st.st_atim, st.st_mtim};
	cr_assert_eq(futimens(fd, ts), 0);
	close(fd);
	char nodes3[64];
	snprintf(nodes3, sizeof nodes3, "%s", sh_ns(&s, 3));
	cr_assert_eq(sh_ctl(&s, 1, NULL, "model", "rm", "m", "--nodes", nodes3, NULL), 0);
	j = push(&s, &rc);
	cr_assert_eq(rc, 0, "complete on every node");
	cr_assert_eq(written(j, &s, 3), json_integer_value(json_object_get(j, "bytes")));
	cr_assert_eq(written(j, &s, 2), 0);
	json_t *rep = NULL;
	size_t ri;
	json_t *rn;
	json_array_foreach(json_object_get(j, "nodes"), ri, rn)
		if (!strcmp(json_string_value(json_object_get(rn, "name")), sh_ns(&s, 2)))
			rep = json_object_get(rn, "repairs");
	cr_assert_eq(json_array_size(rep), 1, "node 2 names its repair");
	json_t *x = json_array_get(rep, 0);
	cr_assert_str_eq(json_string_value(json_object_get(x, "path")), "model-00002.safetensors");
	cr_assert_eq(json_integer_value(json_object_get(x, "chunk")), 2, "9 MiB: its third chunk");
	cr_assert_str_eq(json_string_value(json_object_get(x, "from_name")), sh_ns(&s, 1));
	json_decref(j);
	same_everywhere(&s, 4);
	for (int k = 2; k <= 3; k++)
		cr_assert_eq(sh_ctl(&s, k, NULL, "model", "verify", "m", NULL), 0,
			     "node %d verifies clean", k);

	/* --from: asked on node 1, node 3 is the source of a copy to nodes 2 and 4 */
	char to[160];
	snprintf(to, sizeof to, "%s,%s", sh_ns(&s, 2), sh_ns(&s, 4));
	char *fo = NULL;
	rc = sh_ctl(&s, 1, &fo, "model", "push", src, "--from", nodes3, "--nodes", to, "--name",
		    "m3", "-o", "json", NULL);
	cr_assert_eq(rc, 0, "push --from: %s", fo ? fo : "");
	j = fo ? json_loads(fo, 0, NULL) : NULL;
	free(fo);
	cr_assert(j && json_is_true(json_object_get(j, "complete")));
	cr_assert_str_eq(json_string_value(json_object_get(
			     json_array_get(json_object_get(j, "route"), 0), "name")), nodes3);
	for (int k = 2; k <= 4; k += 2)
		cr_assert_eq(written(j, &s, k), json_integer_value(json_object_get(j, "bytes")),
			     "node %d", k);
	json_decref(j);
	char d4[512];
	store_of(&s, 4, d4, sizeof d4);
	snprintf(cmd0, sizeof cmd0, "diff -r %s %s/m3 >/dev/null", src, d4);
	cr_assert_eq(system(cmd0), 0, "node 4 holds the source's bytes under m3");

	/* a new version of two shards; node 3's agent is killed half-way */
	char cmd[600];
	for (int i = 3; i <= 4; i++) {
		snprintf(cmd, sizeof cmd, "head -c %u /dev/urandom > %s/model-%05d.safetensors", SHARD,
			 src, i);
		cr_assert_eq(system(cmd), 0);
	}
	/* the push runs in the background in node 1 (no fork of this test: a
	 * child of a Criterion test must not call Criterion) */
	const char *outf = "/tmp/sparkctl-push-kill.json", *rcf = "/tmp/sparkctl-push-kill.rc";
	unlink(outf);
	unlink(rcf);
	char bg[1200];
	snprintf(bg, sizeof bg,
		 "( %s model push %s --group all --name m -o json > %s 2>/dev/null; echo $? > %s.tmp;"
		 " mv %s.tmp %s ) >/dev/null 2>&1 &", sh_bin("sparkctl"), src, outf, rcf, rcf, rcf);
	cr_assert_eq(sh_sh(&s, 1, bg, NULL), 0);
	char d3[512];
	store_of(&s, 3, d3, sizeof d3);
	snprintf(p, sizeof p, "%s/m/model-00003.safetensors.sparkpart", d3);
	/* wait until node 3 holds the first chunk of the new shard 3, then kill it */
	char sp[700];
	snprintf(sp, sizeof sp, "%s/model-00003.safetensors", src);
	size_t cl = 4u << 20;
	unsigned char *want = malloc(cl), *have = malloc(cl);
	FILE *f = fopen(sp, "rb");
	cr_assert(f && fread(want, 1, cl, f) == cl);
	fclose(f);
	bool got = false;
	for (int i = 0; i < 2000 && !got; i++) {
		f = fopen(p, "rb");
		if (f) {
			got = fread(have, 1, cl, f) == cl && memcmp(have, want, cl) == 0;
			fclose(f);
		}
		if (!got)
			sh_sleep_ms(5);
	}
	free(want);
	free(have);
	cr_assert(got, "node 3 received the first chunk of the new shard");
	char err[512] = "", a[64];
	snprintf(a, sizeof a, "%s", sh_ns(&s, 3));
	char *args[] = {a};
	cr_assert_eq(sim_fault("kill", 1, args, NULL, err, sizeof err), 0, "%s", err);
	int prc = -1;
	for (int i = 0; i < 9000 && prc < 0; i++) {
		FILE *f = fopen(rcf, "r");
		if (f) {
			if (fscanf(f, "%d", &prc) != 1)
				prc = -2;
			fclose(f);
		} else {
			sh_sleep_ms(10);
		}
	}
	cr_assert_eq(prc, 1, "the push says it is not complete");
	j = json_load_file(outf, 0, NULL);
	unlink(outf);
	unlink(rcf);
	cr_assert(j);
	cr_assert_str_eq(status_of(j, &s, 3), "down");
	cr_assert_str_eq(status_of(j, &s, 2), "complete");
	char *dump = json_dumps(j, JSON_COMPACT);
	cr_assert_str_eq(status_of(j, &s, 4), "complete", "node 2 served node 4 itself: %s", dump);
	free(dump);
	json_decref(j);
	cr_assert_eq(sim_fault("start", 1, args, NULL, err, sizeof err), 0, "%s", err);
	sh_wait_reports(&s, 4, true);
	j = push(&s, &rc);
	cr_assert_eq(rc, 0);
	json_int_t w3 = written(j, &s, 3);
	cr_log_info("after the restart node 3 wrote %lld bytes", (long long)w3);
	cr_assert(w3 > 0 && w3 < 2 * (json_int_t)SHARD, "only what node 3 lacked moved");
	cr_assert_eq(written(j, &s, 2), 0);
	cr_assert_eq(written(j, &s, 4), 0);
	json_decref(j);
	same_everywhere(&s, 4);
	sh_down(&s);
	drop_model();
}

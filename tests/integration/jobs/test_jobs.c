/* Groups and jobs in simulated clusters (issue 6): the environment contract
 * on every node (ring: management net; switch with fabric addresses and a node
 * cabled on the other port index: fabric net, each node its own names),
 * torchrun with torch's gloo all_reduce, Open MPI with the mpi launcher, fail
 * fast, cancel, detach then logs -f, a CLI that goes away, sparkd killed and
 * restarted during a job, a node that becomes unreachable, users, groups and
 * bad input. Needs root (skips otherwise);
 * every test has its own sim prefix. */
#include "sim_harness.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SYS_PATH "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* Number of lines of s. */
static int lines(const char *s)
{
	int n = 0;
	for (; s && *s; s++)
		n += *s == '\n';
	return n;
}

/* The environment rank r printed with `env` under a run's rank prefix. */
static json_t *env_of(const char *out, int rank)
{
	json_t *env = json_object();
	char pfx[16];
	int pl = snprintf(pfx, sizeof pfx, "%d: ", rank);
	for (const char *p = out; p && *p;) {
		const char *e = strchr(p, '\n');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		if (l > (size_t)pl && strncmp(p, pfx, (size_t)pl) == 0) {
			const char *kv = p + pl, *eq = memchr(kv, '=', l - (size_t)pl);
			if (eq) {
				char key[128];
				snprintf(key, sizeof key, "%.*s", (int)(eq - kv), kv);
				json_object_set_new(env, key, json_stringn(eq + 1, (size_t)(p + l - eq - 1)));
			}
		}
		p = e ? e + 1 : p + l;
	}
	return env;
}

static const char *ev(json_t *env, const char *k)
{
	const char *v = json_string_value(json_object_get(env, k));
	return v ? v : "(unset)";
}

/* A sim with agents, node 1 the head, every other node joined, and every
 * node's fabric report on the head. */
static void cluster_up(struct sh_sim *s, const char *tag, int nodes, enum sim_topo topo)
{
	sh_cluster_up(s, tag, nodes, topo, "jobs");
	sh_wait_reports(s, nodes, true);
}

static json_t *job_show(struct sh_sim *s, int k, long long id)
{
	char ids[32];
	snprintf(ids, sizeof ids, "%lld", id);
	return sh_ctl_json(s, k, "job", "show", ids, NULL);
}

static const char *jstate(json_t *j) { return json_string_value(json_object_get(j, "state")) ?: "?"; }

static json_t *rank_of(json_t *show, int r)
{
	return json_array_get(json_object_get(show, "ranks"), (size_t)r);
}

/* Wait until job id is no longer starting/running; its show (caller decrefs). */
static json_t *wait_job(struct sh_sim *s, long long id, int timeout_ms)
{
	for (int t = 0;; t += 100) {
		json_t *j = job_show(s, 1, id);
		const char *st = jstate(j);
		if (strcmp(st, "starting") && strcmp(st, "running"))
			return j;
		json_decref(j);
		if (t >= timeout_ms)
			return NULL;
		sh_sleep_ms(100);
	}
}

static int count_jobs(struct sh_sim *s)
{
	json_t *j = sh_ctl_json(s, 1, "job", "ls", NULL);
	int n = (int)json_array_size(json_object_get(j, "jobs"));
	json_decref(j);
	return n;
}

static int count_groups(struct sh_sim *s)
{
	json_t *j = sh_ctl_json(s, 1, "group", "ls", NULL);
	int n = (int)json_array_size(json_object_get(j, "groups"));
	json_decref(j);
	return n;
}

static pid_t agent_pid(struct sh_sim *s, int k)
{
	json_t *d = sh_describe(s);
	pid_t pid = (pid_t)json_integer_value(
	    json_object_get(json_array_get(json_object_get(d, "nodes"), (size_t)(k - 1)), "agent_pid"));
	json_decref(d);
	return pid;
}

/* One line on stderr, nothing else (the CLI's failure contract). */
static void expect_one_line(int rc, int want_rc, const char *out, const char *needle)
{
	cr_expect_eq(rc, want_rc, "rc %d, want %d: %s", rc, want_rc, out);
	cr_expect_eq(lines(out), 1, "one line, got: %s", out);
	cr_expect(strstr(out ? out : "", needle) != NULL, "'%s' in: %s", needle, out);
}

/* ---- the contract on a ring: management net (no fabric addresses yet) ---------- */

Test(jobs, jobs_native_env_ring_groups_bad_input, .timeout = 120)
{
	struct sh_sim s;
	cluster_up(&s, "jenv", 4, SIM_RING);
	char *out = NULL;
	int rc = sh_ctl(&s, 2, &out, "run", "--group", "all", "--env", "FOO=bar", "--env", "NCCL_ALGO=Tree",
		     "--", "env", NULL);
	cr_assert_eq(rc, 0, "run: %s", out);
	json_t *env0 = env_of(out, 0);
	const char *port = ev(env0, "MASTER_PORT");
	for (int r = 0; r < 4; r++) {
		json_t *e = env_of(out, r);
		char want[256];
		cr_expect_str_eq(ev(e, "SPARK_NODE"), sh_ns(&s, r + 1), "rank %d", r);
		snprintf(want, sizeof want, "%d", r);
		cr_expect_str_eq(ev(e, "SPARK_RANK"), want);
		cr_expect_str_eq(ev(e, "RANK"), want);
		cr_expect_str_eq(ev(e, "SPARK_NODE_RANK"), want);
		cr_expect_str_eq(ev(e, "SPARK_WORLD_SIZE"), "4");
		cr_expect_str_eq(ev(e, "WORLD_SIZE"), "4");
		cr_expect_str_eq(ev(e, "SPARK_LOCAL_RANK"), "0");
		cr_expect_str_eq(ev(e, "LOCAL_RANK"), "0");
		cr_expect_str_eq(ev(e, "SPARK_GROUP"), "all");
		cr_expect_str_eq(ev(e, "SPARK_TOPOLOGY"), "ring");
		cr_expect_str_eq(ev(e, "SPARK_JOB_ID"), ev(env0, "SPARK_JOB_ID"));
		/* no fabric addresses in the sim yet: sockets on the management net */
		cr_expect_str_eq(ev(e, "SPARK_NET"), "management");
		cr_expect_str_eq(ev(e, "MASTER_ADDR"), "169.254.100.1");
		cr_expect_str_eq(ev(e, "MASTER_PORT"), port);
		int p = atoi(port);
		snprintf(want, sizeof want, "0=169.254.100.1:%d,1=169.254.100.2:%d,2=169.254.100.3:%d,"
					    "3=169.254.100.4:%d", p + 1, p + 2, p + 3, p + 4);
		cr_expect_str_eq(ev(e, "SPARK_PEERS"), want);
		const char *ifn[] = {"GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME",
				     "UCX_NET_DEVICES"};
		for (size_t i = 0; i < 4; i++)
			cr_expect_str_eq(ev(e, ifn[i]), "enP7s7", "%s of rank %d", ifn[i], r);
		cr_expect_str_eq(ev(e, "OMPI_MCA_btl_tcp_if_include"), "169.254.0.0/16");
		snprintf(want, sizeof want, "169.254.100.%d", r + 1);
		cr_expect_str_eq(ev(e, "VLLM_HOST_IP"), want);
		/* both twins of both ports, this node's own names */
		snprintf(want, sizeof want, "%s,%s,%s,%s", sh_twin_name[0][0], sh_twin_name[0][1],
			 sh_twin_name[1][0], sh_twin_name[1][1]);
		cr_expect_str_eq(ev(e, "SPARK_FABRIC_NETDEVS"), want);
		cr_expect_str_eq(ev(e, "NCCL_IB_SUBNET_AWARE_ROUTING"), "1");
		cr_expect_str_eq(ev(e, "NCCL_NET_PLUGIN"), "none", "a ring of 4");
		cr_expect_str_eq(ev(e, "NCCL_IB_MERGE_NICS"), "0");
		cr_expect_str_eq(ev(e, "NCCL_ALGO"), "Tree", "--env overrides");
		cr_expect_str_eq(ev(e, "FOO"), "bar");
		cr_expect_null(json_object_get(e, "NCCL_IB_GID_INDEX"));
		cr_expect_null(json_object_get(e, "NCCL_IB_HCA"), "no RDMA device in the sim");
		json_decref(e);
	}
	json_decref(env0);
	free(out);

	/* groups: the planner picks a contiguous arc and says what a chain costs */
	rc = sh_ctl(&s, 3, &out, "group", "create", "left", "--size", "3", NULL);
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "chain") && strstr(out, "one-shot"), "%s", out);
	free(out);
	json_t *g = sh_ctl_json(&s, 1, "group", "show", "left", NULL);
	json_t *nodes = json_object_get(g, "nodes");
	cr_assert_eq(json_array_size(nodes), 3);
	for (int i = 0; i < 3; i++)
		cr_expect_str_eq(json_string_value(json_array_get(nodes, (size_t)i)), sh_ns(&s, i + 1));
	json_decref(g);
	json_t *st = sh_ctl_json(&s, 4, "status", NULL);
	json_t *n2 = json_array_get(json_object_get(st, "nodes"), 1);
	cr_expect_str_eq(json_string_value(json_array_get(json_object_get(n2, "groups"), 0)) ?: "",
			 "left", "status shows each node's group");
	json_decref(st);
	/* the group's ranks follow its order */
	rc = sh_ctl(&s, 4, &out, "run", "--group", "left", "--ranks-per-node", "2", "--", "sh", "-c",
		 "echo $SPARK_RANK/$SPARK_LOCAL_RANK@$SPARK_NODE", NULL);
	cr_assert_eq(rc, 0, "%s", out);
	for (int r = 0; r < 6; r++) {
		char want[96];
		snprintf(want, sizeof want, "%d: %d/%d@%s\n", r, r, r % 2, sh_ns(&s, r / 2 + 1));
		cr_expect(strstr(out, want) != NULL, "'%s' in %s", want, out);
	}
	free(out);

	/* bad input: one line each, nothing half-made */
	int jobs = count_jobs(&s), groups = count_groups(&s);
	rc = sh_ctl(&s, 2, &out, "group", "create", "more", "--size", "2", NULL);
	expect_one_line(rc, 1, out, "larger than the 1 free node");
	free(out);
	rc = sh_ctl(&s, 2, &out, "group", "create", "x", "--nodes", "jx-1,nonode", NULL);
	expect_one_line(rc, 1, out, "no node named 'jx-1'");
	free(out);
	char busy[64];
	snprintf(busy, sizeof busy, "%s,%s", sh_ns(&s, 4), sh_ns(&s, 1));
	rc = sh_ctl(&s, 2, &out, "group", "create", "x", "--nodes", busy, NULL);
	expect_one_line(rc, 1, out, "in group left");
	free(out);
	rc = sh_ctl(&s, 2, &out, "run", "--group", "nope", "--", "true", NULL);
	expect_one_line(rc, 1, out, "no group 'nope'");
	free(out);
	rc = sh_ctl(&s, 2, &out, "run", "--group", "all", "--env", "NOVALUE", "--", "true", NULL);
	expect_one_line(rc, 2, out, "--env");
	free(out);
	rc = sh_ctl(&s, 2, &out, "run", "--group", "all", "--env", "1X=y", "--", "true", NULL);
	expect_one_line(rc, 2, out, "KEY=VALUE");
	free(out);
	rc = sh_ctl(&s, 2, &out, "exec", "nonode", "--", "true", NULL);
	cr_expect_neq(rc, 0);
	cr_expect(strstr(out, "no node 'nonode'"), "%s", out);
	free(out);
	cr_expect_eq(count_jobs(&s), jobs, "no job recorded for bad input");
	cr_expect_eq(count_groups(&s), groups, "no group recorded for bad input");

	/* ranks run as the user who asked; a user sees and cancels only their own jobs */
	char want[256];
	struct group *ng = getgrnam("nogroup");
	if (ng && access("/usr/bin/setpriv", X_OK) == 0) {
		json_t *d = sh_describe(&s);
		size_t i;
		json_t *n;
		json_array_foreach(json_object_get(d, "nodes"), i, n)
			cr_assert_eq(chown(json_string_value(json_object_get(n, "socket")), (uid_t)-1, ng->gr_gid), 0);
		json_decref(d);
		char line[512];
		snprintf(line, sizeof line,
			 "cd / && setpriv --reuid=nobody --regid=nogroup --clear-groups %s run --group all -- "
			 "id -un", sh_bin("sparkctl"));
		rc = sh_sh(&s, 2, line, &out);
		cr_expect_eq(rc, 0, "%s", out);
		for (int r = 0; r < 4; r++) {
			snprintf(want, sizeof want, "%d: nobody\n", r);
			cr_expect(strstr(out, want) != NULL, "'%s' in %s", want, out);
		}
		free(out);
		snprintf(line, sizeof line,
			 "cd / && setpriv --reuid=nobody --regid=nogroup --clear-groups %s job cancel 1",
			 sh_bin("sparkctl"));
		rc = sh_sh(&s, 3, line, &out);
		expect_one_line(rc, 1, out, "no job '1' of yours");
		free(out);
		json_t *all = sh_ctl_json(&s, 1, "job", "ls", NULL);
		json_t *last = json_array_get(json_object_get(all, "jobs"), 0);
		cr_expect_str_eq(json_string_value(json_object_get(last, "user")), "nobody",
				 "root sees everyone's jobs");
		json_decref(all);
	}

	/* a command missing on one node: that rank exits 127 and says where */
	char dir[] = "/tmp/sparkjobs-tool-XXXXXX", tool[128], cmd[512];
	cr_assert(mkdtemp(dir));
	snprintf(tool, sizeof tool, "%s/tool", dir);
	FILE *f = fopen(tool, "w");
	fprintf(f, "#!/bin/sh\nsleep 5\n");
	fclose(f);
	chmod(tool, 0755);
	chmod(dir, 0755);
	/* hide it on node 3 only: a tmpfs over the dir in its sparkd's mount namespace */
	snprintf(cmd, sizeof cmd, "nsenter -t %d -m -- mount -t tmpfs none %s", (int)agent_pid(&s, 3),
		 dir);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
	uint64_t t0 = sh_now_us();
	rc = sh_ctl(&s, 1, &out, "run", "--group", "all", "--", tool, NULL);
	uint64_t dt = sh_now_us() - t0;
	cr_expect_eq(rc, 127, "%s", out);
	snprintf(want, sizeof want, "2: sparkd: rank 2 on %s: command not found: %s", sh_ns(&s, 3), tool);
	cr_expect(strstr(out, want) != NULL, "'%s' in: %s", want, out);
	cr_expect(strstr(out, "exited with code 127 (command not found)"), "%s", out);
	cr_expect_lt(dt, 4000000, "the others were stopped, not waited for (%llu us)",
		     (unsigned long long)dt);
	free(out);
	snprintf(cmd, sizeof cmd, "nsenter -t %d -m -- umount %s", (int)agent_pid(&s, 3), dir);
	system(cmd);
	unlink(tool);
	rmdir(dir);
	sh_down(&s);
}

/* ---- a switch with fabric addresses: each node its own port's names ---------------- */

Test(jobs, jobs_native_env_switch_other_port_index, .timeout = 120)
{
	struct sh_sim s;
	cluster_up(&s, "jsw", 4, SIM_SWITCH);
	sh_switch_rails(&s); /* node 3 on port 0, the others on port 1; twin rails */
	char *out = NULL;
	int rc = sh_ctl(&s, 3, &out, "run", "--group", "all", "--", "env", NULL);
	cr_assert_eq(rc, 0, "run: %s", out);
	for (int r = 0; r < 4; r++) {
		json_t *e = env_of(out, r);
		int p = r == 2 ? 0 : 1;
		char want[256];
		cr_expect_str_eq(ev(e, "SPARK_NET"), "fabric", "rank %d", r);
		cr_expect_str_eq(ev(e, "SPARK_TOPOLOGY"), "switch");
		cr_expect_str_eq(ev(e, "GLOO_SOCKET_IFNAME"), sh_twin_name[p][0], "rank %d: its own port", r);
		cr_expect_str_eq(ev(e, "TP_SOCKET_IFNAME"), sh_twin_name[p][0]);
		snprintf(want, sizeof want, "%s,%s", sh_twin_name[p][0], sh_twin_name[p][1]);
		cr_expect_str_eq(ev(e, "NCCL_SOCKET_IFNAME"), want, "rank %d: both twins", r);
		cr_expect_str_eq(ev(e, "UCX_NET_DEVICES"), want);
		cr_expect_str_eq(ev(e, "SPARK_FABRIC_NETDEVS"), want);
		cr_expect_str_eq(ev(e, "MASTER_ADDR"), "169.254.20.1");
		snprintf(want, sizeof want, "169.254.20.%d", r + 1);
		cr_expect_str_eq(ev(e, "VLLM_HOST_IP"), want);
		cr_expect(strstr(ev(e, "SPARK_PEERS"), "3=169.254.20.4:") != NULL, "%s", ev(e, "SPARK_PEERS"));
		cr_expect_str_eq(ev(e, "OMPI_MCA_btl_tcp_if_include"), "169.254.20.0/24");
		cr_expect_null(json_object_get(e, "NCCL_ALGO"), "not a ring");
		json_decref(e);
	}
	free(out);
	/* exec by fabric address; the planner on a switch takes any free nodes */
	rc = sh_ctl(&s, 1, &out, "exec", "169.254.21.3", "--", "sh", "-c", "echo $SPARKCTL_SOCKET", NULL);
	cr_expect_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, sh_ns(&s, 3)) != NULL, "%s", out);
	free(out);
	rc = sh_ctl(&s, 1, &out, "group", "create", "two", "--size", "2", NULL);
	cr_expect_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "switch") != NULL, "%s", out);
	free(out);
	/* libsparkcoll's spark-bench as a job, over the fabric addresses */
	char bench[512];
	snprintf(bench, sizeof bench, "%s/runtime/spark-bench", getenv("SPARK_BUILD_DIR"));
	if (access(bench, X_OK) == 0) {
		rc = sh_ctl(&s, 2, &out, "bench", "allreduce", "--group", "all", "-b", "8", "-e", "4K", "-f",
			 "8", "--iters", "5", NULL);
		cr_expect_eq(rc, 0, "%s", out);
		cr_expect(strstr(out, "4 ranks") && strstr(out, "4096"), "%s", out);
		free(out);
	}
	sh_down(&s);
}

/* ---- engines -------------------------------------------------------------------------- */

static const char torch_script[] =
    "import torch, torch.distributed as dist\n"
    "dist.init_process_group('gloo')\n"
    "t = torch.tensor([float(dist.get_rank() + 1)])\n"
    "dist.all_reduce(t)\n"
    "print(f'allreduce rank {dist.get_rank()} of {dist.get_world_size()} = {t.item()}', flush=True)\n"
    "dist.destroy_process_group()\n";

Test(jobs, jobs_torchrun_gloo_allreduce, .timeout = 150)
{
	sh_require_root();
	if (access("/usr/bin/torchrun", X_OK) != 0)
		cr_skip_test("python3-torch is not installed (apt install python3-torch)");
	struct sh_sim s;
	cluster_up(&s, "jtorch", 4, SIM_RING);
	char path[] = "/tmp/sparkjobs-torch-XXXXXX.py";
	int fd = mkstemps(path, 3);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, torch_script, sizeof torch_script - 1), (ssize_t)sizeof torch_script - 1);
	close(fd);
	chmod(path, 0644);
	char *out = NULL;
	int rc = sh_ctl(&s, 2, &out, "run", "--group", "all", "--launcher", "torchrun", "--env", SYS_PATH,
		     "--timeout", "120s", "--", path, NULL);
	cr_expect_eq(rc, 0, "%s", out);
	for (int r = 0; r < 4; r++) {
		char want[64];
		snprintf(want, sizeof want, "allreduce rank %d of 4 = 10.0", r);
		cr_expect(strstr(out, want) != NULL, "'%s' in %s", want, out);
	}
	free(out);
	unlink(path);
	sh_down(&s);
}

static const char mpi_src[] =
    "#include <mpi.h>\n#include <stdio.h>\n#include <stdlib.h>\n"
    "int main(int argc, char **argv) {\n"
    "  MPI_Init(&argc, &argv);\n"
    "  int r, n, v, sum = 0;\n"
    "  MPI_Comm_rank(MPI_COMM_WORLD, &r); MPI_Comm_size(MPI_COMM_WORLD, &n);\n"
    "  v = r + 1; MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);\n"
    "  const char *node = getenv(\"SPARK_NODE\"), *net = getenv(\"SPARK_NET\");\n"
    "  printf(\"hello rank %d of %d on %s net %s sum %d\\n\", r, n, node ? node : \"?\",\n"
    "         net ? net : \"?\", sum);\n"
    "  MPI_Finalize(); return 0; }\n";

Test(jobs, jobs_mpi_hello_allreduce, .timeout = 120)
{
	sh_require_root();
	if (access("/usr/bin/mpirun", X_OK) != 0 || access("/usr/bin/mpicc", X_OK) != 0)
		cr_skip_test("openmpi-bin and libopenmpi-dev are not installed");
	char dir[] = "/tmp/sparkjobs-mpi-XXXXXX", src[128], bin[128], cmd[512];
	cr_assert(mkdtemp(dir));
	chmod(dir, 0755);
	snprintf(src, sizeof src, "%s/hello.c", dir);
	snprintf(bin, sizeof bin, "%s/hello", dir);
	FILE *f = fopen(src, "w");
	fputs(mpi_src, f);
	fclose(f);
	snprintf(cmd, sizeof cmd, "mpicc -o %s %s", bin, src);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
	struct sh_sim s;
	cluster_up(&s, "jmpi", 4, SIM_RING);
	char *out = NULL;
	int rc = sh_ctl(&s, 1, &out, "run", "--group", "all", "--launcher", "mpi", "--env", SYS_PATH,
		     "--timeout", "90s", "--", bin, NULL);
	cr_expect_eq(rc, 0, "%s", out);
	for (int r = 0; r < 4; r++) {
		char want[128];
		/* every rank got its own node's job environment (through sparkctl exec) */
		snprintf(want, sizeof want, "hello rank %d of 4 on %s net management sum 10", r,
			 sh_ns(&s, r + 1));
		cr_expect(strstr(out, want) != NULL, "'%s' in %s", want, out);
	}
	free(out);
	sh_down(&s);
	unlink(src);
	unlink(bin);
	rmdir(dir);
}

/* ---- the life of jobs -------------------------------------------------------------------- */

static long long detach(struct sh_sim *s, int k, const char *shcmd)
{
	char *out = NULL;
	int rc = sh_ctl(s, k, &out, "run", "--group", "all", "--detach", "--", "sh", "-c", shcmd, NULL);
	cr_assert_eq(rc, 0, "run --detach: %s", out);
	long long id = atoll(out);
	cr_assert_gt(id, 0, "%s", out);
	free(out);
	return id;
}

Test(jobs, jobs_fail_fast_cancel_detach_restart, .timeout = 150)
{
	struct sh_sim s;
	cluster_up(&s, "jlife", 4, SIM_RING);
	char *out = NULL;

	/* fail fast: rank 2 fails after 1 s, the others would sleep 60 s */
	uint64_t t0 = sh_now_us();
	int rc = sh_ctl(&s, 1, &out, "run", "--group", "all", "--", "sh", "-c",
		     "if [ $SPARK_RANK = 2 ]; then sleep 1; echo failing; exit 3; fi; exec sleep 60", NULL);
	uint64_t dt = sh_now_us() - t0;
	cr_expect_eq(rc, 3, "run exits with the failing rank's code: %s", out);
	cr_expect(strstr(out, "2: failing") != NULL, "%s", out);
	cr_expect(strstr(out, "rank 2 on") && strstr(out, "exited with code 3"), "%s", out);
	cr_expect_lt(dt, 3000000, "the others stopped within 2 s of the failure (%llu us in all)",
		     (unsigned long long)dt);
	free(out);
	json_t *j = job_show(&s, 4, 1);
	cr_expect_str_eq(jstate(j), "failed");
	cr_expect_eq(json_integer_value(json_object_get(j, "exit_code")), 3);
	for (int r = 0; r < 4; r++) {
		json_t *rk = rank_of(j, r);
		cr_expect_str_eq(json_string_value(json_object_get(rk, "state")), r == 2 ? "failed" : "killed",
				 "rank %d", r);
		if (r != 2)
			cr_expect_eq(json_integer_value(json_object_get(rk, "signal")), SIGTERM);
	}
	json_decref(j);

	/* cancel from another node */
	long long id = detach(&s, 2, "exec sleep 60");
	sh_sleep_ms(300);
	char ids[32];
	snprintf(ids, sizeof ids, "%lld", id);
	t0 = sh_now_us();
	rc = sh_ctl(&s, 3, &out, "job", "cancel", ids, NULL);
	cr_expect_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "cancelled") != NULL, "%s", out);
	cr_expect_lt(sh_now_us() - t0, 2000000);
	free(out);
	j = job_show(&s, 1, id);
	cr_expect_str_eq(jstate(j), "cancelled");
	cr_expect_str_eq(json_string_value(json_object_get(rank_of(j, 1), "state")), "killed");
	json_decref(j);

	/* group rm is refused while a job runs, --force cancels it */
	rc = sh_ctl(&s, 1, &out, "group", "create", "pair", "--size", "2", NULL);
	cr_assert_eq(rc, 0, "%s", out);
	free(out);
	rc = sh_ctl(&s, 1, &out, "run", "--group", "pair", "--detach", "--", "sleep", "60", NULL);
	cr_assert_eq(rc, 0, "%s", out);
	long long pid_job = atoll(out);
	free(out);
	rc = sh_ctl(&s, 1, &out, "group", "rm", "pair", NULL);
	expect_one_line(rc, 1, out, "running job(s)");
	free(out);
	rc = sh_ctl(&s, 1, &out, "group", "rm", "pair", "--force", NULL);
	cr_expect_eq(rc, 0, "%s", out);
	free(out);
	j = wait_job(&s, pid_job, 5000);
	cr_expect_str_eq(jstate(j), "cancelled");
	json_decref(j);

	/* detach, then follow the logs from another node */
	id = detach(&s, 1, "for i in 1 2 3 4 5; do echo tick $i $SPARK_NODE; sleep 0.2; done");
	snprintf(ids, sizeof ids, "%lld", id);
	rc = sh_ctl(&s, 4, &out, "job", "logs", ids, "-f", NULL);
	cr_expect_eq(rc, 0, "%s", out);
	for (int r = 0; r < 4; r++)
		for (int i = 1; i <= 5; i++) {
			char want[64];
			snprintf(want, sizeof want, "%d: tick %d %s\n", r, i, sh_ns(&s, r + 1));
			cr_expect(strstr(out, want) != NULL, "'%s' in %s", want, out);
		}
	free(out);
	rc = sh_ctl(&s, 2, &out, "job", "logs", ids, "--rank", "3", NULL);
	cr_expect_eq(rc, 0);
	cr_expect_eq(lines(out), 5, "one rank, no prefix: %s", out);
	cr_expect(strncmp(out, "tick 1 ", 7) == 0, "%s", out);
	free(out);

	/* the CLI goes away, the job stays */
	char line[512];
	snprintf(line, sizeof line,
		 "timeout -s KILL 0.7 %s run --group all -- sh -c 'sleep 1.5; echo done'",
		 sh_bin("sparkctl"));
	rc = sh_sh(&s, 2, line, NULL);
	cr_expect_eq(rc, 137, "the CLI was killed");
	json_t *ls = sh_ctl_json(&s, 1, "job", "ls", NULL);
	json_t *last = json_array_get(json_object_get(ls, "jobs"), 0);
	long long cli_job = json_integer_value(json_object_get(last, "id"));
	cr_expect_str_eq(jstate(last), "running");
	json_decref(ls);
	j = wait_job(&s, cli_job, 5000);
	cr_expect_str_eq(jstate(j), "succeeded", "the job finished without its CLI");
	json_decref(j);

	/* sparkd of node 3 killed (-9) and restarted during a job */
	id = detach(&s, 1, "for i in 1 2 3 4 5 6 7 8; do echo step $i; sleep 0.25; done");
	sh_sleep_ms(500);
	pid_t old = agent_pid(&s, 3);
	cr_assert_gt(old, 0);
	kill(old, SIGKILL);
	sh_sleep_ms(300);
	const char *argv[] = {sh_bin("sparkctl"), "sim", "fault", "start", sh_ns(&s, 3), NULL};
	pid_t p = fork();
	if (p == 0) {
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	int st = 0;
	waitpid(p, &st, 0);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "sim fault start");
	j = wait_job(&s, id, 10000);
	cr_assert(j, "the job ended");
	cr_expect_str_eq(jstate(j), "succeeded", "the restarted sparkd found its rank");
	cr_expect_str_eq(json_string_value(json_object_get(rank_of(j, 2), "state")), "exited");
	json_decref(j);
	snprintf(ids, sizeof ids, "%lld", id);
	rc = sh_ctl(&s, 1, &out, "job", "logs", ids, "--rank", "2", NULL);
	cr_expect_eq(lines(out), 8, "the whole log of the adopted rank: %s", out);
	free(out);
	/* no zombie children of the new sparkd */
	pid_t cur = agent_pid(&s, 3);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "ps -o stat= --ppid %d | grep -c Z", (int)cur);
	FILE *f = popen(cmd, "r");
	int zombies = -1;
	if (f) {
		if (fscanf(f, "%d", &zombies) != 1)
			zombies = 0;
		pclose(f);
	}
	cr_expect_eq(zombies, 0, "sparkd %d leaves no zombies", (int)cur);
	rc = sh_ctl(&s, 3, &out, "status", NULL);
	cr_expect_eq(rc, 0);
	free(out);

	/* a node that becomes unreachable fails its job, with that reason */
	id = detach(&s, 2, "exec sleep 60");
	sh_sleep_ms(300);
	const char *kargv[] = {sh_bin("sparkctl"), "sim", "fault", "kill", sh_ns(&s, 4), NULL};
	p = fork();
	if (p == 0) {
		execv(kargv[0], (char *const *)kargv);
		_exit(127);
	}
	waitpid(p, &st, 0);
	j = wait_job(&s, id, 12000);
	cr_assert(j, "the job ended after its node became unreachable");
	cr_expect_str_eq(jstate(j), "failed");
	cr_expect(strstr(json_string_value(json_object_get(j, "reason")) ?: "", "became unreachable"),
		  "reason: %s", json_string_value(json_object_get(j, "reason")));
	cr_expect_eq(json_integer_value(json_object_get(j, "exit_code")), 255);
	cr_expect_str_eq(json_string_value(json_object_get(rank_of(j, 3), "state")), "lost");
	cr_expect_str_eq(json_string_value(json_object_get(rank_of(j, 0), "state")), "killed");
	json_decref(j);
	sh_down(&s);
}

/* ---- sparkctl bench decode (issue 10): spark-decode as a job at 1 and 2 nodes ---- */

static void bench_decode_on(const char *tag, enum sim_topo topo)
{
	char decode[512];
	snprintf(decode, sizeof decode, "%s/runtime/decode/spark-decode", getenv("SPARK_BUILD_DIR"));
	if (access(decode, X_OK) != 0)
		cr_skip_test("spark-decode is not built");
	struct sh_sim s;
	cluster_up(&s, tag, 2, topo);
	char *out = NULL;
	/* a stored validation run: the planner takes its class and ring order */
	int rc = sh_ctl(&s, 1, &out, "topo", "validate", "--quick", NULL);
	cr_log_info("topo validate: rc=%d %s", rc, out);
	free(out);
	json_t *all = sh_ctl_json(&s, 1, "group", "show", "all", NULL);
	/* (two nodes on a switch validate as a pair, too: "ring" either way) */
	cr_expect_str_eq(json_string_value(json_object_get(all, "topology")) ?: "?", "ring");
	json_decref(all);
	rc = sh_ctl(&s, 1, &out, "group", "create", "dec", "--size", "2", NULL);
	cr_assert_eq(rc, 0, "%s", out);
	free(out);
	rc = sh_ctl(&s, 2, &out, "bench", "decode", "--group", "dec", "--model", "tiny", "--tokens", "6",
		 "-o", "json", NULL);
	cr_assert_eq(rc, 0, "bench decode: %s", out);
	json_t *j = json_loads(out, 0, NULL);
	cr_assert(j, "not JSON: %s", out);
	json_t *rows = json_object_get(j, "rows");
	cr_assert_eq(json_array_size(rows), 2, "%s", out);
	for (size_t i = 0; i < 2; i++) {
		json_t *r = json_array_get(rows, i);
		cr_expect_eq(json_integer_value(json_object_get(r, "world_size")), (json_int_t)i + 1, "%s",
			     out);
		cr_expect_gt(json_number_value(json_object_get(r, "tokens_per_s")), 0, "%s", out);
		cr_expect_eq(json_array_size(json_object_get(r, "generated")), 6, "%s", out);
	}
	cr_expect(json_equal(json_object_get(json_array_get(rows, 0), "generated"),
			     json_object_get(json_array_get(rows, 1), "generated")),
		  "the same greedy tokens at 1 and 2 ranks: %s", out);
	cr_expect(json_is_true(json_object_get(j, "same_tokens")), "%s", out);
	cr_expect_str_neq(json_string_value(json_object_get(json_array_get(rows, 1), "algo")) ?: "none",
			  "none", "%s", out);
	json_decref(j);
	free(out);
	/* the table */
	rc = sh_ctl(&s, 1, &out, "bench", "decode", "--group", "dec", "--model", "tiny", "--tokens", "6",
		 "--algo", "ring", NULL);
	cr_expect_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "TOKENS/S") && strstr(out, "1.00x"), "%s", out);
	cr_log_info("bench decode on a %s:\n%s", tag, out);
	fprintf(stderr, "bench decode (%s):\n%s", tag, out);
	free(out);
	/* bad input: one line */
	rc = sh_ctl(&s, 1, &out, "bench", "decode", "--group", "nope", "--model", "tiny", NULL);
	expect_one_line(rc, 1, out, "nope");
	free(out);
	sh_down(&s);
}

Test(jobs, bench_decode_ring, .timeout = 120) { bench_decode_on("bdring", SIM_RING); }

Test(jobs, bench_decode_switch, .timeout = 120) { bench_decode_on("bdsw", SIM_SWITCH); }

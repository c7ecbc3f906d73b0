/* The netplan files `topo addresses --netplan` writes, checked by netplan
 * itself (issue 16, item 14): for every plan shape (pair, 4-ring, triangle,
 * switch, and a ring at MTU 9000) each node's file is accepted by
 * `netplan generate --root-dir DIR` (Debian's netplan.io, what DGX OS
 * applies), and the systemd-networkd files it makes carry the plan's
 * addresses and MTU. A file netplan refuses fails here first. Skips when
 * netplan is not installed (scripts/deps.sh --test installs netplan.io). */
#include "topology/addrplan.h"
#include "topology/classify.h"

#include "mapgen.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *netplan_bin(void)
{
	static const char *const paths[] = {"/usr/sbin/netplan", "/sbin/netplan", "/usr/bin/netplan"};
	for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
		if (access(paths[i], X_OK) == 0)
			return paths[i];
	return NULL;
}

/* netplan generate --root-dir dir; its output (stdout+stderr) into out. */
static int generate(const char *dir, char *out, size_t len)
{
	int p[2];
	cr_assert_eq(pipe(p), 0);
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		dup2(p[1], 1);
		dup2(p[1], 2);
		close(p[0]);
		execl(netplan_bin(), "netplan", "generate", "--root-dir", dir, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	size_t o = 0;
	ssize_t k;
	while (o + 1 < len && (k = read(p[0], out + o, len - 1 - o)) > 0)
		o += (size_t)k;
	out[o] = '\0';
	close(p[0]);
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	static char buf[8192];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	return buf;
}

static void rm_rf(const char *dir)
{
	char cmd[512];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	cr_expect_eq(system(cmd), 0);
}

/* Write yaml as DIR/etc/netplan/40-sparkctl.yaml (as --netplan does) and
 * run netplan generate on it; the exit code, output in msg. */
static int check_yaml(const char *yaml, char *dir, size_t dlen, char *msg, size_t mlen)
{
	snprintf(dir, dlen, "/tmp/spark-netplan-XXXXXX");
	cr_assert(mkdtemp(dir), "mkdtemp");
	char path[512];
	snprintf(path, sizeof path, "%s/etc", dir);
	cr_assert_eq(mkdir(path, 0755), 0);
	snprintf(path, sizeof path, "%s/etc/netplan", dir);
	cr_assert_eq(mkdir(path, 0755), 0);
	snprintf(path, sizeof path, "%s/etc/netplan/40-sparkctl.yaml", dir);
	cr_assert_eq(topo_addrplan_write_netplan(path, yaml), 0);
	struct stat sb;
	cr_assert_eq(stat(path, &sb), 0);
	cr_expect_eq(sb.st_mode & 0777, 0600, "netplan warns about files others can read");
	return generate(dir, msg, mlen);
}

/* Every node of the plan: netplan accepts its file, and the .network file of
 * each planned netdev has its address (and the MTU when mtu > 0). */
static void check_plan(json_t *m, const char *what, int mtu)
{
	json_t *v = NULL, *plan = NULL;
	char err[256];
	cr_assert_eq(topo_classify(m, NULL, &v, err, sizeof err), 0, "%s", err);
	struct topo_addrplan_opts o = {TOPO_ADDR_SIM_POOL, 0};
	cr_assert_eq(topo_addrplan_make(v, &o, &plan, err, sizeof err), 0, "%s: %s", what, err);
	const char *node;
	json_t *list;
	int nodes = 0;
	json_object_foreach(json_object_get(plan, "nodes"), node, list) {
		char *yaml = NULL;
		cr_assert_eq(topo_addrplan_netplan(plan, node, mtu, &yaml, err, sizeof err), 0, "%s: %s",
			     what, err);
		char dir[64], msg[4096];
		int rc = check_yaml(yaml, dir, sizeof dir, msg, sizeof msg);
		cr_expect_eq(rc, 0, "%s, %s: netplan generate refused the file (%d): %s\n%s", what, node,
			     rc, msg, yaml);
		size_t i;
		json_t *e;
		json_array_foreach(list, i, e) {
			const char *nd = json_string_value(json_object_get(e, "netdev"));
			const char *ad = json_string_value(json_object_get(e, "address"));
			char path[256], want[96];
			snprintf(path, sizeof path, "%s/run/systemd/network/10-netplan-%s.network", dir, nd);
			const char *net = slurp(path);
			cr_expect(net, "%s, %s: netplan made no %s", what, node, path);
			snprintf(want, sizeof want, "Address=%s\n", ad);
			cr_expect(net && strstr(net, want), "%s, %s %s: no %s in\n%s", what, node, nd, want,
				  net ? net : "");
			if (mtu > 0) {
				snprintf(want, sizeof want, "MTUBytes=%d", mtu);
				cr_expect(net && strstr(net, want), "%s, %s %s: no %s", what, node, nd, want);
			}
		}
		free(yaml);
		rm_rf(dir);
		nodes++;
	}
	cr_expect_gt(nodes, 0, "%s: a plan without nodes", what);
	json_decref(plan);
	json_decref(v);
}

TestSuite(netplan, .timeout = 60);

static void need_netplan(void)
{
	if (!netplan_bin())
		cr_skip_test("netplan is not installed (apt-get install netplan.io)");
}

Test(netplan, pair)
{
	need_netplan();
	json_t *m = mg_map(2);
	mg_cable(m, 0, 0, 1, 0);
	check_plan(m, "pair", 0);
	json_decref(m);
}

Test(netplan, ring_of_four)
{
	need_netplan();
	json_t *m = mg_map(4);
	mg_ring(m, 0, 4);
	check_plan(m, "4-ring", 0);
	json_decref(m);
}

Test(netplan, triangle)
{
	need_netplan();
	json_t *m = mg_map(3);
	mg_ring(m, 0, 3);
	check_plan(m, "triangle", 0);
	json_decref(m);
}

Test(netplan, switch_of_four)
{
	need_netplan();
	json_t *m = mg_map(4);
	int nodes[] = {0, 1, 2, 3}, ports[] = {1, 1, 1, 1};
	mg_switch(m, nodes, ports, 4);
	check_plan(m, "switch", 0);
	json_decref(m);
}

Test(netplan, ring_at_mtu_9000)
{
	need_netplan();
	json_t *m = mg_map(4);
	mg_ring(m, 0, 4);
	check_plan(m, "4-ring, MTU 9000", 9000);
	json_decref(m);
}

/* The check itself can fail: a file netplan refuses is refused here. */
Test(netplan, a_broken_file_is_refused)
{
	need_netplan();
	char dir[64], msg[4096];
	int rc = check_yaml("network:\n  version: 2\n  ethernets:\n    enp1s0f0np0:\n      addresses:\n"
			    "        - 10.77.27.1\n",
			    dir, sizeof dir, msg, sizeof msg);
	cr_expect_neq(rc, 0, "netplan accepted an address without a prefix: %s", msg);
	rm_rf(dir);
}

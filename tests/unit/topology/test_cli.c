/* sparkctl discover end to end on fixtures: JSON keys, findings, exit codes. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#ifndef SPARKCTL
#define SPARKCTL ""
#endif

/* Run sparkctl with args; stdout into *out (caller frees); returns the exit code. */
static int run(const char *args, char **out)
{
	if (!*SPARKCTL)
		cr_skip_test("sparkctl is not built in this configuration");
	char cmd[2048];
	snprintf(cmd, sizeof cmd, "SPARKCTL_SOCKET=/nonexistent %s %s 2>/dev/null", SPARKCTL, args);
	FILE *p = popen(cmd, "r");
	cr_assert(p);
	size_t cap = 1 << 20, n = 0;
	char *buf = malloc(cap);
	size_t k;
	while ((k = fread(buf + n, 1, cap - 1 - n, p)) > 0)
		n += k;
	buf[n] = '\0';
	int st = pclose(p);
	*out = buf;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(cli, discover_json_on_fixture)
{
	char *out;
	int rc = run("discover --sysfs-root " TOPO_FIXTURES "/spark-pcie-x2 --mtu 9000 -o json", &out);
	cr_assert_eq(rc, 0, "exit %d", rc);
	json_error_t e;
	json_t *d = json_loads(out, 0, &e);
	cr_assert(d, "not JSON: %s\n%s", e.text, out);
	cr_assert_eq(json_array_size(json_object_get(d, "ports")), 2);
	json_t *f = json_object_get(d, "findings");
	cr_assert_eq(json_array_size(f), 2);
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(f, 0), "code")),
			 "pcie_width_low");
	json_decref(d);
	free(out);
}

Test(cli, discover_table_and_exit_codes)
{
	char *out;
	cr_assert_eq(run("discover --sysfs-root " TOPO_FIXTURES "/no-cx7", &out), 0);
	cr_assert(strstr(out, "no_fabric_port"), "%s", out);
	free(out);
	cr_assert_eq(run("discover --sysfs-root " TOPO_FIXTURES "/spark-healthy", &out), 0);
	cr_assert(strstr(out, "enP2p1s0f1np1"), "%s", out);
	cr_assert(strstr(out, "No findings."), "%s", out);
	free(out);
	cr_assert_eq(run("discover --sysfs-root " TOPO_FIXTURES "/does-not-exist", &out), 1);
	free(out);
	cr_assert_eq(run("discover --mtu 12", &out), 2);
	free(out);
	cr_assert_eq(run("discover extra", &out), 2);
	free(out);
}

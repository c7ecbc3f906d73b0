/* slurm: see slurm.h. */
#include "slurm.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *str(json_t *o, const char *k, const char *def)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : def;
}

/* Names Slurm takes in node, partition and feature lists unquoted. */
static bool name_ok(const char *s)
{
	if (!s || !*s || strlen(s) > 63)
		return false;
	for (const char *p = s; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		      *p == '-' || *p == '_' || *p == '.'))
			return false;
	return true;
}

/* A path for the TaskProlog script, inside single quotes. */
static bool path_ok(const char *s)
{
	return s && *s == '/' && strlen(s) < 1024 && !strpbrk(s, "'\n\r\\ \t\"");
}

static void utc(long long t, char *out, size_t len)
{
	time_t tt = (time_t)t;
	struct tm tm;
	if (t <= 0 || !gmtime_r(&tt, &tm) || !strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm))
		snprintf(out, len, "unknown");
}

/* The header every file carries, each line behind prefix ("# "). */
static void header(FILE *f, json_t *m, const char *what)
{
	json_t *t = json_object_get(m, "topology");
	char gen[32], val[32];
	utc(json_integer_value(json_object_get(m, "generated_at")), gen, sizeof gen);
	fprintf(f, "# %s for Slurm %s, written by `sparkctl export slurm` (sparkctl %s).\n", what,
		str(m, "slurm_version", "22.05"), str(m, "sparkctl_version", "?"));
	fprintf(f, "# Cluster: %s\n", str(m, "cluster", "?"));
	if (json_is_object(t)) {
		utc(json_integer_value(json_object_get(t, "finished_at")), val, sizeof val);
		fprintf(f, "# Topology: %s of %zu nodes, validation %s at %s\n", str(t, "class", "unknown"),
			json_array_size(json_object_get(m, "nodes")), str(t, "result", "unknown"), val);
	} else {
		fprintf(f, "# Topology: not validated ('sparkctl topo validate' checks the cabling)\n");
	}
	fprintf(f, "# Exported: %s. Do not edit: export again after a change and diff.\n", gen);
}

/* The node order: ring order when the validation has one naming every node. */
static size_t node_order(json_t *m, json_t **order, size_t max)
{
	json_t *nodes = json_object_get(m, "nodes");
	json_t *ro = json_object_get(json_object_get(m, "topology"), "ring_order");
	size_t n = json_array_size(nodes), i, k = 0;
	json_t *v;
	if (json_array_size(ro) == n && n <= max) {
		json_array_foreach(ro, i, v) {
			json_t *hit = NULL, *x;
			size_t j;
			json_array_foreach(nodes, j, x)
				if (json_is_string(v) && strcmp(str(x, "name", ""), json_string_value(v)) == 0)
					hit = x;
			if (!hit)
				break;
			order[k++] = hit;
		}
		if (k == n)
			return n;
	}
	k = 0;
	json_array_foreach(nodes, i, v)
		if (k < max)
			order[k++] = v;
	return k;
}

/* This node's cabling as a feature: "ringposK", "swportP" or "pairportP". */
static void cabling_feature(json_t *m, const char *name, size_t pos, char *out, size_t len)
{
	json_t *t = json_object_get(m, "topology");
	const char *cls = str(t, "class", "");
	out[0] = '\0';
	if (strcmp(cls, "ring") == 0 && json_array_size(json_object_get(t, "ring_order"))) {
		snprintf(out, len, ",ring,ringpos%zu", pos + 1);
		return;
	}
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(t, "cables"), i, c) {
		json_t *a = json_object_get(c, "a"), *b = json_object_get(c, "b");
		const char *port = strcmp(str(a, "node", ""), name) == 0   ? str(a, "port", NULL)
				   : strcmp(str(b, "node", ""), name) == 0 ? str(b, "port", NULL)
									   : NULL;
		if (!port || !name_ok(port))
			continue;
		if (strcmp(cls, "switch") == 0)
			snprintf(out, len, ",switch,swport%s", port);
		else if (strcmp(cls, "pair") == 0)
			snprintf(out, len, ",pair,pairport%s", port);
		return;
	}
}

static void node_list(FILE *f, json_t **order, size_t n, bool (*want)(json_t *, void *), void *arg)
{
	bool first = true;
	for (size_t i = 0; i < n; i++)
		if (!want || want(order[i], arg)) {
			fprintf(f, "%s%s", first ? "" : ",", str(order[i], "name", ""));
			first = false;
		}
}

/* Is node x in the group's names? */
static bool in_group(json_t *x, void *arg)
{
	size_t i;
	json_t *v;
	json_array_foreach((json_t *)arg, i, v)
		if (json_is_string(v) && strcmp(json_string_value(v), str(x, "name", "")) == 0)
			return true;
	return false;
}

/* Does the fabric let every node reach every other one (a switch, a pair, a
 * 3-ring), so that Slurm's tree of one switch tells the truth? */
static bool any_to_any(json_t *m)
{
	json_t *t = json_object_get(m, "topology");
	const char *cls = str(t, "class", "");
	return strcmp(cls, "switch") == 0 || strcmp(cls, "pair") == 0 ||
	       json_is_true(json_object_get(t, "any_to_any"));
}

static int render_slurm_conf(json_t *m, json_t **order, size_t n, FILE *f)
{
	json_t *t = json_object_get(m, "topology");
	bool tree = any_to_any(m);
	header(f, m, "slurm.conf fragment");
	fprintf(f, "# Include it from slurm.conf (\"Include /etc/slurm/sparkctl.conf\"): nodes,\n"
		   "# partitions and the plugins they need; the rest of slurm.conf stays yours.\n");
	fprintf(f, "GresTypes=gpu\nSelectType=select/cons_tres\nSelectTypeParameters=CR_Core_Memory\n");
	if (tree) {
		fprintf(f, "TopologyPlugin=topology/tree\n");
	} else if (json_is_object(t) && strcmp(str(t, "class", ""), "ring") == 0) {
		fprintf(f,
			"# No TopologyPlugin (topology/none): the fabric is a ring of %zu, where a node\n"
			"# reaches only its two neighbours over ConnectX-7. topology/tree needs every node\n"
			"# under a switch and takes the nodes of one switch as reaching each other, which\n"
			"# is not true here. The nodes below are in ring order, so `--contiguous -N K`\n"
			"# gets K consecutive nodes of the ring (an arc, every hop a cable), and each\n"
			"# partition of a sparkctl group is an arc the group planner chose.\n",
			n);
		const char *v = str(m, "slurm_version", "22.05");
		int maj = atoi(v), min = strchr(v, '.') ? atoi(strchr(v, '.') + 1) : 0;
		if (maj > 23 || (maj == 23 && min >= 11))
			fprintf(f, "# Slurm %s also has topology/block; it is not used for a ring (its\n"
				   "# blocks of nodes joined at aggregated sizes were not checked against\n"
				   "# neighbour-only links).\n",
				v);
	} else {
		fprintf(f, "# No TopologyPlugin: the cabling was not validated ('sparkctl topo validate').\n");
	}
	fprintf(f, "TaskProlog=%s\n\n", str(m, "task_prolog", "/etc/slurm/sparkctl-task-prolog.sh"));
	fprintf(f, "# RealMemory: MemTotal less %d%% for the OS and the GPU driver (unified memory:\n"
		   "# the GPU allocates from the same pool). Gres: one GB10 GPU per node.\n",
		SLURM_HEADROOM_PCT);
	for (size_t i = 0; i < n; i++) {
		json_t *x = order[i];
		const char *name = str(x, "name", "");
		char feat[96];
		cabling_feature(m, name, i, feat, sizeof feat);
		json_t *cpus = json_object_get(x, "cpus"), *mem = json_object_get(x, "memory_mib");
		fprintf(f, "NodeName=%s NodeAddr=%s", name, str(x, "address", name));
		if (json_is_integer(cpus) && json_integer_value(cpus) > 0)
			fprintf(f, " CPUs=%lld", (long long)json_integer_value(cpus));
		if (json_is_integer(mem) && json_integer_value(mem) > 0)
			fprintf(f, " RealMemory=%lld",
				(long long)json_integer_value(mem) * (100 - SLURM_HEADROOM_PCT) / 100);
		fprintf(f, " Gres=gpu:1 Features=spark%s", feat);
		if (json_is_true(json_object_get(x, "drained")))
			fprintf(f, " State=DRAIN Reason=\"drained in sparkctl\"");
		else
			fprintf(f, " State=UNKNOWN");
		if (!json_is_integer(cpus) || !json_is_integer(mem))
			fprintf(f, "\n# %s: CPUs and memory unknown (its sparkd does not report them: "
				   "upgrade it and export again)", name);
		fputc('\n', f);
	}
	fprintf(f, "\n# One partition for every node, one per sparkctl group (same names).\n");
	fprintf(f, "PartitionName=all Nodes=");
	node_list(f, order, n, NULL, NULL);
	fprintf(f, " Default=YES MaxTime=INFINITE State=UP\n");
	size_t i;
	json_t *g;
	json_array_foreach(json_object_get(m, "groups"), i, g) {
		const char *gn = str(g, "name", "");
		if (strcmp(gn, "all") == 0)
			continue;
		fprintf(f, "PartitionName=%s Nodes=", gn);
		node_list(f, order, n, in_group, json_object_get(g, "nodes"));
		fprintf(f, " MaxTime=INFINITE State=UP\n");
	}
	return 0;
}

static void render_gres(json_t *m, json_t **order, size_t n, FILE *f)
{
	const char *dev = str(m, "gpu_device", "/dev/nvidia0");
	header(f, m, "gres.conf");
	fprintf(f, "# One GPU per DGX Spark (the GB10's Blackwell GPU). Its memory is the node's\n"
		   "# unified LPDDR5x, so a GPU memory size is not given: NVML reports GB10 memory\n"
		   "# queries as \"Not Supported\" (see docs/slurm.md), so AutoDetect=nvml is not used.\n");
	fprintf(f, "NodeName=");
	node_list(f, order, n, NULL, NULL);
	fprintf(f, " Name=gpu File=%s\n", dev);
}

static void render_topology(json_t *m, json_t **order, size_t n, FILE *f)
{
	const char *cls = str(json_object_get(m, "topology"), "class", "");
	header(f, m, "topology.conf");
	const char *sw = strcmp(cls, "switch") == 0 ? "cx7switch"
			 : strcmp(cls, "pair") == 0 ? "cx7cable"
						    : "cx7mesh";
	fprintf(f, "# %s\n",
		strcmp(cls, "switch") == 0
		    ? "Every node on one Ethernet switch through its ConnectX-7 port."
		: strcmp(cls, "pair") == 0
		    ? "Two nodes on one direct cable: written as one switch with both."
		    : "A ring of 3 is a full mesh (a cable between every pair): one switch with all.");
	fprintf(f, "SwitchName=%s Nodes=", sw);
	node_list(f, order, n, NULL, NULL);
	fputc('\n', f);
}

static void render_prolog(json_t *m, FILE *f)
{
	fprintf(f, "#!/bin/sh\n");
	header(f, m, "TaskProlog");
	fprintf(f, "# Slurm runs it before each task, as the job's user; its \"export NAME=value\"\n"
		   "# lines become the task's environment: the variables `sparkctl run` gives a rank\n"
		   "# on this node (NCCL_*, UCX, GLOO/TP, MASTER_*, SPARK_*), from this node's sparkd.\n");
	fprintf(f, "socket='%s'\n", str(m, "socket", "/run/sparkctl/sparkd.sock"));
	fprintf(f, "case $socket in *%%n*) socket=$(printf '%%s' \"$socket\" | sed "
		   "\"s/%%n/$SLURMD_NODENAME/g\");; esac\n");
	fprintf(f, "if out=$('%s' --socket \"$socket\" env --slurm 2>&1); then\n"
		   "\tprintf '%%s\\n' \"$out\"\n"
		   "else\n"
		   "\tprintf 'print sparkctl TaskProlog: %%s\\n' \"$(printf '%%s' \"$out\" | tail -n 1)\"\n"
		   "fi\n"
		   "exit 0\n",
		str(m, "sparkctl", "/usr/bin/sparkctl"));
}

static char *render(json_t *m, json_t **order, size_t n, int which)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		return NULL;
	if (which == 0)
		render_slurm_conf(m, order, n, f);
	else if (which == 1)
		render_gres(m, order, n, f);
	else if (which == 2)
		render_topology(m, order, n, f);
	else
		render_prolog(m, f);
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

int slurm_render(json_t *m, struct slurm_files *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof *out);
	json_t *nodes = json_object_get(m, "nodes");
	size_t n = json_array_size(nodes), i;
	json_t *v;
	if (n == 0 || n > 64) {
		snprintf(err, errlen, "the cluster has %zu nodes; an export needs 1 to 64", n);
		return -EINVAL;
	}
	json_array_foreach(nodes, i, v) {
		const char *a = str(v, "address", "");
		if (!name_ok(str(v, "name", NULL)) || (*a && !name_ok(a) && !strchr(a, ':'))) {
			snprintf(err, errlen, "node name or address '%s' cannot be written for Slurm "
					      "(letters, digits, '-', '_', '.')", str(v, "name", "?"));
			return -EINVAL;
		}
		if (strchr(a, ':') && strspn(a, "0123456789abcdefABCDEF:.") != strlen(a)) {
			snprintf(err, errlen, "node %s: address '%s' is not an IP address",
				 str(v, "name", "?"), a);
			return -EINVAL;
		}
	}
	json_array_foreach(json_object_get(m, "groups"), i, v)
		if (!name_ok(str(v, "name", NULL))) {
			snprintf(err, errlen, "group name '%s' cannot be a Slurm partition name",
				 str(v, "name", "?"));
			return -EINVAL;
		}
	const char *paths[] = {str(m, "task_prolog", "/etc/slurm/sparkctl-task-prolog.sh"),
			       str(m, "sparkctl", "/usr/bin/sparkctl"),
			       str(m, "socket", "/run/sparkctl/sparkd.sock")};
	for (i = 0; i < 3; i++)
		if (!path_ok(paths[i])) {
			snprintf(err, errlen, "'%s' must be an absolute path without spaces or quotes",
				 paths[i]);
			return -EINVAL;
		}
	const char *dev = str(m, "gpu_device", "/dev/nvidia0");
	if (!path_ok(dev)) {
		snprintf(err, errlen, "--gpu-device '%s' must be an absolute path", dev);
		return -EINVAL;
	}
	json_t *order[64];
	n = node_order(m, order, 64);
	out->slurm_conf = render(m, order, n, 0);
	out->gres_conf = render(m, order, n, 1);
	out->topology_conf = any_to_any(m) ? render(m, order, n, 2) : NULL;
	out->task_prolog = render(m, order, n, 3);
	if (!out->slurm_conf || !out->gres_conf || !out->task_prolog ||
	    (any_to_any(m) && !out->topology_conf)) {
		slurm_files_free(out);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

void slurm_files_free(struct slurm_files *f)
{
	free(f->slurm_conf);
	free(f->gres_conf);
	free(f->topology_conf);
	free(f->task_prolog);
	memset(f, 0, sizeof *f);
}

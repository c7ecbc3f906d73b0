/* sim up / down / describe / exec. */
#include "sim_int.h"

#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <netlink/netlink.h>

int sim_check_caps(char *err, size_t errlen)
{
	FILE *f = fopen("/proc/self/status", "re");
	unsigned long long eff = 0;
	char line[256];
	if (f) {
		while (fgets(line, sizeof line, f))
			if (sscanf(line, "CapEff: %llx", &eff) == 1)
				break;
		fclose(f);
	}
	const unsigned long long need = (1ULL << 12) | (1ULL << 21); /* NET_ADMIN, SYS_ADMIN */
	if ((eff & need) != need)
		return sim_errf(err, errlen, -EPERM,
				"the simulator needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN); run it with sudo");
	return 0;
}

int sim_parse_target(const char *s, const char *defprefix, char *prefix, size_t plen, int *node,
		     char *thing, size_t tlen)
{
	char buf[128];
	if (!s || strlen(s) >= sizeof buf)
		return -EINVAL;
	snprintf(buf, sizeof buf, "%s", s);
	char *colon = strchr(buf, ':');
	if (colon) {
		*colon = 0;
		if (!thing || !colon[1] || strlen(colon + 1) >= tlen)
			return -EINVAL;
		snprintf(thing, tlen, "%s", colon + 1);
	} else if (thing) {
		thing[0] = 0;
	}
	char *dash = strrchr(buf, '-');
	const char *num = dash ? dash + 1 : buf;
	char *end;
	long k = strtol(num, &end, 10);
	if (!*num || *end || k < 1 || k > SIM_MAX_NODES)
		return -EINVAL;
	if (dash) {
		*dash = 0;
		if (!sim_valid_prefix(buf) || strlen(buf) >= plen)
			return -EINVAL;
		snprintf(prefix, plen, "%s", buf);
	} else {
		snprintf(prefix, plen, "%s", defprefix ? defprefix : SIM_DEFAULT_PREFIX);
	}
	*node = (int)k;
	return 0;
}

/* Namespace names a sim of this prefix may have, NULL-terminated. */
static void all_ns_names(const char *prefix, char names[][SIM_NS_MAX], const char **ptrs)
{
	int n = 0;
	for (int k = 1; k <= SIM_MAX_NODES; k++)
		snprintf(names[n++], SIM_NS_MAX, "%s-%d", prefix, k);
	snprintf(names[n++], SIM_NS_MAX, "%s-mgmt", prefix);
	snprintf(names[n++], SIM_NS_MAX, "%s-switch", prefix);
	for (int i = 0; i < n; i++)
		ptrs[i] = names[i];
	ptrs[n] = NULL;
}
#define ALL_NS SIM_ALL_NS

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		rmdir(p);
	else
		unlink(p);
	return 0;
}

static void rm_tree(const char *root)
{
	nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

static bool dir_empty(const char *p)
{
	DIR *d = opendir(p);
	if (!d)
		return false;
	struct dirent *e;
	bool empty = true;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			empty = false;
			break;
		}
	closedir(d);
	return empty;
}

int sim_down(const char *prefix, const char *root, char *err, size_t errlen)
{
	if (!sim_valid_prefix(prefix))
		return sim_errf(err, errlen, -EINVAL, "'%s' is not a valid sim name", prefix);
	int r = sim_check_caps(err, errlen);
	if (r < 0)
		return r;
	char names[ALL_NS][SIM_NS_MAX];
	const char *ptrs[ALL_NS + 1];
	all_ns_names(prefix, names, ptrs);
	char rootbuf[PATH_MAX], reg[PATH_MAX];
	snprintf(reg, sizeof reg, "%s/%s", SIM_RUN_DIR, prefix);
	if (!root && simm_root_of(prefix, rootbuf, sizeof rootbuf) == 0)
		root = rootbuf;
	/* Agents first (by pid file, in case one left its namespace), then
	 * everything still living in the namespaces. */
	pid_t agents[SIM_MAX_NODES];
	int nagents = 0;
	if (root) {
		struct sim *s = calloc(1, sizeof *s);
		char p[PATH_MAX + 16];
		snprintf(p, sizeof p, "%s/sim.json", root);
		json_t *j = json_load_file(p, 0, NULL);
		if (s && j && simm_from_json(j, s) == 0 && strcmp(s->prefix, prefix) == 0)
			for (int k = 1; k <= s->nnodes; k++)
				if (sima_running(s, k)) {
					agents[nagents++] = s->nodes[k - 1].pid;
					kill(s->nodes[k - 1].pid, SIGTERM);
				}
		json_decref(j);
		free(s);
	}
	simns_kill_all(ptrs, 2000);
	for (int i = 0; i < nagents; i++) {
		if (sim_pid_alive(agents[i]))
			kill(agents[i], SIGKILL);
		waitpid(agents[i], NULL, WNOHANG);
	}
	int first_err = 0;
	for (int i = 0; ptrs[i]; i++) {
		r = simns_delete(ptrs[i]);
		if (r < 0 && r != -ENOENT && !first_err) {
			first_err = r;
			sim_errf(err, errlen, r, "cannot remove namespace %s: %s", ptrs[i], strerror(-r));
		}
	}
	if (root) {
		char marker[PATH_MAX + 32];
		snprintf(marker, sizeof marker, "%s/%s", root, SIM_MARKER);
		if (access(marker, F_OK) == 0)
			rm_tree(root);
		else if (access(root, F_OK) == 0 && !dir_empty(root) && !first_err) {
			first_err = -ENOTEMPTY;
			sim_errf(err, errlen, -ENOTEMPTY,
				 "%s is not a sim root (no %s); left it in place", root, SIM_MARKER);
		} else {
			rmdir(root);
		}
	}
	struct stat st;
	if (lstat(reg, &st) == 0) {
		char marker[PATH_MAX + 32];
		snprintf(marker, sizeof marker, "%s/%s", reg, SIM_MARKER);
		if (S_ISLNK(st.st_mode))
			unlink(reg);
		else if (access(marker, F_OK) == 0)
			rm_tree(reg);
		else
			rmdir(reg);
	}
	rmdir(SIM_RUN_DIR); /* only if no other sim is left */
	return first_err;
}

static int make_root(struct sim *s, const struct sim_opts *o, char *err, size_t errlen)
{
	char reg[PATH_MAX];
	snprintf(reg, sizeof reg, "%s/%s", SIM_RUN_DIR, s->prefix);
	int r = util_mkdirs(SIM_RUN_DIR, 0755);
	if (r < 0)
		return sim_errf(err, errlen, r, "cannot make %s: %s", SIM_RUN_DIR, strerror(-r));
	if (o->root) {
		char real[PATH_MAX];
		if (access(s->root, F_OK) == 0 && !dir_empty(s->root))
			return sim_errf(err, errlen, -EEXIST, "--root %s exists and is not empty",
					s->root);
		r = util_mkdirs(s->root, 0755);
		if (r < 0)
			return sim_errf(err, errlen, r, "cannot make %s: %s", s->root, strerror(-r));
		if (realpath(s->root, real))
			snprintf(s->root, sizeof s->root, "%s", real);
		if (symlink(s->root, reg) < 0)
			return sim_errf(err, errlen, -errno, "cannot register %s: %s", reg,
					strerror(errno));
	} else if (mkdir(s->root, 0755) < 0) {
		return sim_errf(err, errlen, -errno, "cannot make %s: %s", s->root, strerror(errno));
	}
	char marker[PATH_MAX + 32];
	snprintf(marker, sizeof marker, "%s/%s", s->root, SIM_MARKER);
	r = util_write_file(marker, "sparkctl sim root\n", 18, 0644);
	if (r < 0)
		return sim_errf(err, errlen, r, "cannot write %s: %s", marker, strerror(-r));
	for (int k = 1; k <= s->nnodes; k++) {
		char d[PATH_MAX];
		simm_node_dir(s, k, NULL, d, sizeof d);
		if (mkdir(d, 0755) < 0)
			return sim_errf(err, errlen, -errno, "cannot make %s: %s", d, strerror(errno));
	}
	return 0;
}

void simx_close(struct simnets *n)
{
	for (int i = 0; i < n->nns; i++) {
		simnet_close(n->sk[i]);
		if (n->fd[i] >= 0)
			close(n->fd[i]);
	}
	simnet_close(n->ctl);
	n->nns = 0;
	n->ctl = NULL;
}

int simx_idx(struct simnets *n, const char *ns)
{
	for (int i = 0; i < n->nns; i++)
		if (strcmp(n->name[i], ns) == 0)
			return i;
	if (n->nns >= SIM_ALL_NS)
		return -ENOSPC;
	if (!n->ctl && !(n->ctl = simnet_open(-1)))
		return -EIO;
	int fd = simns_open(ns);
	if (fd < 0)
		return fd;
	struct nl_sock *sk = simnet_open(fd);
	if (!sk) {
		close(fd);
		return -EIO;
	}
	int i = n->nns++;
	snprintf(n->name[i], SIM_NS_MAX, "%s", ns);
	n->fd[i] = fd;
	n->sk[i] = sk;
	return i;
}

int simx_make_link(struct simnets *n, struct sim_link *l)
{
	int ia = simx_idx(n, l->a.ns), ib = simx_idx(n, l->b.ns);
	if (ia < 0)
		return ia;
	if (ib < 0)
		return ib;
	int master = 0;
	if (l->kind == SIM_LK_MGMT || l->kind == SIM_LK_SWITCH) {
		master = simnet_ifindex(n->sk[ib],
					l->kind == SIM_LK_MGMT ? SIM_MGMT_BRIDGE : SIM_FABRIC_BRIDGE);
		if (master < 0)
			return master;
	}
	/* b is the main end so it can be enslaved at creation. */
	int r = simnet_veth_add(n->ctl, &l->b, n->fd[ib], master, &l->a, n->fd[ia]);
	if (r < 0)
		return r;
	if (l->a.up && (r = simnet_link_set(n->sk[ia], l->a.ifname, 1, 0, -1)) < 0)
		return r;
	if (l->a.delay_ms > 0 && (r = simx_delay(n, &l->a)) < 0)
		return r;
	if (l->b.delay_ms > 0 && (r = simx_delay(n, &l->b)) < 0)
		return r;
	return 0;
}

static int build_net(struct sim *s, char *err, size_t errlen)
{
	struct simnets n = {0};
	char mgmt[SIM_NS_MAX], sw[SIM_NS_MAX];
	simm_ns_name(s, "mgmt", mgmt, sizeof mgmt);
	simm_ns_name(s, "switch", sw, sizeof sw);
	const char *order[ALL_NS];
	int cnt = 0;
	order[cnt++] = mgmt;
	if (simm_has_switch(s))
		order[cnt++] = sw;
	for (int k = 1; k <= s->nnodes; k++)
		order[cnt++] = s->nodes[k - 1].name;
	int r;
	for (int i = 0; i < cnt; i++) {
		r = simns_create(order[i]);
		if (r < 0)
			return sim_errf(err, errlen, r, "cannot make namespace %s: %s", order[i],
					strerror(-r));
	}
	n.ctl = simnet_open(-1);
	if (!n.ctl)
		return sim_errf(err, errlen, -EIO, "cannot open a netlink socket");
	for (int i = 0; i < cnt; i++) {
		r = simx_idx(&n, order[i]);
		if (r < 0) {
			sim_errf(err, errlen, r, "cannot enter namespace %s: %s", order[i],
				 strerror(-r));
			goto out;
		}
		/* lo up everywhere: agents and tools expect it. */
		if ((r = simnet_link_set(n.sk[r], "lo", 1, 0, -1)) < 0) {
			sim_errf(err, errlen, r, "cannot bring lo up in %s: %s", order[i],
				 strerror(-r));
			goto out;
		}
	}
	if ((r = simnet_bridge_add(n.ctl, SIM_MGMT_BRIDGE, n.fd[simx_idx(&n, mgmt)])) < 0) {
		sim_errf(err, errlen, r, "cannot make bridge %s in %s: %s", SIM_MGMT_BRIDGE, mgmt,
			 strerror(-r));
		goto out;
	}
	if (simm_has_switch(s) &&
	    (r = simnet_bridge_add(n.ctl, SIM_FABRIC_BRIDGE, n.fd[simx_idx(&n, sw)])) < 0) {
		sim_errf(err, errlen, r, "cannot make bridge %s in %s: %s", SIM_FABRIC_BRIDGE, sw,
			 strerror(-r));
		goto out;
	}
	for (int i = 0; i < s->nlinks; i++) {
		struct sim_link *l = &s->links[i];
		if ((r = simx_make_link(&n, l)) < 0) {
			sim_errf(err, errlen, r, "cannot make the veth pair %s:%s - %s:%s: %s", l->a.ns,
				 l->a.ifname, l->b.ns, l->b.ifname, strerror(-r));
			goto out;
		}
	}
	for (int k = 1; k <= s->nnodes; k++) {
		char cidr[32];
		snprintf(cidr, sizeof cidr, "%s/16", s->nodes[k - 1].addr);
		int i = simx_idx(&n, s->nodes[k - 1].name);
		r = i < 0 ? i : simnet_addr_add(n.sk[i], SIM_MGMT_IF, cidr);
		if (r < 0) {
			sim_errf(err, errlen, r, "cannot address %s in %s: %s", SIM_MGMT_IF,
				 s->nodes[k - 1].name, strerror(-r));
			goto out;
		}
	}
	r = 0;
out:
	simx_close(&n);
	return r;
}

int sim_up(const struct sim_opts *o, char *err, size_t errlen)
{
	const char *prefix = o->prefix ? o->prefix : SIM_DEFAULT_PREFIX;
	if (!sim_valid_prefix(prefix))
		return sim_errf(err, errlen, -EINVAL,
				"--name '%s' is not valid: use 1-%d of a-z, 0-9 and '-', starting with a letter",
				prefix, SIM_PREFIX_MAX);
	if (o->bare < 0 || (o->bare > 0 && (o->nodes < 1 || o->nodes + o->bare > SIM_MAX_NODES ||
					     o->nodes + o->bare < SIM_MIN_NODES)))
		return sim_errf(err, errlen, -EINVAL,
				"--nodes N --bare K: N must be at least 1 and N + K from %d to %d",
				SIM_MIN_NODES, SIM_MAX_NODES);
	if (o->bare == 0 && (o->nodes < SIM_MIN_NODES || o->nodes > SIM_MAX_NODES))
		return sim_errf(err, errlen, -EINVAL, "--nodes must be from %d to %d", SIM_MIN_NODES,
				SIM_MAX_NODES);
	if ((unsigned)o->topo > SIM_SWITCH)
		return sim_errf(err, errlen, -EINVAL, "unknown topology");
	if (o->mtu && (o->mtu < 68 || o->mtu > 65535))
		return sim_errf(err, errlen, -EINVAL, "--mtu must be from 68 to 65535");
	if (o->port > 1 || (o->port >= 0 && o->topo == SIM_RING))
		return sim_errf(err, errlen, -EINVAL,
				"--port is 0 or 1, and only for the pair and switch topologies");
	int r = sim_check_caps(err, errlen);
	if (r < 0)
		return r;

	struct sim *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	simm_plan(s, o);
	char reg[PATH_MAX];
	snprintf(reg, sizeof reg, "%s/%s", SIM_RUN_DIR, s->prefix);
	struct stat st;
	char names[ALL_NS][SIM_NS_MAX];
	const char *ptrs[ALL_NS + 1];
	all_ns_names(s->prefix, names, ptrs);
	bool exists = lstat(reg, &st) == 0;
	for (int i = 0; ptrs[i] && !exists; i++)
		exists = simns_exists(ptrs[i]);
	if (exists) {
		r = sim_errf(err, errlen, -EEXIST,
			     "a sim named '%s' exists (or its remains do); remove it with 'sparkctl sim down --name %s'",
			     s->prefix, s->prefix);
		free(s);
		return r;
	}
	if (s->agents && (r = o->sparkd ? 0 : sim_find_sparkd(s->sparkd, sizeof s->sparkd)) < 0) {
		r = sim_errf(err, errlen, -ENOENT,
			     "sparkd not found (SPARKD, next to sparkctl, ../agent/, PATH); build it or use --no-agents");
		free(s);
		return r;
	}
	if (o->sparkd)
		snprintf(s->sparkd, sizeof s->sparkd, "%s", o->sparkd);

	if ((r = make_root(s, o, err, errlen)) < 0) {
		/* -EEXIST: the root or its registration is someone else's (a
		 * concurrent up, a non-empty --root): nothing here is ours. */
		if (r != -EEXIST)
			sim_down(s->prefix, s->root, NULL, 0);
		free(s);
		return r;
	}
	if ((r = simm_save(s)) < 0) {
		sim_errf(err, errlen, r, "cannot write %s/sim.json: %s", s->root, strerror(-r));
		goto fail;
	}
	if ((r = build_net(s, err, errlen)) < 0)
		goto fail;
	if ((r = simm_save(s)) < 0) {
		sim_errf(err, errlen, r, "cannot write %s/sim.json: %s", s->root, strerror(-r));
		goto fail;
	}
	if (s->agents) {
		unsigned mask = 0;
		for (int k = 1; k <= s->nnodes; k++) {
			if (s->nodes[k - 1].bare)
				continue;
			if ((r = sima_spawn(s, k, err, errlen)) < 0)
				goto fail;
			mask |= 1u << (k - 1);
		}
		simm_save(s);
		const char *t = getenv("SPARK_SIM_AGENT_TIMEOUT_MS");
		int tmo = t && atoi(t) > 0 ? atoi(t) : 15000;
		if ((r = sima_wait(s, mask, tmo, err, errlen)) < 0)
			goto fail;
		if ((r = simm_save(s)) < 0) {
			sim_errf(err, errlen, r, "cannot write %s/sim.json: %s", s->root,
				 strerror(-r));
			goto fail;
		}
	}
	free(s);
	return 0;
fail:
	sim_down(s->prefix, s->root, NULL, 0);
	free(s);
	return r;
}

int sim_describe(const char *prefix, json_t **out, char *err, size_t errlen)
{
	struct sim *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	int r = simm_load(prefix, s, err, errlen);
	if (r == 0)
		*out = simm_to_json(s); /* agent_state is computed afresh */
	free(s);
	return r;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

json_t *sim_list(void)
{
	json_t *arr = json_array();
	DIR *d = opendir(SIM_RUN_DIR);
	if (!d)
		return arr;
	char *names[256];
	size_t n = 0;
	struct dirent *e;
	while ((e = readdir(d)) && n < 256)
		if (sim_valid_prefix(e->d_name))
			names[n++] = strdup(e->d_name);
	closedir(d);
	qsort(names, n, sizeof names[0], cmp_str);
	for (size_t i = 0; i < n; i++) {
		if (names[i])
			json_array_append_new(arr, json_string(names[i]));
		free(names[i]);
	}
	return arr;
}

int sim_exec(const char *prefix, const char *ns, char *const argv[], char *err, size_t errlen)
{
	int r = sim_check_caps(err, errlen);
	if (r < 0)
		return r;
	if (!simns_exists(ns))
		return sim_errf(err, errlen, -ENOENT,
				"no namespace %s; list the nodes with 'sparkctl sim ls'", ns);
	struct sim *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	char sock[PATH_MAX] = "";
	bool bare = false;
	if (simm_load(prefix, s, NULL, 0) == 0)
		for (int k = 1; k <= s->nnodes; k++)
			if (strcmp(s->nodes[k - 1].name, ns) == 0) {
				simm_node_dir(s, k, "sparkd.sock", sock, sizeof sock);
				bare = s->nodes[k - 1].bare;
			}
	free(s);
	if ((r = simns_enter_full(ns)) < 0)
		return sim_errf(err, errlen, r, "cannot enter %s: %s", ns, strerror(-r));
	/* A bare node is a fresh machine: its sparkd, if one is installed
	 * there later, has its own socket. */
	if (bare)
		unsetenv("SPARKCTL_SOCKET");
	else if (sock[0])
		setenv("SPARKCTL_SOCKET", sock, 1);
	setenv("SPARK_SIM_NODE", ns, 1);
	setenv("SPARK_SIM", prefix, 1);
	execvp(argv[0], argv);
	r = -errno;
	return sim_errf(err, errlen, r, "cannot run %s in %s: %s", argv[0], ns, strerror(-r));
}

int sim_link_query(const char *ns, const char *ifname, struct sim_link_info *out)
{
	int fd = simns_open(ns);
	if (fd < 0)
		return fd;
	struct nl_sock *sk = simnet_open(fd);
	close(fd);
	if (!sk)
		return -EIO;
	int r = simnet_query(sk, ifname, out);
	simnet_close(sk);
	return r;
}

static int cmp_json_str(const void *a, const void *b)
{
	return strcmp(json_string_value(*(json_t *const *)a), json_string_value(*(json_t *const *)b));
}

int sim_link_names(const char *ns, json_t **out)
{
	int fd = simns_open(ns);
	if (fd < 0)
		return fd;
	struct nl_sock *sk = simnet_open(fd);
	close(fd);
	if (!sk)
		return -EIO;
	json_t *arr = json_array();
	int r = simnet_names(sk, arr);
	simnet_close(sk);
	if (r < 0) {
		json_decref(arr);
		return r;
	}
	size_t n = json_array_size(arr);
	json_t **v = calloc(n ? n : 1, sizeof *v);
	if (!v) {
		json_decref(arr);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		v[i] = json_incref(json_array_get(arr, i));
	qsort(v, n, sizeof *v, cmp_json_str);
	json_t *sorted = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(sorted, v[i]);
	free(v);
	json_decref(arr);
	*out = sorted;
	return 0;
}

/* The sim's model: cabling plan, names, MACs, and sim.json. */
#include "sim_int.h"

#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

int sim_errf(char *err, size_t errlen, int code, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}

static const char *const topo_names[] = {"pair", "ring", "switch"};

int sim_parse_topo(const char *s, enum sim_topo *out)
{
	for (int i = 0; i < 3; i++)
		if (s && strcmp(s, topo_names[i]) == 0) {
			*out = (enum sim_topo)i;
			return 0;
		}
	return -EINVAL;
}

const char *sim_topo_name(enum sim_topo t)
{
	return (unsigned)t < 3 ? topo_names[t] : "unknown";
}

bool sim_valid_prefix(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (n < 1 || n > SIM_PREFIX_MAX || !(s[0] >= 'a' && s[0] <= 'z'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
			return false;
	return s[n - 1] != '-';
}

const char *simm_kind_name(enum sim_link_kind k)
{
	static const char *const n[] = {"cable", "switch", "unplugged", "mgmt"};
	return (unsigned)k < 4 ? n[k] : "unknown";
}

static int kind_parse(const char *s)
{
	for (int i = 0; i < 4; i++)
		if (s && strcmp(s, simm_kind_name((enum sim_link_kind)i)) == 0)
			return i;
	return -1;
}

const char *simm_fabric_ifname(int port, int twin)
{
	static const char *const n[2][2] = {{"enp1s0f0np0", "enP2p1s0f0np0"},
					    {"enp1s0f1np1", "enP2p1s0f1np1"}};
	return n[port & 1][twin & 1];
}

void simm_ns_name(const struct sim *s, const char *what, char *out, size_t len)
{
	snprintf(out, len, "%s-%s", s->prefix, what);
}

void simm_node_dir(const struct sim *s, int k, const char *file, char *out, size_t len)
{
	snprintf(out, len, "%s/%s%s%s", s->root, s->nodes[k - 1].name, file ? "/" : "",
		 file ? file : "");
}

bool simm_has_switch(const struct sim *s)
{
	return s->topo == SIM_SWITCH;
}

/* Locally administered MACs, distinct per prefix: 02:hh:hh:K:P:T for a node's
 * netdev, 06:hh:hh:K:P:T for the far end made for it. P is the port (7 for
 * enP7s7), T the twin. */
static void mac_for(const struct sim *s, int first, int k, int p, int t, char *out)
{
	uint32_t h = 2166136261u;
	for (const char *c = s->prefix; *c; c++)
		h = (h ^ (uint8_t)*c) * 16777619u;
	snprintf(out, 18, "%02x:%02x:%02x:%02x:%02x:%02x", first, (h >> 8) & 0xff, h & 0xff, k, p, t);
}

static void end_set(struct sim_end *e, const char *ns, const char *ifname, int mtu, bool up)
{
	memset(e, 0, sizeof *e);
	snprintf(e->ns, sizeof e->ns, "%s", ns);
	snprintf(e->ifname, sizeof e->ifname, "%s", ifname);
	e->mtu = mtu;
	e->up = up;
}

static struct sim_link *new_link(struct sim *s, enum sim_link_kind kind)
{
	struct sim_link *l = &s->links[s->nlinks++];
	memset(l, 0, sizeof *l);
	l->kind = kind;
	return l;
}

static void node_end(struct sim *s, struct sim_end *e, int k, int port, int twin)
{
	end_set(e, s->nodes[k - 1].name, simm_fabric_ifname(port, twin), s->mtu, true);
	mac_for(s, 0x02, k, port, twin, e->mac);
}

static void plug_cable(struct sim *s, int ka, int pa, int kb, int pb)
{
	for (int t = 0; t < 2; t++) {
		struct sim_link *l = new_link(s, SIM_LK_CABLE);
		node_end(s, &l->a, ka, pa, t);
		node_end(s, &l->b, kb, pb, t);
	}
}

static void unplugged(struct sim *s, int k, int port)
{
	char mgmt[SIM_NS_MAX], name[IFNAMSIZ];
	simm_ns_name(s, "mgmt", mgmt, sizeof mgmt);
	for (int t = 0; t < 2; t++) {
		struct sim_link *l = new_link(s, SIM_LK_UNPLUGGED);
		node_end(s, &l->a, k, port, t);
		snprintf(name, sizeof name, "u%d-%d%c", k, port, t ? 'b' : 'a');
		end_set(&l->b, mgmt, name, s->mtu, false);
		mac_for(s, 0x06, k, port, t, l->b.mac);
	}
}

void simm_plan(struct sim *s, const struct sim_opts *o)
{
	memset(s, 0, sizeof *s);
	snprintf(s->prefix, sizeof s->prefix, "%s", o->prefix ? o->prefix : SIM_DEFAULT_PREFIX);
	if (o->root)
		snprintf(s->root, sizeof s->root, "%s", o->root);
	else
		snprintf(s->root, sizeof s->root, "%s/%s", SIM_RUN_DIR, s->prefix);
	s->topo = o->topo;
	s->mtu = o->mtu > 0 ? o->mtu : 1500;
	s->port = o->port >= 0 ? o->port : (o->topo == SIM_SWITCH ? 1 : o->topo == SIM_PAIR ? 0 : -1);
	s->agents = !o->no_agents;
	s->created_at = (long long)time(NULL);
	s->nnodes = o->nodes + (o->bare > 0 ? o->bare : 0);
	for (int k = 1; k <= s->nnodes; k++) {
		struct sim_node *n = &s->nodes[k - 1];
		n->index = k;
		n->bare = k > o->nodes;
		char prefix[sizeof s->prefix];
		memcpy(prefix, s->prefix, sizeof prefix); /* gcc -Wrestrict under sanitizers */
		snprintf(n->name, sizeof n->name, "%s-%d", prefix, k);
		snprintf(n->addr, sizeof n->addr, "169.254.100.%d", k);
	}
	char mgmt[SIM_NS_MAX], sw[SIM_NS_MAX], name[IFNAMSIZ];
	simm_ns_name(s, "mgmt", mgmt, sizeof mgmt);
	simm_ns_name(s, "switch", sw, sizeof sw);
	switch (s->topo) {
	case SIM_RING:
		for (int k = 1; k <= s->nnodes; k++)
			plug_cable(s, k, 0, k % s->nnodes + 1, 1);
		break;
	case SIM_PAIR:
		plug_cable(s, 1, s->port, 2, s->port);
		for (int k = 1; k <= 2; k++)
			unplugged(s, k, 1 - s->port);
		for (int k = 3; k <= s->nnodes; k++) {
			unplugged(s, k, 0);
			unplugged(s, k, 1);
		}
		break;
	case SIM_SWITCH:
		for (int k = 1; k <= s->nnodes; k++) {
			for (int t = 0; t < 2; t++) {
				struct sim_link *l = new_link(s, SIM_LK_SWITCH);
				node_end(s, &l->a, k, s->port, t);
				snprintf(name, sizeof name, "swp%d", 2 * (k - 1) + t + 1);
				end_set(&l->b, sw, name, s->mtu, true);
				mac_for(s, 0x06, k, s->port, t, l->b.mac);
			}
			unplugged(s, k, 1 - s->port);
		}
		break;
	}
	for (int k = 1; k <= s->nnodes; k++) {
		struct sim_link *l = new_link(s, SIM_LK_MGMT);
		end_set(&l->a, s->nodes[k - 1].name, SIM_MGMT_IF, 1500, true);
		mac_for(s, 0x02, k, 7, 7, l->a.mac);
		snprintf(name, sizeof name, "mgmt%d", k);
		end_set(&l->b, mgmt, name, 1500, true);
		mac_for(s, 0x06, k, 7, 7, l->b.mac);
	}
}

struct sim_link *simm_find_end(struct sim *s, const char *ns, const char *ifname,
			       struct sim_end **end)
{
	for (int i = 0; i < s->nlinks; i++) {
		struct sim_link *l = &s->links[i];
		struct sim_end *cand[2] = {&l->a, &l->b};
		for (int j = 0; j < 2; j++) {
			/* Only node netdevs are addressable: b of a cable is one. */
			if (j == 1 && l->kind != SIM_LK_CABLE)
				continue;
			if (strcmp(cand[j]->ns, ns) == 0 && strcmp(cand[j]->ifname, ifname) == 0) {
				if (end)
					*end = cand[j];
				return l;
			}
		}
	}
	return NULL;
}

/* ---- JSON ---- */

static json_t *end_json(const struct sim_end *e)
{
	return json_pack("{s:s, s:s, s:s, s:i, s:b, s:i, s:o}", "namespace", e->ns, "ifname",
			 e->ifname, "mac", e->mac, "mtu", e->mtu, "up", e->up, "delay_ms", e->delay_ms,
			 "delay_pid", e->delay_pid > 0 ? json_integer(e->delay_pid) : json_null());
}

json_t *simm_to_json(const struct sim *s)
{
	char mgmt[SIM_NS_MAX], sw[SIM_NS_MAX], buf[PATH_MAX];
	simm_ns_name(s, "mgmt", mgmt, sizeof mgmt);
	simm_ns_name(s, "switch", sw, sizeof sw);
	json_t *nss = json_array();
	json_t *nodes = json_array();
	for (int k = 1; k <= s->nnodes; k++) {
		const struct sim_node *n = &s->nodes[k - 1];
		json_array_append_new(nss, json_string(n->name));
		json_t *o = json_object();
		json_object_set_new(o, "name", json_string(n->name));
		json_object_set_new(o, "index", json_integer(k));
		json_object_set_new(o, "namespace", json_string(n->name));
		json_object_set_new(o, "address", json_string(n->addr));
		snprintf(buf, sizeof buf, "%s:%d", n->addr, SIM_AGENT_PORT);
		json_object_set_new(o, "listen", json_string(buf));
		simm_node_dir(s, k, "sparkd.sock", buf, sizeof buf);
		json_object_set_new(o, "socket", json_string(buf));
		simm_node_dir(s, k, "state", buf, sizeof buf);
		json_object_set_new(o, "state_dir", json_string(buf));
		simm_node_dir(s, k, "sparkd.log", buf, sizeof buf);
		json_object_set_new(o, "log", json_string(buf));
		json_object_set_new(o, "agent_pid", n->pid > 0 ? json_integer(n->pid) : json_null());
		const char *ast = sima_running(s, k) ? "running" : n->bare ? "bare" : "stopped";
		json_object_set_new(o, "agent_state", json_string(ast));
		json_object_set_new(o, "bare", json_boolean(n->bare));
		json_array_append_new(nodes, o);
	}
	json_array_append_new(nss, json_string(mgmt));
	if (simm_has_switch(s))
		json_array_append_new(nss, json_string(sw));
	json_t *links = json_array();
	for (int i = 0; i < s->nlinks; i++) {
		const struct sim_link *l = &s->links[i];
		const char *state = l->kind == SIM_LK_UNPLUGGED ? "unplugged" : l->cut ? "cut" : "up";
		json_array_append_new(links, json_pack("{s:s, s:s, s:o, s:o}", "kind",
						       simm_kind_name(l->kind), "state", state, "a",
						       end_json(&l->a), "b", end_json(&l->b)));
	}
	json_t *j = json_object();
	json_object_set_new(j, "version", json_integer(1));
	json_object_set_new(j, "prefix", json_string(s->prefix));
	json_object_set_new(j, "root", json_string(s->root));
	json_object_set_new(j, "topology", json_string(sim_topo_name(s->topo)));
	json_object_set_new(j, "size", json_integer(s->nnodes));
	int nbare = 0;
	for (int k = 1; k <= s->nnodes; k++)
		nbare += s->nodes[k - 1].bare;
	json_object_set_new(j, "bare", json_integer(nbare));
	json_object_set_new(j, "mtu", json_integer(s->mtu));
	json_object_set_new(j, "port", s->port >= 0 ? json_integer(s->port) : json_null());
	json_object_set_new(j, "agents", json_boolean(s->agents));
	json_object_set_new(j, "sparkd", s->sparkd[0] ? json_string(s->sparkd) : json_null());
	json_object_set_new(j, "created_at", json_integer(s->created_at));
	json_object_set_new(j, "namespaces", nss);
	json_object_set_new(j, "mgmt", json_pack("{s:s, s:s, s:s}", "namespace", mgmt, "bridge",
						 SIM_MGMT_BRIDGE, "subnet", "169.254.0.0/16"));
	json_object_set_new(j, "switch",
			    simm_has_switch(s) ? json_pack("{s:s, s:s}", "namespace", sw, "bridge",
							   SIM_FABRIC_BRIDGE)
					       : json_null());
	json_object_set_new(j, "nodes", nodes);
	json_object_set_new(j, "links", links);
	return j;
}

static int str_get(const json_t *o, const char *key, char *out, size_t len)
{
	const char *v = json_string_value(json_object_get(o, key));
	if (!v || strlen(v) >= len)
		return -EINVAL;
	memcpy(out, v, strlen(v) + 1);
	return 0;
}

static int end_from(const json_t *o, struct sim_end *e)
{
	memset(e, 0, sizeof *e);
	if (!json_is_object(o) || str_get(o, "namespace", e->ns, sizeof e->ns) ||
	    str_get(o, "ifname", e->ifname, sizeof e->ifname))
		return -EINVAL;
	str_get(o, "mac", e->mac, sizeof e->mac);
	e->mtu = (int)json_integer_value(json_object_get(o, "mtu"));
	e->delay_ms = (int)json_integer_value(json_object_get(o, "delay_ms"));
	e->delay_pid = (pid_t)json_integer_value(json_object_get(o, "delay_pid"));
	e->up = json_is_true(json_object_get(o, "up"));
	return 0;
}

int simm_from_json(const json_t *j, struct sim *s)
{
	memset(s, 0, sizeof *s);
	if (!json_is_object(j) || str_get(j, "prefix", s->prefix, sizeof s->prefix) ||
	    str_get(j, "root", s->root, sizeof s->root) || !sim_valid_prefix(s->prefix))
		return -EINVAL;
	if (sim_parse_topo(json_string_value(json_object_get(j, "topology")), &s->topo) < 0)
		return -EINVAL;
	s->mtu = (int)json_integer_value(json_object_get(j, "mtu"));
	json_t *port = json_object_get(j, "port");
	s->port = json_is_integer(port) ? (int)json_integer_value(port) : -1;
	s->agents = json_is_true(json_object_get(j, "agents"));
	str_get(j, "sparkd", s->sparkd, sizeof s->sparkd);
	s->created_at = json_integer_value(json_object_get(j, "created_at"));
	json_t *nodes = json_object_get(j, "nodes");
	size_t i;
	json_t *v;
	if (!json_is_array(nodes) || json_array_size(nodes) > SIM_MAX_NODES)
		return -EINVAL;
	json_array_foreach(nodes, i, v) {
		struct sim_node *n = &s->nodes[i];
		n->index = (int)i + 1;
		if (str_get(v, "name", n->name, sizeof n->name))
			return -EINVAL;
		str_get(v, "address", n->addr, sizeof n->addr);
		n->pid = (pid_t)json_integer_value(json_object_get(v, "agent_pid"));
		n->bare = json_is_true(json_object_get(v, "bare"));
		s->nnodes++;
	}
	json_t *links = json_object_get(j, "links");
	if (!json_is_array(links) || json_array_size(links) > SIM_MAX_LINKS)
		return -EINVAL;
	json_array_foreach(links, i, v) {
		struct sim_link *l = &s->links[i];
		int k = kind_parse(json_string_value(json_object_get(v, "kind")));
		if (k < 0 || end_from(json_object_get(v, "a"), &l->a) ||
		    end_from(json_object_get(v, "b"), &l->b))
			return -EINVAL;
		l->kind = (enum sim_link_kind)k;
		const char *st = json_string_value(json_object_get(v, "state"));
		l->cut = st && strcmp(st, "cut") == 0;
		s->nlinks++;
	}
	return 0;
}

int simm_save(const struct sim *s)
{
	json_t *j = simm_to_json(s);
	char *txt = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(j);
	if (!txt)
		return -ENOMEM;
	char p[PATH_MAX];
	snprintf(p, sizeof p, "%s/sim.json", s->root);
	size_t n = strlen(txt);
	txt[n] = '\n'; /* dumps leaves room: replace NUL, write n + 1 bytes */
	int r = util_write_file(p, txt, n + 1, 0644);
	free(txt);
	return r;
}

int simm_root_of(const char *prefix, char *root, size_t len)
{
	char reg[PATH_MAX];
	snprintf(reg, sizeof reg, "%s/%s", SIM_RUN_DIR, prefix);
	char tgt[PATH_MAX];
	ssize_t n = readlink(reg, tgt, sizeof tgt - 1);
	if (n > 0) {
		tgt[n] = 0;
		snprintf(root, len, "%s", tgt);
		return 0;
	}
	if (access(reg, F_OK) == 0) {
		snprintf(root, len, "%s", reg);
		return 0;
	}
	return -ENOENT;
}

int simm_load(const char *prefix, struct sim *s, char *err, size_t errlen)
{
	char root[PATH_MAX], p[PATH_MAX + 16];
	if (!sim_valid_prefix(prefix))
		return sim_errf(err, errlen, -EINVAL, "'%s' is not a sim name", prefix);
	if (simm_root_of(prefix, root, sizeof root) < 0)
		return sim_errf(err, errlen, -ENOENT,
				"no sim named '%s'; list them with 'sparkctl sim ls'", prefix);
	snprintf(p, sizeof p, "%s/sim.json", root);
	json_error_t je;
	json_t *j = json_load_file(p, 0, &je);
	if (!j)
		return sim_errf(err, errlen, -ENOENT,
				"sim '%s' has no readable %s; remove it with 'sparkctl sim down --name %s'",
				prefix, p, prefix);
	int r = simm_from_json(j, s);
	json_decref(j);
	if (r < 0 || strcmp(s->prefix, prefix) != 0)
		return sim_errf(err, errlen, -EINVAL,
				"%s is damaged; remove the sim with 'sparkctl sim down --name %s'", p,
				prefix);
	return 0;
}

int simm_lock(const struct sim *s)
{
	char p[PATH_MAX + 16];
	snprintf(p, sizeof p, "%s/sim.lock", s->root);
	int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX) < 0) {
		int r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

void simm_unlock(int fd)
{
	if (fd >= 0)
		close(fd);
}

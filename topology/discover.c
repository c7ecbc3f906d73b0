/* discover: gather netdevs and RDMA devices, choose the fabric, group twins
 * into physical ports, pick each twin's RoCE v2 GID and write the JSON. */
#include "discover.h"

#include "topo_internal.h"
#include "util.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_TWINS 8

struct twin {
	long nd;          /* index into nds, -1 when absent */
	const char *name; /* the netdev name (for absent twins) */
	unsigned order;   /* sort key within the port */
};

struct port {
	char name[64];
	char key[32];
	long index; /* physical port number, -1 unknown */
	struct twin twins[MAX_TWINS];
	size_t n;
};

struct disc {
	const struct topo_opts *o;
	const char *root;
	struct topo_nd *nds;
	size_t n_nds;
	struct topo_ibdev *ibs;
	size_t n_ibs;
	struct port *ports;
	size_t n_ports;
	bool *fabric; /* per nd */
	long *ib_of;  /* per nd: its RDMA device (index into ibs), -1 none */
	json_t *notes;
};

/* Strings read from the machine may not be UTF-8: then non-ASCII bytes become '?'. */
static json_t *str_or_null(const char *s)
{
	if (!s || !*s)
		return json_null();
	json_t *j = json_string(s);
	if (j)
		return j;
	char b[256];
	size_t i = 0;
	for (; s[i] && i + 1 < sizeof b; i++)
		b[i] = (unsigned char)s[i] < 0x80 ? s[i] : '?';
	b[i] = '\0';
	return json_string(b);
}
static json_t *num_or_null(long v) { return v >= 0 ? json_integer(v) : json_null(); }

static int cmp_nd(const void *a, const void *b)
{
	return strcmp(((const struct topo_nd *)a)->name, ((const struct topo_nd *)b)->name);
}

static long find_nd(const struct disc *d, const char *name)
{
	for (size_t i = 0; i < d->n_nds; i++)
		if (strcmp(d->nds[i].name, name) == 0)
			return (long)i;
	return -1;
}

/* ---- addresses from an `ip -json address` dump (netlink-free mode) ---- */
static void load_addr_dump(struct disc *d)
{
	char path[4096];
	const char *p = d->o->addr_dump;
	if (!p) {
		if (topo_sysfs_path(d->root, "ip-addr.json", path, sizeof path) < 0 ||
		    access(path, R_OK) != 0) {
			json_array_append_new(d->notes,
					      json_string("addresses: unknown (netlink off and no "
							  "ip-addr.json beside the sysfs tree)"));
			return;
		}
		p = path;
	}
	char *buf = NULL;
	size_t len = 0;
	json_t *map = NULL;
	char note[4200];
	int r = util_read_file(p, &buf, &len, 4u << 20);
	if (r == 0)
		r = topo_parse_ip_json(buf, len, &map);
	free(buf);
	if (r < 0) {
		snprintf(note, sizeof note, "addresses: cannot use %s (%s)", p, strerror(-r));
		json_array_append_new(d->notes, str_or_null(note));
		return;
	}
	for (size_t i = 0; i < d->n_nds; i++) {
		struct topo_nd *nd = &d->nds[i];
		json_t *e = json_object_get(map, nd->name);
		nd->src_addr = TOPO_SRC_DUMP;
		if (!e)
			continue;
		json_array_extend(nd->ipv4, json_object_get(e, "ipv4"));
		json_array_extend(nd->ipv6, json_object_get(e, "ipv6"));
	}
	json_decref(map);
}

/* ---- grouping ---- */

/* "enP2p1s0f0np0" -> key "enp1s0f0np0", domain 2; other names are their own key. */
static void name_key(const char *name, char *key, size_t keylen, unsigned *domain, long *portno)
{
	*domain = 0;
	util_strlcpy(key, name, keylen);
	const char *P = strchr(name, 'P');
	if (P && P > name && isdigit((unsigned char)P[1])) {
		const char *q = P + 1;
		unsigned dom = 0;
		while (isdigit((unsigned char)*q) && dom < 100000)
			dom = dom * 10 + (unsigned)(*q++ - '0');
		if (*q == 'p' || *q == 's') {
			snprintf(key, keylen, "%.*s%s", (int)(P - name), name, q);
			*domain = dom;
		}
	}
	*portno = -1;
	const char *np = NULL; /* the last "np<N>" (phys_port_name suffix) */
	for (const char *q = strstr(key, "np"); q; q = strstr(q + 1, "np"))
		np = q;
	if (np) {
		const char *q = np + 2;
		long v = 0;
		int nd = 0;
		while (isdigit((unsigned char)*q) && nd < 3) {
			v = v * 10 + (*q++ - '0');
			nd++;
		}
		if (nd > 0 && *q == '\0')
			*portno = v;
	}
}

static void twin_key(const struct topo_nd *nd, char *key, size_t keylen, unsigned *order,
		     long *portno)
{
	if (nd->has_pci) {
		snprintf(key, keylen, "%02x:%02x.%x", nd->pa.bus, nd->pa.dev, nd->pa.fn);
		*order = nd->pa.domain;
		*portno = nd->phys_port >= 0 ? nd->phys_port : (long)nd->pa.fn;
	} else {
		name_key(nd->name, key, keylen, order, portno);
	}
}

static int cmp_port(const void *a, const void *b)
{
	const struct port *x = a, *y = b;
	if (x->index != y->index)
		return x->index < 0 ? 1 : y->index < 0 ? -1 : x->index < y->index ? -1 : 1;
	return strcmp(x->key, y->key);
}

static int cmp_twin(const void *a, const void *b)
{
	const struct twin *x = a, *y = b;
	if (x->order != y->order)
		return x->order < y->order ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int group_candidates(struct disc *d)
{
	d->ports = calloc(d->n_nds ? d->n_nds : 1, sizeof *d->ports);
	if (!d->ports)
		return -ENOMEM;
	for (size_t i = 0; i < d->n_nds; i++) {
		if (!d->fabric[i])
			continue;
		char key[32];
		unsigned order;
		long portno;
		twin_key(&d->nds[i], key, sizeof key, &order, &portno);
		struct port *p = NULL;
		for (size_t j = 0; j < d->n_ports; j++)
			if (strcmp(d->ports[j].key, key) == 0)
				p = &d->ports[j];
		if (!p) {
			p = &d->ports[d->n_ports++];
			util_strlcpy(p->key, key, sizeof p->key);
			p->index = portno;
		}
		if (p->n < MAX_TWINS)
			p->twins[p->n++] = (struct twin){(long)i, d->nds[i].name, order};
	}
	qsort(d->ports, d->n_ports, sizeof *d->ports, cmp_port);
	for (size_t j = 0; j < d->n_ports; j++) {
		struct port *p = &d->ports[j];
		qsort(p->twins, p->n, sizeof p->twins[0], cmp_twin);
		bool dup = false;
		for (size_t k = 0; k < d->n_ports; k++)
			if (k != j && d->ports[k].index == p->index)
				dup = true;
		if (p->index >= 0 && !dup)
			snprintf(p->name, sizeof p->name, "%ld", p->index);
		else
			util_strlcpy(p->name, p->key, sizeof p->name);
	}
	return 0;
}

static int select_fabric(struct disc *d, json_t **selection)
{
	const struct topo_opts *o = d->o;
	d->fabric = calloc(d->n_nds ? d->n_nds : 1, sizeof *d->fabric);
	if (!d->fabric)
		return -ENOMEM;
	if (o->n_ports > 0) {
		json_t *map = json_object();
		d->ports = calloc(o->n_ports, sizeof *d->ports);
		if (!d->ports) {
			json_decref(map);
			return -ENOMEM;
		}
		for (size_t i = 0; i < o->n_ports; i++) {
			const struct topo_port_spec *s = &o->ports[i];
			struct port *p = &d->ports[d->n_ports++];
			util_strlcpy(p->name, s->name ? s->name : "", sizeof p->name);
			util_strlcpy(p->key, p->name, sizeof p->key);
			p->index = -1;
			json_t *list = json_array();
			for (size_t k = 0; k < s->n_netdevs && p->n < MAX_TWINS; k++) {
				long idx = find_nd(d, s->netdevs[k]);
				if (idx >= 0)
					d->fabric[idx] = true;
				p->twins[p->n++] = (struct twin){idx, s->netdevs[k], (unsigned)k};
				json_array_append_new(list, json_string(s->netdevs[k]));
			}
			json_object_set_new(map, p->name, list);
		}
		*selection = json_pack("{s:s,s:o}", "by", "ports", "ports", map);
		return 0;
	}
	if (o->n_interfaces > 0) {
		json_t *globs = json_array();
		for (size_t k = 0; k < o->n_interfaces; k++)
			json_array_append_new(globs, json_string(o->interfaces[k]));
		for (size_t i = 0; i < d->n_nds; i++)
			for (size_t k = 0; k < o->n_interfaces; k++)
				if (fnmatch(o->interfaces[k], d->nds[i].name, 0) == 0)
					d->fabric[i] = true;
		*selection = json_pack("{s:s,s:o}", "by", "interfaces", "interfaces", globs);
	} else {
		for (size_t i = 0; i < d->n_nds; i++)
			d->fabric[i] = d->nds[i].has_pci && d->nds[i].vendor == TOPO_CX7_VENDOR &&
				       d->nds[i].device == TOPO_CX7_DEVICE;
		char id[16];
		snprintf(id, sizeof id, "%04x:%04x", TOPO_CX7_VENDOR, TOPO_CX7_DEVICE);
		*selection = json_pack("{s:s,s:[s]}", "by", "pci_id", "pci_ids", id);
	}
	return group_candidates(d);
}

/* ---- RDMA ---- */

static bool gid_v4mapped(const uint8_t *g)
{
	static const uint8_t pfx[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	return memcmp(g, pfx, 12) == 0;
}

/* Pick by type and family as perftest and NCCL do, never by a fixed index:
 * RoCE v2 of this netdev, IPv4-mapped first, then global IPv6, then link-local. */
static int pick_rocev2(const struct topo_ibport *p, const char *netdev)
{
	int best = -1, best_rank = 99;
	for (size_t i = 0; i < p->n_gids; i++) {
		const struct topo_gid *g = &p->gids[i];
		if (g->type != 2 || (g->ndev[0] && strcmp(g->ndev, netdev) != 0))
			continue;
		int rank = gid_v4mapped(g->raw)			       ? 0
			   : (g->raw[0] == 0xfe && (g->raw[1] & 0xc0) == 0x80) ? 2
									       : 1;
		if (rank < best_rank) {
			best_rank = rank;
			best = g->index;
		}
	}
	return best;
}

static bool port_names(const struct topo_ibport *p, const char *netdev)
{
	if (strcmp(p->ndev, netdev) == 0)
		return true;
	for (size_t g = 0; g < p->n_gids; g++)
		if (strcmp(p->gids[g].ndev, netdev) == 0)
			return true;
	return false;
}

static bool ib_names(const struct topo_ibdev *ib, const char *netdev)
{
	for (size_t k = 0; k < ib->n_ports; k++)
		if (port_names(&ib->ports[k], netdev))
			return true;
	return false;
}

/* The RDMA device of a netdev: the one on its PCI function; else (a netdev
 * without one, e.g. rxe on a veth) the one whose GIDs name the netdev, known
 * from each port's first GID; the GID tables of ports where that is unknown
 * are read only if nothing else matched. -1 if none. */
static long match_ib(struct disc *d, const struct topo_nd *nd)
{
	long found = -1;
	for (size_t i = 0; i < d->n_ibs; i++)
		if (nd->has_pci && d->ibs[i].has_pci && strcmp(d->ibs[i].pci, nd->pci) == 0)
			found = (long)i;
	if (found >= 0)
		return found;
	for (size_t i = 0; i < d->n_ibs; i++)
		if (ib_names(&d->ibs[i], nd->name))
			return (long)i;
	for (size_t i = 0; i < d->n_ibs; i++) {
		struct topo_ibdev *ib = &d->ibs[i];
		bool unknown = false;
		for (size_t k = 0; k < ib->n_ports; k++)
			unknown |= !ib->ports[k].ndev[0] && !ib->ports[k].gids_read;
		if (!unknown)
			continue;
		topo_sysfs_ibdev_gids(d->root, ib);
		if (ib_names(ib, nd->name))
			return (long)i;
	}
	return -1;
}

/* Match every fabric netdev to its RDMA device, then get the GID tables of those
 * devices only (verbs where it may be used, else sysfs): an rxe table has 1024
 * slots and there may be many devices that are not the fabric's. */
static int load_rdma(struct disc *d, bool verbs, bool *verbs_used)
{
	d->ib_of = calloc(d->n_nds ? d->n_nds : 1, sizeof *d->ib_of);
	bool *want = calloc(d->n_ibs ? d->n_ibs : 1, sizeof *want);
	if (!d->ib_of || !want) {
		free(want);
		return -ENOMEM;
	}
	for (size_t i = 0; i < d->n_nds; i++) {
		d->ib_of[i] = d->fabric[i] ? match_ib(d, &d->nds[i]) : -1;
		if (d->ib_of[i] >= 0)
			want[d->ib_of[i]] = true;
	}
	if (verbs) {
		char note[1024];
		topo_verbs_fill(d->ibs, d->n_ibs, want, note, sizeof note);
		if (note[0])
			json_array_append_new(d->notes, str_or_null(note));
	}
	for (size_t i = 0; i < d->n_ibs; i++) {
		if (!want[i])
			continue;
		if (strcmp(d->ibs[i].source, TOPO_SRC_VERBS) == 0)
			*verbs_used = true;
		else
			topo_sysfs_ibdev_gids(d->root, &d->ibs[i]);
	}
	free(want);
	return 0;
}

static json_t *rdma_json(const struct disc *d, const struct topo_nd *nd)
{
	long ni = nd - d->nds;
	if (ni < 0 || (size_t)ni >= d->n_nds || d->ib_of[ni] < 0)
		return json_null();
	const struct topo_ibdev *ib = &d->ibs[d->ib_of[ni]];
	/* The port whose GIDs name this netdev; a CX-7 function has one port. */
	const struct topo_ibport *p = NULL;
	for (size_t k = 0; k < ib->n_ports && !p; k++)
		if (port_names(&ib->ports[k], nd->name))
			p = &ib->ports[k];
	if (!p && ib->n_ports)
		p = &ib->ports[0];
	json_t *r = json_object();
	json_object_set_new(r, "device", str_or_null(ib->name));
	json_object_set_new(r, "port", p ? json_integer(p->num) : json_null());
	json_object_set_new(r, "hca_type", str_or_null(ib->hca_type));
	json_object_set_new(r, "fw_ver", str_or_null(ib->fw_ver));
	json_object_set_new(r, "state", p && p->state >= 0 ? json_string(p->state_w) : json_null());
	json_object_set_new(r, "phys_state",
			    p && p->phys_state >= 0 ? json_string(p->phys_state_w) : json_null());
	json_object_set_new(r, "rate", p ? str_or_null(p->rate) : json_null());
	json_t *gbps = json_null();
	if (p && p->rate_tenths >= 0)
		gbps = p->rate_tenths % 10 ? json_real((double)p->rate_tenths / 10.0)
					   : json_integer(p->rate_tenths / 10);
	json_object_set_new(r, "rate_gbps", gbps);
	json_object_set_new(r, "link_layer", p ? str_or_null(p->link_layer) : json_null());
	int pick = p ? pick_rocev2(p, nd->name) : -1;
	json_object_set_new(r, "rocev2_gid_index", pick >= 0 ? json_integer(pick) : json_null());
	json_t *gids = json_array();
	for (size_t g = 0; p && g < p->n_gids; g++) {
		const struct topo_gid *x = &p->gids[g];
		char txt[INET6_ADDRSTRLEN];
		inet_ntop(AF_INET6, x->raw, txt, sizeof txt);
		const char *type = x->type == 2				  ? "roce_v2"
				   : x->type == 1 && strcmp(p->link_layer, "infiniband") == 0 ? "ib"
				   : x->type == 1					  ? "roce_v1"
											  : NULL;
		if (x->index == pick)
			json_object_set_new(r, "rocev2_gid", json_string(txt));
		json_array_append_new(gids, json_pack("{s:i,s:s,s:o,s:o}", "index", x->index, "gid",
						      txt, "type", str_or_null(type), "netdev",
						      str_or_null(x->ndev)));
	}
	if (pick < 0)
		json_object_set_new(r, "rocev2_gid", json_null());
	json_object_set_new(r, "gids", gids);
	json_object_set_new(r, "source", json_string(ib->source));
	return r;
}

/* ---- JSON ---- */

static void hexid(char *buf, size_t len, long v)
{
	if (v >= 0)
		snprintf(buf, len, "0x%04lx", v);
	else
		buf[0] = '\0';
}

static json_t *netdev_json(const struct disc *d, const struct topo_nd *nd, bool present)
{
	json_t *o = json_object();
	json_object_set_new(o, "netdev", json_string(nd->name));
	json_object_set_new(o, "present", json_boolean(present));
	json_object_set_new(o, "ifindex", num_or_null(nd->ifindex));
	json_object_set_new(o, "mac", str_or_null(nd->mac));
	json_object_set_new(o, "mtu", num_or_null(nd->mtu));
	json_object_set_new(o, "operstate", str_or_null(nd->operstate));
	json_object_set_new(o, "carrier", nd->carrier >= 0 ? json_boolean(nd->carrier) : json_null());
	json_object_set_new(o, "admin_up", nd->admin_up >= 0 ? json_boolean(nd->admin_up) : json_null());
	json_object_set_new(o, "speed_mbps", num_or_null(nd->speed));
	json_object_set_new(o, "virtual", present && nd->sysfs_ok ? json_boolean(nd->is_virtual)
								  : json_null());
	json_object_set_new(o, "driver", str_or_null(nd->driver));
	json_t *pci = json_null();
	if (nd->has_pci) {
		char v[24], dv[24];
		hexid(v, sizeof v, nd->vendor);
		hexid(dv, sizeof dv, nd->device);
		pci = json_object();
		json_object_set_new(pci, "address", json_string(nd->pci));
		json_object_set_new(pci, "vendor_id", str_or_null(v));
		json_object_set_new(pci, "device_id", str_or_null(dv));
		json_object_set_new(pci, "current_link_width", num_or_null(nd->cur_width));
		json_object_set_new(pci, "max_link_width", num_or_null(nd->max_width));
		json_object_set_new(pci, "current_link_speed", str_or_null(nd->cur_speed));
		json_object_set_new(pci, "max_link_speed", str_or_null(nd->max_speed));
		json_object_set_new(pci, "current_gen", nd->cur_gen > 0 ? json_integer(nd->cur_gen)
									: json_null());
		json_object_set_new(pci, "max_gen", nd->max_gen > 0 ? json_integer(nd->max_gen)
								: json_null());
	}
	json_object_set_new(o, "pci", pci);
	json_object_set(o, "ipv4", nd->src_addr ? nd->ipv4 : json_null());
	json_object_set(o, "ipv6", nd->src_addr ? nd->ipv6 : json_null());
	json_object_set_new(o, "rdma", present ? rdma_json(d, nd) : json_null());
	json_t *src = json_object();
	json_object_set_new(src, "ifindex", str_or_null(nd->src_ifindex));
	json_object_set_new(src, "mac", str_or_null(nd->src_mac));
	json_object_set_new(src, "mtu", str_or_null(nd->src_mtu));
	json_object_set_new(src, "operstate", str_or_null(nd->src_oper));
	json_object_set_new(src, "carrier", str_or_null(nd->src_carrier));
	json_object_set_new(src, "speed_mbps", str_or_null(nd->src_speed));
	json_object_set_new(src, "driver", str_or_null(nd->src_driver));
	json_object_set_new(src, "pci", str_or_null(nd->src_pci));
	json_object_set_new(src, "addresses", str_or_null(nd->src_addr));
	json_object_set_new(o, "sources", src);
	return o;
}

/* The machine's CPUs and memory as a scheduler sees them (Slurm's NodeName
 * CPUs and RealMemory): sys/devices/system/cpu/online ("0-19" -> 20) and
 * proc/meminfo MemTotal, both under the root. NULL when neither is there (a
 * fixture tree without them). */
static json_t *host_json(const char *root)
{
	char path[4096], line[256];
	long long cpus = -1, mem_kib = -1;
	FILE *f;
	if (topo_sysfs_path(root, "sys/devices/system/cpu/online", path, sizeof path) == 0 &&
	    (f = fopen(path, "re"))) {
		if (fgets(line, sizeof line, f)) {
			cpus = 0;
			for (char *p = line; *p && *p != '\n';) {
				char *e;
				long a = strtol(p, &e, 10), b = a;
				if (e == p || a < 0) {
					cpus = -1;
					break;
				}
				p = e;
				if (*p == '-') {
					b = strtol(p + 1, &e, 10);
					if (e == p + 1 || b < a) {
						cpus = -1;
						break;
					}
					p = e;
				}
				cpus += b - a + 1;
				if (*p == ',')
					p++;
				else if (*p && *p != '\n') {
					cpus = -1;
					break;
				}
			}
		}
		fclose(f);
	}
	if (topo_sysfs_path(root, "proc/meminfo", path, sizeof path) == 0 &&
	    (f = fopen(path, "re"))) {
		while (fgets(line, sizeof line, f))
			if (sscanf(line, "MemTotal: %lld kB", &mem_kib) == 1)
				break;
		fclose(f);
	}
	if (cpus <= 0 && mem_kib <= 0)
		return NULL;
	return json_pack("{s:o,s:o}", "cpus", cpus > 0 ? json_integer(cpus) : json_null(),
			 "memory_mib", mem_kib > 0 ? json_integer(mem_kib / 1024) : json_null());
}

static json_t *build_json(struct disc *d, json_t *selection, bool netlink, bool verbs_used)
{
	json_t *root = json_object();
	json_object_set_new(root, "schema_version", json_integer(1));
	json_object_set_new(root, "sysfs_root", str_or_null(d->root));
	json_object_set_new(root, "sources_used",
			    json_pack("{s:b,s:b,s:b}", "sysfs", 1, "netlink", netlink, "verbs",
				      verbs_used));
	json_object_set(root, "notes", d->notes);
	json_object_set_new(root, "selection", selection);
	json_t *ports = json_array();
	for (size_t j = 0; j < d->n_ports; j++) {
		const struct port *p = &d->ports[j];
		json_t *twins = json_array();
		for (size_t k = 0; k < p->n; k++) {
			if (p->twins[k].nd >= 0) {
				json_array_append_new(twins,
						      netdev_json(d, &d->nds[p->twins[k].nd], true));
			} else {
				struct topo_nd blank;
				topo_nd_init(&blank);
				util_strlcpy(blank.name, p->twins[k].name, sizeof blank.name);
				json_array_append_new(twins, netdev_json(d, &blank, false));
				json_decref(blank.ipv4);
				json_decref(blank.ipv6);
			}
		}
		json_array_append_new(ports, json_pack("{s:s,s:o}", "name", p->name, "twins", twins));
	}
	json_object_set_new(root, "ports", ports);
	json_t *other = json_array();
	for (size_t i = 0; i < d->n_nds; i++) {
		const struct topo_nd *nd = &d->nds[i];
		if (d->fabric[i] || !nd->has_device)
			continue;
		char v[24], dv[24];
		hexid(v, sizeof v, nd->vendor);
		hexid(dv, sizeof dv, nd->device);
		json_array_append_new(other, json_pack("{s:s,s:o,s:o,s:o,s:o}", "netdev", nd->name,
						       "pci_address", str_or_null(nd->pci), "vendor_id",
						       str_or_null(v), "device_id", str_or_null(dv),
						       "driver", str_or_null(nd->driver)));
	}
	json_object_set_new(root, "other_nics", other);
	json_t *host = host_json(d->root);
	if (host)
		json_object_set_new(root, "host", host);
	return root;
}

int topo_discover(const struct topo_opts *opts, json_t **out, char *err, size_t errlen)
{
	struct topo_opts defaults;
	if (!opts) {
		topo_opts_init(&defaults);
		opts = &defaults;
	}
	struct disc d = {.o = opts};
	d.root = opts->sysfs_root && *opts->sysfs_root ? opts->sysfs_root : "/";
	bool real_root = strcmp(d.root, "/") == 0;
	d.notes = json_array();
	int r;
	if (opts->use_netlink) {
		r = topo_nl_netdevs(&d.nds, &d.n_nds, err, errlen);
		if (r < 0)
			goto out;
		for (size_t i = 0; i < d.n_nds; i++)
			topo_sysfs_netdev_extras(d.root, &d.nds[i], true);
	} else {
		r = topo_sysfs_netdevs(d.root, &d.nds, &d.n_nds);
		if (r < 0) {
			char p[4096];
			topo_sysfs_path(d.root, "sys/class/net", p, sizeof p);
			snprintf(err, errlen, "cannot read %s: %s", p, strerror(-r));
			goto out;
		}
		for (size_t i = 0; i < d.n_nds; i++)
			topo_sysfs_netdev_extras(d.root, &d.nds[i], false);
		load_addr_dump(&d);
	}
	qsort(d.nds, d.n_nds, sizeof *d.nds, cmp_nd);
	r = topo_sysfs_ibdevs(d.root, &d.ibs, &d.n_ibs);
	if (r < 0) {
		snprintf(err, errlen, "reading RDMA devices: %s", strerror(-r));
		goto out;
	}
	json_t *selection = NULL;
	r = select_fabric(&d, &selection);
	bool verbs_used = false;
	if (r == 0)
		r = load_rdma(&d, opts->use_verbs && real_root, &verbs_used);
	if (r < 0) {
		json_decref(selection);
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	*out = build_json(&d, selection, opts->use_netlink, verbs_used);
	r = 0;
out:
	json_decref(d.notes);
	free(d.ports);
	free(d.fabric);
	free(d.ib_of);
	topo_nds_free(d.nds, d.n_nds);
	topo_ibdevs_free(d.ibs, d.n_ibs);
	return r;
}

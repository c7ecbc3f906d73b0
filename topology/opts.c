/* opts: discovery options and how they come from the config file. */
#include "discover.h"

#include "cfg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct owned {
	json_t *cfg;
	const char **interfaces;
	struct topo_port_spec *ports;
	const char **names; /* all port netdev names, one block */
};

void topo_opts_init(struct topo_opts *o)
{
	memset(o, 0, sizeof *o);
	o->sysfs_root = "/";
	o->use_netlink = true;
	o->use_verbs = true;
}

void topo_opts_free(struct topo_opts *o)
{
	struct owned *w = o->owned;
	if (w) {
		free(w->interfaces);
		free(w->ports);
		free(w->names);
		json_decref(w->cfg);
		free(w);
	}
	o->owned = NULL;
	o->interfaces = NULL;
	o->n_interfaces = 0;
	o->ports = NULL;
	o->n_ports = 0;
}

static bool is_root(const char *r) { return !r || !*r || strcmp(r, "/") == 0; }

int topo_opts_from_config(struct topo_opts *o, json_t *cfg, char *err, size_t errlen)
{
	if (!cfg)
		return 0;
	topo_opts_free(o);
	struct owned *w = calloc(1, sizeof *w);
	if (!w)
		return -ENOMEM;
	w->cfg = json_incref(cfg);
	o->owned = w;
	const char *s;
	int r = cfg_get_str(cfg, "discovery.sysfs_root", &s, err, errlen);
	if (r == 0) {
		if (!*s) {
			snprintf(err, errlen, "discovery.sysfs_root: expected a directory");
			goto bad;
		}
		o->sysfs_root = s;
		if (!is_root(s))
			o->use_netlink = o->use_verbs = false;
	} else if (r != -ENOENT) {
		goto bad;
	}
	long long mtu;
	r = cfg_get_int(cfg, "fabric.mtu", 68, 65535, &mtu, err, errlen);
	if (r == 0)
		o->cluster_mtu = (int)mtu;
	else if (r != -ENOENT)
		goto bad;
	json_t *ifs = cfg_get(cfg, "fabric.interfaces");
	if (ifs) {
		if (!json_is_array(ifs)) {
			snprintf(err, errlen, "fabric.interfaces: expected a list of interface names or globs");
			goto bad;
		}
		size_t n = json_array_size(ifs);
		w->interfaces = calloc(n ? n : 1, sizeof *w->interfaces);
		if (!w->interfaces)
			goto nomem;
		for (size_t i = 0; i < n; i++) {
			const char *g = json_string_value(json_array_get(ifs, i));
			if (!g || !*g || strlen(g) > 64) {
				snprintf(err, errlen, "fabric.interfaces[%zu]: expected a name or glob", i);
				goto bad;
			}
			w->interfaces[i] = g;
		}
		o->interfaces = w->interfaces;
		o->n_interfaces = n;
	}
	json_t *ports = cfg_get(cfg, "fabric.ports");
	if (ports) {
		if (!json_is_object(ports) || json_object_size(ports) == 0) {
			snprintf(err, errlen,
				 "fabric.ports: expected a map of port -> list of twin netdevs, e.g. 0: [enp1s0f0np0, enP2p1s0f0np0]");
			goto bad;
		}
		size_t np = json_object_size(ports), total = 0;
		const char *key;
		json_t *v;
		json_object_foreach(ports, key, v) {
			if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > 8) {
				snprintf(err, errlen, "fabric.ports.%s: expected a list of 1 to 8 netdev names",
					 key);
				goto bad;
			}
			total += json_array_size(v);
		}
		w->ports = calloc(np, sizeof *w->ports);
		w->names = calloc(total, sizeof *w->names);
		if (!w->ports || !w->names)
			goto nomem;
		size_t pi = 0, ni = 0;
		json_object_foreach(ports, key, v) {
			struct topo_port_spec *p = &w->ports[pi++];
			p->name = key;
			p->netdevs = &w->names[ni];
			for (size_t i = 0; i < json_array_size(v); i++) {
				const char *nm = json_string_value(json_array_get(v, i));
				if (!nm || !*nm || strlen(nm) > 15 || strchr(nm, '/')) {
					snprintf(err, errlen, "fabric.ports.%s[%zu]: expected a netdev name",
						 key, i);
					goto bad;
				}
				w->names[ni++] = nm;
				p->n_netdevs++;
			}
		}
		o->ports = w->ports;
		o->n_ports = np;
	}
	return 0;
nomem:
	snprintf(err, errlen, "out of memory");
	topo_opts_free(o);
	return -ENOMEM;
bad:
	topo_opts_free(o);
	return -EINVAL;
}

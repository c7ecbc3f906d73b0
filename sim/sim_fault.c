/* Fault injection: cut/restore, mtu, swap, delay, kill/start. */
#include "sim_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <netlink/netlink.h>

struct fctx {
	struct sim *s;
	struct simnets n;
	char *err;
	size_t errlen;
};

static int end_apply_up(struct fctx *f, const struct sim_end *e)
{
	int i = simx_idx(&f->n, e->ns);
	if (i < 0)
		return i;
	return simnet_link_set(f->n.sk[i], e->ifname, e->up ? 1 : 0, 0, -1);
}

static int set_cut(struct fctx *f, struct sim_link *l, bool cut)
{
	l->cut = cut;
	l->a.up = !cut;
	l->b.up = !cut && l->kind != SIM_LK_UNPLUGGED;
	int r = end_apply_up(f, &l->a);
	if (r == 0)
		r = end_apply_up(f, &l->b);
	if (r < 0)
		return sim_errf(f->err, f->errlen, r, "cannot set %s:%s %s: %s", l->a.ns, l->a.ifname,
				cut ? "down" : "up", strerror(-r));
	return 0;
}

static int parse_port(const char *thing)
{
	if (strcmp(thing, "0") == 0)
		return 0;
	if (strcmp(thing, "1") == 0)
		return 1;
	return -1;
}

/* The link of NODE:IFNAME (node end only). */
static struct sim_link *find_if(struct fctx *f, int k, const char *ifname, struct sim_end **end)
{
	struct sim_link *l = simm_find_end(f->s, f->s->nodes[k - 1].name, ifname, end);
	if (!l)
		sim_errf(f->err, f->errlen, -ENODEV,
			 "%s has no netdev %s (fabric: enp1s0f0np0 enP2p1s0f0np0 enp1s0f1np1 enP2p1s0f1np1; management: enP7s7)",
			 f->s->nodes[k - 1].name, ifname);
	return l;
}

static int do_cut(struct fctx *f, int k, const char *thing, bool cut)
{
	int port = parse_port(thing);
	if (port >= 0) {
		for (int t = 0; t < 2; t++) {
			struct sim_link *l = find_if(f, k, simm_fabric_ifname(port, t), NULL);
			if (!l)
				return -ENODEV;
			int r = set_cut(f, l, cut);
			if (r < 0)
				return r;
		}
		return 0;
	}
	struct sim_link *l = find_if(f, k, thing, NULL);
	return l ? set_cut(f, l, cut) : -ENODEV;
}

/* One end of a cable administratively down (or up again): its peer keeps its
 * admin state and loses carrier, as when someone runs `ip link set X down`
 * on one node only. */
static int do_admin(struct fctx *f, int k, const char *thing, bool up)
{
	int port = parse_port(thing);
	for (int t = 0; t < 2; t++) {
		if (port < 0 && t > 0)
			break;
		struct sim_end *e;
		if (!find_if(f, k, port >= 0 ? simm_fabric_ifname(port, t) : thing, &e))
			return -ENODEV;
		e->up = up;
		int r = end_apply_up(f, e);
		if (r < 0)
			return sim_errf(f->err, f->errlen, r, "cannot set %s:%s %s: %s", e->ns, e->ifname,
					up ? "up" : "down", strerror(-r));
	}
	return 0;
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (!*s || *end || v < lo || v > hi)
		return -EINVAL;
	*out = (int)v;
	return 0;
}

static int do_mtu(struct fctx *f, int k, const char *ifname, const char *val)
{
	int mtu;
	if (parse_int(val, 68, 65535, &mtu) < 0)
		return sim_errf(f->err, f->errlen, -EINVAL, "MTU '%s' is not a number from 68 to 65535",
				val);
	struct sim_end *e;
	if (!find_if(f, k, ifname, &e))
		return -ENODEV;
	int i = simx_idx(&f->n, e->ns);
	int r = i < 0 ? i : simnet_link_set(f->n.sk[i], e->ifname, -1, mtu, -1);
	if (r < 0)
		return sim_errf(f->err, f->errlen, r, "cannot set the MTU of %s:%s to %d: %s", e->ns,
				e->ifname, mtu, strerror(-r));
	e->mtu = mtu;
	return 0;
}

static int do_delay(struct fctx *f, int k, const char *ifname, const char *val)
{
	int ms;
	if (parse_int(val, 0, 60000, &ms) < 0)
		return sim_errf(f->err, f->errlen, -EINVAL,
				"delay '%s' is not a number of milliseconds from 0 to 60000", val);
	struct sim_end *e;
	if (!find_if(f, k, ifname, &e))
		return -ENODEV;
	int old = e->delay_ms;
	e->delay_ms = ms;
	int r = simx_delay(&f->n, e);
	if (r < 0) {
		e->delay_ms = e->delay_pid > 0 ? old : 0;
		return sim_errf(f->err, f->errlen, r, "cannot set a delay on %s:%s: %s", e->ns,
				e->ifname, strerror(-r));
	}
	return 0;
}

static enum sim_link_kind kind_for_peer(const struct sim *s, const struct sim_end *peer)
{
	char mgmt[SIM_NS_MAX], sw[SIM_NS_MAX];
	simm_ns_name(s, "mgmt", mgmt, sizeof mgmt);
	simm_ns_name(s, "switch", sw, sizeof sw);
	if (strcmp(peer->ns, sw) == 0)
		return SIM_LK_SWITCH;
	if (strcmp(peer->ns, mgmt) == 0)
		return SIM_LK_UNPLUGGED;
	return SIM_LK_CABLE;
}

static void relink(const struct sim *s, struct sim_link *l, const struct sim_end *node,
		   const struct sim_end *peer)
{
	l->a = *node;
	l->b = *peer;
	l->kind = kind_for_peer(s, peer);
	l->cut = false;
	l->a.up = true;
	l->b.up = l->kind != SIM_LK_UNPLUGGED;
}

static int do_swap(struct fctx *f, int ka, int pa, int kb, int pb)
{
	if (ka == kb && pa == pb)
		return sim_errf(f->err, f->errlen, -EINVAL, "swap needs two different ports");
	for (int t = 0; t < 2; t++) {
		struct sim_end *xe, *ye;
		struct sim_link *l1 = find_if(f, ka, simm_fabric_ifname(pa, t), &xe);
		struct sim_link *l2 = find_if(f, kb, simm_fabric_ifname(pb, t), &ye);
		if (!l1 || !l2)
			return -ENODEV;
		if (l1 == l2)
			continue; /* cabled to each other: exchanging peers changes nothing */
		struct sim_end x = *xe, y = *ye;
		struct sim_end xp = xe == &l1->a ? l1->b : l1->a;
		struct sim_end yp = ye == &l2->a ? l2->b : l2->a;
		int ix = simx_idx(&f->n, x.ns), iy = simx_idx(&f->n, y.ns);
		int r = ix < 0 ? ix : iy < 0 ? iy : 0;
		if (r == 0)
			r = simnet_link_del(f->n.sk[ix], x.ifname);
		if (r == 0)
			r = simnet_link_del(f->n.sk[iy], y.ifname);
		if (r < 0)
			return sim_errf(f->err, f->errlen, r, "cannot unplug %s:%s / %s:%s: %s", x.ns,
					x.ifname, y.ns, y.ifname, strerror(-r));
		relink(f->s, l1, &x, &yp);
		relink(f->s, l2, &y, &xp);
		if ((r = simx_make_link(&f->n, l1)) < 0 || (r = simx_make_link(&f->n, l2)) < 0)
			return sim_errf(f->err, f->errlen, r, "cannot re-cable %s:%s / %s:%s: %s",
					x.ns, x.ifname, y.ns, y.ifname, strerror(-r));
	}
	return 0;
}

static int do_start(struct fctx *f, int k)
{
	struct sim *s = f->s;
	if (sima_running(s, k))
		return sim_errf(f->err, f->errlen, -EALREADY, "sparkd of %s is already running",
				s->nodes[k - 1].name);
	if (!s->sparkd[0] && sim_find_sparkd(s->sparkd, sizeof s->sparkd) < 0)
		return sim_errf(f->err, f->errlen, -ENOENT,
				"sparkd not found (SPARKD, next to sparkctl, ../agent/, PATH); build it");
	int r = sima_spawn(s, k, f->err, f->errlen);
	if (r < 0)
		return r;
	s->nodes[k - 1].bare = false; /* the sim runs its sparkd from now on */
	const char *t = getenv("SPARK_SIM_AGENT_TIMEOUT_MS");
	int tmo = t && atoi(t) > 0 ? atoi(t) : 15000;
	s->agents = true;
	return sima_wait(s, 1u << (k - 1), tmo, f->err, f->errlen);
}

int sim_fault(const char *kind, int argc, char *const args[], const char *defprefix, char *err,
	      size_t errlen)
{
	static const struct {
		const char *name;
		int nargs;
	} kinds[] = {{"cut", 1},   {"restore", 1}, {"mtu", 2},  {"swap", 2},
		     {"delay", 2}, {"kill", 1},    {"start", 1},  {"down", 1},
		     {"up", 1}};
	int ki = -1;
	for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
		if (kind && strcmp(kind, kinds[i].name) == 0)
			ki = (int)i;
	if (ki < 0)
		return sim_errf(err, errlen, -EINVAL,
				"unknown fault '%s' (cut, restore, mtu, swap, delay, kill, start, down, up)",
				kind ? kind : "");
	if (argc != kinds[ki].nargs)
		return sim_errf(err, errlen, -EINVAL, "fault %s takes %d argument%s", kind,
				kinds[ki].nargs, kinds[ki].nargs > 1 ? "s" : "");
	int r = sim_check_caps(err, errlen);
	if (r < 0)
		return r;
	char prefix[SIM_PREFIX_MAX + 1], prefix2[SIM_PREFIX_MAX + 1], thing[64] = "",
										thing2[64] = "";
	int k, k2 = 0;
	bool needs_thing = ki <= 4 || ki >= 7;
	if (sim_parse_target(args[0], defprefix, prefix, sizeof prefix, &k,
			     needs_thing ? thing : NULL, sizeof thing) < 0 ||
	    (needs_thing && !thing[0]))
		return sim_errf(err, errlen, -EINVAL, "'%s' is not %s", args[0],
				needs_thing ? "NODE:PORT or NODE:IFNAME (e.g. spark-2:0)"
					    : "a node name (e.g. spark-2)");
	if (ki == 3 && (sim_parse_target(args[1], defprefix, prefix2, sizeof prefix2, &k2, thing2,
					 sizeof thing2) < 0 ||
			strcmp(prefix, prefix2) != 0))
		return sim_errf(err, errlen, -EINVAL, "'%s' is not NODE:PORT of the same sim",
				args[1]);
	if (ki == 3 && (parse_port(thing) < 0 || parse_port(thing2) < 0))
		return sim_errf(err, errlen, -EINVAL, "swap takes NODE:PORT twice, PORT being 0 or 1");

	struct fctx f = {.err = err, .errlen = errlen};
	f.s = calloc(1, sizeof *f.s);
	if (!f.s)
		return -ENOMEM;
	int lock = -1;
	char root[PATH_MAX];
	if (simm_root_of(prefix, root, sizeof root) == 0) {
		snprintf(f.s->root, sizeof f.s->root, "%s", root);
		lock = simm_lock(f.s);
	}
	r = simm_load(prefix, f.s, err, errlen);
	if (r < 0)
		goto out;
	if (k > f.s->nnodes || k2 > f.s->nnodes) {
		r = sim_errf(err, errlen, -ENODEV, "sim '%s' has nodes %s-1 to %s-%d", prefix, prefix,
			     prefix, f.s->nnodes);
		goto out;
	}
	switch (ki) {
	case 0: r = do_cut(&f, k, thing, true); break;
	case 1: r = do_cut(&f, k, thing, false); break;
	case 2: r = do_mtu(&f, k, thing, args[1]); break;
	case 3: r = do_swap(&f, k, parse_port(thing), k2, parse_port(thing2)); break;
	case 4: r = do_delay(&f, k, thing, args[1]); break;
	case 5: r = sima_stop(f.s, k); break;
	case 6: r = do_start(&f, k); break;
	case 7: r = do_admin(&f, k, thing, false); break;
	case 8: r = do_admin(&f, k, thing, true); break;
	}
	/* Record what is now true, also after a partial failure. */
	int w = simm_save(f.s);
	if (r == 0 && w < 0)
		r = sim_errf(err, errlen, w, "cannot write %s/sim.json: %s", f.s->root, strerror(-w));
out:
	simx_close(&f.n);
	simm_unlock(lock);
	free(f.s);
	return r;
}

/* watch: netlink link and address events (RTNLGRP_LINK, RTNLGRP_IPV4_IFADDR,
 * RTNLGRP_IPV6_IFADDR) on a non-blocking libnl socket, turned into one
 * callback per real change (the kernel repeats RTM_NEWLINK for many reasons;
 * we compare with the last known state). Speed is not in netlink: it is read
 * from sysfs on every link event. */
#include "discover.h"

#include "nl.h"
#include "topo_internal.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netlink/addr.h>
#include <netlink/cache.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ADDRS 32

struct lstate {
	int ifindex;
	char name[16];
	int carrier;
	long mtu, speed;
	char oper[20];
	char addrs[MAX_ADDRS][INET6_ADDRSTRLEN + 8];
	size_t n_addrs;
	bool seen; /* during a resync */
};

struct topo_watch {
	struct topo_nl nl; /* the event socket (no dumps: those have their own) */
	char root[4096];
	topo_watch_cb cb;
	void *arg;
	struct lstate *links;
	size_t n_links, cap;
	bool loading; /* recording the initial state: no callbacks */
	unsigned extra;  /* bits added to every event (TOPO_CHG_RESYNC) */
	uv_poll_t poll;
	bool uv_started;
	int last_err;
};

static struct lstate *find(struct topo_watch *w, int ifindex)
{
	for (size_t i = 0; i < w->n_links; i++)
		if (w->links[i].ifindex == ifindex)
			return &w->links[i];
	return NULL;
}

static struct lstate *add_link(struct topo_watch *w, int ifindex)
{
	if (w->n_links == w->cap) {
		size_t nc = w->cap ? w->cap * 2 : 16;
		struct lstate *n = realloc(w->links, nc * sizeof *n);
		if (!n)
			return NULL;
		w->links = n;
		w->cap = nc;
	}
	struct lstate *s = &w->links[w->n_links++];
	memset(s, 0, sizeof *s);
	s->ifindex = ifindex;
	s->carrier = -1;
	s->mtu = s->speed = -1;
	return s;
}

static long read_speed(const struct topo_watch *w, const char *name)
{
	char rel[64], b[32];
	size_t len;
	long v;
	snprintf(rel, sizeof rel, "sys/class/net/%s/speed", name);
	if (topo_sysfs_read(w->root, rel, b, sizeof b, &len) < 0 ||
	    topo_parse_long(b, len, -1, 0x7fffffffL, &v) < 0 || v <= 0)
		return -1;
	return v;
}

static void emit(struct topo_watch *w, const struct lstate *s, unsigned changes, int old_carrier,
		 long old_mtu, long old_speed, const char *addr, bool added)
{
	if (w->loading || !w->cb || !changes)
		return;
	struct topo_link_event ev = {
	    .changes = changes | w->extra,
	    .netdev = s->name,
	    .ifindex = s->ifindex,
	    .carrier = s->carrier,
	    .old_carrier = old_carrier,
	    .mtu = s->mtu,
	    .old_mtu = old_mtu,
	    .speed_mbps = s->speed,
	    .old_speed_mbps = old_speed,
	    .operstate = s->oper,
	    .addr = addr,
	    .addr_added = added,
	};
	w->cb(&ev, w->arg);
}

static void apply_link(struct topo_watch *w, struct rtnl_link *l, bool deleted)
{
	int ifindex = rtnl_link_get_ifindex(l);
	const char *name = rtnl_link_get_name(l);
	if (ifindex <= 0 || !name)
		return;
	struct lstate *s = find(w, ifindex);
	if (deleted) {
		if (!s)
			return;
		struct lstate gone = *s;
		*s = w->links[--w->n_links];
		emit(w, &gone, TOPO_CHG_GONE, gone.carrier, gone.mtu, gone.speed, NULL, false);
		return;
	}
	unsigned ch = 0;
	if (!s) {
		s = add_link(w, ifindex);
		if (!s)
			return;
		ch |= TOPO_CHG_NEW;
	}
	s->seen = true;
	char ifn[16];
	if (topo_parse_ifname(name, strlen(name), ifn, sizeof ifn) == 0)
		util_strlcpy(s->name, ifn, sizeof s->name);
	int carrier = rtnl_link_get_carrier(l) ? 1 : 0;
	long mtu = (long)rtnl_link_get_mtu(l);
	char oper[32];
	rtnl_link_operstate2str(rtnl_link_get_operstate(l), oper, sizeof oper);
	long speed = read_speed(w, s->name);
	int oc = s->carrier;
	long om = s->mtu, os = s->speed;
	if (!(ch & TOPO_CHG_NEW)) {
		if (carrier != s->carrier)
			ch |= TOPO_CHG_CARRIER;
		if (mtu != s->mtu)
			ch |= TOPO_CHG_MTU;
		if (speed != s->speed)
			ch |= TOPO_CHG_SPEED;
		if (strcmp(oper, s->oper) != 0)
			ch |= TOPO_CHG_OPERSTATE;
	}
	s->carrier = carrier;
	s->mtu = mtu;
	s->speed = speed;
	util_strlcpy(s->oper, oper, sizeof s->oper);
	emit(w, s, ch, oc, om, os, NULL, false);
}

static void apply_addr(struct topo_watch *w, struct rtnl_addr *a, bool deleted)
{
	struct lstate *s = find(w, rtnl_addr_get_ifindex(a));
	char txt[INET6_ADDRSTRLEN + 8];
	if (!s || topo_nl_addr_text(a, txt, sizeof txt, NULL) < 0)
		return;
	size_t i;
	for (i = 0; i < s->n_addrs; i++)
		if (strcmp(s->addrs[i], txt) == 0)
			break;
	if (deleted) {
		if (i == s->n_addrs)
			return;
		memmove(s->addrs[i], s->addrs[i + 1], (s->n_addrs - i - 1) * sizeof s->addrs[0]);
		s->n_addrs--;
		emit(w, s, TOPO_CHG_ADDR, s->carrier, s->mtu, s->speed, txt, false);
		return;
	}
	if (i < s->n_addrs || s->n_addrs == MAX_ADDRS)
		return; /* flags changed (e.g. DAD done), or too many to track */
	util_strlcpy(s->addrs[s->n_addrs++], txt, sizeof s->addrs[0]);
	emit(w, s, TOPO_CHG_ADDR, s->carrier, s->mtu, s->speed, txt, true);
}

static void parsed(struct nl_object *obj, void *arg)
{
	struct topo_watch *w = arg;
	const char *type = nl_object_get_type(obj);
	int mt = nl_object_get_msgtype(obj);
	if (strcmp(type, "route/link") == 0)
		apply_link(w, (struct rtnl_link *)obj, mt == RTM_DELLINK);
	else if (strcmp(type, "route/addr") == 0)
		apply_addr(w, (struct rtnl_addr *)obj, mt == RTM_DELADDR);
}

static int on_msg(struct nl_msg *msg, void *arg)
{
	nl_msg_parse(msg, parsed, arg);
	return NL_OK;
}

/* Dump links and addresses and apply them as events (initial load or resync).
 * The dump has its own socket: on the event socket, events arriving during a
 * dump would be taken for dump answers and lost. */
static int dump_all(struct topo_watch *w, char *err, size_t errlen)
{
	struct topo_nl d;
	int r = topo_nl_read(&d, TOPO_NL_LINKS | TOPO_NL_ADDRS, err, errlen);
	if (r < 0)
		return r;
	struct nl_cache *links = d.links, *addrs = d.addrs;
	for (size_t i = 0; i < w->n_links; i++)
		w->links[i].seen = false;
	for (struct nl_object *o = nl_cache_get_first(links); o; o = nl_cache_get_next(o))
		apply_link(w, (struct rtnl_link *)o, false);
	for (size_t i = 0; i < w->n_links;) {
		if (!w->links[i].seen) {
			struct lstate gone = w->links[i];
			w->links[i] = w->links[--w->n_links];
			emit(w, &gone, TOPO_CHG_GONE, gone.carrier, gone.mtu, gone.speed, NULL, false);
		} else {
			i++;
		}
	}
	/* Addresses: remove the ones the dump no longer has, then add the new. */
	for (size_t i = 0; i < w->n_links; i++) {
		struct lstate *s = &w->links[i];
		for (size_t k = 0; k < s->n_addrs;) {
			bool found = false;
			for (struct nl_object *o = nl_cache_get_first(addrs); o && !found;
			     o = nl_cache_get_next(o)) {
				char txt[INET6_ADDRSTRLEN + 8];
				struct rtnl_addr *a = (struct rtnl_addr *)o;
				found = rtnl_addr_get_ifindex(a) == s->ifindex &&
					topo_nl_addr_text(a, txt, sizeof txt, NULL) == 0 &&
					strcmp(txt, s->addrs[k]) == 0;
			}
			if (found) {
				k++;
				continue;
			}
			char txt[INET6_ADDRSTRLEN + 8];
			util_strlcpy(txt, s->addrs[k], sizeof txt);
			memmove(s->addrs[k], s->addrs[k + 1], (s->n_addrs - k - 1) * sizeof s->addrs[0]);
			s->n_addrs--;
			emit(w, s, TOPO_CHG_ADDR, s->carrier, s->mtu, s->speed, txt, false);
		}
	}
	for (struct nl_object *o = nl_cache_get_first(addrs); o; o = nl_cache_get_next(o))
		apply_addr(w, (struct rtnl_addr *)o, false);
	topo_nl_close(&d);
	return 0;
}

static void free_watch(struct topo_watch *w)
{
	topo_nl_close(&w->nl);
	free(w->links);
	free(w);
}

int topo_watch_open(struct topo_watch **out, const char *sysfs_root, topo_watch_cb cb,
		    void *arg, char *err, size_t errlen)
{
	struct topo_watch *w = calloc(1, sizeof *w);
	if (!w) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	util_strlcpy(w->root, sysfs_root && *sysfs_root ? sysfs_root : "/", sizeof w->root);
	w->cb = cb;
	w->arg = arg;
	int r = topo_nl_open_events(&w->nl, on_msg, w, err, errlen);
	if (r < 0) {
		free_watch(w);
		return r;
	}
	/* Subscribed first, then dumped: a change in between shows up as an
	 * event compared against the dumped state, never lost. */
	w->loading = true;
	r = dump_all(w, err, errlen);
	w->loading = false;
	if (r < 0) {
		free_watch(w);
		return r;
	}
	*out = w;
	return 0;
}

int topo_watch_fd(const struct topo_watch *w) { return nl_socket_get_fd(w->nl.sk); }

int topo_watch_process(struct topo_watch *w)
{
	for (int rounds = 0; rounds < 4096; rounds++) {
		int r = nl_recvmsgs_default(w->nl.sk);
		if (r >= 0)
			continue;
		if (r == -NLE_AGAIN)
			return 0;
		if (r == -NLE_NOMEM || r == -NLE_MSG_OVERFLOW) {
			/* ENOBUFS: the kernel dropped events. Re-read everything. */
			w->extra = TOPO_CHG_RESYNC;
			int d = dump_all(w, NULL, 0);
			w->extra = 0;
			if (d < 0)
				return d;
			continue;
		}
		return -EIO;
	}
	return 0;
}

static void on_poll(uv_poll_t *h, int status, int events)
{
	struct topo_watch *w = h->data;
	if (status < 0 || !(events & UV_READABLE))
		return;
	w->last_err = topo_watch_process(w);
}

int topo_watch_uv_start(struct topo_watch *w, uv_loop_t *loop)
{
	if (w->uv_started)
		return -EALREADY;
	int r = uv_poll_init(loop, &w->poll, topo_watch_fd(w));
	if (r < 0)
		return r;
	w->poll.data = w;
	/* From here the handle exists: topo_watch_close must uv_close it. */
	w->uv_started = true;
	return uv_poll_start(&w->poll, UV_READABLE, on_poll);
}

static void on_closed(uv_handle_t *h) { free_watch(h->data); }

void topo_watch_close(struct topo_watch *w)
{
	if (!w)
		return;
	if (w->uv_started) {
		uv_poll_stop(&w->poll);
		uv_close((uv_handle_t *)&w->poll, on_closed);
		return;
	}
	free_watch(w);
}

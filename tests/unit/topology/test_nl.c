/* The netlink helper (topology/nl.h) and its three users (discovery, the
 * watcher, the address plan), in a network namespace of the test's own (one
 * node of nsharness.h, one veth pair; nl0 gets no kernel-made link-local
 * address, which could arrive after the watcher's first dump on a busy
 * machine and be counted as one of the test's). Addresses only from 169.254.0.0/16 and
 * fd00::/8. What is checked is what an operator sees: the dump has this
 * namespace's links and addresses, an idle watcher holds one netlink socket
 * and nothing else leaves one open, errors say "netlink: ...", and a watcher
 * whose events overflowed its socket re-reads the state and loses no address
 * change. */
#include "../topology_validate/nsharness.h"
#include "nl.h"
#include "topo_internal.h"
#include "topology/addrplan.h"
#include "topology/discover.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <net/if.h>
#include <netlink/cache.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <sys/socket.h>

/* Inside a node: stop with {"error": "..."} for the test to print. */
#define FAIL(...) return fail_json(__VA_ARGS__)
static json_t *fail_json(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static json_t *fail_json(const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return json_pack("{s:s}", "error", msg);
}

#define NS_SETUP                                                                                    \
	"ip link set lo up && ip link add nl0 type veth peer name nl1 && "                          \
	"ip addr add 169.254.9.1/24 dev nl0 && ip addr add fd00::9/64 dev nl0 nodad && "            \
	"ip link set nl0 addrgenmode none && ip link set nl0 up && ip link set nl1 up"

/* Open AF_NETLINK sockets of this process. */
static int netlink_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	int n = 0, self = dirfd(d);
	struct dirent *e;
	while ((e = readdir(d))) {
		int fd = atoi(e->d_name);
		int dom = 0;
		socklen_t len = sizeof dom;
		if (e->d_name[0] != '.' && fd != self &&
		    getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &len) == 0 && dom == AF_NETLINK)
			n++;
	}
	closedir(d);
	return n;
}

static bool has_addr(struct nl_cache *addrs, int ifindex, const char *want, int want_family)
{
	for (struct nl_object *o = nl_cache_get_first(addrs); o; o = nl_cache_get_next(o)) {
		struct rtnl_addr *a = (struct rtnl_addr *)o;
		char txt[64];
		int fam = 0;
		if (rtnl_addr_get_ifindex(a) == ifindex &&
		    topo_nl_addr_text(a, txt, sizeof txt, &fam) == 0 && strcmp(txt, want) == 0 &&
		    fam == want_family)
			return true;
	}
	return false;
}

static json_t *dump_node(void *arg)
{
	(void)arg;
	if (netlink_fds() != 0)
		FAIL("%d netlink sockets open before the test", netlink_fds());
	int nl0 = (int)if_nametoindex("nl0");
	char err[256] = "";

	/* The helper's own dump. */
	struct topo_nl nl;
	if (topo_nl_read(&nl, TOPO_NL_LINKS | TOPO_NL_ADDRS, err, sizeof err) < 0)
		FAIL("read: %s", err);
	if (netlink_fds() != 1)
		FAIL("an open dump holds %d netlink sockets, not 1", netlink_fds());
	if (nl_cache_nitems(nl.links) != 3) /* lo, nl0, nl1 */
		FAIL("%d links in the dump, not 3", nl_cache_nitems(nl.links));
	if (!has_addr(nl.addrs, nl0, "169.254.9.1/24", AF_INET) ||
	    !has_addr(nl.addrs, nl0, "fd00::9/64", AF_INET6) ||
	    !has_addr(nl.addrs, (int)if_nametoindex("lo"), "127.0.0.1/8", AF_INET))
		FAIL("the address dump lacks nl0's or lo's addresses");
	topo_nl_close(&nl);
	topo_nl_close(&nl); /* twice is harmless */
	if (netlink_fds() != 0)
		FAIL("topo_nl_close left %d netlink sockets", netlink_fds());
	if (topo_nl_read(&nl, TOPO_NL_ADDRS, err, sizeof err) < 0 || nl.links || !nl.addrs)
		FAIL("an address-only dump: %s", err);
	topo_nl_close(&nl);

	/* The error convention: negative errno, one line starting "netlink: ". */
	struct topo_nl none = {0};
	if (topo_nl_dump(&none, TOPO_NL_LINKS, err, sizeof err) != -EIO ||
	    strncmp(err, "netlink: ", 9) != 0)
		FAIL("a dump without a socket: '%s'", err);
	if (topo_nl_dump(&none, TOPO_NL_LINKS, NULL, 0) != -EIO)
		FAIL("a dump without a socket and no err buffer");

	/* Discovery's reader: records for every link, nothing left open. */
	struct topo_nd *nds = NULL;
	size_t n = 0;
	if (topo_nl_netdevs(&nds, &n, err, sizeof err) < 0)
		FAIL("netdevs: %s", err);
	bool found = false;
	for (size_t i = 0; i < n; i++)
		if (strcmp(nds[i].name, "nl0") == 0)
			found = nds[i].ifindex == nl0 &&
				json_array_size(nds[i].ipv4) == 1 &&
				strcmp(json_string_value(json_array_get(nds[i].ipv4, 0)),
				       "169.254.9.1/24") == 0 &&
				strcmp(nds[i].src_addr, TOPO_SRC_NETLINK) == 0;
	topo_nds_free(nds, n);
	if (n != 3 || !found)
		FAIL("discovery read %zu netdevs, nl0 %s", n, found ? "right" : "wrong or missing");
	if (netlink_fds() != 0)
		FAIL("discovery left %d netlink sockets open", netlink_fds());

	/* The address plan: its host addresses and a dry run of apply. */
	json_t *disc = json_object(), *host = NULL, *report = NULL;
	if (topo_host_addresses(disc, &host, err, sizeof err) < 0)
		FAIL("host addresses: %s", err);
	char *txt = json_dumps(host, JSON_COMPACT | JSON_SORT_KEYS);
	bool host_ok = txt && strcmp(txt, "[{\"address\":\"169.254.9.1/24\",\"netdev\":\"nl0\"}]") == 0;
	if (!host_ok)
		FAIL("host addresses: %s", txt ? txt : "null");
	free(txt);
	json_decref(host);
	json_decref(disc);
	json_t *plan = json_loads("{\"pool\":\"169.254.0.0/16\",\"prefix\":24,\"nodes\":{\"n1\":"
				  "[{\"netdev\":\"nl0\",\"address\":\"169.254.9.1/24\"}]}}",
				  0, NULL);
	struct topo_addrplan_apply_opts ao = {.node = "n1", .dry_run = true};
	if (!plan || topo_addrplan_apply(plan, &ao, &report, err, sizeof err) < 0)
		FAIL("apply: %s", err);
	if (json_array_size(json_object_get(report, "kept")) != 1 ||
	    json_is_true(json_object_get(report, "changed")))
		FAIL("apply report: %s", json_dumps(report, JSON_COMPACT));
	json_decref(report);
	json_decref(plan);
	if (netlink_fds() != 0)
		FAIL("the address plan left %d netlink sockets open", netlink_fds());

	/* The watcher: its event socket only, once the first dump is done. */
	struct topo_watch *w = NULL;
	if (topo_watch_open(&w, "/", NULL, NULL, err, sizeof err) < 0)
		FAIL("watch open: %s", err);
	if (netlink_fds() != 1)
		FAIL("an idle watcher holds %d netlink sockets, not 1", netlink_fds());
	topo_watch_close(w);
	if (netlink_fds() != 0)
		FAIL("a closed watcher left %d netlink sockets", netlink_fds());
	return json_pack("{s:b}", "ok", 1);
}

/* Addresses the watcher reported on nl0 (added minus removed), and whether
 * any report came from a resync. */
struct seen {
	char addrs[64][48];
	size_t n;
	unsigned resyncs;
	unsigned events;
};

static void on_event(const struct topo_link_event *ev, void *arg)
{
	struct seen *s = arg;
	s->events++;
	if (ev->changes & TOPO_CHG_RESYNC)
		s->resyncs++;
	if (!(ev->changes & TOPO_CHG_ADDR) || strcmp(ev->netdev, "nl0") != 0 || !ev->addr)
		return;
	size_t i;
	for (i = 0; i < s->n; i++)
		if (strcmp(s->addrs[i], ev->addr) == 0)
			break;
	if (ev->addr_added && i == s->n && s->n < 64)
		snprintf(s->addrs[s->n++], sizeof s->addrs[0], "%s", ev->addr);
	else if (!ev->addr_added && i < s->n)
		memmove(s->addrs[i], s->addrs[i + 1], (--s->n - i) * sizeof s->addrs[0]);
}

static bool seen_has(const struct seen *s, const char *a)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->addrs[i], a) == 0)
			return true;
	return false;
}

/* ip -batch lines "address VERB 169.254.9.K/24 dev nl0" for K in [from, to]. */
static int addr_batch(const char *verb, int from, int to)
{
	char cmd[4096];
	size_t o = (size_t)snprintf(cmd, sizeof cmd, "printf '");
	for (int k = from; k <= to; k++)
		o += (size_t)snprintf(cmd + o, sizeof cmd - o, "address %s 169.254.9.%d/24 dev nl0\\n",
				      verb, k);
	snprintf(cmd + o, sizeof cmd - o, "' | ip -batch -");
	return ns_sh("%s", cmd);
}

static json_t *overflow_node(void *arg)
{
	(void)arg;
	int r;
	struct seen s = {0};
	char err[256] = "";
	struct topo_watch *w = NULL;
	if (topo_watch_open(&w, "/", on_event, &s, err, sizeof err) < 0)
		FAIL("watch open: %s", err);
	/* The smallest receive buffer the kernel allows: a burst of address
	 * events overflows it (ENOBUFS), as thousands of changes would overflow
	 * the real 1 MiB one. */
	int one = 1;
	if (setsockopt(topo_watch_fd(w), SOL_SOCKET, SO_RCVBUFFORCE, &one, sizeof one) < 0)
		FAIL("SO_RCVBUFFORCE: %s", strerror(errno));
	if (addr_batch("add", 10, 29)) /* 20 addresses */
		FAIL("ip -batch failed");
	if ((r = topo_watch_process(w)) < 0)
		FAIL("process after adding: %d", r);
	if (!s.resyncs)
		FAIL("20 address events did not overflow a minimal buffer (%u events): no resync",
		     s.events);
	/* 169.254.9.1 was there before the watcher started: never reported. */
	if (s.n != 20 || seen_has(&s, "169.254.9.1/24"))
		FAIL("after the resync the watcher reported %zu added addresses, not 20 (first %s, "
		     "last %s)",
		     s.n, s.n ? s.addrs[0] : "-", s.n ? s.addrs[s.n - 1] : "-");
	for (int k = 10; k <= 29; k++) {
		char a[32];
		snprintf(a, sizeof a, "169.254.9.%d/24", k);
		if (!seen_has(&s, a))
			FAIL("the address %s was lost in the overflow", a);
	}
	unsigned before = s.resyncs;
	if (addr_batch("del", 10, 24)) /* 15 of them go */
		FAIL("ip -batch failed");
	if ((r = topo_watch_process(w)) < 0)
		FAIL("process after removing: %d", r);
	if (s.n != 5 || !seen_has(&s, "169.254.9.25/24") || !seen_has(&s, "169.254.9.29/24") ||
	    seen_has(&s, "169.254.9.10/24"))
		FAIL("after removing 15 the watcher reports %zu addresses, not the last 5", s.n);
	if (s.resyncs == before)
		FAIL("15 removals did not overflow the buffer: no removal came from a resync");
	if (netlink_fds() != 1)
		FAIL("after resyncs the watcher holds %d netlink sockets, not 1", netlink_fds());
	topo_watch_close(w);
	return json_pack("{s:b, s:i, s:i}", "ok", 1, "events", s.events, "from_resyncs", s.resyncs);
}

static void in_node(json_t *(*fn)(void *))
{
	const struct ns_node nodes[] = {{"n1", NS_SETUP, fn, NULL}};
	struct ns_scene sc = {nodes, 1, NULL, 0, NULL, 20};
	bool skip;
	json_t *res = ns_run(&sc, &skip);
	if (skip)
		cr_skip_test("needs root and network namespaces");
	cr_assert_not_null(res);
	json_t *r = json_object_get(res, "n1");
	char *txt = json_dumps(r, JSON_COMPACT);
	fprintf(stderr, "nl: %s\n", txt ? txt : "null");
	cr_assert(json_is_true(json_object_get(r, "ok")), "%s", txt ? txt : "no answer from the node");
	free(txt);
	json_decref(res);
}

Test(nl, dumps_and_sockets_of_every_user, .timeout = 30) { in_node(dump_node); }

Test(nl, watcher_resyncs_after_overflow, .timeout = 30) { in_node(overflow_node); }

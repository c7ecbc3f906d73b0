/* Real netlink discovery and the live watcher, in a network namespace this
 * test makes (a forked child: unshare(CLONE_NEWNET | CLONE_NEWNS), a private
 * sysfs mount). Four veth "cables" named like a Spark's twins, their peers in
 * the same namespace; fabric.ports given explicitly as the simulator does.
 * Addresses only from 169.254.0.0/16. Everything vanishes with the child. */
#include "topology/discover.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#define SKIP_CODE 77

static const char *const p0[] = {"enp1s0f0np0", "enP2p1s0f0np0"};
static const char *const p1[] = {"enp1s0f1np1", "enP2p1s0f1np1"};
static const struct topo_port_spec spark_ports[] = {{"0", p0, 2}, {"1", p1, 2}};

#define FAIL(...)                                                                                   \
	do {                                                                                        \
		fprintf(stderr, "netns child: " __VA_ARGS__);                                      \
		fputc('\n', stderr);                                                                \
		return 1;                                                                           \
	} while (0)

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof cmd, fmt, ap);
	va_end(ap);
	int r = system(cmd);
	if (r != 0)
		fprintf(stderr, "netns child: '%s' failed (%d)\n", cmd, r);
	return r;
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static json_t *discover_ports(const struct topo_port_spec *ports, size_t n,
			      const char *const *globs, size_t nglobs)
{
	struct topo_opts o;
	topo_opts_init(&o);
	o.ports = ports;
	o.n_ports = n;
	o.interfaces = globs;
	o.n_interfaces = nglobs;
	o.use_verbs = false;
	json_t *d = NULL;
	char err[256];
	if (topo_discover(&o, &d, err, sizeof err) < 0) {
		fprintf(stderr, "netns child: discovery failed: %s\n", err);
		return NULL;
	}
	return d;
}

static json_t *twin(json_t *d, size_t port, size_t t)
{
	return json_array_get(json_object_get(json_array_get(json_object_get(d, "ports"), port), "twins"),
			      t);
}

static int all_up(json_t *d)
{
	for (size_t p = 0; p < 2; p++)
		for (size_t t = 0; t < 2; t++)
			if (!json_is_true(json_object_get(twin(d, p, t), "carrier")))
				return 0;
	return 1;
}

static char *finding_codes(json_t *d)
{
	static char buf[1024];
	json_t *f;
	buf[0] = '\0';
	if (topo_findings(d, 0, &f) < 0)
		return buf;
	size_t i;
	json_t *x;
	json_array_foreach(f, i, x) {
		const char *nd = json_string_value(json_object_get(x, "netdev"));
		size_t l = strlen(buf);
		snprintf(buf + l, sizeof buf - l, "%s%s:%s", i ? " " : "",
			 json_string_value(json_object_get(x, "code")), nd ? nd : "-");
	}
	json_decref(f);
	return buf;
}

struct seen {
	uint64_t carrier_ms, mtu_ms, addr_ms;
	int carrier_new;
	long mtu_new;
	char addr[64];
	uv_timer_t timer;
	uv_loop_t *loop;
	const char *want_addr_netdev;
};

static void on_event(const struct topo_link_event *ev, void *arg)
{
	struct seen *s = arg;
	if ((ev->changes & TOPO_CHG_CARRIER) && strcmp(ev->netdev, "enP2p1s0f1np1") == 0 &&
	    !s->carrier_ms) {
		s->carrier_ms = now_ms();
		s->carrier_new = ev->carrier;
	}
	if ((ev->changes & TOPO_CHG_MTU) && strcmp(ev->netdev, "enp1s0f0np0") == 0 && !s->mtu_ms) {
		s->mtu_ms = now_ms();
		s->mtu_new = ev->mtu;
	}
	if ((ev->changes & TOPO_CHG_ADDR) && ev->addr_added && strcmp(ev->netdev, "enp1s0f1np1") == 0 &&
	    strncmp(ev->addr, "169.254.", 8) == 0 && !s->addr_ms) {
		s->addr_ms = now_ms();
		snprintf(s->addr, sizeof s->addr, "%s", ev->addr);
	}
}

static void on_timeout(uv_timer_t *t) { uv_stop(t->loop); }

/* Run the loop until pred or deadline_ms elapsed. */
static void run_until(uv_loop_t *loop, struct seen *s, uint64_t *field, unsigned deadline_ms)
{
	uint64_t end = now_ms() + deadline_ms;
	while (!*field && now_ms() < end) {
		uv_timer_start(&s->timer, on_timeout, 20, 0);
		uv_run(loop, UV_RUN_ONCE);
	}
}

static int child(void)
{
	if (unshare(CLONE_NEWNET | CLONE_NEWNS) < 0)
		return errno == EPERM ? SKIP_CODE : (perror("unshare"), 1);
	/* Our own /sys, so sysfs shows this namespace's netdevs. */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("sysfs", "/sys", "sysfs", 0, NULL) < 0)
		FAIL("cannot mount a private sysfs: %s", strerror(errno));
	if (system("ip -V >/dev/null 2>&1") != 0)
		return SKIP_CODE;
	static const char *const nd[] = {"enp1s0f0np0", "enP2p1s0f0np0", "enp1s0f1np1",
					 "enP2p1s0f1np1"};
	static const char *const peer[] = {"cab0a", "cab0b", "cab1a", "cab1b"};
	/* Twins of port 0 share a subnet on purpose (a finding); port 1's do not. */
	static const char *const v4[] = {"169.254.1.1/24", "169.254.1.2/24", "169.254.3.1/24",
					 "169.254.4.1/24"};
	if (sh("ip link set lo up"))
		return 1;
	for (int i = 0; i < 4; i++)
		if (sh("ip link add %s mtu 9000 type veth peer name %s mtu 9000", nd[i], peer[i]) ||
		    sh("ip addr add %s dev %s", v4[i], nd[i]) || sh("ip link set %s up", peer[i]) ||
		    sh("ip link set %s up", nd[i]))
			return 1;

	json_t *d = NULL;
	for (int tries = 0; tries < 100; tries++) {
		json_decref(d);
		d = discover_ports(spark_ports, 2, NULL, 0);
		if (!d)
			return 1;
		if (all_up(d))
			break;
		usleep(20000);
	}
	if (!all_up(d))
		FAIL("veth carriers did not come up");
	if (json_array_size(json_object_get(d, "ports")) != 2)
		FAIL("expected 2 ports");
	json_t *t = twin(d, 0, 1);
	if (strcmp(json_string_value(json_object_get(t, "netdev")), "enP2p1s0f0np0") != 0 ||
	    !json_is_true(json_object_get(t, "present")) ||
	    json_integer_value(json_object_get(t, "mtu")) != 9000 ||
	    !json_is_true(json_object_get(t, "virtual")) || !json_is_null(json_object_get(t, "rdma")) ||
	    !json_is_null(json_object_get(t, "pci")))
		FAIL("twin enP2p1s0f0np0 wrong: %s", json_dumps(t, JSON_COMPACT));
	json_t *src = json_object_get(t, "sources");
	if (strcmp(json_string_value(json_object_get(src, "mtu")), "netlink") ||
	    strcmp(json_string_value(json_object_get(src, "carrier")), "netlink") ||
	    strcmp(json_string_value(json_object_get(src, "speed_mbps")), "sysfs") ||
	    strcmp(json_string_value(json_object_get(src, "addresses")), "netlink"))
		FAIL("sources wrong: %s", json_dumps(src, JSON_COMPACT));
	if (strcmp(json_string_value(json_array_get(json_object_get(t, "ipv4"), 0)), "169.254.1.2/24"))
		FAIL("address wrong: %s", json_dumps(t, JSON_COMPACT));
	/* veth reports 10000 Mb/s: virtual, so no speed_low. */
	if (strcmp(finding_codes(d), "twins_same_subnet:enp1s0f0np0") != 0)
		FAIL("findings: '%s'", finding_codes(d));
	json_decref(d);

	/* The same grouping from globs, by name (no PCI on veth). */
	static const char *const globs[] = {"enp1s0f*", "enP2p1s0f*"};
	d = discover_ports(NULL, 0, globs, 2);
	if (!d || json_array_size(json_object_get(d, "ports")) != 2 ||
	    strcmp(json_string_value(json_object_get(json_array_get(json_object_get(d, "ports"), 1),
						     "name")),
		   "1") != 0 ||
	    strcmp(json_string_value(json_object_get(twin(d, 1, 1), "netdev")), "enP2p1s0f1np1") != 0)
		FAIL("glob grouping wrong: %s", d ? json_dumps(json_object_get(d, "ports"), JSON_COMPACT) : "");
	json_decref(d);

	/* The watcher in a uv loop: cut port 1's second cable at the far end. */
	uv_loop_t loop;
	uv_loop_init(&loop);
	struct seen s = {.loop = &loop};
	uv_timer_init(&loop, &s.timer);
	struct topo_watch *w = NULL;
	char err[256];
	if (topo_watch_open(&w, "/", on_event, &s, err, sizeof err) < 0)
		FAIL("watch open: %s", err);
	if (topo_watch_uv_start(w, &loop) < 0)
		FAIL("uv start");
	uint64_t t0 = now_ms();
	if (sh("ip link set cab1b down"))
		return 1;
	run_until(&loop, &s, &s.carrier_ms, 1000);
	if (!s.carrier_ms || s.carrier_new != 0)
		FAIL("no carrier-down event for enP2p1s0f1np1 within 1 s");
	if (s.carrier_ms - t0 > 1000)
		FAIL("carrier event after %llu ms", (unsigned long long)(s.carrier_ms - t0));
	fprintf(stderr, "netns: carrier change seen after %llu ms\n",
		(unsigned long long)(s.carrier_ms - t0));
	t0 = now_ms();
	if (sh("ip link set enp1s0f0np0 mtu 1500"))
		return 1;
	run_until(&loop, &s, &s.mtu_ms, 1000);
	if (!s.mtu_ms || s.mtu_new != 1500)
		FAIL("no MTU event within 1 s");
	if (sh("ip addr add 169.254.5.1/24 dev enp1s0f1np1"))
		return 1;
	run_until(&loop, &s, &s.addr_ms, 1000);
	if (!s.addr_ms || strcmp(s.addr, "169.254.5.1/24") != 0)
		FAIL("no address event within 1 s (got '%s')", s.addr);

	/* Discovery now sees the cut twin and the MTU mismatch. */
	d = discover_ports(spark_ports, 2, NULL, 0);
	/* Order: port 0's checks, port 1's, then subnets. */
	const char *want = "mtu_twin_mismatch:enp1s0f0np0 twin_down:enP2p1s0f1np1 "
			   "twins_same_subnet:enp1s0f0np0";
	const char *got = d ? finding_codes(d) : "";
	if (strcmp(got, want) != 0)
		FAIL("findings after faults: '%s', want '%s'", got, want);
	json_decref(d);

	topo_watch_close(w);
	uv_close((uv_handle_t *)&s.timer, NULL);
	uv_run(&loop, UV_RUN_DEFAULT); /* lets the close callbacks free the watcher */
	if (uv_loop_close(&loop) != 0)
		FAIL("loop still has handles");
	return 0;
}

Test(netns, discovery_and_watcher, .timeout = 30)
{
	if (geteuid() != 0)
		cr_skip_test("needs root for a network namespace");
	fflush(NULL);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		_exit(child());
	int st = 0;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	if (WIFEXITED(st) && WEXITSTATUS(st) == SKIP_CODE)
		cr_skip_test("cannot make a network namespace or no ip(8) here");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child failed (status %d), see its stderr", st);
}

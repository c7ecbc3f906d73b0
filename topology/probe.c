/* probe: thresholds, judging, and the TCP/UDP path (see probe.h). */
#include "topology/probe.h"
#include "topology/probe_int.h"

#include "common/cfg.h"
#include "common/log.h"
#include "common/util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PROBE_VERSION 1
#define TOKEN_LEN 64
#define MSG_LEN 16
#define BULK_CHUNK (256 * 1024)
#define MAX_PING_SIZE 65536
#define WARMUP 20

enum { CMD_HELLO = 1, CMD_OK, CMD_PING, CMD_BULK_IN, CMD_BULK_OUT, CMD_RESULT, CMD_UDP, CMD_UDP_DONE,
       CMD_BYE, CMD_DATA, CMD_ERR = 255 };

/* ---------------- shared ---------------- */

uint64_t probe_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int64_t now_ms(void) { return (int64_t)(probe_now_ns() / 1000000); }

static int u64cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static double r3(double x) { return (double)(long long)(x * 1000 + 0.5) / 1000; }

json_t *probe_latency_json(uint64_t *v, size_t n, unsigned size)
{
	if (!n)
		return json_null();
	qsort(v, n, sizeof v[0], u64cmp);
	size_t i50 = (n - 1) * 50 / 100, i99 = (n - 1) * 99 / 100;
	/* One way = half the round trip, in microseconds. */
	return json_pack("{s:I, s:i, s:f, s:f, s:f, s:f}", "iterations", (json_int_t)n, "size", (int)size,
			 "p50_us", r3((double)v[i50] / 2000.0), "p99_us", r3((double)v[i99] / 2000.0),
			 "min_us", r3((double)v[0] / 2000.0), "max_us", r3((double)v[n - 1] / 2000.0));
}

void topo_probe_thresholds_default(struct topo_probe_thresholds *t)
{
	t->rdma_min_gbps = 85;
	t->rdma_max_p50_us = 5;
	t->rdma_max_p99_us = 20;
	t->tcp_min_gbps = 1;
	t->tcp_max_p50_us = 2000;
	t->tcp_max_p99_us = 0;
	t->mtu = 0;
}

void topo_probe_params_init(struct topo_probe_params *p, bool quick)
{
	p->ping_iters = quick ? 200 : 1000;
	p->ping_size = 8;
	p->bulk_ms = quick ? 200 : 1000;
	p->mtu_check = true;
	p->timeout_ms = 5000;
}

static int cfg_number(json_t *cfg, const char *key, double *out, char *err, size_t errlen)
{
	json_t *v = cfg_get(cfg, key);
	if (!v)
		return 0;
	double d;
	char *end = NULL;
	if (json_is_number(v)) {
		d = json_number_value(v);
	} else if (json_is_string(v)) {
		d = strtod(json_string_value(v), &end);
		if (!end || end == json_string_value(v) || *end)
			d = -1;
	} else {
		d = -1;
	}
	if (d < 0 || d > 1e9) {
		snprintf(err, errlen, "%s must be a number >= 0", key);
		return -EINVAL;
	}
	*out = d;
	return 0;
}

int topo_probe_thresholds_from_config(json_t *cfg, struct topo_probe_thresholds *t, char *err,
				      size_t errlen)
{
	int r;
	if ((r = cfg_number(cfg, "probes.rdma_min_gbps", &t->rdma_min_gbps, err, errlen)) < 0 ||
	    (r = cfg_number(cfg, "probes.rdma_max_p50_us", &t->rdma_max_p50_us, err, errlen)) < 0 ||
	    (r = cfg_number(cfg, "probes.rdma_max_p99_us", &t->rdma_max_p99_us, err, errlen)) < 0 ||
	    (r = cfg_number(cfg, "probes.tcp_min_gbps", &t->tcp_min_gbps, err, errlen)) < 0 ||
	    (r = cfg_number(cfg, "probes.tcp_max_p50_us", &t->tcp_max_p50_us, err, errlen)) < 0 ||
	    (r = cfg_number(cfg, "probes.tcp_max_p99_us", &t->tcp_max_p99_us, err, errlen)) < 0)
		return r;
	double mtu = t->mtu;
	if ((r = cfg_number(cfg, "fabric.mtu", &mtu, err, errlen)) < 0)
		return r;
	if (mtu != 0 && (mtu < 576 || mtu > 65535)) {
		snprintf(err, errlen, "fabric.mtu must be between 576 and 65535");
		return -EINVAL;
	}
	t->mtu = (int)mtu;
	return 0;
}

static void add_finding(json_t *res, const char *code, const char *msg, const char *fix)
{
	json_t *f = json_object_get(res, "findings");
	if (!f) {
		f = json_array();
		json_object_set_new(res, "findings", f);
	}
	json_array_append_new(f, json_pack("{s:s, s:s, s:s, s:s}", "code", code, "severity", "fail",
					   "message", msg, "fix", fix));
}

void probe_judge(json_t *res, const char *transport, const struct topo_probe_thresholds *t)
{
	bool rdma = strcmp(transport, "rdma") == 0;
	double min_gbps = rdma ? t->rdma_min_gbps : t->tcp_min_gbps;
	double max_p50 = rdma ? t->rdma_max_p50_us : t->tcp_max_p50_us;
	double max_p99 = rdma ? t->rdma_max_p99_us : t->tcp_max_p99_us;
	const char *nd = json_string_value(json_object_get(res, "netdev"));
	const char *peer = json_string_value(json_object_get(res, "peer"));
	char where[160], msg[400];
	snprintf(where, sizeof where, "%s -> %s", nd ? nd : "?", peer ? peer : "?");
	json_t *mtu = json_object_get(res, "mtu");
	long local_mtu = (long)json_integer_value(json_object_get(mtu, "local_mtu"));
	/* TCP checks IP packets against the netdev MTU (fabric.mtu when set);
	 * RDMA's MTU is the RoCE path MTU (4096 under a 9000 netdev): there only
	 * the two ends are compared. */
	long want_mtu = !rdma && t->mtu > 0 ? t->mtu : local_mtu;
	json_object_set_new(res, "thresholds",
			    json_pack("{s:f, s:f, s:o, s:o}", "min_gbps", min_gbps, "max_p50_us", max_p50,
				      "max_p99_us", max_p99 > 0 ? json_real(max_p99) : json_null(), "mtu",
				      want_mtu > 0 ? json_integer(want_mtu) : json_null()));
	if (!json_object_get(res, "findings"))
		json_object_set_new(res, "findings", json_array());
	json_t *bw = json_object_get(res, "bandwidth");
	json_t *g = json_object_get(bw, "gbps");
	if (json_is_number(g) && json_number_value(g) < min_gbps) {
		snprintf(msg, sizeof msg, "%s: %.2f Gb/s over %s, below %.2f Gb/s", where,
			 json_number_value(g), transport, min_gbps);
		add_finding(res, "probe_bandwidth_low", msg,
			    rdma ? "check both ends link at 200G (ethtool), the PCIe width of both paths "
				   "(a BIOS before 2026-04 links one at x2) and the cable"
				 : "check the link speed (ethtool) and the CPU load on both nodes; RDMA "
				   "numbers need a RoCE device");
	}
	json_t *lat = json_object_get(res, "latency");
	json_t *p50 = json_object_get(lat, "p50_us"), *p99 = json_object_get(lat, "p99_us");
	if (json_is_number(p50) && json_number_value(p50) > max_p50) {
		snprintf(msg, sizeof msg, "%s: p50 latency %.2f us over %s, above %.2f us", where,
			 json_number_value(p50), transport, max_p50);
		add_finding(res, "probe_latency_high", msg,
			    "check for a switch or a busy CPU in the path, and the interrupt moderation "
			    "of both netdevs (ethtool -c)");
	}
	if (max_p99 > 0 && json_is_number(p99) && json_number_value(p99) > max_p99) {
		snprintf(msg, sizeof msg, "%s: p99 latency %.2f us over %s, above %.2f us", where,
			 json_number_value(p99), transport, max_p99);
		add_finding(res, "probe_latency_p99_high", msg,
			    "look for CPU contention or power saving on both nodes");
	}
	json_t *largest = json_object_get(mtu, "largest_ok");
	if (json_is_integer(largest) && want_mtu > 0 && json_integer_value(largest) < want_mtu) {
		snprintf(msg, sizeof msg,
			 "%s: the largest packet that crosses both ways is %lld bytes, the MTU should be "
			 "%ld", where, (long long)json_integer_value(largest), want_mtu);
		char fix[200];
		snprintf(fix, sizeof fix, "set the MTU of both ends (and any switch port) to %ld", want_mtu);
		add_finding(res, "probe_mtu_low", msg, fix);
		json_object_set_new(mtu, "ok", json_false());
	}
	json_t *pm = json_object_get(mtu, "peer_mtu");
	if (json_is_integer(pm) && local_mtu > 0 && json_integer_value(pm) != local_mtu) {
		snprintf(msg, sizeof msg, "%s: path MTU %ld here, %lld on the peer", where, local_mtu,
			 (long long)json_integer_value(pm));
		add_finding(res, "probe_mtu_mismatch", msg,
			    "set the same MTU on both twins of the cable (netplan `mtu:`)");
		json_object_set_new(mtu, "ok", json_false());
	}
	json_object_set_new(res, "result",
			    json_string(json_array_size(json_object_get(res, "findings")) ? "fail" : "pass"));
}

json_t *probe_error_result(const char *transport, const char *role, const char *netdev,
			   const char *msg)
{
	json_t *r = json_pack("{s:s, s:s, s:o, s:s}", "transport", transport, "role", role, "netdev",
			      netdev ? json_string(netdev) : json_null(), "result", "fail");
	add_finding(r, "probe_error", msg, "see the message; run `sparkctl topo validate` again");
	return r;
}

int probe_netdev_mtu(const char *netdev)
{
	if (!netdev)
		return -EINVAL;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	struct ifreq ifr;
	memset(&ifr, 0, sizeof ifr);
	util_strlcpy(ifr.ifr_name, netdev, sizeof ifr.ifr_name);
	int r = ioctl(fd, SIOCGIFMTU, &ifr) < 0 ? -errno : ifr.ifr_mtu;
	close(fd);
	return r;
}

/* ---------------- sockets ---------------- */

struct sa {
	struct sockaddr_storage ss;
	socklen_t len;
};

static int parse_addr(const char *host, int port, struct sa *out, char *err, size_t errlen)
{
	struct addrinfo hints, *ai = NULL;
	memset(&hints, 0, sizeof hints);
	hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
	hints.ai_socktype = SOCK_STREAM;
	char ps[16];
	snprintf(ps, sizeof ps, "%d", port);
	int r = getaddrinfo(host ? host : "0.0.0.0", ps, &hints, &ai);
	if (r != 0 || !ai) {
		snprintf(err, errlen, "bad address '%s': %s", host ? host : "", gai_strerror(r));
		if (ai)
			freeaddrinfo(ai);
		return -EINVAL;
	}
	memcpy(&out->ss, ai->ai_addr, ai->ai_addrlen);
	out->len = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
}

static int sa_port(const struct sa *a)
{
	if (a->ss.ss_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)&a->ss)->sin6_port);
	return ntohs(((const struct sockaddr_in *)&a->ss)->sin_port);
}

static void sa_set_port(struct sa *a, int port)
{
	if (a->ss.ss_family == AF_INET6)
		((struct sockaddr_in6 *)&a->ss)->sin6_port = htons((uint16_t)port);
	else
		((struct sockaddr_in *)&a->ss)->sin_port = htons((uint16_t)port);
}

static void sa_str(const struct sa *a, char *buf, size_t len)
{
	char h[INET6_ADDRSTRLEN] = "?";
	if (a->ss.ss_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)&a->ss)->sin6_addr, h, sizeof h);
	else
		inet_ntop(AF_INET, &((const struct sockaddr_in *)&a->ss)->sin_addr, h, sizeof h);
	snprintf(buf, len, a->ss.ss_family == AF_INET6 ? "[%s]:%d" : "%s:%d", h, sa_port(a));
}

/* "addr:port" of fd's own end (peer false) or of its peer. */
static void sock_str(int fd, bool peer, char *buf, size_t len)
{
	struct sa a = {.len = sizeof a.ss};
	if (peer)
		getpeername(fd, (struct sockaddr *)&a.ss, &a.len);
	else
		getsockname(fd, (struct sockaddr *)&a.ss, &a.len);
	sa_str(&a, buf, len);
}

static int bind_dev(int fd, const char *netdev)
{
	if (!netdev || !*netdev)
		return 0;
	if (setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, netdev, (socklen_t)strlen(netdev)) < 0)
		return -errno;
	return 0;
}

static int set_df(int fd, int family)
{
	int v;
	if (family == AF_INET6) {
		v = IPV6_PMTUDISC_PROBE;
		return setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &v, sizeof v) < 0 ? -errno : 0;
	}
	v = IP_PMTUDISC_PROBE; /* DF set, the interface MTU rules, no PMTU cache */
	return setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &v, sizeof v) < 0 ? -errno : 0;
}

/* Wait for ev on fd until deadline (ms, monotonic); stopfd (or -1) cancels. */
static int wait_fd(int fd, short ev, int64_t deadline, int stopfd)
{
	for (;;) {
		int64_t left = deadline - now_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		struct pollfd p[2] = {{fd, ev, 0}, {stopfd, POLLIN, 0}};
		int r = poll(p, stopfd >= 0 ? 2 : 1, (int)(left > 1000 ? 1000 : left));
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (stopfd >= 0 && p[1].revents)
			return -ECANCELED;
		if (p[0].revents)
			return 0;
	}
}

/* Read fd until the sender shuts it down (or deadline), counting the bytes
 * into *n; buf holds BULK_CHUNK. 0 or a negative errno. */
static int drain(int fd, uint8_t *buf, uint64_t *n, int64_t deadline, int stopfd)
{
	for (;;) {
		ssize_t r = recv(fd, buf, BULK_CHUNK, MSG_DONTWAIT);
		if (r > 0) {
			*n += (uint64_t)r;
			continue;
		}
		if (r == 0)
			return 0;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -errno;
		int rc = wait_fd(fd, POLLIN, deadline, stopfd);
		if (rc < 0)
			return rc;
	}
}

static int read_full(int fd, void *buf, size_t n, int64_t deadline, int stopfd)
{
	uint8_t *p = buf;
	while (n) {
		ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
		if (r > 0) {
			p += r;
			n -= (size_t)r;
			continue;
		}
		if (r == 0)
			return -EPIPE;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		int w = wait_fd(fd, POLLIN, deadline, stopfd);
		if (w < 0)
			return w;
	}
	return 0;
}

static int write_full(int fd, const void *buf, size_t n, int64_t deadline, int stopfd)
{
	const uint8_t *p = buf;
	while (n) {
		ssize_t r = send(fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (r > 0) {
			p += r;
			n -= (size_t)r;
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		int w = wait_fd(fd, POLLOUT, deadline, stopfd);
		if (w < 0)
			return w;
	}
	return 0;
}

struct msg {
	unsigned cmd;
	uint32_t a;
	uint64_t b;
};

static int send_msg(int fd, unsigned cmd, uint32_t a, uint64_t b, int64_t deadline, int stopfd)
{
	uint8_t m[MSG_LEN] = {0};
	m[0] = (uint8_t)cmd;
	for (int i = 0; i < 4; i++)
		m[4 + i] = (uint8_t)(a >> (24 - 8 * i));
	for (int i = 0; i < 8; i++)
		m[8 + i] = (uint8_t)(b >> (56 - 8 * i));
	return write_full(fd, m, sizeof m, deadline, stopfd);
}

static int recv_msg(int fd, struct msg *out, int64_t deadline, int stopfd)
{
	uint8_t m[MSG_LEN];
	int r = read_full(fd, m, sizeof m, deadline, stopfd);
	if (r < 0)
		return r;
	out->cmd = m[0];
	out->a = 0;
	out->b = 0;
	for (int i = 0; i < 4; i++)
		out->a = out->a << 8 | m[4 + i];
	for (int i = 0; i < 8; i++)
		out->b = out->b << 8 | m[8 + i];
	return 0;
}

static int expect_msg(int fd, unsigned cmd, struct msg *out, int64_t deadline, int stopfd)
{
	int r = recv_msg(fd, out, deadline, stopfd);
	if (r < 0)
		return r;
	return out->cmd == cmd ? 0 : out->cmd == CMD_ERR ? -EACCES : -EPROTO;
}

static void nodelay(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static int accept_one(int lfd, int64_t deadline, int stopfd)
{
	for (;;) {
		int w = wait_fd(lfd, POLLIN, deadline, stopfd);
		if (w < 0)
			return w;
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd >= 0)
			return fd;
		if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
			return -errno;
	}
}

/* ---------------- server ---------------- */

struct topo_probe_server {
	int lfd, ufd;
	int stop[2];
	int port, uport;
	unsigned timeout_ms;
	char token[TOKEN_LEN];
	char netdev[IFNAMSIZ];
};

int topo_probe_server_start(const struct topo_probe_server_opts *o, struct topo_probe_server **out,
			    char *err, size_t errlen)
{
	char dummy[8];
	if (!err) {
		err = dummy;
		errlen = sizeof dummy;
	}
	err[0] = '\0';
	if (!o || !out)
		return -EINVAL;
	if (o->token && strlen(o->token) > TOKEN_LEN) {
		snprintf(err, errlen, "probe token longer than %d", TOKEN_LEN);
		return -EINVAL;
	}
	struct sa a;
	int r = parse_addr(o->address, o->port, &a, err, errlen);
	if (r < 0)
		return r;
	struct topo_probe_server *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	s->lfd = s->ufd = s->stop[0] = s->stop[1] = -1;
	s->timeout_ms = o->timeout_ms ? o->timeout_ms : 10000;
	if (o->token)
		memcpy(s->token, o->token, strlen(o->token));
	if (o->netdev)
		util_strlcpy(s->netdev, o->netdev, sizeof s->netdev);
	int one = 1;
	const char *step = "socket";
	if (pipe2(s->stop, O_CLOEXEC | O_NONBLOCK) < 0)
		goto fail;
	s->lfd = socket(a.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s->lfd < 0)
		goto fail;
	setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	step = "SO_BINDTODEVICE";
	if ((r = bind_dev(s->lfd, o->netdev)) < 0) {
		errno = -r;
		goto fail;
	}
	step = "bind";
	if (bind(s->lfd, (struct sockaddr *)&a.ss, a.len) < 0)
		goto fail;
	step = "listen";
	if (listen(s->lfd, 8) < 0)
		goto fail;
	struct sa bound;
	bound.len = sizeof bound.ss;
	if (getsockname(s->lfd, (struct sockaddr *)&bound.ss, &bound.len) < 0)
		goto fail;
	s->port = sa_port(&bound);
	/* UDP echo on the same port number when free, else any. */
	step = "udp socket";
	s->ufd = socket(a.ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s->ufd < 0)
		goto fail;
	step = "udp SO_BINDTODEVICE";
	if ((r = bind_dev(s->ufd, o->netdev)) < 0) {
		errno = -r;
		goto fail;
	}
	set_df(s->ufd, a.ss.ss_family);
	sa_set_port(&bound, s->port);
	step = "udp bind";
	if (bind(s->ufd, (struct sockaddr *)&bound.ss, bound.len) < 0) {
		sa_set_port(&bound, 0);
		if (bind(s->ufd, (struct sockaddr *)&bound.ss, bound.len) < 0)
			goto fail;
	}
	struct sa ub;
	ub.len = sizeof ub.ss;
	if (getsockname(s->ufd, (struct sockaddr *)&ub.ss, &ub.len) < 0)
		goto fail;
	s->uport = sa_port(&ub);
	*out = s;
	return 0;
fail:
	r = -errno;
	snprintf(err, errlen, "probe server on %s: %s: %s", o->netdev ? o->netdev : "any", step,
		 strerror(errno));
	topo_probe_server_free(s);
	return r;
}

int topo_probe_server_port(const struct topo_probe_server *s) { return s ? s->port : -1; }

void topo_probe_server_stop(struct topo_probe_server *s)
{
	if (s && s->stop[1] >= 0) {
		ssize_t n = write(s->stop[1], "x", 1);
		(void)n;
	}
}

void topo_probe_server_free(struct topo_probe_server *s)
{
	if (!s)
		return;
	int fds[] = {s->lfd, s->ufd, s->stop[0], s->stop[1]};
	for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(s);
}

/* One UDP echo phase: until UDP_DONE on the control connection. */
static int serve_udp(struct topo_probe_server *s, int cfd, uint64_t *echoed)
{
	uint8_t *buf = malloc(65536);
	if (!buf)
		return -ENOMEM;
	int rc = 0;
	for (;;) {
		int64_t deadline = now_ms() + s->timeout_ms;
		struct pollfd p[3] = {{s->ufd, POLLIN, 0}, {cfd, POLLIN, 0}, {s->stop[0], POLLIN, 0}};
		int r = poll(p, 3, (int)s->timeout_ms);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			rc = r == 0 ? -ETIMEDOUT : -errno;
			break;
		}
		if (p[2].revents) {
			rc = -ECANCELED;
			break;
		}
		if (p[0].revents) {
			struct sockaddr_storage from;
			socklen_t fl = sizeof from;
			ssize_t n = recvfrom(s->ufd, buf, 65536, MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
			if (n > 0 && sendto(s->ufd, buf, (size_t)n, MSG_DONTWAIT, (struct sockaddr *)&from, fl) == n)
				(*echoed)++;
		}
		if (p[1].revents) {
			struct msg m;
			rc = expect_msg(cfd, CMD_UDP_DONE, &m, deadline, s->stop[0]);
			if (rc == 0)
				rc = send_msg(cfd, CMD_OK, (uint32_t)*echoed, 0, deadline, s->stop[0]);
			break;
		}
	}
	free(buf);
	return rc;
}

int topo_probe_server_run(struct topo_probe_server *s, json_t **result, char *err, size_t errlen)
{
	char dummy[8];
	if (!err) {
		err = dummy;
		errlen = sizeof dummy;
	}
	err[0] = '\0';
	if (!s || !result)
		return -EINVAL;
	*result = NULL;
	int stopfd = s->stop[0];
	int64_t deadline = now_ms() + s->timeout_ms;
	int cfd = accept_one(s->lfd, deadline, stopfd);
	if (cfd < 0) {
		snprintf(err, errlen, "no probe client within %u ms: %s", s->timeout_ms, strerror(-cfd));
		return cfd;
	}
	nodelay(cfd);
	char peerstr[80];
	sock_str(cfd, true, peerstr, sizeof peerstr);
	uint8_t *buf = malloc(BULK_CHUNK);
	uint64_t pings = 0, bytes_in = 0, bytes_out = 0, echoed = 0, nonce = 0;
	int rc = buf ? 0 : -ENOMEM;
	struct msg m;
	uint8_t tok[TOKEN_LEN];
	/* Hello: message + token block. */
	if (rc == 0)
		rc = expect_msg(cfd, CMD_HELLO, &m, deadline, stopfd);
	if (rc == 0)
		rc = read_full(cfd, tok, sizeof tok, deadline, stopfd);
	if (rc == 0 && m.a != PROBE_VERSION)
		rc = -EPROTO;
	if (rc == 0 && CRYPTO_memcmp(tok, s->token, TOKEN_LEN) != 0) {
		send_msg(cfd, CMD_ERR, 0, 0, deadline, stopfd);
		rc = -EACCES;
	}
	if (rc == 0) {
		RAND_bytes((unsigned char *)&nonce, sizeof nonce);
		rc = send_msg(cfd, CMD_OK, (uint32_t)s->uport, nonce, deadline, stopfd);
	}
	bool bye = false;
	while (rc == 0 && !bye) {
		deadline = now_ms() + s->timeout_ms;
		if ((rc = recv_msg(cfd, &m, deadline, stopfd)) < 0)
			break;
		switch (m.cmd) {
		case CMD_PING: {
			if (m.b == 0 || m.b > MAX_PING_SIZE) {
				rc = -EPROTO;
				break;
			}
			for (uint32_t i = 0; i < m.a && rc == 0; i++) {
				int64_t dl = now_ms() + s->timeout_ms;
				rc = read_full(cfd, buf, (size_t)m.b, dl, stopfd);
				if (rc == 0)
					rc = write_full(cfd, buf, (size_t)m.b, dl, stopfd);
				pings += rc == 0;
			}
			break;
		}
		case CMD_BULK_IN:
		case CMD_BULK_OUT: {
			bool in = m.cmd == CMD_BULK_IN;
			uint32_t ms = m.a;
			if (ms == 0 || ms > 60000) {
				rc = -EPROTO;
				break;
			}
			if ((rc = send_msg(cfd, CMD_OK, 0, 0, deadline, stopfd)) < 0)
				break;
			int dfd = accept_one(s->lfd, deadline, stopfd);
			if (dfd < 0) {
				rc = dfd;
				break;
			}
			struct msg h;
			rc = expect_msg(dfd, CMD_DATA, &h, deadline, stopfd);
			if (rc == 0 && h.b != nonce)
				rc = -EACCES;
			int64_t end = now_ms() + ms + s->timeout_ms;
			uint64_t t0 = probe_now_ns(), n = 0;
			if (rc == 0 && in) {
				rc = drain(dfd, buf, &n, end, stopfd);
				uint64_t us = (probe_now_ns() - t0) / 1000;
				bytes_in += n;
				if (rc == 0)
					rc = send_msg(cfd, CMD_RESULT, (uint32_t)(us > 0xffffffffu ? 0xffffffffu : us),
						      n, now_ms() + s->timeout_ms, stopfd);
			} else if (rc == 0) {
				int64_t stop_at = now_ms() + ms;
				memset(buf, 0x5a, BULK_CHUNK);
				while (rc == 0 && now_ms() < stop_at) {
					rc = write_full(dfd, buf, BULK_CHUNK, end, stopfd);
					n += rc == 0 ? BULK_CHUNK : 0;
				}
				bytes_out += n;
			}
			close(dfd);
			break;
		}
		case CMD_UDP:
			rc = send_msg(cfd, CMD_OK, (uint32_t)s->uport, 0, deadline, stopfd);
			if (rc == 0)
				rc = serve_udp(s, cfd, &echoed);
			break;
		case CMD_BYE:
			rc = send_msg(cfd, CMD_BYE, 0, 0, deadline, stopfd);
			bye = true;
			break;
		default:
			rc = -EPROTO;
		}
	}
	close(cfd);
	free(buf);
	if (rc < 0) {
		snprintf(err, errlen, "probe session with %s: %s", peerstr, strerror(-rc));
		log_warn("probe_server_failed", "netdev=%s peer=%s err=%s", s->netdev, peerstr,
			 log_q(strerror(-rc)));
		return rc;
	}
	*result = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I}", "transport", "tcp", "role",
			    "server", "netdev", s->netdev, "peer", peerstr, "pings", (json_int_t)pings,
			    "bytes_in", (json_int_t)bytes_in, "bytes_out", (json_int_t)bytes_out,
			    "udp_echoed", (json_int_t)echoed);
	return 0;
}

/* ---------------- client ---------------- */

static int connect_retry(const struct topo_probe_client_opts *o, const struct sa *peer,
			 int64_t deadline, char *err, size_t errlen)
{
	int last = ETIMEDOUT;
	while (now_ms() < deadline) {
		int fd = socket(peer->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0)
			return -errno;
		int r = bind_dev(fd, o->netdev);
		if (r < 0) {
			close(fd);
			snprintf(err, errlen, "SO_BINDTODEVICE %s: %s", o->netdev, strerror(-r));
			return r;
		}
		if (o->local_address) {
			struct sa la;
			if ((r = parse_addr(o->local_address, 0, &la, err, errlen)) < 0 ||
			    bind(fd, (struct sockaddr *)&la.ss, la.len) < 0) {
				r = r < 0 ? r : -errno;
				close(fd);
				if (!err[0])
					snprintf(err, errlen, "bind %s: %s", o->local_address, strerror(-r));
				return r;
			}
		}
		if (connect(fd, (const struct sockaddr *)&peer->ss, peer->len) == 0)
			return fd;
		if (errno == EINPROGRESS) {
			int64_t dl = now_ms() + 1000 < deadline ? now_ms() + 1000 : deadline;
			if (wait_fd(fd, POLLOUT, dl, -1) == 0) {
				int e = 0;
				socklen_t el = sizeof e;
				getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el);
				if (e == 0)
					return fd;
				last = e;
			} else {
				last = ETIMEDOUT;
			}
		} else {
			last = errno;
		}
		close(fd);
		if (last != ECONNREFUSED && last != ETIMEDOUT && last != ENETUNREACH &&
		    last != EHOSTUNREACH && last != EADDRNOTAVAIL)
			break;
		usleep(50000);
	}
	snprintf(err, errlen, "cannot connect: %s", strerror(last));
	return -last;
}

/* Send one DF datagram of IP size sz and wait for its echo. 1 echoed, 0 not. */
static int udp_try(int fd, int family, unsigned sz, uint32_t nonce, unsigned tries, unsigned wait_ms)
{
	unsigned hdr = family == AF_INET6 ? 48 : 28;
	if (sz <= hdr + 8)
		return 0;
	size_t plen = sz - hdr;
	uint8_t *b = malloc(plen), *rb = malloc(plen + 1);
	if (!b || !rb) {
		free(b);
		free(rb);
		return 0;
	}
	memset(b, 0xa5, plen);
	for (int i = 0; i < 4; i++) {
		b[i] = (uint8_t)(nonce >> (24 - 8 * i));
		b[4 + i] = (uint8_t)(sz >> (24 - 8 * i));
	}
	int ok = 0;
	for (unsigned t = 0; t < tries && !ok; t++) {
		if (send(fd, b, plen, MSG_DONTWAIT) != (ssize_t)plen)
			break; /* EMSGSIZE: larger than our own MTU */
		int64_t dl = now_ms() + wait_ms;
		while (!ok && wait_fd(fd, POLLIN, dl, -1) == 0) {
			ssize_t n = recv(fd, rb, plen + 1, MSG_DONTWAIT);
			if (n == (ssize_t)plen && memcmp(rb, b, 8) == 0)
				ok = 1;
		}
	}
	free(b);
	free(rb);
	return ok;
}

static json_t *mtu_check(const struct topo_probe_client_opts *o, const struct sa *peer, int uport,
			 int local_mtu, int *largest_out)
{
	int fd = socket(peer->ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	*largest_out = -1;
	if (fd < 0)
		return NULL;
	struct sa up = *peer;
	sa_set_port(&up, uport);
	if (bind_dev(fd, o->netdev) < 0 || set_df(fd, up.ss.ss_family) < 0 ||
	    connect(fd, (struct sockaddr *)&up.ss, up.len) < 0) {
		close(fd);
		return NULL;
	}
	if (local_mtu <= 0) {
		int v = 0;
		socklen_t vl = sizeof v;
		if (getsockopt(fd, up.ss.ss_family == AF_INET6 ? IPPROTO_IPV6 : IPPROTO_IP,
			       up.ss.ss_family == AF_INET6 ? IPV6_MTU : IP_MTU, &v, &vl) == 0)
			local_mtu = v;
	}
	uint32_t nonce;
	RAND_bytes((unsigned char *)&nonce, sizeof nonce);
	unsigned lo = up.ss.ss_family == AF_INET6 ? 1280 : 576;
	int largest = 0;
	unsigned probes = 0;
	if (local_mtu > 0 && udp_try(fd, up.ss.ss_family, (unsigned)local_mtu, nonce++, 3, 100)) {
		largest = local_mtu;
		probes++;
	} else if (udp_try(fd, up.ss.ss_family, lo, nonce++, 3, 100)) {
		/* Largest passing size in [lo, local_mtu). */
		unsigned good = lo, bad = local_mtu > 0 ? (unsigned)local_mtu : 65536;
		probes += 2;
		while (bad - good > 1) {
			unsigned mid = good + (bad - good) / 2;
			if (udp_try(fd, up.ss.ss_family, mid, nonce++, 2, 50))
				good = mid;
			else
				bad = mid;
			probes++;
		}
		largest = (int)good;
	}
	close(fd);
	*largest_out = largest;
	return json_pack("{s:o, s:n, s:i, s:b, s:i, s:s}", "local_mtu",
			 local_mtu > 0 ? json_integer(local_mtu) : json_null(), "peer_mtu", "largest_ok",
			 largest, "ok", largest > 0 && largest >= local_mtu, "probes", (int)probes, "method",
			 "udp echo with DF set both ways");
}

int topo_probe_client_run(const struct topo_probe_client_opts *o, json_t **result, char *err,
			  size_t errlen)
{
	char dummy[8];
	if (!err) {
		err = dummy;
		errlen = sizeof dummy;
	}
	err[0] = '\0';
	if (!o || !result || !o->peer_address)
		return -EINVAL;
	*result = NULL;
	if (o->token && strlen(o->token) > TOKEN_LEN)
		return -EINVAL;
	const struct topo_probe_params *pp = &o->params;
	unsigned tmo = pp->timeout_ms ? pp->timeout_ms : 5000;
	if (pp->ping_size == 0 || pp->ping_size > MAX_PING_SIZE || pp->bulk_ms > 60000) {
		snprintf(err, errlen, "probe parameters out of range");
		return -EINVAL;
	}
	struct sa peer;
	int rc = parse_addr(o->peer_address, o->peer_port, &peer, err, errlen);
	if (rc < 0)
		return rc;
	char peerstr[80];
	sa_str(&peer, peerstr, sizeof peerstr);
	int cfd = connect_retry(o, &peer, now_ms() + tmo, err, errlen);
	if (cfd < 0)
		return cfd;
	nodelay(cfd);
	char localstr[80];
	sock_str(cfd, false, localstr, sizeof localstr);
	uint8_t *buf = malloc(BULK_CHUNK);
	size_t nlat = pp->ping_iters + WARMUP;
	uint64_t *rtt = calloc(nlat, sizeof *rtt);
	json_t *lat = NULL, *bw = NULL, *mtu = NULL;
	const char *step = "hello";
	struct msg m;
	int64_t dl = now_ms() + tmo;
	uint64_t nonce = 0;
	uint32_t uport = 0;
	if (!buf || !rtt)
		rc = -ENOMEM;
	uint8_t tok[TOKEN_LEN] = {0};
	if (o->token)
		memcpy(tok, o->token, strlen(o->token));
	if (rc == 0)
		rc = send_msg(cfd, CMD_HELLO, PROBE_VERSION, 0, dl, -1);
	if (rc == 0)
		rc = write_full(cfd, tok, sizeof tok, dl, -1);
	if (rc == 0 && (rc = expect_msg(cfd, CMD_OK, &m, dl, -1)) == 0) {
		nonce = m.b;
		uport = m.a;
	}
	/* Latency: ping-pong, warm-up round trips not counted. */
	if (rc == 0 && pp->ping_iters) {
		step = "ping-pong";
		memset(buf, 0x3c, pp->ping_size);
		rc = send_msg(cfd, CMD_PING, (uint32_t)nlat, pp->ping_size, dl, -1);
		for (size_t i = 0; i < nlat && rc == 0; i++) {
			int64_t d2 = now_ms() + tmo;
			uint64_t t0 = probe_now_ns();
			rc = write_full(cfd, buf, pp->ping_size, d2, -1);
			if (rc == 0)
				rc = read_full(cfd, buf, pp->ping_size, d2, -1);
			rtt[i] = probe_now_ns() - t0;
		}
		if (rc == 0)
			lat = probe_latency_json(rtt + WARMUP, pp->ping_iters, pp->ping_size);
	}
	/* Bandwidth: to the peer, then from it, each on its own connection. */
	double to_gbps = -1, from_gbps = -1, secs = 0;
	for (int dir = 0; rc == 0 && pp->bulk_ms && dir < 2; dir++) {
		step = dir == 0 ? "bulk to peer" : "bulk from peer";
		dl = now_ms() + tmo;
		rc = send_msg(cfd, dir == 0 ? CMD_BULK_IN : CMD_BULK_OUT, pp->bulk_ms, 0, dl, -1);
		if (rc == 0)
			rc = expect_msg(cfd, CMD_OK, &m, dl, -1);
		if (rc < 0)
			break;
		int dfd = connect_retry(o, &peer, dl, err, errlen);
		if (dfd < 0) {
			rc = dfd;
			break;
		}
		rc = send_msg(dfd, CMD_DATA, 0, nonce, dl, -1);
		int64_t end = now_ms() + pp->bulk_ms + tmo;
		if (rc == 0 && dir == 0) {
			memset(buf, 0xa5, BULK_CHUNK);
			int64_t stop_at = now_ms() + pp->bulk_ms;
			while (rc == 0 && now_ms() < stop_at)
				rc = write_full(dfd, buf, BULK_CHUNK, end, -1);
			shutdown(dfd, SHUT_WR);
			if (rc == 0)
				rc = expect_msg(cfd, CMD_RESULT, &m, end, -1);
			if (rc == 0 && m.a > 0) {
				to_gbps = (double)m.b * 8 / ((double)m.a * 1000);
				secs += (double)m.a / 1e6;
			}
		} else if (rc == 0) {
			uint64_t t0 = probe_now_ns(), n = 0;
			rc = drain(dfd, buf, &n, end, -1);
			uint64_t ns = probe_now_ns() - t0;
			if (rc == 0 && ns > 0) {
				from_gbps = (double)n * 8 / (double)ns;
				secs += (double)ns / 1e9;
			}
		}
		close(dfd);
	}
	if (rc == 0 && pp->bulk_ms) {
		double g = to_gbps < 0 ? from_gbps : from_gbps < 0 ? to_gbps : to_gbps < from_gbps ? to_gbps : from_gbps;
		bw = json_pack("{s:o, s:o, s:o, s:f, s:i}", "to_peer_gbps",
			       to_gbps >= 0 ? json_real(r3(to_gbps)) : json_null(), "from_peer_gbps",
			       from_gbps >= 0 ? json_real(r3(from_gbps)) : json_null(), "gbps",
			       g >= 0 ? json_real(r3(g)) : json_null(), "seconds", r3(secs), "streams", 1);
	}
	/* MTU: the server echoes while we search. */
	if (rc == 0 && pp->mtu_check) {
		step = "mtu check";
		dl = now_ms() + tmo;
		rc = send_msg(cfd, CMD_UDP, 0, 0, dl, -1);
		if (rc == 0 && (rc = expect_msg(cfd, CMD_OK, &m, dl, -1)) == 0) {
			int largest;
			mtu = mtu_check(o, &peer, (int)m.a ? (int)m.a : (int)uport,
					o->netdev ? probe_netdev_mtu(o->netdev) : 0, &largest);
			dl = now_ms() + tmo;
			rc = send_msg(cfd, CMD_UDP_DONE, 0, 0, dl, -1);
			if (rc == 0)
				rc = expect_msg(cfd, CMD_OK, &m, dl, -1);
		}
	}
	if (rc == 0) {
		step = "bye";
		dl = now_ms() + tmo;
		rc = send_msg(cfd, CMD_BYE, 0, 0, dl, -1);
		if (rc == 0)
			rc = expect_msg(cfd, CMD_BYE, &m, dl, -1);
	}
	close(cfd);
	free(buf);
	free(rtt);
	if (rc < 0) {
		if (!err[0] || rc != -ECONNREFUSED)
			snprintf(err, errlen, "probe %s -> %s: %s: %s", o->netdev ? o->netdev : "any",
				 peerstr, step, rc == -EACCES ? "the server refused our token" : strerror(-rc));
		json_decref(lat);
		json_decref(bw);
		json_decref(mtu);
		*result = probe_error_result("tcp", "client", o->netdev, err);
		return rc;
	}
	json_t *res = json_pack("{s:s, s:s, s:o, s:s, s:s, s:o, s:o, s:o}", "transport", "tcp", "role",
				"client", "netdev", o->netdev ? json_string(o->netdev) : json_null(),
				"local", localstr, "peer", peerstr, "latency", lat ? lat : json_null(),
				"bandwidth", bw ? bw : json_null(), "mtu", mtu ? mtu : json_null());
	probe_judge(res, "tcp", &o->thresholds);
	*result = res;
	return 0;
}

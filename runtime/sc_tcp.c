/* sc_tcp.c - TCP links and the connection set-up shared by every transport.
 *
 * Higher ranks connect to lower ranks; the connector sends HELLO (rank, world,
 * job id, byte order, and a verbs endpoint when it has a RoCE v2 GID for the
 * connection's local address), the acceptor answers HELLO_ACK; when both
 * offered verbs the pair moves to an RC queue pair and the connector confirms
 * with READY once its QP is ready to receive. Ring neighbours must connect;
 * other pairs are given pair_timeout_ms after the neighbours are up, and a
 * pair that cannot connect (a physical ring) only disables one-shot. */
#include "sc_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- TCP link ------------------------------------------------------------ */

typedef struct {
	int peeked_data; /* during run peek_stamp: next message already seen to be data */
	int peek_stamp;
	int want_recv;
} tcp_priv_t;

/* The peer went away: if it said why (ABORT) before closing, return that
 * code, else 0. The ABORT may sit behind data messages this rank never
 * reads (a peer that ran another algorithm sent on a link this rank only
 * sends on), so while the receive side is at a message boundary, whole data
 * messages are read past: the link is dead, nothing will use them. */
static int tcp_find_abort(sc_link_t *l)
{
	uint8_t b[SC_HDR_LEN], junk[4096];
	sc_hdr_t h;
	int at_boundary = !l->rq_head || (l->rq_head->hdr_done == 0 && l->rq_head->off == 0);

	for (int i = 0; i < 16; i++) {
		if (recv(l->fd, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT) != SC_HDR_LEN ||
		    sc_hdr_decode(b, SC_HDR_LEN, &h, NULL) < 0)
			return 0;
		if (h.kind == SC_MSG_ABORT)
			return h.count > 0 && h.count < 100000 ? -(int)h.count : -SC_EABORTED;
		if (!at_boundary || h.kind != SC_MSG_DATA)
			return 0;
		for (uint64_t left = SC_HDR_LEN + h.len; left > 0;) {
			ssize_t r = recv(l->fd, junk, left < sizeof(junk) ? (size_t)left : sizeof(junk),
			                 MSG_DONTWAIT);
			if (r <= 0)
				return 0;
			left -= (uint64_t)r;
		}
	}
	return 0;
}

static ssize_t tcp_sendv(sc_link_t *l, const struct iovec *iov, int iovcnt)
{
	struct msghdr m = {0};
	ssize_t w;
	m.msg_iov = (struct iovec *)(uintptr_t)iov;
	m.msg_iovlen = (size_t)iovcnt;
	do
		w = sendmsg(l->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
	while (w < 0 && errno == EINTR);
	if (w < 0 && (errno == EPIPE || errno == ECONNRESET)) {
		/* the peer went away: if it said why (ABORT) before closing, use that */
		int e = errno, code = tcp_find_abort(l);
		return code ? code : -e;
	}
	if (w < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	return w;
}

static ssize_t tcp_recvv(sc_link_t *l, const struct iovec *iov, int iovcnt)
{
	struct msghdr m = {0};
	ssize_t r;
	m.msg_iov = (struct iovec *)(uintptr_t)iov;
	m.msg_iovlen = (size_t)iovcnt;
	do
		r = recvmsg(l->fd, &m, MSG_DONTWAIT);
	while (r < 0 && errno == EINTR);
	if (r == 0)
		return -ECONNRESET;
	if (r < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	return r;
}

static int tcp_prepare_poll(sc_link_t *l, struct pollfd *pfd, int want_send, int want_recv)
{
	tcp_priv_t *p = l->priv;
	if (p->peek_stamp != l->active_stamp)
		p->peeked_data = 0; /* a new run: look again */
	pfd->fd = l->fd;
	pfd->events = 0;
	pfd->revents = 0;
	if (want_send)
		pfd->events |= POLLOUT;
	/* While only sending, still watch for an ABORT or EOF from that peer. */
	if (want_recv || !p->peeked_data)
		pfd->events |= POLLIN;
	p->want_recv = want_recv;
	return 1;
}

static int tcp_after_poll(sc_link_t *l, const struct pollfd *pfd, int npfd)
{
	tcp_priv_t *p = l->priv;
	uint8_t b[SC_HDR_LEN];
	ssize_t r;
	sc_hdr_t h;

	if (npfd < 1 || p->want_recv || !(pfd->revents & (POLLIN | POLLHUP | POLLERR)))
		return 0;
	r = recv(l->fd, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT);
	if (r == 0)
		return -ECONNRESET;
	if (r < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -errno;
	if (r < SC_HDR_LEN)
		return 0; /* look again when the rest arrives */
	if (sc_hdr_decode(b, SC_HDR_LEN, &h, NULL) == 0 && h.kind == SC_MSG_ABORT)
		return h.count > 0 && h.count < 100000 ? -(int)h.count : -SC_EABORTED;
	p->peeked_data = 1; /* the next collective's data: leave it */
	p->peek_stamp = l->active_stamp;
	return 0;
}

static void tcp_abort(sc_link_t *l, int code, int my_rank)
{
	if (l->fd < 0)
		return;
	if (!l->send_dirty) {
		sc_hdr_t h = {0};
		uint8_t b[SC_HDR_LEN];
		h.kind = SC_MSG_ABORT;
		h.src = (uint16_t)my_rank;
		h.count = (uint64_t)(code < 0 ? -code : code);
		sc_hdr_encode(&h, b);
		if (send(l->fd, b, sizeof(b), MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
			/* best effort: the shutdown below still ends the peer's wait */
		}
	}
	shutdown(l->fd, SHUT_WR);
}

static void tcp_destroy(sc_link_t *l)
{
	if (l->fd >= 0)
		close(l->fd);
	free(l->priv);
	free(l);
}

const sc_link_ops_t sc_tcp_link_ops = {
	.name = "tcp",
	.sendv = tcp_sendv,
	.recvv = tcp_recvv,
	.prepare_poll = tcp_prepare_poll,
	.after_poll = tcp_after_poll,
	.abort = tcp_abort,
	.destroy = tcp_destroy,
};

static sc_link_t *tcp_link_new(int fd, int peer)
{
	sc_link_t *l = calloc(1, sizeof(*l));
	tcp_priv_t *p = calloc(1, sizeof(*p));
	if (!l || !p) {
		free(l);
		free(p);
		return NULL;
	}
	l->ops = &sc_tcp_link_ops;
	l->fd = fd;
	l->peer = peer;
	l->priv = p;
	return l;
}

/* ---- helpers ------------------------------------------------------------- */

int sc_set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

static void tune_socket(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Blocking-style read/write of exactly len bytes on a non-blocking fd. */
int sc_io_full(int fd, void *buf, size_t len, int is_write, int timeout_ms)
{
	uint8_t *p = buf;
	uint64_t dl = sc_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	while (len) {
		ssize_t n = is_write ? send(fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL)
		                     : recv(fd, p, len, MSG_DONTWAIT);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n == 0)
			return -ECONNRESET;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		{
			struct pollfd pf = {.fd = fd, .events = is_write ? POLLOUT : POLLIN};
			uint64_t now = sc_now_ns();
			if (now >= dl)
				return -ETIMEDOUT;
			poll(&pf, 1, (int)((dl - now) / 1000000ull) + 1);
		}
	}
	return 0;
}

int sc_is_loopback(const char *hostport)
{
	char host[256];
	uint16_t port;
	struct in_addr a4;
	struct in6_addr a6;
	if (sc_split_hostport(hostport, host, sizeof(host), &port) < 0)
		return 0;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &a6) == 1)
		return IN6_IS_ADDR_LOOPBACK(&a6);
	return strcmp(host, "localhost") == 0;
}

int sc_listen_on(const char *hostport, const char *bind_addr, char *why, size_t whylen)
{
	char host[256], portstr[8];
	uint16_t port;
	struct addrinfo hints = {0}, *res = NULL;
	int fd = -1, one = 1, rc;

	if (sc_split_hostport(hostport, host, sizeof(host), &port) < 0) {
		snprintf(why, whylen, "bad own address '%s' (want addr:port)", hostport);
		return -EINVAL;
	}
	snprintf(portstr, sizeof(portstr), "%u", port);
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	if (bind_addr && *bind_addr) {
		hints.ai_family = AF_UNSPEC;
		rc = getaddrinfo(bind_addr, portstr, &hints, &res);
	} else {
		/* Wildcard: on a physical ring each neighbour reaches this node on a
		 * different subnet. Prefer dual-stack IPv6, fall back to IPv4. */
		hints.ai_family = AF_INET6;
		rc = getaddrinfo(NULL, portstr, &hints, &res);
		if (rc == 0) {
			fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (fd < 0) {
				freeaddrinfo(res);
				res = NULL;
				hints.ai_family = AF_INET;
				rc = getaddrinfo(NULL, portstr, &hints, &res);
			} else {
				int zero = 0;
				setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
			}
		}
	}
	if (rc != 0) {
		snprintf(why, whylen, "cannot resolve listen address: %s", gai_strerror(rc));
		if (fd >= 0)
			close(fd);
		return -EINVAL;
	}
	if (fd < 0)
		fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		rc = -errno;
		snprintf(why, whylen, "socket: %s", strerror(errno));
		freeaddrinfo(res);
		return rc;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, SC_MAX_WORLD) < 0) {
		rc = -errno;
		snprintf(why, whylen, "cannot listen on port %u: %s", port, strerror(errno));
		close(fd);
		freeaddrinfo(res);
		return rc;
	}
	freeaddrinfo(res);
	sc_set_nonblock(fd);
	return fd;
}

/* ---- connection set-up --------------------------------------------------- */

enum { P_IDLE, P_CONNECTING, P_WAIT_ACK, P_WAIT_READY, P_DONE };

typedef struct {
	int state, fd;
	uint64_t retry_at;
	unsigned backoff_ms;
	uint8_t in[SC_HDR_LEN + SC_HELLO_LEN];
	size_t in_len;
	struct sc_vlink *v;
	char err[120];
	struct sockaddr_storage addr;
	socklen_t addrlen;
	int resolved;
	int no_verbs; /* verbs failed for this pair once: retry on TCP */
} pstate_t;

typedef struct {
	int fd;
	uint64_t since;
	uint8_t in[SC_HDR_LEN + SC_HELLO_LEN];
	size_t in_len;
} pending_t;

static int host_little_endian(void)
{
	const uint16_t x = 1;
	uint8_t b;
	memcpy(&b, &x, 1);
	return b == 1;
}

static void make_hello(sc_comm_t *c, sc_hello_t *h)
{
	memset(h, 0, sizeof(*h));
	h->rank = (uint16_t)c->rank;
	h->world_size = (uint16_t)c->world;
	h->flags = host_little_endian() ? SC_HELLO_F_LITTLE_ENDIAN : 0;
	h->job_id = c->opt.job_id;
}

static int send_msg(int fd, uint8_t kind, int src, const void *payload, size_t len)
{
	uint8_t b[SC_HDR_LEN + SC_HELLO_LEN];
	sc_hdr_t h = {0};
	h.kind = kind;
	h.src = (uint16_t)src;
	h.len = len;
	sc_hdr_encode(&h, b);
	if (len > SC_HELLO_LEN)
		return -EINVAL;
	if (len)
		memcpy(b + SC_HDR_LEN, payload, len);
	return sc_io_full(fd, b, SC_HDR_LEN + len, 1, 2000);
}

/* Read into in[] until a full message (header + payload <= SC_HELLO_LEN) is there.
 * 1 complete, 0 need more, <0 error. */
static int read_msg(int fd, uint8_t *in, size_t *in_len, sc_hdr_t *h)
{
	for (;;) {
		size_t need = SC_HDR_LEN;
		ssize_t r;
		if (*in_len >= SC_HDR_LEN) {
			if (sc_hdr_decode(in, SC_HDR_LEN, h, NULL) < 0 || h->len > SC_HELLO_LEN)
				return -EPROTO;
			need = SC_HDR_LEN + h->len;
			if (*in_len >= need)
				return 1;
		}
		r = recv(fd, in + *in_len, need - *in_len, MSG_DONTWAIT);
		if (r == 0)
			return -ECONNRESET;
		if (r < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -errno;
		*in_len += (size_t)r;
	}
}

static int resolve_peer(sc_comm_t *c, int j, pstate_t *p)
{
	char host[256], portstr[8];
	uint16_t port;
	struct addrinfo hints = {0}, *res = NULL;
	int rc;

	if (sc_split_hostport(c->peers[j], host, sizeof(host), &port) < 0) {
		snprintf(p->err, sizeof(p->err), "bad address '%s'", c->peers[j]);
		return -EINVAL;
	}
	snprintf(portstr, sizeof(portstr), "%u", port);
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	rc = getaddrinfo(host, portstr, &hints, &res);
	if (rc != 0) {
		snprintf(p->err, sizeof(p->err), "cannot resolve %s: %s", host, gai_strerror(rc));
		return -EHOSTUNREACH;
	}
	memcpy(&p->addr, res->ai_addr, res->ai_addrlen);
	p->addrlen = res->ai_addrlen;
	p->resolved = 1;
	freeaddrinfo(res);
	return 0;
}

static void p_reset(pstate_t *p, uint64_t now, const char *what, int err)
{
	if (p->fd >= 0)
		close(p->fd);
	p->fd = -1;
	if (p->v) {
		sc_verbs_link_free(p->v);
		p->v = NULL;
	}
	p->state = P_IDLE;
	p->in_len = 0;
	if (what)
		snprintf(p->err, sizeof(p->err), "%s: %s", what, strerror(err));
	p->backoff_ms = p->backoff_ms ? p->backoff_ms * 2 : 10;
	if (p->backoff_ms > 250)
		p->backoff_ms = 250;
	p->retry_at = now + (uint64_t)p->backoff_ms * 1000000ull;
}

static void note_transport(sc_comm_t *c, sc_link_t *l, const char *why)
{
	(void)l;
	if (why && *why && !c->transport_reason[0])
		snprintf(c->transport_reason, sizeof(c->transport_reason), "%s", why);
}

/* Build a hello with a verbs endpoint if this socket's local address has one. */
static void offer_verbs(sc_comm_t *c, int fd, sc_hello_t *mine, struct sc_vlink **v)
{
	struct sockaddr_storage la;
	socklen_t ll = sizeof(la);
	char why[200] = "";

	*v = NULL;
	if (!c->vctx || c->opt.transport == SC_TRANSPORT_TCP)
		return;
	if (getsockname(fd, (struct sockaddr *)&la, &ll) < 0)
		return;
	*v = sc_verbs_link_new(c, (struct sockaddr *)&la, mine, why, sizeof(why));
	if (!*v)
		note_transport(c, NULL, why);
}

static int finish_link(sc_comm_t *c, int j, int fd, struct sc_vlink *v)
{
	sc_link_t *l;
	if (v) {
		l = sc_verbs_link_wrap(v, fd, j);
		if (l)
			c->links_verbs++;
	} else {
		l = tcp_link_new(fd, j);
	}
	if (!l)
		return -ENOMEM;
	c->links[j] = l;
	c->links_connected++;
	return 0;
}

static int peer_allowed(sc_comm_t *c, int j)
{
	if (j == c->rank)
		return 0;
	if (c->opt.topology == SC_TOPO_RING)
		return j == c->left || j == c->right;
	return 1;
}

/* Acceptor: a HELLO arrived on an accepted socket. 1 = link done, 2 = wait READY,
 * <0 = reject. */
static int on_hello(sc_comm_t *c, int fd, const uint8_t *msg, pstate_t *ps, char *why,
                    size_t wl)
{
	sc_hello_t peer, mine;
	const char *w = NULL;
	int j;

	if (sc_hello_decode(msg + SC_HDR_LEN, SC_HELLO_LEN, &peer, &w) < 0) {
		snprintf(why, wl, "bad hello: %s", w);
		return -EPROTO;
	}
	j = peer.rank;
	if (peer.world_size != c->world || j <= c->rank || !peer_allowed(c, j)) {
		snprintf(why, wl, "unexpected hello from rank %d of %d", j, peer.world_size);
		return -EPROTO;
	}
	if (peer.job_id != c->opt.job_id) {
		snprintf(why, wl, "hello from another job");
		return -EPROTO;
	}
	if (!!(peer.flags & SC_HELLO_F_LITTLE_ENDIAN) != host_little_endian()) {
		snprintf(why, wl, "rank %d has another byte order (unsupported)", j);
		return -EPROTO;
	}
	if (ps[j].state == P_DONE || ps[j].state == P_WAIT_READY) {
		snprintf(why, wl, "duplicate connection from rank %d", j);
		return -EALREADY;
	}
	make_hello(c, &mine);
	ps[j].v = NULL;
	if (peer.flags & SC_HELLO_F_VERBS) {
		offer_verbs(c, fd, &mine, &ps[j].v);
		if (ps[j].v && sc_verbs_link_connect(ps[j].v, &peer, why, wl) < 0) {
			note_transport(c, NULL, why);
			sc_verbs_link_free(ps[j].v);
			ps[j].v = NULL;
			mine.flags &= ~SC_HELLO_F_VERBS;
		}
	} else if (c->vctx) {
		note_transport(c, NULL, "a peer offered no verbs endpoint");
	}
	{
		uint8_t b[SC_HELLO_LEN];
		sc_hello_encode(&mine, b);
		if (send_msg(fd, SC_MSG_HELLO_ACK, c->rank, b, sizeof(b)) < 0) {
			snprintf(why, wl, "cannot answer rank %d", j);
			if (ps[j].v) {
				sc_verbs_link_free(ps[j].v);
				ps[j].v = NULL;
			}
			return -EIO;
		}
	}
	ps[j].fd = fd;
	ps[j].in_len = 0;
	if (ps[j].v) {
		ps[j].state = P_WAIT_READY;
		return 2;
	}
	ps[j].state = P_DONE;
	return 1;
}

int sc_net_setup(sc_comm_t *c)
{
	int n = c->world, me = c->rank, rc = 0;
	pstate_t *ps = calloc((size_t)n, sizeof(*ps));
	pending_t pend[SC_MAX_WORLD];
	int npend = 0;
	uint64_t start = sc_now_ns(), req_done_at = 0;
	uint64_t conn_to = (uint64_t)c->opt.connect_timeout_ms * 1000000ull;
	uint64_t pair_to = (uint64_t)c->opt.pair_timeout_ms * 1000000ull;
	char why[200];

	if (!ps)
		return -ENOMEM;
	for (int j = 0; j < n; j++) {
		ps[j].fd = -1;
		ps[j].state = P_IDLE;
		if (j < me && peer_allowed(c, j) && resolve_peer(c, j, &ps[j]) < 0 &&
		    (j == c->left || j == c->right)) {
			rc = sc_fail(c, -EINVAL, "neighbour rank %d: %s", j, ps[j].err);
			goto out;
		}
	}

	for (;;) {
		uint64_t now = sc_now_ns();
		int all = 1, req = 1;
		struct pollfd pf[2 * SC_MAX_WORLD + 1];
		int who[2 * SC_MAX_WORLD + 1], np = 0;
		int wait_ms = 50;

		for (int j = 0; j < n; j++) {
			if (!peer_allowed(c, j))
				continue;
			if (ps[j].state != P_DONE) {
				all = 0;
				if (j == c->left || j == c->right)
					req = 0;
			}
		}
		if (all)
			break;
		if (req && !req_done_at)
			req_done_at = now;
		if (conn_to && now - start > conn_to)
			break;
		if (req && now - req_done_at > pair_to)
			break;

		/* start / retry connects to lower ranks */
		for (int j = 0; j < me; j++) {
			pstate_t *p = &ps[j];
			if (!peer_allowed(c, j) || !p->resolved || p->state != P_IDLE || now < p->retry_at)
				continue;
			p->fd = socket(p->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (p->fd < 0) {
				p_reset(p, now, "socket", errno);
				continue;
			}
			sc_set_nonblock(p->fd);
			tune_socket(p->fd);
			if (connect(p->fd, (struct sockaddr *)&p->addr, p->addrlen) < 0 &&
			    errno != EINPROGRESS) {
				p_reset(p, now, "connect", errno);
				continue;
			}
			p->state = P_CONNECTING;
		}

		if (c->listen_fd >= 0) {
			pf[np].fd = c->listen_fd;
			pf[np].events = POLLIN;
			who[np++] = -1;
		}
		for (int j = 0; j < n; j++) {
			pstate_t *p = &ps[j];
			if (p->state == P_CONNECTING) {
				pf[np].fd = p->fd;
				pf[np].events = POLLOUT;
				who[np++] = j;
			} else if (p->state == P_WAIT_ACK || p->state == P_WAIT_READY) {
				pf[np].fd = p->fd;
				pf[np].events = POLLIN;
				who[np++] = j;
			}
		}
		for (int k = 0; k < npend; k++) {
			pf[np].fd = pend[k].fd;
			pf[np].events = POLLIN;
			who[np++] = -2 - k;
		}
		for (int k = 0; k < np; k++)
			pf[k].revents = 0;
		poll(pf, (nfds_t)np, wait_ms);
		now = sc_now_ns();

		for (int k = 0; k < np; k++) {
			short re = pf[k].revents;
			int j = who[k];
			if (!re)
				continue;
			if (j == -1) { /* new connections */
				for (;;) {
					int fd = accept4(c->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
					if (fd < 0)
						break;
					if (npend >= SC_MAX_WORLD) {
						close(fd);
						continue;
					}
					tune_socket(fd);
					pend[npend].fd = fd;
					pend[npend].since = now;
					pend[npend].in_len = 0;
					npend++;
				}
			} else if (j <= -2) {
				pending_t *q = &pend[-2 - j];
				sc_hdr_t h;
				int r = read_msg(q->fd, q->in, &q->in_len, &h);
				if (r == 0)
					continue;
				if (r > 0 && h.kind == SC_MSG_HELLO) {
					r = on_hello(c, q->fd, q->in, ps, why, sizeof(why));
					if (r > 0)
						q->fd = -1; /* owned by ps[] now */
				} else {
					r = -EPROTO;
				}
				if (q->fd >= 0 && r <= 0) {
					close(q->fd);
					q->fd = -1;
				}
			} else if (ps[j].state == P_CONNECTING) {
				pstate_t *p = &ps[j];
				int err = 0;
				socklen_t el = sizeof(err);
				sc_hello_t mine;
				uint8_t b[SC_HELLO_LEN];
				getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &el);
				if (err) {
					p_reset(p, now, "connect", err);
					continue;
				}
				make_hello(c, &mine);
				if (!p->no_verbs)
					offer_verbs(c, p->fd, &mine, &p->v);
				sc_hello_encode(&mine, b);
				if (send_msg(p->fd, SC_MSG_HELLO, me, b, sizeof(b)) < 0) {
					p_reset(p, now, "hello", EIO);
					continue;
				}
				p->state = P_WAIT_ACK;
				p->in_len = 0;
			} else if (ps[j].state == P_WAIT_ACK) {
				pstate_t *p = &ps[j];
				sc_hdr_t h;
				sc_hello_t peer;
				const char *w = NULL;
				int r = read_msg(p->fd, p->in, &p->in_len, &h);
				if (r == 0)
					continue;
				if (r < 0 || h.kind != SC_MSG_HELLO_ACK ||
				    sc_hello_decode(p->in + SC_HDR_LEN, SC_HELLO_LEN, &peer, &w) < 0 ||
				    peer.rank != j || peer.job_id != c->opt.job_id ||
				    !!(peer.flags & SC_HELLO_F_LITTLE_ENDIAN) != host_little_endian()) {
					p_reset(p, now, "handshake", r < 0 ? -r : EPROTO);
					continue;
				}
				if (p->v && (peer.flags & SC_HELLO_F_VERBS)) {
					if (sc_verbs_link_connect(p->v, &peer, why, sizeof(why)) < 0) {
						/* the acceptor is on verbs already: start over, TCP only */
						note_transport(c, NULL, why);
						p_reset(p, now, "verbs connect", EIO);
						snprintf(p->err, sizeof(p->err), "%s", why);
						p->no_verbs = 1;
						continue;
					}
					if (send_msg(p->fd, SC_MSG_READY, me, NULL, 0) < 0) {
						p_reset(p, now, "ready", EIO);
						continue;
					}
				} else if (p->v) {
					note_transport(c, NULL, "a peer has no RoCE v2 GID or chose TCP");
					sc_verbs_link_free(p->v);
					p->v = NULL;
				}
				p->state = P_DONE;
			} else if (ps[j].state == P_WAIT_READY) {
				pstate_t *p = &ps[j];
				sc_hdr_t h;
				int r = read_msg(p->fd, p->in, &p->in_len, &h);
				if (r == 0)
					continue;
				if (r < 0 || h.kind != SC_MSG_READY) {
					snprintf(p->err, sizeof(p->err), "verbs handshake with rank %d failed", j);
					p_reset(p, now, NULL, 0);
					continue;
				}
				p->state = P_DONE;
			}
		}
		/* drop closed or stale pending sockets */
		for (int k = 0; k < npend;) {
			if (pend[k].fd < 0 || (pair_to && now - pend[k].since > pair_to + conn_to)) {
				if (pend[k].fd >= 0)
					close(pend[k].fd);
				pend[k] = pend[--npend];
			} else {
				k++;
			}
		}
	}

	for (int j = 0; j < n; j++) {
		pstate_t *p = &ps[j];
		if (p->state == P_DONE) {
			rc = finish_link(c, j, p->fd, p->v);
			p->v = NULL;
			p->fd = -1;
			if (rc < 0)
				goto out;
		}
	}
	for (int j = 0; j < n; j++) {
		if ((j == c->left || j == c->right) && j != me && !c->links[j]) {
			rc = sc_fail(c, -ETIMEDOUT,
			             "cannot connect to neighbour rank %d at %s within %d ms%s%s",
			             j, c->peers[j], c->opt.connect_timeout_ms,
			             ps[j].err[0] ? ": " : "", ps[j].err);
			goto out;
		}
	}
	for (int j = 0; j < n; j++) {
		if (peer_allowed(c, j) && !c->links[j]) {
			snprintf(c->decision, sizeof(c->decision),
			         "rank %d could not connect to rank %d (%s)", me, j,
			         ps[j].err[0] ? ps[j].err : "no connection within pair timeout");
			break;
		}
	}
out:
	for (int j = 0; j < n; j++) {
		if (ps[j].state != P_DONE || rc < 0) {
			if (ps[j].fd >= 0)
				close(ps[j].fd);
			if (ps[j].v)
				sc_verbs_link_free(ps[j].v);
		}
	}
	for (int k = 0; k < npend; k++)
		if (pend[k].fd >= 0)
			close(pend[k].fd);
	free(ps);
	return rc;
}

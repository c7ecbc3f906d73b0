/* sc_internal.h - libsparkcoll internals shared by its modules (not installed).
 *
 * Modules: sc_wire (codecs), sc_dtype (types, reductions), sc_engine (progress
 * loop over links), sc_tcp (TCP links and connection set-up), sc_verbs (RC
 * queue-pair links), sc_coll (algorithms), sc_comm (init, self-test,
 * calibration, env), sc_local (fork N ranks on loopback, for tools and tests).
 */
#ifndef SC_INTERNAL_H
#define SC_INTERNAL_H

#define SC_BUILDING_LIB 1
#include "sparkcoll.h"
#include "sc_wire.h"

#include <poll.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#define SC_HIDDEN __attribute__((visibility("hidden")))

typedef struct sc_link sc_link_t;
typedef struct sc_xfer sc_xfer_t;

/* A link is an ordered reliable byte stream to one peer. */
typedef struct sc_link_ops {
	const char *name;
	/* bytes accepted (>0), -EAGAIN, or another negative error */
	ssize_t (*sendv)(sc_link_t *l, const struct iovec *iov, int iovcnt);
	/* bytes read (>0), -EAGAIN, -ECONNRESET on EOF, or another negative error */
	ssize_t (*recvv)(sc_link_t *l, const struct iovec *iov, int iovcnt);
	/* fill up to 2 pollfds to sleep on; return how many (0..2), or -1 if work is
	 * already pending (do not sleep) */
	int (*prepare_poll)(sc_link_t *l, struct pollfd *pfd, int want_send, int want_recv);
	/* called after poll with the revents of the pollfds prepare_poll filled */
	int (*after_poll)(sc_link_t *l, const struct pollfd *pfd, int npfd);
	/* send an ABORT carrying code if the stream is at a message boundary, then
	 * stop sending (the peer sees EOF after it) */
	void (*abort)(sc_link_t *l, int code, int my_rank);
	void (*destroy)(sc_link_t *l);
} sc_link_ops_t;

struct sc_link {
	const sc_link_ops_t *ops;
	int peer;
	int fd;                 /* TCP socket (for verbs links: bootstrap and liveness) */
	void *priv;             /* transport state */
	sc_xfer_t *sq_head, *sq_tail, *rq_head, *rq_tail;
	int send_dirty;         /* a message is partially written */
	int active_stamp;
};

struct sc_xfer {
	sc_xfer_t *next;
	sc_link_t *link;
	int is_send, done;
	uint8_t hdrbuf[SC_HDR_LEN];
	size_t hdr_done;
	sc_hdr_t hdr;           /* send: header to send; recv: header expected */
	uint8_t *buf;
	size_t len, off;
	sc_xfer_t *after;         /* send: wait for this op before starting */
	/* recv: called as payload arrives (at least every `gran` bytes and at the end) */
	void (*on_data)(sc_xfer_t *op, size_t avail);
	void *ctx;
	size_t notified, gran;
};

struct sc_vctx;

struct sc_comm {
	int rank, world, left, right;
	sc_options_t opt;
	char **peers;           /* addr:port per rank */
	sc_link_t **links;      /* [world]; NULL for self and unconnected pairs */
	int links_connected, links_verbs;
	int oneshot_ok;
	sc_algo_t small_algo;   /* auto's small-message algorithm: ONESHOT or DOUBLING, else RELAY */
	size_t oneshot_max;     /* auto: small_algo up to this many bytes, ring above */
	int calibrated;
	uint32_t seq;
	int error;
	char errmsg[384];
	char decision[256];
	char transport[16];
	char transport_reason[256];
	int spin_us, spin_yield;
	int host_ranks;         /* ranks on this rank's host, itself included */
	long host_cpus;         /* online CPUs of this host */
	uint64_t calib_ns;      /* wall time of the calibration (0 if none) */
	int listen_fd;
	uint8_t *tmp;
	size_t tmp_cap;
	sc_xfer_t *ops;
	int ops_cap, nops;
	int stamp;
	struct sc_vctx *vctx;
	char verbs_why[200];
};

/* sc_dtype.c */
SC_HIDDEN void sc_reduce(void *out, const void *const *srcs, int nsrc, size_t count,
                         sc_dtype_t dt, sc_op_t op);
SC_HIDDEN void sc_reduce2(void *out, const void *a, const void *b, size_t count, sc_dtype_t dt,
                          sc_op_t op);

/* sc_engine.c */
SC_HIDDEN int sc_fail(sc_comm_t *c, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
SC_HIDDEN int sc_ops_reserve(sc_comm_t *c, int n);
SC_HIDDEN sc_xfer_t *sc_op_send(sc_comm_t *c, int peer, const sc_hdr_t *h, const void *buf,
                              size_t len);
SC_HIDDEN sc_xfer_t *sc_op_recv(sc_comm_t *c, int peer, const sc_hdr_t *want, void *buf,
                              size_t len);
/* Progress every op added since the last run until all are done: 0 or error
 * (the communicator is then failed and peers told). */
SC_HIDDEN int sc_engine_run(sc_comm_t *c);
SC_HIDDEN uint64_t sc_now_ns(void);
SC_HIDDEN int sc_tmp_reserve(sc_comm_t *c, size_t bytes);

/* sc_tcp.c */
SC_HIDDEN extern const sc_link_ops_t sc_tcp_link_ops;
SC_HIDDEN int sc_net_setup(sc_comm_t *c);
SC_HIDDEN int sc_listen_on(const char *hostport, const char *bind_addr, char *why, size_t whylen);
SC_HIDDEN int sc_set_nonblock(int fd);
SC_HIDDEN int sc_io_full(int fd, void *buf, size_t len, int is_write, int timeout_ms);
SC_HIDDEN int sc_is_loopback(const char *hostport);

/* sc_verbs.c */
struct sc_vlink;
SC_HIDDEN extern const sc_link_ops_t sc_verbs_link_ops;
/* 1 if some device exists (c->vctx set), 0 with a reason in c->verbs_why. */
SC_HIDDEN int sc_verbs_open(sc_comm_t *c);
SC_HIDDEN void sc_verbs_close(sc_comm_t *c);
/* Find the RoCE v2 GID of the address `local` under sysfs_root
 * (default /sys/class/infiniband): 0 and dev/port/index/gid, or -ENOENT. */
SC_HIDDEN int sc_verbs_find_gid(const char *sysfs_root, const struct sockaddr *local,
                                char *dev, size_t devlen, int *port, int *gid_index,
                                uint8_t gid[16]);
/* Create the QP side of a link bound to local address; fills the verbs fields
 * of *mine. NULL with a reason when this address has no RoCE v2 GID. */
SC_HIDDEN struct sc_vlink *sc_verbs_link_new(sc_comm_t *c, const struct sockaddr *local,
                                             sc_hello_t *mine, char *why, size_t whylen);
SC_HIDDEN int sc_verbs_link_connect(struct sc_vlink *v, const sc_hello_t *peer, char *why,
                                    size_t whylen);
SC_HIDDEN void sc_verbs_link_free(struct sc_vlink *v);
SC_HIDDEN sc_link_t *sc_verbs_link_wrap(struct sc_vlink *v, int fd, int peer);

/* sc_coll.c */
SC_HIDDEN int sc_allreduce_impl(sc_comm_t *c, int coll, const void *send, void *recv,
                                size_t count, sc_dtype_t dt, sc_op_t op, sc_algo_t algo);
/* 1 if recursive doubling can run: a power-of-two world >= 2, and every pair
 * connected from 8 ranks (at 2 and 4 every partner is a ring neighbour) */
SC_HIDDEN int sc_doubling_ok(const sc_comm_t *c);
SC_HIDDEN int sc_allgather_impl(sc_comm_t *c, int coll, const void *send, void *recv,
                                size_t count, sc_dtype_t dt, sc_algo_t algo);

/* sc_comm.c, exposed for unit tests */
/* This host's identity: a hash of SPARK_COLL_HOST_ID if set, else of the
 * kernel boot id (shared by network namespaces and containers on one kernel),
 * else of the host name; never 0. */
SC_HIDDEN uint64_t sc_host_id(void);
/* Spin policy from every rank's host id (0 = unknown, a host of its own):
 * counts the ranks on host_ids[rank]'s host and returns that count; sets
 * *spin_us (spin_opt if >= 0, else 0 when those ranks are at least ncpu, else
 * 50) and *spin_yield (yield_env if set and non-empty, else the same test). */
SC_HIDDEN int sc_spin_decide(const uint64_t *host_ids, int world, int rank, long ncpu,
                             int spin_opt, const char *yield_env, int *spin_us, int *spin_yield);
/* Crossover in bytes from per-size times (ns) of the small algorithm (os:
 * one-shot, or relay when one-shot is off) and ring (rg) measured at
 * sizes[0..measured-1] of nsizes planned: 0 = ring everywhere,
 * 2 * sizes[nsizes-1] = the small algorithm at every planned size. */
SC_HIDDEN size_t sc_calib_crossover(const size_t *sizes, const int64_t *os, const int64_t *rg,
                                    int measured, int nsizes);

/* sc_local.c: fork n ranks on loopback; each runs fn(rank, n, peers, listen_fd, arg)
 * and exits with its return value. Returns 0 if every rank returned 0, else the
 * first non-zero status (signal -> 128+sig); kills all after timeout_ms. */
typedef int (*sc_local_fn)(int rank, int n, const char *const *peers, int listen_fd, void *arg);
int sc_local_run(int n, sc_local_fn fn, void *arg, int timeout_ms);
/* Bind n listening sockets on 127.0.0.1:0; fill fds and "127.0.0.1:port" strings. */
int sc_local_listeners(int n, int *fds, char **peers, size_t peerlen);

#endif

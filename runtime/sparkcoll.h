/* sparkcoll.h - libsparkcoll, the collective runtime shipped with sparkctl.
 *
 * Contract: a communicator joins `world_size` ranks that each call the same
 * collectives in the same order with the same count, type and op. Calls are
 * blocking and not thread-safe per communicator. Every function returns 0 or a
 * negative code (a -errno value or -SC_E*); sc_strerror() turns a code into
 * text and sc_comm_last_error() gives the detail of the last failure. A dead or
 * silent peer makes a call fail after the timeout, never hang; a mismatch of
 * count, type or op fails on every rank. After a collective fails the
 * communicator is unusable: destroy it.
 *
 * Depends on libc, pthreads and libibverbs only (no control-plane code).
 */
#ifndef SPARKCOLL_H
#define SPARKCOLL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && defined(SC_BUILDING_LIB)
#define SC_API __attribute__((visibility("default")))
#else
#define SC_API
#endif

#define SC_VERSION_MAJOR 0
#define SC_VERSION_MINOR 2

/* Library error codes (returned negated, like -errno values). */
#define SC_EMISMATCH 1001 /* ranks called with different count/type/op/collective */
#define SC_EABORTED  1002 /* a peer aborted the collective (detail in last_error) */
#define SC_EPEER     1003 /* a peer sent a malformed or unexpected message */
#define SC_EBROKEN   1004 /* communicator already failed; destroy it */

typedef struct sc_comm sc_comm_t;

typedef enum { SC_F32 = 0, SC_F16 = 1, SC_BF16 = 2, SC_I32 = 3, SC_I64 = 4 } sc_dtype_t;
#define SC_DTYPE_COUNT 5
typedef enum { SC_SUM = 0, SC_MAX = 1, SC_MIN = 2 } sc_op_t;
#define SC_OP_COUNT 3
/* RELAY: one-shot over neighbour links only (each rank's input travels both
 * ways round the ring, ceil((n-1)/2) steps; same bits as ONESHOT).
 * DOUBLING: recursive doubling, log2(n) exchanges of the whole buffer with
 * rank ^ (2^(k+1) - 1) (fewer messages than one-shot: n log2 n against
 * n(n-1)); needs a power-of-two world and, from 8 ranks, every pair
 * connected (at 2 and 4 ranks all partners are ring neighbours); elsewhere
 * it runs one-shot (relay when one-shot is off). Every rank gets the same bits, but not
 * one-shot's (another summation order). Values are ABI: new ones are appended. */
typedef enum {
	SC_ALGO_AUTO = 0,
	SC_ALGO_ONESHOT = 1,
	SC_ALGO_RING = 2,
	SC_ALGO_RELAY = 3,
	SC_ALGO_DOUBLING = 4
} sc_algo_t;
#define SC_ALGO_COUNT 5
typedef enum { SC_TOPO_UNKNOWN = 0, SC_TOPO_SWITCH = 1, SC_TOPO_RING = 2 } sc_topology_t;
typedef enum { SC_TRANSPORT_AUTO = 0, SC_TRANSPORT_TCP = 1, SC_TRANSPORT_VERBS = 2 } sc_transport_t;

/* sc_options_t.oneshot_max: measure the crossover at init. */
#define SC_ONESHOT_CALIBRATE ((size_t)-1)

typedef struct sc_options {
	sc_topology_t topology;  /* RING: neighbour links only, one-shot off (relay instead) */
	sc_algo_t algo;          /* AUTO picks per call; ONESHOT/RING/RELAY force one */
	size_t oneshot_max;      /* bytes; auto uses the small algorithm (one-shot, or
	                          * relay when one-shot is off) up to this size */
	int timeout_ms;          /* no progress for this long = error; 0 = never */
	int connect_timeout_ms;  /* neighbours (and everything) must connect within */
	int pair_timeout_ms;     /* grace for non-neighbour pairs before giving up on one-shot */
	int spin_us;             /* busy-poll before sleeping; -1 = automatic */
	sc_transport_t transport;
	int listen_fd;           /* already-listening socket to use, or -1 */
	int selftest;            /* 1 = run the checksum self-test at init */
	uint64_t job_id;         /* ranks of one job share it (0 = none) */
	const char *bind_addr;   /* listen address; NULL = wildcard on own port */
	const char *sysfs_root;  /* for tests: where to read /sys/class/infiniband */
} sc_options_t;

typedef struct sc_info {
	int rank, world_size;
	sc_topology_t topology;
	sc_algo_t algo;              /* configured algorithm */
	int oneshot_enabled;         /* 1 if one-shot may be used */
	size_t oneshot_max;          /* crossover used by auto (bytes): small_algo up
	                              * to it, ring above */
	int calibrated;              /* 1 if oneshot_max was measured at init */
	char decision[256];          /* self-test decision and its reason */
	char transport[16];          /* "tcp", "verbs" or "mixed" */
	char transport_reason[256];  /* why that transport */
	int links_connected;         /* peers connected (of world_size - 1) */
	int timeout_ms;
	/* since 0.2 */
	sc_algo_t small_algo;        /* auto's small-message algorithm: ONESHOT (or
	                              * DOUBLING if the calibration found it faster),
	                              * or RELAY when one-shot is off (a ring) */
} sc_info_t;

SC_API void sc_options_default(sc_options_t *o);
/* Apply SPARK_COLL_* variables to *o. Returns 0 or -EINVAL (bad value). */
SC_API int sc_options_from_env(sc_options_t *o);

/* peers[i] is "addr:port" ("[v6addr]:port" for IPv6) of rank i as seen from this
 * rank; this rank listens on the port of peers[rank] (or on opts->listen_fd). */
SC_API int sc_comm_init(sc_comm_t **comm, int rank, int world_size,
                        const char *const *peers, const sc_options_t *opts);
/* SPARK_RANK/SPARK_WORLD_SIZE/SPARK_PEERS/SPARK_TOPOLOGY, else RANK (or
 * OMPI_COMM_WORLD_RANK)/WORLD_SIZE/MASTER_ADDR/MASTER_PORT rendezvous. */
SC_API int sc_comm_init_from_env(sc_comm_t **comm);
SC_API void sc_comm_destroy(sc_comm_t *comm);

/* recv may equal send (in place). Result on every rank. */
SC_API int sc_allreduce(sc_comm_t *comm, const void *send, void *recv, size_t count,
                        sc_dtype_t dtype, sc_op_t op);
/* Same, forcing an algorithm for this call (AUTO = the communicator's choice).
 * ONESHOT on a communicator whose one-shot is off runs RELAY (same bits);
 * DOUBLING where it cannot run (see above) runs ONESHOT or RELAY. */
SC_API int sc_allreduce_algo(sc_comm_t *comm, const void *send, void *recv, size_t count,
                             sc_dtype_t dtype, sc_op_t op, sc_algo_t algo);
/* recv holds world_size * count elements, rank i's block at i * count. */
SC_API int sc_allgather(sc_comm_t *comm, const void *send, void *recv, size_t count,
                        sc_dtype_t dtype);
SC_API int sc_broadcast(sc_comm_t *comm, void *buf, size_t count, sc_dtype_t dtype, int root);
SC_API int sc_barrier(sc_comm_t *comm);

SC_API int sc_comm_info(const sc_comm_t *comm, sc_info_t *info);
SC_API int sc_comm_rank(const sc_comm_t *comm);
SC_API int sc_comm_size(const sc_comm_t *comm);
/* Algorithm auto would use for `bytes` on this communicator. */
SC_API sc_algo_t sc_comm_pick_algo(const sc_comm_t *comm, size_t bytes);
SC_API const char *sc_comm_last_error(const sc_comm_t *comm);

SC_API const char *sc_strerror(int code);
SC_API size_t sc_dtype_size(sc_dtype_t dtype);
SC_API const char *sc_dtype_name(sc_dtype_t dtype);
SC_API const char *sc_op_name(sc_op_t op);
SC_API const char *sc_algo_name(sc_algo_t algo);
SC_API int sc_dtype_parse(const char *s, sc_dtype_t *out);
SC_API int sc_op_parse(const char *s, sc_op_t *out);
SC_API int sc_algo_parse(const char *s, sc_algo_t *out);

/* Portable f16/bf16 conversions (round to nearest even). */
SC_API float sc_f16_to_f32(uint16_t h);
SC_API uint16_t sc_f32_to_f16(float f);
SC_API float sc_bf16_to_f32(uint16_t h);
SC_API uint16_t sc_f32_to_bf16(float f);

/* Element i of a buffer of type dt read as a double, and written from one
 * (f16/bf16 through the conversions above, integers truncated): for tools and
 * checks that fill and verify buffers of any type. */
SC_API double sc_dtype_get(const void *buf, size_t i, sc_dtype_t dt);
SC_API void sc_dtype_set(void *buf, size_t i, sc_dtype_t dt, double v);

#ifdef __cplusplus
}
#endif
#endif

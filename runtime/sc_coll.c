/* sc_coll.c - collective algorithms.
 *
 * one-shot all-reduce: every rank sends its whole input to every other rank
 *   and reduces the n inputs itself in rank order, so every rank computes the
 *   same bits. One step, (n-1) * bytes sent per rank. Needs all pairs.
 * relay all-reduce: one-shot over neighbour links only. Every input travels
 *   both ways round the ring: rank r sends its input to both neighbours, then
 *   forwards what arrives from the left to the right and vice versa, until
 *   each rank holds all n inputs (ceil((n-1)/2) dependent steps; for even n
 *   the last step goes rightwards only, so each input arrives once), and
 *   reduces them in rank order like one-shot (the same bits). Every step is
 *   posted at once: a forward is a send that waits for its receive, so it
 *   leaves as soon as the data is in, without a round through the caller.
 * recursive doubling: for a power-of-two n, log2 n steps; at step k a rank
 *   exchanges its partial result with rank ^ (2^(k+1) - 1) (the mirror rank
 *   in the other half of its 2^(k+1) group) and combines the two, the lower
 *   half's partial first, so both partners (and in the end every rank) hold
 *   the same bits. n log2 n messages per call against one-shot's n(n-1): it
 *   wins where each message costs CPU (TCP, ranks sharing cores); the
 *   calibration decides. Mirror partners make every exchange of a 4-rank
 *   world one between ring neighbours (0-1, 2-3, then 0-3, 1-2), so at 4
 *   ranks it runs on a physical ring too; from 8 it needs every pair.
 * ring all-reduce: reduce-scatter then all-gather around the ring, 2(n-1)
 *   steps of bytes/n, neighbour traffic only. Each chunk is reduced at one
 *   rank and copied to the others, so all ranks hold the same bits too.
 * Every message header carries the collective's sequence number, kind,
 * count, type, op, algorithm and step; a receiver that sees anything else
 * fails the call and tells every peer (see sc_engine.c).
 */
#include "sc_internal.h"

#include <errno.h>
#include <string.h>

#define ONESHOT_SEG (4u << 20)   /* one-shot works in segments of at most this */
#define REDUCE_GRAN (128u << 10) /* ring: reduce as every 128 KiB arrives */
#define BCAST_SEG (512u << 10)

static size_t chunk_start(size_t count, int n, int c)
{
	size_t q = count / (size_t)n, r = count % (size_t)n;
	return (size_t)c * q + ((size_t)c < r ? (size_t)c : r);
}

static size_t chunk_len(size_t count, int n, int c)
{
	return count / (size_t)n + ((size_t)c < count % (size_t)n ? 1 : 0);
}

static int mod(int a, int n) { return ((a % n) + n) % n; }

static sc_hdr_t mkhdr(sc_comm_t *c, int coll, size_t count, sc_dtype_t dt, sc_op_t op,
                      sc_algo_t algo, int step)
{
	sc_hdr_t h = {0};
	h.kind = SC_MSG_DATA;
	h.seq = c->seq;
	h.coll = (uint8_t)coll;
	h.count = count;
	h.dtype = (uint8_t)dt;
	h.op = (uint8_t)op;
	h.algo = (uint8_t)algo;
	h.step = (uint16_t)step;
	return h;
}

static int oneshot_allreduce(sc_comm_t *c, int coll, const uint8_t *send, uint8_t *recv,
                             size_t count, sc_dtype_t dt, sc_op_t op)
{
	int n = c->world, r = c->rank, rc;
	size_t es = sc_dtype_size(dt);
	size_t seg_el = ONESHOT_SEG / es, off = 0;
	int step = 0;
	const void *srcs[SC_MAX_WORLD];

	if ((rc = sc_ops_reserve(c, 2 * n)) < 0)
		return rc;
	do {
		size_t nel = count - off < seg_el ? count - off : seg_el;
		size_t bytes = nel * es;
		sc_hdr_t h = mkhdr(c, coll, count, dt, op, SC_ALGO_ONESHOT, step);
		if ((rc = sc_tmp_reserve(c, (size_t)(n - 1) * bytes + 1)) < 0)
			return rc;
		for (int k = 1; k < n; k++) {
			int p = (r + k) % n;
			if (!sc_op_send(c, p, &h, send + off * es, bytes))
				return sc_fail(c, -ENOTCONN, "no link to rank %d", p);
		}
		for (int k = 1; k < n; k++) {
			int p = (r - k + n) % n;
			int slot = p < r ? p : p - 1;
			if (!sc_op_recv(c, p, &h, c->tmp + (size_t)slot * bytes, bytes))
				return sc_fail(c, -ENOTCONN, "no link to rank %d", p);
		}
		if ((rc = sc_engine_run(c)) < 0)
			return rc;
		for (int p = 0; p < n; p++)
			srcs[p] = p == r ? (const void *)(send + off * es)
			                 : (const void *)(c->tmp + (size_t)(p < r ? p : p - 1) * bytes);
		sc_reduce(recv + off * es, srcs, n, nel, dt, op);
		off += nel;
		step++;
	} while (off < count);
	return 0;
}

/* Post a whole relay: this rank's block `own` to both neighbours, every other
 * rank's block p received into base + slot(p) * bytes (slot(p) = p, or with
 * skip_self the index of p among the other ranks) and forwarded on. The
 * left-to-right stream carries L = n/2 blocks, the right-to-left one
 * R = (n-1)/2; at n = 2 the one neighbour gets one message. The header step
 * is (segment << 8 | s), bit 15 set for the leftward stream. */
static uint8_t *relay_slot(uint8_t *base, size_t bytes, int p, int r, int skip_self)
{
	return base + (size_t)(skip_self && p > r ? p - 1 : p) * bytes;
}

static int relay_post(sc_comm_t *c, const sc_hdr_t *h0, int seg, const uint8_t *own,
                      uint8_t *base, size_t bytes, int skip_self)
{
	int n = c->world, r = c->rank, L = n / 2, R = (n - 1) / 2;
	sc_xfer_t *from_l = NULL, *from_r = NULL, *so;

	for (int s = 1; s <= L; s++) {
		sc_hdr_t h = *h0;
		h.step = (uint16_t)(((unsigned)(seg & 0x7f) << 8) | (unsigned)s);
		/* rightward: block r-s+1 out (own first), block r-s in from the left */
		so = sc_op_send(c, c->right, &h,
		                s == 1 ? own : relay_slot(base, bytes, mod(r - s + 1, n), r, skip_self),
		                bytes);
		if (!so)
			return sc_fail(c, -ENOTCONN, "no link to rank %d", c->right);
		so->after = from_l;
		from_l = sc_op_recv(c, c->left, &h, relay_slot(base, bytes, mod(r - s, n), r, skip_self),
		                    bytes);
		if (!from_l)
			return sc_fail(c, -ENOTCONN, "no link to rank %d", c->left);
		if (s > R)
			continue; /* even n: the last step goes rightwards only */
		/* leftward: block r+s-1 out, block r+s in from the right */
		h.step |= 0x8000;
		so = sc_op_send(c, c->left, &h,
		                s == 1 ? own : relay_slot(base, bytes, mod(r + s - 1, n), r, skip_self),
		                bytes);
		if (!so)
			return sc_fail(c, -ENOTCONN, "no link to rank %d", c->left);
		so->after = from_r;
		from_r = sc_op_recv(c, c->right, &h, relay_slot(base, bytes, mod(r + s, n), r, skip_self),
		                    bytes);
		if (!from_r)
			return sc_fail(c, -ENOTCONN, "no link to rank %d", c->right);
	}
	return 0;
}

static int relay_allreduce(sc_comm_t *c, int coll, const uint8_t *send, uint8_t *recv,
                           size_t count, sc_dtype_t dt, sc_op_t op)
{
	int n = c->world, r = c->rank, rc;
	size_t es = sc_dtype_size(dt);
	size_t seg_el = ONESHOT_SEG / es, off = 0;
	int seg = 0;
	const void *srcs[SC_MAX_WORLD];

	if ((rc = sc_ops_reserve(c, 2 * n)) < 0)
		return rc;
	do {
		size_t nel = count - off < seg_el ? count - off : seg_el;
		size_t bytes = nel * es;
		sc_hdr_t h = mkhdr(c, coll, count, dt, op, SC_ALGO_RELAY, 0);
		if ((rc = sc_tmp_reserve(c, (size_t)(n - 1) * bytes + 1)) < 0)
			return rc;
		if ((rc = relay_post(c, &h, seg, send + off * es, c->tmp, bytes, 1)) < 0 ||
		    (rc = sc_engine_run(c)) < 0)
			return rc;
		for (int p = 0; p < n; p++)
			srcs[p] = p == r ? (const void *)(send + off * es)
			                 : (const void *)(c->tmp + (size_t)(p < r ? p : p - 1) * bytes);
		sc_reduce(recv + off * es, srcs, n, nel, dt, op);
		off += nel;
		seg++;
	} while (off < count);
	return 0;
}

int sc_doubling_ok(const sc_comm_t *c)
{
	return c && c->world >= 2 && (c->world & (c->world - 1)) == 0 &&
	       (c->oneshot_ok || c->world <= 4);
}

static int doubling_allreduce(sc_comm_t *c, int coll, const uint8_t *send, uint8_t *recv,
                              size_t count, sc_dtype_t dt, sc_op_t op)
{
	int n = c->world, r = c->rank, rc, seg = 0;
	size_t es = sc_dtype_size(dt), seg_el = ONESHOT_SEG / es, off = 0;

	if ((rc = sc_ops_reserve(c, 2)) < 0)
		return rc;
	if (recv != send && count)
		memmove(recv, send, count * es);
	do {
		size_t nel = count - off < seg_el ? count - off : seg_el, bytes = nel * es;
		uint8_t *mine = recv + off * es;
		if ((rc = sc_tmp_reserve(c, bytes + 1)) < 0)
			return rc;
		for (int mask = 1, k = 0; mask < n; mask <<= 1, k++) {
			int p = r ^ (2 * mask - 1);
			sc_hdr_t h = mkhdr(c, coll, count, dt, op, SC_ALGO_DOUBLING,
			                   (int)(((unsigned)(seg & 0xff) << 8) | (unsigned)k));
			if (!sc_op_send(c, p, &h, mine, bytes) || !sc_op_recv(c, p, &h, c->tmp, bytes))
				return sc_fail(c, -ENOTCONN, "no link to rank %d", p);
			if ((rc = sc_engine_run(c)) < 0)
				return rc;
			/* the lower group's partial first: both partners get the same bits */
			if (r < p)
				sc_reduce2(mine, mine, c->tmp, nel, dt, op);
			else
				sc_reduce2(mine, c->tmp, mine, nel, dt, op);
		}
		off += nel;
		seg++;
	} while (off < count);
	return 0;
}

typedef struct {
	const uint8_t *own;   /* this rank's input for the chunk */
	uint8_t *out;         /* where the reduced chunk goes */
	const uint8_t *in;    /* received partial */
	size_t es, done_el;
	sc_dtype_t dt;
	sc_op_t op;
} rs_ctx_t;

static void rs_on_data(sc_xfer_t *o, size_t avail)
{
	rs_ctx_t *x = o->ctx;
	size_t upto = avail / x->es;
	if (upto > x->done_el) {
		size_t n = upto - x->done_el, b = x->done_el * x->es;
		sc_reduce2(x->out + b, x->own + b, x->in + b, n, x->dt, x->op);
		x->done_el = upto;
	}
}

static int ring_allreduce(sc_comm_t *c, int coll, const uint8_t *send, uint8_t *recv,
                          size_t count, sc_dtype_t dt, sc_op_t op)
{
	int n = c->world, r = c->rank, rc;
	size_t es = sc_dtype_size(dt);
	size_t maxchunk = chunk_len(count, n, 0) * es;
	rs_ctx_t x;

	if ((rc = sc_ops_reserve(c, 2)) < 0 || (rc = sc_tmp_reserve(c, maxchunk + 1)) < 0)
		return rc;
	/* reduce-scatter: step s sends chunk r-s, receives chunk r-s-1 */
	for (int s = 0; s < n - 1; s++) {
		int sc = mod(r - s, n), rcv = mod(r - s - 1, n);
		sc_hdr_t h = mkhdr(c, coll, count, dt, op, SC_ALGO_RING, s);
		const uint8_t *sb = (s == 0 ? send : recv) + chunk_start(count, n, sc) * es;
		sc_xfer_t *ro;
		if (!sc_op_send(c, c->right, &h, sb, chunk_len(count, n, sc) * es))
			return sc_fail(c, -ENOTCONN, "no link to rank %d", c->right);
		ro = sc_op_recv(c, c->left, &h, c->tmp, chunk_len(count, n, rcv) * es);
		if (!ro)
			return sc_fail(c, -ENOTCONN, "no link to rank %d", c->left);
		x.own = send + chunk_start(count, n, rcv) * es;
		x.out = recv + chunk_start(count, n, rcv) * es;
		x.in = c->tmp;
		x.es = es;
		x.done_el = 0;
		x.dt = dt;
		x.op = op;
		ro->ctx = &x;
		ro->on_data = rs_on_data;
		ro->gran = REDUCE_GRAN;
		if ((rc = sc_engine_run(c)) < 0)
			return rc;
	}
	/* all-gather: step s sends chunk r+1-s, receives chunk r-s in place */
	for (int s = 0; s < n - 1; s++) {
		int sc = mod(r + 1 - s, n), rcv = mod(r - s, n);
		sc_hdr_t h = mkhdr(c, coll, count, dt, op, SC_ALGO_RING, n - 1 + s);
		if (!sc_op_send(c, c->right, &h, recv + chunk_start(count, n, sc) * es,
		                chunk_len(count, n, sc) * es) ||
		    !sc_op_recv(c, c->left, &h, recv + chunk_start(count, n, rcv) * es,
		                chunk_len(count, n, rcv) * es))
			return sc_fail(c, -ENOTCONN, "no link to a ring neighbour");
		if ((rc = sc_engine_run(c)) < 0)
			return rc;
	}
	return 0;
}

static int check_args(sc_comm_t *c, const void *send, void *recv, size_t count, sc_dtype_t dt,
                      sc_op_t op)
{
	if (!c)
		return -EINVAL;
	if (c->error)
		return -SC_EBROKEN;
	if ((unsigned)dt >= SC_DTYPE_COUNT || (unsigned)op >= SC_OP_COUNT)
		return -EINVAL;
	if (count && (!send || !recv))
		return -EINVAL;
	if (count > SC_MAX_PAYLOAD / 8)
		return -EINVAL;
	return 0;
}

/* What runs for a requested algorithm on this communicator (every rank
 * agrees: oneshot_ok and the world size are agreed). */
static sc_algo_t runnable(const sc_comm_t *c, sc_algo_t a)
{
	if (a == SC_ALGO_DOUBLING && !sc_doubling_ok(c))
		a = SC_ALGO_ONESHOT;
	if (a == SC_ALGO_ONESHOT && !c->oneshot_ok)
		a = SC_ALGO_RELAY; /* the self-test turned it off */
	return a;
}

sc_algo_t sc_comm_pick_algo(const sc_comm_t *c, size_t bytes)
{
	sc_algo_t a;

	if (!c)
		return SC_ALGO_RING;
	a = c->opt.algo;
	if ((unsigned)a >= SC_ALGO_COUNT || a == SC_ALGO_AUTO)
		a = bytes <= c->oneshot_max ? c->small_algo : SC_ALGO_RING;
	return runnable(c, a);
}

int sc_allreduce_impl(sc_comm_t *c, int coll, const void *send, void *recv, size_t count,
                      sc_dtype_t dt, sc_op_t op, sc_algo_t algo)
{
	int rc = check_args(c, send, recv, count, dt, op);
	size_t bytes;

	if (rc < 0)
		return rc;
	bytes = count * sc_dtype_size(dt);
	if (c->world == 1) {
		if (count && send != recv)
			memmove(recv, send, bytes);
		return 0;
	}
	if (algo == SC_ALGO_AUTO)
		algo = sc_comm_pick_algo(c, bytes);
	algo = runnable(c, algo);
	c->seq++;
	if (algo == SC_ALGO_ONESHOT)
		return oneshot_allreduce(c, coll, send, recv, count, dt, op);
	if (algo == SC_ALGO_RELAY)
		return relay_allreduce(c, coll, send, recv, count, dt, op);
	if (algo == SC_ALGO_DOUBLING)
		return doubling_allreduce(c, coll, send, recv, count, dt, op);
	return ring_allreduce(c, coll, send, recv, count, dt, op);
}

int sc_allreduce(sc_comm_t *c, const void *send, void *recv, size_t count, sc_dtype_t dt,
                 sc_op_t op)
{
	return sc_allreduce_impl(c, SC_COLL_ALLREDUCE, send, recv, count, dt, op, SC_ALGO_AUTO);
}

int sc_allreduce_algo(sc_comm_t *c, const void *send, void *recv, size_t count, sc_dtype_t dt,
                      sc_op_t op, sc_algo_t algo)
{
	if ((unsigned)algo >= SC_ALGO_COUNT)
		return -EINVAL;
	return sc_allreduce_impl(c, SC_COLL_ALLREDUCE, send, recv, count, dt, op, algo);
}

int sc_allgather_impl(sc_comm_t *c, int coll, const void *send, void *recv, size_t count,
                      sc_dtype_t dt, sc_algo_t algo)
{
	int rc = check_args(c, send, recv, count, dt, SC_SUM), n, r;
	size_t bytes;
	uint8_t *out = recv;

	if (rc < 0)
		return rc;
	n = c->world;
	r = c->rank;
	bytes = count * sc_dtype_size(dt);
	if (bytes && out + (size_t)r * bytes != send)
		memmove(out + (size_t)r * bytes, send, bytes);
	if (n == 1)
		return 0;
	if (algo == SC_ALGO_AUTO)
		algo = sc_comm_pick_algo(c, bytes * (size_t)n);
	if (algo == SC_ALGO_DOUBLING)
		algo = SC_ALGO_ONESHOT; /* all-gather has no doubling of its own */
	algo = runnable(c, algo);
	c->seq++;
	if ((rc = sc_ops_reserve(c, 2 * n)) < 0)
		return rc;
	if (algo == SC_ALGO_RELAY) {
		sc_hdr_t h = mkhdr(c, coll, count, dt, SC_SUM, SC_ALGO_RELAY, 0);
		if ((rc = relay_post(c, &h, 0, out + (size_t)r * bytes, out, bytes, 0)) < 0)
			return rc;
		return sc_engine_run(c);
	}
	if (algo == SC_ALGO_ONESHOT) {
		sc_hdr_t h = mkhdr(c, coll, count, dt, SC_SUM, SC_ALGO_ONESHOT, 0);
		for (int k = 1; k < n; k++) {
			int p = (r + k) % n;
			if (!sc_op_send(c, p, &h, out + (size_t)r * bytes, bytes))
				return sc_fail(c, -ENOTCONN, "no link to rank %d", p);
		}
		for (int k = 1; k < n; k++) {
			int p = (r - k + n) % n;
			if (!sc_op_recv(c, p, &h, out + (size_t)p * bytes, bytes))
				return sc_fail(c, -ENOTCONN, "no link to rank %d", p);
		}
		return sc_engine_run(c);
	}
	for (int s = 0; s < n - 1; s++) {
		int sb = mod(r - s, n), rb = mod(r - s - 1, n);
		sc_hdr_t h = mkhdr(c, coll, count, dt, SC_SUM, SC_ALGO_RING, s);
		if (!sc_op_send(c, c->right, &h, out + (size_t)sb * bytes, bytes) ||
		    !sc_op_recv(c, c->left, &h, out + (size_t)rb * bytes, bytes))
			return sc_fail(c, -ENOTCONN, "no link to a ring neighbour");
		if ((rc = sc_engine_run(c)) < 0)
			return rc;
	}
	return 0;
}

int sc_allgather(sc_comm_t *c, const void *send, void *recv, size_t count, sc_dtype_t dt)
{
	return sc_allgather_impl(c, SC_COLL_ALLGATHER, send, recv, count, dt, SC_ALGO_AUTO);
}

int sc_broadcast(sc_comm_t *c, void *buf, size_t count, sc_dtype_t dt, int root)
{
	int rc = check_args(c, buf, buf, count, dt, SC_SUM), n, r;
	size_t bytes, es;
	uint8_t *b = buf;

	if (rc < 0)
		return rc;
	n = c->world;
	r = c->rank;
	if (root < 0 || root >= n)
		return -EINVAL;
	if (n == 1)
		return 0;
	es = sc_dtype_size(dt);
	bytes = count * es;
	c->seq++;
	if (c->oneshot_ok && (sc_comm_pick_algo(c, bytes) == SC_ALGO_ONESHOT ||
	                      sc_comm_pick_algo(c, bytes) == SC_ALGO_DOUBLING)) {
		/* root sends to everyone; root rank in `step` so a wrong root is caught */
		sc_hdr_t h = mkhdr(c, SC_COLL_BCAST, count, dt, SC_SUM, SC_ALGO_ONESHOT, root);
		if ((rc = sc_ops_reserve(c, n)) < 0)
			return rc;
		if (r == root) {
			for (int k = 1; k < n; k++)
				if (!sc_op_send(c, (r + k) % n, &h, b, bytes))
					return sc_fail(c, -ENOTCONN, "no link to rank %d", (r + k) % n);
		} else if (!sc_op_recv(c, root, &h, b, bytes)) {
			return sc_fail(c, -ENOTCONN, "no link to rank %d", root);
		}
		return sc_engine_run(c);
	}
	{
		/* pipeline along the ring root -> root+1 -> ... in segments */
		size_t seg = BCAST_SEG / es * es, nseg = bytes ? (bytes + seg - 1) / seg : 1;
		int d = mod(r - root, n);
		if ((rc = sc_ops_reserve(c, (int)(2 * nseg))) < 0)
			return rc;
		for (size_t k = 0; k < nseg; k++) {
			size_t off = k * seg, len = bytes - off < seg ? bytes - off : seg;
			/* step: distance of the sender from root, and the segment */
			sc_hdr_t h = mkhdr(c, SC_COLL_BCAST, count, dt, SC_SUM, SC_ALGO_RING,
			                   (int)((k << 8) | (size_t)root) & 0xffff);
			sc_xfer_t *ro = NULL;
			if (bytes == 0)
				len = 0;
			if (d > 0) {
				ro = sc_op_recv(c, c->left, &h, b + off, len);
				if (!ro)
					return sc_fail(c, -ENOTCONN, "no link to rank %d", c->left);
			}
			if (d < n - 1) {
				sc_xfer_t *so = sc_op_send(c, c->right, &h, b + off, len);
				if (!so)
					return sc_fail(c, -ENOTCONN, "no link to rank %d", c->right);
				so->after = ro;
			}
		}
		return sc_engine_run(c);
	}
}

int sc_barrier(sc_comm_t *c)
{
	int32_t v = 0;
	return sc_allreduce_impl(c, SC_COLL_BARRIER, &v, &v, 1, SC_I32, SC_SUM, SC_ALGO_AUTO);
}

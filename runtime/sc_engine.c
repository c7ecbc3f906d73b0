/* sc_engine.c - the progress loop.
 *
 * A collective step posts send and receive operations (header + payload) on
 * links; sc_engine_run advances them all at once (so large sends never
 * deadlock against large receives), spins for a bounded time when nothing
 * moves, then sleeps in poll(). No progress for timeout_ms fails the
 * communicator. On any failure every peer is sent an ABORT (or sees EOF), so
 * an error on one rank becomes an error on all of them instead of a hang. */
#include "sc_internal.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t sc_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int sc_fail(sc_comm_t *c, int code, const char *fmt, ...)
{
	va_list ap;

	if (c->error)
		return c->error;
	c->error = code ? code : -EIO;
	va_start(ap, fmt);
	vsnprintf(c->errmsg, sizeof(c->errmsg), fmt, ap);
	va_end(ap);
	for (int i = 0; i < c->world; i++)
		if (c->links && c->links[i])
			c->links[i]->ops->abort(c->links[i], c->error, c->rank);
	return c->error;
}

int sc_ops_reserve(sc_comm_t *c, int n)
{
	if (c->nops + n <= c->ops_cap)
		return 0;
	if (c->nops > 0)
		return -EINVAL; /* pointers into ops are live: reserve before adding */
	{
		sc_xfer_t *o = realloc(c->ops, (size_t)n * sizeof(*o));
		if (!o)
			return -ENOMEM;
		c->ops = o;
		c->ops_cap = n;
	}
	return 0;
}

int sc_tmp_reserve(sc_comm_t *c, size_t bytes)
{
	if (bytes <= c->tmp_cap)
		return 0;
	{
		size_t cap = bytes < 65536 ? 65536 : bytes;
		uint8_t *t = realloc(c->tmp, cap);
		if (!t)
			return -ENOMEM;
		c->tmp = t;
		c->tmp_cap = cap;
	}
	return 0;
}

static sc_xfer_t *op_add(sc_comm_t *c, int peer, int is_send, const sc_hdr_t *h, void *buf,
                       size_t len)
{
	sc_xfer_t *o;

	if (c->nops >= c->ops_cap || peer < 0 || peer >= c->world || !c->links[peer])
		return NULL;
	o = &c->ops[c->nops++];
	memset(o, 0, sizeof(*o));
	o->link = c->links[peer];
	o->is_send = is_send;
	o->hdr = *h;
	o->hdr.len = len;
	o->buf = buf;
	o->len = len;
	return o;
}

sc_xfer_t *sc_op_send(sc_comm_t *c, int peer, const sc_hdr_t *h, const void *buf, size_t len)
{
	sc_xfer_t *o = op_add(c, peer, 1, h, (void *)(uintptr_t)buf, len);
	if (o) {
		o->hdr.kind = SC_MSG_DATA;
		o->hdr.src = (uint16_t)c->rank;
		sc_hdr_encode(&o->hdr, o->hdrbuf);
	}
	return o;
}

sc_xfer_t *sc_op_recv(sc_comm_t *c, int peer, const sc_hdr_t *want, void *buf, size_t len)
{
	sc_xfer_t *o = op_add(c, peer, 0, want, buf, len);
	if (o) {
		o->hdr.kind = SC_MSG_DATA;
		o->hdr.src = (uint16_t)peer;
	}
	return o;
}

static void q_push(sc_xfer_t **head, sc_xfer_t **tail, sc_xfer_t *o)
{
	o->next = NULL;
	if (*tail)
		(*tail)->next = o;
	else
		*head = o;
	*tail = o;
}

static void q_pop(sc_xfer_t **head, sc_xfer_t **tail)
{
	*head = (*head)->next;
	if (!*head)
		*tail = NULL;
}

/* >0 progressed, 0 blocked, <0 error */
static int progress_send(sc_comm_t *c, sc_xfer_t *o)
{
	int moved = 0;
	while (!o->done) {
		struct iovec iov[2];
		int n = 0;
		ssize_t w;
		if (o->hdr_done < SC_HDR_LEN) {
			iov[n].iov_base = o->hdrbuf + o->hdr_done;
			iov[n++].iov_len = SC_HDR_LEN - o->hdr_done;
		}
		if (o->off < o->len) {
			iov[n].iov_base = o->buf + o->off;
			iov[n++].iov_len = o->len - o->off;
		}
		w = o->link->ops->sendv(o->link, iov, n);
		if (w == -EAGAIN)
			break;
		if (w <= -1000)
			return sc_fail(c, (int)w, "rank %d aborted the collective: %s", o->link->peer,
			               sc_strerror((int)w));
		if (w < 0)
			return sc_fail(c, (int)w, "sending to rank %d failed: %s", o->link->peer,
			               strerror((int)-w));
		moved = 1;
		if (o->hdr_done < SC_HDR_LEN) {
			size_t h = SC_HDR_LEN - o->hdr_done;
			if ((size_t)w < h) {
				o->hdr_done += (size_t)w;
				w = 0;
			} else {
				o->hdr_done = SC_HDR_LEN;
				w -= (ssize_t)h;
			}
		}
		o->off += (size_t)w;
		o->link->send_dirty = 1;
		if (o->hdr_done == SC_HDR_LEN && o->off == o->len) {
			o->done = 1;
			o->link->send_dirty = 0;
		}
	}
	return moved;
}

static int got_header(sc_comm_t *c, sc_xfer_t *o)
{
	sc_hdr_t h;
	const char *why = NULL;
	int rc = sc_hdr_decode(o->hdrbuf, SC_HDR_LEN, &h, &why);

	if (rc < 0)
		return sc_fail(c, -SC_EPEER, "bad message from rank %d: %s", o->link->peer, why);
	if (h.kind == SC_MSG_ABORT) {
		int code = h.count > 0 && h.count < 100000 ? -(int)h.count : -SC_EABORTED;
		return sc_fail(c, code, "rank %d aborted the collective: %s", (int)h.src,
		               sc_strerror(code));
	}
	rc = sc_hdr_check(&h, &o->hdr, &why);
	if (rc < 0)
		return sc_fail(c, rc, "rank %d: %s (got %s count %llu %s/%s, want %s count %llu %s/%s)",
		               o->link->peer, why,
		               h.coll == SC_COLL_ALLREDUCE ? "allreduce" : "collective",
		               (unsigned long long)h.count, sc_dtype_name((sc_dtype_t)h.dtype),
		               sc_op_name((sc_op_t)h.op),
		               o->hdr.coll == SC_COLL_ALLREDUCE ? "allreduce" : "collective",
		               (unsigned long long)o->hdr.count,
		               sc_dtype_name((sc_dtype_t)o->hdr.dtype), sc_op_name((sc_op_t)o->hdr.op));
	return 0;
}

static int progress_recv(sc_comm_t *c, sc_xfer_t *o)
{
	int moved = 0;
	while (!o->done) {
		struct iovec iov[2];
		int n = 0;
		ssize_t r;
		int had_hdr = o->hdr_done == SC_HDR_LEN;
		if (!had_hdr) {
			iov[n].iov_base = o->hdrbuf + o->hdr_done;
			iov[n++].iov_len = SC_HDR_LEN - o->hdr_done;
		}
		/* The payload is read optimistically with the header: if the header
		 * turns out wrong the communicator fails anyway. */
		if (o->off < o->len) {
			iov[n].iov_base = o->buf + o->off;
			iov[n++].iov_len = o->len - o->off;
		}
		r = o->link->ops->recvv(o->link, iov, n);
		if (r == -EAGAIN)
			break;
		if (r < 0) {
			if (r == -ECONNRESET || r == -EPIPE)
				return sc_fail(c, -ECONNRESET,
				               "rank %d closed the connection (process died or aborted)",
				               o->link->peer);
			return sc_fail(c, (int)r, "receiving from rank %d failed: %s", o->link->peer,
			               strerror((int)-r));
		}
		moved = 1;
		if (!had_hdr) {
			size_t h = SC_HDR_LEN - o->hdr_done;
			if ((size_t)r < h) {
				o->hdr_done += (size_t)r;
				continue;
			}
			o->hdr_done = SC_HDR_LEN;
			r -= (ssize_t)h;
			if (got_header(c, o) < 0)
				return c->error;
		}
		o->off += (size_t)r;
		if (o->off == o->len)
			o->done = 1;
		if (o->on_data && (o->done || o->off - o->notified >= o->gran)) {
			o->on_data(o, o->off);
			o->notified = o->off;
		}
	}
	return moved;
}

static int link_ready(sc_xfer_t *o) { return !o->after || o->after->done; }

static void timeout_fail(sc_comm_t *c, sc_link_t **act, int nact)
{
	char who[160] = "";
	size_t wl = 0;
	for (int i = 0; i < nact && wl < sizeof(who) - 8; i++)
		if (act[i]->sq_head || act[i]->rq_head)
			wl += (size_t)snprintf(who + wl, sizeof(who) - wl, "%s%d", wl ? "," : "",
			                       act[i]->peer);
	sc_fail(c, -ETIMEDOUT,
	        "no progress for %d ms waiting for rank(s) %s (peer dead, stopped, or not "
	        "calling the same collective)",
	        c->opt.timeout_ms, who);
}

/* Each link keeps "may read"/"may write" flags: an operation that hits EAGAIN
 * clears its flag and only poll() sets it again, so a wait costs one poll()
 * instead of a failed recv() per link. While spinning, poll() is called with
 * a zero timeout (and the core is yielded when ranks outnumber cores). */
int sc_engine_run(sc_comm_t *c)
{
	sc_link_t *act[SC_MAX_WORLD];
	uint8_t may_r[SC_MAX_WORLD], may_w[SC_MAX_WORLD];
	int nact = 0, remaining = c->nops, rc = 0;
	uint64_t timeout_ns = (uint64_t)c->opt.timeout_ms * 1000000ull;
	uint64_t spin_ns = c->spin_us > 0 ? (uint64_t)c->spin_us * 1000ull : 0;
	uint64_t last = 0, idle_since = 0;

	if (c->error) {
		c->nops = 0;
		return -SC_EBROKEN;
	}
	c->stamp++;
	for (int i = 0; i < c->nops; i++) {
		sc_xfer_t *o = &c->ops[i];
		sc_link_t *l = o->link;
		if (o->is_send)
			q_push(&l->sq_head, &l->sq_tail, o);
		else
			q_push(&l->rq_head, &l->rq_tail, o);
		if (l->active_stamp != c->stamp) {
			l->active_stamp = c->stamp;
			/* reads start with one poll() instead of a recv() per link */
			may_r[nact] = 0;
			may_w[nact] = 1;
			act[nact++] = l;
		}
	}

	while (remaining > 0) {
		int moved = 0;
		for (int i = 0; i < nact; i++) {
			sc_link_t *l = act[i];
			while (may_w[i] && l->sq_head && link_ready(l->sq_head)) {
				int m = progress_send(c, l->sq_head);
				if (m < 0) {
					rc = m;
					goto out;
				}
				moved |= m;
				if (!l->sq_head->done) {
					may_w[i] = 0;
					break;
				}
				q_pop(&l->sq_head, &l->sq_tail);
				remaining--;
				moved = 1;
			}
			while (may_r[i] && l->rq_head) {
				int m = progress_recv(c, l->rq_head);
				if (m < 0) {
					rc = m;
					goto out;
				}
				moved |= m;
				if (!l->rq_head->done) {
					may_r[i] = 0;
					break;
				}
				q_pop(&l->rq_head, &l->rq_tail);
				remaining--;
				moved = 1;
			}
		}
		if (remaining == 0)
			break;
		if (moved) {
			idle_since = 0;
			last = 0;
			continue;
		}
		{
			struct pollfd pf[2 * SC_MAX_WORLD];
			int cnt[SC_MAX_WORLD], np = 0, busy = 0, prc, wait_ms = 1000;
			uint64_t now = sc_now_ns();
			if (!idle_since)
				idle_since = now;
			if (!last)
				last = now;
			if (timeout_ns && now - last > timeout_ns) {
				timeout_fail(c, act, nact);
				rc = c->error;
				goto out;
			}
			for (int i = 0; i < nact; i++) {
				sc_link_t *l = act[i];
				int want_s = l->sq_head && link_ready(l->sq_head);
				int want_r = l->rq_head != NULL;
				int k;
				cnt[i] = 0;
				if (!want_s && !want_r)
					continue;
				k = l->ops->prepare_poll(l, pf + np, want_s, want_r);
				if (k < 0) {
					may_r[i] = may_w[i] = 1;
					busy = 1;
					continue;
				}
				cnt[i] = k;
				np += k;
			}
			if (busy)
				continue;
			if (now - idle_since < spin_ns) {
				if (c->spin_yield)
					sched_yield(); /* more ranks than cores: let the peer run */
				wait_ms = 0;
			} else if (timeout_ns) {
				uint64_t dl = last + timeout_ns;
				int left_ms = dl > now ? (int)((dl - now) / 1000000ull) + 1 : 0;
				if (left_ms < wait_ms)
					wait_ms = left_ms;
			}
			prc = poll(pf, (nfds_t)np, wait_ms);
			if (prc < 0 && errno != EINTR) {
				rc = sc_fail(c, -errno, "poll failed: %s", strerror(errno));
				goto out;
			}
			if (prc > 0) {
				int base = 0;
				for (int i = 0; i < nact; i++) {
					for (int j = 0; j < cnt[i]; j++) {
						short re = pf[base + j].revents;
						if (re & (POLLIN | POLLHUP | POLLERR))
							may_r[i] = 1;
						if (re & (POLLOUT | POLLHUP | POLLERR))
							may_w[i] = 1;
					}
					if (cnt[i] > 1 && (pf[base].revents & POLLIN))
						may_r[i] = may_w[i] = 1; /* verbs completion event */
					if (cnt[i] && act[i]->ops->after_poll) {
						int e = act[i]->ops->after_poll(act[i], pf + base, cnt[i]);
						if (e < 0) {
							rc = sc_fail(c, e, "link to rank %d failed: %s",
							             act[i]->peer, sc_strerror(e));
							goto out;
						}
					}
					base += cnt[i];
				}
				if (wait_ms > 0)
					idle_since = 0;
			}
		}
	}
out:
	for (int i = 0; i < nact; i++) {
		act[i]->sq_head = act[i]->sq_tail = NULL;
		act[i]->rq_head = act[i]->rq_tail = NULL;
	}
	c->nops = 0;
	return rc;
}

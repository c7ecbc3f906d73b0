/* model_relay: the chain of data connections of `model push` (model_relay.h). */
#include "model_relay.h"

#include "conn.h"
#include "log.h"
#include "pki.h"
#include "proto.h"
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MR_PROGRESS_MS 200
#define MR_CHAIN_MAX 64
#define MR_SPARES (MR_WINDOW * MR_LANES) /* chunk buffers a push keeps for reuse */

struct mr_link;

struct mr_push {
	struct mr_push *next;
	struct mr_engine *e;
	char id[65];
	struct mr_member *chain;
	size_t n, self;
	const struct mm_manifest *m;
	char root[PATH_MAX], src[PATH_MAX];
	struct mr_cbs cbs;
	void *data;
	size_t test_corrupt;
	unsigned up_wait_ms;

	/* this node: what it holds (avail), what it lacks */
	struct mm_have have;
	uint32_t *file_left;      /* chunks still missing per file */
	size_t missing;
	uint64_t need_bytes, got_bytes;
	uint64_t chunks_written, chunks_bad;
	uint64_t by_lane[MR_LANES]; /* chunks written, per link of the hop they came over */
	uint8_t *bad_count;       /* per chunk, from the current upstream */
	uint8_t *bad_from;        /* per chunk: 1 + the chain place of who sent it bad */
	/* chunks given up on: the upstream sent MR_BAD_MAX bad copies of each
	 * (mp_bad give_up); this node ends without them, naming that upstream */
	uint64_t *gave_up;
	char culprit[40];         /* the first upstream that did so */
	json_t *corrupt;          /* [{"path", "chunk"}]: those chunks (at most MR_REPAIRS_MAX) */
	/* chunks this node holds but whose copy failed its hash when read to be
	 * forwarded (a damaged disk): asked again from the upstream (mp_want),
	 * written back over the damaged copy and forwarded from memory */
	uint64_t *want;
	size_t wanting;
	uint8_t *want_count;      /* per chunk: mp_want sent to the upstream */
	uint8_t *asked;           /* per chunk: mp_want taken from the downstream */
	json_t *repairs;          /* [{"path", "chunk", "problem", "bad_from"?, "from"}] */
	bool up_ended;            /* no more chunks will come */
	char up_msg[200];
	struct mr_link *up;
	uv_timer_t up_timer;
	bool timer_on;
	uint64_t progress_ms;

	/* the downstream being served: its first link, and more over the lanes */
	struct mr_link *down;
	struct mr_link *lane[MR_LANES];
	size_t down_idx;          /* its place in the chain (n: none left) */
	uint64_t *need_down, *sent;
	size_t inflight;          /* chunks sent and not acknowledged, on all links */
	bool lanes_failed;        /* the next member's fabric address did not answer */
	size_t hot_chunk;         /* while hot_buf: that chunk, verified, in memory */
	uint8_t *hot_buf;         /* (a check's buffer, given back after the pump) */
	size_t scan;              /* chunks below it are sent or not needed */
	bool down_ready, end_sent;

	json_t *report;           /* downstream nodes' reports */
	bool done;
	bool freed;

	/* the permission, sent down in each hello */
	char *ticket;
	int64_t expires_at;
	/* the manifest as text, sent down after each hello */
	char *mtext;
	size_t mtext_len, mtext_got;
	/* a push this node learnt of from its upstream's hello (mr_engine_accept):
	 * the model's name the ticket signs (the manifest must bear it), and the
	 * member that announced it (MR_PUSHES_PER_PEER) */
	bool auto_push;
	char name[MM_NAME_MAX + 1];
	char announcer[40];
	struct mm_manifest *m_owned;
	int prep;                 /* PREP_*: not yet taking chunks */
	uv_work_t work;
	bool work_running, free_after_work;
	int work_rc;
	char work_err[256];

	/* chunks being checked (and written) in worker threads: their buffers,
	 * the push's end waits for them (push_finish) */
	size_t checking;
	uint8_t *chk;             /* per chunk: copies of it being checked */
	bool finish_deferred;
	int finish_status;
	uint8_t *spare[MR_SPARES]; /* chunk buffers to reuse */
	size_t nspare;
};

enum { PREP_NONE, PREP_MANIFEST, PREP_WORK, PREP_DOWN };

/* A chunk that came in whole, checked against the manifest's hash (and, when
 * this node lacked it, written to the store) in a worker thread; the loop
 * thread then counts it, acknowledges it and forwards it from memory. */
struct mr_check {
	uv_work_t work;
	struct mr_push *p;
	struct mr_link *l; /* NULL once the link it came over closed */
	size_t chunk;
	uint8_t *buf;
	uint32_t len;
	int lane;
	bool fresh; /* this node lacked it when it came: checked and written */
	int rc;
};

enum { LINK_UP, LINK_DOWN }; /* LINK_UP: the peer is our upstream (we receive) */

struct mr_link {
	struct mr_link *next;
	struct mr_engine *e;
	struct mr_push *p;
	conn *c;
	int dir;
	size_t peer_idx;
	char peer_id[64];
	bool hello;
	bool got_done;
	bool adopted;    /* tests: a plain connection taken as peer_id's */
	int lane;        /* 0: a hop's first link; k: its lane k (pieces only) */
	bool via_lane;   /* a first link dialled to the member's fabric address */
	/* receiving: the chunk being assembled from this link's pieces */
	uint8_t *asm_buf;
	size_t asm_chunk;
	uint32_t asm_got, asm_len;
	bool asm_on;
	/* sending: the chunks sent over this link and not acknowledged */
	size_t fly[MR_WINDOW];
	size_t nfly;
	/* its chunks in worker threads: a closed link is freed after them */
	unsigned checks;
	bool dead;
	/* when it was accepted (MR_HELLO_MS), last received a frame (MR_IDLE_MS)
	 * and last sent mp_keepalive; shut: closed by this node, not yet gone */
	uint64_t born_ms, rx_ms, tx_ms;
	bool shut;
};

struct mr_engine {
	uv_loop_t *loop;
	SSL_CTX *srv, *cli;
	char self_id[40];
	uv_tcp_t lst;
	bool listening;
	struct mr_push *pushes;
	struct mr_link *links;
	bool accept;              /* pushes announced by an upstream's hello */
	char store_root[PATH_MAX];
	struct mr_cbs inc_cbs;
	void *inc_data;
	uint64_t test_avail;      /* tests: free bytes this node claims (0: statvfs) */
	size_t test_corrupt;      /* tests: chunk test_corrupt - 1 is always sent corrupted */
	mr_verify_fn verify;
	void *verify_data;
	/* the hello deadline, idle links, keepalives (MR_HELLO_MS, MR_IDLE_MS,
	 * MR_KEEPALIVE_MS unless a test set others) */
	uv_timer_t sweep;
	unsigned hello_ms, idle_ms, keepalive_ms;
	unsigned handles; /* listener, links, timers still open */
	bool closing;
};

static void engine_unref(struct mr_engine *e)
{
	if (--e->handles == 0 && e->closing)
		free(e);
}

/* --- helpers --- */

static char *b64(const uint8_t *data, size_t len)
{
	char *s = malloc(4 * ((len + 2) / 3) + 1);
	if (s)
		EVP_EncodeBlock((unsigned char *)s, data, (int)len);
	return s;
}

/* Decode into out (at most max bytes); -1 on junk or overflow. */
static long unb64(const char *s, size_t slen, uint8_t *out, size_t max)
{
	if (slen % 4 || slen / 4 * 3 > max + 2)
		return -1;
	if (slen == 0)
		return 0;
	size_t pad = (s[slen - 1] == '=') + (slen > 1 && s[slen - 2] == '=');
	if (slen / 4 * 3 - pad > max)
		return -1;
	uint8_t *tmp = out;
	uint8_t *big = NULL;
	if (slen / 4 * 3 > max) { /* the padding bytes would overflow out */
		big = malloc(slen / 4 * 3);
		if (!big)
			return -1;
		tmp = big;
	}
	int k = EVP_DecodeBlock(tmp, (const unsigned char *)s, (int)slen);
	if (k < 0 || (size_t)k != slen / 4 * 3) {
		free(big);
		return -1;
	}
	if (big) {
		memcpy(out, big, (size_t)k - pad);
		free(big);
	}
	return (long)((size_t)k - pad);
}

static bool bit_get(const uint64_t *b, size_t i)
{
	return b[i / 64] >> (i % 64) & 1;
}

static void bit_set(uint64_t *b, size_t i, bool v)
{
	if (v)
		b[i / 64] |= 1ull << (i % 64);
	else
		b[i / 64] &= ~(1ull << (i % 64));
}

static json_t *msg(const char *type)
{
	return proto_msg(type, 0);
}

/* Answer with an error frame (with `node` when given: a refusal that names
 * this node, relayed up to the source) and close. */
static void link_refuse(conn *c, const char *code, const char *node, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void link_refuse(conn *c, const char *code, const char *node, const char *fmt, ...)
{
	char m[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m, sizeof m, fmt, ap);
	va_end(ap);
	struct mr_link *l = conn_data(c);
	l->shut = true;
	json_t *ef = proto_error(0, code, m);
	if (node)
		json_object_set_new(ef, "node", json_string(node));
	conn_send_new(c, ef);
	conn_close(c, 0);
}
#define send_error(c, code, ...) link_refuse(c, code, NULL, __VA_ARGS__)

static struct mr_push *find_push(struct mr_engine *e, const char *id)
{
	for (struct mr_push *p = e->pushes; p; p = p->next)
		if (!p->freed && !strcmp(p->id, id))
			return p;
	return NULL;
}

static void push_check_end(struct mr_push *p);
static void down_settled(struct mr_push *p);
static bool fly_remove(struct mr_link *l, size_t c);
static void prep_start(struct mr_push *p, struct mr_link *l);
static struct mr_push *push_new(struct mr_engine *e, const char *id, const struct mr_member *chain,
				size_t n, size_t self);
static void on_timer_closed(uv_handle_t *h);
static void down_connect(struct mr_push *p);
static void pump(struct mr_push *p);
static struct mr_link *link_new(struct mr_engine *e);
static void link_drop(struct mr_link *l);
static const struct conn_cbs link_cbs;

static json_t *own_report(struct mr_push *p)
{
	/* a push that ended before it was ready (refused, its upstream gone) */
	const char *status = p->prep ? "failed" : p->missing ? "incomplete" : "complete";
	json_t *lanes = json_array();
	for (int k = 0; k < MR_LANES; k++)
		json_array_append_new(lanes, json_integer((json_int_t)p->by_lane[k]));
	json_t *r = json_pack("{s:s, s:s, s:I, s:I, s:I, s:s, s:o, s:o}", "node",
			      p->chain[p->self].id, "status", status, "bytes_written",
			      (json_int_t)p->got_bytes, "chunks_written",
			      (json_int_t)p->chunks_written, "chunks_bad",
			      (json_int_t)p->chunks_bad, "message",
			      p->missing || p->prep ? p->up_msg : "",
			      "chunks_by_link", lanes, "repairs",
			      p->repairs ? json_incref(p->repairs) : json_array());
	if (r && p->culprit[0] && p->missing) {
		/* the upstream that sent bad copies of what this node still lacks */
		json_object_set_new(r, "bad_from", json_string(p->culprit));
		json_object_set(r, "corrupt_chunks", p->corrupt);
	}
	return r;
}

static void push_free(struct mr_push *p)
{
	mm_have_free(&p->have);
	free(p->file_left);
	free(p->bad_count);
	free(p->bad_from);
	free(p->gave_up);
	json_decref(p->corrupt);
	free(p->want);
	free(p->want_count);
	free(p->asked);
	json_decref(p->repairs);
	free(p->need_down);
	free(p->sent);
	free(p->chk);
	for (size_t i = 0; i < p->nspare; i++)
		free(p->spare[i]);
	free(p->chain);
	free(p->mtext);
	free(p->ticket);
	mm_free(p->m_owned);
	json_decref(p->report);
	struct mr_push **pp = &p->e->pushes;
	while (*pp && *pp != p)
		pp = &(*pp)->next;
	if (*pp)
		*pp = p->next;
	free(p);
}

static void on_timer_closed(uv_handle_t *h)
{
	struct mr_push *p = h->data;
	struct mr_engine *e = p->e;
	if (p->work_running) { /* its preparation still runs: freed when it ends */
		p->free_after_work = true;
		return;
	}
	push_free(p);
	engine_unref(e);
}

/* The push ends here: report (to the upstream too unless this node is
 * stopping: then its upstream sees the link go and serves the next member),
 * detach links, free once the timer closed. */
static void push_finish_now(struct mr_push *p, int status);

static void push_finish(struct mr_push *p, int status)
{
	if (p->done)
		return;
	p->done = true;
	if (p->checking) {
		/* chunks still in worker threads use the manifest and the store:
		 * the end (and on_done, after which the caller may free the
		 * manifest) waits for them; nothing new is taken meanwhile */
		p->finish_deferred = true;
		p->finish_status = status;
		return;
	}
	push_finish_now(p, status);
}

static void push_finish_now(struct mr_push *p, int status)
{
	json_t *all = json_array();
	if (p->self > 0)
		json_array_append_new(all, own_report(p));
	else if (status < 0 && status != -ENOSPC && status != -EACCES && status != -ECANCELED)
		json_array_append_new(all, json_pack("{s:s, s:s, s:i, s:i, s:i, s:s}", "node",
						     p->chain[0].id, "status", "failed",
						     "bytes_written", 0, "chunks_written", 0,
						     "chunks_bad", 0, "message", p->up_msg));
	json_array_extend(all, p->report);
	int st = status;
	if (st == 0) {
		size_t i;
		json_t *r;
		json_array_foreach(all, i, r)
			if (strcmp(json_string_value(json_object_get(r, "status")), "complete"))
				st = -EIO;
	}
	if (p->up && p->self > 0 && status != -ECANCELED && status != -ENOSPC && status != -EACCES &&
	    !p->prep) {
		json_t *d = msg("mp_done");
		json_object_set(d, "nodes", all);
		conn_send_new(p->up->c, d);
	}
	p->freed = true; /* not found any more: on_done may start a push of the same id */
	if (p->cbs.on_done && !p->e->closing)
		p->cbs.on_done(p->data, st, all);
	json_decref(all);
	for (struct mr_link *l = p->e->links; l; l = l->next)
		if (l->p == p) {
			conn_close(l->c, status == -ECANCELED ? -ECANCELED : 0);
			l->p = NULL;
		}
	p->up = p->down = NULL;
	p->freed = true;
	uv_timer_stop(&p->up_timer);
	uv_close((uv_handle_t *)&p->up_timer, on_timer_closed);
}

/* --- the receiving side (a link whose peer is our upstream) --- */

static void send_progress(struct mr_push *p, bool force)
{
	uint64_t now = util_now_ms();
	if (!p->up || (!force && now - p->progress_ms < MR_PROGRESS_MS))
		return;
	p->progress_ms = now;
	json_t *f = msg("mp_progress");
	json_object_set_new(f, "node", json_string(p->chain[p->self].id));
	json_object_set_new(f, "bytes", json_integer((json_int_t)p->got_bytes));
	json_object_set_new(f, "total", json_integer((json_int_t)p->need_bytes));
	conn_send_new(p->up->c, f);
}

static void send_need(struct mr_push *p, struct mr_link *l)
{
	size_t nb = (p->m->nchunks + 7) / 8;
	uint8_t *bytes = calloc(nb ? nb : 1, 1);
	for (size_t i = 0; bytes && i < p->m->nchunks; i++)
		if (!mm_have_test(&p->have, i))
			bytes[i / 8] |= (uint8_t)(1u << (i % 8));
	char *s = bytes ? b64(bytes, nb) : NULL;
	free(bytes);
	if (!s) {
		conn_close(l->c, -ENOMEM);
		return;
	}
	json_t *f = msg("mp_need");
	json_object_set_new(f, "node", json_string(p->chain[p->self].id));
	json_object_set_new(f, "bits", json_string(s));
	free(s);
	conn_send_new(l->c, f);
}

static void up_timeout(uv_timer_t *t)
{
	struct mr_push *p = t->data;
	p->timer_on = false;
	if (p->up || p->up_ended)
		return;
	p->up_ended = true;
	if (!p->up_msg[0])
		snprintf(p->up_msg, sizeof p->up_msg, "no upstream node connected within %u ms",
			 p->up_wait_ms);
	if (p->down_ready)
		pump(p);
	push_check_end(p);
}

/* No upstream to ask any more: the chunks this node could not read are not
 * sent (its downstream ends incomplete, naming them). */
static void wants_drop(struct mr_push *p)
{
	for (size_t c = 0; p->wanting && c < p->m->nchunks; c++)
		if (bit_get(p->want, c)) {
			bit_set(p->want, c, false);
			bit_set(p->sent, c, true);
			p->wanting--;
		}
}

static void up_lost(struct mr_push *p, const char *why)
{
	p->up = NULL;
	if (p->want && p->wanting) {
		wants_drop(p);
		pump(p);
	}
	/* its lanes go with it: the next upstream sends what they did not bring */
	for (struct mr_link *l = p->e->links; l; l = l->next)
		if (l->p == p && l->dir == LINK_UP && l->lane) {
			l->p = NULL;
			conn_close(l->c, 0);
		}
	if (p->up_ended || p->done)
		return;
	snprintf(p->up_msg, sizeof p->up_msg, "%s", why);
	if (p->prep == PREP_MANIFEST) {
		/* announced, its manifest not yet whole: nothing to wait for (a
		 * member that reconnects announces it again); its id is free now */
		log_info("model_push_abandoned", "push=%s reason=%s", p->id, log_q(why));
		push_finish(p, -ECONNABORTED);
		return;
	}
	/* the member before it reconnects here when it can: wait for that */
	p->timer_on = true;
	uv_timer_start(&p->up_timer, up_timeout, p->up_wait_ms, 0);
}

#define MR_REPAIRS_MAX 64 /* repairs named in a node's report (chunks_bad counts all) */

/* A chunk this node lacked a good copy of came in verified: say which, why
 * and from whom (the report, the log). */
static void repair_note(struct mr_push *p, size_t c, const char *problem, const char *bad_from,
			const char *from)
{
	const struct mm_file *f = mm_chunk_file(p->m, c, NULL, NULL);
	log_warn("model_chunk_repaired", "push=%s chunk=%zu path=%s problem=%s bad_from=%s from=%s",
		 p->id, c, log_q(f->path), log_q(problem), bad_from ? bad_from : "-", from);
	if (json_array_size(p->repairs) >= MR_REPAIRS_MAX)
		return;
	json_t *r = json_pack("{s:s, s:I, s:s, s:s}", "path", f->path, "chunk",
			      (json_int_t)(c - f->first_chunk), "problem", problem, "from", from);
	if (r && bad_from)
		json_object_set_new(r, "bad_from", json_string(bad_from));
	json_array_append_new(p->repairs, r);
}

/* Chunk buffers: a push reuses those its checks gave back. */
static uint8_t *buf_take(struct mr_push *p)
{
	return p->nspare ? p->spare[--p->nspare] : malloc(p->m->chunk_size);
}

static void buf_give(struct mr_push *p, uint8_t *b)
{
	/* at most what the windows of both lanes hold */
	if (!p->done && p->nspare < MR_SPARES &&
	    (uint64_t)(p->nspare + 1) * p->m->chunk_size <= (uint64_t)MR_WINDOW_BYTES * MR_LANES)
		p->spare[p->nspare++] = b;
	else
		free(b);
}

static void link_free(struct mr_link *l)
{
	struct mr_engine *e = l->e;
	free(l->asm_buf);
	free(l);
	engine_unref(e);
}

/* A chunk checked in a worker thread (k->rc: 0, or -EBADMSG for a hash
 * mismatch, or the store's error): count it, acknowledge it over l (NULL:
 * the link it came over closed meanwhile) and forward it from memory. */
static void chunk_checked(struct mr_push *p, struct mr_link *l, struct mr_check *k)
{
	size_t c = k->chunk;
	/* another copy of it came in first (resent over another link) */
	bool fresh = k->fresh && !mm_have_test(&p->have, c);
	int r = k->rc;
	if (k->fresh && !fresh && r != -EBADMSG)
		r = 0;
	if (r == -EBADMSG) {
		if (!l)
			return; /* its link closed: it is sent again anyway */
		p->chunks_bad++;
		p->bad_from[c] = (uint8_t)(l->peer_idx + 1);
		log_warn("model_chunk_bad", "push=%s chunk=%zu from=%s", p->id, c, l->peer_id);
		json_t *f = msg("mp_bad");
		json_object_set_new(f, "chunk", json_integer((json_int_t)c));
		if (p->bad_count[c] < UINT8_MAX)
			p->bad_count[c]++;
		if (p->bad_count[c] >= MR_BAD_MAX && bit_get(p->gave_up, c)) {
			json_object_set_new(f, "give_up", json_true()); /* again: not heard */
		} else if (p->bad_count[c] >= MR_BAD_MAX) {
			/* no good copy from this upstream: the rest still comes, this
			 * node ends without that chunk and names who sent it */
			bit_set(p->gave_up, c, true);
			const struct mm_file *bf = mm_chunk_file(p->m, c, NULL, NULL);
			if (!p->culprit[0]) {
				util_strlcpy(p->culprit, l->peer_id, sizeof p->culprit);
				snprintf(p->up_msg, sizeof p->up_msg,
					 "node %s sent chunk %zu corrupted %d times", l->peer_id, c,
					 MR_BAD_MAX);
			}
			if (json_array_size(p->corrupt) < MR_REPAIRS_MAX)
				json_array_append_new(p->corrupt,
						      json_pack("{s:s, s:I}", "path", bf->path, "chunk",
								(json_int_t)(c - bf->first_chunk)));
			log_warn("model_chunk_given_up", "push=%s chunk=%zu path=%s from=%s bad=%d",
				 p->id, c, log_q(bf->path), l->peer_id, MR_BAD_MAX);
			json_object_set_new(f, "give_up", json_true());
			conn_send_new(l->c, f);
			if (p->down_ready)
				pump(p); /* the downstream goes on without it */
			return;
		}
		conn_send_new(l->c, f);
		return;
	}
	if (fresh || r < 0) {
		if (r < 0) {
			snprintf(p->up_msg, sizeof p->up_msg, "writing chunk %zu: %s", c,
				 strerror(-r));
			if (l)
				send_error(l->c, "store", "%s", p->up_msg);
			p->up_ended = true;
			return;
		}
		if (bit_get(p->gave_up, c)) {
			/* given up on from one upstream, sent good by another: it
			 * goes on to the downstream after all */
			bit_set(p->gave_up, c, false);
			if (p->down_ready && !p->end_sent) {
				bit_set(p->sent, c, false);
				if (c < p->scan)
					p->scan = c;
			}
		}
		p->have.bits[c / 64] |= 1ull << (c % 64);
		p->have.count++;
		p->have.bytes += k->len;
		p->missing--;
		p->got_bytes += k->len;
		p->chunks_written++;
		p->by_lane[k->lane]++;
		const struct mm_file *f = mm_chunk_file(p->m, c, NULL, NULL);
		size_t fi = (size_t)(f - p->m->files);
		if (--p->file_left[fi] == 0 && (r = mm_store_finish_file(p->root, p->m, fi)) < 0) {
			snprintf(p->up_msg, sizeof p->up_msg, "%s: %s", f->path, strerror(-r));
			log_error("model_finish_failed", "push=%s file=%s err=%d", p->id,
				  log_q(f->path), r);
		}
		send_progress(p, p->missing == 0);
		if (p->cbs.on_progress)
			p->cbs.on_progress(p->data, p->chain[p->self].id, p->got_bytes,
					   p->need_bytes);
		if (p->done)
			return; /* the callback stopped this node */
	}
	const char *via = l ? l->peer_id : p->chain[p->self - 1].id;
	if (p->bad_from[c]) {
		repair_note(p, c, "corrupted on receipt", p->chain[p->bad_from[c] - 1].id, via);
		p->bad_from[c] = 0;
	}
	if (bit_get(p->want, c)) {
		/* this node's copy was damaged: the good one goes over it (same
		 * size, the manifest's mtime) and on to the downstream */
		bit_set(p->want, c, false);
		p->wanting--;
		int wr = mm_store_repair(p->root, p->m, c, k->buf, k->len);
		if (wr < 0)
			log_error("model_repair_failed", "push=%s chunk=%zu err=%d", p->id, c, wr);
		repair_note(p, c, wr < 0 ? "damaged on disk (not rewritten)" : "damaged on disk", NULL,
			    via);
		if (c < p->scan)
			p->scan = c;
	}
	if (l) {
		json_t *a = msg("mp_ack");
		json_object_set_new(a, "chunk", json_integer((json_int_t)c));
		conn_send_new(l->c, a);
	}
	if (p->down_ready) {
		/* the chunk just verified goes on from memory, not read back and
		 * hashed again */
		p->hot_chunk = c;
		p->hot_buf = k->buf;
		pump(p);
		p->hot_buf = NULL;
	}
}

/* A worker-thread job of p over link l ended (p->checking counts them): l
 * as the job may still use it, or NULL when it closed meanwhile (freed with
 * its last job) or was detached from the push (nothing more is sent on it). */
static struct mr_link *work_release(struct mr_push *p, struct mr_link *l)
{
	p->checking--;
	if (!l)
		return NULL;
	l->checks--;
	if (l->dead) {
		if (!l->checks)
			link_free(l);
		return NULL;
	}
	return l->p == p ? l : NULL;
}

/* After a job's result was taken: the push's end that waited for its jobs,
 * or an mp_end (or a lost upstream) that waited for the last of them. */
static void work_ended(struct mr_push *p)
{
	if (p->checking)
		return;
	if (p->done) {
		if (p->finish_deferred) {
			p->finish_deferred = false;
			push_finish_now(p, p->finish_status);
		}
		return;
	}
	if (p->up_ended && p->down_ready)
		pump(p);
	push_check_end(p);
}

/* In a worker thread: one SHA-256 per chunk; mm_store_put checks it before
 * it writes a byte, a chunk this node holds already is only checked. Reads
 * only what does not change while a check runs (the manifest, the root). */
static void check_work(uv_work_t *w)
{
	struct mr_check *k = w->data;
	struct mr_push *p = k->p;
	k->rc = k->fresh ? mm_store_put(p->root, p->m, k->chunk, k->buf, k->len)
			 : mm_check_chunk(p->m, k->chunk, k->buf, k->len);
}

static void check_done(uv_work_t *w, int status)
{
	struct mr_check *k = w->data;
	struct mr_push *p = k->p;
	struct mr_engine *e = p->e;
	struct mr_link *l = k->l;
	p->chk[k->chunk]--;
	l = work_release(p, l);
	if (!p->done && status == 0)
		chunk_checked(p, l, k);
	buf_give(p, k->buf);
	free(k);
	work_ended(p);
	engine_unref(e);
}

/* The chunk link l assembled is whole: check (and write) it in a worker
 * thread, so that a node checks several at once (SHA-256 runs at about 1.9
 * GB/s per core, two 100 Gb/s twins bring 25 GB/s); its buffer goes with it
 * and the link assembles the next one in another. */
static void chunk_in(struct mr_push *p, struct mr_link *l)
{
	l->asm_on = false;
	struct mr_check *k = calloc(1, sizeof *k);
	if (!k) {
		send_error(l->c, "internal", "out of memory");
		return;
	}
	k->p = p;
	k->l = l;
	k->chunk = l->asm_chunk;
	k->buf = l->asm_buf;
	k->len = l->asm_len;
	k->lane = l->lane;
	k->fresh = !mm_have_test(&p->have, k->chunk);
	k->work.data = k;
	l->asm_buf = NULL;
	p->checking++;
	p->chk[k->chunk]++;
	l->checks++;
	p->e->handles++;
	if (uv_queue_work(p->e->loop, &k->work, check_work, check_done) < 0) {
		check_work(&k->work);
		check_done(&k->work, 0);
	}
}

/* mp_piece {chunk, off} and its bytes (a binary frame): the next piece of the
 * chunk being assembled. */
static void on_piece(struct mr_push *p, struct mr_link *l, const json_t *f, const uint8_t *data,
		     size_t dlen)
{
	json_t *jc = json_object_get(f, "chunk"), *jo = json_object_get(f, "off");
	if (!json_is_integer(jc) || !json_is_integer(jo) || json_integer_value(jc) < 0 ||
	    (uint64_t)json_integer_value(jc) >= p->m->nchunks) {
		send_error(l->c, "bad_frame", "mp_piece: chunk and off are required");
		return;
	}
	size_t c = (size_t)json_integer_value(jc);
	json_int_t off = json_integer_value(jo);
	uint32_t len;
	mm_chunk_file(p->m, c, NULL, &len);
	if (p->done)
		return; /* ending: waits for its checks, takes nothing new */
	if (!l->asm_buf && !(l->asm_buf = buf_take(p))) {
		send_error(l->c, "internal", "out of memory");
		return;
	}
	if (!l->asm_on) {
		if (off != 0) {
			send_error(l->c, "bad_frame", "mp_piece: chunk %zu starts at offset 0", c);
			return;
		}
		l->asm_on = true;
		l->asm_chunk = c;
		l->asm_got = 0;
		l->asm_len = len;
	}
	if (c != l->asm_chunk || off != (json_int_t)l->asm_got) {
		send_error(l->c, "bad_frame", "mp_piece: chunk %zu offset %lld out of order", c,
			   (long long)off);
		return;
	}
	size_t room = l->asm_len - l->asm_got;
	if ((dlen == 0 && l->asm_len > 0) || dlen > room || dlen > MR_PIECE) {
		send_error(l->c, "bad_frame", "mp_piece: %zu bytes: 1 to %u bytes within the chunk "
			   "expected", dlen, MR_PIECE);
		return;
	}
	if (dlen)
		memcpy(l->asm_buf + l->asm_got, data, dlen);
	l->asm_got += (uint32_t)dlen;
	if (l->asm_got == l->asm_len)
		chunk_in(p, l);
}

static void on_up_frame(struct mr_link *l, const json_t *f)
{
	struct mr_push *p = l->p;
	const char *t = proto_type(f);
	if (!strcmp(t, "mp_manifest")) {
		if (p->prep != PREP_MANIFEST)
			return; /* a registered push knows its manifest: the text is not needed */
		json_t *jt = json_object_get(f, "text");
		json_int_t off = proto_int(f, "off", -1);
		if (!json_is_string(jt) || off != (json_int_t)p->mtext_got ||
		    json_string_length(jt) > p->mtext_len - p->mtext_got) {
			send_error(l->c, "bad_frame", "mp_manifest: text at offset %zu expected",
				   p->mtext_got);
			push_finish(p, -EPROTO);
			return;
		}
		memcpy(p->mtext + p->mtext_got, json_string_value(jt), json_string_length(jt));
		p->mtext_got += json_string_length(jt);
		if (p->mtext_got == p->mtext_len) {
			p->mtext[p->mtext_len] = 0;
			prep_start(p, l);
		}
		return;
	}
	if (p->prep) {
		send_error(l->c, "bad_frame", "%.32s before this node was ready", t);
		push_finish(p, -EPROTO);
		return;
	}
	if (!strcmp(t, "mp_piece")) {
		send_error(l->c, "bad_frame", "mp_piece: its bytes must follow in a binary frame");
	} else if (!strcmp(t, "mp_end")) {
		p->up_ended = true;
		if (p->missing && !p->up_msg[0])
			snprintf(p->up_msg, sizeof p->up_msg, "%zu chunks never came", p->missing);
		send_progress(p, true);
		if (p->down_ready)
			pump(p);
		push_check_end(p);
	} else {
		send_error(l->c, "bad_frame", "unexpected %.32s from upstream", t);
	}
}

/* Announced pushes running here: in all, and those a member announced. */
static size_t announced(const struct mr_engine *e, const char *peer)
{
	size_t k = 0;
	for (const struct mr_push *p = e->pushes; p; p = p->next)
		if (p->auto_push && !p->freed && (!peer || !strcmp(p->announcer, peer)))
			k++;
	return k;
}

/* A push nobody registered here: the hello names the chain, the model and
 * the ticket, and announces the manifest; this node must be in the chain,
 * the sender (by its certificate) before it, and the ticket must sign all
 * that, before anything the hello asks for is allocated. */
static void auto_hello(struct mr_link *l, const json_t *f)
{
	struct mr_engine *e = l->e;
	const char *pid = proto_str(f, "push"), *from = proto_str(f, "from");
	const char *name = proto_str(f, "name"), *tk = proto_str(f, "ticket");
	json_t *ch = json_object_get(f, "chain");
	json_int_t mbytes = proto_int(f, "manifest_bytes", -1);
	json_int_t expires = proto_int(f, "expires_at", 0);
	size_t n = json_array_size(ch);
	if (!mr_valid_push_id(pid) || !from || !json_is_array(ch) || n < 2 || n > MR_CHAIN_MAX ||
	    !name || !mm_valid_name(name) || mbytes < 2 || (size_t)mbytes > MR_MANIFEST_MAX) {
		send_error(l->c, "bad_frame", "mp_hello: push, from, chain (2-%d members), name (a "
			   "model name) and manifest_bytes (at most %zu) are required",
			   MR_CHAIN_MAX, MR_MANIFEST_MAX);
		return;
	}
	struct mr_member mem[MR_CHAIN_MAX];
	size_t self = n, peer = n;
	for (size_t i = 0; i < n; i++) {
		json_t *m = json_array_get(ch, i);
		const char *id = proto_str(m, "id"), *host = proto_str(m, "host");
		json_int_t port = proto_int(m, "port", -1);
		if (!id || !host || !id[0] || strlen(id) >= sizeof mem[i].id || !host[0] ||
		    strlen(host) >= sizeof mem[i].host || port < 1 || port > 65535) {
			send_error(l->c, "bad_frame", "mp_hello: chain[%zu] needs id, host and port", i);
			return;
		}
		for (size_t k = 0; k < i; k++)
			if (!strcmp(mem[k].id, id)) {
				send_error(l->c, "bad_frame", "mp_hello: %s twice in the chain", id);
				return;
			}
		util_strlcpy(mem[i].id, id, sizeof mem[i].id);
		util_strlcpy(mem[i].host, host, sizeof mem[i].host);
		mem[i].port = (int)port;
		if (mr_member_lanes(json_object_get(m, "lanes"), &mem[i]) < 0) {
			send_error(l->c, "bad_frame", "mp_hello: chain[%zu].lanes: at most %d addresses",
				   i, MR_LANES);
			return;
		}
		json_t *sk = json_object_get(m, "skip");
		if (sk && !json_is_boolean(sk)) {
			send_error(l->c, "bad_frame", "mp_hello: chain[%zu].skip must be a boolean", i);
			return;
		}
		mem[i].skip = json_is_true(sk);
		if (!strcmp(id, e->self_id))
			self = i;
		if (!strcmp(id, l->peer_id))
			peer = i;
	}
	if (self == n || self == 0 || peer >= self || strcmp(from, l->peer_id)) {
		log_warn("model_peer_refused", "push=%s cn=%s peer=%s", pid, log_q(l->peer_id),
			 conn_peer_name(l->c));
		send_error(l->c, "not_upstream", "node %s does not send push %s to %s", l->peer_id,
			   pid, e->self_id);
		return;
	}
	if (e->verify) {
		char *text = mr_ticket_text(pid, name, expires, mem, n);
		int vr = text && tk && strlen(tk) < 1024 ? e->verify(e->verify_data, text, tk, expires)
							 : -EACCES;
		free(text);
		if (vr < 0) {
			log_warn("model_push_refused", "push=%s from=%s peer=%s reason=%s", pid,
				 l->peer_id, conn_peer_name(l->c),
				 tk ? "bad or expired ticket" : "no ticket");
			link_refuse(l->c, "not_authorized", e->self_id, "%s refused push %s of %s: no "
				    "valid permission from the head", e->self_id, pid, name);
			return;
		}
	}
	size_t mine = announced(e, l->peer_id), all = announced(e, NULL);
	if (mine >= MR_PUSHES_PER_PEER || all >= MR_PUSHES_MAX) {
		log_warn("model_push_refused", "push=%s from=%s reason=busy pushes_from_peer=%zu "
			 "pushes=%zu", pid, l->peer_id, mine, all);
		if (mine >= MR_PUSHES_PER_PEER)
			link_refuse(l->c, "busy", e->self_id, "%s refused push %s: %zu pushes from %s "
				    "are running there (at most %d); run it again once one has ended",
				    e->self_id, pid, mine, l->peer_id, MR_PUSHES_PER_PEER);
		else
			link_refuse(l->c, "busy", e->self_id, "%s refused push %s: %zu pushes are "
				    "running there (at most %d); run it again once one has ended",
				    e->self_id, pid, all, MR_PUSHES_MAX);
		return;
	}
	struct mr_push *p = push_new(e, pid, mem, n, self);
	char *text = malloc((size_t)mbytes + 1);
	if (!p || !text) {
		free(text);
		if (p) {
			p->done = p->freed = true;
			uv_close((uv_handle_t *)&p->up_timer, on_timer_closed);
		}
		send_error(l->c, "internal", "out of memory");
		return;
	}
	if (tk && strlen(tk) < 1024)
		p->ticket = strdup(tk);
	p->expires_at = expires;
	p->auto_push = true;
	util_strlcpy(p->name, name, sizeof p->name);
	util_strlcpy(p->announcer, l->peer_id, sizeof p->announcer);
	p->cbs = e->inc_cbs;
	p->data = e->inc_data;
	util_strlcpy(p->root, e->store_root, sizeof p->root);
	p->mtext = text;
	p->mtext_len = (size_t)mbytes;
	p->prep = PREP_MANIFEST;
	l->hello = true;
	l->tx_ms = util_now_ms();
	l->p = p;
	l->dir = LINK_UP;
	l->peer_idx = peer;
	p->up = l;
	conn_set_max_frame(l->c, 0);
	conn_set_binary(l->c, MR_PIECE);
	log_info("model_push_in", "push=%s from=%s chain=%zu place=%zu", pid, l->peer_id, n, self);
}

/* mp_hello on an accepted link: who is it, for which push. */
static void on_hello(struct mr_link *l, const json_t *f)
{
	struct mr_engine *e = l->e;
	const char *pid = proto_str(f, "push"), *from = proto_str(f, "from");
	struct mr_push *p = pid ? find_push(e, pid) : NULL;
	if (!p && e->accept && pid) {
		auto_hello(l, f);
		return;
	}
	if (!p || p->self == 0 || p->done) {
		log_debug("model_unknown_push", "self=%s push=%s from=%s", e->self_id,
			  pid ? pid : "", l->peer_id);
		send_error(l->c, "unknown_push", "no push %.64s waits here", pid ? pid : "");
		return;
	}
	size_t idx = p->n;
	for (size_t i = 0; i < p->self; i++)
		if (!strcmp(p->chain[i].id, l->peer_id))
			idx = i;
	if (idx == p->n || !from || strcmp(from, l->peer_id)) {
		log_warn("model_peer_refused", "push=%s cn=%s peer=%s", p->id, log_q(l->peer_id),
			 conn_peer_name(l->c));
		send_error(l->c, "not_upstream", "node %s does not send push %s to %s", l->peer_id,
			   p->id, p->chain[p->self].id);
		return;
	}
	json_int_t lane = proto_int(f, "lane", 0);
	if (lane != 0) {
		/* one more link from the upstream connected now, for pieces only */
		if (lane < 1 || lane >= MR_LANES || !p->up || p->prep || p->up_ended ||
		    strcmp(p->up->peer_id, l->peer_id)) {
			send_error(l->c, "not_upstream", "lane %lld of push %s: only from %s's upstream "
				   "once it is connected", (long long)lane, p->id, p->chain[p->self].id);
			return;
		}
		for (struct mr_link *o = e->links; o; o = o->next)
			if (o != l && o->p == p && o->dir == LINK_UP && o->lane == lane && !o->shut) {
				send_error(l->c, "busy", "lane %lld of push %s is connected already",
					   (long long)lane, p->id);
				return;
			}
		l->hello = true;
		l->tx_ms = util_now_ms();
		l->p = p;
		l->dir = LINK_UP;
		l->lane = (int)lane;
		l->peer_idx = idx;
		conn_set_binary(l->c, MR_PIECE);
		return;
	}
	if (p->up && !p->up_ended && idx < p->up->peer_idx) {
		/* A member before the current upstream dials only when it saw that
		 * one go away; this node may not have seen its link close yet (a
		 * stopping agent closes its links one after the other): the new
		 * one takes over. */
		struct mr_link *old = p->up;
		log_info("model_upstream_replaced", "push=%s old=%s new=%s", p->id, old->peer_id,
			 l->peer_id);
		up_lost(p, "replaced");
		old->p = NULL;
		conn_close(old->c, 0);
		if (p->done) {
			/* it was announced and not ready yet: announced again by this one */
			if (e->accept)
				auto_hello(l, f);
			else
				send_error(l->c, "unknown_push", "no push %.64s waits here", p->id);
			return;
		}
	}
	if (p->up || p->up_ended) {
		send_error(l->c, "busy", "push %s already has its upstream here", p->id);
		return;
	}
	l->hello = true;
	l->tx_ms = util_now_ms();
	l->p = p;
	l->dir = LINK_UP;
	l->peer_idx = idx;
	p->up = l;
	conn_set_max_frame(l->c, 0); /* a member: manifest pieces are full-size frames */
	conn_set_binary(l->c, MR_PIECE); /* and chunks come as binary frames */
	memset(p->bad_count, 0, p->m->nchunks ? p->m->nchunks : 1);
	if (p->timer_on) {
		uv_timer_stop(&p->up_timer);
		p->timer_on = false;
	}
	p->up_msg[0] = 0;
	if (p->prep)
		return; /* still preparing: down_settled answers it */
	send_need(p, l);
	send_progress(p, true);
}

/* --- the sending side (a link to our downstream) --- */

/* A chunk this node sends, read (and checked) in a worker thread: from the
 * model directory on the source (mm_read_chunk: its size and mtime, and its
 * hash against the manifest: a file that changed is not sent), from the store
 * on a relay (mm_store_get: its hash). */
struct mr_read {
	uv_work_t work;
	struct mr_push *p;
	struct mr_link *l; /* the link it goes over; NULL once that closed */
	size_t chunk;
	uint8_t *buf;
	uint32_t len;
	int rc;
	char err[256];
};

/* Chunk c's pieces over l, each one binary frame. */
static void send_pieces(struct mr_push *p, struct mr_link *l, size_t c, uint8_t *buf, uint32_t len)
{
	if (p->test_corrupt == c + 1) {
		p->test_corrupt = 0;
		buf[len / 2] ^= 0x40;
	}
	if (p->e->test_corrupt == c + 1)
		buf[len / 3] ^= 0x20;
	uint32_t off = 0;
	do {
		uint32_t k = len - off < MR_PIECE ? len - off : MR_PIECE;
		json_t *f = msg("mp_piece");
		json_object_set_new(f, "chunk", json_integer((json_int_t)c));
		json_object_set_new(f, "off", json_integer(off));
		conn_send_bin(l->c, f, buf + off, k);
		json_decref(f);
		off += k;
	} while (off < len);
}

/* Chunk c could not be read (r, err): a relay asks its upstream again; the
 * source's file changed (the push fails naming it); else it is not sent. */
static void read_failed(struct mr_push *p, size_t c, int r, const char *err)
{
	if (p->self > 0 && p->up && !p->prep && p->want_count[c] < MR_BAD_MAX) {
		/* this node's copy no longer matches (a damaged disk): the node
		 * before it verified that chunk, ask it again */
		log_warn("model_copy_damaged", "push=%s chunk=%zu err=%d asking=%s", p->id, c, r,
			 p->up->peer_id);
		p->want_count[c]++;
		bit_set(p->want, c, true);
		p->wanting++;
		json_t *f = msg("mp_want");
		json_object_set_new(f, "chunk", json_integer((json_int_t)c));
		conn_send_new(p->up->c, f);
		return;
	}
	/* the source changed, or this node's copy is damaged: not sent */
	log_error("model_read_failed", "push=%s chunk=%zu err=%d", p->id, c, r);
	if (p->self == 0) {
		util_strlcpy(p->up_msg, err, sizeof p->up_msg);
		push_finish(p, -EAGAIN);
		return;
	}
	bit_set(p->sent, c, true);
}

static void read_work(uv_work_t *w)
{
	struct mr_read *k = w->data;
	struct mr_push *p = k->p;
	k->rc = p->self == 0
		    ? mm_read_chunk(p->m, p->src, k->chunk, k->buf, &k->len, k->err, sizeof k->err)
		    : mm_store_get(p->root, p->m, k->chunk, k->buf, &k->len);
	if (k->rc < 0 && !k->err[0])
		snprintf(k->err, sizeof k->err, "chunk %zu: %s", k->chunk, strerror(-k->rc));
}

static void read_done(uv_work_t *w, int status)
{
	struct mr_read *k = w->data;
	struct mr_push *p = k->p;
	struct mr_engine *e = p->e;
	struct mr_link *l = k->l;
	l = work_release(p, l);
	if (status < 0 && k->rc == 0)
		k->rc = status;
	if (!p->done && l && k->rc == 0) {
		send_pieces(p, l, k->chunk, k->buf, k->len);
	} else if (!p->done && l) {
		/* its place in the window goes back */
		if (fly_remove(l, k->chunk) && p->inflight > 0)
			p->inflight--;
		bit_set(p->sent, k->chunk, false);
		read_failed(p, k->chunk, k->rc, k->err);
		if (!p->done)
			pump(p);
	}
	/* l NULL: the link closed (or the downstream changed); the chunk went
	 * back to be sent again when it did */
	buf_give(p, k->buf);
	free(k);
	work_ended(p);
	engine_unref(e);
}

/* Send chunk c over l: at once when it is the chunk just verified in memory,
 * else once a worker thread has read and checked it. Its place in l's window
 * is taken now. */
static void send_chunk(struct mr_push *p, size_t c, struct mr_link *l)
{
	bit_set(p->sent, c, true);
	p->inflight++;
	l->fly[l->nfly++] = c;
	if (p->hot_buf && p->hot_chunk == c) {
		uint32_t len;
		mm_chunk_file(p->m, c, NULL, &len); /* verified as it came in */
		send_pieces(p, l, c, (uint8_t *)p->hot_buf, len);
		return;
	}
	struct mr_read *k = calloc(1, sizeof *k);
	uint8_t *buf = k ? buf_take(p) : NULL;
	if (!buf) {
		free(k);
		fly_remove(l, c);
		p->inflight--;
		bit_set(p->sent, c, false);
		read_failed(p, c, -ENOMEM, "out of memory");
		return;
	}
	k->p = p;
	k->l = l;
	k->chunk = c;
	k->buf = buf;
	k->work.data = k;
	p->checking++;
	l->checks++;
	p->e->handles++;
	if (uv_queue_work(p->e->loop, &k->work, read_work, read_done) < 0) {
		read_work(&k->work);
		read_done(&k->work, 0);
	}
}

/* The hop's lanes close with its first link. */
static void lanes_close(struct mr_push *p)
{
	for (int k = 1; k < MR_LANES; k++)
		if (p->lane[k]) {
			p->lane[k]->p = NULL;
			conn_close(p->lane[k]->c, 0);
			p->lane[k] = NULL;
		}
}

/* The link with room for one more chunk, the emptiest first: the hop's first
 * link or one of its lanes. */
static struct mr_link *pick_link(struct mr_push *p)
{
	size_t w = MR_WINDOW_BYTES / p->m->chunk_size;
	w = w < 1 ? 1 : w > MR_WINDOW ? MR_WINDOW : w;
	/* while a lane still connects, the first link takes only its share */
	size_t w0 = w, links = 1;
	for (int k = 1; k < MR_LANES; k++)
		links += p->lane[k] != NULL;
	for (int k = 1; k < MR_LANES; k++)
		if (p->lane[k] && !p->lane[k]->hello)
			w0 = (w + links - 1) / links;
	struct mr_link *best = p->down->nfly < w0 ? p->down : NULL;
	for (int k = 1; k < MR_LANES; k++) {
		struct mr_link *l = p->lane[k];
		if (l && l->hello && l->nfly < w && (!best || l->nfly < best->nfly))
			best = l;
	}
	return best;
}

/* Take chunk c off link l's unacknowledged ones; false if it was not there. */
static bool fly_remove(struct mr_link *l, size_t c)
{
	for (size_t i = 0; i < l->nfly; i++)
		if (l->fly[i] == c) {
			l->fly[i] = l->fly[--l->nfly];
			return true;
		}
	return false;
}

/* Send what the downstream lacks and this node holds, MR_WINDOW at a time per
 * link; mp_end once nothing more can come. */
static void pump(struct mr_push *p)
{
	if (!p->down || !p->down_ready || p->done)
		return;
	bool blocked = false; /* a chunk still to come from upstream: later ones wait */
	struct mr_link *l;
	for (size_t c = p->scan; c < p->m->nchunks && !p->done && p->down && (l = pick_link(p));
	     c++) {
		bool todo = bit_get(p->need_down, c) && !bit_get(p->sent, c);
		if (todo && bit_get(p->want, c))
			continue; /* asked again from upstream: sent when it comes */
		if (todo && bit_get(p->gave_up, c)) {
			bit_set(p->sent, c, true); /* never came good: the downstream lacks it too */
			todo = false;
		}
		/* from the upstream, or in a worker thread being checked */
		bool coming = !p->up_ended || p->chk[c];
		if (todo && mm_have_test(&p->have, c))
			send_chunk(p, c, l);
		else if (todo && coming) {
			blocked = true;
			break;
		}
		if (!blocked && c == p->scan && (bit_get(p->sent, c) || !bit_get(p->need_down, c) ||
						 !coming))
			p->scan = c + 1;
	}
	if (p->done || !p->down)
		return;
	if (p->inflight == 0 && p->up_ended && !p->end_sent && p->wanting == 0 && !p->checking) {
		p->end_sent = true;
		conn_send_new(p->down->c, msg("mp_end"));
	}
}

/* The downstream's first link is ready: open its lanes (the hop planned, to a
 * member with more than one fabric address). */
static void lanes_connect(struct mr_push *p)
{
	const struct mr_member *d = &p->chain[p->down_idx];
	if (p->down_idx != p->self + 1 || p->lanes_failed)
		return; /* serving a member in place of one gone away: its host only */
	for (unsigned k = 1; k < d->nlanes && k < MR_LANES; k++) {
		if (p->lane[k])
			continue;
		struct mr_link *l = link_new(p->e);
		if (!l)
			return;
		l->dir = LINK_DOWN;
		l->p = p;
		l->peer_idx = p->down_idx;
		l->lane = (int)k;
		conn *c;
		if (conn_connect_tcp(p->e->loop, d->lanes[k], d->port, p->e->cli, 10000, &link_cbs, l,
				     &c) < 0) {
			log_warn("model_lane_failed", "push=%s node=%s addr=%s", p->id, d->id,
				 d->lanes[k]);
			link_drop(l);
			continue;
		}
		l->c = c;
		p->lane[k] = l;
	}
}

static void on_down_frame(struct mr_link *l, const json_t *f)
{
	struct mr_push *p = l->p;
	const char *t = proto_type(f);
	json_int_t c = proto_int(f, "chunk", -1);
	if (l->lane && strcmp(t, "mp_ack") && strcmp(t, "mp_bad")) {
		if (strcmp(t, "error"))
			send_error(l->c, "bad_frame", "a lane carries acks only, not %.32s", t);
		else
			conn_close(l->c, -EPROTO); /* refused: its chunks go another way */
		return;
	}
	if (!strcmp(t, "mp_need") && !p->down_ready && !l->lane) {
		json_t *jb = json_object_get(f, "bits");
		size_t nb = (p->m->nchunks + 7) / 8;
		uint8_t *bytes = calloc(nb + 1, 1);
		long k = json_is_string(jb) && bytes ? unb64(json_string_value(jb),
							     json_string_length(jb), bytes, nb)
						   : -1;
		if (k != (long)nb) {
			free(bytes);
			send_error(l->c, "bad_frame", "mp_need: bits must be %zu bytes of base64", nb);
			return;
		}
		memset(p->need_down, 0, (p->m->nchunks / 64 + 1) * sizeof *p->need_down);
		memset(p->sent, 0, (p->m->nchunks / 64 + 1) * sizeof *p->sent);
		for (size_t i = 0; i < p->m->nchunks; i++)
			if (bytes[i / 8] >> (i % 8) & 1)
				bit_set(p->need_down, i, true);
		free(bytes);
		p->inflight = 0;
		p->scan = 0;
		p->end_sent = false;
		p->down_ready = true;
		down_settled(p);
		lanes_connect(p);
		pump(p);
	} else if ((!strcmp(t, "mp_ack") || !strcmp(t, "mp_bad")) && p->down_ready && c >= 0 &&
		   (uint64_t)c < p->m->nchunks && bit_get(p->sent, (size_t)c) && p->inflight > 0 &&
		   fly_remove(l, (size_t)c)) {
		p->inflight--;
		if (!strcmp(t, "mp_bad") && json_is_true(json_object_get(f, "give_up"))) {
			/* the downstream takes no more copies of it from this node */
			log_warn("model_chunk_refused_down", "push=%s chunk=%lld node=%s", p->id,
				 (long long)c, l->peer_id);
		} else if (!strcmp(t, "mp_bad")) {
			bit_set(p->sent, (size_t)c, false); /* sent again by the pump */
			if ((size_t)c < p->scan)
				p->scan = (size_t)c;
		}
		pump(p);
	} else if (!strcmp(t, "mp_want") && p->down_ready && c >= 0 && (uint64_t)c < p->m->nchunks) {
		/* the downstream's own copy of c failed its hash: send it again (read
		 * and checked here; a relay whose copy is damaged too asks its own
		 * upstream) */
		if (++p->asked[c] > MR_BAD_MAX) {
			send_error(l->c, "bad_frame", "mp_want: chunk %lld asked more than %d times",
				   (long long)c, MR_BAD_MAX);
			return;
		}
		bool flying = false;
		for (int k = 0; k < MR_LANES; k++) {
			struct mr_link *x = k ? p->lane[k] : p->down;
			for (size_t i = 0; x && i < x->nfly; i++)
				flying = flying || x->fly[i] == (size_t)c;
		}
		if (flying)
			return; /* on its way already */
		bit_set(p->need_down, (size_t)c, true);
		bit_set(p->sent, (size_t)c, false);
		if ((size_t)c < p->scan)
			p->scan = (size_t)c;
		p->end_sent = false;
		pump(p);
	} else if (!strcmp(t, "mp_progress")) {
		const char *node = proto_str(f, "node");
		json_int_t b = proto_int(f, "bytes", -1), tot = proto_int(f, "total", -1);
		if (!node || b < 0 || tot < 0)
			return;
		if (p->self == 0) {
			if (p->cbs.on_progress)
				p->cbs.on_progress(p->data, node, (uint64_t)b, (uint64_t)tot);
		} else if (p->up) {
			conn_send(p->up->c, f);
		}
	} else if (!strcmp(t, "mp_done")) {
		json_t *nodes = json_object_get(f, "nodes");
		size_t i;
		json_t *r;
		if (json_is_array(nodes))
			json_array_foreach(nodes, i, r)
				if (json_is_string(json_object_get(r, "node")) &&
				    json_is_string(json_object_get(r, "status")))
					json_array_append(p->report, r);
		l->got_done = true;
		lanes_close(p);
		p->down = NULL;
		p->down_idx = p->n;
		conn_close(l->c, 0);
		push_check_end(p);
	} else if (!strcmp(t, "error") && !p->down_ready &&
		   (!strcmp(proto_str(f, "code") ? proto_str(f, "code") : "", "no_space") ||
		    !strcmp(proto_str(f, "code") ? proto_str(f, "code") : "", "not_authorized"))) {
		/* a node below lacks room, or refuses the push's permission: the push is
		 * refused before its first byte */
		bool room = !strcmp(proto_str(f, "code"), "no_space");
		const char *m = proto_str(f, "message") ? proto_str(f, "message") : "no room";
		const char *who = l->peer_id; /* the node named, if it is one below this one */
		for (size_t i = p->self + 1; i < p->n; i++)
			if (proto_str(f, "node") && !strcmp(proto_str(f, "node"), p->chain[i].id))
				who = p->chain[i].id;
		json_array_append_new(p->report,
				      json_pack("{s:s, s:s, s:i, s:i, s:i, s:s}", "node", who,
						"status", "failed", "bytes_written", 0, "chunks_written",
						0, "chunks_bad", 0, "message", m));
		util_strlcpy(p->up_msg, m, sizeof p->up_msg);
		if (p->up && p->self > 0) {
			json_t *ef = proto_error(0, room ? "no_space" : "not_authorized", m);
			json_object_set_new(ef, "node", json_string(who));
			conn_send_new(p->up->c, ef);
			conn_close(p->up->c, 0);
		}
		l->got_done = true; /* not "down": it answered */
		push_finish(p, room ? -ENOSPC : -EACCES);
	} else if (!strcmp(t, "error") && !p->down_ready && l == p->down &&
		   !strcmp(proto_str(f, "code") ? proto_str(f, "code") : "", "busy")) {
		/* it takes no more pushes now (MR_PUSHES_PER_PEER, MR_PUSHES_MAX):
		 * named with its reason, passed over like a node gone away */
		const char *m = proto_str(f, "message") ? proto_str(f, "message") : "busy";
		log_warn("model_down_busy", "push=%s node=%s message=%s", p->id, l->peer_id,
			 log_q(m));
		json_array_append_new(p->report,
				      json_pack("{s:s, s:s, s:i, s:i, s:i, s:s}", "node",
						p->chain[l->peer_idx].id, "status", "failed",
						"bytes_written", 0, "chunks_written", 0, "chunks_bad", 0,
						"message", m));
		l->got_done = true; /* not "down": it answered */
		lanes_close(p);
		p->down = NULL;
		p->down_idx = l->peer_idx + 1;
		conn_close(l->c, 0);
		if (p->down_idx < p->n)
			down_connect(p);
		else
			push_check_end(p);
	} else if (!strcmp(t, "error")) {
		log_warn("model_down_error", "push=%s node=%s code=%s message=%s", p->id, l->peer_id,
			 log_q(proto_str(f, "code")), log_q(proto_str(f, "message")));
		conn_close(l->c, -EPROTO);
	} else {
		send_error(l->c, "bad_frame", "unexpected %.32s from downstream", t);
	}
}

/* The chain below this node is ready (or gone): answer the upstream's hello. */
static void down_settled(struct mr_push *p)
{
	if (p->prep != PREP_DOWN)
		return;
	p->prep = PREP_NONE;
	if (p->up) {
		send_need(p, p->up);
		send_progress(p, true);
	}
}

static void push_check_end(struct mr_push *p)
{
	if (p->done)
		return;
	if (p->prep == PREP_DOWN && p->down_idx >= p->n && !p->down)
		down_settled(p);
	if (p->prep)
		return;
	if (p->up_ended && (p->down_idx >= p->n || p->self + 1 >= p->n) && !p->down &&
	    !p->checking)
		push_finish(p, 0);
}

/* --- links --- */

static void link_ready(conn *c, int status)
{
	struct mr_link *l = conn_data(c);
	if (status < 0 || l->adopted)
		return; /* on_close follows; or a test's peer, named already */
	X509 *peer = conn_peer_cert(c);
	char cn[64] = "";
	if (!peer || conn_peer_revoked(c) || pki_cert_cn(peer, cn, sizeof cn) < 0) {
		/* a stranger: not one frame is read from it */
		log_warn("model_peer_refused", "reason=%s peer=%s",
			 conn_verify_error(c) ? conn_verify_error(c) : "no certificate",
			 conn_peer_name(c));
		send_error(c, "unauthenticated", "a cluster member's certificate is required");
		return;
	}
	util_strlcpy(l->peer_id, cn, sizeof l->peer_id);
	if (l->dir == LINK_DOWN) {
		struct mr_push *p = l->p;
		if (!p || strcmp(cn, p->chain[l->peer_idx].id)) {
			log_warn("model_peer_refused", "reason=wrong_node cn=%s peer=%s", log_q(cn),
				 conn_peer_name(c));
			conn_close(c, -EACCES);
			return;
		}
		json_t *h = msg("mp_hello");
		json_object_set_new(h, "push", json_string(p->id));
		json_object_set_new(h, "from", json_string(p->chain[p->self].id));
		if (l->lane) {
			/* a lane: pieces follow its hello at once */
			json_object_set_new(h, "lane", json_integer(l->lane));
			conn_send_new(c, h);
			l->hello = true;
			l->rx_ms = l->tx_ms = util_now_ms();
			pump(p);
			return;
		}
		json_t *ch = json_array();
		for (size_t i = 0; i < p->n; i++) {
			json_t *lanes = json_array();
			for (unsigned k = 0; k < p->chain[i].nlanes; k++)
				json_array_append_new(lanes, json_string(p->chain[i].lanes[k]));
			json_t *mj = json_pack("{s:s, s:s, s:i, s:o}", "id", p->chain[i].id, "host",
					       p->chain[i].host, "port", p->chain[i].port, "lanes",
					       lanes);
			if (mj && p->chain[i].skip)
				json_object_set_new(mj, "skip", json_true());
			json_array_append_new(ch, mj);
		}
		json_object_set_new(h, "chain", ch);
		json_object_set_new(h, "name", json_string(p->m->name));
		json_object_set_new(h, "manifest_bytes", json_integer((json_int_t)p->mtext_len));
		if (p->ticket) {
			json_object_set_new(h, "ticket", json_string(p->ticket));
			json_object_set_new(h, "expires_at", json_integer(p->expires_at));
		}
		conn_send_new(c, h);
		/* the manifest as text, in pieces a frame holds */
		for (size_t off = 0; off < p->mtext_len; off += MR_PIECE) {
			size_t k = p->mtext_len - off < MR_PIECE ? p->mtext_len - off : MR_PIECE;
			json_t *mf = msg("mp_manifest");
			json_object_set_new(mf, "off", json_integer((json_int_t)off));
			json_object_set_new(mf, "text", json_stringn(p->mtext + off, k));
			conn_send_new(c, mf);
		}
		l->hello = true; /* its answers, keepalives and idle time count from here */
		l->rx_ms = l->tx_ms = util_now_ms();
	}
}

static void link_frame(conn *c, json_t *f)
{
	struct mr_link *l = conn_data(c);
	if (!l->peer_id[0]) {
		json_decref(f);
		l->shut = true;
		conn_close(c, -EACCES);
		return;
	}
	bool hello = l->hello;
	l->rx_ms = util_now_ms();
	if (hello && !strcmp(proto_type(f), "mp_keepalive")) {
		/* its only use: this link is alive */
	} else if (l->dir == LINK_UP && !hello) {
		if (!strcmp(proto_type(f), "mp_hello"))
			on_hello(l, f);
		else
			send_error(c, "bad_frame", "mp_hello first");
	} else if (!l->p || l->p->done) {
		/* the push ended (or waits for its checks): frames in flight are dropped */
	} else if (l->dir == LINK_UP && l->lane) {
		send_error(c, "bad_frame", "a lane carries binary pieces only, not %.32s",
			   proto_type(f));
	} else if (l->dir == LINK_UP) {
		on_up_frame(l, f);
	} else {
		on_down_frame(l, f);
	}
	json_decref(f);
}

static void link_close(conn *c, int err)
{
	struct mr_link *l = conn_data(c);
	struct mr_engine *e = l->e;
	struct mr_push *p = l->p;
	if (p && !p->done) {
		if (l->dir == LINK_DOWN && l->lane && p->lane[l->lane] == l) {
			/* a lane closed: what it carried unacknowledged goes another way */
			p->lane[l->lane] = NULL;
			for (size_t i = 0; i < l->nfly; i++) {
				bit_set(p->sent, l->fly[i], false);
				if (l->fly[i] < p->scan)
					p->scan = l->fly[i];
				p->inflight--;
			}
			l->nfly = 0;
			log_info("model_lane_closed", "push=%s node=%s err=%d", p->id, l->peer_id, err);
			pump(p);
		} else if (l->dir == LINK_UP && p->up == l) {
			char why[160];
			snprintf(why, sizeof why, "the link from %s closed (%s)", l->peer_id,
				 err ? strerror(-err) : "before its end");
			up_lost(p, why);
		} else if (l->dir == LINK_DOWN && p->down == l && l->via_lane && !l->peer_id[0]) {
			/* its fabric address did not answer: the address every member reaches */
			log_warn("model_fabric_unreachable", "push=%s node=%s addr=%s err=%d", p->id,
				 p->chain[l->peer_idx].id, p->chain[l->peer_idx].lanes[0], err);
			p->lanes_failed = true;
			p->down = NULL;
			down_connect(p);
		} else if (l->dir == LINK_DOWN && p->down == l && !l->got_done) {
			/* the downstream is gone: name it, serve the next member */
			json_array_append_new(
			    p->report,
			    json_pack("{s:s, s:s, s:i, s:i, s:i, s:s}", "node",
				      p->chain[l->peer_idx].id, "status", "down", "bytes_written", -1,
				      "chunks_written", -1, "chunks_bad", -1, "message",
				      err ? strerror(-err) : "closed before the push ended"));
			lanes_close(p);
			p->down = NULL;
			p->down_ready = false;
			p->down_idx = l->peer_idx + 1;
			if (p->down_idx < p->n)
				down_connect(p);
			else
				push_check_end(p);
		}
	}
	struct mr_link **lp = &e->links;
	while (*lp && *lp != l)
		lp = &(*lp)->next;
	if (*lp)
		*lp = l->next;
	if (l->checks)
		l->dead = true; /* freed when its last check ends */
	else
		link_free(l);
}

/* A binary frame: only an upstream member's mp_piece, once its node is ready
 * (conn_set_binary is called for a member's link after its hello). */
static void link_bin(conn *c, json_t *f, const uint8_t *data, size_t len)
{
	struct mr_link *l = conn_data(c);
	l->rx_ms = util_now_ms();
	if (!l->p) {
		/* the push ended: frames still in flight are dropped */
	} else if (l->dir != LINK_UP || !l->hello || strcmp(proto_type(f), "mp_piece")) {
		send_error(c, "bad_frame", "unexpected binary %.32s", proto_type(f));
	} else if (l->p->prep) {
		send_error(c, "bad_frame", "mp_piece before this node was ready");
		push_finish(l->p, -EPROTO);
	} else {
		on_piece(l->p, l, f, data, len);
	}
	json_decref(f);
}

static const struct conn_cbs link_cbs = {
	.on_ready = link_ready,
	.on_frame = link_frame,
	.on_close = link_close,
	.on_bin = link_bin,
};

static struct mr_link *link_new(struct mr_engine *e)
{
	struct mr_link *l = calloc(1, sizeof *l);
	if (!l)
		return NULL;
	l->e = e;
	l->next = e->links;
	e->links = l;
	e->handles++;
	return l;
}

static void link_drop(struct mr_link *l)
{
	struct mr_link **lp = &l->e->links;
	while (*lp && *lp != l)
		lp = &(*lp)->next;
	if (*lp)
		*lp = l->next;
	engine_unref(l->e);
	free(l);
}

static void down_connect(struct mr_push *p)
{
	struct mr_engine *e = p->e;
	while (p->down_idx < p->n) {
		const struct mr_member *d = &p->chain[p->down_idx];
		if (d->skip) { /* passed over by this push (a repair round) */
			p->down_idx++;
			continue;
		}
		struct mr_link *l = link_new(e);
		if (!l)
			break;
		l->dir = LINK_DOWN;
		l->p = p;
		l->peer_idx = p->down_idx;
		/* the planned hop goes over the fabric when the member has an address there */
		const char *host = d->host;
		if (p->down_idx == p->self + 1 && d->nlanes > 0 && !p->lanes_failed) {
			host = d->lanes[0];
			l->via_lane = true;
		}
		conn *c;
		int r = conn_connect_tcp(e->loop, host, d->port, e->cli, 10000, &link_cbs, l, &c);
		if (r == 0) {
			l->c = c;
			p->down = l;
			return;
		}
		link_drop(l);
		json_array_append_new(p->report,
				      json_pack("{s:s, s:s, s:i, s:i, s:i, s:s}", "node", d->id,
						"status", "down", "bytes_written", -1, "chunks_written",
						-1, "chunks_bad", -1, "message", strerror(-r)));
		p->down_idx++;
	}
	push_check_end(p);
}

/* A connection whose hello was not taken yet: nobody known, nothing held. */
static bool prehello(const struct mr_link *l)
{
	return l->dir == LINK_UP && !l->hello && !l->shut;
}

static void on_accept(uv_stream_t *server, int status)
{
	struct mr_engine *e = server->data;
	if (status < 0 || e->closing)
		return;
	/* at most MR_PREHELLO_MAX before their hello: the oldest makes room */
	size_t waiting = 0;
	struct mr_link *oldest = NULL;
	for (struct mr_link *o = e->links; o; o = o->next)
		if (prehello(o)) {
			waiting++;
			if (!oldest || o->born_ms <= oldest->born_ms)
				oldest = o;
		}
	if (waiting >= MR_PREHELLO_MAX && oldest) {
		log_warn("model_prehello_dropped", "peer=%s waiting=%zu", conn_peer_name(oldest->c),
			 waiting);
		oldest->shut = true;
		conn_close(oldest->c, -EBUSY);
	}
	struct mr_link *l = link_new(e);
	if (!l)
		return;
	l->dir = LINK_UP;
	l->born_ms = util_now_ms();
	l->c = conn_accept(server, e->srv, &link_cbs, l);
	if (!l->c)
		link_drop(l);
	else
		conn_set_max_frame(l->c, 16 * 1024); /* until its hello: see on_hello */
}

/* Every link: its hello in time, a frame within the idle time, and a
 * keepalive from this side so that the peer sees the same. */
static void on_sweep(uv_timer_t *t)
{
	struct mr_engine *e = t->data;
	uint64_t now = util_now_ms();
	for (struct mr_link *l = e->links; l; l = l->next) {
		if (l->shut || !l->c)
			continue;
		if (prehello(l) && now - l->born_ms >= e->hello_ms) {
			log_info("model_hello_timeout", "peer=%s cn=%s", conn_peer_name(l->c),
				 l->peer_id[0] ? log_q(l->peer_id) : "-");
			l->shut = true;
			conn_close(l->c, -ETIMEDOUT);
		} else if (l->hello && now - l->rx_ms >= e->idle_ms) {
			log_warn("model_link_idle", "push=%s node=%s peer=%s idle_ms=%llu",
				 l->p ? l->p->id : "-", l->peer_id, conn_peer_name(l->c),
				 (unsigned long long)(now - l->rx_ms));
			l->shut = true;
			conn_close(l->c, -ETIMEDOUT);
		} else if (l->hello && now - l->tx_ms >= e->keepalive_ms) {
			l->tx_ms = now;
			conn_send_new(l->c, msg("mp_keepalive"));
		}
	}
}

/* The sweep's period: a quarter of the shortest time it watches, 20 ms-1 s. */
static void sweep_start(struct mr_engine *e)
{
	unsigned m = e->hello_ms < e->idle_ms ? e->hello_ms : e->idle_ms;
	m = m < e->keepalive_ms ? m : e->keepalive_ms;
	m /= 4;
	m = m < 20 ? 20 : m > 1000 ? 1000 : m;
	uv_timer_start(&e->sweep, on_sweep, m, m);
}

int mr_engine_adopt(struct mr_engine *e, uv_stream_t *server, const char *peer_id)
{
	struct mr_link *l = link_new(e);
	if (!l)
		return -ENOMEM;
	l->dir = LINK_UP;
	l->adopted = true;
	l->born_ms = util_now_ms();
	util_strlcpy(l->peer_id, peer_id, sizeof l->peer_id);
	l->c = conn_accept(server, NULL, &link_cbs, l);
	if (!l->c) {
		link_drop(l);
		return -EIO;
	}
	return 0;
}

/* --- the engine --- */

struct mr_engine *mr_engine_new(uv_loop_t *loop, SSL_CTX *srv_ctx, SSL_CTX *cli_ctx,
				const char *self_id)
{
	struct mr_engine *e = calloc(1, sizeof *e);
	if (!e)
		return NULL;
	e->loop = loop;
	e->srv = srv_ctx;
	e->cli = cli_ctx;
	util_strlcpy(e->self_id, self_id, sizeof e->self_id);
	e->handles = 1; /* the engine itself, until mr_engine_close */
	e->hello_ms = MR_HELLO_MS;
	e->idle_ms = MR_IDLE_MS;
	e->keepalive_ms = MR_KEEPALIVE_MS;
	uv_timer_init(loop, &e->sweep);
	e->sweep.data = e;
	e->handles++;
	sweep_start(e);
	uv_unref((uv_handle_t *)&e->sweep); /* it keeps no loop running by itself */
	return e;
}

void mr_engine_test_times(struct mr_engine *e, unsigned hello_ms, unsigned idle_ms,
			  unsigned keepalive_ms)
{
	if (hello_ms)
		e->hello_ms = hello_ms;
	if (idle_ms)
		e->idle_ms = idle_ms;
	if (keepalive_ms)
		e->keepalive_ms = keepalive_ms;
	sweep_start(e);
}

void mr_engine_stats(const struct mr_engine *e, struct mr_stats *st)
{
	memset(st, 0, sizeof *st);
	for (const struct mr_link *l = e->links; l; l = l->next) {
		st->links++;
		st->prehello += prehello(l);
	}
	st->announced = announced(e, NULL);
}

int mr_engine_listen(struct mr_engine *e, const char *host, int port, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	int r = uv_ip4_addr(host, port, (struct sockaddr_in *)&ss);
	if (r < 0)
		r = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss);
	if (r < 0) {
		snprintf(err, errlen, "%s: not a numeric address", host);
		return -EINVAL;
	}
	uv_tcp_init(e->loop, &e->lst);
	e->lst.data = e;
	e->handles++;
	e->listening = true;
	if ((r = uv_tcp_bind(&e->lst, (struct sockaddr *)&ss, 0)) < 0 ||
	    (r = uv_listen((uv_stream_t *)&e->lst, 64, on_accept)) < 0) {
		snprintf(err, errlen, "listen on %s:%d: %s", host, port, uv_strerror(r));
		return r;
	}
	return 0;
}

int mr_engine_port(struct mr_engine *e)
{
	struct sockaddr_storage ss;
	int len = sizeof ss;
	if (!e->listening || uv_tcp_getsockname(&e->lst, (struct sockaddr *)&ss, &len) < 0)
		return -1;
	if (ss.ss_family == AF_INET)
		return ntohs(((struct sockaddr_in *)&ss)->sin_port);
	return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
}

int mr_member_lanes(const json_t *lanes, struct mr_member *m)
{
	size_t nl = json_array_size(lanes);
	m->nlanes = 0;
	if ((lanes && !json_is_null(lanes) && !json_is_array(lanes)) || nl > MR_LANES)
		return -EINVAL;
	for (size_t k = 0; k < nl; k++) {
		const char *a = json_string_value(json_array_get(lanes, k));
		if (!a || !a[0] || strlen(a) >= sizeof m->lanes[k])
			return -EINVAL;
		util_strlcpy(m->lanes[k], a, sizeof m->lanes[k]);
		m->nlanes++;
	}
	return 0;
}

bool mr_valid_push_id(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (n == 0 || n > 64)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

/* The arrays of a push whose manifest is known. */
static int push_alloc(struct mr_push *p)
{
	const struct mm_manifest *m = p->m;
	size_t words = m->nchunks / 64 + 1;
	p->need_down = calloc(words, sizeof *p->need_down);
	p->sent = calloc(words, sizeof *p->sent);
	p->bad_count = calloc(m->nchunks ? m->nchunks : 1, 1);
	p->bad_from = calloc(m->nchunks ? m->nchunks : 1, 1);
	p->want = calloc(words, sizeof *p->want);
	p->want_count = calloc(m->nchunks ? m->nchunks : 1, 1);
	p->asked = calloc(m->nchunks ? m->nchunks : 1, 1);
	p->repairs = json_array();
	p->gave_up = calloc(words, sizeof *p->gave_up);
	p->corrupt = json_array();
	p->file_left = calloc(m->nfiles ? m->nfiles : 1, sizeof *p->file_left);
	p->chk = calloc(m->nchunks ? m->nchunks : 1, 1);
	if (!p->mtext) {
		json_t *j = mm_to_json(m);
		p->mtext = j ? json_dumps(j, JSON_COMPACT) : NULL;
		json_decref(j);
		p->mtext_len = p->mtext ? strlen(p->mtext) : 0;
	}
	if (!p->need_down || !p->sent || !p->bad_count || !p->file_left ||
	    !p->mtext || !p->bad_from || !p->want || !p->want_count || !p->asked || !p->repairs ||
	    !p->chk || !p->gave_up || !p->corrupt)
		return -ENOMEM;
	return 0;
}

/* After mm_store_have: what this node lacks, per file and in all. */
static void push_count_missing(struct mr_push *p)
{
	const struct mm_manifest *m = p->m;
	for (size_t i = 0; i < m->nfiles; i++) {
		const struct mm_file *f = &m->files[i];
		for (uint32_t c = 0; c < f->nchunks; c++)
			if (!mm_have_test(&p->have, f->first_chunk + c)) {
				p->file_left[i]++;
				p->missing++;
				uint32_t len;
				mm_chunk_file(m, f->first_chunk + c, NULL, &len);
				p->need_bytes += len;
			}
	}
}

static struct mr_push *push_new(struct mr_engine *e, const char *id, const struct mr_member *chain,
				size_t n, size_t self)
{
	struct mr_push *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->e = e;
	util_strlcpy(p->id, id, sizeof p->id);
	p->n = n;
	p->self = self;
	p->up_wait_ms = MR_UP_WAIT_MS;
	p->chain = malloc(n * sizeof *p->chain);
	p->report = json_array();
	if (!p->chain || !p->report) {
		free(p->chain);
		json_decref(p->report);
		free(p);
		return NULL;
	}
	memcpy(p->chain, chain, n * sizeof *p->chain);
	uv_timer_init(e->loop, &p->up_timer);
	p->up_timer.data = p;
	e->handles++;
	p->next = e->pushes;
	e->pushes = p;
	return p;
}

/* A receiver waits for its upstream (up_wait_ms) and dials its downstream. */
static void push_go(struct mr_push *p)
{
	if (p->self > 0 && !p->up) {
		p->timer_on = true;
		snprintf(p->up_msg, sizeof p->up_msg, "no upstream node connected within %u ms",
			 p->up_wait_ms);
		uv_timer_start(&p->up_timer, up_timeout, p->up_wait_ms, 0);
	}
	p->down_idx = p->self + 1;
	if (p->down_idx < p->n)
		down_connect(p);
	else
		push_check_end(p);
}

int mr_push_start(struct mr_engine *e, const struct mr_push_opts *o, const struct mr_cbs *cbs,
		  void *data, char *err, size_t errlen)
{
	if (!mr_valid_push_id(o->push_id) || o->nchain < 2 || o->self >= o->nchain || !o->m ||
	    (o->self == 0 && !o->src_dir) || (o->self > 0 && !o->store_root)) {
		snprintf(err, errlen, "bad push options");
		return -EINVAL;
	}
	if (find_push(e, o->push_id)) {
		snprintf(err, errlen, "push %s is already running here", o->push_id);
		return -EEXIST;
	}
	struct mr_push *p = push_new(e, o->push_id, o->chain, o->nchain, o->self);
	if (!p)
		return -ENOMEM;
	p->m = o->m;
	p->cbs = *cbs;
	p->data = data;
	p->test_corrupt = o->test_corrupt;
	p->expires_at = o->expires_at;
	if (o->ticket && !(p->ticket = strdup(o->ticket))) {
		p->done = p->freed = true;
		uv_close((uv_handle_t *)&p->up_timer, on_timer_closed);
		return -ENOMEM;
	}
	if (o->up_wait_ms)
		p->up_wait_ms = o->up_wait_ms;
	int r = push_alloc(p);
	if (r == 0 && o->self == 0) {
		util_strlcpy(p->src, o->src_dir, sizeof p->src);
		p->have.nchunks = o->m->nchunks;
		p->have.bits = calloc(o->m->nchunks / 64 + 1, sizeof *p->have.bits);
		if (!p->have.bits)
			r = -ENOMEM;
		for (size_t i = 0; r == 0 && i < o->m->nchunks; i++)
			p->have.bits[i / 64] |= 1ull << (i % 64);
		p->up_ended = true;
	} else if (r == 0) {
		util_strlcpy(p->root, o->store_root, sizeof p->root);
		if ((r = mm_store_have(p->root, o->m, &p->have, err, errlen)) == 0)
			r = mm_store_begin(p->root, o->m, &p->have, err, errlen);
		if (r == 0)
			push_count_missing(p);
	}
	if (r < 0) {
		if (!err[0])
			snprintf(err, errlen, "%s", strerror(-r));
		p->done = p->freed = true;
		uv_close((uv_handle_t *)&p->up_timer, on_timer_closed);
		return r;
	}
	push_go(p);
	return 0;
}

/* In a worker thread: what this node holds, room, the partial files. */
static void prep_work(uv_work_t *w)
{
	struct mr_push *p = w->data;
	p->work_rc = mm_store_have(p->root, p->m, &p->have, p->work_err, sizeof p->work_err);
	if (p->work_rc < 0)
		return;
	uint64_t need, avail;
	char e2[256];
	p->work_rc = mm_store_space(p->root, p->m, &p->have, &need, &avail, e2, sizeof e2);
	if (p->e->test_avail)
		avail = p->e->test_avail;
	if (p->work_rc == -ENOSPC || p->e->test_avail)
		/* the report's row names the node: the message says "this node",
		 * not its id */
		p->work_rc = mm_space_check("this node", need, avail, p->work_err,
					    sizeof p->work_err);
	else if (p->work_rc < 0)
		util_strlcpy(p->work_err, e2, sizeof p->work_err);
	if (p->work_rc == 0)
		p->work_rc = mm_store_begin(p->root, p->m, &p->have, p->work_err,
					    sizeof p->work_err);
}

static void prep_done(uv_work_t *w, int status)
{
	struct mr_push *p = w->data;
	struct mr_engine *e = p->e;
	p->work_running = false;
	if (p->free_after_work) {
		push_free(p);
		engine_unref(e);
		return;
	}
	if (p->done)
		return;
	if (status < 0 && p->work_rc == 0)
		p->work_rc = status;
	if (p->work_rc < 0) {
		util_strlcpy(p->up_msg, p->work_err[0] ? p->work_err : strerror(-p->work_rc),
			     sizeof p->up_msg);
		log_warn("model_push_refused", "push=%s reason=%s", p->id, log_q(p->up_msg));
		if (p->up) {
			json_t *ef = proto_error(0, p->work_rc == -ENOSPC ? "no_space" : "store",
						 p->up_msg);
			json_object_set_new(ef, "node", json_string(p->chain[p->self].id));
			conn_send_new(p->up->c, ef);
			conn_close(p->up->c, 0);
		}
		push_finish(p, p->work_rc == -ENOSPC ? -ENOSPC : -EIO);
		return;
	}
	push_count_missing(p);
	p->prep = PREP_DOWN;
	push_go(p); /* the downstream first: this node answers once the chain below is ready */
	if (p->down_idx >= p->n && !p->done)
		down_settled(p);
}

static void prep_start(struct mr_push *p, struct mr_link *l)
{
	char err[256] = "";
	if (mm_parse(p->mtext, p->mtext_len, &p->m_owned, err, sizeof err) < 0) {
		send_error(l->c, "bad_frame", "%s", err);
		push_finish(p, -EPROTO);
		return;
	}
	p->m = p->m_owned;
	if (strcmp(p->m->name, p->name)) {
		/* the ticket, checked on the hello, signs the name it announced */
		log_warn("model_push_refused", "push=%s from=%s reason=%s", p->id, l->peer_id,
			 log_q("the manifest names another model than the hello"));
		snprintf(p->up_msg, sizeof p->up_msg, "no valid permission for push %s", p->id);
		link_refuse(l->c, "not_authorized", p->e->self_id, "%s refused push %s: its manifest "
			    "is of %s, its permission of %s", p->e->self_id, p->id, p->m->name,
			    p->name);
		push_finish(p, -EACCES);
		return;
	}
	if (push_alloc(p) < 0) {
		send_error(l->c, "internal", "out of memory");
		push_finish(p, -ENOMEM);
		return;
	}
	p->prep = PREP_WORK;
	p->work.data = p;
	if (uv_queue_work(p->e->loop, &p->work, prep_work, prep_done) < 0) {
		send_error(l->c, "internal", "cannot prepare the store");
		push_finish(p, -EIO);
		return;
	}
	p->work_running = true;
}

void mr_engine_accept(struct mr_engine *e, const char *store_root, const struct mr_cbs *cbs,
		      void *data)
{
	e->accept = true;
	util_strlcpy(e->store_root, store_root, sizeof e->store_root);
	e->inc_cbs = *cbs;
	e->inc_data = data;
}

void mr_engine_test_corrupt(struct mr_engine *e, size_t chunk_plus_1)
{
	e->test_corrupt = chunk_plus_1;
}

void mr_engine_verify(struct mr_engine *e, mr_verify_fn verify, void *data)
{
	e->verify = verify;
	e->verify_data = data;
}

char *mr_ticket_text(const char *push_id, const char *name, int64_t expires_at,
		     const struct mr_member *chain, size_t n)
{
	size_t len = 64 + strlen(push_id) + strlen(name) + n * sizeof chain->id;
	char *s = malloc(len);
	if (!s)
		return NULL;
	int off = snprintf(s, len, "sparkctl-push-v1\n%s\n%s\n%lld\n", push_id, name,
			   (long long)expires_at);
	for (size_t i = 0; i < n && off > 0 && (size_t)off < len; i++)
		off += snprintf(s + off, len - (size_t)off, "%s%s", i ? "," : "", chain[i].id);
	return s;
}

void mr_engine_test_avail(struct mr_engine *e, uint64_t bytes)
{
	e->test_avail = bytes;
}

void mr_push_cancel(struct mr_engine *e, const char *push_id)
{
	struct mr_push *p = find_push(e, push_id);
	if (p) {
		snprintf(p->up_msg, sizeof p->up_msg, "cancelled");
		push_finish(p, -ECANCELED);
	}
}

/* the listener or the sweep's timer */
static void on_handle_closed(uv_handle_t *h)
{
	engine_unref(h->data);
}

void mr_engine_close(struct mr_engine *e)
{
	if (e->closing)
		return;
	e->closing = true;
	for (struct mr_push *p = e->pushes; p; p = p->next)
		if (!p->done)
			push_finish(p, -ECANCELED);
	for (struct mr_link *l = e->links; l; l = l->next) {
		l->p = NULL;
		conn_close(l->c, 0);
	}
	if (e->listening)
		uv_close((uv_handle_t *)&e->lst, on_handle_closed);
	uv_close((uv_handle_t *)&e->sweep, on_handle_closed);
	engine_unref(e);
}

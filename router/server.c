#include "server.h"

#include "cluster.h"
#include "decide.h"
#include "log.h"
#include "logline.h"
#include "metrics.h"
#include "session.h"
#include "spark_config.h"
#include "upstream.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#define RESP_MAX (64u << 20)     /* a buffered (non-stream) upstream answer */
#define STREAM_HIGH (1u << 20)   /* pause the upstream when this much waits for the client */

enum ep { EP_NONE, EP_CHAT, EP_COMPLETIONS, EP_DECISION, EP_MODELS, EP_HEALTH, EP_METRICS };

struct tstate {
	int inflight;
	int fails;                 /* consecutive failures */
	uint64_t cooled_until_ms;  /* skipped until then (when another target is left) */
	int qlen;
	struct rq *qhead, *qtail;
};

/* A client connection's first moments: its request headers must arrive in time. */
struct connrec {
	struct connrec *prev, *next;
	MHD_socket fd;
	uint64_t start_ms;
	int got_request, shut;
};

/* One policy and what the router keeps per target and route of it. Requests
 * hold the generation they started on: a reloaded policy serves new requests
 * while those in flight finish on the old one, freed with its last request. */
struct gen {
	struct policy *p;
	int refs;                        /* requests, +1 while current */
	struct tstate ts[POLICY_MAX_TARGETS];
	uint64_t rng[POLICY_MAX_ROUTES];
	unsigned char keyhash[POLICY_MAX_LIST][32];
	char *upkey[POLICY_MAX_TARGETS]; /* "Authorization: Bearer ..." or NULL */
	/* a request naming a model a service target serves (GET /v1/models lists
	 * them) goes to that target: one passthrough route per service target */
	struct route svc_route[POLICY_MAX_TARGETS];
	char tlabel[POLICY_MAX_TARGETS][POLICY_NAME_MAX + 16]; /* target="NAME" (metrics) */
};

struct server {
	uv_loop_t *loop;
	struct gen *g;                   /* current */
	struct MHD_Daemon *d;
	uv_poll_t mpoll;
	uv_timer_t mtimer, sweep, watch;
	struct rq *waiting;              /* suspended requests (the disconnect watch) */
	struct upstream *up;
	struct metrics *m;
	FILE *log;
	char logbuf[65536];              /* its stdio buffer */
	size_t log_pending;              /* bytes in it */
	char lline[1024];                /* the line being written (logline.h) */
	int port;
	uint64_t next_id;
	struct connrec conns;            /* list head */
	struct sessions *sess;
	int idle_s;                      /* idle_timeout_s at start-up (MHD's too) */
	struct cluster *cl;              /* the svc_watch subscription, or NULL */
	char *sock;                      /* its control socket */
	bool usable[POLICY_MAX_TARGETS]; /* of the current policy's targets, last logged */
	bool ignored[POLICY_MAX_TARGETS]; /* its service is someone else's: logged */
	/* random bytes for request ids, drawn from RAND_bytes 1.5 KiB at a time
	 * (a call per request cost 3% of the router's instructions) */
	unsigned char rnd[1536];
	size_t rnd_off;                  /* used up to here; sizeof rnd: draw again */
};

/* A header a rule of the request's route asks about, copied for a decision
 * made off the loop (MHD's memory is not the worker's to read). */
struct hsnap {
	const char *name;                /* the policy's */
	char *value;                     /* malloc'd, NULL: absent */
};

struct rq {
	struct server *s;
	struct gen *g;                   /* the policy it was decided on */
	struct MHD_Connection *c;
	enum ep ep;
	char id[72];
	/* request body */
	char *body;
	size_t blen, bcap;
	bool too_large, started;
	/* what it asks and where it goes */
	json_t *json;
	struct req_info ri;
	bool have_ri, decided;
	struct decision d;
	size_t attempt;                  /* index into d.chain */
	int cur;                         /* target of the running attempt, -1 */
	int attempts;                    /* upstream requests made */
	int last_fail;                   /* 429, 503 (unresolvable), 502, 504 */
	long long ctx_fail;              /* a context-length error came from a target of this
					  * many tokens: smaller ones are skipped (0: none known) */
	/* the running upstream request */
	CURL *easy;
	struct curl_slist *hdrs;
	char *up_body;
	long status;
	char ctype[128];
	bool headers_done, discard, streaming, paused, up_done;
	bool judging;                    /* the running request is the classifier's */
	bool probe400;                   /* a 400 with targets left: read it for a context-length error */
	CURLcode up_rc;
	uint64_t t_attempt;              /* when the running upstream request began (ns) */
	char up_err[200];                /* why the upstream failed after the answer began, or "" */
	bool err_sent;                   /* a stream's error event was given to MHD */
	/* answer bytes from the upstream not yet given to MHD */
	char *rbuf;
	size_t rlen, rcap, roff;
	/* the answer to the client */
	struct MHD_Response *resp;
	unsigned resp_code;
	bool response_ready, suspended, client_gone, mhd_done;
	/* waiting in a target's queue */
	struct rq *qnext;
	bool queued;
	uv_timer_t qtimer;
	/* client disconnects seen while suspended */
	uv_poll_t *dpoll;                /* malloc'd: a closing one may outlive the next */
	struct rq *wnext, *wprev;        /* in s->waiting while suspended */
	uint64_t susp_ms;
	int handles;                     /* libuv handles not yet closed */
	/* timing (ms, monotonic) */
	uint64_t t0, t_body, t_first;
	double overhead_s;
	long long prompt_tokens, completion_tokens;
	uint64_t skey;                   /* session key, 0: none */
	char *line;                      /* a streamed answer's current SSE line (for usage) */
	size_t llen;
	bool lskip;                      /* the line is too long to matter: skip to its end */
	/* a rules route with regexes is decided in libuv's thread pool
	 * (route_has_regex): the request is suspended meanwhile, and counts
	 * one handle so it outlives the work */
	uv_work_t work;
	int work_rc;
	struct hsnap hs[POLICY_MAX_RULES];
	size_t nhs;
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void mhd_kick(struct server *s);
static void mhd_soon(struct server *s);
static void begin_attempt(struct rq *r);
static void gen_unref(struct gen *g);
static void rq_maybe_free(struct rq *r);

/* ---- answers ---- */

static void set_common_headers(struct rq *r, struct MHD_Response *resp)
{
	MHD_add_response_header(resp, "X-Request-Id", r->id);
	if (r->decided) {
		const struct policy *p = r->g->p;
		MHD_add_response_header(resp, "X-Spark-Route", r->d.route->name);
		MHD_add_response_header(resp, "X-Spark-Rule", r->d.rule);
		int t = r->cur >= 0 ? r->cur : r->d.target;
		MHD_add_response_header(resp, "X-Spark-Target", p->targets[t].name);
	}
}

static void answer(struct rq *r, unsigned code, const char *ctype, char *buf, size_t len)
{
	if (r->response_ready) {
		free(buf);
		return;
	}
	r->resp = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
	if (!r->resp) {
		free(buf);
		return;
	}
	MHD_add_response_header(r->resp, "Content-Type", ctype);
	set_common_headers(r, r->resp);
	r->resp_code = code;
	r->response_ready = true;
}

static void answer_json(struct rq *r, unsigned code, json_t *o)
{
	char *s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (s)
		answer(r, code, "application/json", s, strlen(s));
}

/* An OpenAI-style error object. */
static void answer_error(struct rq *r, unsigned code, const char *type, const char *code_s,
			 const char *msg)
{
	json_t *e = json_pack("{s:{s:s, s:s, s:n, s:s}}", "error", "message", msg, "type", type,
			      "param", "code", code_s);
	answer_json(r, code, e);
	if (r->resp && code == 401)
		MHD_add_response_header(r->resp, "WWW-Authenticate", "Bearer");
	/* a refused client keeps no connection (and its body is never read) */
	if (r->resp && (code == 401 || code == 413))
		MHD_add_response_header(r->resp, "Connection", "close");
	if (r->resp && code == 429)
		MHD_add_response_header(r->resp, "Retry-After", "1");
	char l[96];
	snprintf(l, sizeof l, "code=\"%s\"", code_s);
	metrics_add(r->s->m, "spark_router_errors_total", l, 1);
}

/* ---- client disconnect watch while suspended ---- */

static void handle_closed(uv_handle_t *h)
{
	struct rq *r = h->data;
	r->handles--;
	rq_maybe_free(r);
}

static void dpoll_closed(uv_handle_t *h)
{
	struct rq *r = h->data;
	free(h);
	r->handles--;
	rq_maybe_free(r);
}

static void dpoll_stop(struct rq *r)
{
	if (!r->dpoll)
		return;
	uv_poll_stop(r->dpoll);
	uv_close((uv_handle_t *)r->dpoll, dpoll_closed);
	r->dpoll = NULL;
}

static void cancel_upstream(struct rq *r);
static void waiting_unlink(struct rq *r);

static void on_client_gone(uv_poll_t *h, int status, int events)
{
	(void)status;
	(void)events;
	struct rq *r = h->data;
	r->client_gone = true;
	dpoll_stop(r);
	cancel_upstream(r);
	if (r->suspended) {
		waiting_unlink(r);
		r->suspended = false;
		MHD_resume_connection(r->c);
		mhd_soon(r->s);
	}
}

/* Watch a suspended request's socket for the client leaving. */
static void dpoll_start(struct rq *r)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(r->c, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (!ci || r->dpoll)
		return;
	uv_poll_t *h = malloc(sizeof *h);
	if (!h)
		return;
	if (uv_poll_init_socket(r->s->loop, h, ci->connect_fd) < 0) {
		free(h);
		return;
	}
	h->data = r;
	r->handles++;
	r->dpoll = h;
	uv_poll_start(h, UV_DISCONNECT, on_client_gone);
}

static void waiting_unlink(struct rq *r)
{
	if (!r->wprev && r->s->waiting != r)
		return;
	if (r->wprev)
		r->wprev->wnext = r->wnext;
	else
		r->s->waiting = r->wnext;
	if (r->wnext)
		r->wnext->wprev = r->wprev;
	r->wnext = r->wprev = NULL;
}

/* Requests suspended for 200 ms get the watch; most answers come sooner, and
 * a uv_poll per request costs 10 to 25% of the throughput (docs/router.md). */
#define WATCH_AFTER_MS 200
#define WATCH_MS 100
static void log_flush(struct server *s);
static void on_watch(uv_timer_t *t)
{
	struct server *s = t->data;
	log_flush(s);
	uint64_t now = util_now_ms();
	for (struct rq *r = s->waiting; r; r = r->wnext)
		if (!r->dpoll && now - r->susp_ms >= WATCH_AFTER_MS)
			dpoll_start(r);
}

static void suspend(struct rq *r)
{
	if (r->suspended)
		return;
	MHD_suspend_connection(r->c);
	r->suspended = true;
	r->susp_ms = util_now_ms();
	r->wprev = NULL;
	r->wnext = r->s->waiting;
	if (r->wnext)
		r->wnext->wprev = r;
	r->s->waiting = r;
}

static void resume(struct rq *r)
{
	dpoll_stop(r);
	if (!r->suspended)
		return;
	waiting_unlink(r);
	r->suspended = false;
	MHD_resume_connection(r->c);
	/* not MHD_run now: this may be inside a curl callback, where MHD's
	 * handlers must not call curl (CURLM_RECURSIVE_API_CALL) */
	mhd_soon(r->s);
}

/* ---- targets: concurrency, queue ---- */

static void target_gauges(struct server *s, struct gen *g, int t)
{
	const char *l = g->tlabel[t];
	metrics_set(s->m, "spark_router_inflight", l, g->ts[t].inflight);
	metrics_set(s->m, "spark_router_queue_depth", l, g->ts[t].qlen);
}

static void attempt_metric(struct rq *r, int t, const char *outcome)
{
	char l[192];
	snprintf(l, sizeof l, "target=\"%s\",outcome=\"%s\"", r->g->p->targets[t].name, outcome);
	metrics_add(r->s->m, "spark_router_upstream_attempts_total", l, 1);
}

/* A finished attempt: failures in a row cool a target down for a while. */
static void target_health(struct server *s, struct gen *g, int t, bool failed)
{
	struct tstate *ts = &g->ts[t];
	const struct target *tg = &g->p->targets[t];
	const char *l = g->tlabel[t];
	if (!failed) {
		ts->fails = 0;
		metrics_set(s->m, "spark_router_target_cooled", l, 0);
		return;
	}
	if (tg->cooldown_after && ++ts->fails >= tg->cooldown_after) {
		ts->cooled_until_ms = util_now_ms() + (uint64_t)tg->cooldown_s * 1000;
		ts->fails = 0;
		metrics_set(s->m, "spark_router_target_cooled", l, 1);
		log_warn("target_cooled_down", "target=%s seconds=%d", tg->name, tg->cooldown_s);
	}
}

static void unqueue(struct rq *r)
{
	if (!r->queued)
		return;
	struct tstate *ts = &r->g->ts[r->cur];
	struct rq **pp = &ts->qhead;
	ts->qtail = NULL;
	for (struct rq *q = ts->qhead; q; q = q->qnext) {
		if (q == r) {
			*pp = q->qnext;
			continue;
		}
		pp = &q->qnext;
		ts->qtail = q;
	}
	ts->qlen--;
	r->queued = false;
	uv_timer_stop(&r->qtimer);
	target_gauges(r->s, r->g, r->cur);
}

static int start_curl(struct rq *r, int t);

/* A slot of target t is free: start the next queued request. */
static void target_release(struct server *s, struct gen *g, int t)
{
	struct tstate *ts = &g->ts[t];
	ts->inflight--;
	target_gauges(s, g, t);
	while (ts->qhead && (g->p->targets[t].max_concurrency == 0 ||
			     ts->inflight < g->p->targets[t].max_concurrency)) {
		struct rq *q = ts->qhead;
		unqueue(q);
		if (start_curl(q, t) < 0) {
			q->attempt++;
			begin_attempt(q);
			if (q->response_ready)
				resume(q);
		}
	}
}

static void on_queue_timeout(uv_timer_t *tm)
{
	struct rq *r = tm->data;
	int t = r->cur;
	unqueue(r);
	attempt_metric(r, t, "queue_timeout");
	r->last_fail = 429;
	r->attempt++;
	begin_attempt(r);
	if (r->response_ready)
		resume(r);
}

/* ---- the upstream request ---- */

static size_t on_header(char *b, size_t size, size_t n, void *arg)
{
	struct rq *r = arg;
	size_t len = size * n;
	if (len > 5 && !strncmp(b, "HTTP/", 5)) {
		const char *sp = memchr(b, ' ', len);
		r->status = sp ? strtol(sp + 1, NULL, 10) : 0;
		r->ctype[0] = 0;
	} else if (len > 13 && !strncasecmp(b, "Content-Type:", 13)) {
		size_t k = 13;
		while (k < len && b[k] == ' ')
			k++;
		size_t e = len;
		while (e > k && (b[e - 1] == '\r' || b[e - 1] == '\n' || b[e - 1] == ' '))
			e--;
		size_t m = e - k < sizeof r->ctype - 1 ? e - k : sizeof r->ctype - 1;
		memcpy(r->ctype, b + k, m);
		r->ctype[m] = 0;
	}
	return len;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max);
static void usage_tokens(struct rq *r, const char *b, size_t n);

static int rbuf_add(struct rq *r, const char *b, size_t n)
{
	if (r->roff && r->roff == r->rlen)
		r->roff = r->rlen = 0;
	if (r->rlen + n > r->rcap) {
		if (r->roff) { /* compact first */
			memmove(r->rbuf, r->rbuf + r->roff, r->rlen - r->roff);
			r->rlen -= r->roff;
			r->roff = 0;
		}
		size_t cap = r->rcap ? r->rcap : 16384;
		while (cap < r->rlen + n)
			cap *= 2;
		if (cap > RESP_MAX + 65536)
			return -1;
		char *nb = realloc(r->rbuf, cap);
		if (!nb)
			return -1;
		r->rbuf = nb;
		r->rcap = cap;
	}
	memcpy(r->rbuf + r->rlen, b, n);
	r->rlen += n;
	return 0;
}

static void first_bytes(struct rq *r)
{
	r->headers_done = true;
	bool more = r->attempt + 1 < r->d.n_chain;
	if ((r->status >= 500 || r->status == 429) && more) {
		r->discard = true;
		return;
	}
	if (r->status == 400 && more) {
		r->probe400 = true; /* buffered: a context-length error tries the next target */
		return;
	}
	if (r->ri.stream && r->status >= 200 && r->status < 300) {
		r->streaming = true;
		r->t_first = now_ns();
		r->resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, r,
							     NULL);
		if (r->resp) {
			MHD_add_response_header(r->resp, "Content-Type",
						r->ctype[0] ? r->ctype : "text/event-stream");
			MHD_add_response_header(r->resp, "Cache-Control", "no-cache");
			set_common_headers(r, r->resp);
			r->resp_code = (unsigned)r->status;
			r->response_ready = true;
		}
	}
}

/* Watch a stream's SSE lines for the upstream's usage chunk (sent with
 * stream_options.include_usage): only lines holding "usage" are parsed. */
#define LINE_MAX_USAGE 65536
static void sse_scan(struct rq *r, const char *b, size_t n)
{
	while (n) {
		const char *nl = memchr(b, '\n', n);
		size_t k = nl ? (size_t)(nl - b) : n;
		if (!r->lskip) {
			if (r->llen + k > LINE_MAX_USAGE) {
				r->lskip = true;
			} else {
				if (!r->line)
					r->line = malloc(LINE_MAX_USAGE + 1);
				if (!r->line)
					return;
				memcpy(r->line + r->llen, b, k);
				r->llen += k;
			}
		}
		if (!nl)
			return;
		if (!r->lskip && r->llen > 6 && !memcmp(r->line, "data: ", 6)) {
			r->line[r->llen] = 0;
			if (strstr(r->line, "\"usage\""))
				usage_tokens(r, r->line + 6, r->llen - 6);
		}
		r->llen = 0;
		r->lskip = false;
		b += k + 1;
		n -= k + 1;
	}
}

static size_t on_write(char *b, size_t size, size_t n, void *arg)
{
	struct rq *r = arg;
	size_t len = size * n;
	if (r->judging) /* a classifier's answer: small, kept whole */
		return r->rlen + len > (1u << 20) || rbuf_add(r, b, len) < 0 ? 0 : len;
	if (!r->headers_done)
		first_bytes(r);
	if (r->discard)
		return len;
	if (r->streaming) {
		if (r->rlen - r->roff > STREAM_HIGH) {
			r->paused = true;
			return CURL_WRITEFUNC_PAUSE;
		}
		if (rbuf_add(r, b, len) < 0)
			return 0;
		sse_scan(r, b, len);
		resume(r);
		return len;
	}
	if (r->rlen + len > RESP_MAX || rbuf_add(r, b, len) < 0)
		return 0; /* too big: the transfer fails */
	return len;
}

static const struct svc_table *svcs(const struct server *s)
{
	return s->cl ? cluster_services(s->cl) : NULL;
}

/* Is this one of the per-service routes (a model a service serves)? */
static bool svc_route_of(const struct gen *g, const struct route *rt)
{
	return rt >= g->svc_route && rt < g->svc_route + POLICY_MAX_TARGETS;
}

static int start_curl(struct rq *r, int t)
{
	struct server *s = r->s;
	const struct target *tg = &r->g->p->targets[t];
	struct resolved rv;
	target_resolve(r->g->p, t, svcs(s), &rv);
	if (!rv.usable)
		return -1;
	const char *path = r->ep == EP_CHAT ? "/chat/completions" : "/completions";
	char url[2048];
	if ((size_t)snprintf(url, sizeof url, "%s%s", rv.base, path) >= sizeof url)
		return -1;
	free(r->up_body);
	r->up_body = NULL;
	/* a client that asked for a service's own model id gets it as asked */
	const char *model = svc_route_of(r->g, r->d.route) ? NULL : rv.model;
	if (model) {
		json_t *copy = json_deep_copy(r->json);
		json_object_set_new(copy, "model", json_string(model));
		r->up_body = json_dumps(copy, JSON_COMPACT);
		json_decref(copy);
		if (!r->up_body)
			return -1;
	}
	CURL *e = upstream_get(s->up);
	if (!e)
		return -1;
	struct curl_slist *h = NULL;
	char rid[100];
	snprintf(rid, sizeof rid, "X-Request-Id: %s", r->id);
	h = curl_slist_append(h, "Content-Type: application/json");
	h = curl_slist_append(h, "Expect:");
	h = curl_slist_append(h, rid);
	if (r->g->upkey[t])
		h = curl_slist_append(h, r->g->upkey[t]);
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(e, CURLOPT_POST, 1L);
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->up_body ? r->up_body : r->body);
	curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
			 (curl_off_t)(r->up_body ? strlen(r->up_body) : r->blen));
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(e, CURLOPT_PRIVATE, r);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)tg->connect_timeout_ms);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)tg->timeout_ms);
	/* a stalled upstream (a wedged rank: a stream gone silent) is given up
	 * after stall_timeout_ms without a byte */
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, (long)((tg->stall_timeout_ms + 999) / 1000));
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
	r->status = 0;
	r->ctype[0] = 0;
	r->headers_done = r->discard = r->probe400 = false;
	r->rlen = r->roff = 0;
	if (upstream_add(s->up, e) < 0) {
		upstream_put(s->up, e);
		curl_slist_free_all(h);
		return -1;
	}
	r->easy = e;
	r->hdrs = h;
	r->cur = t;
	r->attempts++;
	r->t_attempt = now_ns();
	r->g->ts[t].inflight++;
	target_gauges(s, r->g, t);
	return 0;
}

static void answer_decision(struct rq *r);

/* Ask the route's classifier (outside the judge target's concurrency limit). */
static int start_judge(struct rq *r)
{
	struct server *s = r->s;
	const struct route *rt = r->d.route;
	const struct target *tg = &r->g->p->targets[rt->judge];
	struct resolved rv;
	target_resolve(r->g->p, rt->judge, svcs(s), &rv);
	char url[2048];
	if (!rv.usable ||
	    (size_t)snprintf(url, sizeof url, "%s/chat/completions", rv.base) >= sizeof url)
		return -1;
	free(r->up_body);
	r->up_body = classifier_body(r->g->p, rt, &r->ri);
	if (r->up_body && !tg->model && rv.model) { /* a service judge: its own model */
		json_t *j = json_loads(r->up_body, 0, NULL);
		json_object_set_new(j, "model", json_string(rv.model));
		free(r->up_body);
		r->up_body = j ? json_dumps(j, JSON_COMPACT) : NULL;
		json_decref(j);
	}
	CURL *e = r->up_body ? upstream_get(s->up) : NULL;
	if (!e)
		return -1;
	struct curl_slist *h = NULL;
	char rid[100];
	snprintf(rid, sizeof rid, "X-Request-Id: %s", r->id);
	h = curl_slist_append(h, "Content-Type: application/json");
	h = curl_slist_append(h, "Expect:");
	h = curl_slist_append(h, rid);
	if (r->g->upkey[rt->judge])
		h = curl_slist_append(h, r->g->upkey[rt->judge]);
	long to = rt->judge_timeout_ms;
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(e, CURLOPT_POST, 1L);
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->up_body);
	curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(r->up_body));
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(e, CURLOPT_PRIVATE, r);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, tg->connect_timeout_ms < to ? (long)tg->connect_timeout_ms : to);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, to);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	r->status = 0;
	r->rlen = r->roff = 0;
	r->judging = true;
	if (upstream_add(s->up, e) < 0) {
		r->judging = false;
		upstream_put(s->up, e);
		curl_slist_free_all(h);
		return -1;
	}
	r->easy = e;
	r->hdrs = h;
	return 0;
}

static void judge_metric(struct rq *r, const char *outcome)
{
	char l[160];
	snprintf(l, sizeof l, "route=\"%s\",outcome=\"%s\"", r->d.route->name, outcome);
	metrics_add(r->s->m, "spark_router_classifier_total", l, 1);
}

static void observe_overhead(struct rq *r)
{
	char l[96];
	r->overhead_s = (double)(now_ns() - r->t_body) / 1e9;
	snprintf(l, sizeof l, "route_type=\"%s\"", route_type_name(r->d.route->type));
	metrics_observe(r->s->m, "spark_router_routing_overhead_seconds", l, r->overhead_s);
}

/* The classifier answered (or failed): settle the decision and go on. */
static void judge_done(struct rq *r, CURLcode rc)
{
	r->judging = false;
	const char *why = rc == CURLE_OPERATION_TIMEDOUT ? "no answer within timeout_ms"
							 : curl_easy_strerror(rc);
	int used = classifier_pick(r->g->p, rc == CURLE_OK ? r->rbuf + r->roff : NULL,
				   r->rlen - r->roff, r->status, why, &r->d);
	judge_metric(r, used == 0 ? "ok"
			: rc == CURLE_OPERATION_TIMEDOUT ? "timeout"
			: rc != CURLE_OK ? "error"
			: r->status != 200 ? "http_error" : "invalid");
	r->rlen = r->roff = 0;
	r->status = 0;
	observe_overhead(r);
	if (r->ep == EP_DECISION)
		answer_decision(r);
	else
		begin_attempt(r);
	if (r->response_ready)
		resume(r);
}

static void cancel_upstream(struct rq *r)
{
	if (r->queued)
		unqueue(r);
	if (!r->easy)
		return;
	upstream_remove(r->s->up, r->easy);
	upstream_put(r->s->up, r->easy);
	if (r->judging) {
		r->judging = false;
		r->easy = NULL;
		curl_slist_free_all(r->hdrs);
		r->hdrs = NULL;
		return;
	}
	curl_slist_free_all(r->hdrs);
	r->easy = NULL;
	r->hdrs = NULL;
	attempt_metric(r, r->cur, "cancelled");
	target_release(r->s, r->g, r->cur);
}

/* Try d.chain[attempt], then the next ones; answers when none is left. */
static void begin_attempt(struct rq *r)
{
	struct server *s = r->s;
	for (; r->attempt < r->d.n_chain; r->attempt++) {
		int t = r->d.chain[r->attempt];
		const struct target *tg = &r->g->p->targets[t];
		r->cur = t;
		struct resolved rv;
		target_resolve(r->g->p, t, svcs(s), &rv);
		if (!rv.usable) { /* a service that is not ready, or no snapshot */
			attempt_metric(r, t, "unresolvable");
			if (!r->last_fail)
				r->last_fail = 503;
			continue;
		}
		/* after a context-length error, only a larger (or unknown) window helps */
		if (r->ctx_fail && rv.max_context && rv.max_context <= r->ctx_fail) {
			attempt_metric(r, t, "context_smaller");
			continue;
		}
		struct tstate *ts = &r->g->ts[t];
		if (ts->cooled_until_ms > util_now_ms() && r->attempt + 1 < r->d.n_chain) {
			attempt_metric(r, t, "cooled_down");
			if (!r->last_fail)
				r->last_fail = 502;
			continue;
		}
		if (tg->max_concurrency && ts->inflight >= tg->max_concurrency) {
			if (ts->qlen < tg->queue) {
				r->queued = true;
				r->qnext = NULL;
				if (ts->qtail)
					ts->qtail->qnext = r;
				else
					ts->qhead = r;
				ts->qtail = r;
				ts->qlen++;
				if (!r->qtimer.data) {
					uv_timer_init(s->loop, &r->qtimer);
					r->qtimer.data = r;
					r->handles++;
				}
				uv_timer_start(&r->qtimer, on_queue_timeout, (uint64_t)tg->queue_timeout_ms, 0);
				target_gauges(s, r->g, t);
				return;
			}
			attempt_metric(r, t, "queue_full");
			r->last_fail = 429;
			continue;
		}
		if (start_curl(r, t) == 0)
			return;
		attempt_metric(r, t, "error");
		r->last_fail = 502;
	}
	r->cur = r->d.n_chain ? r->d.chain[r->d.n_chain - 1] : r->d.target;
	switch (r->last_fail) {
	case 429:
		answer_error(r, 429, "rate_limit_error", "target_busy",
			     "every target of this route is at its concurrency limit and its queue is full or timed out; retry after the Retry-After seconds");
		break;
	case 503:
		answer_error(r, 503, "server_error", "target_unresolvable",
			     "no target of this route is usable: its cluster services are not ready, belong to another user than the target's owner:, or spark-router has no snapshot of them from sparkd (POST /v1/decision says which); retry later or add a URL target to the route's fallbacks");
		break;
	case 400:
		answer_error(r, 400, "invalid_request_error", "context_length_exceeded",
			     "the prompt is longer than the context window of every target of this route");
		break;
	case 504:
		answer_error(r, 504, "server_error", "upstream_timeout",
			     "the upstream model server did not answer in time (the target's timeout_ms)");
		break;
	default:
		answer_error(r, 502, "server_error", "upstream_unavailable",
			     "no upstream model server of this route could be reached; check the targets' URLs and that the servers run");
	}
}

static void usage_tokens(struct rq *r, const char *b, size_t n)
{
	usage_read(b, n, &r->prompt_tokens, &r->completion_tokens); /* kept when absent */
}

static void on_upstream_done(CURL *e, CURLcode rc, void *arg)
{
	(void)arg;
	struct rq *r = NULL;
	curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&r);
	struct server *s = r->s;
	int t = r->cur;
	upstream_put(s->up, e);
	curl_slist_free_all(r->hdrs);
	r->easy = NULL;
	r->hdrs = NULL;
	if (r->judging) {
		judge_done(r, rc);
		return;
	}
	if (!r->headers_done && rc == CURLE_OK)
		first_bytes(r); /* an empty body */
	const char *outcome = rc == CURLE_OPERATION_TIMEDOUT ? "timeout"
			      : rc != CURLE_OK		     ? "connect_error"
			      : r->status >= 500	     ? "http_5xx"
			      : r->status == 429	     ? "http_429"
			      : r->status >= 400	     ? "http_4xx"
							     : "ok";
	/* the low-speed check (stall_timeout_ms) and timeout_ms both end a
	 * transfer with CURLE_OPERATION_TIMEDOUT: the time taken tells them apart */
	const struct target *tg = &r->g->p->targets[t];
	bool stalled = rc == CURLE_OPERATION_TIMEDOUT &&
		       (now_ns() - r->t_attempt) / 1000000 + 500 < (uint64_t)tg->timeout_ms;
	if (stalled)
		outcome = "stalled";
	/* a 2xx whose body is no JSON (a proxy's or portal's page) is no answer:
	 * the next target may give one (checked by its first byte: cheap) */
	bool bad_answer = false;
	if (rc == CURLE_OK && !r->streaming && r->status >= 200 && r->status < 300 && !r->discard) {
		size_t i = r->roff;
		while (i < r->rlen && strchr(" \t\r\n", r->rbuf[i]))
			i++;
		bad_answer = i == r->rlen || (r->rbuf[i] != '{' && r->rbuf[i] != '[');
	}
	if (bad_answer) {
		outcome = "bad_answer";
		r->discard = true;
		r->status = 502;
		log_warn("upstream_bad_answer", "request_id=%s target=%s content_type=%s", r->id,
			 r->g->p->targets[t].name, log_q(r->ctype));
	}
	if (rc != CURLE_OK && r->headers_done)
		outcome = stalled ? "stalled" : rc == CURLE_OPERATION_TIMEDOUT ? "timeout" : "broken";
	attempt_metric(r, t, outcome);
	if (rc != CURLE_OK && r->headers_done) {
		if (stalled)
			snprintf(r->up_err, sizeof r->up_err, "target %s stalled: no byte for %d s "
				 "(stall_timeout_ms)", tg->name, (tg->stall_timeout_ms + 999) / 1000);
		else if (rc == CURLE_OPERATION_TIMEDOUT)
			snprintf(r->up_err, sizeof r->up_err, "target %s did not finish within "
				 "timeout_ms (%d ms)", tg->name, tg->timeout_ms);
		else
			snprintf(r->up_err, sizeof r->up_err, "target %s broke off its answer: %s",
				 tg->name, curl_easy_strerror(rc));
		log_warn("upstream_broke_off", "request_id=%s target=%s outcome=%s", r->id, tg->name,
			 outcome);
	}
	target_health(s, r->g, t, rc != CURLE_OK || r->status >= 500 || r->status == 429);
	if (r->probe400 && rc == CURLE_OK &&
	    is_context_error(r->rbuf + r->roff, r->rlen - r->roff)) {
		attempt_metric(r, t, "context_length");
		r->discard = true; /* the next target may have a larger context */
		r->status = 400;
		struct resolved rv;
		target_resolve(r->g->p, t, svcs(s), &rv);
		if (rv.max_context > r->ctx_fail)
			r->ctx_fail = rv.max_context;
	}
	if (r->streaming) {
		r->up_done = true;
		r->up_rc = rc;
		target_release(s, r->g, t);
		resume(r);
		return;
	}
	if (r->discard || (rc != CURLE_OK && !r->rlen)) {
		/* nothing reached the client: the next target may answer */
		r->last_fail = r->discard ? (r->status == 429 ? 429 : 502)
			       : rc == CURLE_OPERATION_TIMEDOUT ? 504 : 502;
		if (r->discard && r->status == 400)
			r->last_fail = 400;
		r->attempt++;
		target_release(s, r->g, t); /* may start queued requests (not this one) */
		begin_attempt(r);
		if (r->response_ready)
			resume(r);
		return;
	}
	target_release(s, r->g, t);
	if (rc != CURLE_OK) {
		r->last_fail = rc == CURLE_OPERATION_TIMEDOUT ? 504 : 502;
		r->attempt = r->d.n_chain;
		begin_attempt(r);
	} else {
		r->t_first = now_ns();
		usage_tokens(r, r->rbuf + r->roff, r->rlen - r->roff);
		size_t n = r->rlen - r->roff;
		char *b;
		if (r->roff == 0 && n) { /* the buffer itself becomes the answer's */
			b = r->rbuf;
			r->rbuf = NULL;
			r->rlen = r->rcap = 0;
		} else if ((b = malloc(n + 1))) {
			memcpy(b, r->rbuf + r->roff, n);
		}
		if (b)
			answer(r, (unsigned)r->status, r->ctype[0] ? r->ctype : "application/json", b, n);
	}
	resume(r);
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)pos;
	struct rq *r = cls;
	size_t avail = r->rlen - r->roff;
	if (avail) {
		size_t n = avail < max ? avail : max;
		memcpy(buf, r->rbuf + r->roff, n);
		r->roff += n;
		if (r->roff == r->rlen)
			r->roff = r->rlen = 0;
		if (r->paused && r->easy && r->rlen - r->roff < STREAM_HIGH / 2) {
			r->paused = false;
			curl_easy_pause(r->easy, CURLPAUSE_CONT);
		}
		return (ssize_t)n;
	}
	if (r->up_done || r->client_gone || !r->easy) {
		/* an event stream the upstream broke off ends with an error event
		 * the client can read (as OpenAI's streams do), then cleanly */
		if (r->up_done && r->up_rc != CURLE_OK && !r->client_gone && !r->err_sent &&
		    strstr(r->ctype, "text/event-stream")) {
			r->err_sent = true;
			json_t *ev = json_pack("{s:{s:s, s:s, s:s}}", "error", "message",
					       r->up_err[0] ? r->up_err : "the upstream broke off its answer",
					       "type", "upstream_error", "code",
					       strstr(r->up_err, "stalled") ? "upstream_stalled"
									    : "upstream_broken");
			char *js = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
			json_decref(ev);
			int n = js ? snprintf(buf, max, "data: %s\n\n", js) : -1;
			free(js);
			if (n > 0 && (size_t)n < max)
				return (ssize_t)n;
		}
		return r->up_done && (r->up_rc == CURLE_OK || r->err_sent)
			       ? MHD_CONTENT_READER_END_OF_STREAM
			       : MHD_CONTENT_READER_END_WITH_ERROR;
	}
	suspend(r);
	return 0;
}

/* ---- endpoints ---- */

static const char *hdr_lookup(void *ctx, const char *name)
{
	return MHD_lookup_connection_value((struct MHD_Connection *)ctx, MHD_HEADER_KIND, name);
}

static bool listed(json_t *data, const char *id)
{
	size_t i;
	json_t *e;
	json_array_foreach(data, i, e)
		if (!strcmp(json_string_value(json_object_get(e, "id")), id))
			return true;
	return false;
}

static void do_models(struct rq *r)
{
	const struct policy *p = r->g->p;
	const struct svc_table *t = svcs(r->s);
	json_t *data = json_array();
	for (size_t i = 0; i < p->n_routes; i++) {
		json_array_append_new(data, json_pack("{s:s, s:s, s:i, s:s}", "id", p->routes[i].name,
						      "object", "model", "created", 0, "owned_by",
						      "spark-router"));
		for (size_t a = 0; a < p->routes[i].n_aliases; a++)
			json_array_append_new(data, json_pack("{s:s, s:s, s:i, s:s}", "id",
							      p->routes[i].aliases[a], "object",
							      "model", "created", 0, "owned_by",
							      "spark-router"));
	}
	/* the models of ready services: a request naming one goes to its service */
	for (size_t i = 0; t && i < p->n_targets; i++) {
		const struct target *tg = &p->targets[i];
		const struct svc_info *sv = target_service(tg, t);
		if (!sv || !svc_usable(sv, tg->management))
			continue;
		for (size_t m = 0; m < sv->n_models; m++)
			if (!listed(data, sv->models[m]))
				json_array_append_new(data, json_pack("{s:s, s:s, s:i, s:s, s:s}", "id",
								      sv->models[m], "object", "model",
								      "created", 0, "owned_by", "spark-router",
								      "target", tg->name));
	}
	answer_json(r, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

static void do_metrics(struct rq *r)
{
	size_t n;
	char *t = metrics_text(r->s->m, &n);
	if (t)
		answer(r, 200, "text/plain; version=0.0.4", t, n);
}

/* The session key of a request on a sticky route, 0 for none: the session
 * header, else (sticky: hash) a hash of the first two messages. */
static uint64_t session_of(struct rq *r, const struct route *rt)
{
	if (rt->sticky == STICKY_OFF)
		return 0;
	const char *h = MHD_lookup_connection_value(r->c, MHD_HEADER_KIND, r->g->p->session_header);
	if (h && *h)
		return session_key(rt->name, h, strlen(h) < 256 ? strlen(h) : 256);
	if (rt->sticky != STICKY_HASH || r->ri.kind != REQ_CHAT)
		return 0;
	json_t *msgs = json_object_get(r->json, "messages");
	json_t *first = json_array();
	for (size_t i = 0; i < 2 && i < json_array_size(msgs); i++)
		json_array_append(first, json_array_get(msgs, i));
	char *d = json_dumps(first, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(first);
	uint64_t k = d ? session_key(rt->name, d, strlen(d)) : 0;
	free(d);
	return k;
}

/* The service target whose ready service serves model id m, or -1. */
static int service_model_target(const struct gen *g, const struct svc_table *t, const char *m)
{
	for (size_t i = 0; t && m && i < g->p->n_targets; i++) {
		const struct target *tg = &g->p->targets[i];
		const struct svc_info *sv = target_service(tg, t);
		if (sv && svc_usable(sv, tg->management) && svc_has_model(sv, m))
			return (int)i;
	}
	return -1;
}

enum decided { DECIDE_ANSWERED, DECIDE_DONE, DECIDE_LATER };

/* The decision is made: report regex limits, ask the classifier if the
 * route has one. */
static void decided(struct rq *r)
{
	struct server *s = r->s;
	r->decided = true;
	r->cur = -1;
	if (r->d.regex_limited) {
		char l[200], rule[POLICY_NAME_MAX * 2];
		metrics_label(rule, sizeof rule, r->d.regex_limited_rule);
		snprintf(l, sizeof l, "route=\"%s\",rule=\"%s\"", r->d.route->name, rule);
		metrics_add(s->m, "spark_router_regex_limit_total", l, r->d.regex_limited);
		log_warn("regex_limit", "request_id=%s route=%s rule=%s matches=%d note=%s", r->id,
			 r->d.route->name, r->d.regex_limited_rule, r->d.regex_limited,
			 log_q("the rule's regex hit its match limit and counts as no match"));
	}
	if (!r->d.pending) {
		observe_overhead(r);
		return;
	}
	if (start_judge(r) < 0) {
		classifier_pick(r->g->p, NULL, 0, 0, "the request to it could not be made", &r->d);
		judge_metric(r, "error");
		observe_overhead(r);
	}
}

/* After the decision: the answer of /v1/decision, or the first attempt. */
static void go_on(struct rq *r)
{
	if (r->d.pending)
		return;
	if (r->ep == EP_DECISION)
		answer_decision(r);
	else
		begin_attempt(r);
}

static void no_route(struct rq *r)
{
	char m[400];
	snprintf(m, sizeof m,
		 "the model '%.200s' does not exist here: GET /v1/models lists the routes of this spark-router",
		 r->ri.model);
	answer_error(r, 404, "invalid_request_error", "model_not_found", m);
}

static const char *snap_lookup(void *ctx, const char *name)
{
	struct rq *r = ctx;
	for (size_t i = 0; i < r->nhs; i++)
		if (!strcasecmp(r->hs[i].name, name))
			return r->hs[i].value;
	return NULL;
}

static void snap_free(struct rq *r)
{
	for (size_t i = 0; i < r->nhs; i++)
		free(r->hs[i].value);
	r->nhs = 0;
}

/* In the thread pool: only the request's own req_info, header copies and
 * decision, and its generation's immutable policy. */
static void decide_work(uv_work_t *w)
{
	struct rq *r = w->data;
	uint64_t rng = 0; /* a rules route draws nothing */
	r->work_rc = route_decide_live(r->g->p, &r->ri, snap_lookup, r, &rng, NULL, &r->d);
}

static void decide_done(uv_work_t *w, int status)
{
	(void)status;
	struct rq *r = w->data;
	r->handles--;
	snap_free(r);
	if (r->mhd_done) {
		rq_maybe_free(r);
		return;
	}
	if (r->client_gone)
		return;
	if (r->work_rc < 0) {
		no_route(r);
	} else {
		decided(r);
		go_on(r);
	}
	if (r->response_ready)
		resume(r);
}

/* Decide rt (a rules route with regexes) in the thread pool: its regexes may
 * take up to their limits' time (docs/router.md), the loop goes on. */
static int decide_later(struct rq *r, const struct route *rt)
{
	for (size_t i = 0; i < rt->n_rules; i++) {
		const char *h = rt->rules[i].when.header_name;
		if (!h)
			continue;
		const char *v = MHD_lookup_connection_value(r->c, MHD_HEADER_KIND, h);
		r->hs[r->nhs].name = h;
		r->hs[r->nhs].value = v ? strdup(v) : NULL;
		if (v && !r->hs[r->nhs].value) {
			snap_free(r);
			return -ENOMEM;
		}
		r->nhs++;
	}
	r->work.data = r;
	if (uv_queue_work(r->s->loop, &r->work, decide_work, decide_done) < 0) {
		snap_free(r);
		return -ENOMEM;
	}
	r->handles++;
	return 0;
}

/* Parse and decide: DECIDE_ANSWERED when an error answer was made,
 * DECIDE_LATER when decide_done goes on. */
static enum decided parse_and_decide(struct rq *r, enum req_kind kind)
{
	struct server *s = r->s;
	char err[300];
	if (req_parse(r->body ? r->body : "", r->blen, kind, &r->ri, &r->json, err, sizeof err) < 0) {
		answer_error(r, 400, "invalid_request_error", "invalid_request", err);
		return DECIDE_ANSWERED;
	}
	r->have_ri = true;
	const struct route *rt = policy_route(r->g->p, r->ri.model);
	if (!rt && r->g->p->default_route)
		rt = policy_route(r->g->p, r->g->p->default_route);
	uint64_t *rng = rt ? &r->g->rng[rt - r->g->p->routes] : &r->g->rng[0];
	r->skey = rt ? session_of(r, rt) : 0;
	int pin = r->skey ? sessions_get(s->sess, r->skey, util_now_ms()) : -1;
	struct resolved pv = {0};
	if (pin >= 0 && (size_t)pin < r->g->p->n_targets)
		target_resolve(r->g->p, pin, svcs(s), &pv);
	int st = rt ? -1 : service_model_target(r->g, svcs(s), r->ri.model);
	if (pin >= 0 && pv.usable && r->g->ts[pin].cooled_until_ms <= util_now_ms()) {
		decision_pin(r->g->p, rt, pin, &r->d);
	} else if (st >= 0) {
		decision_pin(r->g->p, &r->g->svc_route[st], st, &r->d);
		util_strlcpy(r->d.rule, "service_model", sizeof r->d.rule);
		snprintf(r->d.reason, sizeof r->d.reason,
			 "no route is named \"%.64s\", but service %s (target %s) serves that model",
			 r->ri.model, r->g->p->targets[st].service, r->g->p->targets[st].name);
	} else if (route_has_regex(rt) && decide_later(r, rt) == 0) {
		return DECIDE_LATER;
	} else if (route_decide_live(r->g->p, &r->ri, hdr_lookup, r->c, rng, svcs(s), &r->d) < 0) {
		no_route(r);
		return DECIDE_ANSWERED;
	}
	decided(r);
	return DECIDE_DONE;
}

static void answer_decision(struct rq *r)
{
	json_t *o = decision_json(r->g->p, &r->d, svcs(r->s));
	json_object_set_new(o, "request_id", json_string(r->id));
	json_object_set_new(o, "request",
			    json_pack("{s:s, s:I, s:I, s:b, s:b, s:b}", "model", r->ri.model,
				      "tokens_estimated", (json_int_t)r->ri.tokens, "characters",
				      (json_int_t)r->ri.chars, "tools", r->ri.tools, "images",
				      r->ri.images, "stream", r->ri.stream));
	answer_json(r, 200, o);
}

static void do_decision(struct rq *r)
{
	const char *b = r->body ? r->body : "";
	enum req_kind k = memmem(b, r->blen, "\"messages\"", 10) ? REQ_CHAT : REQ_COMPLETIONS;
	if (parse_and_decide(r, k) == DECIDE_DONE)
		go_on(r);
}

static void do_proxy(struct rq *r)
{
	if (parse_and_decide(r, r->ep == EP_CHAT ? REQ_CHAT : REQ_COMPLETIONS) == DECIDE_DONE)
		go_on(r);
}

static bool authorized(struct server *s, struct MHD_Connection *c)
{
	if (s->g->p->n_api_keys == 0)
		return true;
	const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	if (!a || strncasecmp(a, "Bearer ", 7))
		return false;
	unsigned char h[32];
	unsigned int hl = 0;
	if (!EVP_Digest(a + 7, strlen(a + 7), h, &hl, EVP_sha256(), NULL))
		return false;
	int ok = 0;
	for (size_t i = 0; i < s->g->p->n_api_keys; i++)
		ok |= CRYPTO_memcmp(h, s->g->keyhash[i], 32) == 0;
	return ok;
}

static bool valid_id(const char *v)
{
	size_t n = v ? strlen(v) : 0;
	if (n == 0 || n > 64)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:", v[i]))
			return false;
	return true;
}

static enum MHD_Result queue_ready(struct rq *r)
{
	enum MHD_Result q = MHD_queue_response(r->c, r->resp_code, r->resp);
	MHD_destroy_response(r->resp);
	r->resp = NULL;
	return q;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **con_cls)
{
	(void)version;
	struct server *s = cls;
	struct rq *r = *con_cls;
	if (!r) {
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
		if (ci && ci->socket_context)
			((struct connrec *)ci->socket_context)->got_request = 1;
		r = calloc(1, sizeof *r);
		if (!r)
			return MHD_NO;
		r->s = s;
		r->g = s->g;
		r->g->refs++;
		r->c = c;
		r->cur = -1;
		r->t0 = now_ns();
		*con_cls = r;
		const char *rid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Request-Id");
		if (valid_id(rid)) {
			util_strlcpy(r->id, rid, sizeof r->id);
		} else {
			if (s->rnd_off + 6 > sizeof s->rnd) {
				if (RAND_bytes(s->rnd, sizeof s->rnd) != 1)
					memset(s->rnd, 0, sizeof s->rnd);
				s->rnd_off = 0;
			}
			const unsigned char *rnd = s->rnd + s->rnd_off;
			s->rnd_off += 6;
			snprintf(r->id, sizeof r->id, "req-%02x%02x%02x%02x%02x%02x-%llu", rnd[0], rnd[1],
				 rnd[2], rnd[3], rnd[4], rnd[5], (unsigned long long)++s->next_id);
		}
		static const struct {
			const char *method, *path;
			enum ep ep;
		} eps[] = {
			{"POST", "/v1/chat/completions", EP_CHAT},
			{"POST", "/v1/completions", EP_COMPLETIONS},
			{"POST", "/v1/decision", EP_DECISION},
			{"GET", "/v1/models", EP_MODELS},
			{"GET", "/health", EP_HEALTH},
			{"GET", "/metrics", EP_METRICS},
		};
		bool path_known = false;
		for (size_t i = 0; i < ARRAY_SIZE(eps); i++)
			if (!strcmp(url, eps[i].path)) {
				path_known = true;
				if (!strcmp(method, eps[i].method))
					r->ep = eps[i].ep;
			}
		if (r->ep == EP_NONE) {
			if (path_known)
				answer_error(r, 405, "invalid_request_error", "method_not_allowed",
					     "wrong method for this path");
			else
				answer_error(r, 404, "invalid_request_error", "not_found",
					     "no such endpoint: spark-router serves /v1/chat/completions, /v1/completions, /v1/models, /v1/decision, /health and /metrics");
		} else if (r->ep != EP_HEALTH && !authorized(s, c)) {
			answer_error(r, 401, "authentication_error", "invalid_api_key",
				     "missing or wrong API key: send Authorization: Bearer KEY with a key of the policy's api_keys");
		} else if (!strcmp(method, "POST")) {
			const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
			if (cl && strtoll(cl, NULL, 10) > r->g->p->max_body_bytes)
				answer_error(r, 413, "invalid_request_error", "request_too_large",
					     "the request body is larger than the policy's max_body_bytes");
		}
		if (r->response_ready)
			return queue_ready(r);
		return MHD_YES;
	}
	if (*upload_size) {
		size_t n = *upload_size;
		*upload_size = 0;
		if (r->response_ready || r->too_large ||
		    r->blen + n > (size_t)r->g->p->max_body_bytes) {
			r->too_large = true;
			return MHD_YES;
		}
		if (r->blen + n + 1 > r->bcap) {
			size_t cap = r->bcap ? r->bcap : 4096;
			while (cap < r->blen + n + 1)
				cap *= 2;
			char *nb = realloc(r->body, cap);
			if (!nb)
				return MHD_NO;
			r->body = nb;
			r->bcap = cap;
		}
		memcpy(r->body + r->blen, upload, n);
		r->blen += n;
		r->body[r->blen] = 0;
		return MHD_YES;
	}
	if (r->response_ready)
		return queue_ready(r);
	if (r->client_gone)
		return MHD_NO;
	if (r->started) { /* resumed with nothing to say yet */
		suspend(r);
		return MHD_YES;
	}
	r->started = true;
	r->t_body = now_ns();
	if (r->too_large) {
		answer_error(r, 413, "invalid_request_error", "request_too_large",
			     "the request body is larger than the policy's max_body_bytes");
	} else {
		switch (r->ep) {
		case EP_HEALTH:
			answer(r, 200, "application/json", strdup("{\"status\":\"ok\"}"), 15);
			break;
		case EP_METRICS:
			do_metrics(r);
			break;
		case EP_MODELS:
			do_models(r);
			break;
		case EP_DECISION:
			do_decision(r);
			break;
		case EP_CHAT:
		case EP_COMPLETIONS:
			do_proxy(r);
			break;
		case EP_NONE:
			break;
		}
	}
	if (r->response_ready)
		return queue_ready(r);
	suspend(r);
	return MHD_YES;
}

static void rq_maybe_free(struct rq *r)
{
	if (!r->mhd_done || r->handles > 0 || r->easy)
		return;
	if (r->resp)
		MHD_destroy_response(r->resp);
	if (r->have_ri)
		req_info_free(&r->ri);
	json_decref(r->json);
	free(r->body);
	free(r->up_body);
	free(r->rbuf);
	free(r->line);
	gen_unref(r->g);
	free(r);
}

/* A routing log file is written from a 64 KiB buffer at whole lines, at the
 * latest WATCH_MS after a line (on_watch) and when the router stops, not
 * with a write(2) per request. */
static void log_flush(struct server *s)
{
	if (s->log && s->log_pending) {
		fflush(s->log);
		s->log_pending = 0;
	}
}

static void log_request(struct rq *r, enum MHD_RequestTerminationCode toe)
{
	struct server *s = r->s;
	if (!r->decided || (r->ep != EP_CHAT && r->ep != EP_COMPLETIONS))
		return;
	if (r->skey && r->cur >= 0 && r->resp_code >= 200 && r->resp_code < 300 &&
	    toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
		sessions_put(s->sess, r->skey, r->cur, util_now_ms());
	uint64_t end = now_ns();
	double total = (double)(end - r->t0) / 1e9;
	double ttft = r->t_first ? (double)(r->t_first - r->t0) / 1e9 : -1;
	const char *route = r->d.route->name;
	int t = r->cur >= 0 ? r->cur : r->d.target;
	const char *target = r->g->p->targets[t].name;
	char l[192];
	snprintf(l, sizeof l, "route=\"%s\",target=\"%s\",code=\"%u\"", route, target,
		 r->resp_code ? r->resp_code : 499);
	metrics_add(s->m, "spark_router_requests_total", l, 1);
	snprintf(l, sizeof l, "route=\"%s\"", route);
	metrics_observe(s->m, "spark_router_request_duration_seconds", l, total);
	if (ttft >= 0)
		metrics_observe(s->m, "spark_router_time_to_first_token_seconds", l, ttft);
	snprintf(l, sizeof l, "target=\"%s\",kind=\"prompt\"", target);
	metrics_add(s->m, "spark_router_tokens_total", l, (double)r->prompt_tokens);
	snprintf(l, sizeof l, "target=\"%s\",kind=\"completion\"", target);
	metrics_add(s->m, "spark_router_tokens_total", l, (double)r->completion_tokens);
	if (!s->log)
		return;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct logline ll = {
		.ts = (double)ts.tv_sec + ts.tv_nsec / 1e9, .request_id = r->id,
		.model = r->ri.model, .route = route, .rule = r->d.rule, .target = target,
		.status = (int)(r->resp_code ? r->resp_code : 499), .attempts = r->attempts,
		.stream = r->ri.stream, .tokens_estimated = r->ri.tokens,
		.client_closed = toe != MHD_REQUEST_TERMINATED_COMPLETED_OK, .ms = total * 1000,
		.overhead_ms = r->overhead_s * 1000, .has_ttft = ttft >= 0, .ttft_ms = ttft * 1000,
		.upstream_error = r->up_err[0] ? r->up_err : NULL,
	};
	size_t n = logline_format(s->lline, sizeof s->lline, &ll);
	char *line = s->lline, *big = NULL;
	if (n >= sizeof s->lline) { /* a long model name: a buffer of its own */
		big = malloc(n + 1);
		if (!big)
			return;
		logline_format(big, n + 1, &ll);
		line = big;
	}
	if (s->log_pending + n > sizeof s->logbuf) /* whole lines reach the file */
		log_flush(s);
	fwrite(line, 1, n, s->log);
	s->log_pending += n;
	if (s->log == stdout) /* a terminal or a pipe: line by line */
		log_flush(s);
	free(big);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	(void)cls;
	/* the next request on this connection has idle_timeout_s for its headers */
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	if (ci && ci->socket_context) {
		struct connrec *cr = ci->socket_context;
		cr->got_request = 0;
		cr->start_ms = util_now_ms();
	}
	struct rq *r = *con_cls;
	if (!r)
		return;
	*con_cls = NULL;
	if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
		r->client_gone = true;
	waiting_unlink(r);
	dpoll_stop(r);
	cancel_upstream(r);
	log_request(r, toe);
	r->mhd_done = true;
	if (r->qtimer.data) {
		uv_timer_stop(&r->qtimer);
		uv_close((uv_handle_t *)&r->qtimer, handle_closed);
		r->qtimer.data = r; /* handle_closed reads it */
	}
	rq_maybe_free(r);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
			  enum MHD_ConnectionNotificationCode toe)
{
	struct server *s = cls;
	if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
		struct connrec *cr = calloc(1, sizeof *cr);
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
		if (!cr || !ci) {
			free(cr);
			return;
		}
		cr->fd = ci->connect_fd;
		cr->start_ms = util_now_ms();
		cr->next = s->conns.next;
		cr->prev = &s->conns;
		s->conns.next->prev = cr;
		s->conns.next = cr;
		*socket_context = cr;
	} else if (*socket_context) {
		struct connrec *cr = *socket_context;
		cr->prev->next = cr->next;
		cr->next->prev = cr->prev;
		free(cr);
		*socket_context = NULL;
	}
}

/* Clients that do not finish their request headers in idle_timeout_s are cut
 * off (MHD's own timeout is per idle period: a byte every few seconds would
 * keep a connection forever). */
static void on_sweep(uv_timer_t *t)
{
	struct server *s = t->data;
	uint64_t now = util_now_ms();
	uint64_t lim = (uint64_t)s->idle_s * 1000;
	for (struct connrec *cr = s->conns.next; cr != &s->conns; cr = cr->next)
		if (!cr->got_request && !cr->shut && now - cr->start_ms > lim) {
			shutdown(cr->fd, SHUT_RDWR);
			cr->shut = 1;
			metrics_add(s->m, "spark_router_errors_total", "code=\"header_timeout\"", 1);
		}
	mhd_kick(s);
}

/* ---- MHD on libuv ---- */

static void on_mhd_timer(uv_timer_t *t)
{
	mhd_kick(t->data);
}

/* Run MHD on the next loop iteration (from anywhere). */
static void mhd_soon(struct server *s)
{
	uv_timer_start(&s->mtimer, on_mhd_timer, 0, 0);
}

static void mhd_kick(struct server *s)
{
	MHD_run(s->d);
	MHD_UNSIGNED_LONG_LONG to = 0;
	if (MHD_get_timeout(s->d, &to) == MHD_YES)
		uv_timer_start(&s->mtimer, on_mhd_timer, to > 60000 ? 60000 : to, 0);
	else
		uv_timer_start(&s->mtimer, on_mhd_timer, 1000, 0);
}

static void on_mhd_poll(uv_poll_t *h, int status, int events)
{
	(void)status;
	(void)events;
	mhd_kick(h->data);
}

static struct gen *gen_new(struct policy *p)
{
	struct gen *g = calloc(1, sizeof *g);
	if (!g)
		return NULL;
	g->p = p;
	g->refs = 1;
	for (size_t i = 0; i < p->n_api_keys; i++) {
		unsigned int hl;
		EVP_Digest(p->api_keys[i], strlen(p->api_keys[i]), g->keyhash[i], &hl, EVP_sha256(), NULL);
	}
	for (size_t i = 0; i < p->n_targets; i++) {
		const char *env = p->targets[i].api_key_env;
		const char *k = env ? getenv(env) : NULL;
		if (env && !k)
			log_warn("target_key_missing", "target=%s env=%s", p->targets[i].name, env);
		if (k && asprintf(&g->upkey[i], "Authorization: Bearer %s", k) < 0)
			g->upkey[i] = NULL;
	}
	for (size_t i = 0; i < p->n_targets; i++) {
		struct route *rt = &g->svc_route[i];
		util_strlcpy(rt->name, p->targets[i].name, sizeof rt->name);
		rt->type = ROUTE_PASSTHROUGH;
		rt->target = (int)i;
		snprintf(g->tlabel[i], sizeof g->tlabel[i], "target=\"%s\"", p->targets[i].name);
	}
	for (size_t i = 0; i < p->n_routes; i++) {
		uint64_t seed = p->routes[i].seed;
		if (!p->routes[i].has_seed)
			RAND_bytes((unsigned char *)&seed, sizeof seed);
		g->rng[i] = seed;
	}
	return g;
}

/* Free a generation but not its policy (start-up failures: the caller keeps it). */
static void gen_drop(struct gen *g)
{
	for (size_t i = 0; g && i < g->p->n_targets; i++)
		free(g->upkey[i]);
	free(g);
}

static void gen_unref(struct gen *g)
{
	if (--g->refs > 0)
		return;
	for (size_t i = 0; i < g->p->n_targets; i++)
		free(g->upkey[i]);
	policy_free(g->p);
	OPENSSL_cleanse(g->keyhash, sizeof g->keyhash);
	free(g);
}

/* Which targets are usable now: a gauge each, and a log line when one changes. */
static void targets_check(struct server *s, bool quiet)
{
	const struct policy *p = s->g->p;
	for (size_t i = 0; i < p->n_targets; i++) {
		const struct target *tg = &p->targets[i];
		struct resolved rv;
		target_resolve(p, (int)i, svcs(s), &rv);
		char l[128];
		snprintf(l, sizeof l, "target=\"%s\"", tg->name);
		metrics_set(s->m, "spark_router_target_usable", l, rv.usable);
		bool ignored = !strcmp(rv.state, "other_owner");
		if (ignored && !s->ignored[i])
			log_warn("service_target_ignored", "target=%s service=%s owner=%s want_owner=%s "
				 "why=%s", tg->name, tg->service, log_q(rv.owner ? rv.owner : ""),
				 log_q(tg->owner ? tg->owner : ""),
				 log_q("the service belongs to another user than the target's owner:"));
		s->ignored[i] = ignored;
		if (rv.usable == s->usable[i])
			continue;
		s->usable[i] = rv.usable;
		if (quiet || tg->kind != TARGET_SERVICE)
			continue;
		if (rv.usable)
			log_info("service_target_up", "target=%s service=%s url=%s max_context=%lld",
				 tg->name, tg->service, log_q(rv.base), rv.max_context);
		else
			log_warn("service_target_down", "target=%s service=%s state=%s", tg->name,
				 tg->service, rv.state);
	}
}

static void on_cluster_change(void *arg)
{
	targets_check(arg, false);
}

/* Follow the cluster's services while the policy has service targets. */
static int cluster_follow(struct server *s)
{
	bool want = policy_has_service_targets(s->g->p);
	if (want && !s->cl) {
		s->cl = cluster_new(s->loop, s->sock, on_cluster_change, s);
		if (!s->cl)
			return -errno;
		log_info("sparkd_watch_start", "socket=%s", log_q(s->sock));
	} else if (!want && s->cl) {
		cluster_free(s->cl);
		s->cl = NULL;
	}
	if (s->cl)
		cluster_set_grace(s->cl, (unsigned)s->g->p->services_grace_s);
	return 0;
}

int server_reload(struct server *s, struct policy *p)
{
	struct gen *g = gen_new(p);
	if (!g)
		return -ENOMEM;
	struct sessions *ns = sessions_new((size_t)p->max_sessions, (uint64_t)p->session_ttl_s * 1000);
	if (!ns) {
		gen_drop(g);
		return -ENOMEM;
	}
	struct gen *old = s->g;
	s->g = g;
	/* pins name targets by index in the old policy */
	sessions_free(s->sess);
	s->sess = ns;
	for (size_t i = 0; i < p->n_targets; i++)
		target_gauges(s, g, (int)i);
	gen_unref(old);
	memset(s->usable, 0, sizeof s->usable);
	memset(s->ignored, 0, sizeof s->ignored);
	if (cluster_follow(s) < 0)
		log_error("sparkd_watch_failed", "socket=%s error=%s", log_q(s->sock), log_q(strerror(errno)));
	targets_check(s, false);
	return 0;
}

int server_is_loopback(const char *host)
{
	struct in_addr a4;
	struct in6_addr a6;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &a6) == 1)
		return IN6_IS_ADDR_LOOPBACK(&a6);
	return 0;
}

int server_start(uv_loop_t *loop, struct policy *p, const struct server_opts *o,
		 struct server **out, char *err, size_t errlen)
{
	const char *listen = o->listen ? o->listen : p->listen;
	char host[256], lb[300];
	int port = 0;
	/* HOST:0 binds a free port (server_port tells which) */
	util_strlcpy(lb, listen, sizeof lb);
	size_t ll = strlen(lb);
	bool any_port = ll > 2 && !strcmp(lb + ll - 2, ":0");
	if (any_port)
		lb[ll - 2] = 0;
	if (util_split_hostport(lb, 4000, host, sizeof host, &port) < 0) {
		snprintf(err, errlen, "bad listen address %s: give HOST:PORT with a numeric host", listen);
		return -EINVAL;
	}
	if (any_port)
		port = 0;
	struct sockaddr_storage ss = {0};
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
	unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_TURBO;
	if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
	} else if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		flags |= MHD_USE_IPv6;
	} else {
		snprintf(err, errlen, "listen address %s: the host must be a numeric IPv4 or IPv6 address", listen);
		return -EINVAL;
	}
	if (!server_is_loopback(host) && p->n_api_keys == 0) {
		snprintf(err, errlen,
			 "refusing to listen on %s without api_keys in the policy (no open proxy): add api_keys or listen on 127.0.0.1",
			 listen);
		return -EPERM;
	}
	struct server *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	s->loop = loop;
	s->g = gen_new(p);
	if (!s->g) {
		free(s);
		return -ENOMEM;
	}
	s->conns.next = s->conns.prev = &s->conns;
	s->rnd_off = sizeof s->rnd;
	s->idle_s = p->idle_timeout_s;
	const char *lp = o->log_path ? o->log_path : p->log_path;
	if (lp) {
		s->log = strcmp(lp, "-") ? fopen(lp, "a") : stdout;
		if (!s->log) {
			snprintf(err, errlen, "cannot open the routing log %s: %s (create its directory, or change log: in the policy or --log)", lp, strerror(errno));
			gen_drop(s->g);
			free(s);
			return -errno;
		}
		if (s->log != stdout)
			setvbuf(s->log, s->logbuf, _IOFBF, sizeof s->logbuf);
	}
	s->m = metrics_new();
	metrics_family(s->m, "spark_router_requests_total", METRIC_COUNTER,
		       "Requests proxied, by route, target and HTTP status (499: client closed)");
	metrics_family(s->m, "spark_router_errors_total", METRIC_COUNTER,
		       "Error answers and refused connections, by code");
	metrics_family(s->m, "spark_router_upstream_attempts_total", METRIC_COUNTER,
		       "Upstream attempts by target and outcome");
	metrics_family(s->m, "spark_router_tokens_total", METRIC_COUNTER,
		       "Tokens reported by upstreams (usage), by target and kind");
	metrics_family(s->m, "spark_router_request_duration_seconds", METRIC_HISTOGRAM,
		       "Whole request time, by route");
	metrics_family(s->m, "spark_router_time_to_first_token_seconds", METRIC_HISTOGRAM,
		       "Time to the first answer byte (streams: first chunk), by route");
	metrics_family(s->m, "spark_router_routing_overhead_seconds", METRIC_HISTOGRAM,
		       "Time to parse a request and decide its target, by route type");
	metrics_family(s->m, "spark_router_regex_limit_total", METRIC_COUNTER,
		       "Rule regex matches that hit a match limit (counted as no match), by route and rule");
	metrics_family(s->m, "spark_router_classifier_total", METRIC_COUNTER,
		       "Classifier calls by route and outcome (ok; else the default target was used)");
	metrics_family(s->m, "spark_router_target_cooled", METRIC_GAUGE,
		       "1 while a target is cooled down after repeated failures");
	metrics_family(s->m, "spark_router_inflight", METRIC_GAUGE, "Upstream requests in flight, by target");
	metrics_family(s->m, "spark_router_queue_depth", METRIC_GAUGE, "Requests waiting for a target slot");
	metrics_family(s->m, "spark_router_target_usable", METRIC_GAUGE,
		       "1 while a target can be sent requests (a service target: its service is ready)");
	for (size_t i = 0; i < p->n_targets; i++)
		target_gauges(s, s->g, (int)i);
	s->up = upstream_new(loop, on_upstream_done, s);
	s->sess = sessions_new((size_t)p->max_sessions, (uint64_t)p->session_ttl_s * 1000);
	s->d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, on_request, s,
				MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
				MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
				MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
				MHD_OPTION_CONNECTION_LIMIT, (unsigned)p->max_connections,
				MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)p->idle_timeout_s,
				MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)65536,
				MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
				MHD_OPTION_END);
	if (!s->d || !s->up || !s->sess) {
		snprintf(err, errlen, "cannot listen on %s: %s (another program may hold the port: choose another --listen)", listen, strerror(errno));
		if (s->d)
			MHD_stop_daemon(s->d);
		metrics_free(s->m);
		gen_drop(s->g);
		free(s);
		return -EADDRINUSE;
	}
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
	s->port = di ? di->port : port;
	di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_EPOLL_FD);
	uv_poll_init(loop, &s->mpoll, di->epoll_fd);
	s->mpoll.data = s;
	uv_poll_start(&s->mpoll, UV_READABLE, on_mhd_poll);
	uv_timer_init(loop, &s->mtimer);
	s->mtimer.data = s;
	uv_timer_init(loop, &s->sweep);
	s->sweep.data = s;
	uv_timer_start(&s->sweep, on_sweep, 1000, 1000);
	uv_timer_init(loop, &s->watch);
	s->watch.data = s;
	uv_timer_start(&s->watch, on_watch, WATCH_MS, WATCH_MS);
	s->sock = strdup(o->control_socket ? o->control_socket : SPARK_DEFAULT_SOCKET);
	if (!s->sock || cluster_follow(s) < 0) {
		snprintf(err, errlen, "cannot follow the cluster's services on %s: %s", s->sock ? s->sock : "", strerror(errno));
		return -EINVAL;
	}
	targets_check(s, true);
	mhd_kick(s);
	*out = s;
	return 0;
}

int server_port(const struct server *s)
{
	return s->port;
}

void server_stop(struct server *s)
{
	if (!s)
		return;
	uv_poll_stop(&s->mpoll);
	uv_timer_stop(&s->mtimer);
	uv_timer_stop(&s->sweep);
	uv_timer_stop(&s->watch);
	/* MHD must not be stopped with suspended connections; at exit the
	 * process goes away with them, so only the listening socket is closed. */
	MHD_quiesce_daemon(s->d);
	cluster_free(s->cl);
	s->cl = NULL;
	log_flush(s);
	if (s->log && s->log != stdout)
		fclose(s->log);
	s->log = NULL;
}

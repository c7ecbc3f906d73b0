/* serve_http.c - spark-decode --serve: the HTTP server of rank 0 and the
 * lockstep loop of every rank.
 *
 * Rank 0 runs libmicrohttpd with a thread per connection (bounded by
 * --max-conns): a connection's thread parses its request, puts it in a FIFO
 * queue of at most --queue waiting requests (429 beyond) and waits for its
 * tokens. The main thread is the decoder: it takes the oldest request,
 * broadcasts it to the other ranks (a header of 8 int64 and the prompt ids,
 * sc_broadcast from rank 0), and all ranks run dec_generate together. While
 * idle it broadcasts a no-op every second so the other ranks' collective
 * timeout never fires. SIGTERM (a sigwait thread) drains: the running request
 * finishes, queued and new ones get 503, /health says 503, then rank 0
 * broadcasts EXIT, waits for the last answers to leave and returns 0.
 *
 * Request heads (issue 27): MHD's CONNECTION_TIMEOUT (--idle-timeout) is an
 * idle timeout that every byte resets, so a client trickling its headers a
 * byte a second would hold a connection, and its thread, for ever. Every
 * connection is therefore tracked from MHD's NOTIFY_CONNECTION: its head is
 * "pending" from the accept (or from its last answer, on a kept-alive
 * connection) until on_request's first call. A reaper thread answers a head
 * pending longer than --head-timeout with 408 and shuts the socket down, and
 * at most half of --max-conns heads may be pending at once: beyond that the
 * oldest make room (408 too), once they have been pending for a second (a
 * burst of clients whose headers are on their way must not push each other
 * out; the reaper enforces the budget every tick). The reaper writes and shuts
 * down only its own dup of the socket, taken when the connection started and
 * closed when MHD says it closed, so a descriptor that MHD closed and the
 * kernel handed to someone else is never touched. No per-address limit: the
 * usual client is spark-router, all requests from one address. */
#include "serve.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdint.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { ST_LOADING = 0, ST_READY, ST_DRAINING };
enum { MSG_NOOP = 0, MSG_REQUEST = 1, MSG_EXIT = 2 };
enum { EP_NONE = 0, EP_COMPLETIONS, EP_CHAT, EP_MODELS, EP_HEALTH };
#define HDR_N 8
#define STREAM_WAKE_S 0.002 /* a waiting stream is woken at most every 2 ms */
#define HEAD_GRACE_S 1.0    /* a pending head is not pushed out before this age */

typedef struct job {
	serve_req_t req;
	char id[48];
	long long created;
	int *ids;                 /* generated so far [req.max_tokens] */
	int n_ids;
	char *text;               /* their text (byte-level stand-in) */
	size_t text_len, text_cap;
	serve_utf8_t utf;
	int started, done, failed;
	serve_err_t err;          /* when failed */
	const char *finish;
	double t0;
	int refs;                 /* the connection and the queue/decoder */
	pthread_cond_t cv;        /* started, done, or (to a waiting stream) tokens */
	int waiters;              /* stream readers waiting for tokens */
	double woke;              /* when a waiting stream was last woken */
	struct job *next;
	/* the stream's cursor (connection thread only) */
	int stage, sent_ids;
	size_t sent_text;
	char *out;
	size_t out_len, out_off;
} job_t;

typedef struct conn {
	int ep;
	char *body;
	size_t len, cap;
	int too_large;
	job_t *job;
} conn_t;

static struct server {
	pthread_mutex_t mu;
	pthread_cond_t work, prog;
	job_t *head, *tail;
	int waiting, running, state, active;
	struct MHD_Daemon *d;
	serve_opts_t o;
	serve_limits_t lim;
	unsigned long long next_id;
	sc_comm_t *comm;
	int world;
} S = {.mu = PTHREAD_MUTEX_INITIALIZER,
       .work = PTHREAD_COND_INITIALIZER,
       .prog = PTHREAD_COND_INITIALIZER};

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void head_done(struct MHD_Connection *c);
static void head_again(struct MHD_Connection *c);
static void logf_(const char *fmt, ...)
{
	char line[1024];
	int n = snprintf(line, sizeof(line), "prog=spark-decode ");
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	strcat(line, "\n");
	fputs(line, stderr); /* one write per line: threads do not interleave */
}

static void job_unref(job_t *j) /* S.mu held */
{
	if (--j->refs > 0)
		return;
	serve_req_free(&j->req);
	pthread_cond_destroy(&j->cv);
	free(j->ids);
	free(j->text);
	free(j->out);
	free(j);
}

/* ---- answers -------------------------------------------------------------- */

static enum MHD_Result send_buf(struct MHD_Connection *c, int status, char *buf, size_t len,
                                const char *ctype, int retry_after)
{
	struct MHD_Response *r;
	enum MHD_Result q;
	if (!buf)
		return MHD_NO;
	r = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(buf);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", ctype);
	if (retry_after)
		MHD_add_response_header(r, "Retry-After", "1");
	q = MHD_queue_response(c, (unsigned)status, r);
	MHD_destroy_response(r);
	return q;
}

static enum MHD_Result send_error(struct MHD_Connection *c, const serve_err_t *e)
{
	size_t len;
	char *s = serve_error_json(e, &len);
	return send_buf(c, e->status, s, len, "application/json",
	                e->status == 429 || e->status == 503);
}

static enum MHD_Result send_err(struct MHD_Connection *c, int status, const char *type,
                                const char *code, const char *msg)
{
	serve_err_t e;
	serve_set_error(&e, status, type, code, NULL, "%s", msg);
	return send_error(c, &e);
}

static void out_of(const job_t *j, serve_out_t *o)
{
	memset(o, 0, sizeof(*o));
	o->kind = j->req.kind;
	o->id = j->id;
	o->created = j->created;
	o->model = S.lim.model_id;
	o->finish = j->finish;
	o->prompt_tokens = j->req.n_prompt;
	o->completion_tokens = j->n_ids;
}

/* ---- streaming ------------------------------------------------------------ */

/* The next SSE event of a stream into j->out, waiting for tokens; 0 at the end. */
static int next_event(job_t *j)
{
	serve_out_t o;
	out_of(j, &o);
	free(j->out);
	j->out = NULL;
	j->out_len = j->out_off = 0;
	switch (j->stage) {
	case 0: /* chat: the role first, before any token */
		j->stage = 1;
		if (j->req.kind == SERVE_CHAT) {
			o.finish = NULL;
			j->out = serve_chunk_sse(&o, 1, &j->out_len);
			return 1;
		}
		/* fall through */
	case 1:
		j->waiters++;
		while (j->n_ids == j->sent_ids && !j->done)
			pthread_cond_wait(&j->cv, &S.mu);
		j->waiters--;
		out_of(j, &o);
		if (j->n_ids > j->sent_ids) {
			o.finish = NULL;
			o.text = j->text + j->sent_text;
			o.text_len = j->text_len - j->sent_text;
			o.ids = j->ids + j->sent_ids;
			o.n_ids = j->n_ids - j->sent_ids;
			j->sent_ids = j->n_ids;
			j->sent_text = j->text_len;
			j->out = serve_chunk_sse(&o, 0, &j->out_len);
			return 1;
		}
		j->stage = 2;
		if (j->failed) { /* after the 200: the error as an event, then [DONE] */
			j->out = serve_error_json(&j->err, &j->out_len);
			if (j->out) {
				char *ev = malloc(j->out_len + 9);
				if (ev)
					snprintf(ev, j->out_len + 9, "data: %s\n\n", j->out);
				free(j->out);
				j->out = ev;
				j->out_len = ev ? strlen(ev) : 0;
			}
			j->stage = 4;
			return 1;
		}
		/* the last chunk: no text, the finish reason (the text's tail, if
		 * a split UTF-8 sequence was flushed, rides along) */
		o.text = j->text + j->sent_text;
		o.text_len = j->text_len - j->sent_text;
		j->out = serve_chunk_sse(&o, 0, &j->out_len);
		j->stage = j->req.include_usage ? 3 : 4;
		return 1;
	case 3:
		j->out = serve_usage_sse(&o, &j->out_len);
		j->stage = 4;
		return 1;
	case 4:
		j->out = strdup("data: [DONE]\n\n");
		j->out_len = j->out ? strlen(j->out) : 0;
		j->stage = 5;
		return 1;
	default:
		return 0;
	}
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	job_t *j = cls;
	size_t n;
	(void)pos;
	pthread_mutex_lock(&S.mu);
	while (j->out_off >= j->out_len) {
		if (!next_event(j)) {
			pthread_mutex_unlock(&S.mu);
			return MHD_CONTENT_READER_END_OF_STREAM;
		}
		if (!j->out) {
			pthread_mutex_unlock(&S.mu);
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
	}
	n = j->out_len - j->out_off;
	if (n > max)
		n = max;
	memcpy(buf, j->out + j->out_off, n);
	j->out_off += n;
	pthread_mutex_unlock(&S.mu);
	return (ssize_t)n;
}

static void stream_free(void *cls)
{
	pthread_mutex_lock(&S.mu);
	job_unref(cls);
	pthread_mutex_unlock(&S.mu);
}

/* ---- requests ------------------------------------------------------------- */

static enum MHD_Result generate(struct MHD_Connection *c, conn_t *cn)
{
	serve_req_t req;
	serve_err_t e;
	job_t *j;
	size_t len;
	char *s;

	if (cn->too_large)
		return send_err(c, 413, "invalid_request_error", "request_too_large",
		                "the request body is larger than this server's --max-body");
	if (serve_parse_request(cn->ep == EP_CHAT ? SERVE_CHAT : SERVE_COMPLETIONS,
	                        cn->body ? cn->body : "", cn->len, &S.lim, &req, &e) < 0)
		return send_error(c, &e);
	if (!(j = calloc(1, sizeof(*j))) || !(j->ids = calloc((size_t)req.max_tokens, sizeof(int)))) {
		free(j);
		serve_req_free(&req);
		return send_err(c, 500, "server_error", NULL, "out of memory");
	}
	j->req = req;
	j->refs = 1;
	pthread_cond_init(&j->cv, NULL);
	j->created = (long long)time(NULL);
	j->t0 = dec_now();
	pthread_mutex_lock(&S.mu);
	if (S.state != ST_READY) {
		int st = S.state;
		pthread_mutex_unlock(&S.mu);
		job_unref(j);
		return st == ST_LOADING
		               ? send_err(c, 503, "server_error", "loading", "the model is still loading")
		               : send_err(c, 503, "server_error", "shutting_down",
		                          "the server is shutting down");
	}
	if (S.waiting + S.running > S.o.queue) { /* the running one and --queue waiting */
		int q = S.waiting;
		pthread_mutex_unlock(&S.mu);
		job_unref(j);
		serve_set_error(&e, 429, "requests", "rate_limit_exceeded", NULL,
		                "the queue is full (%d waiting): retry later", q);
		return send_error(c, &e);
	}
	snprintf(j->id, sizeof(j->id), "%s-%llu", req.kind == SERVE_CHAT ? "chatcmpl" : "cmpl",
	         ++S.next_id);
	j->refs = 2;
	if (S.tail)
		S.tail->next = j;
	else
		S.head = j;
	S.tail = j;
	S.waiting++;
	pthread_cond_signal(&S.work);
	/* wait until it runs (a stream's 200 goes out then) or ends */
	while (!(j->started || j->done))
		pthread_cond_wait(&j->cv, &S.mu);
	if (j->failed && j->n_ids == 0) {
		e = j->err;
		job_unref(j);
		pthread_mutex_unlock(&S.mu);
		return send_error(c, &e);
	}
	if (j->req.stream) {
		struct MHD_Response *r;
		enum MHD_Result q;
		pthread_mutex_unlock(&S.mu);
		r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, j,
		                                      stream_free);
		if (!r) {
			stream_free(j);
			return MHD_NO;
		}
		MHD_add_response_header(r, "Content-Type", "text/event-stream");
		MHD_add_response_header(r, "Cache-Control", "no-cache");
		q = MHD_queue_response(c, MHD_HTTP_OK, r);
		MHD_destroy_response(r);
		return q;
	}
	while (!j->done)
		pthread_cond_wait(&j->cv, &S.mu);
	if (j->failed) {
		e = j->err;
		job_unref(j);
		pthread_mutex_unlock(&S.mu);
		return send_error(c, &e);
	}
	{
		serve_out_t o;
		out_of(j, &o);
		o.text = j->text;
		o.text_len = j->text_len;
		o.ids = j->ids;
		o.n_ids = j->n_ids;
		s = serve_answer_json(&o, &len);
	}
	job_unref(j);
	pthread_mutex_unlock(&S.mu);
	return send_buf(c, 200, s, len, "application/json", 0);
}

/* Authorization: Bearer KEY, compared in constant time */
static int authorized(struct MHD_Connection *c)
{
	const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	size_t kl, hl;
	unsigned char d = 0;
	if (!S.o.api_key)
		return 1;
	if (!h || strncasecmp(h, "Bearer ", 7) != 0)
		return 0;
	h += 7;
	kl = strlen(S.o.api_key);
	hl = strlen(h);
	for (size_t i = 0; i < kl; i++)
		d |= (unsigned char)(S.o.api_key[i] ^ (i < hl ? h[i] : 0));
	return d == 0 && hl == kl;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
	static const struct {
		const char *method, *path;
		int ep;
	} eps[] = {
		{"POST", "/v1/completions", EP_COMPLETIONS},
		{"POST", "/v1/chat/completions", EP_CHAT},
		{"GET", "/v1/models", EP_MODELS},
		{"GET", "/health", EP_HEALTH},
	};
	conn_t *cn = *con_cls;
	(void)cls;
	(void)version;

	if (!cn) {
		int known = 0;
		const char *cl;
		head_done(c);
		if (!(cn = calloc(1, sizeof(*cn))))
			return MHD_NO;
		*con_cls = cn;
		pthread_mutex_lock(&S.mu);
		S.active++;
		pthread_mutex_unlock(&S.mu);
		for (size_t i = 0; i < sizeof(eps) / sizeof(eps[0]); i++)
			if (strcmp(url, eps[i].path) == 0) {
				known = 1;
				if (strcmp(method, eps[i].method) == 0)
					cn->ep = eps[i].ep;
			}
		if (cn->ep == EP_NONE)
			return known ? send_err(c, 405, "invalid_request_error", "method_not_allowed",
			                        "wrong method for this path")
			             : send_err(c, 404, "invalid_request_error", "not_found",
			                        "no such endpoint: spark-decode serves POST "
			                        "/v1/completions, POST /v1/chat/completions, GET "
			                        "/v1/models and GET /health");
		if (cn->ep != EP_HEALTH && !authorized(c)) {
			serve_err_t e;
			serve_set_error(&e, 401, "invalid_request_error", "invalid_api_key", NULL,
			                "missing or wrong API key: send Authorization: Bearer KEY");
			return send_error(c, &e);
		}
		cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
		if (cl && strtoll(cl, NULL, 10) > S.o.max_body)
			return send_err(c, 413, "invalid_request_error", "request_too_large",
			                "the request body is larger than this server's --max-body");
		return MHD_YES;
	}
	if (*upload_size) {
		size_t n = *upload_size;
		*upload_size = 0;
		if (cn->too_large || cn->len + n > (size_t)S.o.max_body) {
			cn->too_large = 1;
			return MHD_YES;
		}
		if (serve_buf_append(&cn->body, &cn->len, &cn->cap, upload, n) < 0)
			return MHD_NO;
		return MHD_YES;
	}
	switch (cn->ep) {
	case EP_HEALTH: {
		int st;
		pthread_mutex_lock(&S.mu);
		st = S.state;
		pthread_mutex_unlock(&S.mu);
		if (st == ST_READY)
			return send_buf(c, 200, strdup("{\"status\":\"ok\"}"), 15, "application/json", 0);
		return st == ST_LOADING ? send_buf(c, 503, strdup("{\"status\":\"loading\"}"), 20,
		                                   "application/json", 1)
		                        : send_buf(c, 503, strdup("{\"status\":\"draining\"}"), 21,
		                                   "application/json", 1);
	}
	case EP_MODELS: {
		size_t len;
		char *s = serve_models_json(S.lim.model_id, (long long)time(NULL), &len);
		return send_buf(c, 200, s, len, "application/json", 0);
	}
	default:
		return generate(c, cn);
	}
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
	conn_t *cn = *con_cls;
	(void)cls;
	if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
		head_again(c);
	if (!cn)
		return;
	free(cn->body);
	free(cn);
	*con_cls = NULL;
	pthread_mutex_lock(&S.mu);
	S.active--;
	pthread_cond_broadcast(&S.prog);
	pthread_mutex_unlock(&S.mu);
}

/* ---- request heads: deadline and budget ------------------------------------ */

typedef struct hconn {
	struct hconn *next;
	int fd;       /* our dup of the connection's socket (-1: none) */
	int pending;  /* its request head has not arrived whole yet */
	double since; /* accept, or the last answer */
} hconn_t;

static struct heads {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	hconn_t *list;
	int pending, budget, stop, running;
	double timeout;
	pthread_t th;
} H = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static double mono_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* 408 and shut down (H.mu held). MHD is not writing: the head is not in. */
static void head_reap(hconn_t *h, const char *why)
{
	char body[256], resp[512];
	int bl = snprintf(body, sizeof(body),
	                  "{\"error\":{\"message\":\"the request headers did not arrive within %d s; "
	                  "closed\",\"type\":\"invalid_request_error\",\"param\":null,"
	                  "\"code\":\"request_timeout\"}}\n", (int)H.timeout);
	int rl = snprintf(resp, sizeof(resp),
	                  "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n"
	                  "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
	                  bl, body);
	h->pending = 0;
	H.pending--;
	logf_("level=info msg=serve_head_timeout reason=%s pending=%d", why, H.pending);
	if (h->fd < 0)
		return;
	if (send(h->fd, resp, (size_t)rl, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
		/* gone already, or its buffer is full: the shutdown says it */
	}
	shutdown(h->fd, SHUT_RDWR);
}

/* The oldest pending head, if it has been pending HEAD_GRACE_S at least (a
 * client's headers take milliseconds: a burst of new connections must not
 * push each other out). H.mu held. */
static hconn_t *head_oldest(double now)
{
	hconn_t *old = NULL;
	for (hconn_t *o = H.list; o; o = o->next)
		if (o->pending && (!old || o->since < old->since))
			old = o;
	return old && now - old->since >= HEAD_GRACE_S ? old : NULL;
}

/* Over the budget: the oldest pending heads make room. H.mu held. */
static void head_budget(int room)
{
	double now = mono_now();
	hconn_t *old;
	while (H.pending + room > H.budget && (old = head_oldest(now)))
		head_reap(old, "budget");
}

/* H.mu held */
static void head_wait(hconn_t *h)
{
	if (h->pending)
		return;
	head_budget(1);
	h->pending = 1;
	h->since = mono_now();
	H.pending++;
}

static void on_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                      enum MHD_ConnectionNotificationCode toe)
{
	hconn_t *h = *socket_context, **pp;
	(void)cls;
	if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
		if (!(h = calloc(1, sizeof(*h))))
			return; /* untracked: MHD's own timeouts only */
		h->fd = ci ? fcntl(ci->connect_fd, F_DUPFD_CLOEXEC, 0) : -1;
		pthread_mutex_lock(&H.mu);
		head_wait(h);
		h->next = H.list;
		H.list = h;
		pthread_mutex_unlock(&H.mu);
		*socket_context = h;
		return;
	}
	if (toe != MHD_CONNECTION_NOTIFY_CLOSED || !h)
		return;
	pthread_mutex_lock(&H.mu);
	for (pp = &H.list; *pp; pp = &(*pp)->next)
		if (*pp == h) {
			*pp = h->next;
			break;
		}
	if (h->pending)
		H.pending--;
	pthread_mutex_unlock(&H.mu);
	if (h->fd >= 0)
		close(h->fd);
	free(h);
	*socket_context = NULL;
}

static hconn_t *head_of(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	return ci ? ci->socket_context : NULL;
}

/* The head is in (on_request's first call). */
static void head_done(struct MHD_Connection *c)
{
	hconn_t *h = head_of(c);
	if (!h)
		return;
	pthread_mutex_lock(&H.mu);
	if (h->pending) {
		h->pending = 0;
		H.pending--;
	}
	pthread_mutex_unlock(&H.mu);
}

/* An answer went out: a kept-alive connection waits for its next head. */
static void head_again(struct MHD_Connection *c)
{
	hconn_t *h = head_of(c);
	if (!h)
		return;
	pthread_mutex_lock(&H.mu);
	head_wait(h);
	pthread_mutex_unlock(&H.mu);
}

static void *head_reaper(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&H.mu);
	while (!H.stop) {
		struct timespec ts;
		double now;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 250 * 1000000L;
		if (ts.tv_nsec >= 1000000000L)
			ts.tv_sec++, ts.tv_nsec -= 1000000000L;
		pthread_cond_timedwait(&H.cv, &H.mu, &ts);
		now = mono_now();
		for (hconn_t *h = H.list; h; h = h->next)
			if (h->pending && now - h->since >= H.timeout)
				head_reap(h, "deadline");
		head_budget(0);
	}
	pthread_mutex_unlock(&H.mu);
	return NULL;
}

static void heads_stop(void)
{
	if (!H.running)
		return;
	pthread_mutex_lock(&H.mu);
	H.stop = 1;
	pthread_cond_broadcast(&H.cv);
	pthread_mutex_unlock(&H.mu);
	pthread_join(H.th, NULL);
	H.running = 0;
}

/* ---- signals -------------------------------------------------------------- */

/* A TERM may land on any thread (OpenBLAS starts its own before main), so
 * the handler only writes to a pipe; this thread reads it and drains. */
static int sig_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
	unsigned char b = (unsigned char)sig;
	int e = errno;
	if (write(sig_pipe[1], &b, 1) < 0) {
		/* the pipe is full: a drain is already on its way */
	}
	errno = e;
}

static void *sig_thread(void *arg)
{
	unsigned char sig;
	(void)arg;
	while (read(sig_pipe[0], &sig, 1) == 1 || errno == EINTR) {
		pthread_mutex_lock(&S.mu);
		if (S.state != ST_DRAINING) {
			S.state = ST_DRAINING;
			logf_("level=info msg=serve_drain signal=%d waiting=%d", sig, S.waiting);
		}
		pthread_cond_broadcast(&S.work);
		pthread_cond_broadcast(&S.prog);
		pthread_mutex_unlock(&S.mu);
	}
	return NULL;
}

/* ---- binding -------------------------------------------------------------- */

int serve_bind(const serve_opts_t *o, char *err, size_t errlen)
{
	struct sockaddr_storage ss = {0};
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
	                 MHD_USE_ERROR_LOG;
	const union MHD_DaemonInfo *di;
	const char *host = o->host ? o->host : "0.0.0.0";
	pthread_t th;

	S.o = *o;
	if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)o->port);
	} else if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)o->port);
		flags |= MHD_USE_IPv6;
	} else {
		snprintf(err, errlen, "--host %s is not an IPv4 or IPv6 address", host);
		return -EINVAL;
	}
	/* the write end never blocks a handler; the reader thread blocks */
	if (pipe2(sig_pipe, O_CLOEXEC) < 0 ||
	    fcntl(sig_pipe[1], F_SETFL, fcntl(sig_pipe[1], F_GETFL) | O_NONBLOCK) < 0 ||
	    pthread_create(&th, NULL, sig_thread, NULL) != 0) {
		snprintf(err, errlen, "cannot start the signal thread: %s", strerror(errno));
		return -EAGAIN;
	}
	{
		struct sigaction sa = {.sa_handler = on_signal};
		sigemptyset(&sa.sa_mask);
		sa.sa_flags = SA_RESTART;
		sigaction(SIGTERM, &sa, NULL);
		sigaction(SIGINT, &sa, NULL);
		signal(SIGPIPE, SIG_IGN);
	}
	pthread_detach(th);
	H.timeout = o->head_timeout_s > 0 ? o->head_timeout_s : 10;
	H.budget = o->max_conns / 2 > 0 ? o->max_conns / 2 : 1;
	if (pthread_create(&H.th, NULL, head_reaper, NULL) != 0) {
		snprintf(err, errlen, "cannot start the request head reaper: %s", strerror(errno));
		return -EAGAIN;
	}
	H.running = 1;
	S.d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, NULL,
	                       MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
	                       MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
	                       MHD_OPTION_NOTIFY_CONNECTION, on_notify, NULL,
	                       MHD_OPTION_CONNECTION_LIMIT, (unsigned)o->max_conns,
	                       MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->idle_timeout_s,
	                       MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)32768,
	                       MHD_OPTION_LISTEN_BACKLOG_SIZE, 256u, MHD_OPTION_END);
	if (!S.d) {
		int e = errno;
		heads_stop();
		snprintf(err, errlen, "cannot listen on %s:%d: %s (another program may hold the "
		                      "port: choose another --port)",
		         host, o->port, strerror(e));
		return -EADDRINUSE;
	}
	di = MHD_get_daemon_info(S.d, MHD_DAEMON_INFO_BIND_PORT);
	logf_("level=info msg=serve_listen host=%s port=%u", host,
	      di ? (unsigned)di->port : (unsigned)o->port);
	return 0;
}

/* ---- the lockstep loop ---------------------------------------------------- */

static void on_token(void *ud, int index, int tok)
{
	job_t *j = ud;
	char piece[SERVE_PIECE_MAX];
	size_t n = 0;
	(void)index;
	pthread_mutex_lock(&S.mu);
	if (S.lim.tok == SERVE_TOK_BYTES)
		n = serve_tok_piece(&j->utf, tok, piece);
	if (j->n_ids < j->req.max_tokens)
		j->ids[j->n_ids++] = tok;
	if (n && serve_buf_append(&j->text, &j->text_len, &j->text_cap, piece, n) < 0)
		j->failed = 1, serve_set_error(&j->err, 500, "server_error", NULL, NULL, "out of memory");
	/* only a stream that waits wants tokens (a plain request waits for done),
	 * and at most every STREAM_WAKE_S: when tokens come faster, a chunk
	 * carries several and the decoder is not slowed by a context switch per
	 * token (bench/serve) */
	if (j->waiters) {
		double now = dec_now();
		if (j->n_ids == 1 || now - j->woke >= STREAM_WAKE_S) {
			j->woke = now;
			pthread_cond_signal(&j->cv);
		}
	}
	pthread_mutex_unlock(&S.mu);
}

static int bcast(int64_t *h, const int *prompt, int n)
{
	int rc;
	if (S.world < 2)
		return 0;
	if ((rc = sc_broadcast(S.comm, h, HDR_N, SC_I64, 0)) < 0)
		return rc;
	if (h[0] == MSG_REQUEST)
		rc = sc_broadcast(S.comm, (void *)prompt, (size_t)n, SC_I32, 0);
	return rc;
}

/* One request on every rank: the header says what, then the same run. */
static int run_request(const dec_model_t *m, const serve_opts_t *o, const int *prompt, int n,
                       int max_tokens, double temp, uint64_t seed, job_t *j, dec_result_t *res,
                       char *err, size_t errlen)
{
	dec_run_opts_t ro = o->run;
	ro.prompt = prompt;
	ro.n_prompt = n;
	ro.n_tokens = max_tokens;
	ro.warmup = 0; /* the same on every rank: followers cannot tell the self-test */
	ro.temperature = temp;
	ro.sample_seed = seed;
	ro.want_logits = 0;
	ro.dump = NULL;
	if (j) {
		ro.on_token = on_token;
		ro.ud = j;
	}
	return dec_generate(m, m->world > 1 ? S.comm : NULL, &ro, res, err, errlen);
}

static uint64_t fresh_seed(const job_t *j)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ULL ^ (uint64_t)ts.tv_sec ^
	       ((uint64_t)(uintptr_t)j << 20);
}

static int run_job(const dec_model_t *m, const serve_opts_t *o, job_t *j, char *err,
                   size_t errlen)
{
	int64_t h[HDR_N] = {MSG_REQUEST, j->req.n_prompt, j->req.max_tokens, 0, 0, 0, 0, 0};
	double temp = j->req.temperature;
	uint64_t seed = j->req.has_seed ? j->req.seed : fresh_seed(j);
	dec_result_t res;
	int rc;

	memcpy(&h[3], &temp, sizeof(double));
	h[4] = (int64_t)seed;
	if ((rc = bcast(h, j->req.prompt, j->req.n_prompt)) < 0) {
		snprintf(err, errlen, "broadcast failed: %s (%s)", sc_strerror(rc),
		         sc_comm_last_error(S.comm));
		return rc;
	}
	rc = run_request(m, o, j->req.prompt, j->req.n_prompt, j->req.max_tokens, temp, seed, j,
	                 &res, err, errlen);
	pthread_mutex_lock(&S.mu);
	if (rc == 0) {
		char tail[SERVE_PIECE_MAX];
		size_t n = S.lim.tok == SERVE_TOK_BYTES ? serve_tok_flush(&j->utf, tail) : 0;
		if (n)
			serve_buf_append(&j->text, &j->text_len, &j->text_cap, tail, n);
		j->finish = res.stopped ? "stop" : "length";
		logf_("level=info msg=serve_request id=%s prompt_tokens=%d completion_tokens=%d "
		      "finish=%s ms=%.1f",
		      j->id, j->req.n_prompt, j->n_ids, j->finish, (dec_now() - j->t0) * 1e3);
		dec_result_free(&res);
	} else {
		j->failed = 1;
		serve_set_error(&j->err, 500, "server_error", NULL, NULL, "decoding failed: %s", err);
	}
	j->done = 1;
	S.running = 0;
	pthread_cond_broadcast(&j->cv);
	job_unref(j);
	pthread_mutex_unlock(&S.mu);
	return rc;
}

static void fail_queued(const char *why);

/* A collective failed: the communicator is gone, refuse everything, stop. */
static void rank_failed(const char *what, const char *err)
{
	logf_("level=error msg=%s err=\"%s\"", what, err);
	pthread_mutex_lock(&S.mu);
	S.state = ST_DRAINING;
	fail_queued("a rank of this server failed");
	pthread_mutex_unlock(&S.mu);
}

static void fail_queued(const char *why) /* S.mu held */
{
	while (S.head) {
		job_t *j = S.head;
		S.head = j->next;
		S.waiting--;
		j->failed = 1;
		j->done = 1;
		serve_set_error(&j->err, 503, "server_error", "shutting_down", NULL, "%s", why);
		pthread_cond_broadcast(&j->cv);
		job_unref(j);
	}
	S.tail = NULL;
}

int serve_rank0(const dec_model_t *m, sc_comm_t *comm, const serve_opts_t *o)
{
	char err[DEC_ERR_LEN];
	int rc = 0, status = 0;
	double deadline;

	S.comm = comm;
	S.world = m->world;
	S.lim = (serve_limits_t){.model_id = o->model_id,
	                         .vocab = m->cfg.vocab,
	                         .tok = o->tok,
	                         .max_tokens_cap = o->max_tokens_cap,
	                         .max_context = o->max_context,
	                         .default_max_tokens = 16};
	/* the self-test: one request through the lockstep path before ready */
	{
		int prompt[1] = {1};
		int64_t h[HDR_N] = {MSG_REQUEST, 1, 2, 0, 0, 0, 0, 0};
		dec_result_t res;
		if ((rc = bcast(h, prompt, 1)) < 0 ||
		    (rc = run_request(m, o, prompt, 1, 2, 0, 0, NULL, &res, err, sizeof(err))) < 0) {
			if (rc < 0 && !*err)
				snprintf(err, sizeof(err), "%s", sc_strerror(rc));
			logf_("level=error msg=serve_selftest_failed err=\"%s\"", err);
			status = 1;
			goto stop;
		}
		dec_result_free(&res);
	}
	pthread_mutex_lock(&S.mu);
	if (S.state == ST_LOADING)
		S.state = ST_READY;
	pthread_mutex_unlock(&S.mu);
	logf_("level=info msg=serve_ready model=%s world=%d vocab=%d queue=%d", o->model_id,
	      m->world, m->cfg.vocab, o->queue);
	for (;;) {
		job_t *j;
		pthread_mutex_lock(&S.mu);
		while (!S.head && S.state != ST_DRAINING) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += 1;
			if (pthread_cond_timedwait(&S.work, &S.mu, &ts) == ETIMEDOUT && !S.head &&
			    S.state != ST_DRAINING && S.world > 1) {
				int64_t h[HDR_N] = {MSG_NOOP};
				pthread_mutex_unlock(&S.mu);
				if ((rc = bcast(h, NULL, 0)) < 0) {
					rank_failed("serve_peer_lost", sc_strerror(rc));
					status = 1;
					goto stop;
				}
				pthread_mutex_lock(&S.mu);
			}
		}
		if (S.state == ST_DRAINING) {
			fail_queued("the server is shutting down");
			pthread_mutex_unlock(&S.mu);
			break;
		}
		j = S.head;
		S.head = j->next;
		if (!S.head)
			S.tail = NULL;
		S.waiting--;
		S.running = 1;
		j->started = 1;
		pthread_cond_broadcast(&j->cv);
		pthread_mutex_unlock(&S.mu);
		if ((rc = run_job(m, o, j, err, sizeof(err))) < 0) {
			rank_failed("serve_decode_failed", err);
			status = 1;
			goto stop;
		}
	}
	{
		int64_t h[HDR_N] = {MSG_EXIT};
		if (bcast(h, NULL, 0) < 0)
			status = 1;
	}
stop:
	/* the last answers leave before the daemon stops (bounded) */
	deadline = dec_now() + 10;
	pthread_mutex_lock(&S.mu);
	S.state = ST_DRAINING;
	while (S.active > 0 && dec_now() < deadline) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 50 * 1000000L;
		if (ts.tv_nsec >= 1000000000L)
			ts.tv_sec++, ts.tv_nsec -= 1000000000L;
		pthread_cond_timedwait(&S.prog, &S.mu, &ts);
	}
	pthread_mutex_unlock(&S.mu);
	if (S.d)
		MHD_stop_daemon(S.d);
	S.d = NULL;
	heads_stop();
	logf_("level=info msg=serve_exit status=%d", status);
	return status;
}

static volatile sig_atomic_t follower_term;
static void note_term(int sig)
{
	(void)sig;
	follower_term = 1;
}

int serve_follow(const dec_model_t *m, sc_comm_t *comm, const serve_opts_t *o)
{
	struct sigaction sa = {.sa_handler = note_term};
	char err[DEC_ERR_LEN];
	int *prompt = NULL, rc;

	/* rank 0 decides when to stop: a TERM or INT here waits for its EXIT */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	S.comm = comm;
	S.world = m->world;
	for (;;) {
		int64_t h[HDR_N] = {0};
		dec_result_t res;
		double temp;
		int n, max_tokens;
		if ((rc = sc_broadcast(comm, h, HDR_N, SC_I64, 0)) < 0) {
			fprintf(stderr, "spark-decode: rank %d: lost rank 0: %s\n", m->rank,
			        sc_strerror(rc));
			free(prompt);
			return 1;
		}
		if (h[0] == MSG_EXIT) {
			free(prompt);
			return 0;
		}
		if (h[0] == MSG_NOOP)
			continue;
		n = (int)h[1];
		max_tokens = (int)h[2];
		/* rank 0's own limits may be larger than this rank's defaults: only
		 * what --max-context could ever allow */
		if (h[0] != MSG_REQUEST || h[1] < 1 || h[1] > SERVE_MAX_CONTEXT || h[2] < 1 ||
		    h[2] > SERVE_MAX_CONTEXT) {
			fprintf(stderr, "spark-decode: rank %d: bad request header from rank 0\n",
			        m->rank);
			free(prompt);
			return 1;
		}
		free(prompt);
		if (!(prompt = malloc(sizeof(int) * (size_t)n)))
			return 1;
		if ((rc = sc_broadcast(comm, prompt, (size_t)n, SC_I32, 0)) < 0) {
			fprintf(stderr, "spark-decode: rank %d: lost rank 0: %s\n", m->rank,
			        sc_strerror(rc));
			free(prompt);
			return 1;
		}
		memcpy(&temp, &h[3], sizeof(double));
		if (run_request(m, o, prompt, n, max_tokens, temp, (uint64_t)h[4], NULL, &res, err,
		                sizeof(err)) < 0) {
			fprintf(stderr, "spark-decode: rank %d: %s\n", m->rank, err);
			free(prompt);
			return 1;
		}
		dec_result_free(&res);
	}
}

/* serve_node.c: the node side of the serve service (serve.h): the health
 * checks of the services whose rank 0 runs on this node (issue 19).
 *
 * The head sends svc_health_watch {service, run, url, models_url?,
 * interval_ms, timeout_ms} to rank 0's node; a watch of a service replaces
 * the one before it, svc_health_unwatch {service} ends it, and so does the
 * end of its run's job on this node (a->hooks.job_here). Every interval_ms a
 * check GETs url with libcurl, from this node, and, when that answered 2xx
 * and a models_url is given, GETs it and reads the model ids of OpenAI's list
 * shape {"data": [{"id": ...}]}. Until a run's first healthy answer the checks
 * come every SN_STARTUP_POLL_MS when the interval is longer (a server that
 * is up a moment after the first check need not wait a whole interval to be
 * ready; a failed check is a refused connection or a 503, cheap). The node reports svc_health {service, run,
 * ok, code, models, error} to the head on the first check, whenever ok, the
 * class of the code or the models change, and again for every watch when the
 * head comes back (SVC_EV_HEAD_UP).
 *
 * A check blocks in curl_easy_perform, so it runs in libuv's thread pool
 * (uv_queue_work), never on the loop; at most SN_INFLIGHT at once, so the
 * pool stays free for the other services (probes, model verification,
 * getaddrinfo), the rest wait for their turn. Bounded: SN_MAX_WATCHES watches,
 * bodies read up to SN_BODY_MAX (a health body is counted, not kept), urls of
 * http or https only, no redirects, no proxy from the environment. */
#include "serve.h"

#include "log.h"
#include "proto.h"
#include "util.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SN_MAX_WATCHES 64
#define SN_INFLIGHT 2
#define SN_TICK_MS 100
#define SN_STARTUP_POLL_MS 250 /* the checks' period until the first healthy one */
#define SN_URL_MAX 512
#define SN_MODELS_MAX 256 /* ids kept from one list */
#define SN_ID_MAX 256     /* bytes of one id */

struct sn_check;

struct sn_watch {
	struct sn_watch *next;
	char service[64];
	long long run;
	char url[SN_URL_MAX], models_url[SN_URL_MAX];
	int interval_ms, timeout_ms;
	uint64_t next_ms;          /* when the next check starts */
	struct sn_check *inflight; /* a check running for it (its result comes back here) */
	bool seen_job;             /* its job ran here once (a->hooks.job_here) */
	bool was_ok;               /* a check passed once (then every interval_ms) */
	/* what was last reported */
	bool reported, ok;
	int code;
	json_t *models; /* array of ids, or NULL */
	char error[256];
};

/* One check in the thread pool: its inputs are copies, its results are
 * filled by the thread and read back on the loop. */
struct sn_check {
	uv_work_t work;
	struct agent *a;
	struct sn_watch *w; /* NULL once the watch is gone */
	char url[SN_URL_MAX], models_url[SN_URL_MAX];
	int timeout_ms;
	bool ok;
	int code;
	json_t *models;
	char error[256];
};

/* ---- the model list (fuzzed: tests/fuzz/fuzz_models_list.c) ---------------------------- */

int sn_models_parse(const char *body, size_t len, json_t **ids, char *err, size_t errlen)
{
	*ids = NULL;
	if (len > SN_BODY_MAX) {
		snprintf(err, errlen, "the model list is over %d bytes", SN_BODY_MAX);
		return -E2BIG;
	}
	json_error_t je;
	json_t *doc = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
	json_t *data = json_object_get(doc, "data");
	if (!json_is_array(data)) {
		json_decref(doc);
		snprintf(err, errlen, "the model list is not {\"data\": [{\"id\": ...}]}");
		return -EINVAL;
	}
	json_t *out = json_array();
	size_t i;
	json_t *m;
	json_array_foreach(data, i, m) {
		json_t *id = json_object_get(m, "id");
		if (!json_is_string(id) || json_string_length(id) == 0 ||
		    json_string_length(id) > SN_ID_MAX)
			continue; /* not a model entry we can name */
		if (json_array_size(out) >= SN_MODELS_MAX)
			break;
		json_array_append(out, id);
	}
	json_decref(doc);
	*ids = out;
	return 0;
}

/* ---- one check (a thread of the pool) ----------------------------------------------------- */

struct body {
	char *buf; /* NULL: count only */
	size_t len;
	bool over;
};

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
	struct body *b = arg;
	size_t k = size * n;
	if (b->len + k > SN_BODY_MAX) {
		b->over = true;
		return 0; /* CURLE_WRITE_ERROR: the transfer stops here */
	}
	if (b->buf)
		memcpy(b->buf + b->len, p, k);
	b->len += k;
	return k;
}

/* GET url: 0 with the status in *code, or a curl error with err set. */
static CURLcode get(const char *url, int timeout_ms, struct body *b, long *code, char *err,
		    size_t errlen)
{
	*code = 0;
	CURL *e = curl_easy_init();
	if (!e) {
		snprintf(err, errlen, "out of memory");
		return CURLE_OUT_OF_MEMORY;
	}
	char ebuf[CURL_ERROR_SIZE] = "";
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)timeout_ms);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(e, CURLOPT_PROXY, ""); /* from this node, not through a proxy */
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, b);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, ebuf);
	curl_easy_setopt(e, CURLOPT_USERAGENT, "sparkd-health");
	CURLcode rc = curl_easy_perform(e);
	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, code);
	curl_easy_cleanup(e);
	if (rc == CURLE_WRITE_ERROR && b->over)
		snprintf(err, errlen, "the answer is over %d bytes", SN_BODY_MAX);
	else if (rc != CURLE_OK)
		snprintf(err, errlen, "%s", ebuf[0] ? ebuf : curl_easy_strerror(rc));
	return rc;
}

static void check_work(uv_work_t *wk)
{
	struct sn_check *c = wk->data;
	struct body hb = {0};
	long code = 0;
	CURLcode rc = get(c->url, c->timeout_ms, &hb, &code, c->error, sizeof c->error);
	c->code = (int)code;
	if (rc == CURLE_WRITE_ERROR && hb.over && code >= 200 && code < 300)
		rc = CURLE_OK; /* a long health body: the status is what counts */
	if (rc != CURLE_OK)
		return;
	if (code < 200 || code > 299) {
		snprintf(c->error, sizeof c->error, "HTTP %ld from %s", code, c->url);
		return;
	}
	c->ok = true;
	c->error[0] = '\0';
	if (!c->models_url[0])
		return;
	struct body mb = {.buf = malloc(SN_BODY_MAX)};
	char err[256] = "";
	long mcode = 0;
	if (mb.buf && get(c->models_url, c->timeout_ms, &mb, &mcode, err, sizeof err) == CURLE_OK &&
	    mcode >= 200 && mcode < 300)
		sn_models_parse(mb.buf, mb.len, &c->models, err, sizeof err);
	else if (!err[0])
		snprintf(err, sizeof err, "HTTP %ld", mcode);
	if (!c->models)
		c->models = json_array(); /* up, but its models are not known */
	free(mb.buf);
}

/* ---- reports -------------------------------------------------------------------------------- */

static void report(struct agent *a, struct sn_watch *w)
{
	json_t *m = proto_msg("svc_health", 0);
	json_object_set_new(m, "service", json_string(w->service));
	json_object_set_new(m, "run", json_integer(w->run));
	json_object_set_new(m, "ok", json_boolean(w->ok));
	json_object_set_new(m, "code", json_integer(w->code));
	if (w->ok && w->models) /* with a models_url */
		json_object_set(m, "models", w->models);
	else if (!w->ok)
		json_object_set_new(m, "error", json_string(w->error));
	peers_to_head(a, m);
}

/* The time to the watch's next check: its interval, or the start-up poll
 * until a check passed. */
static uint64_t period_ms(const struct sn_watch *w)
{
	if (!w->was_ok && w->interval_ms > SN_STARTUP_POLL_MS)
		return SN_STARTUP_POLL_MS;
	return (uint64_t)w->interval_ms;
}

static void check_done(uv_work_t *wk, int status)
{
	struct sn_check *c = wk->data;
	struct serve *S = c->a->serve;
	struct sn_watch *w = c->w;
	S->inflight--;
	if (w && status == 0 && !S->node_stopping) {
		w->inflight = NULL;
		w->was_ok = w->was_ok || c->ok;
		w->next_ms = util_now_ms() + period_ms(w);
		bool change = !w->reported || w->ok != c->ok || w->code / 100 != c->code / 100 ||
			      (w->models == NULL) != (c->models == NULL) ||
			      (w->models && !json_equal(w->models, c->models));
		if (change) {
			log_info(c->ok ? "svc_health_ok" : "svc_health_failing",
				 "service=%s run=%lld code=%d%s%s", w->service, w->run, c->code,
				 c->ok ? "" : " error=", c->ok ? "" : log_q(c->error));
		}
		w->ok = c->ok;
		w->code = c->code;
		snprintf(w->error, sizeof w->error, "%s", c->error);
		json_decref(w->models);
		w->models = c->models;
		c->models = NULL;
		if (change) {
			w->reported = true;
			report(c->a, w);
		}
	} else if (w) {
		w->inflight = NULL;
	}
	json_decref(c->models);
	free(c);
}

/* ---- watches ------------------------------------------------------------------------------ */

static void watch_free(struct sn_watch *w)
{
	if (w->inflight)
		w->inflight->w = NULL; /* its result is dropped when it comes back */
	json_decref(w->models);
	free(w);
}

static void watch_remove(struct serve *S, struct sn_watch *w, const char *why)
{
	for (struct sn_watch **p = &S->checks; *p; p = &(*p)->next)
		if (*p == w) {
			*p = w->next;
			break;
		}
	log_info("svc_health_unwatch", "service=%s run=%lld why=%s", w->service, w->run, why);
	watch_free(w);
}

static struct sn_watch *watch_of(struct serve *S, const char *service)
{
	for (struct sn_watch *w = S->checks; w; w = w->next)
		if (strcmp(w->service, service) == 0)
			return w;
	return NULL;
}

static void node_tick(uv_timer_t *t);

static void ensure_tick(struct serve *S)
{
	if (!S->node_on || S->node_stopping || uv_is_active((uv_handle_t *)&S->node_timer))
		return;
	uv_timer_start(&S->node_timer, node_tick, SN_TICK_MS, SN_TICK_MS);
}

static void start_check(struct agent *a, struct sn_watch *w)
{
	struct serve *S = a->serve;
	struct sn_check *c = calloc(1, sizeof *c);
	if (!c)
		return;
	c->a = a;
	c->w = w;
	c->work.data = c;
	snprintf(c->url, sizeof c->url, "%s", w->url);
	snprintf(c->models_url, sizeof c->models_url, "%s", w->models_url);
	c->timeout_ms = w->timeout_ms;
	if (uv_queue_work(a->loop, &c->work, check_work, check_done) < 0) {
		free(c);
		return;
	}
	w->inflight = c;
	S->inflight++;
}

static void node_tick(uv_timer_t *t)
{
	struct serve *S = t->data;
	struct agent *a = S->a;
	uint64_t now = util_now_ms();
	for (struct sn_watch *w = S->checks, *next; w; w = next) {
		next = w->next;
		if (!a->hooks.job_here)
			continue;
		if (a->hooks.job_here(a, w->run))
			w->seen_job = true;
		else if (w->seen_job)
			watch_remove(S, w, "its job ended here");
	}
	/* the longest due first, while the pool has room */
	while (S->inflight < SN_INFLIGHT) {
		struct sn_watch *due = NULL;
		for (struct sn_watch *w = S->checks; w; w = w->next)
			if (!w->inflight && now >= w->next_ms && (!due || w->next_ms < due->next_ms))
				due = w;
		if (!due)
			break;
		due->next_ms = now + period_ms(due); /* also when it cannot start */
		start_check(a, due);
	}
	if (!S->checks)
		uv_timer_stop(&S->node_timer);
}

static bool url_ok(const char *u)
{
	return strlen(u) < SN_URL_MAX && util_http_url(u, true);
}

void sn_health_watch(struct agent *a, const char *from, const json_t *msg)
{
	(void)from; /* FRAME_TO_NODE: only the head's session (or its own mailbox) */
	struct serve *S = a->serve;
	const char *service = proto_str(msg, "service"), *url = proto_str(msg, "url");
	const char *murl = proto_str(msg, "models_url");
	long long run = (long long)proto_int(msg, "run", 0);
	json_int_t iv = proto_int(msg, "interval_ms", 0), to = proto_int(msg, "timeout_ms", 0);
	if (!S || S->node_stopping)
		return;
	if (!service || !*service || strlen(service) >= sizeof S->checks->service || run <= 0 ||
	    !url_ok(url) || (murl && *murl && !url_ok(murl)) || iv < SN_INTERVAL_MIN_MS ||
	    iv > SN_INTERVAL_MAX_MS || to < SN_TIMEOUT_MIN_MS || to > SN_TIMEOUT_MAX_MS) {
		log_warn("svc_health_watch_refused", "service=%s run=%lld url=%s",
			 log_q(service ? service : ""), run, log_q(url ? url : ""));
		return;
	}
	struct sn_watch *old = watch_of(S, service);
	if (old)
		watch_remove(S, old, "replaced");
	size_t n = 0;
	for (struct sn_watch *w = S->checks; w; w = w->next)
		n++;
	if (n >= SN_MAX_WATCHES) {
		log_warn("svc_health_watch_refused", "service=%s why=%s", log_q(service),
			 log_q("too many watches on this node"));
		return;
	}
	struct sn_watch *w = calloc(1, sizeof *w);
	if (!w)
		return;
	snprintf(w->service, sizeof w->service, "%s", service);
	w->run = run;
	snprintf(w->url, sizeof w->url, "%s", url);
	snprintf(w->models_url, sizeof w->models_url, "%s", murl ? murl : "");
	w->interval_ms = (int)iv;
	w->timeout_ms = (int)to;
	w->next_ms = util_now_ms(); /* the first check at once */
	w->next = S->checks;
	S->checks = w;
	log_info("svc_health_watch", "service=%s run=%lld url=%s interval_ms=%d timeout_ms=%d",
		 w->service, run, log_q(url), w->interval_ms, w->timeout_ms);
	ensure_tick(S);
	if (S->inflight < SN_INFLIGHT) {
		w->next_ms += period_ms(w);
		start_check(a, w);
	}
}

void sn_health_unwatch(struct agent *a, const char *from, const json_t *msg)
{
	(void)from;
	struct serve *S = a->serve;
	struct sn_watch *w = S ? watch_of(S, proto_str(msg, "service") ?: "") : NULL;
	if (w)
		watch_remove(S, w, "unwatched");
}

void sn_event(struct agent *a, enum svc_event ev, const struct svc_event_arg *arg)
{
	(void)arg;
	struct serve *S = a->serve;
	if (!S || S->node_stopping)
		return;
	/* a head that restarted knows nothing: what every watch last saw (the
	 * head's own node restarted with it, and has no watches left) */
	if (ev != SVC_EV_HEAD_UP)
		return;
	for (struct sn_watch *w = S->checks; w; w = w->next)
		if (w->reported)
			report(a, w);
}

int sn_start(struct agent *a)
{
	struct serve *S = a->serve;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		return -EIO; /* before any thread: curl_global_init is not thread safe */
	S->curl_on = true;
	uv_timer_init(a->loop, &S->node_timer);
	S->node_timer.data = S;
	S->node_on = true;
	return 0;
}

void sn_stop(struct agent *a)
{
	struct serve *S = a->serve;
	if (!S || !S->node_on)
		return;
	S->node_stopping = true;
	uv_timer_stop(&S->node_timer); /* closed by main's final walk */
	for (struct sn_watch *w = S->checks; w; w = w->next)
		if (w->inflight)
			uv_cancel((uv_req_t *)&w->inflight->work); /* not started yet: dropped */
}

void sn_free(struct agent *a)
{
	struct serve *S = a->serve;
	while (S->checks) {
		struct sn_watch *w = S->checks;
		S->checks = w->next;
		watch_free(w);
	}
	if (S->curl_on)
		curl_global_cleanup();
	S->curl_on = false;
}

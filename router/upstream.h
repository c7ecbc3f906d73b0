/* upstream: libcurl's multi interface driven by a libuv loop (socket and
 * timer callbacks: curl_multi_socket_action on uv_poll and uv_timer). The
 * caller builds easy handles (CURLOPT_PRIVATE is theirs) and adds them; when
 * a transfer ends, done(easy, result, arg) runs from the loop, after which the
 * handle is no longer in the multi handle (the caller cleans it up). */
#ifndef SPARK_ROUTER_UPSTREAM_H
#define SPARK_ROUTER_UPSTREAM_H

#include <curl/curl.h>
#include <uv.h>

struct upstream;
typedef void (*upstream_done_fn)(CURL *easy, CURLcode result, void *arg);

struct upstream *upstream_new(uv_loop_t *loop, upstream_done_fn done, void *arg);
int upstream_add(struct upstream *u, CURL *easy);
/* Stop a transfer early (client gone); done is not called for it. */
void upstream_remove(struct upstream *u, CURL *easy);
void upstream_free(struct upstream *u);
/* A fresh (reset) easy handle, from a pool of finished ones when there is one;
 * give finished handles back with upstream_put instead of curl_easy_cleanup
 * (curl_easy_init clears several kilobytes per call). */
CURL *upstream_get(struct upstream *u);
void upstream_put(struct upstream *u, CURL *easy);

#endif

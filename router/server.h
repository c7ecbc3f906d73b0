/* server: spark-router's HTTP side. libmicrohttpd in external-epoll mode
 * watched by a uv_poll on one libuv loop, connections suspended while the
 * upstream (upstream.c, libcurl multi on the same loop) answers; streams are
 * passed on chunk by chunk. Service targets are resolved at each attempt from
 * the last svc_watch snapshot (cluster.c). Endpoints: POST /v1/chat/completions,
 * /v1/completions, /v1/decision; GET /v1/models, /health, /metrics. */
#ifndef SPARK_ROUTER_SERVER_H
#define SPARK_ROUTER_SERVER_H

#include "policy.h"

#include <uv.h>

struct server_opts {
	const char *listen;   /* HOST:PORT (numeric host), overrides the policy's */
	const char *log_path; /* routing log, overrides the policy's ("-" = stdout) */
	const char *control_socket; /* sparkd's control socket, followed (cluster.h)
				     * while the policy has service targets */
};

struct server;

/* Start listening. 0, or a negative errno with a message for people in err. */
int server_start(uv_loop_t *loop, struct policy *p, const struct server_opts *o,
		 struct server **out, char *err, size_t errlen);
/* The server owns p from a successful server_start on. */
/* Serve new requests with policy p (owned from now on); requests in flight
 * finish on the old one, which is freed with the last of them. Sessions are
 * forgotten. listen, max_connections and idle_timeout_s, log keep their
 * start-up values. 0 or -ENOMEM (p is then the caller's). */
int server_reload(struct server *s, struct policy *p);
/* The port actually bound (useful with port 0). */
int server_port(const struct server *s);
void server_stop(struct server *s);

/* Is this numeric host a loopback address (127.0.0.0/8, ::1)? */
int server_is_loopback(const char *host);

#endif

/* cluster: spark-router's subscription to the cluster's services. It connects
 * to the local sparkd's control socket (the path sparkctl uses), checks the
 * peer is root or this router's own user (SO_PEERCRED), sends svc_watch and
 * keeps the last snapshot (services.h). On an error answer, a bad frame or EOF
 * it empties the table (service targets are unusable meanwhile), logs it and
 * reconnects with back-off (200 ms doubling to 5 s; reset by a snapshot).
 * changed(arg) runs from the loop after every snapshot and every loss. */
#ifndef SPARK_ROUTER_CLUSTER_H
#define SPARK_ROUTER_CLUSTER_H

#include "services.h"

#include <stdbool.h>
#include <sys/types.h>
#include <uv.h>

struct cluster;
typedef void (*cluster_fn)(void *arg);

struct cluster *cluster_new(uv_loop_t *loop, const char *socket_path, cluster_fn changed,
			    void *arg);
/* The services as last seen; empty (connected false) while the stream is down. */
const struct svc_table *cluster_services(const struct cluster *c);
/* Why the stream is down ("" while it is up). */
const char *cluster_error(const struct cluster *c);
const char *cluster_socket(const struct cluster *c);
/* Close the connection and timers; the memory goes once libuv closed them. */
void cluster_free(struct cluster *c);

/* May a control-socket peer of this uid feed the router (root or self)? */
bool cluster_peer_ok(uid_t peer, uid_t self);

#endif

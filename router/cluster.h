/* cluster: spark-router's subscription to the cluster's services. It connects
 * to the local sparkd's control socket (the path sparkctl uses), checks the
 * peer is root or this router's own user (SO_PEERCRED), sends svc_watch and
 * keeps the last snapshot (services.h). When sparkd goes away or ends the
 * stream (EOF, an error answer: a restart, the head unreachable) the last
 * snapshot stays usable, marked stale, for the grace (services_grace_s), as
 * the services' servers go on without sparkd; a frame that breaks the
 * contract, or a socket that is not sparkd's, empties the table at once
 * (service targets are unusable meanwhile). It logs the loss and reconnects
 * with back-off (200 ms doubling to 5 s; reset by a snapshot).
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
/* The services as last seen: stale (connected false) for the grace after the
 * stream went down, then empty. */
const struct svc_table *cluster_services(const struct cluster *c);
/* Why the stream is down ("" while it is up). */
const char *cluster_error(const struct cluster *c);
const char *cluster_socket(const struct cluster *c);
/* How long a snapshot is kept after sparkd went away (0: emptied at once). */
void cluster_set_grace(struct cluster *c, unsigned seconds);
/* Seconds since the snapshot went stale (0 while it is not). */
unsigned cluster_stale_s(const struct cluster *c);
/* Close the connection and timers; the memory goes once libuv closed them. */
void cluster_free(struct cluster *c);

/* May a control-socket peer of this uid feed the router (root or self)? */
bool cluster_peer_ok(uid_t peer, uid_t self);

#endif

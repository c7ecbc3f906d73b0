/* services: spark-router's view of the cluster's services, as the local
 * sparkd's svc_watch stream last described them (the contract: docs/router.md
 * "Cluster services"). Pure: no I/O. svc_frame reads one frame of that stream
 * (a "stream" frame carries a full snapshot; an "error" or "result" frame ends
 * the stream) into a table the router looks service targets up in. The table
 * is a cache of what sparkd owns: it is replaced whole by every snapshot; when
 * the stream is lost it is kept, stale, for the policy's services_grace_s
 * (cluster.c), then emptied. */
#ifndef SPARK_ROUTER_SERVICES_H
#define SPARK_ROUTER_SERVICES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define SVC_MAX 256        /* services kept from one snapshot (more: an error) */
#define SVC_MAX_MODELS 16  /* model ids kept per service (the rest are dropped) */
#define SVC_NAME_MAX 64
#define SVC_URL_MAX 256

struct svc_info {
	char name[SVC_NAME_MAX];
	char group[SVC_NAME_MAX];
	char owner[SVC_NAME_MAX];    /* the user who started it ("" from an older sparkd) */
	char state[16];              /* starting, ready, unhealthy, restarting, waiting, failed, stopped */
	char model[SVC_URL_MAX];     /* the record's model (may be empty) */
	char url[SVC_URL_MAX];       /* endpoint.url: http://FABRIC_ADDR:PORT, or "" */
	char mgmt_url[SVC_URL_MAX];  /* endpoint.management_url, or "" */
	char models[SVC_MAX_MODELS][SVC_URL_MAX]; /* endpoint.models */
	size_t n_models;
	long long max_context;       /* 0: unknown */
};

struct svc_table {
	bool connected;              /* a snapshot arrived on the current stream */
	bool stale;                  /* not connected; the last snapshot, kept for the grace */
	size_t n;
	struct svc_info *v;          /* n entries, malloc'd */
};

/* Read one decoded frame of the svc_watch stream. 1: a snapshot (out replaced,
 * connected set); -ECONNABORTED: the stream ended (an error or result frame;
 * err says why); -EBADMSG: a frame that breaks the contract (err says how; the
 * caller drops the stream). out is unchanged unless 1 is returned. */
int svc_frame(const json_t *msg, struct svc_table *out, char *err, size_t errlen);
/* Empty the table (disconnected). */
void svc_table_clear(struct svc_table *t);
const struct svc_info *svc_find(const struct svc_table *t, const char *name);
/* Is the service a usable target: ready, with an endpoint on the wanted network? */
bool svc_usable(const struct svc_info *s, bool management);
/* Base URL of its OpenAI API ("http://ADDR:PORT/v1") in buf; false when none. */
bool svc_base_url(const struct svc_info *s, bool management, char *buf, size_t len);
bool svc_has_model(const struct svc_info *s, const char *id);

#endif

/* service: the list of sparkd's services, lookup of their request and frame
 * tables, events, and the reply helpers every handler uses. See service.h. */
#include "service.h"

#include "log.h"
#include "proto.h"
#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Each service's one export (its own header declares it for its files). */
extern const struct service cluster_service, fabric_service, topo_service, jobs_service,
    model_service, serve_service;

/* In start order; stopped in reverse. */
static const struct service *const services[] = {
	&cluster_service,
	&fabric_service,
	&topo_service,
	&jobs_service,
	&serve_service,
	&model_service,
};

const struct service *svc_named(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(services); i++)
		if (strcmp(services[i]->name, name) == 0)
			return services[i];
	return NULL;
}

const struct svc_request *svc_request_of(const char *type)
{
	if (!type)
		return NULL;
	for (size_t i = 0; i < ARRAY_SIZE(services); i++)
		for (const struct svc_request *r = services[i]->requests; r && r->type; r++)
			if (strcmp(r->type, type) == 0)
				return r;
	return NULL;
}

const struct svc_frame *svc_frame_of(const char *type, enum agent_frame_dir dir)
{
	if (!type)
		return NULL;
	for (size_t i = 0; i < ARRAY_SIZE(services); i++)
		for (const struct svc_frame *f = services[i]->frames; f && f->type; f++)
			if (f->dir == dir && strcmp(f->type, type) == 0)
				return f;
	return NULL;
}

void svc_emit(struct agent *a, enum svc_event ev, const struct svc_event_arg *arg)
{
	static const struct svc_event_arg none;
	for (size_t i = 0; i < ARRAY_SIZE(services); i++)
		if (services[i]->on_event)
			services[i]->on_event(a, ev, arg ? arg : &none);
}

int svc_init_all(struct agent *a, char *err, size_t len)
{
	for (size_t i = 0; i < ARRAY_SIZE(services); i++)
		if (services[i]->init) {
			int r = services[i]->init(a, err, len);
			if (r < 0)
				return r;
		}
	return 0;
}

int svc_start_all(struct agent *a, char *err, size_t len)
{
	for (size_t i = 0; i < ARRAY_SIZE(services) && !a->stopping; i++)
		if (services[i]->start) {
			int r = services[i]->start(a, err, len);
			if (r < 0)
				return r;
		}
	return 0;
}

void svc_stop_all(struct agent *a)
{
	for (size_t i = ARRAY_SIZE(services); i-- > 0;)
		if (services[i]->stop)
			services[i]->stop(a);
}

void svc_free_all(struct agent *a)
{
	for (size_t i = ARRAY_SIZE(services); i-- > 0;)
		if (services[i]->free)
			services[i]->free(a);
}

/* ---- who may ask what --------------------------------------------------------- */

/* Job users (the socket's group) read the cluster and run, watch and cancel
 * their own jobs, and exec as themselves; admins (root, security.admin_group)
 * also change membership, tokens, groups and addresses (issue 14). */
bool svc_caller_is_admin(struct agent *a, const json_t *req)
{
	json_t *caller = json_object_get(req, "caller");
	if (!json_is_object(caller))
		return false;
	if (proto_int(caller, "uid", -1) == 0)
		return true;
	size_t i;
	json_t *g;
	json_array_foreach(json_object_get(caller, "groups"), i, g)
		if (a->admin_group[0] && json_is_string(g) &&
		    strcmp(json_string_value(g), a->admin_group) == 0)
			return true;
	return false;
}

/* May the request's caller ask for this (its row's right)? If not, why says so. */
static bool caller_may(struct agent *a, const json_t *req, enum agent_right right, char *why,
		       size_t len)
{
	if (right == RIGHT_USER || svc_caller_is_admin(a, req))
		return true;
	json_t *caller = json_object_get(req, "caller");
	const char *user = proto_str(caller, "user");
	char who[96];
	if (user)
		snprintf(who, sizeof who, "user %s", user);
	else
		snprintf(who, sizeof who, "uid %lld", (long long)proto_int(caller, "uid", -1));
	snprintf(why, len,
		 "\"%s\" needs an admin of the cluster (root%s%s), and %s is not one; run it as "
		 "root%s", proto_type(req), a->admin_group[0] ? " or group " : "", a->admin_group, who,
		 a->admin_group[0] ? " or add the user to that group" : "");
	return false;
}

void svc_serve(struct agent *a, const struct svc_request *row, const struct svc_req *r)
{
	char why[512], err[128];
	agent_busy(a);
	if (proto_check(r->msg, row->fields, err, sizeof err) < 0) {
		svc_error(r, "bad_request", "%s: %s", row->type, err);
		return;
	}
	if (!caller_may(a, r->msg, row->right, why, sizeof why)) {
		log_warn("request_forbidden", "type=%s origin=%s", row->type, r->origin ? r->origin : "");
		svc_error(r, "forbidden", "%s", why);
		return;
	}
	json_t *caller = json_object_get(r->msg, "caller");
	if ((row->flags & SVC_NAMED_CALLER) &&
	    (!json_is_integer(json_object_get(caller, "uid")) || !proto_str(caller, "user"))) {
		svc_error(r, "forbidden",
			  "uid %lld has no user name on its node; jobs run as a named user (the same "
			  "name on every node)", (long long)proto_int(caller, "uid", -1));
		return;
	}
	row->fn(a, r);
}

/* ---- answers -------------------------------------------------------------------- */

void svc_send_result(conn *c, json_int_t id, json_t *data)
{
	if (conn_send_new(c, proto_result(id, data)) == -EMSGSIZE)
		conn_send_new(c, proto_error(id, "too_large",
					     "the answer is larger than a frame may be (1 MiB); ask for "
					     "less (e.g. fewer lines, one node)"));
}

void svc_reply(const struct svc_req *r, json_t *data)
{
	svc_send_result(r->reply, r->id, data);
}

static void verror(conn *c, json_int_t id, const char *code, const char *fmt, va_list ap)
{
	char msg[1024];
	vsnprintf(msg, sizeof msg, fmt, ap);
	conn_send_new(c, proto_error(id, code, msg));
}

void svc_error(const struct svc_req *r, const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	verror(r->reply, r->id, code, fmt, ap);
	va_end(ap);
}

void svc_error_to(conn *c, const json_t *msg, const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	verror(c, msg ? proto_id(msg) : 0, code, fmt, ap);
	va_end(ap);
}

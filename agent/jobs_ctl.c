/* jobs_ctl: the CLI side of groups, jobs and exec. A request from sparkctl
 * carries its caller (control.c: SO_PEERCRED on the control socket, never
 * what the CLI says) and gets the origin node, then the head serves it: here
 * on the head, or relayed by a worker as {"type":"job_req","id":R,
 * "request":{...}} through peers.c. The head answers with any number of
 * {"type":"stream","id":R,...} frames and one final "result" or "error"; the
 * relay gives them the CLI's id. A CLI that goes away sends "stream_cancel"
 * for its relay, so the head stops streaming (a job it started keeps running). */
#include "jobs.h"

#include "log.h"
#include "proto.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* control.c's request table routes the job types here. */
bool jobs_control(struct agent *a, conn *c, const json_t *req)
{
	if (!a->jobs) {
		control_error(c, req, "unavailable", "sparkd is starting or stopping; try again");
		return true;
	}
	if (a->id.removed) {
		control_error(c, req, "removed",
			      "this node was removed from cluster %s; join again with a new token "
			      "('sparkctl join HEAD --token TOKEN')", a->id.cluster_name);
		return true;
	}
	if (a->id.role == ROLE_NONE) {
		control_error(c, req, "not_in_cluster",
			      "this node is not in a cluster; run 'sparkctl init' to start one or "
			      "'sparkctl join HEAD --token TOKEN' to join one");
		return true;
	}
	/* The caller control.c read from SO_PEERCRED; jh_request makes its uid
	 * and user name the job's owner. */
	json_t *caller = json_object_get(req, "caller");
	if (!proto_str(caller, "user")) {
		control_error(c, req, "forbidden",
			      "uid %lld has no user name on this node; jobs run as a named user (the "
			      "same name on every node)", (long long)proto_int(caller, "uid", -1));
		return true;
	}
	json_t *r = json_deep_copy(req);
	json_object_set_new(r, "origin", json_string(a->id.node_id));
	if (a->id.role == ROLE_HEAD) {
		jh_request(a, c, proto_id(req), r);
		json_decref(r);
	} else {
		json_t *m = proto_msg("job_req", 0);
		json_object_set_new(m, "request", r);
		if (peers_request(a, c, proto_id(req), m, PEERS_STREAMS, NULL) < 0)
			control_error(c, req, "internal", "out of memory");
	}
	return true;
}

void jobs_cli_gone(struct agent *a, conn *c)
{
	if (a->jobs && a->id.role == ROLE_HEAD)
		jh_conn_gone(a, c);
}

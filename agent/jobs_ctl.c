/* jobs_ctl: the CLI side of groups, jobs and exec. A request from sparkctl
 * gets the caller's uid and user name (SO_PEERCRED on the control socket,
 * never what the CLI says) and the origin node, then the head serves it: here
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
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

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
	struct ucred cr;
	socklen_t sl = sizeof cr;
	if (getsockopt(conn_fd(c), SOL_SOCKET, SO_PEERCRED, &cr, &sl) < 0) {
		control_error(c, req, "forbidden", "cannot read the caller's credentials");
		return true;
	}
	struct passwd *pw = getpwuid(cr.uid);
	if (!pw) {
		control_error(c, req, "forbidden",
			      "uid %u has no user name on this node; jobs run as a named user (the same "
			      "name on every node)", (unsigned)cr.uid);
		return true;
	}
	json_t *r = json_deep_copy(req);
	json_object_set_new(r, "uid", json_integer(cr.uid));
	json_object_set_new(r, "user", json_string(pw->pw_name));
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

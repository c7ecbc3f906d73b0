/* identity: the node's identity in its state dir, TLS contexts, the agent port.
 * Files: identity.json (role, ids, names, head address, cluster secret),
 * node.key (0600, never leaves the node), node.crt (leaf then CA), ca.crt,
 * and on the head ca.key (0600) and cluster.db. */
#include "agent.h"

#include "cfg.h"
#include "log.h"
#include "pki.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

const char *role_name(enum agent_role r)
{
	switch (r) {
	case ROLE_HEAD: return "head";
	case ROLE_WORKER: return "worker";
	default: return "none";
	}
}

void identity_paths(struct agent *a, const char *file, char *out, size_t len)
{
	snprintf(out, len, "%s/%s", a->opts.state_dir, file);
}

static void copy_str(json_t *o, const char *key, char *dst, size_t len)
{
	json_t *v = json_object_get(o, key);
	if (json_is_string(v))
		util_strlcpy(dst, json_string_value(v), len);
}

int identity_load(struct agent *a, char *err, size_t errlen)
{
	char path[512];
	identity_paths(a, "identity.json", path, sizeof path);
	memset(&a->id, 0, sizeof a->id);
	if (access(path, F_OK) != 0)
		return 0; /* unjoined */
	json_error_t je;
	json_t *o = json_load_file(path, 0, &je);
	if (!json_is_object(o)) {
		snprintf(err, errlen, "%s:%d: %s; move it away to start this node afresh", path, je.line,
			 je.text);
		json_decref(o);
		return -EINVAL;
	}
	const char *role = json_string_value(json_object_get(o, "role"));
	if (role && strcmp(role, "head") == 0)
		a->id.role = ROLE_HEAD;
	else if (role && strcmp(role, "worker") == 0)
		a->id.role = ROLE_WORKER;
	else {
		snprintf(err, errlen, "%s: unknown role; move it away to start this node afresh", path);
		json_decref(o);
		return -EINVAL;
	}
	a->id.removed = json_is_true(json_object_get(o, "removed"));
	copy_str(o, "cluster_id", a->id.cluster_id, sizeof a->id.cluster_id);
	copy_str(o, "cluster_name", a->id.cluster_name, sizeof a->id.cluster_name);
	copy_str(o, "node_id", a->id.node_id, sizeof a->id.node_id);
	copy_str(o, "node_name", a->id.node_name, sizeof a->id.node_name);
	copy_str(o, "head_id", a->id.head_id, sizeof a->id.head_id);
	copy_str(o, "head_addr", a->id.head_addr, sizeof a->id.head_addr);
	copy_str(o, "cluster_secret", a->id.cluster_secret, sizeof a->id.cluster_secret);
	copy_str(o, "advertise", a->id.advertise, sizeof a->id.advertise);
	copy_str(o, "head_key", a->id.head_key, sizeof a->id.head_key);
	copy_str(o, "joined_via", a->id.joined_via, sizeof a->id.joined_via);
	json_decref(o);
	if (!a->id.cluster_id[0] || !a->id.node_id[0] || !a->id.node_name[0]) {
		snprintf(err, errlen, "%s: incomplete identity; move it away to start this node afresh",
			 path);
		return -EINVAL;
	}
	return 0;
}

int identity_save(struct agent *a)
{
	json_t *o = json_pack("{s:s, s:b, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "role",
			      role_name(a->id.role), "removed", a->id.removed, "cluster_id",
			      a->id.cluster_id, "cluster_name", a->id.cluster_name, "node_id",
			      a->id.node_id, "node_name", a->id.node_name, "head_id", a->id.head_id,
			      "head_addr", a->id.head_addr, "cluster_secret", a->id.cluster_secret,
			      "advertise", a->id.advertise);
	if (a->id.head_key[0])
		json_object_set_new(o, "head_key", json_string(a->id.head_key));
	if (a->id.joined_via[0])
		json_object_set_new(o, "joined_via", json_string(a->id.joined_via));
	char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(o);
	if (!s)
		return -ENOMEM;
	char path[512];
	identity_paths(a, "identity.json", path, sizeof path);
	int r = util_write_file(path, s, strlen(s), 0600);
	free(s);
	return r;
}

int identity_wipe(struct agent *a)
{
	static const char *files[] = {"identity.json", "node.key", "node.crt", "ca.crt", "ca.key",
				      "crl.pem", "cluster.db", "cluster.db-wal", "cluster.db-shm"};
	char path[512];
	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		identity_paths(a, files[i], path, sizeof path);
		if (unlink(path) < 0 && errno != ENOENT)
			return -errno;
	}
	memset(&a->id, 0, sizeof a->id);
	return 0;
}

int agent_tls_setup(struct agent *a, char *err, size_t errlen)
{
	char crt[512], key[512], ca[512];
	identity_paths(a, "node.crt", crt, sizeof crt);
	identity_paths(a, "node.key", key, sizeof key);
	identity_paths(a, "ca.crt", ca, sizeof ca);
	if (a->srv_ctx)
		SSL_CTX_free(a->srv_ctx);
	if (a->cli_ctx)
		SSL_CTX_free(a->cli_ctx);
	a->srv_ctx = tls_server_ctx(crt, key, ca, err, errlen);
	a->cli_ctx = NULL;
	/* Only a worker dials out (to the head); a head only accepts. Each
	 * context holds its own certificate, key, trust store and cipher tables. */
	if (a->srv_ctx && a->id.role != ROLE_HEAD)
		a->cli_ctx = tls_client_ctx(crt, key, ca, err, errlen);
	if (!a->srv_ctx || (!a->cli_ctx && a->id.role != ROLE_HEAD))
		return -EINVAL;
	/* The cluster's revocation list, once the head has sent one (a node that
	 * joined before lists existed gets it with its next hello): every
	 * handshake then refuses removed nodes' certificates. */
	char crl[512];
	identity_paths(a, "crl.pem", crl, sizeof crl);
	if (access(crl, F_OK) == 0 &&
	    (tls_ctx_load_crl(a->srv_ctx, crl, err, errlen) < 0 ||
	     (a->cli_ctx && tls_ctx_load_crl(a->cli_ctx, crl, err, errlen) < 0)))
		return -EINVAL;
	return 0;
}

int agent_security_config(struct agent *a, char *err, size_t errlen)
{
	static const char *const keys[] = {"admin_group", "join_expire_s", "control_idle_s",
					   "control_request_s", "control_per_user", NULL};
	a->join_expire_s = AGENT_JOIN_EXPIRE_S;
	a->admin_group[0] = '\0';
	a->ctl_idle_ms = AGENT_CTL_IDLE_MS;
	a->ctl_request_ms = AGENT_CTL_REQUEST_MS;
	a->ctl_per_uid = AGENT_CTL_PER_UID;
	json_t *sec = a->cfg ? cfg_get(a->cfg, "security") : NULL;
	if (!sec)
		return 0;
	int r = cfg_check_keys(sec, "security", keys, err, errlen);
	const char *g = NULL;
	long long v;
	if (r == 0 && (r = cfg_get_str(a->cfg, "security.admin_group", &g, err, errlen)) == 0) {
		if (!*g || strlen(g) >= sizeof a->admin_group) {
			snprintf(err, errlen, "security.admin_group: '%s' is not a group name", g);
			return -EINVAL;
		}
		util_strlcpy(a->admin_group, g, sizeof a->admin_group);
	}
	if (r == -ENOENT)
		r = 0;
	if (r == 0 && (r = cfg_get_int(a->cfg, "security.join_expire_s", 1, 7 * 86400, &v, err,
				       errlen)) == 0)
		a->join_expire_s = v;
	if (r == -ENOENT)
		r = 0;
	/* the control socket's limits (control.c) */
	if (r == 0 && (r = cfg_get_int(a->cfg, "security.control_idle_s", 1, 3600, &v, err,
				       errlen)) == 0)
		a->ctl_idle_ms = (unsigned)v * 1000;
	if (r == -ENOENT)
		r = 0;
	if (r == 0 && (r = cfg_get_int(a->cfg, "security.control_request_s", 1, 600, &v, err,
				       errlen)) == 0)
		a->ctl_request_ms = (unsigned)v * 1000;
	if (r == -ENOENT)
		r = 0;
	if (r == 0 && (r = cfg_get_int(a->cfg, "security.control_per_user", 1,
				       AGENT_CTL_MAX - AGENT_CTL_RESERVED, &v, err, errlen)) == 0)
		a->ctl_per_uid = (unsigned)v;
	return r == -ENOENT ? 0 : r;
}

static void on_agent_conn(uv_stream_t *server, int status)
{
	struct agent *a = server->data;
	if (status < 0) {
		log_warn("accept_failed", "err=%s", uv_strerror(status));
		return;
	}
	peers_accept(a, server);
}

int agent_listen(struct agent *a, char *err, size_t errlen)
{
	if (a->srv_open)
		return 0;
	struct sockaddr_storage ss;
	int r = uv_ip4_addr(a->opts.listen_host, a->opts.listen_port, (struct sockaddr_in *)&ss);
	if (r < 0)
		r = uv_ip6_addr(a->opts.listen_host, a->opts.listen_port, (struct sockaddr_in6 *)&ss);
	if (r < 0) {
		snprintf(err, errlen, "listen address %s is not a numeric IPv4 or IPv6 address",
			 a->opts.listen_host);
		return -EINVAL;
	}
	uv_tcp_init(a->loop, &a->srv);
	a->srv.data = a;
	r = uv_tcp_bind(&a->srv, (struct sockaddr *)&ss, 0);
	if (r == 0)
		r = uv_listen((uv_stream_t *)&a->srv, 128, on_agent_conn);
	if (r < 0) {
		snprintf(err, errlen, "cannot listen on %s:%d: %s; pick another --listen", a->opts.listen_host,
			 a->opts.listen_port, uv_strerror(r));
		uv_close((uv_handle_t *)&a->srv, NULL);
		return r;
	}
	a->srv_open = true;
	log_info("listening", "addr=%s:%d", a->opts.listen_host, a->opts.listen_port);
	return 0;
}

void agent_close_listener(struct agent *a)
{
	if (a->srv_open) {
		uv_close((uv_handle_t *)&a->srv, NULL);
		a->srv_open = false;
	}
}

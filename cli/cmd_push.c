/* cmd_push: `sparkctl model push|ls|rm|verify` (issue 18, docs/models.md):
 * copying a model directory from this node along a chain of other nodes, and
 * the models the local node holds in its store, both served by its sparkd's
 * `model` service (agent/model.c). Their text writers are in print_push.c. */
#include "cli.h"
#include "print.h"
#include "output.h"
#include "pki.h"
#include "util.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define VERIFY_TIMEOUT_MS (12u * 3600 * 1000) /* re-hashing hundreds of GB takes minutes */




/* NAME: one argument, no options (--help is handled by the command table). */
static int one_name(struct cli_ctx *ctx, int argc, char **argv, const char **name)
{
	static const struct option lo[] = {CLI_OPT_END};
	int rc = 0, c;
	optind = 0;
	while ((c = cli_next_opt(ctx, argc, argv, lo, &rc)) != -1)
		if (c == -2)
			return rc;
	if (optind >= argc)
		return cli_usage(ctx, "missing model NAME (see 'sparkctl model ls')");
	if (optind + 1 < argc)
		return cli_usage(ctx, "unexpected argument '%s'", argv[optind + 1]);
	*name = argv[optind];
	return 0;
}

/* Every node's models (the head asks each), or one node's (--node); a node
 * that is in no cluster lists its own. */
int cmd_model_ls(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {{"node", required_argument, NULL, 'n'}, CLI_OPT_END};
	const char *node = NULL;
	int rc = 0, c;
	optind = 0;
	while ((c = cli_next_opt(ctx, argc, argv, lo, &rc)) != -1) {
		if (c == -2)
			return rc;
		if (c == 'n')
			node = optarg;
	}
	if (optind < argc)
		return cli_usage(ctx, "unexpected argument '%s'", argv[optind]);
	json_t *args = node ? json_pack("{s:s}", "node", node) : NULL;
	json_t *data = NULL;
	char *code = NULL, *msg = NULL;
	int r = cli_call_raw(ctx, "model_ls_all", json_incref(args), &data, 0, &code, &msg);
	if (r < 0 && code && !strcmp(code, "not_in_cluster") && !node) {
		free(code);
		free(msg);
		json_decref(args);
		return cli_request(ctx, "model_ls", NULL, 0, NULL); /* this node only */
	}
	if (r < 0) {
		rc = cli_fail("%s", msg && *msg ? msg : "model ls failed");
	} else {
		cli_output(ctx, args, data, NULL);
		size_t i;
		json_t *n;
		json_array_foreach(json_object_get(data, "nodes"), i, n)
			if (json_is_string(json_object_get(n, "error")))
				rc = cli_fail("%s did not answer (%s): its models are not listed",
					      cli_jstr(n, "node"), cli_jstr(n, "error"));
	}
	free(code);
	free(msg);
	json_decref(data);
	json_decref(args);
	return rc;
}

/* Options before and after the one positional argument (getopt stops at
 * it): on_opt(c, optarg, arg) for each option; *pos gets the argument (NULL
 * if none). 0, or the exit code to return (bad usage, --help). */
typedef void (*opt_fn)(int c, const char *optval, void *arg);
static int opts_around_one(struct cli_ctx *ctx, int argc, char **argv, const struct option *lo,
			   opt_fn on_opt, void *arg, const char **pos)
{
	int rc = 0, c;
	char *rest[argc + 1];
	*pos = NULL;
	optind = 0;
	for (;;) {
		while ((c = cli_next_opt(ctx, argc, argv, lo, &rc)) != -1) {
			if (c == -2)
				return rc;
			on_opt(c, optarg, arg);
		}
		if (optind >= argc)
			return 0;
		if (*pos)
			return cli_usage(ctx, "unexpected argument '%s'", argv[optind]);
		*pos = argv[optind];
		/* go on with the arguments after it (getopt restarts at optind 0) */
		int k = 1;
		for (int i = optind + 1; i < argc; i++)
			rest[k++] = argv[i];
		rest[0] = argv[0];
		rest[k] = NULL;
		argv = rest;
		argc = k;
		optind = 0;
	}
}

static void rm_opt(int c, const char *v, void *arg)
{
	if (c == 'n')
		*(const char **)arg = v;
}

static json_t *split_names(const char *s);

/* This node's copy, or (--nodes) those nodes' copies through the head. */
int cmd_model_rm(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {{"nodes", required_argument, NULL, 'n'}, CLI_OPT_END};
	const char *nodes = NULL, *name = NULL;
	int rc = opts_around_one(ctx, argc, argv, lo, rm_opt, &nodes, &name);
	if (rc)
		return rc;
	if (!name)
		return cli_usage(ctx, "missing model NAME (see 'sparkctl model ls')");
	if (!nodes)
		return cli_request(ctx, "model_rm", json_pack("{s:s}", "name", name), 0, NULL);
	json_t *list = split_names(nodes);
	if (json_array_size(list) == 0) {
		json_decref(list);
		return cli_usage(ctx, "--nodes needs node names (a,b,c)");
	}
	json_t *ans = NULL;
	int r = cli_request(ctx, "model_rm_nodes", json_pack("{s:s, s:o}", "name", name, "nodes",
							     list), 0, &ans);
	if (r)
		return r;
	size_t i;
	json_t *n;
	json_array_foreach(json_object_get(ans, "nodes"), i, n)
		if (json_is_string(json_object_get(n, "error")))
			r = cli_fail("%s: %s", cli_jstr(n, "node"), cli_jstr(n, "error"));
	json_decref(ans);
	return r;
}

int cmd_model_verify(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *name = NULL;
	int r = one_name(ctx, argc, argv, &name);
	if (r)
		return r;
	json_t *ans = NULL;
	r = cli_request(ctx, "model_verify", json_pack("{s:s}", "name", name), VERIFY_TIMEOUT_MS,
			&ans);
	if (r)
		return r;
	size_t bad = json_array_size(json_object_get(ans, "problems"));
	if (bad)
		r = cli_fail("%s on %s: %zu damaged or missing part%s; remove it ('sparkctl model rm "
			     "%s') and copy it again", name, cli_jstr(ans, "node"), bad,
			     bad == 1 ? "" : "s", name);
	json_decref(ans);
	return r;
}

/* ---- writers ---- */




/* ---- model push ---- */


#define DATA_PORT_OFFSET 1 /* agent/model.c: a node's data port is its agent port + 1 */

struct push_view {
	const struct cli_ctx *ctx;
	json_t *names; /* node id -> name */
	json_t *last;  /* node -> {bytes, total} */
	bool tty;
	uint64_t t0;
};

static void push_event(void *arg, json_t *msg)
{
	struct push_view *v = arg;
	const char *node = cli_jstr(msg, "node");
	if (json_is_string(json_object_get(v->names, node)))
		node = json_string_value(json_object_get(v->names, node));
	long long b = cli_jnum(msg, "bytes"), t = cli_jnum(msg, "total"), ms = cli_jnum(msg, "ms");
	json_t *prev = json_object_get(v->last, node);
	bool was_done = prev && cli_jnum(prev, "bytes") >= cli_jnum(prev, "total");
	json_object_set_new(v->last, node, json_pack("{s:I, s:I}", "bytes", b, "total", t));
	if (v->tty && v->ctx->out != OUT_JSON) {
		char line[1024] = "";
		size_t off = 0;
		const char *k;
		json_t *e;
		uint64_t sum = 0, all = 0;
		json_object_foreach(v->last, k, e) {
			long long eb = cli_jnum(e, "bytes"), et = cli_jnum(e, "total");
			sum += (uint64_t)eb;
			all += (uint64_t)et;
			off += (size_t)snprintf(line + off, off < sizeof line ? sizeof line - off : 0,
						"%s %3lld%%  ", k, et ? eb * 100 / et : 100);
		}
		double rate = ms > 0 ? sum / 1048576.0 / (ms / 1000.0) : 0;
		double eta = rate > 0 ? (all - sum) / 1048576.0 / rate : 0;
		cli_progress(v->ctx, "%s| %.1f MiB/s, ETA %.0f s", line, rate, eta);
	} else if (!v->tty && v->ctx->out != OUT_JSON && !was_done && t >= 0 && b >= t) {
		printf("%s: %lld bytes received\n", node, b); /* plain lines in a pipe */
		fflush(stdout);
	}
}

/* "a,b,c" -> JSON array of names */
static json_t *split_names(const char *s)
{
	json_t *a = json_array();
	char *dup = strdup(s), *save = NULL;
	for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save))
		if (*t)
			json_array_append_new(a, json_string(t));
	free(dup);
	return a;
}

struct push_opts {
	const char *group, *nodes, *name, *from;
	bool dry;
};

static void push_opt(int c, const char *v, void *arg)
{
	struct push_opts *o = arg;
	if (c == 'g')
		o->group = v;
	else if (c == 'n')
		o->nodes = v;
	else if (c == 'N')
		o->name = v;
	else if (c == 'f')
		o->from = v;
	else if (c == 'd')
		o->dry = true;
}

/* The services that serve model NAME (`model: NAME`, a bare name: each
 * node's store) with a rank on a node where this push wrote: the store put
 * the new files beside the old ones (new inodes), so their processes keep
 * the version they started with until they restart. Added to the answer as
 * services_on_old_version [{name, state, run, nodes: [names]}]; nothing is
 * added when the head cannot say (its answer is not an error of the push). */
static void old_version_services(struct cli_ctx *ctx, const char *name, json_t *data)
{
	json_t *changed = json_object(), *out = json_array(), *sl = NULL;
	size_t i;
	json_t *nd;
	json_array_foreach(json_object_get(data, "nodes"), i, nd)
		if (cli_jnum(nd, "chunks_written") > 0)
			json_object_set(changed, cli_jstr(nd, "node"), json_object_get(nd, "name"));
	char *code = NULL, *msg = NULL;
	if (json_object_size(changed) &&
	    cli_call_raw(ctx, "svc_ls", NULL, &sl, 0, &code, &msg) == 0) {
		json_t *s;
		json_array_foreach(json_object_get(sl, "services"), i, s) {
			if (strcmp(cli_jstr(s, "model"), name) || !json_is_integer(json_object_get(s, "run")))
				continue;
			json_t *sh = NULL, *nodes = json_array();
			free(code);
			free(msg);
			code = msg = NULL;
			if (cli_call_raw(ctx, "svc_show", json_pack("{s:s}", "name", cli_jstr(s, "name")),
					 &sh, 0, &code, &msg) == 0) {
				size_t k;
				json_t *r;
				json_array_foreach(json_object_get(sh, "nodes"), k, r)
					if (json_object_get(changed, cli_jstr(r, "node_id")))
						json_array_append(nodes, json_object_get(r, "node"));
			}
			if (json_array_size(nodes))
				json_array_append_new(out, json_pack("{s:s, s:s, s:O, s:O}", "name",
								     cli_jstr(s, "name"), "state",
								     cli_jstr(s, "state"), "run",
								     json_object_get(s, "run"), "nodes",
								     nodes));
			json_decref(nodes);
			json_decref(sh);
		}
	}
	free(code);
	free(msg);
	json_decref(sl);
	json_decref(changed);
	json_object_set_new(data, "services_on_old_version", out);
}

int cmd_model_push(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {{"group", required_argument, NULL, 'g'},
					   {"nodes", required_argument, NULL, 'n'},
					   {"name", required_argument, NULL, 'N'},
					   {"from", required_argument, NULL, 'f'},
					   {"dry-run", no_argument, NULL, 'd'},
					   CLI_OPT_END};
	struct push_opts po = {0};
	const char *dirarg = NULL;
	int rc = opts_around_one(ctx, argc, argv, lo, push_opt, &po, &dirarg);
	if (rc)
		return rc;
	const char *group = po.group, *nodes = po.nodes, *name = po.name;
	bool dry = po.dry;
	if (!dirarg)
		return cli_usage(ctx, "missing the model DIR to push");
	if (!group == !nodes)
		return cli_usage(ctx, "give exactly one of --group G or --nodes a,b,c");
	char dir[PATH_MAX];
	struct stat st;
	if (po.from) {
		/* a path on the source node: checked there */
		if (dirarg[0] != '/' || strlen(dirarg) >= sizeof dir)
			return cli_usage(ctx, "with --from, DIR is the model's folder on %s: give its "
					 "absolute path", po.from);
		util_strlcpy(dir, dirarg, sizeof dir);
		size_t dl = strlen(dir);
		while (dl > 1 && dir[dl - 1] == '/')
			dir[--dl] = 0;
	} else if (!realpath(dirarg, dir) || stat(dir, &st) < 0) {
		return cli_fail("%s: %s; give the folder of the model's files", dirarg,
				strerror(errno));
	} else if (!S_ISDIR(st.st_mode)) {
		return cli_fail("%s: not a directory; give the folder of the model's files", dir);
	}
	if (!name) {
		const char *b = strrchr(dir, '/');
		name = b && b[1] ? b + 1 : dir;
	}
	/* who this node is, who the others are */
	json_t *ver = NULL, *nl = NULL, *targets = NULL;
	if (cli_call(ctx, "version", NULL, &ver, 0) || cli_call(ctx, "node_ls", NULL, &nl, 0)) {
		json_decref(ver);
		return 1;
	}
	const char *self = po.from ? po.from : cli_jstr(ver, "node");
	if (group) {
		json_t *g = NULL;
		if (cli_call(ctx, "group_show", json_pack("{s:s}", "name", group), &g, 0)) {
			json_decref(ver);
			json_decref(nl);
			return 1;
		}
		targets = json_array();
		size_t i;
		json_t *mem;
		json_array_foreach(json_object_get(g, "members"), i, mem)
			json_array_append_new(targets, json_string(cli_jstr(mem, "name")));
		json_decref(g);
	} else {
		targets = split_names(nodes);
	}
	json_t *chain = json_array(), *self_node = NULL;
	size_t i;
	json_t *nd;
	json_array_foreach(json_object_get(nl, "nodes"), i, nd)
		if (!strcmp(cli_jstr(nd, "name"), self) || (po.from && !strcmp(cli_jstr(nd, "id"), self)))
			self_node = nd;
	rc = 0;
	json_t *order = json_array();
	if (self_node)
		json_array_append(order, self_node);
	size_t ti;
	json_t *t;
	json_array_foreach(targets, ti, t) {
		const char *tn = json_string_value(t);
		json_t *found = NULL;
		json_array_foreach(json_object_get(nl, "nodes"), i, nd)
			if (!strcmp(cli_jstr(nd, "name"), tn) || !strcmp(cli_jstr(nd, "id"), tn))
				found = nd;
		if (!found) {
			rc = cli_fail("no node '%s' in the cluster; 'sparkctl node ls' lists them", tn);
			break;
		}
		if (found != self_node)
			json_array_append(order, found);
	}
	if (!rc && !self_node && po.from)
		rc = cli_fail("no node '%s' in the cluster; 'sparkctl node ls' lists them", self);
	else if (!rc && !self_node)
		rc = cli_fail("this node (%s) is not in the cluster's node list", self);
	if (!rc && json_array_size(order) < 2)
		rc = cli_fail("nothing to push to: the only node named is the source");
	json_array_foreach(order, i, nd) {
		if (rc)
			break;
		char host[160];
		int port;
		if (util_split_hostport(cli_jstr(nd, "address"), 7300, host, sizeof host, &port) < 0) {
			rc = cli_fail("node %s has no usable address ('%s')", cli_jstr(nd, "name"),
				      cli_jstr(nd, "address"));
			break;
		}
		json_array_append_new(chain, json_pack("{s:s, s:s, s:s, s:i}", "id",
						       cli_jstr(nd, "id"), "name", cli_jstr(nd, "name"),
						       "host", host, "port", port + DATA_PORT_OFFSET));
	}
	json_decref(order);
	json_decref(targets);
	json_decref(ver);
	if (rc) {
		json_decref(nl);
		json_decref(chain);
		return rc;
	}
	/* the head's permission for this push (admins only): the nodes check it */
	char push_id[33];
	if (pki_random_hex(push_id, 16) < 0) {
		json_decref(nl);
		json_decref(chain);
		return cli_fail("cannot make a push id (no randomness)");
	}
	json_t *ids = json_array(), *tk = NULL;
	json_array_foreach(chain, i, nd)
		json_array_append_new(ids, json_string(cli_jstr(nd, "id")));
	if (cli_call(ctx, "model_ticket", json_pack("{s:s, s:s, s:o}", "push", push_id, "name", name,
						    "chain", ids), &tk, 0)) {
		json_decref(nl);
		json_decref(chain);
		return 1;
	}
	/* the head's route: the chain in the order it signed (each next node one the
	 * node before it reaches on the fabric: on a ring, the ring), and each
	 * node's fabric addresses for its hop (its lanes) */
	const char *network = json_is_string(json_object_get(tk, "network"))
				  ? cli_jstr(tk, "network") : "agent_address";
	json_t *route = json_array();
	json_array_foreach(json_object_get(tk, "chain"), i, nd) {
		size_t k;
		json_t *m;
		json_array_foreach(chain, k, m)
			if (!strcmp(cli_jstr(m, "id"), json_string_value(nd))) {
				json_t *lanes = json_object_get(json_object_get(tk, "lanes"),
								json_string_value(nd));
				json_object_set(m, "lanes", json_is_array(lanes) ? lanes : json_array());
				json_array_append(route, m);
			}
	}
	if (json_array_size(route) == json_array_size(chain)) {
		json_decref(chain);
		chain = route;
	} else {
		json_decref(route); /* an older head: its own order, no lanes */
	}
	json_t *args = json_pack("{s:s, s:s, s:O, s:b, s:s, s:O, s:O}", "dir", dir, "name", name,
				 "chain", chain, "dry_run", dry, "push", push_id, "ticket",
				 json_object_get(tk, "ticket"), "expires_at",
				 json_object_get(tk, "expires_at"));
	json_object_set_new(args, "network", json_string(network)); /* for the text writer */
	json_decref(tk);
	json_t *req = json_incref(args);
	struct push_view v = {.ctx = ctx, .last = json_object(), .tty = isatty(1), .t0 = util_now_ms(),
			      .names = json_object()};
	json_array_foreach(chain, i, nd)
		json_object_set(v.names, cli_jstr(nd, "id"), json_object_get(nd, "name"));
	struct cli_stream cs = {.on_event = push_event, .arg = &v};
	json_t *data = NULL;
	char *code = NULL, *msg = NULL;
	if (po.from)
		json_object_set_new(args, "from", json_string(cli_jstr(json_array_get(chain, 0), "id")));
	int r = cli_stream_raw(ctx, po.from ? "model_push_from" : "model_push", args, &data, 0, &cs,
			       &code, &msg);
	cli_progress_clear(ctx);
	if (r < 0) {
		rc = cli_fail("%s", msg && *msg ? msg : "the push failed");
	} else {
		/* names for the ids of the report */
		json_t *names = json_object();
		json_array_foreach(chain, i, nd)
			json_object_set(names, cli_jstr(nd, "id"), json_object_get(nd, "name"));
		json_array_foreach(json_object_get(data, "nodes"), i, nd) {
			json_t *nm = json_object_get(names, cli_jstr(nd, "node"));
			if (nm)
				json_object_set(nd, "name", nm);
			size_t k;
			json_t *rp;
			json_array_foreach(json_object_get(nd, "repairs"), k, rp) {
				json_t *fr = json_object_get(names, cli_jstr(rp, "from"));
				json_t *bf = json_object_get(names, cli_jstr(rp, "bad_from"));
				json_object_set(rp, "from_name", fr ? fr : json_object_get(rp, "from"));
				if (json_object_get(rp, "bad_from"))
					json_object_set(rp, "bad_from_name",
							bf ? bf : json_object_get(rp, "bad_from"));
			}
		}
		json_decref(names);
		/* which network carried it: fabric (every hop), mixed, agent_address;
		 * and the chain it followed, with each hop's fabric addresses */
		json_object_set_new(data, "network", json_string(cli_jstr(req, "network")));
		json_t *rt = json_array();
		json_array_foreach(chain, i, nd)
			json_array_append_new(rt, json_pack("{s:s, s:s, s:O}", "node", cli_jstr(nd, "id"),
							    "name", cli_jstr(nd, "name"), "lanes",
							    json_object_get(nd, "lanes")
								? json_object_get(nd, "lanes")
								: json_null()));
		json_object_set_new(data, "route", rt);
		if (!dry)
			old_version_services(ctx, name, data);
		cli_output(ctx, req, data, NULL);
		if (!dry && !json_is_true(json_object_get(data, "complete"))) {
			char bad[512] = "";
			size_t off = 0;
			json_array_foreach(json_object_get(data, "nodes"), i, nd)
				if (strcmp(cli_jstr(nd, "status"), "complete"))
					off += (size_t)snprintf(bad + off, off < sizeof bad ? sizeof bad - off : 0,
								"%s%s (%s: %s)", off ? ", " : "",
								cli_jstr(nd, "name"), cli_jstr(nd, "status"),
								cli_jstr(nd, "message"));
			rc = cli_fail("%s is not complete on %s; fix that and run the same push again: "
				      "only what is missing moves", name, bad);
		}
	}
	free(code);
	free(msg);
	json_decref(data);
	json_decref(req);
	json_decref(v.last);
	json_decref(v.names);
	json_decref(nl);
	json_decref(chain);
	return rc;
}


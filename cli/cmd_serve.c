/* sparkctl recipe ls|show, serve [--dry-run] and svc ls|show|logs|stop|
 * restart|rm (issue 19, docs/serve.md, docs/serving.md).
 *
 * Recipes come from the user's recipe directories (--recipe-dir, else
 * $SPARKCTL_RECIPE_DIR, else ~/.config/sparkctl/recipes and
 * /etc/sparkctl/recipes) and the built-in ones (models/recipes). A user
 * recipe of a built-in's name replaces it. `serve --dry-run` asks sparkd for
 * the group (group_show) and each member's fabric report (node_show), picks
 * the address every other member reaches each at, renders every member's
 * command and environment (models/recipe.h) and checks the model's memory
 * per node with the planner (models/model.h). Without --dry-run the plan goes
 * to the head as svc_start, which checks it, admits it against the nodes'
 * memory budgets and keeps it running (agent/serve_head.c). */
#include "cli.h"
#include "output.h"

#include "model.h"
#include "recipe.h"
#include "util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_SETS 32
#define MAX_DIRS 3

/* ---- where recipes are ---------------------------------------------------- */

struct dirs {
	char d[MAX_DIRS][512];
	int n;
};

static void recipe_dirs(const char *flag, struct dirs *ds)
{
	ds->n = 0;
	const char *env = getenv("SPARKCTL_RECIPE_DIR");
	if (flag || (env && *env)) {
		snprintf(ds->d[ds->n++], sizeof ds->d[0], "%s", flag ? flag : env);
		return;
	}
	const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
	if (xdg && *xdg)
		snprintf(ds->d[ds->n++], sizeof ds->d[0], "%s/sparkctl/recipes", xdg);
	else if (home && *home)
		snprintf(ds->d[ds->n++], sizeof ds->d[0], "%s/.config/sparkctl/recipes", home);
	snprintf(ds->d[ds->n++], sizeof ds->d[0], "/etc/sparkctl/recipes");
}

static bool is_recipe_file(const char *name)
{
	size_t n = strlen(name);
	return name[0] != '.' && ((n > 5 && strcmp(name + n - 5, ".yaml") == 0) ||
				  (n > 4 && strcmp(name + n - 4, ".yml") == 0));
}

/* Find NAME: a path (has a '/' or names an existing file), a user recipe
 * NAME.yaml / NAME.yml, or a built-in. Parses it with sets. 0, or the exit
 * code after printing why. source gets the file or "built-in". */
static int find_recipe(struct cli_ctx *ctx, const char *name, const struct dirs *ds,
		       const char *const *sets, size_t n_sets, recipe_t *r, char *source,
		       size_t sl, char **text_out)
{
	char err[RECIPE_ERR_LEN];
	struct stat st;
	char path[1024] = "";
	if (strchr(name, '/') || (is_recipe_file(name) && stat(name, &st) == 0 && S_ISREG(st.st_mode))) {
		snprintf(path, sizeof path, "%s", name);
	} else {
		for (int i = 0; i < ds->n && !path[0]; i++) {
			static const char *const ext[] = {".yaml", ".yml"};
			for (int e = 0; e < 2 && !path[0]; e++) {
				char p[1024];
				snprintf(p, sizeof p, "%s/%s%s", ds->d[i], name, ext[e]);
				if (stat(p, &st) == 0 && S_ISREG(st.st_mode))
					snprintf(path, sizeof path, "%s", p);
			}
		}
	}
	if (path[0]) {
		char *text;
		size_t len;
		int rc = util_read_file(path, &text, &len, RECIPE_MAX_TEXT);
		if (rc < 0)
			return cli_fail("cannot read recipe %s: %s", path, strerror(-rc));
		rc = recipe_parse(path, text, len, sets, n_sets, r, err, sizeof err);
		if (rc < 0) {
			free(text);
			return cli_fail("%s; fix the recipe (docs/serve.md lists its keys)", err);
		}
		snprintf(source, sl, "%s", path);
		if (text_out)
			*text_out = text;
		else
			free(text);
		return 0;
	}
	const recipe_builtin_t *b = recipe_builtin_find(name);
	if (!b)
		return cli_usage(ctx, "no recipe '%s' (not a file, not in %s%s%s, not built in); "
				      "'sparkctl recipe ls' lists them", name, ds->n ? ds->d[0] : "",
				 ds->n > 1 ? " or " : "", ds->n > 1 ? ds->d[1] : "");
	char file[96];
	snprintf(file, sizeof file, "built-in:%s", b->name);
	if (recipe_parse(file, b->text, strlen(b->text), sets, n_sets, r, err, sizeof err) < 0)
		return n_sets ? cli_fail("%s", err) : cli_fail("%s (a broken built-in recipe)", err);
	snprintf(source, sl, "built-in");
	if (text_out)
		*text_out = strdup(b->text);
	return 0;
}

/* ---- recipe ls ----------------------------------------------------------------- */

static void add_listed(json_t *arr, const char *name, const recipe_t *r, const char *source,
		       const char *error)
{
	size_t i;
	json_t *o;
	json_array_foreach(arr, i, o)
		if (strcmp(json_string_value(json_object_get(o, "name")), name) == 0)
			return; /* an earlier directory (or the user) has it */
	json_array_append_new(
	    arr, json_pack("{s:s, s:s, s:s, s:s, s:s, s:s*}", "name", name, "runtime",
			   r ? recipe_runtime_name(r->runtime) : "-", "model", r ? r->model : "-",
			   "description", r ? r->description : "", "source", source, "error",
			   error));
}

int cmd_recipe_ls(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {{"recipe-dir", required_argument, NULL, 'd'},
					   CLI_OPT_END};
	const char *dirflag = NULL;
	int ch, rc = 0;
	optind = 0;
	while ((ch = cli_next_opt(ctx, argc, argv, lo, &rc)) != -1) {
		if (ch == -2)
			return rc;
		dirflag = optarg;
	}
	if (optind < argc)
		return cli_usage(ctx, "unexpected argument '%s'", argv[optind]);
	struct dirs ds;
	recipe_dirs(dirflag, &ds);
	json_t *arr = json_array();
	int bad = 0;
	for (int i = 0; i < ds.n; i++) {
		DIR *d = opendir(ds.d[i]);
		if (!d) {
			if (dirflag)
				fprintf(stderr, "sparkctl: cannot read %s: %s\n", ds.d[i], strerror(errno));
			continue;
		}
		/* sorted, so the listing is stable */
		struct dirent **ents = NULL;
		closedir(d);
		int n = scandir(ds.d[i], &ents, NULL, alphasort);
		for (int k = 0; k < n; k++) {
			if (is_recipe_file(ents[k]->d_name)) {
				char path[1024];
				snprintf(path, sizeof path, "%s/%s", ds.d[i], ents[k]->d_name);
				recipe_t r;
				char err[RECIPE_ERR_LEN];
				if (recipe_load(path, NULL, 0, &r, err, sizeof err) == 0) {
					add_listed(arr, r.name, &r, path, NULL);
					recipe_free(&r);
				} else {
					char name[256];
					snprintf(name, sizeof name, "%s", ents[k]->d_name);
					*strrchr(name, '.') = '\0';
					add_listed(arr, name, NULL, path, err);
					bad++;
				}
			}
			free(ents[k]);
		}
		free(ents);
	}
	for (size_t i = 0; recipe_builtin_at(i); i++) {
		const recipe_builtin_t *b = recipe_builtin_at(i);
		recipe_t r;
		char err[RECIPE_ERR_LEN];
		if (recipe_parse(b->name, b->text, strlen(b->text), NULL, 0, &r, err, sizeof err) ==
		    0) {
			add_listed(arr, b->name, &r, "built-in", NULL);
			recipe_free(&r);
		}
	}
	json_t *d = json_pack("{s:o}", "recipes", arr);
	cli_output(ctx, NULL, d, NULL);
	json_decref(d);
	if (bad)
		return cli_fail("%d recipe file(s) do not parse (above); fix them or move them away",
				bad);
	return 0;
}

/* ---- recipe show ------------------------------------------------------------------ */

static int parse_set(struct cli_ctx *ctx, const char *s, const char **sets, size_t *n)
{
	if (!strchr(s, '=') || s[0] == '=')
		return cli_usage(ctx, "--set takes KEY=VALUE (tp=2, model=org/name, env.HF_HOME=/d)");
	if (*n >= MAX_SETS)
		return cli_usage(ctx, "at most %d --set", MAX_SETS);
	sets[(*n)++] = s;
	return 0;
}

int cmd_recipe_show(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {{"recipe-dir", required_argument, NULL, 'd'},
					   {"set", required_argument, NULL, 's'},
					   {"yaml", no_argument, NULL, 'y'},
					   CLI_OPT_END};
	const char *dirflag = NULL, *name = NULL, *sets[MAX_SETS];
	size_t n_sets = 0;
	bool yaml = false;
	int ch, rc = 0;
	name = cli_leading_arg(&argc, &argv);
	optind = 0;
	while ((ch = cli_next_opt(ctx, argc, argv, lo, &rc)) != -1) {
		if (ch == -2)
			return rc;
		if (ch == 'd')
			dirflag = optarg;
		else if (ch == 'y')
			yaml = true;
		else if ((rc = parse_set(ctx, optarg, sets, &n_sets)))
			return rc;
	}
	if (!name && optind < argc)
		name = argv[optind++];
	if (optind < argc)
		return cli_usage(ctx, "unexpected argument '%s'", argv[optind]);
	if (!name)
		return cli_usage(ctx, "which recipe? 'sparkctl recipe ls' lists them");
	struct dirs ds;
	recipe_dirs(dirflag, &ds);
	recipe_t r;
	char source[1024];
	char *text = NULL;
	if ((rc = find_recipe(ctx, name, &ds, sets, n_sets, &r, source, sizeof source, &text)))
		return rc;
	json_t *j = recipe_json(&r);
	json_object_set_new(j, "source", json_string(source));
	if (yaml) /* the file itself, as a starting point for one of yours */
		fputs(text ? text : "", stdout);
	else
		cli_output(ctx, NULL, j, NULL);
	free(text);
	json_decref(j);
	recipe_free(&r);
	return 0;
}

/* ---- the group's layout -------------------------------------------------------------- */

static int cidr(const char *s, uint32_t *addr, uint32_t *mask)
{
	char ip[64];
	const char *sl = s ? strchr(s, '/') : NULL;
	if (!sl || (size_t)(sl - s) >= sizeof ip)
		return -EINVAL;
	memcpy(ip, s, (size_t)(sl - s));
	ip[sl - s] = '\0';
	struct in_addr a;
	char *e;
	long l = strtol(sl + 1, &e, 10);
	if (inet_pton(AF_INET, ip, &a) != 1 || *e || l < 1 || l > 32)
		return -EINVAL;
	*addr = ntohl(a.s_addr);
	*mask = (uint32_t)(0xffffffffu << (32 - l));
	return 0;
}

/* Each twin with carrier of a discovery report: cb over its IPv4 CIDRs. */
#define FOR_ADDRS(disc, p, t, a, i, k, x)                                               \
	json_array_foreach(json_object_get((disc), "ports"), (i), (p))                   \
		json_array_foreach(json_object_get((p), "twins"), (k), (t))               \
			if (json_is_true(json_object_get((t), "carrier")))                \
				json_array_foreach(json_object_get((t), "ipv4"), (x), (a))

static bool reaches(json_t *disc, uint32_t net, uint32_t mask)
{
	size_t i, k, x;
	json_t *p, *t, *a;
	FOR_ADDRS(disc, p, t, a, i, k, x) {
		uint32_t ad, m;
		if (cidr(json_string_value(a), &ad, &m) == 0 && m == mask && (ad & mask) == net)
			return true;
	}
	return false;
}

/* The RDMA devices of the twins with carrier. */
static void hcas_of(json_t *disc, char *out, size_t len)
{
	size_t i, k, o = 0;
	json_t *p, *t;
	out[0] = '\0';
	json_array_foreach(json_object_get(disc, "ports"), i, p)
		json_array_foreach(json_object_get(p, "twins"), k, t) {
			json_t *rd = json_object_get(t, "rdma");
			const char *dev = json_string_value(json_object_get(rd, "device"));
			const char *st = json_string_value(json_object_get(rd, "state"));
			if (!json_is_true(json_object_get(t, "carrier")) || !dev ||
			    (st && strcmp(st, "active") != 0) || o + strlen(dev) + 2 >= len)
				continue;
			o += (size_t)snprintf(out + o, len - o, "%s%s", o ? "," : "", dev);
		}
}

/* Fill l from the members and their discovery reports: the fabric address
 * each member has in a subnet every other member also has (a switch, a
 * pair), else every member's management address (a 4-ring: non-neighbours
 * share no subnet). note says which, and why. */
static void pick_addresses(recipe_layout_t *l, json_t *disc[], char *note, size_t nl)
{
	bool fabric = true;
	size_t bad = 0;
	for (size_t n = 0; n < l->n && fabric; n++) {
		bool found = false;
		size_t i, k, x;
		json_t *p, *t, *a;
		FOR_ADDRS(disc[n], p, t, a, i, k, x) {
			uint32_t ad, m;
			const char *s = json_string_value(a);
			if (found || cidr(s, &ad, &m) < 0)
				continue;
			bool all = true;
			for (size_t j = 0; j < l->n && all; j++)
				all = j == n || reaches(disc[j], ad & m, m);
			if (!all)
				continue;
			found = true;
			snprintf(l->m[n].addr, sizeof l->m[n].addr, "%.*s", (int)(strchr(s, '/') - s),
				 s);
			snprintf(l->m[n].ifname, sizeof l->m[n].ifname, "%s",
				 json_string_value(json_object_get(t, "netdev")) ?: "");
		}
		if (!found) {
			fabric = false;
			bad = n;
		}
	}
	for (size_t n = 0; n < l->n; n++) {
		hcas_of(disc[n], l->m[n].hcas, sizeof l->m[n].hcas);
		/* the chosen netdev first, then every other twin with carrier and an
		 * address (NCCL_SOCKET_IFNAME, UCX_NET_DEVICES) */
		recipe_member_t *mm = &l->m[n];
		size_t o = (size_t)snprintf(mm->ifnames, sizeof mm->ifnames, "%s", mm->ifname);
		size_t i, k;
		json_t *p, *t;
		json_array_foreach(json_object_get(disc[n], "ports"), i, p)
			json_array_foreach(json_object_get(p, "twins"), k, t) {
				const char *nd = json_string_value(json_object_get(t, "netdev"));
				if (!nd || !json_is_true(json_object_get(t, "carrier")) ||
				    !json_array_size(json_object_get(t, "ipv4")) ||
				    strcmp(nd, mm->ifname) == 0 || o + strlen(nd) + 2 >= sizeof mm->ifnames)
					continue;
				o += (size_t)snprintf(mm->ifnames + o, sizeof mm->ifnames - o, "%s%s",
						      o ? "," : "", nd);
			}
	}
	if (fabric || l->n == 1) {
		l->net = "fabric";
		if (l->n == 1 && !l->m[0].addr[0])
			snprintf(l->m[0].addr, sizeof l->m[0].addr, "%s", l->m[0].mgmt_addr);
		snprintf(note, nl, "sockets on the fabric: every node has an address the others "
				   "reach directly");
		return;
	}
	l->net = "management";
	for (size_t n = 0; n < l->n; n++) {
		snprintf(l->m[n].addr, sizeof l->m[n].addr, "%s", l->m[n].mgmt_addr);
		l->m[n].ifname[0] = '\0';
		l->m[n].ifnames[0] = '\0';
	}
	snprintf(note, nl, "sockets on the management network: %s (rank %zu) has no fabric "
			   "address that every other node reaches directly; RDMA still uses the "
			   "fabric devices", l->m[bad].name, bad);
}

static int layout_from_cluster(struct cli_ctx *ctx, const char *group, recipe_layout_t *l,
			       json_t **keep, char *note, size_t nl)
{
	json_t *g = NULL;
	if (cli_call(ctx, "group_show", json_pack("{s:s}", "name", group), &g, 0))
		return 1;
	json_t *members = json_object_get(g, "members");
	size_t n = json_array_size(members);
	if (n == 0) {
		json_decref(g);
		return cli_fail("group %s has no nodes; 'sparkctl group show %s'", group, group);
	}
	if (n > RECIPE_MAX_NODES) {
		json_decref(g);
		return cli_fail("group %s has %zu nodes; a service spans at most %d", group, n,
				RECIPE_MAX_NODES);
	}
	memset(l, 0, sizeof *l);
	l->n = n;
	const char *topo = json_string_value(json_object_get(g, "topology"));
	l->topology = topo && strcmp(topo, "ring") == 0 ? "ring" : "switch";
	json_t *disc[RECIPE_MAX_NODES] = {0};
	size_t i;
	json_t *m;
	int rc = 0;
	json_array_foreach(members, i, m) {
		recipe_member_t *mm = &l->m[i];
		snprintf(mm->name, sizeof mm->name, "%s", cli_jstr(m, "name"));
		int port;
		if (util_split_hostport(cli_jstr(m, "address"), 7300, mm->mgmt_addr,
					sizeof mm->mgmt_addr, &port) < 0)
			snprintf(mm->mgmt_addr, sizeof mm->mgmt_addr, "%s", cli_jstr(m, "address"));
		const char *st = cli_jstr(m, "state");
		if (strcmp(st, "ready") != 0)
			fprintf(stderr, "sparkctl: note: %s is %s\n", mm->name, st);
		json_t *ns = NULL;
		if (cli_call(ctx, "node_show", json_pack("{s:s}", "node", mm->name), &ns, 0)) {
			rc = 1;
			break;
		}
		disc[i] = json_incref(json_object_get(json_object_get(ns, "fabric_report"),
						      "discovery"));
		json_decref(ns);
	}
	if (!rc)
		pick_addresses(l, disc, note, nl);
	for (i = 0; i < n; i++)
		json_decref(disc[i]);
	*keep = g; /* l->group and topology point into it */
	l->group = json_string_value(json_object_get(g, "name"));
	return rc;
}

/* --layout FILE: {"group", "topology", "members": [{"name", "address",
 * "mgmt_address", "ifname", "hcas"}]} in rank order (no cluster needed). */
static int layout_from_file(const char *path, recipe_layout_t *l, json_t **keep)
{
	json_error_t e;
	json_t *j = json_load_file(path, 0, &e);
	if (!j)
		return cli_fail("%s:%d:%d: %s; fix the layout file", path, e.line, e.column, e.text);
	json_t *ms = json_object_get(j, "members");
	size_t n = json_array_size(ms);
	if (n == 0 || n > RECIPE_MAX_NODES) {
		json_decref(j);
		return cli_fail("%s: \"members\" must list 1 to %d nodes in rank order", path,
				RECIPE_MAX_NODES);
	}
	memset(l, 0, sizeof *l);
	l->n = n;
	l->group = json_string_value(json_object_get(j, "group"));
	l->topology = json_string_value(json_object_get(j, "topology"));
	if (l->topology && strcmp(l->topology, "ring") != 0 && strcmp(l->topology, "switch") != 0) {
		json_decref(j);
		return cli_fail("%s: topology must be ring or switch", path);
	}
	bool all_fabric = true;
	size_t i;
	json_t *m;
	json_array_foreach(ms, i, m) {
		recipe_member_t *mm = &l->m[i];
		const char *name = json_string_value(json_object_get(m, "name"));
		const char *addr = json_string_value(json_object_get(m, "address"));
		const char *mg = json_string_value(json_object_get(m, "mgmt_address"));
		if (!name || !(addr || mg)) {
			json_decref(j);
			return cli_fail("%s: member %zu needs \"name\" and \"address\"", path, i);
		}
		if (!addr)
			all_fabric = false;
		snprintf(mm->name, sizeof mm->name, "%s", name);
		snprintf(mm->addr, sizeof mm->addr, "%s", addr ? addr : mg);
		snprintf(mm->mgmt_addr, sizeof mm->mgmt_addr, "%s", mg ? mg : addr);
		snprintf(mm->ifname, sizeof mm->ifname, "%s",
			 json_string_value(json_object_get(m, "ifname")) ?: "");
		snprintf(mm->hcas, sizeof mm->hcas, "%s",
			 json_string_value(json_object_get(m, "hcas")) ?: "");
		snprintf(mm->ifnames, sizeof mm->ifnames, "%s",
			 json_string_value(json_object_get(m, "ifnames")) ?: "");
	}
	l->net = all_fabric ? "fabric" : "management";
	*keep = j;
	return 0;
}

/* ---- memory admission ---------------------------------------------------------------- */

/* The planner's shape of the recipe's model: a local directory or
 * config.json, a catalog name, or a hub id whose last part (less
 * -Instruct, -FP8 ... suffixes) is a catalog model's name. */
static bool model_shape_of(const char *model, const model_catalog_t *cat, model_shape_t *s,
			   char *how, size_t hl)
{
	struct stat st;
	char err[MODEL_ERR_LEN];
	if (stat(model, &st) == 0 && model_shape_load(model, s, err, sizeof err) == 0) {
		snprintf(how, hl, "config.json of %s", model);
		return true;
	}
	char name[256];
	const char *base = strrchr(model, '/');
	snprintf(name, sizeof name, "%s", base ? base + 1 : model);
	for (;;) {
		const model_shape_t *c = model_catalog_find(cat, name);
		if (c) {
			*s = *c;
			snprintf(how, hl, "catalog shape %s", c->name);
			return true;
		}
		char *dash = strrchr(name, '-');
		if (!dash || dash == name)
			return false;
		*dash = '\0';
	}
}

static json_t *admission(const recipe_t *r, int tp, int pp)
{
	json_t *a = json_object();
	double budget = MODEL_USABLE_GIB;
	json_object_set_new(a, "budget_gib", json_real(budget));
	json_object_set_new(a, "budget_source",
			    json_string("planner default (nodes do not report memory yet)"));
	if (r->memory_gib > 0) {
		json_object_set_new(a, "source", json_string("recipe"));
		json_object_set_new(a, "need_gib", json_real(r->memory_gib));
		json_object_set_new(a, "fits", json_boolean(r->memory_gib <= budget));
		if (r->memory_gib > budget) {
			char why[128];
			snprintf(why, sizeof why, "the recipe's memory, %.1f GiB per node, is over the "
				 "%.0f GiB budget", r->memory_gib, budget);
			json_object_set_new(a, "why", json_string(why));
		}
		return a;
	}
	model_catalog_t cat;
	char err[MODEL_ERR_LEN];
	model_shape_t s;
	char how[320];
	if (model_catalog_parse(NULL, 0, &cat, err, sizeof err) < 0 ||
	    !model_shape_of(r->model, &cat, &s, how, sizeof how)) {
		json_object_set_new(a, "source", json_string("unknown"));
		json_object_set_new(a, "fits", json_null());
		json_object_set_new(a, "why", json_string("the planner knows no shape for this model "
							  "(not local, not in the catalog): set "
							  "memory: GiB in the recipe"));
		if (cat.shapes)
			model_catalog_free(&cat);
		return a;
	}
	model_catalog_free(&cat);
	model_fit_opts_t o = {.tp = tp, .pp = pp, .nodes = tp * pp,
			      .dtype = r->dtype[0] ? r->dtype : NULL, .context = r->context,
			      .overhead_gib = -1};
	model_fit_t f;
	json_object_set_new(a, "source", json_string("planner"));
	json_object_set_new(a, "shape", json_string(how));
	if (model_fit(&s, &o, &f, err, sizeof err) < 0) {
		json_object_set_new(a, "fits", json_false());
		json_object_set_new(a, "why", json_string(err));
		return a;
	}
	double need = (f.weights_b + f.kv_b + f.overhead_b) / GIB;
	json_object_set_new(a, "need_gib", json_real(need));
	json_object_set_new(a, "weights_gib", json_real(f.weights_b / GIB));
	json_object_set_new(a, "kv_gib", json_real(f.kv_b / GIB));
	json_object_set_new(a, "overhead_gib", json_real(f.overhead_b / GIB));
	json_object_set_new(a, "dtype", json_string(f.dtype));
	json_object_set_new(a, "context", json_integer(f.context));
	json_object_set_new(a, "fits", json_boolean(f.fits));
	if (!f.fits) {
		json_object_set_new(a, "why", json_string(f.why));
		model_fit_t g;
		int k = model_fewest_nodes(&s, &o, MODEL_MAX_NODES, &g);
		json_object_set_new(a, "fewest_nodes", json_integer(k));
	}
	return a;
}

/* ---- serve --dry-run ---------------------------------------------------------------- */

int cmd_serve(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {{"group", required_argument, NULL, 'g'},
					   {"dry-run", no_argument, NULL, 'n'},
					   {"set", required_argument, NULL, 's'},
					   {"port", required_argument, NULL, 'p'},
					   {"name", required_argument, NULL, 'N'},
					   {"recipe-dir", required_argument, NULL, 'd'},
					   {"layout", required_argument, NULL, 'l'},
					   {"force", no_argument, NULL, 'f'},
					   CLI_OPT_END};
	const char *group = NULL, *dirflag = NULL, *layout_file = NULL, *name = NULL;
	const char *sets[MAX_SETS + 2];
	char portset[32], nameset[96];
	size_t n_sets = 0;
	bool dry = false, force = false;
	int ch, rc = 0;
	const char *recipe = NULL;
	recipe = cli_leading_arg(&argc, &argv);
	optind = 0;
	while ((ch = cli_next_opt(ctx, argc, argv, lo, &rc)) != -1) {
		switch (ch) {
		case -2: return rc;
		case 'g': group = optarg; break;
		case 'n': dry = true; break;
		case 'd': dirflag = optarg; break;
		case 'l': layout_file = optarg; break;
		case 'f': force = true; break;
		case 'N': name = optarg; break;
		case 'p':
			snprintf(portset, sizeof portset, "port=%s", optarg);
			if ((rc = parse_set(ctx, portset, sets, &n_sets)))
				return rc;
			break;
		default:
			if ((rc = parse_set(ctx, optarg, sets, &n_sets)))
				return rc;
		}
	}
	if (!recipe && optind < argc)
		recipe = argv[optind++];
	if (optind < argc)
		return cli_usage(ctx, "unexpected argument '%s'", argv[optind]);
	if (!recipe)
		return cli_usage(ctx, "which recipe? 'sparkctl recipe ls' lists them");
	if (!group && !layout_file)
		return cli_usage(ctx, "on which group? add --group G ('sparkctl group ls')");
	if (group && layout_file)
		return cli_usage(ctx, "--group or --layout, not both");
	if (layout_file && !dry)
		return cli_usage(ctx, "--layout renders a plan only: add --dry-run, or serve on "
				      "--group G");
	if (name) {
		snprintf(nameset, sizeof nameset, "name=%s", name);
		sets[n_sets++] = nameset;
	}
	struct dirs ds;
	recipe_dirs(dirflag, &ds);
	recipe_t r;
	char source[1024];
	if ((rc = find_recipe(ctx, recipe, &ds, sets, n_sets, &r, source, sizeof source, NULL)))
		return rc;
	recipe_layout_t l;
	json_t *keep = NULL;
	char note[320] = "";
	if (layout_file) {
		rc = layout_from_file(layout_file, &l, &keep);
		snprintf(note, sizeof note, "sockets on the %s network (from %s)",
			 l.net ? l.net : "-", layout_file);
	} else {
		rc = layout_from_cluster(ctx, group, &l, &keep, note, sizeof note);
	}
	if (rc) {
		json_decref(keep);
		recipe_free(&r);
		return rc;
	}
	json_t *plan = NULL;
	char err[RECIPE_ERR_LEN];
	if (recipe_render(&r, &l, &plan, err, sizeof err) < 0) {
		json_decref(keep);
		recipe_free(&r);
		return cli_fail("%s; pick a larger group or --set tp=/pp=/nodes=", err);
	}
	json_t *ad = admission(&r, (int)cli_jnum(plan, "tp"), (int)cli_jnum(plan, "pp"));
	json_object_set_new(plan, "source", json_string(source));
	json_object_set_new(plan, "network_note", json_string(note));
	json_object_set_new(plan, "admission", ad);
	json_object_set_new(plan, "forced", json_boolean(force));
	json_t *fits = json_object_get(ad, "fits");
	if (dry)
		cli_output(ctx, NULL, plan, NULL);
	rc = 0;
	if (json_is_false(fits)) {
		long long k = cli_jnum(ad, "fewest_nodes");
		if (force)
			fprintf(stderr, "sparkctl: the model does not fit in memory per node; --force "
					"given, so the plan stands anyway\n");
		else if (k > 0)
			rc = cli_fail("%s does not fit on %lld node(s) (%s); it would on %lld: use a "
				      "group of %lld, or --force",
				      r.model, cli_jnum(plan, "nodes"), cli_jstr(ad, "why"), k, k);
		else
			rc = cli_fail("%s does not fit (%s); set memory: in the recipe, a smaller "
				      "dtype, or --force", r.model, cli_jstr(ad, "why"));
	}
	if (!dry && rc == 0) {
		/* the head checks it against the group and the nodes' budgets, records
		 * it and starts it (docs/serving.md) */
		char cwd[4096];
		if (getcwd(cwd, sizeof cwd))
			json_object_set_new(plan, "cwd", json_string(cwd));
		if (getenv("PATH"))
			json_object_set_new(plan, "path", json_string(getenv("PATH")));
		json_t *args = json_pack("{s:s, s:s, s:O, s:b}", "name", r.name, "group", group,
					 "plan", plan, "force", force);
		json_t *ans = NULL;
		rc = cli_request(ctx, "svc_start", args, 60000, &ans);
		json_t *adm = json_object_get(ans, "admission");
		if (rc == 0 && json_is_false(json_object_get(adm, "fits")))
			fprintf(stderr, "sparkctl: over the memory budget of a node; started anyway "
					"because of --force\n");
		json_decref(ans);
	}
	json_decref(plan);
	json_decref(keep);
	recipe_free(&r);
	return rc;
}

/* ---- svc ------------------------------------------------------------------------------ */

int cmd_job_logs(struct cli_ctx *, int, char **); /* cmd_jobs.c */

/* The arguments of the svc commands: NAME (before or after the options) when
 * want_name, and the options of lo: --group (g), --follow (f), --rank (r).
 * 0, or the exit code of a usage error. */
struct svc_args {
	const char *name, *group, *rank;
	bool follow;
};

static int svc_parse(struct cli_ctx *ctx, int argc, char **argv, const struct option *lo,
		     bool want_name, struct svc_args *o)
{
	int ch, rc = 0;
	memset(o, 0, sizeof *o);
	for (int i = 1; i < argc; i++) /* -f, as `job logs -f` */
		if (strcmp(argv[i], "-f") == 0)
			argv[i] = (char *)"--follow";
	if (want_name)
		o->name = cli_leading_arg(&argc, &argv);
	optind = 0;
	while ((ch = cli_next_opt(ctx, argc, argv, lo, &rc)) != -1) {
		if (ch == -2)
			return rc;
		if (ch == 'g')
			o->group = optarg;
		else if (ch == 'f')
			o->follow = true;
		else if (ch == 'r')
			o->rank = optarg;
	}
	if (want_name && !o->name && optind < argc)
		o->name = argv[optind++];
	if (optind < argc)
		return cli_usage(ctx, "unexpected argument '%s'", argv[optind]);
	if (want_name && !o->name)
		return cli_usage(ctx, "which service? 'sparkctl svc ls' lists them");
	return 0;
}

static const struct option group_opts[] = {{"group", required_argument, NULL, 'g'}, CLI_OPT_END};

/* {"group": G} when given */
static json_t *group_req(const struct svc_args *o)
{
	json_t *args = json_object();
	if (o->group)
		json_object_set_new(args, "group", json_string(o->group));
	return args;
}

/* `svc VERB NAME`: {name: NAME} as type. */
static int svc_one(struct cli_ctx *ctx, int argc, char **argv, const char *type,
		   unsigned timeout_ms)
{
	static const struct option lo[] = {CLI_OPT_END};
	struct svc_args o;
	int rc = svc_parse(ctx, argc, argv, lo, true, &o);
	if (rc)
		return rc;
	return cli_request(ctx, type, json_pack("{s:s}", "name", o.name), timeout_ms, NULL);
}

int cmd_svc_ls(struct cli_ctx *ctx, int argc, char **argv)
{
	struct svc_args o;
	int rc = svc_parse(ctx, argc, argv, group_opts, false, &o);
	if (rc)
		return rc;
	return cli_request(ctx, "svc_ls", group_req(&o), 0, NULL);
}

/* A service whose model is a bare name serves each node's store copy
 * (SPARK_MODEL_DIR/NAME; spark-decode takes it before a folder of that name
 * where serve ran). model_copy {source "store", name, nodes: [{node, path
 * (null: not in that node's store), version, complete, changed_at,
 * run_started_before}]} says where it is on each of the service's nodes,
 * its version, and whether the run started before that copy last changed:
 * the run then serves the version before it (its processes keep the
 * replaced files open) until `svc restart`. Added by the CLI from
 * model_ls_all; left out when the head cannot say. */
static void svc_model_copy(struct cli_ctx *ctx, json_t *svc)
{
	const char *model = cli_jstr(svc, "model");
	if (!*model || strchr(model, '/') || strchr(model, ':'))
		return;
	json_t *ls = NULL;
	char *code = NULL, *msg = NULL;
	if (cli_call_raw(ctx, "model_ls_all", NULL, &ls, 0, &code, &msg) < 0) {
		free(code);
		free(msg);
		return;
	}
	time_t started = 0;
	struct tm tm = {0};
	const char *rs = cli_jstr(svc, "run_started_at");
	if (*rs && strptime(rs, "%Y-%m-%dT%H:%M:%SZ", &tm))
		started = timegm(&tm);
	json_t *nodes = json_array();
	size_t i, k, j;
	json_t *r, *n, *md;
	json_array_foreach(json_object_get(svc, "nodes"), i, r) {
		json_t *e = json_pack("{s:s, s:n, s:n, s:b, s:n, s:b}", "node", cli_jstr(r, "node"),
				      "path", "version", "complete", 0, "changed_at",
				      "run_started_before", 0);
		json_array_foreach(json_object_get(ls, "nodes"), k, n) {
			if (strcmp(cli_jstr(n, "id"), cli_jstr(r, "node_id")))
				continue;
			json_array_foreach(json_object_get(n, "models"), j, md) {
				if (strcmp(cli_jstr(md, "name"), model))
					continue;
				char path[4200];
				snprintf(path, sizeof path, "%s/%s", cli_jstr(n, "dir"), model);
				json_object_set_new(e, "path", json_string(path));
				json_object_set(e, "version", json_object_get(md, "version"));
				json_object_set(e, "complete", json_object_get(md, "complete"));
				json_t *ch = json_object_get(md, "changed_at");
				if (json_is_integer(ch)) {
					char at[32];
					time_t t = (time_t)json_integer_value(ch);
					struct tm g;
					if (gmtime_r(&t, &g) && strftime(at, sizeof at, "%Y-%m-%dT%H:%M:%SZ", &g))
						json_object_set_new(e, "changed_at", json_string(at));
					json_object_set_new(e, "run_started_before",
							    json_boolean(started && t > started));
				}
			}
		}
		json_array_append_new(nodes, e);
	}
	json_object_set_new(svc, "model_copy", json_pack("{s:s, s:s, s:o}", "source", "store", "name",
							 model, "nodes", nodes));
	json_decref(ls);
}

int cmd_svc_show(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {CLI_OPT_END};
	struct svc_args o;
	int rc = svc_parse(ctx, argc, argv, lo, true, &o);
	if (rc)
		return rc;
	json_t *req = json_pack("{s:s}", "name", o.name), *d = NULL;
	if (cli_call(ctx, "svc_show", json_incref(req), &d, 0)) {
		json_decref(req);
		return 1;
	}
	svc_model_copy(ctx, d);
	cli_output(ctx, req, d, NULL);
	json_decref(req);
	json_decref(d);
	return 0;
}

int cmd_svc_stop(struct cli_ctx *ctx, int argc, char **argv)
{
	return svc_one(ctx, argc, argv, "svc_stop", 30000);
}

int cmd_svc_restart(struct cli_ctx *ctx, int argc, char **argv)
{
	return svc_one(ctx, argc, argv, "svc_restart", 30000);
}

int cmd_svc_rm(struct cli_ctx *ctx, int argc, char **argv)
{
	return svc_one(ctx, argc, argv, "svc_rm", 0);
}

/* The current (or last) run's job logs: svc_show for the run, then job logs. */
int cmd_svc_logs(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct option lo[] = {{"follow", no_argument, NULL, 'f'},
					   {"rank", required_argument, NULL, 'r'},
					   CLI_OPT_END};
	struct svc_args o;
	int rc = svc_parse(ctx, argc, argv, lo, true, &o);
	if (rc)
		return rc;
	const char *name = o.name, *rank = o.rank;
	bool follow = o.follow;
	json_t *s = NULL;
	if (cli_call(ctx, "svc_show", json_pack("{s:s}", "name", name), &s, 0))
		return 1;
	long long run = cli_jnum(s, "last_run");
	json_decref(s);
	if (run <= 0)
		return cli_fail("service %s has not run yet; 'sparkctl svc show %s' says why", name,
				name);
	char id[32];
	snprintf(id, sizeof id, "%lld", run);
	char *av[6];
	int ac = 0;
	av[ac++] = (char *)"logs";
	av[ac++] = id;
	if (follow)
		av[ac++] = (char *)"--follow";
	if (rank) {
		av[ac++] = (char *)"--rank";
		av[ac++] = (char *)rank;
	}
	av[ac] = NULL;
	return cmd_job_logs(ctx, ac, av);
}

/* svc watch: every snapshot svc_watch sends (the first at once, then one per
 * change), until Ctrl-C or the head goes: -o json one line each, else the
 * svc ls table under a time stamp. */
struct watch_state {
	struct cli_ctx *ctx;
};

static void on_watch(void *arg, json_t *msg)
{
	struct watch_state *w = arg;
	json_t *d = json_object_get(msg, "data");
	if (!json_is_object(d))
		return;
	if (w->ctx->out == OUT_JSON) {
		char *s = json_dumps(d, JSON_COMPACT);
		if (s)
			printf("%s\n", s);
		free(s);
	} else {
		char at[64];
		printf("-- %s\n", out_fmt_utc((long long)time(NULL), "-", at, sizeof at));
		cli_output(w->ctx, NULL, d, NULL);
	}
	fflush(stdout);
}

int cmd_svc_watch(struct cli_ctx *ctx, int argc, char **argv)
{
	struct svc_args o;
	int rc = svc_parse(ctx, argc, argv, group_opts, false, &o);
	if (rc)
		return rc;
	json_t *args = group_req(&o);
	struct watch_state w = {.ctx = ctx};
	struct cli_stream cs = {.on_event = on_watch, .arg = &w};
	char *code = NULL, *msg = NULL;
	json_t *d = NULL;
	int r = cli_stream_raw(ctx, "svc_watch", args, &d, 0, &cs, &code, &msg);
	json_decref(d);
	if (r < 0)
		rc = cli_fail("%s; run it again to follow the services", msg && *msg ? msg : "the watch ended");
	free(code);
	free(msg);
	return rc;
}

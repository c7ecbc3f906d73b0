/* print: the text writers of sparkctl's answers, one per command that prints
 * one (the `print` column of the command table, commands.c), grouped by area
 * in print_<area>.c beside the table writer (output.h). A writer gets the
 * answer as -o json would print it (struct cli_answer in cli.h) and prints it
 * for people on stdout; it never sends a request and never decides the exit
 * code. Commands that compute their answer here hand their writer a view of
 * the C structs it came from, typed below. */
#ifndef SPARK_CLI_PRINT_H
#define SPARK_CLI_PRINT_H

#include "cli.h"

#include "model.h"
#include "prov.h"

/* ---- print_cluster.c: init, join, leave, status, version, node, token ---- */
void cli_text_init(const struct cli_answer *a);
void cli_text_join(const struct cli_answer *a);
void cli_text_leave(const struct cli_answer *a);
void cli_text_status(const struct cli_answer *a);
void cli_text_version(const struct cli_answer *a);
void cli_text_node_ls(const struct cli_answer *a);
void cli_text_node_show(const struct cli_answer *a);
void cli_text_node_drain(const struct cli_answer *a);
void cli_text_node_undrain(const struct cli_answer *a);
void cli_text_node_rm(const struct cli_answer *a);
void cli_text_token_create(const struct cli_answer *a);
void cli_text_token_ls(const struct cli_answer *a);
void cli_text_token_revoke(const struct cli_answer *a);

/* ---- print_sim.c: sim up, sim ls ----------------------------------------- */
struct cli_sim_up_view {
	const char *prefix;
	const char *topology; /* pair, ring, switch */
	int nodes, bare;      /* nodes with a sparkd (unless no_agents), bare ones after them */
	bool no_agents;
};
void cli_text_sim_up(const struct cli_answer *a);
struct cli_sim_ls_view {
	bool links;    /* --links: data is descs */
	json_t *descs; /* every listed sim's description (sim_describe) */
};
void cli_text_sim_ls(const struct cli_answer *a);

/* ---- print_provision.c ---------------------------------------------------- */
struct cli_provision_view {
	const struct prov_result *res; /* one per host */
	size_t n;
	bool dry_run;
};
void cli_text_provision(const struct cli_answer *a);
/* A host's result in a word: provisioned, unchanged, would change, failed. */
const char *cli_prov_host_result(const struct prov_result *r, bool dry);

/* ---- print_jobs.c: groups, run, jobs, bench decode ------------------------ */
void cli_text_group_create(const struct cli_answer *a);
void cli_text_group_ls(const struct cli_answer *a);
void cli_text_group_show(const struct cli_answer *a);
void cli_text_group_rm(const struct cli_answer *a);
void cli_text_run(const struct cli_answer *a);
void cli_text_job_ls(const struct cli_answer *a);
void cli_text_job_show(const struct cli_answer *a);
void cli_text_job_cancel(const struct cli_answer *a);
void cli_text_bench_decode(const struct cli_answer *a);

/* ---- print_topo.c: discover, topo show/validate/addresses ----------------- */
void cli_text_discover(const struct cli_answer *a);
void cli_text_topo_show(const struct cli_answer *a);
void cli_text_topo_validate(const struct cli_answer *a);
struct cli_topo_addresses_view {
	const char *netplan; /* the netplan file written for this node, or NULL */
};
void cli_text_topo_addresses(const struct cli_answer *a);
/* A discovery object (topology/discover.h) as a table, one row per twin
 * grouped by physical port, then its notes and findings (`discover` and
 * `node show` share it). */
void cli_print_fabric(json_t *discovery, json_t *findings);
/* status: "Topology: ring(4) PASS 2m ago" from status's "topology" object
 * (or "not validated" when it is null). */
void cli_topo_status_line(json_t *topology);

/* ---- print_models.c: fit, fit --catalog, plan decode ---------------------- */
struct cli_fit_view {
	bool catalog;
	/* one model */
	const model_shape_t *shape;
	const model_params_t *params;
	const model_fit_t *fit;
	int fewest;                   /* fewest nodes it fits on, 0: none */
	const model_fit_t *fewest_fit;
	/* --catalog: data's "models" follow cat's shapes */
	const model_catalog_t *cat;
	long long context;            /* as given, 0: the default */
	const char *group;            /* --group, or NULL */
};
void cli_text_fit(const struct cli_answer *a);
struct cli_plan_decode_view {
	const model_shape_t *shape;
	const model_decode_opts_t *opts;
	const model_calib_t *calib;
	const model_decode_row_t *rows;
	int n;
	const char *eff_note; /* where the efficiency came from */
};
void cli_text_plan_decode(const struct cli_answer *a);

/* ---- print_serve.c: recipe ls|show, serve, svc ---- */
void cli_text_recipe_ls(const struct cli_answer *a);
void cli_text_recipe_show(const struct cli_answer *a);
void cli_text_serve(const struct cli_answer *a);
/* svc ls|show|stop|restart|rm (services, docs/serving.md) */
void cli_text_svc_ls(const struct cli_answer *a);
void cli_text_svc_show(const struct cli_answer *a);
void cli_text_svc_change(const struct cli_answer *a);

/* ---- print_export.c: export slurm, env ---- */
void cli_text_export_slurm(const struct cli_answer *a);
void cli_text_env(const struct cli_answer *a);

/* ---- print_push.c: model ls|rm|verify|push ---- */
void cli_text_model_ls(const struct cli_answer *a);
void cli_text_model_rm(const struct cli_answer *a);
void cli_text_model_verify(const struct cli_answer *a);
void cli_text_model_push(const struct cli_answer *a);

/* ---- print_route.c: route check, route reload ---- */
void cli_text_route_check(const struct cli_answer *a);
void cli_text_route_reload(const struct cli_answer *a);

#endif

/* slurm: the files of `sparkctl export slurm` (issue 21, docs/slurm.md). A
 * pure function of a model (no I/O, no clock): the same model always gives
 * the same text, so a re-export after a change is a readable diff.
 *
 * Model (JSON, built by cmd_export.c from status, node show, group ls and
 * topo show):
 *   {"cluster":"spark", "generated_at":UNIX, "sparkctl_version":"0.1.0",
 *    "slurm_version":"22.05",
 *    "topology":{"class":"ring|switch|pair|...", "result":"pass|warn|fail",
 *                "finished_at":UNIX, "any_to_any":BOOL, "ring_order":[names],
 *                "cables":[topo show's cables]} or null (never validated),
 *    "nodes":[{"name":S, "address":HOST, "cpus":N|null, "memory_mib":N|null,
 *              "drained":BOOL}],
 *    "groups":[{"name":S, "nodes":[names]}],
 *    "task_prolog":PATH, "sparkctl":PATH, "socket":PATH (may hold %n),
 *    "gpu_device":PATH (gres.conf File=; Slurm 22.05 drops a GPU without one)}
 *
 * Files: slurm.conf (a fragment to Include), gres.conf, topology.conf (only
 * when the fabric is one switch or reaches any-to-any; otherwise NULL and
 * slurm.conf says why), task_prolog (the TaskProlog script). */
#ifndef SPARK_CLI_SLURM_H
#define SPARK_CLI_SLURM_H

#include <jansson.h>
#include <stddef.h>

#define SLURM_HEADROOM_PCT 10 /* of MemTotal, kept from RealMemory for the OS and the GPU driver */

struct slurm_files {
	char *slurm_conf;
	char *gres_conf;
	char *topology_conf; /* NULL: no topology plugin (a ring of 4+) */
	char *task_prolog;
};

/* 0, or -EINVAL with err (a model without nodes, a bad name). */
int slurm_render(json_t *model, struct slurm_files *out, char *err, size_t errlen);
void slurm_files_free(struct slurm_files *f);

#endif

/* harness: real sparkd daemons on loopback for integration tests.
 * Each node gets a temp state dir, its own control socket and a free port on
 * 127.0.0.1. Daemons are started with PR_SET_PDEATHSIG so they die with the
 * test process, and h_cluster_free() kills them and removes the temp dir. */
#ifndef SPARK_TEST_HARNESS_H
#define SPARK_TEST_HARNESS_H

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

#define H_MAX_NODES 16

struct h_node {
	char name[32];
	char dir[256];      /* state dir */
	char sock[256];
	char log[256];
	int port;
	pid_t pid;
};

struct h_cluster {
	char root[256];
	int n;
	struct h_node nodes[H_MAX_NODES];
};

struct h_result {
	int rc;
	char *out;
	char *err;
};

const char *h_bin(const char *name); /* path of a built binary: "sparkd", "sparkctl" */
struct h_cluster *h_cluster_new(int n);
void h_cluster_free(struct h_cluster *c);
/* Start node i's sparkd and wait until its control socket answers (5 s). */
int h_start(struct h_cluster *c, int i);
/* Same, with sparkd.yaml at config instead of an empty one. */
int h_start_cfg(struct h_cluster *c, int i, const char *config);
void h_kill(struct h_cluster *c, int i, int sig); /* and reap */
/* Run sparkctl against node i with the given arguments (NULL-terminated). */
struct h_result h_ctl(struct h_cluster *c, int i, ...);
/* The same, killed after secs seconds (a hang is a failure, not a stuck suite). */
struct h_result h_ctl_timeout(struct h_cluster *c, int i, int secs, ...);
/* Does something accept connections on the Unix socket at path? */
int h_sock_answers(const char *path);
/* Run any command (argv NULL-terminated), capturing output. */
struct h_result h_run(char *const argv[]);
void h_result_free(struct h_result *r);
/* Parse r->out as JSON (criterion-asserts it parses). */
json_t *h_json(const struct h_result *r);
/* init on node 0 and return the token (caller frees). */
char *h_init(struct h_cluster *c);
/* "127.0.0.1:PORT" of node i. */
const char *h_addr(struct h_cluster *c, int i);
/* Find the node object named name in status -o json of node i; NULL if absent. */
json_t *h_status_node(json_t *status, const char *name);
/* Poll status on node `via` until node `name` has `state` or timeout_ms passes.
 * Returns elapsed ms, or -1 on timeout. */
long h_wait_state(struct h_cluster *c, int via, const char *name, const char *state,
		  long timeout_ms);
long h_now_ms(void);

#endif

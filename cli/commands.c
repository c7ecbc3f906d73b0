/* The command table: every sparkctl command, its handler, the text writer of
 * its answer and its help. Handlers live in cmd_<area>.c, writers in
 * print_<area>.c (print.h). Keep groups together; order is help order. */
#include "cli.h"
#include "print.h"

#include <stddef.h>

/* cmd_cluster.c */
int cmd_init(struct cli_ctx *, int, char **);
int cmd_join(struct cli_ctx *, int, char **);
int cmd_leave(struct cli_ctx *, int, char **);
int cmd_status(struct cli_ctx *, int, char **);
int cmd_version(struct cli_ctx *, int, char **);
int cmd_node_ls(struct cli_ctx *, int, char **);
int cmd_node_show(struct cli_ctx *, int, char **);
int cmd_node_drain(struct cli_ctx *, int, char **);
int cmd_node_undrain(struct cli_ctx *, int, char **);
int cmd_node_rm(struct cli_ctx *, int, char **);
int cmd_token_create(struct cli_ctx *, int, char **);
int cmd_token_ls(struct cli_ctx *, int, char **);
int cmd_token_revoke(struct cli_ctx *, int, char **);
/* cmd_sim.c */
int cmd_sim_up(struct cli_ctx *, int, char **);
int cmd_sim_down(struct cli_ctx *, int, char **);
int cmd_sim_ls(struct cli_ctx *, int, char **);
int cmd_sim_exec(struct cli_ctx *, int, char **);
int cmd_sim_fault(struct cli_ctx *, int, char **);
int cmd_discover(struct cli_ctx *, int, char **);
/* cmd_provision.c */
int cmd_provision(struct cli_ctx *, int, char **);
/* cmd_jobs.c */
int cmd_group_create(struct cli_ctx *, int, char **);
int cmd_group_ls(struct cli_ctx *, int, char **);
int cmd_group_show(struct cli_ctx *, int, char **);
int cmd_group_rm(struct cli_ctx *, int, char **);
int cmd_run(struct cli_ctx *, int, char **);
int cmd_exec(struct cli_ctx *, int, char **);
int cmd_job_ls(struct cli_ctx *, int, char **);
int cmd_job_show(struct cli_ctx *, int, char **);
int cmd_job_logs(struct cli_ctx *, int, char **);
int cmd_job_cancel(struct cli_ctx *, int, char **);
int cmd_bench_allreduce(struct cli_ctx *, int, char **);
int cmd_bench_decode(struct cli_ctx *, int, char **);
/* cmd_topo.c */
int cmd_topo_show(struct cli_ctx *, int, char **);
int cmd_topo_validate(struct cli_ctx *, int, char **);
int cmd_topo_addresses(struct cli_ctx *, int, char **);
/* cmd_models.c */
int cmd_fit(struct cli_ctx *, int, char **);
int cmd_plan_decode(struct cli_ctx *, int, char **);
/* cmd_serve.c */
int cmd_recipe_ls(struct cli_ctx *, int, char **);
int cmd_recipe_show(struct cli_ctx *, int, char **);
int cmd_serve(struct cli_ctx *, int, char **);
int cmd_svc_ls(struct cli_ctx *, int, char **);
int cmd_svc_show(struct cli_ctx *, int, char **);
int cmd_svc_logs(struct cli_ctx *, int, char **);
int cmd_svc_stop(struct cli_ctx *, int, char **);
int cmd_svc_restart(struct cli_ctx *, int, char **);
int cmd_svc_rm(struct cli_ctx *, int, char **);
int cmd_svc_watch(struct cli_ctx *, int, char **);
/* cmd_export.c */
int cmd_export_slurm(struct cli_ctx *, int, char **);
int cmd_env(struct cli_ctx *, int, char **);
/* cmd_push.c (writers: print_push.c) */
int cmd_model_ls(struct cli_ctx *, int, char **);
int cmd_model_rm(struct cli_ctx *, int, char **);
int cmd_model_verify(struct cli_ctx *, int, char **);
int cmd_model_push(struct cli_ctx *, int, char **);
/* cmd_route.c (writers: print_route.c) */
int cmd_route_serve(struct cli_ctx *, int, char **);
int cmd_route_check(struct cli_ctx *, int, char **);
int cmd_route_reload(struct cli_ctx *, int, char **);
/* @@extern-decls: areas add their handler declarations above this line */

const struct cli_cmd cli_commands[] = {
	{NULL, "init", cmd_init, cli_text_init, "init [--name CLUSTER] [--advertise ADDR[:PORT]] [--ttl D]",
	 "make the local sparkd the head of a new cluster and print the join command",
	 "  --name CLUSTER        cluster name (default: spark)\n"
	 "  --advertise ADDR:PORT address workers use to reach this head (default: the listen address)\n"
	 "  --ttl D               lifetime of the first join token (default 24h, at most 3650d)\n"},
	{NULL, "join", cmd_join, cli_text_join, "join HEAD[:PORT] --token TOKEN [--name NODE]",
	 "join the local sparkd to the cluster whose head is HEAD",
	 "  --token TOKEN   the token printed by 'sparkctl init' or 'sparkctl token create'\n"
	 "  --name NODE     this node's name in the cluster (default: the host name)\n"},
	{NULL, "leave", cmd_leave, cli_text_leave, "leave", "leave the cluster (a worker); its certificate is revoked",
	 NULL},
	{NULL, "status", cmd_status, cli_text_status, "status [-o table|json]",
	 "the cluster, its head and every node with its state", NULL},
	{NULL, "version", cmd_version, cli_text_version, "version [-o table|json]",
	 "versions of sparkctl and of the local sparkd", NULL},
	{"node", "ls", cmd_node_ls, cli_text_node_ls, "node ls [-o table|json]", "list the cluster's nodes", NULL},
	{"node", "show", cmd_node_show, cli_text_node_show, "node show NODE [-o table|json]", "one node in detail", NULL},
	{"node", "drain", cmd_node_drain, cli_text_node_drain, "node drain NODE", "take a node out of scheduling", NULL},
	{"node", "undrain", cmd_node_undrain, cli_text_node_undrain, "node undrain NODE", "put a drained node back",
	 NULL},
	{"node", "rm", cmd_node_rm, cli_text_node_rm, "node rm NODE",
	 "remove a node from the cluster and revoke its certificate", NULL},
	{"token", "create", cmd_token_create, cli_text_token_create, "token create [--ttl D] [--uses N] [--description TEXT]",
	 "make a join token and print the join command",
	 "  --ttl D        lifetime: 30m, 24h, 7d (at most 3650d), or 0 for no expiry (default 24h)\n"
	 "  --uses N       how many joins it allows (default: unlimited)\n"
	 "  --description  a note shown by 'token ls'\n"},
	{"token", "ls", cmd_token_ls, cli_text_token_ls, "token ls [-o table|json]", "list join tokens (never their secrets)",
	 NULL},
	{"token", "revoke", cmd_token_revoke, cli_text_token_revoke, "token revoke ID", "revoke a join token", NULL},
	{"sim", "up", cmd_sim_up, cli_text_sim_up,
	 "sim up [--nodes N] [--topology pair|ring|switch] [--name PREFIX] [OPTIONS]",
	 "start a simulated cluster: one network namespace and one sparkd per node",
	 "  --nodes N          2 to 8 (default 4)\n"
	 "  --topology T       pair, ring or switch (default: ring, or pair for 2 nodes)\n"
	 "  --name PREFIX      namespaces PREFIX-1..N, PREFIX-mgmt, PREFIX-switch (default: spark)\n"
	 "  --mtu M            fabric MTU (default 1500)\n"
	 "  --port 0|1         pair: the port cabled on both nodes (default 0);\n"
	 "                     switch: the port of every node on the switch (default 1)\n"
	 "  --root DIR         state dirs, sockets, logs, sim.json (default /run/sparkctl-sim/PREFIX)\n"
	 "  --no-agents        network only, no sparkd (start one later with 'sim fault start')\n"
	 "  --bare K           K more nodes (PREFIX-N+1..N+K), wired like the others, without\n"
	 "                     sparkd: fresh machines to provision ('sim fault start' adds one)\n"
	 "Needs root. sparkd is found by env SPARKD, next to sparkctl, in ../agent/, or on PATH.\n"},
	{"sim", "down", cmd_sim_down, NULL, "sim down [--name PREFIX | --all] [--root DIR]",
	 "remove a simulated cluster: processes, namespaces, bridges, dirs (safe to repeat)",
	 "  --name PREFIX   the sim to remove (default: spark)\n"
	 "  --all           remove every sim registered under /run/sparkctl-sim\n"
	 "  --root DIR      its root, if it was made with --root and lost its registration\n"},
	{"sim", "ls", cmd_sim_ls, cli_text_sim_ls, "sim ls [--name PREFIX] [--links] [-o table|json]",
	 "list simulated nodes (namespace, agent pid and state, management address)",
	 "  --name PREFIX   only this sim (default: every sim)\n"
	 "  --links         list the cabling instead: veth ends, kind, state, MTU, delay\n"},
	{"sim", "exec", cmd_sim_exec, NULL, "sim exec NODE [--name PREFIX] -- CMD [ARGS...]",
	 "run CMD inside a simulated node, talking to that node's sparkd",
	 "  NODE            PREFIX-K (e.g. spark-2), K with --name, or PREFIX-mgmt / PREFIX-switch\n"
	 "CMD runs in the node's network namespace with its own /sys and SPARKCTL_SOCKET set;\n"
	 "the exit code is CMD's.\n"},
	{"sim", "fault", cmd_sim_fault, NULL,
	 "sim fault cut|restore|mtu|swap|delay|kill|start|down|up TARGET [VALUE] [--name PREFIX]",
	 "inject a fault into a simulated cluster",
	 "  cut NODE:PORT | NODE:IFNAME, restore (same)\n"
	 "  mtu NODE:IFNAME VALUE, swap NODE-A:PORT NODE-B:PORT, delay NODE:IFNAME MS,\n"
	 "  kill NODE, start NODE, down|up NODE:PORT | NODE:IFNAME\n"
	 "  (PORT is 0 or 1; e.g. sim fault cut spark-2:0)\n\n"
	 "  cut/restore     take a cable (PORT 0|1, both twins) or one twin (IFNAME) down on both\n"
	 "                  ends, or put it back\n"
	 "  down/up         take one end of a cable (or one twin) administratively down, or up:\n"
	 "                  its peer stays up and loses carrier\n"
	 "  mtu             set the MTU of one netdev (make a mismatch with its peer)\n"
	 "  swap            re-cable: the two ports exchange their peers (miscabling)\n"
	 "  delay           add MS of latency to frames leaving IFNAME (netem); 0 removes it\n"
	 "  kill/start      stop or start the node's sparkd\n"
	 "  --name PREFIX   sim of bare node numbers (default: spark)\n"},
	{NULL, "discover", cmd_discover, cli_text_discover, "discover [--sysfs-root DIR] [--config FILE] [--mtu N] [-o table|json]",
	 "this machine's fabric ports, twins, RDMA devices and health findings (no sparkd needed)",
	 "  --sysfs-root DIR  read a copy of /sys there instead of this machine (netlink and verbs off)\n"
	 "  --config FILE     fabric.interfaces / fabric.ports / fabric.mtu from FILE (default\n"
	 "                    /etc/sparkctl/sparkd.yaml, if present)\n"
	 "  --mtu N           the cluster's MTU: report fabric netdevs with another (fabric.mtu)\n"
	 "Exit 0 even when there are findings; 1 when discovery cannot run.\n"},
	{NULL, "provision", cmd_provision, cli_text_provision,
	 "provision HOST... [--user U] [--port P] [--identity FILE] [--accept-new-host-key]\n"
	 "         [--known-hosts FILE] [--dry-run] [--prefix DIR] [--parallel N] [--head ADDR:PORT]\n"
	 "         [--package DIR]",
	 "install, configure and join new nodes over SSH (run on the head)",
	 "  HOST                   [USER@]ADDR[:PORT] of a machine with SSH (several: in parallel)\n"
	 "  --user U               login user (default: yours); root or passwordless sudo is needed\n"
	 "  --port P               SSH port (default 22)\n"
	 "  -i, --identity FILE    private key to log in with (default: ssh-agent, then ~/.ssh/id_*);\n"
	 "                         it is read here only, never copied anywhere\n"
	 "  --known-hosts FILE     host keys to trust (default ~/.ssh/known_hosts and the system's)\n"
	 "  --accept-new-host-key  record the key of a host seen for the first time (a CHANGED key\n"
	 "                         is always refused)\n"
	 "  --dry-run              connect and check, print what would change, change nothing\n"
	 "  --prefix DIR           install under DIR instead of / and start sparkd without systemd\n"
	 "  --parallel N           hosts at a time (default 4)\n"
	 "  --head ADDR:PORT       address the new nodes use to reach this head (default: its own)\n"
	 "  --package DIR          sparkctl_VERSION_{amd64,arm64}.deb: each node gets the package of\n"
	 "                         its architecture (default: /var/cache/sparkctl/packages if it\n"
	 "                         has one); else this machine's binaries, same architecture only\n"
	 "Steps: check, upload, install, netplan, start, token, join; each says changed, unchanged\n"
	 "or skipped, so a second run changes nothing. A failed host gets this run's steps undone.\n"
	 "Exit 1 if any host failed. See docs/provision.md.\n"},
	{"group", "create", cmd_group_create, cli_text_group_create,
	 "group create NAME (--nodes A,B,C | --size N) [--shared] [-o table|json]",
	 "make a group of nodes for jobs (one model per group, training beside serving...)",
	 "  --nodes A,B,C   these nodes (on a ring, ranks follow ring order)\n"
	 "  --size N        let the planner pick N free nodes: a contiguous arc on a ring\n"
	 "                  (it says what a chain costs), any free nodes on a switch\n"
	 "  --shared        the nodes may also be in other shared groups\n"
	 "A node is in at most one group unless every group holding it is shared.\n"
	 "'all' is a built-in group of every node. See docs/jobs.md.\n"},
	{"group", "ls", cmd_group_ls, cli_text_group_ls, "group ls [-o table|json]", "list groups and their running jobs",
	 NULL},
	{"group", "show", cmd_group_show, cli_text_group_show, "group show NAME [-o table|json]",
	 "one group: its nodes in rank order, shape and jobs", NULL},
	{"group", "rm", cmd_group_rm, cli_text_group_rm, "group rm NAME [--force]",
	 "remove a group (refused while a job runs on it)",
	 "  --force   cancel the group's running jobs first\n"},
	{NULL, "run", cmd_run, cli_text_run,
	 "run --group G [--name N] [--launcher native|torchrun|mpi] [--ranks-per-node K]\n"
	 "         [--env K=V]... [--workdir DIR] [--timeout D] [--detach] [--force] -- CMD [ARGS...]",
	 "run a job on a group, each rank with the environment of its own node's fabric",
	 "  --group G            a group ('sparkctl group ls'), or all\n"
	 "  --name N             the job's name (default: the command's name)\n"
	 "  --launcher L         native: CMD once per rank (default); torchrun: torchrun on every\n"
	 "                       node (--nnodes/--node_rank/--nproc_per_node/--master_addr/port);\n"
	 "                       mpi: mpirun on rank 0's node, reaching the others through\n"
	 "                       'sparkctl exec' (no SSH keys needed)\n"
	 "  --ranks-per-node K   ranks (native, mpi) or workers (torchrun) per node (default 1)\n"
	 "  --env K=V            set or override a variable in every rank (repeatable)\n"
	 "  --workdir DIR        run there (default: this directory if it exists on the node,\n"
	 "                       else the user's home)\n"
	 "  --timeout D          cancel the job after D (90s, 30m, 2h)\n"
	 "  --detach             print the job id and return; the job runs on\n"
	 "  --force              run even though the latest 'sparkctl topo validate' FAILed for\n"
	 "                       the group's nodes (refused otherwise)\n"
	 "In the foreground, output is streamed with a rank prefix and the exit code is the\n"
	 "failing rank's (128+N for signal N). Ctrl-C cancels the job; closing the terminal\n"
	 "does not. Ranks run as you (the same user name on every node). Environment: see\n"
	 "docs/jobs.md (SPARK_*, RANK, MASTER_ADDR, NCCL_*, GLOO_SOCKET_IFNAME...).\n"},
	{NULL, "exec", cmd_exec, NULL, "exec NODE [--shell] -- CMD [ARGS...]",
	 "run one command on one node, stream its output and return its exit code",
	 "  NODE      a node name, or one of its addresses (agent or fabric)\n"
	 "  --shell   join the words and run them with /bin/sh -c (Open MPI's remote launcher)\n"
	 "Inside a job (SPARK_JOB_ID set) the command gets that node's job environment.\n"},
	{"job", "ls", cmd_job_ls, cli_text_job_ls, "job ls [--running] [--limit N] [-o table|json]",
	 "your jobs, newest first (root: everyone's)",
	 "  --running   only jobs still starting or running\n"
	 "  --limit N   at most N jobs (default 50, 0 = all)\n"},
	{"job", "show", cmd_job_show, cli_text_job_show, "job show JOB [-o table|json]",
	 "one job: state, reason, network, every rank with its node, pid and exit code", NULL},
	{"job", "logs", cmd_job_logs, NULL, "job logs JOB [-f] [--rank R]",
	 "a job's output, kept on each rank's node",
	 "  -f, --follow   keep streaming until the job ends\n"
	 "  --rank R       only rank R (without a prefix)\n"},
	{"job", "cancel", cmd_job_cancel, cli_text_job_cancel, "job cancel JOB",
	 "stop a job: SIGTERM to every rank, SIGKILL after 3 s", NULL},
	{"bench", "allreduce", cmd_bench_allreduce, NULL,
	 "bench allreduce --group G [--ranks-per-node K] [--timeout D] [SPARK-BENCH OPTIONS]",
	 "all-reduce bandwidth and latency of a group: spark-bench (libsparkcoll) as a job",
	 "  --group G            the group to measure (or all)\n"
	 "  --ranks-per-node K   ranks per node (default 1)\n"
	 "  --timeout D          give up after D (default 10m)\n"
	 "Other options go to 'spark-bench allreduce' (-b 8 -e 64M -f 2, --algo all, -o json...);\n"
	 "rank 0's table is printed. spark-bench is found by env SPARK_BENCH, next to sparkctl,\n"
	 "in ../runtime/, or on PATH, at the same path on every node.\n"},
	{"topo", "show", cmd_topo_show, cli_text_topo_show, "topo show [-o table|json]",
	 "the fabric's cable map as found now: a table and a picture of the ring or switch",
	 "Asks every node for its neighbours (no probes; nothing is stored).\n"},
	{"topo", "validate", cmd_topo_validate, cli_text_topo_validate,
	 "topo validate [--expect pair|ring|switch] [--quick] [-o table|json]",
	 "check the cabling and probe every cable: PASS, WARN or FAIL with each finding and its fix",
	 "  --expect CLASS  fail unless the fabric is this: pair, ring or switch\n"
	 "  --quick         short probes (switch: each node with its neighbour only)\n"
	 "Exit 0 only on PASS. The run is stored; 'sparkctl status' shows the last one.\n"
	 "See docs/topology.md for every finding and fix.\n"},
	{"topo", "addresses", cmd_topo_addresses, cli_text_topo_addresses,
	 "topo addresses [--apply] [--netplan FILE] [-o table|json]",
	 "the fabric's IPv4 plan (one subnet per twin); --apply sets it on every node",
	 "  --apply         add the missing addresses on every node (netlink; a second run\n"
	 "                  with the same cabling changes nothing)\n"
	 "  --netplan FILE  also write this node's netplan file (e.g. /etc/netplan/40-sparkctl.yaml)\n"
	 "Pool and subnet size: fabric.pool (default 10.77.0.0/16) and fabric.prefix in sparkd.yaml.\n"},
	{"bench", "decode", cmd_bench_decode, cli_text_bench_decode,
	 "bench decode --group G --model SHAPE [--layers N] [--algo auto|oneshot|ring|relay|doubling] [--tokens N]"
	 " [--timeout D] [-o table|json]",
	 "tensor-parallel decode speed-up of a group: spark-decode as a job at 1, 2, 4 ... N nodes",
	 "  --group G      the group to measure (or all); its first K nodes run world size K\n"
	 "  --model SHAPE  a synthetic shape of 'spark-decode --list-shapes' (tiny, dense-27b...)\n"
	 "  --layers N     only the first N layers (to fit memory)\n"
	 "  --algo A       all-reduce algorithm: auto (default), oneshot, ring, relay or doubling\n"
	 "  --tokens N     tokens to generate per run (default 32)\n"
	 "  --timeout D    give up on a run after D (default 10m)\n"
	 "Prints world size, tokens/s, speed-up over one rank, communication share and the\n"
	 "algorithm; exit 1 if the world sizes generate different tokens. spark-decode is\n"
	 "found by env SPARK_DECODE, next to sparkctl, in ../runtime/decode/, or on PATH.\n"},
	{NULL, "fit", cmd_fit, cli_text_fit,
	 "fit MODEL [--nodes N | --tp N --pp N] [--dtype D] [--rule R] [--kv-dtype bf16|fp8]\n"
	 "         [--context L] [--batch B] [--usable-gib G] [--overhead-gib G] [-o table|json]\n"
	 "       fit --catalog [--nodes 1,2,4,8 | --group G] [--context L] [--batch B] [-o table|json]",
	 "will a model fit, on how many nodes, with how much context (no cluster needed)",
	 "  MODEL            a catalog name (llama-3.3-70b, deepseek-v3, gpt-oss-120b...), or a\n"
	 "                   model directory or config.json (Hugging Face); also --model MODEL\n"
	 "  --nodes N        nodes to fit on (default 1); TP = N where the heads split N ways,\n"
	 "                   else TP x PP\n"
	 "  --tp N, --pp N   tensor parallel across nodes x pipeline stages by layers\n"
	 "  --dtype D        weights' storage type: bf16 f16 fp8 int8 nvfp4 mxfp4 int4 q8_0 q6_k\n"
	 "                   q5_k_m q4_k_m q4_0 q3_k_m q2_k (default: the published weights' own)\n"
	 "  --rule R         which tensors take D: all, linear (block matrices; embeddings, LM\n"
	 "                   head, norms, routers stay bf16), experts (MoE experts only)\n"
	 "  --kv-dtype D     KV cache type: bf16 (default) or fp8\n"
	 "  --context L      tokens per sequence (default 32768, or the model's maximum if less)\n"
	 "  --batch B        sequences held at once (default 1)\n"
	 "  --usable-gib G   memory an engine may use per node (default 102: CUDA sees 121.7 GiB,\n"
	 "                   about 102 are free after the OS)\n"
	 "  --overhead-gib G engine context, activations, CUDA graphs per node (default 4)\n"
	 "  --catalog        every catalog model on 1..8 nodes (or --nodes LIST): the fewest nodes\n"
	 "                   per storage type and the context left\n"
	 "  --catalog-file F another catalog (YAML, see share/sparkctl/models.yaml)\n"
	 "  --group G        use the size of group G (needs the cluster)\n"
	 "Exit 0 when it fits, 1 when it does not (the line on stderr says on how many nodes it\n"
	 "would), 2 on bad usage. See docs/planner.md.\n"},
	{"plan", "decode", cmd_plan_decode, cli_text_plan_decode,
	 "plan decode MODEL --nodes N [--topology ring|switch] [--algo auto|oneshot|ring]\n"
	 "         [--dtype D] [--context L] [--calibration FILE] [-o table|json]",
	 "predicted batch-1 decode tok/s and speed-up on 1..N nodes, and where the time goes",
	 "  MODEL              a catalog name, or a model directory or config.json\n"
	 "  --nodes N          the largest tensor-parallel size (rows for 1..N)\n"
	 "  --group G          N and the topology from group G (needs the cluster)\n"
	 "  --topology T       switch (default; one-shot possible) or ring (neighbours only: relay)\n"
	 "  --algo A           all-reduce: auto (cheapest the topology allows), oneshot, ring\n"
	 "  --dtype D          weights' storage type (default: the published weights' own)\n"
	 "  --context L        tokens already in the KV cache, read every token (default 0)\n"
	 "  --calibration FILE measured bandwidth, alpha/beta and per-token cost instead of the\n"
	 "                     Spark defaults (bench/planner/run.sh writes one)\n"
	 "Per token: compute = active weight bytes per rank / (273 GB/s x efficiency from the\n"
	 "published single-node figures); communication = 2 all-reduces per layer priced by\n"
	 "libsparkcoll's alpha-beta model (200G RoCE: 1.5 us, 24 GB/s); plus a fixed cost.\n"
	 "See docs/planner.md.\n"},
	{"recipe", "ls", cmd_recipe_ls, cli_text_recipe_ls, "recipe ls [--recipe-dir DIR] [-o table|json]",
	 "the recipes 'sparkctl serve' can start: built-in ones and yours",
	 "  --recipe-dir DIR  your recipes (*.yaml) are there (default: $SPARKCTL_RECIPE_DIR, else\n"
	 "                    ~/.config/sparkctl/recipes and /etc/sparkctl/recipes); one of yours\n"
	 "                    named like a built-in replaces it\n"
	 "Exit 1 if a recipe file does not parse (each is named on stderr with its line).\n"},
	{"recipe", "show", cmd_recipe_show, cli_text_recipe_show,
	 "recipe show RECIPE [--set KEY=VALUE]... [--yaml] [--recipe-dir DIR] [-o table|json]",
	 "one recipe with every default filled in",
	 "  RECIPE          a name ('sparkctl recipe ls') or a recipe file\n"
	 "  --set KEY=VALUE override a key first (tp=2, model=org/name, env.HF_HOME=/d, ...)\n"
	 "  --yaml          print the recipe file itself (a start for your own)\n"
	 "See docs/serve.md for the keys.\n"},
	{NULL, "serve", cmd_serve, cli_text_serve,
	 "serve RECIPE --group G [--dry-run] [--set KEY=VALUE]... [--port P] [--name N] [--force]\n"
	 "         [--recipe-dir DIR] [--layout FILE] [-o table|json]",
	 "serve a model on a group as a supervised service (or print the plan: --dry-run)",
	 "  RECIPE          a name ('sparkctl recipe ls') or a recipe file\n"
	 "  --group G       the group to serve on; ranks follow its order ('sparkctl group show')\n"
	 "  --dry-run       print every node's command and environment and start nothing\n"
	 "  --set KEY=VALUE override a recipe key (tp=2, pp=2, nodes=2, model=org/name, args=...,\n"
	 "                  env.NAME=V, health.path=/v1/models, restart.limit=3), repeatable\n"
	 "  --port P        rank 0's HTTP port (same as --set port=P)\n"
	 "  --name N        the service's name (default: the recipe's)\n"
	 "  --force         start (or exit 0) even when the model does not fit: the planner's\n"
	 "                  verdict, or a node's memory budget less what its services need\n"
	 "  --layout FILE   with --dry-run: render for a group described in FILE (JSON,\n"
	 "                  docs/serve.md) instead of asking sparkd\n"
	 "Sockets use the fabric address each node has in a subnet every other node has, else\n"
	 "the management addresses (a ring of 4+). Without --dry-run the head records the\n"
	 "service, checks each node's memory budget and keeps it running: 'sparkctl svc ls'.\n"
	 "Exit 1 when it does not fit (the line gives the numbers per node). See docs/serving.md.\n"},
	{"svc", "ls", cmd_svc_ls, cli_text_svc_ls, "svc ls [--group G] [-o table|json]",
	 "the services of the cluster: state, run, endpoint and models",
	 "  --group G   only the services of group G\n"},
	{"svc", "show", cmd_svc_show, cli_text_svc_show, "svc show NAME [-o table|json]",
	 "one service: state, last error, restarts, its nodes and their memory need", NULL},
	{"svc", "logs", cmd_svc_logs, NULL, "svc logs NAME [-f] [--rank R]",
	 "the output of a service's current (or last) run: its job's logs",
	 "  -f, --follow   keep streaming until the run ends\n"
	 "  --rank R       only rank R (without a prefix)\n"},
	{"svc", "stop", cmd_svc_stop, cli_text_svc_change, "svc stop NAME [-o table|json]",
	 "stop a service: SIGTERM to every rank, SIGKILL after 5 s; it stays listed as stopped",
	 "Only its owner or an admin of the cluster may stop it.\n"},
	{"svc", "restart", cmd_svc_restart, cli_text_svc_change, "svc restart NAME [-o table|json]",
	 "start a service again on every node (a stopped or failed one too)",
	 "Only its owner or an admin of the cluster may restart it.\n"},
	{"svc", "rm", cmd_svc_rm, cli_text_svc_change, "svc rm NAME [-o table|json]",
	 "forget a stopped or failed service", NULL},
	{"svc", "watch", cmd_svc_watch, cli_text_svc_ls, "svc watch [--group G] [-o table|json]",
	 "follow the services: every service at once, then again after each change",
	 "  --group G   only the services of group G\n"
	 "With -o json, one line per snapshot ({\"services\": [...]}, as spark-router reads it).\n"},
	{"export", "slurm", cmd_export_slurm, cli_text_export_slurm,
	 "export slurm [--out DIR] [--slurm-version V] [--force] [--gpu-device PATH]\n"
	 "         [--task-prolog PATH] [--prolog-socket PATH] [--sparkctl PATH] [-o files|json]",
	 "write slurm.conf, gres.conf, topology.conf and a TaskProlog for this cluster",
	 "  --out DIR            where the files go (default: .); -o json prints them instead\n"
	 "  --slurm-version V    the Slurm release they are for (default 22.05, Debian 12's)\n"
	 "  --force              export even when the latest topology validation failed\n"
	 "  --gpu-device PATH    gres.conf's File= (default /dev/nvidia0)\n"
	 "  --task-prolog PATH   where the TaskProlog is installed (default\n"
	 "                       /etc/slurm/sparkctl-task-prolog.sh)\n"
	 "  --prolog-socket PATH the sparkd socket the TaskProlog asks (default: this one; %n is\n"
	 "                       replaced by the Slurm node name)\n"
	 "  --sparkctl PATH      the sparkctl the TaskProlog runs (default: this one)\n"
	 "Nodes come from the nodes' reports (CPUs, memory less 10%), partitions from the groups\n"
	 "(plus 'all'), features and topology from the latest 'sparkctl topo validate'.\n"
	 "Exit 0 written, 1 refused or failed, 2 bad usage. See docs/slurm.md.\n"},
	{NULL, "env", cmd_env, cli_text_env,
	 "env --node-list NODELIST [--job-id N] [--rank R] [--local-rank L] [--group G] [--slurm]\n"
	 "         [-o table|json]",
	 "this node's job environment (as 'sparkctl run' gives a rank) for a job on NODELIST",
	 "  --node-list L   Slurm host list of the job's nodes, e.g. spark-[1-2],spark-4\n"
	 "  --job-id N      the job's id (MASTER_PORT follows it; default 0)\n"
	 "  --rank R, --local-rank L  RANK and LOCAL_RANK (default: unset)\n"
	 "  --group G       SPARK_GROUP\n"
	 "  --slurm         take what is not given from SLURM_STEP_NODELIST (or\n"
	 "                  SLURM_JOB_NODELIST), SLURM_JOB_ID, SLURM_PROCID, SLURM_LOCALID and\n"
	 "                  SLURM_JOB_PARTITION (the exported TaskProlog runs this)\n"
	 "Prints \"export NAME=value\" lines (a TaskProlog's format), or JSON with -o json.\n"
	 "This node must be in the list. See docs/slurm.md.\n"},
	{"model", "push", cmd_model_push, cli_text_model_push,
	 "model push DIR (--group G | --nodes a,b,c) [--from NODE] [--name NAME] [--dry-run]\n"
	 "                  [-o table|json]",
	 "copy a model directory from this node to other nodes: verified, resumable, relayed",
	 "  DIR          the model's folder on this node (regular files; symlinks inside it)\n"
	 "  --group G    every member of the group ('sparkctl group show G')\n"
	 "  --nodes LIST names or ids\n"
	 "  --from NODE  the source is that member (name or id), DIR an absolute path there;\n"
	 "               the head starts the push there and passes its progress here\n"
	 "  --name NAME  the name on the nodes (default: the folder's name)\n"
	 "  --dry-run    print the chain and the model's size; move nothing\n"
	 "Chunks of 4 MiB named by SHA-256 travel node to node (each forwards what it holds\n"
	 "while it receives the rest) over mutual TLS to each node's agent port + 1. The head\n"
	 "orders the chain by the fabric (on a ring, the ring; else the order given) and each\n"
	 "hop uses both twins of its cable; where two nodes share no fabric subnet the hop\n"
	 "goes over the address the node joined with, and the output says so. Each chunk is\n"
	 "checked before it is written (a bad one is fetched again from a node before it that\n"
	 "verified it, and the output names the repair); files appear under their name only\n"
	 "when complete. A node that lacks room refuses before\n"
	 "the first byte. Run it again after a failure: only missing chunks move. Exit 1 when\n"
	 "a node is not complete. See docs/models.md.\n"},
	{"model", "ls", cmd_model_ls, cli_text_model_ls, "model ls [--node N] [-o table|json]",
	 "the models each node holds in its store (models.dir, default STATE_DIR/models)",
	 "  --node N     only that node (name or id)\n"
	 "The head asks every node (or N) for its store; a node in no cluster lists its own.\n"
	 "A model is complete when every file is verified and under its final name, partial\n"
	 "while files are still .sparkpart. Exit 1 when a node did not answer (named).\n"
	 "See docs/models.md.\n"},
	{"model", "rm", cmd_model_rm, cli_text_model_rm, "model rm NAME [--nodes a,b] [-o table|json]",
	 "remove a model from this node's store, or from the named nodes' (admin)",
	 "  --nodes LIST names or ids: the head has each remove its copy\n"
	 "Exit 1 when a node holds no such model or did not answer (named).\n"},
	{"model", "verify", cmd_model_verify, cli_text_model_verify,
	 "model verify NAME [-o table|json]",
	 "re-hash every chunk of a model on this node against its manifest (SHA-256)",
	 "Exit 1 when a file is missing, has the wrong size or a chunk does not match; the\n"
	 "table names each (path, chunk, problem).\n"},
	{"route", "serve", cmd_route_serve, NULL,
	 "route serve --policy FILE [--listen ADDR:PORT] [--log FILE|-] [--pid-file FILE]\n"
	 "         [--log-level L]",
	 "run spark-router, the OpenAI-compatible router, in the foreground",
	 "  --policy FILE     the routing policy (YAML; see docs/router.md, /etc/sparkctl/router.yaml)\n"
	 "  --listen A:P      listen address (default: the policy's listen:, else 127.0.0.1:4000);\n"
	 "                    anything but loopback needs api_keys in the policy\n"
	 "  --log FILE        the JSON-lines routing log (\"-\": stdout)\n"
	 "  --pid-file FILE   where its pid goes, for 'route reload' (default\n"
	 "                    /run/spark-router/spark-router.pid when writable, else\n"
	 "                    $XDG_RUNTIME_DIR/spark-router.pid)\n"
	 "  --log-level L     error, warn, info (default), debug\n"
	 "Service targets follow the services of the sparkd this sparkctl talks to (--socket).\n"
	 "spark-router is found by env SPARK_ROUTER, beside sparkctl, or on PATH; its exit\n"
	 "status is this command's (0 after SIGINT/SIGTERM, 1 bad policy or port, 2 usage).\n"},
	{"route", "check", cmd_route_check, cli_text_route_check, "route check FILE [-o table|json]",
	 "validate a routing policy: its targets and routes, or FILE:LINE:COL of the error",
	 "Exit 0 when the policy is valid, 1 when not (the error names file, line and column).\n"},
	{"route", "reload", cmd_route_reload, cli_text_route_reload,
	 "route reload [--pid-file FILE] [-o table|json]",
	 "make the running spark-router read its policy again (SIGHUP)",
	 "  --pid-file FILE   spark-router's pid file (default: the first that exists of\n"
	 "                    /run/spark-router/spark-router.pid, the systemd unit's, and\n"
	 "                    $XDG_RUNTIME_DIR/spark-router.pid)\n"
	 "Only a process that is a spark-router is signalled. A policy with an error is refused\n"
	 "and the old one stays: spark-router logs reload_refused (or policy_reloaded).\n"},
	/* @@table-entries: areas add their rows above this line */
	{NULL, NULL, NULL, NULL, NULL, NULL, NULL},
};

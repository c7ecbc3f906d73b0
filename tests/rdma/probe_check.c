/* probe_check.c - run the topology probe (topology/probe.h, issue 5) between two local
 * twins inside the Soft-RoCE VM (tests/rdma/): the server in a thread, the client in
 * main, the RDMA endpoint exchange through memory instead of the agent's channel.
 *
 *   probe-check tcp  SERVER_NETDEV SERVER_ADDR CLIENT_NETDEV CLIENT_ADDR [options]
 *   probe-check rdma SERVER_IBDEV SERVER_GID_INDEX SERVER_NETDEV
 *                    CLIENT_IBDEV CLIENT_GID_INDEX CLIENT_NETDEV [options]
 *   options: --mtu N (expected MTU, thresholds.mtu)  --vm (thresholds a VM can meet)
 *            --quick (200 pings, 200 ms bulk)  --timeout-ms N (each blocking step)
 *
 * Prints the client's result object (one JSON line) on stdout; the server's error, if
 * any, on stderr. Exit 0 when the client measured (its "result" may still be "fail"),
 * 1 when it returned an error (its error object is printed when it has one), 2 usage.
 */
#include "topology/probe.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct xchg {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct topo_rdma_endpoint ep[2];
	int have[2];
	unsigned timeout_ms;
};

struct side {
	struct xchg *x;
	int me; /* 0 = server, 1 = client */
};

/* Post our endpoint, wait for the other side's. */
static int exchange(const struct topo_rdma_endpoint *local, struct topo_rdma_endpoint *remote,
		    void *arg)
{
	struct side *s = arg;
	struct xchg *x = s->x;
	struct timespec dl;
	int rc = 0;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += x->timeout_ms / 1000 + 1;
	pthread_mutex_lock(&x->mu);
	x->ep[s->me] = *local;
	x->have[s->me] = 1;
	pthread_cond_broadcast(&x->cv);
	while (!x->have[!s->me] && rc == 0)
		rc = pthread_cond_timedwait(&x->cv, &x->mu, &dl);
	if (x->have[!s->me])
		*remote = x->ep[!s->me];
	pthread_mutex_unlock(&x->mu);
	return x->have[!s->me] ? 0 : -ETIMEDOUT;
}

struct srv_arg {
	struct topo_probe_rdma_opts ro;
	struct topo_probe_server *ts;
	int rc;
	char err[256];
	json_t *res;
};

static void *rdma_server(void *p)
{
	struct srv_arg *a = p;
	a->rc = topo_probe_rdma_run(&a->ro, &a->res, a->err, sizeof a->err);
	return NULL;
}

static void *tcp_server(void *p)
{
	struct srv_arg *a = p;
	a->rc = topo_probe_server_run(a->ts, &a->res, a->err, sizeof a->err);
	return NULL;
}

static int usage(void)
{
	fprintf(stderr, "usage: probe-check tcp SRV_NETDEV SRV_ADDR CLI_NETDEV CLI_ADDR [opts]\n"
			"       probe-check rdma SRV_IBDEV SRV_GID SRV_NETDEV CLI_IBDEV CLI_GID CLI_NETDEV "
			"[opts]\n  opts: --mtu N --vm --quick --timeout-ms N\n");
	return 2;
}

static void print_result(json_t *r)
{
	char *s = json_dumps(r, JSON_COMPACT);
	printf("%s\n", s ? s : "null");
	free(s);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return usage();
	int rdma = strcmp(argv[1], "rdma") == 0;
	int npos = rdma ? 6 : 4;
	if ((!rdma && strcmp(argv[1], "tcp") != 0) || argc < 2 + npos)
		return usage();
	char **pos = argv + 2;
	struct topo_probe_thresholds th;
	struct topo_probe_params pp;
	int quick = 0, vm = 0;
	unsigned timeout_ms = 0;
	topo_probe_thresholds_default(&th);
	for (int i = 2 + npos; i < argc; i++) {
		if (!strcmp(argv[i], "--mtu") && i + 1 < argc)
			th.mtu = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--vm"))
			vm = 1;
		else if (!strcmp(argv[i], "--quick"))
			quick = 1;
		else if (!strcmp(argv[i], "--timeout-ms") && i + 1 < argc)
			timeout_ms = (unsigned)atoi(argv[++i]);
		else
			return usage();
	}
	if (vm) { /* Soft-RoCE under qemu: judge that it works, not CX-7 speeds */
		th.rdma_min_gbps = 0.0001;
		th.rdma_max_p50_us = 1e6;
		th.rdma_max_p99_us = 0;
		th.tcp_min_gbps = 0.0001;
		th.tcp_max_p50_us = 1e6;
		th.tcp_max_p99_us = 0;
	}
	topo_probe_params_init(&pp, quick);
	if (timeout_ms)
		pp.timeout_ms = timeout_ms;

	struct srv_arg sa;
	memset(&sa, 0, sizeof sa);
	pthread_t th_srv;
	json_t *res = NULL;
	char err[256] = "";
	int rc;
	if (rdma) {
		static struct xchg x = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
		static struct side s0 = {&x, 0}, s1 = {&x, 1};
		x.timeout_ms = pp.timeout_ms;
		sa.ro.ibdev = pos[0];
		sa.ro.ib_port = 1;
		sa.ro.gid_index = atoi(pos[1]);
		sa.ro.netdev = pos[2];
		sa.ro.server = true;
		sa.ro.params = pp;
		sa.ro.thresholds = th;
		sa.ro.exchange = exchange;
		sa.ro.exchange_arg = &s0;
		struct topo_probe_rdma_opts co = sa.ro;
		co.ibdev = pos[3];
		co.gid_index = atoi(pos[4]);
		co.netdev = pos[5];
		co.server = false;
		co.exchange_arg = &s1;
		char why[256];
		if (topo_probe_rdma_usable(co.ibdev, 1, co.gid_index, why, sizeof why) < 0 ||
		    topo_probe_rdma_usable(sa.ro.ibdev, 1, sa.ro.gid_index, why, sizeof why) < 0) {
			fprintf(stderr, "probe-check: RDMA not usable: %s\n", why);
			return 1;
		}
		pthread_create(&th_srv, NULL, rdma_server, &sa);
		rc = topo_probe_rdma_run(&co, &res, err, sizeof err);
	} else {
		struct topo_probe_server_opts so = {.netdev = pos[0], .address = pos[1], .port = 0,
						    .token = "rdma-harness", .timeout_ms = pp.timeout_ms};
		rc = topo_probe_server_start(&so, &sa.ts, err, sizeof err);
		if (rc < 0) {
			fprintf(stderr, "probe-check: server start: %s\n", err);
			return 1;
		}
		struct topo_probe_client_opts co = {.netdev = pos[2], .local_address = pos[3],
						    .peer_address = pos[1],
						    .peer_port = topo_probe_server_port(sa.ts),
						    .token = "rdma-harness", .params = pp,
						    .thresholds = th};
		pthread_create(&th_srv, NULL, tcp_server, &sa);
		rc = topo_probe_client_run(&co, &res, err, sizeof err);
		if (rc < 0)
			topo_probe_server_stop(sa.ts);
	}
	pthread_join(th_srv, NULL);
	if (sa.rc < 0)
		fprintf(stderr, "probe-check: server: %s (%d)\n", sa.err, sa.rc);
	if (rc < 0)
		fprintf(stderr, "probe-check: client: %s (%d)\n", err, rc);
	if (res)
		print_result(res);
	json_decref(res);
	json_decref(sa.res);
	if (sa.ts)
		topo_probe_server_free(sa.ts);
	return rc < 0 ? 1 : 0;
}

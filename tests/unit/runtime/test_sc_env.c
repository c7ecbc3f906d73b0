/* The job environment: SPARK_* peer tables, the RANK/WORLD_SIZE/MASTER_ADDR
 * rendezvous of torchrun, OMPI_COMM_WORLD_* and the SPARK_COLL_* knobs. */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <unistd.h>

#include "sc_test_util.h"

static int g_mode;

/* Wait until nobody holds `port` (the parent closes its copies of the
 * listeners a moment after forking). */
static void wait_port_free(const char *hostport)
{
	int port = atoi(strrchr(hostport, ':') + 1);
	for (int i = 0; i < 200; i++) {
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
		int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0), ok;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
		close(fd);
		if (ok)
			return;
		usleep(10000);
	}
}

static int rank_env(int rank, int n, const char *const *peers, int lfd, void *arg)
{
	tu_shared_t *sh = arg;
	sc_comm_t *c = NULL;
	char buf[1024] = "", num[16];
	int rc;
	float v[3] = {1, 2, 3};

	close(lfd); /* the library binds the port itself from the environment */
	wait_port_free(peers[rank]);
	clearenv();
	setenv("SPARK_COLL_ONESHOT_MAX", "32K", 1);
	setenv("SPARK_COLL_TIMEOUT_MS", "5000", 1);
	setenv("SPARK_JOB_ID", "job-42", 1);
	if (g_mode == 0) { /* SPARK_* contract */
		size_t l = 0;
		for (int i = 0; i < n; i++)
			l += (size_t)snprintf(buf + l, sizeof(buf) - l, "%s%d=%s", i ? "," : "", i, peers[i]);
		setenv("SPARK_PEERS", buf, 1);
		snprintf(num, sizeof(num), "%d", rank);
		setenv("SPARK_RANK", num, 1);
		snprintf(num, sizeof(num), "%d", n);
		setenv("SPARK_WORLD_SIZE", num, 1);
		setenv("SPARK_TOPOLOGY", "switch", 1);
	} else { /* torchrun / mpirun style rendezvous through rank 0 */
		const char *colon = strrchr(peers[0], ':');
		setenv("MASTER_ADDR", "127.0.0.1", 1);
		setenv("MASTER_PORT", colon + 1, 1);
		snprintf(num, sizeof(num), "%d", rank);
		setenv(g_mode == 1 ? "RANK" : "OMPI_COMM_WORLD_RANK", num, 1);
		snprintf(num, sizeof(num), "%d", n);
		setenv(g_mode == 1 ? "WORLD_SIZE" : "OMPI_COMM_WORLD_SIZE", num, 1);
	}
	rc = sc_comm_init_from_env(&c);
	if (rc < 0) {
		snprintf(sh->msg[rank], sizeof(sh->msg[rank]), "init: %s", sc_strerror(rc));
		sh->rc[rank] = rc;
		return 1;
	}
	{
		sc_info_t info;
		sc_comm_info(c, &info);
		sh->val[rank][0] = (int64_t)info.oneshot_max;
		sh->val[rank][1] = info.oneshot_enabled;
		sh->val[rank][2] = info.timeout_ms;
	}
	rc = sc_allreduce(c, v, v, 3, SC_F32, SC_SUM);
	if (rc == 0 && (v[0] != (float)n || v[2] != (float)(3 * n)))
		rc = 99;
	sh->rc[rank] = rc;
	sc_comm_destroy(c);
	return 0;
}

static void run_env(int mode, int n)
{
	tu_shared_t *sh = tu_shared_new();
	int st;
	g_mode = mode;
	st = sc_local_run(n, rank_env, sh, 20000);
	for (int r = 0; r < n; r++) {
		cr_expect(sh->rc[r] == 0, "mode %d rank %d: rc %d %s", mode, r, sh->rc[r], sh->msg[r]);
		cr_expect(sh->val[r][0] == 32768, "SPARK_COLL_ONESHOT_MAX not applied");
		cr_expect(sh->val[r][1] == 1);
		cr_expect(sh->val[r][2] == 5000, "SPARK_COLL_TIMEOUT_MS not applied");
	}
	cr_assert(st == 0);
	tu_shared_free(sh);
}

Test(env, spark_peers, .timeout = 30) { run_env(0, 4); }
Test(env, master_addr_rendezvous, .timeout = 30) { run_env(1, 4); }
Test(env, ompi_rank_with_master_addr, .timeout = 30) { run_env(2, 3); }

Test(env, knobs)
{
	sc_options_t o;
	clearenv();
	sc_options_default(&o);
	cr_assert_eq(sc_options_from_env(&o), 0);
	cr_assert_eq(o.oneshot_max, SC_ONESHOT_CALIBRATE);
	cr_assert_eq(o.algo, SC_ALGO_AUTO);
	setenv("SPARK_COLL_ALGO", "ring", 1);
	setenv("SPARK_COLL_ONESHOT_MAX", "1M", 1);
	setenv("SPARK_COLL_TIMEOUT_MS", "0", 1);
	setenv("SPARK_TOPOLOGY", "ring", 1);
	setenv("SPARK_COLL_TRANSPORT", "tcp", 1);
	cr_assert_eq(sc_options_from_env(&o), 0);
	cr_assert_eq(o.algo, SC_ALGO_RING);
	cr_assert_eq(o.oneshot_max, 1u << 20);
	cr_assert_eq(o.timeout_ms, 0);
	cr_assert_eq(o.topology, SC_TOPO_RING);
	cr_assert_eq(o.transport, SC_TRANSPORT_TCP);
	setenv("SPARK_COLL_ALGO", "relay", 1);
	cr_assert_eq(sc_options_from_env(&o), 0);
	cr_assert_eq(o.algo, SC_ALGO_RELAY);
	setenv("SPARK_COLL_ALGO", "tree", 1);
	cr_assert_eq(sc_options_from_env(&o), -EINVAL);
	setenv("SPARK_COLL_ALGO", "oneshot", 1);
	setenv("SPARK_COLL_TIMEOUT_MS", "soon", 1);
	cr_assert_eq(sc_options_from_env(&o), -EINVAL);
	setenv("SPARK_COLL_TIMEOUT_MS", "100", 1);
	setenv("SPARK_TOPOLOGY", "mesh", 1);
	cr_assert_eq(sc_options_from_env(&o), -EINVAL);
}

Test(env, missing_or_bad_environment)
{
	sc_comm_t *c = NULL;
	clearenv();
	cr_assert_eq(sc_comm_init_from_env(&c), -EINVAL); /* no rank at all */
	setenv("SPARK_RANK", "0", 1);
	setenv("SPARK_WORLD_SIZE", "2", 1);
	cr_assert_eq(sc_comm_init_from_env(&c), -EINVAL); /* no peers, no MASTER_ADDR */
	setenv("SPARK_PEERS", "0=127.0.0.1:5", 1);
	cr_assert_eq(sc_comm_init_from_env(&c), -EINVAL); /* rank 1 missing */
	setenv("SPARK_RANK", "2", 1);
	cr_assert_eq(sc_comm_init_from_env(&c), -EINVAL); /* rank >= world */
	cr_assert_null(c);
	clearenv();
	setenv("RANK", "0", 1);
	setenv("WORLD_SIZE", "1", 1);
	cr_assert_eq(sc_comm_init_from_env(&c), 0); /* a single rank needs no peers */
	sc_comm_destroy(c);
}

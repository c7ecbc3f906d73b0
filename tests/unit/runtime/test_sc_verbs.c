/* RoCE v2 GID selection from a fake sysfs tree (types read, never a fixed
 * index), and the TCP fallback on a machine without RDMA devices. */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sc_test_util.h"

static char root[256];

static void put(const char *rel, const char *text)
{
	char path[512], dir[512];
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	snprintf(dir, sizeof(dir), "mkdir -p \"$(dirname '%s')\"", path);
	cr_assert_eq(system(dir), 0);
	if (text) {
		FILE *f = fopen(path, "w");
		cr_assert_not_null(f);
		fputs(text, f);
		fclose(f);
	}
}

/* Spark-like table: 0 fe80 v1, 1 fe80 v2, 2 IPv4 v1, 3 ::ffff:a.b.c.d v2; the
 * twin has the IPv4 GIDs moved to 3/4 (index moves, seen on real nodes). */
static void make_tree(void)
{
	snprintf(root, sizeof(root), "/tmp/sc-sysfs-%d", (int)getpid());
	put("rocep1s0f1/ports/1/gids/0", "fe80:0000:0000:0000:4e00:10ff:fe00:0001\n");
	put("rocep1s0f1/ports/1/gid_attrs/types/0", "IB/RoCE v1\n");
	put("rocep1s0f1/ports/1/gids/1", "fe80:0000:0000:0000:4e00:10ff:fe00:0001\n");
	put("rocep1s0f1/ports/1/gid_attrs/types/1", "RoCE v2\n");
	put("rocep1s0f1/ports/1/gids/2", "0000:0000:0000:0000:0000:ffff:a9fe:0a01\n");
	put("rocep1s0f1/ports/1/gid_attrs/types/2", "IB/RoCE v1\n");
	put("rocep1s0f1/ports/1/gids/3", "0000:0000:0000:0000:0000:ffff:a9fe:0a01\n");
	put("rocep1s0f1/ports/1/gid_attrs/types/3", "RoCE v2\n");
	put("rocep1s0f1/ports/1/gids/4", "0000:0000:0000:0000:0000:0000:0000:0000\n");
	/* unused entry: no types file (reads fail with EINVAL on a real kernel) */
	put("roceP2p1s0f1/ports/1/gids/0", "fe80:0000:0000:0000:4e00:10ff:fe00:0002\n");
	put("roceP2p1s0f1/ports/1/gid_attrs/types/0", "IB/RoCE v1\n");
	put("roceP2p1s0f1/ports/1/gids/1", "fe80:0000:0000:0000:4e00:10ff:fe00:0002\n");
	put("roceP2p1s0f1/ports/1/gid_attrs/types/1", "RoCE v2\n");
	put("roceP2p1s0f1/ports/1/gids/2", "0000:0000:0000:0000:0000:0000:0000:0000\n");
	put("roceP2p1s0f1/ports/1/gids/3", "0000:0000:0000:0000:0000:ffff:a9fe:0b01\n");
	put("roceP2p1s0f1/ports/1/gid_attrs/types/3", "IB/RoCE v1\n");
	put("roceP2p1s0f1/ports/1/gids/4", "0000:0000:0000:0000:0000:ffff:a9fe:0b01\n");
	put("roceP2p1s0f1/ports/1/gid_attrs/types/4", "RoCE v2\n");
	put("roceP2p1s0f1/ports/1/gids/5", "fd00:0000:0000:0000:0000:0000:0000:0002\n");
	put("roceP2p1s0f1/ports/1/gid_attrs/types/5", "RoCE v2\n");
}

static void cleanup(void)
{
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd) != 0)
		return;
}

static int lookup4(const char *ip, char *dev, int *port, int *idx)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	uint8_t gid[16];
	inet_pton(AF_INET, ip, &a.sin_addr);
	return sc_verbs_find_gid(root, (struct sockaddr *)&a, dev, 64, port, idx, gid);
}

Test(verbs, gid_by_type_not_index, .init = make_tree, .fini = cleanup)
{
	char dev[64];
	int port, idx;
	cr_assert_eq(lookup4("169.254.10.1", dev, &port, &idx), 0);
	cr_assert_str_eq(dev, "rocep1s0f1");
	cr_assert_eq(port, 1);
	cr_assert_eq(idx, 3, "the RoCE v2 entry, not the v1 one at 2");
	cr_assert_eq(lookup4("169.254.11.1", dev, &port, &idx), 0);
	cr_assert_str_eq(dev, "roceP2p1s0f1");
	cr_assert_eq(idx, 4, "index moved to 4 on the twin");
	cr_assert_eq(lookup4("169.254.12.1", dev, &port, &idx), -ENOENT);
	{
		struct sockaddr_in6 a6 = {.sin6_family = AF_INET6};
		uint8_t gid[16];
		inet_pton(AF_INET6, "fd00::2", &a6.sin6_addr);
		cr_assert_eq(sc_verbs_find_gid(root, (struct sockaddr *)&a6, dev, 64, &port, &idx, gid), 0);
		cr_assert_eq(idx, 5);
		/* an IPv4-mapped IPv6 socket address (dual-stack listener) finds the v4 GID */
		inet_pton(AF_INET6, "::ffff:169.254.10.1", &a6.sin6_addr);
		cr_assert_eq(sc_verbs_find_gid(root, (struct sockaddr *)&a6, dev, 64, &port, &idx, gid), 0);
		cr_assert_eq(idx, 3);
	}
	{
		struct sockaddr_in a = {.sin_family = AF_INET};
		uint8_t gid[16];
		cr_assert_eq(sc_verbs_find_gid("/nonexistent", (struct sockaddr *)&a, dev, 64, &port,
		                               &idx, gid), -ENOENT);
	}
}

/* An rxe-like table: 1024 slots, nearly all zero, no type for the empty ones; the
 * address also sits in a slot whose type cannot be read (skipped, not an error). */
Test(verbs, gid_in_a_big_sparse_table, .init = make_tree, .fini = cleanup)
{
	char rel[128], dev[64];
	int port, idx;
	put("rxe_big/ports/1/gid_attrs/types/0", "RoCE v2\n");
	put("rxe_big/ports/1/gids/0", "fe80:0000:0000:0000:4c00:00ff:fe00:0009\n");
	for (int i = 1; i < 1024; i++) {
		char path[512];
		FILE *f;
		snprintf(rel, sizeof(rel), "rxe_big/ports/1/gids/%d", i);
		snprintf(path, sizeof(path), "%s/%s", root, rel);
		f = fopen(path, "w");
		cr_assert_not_null(f);
		fputs(i == 5 || i == 700 ? "0000:0000:0000:0000:0000:ffff:a9fe:1401\n"
		                         : "0000:0000:0000:0000:0000:0000:0000:0000\n", f);
		fclose(f);
	}
	put("rxe_big/ports/1/gid_attrs/types/700", "RoCE v2\n");
	cr_assert_eq(lookup4("169.254.20.1", dev, &port, &idx), 0);
	cr_assert_str_eq(dev, "rxe_big");
	cr_assert_eq(idx, 700);
	/* the other devices still answer */
	cr_assert_eq(lookup4("169.254.10.1", dev, &port, &idx), 0);
	cr_assert_eq(idx, 3);
}

static int rank_forced_verbs(int rank, int n, const char *const *peers, int lfd, void *arg)
{
	tu_shared_t *sh = arg;
	sc_options_t o;
	sc_comm_t *c = NULL;
	tu_opts(&o, lfd);
	o.transport = SC_TRANSPORT_VERBS;
	o.connect_timeout_ms = 1000;
	sh->rc[rank] = sc_comm_init(&c, rank, n, peers, &o);
	sc_comm_destroy(c);
	return 0;
}

Test(verbs, forced_verbs_without_device_fails_clearly, .timeout = 20)
{
	int num = 0;
	struct ibv_device **l = ibv_get_device_list(&num);
	if (l)
		ibv_free_device_list(l);
	if (num > 0)
		cr_skip_test("this machine has an RDMA device");
	{
		tu_shared_t *sh = tu_shared_new();
		cr_assert_eq(sc_local_run(2, rank_forced_verbs, sh, 15000), 0);
		cr_expect_eq(sh->rc[0], -ENODEV);
		cr_expect_eq(sh->rc[1], -ENODEV);
		tu_shared_free(sh);
	}
}

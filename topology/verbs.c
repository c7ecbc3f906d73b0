/* verbs: ask libibverbs about the RDMA devices sysfs listed (ibv_get_device_list,
 * ibv_query_device, ibv_query_port, ibv_query_gid_table). A device verbs cannot
 * open keeps its sysfs facts; the note says why. The GID tables come from
 * ibv_query_gid_table (one call per device), ibv_query_gid_ex if it fails. */
#include "topo_internal.h"

#include "util.h"

#include <errno.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int topo_ib_rate_string(int active_speed, int active_width, char *out, size_t outlen,
			long *tenths)
{
	int w;
	switch (active_width) {
	case 1: w = 1; break;
	case 2: w = 4; break;
	case 4: w = 8; break;
	case 8: w = 12; break;
	case 16: w = 2; break;
	default: return -EINVAL;
	}
	const char *sp;
	long rate;
	switch (active_speed) { /* as drivers/infiniband/core/sysfs.c rate_show() */
	case 2: sp = " DDR"; rate = 50; break;
	case 4: sp = " QDR"; rate = 100; break;
	case 8: sp = " FDR10"; rate = 100; break;
	case 16: sp = " FDR"; rate = 140; break;
	case 32: sp = " EDR"; rate = 250; break;
	case 64: sp = " HDR"; rate = 500; break;
	case 128: sp = " NDR"; rate = 1000; break;
	case 256: sp = " XDR"; rate = 2000; break;
	default: sp = " SDR"; rate = 25; break;
	}
	rate *= w;
	snprintf(out, outlen, "%ld%s Gb/sec (%dX%s)", rate / 10, rate % 10 ? ".5" : "", w, sp);
	*tenths = rate;
	return 0;
}

static const char *state_word(int s)
{
	static const char *const n[] = {"nop", "down", "init", "armed", "active", "active_defer"};
	return s >= 0 && s < (int)(sizeof n / sizeof n[0]) ? n[s] : "unknown";
}

static const char *phys_word(int s)
{
	static const char *const n[] = {"unknown",  "sleep",   "polling",
					"disabled", "port_configuration_training",
					"link_up",  "link_error_recovery", "phy_test"};
	return s >= 0 && s < (int)(sizeof n / sizeof n[0]) ? n[s] : "unknown";
}

/* One valid GID entry into p (if it fits and is not the zero GID); cap is the
 * size of p->gids (the port's gid_tbl_len). */
static void add_gid(struct topo_ibport *p, size_t cap, const struct ibv_gid_entry *e)
{
	static const uint8_t zero[16];
	if (!p->gids || p->n_gids >= cap || memcmp(e->gid.raw, zero, 16) == 0)
		return;
	struct topo_gid *t = &p->gids[p->n_gids++];
	t->index = (int)e->gid_index;
	memcpy(t->raw, e->gid.raw, 16);
	t->type = e->gid_type == IBV_GID_TYPE_ROCE_V2 ? 2 : 1;
	char ifn[IF_NAMESIZE];
	if (e->ndev_ifindex && if_indextoname(e->ndev_ifindex, ifn))
		util_strlcpy(t->ndev, ifn, sizeof t->ndev);
	if (!p->ndev[0] && t->ndev[0])
		util_strlcpy(p->ndev, t->ndev, sizeof p->ndev);
}

static int cmp_gid(const void *a, const void *b)
{
	int x = ((const struct topo_gid *)a)->index, y = ((const struct topo_gid *)b)->index;
	return (x > y) - (x < y);
}

/* Query one opened device into d (keeps d's sysfs facts on failure). */
static int query_dev(struct ibv_context *ctx, struct topo_ibdev *d)
{
	struct ibv_device_attr da;
	if (ibv_query_device(ctx, &da))
		return -errno;
	size_t np = da.phys_port_cnt;
	if (np == 0 || np > 255)
		return -EINVAL;
	struct topo_ibport *ports = calloc(np, sizeof *ports);
	if (!ports)
		return -ENOMEM;
	size_t total = 0, cap[255];
	for (size_t i = 0; i < np; i++) {
		struct topo_ibport *p = &ports[i];
		struct ibv_port_attr pa;
		p->num = (int)i + 1;
		if (ibv_query_port(ctx, (uint8_t)p->num, &pa)) {
			for (size_t j = 0; j < i; j++)
				free(ports[j].gids);
			free(ports);
			return -errno;
		}
		p->state = (int)pa.state;
		util_strlcpy(p->state_w, state_word(p->state), sizeof p->state_w);
		p->phys_state = pa.phys_state;
		util_strlcpy(p->phys_state_w, phys_word(p->phys_state), sizeof p->phys_state_w);
		if (topo_ib_rate_string(pa.active_speed, pa.active_width, p->rate, sizeof p->rate,
					&p->rate_tenths) < 0) {
			p->rate[0] = '\0';
			p->rate_tenths = -1;
		}
		util_strlcpy(p->link_layer,
			     pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "ethernet" : "infiniband",
			     sizeof p->link_layer);
		int tbl = pa.gid_tbl_len > 0 && pa.gid_tbl_len <= 4096 ? pa.gid_tbl_len : 0;
		p->gids = calloc(tbl ? (size_t)tbl : 1, sizeof *p->gids);
		p->gids_read = true;
		cap[i] = (size_t)tbl;
		total += (size_t)tbl;
	}
	/* The whole table in one call (the valid entries only); per index only if
	 * that fails. rxe tables have 1024 slots, nearly all empty. */
	struct ibv_gid_entry *ents = calloc(total ? total : 1, sizeof *ents);
	ssize_t got = ents && total ? ibv_query_gid_table(ctx, ents, total, 0) : -1;
	if (got >= 0) {
		for (ssize_t k = 0; k < got; k++)
			for (size_t i = 0; i < np; i++)
				if (ports[i].num == (int)ents[k].port_num)
					add_gid(&ports[i], cap[i], &ents[k]);
		for (size_t i = 0; i < np; i++) /* the kernel lists them in order; make sure */
			if (ports[i].gids)
				qsort(ports[i].gids, ports[i].n_gids, sizeof *ports[i].gids, cmp_gid);
	} else {
		for (size_t i = 0; i < np; i++) {
			struct topo_ibport *p = &ports[i];
			struct ibv_port_attr pa;
			if (!p->gids || ibv_query_port(ctx, (uint8_t)p->num, &pa))
				continue;
			int tbl = pa.gid_tbl_len > 0 && pa.gid_tbl_len <= 4096 ? pa.gid_tbl_len : 0;
			for (int g = 0; g < tbl; g++) {
				struct ibv_gid_entry e;
				if (ibv_query_gid_ex(ctx, (uint32_t)p->num, (uint32_t)g, &e, 0))
					continue; /* ENODATA: empty slot */
				add_gid(p, cap[i], &e);
			}
		}
	}
	free(ents);
	for (size_t p = 0; p < d->n_ports; p++)
		free(d->ports[p].gids);
	free(d->ports);
	d->ports = ports;
	d->n_ports = np;
	util_strlcpy(d->fw_ver, da.fw_ver, sizeof d->fw_ver);
	d->source = TOPO_SRC_VERBS;
	return 0;
}

void topo_verbs_fill(struct topo_ibdev *devs, size_t n, const bool *want, char *note,
		     size_t notelen)
{
	int num = 0;
	note[0] = '\0';
	errno = 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list) {
		snprintf(note, notelen, "verbs: ibv_get_device_list failed (%s); RDMA facts from sysfs",
			 strerror(errno ? errno : ENOSYS));
		return;
	}
	if (num == 0) {
		snprintf(note, notelen,
			 "verbs: no RDMA device (ibv_get_device_list found none); RDMA facts from sysfs");
		ibv_free_device_list(list);
		return;
	}
	size_t used = 0;
	for (size_t i = 0; i < n; i++) {
		if (want && !want[i])
			continue;
		struct ibv_device *dev = NULL;
		for (int j = 0; j < num; j++)
			if (strcmp(ibv_get_device_name(list[j]), devs[i].name) == 0)
				dev = list[j];
		int r;
		if (!dev) {
			r = -ENODEV;
		} else {
			struct ibv_context *ctx = ibv_open_device(dev);
			if (!ctx) {
				r = -(errno ? errno : EIO);
			} else {
				r = query_dev(ctx, &devs[i]);
				ibv_close_device(ctx);
			}
		}
		if (r < 0 && used + 1 < notelen) {
			int k = snprintf(note + used, notelen - used, "%sverbs: %s: %s; RDMA facts from sysfs",
					 used ? "; " : "", devs[i].name,
					 r == -ENODEV ? "not listed by ibv_get_device_list" : strerror(-r));
			if (k > 0)
				used += (size_t)k < notelen - used ? (size_t)k : notelen - used - 1;
		}
	}
	ibv_free_device_list(list);
}

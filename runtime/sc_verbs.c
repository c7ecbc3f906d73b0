/* sc_verbs.c - RDMA verbs links (RoCE v2, RC queue pairs).
 *
 * A verbs link is an ordered byte stream over one RC QP using SEND/RECV into
 * registered bounce slots: the sender copies into a free send slot and posts
 * it (inline when small); the receiver keeps every receive slot posted and
 * reposts a slot once its bytes are consumed. RC gives order and
 * reliability; rnr_retry=7 makes a sender wait (not fail) while the receiver
 * is behind. The completion channel fd lets the engine sleep in poll(); the
 * TCP socket from the bootstrap stays open to carry ABORT and to notice a
 * dead peer at once.
 *
 * The device and GID come from the connection's local IP address: the RoCE v2
 * GID whose value is that address (IPv4-mapped for IPv4), never an assumed
 * index. Each device's table is read once per communicator
 * (ibv_query_gid_table; sysfs gids/N and gid_attrs/types/N where that fails)
 * and every connection looks it up in that cache. */
#include "sc_internal.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define VSLOT_SIZE (64u * 1024u)
#define VNSLOTS 32u
/* RC transport timeout 4.096 us * 2^16 = 268 ms, 6 retries: a peer whose device
 * stops acknowledging (link down, packets dropped above a lowered MTU) fails the
 * send with IBV_WC_RETRY_EXC_ERR after about 2 s. Not 7: rdma_rxe treats a
 * retry count of 7 as "retry forever" (rxe_comp.c), the spec does not. */
#define VQP_TIMEOUT 16
#define VQP_RETRY 6
#define VGID_RELOAD_NS (1000ull * 1000000ull)

/* One RoCE v2 GID of a device port. */
struct sc_vgid {
	uint8_t gid[16];
	int port, index;
};

struct sc_vdev {
	char name[64];
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	/* its RoCE v2 GIDs, read once per communicator */
	struct sc_vgid *gids;
	int ngids;
};

struct sc_vctx {
	struct ibv_device **list;
	int nlist;
	struct sc_vdev *devs; /* [nlist], in the order of list */
	uint64_t gids_at;     /* when the GID tables were read, 0 = not yet */
};

struct sc_vlink {
	sc_comm_t *c;
	struct sc_vdev *dev;
	int peer;
	int port, gid_index;
	uint8_t gid[16];
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint8_t *sbuf, *rbuf;
	struct ibv_mr *smr, *rmr;
	uint32_t slot, nslots, send_slot, max_inline;
	uint32_t s_next, s_free;
	int peer_closed; /* EOF on the bootstrap socket: the peer is done or gone */
	/* receive slots complete in the order they were posted */
	uint32_t r_head;          /* oldest completed, unconsumed slot */
	uint32_t r_ready;         /* completed slots not yet consumed */
	uint32_t r_off;           /* bytes consumed from r_head */
	uint32_t *r_len;
	uint32_t psn;
	enum ibv_mtu mtu, path_mtu;
	int err;
};

/* ---- GID lookup ---------------------------------------------------------- */

static int read_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "re");
	size_t n;
	if (!f)
		return -errno;
	if (!fgets(buf, (int)len, f)) {
		fclose(f);
		return -EIO;
	}
	fclose(f);
	n = strlen(buf);
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = '\0';
	return 0;
}

static int parse_gid(const char *s, uint8_t out[16])
{
	/* "fe80:0000:0000:0000:0000:0000:0000:0001" (sysfs form) or any inet6 form */
	struct in6_addr a;
	if (inet_pton(AF_INET6, s, &a) != 1)
		return -EINVAL;
	memcpy(out, &a, 16);
	return 0;
}

static int local_gid_bytes(const struct sockaddr *sa, uint8_t out[16])
{
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		memset(out, 0, 10);
		out[10] = 0xff;
		out[11] = 0xff;
		memcpy(out + 12, &in->sin_addr, 4);
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		memcpy(out, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
		return 0;
	}
	return -EAFNOSUPPORT;
}

static int gid_push(struct sc_vgid **v, int *n, int *cap, const uint8_t g[16], int port, int idx)
{
	if (*n == *cap) {
		int nc = *cap ? 2 * *cap : 8;
		struct sc_vgid *x = realloc(*v, (size_t)nc * sizeof(*x));
		if (!x)
			return -ENOMEM;
		*v = x;
		*cap = nc;
	}
	memcpy((*v)[*n].gid, g, 16);
	(*v)[*n].port = port;
	(*v)[*n].index = idx;
	(*n)++;
	return 0;
}

/* The RoCE v2 GIDs of device dev under sysfs_root (only those equal to *want
 * when want is set). Each entry's value is read first and its type only for a
 * candidate: an rxe table has 1024 slots, nearly all zero. */
static int sysfs_gids(const char *sysfs_root, const char *dev, const uint8_t *want,
                      struct sc_vgid **out, int *n)
{
	char path[512];
	DIR *pd;
	struct dirent *pe;
	int cap = 0;
	static const uint8_t zero[16];

	*out = NULL;
	*n = 0;
	snprintf(path, sizeof(path), "%s/%s/ports", sysfs_root, dev);
	pd = opendir(path);
	if (!pd)
		return -ENOENT;
	while ((pe = readdir(pd))) {
		char *end;
		long p = strtol(pe->d_name, &end, 10);
		if (pe->d_name[0] == '.' || *end || p <= 0 || p > 255)
			continue;
		for (int i = 0; i < 4096; i++) {
			char gpath[600], tpath[600], gs[128], ts[64];
			uint8_t g[16];
			snprintf(gpath, sizeof(gpath), "%s/%s/ports/%ld/gids/%d", sysfs_root, dev, p, i);
			if (read_line(gpath, gs, sizeof(gs)) == -ENOENT)
				break; /* end of the table */
			if (parse_gid(gs, g) < 0 || memcmp(g, zero, 16) == 0 ||
			    (want && memcmp(g, want, 16) != 0))
				continue;
			snprintf(tpath, sizeof(tpath), "%s/%s/ports/%ld/gid_attrs/types/%d", sysfs_root,
			         dev, p, i);
			if (read_line(tpath, ts, sizeof(ts)) < 0 || strcasecmp(ts, "RoCE v2") != 0)
				continue;
			if (gid_push(out, n, &cap, g, (int)p, i) < 0) {
				closedir(pd);
				return -ENOMEM;
			}
		}
	}
	closedir(pd);
	return 0;
}

/* The RoCE v2 GIDs of an open device, in one call (ibv_query_gid_table returns
 * the valid entries only). -errno if the call is not supported. */
static int verbs_gids(struct ibv_context *ctx, struct sc_vgid **out, int *n)
{
	struct ibv_device_attr da;
	struct ibv_gid_entry *e;
	size_t total = 0;
	ssize_t got;
	int cap = 0, rc = 0;

	*out = NULL;
	*n = 0;
	if (ibv_query_device(ctx, &da))
		return -(errno ? errno : EIO);
	for (int p = 1; p <= da.phys_port_cnt; p++) {
		struct ibv_port_attr pa;
		if (ibv_query_port(ctx, (uint8_t)p, &pa))
			return -(errno ? errno : EIO);
		if (pa.gid_tbl_len > 0)
			total += (size_t)pa.gid_tbl_len;
	}
	if (!total)
		return 0;
	e = calloc(total, sizeof(*e));
	if (!e)
		return -ENOMEM;
	got = ibv_query_gid_table(ctx, e, total, 0);
	if (got < 0)
		rc = -(errno ? errno : EOPNOTSUPP);
	for (ssize_t k = 0; k < got && rc == 0; k++)
		if (e[k].gid_type == IBV_GID_TYPE_ROCE_V2)
			rc = gid_push(out, n, &cap, e[k].gid.raw, (int)e[k].port_num,
			              (int)e[k].gid_index);
	free(e);
	return rc;
}

int sc_verbs_find_gid(const char *sysfs_root, const struct sockaddr *local, char *dev,
                      size_t devlen, int *port, int *gid_index, uint8_t gid[16])
{
	uint8_t want[16];
	DIR *d;
	struct dirent *de;
	int found = -ENOENT;

	if (!sysfs_root)
		sysfs_root = "/sys/class/infiniband";
	if (local_gid_bytes(local, want) < 0)
		return -EAFNOSUPPORT;
	d = opendir(sysfs_root);
	if (!d)
		return -ENOENT;
	while (found < 0 && (de = readdir(d))) {
		struct sc_vgid *g;
		int n;
		if (de->d_name[0] == '.' || strlen(de->d_name) >= devlen)
			continue;
		if (sysfs_gids(sysfs_root, de->d_name, want, &g, &n) < 0)
			continue;
		if (n > 0) {
			strcpy(dev, de->d_name);
			*port = g[0].port;
			*gid_index = g[0].index;
			memcpy(gid, g[0].gid, 16);
			found = 0;
		}
		free(g);
	}
	closedir(d);
	return found;
}

/* ---- device context ------------------------------------------------------ */

int sc_verbs_open(sc_comm_t *c)
{
	struct sc_vctx *v;
	int num = 0;
	struct ibv_device **list;

	if (c->opt.transport == SC_TRANSPORT_TCP) {
		snprintf(c->verbs_why, sizeof(c->verbs_why), "TCP forced (SPARK_COLL_TRANSPORT=tcp)");
		return 0;
	}
	list = ibv_get_device_list(&num);
	if (!list || num <= 0) {
		snprintf(c->verbs_why, sizeof(c->verbs_why),
		         "no RDMA device (ibv_get_device_list found none)");
		if (list)
			ibv_free_device_list(list);
		return 0;
	}
	v = calloc(1, sizeof(*v));
	if (v)
		v->devs = calloc((size_t)num, sizeof(*v->devs));
	if (!v || !v->devs) {
		free(v);
		ibv_free_device_list(list);
		return 0;
	}
	v->list = list;
	v->nlist = num;
	for (int i = 0; i < num; i++)
		snprintf(v->devs[i].name, sizeof(v->devs[i].name), "%s",
		         ibv_get_device_name(list[i]));
	c->vctx = v;
	return 1;
}

static void dev_release(struct sc_vdev *d)
{
	if (d->pd)
		ibv_dealloc_pd(d->pd);
	if (d->ctx)
		ibv_close_device(d->ctx);
	d->pd = NULL;
	d->ctx = NULL;
}

void sc_verbs_close(sc_comm_t *c)
{
	struct sc_vctx *v = c->vctx;
	if (!v)
		return;
	for (int i = 0; i < v->nlist; i++) {
		dev_release(&v->devs[i]);
		free(v->devs[i].gids);
	}
	free(v->devs);
	ibv_free_device_list(v->list);
	free(v);
	c->vctx = NULL;
}

/* Read every device's RoCE v2 GIDs into the cache: by verbs, or from the sysfs
 * tree of opt.sysfs_root (tests), or from /sys where verbs cannot (a kernel
 * without the GID table query). A device opened only for this is closed again. */
static void load_gids(sc_comm_t *c)
{
	struct sc_vctx *v = c->vctx;
	for (int i = 0; i < v->nlist; i++) {
		struct sc_vdev *d = &v->devs[i];
		int rc = -1;
		free(d->gids);
		d->gids = NULL;
		d->ngids = 0;
		if (!c->opt.sysfs_root) {
			int opened = !d->ctx;
			if (!d->ctx)
				d->ctx = ibv_open_device(v->list[i]);
			if (d->ctx)
				rc = verbs_gids(d->ctx, &d->gids, &d->ngids);
			if (opened && !d->pd && d->ctx) {
				ibv_close_device(d->ctx);
				d->ctx = NULL;
			}
		}
		if (rc < 0) {
			free(d->gids);
			sysfs_gids(c->opt.sysfs_root ? c->opt.sysfs_root : "/sys/class/infiniband",
			           d->name, NULL, &d->gids, &d->ngids);
		}
	}
	v->gids_at = sc_now_ns();
}

/* The device, port and RoCE v2 GID index of a local address, from the cache
 * (read at the first lookup, again on a miss once it is a second old). */
static struct sc_vdev *find_gid_cached(sc_comm_t *c, const struct sockaddr *local, int *port,
                                       int *gid_index, uint8_t gid[16])
{
	struct sc_vctx *v = c->vctx;
	uint8_t want[16];

	if (local_gid_bytes(local, want) < 0)
		return NULL;
	for (int pass = 0; pass < 2; pass++) {
		if (!v->gids_at || (pass == 1 && sc_now_ns() - v->gids_at > VGID_RELOAD_NS))
			load_gids(c);
		else if (pass == 1)
			break;
		for (int i = 0; i < v->nlist; i++)
			for (int k = 0; k < v->devs[i].ngids; k++) {
				const struct sc_vgid *g = &v->devs[i].gids[k];
				if (memcmp(g->gid, want, 16) != 0)
					continue;
				*port = g->port;
				*gid_index = g->index;
				memcpy(gid, g->gid, 16);
				return &v->devs[i];
			}
	}
	return NULL;
}

/* Open a device (context and protection domain) for links. */
static int dev_open(struct sc_vctx *v, struct sc_vdev *d)
{
	if (d->pd)
		return 0;
	if (!d->ctx)
		d->ctx = ibv_open_device(v->list[d - v->devs]);
	if (!d->ctx)
		return -(errno ? errno : ENODEV);
	d->pd = ibv_alloc_pd(d->ctx);
	if (!d->pd) {
		int e = errno ? errno : ENOMEM;
		dev_release(d);
		return -e;
	}
	return 0;
}

/* ---- link ---------------------------------------------------------------- */

static int post_recv(struct sc_vlink *v, uint32_t k)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)(v->rbuf + (size_t)k * v->slot),
		.length = v->slot,
		.lkey = v->rmr->lkey,
	};
	struct ibv_recv_wr wr = {.wr_id = k, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
	return ibv_post_recv(v->qp, &wr, &bad) ? -EIO : 0;
}

void sc_verbs_link_free(struct sc_vlink *v)
{
	if (!v)
		return;
	if (v->qp)
		ibv_destroy_qp(v->qp);
	if (v->cq)
		ibv_destroy_cq(v->cq);
	if (v->ch)
		ibv_destroy_comp_channel(v->ch);
	if (v->smr)
		ibv_dereg_mr(v->smr);
	if (v->rmr)
		ibv_dereg_mr(v->rmr);
	free(v->sbuf);
	free(v->rbuf);
	free(v->r_len);
	free(v);
}

struct sc_vlink *sc_verbs_link_new(sc_comm_t *c, const struct sockaddr *local, sc_hello_t *mine,
                                   char *why, size_t whylen)
{
	struct sc_vlink *v;
	char devname[64], addr[INET6_ADDRSTRLEN] = "?";
	struct ibv_port_attr pa;
	struct ibv_qp_init_attr qia;
	struct ibv_qp_attr qa;
	uint32_t rnd;

	if (!c->vctx)
		return NULL;
	if (local->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)local)->sin_addr, addr, sizeof(addr));
	else if (local->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)local)->sin6_addr, addr,
		          sizeof(addr));
	v = calloc(1, sizeof(*v));
	if (!v)
		return NULL;
	v->c = c;
	v->peer = -1;
	v->dev = find_gid_cached(c, local, &v->port, &v->gid_index, v->gid);
	if (!v->dev) {
		snprintf(why, whylen, "no RoCE v2 GID for local address %s on any RDMA device", addr);
		goto fail;
	}
	snprintf(devname, sizeof(devname), "%s", v->dev->name);
	if (dev_open(c->vctx, v->dev) < 0) {
		snprintf(why, whylen, "cannot open RDMA device %s", devname);
		goto fail;
	}
	if (ibv_query_port(v->dev->ctx, (uint8_t)v->port, &pa) || pa.state != IBV_PORT_ACTIVE) {
		snprintf(why, whylen, "RDMA port %s/%d is not active", devname, v->port);
		goto fail;
	}
	if (pa.link_layer != IBV_LINK_LAYER_ETHERNET) {
		snprintf(why, whylen, "RDMA port %s/%d is not RoCE", devname, v->port);
		goto fail;
	}
	v->mtu = pa.active_mtu;
	v->slot = VSLOT_SIZE;
	v->nslots = VNSLOTS;
	v->ch = ibv_create_comp_channel(v->dev->ctx);
	if (!v->ch)
		goto fail_verbs;
	sc_set_nonblock(v->ch->fd);
	v->cq = ibv_create_cq(v->dev->ctx, (int)(2 * v->nslots + 8), v, v->ch, 0);
	if (!v->cq)
		goto fail_verbs;
	memset(&qia, 0, sizeof(qia));
	qia.send_cq = v->cq;
	qia.recv_cq = v->cq;
	qia.qp_type = IBV_QPT_RC;
	qia.cap.max_send_wr = v->nslots;
	qia.cap.max_recv_wr = v->nslots;
	qia.cap.max_send_sge = 1;
	qia.cap.max_recv_sge = 1;
	qia.cap.max_inline_data = 128;
	v->qp = ibv_create_qp(v->dev->pd, &qia);
	if (!v->qp) {
		qia.cap.max_inline_data = 0;
		v->qp = ibv_create_qp(v->dev->pd, &qia);
	}
	if (!v->qp)
		goto fail_verbs;
	v->max_inline = qia.cap.max_inline_data;
	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_INIT;
	qa.pkey_index = 0;
	qa.port_num = (uint8_t)v->port;
	qa.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
	if (ibv_modify_qp(v->qp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
	                                  IBV_QP_ACCESS_FLAGS))
		goto fail_verbs;
	if (posix_memalign((void **)&v->sbuf, 4096, (size_t)v->slot * v->nslots) ||
	    posix_memalign((void **)&v->rbuf, 4096, (size_t)v->slot * v->nslots))
		goto fail_verbs;
	v->r_len = calloc(v->nslots, sizeof(*v->r_len));
	if (!v->r_len)
		goto fail_verbs;
	v->smr = ibv_reg_mr(v->dev->pd, v->sbuf, (size_t)v->slot * v->nslots, IBV_ACCESS_LOCAL_WRITE);
	v->rmr = ibv_reg_mr(v->dev->pd, v->rbuf, (size_t)v->slot * v->nslots, IBV_ACCESS_LOCAL_WRITE);
	if (!v->smr || !v->rmr)
		goto fail_verbs;
	for (uint32_t k = 0; k < v->nslots; k++)
		if (post_recv(v, k) < 0)
			goto fail_verbs;
	v->s_free = v->nslots;
	{
		int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
		rnd = (uint32_t)sc_now_ns();
		if (fd >= 0) {
			if (read(fd, &rnd, sizeof(rnd)) != (ssize_t)sizeof(rnd))
				rnd ^= (uint32_t)getpid();
			close(fd);
		}
	}
	v->psn = rnd & 0xffffffu;
	mine->flags |= SC_HELLO_F_VERBS;
	mine->qpn = v->qp->qp_num;
	mine->psn = v->psn;
	memcpy(mine->gid, v->gid, 16);
	mine->lid = pa.lid;
	mine->mtu = (uint8_t)v->mtu;
	mine->slot_size = v->slot;
	mine->nslots = v->nslots;
	return v;
fail_verbs:
	snprintf(why, whylen, "verbs set-up on %s failed: %s", devname, strerror(errno ? errno : EIO));
fail:
	sc_verbs_link_free(v);
	return NULL;
}

int sc_verbs_link_connect(struct sc_vlink *v, const sc_hello_t *peer, char *why, size_t whylen)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	v->path_mtu = (enum ibv_mtu)(peer->mtu < (uint8_t)v->mtu ? peer->mtu : (uint8_t)v->mtu);
	a.path_mtu = v->path_mtu;
	a.dest_qp_num = peer->qpn;
	a.rq_psn = peer->psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1; /* 0.01 ms */
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
	a.ah_attr.grh.sgid_index = (uint8_t)v->gid_index;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.dlid = peer->lid;
	a.ah_attr.port_num = (uint8_t)v->port;
	if (ibv_modify_qp(v->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
	                                 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
	                                 IBV_QP_MIN_RNR_TIMER)) {
		snprintf(why, whylen, "ibv_modify_qp to RTR failed: %s (check MTU and cabling)",
		         strerror(errno));
		return -EIO;
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = VQP_TIMEOUT;
	a.retry_cnt = VQP_RETRY;
	a.rnr_retry = 7; /* infinite: receiver behind means wait */
	a.sq_psn = v->psn;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(v->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
	                                 IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
		snprintf(why, whylen, "ibv_modify_qp to RTS failed: %s", strerror(errno));
		return -EIO;
	}
	v->send_slot = peer->slot_size < v->slot ? peer->slot_size : v->slot;
	return 0;
}

static int mtu_bytes(enum ibv_mtu m)
{
	return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128 << (int)m : 0;
}

/* The first failed completion fails the communicator with what it means (the
 * ones behind it come back flushed and say nothing more). */
static void completion_failed(struct sc_vlink *v, const struct ibv_wc *wc)
{
	char hint[200] = "";
	v->err = -EIO;
	if (wc->status == IBV_WC_RETRY_EXC_ERR)
		snprintf(hint, sizeof(hint),
		         ": the peer's RDMA device stopped acknowledging; the link is down or drops "
		         "packets, e.g. an MTU on the path lowered below the RoCE MTU of %d bytes",
		         mtu_bytes(v->path_mtu));
	else if (wc->status == IBV_WC_REM_INV_REQ_ERR || wc->status == IBV_WC_LOC_LEN_ERR)
		snprintf(hint, sizeof(hint),
		         ": packet lengths disagree; did an MTU on the link change (RoCE MTU %d "
		         "bytes)?", mtu_bytes(v->path_mtu));
	sc_fail(v->c, -EIO, "RDMA link to rank %d (%s) failed: work completion %s (status %d)%s",
	        v->peer, v->dev->name, ibv_wc_status_str(wc->status), (int)wc->status, hint);
}

static int vpoll(struct sc_vlink *v)
{
	struct ibv_wc wc[16];
	int n, got = 0;
	while ((n = ibv_poll_cq(v->cq, 16, wc)) > 0) {
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				if (!v->err)
					completion_failed(v, &wc[i]);
				continue;
			}
			if (wc[i].opcode == IBV_WC_RECV) {
				uint32_t k = (uint32_t)wc[i].wr_id;
				if (k < v->nslots)
					v->r_len[k] = wc[i].byte_len;
				v->r_ready++;
			} else {
				v->s_free++;
			}
		}
		got += n;
	}
	if (n < 0 && !v->err)
		v->err = -EIO;
	return got;
}

static ssize_t v_sendv(sc_link_t *l, const struct iovec *iov, int iovcnt)
{
	struct sc_vlink *v = l->priv;
	size_t total = 0;
	int i = 0;
	size_t io = 0;

	vpoll(v);
	if (v->err)
		return v->err;
	while (i < iovcnt && v->s_free > 0) {
		uint32_t k = v->s_next;
		uint8_t *slot = v->sbuf + (size_t)k * v->slot;
		size_t used = 0;
		struct ibv_sge sge;
		struct ibv_send_wr wr, *bad = NULL;
		while (i < iovcnt && used < v->send_slot) {
			size_t take = iov[i].iov_len - io;
			if (take > v->send_slot - used)
				take = v->send_slot - used;
			memcpy(slot + used, (const uint8_t *)iov[i].iov_base + io, take);
			used += take;
			io += take;
			if (io == iov[i].iov_len) {
				i++;
				io = 0;
			}
		}
		if (!used)
			break;
		memset(&wr, 0, sizeof(wr));
		sge.addr = (uintptr_t)slot;
		sge.length = (uint32_t)used;
		sge.lkey = v->smr->lkey;
		wr.wr_id = k;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_SEND;
		wr.send_flags = IBV_SEND_SIGNALED | (used <= v->max_inline ? IBV_SEND_INLINE : 0);
		if (ibv_post_send(v->qp, &wr, &bad)) {
			v->err = -EIO;
			return total ? (ssize_t)total : -EIO;
		}
		v->s_free--;
		v->s_next = (v->s_next + 1) % v->nslots;
		total += used;
	}
	return total ? (ssize_t)total : -EAGAIN;
}

static ssize_t v_recvv(sc_link_t *l, const struct iovec *iov, int iovcnt)
{
	struct sc_vlink *v = l->priv;
	size_t total = 0;
	int i = 0;
	size_t io = 0;

	if (!v->r_ready)
		vpoll(v);
	while (i < iovcnt && v->r_ready > 0) {
		uint32_t k = v->r_head;
		uint32_t avail = v->r_len[k] - v->r_off;
		size_t take = iov[i].iov_len - io;
		if (take > avail)
			take = avail;
		memcpy((uint8_t *)iov[i].iov_base + io, v->rbuf + (size_t)k * v->slot + v->r_off, take);
		v->r_off += (uint32_t)take;
		io += take;
		total += take;
		if (io == iov[i].iov_len) {
			i++;
			io = 0;
		}
		if (v->r_off == v->r_len[k]) {
			v->r_off = 0;
			v->r_ready--;
			v->r_head = (v->r_head + 1) % v->nslots;
			if (post_recv(v, k) < 0 && !v->err)
				v->err = -EIO;
		}
	}
	if (total)
		return (ssize_t)total;
	if (v->err)
		return v->err;
	return v->peer_closed ? -ECONNRESET : -EAGAIN;
}

static int v_prepare_poll(sc_link_t *l, struct pollfd *pfd, int want_send, int want_recv)
{
	struct sc_vlink *v = l->priv;
	(void)want_send;
	/* received bytes waiting only matter if this run reads from the link */
	if (v->err || (want_recv && v->r_ready) || vpoll(v) > 0)
		return -1;
	if (ibv_req_notify_cq(v->cq, 0))
		return -1;
	if (vpoll(v) > 0) /* completions that raced the arming */
		return -1;
	if (want_recv && v->peer_closed)
		return -1; /* v_recvv reports it */
	pfd[0].fd = v->ch->fd;
	pfd[0].events = POLLIN;
	pfd[0].revents = 0;
	if (v->peer_closed)
		return 1;
	pfd[1].fd = l->fd;
	pfd[1].events = POLLIN;
	pfd[1].revents = 0;
	return 2;
}

static int v_after_poll(sc_link_t *l, const struct pollfd *pfd, int npfd)
{
	struct sc_vlink *v = l->priv;
	if (npfd >= 1 && (pfd[0].revents & POLLIN)) {
		struct ibv_cq *cq;
		void *ctx;
		if (ibv_get_cq_event(v->ch, &cq, &ctx) == 0)
			ibv_ack_cq_events(cq, 1);
	}
	if (npfd >= 2 && (pfd[1].revents & (POLLIN | POLLHUP | POLLERR))) {
		/* nothing but ABORT or EOF travels on the bootstrap socket */
		uint8_t b[SC_HDR_LEN];
		sc_hdr_t h;
		ssize_t r = recv(l->fd, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT);
		/* A peer that finished closes its socket right after its last sends
		 * were acknowledged, i.e. after they landed here: what the CQ holds
		 * is still read (v_recvv fails once nothing is left), and a link
		 * this rank no longer reads from is no error. */
		if (r == 0) {
			v->peer_closed = 1;
			vpoll(v);
			return v->err;
		}
		if (r == SC_HDR_LEN && sc_hdr_decode(b, SC_HDR_LEN, &h, NULL) == 0 &&
		    h.kind == SC_MSG_ABORT)
			return h.count > 0 && h.count < 100000 ? -(int)h.count : -SC_EABORTED;
		if (r > 0 && r == SC_HDR_LEN)
			return -SC_EPEER;
	}
	return v->err;
}

static void v_abort(sc_link_t *l, int code, int my_rank)
{
	sc_hdr_t h = {0};
	uint8_t b[SC_HDR_LEN];
	if (l->fd < 0)
		return;
	h.kind = SC_MSG_ABORT;
	h.src = (uint16_t)my_rank;
	h.count = (uint64_t)(code < 0 ? -code : code);
	sc_hdr_encode(&h, b);
	if (send(l->fd, b, sizeof(b), MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
		/* best effort */
	}
	shutdown(l->fd, SHUT_WR);
}

/* A send counts as done once posted, so the last message of a collective may
 * still sit in the send queue when the caller destroys the communicator.
 * Destroying the QP then would flush it unsent and the peer, still waiting for
 * it, would see only the closed bootstrap socket. Wait (bounded) until the
 * peer's device has acknowledged every send. */
static void drain_sends(struct sc_vlink *v)
{
	uint64_t end = sc_now_ns() + 2000000000ull;
	while (!v->err && v->s_free < v->nslots && sc_now_ns() < end) {
		if (vpoll(v) == 0) {
			struct timespec ts = {0, 20000};
			nanosleep(&ts, NULL);
		}
	}
}

static void v_destroy(sc_link_t *l)
{
	if (l->priv)
		drain_sends(l->priv);
	sc_verbs_link_free(l->priv);
	if (l->fd >= 0)
		close(l->fd);
	free(l);
}

const sc_link_ops_t sc_verbs_link_ops = {
	.name = "verbs",
	.sendv = v_sendv,
	.recvv = v_recvv,
	.prepare_poll = v_prepare_poll,
	.after_poll = v_after_poll,
	.abort = v_abort,
	.destroy = v_destroy,
};

sc_link_t *sc_verbs_link_wrap(struct sc_vlink *v, int fd, int peer)
{
	sc_link_t *l = calloc(1, sizeof(*l));
	if (!l) {
		sc_verbs_link_free(v);
		close(fd);
		return NULL;
	}
	l->ops = &sc_verbs_link_ops;
	l->fd = fd;
	l->peer = peer;
	l->priv = v;
	v->peer = peer;
	return l;
}

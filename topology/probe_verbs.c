/* probe_verbs: the RDMA path of the probes (RC QP over RoCE v2), see probe.h.
 * Compiled always; used only where topo_probe_rdma_usable() says yes. */
#include "topology/probe.h"
#include "topology/probe_int.h"

#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <infiniband/verbs.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BW_MSG (64 * 1024)
#define BW_SLOTS 64          /* remote buffer = BW_SLOTS messages */
#define BW_DEPTH 64          /* outstanding writes */
#define BW_SIGNAL 16         /* every n-th write is signaled */
#define PING_MAX 4096
#define WARMUP 20
#define IMM_PING 0u
#define IMM_DONE 1u
#define WR_SEND 1
#define WR_RECV 2
#define WR_WRITE 3

struct rctx {
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint8_t *buf;
	size_t buflen;
	int port;
	int gid_index;
	struct ibv_port_attr pattr;
	union ibv_gid gid;
	unsigned timeout_ms;
	/* Completions polled but not consumed yet (one poll may return both a
	 * SEND and the RECV of the answer). */
	unsigned got_send, got_recv;
	uint32_t imm[16];
};

static int mtu_bytes(enum ibv_mtu m)
{
	switch (m) {
	case IBV_MTU_256:
		return 256;
	case IBV_MTU_512:
		return 512;
	case IBV_MTU_1024:
		return 1024;
	case IBV_MTU_2048:
		return 2048;
	case IBV_MTU_4096:
		return 4096;
	}
	return 0;
}

static void rctx_close(struct rctx *r)
{
	if (r->qp)
		ibv_destroy_qp(r->qp);
	if (r->cq)
		ibv_destroy_cq(r->cq);
	if (r->mr)
		ibv_dereg_mr(r->mr);
	if (r->pd)
		ibv_dealloc_pd(r->pd);
	if (r->ctx)
		ibv_close_device(r->ctx);
	if (r->list)
		ibv_free_device_list(r->list);
	free(r->buf);
	memset(r, 0, sizeof *r);
}

/* Open the device and check port and GID; no queue pair yet. */
static int rctx_open(struct rctx *r, const char *ibdev, int port, int gid_index, char *why,
		     size_t whylen)
{
	memset(r, 0, sizeof *r);
	int n = 0;
	r->list = ibv_get_device_list(&n);
	if (!r->list || n == 0) {
		snprintf(why, whylen, "no RDMA device on this node (TCP probes only)");
		rctx_close(r);
		return -ENODEV;
	}
	for (int i = 0; i < n && !r->ctx; i++)
		if (ibdev && strcmp(ibv_get_device_name(r->list[i]), ibdev) == 0)
			r->ctx = ibv_open_device(r->list[i]);
	if (!r->ctx) {
		snprintf(why, whylen, "RDMA device %s not found or cannot be opened", ibdev ? ibdev : "(none)");
		rctx_close(r);
		return -ENODEV;
	}
	r->port = port > 0 ? port : 1;
	r->gid_index = gid_index;
	if (ibv_query_port(r->ctx, (uint8_t)r->port, &r->pattr) != 0) {
		snprintf(why, whylen, "%s port %d cannot be queried", ibdev, r->port);
		rctx_close(r);
		return -ENODEV;
	}
	if (r->pattr.state != IBV_PORT_ACTIVE) {
		snprintf(why, whylen, "%s port %d is not active", ibdev, r->port);
		rctx_close(r);
		return -ENETDOWN;
	}
	if (r->pattr.link_layer != IBV_LINK_LAYER_ETHERNET) {
		snprintf(why, whylen, "%s port %d is not Ethernet (RoCE)", ibdev, r->port);
		rctx_close(r);
		return -EINVAL;
	}
	if (gid_index < 0 || gid_index >= r->pattr.gid_tbl_len) {
		snprintf(why, whylen, "GID index %d out of %s's table", gid_index, ibdev);
		rctx_close(r);
		return -ENOENT;
	}
	struct ibv_gid_entry ge;
	if (ibv_query_gid_ex(r->ctx, (uint32_t)r->port, (uint32_t)gid_index, &ge, 0) != 0) {
		snprintf(why, whylen, "GID %d of %s is empty", gid_index, ibdev);
		rctx_close(r);
		return -ENOENT;
	}
	if (ge.gid_type != IBV_GID_TYPE_ROCE_V2) {
		snprintf(why, whylen, "GID %d of %s is not RoCE v2", gid_index, ibdev);
		rctx_close(r);
		return -ENOENT;
	}
	memcpy(r->gid.raw, ge.gid.raw, 16);
	return 0;
}

int topo_probe_rdma_usable(const char *ibdev, int ib_port, int gid_index, char *why, size_t whylen)
{
	char dummy[8];
	if (!why) {
		why = dummy;
		whylen = sizeof dummy;
	}
	why[0] = '\0';
	struct rctx r;
	int rc = rctx_open(&r, ibdev, ib_port, gid_index, why, whylen);
	if (rc == 0)
		rctx_close(&r);
	return rc;
}

static int rctx_setup(struct rctx *r, char *err, size_t errlen)
{
	r->buflen = (size_t)BW_MSG * BW_SLOTS;
	if (posix_memalign((void **)&r->buf, 4096, r->buflen) != 0) {
		r->buf = NULL;
		return -ENOMEM;
	}
	memset(r->buf, 0, r->buflen);
	r->pd = ibv_alloc_pd(r->ctx);
	if (r->pd)
		r->mr = ibv_reg_mr(r->pd, r->buf, r->buflen,
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (r->mr)
		r->cq = ibv_create_cq(r->ctx, 2 * BW_DEPTH + 16, NULL, NULL, 0);
	if (r->cq) {
		struct ibv_qp_init_attr qa;
		memset(&qa, 0, sizeof qa);
		qa.send_cq = r->cq;
		qa.recv_cq = r->cq;
		qa.qp_type = IBV_QPT_RC;
		qa.cap.max_send_wr = BW_DEPTH + 8;
		qa.cap.max_recv_wr = 16;
		qa.cap.max_send_sge = 1;
		qa.cap.max_recv_sge = 1;
		r->qp = ibv_create_qp(r->pd, &qa);
	}
	if (!r->qp) {
		snprintf(err, errlen, "cannot create the RDMA queue pair (%s)",
			 !r->pd ? "pd" : !r->mr ? "memory registration" : !r->cq ? "cq" : "qp");
		return -ENOMEM;
	}
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = (uint8_t)r->port;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	if (ibv_modify_qp(r->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
		snprintf(err, errlen, "RDMA queue pair to INIT failed");
		return -EIO;
	}
	return 0;
}

static int rctx_connect(struct rctx *r, const struct topo_rdma_endpoint *local,
			const struct topo_rdma_endpoint *remote, char *err, size_t errlen)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	/* Our own active MTU, not the smaller of the two: a mismatch must show
	 * (as IBV_WC_RETRY_EXC_ERR), not be papered over. */
	a.path_mtu = r->pattr.active_mtu;
	a.dest_qp_num = remote->qpn;
	a.rq_psn = remote->psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, remote->gid, 16);
	a.ah_attr.grh.sgid_index = (uint8_t)r->gid_index;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.sl = 0;
	a.ah_attr.port_num = (uint8_t)r->port;
	if (ibv_modify_qp(r->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
		snprintf(err, errlen, "RDMA queue pair to RTR failed (peer GID unreachable?)");
		return -EIO;
	}
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = local->psn;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(r->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					 IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
		snprintf(err, errlen, "RDMA queue pair to RTS failed");
		return -EIO;
	}
	return 0;
}

static int post_recv(struct rctx *r)
{
	struct ibv_sge sge = {(uintptr_t)r->buf, PING_MAX, r->mr->lkey};
	struct ibv_recv_wr wr, *bad;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = WR_RECV;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	return ibv_post_recv(r->qp, &wr, &bad) ? -EIO : 0;
}

static int post_send(struct rctx *r, unsigned size, uint32_t imm)
{
	struct ibv_sge sge = {(uintptr_t)r->buf + PING_MAX, size, r->mr->lkey};
	struct ibv_send_wr wr, *bad;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = WR_SEND;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND_WITH_IMM;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.imm_data = htobe32(imm);
	return ibv_post_send(r->qp, &wr, &bad) ? -EIO : 0;
}

/* Take one completion of kind want (WR_SEND or WR_RECV), polling until
 * one is there. 0, -ETIMEDOUT, or -EIO with *status (a failed completion). */
static int wait_wc(struct rctx *r, uint64_t want, uint32_t *imm, int *status)
{
	uint64_t deadline = probe_now_ns() + (uint64_t)r->timeout_ms * 1000000ull;
	struct ibv_wc wc[16];
	for (unsigned spin = 0;; spin++) {
		if (want == WR_SEND && r->got_send) {
			r->got_send--;
			return 0;
		}
		if (want == WR_RECV && r->got_recv) {
			if (imm)
				*imm = r->imm[0];
			memmove(r->imm, r->imm + 1, sizeof r->imm - sizeof r->imm[0]);
			r->got_recv--;
			return 0;
		}
		int n = ibv_poll_cq(r->cq, 16, wc);
		if (n < 0)
			return -EIO;
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				*status = wc[i].status;
				return -EIO;
			}
			if (wc[i].wr_id == WR_SEND)
				r->got_send++;
			else if (wc[i].wr_id == WR_RECV && r->got_recv < 16)
				r->imm[r->got_recv++] = be32toh(wc[i].imm_data);
		}
		if ((spin & 1023) == 0 && probe_now_ns() > deadline)
			return -ETIMEDOUT;
	}
}

static const char *wc_name(int st) { return ibv_wc_status_str((enum ibv_wc_status)st); }

int topo_probe_rdma_run(const struct topo_probe_rdma_opts *o, json_t **result, char *err,
			size_t errlen)
{
	char dummy[8];
	if (!err) {
		err = dummy;
		errlen = sizeof dummy;
	}
	err[0] = '\0';
	if (!o || !result || !o->exchange)
		return -EINVAL;
	*result = NULL;
	const struct topo_probe_params *pp = &o->params;
	const char *role = o->server ? "server" : "client";
	if (pp->ping_size == 0 || pp->ping_size > PING_MAX) {
		snprintf(err, errlen, "ping size must be 1..%d for RDMA", PING_MAX);
		return -EINVAL;
	}
	struct rctx r;
	int rc = rctx_open(&r, o->ibdev, o->ib_port, o->gid_index, err, errlen);
	if (rc < 0)
		return rc; /* nothing measured: the caller falls back to TCP */
	r.timeout_ms = pp->timeout_ms ? pp->timeout_ms : 5000;
	uint64_t *rtt = NULL;
	json_t *lat = NULL, *bw = NULL;
	struct topo_rdma_endpoint local, remote;
	memset(&local, 0, sizeof local);
	memset(&remote, 0, sizeof remote);
	int wcst = -1;
	const char *step = "setup";
	if ((rc = rctx_setup(&r, err, errlen)) < 0)
		goto out;
	uint32_t psn = 0;
	RAND_bytes((unsigned char *)&psn, sizeof psn);
	local.qpn = r.qp->qp_num;
	local.psn = psn & 0xffffff;
	local.rkey = r.mr->rkey;
	local.addr = (uintptr_t)r.buf;
	local.buf_len = (uint32_t)r.buflen;
	local.mtu = (uint32_t)mtu_bytes(r.pattr.active_mtu);
	memcpy(local.gid, r.gid.raw, 16);
	/* Receives are posted before the peer can send (RNR retry covers the rest). */
	if ((rc = post_recv(&r)) < 0)
		goto out;
	step = "endpoint exchange";
	if ((rc = o->exchange(&local, &remote, o->exchange_arg)) < 0) {
		snprintf(err, errlen, "RDMA endpoint exchange failed: %s", strerror(-rc));
		goto out;
	}
	step = "connect";
	if ((rc = rctx_connect(&r, &local, &remote, err, errlen)) < 0)
		goto out;

	size_t nlat = pp->ping_iters + WARMUP;
	if (!o->server) {
		/* Ping-pong: SEND, wait for the echo's RECV. */
		step = "ping-pong";
		rtt = calloc(nlat ? nlat : 1, sizeof *rtt);
		if (!rtt) {
			rc = -ENOMEM;
			goto out;
		}
		for (size_t i = 0; i < nlat && rc == 0; i++) {
			uint64_t t0 = probe_now_ns();
			rc = post_send(&r, pp->ping_size, IMM_PING);
			if (rc == 0)
				rc = wait_wc(&r, WR_SEND, NULL, &wcst);
			if (rc == 0)
				rc = wait_wc(&r, WR_RECV, NULL, &wcst);
			if (rc == 0)
				rc = post_recv(&r);
			rtt[i] = probe_now_ns() - t0;
		}
		if (rc < 0)
			goto out;
		if (pp->ping_iters)
			lat = probe_latency_json(rtt + WARMUP, pp->ping_iters, pp->ping_size);
		/* Bandwidth: RDMA writes into the peer's buffer for bulk_ms. */
		step = "rdma write bandwidth";
		uint64_t bytes = 0, t0 = probe_now_ns();
		uint64_t stop_at = t0 + (uint64_t)pp->bulk_ms * 1000000ull;
		unsigned posted = 0, done_writes = 0, signaled_done = 0;
		unsigned slots = remote.buf_len / BW_MSG ? remote.buf_len / BW_MSG : 1;
		while (rc == 0 && pp->bulk_ms) {
			bool more = probe_now_ns() < stop_at;
			/* Keep BW_DEPTH writes in flight while time remains. */
			/* After the time is up, post up to the next signaled write
			 * so every write is accounted for. */
			while ((more || posted % BW_SIGNAL) &&
			       posted - signaled_done * BW_SIGNAL < BW_DEPTH) {
				struct ibv_sge sge = {(uintptr_t)r.buf, BW_MSG, r.mr->lkey};
				struct ibv_send_wr wr, *bad;
				memset(&wr, 0, sizeof wr);
				wr.wr_id = WR_WRITE;
				wr.sg_list = &sge;
				wr.num_sge = 1;
				wr.opcode = IBV_WR_RDMA_WRITE;
				wr.send_flags = (posted + 1) % BW_SIGNAL == 0 ? IBV_SEND_SIGNALED : 0;
				wr.wr.rdma.remote_addr = remote.addr + (uint64_t)(posted % slots) * BW_MSG;
				wr.wr.rdma.rkey = remote.rkey;
				if (ibv_post_send(r.qp, &wr, &bad)) {
					rc = -EIO;
					break;
				}
				posted++;
			}
			if (rc < 0)
				break;
			unsigned before = done_writes;
			struct ibv_wc wc[16];
			/* Only writes are in flight here (the last RECV is posted,
			 * no SEND outstanding). */
			int n = ibv_poll_cq(r.cq, 16, wc);
			if (n < 0) {
				rc = -EIO;
				break;
			}
			for (int i = 0; i < n; i++) {
				if (wc[i].status != IBV_WC_SUCCESS) {
					/* The first failure is the cause; the writes queued
					 * behind it come back flushed (IBV_WC_WR_FLUSH_ERR). */
					if (wcst < 0)
						wcst = wc[i].status;
					rc = -EIO;
				} else if (wc[i].wr_id == WR_WRITE) {
					done_writes++;
				}
			}
			signaled_done = done_writes;
			if (done_writes != before)
				bytes = (uint64_t)done_writes * BW_SIGNAL * BW_MSG;
			/* Done when time is up and every signaled write came back. */
			if (!more && posted % BW_SIGNAL == 0 && signaled_done * BW_SIGNAL >= posted)
				break;
			if (probe_now_ns() > stop_at + (uint64_t)r.timeout_ms * 1000000ull) {
				rc = -ETIMEDOUT;
				break;
			}
		}
		uint64_t ns = probe_now_ns() - t0;
		if (rc < 0)
			goto out;
		/* Tell the server we are done; it answers so both ends agree. */
		step = "finish";
		rc = post_send(&r, 4, IMM_DONE);
		if (rc == 0)
			rc = wait_wc(&r, WR_SEND, NULL, &wcst);
		if (rc == 0)
			rc = wait_wc(&r, WR_RECV, NULL, &wcst);
		if (rc < 0)
			goto out;
		double g = ns ? (double)bytes * 8 / (double)ns : 0;
		bw = json_pack("{s:f, s:n, s:f, s:f, s:i}", "to_peer_gbps", g, "from_peer_gbps", "gbps", g,
			       "seconds", (double)ns / 1e9, "streams", 1);
	} else {
		/* Echo every ping; stop after the client's DONE (echoed too). */
		step = "serve";
		for (;;) {
			uint32_t imm = 0;
			uint64_t dl_save = r.timeout_ms;
			r.timeout_ms = (unsigned)(dl_save + pp->bulk_ms);
			rc = wait_wc(&r, WR_RECV, &imm, &wcst);
			r.timeout_ms = (unsigned)dl_save;
			if (rc == 0)
				rc = post_recv(&r);
			if (rc == 0)
				rc = post_send(&r, imm == IMM_DONE ? 4 : pp->ping_size, imm);
			if (rc == 0)
				rc = wait_wc(&r, WR_SEND, NULL, &wcst);
			if (rc < 0 || imm == IMM_DONE)
				break;
		}
		if (rc < 0)
			goto out;
	}
out:;
	json_t *mtu = json_pack("{s:i, s:o, s:o, s:b, s:s}", "local_mtu", local.mtu, "peer_mtu",
				remote.mtu ? json_integer(remote.mtu) : json_null(), "largest_ok",
				rc == 0 && remote.mtu ? json_integer(local.mtu < remote.mtu ? local.mtu
											   : remote.mtu)
						      : json_null(),
				"ok", rc == 0 && remote.mtu == local.mtu, "method",
				"RoCE active MTU of both ends; RC traffic at the local MTU");
	if (rc < 0) {
		/* Once the endpoints are exchanged both MTUs are known: when they differ
		 * that is the finding, whatever status the failure came back with (a
		 * retry timeout where big packets are dropped, a remote invalid request
		 * or a length error where they arrive, then flushed work requests). */
		bool mtu_differs = remote.mtu && remote.mtu != local.mtu;
		char why[64] = "";
		if (mtu_differs)
			snprintf(why, sizeof why, " (RoCE MTU %u here, %u on the peer)", local.mtu,
				 remote.mtu);
		if (!err[0] || wcst >= 0)
			snprintf(err, errlen, "rdma probe on %s (%s): %s: %s%s", o->netdev ? o->netdev : "?",
				 o->ibdev, step, wcst >= 0 ? wc_name(wcst) : strerror(-rc), why);
		else if (mtu_differs && strlen(err) + strlen(why) < errlen)
			strcat(err, why);
		*result = probe_error_result("rdma", role, o->netdev, err);
		json_object_set_new(*result, "mtu", mtu);
		if (mtu_differs) {
			/* probe_judge names the peer; on an error result it is its GID */
			char gid[40];
			for (int i = 0; i < 16; i++)
				snprintf(gid + 2 * i, 3, "%02x", remote.gid[i]);
			json_object_set_new(*result, "peer", json_string(gid));
			probe_judge(*result, "rdma", &o->thresholds);
		}
		json_decref(lat);
		json_decref(bw);
		free(rtt);
		rctx_close(&r);
		return rc;
	}
	char gid[40];
	for (int i = 0; i < 16; i++)
		snprintf(gid + 2 * i, 3, "%02x", remote.gid[i]);
	json_t *res = json_pack("{s:s, s:s, s:o, s:s, s:s, s:o, s:o, s:o}", "transport", "rdma", "role",
				role, "netdev", o->netdev ? json_string(o->netdev) : json_null(), "local",
				o->ibdev, "peer", gid, "latency", lat ? lat : json_null(), "bandwidth",
				bw ? bw : json_null(), "mtu", mtu);
	json_object_set_new(res, "gid_index", json_integer(o->gid_index));
	if (!o->server)
		probe_judge(res, "rdma", &o->thresholds);
	free(rtt);
	rctx_close(&r);
	*result = res;
	return 0;
}

json_t *topo_rdma_endpoint_to_json(const struct topo_rdma_endpoint *e)
{
	char gid[33], addr[24];
	for (int i = 0; i < 16; i++)
		snprintf(gid + 2 * i, 3, "%02x", e->gid[i]);
	snprintf(addr, sizeof addr, "%llx", (unsigned long long)e->addr);
	return json_pack("{s:I, s:I, s:I, s:s, s:I, s:I, s:s}", "qpn", (json_int_t)e->qpn, "psn",
			 (json_int_t)e->psn, "rkey", (json_int_t)e->rkey, "addr", addr, "buf_len",
			 (json_int_t)e->buf_len, "mtu", (json_int_t)e->mtu, "gid", gid);
}

static int get_u32(json_t *j, const char *k, uint32_t *out)
{
	json_t *v = json_object_get(j, k);
	if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 0xffffffffLL)
		return -EINVAL;
	*out = (uint32_t)json_integer_value(v);
	return 0;
}

int topo_rdma_endpoint_from_json(json_t *j, struct topo_rdma_endpoint *e)
{
	memset(e, 0, sizeof *e);
	const char *gid = json_string_value(json_object_get(j, "gid"));
	const char *addr = json_string_value(json_object_get(j, "addr"));
	if (get_u32(j, "qpn", &e->qpn) || get_u32(j, "psn", &e->psn) || get_u32(j, "rkey", &e->rkey) ||
	    get_u32(j, "buf_len", &e->buf_len) || get_u32(j, "mtu", &e->mtu) || !gid ||
	    strlen(gid) != 32 || !addr || !*addr || strlen(addr) > 16)
		return -EINVAL;
	if (e->qpn > 0xffffff || e->psn > 0xffffff)
		return -EINVAL;
	for (int i = 0; i < 16; i++) {
		unsigned v;
		char h[3] = {gid[2 * i], gid[2 * i + 1], 0};
		if (!strchr("0123456789abcdefABCDEF", h[0]) || !strchr("0123456789abcdefABCDEF", h[1]) ||
		    sscanf(h, "%2x", &v) != 1)
			return -EINVAL;
		e->gid[i] = (uint8_t)v;
	}
	char *end = NULL;
	for (const char *p = addr; *p; p++)
		if (!strchr("0123456789abcdefABCDEF", *p))
			return -EINVAL;
	e->addr = strtoull(addr, &end, 16);
	return 0;
}

const char *topo_probe_pick_transport(json_t *local_twin, json_t *peer_twin)
{
	json_t *tw[2] = {local_twin, peer_twin};
	for (int i = 0; i < 2; i++) {
		json_t *r = json_object_get(tw[i], "rdma");
		const char *st = json_string_value(json_object_get(r, "state"));
		if (!json_is_string(json_object_get(r, "device")) ||
		    !json_is_integer(json_object_get(r, "rocev2_gid_index")) || !st ||
		    strcmp(st, "active") != 0)
			return "tcp";
	}
	return "rdma";
}

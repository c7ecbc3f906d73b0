/* l2disc: AF_PACKET neighbour discovery in a libuv loop (see l2disc.h). */
#include "topology/l2disc.h"
#include "topology/l2frame.h"

#include "common/log.h"
#include "common/util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

#define L2_MAX_NBRS 128 /* per netdev; 8 nodes x 2 ports x 2 twins = 32 */
#define L2_MAX_OTHER 4

struct nbr {
	struct nbr *next;
	char node_id[TOPO_L2_MAX_ID + 1];
	char node_name[TOPO_L2_MAX_NAME + 1];
	char port[TOPO_L2_MAX_PORT + 1];
	char netdev[TOPO_L2_MAX_NETDEV + 1];
	unsigned twin;
	uint32_t mtu;
	uint8_t mac[6];
	uint64_t first_ms, last_ms, frames, lost, last_seq;
	bool self;
};

struct counters {
	uint64_t bad_hmac, other_cluster, malformed, not_ours, table_full;
};

struct l2if {
	struct topo_l2disc *d;
	char netdev[IFNAMSIZ];
	char port[TOPO_L2_MAX_PORT + 1];
	unsigned twin;
	int fd;
	int ifindex;
	uv_poll_t *poll; /* heap: freed by its own close callback */
	uint8_t mac[6];
	uint32_t mtu;
	char error[128];
	uint64_t tx_frames, tx_errors, rx_frames;
	struct counters drop;
	uint64_t own_twin, outgoing, otherhost;
	char other[L2_MAX_OTHER][TOPO_L2_MAX_ID + 1];
	size_t n_other;
	bool bad_from_set;
	char bad_from_name[TOPO_L2_MAX_NAME + 1];
	uint8_t bad_from_mac[6];
	/* the last sender of frames that are not ours (another discovery tool) */
	bool foreign_set;
	uint8_t foreign_mac[6];
	const char *foreign_tool; /* static string */
	uint64_t foreign_frames;
	struct nbr *nbrs;
	size_t n_nbrs;
};

struct topo_l2disc {
	uv_loop_t *loop;
	uv_timer_t timer;
	struct topo_l2key key;
	char cluster_id[TOPO_L2_MAX_ID + 1];
	char node_id[TOPO_L2_MAX_ID + 1];
	char node_name[TOPO_L2_MAX_NAME + 1];
	unsigned fast_interval_ms, fast_period_ms, interval_ms, expiry_ms;
	uint64_t started_ms, fast_until_ms, seq;
	struct l2if *ifs;
	size_t n_ifs;
};

void topo_l2disc_opts_init(struct topo_l2disc_opts *o)
{
	memset(o, 0, sizeof *o);
	o->fast_interval_ms = 200;
	o->fast_period_ms = 3000;
	o->interval_ms = 1000;
	o->expiry_ms = 5000;
}

int topo_l2disc_ifs_from_discovery(json_t *disc, struct topo_l2disc_if **ifs, size_t *n)
{
	json_t *ports = json_object_get(disc, "ports");
	if (!json_is_array(ports) || !ifs || !n)
		return -EINVAL;
	size_t cap = 0, cnt = 0, i, j;
	json_t *p, *t;
	json_array_foreach(ports, i, p) cap += json_array_size(json_object_get(p, "twins"));
	struct topo_l2disc_if *a = calloc(cap ? cap : 1, sizeof *a);
	if (!a)
		return -ENOMEM;
	json_array_foreach(ports, i, p) {
		const char *pn = json_string_value(json_object_get(p, "name"));
		json_array_foreach(json_object_get(p, "twins"), j, t) {
			const char *nd = json_string_value(json_object_get(t, "netdev"));
			if (!pn || !nd)
				continue;
			a[cnt].netdev = nd;
			a[cnt].port = pn;
			a[cnt].twin = (unsigned)j;
			cnt++;
		}
	}
	*ifs = a;
	*n = cnt;
	return 0;
}

static void poll_freed(uv_handle_t *h) { free(h); }

static void if_close(struct l2if *f)
{
	if (f->poll) {
		uv_poll_stop(f->poll);
		uv_close((uv_handle_t *)f->poll, poll_freed);
		f->poll = NULL;
	}
	if (f->fd >= 0)
		close(f->fd);
	f->fd = -1;
	f->ifindex = 0;
}

/* MAC and MTU of the netdev as the kernel has them now. */
static int if_refresh(struct l2if *f)
{
	struct ifreq ifr;
	memset(&ifr, 0, sizeof ifr);
	util_strlcpy(ifr.ifr_name, f->netdev, sizeof ifr.ifr_name);
	if (ioctl(f->fd, SIOCGIFHWADDR, &ifr) < 0)
		return -errno;
	memcpy(f->mac, ifr.ifr_hwaddr.sa_data, 6);
	memset(&ifr, 0, sizeof ifr);
	util_strlcpy(ifr.ifr_name, f->netdev, sizeof ifr.ifr_name);
	if (ioctl(f->fd, SIOCGIFMTU, &ifr) < 0)
		return -errno;
	f->mtu = (uint32_t)ifr.ifr_mtu;
	return 0;
}

static void on_readable(uv_poll_t *h, int status, int events);

static int if_open(struct l2if *f)
{
	unsigned idx = if_nametoindex(f->netdev);
	if (idx == 0) {
		snprintf(f->error, sizeof f->error, "no such netdev");
		return -ENODEV;
	}
	/* Protocol 0 first: nothing is queued before the bind picks the netdev. */
	int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		int e = errno;
		snprintf(f->error, sizeof f->error, "socket: %s", strerror(e));
		return -e;
	}
	int one = 1;
	(void)setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
	struct sockaddr_ll sll;
	memset(&sll, 0, sizeof sll);
	sll.sll_family = AF_PACKET;
	sll.sll_protocol = htons(TOPO_L2_ETHERTYPE);
	sll.sll_ifindex = (int)idx;
	if (bind(fd, (struct sockaddr *)&sll, sizeof sll) < 0) {
		int e = errno;
		snprintf(f->error, sizeof f->error, "bind: %s", strerror(e));
		close(fd);
		return -e;
	}
	f->fd = fd;
	f->ifindex = (int)idx;
	int r = if_refresh(f);
	if (r < 0) {
		snprintf(f->error, sizeof f->error, "ioctl: %s", strerror(-r));
		if_close(f);
		return r;
	}
	f->poll = malloc(sizeof *f->poll);
	if (!f->poll || uv_poll_init(f->d->loop, f->poll, fd) < 0) {
		free(f->poll);
		f->poll = NULL;
		snprintf(f->error, sizeof f->error, "uv_poll_init failed");
		if_close(f);
		return -ENOMEM;
	}
	f->poll->data = f;
	uv_poll_start(f->poll, UV_READABLE, on_readable);
	f->error[0] = '\0';
	log_debug("l2disc_open", "netdev=%s ifindex=%u mtu=%u", f->netdev, idx, f->mtu);
	return 0;
}

static struct nbr *nbr_find(struct l2if *f, const struct topo_l2frame *fr)
{
	for (struct nbr *n = f->nbrs; n; n = n->next)
		if (strcmp(n->node_id, fr->node_id) == 0 && strcmp(n->netdev, fr->netdev) == 0 &&
		    strcmp(n->port, fr->port) == 0 && n->twin == fr->twin)
			return n;
	return NULL;
}

static void heard(struct l2if *f, const struct topo_l2frame *fr, bool self, uint64_t now)
{
	struct nbr *n = nbr_find(f, fr);
	if (!n) {
		if (f->n_nbrs >= L2_MAX_NBRS) {
			f->drop.table_full++;
			return;
		}
		n = calloc(1, sizeof *n);
		if (!n) {
			f->drop.table_full++;
			return;
		}
		util_strlcpy(n->node_id, fr->node_id, sizeof n->node_id);
		util_strlcpy(n->port, fr->port, sizeof n->port);
		util_strlcpy(n->netdev, fr->netdev, sizeof n->netdev);
		n->twin = fr->twin;
		n->first_ms = now;
		n->last_seq = fr->seq;
		n->next = f->nbrs;
		f->nbrs = n;
		f->n_nbrs++;
		log_info("l2disc_neighbour", "netdev=%s node=%s port=%s twin=%u peer_netdev=%s", f->netdev,
			 log_q(fr->node_name), fr->port, fr->twin, fr->netdev);
	} else if (fr->seq > n->last_seq) {
		n->lost += fr->seq - n->last_seq - 1;
		n->last_seq = fr->seq;
	} else {
		n->last_seq = fr->seq; /* the sender restarted its sequence */
	}
	util_strlcpy(n->node_name, fr->node_name, sizeof n->node_name);
	n->mtu = fr->mtu;
	memcpy(n->mac, fr->src_mac, 6);
	n->self = self;
	n->last_ms = now;
	n->frames++;
}

static void note_other_cluster(struct l2if *f, const char *id)
{
	for (size_t i = 0; i < f->n_other; i++)
		if (strcmp(f->other[i], id) == 0)
			return;
	if (f->n_other < L2_MAX_OTHER)
		util_strlcpy(f->other[f->n_other++], id, sizeof f->other[0]);
}

static void handle_frame(struct l2if *f, const uint8_t *buf, size_t len, uint64_t now)
{
	struct topo_l2disc *d = f->d;
	struct topo_l2frame fr;
	int r = topo_l2frame_decode(buf, len, d->cluster_id, &d->key, &fr);
	switch (r) {
	case 0:
		break;
	case TOPO_L2_EOTHERCLUSTER:
		f->drop.other_cluster++;
		note_other_cluster(f, fr.cluster_id);
		return;
	case TOPO_L2_EBADHMAC:
		f->drop.bad_hmac++;
		f->bad_from_set = true;
		util_strlcpy(f->bad_from_name, fr.node_name, sizeof f->bad_from_name);
		memcpy(f->bad_from_mac, fr.src_mac, 6);
		return;
	case TOPO_L2_ENOTOURS:
		f->drop.not_ours++;
		if (len >= 14) {
			/* NVIDIA's detection script sends 0x88B5 frames too (42 bytes, the
			 * text TOPO_DISCOVER_2NODE_V2); it rewrites netplan where it runs. */
			f->foreign_set = true;
			f->foreign_frames++;
			memcpy(f->foreign_mac, buf + 6, 6);
			f->foreign_tool = memmem(buf + 14, len - 14, "TOPO_DISCOVER", 13)
					      ? "nvidia_topo_discover"
					      : "unknown";
		}
		return;
	default:
		f->drop.malformed++;
		return;
	}
	f->rx_frames++;
	bool self = strcmp(fr.node_id, d->node_id) == 0;
	if (self && strcmp(fr.port, f->port) == 0) {
		f->own_twin++;
		return;
	}
	heard(f, &fr, self, now);
}

static void on_readable(uv_poll_t *h, int status, int events)
{
	struct l2if *f = h->data;
	(void)events;
	if (status < 0) {
		/* libuv stops a poll handle on POLLERR, which a packet socket raises
		 * when its netdev goes down (ENETDOWN) or away: reopen on the next tick,
		 * or nothing would be received after the link comes back. */
		snprintf(f->error, sizeof f->error, "poll: %s", uv_strerror(status));
		if_close(f);
		return;
	}
	uint8_t buf[2048];
	uint64_t now = util_now_ms();
	for (int i = 0; i < 256 && f->fd >= 0; i++) {
		struct sockaddr_ll sll;
		socklen_t sl = sizeof sll;
		ssize_t n = recvfrom(f->fd, buf, sizeof buf, MSG_DONTWAIT | MSG_TRUNC,
				     (struct sockaddr *)&sll, &sl);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == ENETDOWN || errno == ENXIO || errno == ENODEV) {
				snprintf(f->error, sizeof f->error, "recv: %s", strerror(errno));
				if (errno != ENETDOWN)
					if_close(f);
			}
			return;
		}
		if (sll.sll_pkttype == PACKET_OUTGOING) {
			f->outgoing++;
			continue;
		}
		if (sll.sll_pkttype == PACKET_OTHERHOST) {
			f->otherhost++;
			continue;
		}
		if ((size_t)n > sizeof buf) {
			f->drop.malformed++; /* larger than any frame of ours */
			continue;
		}
		handle_frame(f, buf, (size_t)n, now);
	}
}

static void if_send(struct topo_l2disc *d, struct l2if *f)
{
	int r = if_refresh(f);
	if (r < 0) {
		if (r == -ENODEV || r == -ENXIO) {
			snprintf(f->error, sizeof f->error, "netdev gone");
			if_close(f);
		}
		f->tx_errors++;
		return;
	}
	struct topo_l2frame fr;
	memset(&fr, 0, sizeof fr);
	memcpy(fr.src_mac, f->mac, 6);
	fr.seq = d->seq;
	util_strlcpy(fr.cluster_id, d->cluster_id, sizeof fr.cluster_id);
	util_strlcpy(fr.node_id, d->node_id, sizeof fr.node_id);
	util_strlcpy(fr.node_name, d->node_name, sizeof fr.node_name);
	util_strlcpy(fr.port, f->port, sizeof fr.port);
	util_strlcpy(fr.netdev, f->netdev, sizeof fr.netdev);
	fr.twin = f->twin;
	fr.mtu = f->mtu;
	uint8_t buf[TOPO_L2_MAX_FRAME];
	size_t len = 0;
	if (topo_l2frame_encode(&fr, &d->key, buf, sizeof buf, &len) < 0) {
		f->tx_errors++;
		return;
	}
	if (send(f->fd, buf, len, MSG_DONTWAIT) < 0) {
		int e = errno;
		f->tx_errors++;
		snprintf(f->error, sizeof f->error, "send: %s", strerror(e));
		if (e == ENXIO || e == ENODEV)
			if_close(f);
		return;
	}
	f->error[0] = '\0';
	f->tx_frames++;
}

static void expire(struct topo_l2disc *d, struct l2if *f, uint64_t now)
{
	struct nbr **pp = &f->nbrs;
	while (*pp) {
		struct nbr *n = *pp;
		if (now - n->last_ms > d->expiry_ms) {
			log_info("l2disc_neighbour_lost", "netdev=%s node=%s port=%s twin=%u", f->netdev,
				 log_q(n->node_name), n->port, n->twin);
			*pp = n->next;
			free(n);
			f->n_nbrs--;
		} else {
			pp = &n->next;
		}
	}
}

static void on_tick(uv_timer_t *t)
{
	struct topo_l2disc *d = t->data;
	uint64_t now = util_now_ms();
	d->seq++;
	for (size_t i = 0; i < d->n_ifs; i++) {
		struct l2if *f = &d->ifs[i];
		if (f->fd < 0 && if_open(f) < 0) {
			expire(d, f, now);
			continue;
		}
		if_send(d, f);
		expire(d, f, now);
	}
	unsigned next = now < d->fast_until_ms ? d->fast_interval_ms : d->interval_ms;
	uv_timer_start(&d->timer, on_tick, next, 0);
}

static int copy_id(char *dst, size_t size, const char *src, const char *what, char *err,
		   size_t errlen)
{
	if (!src || !*src || strlen(src) >= size) {
		snprintf(err, errlen, "l2disc: %s missing or longer than %zu", what, size - 1);
		return -EINVAL;
	}
	for (const char *p = src; *p; p++)
		if ((unsigned char)*p < 0x21 || (unsigned char)*p > 0x7e) {
			snprintf(err, errlen, "l2disc: %s has a space or a non-ASCII byte", what);
			return -EINVAL;
		}
	util_strlcpy(dst, src, size);
	return 0;
}

int topo_l2disc_start(uv_loop_t *loop, const struct topo_l2disc_opts *o, struct topo_l2disc **out,
		      char *err, size_t errlen)
{
	char dummy[8];
	if (!err) {
		err = dummy;
		errlen = sizeof dummy;
	}
	err[0] = '\0';
	if (!loop || !o || !out) {
		snprintf(err, errlen, "l2disc: bad arguments");
		return -EINVAL;
	}
	if (!o->secret || !*o->secret) {
		snprintf(err, errlen, "l2disc: no cluster secret (join the cluster first)");
		return -EINVAL;
	}
	if (o->n_ifs == 0 || !o->ifs) {
		snprintf(err, errlen, "l2disc: no fabric netdevs");
		return -EINVAL;
	}
	if (!o->fast_interval_ms || !o->interval_ms || !o->expiry_ms) {
		snprintf(err, errlen, "l2disc: intervals and expiry must be > 0");
		return -EINVAL;
	}
	struct topo_l2disc *d = calloc(1, sizeof *d);
	if (!d)
		return -ENOMEM;
	int r;
	if ((r = copy_id(d->cluster_id, sizeof d->cluster_id, o->cluster_id, "cluster id", err,
			 errlen)) < 0 ||
	    (r = copy_id(d->node_id, sizeof d->node_id, o->node_id, "node id", err, errlen)) < 0 ||
	    (r = copy_id(d->node_name, sizeof d->node_name, o->node_name, "node name", err,
			 errlen)) < 0) {
		free(d);
		return r;
	}
	if (topo_l2key_init(&d->key, o->secret) < 0) {
		snprintf(err, errlen, "l2disc: cannot derive the frame key");
		free(d);
		return -EIO;
	}
	d->ifs = calloc(o->n_ifs, sizeof *d->ifs);
	if (!d->ifs) {
		free(d);
		return -ENOMEM;
	}
	d->n_ifs = o->n_ifs;
	for (size_t i = 0; i < o->n_ifs; i++) {
		struct l2if *f = &d->ifs[i];
		const struct topo_l2disc_if *s = &o->ifs[i];
		f->d = d;
		f->fd = -1;
		char what[48];
		snprintf(what, sizeof what, "interface %zu netdev", i);
		r = copy_id(f->netdev, sizeof f->netdev, s->netdev, what, err, errlen);
		if (r == 0) {
			snprintf(what, sizeof what, "interface %zu port", i);
			r = copy_id(f->port, sizeof f->port, s->port, what, err, errlen);
		}
		if (r == 0 && s->twin > TOPO_L2_MAX_TWIN) {
			snprintf(err, errlen, "l2disc: interface %s twin %u > %d", s->netdev, s->twin,
				 TOPO_L2_MAX_TWIN);
			r = -EINVAL;
		}
		for (size_t j = 0; r == 0 && j < i; j++)
			if (strcmp(d->ifs[j].netdev, f->netdev) == 0) {
				snprintf(err, errlen, "l2disc: netdev %s listed twice", f->netdev);
				r = -EINVAL;
			}
		if (r < 0) {
			free(d->ifs);
			free(d);
			return r;
		}
		f->twin = s->twin;
	}
	d->loop = loop;
	d->fast_interval_ms = o->fast_interval_ms;
	d->fast_period_ms = o->fast_period_ms;
	d->interval_ms = o->interval_ms;
	d->expiry_ms = o->expiry_ms;
	d->started_ms = util_now_ms();
	d->fast_until_ms = d->started_ms + d->fast_period_ms;
	uv_timer_init(loop, &d->timer);
	d->timer.data = d;
	for (size_t i = 0; i < d->n_ifs; i++)
		(void)if_open(&d->ifs[i]);
	/* First frames go out on the loop's next iteration. */
	uv_timer_start(&d->timer, on_tick, 0, 0);
	*out = d;
	return 0;
}

void topo_l2disc_kick(struct topo_l2disc *d)
{
	if (!d)
		return;
	d->fast_until_ms = util_now_ms() + d->fast_period_ms;
	uv_timer_start(&d->timer, on_tick, 0, 0);
}

static void fmt_mac(const uint8_t m[6], char out[18])
{
	snprintf(out, 18, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
}

static json_t *counters_json(const struct counters *c)
{
	return json_pack("{s:I, s:I, s:I, s:I, s:I}", "bad_hmac", (json_int_t)c->bad_hmac,
			 "other_cluster", (json_int_t)c->other_cluster, "malformed",
			 (json_int_t)c->malformed, "not_ours", (json_int_t)c->not_ours, "table_full",
			 (json_int_t)c->table_full);
}

/* Neighbours sorted by (node name, port, twin) so snapshots compare stably. */
static int nbr_cmp(const void *a, const void *b)
{
	const struct nbr *x = *(const struct nbr *const *)a, *y = *(const struct nbr *const *)b;
	int c = strcmp(x->node_name, y->node_name);
	if (!c)
		c = strcmp(x->node_id, y->node_id);
	if (!c)
		c = strcmp(x->port, y->port);
	if (!c)
		c = (int)x->twin - (int)y->twin;
	if (!c)
		c = strcmp(x->netdev, y->netdev);
	return c;
}

json_t *topo_l2disc_snapshot(struct topo_l2disc *d)
{
	if (!d)
		return NULL;
	uint64_t now = util_now_ms();
	struct counters tot = {0};
	json_t *ifs = json_array();
	char mac[18];
	for (size_t i = 0; i < d->n_ifs; i++) {
		struct l2if *f = &d->ifs[i];
		expire(d, f, now);
		json_t *nb = json_array();
		struct nbr *v[L2_MAX_NBRS];
		size_t k = 0;
		for (struct nbr *n = f->nbrs; n && k < L2_MAX_NBRS; n = n->next)
			v[k++] = n;
		qsort(v, k, sizeof v[0], nbr_cmp);
		for (size_t j = 0; j < k; j++) {
			struct nbr *n = v[j];
			fmt_mac(n->mac, mac);
			json_array_append_new(
			    nb, json_pack("{s:s, s:s, s:s, s:i, s:s, s:s, s:i, s:I, s:I, s:I, s:b}",
					  "node_id", n->node_id, "node_name", n->node_name, "port",
					  n->port, "twin", (int)n->twin, "netdev", n->netdev, "mac", mac,
					  "mtu", (int)n->mtu, "frames", (json_int_t)n->frames, "lost",
					  (json_int_t)n->lost, "heard_ms_ago",
					  (json_int_t)(now - n->last_ms), "self", n->self));
		}
		json_t *other = json_array();
		for (size_t j = 0; j < f->n_other; j++)
			json_array_append_new(other, json_string(f->other[j]));
		json_t *bad = json_null();
		if (f->bad_from_set) {
			fmt_mac(f->bad_from_mac, mac);
			bad = json_pack("{s:s, s:s}", "node_name", f->bad_from_name, "mac", mac);
		}
		fmt_mac(f->mac, mac);
		json_t *o = json_pack(
		    "{s:s, s:s, s:i, s:b, s:o, s:s, s:i, s:I, s:I, s:I, s:o, s:o, s:{s:I, s:I, s:I}, "
		    "s:o, s:o}",
		    "netdev", f->netdev, "port", f->port, "twin", (int)f->twin, "open", f->fd >= 0,
		    "error", f->error[0] ? json_string(f->error) : json_null(), "mac", mac, "mtu",
		    (int)f->mtu, "tx_frames", (json_int_t)f->tx_frames, "tx_errors",
		    (json_int_t)f->tx_errors, "rx_frames", (json_int_t)f->rx_frames, "neighbours", nb,
		    "dropped", counters_json(&f->drop), "ignored", "own_twin", (json_int_t)f->own_twin,
		    "outgoing", (json_int_t)f->outgoing, "otherhost", (json_int_t)f->otherhost,
		    "other_clusters", other, "bad_hmac_from", bad);
		if (o && f->foreign_set) {
			fmt_mac(f->foreign_mac, mac);
			json_object_set_new(o, "foreign", json_pack("{s:s, s:s, s:I}", "mac", mac, "tool",
								   f->foreign_tool, "frames",
								   (json_int_t)f->foreign_frames));
		}
		if (o)
			json_array_append_new(ifs, o);
		tot.bad_hmac += f->drop.bad_hmac;
		tot.other_cluster += f->drop.other_cluster;
		tot.malformed += f->drop.malformed;
		tot.not_ours += f->drop.not_ours;
		tot.table_full += f->drop.table_full;
	}
	return json_pack("{s:s, s:s, s:s, s:I, s:i, s:i, s:o, s:o}", "cluster_id", d->cluster_id,
			 "node_id", d->node_id, "node_name", d->node_name, "uptime_ms",
			 (json_int_t)(now - d->started_ms), "interval_ms", (int)d->interval_ms,
			 "expiry_ms", (int)d->expiry_ms, "interfaces", ifs, "dropped",
			 counters_json(&tot));
}

static void timer_closed(uv_handle_t *h)
{
	struct topo_l2disc *d = h->data;
	free(d->ifs);
	free(d);
}

void topo_l2disc_stop(struct topo_l2disc *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < d->n_ifs; i++) {
		struct l2if *f = &d->ifs[i];
		if_close(f);
		while (f->nbrs) {
			struct nbr *n = f->nbrs;
			f->nbrs = n->next;
			free(n);
		}
	}
	uv_timer_stop(&d->timer);
	uv_close((uv_handle_t *)&d->timer, timer_closed);
}

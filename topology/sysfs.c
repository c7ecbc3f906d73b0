/* sysfs readers: netdevs (/sys/class/net), their PCI functions
 * (/sys/bus/pci/devices) and RDMA devices (/sys/class/infiniband), under a
 * root that is "/" on a real machine or a fixture tree in tests. */
#include "topo_internal.h"

#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int topo_sysfs_path(const char *root, const char *rel, char *out, size_t outlen)
{
	if (!root || !*root)
		root = "/";
	size_t rl = strlen(root);
	const char *sep = rl > 0 && root[rl - 1] == '/' ? "" : "/";
	int n = snprintf(out, outlen, "%s%s%s", root, sep, rel);
	if (n < 0 || (size_t)n >= outlen)
		return -ENAMETOOLONG;
	return 0;
}

int topo_sysfs_read(const char *root, const char *rel, char *buf, size_t buflen, size_t *len)
{
	char path[PATH_MAX];
	int r = topo_sysfs_path(root, rel, path, sizeof path);
	if (r < 0)
		return r;
	if (buflen < 2)
		return -EINVAL;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 && errno == ELOOP)
		fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	size_t got = 0;
	for (;;) {
		ssize_t k = read(fd, buf + got, buflen - 1 - got);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			close(fd);
			return r;
		}
		if (k == 0)
			break;
		got += (size_t)k;
		if (got == buflen - 1) {
			char extra;
			ssize_t more = read(fd, &extra, 1);
			close(fd);
			return more > 0 ? -EFBIG : (buf[got] = '\0', *len = got, 0);
		}
	}
	close(fd);
	buf[got] = '\0';
	*len = got;
	return 0;
}

static int cmp_names(const void *a, const void *b)
{
	const char *x = *(const char *const *)a, *y = *(const char *const *)b;
	/* Numeric names ("0".."255", GID indexes, ports) in numeric order. */
	char *ex, *ey;
	long nx = strtol(x, &ex, 10), ny = strtol(y, &ey, 10);
	if (*x && *y && !*ex && !*ey)
		return nx < ny ? -1 : nx > ny;
	return strcmp(x, y);
}

int topo_sysfs_list(const char *root, const char *rel, char ***names, size_t *n)
{
	char path[PATH_MAX];
	int r = topo_sysfs_path(root, rel, path, sizeof path);
	if (r < 0)
		return r;
	DIR *d = opendir(path);
	if (!d)
		return -errno;
	size_t cap = 16, cnt = 0;
	char **v = malloc(cap * sizeof *v);
	if (!v) {
		closedir(d);
		return -ENOMEM;
	}
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if (cnt == 4096) /* no sysfs directory we read is this large */
			break;
		if (cnt == cap) {
			char **nv = realloc(v, 2 * cap * sizeof *v);
			if (!nv)
				break;
			v = nv;
			cap *= 2;
		}
		v[cnt] = strdup(e->d_name);
		if (v[cnt])
			cnt++;
	}
	closedir(d);
	qsort(v, cnt, sizeof *v, cmp_names);
	*names = v;
	*n = cnt;
	return 0;
}

void topo_free_names(char **names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

int topo_sysfs_link(const char *root, const char *rel, char *out, size_t outlen)
{
	char path[PATH_MAX];
	int r = topo_sysfs_path(root, rel, path, sizeof path);
	if (r < 0)
		return r;
	ssize_t k = readlink(path, out, outlen - 1);
	if (k < 0)
		return -errno;
	if ((size_t)k >= outlen - 1)
		return -ENAMETOOLONG;
	out[k] = '\0';
	return 0;
}

int topo_sysfs_link_base(const char *root, const char *rel, char *out, size_t outlen)
{
	char t[PATH_MAX];
	int r = topo_sysfs_link(root, rel, t, sizeof t);
	if (r < 0)
		return r;
	const char *b = strrchr(t, '/');
	b = b ? b + 1 : t;
	if (!*b || util_strlcpy(out, b, outlen) >= outlen)
		return -EINVAL;
	return 0;
}

/* Read root/fmt... and return its text (trimmed by the parsers). */
static int readf(const char *root, char *buf, size_t buflen, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int readf(const char *root, char *buf, size_t buflen, size_t *len, const char *fmt, ...)
{
	char rel[PATH_MAX];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(rel, sizeof rel, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof rel)
		return -ENAMETOOLONG;
	return topo_sysfs_read(root, rel, buf, buflen, len);
}

static int read_long(const char *root, long min, long max, long *out, const char *rel)
{
	char b[TOPO_VAL_MAX + 2];
	size_t len;
	if (topo_sysfs_read(root, rel, b, sizeof b, &len) < 0)
		return -ENOENT;
	return topo_parse_long(b, len, min, max, out);
}

void topo_nd_init(struct topo_nd *nd)
{
	memset(nd, 0, sizeof *nd);
	nd->ifindex = nd->mtu = nd->speed = nd->vendor = nd->device = -1;
	nd->cur_width = nd->max_width = -1;
	nd->carrier = -1;
	nd->admin_up = -1;
	nd->phys_port = -1;
	nd->ipv4 = json_array();
	nd->ipv6 = json_array();
}

void topo_nds_free(struct topo_nd *nd, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		json_decref(nd[i].ipv4);
		json_decref(nd[i].ipv6);
	}
	free(nd);
}

/* Facts both netlink and sysfs know; read from sysfs in netlink-free mode. */
static void netdev_basics(const char *root, struct topo_nd *nd)
{
	char rel[96], b[TOPO_VAL_MAX + 2];
	size_t len;
	long v;
	snprintf(rel, sizeof rel, "sys/class/net/%s/ifindex", nd->name);
	if (read_long(root, 1, 0x7fffffffL, &v, rel) == 0) {
		nd->ifindex = v;
		nd->src_ifindex = TOPO_SRC_SYSFS;
	}
	if (readf(root, b, sizeof b, &len, "sys/class/net/%s/address", nd->name) == 0 &&
	    topo_parse_mac(b, len, nd->mac, sizeof nd->mac) == 0)
		nd->src_mac = TOPO_SRC_SYSFS;
	snprintf(rel, sizeof rel, "sys/class/net/%s/mtu", nd->name);
	if (read_long(root, 0, 0x7fffffffL, &v, rel) == 0) {
		nd->mtu = v;
		nd->src_mtu = TOPO_SRC_SYSFS;
	}
	if (readf(root, b, sizeof b, &len, "sys/class/net/%s/operstate", nd->name) == 0 &&
	    topo_parse_operstate(b, len, nd->operstate, sizeof nd->operstate) == 0)
		nd->src_oper = TOPO_SRC_SYSFS;
	/* carrier cannot be read (EINVAL) while the netdev is administratively down. */
	snprintf(rel, sizeof rel, "sys/class/net/%s/carrier", nd->name);
	if (read_long(root, 0, 1, &v, rel) == 0) {
		nd->carrier = (int)v;
		nd->admin_up = 1; /* carrier reads only while the netdev is up */
		nd->src_carrier = TOPO_SRC_SYSFS;
	} else if (strcmp(nd->operstate, "down") == 0) {
		nd->carrier = 0;
		nd->admin_up = 0; /* the kernel refuses to read carrier only while down */
		nd->src_carrier = TOPO_SRC_SYSFS;
	}
}

int topo_sysfs_netdevs(const char *root, struct topo_nd **out, size_t *n)
{
	char **names;
	size_t cnt;
	int r = topo_sysfs_list(root, "sys/class/net", &names, &cnt);
	if (r < 0)
		return r;
	struct topo_nd *v = calloc(cnt ? cnt : 1, sizeof *v);
	if (!v) {
		topo_free_names(names, cnt);
		return -ENOMEM;
	}
	size_t k = 0;
	for (size_t i = 0; i < cnt; i++) {
		char ifn[16];
		if (topo_parse_ifname(names[i], strlen(names[i]), ifn, sizeof ifn) < 0 ||
		    strcmp(ifn, names[i]) != 0)
			continue;
		/* bonding_masters is a file, not a netdev. */
		char rel[96], b[8];
		size_t len;
		snprintf(rel, sizeof rel, "sys/class/net/%s/ifindex", ifn);
		if (topo_sysfs_read(root, rel, b, sizeof b, &len) < 0)
			continue;
		topo_nd_init(&v[k]);
		util_strlcpy(v[k].name, ifn, sizeof v[k].name);
		netdev_basics(root, &v[k]);
		k++;
	}
	topo_free_names(names, cnt);
	*out = v;
	*n = k;
	return 0;
}

void topo_sysfs_netdev_extras(const char *root, struct topo_nd *nd, bool check_ifindex)
{
	char rel[128], b[TOPO_VAL_MAX + 2], t[PATH_MAX];
	size_t len;
	long v;
	snprintf(rel, sizeof rel, "sys/class/net/%s", nd->name);
	if (topo_sysfs_link(root, rel, t, sizeof t) < 0)
		return;
	if (check_ifindex) {
		snprintf(rel, sizeof rel, "sys/class/net/%s/ifindex", nd->name);
		if (read_long(root, 1, 0x7fffffffL, &v, rel) < 0 || v != nd->ifindex)
			return;
	}
	nd->sysfs_ok = true;
	nd->is_virtual = strstr(t, "/devices/virtual/") != NULL;
	/* speed: Mb/s; -1 (SPEED_UNKNOWN) without link, EINVAL while admin down. */
	snprintf(rel, sizeof rel, "sys/class/net/%s/speed", nd->name);
	if (read_long(root, -1, 0x7fffffffL, &v, rel) == 0)
		nd->speed = v > 0 ? v : -1;
	nd->src_speed = TOPO_SRC_SYSFS;
	if (readf(root, b, sizeof b, &len, "sys/class/net/%s/phys_port_name", nd->name) == 0) {
		int p;
		if (topo_parse_phys_port(b, len, &p) == 0)
			nd->phys_port = p;
	}
	snprintf(rel, sizeof rel, "sys/class/net/%s/device/driver", nd->name);
	if (topo_sysfs_link_base(root, rel, nd->driver, sizeof nd->driver) == 0)
		nd->src_driver = TOPO_SRC_SYSFS;
	char addr[64];
	snprintf(rel, sizeof rel, "sys/class/net/%s/device", nd->name);
	if (topo_sysfs_link_base(root, rel, addr, sizeof addr) < 0)
		return;
	nd->has_device = true;
	if (topo_parse_pci_addr(addr, strlen(addr), &nd->pa) < 0)
		return; /* not on PCI directly (virtio, USB...) */
	/* The same function as the kernel lists it on the PCI bus. */
	snprintf(rel, sizeof rel, "sys/bus/pci/devices/%s/vendor", addr);
	if (topo_sysfs_read(root, rel, b, sizeof b, &len) < 0)
		return;
	nd->has_pci = true;
	util_strlcpy(nd->pci, addr, sizeof nd->pci);
	nd->src_pci = TOPO_SRC_SYSFS;
	unsigned long h;
	if (topo_parse_hex(b, len, 0xffff, &h) == 0)
		nd->vendor = (long)h;
	if (readf(root, b, sizeof b, &len, "sys/bus/pci/devices/%s/device", addr) == 0 &&
	    topo_parse_hex(b, len, 0xffff, &h) == 0)
		nd->device = (long)h;
	snprintf(rel, sizeof rel, "sys/bus/pci/devices/%s/current_link_width", addr);
	if (read_long(root, 0, 64, &v, rel) == 0)
		nd->cur_width = v;
	snprintf(rel, sizeof rel, "sys/bus/pci/devices/%s/max_link_width", addr);
	if (read_long(root, 0, 64, &v, rel) == 0)
		nd->max_width = v;
	if (readf(root, b, sizeof b, &len, "sys/bus/pci/devices/%s/current_link_speed", addr) == 0)
		topo_parse_pcie_speed(b, len, &nd->cur_gen, nd->cur_speed, sizeof nd->cur_speed);
	if (readf(root, b, sizeof b, &len, "sys/bus/pci/devices/%s/max_link_speed", addr) == 0)
		topo_parse_pcie_speed(b, len, &nd->max_gen, nd->max_speed, sizeof nd->max_speed);
}

void topo_ibdevs_free(struct topo_ibdev *d, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		for (size_t p = 0; p < d[i].n_ports; p++)
			free(d[i].ports[p].gids);
		free(d[i].ports);
	}
	free(d);
}

static void read_gids(const char *root, const char *dev, struct topo_ibport *port)
{
	char rel[192], b[TOPO_VAL_MAX + 2];
	size_t len;
	char **names;
	size_t cnt;
	port->gids_read = true;
	snprintf(rel, sizeof rel, "sys/class/infiniband/%s/ports/%d/gids", dev, port->num);
	if (topo_sysfs_list(root, rel, &names, &cnt) < 0)
		return;
	port->gids = calloc(cnt ? cnt : 1, sizeof *port->gids);
	if (!port->gids) {
		topo_free_names(names, cnt);
		return;
	}
	for (size_t i = 0; i < cnt; i++) {
		long idx;
		if (topo_parse_long(names[i], strlen(names[i]), 0, 65535, &idx) < 0)
			continue;
		struct topo_gid g = {.index = (int)idx};
		if (readf(root, b, sizeof b, &len, "sys/class/infiniband/%s/ports/%d/gids/%ld", dev,
			  port->num, idx) < 0 ||
		    topo_parse_gid(b, len, g.raw) < 0)
			continue;
		static const uint8_t zero[16];
		if (memcmp(g.raw, zero, 16) == 0)
			continue; /* an empty slot */
		/* types/N and ndevs/N fail to read (EINVAL) on empty slots. */
		if (readf(root, b, sizeof b, &len, "sys/class/infiniband/%s/ports/%d/gid_attrs/types/%ld",
			  dev, port->num, idx) == 0)
			topo_parse_gid_type(b, len, &g.type);
		if (readf(root, b, sizeof b, &len, "sys/class/infiniband/%s/ports/%d/gid_attrs/ndevs/%ld",
			  dev, port->num, idx) == 0)
			topo_parse_ifname(b, len, g.ndev, sizeof g.ndev);
		port->gids[port->n_gids++] = g;
	}
	topo_free_names(names, cnt);
}

void topo_sysfs_ibdev_gids(const char *root, struct topo_ibdev *d)
{
	for (size_t p = 0; p < d->n_ports; p++)
		if (!d->ports[p].gids_read)
			read_gids(root, d->name, &d->ports[p]);
}

static void read_ibport(const char *root, const char *dev, struct topo_ibport *p)
{
	char b[TOPO_VAL_MAX + 2];
	size_t len;
	p->state = p->phys_state = -1;
	p->rate_tenths = -1;
	if (readf(root, b, sizeof b, &len, "sys/class/infiniband/%s/ports/%d/state", dev, p->num) ==
		0 &&
	    topo_parse_ib_state(b, len, &p->state, p->state_w, sizeof p->state_w) < 0)
		p->state = -1;
	if (readf(root, b, sizeof b, &len, "sys/class/infiniband/%s/ports/%d/phys_state", dev,
		  p->num) == 0 &&
	    topo_parse_ib_state(b, len, &p->phys_state, p->phys_state_w, sizeof p->phys_state_w) <
		0)
		p->phys_state = -1;
	if (readf(root, b, sizeof b, &len, "sys/class/infiniband/%s/ports/%d/rate", dev, p->num) ==
	    0) {
		int w;
		if (topo_parse_ib_rate(b, len, &p->rate_tenths, &w, NULL, 0) == 0) {
			while (len > 0 && (b[len - 1] == '\n' || b[len - 1] == ' '))
				b[--len] = '\0';
			util_strlcpy(p->rate, b, sizeof p->rate);
		}
	}
	if (readf(root, b, sizeof b, &len, "sys/class/infiniband/%s/ports/%d/link_layer", dev,
		  p->num) == 0)
		topo_parse_link_layer(b, len, p->link_layer, sizeof p->link_layer);
	/* The port's netdev, from its first GID (a RoCE port's default GID sits at
	 * index 0): enough to match a device without a PCI function (rxe on a veth)
	 * to its netdev without reading the whole table. */
	if (readf(root, b, sizeof b, &len, "sys/class/infiniband/%s/ports/%d/gid_attrs/ndevs/0",
		  dev, p->num) == 0)
		topo_parse_ifname(b, len, p->ndev, sizeof p->ndev);
}

static void trimcpy(char *dst, size_t dstlen, const char *b, size_t len)
{
	while (len > 0 && (b[len - 1] == '\n' || b[len - 1] == ' '))
		len--;
	if (len >= dstlen)
		len = dstlen - 1;
	size_t o = 0;
	for (size_t i = 0; i < len; i++)
		if (b[i] >= 0x20 && b[i] < 0x7f)
			dst[o++] = b[i];
	dst[o] = '\0';
}

int topo_sysfs_ibdevs(const char *root, struct topo_ibdev **out, size_t *n)
{
	char **names;
	size_t cnt;
	*out = NULL;
	*n = 0;
	if (topo_sysfs_list(root, "sys/class/infiniband", &names, &cnt) < 0)
		return 0; /* ib_core not loaded, or no RDMA hardware: not an error */
	struct topo_ibdev *v = calloc(cnt ? cnt : 1, sizeof *v);
	if (!v) {
		topo_free_names(names, cnt);
		return -ENOMEM;
	}
	size_t k = 0;
	for (size_t i = 0; i < cnt; i++) {
		const char *dev = names[i];
		if (strlen(dev) >= sizeof v[k].name || strchr(dev, '/'))
			continue;
		struct topo_ibdev *d = &v[k];
		util_strlcpy(d->name, dev, sizeof d->name);
		d->source = TOPO_SRC_SYSFS;
		char rel[192], b[TOPO_VAL_MAX + 2], addr[64];
		size_t len;
		struct topo_pci_addr pa;
		snprintf(rel, sizeof rel, "sys/class/infiniband/%s/device", dev);
		if (topo_sysfs_link_base(root, rel, addr, sizeof addr) == 0 &&
		    topo_parse_pci_addr(addr, strlen(addr), &pa) == 0) {
			d->has_pci = true;
			util_strlcpy(d->pci, addr, sizeof d->pci);
		}
		if (readf(root, b, sizeof b, &len, "sys/class/infiniband/%s/hca_type", dev) == 0)
			trimcpy(d->hca_type, sizeof d->hca_type, b, len);
		if (readf(root, b, sizeof b, &len, "sys/class/infiniband/%s/fw_ver", dev) == 0)
			trimcpy(d->fw_ver, sizeof d->fw_ver, b, len);
		char **ports;
		size_t np;
		snprintf(rel, sizeof rel, "sys/class/infiniband/%s/ports", dev);
		if (topo_sysfs_list(root, rel, &ports, &np) == 0) {
			d->ports = calloc(np ? np : 1, sizeof *d->ports);
			for (size_t p = 0; d->ports && p < np; p++) {
				long num;
				if (topo_parse_long(ports[p], strlen(ports[p]), 1, 255, &num) < 0)
					continue;
				d->ports[d->n_ports].num = (int)num;
				read_ibport(root, dev, &d->ports[d->n_ports]);
				d->n_ports++;
			}
			topo_free_names(ports, np);
		}
		k++;
	}
	topo_free_names(names, cnt);
	*out = v;
	*n = k;
	return 0;
}

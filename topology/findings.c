/* findings: health checks over a discovery object (pure; the head re-runs
 * them). Each finding says what is wrong in one line and how to fix it in one. */
#include "discover.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NETPLAN "/etc/netplan/40-cx7.yaml"

/* A JSON string even when truncation split a UTF-8 sequence: bytes outside
 * ASCII become '?' then. */
static json_t *jstr(const char *s)
{
	json_t *j = json_string(s);
	if (j)
		return j;
	char b[1024];
	size_t i = 0;
	for (; s[i] && i + 1 < sizeof b; i++)
		b[i] = (unsigned char)s[i] < 0x80 ? s[i] : '?';
	b[i] = '\0';
	return json_string(b);
}

static void add(json_t *arr, const char *code, const char *sev, const char *port,
		const char *netdev, const char *fix, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
static void add(json_t *arr, const char *code, const char *sev, const char *port,
		const char *netdev, const char *fix, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	json_t *f = json_object();
	json_object_set_new(f, "code", json_string(code));
	json_object_set_new(f, "severity", json_string(sev));
	json_object_set_new(f, "port", port ? jstr(port) : json_null());
	json_object_set_new(f, "netdev", netdev ? jstr(netdev) : json_null());
	json_object_set_new(f, "message", jstr(msg));
	json_object_set_new(f, "fix", jstr(fix));
	json_array_append_new(arr, f);
}

static const char *sget(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "";
}

static long iget(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	return json_is_integer(v) ? (long)json_integer_value(v) : -1;
}

static bool is_up(json_t *t) { return json_is_true(json_object_get(t, "carrier")); }
static bool present(json_t *t) { return json_is_true(json_object_get(t, "present")); }

static void check_port(json_t *out, json_t *port, int cluster_mtu)
{
	const char *pn = sget(port, "name");
	json_t *twins = json_object_get(port, "twins");
	size_t i;
	json_t *t;
	const char *up_name = NULL;
	json_array_foreach(twins, i, t) {
		if (is_up(t) && !up_name)
			up_name = sget(t, "netdev");
	}
	char fix[512];
	/* A twin down while its sibling is up: half the port's bandwidth. */
	if (up_name) {
		json_array_foreach(twins, i, t) {
			if (is_up(t))
				continue;
			const char *n = sget(t, "netdev");
			if (!present(t)) {
				snprintf(fix, sizeof fix,
					 "check that %s exists (ip -br link) or correct fabric.ports in the config",
					 n);
				add(out, "twin_down", "warn", pn, n, fix,
				    "%s is absent while its twin %s is up: port %s runs at half bandwidth",
				    n, up_name, pn);
			} else {
				snprintf(fix, sizeof fix,
					 "bring it up (ip link set %s up) and keep it up in " NETPLAN
					 " (netplan apply)",
					 n);
				add(out, "twin_down", "warn", pn, n, fix,
				    "%s is down (operstate %s) while its twin %s is up: port %s runs at half bandwidth",
				    n, *sget(t, "operstate") ? sget(t, "operstate") : "unknown", up_name, pn);
			}
		}
	}
	json_array_foreach(twins, i, t) {
		const char *n = sget(t, "netdev");
		long sp = iget(t, "speed_mbps");
		if (is_up(t) && !json_is_true(json_object_get(t, "virtual")) && sp > 0 &&
		    sp < TOPO_FULL_SPEED_MBPS)
			add(out, "speed_low", "warn", pn, n,
			    "set the link partner to 200G (on a switch, set its port to 200000 Mb/s) and check the cable",
			    "%s links at %ld Mb/s, below %d Mb/s", n, sp, TOPO_FULL_SPEED_MBPS);
	}
	json_array_foreach(twins, i, t) {
		const char *n = sget(t, "netdev");
		json_t *pci = json_object_get(t, "pci");
		long w = iget(pci, "current_link_width");
		if (w > 0 && w < TOPO_MIN_PCIE_WIDTH)
			add(out, "pcie_width_low", "warn", pn, n,
			    "update the DGX Spark BIOS (2026-04 or newer links the second PCIe path at x4), then reboot",
			    "%s's PCIe link %s runs at x%ld instead of x%d: this twin gets half its bandwidth",
			    n, sget(pci, "address"), w, TOPO_MIN_PCIE_WIDTH);
	}
	/* MTU must match between twins: compare each to the largest. */
	long maxmtu = -1;
	const char *maxname = NULL;
	json_array_foreach(twins, i, t) {
		long m = iget(t, "mtu");
		if (present(t) && m > maxmtu) {
			maxmtu = m;
			maxname = sget(t, "netdev");
		}
	}
	json_array_foreach(twins, i, t) {
		long m = iget(t, "mtu");
		const char *n = sget(t, "netdev");
		if (!present(t) || m < 0 || m == maxmtu)
			continue;
		snprintf(fix, sizeof fix,
			 "set mtu %ld on %s in " NETPLAN " and run netplan apply (a firmware update can reset one twin to 1500)",
			 maxmtu, n);
		add(out, "mtu_twin_mismatch", "error", pn, n, fix,
		    "port %s twins differ in MTU: %s has %ld, %s has %ld", pn, n, m, maxname, maxmtu);
	}
	if (cluster_mtu > 0) {
		json_array_foreach(twins, i, t) {
			long m = iget(t, "mtu");
			const char *n = sget(t, "netdev");
			if (!present(t) || m < 0 || m == cluster_mtu)
				continue;
			snprintf(fix, sizeof fix,
				 "set mtu %d on %s in " NETPLAN
				 " and run netplan apply; both ends of every cable must match",
				 cluster_mtu, n);
			add(out, "mtu_cluster_mismatch", "error", pn, n, fix,
			    "%s has MTU %ld but the cluster uses %d (mismatches show as IBV_WC_RETRY_EXC_ERR or NCCL hangs)",
			    n, m, cluster_mtu);
		}
	}
	json_array_foreach(twins, i, t) {
		const char *n = sget(t, "netdev");
		json_t *rdma = json_object_get(t, "rdma");
		if (!is_up(t) || !json_is_object(rdma))
			continue;
		const char *st = sget(rdma, "state");
		if (*st && strcmp(st, "active") != 0)
			add(out, "rdma_port_inactive", "error", pn, n,
			    "check the RoCE side: rdma link show; if it stays down, reload mlx5_ib or reboot",
			    "RDMA device %s of %s is %s (phys_state %s) while %s is up", sget(rdma, "device"),
			    n, st, *sget(rdma, "phys_state") ? sget(rdma, "phys_state") : "unknown", n);
	}
	json_array_foreach(twins, i, t) {
		const char *n = sget(t, "netdev");
		json_t *rdma = json_object_get(t, "rdma");
		if (!is_up(t))
			continue;
		if (json_is_object(rdma) && !json_is_integer(json_object_get(rdma, "rocev2_gid_index"))) {
			snprintf(fix, sizeof fix,
				 "give %s an IPv4 address in " NETPLAN
				 " and check RoCE v2 is enabled (rdma link show; cat /sys/class/infiniband/%s/ports/1/gid_attrs/types/*)",
				 n, sget(rdma, "device"));
			add(out, "no_rocev2_gid", "error", pn, n, fix,
			    "%s (RDMA device %s) has no RoCE v2 GID: RDMA traffic cannot use it", n,
			    sget(rdma, "device"));
		} else if (!json_is_object(rdma) &&
			   strcmp(sget(json_object_get(t, "pci"), "vendor_id"), "0x15b3") == 0) {
			add(out, "no_rocev2_gid", "error", pn, n,
			    "load the RDMA driver (modprobe mlx5_ib) and check rdma link show",
			    "%s is a Mellanox function without an RDMA device, so it has no RoCE v2 GID", n);
		}
	}
}

/* Append to a bounded buffer (truncates quietly). */
static void cat(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void cat(char *buf, size_t len, const char *fmt, ...)
{
	size_t o = strlen(buf);
	if (o + 1 >= len)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf + o, len - o, fmt, ap);
	va_end(ap);
}

struct v4 {
	const char *port, *netdev, *text;
	uint32_t addr;
	int plen;
};

static int parse_v4(const char *s, uint32_t *addr, int *plen)
{
	char b[32];
	const char *slash = strchr(s, '/');
	if (!slash || (size_t)(slash - s) >= sizeof b)
		return -EINVAL;
	memcpy(b, s, (size_t)(slash - s));
	b[slash - s] = '\0';
	struct in_addr a;
	if (inet_pton(AF_INET, b, &a) != 1)
		return -EINVAL;
	char *end;
	long p = strtol(slash + 1, &end, 10);
	if (*end || p < 0 || p > 32)
		return -EINVAL;
	*addr = ntohl(a.s_addr);
	*plen = (int)p;
	return 0;
}

static uint32_t mask(int plen) { return plen == 0 ? 0 : 0xffffffffu << (32 - plen); }

static void check_subnets(json_t *out, json_t *ports)
{
	struct v4 v[64];
	size_t n = 0;
	size_t i, k, a;
	json_t *port, *t, *addr;
	json_array_foreach(ports, i, port) {
		json_array_foreach(json_object_get(port, "twins"), k, t) {
			if (!present(t))
				continue;
			json_array_foreach(json_object_get(t, "ipv4"), a, addr) {
				const char *s = json_string_value(addr);
				if (n < sizeof v / sizeof v[0] && s &&
				    parse_v4(s, &v[n].addr, &v[n].plen) == 0) {
					v[n].port = sget(port, "name");
					v[n].netdev = sget(t, "netdev");
					v[n].text = s;
					n++;
				}
			}
		}
	}
	/* One finding per group of netdevs whose IPv4 subnets overlap. */
	bool done[sizeof v / sizeof v[0]] = {false};
	for (size_t x = 0; x < n; x++) {
		if (done[x])
			continue;
		int plen = v[x].plen;
		size_t members[sizeof v / sizeof v[0]], nm = 0, distinct = 1;
		members[nm++] = x;
		for (size_t y = x + 1; y < n; y++) {
			uint32_t m = mask(v[x].plen < v[y].plen ? v[x].plen : v[y].plen);
			if (done[y] || (v[x].addr & m) != (v[y].addr & m))
				continue;
			bool seen = false;
			for (size_t k = 0; k < nm; k++)
				if (strcmp(v[members[k]].netdev, v[y].netdev) == 0)
					seen = true;
			distinct += !seen;
			done[y] = true;
			members[nm++] = y;
			if (v[y].plen < plen)
				plen = v[y].plen;
		}
		if (distinct < 2)
			continue;
		char list[1024] = "", net[INET_ADDRSTRLEN];
		for (size_t k = 0; k < nm; k++)
			cat(list, sizeof list, "%s%s (%s)", k ? ", " : "", v[members[k]].netdev,
			    v[members[k]].text);
		struct in_addr na = {.s_addr = htonl(v[x].addr & mask(plen))};
		inet_ntop(AF_INET, &na, net, sizeof net);
		add(out, "twins_same_subnet", "error", v[x].port, v[x].netdev,
		    "give every twin its own subnet (e.g. one /24 each) in " NETPLAN " and run netplan apply",
		    "%s share subnet %s/%d: traffic can leave by the wrong twin (routing ambiguity, NCCL failures)",
		    list, net, plen);
	}
}

static void check_none(json_t *out, json_t *d)
{
	size_t i, k;
	json_t *p, *t, *x;
	json_array_foreach(json_object_get(d, "ports"), i, p) {
		json_array_foreach(json_object_get(p, "twins"), k, t) {
			if (present(t))
				return;
		}
	}
	json_t *sel = json_object_get(d, "selection");
	const char *by = sget(sel, "by");
	char looked[512] = "", seen[512] = "";
	if (strcmp(by, "ports") == 0) {
		cat(looked, sizeof looked, "the netdevs of fabric.ports (");
		const char *key;
		json_t *list;
		bool first = true;
		json_object_foreach(json_object_get(sel, "ports"), key, list) {
			json_array_foreach(list, k, x) {
				cat(looked, sizeof looked, "%s%s", first ? "" : " ", json_string_value(x));
				first = false;
			}
		}
		cat(looked, sizeof looked, ")");
	} else if (strcmp(by, "interfaces") == 0) {
		cat(looked, sizeof looked, "netdevs matching fabric.interfaces (");
		json_array_foreach(json_object_get(sel, "interfaces"), k, x)
			cat(looked, sizeof looked, "%s%s", k ? " " : "", json_string_value(x));
		cat(looked, sizeof looked, ")");
	} else {
		cat(looked, sizeof looked, "a ConnectX-7 netdev (PCI ");
		json_array_foreach(json_object_get(sel, "pci_ids"), k, x)
			cat(looked, sizeof looked, "%s%s", k ? " " : "", json_string_value(x));
		cat(looked, sizeof looked, ")");
	}
	json_array_foreach(json_object_get(d, "other_nics"), k, x) {
		const char *v = sget(x, "vendor_id"), *dv = sget(x, "device_id");
		const char *drv = *sget(x, "driver") ? sget(x, "driver") : "no driver";
		if (strlen(v) > 2 && strlen(dv) > 2)
			cat(seen, sizeof seen, "%s%s (%s:%s %s)", k ? ", " : "", sget(x, "netdev"),
			    v + 2, dv + 2, drv);
		else
			cat(seen, sizeof seen, "%s%s (%s)", k ? ", " : "", sget(x, "netdev"), drv);
	}
	const char *fix =
	    strcmp(by, "pci_id") == 0
		? "check that the ConnectX-7 is seen (lspci -d 15b3:) with mlx5_core loaded, or name the fabric netdevs in fabric.interfaces"
		: "correct fabric.interfaces / fabric.ports in the config (ip -br link lists the netdevs)";
	add(out, "no_fabric_port", "error", NULL, NULL, fix,
	    "no fabric port found: looked for %s; NICs seen: %s", looked, *seen ? seen : "none");
}

int topo_findings(json_t *discovery, int cluster_mtu, json_t **findings)
{
	json_t *ports = json_object_get(discovery, "ports");
	if (!json_is_array(ports))
		return -EINVAL;
	json_t *out = json_array();
	size_t i;
	json_t *p;
	json_array_foreach(ports, i, p) check_port(out, p, cluster_mtu);
	check_subnets(out, ports);
	check_none(out, discovery);
	*findings = out;
	return (int)json_array_size(out);
}

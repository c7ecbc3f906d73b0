/* sysfs_parse: pure parsers for the values the kernel prints in sysfs files
 * (and a few verbs/ip(8) values). Each takes a buffer and its length (no NUL
 * needed, trailing whitespace/newline ignored, at most TOPO_VAL_MAX bytes) and
 * returns 0 with the result filled, or -EINVAL / -ERANGE on anything else. They
 * never read past len and never allocate, except topo_parse_ip_json. These are
 * what tests/fuzz/fuzz_sysfs.c feeds garbage to. */
#ifndef SPARK_TOPO_SYSFS_PARSE_H
#define SPARK_TOPO_SYSFS_PARSE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define TOPO_VAL_MAX 256

/* "9000", "-1": a decimal integer in [min, max]. */
int topo_parse_long(const char *s, size_t len, long min, long max, long *out);
/* "0x15b3": hex with 0x prefix, value <= max. */
int topo_parse_hex(const char *s, size_t len, unsigned long max, unsigned long *out);
/* "4c:bb:47:2c:1e:10": 1-20 colon-separated hex octets -> lower case copy
 * (out needs 3 * 20 bytes). */
int topo_parse_mac(const char *s, size_t len, char *out, size_t outlen);
/* "up", "down", "lowerlayerdown", "unknown", "dormant", "notpresent", "testing". */
int topo_parse_operstate(const char *s, size_t len, char *out, size_t outlen);
/* IB port state / phys_state: "4: ACTIVE", "5: LinkUp", "3: Disabled".
 * *code = the number (0-255), word = the name in snake_case ("active",
 * "link_up", "disabled", "port_configuration_training", "phy_test"). */
int topo_parse_ib_state(const char *s, size_t len, int *code, char *word, size_t wordlen);
/* IB rate: "200 Gb/sec (4X HDR)", "2.5 Gb/sec (1X SDR)", "40 Gb/sec (4X QDR)".
 * *tenths = rate in tenths of Gb/s, *width = lanes (1, 2, 4, 8, 12),
 * speed = "HDR" etc. (optional: speed may be NULL). */
int topo_parse_ib_rate(const char *s, size_t len, long *tenths, int *width, char *speed,
		       size_t speedlen);
/* GID: "fe80:0000:0000:0000:4ebb:47ff:fe2c:1e10" (the kernel's %pI6) or any
 * inet_pton(AF_INET6) form. */
int topo_parse_gid(const char *s, size_t len, uint8_t out[16]);
/* gid_attrs/types/N: "IB/RoCE v1" -> 1, "RoCE v2" -> 2. */
int topo_parse_gid_type(const char *s, size_t len, int *type);
/* link_layer: "Ethernet" -> "ethernet", "InfiniBand" -> "infiniband". */
int topo_parse_link_layer(const char *s, size_t len, char *out, size_t outlen);
/* PCI address "0000:01:00.0" (domain:bus:device.function, hex). */
struct topo_pci_addr {
	unsigned domain, bus, dev, fn;
};
int topo_parse_pci_addr(const char *s, size_t len, struct topo_pci_addr *out);
/* current_link_speed: "32.0 GT/s PCIe", "8 GT/s", "2.5 GT/s PCIe", "Unknown"
 * (-> -ENODATA). *gen = PCIe generation 1-6 (0 if the rate is not a standard
 * one); the validated string is copied to out. */
int topo_parse_pcie_speed(const char *s, size_t len, int *gen, char *out, size_t outlen);
/* A netdev name as the kernel allows it: 1-15 bytes, no '/', ':' or space. */
int topo_parse_ifname(const char *s, size_t len, char *out, size_t outlen);
/* "p0", "p1" (phys_port_name of an uplink) -> 0, 1. */
int topo_parse_phys_port(const char *s, size_t len, int *port);

/* The output of `ip -json address show` (a netlink address dump recorded in
 * a file): *out = {"IFNAME": {"ipv4": ["a.b.c.d/len"...], "ipv6": [...]}}.
 * Entries with bad fields are skipped; -EINVAL if the text is not such an
 * array at all. Caller decrefs *out. */
int topo_parse_ip_json(const char *s, size_t len, json_t **out);

#endif

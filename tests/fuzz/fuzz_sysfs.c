/* libFuzzer target: every sysfs value parser of topology/sysfs_parse.h, the
 * `ip -json address` reader, and topo_findings() over whatever JSON the input
 * is (the head runs findings on discovery JSON it receives). Garbage must give
 * a clean error, never a crash, leak or out-of-bounds read. */
#include "topology/discover.h"
#include "topology/sysfs_parse.h"

/* Compiled into the target (not taken from libsparktopology.a) so that the
 * code under test carries the fuzzer's coverage instrumentation; the archive's
 * copies are then never pulled in, as nothing else references them. */
#include "topology/findings.c"
#include "topology/sysfs_parse.c"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* An exact-size copy so ASan catches any read past len. */
	char *s = malloc(size ? size : 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	long l;
	unsigned long u;
	int i1, i2;
	char out[64];
	uint8_t gid[16];
	struct topo_pci_addr pa;
	topo_parse_long(s, size, -1, 0x7fffffffL, &l);
	topo_parse_hex(s, size, 0xffff, &u);
	topo_parse_mac(s, size, out, sizeof out);
	topo_parse_operstate(s, size, out, sizeof out);
	topo_parse_ib_state(s, size, &i1, out, sizeof out);
	topo_parse_ib_state(s, size, &i1, out, 4); /* small output buffer */
	topo_parse_ib_rate(s, size, &l, &i1, out, sizeof out);
	topo_parse_ib_rate(s, size, &l, &i1, NULL, 0);
	topo_parse_gid(s, size, gid);
	topo_parse_gid_type(s, size, &i1);
	topo_parse_link_layer(s, size, out, sizeof out);
	topo_parse_pci_addr(s, size, &pa);
	topo_parse_pcie_speed(s, size, &i2, out, sizeof out);
	topo_parse_ifname(s, size, out, sizeof out);
	topo_parse_phys_port(s, size, &i1);
	json_t *m = NULL;
	if (topo_parse_ip_json(s, size, &m) == 0)
		json_decref(m);
	json_t *d = json_loadb(s, size, 0, NULL);
	if (d) {
		json_t *f = NULL;
		if (topo_findings(d, 9000, &f) >= 0)
			json_decref(f);
		json_decref(d);
	}
	free(s);
	return 0;
}

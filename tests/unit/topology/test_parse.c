/* sysfs_parse: the kernel's value formats, and garbage refused cleanly. */
#include "topology/sysfs_parse.h"
#include "topology/topo_internal.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#define S(x) x, strlen(x)

Test(parse, long_values)
{
	long v;
	cr_assert_eq(topo_parse_long(S("9000\n"), 0, 65535, &v), 0);
	cr_assert_eq(v, 9000);
	cr_assert_eq(topo_parse_long(S("-1\n"), -1, 1000000, &v), 0);
	cr_assert_eq(v, -1);
	static const char *bad[] = {"", "\n", "x", "12a", " 5", "5 5", "--1", "-", "1e3", "0x10"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		cr_assert_eq(topo_parse_long(S(bad[i]), -100, 100000, &v), -EINVAL, "'%s'", bad[i]);
	cr_assert_eq(topo_parse_long(S("70000"), 0, 65535, &v), -ERANGE);
	cr_assert_eq(topo_parse_long(S("99999999999999999999999"), 0, 65535, &v), -ERANGE);
	cr_assert_eq(topo_parse_long("12\0" "3", 4, 0, 1000, &v), -EINVAL);
}

Test(parse, hex_ids)
{
	unsigned long v;
	cr_assert_eq(topo_parse_hex(S("0x15b3\n"), 0xffff, &v), 0);
	cr_assert_eq(v, 0x15b3);
	cr_assert_eq(topo_parse_hex(S("0x020000"), 0xffffff, &v), 0);
	cr_assert_eq(topo_parse_hex(S("0x10000"), 0xffff, &v), -ERANGE);
	cr_assert_eq(topo_parse_hex(S("15b3"), 0xffff, &v), -EINVAL);
	cr_assert_eq(topo_parse_hex(S("0x"), 0xffff, &v), -EINVAL);
	cr_assert_eq(topo_parse_hex(S("0xg1"), 0xffff, &v), -EINVAL);
}

Test(parse, mac)
{
	char m[64];
	cr_assert_eq(topo_parse_mac(S("B8:CE:F6:5a:10:40\n"), m, sizeof m), 0);
	cr_assert_str_eq(m, "b8:ce:f6:5a:10:40");
	cr_assert_eq(topo_parse_mac(S("b8:ce:f6:5a:10"), m, sizeof m), 0);
	cr_assert_eq(topo_parse_mac(S("b8:ce:f6:5a:10:4"), m, sizeof m), -EINVAL);
	cr_assert_eq(topo_parse_mac(S("b8-ce-f6-5a-10-40"), m, sizeof m), -EINVAL);
	cr_assert_eq(topo_parse_mac(S("zz:ce:f6:5a:10:40"), m, sizeof m), -EINVAL);
	cr_assert_eq(topo_parse_mac(S("b8:ce:f6:5a:10:40"), m, 4), -ERANGE);
}

Test(parse, ib_states)
{
	int c;
	char w[48];
	static const struct {
		const char *in, *word;
		int code;
	} ok[] = {
	    {"4: ACTIVE\n", "active", 4},
	    {"1: DOWN\n", "down", 1},
	    {"5: ACTIVE_DEFER", "active_defer", 5},
	    {"5: LinkUp\n", "link_up", 5},
	    {"3: Disabled\n", "disabled", 3},
	    {"2: Polling", "polling", 2},
	    {"4: PortConfigurationTraining", "port_configuration_training", 4},
	    {"6: LinkErrorRecovery", "link_error_recovery", 6},
	    {"7: Phy Test", "phy_test", 7},
	    {"0: <unknown>", "unknown", 0},
	};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		cr_assert_eq(topo_parse_ib_state(S(ok[i].in), &c, w, sizeof w), 0, "%s", ok[i].in);
		cr_assert_str_eq(w, ok[i].word);
		cr_assert_eq(c, ok[i].code);
	}
	static const char *bad[] = {"ACTIVE", "4 ACTIVE", "4:ACTIVE", ": ACTIVE", "4: ",
				    "-4: ACTIVE", "4: ACT!VE", "999: X", "4: <x>"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		cr_assert_lt(topo_parse_ib_state(S(bad[i]), &c, w, sizeof w), 0, "'%s'", bad[i]);
}

Test(parse, ib_rate)
{
	long t;
	int w;
	char sp[16];
	cr_assert_eq(topo_parse_ib_rate(S("200 Gb/sec (4X HDR)\n"), &t, &w, sp, sizeof sp), 0);
	cr_assert_eq(t, 2000);
	cr_assert_eq(w, 4);
	cr_assert_str_eq(sp, "HDR");
	cr_assert_eq(topo_parse_ib_rate(S("40 Gb/sec (4X QDR)"), &t, &w, sp, sizeof sp), 0);
	cr_assert_eq(t, 400);
	cr_assert_eq(topo_parse_ib_rate(S("2.5 Gb/sec (1X SDR)"), &t, &w, NULL, 0), 0);
	cr_assert_eq(t, 25);
	cr_assert_eq(w, 1);
	cr_assert_eq(topo_parse_ib_rate(S("100 Gb/sec (2X HDR)"), &t, &w, NULL, 0), 0);
	cr_assert_eq(topo_parse_ib_rate(S("10 Gb/sec (4X)"), &t, &w, sp, sizeof sp), 0);
	cr_assert_str_eq(sp, "");
	static const char *bad[] = {"200", "200 Gb/sec", "200 Gb/sec (X HDR)", "Gb/sec (4X HDR)",
				    "200 Gb/sec (4X HDR", "200 Gb/sec (0X HDR)", "2.55 Gb/sec (1X SDR)",
				    "200 Gb/sec (4X HDR) x", "200. Gb/sec (4X HDR)"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		cr_assert_lt(topo_parse_ib_rate(S(bad[i]), &t, &w, sp, sizeof sp), 0, "'%s'", bad[i]);
}

Test(parse, gids)
{
	uint8_t g[16];
	cr_assert_eq(topo_parse_gid(S("fe80:0000:0000:0000:bace:f6ff:fe5a:1040\n"), g), 0);
	cr_assert_eq(g[0], 0xfe);
	cr_assert_eq(g[15], 0x40);
	cr_assert_eq(topo_parse_gid(S("0000:0000:0000:0000:0000:ffff:a9fe:0a01"), g), 0);
	cr_assert_eq(g[10], 0xff);
	cr_assert_eq(g[12], 169);
	cr_assert_eq(topo_parse_gid(S("::ffff:169.254.10.1"), g), 0);
	cr_assert_lt(topo_parse_gid(S("fe80:0000"), g), 0);
	cr_assert_lt(topo_parse_gid(S("169.254.10.1"), g), 0);
	int t;
	cr_assert_eq(topo_parse_gid_type(S("RoCE v2\n"), &t), 0);
	cr_assert_eq(t, 2);
	cr_assert_eq(topo_parse_gid_type(S("IB/RoCE v1\n"), &t), 0);
	cr_assert_eq(t, 1);
	cr_assert_lt(topo_parse_gid_type(S("RoCE v3"), &t), 0);
	char ll[16];
	cr_assert_eq(topo_parse_link_layer(S("Ethernet\n"), ll, sizeof ll), 0);
	cr_assert_str_eq(ll, "ethernet");
	cr_assert_lt(topo_parse_link_layer(S("ethernet"), ll, sizeof ll), 0);
}

Test(parse, pci)
{
	struct topo_pci_addr a;
	cr_assert_eq(topo_parse_pci_addr(S("0002:01:00.1"), &a), 0);
	cr_assert_eq(a.domain, 2);
	cr_assert_eq(a.bus, 1);
	cr_assert_eq(a.dev, 0);
	cr_assert_eq(a.fn, 1);
	cr_assert_eq(topo_parse_pci_addr(S("10000:e1:1f.7"), &a), 0);
	cr_assert_eq(a.domain, 0x10000);
	static const char *bad[] = {"0000:01:00", "0000:01:20.0", "0000:01:00.8", "0000-01:00.0",
				    "uverbs0", "..", "0000:0g:00.0", "1-1:1.0"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		cr_assert_lt(topo_parse_pci_addr(S(bad[i]), &a), 0, "'%s'", bad[i]);
	int gen;
	char sp[32];
	cr_assert_eq(topo_parse_pcie_speed(S("32.0 GT/s PCIe\n"), &gen, sp, sizeof sp), 0);
	cr_assert_eq(gen, 5);
	cr_assert_str_eq(sp, "32.0 GT/s PCIe");
	cr_assert_eq(topo_parse_pcie_speed(S("2.5 GT/s PCIe"), &gen, sp, sizeof sp), 0);
	cr_assert_eq(gen, 1);
	cr_assert_eq(topo_parse_pcie_speed(S("8 GT/s"), &gen, sp, sizeof sp), 0);
	cr_assert_eq(gen, 3);
	cr_assert_eq(topo_parse_pcie_speed(S("Unknown"), &gen, sp, sizeof sp), -ENODATA);
	cr_assert_lt(topo_parse_pcie_speed(S("32.0 GB/s"), &gen, sp, sizeof sp), 0);
	cr_assert_lt(topo_parse_pcie_speed(S("32.0GT/s"), &gen, sp, sizeof sp), 0);
}

Test(parse, names_and_states)
{
	char b[32];
	cr_assert_eq(topo_parse_ifname(S("enP2p1s0f0np0\n"), b, sizeof b), 0);
	cr_assert_str_eq(b, "enP2p1s0f0np0");
	static const char *bad[] = {"a/b", "", "..", "sixteen_chars_xx", "a b", "x:1"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		cr_assert_lt(topo_parse_ifname(S(bad[i]), b, sizeof b), 0, "'%s'", bad[i]);
	cr_assert_eq(topo_parse_operstate(S("lowerlayerdown\n"), b, sizeof b), 0);
	cr_assert_lt(topo_parse_operstate(S("UP"), b, sizeof b), 0);
	int p;
	cr_assert_eq(topo_parse_phys_port(S("p1\n"), &p), 0);
	cr_assert_eq(p, 1);
	cr_assert_lt(topo_parse_phys_port(S("pf0vf1"), &p), 0);
	cr_assert_lt(topo_parse_phys_port(S("p-1"), &p), 0);
}

Test(parse, ip_json)
{
	const char *txt =
	    "[{\"ifindex\":4,\"ifname\":\"enp1s0f0np0\",\"addr_info\":["
	    "{\"family\":\"inet\",\"local\":\"169.254.10.1\",\"prefixlen\":24},"
	    "{\"family\":\"inet6\",\"local\":\"fe80::bace:f6ff:fe5a:1040\",\"prefixlen\":64},"
	    "{\"family\":\"inet\",\"local\":\"bogus\",\"prefixlen\":24},"
	    "{\"family\":\"inet\",\"local\":\"169.254.10.2\",\"prefixlen\":33}]},"
	    "{\"ifname\":\"../x\",\"addr_info\":[]}, 5, {\"addr_info\":{}}]";
	json_t *m = NULL;
	cr_assert_eq(topo_parse_ip_json(S(txt), &m), 0);
	json_t *e = json_object_get(m, "enp1s0f0np0");
	cr_assert_eq(json_array_size(json_object_get(e, "ipv4")), 1);
	cr_assert_str_eq(json_string_value(json_array_get(json_object_get(e, "ipv4"), 0)),
			 "169.254.10.1/24");
	cr_assert_eq(json_array_size(json_object_get(e, "ipv6")), 1);
	cr_assert_eq(json_object_size(m), 1);
	json_decref(m);
	cr_assert_lt(topo_parse_ip_json(S("{}"), &m), 0);
	cr_assert_lt(topo_parse_ip_json(S("[1,"), &m), 0);
}

Test(parse, verbs_rate_matches_kernel)
{
	char b[64];
	long t;
	/* IB_SPEED_HDR (64) x IB_WIDTH_4X (2), IB_SPEED_QDR (4) x 4X, SDR x 1X */
	cr_assert_eq(topo_ib_rate_string(64, 2, b, sizeof b, &t), 0);
	cr_assert_str_eq(b, "200 Gb/sec (4X HDR)");
	cr_assert_eq(topo_ib_rate_string(4, 2, b, sizeof b, &t), 0);
	cr_assert_str_eq(b, "40 Gb/sec (4X QDR)");
	cr_assert_eq(topo_ib_rate_string(1, 1, b, sizeof b, &t), 0);
	cr_assert_str_eq(b, "2.5 Gb/sec (1X SDR)");
	cr_assert_eq(t, 25);
	cr_assert_eq(topo_ib_rate_string(128, 16, b, sizeof b, &t), 0);
	cr_assert_str_eq(b, "200 Gb/sec (2X NDR)");
	int w;
	long t2;
	cr_assert_eq(topo_parse_ib_rate(b, strlen(b), &t2, &w, NULL, 0), 0);
	cr_assert_eq(t2, 2000);
	cr_assert_lt(topo_ib_rate_string(64, 3, b, sizeof b, &t), 0);
}

/* util_check_hostport: the addresses a person may type for join HOST,
 * init --advertise and sparkd --listen, and the ones refused with a reason. */
#include "common/util.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

static void ok(const char *s, int def)
{
	char err[256] = "";
	int r = util_check_hostport(s, def, err, sizeof err);
	cr_expect_eq(r, 0, "'%s' (default port %d) refused: %s", s, def, err);
}

/* Refused, with a message that contains `why`. */
static void bad(const char *s, int def, const char *why)
{
	char err[256] = "";
	int r = util_check_hostport(s, def, err, sizeof err);
	cr_expect_eq(r, -EINVAL, "'%s' accepted", s);
	cr_expect(strstr(err, why) != NULL, "'%s': message \"%s\" lacks \"%s\"", s, err, why);
}

Test(hostport, accepts_ipv4_and_bracketed_ipv6)
{
	ok("127.0.0.1:7300", 7300);
	ok("169.254.10.1", 7300);
	ok("0.0.0.0:1", 7300);
	ok("255.255.255.255:65535", 7300);
	ok("[::1]:7300", 7300);
	ok("[fd00::1]", 7300);
	ok("[::]:7300", 0); /* a port is given: no default needed */
}

Test(hostport, accepts_dns_names)
{
	ok("head", 7300);
	ok("spark-01.lab.example:7300", 7300);
	ok("Head-1.Example.COM", 7300);
	ok("xn--bcher-kva.example", 7300);
	ok("1a.example", 7300); /* a label may start with a digit */
	char name[254]; /* 3 labels of 63, one of 61, 3 dots: 253 */
	for (int i = 0; i < 253; i++)
		name[i] = (i % 64 == 63) ? '.' : 'a';
	name[253] = '\0';
	ok(name, 7300);
	char label[64];
	memset(label, 'b', 63);
	label[63] = '\0';
	ok(label, 7300);
}

Test(hostport, refuses_spaces_and_control_characters)
{
	bad("evil host:1", 7300, "spaces");
	bad(" head", 7300, "spaces");
	bad("head:7300 ", 7300, "spaces");
	bad("head\t:1", 7300, "spaces");
	bad("head\n", 7300, "control");
	bad("he\x1b[31mad", 7300, "control");
	bad("he\x7f", 7300, "control");
	bad("h\xc3\xa9" "ad", 7300, "ASCII");
}

Test(hostport, refuses_empty_parts)
{
	bad("", 7300, "empty");
	bad(":7300", 7300, "empty host");
	bad("head:", 7300, "empty port");
	bad("[]:7300", 7300, "empty host");
	bad("a..b", 7300, "empty label");
	bad(".head", 7300, "empty label");
	bad("head.", 7300, "empty label");
	cr_expect_eq(util_check_hostport(NULL, 7300, NULL, 0), -EINVAL, "NULL refused, no message");
}

Test(hostport, refuses_bad_ports)
{
	bad("head:99999", 7300, "above 65535");
	bad("head:65536", 7300, "above 65535");
	bad("head:0", 7300, "1 to 65535");
	bad("head:-1", 7300, "not a number");
	bad("head:+80", 7300, "not a number");
	bad("head:80x", 7300, "not a number");
	bad("head:999999999999999999999", 7300, "1 to 65535");
	bad("head:000080", 7300, "1 to 65535"); /* at most 5 digits */
	bad("[::1]:0", 7300, "1 to 65535");
	bad("head", 0, "missing :PORT");
	bad("127.0.0.1", -1, "missing :PORT");
}

Test(hostport, refuses_malformed_hosts)
{
	bad("nonsense!", 7300, "letters, digits");
	bad("under_score", 7300, "letters, digits");
	bad("-head", 7300, "'-'");
	bad("head-.example", 7300, "'-'");
	bad("1.2.3", 7300, "IPv4");
	bad("256.1.1.1", 7300, "IPv4");
	bad("1.2.3.4.5", 7300, "IPv4");
	bad("::1", 7300, "brackets");
	bad("fd00::1:7300", 7300, "brackets");
	bad("[::1", 7300, "']'");
	bad("[::1]7300", 7300, "after ']'");
	bad("[head]:7300", 7300, "IPv6");
	bad("[1.2.3.4]:7300", 7300, "IPv6");
	bad("[fe80::1%eth0]", 7300, "IPv6"); /* no scope ids: say which interface another way */
	char label[65];
	memset(label, 'c', 64);
	label[64] = '\0';
	bad(label, 7300, "63");
	char name[256];
	for (int i = 0; i < 255; i++)
		name[i] = (i % 64 == 63) ? '.' : 'a';
	name[255] = '\0';
	bad(name, 7300, "253");
}

Test(hostport, truncates_the_message_safely)
{
	char err[8];
	memset(err, 'x', sizeof err);
	cr_assert_eq(util_check_hostport("a b", 7300, err, sizeof err), -EINVAL);
	cr_expect_eq(strlen(err), sizeof err - 1, "NUL-terminated within the buffer");
}

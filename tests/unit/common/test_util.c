/* util: durations, ages, host:port, names, files. */
#include "common/util.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

Test(util, durations)
{
	static const struct {
		const char *s;
		int64_t secs;
	} ok[] = {
		{"30s", 30}, {"90m", 5400}, {"24h", 86400}, {"7d", 604800}, {"1h30m", 5400},
		{"45", 45},  {"0", 0},      {"1d2h3m4s", 93784}, {"0010s", 10},
	};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		int64_t v = -1;
		cr_assert_eq(util_parse_duration(ok[i].s, &v), 0, "%s", ok[i].s);
		cr_assert_eq(v, ok[i].secs, "%s -> %lld", ok[i].s, (long long)v);
	}
	static const char *bad[] = {"", "h", "5x", "1.5h", "-5", " 5", "5 m", "1h-", "m5",
				    "5H", "1h 30m", "5s\n"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int64_t v = 1234;
		cr_assert_eq(util_parse_duration(bad[i], &v), -EINVAL, "\"%s\"", bad[i]);
		cr_assert_eq(v, 1234, "untouched on error");
	}
	int64_t v = 0;
	cr_assert_eq(util_parse_duration(NULL, &v), -EINVAL);
	cr_assert_lt(util_parse_duration("99999999999999999999s", &v), 0, "overflow refused");
}

Test(util, duration_sum_cannot_overflow)
{
	/* Each part is in range but their sum is not: must be refused, not wrap. */
	size_t parts = 2000;
	char *s = malloc(parts * 13 + 1);
	s[0] = '\0';
	for (size_t i = 0; i < parts; i++)
		strcat(s, "99999999999d");
	int64_t v = 0;
	cr_assert_eq(util_parse_duration(s, &v), -ERANGE);
	free(s);
}

Test(util, ages)
{
	char b[16];
	static const struct {
		int64_t s;
		const char *want;
	} cases[] = {
		{-5, "0s"}, {0, "0s"}, {119, "119s"}, {120, "2m"}, {7199, "119m"},
		{7200, "2h"}, {172799, "47h"}, {172800, "2d"}, {864000, "10d"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		util_fmt_age(cases[i].s, b, sizeof b);
		cr_assert_str_eq(b, cases[i].want, "%lld", (long long)cases[i].s);
	}
}

Test(util, host_port)
{
	static const struct {
		const char *in;
		const char *host;
		int port;
	} ok[] = {
		{"spark-1:7300", "spark-1", 7300},
		{"spark-1", "spark-1", 7300},
		{"169.254.10.2:22", "169.254.10.2", 22},
		{"[::1]:8080", "::1", 8080},
		{"[fe80::1%enP7s7]:7300", "fe80::1%enP7s7", 7300},
		{"[fd00::2]", "fd00::2", 7300},
		{"fd00::2", "fd00::2", 7300}, /* bare IPv6: no port */
		{"h:1", "h", 1},
		{"h:65535", "h", 65535},
	};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		char host[64] = "";
		int port = -1;
		cr_assert_eq(util_split_hostport(ok[i].in, 7300, host, sizeof host, &port), 0, "%s",
			     ok[i].in);
		cr_assert_str_eq(host, ok[i].host, "%s", ok[i].in);
		cr_assert_eq(port, ok[i].port, "%s", ok[i].in);
	}
	static const char *bad[] = {"", ":80", "h:", "h:0", "h:65536", "h:abc", "h:80x",
				    "[::1", "[::1]x", "[::1]:", "[]:80", "[::1]:0", "h:-1"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char host[64];
		int port;
		cr_assert_eq(util_split_hostport(bad[i], 7300, host, sizeof host, &port), -EINVAL,
			     "\"%s\"", bad[i]);
	}
	char small[4];
	int port;
	cr_assert_eq(util_split_hostport("abcd:1", 1, small, sizeof small, &port), -EINVAL,
		     "host longer than the buffer");
	cr_assert_eq(util_split_hostport("abc:1", 1, small, sizeof small, &port), 0);
	cr_assert_str_eq(small, "abc");
}

Test(util, names)
{
	char n63[64], n64[65];
	memset(n63, 'a', 63);
	n63[63] = '\0';
	memset(n64, 'a', 64);
	n64[64] = '\0';
	static const char *ok[] = {"spark-1", "a", "1abc", "node-2-b", "0"};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
		cr_assert(util_valid_name(ok[i]), "%s", ok[i]);
	cr_assert(util_valid_name(n63));
	static const char *bad[] = {"", "Spark", "-a", "a_b", "a.b", "a b", "spark\n", "é"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		cr_assert_not(util_valid_name(bad[i]), "\"%s\"", bad[i]);
	cr_assert_not(util_valid_name(n64));
	cr_assert_not(util_valid_name(NULL));
}

Test(util, strlcpy_truncates)
{
	char b[4];
	cr_assert_eq(util_strlcpy(b, "abcdef", sizeof b), 6);
	cr_assert_str_eq(b, "abc");
	cr_assert_eq(util_strlcpy(b, "ab", sizeof b), 2);
	cr_assert_str_eq(b, "ab");
}

static int count_tmp_files(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (strstr(e->d_name, ".tmp"))
			n++;
	closedir(d);
	return n;
}

Test(util, atomic_write_sets_mode_and_replaces)
{
	char dir[] = "/tmp/utiltestXXXXXX";
	cr_assert_not_null(mkdtemp(dir));
	char path[128];
	snprintf(path, sizeof path, "%s/key.pem", dir);
	mode_t old = umask(0);
	cr_assert_eq(util_write_file(path, "secret", 6, 0600), 0);
	umask(old);
	struct stat st;
	cr_assert_eq(stat(path, &st), 0);
	cr_assert_eq(st.st_mode & 07777, 0600, "mode %o", st.st_mode & 07777);
	/* replace with a different mode and content, umask 077 must not matter */
	old = umask(077);
	cr_assert_eq(util_write_file(path, "public!", 7, 0644), 0);
	umask(old);
	cr_assert_eq(stat(path, &st), 0);
	cr_assert_eq(st.st_mode & 07777, 0644, "mode %o", st.st_mode & 07777);
	char *text;
	size_t len;
	cr_assert_eq(util_read_file(path, &text, &len, 1024), 0);
	cr_assert_eq(len, 7);
	cr_assert_str_eq(text, "public!");
	free(text);
	cr_assert_eq(count_tmp_files(dir), 0, "no temporary file left behind");
	char bad[160];
	snprintf(bad, sizeof bad, "%s/nodir/x", dir);
	cr_assert_eq(util_write_file(bad, "x", 1, 0600), -ENOENT);
	unlink(path);
	rmdir(dir);
}

Test(util, read_file_limits)
{
	char dir[] = "/tmp/utiltestXXXXXX";
	cr_assert_not_null(mkdtemp(dir));
	char path[128];
	snprintf(path, sizeof path, "%s/f", dir);
	size_t sizes[] = {0, 1, 4095, 4096, 4097, 10000};
	char *data = malloc(10000);
	memset(data, 'x', 10000);
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		size_t n = sizes[i];
		cr_assert_eq(util_write_file(path, data, n, 0644), 0);
		char *text = NULL;
		size_t len = 0;
		cr_assert_eq(util_read_file(path, &text, &len, n), 0, "file of exactly max=%zu", n);
		cr_assert_eq(len, n);
		cr_assert_eq(text[n], '\0', "NUL-terminated");
		free(text);
		if (n > 0)
			cr_assert_eq(util_read_file(path, &text, &len, n - 1), -EFBIG,
				     "file of max+1=%zu bytes", n);
	}
	free(data);
	char *t;
	cr_assert_eq(util_read_file("/nonexistent/x", &t, NULL, 10), -ENOENT);
	/* a directory says so (sparkd --config DIR), not "Input/output error" */
	cr_assert_eq(util_read_file(dir, &t, NULL, 10), -EISDIR);
	unlink(path);
	rmdir(dir);
}

Test(util, mkdirs)
{
	char dir[] = "/tmp/utiltestXXXXXX";
	cr_assert_not_null(mkdtemp(dir));
	char path[160];
	snprintf(path, sizeof path, "%s/a/b/c", dir);
	cr_assert_eq(util_mkdirs(path, 0700), 0);
	struct stat st;
	cr_assert_eq(stat(path, &st), 0);
	cr_assert(S_ISDIR(st.st_mode));
	cr_assert_eq(util_mkdirs(path, 0700), 0, "existing is fine");
	rmdir(path);
	snprintf(path, sizeof path, "%s/a/b", dir);
	rmdir(path);
	snprintf(path, sizeof path, "%s/a", dir);
	rmdir(path);
	rmdir(dir);
}

Test(util, http_urls)
{
	cr_expect(util_http_url("http://169.254.1.1:8000/v1", false));
	cr_expect(util_http_url("https://h/x", true));
	cr_expect(!util_http_url("https://h/x", false), "https only when asked for");
	cr_expect(!util_http_url("http://", true), "no host");
	cr_expect(!util_http_url("https://", true), "no host");
	cr_expect(!util_http_url("http:///x", true), "no host");
	cr_expect(!util_http_url("ftp://h/", true));
	cr_expect(!util_http_url("http://h/a b", true), "a space");
	cr_expect(!util_http_url("http://h/\x7f", true), "a control character");
	cr_expect(!util_http_url("HTTP://h/", true), "the scheme as the others write it");
}

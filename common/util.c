#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int64_t util_now(void) { return (int64_t)time(NULL); }

uint64_t util_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int util_mkdirs(const char *path, int mode)
{
	char buf[PATH_MAX];
	if (util_strlcpy(buf, path, sizeof buf) >= sizeof buf)
		return -ENAMETOOLONG;
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, (mode_t)mode) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, (mode_t)mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

int util_write_file(const char *path, const void *data, size_t len, int mode)
{
	char tmp[PATH_MAX];
	if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
		return -ENAMETOOLONG;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, (mode_t)mode);
	if (fd < 0)
		return -errno;
	fchmod(fd, (mode_t)mode);
	const char *p = data;
	size_t left = len;
	while (left) {
		ssize_t w = write(fd, p, left);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			int e = -errno;
			close(fd);
			unlink(tmp);
			return e;
		}
		p += w;
		left -= (size_t)w;
	}
	if (fsync(fd) < 0 || close(fd) < 0) {
		int e = -errno;
		unlink(tmp);
		return e;
	}
	if (rename(tmp, path) < 0) {
		int e = -errno;
		unlink(tmp);
		return e;
	}
	return 0;
}

int util_read_file(const char *path, char **out, size_t *len, size_t max)
{
	FILE *f = fopen(path, "rbe");
	if (!f)
		return -errno;
	struct stat st;
	if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
		fclose(f);
		return -EISDIR;
	}
	size_t cap = 4096, n = 0;
	char *b = malloc(cap + 1);
	if (!b) {
		fclose(f);
		return -ENOMEM;
	}
	for (;;) {
		if (n == cap) {
			if (n > max) {
				free(b);
				fclose(f);
				return -EFBIG;
			}
			cap *= 2;
			char *nb = realloc(b, cap + 1);
			if (!nb) {
				free(b);
				fclose(f);
				return -ENOMEM;
			}
			b = nb;
		}
		size_t r = fread(b + n, 1, cap - n, f);
		n += r;
		if (r == 0)
			break;
	}
	int err = ferror(f) ? -EIO : 0;
	fclose(f);
	if (err || n > max) {
		free(b);
		return err ? err : -EFBIG;
	}
	b[n] = '\0';
	*out = b;
	if (len)
		*len = n;
	return 0;
}

int util_parse_duration(const char *s, int64_t *secs)
{
	if (!s || !*s)
		return -EINVAL;
	int64_t total = 0;
	const char *p = s;
	while (*p) {
		if (!isdigit((unsigned char)*p))
			return -EINVAL;
		int64_t v = 0;
		while (isdigit((unsigned char)*p)) {
			v = v * 10 + (*p - '0');
			if (v > 100000000000LL)
				return -ERANGE;
			p++;
		}
		int64_t mul;
		switch (*p) {
		case '\0': mul = 1; break;
		case 's': mul = 1; p++; break;
		case 'm': mul = 60; p++; break;
		case 'h': mul = 3600; p++; break;
		case 'd': mul = 86400; p++; break;
		default: return -EINVAL;
		}
		if (v * mul > INT64_MAX - total)
			return -ERANGE;
		total += v * mul;
	}
	*secs = total;
	return 0;
}

void util_fmt_age(int64_t secs, char *buf, size_t len)
{
	if (secs < 0)
		secs = 0;
	if (secs < 120)
		snprintf(buf, len, "%llds", (long long)secs);
	else if (secs < 7200)
		snprintf(buf, len, "%lldm", (long long)(secs / 60));
	else if (secs < 172800)
		snprintf(buf, len, "%lldh", (long long)(secs / 3600));
	else
		snprintf(buf, len, "%lldd", (long long)(secs / 86400));
}

int util_split_hostport(const char *s, int def_port, char *host, size_t hostlen, int *port)
{
	if (!s || !*s)
		return -EINVAL;
	const char *ps = NULL;
	size_t hl;
	if (s[0] == '[') {
		const char *e = strchr(s, ']');
		if (!e)
			return -EINVAL;
		hl = (size_t)(e - s - 1);
		s++;
		if (e[1] == ':')
			ps = e + 2;
		else if (e[1] != '\0')
			return -EINVAL;
	} else {
		const char *c = strchr(s, ':');
		if (c && strchr(c + 1, ':')) { /* bare IPv6, no port */
			hl = strlen(s);
		} else if (c) {
			hl = (size_t)(c - s);
			ps = c + 1;
		} else {
			hl = strlen(s);
		}
	}
	if (hl == 0 || hl >= hostlen)
		return -EINVAL;
	memcpy(host, s, hl);
	host[hl] = '\0';
	*port = def_port;
	if (ps) {
		char *end;
		long v = strtol(ps, &end, 10);
		if (*ps == '\0' || *end != '\0' || v < 1 || v > 65535)
			return -EINVAL;
		*port = (int)v;
	}
	return 0;
}

static int hp_fail(char *err, size_t errlen, const char *msg)
{
	if (err && errlen)
		snprintf(err, errlen, "%s", msg);
	return -EINVAL;
}

/* A DNS name of [A-Za-z0-9-.]: labels 1-63, no '-' at either end, <= 253. */
static int check_dns_name(const char *h, size_t n, char *err, size_t errlen)
{
	if (n > 253)
		return hp_fail(err, errlen, "the host name is longer than 253 characters");
	size_t start = 0;
	bool last_numeric = true;
	for (size_t i = 0; i <= n; i++) {
		if (i < n && h[i] != '.') {
			char c = h[i];
			if (!isalnum((unsigned char)c) && c != '-')
				return hp_fail(err, errlen,
					       "a host name has only letters, digits, '-' and '.'");
			continue;
		}
		size_t len = i - start;
		if (len == 0)
			return hp_fail(err, errlen, "empty label in the host name (two dots, or a "
						    "dot at either end)");
		if (len > 63)
			return hp_fail(err, errlen, "a label of the host name is longer than 63 "
						    "characters");
		if (h[start] == '-' || h[i - 1] == '-')
			return hp_fail(err, errlen, "a label of the host name starts or ends with '-'");
		last_numeric = true;
		for (size_t k = start; k < i; k++)
			if (!isdigit((unsigned char)h[k]))
				last_numeric = false;
		start = i + 1;
	}
	if (last_numeric)
		return hp_fail(err, errlen, "not a valid IPv4 address (four numbers 0-255 "
					    "separated by dots)");
	return 0;
}

int util_check_hostport(const char *s, int default_port, char *err, size_t errlen)
{
	if (!s || !*s)
		return hp_fail(err, errlen, "empty address; expected HOST[:PORT]");
	for (const char *p = s; *p; p++) {
		unsigned char c = (unsigned char)*p;
		if (c == ' ' || c == '\t')
			return hp_fail(err, errlen, "spaces are not allowed in an address");
		if (c < 0x20 || c == 0x7f)
			return hp_fail(err, errlen, "control characters are not allowed in an address");
		if (c >= 0x80)
			return hp_fail(err, errlen, "only ASCII is allowed in an address (write an "
						    "international name in its xn-- form)");
	}
	const char *host = s, *port = NULL;
	size_t hl;
	bool v6 = false;
	if (s[0] == '[') {
		const char *e = strchr(s, ']');
		if (!e)
			return hp_fail(err, errlen, "missing ']' after the IPv6 address");
		host = s + 1;
		hl = (size_t)(e - host);
		v6 = true;
		if (e[1] == ':')
			port = e + 2;
		else if (e[1] != '\0')
			return hp_fail(err, errlen, "expected ':PORT' or nothing after ']'");
	} else {
		const char *c = strchr(s, ':');
		if (c && strchr(c + 1, ':'))
			return hp_fail(err, errlen, "write an IPv6 address in brackets, like "
						    "[fd00::1]:7300");
		hl = c ? (size_t)(c - s) : strlen(s);
		if (c)
			port = c + 1;
	}
	if (hl == 0)
		return hp_fail(err, errlen, "empty host; expected HOST[:PORT]");
	if (v6) {
		char buf[INET6_ADDRSTRLEN + 1];
		struct in6_addr a6;
		if (hl >= sizeof buf)
			return hp_fail(err, errlen, "not a valid IPv6 address inside [ ]");
		memcpy(buf, host, hl);
		buf[hl] = '\0';
		if (inet_pton(AF_INET6, buf, &a6) != 1)
			return hp_fail(err, errlen, "not a valid IPv6 address inside [ ]");
	} else {
		char buf[16];
		struct in_addr a4;
		bool ipv4 = false;
		if (hl < sizeof buf) {
			memcpy(buf, host, hl);
			buf[hl] = '\0';
			ipv4 = inet_pton(AF_INET, buf, &a4) == 1;
		}
		if (!ipv4) {
			int r = check_dns_name(host, hl, err, errlen);
			if (r < 0)
				return r;
		}
	}
	if (!port) {
		if (default_port < 1 || default_port > 65535)
			return hp_fail(err, errlen, "missing :PORT after the host");
		return 0;
	}
	if (!*port)
		return hp_fail(err, errlen, "empty port after ':'");
	long v = 0;
	if (strlen(port) > 5 && strspn(port, "0123456789") == strlen(port))
		return hp_fail(err, errlen, "the port is not a number from 1 to 65535 (at most 5 digits)");
	for (const char *p = port; *p; p++) {
		if (!isdigit((unsigned char)*p))
			return hp_fail(err, errlen, "the port is not a number from 1 to 65535");
		v = v * 10 + (*p - '0');
		if (v > 65535)
			return hp_fail(err, errlen, "the port is above 65535");
	}
	if (v < 1)
		return hp_fail(err, errlen, "the port must be from 1 to 65535");
	return 0;
}

size_t util_strlcpy(char *dst, const char *src, size_t size)
{
	size_t n = strlen(src);
	if (size) {
		size_t c = n < size - 1 ? n : size - 1;
		memcpy(dst, src, c);
		dst[c] = '\0';
	}
	return n;
}

bool util_valid_name(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (n == 0 || n > 63 || !isalnum((unsigned char)s[0]))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '-'))
			return false;
	return true;
}

bool util_http_url(const char *u, bool https)
{
	size_t skip = strncmp(u, "http://", 7) == 0 ? 7 : https && strncmp(u, "https://", 8) == 0 ? 8 : 0;
	if (!skip || !u[skip] || u[skip] == '/')
		return false;
	for (const char *q = u; *q; q++)
		if ((unsigned char)*q <= ' ' || *q == 0x7f)
			return false;
	return true;
}

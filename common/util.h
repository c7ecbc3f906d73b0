/* util: small helpers shared by every binary. */
#ifndef SPARK_UTIL_H
#define SPARK_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

int64_t util_now(void);        /* wall clock, Unix seconds */
uint64_t util_now_ms(void);    /* monotonic milliseconds */
/* mkdir -p with mode for each created component. */
int util_mkdirs(const char *path, int mode);
/* Write a whole file atomically (tmp in same dir + fsync + rename). */
int util_write_file(const char *path, const void *data, size_t len, int mode);
/* Read a whole file (NUL-terminated, up to max bytes). Caller frees. */
int util_read_file(const char *path, char **out, size_t *len, size_t max);
/* The longest lifetime a join token may be given (init --ttl, token create
 * --ttl): ten years. Far below what would overflow created_at + ttl. */
#define UTIL_TTL_MAX_S (3650LL * 86400)
/* "24h", "90m", "30s", "7d", "1h30m" or plain seconds -> seconds. -EINVAL on junk. */
int util_parse_duration(const char *s, int64_t *secs);
/* Seconds -> "3s", "5m", "2h", "4d" (largest whole unit, like kubectl AGE). */
void util_fmt_age(int64_t secs, char *buf, size_t len);
/* "host:port", "[v6]:port", "host" (port = def_port). -EINVAL on junk. */
int util_split_hostport(const char *s, int def_port, char *host, size_t hostlen, int *port);
/* Validate an address a person typed: HOST[:PORT], HOST a numeric IPv4
 * (192.0.2.1), a bracketed numeric IPv6 ([fd00::1]) or a DNS name (letters,
 * digits, '-' and '.'; labels of 1-63 not starting or ending with '-'; at most
 * 253 in all; a name whose last label is all digits must be an IPv4 address),
 * PORT 1-65535. Without ":PORT" the address is valid when default_port is
 * 1-65535, and "missing :PORT" otherwise. 0, or -EINVAL with a message for
 * people in err (it quotes nothing of s: the caller names the flag). */
int util_check_hostport(const char *s, int default_port, char *err, size_t errlen);
/* Copy with truncation, always NUL-terminated; returns src length. */
size_t util_strlcpy(char *dst, const char *src, size_t size);
/* Node/cluster names: 1-63 chars of [a-z0-9-], starting with a letter or digit. */
bool util_valid_name(const char *s);
/* An absolute http:// (or, with https, https://) URL with a host, and no
 * space or control character anywhere. */
bool util_http_url(const char *u, bool https);

#endif

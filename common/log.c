#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static enum log_level cur_level = LOG_INFO;
static char prefix[128];

void log_set_level(enum log_level lvl) { cur_level = lvl; }
enum log_level log_get_level(void) { return cur_level; }

int log_parse_level(const char *s)
{
	static const char *names[] = {"error", "warn", "info", "debug"};
	for (int i = 0; i < 4; i++)
		if (s && strcmp(s, names[i]) == 0)
			return i;
	return -EINVAL;
}

void log_set_prefix(const char *kv)
{
	snprintf(prefix, sizeof prefix, "%s", kv ? kv : "");
}

const char *log_q(const char *s)
{
	static char ring[8][256];
	static unsigned slot;
	char *out = ring[slot++ % 8];
	size_t o = 0;
	if (!s)
		s = "";
	int needs = *s == '\0';
	for (const char *p = s; *p; p++)
		if (*p == ' ' || *p == '"' || *p == '=' || *p == '\\' || (unsigned char)*p < 0x20)
			needs = 1;
	if (!needs) {
		snprintf(out, 256, "%s", s);
		return out;
	}
	out[o++] = '"';
	for (const char *p = s; *p && o < 250; p++) {
		unsigned char ch = (unsigned char)*p;
		if (ch == '"' || ch == '\\') {
			out[o++] = '\\';
			out[o++] = (char)ch;
		} else if (ch == '\n') {
			out[o++] = '\\';
			out[o++] = 'n';
		} else if (ch < 0x20) {
			out[o++] = '?';
		} else {
			out[o++] = (char)ch;
		}
	}
	out[o++] = '"';
	out[o] = '\0';
	return out;
}

void log_msg(enum log_level lvl, const char *msg, const char *fmt, ...)
{
	static const char *names[] = {"error", "warn", "info", "debug"};
	if (lvl > cur_level)
		return;
	struct timeval tv;
	gettimeofday(&tv, NULL);
	struct tm tm;
	gmtime_r(&tv.tv_sec, &tm);
	char line[2048];
	int n = snprintf(line, sizeof line,
			 "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s msg=%s%s%s",
			 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
			 tm.tm_min, tm.tm_sec, (long)(tv.tv_usec / 1000), names[lvl],
			 msg, prefix[0] ? " " : "", prefix);
	if (n < 0 || (size_t)n >= sizeof line)
		n = sizeof line - 2;
	if (fmt && *fmt) {
		line[n++] = ' ';
		va_list ap;
		va_start(ap, fmt);
		int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
		va_end(ap);
		if (m > 0)
			n += m < (int)(sizeof line - (size_t)n - 2) ? m : (int)(sizeof line - (size_t)n - 2);
	}
	line[n++] = '\n';
	fwrite(line, 1, (size_t)n, stderr);
}

/* log: one event per line, logfmt (key=value), to stderr.
 *   log_info("join_ok", "node=%s addr=%s", name, addr);
 * prints: ts=2026-11-29T18:00:00.123Z level=info msg=join_ok node=spark-2 addr=...
 * Values that may hold spaces or quotes go through log_q(), which returns a
 * quoted copy in a small rotating buffer (valid until 8 more log_q calls). */
#ifndef SPARK_LOG_H
#define SPARK_LOG_H

enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

void log_set_level(enum log_level lvl);
enum log_level log_get_level(void);
/* "error", "warn", "info", "debug" -> level; -EINVAL on anything else. */
int log_parse_level(const char *s);
void log_set_prefix(const char *kv); /* e.g. "node=spark-2", added to every line */

void log_msg(enum log_level lvl, const char *msg, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const char *log_q(const char *s);

#define log_error(m, ...) log_msg(LOG_ERROR, m, __VA_ARGS__)
#define log_warn(m, ...)  log_msg(LOG_WARN, m, __VA_ARGS__)
#define log_info(m, ...)  log_msg(LOG_INFO, m, __VA_ARGS__)
#define log_debug(m, ...) log_msg(LOG_DEBUG, m, __VA_ARGS__)

#endif

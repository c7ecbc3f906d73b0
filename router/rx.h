/* rx: the policy's regular expressions (rule condition regex:), on PCRE2 with
 * limits, so that one match costs a bounded time whatever the pattern and the
 * text. A match looks at the first RX_TEXT_MAX bytes of a text at most; each
 * start position may take RX_MATCH_LIMIT backtracking steps (JIT stack
 * RX_JIT_STACK_MAX, interpreter heap RX_HEAP_LIMIT_KIB and depth
 * RX_DEPTH_LIMIT); a match past a limit is -E2BIG, which callers count as no
 * match. Patterns are case-insensitive, ^ and $ match at line breaks, . does
 * not match a newline (POSIX's REG_ICASE | REG_NEWLINE); GNU's \< and \> are
 * translated. Compiled patterns are immutable and may be matched from several
 * threads at once. Reference: docs/router.md ("Regular expressions"). */
#ifndef SPARK_ROUTER_RX_H
#define SPARK_ROUTER_RX_H

#include <stdbool.h>
#include <stddef.h>

#define RX_PATTERN_MAX 1024
#define RX_TEXT_MAX (32 * 1024)
#define RX_MATCH_LIMIT 10000
#define RX_DEPTH_LIMIT 10000
#define RX_HEAP_LIMIT_KIB 4096
#define RX_JIT_STACK_MAX (1024 * 1024)

struct rx;

/* Compile a pattern (NUL-terminated, at most RX_PATTERN_MAX bytes): 0 with
 * *out, or -EINVAL with what is wrong and where in err, or -ENOMEM. */
int rx_compile(const char *pattern, struct rx **out, char *err, size_t errlen);
void rx_free(struct rx *x);

/* Match against text[0..len) (valid UTF-8), of which only the first
 * RX_TEXT_MAX bytes (cut at a character boundary, and then $ does not match
 * at the cut): 1 match, 0 no match, -E2BIG a limit was hit, -EINVAL the text
 * is not UTF-8, -ENOMEM. */
int rx_match(const struct rx *x, const char *text, size_t len);

/* Why the time of this pattern depends on the limits rather than on its
 * shape (a backreference, a repeated group holding a repeat or
 * alternatives: exponential backtracking), for people; NULL if none. */
const char *rx_unbounded(const char *pattern);

/* Whether the compiled pattern runs JIT-compiled code. */
bool rx_jit(const struct rx *x);
/* The pattern as written. */
const char *rx_pattern(const struct rx *x);

#endif

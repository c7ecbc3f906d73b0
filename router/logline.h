/* logline: one line of the routing log (docs/router.md, "Routing log"),
 * written straight into a caller's buffer without building a json_t. The
 * fields and their order are those the router always wrote; strings are
 * escaped as jansson escapes them (", \, control characters; UTF-8 as is),
 * and a byte that is not part of valid UTF-8 becomes U+FFFD (one per maximal
 * invalid sequence). Reals are fixed-point: ts to the microsecond (6
 * decimals), the durations in ms to the microsecond (3 decimals), trailing
 * zeros dropped but one decimal kept, so every real stays a JSON real. Pure. */
#ifndef SPARK_ROUTER_LOGLINE_H
#define SPARK_ROUTER_LOGLINE_H

#include <stdbool.h>
#include <stddef.h>

struct logline {
	double ts;                       /* seconds since the epoch */
	const char *request_id, *model, *route, *rule, *target; /* NUL-terminated */
	int status, attempts;
	bool stream;
	long long tokens_estimated;
	bool client_closed;
	double ms, overhead_ms;
	bool has_ttft;                   /* ttft_ms is written only then */
	double ttft_ms;
	const char *upstream_error;      /* why the upstream failed after the answer began
					  * (a stall, a broken connection), or NULL: written only then */
};

/* Write the line with its '\n' and a NUL into buf when it fits (the return
 * value is below cap); return its length without the NUL either way, like
 * snprintf. */
size_t logline_format(char *buf, size_t cap, const struct logline *l);

#endif

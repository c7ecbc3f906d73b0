/* probe_int: what probe.c (TCP) and probe_verbs.c (RDMA) share. Not public. */
#ifndef SPARK_TOPO_PROBE_INT_H
#define SPARK_TOPO_PROBE_INT_H

#include "topology/probe.h"

#include <stdint.h>

uint64_t probe_now_ns(void);
/* Sort v (n round trips in ns) and add {"iterations","size","p50_us","p99_us",
 * "min_us","max_us"} as one-way (half round trip) microseconds. */
json_t *probe_latency_json(uint64_t *v, size_t n, unsigned size);
/* Add "thresholds", "findings" and "result" to a client result. */
void probe_judge(json_t *res, const char *transport, const struct topo_probe_thresholds *t);
/* A failed run: {"transport","role","netdev","result":"fail","findings":[probe_error]}. */
json_t *probe_error_result(const char *transport, const char *role, const char *netdev,
			   const char *msg);
/* The netdev's MTU, or -errno. */
int probe_netdev_mtu(const char *netdev);

#endif

/* libFuzzer target: the neighbour-discovery frame decoder (topology/l2frame.h)
 * and, for inputs starting with '{' or '[', the classifier, the cable-map
 * builder and the addressing plan (with the members' "host_addresses") over
 * whatever JSON that is (the head feeds them what workers send).
 * Garbage must give a clean error, never a crash, leak or out-of-bounds read;
 * a frame that decodes must re-encode to the same bytes. */
#include "topology/addrplan.h"
#include "topology/classify.h"
#include "topology/l2frame.h"

/* Compiled into the target so the code under test carries the fuzzer's
 * coverage instrumentation (see fuzz_sysfs.c). */
#include "topology/addrplan.c"
#include "topology/classify.c"
#include "topology/l2frame.c"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_CLUSTER "c-fuzz"
#define FUZZ_SECRET "fuzz-secret"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_json(const uint8_t *data, size_t size)
{
	json_error_t e;
	json_t *j = json_loadb((const char *)data, size, 0, &e);
	if (!j)
		return;
	json_t *v = NULL, *map = NULL;
	char err[256];
	struct topo_classify_opts o = {NULL};
	if (topo_classify(j, &o, &v, err, sizeof err) == 0)
		json_decref(v);
	/* the input as a verdict, and its host_addresses on the classified one */
	static const struct topo_addrplan_opts pools[] = {{NULL, 0}, {"169.254.0.0/16", 24}, {"10.0.0.0/8", 20}};
	for (size_t i = 0; i < sizeof pools / sizeof pools[0]; i++) {
		json_t *plan = NULL;
		if (topo_addrplan_make(j, &pools[i], &plan, err, sizeof err) == 0)
			json_decref(plan);
	}
	if (json_is_object(j) && topo_classify(j, &o, &v, err, sizeof err) == 0) {
		json_t *plan = NULL;
		json_object_set(v, "host_addresses", json_object_get(j, "host_addresses"));
		if (topo_addrplan_make(v, &pools[1], &plan, err, sizeof err) == 0)
			json_decref(plan);
		json_decref(v);
	}
	o.expect = "ring";
	if (topo_classify(j, &o, &v, err, sizeof err) == 0)
		json_decref(v);
	if (topo_cablemap_build(json_is_array(j) ? j : json_object_get(j, "nodes"), &map) == 0) {
		if (topo_classify(map, NULL, &v, err, sizeof err) == 0)
			json_decref(v);
		json_decref(map);
	}
	json_decref(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 0 && (data[0] == '{' || data[0] == '[')) {
		fuzz_json(data, size);
		return 0;
	}
	static struct topo_l2key key;
	static int have_key;
	if (!have_key) {
		topo_l2key_init(&key, FUZZ_SECRET);
		have_key = 1;
	}
	/* An exact-size copy so ASan catches any read past size. */
	uint8_t *buf = malloc(size ? size : 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	struct topo_l2frame f;
	int r = topo_l2frame_decode(buf, size, FUZZ_CLUSTER, &key, &f);
	if (r == 0) {
		uint8_t out[TOPO_L2_MAX_FRAME];
		size_t len = 0;
		if (topo_l2frame_encode(&f, &key, out, sizeof out, &len) != 0)
			abort(); /* every decoded frame must be encodable */
		/* v1 frames without extension bytes re-encode byte for byte. */
		size_t plen = (size_t)buf[20] << 8 | buf[21];
		if (len == TOPO_L2_ETH_HLEN + plen && memcmp(out + 6, buf + 6, len - 6) != 0)
			abort();
		struct topo_l2frame g;
		if (topo_l2frame_decode(out, len, FUZZ_CLUSTER, &key, &g) != 0 ||
		    strcmp(g.node_id, f.node_id) || g.seq != f.seq || g.mtu != f.mtu)
			abort();
	}
	(void)topo_l2frame_strerror(r);
	/* Any cluster and no key: must never report success. */
	if (topo_l2frame_decode(buf, size, "other", NULL, &f) == 0)
		abort();
	free(buf);
	return 0;
}

/* Synthetic cable maps for the classifier tests (classify.h input shape).
 * Node i (0-based) is id "id-<i+1>", name "spark-<i+1>", with ports "0" and
 * "1", twins named like a Spark's, carrier up, MTU 9000, nothing heard. */
#ifndef MAPGEN_H
#define MAPGEN_H

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static const char *const mg_twin_names[2][2] = {{"enp1s0f0np0", "enP2p1s0f0np0"},
						{"enp1s0f1np1", "enP2p1s0f1np1"}};

static __attribute__((unused)) json_t *mg_map(int n)
{
	json_t *nodes = json_array();
	for (int i = 0; i < n; i++) {
		char id[16], name[16];
		snprintf(id, sizeof id, "id-%d", i + 1);
		snprintf(name, sizeof name, "spark-%d", i + 1);
		json_t *ports = json_array();
		for (int p = 0; p < 2; p++) {
			json_t *tw = json_array();
			for (int t = 0; t < 2; t++)
				json_array_append_new(tw, json_pack("{s:s, s:b, s:i, s:[]}", "netdev",
								    mg_twin_names[p][t], "carrier", 1,
								    "mtu", 9000, "heard"));
			json_array_append_new(ports, json_pack("{s:s, s:o}", "port", p ? "1" : "0",
							       "twins", tw));
		}
		json_array_append_new(nodes, json_pack("{s:s, s:s, s:o}", "id", id, "name", name,
						       "ports", ports));
	}
	return json_pack("{s:o}", "nodes", nodes);
}

static __attribute__((unused)) json_t *mg_twin(json_t *m, int node, int port, int twin)
{
	json_t *n = json_array_get(json_object_get(m, "nodes"), (size_t)node);
	json_t *p = json_array_get(json_object_get(n, "ports"), (size_t)port);
	return json_array_get(json_object_get(p, "twins"), (size_t)twin);
}

static __attribute__((unused)) long mg_mtu(json_t *m, int node, int port, int twin)
{
	return (long)json_integer_value(json_object_get(mg_twin(m, node, port, twin), "mtu"));
}

/* Twin (a, pa, ta) hears twin (b, pb, tb). */
static __attribute__((unused)) void mg_hear(json_t *m, int a, int pa, int ta, int b, int pb, int tb)
{
	char id[16], name[16], port[4];
	snprintf(id, sizeof id, "id-%d", b + 1);
	snprintf(name, sizeof name, "spark-%d", b + 1);
	snprintf(port, sizeof port, "%d", pb);
	json_array_append_new(json_object_get(mg_twin(m, a, pa, ta), "heard"),
			      json_pack("{s:s, s:s, s:s, s:i, s:s, s:i}", "node_id", id, "node_name",
					name, "port", port, "twin", tb, "netdev",
					mg_twin_names[pb][tb], "mtu", (int)mg_mtu(m, b, pb, tb)));
}

/* Remove everything twin (a, pa, ta) heard from node b. */
static __attribute__((unused)) void mg_unhear(json_t *m, int a, int pa, int ta, int b)
{
	char id[16];
	snprintf(id, sizeof id, "id-%d", b + 1);
	json_t *h = json_object_get(mg_twin(m, a, pa, ta), "heard");
	for (size_t i = json_array_size(h); i-- > 0;)
		if (strcmp(json_string_value(json_object_get(json_array_get(h, i), "node_id")), id) == 0)
			json_array_remove(h, i);
}

/* One twin of a cable, heard both ways. */
static __attribute__((unused)) void mg_cable_twin(json_t *m, int a, int pa, int b, int pb, int t)
{
	mg_hear(m, a, pa, t, b, pb, t);
	mg_hear(m, b, pb, t, a, pa, t);
}

/* A direct cable: both twins, both ways. */
static __attribute__((unused)) void mg_cable(json_t *m, int a, int pa, int b, int pb)
{
	mg_cable_twin(m, a, pa, b, pb, 0);
	mg_cable_twin(m, a, pa, b, pb, 1);
}

/* Crossed ring over nodes first..first+n-1: port 0 of i to port 1 of i+1. */
static __attribute__((unused)) void mg_ring(json_t *m, int first, int n)
{
	for (int i = 0; i < n; i++)
		mg_cable(m, first + i, 0, first + (i + 1) % n, 1);
}

/* One L2 domain: every twin of every (node, port) listed hears every twin
 * of the others on other nodes. */
static __attribute__((unused)) void mg_switch(json_t *m, const int *nodes, const int *ports, int n)
{
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++)
			if (nodes[i] != nodes[j])
				for (int ta = 0; ta < 2; ta++)
					for (int tb = 0; tb < 2; tb++)
						mg_hear(m, nodes[i], ports[i], ta, nodes[j], ports[j], tb);
}

static __attribute__((unused)) void mg_set(json_t *m, int node, int port, int twin, const char *key, json_t *v)
{
	json_object_set_new(mg_twin(m, node, port, twin), key, v);
}

/* Nothing plugged into (node, port): no carrier on its twins. */
static __attribute__((unused)) void mg_unplug(json_t *m, int node, int port)
{
	for (int t = 0; t < 2; t++)
		json_object_set_new(mg_twin(m, node, port, t), "carrier", json_false());
}

#endif

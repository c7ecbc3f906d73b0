#include "session.h"

#include <stdlib.h>
#include <string.h>

#define PROBE 8

struct entry {
	uint64_t key; /* 0: empty */
	uint64_t used_ms;
	int target;
};

struct sessions {
	struct entry *e;
	size_t cap; /* a power of two */
	uint64_t ttl_ms;
};

struct sessions *sessions_new(size_t max, uint64_t ttl_ms)
{
	struct sessions *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->cap = 16;
	while (s->cap < max && s->cap < (1u << 24))
		s->cap <<= 1;
	s->e = calloc(s->cap, sizeof *s->e);
	if (!s->e) {
		free(s);
		return NULL;
	}
	s->ttl_ms = ttl_ms;
	return s;
}

void sessions_free(struct sessions *s)
{
	if (s)
		free(s->e);
	free(s);
}

uint64_t session_key(const char *route, const char *id, size_t idlen)
{
	uint64_t h = 1469598103934665603ULL; /* FNV-1a 64 */
	for (const char *p = route; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ULL;
	h = (h ^ 0xff) * 1099511628211ULL;
	for (size_t i = 0; i < idlen; i++)
		h = (h ^ (unsigned char)id[i]) * 1099511628211ULL;
	return h ? h : 1;
}

static int live(const struct sessions *s, const struct entry *e, uint64_t now)
{
	return e->key && now - e->used_ms <= s->ttl_ms;
}

int sessions_get(struct sessions *s, uint64_t key, uint64_t now_ms)
{
	size_t m = s->cap - 1;
	for (size_t i = 0; i < PROBE; i++) {
		struct entry *e = &s->e[(key + i) & m];
		if (e->key == key) {
			if (!live(s, e, now_ms)) {
				e->key = 0;
				return -1;
			}
			e->used_ms = now_ms;
			return e->target;
		}
	}
	return -1;
}

void sessions_put(struct sessions *s, uint64_t key, int target, uint64_t now_ms)
{
	size_t m = s->cap - 1;
	struct entry *victim = NULL;
	for (size_t i = 0; i < PROBE; i++) {
		struct entry *e = &s->e[(key + i) & m];
		if (e->key == key || !live(s, e, now_ms)) {
			victim = e;
			break;
		}
		if (!victim || e->used_ms < victim->used_ms)
			victim = e;
	}
	victim->key = key;
	victim->target = target;
	victim->used_ms = now_ms;
}

void sessions_drop(struct sessions *s, uint64_t key)
{
	size_t m = s->cap - 1;
	for (size_t i = 0; i < PROBE; i++)
		if (s->e[(key + i) & m].key == key)
			s->e[(key + i) & m].key = 0;
}

size_t sessions_count(const struct sessions *s, uint64_t now_ms)
{
	size_t n = 0;
	for (size_t i = 0; i < s->cap; i++)
		n += live(s, &s->e[i], now_ms) ? 1 : 0;
	return n;
}

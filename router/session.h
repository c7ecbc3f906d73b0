/* session: which target a conversation started on, so that its next turns
 * go there too (the target's prompt cache). A bounded table keyed by route
 * and session key (the client's session header, or a hash of the first
 * messages); entries expire ttl seconds after their last use, and when the
 * table is full the least recently used entry of a probe window goes. Pure:
 * the caller passes the time. */
#ifndef SPARK_ROUTER_SESSION_H
#define SPARK_ROUTER_SESSION_H

#include <stddef.h>
#include <stdint.h>

struct sessions;

struct sessions *sessions_new(size_t max, uint64_t ttl_ms);
void sessions_free(struct sessions *s);
/* 64-bit key of a route and a session string. */
uint64_t session_key(const char *route, const char *id, size_t idlen);
/* The pinned target, or -1 (absent or expired). A hit refreshes the entry. */
int sessions_get(struct sessions *s, uint64_t key, uint64_t now_ms);
void sessions_put(struct sessions *s, uint64_t key, int target, uint64_t now_ms);
void sessions_drop(struct sessions *s, uint64_t key);
size_t sessions_count(const struct sessions *s, uint64_t now_ms);

#endif

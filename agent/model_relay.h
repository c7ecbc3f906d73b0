/* model_relay: the data plane of `model push` (issue 18, docs/models.md): a
 * chain of nodes source -> n1 -> n2 ..., every link a mutual-TLS conn (cluster
 * certificates; the peer's certificate CN must be the chain member expected at
 * that place: a certificate the CA signed is not enough), each node verifying
 * every chunk (SHA-256, model_manifest.h) before writing it and serving its
 * downstream from what it holds while it receives the rest.
 *
 * No agent state: the caller (the `model` service) gives the loop, the TLS
 * contexts, the chain with the members' data addresses and the manifest; the
 * control plane (who takes part, the space check, the CLI's progress) is the
 * caller's. On a link, upstream U and downstream D:
 *   U -> D  mp_hello {push, from, chain, name, manifest_bytes, ticket, expires_at}
 *                                      D checks U's certificate: a member before it
 *                                      (the first link of a hop; with lanes, U opens
 *                                      one more per lane after mp_need, whose
 *                                      mp_hello {push, from, lane} D takes from the
 *                                      same member, and sends pieces over all)
 *   U -> D  mp_manifest {off, text}    the manifest's JSON text in pieces
 *   D -> U  mp_need {node, bits}       the chunks D lacks (base64 bitmap), once
 *                                      the chain below D is ready too
 *   U -> D  mp_piece {chunk, off} + bytes  pieces of a chunk in order, each a
 *                                      binary frame (proto.h): the raw bytes follow
 *                                      the JSON header; accepted only from an
 *                                      upstream whose hello was taken
 *   D -> U  mp_ack {chunk} | mp_bad {chunk} (hash mismatch: U sends it again),
 *                                      on the link the chunk came over; the
 *                                      MR_BAD_MAX-th bad copy of one chunk is
 *                                      answered mp_bad {chunk, give_up: true}: U
 *                                      sends it no more, D ends without it and its
 *                                      report names U (bad_from)
 *   D -> U  mp_want {chunk}            D's own copy failed its hash as D read it
 *                                      for its downstream: U sends it again (its
 *                                      copy checked as read, or asked of its own
 *                                      upstream); D mends its copy and forwards it
 *   D -> U  mp_progress {node, bytes, total}   (relayed up to the source)
 *   U -> D  mp_end                     nothing more will come
 *   D -> U  mp_done {nodes:[report]}   D's and its downstream's reports
 *   either way: mp_keepalive             every MR_KEEPALIVE_MS on every link
 *                                      whose hello was taken (no content)
 * A chain member with skip set is passed over: nobody dials it (a repair
 * round: the same chain and ticket, only some members taking part).
 *
 * Limits on the receiving side (docs/models.md, "Limits of the data port"):
 * at most MR_PREHELLO_MAX connections without a hello taken (the oldest is
 * dropped for a newcomer), each closed MR_HELLO_MS after it was accepted
 * (TLS handshake and hello); an announced push's hello carries the model's
 * name and the ticket, which is checked (with who the certificate names and
 * its place in the chain) before anything sized by the peer is allocated: the
 * manifest (at most MR_MANIFEST_MAX bytes) only then; at most
 * MR_PUSHES_PER_PEER announced pushes from one member and MR_PUSHES_MAX in
 * all at once (`busy`); a link that receives nothing for MR_IDLE_MS is
 * closed, and a push whose upstream went away before it was ready ends at
 * once (its id free again), one that was receiving after up_wait_ms.
 * A node whose downstream goes away serves the next member of the chain; a
 * node whose upstream goes away waits up_wait_ms for another upstream (the one
 * before it reconnects there), then ends with what it has. */
#ifndef SPARK_MODEL_RELAY_H
#define SPARK_MODEL_RELAY_H

#include "model_manifest.h"

#include <jansson.h>
#include <openssl/ssl.h>
#include <stdint.h>
#include <uv.h>

#define MR_PIECE (512u << 10) /* raw bytes per mp_piece frame (and per mp_manifest text) */
#define MR_WINDOW 6           /* chunks sent and not acknowledged, per link, */
#define MR_WINDOW_BYTES (24u << 20) /* and at most this many bytes of them (conn.c
				     * drops a peer with more than 32 MiB queued) */
#define MR_BAD_MAX 3          /* one chunk corrupted this often: given up on */
#define MR_UP_WAIT_MS 10000

#define MR_MANIFEST_MAX ((size_t)64 << 20) /* an announced manifest's text */
#define MR_HELLO_MS 10000     /* accepted to hello taken, the TLS handshake included */
#define MR_PREHELLO_MAX 64    /* connections without a hello taken: the oldest dropped */
#define MR_IDLE_MS 120000     /* a link that receives no frame this long is closed */
#define MR_KEEPALIVE_MS 15000 /* every link sends mp_keepalive this often */
#define MR_PUSHES_MAX 16      /* announced pushes taking part here at once */
#define MR_PUSHES_PER_PEER 4  /* of them, announced by one member */

#define MR_LANES 2 /* data links per hop: the two twins of the cabled port */

struct mr_member {
	char id[40];    /* node id: the CN of its certificate */
	char host[128]; /* its data address that every member reaches (the agent's) */
	int port;
	/* Its fabric addresses that the member before it in the chain reaches
	 * (one per twin of the cable between them): that member opens one link to
	 * each and splits the chunks over them. None: host carries the hop. A
	 * member that serves it in place of a member gone away uses host. */
	char lanes[MR_LANES][48];
	unsigned nlanes;
	bool skip; /* not part of this push: passed over (carried in mp_hello) */
};

struct mr_engine;

struct mr_cbs {
	/* A node's progress (bytes received of those it lacked): on the source
	 * every node's, about every 200 ms; on a receiver its own, per chunk. */
	void (*on_progress)(void *data, const char *node, uint64_t bytes, uint64_t total);
	/* Every node, once: its part has ended. status 0 when this node (and, on
	 * the source, every node) is complete; report is an array of
	 * {"node", "status": complete|incomplete|down|failed, "bytes_written",
	 * "chunks_written", "chunks_bad", "message", and for a node that gave up
	 * on chunks its upstream kept corrupting: "bad_from" (that upstream's id)
	 * and "corrupt_chunks" [{"path", "chunk"}]} (borrowed). The push is no
	 * longer found by its id when this runs: a push of the same id may start. */
	void (*on_done)(void *data, int status, const json_t *report);
};

struct mr_push_opts {
	const char *push_id;                /* 1-64 of [0-9a-f] */
	const struct mm_manifest *m;        /* borrowed until on_done */
	const struct mr_member *chain;      /* chain[0] is the source; copied */
	size_t nchain;
	size_t self;                        /* this node's place */
	const char *src_dir;                /* self == 0: the model directory */
	const char *store_root;             /* self > 0: ROOT of the store */
	unsigned up_wait_ms;                /* 0: MR_UP_WAIT_MS */
	/* The push's permission, carried in every hello: a signature over the
	 * push, the model's name, expires_at and the chain (mr_ticket_text) that
	 * an announced push's receivers check (mr_engine_accept). */
	const char *ticket;
	int64_t expires_at;
	/* Tests only: the first time this node sends chunk test_corrupt - 1,
	 * one byte of it is flipped on the wire. 0: off. */
	size_t test_corrupt;
};

/* srv_ctx verifies client certificates against the cluster CA (tls_server_ctx
 * with ca_file), cli_ctx presents this node's certificate and verifies the
 * server's (tls_client_ctx with cert, key and ca_file). Borrowed. */
struct mr_engine *mr_engine_new(uv_loop_t *loop, SSL_CTX *srv_ctx, SSL_CTX *cli_ctx,
				const char *self_id);
/* Listen for data connections (port 0: any; mr_engine_port tells). */
int mr_engine_listen(struct mr_engine *e, const char *host, int port, char *err, size_t errlen);
int mr_engine_port(struct mr_engine *e);
/* Begin this node's part of a push. A receiver (self > 0) must have passed
 * the space check; it reads what it holds (mm_store_have), prepares the store
 * (mm_store_begin) and waits for its upstream. The source connects to
 * chain[1]. 0 or a negative errno with err filled. */
int mr_push_start(struct mr_engine *e, const struct mr_push_opts *o, const struct mr_cbs *cbs,
		  void *data, char *err, size_t errlen);
/* Take part in pushes announced by an upstream's mp_hello (its chain and
 * manifest: this node must be in the chain, the sender before it): each is
 * received into store_root (after the room check: a node that lacks room
 * answers no_space and the push is refused before its first byte), with cbs
 * and data for its progress and end. Without this, only pushes started here
 * with mr_push_start are accepted. */
typedef int (*mr_verify_fn)(void *data, const char *text, const char *ticket,
			    int64_t expires_at);
void mr_engine_accept(struct mr_engine *e, const char *store_root, const struct mr_cbs *cbs,
		      void *data);
/* Who may announce a push: verify(data, text, ticket, expires_at) returns 0
 * for a ticket that signs text (mr_ticket_text) and has not expired. Called
 * on the hello (its name: the manifest that follows must bear it), before
 * anything of the push is allocated; a refusal answers not_authorized, the
 * link closes and nothing is kept or written. Without it every member of the
 * cluster that is before this node in the chain it names may push (tests). */
void mr_engine_verify(struct mr_engine *e, mr_verify_fn verify, void *data);
/* "sparkctl-push-v1\nPUSH\nNAME\nEXPIRES\nID0,ID1,...": what a ticket signs
 * (malloc'd). */
char *mr_ticket_text(const char *push_id, const char *name, int64_t expires_at,
		     const struct mr_member *chain, size_t n);
/* Tests only: shorter times (0: keep the default) for MR_HELLO_MS,
 * MR_IDLE_MS and MR_KEEPALIVE_MS. */
void mr_engine_test_times(struct mr_engine *e, unsigned hello_ms, unsigned idle_ms,
			  unsigned keepalive_ms);
/* What the engine holds, for tests and the logs: connections, those without
 * a hello taken, and the pushes announced here that are still running. */
struct mr_stats {
	size_t links, prehello, announced;
};
void mr_engine_stats(const struct mr_engine *e, struct mr_stats *st);
/* Tests only: the free bytes this node claims for the room check. */
void mr_engine_test_avail(struct mr_engine *e, uint64_t bytes);
/* Tests only: every push this node sends, it flips one byte of chunk
 * chunk_plus_1 - 1 every time it sends it (a lying relay). 0: off. */
void mr_engine_test_corrupt(struct mr_engine *e, size_t chunk_plus_1);
/* Stop a push: its links close, on_done is called with -ECANCELED. */
void mr_push_cancel(struct mr_engine *e, const char *push_id);
/* Tests only (tests/fuzz/fuzz_model_relay.c): accept the connection pending
 * on a plain listener as a link from peer_id, as if its certificate named it. */
int mr_engine_adopt(struct mr_engine *e, uv_stream_t *server, const char *peer_id);
/* Close everything; the engine is freed once its last handle has closed
 * (run the loop). No callback runs after this. */
void mr_engine_close(struct mr_engine *e);

/* m's lanes from JSON (absent/null: none; else an array of at most MR_LANES
 * address strings). 0 or -EINVAL. */
int mr_member_lanes(const json_t *lanes, struct mr_member *m);
/* A push id: 1-64 lower-case hex digits. */
bool mr_valid_push_id(const char *s);

#endif

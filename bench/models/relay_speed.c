/* relay_speed: the CPU cost of model push's data plane (agent/model_relay.c)
 * on one machine: a source and three relays in one process and one libuv loop
 * (so one core does all four nodes' work: TLS 1.3 both ways, base64, SHA-256
 * on every receive and on every send from disk, the writes), over loopback.
 *   relay_speed DIR_MIB [CHUNK_KIB]    (built and run by bench/models/run.sh)
 * Prints the model size, seconds, and the rate at which the last node got it. */
#include "model_relay.h"

#include "conn.h"
#include "pki.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NN 4
static char tmp[64];
static bool done[NN];
static int status0;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void issue(X509 *ca, EVP_PKEY *cak, const char *cn)
{
	EVP_PKEY *k;
	X509 *x;
	char serial[41], p[256];
	if (pki_make_key(&k) || pki_issue(ca, cak, k, cn, 10, &x, serial))
		exit(1);
	char *leaf = pki_cert_to_pem(x), *cap = pki_cert_to_pem(ca);
	char *chain = malloc(strlen(leaf) + strlen(cap) + 1);
	strcpy(chain, leaf);
	strcat(chain, cap);
	snprintf(p, sizeof p, "%s/%s.crt", tmp, cn);
	pki_write_pem_text(p, chain, 0644);
	snprintf(p, sizeof p, "%s/%s.key", tmp, cn);
	pki_write_key(p, k);
	free(leaf);
	free(cap);
	free(chain);
}

static void on_done(void *data, int status, const json_t *report)
{
	(void)report;
	int i = (int)(intptr_t)data;
	done[i] = true;
	if (i == 0)
		status0 = status;
}

int main(int argc, char **argv)
{
	size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 256;
	uint32_t chunk = (argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 10) : 4096) * 1024;
	signal(SIGPIPE, SIG_IGN);
	snprintf(tmp, sizeof tmp, "/tmp/relay_speed.XXXXXX");
	if (!mkdtemp(tmp))
		return 1;
	char src[128], p[256], cmd[512];
	snprintf(src, sizeof src, "%s/model", tmp);
	mkdir(src, 0755);
	for (size_t f = 0; f < 4; f++) { /* four shards */
		snprintf(cmd, sizeof cmd, "head -c %zu /dev/urandom > %s/shard-%zu.bin", mib << 18, src,
			 f);
		if (system(cmd))
			return 1;
	}
	EVP_PKEY *cak;
	X509 *ca;
	pki_make_key(&cak);
	pki_make_ca("bench", cak, &ca);
	snprintf(p, sizeof p, "%s/ca.pem", tmp);
	pki_write_cert(p, ca);
	static const char *ids[NN] = {"src", "n1", "n2", "n3"};
	uv_loop_t loop;
	uv_loop_init(&loop);
	struct mr_engine *e[NN];
	struct mr_member chain[NN] = {0}; /* no lanes: loopback only */
	char stores[NN][128], err[256];
	for (int i = 0; i < NN; i++) {
		issue(ca, cak, ids[i]);
		char c[256], k[256];
		snprintf(c, sizeof c, "%s/%s.crt", tmp, ids[i]);
		snprintf(k, sizeof k, "%s/%s.key", tmp, ids[i]);
		SSL_CTX *s = tls_server_ctx(c, k, p, err, sizeof err);
		SSL_CTX *cl = tls_client_ctx(c, k, p, err, sizeof err);
		e[i] = mr_engine_new(&loop, s, cl, ids[i]);
		if (mr_engine_listen(e[i], "127.0.0.1", 0, err, sizeof err))
			return 1;
		snprintf(chain[i].id, sizeof chain[i].id, "%s", ids[i]);
		snprintf(chain[i].host, sizeof chain[i].host, "127.0.0.1");
		chain[i].port = mr_engine_port(e[i]);
		snprintf(stores[i], sizeof stores[i], "%s/store-%s", tmp, ids[i]);
	}
	double t0 = now();
	struct mm_manifest *m;
	if (mm_build(src, "bench", chunk, &m, err, sizeof err)) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	double t1 = now();
	struct mr_cbs cbs = {.on_done = on_done};
	for (int i = NN - 1; i >= 0; i--) {
		struct mr_push_opts o = {.push_id = "be", .m = m, .chain = chain, .nchain = NN,
					 .self = (size_t)i, .src_dir = src, .store_root = stores[i]};
		if (mr_push_start(e[i], &o, &cbs, (void *)(intptr_t)i, err, sizeof err)) {
			fprintf(stderr, "%s\n", err);
			return 1;
		}
	}
	while (!(done[0] && done[1] && done[2] && done[3]))
		uv_run(&loop, UV_RUN_ONCE);
	double t2 = now();
	double bytes = (double)m->total_bytes;
	printf("model %.0f MiB in %u KiB chunks: manifest %.2f s (%.0f MB/s); chain src->n1->n2->n3 "
	       "%.2f s, %.0f MB/s to the last node (status %d)\n",
	       bytes / 1048576, chunk >> 10, t1 - t0, bytes / (t1 - t0) / 1e6, t2 - t1,
	       bytes / (t2 - t1) / 1e6, status0);
	for (int i = 0; i < NN; i++)
		mr_engine_close(e[i]);
	uv_run(&loop, UV_RUN_DEFAULT);
	snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
	return system(cmd) ? 1 : status0 != 0;
}

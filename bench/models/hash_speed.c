/* hash_speed: single-core throughput of the chunk hashes model push could use
 * (docs/models.md): SHA-256 through OpenSSL EVP (what it uses) and, when built
 * with -DHAVE_XXH3 against Debian's libxxhash, XXH3-128. 4 MiB chunks of
 * pseudo-random bytes, already in memory (the cost of the hash alone).
 *   cc -O2 hash_speed.c -lcrypto [-DHAVE_XXH3 -lxxhash] && ./a.out [MiB]
 * Prints one line per hash: name, MiB hashed, seconds, GB/s, Gb/s. */
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef HAVE_XXH3
#include <xxhash.h>
#endif

#define CHUNK (4u << 20)

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void report(const char *name, size_t mib, double s)
{
	double gbs = mib * 1048576.0 / s / 1e9;
	printf("%-10s %6zu MiB %7.3f s %6.2f GB/s %6.1f Gb/s\n", name, mib, s, gbs, gbs * 8);
}

int main(int argc, char **argv)
{
	size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 1024;
	uint8_t *buf = malloc(CHUNK);
	uint32_t x = 12345;
	for (size_t i = 0; i < CHUNK; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		buf[i] = (uint8_t)x;
	}
	size_t n = mib / 4;
	unsigned char md[32];
	unsigned int len;
	volatile unsigned sink = 0;
	EVP_Digest(buf, CHUNK, md, &len, EVP_sha256(), NULL); /* warm up */
	double t = now();
	for (size_t i = 0; i < n; i++) {
		buf[0] = (uint8_t)i;
		EVP_Digest(buf, CHUNK, md, &len, EVP_sha256(), NULL);
		sink += md[0];
	}
	report("sha256", n * 4, now() - t);
#ifdef HAVE_XXH3
	t = now();
	for (size_t i = 0; i < n * 4; i++) { /* 4x the bytes: it is much faster */
		buf[0] = (uint8_t)i;
		XXH128_hash_t h = XXH3_128bits(buf, CHUNK);
		sink += (unsigned)h.low64;
	}
	report("xxh3-128", n * 16, now() - t);
#endif
	(void)sink;
	free(buf);
	return 0;
}

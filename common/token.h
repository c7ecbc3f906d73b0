/* token: join tokens (common/: sparkctl checks the form before it sends one,
 * the agent parses it). Printed form:
 *   spk1.<CA SPKI SHA-256, 64 hex>.<token id, 16 hex>.<secret, 32 hex>
 * The CA hash lets a joiner pin the head's CA before it sends anything secret
 * (like kubeadm's discovery-token-ca-cert-hash). The head stores only
 * SHA-256(secret). */
#ifndef SPARK_TOKEN_H
#define SPARK_TOKEN_H

#include <stddef.h>

struct join_token {
	char ca_hash[65];
	char id[17];
	char secret[33];
};

/* 0 or -EINVAL (message in err). */
int token_parse(const char *s, struct join_token *t, char *err, size_t errlen);
void token_format(const struct join_token *t, char *out, size_t len);

#endif

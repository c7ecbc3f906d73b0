/* pki: the cluster's certificate authority and node identities (OpenSSL 3).
 * All keys are ECDSA P-256. The CA is made once at `sparkctl init`; a node makes
 * its own key and a CSR, and the head signs it: private keys never leave a node.
 * Files are PEM; private keys are written mode 0600 atomically (tmp + rename). */
#ifndef SPARK_PKI_H
#define SPARK_PKI_H

#include <openssl/evp.h>
#include <openssl/x509.h>
#include <stddef.h>

#define PKI_HASH_HEX 65 /* 64 hex chars + NUL */

int pki_make_key(EVP_PKEY **out);
/* Self-signed CA, CN "sparkctl CA <cluster_name>", 10 years, basicConstraints CA:TRUE. */
int pki_make_ca(const char *cluster_name, EVP_PKEY *key, X509 **out);
/* CSR with subject CN=cn, PEM text (caller frees). */
int pki_make_csr(EVP_PKEY *key, const char *cn, char **csr_pem);
/* Verify the CSR's self-signature, then issue a leaf certificate with subject
 * CN=cn (the CSR's own subject is ignored), notBefore = now - 1 hour (clock
 * skew), valid `days`, a random 128-bit serial, CA:FALSE, extendedKeyUsage
 * serverAuth+clientAuth. Returns PEM text and the serial as lowercase hex. */
int pki_sign_csr(X509 *ca, EVP_PKEY *ca_key, const char *csr_pem, const char *cn,
		 int days, char **cert_pem, char serial_hex[41]);
/* Issue a node leaf (subject CN=cn, OU=node) for a public key. */
int pki_issue(X509 *ca, EVP_PKEY *ca_key, EVP_PKEY *key, const char *cn, int days,
	      X509 **out, char serial_hex[41]);
/* The head's own leaf: the same, but OU=head. Only `init` (and the head's
 * own upgrade of a certificate made before roles existed) calls this; a CSR is
 * always signed as a node, so no member can obtain a head certificate. */
int pki_issue_head(X509 *ca, EVP_PKEY *ca_key, EVP_PKEY *key, const char *cn, int days,
		   X509 **out, char serial_hex[41]);
enum pki_role { PKI_ROLE_NODE = 0, PKI_ROLE_HEAD = 1 };
/* The role in a certificate's subject: PKI_ROLE_HEAD for OU=head, PKI_ROLE_NODE
 * for OU=node or no OU (certificates made before roles), -EINVAL otherwise. */
int pki_cert_role(X509 *cert);
/* SHA-256 of a CSR's SubjectPublicKeyInfo (DER), lowercase hex; -EBADMSG. */
int pki_csr_spki_sha256(const char *csr_pem, char hex[PKI_HASH_HEX]);

/* Certificate revocation list signed by the CA: the given serials (lowercase
 * hex as pki_cert_serial makes them), CRL number `number`, next update in
 * `days`. PEM text (caller frees). */
int pki_make_crl(X509 *ca, EVP_PKEY *ca_key, const char *const *serials, size_t n, long number,
		 int days, char **pem);
/* Parse a CRL and check that ca issued and signed it. 0 (and the number of
 * revoked serials), -EBADMSG, -EMSGSIZE or -EACCES. */
int pki_crl_check(const char *pem, X509 *ca, size_t *count);

/* SHA-256 of the certificate's SubjectPublicKeyInfo (DER), lowercase hex. */
int pki_spki_sha256(X509 *cert, char hex[PKI_HASH_HEX]);
/* Certificate's subject CN and serial (lowercase hex, no leading zeros stripped
 * differently from pki_sign_csr: the same function formats both). */
int pki_cert_cn(X509 *cert, char *buf, size_t len);
int pki_cert_serial(X509 *cert, char serial_hex[41]);
/* Check that cert is signed by ca and currently valid. 0 or -EACCES. */
int pki_verify(X509 *cert, X509 *ca);

/* PEM I/O. Private keys: 0600, atomic. Certificates: 0644, atomic. */
int pki_write_key(const char *path, EVP_PKEY *key);
int pki_write_cert(const char *path, X509 *cert);
int pki_write_pem_text(const char *path, const char *pem, int mode);
int pki_read_key(const char *path, EVP_PKEY **out);
int pki_read_cert(const char *path, X509 **out);
int pki_cert_from_pem(const char *pem, X509 **out);
char *pki_cert_to_pem(X509 *cert); /* caller frees */

/* Random bytes as lowercase hex (n bytes -> 2n chars + NUL in out). */
int pki_random_hex(char *out, size_t nbytes);
/* SHA-256 of a string, lowercase hex. */
void pki_sha256_hex(const void *data, size_t len, char hex[PKI_HASH_HEX]);
/* Constant-time string compare for secrets. 1 if equal. */
int pki_ct_equal(const char *a, const char *b);

#endif

/* pki: CA, CSR signing, identities, PEM files. */
#include "common/pki.h"

#include <criterion/criterion.h>
#include <ctype.h>
#include <errno.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static EVP_PKEY *ca_key, *node_key;
static X509 *ca;
static char dir[] = "/tmp/pkitestXXXXXX";

static void setup(void)
{
	cr_assert_eq(pki_make_key(&ca_key), 0);
	cr_assert_eq(pki_make_ca("lab", ca_key, &ca), 0);
	cr_assert_eq(pki_make_key(&node_key), 0);
	cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
	X509_free(ca);
	EVP_PKEY_free(ca_key);
	EVP_PKEY_free(node_key);
	char cmd[64];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd) != 0)
		cr_log_info("could not remove %s", dir);
}

TestSuite(pki, .init = setup, .fini = teardown);

static bool is_lower_hex(const char *s, size_t minlen, size_t maxlen)
{
	size_t n = strlen(s);
	if (n < minlen || n > maxlen)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isdigit((unsigned char)s[i]) && !(s[i] >= 'a' && s[i] <= 'f'))
			return false;
	return true;
}

static X509 *sign_for(EVP_PKEY *key, const char *csr_cn, const char *cn, int days,
		      char serial[41])
{
	char *csr = NULL, *pem = NULL;
	cr_assert_eq(pki_make_csr(key, csr_cn, &csr), 0);
	cr_assert(strstr(csr, "BEGIN CERTIFICATE REQUEST"));
	cr_assert_eq(pki_sign_csr(ca, ca_key, csr, cn, days, &pem, serial), 0);
	X509 *x = NULL;
	cr_assert_eq(pki_cert_from_pem(pem, &x), 0);
	free(csr);
	free(pem);
	return x;
}

Test(pki, ca_is_a_self_signed_ca)
{
	char cn[128];
	cr_assert_eq(pki_cert_cn(ca, cn, sizeof cn), 0);
	cr_assert_str_eq(cn, "sparkctl CA lab");
	cr_assert_eq(X509_check_ca(ca), 1, "basicConstraints CA:TRUE");
	cr_assert_eq(pki_verify(ca, ca), 0);
	cr_assert_eq(X509_check_issued(ca, ca), X509_V_OK, "self-issued");
	/* about 10 years */
	int days, secs;
	cr_assert(ASN1_TIME_diff(&days, &secs, X509_get0_notBefore(ca), X509_get0_notAfter(ca)));
	cr_assert(days >= 3650 && days <= 3652, "days=%d", days);
}

Test(pki, csr_signed_cert_chains_to_ca_with_cn_from_argument)
{
	char serial[41] = "";
	X509 *x = sign_for(node_key, "evil-name", "spark-3", 30, serial);
	cr_assert_eq(pki_verify(x, ca), 0, "leaf chains to the CA");
	char cn[128];
	cr_assert_eq(pki_cert_cn(x, cn, sizeof cn), 0);
	cr_assert_str_eq(cn, "spark-3", "the CSR's own subject is ignored");
	cr_assert_eq(EVP_PKEY_eq(X509_get0_pubkey(x), node_key), 1, "certifies the CSR's key");
	cr_assert_eq(X509_check_ca(x), 0, "leaf is not a CA");
	uint32_t xku = X509_get_extended_key_usage(x);
	cr_assert(xku & XKU_SSL_SERVER);
	cr_assert(xku & XKU_SSL_CLIENT);
	cr_assert_eq(X509_check_purpose(x, X509_PURPOSE_SSL_CLIENT, 0), 1);
	cr_assert_eq(X509_check_purpose(x, X509_PURPOSE_SSL_SERVER, 0), 1);
	char again[41];
	cr_assert_eq(pki_cert_serial(x, again), 0);
	cr_assert_str_eq(serial, again, "returned serial is the certificate's");
	cr_assert(is_lower_hex(serial, 24, 32), "serial %s", serial);

	/* another CA does not vouch for it */
	EVP_PKEY *k2;
	X509 *ca2;
	cr_assert_eq(pki_make_key(&k2), 0);
	cr_assert_eq(pki_make_ca("other", k2, &ca2), 0);
	cr_assert_eq(pki_verify(x, ca2), -EACCES);
	X509_free(ca2);
	EVP_PKEY_free(k2);
	X509_free(x);
}

Test(pki, not_before_is_backdated_one_hour)
{
	char serial[41];
	X509 *x = sign_for(node_key, "n", "n", 10, serial);
	time_t now = time(NULL);
	ASN1_TIME *t = ASN1_TIME_set(NULL, now);
	int days, secs;
	cr_assert(ASN1_TIME_diff(&days, &secs, X509_get0_notBefore(x), t));
	long diff = (long)days * 86400 + secs;
	cr_assert(diff >= 3590 && diff <= 3660, "notBefore is %ld s before now", diff);
	cr_assert(ASN1_TIME_diff(&days, &secs, t, X509_get0_notAfter(x)));
	diff = (long)days * 86400 + secs;
	cr_assert(diff >= 10 * 86400 - 60 && diff <= 10 * 86400 + 60, "valid 10 days: %ld", diff);
	ASN1_TIME_free(t);
	X509_free(x);
}

Test(pki, serials_are_unique_and_positive)
{
	enum { N = 64 };
	char serials[N][41];
	for (int i = 0; i < N; i++) {
		X509 *x;
		cr_assert_eq(pki_issue(ca, ca_key, node_key, "n", 1, &x, serials[i]), 0);
		const ASN1_INTEGER *ai = X509_get0_serialNumber(x);
		cr_assert_eq(ASN1_STRING_type(ai), V_ASN1_INTEGER, "positive");
		cr_assert_leq(ASN1_STRING_length(ai), 16, "at most 128 bits");
		cr_assert(is_lower_hex(serials[i], 1, 32));
		X509_free(x);
		for (int j = 0; j < i; j++)
			cr_assert_str_neq(serials[i], serials[j]);
	}
	char cas[41];
	cr_assert_eq(pki_cert_serial(ca, cas), 0);
	cr_assert(is_lower_hex(cas, 1, 32));
}

Test(pki, spki_hash_stable_and_key_specific)
{
	char serial[41], h1[PKI_HASH_HEX], h2[PKI_HASH_HEX], h3[PKI_HASH_HEX], h4[PKI_HASH_HEX];
	X509 *x = sign_for(node_key, "n", "n", 10, serial);
	cr_assert_eq(pki_spki_sha256(x, h1), 0);
	cr_assert(is_lower_hex(h1, 64, 64));

	/* same as the SHA-256 of the key's SubjectPublicKeyInfo, computed independently */
	unsigned char *der = NULL;
	int n = i2d_PUBKEY(node_key, &der);
	cr_assert_gt(n, 0);
	char want[PKI_HASH_HEX];
	pki_sha256_hex(der, (size_t)n, want);
	OPENSSL_free(der);
	cr_assert_str_eq(h1, want);

	/* stable across a write and re-read */
	char path[128];
	snprintf(path, sizeof path, "%s/node.pem", dir);
	cr_assert_eq(pki_write_cert(path, x), 0);
	X509 *y;
	cr_assert_eq(pki_read_cert(path, &y), 0);
	cr_assert_eq(X509_cmp(x, y), 0);
	cr_assert_eq(pki_spki_sha256(y, h2), 0);
	cr_assert_str_eq(h1, h2);

	/* same key, another certificate: same pin */
	X509 *z;
	cr_assert_eq(pki_issue(ca, ca_key, node_key, "other", 5, &z, serial), 0);
	cr_assert_eq(pki_spki_sha256(z, h3), 0);
	cr_assert_str_eq(h1, h3);

	/* another key: another pin */
	cr_assert_eq(pki_spki_sha256(ca, h4), 0);
	cr_assert_str_neq(h1, h4);
	X509_free(x);
	X509_free(y);
	X509_free(z);
}

Test(pki, tampered_or_garbage_csr_refused)
{
	char *csr;
	cr_assert_eq(pki_make_csr(node_key, "honest-node", &csr), 0);
	BIO *b = BIO_new_mem_buf(csr, -1);
	X509_REQ *req = PEM_read_bio_X509_REQ(b, NULL, NULL, NULL);
	BIO_free(b);
	cr_assert_not_null(req);
	unsigned char *der = NULL;
	int n = i2d_X509_REQ(req, &der);
	X509_REQ_free(req);
	/* flip one character of the signed subject */
	unsigned char *p = memmem(der, (size_t)n, "honest-node", 11);
	cr_assert_not_null(p);
	p[0] = 'H';
	const unsigned char *q = der;
	req = d2i_X509_REQ(NULL, &q, n);
	cr_assert_not_null(req);
	b = BIO_new(BIO_s_mem());
	PEM_write_bio_X509_REQ(b, req);
	char *tp;
	long tl = BIO_get_mem_data(b, &tp);
	char *tampered = strndup(tp, (size_t)tl);
	BIO_free(b);
	X509_REQ_free(req);
	OPENSSL_free(der);

	char *pem = (char *)1;
	char serial[41];
	cr_assert_eq(pki_sign_csr(ca, ca_key, tampered, "n", 10, &pem, serial), -EACCES);
	cr_assert_null(pem);
	cr_assert_lt(pki_sign_csr(ca, ca_key, "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n"
				  "-----END CERTIFICATE REQUEST-----\n", "n", 10, &pem, serial), 0);
	cr_assert_lt(pki_sign_csr(ca, ca_key, "", "n", 10, &pem, serial), 0);
	/* the untampered one still works */
	cr_assert_eq(pki_sign_csr(ca, ca_key, csr, "n", 10, &pem, serial), 0);
	free(pem);
	free(csr);
	free(tampered);
}

Test(pki, bad_arguments_refused)
{
	char serial[41];
	X509 *x = (X509 *)1;
	char cn65[66];
	memset(cn65, 'a', 65);
	cn65[65] = '\0';
	cr_assert_eq(pki_issue(ca, ca_key, node_key, cn65, 10, &x, serial), -EINVAL);
	cr_assert_null(x);
	cr_assert_eq(pki_issue(ca, ca_key, node_key, "n", 0, &x, serial), -EINVAL);
	cr_assert_eq(pki_issue(ca, ca_key, node_key, "", 10, &x, serial), -EINVAL);
	/* a CA key that does not match the CA certificate */
	cr_assert_lt(pki_issue(ca, node_key, node_key, "n", 10, &x, serial), 0);
	/* a long cluster name still makes a CA */
	X509 *c2;
	cr_assert_eq(pki_make_ca("abcdefghijklmnopqrstuvwxyz-abcdefghijklmnopqrstuvwxyz-0123456789",
				 ca_key, &c2),
		     0);
	X509_free(c2);
}

Test(pki, key_files_are_private_and_round_trip)
{
	char kp[128], cp[128];
	snprintf(kp, sizeof kp, "%s/node.key", dir);
	snprintf(cp, sizeof cp, "%s/ca.pem", dir);
	mode_t old = umask(0);
	cr_assert_eq(pki_write_key(kp, node_key), 0);
	cr_assert_eq(pki_write_cert(cp, ca), 0);
	umask(old);
	struct stat st;
	cr_assert_eq(stat(kp, &st), 0);
	cr_assert_eq(st.st_mode & 07777, 0600, "key mode %o", st.st_mode & 07777);
	cr_assert_eq(stat(cp, &st), 0);
	cr_assert_eq(st.st_mode & 07777, 0644, "cert mode %o", st.st_mode & 07777);
	EVP_PKEY *k;
	cr_assert_eq(pki_read_key(kp, &k), 0);
	cr_assert_eq(EVP_PKEY_eq(k, node_key), 1);
	EVP_PKEY_free(k);
	X509 *c;
	cr_assert_eq(pki_read_cert(cp, &c), 0);
	cr_assert_eq(X509_cmp(c, ca), 0);
	X509_free(c);
	/* wrong kind of file, missing file */
	k = (EVP_PKEY *)1;
	cr_assert_lt(pki_read_key(cp, &k), 0);
	cr_assert_null(k);
	cr_assert_lt(pki_read_cert(kp, &c), 0);
	char missing[160];
	snprintf(missing, sizeof missing, "%s/none.pem", dir);
	cr_assert_eq(pki_read_cert(missing, &c), -ENOENT);
	cr_assert_eq(pki_read_key(missing, &k), -ENOENT);
	/* text PEM writer honours the mode */
	char *pem = pki_cert_to_pem(ca);
	cr_assert_not_null(pem);
	old = umask(0);
	cr_assert_eq(pki_write_pem_text(cp, pem, 0640), 0);
	umask(old);
	cr_assert_eq(stat(cp, &st), 0);
	cr_assert_eq(st.st_mode & 07777, 0640);
	cr_assert_eq(pki_read_cert(cp, &c), 0);
	cr_assert_eq(X509_cmp(c, ca), 0);
	X509_free(c);
	free(pem);
}

Test(pki, helpers)
{
	char h[PKI_HASH_HEX];
	pki_sha256_hex("abc", 3, h);
	cr_assert_str_eq(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	char r1[65], r2[65];
	cr_assert_eq(pki_random_hex(r1, 32), 0);
	cr_assert_eq(pki_random_hex(r2, 32), 0);
	cr_assert(is_lower_hex(r1, 64, 64));
	cr_assert_str_neq(r1, r2);
	char big[2 * 200 + 1];
	cr_assert_eq(pki_random_hex(big, 200), 0);
	cr_assert(is_lower_hex(big, 400, 400));
	cr_assert_eq(pki_ct_equal("tok-abc", "tok-abc"), 1);
	cr_assert_eq(pki_ct_equal("tok-abc", "tok-abd"), 0);
	cr_assert_eq(pki_ct_equal("tok-abc", "tok-ab"), 0);
	cr_assert_eq(pki_ct_equal("", ""), 1);
	cr_assert_eq(pki_ct_equal(NULL, "x"), 0);
}

/* ---------- roles and revocation lists (issue 14) ---------- */

Test(pki, only_the_head_certificate_says_head)
{
	char serial[41];
	/* A CSR asking for OU=head (or anything) is still signed as a node. */
	X509 *n = sign_for(node_key, "evil-head", "n1", 10, serial);
	cr_expect_eq(pki_cert_role(n), PKI_ROLE_NODE);
	X509 *h = NULL;
	cr_assert_eq(pki_issue_head(ca, ca_key, node_key, "h1", 10, &h, serial), 0);
	cr_expect_eq(pki_cert_role(h), PKI_ROLE_HEAD);
	char cn[64];
	cr_assert_eq(pki_cert_cn(h, cn, sizeof cn), 0);
	cr_expect_str_eq(cn, "h1");
	/* a certificate from before roles (no OU) is a node's */
	X509_NAME *nm = X509_get_subject_name(n);
	X509_NAME_delete_entry(nm, X509_NAME_get_index_by_NID(nm, NID_organizationalUnitName, -1));
	cr_expect_eq(pki_cert_role(n), PKI_ROLE_NODE);
	X509_NAME_add_entry_by_txt(nm, "OU", MBSTRING_UTF8, (const unsigned char *)"root", -1, -1, 0);
	cr_expect_eq(pki_cert_role(n), -EINVAL, "an unknown role is no role");
	X509_free(n);
	X509_free(h);
}

Test(pki, csr_key_hash_matches_the_issued_certificate)
{
	char *csr = NULL, *pem = NULL, serial[41], a[PKI_HASH_HEX], b[PKI_HASH_HEX];
	cr_assert_eq(pki_make_csr(node_key, "n", &csr), 0);
	cr_assert_eq(pki_csr_spki_sha256(csr, a), 0);
	cr_assert_eq(pki_sign_csr(ca, ca_key, csr, "n", 10, &pem, serial), 0);
	X509 *x = NULL;
	cr_assert_eq(pki_cert_from_pem(pem, &x), 0);
	cr_assert_eq(pki_spki_sha256(x, b), 0);
	cr_expect_str_eq(a, b);
	cr_expect_eq(pki_csr_spki_sha256("not a csr", a), -EBADMSG);
	X509_free(x);
	free(csr);
	free(pem);
}

Test(pki, crl_is_signed_by_the_ca_and_lists_the_serials)
{
	char s1[41], s2[41];
	X509 *a = sign_for(node_key, "a", "a", 10, s1);
	X509 *b = sign_for(node_key, "b", "b", 10, s2);
	const char *serials[] = {s1};
	char *pem = NULL;
	cr_assert_eq(pki_make_crl(ca, ca_key, serials, 1, 7, 30, &pem), 0);
	size_t n = 99;
	cr_assert_eq(pki_crl_check(pem, ca, &n), 0);
	cr_expect_eq(n, 1);
	/* OpenSSL's own verification with the CRL: a is revoked, b is not */
	BIO *bio = BIO_new_mem_buf(pem, -1);
	X509_CRL *crl = PEM_read_bio_X509_CRL(bio, NULL, NULL, NULL);
	BIO_free(bio);
	cr_assert_not_null(crl);
	X509_STORE *st = X509_STORE_new();
	X509_STORE_add_cert(st, ca);
	X509_STORE_add_crl(st, crl);
	X509_STORE_set_flags(st, X509_V_FLAG_CRL_CHECK);
	X509 *certs[] = {a, b};
	int want[] = {X509_V_ERR_CERT_REVOKED, X509_V_OK};
	for (int i = 0; i < 2; i++) {
		X509_STORE_CTX *ctx = X509_STORE_CTX_new();
		X509_STORE_CTX_init(ctx, st, certs[i], NULL);
		X509_verify_cert(ctx);
		cr_expect_eq(X509_STORE_CTX_get_error(ctx), want[i], "cert %d: %s", i,
			     X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx)));
		X509_STORE_CTX_free(ctx);
	}
	X509_STORE_free(st);
	X509_CRL_free(crl);
	/* another CA's list is refused */
	EVP_PKEY *k2 = NULL;
	X509 *ca2 = NULL;
	cr_assert_eq(pki_make_key(&k2), 0);
	cr_assert_eq(pki_make_ca("lab", k2, &ca2), 0);
	cr_expect_eq(pki_crl_check(pem, ca2, NULL), -EACCES);
	cr_expect_eq(pki_crl_check("garbage", ca, NULL), -EBADMSG);
	char *empty = NULL;
	cr_assert_eq(pki_make_crl(ca, ca_key, NULL, 0, 1, 30, &empty), 0);
	cr_assert_eq(pki_crl_check(empty, ca, &n), 0);
	cr_expect_eq(n, 0);
	free(empty);
	X509_free(ca2);
	EVP_PKEY_free(k2);
	free(pem);
	X509_free(a);
	X509_free(b);
}

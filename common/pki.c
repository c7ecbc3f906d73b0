/* pki: cluster CA and node certificates with OpenSSL 3 EVP/X509 APIs.
 * See pki.h. Every failure clears OpenSSL's thread error queue so that it does
 * not confuse a later SSL_get_error() on the same thread (conn.c). */
#include "pki.h"

#include "util.h"

#include <errno.h>
#include <limits.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PKI_MAX_PEM (64 * 1024)
#define PKI_CN_MAX 64 /* ub-common-name */
#define PKI_MAX_CRL (1024 * 1024)

static int ossl_fail(int code)
{
	ERR_clear_error();
	return code;
}

static int no_password_cb(char *buf, int size, int rwflag, void *u)
{
	(void)buf;
	(void)size;
	(void)rwflag;
	(void)u;
	return -1; /* never prompt: encrypted keys are not ours */
}

/* What a memory BIO holds, as a new NUL-terminated string; NULL if empty or
 * out of memory. */
static char *bio_text(BIO *bio)
{
	char *p;
	long n = bio ? BIO_get_mem_data(bio, &p) : 0;
	return n > 0 ? strndup(p, (size_t)n) : NULL;
}

static void to_hex(const unsigned char *in, size_t n, char *out)
{
	static const char hx[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hx[in[i] >> 4];
		out[2 * i + 1] = hx[in[i] & 15];
	}
	out[2 * n] = '\0';
}

static bool is_p256(EVP_PKEY *k)
{
	char grp[64];
	size_t gl = 0;
	if (!k || !EVP_PKEY_is_a(k, "EC"))
		return false;
	if (EVP_PKEY_get_group_name(k, grp, sizeof grp, &gl) != 1)
		return false;
	return strcmp(grp, "prime256v1") == 0 || strcmp(grp, "P-256") == 0;
}

int pki_make_key(EVP_PKEY **out)
{
	*out = EVP_EC_gen("P-256");
	if (!*out)
		return ossl_fail(-ENOMEM);
	return 0;
}

/* 128 random bits with the top bit clear (a positive INTEGER that fits in 16
 * DER octets), never zero. */
static int set_random_serial(X509 *x)
{
	unsigned char b[16];
	if (RAND_bytes(b, sizeof b) != 1)
		return ossl_fail(-EIO);
	b[0] &= 0x7f;
	b[15] |= 0x01;
	BIGNUM *bn = BN_bin2bn(b, sizeof b, NULL);
	ASN1_INTEGER *ai = bn ? BN_to_ASN1_INTEGER(bn, NULL) : NULL;
	int ok = ai && X509_set_serialNumber(x, ai) == 1;
	ASN1_INTEGER_free(ai);
	BN_free(bn);
	return ok ? 0 : ossl_fail(-ENOMEM);
}

static int set_cn(X509_NAME *name, const char *cn)
{
	size_t n = strlen(cn);
	if (n == 0 || n > PKI_CN_MAX)
		return -EINVAL;
	if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)cn,
				       (int)n, -1, 0) != 1)
		return ossl_fail(-EINVAL);
	return 0;
}

static int add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX ctx;
	X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
	X509_EXTENSION *ext = X509V3_EXT_nconf_nid(NULL, &ctx, nid, value);
	if (!ext)
		return ossl_fail(-EINVAL);
	int ok = X509_add_ext(x, ext, -1) == 1;
	X509_EXTENSION_free(ext);
	return ok ? 0 : ossl_fail(-ENOMEM);
}

static int set_validity(X509 *x, int days)
{
	if (!X509_gmtime_adj(X509_getm_notBefore(x), -3600) ||
	    !X509_time_adj_ex(X509_getm_notAfter(x), days, 0, NULL))
		return ossl_fail(-EINVAL);
	return 0;
}

struct cert_ext {
	int nid;
	const char *value;
};

/* Build and sign a v3 certificate for pub: a random serial, valid from an
 * hour ago for `days`, subject CN cn, the extensions exts[0..next), issued
 * by issuer and signed with sign_key (issuer NULL: self-signed, by pub's
 * private half sign_key). */
static int build_cert(X509 *issuer, EVP_PKEY *sign_key, EVP_PKEY *pub, const char *cn,
		      const char *ou, int days, const struct cert_ext *exts, size_t next, X509 **out)
{
	X509 *x = X509_new();
	if (!x)
		return ossl_fail(-ENOMEM);
	if (!issuer)
		issuer = x;
	int r = -EINVAL;
	if (X509_set_version(x, X509_VERSION_3) != 1)
		goto fail;
	if ((r = set_random_serial(x)) < 0)
		goto fail;
	if ((r = set_validity(x, days)) < 0)
		goto fail;
	if ((r = set_cn(X509_get_subject_name(x), cn)) < 0)
		goto fail;
	r = -EINVAL;
	if (ou && X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "OU", MBSTRING_UTF8,
					     (const unsigned char *)ou, -1, -1, 0) != 1)
		goto fail;
	if (X509_set_issuer_name(x, X509_get_subject_name(issuer)) != 1 ||
	    X509_set_pubkey(x, pub) != 1)
		goto fail;
	for (size_t i = 0; i < next; i++)
		if ((r = add_ext(x, issuer, exts[i].nid, exts[i].value)) < 0)
			goto fail;
	r = -EINVAL;
	if (X509_sign(x, sign_key, EVP_sha256()) <= 0)
		goto fail;
	*out = x;
	return 0;
fail:
	X509_free(x);
	return ossl_fail(r);
}

int pki_make_ca(const char *cluster_name, EVP_PKEY *key, X509 **out)
{
	static const struct cert_ext exts[] = {
		{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
		{NID_key_usage, "critical,keyCertSign,cRLSign"},
		{NID_subject_key_identifier, "hash"},
		{NID_authority_key_identifier, "keyid:always"},
	};
	*out = NULL;
	if (!cluster_name || !key)
		return -EINVAL;
	char cn[PKI_CN_MAX + 1];
	snprintf(cn, sizeof cn, "sparkctl CA %s", cluster_name); /* truncated to 64 */
	return build_cert(NULL, key, key, cn, NULL, 3650, exts, sizeof exts / sizeof exts[0], out);
}

static int issue_role(X509 *ca, EVP_PKEY *ca_key, EVP_PKEY *pub, const char *cn,
		      enum pki_role role, int days, X509 **out, char serial_hex[41])
{
	static const struct cert_ext exts[] = {
		{NID_basic_constraints, "critical,CA:FALSE"},
		{NID_key_usage, "critical,digitalSignature"},
		{NID_ext_key_usage, "serverAuth,clientAuth"},
		{NID_subject_key_identifier, "hash"},
		{NID_authority_key_identifier, "keyid:always"},
	};
	*out = NULL;
	if (!ca || !ca_key || !pub || !cn || days < 1 || days > 36500)
		return -EINVAL;
	if (!is_p256(pub))
		return -EINVAL;
	if (X509_check_private_key(ca, ca_key) != 1)
		return ossl_fail(-EINVAL);
	X509 *x;
	int r = build_cert(ca, ca_key, pub, cn, role == PKI_ROLE_HEAD ? "head" : "node", days, exts,
			   sizeof exts / sizeof exts[0], &x);
	if (r < 0)
		return r;
	if (serial_hex && (r = pki_cert_serial(x, serial_hex)) < 0) {
		X509_free(x);
		return ossl_fail(r);
	}
	*out = x;
	return 0;
}

int pki_issue(X509 *ca, EVP_PKEY *ca_key, EVP_PKEY *pub, const char *cn, int days, X509 **out,
	      char serial_hex[41])
{
	return issue_role(ca, ca_key, pub, cn, PKI_ROLE_NODE, days, out, serial_hex);
}

int pki_issue_head(X509 *ca, EVP_PKEY *ca_key, EVP_PKEY *pub, const char *cn, int days,
		   X509 **out, char serial_hex[41])
{
	return issue_role(ca, ca_key, pub, cn, PKI_ROLE_HEAD, days, out, serial_hex);
}

int pki_cert_role(X509 *cert)
{
	X509_NAME *name = cert ? X509_get_subject_name(cert) : NULL;
	if (!name)
		return -EINVAL;
	int i = X509_NAME_get_index_by_NID(name, NID_organizationalUnitName, -1);
	if (i < 0)
		return PKI_ROLE_NODE;
	if (X509_NAME_get_index_by_NID(name, NID_organizationalUnitName, i) >= 0)
		return -EINVAL; /* two roles: not one of ours */
	ASN1_STRING *s = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, i));
	const unsigned char *d = s ? ASN1_STRING_get0_data(s) : NULL;
	int n = s ? ASN1_STRING_length(s) : 0;
	if (d && n == 4 && memcmp(d, "head", 4) == 0)
		return PKI_ROLE_HEAD;
	if (d && n == 4 && memcmp(d, "node", 4) == 0)
		return PKI_ROLE_NODE;
	return -EINVAL;
}

static X509_REQ *csr_parse(const char *csr_pem)
{
	if (!csr_pem)
		return NULL;
	size_t n = strnlen(csr_pem, PKI_MAX_PEM + 1);
	if (n == 0 || n > PKI_MAX_PEM)
		return NULL;
	BIO *bio = BIO_new_mem_buf(csr_pem, (int)n);
	if (!bio)
		return NULL;
	X509_REQ *req = PEM_read_bio_X509_REQ(bio, NULL, no_password_cb, NULL);
	BIO_free(bio);
	return req;
}

/* SHA-256 of a SubjectPublicKeyInfo's DER, lowercase hex; -EINVAL. */
static int pubkey_sha256(X509_PUBKEY *pk, char hex[PKI_HASH_HEX])
{
	hex[0] = '\0';
	unsigned char *der = NULL;
	int n = pk ? i2d_X509_PUBKEY(pk, &der) : -1;
	if (n <= 0)
		return ossl_fail(-EINVAL);
	pki_sha256_hex(der, (size_t)n, hex);
	OPENSSL_free(der);
	return hex[0] ? 0 : -EIO;
}

int pki_csr_spki_sha256(const char *csr_pem, char hex[PKI_HASH_HEX])
{
	hex[0] = '\0';
	X509_REQ *req = csr_parse(csr_pem);
	int r = req ? pubkey_sha256(X509_REQ_get_X509_PUBKEY(req), hex) : -EINVAL;
	X509_REQ_free(req);
	return r < 0 ? ossl_fail(-EBADMSG) : 0;
}

int pki_make_crl(X509 *ca, EVP_PKEY *ca_key, const char *const *serials, size_t n, long number,
		 int days, char **pem)
{
	*pem = NULL;
	if (!ca || !ca_key || (n && !serials) || days < 1)
		return -EINVAL;
	X509_CRL *crl = X509_CRL_new();
	ASN1_TIME *t = ASN1_TIME_new();
	ASN1_INTEGER *num = ASN1_INTEGER_new();
	BIO *bio = NULL;
	int r = -ENOMEM;
	if (!crl || !t || !num)
		goto out;
	r = -EINVAL;
	if (X509_CRL_set_version(crl, X509_CRL_VERSION_2) != 1 ||
	    X509_CRL_set_issuer_name(crl, X509_get_subject_name(ca)) != 1 ||
	    !X509_gmtime_adj(t, -3600) || X509_CRL_set1_lastUpdate(crl, t) != 1 ||
	    !X509_time_adj_ex(t, days, 0, NULL) || X509_CRL_set1_nextUpdate(crl, t) != 1 ||
	    ASN1_INTEGER_set(num, number) != 1 ||
	    X509_CRL_add1_ext_i2d(crl, NID_crl_number, num, 0, 0) != 1)
		goto out;
	for (size_t i = 0; i < n; i++) {
		BIGNUM *bn = NULL;
		if (!serials[i] || !BN_hex2bn(&bn, serials[i]))
			goto out;
		X509_REVOKED *rv = X509_REVOKED_new();
		ASN1_INTEGER *ai = BN_to_ASN1_INTEGER(bn, NULL);
		BN_free(bn);
		int ok = rv && ai && X509_REVOKED_set_serialNumber(rv, ai) == 1 &&
			 X509_REVOKED_set_revocationDate(
				 rv, (ASN1_TIME *)X509_CRL_get0_lastUpdate(crl)) == 1 &&
			 X509_CRL_add0_revoked(crl, rv) == 1;
		ASN1_INTEGER_free(ai);
		if (!ok) {
			X509_REVOKED_free(rv);
			goto out;
		}
	}
	if (X509_CRL_sort(crl) != 1 || X509_CRL_sign(crl, ca_key, EVP_sha256()) <= 0)
		goto out;
	r = -ENOMEM;
	bio = BIO_new(BIO_s_mem());
	if (!bio || PEM_write_bio_X509_CRL(bio, crl) != 1)
		goto out;
	if ((*pem = bio_text(bio)))
		r = 0;
out:
	BIO_free(bio);
	ASN1_INTEGER_free(num);
	ASN1_TIME_free(t);
	X509_CRL_free(crl);
	return r < 0 ? ossl_fail(r) : 0;
}

int pki_crl_check(const char *pem, X509 *ca, size_t *count)
{
	if (!pem || !ca)
		return -EINVAL;
	size_t n = strnlen(pem, PKI_MAX_CRL + 1);
	if (n == 0 || n > PKI_MAX_CRL)
		return -EMSGSIZE;
	BIO *bio = BIO_new_mem_buf(pem, (int)n);
	X509_CRL *crl = bio ? PEM_read_bio_X509_CRL(bio, NULL, no_password_cb, NULL) : NULL;
	BIO_free(bio);
	if (!crl)
		return ossl_fail(-EBADMSG);
	EVP_PKEY *pub = X509_get0_pubkey(ca);
	int r = 0;
	if (X509_NAME_cmp(X509_CRL_get_issuer(crl), X509_get_subject_name(ca)) != 0 || !pub ||
	    X509_CRL_verify(crl, pub) != 1)
		r = -EACCES;
	if (r == 0 && count) {
		STACK_OF(X509_REVOKED) *rv = X509_CRL_get_REVOKED(crl);
		*count = rv ? (size_t)sk_X509_REVOKED_num(rv) : 0;
	}
	X509_CRL_free(crl);
	return r < 0 ? ossl_fail(r) : 0;
}

int pki_make_csr(EVP_PKEY *key, const char *cn, char **csr_pem)
{
	*csr_pem = NULL;
	if (!key || !cn)
		return -EINVAL;
	X509_REQ *req = X509_REQ_new();
	BIO *bio = NULL;
	int r = -ENOMEM;
	if (!req)
		goto out;
	r = -EINVAL;
	if (X509_REQ_set_version(req, X509_REQ_VERSION_1) != 1)
		goto out;
	if ((r = set_cn(X509_REQ_get_subject_name(req), cn)) < 0)
		goto out;
	r = -EINVAL;
	if (X509_REQ_set_pubkey(req, key) != 1 || X509_REQ_sign(req, key, EVP_sha256()) <= 0)
		goto out;
	r = -ENOMEM;
	bio = BIO_new(BIO_s_mem());
	if (!bio || PEM_write_bio_X509_REQ(bio, req) != 1)
		goto out;
	*csr_pem = bio_text(bio);
	r = *csr_pem ? 0 : -ENOMEM;
out:
	BIO_free(bio);
	X509_REQ_free(req);
	return r < 0 ? ossl_fail(r) : 0;
}

int pki_sign_csr(X509 *ca, EVP_PKEY *ca_key, const char *csr_pem, const char *cn, int days,
		 char **cert_pem, char serial_hex[41])
{
	*cert_pem = NULL;
	if (!csr_pem)
		return -EINVAL;
	size_t n = strnlen(csr_pem, PKI_MAX_PEM + 1);
	if (n == 0 || n > PKI_MAX_PEM)
		return -EINVAL;
	X509_REQ *req = csr_parse(csr_pem);
	if (!req)
		return ossl_fail(-EBADMSG);
	int r;
	EVP_PKEY *pub = X509_REQ_get0_pubkey(req);
	if (!pub || X509_REQ_verify(req, pub) != 1) {
		X509_REQ_free(req);
		return ossl_fail(-EACCES);
	}
	X509 *x = NULL;
	r = pki_issue(ca, ca_key, pub, cn, days, &x, serial_hex);
	X509_REQ_free(req);
	if (r < 0)
		return r;
	*cert_pem = pki_cert_to_pem(x);
	X509_free(x);
	return *cert_pem ? 0 : -ENOMEM;
}

int pki_spki_sha256(X509 *cert, char hex[PKI_HASH_HEX])
{
	hex[0] = '\0';
	return cert ? pubkey_sha256(X509_get_X509_PUBKEY(cert), hex) : -EINVAL;
}

int pki_cert_cn(X509 *cert, char *buf, size_t len)
{
	if (!cert || !buf || len == 0)
		return -EINVAL;
	buf[0] = '\0';
	X509_NAME *name = X509_get_subject_name(cert);
	int i = name ? X509_NAME_get_index_by_NID(name, NID_commonName, -1) : -1;
	if (i < 0)
		return -ENOENT;
	ASN1_STRING *s = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, i));
	unsigned char *u = NULL;
	int n = s ? ASN1_STRING_to_UTF8(&u, s) : -1;
	if (n < 0)
		return ossl_fail(-EINVAL);
	int r = 0;
	if (memchr(u, '\0', (size_t)n))
		r = -EINVAL;
	else if ((size_t)n >= len)
		r = -ENAMETOOLONG;
	else {
		memcpy(buf, u, (size_t)n);
		buf[n] = '\0';
	}
	OPENSSL_free(u);
	return r;
}

int pki_cert_serial(X509 *cert, char serial_hex[41])
{
	serial_hex[0] = '\0';
	const ASN1_INTEGER *ai = cert ? X509_get0_serialNumber(cert) : NULL;
	BIGNUM *bn = ai ? ASN1_INTEGER_to_BN(ai, NULL) : NULL;
	if (!bn)
		return ossl_fail(-EINVAL);
	int r = 0;
	if (BN_is_negative(bn) || BN_num_bytes(bn) > 20) {
		r = -EINVAL;
	} else {
		unsigned char b[20];
		int n = BN_bn2bin(bn, b);
		if (n == 0) {
			strcpy(serial_hex, "0");
		} else {
			to_hex(b, (size_t)n, serial_hex);
			/* drop a leading zero nibble so the same number always prints the same */
			if (serial_hex[0] == '0')
				memmove(serial_hex, serial_hex + 1, strlen(serial_hex));
		}
	}
	BN_free(bn);
	return r;
}

int pki_verify(X509 *cert, X509 *ca)
{
	if (!cert || !ca)
		return -EINVAL;
	X509_STORE *st = X509_STORE_new();
	X509_STORE_CTX *ctx = X509_STORE_CTX_new();
	int r = -EACCES;
	if (!st || !ctx || X509_STORE_add_cert(st, ca) != 1 ||
	    X509_STORE_CTX_init(ctx, st, cert, NULL) != 1) {
		r = -ENOMEM;
		goto out;
	}
	if (X509_verify_cert(ctx) == 1)
		r = 0;
out:
	X509_STORE_CTX_free(ctx);
	X509_STORE_free(st);
	return r < 0 ? ossl_fail(r) : 0;
}

/* ---------- PEM I/O ---------- */

static int bio_to_file(BIO *bio, const char *path, int mode)
{
	char *p;
	long n = BIO_get_mem_data(bio, &p);
	if (n <= 0)
		return -EIO;
	return util_write_file(path, p, (size_t)n, mode);
}

int pki_write_key(const char *path, EVP_PKEY *key)
{
	if (!path || !key)
		return -EINVAL;
	BIO *bio = BIO_new(BIO_s_secmem()); /* cleansed on free */
	if (!bio)
		return ossl_fail(-ENOMEM);
	int r = -EIO;
	if (PEM_write_bio_PrivateKey(bio, key, NULL, NULL, 0, NULL, NULL) == 1)
		r = bio_to_file(bio, path, 0600);
	BIO_free(bio);
	return r == -EIO ? ossl_fail(r) : r;
}

int pki_write_cert(const char *path, X509 *cert)
{
	if (!path || !cert)
		return -EINVAL;
	BIO *bio = BIO_new(BIO_s_mem());
	if (!bio)
		return ossl_fail(-ENOMEM);
	int r = -EIO;
	if (PEM_write_bio_X509(bio, cert) == 1)
		r = bio_to_file(bio, path, 0644);
	BIO_free(bio);
	return r == -EIO ? ossl_fail(r) : r;
}

int pki_write_pem_text(const char *path, const char *pem, int mode)
{
	if (!path || !pem)
		return -EINVAL;
	return util_write_file(path, pem, strlen(pem), mode);
}

static int read_pem_file(const char *path, char **text, size_t *len)
{
	if (!path)
		return -EINVAL;
	return util_read_file(path, text, len, PKI_MAX_PEM);
}

int pki_read_key(const char *path, EVP_PKEY **out)
{
	*out = NULL;
	char *text;
	size_t len;
	int r = read_pem_file(path, &text, &len);
	if (r < 0)
		return r;
	BIO *bio = BIO_new_mem_buf(text, (int)len);
	if (bio) {
		*out = PEM_read_bio_PrivateKey(bio, NULL, no_password_cb, NULL);
		BIO_free(bio);
	}
	OPENSSL_cleanse(text, len);
	free(text);
	if (!*out)
		return ossl_fail(bio ? -EBADMSG : -ENOMEM);
	return 0;
}

int pki_cert_from_pem(const char *pem, X509 **out)
{
	*out = NULL;
	if (!pem)
		return -EINVAL;
	size_t n = strnlen(pem, PKI_MAX_PEM + 1);
	if (n == 0 || n > PKI_MAX_PEM)
		return -EINVAL;
	BIO *bio = BIO_new_mem_buf(pem, (int)n);
	if (!bio)
		return ossl_fail(-ENOMEM);
	*out = PEM_read_bio_X509(bio, NULL, no_password_cb, NULL);
	BIO_free(bio);
	return *out ? 0 : ossl_fail(-EBADMSG);
}

int pki_read_cert(const char *path, X509 **out)
{
	*out = NULL;
	char *text;
	size_t len;
	int r = read_pem_file(path, &text, &len);
	if (r < 0)
		return r;
	r = pki_cert_from_pem(text, out);
	free(text);
	return r;
}

char *pki_cert_to_pem(X509 *cert)
{
	if (!cert)
		return NULL;
	BIO *bio = BIO_new(BIO_s_mem());
	char *res = bio && PEM_write_bio_X509(bio, cert) == 1 ? bio_text(bio) : NULL;
	BIO_free(bio);
	if (!res)
		ERR_clear_error();
	return res;
}

/* ---------- small helpers ---------- */

int pki_random_hex(char *out, size_t nbytes)
{
	unsigned char b[64];
	size_t done = 0;
	out[0] = '\0';
	while (done < nbytes) {
		size_t k = nbytes - done < sizeof b ? nbytes - done : sizeof b;
		if (RAND_bytes(b, (int)k) != 1)
			return ossl_fail(-EIO);
		to_hex(b, k, out + 2 * done);
		done += k;
	}
	OPENSSL_cleanse(b, sizeof b);
	return 0;
}

void pki_sha256_hex(const void *data, size_t len, char hex[PKI_HASH_HEX])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	if (EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen != 32) {
		ERR_clear_error();
		hex[0] = '\0';
		return;
	}
	to_hex(md, mdlen, hex);
}

int pki_ct_equal(const char *a, const char *b)
{
	if (!a || !b)
		return 0;
	/* Compare digests so that neither content nor length leaks through timing. */
	unsigned char da[32], db[32];
	unsigned int la = 0, lb = 0;
	if (EVP_Digest(a, strlen(a), da, &la, EVP_sha256(), NULL) != 1 ||
	    EVP_Digest(b, strlen(b), db, &lb, EVP_sha256(), NULL) != 1) {
		ERR_clear_error();
		return 0;
	}
	return CRYPTO_memcmp(da, db, sizeof da) == 0;
}

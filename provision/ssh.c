/* ssh: one libssh session per host. Host key check against known_hosts, auth by
 * key file / ssh-agent / default keys / a password typed on the terminal, remote
 * sh scripts with stdin, stdout, stderr and exit status, and SFTP uploads. */
#include "prov_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define GLOBAL_KNOWN_HOSTS "/etc/ssh/ssh_known_hosts"
#define SFTP_CHUNK 131072
#define MAX_OUTPUT (1 << 20)

static pthread_mutex_t known_hosts_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t tty_mu = PTHREAD_MUTEX_INITIALIZER;

const char *pssh_quote(const char *s, char *buf, size_t len)
{
	size_t o = 0;
	if (len < 3) {
		if (len)
			buf[0] = 0;
		return buf;
	}
	buf[o++] = '\'';
	for (; *s && o + 6 < len; s++) {
		if (*s == '\'') {
			memcpy(buf + o, "'\\''", 4);
			o += 4;
		} else {
			buf[o++] = *s;
		}
	}
	buf[o++] = '\'';
	buf[o] = 0;
	return buf;
}

void pssh_default_known_hosts(char *buf, size_t len)
{
	const char *h = getenv("HOME");
	if (!h || !*h) {
		struct passwd *pw = getpwuid(getuid());
		h = pw ? pw->pw_dir : "/";
	}
	snprintf(buf, len, "%s/.ssh/known_hosts", h);
}

/* Name of the host in known_hosts: "addr", or "[addr]:port" off port 22. */
static void kh_name(const struct prov_host *h, char *buf, size_t len)
{
	if (h->port == 22)
		snprintf(buf, len, "%s", h->addr);
	else
		snprintf(buf, len, "[%s]:%d", h->addr, h->port);
}

static int key_fingerprint(ssh_key k, char *out, size_t len)
{
	unsigned char *hash = NULL;
	size_t hlen = 0;
	if (ssh_get_publickey_hash(k, SSH_PUBLICKEY_HASH_SHA256, &hash, &hlen) < 0)
		return -EINVAL;
	char *fp = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, hlen);
	ssh_clean_pubkey_hash(&hash);
	if (!fp)
		return -ENOMEM;
	snprintf(out, len, "%s", fp);
	ssh_string_free_char(fp);
	return 0;
}

/* Fingerprints recorded for this host in file: "SHA256:x (ssh-ed25519, FILE:LINE)". */
static int known_entries(const struct prov_host *h, const char *file, char *out, size_t len)
{
	FILE *f = fopen(file, "r");
	if (!f)
		return 0;
	char name[300], line[8192];
	kh_name(h, name, sizeof name);
	int found = 0, lineno = 0;
	while (fgets(line, sizeof line, f)) {
		lineno++;
		line[strcspn(line, "\r\n")] = 0;
		if (!line[0] || line[0] == '#')
			continue;
		struct ssh_knownhosts_entry *e = NULL;
		if (ssh_known_hosts_parse_line(name, line, &e) != SSH_OK || !e) {
			if (e)
				ssh_knownhosts_entry_free(e);
			continue;
		}
		char fp[128];
		if (e->publickey && key_fingerprint(e->publickey, fp, sizeof fp) == 0) {
			size_t o = strlen(out);
			snprintf(out + o, len - o, "%s%s (%s, %s:%d)", found ? ", " : "", fp,
				 ssh_key_type_to_char(ssh_key_type(e->publickey)), file, lineno);
			found++;
		}
		ssh_knownhosts_entry_free(e);
	}
	fclose(f);
	return found;
}

static int check_host_key(struct prov_host *h, char *err, size_t errlen)
{
	ssh_key srv = NULL;
	if (ssh_get_server_publickey(h->ssh, &srv) != SSH_OK) {
		snprintf(err, errlen, "%s offered no host key: %s", h->addr, ssh_get_error(h->ssh));
		return -EPROTO;
	}
	char fp[128];
	const char *ktype = ssh_key_type_to_char(ssh_key_type(srv));
	int r = key_fingerprint(srv, fp, sizeof fp);
	ssh_key_free(srv);
	if (r < 0) {
		snprintf(err, errlen, "cannot fingerprint the host key of %s", h->addr);
		return r;
	}
	const char *file = h->kh_file;
	char name[300];
	kh_name(h, name, sizeof name);
	if (h->key_checked) { /* reconnect for undo: the key must be the one we verified */
		if (strcmp(fp, h->host_fp) != 0) {
			snprintf(err, errlen,
				 "host key of %s changed during the run (was %s, now %s); refusing",
				 h->addr, h->host_fp, fp);
			return -EPERM;
		}
		return 0;
	}
	pthread_mutex_lock(&known_hosts_mu);
	enum ssh_known_hosts_e st = ssh_session_is_known_server(h->ssh);
	r = 0;
	switch (st) {
	case SSH_KNOWN_HOSTS_OK:
		snprintf(h->key_note, sizeof h->key_note, "host key %s", fp);
		break;
	case SSH_KNOWN_HOSTS_CHANGED:
	case SSH_KNOWN_HOSTS_OTHER: {
		char known[1024] = "";
		if (!known_entries(h, file, known, sizeof known) && !h->o->known_hosts)
			known_entries(h, GLOBAL_KNOWN_HOSTS, known, sizeof known);
		snprintf(err, errlen,
			 "host key of %s has CHANGED: known_hosts has %s, the host offers %s (%s); "
			 "refusing (possible man-in-the-middle); if the host was reinstalled, verify "
			 "the new key and run: ssh-keygen -f %s -R '%s'",
			 name, known[0] ? known : "another key", fp, ktype, file, name);
		r = -EPERM;
		break;
	}
	case SSH_KNOWN_HOSTS_UNKNOWN:
	case SSH_KNOWN_HOSTS_NOT_FOUND:
		if (!h->o->accept_new_host_key) {
			snprintf(err, errlen,
				 "unknown host key for %s (%s %s); verify it (on the host: ssh-keygen -lf "
				 "/etc/ssh/ssh_host_*_key.pub) and rerun with --accept-new-host-key to "
				 "record it in %s",
				 name, ktype, fp, file);
			r = -EPERM;
		} else if (h->o->dry_run) {
			snprintf(h->key_note, sizeof h->key_note,
				 "new host key %s accepted for this dry run (not recorded)", fp);
		} else {
			char dir[PROV_PATH];
			snprintf(dir, sizeof dir, "%s", file);
			char *slash = strrchr(dir, '/');
			if (slash && slash != dir) {
				*slash = 0;
				mkdir(dir, 0700); /* ~/.ssh may not exist yet */
			}
			if (ssh_session_update_known_hosts(h->ssh) != SSH_OK) {
				snprintf(err, errlen, "cannot record the host key of %s in %s: %s", name,
					 file, ssh_get_error(h->ssh));
				r = -EIO;
			} else {
				snprintf(h->key_note, sizeof h->key_note,
					 "new host key %s recorded in %s", fp, file);
			}
		}
		break;
	case SSH_KNOWN_HOSTS_ERROR:
	default:
		snprintf(err, errlen, "cannot check the host key of %s against %s: %s", name, file,
			 ssh_get_error(h->ssh));
		r = -EIO;
		break;
	}
	pthread_mutex_unlock(&known_hosts_mu);
	if (r == 0) {
		snprintf(h->host_fp, sizeof h->host_fp, "%s", fp);
		h->key_checked = true;
	}
	return r;
}

/* Read a line from the terminal without echo. Only called when interactive. */
static int tty_prompt(const char *prompt, char *buf, size_t len)
{
	pthread_mutex_lock(&tty_mu);
	int r = -ENOTTY;
	int fd = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (fd >= 0) {
		struct termios old, t;
		bool restore = tcgetattr(fd, &old) == 0;
		if (restore) {
			t = old;
			t.c_lflag &= ~(tcflag_t)ECHO;
			tcsetattr(fd, TCSAFLUSH, &t);
		}
		if (write(fd, prompt, strlen(prompt)) < 0)
			r = -errno;
		size_t o = 0;
		char c;
		while (o + 1 < len && read(fd, &c, 1) == 1 && c != '\n')
			buf[o++] = c;
		buf[o] = 0;
		if (restore)
			tcsetattr(fd, TCSAFLUSH, &old);
		if (write(fd, "\n", 1) < 0)
			r = -errno;
		close(fd);
		r = 0;
	}
	pthread_mutex_unlock(&tty_mu);
	return r;
}

static int passphrase_cb(const char *prompt, char *buf, size_t len, int echo, int verify,
			 void *userdata)
{
	(void)echo;
	(void)verify;
	struct prov_host *h = userdata;
	if (!h->o->interactive)
		return -1;
	char p[600];
	snprintf(p, sizeof p, "%s: %s ", h->o->identity ? h->o->identity : "key", prompt);
	return tty_prompt(p, buf, len) == 0 ? 0 : -1;
}

static int authenticate(struct prov_host *h, char *err, size_t errlen)
{
	int rc = ssh_userauth_none(h->ssh, NULL);
	if (rc == SSH_AUTH_SUCCESS)
		return 0;
	if (rc == SSH_AUTH_ERROR)
		goto transport;
	int methods = ssh_userauth_list(h->ssh, NULL);
	char tried[PROV_PATH + 64];
	rc = SSH_AUTH_DENIED;
	if (h->o->identity) {
		snprintf(tried, sizeof tried, "key %s", h->o->identity);
		ssh_key k = NULL;
		if (ssh_pki_import_privkey_file(h->o->identity, NULL, passphrase_cb, h, &k) != SSH_OK) {
			snprintf(err, errlen,
				 "cannot load the private key %s (missing, not a key, or encrypted and no "
				 "terminal to ask for its passphrase: load it into ssh-agent instead)",
				 h->o->identity);
			return -EACCES;
		}
		if (methods & SSH_AUTH_METHOD_PUBLICKEY)
			rc = ssh_userauth_publickey(h->ssh, NULL, k);
		ssh_key_free(k);
	} else {
		snprintf(tried, sizeof tried, "ssh-agent and the default keys in ~/.ssh");
		if ((methods & SSH_AUTH_METHOD_PUBLICKEY) && getenv("SSH_AUTH_SOCK"))
			rc = ssh_userauth_agent(h->ssh, NULL);
		if (rc != SSH_AUTH_SUCCESS && rc != SSH_AUTH_ERROR &&
		    (methods & SSH_AUTH_METHOD_PUBLICKEY))
			rc = ssh_userauth_publickey_auto(h->ssh, NULL, NULL);
	}
	if (rc == SSH_AUTH_ERROR)
		goto transport;
	if (rc != SSH_AUTH_SUCCESS && h->o->interactive && (methods & SSH_AUTH_METHOD_PASSWORD)) {
		char prompt[400], pw[256];
		snprintf(prompt, sizeof prompt, "%s@%s's password: ", h->user, h->addr);
		if (tty_prompt(prompt, pw, sizeof pw) == 0 && pw[0]) {
			rc = ssh_userauth_password(h->ssh, NULL, pw);
			strncat(tried, ", a password", sizeof tried - strlen(tried) - 1);
		}
		memset(pw, 0, sizeof pw);
		if (rc == SSH_AUTH_ERROR)
			goto transport;
	}
	if (rc == SSH_AUTH_SUCCESS)
		return 0;
	snprintf(err, errlen,
		 "%s@%s refused authentication (tried %s); add the public key to ~%s/.ssh/"
		 "authorized_keys on the host, or pass --identity FILE / --user USER",
		 h->user, h->addr, tried, h->user);
	return -EACCES;
transport:
	snprintf(err, errlen, "authentication with %s failed: %s", h->addr, ssh_get_error(h->ssh));
	return -EIO;
}

int pssh_connect(struct prov_host *h, char *err, size_t errlen)
{
	pssh_close(h);
	h->ssh = ssh_new();
	if (!h->ssh) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	unsigned int port = (unsigned int)h->port;
	long timeout = h->o->connect_timeout_s > 0 ? h->o->connect_timeout_s : 10;
	bool no = false;
	const char *file = h->kh_file;
	/* Deterministic: ~/.ssh/config is not read; flags say everything. */
	ssh_options_set(h->ssh, SSH_OPTIONS_PROCESS_CONFIG, &no);
	ssh_options_set(h->ssh, SSH_OPTIONS_HOST, h->addr);
	ssh_options_set(h->ssh, SSH_OPTIONS_PORT, &port);
	ssh_options_set(h->ssh, SSH_OPTIONS_USER, h->user);
	ssh_options_set(h->ssh, SSH_OPTIONS_TIMEOUT, &timeout);
	ssh_options_set(h->ssh, SSH_OPTIONS_KNOWNHOSTS, file);
	/* An explicit --known-hosts is the only trust source; otherwise the system file too. */
	ssh_options_set(h->ssh, SSH_OPTIONS_GLOBAL_KNOWNHOSTS,
			h->o->known_hosts ? "/dev/null" : GLOBAL_KNOWN_HOSTS);
	if (ssh_connect(h->ssh) != SSH_OK) {
		snprintf(err, errlen, "cannot connect to %s port %d: %s; check that sshd runs there "
				      "and the address and --port",
			 h->addr, h->port, ssh_get_error(h->ssh));
		pssh_close(h);
		return -ECONNREFUSED;
	}
	int r = check_host_key(h, err, errlen);
	if (r == 0)
		r = authenticate(h, err, errlen);
	if (r < 0)
		pssh_close(h);
	return r;
}

void pssh_close(struct prov_host *h)
{
	if (h->sftp) {
		sftp_free(h->sftp);
		h->sftp = NULL;
	}
	if (h->ssh) {
		ssh_disconnect(h->ssh);
		ssh_free(h->ssh);
		h->ssh = NULL;
	}
}

struct buf {
	char *p;
	size_t n, cap;
};

static int buf_add(struct buf *b, const char *d, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		if (b->n + n + 1 > MAX_OUTPUT)
			return -E2BIG;
		size_t cap = b->cap ? b->cap : 1024;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p)
			return -ENOMEM;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, d, n);
	b->n += n;
	b->p[b->n] = 0;
	return 0;
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int pssh_run(struct prov_host *h, const char *script, const char *stdin_data, char **out,
	     char **errout, int timeout_ms, char *err, size_t errlen)
{
	if (out)
		*out = NULL;
	if (errout)
		*errout = NULL;
	if (!h->ssh) {
		snprintf(err, errlen, "not connected to %s", h->addr);
		return -ENOTCONN;
	}
	size_t qlen = strlen(script) * 4 + 16;
	char *cmd = malloc(qlen + 8);
	if (!cmd)
		return -ENOMEM;
	memcpy(cmd, "sh -c ", 6);
	pssh_quote(script, cmd + 6, qlen);
	struct buf bo = {0}, be = {0};
	int r = -EIO;
	ssh_channel ch = ssh_channel_new(h->ssh);
	if (!ch || ssh_channel_open_session(ch) != SSH_OK ||
	    ssh_channel_request_exec(ch, cmd) != SSH_OK)
		goto transport;
	if (stdin_data && *stdin_data &&
	    ssh_channel_write(ch, stdin_data, (uint32_t)strlen(stdin_data)) == SSH_ERROR)
		goto transport;
	ssh_channel_send_eof(ch);
	uint64_t deadline = now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 60000);
	char tmp[16384];
	for (;;) {
		int n = ssh_channel_read_timeout(ch, tmp, sizeof tmp, 0, 10);
		if (n == SSH_ERROR)
			goto transport;
		if (n > 0 && buf_add(&bo, tmp, (size_t)n) < 0)
			goto toobig;
		int m;
		while ((m = ssh_channel_read_nonblocking(ch, tmp, sizeof tmp, 1)) > 0)
			if (buf_add(&be, tmp, (size_t)m) < 0)
				goto toobig;
		if (m == SSH_ERROR)
			goto transport;
		if (n == 0 && ssh_channel_is_eof(ch))
			break;
		if (now_ms() > deadline) {
			snprintf(err, errlen, "a command on %s did not finish within %d s", h->addr,
				 timeout_ms / 1000);
			r = -ETIMEDOUT;
			goto fail;
		}
	}
	int status = ssh_channel_get_exit_status(ch);
	ssh_channel_close(ch);
	ssh_channel_free(ch);
	free(cmd);
	if (out)
		*out = bo.p ? bo.p : strdup("");
	else
		free(bo.p);
	if (errout)
		*errout = be.p ? be.p : strdup("");
	else
		free(be.p);
	return status < 0 ? 255 : status;
toobig:
	snprintf(err, errlen, "a command on %s printed more than %d bytes", h->addr, MAX_OUTPUT);
	r = -E2BIG;
	goto fail;
transport:
	snprintf(err, errlen, "connection to %s lost: %s", h->addr,
		 ssh_get_error(h->ssh)[0] ? ssh_get_error(h->ssh) : "channel error");
	r = -EIO;
fail:
	if (ch) {
		ssh_channel_close(ch);
		ssh_channel_free(ch);
	}
	free(cmd);
	free(bo.p);
	free(be.p);
	return r;
}

static const char *sftp_reason(int code)
{
	switch (code) {
	case SSH_FX_NO_SUCH_FILE:
		return "no such directory";
	case SSH_FX_PERMISSION_DENIED:
		return "permission denied";
	case SSH_FX_CONNECTION_LOST:
		return "connection lost";
	default:
		return "failure";
	}
}

int pssh_put(struct prov_host *h, const char *path, const void *data, size_t len, int mode,
	     char *err, size_t errlen)
{
	if (!h->ssh) {
		snprintf(err, errlen, "not connected to %s", h->addr);
		return -ENOTCONN;
	}
	if (!h->sftp) {
		h->sftp = sftp_new(h->ssh);
		if (!h->sftp || sftp_init(h->sftp) != SSH_OK) {
			snprintf(err, errlen, "cannot start SFTP on %s: %s (is the sftp subsystem "
					      "enabled in its sshd_config?)",
				 h->addr, ssh_get_error(h->ssh));
			if (h->sftp) {
				sftp_free(h->sftp);
				h->sftp = NULL;
			}
			return -EIO;
		}
	}
	sftp_file f = sftp_open(h->sftp, path, O_WRONLY | O_CREAT | O_TRUNC, (mode_t)mode);
	if (!f) {
		snprintf(err, errlen, "cannot create %s on %s: %s", path, h->addr,
			 sftp_reason(sftp_get_error(h->sftp)));
		return -EIO;
	}
	const char *p = data;
	size_t off = 0;
	while (off < len) {
		size_t n = len - off < SFTP_CHUNK ? len - off : SFTP_CHUNK;
		ssize_t w = sftp_write(f, p + off, n);
		if (w <= 0) {
			snprintf(err, errlen, "upload of %s to %s failed after %zu of %zu bytes: %s", path,
				 h->addr, off, len,
				 ssh_is_connected(h->ssh) ? sftp_reason(sftp_get_error(h->sftp))
							  : "connection lost");
			sftp_close(f);
			return -EIO;
		}
		off += (size_t)w;
		prov_progress_add(h, (uint64_t)w);
	}
	if (sftp_close(f) != SSH_OK) {
		snprintf(err, errlen, "closing %s on %s failed: %s", path, h->addr,
			 sftp_reason(sftp_get_error(h->sftp)));
		return -EIO;
	}
	return 0;
}

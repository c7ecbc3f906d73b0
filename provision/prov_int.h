/* prov_int: what the provision sources share (not part of the module contract).
 *   ssh.c    one SSH session per host: host key check, auth, remote commands, SFTP put
 *   steps.c  the step table: check/apply/undo per step, file journal
 *   prov.c   the runner: threads, step loop, undo, events, rendering of dist files */
#ifndef SPARK_PROV_INT_H
#define SPARK_PROV_INT_H

#include "prov.h"

#include <libssh/libssh.h>
#include <libssh/sftp.h>
#include <stdbool.h>

#define PROV_PATH 512
#define PROV_MAX_JOURNAL 16

/* One file this run replaced or created, for undo. */
struct prov_jentry {
	int step;
	bool had_prev; /* PATH.sparkctl-prev holds the old file */
	char path[PROV_PATH];
};

/* A file a step manages: its wanted content. */
struct prov_file {
	char path[PROV_PATH];
	const void *data;
	size_t len;
	int mode;
	char sha[65];
	bool needed; /* check: differs on the target */
};

/* One sparkctl package of --package DIR (pkg.c), for one Debian architecture. */
#define PROV_NARCH 2 /* amd64, arm64 */
struct prov_pkg {
	char arch[16];      /* Debian architecture: amd64, arm64 */
	char name[256];     /* file name in DIR; "" when DIR has none for arch */
	char file[PROV_PATH];
	char version[64];
	void *deb, *sparkd, *sparkctl; /* the .deb, and the two programs taken out of it */
	size_t deb_len, len_sparkd, len_sparkctl;
};

struct prov_host {
	const struct prov_opts *o;
	int index;
	struct prov_result *res;

	/* where */
	char kh_file[PROV_PATH]; /* known_hosts read and written (prov_run resolves it) */
	char addr[256];
	char user[64];
	int port;

	/* session */
	ssh_session ssh;
	sftp_session sftp;
	bool key_checked;      /* host key verified once; a reconnect must see the same */
	char host_fp[128];     /* SHA256:... of the host key */
	char key_note[300];    /* what the host key check found, for the check step */

	struct prov_facts facts;
	const char *priv;      /* "" or "sudo -n " before commands that need root */
	bool use_systemd;

	/* paths on the target (PREFIX applied) */
	char p_sparkd[PROV_PATH], p_sparkctl[PROV_PATH], p_unit[PROV_PATH], p_conf[PROV_PATH];
	char p_netplan[PROV_PATH], p_state[PROV_PATH], p_sock[PROV_PATH], p_run[PROV_PATH];
	char p_pid[PROV_PATH], p_log[PROV_PATH], stage_dir[PROV_PATH];

	/* local content: this machine's binaries, or a package's (pkg != NULL) */
	const struct prov_pkg *pkgs; /* PROV_NARCH slots when --package was given, else NULL */
	const struct prov_pkg *pkg;  /* the one chosen for this target by the check step */
	char p_deb[PROV_PATH];       /* PREFIX/var/cache/sparkctl/packages/NAME.deb */
	bool deb_installed;          /* dpkg -i ran in this run (prefix /) */
	void *bin_sparkd, *bin_sparkctl;
	size_t len_sparkd, len_sparkctl;
	char *conf_text, *unit_text, *netplan_text;

	/* state for later steps and undo */
	struct prov_jentry journal[PROV_MAX_JOURNAL];
	int njournal;
	struct prov_jentry staged[PROV_MAX_JOURNAL]; /* staging files written (had_prev unused) */
	int nstaged;
	unsigned need[PROV_NSTEPS]; /* check -> apply: which files differ (bit i = file i) */
	bool files_changed;     /* sparkd, its unit or config changed: sparkd restarts */
	bool files_would_change; /* the same, found by a check (dry run) */
	bool was_running;       /* sparkd answered before the start step */
	bool was_enabled;       /* systemd: enabled before */
	bool restart_after_undo;
	int member;             /* -1 unknown, 0 not a member, 1 member of opts->head */
	char token[256], token_id[64];
	bool token_minted, joined_now;
	uint64_t progress_total, progress_done;
};

/* ssh.c */
int pssh_connect(struct prov_host *h, char *err, size_t errlen);
void pssh_close(struct prov_host *h);
/* Run a POSIX sh script on the target (through 'sh -c'), feeding stdin_data (may be NULL).
 * *out gets stdout (malloc'd, NUL-terminated; may be NULL), *errout stderr (same).
 * Returns the exit status (>= 0) or a negative code with err filled (transport). */
int pssh_run(struct prov_host *h, const char *script, const char *stdin_data, char **out,
	     char **errout, int timeout_ms, char *err, size_t errlen);
/* Write data to path over SFTP (create/truncate, mode), reporting progress. */
int pssh_put(struct prov_host *h, const char *path, const void *data, size_t len, int mode,
	     char *err, size_t errlen);
/* ~/.ssh/known_hosts of the running user (not thread-safe: call before threads). */
void pssh_default_known_hosts(char *buf, size_t len);
/* Single-quote s for sh into buf. */
const char *pssh_quote(const char *s, char *buf, size_t len);

/* prov.c */
/* Paths under opts->prefix, node name, and the rendered unit and config. */
int prov_render(struct prov_host *h, char *err, size_t errlen);
/* bytes more of progress_total were sent (emits PROV_EV_PROGRESS). */
void prov_progress_add(struct prov_host *h, uint64_t bytes);

/* pkg.c */
/* "arm64" for aarch64, "amd64" for x86_64, NULL otherwise. */
const char *prov_deb_arch(const char *machine);
/* The Package, Version and Architecture fields of `dpkg-deb -f DEB Package Version
 * Architecture` output (one "Key: value" per line, values truncated to their buffers).
 * 0 when all three are there and non-empty, else -EINVAL. */
int prov_deb_fields(const char *text, char *pkg, size_t plen, char *ver, size_t vlen, char *arch,
		    size_t alen);
/* Read DIR's sparkctl_*_{amd64,arm64}.deb into pkgs. Returns how many (>= 1) or a negative
 * code with err filled (none, two for one architecture, a wrong control field). */
int prov_pkgs_load(const char *dir, struct prov_pkg pkgs[PROV_NARCH], char *err, size_t errlen);
void prov_pkgs_free(struct prov_pkg pkgs[PROV_NARCH]);

/* steps.c */
struct prov_step {
	const char *name, *title;
	/* Read-only. Returns PROV_NEEDED, PROV_DONE, PROV_SKIP or a negative code; detail
	 * says what is there or what would change. */
	int (*check)(struct prov_host *h, char *detail, size_t len);
	/* Returns 0 or a negative code (detail: the error). Leaves journal entries for
	 * whatever it changed, even when it fails halfway. */
	int (*apply)(struct prov_host *h, char *detail, size_t len);
	int (*undo)(struct prov_host *h, char *detail, size_t len);
};
enum { PROV_DONE = 0, PROV_NEEDED = 1, PROV_SKIP = 2 };
extern const struct prov_step prov_steps[PROV_NSTEPS];
/* After a successful run: drop backups and staging leftovers. */
void prov_commit(struct prov_host *h);
/* After undo, when sparkd ran before the run: start it again on the restored files. */
int prov_restart_after_undo(struct prov_host *h, char *detail, size_t dlen);

#endif

/* provision: make a machine that has only SSH a ready cluster member (libssh).
 *
 * Contract:
 *  - prov_run() provisions every host in parallel (opts->parallel threads) and fills one
 *    struct prov_result per host. It never prints and never exits: progress goes to
 *    opts->on_event (called from host threads, one call at a time).
 *  - Steps are data (prov_step_name(i), i < PROV_NSTEPS). Each has a read-only check, an
 *    apply and an undo. A step whose check finds it done reports "unchanged". When a
 *    step fails, the steps this run changed are undone newest first, so the host is left
 *    with every step either done or undone. --dry-run runs only the checks.
 *  - Trust: host keys are checked against known_hosts. An unknown key is refused unless
 *    accept_new_host_key (then recorded); a changed key is always refused, naming both
 *    SHA256 fingerprints. Auth: a key file, ssh-agent or default keys; a password or
 *    passphrase prompt only when opts->interactive. No private key is ever copied: key
 *    files are only read locally to authenticate.
 *  - Files go over SFTP to a staging name, are verified by SHA-256 on the target, then
 *    renamed into place (the previous file is kept as NAME.sparkctl-prev until the run
 *    succeeds, for undo).
 *  - The head side (minting and revoking a single-use join token) is a callback: this
 *    module never talks to sparkd itself. Functions return 0 or a negative errno code.
 */
#ifndef SPARK_PROV_H
#define SPARK_PROV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum prov_step_id {
	PROV_STEP_CHECK = 0, /* connect, OS/arch/kernel, ConnectX-7, root or sudo */
	PROV_STEP_UPLOAD,    /* sparkd, sparkctl -> PREFIX/usr/sbin, PREFIX/usr/bin */
	PROV_STEP_INSTALL,   /* systemd unit + sparkd.yaml under PREFIX */
	PROV_STEP_NETPLAN,   /* fabric netplan file (needs opts->fabric_plan) */
	PROV_STEP_START,     /* start (or restart) sparkd, wait for its socket */
	PROV_STEP_TOKEN,     /* mint a single-use join token on the head */
	PROV_STEP_JOIN,      /* run the uploaded sparkctl join on the target */
	PROV_NSTEPS
};

enum prov_status {
	PROV_PENDING = 0,
	PROV_OK,          /* a check that passed (changes nothing) */
	PROV_CHANGED,     /* applied in this run */
	PROV_UNCHANGED,   /* already done */
	PROV_SKIPPED,     /* not applicable (detail says why) */
	PROV_PLANNED,     /* dry run: would change */
	PROV_FAILED,
	PROV_UNDONE,      /* applied, then undone after a later failure */
	PROV_UNDO_FAILED, /* applied, and the undo did not complete */
};

const char *prov_step_name(int step);            /* "check", "upload"... */
const char *prov_step_title(int step);           /* "check target"... */
const char *prov_status_name(enum prov_status s); /* "ok", "changed", "would change"... */

struct prov_step_result {
	enum prov_status status;
	char detail[256];
	uint64_t ms;
};

struct prov_result {
	char host[256];     /* as given on the command line */
	char node[64];      /* node name (the target's host name), once known */
	bool failed;
	bool changed;       /* some step changed something */
	int steps_done;     /* steps ok, changed, unchanged or skipped */
	uint64_t ms;
	char error[512];    /* one line, when failed */
	struct prov_step_result steps[PROV_NSTEPS];
};

/* What the check step learned about a target (also handed to the fabric hook). */
struct prov_facts {
	char os[32], arch[32], kernel[128], distro[128];
	char hostname[128];
	int cx7_functions;  /* PCI functions 15b3:1021 (a Spark shows 4) */
	bool root, sudo, systemd;
};

/* The cluster the host joins (from the local sparkd's status). */
struct prov_head {
	char cluster_id[64];
	char cluster_name[64];
	char address[160]; /* HOST:PORT the target uses to reach the head */
};

enum prov_event_kind { PROV_EV_STEP_START, PROV_EV_STEP_DONE, PROV_EV_PROGRESS, PROV_EV_UNDO };

struct prov_event {
	enum prov_event_kind kind;
	int host_index;
	const char *host;
	int step;
	const struct prov_step_result *res; /* STEP_DONE, UNDO */
	uint64_t done, total;               /* PROGRESS: bytes */
};

struct prov_opts {
	const char *user;          /* NULL: $USER (a HOST of USER@ADDR wins) */
	int port;                  /* 0: 22 (a HOST of ADDR:PORT wins) */
	const char *identity;      /* private key file; NULL: ssh-agent, then default keys */
	const char *known_hosts;   /* NULL: ~/.ssh/known_hosts + /etc/ssh/ssh_known_hosts */
	bool accept_new_host_key;
	bool dry_run;
	bool interactive;          /* may prompt on the terminal (password, passphrase) */
	const char *prefix;        /* "/" or an absolute dir of [A-Za-z0-9._/+-] */
	int parallel;              /* hosts at a time (>= 1) */
	int agent_port;            /* sparkd's agent port on the target (0: default) */
	int connect_timeout_s;     /* 0: 10 */
	const char *sparkd_path;   /* local binaries to upload */
	const char *sparkctl_path;
	/* A directory of sparkctl_VERSION_ARCH.deb (amd64, arm64): a target gets the package
	 * of its own architecture (dpkg -i; under a prefix its files only); without one for
	 * its architecture, the local binaries when the architectures match, else it fails. */
	const char *package_dir;
	struct prov_head head;

	/* Mint a single-use token for host: 0, or <0 with err filled. */
	int (*mint)(void *arg, const char *host, char *token, size_t toklen, char *token_id,
		    size_t idlen, char *err, size_t errlen);
	int (*revoke)(void *arg, const char *token_id);
	void *mint_arg;

	/* Fabric hook (topology): the netplan YAML for this node, malloc'd into *yaml; or
	 * -ENOENT when there is none yet, with why (may be "") saying so and what to do
	 * next (the step reports "skipped: WHY"). NULL: "skipped: no fabric plan". The
	 * step installs it as PREFIX/etc/netplan/40-sparkctl.yaml (0600) and, when PREFIX
	 * is / and the target has netplan, runs 'netplan apply'. */
	int (*fabric_plan)(void *arg, const char *node, const struct prov_facts *f, char **yaml,
			   char *why, size_t whylen);
	void *fabric_arg;

	void (*on_event)(void *arg, const struct prov_event *ev);
	void *event_arg;
};

/* Once per process, before any thread (libssh global init). */
int prov_init(void);
void prov_finish(void);

/* Provision hosts[0..n) into res[0..n). Returns the number of failed hosts (>= 0). */
int prov_run(const struct prov_opts *o, const char *const hosts[], size_t n,
	     struct prov_result *res);

/* SHA-256 of a buffer as 64 lower-case hex digits + NUL. */
void prov_sha256_hex(const void *data, size_t len, char out[65]);

#endif

/* steps: the provisioning steps as data. Each step has a read-only check, an apply
 * and an undo; remote work is POSIX sh run through the SSH session (as root: directly
 * when the login is root, else through 'sudo -n'). Files are staged, verified by
 * SHA-256 and renamed into place; the replaced file is kept as PATH.sparkctl-prev and
 * recorded in the host's journal so undo can put it back. */
#include "prov_int.h"

#include "util.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#define TOKEN_TTL_NOTE "single use, 10 min"
#define JOIN_TIMEOUT_S 20
#define START_WAIT_DS 100 /* tenths of a second */

/* ---- helpers --------------------------------------------------------------- */

/* First line of s (trimmed) into out. */
static void first_line(const char *s, char *out, size_t len)
{
	if (!s)
		s = "";
	while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')
		s++;
	size_t n = strcspn(s, "\r\n");
	if (n >= len)
		n = len - 1;
	memcpy(out, s, n);
	out[n] = 0;
}

/* Run script as root on the target. Returns the exit status or a negative code
 * (detail filled). */
static int rrun(struct prov_host *h, const char *script, const char *in, char **out,
		char **errout, int timeout_ms, char *detail, size_t dlen)
{
	char *wrapped = NULL;
	if (h->priv && h->priv[0]) {
		size_t n = strlen(script) * 4 + 64;
		wrapped = malloc(n);
		if (!wrapped)
			return -ENOMEM;
		int o = snprintf(wrapped, n, "%ssh -c ", h->priv);
		pssh_quote(script, wrapped + o, n - (size_t)o);
	}
	int r = pssh_run(h, wrapped ? wrapped : script, in, out, errout, timeout_ms, detail, dlen);
	free(wrapped);
	return r;
}

/* rrun that must succeed: on a nonzero exit, detail = what + first line of stderr. */
static int rrun_ok(struct prov_host *h, const char *what, const char *script, char **out,
		   char *detail, size_t dlen)
{
	char *e = NULL;
	int r = rrun(h, script, NULL, out, &e, 60000, detail, dlen);
	if (r > 0) {
		char l[200];
		first_line(e, l, sizeof l);
		snprintf(detail, dlen, "%s failed (exit %d)%s%s", what, r, l[0] ? ": " : "", l);
		if (out) {
			free(*out);
			*out = NULL;
		}
		r = -EIO;
	}
	free(e);
	return r;
}

static const char *q(const char *s, char *buf, size_t len) { return pssh_quote(s, buf, len); }

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

static void human_size(size_t n, char *buf, size_t len)
{
	if (n >= 1024 * 1024)
		snprintf(buf, len, "%.1f MiB", (double)n / (1024.0 * 1024.0));
	else
		snprintf(buf, len, "%zu KiB", (n + 1023) / 1024);
}

static void jadd(struct prov_host *h, int step, const char *path, bool had_prev)
{
	if (h->njournal >= PROV_MAX_JOURNAL)
		return;
	struct prov_jentry *e = &h->journal[h->njournal++];
	e->step = step;
	e->had_prev = had_prev;
	util_strlcpy(e->path, path, sizeof e->path);
}

/* ---- managed files ----------------------------------------------------------- */

static void file_set(struct prov_file *f, const char *path, const void *data, size_t len,
		     int mode)
{
	util_strlcpy(f->path, path, sizeof f->path);
	f->data = data;
	f->len = len;
	f->mode = mode;
	f->needed = false;
	prov_sha256_hex(data, len, f->sha);
}

/* Mark the files whose content or mode differ on the target. Returns how many. */
static int files_check(struct prov_host *h, struct prov_file *fs, int n, char *detail,
		       size_t dlen)
{
	char script[8192] = "", qp[PROV_PATH * 2];
	size_t o = 0;
	for (int i = 0; i < n; i++) {
		q(fs[i].path, qp, sizeof qp);
		o += (size_t)snprintf(script + o, sizeof script - o,
				      "if [ -f %s ]; then printf '%%s %%s\\n' \"$(sha256sum < %s | "
				      "cut -c1-64)\" \"$(stat -c %%a %s)\"; else echo - -; fi\n",
				      qp, qp, qp);
	}
	char *out = NULL;
	int r = rrun_ok(h, "reading files on the target", script, &out, detail, dlen);
	if (r < 0)
		return r;
	int needed = 0;
	char *save = NULL, *line = strtok_r(out, "\n", &save);
	for (int i = 0; i < n; i++, line = strtok_r(NULL, "\n", &save)) {
		char sha[80] = "", mode[16] = "";
		if (line)
			sscanf(line, "%79s %15s", sha, mode);
		int m = (int)strtol(mode, NULL, 8);
		fs[i].needed = strcmp(sha, fs[i].sha) != 0 || m != fs[i].mode;
		needed += fs[i].needed;
	}
	free(out);
	return needed;
}

static void need_save(struct prov_host *h, int step, const struct prov_file *fs, int n)
{
	h->need[step] = 0;
	for (int i = 0; i < n; i++) {
		if (!fs[i].needed)
			continue;
		h->need[step] |= 1u << i;
		if (strcmp(fs[i].path, h->p_sparkctl) != 0) /* a new sparkctl needs no restart */
			h->files_would_change = true;
	}
}

static void need_load(const struct prov_host *h, int step, struct prov_file *fs, int n)
{
	for (int i = 0; i < n; i++)
		fs[i].needed = (h->need[step] >> i) & 1u;
}

static void files_list(const struct prov_file *fs, int n, bool only_needed, char *buf,
		       size_t len)
{
	size_t o = 0;
	buf[0] = 0;
	for (int i = 0; i < n; i++) {
		if (only_needed && !fs[i].needed)
			continue;
		char sz[32];
		human_size(fs[i].len, sz, sizeof sz);
		o += (size_t)snprintf(buf + o, len > o ? len - o : 0, "%s%s (%s)", o ? ", " : "",
				      fs[i].path, sz);
		if (o >= len)
			break;
	}
}

/* Stage every needed file, verify it, then move them all into place. */
static int files_apply(struct prov_host *h, int step, struct prov_file *fs, int n,
		       char *detail, size_t dlen)
{
	char qa[PROV_PATH * 2], qb[PROV_PATH * 2], qc[PROV_PATH * 2], script[8192];
	char stage[PROV_MAX_JOURNAL][PROV_PATH];
	bool sudo_stage = h->priv && h->priv[0];
	int r;
	h->progress_total = h->progress_done = 0;
	for (int i = 0; i < n; i++)
		if (fs[i].needed)
			h->progress_total += fs[i].len;
	/* 1. directories (and a private staging dir when we are not root) */
	size_t o = 0;
	for (int i = 0; i < n; i++) {
		if (!fs[i].needed)
			continue;
		char dir[PROV_PATH];
		util_strlcpy(dir, fs[i].path, sizeof dir);
		char *sl = strrchr(dir, '/');
		if (sl && sl != dir)
			*sl = 0;
		o += (size_t)snprintf(script + o, sizeof script - o, "mkdir -p %s\n",
				      q(dir, qa, sizeof qa));
	}
	if ((r = rrun_ok(h, "creating directories", script, NULL, detail, dlen)) < 0)
		return r;
	if (sudo_stage) {
		/* as the login user, not root: SFTP writes as that user */
		if ((r = pssh_run(h, "d=\"$HOME/.sparkctl-stage\"; mkdir -p \"$d\" && chmod 700 "
				     "\"$d\" && printf '%s' \"$d\"",
				  NULL, NULL, NULL, 30000, detail, dlen)) != 0) {
			if (r > 0)
				snprintf(detail, dlen, "cannot make a staging directory in the login "
						       "user's home");
			return r > 0 ? -EIO : r;
		}
	}
	/* 2. upload to staging names, then verify them all in one go */
	o = 0;
	for (int i = 0; i < n && i < PROV_MAX_JOURNAL; i++) {
		if (!fs[i].needed)
			continue;
		if (sudo_stage)
			snprintf(stage[i], sizeof stage[i], "%s/%s", h->stage_dir, base_name(fs[i].path));
		else
			snprintf(stage[i], sizeof stage[i], "%s.sparkctl-new", fs[i].path);
		if (h->nstaged < PROV_MAX_JOURNAL) {
			h->staged[h->nstaged].step = step;
			util_strlcpy(h->staged[h->nstaged++].path, stage[i], sizeof h->staged[0].path);
		}
		if ((r = pssh_put(h, stage[i], fs[i].data, fs[i].len, 0600, detail, dlen)) < 0)
			return r;
		o += (size_t)snprintf(script + o, sizeof script - o, "sha256sum < %s | cut -c1-64\n",
				      q(stage[i], qa, sizeof qa));
	}
	char *out = NULL;
	if ((r = rrun_ok(h, "sha256sum", script, &out, detail, dlen)) < 0)
		return r;
	char *save = NULL, *line = strtok_r(out, "\n", &save);
	for (int i = 0; i < n && i < PROV_MAX_JOURNAL; i++) {
		if (!fs[i].needed)
			continue;
		if (!line || strcmp(line, fs[i].sha) != 0) {
			snprintf(detail, dlen, "SHA-256 of %s on the target is %.12s..., expected %.12s...",
				 stage[i], line ? line : "(none)", fs[i].sha);
			free(out);
			return -EIO;
		}
		line = strtok_r(NULL, "\n", &save);
	}
	free(out);
	/* 3. move into place, keeping the old file for undo; one line per file says which */
	o = 0;
	for (int i = 0; i < n && i < PROV_MAX_JOURNAL; i++) {
		if (!fs[i].needed)
			continue;
		q(fs[i].path, qa, sizeof qa);
		char nw[PROV_PATH + 16], pv[PROV_PATH + 16];
		snprintf(nw, sizeof nw, "%s.sparkctl-new", fs[i].path);
		snprintf(pv, sizeof pv, "%s.sparkctl-prev", fs[i].path);
		q(nw, qb, sizeof qb);
		q(pv, qc, sizeof qc);
		o += (size_t)snprintf(script + o, sizeof script - o,
				      "if [ -e %s ]; then cp -p %s %s || exit 1; echo prev; else echo new; "
				      "fi\n",
				      qa, qa, qc);
		if (sudo_stage) {
			char qs[PROV_PATH * 2];
			o += (size_t)snprintf(script + o, sizeof script - o,
					      "install -m %o %s %s || exit 1\nrm -f %s\n", fs[i].mode,
					      q(stage[i], qs, sizeof qs), qb, qs);
		} else {
			o += (size_t)snprintf(script + o, sizeof script - o, "chmod %o %s || exit 1\n",
					      fs[i].mode, qb);
		}
		o += (size_t)snprintf(script + o, sizeof script - o, "mv -f %s %s || exit 1\n", qb, qa);
	}
	char *e = NULL;
	r = rrun(h, script, NULL, &out, &e, 30000, detail, dlen);
	save = NULL;
	line = out ? strtok_r(out, "\n", &save) : NULL;
	for (int i = 0; i < n && i < PROV_MAX_JOURNAL && line; i++) {
		if (!fs[i].needed)
			continue;
		jadd(h, step, fs[i].path, strcmp(line, "prev") == 0);
		line = strtok_r(NULL, "\n", &save);
	}
	if (r > 0) {
		char l[200];
		first_line(e, l, sizeof l);
		snprintf(detail, dlen, "installing files failed: %s", l);
		r = -EIO;
	}
	free(out);
	free(e);
	if (r < 0)
		return r;
	for (int i = 0; i < n; i++)
		if (fs[i].needed && strcmp(fs[i].path, h->p_sparkctl) != 0)
			h->files_changed = true;
	return 0;
}

/* The check of a step that writes fs[0..n): mark what differs and keep it for
 * the apply. PROV_DONE when nothing differs (the caller says so in detail),
 * PROV_NEEDED with detail "VERB <the files that differ>", or an error. */
static int files_step_check(struct prov_host *h, int step, struct prov_file *fs, int n,
			    const char *verb, char *detail, size_t dlen)
{
	int r = files_check(h, fs, n, detail, dlen);
	if (r < 0)
		return r;
	need_save(h, step, fs, n);
	if (r == 0)
		return PROV_DONE;
	char list[200];
	files_list(fs, n, true, list, sizeof list);
	snprintf(detail, dlen, "%s %s", verb, list);
	return PROV_NEEDED;
}

/* The apply of such a step: write the files its check found different, and
 * name them in list (when list is not NULL). */
static int files_step_apply(struct prov_host *h, int step, struct prov_file *fs, int n,
			    char *list, size_t llen, char *detail, size_t dlen)
{
	need_load(h, step, fs, n);
	int r = files_apply(h, step, fs, n, detail, dlen);
	if (r < 0)
		return r;
	if (list)
		files_list(fs, n, true, list, llen);
	return 0;
}

/* Put back what this step replaced (journal, newest first). */
static int files_undo(struct prov_host *h, int step, char *detail, size_t dlen)
{
	char script[8192], qa[PROV_PATH * 2], qb[PROV_PATH * 2];
	size_t o = 0;
	int count = 0, restored = 0;
	script[0] = 0;
	for (int i = h->njournal - 1; i >= 0; i--) {
		struct prov_jentry *e = &h->journal[i];
		if (e->step != step)
			continue;
		char pv[PROV_PATH + 16], nw[PROV_PATH + 16];
		snprintf(pv, sizeof pv, "%s.sparkctl-prev", e->path);
		snprintf(nw, sizeof nw, "%s.sparkctl-new", e->path);
		q(e->path, qa, sizeof qa);
		restored += e->had_prev;
		if (e->had_prev)
			o += (size_t)snprintf(script + o, sizeof script - o, "mv -f %s %s || exit 1\n",
					      q(pv, qb, sizeof qb), qa);
		else
			o += (size_t)snprintf(script + o, sizeof script - o, "rm -f %s || exit 1\n", qa);
		o += (size_t)snprintf(script + o, sizeof script - o, "rm -f %s\n", q(nw, qb, sizeof qb));
		count++;
	}
	/* staging files of this step (gone already if they were moved into place) */
	int nst = 0;
	const char *one = NULL;
	for (int i = 0; i < h->nstaged; i++) {
		if (h->staged[i].step != step)
			continue;
		o += (size_t)snprintf(script + o, sizeof script - o, "rm -f %s\n",
				      q(h->staged[i].path, qb, sizeof qb));
		one = h->staged[i].path;
		nst++;
	}
	if (!count && !nst) {
		snprintf(detail, dlen, "nothing was replaced");
		return 0;
	}
	int r = rrun_ok(h, "restoring files", script, NULL, detail, dlen);
	if (r == 0 && count)
		snprintf(detail, dlen, "removed %d new file%s, restored %d previous", count - restored,
			 count - restored == 1 ? "" : "s", restored);
	else if (r == 0)
		snprintf(detail, dlen, "nothing was replaced; staging files removed");
	else if (!count) /* no connection: only staging files remain, a rerun replaces them */
		snprintf(detail, dlen, "nothing was replaced; %s%s may remain (the next run replaces it)",
			 one, nst > 1 ? " and others" : "");
	return count ? r : 0;
}

void prov_commit(struct prov_host *h)
{
	char script[8192], qa[PROV_PATH * 2];
	const char *paths[] = {h->p_sparkd, h->p_sparkctl, h->p_unit, h->p_conf, h->p_netplan};
	size_t o = 0;
	for (size_t i = 0; i < ARRAY_SIZE(paths); i++) {
		char pv[PROV_PATH + 16];
		snprintf(pv, sizeof pv, "%s.sparkctl-prev", paths[i]);
		o += (size_t)snprintf(script + o, sizeof script - o, "rm -f %s ",
				      q(pv, qa, sizeof qa));
		snprintf(pv, sizeof pv, "%s.sparkctl-new", paths[i]);
		o += (size_t)snprintf(script + o, sizeof script - o, "%s\n", q(pv, qa, sizeof qa));
	}
	char d[256];
	rrun(h, script, NULL, NULL, NULL, 30000, d, sizeof d);
	if (h->priv && h->priv[0])
		pssh_run(h, "rm -rf \"$HOME/.sparkctl-stage\"", NULL, NULL, NULL, 30000, d, sizeof d);
}

/* ---- 1. check target ----------------------------------------------------------- */

static const char check_script[] =
	"echo \"os=$(uname -s)\"\n"
	"echo \"arch=$(uname -m)\"\n"
	"echo \"kernel=$(uname -r)\"\n"
	"echo \"hostname=$(uname -n)\"\n"
	"echo \"uid=$(id -u)\"\n"
	"if [ \"$(id -u)\" != 0 ]; then if sudo -n true 2>/dev/null; then echo sudo=yes; "
	"else echo sudo=no; fi; fi\n"
	"cx=0; for d in /sys/bus/pci/devices/*; do [ -r \"$d/vendor\" ] || continue; "
	"if [ \"$(cat \"$d/vendor\")\" = 0x15b3 ] && [ \"$(cat \"$d/device\")\" = 0x1021 ]; then "
	"cx=$((cx+1)); fi; done; echo \"cx7=$cx\"\n"
	"if [ -d /run/systemd/system ]; then echo systemd=yes; else echo systemd=no; fi\n"
	"for t in sha256sum stat install setsid nohup; do command -v $t >/dev/null 2>&1 || "
	"echo \"missing=$t\"; done\n"
	"if [ -r /etc/os-release ]; then . /etc/os-release; echo \"distro=$PRETTY_NAME\"; fi\n"
	"echo \"stage=$HOME/.sparkctl-stage\"\n";

static int check_check(struct prov_host *h, char *detail, size_t dlen)
{
	int r = pssh_connect(h, detail, dlen);
	if (r < 0)
		return r;
	char *out = NULL;
	h->priv = "";
	if ((r = rrun_ok(h, "checking the target", check_script, &out, detail, dlen)) < 0)
		return r;
	struct prov_facts *f = &h->facts;
	char missing[128] = "";
	bool uid0 = false;
	char *save = NULL;
	for (char *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(l, '=');
		if (!eq)
			continue;
		*eq = 0;
		const char *v = eq + 1;
		if (!strcmp(l, "os"))
			util_strlcpy(f->os, v, sizeof f->os);
		else if (!strcmp(l, "arch"))
			util_strlcpy(f->arch, v, sizeof f->arch);
		else if (!strcmp(l, "kernel"))
			util_strlcpy(f->kernel, v, sizeof f->kernel);
		else if (!strcmp(l, "hostname"))
			util_strlcpy(f->hostname, v, sizeof f->hostname);
		else if (!strcmp(l, "uid"))
			uid0 = !strcmp(v, "0");
		else if (!strcmp(l, "sudo"))
			f->sudo = !strcmp(v, "yes");
		else if (!strcmp(l, "cx7"))
			f->cx7_functions = atoi(v);
		else if (!strcmp(l, "systemd"))
			f->systemd = !strcmp(v, "yes");
		else if (!strcmp(l, "distro"))
			util_strlcpy(f->distro, v, sizeof f->distro);
		else if (!strcmp(l, "stage"))
			util_strlcpy(h->stage_dir, v, sizeof h->stage_dir);
		else if (!strcmp(l, "missing"))
			snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "%s%s",
				 missing[0] ? ", " : "", v);
	}
	free(out);
	f->root = uid0;
	if (strcmp(f->os, "Linux") != 0) {
		snprintf(detail, dlen, "%s runs %s; sparkd needs Linux", h->addr, f->os);
		return -ENOTSUP;
	}
	if (strcmp(f->arch, "aarch64") != 0 && strcmp(f->arch, "x86_64") != 0) {
		snprintf(detail, dlen, "%s is %s; supported: aarch64 (DGX Spark), x86_64", h->addr,
			 f->arch);
		return -ENOTSUP;
	}
	/* The package of the target's architecture, else this machine's binaries when
	 * they are built for it. */
	struct utsname u;
	const char *darch = prov_deb_arch(f->arch);
	char pkgnote[300] = "";
	h->pkg = NULL;
	for (int a = 0; h->pkgs && darch && a < PROV_NARCH; a++)
		if (!strcmp(h->pkgs[a].arch, darch) && h->pkgs[a].deb)
			h->pkg = &h->pkgs[a];
	if (h->pkg) {
		h->bin_sparkd = h->pkg->sparkd;
		h->len_sparkd = h->pkg->len_sparkd;
		h->bin_sparkctl = h->pkg->sparkctl;
		h->len_sparkctl = h->pkg->len_sparkctl;
		snprintf(pkgnote, sizeof pkgnote, "; package %s (%s %s)", h->pkg->name,
			 h->pkg->version, h->pkg->arch);
	} else if (uname(&u) == 0 && strcmp(u.machine, f->arch) != 0) {
		if (h->pkgs)
			snprintf(detail, dlen,
				 "%s is %s: --package %s has no sparkctl_VERSION_%s.deb, and the "
				 "sparkd/sparkctl here are built for %s; add the %s package there "
				 "(docs/provision.md)",
				 h->addr, f->arch, h->o->package_dir, darch, u.machine, darch);
		else
			snprintf(detail, dlen,
				 "%s is %s but the sparkd/sparkctl here are built for %s; give the %s "
				 "package with --package DIR, or run provision from a %s machine",
				 h->addr, f->arch, u.machine, darch, f->arch);
		return -ENOTSUP;
	} else if (h->pkgs) {
		snprintf(pkgnote, sizeof pkgnote,
			 "; no %s package in %s: this machine's binaries (same architecture)", darch,
			 h->o->package_dir);
	}
	if (missing[0]) {
		snprintf(detail, dlen, "%s lacks %s (coreutils/util-linux); install them first",
			 h->addr, missing);
		return -ENOTSUP;
	}
	bool prefixed = strcmp(h->o->prefix, "/") != 0;
	if (uid0)
		h->priv = "";
	else if (f->sudo)
		h->priv = "sudo -n ";
	else if (!prefixed) {
		snprintf(detail, dlen,
			 "%s on %s is not root and 'sudo -n' needs a password; use --user root or "
			 "allow passwordless sudo for this user",
			 h->user, h->addr);
		return -EPERM;
	} else {
		h->priv = ""; /* --prefix in a directory the user may write */
	}
	h->use_systemd = !prefixed && f->systemd;
	if ((r = prov_render(h, detail, dlen)) < 0)
		return r;
	char cx[64];
	if (f->cx7_functions)
		snprintf(cx, sizeof cx, "ConnectX-7 (%d PCI functions)", f->cx7_functions);
	else
		snprintf(cx, sizeof cx, "no ConnectX-7");
	if (h->pkg) {
		char rel[PROV_PATH];
		snprintf(rel, sizeof rel, "%s/var/cache/sparkctl/packages/%s",
			 prefixed ? h->o->prefix : "", h->pkg->name);
		util_strlcpy(h->p_deb, rel, sizeof h->p_deb);
	}
	snprintf(detail, dlen, "%s %s %s, %s, %s, node %s%s%s%s", f->os, f->arch, f->kernel, cx,
		 uid0 ? "root" : f->sudo ? "sudo" : "no root (prefix install)", h->res->node,
		 pkgnote, strstr(h->key_note, "new host key") ? "; " : "",
		 strstr(h->key_note, "new host key") ? h->key_note : "");
	return PROV_DONE;
}

/* ---- 2. upload binaries ------------------------------------------------------------ */

/* sparkd, sparkctl and, with a package, the .deb they were taken from. */
static int upload_files(struct prov_host *h, struct prov_file fs[3])
{
	file_set(&fs[0], h->p_sparkd, h->bin_sparkd, h->len_sparkd, 0755);
	file_set(&fs[1], h->p_sparkctl, h->bin_sparkctl, h->len_sparkctl, 0755);
	if (!h->pkg)
		return 2;
	file_set(&fs[2], h->p_deb, h->pkg->deb, h->pkg->deb_len, 0644);
	return 3;
}

static int upload_check(struct prov_host *h, char *detail, size_t dlen)
{
	struct prov_file fs[3];
	int n = upload_files(h, fs);
	int r = files_step_check(h, PROV_STEP_UPLOAD, fs, n, "upload", detail, dlen);
	if (r == PROV_DONE)
		snprintf(detail, dlen, "sparkd, sparkctl%s up to date (sha256 %.12s..., %.12s...)",
			 h->pkg ? " and their package" : "", fs[0].sha, fs[1].sha);
	return r;
}

/* The package on the target: its Architecture field must be the target's own dpkg
 * architecture; under / it is installed with dpkg -i (the unit enabled, not started: the
 * start step does that); under a prefix its two programs are already in place. */
static int upload_install_deb(struct prov_host *h, char *detail, size_t dlen)
{
	char script[2048], qd[PROV_PATH * 2];
	q(h->p_deb, qd, sizeof qd);
	bool root = strcmp(h->o->prefix, "/") == 0;
	snprintf(script, sizeof script,
		 "if command -v dpkg >/dev/null 2>&1; then a=$(dpkg-deb -f %s Architecture) || "
		 "exit 3; t=$(dpkg --print-architecture); if [ \"$a\" != \"$t\" ]; then echo "
		 "\"the package is for $a but this machine's dpkg architecture is $t\" >&2; exit 4; fi; "
		 "elif [ %d = 1 ]; then echo 'no dpkg on the target: it is not Debian or Ubuntu' >&2; "
		 "exit 5; fi\n"
		 "if [ %d = 1 ]; then %sdpkg -i %s >/dev/null || exit 6; fi\n",
		 qd, root, root, h->priv, qd);
	char *e = NULL;
	int r = rrun(h, script, NULL, NULL, &e, 300000, detail, dlen);
	if (r > 0) {
		char l[200];
		first_line(e, l, sizeof l);
		snprintf(detail, dlen, "%s %s: %s", r == 6 ? "dpkg -i" : "checking", h->pkg->name,
			 l[0] ? l : "failed");
		r = -EIO;
	}
	free(e);
	if (r == 0 && root)
		h->deb_installed = true;
	return r;
}

static int upload_apply(struct prov_host *h, char *detail, size_t dlen)
{
	struct prov_file fs[3];
	int n = upload_files(h, fs);
	char list[200];
	int r = files_step_apply(h, PROV_STEP_UPLOAD, fs, n, list, sizeof list, detail, dlen);
	if (r < 0)
		return r;
	if (h->pkg && (r = upload_install_deb(h, detail, dlen)) < 0)
		return r;
	if (!h->pkg)
		snprintf(detail, dlen, "%s, SHA-256 verified", list);
	else if (h->deb_installed)
		snprintf(detail, dlen, "%s %s installed with dpkg -i; %s, SHA-256 verified",
			 h->pkg->name, h->pkg->arch, list);
	else
		snprintf(detail, dlen, "%s (%s, checked by dpkg-deb) under the prefix; %s, SHA-256 "
				       "verified",
			 h->pkg->name, h->pkg->arch, list);
	return 0;
}

static int upload_undo(struct prov_host *h, char *detail, size_t dlen)
{
	int r = files_undo(h, PROV_STEP_UPLOAD, detail, dlen);
	if (h->deb_installed) {
		/* the files are back; dpkg still lists the package this run installed */
		size_t l = strlen(detail);
		snprintf(detail + l, dlen - l, "; dpkg keeps %s registered (dpkg -r sparkctl "
					       "removes it)",
			 h->pkg->name);
	}
	return r;
}

/* ---- 3. unit and config ------------------------------------------------------------- */

static void install_files(struct prov_host *h, struct prov_file fs[2])
{
	file_set(&fs[0], h->p_unit, h->unit_text, strlen(h->unit_text), 0644);
	file_set(&fs[1], h->p_conf, h->conf_text, strlen(h->conf_text), 0644);
}

static int install_check(struct prov_host *h, char *detail, size_t dlen)
{
	struct prov_file fs[2];
	install_files(h, fs);
	int r = files_step_check(h, PROV_STEP_INSTALL, fs, 2, "write", detail, dlen);
	if (r == PROV_DONE)
		snprintf(detail, dlen, "%s, %s up to date", fs[0].path, fs[1].path);
	return r;
}

static int install_apply(struct prov_host *h, char *detail, size_t dlen)
{
	struct prov_file fs[2];
	install_files(h, fs);
	char list[200];
	int r = files_step_apply(h, PROV_STEP_INSTALL, fs, 2, list, sizeof list, detail, dlen);
	if (r < 0)
		return r;
	if (h->use_systemd &&
	    (r = rrun_ok(h, "systemctl daemon-reload", "systemctl daemon-reload", NULL, detail,
			 dlen)) < 0)
		return r;
	snprintf(detail, dlen, "wrote %s", list);
	return 0;
}

static int install_undo(struct prov_host *h, char *detail, size_t dlen)
{
	int r = files_undo(h, PROV_STEP_INSTALL, detail, dlen);
	if (r == 0 && h->use_systemd) {
		char d[256];
		rrun(h, "systemctl daemon-reload", NULL, NULL, NULL, 30000, d, sizeof d);
	}
	return r;
}

/* ---- 4. fabric netplan (hook: topology, issue 5) -------------------------------------- */

static int netplan_file(struct prov_host *h, struct prov_file *f, char *detail, size_t dlen)
{
	if (!h->o->fabric_plan) {
		snprintf(detail, dlen, "no fabric plan");
		return PROV_SKIP;
	}
	if (!h->netplan_text) {
		char why[512] = "";
		int r = h->o->fabric_plan(h->o->fabric_arg, h->res->node, &h->facts, &h->netplan_text,
					  why, sizeof why);
		if (r == -ENOENT || (r == 0 && !h->netplan_text)) {
			if (why[0])
				snprintf(detail, dlen, "%s", why);
			else
				snprintf(detail, dlen, "no fabric plan for %s", h->res->node);
			return PROV_SKIP;
		}
		if (r < 0) {
			if (why[0])
				snprintf(detail, dlen, "the fabric plan for %s failed: %s", h->res->node,
					 why);
			else
				snprintf(detail, dlen, "the fabric plan for %s failed: %s",
					 h->res->node, strerror(-r));
			return r;
		}
	}
	file_set(f, h->p_netplan, h->netplan_text, strlen(h->netplan_text), 0600);
	return PROV_NEEDED;
}

static bool prefix_is_root(const struct prov_host *h) { return strcmp(h->o->prefix, "/") == 0; }

/* 'netplan apply' when the target has netplan: 1 applied, 0 no netplan, <0 failed. */
#define NETPLAN_APPLY                                                                        \
	"if command -v netplan >/dev/null 2>&1; then netplan apply && echo applied=yes; "    \
	"else echo applied=no; fi"

static int netplan_check(struct prov_host *h, char *detail, size_t dlen)
{
	struct prov_file f;
	int r = netplan_file(h, &f, detail, dlen);
	if (r != PROV_NEEDED)
		return r;
	if ((r = files_check(h, &f, 1, detail, dlen)) < 0)
		return r;
	need_save(h, PROV_STEP_NETPLAN, &f, 1);
	snprintf(detail, dlen, r ? "write %s" : "%s up to date", f.path);
	return r ? PROV_NEEDED : PROV_DONE;
}

static int netplan_apply(struct prov_host *h, char *detail, size_t dlen)
{
	struct prov_file f;
	int r = netplan_file(h, &f, detail, dlen);
	if (r != PROV_NEEDED)
		return r < 0 ? r : 0;
	if ((r = files_step_apply(h, PROV_STEP_NETPLAN, &f, 1, NULL, 0, detail, dlen)) < 0)
		return r;
	const char *how = " (not applied: --prefix)";
	if (prefix_is_root(h)) {
		char *out = NULL;
		if ((r = rrun_ok(h, "netplan apply", NETPLAN_APPLY, &out, detail, dlen)) < 0)
			return r;
		how = out && strstr(out, "applied=yes") ? ", applied"
							: " (no netplan on the target: not applied)";
		free(out);
	}
	snprintf(detail, dlen, "wrote %s (mode 600)%s", f.path, how);
	return 0;
}

static int netplan_undo(struct prov_host *h, char *detail, size_t dlen)
{
	int r = files_undo(h, PROV_STEP_NETPLAN, detail, dlen);
	if (r == 0 && prefix_is_root(h) && h->netplan_text) {
		char d[256];
		rrun(h, NETPLAN_APPLY, NULL, NULL, NULL, 60000, d, sizeof d);
	}
	return r;
}

/* ---- 5. start sparkd -------------------------------------------------------------- */

/* "running=yes|no current=yes|no enabled=yes|no pid=N" */
static int start_probe(struct prov_host *h, bool *running, bool *current, bool *enabled,
		       char *pid, size_t pidlen, char *detail, size_t dlen)
{
	char script[4096], qc[PROV_PATH * 2], qs[PROV_PATH * 2], qp[PROV_PATH * 2],
		qd[PROV_PATH * 2];
	q(h->p_sparkctl, qc, sizeof qc);
	q(h->p_sock, qs, sizeof qs);
	q(h->p_pid, qp, sizeof qp);
	q(h->p_sparkd, qd, sizeof qd);
	if (h->use_systemd)
		snprintf(script, sizeof script,
			 "if systemctl is-active --quiet sparkd && %s --socket %s version -o json "
			 "2>/dev/null | grep -q sparkd_version; then echo running=yes; else echo "
			 "running=no; fi\n"
			 "echo current=yes\n"
			 "if systemctl is-enabled --quiet sparkd; then echo enabled=yes; else echo "
			 "enabled=no; fi\n"
			 "echo \"pid=$(systemctl show -p MainPID --value sparkd)\"\n",
			 qc, qs);
	else
		snprintf(script, sizeof script,
			 "if [ -x %s ] && %s --socket %s version -o json 2>/dev/null | grep -q "
			 "sparkd_version; then echo running=yes; else echo running=no; fi\n"
			 "pid=$(cat %s 2>/dev/null); echo \"pid=$pid\"\n"
			 "if [ -n \"$pid\" ] && [ \"$(readlink /proc/$pid/exe 2>/dev/null)\" = "
			 "\"$(readlink -f %s)\" ]; then echo current=yes; else echo current=no; fi\n"
			 "echo enabled=no\n",
			 qc, qc, qs, qp, qd);
	char *out = NULL;
	int r = rrun_ok(h, "looking for sparkd", script, &out, detail, dlen);
	if (r < 0)
		return r;
	*running = strstr(out, "running=yes") != NULL;
	*current = strstr(out, "current=yes") != NULL;
	*enabled = strstr(out, "enabled=yes") != NULL;
	const char *p = strstr(out, "pid=");
	pid[0] = 0;
	if (p)
		first_line(p + 4, pid, pidlen);
	free(out);
	return 0;
}

static int start_check(struct prov_host *h, char *detail, size_t dlen)
{
	bool running, current, enabled;
	char pid[32];
	int r = start_probe(h, &running, &current, &enabled, pid, sizeof pid, detail, dlen);
	if (r < 0)
		return r;
	h->was_running = running;
	h->was_enabled = enabled;
	bool renew = h->files_changed || (h->o->dry_run && h->files_would_change);
	const char *how = h->use_systemd ? "systemd unit sparkd" : "in the background";
	if (running && current && !renew && (!h->use_systemd || enabled)) {
		snprintf(detail, dlen, "sparkd running (%s, pid %s), socket %s answers", how,
			 pid[0] ? pid : "?", h->p_sock);
		return PROV_DONE;
	}
	snprintf(detail, dlen, "%s sparkd (%s)%s", running ? "restart" : "start", how,
		 running && renew ? ": new files" : "");
	return PROV_NEEDED;
}

static int start_sparkd(struct prov_host *h, bool restart, char *detail, size_t dlen)
{
	char script[8192], qc[PROV_PATH * 2], qs[PROV_PATH * 2], qp[PROV_PATH * 2],
		qd[PROV_PATH * 2], qf[PROV_PATH * 2], qr[PROV_PATH * 2], qst[PROV_PATH * 2],
		ql[PROV_PATH * 2], qld[PROV_PATH * 2];
	q(h->p_sparkctl, qc, sizeof qc);
	q(h->p_sock, qs, sizeof qs);
	q(h->p_pid, qp, sizeof qp);
	q(h->p_sparkd, qd, sizeof qd);
	q(h->p_conf, qf, sizeof qf);
	q(h->p_run, qr, sizeof qr);
	q(h->p_state, qst, sizeof qst);
	q(h->p_log, ql, sizeof ql);
	char logdir[PROV_PATH];
	util_strlcpy(logdir, h->p_log, sizeof logdir);
	*strrchr(logdir, '/') = 0;
	q(logdir, qld, sizeof qld);
	size_t o;
	if (h->use_systemd) {
		o = (size_t)snprintf(script, sizeof script,
				     "systemctl daemon-reload && systemctl enable --quiet sparkd && "
				     "systemctl %s sparkd || exit 1\n",
				     restart ? "restart" : "start");
	} else {
		o = (size_t)snprintf(
			script, sizeof script,
			"pid=$(cat %s 2>/dev/null); want=$(readlink -f %s)\n"
			"exe=$(readlink /proc/${pid:-none}/exe 2>/dev/null)\n"
			"if [ -n \"$pid\" ] && { [ \"$exe\" = \"$want\" ] || [ \"$exe\" = \"$want (deleted)\" ]; }; "
			"then kill \"$pid\"; i=0; "
			"while kill -0 \"$pid\" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; "
			"i=$((i+1)); done; kill -9 \"$pid\" 2>/dev/null; fi\n"
			"mkdir -p %s %s %s && chmod 700 %s || exit 1\n"
			"cd /\n"
			"setsid nohup sh -c 'echo $$ > \"$1\"; exec \"$2\" --config \"$3\"' sparkd %s %s "
			"%s >>%s 2>&1 </dev/null &\n",
			qp, qd, qr, qst, qld, qst, qp, qd, qf, ql);
	}
	snprintf(script + o, sizeof script - o,
		 "i=0; while [ $i -lt %d ]; do if %s --socket %s version -o json 2>/dev/null | "
		 "grep -q sparkd_version; then "
		 "cat %s 2>/dev/null || systemctl show -p MainPID --value sparkd; exit 0; fi; "
		 "sleep 0.1; i=$((i+1)); done\n"
		 "echo \"sparkd did not answer on %s within 10 s\" >&2; %s%s >&2; exit 1\n",
		 START_WAIT_DS, qc, qs, qp, h->p_sock,
		 h->use_systemd ? "journalctl -u sparkd -n 2 --no-pager -o cat" : "tail -n 2 ",
		 h->use_systemd ? "" : ql);
	char *out = NULL;
	int r = rrun_ok(h, "starting sparkd", script, &out, detail, dlen);
	if (r < 0)
		return r;
	char pid[32];
	first_line(out, pid, sizeof pid);
	free(out);
	snprintf(detail, dlen, "sparkd %s (%s, pid %s), socket %s answers",
		 restart ? "restarted" : "started",
		 h->use_systemd ? "systemd unit sparkd, enabled" : "in the background", pid, h->p_sock);
	return 0;
}

static int start_apply(struct prov_host *h, char *detail, size_t dlen)
{
	bool running, current, enabled;
	char pid[32];
	int r = start_probe(h, &running, &current, &enabled, pid, sizeof pid, detail, dlen);
	if (r < 0)
		return r;
	return start_sparkd(h, running, detail, dlen);
}

static int stop_sparkd(struct prov_host *h, char *detail, size_t dlen)
{
	char script[2048], qp[PROV_PATH * 2], qd[PROV_PATH * 2];
	if (h->use_systemd)
		snprintf(script, sizeof script, "systemctl stop sparkd; %s",
			 h->was_enabled ? "true" : "systemctl disable --quiet sparkd");
	else
		snprintf(script, sizeof script,
			 "pid=$(cat %s 2>/dev/null); [ -n \"$pid\" ] || exit 0; want=$(readlink -f %s)\n"
			 "exe=$(readlink /proc/$pid/exe 2>/dev/null)\n"
			 "if [ \"$exe\" = \"$want\" ] || [ \"$exe\" = \"$want (deleted)\" ]; then "
			 "kill \"$pid\"; i=0; while kill -0 \"$pid\" 2>/dev/null && [ $i -lt 50 ]; do "
			 "sleep 0.1; i=$((i+1)); done; kill -9 \"$pid\" 2>/dev/null; fi; rm -f %s; true",
			 q(h->p_pid, qp, sizeof qp), q(h->p_sparkd, qd, sizeof qd), qp);
	int r = rrun_ok(h, "stopping sparkd", script, NULL, detail, dlen);
	if (r == 0)
		snprintf(detail, dlen, "sparkd stopped");
	return r;
}

static int start_undo(struct prov_host *h, char *detail, size_t dlen)
{
	if (h->was_running) { /* it ran before: restart it once the old files are back */
		h->restart_after_undo = true;
		snprintf(detail, dlen, "sparkd restarts once the previous files are back");
		return 0;
	}
	return stop_sparkd(h, detail, dlen);
}

/* ---- 6./7. token and join ------------------------------------------------------------ */

/* Is the target's sparkd a member of opts->head's cluster? Sets h->member. */
static int membership(struct prov_host *h, char *detail, size_t dlen)
{
	if (h->member >= 0)
		return 0;
	char script[4096], qc[PROV_PATH * 2], qs[PROV_PATH * 2];
	q(h->p_sparkctl, qc, sizeof qc);
	q(h->p_sock, qs, sizeof qs);
	snprintf(script, sizeof script,
		 "[ -x %s ] && [ -S %s ] || exit 0\n"
		 "%s --socket %s version -o json 2>/dev/null | tr -d '\\n'; echo\n"
		 "%s --socket %s status -o json 2>&1 | tr -d '\\n'; echo\n",
		 qc, qs, qc, qs, qc, qs);
	char *out = NULL;
	int r = rrun_ok(h, "asking the node's sparkd", script, &out, detail, dlen);
	if (r < 0)
		return r;
	h->member = 0;
	char *nl = strchr(out, '\n');
	if (!out[0] || !nl) {
		free(out);
		return 0;
	}
	*nl = 0;
	json_t *ver = json_loads(out, 0, NULL);
	json_t *st = json_loads(nl + 1, 0, NULL);
	const char *role = json_string_value(json_object_get(ver, "role"));
	const char *cname = json_string_value(json_object_get(ver, "cluster"));
	const char *cid = json_string_value(json_object_get(json_object_get(st, "cluster"), "id"));
	const struct prov_head *hd = &h->o->head;
	r = 0;
	if (!ver || !role) {
		h->member = 0; /* sparkd there but not answering version: join will say why */
	} else if (!strcmp(role, "head")) {
		snprintf(detail, dlen,
			 "%s is the head of cluster %s; provision adds workers only", h->addr,
			 cname ? cname : "?");
		r = -EEXIST;
	} else if (!strcmp(role, "worker")) {
		if (cid && !strcmp(cid, hd->cluster_id))
			h->member = 1;
		else if (strstr(nl + 1, "was removed"))
			h->member = 0; /* removed: may join again */
		else if (!cid && cname && !strcmp(cname, hd->cluster_name))
			h->member = 1; /* its head does not answer right now; same cluster name */
		else {
			snprintf(detail, dlen,
				 "%s is a member of another cluster (%s); run 'sparkctl leave' on it "
				 "first",
				 h->addr, cname ? cname : "?");
			r = -EEXIST;
		}
	}
	json_decref(ver);
	json_decref(st);
	free(out);
	return r;
}

static int token_check(struct prov_host *h, char *detail, size_t dlen)
{
	int r = membership(h, detail, dlen);
	if (r < 0)
		return r;
	if (h->member == 1) {
		snprintf(detail, dlen, "already in cluster %s: no token needed",
			 h->o->head.cluster_name);
		return PROV_DONE;
	}
	snprintf(detail, dlen, "mint a join token (%s)", TOKEN_TTL_NOTE);
	return PROV_NEEDED;
}

static int token_apply(struct prov_host *h, char *detail, size_t dlen)
{
	if (!h->o->mint) {
		snprintf(detail, dlen, "no way to mint a token (internal)");
		return -ENOSYS;
	}
	int r = h->o->mint(h->o->mint_arg, h->res->host, h->token, sizeof h->token, h->token_id,
			   sizeof h->token_id, detail, dlen);
	if (r < 0)
		return r;
	h->token_minted = true;
	snprintf(detail, dlen, "token %s (%s)", h->token_id, TOKEN_TTL_NOTE);
	return 0;
}

static int token_undo(struct prov_host *h, char *detail, size_t dlen)
{
	if (!h->token_minted || !h->o->revoke) {
		snprintf(detail, dlen, "no token to revoke");
		return 0;
	}
	h->o->revoke(h->o->mint_arg, h->token_id);
	memset(h->token, 0, sizeof h->token);
	h->token_minted = false;
	snprintf(detail, dlen, "token %s revoked", h->token_id);
	return 0;
}

static int join_check(struct prov_host *h, char *detail, size_t dlen)
{
	int r = membership(h, detail, dlen);
	if (r < 0)
		return r;
	if (h->member == 1) {
		snprintf(detail, dlen, "member of cluster %s as %s", h->o->head.cluster_name,
			 h->res->node);
		return PROV_DONE;
	}
	snprintf(detail, dlen, "join %s at %s as %s", h->o->head.cluster_name, h->o->head.address,
		 h->res->node);
	return PROV_NEEDED;
}

static int join_apply(struct prov_host *h, char *detail, size_t dlen)
{
	if (!h->token_minted) {
		snprintf(detail, dlen, "no join token (the token step did not run)");
		return -EINVAL;
	}
	char script[4096], qc[PROV_PATH * 2], qs[PROV_PATH * 2], qh[400], qn[200];
	/* the token travels on stdin, never on a command line */
	snprintf(script, sizeof script,
		 "read -r t; SPARKCTL_TOKEN=$t; export SPARKCTL_TOKEN; exec %s --socket %s join %s "
		 "--name %s --timeout %ds -o json",
		 q(h->p_sparkctl, qc, sizeof qc), q(h->p_sock, qs, sizeof qs),
		 q(h->o->head.address, qh, sizeof qh), q(h->res->node, qn, sizeof qn),
		 JOIN_TIMEOUT_S);
	char in[300], *out = NULL, *e = NULL;
	snprintf(in, sizeof in, "%s\n", h->token);
	int r = rrun(h, script, in, &out, &e, (JOIN_TIMEOUT_S + 30) * 1000, detail, dlen);
	memset(in, 0, sizeof in);
	if (r > 0) {
		char l[220];
		first_line(e, l, sizeof l);
		if (!strncmp(l, "sparkctl: ", 10))
			memmove(l, l + 10, strlen(l + 10) + 1);
		snprintf(detail, dlen, "join failed: %s", l[0] ? l : "no message");
		r = -EIO;
	} else if (r == 0) {
		h->joined_now = true;
		h->member = 1;
		snprintf(detail, dlen, "joined %s at %s as %s", h->o->head.cluster_name,
			 h->o->head.address, h->res->node);
	}
	free(out);
	free(e);
	return r;
}

static int join_undo(struct prov_host *h, char *detail, size_t dlen)
{
	if (!h->joined_now) {
		snprintf(detail, dlen, "not joined");
		return 0;
	}
	char script[2048], qc[PROV_PATH * 2], qs[PROV_PATH * 2];
	snprintf(script, sizeof script, "%s --socket %s leave", q(h->p_sparkctl, qc, sizeof qc),
		 q(h->p_sock, qs, sizeof qs));
	int r = rrun_ok(h, "sparkctl leave", script, NULL, detail, dlen);
	if (r == 0)
		snprintf(detail, dlen, "left the cluster");
	return r;
}

const struct prov_step prov_steps[PROV_NSTEPS] = {
	[PROV_STEP_CHECK] = {"check", "check target", check_check, NULL, NULL},
	[PROV_STEP_UPLOAD] = {"upload", "upload binaries", upload_check, upload_apply, upload_undo},
	[PROV_STEP_INSTALL] = {"install", "install unit and config", install_check, install_apply,
			       install_undo},
	[PROV_STEP_NETPLAN] = {"netplan", "fabric netplan", netplan_check, netplan_apply,
			       netplan_undo},
	[PROV_STEP_START] = {"start", "start sparkd", start_check, start_apply, start_undo},
	[PROV_STEP_TOKEN] = {"token", "mint join token", token_check, token_apply, token_undo},
	[PROV_STEP_JOIN] = {"join", "join cluster", join_check, join_apply, join_undo},
};

/* After undo: a sparkd that ran before this run runs again, on the restored files. */
int prov_restart_after_undo(struct prov_host *h, char *detail, size_t dlen)
{
	return start_sparkd(h, true, detail, dlen);
}

/* pkg: the sparkctl packages of --package DIR, read on the head.
 * For each Debian architecture provision knows (amd64, arm64), at most one
 * sparkctl_VERSION_ARCH.deb in DIR. Its control fields (Package, Version,
 * Architecture) are read with dpkg-deb and must say sparkctl and ARCH: the
 * architecture field decides, not the file name. sparkd and sparkctl are taken out of
 * the package (dpkg-deb -x into a private temp dir), so the upload step sends exactly the
 * package's files, and the .deb itself goes along for dpkg -i on the target. */
#include "prov_int.h"

#include "util.h"

#include <dirent.h>
#include <stdbool.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_DEB (512u << 20)
#define MAX_BIN (256u << 20)

const char *prov_deb_arch(const char *machine)
{
	if (!strcmp(machine, "aarch64"))
		return "arm64";
	if (!strcmp(machine, "x86_64"))
		return "amd64";
	return NULL;
}

/* Run argv (no shell), stdout into out (NUL-terminated, truncated to len). Exit status,
 * or a negative code when it could not run. */
static int run_argv(char *const argv[], char *out, size_t len)
{
	int p[2];
	if (pipe(p) < 0)
		return -errno;
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		int e = -errno;
		close(p[0]);
		close(p[1]);
		return e;
	}
	if (pid == 0) {
		dup2(p[1], 1);
		close(p[0]);
		close(p[1]);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	size_t n = 0;
	ssize_t r;
	char sink[512];
	while ((r = read(p[0], n + 1 < len ? out + n : sink,
			 n + 1 < len ? len - n - 1 : sizeof sink)) > 0)
		if (n + 1 < len)
			n += (size_t)r;
	close(p[0]);
	if (len)
		out[n] = 0;
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int prov_deb_fields(const char *text, char *pkg, size_t plen, char *ver, size_t vlen, char *arch,
		    size_t alen)
{
	static const char *const keys[3] = {"Package: ", "Version: ", "Architecture: "};
	char *out[3] = {pkg, ver, arch};
	size_t cap[3] = {plen, vlen, alen};
	bool seen[3] = {false, false, false};
	for (int i = 0; i < 3; i++)
		if (cap[i])
			out[i][0] = 0;
	for (const char *l = text; *l;) {
		const char *nl = strchr(l, '\n');
		size_t n = nl ? (size_t)(nl - l) : strlen(l);
		for (int i = 0; i < 3; i++) {
			size_t kl = strlen(keys[i]);
			if (n < kl || strncmp(l, keys[i], kl) != 0 || !cap[i])
				continue;
			size_t vl = n - kl < cap[i] - 1 ? n - kl : cap[i] - 1;
			memcpy(out[i], l + kl, vl);
			out[i][vl] = 0;
			seen[i] = vl > 0;
		}
		l += n + (nl ? 1 : 0);
	}
	return seen[0] && seen[1] && seen[2] ? 0 : -EINVAL;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static int load_one(struct prov_pkg *k, const char *dir, const char *name, char *err,
		    size_t errlen)
{
	snprintf(k->file, sizeof k->file, "%s/%s", dir, name);
	char fields[512];
	char *fa[] = {"dpkg-deb", "-f", k->file, "Package", "Version", "Architecture", NULL};
	int r = run_argv(fa, fields, sizeof fields);
	if (r != 0) {
		snprintf(err, errlen, "%s: %s", k->file,
			 r == 127 ? "dpkg-deb is needed to read packages (apt install dpkg)"
				  : "not a Debian package (dpkg-deb -f failed)");
		return -EINVAL;
	}
	char pkg[64], arch[32];
	if (prov_deb_fields(fields, pkg, sizeof pkg, k->version, sizeof k->version, arch,
			    sizeof arch) < 0 ||
	    strcmp(pkg, "sparkctl") != 0 || strcmp(arch, k->arch) != 0) {
		snprintf(err, errlen, "%s says Package '%s', Architecture '%s'; expected sparkctl, %s",
			 k->file, pkg, arch, k->arch);
		return -EINVAL;
	}
	char tmp[] = "/tmp/sparkctl-pkg-XXXXXX";
	if (!mkdtemp(tmp)) {
		snprintf(err, errlen, "cannot make a temp dir: %s", strerror(errno));
		return -errno;
	}
	char *xa[] = {"dpkg-deb", "-x", k->file, tmp, NULL};
	char junk[16];
	r = run_argv(xa, junk, sizeof junk);
	char p1[PROV_PATH], p2[PROV_PATH];
	snprintf(p1, sizeof p1, "%s/usr/sbin/sparkd", tmp);
	snprintf(p2, sizeof p2, "%s/usr/bin/sparkctl", tmp);
	char *d = NULL;
	if (r == 0 && (r = util_read_file(p1, &d, &k->len_sparkd, MAX_BIN)) == 0) {
		k->sparkd = d;
		if ((r = util_read_file(p2, &d, &k->len_sparkctl, MAX_BIN)) == 0)
			k->sparkctl = d;
	}
	nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	if (r != 0) {
		snprintf(err, errlen, "%s: cannot take usr/sbin/sparkd and usr/bin/sparkctl out of it",
			 k->file);
		return -EINVAL;
	}
	if ((r = util_read_file(k->file, &d, &k->deb_len, MAX_DEB)) < 0) {
		snprintf(err, errlen, "cannot read %s: %s", k->file, strerror(-r));
		return r;
	}
	k->deb = d;
	util_strlcpy(k->name, name, sizeof k->name);
	return 0;
}

int prov_pkgs_load(const char *dir, struct prov_pkg pkgs[PROV_NARCH], char *err, size_t errlen)
{
	static const char *const arches[PROV_NARCH] = {"amd64", "arm64"};
	memset(pkgs, 0, sizeof(struct prov_pkg) * PROV_NARCH);
	DIR *d = opendir(dir);
	if (!d) {
		snprintf(err, errlen, "--package: cannot read %s: %s", dir, strerror(errno));
		return -errno;
	}
	char names[PROV_NARCH][256] = {{0}};
	int found = 0, r = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (strncmp(e->d_name, "sparkctl_", 9) != 0 || l < 14 || strcmp(e->d_name + l - 4, ".deb"))
			continue;
		for (int a = 0; a < PROV_NARCH; a++) {
			char suf[32];
			snprintf(suf, sizeof suf, "_%s.deb", arches[a]);
			size_t sl = strlen(suf);
			if (l <= sl || strcmp(e->d_name + l - sl, suf) != 0)
				continue;
			if (names[a][0]) {
				snprintf(err, errlen, "--package: %s holds %s and %s; keep one sparkctl "
						      "package per architecture",
					 dir, names[a], e->d_name);
				r = -EEXIST;
			}
			util_strlcpy(names[a], e->d_name, sizeof names[a]);
		}
	}
	closedir(d);
	if (r < 0)
		return r;
	for (int a = 0; a < PROV_NARCH; a++) {
		util_strlcpy(pkgs[a].arch, arches[a], sizeof pkgs[a].arch);
		if (!names[a][0])
			continue;
		if ((r = load_one(&pkgs[a], dir, names[a], err, errlen)) < 0) {
			prov_pkgs_free(pkgs);
			return r;
		}
		found++;
	}
	if (!found) {
		snprintf(err, errlen, "--package: no sparkctl_VERSION_amd64.deb or _arm64.deb in %s",
			 dir);
		return -ENOENT;
	}
	return found;
}

void prov_pkgs_free(struct prov_pkg pkgs[PROV_NARCH])
{
	for (int a = 0; a < PROV_NARCH; a++) {
		free(pkgs[a].deb);
		free(pkgs[a].sparkd);
		free(pkgs[a].sparkctl);
		pkgs[a].deb = pkgs[a].sparkd = pkgs[a].sparkctl = NULL;
	}
}

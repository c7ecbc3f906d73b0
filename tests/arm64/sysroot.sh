#!/bin/bash
# tests/arm64/sysroot.sh - make (once, cached) an arm64 sysroot of Debian 12's :arm64
# build and test dependencies, for the aarch64 cross build and its qemu-user runs.
#
#   tests/arm64/sysroot.sh [CACHE_DIR]     (default $SPARK_ARM64_CACHE or /var/cache/sparkctl-arm64)
#
# The packages are resolved and downloaded by apt with a private state (its own lists,
# status and archive cache under CACHE_DIR/apt, APT::Architecture=arm64): this machine's
# dpkg is not touched and no foreign architecture is added. Each .deb (the whole
# dependency closure, libc6 included) is unpacked with dpkg-deb into CACHE_DIR/sysroot;
# absolute symlinks are made relative and the alternatives links of OpenBLAS are made, as
# postinst would; DEBIAN/shlibs collects the libraries' shlibs files. The sysroot is reused while the package list is unchanged. Prints the
# sysroot's path on stdout; exit 1 with a message on stderr when it cannot be made.
set -euo pipefail
CACHE=${1:-${SPARK_ARM64_CACHE:-/var/cache/sparkctl-arm64}}
PKGS="libc6-dev libuv1-dev libsqlite3-dev libssl-dev libjansson-dev libyaml-dev libssh-dev
 libnl-3-dev libnl-route-3-dev libibverbs-dev libcriterion-dev libopenblas-dev libgcc-s1
 libmicrohttpd-dev libcurl4-openssl-dev libpcre2-dev"
A=$CACHE/apt
SYSROOT=$CACHE/sysroot
STAMP=$SYSROOT/.sparkctl-sysroot
# v2: with DEBIAN/shlibs (for dpkg-shlibdeps -S in the arm64 package build)
want="v2 $(echo $PKGS | tr ' ' '\n' | sort | tr '\n' ' ')"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
	echo "$SYSROOT"
	exit 0
fi
say() { echo "arm64-sysroot: $*" >&2; }
die() { say "$*"; exit 1; }
command -v apt-get >/dev/null || die "apt-get is missing: this needs Debian or Ubuntu"
mkdir -p "$A/lists/partial" "$A/archives/partial" "$A/sources"
: > "$A/status"
# Debian's own archive only (the host's other sources may have no arm64).
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
	cp /etc/apt/sources.list.d/debian.sources "$A/sources/debian.sources"
else
	cat > "$A/sources/debian.sources" <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi
apt_opts=(-o "Dir::State=$A" -o "Dir::State::Lists=$A/lists" -o "Dir::State::status=$A/status"
	-o "Dir::Cache=$A" -o "Dir::Cache::archives=$A/archives"
	-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$A/sources"
	-o "APT::Architecture=arm64" -o "APT::Architectures::=arm64"
	-o "APT::Sandbox::User=root" -o "Debug::NoLocking=1" -o "APT::Install-Recommends=0")
say "resolving and downloading the arm64 packages (cached in $A/archives)"
apt-get "${apt_opts[@]}" -qq update >&2 || die "apt-get update (arm64, private state) failed"
# shellcheck disable=SC2086
apt-get "${apt_opts[@]}" -qq -y --download-only install $PKGS >&2 ||
	die "apt-get could not download the arm64 packages: $PKGS"
rm -rf "$SYSROOT.new"
mkdir -p "$SYSROOT.new"
# Debian 12 is merged-/usr: /lib etc. are links into usr/.
mkdir -p "$SYSROOT.new/usr/lib" "$SYSROOT.new/usr/bin" "$SYSROOT.new/usr/sbin"
for d in lib bin sbin; do ln -s "usr/$d" "$SYSROOT.new/$d"; done
# DEBIAN/shlibs: every unpacked library's shlibs, so that dpkg-shlibdeps -S SYSROOT gives
# the arm64 packages their real Depends without an arm64 dpkg database.
mkdir -p "$SYSROOT.new/DEBIAN"
n=0
for deb in "$A"/archives/*_arm64.deb "$A"/archives/*_all.deb; do
	[ -f "$deb" ] || continue
	dpkg-deb --fsys-tarfile "$deb" | tar -x --keep-directory-symlink -C "$SYSROOT.new" ||
		die "cannot unpack $deb"
	n=$((n + 1))
	dpkg-deb -I "$deb" shlibs >>"$SYSROOT.new/DEBIAN/shlibs" 2>/dev/null || true
done
[ "$n" -gt 0 ] || die "no arm64 package was downloaded"
# Absolute symlinks point into the host: make them relative to the sysroot.
find "$SYSROOT.new" -type l -lname '/*' | while read -r l; do
	t=$(readlink "$l")
	ln -sfn "$(realpath -m --relative-to="$(dirname "$l")" "$SYSROOT.new$t")" "$l"
done
# What update-alternatives would do for OpenBLAS (pthread flavour).
ml=$SYSROOT.new/usr/lib/aarch64-linux-gnu
for pair in libblas.so.3:openblas-pthread/libblas.so.3 liblapack.so.3:openblas-pthread/liblapack.so.3 \
	libopenblas.so.0:openblas-pthread/libopenblas.so.0 libopenblas.so:openblas-pthread/libopenblas.so \
	libblas.so:openblas-pthread/libblas.so libcblas.so:openblas-pthread/libblas.so \
	pkgconfig/openblas.pc:openblas-pthread/pkgconfig/openblas.pc \
	pkgconfig/blas.pc:openblas-pthread/pkgconfig/blas-openblas.pc; do
	l=${pair%%:*} t=${pair#*:}
	[ -e "$ml/$l" ] || [ ! -e "$ml/$t" ] || ln -sfn "$(realpath -m --relative-to="$(dirname "$ml/$l")" "$ml/$t")" "$ml/$l"
done
[ -e "$ml/libopenblas.so.0" ] || [ ! -e "$ml/openblas-pthread/libopenblas.so.0" ] ||
	die "OpenBLAS alternatives links were not made"
[ -e "$SYSROOT.new/usr/include/uv.h" ] && [ -e "$ml/libc.so.6" ] ||
	die "the sysroot lacks uv.h or libc.so.6 after unpacking $n packages"
echo "$want" > "$SYSROOT.new/.sparkctl-sysroot"
rm -rf "$SYSROOT"
mv "$SYSROOT.new" "$SYSROOT"
say "sysroot of $n packages in $SYSROOT"
echo "$SYSROOT"

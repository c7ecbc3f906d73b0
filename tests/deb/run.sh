#!/bin/bash
# tests/deb/run.sh - build the Debian packages (debian/) for amd64 and arm64, lint them,
# check the arm64 ones' contents, and install, upgrade and purge the amd64 ones in a
# Debian 12 chroot made with debootstrap.
#
#   tests/deb/run.sh [--cache DIR] [--keep]
#
# Steps: install debhelper, lintian, debootstrap and the aarch64 cross compilers with apt if
# missing; copy the tree (without build dirs) to a work dir; dpkg-buildpackage -b for amd64
# and -a arm64 (nocheck profile: the suites run in scripts/test.sh and, for arm64, under
# qemu in tests/arm64/run.sh) against the sysroot of tests/arm64/sysroot.sh; lintian: no
# error, and every warning named in debian/lintian-warnings with its reason; the arm64
# .debs: Architecture, ELF machine of every binary, SONAME, Depends, pkg-config file; then
# a chroot (debootstrap minbase + systemd + the libraries, cached as a tarball): dpkg -i,
# `sparkd --version`, `sparkctl --help`, `systemd-analyze verify` on the unit, unit enabled
# and not started, `sparkctl init` on a sparkd run in the chroot (private network and pid
# namespaces, loopback only), an upgrade to a newer build (the same files repacked as
# version +upgrade1) keeping the cluster, remove keeping the config, purge removing it
# and keeping /var/lib/sparkctl. One line per check, "DEB PASS|FAIL name detail", then
# "N passed, N failed"; exit 0 only if some check ran and none failed. A set-up failure
# is a failed check, never a pass. Downloads are cached under DIR
# (default $SPARK_DEB_CACHE or /var/cache/sparkctl-deb; the arm64 sysroot in $SPARK_ARM64_CACHE).
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
CACHE=${SPARK_DEB_CACHE:-/var/cache/sparkctl-deb}
KEEP=0
while [ $# -gt 0 ]; do
	case $1 in
	--cache) CACHE=$2; shift 2 ;;
	--keep) KEEP=1; shift ;;
	-h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "run.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
	esac
done
pass=0 fail=0
check() { # PASS|FAIL name detail
	echo "DEB $1 $2 ${3:-}"
	if [ "$1" = PASS ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
}
ok() { if [ "$1" = 0 ]; then check PASS "$2" "${3:-}"; else check FAIL "$2" "${4:-${3:-}}"; fi; }
say() { echo "deb: $*" >&2; }
W=$(mktemp -d /tmp/sparkctl-deb.XXXXXX)
R=$W/root
cleanup() {
	if [ "$KEEP" = 1 ]; then say "work dir kept: $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]; exit $?; }
setup_fail() { check FAIL setup "$*"; finish; }
T0=$(date +%s)

# ---- tools ---------------------------------------------------------------------------------
need=()
for t in dh:debhelper lintian:lintian debootstrap:debootstrap fakeroot:fakeroot \
	aarch64-linux-gnu-gcc:gcc-aarch64-linux-gnu aarch64-linux-gnu-g++:g++-aarch64-linux-gnu \
	qemu-aarch64-static:qemu-user-static; do
	command -v "${t%%:*}" >/dev/null || need+=("${t#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
	[ "$(id -u)" = 0 ] || setup_fail "missing ${need[*]}; run as root or apt-get install them"
	say "installing ${need[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1 ||
		setup_fail "apt-get install ${need[*]} failed"
fi
[ "$(id -u)" = 0 ] || setup_fail "the chroot test needs root"
SYSROOT=$(SPARK_ARM64_CACHE=${SPARK_ARM64_CACHE:-/var/cache/sparkctl-arm64} "$SRC/tests/arm64/sysroot.sh") ||
	setup_fail "no arm64 sysroot (tests/arm64/sysroot.sh)"

# ---- build -----------------------------------------------------------------------------------
mkdir -p "$W/src"
(cd "$SRC" && tar --exclude='./build*' --exclude=./.git --exclude='./obj-*' --exclude='./debian/.debhelper' \
	--exclude='./debian/tmp' -cf - .) | tar -xf - -C "$W/src" || setup_fail "cannot copy the tree to $W/src"
VER=$(cd "$W/src" && dpkg-parsechangelog -S Version)
build() { # arch
	local t=$(date +%s) extra=()
	if [ "$1" != amd64 ]; then
		printf "[constants]\nsysroot = '%s'\n" "$SYSROOT" > "$W/sysroot.ini"
		extra=(-a "$1" -d)
		export SPARK_SYSROOT=$SYSROOT SPARK_CROSS_FILES="$W/sysroot.ini $W/src/scripts/cross/aarch64-linux-gnu.ini"
		export QEMU_LD_PREFIX=$SYSROOT
	fi
	(cd "$W/src" && DEB_BUILD_OPTIONS="nocheck parallel=$(nproc)" \
		dpkg-buildpackage -b -us -uc -Pnocheck "${extra[@]}" >"$W/build-$1.log" 2>&1)
	local rc=$?
	unset SPARK_SYSROOT SPARK_CROSS_FILES QEMU_LD_PREFIX
	(cd "$W/src" && debian/rules clean >/dev/null 2>&1)
	if [ $rc = 0 ]; then check PASS "build-$1" "dpkg-buildpackage $1, $(($(date +%s) - t)) s"
	else tail -20 "$W/build-$1.log" >&2; check FAIL "build-$1" "dpkg-buildpackage failed (log: $W/build-$1.log; --keep keeps it)"; fi
	return $rc
}
PKGS="sparkctl libsparkcoll0 libsparkcoll-dev sparkctl-runtime"
built_amd64=0 built_arm64=0
build amd64 && built_amd64=1
build arm64 && built_arm64=1

# ---- lintian ---------------------------------------------------------------------------------
for a in amd64 arm64; do
	ch=$W/sparkctl_${VER}_$a.changes
	[ -f "$ch" ] || continue
	out=$(lintian "$ch" 2>/dev/null)
	errs=$(echo "$out" | grep -c '^E:')
	unexplained=
	while read -r tag; do
		[ -n "$tag" ] || continue
		grep -q "^$tag:" "$W/src/debian/lintian-warnings" || unexplained="$unexplained $tag"
	done < <(echo "$out" | sed -n 's/^W: [^ ]* \([a-z0-9-]*\).*/\1/p' | sort -u)
	nw=$(echo "$out" | grep -c '^W:')
	if [ "$errs" = 0 ] && [ -z "$unexplained" ]; then
		check PASS "lintian-$a" "no errors; $nw warnings, each explained in debian/lintian-warnings"
	else
		echo "$out" | grep -E '^(E|W):' >&2
		check FAIL "lintian-$a" "$errs errors; warnings not explained in debian/lintian-warnings:${unexplained:- none}"
	fi
done

# ---- the arm64 packages' contents ------------------------------------------------------------
if [ $built_arm64 = 1 ]; then
	for p in $PKGS; do
		deb=$W/${p}_${VER}_arm64.deb
		x=$W/x-$p
		rm -rf "$x"; dpkg-deb -x "$deb" "$x" 2>/dev/null || { check FAIL "arm64-$p" "cannot unpack $deb"; continue; }
		bad= nelf=0
		while read -r f; do
			if file -b "$f" | grep -q '^ELF'; then
				nelf=$((nelf + 1))
				file -b "$f" | grep -q 'ARM aarch64' || bad="$bad ${f#$x}"
			fi
		done < <(find "$x" -type f)
		arch=$(dpkg-deb -f "$deb" Architecture)
		[ "$arch" = arm64 ] || bad="$bad Architecture:$arch"
		case $p in
		sparkctl)
			for f in usr/sbin/sparkd usr/bin/sparkctl lib/systemd/system/sparkd.service etc/sparkctl/sparkd.yaml \
				usr/share/bash-completion/completions/sparkctl usr/share/man/man8/sparkd.8.gz; do
				[ -e "$x/$f" ] || bad="$bad missing:$f"
			done
			dpkg-deb -I "$deb" conffiles | grep -qx /etc/sparkctl/sparkd.yaml || bad="$bad conffile"
			for d in libssh-4 libuv1 libssl3 libsqlite3-0 libibverbs1 libjansson4; do
				dpkg-deb -f "$deb" Depends | grep -q "\b$d\b" || bad="$bad no-Depends:$d"
			done ;;
		libsparkcoll0)
			so=$(ls "$x"/usr/lib/aarch64-linux-gnu/libsparkcoll.so.0.* 2>/dev/null | head -1)
			[ -n "$so" ] && aarch64-linux-gnu-readelf -d "$so" | grep -q 'SONAME.*\[libsparkcoll.so.0\]' || bad="$bad soname"
			[ -n "$so" ] && aarch64-linux-gnu-readelf --dyn-syms -W "$so" | grep -q ' sc_allreduce$' || bad="$bad no-sc_allreduce"
			[ "$(dpkg-deb -f "$deb" Multi-Arch)" = same ] || bad="$bad Multi-Arch" ;;
		libsparkcoll-dev)
			pc=$x/usr/lib/aarch64-linux-gnu/pkgconfig/sparkcoll.pc
			[ -f "$x/usr/include/sparkcoll.h" ] || bad="$bad missing:sparkcoll.h"
			grep -q '^libdir=${prefix}/lib/aarch64-linux-gnu' "$pc" 2>/dev/null && grep -q -- '-lsparkcoll' "$pc" || bad="$bad sparkcoll.pc"
			dpkg-deb -f "$deb" Depends | grep -q "libsparkcoll0 (= $VER)" || bad="$bad no-Depends:libsparkcoll0" ;;
		sparkctl-runtime)
			for f in usr/bin/spark-bench usr/bin/spark-decode; do [ -x "$x/$f" ] || bad="$bad missing:$f"; done
			dpkg-deb -f "$deb" Depends | grep -q libopenblas0 || bad="$bad no-Depends:libopenblas0" ;;
		esac
		[ -z "$bad" ] && check PASS "arm64-$p" "Architecture arm64, $nelf ELF files all aarch64, files and Depends as expected" ||
			check FAIL "arm64-$p" "$bad"
	done
fi

# ---- Debian 12 chroot: install, upgrade, remove, purge ----------------------------------------
[ $built_amd64 = 1 ] || finish
INCLUDE=systemd,libuv1,libssh-4,libjansson4,libyaml-0-2,libnl-route-3-200,libibverbs1,libsqlite3-0,libopenblas0,libmicrohttpd12,libcurl4,pkgconf
TARBALL=$CACHE/bookworm-minbase-$(echo "$INCLUDE" | md5sum | cut -c1-8).tar
MIRROR=${SPARK_DEB_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$CACHE"
if [ ! -s "$TARBALL" ]; then
	say "debootstrap bookworm (minbase + $INCLUDE) from $MIRROR, cached as $TARBALL"
	rm -rf "$CACHE/mk"
	debootstrap --variant=minbase --include="$INCLUDE" bookworm "$CACHE/mk" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 ||
		setup_fail "debootstrap failed (see $CACHE/debootstrap.log)"
	rm -rf "$CACHE/mk/var/cache/apt/archives/"*.deb "$CACHE/mk/var/lib/apt/lists/"*_Packages
	tar -C "$CACHE/mk" -cf "$TARBALL.new" . && mv "$TARBALL.new" "$TARBALL" || setup_fail "cannot write $TARBALL"
	rm -rf "$CACHE/mk"
fi
mkdir -p "$R" && tar -C "$R" -xf "$TARBALL" || setup_fail "cannot unpack $TARBALL"
cp "$W"/sparkctl_"${VER}"_amd64.deb "$W"/libsparkcoll0_"${VER}"_amd64.deb "$W"/sparkctl-runtime_"${VER}"_amd64.deb "$R/tmp/"
# The newer build: the same package, version VER+upgrade1 (what a rebuild changes for dpkg).
rm -rf "$W/up" && dpkg-deb -R "$W/sparkctl_${VER}_amd64.deb" "$W/up" &&
	sed -i "s/^Version: .*/Version: ${VER}+upgrade1/" "$W/up/DEBIAN/control" &&
	dpkg-deb -b "$W/up" "$R/tmp/sparkctl_${VER}+upgrade1_amd64.deb" >/dev/null || setup_fail "cannot repack the newer build"
# in_root SCRIPT: run sh SCRIPT in the chroot, in new network (lo only), pid and mount
# namespaces (every process it started dies with it; /proc is mounted only in there)
in_root() {
	timeout 300 unshare --net --pid --fork --kill-child --mount-proc="$R/proc" sh -c 'ip link set lo up && exec chroot "$1" /bin/sh -s' _ "$R" <<<"$1" 2>&1
}
out=$(in_root 'dpkg -i /tmp/libsparkcoll0_*.deb /tmp/sparkctl-runtime_*.deb /tmp/sparkctl_'"$VER"'_amd64.deb')
ok $? install "dpkg -i sparkctl libsparkcoll0 sparkctl-runtime" "dpkg -i failed: $(echo "$out" | tail -3 | tr '\n' ' ')"
out=$(in_root 'sparkd --version'); ok $? sparkd-version "$out"
out=$(in_root 'sparkctl --help | head -1'); ok $? sparkctl-help "$out"
out=$(in_root 'spark-decode --synthetic tiny --tokens 4 -o json >/dev/null && echo ok'); ok $? spark-decode "from the package: $out"
out=$(in_root 'systemd-analyze verify --man=no /lib/systemd/system/sparkd.service')
[ $? = 0 ] && [ -z "$out" ]; ok $? systemd-analyze-verify "sparkd.service verifies clean (--man=no: no man-db in the chroot; sparkd.8 is checked above)" "$out"
[ -L "$R/etc/systemd/system/multi-user.target.wants/sparkd.service" ]
ok $? unit-enabled "multi-user.target.wants/sparkd.service links the unit"
! grep -qE 'deb-systemd-invoke (\$_dh_action|start)' "$R/var/lib/dpkg/info/sparkctl.postinst"
ok $? unit-not-started "postinst starts nothing (only try-restart on upgrade)"
# A cluster made by the packaged programs, kept across the upgrade.
run_sparkd='mkdir -p /run/sparkctl; sparkd --state-dir /var/lib/sparkctl --socket /run/sparkctl/sparkd.sock --listen 127.0.0.1:7300 2>/tmp/sparkd.log & SP=$!; i=0; while [ ! -S /run/sparkctl/sparkd.sock ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done;'
out=$(in_root "$run_sparkd"' sparkctl init --name debtest >/dev/null && sparkctl status -o json; kill $SP; wait $SP')
cid=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["cluster"]["id"])' 2>/dev/null)
[ -n "$cid" ]; ok $? init "sparkctl init in the chroot: cluster $cid" "no cluster: $(echo "$out" | tail -2 | tr '\n' ' ')"
out=$(in_root "dpkg -i /tmp/sparkctl_${VER}+upgrade1_amd64.deb && dpkg-query -W -f='\${Version}' sparkctl")
[ "$(echo "$out" | tail -1)" = "${VER}+upgrade1" ]; ok $? upgrade "dpkg -i $VER -> ${VER}+upgrade1" "$(echo "$out" | tail -3 | tr '\n' ' ')"
out=$(in_root "$run_sparkd"' sparkctl status -o json; kill $SP; wait $SP')
cid2=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["cluster"]["id"])' 2>/dev/null)
[ -n "$cid" ] && [ "$cid2" = "$cid" ]; ok $? upgrade-keeps-state "the same cluster $cid2 after the upgrade" "cluster '$cid' before, '$cid2' after"
out=$(in_root 'dpkg -r sparkctl')
[ $? = 0 ] && [ ! -e "$R/usr/sbin/sparkd" ] && [ -f "$R/etc/sparkctl/sparkd.yaml" ]
ok $? remove "dpkg -r: binaries gone, /etc/sparkctl/sparkd.yaml kept" "$(echo "$out" | tail -2 | tr '\n' ' ')"
out=$(in_root 'dpkg --purge sparkctl')
[ $? = 0 ] && [ ! -e "$R/etc/sparkctl" ] && [ -f "$R/var/lib/sparkctl/cluster.db" ] && echo "$out" | grep -q 'was kept'
ok $? purge "dpkg --purge: /etc/sparkctl gone, /var/lib/sparkctl/cluster.db kept and said so" "$(echo "$out" | tail -2 | tr '\n' ' '); etc: $(ls "$R/etc/sparkctl" 2>&1); state: $(ls "$R/var/lib/sparkctl" 2>&1)"
say "total $(($(date +%s) - T0)) s"
finish

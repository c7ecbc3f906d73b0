#!/bin/bash
# tests/arm64/run.sh - the aarch64 build (a DGX Spark's CPU) on an x86_64 machine: cross-build
# with Debian's gcc-aarch64-linux-gnu against a sysroot of the :arm64 -dev packages, run the
# unit and runtime suites under qemu-user, and check that spark-decode generates the same
# tokens as the native build.
#
#   tests/arm64/run.sh [-B ARM64_BUILD] [-N NATIVE_BUILD] [--cache DIR]
#
# Steps: install gcc-aarch64-linux-gnu and qemu-user-static with apt if missing; register
# qemu-aarch64 with binfmt_misc (mounting it if needed) so that tests which exec other
# built programs run them under qemu too; make the sysroot (tests/arm64/sysroot.sh, cached);
# meson setup with scripts/cross/aarch64-linux-gnu.ini (-Werror as always) and build;
# every meson test outside the integration and valgrind suites (units and runtime; the
# integration scenarios need real daemons in namespaces and stay native); `spark-decode
# --synthetic tiny` in five configurations (bf16, f16, f32, 2 ranks over loopback, bf16
# all-reduce) compared token for token with NATIVE_BUILD's (default build-test).
# One line per check, "ARM64 PASS|FAIL name detail", then "N passed, N failed"; exit 0 only
# if some check ran and none failed. A set-up failure is a failed check, never a pass.
# Test timeouts are tripled: code under qemu-user runs several times slower.
# qemu-user runs on this machine's memory ordering: see docs/hacking.md for what was
# reviewed for aarch64's weaker model instead.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
CACHE=${SPARK_ARM64_CACHE:-/var/cache/sparkctl-arm64}
BUILD=${SPARK_ARM64_BUILD:-$SRC/build-arm64}
NATIVE=${SPARK_ARM64_NATIVE:-$SRC/build-test}
while [ $# -gt 0 ]; do
	case $1 in
	-B) BUILD=$2; shift 2 ;;
	-N) NATIVE=$2; shift 2 ;;
	--cache) CACHE=$2; shift 2 ;;
	-h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "run.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
	esac
done
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
case $NATIVE in /*) ;; *) NATIVE=$PWD/$NATIVE ;; esac

pass=0 fail=0
check() { # PASS|FAIL name detail
	echo "ARM64 $1 $2 ${3:-}"
	if [ "$1" = PASS ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
}
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]; exit $?; }
setup_fail() { check FAIL setup "$*"; finish; }
say() { echo "arm64: $*" >&2; }
T0=$(date +%s)

# ---- host tools ---------------------------------------------------------------------------
need=()
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
if [ ${#need[@]} -gt 0 ]; then
	[ "$(id -u)" = 0 ] || setup_fail "missing ${need[*]}; install them (apt-get install ${need[*]}) or run as root"
	say "installing ${need[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1 ||
		{ apt-get update -qq >/dev/null 2>&1 &&
		  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1; } ||
		setup_fail "apt-get install ${need[*]} failed"
fi
BF=/proc/sys/fs/binfmt_misc
if [ ! -e $BF/qemu-aarch64 ]; then
	[ -e $BF/register ] || mount -t binfmt_misc binfmt_misc $BF 2>/dev/null ||
		setup_fail "binfmt_misc is not mounted and cannot be (mount -t binfmt_misc binfmt_misc $BF)"
	conf=/usr/lib/binfmt.d/qemu-aarch64.conf
	[ -f $conf ] || setup_fail "$conf is missing (qemu-user-static installs it)"
	cat $conf > $BF/register 2>/dev/null || setup_fail "cannot register qemu-aarch64 with binfmt_misc"
fi
grep -q '^enabled' $BF/qemu-aarch64 || setup_fail "the qemu-aarch64 binfmt handler is disabled ($BF/qemu-aarch64)"

# ---- sysroot, build ----------------------------------------------------------------------
SYSROOT=$("$HERE/sysroot.sh" "$CACHE") || setup_fail "no arm64 sysroot (tests/arm64/sysroot.sh $CACHE)"
export QEMU_LD_PREFIX=$SYSROOT  # programs started through binfmt find the arm64 loader here
mkdir -p "$BUILD"
printf "[constants]\nsysroot = '%s'\n" "$SYSROOT" > "$BUILD.sysroot.ini"
cross=(--cross-file "$BUILD.sysroot.ini" --cross-file "$SRC/scripts/cross/aarch64-linux-gnu.ini")
t=$(date +%s)
if [ -f "$BUILD/build.ninja" ]; then
	meson setup --reconfigure "$BUILD" "$SRC" "${cross[@]}" >"$BUILD.setup.log" 2>&1
else
	rmdir "$BUILD" 2>/dev/null
	meson setup "$BUILD" "$SRC" "${cross[@]}" >"$BUILD.setup.log" 2>&1
fi || { tail -20 "$BUILD.setup.log" >&2; setup_fail "meson setup with the aarch64 cross file failed ($BUILD.setup.log)"; }
if ninja -C "$BUILD" -j"$(nproc)" >"$BUILD.build.log" 2>&1; then
	check PASS build "aarch64 cross build, -Werror, $(($(date +%s) - t)) s"
else
	tail -30 "$BUILD.build.log" >&2
	check FAIL build "see $BUILD.build.log"
	finish
fi
bad=
for b in agent/sparkd cli/sparkctl runtime/spark-bench runtime/decode/spark-decode; do
	file -b "$BUILD/$b" | grep -q 'ELF 64-bit LSB .*ARM aarch64' || bad="$bad $b"
done
[ -z "$bad" ] && check PASS elf "sparkd sparkctl spark-bench spark-decode are ELF aarch64" ||
	check FAIL elf "not aarch64:$bad"

# ---- unit and runtime suites under qemu-user ------------------------------------------------
t=$(date +%s)
say "meson test (units and runtime) under qemu-aarch64"
meson test -C "$BUILD" --no-rebuild --num-processes 1 --print-errorlogs --timeout-multiplier 3 \
	--no-suite integration --no-suite valgrind >"$BUILD.test.log" 2>&1
TL=$BUILD/meson-logs/testlog.json
if [ ! -s "$TL" ]; then
	tail -30 "$BUILD.test.log" >&2
	check FAIL meson-test "no test log ($BUILD.test.log)"
else
	while read -r res name dur; do
		if [ "$res" = OK ]; then check PASS "test:$name" "$dur s"
		else check FAIL "test:$name" "$res after $dur s (see $BUILD/meson-logs/testlog.txt)"; fi
	done < <(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    t = json.loads(line)
    print(t["result"], t["name"].replace(" ", ""), "%.1f" % t["duration"])
' "$TL")
	say "suites under qemu: $(($(date +%s) - t)) s"
fi

# ---- the same tokens as the native build -------------------------------------------------------
ND=$NATIVE/runtime/decode/spark-decode
AD=$BUILD/runtime/decode/spark-decode
if [ ! -x "$ND" ] || ! file -b "$ND" | grep -q x86-64; then
	check FAIL decode-tokens "no native spark-decode in $NATIVE (build it: meson setup $NATIVE && ninja -C $NATIVE)"
else
	for args in "--dtype bf16" "--dtype f16" "--dtype f32" "--local 2" "--local 2 --dtype f32 --comm-dtype bf16"; do
		name="decode-tokens:${args// /}"
		# shellcheck disable=SC2086
		n=$("$ND" --synthetic tiny $args -o json 2>/dev/null | python3 -c 'import json,sys; print(",".join(map(str, json.load(sys.stdin)["generated"])))' 2>/dev/null)
		# shellcheck disable=SC2086
		a=$("$AD" --synthetic tiny $args -o json 2>/dev/null | python3 -c 'import json,sys; print(",".join(map(str, json.load(sys.stdin)["generated"])))' 2>/dev/null)
		if [ -z "$n" ] || [ -z "$a" ]; then
			check FAIL "$name" "no tokens (native '${n:0:20}', aarch64 '${a:0:20}')"
		elif [ "$n" = "$a" ]; then
			check PASS "$name" "$(echo "$a" | tr ',' '\n' | wc -l) tokens equal: ${a:0:40}..."
		else
			check FAIL "$name" "native $n != aarch64 $a"
		fi
	done
fi
say "total $(($(date +%s) - T0)) s"
finish

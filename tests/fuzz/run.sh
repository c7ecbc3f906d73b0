#!/bin/sh
# Run every libFuzzer target built in BUILD_DIR for SECONDS each, seeded with
# tests/fuzz/corpus/NAME (NAME = target without "fuzz_"). The corpus is copied
# to a temporary directory so the repository is never modified. FUZZ_JOBS targets
# run at a time (default: the number of cores).
#   CC=clang meson setup build-fuzz -Dfuzz=true -Dtests=disabled && ninja -C build-fuzz
#   tests/fuzz/run.sh build-fuzz 60
# Exit status: 0 when every target ran clean, 1 on any crash, leak, timeout or
# failed invariant (the crashing inputs are kept in BUILD_DIR/fuzz-artifacts/),
# 2 on bad usage or when no target is built.
set -u

usage() { echo "usage: $0 BUILD_DIR SECONDS" >&2; exit 2; }
[ $# -eq 2 ] || usage
build=$1
secs=$2
case $secs in '' | *[!0-9]*) usage ;; esac
here=$(cd "$(dirname "$0")" && pwd)
fuzzdir=$build/tests/fuzz
[ -d "$fuzzdir" ] || { echo "$0: no $fuzzdir (configure with -Dfuzz=true and CC=clang)" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/sparkfuzz.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT INT TERM
keep=$build/fuzz-artifacts
status=0
ran=0

# One target: its line ("ok ..." or "FAIL ...", details after) in $work/NAME.result.
run_one() { # target
	t=$1
	name=${t##*/}
	short=${name#fuzz_}
	corpus=$work/corpus-$short
	mkdir -p "$corpus" "$work/art-$short"
	if [ -d "$here/corpus/$short" ]; then
		cp -R "$here/corpus/$short/." "$corpus/"
	else
		echo "warning: no seed corpus tests/fuzz/corpus/$short" >&2
	fi
	log=$work/$short.log
	"$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
		-artifact_prefix="$work/art-$short/" "$corpus" >"$log" 2>&1
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
	rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
	cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -n 1)
	if [ $rc -eq 0 ] && ! grep -q 'ERROR: \(libFuzzer\|AddressSanitizer\|LeakSanitizer\)\|runtime error:' "$log"; then
		echo "ok   $name: ${secs}s, ${execs:-?} execs (${rate:-?}/s), ${cov:-cov: ?}, corpus $(ls "$corpus" | wc -l)"
	else
		echo "FAIL $name (exit $rc):"
		grep -E 'ERROR:|runtime error:|SUMMARY|Test unit written' "$log" | head -n 20
		mkdir -p "$keep"
		cp "$work/art-$short/"* "$keep/" 2>/dev/null && echo "     inputs kept in $keep/"
		tail -n 30 "$log"
	fi >"$work/$name.result"
}

# FUZZ_JOBS targets at a time (default: one per core), each a single-process
# libFuzzer run as before; the results are printed in the targets' order.
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
case $jobs in '' | *[!0-9]* | 0) jobs=1 ;; esac
targets=""
for t in "$fuzzdir"/fuzz_*; do
	[ -f "$t" ] && [ -x "$t" ] || continue
	targets="$targets $t"
	ran=$((ran + 1))
done
lane=0
while [ $lane -lt "$jobs" ]; do
	(
		i=0
		for t in $targets; do
			[ $((i % jobs)) -eq $lane ] && run_one "$t"
			i=$((i + 1))
		done
	) &
	lane=$((lane + 1))
done
wait
for t in $targets; do
	r=$work/${t##*/}.result
	if [ -f "$r" ]; then
		cat "$r"
		grep -q '^FAIL' "$r" && status=1
	else
		echo "FAIL ${t##*/}: no result (the runner died)"
		status=1
	fi
done

if [ $ran -eq 0 ]; then
	echo "$0: no fuzz_* target built in $fuzzdir" >&2
	exit 2
fi
exit $status

#!/usr/bin/env bash
# Run every test sparkctl has: the Criterion units and integration scenarios in a
# normal build and again under ASan+UBSan, the daemons under valgrind, and a short
# run of every fuzz target. Installs what is missing (Debian, as root).
# The last line is the plain summary "N passed, N failed".
# Env: SPARK_TEST_QUICK=1 skips the sanitizer build and fuzzing (for development);
#      SPARK_TEST_RDMA=0 skips the Soft-RoCE VM (tests/rdma/run.sh, about 1 min once
#      its downloads are cached; on by default, CI runs it).
#      SPARK_TEST_ARM64=0 skips the aarch64 cross build and its unit and runtime suites
#      under qemu-user (tests/arm64/run.sh, about 2 min; arm64 .debs cached in
#      /var/cache/sparkctl-arm64);
#      SPARK_TEST_DEB=0 skips the Debian packages: amd64 and arm64 builds, lintian, arm64
#      contents, install/upgrade/purge in a debootstrap chroot (tests/deb/run.sh, about
#      2 min; the chroot tarball cached in /var/cache/sparkctl-deb).
#      FUZZ_SECONDS (default 15) per fuzz target.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
./scripts/deps.sh --test || exit 1

JOBS=$(nproc)
logs=()
extra_pass=0
extra_fail=0
status=0

run_suite() { # label builddir [meson setup args...]
  local label=$1 dir=$2; shift 2
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$@" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; return 1; }
  else
    meson setup --reconfigure "$dir" "$@" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; return 1; }
  fi
  ninja -C "$dir" -j"$JOBS" >"$dir.build.log" 2>&1 || { tail -50 "$dir.build.log"; return 1; }
  echo "== $label: meson test" >&2
  meson test -C "$dir" --print-errorlogs --num-processes 1 --no-rebuild "${MESON_TEST_ARGS[@]}"
  logs+=("$label=$dir/meson-logs/testlog.json")
}

MESON_TEST_ARGS=()
run_suite plain build-test || status=1

if [ "${SPARK_TEST_QUICK:-0}" != 1 ]; then
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:detect_odr_violation=0
  export CRITERION_JOBS=1  # Criterion's own runner leaks under LSan with parallel jobs
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  export LSAN_OPTIONS=suppressions=$ROOT/tests/lsan.supp:print_suppressions=0
  MESON_TEST_ARGS=(--no-suite valgrind --timeout-multiplier 3)
  run_suite asan build-asan -Db_sanitize=address,undefined -Db_lundef=false || status=1
  unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS

  if command -v clang >/dev/null; then
    fuzz_opts=(-Dfuzz=true -Dtests=disabled -Db_lundef=false)
    if [ -f build-fuzz/build.ninja ]; then
      meson setup --reconfigure build-fuzz "${fuzz_opts[@]}" >build-fuzz.setup.log 2>&1
    else
      CC=clang meson setup build-fuzz "${fuzz_opts[@]}" >build-fuzz.setup.log 2>&1
    fi
    if [ $? -eq 0 ]; then
      if ninja -C build-fuzz -j"$JOBS" >build-fuzz.build.log 2>&1; then
        while read -r line; do
          case "$line" in
            ok*|PASS*) extra_pass=$((extra_pass + 1)); echo "$line" ;;
            FAIL*) extra_fail=$((extra_fail + 1)); echo "$line" ;;
          esac
        done < <(tests/fuzz/run.sh build-fuzz "${FUZZ_SECONDS:-15}" 2>&1)
      else
        tail -30 build-fuzz.build.log; extra_fail=$((extra_fail + 1))
      fi
    else
      tail -30 build-fuzz.setup.log; extra_fail=$((extra_fail + 1))
    fi
  fi
fi

# The verbs code for real: Soft-RoCE in Debian's kernel under qemu (tests/rdma/).
if [ "${SPARK_TEST_RDMA:-1}" = 1 ]; then
  echo "== rdma: Soft-RoCE VM (tests/rdma/run.sh)" >&2
  tests/rdma/run.sh -B build-test >rdma.log 2>&1
  cat rdma.log
  if summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' rdma.log | tail -1) && [ -n "$summary" ]; then
    extra_pass=$((extra_pass + ${summary%% passed*}))
    f=${summary#*, }; extra_fail=$((extra_fail + ${f%% failed*}))
  else
    extra_fail=$((extra_fail + 1))
  fi
fi

# A helper script's "N passed, N failed" (last such line of LOG) into the extra counts;
# no such line (it crashed or never ran) is one failure.
add_summary() { # LOG
  local summary f
  if summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$1" | tail -1) && [ -n "$summary" ]; then
    extra_pass=$((extra_pass + ${summary%% passed*}))
    f=${summary#*, }; extra_fail=$((extra_fail + ${f%% failed*}))
  else
    extra_fail=$((extra_fail + 1))
  fi
}

# aarch64 (a Spark's CPU): cross build, units and runtime under qemu-user, same tokens.
if [ "${SPARK_TEST_ARM64:-1}" = 1 ]; then
  echo "== arm64: cross build + qemu-user (tests/arm64/run.sh)" >&2
  tests/arm64/run.sh -B build-arm64 -N build-test >arm64.log 2>&1
  grep -E '^ARM64 |passed, ' arm64.log
  grep -q '^ARM64 FAIL' arm64.log && tail -40 arm64.log | grep -v '^ARM64 ' >&2
  add_summary arm64.log
fi

# Debian packages: build (amd64, arm64), lintian, contents, chroot install/upgrade/purge.
if [ "${SPARK_TEST_DEB:-1}" = 1 ]; then
  echo "== deb: packages (tests/deb/run.sh)" >&2
  tests/deb/run.sh >deb.log 2>&1
  grep -E '^DEB |passed, ' deb.log
  grep -q '^DEB FAIL' deb.log && tail -40 deb.log | grep -v '^DEB ' >&2
  add_summary deb.log
fi

[ ${#logs[@]} -gt 0 ] || { echo "0 passed, 1 failed"; exit 1; }
python3 scripts/summary.py "${logs[@]}" --extra "$extra_pass" "$extra_fail" || status=1
exit $status

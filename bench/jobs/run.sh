#!/usr/bin/env bash
# Build an optimised sparkctl/sparkd and run the job-launch benchmark (root).
# Usage: bench/jobs/run.sh [--runs N] [--nodes N] [--topology ring|switch]
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -f build-bench/build.ninja ] || meson setup build-bench --buildtype=release -Dtests=disabled >/dev/null
ninja -C build-bench agent/sparkd cli/sparkctl >/dev/null
exec python3 bench/jobs/run.py --build build-bench "$@"

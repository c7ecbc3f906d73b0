#!/usr/bin/env bash
# Build an optimised sparkctl and run the cluster-formation benchmark.
# Usage: bench/cluster/run.sh [--idle SECONDS] [--runs N]
set -euo pipefail
cd "$(dirname "$0")/../.."
./scripts/deps.sh --build
[ -f build-bench/build.ninja ] || meson setup build-bench --buildtype=release -Dtests=disabled >/dev/null
ninja -C build-bench >/dev/null
exec python3 bench/cluster/run.py --build build-bench "$@"

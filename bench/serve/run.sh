#!/bin/sh
# spark-decode --serve against spark-decode driven directly (no HTTP), in the
# same invocation: tokens/s and request latency p50/p99 at batch 1 (sequential
# requests over one keep-alive connection), for the tiny synthetic shape at
# TP=1 and TP=2 (--local 2, two ranks over loopback). Prints one table and the
# ratio HTTP/direct of tokens/s (the median of each request over the direct run
# before it); the target is >= 0.90 (the server costs at most 10%).
#
# Then (ready.sh; root, as it makes network namespaces) the time from
# `sparkctl serve` to `ready` for the tiny model with TP=2 on a simulated pair
# with real sparkd, against the same ranks started by hand, median of
# --ready-runs (0 skips it).
#
#   bench/serve/run.sh [--tp "1 2"] [--tokens N] [--requests R] [--shape S]
#                      [--ready-runs N] [--build DIR]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build="${SPARK_BUILD_DIR:-$top/build}"
args=""
ready_runs=5
while [ $# -gt 0 ]; do
	case "$1" in
	--build) build="$2"; shift 2 ;;
	--tp | --tokens | --requests | --shape) args="$args $1 $2"; shift 2 ;;
	--ready-runs) ready_runs="$2"; shift 2 ;;
	-h | --help) sed -n '2,17p' "$0"; exit 0 ;;
	*) echo "$0: unknown option $1 (try --help)" >&2; exit 2 ;;
	esac
done
bin="$build/runtime/decode/spark-decode"
[ -x "$bin" ] || ninja -C "$build" runtime/decode/spark-decode >/dev/null
# shellcheck disable=SC2086
/usr/bin/python3 "$here/bench_serve.py" --bin "$bin" $args
[ "$ready_runs" -gt 0 ] || exit 0
echo
if [ "$(id -u)" != 0 ]; then
	echo "serve -> ready: skipped (needs root for the simulated pair)"
	exit 0
fi
ninja -C "$build" agent/sparkd cli/sparkctl >/dev/null
exec "$here/ready.sh" "$build" "$ready_runs"

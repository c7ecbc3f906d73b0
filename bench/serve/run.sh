#!/bin/sh
# spark-decode --serve against spark-decode driven directly (no HTTP), in the
# same invocation: tokens/s and request latency p50/p99 at batch 1 (sequential
# requests over one keep-alive connection), for the tiny synthetic shape at
# TP=1 and TP=2 (--local 2, two ranks over loopback). Prints one table and the
# ratio HTTP/direct of tokens/s (the median of each request over the direct run
# before it); the target is >= 0.90 (the server costs at most 10%).
#
#   bench/serve/run.sh [--tp "1 2"] [--tokens N] [--requests R] [--shape S]
#                      [--build DIR]
#
# TODO(lead): time from `sparkctl serve` to `ready` for the tiny model on 2
# nodes, once the supervised services (agent/) land.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build="${SPARK_BUILD_DIR:-$top/build}"
args=""
while [ $# -gt 0 ]; do
	case "$1" in
	--build) build="$2"; shift 2 ;;
	--tp | --tokens | --requests | --shape) args="$args $1 $2"; shift 2 ;;
	-h | --help) sed -n '2,14p' "$0"; exit 0 ;;
	*) echo "$0: unknown option $1 (try --help)" >&2; exit 2 ;;
	esac
done
bin="$build/runtime/decode/spark-decode"
[ -x "$bin" ] || ninja -C "$build" runtime/decode/spark-decode >/dev/null
# shellcheck disable=SC2086
exec /usr/bin/python3 "$here/bench_serve.py" --bin "$bin" $args

#!/usr/bin/env bash
# bench/serve/ready.sh (run by run.sh): time from `sparkctl serve spark-decode`
# to `ready` for the tiny model with TP=2 on a simulated pair (real sparkd in
# both nodes, the built-in recipe), against the same two ranks started by hand
# (`spark-decode --local 2 --serve` until it logs serve_ready: no control
# plane) in the same invocation. Each serve is timed from just before the
# command to the first `svc show` that says ready (polled every 50 ms), then
# stopped until no spark-decode is left; the median of RUNS, from the head's
# CLI and from the worker's (forwarded to the head). The built-in recipe's
# health interval is 10 s; until the first healthy answer rank 0's node
# checks every 250 ms.
#   bench/serve/ready.sh BUILD RUNS      (root: it makes network namespaces)
set -euo pipefail
export SPARK_BUILD_DIR=$1 SPARK_SOURCE_DIR
SPARK_SOURCE_DIR=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=$2
# shellcheck source=tests/integration/serve/serve_lib.sh
. "$SPARK_SOURCE_DIR/tests/integration/serve/serve_lib.sh"
sl_init bench-ready
now() { date +%s.%N; }
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }

# the peer: the same ranks without sparkd (on this host, loopback)
direct=()
for _ in $(seq "$RUNS"); do
  t0=$(now)
  "$DEC" --synthetic tiny --local 2 --serve --host 127.0.0.1 --port 0 2>"$DIR/direct.log" &
  dpid=$!
  pids+=("$dpid")
  for _ in $(seq 600); do grep -q msg=serve_ready "$DIR/direct.log" && break; sleep 0.01; done
  grep -q msg=serve_ready "$DIR/direct.log" || die "spark-decode --serve not ready in 6 s"
  direct+=("$(python3 -c "print($(now) - $t0)")")
  kill -TERM "$dpid"
  wait "$dpid" || true
done

sl_cluster 2 ring
declare -A med
n=0
for mode in head worker; do
  k=1
  [ $mode = worker ] && k=2
  times=()
  for _ in $(seq "$RUNS"); do
    n=$((n + 1))
    t0=$(now)
    ctl "$k" serve spark-decode --group all --name "r$n" >/dev/null || die "serve r$n"
    for _ in $(seq 1200); do
      [ "$(svc_field "r$n" 'd["state"]')" = ready ] && break
      sleep 0.05
    done
    t1=$(now)
    [ "$(svc_field "r$n" 'd["state"]')" = ready ] || die "r$n not ready in 60 s"
    times+=("$(python3 -c "print($t1 - $t0)")")
    ctl 1 svc stop "r$n" >/dev/null || die "svc stop r$n"
    ctl 1 svc rm "r$n" >/dev/null || die "svc rm r$n"
    for _ in $(seq 100); do [ -z "$(decode_pids 1)$(decode_pids 2)" ] && break; sleep 0.05; done
  done
  med[$mode]=$(median "${times[@]}")
  eval "all_$mode=\"${times[*]}\""
done
med[direct]=$(median "${direct[@]}")
# shellcheck disable=SC2154
python3 - "${med[direct]}" "${med[head]}" "${med[worker]}" "${direct[*]}" "$all_head" "$all_worker" "$RUNS" <<'EOF'
import sys
d, a, b = map(float, sys.argv[1:4])
runs = [[float(x) for x in s.split()] for s in sys.argv[4:7]]
print('serve -> ready, spark-decode --synthetic tiny, TP=2 on a simulated pair (built-in recipe), %s runs each' % sys.argv[7])
print('%-44s %9s %9s %9s %7s' % ('path', 'median s', 'min s', 'max s', 'ratio'))
for name, m, r in (('spark-decode --local 2 --serve (no sparkd)', d, runs[0]),
                   ('sparkctl serve on the head', a, runs[1]),
                   ('sparkctl serve on the worker', b, runs[2])):
    print('%-44s %9.2f %9.2f %9.2f %7.1f' % (name, m, min(r), max(r), m / d))
EOF

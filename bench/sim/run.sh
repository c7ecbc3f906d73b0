#!/usr/bin/env bash
# Time the simulator: `sim up` of N nodes with agents, init on node 1, N-1
# joins, then `sim down`. Issue 3 targets: up + init + 7 joins under 5 s,
# down under 2 s (8 nodes). Root only.
# Usage: bench/sim/run.sh [--nodes N] [--topology ring|switch] [--runs R] [--build DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
N=8 TOPO=ring RUNS=3 B=build-sim-bench
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) N=$2; shift 2 ;;
    --topology) TOPO=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --build) B=$2; shift 2 ;;
    *) echo "usage: $0 [--nodes N] [--topology ring|switch] [--runs R] [--build DIR]" >&2; exit 2 ;;
  esac
done
if [ ! -x "$B/cli/sparkctl" ] || [ ! -x "$B/agent/sparkd" ]; then
  [ -f "$B/build.ninja" ] || meson setup "$B" --buildtype=release -Dtests=disabled >/dev/null
  ninja -C "$B" cli/sparkctl agent/sparkd >/dev/null
fi
S=$PWD/$B/cli/sparkctl
export SPARKD=$PWD/$B/agent/sparkd
P=bench$$
trap '"$S" sim down --name $P >/dev/null 2>&1 || true' EXIT
now() { date +%s%N; }
ms() { echo $(( ($2 - $1) / 1000000 )); }
printf '%-4s %8s %8s %10s %10s %8s\n' run up_ms init_ms joins_ms total_ms down_ms
for r in $(seq "$RUNS"); do
  t0=$(now)
  "$S" sim up --nodes "$N" --topology "$TOPO" --name $P >/dev/null
  t1=$(now)
  TOK=$("$S" sim exec $P-1 -- "$S" init 2>&1 | grep -o 'spk1\.[^ ]*' | head -1)
  t2=$(now)
  for k in $(seq 2 "$N"); do
    "$S" sim exec $P-$k -- "$S" join 169.254.100.1:7300 --token "$TOK" >/dev/null
  done
  t3=$(now)
  ready=$("$S" sim exec $P-1 -- "$S" status -o json | grep -c '"state": "ready"' || true)
  t4=$(now)
  "$S" sim down --name $P >/dev/null
  t5=$(now)
  [ "$ready" -ge "$N" ] || echo "warning: only $ready of $N nodes ready" >&2
  printf '%-4s %8s %8s %10s %10s %8s\n' "$r" "$(ms $t0 $t1)" "$(ms $t1 $t2)" "$(ms $t2 $t3)" \
    "$(ms $t0 $t3)" "$(ms $t4 $t5)"
done

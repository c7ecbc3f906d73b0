#!/usr/bin/env bash
# Time `sparkctl topo validate` in simulated clusters (issue 5 targets: full
# validation under 5 s, --quick under 1 s, on 8 nodes). For each topology an
# 8-node sim is brought up with agents, node 1 inits and the others join; after
# the neighbour tables settle, validate runs RUNS times full and RUNS times
# --quick from node 1. Wall time is what the user waits (sparkctl start to
# exit); head time is the run's duration_ms as the head measured it.
# Root only. Prints one table at the end.
# Usage: bench/topology/run.sh [--nodes N] [--runs R] [--topologies "ring switch"] [--build DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
N=8 RUNS=5 TOPOS="ring switch" B=build-topo-bench
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) N=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --topologies) TOPOS=$2; shift 2 ;;
    --build) B=$2; shift 2 ;;
    *) echo "usage: $0 [--nodes N] [--runs R] [--topologies \"ring switch\"] [--build DIR]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "bench/topology: needs root (network namespaces)" >&2; exit 1; }
if [ ! -x "$B/cli/sparkctl" ] || [ ! -x "$B/agent/sparkd" ]; then
  [ -f "$B/build.ninja" ] || meson setup "$B" --buildtype=release -Dtests=disabled >/dev/null
  ninja -C "$B" cli/sparkctl agent/sparkd >/dev/null
fi
S=$PWD/$B/cli/sparkctl
export SPARKD=$PWD/$B/agent/sparkd
P=tbench$$
OUT=$(mktemp -d /tmp/sparkctl-topobench-XXXXXX)
trap '"$S" sim down --name $P >/dev/null 2>&1 || true; rm -rf "$OUT"' EXIT
now() { date +%s%N; }
for T in $TOPOS; do
  "$S" sim up --nodes "$N" --topology "$T" --name $P >/dev/null
  TOK=$("$S" sim exec $P-1 -- "$S" init --name tbench -o json |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
  for k in $(seq 2 "$N"); do
    "$S" sim exec $P-$k -- "$S" join 169.254.100.1:7300 --token "$TOK" >/dev/null
  done
  sleep 2 # every neighbour table past its settle time: steady state, as a user finds it
  for mode in full quick; do
    flag=""; [ $mode = quick ] && flag=--quick
    for r in $(seq "$RUNS"); do
      t0=$(now)
      rc=0
      "$S" sim exec $P-1 -- "$S" topo validate $flag -o json >"$OUT/$T-$mode-$r.json" || rc=$?
      t1=$(now)
      echo "$T $mode $r $(( (t1 - t0) / 1000000 )) $rc" >>"$OUT/times"
    done
  done
  "$S" sim down --name $P >/dev/null
done
python3 - "$OUT" "$N" <<'EOF'
import json, os, statistics, sys
out, n = sys.argv[1], int(sys.argv[2])
rows = {}
for line in open(os.path.join(out, "times")):
    t, mode, r, wall, rc = line.split()
    v = json.load(open(os.path.join(out, f"{t}-{mode}-{r}.json")))
    d = rows.setdefault((t, mode), dict(wall=[], head=[], res=set(), probes=0, rounds=0, cls=""))
    d["wall"].append(int(wall))
    d["head"].append(v["run"]["duration_ms"])
    d["res"].add(v["result"])
    d["probes"] = v["probe_summary"]["count"]
    d["rounds"] = v["probe_summary"]["rounds"]
    d["cls"] = f'{v["class"]}({v["nodes"]})'
target = {"full": 5000, "quick": 1000}
print(f"\ntopo validate on {n} simulated nodes (TCP probes over veths; {os.cpu_count()} CPUs)\n")
hdr = ("topology", "mode", "runs", "probes", "rounds", "wall median", "wall max", "head median",
       "target", "result")
print("%-10s %-6s %4s %6s %6s %11s %9s %11s %7s  %s" % hdr)
for (t, mode), d in rows.items():
    wm, wx, hm = statistics.median(d["wall"]), max(d["wall"]), statistics.median(d["head"])
    ok = "ok" if wx < target[mode] else "MISSED"
    print("%-10s %-6s %4d %6d %6d %9.0f ms %6d ms %8.0f ms %4d ms  %s %s" %
          (d["cls"], mode, len(d["wall"]), d["probes"], d["rounds"], wm, wx, hm, target[mode],
           "/".join(sorted(d["res"])), ok))
EOF

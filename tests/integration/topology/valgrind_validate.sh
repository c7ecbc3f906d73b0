#!/usr/bin/env bash
# sparkd's topology validation under valgrind, in a simulated 3-node ring: three
# agents (started by hand inside the sim's nodes, under valgrind) go through
# init, joins, `topo validate` full and --quick (neighbour discovery, the head's
# requests, TCP probes in worker threads), `topo show`, `topo addresses --apply`
# twice, status, a cut cable (a FAIL verdict) and its restore, and a clean
# SIGTERM. Probe thresholds are relaxed: valgrind makes everything slow, the
# point is memory. Any definite leak or memory error makes valgrind exit 99 and
# this test fail. Needs root (exits 77, skipped, otherwise).
set -euo pipefail
B=${SPARK_BUILD_DIR:?}
SPARKD=$B/agent/sparkd
SPARKCTL=$B/cli/sparkctl
[ "$(id -u)" = 0 ] || { echo "needs root"; exit 77; }
P=vgval$$
DIR=$(mktemp -d /tmp/sparkctl-vgval-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  "$SPARKCTL" sim down --name "$P" >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap cleanup EXIT
"$SPARKCTL" sim up --nodes 3 --topology ring --name "$P" --no-agents >/dev/null
cat >"$DIR/sparkd.yaml" <<'EOF'
fabric:
  ports:
    "0": [enp1s0f0np0, enP2p1s0f0np0]
    "1": [enp1s0f1np1, enP2p1s0f1np1]
  mtu: 1500
  pool: 169.254.128.0/17
probes:
  tcp_min_gbps: 0.001
  tcp_max_p50_us: 1000000
  bulk_ms: 200
  quick_bulk_ms: 50
  ping_iters: 100
  quick_ping_iters: 20
  timeout_ms: 30000
EOF
for k in 1 2 3; do
  "$SPARKCTL" sim exec "$P-$k" -- valgrind -q --leak-check=full --errors-for-leak-kinds=definite \
    --error-exitcode=99 --log-file="$DIR/$k.vg" \
    "$SPARKD" --state-dir "$DIR/n$k" --socket "$DIR/$k.sock" --listen "169.254.100.$k:7300" \
    --name "n$k" --config "$DIR/sparkd.yaml" 2>"$DIR/$k.log" &
  pids+=($!)
done
for k in 1 2 3; do
  for _ in $(seq 600); do [ -S "$DIR/$k.sock" ] && break; sleep 0.05; done
  [ -S "$DIR/$k.sock" ] || { echo "sparkd $k did not start"; cat "$DIR/$k.log"; exit 1; }
done
ctl() { local k=$1; shift; "$SPARKCTL" sim exec "$P-$k" -- "$SPARKCTL" --socket "$DIR/$k.sock" "$@"; }
verdict() { python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["class"], d["result"], len(d["probes"]))'; }
TOKEN=$(ctl 1 init --name vgval -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
ctl 2 join 169.254.100.1:7300 --token "$TOKEN" --timeout 30s >/dev/null
ctl 3 join 169.254.100.1:7300 --token "$TOKEN" --timeout 30s >/dev/null
# Until every node's neighbour table has the ring (valgrind is slow).
v=""
for _ in $(seq 40); do
  v=$(ctl 2 topo validate -o json 2>/dev/null | verdict || true)
  case "$v" in "ring pass 6"|"ring warn 6") break ;; esac
  sleep 1
done
case "$v" in "ring pass 6"|"ring warn 6") ;; *) echo "no ring verdict under valgrind: $v"; exit 1 ;; esac
echo "full: $v"
echo "quick: $(ctl 3 topo validate --quick -o json 2>/dev/null | verdict || true)"
ctl 1 topo show >/dev/null
ctl 2 topo addresses --apply >/dev/null
ctl 3 topo addresses --apply -o json | python3 -c '
import json,sys
d=json.load(sys.stdin)
assert not any(r["report"]["changed"] for r in d["reports"]), "second apply changed something"'
ctl 2 status | grep -q "Topology: ring(3)" || { echo "status has no topology line"; exit 1; }
"$SPARKCTL" sim fault cut "$P-2:0" >/dev/null
f=""
for _ in $(seq 30); do
  f=$(ctl 1 topo validate --quick -o json 2>/dev/null | python3 -c '
import json,sys; d=json.load(sys.stdin); print(d["result"], " ".join(x["code"] for x in d["findings"]))' || true)
  case "$f" in fail*missing_cable*) break ;; esac
  sleep 1
done
case "$f" in fail*missing_cable*) ;; *) echo "no missing_cable after the cut: $f"; exit 1 ;; esac
"$SPARKCTL" sim fault restore "$P-2:0" >/dev/null
sleep 2
ctl 1 topo validate --quick >/dev/null 2>&1 || true
rc=0
for p in "${pids[@]}"; do kill -TERM "$p"; done
for p in "${pids[@]}"; do if ! wait "$p"; then rc=1; fi; done
pids=()
for k in 1 2 3; do
  if [ -s "$DIR/$k.vg" ]; then echo "== valgrind sparkd $k"; cat "$DIR/$k.vg"; rc=1; fi
done
if [ $rc -ne 0 ]; then
  for k in 1 2 3; do echo "== log $k"; tail -20 "$DIR/$k.log"; done
else
  echo "valgrind: no leaks or errors in 3 sparkd through topology validation"
fi
exit $rc

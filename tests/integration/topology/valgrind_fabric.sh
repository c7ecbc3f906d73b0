#!/usr/bin/env bash
# sparkd's fabric code under valgrind, in a simulated pair: two agents (started
# by hand inside the sim's nodes, under valgrind) go through init, join, status,
# node show, a cable cut and restore (live netlink changes, reports, events)
# and a clean SIGTERM. Any definite leak or memory error makes valgrind exit 99
# and this test fail. Needs root (exits 77, skipped, otherwise).
set -euo pipefail
B=${SPARK_BUILD_DIR:?}
SPARKD=$B/agent/sparkd
SPARKCTL=$B/cli/sparkctl
[ "$(id -u)" = 0 ] || { echo "needs root"; exit 77; }
P=vgfab$$
DIR=$(mktemp -d /tmp/sparkctl-vgfab-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  "$SPARKCTL" sim down --name "$P" >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap cleanup EXIT
"$SPARKCTL" sim up --nodes 2 --name "$P" --no-agents >/dev/null
cat >"$DIR/sparkd.yaml" <<'EOF'
fabric:
  ports:
    "0": [enp1s0f0np0, enP2p1s0f0np0]
    "1": [enp1s0f1np1, enP2p1s0f1np1]
  mtu: 1500
EOF
for k in 1 2; do
  "$SPARKCTL" sim exec "$P-$k" -- valgrind -q --leak-check=full --errors-for-leak-kinds=definite \
    --error-exitcode=99 --log-file="$DIR/$k.vg" \
    "$SPARKD" --state-dir "$DIR/n$k" --socket "$DIR/$k.sock" --listen "169.254.100.$k:7300" \
    --name "n$k" --config "$DIR/sparkd.yaml" 2>"$DIR/$k.log" &
  pids+=($!)
done
for k in 1 2; do
  for _ in $(seq 400); do [ -S "$DIR/$k.sock" ] && break; sleep 0.05; done
  [ -S "$DIR/$k.sock" ] || { echo "sparkd $k did not start"; cat "$DIR/$k.log"; exit 1; }
done
ctl() { local k=$1; shift; "$SPARKCTL" sim exec "$P-$k" -- "$SPARKCTL" --socket "$DIR/$k.sock" "$@"; }
TOKEN=$(ctl 1 init --name vgfab -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
ctl 2 join 169.254.100.1:7300 --token "$TOKEN" --timeout 30s >/dev/null
# Wait (valgrind is slow) until the head has both reports.
for _ in $(seq 100); do
  n=$(ctl 1 status -o json | python3 -c 'import json,sys; print(sum(1 for n in json.load(sys.stdin)["nodes"] if n["fabric"]))')
  [ "$n" = 2 ] && break; sleep 0.2
done
[ "$n" = 2 ] || { echo "the head has $n fabric reports, not 2"; exit 1; }
ctl 2 status >/dev/null
"$SPARKCTL" sim fault cut "$P-2:0" >/dev/null
down=0
for _ in $(seq 100); do
  if ctl 1 node show n2 -o json | python3 -c '
import json,sys
d=json.load(sys.stdin)
sys.exit(0 if d["fabric"]["ports_up"] == 0 else 1)'; then down=1; break; fi
  sleep 0.2
done
[ $down = 1 ] || { echo "the head never showed the cut"; exit 1; }
"$SPARKCTL" sim fault restore "$P-2:0" >/dev/null
"$SPARKCTL" sim fault mtu "$P-1:enP2p1s0f0np0" 9000 >/dev/null
sleep 2
ctl 1 node show n2 >/dev/null
ctl 1 node show n1 -o json | grep -q mtu_twin_mismatch || { echo "no MTU finding on the head"; exit 1; }
rc=0
for p in "${pids[@]}"; do kill -TERM "$p"; done
for p in "${pids[@]}"; do if ! wait "$p"; then rc=1; fi; done
pids=()
for k in 1 2; do
  if [ -s "$DIR/$k.vg" ]; then echo "== valgrind sparkd $k"; cat "$DIR/$k.vg"; rc=1; fi
done
if [ $rc -ne 0 ]; then
  for k in 1 2; do echo "== log $k"; tail -20 "$DIR/$k.log"; done
else
  echo "valgrind: no leaks or errors in 2 sparkd with fabric reports"
fi
exit $rc

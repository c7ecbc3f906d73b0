#!/usr/bin/env bash
# The daemons under valgrind: a head and two workers go through init, joins,
# status, drain, token revoke, node rm, leave and a clean SIGTERM. Any definite
# leak or memory error makes valgrind exit 99 and this test fail.
set -euo pipefail
B=${SPARK_BUILD_DIR:?}
SPARKD=$B/agent/sparkd
SPARKCTL=$B/cli/sparkctl
DIR=$(mktemp -d /tmp/sparkctl-vg-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$DIR"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
declare -A PORT
for n in h w1 w2; do
  PORT[$n]=$(port)
  valgrind -q --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=99 \
    --log-file="$DIR/$n.vg" \
    "$SPARKD" --state-dir "$DIR/$n" --socket "$DIR/$n.sock" --listen "127.0.0.1:${PORT[$n]}" \
    --name "$n" --config /dev/null 2>"$DIR/$n.log" &
  pids+=($!)
done
for n in h w1 w2; do
  for _ in $(seq 300); do [ -S "$DIR/$n.sock" ] && break; sleep 0.05; done
  [ -S "$DIR/$n.sock" ] || { echo "sparkd $n did not start"; cat "$DIR/$n.log"; exit 1; }
done
ctl() { local n=$1; shift; "$SPARKCTL" --socket "$DIR/$n.sock" "$@"; }
TOKEN=$(ctl h init --name vg -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
ctl w1 join "127.0.0.1:${PORT[h]}" --token "$TOKEN" --timeout 20s
ctl w2 join "127.0.0.1:${PORT[h]}" --token "$TOKEN" --timeout 20s
sleep 2
ctl w1 status >/dev/null
ctl h node drain w2 >/dev/null
ctl h node show w2 >/dev/null
ID=$(ctl h token create -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
ctl h token revoke "$ID" >/dev/null
ctl h token ls >/dev/null
ctl w1 join "127.0.0.1:${PORT[h]}" --token "$TOKEN" 2>/dev/null && exit 1
ctl h node rm w2 >/dev/null
ctl w1 leave >/dev/null
sleep 1
rc=0
for i in 0 1 2; do
  kill -TERM "${pids[$i]}"
done
for i in 0 1 2; do
  if ! wait "${pids[$i]}"; then rc=1; fi
done
pids=()
for n in h w1 w2; do
  if [ -s "$DIR/$n.vg" ]; then echo "== valgrind $n"; cat "$DIR/$n.vg"; rc=1; fi
done
[ $rc -eq 0 ] && echo "valgrind: no leaks or errors in 3 daemons"
exit $rc

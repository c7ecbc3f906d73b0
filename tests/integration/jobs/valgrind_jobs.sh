#!/usr/bin/env bash
# The daemons under valgrind with jobs (issue 6): a head and two workers on
# loopback; groups, a foreground run, a failing run (fail fast), a detached job
# with logs -f, cancel, exec, group rm --force, then SIGTERM while a job still
# runs (ranks outlive sparkd). Any definite leak or memory error makes valgrind
# exit 99 and this test fail. The shims (sparkd --rank-shim) are not traced.
set -euo pipefail
B=${SPARK_BUILD_DIR:?}
SPARKD=$B/agent/sparkd
SPARKCTL=$B/cli/sparkctl
DIR=$(mktemp -d /tmp/sparkctl-vgj-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  [ -n "${LEFT:-}" ] && kill -9 $LEFT 2>/dev/null || true
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
TOKEN=$(ctl h init --name vgj -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
ctl w1 join "127.0.0.1:${PORT[h]}" --token "$TOKEN" --timeout 20s >/dev/null
ctl w2 join "127.0.0.1:${PORT[h]}" --token "$TOKEN" --timeout 20s >/dev/null
sleep 2
ctl h group create g2 --nodes w1,w2 >/dev/null
ctl w1 group ls >/dev/null
ctl w2 group show g2 >/dev/null
out=$(ctl w1 run --group all --ranks-per-node 2 -- sh -c 'echo hello $SPARK_RANK')
[ "$(echo "$out" | grep -c hello)" = 6 ] || { echo "run: $out"; exit 1; }
rc=0; ctl h run --group g2 -- sh -c '[ $SPARK_RANK = 1 ] && exit 5; sleep 30' 2>/dev/null || rc=$?
[ $rc = 5 ] || { echo "fail fast: rc $rc"; exit 1; }
J=$(ctl w2 run --group all --detach -- sh -c 'for i in 1 2 3; do echo tick $i; sleep 0.2; done')
[ "$(ctl w1 job logs -f "$J" | grep -c tick)" = 9 ] || { echo "logs -f"; exit 1; }
J=$(ctl h run --group all --detach -- sleep 30)
ctl w1 job cancel "$J" >/dev/null
ctl w2 job show "$J" >/dev/null
ctl w1 job ls >/dev/null
[ "$(ctl w1 exec w2 -- sh -c 'echo out; exit 3' || echo rc=$?)" = "$(printf 'out\nrc=3')" ] || { echo exec; exit 1; }
ctl h run --group g2 --detach -- sleep 30 >/dev/null
ctl h group rm g2 --force >/dev/null
ctl w1 run --group all --detach -- sleep 3 >/dev/null   # still running at SIGTERM
sleep 0.5
LEFT=$(pgrep -f -- "--rank-shim $DIR" || true)
rc=0
for i in 0 1 2; do kill -TERM "${pids[$i]}"; done
for i in 0 1 2; do if ! wait "${pids[$i]}"; then rc=1; fi; done
pids=()
for n in h w1 w2; do
  if [ -s "$DIR/$n.vg" ]; then echo "== valgrind $n"; cat "$DIR/$n.vg"; rc=1; fi
done
[ $rc -eq 0 ] && echo "valgrind: no leaks or errors in 3 daemons running jobs"
exit $rc

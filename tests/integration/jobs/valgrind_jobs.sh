#!/usr/bin/env bash
# The daemons under valgrind with jobs (issue 6): a head and two workers on
# loopback; groups, a foreground run, a failing run (fail fast), a detached job
# with logs -f, cancel, exec, group rm --force, then SIGTERM while a job still
# runs (ranks outlive sparkd). Any definite leak or memory error makes valgrind
# exit 99 and this test fail. The shims (sparkd --rank-shim) are not traced.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
vg_init vgj
vg_on_exit() { [ -n "${LEFT:-}" ] && kill -9 $LEFT 2>/dev/null || true; }
vg_loopback_agents h w1 w2
TOKEN=$(ctl h init --name vgj -o json | jget token)
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
vg_finish "3 daemons running jobs"

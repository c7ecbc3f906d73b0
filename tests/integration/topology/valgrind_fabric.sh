#!/usr/bin/env bash
# sparkd's fabric code under valgrind, in a simulated pair: two agents (started
# by hand inside the sim's nodes, under valgrind) go through init, join, status,
# node show, a cable cut and restore (live netlink changes, reports, events)
# and a clean SIGTERM. Any definite leak or memory error makes valgrind exit 99
# and this test fail. Needs root (exits 77, skipped, otherwise).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
vg_init vgfab
vg_sim_up vgfab --nodes 2
vg_fabric_config
vg_sim_agents 2 400
TOKEN=$(ctl 1 init --name vgfab -o json | jget token)
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
vg_finish "2 sparkd with fabric reports"

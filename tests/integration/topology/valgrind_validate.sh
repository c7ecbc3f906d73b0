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
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
vg_init vgval
vg_sim_up vgval --nodes 3 --topology ring
vg_fabric_config
cat >>"$DIR/sparkd.yaml" <<'EOF'
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
vg_sim_agents 3 600
verdict() { python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["class"], d["result"], len(d["probes"]))'; }
TOKEN=$(ctl 1 init --name vgval -o json | jget token)
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
vg_finish "3 sparkd through topology validation"

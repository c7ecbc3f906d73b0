#!/usr/bin/env bash
# `sparkctl export slurm` against a real Slurm (issue 21): Debian's slurm-wlm
# and munge in the simulator's namespaces. For a 4-node switch (node 3 cabled
# on the other port) and a 4-node ring, each with two groups: export; one
# munged (private socket), slurmctld in node 1, slurmd in every node (nsenter,
# -N its name); slurmctld's log has no error or warning about the files;
# sinfo shows the partitions and every node idle; srun of a group's partition
# gives each task the engine variables `sparkctl run` gives that node's rank;
# an sbatch of 2 nodes completes; on the ring, a drain shows in a re-export
# (one line) and in Slurm, and a failed validation is refused unless --force.
# Every Slurm client runs inside a namespace.
# Everything is stopped and removed on any exit (trap). Needs root and
# slurm-wlm + munge (scripts/deps.sh --test); exits 77 (skip) otherwise.
set -euo pipefail

B=${SPARK_BUILD_DIR:?}
SPARKCTL=$B/cli/sparkctl
[ "$(id -u)" = 0 ] || { echo "needs root"; exit 77; }
for p in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/munged /usr/bin/srun; do
  [ -x "$p" ] || { echo "needs slurm-wlm and munge ($p missing)"; exit 77; }
done

D=$(mktemp -d /tmp/sparkctl-slurm-XXXXXX)
chmod 755 "$D"
export SLURM_CONF=$D/etc/slurm.conf
P=""
fail() { echo "FAIL: $*"; exit 1; }

# Stop Slurm in the order that leaves nothing behind: jobs, controller,
# daemons, munged; then the sim.
slurm_stop() {
  if [ -n "$P" ] && [ -f "$D/slurmctld.pid" ]; then
    ip netns exec "$P-1" scancel --user=root 2>/dev/null || true
    ip netns exec "$P-1" scontrol shutdown 2>/dev/null || true
  fi
  local f
  for f in "$D"/slurmd-*.pid "$D/slurmctld.pid"; do
    [ -f "$f" ] || continue
    kill "$(cat "$f")" 2>/dev/null || true
  done
  for _ in $(seq 40); do
    local left=0
    for f in "$D"/slurmd-*.pid "$D/slurmctld.pid"; do
      [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && left=1
    done
    [ $left = 0 ] && break
    sleep 0.05
  done
  for f in "$D"/slurmd-*.pid "$D/slurmctld.pid"; do
    [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null || true
    rm -f "$f"
  done
  rm -rf "$D/state" "$D/spool"
}
cleanup() {
  slurm_stop
  [ -f "$D/munge/munged.pid" ] && kill "$(cat "$D/munge/munged.pid")" 2>/dev/null || true
  [ -n "$P" ] && "$SPARKCTL" sim down --name "$P" >/dev/null 2>&1 || true
  rm -rf "$D"
}
trap cleanup EXIT
trap "exit 143" INT TERM

# One munged for every namespace (its socket is a file path).
mkdir -p "$D/munge" "$D/etc"
chown munge:munge "$D/munge"
runuser -u munge -- /usr/sbin/munged --socket="$D/munge/munge.sock" \
  --pid-file="$D/munge/munged.pid" --log-file="$D/munge/munged.log" --seed-file="$D/munge/seed"

ctl() { local k=$1; shift; "$SPARKCTL" sim exec "$P-$k" -- "$SPARKCTL" "$@"; }
in1() { (cd "$D" && ip netns exec "$P-1" "$@"); }

# sim P (4 nodes of TOPO), a cluster, validated, groups g1 and g2 of 2.
cluster_up() {
  P=$1
  "$SPARKCTL" sim up --nodes 4 --topology "$2" --name "$P" >/dev/null
  ctl 1 init --name slurmtest >/dev/null
  local tok
  tok=$(ctl 1 token create -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
  for k in 2 3 4; do ctl "$k" join 169.254.100.1:7300 --token "$tok" >/dev/null; done
  local want=()
  if [ "$2" = switch ]; then
    # node 3 on port 0, the others on port 1; a fabric subnet per twin rail
    "$SPARKCTL" sim fault swap "$P-3:1" "$P-3:0" >/dev/null
    for k in 1 2 3 4; do
      local p=1; [ $k = 3 ] && p=0
      ip netns exec "$P-$k" ip addr add "169.254.20.$k/24" dev "enp1s0f${p}np${p}"
      ip netns exec "$P-$k" ip addr add "169.254.21.$k/24" dev "enP2p1s0f${p}np${p}"
      want[$k]="169.254.21.$k/24"
    done
  else
    # a subnet per twin of each cable c (node c port 0 - node c+1 port 1)
    for c in 1 2 3 4; do
      local nx=$((c % 4 + 1))
      ip netns exec "$P-$c" ip addr add "169.254.$((30 + c)).1/24" dev enp1s0f0np0
      ip netns exec "$P-$c" ip addr add "169.254.$((40 + c)).1/24" dev enP2p1s0f0np0
      ip netns exec "$P-$nx" ip addr add "169.254.$((30 + c)).2/24" dev enp1s0f1np1
      ip netns exec "$P-$nx" ip addr add "169.254.$((40 + c)).2/24" dev enP2p1s0f1np1
      want[$nx]="169.254.$((40 + c)).2/24"
    done
  fi
  # each node reports its addresses within a second or so; under ASan and a
  # loaded CI machine, allow 30 s
  local ok=0 deadline=$((SECONDS + 30))
  local missing
  while [ $SECONDS -lt $deadline ]; do
    ok=0 missing=""
    for k in 1 2 3 4; do
      # the whole answer first: grep -q stops reading at its match, and with
      # pipefail a sparkctl still writing then fails the pipe (EPIPE)
      local shown
      shown=$(ctl 1 node show "$P-$k" -o json 2>/dev/null || true)
      if grep -q "${want[$k]}" <<<"$shown"; then
        ok=$((ok + 1))
      else
        missing="$missing $P-$k (${want[$k]})"
      fi
    done
    [ $ok = 4 ] && break
    sleep 0.2
  done
  [ $ok = 4 ] || fail "the head did not get the fabric addresses of$missing in 30 s"
  deadline=$((SECONDS + 30))
  while [ $SECONDS -lt $deadline ]; do
    [ "$(ctl 1 status -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["ready_count"])')" = 4 ] && break
    sleep 0.2
  done
  ctl 1 topo validate --quick >/dev/null || fail "topo validate failed on the $2"
  ctl 1 group create g1 --size 2 >/dev/null
  ctl 1 group create g2 --size 2 >/dev/null
}

slurm_up() {
  mkdir -p "$D/state" "$D/spool"
  cat >"$SLURM_CONF" <<EOF
ClusterName=sparktest
SlurmctldHost=$(hostname)(169.254.100.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$D/munge/munge.sock
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool/%n
SlurmdPidFile=$D/slurmd-%n.pid
SlurmdLogFile=$D/slurmd-%n.log
SlurmctldPidFile=$D/slurmctld.pid
SlurmctldLogFile=$D/slurmctld.log
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
MailProg=/bin/true
SchedulerParameters=batch_sched_delay=0
ReturnToService=2
Include $D/etc/sparkctl.conf
EOF
  rm -f "$D/slurmctld.log" "$D"/slurmd-*.log
  ip netns exec "$P-1" /usr/sbin/slurmctld -f "$SLURM_CONF"
  for k in 1 2 3 4; do
    nsenter --net="/run/netns/$P-$k" /usr/sbin/slurmd -f "$SLURM_CONF" -N "$P-$k"
  done
  local want=${1:-4} deadline=$((SECONDS + 30))
  while [ $SECONDS -lt $deadline ]; do
    [ "$(in1 sinfo -h -N -p all -o '%t' | grep -c '^idle$')" = "$want" ] && return 0
    sleep 0.1
  done
  in1 sinfo || true
  cat "$D/slurmctld.log"
  fail "the nodes did not become idle"
}

# slurmctld parsed the exported files without an error or a warning (the
# state files missing at a first start are the only errors it may log).
check_ctld_log() {
  local bad
  bad=$(grep -Ei 'error|warn' "$D/slurmctld.log" |
        grep -Ev 'Could not open (node|job|reservation|trigger) state file|Trying backup state save file' || true)
  [ -z "$bad" ] || fail "slurmctld logged: $bad"
}

VARS='SPARK_NODE|SPARK_GROUP|SPARK_TOPOLOGY|SPARK_GROUP_SHAPE|SPARK_NET|SPARK_FABRIC_NETDEVS|RANK|WORLD_SIZE|NCCL_SOCKET_IFNAME|UCX_NET_DEVICES|GLOO_SOCKET_IFNAME|TP_SOCKET_IFNAME|VLLM_HOST_IP|MASTER_ADDR|NCCL_IB_HCA|NCCL_ALGO|NCCL_NET_PLUGIN|NCCL_IB_MERGE_NICS|NCCL_IB_SUBNET_AWARE_ROUTING|OMPI_MCA_btl_tcp_if_include'
PRINT="env | grep -E '^($VARS)=' | sort | tr '\\n' ' '"

# srun in partition G on N nodes against `sparkctl run --group G`: the same
# variables, node by node; each task's SPARK_NODE is its Slurm node.
compare_run() {
  local g=$1 n=$2
  in1 srun -p "$g" -N "$n" sh -c "echo \"\$SLURMD_NODENAME \$($PRINT)\"" | sort >"$D/srun.txt"
  ctl 1 run --group "$g" -- sh -c "echo \"\$SPARK_NODE \$($PRINT)\"" |
    sed 's/^[0-9]*: //' | sort >"$D/run.txt"
  [ "$(wc -l <"$D/srun.txt")" = "$n" ] || { cat "$D/srun.txt"; fail "srun -p $g: not $n tasks"; }
  while read -r node rest; do
    echo "$rest" | grep -q "SPARK_NODE=$node " || fail "srun -p $g: $node got SPARK_NODE of another node: $rest"
  done <"$D/srun.txt"
  diff -u "$D/run.txt" "$D/srun.txt" || fail "srun -p $g and sparkctl run --group $g differ"
}

sbatch_completes() {
  local id st="" deadline=$((SECONDS + 30))
  id=$(in1 sbatch --parsable -p "$1" -N 2 -o "$D/batch-%j.out" --wrap "srun sh -c 'echo \$SLURMD_NODENAME \$NCCL_SOCKET_IFNAME'")
  while [ $SECONDS -lt $deadline ]; do
    st=$(in1 scontrol show job "$id" | grep -o 'JobState=[A-Z]*' || true)
    [ "$st" = JobState=COMPLETED ] && break
    sleep 0.1
  done
  [ "$st" = JobState=COMPLETED ] || { in1 scontrol show job "$id" || true; fail "sbatch job $id: $st"; }
  [ "$(wc -l <"$D/batch-$id.out")" = 2 ] || fail "sbatch job $id printed: $(cat "$D/batch-$id.out")"
}

export_to() {
  ctl 1 export slurm --out "$1" --gpu-device /dev/null \
    --task-prolog "$D/etc/sparkctl-task-prolog.sh" \
    --prolog-socket "/run/sparkctl-sim/$P/%n/sparkd.sock" "${@:2}"
}

# After a change in sparkctl: a re-export differs only where the change is,
# Slurm takes a drained node as drained, and a cabling that changed since the
# last validation, or fails it, is refused unless --force.
ring_changes() {
  cp -r "$D/etc" "$D/before"
  ctl 1 node drain "$P-4" >/dev/null
  sleep 1.1 # a new "Exported:" second
  export_to "$D/etc" >/dev/null
  local changed
  changed=$(diff "$D/before/sparkctl.conf" "$D/etc/sparkctl.conf" | grep '^[<>]' | grep -v '^[<>] # Exported:' || true)
  [ "$(echo "$changed" | wc -l)" = 2 ] || fail "re-export after a drain changed more than node 4's line: $changed"
  echo "$changed" | grep -q "^> NodeName=$P-4 .*State=DRAIN Reason=\"drained in sparkctl\"" ||
    fail "re-export after a drain: $changed"
  slurm_stop
  slurm_up 3
  check_ctld_log
  local st
  st=$(in1 sinfo -h -N -n "$P-4" -p all -o '%t|%E')
  [ "$st" = "drain|drained in sparkctl" ] || fail "node 4 in Slurm after the drain: $st"
  ctl 1 node undrain "$P-4" >/dev/null
  # a cable cut since the last validation: the verdict is out of date, refused too
  "$SPARKCTL" sim fault cut "$P-1:0" >/dev/null
  local out rc=0 deadline
  deadline=$((SECONDS + 15)) # the carrier change reaches the head within a second
  while [ $SECONDS -lt $deadline ]; do
    rc=0
    out=$(export_to "$D/stale" 2>&1) || rc=$?
    [ $rc = 1 ] && break
    rm -rf "$D/stale"
    sleep 0.1
  done
  [ $rc = 1 ] || fail "export after a cabling change, before validating again, exited $rc: $out"
  echo "$out" | grep -q "out of date" || fail "the refusal of a stale verdict does not say why: $out"
  [ ! -e "$D/stale/sparkctl.conf" ] || fail "a refused export wrote files"
  "$SPARKCTL" sim fault restore "$P-1:0" >/dev/null
  # node 1 re-cabled port to same port: validation fails, the export refuses
  "$SPARKCTL" sim fault swap "$P-1:0" "$P-1:1" >/dev/null
  ! ctl 1 topo validate --quick >/dev/null 2>&1 || fail "a same-port ring passed validation"
  rc=0
  out=$(export_to "$D/refused" 2>&1) || rc=$?
  [ $rc = 1 ] || fail "export of a failed validation exited $rc: $out"
  echo "$out" | grep -q "failed" || fail "the refusal does not say why: $out"
  [ ! -e "$D/refused/sparkctl.conf" ] || fail "a refused export wrote files"
  export_to "$D/forced" --force >/dev/null || fail "export --force"
  grep -q "validation fail" "$D/forced/sparkctl.conf" || fail "a forced export's header hides the failure"
}

scenario() {
  local topo=$1 t0=$SECONDS
  cluster_up "slu$$${topo:0:1}" "$topo"
  export_to "$D/etc" >/dev/null
  grep -q "^# Cluster: slurmtest$" "$D/etc/sparkctl.conf" || fail "no header in sparkctl.conf"
  ctl 2 export slurm -o json --gpu-device /dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["cluster"] == "slurmtest", d["cluster"]
assert "NodeName=" in d["files"]["sparkctl.conf"] and "Name=gpu" in d["files"]["gres.conf"], d["files"].keys()
' || fail "export -o json"
  ctl 4 env --node-list "$P-[3-4]" -o json | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["node"].endswith("-4") and d["node_rank"] == 1 and d["env"]["SPARK_NODE"] == d["node"], d
' || fail "env -o json on node 4"
  slurm_up
  check_ctld_log
  local parts
  parts=$(in1 sinfo -h -o '%P %a' | sort | tr '\n' ' ')
  [ "$parts" = "all* up g1 up g2 up " ] || fail "$topo partitions: $parts"
  compare_run g2 2
  if [ "$topo" = switch ]; then
    # node 3 is cabled on port 0: its own names, never node 4's
    grep -q "^$P-3 .*NCCL_SOCKET_IFNAME=enp1s0f0np0,enP2p1s0f0np0 " "$D/srun.txt" ||
      fail "node 3's NCCL_SOCKET_IFNAME: $(cat "$D/srun.txt")"
    grep -q "^$P-4 .*NCCL_SOCKET_IFNAME=enp1s0f1np1,enP2p1s0f1np1 " "$D/srun.txt" ||
      fail "node 4's NCCL_SOCKET_IFNAME: $(cat "$D/srun.txt")"
    grep -q '^SwitchName=cx7switch Nodes=' "$D/etc/topology.conf" || fail "no switch in topology.conf"
  else
    # g2 = nodes 3 and 4 on one cable: node 3's socket on its port 0, node 4's on port 1
    grep -q "^$P-3 .*GLOO_SOCKET_IFNAME=enp1s0f0np0 .*SPARK_NET=fabric " "$D/srun.txt" ||
      fail "node 3's GLOO_SOCKET_IFNAME: $(cat "$D/srun.txt")"
    grep -q "^$P-4 .*GLOO_SOCKET_IFNAME=enp1s0f1np1 .*SPARK_NET=fabric " "$D/srun.txt" ||
      fail "node 4's GLOO_SOCKET_IFNAME: $(cat "$D/srun.txt")"
    compare_run all 4
    grep -q 'NCCL_ALGO=Ring ' "$D/srun.txt" || fail "ring of 4 without NCCL_ALGO=Ring"
    [ ! -e "$D/etc/topology.conf" ] || fail "a ring of 4 got a topology.conf"
  fi
  sbatch_completes g1
  [ "$topo" = ring ] && ring_changes
  slurm_stop
  "$SPARKCTL" sim down --name "$P" >/dev/null
  P=""
  echo "ok $topo: export, slurmctld clean, sinfo idle, srun = sparkctl run, sbatch ($((SECONDS - t0)) s)"
}

scenario switch
scenario ring
echo "slurm: 2 scenarios passed"

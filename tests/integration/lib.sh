# lib.sh: what the valgrind scenarios share (sourced by bash scripts that run
# with set -euo pipefail). A scenario:
#   vg_init TAG                 SPARKD, SPARKCTL, a temp DIR, the cleanup trap
#   vg_sim_up TAG ARGS...       (simulated nodes) needs root (77 otherwise), sim P
#   vg_loopback_agents NAMES... / vg_sim_agents N TRIES
#   ctl ID ARGS...              sparkctl against agent ID
#   ... its own checks ...
#   vg_finish "what passed"     SIGTERM, judge valgrind's logs, exit
# Any definite leak or memory error makes valgrind exit 99 and the scenario fail.
# Agent ID's valgrind log is DIR/ID.vg, its stderr DIR/ID.log, its socket DIR/ID.sock.

vg_init() {
  B=${SPARK_BUILD_DIR:?}
  SPARKD=$B/agent/sparkd
  SPARKCTL=$B/cli/sparkctl
  DIR=$(mktemp -d "/tmp/sparkctl-$1-XXXXXX")
  P=""
  pids=()
  vg_ids=()
  trap vg_cleanup EXIT
}

# On every exit: kill what is left, the scenario's own vg_on_exit (when it
# defines one), the sim, the temp dir.
vg_cleanup() {
  for p in ${pids[@]+"${pids[@]}"}; do kill -9 "$p" 2>/dev/null || true; done
  if declare -F vg_on_exit >/dev/null; then vg_on_exit; fi
  if [ -n "$P" ]; then "$SPARKCTL" sim down --name "$P" >/dev/null 2>&1 || true; fi
  rm -rf "$DIR"
}

# A sim P=TAG<pid> without agents: `sparkctl sim up ARGS`. Needs root.
vg_sim_up() {
  [ "$(id -u)" = 0 ] || { echo "needs root"; exit 77; }
  P=$1$$
  shift
  "$SPARKCTL" sim up "$@" --name "$P" --no-agents >/dev/null
}

# sparkd under valgrind in the background: vg_sparkd ID NODE SPARKD-ARGS...
# (NODE "": on this host, else in that sim node).
vg_sparkd() {
  local id=$1 node=$2 run=()
  shift 2
  [ -z "$node" ] || run=("$SPARKCTL" sim exec "$node" --)
  ${run[@]+"${run[@]}"} valgrind -q --leak-check=full --errors-for-leak-kinds=definite \
    --error-exitcode=99 --log-file="$DIR/$id.vg" "$SPARKD" "$@" 2>"$DIR/$id.log" &
  pids+=($!)
  vg_ids+=("$id")
}

# Wait for each agent's socket, TRIES times 50 ms: vg_wait_sockets TRIES ID...
vg_wait_sockets() {
  local tries=$1 id
  shift
  for id in "$@"; do
    for _ in $(seq "$tries"); do [ -S "$DIR/$id.sock" ] && break; sleep 0.05; done
    [ -S "$DIR/$id.sock" ] || { echo "sparkd $id did not start"; cat "$DIR/$id.log"; exit 1; }
  done
}

# Agents NAMES... on loopback: PORT[NAME] free and the port after it (the
# model data port) too, both below the kernel's ephemeral range
# (ip_local_port_range), so that no connection's own port takes the second
# before the agent binds it once it has joined.
vg_loopback_agents() {
  declare -gA PORT
  local n
  for n in "$@"; do
    PORT[$n]=$(python3 -c '
import random, socket
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(1000):
    p = random.randrange(20000, low - 2)
    try:
        a = socket.socket(); a.bind(("127.0.0.1", p))
        b = socket.socket(); b.bind(("127.0.0.1", p + 1))
    except OSError:
        continue
    print(p)
    break
')
    vg_sparkd "$n" "" --state-dir "$DIR/$n" --socket "$DIR/$n.sock" \
      --listen "127.0.0.1:${PORT[$n]}" --name "$n" --config /dev/null
  done
  vg_wait_sockets 300 "$@"
}

# The fabric ports of a simulated node, as the start of DIR/sparkd.yaml
# (a scenario may append to it).
vg_fabric_config() {
  cat >"$DIR/sparkd.yaml" <<'EOF'
fabric:
  ports:
    "0": [enp1s0f0np0, enP2p1s0f0np0]
    "1": [enp1s0f1np1, enP2p1s0f1np1]
  mtu: 1500
EOF
}

# An agent in each of the sim's nodes 1..N (ID k, name nK, listening on
# 169.254.100.K:7300, config DIR/sparkd.yaml); TRIES as vg_wait_sockets.
vg_sim_agents() {
  local n=$1 tries=$2 k
  for k in $(seq "$n"); do
    vg_sparkd "$k" "$P-$k" --state-dir "$DIR/n$k" --socket "$DIR/$k.sock" \
      --listen "169.254.100.$k:7300" --name "n$k" --config "$DIR/sparkd.yaml"
  done
  vg_wait_sockets "$tries" $(seq "$n")
}

# sparkctl ARGS against agent ID (inside its sim node when there is a sim).
ctl() {
  local id=$1
  shift
  if [ -n "$P" ]; then
    "$SPARKCTL" sim exec "$P-$id" -- "$SPARKCTL" --socket "$DIR/$id.sock" "$@"
  else
    "$SPARKCTL" --socket "$DIR/$id.sock" "$@"
  fi
}

# KEY of the JSON object on stdin.
jget() { python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }

# Stop every agent with SIGTERM; fail on an agent that did not exit 0 or on a
# valgrind log that is not empty (printed, with the tail of every agent's
# log); else say "valgrind: no leaks or errors in WHAT". Exits.
vg_finish() {
  local rc=0 p id
  for p in "${pids[@]}"; do kill -TERM "$p"; done
  for p in "${pids[@]}"; do if ! wait "$p"; then rc=1; fi; done
  pids=()
  for id in "${vg_ids[@]}"; do
    if [ -s "$DIR/$id.vg" ]; then echo "== valgrind sparkd $id"; cat "$DIR/$id.vg"; rc=1; fi
  done
  if [ $rc -ne 0 ]; then
    for id in "${vg_ids[@]}"; do echo "== log $id"; tail -20 "$DIR/$id.log"; done
  else
    echo "valgrind: no leaks or errors in $1"
  fi
  exit $rc
}

# shellcheck shell=bash
# serve_lib.sh: a simulated cluster with a real sparkd in every node, for the
# tests that serve spark-decode on it (test_serve_decode.sh,
# ../router/test_router_cluster_e2e.sh) and bench/serve/run.sh. Sourced by
# bash scripts running with set -euo pipefail:
#   sl_init TAG           B, S, SPARKCTL, DEC, a temp DIR, the cleanup trap
#                         (needs root, curl and the build: 77 otherwise)
#   sl_cluster NODES TOPO sim P up, node 1 inits, the others join, all ready
#   ctl K ARGS...         sparkctl in node K (its namespace and socket)
#   in_ns K CMD...        CMD in node K's namespace
#   svc_field NAME EXPR   EXPR of d = `svc show NAME -o json` (Python), or ""
#   wait_state NAME STATE SECS [EXPR]  until NAME is STATE (and EXPR holds)
#   decode_pids K         the pids of spark-decode processes in node K
#   sl_no_sanitizer_report   fails if a sanitizer wrote a report into an
#                         agent's log or a job's log (in a sanitizer build)
# On every exit the sim goes (its agents, and with them the services' ranks),
# then the temp dir, and every pid in pids is killed first.
sl_init() {
  [ "$(id -u)" = 0 ] || { echo "SKIP: needs root (network namespaces)"; exit 77; }
  command -v curl >/dev/null || { echo "SKIP: curl is not installed"; exit 77; }
  B=${SPARK_BUILD_DIR:?}
  # shellcheck disable=SC2034 # S and pass are for the callers
  S=${SPARK_SOURCE_DIR:?}
  SPARKCTL=$B/cli/sparkctl
  DEC=$B/runtime/decode/spark-decode
  [ -x "$SPARKCTL" ] && [ -x "$B/agent/sparkd" ] && [ -x "$DEC" ] ||
    { echo "SKIP: sparkctl, sparkd or spark-decode is not built"; exit 77; }
  # the agents start the recipe's `spark-decode` from PATH
  export PATH="$B/runtime/decode:$PATH"
  DIR=$(mktemp -d "/tmp/spark-$1-XXXXXX")
  chmod 755 "$DIR"
  P=""
  SL_TAG=$1
  pids=()
  pass=0
  trap sl_cleanup EXIT
  trap "exit 143" INT TERM
}
sl_cleanup() {
  for p in ${pids[@]+"${pids[@]}"}; do kill -9 "$p" 2>/dev/null || true; done
  if [ -n "$P" ]; then "$SPARKCTL" sim down --name "$P" >/dev/null 2>&1 || true; fi
  wait 2>/dev/null || true
  rm -rf "$DIR"
}
ok() { pass=$((pass + 1)); echo "ok $pass - $*"; }
die() {
  echo "FAIL: $*" >&2
  if [ -n "$P" ]; then
    for k in 1 2 3 4; do
      [ -f "/run/sparkctl-sim/$P/$P-$k/sparkd.log" ] || continue
      echo "== $P-$k sparkd.log" >&2
      grep -E 'service_|job_|rank_' "/run/sparkctl-sim/$P/$P-$k/sparkd.log" | tail -15 >&2 || true
    done
  fi
  for f in "$DIR"/*.log; do [ -f "$f" ] && { echo "== $f" >&2; tail -20 "$f" >&2; }; done
  exit 1
}
ctl() { local k=$1; shift; "$SPARKCTL" sim exec "$P-$k" -- "$SPARKCTL" "$@"; }
in_ns() { local k=$1; shift; ip netns exec "$P-$k" "$@"; }
jq_py() { python3 -c "import json,sys
try: d = json.load(sys.stdin)
except Exception: sys.exit(0)
print($1)"; }

sl_cluster() { # NODES TOPO
  local nodes=$1 k tok
  P=$SL_TAG$$
  "$SPARKCTL" sim up --nodes "$nodes" --topology "$2" --name "$P" >"$DIR/sim.log" 2>&1 ||
    die "sim up: $(cat "$DIR/sim.log")"
  tok=$(ctl 1 init --name "$P" -o json | jq_py 'd["token"]')
  [ -n "$tok" ] || die "init gave no token"
  for k in $(seq 2 "$nodes"); do
    ctl "$k" join 169.254.100.1:7300 --token "$tok" >/dev/null || die "join of node $k"
  done
  local deadline=$((SECONDS + 30))
  while [ $SECONDS -lt $deadline ]; do
    [ "$(ctl 1 status -o json 2>/dev/null |
      jq_py 'sum(1 for n in d["nodes"] if n["state"] == "ready" and isinstance(n.get("fabric"), dict))')" = "$nodes" ] &&
      return 0
    sleep 0.2
  done
  die "the head did not get $nodes ready nodes with a fabric report in 30 s"
}

svc_field() { ctl 1 svc show "$1" -o json 2>/dev/null | jq_py "$2" || true; }
wait_state() { # NAME STATE SECS [EXPR over d]
  local deadline=$((SECONDS + $3)) cond=${4:-True}
  while [ $SECONDS -lt $deadline ]; do
    [ "$(svc_field "$1" "d['state'] == '$2' and ($cond)")" = True ] && return 0
    sleep 0.2
  done
  return 1
}
decode_pids() { # K: spark-decode processes in node K's namespace
  local p
  for p in $(ip netns pids "$P-$1"); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = spark-decode ] && echo "$p"
  done
  return 0
}
sl_no_sanitizer_report() {
  local hits
  hits=$(grep -rlE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "/run/sparkctl-sim/$P" 2>/dev/null || true)
  [ -z "$hits" ] || die "sanitizer reports in: $hits"
}

# Sourced by the router's test scripts and bench/router/run.sh: a temporary
# directory DIR removed at exit with every process whose pid went into pids,
# the check helpers ok/die/wait_for, and start_fake (fake_upstream.js on
# loopback). Call router_lib_init TAG first.
ROUTER_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

router_lib_init() { # TAG: DIR=/tmp/spark-router-TAG-XXXXXX
  DIR=$(mktemp -d "/tmp/spark-router-$1-XXXXXX")
  pids=()
  pass=0
  trap router_lib_cleanup EXIT
}
router_lib_cleanup() {
  for p in ${pids[@]+"${pids[@]}"}; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$DIR"
}
ok() { pass=$((pass + 1)); echo "ok $pass - $*"; }
die() { echo "FAIL: $*" >&2; for f in "$DIR"/*.log; do [ -f "$f" ] && { echo "== $f" >&2; tail -20 "$f" >&2; }; done; exit 1; }
wait_for() { # SECONDS COMMAND...: until the command succeeds (1 when it never did)
  local t=$1
  shift
  for _ in $(seq $((t * 20))); do "$@" && return 0; sleep 0.05; done
  return 1
}
start_fake() { # NAME -> PORT_NAME (in this shell, so that the cleanup knows its pid)
  node "$ROUTER_LIB_DIR/fake_upstream.js" "$1" >"$DIR/$1.out" 2>"$DIR/$1.log" &
  pids+=($!)
  wait_for 5 grep -q '^PORT ' "$DIR/$1.out" || die "fake upstream $1 did not start"
  eval "PORT_$1=$(awk '/^PORT/{print $2}' "$DIR/$1.out")"
}

#!/bin/bash
# Instructions per proxied request of spark-router, with the routing log off
# and on (valgrind --tool=callgrind), against the node fake upstream of the
# tests: the counters are zeroed after a warm-up, wrk sends requests for a
# while, and the instructions counted since are divided by the requests the
# upstream saw. Also prints the inclusive cost of log_request (the routing
# log's line, the metrics and the session update) per request.
#   bench/router/callgrind.sh [--build DIR] [--duration S] [--log]
# Not part of CI (a minute or so; valgrind and wrk must be installed).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$SRC/build-bench
DURATION=8
LOGLINE=
while [ $# -gt 0 ]; do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --log) LOGLINE=yes; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
    *) echo "$0: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
for t in node wrk curl python3 valgrind callgrind_control callgrind_annotate; do
  command -v $t >/dev/null || { echo "$0: $t is not installed" >&2; exit 1; }
done
[ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" --buildtype=release -Dtests=disabled >/dev/null
ninja -C "$BUILD" router/spark-router >/dev/null
ROUTER=$BUILD/router/spark-router

# shellcheck source=../../tests/integration/router/lib.sh
. "$SRC/tests/integration/router/lib.sh"
router_lib_init callgrind
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 600); do curl -s -o /dev/null "http://127.0.0.1:$1$2" && return 0; sleep 0.05; done; return 1; }
upstream_requests() { curl -s "http://127.0.0.1:$UP/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["requests"])'; }

start_fake up
UP=$PORT_up
cat >"$DIR/policy.yaml" <<EOP
${LOGLINE:+log: $DIR/routing.jsonl}
targets:
  up: {url: 'http://127.0.0.1:$UP/v1'}
routes:
  bench:
    type: rules
    rules:
      - {name: long, when: {min_tokens: 2000}, target: up}
      - {name: code, when: {regex: 'def [a-z_]+\\(', in: any}, target: up}
    default: up
EOP
RP=$(free_port)
valgrind --tool=callgrind --callgrind-out-file="$DIR/cg.out" \
  "$ROUTER" --policy "$DIR/policy.yaml" --listen "127.0.0.1:$RP" --log-level warn 2>"$DIR/router.log" &
pids+=($!)
VPID=$!
wait_port "$RP" /health || { echo "$0: spark-router did not start" >&2; cat "$DIR/router.log" >&2; exit 1; }

cat >"$DIR/post.lua" <<'EOP'
wrk.method = "POST"
wrk.body = '{"model":"bench","messages":[{"role":"user","content":"hello there"}]}'
wrk.headers["Content-Type"] = "application/json"
EOP
wrk -t1 -c4 -d2s -s "$DIR/post.lua" "http://127.0.0.1:$RP/v1/chat/completions" >/dev/null
sleep 0.5
callgrind_control -z "$VPID" >/dev/null 2>&1
before=$(upstream_requests)
wrk -t1 -c4 -d"${DURATION}s" -s "$DIR/post.lua" "http://127.0.0.1:$RP/v1/chat/completions" >/dev/null
sleep 0.5
after=$(upstream_requests)
callgrind_control -d "$VPID" >/dev/null 2>&1
n=$((after - before))
f=$(ls -t "$DIR"/cg.out.* | head -1)
total=$(awk '/^(summary|totals):/ {print $2; exit}' "$f")
logreq=$(callgrind_annotate --inclusive=yes "$f" 2>/dev/null | awk '/log_request/ {gsub(",", "", $1); print $1; exit}')
lr=n/a # log_request inlined into its caller
[ -z "$logreq" ] || lr=$((logreq / n))
echo "requests=$n log=${LOGLINE:-no} instructions_per_request=$((total / n)) log_request_per_request=$lr"
if [ -n "$LOGLINE" ]; then
  echo "routing log lines: $(wc -l <"$DIR/routing.jsonl")"
  head -1 "$DIR/routing.jsonl"
fi

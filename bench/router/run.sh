#!/usr/bin/env bash
# bench/router/run.sh: spark-router's overhead, side by side in one run, in
# front of the same fast fake OpenAI-compatible upstream
# (tests/integration/router/fake_upstream.js, node, loopback):
#   direct   wrk -> upstream
#   router   wrk -> spark-router (a rules route) -> upstream
#   portkey  wrk -> Portkey's AI gateway (npm @portkey-ai/gateway) -> upstream
# at the same concurrency, in alternating rounds (the median round is shown);
# then at about 1,000 req/s (wrk, 10 connections each pausing 10 ms between
# requests, less about 1 ms) direct and through spark-router,
# for the latency spark-router adds, and its own routing-overhead histogram
# (parsing and deciding, spark_router_routing_overhead_seconds).
# --log writes the routing log (to a file in the run's temporary directory).
# --baseline BIN adds another spark-router binary (an older build, say) as
# the path "baseline", in the same alternating rounds: before/after figures
# (--baseline-nolog: the baseline without the routing log, so that
# "--log --baseline THIS_BINARY --baseline-nolog" measures the log's cost)
# from one run. The router paths also show the router process's CPU time per
# request (from /proc: user + system).
# Not part of CI. Needs node, npm (first run: installs the gateway into
# $SPARK_NPM_CACHE/bench-router), wrk, python3.
#   bench/router/run.sh [--build DIR] [--duration S] [--connections C] [--rounds N] [--rate R]
#                       [--baseline BIN [--baseline-nolog]] [--log]
set -euo pipefail
cd "$(dirname "$0")/../.."
SRC=$PWD
BUILD=build-bench
DUR=4
CONN=50
ROUNDS=3
RATE=1000
BASE=
BASE_NOLOG=
LOGLINE=
while [ $# -gt 0 ]; do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --duration) DUR=$2; shift 2 ;;
    --connections) CONN=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --baseline) BASE=$2; shift 2 ;;
    --baseline-nolog) BASE_NOLOG=yes; shift ;;
    --log) LOGLINE=yes; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
    *) echo "$0: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
for t in node npm wrk curl python3; do
  command -v $t >/dev/null || { echo "$0: $t is not installed" >&2; exit 1; }
done
[ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" --buildtype=release -Dtests=disabled >/dev/null
ninja -C "$BUILD" router/spark-router >/dev/null
ROUTER=$BUILD/router/spark-router
[ -z "$BASE" ] || [ -x "$BASE" ] || { echo "$0: --baseline $BASE is not an executable" >&2; exit 2; }

NPM=${SPARK_NPM_CACHE:-/var/cache/sparkctl-npm}/bench-router
if [ ! -x "$NPM/node_modules/.bin/gateway" ]; then
  mkdir -p "$NPM"
  # @hono/node-server pinned: the gateway's streaming breaks with later ones (Portkey-AI/gateway#1389)
  cat >"$NPM/package.json" <<'EOP'
{ "name": "sparkctl-router-bench", "private": true,
  "dependencies": { "@portkey-ai/gateway": "1.15.2" },
  "overrides": { "@hono/node-server": "1.13.8" } }
EOP
  (cd "$NPM" && timeout 300 npm install --no-audit --no-fund >/dev/null 2>&1) ||
    { echo "$0: npm install of the gateway failed" >&2; exit 1; }
fi

# shellcheck source=../../tests/integration/router/lib.sh
. "$SRC/tests/integration/router/lib.sh"
router_lib_init bench
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 200); do curl -s -o /dev/null "http://127.0.0.1:$1$2" && return 0; sleep 0.05; done; return 1; }

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
"$ROUTER" --policy "$DIR/policy.yaml" --listen "127.0.0.1:$RP" --log-level warn 2>"$DIR/router.log" &
pids+=($!)
RPID=$!
if [ -n "$BASE" ]; then
  BP=$(free_port)
  if [ -n "$BASE_NOLOG" ]; then
    sed "/^log: /d" "$DIR/policy.yaml" >"$DIR/policy-baseline.yaml"
  else
    sed "s|routing.jsonl|routing-baseline.jsonl|" "$DIR/policy.yaml" >"$DIR/policy-baseline.yaml"
  fi
  "$BASE" --policy "$DIR/policy-baseline.yaml" --listen "127.0.0.1:$BP" --log-level warn 2>"$DIR/baseline.log" &
  pids+=($!)
  BPID=$!
fi
PP=$(free_port)
(cd "$NPM" && exec node node_modules/.bin/gateway --headless --port="$PP") \
  >"$DIR/portkey.log" 2>&1 &
pids+=($!)
wait_port "$RP" /health || { echo "$0: spark-router did not start" >&2; cat "$DIR/router.log" >&2; exit 1; }
[ -z "$BASE" ] || wait_port "$BP" /health || { echo "$0: the baseline spark-router did not start" >&2; cat "$DIR/baseline.log" >&2; exit 1; }
wait_port "$PP" / || { echo "$0: the Portkey gateway did not start" >&2; tail "$DIR/portkey.log" >&2; exit 1; }

BODY='{"model":"bench","messages":[{"role":"user","content":"hello there"}]}'
cat >"$DIR/post.lua" <<EOP
wrk.method = "POST"
wrk.body = '$BODY'
wrk.headers["Content-Type"] = "application/json"
local pause = tonumber(os.getenv("BENCH_PAUSE_MS") or "0")
if pause > 0 then delay = function() return pause end end
done = function(s, lat, req)
  local e = s.errors.connect + s.errors.read + s.errors.write + s.errors.timeout + s.errors.status
  io.write(string.format("RESULT %.0f %.3f %.3f %d %d\n", s.requests / (s.duration / 1e6),
    lat:percentile(50) / 1000, lat:percentile(99) / 1000, e, s.requests))
end
EOP
PK_HDRS=(-H 'x-portkey-provider: openai' -H "x-portkey-custom-host: http://127.0.0.1:$UP/v1"
  -H 'Authorization: Bearer bench-key')
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; } # user + system, in clock ticks
TICK=$(getconf CLK_TCK)
# one wrk run: PATH_NAME URL [headers] -> "rps p50_ms p99_ms errors requests cpu_us_per_request"
# (cpu: of the process given as PID=N before the URL, else 0)
run_wrk() {
  local name=$1 url=$2 pid=
  shift 2
  case $url in PID=*) pid=${url#PID=}; url=$1; shift ;; esac
  local c0=0 c1=0
  [ -z "$pid" ] || c0=$(cpu_ticks "$pid")
  wrk -t1 -c"$CONN" -d"${DUR}s" -s "$DIR/post.lua" "$@" "$url" 2>&1 | awk '/^RESULT/{print $2, $3, $4, $5, $6}' >"$DIR/one"
  [ -z "$pid" ] || c1=$(cpu_ticks "$pid")
  awk -v c=$((c1 - c0)) -v t="$TICK" '{printf "%s %s %s %s %s %.1f\n", $1, $2, $3, $4, $5, $5 ? c * 1e6 / t / $5 : 0}' "$DIR/one"
}
# the answer must be the upstream's, through each path, before measuring
check() {
  local a
  a=$(curl -sS "$@" -H 'content-type: application/json' -d "$BODY")
  grep -q '"content":"from up: hello there"' <<<"$a" || { echo "$0: a bad answer: $a" >&2; exit 1; }
}
check "http://127.0.0.1:$UP/v1/chat/completions"
check "http://127.0.0.1:$RP/v1/chat/completions"
[ -z "$BASE" ] || check "http://127.0.0.1:$BP/v1/chat/completions"
check "http://127.0.0.1:$PP/v1/chat/completions" "${PK_HDRS[@]}"
for u in "http://127.0.0.1:$UP" "http://127.0.0.1:$RP" ${BASE:+"http://127.0.0.1:$BP"}; do # warm-up
  wrk -t1 -c"$CONN" -d1s -s "$DIR/post.lua" "$u/v1/chat/completions" >/dev/null 2>&1
done
wrk -t1 -c"$CONN" -d1s -s "$DIR/post.lua" "${PK_HDRS[@]}" "http://127.0.0.1:$PP/v1/chat/completions" >/dev/null 2>&1

echo "spark-router overhead: wrk -t1 -c$CONN -d${DUR}s, $ROUNDS alternating rounds (median shown), non-streaming chat"
echo "completions to a node fake upstream; everything on this machine ($(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
for r in $(seq "$ROUNDS"); do
  run_wrk direct "http://127.0.0.1:$UP/v1/chat/completions" >>"$DIR/direct"
  run_wrk router "PID=$RPID" "http://127.0.0.1:$RP/v1/chat/completions" >>"$DIR/router"
  [ -z "$BASE" ] || run_wrk baseline "PID=$BPID" "http://127.0.0.1:$BP/v1/chat/completions" >>"$DIR/baseline"
  run_wrk portkey "http://127.0.0.1:$PP/v1/chat/completions" "${PK_HDRS[@]}" >>"$DIR/portkey"
done

# fixed rate: the latency spark-router adds, and its own routing overhead
metric_hist() { # -> "le0.5ms le1ms count sum" of the routing-overhead histogram
  curl -sS "http://127.0.0.1:$RP/metrics" | awk '
    /^spark_router_routing_overhead_seconds_bucket/ && /le="0.0005"/ {a += $NF}
    /^spark_router_routing_overhead_seconds_bucket/ && /le="0.001"/ {b += $NF}
    /^spark_router_routing_overhead_seconds_count/ {c += $NF}
    /^spark_router_routing_overhead_seconds_sum/ {s += $NF}
    END {printf "%d %d %d %.9f\n", a, b, c, s}'
}
# 10 connections, each pausing 10000/RATE ms less about the answer's own 1 ms
# after every answer: about RATE req/s (the measured rate is printed)
run_rate() { # URL -> "rps p50_ms p99_ms errors requests"
  local pause=$((10000 / RATE - 1))
  [ "$pause" -ge 1 ] || pause=1
  BENCH_PAUSE_MS=$pause wrk -t1 -c10 -d"${DUR}s" -s "$DIR/post.lua" "$1" 2>&1 |
    awk '/^RESULT/{print $2, $3, $4, $5, $6}'
}
h0=$(metric_hist)
read -r drps dp50 dp99 derr _ < <(run_rate "http://127.0.0.1:$UP/v1/chat/completions")
read -r rrps rp50 rp99 rerr _ < <(run_rate "http://127.0.0.1:$RP/v1/chat/completions")
h1=$(metric_hist)

python3 - "$DIR" "$CONN" "$RATE" "$dp50" "$dp99" "$derr" "$rp50" "$rp99" "$rerr" "$h0" "$h1" "$drps" "$rrps" <<'EOP'
import os, statistics, sys
d, conn, rate = sys.argv[1], sys.argv[2], sys.argv[3]
def rounds(name):
    rows = [list(map(float, l.split())) for l in open(f"{d}/{name}") if l.strip()]
    med = sorted(rows, key=lambda r: r[0])[len(rows) // 2]
    return med, rows
names = ["direct", "router"] + (["baseline"] if os.path.exists(f"{d}/baseline") else []) + ["portkey"]
res = {n: rounds(n) for n in names}
D = res["direct"][0]
print()
print(f"{'path':<9} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'+p50 ms':>8} {'+p99 ms':>8} {'errors':>7} {'vs direct':>10} {'cpu us/req':>11}  rounds (req/s; router cpu us/req)")
for n in names:
    r, rows = res[n]
    add50 = "" if n == "direct" else f"{r[1] - D[1]:.2f}"
    add99 = "" if n == "direct" else f"{r[2] - D[2]:.2f}"
    cpu = statistics.median(x[5] for x in rows) if rows[0][5] else None
    print(f"{n:<9} {r[0]:>8.0f} {r[1]:>8.2f} {r[2]:>8.2f} {add50:>8} {add99:>8} {int(r[3]):>7} {r[0] / D[0]:>9.2f}x "
          + (f"{cpu:>11.1f}" if cpu else f"{'':>11}") + "  "
          + ", ".join(f"{x[0]:.0f}" + (f" ({x[5]:.0f})" if x[5] else "") for x in rows))
R, P = res["router"][0], res["portkey"][0]
print(f"\nspark-router vs direct: {R[0] / D[0]:.2f}x req/s (target >= 0.5x); "
      f"vs Portkey's gateway: {R[0] / P[0]:.1f}x req/s (target >= 10x)")
if "baseline" in res:
    B = res["baseline"][0]
    pairs = [r[0] / b[0] for r, b in zip(res["router"][1], res["baseline"][1])]
    print(f"spark-router vs the baseline binary: {R[0] / B[0]:.2f}x req/s (median rounds; "
          f"per round: {', '.join(f'{x:.2f}' for x in pairs)})")
dp50, dp99, derr, rp50, rp99, rerr = map(float, sys.argv[4:10])
h0, h1 = [list(map(float, x.split())) for x in sys.argv[10:12]]
le05, le1, cnt, sm = (h1[i] - h0[i] for i in range(4))
drps, rrps = sys.argv[12:14]
print(f"\nat about {rate} req/s (wrk -c10, paced; measured {drps} direct, {rrps} through spark-router): "
      f"direct p50 {dp50:.3f} ms p99 {dp99:.3f} ms; through spark-router p50 {rp50:.3f} ms "
      f"p99 {rp99:.3f} ms: added p50 {rp50 - dp50:.3f} ms, p99 {rp99 - dp99:.3f} ms "
      f"(errors {int(derr)} / {int(rerr)})")
if cnt:
    print(f"spark-router's routing overhead (parse + decide) over those {int(cnt)} requests: "
          f"{100 * le05 / cnt:.2f}% <= 0.5 ms, {100 * le1 / cnt:.2f}% <= 1 ms (p99 under 1 ms: "
          f"{'yes' if le1 / cnt >= 0.99 else 'no'}), mean {1e6 * sm / cnt:.1f} us")
EOP

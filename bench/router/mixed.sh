#!/usr/bin/env bash
# bench/router/mixed.sh: the seed's mixed-workload claim. One simulated switch
# cluster of 4 nodes (real sparkd in each), two spark-decode pools served with
# `sparkctl serve` on two groups of 2 (TP=2 each): "small" (shape mix-small,
# about 20 M parameters) and "large" (mix-large, about 100 M: about 7x the
# weights read per token), synthetic bf16 weights, the byte tokenizer. In
# front, spark-router (`sparkctl route serve`, in node 1's namespace) with the
# shipped policy dist/router-demo.yaml. One fixed mixed workload (short easy
# prompts and long hard ones, 3:1 by default, the same list in both modes) from
# concurrent clients, in two modes, alternating rounds:
#   routed     model "auto": the rules route (long or hard -> large, else small)
#   all-large  model "large": a passthrough route, everything to the large pool
# Prints completion tokens/s, requests/s, p50/p99 latency (all, and per class)
# and the share each pool served, the median round of each mode, and the
# ratios routed / all-large. Not part of CI. Root (network namespaces).
#   bench/router/mixed.sh [--build DIR] [--requests N] [--clients C] [--long-every K]
#                         [--short-tokens T] [--long-tokens T] [--rounds R]
set -euo pipefail
cd "$(dirname "$0")/../.."
SRC=$PWD
BUILD=build-bench
REQ=32
CLIENTS=8
EVERY=4
STOK=32
LTOK=64
ROUNDS=1
while [ $# -gt 0 ]; do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --requests) REQ=$2; shift 2 ;;
    --clients) CLIENTS=$2; shift 2 ;;
    --long-every) EVERY=$2; shift 2 ;;
    --short-tokens) STOK=$2; shift 2 ;;
    --long-tokens) LTOK=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "$0: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "$0: needs root (network namespaces)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "$0: python3 is not installed" >&2; exit 1; }
case $BUILD in /*) ;; *) BUILD=$SRC/$BUILD ;; esac
[ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" --buildtype=release -Dtests=disabled >/dev/null
nice ninja -C "$BUILD" cli/sparkctl agent/sparkd runtime/decode/spark-decode router/spark-router >/dev/null
export PATH=$BUILD/cli:$BUILD/agent:$BUILD/runtime/decode:$BUILD/router:$PATH

SIM=mix$$
DIR=$(mktemp -d /tmp/sparkctl-mixed-XXXXXX); chmod 755 "$DIR"
cleanup() {
  if [ -f "$DIR/router.pid" ]; then kill -TERM "$(cat "$DIR/router.pid")" 2>/dev/null || true; fi
  sparkctl sim down --name "$SIM" >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap cleanup EXIT
on() { local n=$1; shift; sparkctl sim exec "$SIM-$n" -- sparkctl "$@"; }
inside() { sparkctl sim exec "$SIM-1" -- "$@"; }

cat >"$DIR/shapes.yaml" <<'YAML'
shapes:
  mix-small:
    description: the small pool (about 20 M parameters)
    hidden_size: 256
    intermediate_size: 768
    num_hidden_layers: 4
    num_attention_heads: 8
    num_key_value_heads: 4
    head_dim: 32
    vocab_size: 32000
    rms_norm_eps: 1.0e-5
    rope_theta: 10000
  mix-large:
    description: the large pool (about 100 M parameters)
    hidden_size: 768
    intermediate_size: 3072
    num_hidden_layers: 6
    num_attention_heads: 12
    num_key_value_heads: 6
    head_dim: 64
    vocab_size: 32000
    rms_norm_eps: 1.0e-5
    rope_theta: 10000
YAML
for p in small large; do
  cat >"$DIR/$p.yaml" <<YAML
name: $p
runtime: spark-decode
model: synthetic:mix-$p
args: --catalog $DIR/shapes.yaml --max-context 8192
memory: 2
health: {interval: 1s}
YAML
done

echo "mixed.sh: a 4-node switch cluster, pools small (mix-small) and large (mix-large), TP=2 each" >&2
sparkctl sim up --nodes 4 --topology switch --name "$SIM" >/dev/null
on 1 init --name mixed >/dev/null
TOKEN=$(on 1 token create --ttl 10m -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
for n in 2 3 4; do on $n join 169.254.100.1:7300 --token "$TOKEN" >/dev/null; done
on 1 group create gsmall --nodes "$SIM-1,$SIM-2" >/dev/null
on 1 group create glarge --nodes "$SIM-3,$SIM-4" >/dev/null
on 1 serve "$DIR/small.yaml" --group gsmall >/dev/null
on 1 serve "$DIR/large.yaml" --group glarge >/dev/null
ready=0
for _ in $(seq 240); do
  ready=$(on 1 svc ls -o json | python3 -c 'import json,sys; print(sum(s["state"] == "ready" for s in json.load(sys.stdin)["services"]))')
  [ "$ready" = 2 ] && break
  sleep 0.5
done
if [ "$ready" != 2 ]; then
  on 1 svc ls >&2 || true; { on 1 svc logs small; on 1 svc logs large; } 2>&1 | tail -10 >&2 || true
  echo "mixed.sh: the two services are not ready after 120 s (svc ls and their logs above)" >&2
  exit 1
fi
on 1 svc ls >&2
inside sparkctl route serve --policy "$SRC/dist/router-demo.yaml" --pid-file "$DIR/router.pid" \
  --log "$DIR/route.jsonl" 2>"$DIR/router.log" &
for _ in $(seq 100); do
  d=$(inside curl -s http://127.0.0.1:4000/v1/decision \
    -d '{"model":"auto","messages":[{"role":"user","content":"hi"}]}' 2>/dev/null || true)
  case $d in *'"resolvable":true'*) break ;; esac
  sleep 0.2
done
case $d in *'"resolvable":true'*) ;; *)
  tail -5 "$DIR/router.log" >&2 || true
  echo "mixed.sh: spark-router does not route to the services after 20 s (its log above)" >&2
  exit 1 ;;
esac

# the client: runs inside node 1's namespace, prints one JSON line per round
cat >"$DIR/client.py" <<'PY'
import json, random, sys, threading, time, urllib.request
model, n, clients, every, stok, ltok = sys.argv[1], *map(int, sys.argv[2:7])
rng = random.Random(7)
topics = ["the weather", "a cat", "tea", "the moon", "a bicycle", "rain", "bread", "music"]
work = []
for i in range(n):
    if i % every == every - 1:
        ctx = " ".join("node %d reported link up, probe ok, mtu 9000, %d Gb/s." % (j, rng.choice([100, 200]))
                       for j in range(10))
        work.append(("long", "Here is a cluster log. %s Explain what it says about the fabric." % ctx, ltok))
    else:
        work.append(("short", "Say something nice about %s." % rng.choice(topics), stok))
out, lock, nxt = [], threading.Lock(), [0]
def client():
    while True:
        with lock:
            if nxt[0] >= len(work):
                return
            kind, prompt, mt = work[nxt[0]]; nxt[0] += 1
        body = json.dumps({"model": model, "max_tokens": mt,
                           "messages": [{"role": "user", "content": prompt}]}).encode()
        rq = urllib.request.Request("http://127.0.0.1:4000/v1/chat/completions", body,
                                    {"Content-Type": "application/json"})
        t0 = time.monotonic()
        try:
            with urllib.request.urlopen(rq, timeout=600) as r:
                d = json.load(r); tgt = r.headers.get("X-Spark-Target")
            ok, toks = True, d["usage"]["completion_tokens"]
        except Exception as e:
            ok, toks, tgt = False, 0, str(e)[:60]
        with lock:
            out.append((kind, time.monotonic() - t0, ok, toks, tgt))
t0 = time.monotonic()
ts = [threading.Thread(target=client) for _ in range(clients)]
for t in ts: t.start()
for t in ts: t.join()
wall = time.monotonic() - t0
def pct(v, q):
    v = sorted(v); return v[min(len(v) - 1, int(round(q * (len(v) - 1))))] if v else 0
lat = [o[1] for o in out if o[2]]
res = {"model": model, "wall_s": wall, "requests": len(out), "failed": sum(not o[2] for o in out),
       "tokens": sum(o[3] for o in out), "p50": pct(lat, 0.5), "p99": pct(lat, 0.99),
       "short_p50": pct([o[1] for o in out if o[2] and o[0] == "short"], 0.5),
       "long_p50": pct([o[1] for o in out if o[2] and o[0] == "long"], 0.5),
       "to_small": sum(o[4] == "small" for o in out), "to_large": sum(o[4] == "large" for o in out),
       "errors": sorted({o[4] for o in out if not o[2]})}
print(json.dumps(res))
PY
chmod 644 "$DIR/client.py"
# one short warm-up request on each pool
inside python3 "$DIR/client.py" auto 4 4 2 4 4 >/dev/null
echo "mixed.sh: $REQ requests (every ${EVERY}th long and hard), $CLIENTS clients, $ROUNDS round(s) per mode" >&2
for r in $(seq "$ROUNDS"); do
  for m in large auto; do
    inside python3 "$DIR/client.py" "$m" "$REQ" "$CLIENTS" "$EVERY" "$STOK" "$LTOK" >>"$DIR/rounds.jsonl"
    echo "mixed.sh: round $r, model $m: $(tail -1 "$DIR/rounds.jsonl")" >&2
  done
done
python3 - "$DIR/rounds.jsonl" "$REQ" "$CLIENTS" "$EVERY" "$STOK" "$LTOK" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
req, cl, every, stok, ltok = sys.argv[2:7]
def median(model):
    rs = sorted((r for r in rows if r["model"] == model), key=lambda r: r["tokens"] / r["wall_s"])
    return rs[len(rs) // 2]
a, b = median("auto"), median("large")
print("mixed workload: %s requests, 1 in %s long and hard (%s tokens out; short ones %s), %s clients"
      % (req, every, ltok, stok, cl))
print("%-10s %9s %7s %8s %8s %10s %9s %7s %7s %6s" % ("mode", "tokens/s", "req/s", "p50 s", "p99 s",
      "short p50", "long p50", "small", "large", "fail"))
for name, r in (("all-large", b), ("routed", a)):
    n = max(r["requests"], 1)
    print("%-10s %9.1f %7.2f %8.2f %8.2f %10.2f %9.2f %6.0f%% %6.0f%% %6d" % (
        name, r["tokens"] / r["wall_s"], r["requests"] / r["wall_s"], r["p50"], r["p99"],
        r["short_p50"], r["long_p50"], 100.0 * r["to_small"] / n, 100.0 * r["to_large"] / n, r["failed"]))
    if r["errors"]:
        print("  errors: %s" % "; ".join(r["errors"]))
tput = (a["tokens"] / a["wall_s"]) / (b["tokens"] / b["wall_s"])
print("ratio routed / all-large: tokens/s %.2fx, p50 latency %.2fx, p99 latency %.2fx" % (
    tput, a["p50"] / b["p50"] if b["p50"] else 0, a["p99"] / b["p99"] if b["p99"] else 0))
PY

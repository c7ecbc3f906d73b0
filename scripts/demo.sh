#!/usr/bin/env bash
# The sparkctl demo: build, bring up a simulated 4-node DGX Spark ring (one
# network namespace per node, netdevs named like a Spark's, veth "cables", a
# real sparkd in each), form a cluster with a join token, show its status, and
# tear it all down. Run as root on Debian 12 (directly or with sudo); it
# installs what each part needs (build packages; python3-torch for the
# torchrun part, Open MPI for the MPI part), or says which part it skips and why.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "demo.sh: needs root (network namespaces): run it as root, or with sudo ./scripts/demo.sh" >&2
  exit 1
fi
./scripts/deps.sh --build
# need PART PKG...: install the Debian packages a part of the demo needs; 1
# (after saying why) when they cannot be had, and the part is skipped.
need() {
  local part=$1 p missing=(); shift
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ -n "${SPARK_DEMO_NO_INSTALL:-}" ] || ! command -v apt-get >/dev/null; then
    echo "demo.sh: skipping the $part part: ${missing[*]} not installed (apt-get install ${missing[*]})" >&2
    return 1
  fi
  echo "demo.sh: installing ${missing[*]} for the $part part" >&2
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 &&
     ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }; then
    echo "demo.sh: skipping the $part part: apt-get could not install ${missing[*]}" >&2
    return 1
  fi
}
# what the torchrun and Open MPI parts need, before the sim is up
TORCH=0; MPI=0
if need torchrun python3-torch; then
  if [ -x /usr/bin/torchrun ]; then TORCH=1; else echo "demo.sh: skipping the torchrun part: python3-torch has no /usr/bin/torchrun" >&2; fi
fi
if need "Open MPI" openmpi-bin libopenmpi-dev; then
  if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then MPI=1; else echo "demo.sh: skipping the Open MPI part: no mpicc/mpirun on PATH" >&2; fi
fi
CURL=0
if need "serving" curl; then CURL=1; fi
B=${SPARK_DEMO_BUILD:-build-demo}
case $B in /*) ;; *) B=$PWD/$B ;; esac
[ -f "$B/build.ninja" ] || meson setup "$B" -Dtests=disabled >/dev/null
ninja -C "$B" >/dev/null
export PATH=$B/cli:$B/agent:$B/runtime/decode:$B/router:$PATH
SIM=demo$$
JOBDIR=
cleanup() {
  if [ -n "$JOBDIR" ] && [ -f "$JOBDIR/router.pid" ]; then kill -TERM "$(cat "$JOBDIR/router.pid")" 2>/dev/null || true; fi
  sparkctl sim down --name "$SIM" >/dev/null 2>&1 || true
  [ -n "$JOBDIR" ] && rm -rf "$JOBDIR"
  return 0
}
trap cleanup EXIT

say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
on() { local n=$1; shift; sparkctl sim exec "$SIM-$n" -- sparkctl "$@"; }

say "sparkctl sim up --nodes 4 --topology ring --name $SIM"
sparkctl sim up --nodes 4 --topology ring --name "$SIM"
say "sparkctl sim ls --name $SIM --links"
sparkctl sim ls --name "$SIM" --links
say "sparkctl init --name demo                      # on $SIM-1"
on 1 init --name demo
TOKEN=$(on 1 token create --ttl 10m -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
for n in 2 3 4; do
  say "sparkctl join 169.254.100.1:7300 --token \$TOKEN   # on $SIM-$n"
  on $n join 169.254.100.1:7300 --token "$TOKEN"
done
say "sparkctl status                                # on $SIM-3"
on 3 status
say "sparkctl topo validate --expect ring             # on $SIM-1"
on 1 topo validate --expect ring
say "sparkctl topo show"
on 1 topo show
say "sparkctl sim fault kill $SIM-4; sleep 6; sparkctl status"
sparkctl sim fault kill "$SIM-4" >/dev/null
sleep 6
on 1 status
say "sparkctl sim fault start $SIM-4; sleep 2; sparkctl status"
sparkctl sim fault start "$SIM-4" >/dev/null
sleep 2
on 1 status
# Groups and jobs (issue 6): two groups of neighbours, a torchrun job on one and
# an Open MPI job on the other, each rank with its own node's environment.
say "sparkctl group create train --size 2; sparkctl group create serve --size 2"
on 1 group create train --size 2
on 1 group create serve --size 2
on 2 group ls
JOBDIR=$(mktemp -d /tmp/sparkctl-demo-XXXXXX); chmod 755 "$JOBDIR"
if [ $TORCH = 1 ]; then
  cat > "$JOBDIR/allreduce.py" <<'PY'
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print(f"rank {dist.get_rank()} of {dist.get_world_size()}: all_reduce = {t.item()}")
PY
  say "sparkctl run --group train --launcher torchrun -- allreduce.py"
  on 3 run --group train --launcher torchrun --env PATH=/usr/sbin:/usr/bin:/sbin:/bin -- "$JOBDIR/allreduce.py"
fi
if [ $MPI = 1 ]; then
  cat > "$JOBDIR/hello.c" <<'C'
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int c, char **v) { int r, n, x, s; MPI_Init(&c, &v);
  MPI_Comm_rank(MPI_COMM_WORLD, &r); MPI_Comm_size(MPI_COMM_WORLD, &n); x = r + 1;
  MPI_Allreduce(&x, &s, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  printf("MPI rank %d of %d on %s: sum = %d\n", r, n, getenv("SPARK_NODE"), s);
  MPI_Finalize(); return 0; }
C
  mpicc -o "$JOBDIR/hello" "$JOBDIR/hello.c"
  # simulated nodes share one host name and /dev/shm: keep Open MPI off shared memory
  say "sparkctl run --group serve --launcher mpi --ranks-per-node 2 --env OMPI_MCA_btl=self,tcp -- hello"
  on 4 run --group serve --launcher mpi --ranks-per-node 2 --env OMPI_MCA_btl=self,tcp -- "$JOBDIR/hello"
fi
say "sparkctl run --group all -- sh -c 'echo \$GLOO_SOCKET_IFNAME \$SPARK_FABRIC_NETDEVS'"
on 1 run --group all -- sh -c 'echo $SPARK_NODE: GLOO_SOCKET_IFNAME=$GLOO_SOCKET_IFNAME SPARK_FABRIC_NETDEVS=$SPARK_FABRIC_NETDEVS'
say "sparkctl job ls"
on 1 job ls
# The serving path (issues 17-20): a model generated here and pushed to one
# group, two spark-decode pools of different size kept up by `sparkctl serve`,
# and spark-router in front of both with the shipped example policy
# dist/router-demo.yaml (short easy prompts to the small pool, long or hard
# ones to the large one); then everything is stopped.
if [ $CURL = 1 ]; then
  # Two Llama-style shapes: demo-small, written out as a model directory
  # (config.json + model.safetensors, f32, random weights: it talks nonsense, but
  # spark-decode loads it like any Hugging Face model) to be pushed; and
  # demo-large, about 10x its weights per token, for spark-decode --synthetic
  # (a shape catalog) and for `fit` (its config.json).
  large='"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 6, "num_attention_heads": 12,
    "num_key_value_heads": 6, "head_dim": 64, "vocab_size": 32000'
  python3 scripts/llama_model.py "$JOBDIR/demo-small" '{"hidden_size": 256, "intermediate_size": 512,
    "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 32,
    "vocab_size": 512}'
  python3 scripts/llama_model.py "$JOBDIR/demo-large" "{$large, \"torch_dtype\": \"bfloat16\"}" --no-weights
  python3 -c 'import json, sys
print("shapes:\n  demo-large:\n    description: the demo'"'"'s large pool")
for k, v in json.loads(sys.argv[1]).items():
    print("    %s: %s" % (k, v))
print("    rms_norm_eps: 1.0e-5\n    rope_theta: 10000")' "{$large}" >"$JOBDIR/shapes.yaml"
  cat > "$JOBDIR/small.yaml" <<YAML
name: small
description: the pushed demo-small model (generated weights), TP over the group
runtime: spark-decode
model: demo-small             # a bare name: each node's store (SPARK_MODEL_DIR)
args: --tokenizer bytes
memory: 1
health: {interval: 1s}
YAML
  cat > "$JOBDIR/large.yaml" <<YAML
name: large
description: the demo-large shape (about 10x demo-small's weights), synthetic bf16 weights
runtime: spark-decode
model: synthetic:demo-large
args: --catalog $JOBDIR/shapes.yaml
memory: 4
health: {interval: 1s}
YAML
  chmod -R a+rX "$JOBDIR"
  say "sparkctl fit demo-small --nodes 2; sparkctl fit demo-large --nodes 2    # their config.json"
  for m in demo-small demo-large; do
    on 1 fit "$JOBDIR/$m" --nodes 2 | grep -E '^(Model|Layout|Verdict):'
  done
  say "sparkctl model push demo-small --group train      # on $SIM-3, to $SIM-1 and $SIM-2"
  on 3 model push "$JOBDIR/demo-small" --group train
  say "sparkctl serve small.yaml --group train; sparkctl serve large.yaml --group serve"
  on 1 serve "$JOBDIR/small.yaml" --group train
  on 1 serve "$JOBDIR/large.yaml" --group serve
  ready=0
  for _ in $(seq 120); do
    ready=$(on 1 svc ls -o json | python3 -c 'import json,sys; print(sum(s["state"] == "ready" for s in json.load(sys.stdin)["services"]))')
    [ "$ready" = 2 ] && break
    sleep 0.5
  done
  if [ "$ready" != 2 ]; then
    on 1 svc ls >&2 || true; { on 1 svc logs small; on 1 svc logs large; } 2>&1 | tail -10 >&2 || true
    echo "demo.sh: the two services are not ready after 60 s (svc ls and their logs above)" >&2
    exit 1
  fi
  say "sparkctl svc ls"
  on 1 svc ls
  say "sparkctl route serve --policy dist/router-demo.yaml &      # on $SIM-1"
  sparkctl sim exec "$SIM-1" -- sparkctl route serve --policy dist/router-demo.yaml \
    --pid-file "$JOBDIR/router.pid" --log "$JOBDIR/route.jsonl" 2>"$JOBDIR/router.log" &
  ROUTER=$!
  inside() { sparkctl sim exec "$SIM-1" -- "$@"; }
  for _ in $(seq 100); do
    d=$(inside curl -s http://127.0.0.1:4000/v1/decision \
      -d '{"model":"auto","messages":[{"role":"user","content":"hi"}]}' 2>/dev/null || true)
    case $d in *'"resolvable":true'*) break ;; esac
    sleep 0.2
  done
  case $d in *'"resolvable":true'*) ;; *)
    tail -5 "$JOBDIR/router.log" >&2 || true
    echo "demo.sh: spark-router does not route to the services after 20 s (its log above)" >&2
    exit 1 ;;
  esac
  # ask PROMPT: one request through the router; the target from its headers
  ask() {
    inside curl -s -D "$JOBDIR/hdr" -o "$JOBDIR/body" http://127.0.0.1:4000/v1/chat/completions \
      -d "$(python3 -c 'import json,sys; print(json.dumps({"model": "auto", "max_tokens": 12,
        "messages": [{"role": "user", "content": sys.argv[1]}]}))' "$1")"
    grep -i '^x-spark-' "$JOBDIR/hdr" | tr -d '\r' | tr '\n' ' '; echo
    python3 -c 'import json,sys; d = json.load(open(sys.argv[1])); u = d["usage"]
print("  model %s: %d prompt + %d completion tokens" % (d["model"], u["prompt_tokens"], u["completion_tokens"]))' "$JOBDIR/body"
  }
  say "curl localhost:4000/v1/chat/completions    # model auto: short, long and hard prompts"
  ask "hello there"
  ask "$(printf 'node %s: link up, probe ok. ' $(seq 20))summarise the log"
  ask "prove that the ring all-reduce sends 2(n-1)/n of the data"
  say "curl -N ... '\"stream\":true'                  # a streamed answer, chunk by chunk"
  inside curl -sN -D "$JOBDIR/hdr" http://127.0.0.1:4000/v1/chat/completions \
    -d '{"model":"auto","stream":true,"max_tokens":6,"messages":[{"role":"user","content":"explain streaming in a few tokens"}]}' |
    python3 -c 'import json, sys
for line in sys.stdin:
    if line.startswith("data: {"):
        c = json.loads(line[6:])
        for ch in c["choices"]:
            print("data: chunk of %s: %r%s" % (c["model"], ch["delta"].get("content", ""),
                  " finish_reason=" + ch["finish_reason"] if ch.get("finish_reason") else ""))
    elif line.startswith("data:"):
        print(line.rstrip())'
  grep -i '^x-spark-target' "$JOBDIR/hdr" | tr -d '\r'
  say "sparkctl svc stop small; sparkctl svc stop large; kill spark-router"
  kill -TERM "$(cat "$JOBDIR/router.pid")"
  wait "$ROUTER" || true
  on 1 svc stop small
  on 1 svc stop large
  on 1 svc rm small >/dev/null
  on 1 svc rm large >/dev/null
fi
rm -rf "$JOBDIR"
say "sparkctl sim down --name $SIM"
sparkctl sim down --name "$SIM"
trap - EXIT

#!/usr/bin/env bash
# The daemons under valgrind through `model push` (issue 18): a head and two
# workers on loopback; a push to both (every chunk checked, written and read
# in worker threads, relayed), a second push that moves nothing, a worker's
# copy damaged on disk and found by `model verify`, a push that mends it, ls,
# rm and a clean SIGTERM. Any definite leak or memory error makes valgrind
# exit 99 and this test fail.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
vg_init vgpush
# a step that fails shows the agents' model lines (vg_cleanup calls this)
vg_on_exit() {
  [ -n "${finished:-}" ] && return
  for n in h w1 w2; do
    echo "== $n"
    grep -a 'model_\|level=error' "$DIR/$n.log" 2>/dev/null | tail -15 || true
  done
}
vg_loopback_agents h w1 w2
TOKEN=$(ctl h init --name vgpush -o json | jget token)
ctl w1 join "127.0.0.1:${PORT[h]}" --token "$TOKEN" --timeout 30s
ctl w2 join "127.0.0.1:${PORT[h]}" --token "$TOKEN" --timeout 30s
# each node opens its data port once it has its certificate (slow under valgrind)
for n in h w1 w2; do
  for _ in $(seq 1 600); do
    grep -q 'msg=model_data_listening' "$DIR/$n.log" 2>/dev/null && break
    sleep 0.1
  done
  grep -q 'msg=model_data_listening' "$DIR/$n.log" ||
    { echo "$n never opened its data port"; tail -20 "$DIR/$n.log"; exit 1; }
done
src=$DIR/src
mkdir -p "$src"
echo '{"architectures": ["Valgrind"]}' >"$src/config.json"
head -c $((5 << 20)) /dev/urandom >"$src/model-00001-of-00002.safetensors"
head -c $((3 << 20)) /dev/urandom >"$src/model-00002-of-00002.safetensors"
want() { # JSON-FIELD VALUE: the last push's answer has it
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); v=d[sys.argv[2]]; sys.exit(0 if str(v)==sys.argv[3] else "%s is %r, not %s" % (sys.argv[2], v, sys.argv[3]))' "$DIR/push.json" "$1" "$2"
}
written() { python3 -c 'import json,sys; print(sum(n["bytes_written"] for n in json.load(open(sys.argv[1]))["nodes"]))' "$DIR/push.json"; }
ctl h model push "$src" --nodes w1,w2 --name vgm -o json >"$DIR/push.json"
want complete True
[ "$(written)" -gt 0 ]
ctl h model push "$src" --nodes w1,w2 --name vgm -o json >"$DIR/push.json"
want complete True
[ "$(written)" = 0 ] || { echo "a second push moved $(written) bytes"; exit 1; }
# w2's copy damaged on disk: verify says so, the next push mends it
f=$DIR/w2/models/vgm/model-00002-of-00002.safetensors
printf '\377' | dd of="$f" bs=1 seek=1000 conv=notrunc status=none
if ctl w2 model verify vgm >/dev/null 2>&1; then echo "verify missed the damage"; exit 1; fi
ctl h model push "$src" --nodes w1,w2 --name vgm -o json >"$DIR/push.json"
want complete True
ctl w2 model verify vgm >/dev/null
ctl w1 model ls >/dev/null
ctl h model rm vgm --nodes w1,w2 >/dev/null
sleep 1
finished=1
vg_finish "3 daemons through model push"

#!/usr/bin/env bash
# `model push` under a serving service (issue 28), end to end: a 3-ring
# simulated cluster with a real sparkd in every node; a small model
# (config.json + model.safetensors, f32, generated here) pushed from node 3
# to the group of nodes 1 and 2, served there by spark-decode with TP=2
# (`model: tiny`, a bare name: each node's store). What a user checks:
#   - the service serves the store's copy, though the directory serve ran
#     from holds a folder named tiny with other weights;
#   - a new version of the same size pushed while it serves: the push is
#     complete, names the service and says how to move it; the same prompt
#     gets the same greedy answer as before, from the same run and processes;
#   - a shorter new version: the same, and no rank killed by SIGBUS;
#   - `svc show` names the store copy on each node and its version, and
#     after the push that the run started before the copy changed;
#   - `svc restart`: the new run answers as the last version does when
#     spark-decode runs it directly.
set -euo pipefail
S=${SPARK_SOURCE_DIR:?}
# shellcheck source=tests/integration/serve/serve_lib.sh
. "$S/tests/integration/serve/serve_lib.sh"
sl_init serve-push
command -v python3 >/dev/null || { echo "SKIP: python3 is not installed"; exit 77; }

# gen DIR SEED PAD: a Llama-shaped model of random f32 weights (seeded); PAD
# spaces in the safetensors header move every tensor (a different size)
gen() {
  python3 "$S/scripts/llama_model.py" "$1" '{"hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "vocab_size": 512}' --seed "$2" --pad "$3" --scale 3
}
# direct DIR: the greedy ids of plain spark-decode on that model
direct() {
  "$DEC" --model "$1" --prompt 7,3 --tokens 24 -o json |
    python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin)['generated']))"
}
gen "$DIR/v1" 1 200000
gen "$DIR/v2" 2 200000
gen "$DIR/v3" 3 0
mkdir -p "$DIR/work"
gen "$DIR/work/tiny" 4 0 # what the directory serve runs from holds under that name
chmod -R a+rX "$DIR"
for v in v1 v2 v3 work/tiny; do direct "$DIR/$v" >"$DIR/${v#work/}.direct"; done
[ "$(stat -c %s "$DIR/v1/model.safetensors")" = "$(stat -c %s "$DIR/v2/model.safetensors")" ] &&
  [ "$(stat -c %s "$DIR/v3/model.safetensors")" -lt "$(stat -c %s "$DIR/v1/model.safetensors")" ] ||
  die "the versions' sizes"
[ "$(sort -u "$DIR"/v1.direct "$DIR"/v2.direct "$DIR"/v3.direct "$DIR"/tiny.direct | wc -l)" = 4 ] ||
  die "two versions give the same greedy answer: $(cat "$DIR"/*.direct)"
ok "four models made: v2 the size of v1, v3 shorter, ./tiny another; each greedy answer differs"

sl_cluster 3 ring
ctl 1 group create g2 --nodes "$P-1,$P-2" >/dev/null || die "group g2"
# push VERSION [ARGS]: from node 3 to g2, as tiny; the answer in $DIR/push.out
push() {
  local v=$1
  shift
  ctl 3 model push "$DIR/$v" --name tiny --group g2 "$@" >"$DIR/push.out" 2>"$DIR/push.err" ||
    die "push $v: $(cat "$DIR/push.out" "$DIR/push.err")"
}
push v1 -o json
cd "$DIR/work"
ctl 1 serve spark-decode --group g2 --name web --set model=tiny --set memory=1 \
  --set health.interval=10m --set restart.backoff=1s -o json >"$DIR/serve.json" ||
  die "serve: $(cat "$DIR/serve.json")"
cd "$DIR"
wait_state web ready 60 || die "web is $(svc_field web 'd["state"], d["last_error"]'), not ready"
URL=$(svc_field web 'd["endpoint"]["url"]')
RUN=$(svc_field web 'd["run"]')
PIDS="$(decode_pids 1) $(decode_pids 2)"
[ "$(wc -w <<<"$PIDS")" = 2 ] || die "spark-decode ranks: '$PIDS'"
# greedy: the served greedy ids of the same prompt as direct()
greedy() {
  local code
  code=$(in_ns 3 curl -s -m 30 -o "$DIR/body" -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary '{"prompt":[7,3],"max_tokens":24}' "$URL/v1/completions" || true)
  [ "$code" = 200 ] || die "completion: $code $(cat "$DIR/body")"
  python3 -c "import json; print(json.dumps(json.load(open('$DIR/body'))['choices'][0]['token_ids']))"
}
[ "$(greedy)" = "$(cat "$DIR/v1.direct")" ] ||
  die "web answers $(greedy), not as v1 ($(cat "$DIR/v1.direct")); ./tiny gives $(cat "$DIR/tiny.direct")"
# copy_field EXPR: EXPR over c = svc show's model_copy
copy_field() { svc_field web "(lambda c: ($1))(d['model_copy'])"; }
ver1=$(ctl 1 model ls --node "$P-1" -o json | jq_py '[m["version"] for m in d["nodes"][0]["models"] if m["name"] == "tiny"][0]')
[ "$(copy_field "c['source'], [(n['node'], n['path'].endswith('/tiny'), n['version'], n['run_started_before']) for n in c['nodes']]")" = \
  "('store', [('$P-1', True, '$ver1', False), ('$P-2', True, '$ver1', False)])" ] ||
  die "svc show's model_copy: $(svc_field web 'd.get("model_copy")') (version $ver1)"
ok "web serves the store's copy of tiny (v1's answer), not ./tiny of the directory serve ran from; svc show names that copy and version $ver1"

# same_run WHAT: the service still ready on the run and processes it started with
same_run() {
  [ "$(svc_field web "d['state'] == 'ready' and d['run'] == $RUN and d['restarts'] == 0")" = True ] ||
    die "$1: web is $(svc_field web 'd["state"], d["run"], d["restarts"], d["last_error"]') (run was $RUN)"
  local p
  for p in $PIDS; do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = spark-decode ] || die "$1: rank process $p is gone"
  done
  ! grep -rqs 'Bus error\|SIGBUS\|signal 7' "/run/sparkctl-sim/$P" || die "$1: a SIGBUS in the logs"
}
push v2 -o json
python3 - "$DIR/push.out" "$P" <<'PY' || die "push v2: $(cat "$DIR/push.out")"
import json, sys
d = json.load(open(sys.argv[1])); p = sys.argv[2]
assert d["complete"] is True, d
assert all(n["chunks_written"] > 0 for n in d["nodes"]), d["nodes"]
old = d["services_on_old_version"]
assert [(s["name"], sorted(s["nodes"])) for s in old] == [("web", [p + "-1", p + "-2"])], old
PY
[ "$(greedy)" = "$(cat "$DIR/v1.direct")" ] || die "after v2 (same size) web answers $(greedy), not v1's"
same_run "after v2"
cmp -s "$DIR/v2/model.safetensors" "$(ctl 1 model ls --node "$P-1" -o json | jq_py 'd["nodes"][0]["dir"]')/tiny/model.safetensors" ||
  die "node 1's store does not hold v2"
[ "$(copy_field "[(n['version'] != '$ver1', n['run_started_before']) for n in c['nodes']]")" = "[(True, True), (True, True)]" ] ||
  die "svc show after v2: $(svc_field web 'd.get("model_copy")')"
ctl 1 svc show web >"$DIR/show.txt" || die "svc show"
grep -q "changed after the run started: the run serves the version before" "$DIR/show.txt" &&
  grep -q "'sparkctl svc restart web' moves it" "$DIR/show.txt" || die "svc show: $(cat "$DIR/show.txt")"
ok "v2 (same size) pushed under web: complete, names web on both nodes in JSON, web answers as before on run $RUN; svc show says the run serves the version before"

push v3
grep -q "^Service web still serves the version of tiny it started with on $P-1, $P-2 .*'sparkctl svc restart web'" \
  "$DIR/push.out" || die "push v3 does not name web: $(cat "$DIR/push.out")"
[ "$(greedy)" = "$(cat "$DIR/v1.direct")" ] || die "after v3 (shorter) web answers $(greedy), not v1's"
same_run "after v3"
ok "v3 (shorter) pushed under web: the text names web and 'sparkctl svc restart web'; same answer, same run, no SIGBUS"

# a push that moves nothing names nobody
push v3 -o json
[ "$(jq_py 'd["services_on_old_version"]' <"$DIR/push.out")" = "[]" ] || die "again: $(cat "$DIR/push.out")"

ctl 1 svc restart web >/dev/null || die "svc restart"
wait_state web ready 60 "d['run'] != $RUN" || die "web after restart: $(svc_field web 'd["state"], d["run"], d["last_error"]')"
[ "$(greedy)" = "$(cat "$DIR/v3.direct")" ] || die "after svc restart web answers $(greedy), not v3's ($(cat "$DIR/v3.direct"))"
[ "$(copy_field "[n['run_started_before'] for n in c['nodes']]")" = "[False, False]" ] ||
  die "svc show after the restart: $(svc_field web 'd.get("model_copy")')"
ok "svc restart: run $(svc_field web 'd["run"]') answers as v3 and holds the current copy; a push that moved nothing named no service"

[ "$(ctl 1 svc stop web -o json | jq_py 'd["state"]')" = stopped ] || die "svc stop"
sl_no_sanitizer_report
echo "$pass passed"

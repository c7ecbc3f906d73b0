#!/usr/bin/env bash
# spark-decode served as a cluster service (issue 19), end to end: a 4-ring
# simulated cluster with a real sparkd in every node; `sparkctl serve
# spark-decode` (the built-in recipe) with TP=2 on a group of 2 and TP=1 on a
# group of 1. What a user checks:
#   - both reach `ready`, with the endpoint and the served model id, though
#     their health interval is 10 minutes: until the first healthy answer
#     rank 0's node checks every 250 ms (the first check, at once, finds
#     nothing listening yet);
#   - from another node's namespace, curl and the official openai npm client
#     (7.59.0 from /var/cache/sparkctl-npm/router, as test_decode_serve.sh;
#     skipped without node or that cache) get answers, streamed and not; the
#     same tokens and text from TP=2 and TP=1 for the same seed, and greedy
#     ids equal to plain `spark-decode` run directly;
#   - kill -9 of rank 1's spark-decode: `restarting`, then `ready` on a new
#     run, and it answers the same again;
#   - `svc stop`: `stopped`, and no spark-decode process is left on any node.
set -euo pipefail
S=${SPARK_SOURCE_DIR:?}
# shellcheck source=tests/integration/serve/serve_lib.sh
. "$S/tests/integration/serve/serve_lib.sh"
sl_init serve-decode
sl_cluster 4 ring
ctl 1 group create g2 --size 2 >/dev/null || die "group g2"
ctl 1 group create g1 --size 1 >/dev/null || die "group g1"
# a 1 s back-off, so that a restart takes seconds; a health interval that
# only the start-up polling lets a test see `ready` under
FAST=(--set health.interval=10m --set restart.backoff=1s)
t0=$(date +%s.%N)
for s in tp2:g2 tp1:g1; do
  ctl 1 serve spark-decode --group "${s#*:}" --name "${s%:*}" "${FAST[@]}" -o json >"$DIR/serve-${s%:*}.json" ||
    die "serve ${s%:*}: $(cat "$DIR/serve-${s%:*}.json")"
done
wait_state tp2 ready 60 || die "tp2 is $(svc_field tp2 'd["state"], d["last_error"]'), not ready"
t1=$(date +%s.%N)
wait_state tp1 ready 60 || die "tp1 is $(svc_field tp1 'd["state"], d["last_error"]'), not ready"
[ "$(svc_field tp2 'd["runtime"], d["endpoint"]["models"], [n["node"] for n in d["nodes"]]')" = \
  "spark-decode ['tp2'] ['$P-1', '$P-2']" ] || die "tp2: $(svc_field tp2 'd')"
[ "$(svc_field tp1 'd["endpoint"]["models"], len(d["nodes"])')" = "['tp1'] 1" ] || die "tp1: $(svc_field tp1 'd')"
ok "serve spark-decode: TP=2 on g2 and TP=1 on g1 ready ($(python3 -c "print('%.1f' % ($t1 - $t0))") s to tp2 ready with a 10 min health interval), endpoint models tp2 / tp1"

URL2=$(svc_field tp2 'd["endpoint"]["url"]')
URL1=$(svc_field tp1 'd["endpoint"]["url"]')
case "$URL2$URL1" in http://169.254.*:8000http://169.254.*:8000) ;; *) die "endpoints $URL2 $URL1" ;; esac
# req URL PATH [BODY]: from node 4 (in no group); the status, the body in $DIR/body
req() {
  local data=()
  [ $# -ge 3 ] && data=(-H 'Content-Type: application/json' --data-binary "$3")
  in_ns 4 curl -s -m 30 -o "$DIR/body" -w '%{http_code}' ${data[@]+"${data[@]}"} "$1$2" || true
}
js() { python3 -c "import json; d=json.load(open('$DIR/body')); print($1)"; }
# sse: the text of the event stream in $DIR/body (ends with data: [DONE]), and
# how many chunks carried it (more than one; how many depends on timing: a
# chunk may carry several tokens)
sse() {
  python3 - "$DIR/body" <<'PYEOF'
import json, sys
raw = open(sys.argv[1]).read()
ev = [e for e in raw.split('\n\n') if e]
assert ev[-1] == 'data: [DONE]', 'no [DONE] at the end: %r' % ev[-1:]
text = ''
for e in ev[:-1]:
    assert e.startswith('data: '), e
    for ch in json.loads(e[6:])['choices']:
        text += ch['delta'].get('content') or '' if 'delta' in ch else ch['text']
assert len(ev) - 1 >= 2, '%d chunk(s)' % (len(ev) - 1)
print(json.dumps(text))
PYEOF
}
# ask NAME URL: the answers to the same requests in $DIR/NAME.*
ask() {
  local m=$1 u=$2
  [ "$(req "$u" /health)" = 200 ] && [ "$(js 'd["status"]')" = ok ] || die "$m /health: $(cat "$DIR/body")"
  [ "$(req "$u" /v1/models)" = 200 ] && [ "$(js 'd["data"][0]["id"]')" = "$m" ] || die "$m /v1/models"
  [ "$(req "$u" /v1/completions '{"prompt":[7,3],"max_tokens":32}')" = 200 ] || die "$m greedy: $(cat "$DIR/body")"
  js 'json.dumps(d["choices"][0]["token_ids"])' >"$DIR/$m.greedy"
  local sampled='{"model":"'$m'","prompt":"Hello","max_tokens":24,"temperature":0.9,"seed":7}'
  [ "$(req "$u" /v1/completions "$sampled")" = 200 ] || die "$m sampled: $(cat "$DIR/body")"
  js 'json.dumps(d["choices"][0]["text"])' >"$DIR/$m.sampled"
  local chat='{"model":"'$m'","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"max_tokens":16,"seed":3,"temperature":0.5}'
  [ "$(req "$u" /v1/chat/completions "$chat")" = 200 ] || die "$m chat: $(cat "$DIR/body")"
  js 'json.dumps([d["choices"][0]["message"]["content"], d["usage"]["prompt_tokens"]])' >"$DIR/$m.chat"
  [ "$(req "$u" /v1/completions "${sampled%\}},\"stream\":true}")" = 200 ] || die "$m stream"
  sse >"$DIR/$m.stream" || die "$m stream: $(head -c 300 "$DIR/body")"
  [ "$(req "$u" /v1/chat/completions "${chat%\}},\"stream\":true}")" = 200 ] || die "$m chat stream"
  sse >"$DIR/$m.cstream" || die "$m chat stream: $(head -c 300 "$DIR/body")"
}
ask tp2 "$URL2"
ask tp1 "$URL1"
"$DEC" --synthetic tiny --prompt 7,3 --tokens 32 -o json |
  python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin)['generated']))" >"$DIR/direct.greedy"
cmp -s "$DIR/tp2.greedy" "$DIR/direct.greedy" ||
  die "TP=2 greedy $(cat "$DIR/tp2.greedy") != spark-decode $(cat "$DIR/direct.greedy")"
for f in greedy sampled chat stream cstream; do
  cmp -s "$DIR/tp2.$f" "$DIR/tp1.$f" || die "$f differs: TP=2 $(cat "$DIR/tp2.$f") TP=1 $(cat "$DIR/tp1.$f")"
done
python3 - "$DIR" <<'EOF' || die "streamed text is not the text of the same request unstreamed"
import json, sys
d = sys.argv[1]
text = json.load(open(d + '/tp2.stream'))
assert text == json.load(open(d + '/tp2.sampled')), text
ctext = json.load(open(d + '/tp2.cstream'))
assert ctext == json.load(open(d + '/tp2.chat'))[0], ctext
EOF
ok "curl from node 4: TP=2 and TP=1 give the same tokens and text (greedy = plain spark-decode, seed 7 at T=0.9, chat), streamed and not"

MOD=${SPARK_NPM_CACHE:-/var/cache/sparkctl-npm}/router
if command -v node >/dev/null && [ -f "$MOD/node_modules/openai/package.json" ]; then
  python3 -c "
import json; c, pt = json.load(open('$DIR/tp2.chat'))
json.dump({'completion': json.load(open('$DIR/tp2.sampled')), 'chat': c, 'chat_prompt_tokens': pt},
          open('$DIR/expect.json', 'w'))"
  in_ns 4 node "$S/tests/integration/decode/openai_decode.js" 0 "$MOD" "$DIR/expect.json" "$URL2/v1" tp2 \
    >"$DIR/client.out" 2>"$DIR/client.log" || die "openai client: $(cat "$DIR/client.out" "$DIR/client.log")"
  ok "the openai npm client from node 4 against tp2: models, completions, chat, both streamed, typed errors ($(grep -c '^ok' "$DIR/client.out") checks)"
else
  echo "# skipped: the openai npm client (no node, or nothing in $MOD: run tests/integration/decode/test_decode_serve.sh once)"
fi

# kill -9 rank 1 (node 2): the whole service restarts, and answers the same
run1=$(svc_field tp2 'd["run"]')
victim=$(decode_pids 2)
[ -n "$victim" ] && [ "$(wc -w <<<"$victim")" = 1 ] || die "rank 1's spark-decode in $P-2: '$victim'"
old0=$(decode_pids 1)
# svc watch sees every change of state (polling svc show can miss a short
# `restarting` on a busy machine)
ctl 1 svc watch -o json >"$DIR/watch.json" 2>"$DIR/watch.err" &
wpid=$!
pids+=("$wpid")
for _ in $(seq 100); do [ -s "$DIR/watch.json" ] && break; sleep 0.1; done
[ -s "$DIR/watch.json" ] || die "svc watch printed no snapshot: $(cat "$DIR/watch.err")"
kill -9 "$victim"
deadline=$((SECONDS + 30))
while [ $SECONDS -lt $deadline ]; do
  [ "$(svc_field tp2 "d['state'] == 'ready' and d['run'] > $run1")" = True ] && break
  sleep 0.1
done
kill "$wpid" 2>/dev/null || true
wait "$wpid" 2>/dev/null || true
# tp2's states in the watch, changes only, as STATE/RUN (RUN: "old" for the
# crashed run, "new" for a later one, "-" for none)
seen=$(python3 - "$DIR/watch.json" "$run1" <<'PYEOF'
import json, sys
out, last = [], None
for line in open(sys.argv[1]):
    for s in json.loads(line).get("services", []):
        if s.get("name") != "tp2":
            continue
        run = s.get("run")
        tok = "%s/%s" % (s["state"], "-" if not run else "old" if run == int(sys.argv[2]) else "new")
        if tok != last:
            out.append(tok)
            last = tok
print(",".join(out))
PYEOF
)
[ "$(svc_field tp2 "d['state'] == 'ready' and d['run'] > $run1 and d['restarts'] == 1")" = True ] ||
  die "tp2 after kill -9: $(svc_field tp2 'd["state"], d["run"], d["restarts"], d["last_error"]') (seen $seen)"
# the crashed run may be seen unhealthy before its end reaches the head (and
# flap on a slow check); then restarting, and ready on the new run; never a
# state of the crashed run after restarting
grep -Eq '^ready/old,((unhealthy|ready)/old,)*restarting/(old|-),(starting/(old|-),)?starting/new,ready/new(,(unhealthy|ready)/new)*$' <<<"$seen" ||
  die "tp2's states after kill -9 of rank 1: $seen"
for p in $old0; do [ ! -d "/proc/$p" ] || [ "$(cat "/proc/$p/comm" 2>/dev/null)" != spark-decode ] ||
  die "rank 0 ($p) of the crashed run is still alive"; done
[ "$(req "$URL2" /v1/completions '{"prompt":[7,3],"max_tokens":32}')" = 200 ] || die "tp2 after the restart"
js 'json.dumps(d["choices"][0]["token_ids"])' | cmp -s - "$DIR/direct.greedy" || die "tp2 answers otherwise after the restart"
ok "kill -9 of rank 1: $seen on run $(svc_field tp2 'd["run"]') (was $run1), the same greedy tokens again"

# stop: nothing left
for s in tp2 tp1; do
  [ "$(ctl 1 svc stop "$s" -o json | jq_py 'd["state"]')" = stopped ] || die "svc stop $s"
done
for k in 1 2 3 4; do
  left=$(decode_pids "$k")
  [ -z "$left" ] || die "spark-decode still runs in $P-$k after svc stop: $left"
done
[ "$(req "$URL2" /health)" = 000 ] || die "tp2's endpoint still answers after svc stop"
ok "svc stop: both stopped, no spark-decode process left on any of the 4 nodes"
sl_no_sanitizer_report
echo "$pass passed"

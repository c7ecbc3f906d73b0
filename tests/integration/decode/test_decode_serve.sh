#!/usr/bin/env bash
# spark-decode --serve over real HTTP on loopback: TP=1 and TP=2 (--local 2,
# two ranks over libsparkcoll) servers of the tiny synthetic shape, asked with
# curl and with the official openai npm client (installed once into
# /var/cache/sparkctl-npm/router, as the router's test does; that part skips
# without node/npm or a registry). Checks: the same tokens and text from TP=1,
# TP=2 and plain spark-decode for the same seed; SSE streams; errors (400, 404,
# 405, 413); --eos; the queue bound (429); SIGTERM draining (the running
# request completes, queued and new ones get 503, every rank exits 0).
set -euo pipefail
B=${SPARK_BUILD_DIR:?}
S=${SPARK_SOURCE_DIR:?}
HERE=$S/tests/integration/decode
DEC=$B/runtime/decode/spark-decode
PY=/usr/bin/python3
command -v curl >/dev/null || { echo "SKIP: curl not installed"; exit 77; }
DIR=$(mktemp -d /tmp/spark-decode-serve-XXXXXX)
pids=()
cleanup() {
  for p in ${pids[@]+"${pids[@]}"}; do kill -TERM "$p" 2>/dev/null || true; done
  sleep 0.5
  for p in ${pids[@]+"${pids[@]}"}; do
    pkill -9 -P "$p" 2>/dev/null || true
    kill -9 "$p" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  rm -rf "$DIR"
}
trap cleanup EXIT
die() { echo "FAIL: $*" >&2; tail -n 20 "$DIR"/*.log >&2 || true; exit 1; }
n=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }

# start NAME ARGS...: a server in the background; sets PID_NAME and PORT_NAME
start() {
  local name=$1; shift
  "$DEC" --synthetic tiny --serve --host 127.0.0.1 --port 0 "$@" 2>"$DIR/$name.log" &
  local pid=$!
  pids+=("$pid")
  for _ in $(seq 300); do
    grep -q 'msg=serve_ready' "$DIR/$name.log" && break
    kill -0 "$pid" 2>/dev/null || die "$name exited before ready"
    sleep 0.1
  done
  grep -q 'msg=serve_ready' "$DIR/$name.log" || die "$name not ready in 30 s"
  printf -v "PID_$name" %s "$pid"
  printf -v "PORT_$name" %s "$(sed -n 's/.*msg=serve_listen.* port=\([0-9]*\).*/\1/p' "$DIR/$name.log")"
}
# req PORT METHOD PATH [BODY]: the status on stdout, the body in $DIR/body, headers in $DIR/hdr
req() {
  local data=()
  [ $# -ge 4 ] && data=(-H 'Content-Type: application/json' --data-binary "$4")
  curl -s -X "$2" -D "$DIR/hdr" -o "$DIR/body" -w '%{http_code}' ${data[@]+"${data[@]}"} \
    "http://127.0.0.1:$1$3"
}
# js EXPR: evaluate a Python expression over d = the last JSON body
js() { "$PY" -c "import json,sys; d=json.load(open('$DIR/body')); print($1)"; }
# sse FILE: check an event stream and print {"text","ids","finish","usage","chunks"}
sse() {
  "$PY" - "$1" <<'PYEOF'
import json, sys
raw = open(sys.argv[1], 'rb').read().decode('utf-8')
assert raw.endswith('\n\n'), 'stream does not end with a blank line'
events = raw[:-2].split('\n\n')
assert all(e.startswith('data: ') for e in events), 'an event is not "data: ..."'
assert events[-1] == 'data: [DONE]', 'no [DONE] at the end: %r' % events[-1]
text, ids, finish, usage = '', [], None, None
for e in events[:-1]:
    c = json.loads(e[6:])
    if c.get('usage'):
        usage = c['usage']
    for ch in c['choices']:
        if 'delta' in ch:
            text += ch['delta'].get('content') or ''
        else:
            text += ch['text']
            ids += ch['token_ids']
        finish = ch['finish_reason'] or finish
print(json.dumps({'text': text, 'ids': ids, 'finish': finish, 'usage': usage, 'chunks': len(events) - 1}))
PYEOF
}

start tp1
start tp2 --local 2
for s in tp1 tp2; do
  p=PORT_$s
  [ "$(req "${!p}" GET /health)" = 200 ] && [ "$(js 'd["status"]')" = ok ] || die "$s health"
  [ "$(req "${!p}" GET /v1/models)" = 200 ] && [ "$(js 'd["data"][0]["id"]')" = synthetic:tiny ] ||
    die "$s models"
done
ok "health 200 and /v1/models on TP=1 and TP=2"

# the same requests on both: greedy ids, seeded sampling, chat
GREEDY='{"prompt":[7,3],"max_tokens":32}'
SAMPLED='{"model":"synthetic:tiny","prompt":"Hello","max_tokens":24,"temperature":0.9,"seed":7}'
CHAT='{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"max_tokens":16,"seed":3,"temperature":0.5}'
for s in tp1 tp2; do
  p=PORT_$s
  [ "$(req "${!p}" POST /v1/completions "$GREEDY")" = 200 ] || die "$s greedy: $(cat "$DIR/body")"
  js 'json.dumps(d["choices"][0]["token_ids"])' >"$DIR/$s.greedy"
  [ "$(js 'd["usage"]["total_tokens"]')" = 34 ] || die "$s usage"
  [ "$(req "${!p}" POST /v1/completions "$SAMPLED")" = 200 ] || die "$s sampled"
  js 'json.dumps([d["choices"][0]["text"], d["choices"][0]["token_ids"]])' >"$DIR/$s.sampled"
  [ "$(req "${!p}" POST /v1/chat/completions "$CHAT")" = 200 ] || die "$s chat"
  js 'json.dumps([d["choices"][0]["message"]["content"], d["usage"]["prompt_tokens"]])' >"$DIR/$s.chat"
done
"$DEC" --synthetic tiny --prompt 7,3 --tokens 32 -o json >"$DIR/direct.json"
"$PY" -c "import json; print(json.dumps(json.load(open('$DIR/direct.json'))['generated']))" >"$DIR/direct.greedy"
cmp -s "$DIR/tp1.greedy" "$DIR/direct.greedy" || die "TP=1 greedy $(cat "$DIR/tp1.greedy") != spark-decode $(cat "$DIR/direct.greedy")"
cmp -s "$DIR/tp1.greedy" "$DIR/tp2.greedy" || die "greedy differs: TP=1 $(cat "$DIR/tp1.greedy") TP=2 $(cat "$DIR/tp2.greedy")"
cmp -s "$DIR/tp1.sampled" "$DIR/tp2.sampled" || die "seeded sampling differs between TP=1 and TP=2"
cmp -s "$DIR/tp1.chat" "$DIR/tp2.chat" || die "chat differs between TP=1 and TP=2"
"$PY" -c "
import json; a = json.load(open('$DIR/tp1.sampled'))[1]; g = json.load(open('$DIR/tp1.greedy'))
assert a != g[:24], 'temperature 0.9 gave the greedy tokens'"
ok "TP=1 and TP=2 give the same tokens and text (greedy = plain spark-decode; seed 7 at T=0.9; chat)"

# seeded sampling is reproducible; another seed gives other tokens
P=$PORT_tp2
req "$P" POST /v1/completions "$SAMPLED" >/dev/null
cmp -s <(js 'json.dumps([d["choices"][0]["text"], d["choices"][0]["token_ids"]])') "$DIR/tp1.sampled" ||
  die "the same seed gave another answer"
req "$P" POST /v1/completions "${SAMPLED/\"seed\":7/\"seed\":8}" >/dev/null
[ "$(js 'json.dumps([d["choices"][0]["text"], d["choices"][0]["token_ids"]])')" != "$(cat "$DIR/tp1.sampled")" ] ||
  die "seed 8 gave seed 7's answer"
ok "the same seed gives the same answer, another seed another"

# streams (TP=2): the same text as the plain answers, [DONE] at the end
curl -sN -H 'Content-Type: application/json' -D "$DIR/shdr" \
  --data-binary "${SAMPLED%\}},\"stream\":true}" "http://127.0.0.1:$P/v1/completions" >"$DIR/s1"
grep -qi '^content-type: text/event-stream' "$DIR/shdr" || die "stream content type"
sse "$DIR/s1" >"$DIR/s1.json"
"$PY" -c "
import json; s = json.load(open('$DIR/s1.json')); t, ids = json.load(open('$DIR/tp1.sampled'))
assert s['text'] == t and s['ids'] == ids, (s, t)
assert s['finish'] == 'length' and s['usage'] is None and s['chunks'] >= 2, s" || die "completion stream"
curl -sN -H 'Content-Type: application/json' \
  --data-binary "${CHAT%\}},\"stream\":true,\"stream_options\":{\"include_usage\":true}}" \
  "http://127.0.0.1:$P/v1/chat/completions" >"$DIR/s2"
sse "$DIR/s2" >"$DIR/s2.json"
"$PY" -c "
import json; s = json.load(open('$DIR/s2.json')); t, pt = json.load(open('$DIR/tp1.chat'))
assert s['text'] == t and s['finish'] == 'length', (s, t)
assert s['usage'] == {'prompt_tokens': pt, 'completion_tokens': 16, 'total_tokens': pt + 16}, s" ||
  die "chat stream"
ok "SSE streams: completions and chat (with include_usage) carry the same text, end with [DONE]"

# bad requests: OpenAI-style error objects, the server keeps serving
P=$PORT_tp1
check_err() { # STATUS CODE-OR-PARAM
  "$PY" -c "
import json; e = json.load(open('$DIR/body'))['error']
assert set(e) == {'message', 'type', 'param', 'code'} and e['message'], e
assert '$2' in (e['code'], e['param']), e" || die "error object for $2: $(cat "$DIR/body")"
}
[ "$(req "$P" POST /v1/completions '{"prompt": "x",')" = 400 ] && check_err 400 invalid_json || die "bad json"
grep -qi '^content-type: application/json' "$DIR/hdr" || die "error content type"
[ "$(req "$P" POST /v1/completions '{"prompt":"x","max_tokens":0}')" = 400 ] && check_err 400 max_tokens || die "max_tokens 0"
[ "$(req "$P" POST /v1/completions '{"prompt":"x","max_tokens":100000}')" = 400 ] && check_err 400 max_tokens || die "max_tokens cap"
[ "$(req "$P" POST /v1/completions '{"prompt":[1,5000]}')" = 400 ] && check_err 400 prompt || die "id outside the vocabulary"
[ "$(req "$P" POST /v1/chat/completions '{"messages":"hi"}')" = 400 ] && check_err 400 messages || die "messages"
[ "$(req "$P" POST /v1/completions '{"model":"gpt-4o","prompt":"x"}')" = 404 ] && check_err 404 model_not_found || die "model"
[ "$(req "$P" GET /v1/completions)" = 405 ] || die "405"
[ "$(req "$P" GET /v2/nothing)" = 404 ] || die "404"
head -c 2000000 /dev/zero | tr '\0' 'a' >"$DIR/big"
[ "$(curl -s -o "$DIR/body" -w '%{http_code}' -H 'Content-Type: application/json' \
     --data-binary @"$DIR/big" "http://127.0.0.1:$P/v1/completions")" = 413 ] || die "413"
[ "$(req "$P" GET /health)" = 200 ] || die "the server stopped after bad requests"
ok "400/404/405/413 with OpenAI error objects; the server still healthy"

# the official openai client (node), with curl's answers as the expectation
MOD=${SPARK_NPM_CACHE:-/var/cache/sparkctl-npm}/router
if command -v node >/dev/null && command -v npm >/dev/null; then
  if [ ! -f "$MOD/node_modules/openai/package.json" ]; then
    mkdir -p "$MOD"
    echo '{ "name": "sparkctl-router-test", "private": true, "dependencies": { "openai": "7.59.0" } }' >"$MOD/package.json"
    (cd "$MOD" && timeout 120 npm install --no-audit --no-fund >/dev/null 2>&1) || true
  fi
fi
if [ -f "$MOD/node_modules/openai/package.json" ]; then
  "$PY" -c "
import json; t = json.load(open('$DIR/tp1.sampled'))[0]; c, pt = json.load(open('$DIR/tp1.chat'))
json.dump({'completion': t, 'chat': c, 'chat_prompt_tokens': pt}, open('$DIR/expect.json', 'w'))"
  node "$HERE/openai_decode.js" "$PORT_tp2" "$MOD" "$DIR/expect.json" 2>"$DIR/client.log" ||
    die "openai client: $(cat "$DIR/client.log")"
  ok "the openai npm client: models, completions, chat, both streamed, typed errors (TP=2)"
else
  echo "# skipped: the openai npm client (no node/npm or no registry)"
fi

# --eos: a request stops after the end-of-sequence id, finish_reason "stop"
read -r EOS K < <("$PY" -c "
import json; g = json.load(open('$DIR/tp1.greedy')); print(g[5], g.index(g[5]))")
start eos --eos "$EOS" --queue 0 # --queue 0: the running request only
[ "$(req "$PORT_eos" POST /v1/completions "$GREEDY")" = 200 ] || die "eos request"
[ "$(js 'd["choices"][0]["finish_reason"]')" = stop ] || die "finish_reason with --eos"
[ "$(js 'd["usage"]["completion_tokens"]')" = $((K + 1)) ] || die "eos: $(cat "$DIR/body")"
[ "$(js 'd["choices"][0]["token_ids"][-1]')" = "$EOS" ] || die "eos is not the last token"
kill -TERM "$PID_eos"
wait "$PID_eos" || die "eos server exit"
ok "--eos $EOS: stopped after $((K + 1)) tokens with finish_reason stop (--queue 0 serves one at a time)"

# queue bound and draining (TP=2, --queue 1): R1 runs, R2 waits, R3 gets 429;
# SIGTERM: R1 completes, R2 and new requests get 503, every rank exits 0
start q --local 2 --queue 1 --max-tokens-cap 4000 --max-context 4096
P=$PORT_q
# 2000 tokens: about 1 s on an idle 2-core machine (attention grows with the
# position), several when loaded; the checks below need about 0.5 s of it
LONG='{"prompt":"a long one","max_tokens":2000}'
curl -s -o "$DIR/r1" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary "$LONG" \
  "http://127.0.0.1:$P/v1/completions" >"$DIR/r1.code" &
r1=$!
sleep 0.2
curl -s -o "$DIR/r2" -w '%{http_code}' -H 'Content-Type: application/json' \
  --data-binary '{"prompt":"second","max_tokens":4}' "http://127.0.0.1:$P/v1/completions" >"$DIR/r2.code" &
r2=$!
sleep 0.2
[ "$(req "$P" POST /v1/completions '{"prompt":"third","max_tokens":4}')" = 429 ] || die "no 429 with a full queue: $(cat "$DIR/body")"
check_err 429 rate_limit_exceeded
grep -qi '^retry-after: 1' "$DIR/hdr" || die "429 without Retry-After"
ok "a full queue (--queue 1) answers 429 rate_limit_exceeded with Retry-After"
kill -TERM "$PID_q"
for _ in $(seq 50); do # the drain starts when the signal thread has run
  [ "$(req "$P" GET /health)" = 503 ] && break
  sleep 0.02
done
[ "$(js 'd["status"]')" = draining ] || die "health while draining: $(cat "$DIR/body")"
[ "$(req "$P" POST /v1/completions '{"prompt":"late","max_tokens":4}')" = 503 ] && check_err 503 shutting_down ||
  die "a new request while draining: $(cat "$DIR/body")"
wait "$r1" "$r2" || true
[ "$(cat "$DIR/r1.code")" = 200 ] || die "the running request did not complete: $(cat "$DIR/r1")"
"$PY" -c "
import json; d = json.load(open('$DIR/r1')); assert d['usage']['completion_tokens'] == 2000, d['usage']" ||
  die "the running request was cut"
[ "$(cat "$DIR/r2.code")" = 503 ] || die "the queued request got $(cat "$DIR/r2.code")"
for _ in $(seq 100); do kill -0 "$PID_q" 2>/dev/null || break; sleep 0.1; done
wait "$PID_q" || die "the drained server exited $?"
pgrep -P "$PID_q" >/dev/null && die "ranks left after the drain"
ok "SIGTERM: the running request completed (2000 tokens), queued and new got 503, health 503, exit 0"

# job mode, as a recipe runs it: two processes joined by SPARK_RANK /
# SPARK_WORLD_SIZE / SPARK_PEERS, a collective timeout of 3 s and 4 s idle (the
# 1 s no-op keeps rank 1 in step), then SIGTERM to both as a supervisor does
read -r J0 J1 < <("$PY" -c "
import socket; s = [socket.socket() for _ in range(2)]
[x.bind(('127.0.0.1', 0)) for x in s]; print(*[x.getsockname()[1] for x in s]); [x.close() for x in s]")
PEERS="0=127.0.0.1:$J0,1=127.0.0.1:$J1"
SPARK_RANK=1 SPARK_WORLD_SIZE=2 SPARK_PEERS=$PEERS SPARK_COLL_TIMEOUT_MS=3000 \
  "$DEC" --synthetic tiny --serve 2>"$DIR/job1.log" &
JOB1=$!
pids+=("$JOB1")
export SPARK_RANK=0 SPARK_WORLD_SIZE=2 SPARK_PEERS=$PEERS SPARK_COLL_TIMEOUT_MS=3000
start job0
unset SPARK_RANK SPARK_WORLD_SIZE SPARK_PEERS SPARK_COLL_TIMEOUT_MS
sleep 4
[ "$(req "$PORT_job0" POST /v1/completions "$GREEDY")" = 200 ] || die "job mode after 4 s idle: $(cat "$DIR/body")"
cmp -s <(js 'json.dumps(d["choices"][0]["token_ids"])') "$DIR/tp1.greedy" || die "job mode: other tokens"
kill -TERM "$PID_job0" "$JOB1"
wait "$PID_job0" || die "job rank 0 exit status"
wait "$JOB1" || die "job rank 1 exit status"
ok "job mode (SPARK_PEERS, two processes): the same tokens after 4 s idle with a 3 s collective timeout; both ranks exit 0 on SIGTERM"

for s in tp1 tp2; do
  p=PID_$s
  kill -TERM "${!p}"
  wait "${!p}" || die "$s exit status after SIGTERM"
done
ok "TP=1 and TP=2 servers exit 0 on SIGTERM"
echo "$n passed"

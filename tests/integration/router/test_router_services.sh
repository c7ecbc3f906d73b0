#!/usr/bin/env bash
# spark-router with service targets, over real HTTP on loopback: a fake sparkd
# (fake_sparkd.js: the control socket's framing and the svc_watch stream of
# the services contract) tells it which services are ready and where, and two
# fake OpenAI-compatible upstreams (fake_upstream.js) play the services' model
# servers. Checks what a user would: a ready service takes requests at its
# endpoint with its own model name; a service that stops leaves routing (its
# route's fallbacks answer, else 503) and comes back when ready; losing sparkd
# keeps routing by the last snapshot for services_grace_s (a sparkd restart
# takes no route down), then makes service targets unusable until the router
# has reconnected by itself; hostile frames (bad JSON, an oversized frame)
# cost a reconnect and the snapshot, nothing more;
# /v1/models lists the services' models; decisions say the state; the
# context-length fallback skips targets whose context is no larger; the pid
# file and SIGHUP through `sparkctl route reload`.
set -euo pipefail
B=${SPARK_BUILD_DIR:?}
S=${SPARK_SOURCE_DIR:?}
ROUTER=$B/router/spark-router
SPARKCTL=$B/cli/sparkctl
FAKED=$S/tests/integration/router/fake_sparkd.js
command -v node >/dev/null || { echo "SKIP: node is not installed (scripts/deps.sh --test)"; exit 77; }
command -v curl >/dev/null || { echo "SKIP: curl is not installed"; exit 77; }
# shellcheck source=lib.sh
. "$S/tests/integration/router/lib.sh"
router_lib_init svc
start_fake a
start_fake b
SOCK=$DIR/sparkd.sock
STATE=$DIR/services.json
services() { # JSON of the services array -> the fake sparkd's next snapshot
  printf '{"services": %s}' "$1" >"$STATE.tmp" && mv "$STATE.tmp" "$STATE"
}
qwen() { # STATE [OWNER] -> one service record in the contract's shape
  printf '{"name":"qwen","owner":"%s","group":"g1","state":"%s","runtime":"vllm","model":"Qwen/Qwen3-8B","run":3,
    "endpoint":{"url":"http://127.0.0.1:%s","management_url":"http://127.0.0.1:%s","models":["qwen3-8b"]},
    "max_context":32768,"updated_at":"2026-12-02T00:00:00Z"}' "${2:-root}" "$1" "$PORT_b" "$PORT_a"
}
services "[$(qwen ready)]"
node "$FAKED" "$SOCK" "$STATE" >"$DIR/sparkd.out" 2>"$DIR/sparkd.log" &
pids+=($!)
wait_for 5 grep -q READY "$DIR/sparkd.out" || die "fake sparkd did not start"

cat >"$DIR/policy.yaml" <<EOF
services_grace_s: 8
targets:
  pool:   {service: qwen}
  poolm:  {service: qwen, network: management}
  other:  {service: nosuch}
  a:      {url: 'http://127.0.0.1:$PORT_a/v1'}
  c8k:    {url: 'http://127.0.0.1:$PORT_a/v1', model: ctxlen, max_context: 8192}
  c4k:    {url: 'http://127.0.0.1:$PORT_a/v1', model: ctxlen, max_context: 4096}
  c128k:  {url: 'http://127.0.0.1:$PORT_b/v1', max_context: 131072}
routes:
  svc:      {type: passthrough, target: pool, fallbacks: [a]}
  svconly:  {type: passthrough, target: pool}
  wsvc:     {type: weighted, targets: [pool, a]}
  mgmt:     {type: passthrough, target: poolm}
  absent:   {type: passthrough, target: other}
  ctx:      {type: passthrough, target: c8k, fallbacks: [c4k, c128k]}
  ctxsmall: {type: passthrough, target: c8k, fallbacks: [c4k]}
  ctxsvc:   {type: passthrough, target: c8k, fallbacks: [c4k, pool]}
EOF
"$ROUTER" --policy "$DIR/policy.yaml" --socket "$SOCK" --check >"$DIR/check.out" || die "--check refused the policy"
grep -q "through sparkd on $SOCK" "$DIR/check.out" || die "--check: $(cat "$DIR/check.out")"
ok "--check names the control socket service targets come from"

[ -x "$SPARKCTL" ] || die "no sparkctl in the build"
"$SPARKCTL" --socket "$SOCK" route check "$DIR/policy.yaml" >"$DIR/rcheck.out" || die "route check refused the policy"
grep -q "^pool  *service  *qwen  *fabric  *root" "$DIR/rcheck.out" && grep -q "through sparkd on $SOCK" "$DIR/rcheck.out" ||
  die "route check: $(cat "$DIR/rcheck.out")"
printf 'targets:\n  a: {service: q, network: wifi}\n' >"$DIR/bad.yaml"
if "$SPARKCTL" route check "$DIR/bad.yaml" 2>"$DIR/rcheck.err"; then die "route check accepted a bad policy"; fi
grep -q "bad.yaml:2:28: targets.a.network: expected fabric or management" "$DIR/rcheck.err" || die "route check error: $(cat "$DIR/rcheck.err")"
ok "sparkctl route check: the targets and routes of a policy, or the error's FILE:LINE:COL (exit 1)"

# started through sparkctl, which execs spark-router: the pid is the router's
"$SPARKCTL" --socket "$SOCK" route serve --policy "$DIR/policy.yaml" --listen 127.0.0.1:0 \
  --pid-file "$DIR/router.pid" 2>"$DIR/router.log" &
RPID=$!
pids+=($RPID)
wait_for 5 grep -q 'msg=router_listen' "$DIR/router.log" || die "router did not start"
RPORT=$(sed -n 's/.*msg=router_listen.* port=\([0-9]*\).*/\1/p' "$DIR/router.log")
U=http://127.0.0.1:$RPORT
chat() { # MODEL TEXT -> status; body in $DIR/body, headers in $DIR/hdrs
  curl -sS -o "$DIR/body" -D "$DIR/hdrs" -w '%{http_code}' "$U/v1/chat/completions" \
    -H 'content-type: application/json' \
    -d "{\"model\":\"$1\",\"messages\":[{\"role\":\"user\",\"content\":\"$2\"}]}"
}
hdr() { sed -n "s/^$1: *\\(.*\\)\\r\$/\\1/Ip" "$DIR/hdrs"; }
stat_of() { curl -sS "http://127.0.0.1:$1/stats" | sed -n "s/.*\"$2\":\"\\{0,1\\}\\([^,\"]*\\).*/\\1/p"; }
decision() { curl -sS "$U/v1/decision" -d "{\"model\":\"$1\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"; }
usable() { local d; d=$(decision "$1"); grep -q "\"resolvable\":$2" <<<"$d"; }
metric() { local m; m=$(curl -sS "$U/metrics"); grep -qF "$1" <<<"$m"; } # grep -q on a pipe: curl's (23)

wait_for 5 grep -q 'msg=service_target_up target=pool service=qwen' "$DIR/router.log" ||
  die "no service_target_up for pool"
[ "$(cat "$DIR/router.pid")" = "$RPID" ] || die "pid file: $(cat "$DIR/router.pid" 2>&1)"
if "$ROUTER" --policy "$DIR/policy.yaml" --listen 127.0.0.1:0 --socket "$SOCK" --pid-file "$DIR/router.pid" \
  2>"$DIR/second.err"; then die "a second spark-router took the pid file"; fi
grep -q "another spark-router (pid $RPID) holds" "$DIR/second.err" || die "second router: $(cat "$DIR/second.err")"
[ "$(cat "$DIR/router.pid")" = "$RPID" ] || die "the second router changed the pid file"
code=$(chat svc hello)
[ "$code" = 200 ] && grep -q '"content":"from b: hello"' "$DIR/body" && [ "$(hdr x-spark-target)" = pool ] ||
  die "ready service: $code $(cat "$DIR/body")"
[ "$(stat_of "$PORT_b" last_model)" = qwen3-8b ] || die "upstream model: $(stat_of "$PORT_b" last_model)"
code=$(chat mgmt hello)
[ "$code" = 200 ] && grep -q 'from a: hello' "$DIR/body" || die "management network: $code $(cat "$DIR/body")"
decision svc >"$DIR/dec"
grep -q '"state":"ready"' "$DIR/dec" && grep -q '"resolvable":true' "$DIR/dec" &&
  grep -q "\"url\":\"http://127.0.0.1:$PORT_b/v1\"" "$DIR/dec" && grep -q '"max_context":32768' "$DIR/dec" ||
  die "decision: $(cat "$DIR/dec")"
decision absent >"$DIR/dec"
grep -q '"state":"absent"' "$DIR/dec" || die "absent service: $(decision absent)"
ok "a ready service takes requests at its endpoint (fabric, or management with network:) under its own model name; decisions say ready, url, max_context"

curl -sS "$U/v1/models" >"$DIR/models"
grep -q '"id":"qwen3-8b"' "$DIR/models" && grep -q '"id":"svc"' "$DIR/models" || die "/v1/models: $(cat "$DIR/models")"
code=$(chat qwen3-8b hi)
[ "$code" = 200 ] && [ "$(hdr x-spark-rule)" = service_model ] && [ "$(hdr x-spark-target)" = pool ] &&
  grep -q 'from b: hi' "$DIR/body" || die "service model by name: $code $(cat "$DIR/hdrs")"
ok "/v1/models lists the service's models, and a request naming one goes to that service"

services "[$(qwen starting)]"
wait_for 5 usable svc false || die "a starting service still routed: $(decision svc)"
decision svc >"$DIR/dec"
grep -q '"state":"starting"' "$DIR/dec" || die "decision: $(decision svc)"
grep -q 'msg=service_target_down target=pool service=qwen state=starting' "$DIR/router.log" || die "no service_target_down"
code=$(chat svc hello)
[ "$code" = 200 ] && [ "$(hdr x-spark-target)" = a ] && grep -q 'from a: hello' "$DIR/body" ||
  die "fallback while starting: $code $(cat "$DIR/body")"
for _ in 1 2 3 4 5 6 7 8; do
  code=$(chat wsvc hi)
  [ "$code" = 200 ] && [ "$(hdr x-spark-target)" = a ] || die "weighted draw while starting: $code $(hdr x-spark-target)"
done
code=$(chat svconly hello)
[ "$code" = 503 ] && grep -q '"code":"target_unresolvable"' "$DIR/body" || die "503: $code $(cat "$DIR/body")"
code=$(chat qwen3-8b hello)
[ "$code" = 404 ] || die "a model of a service that is not ready: $code"
curl -sS "$U/v1/models" >"$DIR/models"
if grep -q '"id":"qwen3-8b"' "$DIR/models"; then die "/v1/models lists a service that is not ready"; fi
metric 'spark_router_target_usable{target="pool"} 0' || die "usable gauge not 0"
services "[]"
state_is() { local d; d=$(decision "$1"); grep -q "\"state\":\"$2\"" <<<"$d"; }
wait_for 5 state_is svc absent ||
  die "stopped service: $(decision svc)"
services "[$(qwen ready)]"
wait_for 5 usable svc true || die "the service did not come back"
code=$(chat svc back)
[ "$code" = 200 ] && grep -q 'from b: back' "$DIR/body" || die "after ready again: $code"
metric 'spark_router_target_usable{target="pool"} 1' || die "usable gauge not 1"
ok "a service that is not ready (or gone) leaves routing: fallbacks answer, weighted draws skip it, else 503; back when ready"

# issue 27: a job user serves under the name the admin's service left free;
# the targets follow root's service only (owner: root, the default)
services "[$(qwen ready mallory)]"
wait_for 5 usable svc false || die "mallory's qwen is followed: $(decision svc)"
decision svc >"$DIR/dec"
grep -q '"state":"other_owner"' "$DIR/dec" && grep -q '"owner":"root"' "$DIR/dec" &&
  grep -q '"service_owner":"mallory"' "$DIR/dec" && grep -q 'belongs to mallory, not root' "$DIR/dec" ||
  die "decision: $(cat "$DIR/dec")"
wait_for 5 grep -q 'msg=service_target_ignored target=pool service=qwen owner=mallory want_owner=root' "$DIR/router.log" ||
  die "no service_target_ignored in the log"
nb=$(stat_of "$PORT_b" requests)
code=$(chat svc hello)
[ "$code" = 200 ] && [ "$(hdr x-spark-target)" = a ] && grep -q 'from a: hello' "$DIR/body" ||
  die "fallback past mallory's service: $code $(cat "$DIR/body")"
code=$(chat svconly hello)
[ "$code" = 503 ] && grep -q '"code":"target_unresolvable"' "$DIR/body" && grep -q "another user than the target's owner" "$DIR/body" ||
  die "503 past mallory's service: $code $(cat "$DIR/body")"
code=$(chat qwen3-8b hello)
[ "$code" = 404 ] || die "a model of mallory's service: $code $(cat "$DIR/body")"
curl -sS "$U/v1/models" >"$DIR/models"
if grep -q '"id":"qwen3-8b"' "$DIR/models"; then die "/v1/models lists mallory's service's models"; fi
[ "$(stat_of "$PORT_b" requests)" = "$nb" ] || die "mallory's endpoint got a request"
services "[$(qwen ready)]"
wait_for 5 usable svc true || die "root's qwen is not followed again: $(decision svc)"
ok "a service of the target's name owned by another user is not followed (decision other_owner, log, fallback, 503, no models)"

conns() { grep -c '^CONN' "$DIR/sparkd.out"; }
conns_at_least() { [ "$(conns)" -ge "$1" ]; }
n0=$(conns)
nb=$(stat_of "$PORT_b" requests)
printf '{"close": true}' >"$STATE"
wait_for 5 grep -q 'msg=sparkd_watch_lost.*service_targets=kept_stale grace_s=8' "$DIR/router.log" ||
  die "no sparkd_watch_lost keeping the snapshot: $(grep sparkd_watch_lost "$DIR/router.log" | tail -2)"
# within the grace (8 s; each step below takes milliseconds): the last
# snapshot routes, and the decision says it is stale
decision svc >"$DIR/dec"
grep -q '"resolvable":true' "$DIR/dec" && grep -q '"snapshot":"stale"' "$DIR/dec" ||
  die "decision within the grace: $(cat "$DIR/dec")"
code=$(chat svc x)
[ "$code" = 200 ] && [ "$(hdr x-spark-target)" = pool ] && grep -q 'from b: x' "$DIR/body" ||
  die "the service while sparkd is away: $code $(cat "$DIR/body")"
[ "$(stat_of "$PORT_b" requests)" -gt "$nb" ] || die "the service's server got no request while sparkd was away"
wait_for 15 usable svc false || die "still usable after the grace"
decision svc >"$DIR/dec"
grep -q '"state":"disconnected"' "$DIR/dec" || die "decision: $(decision svc)"
grep -q 'msg=services_snapshot_expired.*grace_s=8.*service_targets=unusable' "$DIR/router.log" ||
  die "no services_snapshot_expired"
code=$(chat svc x)
[ "$code" = 200 ] && [ "$(hdr x-spark-target)" = a ] || die "fallback without sparkd: $code"
wait_for 5 conns_at_least $((n0 + 3)) || die "the router does not retry: $(conns) connections"
services "[$(qwen ready)]"
wait_for 10 usable svc true || die "no reconnect after sparkd came back"
ok "losing sparkd: the last snapshot routes for services_grace_s (decision stale), then service targets are unusable (fallbacks answer); the router retries with back-off and resumes"

for bad in '{"garbage": true}' '{"huge": true}' '{"error": true}'; do
  n0=$(conns)
  printf '%s' "$bad" >"$STATE"
  # a frame that breaks the contract empties the table at once; an error
  # answer (the head unreachable) keeps it for the grace
  wait_for 15 usable svc false || die "after $bad: still usable"
  wait_for 5 conns_at_least $((n0 + 1)) || die "after $bad: no reconnect"
  [ "$(curl -sS "$U/health")" = '{"status":"ok"}' ] || die "after $bad: the router is not answering"
  services "[$(qwen ready)]"
  wait_for 10 usable svc true || die "after $bad: not back"
done
grep -q 'error="bad frame from sparkd' "$DIR/router.log" && grep -q 'unavailable: the head is unreachable' "$DIR/router.log" ||
  die "hostile frames not logged"
kill -0 "$RPID" || die "the router died"
grep -q 'msg=sparkd_watch_lost.*bad frame from sparkd.*service_targets=unusable' "$DIR/router.log" ||
  die "a bad frame kept the snapshot"
ok "hostile frames from the socket (bad JSON, a 2 MiB length, an error answer) cost a reconnect; the router lives"

na=$(stat_of "$PORT_a" requests)
code=$(chat ctx hi)
[ "$code" = 200 ] && [ "$(hdr x-spark-target)" = c128k ] && grep -q 'from b: hi' "$DIR/body" ||
  die "context fallback: $code $(cat "$DIR/body")"
[ "$(stat_of "$PORT_a" requests)" = $((na + 1)) ] || die "the 4k target was called after an 8k context error"
metric 'spark_router_upstream_attempts_total{target="c4k",outcome="context_smaller"} 1' ||
  die "no context_smaller attempt"
code=$(chat ctxsmall hi)
[ "$code" = 400 ] && grep -q '"code":"context_length_exceeded"' "$DIR/body" || die "no larger context: $code $(cat "$DIR/body")"
code=$(chat ctxsvc hi)
[ "$code" = 200 ] && [ "$(hdr x-spark-target)" = pool ] || die "context fallback to a service: $code $(cat "$DIR/body")"
ok "a context-length error goes to the next target with a larger max_context (the policy's, or the service's)"

{
  sed -i 's/^  absent: .*/&\n  added:    {type: passthrough, target: a}/' "$DIR/policy.yaml"
  "$SPARKCTL" -o json route reload --pid-file "$DIR/router.pid" >"$DIR/reload.json" || die "route reload failed"
  grep -q "\"pid\": *$RPID" "$DIR/reload.json" || die "reload answer: $(cat "$DIR/reload.json")"
  wait_for 5 grep -q 'msg=policy_reloaded' "$DIR/router.log" || die "no policy_reloaded"
  code=$(chat added hi)
  [ "$code" = 200 ] || die "the reloaded route: $code"
  wait_for 5 usable svc true || die "service target after reload: $(decision svc)"
  echo 2147483646 >"$DIR/bogus.pid"
  if "$SPARKCTL" route reload --pid-file "$DIR/bogus.pid" 2>"$DIR/reload.err"; then die "reload of a dead pid succeeded"; fi
  grep -q 'spark-router' "$DIR/reload.err" || die "reload error: $(cat "$DIR/reload.err")"
  echo $$ >"$DIR/notrouter.pid"
  if "$SPARKCTL" route reload --pid-file "$DIR/notrouter.pid" 2>"$DIR/reload.err"; then die "reload signalled a process that is not spark-router"; fi
  ok "sparkctl route reload: SIGHUP to the pid in the pid file, only when that process holds its lock and is a spark-router"
}

# a control socket served by another user is not sparkd: refused before a frame is read
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  chmod 711 "$DIR"
  HD=$DIR/hostile
  mkdir -m 777 "$HD"
  printf '{"services": [%s]}' "$(qwen ready)" >"$HD/state.json"
  chmod 644 "$HD/state.json"
  setpriv --reuid=65534 --regid=65534 --clear-groups node "$FAKED" "$HD/sparkd.sock" "$HD/state.json" \
    >"$HD/out" 2>"$DIR/hostile-sparkd.log" &
  pids+=($!)
  wait_for 5 grep -q READY "$HD/out" || die "the hostile fake sparkd did not start"
  "$ROUTER" --policy "$DIR/policy.yaml" --listen 127.0.0.1:0 --socket "$HD/sparkd.sock" 2>"$DIR/router-hostile.log" &
  HPID=$!
  pids+=($HPID)
  wait_for 5 grep -q "is neither root nor this router's user: not sparkd" "$DIR/router-hostile.log" ||
    die "a socket of uid 65534 was not refused"
  HPORT=$(sed -n 's/.*msg=router_listen.* port=\([0-9]*\).*/\1/p' "$DIR/router-hostile.log")
  d=$(curl -sS "http://127.0.0.1:$HPORT/v1/decision" -d '{"model":"svc","messages":[{"role":"user","content":"x"}]}')
  grep -q '"state":"disconnected"' <<<"$d" || die "hostile socket: $d"
  kill "$HPID"
  ok "a control socket whose owner is neither root nor the router's user is refused (SO_PEERCRED): its services are never used"
fi

kill -TERM "$RPID"
wait "$RPID" || die "router exit status $?"
[ ! -e "$DIR/router.pid" ] || die "the pid file was left behind"
ok "the pid file is locked while spark-router runs (a second one is refused) and removed at a clean stop"
echo "all $pass checks passed"

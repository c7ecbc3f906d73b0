#!/usr/bin/env bash
# spark-router against a real cluster (issue 20): a 4-ring simulated cluster
# with a real sparkd in every node, two spark-decode services served by
# `sparkctl serve` (dec-big: TP=2 on g2, dec-small: TP=1 on g1), and
# spark-router started with `sparkctl route serve` inside node 4 (a worker in
# neither group) on that node's control socket: it follows the services
# through svc_watch, forwarded to the head. What a user checks:
#   - requests route to the ready services, at their endpoints under their
#     own model ids: the answer equals the service's own for the same seed,
#     streamed (SSE through the router) and not; /v1/models lists the routes
#     and the services' models;
#   - `svc stop dec-small`: it leaves routing (its route's fallback, dec-big,
#     answers; a route without fallback gives 503; its model leaves
#     /v1/models); `svc restart` brings it back once ready.
set -euo pipefail
S=${SPARK_SOURCE_DIR:?}
# shellcheck source=tests/integration/serve/serve_lib.sh
. "$S/tests/integration/serve/serve_lib.sh"
sl_init router-e2e
[ -x "$B/router/spark-router" ] || { echo "SKIP: spark-router is not built"; exit 77; }
sl_cluster 4 ring
ctl 1 group create g2 --size 2 >/dev/null || die "group g2"
ctl 1 group create g1 --size 1 >/dev/null || die "group g1"
FAST=(--set health.interval=1s --set restart.backoff=1s)
ctl 1 serve spark-decode --group g2 --name dec-big "${FAST[@]}" >/dev/null || die "serve dec-big"
ctl 2 serve spark-decode --group g1 --name dec-small "${FAST[@]}" >/dev/null || die "serve dec-small"
wait_state dec-big ready 60 || die "dec-big is $(svc_field dec-big 'd["state"], d["last_error"]')"
wait_state dec-small ready 60 || die "dec-small is $(svc_field dec-small 'd["state"], d["last_error"]')"
URL_SMALL=$(svc_field dec-small 'd["endpoint"]["url"]')

cat >"$DIR/policy.yaml" <<'EOF'
targets:
  big:   {service: dec-big}
  small: {service: dec-small}
routes:
  auto:      {type: passthrough, target: small, fallbacks: [big]}
  smallonly: {type: passthrough, target: small}
  bigonly:   {type: passthrough, target: big}
EOF
ip netns exec "$P-4" env SPARKCTL_SOCKET="/run/sparkctl-sim/$P/$P-4/sparkd.sock" \
  "$SPARKCTL" route serve --policy "$DIR/policy.yaml" --listen 127.0.0.1:0 2>"$DIR/router.log" &
RPID=$!
pids+=("$RPID")
grep_log() { grep -q "$1" "$DIR/router.log"; }
for _ in $(seq 300); do grep_log 'msg=router_listen' && break; sleep 0.1; done
RPORT=$(sed -n 's/.*msg=router_listen.* port=\([0-9]*\).*/\1/p' "$DIR/router.log")
[ -n "$RPORT" ] || die "spark-router did not start"
U=http://127.0.0.1:$RPORT
for t in big:dec-big small:dec-small; do
  for _ in $(seq 300); do grep_log "msg=service_target_up target=${t%:*} service=${t#*:}" && break; sleep 0.1; done
  grep_log "msg=service_target_up target=${t%:*} service=${t#*:}" || die "no service_target_up for $t"
done
ok "spark-router in node 4, on its sparkd's socket, sees both services ready"

# post URL PATH BODY: from node 4; the status, body in $DIR/body, headers in $DIR/hdrs
post() {
  in_ns 4 curl -s -m 30 -o "$DIR/body" -D "$DIR/hdrs" -w '%{http_code}' \
    -H 'content-type: application/json' --data-binary "$3" "$1$2" || true
}
hdr() { sed -n "s/^$1: *\\(.*\\)\\r\$/\\1/Ip" "$DIR/hdrs"; }
text() { python3 -c "import json; d=json.load(open('$DIR/body')); print(json.dumps(d['choices'][0]['text']))"; }
body() { printf '{"model":"%s","prompt":"Hello","max_tokens":24,"temperature":0.9,"seed":7%s}' "$1" "${2:-}"; }
[ "$(post "$URL_SMALL" /v1/completions "$(body dec-small)")" = 200 ] || die "dec-small directly: $(cat "$DIR/body")"
want=$(text)
for r in auto:small smallonly:small bigonly:big dec-small:small dec-big:big; do
  code=$(post "$U" /v1/completions "$(body "${r%:*}")")
  [ "$code" = 200 ] && [ "$(hdr x-spark-target)" = "${r#*:}" ] || die "${r%:*}: $code $(hdr x-spark-target) $(cat "$DIR/body")"
  [ "$(text)" = "$want" ] || die "${r%:*} through the router: $(text), the service itself: $want"
done
code=$(post "$U" /v1/completions "$(body auto ',"stream":true')")
[ "$code" = 200 ] && [ "$(hdr x-spark-target)" = small ] || die "stream: $code $(cat "$DIR/body")"
python3 - "$DIR/body" "$want" <<'EOF' || die "the stream through the router: $(head -c 300 "$DIR/body")"
import json, sys
ev = [e for e in open(sys.argv[1]).read().split('\n\n') if e]
assert ev[-1] == 'data: [DONE]' and len(ev) >= 3, ev[-1:]
t = ''.join(c['text'] for e in ev[:-1] for c in json.loads(e[6:])['choices'])
assert json.dumps(t) == sys.argv[2], (t, sys.argv[2])
EOF
models() { in_ns 4 curl -s -m 10 "$U/v1/models" | python3 -c "import json,sys; print(' '.join(sorted(m['id'] for m in json.load(sys.stdin)['data'])))"; }
[ "$(models)" = "auto bigonly dec-big dec-small smallonly" ] || die "/v1/models: $(models)"
ok "routes go to the ready services with the services' own text for the same seed (TP=1 and TP=2, by route and by service model, streamed); /v1/models: $(models)"

ctl 1 svc stop dec-small >/dev/null || die "svc stop dec-small"
for _ in $(seq 300); do grep_log 'msg=service_target_down target=small service=dec-small' && break; sleep 0.1; done
grep_log 'msg=service_target_down target=small service=dec-small' || die "no service_target_down for small"
code=$(post "$U" /v1/completions "$(body auto)")
[ "$code" = 200 ] && [ "$(hdr x-spark-target)" = big ] && [ "$(text)" = "$want" ] ||
  die "auto with dec-small stopped: $code $(hdr x-spark-target) $(cat "$DIR/body")"
code=$(post "$U" /v1/completions "$(body smallonly)")
[ "$code" = 503 ] && grep -q '"code":"target_unresolvable"' "$DIR/body" || die "smallonly stopped: $code $(cat "$DIR/body")"
[ "$(models)" = "auto bigonly dec-big smallonly" ] || die "/v1/models with dec-small stopped: $(models)"
ok "svc stop dec-small: auto falls back to dec-big (the same text), smallonly 503, dec-small leaves /v1/models"

ctl 1 svc restart dec-small >/dev/null || die "svc restart dec-small"
wait_state dec-small ready 60 || die "dec-small after restart: $(svc_field dec-small 'd["state"], d["last_error"]')"
ups() { grep -c 'msg=service_target_up target=small' "$DIR/router.log" || true; }
for _ in $(seq 300); do [ "$(ups)" -ge 2 ] && break; sleep 0.1; done
[ "$(ups)" -ge 2 ] || die "no second service_target_up for small after svc restart"
code=$(post "$U" /v1/completions "$(body auto)")
[ "$code" = 200 ] && [ "$(hdr x-spark-target)" = small ] && [ "$(text)" = "$want" ] ||
  die "auto after svc restart: $code $(hdr x-spark-target) $(cat "$DIR/body")"
[ "$(models)" = "auto bigonly dec-big dec-small smallonly" ] || die "/v1/models after restart: $(models)"
ok "svc restart dec-small: once ready, auto goes to it again and it is back in /v1/models"
kill -TERM "$RPID"
wait "$RPID" || die "spark-router exited with status $? on SIGTERM"
ok "spark-router exits 0 on SIGTERM"
sl_no_sanitizer_report
echo "all $pass checks passed"

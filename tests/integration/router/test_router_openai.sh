#!/usr/bin/env bash
# The official openai npm client (package "openai", installed once into
# /var/cache/sparkctl-npm/router) against a real spark-router in front of a
# fake upstream on loopback: chat, completions, streaming, models, errors.
# Skips (77) when node or npm is missing or the package cannot be installed.
set -euo pipefail
B=${SPARK_BUILD_DIR:?}
S=${SPARK_SOURCE_DIR:?}
HERE=$S/tests/integration/router
ROUTER=$B/router/spark-router
MOD=${SPARK_NPM_CACHE:-/var/cache/sparkctl-npm}/router
command -v node >/dev/null && command -v npm >/dev/null || { echo "SKIP: node/npm not installed"; exit 77; }
if [ ! -f "$MOD/node_modules/openai/package.json" ]; then
  mkdir -p "$MOD"
  echo '{ "name": "sparkctl-router-test", "private": true, "dependencies": { "openai": "7.59.0" } }' >"$MOD/package.json"
  (cd "$MOD" && timeout 120 npm install --no-audit --no-fund >/dev/null 2>&1) ||
    { echo "SKIP: npm install openai failed (no registry?)"; exit 77; }
fi
# shellcheck source=lib.sh
. "$HERE/lib.sh"
router_lib_init oa
start_fake a
start_fake b
PA=$PORT_a
PB=$PORT_b
[ -n "$PA" ] && [ -n "$PB" ] || die "fake upstreams did not start"
export ROUTER_OA_KEY=sdk-key-0123456789abcdef
cat >"$DIR/policy.yaml" <<EOP
api_keys: [{env: ROUTER_OA_KEY}]
targets:
  big:   {url: 'http://127.0.0.1:$PA/v1'}
  small: {url: 'http://127.0.0.1:$PB/v1'}
  dead:  {url: 'http://127.0.0.1:9/v1', connect_timeout_ms: 300}
  stall: {url: 'http://127.0.0.1:$PA/v1', model: stall, stall_timeout_ms: 1000}
routes:
  auto:
    type: rules
    aliases: [gpt-4o]
    rules: [{name: long, when: {min_tokens: 100}, target: big}]
    default: small
  down: {type: passthrough, target: dead}
  stalled: {type: passthrough, target: stall}
EOP
"$ROUTER" --policy "$DIR/policy.yaml" --listen 127.0.0.1:0 2>"$DIR/router.log" &
pids+=($!)
for _ in $(seq 100); do grep -q 'msg=router_listen' "$DIR/router.log" && break; sleep 0.05; done
RP=$(sed -n 's/.*msg=router_listen.* port=\([0-9]*\).*/\1/p' "$DIR/router.log")
[ -n "$RP" ] || die "router did not start"
node "$HERE/openai_client.js" "$RP" "$ROUTER_OA_KEY" "$MOD" 2>"$DIR/client.log" || die "openai client"

#!/usr/bin/env bash
# Issue 27, item 3: one request with a catastrophic rule regex must not stall
# spark-router. A rules route with (a|aa)*c gets a 120,000-character prompt
# (glibc's backtracking regexec took 22 s on it, with the event loop blocked)
# while another client asks /health: /health must answer well before the old
# code would (under 2 s; the measured figures go to the log), the request
# itself must finish, a regex that hits its match limit counts as no match
# (the route's default, spark_router_regex_limit_total, a regex_limit log
# line), and an ordinary regex still matches.
set -euo pipefail
B=${SPARK_BUILD_DIR:?}
S=${SPARK_SOURCE_DIR:?}
ROUTER=${SPARK_ROUTER_BIN:-$B/router/spark-router}
command -v node >/dev/null || { echo "SKIP: node is not installed (scripts/deps.sh --test)"; exit 77; }
command -v curl >/dev/null || { echo "SKIP: curl is not installed"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 is not installed"; exit 77; }
# shellcheck source=lib.sh
. "$S/tests/integration/router/lib.sh"
router_lib_init rx

start_fake a
start_fake b
# shellcheck disable=SC2154
[ -n "$PORT_a" ] && [ -n "$PORT_b" ] || die "fake upstreams did not start"
cat >"$DIR/policy.yaml" <<EOF
targets:
  big:   {url: 'http://127.0.0.1:$PORT_a/v1'}
  small: {url: 'http://127.0.0.1:$PORT_b/v1'}
routes:
  evil:
    type: rules
    rules:
      - {name: evil, when: {regex: '(a|aa)*c'}, target: big}
    default: small
  limit:
    type: rules
    rules:
      - {name: blowup, when: {regex: '(a|aa)*[bc]'}, target: big}
    default: small
  code:
    type: rules
    rules:
      - {name: gold, when: {header: {name: x-tier, value: gold}, regex: 'please'}, target: big}
      - {name: code, when: {regex: 'def [a-z_]+\(|#include', in: any}, target: big}
      - {name: word, when: {regex: '\<cat\>'}, target: big}
    default: small
EOF
"$ROUTER" --policy "$DIR/policy.yaml" --listen 127.0.0.1:0 2>"$DIR/router.log" &
RPID=$!
pids+=("$RPID")
wait_for 5 grep -q 'msg=router_listen' "$DIR/router.log" || die "router did not start"
RPORT=$(sed -n 's/.*msg=router_listen.* port=\([0-9]*\).*/\1/p' "$DIR/router.log")
U=http://127.0.0.1:$RPORT

body() { # MODEL TEXT-FILE -> a chat request on stdout
  python3 -c 'import json,sys; print(json.dumps({"model": sys.argv[1], "messages": [{"role": "user", "content": open(sys.argv[2]).read()}]}))' "$1" "$2"
}
# A catastrophic request in the background, /health from another client
# while it is in flight (and at least three times): every /health under 2 s.
# The old code blocked its loop in regexec for about 20 s on the first, so a
# /health sent after the body arrived waited that long (curl gives up after
# 5 s).
health_probe() { # -> microseconds of one /health, 99 s on failure
  local t
  t=$(curl -s -o /dev/null -m 5 -w '%{time_total}' "$U/health") || t=99.000000
  t=${t/./}
  echo $((10#$t))
}
beside() { # MODEL TEXT-FILE TAG: the request, /health probes beside it
  body "$1" "$2" >"$DIR/$3.json"
  curl -s -m 60 -D "$DIR/$3.h" -o "$DIR/$3.out" -w '%{time_total}' -H 'Content-Type: application/json' \
    --data-binary @"$DIR/$3.json" "$U/v1/chat/completions" >"$DIR/$3.time" &
  local cpid=$! h
  pids+=("$cpid")
  worst=0
  n=0
  while :; do
    h=$(health_probe)
    n=$((n + 1))
    [ "$h" -le "$worst" ] || worst=$h
    [ "$worst" -lt 2000000 ] || die "/health took $worst us while a catastrophic regex ran (the loop is blocked)"
    if ! kill -0 "$cpid" 2>/dev/null; then
      [ $n -lt 3 ] || break
    fi
    [ $n -lt 500 ] || break
  done
  wait "$cpid" || die "the catastrophic request $3 failed (curl status $?)"
  echo "$3: the request took $(cat "$DIR/$3.time") s; /health: $n probes, the slowest $worst us"
  grep -qi '^x-spark-target: small' "$DIR/$3.h" || die "$3 did not go to the default: $(cat "$DIR/$3.h")"
}
python3 -c 'import sys; sys.stdout.write("a" * 120000)' >"$DIR/aaa.txt"
beside evil "$DIR/aaa.txt" evil
ok "(a|aa)*c over a 120,000-character prompt: answered by the default; /health answered beside it (slowest of $n: $worst us)"
# PCRE2 sees at once that no c is there; its worst case is (a|aa)*[bc] over
# runs of 16 a's: every start position just under the match limit, over the
# whole 32 KiB it looks at (hundreds of ms, in the thread pool)
python3 -c 'import sys; sys.stdout.write(("a" * 16 + "!") * 7100)' >"$DIR/worst.txt"
beside limit "$DIR/worst.txt" worst
ok "(a|aa)*[bc] at its worst under the limit: answered by the default; /health answered beside it (slowest of $n: $worst us)"

# A regex past its match limit (each start position of 20 a's and a '!'
# backtracks about 17,000 times): no match, counted and logged.
python3 -c 'import sys; sys.stdout.write(("a" * 20 + "!") * 5700)' >"$DIR/blow.txt"
body limit "$DIR/blow.txt" >"$DIR/blow.json"
t=$(curl -s -m 60 -D "$DIR/blow.h" -o /dev/null -w '%{time_total}' -H 'Content-Type: application/json' \
  --data-binary @"$DIR/blow.json" "$U/v1/chat/completions") || die "the limit request failed"
echo "the (a|aa)*[bc] request at its match limit took $t s"
grep -qi '^x-spark-target: small' "$DIR/blow.h" || die "a regex past its limit did not count as no match"
grep -qi '^x-spark-rule: default' "$DIR/blow.h" || die "a regex past its limit: not the default rule"
curl -s "$U/metrics" | grep -q '^spark_router_regex_limit_total{route="limit",rule="blowup"} 1$' ||
  die "spark_router_regex_limit_total does not count the limit: $(curl -s "$U/metrics" | grep regex)"
grep -q 'msg=regex_limit .*route=limit rule=blowup' "$DIR/router.log" || die "no regex_limit log line"
ok "a regex past its match limit counts as no match, in spark_router_regex_limit_total and the log"

# Ordinary regexes still match, decided off the loop like the rest; a header
# condition beside a regex is read from the request; GNU's \< \> still work.
dec() { # MODEL CONTENT [HEADER] -> the rule of /v1/decision
  curl -s -H 'Content-Type: application/json' ${3:+-H "$3"} \
    -d "{\"model\":\"$1\",\"messages\":[{\"role\":\"user\",\"content\":\"$2\"}]}" "$U/v1/decision" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["rule"])'
}
[ "$(dec code 'def foo_bar(x): pass')" = code ] || die "def [a-z_]+\\( does not match"
[ "$(dec code '#INCLUDE <stdio.h>')" = code ] || die "the regex is not case-insensitive"
[ "$(dec code 'hello there')" = default ] || die "hello matched a rule"
[ "$(dec code 'please' 'x-tier: gold')" = gold ] || die "header + regex rule off the loop"
[ "$(dec code 'please')" = default ] || die "the header condition held without the header"
[ "$(dec code 'a cat sat')" = word ] || die "\\<cat\\> does not match a word"
[ "$(dec code 'concatenate')" = default ] || die "\\<cat\\> matched inside a word"
ok "ordinary regexes match (case-insensitive, header beside regex, \\< \\>)"
kill -0 "$RPID" || die "the router died"

# route check (spark-router --check) warns about the two rules only their
# limits bound, not about the others; a log: under /proc is refused.
"$ROUTER" --policy "$DIR/policy.yaml" --check -o json >"$DIR/check.json" || die "--check failed"
python3 - "$DIR/check.json" <<'PY' || die "route check warnings: $(cat "$DIR/check.json")"
import json, sys
w = json.load(open(sys.argv[1]))["warnings"]
assert len(w) == 2, w
assert w[0].startswith("routes.evil.rules.0.when.regex '(a|aa)*c': "), w
assert w[1].startswith("routes.limit.rules.0.when.regex '(a|aa)*[bc]': "), w
PY
{ echo "log: /proc/self/mem"; cat "$DIR/policy.yaml"; } >"$DIR/badlog.yaml"
if "$ROUTER" --policy "$DIR/badlog.yaml" --check >/dev/null 2>"$DIR/badlog.err"; then
  die "log: /proc/self/mem was accepted"
fi
grep -q 'badlog.yaml:1:6: log: /proc/self/mem is under /proc' "$DIR/badlog.err" || die "bad log message: $(cat "$DIR/badlog.err")"
grep -q "msg=regex_unbounded .*routes.evil.rules.0.when.regex '(a|aa)\*c'" "$DIR/router.log" ||
  die "no regex_unbounded warning in the log at start"
ok "route check warns about the unbounded regexes (so does the log at start) and refuses log: /proc/self/mem"
# shellcheck disable=SC2154
echo "$pass passed"

#!/usr/bin/env bash
# Slow request heads against spark-decode --serve (issue 27 item 5; loopback,
# TP=1, the default --max-conns 64): 70 clients each send a header byte a
# second. /health keeps answering within 3 s the whole time, because at most
# half of --max-conns heads may be pending (a newcomer takes the oldest one's
# place, which gets 408) and no head may take longer than --head-timeout (4 s
# here): every trickler is answered 408 and closed within that time (plus
# the reaper's 0.25 s tick and slack for a loaded machine).
set -euo pipefail
B=${SPARK_BUILD_DIR:?}
DEC=$B/runtime/decode/spark-decode
PY=/usr/bin/python3
DIR=$(mktemp -d /tmp/spark-decode-slow-XXXXXX)
pid=
cleanup() {
  [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && sleep 0.3 && kill -9 "$pid" 2>/dev/null
  wait 2>/dev/null || true
  rm -rf "$DIR"
}
trap cleanup EXIT
die() { echo "FAIL: $*" >&2; tail -n 20 "$DIR/server.log" >&2 || true; exit 1; }
n=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }

"$DEC" --synthetic tiny --serve --host 127.0.0.1 --port 0 --head-timeout 4 2>"$DIR/server.log" &
pid=$!
for _ in $(seq 300); do grep -q msg=serve_ready "$DIR/server.log" && break; sleep 0.1; done
P=$(sed -n 's/.*msg=serve_listen.* port=\([0-9]*\).*/\1/p' "$DIR/server.log")
[ -n "$P" ] || die "server did not start"

"$PY" - "$P" <<'PYEOF' || die "slow heads"
import socket, sys, threading, time
port = int(sys.argv[1])
HEAD = b'GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ' + b'a' * 200 + b'\r\n\r\n'
N = 70
ends = [None] * N   # (seconds from its connect to the close, what it got)
def trickle(i):
    try:
        s = socket.create_connection(('127.0.0.1', port), timeout=30)
    except OSError as e:
        ends[i] = (0.0, 'connect: %s' % e)
        return
    t0 = time.time()
    got = b''
    s.settimeout(1)
    for b in HEAD:
        try:
            s.sendall(bytes([b]))
        except OSError:
            break
        try:
            d = s.recv(512)
            got += d
            if not d:
                break
        except socket.timeout:
            continue
        except OSError:
            break
        if time.time() - t0 > 60:
            break
    ends[i] = (time.time() - t0, got[:40].decode('latin1'))
    s.close()
ths = [threading.Thread(target=trickle, args=(i,), daemon=True) for i in range(N)]
for t in ths:
    t.start()
time.sleep(1.5)
# /health from a new client, every 0.5 s for 8 s (twice the head timeout)
worst = 0.0
t_end = time.time() + 8
while time.time() < t_end:
    t0 = time.time()
    s = socket.create_connection(('127.0.0.1', port), timeout=3)
    s.settimeout(3)
    s.sendall(b'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
    try:
        r = s.recv(100)
    except socket.timeout:
        r = b''
    s.close()
    dt = time.time() - t0
    worst = max(worst, dt)
    assert r.startswith(b'HTTP/1.1 200'), \
        '/health did not answer 200 within 3 s while %d clients trickle headers: %r' % (N, r)
    time.sleep(0.5)
for t in ths:
    t.join(30)
slow = [e for e in ends if e is None or e[0] > 4 + 3]
assert not slow, '%d trickling clients were held longer than the 4 s head timeout (+3 s): %s' % (
    len(slow), slow[:3])
bad = [e for e in ends if not e[1].startswith('HTTP/1.1 408') and e[1] != '']
assert not bad, 'a trickling client got something else than 408 or a close: %s' % bad[:3]
n408 = sum(1 for e in ends if e[1].startswith('HTTP/1.1 408'))
print('health worst %.2f s; %d tricklers closed, %d with 408, longest held %.1f s' % (
    worst, N, n408, max(e[0] for e in ends)))
PYEOF
ok "70 clients trickling header bytes: /health answers within 3 s throughout; each trickler closed (408) within the 4 s head timeout"

grep -q 'msg=serve_head_timeout reason=deadline' "$DIR/server.log" || die "no head deadline in the log"
grep -q 'msg=serve_head_timeout reason=budget' "$DIR/server.log" || die "no head budget eviction in the log"
[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$P/health")" = 200 ] ||
  die "/health after the tricklers left"
ok "the log names both reasons (deadline, budget); /health answers after"

kill -TERM "$pid"
wait "$pid" || die "exit status after SIGTERM"
pid=
grep -q 'msg=serve_exit status=0' "$DIR/server.log" || die "no clean exit"
ok "exit 0 on SIGTERM"
echo "$n passed"

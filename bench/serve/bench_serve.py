#!/usr/bin/env python3
"""bench/serve: spark-decode --serve (HTTP) against spark-decode run directly.

Per TP: R direct runs (`spark-decode --tokens N --warmup 300 -o json`: its
decode tokens/s, and N / tokens_per_s as the run's latency; a fresh pair of
ranks runs 3-4x slower for its first ~100 ms, measured: 2000 tokens/s after 16
warm-up steps, 7500 after 300, so the direct runs warm up as long as a running
server has; likewise each timed request follows an untimed one of 64 tokens,
since the ranks of a server that sat idle during the direct run wake up as
cold), then one server and R
sequential requests of max_tokens N over one keep-alive connection, plain and
streamed (client-side wall time of each request; a stream's time to first
token too). Direct and HTTP runs alternate; the ratio is the median of each
request's tokens/s over the direct run's just before it, so load that drifts
during the run (a shared machine) cancels out.
Standard library only."""
import argparse, http.client, json, os, re, statistics, subprocess, sys, time


def pct(v, p):
    s = sorted(v)
    k = max(0, min(len(s) - 1, int(-(-p * len(s) // 100)) - 1))
    return s[k]


def direct(binary, shape, tp, tokens):
    cmd = [binary, '--synthetic', shape, '--prompt', '1', '--tokens', str(tokens), '--warmup', '300',
           '-o', 'json']
    if tp > 1:
        cmd[1:1] = ['--local', str(tp)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    tps = json.loads(out)['tokens_per_s']
    return tps, tokens / tps


class Server:
    def __init__(self, binary, shape, tp):
        cmd = [binary, '--synthetic', shape, '--serve', '--host', '127.0.0.1', '--port', '0',
               '--max-tokens-cap', '8192', '--max-context', '16384']
        if tp > 1:
            cmd[1:1] = ['--local', str(tp)]
        self.p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        self.port = None
        t0 = time.time()
        for line in self.p.stderr:
            m = re.search(r'msg=serve_listen .*port=(\d+)', line)
            if m:
                self.port = int(m.group(1))
            if 'msg=serve_ready' in line:
                break
            if time.time() - t0 > 60:
                raise SystemExit('server not ready in 60 s')
        if not self.port:
            raise SystemExit('server did not start')
        self.c = http.client.HTTPConnection('127.0.0.1', self.port)

    def ask(self, tokens, stream):
        body = json.dumps({'prompt': [1], 'max_tokens': tokens, 'stream': stream})
        t0 = time.perf_counter()
        self.c.request('POST', '/v1/completions', body, {'Content-Type': 'application/json'})
        r = self.c.getresponse()
        if r.status != 200:
            raise SystemExit('HTTP %d: %s' % (r.status, r.read()[:200]))
        if not stream:
            d = json.loads(r.read())
            return d['usage']['completion_tokens'], time.perf_counter() - t0, None
        n, first = 0, None
        buf = b''
        while True:
            chunk = r.read1(65536) if hasattr(r, 'read1') else r.read(65536)
            if not chunk:
                break
            buf += chunk
            while b'\n\n' in buf:
                ev, buf = buf.split(b'\n\n', 1)
                if ev == b'data: [DONE]':
                    continue
                d = json.loads(ev[6:])
                k = len(d['choices'][0].get('token_ids', []))
                if k and first is None:
                    first = time.perf_counter() - t0
                n += k
        return n, time.perf_counter() - t0, first

    def stop(self):
        self.c.close()
        self.p.terminate()
        self.p.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--bin', required=True)
    ap.add_argument('--tp', default='1 2')
    ap.add_argument('--tokens', type=int, default=256)
    ap.add_argument('--requests', type=int, default=30)
    ap.add_argument('--shape', default='tiny')
    a = ap.parse_args()
    rows = []
    for tp in [int(x) for x in a.tp.split()]:
        srv = Server(a.bin, a.shape, tp)
        srv.ask(8, False)  # first-touch costs out of the numbers
        d_tps, d_lat, h_tps, h_lat, s_tps, s_lat, s_first = [], [], [], [], [], [], []
        for _ in range(a.requests):
            t, l = direct(a.bin, a.shape, tp, a.tokens)
            d_tps.append(t)
            d_lat.append(l)
            srv.ask(64, False)  # the server's warm-up, as the direct run has its own
            n, l, _ = srv.ask(a.tokens, False)
            assert n == a.tokens, n
            h_tps.append(n / l)
            h_lat.append(l)
            n, l, f = srv.ask(a.tokens, True)
            assert n == a.tokens, n
            s_tps.append(n / l)
            s_lat.append(l)
            s_first.append(f)
        srv.stop()
        # the ratio of each HTTP request to the direct run just before it, then
        # their median: load that drifts during the run cancels out
        ratio = lambda v: statistics.median([x / d for x, d in zip(v, d_tps)])
        rows.append((tp, 'direct (no HTTP)', statistics.median(d_tps), d_lat, None, 1.0))
        rows.append((tp, 'HTTP', statistics.median(h_tps), h_lat, None, ratio(h_tps)))
        rows.append((tp, 'HTTP stream', statistics.median(s_tps), s_lat, s_first, ratio(s_tps)))
    print('spark-decode --synthetic %s, %d tokens per request, %d requests per row, batch 1, '
          'load average %.1f' % (a.shape, a.tokens, a.requests, os.getloadavg()[0]))
    print('%-3s %-17s %10s %10s %10s %10s %8s' % ('tp', 'path', 'tok/s', 'p50 ms', 'p99 ms',
                                                  'ttft ms', 'ratio'))
    worst = 1.0
    for tp, path, tps, lat, first, ratio in rows:
        ft = '%10.2f' % (statistics.median(first) * 1e3) if first else '%10s' % '-'
        print('%-3d %-17s %10.0f %10.2f %10.2f %s %8.3f' % (tp, path, tps, pct(lat, 50) * 1e3,
                                                            pct(lat, 99) * 1e3, ft, ratio))
        worst = min(worst, ratio)
    print('worst ratio HTTP/direct (median of paired tokens/s): %.3f (target >= 0.90: %s)'
          % (worst, 'met' if worst >= 0.90 else 'NOT met'))


if __name__ == '__main__':
    sys.exit(main())

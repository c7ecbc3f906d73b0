#!/usr/bin/python3
"""Decode benchmarks for spark-decode on this machine (standard library only).

    bench/decode/bench_decode.py [--bin PATH] [--tokens N] [--skip-speedup]
                                 [--layers N] [--worlds 1,2,4] [--json FILE]

1. Weight streaming: at world size 1, the bytes of weights each token reads
   divided by the median token time, against the best memcpy bandwidth
   measured in the same run, before and after decoding (spark-decode --membw). Batch-1 decode is memory-bound, so this ratio is
   how close the kernels get to the physical limit. Target: >= 0.6.
2. Speed-up: a 27B-class shape (dense-27b, reduced layers) over --local world
   sizes, one-shot vs ring all-reduce: tokens/s, speed-up over one rank,
   communication share, all-reduce time per token.

On a small machine every rank shares the same cores and memory, and the
"network" is loopback TCP: see docs/inference.md for what limits the figures.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def find_bin():
    for b in ('build', 'build-dec', 'build-lead'):
        p = os.path.join(ROOT, b, 'runtime', 'decode', 'spark-decode')
        if os.access(p, os.X_OK):
            return p
    return None


def run(binary, args):
    cmd = [binary] + args + ['-o', 'json']
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit('bench_decode: %s failed:\n%s' % (' '.join(cmd), p.stderr.strip()))
    return json.loads(p.stdout)


def streaming(binary, tokens, with_f16):
    cases = [
        ('llama-3.1-8b', 'bf16', 2),
        ('llama-3.1-8b', 'f32', 1),
        ('dense-27b', 'bf16', 1),
    ]
    if with_f16:
        cases.append(('llama-3.1-8b', 'f16', 1))
    rows = []
    print('Weight streaming at world size 1 vs memcpy bandwidth (target ratio >= 0.6)')
    hdr = '%-14s %-5s %6s %9s %8s %11s %11s %10s %6s  %s' % (
        'shape', 'dtype', 'layers', 'GB/token', 'tok/s', 'stream GB/s', 'memcpy GB/s',
        'read GB/s', 'ratio', 'kernel')
    print(hdr)
    print('-' * len(hdr))
    for shape, dt, layers in cases:
        r = run(binary, ['--synthetic', shape, '--layers', str(layers), '--dtype', dt,
                         '--tokens', str(tokens), '--membw'])
        ratio = r['stream_vs_memcpy']
        kernel = r['kernel']
        print('%-14s %-5s %6d %9.3f %8.2f %11.2f %11.2f %10.2f %6.2f  %s %s' % (
            shape, dt, layers, r['weight_bytes_per_token'] / 1e9, r['tokens_per_s'],
            r['weight_stream_p50_gbs'], r['memcpy_gbs'], r['read_gbs'], ratio, kernel,
            'ok' if ratio >= 0.6 else 'BELOW TARGET'), flush=True)
        rows.append(r)
    return rows


def speedup(binary, tokens, layers, worlds):
    rows = []
    print()
    print('Speed-up, dense-27b with %d of 62 layers, bf16 weights, --local ranks on '
          'this machine (%d cores)' % (layers, os.cpu_count() or 0))
    hdr = '%-5s %-8s %8s %8s %8s %10s %12s %11s %11s' % (
        'ranks', 'algo', 'tok/s', 'speedup', 'p50 ms', 'comm share', 'allreduce ms',
        'msgs/token', 'msg bytes')
    print(hdr)
    print('-' * len(hdr))
    base = None
    for w in worlds:
        for algo in (['none'] if w == 1 else ['oneshot', 'ring']):
            args = ['--synthetic', 'dense-27b', '--layers', str(layers), '--tokens', str(tokens)]
            if w > 1:
                args += ['--local', str(w), '--algo', algo]
            r = run(binary, args)
            if base is None:
                base = r['tokens_per_s']
            m = r['messages_per_token']['allreduce']
            print('%-5d %-8s %8.2f %7.2fx %8.1f %9.0f%% %12.2f %11d %11d' % (
                w, r['algo'], r['tokens_per_s'], r['tokens_per_s'] / base,
                r['latency_ms']['p50'], 100 * r['comm_share'], r['allreduce_ms_per_token'],
                m['count'], m['bytes']), flush=True)
            rows.append(r)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--bin', default=find_bin(), help='spark-decode binary')
    ap.add_argument('--tokens', type=int, default=8)
    ap.add_argument('--layers', type=int, default=2, help='dense-27b layers for the speed-up')
    ap.add_argument('--worlds', default='1,2,4')
    ap.add_argument('--skip-speedup', action='store_true')
    ap.add_argument('--f16', action='store_true', help='also f16 weights (slow portable kernel)')
    ap.add_argument('--json', help='write every run\'s report to this file')
    a = ap.parse_args()
    if not a.bin:
        sys.exit('bench_decode: no spark-decode found; build it or pass --bin')
    out = {'streaming': streaming(a.bin, a.tokens, a.f16)}
    if not a.skip_speedup:
        out['speedup'] = speedup(a.bin, a.tokens, a.layers,
                                 [int(x) for x in a.worlds.split(',')])
    if a.json:
        with open(a.json, 'w') as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())

#!/usr/bin/env python3
"""Job launch latency (issue 6): `sparkctl run --group all -- true` on an
8-node simulated cluster, the whole command as a user runs it (process start,
request, the head recording the job in cluster.db, every node starting its rank
through the shim, the exits, the answer), median of N runs. Target: < 300 ms.

Rows: from the head's node, from a worker (the request is relayed to the head),
8 ranks per node (64 ranks), and `sparkctl version` as the floor (process start
plus one local round trip). Needs root (network namespaces).

Usage: bench/jobs/run.py [--build DIR] [--runs N] [--nodes N] [--topology ring|switch]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def sh(*args, **kw):
    return subprocess.run(list(args), check=True, capture_output=True, text=True, **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build-bench")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--topology", default="ring")
    args = ap.parse_args()
    sparkctl = os.path.abspath(os.path.join(args.build, "cli", "sparkctl"))
    prefix = f"bj{os.getpid() % 100000}"
    root = f"/run/sparkctl-sim/{prefix}"
    sh(sparkctl, "sim", "up", "--nodes", str(args.nodes), "--topology", args.topology,
       "--name", prefix)
    try:
        def node(k, *a):
            env = dict(os.environ, SPARKCTL_SOCKET=f"{root}/{prefix}-{k}/sparkd.sock")
            return subprocess.run([sparkctl, *a], env=env, capture_output=True, text=True)

        init = json.loads(node(1, "init", "--name", "bench", "-o", "json").stdout)
        for k in range(2, args.nodes + 1):
            r = node(k, "join", "169.254.100.1:7300", "--token", init["token"])
            if r.returncode:
                sys.exit(f"join of node {k} failed: {r.stderr}")
        for _ in range(200):
            st = json.loads(node(1, "status", "-o", "json").stdout)
            if sum(n["state"] == "ready" and n.get("fabric") is not None
                   for n in st["nodes"]) == args.nodes:
                break
            time.sleep(0.05)

        def timed(k, *a):
            samples = []
            for i in range(args.runs + 2):
                t0 = time.perf_counter()
                r = node(k, *a)
                dt = (time.perf_counter() - t0) * 1000
                if r.returncode:
                    sys.exit(f"sparkctl {' '.join(a)} failed: {r.stderr}")
                if i >= 2:  # two warm-up runs
                    samples.append(dt)
            samples.sort()
            return samples

        rows = [
            ("run --group all -- true (from the head)", timed(1, "run", "--group", "all", "--", "true")),
            ("run --group all -- true (from a worker)", timed(2, "run", "--group", "all", "--", "true")),
            ("run --group all --ranks-per-node 8 -- true",
             timed(1, "run", "--group", "all", "--ranks-per-node", "8", "--", "true")),
            ("version (floor: process + local round trip)", timed(1, "version")),
        ]
        print(f"\nJob launch latency, {args.nodes}-node {args.topology} sim, {args.runs} runs each (ms)\n")
        print(f"{'command':48} {'median':>8} {'p90':>8} {'min':>8} {'max':>8}")
        for name, s in rows:
            p90 = s[min(len(s) - 1, int(len(s) * 0.9))]
            print(f"{name:48} {statistics.median(s):8.1f} {p90:8.1f} {s[0]:8.1f} {s[-1]:8.1f}")
        med = statistics.median(rows[0][1])
        print(f"\ntarget: median of the first row < 300 ms: {'PASS' if med < 300 else 'FAIL'}")
    finally:
        subprocess.run([sparkctl, "sim", "down", "--name", prefix], capture_output=True)


if __name__ == "__main__":
    main()

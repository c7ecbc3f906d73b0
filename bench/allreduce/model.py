#!/usr/bin/env python3
"""Fit the alpha-beta cost model to spark-bench one-shot, relay and ring times
(the JSON lines run.sh writes with --out) and predict 200G RoCE.

  one-shot: T = alpha + (n-1) * m * beta      (n-1 copies leave each rank's link)
  relay:    T = L * (alpha + m * beta), L = floor(n/2)   (L dependent steps; in
            each a rank sends m to both neighbours, on two links at once)
  doubling: T = log2(n) * (alpha + m * beta)  (recursive doubling, powers of two)
  ring:     T = 2(n-1) * alpha + 2(n-1)/n * m * beta
alpha: latency of one step, beta: seconds per byte on one link. Fitted per
rank count by least squares on relative error (small and large sizes weigh
the same), with a separate alpha for a one-shot step (on loopback its n-1
sends are serialised by the CPU). Usage: model.py RESULTS.jsonl [--where loopback|sim-ring|sim-switch]
[--alpha-us 1.5 --link-gbs 24]
"""
import argparse
import json
import math
from collections import defaultdict


ALGOS = ("oneshot", "relay", "doubling", "ring")


def coeffs(algo, n, m):
    if algo == "oneshot":
        return 1.0, (n - 1) * m
    if algo == "relay":
        return float(n // 2), (n // 2) * m
    if algo == "doubling":
        k = math.log2(n)
        return k, k * m
    return 2.0 * (n - 1), 2.0 * (n - 1) / n * m


def solve(A, b):
    # small dense system, Gaussian elimination with partial pivoting
    n = len(b)
    M = [row[:] + [b[i]] for i, row in enumerate(A)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(M[r][c]))
        M[c], M[p] = M[p], M[c]
        if abs(M[c][c]) < 1e-300:
            return None
        for r in range(n):
            if r != c:
                f = M[r][c] / M[c][c]
                M[r] = [x - f * y for x, y in zip(M[r], M[c])]
    return [M[i][n] / M[i][i] for i in range(n)]


def fit(points):
    """points: (algo, a, b, t). Unknowns: one alpha per algorithm present, and
    beta, fitted on relative error. A one-shot step on a CPU-bound loopback
    costs more than a ring step (it posts n-1 messages), hence one alpha per
    algorithm. Returns ({algo: alpha}, beta)."""
    present = [al for al in ALGOS if any(p[0] == al for p in points)]
    k = len(present) + 1
    rows, rhs = [], []
    for algo, a, b, t in points:
        rows.append([a / t if algo == al else 0.0 for al in present] + [b / t])
        rhs.append(1.0)
    AtA = [[sum(r[i] * r[j] for r in rows) for j in range(k)] for i in range(k)]
    Atb = [sum(r[i] * y for r, y in zip(rows, rhs)) for i in range(k)]
    x = solve(AtA, Atb) or [0.0] * k
    x = [max(v, 0.0) for v in x]
    return dict(zip(present, x[:-1])), x[-1]


def predict(algo, n, m, alpha, beta):
    a, b = coeffs(algo, n, m)
    return a * alpha + b * beta


def human(b):
    for unit, s in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= s and b % s == 0:
            return "%d %s" % (b // s, unit)
    return "%d B" % b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--alpha-us", type=float, default=1.5)
    ap.add_argument("--link-gbs", type=float, default=24.0)
    ap.add_argument("--where", default="loopback",
                    help="which table of the results to fit: loopback, sim-ring, sim-switch")
    args = ap.parse_args()

    best = defaultdict(lambda: float("inf"))
    for line in open(args.results):
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if r.get("where", "loopback") != args.where:
            continue
        # one-shot and relay are only ever used below ~1 MiB (the calibration
        # stops there); above, on loopback they are dominated by socket-buffer
        # back-pressure
        if r["impl"] in ("sc_oneshot", "sc_relay", "sc_doubling") and r["bytes"] > (1 << 20):
            continue
        if r["impl"] in ("sc_oneshot", "sc_relay", "sc_doubling", "sc_ring"):
            k = (r["impl"][3:], r["n"], r["bytes"])
            best[k] = min(best[k], r["time_us"] * 1e-6)

    print("### Fitted on the measured times (%s)\n" % args.where)
    print("| ranks | alpha one-shot (us) | alpha relay step (us) | alpha doubling step (us) "
          "| alpha ring step (us) | 1/beta (GB/s) | median error one-shot | median error relay "
          "| median error doubling | median error ring |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in sorted({k[1] for k in best}):
        pts = [(a, *coeffs(a, n, m), t) for (a, nn, m), t in best.items() if nn == n]
        alphas, beta = fit(pts)
        errs = {}
        for algo in ALGOS:
            e = sorted(abs(predict(algo, n, m, alphas[algo], beta) - t) / t
                       for (a, nn, m), t in best.items() if nn == n and a == algo)
            errs[algo] = "%.0f%%" % (100 * e[len(e) // 2]) if e else "-"
        al = ["%.1f" % (alphas[a] * 1e6) if a in alphas else "-" for a in ALGOS]
        print("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (n, al[0], al[1], al[2], al[3],
              "%.2f" % (1e-9 / beta) if beta > 0 else "inf", errs["oneshot"], errs["relay"],
              errs["doubling"], errs["ring"]))

    alpha = args.alpha_us * 1e-6
    beta = 1.0 / (args.link_gbs * 1e9)
    print("\n### Predicted for 200G RoCE (alpha %.1f us, %.0f GB/s per link)\n" % (args.alpha_us, args.link_gbs))
    sizes = [8 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 16 << 20]
    print("| nodes | crossover | " + " | ".join(human(m) for m in sizes) + " |")
    print("|---|---|" + "---|" * len(sizes))
    for n in (2, 4, 8):
        if n == 2:
            cross = "one-shot always (saves one alpha)"
        else:
            # alpha + (n-1) m beta = 2(n-1) alpha + 2(n-1)/n m beta
            mstar = (2 * n - 3) * alpha / ((n - 1) * (n - 2) / n * beta)
            cross = "%.0f KiB" % (mstar / 1024)
        cells = []
        for m in sizes:
            o = predict("oneshot", n, m, alpha, beta) * 1e6
            d = predict("doubling", n, m, alpha, beta) * 1e6
            r = predict("ring", n, m, alpha, beta) * 1e6
            cells.append("%.1f / %.1f / %.1f" % (o, d, r))
        print("| %d | %s | %s |" % (n, cross, " | ".join(cells)))
    print("\ncells: one-shot / doubling / ring, microseconds per all-reduce, through a switch "
          "(crossover: one-shot against ring)")

    print("\n### Predicted for a physical ring of 200G RoCE (neighbour links only)\n")
    print("| nodes | relay steps / ring steps | crossover | " + " | ".join(human(m) for m in sizes) + " |")
    print("|---|---|---|" + "---|" * len(sizes))
    for n in (2, 4, 8):
        L = n // 2
        # L (alpha + m beta) = 2(n-1) alpha + 2(n-1)/n m beta
        den = (L - 2.0 * (n - 1) / n) * beta
        if den <= 0:
            cross = "relay always (saves one alpha)"
        else:
            cross = "%.0f KiB" % ((2 * (n - 1) - L) * alpha / den / 1024)
        cells = []
        for m in sizes:
            rl = predict("relay", n, m, alpha, beta) * 1e6
            r = predict("ring", n, m, alpha, beta) * 1e6
            cells.append("%.1f / %.1f" % (rl, r))
        print("| %d | %d / %d | %s | %s |" % (n, L, 2 * (n - 1), cross, " | ".join(cells)))
    print("\ncells: relay / ring, microseconds per all-reduce (one link to each neighbour)")


if __name__ == "__main__":
    main()

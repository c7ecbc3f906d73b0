#!/usr/bin/env python3
"""Turn the JSON lines of run.sh (and sim.sh) into side-by-side tables with
ratios and a target check. Input: lines of {"impl","n","bytes","time_us"}
(min over rounds), optionally "where" (loopback when absent; sim.sh writes
sim-ring and sim-switch): one table per place, loopback first."""
import json
import sys
from collections import defaultdict

IMPLS = ["sc_auto", "sc_oneshot", "sc_relay", "sc_doubling", "sc_ring", "mpi", "gloo_ring", "gloo_hd"]


TITLES = {
    "sim-ring": "simulated 4-node ring (sparkctl sim, veth cables; rank r on node r+1). "
                "spark-bench: neighbours only, as on a real ring; Open MPI and Gloo: "
                "non-neighbours through IP forwarding in a neighbour",
    "sim-switch": "simulated 4-node switch (sparkctl sim, veth to one bridge; rank r on node r+1)",
}


def main(path):
    groups = defaultdict(list)
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        groups[r.get("where", "loopback")].append(r)
    order = sorted(groups, key=lambda w: (w != "loopback", w))
    rc = 0
    for i, where in enumerate(order):
        if len(order) > 1:
            if i:
                print()
            print("## %s: %s" % (where, TITLES.get(where, "loopback TCP on this machine")))
        rc |= table(groups[where])
    return rc


def table(records):
    t = defaultdict(lambda: float("inf"))
    wrong = defaultdict(int)
    algo = {}
    decision = {}
    cross = defaultdict(list)
    for r in records:
        k = (r["impl"], r["n"], r["bytes"])
        if r["time_us"] < t[k]:
            t[k] = r["time_us"]
            if "algo" in r:
                algo[k] = r["algo"]
        wrong[k] += r.get("wrong", 0)
        if r["impl"] == "sc_auto" and "decision" in r:
            decision[r["n"]] = r["decision"]
        if r["impl"] == "sc_auto" and "oneshot_max" in r and r["bytes"] == min(
                x["bytes"] for x in records if x["impl"] == "sc_auto" and x["n"] == r["n"]):
            cross[r["n"]].append((r.get("small_algo", "oneshot"), r["oneshot_max"]))
    ns = sorted({k[1] for k in t})
    sizes = sorted({k[2] for k in t})

    def g(i, n, b):
        v = t.get((i, n, b))
        return v if v is not None and v != float("inf") else None

    def fmt(v):
        return "-" if v is None else ("%.1f" % v if v < 1e4 else "%.0f" % v)

    def ratio(a, b):
        return "-" if a is None or b is None else "%.2f" % (a / b)

    def busbw(n, b, us):
        return None if us is None else b / us / 1e3 * 2 * (n - 1) / n

    hdr = ("ranks", "bytes", "auto(us)", "pick", "oneshot", "relay", "doubling", "ring", "mpi", "gloo_ring",
           "gloo_hd", "auto/gloo_ring", "auto/mpi", "busbw auto", "busbw mpi", "bw auto/mpi")
    rows = []
    checks = []
    for n in ns:
        for b in sizes:
            a = g("sc_auto", n, b)
            o, rl, r = g("sc_oneshot", n, b), g("sc_relay", n, b), g("sc_ring", n, b)
            d = g("sc_doubling", n, b)
            m, gr, gh = g("mpi", n, b), g("gloo_ring", n, b), g("gloo_hd", n, b)
            ba, bm = busbw(n, b, a), busbw(n, b, m)
            rows.append((str(n), str(b), fmt(a), algo.get(("sc_auto", n, b), "-"), fmt(o), fmt(rl),
                         fmt(d), fmt(r),
                         fmt(m), fmt(gr), fmt(gh), ratio(a, gr), ratio(a, m),
                         "-" if ba is None else "%.3f" % ba, "-" if bm is None else "%.3f" % bm,
                         ratio(ba, bm)))
            if b <= 65536 and a is not None:
                if gr is not None:
                    checks.append((a / gr <= 0.5, "n=%d %dB latency auto/gloo_ring %.2f (<= 0.5)" % (n, b, a / gr)))
                if m is not None:
                    checks.append((a / m <= 1.0, "n=%d %dB latency auto/mpi %.2f (<= 1.0)" % (n, b, a / m)))
            if b >= 4 << 20 and ba is not None and bm is not None:
                checks.append((ba / bm >= 0.9, "n=%d %dB busbw auto/mpi %.2f (>= 0.9)" % (n, b, ba / bm)))
            # auto against the best of what it chooses between: the small
            # algorithms (one-shot and doubling, or relay where one-shot is
            # off) and ring
            small = [x for x in ((o, d) if o is not None else (rl,)) if x is not None]
            if a is not None and small and r is not None:
                best = min(small + [r])
                checks.append((a <= 1.1 * best, "n=%d %dB auto %.1f vs best %.1f (within 10%%)" % (n, b, a, best)))
    w = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(hdr)]
    line = "  ".join(h.rjust(w[i]) for i, h in enumerate(hdr))
    print(line)
    print("-" * len(line))
    last = None
    for r in rows:
        if last is not None and r[0] != last:
            print()
        last = r[0]
        print("  ".join(c.rjust(w[i]) for i, c in enumerate(r)))
    bad = [k for k, v in wrong.items() if v]
    print()
    for n in sorted(decision):
        print("spark-bench, %d ranks: %s" % (n, decision[n]))
    for n in sorted(cross):
        algos = sorted({c[0] for c in cross[n]})
        xs = sorted(c[1] for c in cross[n])
        print("spark-bench, %d ranks: auto uses %s up to %s bytes (crossover per round), ring above"
              % (n, "/".join(algos), ", ".join(str(x) for x in xs)))
    print("times: microseconds per all-reduce (f32 sum), min over rounds; busbw in GB/s = bytes/time*2(n-1)/n")
    if bad:
        print("WRONG RESULTS:", ", ".join("%s n=%d %dB" % k for k in bad))
    miss = [c[1] for c in checks if not c[0]]
    print("targets: %d checked, %d met, %d missed" % (len(checks), len(checks) - len(miss), len(miss)))
    for m in miss:
        print("  missed:", m)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

#!/usr/bin/env python3
"""Count test cases across meson test logs and print 'N passed, N failed'.

Criterion executables report their own case counts ("Synthesis: Tested: ..."),
so one meson test may stand for many cases; any other test counts as one.
Usage: summary.py LABEL=BUILD_DIR/meson-logs/testlog.json ... [--extra PASSED FAILED]
"""
import json
import re
import sys

SYN = re.compile(r"Synthesis: Tested: (\d+) \| Passing: (\d+) \| Failing: (\d+) \| Crashing: (\d+)")


def count(path):
    passed = failed = 0
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            t = json.loads(line)
            text = (t.get("stdout") or "") + (t.get("stderr") or "")
            m = SYN.findall(text)
            ok = t.get("result") in ("OK", "EXPECTEDFAIL", "SKIP")
            if m:
                p = sum(int(x[1]) for x in m)
                fl = sum(int(x[2]) + int(x[3]) for x in m)
                if not ok and fl == 0:
                    fl = 1  # crashed or timed out before its synthesis
            else:
                p, fl = (1, 0) if ok else (0, 1)
            passed += p
            failed += fl
            rows.append((t.get("name"), t.get("result"), p, fl))
    return passed, failed, rows


def main(argv):
    total_p = total_f = 0
    extra = None
    args = list(argv)
    if "--extra" in args:
        i = args.index("--extra")
        extra = (int(args[i + 1]), int(args[i + 2]))
        del args[i:i + 3]
    for a in args:
        label, path = a.split("=", 1)
        p, f, rows = count(path)
        for name, res, rp, rf in rows:
            print(f"  {label:6} {name:40} {res:10} {rp} passed, {rf} failed")
        total_p += p
        total_f += f
    if extra:
        total_p += extra[0]
        total_f += extra[1]
    print(f"{total_p} passed, {total_f} failed")
    return 1 if total_f else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

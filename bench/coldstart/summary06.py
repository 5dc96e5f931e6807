"""summary06.py FIRST_OUT AGAIN_OUT [UNPREPARED_OUT]: the training step rows of train06.sh's
processes (hindsight-bench-gpu's "profile train memory" rows) and the ratios a restart is
judged by, in CPU seconds (every thread's) with wall seconds beside them. "prepare" is
xla.Trainer.Prepare before the first step (weights placed, optimizer moments made), which
the daemon runs at start; the unprepared restart's first step does that work itself."""
import json
import os
import sys


def row(out):
    d = json.load(open(os.path.join(out, "results.json")))
    for st in d["stages"]:
        for r in st.get("data", []):
            if r["what"] == "profile train memory":
                return r["fields"]
    sys.exit(f"{out}: no 'profile train memory' row")


names = ("first (empty cache)", "restarted", "restarted, unprepared (as before)")
rows = [(n, row(o)) for n, o in zip(names, sys.argv[1:])]
print("| process | prepare CPU-s (wall) | first step CPU-s (wall) | compiled (s) | loaded (s in the step) | warm step CPU-s (wall) | first / warm, CPU | (prepare + first) / warm |")
print("|---|---|---|---|---|---|---|---|")
for name, r in rows:
    c = r.get("cold_compile", {})
    p, pw = r.get("prepare_cpu_seconds", 0), r.get("prepare_seconds", 0)
    print(f"| {name} | {p:.1f} ({pw:.1f}) | {r['cold_cpu_seconds']:.1f} ({r['cold_seconds']:.1f}) | {c.get('Compiled', 0)} ({c.get('CompileTime', 0) / 1e9:.1f}) "
          f"| {c.get('Loaded', 0)} ({c.get('LoadTime', 0) / 1e9:.2f}) | {r['warm_cpu_seconds']:.1f} ({r['warm_seconds']:.1f}) "
          f"| {r['cold_cpu_seconds'] / r['warm_cpu_seconds']:.2f}× | {(p + r['cold_cpu_seconds']) / r['warm_cpu_seconds']:.2f}× |")
w = sum(r["warm_cpu_seconds"] for _, r in rows) / len(rows)
print()
print(f"warm step (mean of {len(rows)}): {w:.1f} CPU-s; " + "; ".join(f"{n} first step {r['cold_cpu_seconds'] / w:.2f}× warm" for n, r in rows))

"""summary06.py FIRST_OUT AGAIN_OUT: the training step rows of train06.sh's two processes
(hindsight-bench-gpu's "profile train memory" rows) and the ratios a restart is judged by,
in CPU seconds (every thread's) with wall seconds beside them."""
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


first, again = row(sys.argv[1]), row(sys.argv[2])
print("| process | first step CPU-s (wall) | compiled (s) | loaded (s in the step) | warm step CPU-s (wall) | first / warm, CPU |")
print("|---|---|---|---|---|---|")
for name, r in (("first (empty cache)", first), ("restarted", again)):
    c = r.get("cold_compile", {})
    print(f"| {name} | {r['cold_cpu_seconds']:.1f} ({r['cold_seconds']:.1f}) | {c.get('Compiled', 0)} ({c.get('CompileTime', 0) / 1e9:.1f}) "
          f"| {c.get('Loaded', 0)} ({c.get('LoadTime', 0) / 1e9:.2f}) | {r['warm_cpu_seconds']:.1f} ({r['warm_seconds']:.1f}) "
          f"| {r['cold_cpu_seconds'] / r['warm_cpu_seconds']:.2f}× |")
w = (first["warm_cpu_seconds"] + again["warm_cpu_seconds"]) / 2
print()
print(f"warm step (mean of 2): {w:.1f} CPU-s; cold first step {first['cold_cpu_seconds'] / w:.2f}× warm; "
      f"restarted first step {again['cold_cpu_seconds'] / w:.2f}× warm")

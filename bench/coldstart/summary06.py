"""summary06.py FIRST_OUT RESTART_OUT...: the training step rows of train06.sh's processes
(hindsight-bench-gpu's "profile train memory" rows) and the ratios a restart is judged by,
in CPU seconds (every thread's) with wall seconds beside them. A directory named again*
is a restart, unprepared* a restart as before issue 42's restart work: "prepare" is
xla.Trainer.Prepare before the first step (weights placed, optimizer moments made), which
the daemon runs at start, and an unprepared first step does that work itself. Each
restart is judged against the mean warm step of every process in the run."""
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


def label(out):
    b = os.path.basename(out.rstrip("/"))
    if b.startswith("unprepared"):
        return f"restarted, unprepared (as before) {b[len('unprepared'):]}"
    if b.startswith("again"):
        return f"restarted {b[len('again'):]}"
    return "first (empty cache)"


rows = [(label(o), row(o)) for o in sys.argv[1:]]
w = sum(r["warm_cpu_seconds"] for _, r in rows) / len(rows)
print("| process | prepare CPU-s (wall) | first step CPU-s (wall) | compiled (s) | loaded (s in the step) | warm step CPU-s (wall) | first / own warm | first / mean warm | (prepare + first) / mean warm |")
print("|---|---|---|---|---|---|---|---|---|")
for name, r in rows:
    c = r.get("cold_compile", {})
    p, pw = r.get("prepare_cpu_seconds", 0), r.get("prepare_seconds", 0)
    print(f"| {name} | {p:.1f} ({pw:.1f}) | {r['cold_cpu_seconds']:.1f} ({r['cold_seconds']:.1f}) | {c.get('Compiled', 0)} ({c.get('CompileTime', 0) / 1e9:.1f}) "
          f"| {c.get('Loaded', 0)} ({c.get('LoadTime', 0) / 1e9:.2f}) | {r['warm_cpu_seconds']:.1f} ({r['warm_seconds']:.1f}) "
          f"| {r['cold_cpu_seconds'] / r['warm_cpu_seconds']:.2f}× | {r['cold_cpu_seconds'] / w:.2f}× | {(p + r['cold_cpu_seconds']) / w:.2f}× |")
print()
print(f"warm step (mean of {len(rows)}): {w:.1f} CPU-s")
for kind in ("restarted", "restarted, unprepared"):
    cs = [r["cold_cpu_seconds"] for n, r in rows if n.startswith(kind) and (kind != "restarted" or "unprepared" not in n)]
    if cs:
        print(f"{kind}: first step mean {sum(cs) / len(cs):.1f} CPU-s = {sum(cs) / len(cs) / w:.2f}× the mean warm step ({len(cs)} processes)")

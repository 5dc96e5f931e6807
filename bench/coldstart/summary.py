"""summary.py FIRST.log AGAIN.log: each step's took, compile and cache-load time from
hindsightd's JSON log (bench/coldstart/run.sh), and the ratios a restart is judged by."""
import json
import sys


def steps(path):
    out = []
    for line in open(path):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("component") == "device" and str(e.get("message", "")).startswith("step") and "took" in e and "phase" not in e:
            out.append(e)
    return out


first, again = steps(sys.argv[1]), steps(sys.argv[2])
print("| run | step | took (s) | programs compiled | compile (s) | programs loaded | load (s) |")
print("|---|---|---|---|---|---|---|")
for name, ss in (("first (empty cache)", first), ("restarted", again)):
    for i, e in enumerate(ss):
        print(f"| {name} | {i + 1} | {e['took'] / 1000:.1f} | {e.get('programs_compiled', 0)} | {e.get('compile_took', 0) / 1000:.1f} "
              f"| {e.get('programs_loaded', 0)} | {e.get('load_took', 0) / 1000:.2f} |")
warm = [e["took"] for e in first[1:]] + [e["took"] for e in again[1:]]
if warm and first and again:
    w = sum(warm) / len(warm)
    print()
    print(f"warm step (mean of {len(warm)}): {w / 1000:.1f} s; cold first step {first[0]['took'] / w:.2f}× warm; "
          f"restarted first step {again[0]['took'] / w:.2f}× warm")

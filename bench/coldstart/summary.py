"""summary.py FIRST.log AGAIN.log [JSON_OUT]: each step's took (wall), CPU time (cpu_took,
where the daemon logs it), compile and cache-load time from hindsightd's JSON log
(bench/coldstart/run.sh), and the ratios a restart is judged by: against the mean warm
step, in CPU seconds where logged (on a shared machine wall time moves with the load)."""
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


def cpu(e):
    return e.get("cpu_took", 0) / 1000


first, again = steps(sys.argv[1]), steps(sys.argv[2])
print("| run | step | took (s) | CPU (s) | programs compiled | compile (s) | programs loaded | load (s) |")
print("|---|---|---|---|---|---|---|---|")
rows = []
for name, ss in (("first (empty cache)", first), ("restarted", again)):
    for i, e in enumerate(ss):
        rows.append({"run": name, "step": i + 1, "took_s": e["took"] / 1000, "cpu_s": cpu(e),
                     "compiled": e.get("programs_compiled", 0), "compile_s": e.get("compile_took", 0) / 1000,
                     "loaded": e.get("programs_loaded", 0), "load_s": e.get("load_took", 0) / 1000})
        r = rows[-1]
        print(f"| {name} | {i + 1} | {r['took_s']:.1f} | {r['cpu_s']:.1f} | {r['compiled']} | {r['compile_s']:.1f} "
              f"| {r['loaded']} | {r['load_s']:.2f} |")
result = {"steps": rows}
warm = first[1:] + again[1:]
if warm and first and again:
    w = sum(e["took"] for e in warm) / len(warm)
    print()
    print(f"wall: warm step (mean of {len(warm)}) {w / 1000:.1f} s; cold first step {first[0]['took'] / w:.2f}× warm; "
          f"restarted first step {again[0]['took'] / w:.2f}× warm")
    result.update(warm_took_s=w / 1000, cold_over_warm_wall=first[0]["took"] / w, restart_over_warm_wall=again[0]["took"] / w)
    if all("cpu_took" in e for e in first + again):
        wc = sum(cpu(e) for e in warm) / len(warm)
        print(f"CPU: warm step (mean of {len(warm)}) {wc:.1f} CPU-s; cold first step {cpu(first[0]) / wc:.2f}× warm; "
              f"restarted first step {cpu(again[0]) / wc:.2f}× warm (against the restarted process's own warm step "
              f"{cpu(again[0]) / cpu(again[1]) if len(again) > 1 else float('nan'):.2f}×)")
        result.update(warm_cpu_s=wc, cold_over_warm_cpu=cpu(first[0]) / wc, restart_over_warm_cpu=cpu(again[0]) / wc)
if len(sys.argv) > 3:
    with open(sys.argv[3], "w") as f:
        json.dump(result, f, indent=1)

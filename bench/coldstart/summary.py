"""summary.py FIRST.log AGAIN.log [AGAIN2.log ...] [JSON_OUT]: each step's took (wall), CPU
time (cpu_took, where the daemon logs it), compile and cache-load time from hindsightd's JSON
log (bench/coldstart/run.sh), what each start paid before its first step (the "policy loaded"
line's prepared_in, and preload_wait with programs_preloaded where logged), and the ratios a
restart is judged by: against the mean warm step (every run's steps after its first), in CPU
seconds where logged (on a shared machine wall time moves with the load)."""
import json
import sys


def read(path):
    out, start = [], {}
    for line in open(path):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("component") == "device" and str(e.get("message", "")).startswith("step") and "took" in e and "phase" not in e:
            out.append(e)
        if e.get("message") == "policy loaded":
            start = e
    return out, start


def cpu(e):
    return e.get("cpu_took", 0) / 1000


args = sys.argv[1:]
jsonOut = args.pop() if args and args[-1].endswith(".json") else None
runs = [(("first (empty cache)" if i == 0 else "restarted" if len(args) == 2 else f"restart {i}"),) + read(p)
        for i, p in enumerate(args)]
print("| run | step | took (s) | CPU (s) | programs compiled | compile (s) | programs loaded | load (s) |")
print("|---|---|---|---|---|---|---|---|")
rows = []
for name, ss, _ in runs:
    for i, e in enumerate(ss):
        rows.append({"run": name, "step": i + 1, "took_s": e["took"] / 1000, "cpu_s": cpu(e),
                     "compiled": e.get("programs_compiled", 0), "compile_s": e.get("compile_took", 0) / 1000,
                     "loaded": e.get("programs_loaded", 0), "load_s": e.get("load_took", 0) / 1000})
        r = rows[-1]
        print(f"| {name} | {i + 1} | {r['took_s']:.1f} | {r['cpu_s']:.1f} | {r['compiled']} | {r['compile_s']:.1f} "
              f"| {r['loaded']} | {r['load_s']:.2f} |")
starts = []
print()
print("| run | prepared_in (s) | programs preloaded before the first step | preload wait (s) |")
print("|---|---|---|---|")
for name, _, st in runs:
    s = {"run": name, "prepared_in_s": st.get("prepared_in", 0) / 1000, "programs_preloaded": st.get("programs_preloaded"),
         "preload_wait_s": st["preload_wait"] / 1000 if "preload_wait" in st else None}
    starts.append(s)
    wait = "—" if s["preload_wait_s"] is None else f"{s['preload_wait_s']:.1f}"
    pre = "—" if s["programs_preloaded"] is None else s["programs_preloaded"]
    print(f"| {name} | {s['prepared_in_s']:.1f} | {pre} | {wait} |")
result = {"steps": rows, "starts": starts}
first, agains = runs[0][1], [r[1] for r in runs[1:]]
warm = first[1:] + [e for a in agains for e in a[1:]]
if warm and first and all(agains):
    w = sum(e["took"] for e in warm) / len(warm)
    restarts = [a[0]["took"] / w for a in agains]
    print()
    print(f"wall: warm step (mean of {len(warm)}) {w / 1000:.1f} s; cold first step {first[0]['took'] / w:.2f}× warm; "
          f"restarted first step {', '.join(f'{r:.2f}×' for r in restarts)} warm")
    result.update(warm_took_s=w / 1000, cold_over_warm_wall=first[0]["took"] / w, restart_over_warm_wall=restarts[0],
                  restarts_over_warm_wall=restarts)
    if all("cpu_took" in e for e in first + [e for a in agains for e in a]):
        wc = sum(cpu(e) for e in warm) / len(warm)
        rc = [cpu(a[0]) / wc for a in agains]
        own = [cpu(a[0]) / cpu(a[1]) if len(a) > 1 else float("nan") for a in agains]
        print(f"CPU: warm step (mean of {len(warm)}) {wc:.1f} CPU-s; cold first step {cpu(first[0]) / wc:.2f}× warm; "
              f"restarted first step {', '.join(f'{r:.2f}×' for r in rc)} warm (against the restarted process's own "
              f"warm step {', '.join(f'{r:.2f}×' for r in own)})")
        result.update(warm_cpu_s=wc, cold_over_warm_cpu=cpu(first[0]) / wc, restart_over_warm_cpu=rc[0],
                      restarts_over_warm_cpu=rc, restarts_over_own_warm_cpu=own)
if jsonOut:
    with open(jsonOut, "w") as f:
        json.dump(result, f, indent=1)

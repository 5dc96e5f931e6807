#!/usr/bin/env python3
"""Summary table of bench/gpu/realsize_cpu.sh OUTDIR: before/after hindsight runs
(bench-gpu profile stage) and the PyTorch peer, with peak RSS from /usr/bin/time -v
and the load average noted before each run. Markdown on stdout."""
import json
import os
import re
import sys


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def max_rss(run_dir):
    t = read(os.path.join(run_dir, "time.txt")) or ""
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", t)
    return int(m.group(1)) * 1024 if m else None


def load_avg(run_dir):
    u = read(os.path.join(run_dir, "uptime.txt")) or ""
    m = re.search(r"load average: ([\d.]+), ([\d.]+), ([\d.]+)", u)
    return m.group(1) if m else "?"


def records(run_dir):
    r = read(os.path.join(run_dir, "results.json"))
    if r is None:
        return None
    out = {}
    for st in json.loads(r)["stages"]:
        if st["name"] != "profile":
            continue
        out["status"] = st["status"] + (": " + st["error"] if st.get("error") else "")
        for d in st["data"]:
            out[d["what"]] = d["fields"]
    return out


def logprobs(path):
    r = read(path)
    if r is None:
        return None
    v = json.loads(r)
    return v["logprobs"] if isinstance(v, dict) else v


def maxdiff(a, b):
    if a is None or b is None or len(a) != len(b):
        return None
    return max(abs(x - y) for x, y in zip(a, b))


def gb(x):
    return "—" if x is None else f"{x / 1e9:.2f} GB"


def s(x, fmt="{:.1f} s"):
    return "—" if x is None else fmt.format(x)


def main():
    out = sys.argv[1]
    rows, res = [], {}
    print("| run | load | cold pass (compile, programs) | warm pass | warm tok/s | warm CPU time | warm execute / copy | peak RSS | RSS after load | load avg |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in ("before", "after"):
        d = os.path.join(out, name)
        rec = records(d)
        if rec is None:
            continue
        res[name] = rec
        ld, cold, warm = rec.get("profile load", {}), rec.get("profile score cold", {}), rec.get("profile score warm", {})
        res[name + "_rss"] = max_rss(d)
        print(f"| hindsight {name} | {s(ld.get('seconds'))} | {s(cold.get('seconds'))} ({s(cold.get('compile_seconds'))}, "
              f"{cold.get('programs_compiled', '—')}) | {s(warm.get('seconds'))} | {s(warm.get('tokens_per_s'), '{:.0f}')} | {s(warm.get('cpu_seconds'))} | "
              f"{s(warm.get('execute_seconds'))} / {s(warm.get('copy_seconds'), '{:.2f} s')} | {gb(max_rss(d))} | "
              f"{gb(ld.get('rss_bytes'))} | {load_avg(d)} |")
        if rec.get("status", "ok") != "ok":
            print(f"|  ({name}: {rec['status']}) ||||||||||")
    td = os.path.join(out, "torch")
    torch = None
    if read(os.path.join(td, "score.json")):
        try:
            torch = json.loads(read(os.path.join(td, "score.json")))
        except ValueError:
            torch = None
    if torch:
        blas = (read(os.path.join(td, "blas.txt")) or "").strip()
        print(f"| PyTorch {torch.get('torch')} eager, {torch.get('threads')} threads ({blas}) | {s(torch.get('load_seconds'))} | "
              f"{s(torch.get('first_seconds'))} (no compile) | {s(torch.get('seconds'))} | {s(torch.get('tokens_per_s'), '{:.0f}')} | {s(torch.get('cpu_seconds'))} | — | "
              f"{gb(max_rss(td))} | — | {load_avg(td)} |")
    print()
    lp_after = logprobs(os.path.join(out, "after", "profile-logprobs.json"))
    lp_before = logprobs(os.path.join(out, "before", "profile-logprobs.json"))
    lines = []

    def ratio(what, a, b):
        if a and b:
            lines.append(f"- {what}: {a / b:.2f}×")

    for p in ("cold", "warm"):
        key = f"profile score {p}"
        ta = res.get("after", {}).get(key, {}).get("seconds")
        tb = res.get("before", {}).get(key, {}).get("seconds")
        ratio(f"{p} pass, before / after (speed-up)", tb, ta)
        if torch:
            ratio(f"{p} pass, hindsight after / PyTorch (time)", ta, torch.get("seconds"))
            ratio(f"{p} pass, hindsight before / PyTorch (time)", tb, torch.get("seconds"))
    ratio("peak RSS, before / after", res.get("before_rss"), res.get("after_rss"))
    if torch:
        ratio("peak RSS, hindsight after / PyTorch", res.get("after_rss"), max_rss(td))
        d = maxdiff(lp_after, torch.get("logprobs"))
        if d is not None:
            lines.append(f"- log-probs, max |Δ| hindsight after vs PyTorch: {d:.2e}")
    d = maxdiff(lp_before, lp_after)
    if d is not None:
        lines.append(f"- log-probs, max |Δ| before vs after: {d:.2e}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

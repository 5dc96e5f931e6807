#!/usr/bin/python3
"""Summarise run.sh's bench/score JSON files: per configuration (threads, rollouts × tokens) the
rounds' min/median/max of hindsight's and transformers' tokens per CPU-second and per wall-second
and of their ratios, the load averages seen, and the largest log-prob difference.

usage: summarize.py [--out PREFIX] DIR [DIR ...] → PREFIX.json and PREFIX.md: by default
DIR/summary for one DIR; for several, the rounds of all of them in summary-all beside the first
"""
import glob
import json
import os
import re
import statistics
import sys


def mmm(xs):
    return {"min": min(xs), "median": statistics.median(xs), "max": max(xs), "all": xs}


def main():
    dirs, prefix = sys.argv[1:], None
    if dirs[:1] == ["--out"]:
        prefix, dirs = dirs[1], dirs[2:]
    if prefix is None:
        prefix = os.path.join(dirs[0], "summary") if len(dirs) == 1 else os.path.join(os.path.dirname(dirs[0].rstrip("/")) or ".", "summary-all")
    runs = {}
    for p in sorted(f for d in dirs for f in glob.glob(os.path.join(d, "t*-*x*-r*.json"))):
        m = re.match(r"t(\d+)-(\d+)x(\d+)-r(\d+)\.json", os.path.basename(p))
        th, n, t, r = map(int, m.groups())
        runs.setdefault((th, n, t), []).append((p, json.load(open(p))))
    out, lines = [], [
        "| threads each | rollouts | rounds | hindsight tokens/CPU-s | transformers tokens/CPU-s | ratio per CPU-s | "
        "hindsight tokens/s | transformers tokens/s | ratio by the wall | load (1-min) | max \\|Δ log-prob\\| |",
        "| ---: | --- | ---: | --- | --- | --- | --- | --- | --- | --- | ---: |"]
    for (th, n, t), rs in sorted(runs.items()):
        rs.sort()
        tok = n * t
        g_cpu = [tok / j["go"]["cpu_seconds"] for _, j in rs]
        g_wall = [tok / j["go"]["seconds"] for _, j in rs]
        p_cpu = [tok / j["peer"]["cpu_seconds"] for _, j in rs]
        p_wall = [tok / j["peer"]["seconds"] for _, j in rs]
        r_cpu = [j["ratio_per_cpu_second"] for _, j in rs]
        r_wall = [j["ratio_wall"] for _, j in rs]
        loads = [float(j[k].split()[0]) for _, j in rs for k in ("load_before", "load_after")]
        diff = max(j["max_abs_logprob_diff"] for _, j in rs)
        row = {"threads": th, "rollouts": n, "tokens": t, "rounds": len(rs),
               "hindsight_tokens_per_cpu_s": mmm(g_cpu), "transformers_tokens_per_cpu_s": mmm(p_cpu),
               "ratio_per_cpu_s": mmm(r_cpu), "hindsight_tokens_per_s": mmm(g_wall),
               "transformers_tokens_per_s": mmm(p_wall), "ratio_wall": mmm(r_wall),
               "load_1min": {"min": min(loads), "max": max(loads)}, "max_abs_logprob_diff": diff}
        out.append(row)

        def f(x, fmt):
            return f"{fmt.format(x['min'])} / **{fmt.format(x['median'])}** / {fmt.format(x['max'])}"
        lines.append(f"| {th} | {n} × {t} | {len(rs)} | {f(row['hindsight_tokens_per_cpu_s'], '{:.0f}')} | "
                     f"{f(row['transformers_tokens_per_cpu_s'], '{:.0f}')} | {f(row['ratio_per_cpu_s'], '{:.2f}')} | "
                     f"{f(row['hindsight_tokens_per_s'], '{:.0f}')} | {f(row['transformers_tokens_per_s'], '{:.0f}')} | "
                     f"{f(row['ratio_wall'], '{:.2f}')} | {min(loads):.1f}–{max(loads):.1f} | {diff:.1e} |")
    json.dump(out, open(prefix + ".json", "w"), indent=1)
    open(prefix + ".md", "w").write("min / **median** / max over the rounds\n\n" + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

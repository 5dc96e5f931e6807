"""What bench/generate's two PyTorch peers share (bench/score's take best_of too): timing one batch of prompts the way
the Go side does, and the JSON they print.

time_batches(d, new, generate) runs generate(prompts, n) → tokens [rows][n] for each
batch of MODEL_DIR d's prompts.json: prefill is generating 1 token (the prompt's
forward and the first token), decode the rest of generating NEW+1 tokens, each the
best of 3 after a warm-up, by the wall (perf_counter) and by the process's CPU time
(process_time: every thread of it), so that a run on a shared machine can be compared
per CPU-second.
"""
import json
import time


def best_of(f, n=3):
    """The least wall and, separately, the least CPU seconds of n calls of f after one more."""
    f()
    wall = cpu = float("inf")
    for _ in range(n):
        t0, c0 = time.perf_counter(), time.process_time()
        f()
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return wall, cpu


def time_batches(d, new, generate):
    runs = []
    for prompts in json.load(open(f"{d}/prompts.json"))["batches"]:
        first, first_cpu = best_of(lambda: generate(prompts, 1))
        full, full_cpu = best_of(lambda: generate(prompts, new + 1))
        runs.append({"batch": len(prompts), "prefill_seconds": first, "decode_seconds": full - first,
                     "prefill_cpu_seconds": first_cpu, "decode_cpu_seconds": full_cpu - first_cpu,
                     "tokens": generate(prompts, new + 1)})
    return runs

#!/usr/bin/python3
"""PyTorch side of bench/backends: scoring and one training step of MODEL_DIR on the CPU.

usage: torch_bench.py MODEL_DIR THREADS REPS MAX_SECONDS
  → JSON on stdout: {torch, threads, tokens, logprobs,
                     score: {first_s, best_s, reps}, train: {first_s, best_s, reps}}

MODEL_DIR holds config.json, model.safetensors and tokens.json (the rollout). The model is
the independent reference implementation of xla/testdata/gen_reference.py (float32, eager,
one causal pass over the whole rollout):

  scoring   the no_grad forward, log π(y_t | y_<t) for t = 1..T-1;
  training  forward with autograd, loss −Σ_t w_t log π(y_t) with fixed random weights w
            (zero on the first 16 positions, like the Go rollout's untrainable prefix),
            backward, global-norm clipping to 1 and one torch.optim.AdamW step (lr 1e-6,
            betas 0.9/0.999, eps 1e-8, weight decay 0.01 on matrices only: the Go
            trainer's DefaultAdamW), then zero_grad.

Each is run once as a warm-up (first_s), then up to REPS more times, stopping early once
the timed runs pass MAX_SECONDS; best_s is the fastest of those.
"""
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "xla", "testdata"))
from gen_reference import forward, read_safetensors  # noqa: E402


def timed(fn, reps, max_seconds):
    t0 = time.perf_counter()
    out = fn()
    first = time.perf_counter() - t0
    best, total, n = float("inf"), 0.0, 0
    while n < reps:
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best, total, n = min(best, dt), total + dt, n + 1
        if total > max_seconds:
            break
    return out, {"first_s": first, "best_s": best, "reps": n}


def main():
    d, threads, reps, max_seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    torch.set_num_threads(threads)
    cfg = json.load(open(f"{d}/config.json"))
    w = read_safetensors(f"{d}/model.safetensors")
    tokens = json.load(open(f"{d}/tokens.json"))
    T = len(tokens)

    def score():
        with torch.no_grad():
            return forward(cfg, w, tokens)

    lp, score_t = timed(score, reps, max_seconds)

    params = {k: v.clone().requires_grad_(True) for k, v in w.items()}
    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
        lr=1e-6, betas=(0.9, 0.999), eps=1e-8,
    )
    g = torch.Generator().manual_seed(1)
    weights = torch.randn(T - 1, generator=g) / T  # w_t for t = 1..T-1
    weights[:15] = 0  # positions 1..15 untrainable

    def train_step():
        lpt = forward(cfg, params, tokens)
        loss = -(weights * lpt).sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params.values(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss)

    _, train_t = timed(train_step, reps, max_seconds)
    json.dump({"torch": torch.__version__, "threads": torch.get_num_threads(), "tokens": T,
               "logprobs": [float(x) for x in lp], "score": score_t, "train": train_t}, sys.stdout)


if __name__ == "__main__":
    main()

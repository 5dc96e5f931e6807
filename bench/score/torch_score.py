#!/usr/bin/python3
"""PyTorch side of bench/score: time the forward of MODEL_DIR over MODEL_DIR/tokens.json.

usage: torch_score.py MODEL_DIR THREADS  → JSON {tokens_per_second, logprobs, torch} on stdout

Uses the independent reference implementation of xla/testdata/gen_reference.py (one
causal pass, float32, no_grad); best of 3 after a warm-up.
"""
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "xla", "testdata"))
from gen_reference import forward, read_safetensors  # noqa: E402


def main():
    d, threads = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(threads)
    cfg = json.load(open(f"{d}/config.json"))
    w = read_safetensors(f"{d}/model.safetensors")
    tokens = json.load(open(f"{d}/tokens.json"))
    with torch.no_grad():
        lp = forward(cfg, w, tokens)
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            forward(cfg, w, tokens)
            best = min(best, time.perf_counter() - t0)
    json.dump({"tokens_per_second": len(tokens) / best, "logprobs": [float(x) for x in lp], "torch": torch.__version__}, sys.stdout)


if __name__ == "__main__":
    main()

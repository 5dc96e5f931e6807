#!/usr/bin/python3
"""PyTorch side of bench/score: time the forward of MODEL_DIR over MODEL_DIR/tokens.json.

usage: torch_score.py MODEL_DIR THREADS  → JSON {seconds, cpu_seconds, logprobs, torch,
threads} on stdout

tokens.json is {"rollouts": [[ids]…]}. Uses the independent reference implementation of
xla/testdata/gen_reference.py (one causal pass a rollout, float32, no_grad); best of 3
after a warm-up, by the wall and by the process's CPU time (bench/generate/peer_timing.py's best_of). Runs on
any torch, Debian's python3-torch included.
"""
import json
import os
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "xla", "testdata"))
sys.path.insert(0, os.path.join(here, "..", "generate"))
from gen_reference import forward, read_safetensors  # noqa: E402
from peer_timing import best_of  # noqa: E402


def main():
    d, threads = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(threads)
    cfg = json.load(open(f"{d}/config.json"))
    w = read_safetensors(f"{d}/model.safetensors")
    rollouts = json.load(open(f"{d}/tokens.json"))["rollouts"]
    with torch.no_grad():
        lps = [forward(cfg, w, r) for r in rollouts]
        wall, cpu = best_of(lambda: [forward(cfg, w, r) for r in rollouts])
    json.dump({"seconds": wall, "cpu_seconds": cpu, "torch": torch.__version__, "threads": torch.get_num_threads(),
               "logprobs": [[float(x) for x in lp] for lp in lps]}, sys.stdout)


if __name__ == "__main__":
    main()

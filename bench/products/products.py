#!/usr/bin/python3
"""PyTorch as bench/products' peer: the same product shapes, the same work.

usage: products.py THREADS SHAPES_JSON → JSON [cpu_seconds per shape] on stdout

SHAPES_JSON is bench/products' list ({"name", "B", "M", "K", "N", "reps"}). Each shape
runs reps products, the input shifted by a different constant each time and each
product summed, as the Go side's program does: x @ w.T with w [N, K] for B = 1,
torch.bmm over [B, M, K]·[B, K, N] otherwise. float32, no_grad; the least process
CPU time of 3 calls after a warm-up (bench/generate/peer_timing.py's best_of).
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "generate"))
from peer_timing import best_of  # noqa: E402


def main():
    torch.set_num_threads(int(sys.argv[1]))
    out = []
    for p in json.loads(sys.argv[2]):
        b, m, k, n, reps = p["B"], p["M"], p["K"], p["N"], p["reps"]
        if b == 1:
            x, w = torch.randn(m, k), torch.randn(n, k)
            prod = lambda xr: xr @ w.T  # noqa: E731
        else:
            x, w = torch.randn(b, m, k), torch.randn(b, k, n)
            prod = lambda xr: torch.bmm(xr, w)  # noqa: E731

        def f():
            return sum(prod(x + r * 1e-7).sum() for r in range(reps))

        with torch.no_grad():
            out.append(best_of(f)[1])
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()

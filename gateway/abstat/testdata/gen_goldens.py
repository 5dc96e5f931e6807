#!/usr/bin/env python3
"""Independent float64 reference for gateway/abstat (python3 standard library only).

Writes goldens.json beside this script:
  python3 gateway/abstat/testdata/gen_goldens.py

Wilson and Newcombe use statistics.NormalDist().inv_cdf for z (the Go code uses
math.Erfinv); the bootstrap replays the same SplitMix64 stream, so its bounds
match exactly; Unit is FNV-1a 64 over the seed's 8 little-endian bytes and the id.
"""
import json
import math
import os
from statistics import NormalDist

MASK = (1 << 64) - 1


def z_of(c):
    return NormalDist().inv_cdf(0.5 + c / 2)


def wilson(k, n, c):
    if n <= 0:
        return [0.0, 0.0, 1.0]
    z = z_of(c)
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z / den * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return [p, max(0.0, mid - half), min(1.0, mid + half)]


def newcombe(k1, n1, k2, n2, c):
    if n1 <= 0 or n2 <= 0:
        return [0.0, -1.0, 1.0]
    p1, l1, u1 = wilson(k1, n1, c)
    p2, l2, u2 = wilson(k2, n2, c)
    d = p1 - p2
    lo = d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    hi = d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return [d, max(-1.0, lo), min(1.0, hi)]


class SplitMix64:
    def __init__(self, seed):
        self.s = seed & MASK

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & MASK
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)


def resample_mean(xs, r):
    s = 0.0
    for _ in xs:
        s += xs[r.next() % len(xs)]
    return s / len(xs)


def mean(xs):
    s = 0.0
    for x in xs:
        s += x
    return s / len(xs)


def percentile(stats, c):
    stats.sort()
    b = len(stats)
    alpha = (1 - c) / 2
    lo = min(max(int(math.floor(alpha * b)), 0), b - 1)
    hi = min(max(int(math.ceil((1 - alpha) * b)) - 1, 0), b - 1)
    return stats[lo], stats[hi]


def boot_mean(xs, c, B, seed):
    r = SplitMix64(seed)
    stats = [resample_mean(xs, r) for _ in range(B)]
    lo, hi = percentile(stats, c)
    return [mean(xs), lo, hi]


def boot_diff(a, b, c, B, seed):
    r = SplitMix64(seed)
    stats = []
    for _ in range(B):
        ma = resample_mean(a, r)
        stats.append(ma - resample_mean(b, r))
    lo, hi = percentile(stats, c)
    return [mean(a) - mean(b), lo, hi]


def unit(seed, sid):
    h = 0xCBF29CE484222325
    for i in range(8):
        h ^= (seed >> (8 * i)) & 0xFF
        h = (h * 0x100000001B3) & MASK
    for ch in sid.encode():
        h ^= ch
        h = (h * 0x100000001B3) & MASK
    return (h >> 11) / float(1 << 53)


def main():
    out = {"z": [], "wilson": [], "newcombe": [], "boot_mean": [], "boot_diff": [], "unit": []}
    for c in (0.8, 0.9, 0.95, 0.99):
        out["z"].append({"c": c, "z": z_of(c)})
    for k, n in [(0, 1), (1, 1), (0, 20), (1, 29), (15, 148), (81, 263), (50, 100), (7, 9), (999, 1000), (3, 10000)]:
        for c in (0.9, 0.95, 0.99):
            out["wilson"].append({"k": k, "n": n, "c": c, "want": wilson(k, n, c)})
    for k1, n1, k2, n2 in [(56, 70, 48, 80), (9, 10, 3, 10), (6, 7, 2, 7), (5, 56, 0, 29), (0, 10, 0, 20), (0, 10, 0, 10), (10, 10, 0, 20), (120, 200, 140, 200)]:
        for c in (0.9, 0.95):
            out["newcombe"].append({"k1": k1, "n1": n1, "k2": k2, "n2": n2, "c": c, "want": newcombe(k1, n1, k2, n2, c)})
    a = [((i * 37) % 11) / 10.0 for i in range(40)]
    b = [((i * 53) % 7) / 6.0 - 0.2 for i in range(25)]
    for seed in (1, 42):
        out["boot_mean"].append({"xs": a, "c": 0.95, "resamples": 500, "seed": seed, "want": boot_mean(a, 0.95, 500, seed)})
        out["boot_diff"].append({"a": a, "b": b, "c": 0.9, "resamples": 400, "seed": seed, "want": boot_diff(a, b, 0.9, 400, seed)})
    for seed in (0, 7, 12345678901234):
        for sid in ("gw-1", "s-000", "a", "gw-20261205T010203-0123456789abcdef"):
            out["unit"].append({"seed": seed, "id": sid, "want": unit(seed, sid)})
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "goldens.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()

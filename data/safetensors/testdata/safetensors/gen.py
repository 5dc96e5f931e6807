#!/usr/bin/env python3
"""Golden safetensors files for data/safetensors_test.go, written by Python's safetensors.

    pip install safetensors numpy ml_dtypes
    python3 data/safetensors/testdata/safetensors/gen.py      # rewrites golden.safetensors

golden.safetensors holds, with metadata {"format": "pt", "source": "gen.py"}:
  special_f32 / special_f16 / special_bf16  the same values (±0, subnormals of each
      type, ±Inf, quiet ±NaN, max, ties) as F32 and as numpy / ml_dtypes cast them
  round_src (F32) / round_f16 / round_bf16  2048 values whose casts exercise
      round-to-nearest-even, overflow to Inf and subnormal results
  matrix_f32 [3, 4], scalar_f32 [], empty_f16 [0, 3], ids_i32 [5], ids_i64 [2],
      bytes_u8 [3], mask_bool [4]  shapes and raw dtypes
The Go test compares every value bit for bit, and rewrites the same tensors with
WriteSafetensors expecting identical bytes (tensor order, header, padding). Python
orders __metadata__ keys by hash, differently each run; this script keeps a run in
which they came out sorted, the order hindsight always writes.
Versions used for the committed file: see golden.versions.txt.
"""
import os
import sys

import ml_dtypes
import numpy as np
import safetensors
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))


def f32(bits):
    return np.array(bits, dtype=np.uint32).view(np.float32)


def special_values():
    bits = [
        0x00000000, 0x80000000,  # +0, -0
        0x3F800000, 0xBF800000, 0x40490FDB,  # 1, -1, pi
        0x7F800000, 0xFF800000,  # +Inf, -Inf
        0x7FC00000, 0xFFC00000,  # quiet NaN, negative quiet NaN
        0x7F7FFFFF, 0xFF7FFFFF,  # max / min float32 (bf16: rounds to Inf)
        0x00000001, 0x807FFFFF,  # float32 subnormals (min, -max)
        0x00800000,  # smallest float32 normal
        0x477FE000,  # 65504, the largest float16
        0x477FF000,  # 65520: float16 tie between 65504 and Inf -> Inf
        0x477FEFFF,  # just below that tie -> 65504
        0x33800000,  # 2^-24, smallest float16 subnormal
        0x33000000,  # 2^-25: tie between 0 and 2^-24 -> 0 (even)
        0x33000001,  # just above 2^-25 -> 2^-24
        0x387FC000,  # largest float16 subnormal (1023 * 2^-24)
        0x38800000,  # 2^-14, smallest float16 normal
        0x3F808000,  # bf16 tie, even below: 1.0
        0x3F818000,  # bf16 tie, odd below: rounds up
        0x3F800800, 0x3F801800,  # float16 ties (even / odd)
        0x00010000, 0x00008000,  # bf16 subnormal, bf16 subnormal tie
    ]
    return f32(bits)


def round_values(n=2048):
    rng = np.random.default_rng(20261202)
    sign = rng.integers(0, 2, n, dtype=np.uint32) << 31
    # exponents around float16's range (-24..16) and bf16's extremes
    exp = rng.integers(103, 147, n, dtype=np.uint32)
    exp[: n // 8] = rng.integers(0, 255, n // 8, dtype=np.uint32)  # anything finite
    man = rng.integers(0, 1 << 23, n, dtype=np.uint32)
    man[n // 4: n // 2] = (man[n // 4: n // 2] & ~np.uint32(0x1FFF)) | 0x1000  # float16 ties
    man[n // 2: 3 * n // 4] = (man[n // 2: 3 * n // 4] & ~np.uint32(0xFFFF)) | 0x8000  # bf16 ties
    return f32(sign | (exp << 23) | man)


def main():
    special = special_values()
    src = round_values()
    with np.errstate(over="ignore"):
        tensors = {
            "special_f32": special,
            "special_f16": special.astype(np.float16),
            "special_bf16": special.astype(ml_dtypes.bfloat16),
            "round_src": src,
            "round_f16": src.astype(np.float16),
            "round_bf16": src.astype(ml_dtypes.bfloat16),
            "matrix_f32": np.arange(12, dtype=np.float32).reshape(3, 4) / 4 - 1,
            "scalar_f32": np.array(3.5, dtype=np.float32),
            "empty_f16": np.zeros((0, 3), dtype=np.float16),
            "ids_i32": np.array([0, 1, -1, 2**31 - 1, -(2**31)], dtype=np.int32),
            "ids_i64": np.array([2**40, -7], dtype=np.int64),
            "bytes_u8": np.array([0, 127, 255], dtype=np.uint8),
            "mask_bool": np.array([True, False, False, True]),
        }
    path = os.path.join(HERE, "golden.safetensors")
    # safetensors writes __metadata__ in hash-map order, which varies from run to run;
    # hindsight writes it sorted. Keep the run whose order is sorted, so the Go test
    # can expect identical bytes.
    for _ in range(100):
        save_file(tensors, path, metadata={"format": "pt", "source": "gen.py"})
        with open(path, "rb") as f:
            if f.read(60)[8:].startswith(b'{"__metadata__":{"format":"pt","source":"gen.py"}'):
                break
    else:
        sys.exit("safetensors never wrote the metadata keys in sorted order")
    with open(os.path.join(HERE, "golden.versions.txt"), "w") as f:
        f.write(f"python {sys.version.split()[0]}\nsafetensors {safetensors.__version__}\n"
                f"numpy {np.__version__}\nml_dtypes {ml_dtypes.__version__}\n")
    print("wrote", path)


if __name__ == "__main__":
    main()

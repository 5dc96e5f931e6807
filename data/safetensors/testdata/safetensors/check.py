#!/usr/bin/env python3
"""Check a safetensors file that hindsight's Go writer made, with Python's safetensors.

    python3 data/safetensors/testdata/safetensors/check.py FILE

FILE is what TestSafetensorsPythonReadsBack writes (the same bytes as the committed
go_written.safetensors): tensors src (F32), src_bf16 and src_f16 (Go's casts of src),
matrix (F32 [2, 3]), empty (BF16 [0, 4]) and metadata {"format": "pt", "writer":
"hindsight"}. The check
  1. opens FILE with safetensors' own parser (safe_open), which validates the header,
     offsets and coverage, and reads every tensor it has a numpy dtype for;
  2. checks that src_bf16 and src_f16 equal ml_dtypes' / numpy's round-to-nearest-even
     casts of src bit for bit;
  3. re-serializes the tensors with safetensors and checks that the result equals
     FILE: the same length, data section, tensor order and header entries (Python
     orders __metadata__ keys by hash, differently each run; hindsight sorts them).
It prints one line per check and "OK" last; it exits 1 on the first failure.
"""
import json
import sys

import ml_dtypes
import numpy as np
import safetensors
from safetensors import deserialize, safe_open
from safetensors.numpy import save

NP = {"F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16, "I32": np.int32,
      "I64": np.int64, "U8": np.uint8, "BOOL": np.bool_}


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def main():
    path = sys.argv[1]
    raw = open(path, "rb").read()
    print(f"safetensors {safetensors.__version__}, numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__}")

    with safe_open(path, framework="numpy") as f:
        meta = f.metadata()
        keys = sorted(f.keys())
        for k in keys:
            if f.get_slice(k).get_dtype() in ("F32", "F16"):
                f.get_tensor(k)
    print("safe_open: ok, tensors", keys)
    want_meta = {"format": "pt", "writer": "hindsight"}
    if meta != want_meta:
        fail(f"metadata {meta}, want {want_meta}")
    print("metadata: ok", dict(sorted(meta.items())))

    arrays = {}
    for name, info in sorted(deserialize(raw)):
        a = np.frombuffer(bytes(info["data"]), dtype=NP[info["dtype"]]).reshape(info["shape"])
        arrays[name] = a
        print(f"tensor {name}: {info['dtype']} {info['shape']}")

    src = arrays["src"]
    with np.errstate(over="ignore", invalid="ignore"):
        for name, dt in (("src_bf16", ml_dtypes.bfloat16), ("src_f16", np.float16)):
            want = src.astype(dt).view(np.uint16)
            got = arrays[name].view(np.uint16)
            bad = np.nonzero(want != got)[0]
            if len(bad):
                i = bad[0]
                fail(f"{name}[{i}]: Go wrote {got[i]:#06x}, Python casts {src.view(np.uint32)[i]:#010x} to {want[i]:#06x} ({len(bad)} differ)")
            print(f"{name}: all {len(got)} values equal Python's cast bit for bit")
    if not np.array_equal(arrays["matrix"], np.arange(6, dtype=np.float32).reshape(2, 3) * 0.5):
        fail(f"matrix = {arrays['matrix']}")
    print("matrix: ok")

    again = save(arrays, metadata=meta)
    if len(again) != len(raw):
        fail(f"Python re-serializes the tensors to {len(again)} bytes, the file has {len(raw)}")
    n = int.from_bytes(raw[:8], "little")
    if again[:8] != raw[:8] or again[8 + n:] != raw[8 + n:]:
        fail("Python re-serializes to another header length or data section")
    mine, theirs = json.loads(raw[8:8 + n]), json.loads(again[8:8 + n])
    if list(mine.items())[1:] != list(theirs.items())[1:] or mine["__metadata__"] != theirs["__metadata__"]:
        fail(f"Python re-serializes to another header:\n{theirs}\nfile:\n{mine}")
    if n % 8 != 0:
        fail(f"header length {n} is not a multiple of 8")
    print(f"re-serialized by Python: same {len(raw)} bytes up to the order of __metadata__ keys")
    print("OK")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""transformers' generate as bench/generate's peer: KV-cached greedy generation on MODEL_DIR.

usage: transformers_generate.py MODEL_DIR THREADS NEW  → JSON on stdout:
  {"torch", "transformers", "runs": [{"batch", "prefill_seconds", "decode_seconds",
   "prefill_cpu_seconds", "decode_cpu_seconds", "tokens"}]}

MODEL_DIR is a Hugging Face model directory (config.json, model.safetensors) with
prompts.json beside it ({"batches": [[[ids]…]…]}, the prompts of one batch of equal
length). Each batch runs `model.generate(ids, max_new_tokens=n, min_new_tokens=n,
do_sample=False, use_cache=True)` (greedy, transformers' own KV cache, no EOS stop, so
every row decodes n tokens), float32, under no_grad. prefill_seconds is generating 1
token (the prompt's forward and the first token), decode_seconds the rest of generating
NEW+1 tokens, best of 3 after a warm-up, by the wall and by CPU time (peer_timing.py):
the same split as hindsight's side.

Needs transformers: PyPI torch 2.x + transformers 5.x, or transformers 4.46.3 over
Debian's torch 1.13 in a venv made with --system-site-packages; never installed by CI.
"""
import json
import os
import sys

import torch
import transformers
import transformers.generation.utils as generation_utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_timing import time_batches  # noqa: E402
from peer_transformers import load  # noqa: E402

# generate() asks whether the model is FSDP-managed by importing torch.distributed.fsdp,
# which fails on Debian's torch 1.13 under Python 3.11 (a dataclass with a mutable
# default); nothing here is distributed.
generation_utils.is_fsdp_managed_module = lambda module: False


def main():
    d, threads, new = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    model = load(d, threads)

    def gen(prompts, n):
        ids = torch.tensor(prompts, dtype=torch.long)
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                             do_sample=False, use_cache=True, pad_token_id=0)
        return out[:, ids.shape[1]:].tolist()

    with torch.no_grad():
        runs = time_batches(d, new, gen)
    json.dump({"torch": torch.__version__, "transformers": transformers.__version__, "runs": runs}, sys.stdout)


if __name__ == "__main__":
    main()

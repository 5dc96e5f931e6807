#!/usr/bin/env python3
"""Per-token log-probs of a hindsight model directory under transformers.

Writes the goldens that TestTransformersGoldens (cmd/hindsight/transformers_test.go)
compares with `hindsight score`:

    {"transformers": "4.46.3", "torch": "...", "dtype": "float64", "model": DIR,
     "sequences": [{"tokens": [...], "logprobs": [null, lp1, ...]}, ...]}

logprobs[t] = log p(tokens[t] | tokens[:t]) in nats. transformers runs the forward
in float64 (--dtype; the weights are upcast exactly), so the goldens carry no float32
rounding of their own: on the committed checkpoint transformers' float32 forward is
itself up to 6.2e-6 nats off its float64 one, hindsight's (float32) 2.5e-6. The model is loaded with AutoModelForCausalLM from the
directory as a server would find it: transformers reads model.safetensors (or the
shards model.safetensors.index.json names) and nothing under trainer/.

Default: the committed checkpoint testdata/transformers/checkpoints/latest and
testdata/transformers/goldens.json (run from the repository root). The live check
(scripts/transformers_live_check.sh) passes --model and --out.

Environment (Debian 12; PyPI torch is several GB, Debian's is used):
    apt-get install -y python3-torch          # torch 1.13
    /usr/bin/python3 -m venv --system-site-packages /work/venvs/tf
    /work/venvs/tf/bin/pip install --no-deps transformers==4.46.3 tokenizers==0.20.3 \
        safetensors==0.5.3 huggingface_hub==0.30.2 tqdm filelock packaging regex
(transformers 4.47+ needs torch.distributed.tensor, i.e. torch >= 2; numpy, pyyaml
and requests come from Debian.)
"""
import argparse
import json
import os
import random
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

PINNED = "4.46.3"  # data.TransformersVersion


def sequences(cfg):
    """Token sequences to score: text through the byte tokenizer when the model has
    its 265-id vocabulary, random ids otherwise, plus a long random one (several
    scorer chunks) and the shortest."""
    rng = random.Random(14)
    seqs = []
    if cfg.vocab_size == 265:
        bos = cfg.bos_token_id
        for text in ["the grep call failed because the path was wrong",
                     "search_code finds it in one call; the tests pass now. ünïcode ✓"]:
            seqs.append([bos] + list(text.encode("utf-8")))
    else:
        seqs.append([rng.randrange(cfg.vocab_size) for _ in range(48)])
    seqs.append([rng.randrange(cfg.vocab_size) for _ in range(200)])
    seqs.append([rng.randrange(cfg.vocab_size) for _ in range(2)])
    return seqs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="testdata/transformers/checkpoints/latest")
    ap.add_argument("--out", default="testdata/transformers/goldens.json")
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"],
                    help="dtype of transformers' forward")
    ap.add_argument("--any-version", action="store_true",
                    help=f"allow a transformers other than {PINNED} (live check only)")
    a = ap.parse_args()
    if transformers.__version__ != PINNED and not a.any_version:
        sys.exit(f"transformers {transformers.__version__}: the goldens are made with {PINNED}")
    torch.manual_seed(0)
    cfg = AutoConfig.from_pretrained(a.model)
    dtype = getattr(torch, a.dtype)
    model = AutoModelForCausalLM.from_pretrained(a.model, torch_dtype=dtype)
    model.eval()
    out = []
    with torch.no_grad():
        for toks in sequences(cfg):
            ids = torch.tensor([toks], dtype=torch.long)
            logits = model(input_ids=ids).logits[0].double()  # [T, vocab]
            lp = torch.log_softmax(logits, dim=-1)
            per = [None] + [lp[t - 1, toks[t]].item() for t in range(1, len(toks))]
            out.append({"tokens": toks, "logprobs": per})
    model_ref = a.model
    if not os.path.isabs(model_ref):
        model_ref = os.path.relpath(os.path.abspath(a.model), os.path.dirname(os.path.abspath(a.out)))
    doc = {"transformers": transformers.__version__, "torch": torch.__version__, "dtype": a.dtype,
           "model": model_ref, "sequences": out}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    n = sum(len(s["tokens"]) - 1 for s in out)
    print(f"{a.out}: {n} log-probs of {a.model} under transformers {transformers.__version__}, torch {torch.__version__}")


if __name__ == "__main__":
    main()

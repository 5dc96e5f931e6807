#!/usr/bin/env python3
"""Per-token log-probs and merged weights of a PEFT LoRA adapter under peft.

Writes the goldens that TestPEFTGoldens (xla/lora_peft_test.go) compares with
hindsight's own adapter loading (xla.OpenPolicy of the adapter directory) and merge:

    {"peft": "0.13.2", "transformers": "4.46.3", "torch": "...",
     "loaded_adapter_tensors": N,
     "sequences": [{"tokens": [...], "logprobs": [null, lp1, ...]}, ...],
     "merged": {"model.layers.0.self_attn.q_proj.weight":
                {"sum": s, "sumsq": q, "stride": k, "samples": [w[0], w[k], ...]}, ...}}

The base is loaded with AutoModelForCausalLM from base_model_name_or_path of the
adapter's adapter_config.json (relative to the adapter directory), the adapter with
PeftModel.from_pretrained, as a user of PEFT would; the script checks that every
lora_A/lora_B tensor of adapter_model.safetensors was loaded into the model (not
left at PEFT's initialisation). The forward runs in float64 (the model is cast
after loading). merge_and_unload() then gives the merged weights, summarised per
adapted projection.

Default: the committed adapter testdata/lora/adapter and testdata/lora/peft_goldens.json
(run from the repository root).

Environment: the venv of scripts/transformers_goldens.py (Debian's torch 1.13 with
transformers 4.46.3), plus
    /work/venvs/tf/bin/pip install --no-deps peft==0.13.2 accelerate==1.0.1 fsspec==2024.9.0
(peft 0.13.2 is the newest release that supports transformers 4.46 on torch 1.13;
psutil comes from Debian).
"""
import argparse
import json
import os
import sys

import peft
import torch
import transformers
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from transformers_goldens import sequences  # noqa: E402

PINNED = "0.13.2"
SAMPLES = 32


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--adapter", default="testdata/lora/adapter")
    ap.add_argument("--out", default="testdata/lora/peft_goldens.json")
    a = ap.parse_args()
    if peft.__version__ != PINNED:
        sys.exit(f"peft {peft.__version__}: the goldens are made with {PINNED}")
    cfg = json.load(open(os.path.join(a.adapter, "adapter_config.json")))
    base = cfg["base_model_name_or_path"]
    if not os.path.isabs(base):
        base = os.path.join(a.adapter, base)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float32)
    model = PeftModel.from_pretrained(model, a.adapter)
    model = model.double()
    model.eval()

    # Every tensor of the file must be in the model, under PEFT's adapter name.
    file = load_file(os.path.join(a.adapter, "adapter_model.safetensors"))
    state = model.state_dict()
    loaded = 0
    for name, t in file.items():
        key = name.replace(".lora_A.weight", ".lora_A.default.weight").replace(".lora_B.weight", ".lora_B.default.weight")
        if key not in state:
            sys.exit(f"{name}: PEFT has no {key}")
        if not torch.equal(state[key].float(), t.float()):
            sys.exit(f"{name}: the model's {key} is not the file's")
        loaded += 1
    lora_keys = [k for k in state if ".lora_" in k]
    if len(lora_keys) != loaded:
        sys.exit(f"the model has {len(lora_keys)} LoRA tensors, the file {loaded}")

    out = []
    with torch.no_grad():
        for toks in sequences(AutoConfig.from_pretrained(base)):
            ids = torch.tensor([toks], dtype=torch.long)
            logits = model(input_ids=ids).logits[0].double()
            lp = torch.log_softmax(logits, dim=-1)
            out.append({"tokens": toks, "logprobs": [None] + [lp[t - 1, toks[t]].item() for t in range(1, len(toks))]})
        merged = model.merge_and_unload().state_dict()
    summary = {}
    targets = set(cfg["target_modules"])
    for name, w in merged.items():
        parts = name.split(".")
        if len(parts) < 2 or parts[-1] != "weight" or parts[-2] not in targets:
            continue
        flat = w.double().flatten()
        stride = max(1, flat.numel() // SAMPLES)
        summary[name] = {"sum": float(flat.sum()), "sumsq": float((flat * flat).sum()), "stride": stride,
                         "samples": [float(flat[i * stride]) for i in range(SAMPLES)]}
    doc = {"peft": peft.__version__, "transformers": transformers.__version__, "torch": torch.__version__,
           "loaded_adapter_tensors": loaded, "sequences": out, "merged": summary}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    n = sum(len(s["tokens"]) - 1 for s in out)
    print(f"{a.out}: {n} log-probs and {len(summary)} merged projections of {a.adapter} under peft {peft.__version__}")


if __name__ == "__main__":
    main()

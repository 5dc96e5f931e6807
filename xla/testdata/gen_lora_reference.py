#!/usr/bin/python3
"""Independent PyTorch reference of a LoRA gradient and one AdamW step, for
xla/'s TestLoRAGradientVsPyTorch.

usage: gen_lora_reference.py DIR

DIR holds config.json and model.safetensors (the base), adapter_model.safetensors
(PEFT names: base_model.model.<module>.lora_A.weight [r, in], .lora_B.weight
[out, r]) and inputs.json:
  {"tokens": [...], "weights": [w_t per position t], "rank": r, "alpha": α,
   "adamw": {"lr", "beta1", "beta2", "eps", "weight_decay", "clip_norm"}}
It writes DIR/lora_reference.json:
  {"loss": L, "grads": {name: [...]}, "stepped": {name: [...]}, "grad_norm": ‖g‖}
where L = −Σ_t w_t · log p(tokens[t] | tokens[:t]) over t ≥ 1, the gradient is
taken with respect to every adapter tensor, and "stepped" are the adapters after one
torch.optim.AdamW step following torch.nn.utils.clip_grad_norm_.

The LoRA is written here by hand, independently of hindsight and of PEFT: every
adapted projection's weight is W + (α/r)·B·A (the merged form; the same function as
x·Wᵀ + (α/r)·(x·Aᵀ)·Bᵀ), inside the plain Llama forward of gen_reference.py.
Everything runs in float64 on the CPU. Needs torch and numpy only (Debian:
python3-torch python3-numpy); the Go test (-update-lora) runs it, CI never does.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_reference import forward, read_safetensors  # noqa: E402

PREFIX = "base_model.model."


class LoRAWeights(dict):
    """The base weights, with each adapted projection's weight read as
    W + scale·B·A."""

    def __init__(self, base, adapters, scale):
        super().__init__(base)
        self.adapters = adapters
        self.scale = scale

    def __getitem__(self, name):
        w = dict.__getitem__(self, name)
        if name.endswith(".weight"):
            a = self.adapters.get(PREFIX + name[: -len(".weight")] + ".lora_A.weight")
            if a is not None:
                b = self.adapters[PREFIX + name[: -len(".weight")] + ".lora_B.weight"]
                return w + self.scale * (b @ a)
        return w


def main():
    torch.set_num_threads(1)
    d = sys.argv[1]
    cfg = json.load(open(f"{d}/config.json"))
    inp = json.load(open(f"{d}/inputs.json"))
    base = {k: v.double() for k, v in read_safetensors(f"{d}/model.safetensors").items()}
    adapters = {k: v.double().requires_grad_(True) for k, v in read_safetensors(f"{d}/adapter_model.safetensors").items()}
    names = sorted(adapters)
    w = LoRAWeights(base, adapters, inp["alpha"] / inp["rank"])
    lp = forward(cfg, w, inp["tokens"])  # lp[i] = log p(tokens[i+1] | tokens[:i+1])
    weights = torch.tensor(inp["weights"][1:], dtype=torch.float64)
    loss = -(weights * lp).sum()
    loss.backward()
    grads = {n: adapters[n].grad.detach().clone() for n in names}

    o = inp["adamw"]
    params = [adapters[n] for n in names]
    norm = torch.nn.utils.clip_grad_norm_(params, o["clip_norm"])
    opt = torch.optim.AdamW(params, lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"], weight_decay=o["weight_decay"])
    opt.step()
    out = {
        "torch": torch.__version__,
        "loss": float(loss),
        "grad_norm": float(norm),
        "grads": {n: [float(x) for x in grads[n].flatten()] for n in names},
        "stepped": {n: [float(x) for x in adapters[n].detach().flatten()] for n in names},
    }
    json.dump(out, open(f"{d}/lora_reference.json", "w"))
    print(f"{d}: loss {float(loss):.6f}, grad norm {float(norm):.6f}, {len(names)} adapter tensors")


if __name__ == "__main__":
    main()

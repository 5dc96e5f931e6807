#!/usr/bin/python3
"""PyTorch side of bench/generate: KV-cached greedy generation on MODEL_DIR's weights.

usage: torch_generate.py MODEL_DIR THREADS NEW  → JSON on stdout:
  {"torch", "runs": [{"batch", "prefill_seconds", "decode_seconds", "prefill_cpu_seconds",
   "decode_cpu_seconds", "tokens"}]}

MODEL_DIR holds config.json, model.safetensors and prompts.json ({"batches": [[[ids]…]…]},
prompts of one batch of equal length). The loop mirrors xla.Sampler: a prefill of every
prompt but its last token writes the cache, then each step feeds one token per row and
takes the argmax. The caches are preallocated [batch, kv_heads, capacity, head_dim] and a
step attends to the valid prefix only. prefill_seconds is prefill plus the first step
(generate 1 token), decode_seconds the rest of generating NEW+1 tokens; best of 3 after a
warm-up, by the wall and by CPU time (peer_timing.py). float32, no_grad, eager. The
architecture (llama/mistral/qwen2/qwen3) is that of xla/testdata/gen_reference.py, whose
weight reader it uses.
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "xla", "testdata"))
from gen_reference import inv_freq, read_safetensors, rms_norm, rotate_half  # noqa: E402
from peer_timing import time_batches  # noqa: E402


class Model:
    def __init__(self, cfg, w):
        self.cfg, self.w = cfg, w
        mt = cfg["model_type"]
        self.d = cfg["hidden_size"]
        self.nh = cfg["num_attention_heads"]
        self.nkv = cfg.get("num_key_value_heads") or self.nh
        self.hd = cfg.get("head_dim") or self.d // self.nh
        self.eps = cfg["rms_norm_eps"]
        attn_bias = cfg.get("attention_bias", False)
        self.qkv_bias = mt == "qwen2" or (attn_bias and mt != "mistral")
        self.o_bias = attn_bias and mt in ("llama", "qwen3")
        self.mlp_bias = mt == "llama" and cfg.get("mlp_bias", False)
        self.qk_norm = mt == "qwen3"
        self.inv = inv_freq(cfg, self.hd)
        self.layers = cfg["num_hidden_layers"]
        self.head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]

    def lin(self, name, v, bias):
        y = v @ self.w[name + ".weight"].T
        if bias:
            y = y + self.w[name + ".bias"]
        return y

    def new_cache(self, b, capacity):
        shape = (b, self.nkv, capacity, self.hd)
        return [(torch.zeros(shape), torch.zeros(shape)) for _ in range(self.layers)]

    def forward(self, ids, start, cache):
        """ids [b, t] at positions start…start+t-1 (same for all rows) → logits of the last position [b, vocab]."""
        b, t = ids.shape
        w, nh, nkv, hd = self.w, self.nh, self.nkv, self.hd
        x = w["model.embed_tokens.weight"][ids]  # [b, t, d]
        pos = torch.arange(start, start + t, dtype=torch.float32)
        freqs = pos[:, None] * self.inv[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]  # [1, 1, t, hd]
        end = start + t
        mask = torch.full((t, end), float("-inf")).triu(start + 1)  # query i sees keys ≤ start+i
        for i in range(self.layers):
            p = f"model.layers.{i}."
            h = rms_norm(x, w[p + "input_layernorm.weight"], self.eps)
            q = self.lin(p + "self_attn.q_proj", h, self.qkv_bias).view(b, t, nh, hd).transpose(1, 2)
            k = self.lin(p + "self_attn.k_proj", h, self.qkv_bias).view(b, t, nkv, hd).transpose(1, 2)
            v = self.lin(p + "self_attn.v_proj", h, self.qkv_bias).view(b, t, nkv, hd).transpose(1, 2)
            if self.qk_norm:
                q = rms_norm(q, w[p + "self_attn.q_norm.weight"], self.eps)
                k = rms_norm(k, w[p + "self_attn.k_norm.weight"], self.eps)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            kc, vc = cache[i]
            kc[:, :, start:end] = k
            vc[:, :, start:end] = v
            rep = nh // nkv
            kk = kc[:, :, :end].repeat_interleave(rep, dim=1)  # [b, nh, end, hd]
            vv = vc[:, :, :end].repeat_interleave(rep, dim=1)
            att = (q @ kk.transpose(2, 3)) / math.sqrt(hd) + mask
            o = (torch.softmax(att, dim=-1) @ vv).transpose(1, 2).reshape(b, t, nh * hd)
            x = x + self.lin(p + "self_attn.o_proj", o, self.o_bias)
            h = rms_norm(x, w[p + "post_attention_layernorm.weight"], self.eps)
            g = self.lin(p + "mlp.gate_proj", h, self.mlp_bias)
            u = self.lin(p + "mlp.up_proj", h, self.mlp_bias)
            x = x + self.lin(p + "mlp.down_proj", torch.nn.functional.silu(g) * u, self.mlp_bias)
        x = rms_norm(x[:, -1], w["model.norm.weight"], self.eps)
        return x @ self.head.T

    def generate(self, prompts, new):
        ids = torch.tensor(prompts, dtype=torch.long)
        b, p = ids.shape
        cache = self.new_cache(b, p + new)
        if p > 1:
            self.forward(ids[:, : p - 1], 0, cache)
        cur, out = ids[:, p - 1 :], []
        for i in range(new):
            nxt = self.forward(cur, p - 1 + i, cache).argmax(-1)
            out.append(nxt)
            cur = nxt[:, None]
        return torch.stack(out, 1).tolist()


def main():
    d, threads, new = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(threads)
    m = Model(json.load(open(f"{d}/config.json")), read_safetensors(f"{d}/model.safetensors"))
    with torch.no_grad():
        runs = time_batches(d, new, m.generate)
    json.dump({"torch": torch.__version__, "runs": runs}, sys.stdout)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""PyTorch peer of bench/attention: score MODEL_DIR/TOKENS chunk by chunk against a KV
cache, with attention over the causal prefix only, as xla.Scorer does.

usage: torch_attention.py MODEL_DIR TOKENS_JSON CHUNK THREADS
       → JSON {seconds, tokens_per_second, peak_rss_bytes, logprobs, torch, attention} on stdout

Each chunk of CHUNK positions (start … end-1) attends to keys 0 … end-1 of the cache.
The mask is built explicitly and aligned to the lower right (query i of the chunk sees
keys ≤ start+i): SDPA's is_causal aligns it to the top left when the query chunk is
shorter than the keys, which would be wrong here. With torch ≥ 2 the attention is
torch.nn.functional.scaled_dot_product_attention with that boolean mask; with torch
1.x (Debian's 1.13) the same mask added to explicit scores. Queries are taken in
sub-blocks so one score tensor stays under 2^25 floats. float32, no_grad, one run.
The model code is xla/testdata/gen_reference.py's (rms_norm, inv_freq, rotate_half,
read_safetensors).
"""
import json
import math
import os
import resource
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "xla", "testdata"))
from gen_reference import inv_freq, read_safetensors, rms_norm, rotate_half  # noqa: E402

SDPA = hasattr(torch.nn.functional, "scaled_dot_product_attention")
MAX_SCORES = 1 << 25


def attend(q, k, v, start):
    """q: [heads, n, hd] at positions start…; k, v: [heads, end, hd] → [heads, n, hd]."""
    nh, n, hd = q.shape
    end = k.shape[1]
    step = max(1, min(n, MAX_SCORES // (nh * end)))
    kpos = torch.arange(end)
    out = []
    for a in range(0, n, step):
        b = min(n, a + step)
        qpos = torch.arange(start + a, start + b)
        visible = kpos[None, :] <= qpos[:, None]  # [b-a, end]: lower-right aligned
        if SDPA:
            out.append(torch.nn.functional.scaled_dot_product_attention(q[:, a:b], k, v, attn_mask=visible))
        else:
            s = q[:, a:b] @ k.transpose(1, 2) / math.sqrt(hd)
            s = s.masked_fill(~visible, float("-inf"))
            out.append(torch.softmax(s, dim=-1) @ v)
    return torch.cat(out, dim=1)


def score(cfg, w, tokens, chunk):
    d = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim") or d // nh
    eps = cfg["rms_norm_eps"]
    if cfg["model_type"] != "llama" or cfg.get("attention_bias") or cfg.get("mlp_bias"):
        raise SystemExit("torch_attention.py: only bias-free llama models (the init-model presets)")
    T = len(tokens)
    L = cfg["num_hidden_layers"]
    rep = nh // nkv
    kc = [torch.zeros(nkv, T, hd) for _ in range(L)]
    vc = [torch.zeros(nkv, T, hd) for _ in range(L)]
    inv = inv_freq(cfg, hd)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    ids = torch.tensor(tokens, dtype=torch.long)
    out = torch.full((T,), float("nan"))
    for start in range(0, T, chunk):
        end = min(T, start + chunk)
        n = end - start
        x = w["model.embed_tokens.weight"][ids[start:end]]
        freqs = torch.arange(start, end, dtype=torch.float32)[:, None] * inv[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
        for i in range(L):
            p = f"model.layers.{i}."
            h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
            q = (h @ w[p + "self_attn.q_proj.weight"].T).view(n, nh, hd)
            k = (h @ w[p + "self_attn.k_proj.weight"].T).view(n, nkv, hd)
            v = (h @ w[p + "self_attn.v_proj.weight"].T).view(n, nkv, hd)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            kc[i][:, start:end] = k.transpose(0, 1)
            vc[i][:, start:end] = v.transpose(0, 1)
            kk = kc[i][:, :end].repeat_interleave(rep, dim=0)  # head j uses kv head j // rep
            vv = vc[i][:, :end].repeat_interleave(rep, dim=0)
            o = attend(q.transpose(0, 1), kk, vv, start).transpose(0, 1).reshape(n, nh * hd)
            x = x + o @ w[p + "self_attn.o_proj.weight"].T
            h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
            g = h @ w[p + "mlp.gate_proj.weight"].T
            u = h @ w[p + "mlp.up_proj.weight"].T
            x = x + (torch.nn.functional.silu(g) * u) @ w[p + "mlp.down_proj.weight"].T
        x = rms_norm(x, w["model.norm.weight"], eps)
        logp = torch.log_softmax(x @ head.T, dim=-1)
        tgt = ids[start + 1 : end + 1]
        out[start + 1 : start + 1 + len(tgt)] = logp[: len(tgt)].gather(1, tgt[:, None])[:, 0]
    return out


def main():
    d, tokens_path, chunk, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(threads)
    cfg = json.load(open(f"{d}/config.json"))
    w = read_safetensors(f"{d}/model.safetensors")
    tokens = json.load(open(tokens_path))
    with torch.no_grad():
        t0 = time.perf_counter()
        lp = score(cfg, w, tokens, chunk)
        took = time.perf_counter() - t0
    json.dump({
        "seconds": took,
        "tokens_per_second": len(tokens) / took,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "logprobs": [None if math.isnan(x) else float(x) for x in lp.tolist()],
        "torch": torch.__version__,
        "attention": "sdpa, explicit lower-right bool mask" if SDPA else "explicit scores, lower-right mask",
    }, sys.stdout)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Independent PyTorch reference of the Llama-family forward for xla/'s parity tests.

usage: gen_reference.py MODEL_DIR...

Each MODEL_DIR holds config.json, model.safetensors and tokens.json (a list of token
ids); the script writes MODEL_DIR/reference.json:
  {"logprobs": [log p(tokens[t] | tokens[:t]) for t = 1..T-1], "weights_sum": Σ of every weight}
computed in float32 on the CPU. It implements the architecture from the config alone
(RMSNorm, RoPE with theta and llama3 scaling, GQA, SwiGLU, q/k/v biases of qwen2 or
attention_bias, qwen3 q/k norms, tied or untied head) and reads safetensors itself
(F32, BF16, F16), so it needs only torch and numpy (Debian: python3-torch python3-numpy).
The Go test (go test ./xla -run TestParity -update) writes the model directories,
runs this script, and stores the results as fixtures; CI never runs it.
"""
import json
import math
import struct
import sys

import numpy as np
import torch


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    data = raw[8 + n :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        buf = data[a:b]
        dtype = info["dtype"]
        if dtype == "F32":
            arr = np.frombuffer(buf, dtype="<f4").astype(np.float32)
        elif dtype == "F16":
            arr = np.frombuffer(buf, dtype="<f2").astype(np.float32)
        elif dtype == "BF16":
            arr = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{name}: dtype {dtype}")
        out[name] = torch.from_numpy(arr.reshape(info["shape"]).copy())
    return out


def rms_norm(x, w, eps):
    var = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(var + eps) * w


def inv_freq(cfg, head_dim):
    theta = cfg.get("rope_theta", 10000.0)
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    sc = cfg.get("rope_scaling")
    if sc and sc.get("rope_type", sc.get("type")) == "llama3":
        factor, low, high = sc["factor"], sc["low_freq_factor"], sc["high_freq_factor"]
        old = sc["original_max_position_embeddings"]
        low_wl, high_wl = old / low, old / high
        wl = 2 * math.pi / inv
        scaled = torch.where(wl > low_wl, inv / factor, inv)
        smooth = (old / wl - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wl < high_wl) * ~(wl > low_wl)
        inv = torch.where(medium, smoothed, scaled)
    return inv


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def forward(cfg, w, tokens):
    mt = cfg["model_type"]
    d = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim") or d // nh
    eps = cfg["rms_norm_eps"]
    attn_bias = cfg.get("attention_bias", False)
    qkv_bias = mt == "qwen2" or (attn_bias and mt != "mistral")
    o_bias = attn_bias and mt in ("llama", "qwen3")
    mlp_bias = mt == "llama" and cfg.get("mlp_bias", False)
    T = len(tokens)
    ids = torch.tensor(tokens, dtype=torch.long)
    x = w["model.embed_tokens.weight"][ids]  # [T, d]
    pos = torch.arange(T, dtype=torch.float32)
    freqs = pos[:, None] * inv_freq(cfg, hd)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()  # [T, hd]
    mask = torch.full((T, T), float("-inf")).triu(1)

    def lin(name, v, bias):
        y = v @ w[name + ".weight"].T
        if bias:
            y = y + w[name + ".bias"]
        return y

    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = lin(p + "self_attn.q_proj", h, qkv_bias).view(T, nh, hd)
        k = lin(p + "self_attn.k_proj", h, qkv_bias).view(T, nkv, hd)
        v = lin(p + "self_attn.v_proj", h, qkv_bias).view(T, nkv, hd)
        if mt == "qwen3":
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q = q * cos[:, None, :] + rotate_half(q) * sin[:, None, :]
        k = k * cos[:, None, :] + rotate_half(k) * sin[:, None, :]
        rep = nh // nkv
        k = k.repeat_interleave(rep, dim=1)  # head j uses kv head j // rep
        v = v.repeat_interleave(rep, dim=1)
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # [heads, T, hd]
        att = (q @ k.transpose(1, 2)) / math.sqrt(hd) + mask
        o = torch.softmax(att, dim=-1) @ v  # [heads, T, hd]
        o = o.transpose(0, 1).reshape(T, nh * hd)
        x = x + lin(p + "self_attn.o_proj", o, o_bias)
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        g = lin(p + "mlp.gate_proj", h, mlp_bias)
        u = lin(p + "mlp.up_proj", h, mlp_bias)
        x = x + lin(p + "mlp.down_proj", torch.nn.functional.silu(g) * u, mlp_bias)
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    logp = torch.log_softmax(x @ head.T, dim=-1)  # [T, vocab]: fine for a test model
    return logp[:-1].gather(1, ids[1:, None])[:, 0]


def main():
    torch.set_num_threads(1)
    for d in sys.argv[1:]:
        cfg = json.load(open(f"{d}/config.json"))
        w = read_safetensors(f"{d}/model.safetensors")
        tokens = json.load(open(f"{d}/tokens.json"))
        with torch.no_grad():
            lp = forward(cfg, w, tokens)
        total = sum(float(t.double().sum()) for t in w.values())
        json.dump({"logprobs": [float(x) for x in lp], "weights_sum": total}, open(f"{d}/reference.json", "w"))
        print(f"{d}: {len(tokens)} tokens, mean log-prob {float(lp.mean()):.4f}")


if __name__ == "__main__":
    main()

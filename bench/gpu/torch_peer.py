#!/usr/bin/env python3
"""PyTorch peer of `hindsight bench-gpu`: the same model directory, the same tokens,
the same device, written independently of hindsight (Llama/Qwen2/Qwen3 decoder:
RMSNorm, RoPE, GQA, qwen3 q/k norms, tied or untied head).

usage:
  torch_peer.py info     --device D                       → {torch, cuda, sdpa, compile, ...}
  torch_peer.py logprobs --model DIR --tokens F --dtype float32|bfloat16 --device D
                                                          → {logprobs: [T-1], path, tf32}
  torch_peer.py peak     --device D --n N                  → {float32_flops, bfloat16_flops}
  torch_peer.py speed    --model DIR --T N --dtype DT --device D --modes eager,compile
                                                          → {eager: {score_tps, train_tps}, compile: ...}
  torch_peer.py score    --model DIR --tokens F --device D [--threads N] [--reps R]
                                                          → {load_seconds, seconds, tokens_per_s,
                                                             peak_rss_bytes, logprobs: [T-1]}

One JSON object on stdout. Each feature is detected (SDPA, torch.compile, CUDA):
what ran is in "path"; a mode the local torch lacks comes back as {"skipped": why}.
f32 runs with TF32 off (matmul and cuDNN) so that they compare with hindsight's f32.
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")
HAS_COMPILE = hasattr(torch, "compile")


def no_tf32():
    if hasattr(torch.backends, "cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False
    if hasattr(torch.backends, "cudnn"):
        torch.backends.cudnn.allow_tf32 = False
    if hasattr(torch, "set_float32_matmul_precision"):
        torch.set_float32_matmul_precision("highest")


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    data = memoryview(raw)[8 + n :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        dt = info["dtype"]
        if dt == "F32":
            arr = np.frombuffer(data[a:b], dtype="<f4")
        elif dt == "BF16":
            arr = (np.frombuffer(data[a:b], dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif dt == "F16":
            arr = np.frombuffer(data[a:b], dtype="<f2").astype(np.float32)
        else:
            raise ValueError(f"{path}: tensor {name}: dtype {dt} is not supported")
        out[name] = torch.from_numpy(arr.reshape(info["shape"]).copy())
    return out


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


class Model(torch.nn.Module):
    def __init__(self, cfg, weights, dtype, device):
        super().__init__()
        self.cfg = cfg
        self.p = torch.nn.ParameterDict(
            {k.replace(".", "__"): torch.nn.Parameter(v.to(device=device, dtype=dtype)) for k, v in weights.items()}
        )
        mt = cfg["model_type"]
        self.d = cfg["hidden_size"]
        self.nh = cfg["num_attention_heads"]
        self.nkv = cfg.get("num_key_value_heads") or self.nh
        self.hd = cfg.get("head_dim") or self.d // self.nh
        self.eps = cfg["rms_norm_eps"]
        ab = cfg.get("attention_bias", False)
        self.qkv_bias = mt == "qwen2" or (ab and mt != "mistral")
        self.o_bias = ab and mt in ("llama", "qwen3")
        self.qk_norm = mt == "qwen3"
        theta = cfg.get("rope_theta", 10000.0)
        self.inv = 1.0 / (theta ** (torch.arange(0, self.hd, 2, dtype=torch.float32, device=device) / self.hd))

    def w(self, name):
        return self.p[name.replace(".", "__")]

    def lin(self, name, x, bias):
        y = x @ self.w(name + ".weight").T
        return y + self.w(name + ".bias") if bias else y

    def norm(self, x, name):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.w(name).float()).to(x.dtype)

    def hidden(self, ids):
        T = ids.shape[0]
        x = self.w("model.embed_tokens.weight")[ids]
        fr = torch.arange(T, dtype=torch.float32, device=ids.device)[:, None] * self.inv[None, :]
        emb = torch.cat((fr, fr), dim=-1)
        cos, sin = emb.cos().to(x.dtype)[:, None, :], emb.sin().to(x.dtype)[:, None, :]

        def rope(t):
            h = t.shape[-1] // 2
            return t * cos + torch.cat((-t[..., h:], t[..., :h]), dim=-1) * sin

        for i in range(self.cfg["num_hidden_layers"]):
            p = f"model.layers.{i}."
            h = self.norm(x, p + "input_layernorm.weight")
            q = self.lin(p + "self_attn.q_proj", h, self.qkv_bias).view(T, self.nh, self.hd)
            k = self.lin(p + "self_attn.k_proj", h, self.qkv_bias).view(T, self.nkv, self.hd)
            v = self.lin(p + "self_attn.v_proj", h, self.qkv_bias).view(T, self.nkv, self.hd)
            if self.qk_norm:
                q = self.norm(q, p + "self_attn.q_norm.weight")
                k = self.norm(k, p + "self_attn.k_norm.weight")
            q, k = rope(q), rope(k)
            rep = self.nh // self.nkv
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
            q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
            if HAS_SDPA:
                o = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True)[0]
            else:
                att = (q @ k.transpose(1, 2)) / math.sqrt(self.hd)
                att = att.masked_fill(torch.ones(T, T, dtype=torch.bool, device=ids.device).triu(1), float("-inf"))
                o = torch.softmax(att.float(), dim=-1).to(v.dtype) @ v
            x = x + self.lin(p + "self_attn.o_proj", o.transpose(0, 1).reshape(T, self.nh * self.hd), self.o_bias)
            h = self.norm(x, p + "post_attention_layernorm.weight")
            g, u = self.lin(p + "mlp.gate_proj", h, False), self.lin(p + "mlp.up_proj", h, False)
            x = x + self.lin(p + "mlp.down_proj", F.silu(g) * u, False)
        return self.norm(x, "model.norm.weight")

    def forward(self, ids, rows=4096):
        """Per-token log-probs of ids[1:] (f32), the head applied `rows` positions at a
        time so that [T, vocab] logits are never whole."""
        x = self.hidden(ids)
        head = self.w("model.embed_tokens.weight") if self.cfg.get("tie_word_embeddings") else self.w("lm_head.weight")
        out = []
        for a in range(0, ids.shape[0] - 1, rows):
            b = min(a + rows, ids.shape[0] - 1)
            lp = torch.log_softmax((x[a:b] @ head.T).float(), dim=-1)
            out.append(lp.gather(1, ids[a + 1 : b + 1, None])[:, 0])
        return torch.cat(out)


def attention_path():
    return "sdpa" if HAS_SDPA else "manual softmax(QK^T)V (no F.scaled_dot_product_attention)"


def load(args, dtype):
    cfg = json.load(open(os.path.join(args.model, "config.json")))
    return Model(cfg, read_safetensors(os.path.join(args.model, "model.safetensors")), dtype, args.device), cfg


def cmd_info(args):
    return {
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "cuda": torch.cuda.is_available(),
        "device_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "sdpa": HAS_SDPA,
        "compile": HAS_COMPILE,
        "threads": torch.get_num_threads(),
    }


def cmd_logprobs(args):
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    no_tf32()
    m, _ = load(args, dtype)
    ids = torch.tensor(json.load(open(args.tokens)), dtype=torch.long, device=args.device)
    with torch.no_grad():
        lp = m(ids)
    sync(args.device)
    return {"logprobs": [float(v) for v in lp.cpu()], "path": attention_path(), "tf32": False, "dtype": args.dtype}


def timed(fn, device, reps):
    fn()  # warm-up: allocation, autotuning, compilation
    sync(device)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


def cmd_peak(args):
    no_tf32()
    out = {}
    for name, dt in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        a = torch.randn(args.n, args.n, device=args.device).to(dt)
        b = torch.randn(args.n, args.n, device=args.device).to(dt)
        s = timed(lambda: a @ b, args.device, args.reps)
        out[name + "_flops"] = 2 * args.n**3 / s
    out["n"] = args.n
    return out


def cmd_speed(args):
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    no_tf32()
    m, cfg = load(args, dtype)
    ids = torch.randint(0, cfg["vocab_size"], (args.T,), device=args.device)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-6)
    out = {"path": attention_path(), "dtype": args.dtype, "T": args.T}
    for mode in args.modes.split(","):
        if mode == "compile" and not HAS_COMPILE:
            out[mode] = {"skipped": f"torch {torch.__version__} has no torch.compile"}
            continue
        if mode == "compile" and args.device == "cpu":
            out[mode] = {"skipped": "torch.compile on CPU needs a C++ toolchain at run time; not tried in the rehearsal"}
            continue
        fwd = torch.compile(m) if mode == "compile" else m
        try:
            with torch.no_grad():
                s = timed(lambda: fwd(ids), args.device, args.reps)

            def step():
                opt.zero_grad(set_to_none=True)
                fwd(ids).mean().backward()
                opt.step()

            st = timed(step, args.device, args.reps)
            r = {"score_tps": args.T / s, "train_tps": args.T / st}
            if args.device.startswith("cuda"):
                r["peak_bytes"] = torch.cuda.max_memory_allocated()
            out[mode] = r
        except Exception as e:  # one mode failing (out of memory, compile error) is a result
            out[mode] = {"error": f"{type(e).__name__}: {e}"[:500]}
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
    return out


def cmd_score(args):
    """One f32 eager scoring pass of the tokens in --tokens (then --reps more, the
    best kept), timed apart from the load; the process's own peak RSS."""
    import resource

    no_tf32()
    t0 = time.perf_counter()
    m, _ = load(args, torch.float32)
    load_s = time.perf_counter() - t0
    ids = torch.tensor(json.load(open(args.tokens)), dtype=torch.long, device=args.device)
    times, cpus = [], []
    with torch.no_grad():
        for _ in range(1 + max(args.reps, 0)):
            t0, c0 = time.perf_counter(), time.process_time()
            lp = m(ids)
            sync(args.device)
            times.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
    T = ids.shape[0]
    out = {"load_seconds": load_s, "first_seconds": times[0], "seconds": min(times), "tokens_per_s": T / min(times),
           "cpu_seconds": cpus[times.index(min(times))],
           "T": T, "threads": torch.get_num_threads(), "torch": torch.__version__, "path": attention_path(),
           "logprobs": [float(v) for v in lp.cpu()]}
    out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if args.device.startswith("cuda"):
        out["peak_bytes"] = torch.cuda.max_memory_allocated()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["info", "logprobs", "peak", "speed", "score"])
    ap.add_argument("--model")
    ap.add_argument("--tokens")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--T", type=int, default=256)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    out = {"info": cmd_info, "logprobs": cmd_logprobs, "peak": cmd_peak, "speed": cmd_speed, "score": cmd_score}[args.cmd](args)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Self-distillation losses and gradients from the peers' own code (issue 37).

Writes testdata/distill/peers.json, which TestPeerGoldens (credit/peers_test.go, the
float64 reference) and TestDistillPeerGoldens (xla/distill_peers_test.go, the device
graph in float32 and bfloat16) compare with hindsight's distillation. CI reads the
committed file; it does not run this script (it needs torch).

What runs (no transcription of a loss: each is the peer's function, loaded from the
peer's file):

- TRL's `trl/experimental/sdpo/loss_utils.py` from the installed `trl` package:
  compute_topk_self_distillation_loss, compute_full_logit_self_distillation_loss,
  compute_sampled_token_self_distillation_loss and
  apply_importance_sampling_clipping, then the trainer's aggregation (a per-sequence
  token mean, then the mean over sequences: SDPOTrainer._compute_self_distillation_loss,
  transcribed: three lines). The module's one import from the rest of TRL,
  selective_log_softmax, is given as log_softmax gathered at the ids (TRL's own
  definition, transcribed), so importing TRL's heavy package root is not needed.
- The SDPO authors' compute_self_distillation_loss and agg_loss, exec'd from
  `verl/trainer/ppo/core_algos.py` of a lasgroup/SDPO checkout (--sdpo). verl's
  masked_sum (Σ values·mask) is given, transcribed. The top-k selection that feeds it
  is dp_actor.py's (torch.topk of the student's logits, the teacher gathered at the
  same indices, minus each side's logsumexp), transcribed: four lines.

Setup (Debian's torch; TRL without its dependencies):

    apt-get install python3-torch
    python3 -m venv --system-site-packages /tmp/distill-venv
    /tmp/distill-venv/bin/pip install --no-deps trl==1.16.0
    git clone https://github.com/lasgroup/SDPO /tmp/SDPO
    /tmp/distill-venv/bin/python scripts/distill_goldens.py --sdpo /tmp/SDPO

Everything is float64. Each case holds its inputs (student and teacher logits
[B, T, V], the loss mask with unequal lengths, old log-probs and the sampled ids) and,
per peer, the loss and its gradient with respect to the student's logits.
"""
import argparse
import ast
import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
import types

import torch
import torch.nn.functional as F

TRL_PINNED = "1.16.0"


def load_trl():
    """TRL's loss_utils module, executed from the installed package's file."""
    dist = importlib.metadata.distribution("trl")
    if dist.version != TRL_PINNED:
        sys.exit(f"trl {dist.version}: the goldens are made with {TRL_PINNED}")
    path = dist.locate_file("trl/experimental/sdpo/loss_utils.py")
    src = open(path).read()
    marker = "from ...trainer.utils import selective_log_softmax"
    if marker not in src:
        sys.exit(f"{path}: the import this script replaces is not there; read the file again")
    mod = types.ModuleType("trl_sdpo_loss_utils")

    def selective_log_softmax(logits, index):  # TRL's definition (trl/trainer/utils.py), transcribed
        return torch.gather(logits.log_softmax(-1), dim=-1, index=index.unsqueeze(-1)).squeeze(-1)

    mod.selective_log_softmax = selective_log_softmax
    exec(compile(src.replace(marker, ""), str(path), "exec"), mod.__dict__)
    return mod, str(path), hashlib.sha256(src.encode()).hexdigest()


def load_sdpo(root):
    """The SDPO authors' compute_self_distillation_loss and agg_loss from core_algos.py."""
    path = os.path.join(root, "verl/trainer/ppo/core_algos.py")
    src = open(path).read()
    tree = ast.parse(src)
    want = {"compute_self_distillation_loss", "agg_loss"}
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in want]
    if {n.name for n in found} != want:
        sys.exit(f"{path}: {want} not found")
    verl_F = types.SimpleNamespace(masked_sum=lambda values, mask: (values * mask).sum())  # verl, transcribed
    from typing import Any, Optional

    ns = {"torch": torch, "F": F, "verl_F": verl_F, "Any": Any, "Optional": Optional}
    for n in found:
        n.decorator_list = []
        exec(compile(ast.Module(body=[n], type_ignores=[]), path, "exec"), ns)
    commit = ""
    try:
        commit = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return ns["compute_self_distillation_loss"], commit, hashlib.sha256(src.encode()).hexdigest()


ALPHA = {"forward_kl": 0.0, "reverse_kl": 1.0}  # the peers' alpha: 0 forward KL, 1 reverse KL, else JSD


def make_case(name, gen, V, mode, divergence, k=None, alpha=0.5, confident=False, lengths=(4, 2), is_clip=2.0, temperature=1.0,
              confident_student=False):
    B, T = len(lengths), max(lengths)
    student = torch.randn(B, T, V, generator=gen, dtype=torch.float64) * (40 if confident_student else 2)
    teacher = torch.randn(B, T, V, generator=gen, dtype=torch.float64) * (40 if confident else 2)
    mask = torch.zeros(B, T, dtype=torch.float64)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
    ids = torch.multinomial(torch.softmax(student.reshape(-1, V), -1), 1, generator=gen).reshape(B, T)
    s_lp = torch.gather(torch.log_softmax(student / temperature, -1), -1, ids.unsqueeze(-1)).squeeze(-1)
    old = (s_lp + torch.randn(B, T, generator=gen, dtype=torch.float64) * 0.8).clamp(max=0)  # π/π_old around 1, some past the cap
    a = ALPHA.get(divergence, alpha)
    return dict(name=name, vocab=V, mode=mode, divergence=divergence, alpha=a, k=k, temperature=temperature,
                is_clip=is_clip, student=student, teacher=teacher, mask=mask, ids=ids, old=old)


def run_trl(trl, c):
    s = c["student"].clone().requires_grad_(True)
    st, tt = s / c["temperature"], c["teacher"] / c["temperature"]  # SDPOTrainer divides both sides' logits by T
    if c["mode"] == "topk":
        per = trl.compute_topk_self_distillation_loss(st, tt, distillation_topk=c["k"], distillation_alpha=c["alpha"], distillation_add_tail=True)
    elif c["mode"] == "full":
        per = trl.compute_full_logit_self_distillation_loss(st, tt, distillation_alpha=c["alpha"])
    else:
        per = trl.compute_sampled_token_self_distillation_loss(st, tt, c["ids"], distillation_alpha=c["alpha"])
    per_raw = per.detach().clone()
    if c["is_clip"] is not None:
        lp = trl.selective_log_softmax(st, c["ids"])
        per = trl.apply_importance_sampling_clipping(per, lp, c["old"], c["is_clip"])
    m = c["mask"]
    # SDPOTrainer._compute_self_distillation_loss's aggregation, transcribed.
    loss = ((per * m).sum(-1) / m.sum(-1).clamp(min=1.0)).mean()
    loss.backward()
    return per_raw, loss.item(), s.grad


def run_authors(fn, c):
    s = c["student"].clone().requires_grad_(True)
    st, tt = s / c["temperature"], c["teacher"] / c["temperature"]  # dp_actor: logits.div_(temperature)
    cfg = types.SimpleNamespace(full_logit_distillation=c["mode"] != "sampled_token", alpha=c["alpha"],
                                distillation_topk=c["k"] if c["mode"] == "topk" else None,
                                distillation_add_tail=True, is_clip=c["is_clip"])
    s_lse, t_lse = torch.logsumexp(st, -1, keepdim=True), torch.logsumexp(tt, -1, keepdim=True)
    s_lp = torch.gather(st - s_lse, -1, c["ids"].unsqueeze(-1)).squeeze(-1)
    t_lp = torch.gather(tt - t_lse, -1, c["ids"].unsqueeze(-1)).squeeze(-1)
    kw = {}
    if c["mode"] == "topk":
        # dp_actor.py: torch.topk of the student's logits, the teacher gathered at the same indices.
        top, idx = torch.topk(st, min(c["k"], st.shape[-1]), dim=-1)
        kw["student_topk_log_probs"] = top - s_lse
        kw["teacher_topk_log_probs"] = torch.gather(tt, -1, idx) - t_lse
    elif c["mode"] == "full":
        kw["student_all_log_probs"], kw["teacher_all_log_probs"] = st - s_lse, tt - t_lse
    loss, _ = fn(s_lp, t_lp, c["mask"], cfg, old_log_probs=c["old"], loss_agg_mode="token-mean", **kw)
    loss.backward()
    return loss.item(), s.grad


def cases(gen):
    out = []
    for V in (7, 33):
        for div in ("reverse_kl", "forward_kl", "jsd"):
            out.append(make_case(f"full {div} V{V}", gen, V, "full", div))
            for k in (1, 5):
                out.append(make_case(f"topk{k} {div} V{V}", gen, V, "topk", div, k=k))
    for div in ("reverse_kl", "forward_kl", "jsd"):
        out.append(make_case(f"topk20 {div} V300", gen, 300, "topk", div, k=20, lengths=(3, 1)))
        out.append(make_case(f"topk5 {div} V64 confident teacher", gen, 64, "topk", div, k=5, confident=True))
        out.append(make_case(f"full {div} V64 confident teacher", gen, 64, "full", div, confident=True))
        # The student's top 5 hold all but ~e^-30 of its mass: its tail is the peers' floor.
        out.append(make_case(f"topk5 {div} V64 confident student", gen, 64, "topk", div, k=5, confident_student=True))
    out.append(make_case("topk5 jsd alpha 0.2 V33", gen, 33, "topk", "jsd", k=5, alpha=0.2))
    out.append(make_case("topk5 reverse_kl V33 temperature 0.7", gen, 33, "topk", "reverse_kl", k=5, temperature=0.7))
    out.append(make_case("full jsd V33 temperature 1.5", gen, 33, "full", "jsd", temperature=1.5))
    out.append(make_case("sampled_token V33", gen, 33, "sampled_token", "reverse_kl"))
    out.append(make_case("sampled_token V7 no IS", gen, 7, "sampled_token", "reverse_kl", is_clip=None))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sdpo", required=True, help="a lasgroup/SDPO checkout")
    ap.add_argument("--sdpo-commit", default="", help="the checkout's commit, when --sdpo is not a git work tree")
    ap.add_argument("--out", default="testdata/distill/peers.json")
    a = ap.parse_args()
    trl, trl_path, trl_sha = load_trl()
    authors, sdpo_commit, sdpo_sha = load_sdpo(a.sdpo)
    sdpo_commit = sdpo_commit or a.sdpo_commit
    gen = torch.Generator().manual_seed(37)
    rows = []
    for c in cases(gen):
        per, trl_loss, trl_grad = run_trl(trl, c)
        al, ag = run_authors(authors, c)
        row = {k: c[k] for k in ("name", "vocab", "mode", "divergence", "alpha", "k", "temperature", "is_clip")}
        row.update(student_logits=c["student"].tolist(), teacher_logits=c["teacher"].tolist(), mask=c["mask"].tolist(),
                   ids=c["ids"].tolist(), old_log_probs=c["old"].tolist(), per_token_loss=per.tolist(),
                   trl={"loss": trl_loss, "grad": trl_grad.tolist()}, authors={"loss": al, "grad": ag.tolist()})
        rows.append(row)
    meta = {
        "generator": "scripts/distill_goldens.py",
        "transcription": False,
        "torch": torch.__version__,
        "trl": {"version": TRL_PINNED, "file": "trl/experimental/sdpo/loss_utils.py", "sha256": trl_sha},
        "sdpo_authors": {"repo": "lasgroup/SDPO", "commit": sdpo_commit, "file": "verl/trainer/ppo/core_algos.py", "sha256": sdpo_sha},
        "transcribed_glue": ["selective_log_softmax (TRL)", "the trainer's per-sequence mean (TRL)", "masked_sum (verl)",
                             "dp_actor.py's top-k selection (authors)"],
        "conventions": "alpha: the teacher's weight in the JSD mixture, 0 forward KL(T||S), 1 reverse KL(S||T); tail: add_tail "
                       "(log(1 - sum p), log-sum clamped at -1e-7) on both sides; ids: the student's top k; IS: "
                       "min(exp(clamp(s - old, -20, 20)), is_clip) on the per-token loss; TRL: per-sequence token mean, "
                       "then mean over sequences; authors: token mean over the batch",
    }
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"meta": meta, "cases": rows}, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {len(rows)} cases to {a.out}")


if __name__ == "__main__":
    main()

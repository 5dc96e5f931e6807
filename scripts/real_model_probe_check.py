#!/usr/bin/env python3
"""Spot-check of the real-model probe (scripts/real_model_probe.sh) in transformers.

    real_model_probe_check.py --model MODEL_DIR --dump DUMP.json --results realmodel.json [--greedy N]

DUMP.json is `realprobe -dump` of the first slips: each conversation's messages, the
teacher-forced action, the whole render and the ids hindsight scored. For each one:
transformers' apply_chat_template (Python Jinja) must render the same text, the model's
tokenizer must encode it to the same ids, and the summed float32 log-prob of the
action's tokens and its <|im_end|> must match the one in realmodel.json. For the first
N slips (--greedy) the greedy replies after none / hint / sibling are generated with
transformers and compared with realmodel.json's. Exits 1 on a mismatch.
"""
import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--results", required=True)
    ap.add_argument("--greedy", type=int, default=1)
    ap.add_argument("--tol", type=float, default=1e-3)
    a = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).eval()
    dump = json.load(open(a.dump))
    items = {it["task"]: it for it in json.load(open(a.results))["items"]}
    ok = True
    texts = ids_same = 0
    worst = 0.0
    n = 0
    for d in dump:
        it = items.get(d["task"])
        if it is None:
            continue
        prompt = tok.apply_chat_template(d["messages"], add_generation_prompt=True, tokenize=False)
        text = prompt + d["call"] + "<|im_end|>\n"
        texts += text == d["text"]
        ids = tok(text, add_special_tokens=False)["input_ids"]
        ids_same += ids[: len(d["ids"])] == d["ids"]
        with torch.no_grad():
            x = torch.tensor([d["ids"]])
            lp = torch.log_softmax(model(x).logits[0].double(), dim=-1)
            s = sum(lp[t - 1, d["ids"][t]].item() for t in range(d["prompt"], len(d["ids"])))
        ours = it["logprob"][d["context"]][d["action"]]
        worst = max(worst, abs(s - ours))
        n += 1
    print(f"{'ok ' if texts == n else 'BAD'} apply_chat_template renders hindsight's text: {texts}/{n}")
    print(f"{'ok ' if ids_same == n else 'BAD'} the tokenizer encodes it to hindsight's ids: {ids_same}/{n}")
    print(f"{'ok ' if worst <= a.tol else 'BAD'} Σ log-prob of the action vs hindsight's scorer: max |Δ| {worst:.2e} nats over {n} (tolerance {a.tol:g})")
    ok = ok and texts == n and ids_same == n and worst <= a.tol and n > 0

    tasks = list(dict.fromkeys(d["task"] for d in dump if d["task"] in items))[: a.greedy]
    same = total = 0
    for task in tasks:
        for ctx in ("none", "hint", "sibling"):
            d = next(d for d in dump if d["task"] == task and d["context"] == ctx)
            enc = tok.apply_chat_template(d["messages"], add_generation_prompt=True, return_tensors="pt", return_dict=True)
            end = tok.convert_tokens_to_ids("<|im_end|>")
            out = model.generate(**enc, max_new_tokens=json.load(open(a.results))["max_new_tokens"], do_sample=False, eos_token_id=end)
            gen = out[0, enc["input_ids"].shape[1]:].tolist()
            if gen and gen[-1] == end:
                gen = gen[:-1]
            reply = tok.decode(gen)
            ours = items[task]["reply"][ctx]
            total += 1
            same += reply == ours
            print(f"    {task} {ctx}: transformers {reply!r}, hindsight {ours!r}")
    print(f"{'ok ' if same == total else 'BAD'} greedy replies equal: {same}/{total}")
    ok = ok and same == total
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

"""PyTorch autocast reference of a bf16 forward for xla/'s autocast parity test.

usage: PYTHON gen_autocast_reference.py MODEL_DIR...   (PYTHON: PyTorch >= 2 and transformers)

Each MODEL_DIR holds a Hugging Face model directory (config.json, model.safetensors with
bfloat16 weights) and tokens.json (a list of token ids); the script writes
MODEL_DIR/reference.json:
  {"logprobs": [log p(tokens[t] | tokens[:t]) for t = 1..T-1], "weights_sum": Σ of every weight,
   "torch": version, "transformers": version}
from transformers' own model (LlamaForCausalLM, Qwen3ForCausalLM, ...) loaded in float32
(the bfloat16 weights widened exactly) and run under torch.autocast("cpu",
dtype=torch.bfloat16) with attn_implementation="sdpa", transformers' default: the mixed
precision hindsight's bf16 mirrors (docs/training.md "Precision"). The logits come out of
lm_head in bfloat16, as autocast leaves them; they are widened to float32 before the
log-softmax, as transformers' loss does (logits.float()). The Go test
(go test ./xla -run TestBF16AutocastParity -update-autocast PYTHON) writes the model
directories, runs this script and stores the results as fixtures; CI never runs it (it
needs PyPI torch).
"""
import json
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM


def main():
    torch.set_num_threads(1)
    for d in sys.argv[1:]:
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="sdpa")
        model.eval()
        tokens = json.load(open(f"{d}/tokens.json"))
        ids = torch.tensor([tokens], dtype=torch.long)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(ids).logits[0]  # [T, vocab]
        assert logits.dtype == torch.bfloat16, logits.dtype
        logp = logits.float().log_softmax(-1)[:-1].gather(1, ids[0, 1:, None])[:, 0]
        total = sum(float(p.double().sum()) for p in model.state_dict().values())
        if model.config.tie_word_embeddings:  # the state dict lists the tied head twice
            total -= float(model.get_output_embeddings().weight.double().sum())
        json.dump(
            {
                "logprobs": [float(x) for x in logp],
                "weights_sum": total,
                "torch": torch.__version__,
                "transformers": transformers.__version__,
            },
            open(f"{d}/reference.json", "w"),
        )
        print(f"{d}: {len(tokens)} tokens, mean log-prob {float(logp.mean()):.4f}")


if __name__ == "__main__":
    main()

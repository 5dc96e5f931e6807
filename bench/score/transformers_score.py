#!/usr/bin/python3
"""transformers as bench/score's peer: score MODEL_DIR/tokens.json's rollouts in one batch.

usage: transformers_score.py MODEL_DIR THREADS  → JSON {seconds, cpu_seconds, logprobs,
torch, transformers, threads, tied_head} on stdout

tokens.json is {"rollouts": [[ids]…]}, rollouts of one length. The batch runs as one
`AutoModelForCausalLM` forward over [rollouts, tokens] (float32, no_grad, no KV cache),
then log_softmax and the log-prob of each next token: what a PyTorch trainer's scoring
pass does. Best of 3 after a warm-up, by the wall and by the process's CPU time
(bench/generate/peer_timing.py's best_of). tied_head says whether lm_head shares the embedding's storage, as
SmolLM2's tie_word_embeddings asks (an untied head would be random: the log-prob
comparison catches it too).

Needs transformers (PyPI torch 2.x + transformers 5.x, or transformers 4.46 over
Debian's torch 1.13 in a venv made with --system-site-packages); never installed by CI.
"""
import json
import os
import sys

import torch
import transformers

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "generate"))
from peer_timing import best_of  # noqa: E402
from peer_transformers import load  # noqa: E402


def main():
    d, threads = sys.argv[1], int(sys.argv[2])
    model = load(d, threads)
    tied = model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    ids = torch.tensor(json.load(open(f"{d}/tokens.json"))["rollouts"], dtype=torch.long)

    def score():
        logits = model(input_ids=ids, use_cache=False).logits  # [rollouts, tokens, vocab]
        return torch.log_softmax(logits[:, :-1].float(), dim=-1).gather(2, ids[:, 1:, None])[..., 0]

    with torch.no_grad():
        lp = score()
        wall, cpu = best_of(score)
    json.dump({"seconds": wall, "cpu_seconds": cpu, "torch": torch.__version__, "transformers": transformers.__version__,
               "threads": torch.get_num_threads(), "tied_head": tied, "logprobs": lp.tolist()}, sys.stdout)


if __name__ == "__main__":
    main()

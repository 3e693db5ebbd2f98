#!/usr/bin/env python3
"""Reference runs for `gpu_verify hf` (tests/gpu_verify/README.md): small randomly initialised
Hugging Face models saved with save_pretrained (safetensors), and transformers' greedy tokens for
them in golden.json beside each model.

Runs on the GPU machine with its own python3 (torch + transformers + safetensors, nothing else)
by scripts/gpu_verify.sh run; here with /opt/refpy/bin/python --device cpu.

Models (OUT/<name>/: config.json, model.safetensors, golden.json), all 4 layers, hidden 256,
8 heads / 2 KV heads (GQA), head_dim 32, intermediate 512, vocab 2048, rope theta 10000:
  llama    LlamaForCausalLM, untied lm_head, stored fp32
  qwen2    Qwen2ForCausalLM, Q/K/V biases, tied embeddings, stored fp32
  mistral  MistralForCausalLM, untied, stored bf16 (the reference upcasts it to fp32)
Every weight (biases included) is normal(0, 0.1), norm weights 1 + normal(0, 0.1), fixed seeds,
as tests/golden/make_hf_tiny_models.py does.

Reference: the saved directory reloaded in fp32 (eager attention, no TF32), greedy decoding with
the KV cache, one prompt at a time. golden.json per prompt: ids, greedy (STEPS ids), margins
(top-1 minus top-2 logit at every step), logits_first / logits_last (the rows that pick
greedy[0] / greedy[-1]).

Prompts: random ids, lengths spread over 3..48. The GPU keeps K/V in fp16 and rounds weights and
prefill activations to 16 bits, so its logits differ from fp32 by ~1e-3 relative; a step whose
top-2 margin is that small can flip the greedy token without any bug. So for each prompt slot
CANDIDATES prompts of that length are decoded (in one batch) and the first whose smallest margin
over all STEPS steps is >= MIN_MARGIN is kept (the best one, with a warning, if none is).

  python3 tests/gpu_verify/hf_reference.py --out /tmp/rz-hf [--device cuda|cpu]
"""
import argparse
import json
import os
import shutil
import sys
import time

import torch
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM)

PROMPT_LENS = [3, 9, 15, 21, 28, 34, 41, 48]

SHAPE = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
             head_dim=32, intermediate_size=512, vocab_size=2048, max_position_embeddings=512,
             rms_norm_eps=1e-5, bos_token_id=None, eos_token_id=None, pad_token_id=None,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0})

MODELS = [
    ("llama", LlamaForCausalLM, LlamaConfig, torch.float32, dict(tie_word_embeddings=False)),
    ("qwen2", Qwen2ForCausalLM, Qwen2Config, torch.float32, dict(tie_word_embeddings=True)),
    ("mistral", MistralForCausalLM, MistralConfig, torch.bfloat16,
     dict(tie_word_embeddings=False, sliding_window=None)),
]


def randomize(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32) * 0.1
            p.copy_(1.0 + noise if "norm" in name else noise)


@torch.no_grad()
def greedy(model, ids, steps, device):
    """Greedy decoding of a batch of equal-length prompts with the KV cache.
    Returns tokens [B][steps], margins [B][steps] (float64), first and last logits rows [B][V]."""
    x = torch.tensor(ids, dtype=torch.long, device=device)
    out = model(input_ids=x, use_cache=True)
    past = out.past_key_values
    logits = out.logits[:, -1].float()
    toks, margins, first = [], [], None
    for step in range(steps):
        top2 = torch.topk(logits, 2, dim=-1).values
        margins.append((top2[:, 0] - top2[:, 1]).double().cpu())
        tok = torch.argmax(logits, dim=-1)
        toks.append(tok.cpu())
        if step == 0:
            first = logits.cpu()
        if step == steps - 1:
            break
        out = model(input_ids=tok[:, None], past_key_values=past, use_cache=True)
        past = out.past_key_values
        logits = out.logits[:, -1].float()
    return (torch.stack(toks, 1).tolist(), torch.stack(margins, 1), first.tolist(),
            logits.cpu().tolist())


def build(name, model_cls, config_cls, dtype, kw, seed, args):
    d = os.path.join(args.out, name)
    shutil.rmtree(d, ignore_errors=True)
    cfg = config_cls(**SHAPE, **kw)
    torch.manual_seed(seed)
    model = model_cls(cfg).eval()
    randomize(model, torch.Generator().manual_seed(seed))
    model.to(dtype).save_pretrained(d, safe_serialization=True)
    for extra in os.listdir(d):  # keep config.json and model.safetensors only
        if extra not in ("config.json", "model.safetensors"):
            os.remove(os.path.join(d, extra))

    # What is on disk, in fp32.
    ref = model_cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    ref = ref.to(args.device).eval()
    assert ref.config.tie_word_embeddings == kw["tie_word_embeddings"]
    vocab = SHAPE["vocab_size"]
    rng = torch.Generator().manual_seed(seed)
    prompts, low, tried = [], 0, 0
    for n in PROMPT_LENS:
        cands = torch.randint(0, vocab, (args.candidates, n), generator=rng).tolist()
        tried += len(cands)
        _, margins, _, _ = greedy(ref, cands, args.steps, args.device)
        mins = margins.min(dim=1).values
        ok = torch.nonzero(mins >= args.min_margin).flatten().tolist()
        pick = ok[0] if ok else int(torch.argmax(mins))
        if not len(ok):
            low += 1
            print(f"{name}: warning: no candidate of length {n} keeps margin >= {args.min_margin} "
                  f"(best {float(mins[pick]):.3g})", file=sys.stderr)
        ids = cands[pick]
        # The golden values: this prompt alone.
        toks, m, first, last = greedy(ref, [ids], args.steps, args.device)
        prompts.append({"ids": ids, "greedy": toks[0], "margins": [round(float(v), 6) for v in m[0]],
                        "min_margin": float(m[0].min()), "candidates_ok": len(ok),
                        "logits_first": [round(v, 6) for v in first[0]],
                        "logits_last": [round(v, 6) for v in last[0]]})
    worst = min(p["min_margin"] for p in prompts)
    golden = {"model": name, "architecture": model_cls.__name__, "stored_dtype": str(dtype),
              "steps": args.steps, "min_margin_threshold": args.min_margin, "min_margin": worst,
              "device": args.device, "torch": torch.__version__,
              "transformers": __import__("transformers").__version__, "prompts": prompts}
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(golden, f, separators=(",", ":"))
        f.write("\n")
    absmax = max(max(abs(v) for v in p["logits_first"] + p["logits_last"]) for p in prompts)
    rate = sum(p["candidates_ok"] for p in prompts) / tried
    print(f"{name}: {d}: min margin {worst:.3g} (threshold {args.min_margin}), max |logit| "
          f"{absmax:.2f}, {rate:.0%} of {tried} candidates kept the margin, {low} prompt(s) below it")
    return low


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory for the model directories")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--candidates", type=int, default=128, help="prompts tried per prompt slot")
    ap.add_argument("--min-margin", type=float, default=0.02)
    ap.add_argument("--models", default="llama,qwen2,mistral")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    os.makedirs(args.out, exist_ok=True)
    want = args.models.split(",")
    t0, low = time.time(), 0
    for i, (name, model_cls, config_cls, dtype, kw) in enumerate(MODELS):
        if name in want:
            low += build(name, model_cls, config_cls, dtype, kw, 200 + i, args)
    print(f"hf_reference: done in {time.time() - t0:.1f} s on {args.device}"
          f"{f', {low} prompt(s) below the margin threshold' if low else ''}")


if __name__ == "__main__":
    main()

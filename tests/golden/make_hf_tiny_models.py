#!/usr/bin/env python3
"""Tiny randomly initialised Hugging Face models (tests/golden/hf_tiny/<name>/: config.json,
model.safetensors) and what transformers computes for them (golden.json), for
tests/cpu/cpu_hf_model_test.cpp: the CPU executor must load these directories with
rz::ModelFile::open and reproduce transformers' greedy tokens exactly.

Models (each model.safetensors under 1.5 MB):
  llama        LlamaForCausalLM, untied lm_head, rope theta 10000, fp32
  llama3_tied  LlamaForCausalLM, tied embeddings, rope_type llama3 (factor 8, original 64),
               theta 500000, head_dim 32 != hidden / heads, fp32
  qwen2        Qwen2ForCausalLM, Q/K/V biases, tied embeddings, fp32
  mistral_bf16 MistralForCausalLM, 3 layers, stored in bfloat16; the golden run is
               transformers on those bf16 weights upcast to fp32
  qwen3        Qwen3ForCausalLM: RMSNorm of each q and k head, no biases, head_dim 32 != hidden /
               heads, tied embeddings, theta 1e6
  phi3         Phi3ForCausalLM: fused qkv_proj and gate_up_proj, untied, sliding_window 24 (shorter
               than the longer prompts plus their 32 steps, so the window is exercised)
  gemma3       Gemma3ForCausalLM: 7 layers (the sixth global, the others sliding, window 16), GeGLU,
               embeddings times sqrt(hidden), four norms a layer stored as w - 1, q/k norms, local
               rotary base 10000 and global 1e6, query_pre_attn_scalar = head_dim (what a GGUF can
               say), tied
  gemma3_variant  the same class with what only config.json can say: query_pre_attn_scalar 24 !=
               head_dim 32, final_logit_softcapping 3, explicit layer_types (global layers 0 and
               3), linear rope scaling (factor 4) on the global layers, untied

Every weight is drawn normal(0, 0.1) (norm weights 1 + normal(0, 0.1), biases included; Gemma's
norm weights, which multiply by 1 + w, normal(0, 0.1)) with a fixed seed, so logits spread over a few units. The golden run reloads each saved directory
(what is on disk is what is checked), then for 8 prompts of random ids (lengths 1..40) decodes 32
greedy tokens by full recomputation in fp32 (eager attention, no_grad). golden.json holds per
prompt: ids, greedy (32 ids), logits_first (the prompt's last position; picks greedy[0]),
logits_last (the step that picks greedy[31]), and min_margin (smallest top-1 minus top-2 logit
over the 32 steps). A prompt whose min_margin is below 1e-4 is re-drawn, so an exact token match
is robust to fp32 summation order.

  /opt/refpy/bin/python tests/golden/make_hf_tiny_models.py [NAME ...]

(NAMEs: rebuild only those; the seed of each model is fixed by its place in MODELS. llama,
llama3_tied, qwen2 and mistral_bf16 were made with transformers 5.23.0; qwen3, phi3, gemma3 and
gemma3_variant with torch 2.15.0 and transformers 5.24.0.)
"""
import json
import os
import shutil
import sys

import numpy as np
import torch
from transformers import (Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM,
                          MistralConfig, MistralForCausalLM,
                          Phi3Config, Phi3ForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "hf_tiny")
STEPS = 32
PROMPT_LENS = [1, 2, 5, 9, 16, 23, 31, 40]
MIN_MARGIN = 1e-4

COMMON = dict(num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
              rms_norm_eps=1e-5, bos_token_id=None, eos_token_id=None, pad_token_id=None)

MODELS = [
    ("llama", LlamaForCausalLM, LlamaConfig, torch.float32,
     dict(hidden_size=64, num_hidden_layers=2, intermediate_size=128, vocab_size=256,
          tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    ("llama3_tied", LlamaForCausalLM, LlamaConfig, torch.float32,
     dict(hidden_size=64, num_hidden_layers=2, head_dim=32, intermediate_size=128, vocab_size=384,
          tie_word_embeddings=True,
          rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                           "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 64})),
    ("qwen2", Qwen2ForCausalLM, Qwen2Config, torch.float32,
     dict(hidden_size=64, num_hidden_layers=2, intermediate_size=192, vocab_size=320,
          tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    ("mistral_bf16", MistralForCausalLM, MistralConfig, torch.bfloat16,
     dict(hidden_size=64, num_hidden_layers=3, intermediate_size=128, vocab_size=512,
          tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    ("qwen3", Qwen3ForCausalLM, Qwen3Config, torch.float32,
     dict(hidden_size=64, num_hidden_layers=2, head_dim=32, intermediate_size=128, vocab_size=320,
          tie_word_embeddings=True,
          rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    ("phi3", Phi3ForCausalLM, Phi3Config, torch.float32,
     dict(hidden_size=64, num_hidden_layers=2, intermediate_size=128, vocab_size=288,
          tie_word_embeddings=False, sliding_window=24,
          rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    ("gemma3", Gemma3ForCausalLM, Gemma3TextConfig, torch.float32,
     dict(hidden_size=64, num_hidden_layers=7, head_dim=32, intermediate_size=128, vocab_size=352,
          tie_word_embeddings=True, sliding_window=16, query_pre_attn_scalar=32,
          rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                           "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})),
    ("gemma3_variant", Gemma3ForCausalLM, Gemma3TextConfig, torch.float32,
     dict(hidden_size=64, num_hidden_layers=4, head_dim=32, intermediate_size=96, vocab_size=300,
          tie_word_embeddings=False, sliding_window=12, query_pre_attn_scalar=24,
          final_logit_softcapping=3.0,
          layer_types=["full_attention", "sliding_attention", "sliding_attention",
                       "full_attention"],
          rope_parameters={"full_attention": {"rope_type": "linear", "factor": 4.0,
                                              "rope_theta": 1000000.0},
                           "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})),
]


def randomize(model, gen):
    # Gemma's RMSNorm multiplies by 1 + w: its norm weights are drawn around 0, so that every
    # model's norms scale by about 1.
    center = 0.0 if model.config.model_type.startswith("gemma") else 1.0
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32) * 0.1
            p.copy_(center + noise if "norm" in name else noise)


@torch.no_grad()
def greedy(model, ids):
    """32 greedy tokens by full recomputation; returns tokens, first/last logits, min margin."""
    seq = list(ids)
    toks, first, last, margin = [], None, None, float("inf")
    for step in range(STEPS):
        logits = model(torch.tensor([seq])).logits[0, -1].float()
        top2 = torch.topk(logits, 2).values
        margin = min(margin, float(top2[0] - top2[1]))
        tok = int(torch.argmax(logits))
        if step == 0:
            first = logits.tolist()
        last = logits.tolist()
        toks.append(tok)
        seq.append(tok)
    return toks, first, last, margin


def build(name, model_cls, config_cls, dtype, kw, seed):
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    cfg = config_cls(**COMMON, **kw)
    torch.manual_seed(seed)
    model = model_cls(cfg).eval()
    randomize(model, torch.Generator().manual_seed(seed))
    model.to(dtype).save_pretrained(d, safe_serialization=True)
    for extra in os.listdir(d):  # keep config.json and model.safetensors only
        if extra not in ("config.json", "model.safetensors"):
            os.remove(os.path.join(d, extra))

    # The golden run: what is on disk, in fp32.
    ref = model_cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    assert ref.config.tie_word_embeddings == kw["tie_word_embeddings"]
    rng = np.random.default_rng(seed)
    prompts, worst, redrawn = [], float("inf"), 0
    for n in PROMPT_LENS:
        while True:
            ids = [int(v) for v in rng.integers(0, kw["vocab_size"], n)]
            toks, first, last, margin = greedy(ref, ids)
            if margin >= MIN_MARGIN:
                break
            redrawn += 1
        worst = min(worst, margin)
        prompts.append({"ids": ids, "greedy": toks, "min_margin": margin,
                        "logits_first": [round(v, 6) for v in first],
                        "logits_last": [round(v, 6) for v in last]})
    golden = {"model": name, "architecture": model_cls.__name__, "stored_dtype": str(dtype),
              "steps": STEPS, "min_margin": worst, "prompts": prompts}
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(golden, f, separators=(",", ":"))
        f.write("\n")
    size = os.path.getsize(os.path.join(d, "model.safetensors"))
    absmax = max(max(abs(v) for v in p["logits_first"] + p["logits_last"]) for p in prompts)
    print(f"{name}: {size} bytes, min margin {worst:.3g}, max |logit| {absmax:.2f}, "
          f"{redrawn} prompt(s) re-drawn")


def main():
    os.makedirs(OUT, exist_ok=True)
    only = set(sys.argv[1:])
    unknown = only - {m[0] for m in MODELS}
    if unknown:
        sys.exit(f"unknown model(s): {', '.join(sorted(unknown))}")
    for i, (name, model_cls, config_cls, dtype, kw) in enumerate(MODELS):
        if not only or name in only:
            build(name, model_cls, config_cls, dtype, kw, seed=100 + i)


if __name__ == "__main__":
    main()

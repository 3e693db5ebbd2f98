#!/usr/bin/env python3
"""tests/golden/hf_tiny/llama3_tied.gguf: the tiny Llama 3-scaled Hugging Face model of
make_hf_tiny_models.py (hf_tiny/llama3_tied/: rope_type llama3, factor 8, low/high frequency
factors 1 and 4, original context 64, theta 500000, head_dim 32 != hidden / heads, tied
embeddings) written as GGUF the way llama.cpp's convert_hf_to_gguf.py writes a LlamaForCausalLM
(`--outtype f32`), so that rz can be checked on it against the transformers golden already in
hf_tiny/llama3_tied/golden.json (tests/model/cpu_gguf_llama3_test.cpp, and the CUDA executor in
tests/gpu/gpu_executor_test.cpp):

  - tensor names: token_embd, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm,
    ffn_gate, ffn_up, ffn_down}, output_norm; no output.weight (tied embeddings);
  - Q and K rows permuted for llama.cpp's adjacent-pair rotation (LlamaModel.permute, K with the
    KV head count);
  - rope_freqs.weight: [head_dim / 2] F32, one divisor per rotary frequency, computed from the
    config as LlamaModel.generate_extra_tensors does (torch fp32 frequencies, python floats);
  - metadata: llama.{context_length, embedding_length, block_count, feed_forward_length,
    attention.head_count, attention.head_count_kv, attention.key_length, attention.value_length,
    rope.freq_base, attention.layer_norm_rms_epsilon, vocab_size, rope.dimension_count},
    general.file_type ALL_F32; NO rope scaling keys (the converter writes none for llama3).

Two departures, both deliberate: (1) llama.cpp reads original_max_position_embeddings from the top
level of config.json, defaulting to 8192 (the value inside rope_scaling of every Llama 3.x
release), while transformers reads it from the rope dict; this script takes the rope dict's value
(64), so that both sides scale the same way. (2) The tiny model has no tokenizer, so no
tokenizer.* keys are written (rz's executors do not need them; llama.vocab_size gives n_vocab).

After writing, transformers' own GGUF reader (which undoes the Q/K permutation) loads the file
and must give back every weight of model.safetensors exactly: a check of the names and the
permutation that does not depend on rz.

Needs torch, transformers, accelerate (transformers' GGUF reader), safetensors and gguf:

  /opt/refpy/bin/python tests/golden/make_llama3_gguf.py

(written with torch 2.15.0, transformers 5.23.0, gguf 0.19.0, accelerate 1.15.0; the output
depends only on model.safetensors, config.json and the gguf writer's layout)
"""
import json
import math
import os

import gguf
import numpy as np
import torch
from safetensors.torch import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "hf_tiny", "llama3_tied")
OUT = os.path.join(HERE, "hf_tiny", "llama3_tied.gguf")


def permute(weights, n_head, n_head_kv):
    """llama.cpp's LlamaModel.permute: HF rotate-half rows -> adjacent-pair rows."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2)
            .reshape(weights.shape))


def rope_factors(hp, rope):
    """llama.cpp's LlamaModel.generate_extra_tensors for rope_type llama3."""
    base = rope.get("rope_theta", 10000.0)
    if (dim := hp.get("head_dim")) is None:
        dim = hp["hidden_size"] // hp["num_attention_heads"]
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor = rope.get("factor", 8.0)
    low_freq_factor = rope.get("low_freq_factor", 1.0)
    high_freq_factor = rope.get("high_freq_factor", 4.0)
    old_context_len = rope.get("original_max_position_embeddings", 8192)  # see departure (1)
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            out.append(1)
        elif wavelen > low_freq_wavelen:
            out.append(factor)
        else:
            smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(out, dtype=torch.float32)


# HF tensor name suffix -> GGUF name (gguf's TensorNameMap for llama, the ones this model has).
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    parts = hf.split(".")
    if parts[:2] == ["model", "layers"]:
        return f"blk.{int(parts[2])}." + LAYER_NAMES[".".join(parts[3:])]
    raise ValueError(f"unexpected tensor {hf}")


def main():
    with open(os.path.join(SRC, "config.json")) as f:
        hp = json.load(f)
    rope = hp.get("rope_parameters") or hp.get("rope_scaling")
    assert hp["architectures"] == ["LlamaForCausalLM"] and rope["rope_type"] == "llama3"
    assert hp["tie_word_embeddings"]
    n_head, n_kv = hp["num_attention_heads"], hp["num_key_value_heads"]
    head_dim = hp.get("head_dim") or hp["hidden_size"] // n_head

    w = gguf.GGUFWriter(OUT, "llama")
    w.add_type("model")
    w.add_name("llama3_tied")
    w.add_block_count(hp["num_hidden_layers"])
    w.add_context_length(hp["max_position_embeddings"])
    w.add_embedding_length(hp["hidden_size"])
    w.add_feed_forward_length(hp["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_freq_base(rope["rope_theta"])
    w.add_layer_norm_rms_eps(hp["rms_norm_eps"])
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(hp["vocab_size"])
    w.add_rope_dimension_count(head_dim)

    # The converter emits generate_extra_tensors() first, then the model's tensors.
    factors = rope_factors(hp, rope)
    w.add_tensor("rope_freqs.weight", factors.numpy())
    tensors = load_file(os.path.join(SRC, "model.safetensors"))
    for hf in tensors:
        t = tensors[hf].to(torch.float32)
        if hf.endswith("q_proj.weight"):
            t = permute(t, n_head, n_head)
        elif hf.endswith("k_proj.weight"):
            t = permute(t, n_head, n_kv)
        w.add_tensor(gguf_name(hf), t.contiguous().numpy())

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{OUT}: {os.path.getsize(OUT)} bytes; rope_freqs {np.array2string(factors.numpy(), precision=4)}")


def check_with_transformers():
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(os.path.dirname(OUT), gguf_file=os.path.basename(OUT),
                                             dtype=torch.float32)
    got = m.state_dict()
    want = load_file(os.path.join(SRC, "model.safetensors"))
    for name, t in want.items():
        assert name in got, f"transformers' GGUF reader has no {name}"
        assert torch.equal(got[name], t.float()), f"{name} differs after the GGUF round trip"
    print(f"transformers' GGUF reader gives back all {len(want)} weights exactly")


if __name__ == "__main__":
    main()
    check_with_transformers()

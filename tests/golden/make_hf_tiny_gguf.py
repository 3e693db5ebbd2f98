#!/usr/bin/env python3
"""tests/golden/hf_tiny/{qwen3,phi3,gemma3}.gguf: the tiny Hugging Face models of
make_hf_tiny_models.py (hf_tiny/qwen3/, phi3/, gemma3/) written as GGUF the way llama.cpp's
convert_hf_to_gguf.py writes a Qwen3ForCausalLM, a Phi3ForCausalLM and a Gemma3ForCausalLM
(`--outtype f32`), so that rz is checked on them against
the transformers golden already in hf_tiny/<name>/golden.json (tests/cpu/cpu_hf_model_test.cpp,
and the CUDA executor in tests/gpu/gpu_executor_test.cpp):

  qwen3: general.architecture "qwen3"; token_embd, output_norm, (no output.weight: tied),
         blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, attn_q_norm, attn_k_norm,
         ffn_norm, ffn_gate, ffn_up, ffn_down}; Q/K rows as Hugging Face stores them (NeoX
         rotation, no permutation); qwen3.attention.key_length / value_length = head_dim.
  phi3:  general.architecture "phi3"; blk.N.attn_qkv ([q; k; v] rows, HF's qkv_proj) and
         blk.N.ffn_up ([gate; up] rows, HF's gate_up_proj), no ffn_gate; output.weight (untied);
         phi3.rope.dimension_count, phi3.attention.sliding_window,
         phi3.rope.scaling.original_context_length as Phi3MiniModel.set_gguf_parameters writes
         them (no rope factor tensors: the model has no rope scaling).
  gemma3: general.architecture "gemma3"; blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_q_norm,
         attn_k_norm, attn_output, post_attention_norm, ffn_norm (HF's pre_feedforward_layernorm),
         ffn_gate, ffn_up, ffn_down, post_ffw_norm}; every norm weight + 1 (Gemma's RMSNorm
         multiplies by 1 + w; the converter stores 1 + w); gemma3.attention.sliding_window,
         key_length / value_length; the layer pattern, local rotary base and attention scale are
         not in the file (llama.cpp fixes them: every sixth layer global, 10000,
         1 / sqrt(head_dim)), which the tiny model's config matches.

The tiny models have no tokenizer, so no tokenizer.* keys are written ({arch}.vocab_size gives
n_vocab). After writing, transformers' own GGUF reader loads each file and must give back every
weight of model.safetensors exactly: a check of the names and layouts that does not depend on rz.

  /opt/refpy/bin/python tests/golden/make_hf_tiny_gguf.py

(written with torch 2.15.0, transformers 5.24.0, gguf 0.19.0, accelerate 1.15.0)
"""
import json
import os

import gguf
import torch
from safetensors.torch import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = os.path.join(HERE, "hf_tiny")

# HF tensor name suffix -> GGUF name (gguf's TensorNameMap, the ones these models have).
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.qkv_proj.weight": "attn_qkv.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.gate_up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


GEMMA_NAMES = {
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
}


def gguf_name(hf, arch):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")
    if parts[:2] == ["model", "layers"]:
        rest = ".".join(parts[3:])
        names = {**LAYER_NAMES, **GEMMA_NAMES} if arch == "gemma3" else LAYER_NAMES
        return f"blk.{int(parts[2])}." + names[rest]
    raise ValueError(f"unexpected tensor {hf}")


def convert(name, arch):
    src = os.path.join(TINY, name)
    out = os.path.join(TINY, name + ".gguf")
    with open(os.path.join(src, "config.json")) as f:
        hp = json.load(f)
    rope = hp.get("rope_parameters") or {}
    if arch == "gemma3":
        assert rope["sliding_attention"]["rope_theta"] == 10000.0
        assert hp["query_pre_attn_scalar"] == hp["head_dim"]
        assert hp["layer_types"] == ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                                     for i in range(hp["num_hidden_layers"])]
        rope = rope["full_attention"]
    assert rope.get("rope_type", "default") == "default"
    n_head, n_kv = hp["num_attention_heads"], hp["num_key_value_heads"]
    head_dim = hp.get("head_dim") or hp["hidden_size"] // n_head

    w = gguf.GGUFWriter(out, arch)
    w.add_type("model")
    w.add_name(name)
    w.add_block_count(hp["num_hidden_layers"])
    w.add_context_length(hp["max_position_embeddings"])
    w.add_embedding_length(hp["hidden_size"])
    w.add_feed_forward_length(hp["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_freq_base(rope.get("rope_theta", 10000.0))
    w.add_layer_norm_rms_eps(hp["rms_norm_eps"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(hp["vocab_size"])
    if arch == "gemma3":
        w.add_sliding_window(hp["sliding_window"])
    if arch in ("qwen3", "gemma3"):
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    if arch == "phi3":
        w.add_rope_dimension_count(head_dim)
        w.add_rope_scaling_orig_ctx_len(hp["original_max_position_embeddings"])
        w.add_sliding_window(hp["sliding_window"])

    tensors = load_file(os.path.join(src, "model.safetensors"))
    for hf in tensors:
        t = tensors[hf].to(torch.float32)
        if arch == "gemma3" and hf.endswith("norm.weight"):
            t = t + 1  # Gemma3Model.modify_tensors
        w.add_tensor(gguf_name(hf, arch), t.contiguous().numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{out}: {os.path.getsize(out)} bytes")
    return out, src


def check_with_transformers(out, src):
    from transformers import AutoConfig, AutoModelForCausalLM
    # The hyper-parameters from config.json: transformers' GGUF reader takes no head_dim from
    # qwen3.attention.key_length (it would build the default 128); the weights from the GGUF.
    m = AutoModelForCausalLM.from_pretrained(os.path.dirname(out), gguf_file=os.path.basename(out),
                                             config=AutoConfig.from_pretrained(src),
                                             dtype=torch.float32)
    got = m.state_dict()
    want = load_file(os.path.join(src, "model.safetensors"))
    for name, t in want.items():
        assert name in got, f"transformers' GGUF reader has no {name}"
        if "gemma3" in out and name.endswith("norm.weight"):
            # (w + 1) - 1 in fp32: within an ulp of 1
            assert torch.allclose(got[name], t.float(), rtol=0, atol=2 ** -23), name
        else:
            assert torch.equal(got[name], t.float()), f"{name} differs after the GGUF round trip"
    print(f"  transformers' GGUF reader gives back all {len(want)} weights (gemma's norm weights "
          f"within an ulp of 1, after its +1 and -1)")


if __name__ == "__main__":
    for name, arch in (("qwen3", "qwen3"), ("phi3", "phi3"), ("gemma3", "gemma3")):
        check_with_transformers(*convert(name, arch))

#!/usr/bin/env python3
"""Writes hf_config_golden.json: Hugging Face config.json inputs and the hyper-parameters that
transformers itself derives from them (defaults, kv heads, head_dim, rope settings, q/k/v/o
biases), read from the config object and from a model instantiated on the meta device.
tests/formats/hf_config_test.cpp parses each input with rz and compares.

Run with the reference environment (needs torch + transformers):
    /opt/refpy/bin/python tests/golden/make_hf_config_golden.py
"""
import json
import os

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

CASES = {
    # SmolLM2-135M-Instruct's config.json (the default model's source)
    "smollm2_llama": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576,
        "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
        "intermediate_size": 1536, "vocab_size": 49152, "max_position_embeddings": 8192,
        "rope_theta": 100000, "rms_norm_eps": 1e-05, "tie_word_embeddings": True,
        "hidden_act": "silu", "attention_bias": False, "rope_scaling": None,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16",
    },
    "llama_defaults": {
        "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100,
    },
    "llama_head_dim_bias_null_kv": {
        "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1,
        "num_attention_heads": 4, "num_key_value_heads": None, "head_dim": 32,
        "intermediate_size": 96, "vocab_size": 50, "attention_bias": True,
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 4096,
    },
    "llama3_rope": {
        "model_type": "llama", "hidden_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 256,
        "vocab_size": 300, "max_position_embeddings": 131072, "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    },
    "llama3_rope_type_spelling_no_original": {
        "model_type": "llama", "hidden_size": 128, "num_hidden_layers": 1,
        "num_attention_heads": 4, "intermediate_size": 256, "vocab_size": 300,
        "max_position_embeddings": 16384,
        "rope_scaling": {"type": "llama3", "factor": 4.0, "low_freq_factor": 2.0,
                         "high_freq_factor": 8.0},
    },
    "llama_linear_rope": {
        "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 128, "vocab_size": 100,
        "rope_scaling": {"type": "linear", "factor": 2.0},
    },
    "llama_rope_parameters_v5": {
        "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 128, "vocab_size": 100,
        "rope_parameters": {"rope_theta": 250000.0, "rope_type": "linear", "factor": 3.0},
    },
    "llama_top_level_original": {
        "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 128, "vocab_size": 100,
        "max_position_embeddings": 65536, "original_max_position_embeddings": 4096,
        "rope_scaling": {"rope_type": "yarn", "factor": 16.0,
                         "original_max_position_embeddings": 2048},
    },
    # Qwen2.5-0.5B-Instruct's config.json
    "qwen2_5_0_5b": {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
        "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
        "intermediate_size": 4864, "vocab_size": 151936, "max_position_embeddings": 32768,
        "rope_theta": 1000000.0, "rms_norm_eps": 1e-06, "tie_word_embeddings": True,
        "sliding_window": 32768, "use_sliding_window": False, "max_window_layers": 21,
        "hidden_act": "silu", "torch_dtype": "bfloat16",
    },
    "qwen2_yarn": {
        "model_type": "qwen2", "hidden_size": 128, "num_hidden_layers": 1,
        "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 256,
        "vocab_size": 500, "max_position_embeddings": 32768,
        "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
    },
    "qwen2_defaults": {
        "model_type": "qwen2", "hidden_size": 512, "num_hidden_layers": 1,
        "num_attention_heads": 64, "intermediate_size": 512, "vocab_size": 500,
    },
    # Mistral-7B-v0.1's config.json
    "mistral_7b": {
        "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "intermediate_size": 14336, "vocab_size": 32000, "max_position_embeddings": 32768,
        "rope_theta": 10000.0, "rms_norm_eps": 1e-05, "tie_word_embeddings": False,
        "sliding_window": 4096, "hidden_act": "silu", "torch_dtype": "bfloat16",
    },
    "mistral_defaults": {
        "model_type": "mistral", "hidden_size": 256, "num_hidden_layers": 1,
        "num_attention_heads": 16, "intermediate_size": 512, "vocab_size": 500,
    },
}


def expected(cfg):
    c = AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(c)
    attn = m.model.layers[0].self_attn
    head_dim = attn.head_dim
    rp = c.rope_parameters
    rope_type = rp.get("rope_type", "default")
    out = {
        "n_embd": c.hidden_size,
        "n_layer": len(m.model.layers),
        "n_head": attn.q_proj.out_features // head_dim,
        "n_head_kv": attn.k_proj.out_features // head_dim,
        "head_dim": head_dim,
        "n_ff": m.model.layers[0].mlp.gate_proj.out_features,
        "n_vocab": m.model.embed_tokens.num_embeddings,
        "n_ctx_train": c.max_position_embeddings,
        "rope_theta": rp["rope_theta"],
        "norm_eps": m.model.norm.variance_epsilon,
        "tied_embeddings": bool(c.tie_word_embeddings),
        "qkv_bias": attn.q_proj.bias is not None,
        "o_bias": attn.o_proj.bias is not None,
        "rope_type": rope_type,
    }
    if rope_type != "default":
        out["rope_factor"] = rp["factor"]
    if rope_type in ("yarn", "llama3"):
        out["rope_original_context"] = rp["original_max_position_embeddings"]
    if rope_type == "llama3":
        out["rope_low_freq_factor"] = rp["low_freq_factor"]
        out["rope_high_freq_factor"] = rp["high_freq_factor"]
    return out


def main():
    cases = [{"name": name, "config": cfg, "expected": expected(cfg)} for name, cfg in CASES.items()]
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "hf_config_golden.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "cases": cases}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()

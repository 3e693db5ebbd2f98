#!/usr/bin/env python3
"""Golden data for the CPU executor's rotary embedding (cpu/cpu_ops.cpp): Hugging Face
transformers' LlamaRotaryEmbedding (default, linear, llama3, yarn) gives the inverse frequencies,
attention factor and cos/sin, and its apply_rotary_pos_emb rotates a fixed vector (NeoX half-split
pairs, the Hugging Face layout). Writes tests/golden/cpu_rope_golden.json.

  /opt/refpy/bin/python tests/golden/make_cpu_rope_golden.py
"""
import json
import os

import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

HERE = os.path.dirname(os.path.abspath(__file__))
POSITIONS = [0, 1, 17, 1000, 5000]

CASES = [
    # name, head_dim, theta, max_position_embeddings, rope_parameters (besides rope_theta)
    ("default", 64, 10000.0, 4096, {"rope_type": "default"}),
    ("linear", 128, 10000.0, 16384, {"rope_type": "linear", "factor": 4.0}),
    ("llama3", 128, 500000.0, 131072,
     {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192}),
    ("yarn", 64, 10000.0, 16384,
     {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}),
    ("yarn_qwen", 128, 1000000.0, 131072,
     {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}),
]


def main():
    out = {"reference": "transformers %s" % __import__("transformers").__version__, "cases": []}
    for name, head_dim, theta, max_pos, params in CASES:
        rp = dict(params, rope_theta=theta)
        cfg = LlamaConfig(hidden_size=head_dim * 4, num_attention_heads=4, head_dim=head_dim,
                          max_position_embeddings=max_pos, rope_parameters=rp)
        rope = LlamaRotaryEmbedding(config=cfg)
        inv_freq, attn_factor = rope.inv_freq.float(), float(rope.attention_scaling)
        pos = torch.tensor([POSITIONS], dtype=torch.long)
        cos, sin = rope(torch.zeros(1, dtype=torch.float32), pos)
        cos, sin = cos[0], sin[0]  # [P, D]
        # NeoX rotation of a fixed vector at each position (one head).
        g = torch.Generator().manual_seed(5)
        x = torch.randn(head_dim, generator=g)
        q = x.expand(len(POSITIONS), head_dim)[None, None]  # [1, 1, P, D]
        rot, _ = apply_rotary_pos_emb(q, q, cos[None], sin[None])
        out["cases"].append({
            "name": name, "head_dim": head_dim, "theta": theta, "params": params,
            "n_ctx_train": max_pos,
            "inv_freq": [float(v) for v in inv_freq],
            "attn_factor": float(attn_factor),
            "positions": POSITIONS,
            "cos": [[float(v) for v in row[: head_dim // 2]] for row in cos],
            "sin": [[float(v) for v in row[: head_dim // 2]] for row in sin],
            "x": [float(v) for v in x],
            "x_rotated_neox": [[float(v) for v in row] for row in rot[0, 0]],
        })
        print(name, "attn_factor", attn_factor)
    path = os.path.join(HERE, "cpu_rope_golden.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    print("wrote", path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A tiny synthetic Qwen2-architecture GGUF (tests/golden/cpu_tiny_qwen2.gguf, ~1 MB) whose
matrices use many storage types (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q5_K, Q6_K), with
Q/K/V biases, NeoX rotary pairs, an untied output matrix and a quantized embedding, plus what
Hugging Face transformers computes for it in fp32 (tests/golden/cpu_tiny_golden.json): the logits
at every position of a fixed token sequence. The CPU executor must reproduce them.

Weights of the K-quant types are random blocks (random bit patterns with small fp16 scales; the
gguf package has no K-quant quantizer), the others are quantized from random floats with the
gguf package. Both sides read the same bytes; transformers dequantizes them with the gguf package.

  /opt/refpy/bin/python tests/golden/make_cpu_tiny_golden.py
"""
import json
import os

import numpy as np
import torch
from gguf import GGMLQuantizationType as T
from gguf import GGUFWriter, quants
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "cpu_tiny_qwen2.gguf"
N_EMBD, N_HEAD, N_HEAD_KV, N_FF, N_VOCAB, N_LAYER = 256, 4, 2, 256, 256, 3
HEAD_DIM = N_EMBD // N_HEAD
SEQ = [int(v) for v in np.random.default_rng(11).integers(0, N_VOCAB, 24)]
PREFILL = 8  # the executor prefills SEQ[:8], then decodes the rest one token at a time

rng = np.random.default_rng(1234)

# Storage type of each matrix, per layer (q, k, v, o, gate, up, down).
LAYER_TYPES = [
    [T.Q4_K, T.Q6_K, T.Q8_0, T.Q4_0, T.Q4_1, T.F16, T.BF16],
    [T.F32, T.Q5_0, T.Q5_K, T.Q6_K, T.Q4_K, T.Q8_0, T.Q4_1],
    [T.Q8_0, T.Q4_1, T.Q4_0, T.F16, T.Q6_K, T.Q5_K, T.Q4_K],
]


def f16(x):
    return np.asarray(x, dtype=np.float16).view(np.uint8)


def random_kquant(t, rows, cols):
    """Random K-quant blocks with scales that keep weights around +-0.1."""
    nb = rows * cols // 256
    if t == T.Q4_K:   # d, dmin, scales[12], qs[128]
        b = rng.integers(0, 256, (nb, 144), dtype=np.uint8)
        b[:, 0:2] = f16(rng.uniform(0.5e-4, 1.5e-4, nb)).reshape(nb, 2)
        b[:, 2:4] = f16(rng.uniform(0.5e-4, 1.5e-4, nb)).reshape(nb, 2)
    elif t == T.Q5_K:  # d, dmin, scales[12], qh[32], qs[128]
        b = rng.integers(0, 256, (nb, 176), dtype=np.uint8)
        b[:, 0:2] = f16(rng.uniform(0.3e-4, 0.8e-4, nb)).reshape(nb, 2)
        b[:, 2:4] = f16(rng.uniform(0.5e-4, 1.5e-4, nb)).reshape(nb, 2)
    elif t == T.Q6_K:  # ql[128], qh[64], scales[16] int8, d
        b = rng.integers(0, 256, (nb, 210), dtype=np.uint8)
        b[:, 208:210] = f16(rng.uniform(1e-5, 3e-5, nb)).reshape(nb, 2)
    else:
        raise ValueError(t)
    return b.reshape(rows, -1)


def add_matrix(w, name, t, rows, cols):
    if t in (T.Q4_K, T.Q5_K, T.Q6_K):
        w.add_tensor(name, random_kquant(t, rows, cols), raw_dtype=t)
        return
    x = rng.normal(0.0, 0.06, (rows, cols)).astype(np.float32)
    if t == T.F32:
        w.add_tensor(name, x)
    elif t == T.F16:
        w.add_tensor(name, x.astype(np.float16))
    else:
        w.add_tensor(name, quants.quantize(x, t), raw_dtype=t)


def write_gguf(path):
    w = GGUFWriter(path, "qwen2")
    w.add_name("rz tiny qwen2")
    w.add_context_length(2048)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_freq_base(1000000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(N_VOCAB)
    add_matrix(w, "token_embd.weight", T.Q6_K, N_VOCAB, N_EMBD)
    for i, types in enumerate(LAYER_TYPES):
        p = "blk.%d." % i
        kv = N_HEAD_KV * HEAD_DIM
        w.add_tensor(p + "attn_norm.weight", rng.uniform(0.5, 1.5, N_EMBD).astype(np.float32))
        add_matrix(w, p + "attn_q.weight", types[0], N_EMBD, N_EMBD)
        add_matrix(w, p + "attn_k.weight", types[1], kv, N_EMBD)
        add_matrix(w, p + "attn_v.weight", types[2], kv, N_EMBD)
        w.add_tensor(p + "attn_q.bias", rng.normal(0, 0.5, N_EMBD).astype(np.float32))
        w.add_tensor(p + "attn_k.bias", rng.normal(0, 0.5, kv).astype(np.float32))
        w.add_tensor(p + "attn_v.bias", rng.normal(0, 0.1, kv).astype(np.float32))
        add_matrix(w, p + "attn_output.weight", types[3], N_EMBD, N_EMBD)
        w.add_tensor(p + "ffn_norm.weight", rng.uniform(0.5, 1.5, N_EMBD).astype(np.float32))
        add_matrix(w, p + "ffn_gate.weight", types[4], N_FF, N_EMBD)
        add_matrix(w, p + "ffn_up.weight", types[5], N_FF, N_EMBD)
        add_matrix(w, p + "ffn_down.weight", types[6], N_EMBD, N_FF)
    w.add_tensor("output_norm.weight", rng.uniform(0.5, 1.5, N_EMBD).astype(np.float32))
    add_matrix(w, "output.weight", T.Q8_0, N_VOCAB, N_EMBD)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    path = os.path.join(HERE, NAME)
    write_gguf(path)
    config = AutoConfig.from_pretrained(HERE, gguf_file=NAME)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    parsed = load_gguf_checkpoint(path, return_tensors=True, model_to_load=model)
    state = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in parsed["tensors"].items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise SystemExit("weights do not match: missing %s unexpected %s" % (missing, unexpected))
    model.eval()
    print(config)
    with torch.no_grad():
        logits = model(torch.tensor([SEQ])).logits[0]  # [len(SEQ), n_vocab]
    out = {"model": NAME, "reference": "transformers %s, torch %s, fp32" % (
        __import__("transformers").__version__, torch.__version__),
        "tokens": SEQ, "prefill": PREFILL,
        # logits after position p (p = PREFILL-1 .. len-1): row 0 is the prefill's
        "logits": [[round(float(v), 6) for v in logits[p]] for p in range(PREFILL - 1, len(SEQ))]}
    print("logit range %.3f .. %.3f" % (float(logits.min()), float(logits.max())))
    with open(os.path.join(HERE, "cpu_tiny_golden.json"), "w") as f:
        json.dump(out, f, separators=(",", ":"))
    print("wrote", path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()

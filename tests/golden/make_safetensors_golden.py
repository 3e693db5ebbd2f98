#!/usr/bin/env python3
"""Writes tiny .safetensors files with the reference `safetensors` package, for
tests/formats/safetensors_test.cpp (an independent check of rz's reader and of the byte layout
its own writer produces). The values are fixed here and repeated, as literals, in the test.

    /opt/refpy/bin/python tests/golden/make_safetensors_golden.py
"""
import os

import numpy as np
import torch
from safetensors.numpy import save_file
from safetensors.torch import save_file as save_torch

HERE = os.path.dirname(os.path.abspath(__file__))

tensors = {
    "a": (np.arange(6, dtype=np.float32) * 0.5).reshape(2, 3),        # F32 [2, 3]
    "b": np.array([1.0, -2.0, 0.5, 65504.0], dtype=np.float16),        # F16 [4]
    "scalar": np.array(7.0, dtype=np.float32),                         # F32 []
    "model.layers.0.mlp.up_proj.weight": np.full((3, 2, 2), -1.5, dtype=np.float32),
}
save_file(tensors, os.path.join(HERE, "tiny.safetensors"), metadata={"format": "pt"})

# BF16 needs torch (numpy has no bfloat16).
save_torch({"c": torch.tensor([[1.0, -1.0], [3.140625, 0.0]], dtype=torch.bfloat16),
            "d": torch.ones(3, dtype=torch.float32)},
           os.path.join(HERE, "tiny_bf16.safetensors"))

save_file({"ids": np.arange(4, dtype=np.int64), "w": np.ones(2, dtype=np.float32)},
          os.path.join(HERE, "tiny_i64.safetensors"))

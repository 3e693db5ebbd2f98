#!/usr/bin/env python3
"""Checks the numpy Q4_K / Q6_K quantizers of quants_reference.py against ggml's own C reference
quantizers (quantize_row_q4_K_ref, quantize_row_q6_K_ref), byte for byte, on fresh random data.

Not part of the test suite (CI has no ggml library); run it by hand after changing the port:
  python -m venv /tmp/ggmlpy && /tmp/ggmlpy/bin/pip install numpy gguf libggml-python
  /tmp/ggmlpy/bin/python tests/quants/quants_ggml_crosscheck.py [path/to/libggml-base.so] [rounds]
Without a path it looks for libggml-base.so inside an installed libggml-python package.
"""
import ctypes
import glob
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quants_reference as ref  # noqa: E402


def find_lib():
    import importlib.util
    spec = importlib.util.find_spec("libggml")
    roots = list(spec.submodule_search_locations) if spec and spec.submodule_search_locations else []
    for root in roots:
        hits = glob.glob(os.path.join(root, "**", "libggml-base.so*"), recursive=True)
        if hits:
            return sorted(hits)[0]
    raise SystemExit("libggml-base.so not found: pass its path")


def random_rows(rng, n_rows, n):
    kind = rng.integers(0, 9)
    x = rng.standard_normal((n_rows, n)).astype(np.float32)
    if kind == 1:
        x = -np.abs(x)
    elif kind == 2:
        x = x * np.float32(rng.uniform(1e3, 3e4))
    elif kind == 3:
        x[:, ::7] = 0
    elif kind == 4:
        x = np.abs(x) + np.float32(3)
    elif kind == 5:
        x = x * np.exp(rng.uniform(-8, 8, (n_rows, 1))).astype(np.float32)
    elif kind == 6:
        x[:, :] = np.float32(rng.standard_normal())
    elif kind == 7:
        x[:, 32:96] = 0
    elif kind == 8:
        x = np.round(x * 4) / np.float32(4)
    return np.ascontiguousarray(x, dtype=np.float32)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else find_lib()
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    lib = ctypes.CDLL(path)
    seed = int(time.time_ns() % (1 << 32))
    rng = np.random.default_rng(seed)
    fails = 0
    for name, fn, port, type_size in [("q4_K", lib.quantize_row_q4_K_ref, ref.quantize_q4_k, 144),
                                      ("q6_K", lib.quantize_row_q6_K_ref, ref.quantize_q6_k, 210)]:
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        fn.restype = None
        blocks = 0
        for _ in range(rounds):
            x = random_rows(rng, 8, 256 * 4)
            out = np.zeros(x.size // 256 * type_size, dtype=np.uint8)
            fn(x.ctypes.data, out.ctypes.data, x.size)
            mine = port(x).reshape(-1)
            bad = np.nonzero(out.reshape(-1, type_size) != mine.reshape(-1, type_size))[0]
            blocks += x.size // 256
            if bad.size:
                fails += 1
                print(f"{name}: {len(set(bad.tolist()))} of {x.size // 256} blocks differ (seed {seed})")
        print(f"{name}: {blocks} blocks compared")
    print("crosscheck", "FAILED" if fails else "passed", f"seed {seed}")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()

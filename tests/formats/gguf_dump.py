#!/usr/bin/env python3
"""Prints what the gguf Python package (the reference reader) finds in GGUF files, as one JSON
object on stdout mapping each path given to its dump: version, alignment, data offset, every metadata key with its value type numbers and
value, and every tensor's name, type, shape (GGUF order), offset relative to the data section,
byte count, first/last 16 bytes and a position-weighted checksum of its data.
tests/formats/gguf_test.cpp runs it with .venv/bin/python and compares with rz's reader.

    .venv/bin/python tests/formats/gguf_dump.py FILE.gguf [FILE.gguf ...]
"""
import json
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType


def checksum(data: np.ndarray) -> int:
    """sum(byte[i] * (i % 65521 + 1)) mod 2**64, computed in chunks (mirrored in gguf_test.cpp)."""
    b = data.reshape(-1).view(np.uint8)
    total = 0
    chunk = 1 << 22
    for start in range(0, b.size, chunk):
        part = b[start:start + chunk].astype(np.uint64)
        w = (np.arange(start, start + part.size, dtype=np.uint64) % np.uint64(65521)) + np.uint64(1)
        total = (total + int(np.sum(part * w, dtype=np.uint64))) % (1 << 64)
    return total


def dump(path):
    r = GGUFReader(path)
    meta = []
    for name, field in r.fields.items():
        if name.startswith("GGUF."):
            continue  # the reader's own entries for the header
        types = [int(t) for t in field.types]
        if field.types[0] == GGUFValueType.ARRAY and len(field.types) > 2:
            value = None  # nested arrays: contents() cannot flatten them
        else:
            value = field.contents()
        meta.append({"key": name, "types": types, "value": value})
    tensors = []
    for t in r.tensors:
        raw = np.asarray(t.data).reshape(-1).view(np.uint8)
        tensors.append({
            "name": t.name,
            "type": int(t.tensor_type),
            "shape": [int(x) for x in t.shape],
            "offset": int(t.data_offset - r.data_offset),
            "n_bytes": int(t.n_bytes),
            "head": raw[:16].tobytes().hex(),
            "tail": raw[-16:].tobytes().hex(),
            "checksum": str(checksum(raw)),
        })
    version = int(r.fields["GGUF.version"].parts[0][0])
    return {"version": version, "alignment": int(r.alignment), "data_offset": int(r.data_offset),
            "metadata": meta, "tensors": tensors}


def main():
    json.dump({p: dump(p) for p in sys.argv[1:]}, sys.stdout, allow_nan=False)


if __name__ == "__main__":
    main()

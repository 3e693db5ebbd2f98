#!/usr/bin/env bash
# On the GPU machine: unpacks DIR/xz/{bin,lib}/*.xz (made by scripts/gpu_pack.sh) into
# DIR/bin and DIR/lib, executable. python3's lzma: the machine may lack the xz tool.
set -euo pipefail
dir=${1:-.bundle}
python3 - "$dir" <<'PY'
import lzma, os, sys
d = sys.argv[1]
for sub in ("bin", "lib"):
    os.makedirs(os.path.join(d, sub), exist_ok=True)
    src = os.path.join(d, "xz", sub)
    for n in sorted(os.listdir(src)) if os.path.isdir(src) else []:
        out = os.path.join(d, sub, n[:-3] if n.endswith(".xz") else n)
        with open(os.path.join(src, n), "rb") as f:
            data = lzma.decompress(f.read())
        with open(out, "wb") as f:
            f.write(data)
        os.chmod(out, 0o755)
PY
ls "$dir/bin"

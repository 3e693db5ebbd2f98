#!/usr/bin/env bash
# Packs binaries for the GPU machine into a carry folder, xz-compressed (a call carries 64 MiB in
# all; stripped binaries shrink about 5x):
#
#   scripts/gpu_pack.sh DIR TARGET...     e.g. scripts/gpu_pack.sh .bundle gpu_test rz
#
# builds the targets through scripts/gpu_bundle.sh (RZ_GPU_BUILD_DIR, RZ_BUILD_JOBS), then leaves
#   DIR/xz/bin/TARGET.xz, DIR/xz/lib/SONAME.xz   (unpacked there by scripts/gpu_unpack.sh DIR)
#   DIR/vocab/ggml-vocab-gpt-2.gguf              (what `rz synth` copies its tokenizer from)
#   DIR/MANIFEST                                 (commit, targets, build, date)
# DIR must be git-ignored (.bundle, .stage_a, .stage_b are).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: gpu_pack.sh DIR TARGET...}
shift
scripts/gpu_bundle.sh "$@" >/dev/null
if [ "$dir" != .bundle ]; then
  mkdir -p "$dir"
  rm -rf "$dir/xz" "$dir/vocab"
  cp .bundle/MANIFEST "$dir/MANIFEST"
fi
rm -rf "$dir/xz"
python3 - .bundle "$dir" <<'PY'
import lzma, os, sys
src, dst = sys.argv[1], sys.argv[2]
for d in ("bin", "lib"):
    os.makedirs(os.path.join(dst, "xz", d), exist_ok=True)
    for n in sorted(os.listdir(os.path.join(src, d))):
        with open(os.path.join(src, d, n), "rb") as f:
            data = lzma.compress(f.read(), preset=6)
        with open(os.path.join(dst, "xz", d, n + ".xz"), "wb") as f:
            f.write(data)
PY
rm -rf .bundle/bin .bundle/lib
vocab=../shared/testdata/vocab/ggml-vocab-gpt-2.gguf
mkdir -p "$dir/vocab"
[ -f "$vocab" ] && cp "$vocab" "$dir/vocab/"
(cd "$dir" && find . -type f -printf '%s\t%p\n' | sort -k2 | awk -F'\t' '{ printf "  %8.1f MiB  %s\n", $1 / 1048576, $2 }')
echo "== $dir: $(( $(du -sb "$dir" | cut -f1) / 1048576 )) MiB"

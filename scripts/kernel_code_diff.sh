#!/usr/bin/env bash
# Compares the sm_90 machine code of kernels/*.cu files between a git revision and the working
# tree, kernel by kernel: for refactors that must leave the generated code unchanged (shared
# device helpers, renamed fields). Needs only nvcc (no GPU, no cuobjdump): each file is compiled
# to a cubin twice, without -lineinfo, and the bytes of every .text.<kernel> section are hashed
# (anonymous-namespace hashes in the names are masked, so the two sides' names match).
#
#   scripts/kernel_code_diff.sh [--base REV] kernels/gemv_q4k.cu kernels/argmax.cu ...
#
# Prints per file "same N/M" or the kernels whose code differs; a kernel whose name changed
# (e.g. a renamed template argument) shows as "only in base" / "only in tree". Exit status 1
# when anything differs. REV defaults to HEAD.
set -euo pipefail

base=HEAD
if [[ "${1:-}" == "--base" ]]; then
  base=$2
  shift 2
fi
[[ $# -gt 0 ]] || { sed -n '2,13p' "$0"; exit 2; }

root=$(git rev-parse --show-toplevel)
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/base"
git -C "$root" archive "$base" kernels model gpu | tar -x -C "$work/base"

cubin() {  # cubin SRC_ROOT FILE OUT
  "$nvcc" -cubin -arch=sm_90 -O3 -DNDEBUG --expt-relaxed-constexpr -std=c++20 -I"$1" -x cu \
    "$1/$2" -o "$3"
}

status=0
for f in "$@"; do
  f=${f#./}
  b=$(basename "$f" .cu)
  cubin "$work/base" "$f" "$work/$b.base.cubin"
  cubin "$root" "$f" "$work/$b.tree.cubin"
  python3 - "$f" "$work/$b.base.cubin" "$work/$b.tree.cubin" <<'EOF' || status=1
import hashlib, re, struct, sys

def texts(path):
    d = open(path, 'rb').read()
    shoff, = struct.unpack_from('<Q', d, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', d, 0x3a)
    secs = [struct.unpack_from('<IIQQQQ', d, shoff + i * shentsize) for i in range(shnum)]
    stroff = secs[shstrndx][4]
    out = {}
    for name, typ, _flags, _addr, off, size in secs:
        n = d[stroff + name:d.index(b'\0', stroff + name)].decode()
        if n.startswith('.text.'):
            out[re.sub(r'_GLOBAL__N__[0-9a-f]+_\d+_\w+?_cu_[0-9a-f]{8}', 'ANON', n)] = \
                hashlib.md5(d[off:off + size]).hexdigest()
    return out

f, a, b = sys.argv[1], texts(sys.argv[2]), texts(sys.argv[3])
same = sum(1 for k in a if b.get(k) == a[k])
print(f'{f}: same {same}/{len(a)}' + ('' if len(b) == len(a) else f' (tree has {len(b)})'))
for k in sorted(set(a) | set(b)):
    if a.get(k) != b.get(k):
        where = 'only in base' if k not in b else 'only in tree' if k not in a else 'differs'
        print(f'  {where}: {k[6:]}')
sys.exit(0 if same == len(a) == len(b) else 1)
EOF
done
exit $status

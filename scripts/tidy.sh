#!/usr/bin/env bash
# Runs clang-tidy (checks in .clang-tidy: bugprone-*, performance-*) over the C++ sources, using
# build/compile_commands.json (scripts/build.sh writes it). CUDA files are left out: clang-tidy
# cannot parse nvcc's flags. Exits non-zero when any check fires.
#   scripts/tidy.sh                 every C++ source
#   scripts/tidy.sh FILE...         only these
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/compile_commands.json ] || { echo "tidy: run scripts/build.sh first" >&2; exit 2; }
if [ $# -eq 0 ]; then
  mapfile -t files < <(git ls-files '*.cpp' | grep -v '^tests/golden/')
else
  files=("$@")
fi
run=$(command -v run-clang-tidy || command -v run-clang-tidy-14 || true)
if [ -n "$run" ]; then
  "$run" -quiet -extra-arg=-Wno-unknown-warning-option -p build -j"$(nproc)" "${files[@]/#/$PWD/}" 2>/dev/null | tee /tmp/rz-tidy.log |
    grep -E "warning:|error:" | sort -u || true
else
  for f in "${files[@]}"; do clang-tidy -quiet --extra-arg=-Wno-unknown-warning-option -p build "$f" 2>/dev/null; done | tee /tmp/rz-tidy.log |
    grep -E "warning:|error:" | sort -u || true
fi
! grep -qE "(warning|error): .*\[(bugprone|performance)-" /tmp/rz-tidy.log

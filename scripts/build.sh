#!/usr/bin/env bash
# Configures and builds rz in build/ (Release). Extra arguments go to cmake's configure step.
# Uses ccache for C++ and CUDA when it is installed (RZ_NO_CCACHE=1 turns that off); RZ_WERROR=1
# (CI) makes every warning an error.
set -euo pipefail
cd "$(dirname "$0")/.."
args=()
if [ -z "${RZ_NO_CCACHE:-}" ] && command -v ccache >/dev/null; then
  args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
[ -n "${RZ_WERROR:-}" ] && args+=(-DRZ_WERROR=ON)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${args[@]}" "$@" >/dev/null
cmake --build build -j"$(nproc)"

#!/usr/bin/env bash
# Builds the CPU-only tree (-DRZ_CUDA=OFF) with sanitizers in build-SAN/ and runs the CPU test
# suite under them (set up first with scripts/setup.sh):
#
#   scripts/sanitize.sh address,undefined            every CPU test under ASan + UBSan (CI runs this)
#   scripts/sanitize.sh thread [CTEST ARGS...]       e.g. -R 'actors_test|net_test|sched_test'
#
# Extra arguments go to ctest. A sanitizer report fails the test that triggered it.
set -euo pipefail
cd "$(dirname "$0")/.."
san=${1:?usage: sanitize.sh address,undefined|thread [ctest args...]}
shift
dir=build-${san//,/-}
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
# -O1 -g1: sanitizer reports keep function names and lines while the build stays short (CI).
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DRZ_CUDA=OFF \
  -DRZ_SANITIZE="$san" "${launcher[@]}" >/dev/null
cmake --build "$dir" -j"$(nproc)"
# detect_leaks: the CAF actor system and Beast keep some process-lifetime allocations; leaks
# still fail (LSan runs at exit of every test binary).
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
# Tests bounded by the model's speed wait this many times longer (the instrumented model is slow).
export RZ_TEST_TIME_SCALE=${RZ_TEST_TIME_SCALE:-4}
ctest --test-dir "$dir" --output-on-failure -j"$(nproc)" --timeout 600 "$@"

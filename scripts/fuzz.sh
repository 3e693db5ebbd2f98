#!/usr/bin/env bash
# The libFuzzer targets of tests/fuzz (built with clang, ASan and UBSan in build-fuzz/):
#
#   scripts/fuzz.sh build                     configure (-DRZ_FUZZ=ON, CPU only) and build them all
#   scripts/fuzz.sh run TARGET SECONDS        fuzz one target for SECONDS on its seed corpus; new
#                                             inputs go to build-fuzz/corpus/TARGET (kept between
#                                             runs), a crash to build-fuzz/artifacts/TARGET/; the
#                                             last line says target, time, runs, coverage, corpus
#   scripts/fuzz.sh regress                   every target over its seeds and its regression
#                                             inputs (tests/fuzz/regressions/TARGET/) once
#   scripts/fuzz.sh ci SECONDS                build, regress, then each target for SECONDS (CI)
#
# FUZZ_SEED=N fixes libFuzzer's seed (ci uses a fixed one).
# Targets: protocol_fuzz gguf_fuzz safetensors_fuzz tokenizer_fuzz chat_template_fuzz http_fuzz.
# A crash: the input that caused it is in build-fuzz/artifacts/TARGET/; fix the bug, add a unit
# test for it, and copy the input into tests/fuzz/regressions/TARGET/ so `regress` replays it.
# Needs clang and libclang-rt (Debian's clang; scripts/setup.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=$root/build-fuzz
targets=(protocol_fuzz gguf_fuzz safetensors_fuzz tokenizer_fuzz chat_template_fuzz http_fuzz)
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

max_len() {  # the longest input a target is given (bytes)
  case "$1" in
    gguf_fuzz | safetensors_fuzz) echo 65536 ;;
    http_fuzz | protocol_fuzz) echo 16384 ;;
    *) echo 4096 ;;
  esac
}

build() {
  local launcher=()
  if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DRZ_CUDA=OFF -DRZ_FUZZ=ON "${launcher[@]}" >/dev/null
  cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
}

run() {
  local t=$1 secs=$2
  local corpus=$build/corpus/$t art=$build/artifacts/$t
  mkdir -p "$corpus" "$art"
  local log=$build/$t.log
  set +e
  "$build/tests/fuzz/$t" -max_total_time="$secs" -max_len="$(max_len "$t")" -rss_limit_mb=2048 \
    -seed="${FUZZ_SEED:-0}" -timeout=20 -print_final_stats=1 -artifact_prefix="$art/" "$corpus" "tests/fuzz/corpus/$t" \
    > "$log" 2>&1
  local rc=$?
  set -e
  local runs cov
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -n 1 || echo "?")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*' || echo "?")
  echo "fuzz $t: ${secs} s, exit $rc, runs ${runs:-?}, coverage ${cov:-?} edges, corpus $(ls "$corpus" | wc -l) new + $(ls "tests/fuzz/corpus/$t" | wc -l) seeds"
  if [ "$rc" -ne 0 ]; then
    grep -E "ERROR|SUMMARY|==[0-9]+==|_fuzz: |^  (first|second): " "$log" | head -n 20
    # the input itself, so a CI log is enough to reproduce it
    for f in "$art"/*; do echo "$(basename "$f") (base64): $(head -c 4096 "$f" | base64 -w 0)"; done
    return 1
  fi
}

regress() {
  local failed=0
  for t in "${targets[@]}"; do
    local inputs=(tests/fuzz/corpus/"$t"/*)
    [ -d "tests/fuzz/regressions/$t" ] && inputs+=(tests/fuzz/regressions/"$t"/*)
    if "$build/tests/fuzz/$t" -rss_limit_mb=2048 -timeout=20 "${inputs[@]}" \
      > "$build/$t-regress.log" 2>&1; then
      echo "regress $t: ${#inputs[@]} inputs ok"
    else
      echo "regress $t: FAILED"
      tail -n 30 "$build/$t-regress.log"
      failed=1
    fi
  done
  return $failed
}

case "${1:-}" in
  build) build ;;
  run) run "${2:?target}" "${3:?seconds}" ;;
  regress) regress ;;
  ci)
    secs=${2:?seconds}
    # A fixed seed: CI's fuzzing walks the same inputs on the same code (a new finding comes with
    # a change, not by chance); scripts/fuzz.sh run keeps libFuzzer's random seed.
    export FUZZ_SEED=${FUZZ_SEED:-20261126}
    build
    regress
    failed=0
    for t in "${targets[@]}"; do run "$t" "$secs" || failed=$((failed + 1)); done
    echo "fuzz: $((${#targets[@]} - failed)) passed, $failed failed"
    [ "$failed" -eq 0 ]
    ;;
  *)
    sed -n '2,18p' "$0"
    exit 2
    ;;
esac

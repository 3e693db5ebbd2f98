#!/usr/bin/env bash
# ON the GPU machine: the checks for the gated kernel's one-wave splits.
#   verify RZ_BIN_DIR GPU_VERIFY_BIN_DIR VOCAB: gpu_verify compare (qwen2.5-1.5b Q4_K_M) and batch
#     (qwen2.5-1.5b and llama3.1-8b Q4_K_M, rz synth files), prompts chosen for a top-2 margin >=
#     0.002 x row max as compare does (the batch check on llama without it failed or passed from
#     one process to the next: 2026-11-29-h200-verify-stage-wide.log)
#   tests GPU_TEST_BIN_DIR: gpu_test's qmm, matmul-path, executor and gated-activation suites
set -u
case "$1" in
verify)
  R=${2:?rz dir}; G=${3:?gpu_verify dir}; V=${4:?vocab}
  synth() { [ -f /tmp/$1.gguf ] || $R/rz synth --shape $2 --format $3 --vocab $V --out /tmp/$1.gguf > /dev/null 2>&1; }
  synth q qwen2.5-1.5b q4_k_m & synth l llama3.1-8b q4_k_m; wait
  echo "== compare q"; timeout 120 $G/gpu_verify compare --model /tmp/q.gguf --ties-ok --min-margin 0.002 2>&1 | tail -1
  echo "== batch q"; timeout 120 $G/gpu_verify batch --model /tmp/q.gguf --ties-ok --min-margin 0.002 2>&1 | tail -1
  echo "== batch l"; timeout 150 $G/gpu_verify batch --model /tmp/l.gguf --ties-ok --min-margin 0.002 2>&1 | tail -1
  ;;
tests)
  T=${2:?gpu_test dir}
  timeout 400 $T/gpu_test --gtest_brief=1 \
    --gtest_filter='Qmm*:MatmulPath*:GpuExecutor*:FusedKernels*:SwigluRows*:ActForms*' 2>&1 | tail -n 25
  echo "== gpu_test rc ${PIPESTATUS[0]}"
  ;;
esac
echo DONE

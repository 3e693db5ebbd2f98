#!/usr/bin/env bash
# ON the GPU machine: checks and decode A/B of the staged kernel's two row tiles a warp and of qmm
# to 256 tokens without the wide kernel (exp/staged-two-tiles).
#   tests GPU_TEST_BIN_DIR: qmm's and the path rule's tests with the wide kernel (sm_90) and without
#     it (RZ_QMM_WIDE_OFF=1: the staged kernel takes 65-256 tokens, as on GPUs before Hopper), and
#     the executor suites without it
#   bench RZ_BIN_DIR VOCAB: rz bench --no-fp16-copies with RZ_QMM_WIDE_OFF=1, B = 128 / 192 / 256
#     (prompt 128, gen 128): a draft rule (the staged kernel to 256 tokens on every matrix without
#     a copy; not kept) against RZ_QMM_STAGED_CAP=1 (the draft's switch back to the rule as it is:
#     dequantize + cuBLAS past 64 tokens, past 128 on 32 MB matrices), qwen2.5-1.5b Q4_K_M, two
#     rounds (llama3.1-8b was left out: the session's device time was spent)
set -u
case "$1" in
tests)
  T=${2:?gpu_test dir}
  echo "== wide on"
  timeout 150 $T/gpu_test --gtest_brief=1 --gtest_filter='*QmmTest*:QmmChooser*:MatmulPath*:QmmGated*' 2>&1 | tail -n 4
  echo "== RZ_QMM_WIDE_OFF=1"
  RZ_QMM_WIDE_OFF=1 timeout 200 $T/gpu_test --gtest_brief=1 \
    --gtest_filter='*QmmTest*:QmmGated*:GpuExecutor*:FusedKernels*' 2>&1 | tail -n 6
  ;;
bench)
  B=${2:?rz dir}; V=${3:?vocab}
  [ -f /tmp/q.gguf ] || $B/rz synth --shape qwen2.5-1.5b --format q4_k_m --vocab $V --out /tmp/q.gguf > /dev/null 2>&1
  run() {  # model, label, env...
    local m=$1 label=$2; shift 2
    echo "== rz bench $m $label"
    env RZ_QMM_WIDE_OFF=1 "$@" timeout 100 $B/rz bench --device cuda --model /tmp/$m.gguf --pp 0 \
      --tg 0 --no-fp16-copies --batches 128,192,256 --prompt 128 --gen 128 --reps 2 2>&1 |
      grep -E "^\| [a-z0-9]+ " | grep -v "GB"
  }
  for round in 1 2; do run q staged X=1; run q cap RZ_QMM_STAGED_CAP=1; done
  ;;
esac
echo DONE

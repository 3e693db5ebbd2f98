#!/usr/bin/env bash
# ON the GPU machine (twenty-fifth session): the tests of the staged small kernels (add_rms_norm's
# pass-2 values from shared memory, the decode combine's and the grouped attention's forms from
# shared memory) and of the wide kernel's one-warpgroup blocks, then QmmBench.DISABLED_WideGroups
# (the wide kernel with one / two warpgroups a block at each K split, against dequantize +
# cuBLAS, 65-256 tokens).
#
#   bash bench/gpu-runs/2026-11-29-h200-wide-groups.sh BIN_DIR
set -u
B=${1:?BIN_DIR}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "== tests"
timeout 300 $B/gpu_test --gtest_filter='ActForms.*:AttentionDecode.*:AttentionDecodeQkv.*:AddRmsNorm.*:RmsNorm.*:RmsNormHeads.*:FusedKernels.*:QkvPost.*:*Qmm*:MatmulPath.*:GpuExecutorSteps.*:Formats/GpuVsCpu.*' 2>&1 | grep -aE "^\[  (PASSED|FAILED) |^\[==========\]|FAILED|Failure|error|worst" | head -80
echo "== bench"
timeout 280 $B/gpu_test --gtest_also_run_disabled_tests --gtest_filter=QmmBench.DISABLED_WideGroups 2>&1 | grep -av "^\[" 
echo DONE

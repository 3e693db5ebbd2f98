#!/usr/bin/env bash
# ON the GPU machine: the staged kernel's 64-token tiles with two row tiles a warp (qmm_kernel
# RT = 2, branch exp/staged-two-tiles): qmm's tests with the wide kernel (sm_90) and without it
# (RZ_QMM_WIDE_OFF=1: the staged kernel takes 65-256 tokens, as on GPUs before Hopper), then
# QmmBench.DISABLED_Compare's Q4_K shapes at 64 / 128 / 256 tokens without the wide kernel, two
# row tiles against one (RZ_QMM_ROWS2_OFF=1), beside dequantize + cuBLAS.
#
#   bash bench/gpu-runs/2026-11-29-h200-staged-rows2.sh GPU_TEST_BIN_DIR
set -u
T=${1:?gpu_test dir}
echo "== QmmTest.* (wide kernel on)"
timeout 150 $T/gpu_test --gtest_brief=1 --gtest_filter='QmmTest.*' 2>&1 | tail -n 6
echo "== QmmTest.* RZ_QMM_WIDE_OFF=1"
RZ_QMM_WIDE_OFF=1 timeout 150 $T/gpu_test --gtest_brief=1 --gtest_filter='QmmTest.*' 2>&1 | tail -n 6
for mode in rows2 rows1; do
  env=X=1; [ $mode = rows1 ] && env=RZ_QMM_ROWS2_OFF=1
  echo "== QmmBench Compare Q4_K, wide off, $mode"
  env $env RZ_QMM_WIDE_OFF=1 RZ_QMM_BENCH_N=64,128,256 RZ_QMM_BENCH_ONLY="Q4_K" timeout 200 \
    $T/gpu_test --gtest_also_run_disabled_tests --gtest_filter='QmmBench.DISABLED_Compare' 2>&1 |
    grep -E "^Q4_K|^  n " | sed -E 's/gemv +0.0 \( +0 GB\/s\) +//'
done
echo DONE

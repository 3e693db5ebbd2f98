#!/usr/bin/env bash
# ON the GPU machine (twenty-fifth session): gpu_test's qmm, path and executor suites on build
# ea2d958 (the wide kernel's grid model; the staged small kernels' suites passed on the build of
# 2026-11-29-h200-wide-groups.log, whose kernels they are).
#
#   bash bench/gpu-runs/2026-11-29-h200-tests-stage-wide.sh BIN_DIR
set -u
B=${1:?BIN_DIR}
timeout 400 $B/gpu_test --gtest_filter='*Qmm*:MatmulPath.*:GpuExecutor.*:GpuExecutorSteps.*:Formats/GpuVsCpu.*' 2>&1 | grep -aE "^\[  (PASSED|FAILED) |^\[==========\]|FAILED|Failure|worst"
echo DONE

#!/usr/bin/env bash
# ON the GPU machine (twenty-fifth session): the whole gpu_test on build dc4c62d (the wide kernel's
# grid model; the staged small kernels dropped).
#
#   bash bench/gpu-runs/2026-11-29-h200-tests-stage-wide.sh BIN_DIR
set -u
B=${1:?BIN_DIR}
timeout 500 $B/gpu_test 2>&1 | grep -aE "^\[  (PASSED|FAILED) |^\[==========\]|FAILED|Failure|worst"
echo DONE

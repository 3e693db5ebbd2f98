#!/usr/bin/env bash
# ON the GPU machine (twenty-fifth session): gpu_verify on build ea2d958 (the staged small
# kernels and the wide kernel's grid model): compare and batch on qwen2.5-1.5b Q4_K_M, batch on
# llama3.1-8b Q4_K_M (the synth files of 2026-11-29-h200-stage-wide-ab.sh, /tmp/q.gguf and
# /tmp/l.gguf).
#
#   bash bench/gpu-runs/2026-11-29-h200-verify-stage-wide.sh BIN_DIR
set -u
B=${1:?BIN_DIR}
echo "== compare q"; timeout 120 $B/gpu_verify compare --model /tmp/q.gguf --ties-ok --min-margin 0.002 2>&1 | tail -1
echo "== batch q"; timeout 120 $B/gpu_verify batch --model /tmp/q.gguf --ties-ok 2>&1 | tail -1
echo "== batch l"; timeout 150 $B/gpu_verify batch --model /tmp/l.gguf --ties-ok 2>&1 | tail -1
echo DONE

#!/usr/bin/env bash
# ON the GPU machine: gpu_verify after qmm's one-token instantiation (compare and batch on
# qwen2.5-1.5b Q4_K_M, batch on llama3.1-8b Q4_K_M; the rz synth files of
# 2026-11-29-h200-qmm-x1.sh, /tmp/q.gguf and /tmp/l.gguf, made here if missing).
#
#   bash bench/gpu-runs/2026-11-29-h200-verify-x1.sh BIN_DIR VOCAB
set -u
B=${1:?BIN_DIR}
V=${2:?vocab}
[ -f /tmp/q.gguf ] || $B/rz synth --shape qwen2.5-1.5b --format q4_k_m --vocab $V --out /tmp/q.gguf > /dev/null 2>&1
[ -f /tmp/l.gguf ] || $B/rz synth --shape llama3.1-8b --format q4_k_m --vocab $V --out /tmp/l.gguf > /dev/null 2>&1
echo "== compare q"; timeout 120 $B/gpu_verify compare --model /tmp/q.gguf --ties-ok --min-margin 0.002 2>&1 | tail -1
echo "== batch q"; timeout 120 $B/gpu_verify batch --model /tmp/q.gguf --ties-ok 2>&1 | tail -1
echo "== batch l"; timeout 150 $B/gpu_verify batch --model /tmp/l.gguf --ties-ok 2>&1 | tail -1
echo DONE

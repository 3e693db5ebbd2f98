#!/usr/bin/env bash
# ON the GPU machine: where a qwen2.5-1.5b F16 B = 1 decode step goes on 97f9dfd (gpu_step_trace_bench,
# 32 steps after a 64-token prompt): with PDL (the device span) and without (each kernel's own
# time, by grid), and the Q4_K_M step without PDL for comparison. Files: /tmp/qf.gguf (rz synth
# --shape qwen2.5-1.5b --format f16) and /tmp/q.gguf (q4_k_m), made by an earlier call.
#
#   bash bench/gpu-runs/2026-11-29-h200-step-trace-f16-b1.sh BIN_DIR
set -u
B=${1:?BIN_DIR}
echo "## trace qf B=1 (PDL on)"
timeout 120 $B/gpu_step_trace_bench --model /tmp/qf.gguf --batch 1 --steps 32 --prompt 64 --top 12 2>&1
echo "## trace qf B=1 --no-pdl --by-grid"
timeout 120 $B/gpu_step_trace_bench --model /tmp/qf.gguf --batch 1 --steps 32 --prompt 64 --top 25 --by-grid --no-pdl 2>&1
echo "## trace q B=1 --no-pdl --by-grid"
timeout 120 $B/gpu_step_trace_bench --model /tmp/q.gguf --batch 1 --steps 32 --prompt 64 --top 25 --by-grid --no-pdl 2>&1
echo DONE

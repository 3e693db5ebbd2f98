#!/usr/bin/env bash
# ON the GPU machine: where a llama3.1-8b Q4_K_M decode step goes at B = 64 and 256 on 97f9dfd
# (gpu_step_trace_bench, 16 steps after a 128-token prompt, the default executor: fp16 copies,
# cuBLAS from 17 tokens): with PDL (the span) and each kernel's own time by grid (PDL off). File
# /tmp/l.gguf (rz synth --shape llama3.1-8b --format q4_k_m), made by an earlier call.
#
#   bash bench/gpu-runs/2026-11-29-h200-step-trace-llama-b64-b256.sh BIN_DIR
set -u
B=${1:?BIN_DIR}
for b in 64 256; do
  echo "## trace l B=$b (PDL on)"
  timeout 120 $B/gpu_step_trace_bench --model /tmp/l.gguf --batch $b --steps 16 --prompt 128 --top 8 2>&1
  echo "## trace l B=$b --no-pdl --by-grid"
  timeout 120 $B/gpu_step_trace_bench --model /tmp/l.gguf --batch $b --steps 16 --prompt 128 --top 30 --by-grid --no-pdl 2>&1
done
echo DONE

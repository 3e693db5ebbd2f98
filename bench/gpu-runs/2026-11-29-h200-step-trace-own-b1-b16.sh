#!/usr/bin/env bash
# ON the GPU machine: the kernels' own times (PDL off) of qwen2.5-1.5b and llama3.1-8b Q4_K_M decode
# steps at B = 1, 4, 16, to see what the non-matmul kernels (qkv_post, the norms, the attention and
# its combine) cost a step.
#
#   bash bench/gpu-runs/2026-11-29-h200-step-trace-own-b1-b16.sh BIN_DIR VOCAB
set -u
B=${1:?BIN_DIR}
V=${2:?vocab}
for m in q l; do
  shape=qwen2.5-1.5b; [ $m = l ] && shape=llama3.1-8b
  [ -f /tmp/$m.gguf ] || $B/rz synth --shape $shape --format q4_k_m --vocab $V --out /tmp/$m.gguf > /dev/null 2>&1
  for b in 1 4 16; do
    echo "## trace $m B=$b --no-pdl"
    timeout 120 $B/gpu_step_trace_bench --model /tmp/$m.gguf --batch $b --steps 32 --prompt 64 \
      --top 25 --by-grid --no-pdl 2>&1 | tail -n +1
  done
done
echo DONE

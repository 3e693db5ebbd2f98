#!/usr/bin/env bash
# ON the GPU machine: qmm's one-token instantiation of the in-place direct kernel
# (qmm_direct_x1_kernel, the default) against the plain kernel (RZ_QMM_X1_OFF=1, the same build):
# rz bench tg128 and batched decode at B = 1 and 4 (B = 4: a control, the same kernels both ways;
# prompt 128, gen 128) on qwen2.5-1.5b Q4_K_M and Q5_K_M and llama3.1-8b Q4_K_M synth files, two
# alternating rounds.
#
#   bash bench/gpu-runs/2026-11-29-h200-qmm-x1.sh BIN_DIR VOCAB
set -u
B=${1:?BIN_DIR}
V=${2:?vocab}
synth() { [ -f /tmp/$1.gguf ] || $B/rz synth --shape $2 --format $3 --vocab $V --out /tmp/$1.gguf > /dev/null 2>&1; }
synth q qwen2.5-1.5b q4_k_m & synth q5 qwen2.5-1.5b q5_k_m & synth l llama3.1-8b q4_k_m; wait
for m in q q5 l; do
  for round in 1 2; do for cfg in x1 off; do
    echo "== rz bench $m $cfg (round $round)"
    env="X=1"; [ $cfg = off ] && env="RZ_QMM_X1_OFF=1"
    env $env timeout 100 $B/rz bench --device cuda --model /tmp/$m.gguf --pp 0 --tg 128 \
      --batches 1,4 --prompt 128 --gen 128 --reps 3 2>&1 | grep -E "^\| [a-z0-9]+ " | grep -v "GB"
  done; done
done
echo DONE

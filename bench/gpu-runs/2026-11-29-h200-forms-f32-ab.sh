#!/usr/bin/env bash
# ON the GPU machine: the norms and swiglu_rows writing only the matmul input forms where no
# kernel reads their fp32 output ('new', the default of 24d51bf) against writing it always
# ('old', RZ_FORMS_F32_ALWAYS=1, a switch of that build only).
#
#   bash bench/gpu-runs/2026-11-29-h200-forms-f32-ab.sh BIN_DIR VOCAB
#
# rz bench pp512 and B = 64, 256 (prompt 128, gen 128) on qwen2.5-1.5b and llama3.1-8b Q4_K_M
# synth files, two alternating rounds of new and old.
set -u
B=${1:?BIN_DIR}
V=${2:?vocab}
for m in q l; do
  shape=qwen2.5-1.5b; [ $m = l ] && shape=llama3.1-8b
  [ -f /tmp/$m.gguf ] || $B/rz synth --shape $shape --format q4_k_m --vocab $V --out /tmp/$m.gguf > /dev/null 2>&1
  for round in 1 2; do for cfg in new old; do
    echo "== rz bench $m $cfg (round $round)"
    env=""; [ $cfg = old ] && env="RZ_FORMS_F32_ALWAYS=1"
    env $env timeout 120 $B/rz bench --device cuda --model /tmp/$m.gguf --pp 512 --tg 0 \
      --batches 64,256 --prompt 128 --gen 128 --reps 3 2>&1 | grep -E "^\|" | grep -v -- "---"
  done; done
done

#!/usr/bin/env bash
# ON the GPU machine: the decode step's qkv_post folded into the grouped decode attention
# (attention_decode_qkv, the default) against qkv_post + the attention (RZ_ATTN_QKV_FOLD_OFF=1, the
# same build), rz bench tg128 and batched decode at B = 1, 4, 16, 64 (prompt 128, gen 128) on
# qwen2.5-1.5b and llama3.1-8b Q4_K_M synth files, two alternating rounds.
#
#   bash bench/gpu-runs/2026-11-29-h200-qkv-fold-ab.sh BIN_DIR VOCAB
set -u
B=${1:?BIN_DIR}
V=${2:?vocab}
for m in ${MODELS:-q l}; do
  shape=qwen2.5-1.5b; [ $m = l ] && shape=llama3.1-8b
  [ -f /tmp/$m.gguf ] || $B/rz synth --shape $shape --format q4_k_m --vocab $V --out /tmp/$m.gguf > /dev/null 2>&1
  for round in 1 2; do for cfg in fold off; do
    echo "== rz bench $m $cfg (round $round)"
    env=""; [ $cfg = off ] && env="RZ_ATTN_QKV_FOLD_OFF=1"
    env $env timeout 150 $B/rz bench --device cuda --model /tmp/$m.gguf --pp 0 --tg 128 \
      --batches ${BATCHES:-1,4,16,64} --prompt 128 --gen 128 --reps 3 2>&1 | grep -E "^\|" | grep -v -- "---"
  done; done
done
echo DONE

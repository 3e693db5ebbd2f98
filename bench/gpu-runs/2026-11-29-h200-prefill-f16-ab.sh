#!/usr/bin/env bash
# ON the GPU machine: the prefill attention writing the output projection's fp16 form itself
# ('new') against the convert kernel before that matmul ('old', RZ_PREFILL_F16_OFF=1, a switch of
# that build only): rz bench pp512 on qwen2.5-1.5b and llama3.1-8b Q4_K_M synth files, two
# alternating rounds; then greedy text (md5) of a long prompt under both, and with the decode
# step's qkv fold off.
#
#   bash bench/gpu-runs/2026-11-29-h200-prefill-f16-ab.sh BIN_DIR VOCAB
set -u
B=${1:?BIN_DIR}
V=${2:?vocab}
for m in q l; do
  shape=qwen2.5-1.5b; [ $m = l ] && shape=llama3.1-8b
  [ -f /tmp/$m.gguf ] || $B/rz synth --shape $shape --format q4_k_m --vocab $V --out /tmp/$m.gguf > /dev/null 2>&1
  for round in 1 2; do for cfg in new old; do
    env=""; [ $cfg = old ] && env="RZ_PREFILL_F16_OFF=1"
    echo "== rz bench $m $cfg (round $round): $(env $env timeout 60 $B/rz bench --device cuda --model /tmp/$m.gguf --pp 512 --tg 0 --batches '' --reps 5 2>&1 | grep -E '^\| [ql] ' | head -1)"
  done; done
done
prompt=$(for i in $(seq 1 120); do printf 'the quick brown fox %d jumps over the lazy dog ' $i; done)
for env in "" "RZ_PREFILL_F16_OFF=1" "RZ_ATTN_QKV_FOLD_OFF=1"; do
  echo "== generate q [$env]: $(env $env timeout 60 $B/rz generate --device cuda --model /tmp/q.gguf --prompt "$prompt" --max-tokens 64 --temperature 0 2>/dev/null | md5sum)"
done
echo DONE

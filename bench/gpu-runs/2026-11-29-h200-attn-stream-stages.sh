#!/usr/bin/env bash
# ON the GPU machine: the streaming decode attention's stages forced (a temporary build of 97f9dfd
# with RZ_ATTN_STREAM_STAGES=2|3 overriding the rule, not committed) against the rule (three
# stages where the grid is resident at once, else two): rz bench B = 64 / 128 / 256 (prompt 128,
# gen 128) on llama3.1-8b and qwen2.5-1.5b Q4_K_M, two alternating rounds.
#
#   bash bench/gpu-runs/2026-11-29-h200-attn-stream-stages.sh BIN_DIR VOCAB
set -u
B=${1:?BIN_DIR}
V=${2:?vocab}
synth() { [ -f /tmp/$1.gguf ] || $B/rz synth --shape $2 --format $3 --vocab $V --out /tmp/$1.gguf > /dev/null 2>&1; }
synth q qwen2.5-1.5b q4_k_m & synth l llama3.1-8b q4_k_m; wait
run() {  # model, label, env...
  local m=$1 label=$2; shift 2
  echo "== rz bench $m $label"
  env "$@" timeout 100 $B/rz bench --device cuda --model /tmp/$m.gguf --pp 0 --tg 0 \
    --batches 64,128,256 --prompt 128 --gen 128 --reps 2 2>&1 | grep -E "^\| [a-z0-9]+ " | grep -v "GB"
}
for m in l q; do for round in 1 2; do
  run $m rule X=1
  run $m s3 RZ_ATTN_STREAM_STAGES=3
  run $m s2 RZ_ATTN_STREAM_STAGES=2
done; done
echo DONE

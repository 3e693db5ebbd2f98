#!/usr/bin/env bash
# ON the GPU machine: the gated gate/up at its one-wave splits (choose_gated_splits, the default)
# against qmm's splits (RZ_QMM_GATED_WAVE_OFF=1, the same build): rz bench tg128 and batched decode
# at B = 1, 4, 9, 12, 16 (prompt 128, gen 128) on qwen2.5-1.5b Q4_K_M, two alternating rounds, and
# greedy text of both modes (md5); llama3.1-8b (the rule leaves it at qmm's splits) once each as a
# control.
#
#   bash bench/gpu-runs/2026-11-29-h200-gated-wave.sh BIN_DIR VOCAB
set -u
B=${1:?BIN_DIR}
V=${2:?vocab}
synth() { [ -f /tmp/$1.gguf ] || $B/rz synth --shape $2 --format $3 --vocab $V --out /tmp/$1.gguf > /dev/null 2>&1; }
synth q qwen2.5-1.5b q4_k_m & synth l llama3.1-8b q4_k_m; wait
run() {  # model, label, batches, env...
  local m=$1 label=$2 b=$3; shift 3
  echo "== rz bench $m $label"
  env "$@" timeout 100 $B/rz bench --device cuda --model /tmp/$m.gguf --pp 0 --tg 128 \
    --batches $b --prompt 128 --gen 128 --reps 3 2>&1 | grep -E "^\| [a-z0-9]+ " | grep -v "GB"
}
for round in 1 2; do
  run q wave 1,4,9,12,16 X=1
  run q off 1,4,9,12,16 RZ_QMM_GATED_WAVE_OFF=1
done
run l wave 1,4 X=1
run l off 1,4 RZ_QMM_GATED_WAVE_OFF=1
for mode in wave off; do
  env=X=1; [ $mode = off ] && env=RZ_QMM_GATED_WAVE_OFF=1
  echo "== greedy text q $mode: $(env $env timeout 60 $B/rz generate --device cuda --model /tmp/q.gguf --prompt 'The quick brown fox' --max-tokens 48 --temperature 0 2>/dev/null | md5sum)"
done
echo DONE

#!/usr/bin/env bash
# ON the GPU machine: the gated gate/up's K splits and form forced (a temporary build of 5815e06
# with two environment overrides in gated_grid, not committed: RZ_QMM_GATED_SPLITS=N forced the
# splits, RZ_QMM_GATED_PAIR=1 the pair of blocks up to 8 tokens) against the rule's, rz bench
# tg128 and B = 1 / 4 (prompt 128, gen 128) on qwen2.5-1.5b and llama3.1-8b Q4_K_M synth files, two
# alternating rounds.
#
#   bash bench/gpu-runs/2026-11-29-h200-gated-splits.sh BIN_DIR VOCAB
set -u
B=${1:?BIN_DIR}
V=${2:?vocab}
synth() { [ -f /tmp/$1.gguf ] || $B/rz synth --shape $2 --format $3 --vocab $V --out /tmp/$1.gguf > /dev/null 2>&1; }
synth q qwen2.5-1.5b q4_k_m & synth l llama3.1-8b q4_k_m; wait
run() {  # model, label, env...
  local m=$1 label=$2; shift 2
  echo "== rz bench $m $label"
  env "$@" timeout 100 $B/rz bench --device cuda --model /tmp/$m.gguf --pp 0 --tg 128 \
    --batches 1,4 --prompt 128 --gen 128 --reps 3 2>&1 | grep -E "^\| [a-z0-9]+ " | grep -v "GB"
}
for round in 1 2; do
  run q rule X=1
  run q s2-pair RZ_QMM_GATED_SPLITS=2 RZ_QMM_GATED_PAIR=1
  run q s1 RZ_QMM_GATED_SPLITS=1
  run q s1-pair RZ_QMM_GATED_SPLITS=1 RZ_QMM_GATED_PAIR=1
done
for round in 1 2; do
  run l rule X=1
  run l s2-pair RZ_QMM_GATED_SPLITS=2 RZ_QMM_GATED_PAIR=1
  run l s1 RZ_QMM_GATED_SPLITS=1
  run l s4-pair RZ_QMM_GATED_SPLITS=4 RZ_QMM_GATED_PAIR=1
done
echo DONE

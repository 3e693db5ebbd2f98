#!/usr/bin/env bash
# (A record: the switches it names belonged to a build that was not committed.)
# ON the GPU machine: qmm_gated's dual form (each warp both the gate tile and the up tile) against
# the other forms, and the build before it: rz bench tg128 and batched decode at BATCHES (prompt
# 128, gen 128) on qwen2.5-1.5b and llama3.1-8b Q4_K_M synth files (/tmp/q.gguf, /tmp/l.gguf,
# made here if missing), ROUNDS alternating rounds of CFGS:
#   head  the build before (HEAD_RZ)          rule  this build as it is
#   off   RZ_QMM_GATED_DUAL_OFF=1             all   RZ_QMM_GATED_DUAL_ALL=1 (dual at 1-8 tokens
#   allwide  ... and RZ_QMM_GATED_DUAL_WIDE=1       on every shape; an experiment's switch)
#
#   CFGS="head rule" HEAD_RZ=... bash bench/gpu-runs/2026-11-29-h200-gated-dual-attempt.sh BIN_DIR VOCAB
set -u
B=${1:?BIN_DIR}
V=${2:?vocab}
for m in ${MODELS:-q l}; do
  shape=qwen2.5-1.5b; [ $m = l ] && shape=llama3.1-8b
  [ -f /tmp/$m.gguf ] || $B/rz synth --shape $shape --format q4_k_m --vocab $V --out /tmp/$m.gguf > /dev/null 2>&1
  for round in $(seq 1 ${ROUNDS:-2}); do for cfg in ${CFGS:-rule off}; do
    echo "== rz bench $m $cfg (round $round)"
    env="X=1"; rz=$B/rz
    case $cfg in
      head) rz=${HEAD_RZ:?HEAD_RZ} ;;
      off) env="RZ_QMM_GATED_DUAL_OFF=1" ;;
      all) env="RZ_QMM_GATED_DUAL_ALL=1" ;;
      allwide) env="RZ_QMM_GATED_DUAL_ALL=1 RZ_QMM_GATED_DUAL_WIDE=1" ;;
    esac
    env $env timeout 150 $rz bench --device cuda --model /tmp/$m.gguf --pp 0 --tg 128 \
      --batches ${BATCHES:-1,4,8,16} --prompt 128 --gen 128 --reps 3 2>&1 | grep -E "^\| [a-z] " | grep -v -- "---"
  done; done
done
echo DONE

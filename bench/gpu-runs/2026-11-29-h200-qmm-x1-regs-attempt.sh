#!/usr/bin/env bash
# (A record: the switches it names belonged to a build that was not committed.)
# ON the GPU machine: qmm's one-token direct kernel (x in shared memory) at register caps
# RZ_QMM_X1_REGS = 0 (the plain kernel, as 30f063e) / 104 / 112 / 120 (an experiment's switch, one
# build): rz bench tg128 and B = 1 (prompt 128, gen 128) on qwen2.5-1.5b and llama3.1-8b Q4_K_M
# synth files, two alternating rounds.
#
#   bash bench/gpu-runs/2026-11-29-h200-qmm-x1-regs-attempt.sh BIN_DIR VOCAB
set -u
B=${1:?BIN_DIR}
V=${2:?vocab}
for m in q l; do
  shape=qwen2.5-1.5b; [ $m = l ] && shape=llama3.1-8b
  [ -f /tmp/$m.gguf ] || $B/rz synth --shape $shape --format q4_k_m --vocab $V --out /tmp/$m.gguf > /dev/null 2>&1
done
for m in q l; do
  for round in 1 2; do for regs in ${REGS:-0 104 112 120}; do
    echo "== rz bench $m regs $regs (round $round)"
    RZ_QMM_X1_REGS=$regs timeout 100 $B/rz bench --device cuda --model /tmp/$m.gguf --pp 0 --tg 128 \
      --batches ${BATCHES:-1} --prompt 128 --gen 128 --reps 3 2>&1 | grep -E "^\| [a-z] " | grep -v "GB"
  done; done
done
echo DONE

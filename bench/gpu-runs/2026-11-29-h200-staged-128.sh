#!/usr/bin/env bash
# ON the GPU machine (twenty-fifth session): without the wide kernel (RZ_QMM_WIDE_OFF=1, as on a
# GPU before Hopper) and without the fp16 copies, qmm's staged kernel at 65-128 tokens on the
# matrices of 32 MB and more (RZ_STAGED_128_MB=32, a switch of that build only) against dequantize +
# cuBLAS there (the rule: only 64 MB and more), llama3.1-8b Q4_K_M synth file, rz bench B = 80,
# 96, 128 (prompt 64, gen 64, 2 reps), two alternating rounds.
#
#   bash bench/gpu-runs/2026-11-29-h200-staged-128.sh BIN_DIR VOCAB
set -u
B=${1:?BIN_DIR}
V=${2:?vocab}
[ -f /tmp/l.gguf ] || $B/rz synth --shape llama3.1-8b --format q4_k_m --vocab $V --out /tmp/l.gguf > /dev/null 2>&1
t0=$(date +%s)
for round in 1 2; do
  for cfg in "rule:X=1" "staged32:RZ_STAGED_128_MB=32"; do
    echo "== ${cfg%%:*} l round $round (t=$(( $(date +%s) - t0 )) s)"
    env RZ_QMM_WIDE_OFF=1 ${cfg#*:} timeout 100 $B/rz bench --device cuda --model /tmp/l.gguf \
      --no-fp16-copies --pp 0 --tg 0 --batches 80,96,128 --prompt 64 --gen 64 --reps 2 2>&1 |
      grep -E "^\| [a-z0-9]+ " | grep -v "GB"
  done
done
echo "DONE (t=$(( $(date +%s) - t0 )) s)"

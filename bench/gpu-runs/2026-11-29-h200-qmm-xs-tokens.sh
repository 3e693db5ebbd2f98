#!/usr/bin/env bash
# ON the GPU machine (twenty-fifth session): x in shared memory for 2-8 tokens in qmm's in-place
# direct kernel (then its one-token instantiation's schedule, qmm_direct_x1_kernel, runs them),
# against one token only (the default): rz bench B = 2, 4, 8 (prompt 128, gen 64, 2 reps) on
# qwen2.5-1.5b and llama3.1-8b Q4_K_M synth files, two alternating rounds, one build with the A/B
# switches RZ_QMM_XS_TOKENS / RZ_QMM_XS_MAX_KB.
#
#   bash bench/gpu-runs/2026-11-29-h200-qmm-xs-tokens.sh BIN_DIR VOCAB
set -u
B=${1:?BIN_DIR}
V=${2:?vocab}
synth() { [ -f /tmp/$1.gguf ] || $B/rz synth --shape $2 --format $3 --vocab $V --out /tmp/$1.gguf > /dev/null 2>&1; }
synth q qwen2.5-1.5b q4_k_m & synth l llama3.1-8b q4_k_m; wait
t0=$(date +%s)
for round in 1 2; do
  for cfg in "base:X=1" "t4:RZ_QMM_XS_TOKENS=4 RZ_QMM_XS_MAX_KB=128" "t8:RZ_QMM_XS_TOKENS=8 RZ_QMM_XS_MAX_KB=128"; do
    for m in q l; do
      echo "== ${cfg%%:*} $m round $round (t=$(( $(date +%s) - t0 )) s)"
      env ${cfg#*:} timeout 100 $B/rz bench --device cuda --model /tmp/$m.gguf --pp 0 --tg 0 \
        --batches 2,4,8 --prompt 128 --gen 64 --reps 2 2>&1 | grep -E "^\| [a-z0-9]+ " | grep -v "GB"
    done
  done
done
echo "DONE (t=$(( $(date +%s) - t0 )) s)"

#!/usr/bin/env bash
# ON the GPU machine (twenty-fifth session): rz bench, build A (fe54f31, main) against build B
# (ea2d958: add_rms_norm's pass-2 values and the decode combine's / grouped attention's forms
# from shared memory; the wide kernel's grid from its model, and every matrix without a copy on
# the wide kernel to 256 tokens), on qwen2.5-1.5b and llama3.1-8b Q4_K_M synth files:
#   default (fp16 copies): tg128 and B = 1, 4 (prompt 128, gen 128, 3 reps)
#   --no-fp16-copies: B = 128, 192, 256 (prompt 64, gen 64, 2 reps)
# in the order given (LABEL:BIN_DIR ...), so that rounds alternate across calls.
#
#   bash bench/gpu-runs/2026-11-29-h200-stage-wide-ab.sh VOCAB A:/tmp/rza/bin B:/tmp/rzb/bin ...
set -u
V=${1:?vocab}
shift
first=${1#*:}
synth() { [ -f /tmp/$1.gguf ] || $first/rz synth --shape $2 --format $3 --vocab $V --out /tmp/$1.gguf > /dev/null 2>&1; }
synth q qwen2.5-1.5b q4_k_m & synth l llama3.1-8b q4_k_m; wait
t0=$(date +%s)
for spec in "$@"; do
  lab=${spec%%:*}; B=${spec#*:}
  for m in q l; do
    echo "== $lab $m default (t=$(( $(date +%s) - t0 )) s)"
    timeout 100 $B/rz bench --device cuda --model /tmp/$m.gguf --pp 0 --tg 128 --batches 1,4 \
      --prompt 128 --gen 128 --reps 3 2>&1 | grep -E "^\| [a-z0-9]+ " | grep -v "GB"
    echo "== $lab $m no-copies (t=$(( $(date +%s) - t0 )) s)"
    timeout 120 $B/rz bench --device cuda --model /tmp/$m.gguf --no-fp16-copies --pp 0 --tg 0 \
      --batches 128,192,256 --prompt 64 --gen 64 --reps 2 2>&1 | grep -E "^\| [a-z0-9]+ " | grep -v "GB"
  done
done
echo "DONE (t=$(( $(date +%s) - t0 )) s)"

#!/usr/bin/env bash
# EXPERIMENT (branch exp/q6k-direct-16), ON the GPU machine: 9-16 tokens of small Q6_K matrices
# (<= 4 MiB: the attn_v of qwen2.5-1.5b and llama3.1-8b Q4_K_M files) on the direct staged
# kernel's two token tiles, against the staged kernel (RZ_QMM_Q6K_DIRECT16_OFF=1).
#
#   bash scripts/exp/q6k_direct16.sh BIN_DIR VOCAB    (BIN_DIR: rz, gpu_test, gpu_verify)
#
# 1. the qmm tests (both settings) and the executor's GPU-vs-CPU suites; 2. rz bench (prompt 128,
# gen 128) qwen2.5-1.5b and llama3.1-8b Q4_K_M at B = 9, 12, 16 (and 4 and 32 as controls),
# two alternating rounds of the new rule, the old one and the new one to 16 MiB (qwen's Q6_K
# ffn_down too); 3. gpu_verify compare and batch on qwen with the new rule.
set -u
B=${1:?BIN_DIR}
V=${2:?vocab}
( $B/rz synth --shape qwen2.5-1.5b --format q4_k_m --vocab $V --out /tmp/q.gguf > /tmp/synth.log 2>&1
  echo "synth q rc $?" >> /tmp/synth.log
  $B/rz synth --shape llama3.1-8b --format q4_k_m --vocab $V --out /tmp/l.gguf >> /tmp/synth.log 2>&1
  echo "synth l rc $?" >> /tmp/synth.log ) &
synth=$!
for cfg in new old; do
  echo "== qmm tests, $cfg"
  env=""; [ $cfg = old ] && env="RZ_QMM_Q6K_DIRECT16_OFF=1"
  env $env timeout 150 $B/gpu_test --gtest_filter='Qmm*:-*Bench*' > /tmp/t-$cfg.log 2>&1
  echo "rc $?"
  grep -E "^\[  (PASSED|FAILED) |FAILED" /tmp/t-$cfg.log | head -10
done
echo "== executor suites (new)"
timeout 150 $B/gpu_test --gtest_filter='GpuExecutor*:GpuVsCpu*' > /tmp/t-exec.log 2>&1
echo "rc $?"; grep -E "^\[  (PASSED|FAILED) |FAILED" /tmp/t-exec.log | head -10
wait $synth; cat /tmp/synth.log | grep rc
for m in q l; do for round in 1 2; do for cfg in new old new16; do
  echo "== rz bench $m $cfg (round $round)"
  env=""; [ $cfg = old ] && env="RZ_QMM_Q6K_DIRECT16_OFF=1"
  [ $cfg = new16 ] && env="RZ_QMM_Q6K_DIRECT16_MAX_MB=16"
  env $env timeout 100 $B/rz bench --device cuda --model /tmp/$m.gguf --pp 0 --tg 0 \
    --batches 4,9,12,16,32 --prompt 128 --gen 128 --reps 2 2>&1 | grep -E "^\| [0-9]+ "
done; done; done
echo "== gpu_verify (new)"
timeout 120 $B/gpu_verify compare --model /tmp/q.gguf --ties-ok --min-margin 0.002 2>&1 | tail -1
timeout 120 $B/gpu_verify batch --model /tmp/q.gguf --ties-ok 2>&1 | tail -1

#!/usr/bin/env bash
# ON the GPU machine: the decode attention's partitions combined by their last block (fused, the
# default) against the combine kernel (RZ_ATTN_FUSED_COMBINE_OFF=1).
#
#   bash bench/gpu-runs/2026-11-29-h200-fused-combine-attempt.sh BIN_DIR VOCAB    (BIN_DIR: rz, gpu_test)
#
# 1. the attention tests and the executor's GPU-vs-CPU suites; 2. rz bench (tg128; prompt 128,
# gen 128 at B = 1, 4, 16, 64, 256) on qwen2.5-1.5b and llama3.1-8b Q4_K_M synth files, two
# alternating rounds of fused and kernel. The synth files stay in /tmp for a later call.
set -u
B=${1:?BIN_DIR}
V=${2:?vocab}
( $B/rz synth --shape qwen2.5-1.5b --format q4_k_m --vocab $V --out /tmp/q.gguf > /tmp/synth.log 2>&1
  echo "synth q rc $?" >> /tmp/synth.log
  $B/rz synth --shape llama3.1-8b --format q4_k_m --vocab $V --out /tmp/l.gguf >> /tmp/synth.log 2>&1
  echo "synth l rc $?" >> /tmp/synth.log ) &
synth=$!
echo "== attention tests"
timeout 150 $B/gpu_test --gtest_filter='AttentionDecode*:AttentionPrefill*' > /tmp/t-attn.log 2>&1
echo "rc $?"; grep -E "^\[  (PASSED|FAILED) |FAILED|Failure" /tmp/t-attn.log | head -20
echo "== executor suites"
timeout 200 $B/gpu_test --gtest_filter='GpuExecutor*:GpuVsCpu*' > /tmp/t-exec.log 2>&1
echo "rc $?"; grep -E "^\[  (PASSED|FAILED) |FAILED|Failure" /tmp/t-exec.log | head -20
wait $synth; grep rc /tmp/synth.log
for m in q l; do for round in 1 2; do for cfg in fused kernel; do
  echo "== rz bench $m $cfg (round $round)"
  env=""; [ $cfg = kernel ] && env="RZ_ATTN_FUSED_COMBINE_OFF=1"
  env $env timeout 120 $B/rz bench --device cuda --model /tmp/$m.gguf --pp 0 --tg 128 \
    --batches 1,4,16,64,256 --prompt 128 --gen 128 --reps 2 2>&1 | grep -E "^\|" | grep -v -- "---"
done; done; done

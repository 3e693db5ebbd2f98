#!/usr/bin/env bash
# The script of 2026-11-29-h200-attn-mma-ab.log: scripts/exp/attn_mma.sh of branch exp/attn-mma
# (fe3ad2b), run on the GPU machine as
#   bash .stage/attn_mma.sh $PWD/.stage/bin /tmp/v.gguf
# with rz and gpu_test of fe3ad2b in .stage (scripts/gpu_pack.sh). Its switches
# (RZ_ATTN_STREAM_MMA_OFF, RZ_ATTN_STREAM_MIN_BLOCKS) were the branch's and did not land.
# EXPERIMENT (branch exp/attn-mma), ON the GPU machine: the tensor-core streaming decode attention
# (attn_decode_stream_mma_kernel) against the FMA streaming kernel (RZ_ATTN_STREAM_MMA_OFF=1).
#
#   bash scripts/exp/attn_mma.sh BIN_DIR VOCAB          (BIN_DIR: rz and gpu_test; VOCAB: the gguf)
#
# 1. correctness: the attention tests with each kernel; 2. AttentionDecodeBench at the side-by-side
# shapes, B = 64 / 128 / 256, each kernel; 3. rz bench (prompt 128, gen 128) llama3.1-8b and
# qwen2.5-1.5b Q4_K_M at B = 16-256, alternating, and the mma kernel from 128 blocks
# (RZ_ATTN_STREAM_MIN_BLOCKS=128: llama B = 16, qwen B = 64 stream too); 4. gpu_verify is not in this bundle (carry it
# with rz in a second call if the kernel wins).
set -u
B=${1:?BIN_DIR}
V=${2:?vocab}
( $B/rz synth --shape llama3.1-8b --format q4_k_m --vocab $V --out /tmp/l.gguf > /tmp/synth.log 2>&1
  echo "synth l rc $?" >> /tmp/synth.log
  $B/rz synth --shape qwen2.5-1.5b --format q4_k_m --vocab $V --out /tmp/q.gguf >> /tmp/synth.log 2>&1
  echo "synth q rc $?" >> /tmp/synth.log ) &
for cfg in mma fma; do
  echo "== tests, $cfg"
  env=""; [ $cfg = fma ] && env="RZ_ATTN_STREAM_MMA_OFF=1"
  env $env timeout 200 $B/gpu_test --gtest_filter='AttentionDecode.*' > /tmp/t-$cfg.log 2>&1
  echo "rc $?"
  grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|Expected|differ" /tmp/t-$cfg.log | head -20
done
for round in 1 2; do for cfg in mma fma; do
  echo "== bench $cfg (round $round)"
  env=""; [ $cfg = fma ] && env="RZ_ATTN_STREAM_MMA_OFF=1"
  for only in "llama3.1-8b 64" "llama3.1-8b 256" "qwen2.5-1.5b 128" "qwen2.5-1.5b 256"; do
    env $env RZ_ATTN_BENCH_ONLY="$only" timeout 60 $B/gpu_test --gtest_also_run_disabled_tests \
      --gtest_filter='AttentionDecodeBench.*' 2>&1 | grep -E "^\| [lq]"
  done
done; done
wait; grep rc /tmp/synth.log
for m in l q; do for round in 1 2; do for cfg in mma fma mma128; do
  echo "== rz bench $m $cfg (round $round)"
  env=""; [ $cfg = fma ] && env="RZ_ATTN_STREAM_MMA_OFF=1"
  [ $cfg = mma128 ] && env="RZ_ATTN_STREAM_MIN_BLOCKS=128"
  env $env timeout 100 $B/rz bench --device cuda --model /tmp/$m.gguf --pp 0 --tg 0 \
    --batches 16,32,64,128,256 --prompt 128 --gen 128 --reps 2 2>&1 | grep -E "^\| [0-9]+ "
done; done; done

#!/usr/bin/env bash
# Runs ON the GPU machine: does serving follow the engine? For each stream count B, the engine's
# batched decode (`rz bench --batches B`: B sequences decoding together, no network) against
# `rz serve` driven over WebSocket by rz-wsbench with B connections, each sending a request after
# the last one finished (closed loop, steady state for a fixed duration). docs/performance.md
# keeps the table.
#
#   scripts/gpu_serve_vs_engine.sh BIN_DIR MODEL [STREAMS]      STREAMS default "1 16 64 256"
#
# RZ_FLAGS (optional): executor flags given to both `rz bench` and `rz serve` (e.g.
# --no-gemm-tune), so that both sides run the same executor; RZ_SERVE_FLAGS (optional): flags for
# `rz serve` alone (e.g. --no-plan-ahead).
#
# Both sides: 64-token prompts (rz-wsbench's words are single tokens of the synth vocabulary for
# the engine's random ids: close, not equal), 256 generated tokens, greedy, ignore EOS.
# Per B: engine tok/s and step time (ms per decode step), served output tok/s, the ratio, ITL
# p50 / p99 and the ratio of ITL p50 to the engine's step time. The served figure includes what
# serving adds to a step: each new request's prompt joins a running step (chunked prefill), the
# per-token frames, the actors. JSON of both sides under $OUT (or /tmp).
# Where the served steps' time goes comes from the server's step log (`rz serve --step-log`, one
# CSV line per step; split per B into steps-B.csv, summarised by step_log_summary.py into
# steps-B.txt): per B, the executor's share of the wall time (the rest is host gaps and idling),
# the tokens a step carries (decodes + prompt chunk tokens) and the decode-only steps' median.
set -u
. "$(dirname "$0")/serve_lib.sh"
bin=${1:?usage: gpu_serve_vs_engine.sh BIN_DIR MODEL [STREAMS]}
model=${2:?model file}
streams=${3:-"1 16 64 256"}
out=${OUT:-/tmp}
port=${RZ_SERVE_PORT:-8095}
dur=${RZ_SERVE_SECONDS:-20}
gen=256
prompt=64
max_b=1
for b in $streams; do [ "$b" -gt "$max_b" ] && max_b=$b; done

engine_batches=$(echo $streams | tr ' ' ',')
echo "== engine: rz bench --batches $engine_batches --prompt $prompt --gen $gen"
"$bin/rz" bench --device cuda --model "$model" --pp 0 --tg 0 --batches "$engine_batches" ${RZ_FLAGS:-} \
  --prompt "$prompt" --gen "$gen" --reps 2 --json-out "$out/engine.json" > "$out/engine.log" 2>&1 ||
  { echo "rz bench failed"; tail -n 20 "$out/engine.log"; exit 1; }

log=$out/serve.log
start_server "$log" "$bin/rz" --model "$model" --device cuda --port "$port" ${RZ_FLAGS:-} ${RZ_SERVE_FLAGS:-} \
  --max-slots "$max_b" --ctx $(((prompt + gen + 64 + 63) / 64 * 64)) \
  --max-step-tokens $((max_b > 512 ? max_b : 512)) --max-connections-per-ip $((max_b + 8)) \
  --max-connections $((max_b + 16)) --step-log "$out/steps.csv" ||
  { echo "the server did not start"; exit 1; }
pid=$server_pid
url="ws://127.0.0.1:$port/v1/ws"
# Warm-up: graphs for the batch sizes, cuBLAS plans.
"$bin/rz-wsbench" --url "$url" --connections "$max_b" --requests "$max_b" --prompt-tokens $prompt \
  --max-tokens 32 --seed 5 --json > /dev/null 2>&1
for b in $streams; do
  n0=$(wc -l < "$out/steps.csv")
  "$bin/rz-wsbench" --url "$url" --connections "$b" --duration "$dur" --prompt-tokens $prompt \
    --max-tokens $gen --seed 9 --timeout 600 --json > "$out/serve-$b.json" 2> "$out/serve-$b.err"
  { head -n 1 "$out/steps.csv"; sed -n "$((n0 + 1)),\$p" "$out/steps.csv"; } > "$out/steps-$b.csv"
  python3 "$(dirname "$0")/step_log_summary.py" "$out/steps-$b.csv" > "$out/steps-$b.txt" 2>&1
done
kill -TERM $pid
wait $pid 2>/dev/null

python3 "$(dirname "$0")/serve_vs_engine_table.py" "$out" $streams

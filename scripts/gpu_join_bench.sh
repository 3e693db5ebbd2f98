#!/usr/bin/env bash
# Runs ON the GPU machine: inter-token latency of 32 decoding streams, alone and while
# ~3,400-token prompts keep joining, for several step budgets (`rz serve --max-step-tokens`).
# docs/engine.md records the results.
#
#   scripts/gpu_join_bench.sh BIN_DIR MODEL [BUDGETS]      BUDGETS default "256 512 1024 2048"
#
# For each budget: `rz serve --device cuda --max-slots 40 --max-step-tokens B`, then
#   alone:  rz-wsbench, 32 connections, 64-word prompts, 256 tokens each, 96 requests
#           (RZ_JOIN_REQUESTS: more rounds of 32 give a longer, steadier measurement);
#   joins:  the same, while a second rz-wsbench keeps 2 connections sending 3,400-word prompts
#           (4 tokens each) until the first one ends: back to back (the GPU never idles from
#           prefill), or with RZ_JOIN_RATE=R at R prompts/s (Poisson arrivals).
# Prints one table row per budget and phase: ITL p50/p90/p99, TPOT p50/p90, output tok/s of the
# 32 streams, and how many long prompts were served meanwhile. JSON under $OUT (or /tmp), and the
# server's step log (`--step-log`) with its summary (scripts/step_log_summary.py) per budget.
# RZ_SERVE_FLAGS (optional): more `rz serve` flags (e.g. --no-plan-ahead).
set -u
. "$(dirname "$0")/serve_lib.sh"
bin=${1:?usage: gpu_join_bench.sh BIN_DIR MODEL [BUDGETS]}
model=${2:?model file}
budgets=${3:-"256 512 1024 2048"}
out=${OUT:-/tmp}
port=${RZ_SERVE_PORT:-8094}
long_words=${RZ_JOIN_WORDS:-3400}
rows=()
summary() {  # json -> "p50 p90 p99 tpot50 tpot90 tok/s completed"
  python3 - "$1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
i, t = j["itl_ms"], j["tpot_ms"]
done = j.get("completed", j.get("requests_completed"))
print(f"{i['p50']:.2f} {i['p90']:.2f} {i['p99']:.2f} {t['p50']:.2f} {t['p90']:.2f} "
      f"{j['output_throughput']:.0f} {done}")
PY
}
for b in $budgets; do
  log=$out/join-serve-$b.log
  if ! start_server "$log" "$bin/rz" --model "$model" --device cuda --port "$port" ${RZ_SERVE_FLAGS:-} --max-slots 40 \
      --max-step-tokens "$b" --max-connections-per-ip 64 --step-log "$out/join-steps-$b.csv"; then
    echo "gpu_join_bench: the server did not start (budget $b)"; exit 1
  fi
  pid=$server_pid
  url="ws://127.0.0.1:$port/v1/ws"
  streams=(--url "$url" --connections 32 --requests "${RZ_JOIN_REQUESTS:-96}" --prompt-tokens 64 --max-tokens 256
           --seed 11 --timeout 600 --json)
  # Warm-up: CUDA graphs for every batch size, cuBLAS handles.
  "$bin/rz-wsbench" --url "$url" --connections 32 --requests 32 --prompt-tokens 64 \
    --max-tokens 32 --seed 7 --json > /dev/null 2>&1
  "$bin/rz-wsbench" "${streams[@]}" > "$out/join-$b-alone.json" 2> "$out/join-$b-alone.err"
  rate=()
  [ -n "${RZ_JOIN_RATE:-}" ] && rate=(--rate "$RZ_JOIN_RATE")
  "$bin/rz-wsbench" --url "$url" --connections 2 "${rate[@]}" --duration 600 --prompt-tokens "$long_words" \
    --max-tokens 4 --seed 23 --timeout 600 --json > "$out/join-$b-long.json" \
    2> "$out/join-$b-long.err" &
  lpid=$!
  sleep 1
  "$bin/rz-wsbench" "${streams[@]}" > "$out/join-$b-joins.json" 2> "$out/join-$b-joins.err"
  kill -INT $lpid 2>/dev/null
  wait $lpid 2>/dev/null
  long_done=$(python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(j.get('completed', j.get('requests_completed')))" "$out/join-$b-long.json" 2>/dev/null || echo "?")
  rows+=("$b alone $(summary "$out/join-$b-alone.json") -")
  rows+=("$b joins $(summary "$out/join-$b-joins.json") $long_done")
  kill -TERM $pid
  wait $pid
  python3 "$(dirname "$0")/step_log_summary.py" "$out/join-steps-$b.csv" > "$out/join-steps-$b.txt" 2>&1
done
echo
echo "| budget | phase | ITL p50 ms | ITL p90 ms | ITL p99 ms | TPOT p50 ms | TPOT p90 ms | streams tok/s | streams done | long prompts done |"
echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for r in "${rows[@]}"; do
  echo "| ${r// / | } |"
done

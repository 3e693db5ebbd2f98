#!/usr/bin/env bash
# Runs ON the GPU machine: time to first token of prompts into an idle server, with the default
# budget for steps without decodes (`rz serve --idle-step-tokens`, 2048) and without it
# (`--idle-step-tokens 1`: every step keeps to --max-step-tokens). docs/engine.md records it.
#
#   scripts/gpu_idle_step_ttft.sh BIN_DIR MODEL
#
# Two loads per setting: one connection sending 8 requests of 2,000-word prompts one after the
# other (each finds the server idle), and a burst of 16 connections with one 1,000-word prompt
# each. 4 tokens generated per request. Prints TTFT p50 / p90 per load and setting (JSON under
# $OUT, default /tmp).
set -u
. "$(dirname "$0")/serve_lib.sh"
bin=${1:?usage: gpu_idle_step_ttft.sh BIN_DIR MODEL}
model=${2:?model file}
out=${OUT:-/tmp}
port=${RZ_SERVE_PORT:-8095}
echo "| setting | load | TTFT p50 ms | TTFT p90 ms | requests |"
echo "| --- | --- | ---: | ---: | ---: |"
for setting in default off; do
  flags=()
  [ "$setting" = off ] && flags=(--idle-step-tokens 1)
  log=$out/idle-serve-$setting.log
  if ! start_server "$log" "$bin/rz" --model "$model" --device cuda --port "$port" --max-slots 16 \
      --max-connections-per-ip 64 --no-prefix-cache "${flags[@]}"; then
    echo "gpu_idle_step_ttft: the server did not start ($setting)"; exit 1
  fi
  url="ws://127.0.0.1:$port/v1/ws"
  "$bin/rz-wsbench" --url "$url" --connections 4 --requests 8 --prompt-tokens 64 --max-tokens 8 \
    --seed 3 --json > /dev/null 2>&1  # warm-up
  for load in sequential burst; do
    if [ "$load" = sequential ]; then
      args=(--connections 1 --requests 8 --prompt-tokens 2000)
    else
      args=(--connections 16 --requests 16 --prompt-tokens 1000)
    fi
    "$bin/rz-wsbench" --url "$url" "${args[@]}" --max-tokens 4 --seed 5 --timeout 300 --json \
      > "$out/idle-$setting-$load.json" 2> "$out/idle-$setting-$load.err"
    python3 - "$out/idle-$setting-$load.json" "$setting" "$load" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
t = j["ttft_ms"]
print(f"| {sys.argv[2]} | {sys.argv[3]} | {t['p50']:.1f} | {t['p90']:.1f} | {j.get('completed')} |")
PY
  done
  kill -TERM "$server_pid"
  wait "$server_pid"
done

#!/usr/bin/env bash
# Runs ON the GPU machine: the OpenAI API's streamed completions (server-sent events) against the
# WebSocket protocol, on one `rz serve`, measured the same way by rz-wsbench (bench/wsbench_sse.hpp
# says how the events map to tokens). For each stream count B: B connections in closed loop for a
# fixed duration, 64-token prompts, 256 generated tokens, greedy, ignore EOS; the transports take
# turns (ws, sse, ws, sse) so that drift shows as the spread between a transport's two runs.
#
#   scripts/gpu_sse_vs_ws.sh BIN_DIR MODEL [STREAMS]      STREAMS default "64"
#
# Prints a table per B: output tok/s, TTFT p50, ITL p50 / p99 of each run, and SSE / WS (mean of
# the two runs each). JSON of every run under $OUT (or /tmp).
set -u
. "$(dirname "$0")/serve_lib.sh"
bin=${1:?usage: gpu_sse_vs_ws.sh BIN_DIR MODEL [STREAMS]}
model=${2:?model file}
streams=${3:-"64"}
out=${OUT:-/tmp}
port=${RZ_SERVE_PORT:-8096}
dur=${RZ_SERVE_SECONDS:-15}
gen=256
prompt=64
max_b=1
for b in $streams; do [ "$b" -gt "$max_b" ] && max_b=$b; done

log=$out/serve-sse-ws.log
start_server "$log" "$bin/rz" --model "$model" --device cuda --port "$port" \
  --max-slots "$max_b" --ctx $(((prompt + gen + 64 + 63) / 64 * 64)) \
  --max-connections-per-ip $((2 * max_b + 8)) --max-connections $((2 * max_b + 16)) ||
  { echo "the server did not start"; exit 1; }
pid=$server_pid
ws="--url ws://127.0.0.1:$port/v1/ws"
sse="--api openai --url http://127.0.0.1:$port/v1"
# Warm-up over both transports: graphs for the batch sizes, cuBLAS plans, keep-alive paths.
for t in "$ws" "$sse"; do
  "$bin/rz-wsbench" $t --connections "$max_b" --requests "$max_b" --prompt-tokens $prompt \
    --max-tokens 32 --seed 5 --json > /dev/null 2>&1
done
for b in $streams; do
  for run in 1 2; do
    for name in ws sse; do
      [ $name = ws ] && t=$ws || t=$sse
      "$bin/rz-wsbench" $t --connections "$b" --duration "$dur" --prompt-tokens $prompt \
        --max-tokens $gen --seed 9 --timeout 600 --json > "$out/$name-$b-$run.json" \
        2> "$out/$name-$b-$run.err"
    done
  done
done
kill -TERM $pid
wait $pid 2>/dev/null

python3 - "$out" $streams <<'PY'
import json, os, sys
out, streams = sys.argv[1], [int(s) for s in sys.argv[2:]]
print("| streams | transport | run | output tok/s | TTFT p50 ms | ITL p50 / p99 ms | errors |")
print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
ratios = []
for b in streams:
    mean = {}
    for name in ("ws", "sse"):
        tps = []
        for run in (1, 2):
            try:
                s = json.load(open(os.path.join(out, f"{name}-{b}-{run}.json")))
            except Exception as e:
                print(f"| {b} | {name} | {run} | rz-wsbench failed ({e}) | | | |")
                continue
            tps.append(s["output_throughput"])
            i, t = s["itl_ms"], s["ttft_ms"]
            errs = sum(s.get("errors", {}).values()) if isinstance(s.get("errors"), dict) else s.get("errors", 0)
            print(f"| {b} | {name} | {run} | {s['output_throughput']:,.0f} | {t['p50']:.2f} | "
                  f"{i['p50']:.2f} / {i['p99']:.2f} | {errs} |")
        mean[name] = sum(tps) / len(tps) if tps else float("nan")
    ratios.append((b, mean["ws"], mean["sse"]))
print()
print("| streams | WS tok/s (mean of 2) | SSE tok/s (mean of 2) | SSE / WS |")
print("| ---: | ---: | ---: | ---: |")
for b, w, s in ratios:
    print(f"| {b} | {w:,.0f} | {s:,.0f} | {s / w:.3f} |")
PY

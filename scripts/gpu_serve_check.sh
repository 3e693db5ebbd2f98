#!/usr/bin/env bash
# Runs ON the GPU machine: `rz serve --device cuda` on a model, driven over WebSocket by
# rz-wsbench (closed loop, several connections), then SIGTERM; checks that every request
# completed and prints the server's log (with its memory plan) and the client's table.
#
#   scripts/gpu_serve_check.sh BIN_DIR MODEL [CONNECTIONS] [REQUESTS]
#
# BIN_DIR holds rz and rz-wsbench (LD_LIBRARY_PATH must reach their libraries). Exit status 0
# only when the server started on the GPU, every request completed and the server drained.
set -u
. "$(dirname "$0")/serve_lib.sh"
bin=${1:?usage: gpu_serve_check.sh BIN_DIR MODEL [CONNECTIONS] [REQUESTS]}
model=${2:?model file}
conns=${3:-16}
reqs=${4:-256}
port=${RZ_SERVE_PORT:-8093}
log=$(mktemp /tmp/rz-serve-XXXX.log)
if ! start_server "$log" "$bin/rz" --model "$model" --device "${RZ_SERVE_DEVICE:-cuda}" \
    --port "$port" --max-slots 16 --max-connections-per-ip $((conns + 8)); then
  echo "gpu_serve_check: the server did not start"; exit 1
fi
pid=$server_pid
rc=0
grep -q "device ${RZ_SERVE_DEVICE:-cuda}" "$log" || { echo "gpu_serve_check: the server is not on the GPU"; rc=1; }
"$bin/rz-wsbench" --url "ws://127.0.0.1:$port/v1/ws" --connections "$conns" --requests "$reqs" \
  --prompt-tokens 64 --max-tokens 128 --json > /tmp/rz-wsbench.json 2>/tmp/rz-wsbench.err
wsrc=$?
[ $wsrc -eq 0 ] || { echo "gpu_serve_check: rz-wsbench exit $wsrc"; cat /tmp/rz-wsbench.err; rc=1; }
python3 - /tmp/rz-wsbench.json "$((2 * reqs))" <<'PY' || rc=1
import json, sys
j = json.load(open(sys.argv[1]))
want = int(sys.argv[2]) // 2
done = j.get("completed", j.get("requests_completed"))
errs = j.get("errors", {})
print(f"gpu_serve_check: completed {done} of {want}, errors {errs}")
print(f"  output {j['output_throughput']:.0f} tok/s, {j['request_throughput']:.1f} req/s over "
      f"{j['duration_s']:.1f} s, peak in flight {j['peak_in_flight']}")
for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
    v = j[k]
    print(f"  {k:8s} " + "  ".join(f"{q} {v[q]:.2f}" for q in ("mean", "p50", "p90", "p99") if q in v))
sys.exit(0 if done == want and not errs else 1)
PY
kill -TERM $pid
wait $pid
src=$?
echo "--- server log"
cat "$log"
[ $src -eq 0 ] || { echo "gpu_serve_check: server exit $src"; rc=1; }
echo "gpu_serve_check: $([ $rc -eq 0 ] && echo PASS || echo FAIL)"
exit $rc

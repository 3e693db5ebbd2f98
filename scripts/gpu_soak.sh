#!/usr/bin/env bash
# Runs ON the GPU machine: tests/net/soak.py against `rz serve --device cuda`, in two calls made
# back to back (one call may run 10 minutes at most; a process started with setsid outlives it):
#
#   scripts/gpu_soak.sh start BIN_DIR MODEL [MINUTES]
#       1. KV pressure: 2 minutes with 64 slots but a KV cache that holds about a tenth of what
#          they could use (--kv-fraction $RZ_SOAK_KV_FRACTION, default 0.001): requests must wait
#          for blocks or be refused, never fail once started;
#       2. starts the soak proper in the background (64 slots, 48 clients, MINUTES, default 10)
#          and returns.
#   scripts/gpu_soak.sh wait
#       waits for it to end and copies its JSON and log to $OUT.
# Logs and JSON in /tmp/rz-soak/ (and $OUT).
set -u
cd "$(dirname "$0")/.." || exit 2
dir=/tmp/rz-soak
out=${OUT:-$dir}
case "${1:-}" in
  start)
    bin=${2:?BIN_DIR}; model=${3:?MODEL}; minutes=${4:-10}
    mkdir -p "$dir"
    rm -f "$dir/done"
    echo "== KV pressure: 2 min, 64 slots, --kv-fraction ${RZ_SOAK_KV_FRACTION:-0.001}"
    python3 tests/net/soak.py "$bin/rz" "$model" --device cuda --slots 64 --clients 48 \
      --minutes 2 --json "$out/soak-kv-pressure.json" -- --ctx 4096 \
      --kv-fraction "${RZ_SOAK_KV_FRACTION:-0.001}" --max-connections-per-ip 128 \
      > "$out/soak-kv-pressure.log" 2>&1
    echo "kv pressure exit $?"
    tail -n 3 "$out/soak-kv-pressure.log"
    echo "== soak: $minutes min, 64 slots, 48 clients (background)"
    setsid bash -c "python3 tests/net/soak.py '$bin/rz' '$model' --device cuda --slots 64 \
      --clients 48 --minutes $minutes --json $dir/soak.json -- --ctx 4096 \
      --max-connections-per-ip 128 > $dir/soak.log 2>&1; echo \$? > $dir/done" \
      < /dev/null > /dev/null 2>&1 &
    ;;
  wait)
    while [ ! -f "$dir/done" ]; do sleep 5; done
    echo "soak exit $(cat "$dir/done")"
    cp "$dir/soak.json" "$dir/soak.log" "$out/" 2>/dev/null
    grep "^soak:" "$dir/soak.log" | tail -n 12
    ;;
  *) sed -n '2,14p' "$0"; exit 2 ;;
esac

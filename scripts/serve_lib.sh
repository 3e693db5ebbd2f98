# Sourced by the scripts that drive `rz serve` on the GPU machine (gpu_serve_check.sh,
# gpu_join_bench.sh, gpu_serve_vs_engine.sh): one way to start the server and wait for it.
#
#   start_server LOG RZ_BIN SERVE_ARGS...
# Starts `RZ_BIN serve SERVE_ARGS...` in the background with its output in LOG, sets
# server_pid, and waits up to 120 s for its "listening" line. Returns 0 once it listens; 1 (after
# printing LOG and stopping the process) when it exits or never listens.
start_server() {
  local log=$1 rz=$2
  shift 2
  "$rz" serve "$@" > "$log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 240); do
    grep -q "listening" "$log" && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.5
  done
  grep -q "listening" "$log" && return 0
  cat "$log"
  kill "$server_pid" 2>/dev/null
  return 1
}

#!/usr/bin/env bash
# The long reliability runs on this machine's CPU (docs/reliability.md keeps their latest figures):
#
#   scripts/reliability.sh fuzz [SECONDS]     each libFuzzer target SECONDS (default 600)
#   scripts/reliability.sh hostile            tests/net/hostile_clients.py --long, strict bounds
#   scripts/reliability.sh soak [MINUTES]     tests/net/soak.py for MINUTES (default 30)
#
# Output and JSON under build/reliability/. Set up first (scripts/setup.sh, scripts/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/reliability
mkdir -p "$out"
model=models/SmolLM2-135M-Instruct.Q4_1.gguf
case "${1:-}" in
  fuzz)
    bash scripts/fuzz.sh build
    for t in protocol_fuzz gguf_fuzz safetensors_fuzz tokenizer_fuzz chat_template_fuzz http_fuzz; do
      bash scripts/fuzz.sh run "$t" "${2:-600}" | tee -a "$out/fuzz.txt"
    done
    ;;
  hostile)
    .venv/bin/python tests/net/hostile_clients.py build/rz "$model" --long \
      --json "$out/hostile.json" | tee "$out/hostile.txt"
    ;;
  soak)
    .venv/bin/python tests/net/soak.py build/rz "$model" --minutes "${2:-30}" --clients 12 \
      --json "$out/soak.json" -- --ctx 2048 --max-connections-per-ip 64 | tee "$out/soak.txt"
    ;;
  *) sed -n '2,9p' "$0"; exit 2 ;;
esac

#!/usr/bin/env bash
# Sets up (scripts/setup.sh), builds (scripts/build.sh) and runs every test with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"

#!/usr/bin/env bash
# Renders docs/architecture.dot (the picture of docs/architecture.md) to SVG and PNG.
# Needs Graphviz (Debian: apt-get install -y graphviz); the build never does.
set -euo pipefail
cd "$(dirname "$0")"
dot -Tsvg architecture.dot -o architecture.svg
dot -Tpng -Gdpi=110 architecture.dot -o architecture.png

#!/usr/bin/env bash
# Carries a model file bigger than one device call's 64 MiB to the GPU machine in two calls made
# back to back while the machine is still warm (it keeps /tmp between calls until it goes back).
#
#   here:            scripts/gpu_stage_model.sh split FILE [FIRST_MIB]
#                    -> .stage_a/part.0 (the first FIRST_MIB MiB, default 50) and .stage_b/part.1
#                       (the rest) + .stage_b/SHA256 (both git-ignored)
#   there, call 1:   scripts/gpu_stage_model.sh put-a            (carry .stage_a)
#   there, call 2:   scripts/gpu_stage_model.sh assemble         (carry .stage_b)
#                    -> prints the path of the whole file, /tmp/rz-stage/NAME, after checking its
#                       SHA-256; exits 1 (and says why) when part 0 is not there (a fresh machine)
set -euo pipefail
cd "$(dirname "$0")/.."
stage=/tmp/rz-stage
case "${1:-}" in
  split)
    file=${2:?usage: split FILE [FIRST_MIB]}
    first=${3:-50}
    rm -rf .stage_a .stage_b
    mkdir -p .stage_a .stage_b
    head -c $((first * 1024 * 1024)) "$file" > .stage_a/part.0
    tail -c +$((first * 1024 * 1024 + 1)) "$file" > .stage_b/part.1
    (cd "$(dirname "$file")" && sha256sum "$(basename "$file")") > .stage_b/SHA256
    ls -l .stage_a .stage_b
    ;;
  put-a)
    mkdir -p "$stage"
    cp .stage_a/part.0 "$stage/part.0"
    echo "staged part 0: $(stat -c %s "$stage/part.0") bytes in $stage"
    ;;
  assemble)
    if [ ! -f "$stage/part.0" ]; then
      echo "gpu_stage_model: $stage/part.0 is missing (the machine was given back between the two calls)" >&2
      exit 1
    fi
    name=$(awk '{print $2}' .stage_b/SHA256)
    cat "$stage/part.0" .stage_b/part.1 > "$stage/$name"
    (cd "$stage" && sha256sum -c --quiet "$OLDPWD/.stage_b/SHA256") >&2
    echo "$stage/$name"
    ;;
  *)
    sed -n '2,13p' "$0"
    exit 2
    ;;
esac

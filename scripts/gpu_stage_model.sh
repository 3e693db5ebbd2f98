#!/usr/bin/env bash
# Carries a model file bigger than one device call's 64 MiB to the GPU machine in several calls
# made back to back while the machine is still warm (it keeps /tmp between calls until it goes
# back).
#
#   here:            scripts/gpu_stage_model.sh split FILE [PART_MIB]
#                    -> .stage/NN/part (NN = 00, 01, ...: PART_MIB MiB each, default 60, the last
#                       the rest) and .stage/sum/SHA256 (all git-ignored); prints the folders
#   there, call k:   scripts/gpu_stage_model.sh put NN            (carry .stage/NN)
#   there, last:     scripts/gpu_stage_model.sh assemble          (carry .stage/sum, and the last
#                                                                   part's folder after put NN)
#                    -> prints the path of the whole file, /tmp/rz-stage/NAME, after checking its
#                       SHA-256; exits 1 (and says why) when a part is missing (a fresh machine)
set -euo pipefail
cd "$(dirname "$0")/.."
stage=/tmp/rz-stage
case "${1:-}" in
  split)
    file=${2:?usage: split FILE [PART_MIB]}
    mib=${3:-60}
    rm -rf .stage
    mkdir -p .stage/sum
    size=$(stat -c %s "$file")
    part=$((mib * 1024 * 1024))
    n=$(((size + part - 1) / part))
    for ((i = 0; i < n; i++)); do
      d=.stage/$(printf %02d "$i")
      mkdir -p "$d"
      dd if="$file" of="$d/part" bs=1M skip=$((i * mib)) count="$mib" status=none
    done
    (cd "$(dirname "$file")" && sha256sum "$(basename "$file")") > .stage/sum/SHA256
    echo "$n" > .stage/sum/PARTS
    ls -l .stage/*/
    ;;
  put)
    nn=${2:?usage: put NN}
    mkdir -p "$stage"
    cp ".stage/$nn/part" "$stage/part.$nn"
    echo "staged part $nn: $(stat -c %s "$stage/part.$nn") bytes in $stage"
    ;;
  assemble)
    n=$(cat .stage/sum/PARTS)
    name=$(awk '{print $2}' .stage/sum/SHA256)
    parts=()
    for ((i = 0; i < n; i++)); do
      p=$stage/part.$(printf %02d "$i")
      if [ ! -f "$p" ]; then
        echo "gpu_stage_model: $p is missing (the machine was given back between the calls)" >&2
        exit 1
      fi
      parts+=("$p")
    done
    cat "${parts[@]}" > "$stage/$name"
    (cd "$stage" && sha256sum -c --quiet "$OLDPWD/.stage/sum/SHA256") >&2
    echo "$stage/$name"
    ;;
  *)
    sed -n '2,15p' "$0"
    exit 2
    ;;
esac

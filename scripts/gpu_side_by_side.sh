#!/usr/bin/env bash
# rz against llama.cpp on the same GGUF files, in one GPU-machine session (issue 10's table).
# Runs ON the GPU machine from the repository root, with the bundled rz binary and llama.cpp's
# binaries from ../shared/anchors:
#
#   bash scripts/gpu_side_by_side.sh ANCHOR_DIR [SHAPE:FORMAT ...]
#
# ANCHOR_DIR holds llama.cpp-d32676d-sm90-bin.tar.xz and llamacpp_bench.sh (carried in a
# git-ignored folder such as .stage_a; the archive and the bundle together pass the 64 MiB carry
# limit, so unpack the archive in one call, which leaves /tmp/llama.cpp-bin, and run this in the
# next call while the machine is warm: the script then needs only llamacpp_bench.sh, or it finds
# the binaries already there). Default models: qwen2.5-1.5b:q4_k_m qwen2.5-1.5b:f16
# llama3.1-8b:q4_k_m. For each: `rz synth` writes the file to /tmp, llama.cpp's llama-bench
# (pp512, tg128) and llama-batched-bench (B = 1, 4, 16, 64, 256: 128-token prompts, 128
# generated) run on it, then `rz bench --device cuda` on the same workloads, and the file is
# deleted. Prints one markdown table per model: llama.cpp, rz and rz / llama.cpp per workload.
# In $OUT (default /tmp/rz-side-by-side), per model TAG (SHAPE-FORMAT): llamacpp-TAG.log (the
# llama.cpp runs), llamacpp-TAG.json (its figures per workload, for scripts/plot_decode.py),
# rz-TAG.log (rz bench's tables and progress lines) and rz-TAG.json (rz bench --json-out); and
# decode.png, tokens/s against B for rz and llama.cpp with rz's bandwidth ceiling, where python3
# has matplotlib.
#
# Environment: RZ_BIN_DIR (default .bundle/bin; its parent folder holds the bundle's lib/,
# vocab/ and MANIFEST, as scripts/gpu_pack.sh DIR leaves them unpacked), SBS_BATCHES (default
# 1,4,16,64,256), SBS_REPS (rz bench timed runs, default 3), SBS_TAR (a .tgz path: the whole output folder packed there at
# the end; the device tool brings back only a few files of a call's $OUT, so on the GPU machine
# run with SBS_TAR=$OUT/sbs.tgz OUT=/tmp/sbs, in that order: bash expands a command's assignments
# left to right, so SBS_TAR after OUT=/tmp/sbs would name /tmp/sbs/sbs.tgz), and unpack it here.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
anchors=${1:?usage: gpu_side_by_side.sh ANCHOR_DIR [SHAPE:FORMAT ...]}
shift
models=("$@")
[ ${#models[@]} -eq 0 ] && models=(qwen2.5-1.5b:q4_k_m qwen2.5-1.5b:f16 llama3.1-8b:q4_k_m)
bin=${RZ_BIN_DIR:-.bundle/bin}
out=${OUT:-/tmp/rz-side-by-side}
batches=${SBS_BATCHES:-1,4,16,64,256}
reps=${SBS_REPS:-3}
mkdir -p "$out"
# the bundle's folder (scripts/gpu_pack.sh's DIR, unpacked): bin/, lib/, vocab/, MANIFEST
bundle=$(cd "$(dirname "$bin")" && pwd)
export LD_LIBRARY_PATH=$bundle/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
vocab=$bundle/vocab/ggml-vocab-gpt-2.gguf
echo "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n 1)"
echo "rz: $(cat "$bundle/MANIFEST" 2>/dev/null | head -n 1)"
llama_version=d32676d
echo "llama.cpp: $llama_version (../shared/anchors)"
status=0
jsons=()  # this run's rz-TAG.json and llamacpp-TAG.json, for the plot
for m in "${models[@]}"; do
  shape=${m%%:*}
  fmt=${m#*:}
  file=/tmp/sbs-$shape-$fmt.gguf
  tag=$shape-$fmt
  if ! "$bin/rz" synth --shape "$shape" --format "$fmt" --vocab "$vocab" --out "$file" \
    > "$out/synth-$tag.log" 2>&1; then
    echo "== $tag: rz synth failed (see synth-$tag.log)"
    status=1
    continue
  fi
  LCB_BATCHES=$batches bash "$anchors/llamacpp_bench.sh" "$anchors" "$file" \
    > "$out/llamacpp-$tag.log" 2>&1
  rm -f "$out/rz-$tag.json"
  "$bin/rz" bench --device cuda --model "$file" --label "$tag" --pp 512 --tg 128 \
    --batches "$batches" --prompt 128 --gen 128 --reps "$reps" --json-out "$out/rz-$tag.json" \
    > "$out/rz-$tag.log" 2>&1 || status=1
  rm -f "$file"
  python3 - "$tag" "$out/llamacpp-$tag.log" "$out/rz-$tag.json" "$out/llamacpp-$tag.json" \
    "$file" "$llama_version" <<'PY' || status=1
import json, sys
tag, lcb, rzj, lcj, path, version = sys.argv[1:7]
num = lambda s: float(s.replace(",", "").split()[0])
# llama.cpp's figures from its log: llama-bench's markdown rows, llama-batched-bench's table.
ref = {}
for line in open(lcb):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) >= 8 and cells[-2] in ("pp512", "tg128"):  # llama-bench: ... | test | t/s |
        ref[cells[-2]] = num(cells[-1])
    elif len(cells) == 10 and cells[2].isdigit():  # batched-bench: PP TG B N_KV T_PP S_PP T_TG S_TG
        ref["B=" + cells[2]] = num(cells[7])
def kind(name):
    return "batched" if name.startswith("B=") else name[:2]
workloads = [{"name": k, "kind": kind(k), "batch": int(k[2:]) if k.startswith("B=") else 1,
              "tokens_per_s": v} for k, v in ref.items()]
with open(lcj, "w") as f:
    json.dump({"tool": "llama.cpp", "version": version, "source_log": lcb,
               "model": {"label": tag, "path": path}, "workloads": workloads}, f, indent=2)
    f.write("\n")
# rz's from rz bench's JSON (absent when rz bench died before writing it).
ours = {}
try:
    for w in json.load(open(rzj))["workloads"]:
        if w["ok"]:
            ours[w["name"]] = w["tokens_per_s"]
except (OSError, ValueError, KeyError) as e:
    print(f"{tag}: no rz figures ({e})")
print(f"\n{tag} (tokens/s)\n\n| workload | llama.cpp | rz | rz / llama.cpp |\n| --- | ---: | ---: | ---: |")
for k in ["pp512", "tg128"] + sorted((k for k in ref if k.startswith("B=")), key=lambda k: int(k[2:])):
    r, o = ref.get(k), ours.get(k)
    ratio = f"{o / r:.2f}" if r and o else "n/a"
    fmt = lambda v: f"{v:,.0f}" if v is not None else "n/a"
    print(f"| {k} | {fmt(r)} | {fmt(o)} | {ratio} |")
PY
  for j in "$out/rz-$tag.json" "$out/llamacpp-$tag.json"; do
    [ -s "$j" ] && jsons+=("$j")
  done
done
# tokens/s against B for each model (scripts/plot_decode.py; needs matplotlib, which the GPU machine
# may lack: then run the same command wherever the JSON files are copied).
if [ ${#jsons[@]} -eq 0 ]; then
  echo "no JSON to plot"
elif python3 -c "import matplotlib" 2>/dev/null; then
  python3 scripts/plot_decode.py --out "$out/decode.png" "${jsons[@]}" || status=1
else
  echo "no matplotlib here: run python3 scripts/plot_decode.py --out decode.png ${jsons[*]##*/}" \
    "where those files are copied"
fi
if [ -n "${SBS_TAR:-}" ]; then
  # (the archive itself left out, should it lie inside the folder)
  tar czf "$SBS_TAR" --exclude="$(basename "$SBS_TAR")" -C "$(dirname "$out")" "$(basename "$out")" ||
    status=1
fi
exit $status

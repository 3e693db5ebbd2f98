#!/usr/bin/env bash
# End-to-end correctness of the CUDA executor (tests/gpu_verify/README.md), in two halves:
#
#   scripts/gpu_verify.sh bundle    here: builds rz, gpu_test and gpu_verify in
#                                   ${RZ_GPU_BUILD_DIR:-build-gpu} through scripts/gpu_bundle.sh,
#                                   adds the GPT-2 vocabulary `rz synth` needs, and xz-compresses
#                                   the binaries and libraries (python3's lzma) when the bundle
#                                   would not fit the 64 MiB carry limit. Carry .bundle.
#   scripts/gpu_verify.sh run       there, from the repository root (writes into $OUT, default
#                                   /tmp/rz-gpu-verify): device, commit, synthetic models made
#                                   with `rz synth` (tiny and qwen2.5-1.5b, six formats) and
#                                   `gpu_verify compare` on each, hf_reference.py and `gpu_verify
#                                   hf` on its three models, `gpu_verify batch` on a tiny model,
#                                   and on SmolLM2 (batch, compare --text) when $RZ_SMOLLM2 names
#                                   the file (staged separately: it is over the carry limit).
#                                   Ends with a summary table; exit 0 only when every step passed.
#
# Environment (run): RZ_SMOLLM2 (path of SmolLM2-135M-Instruct.Q4_1.gguf), RZ_QWEN_BUDGET (seconds
# for the qwen2.5-1.5b synth + compare part, default 200: formats left when it is spent are
# reported as skipped), RZ_VERIFY_CPU=1 (no GPU: every step runs CPU against CPU, to test this
# script on a machine without one), RZ_VERIFY_FORMATS (default "q4_k_m q8_0 q4_0 q4_1 f16 bf16"),
# RZ_VERIFY_STEPS (default "tiny qwen hf batch fp8 smollm2": a subset re-runs part of it).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
root=$PWD
bundle=${RZ_BUNDLE:-$root/.bundle}  # RZ_BUNDLE: another bundle directory (tests of this script)

# Moves DIR/bin/* and DIR/lib/* to DIR/xz/{bin,lib}/NAME.xz (python3's lzma: the GPU machine may
# lack the xz and zstd tools, never python3).
compress_bundle() {  # compress_bundle DIR
  mkdir -p "$1/xz/bin" "$1/xz/lib"
  python3 - "$1" <<'EOF'
import lzma, os, sys
b = sys.argv[1]
for d in ("bin", "lib"):
    for n in sorted(os.listdir(os.path.join(b, d))):
        src = os.path.join(b, d, n)
        with open(src, "rb") as f:
            data = f.read()
        dst = os.path.join(b, "xz", d, n + ".xz")
        with open(dst, "wb") as f:
            f.write(lzma.compress(data, preset=6))
        os.chmod(dst, os.stat(src).st_mode & 0o777)
        os.remove(src)
EOF
}

do_bundle() {
  set -e
  scripts/gpu_bundle.sh rz gpu_test gpu_verify
  local vocab=$root/../shared/testdata/vocab/ggml-vocab-gpt-2.gguf
  rm -rf "$bundle/vocab" "$bundle/xz"
  mkdir -p "$bundle/vocab"
  if [ -f "$vocab" ]; then
    cp "$vocab" "$bundle/vocab/"
  else
    echo "gpu_verify: $vocab not found: rz synth will write models without a tokenizer" >&2
  fi
  local all
  all=$(du -sb "$bundle" | cut -f1)
  if [ "$all" -gt $((56 * 1024 * 1024)) ]; then
    echo "== bundle is $((all / 1048576)) MiB: xz-compressing bin/ and lib/ into xz/"
    compress_bundle "$bundle"
    echo "   (bin/ and lib/ now live compressed in xz/; scripts/gpu_verify.sh run unpacks them)"
  fi
  (cd "$bundle" && find . -type f -printf '%s\t%p\n' | sort -k2 |
    awk -F'\t' '{ printf "  %8.1f MiB  %s\n", $1 / 1048576, $2 }')
  all=$(du -sb "$bundle" | cut -f1)
  echo "== .bundle: $((all / 1048576)) MiB in all (carry limit 64 MiB)"
  [ "$all" -le $((64 * 1024 * 1024)) ] || { echo "gpu_verify: .bundle is over the carry limit" >&2; exit 1; }
}

# ---------------------------------------------------------------------------- run (GPU machine)

out=${OUT:-/tmp/rz-gpu-verify}
work=/tmp/rz-gpu-verify-work
cpu_mode=${RZ_VERIFY_CPU:-0}
formats=${RZ_VERIFY_FORMATS:-"q4_k_m q8_0 q4_0 q4_1 f16 bf16"}
results=()   # "name|status|seconds|detail"
steps=" ${RZ_VERIFY_STEPS:-tiny qwen hf batch fp8 smollm2} "
want() { [[ "$steps" == *" $1 "* ]]; }

record() {  # record NAME RC SECONDS DETAIL
  local status=pass
  [ "$2" -eq 0 ] || status="FAIL($2)"
  [ "$2" -eq 124 ] && status="TIMEOUT"
  [ "$2" -eq 200 ] && status="skipped"
  results+=("$1|$status|$3|$4")
}

# Runs gpu_verify with a time limit; its output goes to $out/NAME.log, its FAIL lines and the
# final line to the console. record()s the result.
verify() {  # verify NAME TIMEOUT ARGS...
  local name=$1 limit=$2 t0=$SECONDS rc=0
  shift 2
  echo "-- $name"
  echo "gpu_verify $*" > "$out/$name.log"
  timeout -k 10 "$limit" "$gv" "$@" >> "$out/$name.log" 2>&1 || rc=$?
  grep -E '^(FAIL|gpu executor:|prompts chosen)' "$out/$name.log" | head -n 8 | cut -c1-300 |
    sed 's/^/   /'
  local last
  last=$(grep -E '^gpu_verify ' "$out/$name.log" | tail -n 1)
  [ -n "$last" ] || last=$(tail -n 1 "$out/$name.log")
  echo "   $last" | cut -c1-300
  record "$name" "$rc" $((SECONDS - t0)) "$(echo "$last" | sed 's/^gpu_verify [^:]*: //' | cut -c1-150)"
}

synth() {  # synth SHAPE FORMAT FILE: returns rz synth's exit code, prints its time
  local t0=$SECONDS rc=0
  "$rz" synth --shape "$1" --format "$2" --out "$3" --vocab "$vocab" > "$out/synth-$1-$2.log" 2>&1 || rc=$?
  echo "   synth $1 $2: exit $rc, $((SECONDS - t0)) s, $(du -h "$3" 2>/dev/null | cut -f1)"
  return $rc
}

unpack() {  # binaries from .bundle/bin or .bundle/xz into $work/bundle
  rm -rf "$work/bundle"
  mkdir -p "$work/bundle"
  if [ -d "$bundle/xz" ]; then
    python3 - "$bundle/xz" "$work/bundle" <<'EOF'
import lzma, os, sys
src, dst = sys.argv[1], sys.argv[2]
for d in ("bin", "lib"):
    os.makedirs(os.path.join(dst, d), exist_ok=True)
    for n in os.listdir(os.path.join(src, d)):
        p = os.path.join(src, d, n)
        with open(p, "rb") as f:
            data = lzma.decompress(f.read())
        q = os.path.join(dst, d, n[:-3] if n.endswith(".xz") else n)
        with open(q, "wb") as f:
            f.write(data)
        os.chmod(q, os.stat(p).st_mode & 0o777 | 0o700)
EOF
  else
    cp -r "$bundle/bin" "$bundle/lib" "$work/bundle/"
  fi
}

do_run() {
  rm -rf "$work"
  mkdir -p "$out" "$work/models"
  echo "== gpu_verify run $(date -u +%Y-%m-%dT%H:%M:%SZ) in $root"
  echo "== device"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap --format=csv 2>&1 || true
  echo "   cpus $(nproc), python3 $(python3 -c 'import sys; print(sys.version.split()[0])' 2>&1)"
  if [ -f "$bundle/MANIFEST" ]; then sed 's/^/   bundle: /' "$bundle/MANIFEST"; else echo "   no $bundle/MANIFEST"; fi

  local t0=$SECONDS
  unpack || { echo "gpu_verify: cannot unpack $bundle"; exit 2; }
  export LD_LIBRARY_PATH=$work/bundle/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  rz=$work/bundle/bin/rz
  gv=$work/bundle/bin/gpu_verify
  echo "   unpacked in $((SECONDS - t0)) s"
  vocab=$bundle/vocab/ggml-vocab-gpt-2.gguf
  [ -f "$vocab" ] || vocab=$root/../shared/testdata/vocab/ggml-vocab-gpt-2.gguf
  local gpu=() gpub=() hfx=()
  if [ "$cpu_mode" = 1 ]; then
    echo "   RZ_VERIFY_CPU=1: CPU against CPU (testing this script; nothing about the GPU)"
    gpu=(--cpu-vs-cpu)
    gpub=(--cpu)
    hfx=(--cpu)
  fi

  if want tiny; then
  echo "== tiny: synth + compare (random-id prompts, teacher-forced, excused divergences allowed up to 1 % of steps)"
  local f
  for f in $formats; do
    local m=$work/models/tiny-$f.gguf
    if synth tiny "$f" "$m"; then
      verify "compare-tiny-$f" 120 compare --model "$m" --ties-ok "${gpu[@]}"
    else
      record "compare-tiny-$f" 1 0 "rz synth failed: $(tail -n 1 "$out/synth-tiny-$f.log")"
    fi
  done

  fi

  if want qwen; then
  echo "== qwen2.5-1.5b: synth + compare (budget ${RZ_QWEN_BUDGET:-200} s)"
  local q0=$SECONDS
  for f in $formats; do
    if [ $((SECONDS - q0)) -ge "${RZ_QWEN_BUDGET:-200}" ]; then
      echo "   qwen2.5-1.5b $f: skipped, the budget is spent"
      record "compare-qwen2.5-1.5b-$f" 200 0 "not run: RZ_QWEN_BUDGET spent"
      continue
    fi
    local m=$work/models/qwen2.5-1.5b-$f.gguf
    if synth qwen2.5-1.5b "$f" "$m"; then
      verify "compare-qwen2.5-1.5b-$f" 180 compare --model "$m" --ties-ok "${gpu[@]}"
    else
      record "compare-qwen2.5-1.5b-$f" 1 0 "rz synth failed: $(tail -n 1 "$out/synth-qwen2.5-1.5b-$f.log")"
    fi
    rm -f "$m"  # up to 3 GB each
  done

  fi

  if want hf; then
  echo "== Hugging Face models vs transformers"
  t0=$SECONDS
  local dev=cuda rc=0
  [ "$cpu_mode" = 1 ] && dev=cpu
  timeout -k 10 240 python3 tests/gpu_verify/hf_reference.py --out "$work/hf" --device "$dev" \
    > "$out/hf_reference.log" 2>&1 || rc=$?
  grep -vE 'Writing model shards|Loading weights' "$out/hf_reference.log" | tail -n 6 | sed 's/^/   /'
  record hf_reference "$rc" $((SECONDS - t0)) "$(tail -n 1 "$out/hf_reference.log" | cut -c1-150)"
  local h
  for h in llama qwen2 mistral; do
    if [ -f "$work/hf/$h/golden.json" ]; then
      cp "$work/hf/$h/golden.json" "$out/hf-$h-golden.json" 2>/dev/null || true
      verify "hf-$h" 120 hf --model "$work/hf/$h" --golden "$work/hf/$h/golden.json" "${hfx[@]}"
    else
      record "hf-$h" 1 0 "no golden (hf_reference.py failed)"
    fi
  done

  fi

  if want batch; then
  echo "== batch invariance"
  local tiny=$work/models/tiny-q4_k_m.gguf
  [ -f "$tiny" ] || synth tiny q4_k_m "$tiny" || true
  verify batch-tiny-q4_k_m 180 batch --model "$tiny" --ties-ok "${gpub[@]}"
  local tiny16=$work/models/tiny-f16.gguf
  [ -f "$tiny16" ] && verify batch-tiny-f16 180 batch --model "$tiny16" --ties-ok "${gpub[@]}"
  fi

  if want fp8 && [ "$cpu_mode" != 1 ]; then
  echo "== --weights fp8 vs the stored weights (GPU both), and fp8 batch invariance"
  local f
  for f in f16 bf16; do
    local m=$work/models/tiny-$f.gguf
    [ -f "$m" ] || synth tiny "$f" "$m" || true
    verify "fp8-tiny-$f" 120 fp8 --model "$m"
  done
  # FP8's two paths round activations differently (W8A16 up to 8 tokens, W8A8 beyond), so alone
  # and in a batch differ by FP8's error, not the stored weights': its own tol and excuse cap.
  verify batch-tiny-f16-fp8 180 batch --model "$work/models/tiny-f16.gguf" --ties-ok --fp8 \
    --tol 0.15 --max-excused 0.05
  [ -d "$work/hf/mistral" ] && verify fp8-hf-mistral-bf16 120 fp8 --model "$work/hf/mistral"
  local q=$work/models/qwen2.5-1.5b-f16-fp8.gguf
  if synth qwen2.5-1.5b f16 "$q"; then
    verify fp8-qwen2.5-1.5b-f16 180 fp8 --model "$q"
  fi
  rm -f "$q"
  fi

  if ! want smollm2; then
    :
  elif [ -n "${RZ_SMOLLM2:-}" ] && [ -f "$RZ_SMOLLM2" ]; then
    echo "== SmolLM2 ($RZ_SMOLLM2): margin-selected prompts (>= 0.002 x row max), strict tokens"
    verify batch-smollm2 180 batch --model "$RZ_SMOLLM2" --min-margin 0.002 "${gpub[@]}"
    verify compare-smollm2-text 120 compare --model "$RZ_SMOLLM2" --text --min-margin 0.002 "${gpu[@]}"
    verify compare-smollm2-ids 120 compare --model "$RZ_SMOLLM2" --min-margin 0.002 "${gpu[@]}"
  else
    echo "== SmolLM2: RZ_SMOLLM2 is not set or not a file ('${RZ_SMOLLM2:-}'): skipped"
    record smollm2 200 0 "RZ_SMOLLM2 not given"
  fi

  echo
  echo "== summary ($(date -u +%H:%M:%SZ), $SECONDS s in all)"
  local fail=0 r name status secs detail
  printf '%-28s %-8s %5s  %s\n' step result s detail
  for r in "${results[@]}"; do
    IFS='|' read -r name status secs detail <<< "$r"
    printf '%-28s %-8s %5s  %s\n' "$name" "$status" "$secs" "$detail"
    case "$status" in pass | skipped) ;; *) fail=1 ;; esac
  done
  echo "gpu_verify.sh run: $([ $fail -eq 0 ] && echo PASS || echo FAIL) ($SECONDS s; logs in $out)"
  return $fail
}

case "${1:-}" in
  bundle) do_bundle ;;
  compress) compress_bundle "${2:?usage: compress DIR}" ;;  # what bundle does when too big
  run)
    mkdir -p "$out"
    do_run 2>&1 | tee "$out/gpu_verify_run.log"
    exit "${PIPESTATUS[0]}"
    ;;
  *)
    echo "usage: scripts/gpu_verify.sh bundle|run   (see the comment at the top)" >&2
    exit 2
    ;;
esac

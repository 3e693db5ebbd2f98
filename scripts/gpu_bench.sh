#!/usr/bin/env bash
# CUDA executor throughput against /work/shared/PERFORMANCE.md (bench/README-gpu.md). Runs ON the
# GPU machine, from the repository root, with the bundled rz binary:
#   bash scripts/gpu_bench.sh
# For each model of RZ_BENCH_MODELS: `rz synth` writes it to /tmp, `rz bench --device cuda`
# measures pp512 / tg128 and batched decode at RZ_BENCH_BATCHES, the file is deleted. Models
# whose time estimate no longer fits the budget (or the disk) are skipped and reported as such.
# Output in $OUT (default /tmp/rz-gpu-bench): synth-*.log, bench-*.log (rz bench's tables and
# progress lines), bench-*.json (the same figures, rz bench --json-out) and gpu_bench.md (the
# combined tables, in PERFORMANCE.md's layout, with llama.cpp's rows read from PERFORMANCE.md
# when ../shared/PERFORMANCE.md or shared/PERFORMANCE.md is there, and how long each part took).
#
# Environment:
#   RZ_BIN_DIR        the binaries (default .bundle/bin; when it lacks them and .bundle/xz/bin has
#                     them, they are unpacked with python3's lzma as scripts/gpu_verify.sh does)
#   RZ_BENCH_BUDGET   seconds for everything (default 420)
#   RZ_BENCH_MODELS   "SHAPE:FORMAT:ESTIMATE_S[:BATCHES] ..." (default below); a model is run only
#                     when ESTIMATE_S still fits the budget
#   RZ_BENCH_BATCHES  default batch sizes (default 1,4,16,64,256)
#   RZ_BENCH_REPS     timed runs per figure (default 3; the median is reported)
#   RZ_BENCH_ARGS     more rz bench flags, e.g. "--context 4096" or "--no-graphs"
#   RZ_BENCH_MODEL_LIMIT  seconds one rz bench run may take (default 200; its log keeps
#                     the lines of the parts it finished)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
root=$PWD
out=${OUT:-/tmp/rz-gpu-bench}
work=/tmp/rz-gpu-bench-work
budget=${RZ_BENCH_BUDGET:-420}
reps=${RZ_BENCH_REPS:-3}
batches=${RZ_BENCH_BATCHES:-1,4,16,64,256}
models=${RZ_BENCH_MODELS:-"qwen2.5-1.5b:q4_k_m:45 qwen2.5-1.5b:f16:50 llama3.1-8b:q4_k_m:120 llama3.1-8b:f16:180:1,4,16,64"}
mkdir -p "$out" "$work"
rm -f "$work"/*.gguf
timing=()   # "part|seconds|status"

bin=${RZ_BIN_DIR:-$root/.bundle/bin}
lib=$(dirname "$bin")/lib
if [ ! -x "$bin/rz" ] && [ -z "${RZ_BIN_DIR:-}" ] && [ -d "$root/.bundle/xz/bin" ]; then
  t0=$SECONDS
  rm -rf "$work/bundle"
  python3 - "$root/.bundle/xz" "$work/bundle" <<'EOF' || { echo "gpu_bench: cannot unpack .bundle/xz"; exit 2; }
import lzma, os, sys
src, dst = sys.argv[1], sys.argv[2]
for d in ("bin", "lib"):
    os.makedirs(os.path.join(dst, d), exist_ok=True)
    if not os.path.isdir(os.path.join(src, d)):
        continue
    for n in os.listdir(os.path.join(src, d)):
        p = os.path.join(src, d, n)
        with open(p, "rb") as f:
            data = lzma.decompress(f.read()) if n.endswith(".xz") else f.read()
        q = os.path.join(dst, d, n[:-3] if n.endswith(".xz") else n)
        with open(q, "wb") as f:
            f.write(data)
        os.chmod(q, os.stat(p).st_mode & 0o777 | 0o700)
EOF
  bin=$work/bundle/bin
  lib=$work/bundle/lib
  timing+=("unpack .bundle/xz|$((SECONDS - t0))|ok")
fi
export LD_LIBRARY_PATH=$lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
rz=$bin/rz
vocab=$root/.bundle/vocab/ggml-vocab-gpt-2.gguf
[ -f "$vocab" ] || vocab=$root/../shared/testdata/vocab/ggml-vocab-gpt-2.gguf
vocab_flag=()
[ -f "$vocab" ] && vocab_flag=(--vocab "$vocab")

echo "== gpu_bench $(date -u +%Y-%m-%dT%H:%M:%SZ) in $root (budget ${budget} s, reps $reps${RZ_BENCH_ARGS:+, $RZ_BENCH_ARGS})"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/   device: /'
[ -f "$root/.bundle/MANIFEST" ] && sed 's/^/   bundle: /' "$root/.bundle/MANIFEST"
[ -x "$rz" ] || { echo "gpu_bench: $rz is missing (build and bundle rz)"; exit 2; }

failed=0
logs=()
for m in $models; do
  IFS=: read -r shape fmt est bsz <<< "$m"
  bsz=${bsz:-$batches}
  name=$shape-$fmt
  left=$((budget - SECONDS))
  if [ "$est" -gt "$left" ]; then
    echo "-- $name: skipped (estimate ${est} s, ${left} s of the budget left)"
    timing+=("$name|0|skipped: estimate ${est} s > ${left} s left")
    continue
  fi
  avail=$(df -B1 --output=avail /tmp | tail -n 1)
  need=$((3 * 1024 * 1024 * 1024))
  [ "$shape" = llama3.1-8b ] && [ "$fmt" = f16 ] && need=$((18 * 1024 * 1024 * 1024))
  if [ "$avail" -lt "$need" ]; then
    echo "-- $name: skipped (/tmp has $((avail >> 30)) GiB free)"
    timing+=("$name|0|skipped: /tmp has $((avail >> 30)) GiB free")
    continue
  fi
  file=$work/$name.gguf
  echo "-- $name: rz synth"
  t0=$SECONDS
  rc=0
  timeout -k 10 $((left - 10)) "$rz" synth --shape "$shape" --format "$fmt" --out "$file" \
    "${vocab_flag[@]}" > "$out/synth-$name.log" 2>&1 || rc=$?
  timing+=("synth $name|$((SECONDS - t0))|exit $rc, $(du -h "$file" 2>/dev/null | cut -f1)")
  echo "   exit $rc in $((SECONDS - t0)) s, $(du -h "$file" 2>/dev/null | cut -f1)"
  if [ "$rc" -ne 0 ]; then
    tail -n 3 "$out/synth-$name.log" | sed 's/^/   /'
    failed=1
    rm -f "$file"
    continue
  fi
  label="$shape $(echo "$fmt" | tr a-z A-Z)"
  left=$((budget - SECONDS))
  [ "$left" -lt 30 ] && left=30
  [ "$left" -gt "${RZ_BENCH_MODEL_LIMIT:-200}" ] && left=${RZ_BENCH_MODEL_LIMIT:-200}
  echo "-- $name: rz bench (batches $bsz, limit ${left} s)"
  t0=$SECONDS
  rc=0
  timeout -k 10 "$left" "$rz" bench --device cuda --model "$file" --label "$label" --pp 512 \
    --tg 128 --batches "$bsz" --prompt 128 --gen 128 --reps "$reps" \
    --json-out "$out/bench-$name.json" ${RZ_BENCH_ARGS:-} > "$out/bench-$name.log" 2>&1 || rc=$?
  timing+=("bench $name|$((SECONDS - t0))|exit $rc")
  grep -E '^(executor|pp|tg|B=)' "$out/bench-$name.log" | cut -c1-200 | sed 's/^/   /'
  echo "   exit $rc in $((SECONDS - t0)) s"
  [ "$rc" -eq 0 ] || { failed=1; tail -n 3 "$out/bench-$name.log" | sed 's/^/   /'; }
  logs+=("$out/bench-$name.log")
  rm -f "$file"
done

# ---- the combined tables (python3: parsing PERFORMANCE.md and the logs)
perf=""
for p in "${RZ_PERFORMANCE_MD:-}" "$root/../shared/PERFORMANCE.md" "$root/shared/PERFORMANCE.md"; do
  [ -n "$p" ] && [ -f "$p" ] && { perf=$p; break; }
done
{
  echo "# gpu_bench $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  echo "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -n 1)"
  [ -f "$root/.bundle/MANIFEST" ] && sed 's/^/bundle: /; s/$/  /' "$root/.bundle/MANIFEST"
  echo "reps $reps, budget ${budget} s, extra flags '${RZ_BENCH_ARGS:-}', llama.cpp rows from: ${perf:-(PERFORMANCE.md not found)}"
  echo
  echo "| part | seconds | result |"
  echo "| --- | ---: | --- |"
  for t in "${timing[@]}"; do echo "| ${t//|/ | } |"; done
  echo "| total | $SECONDS | |"
  echo
  python3 - "$perf" "${logs[@]}" <<'EOF'
import re, sys

perf, logs = sys.argv[1], sys.argv[2:]

def rows_after(lines, head_re):
    """(header, [rows]) of every table whose header matches head_re."""
    out = []
    for i, l in enumerate(lines):
        if re.match(head_re, l):
            rows = []
            for r in lines[i + 2:]:
                if not r.startswith("|"):
                    break
                rows.append(r)
            out.append((l, rows))
    return out

def num(s):
    try:
        return float(s.replace(",", "").replace("~", ""))
    except ValueError:
        return 0.0

def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]

# llama.cpp: label -> {"pp": .., "tg": .., "B=1": ..}
ref = {}
if perf:
    text = open(perf).read()
    sec = text.split("## llama.cpp", 1)[-1].split("## The limit", 1)[0].splitlines() if "## llama.cpp" in text else []
    for head, rows in rows_after(sec, r"^\| shape, format \|"):
        keys = cells(head)[1:]
        for r in rows:
            c = cells(r)
            d = ref.setdefault(c[0], {})
            for k, v in zip(keys, c[1:]):
                d[k.replace(" tok/s", "")] = v

single, batched, limit, details = [], [], [], []
for log in logs:
    lines = open(log).read().splitlines()
    for head, rows in rows_after(lines, r"^\| shape, format \| pp"):
        single.append((cells(head), rows))
    for head, rows in rows_after(lines, r"^\| shape, format \| B="):
        batched.append((cells(head), rows))
    for head, rows in rows_after(lines, r"^\| shape, format \| weight bytes"):
        limit.append((head, rows))
    try:
        a = next(i for i, l in enumerate(lines) if l.startswith("## rz CUDA executor"))
        details.append("\n".join(l for l in lines[a:] if not l.startswith("(total")).replace("## ", "### ", 1))
    except StopIteration:
        details.append("### %s\n\nno report (see the log): last lines\n\n    %s" % (log, "\n    ".join(lines[-5:])))

def table(parts, what):
    if not parts:
        print("%s: no results\n" % what)
        return
    head = parts[0][0]
    print("| " + " | ".join(head) + " |")
    print("| --- |" + " ---: |" * (len(head) - 1))
    keys = [k.replace(" tok/s", "") for k in head[1:]]
    for h, rows in parts:
        for r in rows:
            c = cells(r)
            if h != head:  # other columns (another --batches): map by name
                m = dict(zip([k.replace(" tok/s", "") for k in h[1:]], c[1:]))
                c = [c[0]] + [m.get(k, "") for k in keys]
            print("| rz: " + " | ".join(c) + " |")
            if c[0] in ref:
                theirs = [ref[c[0]].get(k, "") for k in keys]
                print("| llama.cpp: %s | %s |" % (c[0], " | ".join(theirs)))
                ratio = [("%.2fx" % (num(a) / num(b))) if num(a) and num(b) else ""
                         for a, b in zip(c[1:], theirs)]
                print("| rz / llama.cpp | %s |" % " | ".join(ratio))
    print()

print("## Single stream\n")
table(single, "single stream")
print("## Batched decode (S_TG tok/s)\n")
table(batched, "batched decode")
print("## The limit\n")
if limit:
    print(limit[0][0])
    print("| --- |" + " ---: |" * (len(cells(limit[0][0])) - 1))
    for _, rows in limit:
        for r in rows:
            print(r)
    print()
print("## Details\n")
for d in details:
    print(d + "\n")
EOF
} > "$out/gpu_bench.md"
echo "== $out/gpu_bench.md"
sed -n '/^## Single stream/,/^## Details/p' "$out/gpu_bench.md" | grep -v '^## Details'
echo "gpu_bench: $([ $failed -eq 0 ] && echo PASS || echo 'SOME PARTS FAILED') in $SECONDS s"
exit $failed

#!/usr/bin/env bash
# Runs ON the GPU machine, from the repository root, with .bundle/ (made by scripts/gpu_bundle.sh)
# carried there:   bash scripts/gpu_check.sh
# Steps, each with its exit code reported; a failing step does not stop the next one:
#   1. device:    nvidia-smi -L, driver and CUDA versions, the bundle's manifest
#   2. libraries: every bundled binary's shared libraries resolve (ldd)
#   3. gpu_test:  all tests (gtest XML into $OUT when OUT is set)
#      gpu_used:  fails when any test skipped for want of a CUDA device
#   4. memcheck:  compute-sanitizer --tool memcheck on the same binary, all tests
#                 (RZ_MEMCHECK_FILTER, a gtest filter, default all)
#   5. racecheck: compute-sanitizer --tool racecheck on the shared-memory reductions
#                 (RZ_RACECHECK_FILTER, default the RMSNorm and argmax tests; "" skips the step)
# The log goes to $OUT/gpu_check.log (or /tmp/rz-gpu-check/gpu_check.log without OUT); the last
# line is a summary, and the exit status is 0 only when every step passed.
# Time limits per step (seconds): RZ_TEST_TIMEOUT 180, RZ_MEMCHECK_TIMEOUT 300,
# RZ_RACECHECK_TIMEOUT 90 (the whole call must fit the device call's limit).
set -u
cd "$(dirname "$0")/.." || exit 2
root=$PWD
bundle=$root/.bundle
# A bundle packed by scripts/gpu_pack.sh holds xz-compressed binaries: unpack them first.
if [ ! -d "$bundle/bin" ] && [ -d "$bundle/xz" ]; then bash "$root/scripts/gpu_unpack.sh" "$bundle" >/dev/null; fi
out=${OUT:-/tmp/rz-gpu-check}
mkdir -p "$out"
log=$out/gpu_check.log
export LD_LIBRARY_PATH=$bundle/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$PATH:/usr/local/cuda/bin
test_bin=$bundle/bin/gpu_test
test_timeout=${RZ_TEST_TIMEOUT:-180}
memcheck_timeout=${RZ_MEMCHECK_TIMEOUT:-300}
racecheck_timeout=${RZ_RACECHECK_TIMEOUT:-90}
racecheck_filter=${RZ_RACECHECK_FILTER-RmsNorm.*:Argmax.*}

results=()
step_start=0
begin() {  # begin "NAME ..."
  echo "== step $*"
  step_start=$SECONDS
}
record() {  # record NAME RC
  local name=$1 rc=$2 what=ok
  [ "$rc" -eq 0 ] || what="FAILED (exit $rc)"
  [ "$rc" -eq 124 ] && what="TIMED OUT (exit 124)"
  [ "$rc" -eq 200 ] && what="skipped"
  echo "== step $name: $what ($((SECONDS - step_start)) s)"
  results+=("$name=$rc")
}

sanitizer() {
  if command -v compute-sanitizer >/dev/null 2>&1; then
    command -v compute-sanitizer
  elif [ -x /usr/local/cuda/compute-sanitizer/compute-sanitizer ]; then
    echo /usr/local/cuda/compute-sanitizer/compute-sanitizer
  fi
}

main() {
  echo "== gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) in $root"
  echo "   LD_LIBRARY_PATH=$LD_LIBRARY_PATH"

  begin "device"
  local rc=0
  nvidia-smi -L || rc=$?
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap --format=csv || rc=$?
  nvidia-smi | grep -m1 "CUDA Version" || true
  if command -v nvcc >/dev/null 2>&1; then nvcc --version | tail -n 2; fi
  if [ -f "$bundle/MANIFEST" ]; then sed 's/^/   bundle: /' "$bundle/MANIFEST"; else echo "   no $bundle/MANIFEST"; rc=1; fi
  record device "$rc"

  begin "libraries"
  rc=0
  if [ ! -d "$bundle/bin" ]; then
    echo "   no $bundle/bin: run scripts/gpu_bundle.sh on the build machine and carry .bundle"
    rc=1
  else
    for b in "$bundle"/bin/*; do
      echo "   $(basename "$b")"
      if ldd "$b" | grep "not found"; then rc=1; fi
      ldd "$b" | grep -E "cudart|cublas|$bundle" | sed 's/^/     /'
    done
  fi
  record libraries "$rc"

  begin "gpu_test"
  rc=0
  if [ -x "$test_bin" ]; then
    timeout -k 10 "$test_timeout" "$test_bin" --gtest_output="xml:$out/gpu_test.xml" || rc=$?
  else
    echo "   no $test_bin"
    rc=1
  fi
  record gpu_test "$rc"

  # A GPU test that skips for want of a device passes gtest but proves nothing here.
  begin "gpu_used"
  rc=0
  if [ -f "$out/gpu_test.xml" ]; then
    grep -m1 "<testsuites" "$out/gpu_test.xml" | sed 's/^ */   /'
    local no_gpu
    no_gpu=$(grep -c 'skipped message=.*no CUDA device' "$out/gpu_test.xml" || true)
    echo "   tests skipped for want of a CUDA device: $no_gpu"
    [ "$no_gpu" -eq 0 ] || rc=1
    grep -o 'skipped message="[^"]*"' "$out/gpu_test.xml" | sort | uniq -c | sed 's/^/   /' | head -n 20
  else
    echo "   no $out/gpu_test.xml"
    rc=1
  fi
  record gpu_used "$rc"

  local san
  san=$(sanitizer)
  begin "memcheck (${san:-compute-sanitizer not found})"
  rc=0
  if [ -z "$san" ] || [ ! -x "$test_bin" ]; then
    rc=1
  else
    timeout -k 10 "$memcheck_timeout" "$san" --tool memcheck --error-exitcode 86 --print-limit 50 \
      "$test_bin" --gtest_filter="${RZ_MEMCHECK_FILTER:-*}" \
      --gtest_output="xml:$out/gpu_test_memcheck.xml" || rc=$?
  fi
  record memcheck "$rc"

  begin "racecheck (filter '${racecheck_filter}')"
  rc=0
  if [ -z "$racecheck_filter" ]; then
    rc=200
  elif [ -z "$san" ] || [ ! -x "$test_bin" ]; then
    rc=1
  else
    timeout -k 10 "$racecheck_timeout" "$san" --tool racecheck --racecheck-report all \
      --error-exitcode 86 --print-limit 50 "$test_bin" --gtest_filter="$racecheck_filter" || rc=$?
  fi
  record racecheck "$rc"

  local fail=0 r
  for r in "${results[@]}"; do
    case "$r" in *=0 | *=200) ;; *) fail=1 ;; esac
  done
  echo "gpu_check summary: ${results[*]} => $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
  return $fail
}

main 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
echo "log: $log"
exit "$status"

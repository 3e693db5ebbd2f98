#!/usr/bin/env bash
# Builds the GPU test binary (and any other targets named) here, then bundles the stripped
# binaries and the non-system shared libraries they need into .bundle/ (git-ignored) so that the
# GPU machine, which has CUDA 13.0 but none of CAF, simdjson, PCRE2 or GoogleTest, can run them:
#   .bundle/bin/<target>   stripped executables
#   .bundle/lib/<soname>   shared libraries outside glibc, libstdc++/libgcc and CUDA
#   .bundle/MANIFEST       commit, targets, build dir, date
# CUDA's own libraries (cudart, cuBLAS, cuBLASLt, the driver) are never copied: the GPU machine
# has them in /usr/local/cuda/lib64 (scripts/gpu_check.sh puts that on LD_LIBRARY_PATH).
#
# Usage: scripts/gpu_bundle.sh [TARGET...]     (default: gpu_test; e.g. gpu_test rz cpu_test)
# Environment: RZ_GPU_BUILD_DIR (default build-gpu), RZ_BUILD_JOBS (default 1: the build
# machine's cores are shared).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${RZ_GPU_BUILD_DIR:-build-gpu}
jobs=${RZ_BUILD_JOBS:-1}
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(gpu_test)
bundle=$root/.bundle

# sm_90 machine code only (90-real): the GPU machine is an H100 or H200, and leaving out the PTX
# that CMake's plain "90" adds keeps three binaries within one call's 64 MiB carry.
echo "== configure $build (Release, CUDA sm_90)"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real >/dev/null
echo "== build ${targets[*]} (-j$jobs)"
cmake --build "$build" -j"$jobs" --target "${targets[@]}"

rm -rf "$bundle/bin" "$bundle/lib"
mkdir -p "$bundle/bin" "$bundle/lib"

# True for libraries the GPU machine provides itself: the loader, glibc, the GCC runtime, CUDA.
is_system_lib() {
  case "$1" in
    linux-vdso.so* | ld-linux*.so* | libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* \
      | libutil.so* | libresolv.so* | libstdc++.so* | libgcc_s.so* | libatomic.so*) return 0 ;;
    libcuda.so* | libcudart.so* | libcublas.so* | libcublasLt.so* | libnvrtc*.so* \
      | libnvJitLink.so* | libcufft*.so* | libcurand.so* | libcusparse.so* | libnvidia-*.so*) return 0 ;;
  esac
  return 1
}

missing=0
for t in "${targets[@]}"; do
  src=$build/$t
  if [ ! -x "$src" ]; then
    echo "gpu_bundle: $src was not built" >&2
    exit 1
  fi
  cp "$src" "$bundle/bin/$t"
  strip --strip-unneeded "$bundle/bin/$t"
  # ldd lists the whole dependency closure: "soname => path (addr)" or "soname => not found".
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    is_system_lib "$name" && continue
    case "$path" in /usr/local/cuda* | /opt/nvidia*) continue ;; esac
    if [ "$path" = "not" ]; then
      echo "gpu_bundle: $t needs $name, which ldd cannot find" >&2
      missing=1
      continue
    fi
    if [ ! -e "$bundle/lib/$name" ]; then
      cp -L "$path" "$bundle/lib/$name"   # under its soname, the name the loader looks for
      strip --strip-unneeded "$bundle/lib/$name" 2>/dev/null || true
    fi
  done < <(ldd "$src")
done
[ "$missing" -eq 0 ] || exit 1

{
  echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- 2>/dev/null || echo ' (with local changes)')"
  echo "targets ${targets[*]}"
  echo "build $build (Release, CMAKE_CUDA_ARCHITECTURES=90-real)"
  echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host $(uname -srm)"
} > "$bundle/MANIFEST"

echo "== bundle $bundle"
(cd "$bundle" && find bin lib -type f -printf '%s\t%p\n' | sort -k2 |
  awk -F'\t' '{ printf "  %8.1f MiB  %s\n", $1 / 1048576, $2 }')
total=$(du -scb "$bundle/bin" "$bundle/lib" "$bundle/MANIFEST" | tail -n 1 | cut -f1)
awk -v b="$total" 'BEGIN { printf "  total %.1f MiB (bin, lib, MANIFEST)\n", b / 1048576 }'
others=$(cd "$bundle" && ls -A | grep -v -x -e bin -e lib -e MANIFEST || true)
if [ -n "$others" ]; then
  echo "gpu_bundle: note: .bundle also holds entries this script did not make (carried with it):" >&2
  (cd "$bundle" && du -sh $others) | sed 's/^/    /' >&2
fi
# The GPU machine receives .bundle as a carried path: 64 MiB in all, with the rest of the carry.
all=$(du -sb "$bundle" | cut -f1)
if [ "$all" -gt $((60 * 1024 * 1024)) ]; then
  echo "gpu_bundle: WARNING: .bundle is $((all / 1048576)) MiB; the carry limit is 64 MiB in all" >&2
fi

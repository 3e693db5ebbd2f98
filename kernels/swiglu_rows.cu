// SwiGLU-over-fused-rows kernel (see swiglu_rows.hpp). A 2-D grid: columns in grid.x, rows in
// grid.y (rows beyond 65535 loop). When n_ff is a multiple of 4 and both pointers are 16-byte
// aligned, each thread handles 4 consecutive columns with float4 loads and stores; otherwise one
// column. The per-element arithmetic is swiglu.cu's.
#include "kernels/launch.cuh"
#include "kernels/swiglu_rows.hpp"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda_check.hpp"

namespace rz::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxGridY = 65535;

__device__ __forceinline__ float swiglu1(float g, float u) {
  const float silu = __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));
  return __fmul_rn(silu, u);
}

// grid (ceil(n_ff / (V * kThreads)), min(n_rows, 65535)); V floats per thread (1 or 4)
template <int V>
__global__ void swiglu_rows_kernel(const float* __restrict__ gu, float* __restrict__ out,
                                   int64_t n_rows, int64_t n_ff) {
  grid_dependency_sync();
  const int64_t j = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (j >= n_ff) return;
  for (int64_t r = blockIdx.y; r < n_rows; r += gridDim.y) {
    const float* g = gu + r * 2 * n_ff + j;
    const float* u = g + n_ff;
    float* o = out + r * n_ff + j;
    if constexpr (V == 4) {  // n_ff % 4 == 0 and 16-byte aligned bases: j + 3 < n_ff, aligned
      const float4 gv = *reinterpret_cast<const float4*>(g);
      const float4 uv = *reinterpret_cast<const float4*>(u);
      float4 ov;
      ov.x = swiglu1(gv.x, uv.x);
      ov.y = swiglu1(gv.y, uv.y);
      ov.z = swiglu1(gv.z, uv.z);
      ov.w = swiglu1(gv.w, uv.w);
      *reinterpret_cast<float4*>(o) = ov;
    } else {
      *o = swiglu1(*g, *u);
    }
  }
}

}  // namespace

void swiglu_rows(const float* gu, float* out, int64_t n_rows, int64_t n_ff, cudaStream_t stream) {
  if (n_rows < 0 || n_ff <= 0)
    throw Error("swiglu_rows: bad shape [" + std::to_string(n_rows) + ", " + std::to_string(n_ff) +
                "]");
  if (n_rows == 0) return;
  if (!gu || !out) throw Error("swiglu_rows: null pointer");
  const bool vec = n_ff % 4 == 0 && reinterpret_cast<uintptr_t>(gu) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const int64_t per_block = int64_t(kThreads) * (vec ? 4 : 1);
  const int64_t gx = (n_ff + per_block - 1) / per_block;
  if (gx > 0x7fffffff)
    throw Error("swiglu_rows: row of " + std::to_string(n_ff) + " elements is too long");
  const dim3 grid(static_cast<unsigned>(gx),
                  static_cast<unsigned>(n_rows < kMaxGridY ? n_rows : kMaxGridY));
  if (vec)
    launch_kernel(swiglu_rows_kernel<4>, grid, kThreads, 0, stream, gu, out, n_rows, n_ff);
  else
    launch_kernel(swiglu_rows_kernel<1>, grid, kThreads, 0, stream, gu, out, n_rows, n_ff);
  RZ_CUDA_CHECK_LAUNCH("swiglu_rows_kernel");
}

}  // namespace rz::gpu

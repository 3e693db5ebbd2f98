// RMSNorm kernel (see rmsnorm.hpp): one thread block per row. Pass 1: each thread sums the
// squares of a strided slice of the row; a warp-shuffle plus shared-memory tree reduces them.
// Pass 2: each thread scales the same slice. In place is safe: a thread reads and writes only its
// own elements, and every pass-1 read finishes before the barrier in the reduction.
#include "kernels/rmsnorm.hpp"

#include <cuda_runtime.h>

#include <string>

#include "gpu/cuda_check.hpp"

namespace rz::gpu {
namespace {

// Sum of v over the block; blockDim.x is a multiple of 32, at most 1024. Every thread gets the sum.
__device__ float block_sum(float v) {
  __shared__ float warp_sums[32];
  __shared__ float total;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
  for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < n_warps ? warp_sums[lane] : 0.0f;
    for (int off = 16; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off);
    if (lane == 0) total = s;
  }
  __syncthreads();
  return total;
}

// grid (n_rows); x and y may alias, so no __restrict__ on them
__global__ void rms_norm_kernel(const float* x, const float* __restrict__ w, float* y, int n,
                                float eps) {
  const size_t row = static_cast<size_t>(blockIdx.x) * n;
  const float* xr = x + row;
  float* yr = y + row;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss = __fmaf_rn(xr[i], xr[i], ss);
  ss = block_sum(ss);
  const float scale = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = __fmul_rn(__fmul_rn(xr[i], scale), w[i]);
}

}  // namespace

void rms_norm(const float* x, const float* w, float* y, int n_rows, int n, float eps,
              cudaStream_t stream) {
  if (n <= 0 || n_rows < 0)
    throw Error("rms_norm: bad shape [" + std::to_string(n_rows) + ", " + std::to_string(n) + "]");
  if (!(eps >= 0.0f)) throw Error("rms_norm: eps must be >= 0");
  if (n_rows == 0) return;
  if (!x || !w || !y) throw Error("rms_norm: null pointer");
  const int threads = n > 4096 ? 1024 : n > 1024 ? 512 : n > 256 ? 256 : 128;
  rms_norm_kernel<<<static_cast<unsigned>(n_rows), threads, 0, stream>>>(x, w, y, n, eps);
  RZ_CUDA_CHECK_LAUNCH("rms_norm_kernel");
}

}  // namespace rz::gpu

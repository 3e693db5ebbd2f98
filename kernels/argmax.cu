// Row argmax kernel (see argmax.hpp): one thread block per row. Each thread scans a strided slice
// keeping (value, index) with NaN read as -inf; the pairs are combined by "larger value, then
// lower index" through warp shuffles and a shared-memory stage. That order is total on the
// mapped values, so the result is the lowest index of the row's maximum whatever the reduction
// order; with nothing above -inf it is the lowest index of all, 0, as the CPU's argmax.
#include "kernels/argmax.hpp"

#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "gpu/cuda_check.hpp"

namespace rz::gpu {
namespace {

constexpr int kNoIndex = 0x7fffffff;  // loses every tie to a real index

__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

// grid (n_rows); blockDim.x a multiple of 32, at most 1024
__global__ void argmax_kernel(const float* __restrict__ logits, int n_vocab,
                              int32_t* __restrict__ out) {
  __shared__ float warp_v[32];
  __shared__ int warp_i[32];
  const float* row = logits + static_cast<size_t>(blockIdx.x) * n_vocab;
  float bv = -INFINITY;
  int bi = kNoIndex;
  for (int i = threadIdx.x; i < n_vocab; i += blockDim.x) {
    float v = row[i];
    if (isnan(v)) v = -INFINITY;
    if (better(v, i, bv, bi)) {
      bv = v;
      bi = i;
    }
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
  for (int off = 16; off > 0; off /= 2) {
    const float ov = __shfl_down_sync(0xffffffffu, bv, off);
    const int oi = __shfl_down_sync(0xffffffffu, bi, off);
    if (better(ov, oi, bv, bi)) {
      bv = ov;
      bi = oi;
    }
  }
  if (lane == 0) {
    warp_v[warp] = bv;
    warp_i[warp] = bi;
  }
  __syncthreads();
  if (warp == 0) {
    bv = lane < n_warps ? warp_v[lane] : -INFINITY;
    bi = lane < n_warps ? warp_i[lane] : kNoIndex;
    for (int off = 16; off > 0; off /= 2) {
      const float ov = __shfl_down_sync(0xffffffffu, bv, off);
      const int oi = __shfl_down_sync(0xffffffffu, bi, off);
      if (better(ov, oi, bv, bi)) {
        bv = ov;
        bi = oi;
      }
    }
    if (lane == 0) out[blockIdx.x] = bi == kNoIndex ? 0 : bi;
  }
}

}  // namespace

void argmax_rows(const float* logits, int n_rows, int n_vocab, int32_t* out, cudaStream_t stream) {
  if (n_vocab <= 0 || n_rows < 0)
    throw Error("argmax_rows: bad shape [" + std::to_string(n_rows) + ", " + std::to_string(n_vocab) + "]");
  if (n_rows == 0) return;
  if (!logits || !out) throw Error("argmax_rows: null pointer");
  const int threads = n_vocab >= 1024 ? 1024 : ((n_vocab + 31) / 32) * 32;
  argmax_kernel<<<static_cast<unsigned>(n_rows), threads, 0, stream>>>(logits, n_vocab, out);
  RZ_CUDA_CHECK_LAUNCH("argmax_kernel");
}

}  // namespace rz::gpu

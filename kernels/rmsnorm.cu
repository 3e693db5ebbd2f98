// RMSNorm, alone (rmsnorm.hpp) or fused with the residual add before it (add_rmsnorm.hpp): one
// kernel serves both, so the fused form is bit-identical to the two separate steps by
// construction. One thread block per row, each thread owning the elements
// i = threadIdx.x + k * blockDim.x: pass 1 adds y into x when there is a y (writing the sum back)
// and accumulates the squares with an fma chain; block_sum (kernels/cuda_common.cuh) reduces them;
// pass 2 re-reads the thread's own elements and scales them. A thread reads and writes only its
// own elements, so in place (out == x) is safe.
#include "kernels/add_rmsnorm.hpp"
#include "kernels/launch.cuh"
#include "kernels/rmsnorm.hpp"

#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda_common.cuh"

namespace rz::gpu {
namespace {

// grid (n_rows); x and out may alias, so no __restrict__ on them; y may be null (then x is only
// read)
__global__ void add_rms_norm_kernel(float* x, const float* y, const float* __restrict__ w,
                                    float* out, int n, float eps) {
  grid_dependency_sync();
  const size_t row = static_cast<size_t>(blockIdx.x) * n;
  float* xr = x + row;
  float* outr = out + row;
  float ss = 0.0f;
  if (y) {
    const float* yr = y + row;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const float v = __fadd_rn(xr[i], yr[i]);
      xr[i] = v;
      ss = __fmaf_rn(v, v, ss);
    }
  } else {
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss = __fmaf_rn(xr[i], xr[i], ss);
  }
  ss = block_sum(ss);
  const float scale = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    outr[i] = __fmul_rn(__fmul_rn(xr[i], scale), w[i]);
}

int block_threads(int n) { return n > 4096 ? 1024 : n > 1024 ? 512 : n > 256 ? 256 : 128; }

}  // namespace

void rms_norm(const float* x, const float* w, float* y, int n_rows, int n, float eps,
              cudaStream_t stream) {
  if (n <= 0 || n_rows < 0)
    throw Error("rms_norm: bad shape [" + std::to_string(n_rows) + ", " + std::to_string(n) + "]");
  if (!(eps >= 0.0f)) throw Error("rms_norm: eps must be >= 0");
  if (n_rows == 0) return;
  if (!x || !w || !y) throw Error("rms_norm: null pointer");
  // Without a y the kernel never writes x.
  launch_kernel(add_rms_norm_kernel, static_cast<unsigned>(n_rows), block_threads(n), 0, stream,
                const_cast<float*>(x), nullptr, w, y, n, eps);
  RZ_CUDA_CHECK_LAUNCH("rms_norm (add_rms_norm_kernel)");
}

void add_rms_norm(float* x, const float* y, const float* w, float* out, int n_rows, int n,
                  float eps, cudaStream_t stream) {
  if (n <= 0 || n_rows < 0)
    throw Error("add_rms_norm: bad shape [" + std::to_string(n_rows) + ", " + std::to_string(n) +
                "]");
  if (!(eps >= 0.0f)) throw Error("add_rms_norm: eps must be >= 0");
  if (n_rows == 0) return;
  if (!x || !w || !out) throw Error("add_rms_norm: null pointer");
  launch_kernel(add_rms_norm_kernel, static_cast<unsigned>(n_rows), block_threads(n), 0, stream, x,
                y, w, out, n, eps);
  RZ_CUDA_CHECK_LAUNCH("add_rms_norm_kernel");
}

}  // namespace rz::gpu

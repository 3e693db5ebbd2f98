// Bias add kernel (see bias.hpp): one thread per element of a 2-D grid, rows in grid.y.
#include "kernels/bias.hpp"
#include "kernels/launch.cuh"

#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda_check.hpp"

namespace rz::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxGridY = 65535;

// grid (ceil(n / kThreads), min(n_rows, 65535)); rows beyond grid.y loop
__global__ void bias_add_kernel(float* __restrict__ x, const float* __restrict__ bias,
                                int64_t n_rows, int64_t n, int64_t stride) {
  grid_dependency_sync();
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= n) return;
  const float b = bias[j];
  for (int64_t r = blockIdx.y; r < n_rows; r += gridDim.y) {
    float* p = x + r * stride + j;
    *p = __fadd_rn(*p, b);
  }
}

}  // namespace

void bias_add(float* x, const float* bias, int64_t n_rows, int64_t n, cudaStream_t stream,
              int64_t row_stride) {
  const int64_t stride = row_stride ? row_stride : n;
  if (n <= 0 || n_rows < 0 || stride < n)
    throw Error("bias_add: bad shape [" + std::to_string(n_rows) + ", " + std::to_string(n) +
                "] with row stride " + std::to_string(stride));
  if (n_rows == 0) return;
  if (!x || !bias) throw Error("bias_add: null pointer");
  const int64_t gx = (n + kThreads - 1) / kThreads;
  if (gx > 0x7fffffff)
    throw Error("bias_add: row of " + std::to_string(n) + " elements is too long");
  const dim3 grid(static_cast<unsigned>(gx),
                  static_cast<unsigned>(n_rows < kMaxGridY ? n_rows : kMaxGridY));
  launch_kernel(bias_add_kernel, grid, kThreads, 0, stream, x, bias, n_rows, n, stride);
  RZ_CUDA_CHECK_LAUNCH("bias_add_kernel");
}

}  // namespace rz::gpu

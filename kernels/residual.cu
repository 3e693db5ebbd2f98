// Residual add kernel (see residual.hpp): a grid-stride loop, one element per thread per
// iteration. Not __restrict__: y == x is allowed.
#include "kernels/launch.cuh"
#include "kernels/residual.hpp"

#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda_check.hpp"

namespace rz::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;  // 1M threads: several waves on any GPU; longer arrays loop

__global__ void residual_add_kernel(float* x, const float* y, int64_t n) {
  grid_dependency_sync();
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    x[i] = __fadd_rn(x[i], y[i]);
}

}  // namespace

void residual_add(float* x, const float* y, int64_t n, cudaStream_t stream) {
  if (n < 0) throw Error("residual_add: negative length " + std::to_string(n));
  if (n == 0) return;
  if (!x || !y) throw Error("residual_add: null pointer");
  const int64_t blocks_needed = (n + kThreads - 1) / kThreads;
  const int64_t blocks = blocks_needed < kMaxBlocks ? blocks_needed : kMaxBlocks;
  launch_kernel(residual_add_kernel, static_cast<unsigned>(blocks), kThreads, 0, stream, x, y, n);
  RZ_CUDA_CHECK_LAUNCH("residual_add_kernel");
}

}  // namespace rz::gpu

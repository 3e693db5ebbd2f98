// Soft-capping kernel (see softcap.hpp): a grid-stride loop, one element per thread per iteration.
#include "kernels/launch.cuh"
#include "kernels/softcap.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "kernels/cuda_check.hpp"

namespace rz::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

__global__ void softcap_kernel(float* __restrict__ x, int64_t n, float cap) {
  grid_dependency_sync();
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    x[i] = __fmul_rn(cap, tanhf(__fdiv_rn(x[i], cap)));
}

}  // namespace

void softcap(float* x, int64_t n, float cap, cudaStream_t stream) {
  if (n < 0) throw Error("softcap: negative length " + std::to_string(n));
  if (!(cap > 0.0f)) throw Error("softcap: cap must be positive");
  if (n == 0) return;
  if (!x) throw Error("softcap: null pointer");
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks);
  launch_kernel(softcap_kernel, static_cast<unsigned>(blocks), kThreads, 0, stream, x, n, cap);
  RZ_CUDA_CHECK_LAUNCH("softcap_kernel");
}

}  // namespace rz::gpu

// SwiGLU kernel (see swiglu.hpp): a grid-stride loop, one element per thread per iteration.
// out may alias gate or up (each element is read before it is written, by the same thread), so
// the pointers are not __restrict__.
#include "kernels/launch.cuh"
#include "kernels/swiglu.hpp"

#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda_check.hpp"
#include "kernels/gate_act.cuh"

namespace rz::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;  // 1M threads: several waves on any GPU; longer arrays loop

__global__ void swiglu_kernel(const float* gate, const float* up, float* out, int64_t n,
                              GateAct act) {
  grid_dependency_sync();
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    out[i] = gate_act(act, gate[i], up[i]);
  }
}

}  // namespace

void swiglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream,
            GateAct act) {
  if (n < 0) throw Error("swiglu: negative length " + std::to_string(n));
  if (n == 0) return;
  if (!gate || !up || !out) throw Error("swiglu: null pointer");
  const int64_t blocks_needed = (n + kThreads - 1) / kThreads;
  const int64_t blocks = blocks_needed < kMaxBlocks ? blocks_needed : kMaxBlocks;
  launch_kernel(swiglu_kernel, static_cast<unsigned>(blocks), kThreads, 0, stream, gate, up, out, n,
                act);
  RZ_CUDA_CHECK_LAUNCH("swiglu_kernel");
}

}  // namespace rz::gpu

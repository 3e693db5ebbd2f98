// Checked CUDA runtime calls and kernel launches for kernels/ (and, through gpu/cuda_check.hpp,
// for gpu/). A failure becomes an rz::gpu::CudaError (an rz::Error) naming the call, the
// file:line and the runtime's message, which fails the step that made it (the actors fail the
// affected requests and keep serving), never a crash or a silent wrong answer. The cuBLAS checks
// live in gpu/cuda_check.hpp: kernels/ does not use cuBLAS.
#pragma once
#include <cuda_runtime_api.h>

#include <string>

#include "formats/common.hpp"

namespace rz::gpu {

class CudaError : public rz::Error {
 public:
  using rz::Error::Error;
};

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* what, const char* file, int line) {
  throw CudaError(std::string(what) + " failed at " + file + ":" + std::to_string(line) + ": " +
                  cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

// Multiprocessors of the current device, queried once (the first call) and cached: the executor
// runs one device per process. For the kernels' launch-shape choices (gemv's split rows, qmm's
// K splits). cudaDeviceGetAttribute is no stream operation, so it is safe while a stream is being
// captured.
int device_sm_count();
// Whether the current device launches thread-block clusters (sm_90 and later), queried once.
bool device_supports_clusters();

}  // namespace rz::gpu

#define RZ_CUDA_CHECK(expr)                                           \
  do {                                                                \
    cudaError_t rz_cuda_err_ = (expr);                                \
    if (rz_cuda_err_ != cudaSuccess)                                  \
      ::rz::gpu::throw_cuda(rz_cuda_err_, #expr, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: configuration errors show up in cudaGetLastError.
#define RZ_CUDA_CHECK_LAUNCH(name)                                                \
  do {                                                                            \
    cudaError_t rz_cuda_err_ = cudaGetLastError();                                \
    if (rz_cuda_err_ != cudaSuccess)                                              \
      ::rz::gpu::throw_cuda(rz_cuda_err_, "launch of " name, __FILE__, __LINE__); \
  } while (0)

// Checked CUDA / cuBLAS calls. Every runtime, cuBLAS and cuBLASLt call goes through these: a
// failure becomes an rz::gpu::CudaError (an rz::Error) naming the call, the file:line and the
// runtime's message, which fails the step that made it (the actors fail the affected requests
// and keep serving), never a crash or a silent wrong answer. The runtime and launch checks
// (CudaError, RZ_CUDA_CHECK, RZ_CUDA_CHECK_LAUNCH) come from kernels/cuda_check.hpp, which the
// kernels use too; this header adds cuBLAS.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>

#include <string>

#include "kernels/cuda_check.hpp"

namespace rz::gpu {

[[noreturn]] inline void throw_cublas(cublasStatus_t s, const char* what, const char* file,
                                      int line) {
  throw CudaError(std::string(what) + " failed at " + file + ":" + std::to_string(line) +
                  ": cuBLAS status " + std::to_string(static_cast<int>(s)) + " (" +
                  cublasGetStatusString(s) + ")");
}

}  // namespace rz::gpu

#define RZ_CUBLAS_CHECK(expr)                                            \
  do {                                                                   \
    cublasStatus_t rz_cublas_st_ = (expr);                               \
    if (rz_cublas_st_ != CUBLAS_STATUS_SUCCESS)                          \
      ::rz::gpu::throw_cublas(rz_cublas_st_, #expr, __FILE__, __LINE__); \
  } while (0)

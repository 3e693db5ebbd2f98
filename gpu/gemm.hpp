// Dense GEMM for prefill and large batches: Y = X · Wᵀ through cuBLAS, with 16-bit operands
// (FP16 or BF16, e.g. weights dequantized by kernels/dequant.hpp) and FP32 output and
// accumulation (CUBLAS_COMPUTE_32F). One Gemm owns a cuBLAS handle bound to one stream, its
// workspace and a scratch buffer for converting fp32 activations; it is not thread-safe (one
// owner, the executor's stream).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "gpu/device_buffer.hpp"
#include "kernels/dequant.hpp"

namespace rz::gpu {

class Gemm {
 public:
  static constexpr size_t kDefaultWorkspaceBytes = size_t{32} << 20;  // cuBLAS' advice for Hopper

  // Creates the handle on the current device and binds it to `stream` (all work is queued there).
  explicit Gemm(cudaStream_t stream, size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  cudaStream_t stream() const { return stream_; }

  // Y = X · Wᵀ, asynchronous on stream():
  //   w: device [rows, cols] of `type`, row-major (row stride cols)
  //   x: device [n_tokens, cols] fp32, row-major; rounded to `type` (nearest even) into this
  //      object's scratch first (grown on demand: growing synchronizes the stream)
  //   y: device [n_tokens, rows] fp32, row-major; fully overwritten (never read)
  // Throws rz::Error for rows or cols < 1, n_tokens < 0, any dimension > INT_MAX or null
  // pointers; n_tokens == 0 does nothing. cuBLAS / CUDA failures as rz::gpu::CudaError.
  void matmul(HalfType type, const void* w, const float* x, float* y, int64_t rows, int64_t cols,
              int64_t n_tokens);

  // The same with x already in `type`: device [n_tokens, cols] 16-bit, row-major.
  // Y = X · Wᵀ with fp32 weights and activations, FP32 math (cublasSgemm, no TF32): for models
  // whose weights are stored in F32, so that they run at full precision.
  void matmul_f32(const float* w, const float* x, float* y, int64_t rows, int64_t cols,
                  int64_t n_tokens);
  // ldy: floats between consecutive tokens' rows of y (0: rows), so that a slice of W's rows can
  // write its columns of a wider Y.
  void matmul_x16(HalfType type, const void* w, const void* x16, float* y, int64_t rows,
                  int64_t cols, int64_t n_tokens, int64_t ldy = 0);

 private:
  cublasHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer<uint8_t> workspace_;
  DeviceBuffer<uint16_t> x16_;  // [n_tokens, cols] scratch for matmul's converted activations
};

}  // namespace rz::gpu

// Matrix-vector products on quantized weights (decode-time linear layers):
//   y[b, r] = sum_c W[r, c] * x[b, c]     for b < batch (1..16), r < rows, c < cols
// W stays in its GGUF format on the device (row-major: each row is cols / block_size blocks,
// layouts in quants/quant_blocks.hpp, values exactly as quants/quants.cpp's dequantize_row
// defines them); x and y are fp32. Every weight byte is read once per call, whatever the batch.
// Kernels: kernels/gemv_common.cuh (the one generic kernel), kernels/gemv_{q4k_q5k,q6k,q2k_q3k,
// iq4xs,legacy,half}.cu (per-type traits), kernels/gemv.cu (chooser and dispatch). Design notes:
// kernels/GEMV.md.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "formats/ggml_types.hpp"

namespace rz::gpu {

constexpr int kGemvMaxBatch = 16;

// Which kernel family serves a weight type; none = not supported on the GPU.
enum class GemvKernel : uint8_t {
  none,
  q4_k,
  q6_k,
  q8_0,
  q4_0,
  q4_1,
  f16,
  bf16,
  q5_0,
  q5_1,
  q5_k,
  q2_k,
  q3_k,
  iq4_nl,
  iq4_xs
};

// The chooser: the kernel for (type, batch), or none when the type has no GPU kernel or batch is
// outside 1..kGemvMaxBatch. Answers "is this supported?" and drives gemv()'s dispatch.
GemvKernel gemv_supported(GgmlType type, int batch);

// cols must be a multiple of this for `type` (the GGUF block size; 8 for F16/BF16, whose kernels
// read 16 bytes at a time). 0 when the type is not supported.
int gemv_cols_multiple(GgmlType type);

// Launches y = W x on `stream` (asynchronous).
//   w: [rows, cols] in `type`'s blocks, rows * row_size(type, cols) bytes, 16-byte aligned
//   x: [batch, cols] fp32, row stride cols, 16-byte aligned
//   y: [batch, rows] fp32, row stride rows
// Throws rz::Error for an unsupported type or batch, cols not a multiple of gemv_cols_multiple,
// rows or cols out of range, or misaligned pointers; launch failures as rz::gpu::CudaError.
void gemv(GgmlType type, const void* w, const float* x, float* y, int64_t rows, int64_t cols,
          int batch, cudaStream_t stream);

// The same for FP8 rows (kernels/fp8.hpp): y[b, r] = row_scale[r] * sum_c e4m3(W[r, c]) x[b, c],
// w [rows, cols] E4M3 codes (cols a multiple of 16), row_scale [rows] fp32; the same checks.
void gemv_fp8(const uint8_t* w, const float* row_scale, const float* x, float* y, int64_t rows,
              int64_t cols, int batch, cudaStream_t stream);

}  // namespace rz::gpu

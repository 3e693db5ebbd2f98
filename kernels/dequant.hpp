// Whole-matrix dequantization on the GPU for the prefill / large-batch path: a weight matrix
// [rows, cols] in its GGUF format (row-major, each row cols / block_size blocks, layouts in
// quants/quant_blocks.hpp) becomes a row-major FP16 or BF16 buffer [rows, cols] that
// gpu/gemm.hpp hands to cuBLAS.
//
// Semantics: element for element, quants/quants.cpp's dequantize_row (each float32 product and
// sum rounded separately, as numpy does it: no fused multiply-adds) followed by
// fp32_to_fp16 / fp32_to_bf16 (round to nearest even, overflow to inf). The result is
// bit-identical to that CPU path for every finite or infinite value; for F32 / F16 / BF16
// sources NaNs are bit-identical too (payload rules of quants/quants_fp.cpp). A NaN produced by
// arithmetic on a NaN/inf block scale stays a NaN but its payload may differ from the CPU's.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "formats/ggml_types.hpp"

namespace rz::gpu {

// The 16-bit element type of a dequantized buffer (and of the GEMM operands).
enum class HalfType : uint8_t { f16, bf16 };

// True for the types dequantize_matrix handles: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_0, Q4_0, Q4_1,
// Q5_0, Q5_1, IQ4_NL, IQ4_XS, F16, BF16, F32.
bool dequant_supported(GgmlType type);

// cols must be a multiple of this for `type`: the GGUF block size (256 for the K types, 32 for
// Q8_0/Q4_0/Q4_1/Q5_0/Q5_1) and 8 for the plain types (their kernel moves 16 bytes at a time).
// 0 when the type is not supported.
int dequant_cols_multiple(GgmlType type);

// Launches out = dequantize(w) on `stream` (asynchronous).
//   w:   device, rows * row_size(type, cols) bytes, 16-byte aligned
//   out: device [rows, cols] of `out_type` (2 bytes each), row stride cols, 16-byte aligned
// Throws rz::Error for an unsupported type, rows < 0, cols < 1, cols not a multiple of
// dequant_cols_multiple, rows * cols >= 2^40, or misaligned / null pointers (all checked before
// any CUDA call); rows == 0 launches nothing. Launch failures as rz::gpu::CudaError.
void dequantize_matrix(GgmlType type, const void* w, void* out, HalfType out_type, int64_t rows,
                       int64_t cols, cudaStream_t stream);

// Launches y[i] = round(x[i]) to `out_type` for i < n (the GEMM's activation conversion; same
// rounding as dequantize_matrix of F32, but with no alignment or multiple-of-8 requirement).
// Throws rz::Error for n < 0 or null pointers; n == 0 launches nothing.
void convert_to_half(const float* x, void* y, HalfType out_type, int64_t n, cudaStream_t stream);

}  // namespace rz::gpu

// Matrix-vector products on quantized weights with 8-bit activations (decode at 1-4 tokens):
//   y[b, r] = sum_c W[r, c] * xq[b, c]     for b < batch (1..kGemvQ8MaxBatch)
// where xq is x quantized per 32 consecutive elements (quantize_x_q8): q = round(x / d) in
// int8, d = max|x| / 127 of the group, the idea of GGUF's Q8_1 activations. The weights stay in
// their GGUF blocks (Q4_K, Q6_K, Q8_0, Q4_0, Q4_1); products of weight quants and activation
// quants are integer dot products (dp4a, four byte pairs per instruction), scaled per block in
// fp32. Every weight byte is read once per call. Compared with kernels/gemv.hpp (fp32 x, four
// instructions per weight element) this does about one instruction per element, which is what
// lets 4-bit weights stream at memory speed; the price is x rounded to 8 bits per 32 elements
// (relative error up to 1/254 of the group's largest |x| per element). Design and measurements:
// kernels/GEMV.md ("int8 activations").
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "formats/ggml_types.hpp"

namespace rz::gpu {

constexpr int kGemvQ8MaxBatch = 4;
constexpr int kQ8Group = 32;  // activation elements per scale

// True when gemv_q8 runs `type` at this batch: Q4_K, Q6_K, Q8_0, Q4_0, Q4_1, batch
// 1..kGemvQ8MaxBatch (cols must then be a multiple of the type's block size).
bool gemv_q8_supported(GgmlType type, int batch);

// Bytes of the quantized activations for n rows of cols (cols a multiple of kQ8Group): n * cols
// int8 quants, then n * cols / kQ8Group float pairs {d, d * sum of the group's quants}; the pairs
// start 16-byte aligned. quantize_x_q8 writes this layout into one buffer.
size_t q8_activation_bytes(int64_t n, int64_t cols);

// xq = x quantized per group of 32 (round to nearest even of x / d, d = max|x| / 127; a group of
// zeros has d = 0 and zero quants).
//   x:  device [n, cols] fp32, 16-byte aligned; cols a positive multiple of kQ8Group
//   xq: device, q8_activation_bytes(n, cols) bytes, 16-byte aligned
void quantize_x_q8(const float* x, void* xq, int64_t n, int64_t cols, cudaStream_t stream);

// Launches y = W xq on `stream` (asynchronous).
//   w:  [rows, cols] in `type`'s blocks, 16-byte aligned
//   xq: quantize_x_q8's output for these batch rows and cols
//   y:  [batch, rows] fp32
// Throws rz::Error for an unsupported type or batch, bad shapes or misaligned pointers.
void gemv_q8(GgmlType type, const void* w, const void* xq, float* y, int64_t rows, int64_t cols,
             int batch, cudaStream_t stream);

}  // namespace rz::gpu

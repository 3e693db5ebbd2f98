// Matrix products of the CPU executor: y = W·x for a batch of fp32 activation rows, with W left
// in its quantized format in the mapped file and dequantized block by block inside the dot
// product. Every weight row is read once per call for all tokens of the step (AVX2/FMA kernels
// for F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K; any other dequantizable type goes through
// dequantize_row into a per-thread scratch row).
#pragma once
#include <cstdint>
#include <span>

#include "formats/tensor.hpp"

namespace rz {

class ThreadPool;

// One product of a step: for t < n_tok and r < w->rows(): y[t * y_stride + r] = W[r] · x[t].
struct MatmulJob {
  const TensorView* w = nullptr;  // [rows][cols] (GGUF ne = {cols, rows})
  const float* x = nullptr;       // [n_tok][cols] fp32
  float* y = nullptr;             // [n_tok][y_stride] fp32, y_stride >= rows
  int64_t y_stride = 0;
};

// True when `t` has a fused SIMD kernel (others use the generic dequantize_row path).
bool matmul_has_fast_path(GgmlType t);
// True when `t` can be multiplied at all (fast path or dequantize_row).
bool matmul_supports(GgmlType t);

// Runs the jobs (they may differ in shape and type) as one parallel dispatch over the rows of
// all of them.
void matmul(ThreadPool& pool, std::span<const MatmulJob> jobs, int n_tok);

// Single-threaded: rows [r0, r1) of one job. `force_generic` takes the dequantize_row path
// even where a fast kernel exists (tests compare the two).
void matmul_rows(const MatmulJob& job, int n_tok, int64_t r0, int64_t r1,
                 bool force_generic = false);

}  // namespace rz

// Bias add on the GPU: broadcasts a bias vector over token rows (the Q/K/V projection biases of
// qwen2-style models, after the QKV matmul and before RoPE). Exact fp32 adds, as the CPU executor.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace rz::gpu {

// x[t, j] += bias[j]  for t < n_rows, j < n
//   x: device [n_rows, row_stride] fp32 (row_stride 0: dense, n); bias: device [n] fp32.
// A fused QKV row takes one call with the concatenated [bq | bk | bv] bias.
// Throws rz::Error for n <= 0, n_rows < 0 or row_stride < n (when given); n_rows == 0 launches
// nothing.
void bias_add(float* x, const float* bias, int64_t n_rows, int64_t n, cudaStream_t stream,
              int64_t row_stride = 0);

}  // namespace rz::gpu

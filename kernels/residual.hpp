// Residual add on the GPU: the skip connections after attention and after the feed-forward
// block. x += y elementwise, exact fp32 adds as the CPU executor does them.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace rz::gpu {

// x: device [n] fp32, updated in place (n = n_tokens * n_embd); y: device [n] fp32, must not
// overlap x unless y == x (x = 2x). Throws rz::Error for n < 0; n == 0 launches nothing.
void residual_add(float* x, const float* y, int64_t n, cudaStream_t stream);

}  // namespace rz::gpu

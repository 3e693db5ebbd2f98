// RMSNorm on the GPU, per token row (before attention, before the feed-forward block, and before
// the output matrix): y = x / sqrt(mean(x^2) + eps) * w, as cpu/cpu_ops.cpp's rms_norm.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/act_forms.hpp"

namespace rz::gpu {

// x, y: device [n_rows, n] fp32 (y may alias x: in place is fine); w: device [n] fp32.
// The sum of squares is accumulated in fp32 by one thread block per row (tree reduction); the
// scale is 1 / sqrtf(ss / n + eps) (correctly rounded sqrt and division), then (x * scale) * w,
// each product rounded separately. Throws rz::Error for n <= 0 or n_rows < 0; n_rows == 0 launches
// nothing.
// forms: the matmul input forms to write beside y (kernels/act_forms.hpp; rz::Error when n or
// the pointers do not allow them).
void rms_norm(const float* x, const float* w, float* y, int n_rows, int n, float eps,
              cudaStream_t stream, const ActForms& forms = {});

// RMSNorm of each head of token rows, in place (qwen3's q and k heads before RoPE): the n_heads
// vectors x + t * token_stride + h * head_dim (t < n_tokens) each become
// x / sqrt(mean(x^2) + eps) * w, w: device [head_dim] fp32; the same arithmetic as rms_norm.
// Throws rz::Error for a bad shape (token_stride < n_heads * head_dim); n_tokens == 0 launches
// nothing.
void rms_norm_heads(float* x, const float* w, int n_tokens, int n_heads, int head_dim,
                    int64_t token_stride, float eps, cudaStream_t stream);

}  // namespace rz::gpu

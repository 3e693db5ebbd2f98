// RMSNorm on the GPU, per token row (before attention, before the feed-forward block, and before
// the output matrix): y = x / sqrt(mean(x^2) + eps) * w, as cpu/cpu_ops.cpp's rms_norm.
#pragma once
#include <cuda_runtime_api.h>

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

}  // namespace rz::gpu

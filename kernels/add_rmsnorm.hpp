// Fused residual add + RMSNorm on the GPU: the skip connection after attention (or after the
// feed-forward block) followed by the next RMSNorm, in one launch instead of two. Bit-identical
// to residual_add (kernels/residual.hpp) followed by rms_norm (kernels/rmsnorm.hpp).
#pragma once
#include <cuda_runtime_api.h>

#include "kernels/act_forms.hpp"

namespace rz::gpu {

// For each row r < n_rows:
//   x[r] += y[r]                                 (in place, one fp32 add per element)
//   out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w (after the add; as rms_norm computes it)
// x: device [n_rows, n] fp32, updated; y: device [n_rows, n] fp32 or null (then x is left as it
// is and this is plain rms_norm). y must not overlap x. w: device [n] fp32.
// out: device [n_rows, n] fp32; may alias x (then x holds the normalized rows, the sum is lost),
// must not overlap y or w otherwise.
// Same block size, thread-to-element assignment and reduction tree as rms_norm, so the sum of
// squares and every output are bit-identical to the two unfused kernels.
// Throws rz::Error for n <= 0, n_rows < 0, eps < 0 or NaN, or a null x / w / out; n_rows == 0
// launches nothing.
// forms: the matmul input forms of out to write beside it (kernels/act_forms.hpp; rz::Error when
// n or the pointers do not allow them).
void add_rms_norm(float* x, const float* y, const float* w, float* out, int n_rows, int n,
                  float eps, cudaStream_t stream, const ActForms& forms = {});

}  // namespace rz::gpu

// FP8 (E4M3) rows with one fp32 scale each: how the CUDA executor stores F16/BF16 weight matrices
// under `--weights fp8` (GpuExecutorOptions::fp8_weights) and how it rounds the activations those
// matrices multiply through cuBLASLt (per token). The one owner of the rounding rule;
// gpu/gemm.hpp multiplies such rows through cuBLASLt, kernels/gemv.hpp's gemv_fp8 (on fp32
// activations) for a few tokens.
//
// The rule, for a row x[0..cols) (fp32; F16/BF16 sources converted exactly):
//   amax  = max |x[c]| over the elements that are not NaN
//   inv   = 448 / amax, scale = amax / 448 (IEEE divisions, round to nearest; amax 0 or inf:
//           inv = scale = 1)
//   q[c]  = E4M3 of (x[c] * inv) (one fp32 product), round to nearest even, saturating to +-448
//           (cvt.rn.satfinite); a NaN element gives the NaN code 0x7f.
// so that x[c] ~ e4m3_value(q[c]) * scale, with 3 mantissa bits: a relative error of at most
// 2^-4 for values above amax * 2^-15 (E4M3's normal range is 2^-6 .. 448).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace rz::gpu {

constexpr float kFp8E4M3Max = 448.0f;

// The source element type of quantize_rows_fp8.
enum class Fp8Source : uint8_t { f32, f16, bf16 };

// Launches the rule above on every row of src, asynchronously on `stream`:
//   src:     device [rows, cols] of `type`, row-major
//   q:       device [rows, cols] bytes (E4M3 codes)
//   scale:   device [rows] fp32
// Throws rz::Error for rows < 0, cols < 1 or null pointers (before any CUDA call); rows == 0
// launches nothing. Launch failures as rz::gpu::CudaError.
void quantize_rows_fp8(const void* src, Fp8Source type, uint8_t* q, float* scale, int64_t rows,
                       int64_t cols, cudaStream_t stream);

}  // namespace rz::gpu

namespace rz::gpu {

// y[t, r] *= w_scale[r] * x_scale[t] for t < n, r < rows (row stride ldy >= rows), in place on
// `stream`: the scales of an FP8 product computed with unit scales (gpu/gemm.hpp's fallback where
// cuBLASLt has no per-row scale mode). Throws rz::Error for bad shapes or null pointers.
void apply_fp8_scales(float* y, const float* w_scale, const float* x_scale, int64_t rows, int64_t n,
                      int64_t ldy, cudaStream_t stream);

}  // namespace rz::gpu

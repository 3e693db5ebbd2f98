// qmm's warpgroup kernel (kernels/qmm_wide.cu, kernels/QMM.md "The wide kernel"): 65 tokens and
// more on Hopper, wgmma with A (the weights, decoded from their blocks in registers) from
// registers and B (the tokens' x) from shared memory. Internal to qmm (kernels/qmm.cu).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "formats/ggml_types.hpp"

namespace rz::gpu::qmm_detail {

// From this many tokens qmm runs the wide kernel where it is available, in tiles of kWideTokens.
constexpr int kWideMinTokens = 65;
constexpr int kWideTokens = 128;

// Whether this build has the wide kernel (compiled for sm_90a) and the current device runs it
// (compute capability 9.0).
bool wide_available();

// Floats of workspace the wide kernel's x layout takes for n tokens of cols columns (beside the
// split sums, after them).
size_t wide_x_floats(int64_t n, int64_t cols);

// y (or the split workspace out, ld) = x · Wᵀ by the wide kernel: xp is qmm_prepare_x's output,
// xw wide_x_floats(n, cols) floats of scratch (16-byte aligned) that it first rearranges xp into.
// Grid: token tiles × row tiles × `splits` K splits (out = the workspace when splits > 1, whose
// sums the caller adds).
void launch_wide(GgmlType type, const void* w, int64_t row_bytes, const void* xp, void* xw,
                 float* out, int64_t ld, int rows, int cols, int n, int splits,
                 cudaStream_t stream);

}  // namespace rz::gpu::qmm_detail

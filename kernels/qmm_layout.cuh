// The order in which qmm (kernels/qmm.cu, whose top comment derives it) reads its fp16
// activations, for the kernels that write them: qmm_prepare_x and the producers that write them
// beside their fp32 output (kernels/act_forms.hpp).
#pragma once
#include <cuda_runtime.h>

namespace rz::gpu {

// Column of a 256-column chunk that k-slot element e of thread c holds in mma step t.
__host__ __device__ constexpr int qmm_chunk_col(int t, int c, int e) {
  return 64 * c + 32 * (t & 1) + 4 * (t >> 1) + e;
}

// The quad (4 halves, 8 bytes) of a token row's prepared activations that holds columns
// col .. col + 3 (col a multiple of 4): quad chunk * 64 + 4 t + c, where qmm_chunk_col(t, c, 0)
// is col's place in its chunk.
__host__ __device__ constexpr int qmm_quad_of(int col) {
  const int chunk = col / 256, cc = col % 256, c = cc / 64, rem = cc % 64;
  const int t = 2 * ((rem % 32) / 4) + rem / 32;
  return chunk * 64 + 4 * t + c;
}

}  // namespace rz::gpu

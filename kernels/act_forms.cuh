// Device side of kernels/act_forms.hpp: how a producing kernel writes four consecutive columns
// of one row into each form, exactly as the stand-alone preparation kernels do.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/act_forms.hpp"
#include "kernels/launch.cuh"
#include "kernels/mma.cuh"  // pack_half4
#include "kernels/q8_activation.cuh"
#include "kernels/qmm_layout.cuh"

namespace rz::gpu {

// A producer's first statement (kernels/launch.cuh): grid_dependency_sync, except before a qmm
// (forms.qmm set), which like the qmm kernels themselves waits without letting the next kernel
// launch early. The early launch of qmm's blocks cost 9-17 % of a qmm-bound decode step
// (launch.cuh), and measured so again here: qwen2.5-1.5b B = 16 at 2.92 ms a step with it, 2.73
// before the norms wrote qmm's input.
__device__ __forceinline__ void act_forms_dependency_sync(const ActForms& f) {
  if (f.qmm)
    grid_dependency_wait();
  else
    grid_dependency_sync();
}

// Columns col .. col + 3 (col a multiple of 4) of row `row` of an n_rows x cols matrix, value v,
// into every form f holds. When f.q8 is set all 32 lanes of the warp must call it, with the 8
// lanes of each group of 32 columns consecutive; a lane with `active` false takes part in the
// group's shuffles and writes nothing.
__device__ __forceinline__ void store_act_forms(const ActForms& f, int64_t row, int64_t n_rows,
                                                int cols, int col, float4 v, bool active) {
  const int64_t e = row * cols + col;
  if (f.q8) {
    const Q8Quad qq = q8_quantize_quad(active ? v : make_float4(0.f, 0.f, 0.f, 0.f));
    if (active) {
      reinterpret_cast<uint32_t*>(f.q8)[e / 4] = qq.q;
      if (col % 32 == 0) q8_pairs(f.q8, n_rows, cols)[e / 32] = qq.ds;
    }
  }
  if (!active || !(f.f16 || f.qmm)) return;
  const uint2 h = pack_half4(v);
  if (f.f16) reinterpret_cast<uint2*>(f.f16)[e / 4] = h;
  if (f.qmm) reinterpret_cast<uint2*>(f.qmm)[row * (cols / 4) + qmm_quad_of(col)] = h;
}

// The qmm form's padding: quad i of pad row `row` (n_rows <= row < round_up(n_rows, 8)) is zero.
__device__ __forceinline__ void store_qmm_pad(const ActForms& f, int64_t row, int cols, int i) {
  reinterpret_cast<uint2*>(f.qmm)[row * (cols / 4) + i] = make_uint2(0u, 0u);
}

}  // namespace rz::gpu

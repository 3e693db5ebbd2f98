// SwiGLU-over-fused-rows kernel (see swiglu_rows.hpp). A 2-D grid: columns in grid.x, rows in
// grid.y (rows beyond 65535 loop). When n_ff is a multiple of 4 and both pointers are 16-byte
// aligned, each thread handles 4 consecutive columns with float4 loads and stores; otherwise one
// column. The per-element arithmetic is swiglu.cu's. With matmul input forms to write
// (kernels/act_forms.hpp; float4 path only) each thread writes its four columns of each form, and
// of out unless forms.f32 is false.
#include "kernels/launch.cuh"
#include "kernels/swiglu_rows.hpp"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/act_forms.cuh"
#include "kernels/cuda_check.hpp"
#include "kernels/gate_act.cuh"

namespace rz::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxGridY = 65535;

// grid (ceil(n_ff / (V * kThreads)), min(rows, 65535)); V floats per thread (1 or 4). rows is
// n_rows, or round_up(n_rows, 8) when forms.qmm is set (the rows past n_rows write the qmm form's
// zero pad rows and nothing else). Forms only with V = 4 (the host checks).
template <int V>
__global__ void swiglu_rows_kernel(const float* __restrict__ gu, float* __restrict__ out,
                                   int64_t n_rows, int64_t n_ff, ActForms forms, int64_t rows,
                                   GateAct act) {
  act_forms_dependency_sync(forms);
  const int64_t j = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  const bool active = j < n_ff;
  if (!active && !forms.q8) return;  // with q8, every lane takes part in its group's shuffles
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    if (r >= n_rows) {  // a qmm pad row: uniform per block
      if (active) store_qmm_pad(forms, r, static_cast<int>(n_ff), static_cast<int>(j / 4));
      continue;
    }
    const float* g = gu + r * 2 * n_ff + j;
    const float* u = g + n_ff;
    float* o = out + r * n_ff + j;
    if constexpr (V == 4) {  // n_ff % 4 == 0 and 16-byte aligned bases: j + 3 < n_ff, aligned
      float4 ov = make_float4(0.f, 0.f, 0.f, 0.f);
      if (active) {
        const float4 gv = *reinterpret_cast<const float4*>(g);
        const float4 uv = *reinterpret_cast<const float4*>(u);
        ov.x = gate_act(act, gv.x, uv.x);
        ov.y = gate_act(act, gv.y, uv.y);
        ov.z = gate_act(act, gv.z, uv.z);
        ov.w = gate_act(act, gv.w, uv.w);
        if (forms.f32) *reinterpret_cast<float4*>(o) = ov;
      }
      if (forms.any())
        store_act_forms(forms, r, n_rows, static_cast<int>(n_ff), static_cast<int>(j), ov, active);
    } else {
      *o = gate_act(act, *g, *u);
    }
  }
}

}  // namespace

void swiglu_rows(const float* gu, float* out, int64_t n_rows, int64_t n_ff, cudaStream_t stream,
                 const ActForms& forms, GateAct act) {
  if (n_rows < 0 || n_ff <= 0)
    throw Error("swiglu_rows: bad shape [" + std::to_string(n_rows) + ", " + std::to_string(n_ff) +
                "]");
  if (n_rows == 0) return;
  if (!gu || !out) throw Error("swiglu_rows: null pointer");
  const bool vec = n_ff % 4 == 0 && reinterpret_cast<uintptr_t>(gu) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(out) % 16 == 0;
  check_act_forms(forms, n_ff, "swiglu_rows");
  if (forms.any() && (!vec || n_ff > 0x7fffffff))
    throw Error("swiglu_rows: the matmul input forms need 16-byte aligned rows");
  const int64_t per_block = int64_t(kThreads) * (vec ? 4 : 1);
  const int64_t gx = (n_ff + per_block - 1) / per_block;
  if (gx > 0x7fffffff)
    throw Error("swiglu_rows: row of " + std::to_string(n_ff) + " elements is too long");
  const int64_t rows = forms.qmm ? (n_rows + 7) / 8 * 8 : n_rows;
  const dim3 grid(static_cast<unsigned>(gx),
                  static_cast<unsigned>(rows < kMaxGridY ? rows : kMaxGridY));
  if (vec)
    launch_kernel(swiglu_rows_kernel<4>, grid, kThreads, 0, stream, gu, out, n_rows, n_ff, forms,
                  rows, act);
  else
    launch_kernel(swiglu_rows_kernel<1>, grid, kThreads, 0, stream, gu, out, n_rows, n_ff, forms,
                  rows, act);
  RZ_CUDA_CHECK_LAUNCH("swiglu_rows_kernel");
}

}  // namespace rz::gpu

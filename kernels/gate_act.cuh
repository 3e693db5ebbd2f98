// The feed-forward gate's activation times up, per element, shared by swiglu.cu and
// swiglu_rows.cu: silu(g) * u = (g / (1 + expf(-g))) * u, or gelu_tanh(g) * u =
// ((g / 2) (1 + tanhf(sqrt(2 / pi) (g + 0.044715 g^3)))) * u with cpu/cpu_ops.cpp's geglu
// association (each operation rounded; tanhf may differ from the host's tanh by an ulp).
#pragma once
#include <cuda_runtime.h>

#include "kernels/swiglu.hpp"

namespace rz::gpu {

__device__ __forceinline__ float gate_act(GateAct act, float g, float u) {
  if (act == GateAct::gelu_tanh) {
    const float k = 0.7978845608028654f;  // float(sqrt(2 / pi))
    const float cube = __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, g), g), g);
    const float t = tanhf(__fmul_rn(k, __fadd_rn(g, cube)));
    return __fmul_rn(__fmul_rn(__fmul_rn(0.5f, g), __fadd_rn(1.0f, t)), u);
  }
  const float silu = __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));
  return __fmul_rn(silu, u);
}

}  // namespace rz::gpu

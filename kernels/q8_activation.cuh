// The int8 activation format of gemv_q8 (kernels/gemv_q8.hpp), for the kernels that write it:
// quantize_x_q8 and the producers that write it beside their fp32 output (kernels/act_forms.hpp).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda_common.cuh"

namespace rz::gpu {

struct Q8Quad {
  uint32_t q;  // the four quants, element 0 in the low byte
  float2 ds;   // the group's {d, d * sum of its quants}: the same in all 8 lanes
};

// Four consecutive elements of a group of 32 held by 8 consecutive lanes (lane 8 k + j holds
// elements 4 j .. 4 j + 3 of its group): d = max|x| / 127 of the group, q = nearest even of
// x / d (all zero when d = 0). All 32 lanes of the warp must call it; a lane without elements
// passes zeros (its group's result is then unused).
__device__ __forceinline__ Q8Quad q8_quantize_quad(float4 v) {
  float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
  amax = group_max<8>(amax);
  const float d = __fdiv_rn(amax, 127.0f);
  int qi[4] = {0, 0, 0, 0};
  if (d > 0.0f) {
    qi[0] = __float2int_rn(__fdiv_rn(v.x, d));
    qi[1] = __float2int_rn(__fdiv_rn(v.y, d));
    qi[2] = __float2int_rn(__fdiv_rn(v.z, d));
    qi[3] = __float2int_rn(__fdiv_rn(v.w, d));
  }
  const float sum = group_sum<8>(static_cast<float>(qi[0] + qi[1] + qi[2] + qi[3]));  // exact
  Q8Quad r;
  r.q = (qi[0] & 0xff) | ((qi[1] & 0xff) << 8) | ((qi[2] & 0xff) << 16) |
        (static_cast<uint32_t>(qi[3] & 0xff) << 24);
  r.ds = make_float2(d, __fmul_rn(d, sum));
  return r;
}

// Where n rows of cols columns keep their group pairs: after the n * cols quants.
__host__ __device__ __forceinline__ float2* q8_pairs(void* xq, int64_t n, int64_t cols) {
  return reinterpret_cast<float2*>(static_cast<int8_t*>(xq) + n * cols);
}

}  // namespace rz::gpu

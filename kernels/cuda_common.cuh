// Device helpers the kernels in kernels/ share, written once: warp and block reductions, the
// argmax pair rule, fp16 / bf16 bit conversions and little-endian 16-bit loads; and, through
// kernels/cuda_check.hpp, the host's launch checks (RZ_CUDA_CHECK_LAUNCH). Everything here is
// __forceinline__: a kernel calling a helper compiles as if the helper were written out in its
// file (scripts/kernel_code_diff.sh compares the machine code). Per-format quant block decoding
// is in kernels/quant_decode.cuh.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda_check.hpp"

namespace rz::gpu {

// ---------------------------------------------------------------- reductions

// Sum over each aligned group of LPR lanes (LPR a power of two <= 32) by an xor butterfly; every
// lane gets its group's sum. All 32 lanes must call it.
template <int LPR>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int off = LPR / 2; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// fmaxf over each aligned group of LPR lanes, as group_sum.
template <int LPR>
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int off = LPR / 2; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) { return group_sum<32>(v); }
__device__ __forceinline__ float warp_max(float v) { return group_max<32>(v); }

// Sum / fmaxf over the warp by a shuffle-down tree: only lane 0's result is the warp's (the other
// lanes hold partial results). All 32 lanes must call it.
__device__ __forceinline__ float warp_sum_to_lane0(float v) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  return v;
}

__device__ __forceinline__ float warp_max_to_lane0(float v) {
  for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, off));
  return v;
}

// v combined over the thread block with warp_reduce_to_lane0 (warp_sum_to_lane0 or
// warp_max_to_lane0) and returned to every thread: per warp, then warp 0 combines the warp
// results the same way (lanes past the last warp contribute `identity`). blockDim.x a multiple
// of 32, at most 1024; every thread of the block must call it, once per kernel (the shared
// result is not guarded against a second call).
template <float (*warp_reduce_to_lane0)(float)>
__device__ __forceinline__ float block_combine(float v, float identity) {
  __shared__ float warp_results[32];
  __shared__ float total;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
  v = warp_reduce_to_lane0(v);
  if (lane == 0) warp_results[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < n_warps ? warp_results[lane] : identity;
    s = warp_reduce_to_lane0(s);
    if (lane == 0) total = s;
  }
  __syncthreads();
  return total;
}

// Sum of v over the thread block (block_combine's rules).
__device__ __forceinline__ float block_sum(float v) {
  return block_combine<warp_sum_to_lane0>(v, 0.0f);
}

// fmaxf of v over the thread block (block_combine's rules; NaNs lose to numbers, as in fmaxf).
__device__ __forceinline__ float block_max(float v) {
  return block_combine<warp_max_to_lane0>(v, -INFINITY);
}

// ---------------------------------------------------------------- argmax

// The project's argmax order on (value, index) pairs: the larger value, then the lower index
// (model/sampling.cpp's argmax). Callers map NaN to -inf before comparing, so the order is total.
__device__ __forceinline__ bool argmax_better(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

// Combines the lanes' (bv, bi) pairs by argmax_better, a shuffle-down tree; lane 0 ends with the
// warp's best pair (the other lanes with partial results). All 32 lanes must call it.
__device__ __forceinline__ void warp_argmax(float& bv, int& bi) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    const float ov = __shfl_down_sync(0xffffffffu, bv, off);
    const int oi = __shfl_down_sync(0xffffffffu, bi, off);
    if (argmax_better(ov, oi, bv, bi)) {
      bv = ov;
      bi = oi;
    }
  }
}

// ---------------------------------------------------------------- 16-bit loads

// 16 bits at a 2-byte aligned address, through the read-only cache (the GEMV hot loops).
__device__ __forceinline__ uint16_t load_u16_a2(const uint8_t* p) {
  return __ldg(reinterpret_cast<const unsigned short*>(p));
}

// Little-endian 16 bits at any address: two byte loads (GGUF block fields at odd offsets).
__device__ __forceinline__ uint16_t load_u16_le(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

// ---------------------------------------------------------------- fp16 / bf16 bits

// fp16 bits (low 16 bits of h) -> fp32 by the hardware conversion: exact for every number; a
// signalling NaN may come back quiet. The GEMV form (one instruction in the hot loop).
__device__ __forceinline__ float f16_bits_to_f32_fast(uint32_t h) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
}

// fp16 bits -> fp32 exactly as quants/quants_fp.cpp: NaN payloads kept (the hardware conversion
// would quiet a signalling NaN), everything else through the exact hardware conversion.
__device__ __forceinline__ float f16_bits_to_f32(uint16_t h) {
  if ((h & 0x7c00u) == 0x7c00u)
    return __uint_as_float((static_cast<uint32_t>(h & 0x8000u) << 16) | 0x7f800000u |
                           (static_cast<uint32_t>(h & 0x3ffu) << 13));
  return __half2float(__ushort_as_half(h));
}

// bf16 bits (low 16 bits of h) -> fp32: exact, NaN payloads kept.
__device__ __forceinline__ float bf16_bits_to_f32(uint32_t h) { return __uint_as_float(h << 16); }

// fp32 -> fp16 bits as model's fp32_to_fp16: round to nearest even (the hardware's cvt.rn,
// overflow to inf); NaN keeps its top ten payload bits, bumped to 0x7c01 where that would read
// as inf.
__device__ __forceinline__ uint16_t f32_to_f16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    uint16_t h = static_cast<uint16_t>(0x7c00u + ((u & 0x7fffffu) >> 13));
    if (h == 0x7c00u) ++h;
    return static_cast<uint16_t>(((u >> 16) & 0x8000u) | h);
  }
  return __half_as_ushort(__float2half_rn(f));
}

// fp32 -> bf16 bits as model's fp32_to_bf16: NaN made quiet (upper half kept, bit 22 set), then
// round to nearest even by integer add (overflow carries into inf).
__device__ __forceinline__ uint16_t f32_to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) u = (u & 0xffff0000u) | 0x00400000u;
  return static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

}  // namespace rz::gpu

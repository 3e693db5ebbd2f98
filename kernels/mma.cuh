// Tensor-core and async-copy primitives the sm_80+ kernels share (kernels/qmm.cu,
// kernels/attention_prefill_mma.cu), written once: cp.async 16-byte copies into shared memory,
// ldmatrix fragment loads, and mma.sync m16n8k16 with fp16 inputs and fp32 accumulators.
//
// Fragment layout of mma.sync.m16n8k16.row.col (thread g = lane / 4, c = lane % 4):
//   A (16 x 16, row-major): a0 = rows g, k {2c, 2c+1}; a1 = row g + 8, same k;
//                           a2 = row g, k {2c+8, 2c+9}; a3 = row g + 8, same k
//   B (16 x 8, "col"):      b0 = k {2c, 2c+1} of column g; b1 = k {2c+8, 2c+9} of column g
//   C/D (16 x 8, fp32):     d0, d1 = row g, columns {2c, 2c+1}; d2, d3 = row g + 8, same columns
// Each register of A or B holds two fp16 values, the lower k in the low half.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

namespace rz::gpu {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1.
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src));
}

// As cp_async16, but copies only src_bytes (0 or 16) and zero-fills the rest: with 0, src is not
// read (it must still be a valid generic address expression, not dereferenced).
__device__ __forceinline__ void cp_async16_zfill(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }

// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// a * b + c on two fp16 pairs (one HFMA2, rounded once), as bits.
__device__ __forceinline__ uint32_t hfma2_bits(uint32_t a, uint32_t b, uint32_t c) {
  const __half2 r =
      __hfma2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b),
              *reinterpret_cast<const __half2*>(&c));
  return *reinterpret_cast<const uint32_t*>(&r);
}
__device__ __forceinline__ uint32_t hmul2_bits(uint32_t a, uint32_t b) {
  const __half2 r =
      __hmul2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b));
  return *reinterpret_cast<const uint32_t*>(&r);
}

// Four floats rounded to fp16 (nearest even), element 0 in the low half of .x.
__device__ __forceinline__ uint2 pack_half4(float4 v) {
  return make_uint2(pack_half2(v.x, v.y), pack_half2(v.z, v.w));
}

// Four 8x8 fp16 matrices from shared memory: lanes 8i..8i+7 give the row addresses (16 bytes
// each) of matrix i, which lands in r[i] (thread g, c holds row g, columns 2c and 2c+1).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row_addr)));
}

// As ldmatrix_x4, transposed: thread g, c holds rows 2c and 2c+1 of column g.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row_addr)));
}

// d += A B (m16n8k16, fp16 inputs, fp32 accumulators; layout at the top).
__device__ __forceinline__ void mma_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                          uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace rz::gpu

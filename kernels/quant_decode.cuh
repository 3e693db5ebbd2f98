// The GGUF block formats as the device reads them, one struct per type, written once for the
// kernels that decode weights: GEMV (kernels/gemv_*.cu), qmm (kernels/qmm_formats.cuh),
// whole-matrix dequantization (kernels/dequant.cu) and the embedding gather
// (kernels/embedding.cu). Each struct gives
//   - the block's shape and field offsets (from quants/quant_blocks.hpp's host structs);
//   - where element j of a block has its quant, and the integer unpacking of scales, mins and
//     quants, on bytes or on words of four bytes at a time (byte i of the result from byte i of
//     the input: the GEMV kernels unpack four lanes' worth per instruction, the others one byte);
//   - decode_exact<N>(b, j0, v): elements j0 .. j0 + N - 1 of the block at b as fp32 with the
//     CPU's separately rounded operations (quants/quants_legacy.cpp / quants_k.cpp; the _rn
//     intrinsics keep nvcc from fusing them into FMAs), so bit for bit dequantize_row. Byte loads
//     only: blocks may sit at any address. The N elements must share one scale and one nibble
//     half (j0 % 16 + N <= 16 suffices for every type).
// The GEMV and qmm kernels keep their own float arithmetic (FMA-friendly, bounded by tolerance,
// see kernels/GEMV.md); only the layout and the integer unpacking are shared with them.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda_common.cuh"
#include "quants/quant_blocks.hpp"

namespace rz::gpu::quant {

// Nibbles of four bytes at once (one byte, the others 0, gives one nibble): the low nibble of
// each byte when hi == 0, the high one when hi == 1.
__device__ __forceinline__ uint32_t nibbles(uint32_t bytes, int hi) {
  return (bytes >> (4 * hi)) & 0x0f0f0f0fu;
}

// The low four bits of h, one to a byte: bit i of h becomes bit 0 of byte i (the fifth bits of
// Q5_0 / Q5_1 quants, four elements at once). The multiply places copies of h at shifts 0, 7, 14
// and 21; no two copies' bits meet, and the mask keeps bit i of the copy at 7 i.
__device__ __forceinline__ uint32_t spread_bits4(uint32_t h) {
  return ((h & 0x0fu) * 0x00204081u) & 0x01010101u;
}

// Q8_0 (34 bytes): d (fp16) | qs[32] int8; element j = qs[j] * d.
struct Q8_0 {
  static constexpr int kElems = QK8_0;
  static constexpr int kBytes = sizeof(BlockQ8_0);
  static constexpr int kD = offsetof(BlockQ8_0, d);
  static constexpr int kQs = offsetof(BlockQ8_0, qs);

  template <int N>
  __device__ __forceinline__ static void decode_exact(const uint8_t* b, int j0, float (&v)[N]) {
    const float d = f16_bits_to_f32(load_u16_le(b + kD));
#pragma unroll
    for (int i = 0; i < N; ++i)
      v[i] = __fmul_rn(static_cast<float>(static_cast<int8_t>(b[kQs + j0 + i])), d);
  }
};

// Q4_0 (18 bytes): d (fp16) | qs[16];         element j = d * (q - 8)
// Q4_1 (20 bytes): d, m (fp16) | qs[16];      element j = d * q + m
// where q of element j < 16 is the low nibble of qs[j], of element j >= 16 the high nibble of
// qs[j - 16].
template <bool kHasMin>
struct Q4Legacy {
  using Block = std::conditional_t<kHasMin, BlockQ4_1, BlockQ4_0>;
  static constexpr int kElems = 32;
  static constexpr int kBytes = sizeof(Block);
  static constexpr int kD = offsetof(Block, d);
  static constexpr int kQs = offsetof(Block, qs);
  static constexpr int kM = kHasMin ? 2 : -1;  // offsetof(BlockQ4_1, m); Q4_0 has no m
  static_assert(!kHasMin || kM == static_cast<int>(offsetof(BlockQ4_1, m)));

  // Element j's quant is nibble half_of(j) of qs[qs_byte(j)].
  __host__ __device__ static constexpr int qs_byte(int j) { return j % 16; }
  __host__ __device__ static constexpr int half_of(int j) { return j / 16; }

  template <int N>
  __device__ __forceinline__ static void decode_exact(const uint8_t* b, int j0, float (&v)[N]) {
    const float d = f16_bits_to_f32(load_u16_le(b + kD));
    const uint8_t* q = b + kQs + qs_byte(j0);
    const int hi = half_of(j0);
    if constexpr (kHasMin) {
      const float m = f16_bits_to_f32(load_u16_le(b + kM));
#pragma unroll
      for (int i = 0; i < N; ++i)
        v[i] = __fadd_rn(__fmul_rn(d, static_cast<float>(static_cast<int>(nibbles(q[i], hi)))), m);
    } else {
#pragma unroll
      for (int i = 0; i < N; ++i)
        v[i] = __fmul_rn(d, static_cast<float>(static_cast<int>(nibbles(q[i], hi)) - 8));
    }
  }
};
using Q4_0 = Q4Legacy<false>;
using Q4_1 = Q4Legacy<true>;

// Q4_K (144 bytes): d, dmin (fp16) | scales[12]: packed 6-bit (scale, min) of 8 sub-blocks |
// qs[128]. Element 32 s + l (sub-block s, l < 32) = (d * sc[s]) * q - (dmin * mn[s]), q the low
// (s even) or high (s odd) nibble of qs[32 (s / 2) + l].
struct Q4K {
  static constexpr int kElems = QK_K;
  static constexpr int kBytes = sizeof(BlockQ4_K);
  static constexpr int kD = offsetof(BlockQ4_K, d);
  static constexpr int kDmin = offsetof(BlockQ4_K, dmin);
  static constexpr int kScales = offsetof(BlockQ4_K, scales);
  static constexpr int kQs = offsetof(BlockQ4_K, qs);

  // Element 32 s + l's quant is nibble (s % 2) of qs[qs_byte(s, l)].
  __host__ __device__ static constexpr int qs_byte(int s, int l) { return 32 * (s / 2) + l; }

  // Byte i of each: the 6-bit scale (sc) or min (mn) of sub-block i (lo) or 4 + i (hi).
  struct ScalesMins {
    uint32_t sc_lo, sc_hi, mn_lo, mn_hi;
  };

  // The unpacking of the 12 scale bytes, as quants/quants_k.cpp's unpack_scale_min_k4, given as
  // w0 = bytes 0-3, w1 = bytes 4-7, w2 = bytes 8-11 (little-endian words, or single bytes in the
  // low byte): sub-blocks 0-3 take the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); sub-blocks
  // 4-7 the nibbles of bytes 8-11 plus the top two bits of bytes 0-3 (scales) and 4-7 (mins).
  __device__ __forceinline__ static ScalesMins scales_mins(uint32_t w0, uint32_t w1, uint32_t w2) {
    ScalesMins r;
    r.sc_lo = w0 & 0x3f3f3f3fu;
    r.mn_lo = w1 & 0x3f3f3f3fu;
    r.sc_hi = (w2 & 0x0f0f0f0fu) | ((w0 >> 2) & 0x30303030u);
    r.mn_hi = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 2) & 0x30303030u);
    return r;
  }

  // Scale and min of sub-block s alone, from the three bytes that hold them.
  __device__ __forceinline__ static void scale_min(const uint8_t* scales, int s, uint32_t& sc,
                                                   uint32_t& mn) {
    const int i = s & 3;
    const ScalesMins r = scales_mins(scales[i], scales[4 + i], scales[8 + i]);
    sc = s < 4 ? r.sc_lo : r.sc_hi;
    mn = s < 4 ? r.mn_lo : r.mn_hi;
  }

  template <int N>
  __device__ __forceinline__ static void decode_exact(const uint8_t* b, int j0, float (&v)[N]) {
    const int s = j0 / 32, l = j0 % 32;
    const float d = f16_bits_to_f32(load_u16_le(b + kD));
    const float dmin = f16_bits_to_f32(load_u16_le(b + kDmin));
    uint32_t sc, mn;
    scale_min(b + kScales, s, sc, mn);
    const float ds = __fmul_rn(d, static_cast<float>(static_cast<int>(sc)));
    const float ms = __fmul_rn(dmin, static_cast<float>(static_cast<int>(mn)));
    const uint8_t* q = b + kQs + qs_byte(s, l);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int q_i = static_cast<int>(nibbles(q[i], s % 2));
      v[i] = __fsub_rn(__fmul_rn(ds, static_cast<float>(q_i)), ms);
    }
  }
};

// Q6_K (210 bytes, so blocks are only 2-byte aligned): ql[128] | qh[64] | scales[16] int8 |
// d (fp16). Element 128 c + 32 k + l (c < 2, k < 4, l < 32) = (d * scales[8 c + 2 k + l / 16]) *
// (q - 32), q's low 4 bits the nibble k / 2 of ql[64 c + 32 (k % 2) + l], its high 2 bits at
// shift 2 k of qh[32 c + l].
struct Q6K {
  static constexpr int kElems = QK_K;
  static constexpr int kBytes = sizeof(BlockQ6_K);
  static constexpr int kQl = offsetof(BlockQ6_K, ql);
  static constexpr int kQh = offsetof(BlockQ6_K, qh);
  static constexpr int kScales = offsetof(BlockQ6_K, scales);
  static constexpr int kD = offsetof(BlockQ6_K, d);

  // Element 128 c + 32 k + l: its ql byte, its qh byte and its scale (l >= 0).
  __host__ __device__ static constexpr int ql_byte(int c, int k, int l) {
    return 64 * c + 32 * (k % 2) + l;
  }
  __host__ __device__ static constexpr int qh_byte(int c, int l) { return 32 * c + l; }
  __host__ __device__ static constexpr int scale_index(int c, int k, int l) {
    return 8 * c + 2 * k + (l >> 4);
  }

  // The 6-bit quants (0..63, one per byte) of group k from ql and qh bytes (four at a time, or
  // one in the low byte).
  __device__ __forceinline__ static uint32_t quants(uint32_t ql, uint32_t qh, int k) {
    const uint32_t lo = (ql >> (4 * (k / 2))) & 0x0f0f0f0fu;
    const uint32_t hi = (qh >> (2 * k)) & 0x03030303u;
    return lo | (hi << 4);
  }

  template <int N>
  __device__ __forceinline__ static void decode_exact(const uint8_t* b, int j0, float (&v)[N]) {
    const int c = j0 / 128, k = (j0 % 128) / 32, l = j0 % 32;
    const float d = f16_bits_to_f32(load_u16_le(b + kD));
    const int8_t sc = static_cast<int8_t>(b[kScales + scale_index(c, k, l)]);
    const float dl = __fmul_rn(d, static_cast<float>(sc));
    const uint8_t* ql = b + kQl + ql_byte(c, k, l);
    const uint8_t* qh = b + kQh + qh_byte(c, l);
#pragma unroll
    for (int i = 0; i < N; ++i)
      v[i] = __fmul_rn(dl, static_cast<float>(static_cast<int>(quants(ql[i], qh[i], k)) - 32));
  }
};

// Q5_0 (22 bytes): d (fp16) | qh[4] | qs[16];         element j = d * (q - 16)
// Q5_1 (24 bytes): d, m (fp16) | qh[4] | qs[16];      element j = d * q + m
// q of element j: its low 4 bits as Q4_0's (nibble j / 16 of qs[j % 16]), its fifth bit bit j of
// the little-endian word qh.
template <bool kHasMin>
struct Q5Legacy {
  using Block = std::conditional_t<kHasMin, BlockQ5_1, BlockQ5_0>;
  static constexpr int kElems = 32;
  static constexpr int kBytes = sizeof(Block);
  static constexpr int kD = offsetof(Block, d);
  static constexpr int kQh = offsetof(Block, qh);
  static constexpr int kQs = offsetof(Block, qs);
  static constexpr int kM = kHasMin ? 2 : -1;  // offsetof(BlockQ5_1, m); Q5_0 has no m
  static_assert(!kHasMin || kM == static_cast<int>(offsetof(BlockQ5_1, m)));

  template <int N>
  __device__ __forceinline__ static void decode_exact(const uint8_t* b, int j0, float (&v)[N]) {
    const float d = f16_bits_to_f32(load_u16_le(b + kD));
    const uint32_t qh = static_cast<uint32_t>(b[kQh]) | static_cast<uint32_t>(b[kQh + 1]) << 8 |
                        static_cast<uint32_t>(b[kQh + 2]) << 16 |
                        static_cast<uint32_t>(b[kQh + 3]) << 24;
    const uint8_t* q = b + kQs + j0 % 16;
    const int hi = j0 / 16;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int qi = static_cast<int>(nibbles(q[i], hi) | ((qh >> (j0 + i)) & 1u) << 4);
      if constexpr (kHasMin) {
        const float m = f16_bits_to_f32(load_u16_le(b + kM));
        v[i] = __fadd_rn(__fmul_rn(d, static_cast<float>(qi)), m);
      } else {
        v[i] = __fmul_rn(d, static_cast<float>(qi - 16));
      }
    }
  }
};
using Q5_0 = Q5Legacy<false>;
using Q5_1 = Q5Legacy<true>;

// Q2_K (84 bytes): scales[16] | qs[64] | d, dmin (fp16). Element p = 128 c + 32 j + l (the 16
// elements p0 .. p0 + 15 share scales[p / 16]: its low nibble times d, its high nibble times
// dmin) = dl * q - ml, q the 2 bits at shift 2 j of qs[32 c + l].
struct Q2K {
  static constexpr int kElems = QK_K;
  static constexpr int kBytes = sizeof(BlockQ2_K);
  static constexpr int kScales = offsetof(BlockQ2_K, scales);
  static constexpr int kQs = offsetof(BlockQ2_K, qs);
  static constexpr int kD = offsetof(BlockQ2_K, d);
  static constexpr int kDmin = offsetof(BlockQ2_K, dmin);

  template <int N>
  __device__ __forceinline__ static void decode_exact(const uint8_t* b, int j0, float (&v)[N]) {
    const float d = f16_bits_to_f32(load_u16_le(b + kD));
    const float dmin = f16_bits_to_f32(load_u16_le(b + kDmin));
    const uint32_t s = b[kScales + j0 / 16];
    const float dl = __fmul_rn(d, static_cast<float>(static_cast<int>(s & 0x0fu)));
    const float ml = __fmul_rn(dmin, static_cast<float>(static_cast<int>(s >> 4)));
    const int shift = 2 * ((j0 / 32) % 4);
    const uint8_t* q = b + kQs + 32 * (j0 / 128) + j0 % 32;
#pragma unroll
    for (int i = 0; i < N; ++i)
      v[i] =
          __fsub_rn(__fmul_rn(dl, static_cast<float>(static_cast<int>((q[i] >> shift) & 3))), ml);
  }
};

// Q3_K (110 bytes): hmask[32] | qs[64] | scales[12] | d (fp16). Element p = 128 c + 32 j + l:
// the low 2 bits of q as Q2_K's, minus 4 unless bit p / 32 of hmask[p % 32] is set; the 16
// elements from 16 k share the signed 6-bit scale (k < 8: low nibble of scales[k], else high
// nibble of scales[k - 8]; its high 2 bits at shift 2 (k / 4) of scales[8 + k % 4]) - 32, times d.
struct Q3K {
  static constexpr int kElems = QK_K;
  static constexpr int kBytes = sizeof(BlockQ3_K);
  static constexpr int kHmask = offsetof(BlockQ3_K, hmask);
  static constexpr int kQs = offsetof(BlockQ3_K, qs);
  static constexpr int kScales = offsetof(BlockQ3_K, scales);
  static constexpr int kD = offsetof(BlockQ3_K, d);

  template <int N>
  __device__ __forceinline__ static void decode_exact(const uint8_t* b, int j0, float (&v)[N]) {
    const float d = f16_bits_to_f32(load_u16_le(b + kD));
    const int k = j0 / 16;
    const int lo = k < 8 ? (b[kScales + k] & 0x0f) : (b[kScales + k - 8] >> 4);
    const int hi = (b[kScales + 8 + k % 4] >> (2 * (k / 4))) & 3;
    const float dl = __fmul_rn(d, static_cast<float>((lo | hi << 4) - 32));
    const int shift = 2 * ((j0 / 32) % 4), hbit = j0 / 32;
    const uint8_t* q = b + kQs + 32 * (j0 / 128) + j0 % 32;
    const uint8_t* hm = b + kHmask + j0 % 32;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int qi = ((q[i] >> shift) & 3) - (((hm[i] >> hbit) & 1) ? 0 : 4);
      v[i] = __fmul_rn(dl, static_cast<float>(qi));
    }
  }
};

// Q5_K (176 bytes): d, dmin (fp16) | scales[12] as Q4_K's | qh[32] | qs[128]. As Q4_K, with bit s
// of qh[l] the fifth bit of element 32 s + l.
struct Q5K {
  static constexpr int kElems = QK_K;
  static constexpr int kBytes = sizeof(BlockQ5_K);
  static constexpr int kD = offsetof(BlockQ5_K, d);
  static constexpr int kDmin = offsetof(BlockQ5_K, dmin);
  static constexpr int kScales = offsetof(BlockQ5_K, scales);
  static constexpr int kQh = offsetof(BlockQ5_K, qh);
  static constexpr int kQs = offsetof(BlockQ5_K, qs);

  template <int N>
  __device__ __forceinline__ static void decode_exact(const uint8_t* b, int j0, float (&v)[N]) {
    const int s = j0 / 32, l = j0 % 32;
    const float d = f16_bits_to_f32(load_u16_le(b + kD));
    const float dmin = f16_bits_to_f32(load_u16_le(b + kDmin));
    uint32_t sc, mn;
    Q4K::scale_min(b + kScales, s, sc, mn);
    const float ds = __fmul_rn(d, static_cast<float>(static_cast<int>(sc)));
    const float ms = __fmul_rn(dmin, static_cast<float>(static_cast<int>(mn)));
    const uint8_t* q = b + kQs + 32 * (s / 2) + l;
    const uint8_t* qh = b + kQh + l;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int qi = static_cast<int>(nibbles(q[i], s % 2) | ((qh[i] >> s) & 1u) << 4);
      v[i] = __fsub_rn(__fmul_rn(ds, static_cast<float>(qi)), ms);
    }
  }
};

// kIq4Values (quants/quant_blocks.hpp) packed eight int8 to a word, for a register lookup.
constexpr uint64_t pack_iq4_values(int first) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(uint8_t(kIq4Values[first + i])) << (8 * i);
  return v;
}

// kIq4Values[q] as fp32, q < 16.
__device__ __forceinline__ float iq4_value(uint32_t q) {
  constexpr uint64_t lo = pack_iq4_values(0), hi = pack_iq4_values(8);
  return static_cast<float>(static_cast<int8_t>(((q < 8 ? lo : hi) >> (8 * (q & 7))) & 0xffu));
}

// kIq4Values of four quants at once: byte i of q (0..15) selects byte i of the result, the table's
// int8 value. Two byte permutes look the low three bits up in each half of the table; bit 3
// chooses between them.
__device__ __forceinline__ uint32_t iq4_values4(uint32_t q) {
  constexpr uint64_t lo = pack_iq4_values(0), hi = pack_iq4_values(8);
  const uint32_t s = q & 0x07070707u;
  const uint32_t packed = s | (s >> 4);  // byte 0: q0 | q1 << 4, byte 2: q2 | q3 << 4
  const uint32_t sel = (packed & 0xffu) | ((packed >> 8) & 0xff00u);
  const uint32_t vlo = __byte_perm(static_cast<uint32_t>(lo), static_cast<uint32_t>(lo >> 32), sel);
  const uint32_t vhi = __byte_perm(static_cast<uint32_t>(hi), static_cast<uint32_t>(hi >> 32), sel);
  const uint32_t pick_hi = ((q >> 3) & 0x01010101u) * 0xffu;
  return (vlo & ~pick_hi) | (vhi & pick_hi);
}

// IQ4_NL (18 bytes): d (fp16) | qs[16]; element j = d * kIq4Values[q], q the low (j < 16) or high
// nibble of qs[j % 16].
struct IQ4NL {
  static constexpr int kElems = QK4_NL;
  static constexpr int kBytes = sizeof(BlockIQ4_NL);
  static constexpr int kD = offsetof(BlockIQ4_NL, d);
  static constexpr int kQs = offsetof(BlockIQ4_NL, qs);

  template <int N>
  __device__ __forceinline__ static void decode_exact(const uint8_t* b, int j0, float (&v)[N]) {
    const float d = f16_bits_to_f32(load_u16_le(b + kD));
    const uint8_t* q = b + kQs + j0 % 16;
    const int hi = j0 / 16;
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = __fmul_rn(d, iq4_value(nibbles(q[i], hi)));
  }
};

// IQ4_XS (136 bytes): d (fp16) | scales_h (u16) | scales_l[4] | qs[128]. Sub-block s = j / 32:
// scale (nibble s % 2 of scales_l[s / 2] | bits 2 s, 2 s + 1 of scales_h << 4) - 32, times d; its
// elements as IQ4_NL's over qs[16 s ..].
struct IQ4XS {
  static constexpr int kElems = QK_K;
  static constexpr int kBytes = sizeof(BlockIQ4_XS);
  static constexpr int kD = offsetof(BlockIQ4_XS, d);
  static constexpr int kScalesH = offsetof(BlockIQ4_XS, scales_h);
  static constexpr int kScalesL = offsetof(BlockIQ4_XS, scales_l);
  static constexpr int kQs = offsetof(BlockIQ4_XS, qs);

  template <int N>
  __device__ __forceinline__ static void decode_exact(const uint8_t* b, int j0, float (&v)[N]) {
    const int s = j0 / 32, l = j0 % 32;
    const float d = f16_bits_to_f32(load_u16_le(b + kD));
    const uint32_t sh = load_u16_le(b + kScalesH);
    const int ls = ((b[kScalesL + s / 2] >> (4 * (s % 2))) & 0x0f) | ((sh >> (2 * s)) & 3u) << 4;
    const float dl = __fmul_rn(d, static_cast<float>(ls - 32));
    const uint8_t* q = b + kQs + 16 * s + l % 16;
    const int hi = l / 16;
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = __fmul_rn(dl, iq4_value(nibbles(q[i], hi)));
  }
};

static_assert(Q4K::kQs == Q4K::kScales + K_SCALE_SIZE && Q4K::kQs + QK_K / 2 == Q4K::kBytes);
static_assert(Q6K::kD + 2 == Q6K::kBytes && Q8_0::kQs == 2 && Q4_0::kQs == 2 && Q4_1::kQs == 4);

}  // namespace rz::gpu::quant

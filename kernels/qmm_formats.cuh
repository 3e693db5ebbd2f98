// qmm's weight formats (kernels/qmm.cu): what thread c of a warp keeps of one row's 256-column
// chunk, staged in shared memory, and how it turns that into the fp16 A operand of each step.
//
// Thread c owns the columns 64 c + [0, 64) of a chunk; step t (0..15) takes its four columns
// qmm_chunk_col(t, c, 0..3) = 64 c + 32 (t & 1) + 4 (t >> 1) + [0, 4) (kernels/qmm_layout.cuh).
// The block layouts and the integer unpacking come from kernels/quant_decode.cuh.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda_common.cuh"
#include "kernels/gemv_common.cuh"  // load_words_a2, byte_to_float
#include "kernels/mma.cuh"          // pack_half2
#include "kernels/qmm.hpp"
#include "kernels/quant_decode.cuh"

namespace rz::gpu::qmm_detail {

using gemv_detail::byte_fma;
using gemv_detail::byte_to_float;
using gemv_detail::load_words_a2;
// N bytes at a 2-byte aligned address of a staged row, as N / 4 little-endian words.
template <int N>
__device__ __forceinline__ void lds_words_a2(const uint8_t* p, uint32_t (&out)[N / 4]) {
  load_words_a2<N, true>(p, out);
}

__device__ __forceinline__ uint32_t lds_u16_a2(const uint8_t* p) {
  return *reinterpret_cast<const uint16_t*>(p);
}

// Bytes 2 p and 2 p + 1 of q (each below 1024) as the half2 (1024 + q0, 1024 + q1), by one PRMT:
// the byte is the mantissa under the exponent byte 0x64 (the integer forms' A operands).
template <int p>
__device__ __forceinline__ uint32_t half2_1024_plus(uint32_t q) {
  return __byte_perm(q, 0x64646464u, p == 0 ? 0x4140u : 0x4342u);
}

// A format's traits: kChunkBytes (bytes of 256 columns of one row), kAligned16 (whether every
// row's chunk starts 16-byte aligned; otherwise it is staged from the 16-byte boundary below it),
// Item (what thread c keeps of one row's chunk), load(chunk, c) from the staged bytes in shared
// memory, and dequant<t>(item, v): the four values of columns chunk_col(t, c, 0..3) as fp32.
// kDirectStaged (optional, unaligned formats only): the direct kernel stages the chunks in shared
// memory too (kernels/qmm_direct.cuh, qmm_direct_staged_kernel), where that was measured faster
// than loading them in place (kernels/QMM.md, attempt 6).

// Q4_K (d, dmin | scales[12] | qs[128], 144 bytes) and Q5_K (the same, with qh[32] before qs;
// 176 bytes): one super-block per chunk. Thread c's columns are sub-blocks 2 c (the low nibbles
// of qs[32 c, +32)) and 2 c + 1 (the high ones); Q5_K's fifth bits are bits 2 c, 2 c + 1 of
// qh[0, 32).
template <bool kQ5>
struct Q45K {
  using Fmt = std::conditional_t<kQ5, quant::Q5K, quant::Q4K>;
  static constexpr int kChunkBytes = Fmt::kBytes;
  static constexpr bool kAligned16 = true;
  struct Item {
    uint32_t q[8];  // qs[32 c, 32 c + 32): group c (columns 64 c + [0, 64)), low then high nibbles
    uint32_t h[kQ5 ? 8 : 1];  // Q5_K: qh words, shifted right by 2 c
    float s16[2], b16[2];     // sub-block 2 c + h: d * scale * 2^-16, -(dmin * min + 128 d scale)
  };
  // Thread c's quant words (and Q5_K's fifth-bit words, not yet shifted: shift_h) of a chunk;
  // returns the 16-byte header. Loads only, so that a chunk requested ahead holds no register
  // with work waiting on its arrival.
  __device__ static uint4 load_quants(const uint8_t* b, int c, uint32_t (&q)[8],
                                      uint32_t (&h)[kQ5 ? 8 : 1]) {
    const uint4 q0 = *reinterpret_cast<const uint4*>(b + Fmt::kQs + 32 * c);
    const uint4 q1 = *reinterpret_cast<const uint4*>(b + Fmt::kQs + 32 * c + 16);
    q[0] = q0.x, q[1] = q0.y, q[2] = q0.z, q[3] = q0.w;
    q[4] = q1.x, q[5] = q1.y, q[6] = q1.z, q[7] = q1.w;
    if constexpr (kQ5) {
      const uint4 h0 = *reinterpret_cast<const uint4*>(b + quant::Q5K::kQh);
      const uint4 h1 = *reinterpret_cast<const uint4*>(b + quant::Q5K::kQh + 16);
      const uint32_t hw[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) h[i] = hw[i];
    }
    static_assert(Fmt::kD == 0 && Fmt::kDmin == 2 && Fmt::kScales == 4 && Fmt::kQs % 16 == 0);
    return *reinterpret_cast<const uint4*>(b);
  }
  // Q5_K: thread c's fifth bits of column group t at bit 0 (and 1) of each byte.
  __device__ static void shift_h(uint32_t (&h)[kQ5 ? 8 : 1], int c) {
    if constexpr (kQ5) {
#pragma unroll
      for (int i = 0; i < 8; ++i) h[i] >>= 2 * c;
    }
  }
  // Sub-blocks 2 c and 2 c + 1's scales and mins as floats (exact small integers).
  __device__ static void scales_mins(const uint4& hdr, int c, float (&sc)[2], float (&mn)[2]) {
    const quant::Q4K::ScalesMins sm = quant::Q4K::scales_mins(hdr.y, hdr.z, hdr.w);
    const uint32_t s = c < 2 ? sm.sc_lo : sm.sc_hi, m = c < 2 ? sm.mn_lo : sm.mn_hi;
    const int byte0 = (2 * c) & 3;  // sub-blocks 2c, 2c + 1 are bytes byte0, byte0 + 1
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      sc[h] = byte_to_float(s, byte0 + h);
      mn[h] = byte_to_float(m, byte0 + h);
    }
  }
  // Column group t's four quants as bytes (0..31).
  template <int t>
  __device__ static uint32_t quants(const uint32_t (&q)[8], const uint32_t (&h)[kQ5 ? 8 : 1]) {
    uint32_t v = quant::nibbles(q[t >> 1], t & 1);
    if constexpr (kQ5) v |= ((h[t >> 1] >> (t & 1)) & 0x01010101u) << 4;
    return v;
  }

  __device__ static Item load(const uint8_t* b, int c) {
    Item it;
    const uint4 hdr = load_quants(b, c, it.q, it.h);
    shift_h(it.h, c);
    const float d = f16_bits_to_f32_fast(hdr.x & 0xffffu);
    const float dmin = f16_bits_to_f32_fast(hdr.x >> 16);
    float sc[2], mn[2];
    scales_mins(hdr, c, sc, mn);
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // byte_fma's constants for w = q ds - ms
      const float ds = d * sc[h], ms = dmin * mn[h];
      it.s16[h] = ds * 0x1p-16f;
      it.b16[h] = -fmaf(128.0f, ds, ms);
    }
    return it;
  }
  template <int t>
  __device__ static void dequant(const Item& it, float (&v)[4]) {
    const uint32_t q = quants<t>(it.q, it.h);
#pragma unroll
    for (int e = 0; e < 4; ++e) v[e] = byte_fma(q, e, it.s16[t & 1], it.b16[t & 1]);
  }

  // The integer form (kernels/qmm_chunk.cuh, int_chunk; both kernels): the A operand of step t is
  // q * scale, an integer of at most 31 * 63 = 1953, so exact in fp16, made by one PRMT (the
  // fp16 1024 + q, two at a time) and one HFMA2 ((1024 + q) sc - 1024 sc, exact); a second mma
  // multiplies the sub-blocks' mins (exact too) by the same x, and the chunk's two sums are
  // scaled by d and dmin in fp32: y = d * sum(q sc x) - dmin * sum(m x).
  static constexpr bool kIntMins = true;  // the second mma (Q6_K has none)
  struct IntItem {
    uint32_t q[8];
    uint32_t h[kQ5 ? 8 : 1];
    // sub-block 2 c + h, as half2: (sc, sc), -1024 (sc, sc), (m, m)
    uint32_t sc2[2], nb2[2], m2[2];
    float d, dmin;
  };
  // What the direct kernel requests a chunk ahead: the loaded words only (13 registers a row,
  // against the IntItem's 17), decoded by int_item when the chunk's turn comes.
  struct IntRaw {
    uint4 hdr;
    uint32_t q[8];
    uint32_t h[kQ5 ? 8 : 1];
  };
  __device__ static IntRaw load_int_raw(const uint8_t* b, int c) {
    IntRaw r;
    r.hdr = load_quants(b, c, r.q, r.h);
    return r;
  }
  __device__ static IntItem int_item(const IntRaw& r, int c) {
    IntItem it;
#pragma unroll
    for (int i = 0; i < 8; ++i) it.q[i] = r.q[i];
#pragma unroll
    for (int i = 0; i < (kQ5 ? 8 : 1); ++i) it.h[i] = r.h[i];
    shift_h(it.h, c);
    it.d = f16_bits_to_f32_fast(r.hdr.x & 0xffffu);
    it.dmin = f16_bits_to_f32_fast(r.hdr.x >> 16);
    float sc[2], mn[2];
    scales_mins(r.hdr, c, sc, mn);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      it.sc2[h] = pack_half2(sc[h], sc[h]);
      it.nb2[h] = pack_half2(-1024.0f * sc[h], -1024.0f * sc[h]);
      it.m2[h] = pack_half2(mn[h], mn[h]);
    }
    return it;
  }
  // Step t's A registers of one row: columns (e0, e1) and (e2, e3), q * scale in fp16.
  template <int t>
  __device__ static uint2 a_int(const IntItem& it) {
    const uint32_t q = quants<t>(it.q, it.h);
    const uint32_t sc = it.sc2[t & 1], nb = it.nb2[t & 1];
    return make_uint2(hfma2_bits(half2_1024_plus<0>(q), sc, nb),
                      hfma2_bits(half2_1024_plus<1>(q), sc, nb));
  }
};
using Q4K = Q45K<false>;
using Q5K = Q45K<true>;

// One super-block per chunk (210 bytes, so only 2-byte aligned): ql[128] | qh[64] | scales[16] |
// d. Thread c's columns 64 c + [0, 64) are half cc = c / 2, groups k = 2 (c % 2) + h: ql bytes
// 64 cc + 32 h + l (nibble c % 2), qh bytes 32 cc + l (bits at 2 k), scale 8 cc + 2 k + l / 16
// = 4 c + 2 h + l / 16.
struct Q6K {
  using Fmt = quant::Q6K;
  static constexpr int kChunkBytes = Fmt::kBytes;
  static constexpr bool kAligned16 = false;
  static constexpr bool kDirectStaged = true;  // llama3.1-8b ffn_down, n = 1: 38.9 -> 27.5 us
  struct Item {
    uint32_t ql[16];  // [8 h + i]: nibble c % 2 of ql word 64 cc + 32 h + 4 i, as bytes
    uint32_t qh[8];   // [i]: qh word 32 cc + 4 i shifted right by 4 (c % 2)
    float s16[4];     // [2 h + l / 16]: d * scale * 2^-16
  };
  __device__ static Item load(const uint8_t* b, int c) {
    Item it;
    const IntRaw r = load_int_raw(b, c);
    quant_words(r, c, it.ql, it.qh);
    const float d = f16_bits_to_f32_fast(r.d);
#pragma unroll
    for (int j = 0; j < 4; ++j) it.s16[j] = d * scale(r.sc, j) * 0x1p-16f;
    return it;
  }
  // Column group t's four 6-bit quants as bytes (0..63), from the masked ql and shifted qh words.
  template <int t>
  __device__ static uint32_t quants(const uint32_t (&ql)[16], const uint32_t (&qh)[8]) {
    constexpr int h = t & 1, i = t >> 1;
    return ql[8 * h + i] | (((qh[i] >> (2 * h)) & 0x03030303u) << 4);
  }
  // Sub-block scale j of the four in word sc (int8), as a float.
  __device__ static float scale(uint32_t sc, int j) {
    return byte_to_float(sc ^ 0x80808080u, j, 128.0f);
  }
  template <int t>
  __device__ static void dequant(const Item& it, float (&v)[4]) {
    constexpr int h = t & 1, i = t >> 1;
    const uint32_t q = quants<t>(it.ql, it.qh);
    const float s16 = it.s16[2 * h + (i >> 2)];
    const float b16 = s16 * -10485760.0f;  // -(32 + 128) d scale: (q - 32) d scale by byte_fma
#pragma unroll
    for (int e = 0; e < 4; ++e) v[e] = byte_fma(q, e, s16, b16);
  }

  // The integer form (as Q4_K's, kernels/qmm_chunk.cuh int_chunk): the A operand of
  // step t is (q - 32) * scale in fp16, made two at a time by one PRMT (the fp16 1024 + q), one
  // HFMA2 ((1024 + q) - 1056 = q - 32, exact) and one HMUL2 (times the sub-block's int8 scale:
  // exact up to 2,048, rounded once above, where fp16 holds even integers only; at most 32 * 128).
  // The chunk's sum is scaled by d in fp32: y = d * sum((q - 32) sc x). Against the fp32
  // dequantization (four PRMT + FFMA and two conversions a group of four) three instructions a
  // pair instead of five. (One HFMA2 with sc and -1056 sc, as Q4_K's, cannot work: -1056 sc is
  // past fp16's range for |sc| > 62.)
  static constexpr bool kIntMins = false;
  struct IntRaw {  // thread c's words of a chunk as loaded (Item::load decodes them too)
    uint32_t ql[16], qh[8];
    uint32_t sc;  // scales 4 c .. 4 c + 3
    uint32_t d;   // fp16 bits
  };
  struct IntItem {
    uint32_t ql[16], qh[8];  // as Item's
    uint32_t sc2[4];         // scale 4 c + j as half2 (sc, sc)
    float d;
  };
  __device__ static IntRaw load_int_raw(const uint8_t* b, int c) {
    IntRaw r;
    const int cc = c >> 1;
    lds_words_a2<64>(b + Fmt::kQl + 64 * cc, r.ql);
    lds_words_a2<32>(b + Fmt::kQh + 32 * cc, r.qh);
    uint32_t sc[1];
    lds_words_a2<4>(b + Fmt::kScales + 4 * c, sc);
    r.sc = sc[0];
    r.d = lds_u16_a2(b + Fmt::kD);
    return r;
  }
  // Thread c's nibble of the ql words as bytes, and its bits of the qh words at bit 0 of each byte
  // (shifted right by 4 (c % 2)).
  __device__ static void quant_words(const IntRaw& r, int c, uint32_t (&ql)[16],
                                     uint32_t (&qh)[8]) {
    const int sh = 4 * (c & 1);
#pragma unroll
    for (int i = 0; i < 16; ++i) ql[i] = (r.ql[i] >> sh) & 0x0f0f0f0fu;
#pragma unroll
    for (int i = 0; i < 8; ++i) qh[i] = r.qh[i] >> sh;
  }
  __device__ static IntItem int_item(const IntRaw& r, int c) {
    IntItem it;
    quant_words(r, c, it.ql, it.qh);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float s = scale(r.sc, j);
      it.sc2[j] = pack_half2(s, s);
    }
    it.d = f16_bits_to_f32_fast(r.d);
    return it;
  }
  // Step t's A registers of one row: columns (e0, e1) and (e2, e3), (q - 32) * scale in fp16.
  template <int t>
  __device__ static uint2 a_int(const IntItem& it) {
    constexpr int h = t & 1, i = t >> 1;
    constexpr uint32_t kOne = 0x3c003c00u, kMinus1056 = 0xe420e420u;  // half2 (1, 1), (-1056, ..)
    const uint32_t q = quants<t>(it.ql, it.qh);
    const uint32_t sc = it.sc2[2 * h + (i >> 2)];
    const uint32_t lo = hfma2_bits(half2_1024_plus<0>(q), kOne, kMinus1056);
    const uint32_t hi = hfma2_bits(half2_1024_plus<1>(q), kOne, kMinus1056);
    return make_uint2(hmul2_bits(lo, sc), hmul2_bits(hi, sc));
  }
};

// Eight 32-element blocks per chunk; thread c's columns are blocks 2 c + h (h = 0, 1).
template <class Fmt>
__device__ __forceinline__ const uint8_t* small_block(const uint8_t* chunk, int c, int h) {
  return chunk + Fmt::kBytes * (2 * c + h);
}

struct Q8_0 {  // d | qs[32] int8, 34 bytes; a chunk is 272 bytes
  using Fmt = quant::Q8_0;
  static constexpr int kChunkBytes = 8 * Fmt::kBytes;
  static constexpr bool kAligned16 = true;
  struct Item {
    uint32_t q[2][8];  // block 2 c + h, bytes 4 i .. 4 i + 3, sign bit flipped
    float d[2];
  };
  __device__ static Item load(const uint8_t* chunk, int c) {
    Item it;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint8_t* b = small_block<Fmt>(chunk, c, h);
      it.d[h] = f16_bits_to_f32_fast(lds_u16_a2(b + Fmt::kD));
      lds_words_a2<32>(b + Fmt::kQs, it.q[h]);
#pragma unroll
      for (int i = 0; i < 8; ++i) it.q[h][i] ^= 0x80808080u;
    }
    return it;
  }
  template <int t>
  __device__ static void dequant(const Item& it, float (&v)[4]) {
#pragma unroll
    for (int e = 0; e < 4; ++e) v[e] = byte_to_float(it.q[t & 1][t >> 1], e, 128.0f) * it.d[t & 1];
  }
};

// Q4_0 (d | qs[16], 18 bytes; value d (q - 8)) and Q4_1 (d, m | qs[16], 20 bytes; d q + m):
// column l < 16 of a block is the low nibble of qs[l], l >= 16 the high nibble of qs[l - 16].
// Chunks of 144 / 160 bytes.
template <class Fmt, bool kHasMin>
struct Q4Legacy {
  static constexpr int kChunkBytes = 8 * Fmt::kBytes;
  static constexpr bool kAligned16 = true;
  struct Item {
    uint32_t q[2][4];  // block 2 c + h, qs words
    float d[2], m[2];
  };
  __device__ static Item load(const uint8_t* chunk, int c) {
    Item it;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint8_t* b = small_block<Fmt>(chunk, c, h);
      it.d[h] = f16_bits_to_f32_fast(lds_u16_a2(b + Fmt::kD));
      it.m[h] = kHasMin ? f16_bits_to_f32_fast(lds_u16_a2(b + Fmt::kM)) : 0.0f;
      lds_words_a2<16>(b + Fmt::kQs, it.q[h]);
    }
    return it;
  }
  template <int t>
  __device__ static void dequant(const Item& it, float (&v)[4]) {
    constexpr int h = t & 1, l = 4 * (t >> 1);  // the block's columns l .. l + 3
    const uint32_t q = quant::nibbles(it.q[h][(l & 15) >> 2], l >> 4);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if constexpr (kHasMin)
        v[e] = fmaf(byte_to_float(q, e), it.d[h], it.m[h]);
      else
        v[e] = byte_to_float(q, e, 8.0f) * it.d[h];
    }
  }
};
using Q4_0 = Q4Legacy<quant::Q4_0, false>;
using Q4_1 = Q4Legacy<quant::Q4_1, true>;

// Q5_0 (d | qh[4] | qs[16], 22 bytes; value d (q - 16)) and Q5_1 (d, m | qh[4] | qs[16], 24
// bytes; d q + m): Q4_0 / Q4_1's nibbles with bit l of qh as the fifth bit of column l. Chunks
// of 176 / 192 bytes.
template <class Fmt, bool kHasMin>
struct Q5Legacy {
  static constexpr int kChunkBytes = 8 * Fmt::kBytes;
  static constexpr bool kAligned16 = true;
  struct Item {
    uint32_t q[2][4];  // block 2 c + h, qs words
    uint32_t qh[2];
    float d[2], m[2];
  };
  __device__ static Item load(const uint8_t* chunk, int c) {
    Item it;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint8_t* b = small_block<Fmt>(chunk, c, h);
      it.d[h] = f16_bits_to_f32_fast(lds_u16_a2(b + Fmt::kD));
      it.m[h] = kHasMin ? f16_bits_to_f32_fast(lds_u16_a2(b + Fmt::kM)) : 0.0f;
      lds_words_a2<16>(b + Fmt::kQs, it.q[h]);
      uint32_t qh[1];
      lds_words_a2<4>(b + Fmt::kQh, qh);
      it.qh[h] = qh[0];
    }
    return it;
  }
  template <int t>
  __device__ static void dequant(const Item& it, float (&v)[4]) {
    constexpr int h = t & 1, l = 4 * (t >> 1);  // the block's columns l .. l + 3
    const uint32_t q =
        quant::nibbles(it.q[h][(l & 15) >> 2], l >> 4) | quant::spread_bits4(it.qh[h] >> l) << 4;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if constexpr (kHasMin)
        v[e] = fmaf(byte_to_float(q, e), it.d[h], it.m[h]);
      else
        v[e] = byte_to_float(q, e, 16.0f) * it.d[h];
    }
  }
};
using Q5_0 = Q5Legacy<quant::Q5_0, false>;
using Q5_1 = Q5Legacy<quant::Q5_1, true>;

// IQ4_NL (d | qs[16], 18 bytes): Q4_0's nibbles looked up in kIq4Values. Chunks of 144 bytes.
struct IQ4NL {
  using Fmt = quant::IQ4NL;
  static constexpr int kChunkBytes = 8 * Fmt::kBytes;
  static constexpr bool kAligned16 = true;
  struct Item {
    uint32_t q[2][4];  // block 2 c + h, qs words
    float d[2];
  };
  __device__ static Item load(const uint8_t* chunk, int c) {
    Item it;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint8_t* b = small_block<Fmt>(chunk, c, h);
      it.d[h] = f16_bits_to_f32_fast(lds_u16_a2(b + Fmt::kD));
      lds_words_a2<16>(b + Fmt::kQs, it.q[h]);
    }
    return it;
  }
  template <int t>
  __device__ static void dequant(const Item& it, float (&v)[4]) {
    constexpr int h = t & 1, l = 4 * (t >> 1);
    const uint32_t v8 =
        quant::iq4_values4(quant::nibbles(it.q[h][(l & 15) >> 2], l >> 4)) ^ 0x80808080u;
#pragma unroll
    for (int e = 0; e < 4; ++e) v[e] = byte_to_float(v8, e, 128.0f) * it.d[h];
  }
};

// Q2_K (scales[16] | qs[64] | d, dmin; 84 bytes) and Q3_K (hmask[32] | qs[64] | scales[12] | d;
// 110 bytes): one super-block per chunk, only 4- / 2-byte aligned. Thread c's columns are
// elements 128 cc + 32 j + l with cc = c / 2, j = 2 (c % 2) + (t & 1), l = 4 (t >> 1) + e: the
// 2-bit quants at shift 2 j of qs words 32 cc + 4 i (i = t >> 1), the scales 4 c + 2 (t & 1) +
// i / 4; Q3_K's high bits are bit 2 c + (t & 1) of the hmask words 4 i.
struct Q2K {
  using Fmt = quant::Q2K;
  static constexpr int kChunkBytes = Fmt::kBytes;
  static constexpr bool kAligned16 = false;
  static constexpr bool kDirectStaged = true;  // llama3.1-8b ffn_down, n = 1: 34.9 -> 31.2 us
  struct Item {
    uint32_t q[8];       // qs words 32 cc + 4 i, shifted right by 4 (c % 2)
    float dl[4], ml[4];  // scale 4 c + k: d * (low nibble), dmin * (high nibble)
  };
  __device__ static Item load(const uint8_t* b, int c) {
    Item it;
    lds_words_a2<32>(b + Fmt::kQs + 32 * (c >> 1), it.q);
#pragma unroll
    for (int i = 0; i < 8; ++i) it.q[i] >>= 4 * (c & 1);
    uint32_t sc[1];
    lds_words_a2<4>(b + Fmt::kScales + 4 * c, sc);
    const float d = f16_bits_to_f32_fast(lds_u16_a2(b + Fmt::kD));
    const float dmin = f16_bits_to_f32_fast(lds_u16_a2(b + Fmt::kDmin));
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      it.dl[k] = d * byte_to_float(sc[0] & 0x0f0f0f0fu, k);
      it.ml[k] = dmin * byte_to_float((sc[0] >> 4) & 0x0f0f0f0fu, k);
    }
    return it;
  }
  template <int t>
  __device__ static void dequant(const Item& it, float (&v)[4]) {
    constexpr int h = t & 1, i = t >> 1, k = 2 * h + (i >> 2);
    const uint32_t q = (it.q[i] >> (2 * h)) & 0x03030303u;
#pragma unroll
    for (int e = 0; e < 4; ++e) v[e] = fmaf(byte_to_float(q, e), it.dl[k], -it.ml[k]);
  }
};

struct Q3K {
  using Fmt = quant::Q3K;
  static constexpr int kChunkBytes = Fmt::kBytes;
  static constexpr bool kAligned16 = false;
  struct Item {
    uint32_t q[8];   // qs words 32 cc + 4 i, shifted right by 4 (c % 2)
    uint32_t hm[8];  // hmask words 4 i, shifted right by 2 c
    float dl[4];     // scale 4 c + k: d * (sc - 32)
  };
  __device__ static Item load(const uint8_t* b, int c) {
    Item it;
    lds_words_a2<32>(b + Fmt::kQs + 32 * (c >> 1), it.q);
    lds_words_a2<32>(b + Fmt::kHmask, it.hm);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      it.q[i] >>= 4 * (c & 1);
      it.hm[i] >>= 2 * c;
    }
    uint32_t sw[3];
    lds_words_a2<12>(b + Fmt::kScales, sw);
    // scales 4 c + k (k < 4): low nibbles from nibble c / 2 of bytes 4 (c % 2) + k, high bits at
    // shift 2 c of bytes 8 + k
    const uint32_t sc = quant::nibbles(sw[c & 1], c >> 1) | ((sw[2] >> (2 * c)) & 0x03030303u) << 4;
    const float d = f16_bits_to_f32_fast(lds_u16_a2(b + Fmt::kD));
#pragma unroll
    for (int k = 0; k < 4; ++k) it.dl[k] = d * byte_to_float(sc, k, 32.0f);
    return it;
  }
  template <int t>
  __device__ static void dequant(const Item& it, float (&v)[4]) {
    constexpr int h = t & 1, i = t >> 1, k = 2 * h + (i >> 2);
    const uint32_t q = ((it.q[i] >> (2 * h)) & 0x03030303u) | ((it.hm[i] >> h) & 0x01010101u) << 2;
#pragma unroll
    for (int e = 0; e < 4; ++e) v[e] = byte_to_float(q, e, 4.0f) * it.dl[k];
  }
};

// IQ4_XS (d | scales_h | scales_l[4] | qs[128], 136 bytes, 8-byte aligned): one super-block per
// chunk. Thread c's columns are sub-blocks 2 c + h, h = t & 1: qs[32 c + 16 h, +16), column
// l = 4 (t >> 1) + e the low (l < 16) or high nibble of byte l % 16.
struct IQ4XS {
  using Fmt = quant::IQ4XS;
  static constexpr int kChunkBytes = Fmt::kBytes;
  static constexpr bool kAligned16 = false;
  struct Item {
    uint32_t q[8];  // qs words 32 c + 4 i
    float dl[2];    // sub-block 2 c + h: d * (ls - 32)
  };
  __device__ static Item load(const uint8_t* b, int c) {
    Item it;
    lds_words_a2<32>(b + Fmt::kQs + 32 * c, it.q);
    const float d = f16_bits_to_f32_fast(lds_u16_a2(b + Fmt::kD));
    const uint32_t sh = lds_u16_a2(b + Fmt::kScalesH), sl = b[Fmt::kScalesL + c];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t ls = ((sl >> (4 * h)) & 0x0fu) | ((sh >> (2 * (2 * c + h))) & 3u) << 4;
      it.dl[h] = d * static_cast<float>(static_cast<int>(ls) - 32);
    }
    return it;
  }
  template <int t>
  __device__ static void dequant(const Item& it, float (&v)[4]) {
    constexpr int h = t & 1, i = t >> 1;
    const uint32_t v8 =
        quant::iq4_values4(quant::nibbles(it.q[4 * h + (i & 3)], i >> 2)) ^ 0x80808080u;
#pragma unroll
    for (int e = 0; e < 4; ++e) v[e] = byte_to_float(v8, e, 128.0f) * it.dl[h];
  }
};

static_assert(Q4K::kChunkBytes % 16 == 0 && Q5K::kChunkBytes % 16 == 0 &&
              Q8_0::kChunkBytes % 16 == 0 && Q4_0::kChunkBytes % 16 == 0 &&
              Q4_1::kChunkBytes % 16 == 0 && Q5_0::kChunkBytes % 16 == 0 &&
              Q5_1::kChunkBytes % 16 == 0 && IQ4NL::kChunkBytes % 16 == 0);

// f.template operator()<T>() with T the traits of a qmm type (qmm_supported's list).
template <class F>
void with_format(GgmlType type, F&& f) {
  switch (type) {
    case GgmlType::Q4_K: f.template operator()<Q4K>(); break;
    case GgmlType::Q6_K: f.template operator()<Q6K>(); break;
    case GgmlType::Q8_0: f.template operator()<Q8_0>(); break;
    case GgmlType::Q4_0: f.template operator()<Q4_0>(); break;
    case GgmlType::Q4_1: f.template operator()<Q4_1>(); break;
    case GgmlType::Q5_0: f.template operator()<Q5_0>(); break;
    case GgmlType::Q5_1: f.template operator()<Q5_1>(); break;
    case GgmlType::Q5_K: f.template operator()<Q5K>(); break;
    case GgmlType::Q2_K: f.template operator()<Q2K>(); break;
    case GgmlType::Q3_K: f.template operator()<Q3K>(); break;
    case GgmlType::IQ4_NL: f.template operator()<IQ4NL>(); break;
    default: f.template operator()<IQ4XS>(); break;
  }
}

}  // namespace rz::gpu::qmm_detail

// gemv for Q2_K (84-byte super-blocks of 256 elements) and Q3_K (110 bytes): traits for the
// generic kernel in kernels/gemv_common.cuh.
//
// Both keep 2-bit quants the same way: element 128 c + 32 j + l (c < 2, j < 4, l < 32) has the
// bits at shift 2 j of qs[32 c + l], and the 16 elements from 16 k share scale k = 8 c + 2 j +
// l / 16.
//   Q2_K: scales[16] | qs[64] | d, dmin. Value (d * (scales[k] & 15)) * q - dmin * (scales[k] >>
//   4). Q3_K: hmask[32] | qs[64] | scales[12] | d. Value d * (sc[k] - 32) * (q - 4 + 4 h), h bit
//         4 c + j of hmask[l]; sc[k] is 6 bits: the low nibble of scales[k] (k < 8) or the high
//         nibble of scales[k - 8], and above it the 2 bits at shift 2 (k / 4) of scales[8 + k % 4].
// Work split: 8 lanes per block; lane p has c = p / 4 and l in l0 + [0, 8), l0 = 8 (p % 4): the
// qs words at 32 c + l0 (+ 4), for Q3_K the hmask words at l0 (+ 4), and the four scales
// k = 8 c + 2 j + (p % 4) / 2. Chunk m = 2 j + w covers columns 128 c + 32 j + l0 + 4 w + [0, 4).
// Q2_K blocks are 4-byte aligned, Q3_K's only 2-byte aligned (load_words_a2).
#include "kernels/gemv_common.cuh"
#include "kernels/quant_decode.cuh"

namespace rz::gpu::gemv_detail {
namespace {

__device__ __forceinline__ int chunk_col_2bit(int part, int m) {
  return 128 * (part >> 2) + 32 * (m >> 1) + 8 * (part & 3) + 4 * (m & 1);
}

struct Q2K {
  using Fmt = quant::Q2K;
  static_assert(Fmt::kScales == 0 && Fmt::kQs == 16 && Fmt::kD == 80 && Fmt::kDmin == 82);
  static constexpr int kBlockElems = Fmt::kElems;
  static constexpr int kBlockBytes = Fmt::kBytes;
  static constexpr int kParts = 8;
  static constexpr int kChunks = 8;
  static constexpr int kUnroll = 2;
  static constexpr int kMaxRows = 2;  // 4 spills at batch >= 8

  struct Item {
    float dl[4], ml[4];  // [j]: d * scale and dmin * min of scale 8 c + 2 j + (p % 4) / 2
    uint32_t q[2];       // qs words at 32 c + l0 + 4 w
  };

  __device__ static Item load(const uint8_t* blk, int part) {
    const int c = part >> 2, l0 = 8 * (part & 3), half = (part & 3) >> 1;
    const auto* qs = reinterpret_cast<const uint32_t*>(blk + Fmt::kQs + 32 * c + l0);
    const auto* sc = reinterpret_cast<const uint32_t*>(blk + Fmt::kScales + 8 * c);
    const uint32_t dd = __ldg(reinterpret_cast<const uint32_t*>(blk + Fmt::kD));
    Item it;
    it.q[0] = __ldg(qs);
    it.q[1] = __ldg(qs + 1);
    const uint32_t s[2] = {__ldg(sc), __ldg(sc + 1)};  // scales[8 c + 4 i + b] = byte b of s[i]
    const float d = f16_bits_to_f32_fast(dd & 0xffffu), dmin = f16_bits_to_f32_fast(dd >> 16);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int b = 2 * j + half;  // scale 8 c + b
      const uint32_t w = s[b >> 2];
      it.dl[j] = d * byte_to_float(w & 0x0f0f0f0fu, b & 3);
      it.ml[j] = dmin * byte_to_float((w >> 4) & 0x0f0f0f0fu, b & 3);
    }
    return it;
  }

  __device__ static float4 dequant(const Item& it, int m) {
    const int j = m >> 1;
    const uint32_t q = (it.q[m & 1] >> (2 * j)) & 0x03030303u;
    const float dl = it.dl[j], ml = it.ml[j];
    return make_float4(dl * byte_to_float(q, 0) - ml, dl * byte_to_float(q, 1) - ml,
                       dl * byte_to_float(q, 2) - ml, dl * byte_to_float(q, 3) - ml);
  }

  __device__ static int chunk_col(int part, int m) { return chunk_col_2bit(part, m); }
};

struct Q3K {
  using Fmt = quant::Q3K;
  static_assert(Fmt::kHmask == 0 && Fmt::kQs == 32 && Fmt::kScales == 96 && Fmt::kD == 108);
  static constexpr int kBlockElems = Fmt::kElems;
  static constexpr int kBlockBytes = Fmt::kBytes;
  static constexpr int kParts = 8;
  static constexpr int kChunks = 8;
  static constexpr int kUnroll = 2;
  static constexpr int kMaxRows = 2;  // 4 spills at batch >= 8

  struct Item {
    float dl[4];     // [j]: d * (sc[8 c + 2 j + (p % 4) / 2] - 32)
    uint32_t q[2];   // qs words at 32 c + l0 + 4 w
    uint32_t hm[2];  // hmask words at l0 + 4 w, shifted right by 4 c (bit j of each byte)
  };

  __device__ static Item load(const uint8_t* blk, int part) {
    const int c = part >> 2, l0 = 8 * (part & 3), half = (part & 3) >> 1;
    Item it;
    load_words_a2<8>(blk + Fmt::kQs + 32 * c + l0, it.q);
    load_words_a2<8>(blk + Fmt::kHmask + l0, it.hm);
    it.hm[0] >>= 4 * c;
    it.hm[1] >>= 4 * c;
    uint32_t sw[3];  // scales[0, 12)
    load_words_a2<12>(blk + Fmt::kScales, sw);
    const float d = f16_bits_to_f32_fast(load_u16_a2(blk + Fmt::kD));
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      // k = 8 c + b: its low nibble is nibble c of scales[b], its high bits at shift
      // 2 (2 c + b / 4) of scales[8 + b % 4]
      const int b = 2 * j + half;
      const uint32_t lo = quant::nibbles(sw[b >> 2], c) >> (8 * (b & 3)) & 0x0fu;
      const uint32_t hi = sw[2] >> (8 * (b & 3) + 2 * (2 * c + (b >> 2))) & 3u;
      it.dl[j] = d * static_cast<float>(static_cast<int>(lo | hi << 4) - 32);
    }
    return it;
  }

  __device__ static float4 dequant(const Item& it, int m) {
    const int j = m >> 1, w = m & 1;
    const uint32_t q = ((it.q[w] >> (2 * j)) & 0x03030303u) | ((it.hm[w] >> j) & 0x01010101u) << 2;
    const float dl = it.dl[j];
    return make_float4(dl * byte_to_float(q, 0, 4.0f), dl * byte_to_float(q, 1, 4.0f),
                       dl * byte_to_float(q, 2, 4.0f), dl * byte_to_float(q, 3, 4.0f));
  }

  __device__ static int chunk_col(int part, int m) { return chunk_col_2bit(part, m); }
};

}  // namespace

const Family& family_q2_k() {
  static constexpr Family f = make_family<Q2K>();
  return f;
}

const Family& family_q3_k() {
  static constexpr Family f = make_family<Q3K>();
  return f;
}

}  // namespace rz::gpu::gemv_detail

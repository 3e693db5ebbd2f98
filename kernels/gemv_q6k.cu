// gemv for Q6_K weights (210-byte super-blocks of 256 elements): traits for the generic kernel in
// kernels/gemv_common.cuh.
//
// Block: ql[128] | qh[64] | scales[16] (int8) | d (fp16). Element 128 c + 32 k + l (c < 2, k < 4,
// l < 32) = d * scales[8 c + 2 k + l / 16] * (q - 32), q's low 4 bits the nibble k / 2 of
// ql[64 c + 32 (k % 2) + l] and its high 2 bits at shift 2 k of qh[32 c + l].
// Work split: 8 lanes per block; lane p owns l in [4 p, 4 p + 4) for every (c, k): the words
// ql[64 c + 32 (k % 2) + 4 p] and qh[32 c + 4 p], the scales 8 c + 2 k + p / 4, and d. So for
// each chunk the 8 lanes of a block read 32 consecutive floats of x (one 128-byte line). Blocks
// are only 2-byte aligned (210 bytes): words are read as aligned words and shifted.
#include "kernels/gemv_common.cuh"
#include "kernels/quant_decode.cuh"

namespace rz::gpu::gemv_detail {
namespace {

using Fmt = quant::Q6K;  // layout and quant unpacking

struct Q6K {
  static constexpr int kBlockElems = Fmt::kElems;
  static constexpr int kBlockBytes = Fmt::kBytes;
  static constexpr int kParts = 8;
  static constexpr int kChunks = 8;  // chunk m = 4 c + k: columns 128 c + 32 k + 4 p + [0, 4)
  static constexpr int kUnroll = 2;
  static constexpr int kMaxRows = 4;

  struct Item {
    float ds[8];     // [4 c + k] d * scales[8 c + 2 k + p / 4]
    uint32_t ql[4];  // [2 c + k % 2] ql word at 64 c + 32 (k % 2) + 4 p
    uint32_t qh[2];  // [c] qh word at 32 c + 4 p
  };

  __device__ static Item load(const uint8_t* blk, int part) {
    Item it;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
#pragma unroll
      for (int odd = 0; odd < 2; ++odd) {
        uint32_t w[1];
        // ql[Fmt::ql_byte(c, odd, 4 p)], the sum written out: grouped through the helper, nvcc
        // schedules this loop differently (see the static_assert below the struct)
        load_words_a2<4>(blk + Fmt::kQl + 64 * c + 32 * odd + 4 * part, w);
        it.ql[2 * c + odd] = w[0];
      }
      uint32_t w[1];
      load_words_a2<4>(blk + Fmt::kQh + Fmt::qh_byte(c, 0) + 4 * part, w);
      it.qh[c] = w[0];
    }
    uint32_t sc[4];  // scales[0, 16)
    load_words_a2<16>(blk + Fmt::kScales, sc);
    const float d = f16_bits_to_f32_fast(load_u16_a2(blk + Fmt::kD));
    const int l0 = 16 * (part >> 2);  // the lane's columns 4 p + [0, 4) share the scale of l0
#pragma unroll
    for (int c = 0; c < 2; ++c)
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int j = Fmt::scale_index(c, k, l0);  // byte of scales[]
        it.ds[4 * c + k] = d * byte_to_float(sc[j >> 2] ^ 0x80808080u, j & 3, 128.0f);  // int8
      }
    return it;
  }

  __device__ static float4 dequant(const Item& it, int m) {
    const int c = m >> 2, k = m & 3;
    const uint32_t q = Fmt::quants(it.ql[2 * c + (k & 1)], it.qh[c], k);  // four 6-bit values
    const float ds = it.ds[m];
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = ds * byte_to_float(q, i, 32.0f);
    return make_float4(v[0], v[1], v[2], v[3]);
  }

  __device__ static int chunk_col(int part, int m) {
    return 128 * (m >> 2) + 32 * (m & 3) + 4 * part;
  }
};

constexpr bool ql_offsets_match() {
  for (int c = 0; c < 2; ++c)
    for (int odd = 0; odd < 2; ++odd)
      if (Fmt::ql_byte(c, odd, 0) != 64 * c + 32 * odd) return false;
  return true;
}
static_assert(ql_offsets_match(), "Q6K::load's ql offsets are quant::Q6K's");

}  // namespace

const Family& family_q6_k() {
  static constexpr Family f = make_family<Q6K>();
  return f;
}

}  // namespace rz::gpu::gemv_detail

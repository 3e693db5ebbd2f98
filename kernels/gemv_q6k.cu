// gemv for Q6_K weights (210-byte super-blocks of 256 elements): traits for the generic kernel in
// kernels/gemv_common.cuh.
//
// Block: ql[128] | qh[64] | scales[16] (int8) | d (fp16). Element 128 c + 32 k + l (c < 2, k < 4,
// l < 32) = d * scales[8 c + 2 k + l / 16] * (q - 32), q's low 4 bits the nibble k / 2 of
// ql[64 c + 32 (k % 2) + l] and its high 2 bits at shift 2 k of qh[32 c + l].
// Work split: 8 lanes per block; lane part p = 4 c + g owns l in [8 g, 8 g + 8) for every k:
// 8 bytes of ql for k = 0, 2, 8 of ql for k = 1, 3, 8 of qh, 4 scales and d. Blocks are only
// 2-byte aligned (210 bytes), so the 8-byte pieces are read as aligned words and shifted.
#include "kernels/gemv_common.cuh"
#include "model/quant_blocks.hpp"

namespace rz::gpu::gemv_detail {
namespace {

struct Q6K {
  static constexpr int kBlockElems = QK_K;
  static constexpr int kBlockBytes = sizeof(BlockQ6_K);
  static constexpr int kParts = 8;
  static constexpr int kChunks = 8;  // chunk 2 k + j: columns 128 c + 32 k + 8 g + 4 j + [0, 4)

  struct Item {
    float ds[4];     // d * scales[8 c + 2 k + g / 2] for k = 0..3
    uint32_t ql0[2]; // ql[64 c + 8 g, +8): k = 0 (low nibbles), k = 2 (high nibbles)
    uint32_t ql1[2]; // ql[64 c + 32 + 8 g, +8): k = 1, k = 3
    uint32_t qh[2];  // qh[32 c + 8 g, +8)
  };

  __device__ static Item load(const uint8_t* blk, int part) {
    const int c = part >> 2, g = part & 3;
    Item it;
    load_words_a2<8>(blk + 64 * c + 8 * g, it.ql0);
    load_words_a2<8>(blk + 64 * c + 32 + 8 * g, it.ql1);
    load_words_a2<8>(blk + 128 + 32 * c + 8 * g, it.qh);
    uint32_t sc[2];  // scales[8 c, +8)
    load_words_a2<8>(blk + 192 + 8 * c, sc);
    const float d = half_bits_to_float(load_u16(blk + 208));
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int j = 2 * k + (g >> 1);  // byte of scales[8 c, +8)
      const int8_t s = static_cast<int8_t>(byte_of(sc[j >> 2], j & 3));
      it.ds[k] = d * static_cast<float>(s);
    }
    return it;
  }

  __device__ static float4 dequant(const Item& it, int m) {
    const int k = m >> 1, j = m & 1;
    const uint32_t lo = ((k & 1) ? it.ql1[j] : it.ql0[j]) >> (4 * (k >> 1));
    const uint32_t hi = it.qh[j] >> (2 * k);
    const float ds = it.ds[k];
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int q = static_cast<int>(((lo >> (8 * i)) & 0x0fu) | (((hi >> (8 * i)) & 3u) << 4)) - 32;
      v[i] = ds * static_cast<float>(q);
    }
    return make_float4(v[0], v[1], v[2], v[3]);
  }

  __device__ static int chunk_col(int part, int m) {
    const int c = part >> 2, g = part & 3;
    return 128 * c + 32 * (m >> 1) + 8 * g + 4 * (m & 1);
  }
};

}  // namespace

const Family& family_q6_k() {
  static constexpr Family f = make_family<Q6K>();
  return f;
}

}  // namespace rz::gpu::gemv_detail

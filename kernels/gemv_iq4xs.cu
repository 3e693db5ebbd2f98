// gemv for IQ4_XS (136-byte super-blocks of 256 elements): traits for the generic kernel in
// kernels/gemv_common.cuh.
//
// Block: d (fp16) | scales_h (u16) | scales_l[4] | qs[128]. Sub-block s (32 elements) has the
// 6-bit scale ls = nibble s % 2 of scales_l[s / 2] | bits 2 s, 2 s + 1 of scales_h << 4; its
// element l = d * (ls - 32) * kIq4Values[q], q the low (l < 16) or high nibble of
// qs[16 s + l % 16].
//
// Work split: 8 lanes per block; lane p = 4 g + w reads the 8-byte header (blocks are 8-byte
// aligned) and, for j < 4, the word w of sub-block 2 j + g: qs[16 (2 j + g) + 4 w, +4). Chunk
// m = 2 j + hi takes that word's low (hi = 0) or high nibbles, columns 32 (2 j + g) + 16 hi + 4 w
// + [0, 4): for each chunk the 8 lanes of a block read two runs of 16 consecutive floats of x
// (a sub-block keeps its two nibble halves 16 columns apart, so one run of 32 would need every
// word loaded twice).
#include "kernels/gemv_common.cuh"
#include "kernels/quant_decode.cuh"

namespace rz::gpu::gemv_detail {
namespace {

struct IQ4XS {
  using Fmt = quant::IQ4XS;
  static_assert(Fmt::kD == 0 && Fmt::kScalesH == 2 && Fmt::kScalesL == 4 && Fmt::kQs == 8);
  static constexpr int kBlockElems = Fmt::kElems;
  static constexpr int kBlockBytes = Fmt::kBytes;
  static constexpr int kParts = 8;
  static constexpr int kChunks = 8;
  static constexpr int kUnroll = 2;
  static constexpr int kMaxRows = 4;

  struct Item {
    float dl[4];    // [j]: d * (ls - 32) of sub-block 2 j + g
    uint32_t q[4];  // [j]: qs word at 16 (2 j + g) + 4 w
  };

  __device__ static Item load(const uint8_t* blk, int part) {
    const int g = part >> 2, w = part & 3;
    const uint2 hd = __ldg(reinterpret_cast<const uint2*>(blk));
    const float d = f16_bits_to_f32_fast(hd.x & 0xffffu);
    Item it;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int s = 2 * j + g;
      it.q[j] = __ldg(reinterpret_cast<const uint32_t*>(blk + Fmt::kQs + 16 * s + 4 * w));
      // scales_l[j] holds sub-blocks 2 j (low nibble) and 2 j + 1 (high): byte j of hd.y
      const uint32_t lo = (hd.y >> (8 * j + 4 * g)) & 0x0fu;
      const uint32_t hi = (hd.x >> (16 + 2 * s)) & 3u;
      it.dl[j] = d * static_cast<float>(static_cast<int>(lo | hi << 4) - 32);
    }
    return it;
  }

  __device__ static float4 dequant(const Item& it, int m) {
    const int j = m >> 1;
    const uint32_t v8 = quant::iq4_values4(quant::nibbles(it.q[j], m & 1)) ^ 0x80808080u;
    const float dl = it.dl[j];
    return make_float4(dl * byte_to_float(v8, 0, 128.0f), dl * byte_to_float(v8, 1, 128.0f),
                       dl * byte_to_float(v8, 2, 128.0f), dl * byte_to_float(v8, 3, 128.0f));
  }

  __device__ static int chunk_col(int part, int m) {
    return 32 * (2 * (m >> 1) + (part >> 2)) + 16 * (m & 1) + 4 * (part & 3);
  }
};

}  // namespace

const Family& family_iq4_xs() {
  static constexpr Family f = make_family<IQ4XS>();
  return f;
}

}  // namespace rz::gpu::gemv_detail

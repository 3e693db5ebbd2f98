// gemv for Q4_K weights (144-byte super-blocks of 256 elements): traits for the generic kernel in
// kernels/gemv_common.cuh.
//
// Block: d, dmin (fp16) | 12 bytes of packed 6-bit (scale, min) for 8 sub-blocks | qs[128].
// Element 32 s + l (sub-block s, l < 32) = d * sc[s] * nibble - dmin * mn[s], its nibble the low
// (s even) or high (s odd) half of qs[32 (s / 2) + l].
// Work split: 8 lanes per block; lane part p = 2 c + h reads the 16-byte header and the 16 bytes
// qs[32 c + 16 h, +16), i.e. columns 64 c + 16 h + [0, 16) (low nibbles, sub-block 2 c) and
// 64 c + 32 + 16 h + [0, 16) (high nibbles, sub-block 2 c + 1). Blocks are 16-byte aligned when
// the tensor is (144 = 9 * 16), so both reads are single 16-byte loads.
#include "kernels/gemv_common.cuh"
#include "model/quant_blocks.hpp"

namespace rz::gpu::gemv_detail {
namespace {

struct Q4K {
  static constexpr int kBlockElems = QK_K;
  static constexpr int kBlockBytes = sizeof(BlockQ4_K);
  static constexpr int kParts = 8;
  static constexpr int kChunks = 8;

  struct Item {
    float ds0, ms0, ds1, ms1;  // d * scale and dmin * min of sub-blocks 2 c and 2 c + 1
    uint32_t q[4];             // 16 bytes of qs
  };

  // Byte j (0..11) of the packed scales, held in three words.
  __device__ static uint32_t scale_byte(const uint4& h, int j) {
    const uint32_t wd = j < 4 ? h.y : j < 8 ? h.z : h.w;
    return byte_of(wd, j & 3);
  }

  // 6-bit scale and min of sub-block s (0..7), as model/quants_k.cpp's unpack_scale_min_k4.
  __device__ static void scale_min(const uint4& h, int s, uint32_t* sc, uint32_t* mn) {
    if (s < 4) {
      *sc = scale_byte(h, s) & 63u;
      *mn = scale_byte(h, s + 4) & 63u;
    } else {
      const uint32_t lo = scale_byte(h, s + 4);
      *sc = (lo & 0x0fu) | ((scale_byte(h, s - 4) >> 6) << 4);
      *mn = (lo >> 4) | ((scale_byte(h, s) >> 6) << 4);
    }
  }

  __device__ static Item load(const uint8_t* blk, int part) {
    const uint4 h = __ldg(reinterpret_cast<const uint4*>(blk));
    const int c = part >> 1, half = part & 1;
    const uint4 q = __ldg(reinterpret_cast<const uint4*>(blk + 16 + 32 * c + 16 * half));
    const float d = half_bits_to_float(h.x & 0xffffu), dmin = half_bits_to_float(h.x >> 16);
    uint32_t sc0, mn0, sc1, mn1;
    scale_min(h, 2 * c, &sc0, &mn0);
    scale_min(h, 2 * c + 1, &sc1, &mn1);
    Item it;
    it.ds0 = d * static_cast<float>(sc0);
    it.ms0 = dmin * static_cast<float>(mn0);
    it.ds1 = d * static_cast<float>(sc1);
    it.ms1 = dmin * static_cast<float>(mn1);
    it.q[0] = q.x;
    it.q[1] = q.y;
    it.q[2] = q.z;
    it.q[3] = q.w;
    return it;
  }

  // Chunks 0..3: low nibbles of word k (sub-block 2 c); 4..7: high nibbles of word k - 4.
  __device__ static float4 dequant(const Item& it, int k) {
    const uint32_t wd = it.q[k & 3] >> (k < 4 ? 0 : 4);
    const float ds = k < 4 ? it.ds0 : it.ds1, ms = k < 4 ? it.ms0 : it.ms1;
    return make_float4(ds * static_cast<float>(wd & 0x0fu) - ms,
                       ds * static_cast<float>((wd >> 8) & 0x0fu) - ms,
                       ds * static_cast<float>((wd >> 16) & 0x0fu) - ms,
                       ds * static_cast<float>((wd >> 24) & 0x0fu) - ms);
  }

  __device__ static int chunk_col(int part, int k) {
    const int c = part >> 1, half = part & 1;
    return 64 * c + (k < 4 ? 0 : 32) + 16 * half + 4 * (k & 3);
  }
};

}  // namespace

const Family& family_q4_k() {
  static constexpr Family f = make_family<Q4K>();
  return f;
}

}  // namespace rz::gpu::gemv_detail

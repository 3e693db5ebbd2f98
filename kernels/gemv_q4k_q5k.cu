// gemv for Q4_K (144-byte super-blocks of 256 elements) and Q5_K (176 bytes): traits for the
// generic kernel in kernels/gemv_common.cuh.
//
// Q4_K block: d, dmin (fp16) | 12 bytes of packed 6-bit (scale, min) for 8 sub-blocks | qs[128].
// Element 32 s + l (sub-block s, l < 32) = d * sc[s] * q - dmin * mn[s], q the low (s even) or
// high (s odd) nibble of qs[32 (s / 2) + l]. Q5_K: the same header, then qh[32], then qs[128];
// bit s of qh[l] is the fifth bit of element 32 s + l's quant.
// Work split: 8 lanes per block; lane p reads the 16-byte header, the words qs[32 j + 4 p, +4)
// for j < 4 (and, for Q5_K, the word qh[4 p, +4)), i.e. columns 64 j + 4 p + [0, 4) (low
// nibbles, sub-block 2 j) and 64 j + 32 + 4 p + [0, 4) (high nibbles, sub-block 2 j + 1). So for
// each chunk the 8 lanes of a block read 32 consecutive floats of x (one 128-byte line) and 32
// consecutive bytes of qs.
#include <type_traits>

#include "kernels/gemv_common.cuh"
#include "kernels/quant_decode.cuh"

namespace rz::gpu::gemv_detail {
namespace {

template <bool kQ5>
struct Q45K {
  using Fmt = std::conditional_t<kQ5, quant::Q5K, quant::Q4K>;
  static_assert(Fmt::kD == 0 && Fmt::kDmin == 2 && Fmt::kScales == 4, "the header is one uint4");
  static constexpr int kBlockElems = Fmt::kElems;
  static constexpr int kBlockBytes = Fmt::kBytes;
  static constexpr int kParts = 8;
  static constexpr int kChunks = 8;  // chunk m = 2 j + hi: word j, low (hi = 0) or high nibbles
  static constexpr int kUnroll = 2;
  static constexpr int kMaxRows = 2;

  struct Item {
    float ds[8], ms[8];  // d * scale and dmin * min of sub-block s
    uint32_t q[4];       // qs words at 32 j + 4 p
    uint32_t h;          // Q5_K: the qh word at 4 p
  };

  __device__ static Item load(const uint8_t* blk, int part) {
    const uint4 hd = __ldg(reinterpret_cast<const uint4*>(blk));
    Item it;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      it.q[j] = __ldg(reinterpret_cast<const uint32_t*>(blk + Fmt::kQs + 32 * j + 4 * part));
    it.h = kQ5 ? __ldg(reinterpret_cast<const uint32_t*>(blk + quant::Q5K::kQh + 4 * part)) : 0u;
    const float d = f16_bits_to_f32_fast(hd.x & 0xffffu), dmin = f16_bits_to_f32_fast(hd.x >> 16);
    // The 12 scale bytes are hd.y, hd.z, hd.w; unpacked four at a time, one 6-bit value per byte.
    const quant::Q4K::ScalesMins sm = quant::Q4K::scales_mins(hd.y, hd.z, hd.w);
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      it.ds[s] = d * byte_to_float(sm.sc_lo, s);
      it.ms[s] = dmin * byte_to_float(sm.mn_lo, s);
      it.ds[s + 4] = d * byte_to_float(sm.sc_hi, s);
      it.ms[s + 4] = dmin * byte_to_float(sm.mn_hi, s);
    }
    return it;
  }

  __device__ static float4 dequant(const Item& it, int m) {
    const int j = m >> 1, hi = m & 1, s = 2 * j + hi;
    uint32_t q = quant::nibbles(it.q[j], hi);
    if constexpr (kQ5) q |= ((it.h >> s) & 0x01010101u) << 4;
    const float ds = it.ds[s], ms = it.ms[s];
    return make_float4(ds * byte_to_float(q, 0) - ms, ds * byte_to_float(q, 1) - ms,
                       ds * byte_to_float(q, 2) - ms, ds * byte_to_float(q, 3) - ms);
  }

  __device__ static int chunk_col(int part, int m) {
    return 64 * (m >> 1) + 32 * (m & 1) + 4 * part;
  }
};

static_assert(quant::Q4K::qs_byte(2, 0) == 32 && quant::Q4K::qs_byte(6, 0) == 96,
              "qs word j of a lane is at 32 j");

}  // namespace

const Family& family_q4_k() {
  static constexpr Family f = make_family<Q45K<false>>();
  return f;
}

const Family& family_q5_k() {
  static constexpr Family f = make_family<Q45K<true>>();
  return f;
}

}  // namespace rz::gpu::gemv_detail

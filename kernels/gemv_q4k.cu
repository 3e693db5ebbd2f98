// gemv for Q4_K weights (144-byte super-blocks of 256 elements): traits for the generic kernel in
// kernels/gemv_common.cuh.
//
// Block: d, dmin (fp16) | 12 bytes of packed 6-bit (scale, min) for 8 sub-blocks | qs[128].
// Element 32 s + l (sub-block s, l < 32) = d * sc[s] * nibble - dmin * mn[s], its nibble the low
// (s even) or high (s odd) half of qs[32 (s / 2) + l].
// Work split: 8 lanes per block; lane p reads the 16-byte header and the words qs[32 j + 4 p, +4)
// for j < 4, i.e. columns 64 j + 4 p + [0, 4) (low nibbles, sub-block 2 j) and 64 j + 32 + 4 p +
// [0, 4) (high nibbles, sub-block 2 j + 1). So for each chunk the 8 lanes of a block read 32
// consecutive floats of x (one 128-byte line) and 32 consecutive bytes of qs.
#include "kernels/gemv_common.cuh"
#include "kernels/quant_decode.cuh"

namespace rz::gpu::gemv_detail {
namespace {

using Fmt = quant::Q4K;  // layout and scale/min unpacking
static_assert(Fmt::kD == 0 && Fmt::kDmin == 2 && Fmt::kScales == 4, "the header is one uint4");

struct Q4K {
  static constexpr int kBlockElems = Fmt::kElems;
  static constexpr int kBlockBytes = Fmt::kBytes;
  static constexpr int kParts = 8;
  static constexpr int kChunks = 8;  // chunk m = 2 j + hi: word j, low (hi = 0) or high nibbles
  static constexpr int kUnroll = 2;
  static constexpr int kMaxRows = 2;

  struct Item {
    float ds[8], ms[8];  // d * scale and dmin * min of sub-block s
    uint32_t q[4];       // qs words at 32 j + 4 p
  };

  __device__ static Item load(const uint8_t* blk, int part) {
    const uint4 h = __ldg(reinterpret_cast<const uint4*>(blk));
    Item it;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      it.q[j] = __ldg(
          reinterpret_cast<const uint32_t*>(blk + Fmt::kQs + Fmt::qs_byte(2 * j, 0) + 4 * part));
    const float d = f16_bits_to_f32_fast(h.x & 0xffffu), dmin = f16_bits_to_f32_fast(h.x >> 16);
    // The 12 scale bytes are h.y, h.z, h.w; unpacked four at a time, one 6-bit value per byte.
    const Fmt::ScalesMins sm = Fmt::scales_mins(h.y, h.z, h.w);
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
    const uint32_t nib = quant::nibbles(it.q[j], hi);
    const float ds = it.ds[s], ms = it.ms[s];
    return make_float4(ds * byte_to_float(nib, 0) - ms, ds * byte_to_float(nib, 1) - ms,
                       ds * byte_to_float(nib, 2) - ms, ds * byte_to_float(nib, 3) - ms);
  }

  __device__ static int chunk_col(int part, int m) {
    return 64 * (m >> 1) + 32 * (m & 1) + 4 * part;
  }
};

}  // namespace

const Family& family_q4_k() {
  static constexpr Family f = make_family<Q4K>();
  return f;
}

}  // namespace rz::gpu::gemv_detail

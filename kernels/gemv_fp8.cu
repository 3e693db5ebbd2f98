// gemv for FP8 (E4M3) rows with a per-row fp32 scale (kernels/fp8.hpp): traits for the generic
// kernel in kernels/gemv_common.cuh, which multiplies each row's sums by its scale. A "block" is
// 16 elements (16 bytes, one vector load per lane), so cols must be a multiple of 16.
//
// Decoding without the conversion unit: byte b = s eeee mmm placed at the top of a word and
// shifted right arithmetically by 4 gives s at bit 31 (and copies above the exponent, masked
// off), eeee in the low four exponent bits and mmm in the top mantissa bits of an fp32, whose
// value is 2^(e - 127) (1 + m / 8), or for e = 0 the fp32 subnormal m 2^-129; times 2^120 both are
// exactly E4M3's 2^(e - 7) (1 + m / 8) and m 2^-9 (fp32 subnormals are kept: no -ftz). The
// NaN codes (0x7f, 0xff) read as +-480; kernels/fp8.hpp's rounding never writes them for finite
// inputs.
#include "kernels/gemv_common.cuh"

namespace rz::gpu::gemv_detail {
namespace {

__device__ __forceinline__ float e4m3_at_top(uint32_t top) {
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(top) >> 4) & 0x87f00000u;
  return __uint_as_float(bits) * 0x1p120f;
}

struct Fp8 {
  static constexpr int kBlockElems = 16;
  static constexpr int kBlockBytes = 16;
  static constexpr int kParts = 1;
  static constexpr int kChunks = 4;  // chunk k: elements 4 k .. 4 k + 3 (one word)
  static constexpr int kUnroll = 2;
  static constexpr int kMaxRows = 4;

  struct Item {
    uint32_t w[4];  // four codes per word, the lowest-addressed in the low byte
  };

  __device__ static Item load(const uint8_t* blk, int) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(blk));
    return Item{{v.x, v.y, v.z, v.w}};
  }

  __device__ static float4 dequant(const Item& it, int k) {
    const uint32_t w = it.w[k];
    return make_float4(e4m3_at_top(w << 24), e4m3_at_top(w << 16), e4m3_at_top(w << 8),
                       e4m3_at_top(w));
  }

  __device__ static int chunk_col(int, int k) { return 4 * k; }
};

}  // namespace

const Family& family_fp8() {
  static constexpr Family f = make_family<Fp8>();
  return f;
}

}  // namespace rz::gpu::gemv_detail

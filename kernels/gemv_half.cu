// gemv for F16 and BF16 weights: traits for the generic kernel in kernels/gemv_common.cuh.
// A "block" here is 8 elements (16 bytes, one vector load per lane), so cols must be a multiple
// of 8 and rows then start 16-byte aligned. Conversions are exact (fp16 and bf16 values are all
// representable in fp32).
#include "kernels/gemv_common.cuh"

namespace rz::gpu::gemv_detail {
namespace {

template <bool kBf16>
struct Half {
  static constexpr int kBlockElems = 8;
  static constexpr int kBlockBytes = 16;
  static constexpr int kParts = 1;
  static constexpr int kChunks = 2;  // chunk k: elements 4 k .. 4 k + 3
  static constexpr int kUnroll = 2;
  static constexpr int kMaxRows = 4;

  struct Item {
    uint32_t h[4];  // two 16-bit values per word, the lower-addressed one in the low half
  };

  __device__ static Item load(const uint8_t* blk, int) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(blk));
    return Item{{v.x, v.y, v.z, v.w}};
  }

  __device__ static float to_float(uint32_t bits16) {
    return kBf16 ? bf16_bits_to_f32(bits16) : f16_bits_to_f32_fast(bits16);
  }

  __device__ static float4 dequant(const Item& it, int k) {
    const uint32_t a = it.h[2 * k], b = it.h[2 * k + 1];
    return make_float4(to_float(a & 0xffffu), to_float(a >> 16), to_float(b & 0xffffu),
                       to_float(b >> 16));
  }

  __device__ static int chunk_col(int, int k) { return 4 * k; }
};

}  // namespace

const Family& family_f16() {
  static constexpr Family f = make_family<Half<false>>();
  return f;
}

const Family& family_bf16() {
  static constexpr Family f = make_family<Half<true>>();
  return f;
}

}  // namespace rz::gpu::gemv_detail

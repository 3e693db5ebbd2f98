// gemv for the 32-element block formats Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and IQ4_NL: traits for the
// generic kernel in kernels/gemv_common.cuh.
//
//   Q8_0 (34 bytes): d (fp16) | qs[32] int8;      element j = qs[j] * d
//   Q4_0 (18 bytes): d (fp16) | qs[16];           element j = d * (nib - 8)
//   Q4_1 (20 bytes): d, m (fp16) | qs[16];        element j = d * nib + m
//   Q5_0 (22 bytes): d | qh[4] | qs[16];          element j = d * (q - 16)
//   Q5_1 (24 bytes): d, m | qh[4] | qs[16];       element j = d * q + m
//   IQ4_NL (18 bytes): d | qs[16];                element j = d * kIq4Values[nib]
// where nib of element j < 16 is the low nibble of qs[j], of element j + 16 the high nibble, and
// a Q5 quant q is nib plus bit j of the word qh as its fifth bit.
// Work split: one 4-byte word of qs per lane, so that the lanes of a block read consecutive
// floats of x: Q8_0 8 lanes per block (lane p: columns 4 p + [0, 4)), the 4-bit and 5-bit ones 4
// lanes per block (lane p: columns 4 p + [0, 4) and 16 + 4 p + [0, 4)). Blocks of 18, 22 or 34
// bytes are only 2-byte aligned, so words are read as aligned words and shifted (load_words_a2).
#include "kernels/gemv_common.cuh"
#include "kernels/quant_decode.cuh"

namespace rz::gpu::gemv_detail {
namespace {

struct Q8_0 {
  using Fmt = quant::Q8_0;
  static constexpr int kBlockElems = Fmt::kElems;
  static constexpr int kBlockBytes = Fmt::kBytes;
  static constexpr int kParts = 8;
  static constexpr int kChunks = 1;  // columns 4 p + [0, 4)
  static constexpr int kUnroll = 4;
  static constexpr int kMaxRows = 4;

  struct Item {
    float d;
    uint32_t q;  // qs[4 p, +4)
  };

  __device__ static Item load(const uint8_t* blk, int part) {
    uint32_t w[1];
    load_words_a2<4>(blk + Fmt::kQs + 4 * part, w);
    return Item{f16_bits_to_f32_fast(load_u16_a2(blk + Fmt::kD)), w[0]};
  }

  __device__ static float4 dequant(const Item& it, int) {
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = byte_to_float(it.q ^ 0x80808080u, i, 128.0f) * it.d;  // int8
    return make_float4(v[0], v[1], v[2], v[3]);
  }

  __device__ static int chunk_col(int part, int) { return 4 * part; }
};

// Q4_0 and Q4_1 share the nibble layout; kHasMin says how a nibble becomes a value.
template <bool kHasMin>
struct Q4Legacy {
  using Fmt = quant::Q4Legacy<kHasMin>;
  static constexpr int kBlockElems = Fmt::kElems;
  static constexpr int kBlockBytes = Fmt::kBytes;
  static constexpr int kParts = 4;
  static constexpr int kChunks = 2;  // chunk 0: low nibbles, columns 4 p; 1: high, 16 + 4 p
  static constexpr int kUnroll = 4;
  static constexpr int kMaxRows = 4;

  struct Item {
    float d, m;  // m = minimum (Q4_1); unused for Q4_0
    uint32_t q;  // qs[4 p, +4)
  };

  __device__ static Item load(const uint8_t* blk, int part) {
    Item it;
    it.d = f16_bits_to_f32_fast(load_u16_a2(blk + Fmt::kD));
    it.m = kHasMin ? f16_bits_to_f32_fast(load_u16_a2(blk + Fmt::kM)) : 0.0f;
    uint32_t w[1];
    load_words_a2<4>(blk + Fmt::kQs + 4 * part, w);
    it.q = w[0];
    return it;
  }

  __device__ static float4 dequant(const Item& it, int k) {
    const uint32_t nib = quant::nibbles(it.q, k);
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      v[i] = kHasMin ? it.d * byte_to_float(nib, i) + it.m : it.d * byte_to_float(nib, i, 8.0f);
    return make_float4(v[0], v[1], v[2], v[3]);
  }

  __device__ static int chunk_col(int part, int k) { return 16 * k + 4 * part; }
};

// Q5_0 and Q5_1: Q4_0 / Q4_1's nibbles with a fifth bit from qh; lane p keeps qh >> 4 p, so
// chunk k's four bits are at 16 k.
template <bool kHasMin>
struct Q5Legacy {
  using Fmt = quant::Q5Legacy<kHasMin>;
  static constexpr int kBlockElems = Fmt::kElems;
  static constexpr int kBlockBytes = Fmt::kBytes;
  static constexpr int kParts = 4;
  static constexpr int kChunks = 2;  // as Q4Legacy's
  static constexpr int kUnroll = 4;
  static constexpr int kMaxRows = 4;

  struct Item {
    float d, m;
    uint32_t q;  // qs[4 p, +4)
    uint32_t h;  // qh >> 4 p
  };

  __device__ static Item load(const uint8_t* blk, int part) {
    Item it;
    it.d = f16_bits_to_f32_fast(load_u16_a2(blk + Fmt::kD));
    it.m = kHasMin ? f16_bits_to_f32_fast(load_u16_a2(blk + Fmt::kM)) : 0.0f;
    uint32_t w[1], h[1];
    load_words_a2<4>(blk + Fmt::kQs + 4 * part, w);
    load_words_a2<4>(blk + Fmt::kQh, h);
    it.q = w[0];
    it.h = h[0] >> (4 * part);
    return it;
  }

  __device__ static float4 dequant(const Item& it, int k) {
    const uint32_t q = quant::nibbles(it.q, k) | quant::spread_bits4(it.h >> (16 * k)) << 4;
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      v[i] = kHasMin ? it.d * byte_to_float(q, i) + it.m : it.d * byte_to_float(q, i, 16.0f);
    return make_float4(v[0], v[1], v[2], v[3]);
  }

  __device__ static int chunk_col(int part, int k) { return 16 * k + 4 * part; }
};

// IQ4_NL: Q4_0's layout, each nibble looked up in kIq4Values (four at a time).
struct IQ4NL {
  using Fmt = quant::IQ4NL;
  static constexpr int kBlockElems = Fmt::kElems;
  static constexpr int kBlockBytes = Fmt::kBytes;
  static constexpr int kParts = 4;
  static constexpr int kChunks = 2;
  static constexpr int kUnroll = 4;
  static constexpr int kMaxRows = 4;

  struct Item {
    float d;
    uint32_t q;
  };

  __device__ static Item load(const uint8_t* blk, int part) {
    uint32_t w[1];
    load_words_a2<4>(blk + Fmt::kQs + 4 * part, w);
    return Item{f16_bits_to_f32_fast(load_u16_a2(blk + Fmt::kD)), w[0]};
  }

  __device__ static float4 dequant(const Item& it, int k) {
    const uint32_t v8 = quant::iq4_values4(quant::nibbles(it.q, k)) ^ 0x80808080u;  // int8
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = it.d * byte_to_float(v8, i, 128.0f);
    return make_float4(v[0], v[1], v[2], v[3]);
  }

  __device__ static int chunk_col(int part, int k) { return 16 * k + 4 * part; }
};

}  // namespace

const Family& family_q5_0() {
  static constexpr Family f = make_family<Q5Legacy<false>>();
  return f;
}

const Family& family_q5_1() {
  static constexpr Family f = make_family<Q5Legacy<true>>();
  return f;
}

const Family& family_iq4_nl() {
  static constexpr Family f = make_family<IQ4NL>();
  return f;
}

const Family& family_q8_0() {
  static constexpr Family f = make_family<Q8_0>();
  return f;
}

const Family& family_q4_0() {
  static constexpr Family f = make_family<Q4Legacy<false>>();
  return f;
}

const Family& family_q4_1() {
  static constexpr Family f = make_family<Q4Legacy<true>>();
  return f;
}

}  // namespace rz::gpu::gemv_detail

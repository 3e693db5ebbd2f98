// gemv_q8 (kernels/gemv_q8.hpp): the activation quantizer, the one generic dp4a kernel and a
// traits struct per weight type.
//
// A traits struct T says how a row's blocks split into work items and what one item does:
//   kBlockElems, kBlockBytes   one GGUF block
//   kParts                     lanes that share a block; lane part p of block i is item
//                              i * kParts + p
//   Item load(blk, part)       the item's weight bytes and scales (issued for several items
//                              before any is used, so loads are in flight together)
//   accumulate<B>(item, xq, ds, cols, part, acc)
//                              adds the item's products with each of the B activation rows: xq,
//                              ds point at the block's first quant and group pair of row 0
// Integer products go through dp4a (four int8 pairs and an add, one instruction); scales are
// applied once per item and activation group in fp32.
#include <algorithm>
#include <string>

#include "formats/common.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/cuda_common.cuh"
#include "kernels/gemv_common.cuh"
#include "kernels/gemv_q8.hpp"
#include "kernels/launch.cuh"
#include "kernels/q8_activation.cuh"
#include "kernels/quant_decode.cuh"

namespace rz::gpu {
namespace gemv_q8_detail {

constexpr int kWarps = 4;
constexpr uint32_t kLowNibbles = 0x0f0f0f0fu;

__device__ __forceinline__ int dot4(uint32_t a, uint32_t b, int c) {
  return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
}

// ---------------------------------------------------------------- the activation quantizer

// 8 lanes per group of 32, 4 elements (one float4) each (q8_quantize_quad, the format's one
// definition). Threads past the last group take part in the shuffles with zeros and write nothing.
__global__ void __launch_bounds__(256)
    quantize_x_q8_kernel(const float* __restrict__ x, uint32_t* __restrict__ q,
                         float2* __restrict__ ds, int64_t groups) {
  grid_dependency_sync();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t g = t >> 3;
  const bool active = g < groups;
  const Q8Quad qq =
      q8_quantize_quad(active ? __ldg(reinterpret_cast<const float4*>(x) + t) : float4{0, 0, 0, 0});
  if (!active) return;
  q[t] = qq.q;
  if ((t & 7) == 0) ds[g] = qq.ds;
}

// ---------------------------------------------------------------- weight types

// Q4_K (144 bytes, 16-byte aligned): d, dmin | 12 scale bytes | qs[128]. Part p (8 per block)
// takes qs[16 p, +16): for j = p / 2, h = p % 2, the low nibbles are elements 64 j + 16 h +
// [0, 16) of sub-block 2 j, the high nibbles the same offsets of sub-block 2 j + 1 (32 further
// on). The min term needs the whole sub-block's activation sum, which the group pair carries:
// the even part of each pair adds it.
struct Q4K {
  using Fmt = quant::Q4K;
  static constexpr int kBlockElems = Fmt::kElems;
  static constexpr int kBlockBytes = Fmt::kBytes;
  static constexpr int kParts = 8;
  struct Item {
    uint4 hdr;  // d, dmin (x) and the scale words (y, z, w)
    uint4 qs;
  };
  __device__ __forceinline__ static Item load(const uint8_t* blk, int part) {
    static_assert(Fmt::kD == 0 && Fmt::kDmin == 2 && Fmt::kScales == 4 && Fmt::kQs == 16);
    return {__ldg(reinterpret_cast<const uint4*>(blk)),
            __ldg(reinterpret_cast<const uint4*>(blk + Fmt::kQs + 16 * part))};
  }
  template <int B>
  __device__ __forceinline__ static void accumulate(const Item& it, const int8_t* xq,
                                                    const float2* ds, int64_t cols, int part,
                                                    float (&acc)[B]) {
    const int j = part >> 1, h = part & 1;
    const Fmt::ScalesMins sm = Fmt::scales_mins(it.hdr.y, it.hdr.z, it.hdr.w);
    const uint32_t scw = j < 2 ? sm.sc_lo : sm.sc_hi, mnw = j < 2 ? sm.mn_lo : sm.mn_hi;
    const int sh = 16 * (j & 1);  // sub-block 2 j is byte 2 (j % 2) of its word
    const float d = f16_bits_to_f32_fast(it.hdr.x & 0xffffu);
    const float dmin = f16_bits_to_f32_fast(it.hdr.x >> 16);
    const float d0 = d * static_cast<float>((scw >> sh) & 0xff);
    const float d1 = d * static_cast<float>((scw >> (sh + 8)) & 0xff);
    const float m0 = dmin * static_cast<float>((mnw >> sh) & 0xff);
    const float m1 = dmin * static_cast<float>((mnw >> (sh + 8)) & 0xff);
    const uint32_t qw[4] = {it.qs.x, it.qs.y, it.qs.z, it.qs.w};
#pragma unroll
    for (int b = 0; b < B; ++b) {
      const int8_t* xr = xq + b * cols + 64 * j + 16 * h;
      const int4 xa = __ldg(reinterpret_cast<const int4*>(xr));
      const int4 xb = __ldg(reinterpret_cast<const int4*>(xr + 32));
      const float4 g = __ldg(reinterpret_cast<const float4*>(ds + b * (cols / kQ8Group) + 2 * j));
      const uint32_t xav[4] = {uint32_t(xa.x), uint32_t(xa.y), uint32_t(xa.z), uint32_t(xa.w)};
      const uint32_t xbv[4] = {uint32_t(xb.x), uint32_t(xb.y), uint32_t(xb.z), uint32_t(xb.w)};
      int lo = 0, hi = 0;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        lo = dot4(qw[i] & kLowNibbles, xav[i], lo);
        hi = dot4((qw[i] >> 4) & kLowNibbles, xbv[i], hi);
      }
      float r = d0 * g.x * static_cast<float>(lo) + d1 * g.z * static_cast<float>(hi);
      if (h == 0) r -= m0 * g.y + m1 * g.w;
      acc[b] += r;
    }
  }
};

// Q6_K (210 bytes, 2-byte aligned): ql[128] | qh[64] | scales[16] int8 | d. Part p (8 per
// block) takes, for c = p / 4 and l0 = 8 (p % 4), the elements 128 c + 32 k + l0 + [0, 8) of
// every k < 4: the ql bytes 64 c + 32 (k % 2) + l0 + [0, 8) (nibble k / 2), the qh bytes
// 32 c + l0 + [0, 8) (bits 2 k) and the scale 8 c + 2 k + l0 / 16. Quants are 0..63 with an
// offset of 32, which a dp4a with a word of -32s takes off.
struct Q6K {
  using Fmt = quant::Q6K;
  static constexpr int kBlockElems = Fmt::kElems;
  static constexpr int kBlockBytes = Fmt::kBytes;
  static constexpr int kParts = 8;
  struct Item {
    uint32_t ql[2][2];  // [k % 2][word]
    uint32_t qh[2];
    uint32_t sc[2];  // scales 8 c + [0, 8)
    float d;
  };
  __device__ __forceinline__ static Item load(const uint8_t* blk, int part) {
    const int c = part >> 2, l0 = 8 * (part & 3);
    Item it;
    gemv_detail::load_words_a2<8>(blk + Fmt::kQl + Fmt::ql_byte(c, 0, l0), it.ql[0]);
    gemv_detail::load_words_a2<8>(blk + Fmt::kQl + Fmt::ql_byte(c, 1, l0), it.ql[1]);
    gemv_detail::load_words_a2<8>(blk + Fmt::kQh + Fmt::qh_byte(c, l0), it.qh);
    gemv_detail::load_words_a2<8>(blk + Fmt::kScales + 8 * c, it.sc);
    it.d = f16_bits_to_f32_fast(load_u16_a2(blk + Fmt::kD));
    return it;
  }
  template <int B>
  __device__ __forceinline__ static void accumulate(const Item& it, const int8_t* xq,
                                                    const float2* ds, int64_t cols, int part,
                                                    float (&acc)[B]) {
    constexpr uint32_t kMinus32 = 0xe0e0e0e0u;
    const int c = part >> 2, l0 = 8 * (part & 3);
    const int i0 = l0 >> 4;  // scale byte 2 k + i0 of the c half's eight
    uint32_t q[4][2];
    float dk[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      q[k][0] = Fmt::quants(it.ql[k & 1][0], it.qh[0], k);
      q[k][1] = Fmt::quants(it.ql[k & 1][1], it.qh[1], k);
      const int byte = 2 * (k & 1) + i0;
      const int sc = static_cast<int8_t>((it.sc[k >> 1] >> (8 * byte)) & 0xff);
      dk[k] = it.d * static_cast<float>(sc);
    }
#pragma unroll
    for (int b = 0; b < B; ++b) {
      const int8_t* xr = xq + b * cols + 128 * c + l0;
      const float4* gr = reinterpret_cast<const float4*>(ds + b * (cols / kQ8Group) + 4 * c);
      const float4 g01 = __ldg(gr), g23 = __ldg(gr + 1);
      const float dx[4] = {g01.x, g01.z, g23.x, g23.z};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int2 xv = __ldg(reinterpret_cast<const int2*>(xr + 32 * k));
        int a = dot4(kMinus32, uint32_t(xv.x), 0);
        a = dot4(kMinus32, uint32_t(xv.y), a);
        a = dot4(q[k][0], uint32_t(xv.x), a);
        a = dot4(q[k][1], uint32_t(xv.y), a);
        acc[b] += dk[k] * dx[k] * static_cast<float>(a);
      }
    }
  }
};

// Q8_0 (34 bytes, 2-byte aligned): d | qs[32] int8. Part p (2 per block) takes qs[16 p, +16).
struct Q8_0 {
  using Fmt = quant::Q8_0;
  static constexpr int kBlockElems = Fmt::kElems;
  static constexpr int kBlockBytes = Fmt::kBytes;
  static constexpr int kParts = 2;
  struct Item {
    uint32_t qs[4];
    float d;
  };
  __device__ __forceinline__ static Item load(const uint8_t* blk, int part) {
    Item it;
    gemv_detail::load_words_a2<16>(blk + Fmt::kQs + 16 * part, it.qs);
    it.d = f16_bits_to_f32_fast(load_u16_a2(blk + Fmt::kD));
    return it;
  }
  template <int B>
  __device__ __forceinline__ static void accumulate(const Item& it, const int8_t* xq,
                                                    const float2* ds, int64_t cols, int part,
                                                    float (&acc)[B]) {
#pragma unroll
    for (int b = 0; b < B; ++b) {
      const int4 xv = __ldg(reinterpret_cast<const int4*>(xq + b * cols + 16 * part));
      const float dx = __ldg(reinterpret_cast<const float*>(ds + b * (cols / kQ8Group)));
      int a = dot4(it.qs[0], uint32_t(xv.x), 0);
      a = dot4(it.qs[1], uint32_t(xv.y), a);
      a = dot4(it.qs[2], uint32_t(xv.z), a);
      a = dot4(it.qs[3], uint32_t(xv.w), a);
      acc[b] += it.d * dx * static_cast<float>(a);
    }
  }
};

// Q4_0 (18 bytes, 2-byte aligned): d | qs[16], element j = d (q - 8), q the low nibble of
// qs[j] (j < 16) or the high nibble of qs[j - 16]. Q4_1 (20 bytes, 4-byte aligned): d, m |
// qs[16], element j = d q + m. Part p (2 per block) takes qs[8 p, +8): elements 8 p + [0, 8)
// and 16 + 8 p + [0, 8). The offset (-8 d or m, times the group's activation sum) is added
// once, by part 0.
template <bool kHasMin>
struct Q4Legacy {
  using Fmt = quant::Q4Legacy<kHasMin>;
  static constexpr int kBlockElems = Fmt::kElems;
  static constexpr int kBlockBytes = Fmt::kBytes;
  static constexpr int kParts = 2;
  struct Item {
    uint32_t qs[2];
    float d, m;  // m: Q4_1's min, or -8 d
  };
  __device__ __forceinline__ static Item load(const uint8_t* blk, int part) {
    Item it;
    if constexpr (kHasMin) {  // 20-byte blocks: every field 4-byte aligned
      const uint32_t dm = __ldg(reinterpret_cast<const uint32_t*>(blk));
      const auto* qs = reinterpret_cast<const uint32_t*>(blk + Fmt::kQs + 8 * part);
      it.qs[0] = __ldg(qs);
      it.qs[1] = __ldg(qs + 1);
      it.d = f16_bits_to_f32_fast(dm & 0xffffu);
      it.m = f16_bits_to_f32_fast(dm >> 16);
    } else {
      gemv_detail::load_words_a2<8>(blk + Fmt::kQs + 8 * part, it.qs);
      it.d = f16_bits_to_f32_fast(load_u16_a2(blk + Fmt::kD));
      it.m = -8.0f * it.d;
    }
    return it;
  }
  template <int B>
  __device__ __forceinline__ static void accumulate(const Item& it, const int8_t* xq,
                                                    const float2* ds, int64_t cols, int part,
                                                    float (&acc)[B]) {
#pragma unroll
    for (int b = 0; b < B; ++b) {
      const int8_t* xr = xq + b * cols + 8 * part;
      const int2 xl = __ldg(reinterpret_cast<const int2*>(xr));
      const int2 xh = __ldg(reinterpret_cast<const int2*>(xr + 16));
      const float2 g = __ldg(ds + b * (cols / kQ8Group));
      int a = dot4(it.qs[0] & kLowNibbles, uint32_t(xl.x), 0);
      a = dot4(it.qs[1] & kLowNibbles, uint32_t(xl.y), a);
      a = dot4((it.qs[0] >> 4) & kLowNibbles, uint32_t(xh.x), a);
      a = dot4((it.qs[1] >> 4) & kLowNibbles, uint32_t(xh.y), a);
      float r = it.d * g.x * static_cast<float>(a);
      if (part == 0) r += it.m * g.y;
      acc[b] += r;
    }
  }
};

// ---------------------------------------------------------------- the kernel

// A warp is 32 / LPR groups of LPR lanes, one row each; a group's lanes take the row's work
// items sub, sub + LPR, ..., U at a time (all U items' weights are requested before the first
// is used). Rows past the end repeat the last row, and their sums are dropped.
// Grid: ceil(rows / (kWarps * 32 / LPR)) blocks of kWarps warps.
template <class T, int B, int LPR, int U>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_q8_kernel(const uint8_t* __restrict__ w, const int8_t* __restrict__ xq,
                   const float2* __restrict__ ds, float* __restrict__ y, int64_t rows,
                   int64_t cols) {
  grid_dependency_sync();
  const int lane = threadIdx.x & 31, sub = lane & (LPR - 1);
  const int64_t warp_row0 =
      (static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32) * (32 / LPR);
  if (warp_row0 >= rows) return;  // uniform across the warp
  const int64_t row0 = warp_row0 + lane / LPR;
  const int64_t row = row0 < rows ? row0 : rows - 1;
  const int nblk = static_cast<int>(cols / T::kBlockElems);
  const int items = nblk * T::kParts;
  const uint8_t* wrow = w + static_cast<size_t>(row) * nblk * T::kBlockBytes;

  float acc[B];
#pragma unroll
  for (int b = 0; b < B; ++b) acc[b] = 0.0f;

  for (int i0 = sub; i0 < items; i0 += LPR * U) {
    typename T::Item it[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = i0 + u * LPR;
      if (i < items)
        it[u] = T::load(wrow + static_cast<size_t>(i / T::kParts) * T::kBlockBytes, i % T::kParts);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = i0 + u * LPR;
      if (i < items) {
        const int blk = i / T::kParts;
        T::template accumulate<B>(it[u], xq + static_cast<size_t>(blk) * T::kBlockElems,
                                  ds + static_cast<size_t>(blk) * (T::kBlockElems / kQ8Group), cols,
                                  i % T::kParts, acc);
      }
    }
  }

#pragma unroll
  for (int b = 0; b < B; ++b) {
    const float s = group_sum<LPR>(acc[b]);
    if (sub == 0 && row0 < rows) y[static_cast<size_t>(b) * rows + row0] = s;
  }
}

using Launch = void (*)(const void* w, const void* xq, float* y, int64_t rows, int64_t cols,
                        cudaStream_t stream);

template <class T, int B, int LPR>
void launch(const void* w, const void* xq, float* y, int64_t rows, int64_t cols,
            cudaStream_t stream) {
  constexpr int kU = B == 1 ? 4 : 2;
  constexpr int64_t kRowsPerBlock = kWarps * (32 / LPR);
  const auto* q = static_cast<const int8_t*>(xq);
  const auto* ds = reinterpret_cast<const float2*>(q + B * cols);
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  launch_kernel(gemv_q8_kernel<T, B, LPR, kU>, static_cast<unsigned>(blocks), kWarps * 32, 0,
                stream, static_cast<const uint8_t*>(w), q, ds, y, rows, cols);
}

struct Family {
  int block_elems;
  int parts;
  Launch launch[2][kGemvQ8MaxBatch];  // [LPR 16, 32][batch - 1]
};

template <class T, int LPR, size_t... I>
constexpr void fill(Launch (&row)[kGemvQ8MaxBatch], std::index_sequence<I...>) {
  ((row[I] = &launch<T, int(I) + 1, LPR>), ...);
}

template <class T>
constexpr Family make_family() {
  Family f{T::kBlockElems, T::kParts, {}};
  fill<T, 16>(f.launch[0], std::make_index_sequence<kGemvQ8MaxBatch>());
  fill<T, 32>(f.launch[1], std::make_index_sequence<kGemvQ8MaxBatch>());
  return f;
}

const Family* family_of(GgmlType type) {
  static constexpr Family q4k = make_family<Q4K>(), q6k = make_family<Q6K>(),
                          q80 = make_family<Q8_0>(), q40 = make_family<Q4Legacy<false>>(),
                          q41 = make_family<Q4Legacy<true>>();
  switch (type) {
    case GgmlType::Q4_K: return &q4k;
    case GgmlType::Q6_K: return &q6k;
    case GgmlType::Q8_0: return &q80;
    case GgmlType::Q4_0: return &q40;
    case GgmlType::Q4_1: return &q41;
    default: return nullptr;
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// lanes: 0 = by the row's work items (16 when a row has fewer than 96, else 32), or 16 / 32.
void run(GgmlType type, const void* w, const void* xq, float* y, int64_t rows, int64_t cols,
         int batch, int lanes, cudaStream_t stream) {
  const auto what = [&] {
    return "gemv_q8 " + std::string(type_traits(type).name) + " [" + std::to_string(rows) + ", " +
           std::to_string(cols) + "] batch " + std::to_string(batch);
  };
  const Family* f = family_of(type);
  if (f == nullptr) throw Error(what() + ": no int8-activation kernel for this type");
  if (batch < 1 || batch > kGemvQ8MaxBatch)
    throw Error(what() + ": batch must be 1.." + std::to_string(kGemvQ8MaxBatch));
  if (rows < 1 || cols < 1 || cols > (int64_t{1} << 30) || rows > (int64_t{1} << 31))
    throw Error(what() + ": rows and cols must be in 1..2^31 and 1..2^30");
  if (cols % f->block_elems != 0)
    throw Error(what() + ": cols must be a multiple of " + std::to_string(f->block_elems));
  if (!aligned16(w) || !aligned16(xq) || (reinterpret_cast<uintptr_t>(y) & 3u) != 0)
    throw Error(what() + ": weights and activations must be 16-byte aligned, outputs 4-byte");
  if (lanes == 0) lanes = cols / f->block_elems * f->parts < 96 ? 16 : 32;
  if (lanes != 16 && lanes != 32) throw Error(what() + ": lanes per row must be 16 or 32");
  f->launch[lanes == 32][batch - 1](w, xq, y, rows, cols, stream);
  RZ_CUDA_CHECK_LAUNCH("gemv_q8_kernel");
}

// For the tests: a forced lanes-per-row choice.
void gemv_q8_with_lanes(GgmlType type, const void* w, const void* xq, float* y, int64_t rows,
                        int64_t cols, int batch, int lanes, cudaStream_t stream) {
  run(type, w, xq, y, rows, cols, batch, lanes, stream);
}

}  // namespace gemv_q8_detail

bool gemv_q8_supported(GgmlType type, int batch) {
  return gemv_q8_detail::family_of(type) != nullptr && batch >= 1 && batch <= kGemvQ8MaxBatch;
}

size_t q8_activation_bytes(int64_t n, int64_t cols) {
  return size_t(n) * size_t(cols) + size_t(n) * size_t(cols / kQ8Group) * sizeof(float) * 2;
}

void quantize_x_q8(const float* x, void* xq, int64_t n, int64_t cols, cudaStream_t stream) {
  if (n < 1 || cols < kQ8Group || cols % kQ8Group != 0)
    throw Error("quantize_x_q8: n must be >= 1 and cols a positive multiple of 32, got n " +
                std::to_string(n) + ", cols " + std::to_string(cols));
  if (!gemv_q8_detail::aligned16(x) || !gemv_q8_detail::aligned16(xq))
    throw Error("quantize_x_q8: x and xq must be 16-byte aligned");
  const int64_t groups = n * cols / kQ8Group;
  auto* q = static_cast<int8_t*>(xq);
  float2* ds = q8_pairs(xq, n, cols);
  const int64_t threads = groups * 8;
  launch_kernel(gemv_q8_detail::quantize_x_q8_kernel, static_cast<unsigned>((threads + 255) / 256),
                256, 0, stream, x, reinterpret_cast<uint32_t*>(q), ds, groups);
  RZ_CUDA_CHECK_LAUNCH("quantize_x_q8_kernel");
}

void gemv_q8(GgmlType type, const void* w, const void* xq, float* y, int64_t rows, int64_t cols,
             int batch, cudaStream_t stream) {
  gemv_q8_detail::run(type, w, xq, y, rows, cols, batch, 0, stream);
}

}  // namespace rz::gpu

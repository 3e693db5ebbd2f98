// A chunk's arithmetic in qmm's kernels (kernels/qmm.cu has the mma layout): what a thread keeps of
// a row's chunk (DirectItem), the integer form's steps (int_chunk) and the fp32 dequantization's
// (chunk_steps), the same definitions for the staged and the direct kernels, so that with equal
// splits their sums are the same bit for bit.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>
#include <utility>

#include "kernels/mma.cuh"
#include "kernels/qmm_formats.cuh"
#include "kernels/qmm_stage.cuh"

namespace rz::gpu::qmm_detail {

// Formats with an integer form (Q4_K, Q5_K, Q6_K: kernels/qmm_formats.cuh, IntItem) run it in
// both kernels: their A operand is the integer q * scale (Q6_K: (q - 32) * scale, rounded to
// fp16 above 2,048), the min and the super-block scales are applied per chunk in fp32, about half
// the instructions a weight of the fp32 dequantization (and for Q4_K / Q5_K no fp16 rounding of
// the weights).
template <class T>
concept IntForm = requires {
  typename T::IntItem;
};
// DirectItem<T>::type is what a thread multiplies; ::raw is what it requests a group ahead (for
// the integer forms only the loaded words, decoded when the chunk's turn comes, so that the
// registers of a chunk in flight hold no work waiting on its arrival).
template <class T>
struct DirectItem {
  using type = typename T::Item;
  using raw = typename T::Item;
};
template <IntForm T>
struct DirectItem<T> {
  using type = typename T::IntItem;
  using raw = typename T::IntRaw;
};

// Thread c's raw item of the chunk at b, and the item it decodes to (the integer form's where
// the format has one).
template <class T>
__device__ __forceinline__ typename DirectItem<T>::raw direct_raw(const uint8_t* b, int c) {
  if constexpr (IntForm<T>)
    return T::load_int_raw(b, c);
  else
    return T::load(b, c);
}
template <class T>
__device__ __forceinline__ typename DirectItem<T>::type direct_decode(
    const typename DirectItem<T>::raw& r, int c) {
  if constexpr (IntForm<T>)
    return T::int_item(r, c);
  else
    return r;
}
template <class T>
__device__ __forceinline__ typename DirectItem<T>::type direct_item(const uint8_t* b, int c) {
  return direct_decode<T>(direct_raw<T>(b, c), c);
}

// A chunk's 16 steps in the integer form (both kernels): an mma a step of q * scale, and one of
// the mins where the format has them (Q4_K, Q5_K), into the chunk's own sums, which are then
// scaled by d and dmin and added to acc (rows g: item ia; g + 8: ib). b(nt, t): token tile nt's B
// operand of step t. Every accumulator sees the same operations in the same order in either
// kernel, so with equal splits their sums are the same bit for bit.
template <class T, int NT, class B, int... t>
__device__ __forceinline__ void int_chunk(const typename T::IntItem& ia,
                                          const typename T::IntItem& ib, B&& b, float (&acc)[NT][4],
                                          std::integer_sequence<int, t...>) {
  float qs[NT][4] = {};
  [[maybe_unused]] float ms[NT][4] = {};
  (
      [&] {
        const uint2 ra = T::template a_int<t>(ia), rb = T::template a_int<t>(ib);
        uint2 bt[NT];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) bt[nt] = b(nt, t);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
          mma_16816(qs[nt], ra.x, rb.x, ra.y, rb.y, bt[nt].x, bt[nt].y);
        if constexpr (T::kIntMins) {
          const uint32_t ma = ia.m2[t & 1], mb = ib.m2[t & 1];
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) mma_16816(ms[nt], ma, mb, ma, mb, bt[nt].x, bt[nt].y);
        }
      }(),
      ...);
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const typename T::IntItem& it = i < 2 ? ia : ib;
      if constexpr (T::kIntMins)
        acc[nt][i] = fmaf(it.d, qs[nt][i], fmaf(-it.dmin, ms[nt][i], acc[nt][i]));
      else
        acc[nt][i] = fmaf(it.d, qs[nt][i], acc[nt][i]);
    }
}

// The A operand of step t of a chunk, from the two rows' items.
template <class T, int t>
__device__ __forceinline__ uint4 a_operand(const typename T::Item& ia, const typename T::Item& ib) {
  float va[4], vb[4];
  T::template dequant<t>(ia, va);
  T::template dequant<t>(ib, vb);
  return make_uint4(pack_half2(va[0], va[1]), pack_half2(vb[0], vb[1]), pack_half2(va[2], va[3]),
                    pack_half2(vb[2], vb[3]));
}

// Step t of a chunk: A from the two rows' items, B of token tile nt at xs + nt * 8 rows.
template <class T, int t, int NT>
__device__ __forceinline__ void step(const typename T::Item& ia, const typename T::Item& ib,
                                     const __half* xs, int n_tiles, float (&acc)[NT][4]) {
  const uint4 a = a_operand<T, t>(ia, ib);
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    if (nt < n_tiles) {
      const uint2 b = *reinterpret_cast<const uint2*>(xs + nt * 8 * kXRow + 16 * t);
      mma_16816(acc[nt], a.x, a.y, a.z, a.w, b.x, b.y);
    }
  }
}

// Step t for RT row tiles of the warp: each token tile's B operand loaded once for all of them
// (the fp32 form of the 64-token tiles, where the B loads from the stage are one an mma); every
// accumulator sees step's operations in step's order, so the sums are step's bit for bit.
template <class T, int t, int NT, int RT>
__device__ __forceinline__ void step_rows(const typename T::Item (&ia)[RT],
                                          const typename T::Item (&ib)[RT], const __half* xs,
                                          int n_tiles, float (&acc)[RT][NT][4]) {
  uint2 b[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
    b[nt] = nt < n_tiles ? *reinterpret_cast<const uint2*>(xs + nt * 8 * kXRow + 16 * t)
                         : make_uint2(0u, 0u);
#pragma unroll
  for (int r = 0; r < RT; ++r) {
    const uint4 a = a_operand<T, t>(ia[r], ib[r]);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
      if (nt < n_tiles) mma_16816(acc[r][nt], a.x, a.y, a.z, a.w, b[nt].x, b[nt].y);
  }
}
template <class T, int NT, int RT, int... t>
__device__ __forceinline__ void chunk_steps_rows(const typename T::Item (&ia)[RT],
                                                 const typename T::Item (&ib)[RT], const __half* xs,
                                                 int n_tiles, float (&acc)[RT][NT][4],
                                                 std::integer_sequence<int, t...>) {
  (step_rows<T, t, NT, RT>(ia, ib, xs, n_tiles, acc), ...);
}

template <class T, int NT, int... t>
__device__ __forceinline__ void chunk_steps(const typename T::Item& ia, const typename T::Item& ib,
                                            const __half* xs, int n_tiles, float (&acc)[NT][4],
                                            std::integer_sequence<int, t...>) {
  (step<T, t, NT>(ia, ib, xs, n_tiles, acc), ...);
}

}  // namespace rz::gpu::qmm_detail

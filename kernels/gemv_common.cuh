// Internal to the gemv kernels (kernels/gemv*.cu): the one generic matrix-vector kernel, its
// split-row sibling for few long rows at batch <= 4, the device helpers the per-type traits
// share, and the per-family launch tables that gemv.cu dispatches through. See kernels/GEMV.md for
// the design and kernels/gemv.hpp for the API. The block layouts and the integer unpacking of
// scales and quants come from kernels/quant_decode.cuh (shared with dequant and embedding),
// group_sum, the 16-bit loads and the fp16 conversion from kernels/cuda_common.cuh.
//
// A weight type is described by a traits struct T:
//   kBlockElems, kBlockBytes   one block: elements and bytes (a pseudo-block of 8 for F16/BF16)
//   kParts                     lanes that share one block (a power of two); lane part p of block
//                              i is work item i * kParts + p
//   kChunks                    float4 chunks of elements each work item yields
//   kUnroll                    work items a lane has in flight (loop unrolling; 1 when R = 4)
//   kMaxRows                   most rows per warp (register budget of an Item)
//   Item load(blk, part)       reads the item's bytes (and its scales) from the block at blk
//   float4 dequant(item, k)    values of chunk k (k a compile-time constant after unrolling)
//   int chunk_col(part, k)     column of chunk k's first element, relative to the block
// The kernel keeps x in fp32 and reads it through the read-only cache (float4 loads).
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "kernels/cuda_common.cuh"
#include "kernels/gemv.hpp"
#include "kernels/launch.cuh"

namespace rz::gpu::gemv_detail {

constexpr int kWarps = 4;  // warps per thread block; each row group of a warp owns R rows

// Rows per warp for a batch: with more activation rows, one float4 of x feeds R rows' FMAs
// (fewer x loads per FMA), at the cost of R items' registers (capped by T::kMaxRows).
template <class T>
__host__ __device__ constexpr int rows_per_warp(int batch) {
  const int r = batch >= 8 ? 4 : batch >= 4 ? 2 : 1;
  return r < T::kMaxRows ? r : T::kMaxRows;
}

// N bytes (N a multiple of 4) at a 2-byte aligned address as N / 4 little-endian words. Reads
// aligned words from p rounded down to 4 bytes (at most 2 bytes before p, which must lie in the
// same allocation: true when the buffer starts 4-byte aligned) and never past p + N. kShared:
// p is in shared memory (plain loads; global memory goes through the read-only cache).
template <int N, bool kShared = false>
__device__ __forceinline__ void load_words_a2(const uint8_t* p, uint32_t (&out)[N / 4]) {
  static_assert(N % 4 == 0 && N > 0);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const auto* q = reinterpret_cast<const uint32_t*>(a & ~uintptr_t{3});
  const uint32_t shift = static_cast<uint32_t>(a & 2u) * 8u;  // 0 or 16
  uint32_t w[N / 4 + 1];
#pragma unroll
  for (int i = 0; i < N / 4; ++i) w[i] = kShared ? q[i] : __ldg(q + i);
  // the last two bytes when misaligned (ignored otherwise)
  w[N / 4] = kShared ? *reinterpret_cast<const uint16_t*>(p + N - 2) : load_u16_a2(p + N - 2);
#pragma unroll
  for (int i = 0; i < N / 4; ++i) out[i] = __funnelshift_r(w[i], w[i + 1], shift);
}

// Byte i of w, minus bias, as a float, without the conversion unit (a quarter-rate pipe on
// sm_90, which bounded the 4-bit kernels): the byte permute (PRMT) builds 0x4B0000bb, the float
// 2^23 + byte, and subtracting 2^23 + bias is exact, so the result equals float(byte - bias).
__device__ __forceinline__ float byte_to_float(uint32_t w, int i, float bias = 0.0f) {
  return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7440u | static_cast<uint32_t>(i))) -
         (8388608.0f + bias);
}

// s * byte i of w + b in one FFMA after one PRMT, for bytes below 128 (every quant of 7 bits or
// fewer), given s16 = s * 2^-16 and b16 = b - 128 s: the permute puts the byte at bits 16..22 of
// the float 2^23 (0x4B000000), which is then 2^23 + 65536 * byte exactly, and the fused product
// (2^23 + 65536 byte) s16 = 128 s + byte s is exact, so the one rounding is that of b16 and of the
// sum. Saves byte_to_float's FADD where a scale follows.
__device__ __forceinline__ float byte_fma(uint32_t w, int i, float s16, float b16) {
  return fmaf(
      __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7044u | (static_cast<uint32_t>(i) << 8))), s16,
      b16);
}

// y[b, rows of this warp) for b < B. A warp is split into 32 / LPR groups of LPR lanes (LPR = 16
// for short rows, so that fewer lanes idle); group g owns rows row0 + [0, R).
// Grid: ceil(rows / (kWarps * R * 32 / LPR)) blocks of kWarps warps.
template <class T, int B, int R, int LPR>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const uint8_t* __restrict__ w, const float* __restrict__ x, float* __restrict__ y,
                int64_t rows, int64_t cols, const float* __restrict__ row_scale) {
  grid_dependency_sync();
  static_assert(LPR == 16 || LPR == 32);
  constexpr int lpr = LPR;
  const int lane = threadIdx.x & 31;
  const int sub = lane & (lpr - 1);  // lane within its group
  const int64_t warp_row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32) *
                            static_cast<int64_t>(R * (32 / lpr));
  if (warp_row0 >= rows) return;  // uniform across the warp: the shuffles below see all 32 lanes
  const int64_t row0 = warp_row0 + static_cast<int64_t>(lane / lpr) * R;
  const int nblk = static_cast<int>(cols / T::kBlockElems);
  const size_t row_bytes = static_cast<size_t>(nblk) * T::kBlockBytes;
  const int items = nblk * T::kParts;

  const uint8_t* wrow[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {  // rows past the end repeat the last row; their sums are dropped
    const int64_t row = row0 + r < rows ? row0 + r : rows - 1;
    wrow[r] = w + static_cast<size_t>(row) * row_bytes;
  }

  float acc[R][B];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int b = 0; b < B; ++b) acc[r][b] = 0.0f;

#pragma unroll(R >= 4 ? 1 : T::kUnroll)
  for (int i = sub; i < items; i += lpr) {
    const int blk = i / T::kParts, part = i % T::kParts;
    typename T::Item it[R];
#pragma unroll
    for (int r = 0; r < R; ++r)
      it[r] = T::load(wrow[r] + static_cast<size_t>(blk) * T::kBlockBytes, part);
    const float* xb = x + static_cast<size_t>(blk) * T::kBlockElems;
#pragma unroll
    for (int k = 0; k < T::kChunks; ++k) {
      float4 wv[R];
#pragma unroll
      for (int r = 0; r < R; ++r) wv[r] = T::dequant(it[r], k);
      const int col = T::chunk_col(part, k);
#pragma unroll
      for (int b = 0; b < B; ++b) {
        const float4 xv =
            __ldg(reinterpret_cast<const float4*>(xb + static_cast<size_t>(b) * cols + col));
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float a = acc[r][b];
          a = fmaf(wv[r].x, xv.x, a);
          a = fmaf(wv[r].y, xv.y, a);
          a = fmaf(wv[r].z, xv.z, a);
          a = fmaf(wv[r].w, xv.w, a);
          acc[r][b] = a;
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int b = 0; b < B; ++b) {
      const float s = group_sum<LPR>(acc[r][b]);
      if (sub == 0 && row0 + r < rows)
        y[static_cast<size_t>(b) * rows + row0 + r] = row_scale ? s * row_scale[row0 + r] : s;
    }
}

// Split-row variant for few, long rows at small batches (B <= kSplitMaxBatch): S warps of one
// thread block share a row (S = split, 2, 4 or 8; kSplitWarps / S rows per block). Warp slice s
// of a row takes the work items s * 32 + lane, stepping 32 * S, reduces its partial sums with
// shuffles and leaves them in shared memory; after the barrier one thread per (row, batch) adds
// the S partials in slice order 0, 1, ..., S - 1 (fixed, so the result is deterministic) and
// writes y. Rows past the end repeat the last row (every warp reaches the barrier) and are
// dropped. Grid: ceil(rows / (kSplitWarps / S)) blocks of kSplitWarps warps.
constexpr int kSplitWarps = 8;
constexpr int kSplitMaxBatch = 4;

template <class T, int B>
__global__ void __launch_bounds__(kSplitWarps * 32)
    gemv_split_kernel(const uint8_t* __restrict__ w, const float* __restrict__ x,
                      float* __restrict__ y, int64_t rows, int64_t cols, int split,
                      const float* __restrict__ row_scale) {
  grid_dependency_sync();
  __shared__ float partial[kSplitWarps][B];  // [warp = slot * split + slice][b]
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const int rows_per_block = kSplitWarps / split;
  const int slot = warp / split, slice = warp % split;
  const int64_t first_row = static_cast<int64_t>(blockIdx.x) * rows_per_block;
  const int64_t row = first_row + slot < rows ? first_row + slot : rows - 1;
  const int nblk = static_cast<int>(cols / T::kBlockElems);
  const size_t row_bytes = static_cast<size_t>(nblk) * T::kBlockBytes;
  const int items = nblk * T::kParts;
  const uint8_t* wrow = w + static_cast<size_t>(row) * row_bytes;

  float acc[B];
#pragma unroll
  for (int b = 0; b < B; ++b) acc[b] = 0.0f;

  const int step = 32 * split;
#pragma unroll(T::kUnroll)
  for (int i = slice * 32 + lane; i < items; i += step) {
    const int blk = i / T::kParts, part = i % T::kParts;
    const typename T::Item it = T::load(wrow + static_cast<size_t>(blk) * T::kBlockBytes, part);
    const float* xb = x + static_cast<size_t>(blk) * T::kBlockElems;
#pragma unroll
    for (int k = 0; k < T::kChunks; ++k) {
      const float4 wv = T::dequant(it, k);
      const int col = T::chunk_col(part, k);
#pragma unroll
      for (int b = 0; b < B; ++b) {
        const float4 xv =
            __ldg(reinterpret_cast<const float4*>(xb + static_cast<size_t>(b) * cols + col));
        float a = acc[b];
        a = fmaf(wv.x, xv.x, a);
        a = fmaf(wv.y, xv.y, a);
        a = fmaf(wv.z, xv.z, a);
        a = fmaf(wv.w, xv.w, a);
        acc[b] = a;
      }
    }
  }

#pragma unroll
  for (int b = 0; b < B; ++b) {
    const float s = group_sum<32>(acc[b]);
    if (lane == 0) partial[warp][b] = s;
  }
  __syncthreads();
  const int t = threadIdx.x;
  if (t < rows_per_block * B) {
    const int out_slot = t / B, b = t % B;
    const int64_t out_row = first_row + out_slot;
    if (out_row < rows) {
      float s = partial[out_slot * split][b];
      for (int k = 1; k < split; ++k) s += partial[out_slot * split + k][b];
      y[static_cast<size_t>(b) * rows + out_row] = row_scale ? s * row_scale[out_row] : s;
    }
  }
}

// row_scale: null, or [rows] factors each row's sums are multiplied by before they are written
// (the FP8 family's per-row scales, kernels/fp8.hpp).
using LaunchFn = void (*)(const void* w, const float* x, float* y, int64_t rows, int64_t cols,
                          const float* row_scale, cudaStream_t stream);
using SplitLaunchFn = void (*)(const void* w, const float* x, float* y, int64_t rows, int64_t cols,
                               int split, const float* row_scale, cudaStream_t stream);

// What gemv.cu needs to know about one kernel family: its block shape and a launcher per batch.
struct Family {
  int block_elems = 0;
  int block_bytes = 0;
  int parts = 0;                        // lanes per block (T::kParts): work items per block
  LaunchFn launch[kGemvMaxBatch] = {};  // [batch - 1]
  SplitLaunchFn launch_split[kSplitMaxBatch] = {};  // [batch - 1]: the split-row kernel
};

template <class T, int B>
void launch(const void* w, const float* x, float* y, int64_t rows, int64_t cols,
            const float* row_scale, cudaStream_t stream) {
  constexpr int R = rows_per_warp<T>(B);
  // Short rows (fewer than two items per lane of a warp, e.g. 1536 columns of Q4_K / Q6_K) go
  // to half-warps, so that a warp's lanes are not left idle; never fewer lanes than share a block.
  const int64_t items = cols / T::kBlockElems * T::kParts;
  if (T::kParts <= 16 && items < 64) {
    const int64_t rows_per_block = static_cast<int64_t>(kWarps) * R * 2;
    const int64_t grid = (rows + rows_per_block - 1) / rows_per_block;
    launch_kernel(gemv_kernel<T, B, R, 16>, static_cast<unsigned>(grid), kWarps * 32, 0, stream,
                  static_cast<const uint8_t*>(w), x, y, rows, cols, row_scale);
  } else {
    const int64_t rows_per_block = static_cast<int64_t>(kWarps) * R;
    const int64_t grid = (rows + rows_per_block - 1) / rows_per_block;
    launch_kernel(gemv_kernel<T, B, R, 32>, static_cast<unsigned>(grid), kWarps * 32, 0, stream,
                  static_cast<const uint8_t*>(w), x, y, rows, cols, row_scale);
  }
}

// split in {2, 4, 8} (checked by gemv.cu); rows < 2^30, so the grid fits.
template <class T, int B>
void launch_split(const void* w, const float* x, float* y, int64_t rows, int64_t cols, int split,
                  const float* row_scale, cudaStream_t stream) {
  const int64_t rows_per_block = kSplitWarps / split;
  const int64_t grid = (rows + rows_per_block - 1) / rows_per_block;
  launch_kernel(gemv_split_kernel<T, B>, static_cast<unsigned>(grid), kSplitWarps * 32, 0, stream,
                static_cast<const uint8_t*>(w), x, y, rows, cols, split, row_scale);
}

template <class T, size_t... Bm1, size_t... Sm1>
constexpr Family make_family(std::index_sequence<Bm1...>, std::index_sequence<Sm1...>) {
  return Family{T::kBlockElems,
                T::kBlockBytes,
                T::kParts,
                {&launch<T, static_cast<int>(Bm1) + 1>...},
                {&launch_split<T, static_cast<int>(Sm1) + 1>...}};
}

// The family of traits T: instantiates the kernel for every batch 1..kGemvMaxBatch and the
// split-row kernel for every batch 1..kSplitMaxBatch.
template <class T>
constexpr Family make_family() {
  return make_family<T>(std::make_index_sequence<kGemvMaxBatch>{},
                        std::make_index_sequence<kSplitMaxBatch>{});
}

// Defined in gemv.cu. The split (1 = ordinary kernel; 2, 4, 8 = split-row kernel) that gemv()
// uses for this shape on a device with sm_count multiprocessors.
int gemv_choose_split(GgmlType type, int64_t rows, int64_t cols, int batch, int sm_count);
// gemv() with the split forced (0 = as gemv_choose_split says), for tests and benches.
void gemv_with_split(GgmlType type, const void* w, const float* x, float* y, int64_t rows,
                     int64_t cols, int batch, int split, cudaStream_t stream);

// Defined in gemv_q4k_q5k.cu, gemv_q6k.cu, gemv_q2k_q3k.cu, gemv_iq4xs.cu, gemv_legacy.cu,
// gemv_half.cu and gemv_fp8.cu.
const Family& family_q4_k();
const Family& family_q5_k();
const Family& family_q6_k();
const Family& family_q2_k();
const Family& family_q3_k();
const Family& family_iq4_xs();
const Family& family_q8_0();
const Family& family_q4_0();
const Family& family_q4_1();
const Family& family_q5_0();
const Family& family_q5_1();
const Family& family_iq4_nl();
const Family& family_f16();
const Family& family_bf16();
const Family& family_fp8();  // gemv_fp8(): rows of E4M3 codes with a per-row scale

}  // namespace rz::gpu::gemv_detail

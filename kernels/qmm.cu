// qmm (kernels/qmm.hpp): quantized weights × fp16 activations on tensor cores. Design notes and
// measurements: kernels/QMM.md.
//
// One mma.sync m16n8k16 multiplies 16 weight rows by 8 tokens over 16 columns ("k-slots"). Thread
// (g = lane / 4, c = lane % 4) holds, of A, rows g and g + 8 at k-slots {2c, 2c+1, 2c+8, 2c+9}
// and, of B, token g at the same four k-slots. A dot product may visit the columns in any order,
// so k-slot s of step t (0..15) of a 256-column chunk stands for column
//   col(t, c, e) = 64 c + 32 (t & 1) + 4 (t >> 1) + e,    s = {2c, 2c+1, 2c+8, 2c+9}[e]
// for every row and every token alike: thread c owns the contiguous columns [64 c, 64 c + 64)
// of each chunk, which in every supported format are a run of whole bytes (Q4_K: qs[32 c, +32)),
// so its weight loads are wide. qmm_prepare_x writes x in (t, c, e) order, so that the B operand
// of step t is 8 consecutive bytes.
#include "kernels/launch.cuh"
#include "kernels/qmm.hpp"

#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "formats/common.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/cuda_common.cuh"
#include "kernels/gate_act.cuh"
#include "kernels/mma.cuh"
#include "kernels/qmm_formats.cuh"
#include "kernels/qmm_layout.cuh"

namespace rz::gpu {
namespace qmm_detail {

constexpr int kWarps = 4;  // warps per thread block, 16 rows each
constexpr int kRowsPerBlock = 16 * kWarps;

// Column of the chunk that k-slot element e of thread c holds in step t (see the top comment;
// kernels/qmm_layout.cuh has the one definition, for the kernels that write prepared x).
__host__ __device__ constexpr int chunk_col(int t, int c, int e) { return qmm_chunk_col(t, c, e); }

// ---------------------------------------------------------------- staging (cp.async)

// Shared memory of one pipeline stage: the tokens' x chunk [8 NT][kXRow] halves (rows padded
// from 256 to 272 halves so that the 8 tokens of a B fragment load fall in different banks),
// then the block's 64 weight rows' chunks [64][row stride], then 16 bytes of slack. A row's chunk
// is copied in 16-byte pieces from the 16-byte boundary at or below it, so it starts (its address %
// 16) bytes into its staged row.
constexpr int kXRow = kQmmChunk + 16;
template <class T>
__host__ __device__ constexpr int w_row_stride() {
  return T::kAligned16 ? T::kChunkBytes : (T::kChunkBytes + 15 + 15) / 16 * 16;
}
template <class T, int NT>
__host__ __device__ constexpr int stage_bytes() {
  return 8 * NT * kXRow * 2 + kRowsPerBlock * w_row_stride<T>() + 16;
}
// Pipeline depth S: 4 stages (3 chunks in flight while one is multiplied) hide DRAM latency
// on grids of fewer blocks than SMs, where each block has nothing else to do; 2 otherwise (and
// always for 64-token tiles, whose stages are large), so that more blocks fit on an SM: 4 stages
// made qwen2.5-1.5b's 280-block gate/up matmul 18 % slower (2 blocks an SM instead of 4).

// Issues the copies of chunk k of n_rows weight rows from row_base (rows past the last repeat it)
// into ws, row r at r * w_row_stride<T>() (staged_row says where its chunk starts); thread tid of
// n_threads takes pieces tid, tid + n_threads, ...
template <class T>
__device__ __forceinline__ void stage_rows(uint8_t* ws, const uint8_t* __restrict__ w,
                                           int64_t row_bytes, const uint8_t* w_end, int row_base,
                                           int rows, int n_rows, int k, int tid, int n_threads) {
  constexpr int stride = w_row_stride<T>(), pieces = stride / 16;
  for (int i = tid; i < n_rows * pieces; i += n_threads) {
    const int r = i / pieces, piece = i % pieces;
    const int64_t row = min(row_base + r, rows - 1);
    const uint8_t* src = w + row * row_bytes + int64_t(k) * T::kChunkBytes;
    if constexpr (T::kAligned16) {
      cp_async16(ws + r * stride + piece * 16, src + piece * 16);
    } else {
      const uint8_t* from =
          reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(src) & ~uintptr_t{15}) +
          16 * piece;
      const int64_t left = w_end - from;  // bytes of the matrix from `from` on
      if (left >= 16) {
        cp_async16(ws + r * stride + piece * 16, from);
      } else {  // the matrix's last bytes (2-byte granules): plain loads, zeros past the end
        auto* d = reinterpret_cast<uint16_t*>(ws + r * stride + piece * 16);
        const auto* f = reinterpret_cast<const uint16_t*>(from);
        for (int b = 0; b < 8; ++b) d[b] = 2 * b < left ? f[b] : uint16_t{0};
      }
    }
  }
}

// The copies of chunk k of 16 rows per warp (stage_rows' layout) by kThreads threads: the direct
// staged kernel's 16-row tile (one warp), the staged kernel's 64-row block (4 warps), for rows
// clear of the matrix's last row: no row to clamp, and no piece past the matrix end (the bytes
// past a row's chunk are the next rows'). Thread t copies piece t % L of rows R j + t / L (L: a
// row's pieces rounded up to a power of two, R = kThreads / L), so a row's pieces are consecutive
// threads and each thread's copies step by R rows: an add and a mask a copy, where stage_rows
// divides the piece index, clamps the row and checks the matrix end for each (in the staged
// kernel those copies were a third of the instructions executed: ncu, llama8b gate+up at 16
// tokens; with tile copies Q6_K's llama8b ffn_down at 16 tokens took 32.0 us against 35.2, its
// qwen output 90.9 against 99.6, Q4_K's gate+up 43.3 against 44.1).
template <class T, int kThreads = 32>
__device__ __forceinline__ void stage_tile_rows(uint8_t* ws, const uint8_t* __restrict__ w,
                                                int64_t row_bytes, int row0, int k, int tid) {
  constexpr int stride = w_row_stride<T>(), pieces = stride / 16;
  constexpr int L = pieces > 16 ? 32 : pieces > 8 ? 16 : pieces > 4 ? 8 : pieces > 2 ? 4 : 2;
  constexpr int R = kThreads / L, n_rows = 16 * (kThreads / 32);
  static_assert(pieces <= 32 && kThreads % 32 == 0);
  const int p = tid % L, h = tid / L;
  if (p >= pieces) return;
  // (src + 16 p) & ~15 is stage_rows' 16-byte boundary below the row's chunk, plus 16 p
  const uint8_t* src = w + int64_t(row0 + h) * row_bytes + int64_t(k) * T::kChunkBytes + 16 * p;
  uint8_t* dst = ws + h * stride + 16 * p;
#pragma unroll
  for (int j = 0; j < n_rows / R; ++j) {  // (the mask leaves an aligned format's src as it is)
    cp_async16(dst + j * R * stride,
               reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(src) & ~uintptr_t{15}));
    src += R * row_bytes;
  }
}

// Issues the copies of chunk k into a stage (all kWarps * 32 threads of the block take part).
// clear: the block's rows are clear of the matrix's last row (stage_tile_rows).
template <class T, int NT>
__device__ __forceinline__ void stage_chunk(uint8_t* st, const uint8_t* __restrict__ w,
                                            int64_t row_bytes, const uint8_t* w_end,
                                            const __half* __restrict__ xp, int cols, int tok0,
                                            int n_tok8, int row_base, int rows, int k, bool clear) {
  // x: n_tok8 tokens x 512 bytes = 32 copies of 16 bytes each; thread t takes piece t % 32 of
  // tokens t / 32 + 4 j, so each of its copies is an add away from the one before
  constexpr int kThreads = kWarps * 32, kTokStep = kThreads / 32;
  const int tok = threadIdx.x >> 5, piece = threadIdx.x & 31;
  __half* xs = reinterpret_cast<__half*>(st) + tok * kXRow + piece * 8;
  const __half* src = xp + int64_t(tok0 + tok) * cols + int64_t(k) * kQmmChunk + piece * 8;
  const int64_t src_step = int64_t(kTokStep) * cols;
#pragma unroll
  for (int j = 0; j < 8 * NT / kTokStep; ++j) {
    if (tok + j * kTokStep < n_tok8) cp_async16(xs + j * kTokStep * kXRow, src);
    src += src_step;
  }
  uint8_t* ws = st + 8 * NT * kXRow * 2;
  if (clear)
    stage_tile_rows<T, kThreads>(ws, w, row_bytes, row_base, k, threadIdx.x);
  else
    stage_rows<T>(ws, w, row_bytes, w_end, row_base, rows, kRowsPerBlock, k, threadIdx.x, kThreads);
}

// Where row r's chunk starts in the staged rows.
template <class T>
__device__ __forceinline__ const uint8_t* staged_row(const uint8_t* ws, const uint8_t* w,
                                                     int64_t row_bytes, int r, int64_t row, int k) {
  const uint8_t* p = ws + r * w_row_stride<T>();
  if constexpr (!T::kAligned16)
    p += reinterpret_cast<uintptr_t>(w + row * row_bytes + int64_t(k) * T::kChunkBytes) & 15u;
  return p;
}

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

template <class T, int NT, int... t>
__device__ __forceinline__ void chunk_steps(const typename T::Item& ia, const typename T::Item& ib,
                                            const __half* xs, int n_tiles, float (&acc)[NT][4],
                                            std::integer_sequence<int, t...>) {
  (step<T, t, NT>(ia, ib, xs, n_tiles, acc), ...);
}

// The staged kernel's token tile for n tokens: blocks of 8 NT tokens, NT = 1, 2, 4 or 8.
__host__ __device__ constexpr int staged_nt(int64_t n) {
  const int64_t tiles8 = (n + 7) / 8;
  return tiles8 >= 8 ? 8 : tiles8 >= 4 ? 4 : tiles8 >= 2 ? 2 : 1;
}
// Whether the staged kernel runs T's integer form (int_chunk) in tiles of 8 NT tokens: Q6_K
// always, Q4_K / Q5_K in tiles of up to 16 tokens (n <= 24). Their second mma a step (the mins)
// doubles the tensor work, which in larger tiles cost more than the dequantization it saves
// (H200, us at 16 / 32 / 64 tokens, fp32 dequantization -> integer form: llama8b ffn_gate/up Q4_K
// 28.4 -> 26.6, 34.5 -> 37.7, 58.3 -> 61.6; Q6_K ffn_down 39.3 -> 34.5, 47.5 -> 42.6, 76.9 ->
// 72.9; kernels/QMM.md, attempt 18). The direct kernel (up to 16 tokens) always runs it.
constexpr int kIntMinsMaxNT = 2;
// The rule for a format with an integer form (mins: it has the second mma); qmm_integer_form
// asks it too.
__host__ __device__ constexpr bool int_form_in_tiles(bool mins, int nt) {
  return !mins || nt <= kIntMinsMaxNT;
}
template <class T, int NT>
constexpr bool staged_int() {
  if constexpr (IntForm<T>)
    return int_form_in_tiles(T::kIntMins, NT);
  else
    return false;
}

// Grid: x = token tiles of 8 NT tokens (fastest, so the blocks that share weight rows run
// together and the rows come from DRAM once), y = row tiles of kRowsPerBlock, z = K splits.
// out: y itself (splits == 1, row stride ld) or the workspace [split][n][rows] (ld = rows).
// Chunks go through an S-deep cp.async pipeline in shared memory: the copies of the next S - 1
// chunks are in flight while the warps multiply chunk k. Each chunk runs int_chunk where
// staged_int says so (the direct kernel's arithmetic, its B operands from the stage), else the
// fp32 dequantization (chunk_steps).
template <class T, int NT, int S>
__global__ void __launch_bounds__(kWarps * 32)
    qmm_kernel(const uint8_t* __restrict__ w, int64_t row_bytes, const __half* __restrict__ xp,
               float* __restrict__ out, int64_t ld, int rows, int cols, int n,
               int chunks_per_split) {
  grid_dependency_wait();
  extern __shared__ uint4 smem_u4[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem_u4);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int row_base = blockIdx.y * kRowsPerBlock, row0 = row_base + warp * 16;
  const int tok0 = blockIdx.x * 8 * NT;
  const int n_tiles = min(NT, (n - tok0 + 7) / 8);
  const int chunks = cols / kQmmChunk;
  const int k0 = blockIdx.z * chunks_per_split, k1 = min(chunks, k0 + chunks_per_split);
  const uint8_t* w_end = w + int64_t(rows) * row_bytes;
  const int64_t row_a = min(row0 + g, rows - 1), row_b = min(row0 + g + 8, rows - 1);
  const bool clear = row_base + kRowsPerBlock < rows;  // stage_chunk may copy as a whole tile

  // Prologue: chunks k0 .. k0 + S - 2 in flight (one commit group each, empty past k1).
#pragma unroll
  for (int p = 0; p < S - 1; ++p) {
    if (k0 + p < k1)
      stage_chunk<T, NT>(smem + p * stage_bytes<T, NT>(), w, row_bytes, w_end, xp, cols, tok0,
                         8 * n_tiles, row_base, rows, k0 + p, clear);
    cp_async_commit();
  }
  float acc[NT][4] = {};
  for (int k = k0; k < k1; ++k) {
    const int s = (k - k0) % S;
    const int kn = k + S - 1;  // the chunk to start now, into the stage freed last iteration
    if (kn < k1)
      stage_chunk<T, NT>(smem + ((kn - k0) % S) * stage_bytes<T, NT>(), w, row_bytes, w_end, xp,
                         cols, tok0, 8 * n_tiles, row_base, rows, kn, clear);
    cp_async_commit();       // empty groups past the end keep the count uniform
    cp_async_wait<S - 1>();  // chunk k's group is complete
    __syncthreads();
    const uint8_t* st = smem + s * stage_bytes<T, NT>();
    const uint8_t* ws = st + 8 * NT * kXRow * 2;
    if (row0 < rows) {  // uniform per warp; the warp still joins the barriers
      const uint8_t* ra = staged_row<T>(ws, w, row_bytes, warp * 16 + g, row_a, k);
      const uint8_t* rb = staged_row<T>(ws, w, row_bytes, warp * 16 + g + 8, row_b, k);
      const __half* xs = reinterpret_cast<const __half*>(st) + g * kXRow + 4 * c;
      if constexpr (staged_int<T, NT>()) {
        int_chunk<T, NT>(
            direct_item<T>(ra, c), direct_item<T>(rb, c),
            [&](int nt, int u) {
              return nt < n_tiles ? *reinterpret_cast<const uint2*>(xs + nt * 8 * kXRow + 16 * u)
                                  : make_uint2(0u, 0u);
            },
            acc, std::make_integer_sequence<int, 16>{});
      } else {
        chunk_steps<T, NT>(T::load(ra, c), T::load(rb, c), xs, n_tiles, acc,
                           std::make_integer_sequence<int, 16>{});
      }
    }
    __syncthreads();  // the stage is refilled by the next iteration's copies
  }
  if (row0 >= rows) return;
  float* o = out + int64_t(blockIdx.z) * n * ld;
  // acc[nt]: rows row0 + g (0, 1) and + 8 (2, 3), tokens tok0 + 8 nt + 2 c (0, 2) and + 1 (1, 3).
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int tok = tok0 + 8 * nt + 2 * c;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = row0 + g + 8 * (i >> 1), tk = tok + (i & 1);
      if (r < rows && tk < n) o[int64_t(tk) * ld + r] = acc[nt][i];
    }
  }
}

// ---------------------------------------------------------------- direct (n <= 16)

// Up to 16 tokens (one or two token tiles of 8, NT), the weights are read straight from global
// memory into each thread's items, with the next group of chunks in flight while a group is
// multiplied, instead of through the shared-memory pipeline (whose fill latency and block-wide
// barriers dominate when a 16 x 8 x 256 multiply per chunk is all there is to do). A thread block
// is one 16-row tile; its warps take the K splits s = warp, warp + warps, ... (chunk ranges as in
// the staged kernel), and warp 0 adds the splits' sums in order of s as qmm_reduce_kernel does, so
// with the same splits a token's result is bit for bit the staged kernel's (each kernel has its own
// split rule; the tests force equal splits to compare them; Q4_K and Q5_K past 24 tokens, where
// the staged kernel dequantizes to fp32, excepted). The first group's weights are
// requested before the wait for the previous kernel (weights are never written by a step). With two
// token tiles (9-16 tokens) each A operand a thread decodes feeds two mma, one per tile: the
// weights are read and decoded once for 16 tokens, where the staged kernel's per-element
// dequantization made 9-16 tokens cost twice 8's. A token's sums do not depend on the tile count
// (same steps, same splits: the rule reads the one-tile kernel's occupancy for both).
constexpr int kDirectMaxSplits = 64;  // dynamic shared partial sums: splits x 32 x NT x 16 bytes
constexpr int kDirectMaxWarps = 8;
// A row tile's blocks and their warps for `splits` K splits: one block of up to kDirectMaxWarps
// warps, or past that a cluster of ceil(splits / kDirectMaxWarps) blocks (at most 8, the portable
// cluster size) that share the splits evenly (direct_block, on devices with clusters).
struct DirectGrid {
  int cluster, warps;
};
constexpr DirectGrid direct_grid(int splits, bool clusters = true) {
  if (!clusters || splits <= kDirectMaxWarps) return {1, std::min(splits, kDirectMaxWarps)};
  const int cl = (splits + kDirectMaxWarps - 1) / kDirectMaxWarps;
  return {cl, (splits + cl - 1) / cl};
}
static_assert(direct_grid(kDirectMaxSplits).cluster <= 8);
// blocks[w]: how many blocks of w warps (1..kDirectMaxWarps) of a direct kernel an SM holds.
using DirectBlocksPerSm = std::array<int, kDirectMaxWarps + 1>;
int choose_direct_splits(int64_t rows, int64_t cols, int sms, const DirectBlocksPerSm& blocks,
                         bool clusters);

// Two token tiles (9-16 tokens) pay where the staged kernel's fixed costs dominate (its K
// splits' reduce kernel, its pipeline's fill): on matrices up to this size. Larger ones, and the
// formats whose direct kernel stages its chunks (Q6_K, Q2_K), stay with the staged kernel there,
// which was faster on them (H200, 16 tokens, own time: llama3.1-8b gate/up 28,672 x 4,096 Q4_K
// 49.3 us staged against 53.6 direct, Q6_K ffn_down 36.3 against 49.2, output 259 against 336;
// qwen2.5-1.5b's 1.3-7.7 MB Q4_K matrices 5.5-7.9 against 7.7-9.6 + 2.0 for the reduce).
constexpr int64_t kDirect2MaxBytes = int64_t{16} << 20;
// Whether a call of n tokens with this many K splits (0: the rule's) runs the direct kernel, for a
// format that stages its chunks or not and a matrix of `bytes`.
__host__ __device__ constexpr bool runs_direct(int64_t n, int64_t splits, bool staged_format,
                                               int64_t bytes) {
  return splits <= kDirectMaxSplits &&
         (n <= 8 || (n <= kQmmDirectMaxTokens && !staged_format && bytes <= kDirect2MaxBytes));
}

// Chunks a warp keeps in flight per group: two of the small items, one of the large (Q6_K's 28
// words a row) and of the integer forms. H200, n = 1, us per call, one chunk / two: llama8b
// ffn_gate/up Q4_K (fp32 dequantization) 26.7 / 21.2, Q6_K 41.9 / 44.7, Q4_K integer form
// 16.6 / 27.7 (172 registers with two).
template <class T>
constexpr int direct_group() {
  return !IntForm<T> && sizeof(typename DirectItem<T>::type) <= 64 ? 2 : 1;
}

template <class T, int D, class Raw = typename DirectItem<T>::raw>
__device__ __forceinline__ void direct_load(Raw (&ia)[D], Raw (&ib)[D], const uint8_t* wa,
                                            const uint8_t* wb, int k, int k1, int c) {
#pragma unroll
  for (int d = 0; d < D; ++d) {
    if (k + d < k1) {
      ia[d] = direct_raw<T>(wa + int64_t(k + d) * T::kChunkBytes, c);
      ib[d] = direct_raw<T>(wb + int64_t(k + d) * T::kChunkBytes, c);
    }
  }
}

// The 16 steps of a chunk. The B operands of all 16 are requested first: loaded next to their
// mma, each step of the accumulator chain waited out an L1 / L2 latency (ncu: 0.61 instructions
// issued per scheduler cycle). Integer forms: int_chunk (rows g: items ia; g + 8: ib).
// NT token tiles: tile nt's B operands from xg + nt * tile_stride (live[nt]: this lane's token of
// the tile exists), each A operand used for every tile's mma.
template <class T, class Item, int NT, int... t>
__device__ __forceinline__ void direct_steps(const Item& ia, const Item& ib, const __half* xg,
                                             int64_t tile_stride, const bool (&live)[NT],
                                             float (&acc)[NT][4],
                                             std::integer_sequence<int, t...>) {
  uint2 b[NT][sizeof...(t)];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
    ((b[nt][t] = live[nt] ? *reinterpret_cast<const uint2*>(xg + nt * tile_stride + 16 * t)
                          : make_uint2(0u, 0u)),
     ...);
  if constexpr (IntForm<T>) {
    int_chunk<T, NT>(
        ia, ib, [&](int nt, int u) { return b[nt][u]; }, acc, std::integer_sequence<int, t...>{});
  } else {
    (
        [&] {
          const uint4 a = a_operand<T, t>(ia, ib);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
            mma_16816(acc[nt], a.x, a.y, a.z, a.w, b[nt][t].x, b[nt][t].y);
        }(),
        ...);
  }
}

// The in-place direct kernel's x at one token (kDirectXsTokens): the prepared row copied once per
// block into shared memory (rows of cols + kXsPad halves, where it fits in kDirectXsMax bytes), so
// that the B operands of every chunk come from there. Read from global memory, each chunk's first
// mma waited out an L2 round trip for its B operands (ncu, Q4_K llama8b ffn_gate/up at n = 1: 39 %
// of the stall samples long-scoreboard, half of them on that mma; L1 hit rate 53 %: each SM's
// first reader of a chunk of x misses). Measured (kernels/QMM.md, attempt 13): Q4_K at n = 1 5-17
// % faster at the rule's splits; at 2 tokens and more, and in the kernel that stages its weights
// (Q6_K, Q2_K), the shared memory cost more occupancy than it saved, so x stays in global memory
// there. The pad would put the 4 tokens of a half-warp's 8-byte loads on different banks. Only
// chunks [k_lo, k_hi) are copied (those the block's warps multiply), each at its place in the row.
// Returns where token g's row starts for the thread (g, c), as xp + g * cols + 4 c would be, and
// the distance between token tiles (8 tokens).
constexpr int kXsPad = 16;
constexpr size_t kDirectXsMax = size_t{32} << 10;
constexpr int kDirectXsTokens = 1;
inline size_t direct_xs_bytes(int n, int cols) {
  const size_t b = size_t(n) * size_t(cols + kXsPad) * sizeof(__half);
  return b <= kDirectXsMax ? b : 0;
}
__device__ __forceinline__ const __half* direct_x(const __half* __restrict__ xp, __half* xs, int n,
                                                  int cols, int k_lo, int k_hi, int g, int c,
                                                  int64_t& tile_stride) {
  if (xs == nullptr) {
    tile_stride = int64_t(8) * cols;
    return xp + int64_t(g) * cols + 4 * c;
  }
  constexpr int kPieces = kQmmChunk / 8;  // 16-byte pieces of a token's chunk
  const int pieces = (k_hi - k_lo) * kPieces, p0 = k_lo * kPieces;
  for (int i = threadIdx.x; i < n * pieces; i += blockDim.x) {
    const int tok = i / pieces, p = p0 + i - tok * pieces;
    cp_async16(xs + tok * (cols + kXsPad) + p * 8, xp + int64_t(tok) * cols + p * 8);
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  tile_stride = int64_t(8) * (cols + kXsPad);
  return xs + g * (cols + kXsPad) + 4 * c;
}

// K splits over a cluster of blocks (sm_90 thread-block clusters). Where a row tile has fewer
// blocks than the device has SMs (qwen2.5-1.5b's 1,536-row matrices: 96 tiles on 132 SMs), its
// splits beyond kDirectMaxWarps go to `cluster` blocks of that tile, launched as one cluster:
// block rank r runs splits r * warps + warp (+ cluster * warps ...), every split's sums go to
// part[] in rank 0's shared memory (distributed shared memory), and rank 0 adds them in order of
// s as one block does, so the sums are the one-block kernel's bit for bit. The barrier is
// arrived at on entry (relaxed) and waited on before the first remote store, so that rank 0's
// shared memory exists when it is written; a second one (release / acquire) before rank 0 adds.
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_arrive() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}
// Where rank 0 of the cluster has `p` of its shared memory (a generic address).
template <class P>
__device__ __forceinline__ P* cluster_rank0(P* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint64_t r;
  asm volatile("mapa.u64 %0, %1, %2;" : "=l"(r) : "l"(reinterpret_cast<uint64_t>(p)), "r"(0));
  return reinterpret_cast<P*>(r);
#else
  return p;
#endif
}

// The direct kernels' block in its cluster: row tile, rank, the splits' stride, and the chunks its
// warps multiply (all of them when a warp runs more than one split).
// Gated (gate_ff > 0, qmm_gated), in one of two forms: without a cluster the block's first half
// of warps runs the gate tile's splits and the second half the up tile's (gate_ff rows further);
// as a pair (a cluster of 2) rank 0 runs the gate tile's splits and rank 1 the up tile's. Either
// way a split's sums go to part slot part0 + s (part0 = splits for the up half; rank 0's part).
struct DirectBlock {
  int row0, cluster, rank, s0, stride, k_lo, k_hi, part0;
};
__device__ __forceinline__ DirectBlock direct_block(int cluster, int splits, int chunks,
                                                    int chunks_per_split, int gate_ff) {
  const bool pair = gate_ff > 0 && cluster == 2;
  const int halves = gate_ff > 0 && !pair ? 2 : 1;
  const int warps = (blockDim.x >> 5) / halves, warp = (threadIdx.x >> 5) % warps;
  DirectBlock b;
  b.cluster = cluster;
  b.rank = blockIdx.x % cluster;
  const int half = pair ? b.rank : (threadIdx.x >> 5) / warps;
  const int srank = pair ? 0 : b.rank;  // the block's place among its tile's split blocks
  b.row0 = blockIdx.x / cluster * 16 + half * gate_ff;
  b.part0 = half * splits;
  b.stride = (pair ? 1 : cluster) * warps;
  b.s0 = srank * warps + warp;
  const bool one_each = b.stride >= splits;
  b.k_lo = one_each ? min(chunks, srank * warps * chunks_per_split) : 0;
  b.k_hi = one_each ? min(chunks, (srank + 1) * warps * chunks_per_split) : chunks;
  return b;
}

// A split's sums of tile nt go to part[(s * NT + nt) * 32 + lane] (splits > 1).
template <int NT>
__device__ __forceinline__ void direct_store_part(float4* part, int s, const float (&acc)[NT][4]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
    part[(s * NT + nt) * 32 + lane] = make_float4(acc[nt][0], acc[nt][1], acc[nt][2], acc[nt][3]);
}

// The direct kernels' end: with splits > 1 each split's sums are in part (direct_store_part; rank
// 0's in a cluster) and warp 0 (of rank 0) adds them in order of s (after the barrier every
// thread reaches); then the sums v[nt] of
// rows row0 + g (x, y) and + 8 (z, w), tokens 8 nt + 2 c (x, z) and 8 nt + 2 c + 1 (y, w), go to
// y.
template <int NT>
__device__ __forceinline__ void direct_finish(float4 (&v)[NT], const float4* part, int splits,
                                              const DirectBlock& blk, float* y, int64_t ldy,
                                              int rows, int n) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int row0 = blk.row0;
  if (splits > 1) {
    if (blk.cluster > 1) {  // every rank's sums are in rank 0's part
      cluster_arrive();
      cluster_wait();
      if (blk.rank != 0) return;
    } else {
      __syncthreads();
    }
    if (warp != 0) return;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      v[nt] = part[nt * 32 + lane];
      for (int z = 1; z < splits; ++z) {
        const float4 p = part[(z * NT + nt) * 32 + lane];
        v[nt].x += p.x, v[nt].y += p.y, v[nt].z += p.z, v[nt].w += p.w;
      }
    }
  }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const float o[4] = {v[nt].x, v[nt].y, v[nt].z, v[nt].w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = row0 + g + 8 * (i >> 1), tk = 8 * nt + 2 * c + (i & 1);
      if (r < rows && tk < n) y[int64_t(tk) * ldy + r] = o[i];
    }
  }
}

// The gated kernel's end (qmm_gated): every split's sums of both halves are in part (rank 0's,
// after the cluster barrier, for a pair); warp 0 (of rank 0) adds
// each half's in order of s (so gate and up are what qmm writes for them), then writes
// out[t, r] = gate_act(gate, up) for its rows r of the gate tile, and the forms of out (f16,
// qmm; the qmm form's pad rows n .. round_up(n, 8) - 1 as zeros).
template <int NT>
__device__ __forceinline__ void direct_finish_gated(const float4* part, int splits, float* y,
                                                    int ff, int n, const DirectBlock& blk,
                                                    GateAct act, const ActForms& forms) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int row0 = blk.row0;
  if (blk.cluster > 1) {  // a pair: the up block's sums are in rank 0's part
    cluster_arrive();
    cluster_wait();
    if (blk.rank != 0) return;
  } else {
    __syncthreads();
  }
  if (warp != 0) return;
  const int n_pad = (n + 7) / 8 * 8;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    float4 vg = part[nt * 32 + lane], vu = part[(splits * NT + nt) * 32 + lane];
    for (int z = 1; z < splits; ++z) {
      const float4 p = part[(z * NT + nt) * 32 + lane];
      const float4 q = part[((splits + z) * NT + nt) * 32 + lane];
      vg.x += p.x, vg.y += p.y, vg.z += p.z, vg.w += p.w;
      vu.x += q.x, vu.y += q.y, vu.z += q.z, vu.w += q.w;
    }
    const float gs[4] = {vg.x, vg.y, vg.z, vg.w}, us[4] = {vu.x, vu.y, vu.z, vu.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = row0 + g + 8 * (i >> 1), tk = 8 * nt + 2 * c + (i & 1);
      const int64_t q = int64_t(tk) * ff + 4 * qmm_quad_of(r & ~3) + (r & 3);
      if (tk < n) {
        const float o = gate_act(act, gs[i], us[i]);
        y[int64_t(tk) * ff + r] = o;
        if (forms.f16) static_cast<__half*>(forms.f16)[int64_t(tk) * ff + r] = __float2half_rn(o);
        if (forms.qmm) static_cast<__half*>(forms.qmm)[q] = __float2half_rn(o);
      } else if (forms.qmm && tk < n_pad) {
        static_cast<__half*>(forms.qmm)[q] = __float2half_rn(0.0f);
      }
    }
  }
}

// Grid: `cluster` blocks per 16-row tile (one cluster; direct_grid); blocks of
// direct_grid(splits).warps warps; dynamic shared memory splits x NT x 512 bytes when splits > 1.
// NT token tiles (n <= 8 NT).
template <class T, int D, int NT>
__global__ void __launch_bounds__(kDirectMaxWarps * 32)
    qmm_direct_kernel(const uint8_t* __restrict__ w, int64_t row_bytes,
                      const __half* __restrict__ xp, float* __restrict__ y, int64_t ldy, int rows,
                      int cols, int n, int chunks_per_split, int splits, int cluster, int xs_bytes,
                      int gate_ff, GateAct act, ActForms forms) {
  using Item = typename DirectItem<T>::type;
  using Raw = typename DirectItem<T>::raw;
  extern __shared__ float4 part[];  // [split][lane] (splits > 1, or gated), then x (xs_bytes > 0)
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int chunks = cols / kQmmChunk;
  const bool gated = gate_ff > 0;
  const int part_slots = gated ? 2 * splits : splits > 1 ? splits : 0;
  const DirectBlock blk = direct_block(cluster, splits, chunks, chunks_per_split, gate_ff);
  if (cluster > 1) cluster_arrive_relaxed();
  float4* const part_out = cluster > 1 ? cluster_rank0(part) : part;
  const int row0 = blk.row0;
  const uint8_t* wa = w + int64_t(min(row0 + g, rows - 1)) * row_bytes;
  const uint8_t* wb = w + int64_t(min(row0 + g + 8, rows - 1)) * row_bytes;
  bool live[NT];  // tokens past n are zero: no loads
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) live[nt] = 8 * nt + g < n;
  Raw ca[D], cb[D];
  float4 v[NT];  // splits == 1: warp 0's sums
  int s = blk.s0;
  if (s < splits)
    direct_load<T, D>(ca, cb, wa, wb, s * chunks_per_split, min(chunks, (s + 1) * chunks_per_split),
                      c);
  // (Gated too: waiting here without the next kernel's early launch, as the norms that write
  // qmm's input do, measured slower, llama3.1-8b tg128 +2.5 % over unfused against +3.8 %.)
  grid_dependency_sync();
  int64_t tile_stride;  // token g's B operands (tile 0), and the next tile's distance
  const __half* xg =
      direct_x(xp, xs_bytes ? reinterpret_cast<__half*>(part + part_slots * NT * 32) : nullptr, n,
               cols, blk.k_lo, blk.k_hi, g, c, tile_stride);
  if (cluster > 1) cluster_wait();  // every block of the cluster runs: rank 0's part exists
  for (; s < splits; s += blk.stride) {
    const int k0 = s * chunks_per_split, k1 = min(chunks, k0 + chunks_per_split);
    float acc[NT][4] = {};
    for (int k = k0; k < k1; k += D) {
      Raw na[D], nb[D];
      // the next group of this split, else the first of the warp's next split
      const int s2 = k + D < k1 ? s : s + blk.stride;
      const int kn = k + D < k1 ? k + D : s2 * chunks_per_split;
      if (s2 < splits)
        direct_load<T, D>(na, nb, wa, wb, kn, min(chunks, (s2 + 1) * chunks_per_split), c);
#pragma unroll
      for (int d = 0; d < D; ++d)
        if (k + d < k1)
          direct_steps<T, Item, NT>(direct_decode<T>(ca[d], c), direct_decode<T>(cb[d], c),
                                    xg + int64_t(k + d) * kQmmChunk, tile_stride, live, acc,
                                    std::make_integer_sequence<int, 16>{});
#pragma unroll
      for (int d = 0; d < D; ++d) {
        ca[d] = na[d];
        cb[d] = nb[d];
      }
    }
    if (splits == 1 && !gated) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
        v[nt] = make_float4(acc[nt][0], acc[nt][1], acc[nt][2], acc[nt][3]);
    } else {
      direct_store_part<NT>(part_out, blk.part0 + s, acc);
    }
  }
  if (gated)
    direct_finish_gated<NT>(part, splits, y, gate_ff, n, blk, act, forms);
  else
    direct_finish<NT>(v, part, splits, blk, y, ldy, rows, n);
}

// The direct kernel for the formats whose chunks are costly to read in place (kDirectStaged in
// kernels/qmm_formats.cuh: Q6_K, Q2_K). Q6_K's 210-byte chunks are only 2-byte aligned: read in
// place they cost a thread 29 four-byte loads and funnel shifts a chunk and 163 registers for the
// chunk in flight (kernels/QMM.md, attempts 5 and 6). Here each warp copies its 16 rows' chunks
// into its own shared-memory stages in the staged kernel's layout (16-byte cp.async copies from
// the 16-byte boundary at or below each row's chunk, never past the matrix end: stage_tile_rows,
// or stage_rows for the tile that holds the last row; attempt 16's copies saved 18 % on llama8b's
// Q6_K output), kDirectStages - 1 chunks ahead of the one it multiplies, and the threads load
// their items from there. The warp's chunks are those of its splits s = warp, warp + warps, ...
// in order; the items, the steps and the sums are the direct kernel's, so the results are its
// results bit for bit.
constexpr int kDirectStages = 3;
template <class T>
concept DirectStaged = requires {
  requires T::kDirectStaged;
};

template <class T>
constexpr int direct_stage_bytes() {  // one warp's stage: 16 rows of a chunk
  return 16 * w_row_stride<T>();
}
// The direct kernels' shared partial sums: splits x NT x 32 lanes x float4 when splits > 1.
inline size_t direct_part_smem(int splits, int nt) {
  return splits > 1 ? size_t(splits) * nt * 32 * sizeof(float4) : 0;
}
template <class T>
size_t direct_staged_smem(int splits, int warps, int nt) {
  return direct_part_smem(splits, nt) + size_t(warps) * kDirectStages * direct_stage_bytes<T>();
}

template <class T, int NT>
__global__ void __launch_bounds__(kDirectMaxWarps * 32)
    qmm_direct_staged_kernel(const uint8_t* __restrict__ w, int64_t row_bytes,
                             const __half* __restrict__ xp, float* __restrict__ y, int64_t ldy,
                             int rows, int cols, int n, int chunks_per_split, int splits,
                             int cluster, int xs_bytes, int gate_ff, GateAct act, ActForms forms) {
  (void)xs_bytes;                         // always 0: x stays in global memory here (direct_x)
  (void)gate_ff, (void)act, (void)forms;  // 0: qmm_gated runs the in-place kernel only
  using Item = typename DirectItem<T>::type;
  extern __shared__ float4 smem[];  // part [splits][lane] (splits > 1), then the warps' stages
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int chunks = cols / kQmmChunk;
  const DirectBlock blk = direct_block(cluster, splits, chunks, chunks_per_split, 0);
  if (cluster > 1) cluster_arrive_relaxed();
  float4* part = smem;
  float4* const part_out = cluster > 1 ? cluster_rank0(part) : part;
  uint8_t* stages = reinterpret_cast<uint8_t*>(smem + (splits > 1 ? splits * NT * 32 : 0)) +
                    warp * kDirectStages * direct_stage_bytes<T>();
  const int row0 = blk.row0;
  const uint8_t* const w_end = w + int64_t(rows) * row_bytes;
  const int64_t row_a = min(row0 + g, rows - 1), row_b = min(row0 + g + 8, rows - 1);
  const __half* xg = xp + int64_t(g) * cols + 4 * c;
  bool live[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) live[nt] = 8 * nt + g < n;

  struct Cursor {  // a chunk of the warp: split s, chunk k (s >= splits: past the last)
    int s, k;
  };
  auto advance = [&](Cursor& q) {
    if (++q.k >= min(chunks, (q.s + 1) * chunks_per_split)) {
      q.s += blk.stride;
      q.k = q.s * chunks_per_split;
    }
  };
  // Copies chunk q.k of the tile's 16 rows into stage `slot`. One commit group per call.
  const bool clear = row0 + 16 < rows;  // stage_tile_rows may copy this tile
  auto issue = [&](const Cursor& q, int slot) {
    if (q.s < splits) {
      if (clear)
        stage_tile_rows<T>(stages + slot * direct_stage_bytes<T>(), w, row_bytes, row0, q.k, lane);
      else
        stage_rows<T>(stages + slot * direct_stage_bytes<T>(), w, row_bytes, w_end, row0, rows, 16,
                      q.k, lane, 32);
    }
    cp_async_commit();
  };

  Cursor next{blk.s0, blk.s0 * chunks_per_split}, cur = next;
#pragma unroll
  for (int i = 0; i < kDirectStages - 1; ++i) {
    issue(next, i);
    advance(next);
  }
  grid_dependency_sync();
  if (cluster > 1) cluster_wait();  // every block of the cluster runs: rank 0's part exists
  float4 v[NT];                     // splits == 1: warp 0's sums
  float acc[NT][4] = {};
  for (int slot = 0, ahead = kDirectStages - 1; cur.s < splits;) {
    issue(next, ahead);  // into the stage read in the previous iteration
    advance(next);
    ahead = ahead + 1 == kDirectStages ? 0 : ahead + 1;
    cp_async_wait<kDirectStages - 1>();
    __syncwarp();  // every lane's copies of this chunk are visible to the warp
    const uint8_t* st = stages + slot * direct_stage_bytes<T>();
    const Item ia = direct_item<T>(staged_row<T>(st, w, row_bytes, g, row_a, cur.k), c);
    const Item ib = direct_item<T>(staged_row<T>(st, w, row_bytes, g + 8, row_b, cur.k), c);
    __syncwarp();  // the stage is read before the next iteration's copies overwrite it
    direct_steps<T, Item, NT>(ia, ib, xg + int64_t(cur.k) * kQmmChunk, int64_t(8) * cols, live, acc,
                              std::make_integer_sequence<int, 16>{});
    slot = slot + 1 == kDirectStages ? 0 : slot + 1;
    const int s = cur.s;
    advance(cur);
    if (cur.s != s) {  // split s is done
      if (splits == 1) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
          v[nt] = make_float4(acc[nt][0], acc[nt][1], acc[nt][2], acc[nt][3]);
      } else {
        direct_store_part<NT>(part_out, s, acc);
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;
    }
  }
  cp_async_wait<0>();
  direct_finish<NT>(v, part, splits, blk, y, ldy, rows, n);
}

// y[t, r] = sum over s < splits of ws[s][t][r], in order of s.
__global__ void qmm_reduce_kernel(const float* __restrict__ ws, float* __restrict__ y, int64_t ldy,
                                  int rows, int n, int splits) {
  grid_dependency_wait();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(rows) * n) return;
  const int64_t t = i / rows, r = i % rows;
  float s = ws[i];
  for (int z = 1; z < splits; ++z) s += ws[int64_t(z) * rows * n + i];
  y[t * ldy + r] = s;
}

// Thread per (token row, chunk, t, c): the 4 columns chunk_col(t, c, 0..3), rounded to fp16.
__global__ void prepare_x_kernel(const float* __restrict__ x, __half* __restrict__ xp, int n,
                                 int n8, int cols) {
  grid_dependency_wait();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // quad index
  const int quads = cols / 4;
  if (i >= int64_t(n8) * quads) return;
  const int tok = static_cast<int>(i / quads), q = static_cast<int>(i % quads);
  const int chunk = q / 64, t = (q % 64) / 4, c = q % 4;
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  if (tok < n)
    v = __ldg(reinterpret_cast<const float4*>(x + int64_t(tok) * cols + chunk * kQmmChunk +
                                              chunk_col(t, c, 0)));
  reinterpret_cast<uint2*>(xp)[i] = pack_half4(v);
}

// The direct kernel that runs T: each warp staging its own chunks (kDirectStaged), or loading
// them in place. Its dynamic shared memory for a block of `splits` warps' splits.
template <class T, int NT>
auto direct_kernel() {
  if constexpr (DirectStaged<T>)
    return qmm_direct_staged_kernel<T, NT>;
  else
    return qmm_direct_kernel<T, direct_group<T>(), NT>;
}
template <class T, int NT>
size_t direct_smem(int splits, int warps) {  // warps: the block's (direct_grid)
  if constexpr (DirectStaged<T>)
    return direct_staged_smem<T>(splits, warps, NT);
  else
    return direct_part_smem(splits, NT);
}

// Once per process (one device model): the kernels' shared-memory limit raised to what the most
// splits and (in place) x in shared memory take, and how many blocks of 1..kDirectMaxWarps
// warps of the one-tile kernel an SM holds (the split rule's input, so that it follows the
// kernel's registers and shared memory; the two-tile kernel takes the same splits, so that a
// token's sums do not depend on the tile count).
template <class T>
const DirectBlocksPerSm& direct_setup() {
  static const DirectBlocksPerSm table = [] {
    const size_t xs = DirectStaged<T> ? 0 : kDirectXsMax;  // direct_x: the in-place kernel only
    RZ_CUDA_CHECK(cudaFuncSetAttribute(
        direct_kernel<T, 1>(), cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(direct_smem<T, 1>(kDirectMaxSplits, kDirectMaxWarps) + xs)));
    RZ_CUDA_CHECK(cudaFuncSetAttribute(
        direct_kernel<T, 2>(), cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(direct_smem<T, 2>(kDirectMaxSplits, kDirectMaxWarps) + xs)));
    DirectBlocksPerSm b{};
    for (int w = 1; w <= kDirectMaxWarps; ++w)
      RZ_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b[w], direct_kernel<T, 1>(),
                                                                  32 * w, direct_smem<T, 1>(w, w)));
    return b;
  }();
  return table;
}

// out, ld: where the staged kernel writes (y itself, or the split workspace); the direct kernel
// adds its splits itself and writes y [n, ldy]. splits 0 (direct calls only): the direct kernel's
// own rule.
template <class T>
void launch(const void* w, int64_t row_bytes, const void* xp, float* out, int64_t ld, float* y,
            int64_t ldy, int rows, int cols, int n, int splits, bool direct, cudaStream_t stream) {
  const int chunks = cols / kQmmChunk;
  if (direct) {  // one or two token tiles: a direct kernel, no block staging
    const DirectBlocksPerSm& blocks = direct_setup<T>();
    const bool clusters = device_supports_clusters();
    if (splits == 0) splits = choose_direct_splits(rows, cols, device_sm_count(), blocks, clusters);
    const int per_split = (chunks + splits - 1) / splits;
    const DirectGrid dg = direct_grid(splits, clusters);
    const size_t xs = !DirectStaged<T> && n <= kDirectXsTokens ? direct_xs_bytes(n, cols) : 0;
    const auto go = [&](auto kernel, size_t smem) {
      launch_kernel_clusters(
          kernel, static_cast<unsigned>((rows + 15) / 16 * dg.cluster), dg.warps * 32, smem + xs,
          stream, static_cast<unsigned>(dg.cluster), static_cast<const uint8_t*>(w), row_bytes,
          static_cast<const __half*>(xp), y, ldy, rows, cols, n, per_split, splits, dg.cluster,
          static_cast<int>(xs), 0, GateAct::silu, ActForms{});
    };
    if (n <= 8)
      go(direct_kernel<T, 1>(), direct_smem<T, 1>(splits, dg.warps));
    else
      go(direct_kernel<T, 2>(), direct_smem<T, 2>(splits, dg.warps));
    RZ_CUDA_CHECK_LAUNCH();
    return;
  }
  const int per_split = (chunks + splits - 1) / splits;
  const int tiles8 = (n + 7) / 8;
  const int nt = staged_nt(n);
  const dim3 grid((tiles8 + nt - 1) / nt, (rows + kRowsPerBlock - 1) / kRowsPerBlock,
                  (chunks + per_split - 1) / per_split);
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* x = static_cast<const __half*>(xp);
  using Kernel =
      void (*)(const uint8_t*, int64_t, const __half*, float*, int64_t, int, int, int, int);
  struct Variant {
    Kernel kernel;
    int smem;
  };
  // [tile index][deep]: NT = 1, 2, 4, 8 tokens x 8; 2 or 4 stages (8: always 2).
  static const Variant variants[4][2] = {{{qmm_kernel<T, 1, 2>, 2 * stage_bytes<T, 1>()},
                                          {qmm_kernel<T, 1, 4>, 4 * stage_bytes<T, 1>()}},
                                         {{qmm_kernel<T, 2, 2>, 2 * stage_bytes<T, 2>()},
                                          {qmm_kernel<T, 2, 4>, 4 * stage_bytes<T, 2>()}},
                                         {{qmm_kernel<T, 4, 2>, 2 * stage_bytes<T, 4>()},
                                          {qmm_kernel<T, 4, 4>, 4 * stage_bytes<T, 4>()}},
                                         {{qmm_kernel<T, 8, 2>, 2 * stage_bytes<T, 8>()},
                                          {qmm_kernel<T, 8, 2>, 2 * stage_bytes<T, 8>()}}};
  // Shared memory above 48 KiB must be allowed per kernel, once (not a stream operation, so
  // also fine while a stream is being captured).
  static const bool configured = [] {
    for (const auto& row : variants)
      for (const Variant& v : row)
        RZ_CUDA_CHECK(
            cudaFuncSetAttribute(v.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, v.smem));
    return true;
  }();
  (void)configured;
  const bool deep = int64_t(grid.x) * grid.y * grid.z < device_sm_count();
  const Variant& v = variants[nt == 1 ? 0 : nt == 2 ? 1 : nt == 4 ? 2 : 3][deep ? 1 : 0];
  launch_kernel(v.kernel, grid, kWarps * 32, v.smem, stream, wp, row_bytes, x, out, ld, rows, cols,
                n, per_split);
  RZ_CUDA_CHECK_LAUNCH();
}

// How the gated kernel runs the fused [gate; up] matrix of 2 ff rows for n tokens, with the splits
// qmm's direct kernel takes for it (an in-place format, the splits in one block): both halves'
// warps in one block where that block has at most kGatedMaxWarps, else (one token tile, on a
// device with clusters) as a pair of blocks, the gate tile's and the up tile's, in a cluster;
// splits 0 where it does not run. Measured on the H200 (rz bench, alternating with the unfused
// path in one build): one block for llama3.1-8b's gate/up (2 splits, 4 warps): tg128 +3.8 %, B = 4
// +2.4 % (bench/gpu-runs/2026-11-28-h200-qmm-gated.log; as a pair -1 to -2 %); qwen2.5-1.5b's (3
// splits) in one block of 6 warps was slower (-2 % at B = 1, -4 to -6 % at B = 4 and 16), as a pair
// tg128 +2.5-3.2 %, B = 4 +2.3 %, but B = 16 -2 % (two token tiles), so a pair up to 8 tokens
// (bench/gpu-runs/2026-11-28-h200-qmm-gated-pairs.log).
constexpr int kGatedMaxWarps = 4;
struct GatedGrid {
  int splits = 0;  // 0: not gated
  bool pair = false;
};
template <class T>
GatedGrid gated_grid(int64_t ff, int64_t cols, int64_t n) {
  if constexpr (DirectStaged<T>) {
    return {};
  } else {
    const bool clusters = device_supports_clusters();
    const int splits =
        choose_direct_splits(2 * ff, cols, device_sm_count(), direct_setup<T>(), clusters);
    const DirectGrid dg = direct_grid(splits, clusters);
    if (dg.cluster != 1) return {};
    if (2 * dg.warps <= kGatedMaxWarps) return {splits, false};
    if (clusters && n <= 8) return {splits, true};
    return {};
  }
}

// qmm_gated's launch: the in-place direct kernel on the fused [gate; up] matrix with the splits
// qmm takes for it, each block a gate tile and its up tile (twice the warps), or each cluster of
// two blocks (gated_grid).
template <class T>
void launch_gated(const void* w, int64_t row_bytes, const void* xp, float* out, int ff, int cols,
                  int n, GateAct act, const ActForms& forms, cudaStream_t stream) {
  if constexpr (!DirectStaged<T>) {
    const GatedGrid gg = gated_grid<T>(ff, cols, n);
    const int splits = gg.splits;
    if (splits == 0) throw Error("qmm_gated: the gated kernel cannot run this matrix");
    const DirectGrid dg = direct_grid(splits);
    const int chunks = cols / kQmmChunk, per_split = (chunks + splits - 1) / splits;
    const size_t xs = n <= kDirectXsTokens ? direct_xs_bytes(n, cols) : 0;
    const unsigned cluster = gg.pair ? 2u : 1u;
    const auto go = [&](auto kernel, int nt) {
      launch_kernel_clusters(
          kernel, static_cast<unsigned>(ff / 16) * cluster, (gg.pair ? 1 : 2) * dg.warps * 32,
          direct_part_smem(2 * splits, nt) + xs, stream, cluster, static_cast<const uint8_t*>(w),
          row_bytes, static_cast<const __half*>(xp), out, int64_t(ff), 2 * ff, cols, n, per_split,
          splits, static_cast<int>(cluster), static_cast<int>(xs), ff, act, forms);
    };
    if (n <= 8)
      go(direct_kernel<T, 1>(), 1);
    else
      go(direct_kernel<T, 2>(), 2);
    RZ_CUDA_CHECK_LAUNCH();
  }
}

// Splits so that row tiles × splits fill about two blocks per SM, each split keeping at least
// 4 chunks (1,024 columns) of the K loop.
int choose_splits(int64_t rows, int64_t cols, int sms) {
  const int64_t row_tiles = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const int64_t chunks = cols / kQmmChunk;
  const int64_t want = 2 * int64_t(sms);
  if (row_tiles >= want) return 1;
  int64_t s = (want + row_tiles - 1) / row_tiles;
  s = std::min<int64_t>(s, chunks / 4);
  if (s <= 1) return 1;
  // Every split non-empty: with per = ceil(chunks / s), the last split starts before chunks.
  const int64_t per = (chunks + s - 1) / s;
  return static_cast<int>((chunks + per - 1) / per);
}

// The direct kernel's splits: among the counts s (1..kDirectMaxWarps, and to kDirectMaxSplits in
// clusters where the device has them; no split empty) that leave a warp at most kDirectMaxRun
// chunks where that is possible, the one with the least modelled time, ceil(tiles x cluster /
// (blocks[warps] x sms)) waves of ceil(chunks / s) + 1 chunk rounds each (a warp's chunks run one
// after another at a latency-bound pace, and its first loads and its end cost about one more),
// plus half a round for a cluster's barrier and remote sums; ties go to fewer splits.
// blocks[w]: the blocks of w warps an SM holds (kernels/QMM.md, "Split rule"). Where the tiles
// are few it fills the machine (a 1536 x 1536 matrix's 96 tiles took 7.7 us with one split: six
// chunks one after another in each warp; qwen2.5-1.5b's 1536 x 8960 ffn_down, 96 tiles of 35
// chunks, takes 12 splits in clusters of two blocks instead of 7 in one: Q6_K 11.8 -> 9.3 us).
// The cap is measured, not modelled: llama8b's output (8,016 tiles of 16 chunks) ran in 134 us
// with one split against 111 with two, though the waves favour one
// (QmmBench.DISABLED_DirectSplits).
constexpr int kDirectMaxRun = 8;

int choose_direct_splits(int64_t rows, int64_t cols, int sms, const DirectBlocksPerSm& blocks,
                         bool clusters) {
  const int64_t tiles = (rows + 15) / 16, chunks = cols / kQmmChunk;
  const int64_t max_run =
      std::max<int64_t>(kDirectMaxRun, (chunks + kDirectMaxWarps - 1) / kDirectMaxWarps);
  const int max_splits = clusters ? kDirectMaxSplits : kDirectMaxWarps;
  int best = 1;
  int64_t best_time = INT64_MAX;
  for (int s = 1; s <= max_splits && s <= chunks; ++s) {
    const int64_t per = (chunks + s - 1) / s;
    if ((chunks + per - 1) / per != s) continue;  // an empty split: s - 1 does the same
    if (per > max_run) continue;
    const DirectGrid dg = direct_grid(s, clusters);
    const int64_t slots = std::max(1, blocks[dg.warps]) * int64_t(std::max(1, sms));
    const int64_t half_rounds =
        2 * ((tiles * dg.cluster + slots - 1) / slots) * (per + 1) + (dg.cluster > 1 ? 1 : 0);
    if (half_rounds < best_time) best = s, best_time = half_rounds;
  }
  return best;
}

// f.template operator()<T>() with T the traits of a qmm type (qmm_supported's list).
template <class F>
void with_format(GgmlType type, F&& f) {
  switch (type) {
    case GgmlType::Q4_K: f.template operator()<Q4K>(); break;
    case GgmlType::Q6_K: f.template operator()<Q6K>(); break;
    case GgmlType::Q8_0: f.template operator()<Q8_0>(); break;
    case GgmlType::Q4_0: f.template operator()<Q4_0>(); break;
    case GgmlType::Q4_1: f.template operator()<Q4_1>(); break;
    case GgmlType::Q5_0: f.template operator()<Q5_0>(); break;
    case GgmlType::Q5_1: f.template operator()<Q5_1>(); break;
    case GgmlType::Q5_K: f.template operator()<Q5K>(); break;
    case GgmlType::Q2_K: f.template operator()<Q2K>(); break;
    case GgmlType::Q3_K: f.template operator()<Q3K>(); break;
    case GgmlType::IQ4_NL: f.template operator()<IQ4NL>(); break;
    default: f.template operator()<IQ4XS>(); break;
  }
}

// Whether qmm runs the direct kernel for n tokens of this matrix with `splits` (0: the rules').
bool direct_call(GgmlType type, int64_t rows, int64_t cols, int64_t n, int splits) {
  bool staged = false;
  with_format(type, [&]<class T>() { staged = DirectStaged<T>; });
  return runs_direct(n, splits, staged, rows * int64_t(row_size(type, cols)));
}

// The splits qmm's direct kernel takes for this shape on this device (1..16 tokens), and the
// occupancy table the rule read; for the tests and the bench.
int direct_splits(GgmlType type, int64_t rows, int64_t cols, DirectBlocksPerSm* blocks) {
  int s = 0;
  with_format(type, [&]<class T>() {
    const DirectBlocksPerSm& b = direct_setup<T>();
    if (blocks) *blocks = b;
    s = choose_direct_splits(rows, cols, device_sm_count(), b, device_supports_clusters());
  });
  return s;
}

// qmm with a forced number of K splits (0: the kernel's own rule); the tests force every split.
void run(GgmlType type, const void* w, const void* xp, float* y, int64_t rows, int64_t cols,
         int64_t n, int64_t ldy, float* ws, size_t ws_floats, int splits, cudaStream_t stream);

}  // namespace qmm_detail

namespace {

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

std::string what_of(GgmlType type, int64_t rows, int64_t cols, int64_t n) {
  const auto& tr = type_traits(type);
  return "qmm " + (tr.name.empty() ? std::string("type") : std::string(tr.name)) + " [" +
         std::to_string(rows) + ", " + std::to_string(cols) + "] x " + std::to_string(n) +
         " tokens";
}

}  // namespace

bool qmm_supported(GgmlType type, int64_t cols) {
  switch (type) {
    case GgmlType::Q4_K:
    case GgmlType::Q6_K:
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q5_K:
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS: return cols > 0 && cols % kQmmChunk == 0;
    default: return false;
  }
}

int64_t qmm_x_elems(int64_t n, int64_t cols) { return (n + 7) / 8 * 8 * cols; }

void qmm_prepare_x(const float* x, void* xp, int64_t n, int64_t cols, cudaStream_t stream) {
  if (n < 0 || cols <= 0 || cols % kQmmChunk != 0 || cols > (int64_t{1} << 30) ||
      n > (int64_t{1} << 24))
    throw Error("qmm_prepare_x: n " + std::to_string(n) + ", cols " + std::to_string(cols) +
                ": cols must be a positive multiple of 256");
  if (n == 0) return;
  if (!x || !xp || !aligned16(x) || !aligned16(xp))
    throw Error("qmm_prepare_x: null or misaligned pointer");
  const int64_t quads = (n + 7) / 8 * 8 * (cols / 4);
  const int threads = 256;
  launch_kernel(qmm_detail::prepare_x_kernel,
                static_cast<unsigned>((quads + threads - 1) / threads), threads, 0, stream, x,
                static_cast<__half*>(xp), static_cast<int>(n), static_cast<int>((n + 7) / 8 * 8),
                static_cast<int>(cols));
  RZ_CUDA_CHECK_LAUNCH();
}

bool qmm_runs_direct(GgmlType type, int64_t rows, int64_t cols, int64_t n) {
  return qmm_supported(type, cols) && n >= 1 && qmm_detail::direct_call(type, rows, cols, n, 0);
}

bool qmm_integer_form(GgmlType type, int64_t n) {
  if (!qmm_supported(type, kQmmChunk) || n < 1) return false;
  bool r = false;
  qmm_detail::with_format(type, [&]<class T>() {
    if constexpr (qmm_detail::IntForm<T>)
      r = qmm_detail::int_form_in_tiles(T::kIntMins, qmm_detail::staged_nt(n));
  });
  return r;
}

int qmm_splits(int64_t rows, int64_t cols) {
  return qmm_detail::choose_splits(rows, cols, device_sm_count());
}

size_t qmm_workspace_floats(int64_t rows, int64_t cols, int64_t n) {
  if (n <= 8) return 0;  // the direct kernel (splits added in-block); 9-16 may run staged
  const int s = qmm_splits(rows, cols);
  return s > 1 ? size_t(s) * size_t(rows) * size_t(n) : 0;
}

void qmm(GgmlType type, const void* w, const void* xp, float* y, int64_t rows, int64_t cols,
         int64_t n, int64_t ldy, float* ws, size_t ws_floats, cudaStream_t stream) {
  qmm_detail::run(type, w, xp, y, rows, cols, n, ldy, ws, ws_floats, 0, stream);
}

bool qmm_gated_runs(GgmlType type, int64_t ff, int64_t cols, int64_t n) {
  if (n < 1 || n > kQmmDirectMaxTokens || ff < 16 || ff % 16 != 0 || ff > (int64_t{1} << 29) ||
      cols > (int64_t{1} << 30) || !qmm_supported(type, cols) ||
      !qmm_runs_direct(type, 2 * ff, cols, n))
    return false;
  int splits = 0;
  qmm_detail::with_format(
      type, [&]<class T>() { splits = qmm_detail::gated_grid<T>(ff, cols, n).splits; });
  return splits > 0;
}

bool qmm_gated(GgmlType type, const void* w, const void* xp, float* out, int64_t ff, int64_t cols,
               int64_t n, GateAct act, const ActForms& forms, cudaStream_t stream) {
  if (forms.q8 || !qmm_gated_runs(type, ff, cols, n)) return false;
  if (!w || !xp || !out || !aligned16(w) || !aligned16(xp))
    throw Error(what_of(type, 2 * ff, cols, n) + " gated: null or misaligned pointer");
  check_act_forms(forms, ff, "qmm_gated");
  const int64_t row_bytes = static_cast<int64_t>(row_size(type, cols));
  qmm_detail::with_format(type, [&]<class T>() {
    qmm_detail::launch_gated<T>(w, row_bytes, xp, out, static_cast<int>(ff), static_cast<int>(cols),
                                static_cast<int>(n), act, forms, stream);
  });
  return true;
}

void qmm_detail::run(GgmlType type, const void* w, const void* xp, float* y, int64_t rows,
                     int64_t cols, int64_t n, int64_t ldy, float* ws, size_t ws_floats, int splits,
                     cudaStream_t stream) {
  // The message's prefix, built only when a check fails (this runs for every matmul of a step).
  const auto what = [&] { return what_of(type, rows, cols, n); };
  if (!qmm_supported(type, cols))
    throw Error(what() + ": type without a qmm kernel, or cols not a multiple of 256");
  if (rows < 1 || n < 0 || rows > (int64_t{1} << 30) || cols > (int64_t{1} << 30) ||
      n > (int64_t{1} << 24) || ldy < rows)
    throw Error(what() + ": bad shape (ldy " + std::to_string(ldy) + ")");
  if (n == 0) return;
  if (!w || !xp || !y || !aligned16(w) || !aligned16(xp))
    throw Error(what() + ": null or misaligned pointer");
  const int chunks = static_cast<int>(cols / kQmmChunk);
  // After the checks: the rules ask the device. For the direct kernel, splits 0 lets it choose
  // (its rule depends on the kernel the type runs); it adds its splits in-block.
  if (splits != 0) {
    splits = std::clamp(splits, 1, chunks);
    const int per = (chunks + splits - 1) / splits;
    splits = (chunks + per - 1) / per;  // no empty split
  }
  const bool direct = qmm_detail::direct_call(type, rows, cols, n, splits);
  if (splits == 0 && !direct) splits = qmm_splits(rows, cols);
  if (splits > 1 && !direct && (!ws || ws_floats < size_t(splits) * size_t(rows) * size_t(n)))
    throw Error(what() + ": workspace of " + std::to_string(ws_floats) + " floats, " +
                std::to_string(size_t(splits) * size_t(rows) * size_t(n)) + " needed");
  const int64_t row_bytes = static_cast<int64_t>(row_size(type, cols));
  float* out = splits > 1 ? ws : y;
  const int64_t ld = splits > 1 ? rows : ldy;
  const int r = static_cast<int>(rows), k = static_cast<int>(cols), m = static_cast<int>(n);
  with_format(type, [&]<class T>() {
    launch<T>(w, row_bytes, xp, out, ld, y, ldy, r, k, m, splits, direct, stream);
  });
  if (splits > 1 && !direct) {
    const int64_t total = rows * n;
    launch_kernel(qmm_reduce_kernel, static_cast<unsigned>((total + 255) / 256), 256, 0, stream, ws,
                  y, ldy, r, m, splits);
    RZ_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace rz::gpu

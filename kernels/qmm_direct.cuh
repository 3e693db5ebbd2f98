// qmm's direct kernels (kernels/qmm.cu, kernels/QMM.md, "The direct kernel"): up to 16 tokens, the
// weights straight into each thread's items (or through each warp's own stages), K splits added
// in the block or in a cluster, and the gated gate/up's end (qmm_gated).
#pragma once
#include <cuda_fp16.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "kernels/act_forms.hpp"
#include "kernels/cuda_common.cuh"
#include "kernels/gate_act.cuh"
#include "kernels/mma.cuh"
#include "kernels/qmm_chunk.cuh"
#include "kernels/qmm_stage.cuh"

namespace rz::gpu::qmm_detail {

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
// splits' reduce kernel, its pipeline's fill): on matrices up to this size (formats read in
// place; the staging ones to the bound below). Larger ones stay with the staged kernel there,
// which was faster on them (H200, 16 tokens, own time: llama3.1-8b gate/up 28,672 x 4,096 Q4_K
// 49.3 us staged against 53.6 direct, Q6_K ffn_down 36.3 against 49.2, output 259 against 336;
// qwen2.5-1.5b's 1.3-7.7 MB Q4_K matrices 5.5-7.9 against 7.7-9.6 + 2.0 for the reduce).
constexpr int64_t kDirect2MaxBytes = int64_t{16} << 20;
// The staging formats (Q6_K, Q2_K) take two tiles too on matrices up to this size (attempt 20 in
// kernels/QMM.md): the staged kernel ran qwen2.5-1.5b's Q6_K attn_v [256 x 1536] at 16 tokens in
// 4 blocks, 10.7 us a call; on the direct staged kernel's two tiles rz bench ran qwen2.5-1.5b B =
// 9 / 12 / 16 +7 / +5 / +9 %, llama3.1-8b +1 / +1 / +2 % (attn_v [1024 x 4096], 3.4 MB). The
// large Q6_K matrices lost with two tiles (llama3.1-8b ffn_down 36.3 -> 49.2 us, attempt 10);
// 16 MiB (qwen's ffn_down, 11.3 MB, too) measured no better than 4.
constexpr int64_t kDirect2StagedMaxBytes = int64_t{4} << 20;
// Whether a call of n tokens with this many K splits (0: the rule's) runs the direct kernel, for a
// format that stages its chunks or not and a matrix of `bytes`.
__host__ __device__ constexpr bool runs_direct(int64_t n, int64_t splits, bool staged_format,
                                               int64_t bytes) {
  return splits <= kDirectMaxSplits &&
         (n <= 8 || (n <= kQmmDirectMaxTokens &&
                     bytes <= (staged_format ? kDirect2StagedMaxBytes : kDirect2MaxBytes)));
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

// Waits until every split's sums are in part (rank 0's in a cluster: the cluster barrier, which the
// other ranks only pass through; else the block's barrier); true for the warp that adds them,
// warp 0 of rank 0 (warp: this thread's).
__device__ __forceinline__ bool direct_parts_ready(const DirectBlock& blk, int warp) {
  if (blk.cluster > 1) {
    cluster_arrive();
    cluster_wait();
    if (blk.rank != 0) return false;
  } else {
    __syncthreads();
  }
  return warp == 0;
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
    if (!direct_parts_ready(blk, warp)) return;
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
  if (!direct_parts_ready(blk, warp)) return;  // a pair: the up block's sums are in rank 0's part
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
#define RZ_QMM_DIRECT_PARAMS                                                               \
  const uint8_t *__restrict__ w, int64_t row_bytes, const __half *__restrict__ xp,         \
      float *__restrict__ y, int64_t ldy, int rows, int cols, int n, int chunks_per_split, \
      int splits, int cluster, int xs_bytes, int gate_ff, GateAct act, ActForms forms
template <class T, int D, int NT, bool kX1>
__device__ __forceinline__ void direct_body(RZ_QMM_DIRECT_PARAMS) {
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
  const uint8_t* wa;
  const uint8_t* wb;
  if constexpr (kX1) {  // the same addresses, written as qmm_direct_x1_kernel's note says
    const uint8_t* wr[2];
#pragma unroll
    for (int r = 0; r < 1; ++r) {
      wr[0] = w + int64_t(min(row0 + r * gate_ff + g, rows - 1)) * row_bytes;
      wr[1] = w + int64_t(min(row0 + r * gate_ff + g + 8, rows - 1)) * row_bytes;
    }
    wa = wr[0];
    wb = wr[1];
  } else {
    wa = w + int64_t(min(row0 + g, rows - 1)) * row_bytes;
    wb = w + int64_t(min(row0 + g + 8, rows - 1)) * row_bytes;
  }
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

#define RZ_QMM_DIRECT_ARGS                                                                       \
  w, row_bytes, xp, y, ldy, rows, cols, n, chunks_per_split, splits, cluster, xs_bytes, gate_ff, \
      act, forms
template <class T, int D, int NT>
__global__ void __launch_bounds__(kDirectMaxWarps * 32) qmm_direct_kernel(RZ_QMM_DIRECT_PARAMS) {
  direct_body<T, D, NT, false>(RZ_QMM_DIRECT_ARGS);
}
// One token with x in shared memory (xs_bytes > 0; qmm.cu's launch takes it there). The same
// code and sums as qmm_direct_kernel's but for how the two row addresses are written: in the form
// above (a loop over one row tile, as a draft for two row tiles a warp had it) ptxas builds the
// Q4_K kernel in 100 registers instead of 126, with another schedule, and that ran the one-token
// steps faster on an H200 (rz bench B = 1: llama3.1-8b Q4_K_M +8.6 %, qwen2.5-1.5b Q4_K_M +2.4 %,
// Q5_K_M +1.6 %; bench/gpu-runs/2026-11-29-h200-qmm-x1.log) but the 2-8 token ones, whose x comes
// from global memory, 8-21 % slower (2026-11-29-h200-gated-dual-attempt.log); capping the plain
// kernel's registers instead did not do it (2026-11-29-h200-qmm-x1-regs-attempt.log). So one token
// runs this instantiation and 2-8 tokens the other. A schedule found, not designed: a compiler
// update can move it; RZ_QMM_X1_OFF=1 (qmm_detail::set_direct_x1) runs the plain kernel to check.
template <class T, int D>
__global__ void __launch_bounds__(kDirectMaxWarps * 32) qmm_direct_x1_kernel(RZ_QMM_DIRECT_PARAMS) {
  direct_body<T, D, 1, true>(RZ_QMM_DIRECT_ARGS);
}
#undef RZ_QMM_DIRECT_PARAMS
#undef RZ_QMM_DIRECT_ARGS

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

}  // namespace rz::gpu::qmm_detail

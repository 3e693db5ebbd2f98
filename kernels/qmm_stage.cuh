// qmm's shared-memory staging (kernels/qmm.cu): the staged kernel's block tile and pipeline stage
// layout, and the cp.async copies of a chunk of weight rows (and of the tokens' x) into a stage,
// which the direct staged kernel (kernels/qmm_direct.cuh) uses per warp too.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda_common.cuh"
#include "kernels/mma.cuh"  // cp_async16
#include "kernels/qmm.hpp"
#include "kernels/qmm_layout.cuh"

namespace rz::gpu::qmm_detail {

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
// RT: row tiles a warp (the block's rows kRowsPerBlock RT; qmm_kernel).
template <class T, int NT, int RT = 1>
__host__ __device__ constexpr int stage_bytes() {
  return 8 * NT * kXRow * 2 + RT * kRowsPerBlock * w_row_stride<T>() + 16;
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

// The copies of chunk k of a block's 16 kThreads / 32 weight rows from row_base by its kThreads
// threads: as whole tiles where the rows are clear of the matrix's last row (clear), else row by
// row with stage_rows' clamps (the staged and the wide kernels).
template <class T, int kThreads>
__device__ __forceinline__ void stage_block_rows(uint8_t* ws, const uint8_t* __restrict__ w,
                                                 int64_t row_bytes, const uint8_t* w_end,
                                                 int row_base, int rows, int k, int tid,
                                                 bool clear) {
  if (clear)
    stage_tile_rows<T, kThreads>(ws, w, row_bytes, row_base, k, tid);
  else
    stage_rows<T>(ws, w, row_bytes, w_end, row_base, rows, 16 * (kThreads / 32), k, tid, kThreads);
}

// Issues the copies of chunk k into a stage (all kWarps * 32 threads of the block take part):
// the tokens' x, then the block's RT kRowsPerBlock rows (RT runs of kRowsPerBlock).
// clear: the block's rows are clear of the matrix's last row (stage_tile_rows).
template <class T, int NT, int RT = 1>
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
#pragma unroll
  for (int r = 0; r < RT; ++r)
    stage_block_rows<T, kThreads>(st + 8 * NT * kXRow * 2 + r * kRowsPerBlock * w_row_stride<T>(),
                                  w, row_bytes, w_end, row_base + r * kRowsPerBlock, rows, k,
                                  threadIdx.x, clear);
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

}  // namespace rz::gpu::qmm_detail

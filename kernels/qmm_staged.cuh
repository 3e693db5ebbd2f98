// qmm's staged kernel (kernels/qmm.cu, kernels/QMM.md): blocks of 64 weight rows times token tiles
// of 8 NT tokens, each chunk through a cp.async pipeline in shared memory; the 9-16-token calls the
// direct kernel does not take, and everything past 16 tokens.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>
#include <utility>

#include "kernels/cuda_common.cuh"
#include "kernels/qmm_chunk.cuh"
#include "kernels/qmm_stage.cuh"

namespace rz::gpu::qmm_detail {

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
// together and the rows come from DRAM once), y = row tiles of kRowsPerBlock RT, z = K splits.
// out: y itself (splits == 1, row stride ld) or the workspace [split][n][rows] (ld = rows).
// Chunks go through an S-deep cp.async pipeline in shared memory: the copies of the next S - 1
// chunks are in flight while the warps multiply chunk k. Each chunk runs int_chunk where
// staged_int says so (the direct kernel's arithmetic, its B operands from the stage), else the
// fp32 dequantization (chunk_steps). RT > 1 (the fp32 form only): each warp takes RT 16-row tiles,
// rows warp 16 + r kRowsPerBlock of the block, and loads each B operand from the stage once for
// all of them (chunk_steps_rows; the same sums as RT = 1's bit for bit).
template <class T, int NT, int S, int RT = 1>
__global__ void __launch_bounds__(kWarps * 32)
    qmm_kernel(const uint8_t* __restrict__ w, int64_t row_bytes, const __half* __restrict__ xp,
               float* __restrict__ out, int64_t ld, int rows, int cols, int n,
               int chunks_per_split) {
  static_assert(RT == 1 || !staged_int<T, NT>(), "row tiles a warp: the fp32 form only");
  grid_dependency_wait();
  extern __shared__ uint4 smem_u4[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem_u4);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int row_base = blockIdx.y * kRowsPerBlock * RT, row0 = row_base + warp * 16;
  const int tok0 = blockIdx.x * 8 * NT;
  const int n_tiles = min(NT, (n - tok0 + 7) / 8);
  const int chunks = cols / kQmmChunk;
  const int k0 = blockIdx.z * chunks_per_split, k1 = min(chunks, k0 + chunks_per_split);
  const uint8_t* w_end = w + int64_t(rows) * row_bytes;
  // stage_chunk may copy as whole tiles
  const bool clear = row_base + kRowsPerBlock * RT < rows;
  constexpr int kStage = stage_bytes<T, NT, RT>();

  // Prologue: chunks k0 .. k0 + S - 2 in flight (one commit group each, empty past k1).
#pragma unroll
  for (int p = 0; p < S - 1; ++p) {
    if (k0 + p < k1)
      stage_chunk<T, NT, RT>(smem + p * kStage, w, row_bytes, w_end, xp, cols, tok0, 8 * n_tiles,
                             row_base, rows, k0 + p, clear);
    cp_async_commit();
  }
  float acc[RT][NT][4] = {};
  for (int k = k0; k < k1; ++k) {
    const int s = (k - k0) % S;
    const int kn = k + S - 1;  // the chunk to start now, into the stage freed last iteration
    if (kn < k1)
      stage_chunk<T, NT, RT>(smem + ((kn - k0) % S) * kStage, w, row_bytes, w_end, xp, cols, tok0,
                             8 * n_tiles, row_base, rows, kn, clear);
    cp_async_commit();       // empty groups past the end keep the count uniform
    cp_async_wait<S - 1>();  // chunk k's group is complete
    __syncthreads();
    const uint8_t* st = smem + s * kStage;
    const uint8_t* ws = st + 8 * NT * kXRow * 2;
    if (row0 < rows) {  // uniform per warp; the warp still joins the barriers
      const __half* xs = reinterpret_cast<const __half*>(st) + g * kXRow + 4 * c;
      // the staged rows of the warp's tile r (rows of the matrix past its end: the last one's)
      const auto row_at = [&](int r, int i) {
        return staged_row<T>(ws, w, row_bytes, r * kRowsPerBlock + warp * 16 + i,
                             min(row0 + r * kRowsPerBlock + i, rows - 1), k);
      };
      if constexpr (staged_int<T, NT>()) {
        int_chunk<T, NT>(
            direct_item<T>(row_at(0, g), c), direct_item<T>(row_at(0, g + 8), c),
            [&](int nt, int u) {
              return nt < n_tiles ? *reinterpret_cast<const uint2*>(xs + nt * 8 * kXRow + 16 * u)
                                  : make_uint2(0u, 0u);
            },
            acc[0], std::make_integer_sequence<int, 16>{});
      } else if constexpr (RT == 1) {
        chunk_steps<T, NT>(T::load(row_at(0, g), c), T::load(row_at(0, g + 8), c), xs, n_tiles,
                           acc[0], std::make_integer_sequence<int, 16>{});
      } else {
        typename T::Item ia[RT], ib[RT];
#pragma unroll
        for (int r = 0; r < RT; ++r) {
          ia[r] = T::load(row_at(r, g), c);
          ib[r] = T::load(row_at(r, g + 8), c);
        }
        chunk_steps_rows<T, NT, RT>(ia, ib, xs, n_tiles, acc,
                                    std::make_integer_sequence<int, 16>{});
      }
    }
    __syncthreads();  // the stage is refilled by the next iteration's copies
  }
  if (row0 >= rows) return;
  float* o = out + int64_t(blockIdx.z) * n * ld;
  // acc[r][nt]: rows row0 + r kRowsPerBlock + g (0, 1) and + 8 (2, 3), tokens tok0 + 8 nt + 2 c
  // (0, 2) and + 1 (1, 3).
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int tok = tok0 + 8 * nt + 2 * c;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int rr = row0 + r * kRowsPerBlock + g + 8 * (i >> 1), tk = tok + (i & 1);
        if (rr < rows && tk < n) o[int64_t(tk) * ld + rr] = acc[r][nt][i];
      }
    }
}

}  // namespace rz::gpu::qmm_detail

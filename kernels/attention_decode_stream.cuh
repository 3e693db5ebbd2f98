// The streaming grouped decode attention kernel: a block per (KV head, slot, partition of
// kAttnPartition tokens) for the group's query heads, as attn_decode_group_kernel, with the same
// outputs, built for bandwidth where that kernel is built for latency. kernels/attention_decode.cu
// launches it for grouped launches of at least kAttnStreamMinBlocks such blocks (the rule and its
// measurements: kernels/attention_decode.hpp, docs/gpu.md).
//
// Why: at B = 256 on llama3.1-8b the grouped kernel read the cache at ~1.2 TB/s (119 us a layer,
// a third of the step, bench/gpu-runs/2026-11-27-h200-attn-group-cap.log): its keys go out two
// 16-token rounds at a time, each round's scores computed before the next round's loads, then the
// values in rounds again, so a 200-token partition is ~12 dependent trips to memory with nothing
// in flight between them.
//
// How: the partition is cut into 32-token tiles whose keys and values cp.async copies into a
// ring of kStages shared-memory stages, kStages - 1 tiles ahead of the one in use, and the
// softmax is the online one (flash-decoding): per tile and query head the running maximum m, the
// running sum l = sum exp(score - m) and the p-weighted sum of values o, rescaled by exp(m_old -
// m_new) when the maximum grows. At the end o, m and l are what the grouped kernel writes (o
// relative to the final m), so group_part_end and the combine kernel serve both. Two or three
// stages: the launch takes three where the whole grid is resident at once, else two (more blocks
// resident). Both products run on tensor cores (mma.sync m16n8k16, fp32 accumulators); the rows
// of A are the query heads (up to kMaxGroup of the 16; the rest zero), so one instantiation a
// head-dim class serves every group:
//   scores: warp w takes tokens 8 w .. 8 w + 7 of the tile; B = the keys by ldmatrix (a token a
//           row), A = q * scale split into hi + lo fp16 halves (two mma a k-step: one fp16 would
//           move a score by ~5e-4 of |q| |k|, the pair holds q to ~2^-22 of it)
//   softmax: warp w takes heads w, w + 4 (a lane per token of the tile)
//   values: warp w takes dims [w kHd / 4, (w + 1) kHd / 4); B = the values by ldmatrix.trans,
//           A = the weights p split the same way
//   copies: a tile's rows hold 16-byte chunk c at c ^ (token & 7), so that the 8 rows an
//           ldmatrix reads (8 tokens, one chunk) fall on 8 different bank groups; chunks past
//           head_dim and tokens past the partition are zero-filled (0 * garbage could be NaN)
//
// Measured (H200, AttentionDecodeBench, bench/gpu-runs/2026-11-29-h200-attn-mma-ab.log), a layer
// at contexts 128-256 / 1,024-1,152 / 3,000-4,000, the FMA streaming kernel this replaced (4 lanes
// a token, an xor butterfly, a thread a dim pair for the values; kG = 2, 4, 6, 8 instantiations)
// -> this one: llama3.1-8b B = 256 77.6 / 350.6 / 1,073 -> 63.3 / 313.5 / 948.8 us (2.6 -> 3.2,
// 3.2 -> 3.6, 3.5 -> 3.9 TB/s of the cache), B = 64 25.6 -> 19.4 us at 128-256; qwen2.5-1.5b
// B = 256 34.5 / 138.6 / 392.9 -> 22.2 / 94.8 / 263.6 us. `ncu` of the FMA kernel had shown the
// shared-memory reads of q and the tiles as the top stall (4 blocks an SM by shared memory, 0.93
// eligible warps a scheduler); the mma fragments read each tile's chunk once a warp. rz bench
// (prompt 128, gen 128): llama B = 128 / 256 +4 / +3 %, qwen B = 128 / 256 +8 / +8 %.

#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/attention_decode.hpp"  // kAttnPartition, kAttnMaxHeadDim
#include "kernels/attention_decode_common.cuh"
#include "kernels/mma.cuh"  // cp_async16_zfill, cp_async_commit, cp_async_wait

namespace rz::gpu::attn_detail {

constexpr int kStreamThreads = 128;
constexpr int kStreamTile = 32;  // tokens a tile: a lane each in the softmax

// Shared memory of the streaming kernel for head-dim class kHd and kStages: the stages (keys then
// values of a tile), q * scale as mma fragments (kMaxGroup x kHd words), the tile's scores /
// weights, the heads' rescale factors, maxima and sums, the partition's row offsets, the bad-block
// flag.
template <int kHd, int kStages>
constexpr size_t stream_smem_bytes() {
  return size_t(kStages) * 2 * kStreamTile * kHd * 2 + size_t(kMaxGroup) * kHd * 4 +
         size_t(kStreamTile) * kMaxGroup * 4 + 3 * kMaxGroup * 4 + size_t(kAttnPartition) * 8 + 16;
}

// q * scale or a weight p as two fp16 (hi + lo: the pair holds the float to ~2^-22 of it, where
// one fp16 would move a score by ~5e-4 of |q| |k|), for the mma operands.
__device__ __forceinline__ void split_half2(float x, float y, uint32_t& hi, uint32_t& lo) {
  const __half hx = __float2half_rn(x), hy = __float2half_rn(y);
  hi = pack_half2(__half2float(hx), __half2float(hy));
  lo = pack_half2(x - __half2float(hx), y - __half2float(hy));
}

// The kernel (the file comment says how).
template <int kHd, int kStages>
__global__ void __launch_bounds__(kStreamThreads)
    attn_decode_stream_kernel(RZ_ATTN_PARTITION_PARAMS) {
  constexpr int kT = kStreamThreads, kTile = kStreamTile, kS = kStages;
  constexpr int kP = kAttnPartition, kG = kMaxGroup;
  constexpr int kRow = kHd / 8;             // 16-byte chunks of a row in a stage
  constexpr int kStage = 2 * kTile * kRow;  // chunks of a stage: keys, then values
  constexpr int kSteps = kHd / 16;          // k-steps of the scores
  constexpr int kWarpChunks = kRow / 4;     // value chunks (8 dims each) a warp owns
  constexpr int kHeadSets = kG / 4;         // softmax heads a warp: w, w + 4
  static_assert(kHd % 64 == 0 && kHd <= kAttnMaxHeadDim, "rows of whole 8-chunk groups");
  static_assert(kT == 128 && kTile == 32, "4 warps: 8 tokens each in the scores");
  static_assert(kWarpChunks % 2 == 0 && kSteps % 2 == 0, "ldmatrix x4 pairs");
  extern __shared__ uint4 smem[];
  uint4* stages = smem;
  // [kSteps][32 lanes] the scores' A fragments (q * scale: hi a0, hi a2, lo a0, lo a2)
  uint4* qf_s = smem + kS * kStage;
  float* p_s = reinterpret_cast<float*>(qf_s) + kG * kHd;        // [kTile][kG] scores, weights
  float* alpha_s = p_s + kTile * kG;                             // [kMaxGroup] rescale a tile
  float* m_s = alpha_s + kMaxGroup;                              // [kMaxGroup]
  float* l_s = m_s + kMaxGroup;                                  // [kMaxGroup]
  int64_t* row_s = reinterpret_cast<int64_t*>(l_s + kMaxGroup);  // [kP]
  int* bad_s = reinterpret_cast<int*>(row_s + kP);
  static_assert(kSteps * 32 * 4 == kG * kHd, "the fragments fill their kMaxGroup x kHd words");
  static_assert(size_t(kS) * kStage * 16 >= size_t(kMaxGroup) * kHd * 4,
                "the partial outputs fit in the stages");

  GroupPart gp;
  if (!group_part_begin<kP>(tables, table_rows, lens, out, n_head, group, n_blocks, n_head_kv,
                            block_size, head_dim, table_stride, max_context, max_parts, window,
                            forms, row_s, bad_s, gp))
    return;
  const int n = gp.n, s = blockIdx.y, h0 = blockIdx.x * group;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
  const int nchunks = head_dim / 8;
  const int n_tiles = (n + kTile - 1) / kTile;

  const auto issue = [&](int t) {
    uint4* kst = stages + (t % kS) * kStage;
    uint4* vst = kst + kTile * kRow;
#pragma unroll
    for (int e = tid; e < kTile * kRow; e += kT) {
      const int tok = e / kRow, ch = e % kRow;
      const int i = t * kTile + tok;
      const bool ok = i < n && ch < nchunks && !gp.bad;
      const int64_t off = ok ? row_s[i] + 8 * ch : 0;
      const int at = tok * kRow + (ch ^ (tok & 7));
      cp_async16_zfill(kst + at, k_cache + off, ok ? 16 : 0);
      cp_async16_zfill(vst + at, v_cache + off, ok ? 16 : 0);
    }
  };
#pragma unroll
  for (int t = 0; t < kS - 1; ++t) {
    if (t < n_tiles) issue(t);
    cp_async_commit();
  }
  // A of the scores for lane (g, c) of k-step ks: row g (query head g), k-slots {2c, 2c+1} and
  // {2c+8, 2c+9}, i.e. dims 16 ks + 2c, + 1 and + 8, + 9
  for (int e = tid; e < kSteps * 32; e += kT) {
    const int ks = e / 32, gg = (e % 32) / 4, d = 16 * ks + 2 * (e % 4);
    const float* qr = q + (int64_t(s) * n_head + h0 + gg) * head_dim;
    const bool h_ok = gg < group;
    const float x0 = h_ok && d < head_dim ? qr[d] * scale : 0.0f;
    const float x1 = h_ok && d < head_dim ? qr[d + 1] * scale : 0.0f;
    const float x8 = h_ok && d + 8 < head_dim ? qr[d + 8] * scale : 0.0f;
    const float x9 = h_ok && d + 8 < head_dim ? qr[d + 9] * scale : 0.0f;
    uint4 f;
    split_half2(x0, x1, f.x, f.z);
    split_half2(x8, x9, f.y, f.w);
    qf_s[e] = f;
  }

  float o[kWarpChunks][4];  // rows g (head g; rows g + 8 stay zero), dims of the warp's chunks
#pragma unroll
  for (int j = 0; j < kWarpChunks; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m_run[kHeadSets], l_run[kHeadSets];
#pragma unroll
  for (int k = 0; k < kHeadSets; ++k) {
    m_run[k] = -INFINITY;
    l_run[k] = 0.0f;
  }
  const int mat = lane / 8, r8 = lane % 8;  // ldmatrix: lane's matrix and row

  for (int t = 0; t < n_tiles; ++t) {
    cp_async_wait<kS - 2>();  // this thread's copies of tile t have landed
    __syncthreads();          // everyone's; and tile t - 1's stage and weights are free
    if (t + kS - 1 < n_tiles) issue(t + kS - 1);
    cp_async_commit();
    const uint4* kst = stages + (t % kS) * kStage;
    const uint4* vst = kst + kTile * kRow;

    // scores of tokens 8 warp .. + 7 (columns) for heads g (rows)
    float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    {
      const int tok = 8 * warp + r8;
#pragma unroll
      for (int ks = 0; ks < kSteps; ks += 2) {
        uint32_t kb[4];  // chunks 2 ks + mat: b0, b1 of k-step ks, then of ks + 1
        ldmatrix_x4(kb, kst + tok * kRow + ((2 * ks + mat) ^ (tok & 7)));
        const uint4 qa = qf_s[ks * 32 + lane], qb = qf_s[(ks + 1) * 32 + lane];
        mma_16816(sc, qa.x, 0u, qa.y, 0u, kb[0], kb[1]);
        mma_16816(sc, qa.z, 0u, qa.w, 0u, kb[0], kb[1]);
        mma_16816(sc, qb.x, 0u, qb.y, 0u, kb[2], kb[3]);
        mma_16816(sc, qb.z, 0u, qb.w, 0u, kb[2], kb[3]);
      }
    }
    if (g < group) {
      const int tk = 8 * warp + 2 * c;
      p_s[tk * kG + g] = t * kTile + tk < n ? sc[0] : -INFINITY;
      p_s[(tk + 1) * kG + g] = t * kTile + tk + 1 < n ? sc[1] : -INFINITY;
    }
    __syncthreads();

#pragma unroll
    for (int k = 0; k < kHeadSets; ++k) {
      const int h = warp + 4 * k;
      if (h < group) {  // uniform over the warp
        const float x = p_s[lane * kG + h];
        const float m_new = fmaxf(m_run[k], warp_max(x));  // finite: the tile's token 0 is valid
        const float p = expf(x - m_new);
        const float alpha = expf(m_run[k] - m_new);  // 0 on the first tile
        l_run[k] = fmaf(l_run[k], alpha, warp_sum(p));
        m_run[k] = m_new;
        p_s[lane * kG + h] = p;
        if (lane == 0) alpha_s[h] = alpha;
      }
    }
    __syncthreads();

    const float a = g < group ? alpha_s[g] : 1.0f;
#pragma unroll
    for (int j = 0; j < kWarpChunks; ++j) {
      o[j][0] *= a;
      o[j][1] *= a;
    }
#pragma unroll
    for (int ks = 0; ks < kTile / 16; ++ks) {
      // A: weights of head g for tokens 16 ks + {2c, 2c+1} and + {2c+8, 2c+9}
      const int t0 = 16 * ks + 2 * c;
      const bool live = g < group;
      const float p0 = live ? p_s[t0 * kG + g] : 0.0f, p1 = live ? p_s[(t0 + 1) * kG + g] : 0.0f;
      const float p8 = live ? p_s[(t0 + 8) * kG + g] : 0.0f,
                  p9 = live ? p_s[(t0 + 9) * kG + g] : 0.0f;
      uint32_t ph0, pl0, ph2, pl2;
      split_half2(p0, p1, ph0, pl0);
      split_half2(p8, p9, ph2, pl2);
      const int tok = 16 * ks + 8 * (mat & 1) + r8;
#pragma unroll
      for (int j = 0; j < kWarpChunks; j += 2) {
        const int ch = warp * kWarpChunks + j + (mat >> 1);
        uint32_t vb[4];  // b0, b1 of chunk j, then of chunk j + 1
        ldmatrix_x4_trans(vb, vst + tok * kRow + (ch ^ (tok & 7)));
        mma_16816(o[j], ph0, 0u, ph2, 0u, vb[0], vb[1]);
        mma_16816(o[j], pl0, 0u, pl2, 0u, vb[0], vb[1]);
        mma_16816(o[j + 1], ph0, 0u, ph2, 0u, vb[2], vb[3]);
        mma_16816(o[j + 1], pl0, 0u, pl2, 0u, vb[2], vb[3]);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every stage read: they take the partial outputs now

  float* o_s = reinterpret_cast<float*>(stages);  // [kMaxGroup][head_dim]: one group
  if (g < group) {
#pragma unroll
    for (int j = 0; j < kWarpChunks; ++j) {
      const int d = 8 * (warp * kWarpChunks + j) + 2 * c;
      if (d < head_dim) {
        o_s[g * head_dim + d] = o[j][0];
        o_s[g * head_dim + d + 1] = o[j][1];
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kHeadSets; ++k) {
    const int h = warp + 4 * k;
    if (h < group && lane == 0) {
      m_s[h] = m_run[k];
      l_s[h] = l_run[k];
    }
  }
  __syncthreads();
  group_part_end(gp, o_s, 1, m_s, l_s, out, part_o, part_m, part_l, n_head, group, head_dim,
                 max_parts, forms);
}

}  // namespace rz::gpu::attn_detail

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
// resident).
//   copies: a tile's rows are 16-byte chunks; a token's chunk c sits at c ^ 4 on odd tokens, so
//           that the scores' reads (8 lanes: two tokens, four quarters of the row) and the
//           values' reads (a warp: one token's 32 consecutive dim pairs) are free of bank
//           conflicts; tokens past the partition are zero-filled (p = 0 times a zero value)
//   scores: 4 lanes a token (lane quarter c takes chunks c, c + 4, ...), kG query heads at once
//           (the group rounded up to 2, 4, 6 or 8; the padding heads' q are zeros), an xor
//           butterfly over the 4 lanes, head h's score written by lane h % 4
//   softmax: warp w takes heads w, w + 4 (a lane per token of the tile)
//   values: a thread per dim pair and token group (kT / (kHd / 2) groups), the tile's tokens of
//           its group in order, kG heads at once
//
// Measured (H200, AttentionDecodeBench, bench/gpu-runs/2026-11-28-h200-attn-stream.log):
// predicted bandwidth-bound, ~3 TB/s of the cache at B = 256; measured 2.6 TB/s at contexts
// 128-256 and 3.3-3.5 at 1-4k tokens on llama3.1-8b's shapes (qwen2.5-1.5b's, 6 heads a KV head
// padded to 8, 1.2-1.9; with kG = 6 since, 1.5-2.3: bench/gpu-runs/2026-11-28-h200-attn-kg6.log).
// Why not more: `ncu` of the three-stage kernel showed 4 blocks an SM
// (shared memory), 0.93 eligible warps a scheduler and the shared-memory reads of q and the tiles
// as the top stall; two stages (6 blocks an SM) were faster on grids larger than the device holds
// (84 -> 78 us), four slower everywhere. With one block an SM (128 blocks) it lost to the small
// partitions in the engine, hence the 256-block threshold.
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

// Shared memory of the streaming kernel for head-dim class kHd, kG query heads a block and kStages:
// the stages (keys then values of a tile), q * scale, the tile's scores / weights, the heads'
// rescale factors, maxima and sums, the partition's row offsets, the bad-block flag.
template <int kHd, int kG, int kStages>
constexpr size_t stream_smem_bytes() {
  return size_t(kStages) * 2 * kStreamTile * kHd * 2 + size_t(kG) * kHd * 4 +
         size_t(kStreamTile) * kG * 4 + 3 * kMaxGroup * 4 + size_t(kAttnPartition) * 8 + 16;
}

template <int kHd, int kG, int kStages>
__global__ void __launch_bounds__(kStreamThreads)
    attn_decode_stream_kernel(RZ_ATTN_PARTITION_PARAMS) {
  constexpr int kT = kStreamThreads, kTile = kStreamTile, kS = kStages;
  constexpr int kP = kAttnPartition;
  constexpr int kRow = kHd / 8;             // 16-byte chunks of a row in a stage
  constexpr int kStage = 2 * kTile * kRow;  // chunks of a stage: keys, then values
  constexpr int kPairs = kHd / 2;           // value threads: a dim pair each ...
  constexpr int kGroups = kT / kPairs;      // ... in this many token groups
  constexpr int kHeadSets = (kG + 3) / 4;   // softmax heads a warp: w, w + 4
  static_assert(kHd % 64 == 0 && kHd <= kAttnMaxHeadDim, "rows of whole 8-chunk groups");
  static_assert(kT % kPairs == 0 && kTile % kGroups == 0 && kT == 4 * kTile, "thread layout");
  static_assert(kG % 2 == 0 && kG <= kMaxGroup, "head pairs (the weights are read two at a time)");
  static_assert(size_t(kS) * kStage * 16 >= size_t(kGroups) * kMaxGroup * kHd * 4,
                "the partial outputs fit in the stages");
  extern __shared__ uint4 smem[];
  uint4* stages = smem;
  float* q_s = reinterpret_cast<float*>(smem + kS * kStage);     // [kG][kHd] q * scale
  float* p_s = q_s + kG * kHd;                                   // [kTile][kG] scores, weights
  float* alpha_s = p_s + kTile * kG;                             // [kMaxGroup] rescale a tile
  float* m_s = alpha_s + kMaxGroup;                              // [kMaxGroup]
  float* l_s = m_s + kMaxGroup;                                  // [kMaxGroup]
  int64_t* row_s = reinterpret_cast<int64_t*>(l_s + kMaxGroup);  // [kP]
  int* bad_s = reinterpret_cast<int*>(row_s + kP);

  GroupPart gp;
  if (!group_part_begin<kP>(tables, table_rows, lens, out, n_head, group, n_blocks, n_head_kv,
                            block_size, head_dim, table_stride, max_context, max_parts, window,
                            forms, row_s, bad_s, gp))
    return;
  const int n = gp.n, s = blockIdx.y, h0 = blockIdx.x * group;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int nchunks = head_dim / 8;
  const int n_tiles = (n + kTile - 1) / kTile;

  // Tile t's keys and values into stage t % kS (every thread its share; tokens past n, and all
  // of a bad block's, zero-filled).
  const auto issue = [&](int t) {
    uint4* kst = stages + (t % kS) * kStage;
    uint4* vst = kst + kTile * kRow;
#pragma unroll
    for (int e = tid; e < kTile * kRow; e += kT) {
      const int tok = e / kRow, c = e % kRow;
      if (c >= nchunks) continue;
      const int i = t * kTile + tok;
      const bool ok = i < n && !gp.bad;
      const int64_t off = ok ? row_s[i] + 8 * c : 0;
      const int at = tok * kRow + (c ^ ((tok & 1) << 2));
      cp_async16_zfill(kst + at, k_cache + off, ok ? 16 : 0);
      cp_async16_zfill(vst + at, v_cache + off, ok ? 16 : 0);
    }
  };
#pragma unroll
  for (int t = 0; t < kS - 1; ++t) {
    if (t < n_tiles) issue(t);
    cp_async_commit();
  }
  for (int i = tid; i < kG * kHd; i += kT) {
    const int h = i / kHd, d = i % kHd;
    q_s[i] =
        h < group && d < head_dim ? q[(int64_t(s) * n_head + h0 + h) * head_dim + d] * scale : 0.0f;
  }

  const int tok = tid / 4, qc = tid % 4;          // scores: token, quarter of the row
  const int pr = tid % kPairs, g = tid / kPairs;  // values: dim pair, token group
  const bool v_thread = pr < head_dim / 2;
  float2 o[kG];
#pragma unroll
  for (int h = 0; h < kG; ++h) o[h] = make_float2(0.0f, 0.0f);
  float m_run[kHeadSets], l_run[kHeadSets];
#pragma unroll
  for (int k = 0; k < kHeadSets; ++k) {
    m_run[k] = -INFINITY;
    l_run[k] = 0.0f;
  }

  for (int t = 0; t < n_tiles; ++t) {
    cp_async_wait<kS - 2>();  // this thread's copies of tile t have landed
    __syncthreads();          // everyone's; and tile t - 1's stage and weights are free
    if (t + kS - 1 < n_tiles) issue(t + kS - 1);
    cp_async_commit();
    const uint4* kst = stages + (t % kS) * kStage;
    const uint4* vst = kst + kTile * kRow;

    float acc[kG];
#pragma unroll
    for (int h = 0; h < kG; ++h) acc[h] = 0.0f;
#pragma unroll
    for (int u = 0; u < kRow / 4; ++u) {
      const int c = qc + 4 * u;
      if (c < nchunks) {
        float kf[8];
        unpack_half8(kst[tok * kRow + (c ^ ((tok & 1) << 2))], kf);
#pragma unroll
        for (int h = 0; h < kG; ++h) acc[h] = dot8(q_s + h * kHd + 8 * c, kf, acc[h]);
      }
    }
    const bool valid = t * kTile + tok < n;
#pragma unroll
    for (int h = 0; h < kG; ++h) {
      acc[h] += __shfl_xor_sync(0xffffffffu, acc[h], 1);
      acc[h] += __shfl_xor_sync(0xffffffffu, acc[h], 2);
      if ((h & 3) == qc) p_s[tok * kG + h] = valid ? acc[h] : -INFINITY;
    }
    __syncthreads();

#pragma unroll
    for (int k = 0; k < kHeadSets; ++k) {
      const int h = warp + 4 * k;
      if (h < group) {  // uniform over the warp
        const float sc = p_s[lane * kG + h];
        const float m_new = fmaxf(m_run[k], warp_max(sc));  // finite: the tile's token 0 is valid
        const float p = expf(sc - m_new);
        const float alpha = expf(m_run[k] - m_new);  // 0 on the first tile
        l_run[k] = fmaf(l_run[k], alpha, warp_sum(p));
        m_run[k] = m_new;
        p_s[lane * kG + h] = p;
        if (lane == 0) alpha_s[h] = alpha;
      }
    }
    __syncthreads();

    if (v_thread) {
#pragma unroll
      for (int h = 0; h < kG; ++h) {
        if (h < group) {
          const float a = alpha_s[h];
          o[h].x *= a;
          o[h].y *= a;
        }
      }
      const int c = pr / 4;
#pragma unroll 4
      for (int j = 0; j < kTile / kGroups; ++j) {
        const int tk = g + kGroups * j;
        const uint32_t* row =
            reinterpret_cast<const uint32_t*>(vst + tk * kRow + (c ^ ((tk & 1) << 2)));
        __half2 vh;
        const uint32_t bits = row[pr % 4];
        memcpy(&vh, &bits, sizeof(vh));
        const float2 vf = __half22float2(vh);
        float p[kG];
#pragma unroll
        for (int h4 = 0; h4 < kG; h4 += 2) {
          const float2 pp = reinterpret_cast<const float2*>(p_s + tk * kG)[h4 / 2];
          p[h4] = pp.x;
          p[h4 + 1] = pp.y;
        }
#pragma unroll
        for (int h = 0; h < kG; ++h) {
          o[h].x = fmaf(p[h], vf.x, o[h].x);
          o[h].y = fmaf(p[h], vf.y, o[h].y);
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every stage read: they take the partial outputs now

  float* o_s = reinterpret_cast<float*>(stages);  // [kGroups][kMaxGroup][head_dim]
  if (v_thread) {
#pragma unroll
    for (int h = 0; h < kG; ++h) {
      if (h < group) {
        o_s[(g * kMaxGroup + h) * head_dim + 2 * pr] = o[h].x;
        o_s[(g * kMaxGroup + h) * head_dim + 2 * pr + 1] = o[h].y;
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
  group_part_end(gp, o_s, kGroups, m_s, l_s, out, part_o, part_m, part_l, n_head, group, head_dim,
                 max_parts, forms);
}

}  // namespace rz::gpu::attn_detail

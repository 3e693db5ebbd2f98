// Decode attention kernels (see attention_decode.hpp): a partition kernel, one thread block per
// (query head, slot, context partition), its grouped sibling, one block per (KV head, slot,
// partition) for all the query heads sharing that KV head (used whenever the group is at most 8
// heads and head_dim a multiple of 8), and a combine kernel per (query head, slot) for slots
// whose context spans several partitions. The partition length P is a template parameter of the
// partition kernel and a runtime argument of the combine kernel: kAttnPartition (256 tokens, 128
// threads) normally, kAttnSmallPartition (64 tokens, 256 threads) for small batches (n_slots *
// n_head <= kAttnSmallBatchHeads, or n_slots * n_head_kv <= kAttnSmallBatchGroups grouped), where
// 256-token partitions leave most SMs idle, and kAttnTinyPartition (32 tokens, 256 threads) for
// the grouped kernel at the smallest batches and contexts (kAttnTinyBatchGroups,
// kAttnTinyMaxParts).
//
// Partition kernel, for its n <= P tokens:
//   1. q (times scale) to shared; each token's K/V row offset from the block table to shared
//   2. scores: a warp per 8 tokens at a time, lanes read consecutive half2 of the key rows,
//      warp-sum per token
//   3. m = max score, p_i = exp(score_i - m), l = sum p_i   (block reductions)
//   4. o = sum p_i v_i: a thread owns one dim pair; threads are split into groups over tokens
//      when head_dim / 2 < threads, and the groups' sums are added in shared memory
//   5. one partition: out = o / l; several: write (m, l, o) for the combine kernel
// Combine kernel: M = max m_j, w_j = exp(m_j - M), out = sum w_j o_j / sum w_j l_j.
// (Prefill attention has its own tiled kernel: kernels/attention_prefill.cu.)
#include "kernels/attention_decode.hpp"
#include "kernels/launch.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "kernels/act_forms.cuh"
#include "kernels/attention_decode_common.cuh"
#include "kernels/attention_decode_stream.cuh"
#include "kernels/cuda_common.cuh"
#include "kernels/dequant.hpp"  // convert_to_half
#include "kernels/gemv_q8.hpp"  // quantize_x_q8
#include "kernels/qmm.hpp"      // qmm_prepare_x

namespace rz::gpu {
namespace {

using namespace attn_detail;

constexpr int kThreads = 128;       // combine kernel; partition kernel with kAttnPartition
constexpr int kSmallThreads = 256;  // partition kernel with kAttnSmallPartition: 8 tokens a warp

// grid (n_head, n_slots, max_parts), block kT threads, kP tokens per partition. A "slot" here
// is one query row; its block table is row table_rows[s] or row s when table_rows is null
// (decode passes null).
template <int kP, int kT>
__global__ void __launch_bounds__(kT) attn_decode_partition_kernel(RZ_ATTN_PARTITION_PARAMS) {
  grid_dependency_sync();
  static_assert(kT % 32 == 0 && kT >= kAttnMaxHeadDim / 2, "a thread per dim pair");
  constexpr int kW = kT / 32;
  const int h = blockIdx.x, s = blockIdx.y, part = blockIdx.z;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int L = lens[s];
  if (L < 0) return;  // not a decode row: nothing written (attention_decode.hpp)
  float* __restrict__ out_h = out + (int64_t(s) * n_head + h) * head_dim;
  if (L <= 0 || L > max_context) {  // idle slot: zeros; impossible length: NaN
    if (part == 0)
      for (int d = tid; d < head_dim; d += kT)
        out_h[d] = L == 0 ? 0.0f : __int_as_float(0x7fc00000);
    return;
  }
  const int first = window_start(L, window);
  const int n_parts = (L - first - 1) / kP + 1;  // L > first here
  if (part >= n_parts) return;
  const int t0 = first + part * kP;
  const int n = min(kP, L - t0);
  const int kvh = h / group;

  __shared__ float2 q2_s[kAttnMaxHeadDim / 2];  // q * scale, as dim pairs
  __shared__ float p_s[kP];                     // scores, then exp(score - m)
  __shared__ int64_t row_s[kP];                 // token's K/V row: element offset in the layer
  __shared__ float o_s[2 * kT];                 // [groups][head_dim] partial outputs
  __shared__ float red[kW];
  __shared__ int bad_s;

  if (tid == 0) bad_s = 0;
  const int npairs = head_dim / 2;
  const float2* __restrict__ q2 =
      reinterpret_cast<const float2*>(q + (int64_t(s) * n_head + h) * head_dim);
  for (int j = tid; j < npairs; j += kT) {
    const float2 v = q2[j];
    q2_s[j] = make_float2(v.x * scale, v.y * scale);
  }
  __syncthreads();  // bad_s initialised before anyone sets it
  fill_rows(tables, table_rows, s, table_stride, t0, n, n_blocks, n_head_kv, kvh, block_size,
            head_dim, row_s, &bad_s);
  const bool bad = bad_s != 0;  // uniform across the block

  if (!bad) {
    // A warp takes kU tokens at a time, their key loads in flight together (one token at a time
    // left each warp waiting a memory latency per token). Each token's sum runs in the same
    // order as one at a time: lane j-strided partial sums, then warp_sum.
    constexpr int kU = 8;
    for (int i0 = warp * kU; i0 < n; i0 += kW * kU) {
      const __half2* __restrict__ kr[kU];
      float acc[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        kr[u] = reinterpret_cast<const __half2*>(k_cache + row_s[min(i0 + u, n - 1)]);
        acc[u] = 0.0f;
      }
      for (int j = lane; j < npairs; j += 32) {
        const float2 qv = q2_s[j];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const float2 kf = __half22float2(kr[u][j]);
          acc[u] = fmaf(qv.x, kf.x, acc[u]);
          acc[u] = fmaf(qv.y, kf.y, acc[u]);
        }
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const float a = warp_sum(acc[u]);
        if (lane == 0 && i0 + u < n) p_s[i0 + u] = a;
      }
    }
  }
  __syncthreads();

  float m = -INFINITY;
  if (!bad)
    for (int i = tid; i < n; i += kT) m = fmaxf(m, p_s[i]);
  m = block_reduce<true, kW>(m, red);
  float l = 0.0f;
  if (!bad)
    for (int i = tid; i < n; i += kT) {
      const float e = expf(p_s[i] - m);
      p_s[i] = e;
      l += e;
    }
  l = block_reduce<false, kW>(l, red);  // its syncs publish p_s

  const int groups = kT / npairs;  // >= 1: npairs <= kAttnMaxHeadDim / 2 <= kT
  const int g = tid / npairs, pr = tid % npairs;
  if (g < groups) {
    float ax = 0.0f, ay = 0.0f;
    if (!bad)
#pragma unroll 8
      for (int i = g; i < n; i += groups) {  // unrolled: several value loads in flight
        const float2 vf = __half22float2(reinterpret_cast<const __half2*>(v_cache + row_s[i])[pr]);
        const float p = p_s[i];
        ax = fmaf(p, vf.x, ax);
        ay = fmaf(p, vf.y, ay);
      }
    o_s[g * head_dim + 2 * pr] = ax;
    o_s[g * head_dim + 2 * pr + 1] = ay;
  }
  __syncthreads();

  const float nan = __int_as_float(0x7fc00000);
  const int64_t pidx = (int64_t(s) * n_head + h) * max_parts + part;
  for (int d = tid; d < head_dim; d += kT) {
    float o = 0.0f;
    for (int gg = 0; gg < groups; ++gg) o += o_s[gg * head_dim + d];
    if (bad) o = nan;
    if (n_parts == 1)
      out_h[d] = o / l;
    else
      part_o[pidx * head_dim + d] = o;
  }
  if (tid == 0 && n_parts > 1) {
    part_m[pidx] = bad ? nan : m;
    part_l[pidx] = bad ? nan : l;
  }
}

// The grouped partition kernel: one thread block per (KV head, slot, partition) for all `group`
// query heads that share the KV head (group <= kMaxGroup, head_dim a multiple of 8 and at most
// kHd), so each key and value row is read once for the group instead of once per query head.
// Same partitions and the same outputs (per query head: out, or part_o / part_m / part_l for the
// combine kernel) as attn_decode_partition_kernel, which serves the other shapes.
//
// A block is bound by memory latency, not by bandwidth (at B = 1 a qwen layer runs 2-4 blocks),
// so the kernel's loads go out in as few dependent rounds as it can:
//   values: each thread's first kVB value pairs are requested right after the row offsets, before
//           the scores, so their latency overlaps the keys'
//   scores: 8 lanes a token (lane c takes the row's 16-byte chunks c, c + 8, ...), kT / 8 tokens
//           a round, the key chunks of kBatch rounds in flight together (the whole 64-token
//           partition of the small configuration at once); per query head an fp32 sum, added
//           over the 8 lanes by an xor butterfly
//   softmax: a warp per query head (max, exp, sum over the partition's tokens)
//   values: a thread per dim pair and token group, p-weighted sums for every query head in token
//           order; the token groups' sums added in shared memory
// With fold.rows.q set (attention_decode_qkv) it also does qkv_post's work: q comes biased and
// rotated from the projection's rows (qkv_post.cuh's arithmetic) instead of from q, and the
// block whose partition holds the slot's new token computes that token's k and v, writes them to
// the cache and takes them from shared memory instead of reading them back.
constexpr int kKeyLanes = 8;  // lanes per token in the scores

template <int kP, int kT, int kHd>
__global__ void __launch_bounds__(kT) attn_decode_group_kernel(RZ_ATTN_PARTITION_PARAMS) {
  static_assert(kT % 32 == 0 && kT >= kHd / 2, "a thread per dim pair");
  static_assert(kHd % (8 * kKeyLanes) == 0 && kHd <= kAttnMaxHeadDim, "whole chunks per lane");
  constexpr int kW = kT / 32;
  constexpr int kCpl = kHd / 8 / kKeyLanes;  // key chunks per lane and token
  constexpr int kR = kT / kKeyLanes;         // tokens per round
  constexpr int kRounds = kP / kR;
  constexpr int kBatch = kRounds < 2 ? kRounds : 2;  // rounds of key loads in flight together
  constexpr int kVB = 16;                            // value pairs in flight per thread
  static_assert(kP % kR == 0, "whole rounds");
  const int s = blockIdx.y, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int h0 = blockIdx.x * group;  // first query head of the group

  __shared__ __align__(16) float q_s[kMaxGroup][kHd];  // q * scale
  __shared__ float p_s[kMaxGroup][kP];                 // scores, then exp(score - m)
  __shared__ int64_t row_s[kP];
  __shared__ float o_s[16 * kT];  // [token groups][kMaxGroup][head_dim] partial outputs
  __shared__ float m_s[kMaxGroup], l_s[kMaxGroup];
  __shared__ int bad_s;
  // qkv_post's work (fold.rows.q set, attention_decode_qkv): cos / sin of the slot's position,
  // and the slot's new k and v rows of this KV head, fp16, in the block holding its last token.
  __shared__ float cs_s[kHd / 2], sn_s[kHd / 2];
  __shared__ __align__(16) __half kv_new_s[2][kHd];
  const bool folding = fold.rows.q != nullptr;
  if (folding)  // pos, like the lengths, is the step's argument: read before the wait
    qkv_detail::rope_cs_fill(fold.pos[s], fold.n_rot, fold.inv_freq, fold.cs_table,
                             fold.cs_positions, fold.attn_factor, cs_s, sn_s);

  // The lengths and block tables before the wait for the kernel before this one (so that their
  // two dependent loads overlap that kernel's tail instead of leading this one's chain), the
  // idle slots, qmm's pad rows. (Its barrier publishes cs_s and sn_s.)
  GroupPart gp;
  if (!group_part_begin<kP>(tables, table_rows, lens, out, n_head, group, n_blocks, n_head_kv,
                            block_size, head_dim, table_stride, max_context, max_parts, window,
                            forms, row_s, &bad_s, gp))
    return;
  const int n = gp.n;
  const bool bad = gp.bad;
  // Folding, the block whose partition holds the slot's new token (its last, i_new = n - 1) takes
  // that token's k and v from kv_new_s instead of the cache (where the cache row is skipped, as
  // qkv_post skips it, the cache is read as it is).
  const int kvh = blockIdx.x;
  const int64_t new_off = folding && static_cast<int>(blockIdx.z) == gp.n_parts - 1
                              ? qkv_detail::cache_head_offset(fold.cache_rows[s], kvh, n_blocks,
                                                              n_head_kv, block_size, head_dim)
                              : -1;
  const int i_new = new_off >= 0 ? n - 1 : -1;

  // Then q, the first keys and the first values go out together.
  const int c = tid % kKeyLanes, tok = tid / kKeyLanes;
  const int nchunks = head_dim / 8;
  uint4 kraw[kBatch][kCpl];
  const auto load_keys = [&](int r0) {
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = (r0 + b) * kR + tok;
#pragma unroll
      for (int u = 0; u < kCpl; ++u) {
        const int j = c + kKeyLanes * u;
        kraw[b][u] = !bad && i < n && i != i_new && j < nchunks
                         ? reinterpret_cast<const uint4*>(k_cache + row_s[i])[j]
                         : make_uint4(0u, 0u, 0u, 0u);
      }
    }
  };
  load_keys(0);

  // The values' thread layout: dim pair pr of tokens g, g + groups, ...
  const int npairs = head_dim / 2;
  const int groups = kT / npairs;  // token groups, >= 1
  const int g = tid / npairs, pr = tid % npairs;
  const bool v_thread = g < groups && !bad;
  uint32_t vraw[kVB];
#pragma unroll
  for (int k = 0; k < kVB; ++k) {
    const int i = g + k * groups;
    vraw[k] = v_thread && i < n && i != i_new
                  ? reinterpret_cast<const uint32_t*>(v_cache + row_s[i])[pr]
                  : 0u;
  }

  if (!folding) {
    for (int i = tid; i < group * head_dim; i += kT)
      q_s[i / head_dim][i % head_dim] = q[(int64_t(s) * n_head + h0) * head_dim + i] * scale;
  } else {
    // qkv_post's work: q (biased, rotated, times scale as above) and, in the block holding the
    // new token, its k and v. Every load goes out before the first is used (one round trip, as
    // the plain q load above): the new k and v first, then q.
    constexpr int kKv = (kHd + kT - 1) / kT;  // new k / v elements a thread
    const int kv_base = kvh * head_dim;
    float kx0[kKv], kx1[kKv], kb0[kKv], kb1[kKv], vx[kKv], vb[kKv];
    if (new_off >= 0) {
      const float* krow = fold.rows.k + int64_t(s) * fold.rows.k_stride;
      const float* vrow = fold.rows.v + int64_t(s) * fold.rows.v_stride;
#pragma unroll
      for (int u = 0; u < kKv; ++u) {
        const int d = tid + u * kT;
        if (d >= head_dim) continue;
        const qkv_detail::RotPair r = qkv_detail::rot_pair(d, fold.n_rot, fold.neox);
        kx0[u] = krow[kv_base + r.a];
        kx1[u] = krow[kv_base + r.b];
        kb0[u] = fold.bk ? fold.bk[kv_base + r.a] : 0.0f;
        kb1[u] = fold.bk ? fold.bk[kv_base + r.b] : 0.0f;
        vx[u] = vrow[kv_base + d];
        vb[u] = fold.bv ? fold.bv[kv_base + d] : 0.0f;
      }
    }
    // q: each thread keeps one dim d (its pair, cos and sin) for heads hfirst, hfirst + hstep,
    // ... of the group, kU heads' loads at a time.
    constexpr int kU = 4;
    const float* qrow = fold.rows.q + int64_t(s) * fold.rows.q_stride;
    const bool has_bq = fold.bq != nullptr;
    const int hstep = kT >= head_dim ? kT / head_dim : 1;
    for (int dd = tid; dd < hstep * head_dim; dd += kT) {
      const int d = dd % head_dim, hfirst = dd / head_dim;
      const qkv_detail::RotPair r = qkv_detail::rot_pair(d, fold.n_rot, fold.neox);
      const float cr = r.rot ? cs_s[r.i] : 0.0f, sr = r.rot ? sn_s[r.i] : 0.0f;
      for (int hb = hfirst; hb < group; hb += kU * hstep) {
        float x0[kU], x1[kU], b0[kU], b1[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int h = hb + u * hstep;
          if (h >= group) continue;
          const int base = (h0 + h) * head_dim;
          x0[u] = qrow[base + r.a];
          x1[u] = qrow[base + r.b];
          b0[u] = has_bq ? fold.bq[base + r.a] : 0.0f;
          b1[u] = has_bq ? fold.bq[base + r.b] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int h = hb + u * hstep;
          if (h >= group) continue;
          const float a = qkv_detail::add_bias(x0[u], b0[u], has_bq);
          const float b = qkv_detail::add_bias(x1[u], b1[u], has_bq);
          q_s[h][d] = (r.rot ? qkv_detail::rotate(a, b, cr, sr, r.first) : a) * scale;
        }
      }
    }
    if (new_off >= 0) {  // the new k and v: to the cache and kv_new_s
#pragma unroll
      for (int u = 0; u < kKv; ++u) {
        const int d = tid + u * kT;
        if (d >= head_dim) continue;
        const qkv_detail::RotPair r = qkv_detail::rot_pair(d, fold.n_rot, fold.neox);
        const float a = qkv_detail::add_bias(kx0[u], kb0[u], fold.bk != nullptr);
        const float b = qkv_detail::add_bias(kx1[u], kb1[u], fold.bk != nullptr);
        const __half kh =
            __float2half_rn(r.rot ? qkv_detail::rotate(a, b, cs_s[r.i], sn_s[r.i], r.first) : a);
        const __half vh = __float2half_rn(qkv_detail::add_bias(vx[u], vb[u], fold.bv != nullptr));
        kv_new_s[0][d] = kh;
        kv_new_s[1][d] = vh;
        fold.k_cache[new_off + d] = kh;
        fold.v_cache[new_off + d] = vh;
      }
    }
  }
  __syncthreads();

  if (!bad) {
    for (int r0 = 0; r0 < kRounds && r0 * kR < n; r0 += kBatch) {
      if (r0 > 0) load_keys(r0);
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int i = (r0 + b) * kR + tok;
        float acc[kMaxGroup] = {};
#pragma unroll
        for (int u = 0; u < kCpl; ++u) {
          const int j = c + kKeyLanes * u;
          if (j >= nchunks) continue;
          float kf[8];
          unpack_half8(i == i_new ? reinterpret_cast<const uint4*>(kv_new_s[0])[j] : kraw[b][u],
                       kf);
#pragma unroll
          for (int h = 0; h < kMaxGroup; ++h)
            if (h < group) acc[h] = dot8(&q_s[h][8 * j], kf, acc[h]);
        }
        // Every lane takes part in the butterflies (group is uniform over the block); lane c
        // then writes query head c's score.
        float mine = 0.0f;
#pragma unroll
        for (int h = 0; h < kMaxGroup; ++h) {
          if (h < group) {
            const float v = group_sum<kKeyLanes>(acc[h]);
            if (h == c) mine = v;
          }
        }
        if (i < n && c < group) p_s[c][i] = mine;
      }
    }
  }
  __syncthreads();

  for (int h = warp; h < group; h += kW) {
    float m = -INFINITY;
    if (!bad)
      for (int i = lane; i < n; i += 32) m = fmaxf(m, p_s[h][i]);
    m = warp_max(m);
    float l = 0.0f;
    if (!bad)
      for (int i = lane; i < n; i += 32) {
        const float e = expf(p_s[h][i] - m);
        p_s[h][i] = e;
        l += e;
      }
    l = warp_sum(l);
    if (lane == 0) {
      m_s[h] = m;
      l_s[h] = l;
    }
  }
  __syncthreads();

  if (g < groups) {
    float2 o[kMaxGroup];
#pragma unroll
    for (int h = 0; h < kMaxGroup; ++h) o[h] = make_float2(0.0f, 0.0f);
    if (!bad)
      for (int k0 = 0; g + k0 * groups < n; k0 += kVB) {
        if (k0 > 0) {  // the next values (their first kVB came before the scores)
#pragma unroll
          for (int k = 0; k < kVB; ++k) {
            const int i = g + (k0 + k) * groups;
            vraw[k] = i < n && i != i_new
                          ? reinterpret_cast<const uint32_t*>(v_cache + row_s[i])[pr]
                          : 0u;
          }
        }
#pragma unroll
        for (int k = 0; k < kVB; ++k) {
          const int i = g + (k0 + k) * groups;
          if (i < n) {
            __half2 vh;
            memcpy(&vh, i == i_new ? &reinterpret_cast<const uint32_t*>(kv_new_s[1])[pr] : &vraw[k],
                   sizeof(vh));
            const float2 vf = __half22float2(vh);
#pragma unroll
            for (int h = 0; h < kMaxGroup; ++h) {
              if (h < group) {
                const float p = p_s[h][i];
                o[h].x = fmaf(p, vf.x, o[h].x);
                o[h].y = fmaf(p, vf.y, o[h].y);
              }
            }
          }
        }
      }
#pragma unroll
    for (int h = 0; h < kMaxGroup; ++h) {
      if (h < group) {
        o_s[(g * kMaxGroup + h) * head_dim + 2 * pr] = o[h].x;
        o_s[(g * kMaxGroup + h) * head_dim + 2 * pr + 1] = o[h].y;
      }
    }
  }
  __syncthreads();

  group_part_end(gp, o_s, groups, m_s, l_s, out, part_o, part_m, part_l, n_head, group, head_dim,
                 max_parts, forms);
}

// grid (n_head, n_slots), block kThreads, dynamic shared max_parts floats rounded up to 8 (kPre);
// part_len: the partition kernel's kP. Its loads go out in few rounds (a partition's loads one
// after another made a 64-partition context take ~130 dependent round trips): the first kPre
// partitions' outputs with the maxima, then the sums, then kPre partitions' outputs at a time;
// M and sum_j w_j l_j by block reductions, each output's sum over j in order.
// Tried instead and not kept, both slower at small batches: the tiny partitions combined inside
// a thread-block cluster (2026-11-28), and the combine run by the last of a slot's partition
// blocks to finish (2026-11-29: qwen2.5-1.5b B = 1 1.315 -> 1.534 ms a step; that block combines
// its group's heads one after another, three dependent L2 round trips each, where this kernel
// runs them at once: bench/gpu-runs/2026-11-29-h200-fused-combine-attempt.log).
__global__ void __launch_bounds__(kThreads)
    attn_decode_combine_kernel(const int32_t* __restrict__ lens, const float* __restrict__ part_o,
                               const float* __restrict__ part_m, const float* __restrict__ part_l,
                               float* __restrict__ out, int n_head, int head_dim, int max_context,
                               int max_parts, int part_len, int window, ActForms forms) {
  constexpr int kPre = 8;                            // partitions' outputs in flight
  constexpr int kDims = kAttnMaxHeadDim / kThreads;  // dims a thread: d = tid + k kThreads
  extern __shared__ float w_s[];                     // [n_parts] exp(m_j - M)
  __shared__ float red[kThreads / 32];
  const int h = blockIdx.x, s = blockIdx.y, tid = threadIdx.x;
  const int L = lens[s];  // before the wait, as the partition kernels (attention_decode.hpp)
  // Every block waits, those with nothing to do too: a kernel after this one waits only for this
  // grid, so this grid must not complete before the partition kernel (whose output, and forms,
  // that kernel reads) has.
  act_forms_dependency_sync(forms);
  if (L <= 0 || L > max_context) return;  // written by the partition kernel
  const int n_parts = (L - window_start(L, window) - 1) / part_len + 1;
  if (n_parts <= 1) return;  // likewise
  const int64_t base = (int64_t(s) * n_head + h) * max_parts;
  const float* __restrict__ po = part_o + base * head_dim;
  float v[kDims][kPre];
  const auto load_o = [&](int j0) {
#pragma unroll
    for (int k = 0; k < kDims; ++k)
#pragma unroll
      for (int u = 0; u < kPre; ++u) {
        const int d = tid + k * kThreads;
        v[k][u] = d < head_dim && j0 + u < n_parts ? po[int64_t(j0 + u) * head_dim + d] : 0.0f;
      }
  };
  load_o(0);
  float M = -INFINITY;
  for (int j = tid; j < n_parts; j += kThreads) M = fmaxf(M, part_m[base + j]);
  M = block_reduce<true, kThreads / 32>(M, red);
  // w_s holds max_parts rounded up to kPre (the launch): the weights past n_parts are zeroed, so
  // that reads of whole kPre runs (should the compiler widen them) stay inside and defined.
  float lsum = 0.0f;
  for (int j = tid; j < (n_parts + kPre - 1) / kPre * kPre; j += kThreads) {
    if (j >= n_parts) {
      w_s[j] = 0.0f;
      continue;
    }
    const float w = expf(part_m[base + j] - M);
    w_s[j] = w;
    lsum = fmaf(part_l[base + j], w, lsum);
  }
  lsum = block_reduce<false, kThreads / 32>(lsum, red);  // its barriers publish w_s
  float acc[kDims] = {};
  for (int j0 = 0;;) {
#pragma unroll
    for (int k = 0; k < kDims; ++k)
#pragma unroll
      for (int u = 0; u < kPre; ++u)
        if (j0 + u < n_parts) acc[k] = fmaf(v[k][u], w_s[j0 + u], acc[k]);
    j0 += kPre;
    if (j0 >= n_parts) break;
    load_o(j0);
  }
  float* __restrict__ out_h = out + (int64_t(s) * n_head + h) * head_dim;
#pragma unroll
  for (int k = 0; k < kDims; ++k) {
    const int d = tid + k * kThreads;
    if (d < head_dim) out_h[d] = acc[k] / lsum;
  }
  if (forms.any())
    store_out_forms(forms, out, s, gridDim.y, n_head * head_dim, h * head_dim, head_dim);
}

constexpr int kMaxParts = 12288;  // combine kernel's shared weights: 48 KiB of floats

int parts_for(int max_context, int part_len) { return (max_context - 1) / part_len + 1; }

// Whether a launch of these shapes runs the grouped kernel (a block per KV head) or the
// per-query-head one.
bool grouped(const AttentionDecodeArgs& a) {
  return a.n_head / a.cache.n_head_kv <= kMaxGroup && a.cache.head_dim % 8 == 0;
}

using PartitionKernel = void (*)(const float*, const __half*, const __half*, const int32_t*,
                                 const int32_t*, const int32_t*, float*, float*, float*, float*,
                                 int, int, int, int, int, int, int, int, int, float, int, ActForms,
                                 qkv_detail::QkvFold);

// The grouped kernel for a partition length and a head_dim (a multiple of 8): instantiated for
// head dims up to 64, 128 and 256, so that the registers a lane holds follow the rows' length.
template <int kP, int kT>
PartitionKernel group_kernel_of(int head_dim) {
  if (head_dim <= 64) return attn_decode_group_kernel<kP, kT, 64>;
  if (head_dim <= 128) return attn_decode_group_kernel<kP, kT, 128>;
  return attn_decode_group_kernel<kP, kT, kAttnMaxHeadDim>;
}

// A partition kernel with its block size and dynamic shared memory.
struct PartitionLaunch {
  PartitionKernel kernel;
  int threads;
  size_t smem;
  int64_t resident = 0;  // blocks the device holds at once (the streaming kernel's)
};

// The streaming kernel for a head-dim class (its shared memory above the default 48 KiB allowed
// once per instantiation). Its mma rows serve every group of up to kMaxGroup query heads.
template <int kHd, int kS>
PartitionLaunch stream_launch() {
  constexpr size_t smem = stream_smem_bytes<kHd, kS>();
  static const int64_t resident = [] {
    const auto kernel = attn_decode_stream_kernel<kHd, kS>;
    RZ_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    int per_sm = 0;
    RZ_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kStreamThreads, smem));
    return int64_t(per_sm) * device_sm_count();
  }();
  return {attn_decode_stream_kernel<kHd, kS>, kStreamThreads, smem, resident};
}

template <int kS>
PartitionLaunch stream_launch_for(int head_dim) {
  if (head_dim <= 64) return stream_launch<64, kS>();
  return head_dim <= 128 ? stream_launch<128, kS>() : stream_launch<kAttnMaxHeadDim, kS>();
}

// Whether grouped launches stream (attn_decode_stream_kernel); RZ_ATTN_STREAM_OFF=1 (A/B runs)
// or attn_detail::set_streaming(false) (tests) keeps attn_decode_group_kernel's partitions.
std::atomic<bool>& streaming_switch() {
  static std::atomic<bool> on = [] {
    const char* off = std::getenv("RZ_ATTN_STREAM_OFF");
    return !(off && std::string(off) == "1");
  }();
  return on;
}

bool streaming() { return streaming_switch().load(std::memory_order_relaxed); }

// Whether attention_decode_qkv folds qkv_post into the grouped partitions where it can;
// RZ_ATTN_QKV_FOLD_OFF=1 (A/B runs) or attn_detail::set_qkv_fold(false) (tests) runs qkv_post
// before the attention instead.
std::atomic<bool>& qkv_fold_switch() {
  static std::atomic<bool> on = [] {
    const char* off = std::getenv("RZ_ATTN_QKV_FOLD_OFF");
    return !(off && std::string(off) == "1");
  }();
  return on;
}

// The grouped kernel of a launch of `blocks` thread blocks. The streaming kernel keeps two tiles
// in flight (three stages) where the device holds the whole grid at once; on larger grids one
// (two stages), so that more blocks are resident (H200, AttentionDecodeBench, contexts 128-256:
// llama3.1-8b B = 256, 2,048 blocks, 84 us with three stages and 78 with two; qwen2.5-1.5b
// B = 256, 512 blocks, 41 with three and 46 with two; measured on the FMA kernel that preceded
// the tensor-core one. With the tensor-core kernel either count forced gave the same rz bench
// figures within 1 % at B = 64 / 128 / 256 on both models, bench/gpu-runs/2026-11-29-h200-attn-
// stream-stages.log, so the rule stays).
PartitionLaunch group_kernel(int part_len, int head_dim, int64_t blocks) {
  if (part_len == kAttnTinyPartition)
    return {group_kernel_of<kAttnTinyPartition, kSmallThreads>(head_dim), kSmallThreads, 0};
  if (part_len == kAttnSmallPartition)
    return {group_kernel_of<kAttnSmallPartition, kSmallThreads>(head_dim), kSmallThreads, 0};
  if (!streaming()) return {group_kernel_of<kAttnPartition, kThreads>(head_dim), kThreads, 0};
  const PartitionLaunch deep = stream_launch_for<3>(head_dim);
  return blocks <= deep.resident ? deep : stream_launch_for<2>(head_dim);
}

// Small partitions for grouped launches also keep heads * partitions under this (34 MiB of
// workspace at head_dim 128), so long contexts do not inflate the workspace.
constexpr int64_t kSmallHeadParts = 65536;

// The partition length a launch uses: the small one when its blocks per partition (slots times
// KV heads, or times query heads for the per-head kernel) are few, so that the blocks still
// spread over the SMs (and it does not need too many partitions). The grouped kernel's cap is
// higher: its small configuration loads a partition's keys and values in one round where the
// 256-token one waits on eight, which paid at 512 KV-head blocks (H200: llama3.1-8b B = 64
// +5.7 %, qwen2.5-1.5b B = 256 +7.5 %) and did not at 2048 (llama B = 256 -8.5 %, in a run that
// also carried a combine change which lost by itself; 1024 is unmeasured).
// The tiny one, for the grouped kernel's few-block launches over short contexts: at B = 1 a
// block's own chain of instructions (scores, softmax, values for its tokens) is what the
// attention costs, and halving its tokens shortens it more than the combine of twice the
// partitions adds.
// Past the tiny ones, grouped launches of at least kAttnStreamMinBlocks blocks of 256 tokens
// (slots x KV heads x partitions of max_context) stream (attn_decode_stream_kernel). Measured on
// an H200 (gpu_step_trace_bench, 32 decode steps after 128-token prompts, device span a step,
// streaming against the small partitions): 128 blocks, qwen2.5-1.5b B = 64 2.33 -> 2.48 ms and
// llama3.1-8b B = 16 4.41 -> 4.37; 256 blocks, qwen B = 128 2.91 -> 2.75 and llama B = 32 5.76 ->
// 5.43. With one block of 4 warps an SM the FMA streaming kernel of then waited on each tile's
// copies; its tensor-core successor (2026-11-29) made 128 blocks pay: rz bench, prompt 128, gen
// 128, two rounds, 256 -> 128 blocks, llama3.1-8b B = 16 3,557 / 3,571 -> 3,673 / 3,677 tokens/s,
// qwen2.5-1.5b B = 64 26,936 / 25,999 -> 27,845 / 28,236
// (bench/gpu-runs/2026-11-29-h200-attn-mma-ab.log).
int partition_for(const AttentionDecodeArgs& a) {
  const bool g = grouped(a);
  const int64_t unit = g ? a.cache.n_head_kv : a.n_head;
  if (g && int64_t(a.n_slots) * unit <= kAttnTinyBatchGroups &&
      parts_for(a.max_context, kAttnTinyPartition) <= kAttnTinyMaxParts)
    return kAttnTinyPartition;
  if (g && streaming() &&
      int64_t(a.n_slots) * a.cache.n_head_kv * parts_for(a.max_context, kAttnPartition) >=
          kAttnStreamMinBlocks)
    return kAttnPartition;
  const int parts_small = parts_for(a.max_context, kAttnSmallPartition);
  const int64_t cap = g ? kAttnSmallBatchGroups : kAttnSmallBatchHeads;
  const bool small = int64_t(a.n_slots) * unit <= cap && parts_small <= kMaxParts &&
                     (!g || int64_t(a.n_slots) * a.n_head * parts_small <= kSmallHeadParts);
  return small ? kAttnSmallPartition : kAttnPartition;
}

// Workspace floats of a launch over `heads` query heads with `parts` partitions each.
size_t ws_floats(int64_t heads, int parts, int head_dim) {
  return parts <= 1 ? 0 : size_t(heads) * parts * (size_t(head_dim) + 2);
}

}  // namespace

// An upper bound over launches with n_slots' <= n_slots and max_context' <= max_context: such a
// launch uses kAttnPartition, or kAttnSmallPartition with n_slots' times its unit (KV heads when
// grouped, else query heads) <= kAttnSmallBatchGroups grouped, else kAttnSmallBatchHeads, and,
// when grouped, heads' * parts' <= kSmallHeadParts, or (grouped) kAttnTinyPartition with n_slots'
// * KV heads <= kAttnTinyBatchGroups and parts' <= kAttnTinyMaxParts; each term grows with
// n_slots' and max_context'.
size_t attention_decode_workspace_floats(const AttentionDecodeArgs& a) {
  if (a.max_context <= 0 || a.n_slots <= 0 || a.n_head <= 0 || a.cache.head_dim <= 0 ||
      a.cache.n_head_kv <= 0)
    return 0;
  const int64_t heads = int64_t(a.n_slots) * a.n_head;
  const int parts_small = parts_for(a.max_context, kAttnSmallPartition);
  const size_t large = ws_floats(heads, parts_for(a.max_context, kAttnPartition), a.cache.head_dim);
  size_t small = 0, tiny = 0;
  if (grouped(a)) {
    const int64_t slots = std::min<int64_t>(a.n_slots, kAttnSmallBatchGroups / a.cache.n_head_kv);
    const int64_t head_parts = std::min(slots * a.n_head * parts_small, kSmallHeadParts);
    small = parts_small <= 1 ? 0 : size_t(head_parts) * (size_t(a.cache.head_dim) + 2);
    const int64_t tiny_slots =
        std::min<int64_t>(a.n_slots, kAttnTinyBatchGroups / a.cache.n_head_kv);
    tiny = ws_floats(tiny_slots * a.n_head,
                     std::min(parts_for(a.max_context, kAttnTinyPartition), kAttnTinyMaxParts),
                     a.cache.head_dim);
  } else {
    small =
        ws_floats(std::min<int64_t>(heads, kAttnSmallBatchHeads), parts_small, a.cache.head_dim);
  }
  return std::max({large, small, tiny});
}

// Checks a's shapes (messages prefixed with `who`) and launches the partition and combine kernels
// for a.n_slots query rows. table_rows: null (row s) or device [n_slots] int32.
// fold: qkv_post's work for attn_decode_group_kernel (fold.rows.q set; only where the launch
// runs that kernel, attn_detail::folds_qkv).
static void launch_attention(const char* who, const float* q, const uint16_t* k_cache,
                             const uint16_t* v_cache, const int32_t* block_tables,
                             const int32_t* table_rows, const int32_t* context_lens, float* out,
                             float* workspace, const AttentionDecodeArgs& a, cudaStream_t stream,
                             const ActForms& forms, const qkv_detail::QkvFold& fold = {}) {
  const KvCacheShape& c = a.cache;
  const std::string w = who;
  const auto shape = [&] {
    return "n_slots " + std::to_string(a.n_slots) + ", n_head " + std::to_string(a.n_head) +
           ", n_head_kv " + std::to_string(c.n_head_kv) + ", head_dim " +
           std::to_string(c.head_dim) + ", n_blocks " + std::to_string(c.n_blocks) +
           ", block_size " + std::to_string(c.block_size) + ", max_context " +
           std::to_string(a.max_context) + ", table_stride " + std::to_string(a.table_stride);
  };
  if (a.n_slots < 0 || a.n_head <= 0 || c.n_head_kv <= 0 || a.n_head % c.n_head_kv != 0)
    throw Error(w + ": n_head must be a positive multiple of n_head_kv (" + shape() + ")");
  if (c.head_dim < 2 || c.head_dim % 2 != 0 || c.head_dim > kAttnMaxHeadDim)
    throw Error(w + ": head_dim must be even and in [2, 256] (" + shape() + ")");
  if (c.n_blocks < 0 || c.block_size <= 0 || a.max_context <= 0 || a.table_stride <= 0 ||
      int64_t(a.table_stride) * c.block_size < a.max_context)
    throw Error(w + ": block tables cannot hold max_context tokens (" + shape() + ")");
  if (a.n_slots > 65535 || a.n_head > 65535) throw Error(w + ": too large (" + shape() + ")");
  if (a.window < 0) throw Error(w + ": window must be >= 0 (" + shape() + ")");
  const int part_len = partition_for(a);
  const int max_parts = parts_for(a.max_context, part_len);
  if (max_parts > kMaxParts) throw Error(w + ": too large (" + shape() + ")");
  if (max_parts > 1 && workspace == nullptr)
    throw Error(w + ": workspace required for max_context > " + std::to_string(part_len) + " (" +
                shape() + ")");
  const int64_t cols = int64_t(a.n_head) * c.head_dim;
  if (forms.any()) check_act_forms(forms, cols, who);
  if (a.n_slots == 0) return;
  const float scale = a.scale != 0.0f ? a.scale : 1.0f / std::sqrt(float(c.head_dim));
  const size_t heads = size_t(a.n_slots) * a.n_head;
  float* part_o = workspace;
  float* part_m = workspace ? workspace + heads * max_parts * c.head_dim : nullptr;
  float* part_l = workspace ? part_m + heads * max_parts : nullptr;
  const auto* kc = reinterpret_cast<const __half*>(k_cache);
  const auto* vc = reinterpret_cast<const __half*>(v_cache);
  const int group = a.n_head / c.n_head_kv;
  // Both partition kernels take the same arguments (PartitionKernel): grouped, a block per (KV
  // head, slot, partition) for the group's query heads; else a block per (query head, slot,
  // partition).
  const bool small = part_len == kAttnSmallPartition, g = grouped(a);
  const PartitionLaunch pl =
      g ? group_kernel(part_len, c.head_dim, int64_t(c.n_head_kv) * a.n_slots * max_parts)
        : (small ? PartitionLaunch{attn_decode_partition_kernel<kAttnSmallPartition, kSmallThreads>,
                                   kSmallThreads, 0}
                 : PartitionLaunch{attn_decode_partition_kernel<kAttnPartition, kThreads>, kThreads,
                                   0});
  // The grouped kernel and the combine kernel write the f16 and qmm forms (head_dim a multiple
  // of 8 there, and out 16-byte aligned); the rest come from the preparation kernels after them.
  const bool out16 = (reinterpret_cast<uintptr_t>(out) & 15u) == 0;  // read back as float4
  const ActForms fused = g && out16 ? ActForms{.f16 = forms.f16, .qmm = forms.qmm} : ActForms{};
  const dim3 grid(g ? c.n_head_kv : a.n_head, a.n_slots, max_parts);
  launch_kernel(pl.kernel, grid, pl.threads, pl.smem, stream, q, kc, vc, block_tables, table_rows,
                context_lens, out, part_o, part_m, part_l, a.n_head, group, c.n_blocks, c.n_head_kv,
                c.block_size, c.head_dim, a.table_stride, a.max_context, max_parts, scale, a.window,
                fused, fold);
  RZ_CUDA_CHECK_LAUNCH("attn_decode_partition_kernel");
  if (max_parts > 1) {
    launch_kernel(attn_decode_combine_kernel, dim3(a.n_head, a.n_slots), kThreads,
                  size_t((max_parts + 7) / 8 * 8) * sizeof(float), stream, context_lens, part_o,
                  part_m, part_l, out, a.n_head, c.head_dim, a.max_context, max_parts, part_len,
                  a.window, fused);
    RZ_CUDA_CHECK_LAUNCH("attn_decode_combine_kernel");
  }
  if (forms.f16 && !fused.f16)
    convert_to_half(out, forms.f16, HalfType::f16, a.n_slots * cols, stream);
  if (forms.qmm && !fused.qmm) qmm_prepare_x(out, forms.qmm, a.n_slots, cols, stream);
  if (forms.q8) quantize_x_q8(out, forms.q8, a.n_slots, cols, stream);
}

void attn_detail::set_streaming(bool on) {
  streaming_switch().store(on, std::memory_order_relaxed);
}

bool attn_detail::streams(const AttentionDecodeArgs& a) {
  return streaming() && grouped(a) && partition_for(a) == kAttnPartition;
}

void attn_detail::set_qkv_fold(bool on) { qkv_fold_switch().store(on, std::memory_order_relaxed); }

bool attn_detail::folds_qkv(const AttentionDecodeArgs& a) {
  return qkv_fold_switch().load(std::memory_order_relaxed) && grouped(a) && !streams(a);
}

void attention_decode(const float* q, const uint16_t* k_cache, const uint16_t* v_cache,
                      const int32_t* block_tables, const int32_t* context_lens, float* out,
                      float* workspace, const AttentionDecodeArgs& a, cudaStream_t stream,
                      const ActForms& forms) {
  launch_attention("attention_decode", q, k_cache, v_cache, block_tables, nullptr, context_lens,
                   out, workspace, a, stream, forms);
}

void attention_decode_rows(const float* q, const uint16_t* k_cache, const uint16_t* v_cache,
                           const int32_t* block_tables, const int32_t* table_rows,
                           const int32_t* context_lens, float* out, float* workspace,
                           const AttentionDecodeArgs& a, cudaStream_t stream,
                           const ActForms& forms) {
  if (!table_rows && a.n_slots > 0) throw Error("attention_decode_rows: table_rows is null");
  launch_attention("attention_decode_rows", q, k_cache, v_cache, block_tables, table_rows,
                   context_lens, out, workspace, a, stream, forms);
}

void attention_decode_qkv(const AttentionQkv& in, float* q, uint16_t* k_cache, uint16_t* v_cache,
                          const int32_t* block_tables, const int32_t* context_lens, float* out,
                          float* workspace, const AttentionDecodeArgs& a, cudaStream_t stream,
                          const ActForms& forms) {
  const QkvPostArgs& p = in.args;
  if (p.n_tokens != a.n_slots || p.n_head != a.n_head || !(p.cache == a.cache))
    throw Error("attention_decode_qkv: qkv_post's tokens, heads and cache must be the attention's");
  if (!folds_qkv(a)) {
    qkv_post(in.qkv, in.bq, in.bk, in.bv, in.pos, in.inv_freq, in.cache_rows, q, k_cache, v_cache,
             p, stream);
    launch_attention("attention_decode_qkv", q, k_cache, v_cache, block_tables, nullptr,
                     context_lens, out, workspace, a, stream, forms);
    return;
  }
  qkv_detail::QkvFold f;
  f.rows = qkv_detail::qkv_post_rows(in.qkv, p);  // qkv_post's checks
  if (a.n_slots == 0)
    return launch_attention("attention_decode_qkv", q, k_cache, v_cache, block_tables, nullptr,
                            context_lens, out, workspace, a, stream, forms);
  if (!in.qkv || !in.pos || !in.inv_freq || !in.cache_rows || !k_cache || !v_cache)
    throw Error("attention_decode_qkv: null pointer");
  f.bq = in.bq;
  f.bk = in.bk;
  f.bv = in.bv;
  f.pos = in.pos;
  f.inv_freq = in.inv_freq;
  f.cs_table = p.cs_table;
  f.cs_positions = p.cs_positions;
  f.cache_rows = in.cache_rows;
  f.k_cache = reinterpret_cast<__half*>(k_cache);
  f.v_cache = reinterpret_cast<__half*>(v_cache);
  f.n_rot = p.n_rot;
  f.neox = p.neox;
  f.attn_factor = p.attn_factor;
  launch_attention("attention_decode_qkv", nullptr, k_cache, v_cache, block_tables, nullptr,
                   context_lens, out, workspace, a, stream, forms, f);
}

}  // namespace rz::gpu

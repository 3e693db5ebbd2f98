// Device helpers the decode attention kernels share (kernels/attention_decode.cu and the
// streaming kernel in kernels/attention_decode_stream.cuh): the window's first position, block
// reductions, the block-table walk into per-token cache row offsets, the output's matmul forms,
// and the grouped kernels' common start and finish (a block per KV head, slot and partition).
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/act_forms.cuh"
#include "kernels/act_forms.hpp"
#include "kernels/cuda_common.cuh"
#include "kernels/launch.cuh"
#include "kernels/qkv_post.cuh"

namespace rz::gpu::attn_detail {

constexpr int kMaxGroup = 8;  // query heads a block of the grouped kernels serve

// The partition kernels' parameters, one list for all three (attn_decode_partition_kernel,
// attn_decode_group_kernel, attn_decode_stream_kernel: the launch passes the same arguments to
// whichever it runs). forms: the grouped kernels' only. fold: qkv_post's work, which
// attn_decode_group_kernel alone takes over (fold.rows.q set; then q is not read): the launch
// passes it only to that kernel (attention_decode_qkv).
#define RZ_ATTN_PARTITION_PARAMS                                                                   \
  const float *__restrict__ q, const __half *__restrict__ k_cache,                                 \
      const __half *__restrict__ v_cache, const int32_t *__restrict__ tables,                      \
      const int32_t *__restrict__ table_rows, const int32_t *__restrict__ lens,                    \
      float *__restrict__ out, float *__restrict__ part_o, float *__restrict__ part_m,             \
      float *__restrict__ part_l, int n_head, int group, int n_blocks, int n_head_kv,              \
      int block_size, int head_dim, int table_stride, int max_context, int max_parts, float scale, \
      int window, ActForms forms, qkv_detail::QkvFold fold

// The first position a query at L - 1 attends to: L - window with a sliding window, else 0.
// Partitions cover [window_start, L).
__device__ __forceinline__ int window_start(int L, int window) {
  return window > 0 && L > window ? L - window : 0;
}

// Block-wide max or sum, returned to every thread. Starts and ends with all threads synced, so
// shared writes made before the call are visible after it and `red` may be reused at once.
template <bool kMax, int kWarps>
__device__ __forceinline__ float block_reduce(float v, float* red) {
  v = kMax ? warp_max(v) : warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // earlier readers of red are done
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float r = red[0];
  for (int w = 1; w < kWarps; ++w) r = kMax ? fmaxf(r, red[w]) : r + red[w];
  __syncthreads();
  return r;
}

// row_s[i] = the element offset in the layer's cache of KV head kvh's row for token t0 + i
// (i < n) of query row s, from its block table (row table_rows[s], or s when null); a block id
// outside [0, n_blocks) sets *bad. Ends with the block synchronized.
__device__ __forceinline__ void fill_rows(const int32_t* __restrict__ tables,
                                          const int32_t* __restrict__ table_rows, int s,
                                          int table_stride, int t0, int n, int n_blocks,
                                          int n_head_kv, int kvh, int block_size, int head_dim,
                                          int64_t* row_s, int* bad) {
  const int32_t* __restrict__ table =
      tables + int64_t(table_rows ? table_rows[s] : s) * table_stride;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int pos = t0 + i;
    const int32_t blk = table[pos / block_size];
    if (blk < 0 || blk >= n_blocks) {
      atomicExch(bad, 1);
      row_s[i] = 0;
    } else {
      row_s[i] = ((int64_t(blk) * n_head_kv + kvh) * block_size + pos % block_size) * head_dim;
    }
  }
  __syncthreads();
}

// The matmul input forms (f16, qmm; never q8) of `count` columns from col0 (multiples of 4) of
// output row s, read back from out after the block wrote them there (the barrier makes the
// block's writes visible to it), so they are what the preparation kernels make of out. n_rows:
// the launch's rows. Every thread of the block calls it.
__device__ __forceinline__ void store_out_forms(const ActForms& f, const float* out, int64_t s,
                                                int64_t n_rows, int cols, int col0, int count) {
  __syncthreads();
  const float4* row = reinterpret_cast<const float4*>(out + s * cols + col0);
  for (int i = threadIdx.x; i < count / 4; i += blockDim.x)
    store_act_forms(f, s, n_rows, cols, col0 + 4 * i, row[i], true);
}

// The 8 fp16 values of a 16-byte chunk of a cached row, as floats.
__device__ __forceinline__ void unpack_half8(const uint4& raw, float (&f)[8]) {
  const __half2* h2 = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 v = __half22float2(h2[e]);
    f[2 * e] = v.x;
    f[2 * e + 1] = v.y;
  }
}

// acc + q[0..8) . k[0..8), in index order; q 16-byte aligned (q * scale in shared memory).
__device__ __forceinline__ float dot8(const float* q, const float (&k)[8], float acc) {
  const float4 qa = reinterpret_cast<const float4*>(q)[0];
  const float4 qb = reinterpret_cast<const float4*>(q)[1];
  acc = fmaf(qa.x, k[0], acc);
  acc = fmaf(qa.y, k[1], acc);
  acc = fmaf(qa.z, k[2], acc);
  acc = fmaf(qa.w, k[3], acc);
  acc = fmaf(qb.x, k[4], acc);
  acc = fmaf(qb.y, k[5], acc);
  acc = fmaf(qb.z, k[6], acc);
  return fmaf(qb.w, k[7], acc);
}

// What a grouped kernel's block works on once group_part_begin returned true: its slot's
// partitions and the count n >= 1 of its own tokens, whose cache rows are in row_s; bad: a block
// id out of range (the output becomes NaN).
struct GroupPart {
  int n_parts, n;
  bool bad;
};

// The grouped kernels' start, for the block (KV head blockIdx.x, slot blockIdx.y, partition
// blockIdx.z) of kP-token partitions; every thread calls it. Reads the slot's length and block
// table before the wait for the kernel before this one (attention_decode.hpp), fills row_s, then
// waits; writes qmm's zero pad rows for the block's columns (slot 0, partition 0), and an idle
// slot's zeros (or an impossible length's NaN) with their forms. Returns false when the block has
// nothing more to do: not a decode row, past the slot's partitions, or an idle slot.
template <int kP>
__device__ __forceinline__ bool group_part_begin(
    const int32_t* __restrict__ tables, const int32_t* __restrict__ table_rows,
    const int32_t* __restrict__ lens, float* __restrict__ out, int n_head, int group, int n_blocks,
    int n_head_kv, int block_size, int head_dim, int table_stride, int max_context, int max_parts,
    int window, const ActForms& forms, int64_t* row_s, int* bad_s, GroupPart& gp) {
  const int kvh = blockIdx.x, s = blockIdx.y, part = blockIdx.z, tid = threadIdx.x;
  const int h0 = kvh * group;  // first query head of the group
  const int L = lens[s];
  if (L < 0) return false;  // not a decode row: nothing written (attention_decode.hpp)
  const bool idle = L <= 0 || L > max_context;
  const int first = idle ? 0 : window_start(L, window);
  gp.n_parts = idle ? 1 : (L - first - 1) / kP + 1;
  if (part >= gp.n_parts) return false;
  const int t0 = first + part * kP;
  gp.n = idle ? 0 : min(kP, L - t0);
  if (!idle) {
    if (tid == 0) *bad_s = 0;
    __syncthreads();  // bad_s initialised before anyone sets it
    fill_rows(tables, table_rows, s, table_stride, t0, gp.n, n_blocks, n_head_kv, kvh, block_size,
              head_dim, row_s, bad_s);
  }
  // With one partition a slot the next kernel is the output projection (forms.qmm: qmm's rule
  // of no early launch); with several it is the combine kernel.
  if (max_parts > 1)
    grid_dependency_sync();
  else
    act_forms_dependency_sync(forms);
  const int cols = n_head * head_dim;
  if (forms.qmm && s == 0 && part == 0)  // qmm's zero pad rows, for this block's columns
    for (int r = gridDim.y; r < (gridDim.y + 7) / 8 * 8; ++r)
      for (int i = tid; i < group * head_dim / 4; i += blockDim.x)
        store_qmm_pad(forms, r, cols, qmm_quad_of(h0 * head_dim + 4 * i));
  if (idle) {  // idle slot: zeros; impossible length: NaN
    if (part == 0) {
      for (int i = tid; i < group * head_dim; i += blockDim.x)
        out[(int64_t(s) * n_head + h0) * head_dim + i] = L == 0 ? 0.0f : __int_as_float(0x7fc00000);
      if (forms.any())
        store_out_forms(forms, out, s, gridDim.y, cols, h0 * head_dim, group * head_dim);
    }
    return false;
  }
  gp.bad = *bad_s != 0;  // uniform across the block
  return true;
}

// The grouped kernels' finish: o_s holds `groups` partial outputs per query head,
// [(g * kMaxGroup + h) * head_dim + d] (unnormalized, relative to the maximum m_s[h]), l_s[h] the
// sums of exp(score - m); written and synchronized by the caller. One partition: out = o / l;
// several: (m, l, o) for the combine kernel. Every thread calls it.
__device__ __forceinline__ void group_part_end(const GroupPart& gp, const float* o_s, int groups,
                                               const float* m_s, const float* l_s,
                                               float* __restrict__ out, float* __restrict__ part_o,
                                               float* __restrict__ part_m,
                                               float* __restrict__ part_l, int n_head, int group,
                                               int head_dim, int max_parts, const ActForms& forms) {
  const int s = blockIdx.y, part = blockIdx.z, tid = threadIdx.x;
  const int h0 = blockIdx.x * group;
  const float nan = __int_as_float(0x7fc00000);
  for (int i = tid; i < group * head_dim; i += blockDim.x) {
    const int h = i / head_dim, d = i % head_dim;
    float o = 0.0f;
    for (int gg = 0; gg < groups; ++gg) o += o_s[(gg * kMaxGroup + h) * head_dim + d];
    if (gp.bad) o = nan;
    const int64_t qh = int64_t(s) * n_head + h0 + h;
    if (gp.n_parts == 1)
      out[qh * head_dim + d] = o / l_s[h];
    else
      part_o[(qh * max_parts + part) * head_dim + d] = o;
  }
  if (tid < group && gp.n_parts > 1) {
    const int64_t pidx = (int64_t(s) * n_head + h0 + tid) * max_parts + part;
    part_m[pidx] = gp.bad ? nan : m_s[tid];
    part_l[pidx] = gp.bad ? nan : l_s[tid];
  }
  if (gp.n_parts == 1 && forms.any())
    store_out_forms(forms, out, s, gridDim.y, n_head * head_dim, h0 * head_dim, group * head_dim);
}

}  // namespace rz::gpu::attn_detail

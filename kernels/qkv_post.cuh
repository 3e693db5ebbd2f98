// The arithmetic of qkv_post (kernels/qkv_post.hpp) for the kernels that run it: qkv_post_kernel
// itself, and the grouped decode attention, which takes the work over in the decode step
// (attention_decode_qkv, kernels/attention_decode.hpp). One definition, so both write the same
// bits: the biased inputs, cos / sin of a token's angles (rope.cu's arithmetic, or its table), the
// rotation of an element, and where a token's k and v go.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/qkv_post.hpp"

namespace rz::gpu::qkv_detail {

// Where one token's q, k and v rows are: qkv_post's three layouts (a fused [q | k | v] row, a
// [q | k] row and v apart, or three apart) resolved to pointers and strides.
struct QkvRows {
  const float* q = nullptr;  // null: no rows (the attention then reads q as it is)
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t q_stride = 0, k_stride = 0, v_stride = 0;  // floats between consecutive tokens
};

// What the kernels need of a qkv_post call besides the rows and the cache (kernel arguments).
struct QkvFold {
  QkvRows rows;
  const float* bq = nullptr;  // biases, null when the model has none
  const float* bk = nullptr;
  const float* bv = nullptr;
  const int32_t* pos = nullptr;
  const float* inv_freq = nullptr;
  const float* cs_table = nullptr;
  int cs_positions = 0;
  const int64_t* cache_rows = nullptr;
  __half* k_cache = nullptr;
  __half* v_cache = nullptr;
  int n_rot = 0;
  bool neox = false;
  float attn_factor = 1.0f;
};

// qkv_post's checks of a (throwing rz::Error with qkv_post's messages) and its rows' layout.
QkvRows qkv_post_rows(const float* qkv, const QkvPostArgs& a);

// x + b where there is a bias, else x itself (bias_add is not run then: no +0, so -0 stays -0).
__device__ __forceinline__ float add_bias(float x, float b, bool has_bias) {
  return has_bias ? __fadd_rn(x, b) : x;
}

// row[j] + bias[j], or row[j] itself when there is no bias.
__device__ __forceinline__ float biased(const float* __restrict__ row,
                                        const float* __restrict__ bias, int j) {
  return add_bias(row[j], bias ? bias[j] : 0.0f, bias != nullptr);
}

// cos and sin of position p's n_rot / 2 angles into cs / sn (shared memory), the block's threads
// striding over them: from the table where it covers p, else computed as rope.cu does (fp32
// angle, sincos in double, rounded to fp32, times attn_factor). The caller synchronizes.
__device__ __forceinline__ void rope_cs_fill(int pi, int n_rot, const float* __restrict__ inv_freq,
                                             const float* __restrict__ cs_table, int cs_positions,
                                             float attn_factor, float* cs, float* sn) {
  const int half = n_rot / 2;
  const float p = static_cast<float>(pi);
  const bool in_table = cs_table && pi >= 0 && pi < cs_positions;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    if (in_table) {
      const float* c = cs_table + int64_t(pi) * n_rot + 2 * i;
      cs[i] = c[0];
      sn[i] = c[1];
      continue;
    }
    const float angle = __fmul_rn(inv_freq[i], p);
    double sd, cd;
    sincos(static_cast<double>(angle), &sd, &cd);
    cs[i] = __fmul_rn(static_cast<float>(cd), attn_factor);
    sn[i] = __fmul_rn(static_cast<float>(sd), attn_factor);
  }
}

// Which pair element d of a head belongs to: it is rotated when d < n_rot (rot), as the pair
// (a, b) of angle i, being its first element (a) or its second (b); else passed through (a = d).
struct RotPair {
  int a, b, i;
  bool first, rot;
};

__device__ __forceinline__ RotPair rot_pair(int d, int n_rot, bool neox) {
  if (d >= n_rot) return {d, d, 0, true, false};
  const int half = n_rot / 2;
  RotPair r;
  r.rot = true;
  if (neox) {
    r.first = d < half;
    r.i = r.first ? d : d - half;
    r.a = r.i;
    r.b = r.i + half;
  } else {
    r.first = (d % 2) == 0;
    r.i = d / 2;
    r.a = 2 * r.i;
    r.b = 2 * r.i + 1;
  }
  return r;
}

// rope.cu's rotate of the biased pair (x0, x1) by (c, s): a' = x0 c - x1 s, b' = x0 s + x1 c.
__device__ __forceinline__ float rotate(float x0, float x1, float c, float s, bool first) {
  return first ? __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s))
               : __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

// Element d of a head whose biased inputs are row[base + ...] + bias[base + ...]: rotated when
// d < n_rot, else passed through.
__device__ __forceinline__ float rotated(const float* __restrict__ row,
                                         const float* __restrict__ bias, int base, int d, int n_rot,
                                         bool neox, const float* __restrict__ cs,
                                         const float* __restrict__ sn) {
  const RotPair r = rot_pair(d, n_rot, neox);
  if (!r.rot) return biased(row, bias, base + d);
  const float x0 = biased(row, bias, base + r.a), x1 = biased(row, bias, base + r.b);
  return rotate(x0, x1, cs[r.i], sn[r.i], r.first);
}

// The element offset in one layer's cache of cache row `crow`'s head h (kv_append's layout), or
// -1 when the row is skipped (negative, or past the cache's end).
__device__ __forceinline__ int64_t cache_head_offset(int64_t crow, int h, int n_blocks,
                                                     int n_head_kv, int block_size, int head_dim) {
  if (crow < 0 || crow >= int64_t(n_blocks) * block_size) return -1;
  const int64_t block = crow / block_size;
  const int offset = static_cast<int>(crow % block_size);
  return ((block * n_head_kv + h) * block_size + offset) * int64_t(head_dim);
}

}  // namespace rz::gpu::qkv_detail

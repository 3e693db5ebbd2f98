// Fused post-processing of the QKV projection on the GPU: from one fused [q | k | v] row per
// token (the output of one GEMV over the concatenated Q/K/V weights) it adds the biases, applies
// rotary position embedding to q and k, writes q dense for attention and appends k and v to one
// layer's paged fp16 KV cache, in one launch. Bit-identical to bias_add (kernels/bias.hpp) on the
// q, k and v parts, then rope_inplace (kernels/rope.hpp) with row strides, then kv_append
// (kernels/kv_append.hpp) with row strides, then copying q out: the same fp32 adds, the same
// angle / cos / sin / rotation arithmetic, the same round-to-nearest-even fp16 conversion.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/kv_cache_shape.hpp"

namespace rz::gpu {

struct QkvPostArgs {
  int n_tokens = 0;
  int n_head = 0;     // query heads; kv heads and head_dim are cache.n_head_kv, cache.head_dim
  int n_rot = 0;      // rotated dimensions, even, <= head_dim
  bool neox = false;  // pairs (i, i + n_rot/2) instead of (2i, 2i+1)
  float attn_factor = 1.0f;  // multiplied into cos and sin (yarn; 1 otherwise)
  KvCacheShape cache;        // one layer's K (and V) cache shape
  // Floats between consecutive tokens' fused rows (0: dense, q_dim + 2 * kv_dim).
  int64_t qkv_row_stride = 0;
  // Optional cos/sin table from rope_cs_table (kernels/rope.hpp; same inv_freq, n_rot and
  // attn_factor): [cs_positions, n_rot] fp32. With it c and s are read, not computed; results
  // are bit-identical. Positions outside [0, cs_positions) are computed from inv_freq as without.
  const float* cs_table = nullptr;
  int cs_positions = 0;
  // Separate K and V sources (layers whose Q, K, V weights could not be stacked): when k_src is
  // set, v_src must be too, and then `qkv` holds only q rows: token t's q at
  // qkv + t * qkv_row_stride (0: dense, q_dim), its k at k_src + t * k_row_stride (0: kv_dim), its
  // v at v_src + t * v_row_stride (0: kv_dim). Null (default): k and v come from the fused row.
  const float* k_src = nullptr;
  const float* v_src = nullptr;
  int64_t k_row_stride = 0;
  int64_t v_row_stride = 0;
};

// With q_dim = n_head * head_dim, kv_dim = n_head_kv * head_dim:
// qkv: device [n_tokens, qkv_row_stride] fp32, token t's row [q (q_dim) | k (kv_dim) | v (kv_dim)]
//   at qkv + t * qkv_row_stride; read only. (With a.k_src: only [q (q_dim)], see QkvPostArgs.)
// bq: device [q_dim], bk, bv: device [kv_dim] fp32 biases, each null when the model has none
//   (then nothing is added: not even +0, which would turn -0 into +0).
// pos: device [n_tokens] int32 positions; inv_freq: device [n_rot / 2] fp32 (rope_inv_freq).
// cache_rows: device [n_tokens] int64, as kv_append: token t's k and v go to block
//   cache_rows[t] / block_size, offset cache_rows[t] % block_size; a negative row or one past the
//   cache's end skips the token's k and v (its q is still written).
// q_out: device [n_tokens, q_dim] fp32 dense, must not overlap qkv.
// k_cache, v_cache: device, one layer's cache each (uint16_t holds the fp16 bits).
// Throws rz::Error for bad shapes, strides or null pointers; n_tokens == 0 launches nothing.
void qkv_post(const float* qkv, const float* bq, const float* bk, const float* bv,
              const int32_t* pos, const float* inv_freq, const int64_t* cache_rows, float* q_out,
              uint16_t* k_cache, uint16_t* v_cache, const QkvPostArgs& a, cudaStream_t stream);

}  // namespace rz::gpu

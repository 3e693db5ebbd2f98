// Appends the K and V rows of a step's new tokens to one layer's paged KV cache (layout in
// kernels/kv_cache_shape.hpp: [n_blocks][n_head_kv][block_size][head_dim] fp16), rounding fp32
// to fp16 (round to nearest even, as rz::fp32_to_fp16). Runs after RoPE, before attention.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/kv_cache_shape.hpp"

namespace rz::gpu {

struct KvAppendArgs {
  int n_tokens = 0;
  KvCacheShape cache;  // one layer's K (and V) cache shape
  // Floats between consecutive tokens' rows of k_new / v_new (0: dense, n_head_kv * head_dim).
  // Lets K and V be read from inside one fused QKV row.
  int64_t k_row_stride = 0;
  int64_t v_row_stride = 0;
};

// k_new, v_new: device [n_tokens, row_stride] fp32, kv head h of token t at
//   k_new + t * k_row_stride + h * head_dim
// cache_rows: device [n_tokens] int64, token t goes to block cache_rows[t] / block_size, offset
//   cache_rows[t] % block_size (blocks[p / block_size] * block_size + p % block_size for position
//   p of a sequence with block table `blocks`); a negative row skips the token
//   (padding), and so does a row past the cache's end (a bug upstream, never a stray write).
// k_cache, v_cache: device, one layer's cache each (uint16_t holds the fp16 bits).
// Throws rz::Error for bad shapes or strides; n_tokens == 0 launches nothing.
void kv_append(const float* k_new, const float* v_new, const int64_t* cache_rows, uint16_t* k_cache,
               uint16_t* v_cache, const KvAppendArgs& a, cudaStream_t stream);

}  // namespace rz::gpu

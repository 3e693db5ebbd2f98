// KV cache append kernel (see kv_append.hpp). One thread block per token; threads stride over
// the token's n_head_kv * head_dim elements, so a warp writes consecutive halves of one row.
#include "kernels/kv_append.hpp"
#include "kernels/launch.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda_check.hpp"

namespace rz::gpu {
namespace {

// grid (n_tokens), block 128
__global__ void kv_append_kernel(const float* __restrict__ k_new, const float* __restrict__ v_new,
                                 const int64_t* __restrict__ cache_rows,
                                 __half* __restrict__ k_cache, __half* __restrict__ v_cache,
                                 int n_blocks, int n_head_kv, int block_size, int head_dim,
                                 int64_t k_stride, int64_t v_stride) {
  grid_dependency_sync();
  const int t = blockIdx.x;
  const int64_t row = cache_rows[t];
  if (row < 0 || row >= int64_t(n_blocks) * block_size) return;
  const int64_t block = row / block_size;
  const int offset = static_cast<int>(row % block_size);
  const float* kt = k_new + t * k_stride;
  const float* vt = v_new + t * v_stride;
  const int width = n_head_kv * head_dim;
  for (int e = threadIdx.x; e < width; e += blockDim.x) {
    const int h = e / head_dim, d = e % head_dim;
    const int64_t dst = ((block * n_head_kv + h) * block_size + offset) * int64_t(head_dim) + d;
    k_cache[dst] = __float2half_rn(kt[e]);
    v_cache[dst] = __float2half_rn(vt[e]);
  }
}

}  // namespace

void kv_append(const float* k_new, const float* v_new, const int64_t* cache_rows, uint16_t* k_cache,
               uint16_t* v_cache, const KvAppendArgs& a, cudaStream_t stream) {
  const KvCacheShape& c = a.cache;
  const auto shape = [&] {
    return "n_tokens " + std::to_string(a.n_tokens) + ", n_blocks " + std::to_string(c.n_blocks) +
           ", n_head_kv " + std::to_string(c.n_head_kv) + ", block_size " +
           std::to_string(c.block_size) + ", head_dim " + std::to_string(c.head_dim);
  };
  if (a.n_tokens < 0 || c.n_blocks < 0 || c.n_head_kv <= 0 || c.block_size <= 0 || c.head_dim <= 0)
    throw Error("kv_append: bad shape (" + shape() + ")");
  const int64_t width = int64_t(c.n_head_kv) * c.head_dim;
  const int64_t ks = a.k_row_stride ? a.k_row_stride : width;
  const int64_t vs = a.v_row_stride ? a.v_row_stride : width;
  if (ks < width || vs < width)
    throw Error("kv_append: row stride smaller than the heads it holds (" + shape() + ")");
  if (a.n_tokens == 0) return;
  if (a.n_tokens > 2147483647 || width > 1 << 20)
    throw Error("kv_append: too large (" + shape() + ")");
  launch_kernel(kv_append_kernel, a.n_tokens, 128, 0, stream, k_new, v_new, cache_rows,
                reinterpret_cast<__half*>(k_cache), reinterpret_cast<__half*>(v_cache), c.n_blocks,
                c.n_head_kv, c.block_size, c.head_dim, ks, vs);
  RZ_CUDA_CHECK_LAUNCH("kv_append_kernel");
}

}  // namespace rz::gpu

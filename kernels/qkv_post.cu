// Fused QKV post-processing kernel (see qkv_post.hpp). Thread blocks (token, slice): each takes
// kElemsPerBlock consecutive elements of the token's [q | k and v] outputs, so that a token's
// elements spread over several blocks and each thread has at most two (a block per token left
// each thread a chain of dependent loads and stores: 9.5 us a token for llama3.1-8b's 6,144
// elements on an H200). The threads of pairs i < n_rot/2 first compute cos/sin of the token's
// angles into shared memory exactly as rope.cu does (fp32 angle, sincos in double, rounded to fp32,
// times attn_factor), or read them from rope_cs_table's table (the same numbers, computed by the
// same arithmetic); then every thread handles output elements e of the fused row [q | k | v] in a
// block-stride loop: a rotated element reads its pair partner too and computes its half of
// rope.cu's rotate() from the biased inputs (the same rounded products and sum), so consecutive
// threads write consecutive q floats and cache halves. K and V rows come from the fused row or from
// separate buffers. The arithmetic is kernels/qkv_post.cuh's, which the grouped decode attention
// shares where it does this work itself in the decode step (attention_decode_qkv).
#include "kernels/launch.cuh"
#include "kernels/qkv_post.cuh"
#include "kernels/qkv_post.hpp"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda_check.hpp"

namespace rz::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kElemsPerBlock = 2 * kThreads;

using qkv_detail::biased;
using qkv_detail::rotated;

// grid (n_tokens, slices of kElemsPerBlock of the q_dim + kv_dim elements), block kThreads,
// dynamic shared memory 2 * (n_rot / 2) floats
__global__ void qkv_post_kernel(const float* __restrict__ qkv, const float* __restrict__ bq,
                                const float* __restrict__ bk, const float* __restrict__ bv,
                                const int32_t* __restrict__ pos, const float* __restrict__ inv_freq,
                                const float* __restrict__ cs_table, int cs_positions,
                                const int64_t* __restrict__ cache_rows, float* __restrict__ q_out,
                                __half* __restrict__ k_cache, __half* __restrict__ v_cache,
                                int n_head, int n_head_kv, int head_dim, int n_rot, bool neox,
                                float attn_factor, int n_blocks, int block_size, int64_t stride,
                                const float* __restrict__ k_src, int64_t k_stride,
                                const float* __restrict__ v_src, int64_t v_stride) {
  grid_dependency_sync();
  extern __shared__ float cs_sn[];  // [half] cos then [half] sin
  const int t = blockIdx.x;
  const int half = n_rot / 2;
  float* cs = cs_sn;
  float* sn = cs_sn + half;
  qkv_detail::rope_cs_fill(pos[t], n_rot, inv_freq, cs_table, cs_positions, attn_factor, cs, sn);
  __syncthreads();

  const float* row = qkv + t * stride;
  const int q_dim = n_head * head_dim, kv_dim = n_head_kv * head_dim;
  const int e_begin = static_cast<int>(blockIdx.y) * kElemsPerBlock;
  const int e_end = min(q_dim + kv_dim, e_begin + kElemsPerBlock);
  float* qt = q_out + int64_t(t) * q_dim;
  for (int e = e_begin + threadIdx.x; e < min(e_end, q_dim); e += blockDim.x) {
    const int h = e / head_dim, d = e - h * head_dim;
    qt[e] = rotated(row, bq, h * head_dim, d, n_rot, neox, cs, sn);
  }
  if (e_end <= q_dim) return;

  const int64_t crow = cache_rows[t];
  if (qkv_detail::cache_head_offset(crow, 0, n_blocks, n_head_kv, block_size, head_dim) < 0)
    return;  // skipped, as kv_append
  const float* krow = k_src + t * k_stride;
  const float* vrow = v_src + t * v_stride;
  for (int e = max(e_begin, q_dim) - q_dim + threadIdx.x; e < e_end - q_dim; e += blockDim.x) {
    const int h = e / head_dim, d = e - h * head_dim;
    const int64_t dst =
        qkv_detail::cache_head_offset(crow, h, n_blocks, n_head_kv, block_size, head_dim) + d;
    k_cache[dst] = __float2half_rn(rotated(krow, bk, h * head_dim, d, n_rot, neox, cs, sn));
    v_cache[dst] = __float2half_rn(biased(vrow, bv, e));
  }
}

}  // namespace

qkv_detail::QkvRows qkv_detail::qkv_post_rows(const float* qkv, const QkvPostArgs& a) {
  const KvCacheShape& c = a.cache;
  const auto shape = [&] {
    return "n_tokens " + std::to_string(a.n_tokens) + ", n_head " + std::to_string(a.n_head) +
           ", n_head_kv " + std::to_string(c.n_head_kv) + ", head_dim " +
           std::to_string(c.head_dim) + ", n_rot " + std::to_string(a.n_rot) + ", n_blocks " +
           std::to_string(c.n_blocks) + ", block_size " + std::to_string(c.block_size);
  };
  if (a.n_tokens < 0 || a.n_head <= 0 || c.n_head_kv <= 0 || c.head_dim <= 0 || c.n_blocks < 0 ||
      c.block_size <= 0)
    throw Error("qkv_post: bad shape (" + shape() + ")");
  if (a.n_rot <= 0 || a.n_rot % 2 != 0 || a.n_rot > c.head_dim || a.n_rot > 8192)
    throw Error("qkv_post: n_rot must be even, positive, <= head_dim and <= 8192 (" + shape() +
                ")");
  const int64_t q_dim = int64_t(a.n_head) * c.head_dim, kv_dim = int64_t(c.n_head_kv) * c.head_dim;
  if (q_dim + 2 * kv_dim > (int64_t(1) << 24))
    throw Error("qkv_post: rows too wide (" + shape() + ")");
  if (!a.k_src != !a.v_src) throw Error("qkv_post: k_src and v_src must be set together");
  const bool separate = a.k_src != nullptr;
  const int64_t width = separate ? q_dim : q_dim + 2 * kv_dim;  // what one qkv row holds
  const int64_t stride = a.qkv_row_stride ? a.qkv_row_stride : width;
  if (stride < width)
    throw Error("qkv_post: row stride " + std::to_string(stride) + " smaller than the " +
                (separate ? "q" : "fused") + " row it holds (" + shape() + ")");
  const int64_t k_stride = separate ? (a.k_row_stride ? a.k_row_stride : kv_dim) : stride;
  const int64_t v_stride = separate ? (a.v_row_stride ? a.v_row_stride : kv_dim) : stride;
  if (k_stride < kv_dim || v_stride < kv_dim)
    throw Error("qkv_post: k/v row stride smaller than the k/v row it holds (" + shape() + ")");
  if (a.cs_table && a.cs_positions < 0) throw Error("qkv_post: negative cs_positions");
  QkvRows r;
  r.q = qkv;
  r.k = separate ? a.k_src : qkv ? qkv + q_dim : nullptr;
  r.v = separate ? a.v_src : qkv ? qkv + q_dim + kv_dim : nullptr;
  r.q_stride = stride;
  r.k_stride = k_stride;
  r.v_stride = v_stride;
  return r;
}

void qkv_post(const float* qkv, const float* bq, const float* bk, const float* bv,
              const int32_t* pos, const float* inv_freq, const int64_t* cache_rows, float* q_out,
              uint16_t* k_cache, uint16_t* v_cache, const QkvPostArgs& a, cudaStream_t stream) {
  const qkv_detail::QkvRows r = qkv_detail::qkv_post_rows(qkv, a);
  if (a.n_tokens == 0) return;
  if (!qkv || !pos || !inv_freq || !cache_rows || !q_out || !k_cache || !v_cache)
    throw Error("qkv_post: null pointer");
  const KvCacheShape& c = a.cache;
  const int64_t q_dim = int64_t(a.n_head) * c.head_dim, kv_dim = int64_t(c.n_head_kv) * c.head_dim;
  const size_t smem = sizeof(float) * size_t(a.n_rot);  // cos and sin, n_rot / 2 each
  const dim3 grid(static_cast<unsigned>(a.n_tokens),
                  static_cast<unsigned>((q_dim + kv_dim + kElemsPerBlock - 1) / kElemsPerBlock));
  launch_kernel(qkv_post_kernel, grid, kThreads, smem, stream, qkv, bq, bk, bv, pos, inv_freq,
                a.cs_table, a.cs_positions, cache_rows, q_out, reinterpret_cast<__half*>(k_cache),
                reinterpret_cast<__half*>(v_cache), a.n_head, c.n_head_kv, c.head_dim, a.n_rot,
                a.neox, a.attn_factor, c.n_blocks, c.block_size, r.q_stride, r.k, r.k_stride, r.v,
                r.v_stride);
  RZ_CUDA_CHECK_LAUNCH("qkv_post_kernel");
}

}  // namespace rz::gpu

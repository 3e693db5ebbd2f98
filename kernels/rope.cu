// Rotary position embedding kernel and its frequency table (see rope.hpp). One thread block per
// token; a thread owns one frequency pair i: it computes that pair's cos/sin once (in double, as
// the CPU executor does) and rotates pair i of every Q and K head of the token.
#include "kernels/rope.hpp"

#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "gpu/cuda_check.hpp"

namespace rz::gpu {
namespace {

__device__ __forceinline__ void rotate(float* __restrict__ x, int a, int b, float c, float s) {
  const float x0 = x[a], x1 = x[b];
  x[a] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
  x[b] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

// grid (n_tokens); threads loop over pairs i < n_rot / 2
__global__ void rope_kernel(float* __restrict__ q, float* __restrict__ k,
                            const int32_t* __restrict__ pos, const float* __restrict__ inv_freq,
                            int n_head, int n_head_kv, int head_dim, int n_rot, bool neox,
                            float attn_factor, int64_t q_stride, int64_t k_stride) {
  const int t = blockIdx.x;
  const int half = n_rot / 2;
  const float p = static_cast<float>(pos[t]);
  float* qt = q ? q + t * q_stride : nullptr;  // null only when its head count is 0
  float* kt = k ? k + t * k_stride : nullptr;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float angle = __fmul_rn(inv_freq[i], p);
    double sd, cd;
    sincos(static_cast<double>(angle), &sd, &cd);
    const float c = __fmul_rn(static_cast<float>(cd), attn_factor);
    const float s = __fmul_rn(static_cast<float>(sd), attn_factor);
    const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    for (int h = 0; h < n_head; ++h) rotate(qt + h * head_dim, a, b, c, s);
    for (int h = 0; h < n_head_kv; ++h) rotate(kt + h * head_dim, a, b, c, s);
  }
}

}  // namespace

std::vector<float> rope_inv_freq(double theta, int n_rot, double linear_factor,
                                 const float* freq_factors) {
  if (n_rot <= 0 || n_rot % 2 != 0) throw Error("rope_inv_freq: n_rot " + std::to_string(n_rot) + " must be even and positive");
  if (!(theta > 0)) throw Error("rope_inv_freq: theta must be positive");
  if (!(linear_factor > 0)) throw Error("rope_inv_freq: linear scaling factor must be positive");
  const int half = n_rot / 2;
  std::vector<float> out(half);
  for (int i = 0; i < half; ++i) {
    double freq = std::pow(theta, -2.0 * i / n_rot);  // same expression as RopeFreqs::make
    freq /= linear_factor;
    if (freq_factors) {
      if (!(freq_factors[i] > 0))
        throw Error("rope_inv_freq: frequency factor " + std::to_string(i) + " must be positive");
      freq /= freq_factors[i];
    }
    out[i] = static_cast<float>(freq);
  }
  return out;
}

void rope_inplace(float* q, float* k, const int32_t* pos, const float* inv_freq, const RopeArgs& a,
                  cudaStream_t stream) {
  const auto shape = [&] {
    return "n_tokens " + std::to_string(a.n_tokens) + ", n_head " + std::to_string(a.n_head) +
           ", n_head_kv " + std::to_string(a.n_head_kv) + ", head_dim " + std::to_string(a.head_dim) +
           ", n_rot " + std::to_string(a.n_rot);
  };
  if (a.n_tokens < 0 || a.n_head < 0 || a.n_head_kv < 0 || a.head_dim <= 0)
    throw Error("rope_inplace: bad shape (" + shape() + ")");
  if (a.n_rot <= 0 || a.n_rot % 2 != 0 || a.n_rot > a.head_dim)
    throw Error("rope_inplace: n_rot must be even, positive and <= head_dim (" + shape() + ")");
  const int64_t q_stride = a.q_row_stride ? a.q_row_stride : int64_t(a.n_head) * a.head_dim;
  const int64_t k_stride = a.k_row_stride ? a.k_row_stride : int64_t(a.n_head_kv) * a.head_dim;
  if (q_stride < int64_t(a.n_head) * a.head_dim || k_stride < int64_t(a.n_head_kv) * a.head_dim)
    throw Error("rope_inplace: row stride smaller than the heads it holds (" + shape() + ")");
  if (a.n_tokens == 0 || a.n_head + a.n_head_kv == 0) return;
  if ((a.n_head > 0 && !q) || (a.n_head_kv > 0 && !k) || !pos || !inv_freq)
    throw Error("rope_inplace: null pointer");
  const int half = a.n_rot / 2;
  const int threads = half >= 256 ? 256 : ((half + 31) / 32) * 32;
  rope_kernel<<<static_cast<unsigned>(a.n_tokens), threads, 0, stream>>>(
      a.n_head > 0 ? q : nullptr, a.n_head_kv > 0 ? k : nullptr, pos, inv_freq, a.n_head,
      a.n_head_kv, a.head_dim, a.n_rot, a.neox, a.attn_factor, q_stride, k_stride);
  RZ_CUDA_CHECK_LAUNCH("rope_kernel");
}

}  // namespace rz::gpu

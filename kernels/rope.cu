// Rotary position embedding kernels and their tables (see rope.hpp).
//   rope_kernel:       no cos/sin table. One thread block per token; a thread owns one frequency
//                      pair i: it computes that pair's cos/sin once (in double, as the CPU
//                      executor does) and rotates pair i of every Q and K head of the token.
//   rope_table_kernel: with a table from rope_cs_table. One thread per (token, head, pair) reads
//                      c and s from the table (cs_of() for positions outside it) and rotates.
//   rope_cs_kernel:    fills the table, one thread per (position, pair), with cs_of().
// cs_of() is the one place the angle / cos / sin arithmetic lives, so all three agree bit for bit.
#include "kernels/launch.cuh"
#include "kernels/rope.hpp"

#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "kernels/cuda_check.hpp"

namespace rz::gpu {
namespace {

__device__ __forceinline__ void rotate(float* __restrict__ x, int a, int b, float c, float s) {
  const float x0 = x[a], x1 = x[b];
  x[a] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
  x[b] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

// c and s of pair i at position p: fp32 angle, sincos in double, rounded to fp32, times
// attn_factor (cpu/cpu_ops.cpp's rope_table arithmetic).
__device__ __forceinline__ void cs_of(float inv_freq_i, int p, float attn_factor, float& c,
                                      float& s) {
  const float angle = __fmul_rn(inv_freq_i, static_cast<float>(p));
  double sd, cd;
  sincos(static_cast<double>(angle), &sd, &cd);
  c = __fmul_rn(static_cast<float>(cd), attn_factor);
  s = __fmul_rn(static_cast<float>(sd), attn_factor);
}

// grid (n_tokens); threads loop over pairs i < n_rot / 2
__global__ void rope_kernel(float* __restrict__ q, float* __restrict__ k,
                            const int32_t* __restrict__ pos, const float* __restrict__ inv_freq,
                            int n_head, int n_head_kv, int head_dim, int n_rot, bool neox,
                            float attn_factor, int64_t q_stride, int64_t k_stride) {
  grid_dependency_sync();
  const int t = blockIdx.x;
  const int half = n_rot / 2;
  const int p = pos[t];
  float* qt = q ? q + t * q_stride : nullptr;  // null only when its head count is 0
  float* kt = k ? k + t * k_stride : nullptr;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float c, s;
    cs_of(inv_freq[i], p, attn_factor, c, s);
    const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    for (int h = 0; h < n_head; ++h) rotate(qt + h * head_dim, a, b, c, s);
    for (int h = 0; h < n_head_kv; ++h) rotate(kt + h * head_dim, a, b, c, s);
  }
}

constexpr int kTableThreads = 256;

// grid ceil(n_tokens * (n_head + n_head_kv) * half / kTableThreads): element
// e = (t * (n_head + n_head_kv) + hh) * half + i is pair i of head hh of token t (Q heads first,
// then K heads).
__global__ void __launch_bounds__(kTableThreads)
    rope_table_kernel(float* __restrict__ q, float* __restrict__ k, const int32_t* __restrict__ pos,
                      const float* __restrict__ inv_freq, const float* __restrict__ table,
                      int n_pos, int n_tokens, int n_head, int n_head_kv, int head_dim, int n_rot,
                      bool neox, float attn_factor, int64_t q_stride, int64_t k_stride) {
  grid_dependency_sync();
  const int half = n_rot / 2;
  const int heads = n_head + n_head_kv;
  const int64_t e = int64_t(blockIdx.x) * kTableThreads + threadIdx.x;
  if (e >= int64_t(n_tokens) * heads * half) return;
  const int i = static_cast<int>(e % half);
  const int64_t th = e / half;
  const int hh = static_cast<int>(th % heads);
  const int64_t t = th / heads;
  const int p = pos[t];
  float c, s;
  if (p >= 0 && p < n_pos) {
    const float* cs = table + int64_t(p) * n_rot + 2 * i;
    c = cs[0];
    s = cs[1];
  } else {
    cs_of(inv_freq[i], p, attn_factor, c, s);
  }
  float* x = hh < n_head ? q + t * q_stride + int64_t(hh) * head_dim
                         : k + t * k_stride + int64_t(hh - n_head) * head_dim;
  const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
  rotate(x, a, b, c, s);
}

// grid ceil(n_pos * half / kTableThreads): element e = p * half + i
__global__ void __launch_bounds__(kTableThreads)
    rope_cs_kernel(const float* __restrict__ inv_freq, int n_rot, float attn_factor, int n_pos,
                   float* __restrict__ cs) {
  grid_dependency_sync();
  const int half = n_rot / 2;
  const int64_t e = int64_t(blockIdx.x) * kTableThreads + threadIdx.x;
  if (e >= int64_t(n_pos) * half) return;
  const int i = static_cast<int>(e % half);
  const int p = static_cast<int>(e / half);
  float c, s;
  cs_of(inv_freq[i], p, attn_factor, c, s);
  cs[int64_t(p) * n_rot + 2 * i] = c;
  cs[int64_t(p) * n_rot + 2 * i + 1] = s;
}

unsigned blocks_for(int64_t n, const char* what) {
  const int64_t blocks = (n + kTableThreads - 1) / kTableThreads;
  if (blocks > 0x7fffffff) throw Error(std::string(what) + ": too many elements for one launch");
  return static_cast<unsigned>(blocks);
}

}  // namespace

std::vector<float> rope_inv_freq(double theta, int n_rot, double linear_factor,
                                 const float* freq_factors) {
  if (n_rot <= 0 || n_rot % 2 != 0)
    throw Error("rope_inv_freq: n_rot " + std::to_string(n_rot) + " must be even and positive");
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
           ", n_head_kv " + std::to_string(a.n_head_kv) + ", head_dim " +
           std::to_string(a.head_dim) + ", n_rot " + std::to_string(a.n_rot);
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
  if (a.cs_table && a.cs_positions < 0) throw Error("rope_inplace: negative cs_positions");
  const int half = a.n_rot / 2;
  if (a.cs_table) {
    const int64_t n = int64_t(a.n_tokens) * (a.n_head + a.n_head_kv) * half;
    launch_kernel(rope_table_kernel, blocks_for(n, "rope_inplace"), kTableThreads, 0, stream,
                  a.n_head > 0 ? q : nullptr, a.n_head_kv > 0 ? k : nullptr, pos, inv_freq,
                  a.cs_table, a.cs_positions, a.n_tokens, a.n_head, a.n_head_kv, a.head_dim,
                  a.n_rot, a.neox, a.attn_factor, q_stride, k_stride);
    RZ_CUDA_CHECK_LAUNCH("rope_table_kernel");
    return;
  }
  const int threads = half >= 256 ? 256 : ((half + 31) / 32) * 32;
  launch_kernel(rope_kernel, static_cast<unsigned>(a.n_tokens), threads, 0, stream,
                a.n_head > 0 ? q : nullptr, a.n_head_kv > 0 ? k : nullptr, pos, inv_freq, a.n_head,
                a.n_head_kv, a.head_dim, a.n_rot, a.neox, a.attn_factor, q_stride, k_stride);
  RZ_CUDA_CHECK_LAUNCH("rope_kernel");
}

void rope_cs_table(const float* inv_freq, int n_rot, float attn_factor, int n_pos, float* cs,
                   cudaStream_t stream) {
  if (n_rot <= 0 || n_rot % 2 != 0 || n_pos < 0)
    throw Error("rope_cs_table: bad shape (n_rot " + std::to_string(n_rot) + ", n_pos " +
                std::to_string(n_pos) + "): n_rot must be even and positive, n_pos >= 0");
  if (n_pos == 0) return;
  if (!inv_freq || !cs) throw Error("rope_cs_table: null pointer");
  const int64_t n = int64_t(n_pos) * (n_rot / 2);
  launch_kernel(rope_cs_kernel, blocks_for(n, "rope_cs_table"), kTableThreads, 0, stream, inv_freq,
                n_rot, attn_factor, n_pos, cs);
  RZ_CUDA_CHECK_LAUNCH("rope_cs_kernel");
}

}  // namespace rz::gpu

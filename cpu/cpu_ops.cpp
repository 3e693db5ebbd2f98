// Forward-pass building blocks of the CPU executor (see cpu_ops.hpp).
#include "cpu/cpu_ops.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "formats/common.hpp"

namespace rz {

float dot_f32(const float* a, const float* b, int n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8)
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  s0 = _mm256_add_ps(s0, s1);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  float r = _mm_cvtss_f32(s);
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

void rms_norm(const float* x, const float* w, float* y, int n, float eps) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / n + eps));
  for (int i = 0; i < n; ++i) y[i] = x[i] * inv * w[i];
}

void rope_table(const RopeFreqs& f, int pos, float* cs) {
  const int half = static_cast<int>(f.inv_freq.size());
  for (int i = 0; i < half; ++i) {
    // The angle is formed in fp32 as the reference implementations do.
    const float angle = f.inv_freq[i] * static_cast<float>(pos);
    cs[2 * i] = static_cast<float>(std::cos(double(angle))) * f.attn_factor;
    cs[2 * i + 1] = static_cast<float>(std::sin(double(angle))) * f.attn_factor;
  }
}

void rope_apply(float* x, const float* cs, int n_rot, bool neox) {
  const int half = n_rot / 2;
  for (int i = 0; i < half; ++i) {
    const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    const float c = cs[2 * i], s = cs[2 * i + 1];
    const float x0 = x[a], x1 = x[b];
    x[a] = x0 * c - x1 * s;
    x[b] = x0 * s + x1 * c;
  }
}

void attend_head(const float* q, const float* k, const float* v, const int32_t* blocks,
                 int block_size, int64_t stride, int n_pos, int head_dim, float scale,
                 float* scores, float* out, int first) {
  const int64_t block_stride = int64_t{block_size} * stride;
  first = std::clamp(first, 0, std::max(n_pos - 1, 0));
  // Positions [first, n_pos) block by block: block b holds p0 .. p0 + block_size - 1, of which
  // j0 .. n - 1 are in range.
  const int b0 = first / block_size;
  float mx = -INFINITY;
  for (int b = b0, p0 = b0 * block_size; p0 < n_pos; p0 += block_size, ++b) {
    const float* kb = k + blocks[b] * block_stride;
    const int n = std::min(block_size, n_pos - p0);
    for (int j = std::max(first - p0, 0); j < n; ++j) {
      scores[p0 + j] = dot_f32(q, kb + j * stride, head_dim) * scale;
      mx = std::max(mx, scores[p0 + j]);
    }
  }
  float sum = 0;
  for (int p = first; p < n_pos; ++p) {
    scores[p] = std::exp(scores[p] - mx);
    sum += scores[p];
  }
  const float inv = 1.0f / sum;
  std::fill(out, out + head_dim, 0.0f);
  for (int b = b0, p0 = b0 * block_size; p0 < n_pos; p0 += block_size, ++b) {
    const float* vb = v + blocks[b] * block_stride;
    const int n = std::min(block_size, n_pos - p0);
    for (int j = std::max(first - p0, 0); j < n; ++j) {
      const float w = scores[p0 + j] * inv;
      const float* vp = vb + j * stride;
      for (int d = 0; d < head_dim; ++d) out[d] += w * vp[d];
    }
  }
}

void geglu(float* gate, const float* up, int64_t n) {
  const float k = static_cast<float>(std::sqrt(2.0 / std::numbers::pi));
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    gate[i] = 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x))) * up[i];
  }
}

void softcap(float* x, size_t n, float cap) {
  for (size_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void swiglu(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

}  // namespace rz

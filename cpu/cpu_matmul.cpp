// Quantized × fp32 matrix products (see cpu_matmul.hpp). Each weight type has a loader that
// turns chunk c (32 consecutive elements) of a row into four __m256 of fp32; one kernel template
// multiplies that chunk into the accumulators of up to 8 tokens, so the dequantization of a
// weight chunk is paid once per 8 tokens and the row is read from memory once per step.
#include "cpu/cpu_matmul.hpp"

#include <immintrin.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "cpu/thread_pool.hpp"
#include "formats/common.hpp"
#include "quants/quant_blocks.hpp"
#include "quants/quants.hpp"

namespace rz {
namespace {

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Eight int32 lanes from 8 bytes, as fp32.
inline __m256 u8x8_to_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }

// ---- loaders: chunk c (elements 32c .. 32c+31) of a row into w[0..3] ----

struct LoadF32 {
  static void load(const uint8_t* row, int64_t c, __m256 w[4]) {
    const float* p = reinterpret_cast<const float*>(row) + 32 * c;
    for (int k = 0; k < 4; ++k) w[k] = _mm256_loadu_ps(p + 8 * k);
  }
};

struct LoadF16 {
  static void load(const uint8_t* row, int64_t c, __m256 w[4]) {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + 32 * c;
    for (int k = 0; k < 4; ++k)
      w[k] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8 * k)));
  }
};

struct LoadBF16 {
  static void load(const uint8_t* row, int64_t c, __m256 w[4]) {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + 32 * c;
    for (int k = 0; k < 4; ++k) {
      __m256i v =
          _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8 * k)));
      w[k] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    }
  }
};

struct LoadQ8_0 {
  static void load(const uint8_t* row, int64_t c, __m256 w[4]) {
    const BlockQ8_0* b = reinterpret_cast<const BlockQ8_0*>(row) + c;
    __m256 d = _mm256_set1_ps(h2f(b->d));
    for (int k = 0; k < 4; ++k) {
      __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b->qs + 8 * k));
      w[k] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
    }
  }
};

// 16 bytes of packed nibbles: element j (j < 16) is the low nibble of byte j, element j + 16 the
// high nibble (Q4_0 and Q4_1 layout). w[k] = q * d + m.
inline void nibbles16(const uint8_t* qs, __m256 d, __m256 m, __m256 w[4]) {
  __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  __m128i lo = _mm_and_si128(v, mask);
  __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask);
  w[0] = _mm256_fmadd_ps(u8x8_to_ps(lo), d, m);
  w[1] = _mm256_fmadd_ps(u8x8_to_ps(_mm_srli_si128(lo, 8)), d, m);
  w[2] = _mm256_fmadd_ps(u8x8_to_ps(hi), d, m);
  w[3] = _mm256_fmadd_ps(u8x8_to_ps(_mm_srli_si128(hi, 8)), d, m);
}

struct LoadQ4_0 {
  static void load(const uint8_t* row, int64_t c, __m256 w[4]) {
    const BlockQ4_0* b = reinterpret_cast<const BlockQ4_0*>(row) + c;
    float d = h2f(b->d);
    nibbles16(b->qs, _mm256_set1_ps(d), _mm256_set1_ps(-8.0f * d), w);
  }
};

struct LoadQ4_1 {
  static void load(const uint8_t* row, int64_t c, __m256 w[4]) {
    const BlockQ4_1* b = reinterpret_cast<const BlockQ4_1*>(row) + c;
    nibbles16(b->qs, _mm256_set1_ps(h2f(b->d)), _mm256_set1_ps(h2f(b->m)), w);
  }
};

// 6-bit scale and min j (0..7) of a Q4_K/Q5_K super-block.
inline void scale_min_k4(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// 32 bytes -> four __m256 of their values times `scale[k/2]` (k = group of 8 elements).
inline void bytes32_to_ps(__m256i q, bool is_signed, __m256 s0, __m256 s1, __m256 bias0,
                          __m256 bias1, __m256 w[4]) {
  __m128i a = _mm256_castsi256_si128(q), b = _mm256_extracti128_si256(q, 1);
  auto cv = [&](__m128i v) {
    return is_signed ? _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v))
                     : _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
  };
  w[0] = _mm256_fmadd_ps(cv(a), s0, bias0);
  w[1] = _mm256_fmadd_ps(cv(_mm_srli_si128(a, 8)), s0, bias0);
  w[2] = _mm256_fmadd_ps(cv(b), s1, bias1);
  w[3] = _mm256_fmadd_ps(cv(_mm_srli_si128(b, 8)), s1, bias1);
}

struct LoadQ4_K {
  // Super-block of 256: sub-block j (32 elements) uses bytes qs[32*(j/2) ..], low nibbles for
  // even j and high nibbles for odd j; w = d*sc_j*q - dmin*m_j.
  static void load(const uint8_t* row, int64_t c, __m256 w[4]) {
    const BlockQ4_K* b = reinterpret_cast<const BlockQ4_K*>(row) + c / 8;
    int j = static_cast<int>(c % 8), sc, m;
    scale_min_k4(j, b->scales, sc, m);
    __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs + 32 * (j / 2)));
    if (j & 1) v = _mm256_srli_epi16(v, 4);
    v = _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
    __m256 s = _mm256_set1_ps(h2f(b->d) * sc), bias = _mm256_set1_ps(-h2f(b->dmin) * m);
    bytes32_to_ps(v, false, s, s, bias, bias, w);
  }
};

struct LoadQ6_K {
  // Super-block of 256 in two halves of 128; in half n, group g (0..3) of 32 takes low nibbles
  // of ql[64n + 32*(g&1) ..] (g < 2) or high nibbles (g >= 2), with bits 2g..2g+1 of
  // qh[32n ..] on top; value - 32; elements 0..15 and 16..31 of the group each have a scale.
  static void load(const uint8_t* row, int64_t c, __m256 w[4]) {
    const BlockQ6_K* b = reinterpret_cast<const BlockQ6_K*>(row) + c / 8;
    int j = static_cast<int>(c % 8), n = j / 4, g = j % 4;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
    __m256i ql =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->ql + 64 * n + 32 * (g & 1)));
    if (g >= 2) ql = _mm256_srli_epi16(ql, 4);
    ql = _mm256_and_si256(ql, m4);
    __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qh + 32 * n));
    qh = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * g)), m2);
    __m256i q =
        _mm256_sub_epi8(_mm256_or_si256(ql, _mm256_slli_epi16(qh, 4)), _mm256_set1_epi8(32));
    float d = h2f(b->d);
    const int8_t* sc = b->scales + 8 * n + 2 * g;
    __m256 zero = _mm256_setzero_ps();
    bytes32_to_ps(q, true, _mm256_set1_ps(d * sc[0]), _mm256_set1_ps(d * sc[1]), zero, zero, w);
  }
};

// ---- the kernel: one weight row times NT token rows ----

// y[t * y_stride] = row · x[t * cols ..] for t < NT. cols is a multiple of 32 except for F32
// (the generic path), whose tail is handled in scalar code.
template <class L, int NT>
void row_times_tokens(const uint8_t* row, const float* x, int64_t cols, float* y,
                      int64_t y_stride) {
  // Independent partial sums per token keep the FMA pipes busy when NT is small.
  constexpr int P = NT == 1 ? 4 : NT == 2 ? 4 : NT <= 4 ? 2 : 1;
  __m256 acc[NT][P];
  for (int t = 0; t < NT; ++t)
    for (int p = 0; p < P; ++p) acc[t][p] = _mm256_setzero_ps();
  const int64_t chunks = cols / 32;
  for (int64_t c = 0; c < chunks; ++c) {
    __m256 w[4];
    L::load(row, c, w);
    for (int t = 0; t < NT; ++t) {
      const float* xp = x + t * cols + 32 * c;
      for (int k = 0; k < 4; ++k)
        acc[t][k % P] = _mm256_fmadd_ps(w[k], _mm256_loadu_ps(xp + 8 * k), acc[t][k % P]);
    }
  }
  for (int t = 0; t < NT; ++t) {
    __m256 s = acc[t][0];
    for (int p = 1; p < P; ++p) s = _mm256_add_ps(s, acc[t][p]);
    float r = hsum(s);
    if constexpr (std::is_same_v<L, LoadF32>) {
      const float* wr = reinterpret_cast<const float*>(row);
      for (int64_t i = chunks * 32; i < cols; ++i) r += wr[i] * x[t * cols + i];
    }
    y[t * y_stride] = r;
  }
}

using RowFn = void (*)(const uint8_t*, const float*, int64_t, float*, int64_t);

template <class L>
struct Kernels {
  static constexpr RowFn fns[9] = {nullptr,
                                   row_times_tokens<L, 1>,
                                   row_times_tokens<L, 2>,
                                   row_times_tokens<L, 3>,
                                   row_times_tokens<L, 4>,
                                   row_times_tokens<L, 5>,
                                   row_times_tokens<L, 6>,
                                   row_times_tokens<L, 7>,
                                   row_times_tokens<L, 8>};
};

const RowFn* fast_kernels(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return Kernels<LoadF32>::fns;
    case GgmlType::F16: return Kernels<LoadF16>::fns;
    case GgmlType::BF16: return Kernels<LoadBF16>::fns;
    case GgmlType::Q8_0: return Kernels<LoadQ8_0>::fns;
    case GgmlType::Q4_0: return Kernels<LoadQ4_0>::fns;
    case GgmlType::Q4_1: return Kernels<LoadQ4_1>::fns;
    case GgmlType::Q4_K: return Kernels<LoadQ4_K>::fns;
    case GgmlType::Q6_K: return Kernels<LoadQ6_K>::fns;
    default: return nullptr;
  }
}

constexpr int kTokGroup = 8;

}  // namespace

bool matmul_has_fast_path(GgmlType t) { return fast_kernels(t) != nullptr; }

bool matmul_supports(GgmlType t) {
  return matmul_has_fast_path(t) || type_traits(t).can_dequantize;
}

void matmul_rows(const MatmulJob& job, int n_tok, int64_t r0, int64_t r1, bool force_generic) {
  const TensorView& w = *job.w;
  const int64_t cols = w.cols();
  const RowFn* fns = force_generic ? nullptr : fast_kernels(w.type);
  // The fast kernels work on whole chunks of 32; F32 handles a tail, others need cols % 32 == 0.
  if (fns && w.type != GgmlType::F32 && cols % 32 != 0) fns = nullptr;
  thread_local std::vector<float> scratch;  // dequantized rows of a block, generic path
  // Blocks of rows: within a block every token group passes over the same few weight rows, which
  // stay in L1/L2 (this matters for prefill; a decode step has a single token group).
  constexpr int64_t kRowBlock = 16;
  for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
    const int64_t re = std::min(r1, rb + kRowBlock);
    const RowFn* k = fns;
    const uint8_t* base = nullptr;
    size_t row_stride = w.row_bytes();
    if (!k) {
      if (static_cast<int64_t>(scratch.size()) < kRowBlock * cols) scratch.resize(kRowBlock * cols);
      for (int64_t r = rb; r < re; ++r)
        dequantize_row(w.type, w.row(r), scratch.data() + (r - rb) * cols, cols);
      base = reinterpret_cast<const uint8_t*>(scratch.data());
      row_stride = cols * sizeof(float);
      k = Kernels<LoadF32>::fns;
    } else {
      base = w.row(rb);
    }
    for (int t0 = 0; t0 < n_tok; t0 += kTokGroup) {
      const int nt = std::min(kTokGroup, n_tok - t0);
      for (int64_t r = rb; r < re; ++r)
        k[nt](base + (r - rb) * row_stride, job.x + t0 * cols, cols, job.y + t0 * job.y_stride + r,
              job.y_stride);
    }
  }
}

void matmul(ThreadPool& pool, std::span<const MatmulJob> jobs, int n_tok) {
  int64_t total = 0;
  for (const auto& j : jobs) {
    if (!matmul_supports(j.w->type))
      throw Error(j.w->name + ": no matrix product for type " +
                  std::string(type_traits(j.w->type).name));
    total += j.w->rows();
  }
  pool.parallel_for(total, 16, [&](int64_t b, int64_t e, int) {
    int64_t base = 0;
    for (const auto& j : jobs) {
      int64_t rows = j.w->rows();
      int64_t lo = std::max(b, base), hi = std::min(e, base + rows);
      if (lo < hi) matmul_rows(j, n_tok, lo - base, hi - base);
      base += rows;
    }
  });
}

}  // namespace rz

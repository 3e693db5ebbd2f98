// Quantizers for Q2_K, Q3_K, IQ4_NL and IQ4_XS: rz's own, not ggml's (which searches scales with
// weighted errors; gguf.quants has none of these). They exist so that `rz synth` can write files
// of llama-quantize's Q2_K, Q3_K_M and IQ4_XS layouts: the executors read the same bytes, so
// parity tests and benchmarks do not depend on how good the scales are. Each takes the plain
// choice: a sub-block's scale from its extreme values, the super-block scale from the largest
// sub-block scale, every quant the nearest level (tests/quants/quants_test.cpp bounds the round
// trip error).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quants/quants.hpp"
#include "quants/quants_impl.hpp"

RZ_QUANTS_NO_FP_CONTRACT

namespace rz::quants {
namespace {

int round_int(float v) { return static_cast<int>(std::nearbyint(v)); }

// The index of the kIq4Values entry nearest to v.
int nearest_iq4(float v) {
  int best = 0;
  float err = std::fabs(v - kIq4Values[0]);
  for (int k = 1; k < 16; ++k) {
    const float e = std::fabs(v - kIq4Values[k]);
    if (e < err) err = e, best = k;
  }
  return best;
}

// The element of largest magnitude of x[0..n) (its sign kept).
float extreme(const float* x, int n) {
  float m = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > std::fabs(m)) m = x[i];
  return m;
}

// 32 elements to kIq4Values indices against scale d (d == 0: all index of value 1, the one
// nearest 0), packed as IQ4_NL / IQ4_XS store them (element j < 16 low nibble of qs[j]).
void iq4_indices(const float* x, float d, uint8_t* qs) {
  const float id = d != 0 ? 1.0f / d : 0.0f;
  for (int j = 0; j < 16; ++j) {
    const int a = nearest_iq4(x[j] * id), b = nearest_iq4(x[j + 16] * id);
    qs[j] = static_cast<uint8_t>(a | b << 4);
  }
}

}  // namespace

// Per 16 elements: min m <= 0 and scale (max - m) / 3; the 4-bit sub-scales and sub-mins against
// d = max scale / 15 and dmin = max min / 15; quants 0..3 of (x + dmin mn) / (d sc).
void quantize_q2_k(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ2_K*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i, ++y, src += QK_K) {
    float scale[16], mins[16], max_scale = 0, max_min = 0;
    for (int k = 0; k < 16; ++k) {
      float lo = 0, hi = src[16 * k];
      for (int l = 0; l < 16; ++l)
        lo = std::fmin(lo, src[16 * k + l]), hi = std::fmax(hi, src[16 * k + l]);
      scale[k] = (hi - lo) / 3;
      mins[k] = -lo;
      max_scale = std::fmax(max_scale, scale[k]);
      max_min = std::fmax(max_min, mins[k]);
    }
    y->d = fp32_to_fp16(max_scale / 15);
    y->dmin = fp32_to_fp16(max_min / 15);
    const float d = fp16_to_fp32(y->d), dmin = fp16_to_fp32(y->dmin);
    std::memset(y->qs, 0, sizeof(y->qs));
    for (int k = 0; k < 16; ++k) {
      const int sc = d > 0 ? std::clamp(round_int(scale[k] / d), 0, 15) : 0;
      const int mn = dmin > 0 ? std::clamp(round_int(mins[k] / dmin), 0, 15) : 0;
      y->scales[k] = static_cast<uint8_t>(sc | mn << 4);
      const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(mn);
      for (int l = 0; l < 16; ++l) {
        const int p = 16 * k + l;  // element p = 128 c + 32 j + m: 2 bits at 2 j of qs[32 c + m]
        const int q = dl > 0 ? std::clamp(round_int((src[p] + ml) / dl), 0, 3) : 0;
        y->qs[32 * (p / 128) + p % 32] |= static_cast<uint8_t>(q << (2 * ((p / 32) % 4)));
      }
    }
  }
}

// Per 16 elements: a signed scale s = extreme / -4 (levels -4..3); the 6-bit sub-scales
// (s / d) + 32 against d = max |s| / 31; quants -4..3 stored as v = q + 4: its low 2 bits in qs,
// its bit 2 in hmask (set: no -4).
void quantize_q3_k(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ3_K*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i, ++y, src += QK_K) {
    float s[16], max_abs = 0;
    for (int k = 0; k < 16; ++k) {
      s[k] = extreme(src + 16 * k, 16) / -4;
      max_abs = std::fmax(max_abs, std::fabs(s[k]));
    }
    y->d = fp32_to_fp16(max_abs / 31);
    const float d = fp16_to_fp32(y->d);
    std::memset(y->qs, 0, sizeof(y->qs));
    std::memset(y->hmask, 0, sizeof(y->hmask));
    std::memset(y->scales, 0, sizeof(y->scales));
    for (int k = 0; k < 16; ++k) {
      const int sc = d > 0 ? std::clamp(round_int(s[k] / d), -32, 31) + 32 : 32;
      // low nibble: k < 8 in scales[k], else the high nibble of scales[k - 8]; bits 4, 5 at shift
      // 2 (k / 4) of scales[8 + k % 4]
      if (k < 8)
        y->scales[k] |= static_cast<uint8_t>(sc & 0x0f);
      else
        y->scales[k - 8] |= static_cast<uint8_t>((sc & 0x0f) << 4);
      y->scales[8 + k % 4] |= static_cast<uint8_t>((sc >> 4) << (2 * (k / 4)));
      const float dl = d * static_cast<float>(sc - 32);
      for (int l = 0; l < 16; ++l) {
        const int p = 16 * k + l;
        const int v = (dl != 0 ? std::clamp(round_int(src[p] / dl), -4, 3) : 0) + 4;
        y->qs[32 * (p / 128) + p % 32] |= static_cast<uint8_t>((v & 3) << (2 * ((p / 32) % 4)));
        if (v & 4) y->hmask[p % 32] |= static_cast<uint8_t>(1u << (p / 32));
      }
    }
  }
}

// d = extreme / -127 (the first table value), indices of the nearest table values.
void quantize_iq4_nl(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockIQ4_NL*>(dst);
  for (int64_t i = 0; i < n / QK4_NL; ++i, ++y, src += QK4_NL) {
    y->d = fp32_to_fp16(extreme(src, 32) / kIq4Values[0]);
    iq4_indices(src, fp16_to_fp32(y->d), y->qs);
  }
}

// Per 32 elements a scale extreme / -127; the 6-bit sub-scales (s / d) + 32 against d = max |s|
// / 31; indices against each sub-block's d (sc - 32).
void quantize_iq4_xs(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockIQ4_XS*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i, ++y, src += QK_K) {
    float s[8], max_abs = 0;
    for (int k = 0; k < 8; ++k) {
      s[k] = extreme(src + 32 * k, 32) / kIq4Values[0];
      max_abs = std::fmax(max_abs, std::fabs(s[k]));
    }
    y->d = fp32_to_fp16(max_abs / 31);
    const float d = fp16_to_fp32(y->d);
    y->scales_h = 0;
    std::memset(y->scales_l, 0, sizeof(y->scales_l));
    for (int k = 0; k < 8; ++k) {
      const int sc = d > 0 ? std::clamp(round_int(s[k] / d), -32, 31) + 32 : 32;
      y->scales_l[k / 2] |= static_cast<uint8_t>((sc & 0x0f) << (4 * (k % 2)));
      y->scales_h |= static_cast<uint16_t>((sc >> 4) << (2 * k));
      iq4_indices(src + 32 * k, d * static_cast<float>(sc - 32), y->qs + 16 * k);
    }
  }
}

}  // namespace rz::quants

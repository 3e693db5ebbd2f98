// Quantization to Q4_K and Q6_K: ggml's reference quantizers (quantize_row_q4_K_ref and
// quantize_row_q6_K_ref, the ones llama.cpp uses without an importance matrix), written with every
// float32 operation in ggml's order and rounded separately (no FMA). gguf.quants 0.19 has no
// quantizer for these types; tests/quants/quants_reference.py carries an independent numpy port.
#include <cmath>
#include <cstring>

#include "quants/quants.hpp"
#include "quants/quants_impl.hpp"

RZ_QUANTS_NO_FP_CONTRACT

namespace rz::quants {
namespace {

constexpr float kGroupMaxEps = 1e-15f;

// ggml's nearest_int: adding 1.5 * 2^23 rounds to an integer (ties to even) for |v| < 2^22.
int nearest_int(float v) {
  const float t = v + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &t, 4);
  return (i & 0x007fffff) - 0x00400000;
}

int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

// Asymmetric quantization of n values to 0..nmax with scale and (non-positive) min, searching
// nstep+1 trial scales for the least weighted squared error (ggml's make_qkx2_quants, use_mad
// false). Returns the scale; *neg_min receives -min.
float make_qkx2_quants(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep) {
  float mn = x[0], mx = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < mn) mn = x[i];
    if (x[i] > mx) mx = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (mn > 0) mn = 0;
  if (mx == mn) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *neg_min = -mn;
    return 0.0f;
  }
  const float fnmax = static_cast<float>(nmax);
  float iscale = fnmax / (mx - mn);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_int(nearest_int(iscale * (x[i] - mn)), 0, nmax);
    L[i] = static_cast<uint8_t>(l);
    float diff = scale * static_cast<float>(l) + mn - x[i];
    diff = diff * diff;
    best_error += w[i] * diff;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + fnmax) / (mx - mn);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(nearest_int(iscale * (x[i] - mn)), 0, nmax);
      Laux[i] = static_cast<uint8_t>(l);
      const float fl = static_cast<float>(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * static_cast<float>(Laux[i]) + this_min - x[i];
        diff = diff * diff;
        cur_error += w[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        mn = this_min;
      }
    }
  }
  *neg_min = -mn;
  return scale;
}

// Symmetric quantization of n values to -nmax..nmax-1 (stored + nmax), weights x^2, trying 18
// scales around nmax / max (ggml's make_qx_quants, rmse_type 1, no importance weights).
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  const float fnmax = static_cast<float>(nmax);
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    const float fl = static_cast<float>(l);
    sumlx += w * x[i] * fl;
    suml2 += w * fl * fl;
  }
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(fnmax + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      const float fl = static_cast<float>(l);
      sumlx += w * x[i] * fl;
      suml2 += w * fl * fl;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        L[i] = static_cast<int8_t>(nmax + clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

}  // namespace

namespace {

// The Q4_K / Q5_K part of ggml's quantize_row_q{4,5}_K_ref: per 32-element sub-block the levels
// L (0..nmax) with a scale and min from make_qkx2_quants, the scales and mins packed to 6 bits
// against the block's d and dmin, then L again against the packed values. Block: BlockQ4_K or
// BlockQ5_K (the same d, dmin, scales fields).
template <class Block>
void quantize_k4_scales(const float* x, int nmax, float rmin, int nstep, Block* y, uint8_t* L) {
  uint8_t Laux[32];
  float weights[32], mins[QK_K / 32], scales[QK_K / 32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < QK_K / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin,
                                 0.1f, nstep);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  std::memset(y->scales, 0, sizeof(y->scales));
  for (int j = 0; j < QK_K / 32; ++j) {
    uint8_t ls = static_cast<uint8_t>(nearest_int(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(nearest_int(inv_min * mins[j]));
    if (ls > 63) ls = 63;
    if (lm > 63) lm = 63;
    if (j < 4) {
      y->scales[j] = ls;
      y->scales[j + 4] = lm;
    } else {
      y->scales[j + 4] = static_cast<uint8_t>((ls & 0x0f) | (lm & 0x0f) << 4);
      y->scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      y->scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  y->d = fp32_to_fp16(max_scale / 63.0f);
  y->dmin = fp32_to_fp16(max_min / 63.0f);
  const float d_all = fp16_to_fp32(y->d), dmin_all = fp16_to_fp32(y->dmin);
  for (int j = 0; j < QK_K / 32; ++j) {
    uint8_t sc, m;
    if (j < 4) {
      sc = y->scales[j] & 63;
      m = y->scales[j + 4] & 63;
    } else {
      sc = static_cast<uint8_t>((y->scales[j + 4] & 0x0f) | ((y->scales[j - 4] >> 6) << 4));
      m = static_cast<uint8_t>((y->scales[j + 4] >> 4) | ((y->scales[j] >> 6) << 4));
    }
    const float d = d_all * static_cast<float>(sc);
    if (d == 0) continue;  // keeps the levels make_qkx2_quants chose
    const float dm = dmin_all * static_cast<float>(m);
    for (int ii = 0; ii < 32; ++ii) {
      L[32 * j + ii] =
          static_cast<uint8_t>(clamp_int(nearest_int((x[32 * j + ii] + dm) / d), 0, nmax));
    }
  }
}

}  // namespace

void quantize_q4_k(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_K*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i, ++y, src += QK_K) {
    uint8_t L[QK_K];
    quantize_k4_scales(src, 15, -1.0f, 20, y, L);
    uint8_t* q = y->qs;
    for (int j = 0; j < QK_K; j += 64, q += 32) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | L[j + l + 32] << 4);
    }
  }
}

// As Q4_K with 5-bit levels: the low nibbles as Q4_K's, the fifth bit of sub-block s's element l
// at bit s of qh[l].
void quantize_q5_k(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_K*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i, ++y, src += QK_K) {
    uint8_t L[QK_K];
    quantize_k4_scales(src, 31, -0.5f, 15, y, L);
    std::memset(y->qh, 0, sizeof(y->qh));
    uint8_t* ql = y->qs;
    for (int j = 0, s = 0; j < QK_K; j += 64, s += 2, ql += 32) {
      for (int l = 0; l < 32; ++l) {
        const int l1 = L[j + l], l2 = L[j + l + 32];
        y->qh[l] |= static_cast<uint8_t>((l1 >> 4) << s | (l2 >> 4) << (s + 1));
        ql[l] = static_cast<uint8_t>((l1 & 0x0f) | (l2 & 0x0f) << 4);
      }
    }
  }
}

void quantize_q6_k(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ6_K*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i, ++y, src += QK_K) {
    const float* x = src;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < QK_K / 16; ++ib) {
      scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
      const float abs_scale = std::fabs(scales[ib]);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scales[ib];
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(y, 0, sizeof(*y));
      y->d = fp32_to_fp16(0.0f);
      continue;
    }
    const float iscale = -128.0f / max_scale;
    y->d = fp32_to_fp16(1 / iscale);
    for (int ib = 0; ib < QK_K / 16; ++ib) {
      const int l = nearest_int(iscale * scales[ib]);
      y->scales[ib] = static_cast<int8_t>(l < 127 ? l : 127);
    }
    const float d_all = fp16_to_fp32(y->d);
    for (int j = 0; j < QK_K / 16; ++j) {
      const float d = d_all * static_cast<float>(y->scales[j]);
      if (d == 0) continue;  // keeps the levels make_qx_quants chose
      for (int ii = 0; ii < 16; ++ii) {
        L[16 * j + ii] =
            static_cast<int8_t>(clamp_int(nearest_int(x[16 * j + ii] / d), -32, 31) + 32);
      }
    }
    uint8_t* ql = y->ql;
    uint8_t* qh = y->qh;
    for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        // L holds 0..63 (the +32 above), so reading it as unsigned keeps every value.
        const int q1 = static_cast<uint8_t>(L[j + l]), q2 = static_cast<uint8_t>(L[j + l + 32]),
                  q3 = static_cast<uint8_t>(L[j + l + 64]),
                  q4 = static_cast<uint8_t>(L[j + l + 96]);
        ql[l] = static_cast<uint8_t>((q1 & 0x0f) | (q3 & 0x0f) << 4);
        ql[l + 32] = static_cast<uint8_t>((q2 & 0x0f) | (q4 & 0x0f) << 4);
        qh[l] = static_cast<uint8_t>((q1 >> 4) | (q2 >> 4) << 2 | (q3 >> 4) << 4 | (q4 >> 4) << 6);
      }
    }
  }
}

}  // namespace rz::quants

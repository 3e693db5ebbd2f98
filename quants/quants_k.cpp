// Dequantization of the 256-element super-block formats Q2_K, Q3_K, Q4_K, Q5_K and Q6_K, each
// product rounded as gguf.quants (numpy, float32) rounds it: (d * sub_scale) * q - (dmin *
// sub_min).
#include "quants/quants.hpp"
#include "quants/quants_impl.hpp"

RZ_QUANTS_NO_FP_CONTRACT

namespace rz::quants {
namespace {

// Q4_K / Q5_K: eight 6-bit (scale, min) pairs packed in 12 bytes.
//   bytes 0-3: scale j (bits 0-5) | scale j+4 high bits (6-7)
//   bytes 4-7: min j   (bits 0-5) | min j+4 high bits (6-7)
//   bytes 8-11: scale j+4 low 4 bits | min j+4 low 4 bits << 4
void unpack_scale_min_k4(const uint8_t* s, uint8_t sc[8], uint8_t mn[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    mn[j] = s[j + 4] & 63;
    sc[j + 4] = static_cast<uint8_t>((s[j + 8] & 0x0f) | ((s[j] >> 6) << 4));
    mn[j + 4] = static_cast<uint8_t>((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
  }
}

}  // namespace

// Element 128 c + 32 j + l: 2 bits at shift 2 j of qs[32 c + l]; sub-block of 16 has a 4-bit
// scale and a 4-bit min in scales[].
void dequantize_q2_k(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ2_K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i, ++b, dst += QK_K) {
    const float d = fp16_to_fp32(b->d), dmin = fp16_to_fp32(b->dmin);
    for (int p0 = 0; p0 < QK_K; p0 += 16) {
      const uint8_t s = b->scales[p0 / 16];
      const float dl = d * static_cast<float>(s & 0x0f);
      const float ml = dmin * static_cast<float>(s >> 4);
      const int c = p0 / 128, shift = 2 * ((p0 / 32) % 4);
      const uint8_t* q = b->qs + 32 * c + p0 % 32;
      for (int l = 0; l < 16; ++l) dst[p0 + l] = dl * static_cast<float>((q[l] >> shift) & 3) - ml;
    }
  }
}

// As Q2_K for the low 2 bits; bit (p / 32) of hmask[p % 32] set means no -4 offset; 6-bit signed
// scales (offset 32) per 16 elements: low 4 bits in bytes 0-7, high 2 bits in bytes 8-11.
void dequantize_q3_k(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ3_K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i, ++b, dst += QK_K) {
    const float d = fp16_to_fp32(b->d);
    for (int k = 0; k < 16; ++k) {
      const int lo = k < 8 ? (b->scales[k] & 0x0f) : (b->scales[k - 8] >> 4);
      const int hi = (b->scales[8 + k % 4] >> (2 * (k / 4))) & 3;
      const float dl = d * static_cast<float>((lo | hi << 4) - 32);
      const int p0 = 16 * k;
      const int c = p0 / 128, shift = 2 * ((p0 / 32) % 4), hbit = p0 / 32;
      const uint8_t* q = b->qs + 32 * c + p0 % 32;
      const uint8_t* hm = b->hmask + p0 % 32;
      for (int l = 0; l < 16; ++l) {
        const int v = ((q[l] >> shift) & 3) - (((hm[l] >> hbit) & 1) ? 0 : 4);
        dst[p0 + l] = dl * static_cast<float>(v);
      }
    }
  }
}

// Sub-block s (32 elements): low nibble (s even) or high nibble (s odd) of qs[32 (s / 2) + l].
void dequantize_q4_k(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i, ++b, dst += QK_K) {
    const float d = fp16_to_fp32(b->d), dmin = fp16_to_fp32(b->dmin);
    uint8_t sc[8], mn[8];
    unpack_scale_min_k4(b->scales, sc, mn);
    for (int s = 0; s < 8; ++s) {
      const float ds = d * static_cast<float>(sc[s]);
      const float ms = dmin * static_cast<float>(mn[s]);
      const uint8_t* q = b->qs + 32 * (s / 2);
      const int shift = 4 * (s % 2);
      float* y = dst + 32 * s;
      for (int l = 0; l < 32; ++l) y[l] = ds * static_cast<float>((q[l] >> shift) & 0x0f) - ms;
    }
  }
}

// As Q4_K, plus bit s of qh[l] as the fifth bit of sub-block s.
void dequantize_q5_k(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i, ++b, dst += QK_K) {
    const float d = fp16_to_fp32(b->d), dmin = fp16_to_fp32(b->dmin);
    uint8_t sc[8], mn[8];
    unpack_scale_min_k4(b->scales, sc, mn);
    for (int s = 0; s < 8; ++s) {
      const float ds = d * static_cast<float>(sc[s]);
      const float ms = dmin * static_cast<float>(mn[s]);
      const uint8_t* q = b->qs + 32 * (s / 2);
      const int shift = 4 * (s % 2);
      float* y = dst + 32 * s;
      for (int l = 0; l < 32; ++l) {
        const int v = ((q[l] >> shift) & 0x0f) | ((b->qh[l] >> s) & 1) << 4;
        y[l] = ds * static_cast<float>(v) - ms;
      }
    }
  }
}

// Element 128 c + 32 k + l: low 4 bits from ql[64 c + l + 32 (k % 2)] (nibble k / 2), high 2
// bits at shift 2 k of qh[32 c + l]; value - 32, times d * scales[p / 16]. K is a template
// argument so that the shifts are constants and the loops vectorise.
template <int K>
void dequantize_q6_k_quarter(const BlockQ6_K* b, float d, int c, float* y) {
  const uint8_t* ql = b->ql + 64 * c + 32 * (K % 2);
  const uint8_t* qh = b->qh + 32 * c;
  const int sidx = 8 * c + 2 * K;
  const float d0 = d * static_cast<float>(b->scales[sidx]);
  const float d1 = d * static_cast<float>(b->scales[sidx + 1]);
  for (int l = 0; l < 16; ++l) {
    const int v = (((ql[l] >> (4 * (K / 2))) & 0x0f) | ((qh[l] >> (2 * K)) & 3) << 4) - 32;
    y[l] = d0 * static_cast<float>(v);
  }
  for (int l = 16; l < 32; ++l) {
    const int v = (((ql[l] >> (4 * (K / 2))) & 0x0f) | ((qh[l] >> (2 * K)) & 3) << 4) - 32;
    y[l] = d1 * static_cast<float>(v);
  }
}

void dequantize_q6_k(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i, ++b, dst += QK_K) {
    const float d = fp16_to_fp32(b->d);
    for (int c = 0; c < 2; ++c) {
      float* y = dst + 128 * c;
      dequantize_q6_k_quarter<0>(b, d, c, y);
      dequantize_q6_k_quarter<1>(b, d, c, y + 32);
      dequantize_q6_k_quarter<2>(b, d, c, y + 64);
      dequantize_q6_k_quarter<3>(b, d, c, y + 96);
    }
  }
}

}  // namespace rz::quants

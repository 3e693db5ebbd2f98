// 32-element block formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: dequantization and quantization, each
// step rounded as gguf.quants (numpy, float32) does it, so the bytes and floats match bit for bit.
#include <cmath>
#include <cstring>

#include "quants/quants.hpp"
#include "quants/quants_impl.hpp"

RZ_QUANTS_NO_FP_CONTRACT

namespace rz::quants {
namespace {

template <typename Block>
const Block* blocks_of(const void* src) {
  return static_cast<const Block*>(src);
}

// 5-bit high bits: bit j of the little-endian 32-bit qh is element j's bit 4.
uint32_t load_qh(const uint8_t qh[4]) {
  return static_cast<uint32_t>(qh[0]) | static_cast<uint32_t>(qh[1]) << 8 |
         static_cast<uint32_t>(qh[2]) << 16 | static_cast<uint32_t>(qh[3]) << 24;
}

void store_qh(uint8_t qh[4], uint32_t v) {
  for (int i = 0; i < 4; ++i) qh[i] = static_cast<uint8_t>(v >> (8 * i));
}

// numpy's np.trunc(v).astype(np.uint8).clip(0, hi) for the 0..hi+1 range these quantizers make.
uint8_t trunc_clip(float v, int hi) {
  const int q = static_cast<int>(std::trunc(v));
  return static_cast<uint8_t>(q < 0 ? 0 : q > hi ? hi : q);
}

// The value of largest magnitude, the first one where several tie (numpy's argmax of abs).
float signed_absmax(const float* x, int n) {
  float amax = std::fabs(x[0]), max = x[0];
  for (int j = 1; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

// numpy's min / max reductions: on a tie the later element wins, which decides the sign of a
// zero min or max (and so the sign bit of a zero Q4_1 / Q5_1 m field).
void min_max(const float* x, int n, float* mn, float* mx) {
  float lo = x[0], hi = x[0];
  for (int j = 1; j < n; ++j) {
    lo = lo < x[j] ? lo : x[j];
    hi = hi > x[j] ? hi : x[j];
  }
  *mn = lo;
  *mx = hi;
}

// gguf's np_roundf: half away from zero, sign(v) * (floor|v| + floor(2 (|v| - floor|v|))).
float round_away(float v) {
  const float a = std::fabs(v);
  const float fl = std::floor(a);
  const float b = fl + std::floor(2.0f * (a - fl));
  return v > 0 ? b : v < 0 ? -b : 0.0f;
}

}  // namespace

void dequantize_q4_0(const void* src, float* dst, int64_t n) {
  const auto* b = blocks_of<BlockQ4_0>(src);
  for (int64_t i = 0; i < n / QK4_0; ++i, ++b, dst += QK4_0) {
    const float d = fp16_to_fp32(b->d);
    for (int j = 0; j < QK4_0 / 2; ++j) dst[j] = d * static_cast<float>((b->qs[j] & 0x0f) - 8);
    for (int j = 0; j < QK4_0 / 2; ++j)
      dst[j + QK4_0 / 2] = d * static_cast<float>((b->qs[j] >> 4) - 8);
  }
}

void dequantize_q4_1(const void* src, float* dst, int64_t n) {
  const auto* b = blocks_of<BlockQ4_1>(src);
  for (int64_t i = 0; i < n / QK4_1; ++i, ++b, dst += QK4_1) {
    const float d = fp16_to_fp32(b->d), m = fp16_to_fp32(b->m);
    for (int j = 0; j < QK4_1 / 2; ++j) dst[j] = d * static_cast<float>(b->qs[j] & 0x0f) + m;
    for (int j = 0; j < QK4_1 / 2; ++j)
      dst[j + QK4_1 / 2] = d * static_cast<float>(b->qs[j] >> 4) + m;
  }
}

void dequantize_q5_0(const void* src, float* dst, int64_t n) {
  const auto* b = blocks_of<BlockQ5_0>(src);
  for (int64_t i = 0; i < n / QK5_0; ++i, ++b, dst += QK5_0) {
    const float d = fp16_to_fp32(b->d);
    const uint32_t qh = load_qh(b->qh);
    for (int j = 0; j < QK5_0 / 2; ++j) {
      const int lo = (b->qs[j] & 0x0f) | static_cast<int>((qh >> j) & 1u) << 4;
      const int hi = (b->qs[j] >> 4) | static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      dst[j] = d * static_cast<float>(lo - 16);
      dst[j + QK5_0 / 2] = d * static_cast<float>(hi - 16);
    }
  }
}

void dequantize_q5_1(const void* src, float* dst, int64_t n) {
  const auto* b = blocks_of<BlockQ5_1>(src);
  for (int64_t i = 0; i < n / QK5_1; ++i, ++b, dst += QK5_1) {
    const float d = fp16_to_fp32(b->d), m = fp16_to_fp32(b->m);
    const uint32_t qh = load_qh(b->qh);
    for (int j = 0; j < QK5_1 / 2; ++j) {
      const int lo = (b->qs[j] & 0x0f) | static_cast<int>((qh >> j) & 1u) << 4;
      const int hi = (b->qs[j] >> 4) | static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      dst[j] = d * static_cast<float>(lo) + m;
      dst[j + QK5_1 / 2] = d * static_cast<float>(hi) + m;
    }
  }
}

void dequantize_q8_0(const void* src, float* dst, int64_t n) {
  const auto* b = blocks_of<BlockQ8_0>(src);
  for (int64_t i = 0; i < n / QK8_0; ++i, ++b, dst += QK8_0) {
    const float d = fp16_to_fp32(b->d);
    for (int j = 0; j < QK8_0; ++j) dst[j] = static_cast<float>(b->qs[j]) * d;
  }
}

void quantize_q4_0(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ4_0*>(dst);
  for (int64_t i = 0; i < n / QK4_0; ++i, ++b, src += QK4_0) {
    const float d = signed_absmax(src, QK4_0) / -8.0f;
    const float id = d == 0 ? 0.0f : 1.0f / d;
    b->d = fp32_to_fp16(d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      const uint8_t lo = trunc_clip(src[j] * id + 8.5f, 15);
      const uint8_t hi = trunc_clip(src[j + QK4_0 / 2] * id + 8.5f, 15);
      b->qs[j] = static_cast<uint8_t>(lo | hi << 4);
    }
  }
}

void quantize_q4_1(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ4_1*>(dst);
  for (int64_t i = 0; i < n / QK4_1; ++i, ++b, src += QK4_1) {
    float mn, mx;
    min_max(src, QK4_1, &mn, &mx);
    const float d = (mx - mn) / 15.0f;
    const float id = d == 0 ? 0.0f : 1.0f / d;
    b->d = fp32_to_fp16(d);
    b->m = fp32_to_fp16(mn);
    for (int j = 0; j < QK4_1 / 2; ++j) {
      const uint8_t lo = trunc_clip((src[j] - mn) * id + 0.5f, 15);
      const uint8_t hi = trunc_clip((src[j + QK4_1 / 2] - mn) * id + 0.5f, 15);
      b->qs[j] = static_cast<uint8_t>(lo | hi << 4);
    }
  }
}

void quantize_q5_0(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ5_0*>(dst);
  for (int64_t i = 0; i < n / QK5_0; ++i, ++b, src += QK5_0) {
    const float d = signed_absmax(src, QK5_0) / -16.0f;
    const float id = d == 0 ? 0.0f : 1.0f / d;
    b->d = fp32_to_fp16(d);
    uint8_t q[QK5_0];
    uint32_t qh = 0;
    for (int j = 0; j < QK5_0; ++j) {
      q[j] = trunc_clip(src[j] * id + 16.5f, 31);
      qh |= static_cast<uint32_t>(q[j] >> 4) << j;
    }
    for (int j = 0; j < QK5_0 / 2; ++j)
      b->qs[j] = static_cast<uint8_t>((q[j] & 0x0f) | q[j + QK5_0 / 2] << 4);
    store_qh(b->qh, qh);
  }
}

void quantize_q5_1(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ5_1*>(dst);
  for (int64_t i = 0; i < n / QK5_1; ++i, ++b, src += QK5_1) {
    float mn, mx;
    min_max(src, QK5_1, &mn, &mx);
    const float d = (mx - mn) / 31.0f;
    const float id = d == 0 ? 0.0f : 1.0f / d;
    b->d = fp32_to_fp16(d);
    b->m = fp32_to_fp16(mn);
    uint8_t q[QK5_1];
    uint32_t qh = 0;
    for (int j = 0; j < QK5_1; ++j) {
      q[j] = trunc_clip((src[j] - mn) * id + 0.5f, 31);
      qh |= static_cast<uint32_t>(q[j] >> 4) << j;
    }
    for (int j = 0; j < QK5_1 / 2; ++j)
      b->qs[j] = static_cast<uint8_t>((q[j] & 0x0f) | q[j + QK5_1 / 2] << 4);
    store_qh(b->qh, qh);
  }
}

void quantize_q8_0(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / QK8_0; ++i, ++b, src += QK8_0) {
    float amax = 0.0f;
    for (int j = 0; j < QK8_0; ++j) amax = std::fmax(amax, std::fabs(src[j]));
    const float d = amax / 127.0f;
    const float id = d == 0 ? 0.0f : 1.0f / d;
    b->d = fp32_to_fp16(d);
    for (int j = 0; j < QK8_0; ++j) b->qs[j] = static_cast<int8_t>(round_away(src[j] * id));
  }
}

}  // namespace rz::quants

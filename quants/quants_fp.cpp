// Plain float formats: fp16 and bf16 conversions (numpy's and gguf.quants' exact rounding and NaN
// rules) and the F32/F16/BF16 rows of dequantize_row / quantize_row.
#include <cstring>
#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#endif

#include "quants/quants.hpp"
#include "quants/quants_impl.hpp"

namespace rz {
namespace {

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Exact fp16 -> fp32, as numpy's npy_halfbits_to_floatbits: NaN payloads are kept as they are
// (a signalling NaN stays signalling), subnormals become normal floats.
uint32_t half_to_float_bits(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return sign | 0x7f800000u | (man << 13);       // inf, NaN
  if (exp != 0) return sign | ((exp + 112) << 23) | (man << 13);  // normal: bias 15 -> 127
  if (man == 0) return sign;                                      // +-0
  int e = 113;                                                    // subnormal: normalise
  while ((man & 0x400u) == 0) {
    man <<= 1;
    --e;
  }
  return sign | (static_cast<uint32_t>(e) << 23) | ((man & 0x3ffu) << 13);
}

// [65536] fp32 value of every fp16 bit pattern; built once, used by the hot dequantize loops.
struct HalfTable {
  float v[65536];
  HalfTable() {
    for (uint32_t h = 0; h < 65536; ++h)
      v[h] = bits_float(half_to_float_bits(static_cast<uint16_t>(h)));
  }
};

const float* half_table() {
  static const HalfTable table;
  return table.v;
}

}  // namespace

float fp16_to_fp32(uint16_t h) { return half_table()[h]; }

// Round to nearest even, overflow to inf, as numpy's npy_floatbits_to_halfbits. NaN keeps the top
// ten payload bits (0x7c00 | payload >> 13, bumped to 0x7c01 where that would read as inf).
uint16_t fp32_to_fp16(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t fexp = (u >> 23) & 0xffu;
  const uint32_t fman = u & 0x7fffffu;
  if (fexp == 0xff) {
    if (fman == 0) return sign | 0x7c00u;
    uint16_t h = static_cast<uint16_t>(0x7c00u + (fman >> 13));
    if (h == 0x7c00u) ++h;
    return sign | h;
  }
  const int e = static_cast<int>(fexp) - 127;
  if (e >= 16) return sign | 0x7c00u;  // |f| >= 65536 overflows
  if (e >= -14) {                      // normal half (rounding may carry into inf)
    uint32_t h = (static_cast<uint32_t>(e + 15) << 10) | (fman >> 13);
    const uint32_t rem = fman & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  if (e < -25) return sign;  // below half the smallest subnormal (float subnormals too)
  // Subnormal half: value / 2^-24 = m * 2^(e+1), m with its implicit bit.
  const uint32_t m = fman | 0x800000u;
  const int shift = -(e + 1);  // 14..24
  uint32_t h = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float bf16_to_fp32(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

// gguf.quants.BF16: NaN becomes quiet (upper half kept, bit 22 set), then round to nearest even.
uint16_t fp32_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) u = (u & 0xffff0000u) | 0x00400000u;
  return static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

namespace quants {

void dequantize_f32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void dequantize_f16(const void* src, float* dst, int64_t n) {
  const float* table = half_table();
  const auto* s = static_cast<const uint8_t*>(src);
  int64_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
  // Eight at a time in hardware, except where a lane holds inf/NaN: the hardware quiets
  // signalling NaNs, numpy keeps them, so those chunks take the table below.
  const __m128i exp_mask = _mm_set1_epi16(0x7c00);
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 2 * i));
    if (_mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(h, exp_mask), exp_mask)) != 0) {
      for (int64_t k = i; k < i + 8; ++k) {
        uint16_t v;
        std::memcpy(&v, s + 2 * k, 2);
        dst[k] = table[v];
      }
      continue;
    }
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, s + 2 * i, 2);
    dst[i] = table[h];
  }
}

void dequantize_bf16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, s + 2 * i, 2);
    dst[i] = bf16_to_fp32(h);
  }
}

void quantize_f32(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void quantize_f16(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = fp32_to_fp16(src[i]);
    std::memcpy(d + 2 * i, &h, 2);
  }
}

void quantize_bf16(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = fp32_to_bf16(src[i]);
    std::memcpy(d + 2 * i, &h, 2);
  }
}

}  // namespace quants
}  // namespace rz
